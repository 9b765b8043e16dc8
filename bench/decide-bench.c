/* SPDX-License-Identifier: MIT */
/*
 * decide-bench: what decisions cost, single-threaded, one process.
 *   - shmt_try_use_key against shmt_acquire without and with a decision
 *     (the decision must not make the plain call slower), and against a
 *     resolved limiter (shmt_limiter_try) and a 40-byte name;
 *   - a rate-mode grant against its floor: one clock read and one 8-byte
 *     CAS (target: at most 1.3 x);
 *   - per-client calls over 1,000 client ids of 8 bytes in turn:
 *     shmt_try_use against shmt_acquire with a decision;
 *   - the wake latency of shmt_wait across processes: from a give-back in
 *     one process to the waiter's grant in another, p50 and p99.
 * One SUMMARY line per measurement.  Usage: decide-bench [-n OPS] [-w WAKES]
 */
#include "shmthrottle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A name of 40 bytes: what the thread's last-limiter check compares. */
#define LONG_NAME "a-rather-long-limiter-name-of-forty-byte"

static uint64_t
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

enum { OP_TRY, OP_ACQ_NULL, OP_ACQ_DECIDE, OP_FLOOR8, OP_RESOLVED,
    OP_CLIENT_TRY, OP_CLIENT_ACQ, OP_CLIENT_ACQ_NULL };

/* The per-client rows' ids: 0..CLIENTS-1 as 8-byte words, in turn. */
#define CLIENTS 1000U

/* The resolved limiter of OP_RESOLVED. */
static shmt_limiter_t *resolved;

/* ns per op of OP on limiter NAME, the best of 5 runs of N ops. */
static double
run(shmt_t *h, const char *name, int op, uint64_t n)
{
	double best = 1e18;
	static uint64_t word;

	for (int r = 0; r < 5; r++) {
		uint64_t t0 = mono(), sink = 0;
		shmt_decision_t d;

		for (uint64_t i = 0; i < n; i++) {
			switch (op) {
			case OP_TRY:
				sink += (uint64_t)shmt_try_use_key(h, name);
				break;
			case OP_RESOLVED:
				sink += (uint64_t)shmt_limiter_try(resolved,
				    NULL, 0);
				break;
			case OP_ACQ_NULL:
				sink += (uint64_t)shmt_acquire(h, name, NULL, 0,
				    1, NULL);
				break;
			case OP_ACQ_DECIDE:
				sink += (uint64_t)shmt_acquire(h, name, NULL, 0,
				    1, &d);
				sink += d.remaining;
				break;
			case OP_CLIENT_TRY: {
				uint64_t id = i % CLIENTS;

				sink += (uint64_t)shmt_try_use(h, name, &id,
				    sizeof(id));
				break;
			}
			case OP_CLIENT_ACQ_NULL: {
				uint64_t id = i % CLIENTS;

				sink += (uint64_t)shmt_acquire(h, name, &id,
				    sizeof(id), 1, NULL);
				break;
			}
			case OP_CLIENT_ACQ: {
				uint64_t id = i % CLIENTS;

				sink += (uint64_t)shmt_acquire(h, name, &id,
				    sizeof(id), 1, &d);
				sink += d.remaining;
				break;
			}
			default: {
				uint64_t w = __atomic_load_n(&word,
				    __ATOMIC_ACQUIRE), now = mono();

				__atomic_compare_exchange_n(&word, &w,
				    (w > now ? w : now) + 1, 0,
				    __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE);
				sink += w;
			}
			}
		}
		double ns = (double)(mono() - t0) / (double)n;
		if (ns < best)
			best = ns;
		if (sink == 42)
			putchar(' ');
	}
	return best;
}

/* The wake latency: in round r a child waits on limiter "wR" (rate mode,
 * one use per 10 s, taken by the parent); the parent gives the use back
 * and the child's grant follows.  Returns 0 and fills P50/P99 (ns). */
