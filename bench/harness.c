/* SPDX-License-Identifier: MIT */
/*
 * The run harness of shmthrottle-bench.  Workers and the coordinator share
 * one anonymous MAP_SHARED region, made before any fork, holding the phase
 * word and one result block per worker; so threads and processes are run
 * by the same code and report the same way.
 */
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* Ops between two looks at the phase word: often enough that a stop is
 * seen within microseconds, rarely enough to cost nothing.  A worker that
 * times every op (Redis: each takes microseconds, and on a busy machine
 * milliseconds) looks after every op, so that a short run still counts
 * its ops however slow they are. */
#define BATCH 32
/* How long the coordinator waits for workers to attach, and to exit. */
#define ATTACH_WAIT_NS (30ULL * 1000000000ULL)
#define EXIT_WAIT_NS (15ULL * 1000000000ULL)

enum { PH_WAIT, PH_WARM, PH_MEASURE, PH_STOP };

struct wres {
	alignas(128) uint64_t ops, grants, errors;
	int first_err;
	struct hist h;
};

struct shared {
	alignas(128) atomic_int phase;
	alignas(128) atomic_int ready;
	atomic_int failed;
	struct wres w[];
};

struct wctx {
	struct shared *sh;
	const struct bench_conf *c;
	const struct bench_sys *sys;
	const struct zipf *z;
	void *pctx;
	int worker;
};

double bench_ticks_per_ns = 1.0;
static volatile sig_atomic_t harness_aborted;

static inline uint64_t
ticks(void)
{
#if defined(__x86_64__)
	unsigned aux;

	return __rdtscp(&aux);
#else
	return bench_now_ns();
#endif
}

uint64_t
bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void
sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ULL),
		(long)(ns % 1000000000ULL) };

	nanosleep(&ts, NULL);
}

void
harness_init(void)
{
	uint64_t t0 = bench_now_ns(), k0 = ticks(), t1, k1;

	sleep_ns(20 * 1000000ULL);
	t1 = bench_now_ns();
	k1 = ticks();
	bench_ticks_per_ns = (double)(k1 - k0) / (double)(t1 - t0);
	if (bench_ticks_per_ns <= 0)
		bench_ticks_per_ns = 1.0;
}

void
harness_abort(void)
{
	harness_aborted = 1;
}

static void
pin_worker(int w)
{
	cpu_set_t allowed, one;
	int n = 0, want;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return;
	want = w % CPU_COUNT(&allowed);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || n++ != want)
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
		return;
	}
}

/* The measured loop.  Counters are snapshot when the worker first sees
 * MEASURE and when it sees STOP, so warm-up ops are not counted; one op in
 * c->sample (a power of two) is timed into the histogram. */
static void
worker_loop(struct wctx *x, bench_op_fn op, void *opctx, struct wres *r)
{
	const uint64_t mask = x->c->sample - 1;
	uint64_t rnd = x->c->seed ^ ((uint64_t)(x->worker + 1) *
	    0x9E3779B97F4A7C15ULL), n = 0, grants = 0, n0 = 0, g0 = 0;
	const struct zipf *z = x->z;
	const int batch = x->c->sample == 1 ? 1 : BATCH;
	int ph, measuring = 0;

	while ((ph = atomic_load_explicit(&x->sh->phase,
	    memory_order_acquire)) != PH_STOP) {
		if (ph == PH_MEASURE && !measuring) {
			measuring = 1;
			n0 = n;
			g0 = grants;
		}
		for (int i = 0; i < batch; i++, n++) {
			uint64_t arg = z ? zipf_draw(z, bench_rand(&rnd)) : 0;
			uint64_t t0 = 0;
			int rc;

			if ((n & mask) == 0)
				t0 = ticks();
			rc = op(opctx, arg);
			if ((n & mask) == 0 && measuring)
				hist_record(&r->h, (uint64_t)((double)(ticks() -
				    t0) / bench_ticks_per_ns));
			if (rc > 0) {
				grants++;
			} else if (rc < 0) {
				r->errors++;
				r->first_err = rc;
				atomic_store(&x->sh->failed, 1);
				goto out;
			}
		}
	}
out:
	r->ops = measuring ? n - n0 : 0;
	r->grants = measuring ? grants - g0 : 0;
}

