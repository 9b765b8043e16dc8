/* SPDX-License-Identifier: MIT */
/*
 * The count of a shared rate limiter's grants (gcra.h): its grants raise
 * the count in the upper bits of the state word's second half with the
 * grant's own CAS (no other atomic), lm_exact_grants takes what the word
 * cannot (a count at its bound, a cost above GCRA_COST_IN_WORD) and what a
 * refund gives back, and shmt_limiter_stat reports the sum.  A change of
 * parameters and a reset keep the count; shmt_check accepts a count below
 * the bound and names one above it.  Forked processes, some killed with
 * SIGKILL while they grant, lose no count: the stat equals the uses the
 * limiter's arrival time says were granted.
 */
#include "gcra.h"
#include "limiter.h"
#include "table.h"
#include "testutil.h"

#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* A rate limiter that grants everything asked in these tests: T = 1 ns,
 * a burst far above any count here. */
static shmt_limit_t
wide(void)
{
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_GCRA;
	l.limit = 1000000000;
	l.window_ns = 1000000000;
	l.burst = 1000000000;
	return l;
}

static const struct shmt_lview *
view_of(shmt_t *h, const char *name, struct shmt_lview *scratch)
{
	const struct shmt_lview *v;

	assert_int_equal(shmt__lim_lookup(h, name, scratch, &v), 0);
	return v;
}

static uint64_t
grants(shmt_t *h, const char *name)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(h, name, &st), 0);
	return st.grants;
}

/* Set the count in NAME's word to C, keeping the rest. */
static void
set_word_count(shmt_t *h, const char *name, uint64_t c)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v = view_of(h, name, &scratch);
	uint64_t w[2], nw[2];

	shmt__load128(&v->lim->lm_w, w);
	nw[0] = w[0];
	nw[1] = (w[1] & 0xffffU) | c << GCRA_COUNT_SHIFT;
	assert_true(shmt__cas128(&v->lim->lm_w, w, nw));
}

static void
test_count_in_word(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_limit_t l = wide();
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	shmt_decision_t d;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "gcnt");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(h, "r", &l), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(shmt_try_use_key(h, "r"), 1);
	assert_int_equal(shmt_acquire(h, "r", NULL, 0, 7, &d), 1);
	assert_int_equal(grants(h, "r"), 107);
	/* All of it in the word: no atomic add was made. */
	v = view_of(h, "r", &scratch);
	assert_int_equal(v->lim->lm_exact_grants, 0);
	assert_int_equal(gcra_word_count(v->lim->lm_w.w[1]), 107);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	/* A change of parameters and a reset keep it. */
	l.limit = 500000000;
	assert_int_equal(shmt_limiter_update(h, "r", &l, NULL, 0), 0);
	assert_int_equal(grants(h, "r"), 107);
	assert_true(shmt_limiter_reset(h, "r", NULL, 0) >= 0);
	assert_int_equal(grants(h, "r"), 107);
	assert_int_equal(shmt_try_use_key(h, "r"), 1);
	assert_int_equal(grants(h, "r"), 108);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* At its bound the word's count stays, and the grants go to
 * lm_exact_grants: the sum goes on exactly. */
static void
test_count_at_bound(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_limit_t l = wide();
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	shmt_decision_t d;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "gbnd");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(h, "r", &l), 0);
	set_word_count(h, "r", GCRA_COUNT_MAX - 3);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	assert_int_equal(grants(h, "r"), GCRA_COUNT_MAX - 3);
	assert_int_equal(shmt_acquire(h, "r", NULL, 0, 3, &d), 1);
	v = view_of(h, "r", &scratch);
	assert_int_equal(gcra_word_count(v->lim->lm_w.w[1]), GCRA_COUNT_MAX);
	assert_int_equal(v->lim->lm_exact_grants, 0);
	/* One more does not fit the word. */
	assert_int_equal(shmt_try_use_key(h, "r"), 1);
	assert_int_equal(gcra_word_count(v->lim->lm_w.w[1]), GCRA_COUNT_MAX);
	assert_int_equal(v->lim->lm_exact_grants, 1);
	assert_int_equal(grants(h, "r"), GCRA_COUNT_MAX + 1);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	/* Past the bound is damage: named, and repaired by clearing it. */
	set_word_count(h, "r", GCRA_COUNT_MAX + 1);
	assert_int_equal(shmt_check(h, NULL, NULL), 1);
	assert_int_equal(shmt_limiter_update(h, "r", &l, NULL, 0),
	    SHMT_ECORRUPT);
	assert_int_equal(shmt_check_ex(h, SHMT_CHECK_REPAIR, NULL, NULL), 1);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	assert_int_equal(grants(h, "r"), 1);
	assert_int_equal(shmt_try_use_key(h, "r"), 1);
	assert_int_equal(grants(h, "r"), 2);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A refund takes its cost off the sum; a cost above GCRA_COST_IN_WORD is
 * counted outside the word. */
