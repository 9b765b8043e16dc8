/* SPDX-License-Identifier: MIT */
/*
 * Key names of an exact-mode limiter follow grant order when many processes
 * grant at once.  Six forked processes call shmt_next_key on one exact
 * limiter with a pool of three names, each allowed X = 3 times per 2 ms
 * window, with the real CLOCK_MONOTONIC, for a bounded time; every grant is
 * logged as (clock before the call, clock after it, name) in a shared array.
 *
 * Why the check is sound.  A grant's decision time is the clock value the
 * library acted on: one CLOCK_MONOTONIC read inside the call, so it lies in
 * [before, after] (one clock for every process on the host).  A grant
 * therefore certainly lies in the half-open window [a, a + C) when
 * before >= a and after < a + C.  Counting only such grants gives at most
 * the true number of decisions in the window, so a count above X is a
 * certain breach of the promise, never a false alarm caused by scheduling;
 * a slow call only makes the check weaker for its own window.  Every
 * grant's `before` is tried as the window's start a.
 *
 * Second check: names follow grant order, so the i-th grant gets name
 * i mod nkeys; with every grant logged (nobody is killed), the names'
 * totals differ by at most one.
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KM_PROCS 6
#define KM_NKEYS 3
#define KM_USES 3
#define KM_WINDOW_NS 2000000ULL
#define KM_CAP (1U << 20)

struct km_rec {
	uint64_t before, after;
	uint32_t name;
	uint32_t valid;
};

struct km_log {
	uint64_t n;              /* records claimed */
	uint64_t denied;
	uint64_t errors;
	int64_t first_error;
	struct km_rec rec[KM_CAP];
};

static const char *const km_names[KM_NKEYS] = { "key-0", "key-1", "key-2" };

static struct {
	char seg[96];
	shmt_t *h;
	struct km_log *log;
} km_g;

static uint64_t
km_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint32_t
km_name_index(const char *buf)
{
	for (uint32_t i = 0; i < KM_NKEYS; i++)
		if (strcmp(buf, km_names[i]) == 0)
			return i;
	return UINT32_MAX;
}

static void
km_child(uint64_t deadline)
{
	struct km_log *log = km_g.log;
	char buf[16];
	shmt_t *h;

	if (shmt_open(km_g.seg, &h) != 0)
		_exit(2);
	while (km_now() < deadline) {
		uint64_t before = km_now(), after, i;
		int rc = shmt_next_key(h, "exk", buf, sizeof(buf));

		after = km_now();
		if (rc == 0) {
			__atomic_fetch_add(&log->denied, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (rc < 0) {
			if (__atomic_fetch_add(&log->errors, 1,
			    __ATOMIC_RELAXED) == 0)
				log->first_error = rc;
			continue;
		}
		i = __atomic_fetch_add(&log->n, 1, __ATOMIC_RELAXED);
		if (i >= KM_CAP)
			break;
		log->rec[i].before = before;
		log->rec[i].after = after;
		log->rec[i].name = km_name_index(buf);
		__atomic_store_n(&log->rec[i].valid, 1, __ATOMIC_RELEASE);
	}
	shmt_close(h);
	_exit(0);
}

static int
km_teardown(void **state)
{
	int rc = 0;

	(void)state;
	if (km_g.log != NULL) {
		munmap(km_g.log, sizeof(*km_g.log));
		km_g.log = NULL;
	}
	if (km_g.h != NULL) {
		shmt_close(km_g.h);
		km_g.h = NULL;
		rc = shmt_unlink(km_g.seg);
	}
	return rc == 0 ? 0 : -1;
}

static void
test_exact_key_names_follow_grant_order(void **state)
{
	double secs = 0.6 * tu_scale();
	uint64_t deadline, n, bad = 0, worst = 0, total[KM_NKEYS] = { 0 };
	uint64_t lo = UINT64_MAX, hi = 0;
	struct tl_grant *g;
	shmt_limit_t l;
	pid_t pids[KM_PROCS];
	int status;

	(void)state;
	if (secs < 0.3)
		secs = 0.3;
	tu_segname(km_g.seg, sizeof(km_g.seg), "keysmp");
	assert_int_equal(shmt_create(km_g.seg, NULL, &km_g.h), 0);
	memset(&l, 0, sizeof(l));
	l.window_ns = KM_WINDOW_NS;
	l.mode = SHMT_MODE_EXACT;
	l.keys = km_names;
	l.nkeys = KM_NKEYS;
	l.uses_per_key = KM_USES;
	assert_int_equal(shmt_limiter_define(km_g.h, "exk", &l), 0);
	km_g.log = mmap(NULL, sizeof(*km_g.log), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(km_g.log != MAP_FAILED);
	deadline = km_now() + (uint64_t)(secs * 1e9);
	for (int i = 0; i < KM_PROCS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			km_child(deadline);
	}
	for (int i = 0; i < KM_PROCS; i++) {
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	n = km_g.log->n;
	printf("# %" PRIu64 " grants, %" PRIu64 " denials, %" PRIu64
	    " errors (first %" PRId64 ") in %.2f s\n", n, km_g.log->denied,
	    km_g.log->errors, km_g.log->first_error, secs);
	assert_int_equal(km_g.log->errors, 0);
	assert_true(n < KM_CAP);
	g = calloc(n + 1, sizeof(*g));
	assert_non_null(g);
	for (uint64_t i = 0; i < n; i++) {
		const struct km_rec *r = &km_g.log->rec[i];

		assert_int_equal(r->valid, 1);
		assert_true(r->name < KM_NKEYS);
		g[i].before = r->before;
		g[i].after = r->after;
		g[i].group = r->name;
		total[r->name]++;
	}
	for (uint32_t k = 0; k < KM_NKEYS; k++) {
		uint64_t w = 0, b = tl_violations(g, n, KM_WINDOW_NS, KM_USES,
		    k, &w);

		printf("# %s: %" PRIu64 " grants, %" PRIu64 " windows with "
		    "more than %u (worst %" PRIu64 ")\n", km_names[k],
		    total[k], b, KM_USES, w);
		bad += b;
		if (w > worst)
			worst = w;
		if (total[k] < lo)
			lo = total[k];
		if (total[k] > hi)
			hi = total[k];
	}
	free(g);
	assert_int_equal(bad, 0);
	assert_true(hi - lo <= 1);
	/* Not vacuous: many windows' worth granted, and throttled too. */
	assert_true(n > 20 * KM_NKEYS * KM_USES);
	assert_true(km_g.log->denied > 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(
		    test_exact_key_names_follow_grant_order, km_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
