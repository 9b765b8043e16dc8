/* SPDX-License-Identifier: MIT */
/*
 * The count of a shared rate limiter's grants (gcra.h): its grants raise
 * the count in the upper bits of the state word's second half with the
 * grant's own CAS (no other atomic), lm_exact_grants takes what the word
 * cannot (a count at its bound, a cost above GCRA_COST_IN_WORD) and what a
 * refund gives back, and shmt_limiter_stat reports the sum.  A change of
 * parameters and a reset keep the count; shmt_check accepts a count below
 * the bound and names one above it; a refund takes its cost off the word.
 * A move into rate mode carries the grants so far.  Forked processes
 * killed with SIGKILL while they grant lose no count: the stat equals the
 * uses the limiter's arrival time says were granted.
 */
#include "daemon.h"
#include "fork.h"
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
#include <sys/prctl.h>
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

/* A new segment SEG (named after TAG) on the clock CLK with rate limiter
 * "r" of L. */
static shmt_t *
segment_with(char *seg, size_t cap, const char *tag, struct tu_clock *clk,
    const shmt_limit_t *l)
{
	shmt_t *h;

	tu_segname(seg, cap, tag);
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, clk), 0);
	assert_int_equal(shmt_limiter_define(h, "r", l), 0);
	return h;
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
	h = segment_with(seg, sizeof(seg), "gcnt", &clk, &l);
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
	h = segment_with(seg, sizeof(seg), "gbnd", &clk, &l);
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
	l.limit = SHMT_LIMIT_MAX;
	l.window_ns = SHMT_LIMIT_MAX;
	l.burst = SHMT_LIMIT_MAX;
	h = segment_with(seg, sizeof(seg), "gref", &clk, &l);
	assert_int_equal(shmt_acquire_all(h, &rq, 1, NULL, &rc), 1);
	assert_int_equal(grants(h, "r"), 5);
	assert_int_equal(shmt_refund(h, "r", &rc), 1);
	assert_int_equal(grants(h, "r"), 0);
	/* Off the word's count, in the refund's own CAS. */
	v = view_of(h, "r", &scratch);
	assert_int_equal(gcra_word_count(v->lim->lm_w.w[1]), 0);
	assert_int_equal(v->lim->lm_exact_grants, 0);
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

/* Processes grant as fast as they can until each is killed with SIGKILL,
 * at seeded moments, while it grants.  The limiter's arrival time says how
 * many uses were granted (T = 1 ns from a clock that never moves: TAT =
 * start + uses), and the stat must say exactly that: a grant's count is
 * in its own CAS, so no kill separates the two. */
#define MP_PROCS 4
#define MP_EACH 5000            /* grants each before the kills begin */

static void
mp_granter(const char *seg)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_t *x;

	/* Killed by the test; and with it, should it die first. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (shmt_open(seg, &x) != 0 ||
	    shmt_set_clock(x, tu_clock_read, &clk) != 0)
		_exit(1);
	for (;;)
		if (shmt_try_use_key(x, "r") != 1)
			_exit(2);
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
	uint64_t granted;
	char seg[96];
	shmt_t *h;

	(void)state;
	h = segment_with(seg, sizeof(seg), "gmp", &clk, &l);
	fflush(NULL);
	for (int k = 0; k < MP_PROCS; k++) {
		kid[k] = fork();
		assert_true(kid[k] >= 0);
		if (kid[k] == 0)
			mp_granter(seg);
	}
	/* All of them at work (a bounded wait: 10 s). */
	for (int i = 0; grants(h, "r") < (uint64_t)MP_PROCS * MP_EACH; i++) {
		assert_true(i < 10000);
		tu_pause_ms(1);
	}
	for (int k = 0; k < MP_PROCS; k++) {
		int st;

		tu_pause_ms((int)(tu_rand(&rs) % 3));
		assert_int_equal(kill(kid[k], SIGKILL), 0);
		assert_int_equal(waitpid(kid[k], &st, 0), kid[k]);
		/* Killed while it granted, not gone before. */
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	}
	v = view_of(h, "r", &scratch);
	granted = v->lim->lm_w.w[0] - clk.now;
	printf("# seed %" PRIu64 ": %d processes killed while granting, "
	    "%" PRIu64 " uses granted\n", seed, MP_PROCS, granted);
	assert_int_equal(grants(h, "r"), granted);
	assert_true(granted >= (uint64_t)MP_PROCS * MP_EACH);
	assert_int_equal(v->lim->lm_exact_grants, 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A move that defines a shared buckets or exact limiter anew in rate mode
 * carries the grants it made: the count goes on from there. */
static void
test_count_into_rate(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	shmt_limit_t l, r;
	struct shmt__redef d = { "x", &r };
	shmt_config_t c;
	char seg[96], err[768] = "";
	shmt_t *h;

	(void)state;
	for (int mode = 0; mode < 2; mode++) {
		memset(&l, 0, sizeof(l));
		l.mode = mode ? SHMT_MODE_EXACT : SHMT_MODE_BUCKETS;
		l.limit = 100;
		l.window_ns = 60000000000ULL;
		if (!mode) {
			l.slack_ns = 1000000000ULL;
			l.slack_uses = 10;
		}
		tu_segname(seg, sizeof(seg), "ginto");
		assert_int_equal(shmt_create(seg, NULL, &h), 0);
		assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
		assert_int_equal(shmt_limiter_define(h, "x", &l), 0);
		for (int i = 0; i < 7; i++)
			assert_int_equal(shmt_try_use_key(h, "x"), 1);
		assert_int_equal(grants(h, "x"), 7);
		memset(&r, 0, sizeof(r));
		r.mode = SHMT_MODE_GCRA;
		r.limit = 100;
		r.window_ns = 60000000000ULL;
		r.burst = 100;
		shmt__move_config(h, &c);
		if (shmt__move_redefine(shmt__gen_live(h), &c, &d, 1,
		    tu_clock_read, &clk, err, sizeof(err)) != 0)
			fail_msg("move: %s", err);
		assert_int_equal(grants(h, "x"), 7);
		/* The uses carried hold until their old release (a window
		 * on): then it grants again, and counts on. */
		clk.now += 61000000000ULL;
		assert_int_equal(shmt_try_use_key(h, "x"), 1);
		assert_int_equal(grants(h, "x"), 8);
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
		tu_close_unlink(h, seg);
	}
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
		cmocka_unit_test_teardown(test_count_into_rate, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
