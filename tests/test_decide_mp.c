/* SPDX-License-Identifier: MIT */
/*
 * Many processes take uses of random cost from a bucket limiter and from a
 * rate-mode limiter with the real clock, one of them killed with kill -9 in
 * the middle; no window may hold more uses than the mode promises.  Each
 * grant is logged with the clock read before and after the call, so a
 * window that certainly holds too many uses (every grant in it began and
 * ended inside it) is a real over-grant, whatever the scheduling.
 */
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MP_PROCS 4
#define MP_LOG 200000

struct mp_grant {
	uint64_t before, after, cost;
	uint32_t which, pad;
};

struct mp_log {
	uint64_t n;
	struct mp_grant g[MP_LOG];
};

/* Bucket: 50 uses per 20 ms, slack 2 ms, 10 uses a bucket.  Rate: 100 per
 * 20 ms (T = 200 us), burst 5. */
static const shmt_limit_t mp_bk = { .limit = 50, .window_ns = 20000000,
	.slack_ns = 2000000, .slack_uses = 10 };
static const shmt_limit_t mp_gc = { .limit = 100, .window_ns = 20000000,
	.mode = SHMT_MODE_GCRA, .burst = 5 };
/* The same rate per client, every process asking for one client. */
static const shmt_limit_t mp_gp = { .limit = 100, .window_ns = 20000000,
	.mode = SHMT_MODE_GCRA, .burst = 5, .per_client = 1,
	.client_capacity = 8 };

static uint64_t
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void
child(const char *seg, struct mp_log *log, uint64_t seed, uint64_t until)
{
	shmt_t *h;
	uint64_t rs = seed;

	if (shmt_open(seg, &h) != 0)
		_exit(2);
	while (mono() < until) {
		uint64_t x = tu_rand(&rs);
		uint32_t which = (uint32_t)(x % 3);
		uint64_t cost = 1 + (x >> 8) % (which ? 5 : 10);
		uint64_t b = mono(), a, i;
		shmt_decision_t d, *dp = (x >> 4) & 1 ? &d : NULL;
		int rc = which == 2 ? shmt_acquire(h, "gp", "z", 1, cost, dp) :
		    shmt_acquire(h, which ? "gc" : "bk", NULL, 0, cost, dp);

		a = mono();
		if (rc < 0)
			_exit(3);
		if (rc == 0)
			continue;
		i = __atomic_fetch_add(&log->n, 1, __ATOMIC_RELAXED);
		if (i >= MP_LOG)
			_exit(4);
		log->g[i].before = b;
		log->g[i].after = a;
		log->g[i].cost = cost;
		__atomic_store_n(&log->g[i].which, which + 1, __ATOMIC_RELEASE);
	}
	shmt_close(h);
	_exit(0);
}

static int
by_before(const void *a, const void *b)
{
	const struct mp_grant *x = a, *y = b;

	return x->before < y->before ? -1 : x->before > y->before;
}

/* Uses certainly inside [g[i].before, g[j].after] for every i <= j. */
static void
check(const struct mp_grant *g, size_t n, uint32_t which)
{
	uint64_t T = mp_gc.window_ns / mp_gc.limit;   /* also mp_gp's */

	for (size_t i = 0; i < n; i++) {
		uint64_t a = g[i].before;

		if (g[i].which != which)
			continue;
		for (size_t j = i; j < n && g[j].before < a + mp_bk.window_ns * 2;
		    j++) {
			uint64_t end = 0, sum = 0, allowed;

			if (g[j].which != which)
				continue;
			end = g[j].after;
			for (size_t k = i; k < n && g[k].before <= end; k++)
				if (g[k].which == which && g[k].after <= end)
					sum += g[k].cost;
			/* [a, end] is a half-open interval of length
			 * end - a + 1. */
			if (which == 1) {
				if (end - a + 1 > mp_bk.window_ns)
					break;
				allowed = mp_bk.limit;
			} else {
				allowed = mp_gc.burst + (end - a + 1) / T;
			}
			if (sum > allowed)
				fail_msg("%s: %" PRIu64 " uses in %" PRIu64
				    " ns, at most %" PRIu64, which == 1 ?
				    "buckets" : which == 2 ? "rate" :
				    "rate per client", sum, end - a + 1,
				    allowed);
		}
	}
}

static void
test_decide_mp_kill(void **state)
{
	uint64_t seed = tu_seed("test_decide_mp_kill");
	struct mp_log *log;
	char seg[96];
	shmt_t *h;
	pid_t pid[MP_PROCS];
	uint64_t until, n, uses[4] = { 0, 0, 0, 0 };
	int status;

	(void)state;
	tu_segname(seg, sizeof(seg), "decmp");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "bk", &mp_bk), 0);
	assert_int_equal(shmt_limiter_define(h, "gc", &mp_gc), 0);
	assert_int_equal(shmt_limiter_define(h, "gp", &mp_gp), 0);
	log = mmap(NULL, sizeof(*log), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(log != MAP_FAILED);
	until = mono() + (uint64_t)(150000000 * (tu_scale() < 1 ? 1 : tu_scale()));
	for (int p = 0; p < MP_PROCS; p++) {
		pid[p] = fork();
		assert_true(pid[p] >= 0);
		if (pid[p] == 0)
			child(seg, log, seed + (uint64_t)p * 7919,
			    p == 0 ? UINT64_MAX : until);
	}
	/* The first child runs until it is killed, at some instruction. */
	{
		struct timespec ts = { 0, 30000000 + (long)(seed % 40000000) };

		nanosleep(&ts, NULL);
	}
	assert_int_equal(kill(pid[0], SIGKILL), 0);
	for (int p = 0; p < MP_PROCS; p++) {
		assert_int_equal(waitpid(pid[p], &status, 0), pid[p]);
		if (p == 0)
			assert_true(WIFSIGNALED(status) &&
			    WTERMSIG(status) == SIGKILL);
		else
			assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	n = log->n;
	assert_true(n > 0 && n < MP_LOG);
	for (uint64_t i = 0; i < n; i++)
		uses[log->g[i].which < 4 ? log->g[i].which : 0] += log->g[i].cost;
	qsort(log->g, n, sizeof(log->g[0]), by_before);
	check(log->g, n, 1);
	check(log->g, n, 2);
	check(log->g, n, 3);
	printf("# %" PRIu64 " grants: %" PRIu64 " bucket uses, %" PRIu64
	    " rate uses, %" PRIu64 " rate uses of one client (%" PRIu64
	    " unlogged, killed)\n", n, uses[1], uses[2], uses[3], uses[0]);
	/* Both limiters were used up, more than once: the check above had
	 * windows to look at.  (How much more depends on the machine's load,
	 * so no more is asked.) */
	assert_true(uses[1] > mp_bk.limit);
	assert_true(uses[2] > mp_gc.limit);
	assert_true(uses[3] > mp_gp.limit);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	munmap(log, sizeof(*log));
	shmt_close(h);
	shmt_unlink(seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_decide_mp_kill, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