static void
test_count_refund_and_cost(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_limit_t l = wide();
	shmt_request_t rq = { .limiter = "r", .cost = 5 };
	shmt_receipt_t rc;
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	shmt_decision_t d;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "gref");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	l.limit = SHMT_LIMIT_MAX;
	l.window_ns = SHMT_LIMIT_MAX;
	l.burst = SHMT_LIMIT_MAX;
	assert_int_equal(shmt_limiter_define(h, "r", &l), 0);
	assert_int_equal(shmt_acquire_all(h, &rq, 1, NULL, &rc), 1);
	assert_int_equal(grants(h, "r"), 5);
	assert_int_equal(shmt_refund(h, "r", &rc), 1);
	assert_int_equal(grants(h, "r"), 0);
	assert_int_equal(shmt_try_use_key(h, "r"), 1);
	assert_int_equal(grants(h, "r"), 1);
	/* SHMT_LIMIT_MAX (2^31 - 1) fits the word; the bound is there for
	 * costs the limits may allow one day. */
	assert_true(SHMT_LIMIT_MAX <= GCRA_COST_IN_WORD);
	clk.now += 4000000000ULL;
	assert_int_equal(shmt_acquire(h, "r", NULL, 0, SHMT_LIMIT_MAX, &d), 1);
	assert_int_equal(grants(h, "r"), 1 + SHMT_LIMIT_MAX);
	v = view_of(h, "r", &scratch);
	assert_int_equal(gcra_word_count(v->lim->lm_w.w[1]) +
	    v->lim->lm_exact_grants, 1 + SHMT_LIMIT_MAX);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* Processes grant as fast as they can, each try counted in a shared tally
 * only after it returned 1; some are killed with SIGKILL mid-run.  The
 * limiter's arrival time says how many uses were granted (T = 1 ns from a
 * fixed clock: TAT = start + uses), and the stat must say exactly that. */
#define MP_PROCS 4
#define MP_TRIES 20000

static void
mp_granter(const char *seg)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_t *x;

	if (shmt_open(seg, &x) != 0 ||
	    shmt_set_clock(x, tu_clock_read, &clk) != 0)
		_exit(1);
	for (int i = 0; i < MP_TRIES; i++)
		if (shmt_try_use_key(x, "r") != 1)
			_exit(2);
	_exit(0);
}

static void
test_count_processes_killed(void **state)
{
	uint64_t seed = tu_seed("test_count_processes_killed"), rs = seed;
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_limit_t l = wide();
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	pid_t kid[MP_PROCS];
	int killed = 0;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "gmp");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	/* A clock that never moves: TAT grows by T = 1 ns a use, and no
	 * use is ever due (the burst holds every try). */
	l.limit = 1000000000;
	l.window_ns = 1000000000;
	l.burst = 1000000000;
	assert_int_equal(shmt_limiter_define(h, "r", &l), 0);
	fflush(NULL);
	for (int k = 0; k < MP_PROCS; k++) {
		kid[k] = fork();
		assert_true(kid[k] >= 0);
		if (kid[k] == 0)
			mp_granter(seg);
	}
	/* Kill half of them at seeded moments. */
	for (int k = 0; k < MP_PROCS; k += 2) {
		tu_pause_ms((int)(tu_rand(&rs) % 20));
		kill(kid[k], SIGKILL);
		killed++;
	}
	for (int k = 0; k < MP_PROCS; k++) {
		int st;

		assert_int_equal(waitpid(kid[k], &st, 0), kid[k]);
		if (k % 2 == 1)
			assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	v = view_of(h, "r", &scratch);
	printf("# seed %" PRIu64 ": %d of %d killed, %" PRIu64 " uses "
	    "granted\n", seed, killed, MP_PROCS, v->lim->lm_w.w[0] -
	    clk.now);
	assert_int_equal(grants(h, "r"), v->lim->lm_w.w[0] - clk.now);
	assert_true(grants(h, "r") >= (uint64_t)(MP_PROCS / 2) * MP_TRIES);
	assert_int_equal(v->lim->lm_exact_grants, 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_count_in_word, tu_sweep),
		cmocka_unit_test_teardown(test_count_at_bound, tu_sweep),
		cmocka_unit_test_teardown(test_count_refund_and_cost, tu_sweep),
		cmocka_unit_test_teardown(test_count_processes_killed,
		    tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
