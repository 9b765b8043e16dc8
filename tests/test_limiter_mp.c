/* SPDX-License-Identifier: MIT */
/*
 * Many processes on one segment with the real clock: four forked processes
 * with two threads each hammer a buckets limiter, a key pool, an exact
 * limiter and a per-client limiter (20 ms window, 2 ms slack) for a bounded
 * time.  Every grant is logged with the clock read before and after the
 * call; no interval of one window may certainly hold more grants than the
 * limit (per key name: its uses; per client: the client's limit).
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MP_PROCS 4
#define MP_THREADS 2
#define MP_LOG_CAP (1U << 18)

struct mp_thread_arg {
	shmt_t *h;
	struct tl_log *log;
	uint64_t deadline;
	uint64_t rs;
	unsigned offset;
};

static struct {
	char seg[96];
	shmt_t *h;
	struct tl_log *log;
} mp_g;

static uint64_t
mp_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void
mp_quiet(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ULL),
		(long)(ns % 1000000000ULL) };

	while (nanosleep(&ts, &ts) != 0)
		;
}

static void *
mp_thread(void *p)
{
	struct mp_thread_arg *a = p;
	unsigned i;

	for (i = a->offset; mp_now() < a->deadline; i++)
		tl_stress_call(a->h, a->log, i % TL_NLIM, &a->rs);
	return NULL;
}

static void
mp_child(int idx, uint64_t deadline, uint64_t seed)
{
	struct mp_thread_arg a[MP_THREADS];
	pthread_t t[MP_THREADS];
	shmt_t *h;
	int i;

	if (shmt_open(mp_g.seg, &h) != 0)
		_exit(2);
	for (i = 0; i < MP_THREADS; i++) {
		a[i].h = h;
		a[i].log = mp_g.log;
		a[i].deadline = deadline;
		a[i].rs = seed + (uint64_t)(idx * MP_THREADS + i) * 7919 + 1;
		a[i].offset = (unsigned)(idx * MP_THREADS + i);
		if (pthread_create(&t[i], NULL, mp_thread, &a[i]) != 0)
			_exit(3);
	}
	for (i = 0; i < MP_THREADS; i++)
		pthread_join(t[i], NULL);
	shmt_close(h);
	_exit(0);
}

static int
mp_teardown(void **state)
{
	int rc = 0;

	if (mp_g.log != NULL) {
		tl_log_unmap(mp_g.log);
		mp_g.log = NULL;
	}
	if (mp_g.h != NULL) {
		shmt_close(mp_g.h);
		mp_g.h = NULL;
		rc = shmt_unlink(mp_g.seg);
	}
	return rc == 0 ? 0 : -1;
}

static void
test_many_processes(void **state)
{
	uint64_t seed = tu_seed("test_many_processes");
	double secs = 1.0 * tu_scale();
	uint64_t deadline, bad, grants[TL_NLIM];
	shmt_limiter_stat_t st;
	pid_t pids[MP_PROCS];
	int i, status;

	if (secs < 0.3)
		secs = 0.3;
	tu_segname(mp_g.seg, sizeof(mp_g.seg), "mp");
	assert_int_equal(shmt_create(mp_g.seg, NULL, &mp_g.h), 0);
	assert_int_equal(tl_stress_define(mp_g.h), 0);
	mp_g.log = tl_log_map(MP_LOG_CAP);
	assert_non_null(mp_g.log);
	deadline = mp_now() + (uint64_t)(secs * 1e9);
	for (i = 0; i < MP_PROCS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			mp_child(i, deadline, seed);
	}
	for (i = 0; i < MP_PROCS; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	printf("# %" PRIu64 " calls in %.2f s, slowest %" PRIu64 " us, "
	    "%" PRIu64 " errors (first %" PRId64 ")\n", mp_g.log->calls, secs,
	    mp_g.log->max_call_ns / 1000, mp_g.log->errors,
	    mp_g.log->first_error);
	assert_true(mp_g.log->n < mp_g.log->cap);
	bad = tl_stress_check(mp_g.log, grants);
	assert_int_equal(bad, 0);
	/* Not vacuous: every limiter granted more than one window's worth and
	 * throttled too. */
	for (i = 0; i < TL_NLIM; i++) {
		static const char *const names[] = { "bk", "keys", "ex", "pc" };

		assert_int_equal(shmt_limiter_stat(mp_g.h, names[i], &st), 0);
		assert_true(grants[i] > st.limit);
		assert_true(st.denied_exhausted + st.denied_slack +
		    st.denied_table_full > 0);
	}
	/* Liveness, checked once: window + slack of quiet, then all back. */
	mp_quiet(TL_WINDOW_NS + TL_SLACK_NS + 1000000);
	tl_stress_capacity_back(mp_g.h);
	assert_int_equal(mp_g.log->errors, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_many_processes, mp_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