static void *
worker_thread(void *arg)
{
	struct wctx *x = arg;
	struct wres *r = &x->sh->w[x->worker];
	bench_op_fn op = NULL;
	void *opctx = NULL;
	int rc;

	if (x->c->pin)
		pin_worker(x->worker);
	rc = x->sys->attach_thread(x->pctx, x->worker, &opctx, &op);
	if (rc < 0) {
		r->first_err = rc;
		r->errors = 1;
		atomic_store(&x->sh->failed, 1);
		atomic_fetch_add(&x->sh->ready, 1);
		return NULL;
	}
	atomic_fetch_add(&x->sh->ready, 1);
	while (atomic_load(&x->sh->phase) == PH_WAIT)
		sched_yield();
	worker_loop(x, op, opctx, r);
	x->sys->detach_thread(opctx);
	return NULL;
}

/* Attach once for this process, then run c->threads workers, the first
 * numbered FIRST.  Returns 0 or the first error. */
static int
run_process(struct shared *sh, const struct bench_conf *c,
    const struct bench_sys *sys, void *g, const struct zipf *z, int first)
{
	int n = c->threads, rc, started = 0;
	pthread_t *tid = calloc((size_t)n, sizeof(*tid));
	struct wctx *x = calloc((size_t)n, sizeof(*x));
	void *pctx = NULL;

	if (tid == NULL || x == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = sys->attach(g, c, &pctx)) < 0)
		goto fail;
	for (; started < n; started++) {
		x[started] = (struct wctx){ sh, c, sys, z, pctx, first + started };
		if ((rc = -pthread_create(&tid[started], NULL, worker_thread,
		    &x[started])) < 0)
			break;
	}
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	sys->detach(pctx);
	if (started == n) {
		free(tid);
		free(x);
		return 0;
	}
fail:
	/* Count the workers that will never report in, so the coordinator
	 * does not wait for them. */
	sh->w[first + started].first_err = rc;
	sh->w[first + started].errors = 1;
	atomic_store(&sh->failed, 1);
	atomic_fetch_add(&sh->ready, n - started);
	free(tid);
	free(x);
	return rc;
}

static void
progress(const struct bench_conf *c, uint64_t t0, uint64_t total, int end)
{
	int width = 40, done;
	double f = end ? 1.0 : (double)(bench_now_ns() - t0) / (double)total;

	if (f > 1.0)
		f = 1.0;
	done = (int)(f * width);
	fprintf(stderr, "\r%-18s %-6s [%.*s%*s] %3d%%%s", c->workload,
	    c->system, done, "########################################",
	    width - done, "", (int)(f * 100), end ? "\n" : "");
}

/* Sleep NS in steps, drawing the progress bar and watching for failures
 * and aborts; returns early on either. */
static void
coord_wait(struct shared *sh, const struct bench_conf *c, uint64_t ns,
    uint64_t t_all, uint64_t total, int bar)
{
	uint64_t end = bench_now_ns() + ns;

	while (bench_now_ns() < end && !harness_aborted &&
	    !atomic_load(&sh->failed)) {
		uint64_t left = end - bench_now_ns();

		sleep_ns(left < 100000000ULL ? left : 100000000ULL);
		if (bar)
			progress(c, t_all, total, 0);
	}
}

static int
wait_ready(struct shared *sh, int workers)
{
	uint64_t deadline = bench_now_ns() + ATTACH_WAIT_NS;

	while (atomic_load(&sh->ready) < workers) {
		if (bench_now_ns() > deadline || harness_aborted)
			return -ETIMEDOUT;
		sleep_ns(1000000);
	}
	return 0;
}

/* Reap the worker processes; kill -9 those still there at the deadline
 * (a worker stuck in a peer's call must not hang the bench). */
static void
reap(pid_t *pids, int n)
{
	uint64_t deadline = bench_now_ns() + EXIT_WAIT_NS;
	int left = 0;

	for (int i = 0; i < n; i++)
		left += pids[i] > 0;

	while (left > 0) {
		for (int i = 0; i < n; i++) {
			if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) ==
			    pids[i]) {
				pids[i] = 0;
				left--;
			}
		}
		if (left > 0 && bench_now_ns() > deadline) {
			for (int i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			deadline = UINT64_MAX;
		}
		if (left > 0)
			sleep_ns(1000000);
	}
}

struct proc_arg {
	struct shared *sh;
	const struct bench_conf *c;
	const struct bench_sys *sys;
	void *g;
	const struct zipf *z;
};

