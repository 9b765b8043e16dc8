/* SPDX-License-Identifier: MIT */
/*
 * kill -9 in the middle of the work: four worker processes call the four
 * stress limiters (20 ms window) with the real clock while the parent kills
 * one at a random moment, at least 200 times, and starts a new one each time.
 * The survivors keep getting answers, every call returns within 100 ms of
 * its own running time, no window certainly holds more grants than allowed,
 * and once the workers stop, window + slack later, all capacity is back.
 *
 * A call's time is its wall time less the time the kernel kept the thread
 * runnable but off the CPU (run_delay in /proc/thread-self/schedstat): on a
 * shared two-core machine a preempted thread can wait 100 ms for the CPU,
 * which says nothing about the library.  Both figures are printed.
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KL_WORKERS 4
#define KL_KILLS 200
#define KL_LOG_CAP (1U << 18)
#define KL_CALL_MAX_NS 100000000ULL

struct kl_shared {
	uint64_t max_adj_ns;     /* slowest call, less its run delay */
	uint64_t max_wall_ns;
	uint64_t started;        /* workers that reached their first call */
};

static struct {
	char seg[96];
	shmt_t *h;
	struct tl_log *log;
	struct kl_shared *sh;
	pid_t pids[KL_WORKERS];
} kl_g;

static uint64_t
kl_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Time this thread has spent runnable but not running, or 0 if unknown. */
static uint64_t
kl_run_delay(int fd)
{
	char buf[96];
	ssize_t n;
	char *p;

	if (fd < 0 || (n = pread(fd, buf, sizeof(buf) - 1, 0)) <= 0)
		return 0;
	buf[n] = '\0';
	p = strchr(buf, ' ');
	return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

static void
kl_max(uint64_t *at, uint64_t v)
{
	uint64_t cur = __atomic_load_n(at, __ATOMIC_RELAXED);

	while (v > cur && !__atomic_compare_exchange_n(at, &cur, v, 0,
	    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void
kl_worker(uint64_t seed)
{
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	uint64_t rs = seed, i;
	shmt_t *h;

	if (shmt_open(kl_g.seg, &h) != 0)
		_exit(2);
	__atomic_fetch_add(&kl_g.sh->started, 1, __ATOMIC_RELAXED);
	for (i = tu_rand(&rs) % TL_NLIM;
	    !__atomic_load_n(&kl_g.log->stop, __ATOMIC_RELAXED); i++) {
		uint64_t d0 = kl_run_delay(fd), t0 = kl_mono(), t1, d1;

		tl_stress_call(h, kl_g.log, (unsigned)(i % TL_NLIM), &rs);
		t1 = kl_mono();
		d1 = kl_run_delay(fd);
		kl_max(&kl_g.sh->max_wall_ns, t1 - t0);
		kl_max(&kl_g.sh->max_adj_ns, t1 - t0 - (d1 - d0 < t1 - t0 ?
		    d1 - d0 : t1 - t0));
	}
	shmt_close(h);
	_exit(0);
}

static pid_t
kl_spawn(uint64_t seed)
{
	pid_t pid = fork();

	if (pid == 0)
		kl_worker(seed);
	return pid;
}

static void
kl_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ULL),
		(long)(ns % 1000000000ULL) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

static int
kl_teardown(void **state)
{
	int i, rc = 0;

	for (i = 0; i < KL_WORKERS; i++) {
		if (kl_g.pids[i] > 0) {
			kill(kl_g.pids[i], SIGKILL);
			waitpid(kl_g.pids[i], NULL, 0);
			kl_g.pids[i] = 0;
		}
	}
	if (kl_g.log != NULL) {
		tl_log_unmap(kl_g.log);
		kl_g.log = NULL;
	}
	if (kl_g.sh != NULL) {
		munmap(kl_g.sh, sizeof(*kl_g.sh));
		kl_g.sh = NULL;
	}
	if (kl_g.h != NULL) {
		shmt_close(kl_g.h);
		kl_g.h = NULL;
		rc = shmt_unlink(kl_g.seg);
	}
	return rc == 0 ? 0 : -1;
}

static void
test_kill_workers(void **state)
{
	uint64_t seed = tu_seed("test_kill_workers"), rs = seed;
	uint64_t bad, grants[TL_NLIM], t0;
	int i, k, status;

	tu_segname(kl_g.seg, sizeof(kl_g.seg), "kill");
	assert_int_equal(shmt_create(kl_g.seg, NULL, &kl_g.h), 0);
	assert_int_equal(tl_stress_define(kl_g.h), 0);
	kl_g.log = tl_log_map(KL_LOG_CAP);
	assert_non_null(kl_g.log);
	kl_g.sh = mmap(NULL, sizeof(*kl_g.sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(kl_g.sh != MAP_FAILED);
	t0 = kl_mono();
	for (i = 0; i < KL_WORKERS; i++) {
		kl_g.pids[i] = kl_spawn(tu_rand(&rs));
		assert_true(kl_g.pids[i] > 0);
	}
	for (k = 0; k < KL_KILLS; k++) {
		/* A random moment: 0.1 to 3 ms from the last kill. */
		kl_sleep_ns(100000 + tu_rand(&rs) % 2900000);
		i = (int)(tu_rand(&rs) % KL_WORKERS);
		assert_int_equal(kill(kl_g.pids[i], SIGKILL), 0);
		assert_int_equal(waitpid(kl_g.pids[i], &status, 0),
		    kl_g.pids[i]);
		assert_true(WIFSIGNALED(status) &&
		    WTERMSIG(status) == SIGKILL);
		kl_g.pids[i] = kl_spawn(tu_rand(&rs));
		assert_true(kl_g.pids[i] > 0);
	}
	__atomic_store_n(&kl_g.log->stop, 1, __ATOMIC_RELAXED);
	for (i = 0; i < KL_WORKERS; i++) {
		assert_int_equal(waitpid(kl_g.pids[i], &status, 0),
		    kl_g.pids[i]);
		kl_g.pids[i] = 0;
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	printf("# %d kills in %.2f s, %" PRIu64 " workers started, %" PRIu64
	    " calls, slowest call %" PRIu64 " us (wall %" PRIu64 " us), %"
	    PRIu64 " errors (first %" PRId64 ")\n", KL_KILLS,
	    (double)(kl_mono() - t0) / 1e9, kl_g.sh->started, kl_g.log->calls,
	    kl_g.sh->max_adj_ns / 1000, kl_g.sh->max_wall_ns / 1000,
	    kl_g.log->errors, kl_g.log->first_error);
	assert_true(kl_g.log->n < kl_g.log->cap);
	bad = tl_stress_check(kl_g.log, grants);
	assert_int_equal(bad, 0);
	assert_true(kl_g.sh->max_adj_ns < KL_CALL_MAX_NS);
	for (i = 0; i < TL_NLIM; i++)
		assert_true(grants[i] > 0);
	kl_sleep_ns(TL_WINDOW_NS + TL_SLACK_NS + 1000000);
	tl_stress_capacity_back(kl_g.h);
	assert_int_equal(kl_g.log->errors, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_kill_workers, kl_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