static int
wake_latency(const char *seg, shmt_t *h, int rounds, double *p50,
    double *p99)
{
	uint64_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t *lat = calloc((size_t)rounds, sizeof(*lat));
	shmt_limit_t wk = { .limit = 1, .window_ns = 10000000000ULL,
		.mode = SHMT_MODE_GCRA, .burst = 1 };

	if (shared == MAP_FAILED || lat == NULL)
		return -ENOMEM;
	for (int r = 0; r < rounds; r++) {
		shmt_request_t rq = { NULL, NULL, 0, 1 };
		struct timespec ts = { 0, 20000000 };
		shmt_receipt_t rc;
		char name[16], b;
		int fds[2], status;
		pid_t pid;

		snprintf(name, sizeof(name), "w%d", r);
		rq.limiter = name;
		if (shmt_limiter_define(h, name, &wk) != 0 ||
		    shmt_acquire_all(h, &rq, 1, NULL, &rc) != 1 || pipe(fds))
			return -EAGAIN;
		pid = fork();
		if (pid == 0) {
			shmt_t *c;

			if (shmt_open(seg, &c) != 0 || write(fds[1], "w", 1) != 1)
				_exit(2);
			if (shmt_wait(c, name, NULL, 0, 1, 5000000000ULL,
			    NULL) != 1)
				_exit(1);
			shared[1] = mono();
			_exit(0);
		}
		if (read(fds[0], &b, 1) != 1)
			return -EIO;
		/* Let it fall asleep: its retry is 10 s away. */
		nanosleep(&ts, NULL);
		shared[0] = mono();
		if (shmt_refund(h, name, &rc) != 1)
			return -EAGAIN;
		waitpid(pid, &status, 0);
		close(fds[0]);
		close(fds[1]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return -EIO;
		lat[r] = shared[1] - shared[0];
	}
	qsort(lat, (size_t)rounds, sizeof(*lat), cmp_u64);
	*p50 = (double)lat[rounds / 2];
	*p99 = (double)lat[(rounds * 99) / 100];
	free(lat);
	munmap(shared, 4096);
	return 0;
}

int
main(int argc, char **argv)
{
	uint64_t n = 2000000;
	int wakes = 50, opt, rc;
	char seg[64];
	shmt_config_t cfg;
	shmt_t *h;
	shmt_limit_t bk = { .limit = SHMT_LIMIT_MAX, .window_ns = 3600000000000ULL,
		.slack_ns = 1000000000ULL, .slack_uses = SHMT_LIMIT_MAX };
	shmt_limit_t pc = { .limit = SHMT_LIMIT_MAX,
		.window_ns = 1000000000ULL, .slack_ns = 100000000ULL,
		.slack_uses = SHMT_LIMIT_MAX, .per_client = 1,
		.client_capacity = 2 * CLIENTS };
	shmt_limit_t gc = { .limit = 1000000000, .window_ns = 1000000000,
		.mode = SHMT_MODE_GCRA, .burst = SHMT_LIMIT_MAX };
	double p50 = 0, p99 = 0;

	while ((opt = getopt(argc, argv, "n:w:")) != -1) {
		if (opt == 'n')
			n = strtoull(optarg, NULL, 10);
		else if (opt == 'w')
			wakes = atoi(optarg);
		else
			return 2;
	}
	snprintf(seg, sizeof(seg), "/shmt-decide-bench-%d", (int)getpid());
	shmt_config_init(&cfg);
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	cfg.arena_bytes = 64ULL << 20;   /* the per-client table and rings */
	cfg.max_limiters = (uint32_t)(wakes > 0 ? wakes : 0) + 8;
	if ((rc = shmt_create(seg, &cfg, &h)) != 0 ||
	    (rc = shmt_limiter_define(h, "bk", &bk)) != 0 ||
	    (rc = shmt_limiter_define(h, "gc", &gc)) != 0 ||
	    (rc = shmt_limiter_define(h, LONG_NAME, &bk)) != 0 ||
	    (rc = shmt_limiter_define(h, "pc", &pc)) != 0) {
		fprintf(stderr, "decide-bench: %s\n", shmt_strerror(rc));
		return 1;
	}
	printf("SUMMARY bench=decide what=try_use_key mode=buckets ops=%" PRIu64
	    " ns_per_op=%.1f\n", n, run(h, "bk", OP_TRY, n));
	if ((rc = shmt_limiter_open(h, "bk", &resolved)) != 0) {
		fprintf(stderr, "decide-bench: %s\n", shmt_strerror(rc));
		return 1;
	}
	printf("SUMMARY bench=decide what=limiter_try mode=buckets ops=%" PRIu64
	    " ns_per_op=%.1f\n", n, run(h, "bk", OP_RESOLVED, n));
	printf("SUMMARY bench=decide what=try_use_key_name40 mode=buckets ops=%"
	    PRIu64 " ns_per_op=%.1f\n", n, run(h, LONG_NAME, OP_TRY, n));
	shmt_limiter_close(resolved);
	printf("SUMMARY bench=decide what=acquire_null mode=buckets ops=%" PRIu64
	    " ns_per_op=%.1f\n", n, run(h, "bk", OP_ACQ_NULL, n));
	printf("SUMMARY bench=decide what=acquire_decision mode=buckets ops=%"
	    PRIu64 " ns_per_op=%.1f\n", n, run(h, "bk", OP_ACQ_DECIDE, n));
	printf("SUMMARY bench=decide what=client_try_use mode=buckets "
	    "clients=%u ops=%" PRIu64 " ns_per_op=%.1f\n", CLIENTS, n,
	    run(h, "pc", OP_CLIENT_TRY, n));
	printf("SUMMARY bench=decide what=client_acquire_decision "
	    "mode=buckets clients=%u ops=%" PRIu64 " ns_per_op=%.1f\n",
	    CLIENTS, n, run(h, "pc", OP_CLIENT_ACQ, n));
	printf("SUMMARY bench=decide what=client_acquire_null "
	    "mode=buckets clients=%u ops=%" PRIu64 " ns_per_op=%.1f\n",
	    CLIENTS, n, run(h, "pc", OP_CLIENT_ACQ_NULL, n));
	printf("SUMMARY bench=decide what=floor_clock_cas8 ops=%" PRIu64
	    " ns_per_op=%.1f\n", n, run(h, "gc", OP_FLOOR8, n));
	printf("SUMMARY bench=decide what=try_use_key mode=gcra ops=%" PRIu64
	    " ns_per_op=%.1f\n", n, run(h, "gc", OP_TRY, n));
	if ((rc = shmt_limiter_open(h, "gc", &resolved)) != 0) {
		fprintf(stderr, "decide-bench: %s\n", shmt_strerror(rc));
		return 1;
	}
	printf("SUMMARY bench=decide what=limiter_try mode=gcra ops=%" PRIu64
	    " ns_per_op=%.1f\n", n, run(h, "gc", OP_RESOLVED, n));
	shmt_limiter_close(resolved);
	printf("SUMMARY bench=decide what=acquire_decision mode=gcra ops=%"
	    PRIu64 " ns_per_op=%.1f\n", n, run(h, "gc", OP_ACQ_DECIDE, n));
	if (wakes > 0) {
		rc = wake_latency(seg, h, wakes, &p50, &p99);
		if (rc != 0)
			fprintf(stderr, "decide-bench: wake: %s\n",
			    shmt_strerror(rc));
		else
			printf("SUMMARY bench=decide what=wake_latency rounds=%d"
			    " p50_us=%.1f p99_us=%.1f\n", wakes, p50 / 1e3,
			    p99 / 1e3);
	}
	shmt_close(h);
	shmt_unlink(seg);
	return 0;
}