static void *
thread_mode(void *arg)
{
	struct proc_arg *a = arg;

	run_process(a->sh, a->c, a->sys, a->g, a->z, 0);
	return NULL;
}

/* A forked worker dies with the bench, even one killed with SIGKILL: it
 * would otherwise spin on a phase word nobody will ever set. */
static int
worker_process(struct proc_arg *a, int first)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	return run_process(a->sh, a->c, a->sys, a->g, a->z, first) < 0;
}

/* Start the workers: in this process (threads only) or in c->procs forked
 * children.  Children leave with _exit() so that nothing registered with
 * atexit() in the bench (the Redis server's stop) runs in them. */
static int
start_workers(struct proc_arg *a, pthread_t *tid, pid_t *pids)
{
	const struct bench_conf *c = a->c;

	if (c->procs == 0)
		return -pthread_create(tid, NULL, thread_mode, a);
	for (int p = 0; p < c->procs; p++) {
		pid_t pid = fork();

		if (pid < 0) {
			atomic_fetch_add(&a->sh->ready, (c->procs - p) *
			    c->threads);
			atomic_store(&a->sh->failed, 1);
			return -errno;
		}
		if (pid == 0)
			_exit(worker_process(a, p * c->threads));
		pids[p] = pid;
	}
	return 0;
}

static void
drive(struct shared *sh, const struct bench_conf *c, struct bench_result *out)
{
	uint64_t warm = (uint64_t)(c->warmup_s * 1e9);
	uint64_t dur = (uint64_t)(c->duration_s * 1e9), t_all, t0, t1;
	int bar = c->warmup_s + c->duration_s > 2.0 && c->progress;

	t_all = bench_now_ns();
	atomic_store(&sh->phase, PH_WARM);
	coord_wait(sh, c, warm, t_all, warm + dur, bar);
	t0 = bench_now_ns();
	atomic_store(&sh->phase, PH_MEASURE);
	coord_wait(sh, c, dur, t_all, warm + dur, bar);
	t1 = bench_now_ns();
	atomic_store(&sh->phase, PH_STOP);
	if (bar)
		progress(c, t_all, warm + dur, 1);
	out->elapsed_s = (double)(t1 - t0) / 1e9;
}

static int
collect(struct shared *sh, const struct bench_conf *c,
    struct bench_result *out)
{
	int rc = 0;

	for (int w = 0; w < c->workers; w++) {
		struct wres *r = &sh->w[w];

		out->ops += r->ops;
		out->grants += r->grants;
		out->errors += r->errors;
		if (r->errors && rc == 0)
			rc = r->first_err < 0 ? r->first_err : -EIO;
		hist_merge(&out->h, &r->h);
	}
	out->first_err = rc;
	out->ops_s = out->elapsed_s > 0 ? (double)out->ops / out->elapsed_s : 0;
	if (rc == 0 && harness_aborted)
		rc = -EINTR;
	return rc;
}

int
harness_run(const struct bench_conf *c, const struct bench_sys *sys,
    const struct zipf *z, struct bench_result *out)
{
	size_t sz = sizeof(struct shared) + sizeof(struct wres) *
	    (size_t)c->workers;
	struct shared *sh;
	struct proc_arg a;
	pthread_t tid;
	pid_t *pids = calloc((size_t)c->procs + 1, sizeof(*pids));
	int rc;

	memset(out, 0, sizeof(*out));
	out->conf = *c;
	sh = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
	    -1, 0);
	if (sh == MAP_FAILED || pids == NULL) {
		free(pids);
		return -ENOMEM;
	}
	a = (struct proc_arg){ sh, c, sys, NULL,
	    bench_kind_draws(c->kind) ? z : NULL };
	if ((rc = sys->setup(c, &a.g)) < 0)
		goto out;
	if ((rc = start_workers(&a, &tid, pids)) < 0) {
		atomic_store(&sh->phase, PH_STOP);
		goto join;
	}
	if ((rc = wait_ready(sh, c->workers)) == 0 && !atomic_load(&sh->failed))
		drive(sh, c, out);
	atomic_store(&sh->phase, PH_STOP);
	if (c->procs == 0)
		pthread_join(tid, NULL);
join:
	if (c->procs > 0)
		reap(pids, c->procs);
	if (rc == 0)
		rc = collect(sh, c, out);
out:
	sys->teardown(a.g);
	munmap(sh, sz);
	free(pids);
	return rc;
}
