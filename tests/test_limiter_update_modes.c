/* SPDX-License-Identifier: MIT */
/*
 * Changing a rate-mode or an exact-mode limiter in place
 * (shmt_limiter_update; the arguments are at the top of lib/gcra.c and
 * lib/exact.c).  With the injected clock, seeded random grants and changes
 * (limit lowered and raised, window shorter and longer, burst) must answer
 * call for call as a model of the rule does, stat's uses in flight must
 * never fall at a change, and the grants' decision times must keep the
 * promises, checked from the times and the parameters alone:
 *  - rate mode: the grants with times in [t1, t2] number at most
 *    B + the integral over [t1, t2] of dt / T(t), B the burst of the last
 *    one's parameters, T(t) the interval in force at t;
 *  - exact mode: any half-open interval of the shortest window holds at
 *    most the largest limit, and one of a phase's window lying wholly in
 *    that phase at most its limit.
 * Four forked processes then grant on a clock shared through memory (each
 * read a new tick, so every decision has an exact time) while the parent
 * changes the parameters 60 times, and the same checks run on the log.  A
 * process killed with kill -9 while it changes a limiter again and again
 * leaves the old or the new parameters, never a mix, a clean shmt_check,
 * and a table lock the next change takes.
 */
#include "gcra.h"
#include "test_limiter_util.h"
#include "testutil.h"

#include "atomic128.h"
#include "lock.h"
#include "segment.h"
#include "table.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* div_up: table.h. */

/* ---- The promises, from decision times and parameters only -------------- */

/* A change of parameters: those in force from time AT on (the first at 0).
 * In the multi-process test a change's exact time is unknown within
 * (at, at_end): grants there may have either parameters. */
struct mu_phase {
	uint64_t at, at_end;
	uint64_t limit, window, burst;
	size_t first;         /* model tests: the first grant after it */
};

static uint64_t
rate_T(const struct mu_phase *p)
{
	return p->window / p->limit;
}

static uint64_t
overlap(uint64_t lo, uint64_t hi, uint64_t t)
{
	if (hi > t)
		hi = t;
	return hi > lo ? hi - lo : 0;
}

/* The integral of dt / T(t) over [0, t): phase p is in force from at_end
 * to the next phase's at; in the uncertain stretch [at, at_end) of a
 * change, the faster of the two rates (the larger allowance). */
static long double
rate_drain(const struct mu_phase *ph, unsigned nph, uint64_t t)
{
	long double d = 0;

	for (unsigned p = 0; p < nph; p++) {
		uint64_t lo = p == 0 ? 0 : ph[p].at_end;
		uint64_t hi = p + 1 < nph ? ph[p + 1].at : UINT64_MAX;

		d += (long double)overlap(lo, hi, t) /
		    (long double)rate_T(&ph[p]);
		if (p > 0) {
			uint64_t T = rate_T(&ph[p]) < rate_T(&ph[p - 1]) ?
			    rate_T(&ph[p]) : rate_T(&ph[p - 1]);

			d += (long double)overlap(ph[p].at, ph[p].at_end, t) /
			    (long double)T;
		}
	}
	return d;
}

/* The largest burst grant J at T may have decided with: BY_INDEX, the
 * phase whose first grant is at or before J (model tests, where the order
 * of calls is known); else by time (the multi-process test). */
static uint64_t
rate_burst_at(const struct mu_phase *ph, unsigned nph, size_t j, uint64_t t,
    int by_index)
{
	uint64_t b = ph[0].burst;

	for (unsigned p = 1; p < nph; p++) {
		if (by_index) {
			if (ph[p].first <= j)
				b = ph[p].burst;
		} else if (t > ph[p].at_end) {
			b = ph[p].burst;
		} else if (t > ph[p].at) {
			b = ph[p].burst > ph[p - 1].burst ? ph[p].burst :
			    ph[p - 1].burst;
		}
	}
	return b;
}

/* Grant runs [i, j] (times T sorted, costs 1) with more uses than the
 * rate promise allows: j - i + 1 > B_j + drain(t_j) - drain(t_i).  With
 * M_j = max over i <= j of drain(t_i) - i, one pass.  *WORST gets the
 * largest excess, in uses. */
static uint64_t
rate_violations(const uint64_t *t, size_t n, const struct mu_phase *ph,
    unsigned nph, int by_index, long double *worst)
{
	long double best = -1e300L;
	uint64_t bad = 0;

	*worst = 0;
	for (size_t j = 0; j < n; j++) {
		long double dj = rate_drain(ph, nph, t[j]);
		long double over;

		if (dj - (long double)j > best)
			best = dj - (long double)j;
		over = (long double)(j + 1) - dj + best -
		    (long double)rate_burst_at(ph, nph, j, t[j], by_index);
		if (over > 1e-6L) {
			bad++;
			if (over > *worst)
				*worst = over;
		}
	}
	return bad;
}

/* Exact mode's promises over grants T[0..N) (sorted): the shortest window
 * holds at most the largest limit; a phase's window wholly after its
 * change (and before the next one begins) at most its limit.  BY_INDEX: a
 * phase's grants are those from its first on (model tests); else those
 * with times after its change ended (the multi-process test). */
static uint64_t
exact_violations(const uint64_t *t, size_t n, const struct mu_phase *ph,
    unsigned nph, int by_index)
{
	uint64_t minwin = UINT64_MAX, maxlim = 0, bad;

	for (unsigned p = 0; p < nph; p++) {
		if (ph[p].window < minwin)
			minwin = ph[p].window;
		if (ph[p].limit > maxlim)
			maxlim = ph[p].limit;
	}
	bad = tl_windows_over(t, n, minwin, maxlim);
	for (unsigned p = 0; p < nph; p++) {
		size_t a, b;

		if (by_index) {
			a = ph[p].first;
			b = p + 1 < nph ? ph[p + 1].first : n;
		} else {
			uint64_t lo = p == 0 ? 0 : ph[p].at_end + 1;
			uint64_t hi = p + 1 < nph ? ph[p + 1].at : UINT64_MAX;

			a = 0;
			while (a < n && t[a] < lo)
				a++;
			b = a;
			while (b < n && t[b] < hi)
				b++;
		}
		bad += tl_windows_over(t + a, b - a, ph[p].window, ph[p].limit);
	}
	return bad;
}

/* ---- Models of the rules ---------------------------------------------------- */

/* Rate mode: the arrival time, rescaled at a change (every use in flight,
 * rounded up to a whole one, at the new interval; never earlier). */
struct rm_model {
	uint64_t T, B, tat;
};

static int
rm_try(struct rm_model *m, uint64_t now)
{
	uint64_t nt = (m->tat > now ? m->tat : now) + m->T;

	if (nt > now + m->T * m->B)
		return 0;
	m->tat = nt;
	return 1;
}

static void
rm_update(struct rm_model *m, const shmt_limit_t *l, uint64_t now)
{
	uint64_t T2 = l->window_ns / l->limit;

	if (m->tat > now && T2 != m->T) {
		uint64_t want = div_up(m->tat - now, m->T) * T2 + now;

		if (want > m->tat)
			m->tat = want;
	}
	m->T = T2;
	m->B = l->burst;
}

/* Exact mode: every grant's time by number; grant n checks grant n - L,
 * which must be a window old, or max(old, new) window for a grant made
 * before a change (the longer hold of an earlier change kept while its
 * grants are still in the log). */
struct em_model {
	uint64_t nlog, limit, window, hold;
	int64_t hold_seq;
	uint64_t *t;
	int64_t n;
};

static uint64_t
em_due(const struct em_model *m, int64_t k)
{
	uint64_t w = m->window;

	if (k < m->hold_seq && m->hold > w)
		w = m->hold;
	return m->t[k] + w;
}

static int
em_try(struct em_model *m, uint64_t now)
{
	int64_t x = m->n - (int64_t)m->limit;

	if (x >= 0 && em_due(m, x) > now)
		return 0;
	m->t[m->n++] = now;
	return 1;
}

static uint64_t
em_inflight(const struct em_model *m, uint64_t now)
{
	uint64_t k = 0;

	for (int64_t i = m->n - (int64_t)m->nlog; i < m->n; i++)
		if (i >= 0 && em_due(m, i) > now)
			k++;
	return k;
}

static void
em_update(struct em_model *m, const shmt_limit_t *l)
{
	uint64_t hold = m->window;

	if (m->hold > hold && m->hold_seq > m->n - (int64_t)m->nlog)
		hold = m->hold;
	m->hold_seq = m->n + 1;
	m->hold = hold > l->window_ns ? hold : 0;
	m->limit = l->limit;
	m->window = l->window_ns;
}

/* ---- Model tests ----------------------------------------------------------- */

static void
pick(uint64_t *rs, int mode, uint64_t nlog, shmt_limit_t *l)
{
	memset(l, 0, sizeof(*l));
	l->mode = mode;
	if (mode == SHMT_MODE_GCRA) {
		l->limit = 1 + tu_rand(rs) % 40;
		l->window_ns = l->limit * (1 + tu_rand(rs) % 12);
		l->burst = 1 + tu_rand(rs) % 20;
	} else {
		l->limit = 1 + tu_rand(rs) % nlog;
		l->window_ns = 10 + tu_rand(rs) % 300;
	}
}

static void
model_run(int mode)
{
	uint64_t seed = tu_seed(mode == SHMT_MODE_GCRA ? "update_rate_model" :
	    "update_exact_model"), rs = seed;
	unsigned sets = (unsigned)(30 * tu_scale()) + 4;
	uint64_t total_grants = 0, total_changes = 0;

	for (unsigned set = 0; set < sets; set++) {
		char seg[96], why[300];
		shmt_t *h;
		struct tu_clock clk = { .now = 1000000 + tu_rand(&rs) % 1000 };
		struct rm_model rm;
		struct em_model em;
		shmt_limit_t l;
		shmt_limiter_stat_t st;
		struct mu_phase ph[96];
		unsigned nph = 0, calls = 4000;
		uint64_t *gt, ng = 0, nlog = 40;
		long double worst;

		gt = calloc(calls, sizeof(*gt));
		assert_non_null(gt);
		pick(&rs, mode, nlog, &l);
		if (mode == SHMT_MODE_EXACT)
			l.limit = nlog;         /* the log's length */
		tu_segname(seg, sizeof(seg), "updm");
		assert_int_equal(shmt_create(seg, NULL, &h), 0);
		assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
		assert_int_equal(shmt_limiter_define(h, "m", &l), 0);
		rm = (struct rm_model){ l.window_ns / (l.limit ? l.limit : 1),
		    l.burst, 0 };
		memset(&em, 0, sizeof(em));
		em.nlog = nlog;
		em.limit = l.limit;
		em.window = l.window_ns;
		em.t = calloc(calls, sizeof(*em.t));
		assert_non_null(em.t);
		ph[nph++] = (struct mu_phase){ 0, 0, l.limit, l.window_ns,
		    l.burst, 0 };
		for (unsigned i = 0; i < calls; i++) {
			uint64_t step = mode == SHMT_MODE_GCRA ?
			    rm.T * 3 : em.window / 3;
			int got, want;

			if (tu_rand(&rs) % 60 == 0 && nph < 96) {
				uint64_t before, after;

				assert_int_equal(shmt_limiter_stat(h, "m", &st),
				    0);
				before = st.in_flight;
				pick(&rs, mode, nlog, &l);
				if (shmt_limiter_update(h, "m", &l, why,
				    sizeof(why)) != 0)
					fail_msg("seed %" PRIu64 " set %u: update: "
					    "%s", seed, set, why);
				if (mode == SHMT_MODE_GCRA)
					rm_update(&rm, &l, clk.now);
				else
					em_update(&em, &l);
				assert_int_equal(shmt_limiter_stat(h, "m", &st),
				    0);
				after = st.in_flight;
				/* Uses in flight stay counted. */
				if (after < before)
					fail_msg("seed %" PRIu64 " set %u: in "
					    "flight %" PRIu64 " before the change, "
					    "%" PRIu64 " after", seed, set, before,
					    after);
				if (st.limit != l.limit ||
				    st.window_ns != l.window_ns ||
				    st.burst != l.burst)
					fail_msg("seed %" PRIu64 " set %u: stat "
					    "shows other parameters", seed, set);
				ph[nph++] = (struct mu_phase){ clk.now, clk.now,
				    l.limit, l.window_ns, l.burst, ng };
				total_changes++;
			}
			switch (tu_rand(&rs) % 4) {
			case 0:
				break;
			case 1:
				clk.now += 1 + tu_rand(&rs) % 3;
				break;
			default:
				clk.now += tu_rand(&rs) % (step + 2);
				break;
			}
			got = shmt_try_use_key(h, "m");
			want = mode == SHMT_MODE_GCRA ? rm_try(&rm, clk.now) :
			    em_try(&em, clk.now);
			if (got != want)
				fail_msg("seed %" PRIu64 " set %u call %u at %"
				    PRIu64 ": library %d, model %d", seed, set,
				    i, clk.now, got, want);
			if (got == 1)
				gt[ng++] = clk.now;
			if (mode == SHMT_MODE_EXACT) {
				assert_int_equal(shmt_limiter_stat(h, "m", &st),
				    0);
				if (st.in_flight != em_inflight(&em, clk.now))
					fail_msg("seed %" PRIu64 " set %u call "
					    "%u: in flight %" PRIu64 ", model %"
					    PRIu64, seed, set, i, st.in_flight,
					    em_inflight(&em, clk.now));
			}
		}
		if (mode == SHMT_MODE_GCRA) {
			uint64_t bad = rate_violations(gt, ng, ph, nph, 1,
			    &worst);

			if (bad != 0)
				fail_msg("seed %" PRIu64 " set %u: %" PRIu64
				    " grant runs over the rate promise (worst "
				    "by %.3Lf uses)", seed, set, bad, worst);
		} else {
			assert_int_equal(exact_violations(gt, ng, ph, nph, 1),
			    0);
		}
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
		total_grants += ng;
		free(em.t);
		free(gt);
		shmt_close(h);
		assert_int_equal(shmt_unlink(seg), 0);
	}
	printf("# %" PRIu64 " grants, %" PRIu64 " changes checked\n",
	    total_grants, total_changes);
	/* Checks that can fail: there were grants and changes. */
	assert_true(total_grants > 1000 && total_changes > 100);
}

static void
test_rate_model(void **state)
{
	(void)state;
	model_run(SHMT_MODE_GCRA);
}

static void
test_exact_model(void **state)
{
	(void)state;
	model_run(SHMT_MODE_EXACT);
}

/* The checkers catch what they must: a second burst right after a change
 * that forgot the uses in flight, and an interval holding one grant too
 * many. */
static void
test_checkers(void **state)
{
	struct mu_phase ph[2] = {
		{ 0, 0, 10, 1000, 5, 0 },   /* T = 100, B = 5 */
		{ 500, 500, 1, 1000, 5, 0 } /* T = 1000, B = 5 */
	};
	uint64_t t[10] = { 500, 500, 500, 500, 500, 500, 501, 502, 503, 504 };
	uint64_t t2[2] = { 600, 601 };
	long double worst;

	(void)state;
	/* Five at 500 under the old burst is fine; five more just after,
	 * with the old ones forgotten, is not. */
	assert_int_equal(rate_violations(t, 5, ph, 2, 0, &worst), 0);
	assert_true(rate_violations(t, 10, ph, 2, 0, &worst) > 0);
	/* After the change, one per 1000: a second at 601 is one too many. */
	assert_int_equal(exact_violations(t2, 1, ph, 2, 0), 0);
	assert_true(exact_violations(t2, 2, ph, 2, 0) > 0);
}

/* Refusals: an exact log too small for a raised limit (-E2BIG, saying
 * what to do), and nothing changed; a rate limiter's bad burst. */
static void
test_refusals(void **state)
{
	char seg[96], why[300];
	shmt_t *h;
	shmt_limit_t l;
	shmt_limiter_stat_t st;

	(void)state;
	tu_segname(seg, sizeof(seg), "updr2");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_EXACT;
	l.limit = 10;
	l.window_ns = 1000;
	assert_int_equal(shmt_limiter_define(h, "e", &l), 0);
	l.limit = 11;
	assert_int_equal(shmt_limiter_update(h, "e", &l, why, sizeof(why)),
	    -E2BIG);
	assert_non_null(strstr(why, "a move into a new generation"));
	assert_non_null(strstr(why, "10 grants"));
	l.limit = 4;
	l.window_ns = 3000;
	assert_int_equal(shmt_limiter_update(h, "e", &l, why, sizeof(why)), 0);
	l.limit = 10;                  /* back up to the log's length */
	assert_int_equal(shmt_limiter_update(h, "e", &l, why, sizeof(why)), 0);
	assert_int_equal(shmt_limiter_stat(h, "e", &st), 0);
	assert_int_equal(st.limit, 10);
	assert_int_equal(st.window_ns, 3000);
	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_GCRA;
	l.limit = 10;
	l.window_ns = 1000;
	l.burst = 3;
	assert_int_equal(shmt_limiter_define(h, "g", &l), 0);
	l.burst = 0;
	assert_int_equal(shmt_limiter_update(h, "g", &l, why, sizeof(why)),
	    -EINVAL);
	l.burst = 4;
	l.slack_ns = 10;
	assert_int_equal(shmt_limiter_update(h, "g", &l, why, sizeof(why)),
	    -EINVAL);
	assert_int_equal(shmt_limiter_stat(h, "g", &st), 0);
	assert_int_equal(st.burst, 3);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A second handle keeps its view until the change; its next grant, peek,
 * refund and stat follow the new parameters. */
static void
test_other_handle(void **state)
{
	char seg[96], why[300];
	shmt_t *a, *b;
	struct tu_clock clk = { .now = 100000 };
	shmt_limit_t l;
	shmt_limiter_stat_t st;
	shmt_decision_t d;
	shmt_receipt_t r;
	shmt_request_t q = { "g", NULL, 0, 1 };

	(void)state;
	tu_segname(seg, sizeof(seg), "updo");
	assert_int_equal(shmt_create(seg, NULL, &a), 0);
	assert_int_equal(shmt_open(seg, &b), 0);
	assert_int_equal(shmt_set_clock(a, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_set_clock(b, tu_clock_read, &clk), 0);
	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_GCRA;
	l.limit = 10;
	l.window_ns = 1000;           /* T = 100 */
	l.burst = 4;
	assert_int_equal(shmt_limiter_define(a, "g", &l), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(shmt_try_use_key(b, "g"), 1);
	/* Three in flight (TAT = now + 300); T' = 1000: TAT' = now + 3000,
	 * and a burst of 4 lets one more through. */
	l.limit = 1;
	assert_int_equal(shmt_limiter_update(a, "g", &l, why, sizeof(why)), 0);
	assert_int_equal(shmt_peek(b, "g", NULL, 0, 1, &d), 1);
	assert_int_equal(shmt_acquire_all(b, &q, 1, &d, &r), 1);
	assert_int_equal(d.reset_after_ns, 4000);
	assert_int_equal(shmt_try_use_key(b, "g"), 0);
	assert_int_equal(shmt_limiter_stat(b, "g", &st), 0);
	assert_int_equal(st.in_flight, 4);
	assert_int_equal(st.limit, 1);
	/* The receipt's grant was made under these parameters: given back. */
	assert_int_equal(shmt_refund(b, "g", &r), 1);
	assert_int_equal(shmt_acquire_all(b, &q, 1, &d, &r), 1);
	/* Changed again: a receipt of the old parameters gives nothing. */
	l.limit = 2;
	assert_int_equal(shmt_limiter_update(a, "g", &l, why, sizeof(why)), 0);
	assert_int_equal(shmt_refund(b, "g", &r), 0);
	clk.now += 4000;                 /* all back */
	for (int i = 0; i < 4; i++)
		assert_int_equal(shmt_try_use_key(b, "g"), 1);
	assert_int_equal(shmt_try_use_key(b, "g"), 0);

	/* Exact: 6 of 10 in flight, lowered to 4: refused until two are
	 * back (a window old), then the window keeps the old uses. */
	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_EXACT;
	l.limit = 10;
	l.window_ns = 1000;
	assert_int_equal(shmt_limiter_define(a, "e", &l), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(shmt_try_use_key(b, "e"), 1);
		clk.now += 10;                /* grants at t0 .. t0 + 50 */
	}
	l.limit = 4;
	l.window_ns = 300;             /* shorter: the old uses keep 1000 */
	assert_int_equal(shmt_limiter_update(a, "e", &l, why, sizeof(why)), 0);
	assert_int_equal(shmt_try_use_key(b, "e"), 0);
	assert_int_equal(shmt_limiter_stat(b, "e", &st), 0);
	assert_int_equal(st.in_flight, 6);
	assert_int_equal(st.limit, 4);
	clk.now += 1000 - 60 + 10;       /* grants 0 and 1 are a window old */
	assert_int_equal(shmt_try_use_key(b, "e"), 0);
	clk.now += 10;                   /* grant 2 too: 3 in flight */
	assert_int_equal(shmt_try_use_key(b, "e"), 1);
	assert_int_equal(shmt_try_use_key(b, "e"), 0);
	assert_int_equal(shmt_check(a, NULL, NULL), 0);
	shmt_close(b);
	shmt_close(a);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A damaged second half of the word (more than a generation) is named by
 * shmt_check and repaired keeping the generation, whose parameters stay. */
static void
test_check_word(void **state)
{
	char seg[96], why[300];
	shmt_t *h;
	shmt_limit_t l;
	shmt_limiter_stat_t st;
	struct shmt_lim *rows;
	uint32_t n;

	(void)state;
	tu_segname(seg, sizeof(seg), "updc");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	for (int mode = 0; mode < 2; mode++) {
		const char *name = mode ? "e" : "g";

		memset(&l, 0, sizeof(l));
		l.mode = mode ? SHMT_MODE_EXACT : SHMT_MODE_GCRA;
		l.limit = 10;
		l.window_ns = 1000000;
		l.burst = mode ? 0 : 2;
		assert_int_equal(shmt_limiter_define(h, name, &l), 0);
		l.limit = 5;
		assert_int_equal(shmt_limiter_update(h, name, &l, why,
		    sizeof(why)), 0);
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
		rows = shmt__rows(h, &n);
		for (uint32_t r = 0; r < n; r++)
			if (strcmp(rows[r].lm_name, name) == 0)
				rows[r].lm_w.w[1] |= mode ? 0x50000 :
				    (GCRA_COUNT_MAX + 1) << GCRA_COUNT_SHIFT;
		assert_int_equal(shmt_check(h, NULL, NULL), 1);
		assert_int_equal(shmt_limiter_update(h, name, &l, why,
		    sizeof(why)), SHMT_ECORRUPT);
		assert_int_equal(shmt_check_ex(h, SHMT_CHECK_REPAIR, NULL, NULL),
		    1);
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
		assert_int_equal(shmt_limiter_stat(h, name, &st), 0);
		assert_int_equal(st.limit, 5);
		assert_int_equal(shmt_try_use_key(h, name), 1);
	}
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* ---- Many processes, one clock shared through memory ------------------------ */

#define MP_PROCS 4
#define MP_CAP (1U << 18)
#define MP_CHANGES 60

struct mp_shared {
	uint64_t clock;               /* ticks: each read takes the next */
	uint64_t n;
	int stop, errors, first_error, pad;
	struct mu_phase ph[MP_CHANGES + 1];
	uint64_t t[MP_CAP];
};

static struct mp_shared *mp_s;
static uint64_t mp_last;             /* this process's last clock read */

static shmt_time_t
mp_clock(void *ctx)
{
	(void)ctx;
	mp_last = __atomic_fetch_add(&mp_s->clock, 1, __ATOMIC_SEQ_CST);
	return mp_last;
}

static void
mp_child(const char *seg)
{
	shmt_t *h;

	if (shmt_open(seg, &h) != 0 || shmt_set_clock(h, mp_clock, NULL) != 0)
		_exit(2);
	while (!__atomic_load_n(&mp_s->stop, __ATOMIC_ACQUIRE)) {
		int rc = shmt_try_use_key(h, "mp");

		if (rc == 1) {
			/* The grant's decision read the clock last. */
			uint64_t i = __atomic_fetch_add(&mp_s->n, 1,
			    __ATOMIC_RELAXED);

			if (i >= MP_CAP)
				break;
			mp_s->t[i] = mp_last;
		} else if (rc != 0) {
			if (__atomic_fetch_add(&mp_s->errors, 1,
			    __ATOMIC_RELAXED) == 0)
				mp_s->first_error = rc;
		} else if (mp_last % 8 == 0) {
			sched_yield();
		}
	}
	shmt_close(h);
	_exit(0);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void
mp_run(int mode)
{
	uint64_t seed = tu_seed(mode == SHMT_MODE_GCRA ? "update_rate_mp" :
	    "update_exact_mp"), rs = seed, n, bad;
	char seg[96], why[300];
	shmt_t *h;
	shmt_limit_t l;
	pid_t pid[MP_PROCS];
	int urc = 0;
	long double worst = 0;

	mp_s = mmap(NULL, sizeof(*mp_s), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(mp_s != MAP_FAILED);
	mp_s->clock = 1000000;
	tu_segname(seg, sizeof(seg), "updmm");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, mp_clock, NULL), 0);
	/* Windows in ticks: every clock read, by anyone, is one tick. */
	memset(&l, 0, sizeof(l));
	l.mode = mode;
	l.limit = 32;
	l.window_ns = mode == SHMT_MODE_GCRA ? 32 * 40 : 2000;
	l.burst = mode == SHMT_MODE_GCRA ? 8 : 0;
	assert_int_equal(shmt_limiter_define(h, "mp", &l), 0);
	mp_s->ph[0] = (struct mu_phase){ 0, 0, l.limit, l.window_ns, l.burst,
	    0 };
	for (int i = 0; i < MP_PROCS; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0)
			mp_child(seg);
	}
	for (int c = 1; c <= MP_CHANGES && urc == 0; c++) {
		/* Let the workers run a few windows' worth of ticks. */
		uint64_t until = __atomic_load_n(&mp_s->clock, __ATOMIC_RELAXED) +
		    10 * l.window_ns;

		while (__atomic_load_n(&mp_s->clock, __ATOMIC_RELAXED) < until &&
		    __atomic_load_n(&mp_s->n, __ATOMIC_RELAXED) < MP_CAP)
			sched_yield();
		if (mode == SHMT_MODE_GCRA) {
			l.limit = 1 + tu_rand(&rs) % 48;
			l.window_ns = l.limit * (10 + tu_rand(&rs) % 60);
			l.burst = 1 + tu_rand(&rs) % 16;
		} else {
			l.limit = 1 + tu_rand(&rs) % 32;
			l.window_ns = 500 + tu_rand(&rs) % 4000;
		}
		mp_s->ph[c].limit = l.limit;
		mp_s->ph[c].window = l.window_ns;
		mp_s->ph[c].burst = l.burst;
		mp_s->ph[c].at = __atomic_fetch_add(&mp_s->clock, 1,
		    __ATOMIC_SEQ_CST);
		urc = shmt_limiter_update(h, "mp", &l, why, sizeof(why));
		mp_s->ph[c].at_end = __atomic_fetch_add(&mp_s->clock, 1,
		    __ATOMIC_SEQ_CST);
	}
	{
		uint64_t until = __atomic_load_n(&mp_s->clock, __ATOMIC_RELAXED) +
		    10 * l.window_ns;

		while (__atomic_load_n(&mp_s->clock, __ATOMIC_RELAXED) < until &&
		    __atomic_load_n(&mp_s->n, __ATOMIC_RELAXED) < MP_CAP)
			sched_yield();
	}
	__atomic_store_n(&mp_s->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < MP_PROCS; i++) {
		int st;

		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	if (urc != 0)
		fail_msg("update: %s (%s)", shmt_strerror(urc), why);
	if (mp_s->errors != 0)
		fail_msg("%d worker errors, the first %s", mp_s->errors,
		    shmt_strerror(mp_s->first_error));
	n = mp_s->n < MP_CAP ? mp_s->n : MP_CAP;
	qsort(mp_s->t, n, sizeof(mp_s->t[0]), cmp_u64);
	for (uint64_t i = 1; i < n; i++)
		assert_true(mp_s->t[i] > mp_s->t[i - 1]);  /* one tick each */
	if (mode == SHMT_MODE_GCRA)
		bad = rate_violations(mp_s->t, n, mp_s->ph, MP_CHANGES + 1, 0,
		    &worst);
	else
		bad = exact_violations(mp_s->t, n, mp_s->ph, MP_CHANGES + 1, 0);
	printf("# seed %" PRIu64 ": %" PRIu64 " grants over %d changes, %"
	    PRIu64 " violations\n", seed, n, MP_CHANGES, bad);
	if (bad != 0)
		fail_msg("seed %" PRIu64 ": %" PRIu64 " violations (worst by "
		    "%.3Lf uses)", seed, bad, worst);
	assert_true(n > 1000);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	munmap(mp_s, sizeof(*mp_s));
}

static void
test_rate_mp(void **state)
{
	(void)state;
	mp_run(SHMT_MODE_GCRA);
}

static void
test_exact_mp(void **state)
{
	(void)state;
	mp_run(SHMT_MODE_EXACT);
}

/* ---- kill -9 in the middle of a change ------------------------------------ */

static void
kill_run(int mode)
{
	uint64_t seed = tu_seed(mode == SHMT_MODE_GCRA ? "update_rate_kill" :
	    "update_exact_kill"), rs = seed;
	char seg[96], why[300];
	shmt_t *h;
	shmt_limit_t a, b;
	unsigned rounds = (unsigned)(24 * tu_scale()) + 3, held = 0;

	tu_segname(seg, sizeof(seg), "updk");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	memset(&a, 0, sizeof(a));
	a.mode = mode;
	a.limit = 20;
	a.window_ns = 20000000;
	a.burst = mode == SHMT_MODE_GCRA ? 5 : 0;
	b = a;
	b.limit = 7;
	b.window_ns = 35000000;
	b.burst = mode == SHMT_MODE_GCRA ? 9 : 0;
	assert_int_equal(shmt_limiter_define(h, "k", &a), 0);
	for (unsigned r = 0; r < rounds; r++) {
		shmt_limiter_stat_t st;
		int status, same_a, same_b;
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0) {
			shmt_t *c;

			if (shmt_open(seg, &c) != 0)
				_exit(2);
			/* Change it back and forth (the parent grants). */
			for (unsigned i = 0;; i++)
				if (shmt_limiter_update(c, "k", i % 2 ? &a : &b,
				    NULL, 0) != 0)
					_exit(3);
		}
		tu_pause_ms(1 + (int)(tu_rand(&rs) % 20));
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		/* Killed inside the table lock (the change under way), or not:
		 * both must be whole. */
		held += shmt__lock_peek(h, &h->hdr->sh_table_lock, &(uint32_t){ 0 })
		    == SHMT_LOCK_DEAD;
		/* Old or new, never a mix; the segment checks clean. */
		assert_int_equal(shmt_limiter_stat(h, "k", &st), 0);
		same_a = st.limit == a.limit && st.window_ns == a.window_ns &&
		    st.burst == a.burst;
		same_b = st.limit == b.limit && st.window_ns == b.window_ns &&
		    st.burst == b.burst;
		if (!same_a && !same_b)
			fail_msg("seed %" PRIu64 " round %u: limit %" PRIu64
			    " window %" PRIu64 " burst %" PRIu64 ": a mix",
			    seed, r, st.limit, st.window_ns, st.burst);
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
		/* The table lock (perhaps the dead one's) is taken again. */
		if (shmt_limiter_update(h, "k", same_a ? &b : &a, why,
		    sizeof(why)) != 0)
			fail_msg("seed %" PRIu64 " round %u: update after the "
			    "kill: %s", seed, r, why);
		assert_int_equal(shmt_limiter_stat(h, "k", &st), 0);
		assert_int_equal(st.limit, same_a ? b.limit : a.limit);
		assert_true(shmt_try_use_key(h, "k") >= 0);
	}
	printf("# seed %" PRIu64 ": %u of %u kills left the table lock to a "
	    "dead owner (taken over by the next change)\n", seed, held,
	    rounds);
	/* The child is inside the lock most of the time: a run that never
	 * killed it there did not test the repair. */
	assert_true(held > 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

static void
test_rate_kill(void **state)
{
	(void)state;
	kill_run(SHMT_MODE_GCRA);
}

static void
test_exact_kill(void **state)
{
	(void)state;
	kill_run(SHMT_MODE_EXACT);
}

/*
 * A decision over buckets whose serials wrap around 2^32: a sealed bucket
 * 2^32 - 1 and the active bucket 0, written by hand where the writers put
 * them (slot serial % nb, with nb = 12, which does not divide 2^32: the
 * two slots are 3 and 0, not neighbours).  The decision reads each from
 * its own slot: remaining and reset_after are the ring's, and the grant
 * and the peek after it agree.
 */
static void
test_decision_serial_wrap(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 1000, .slack_ns = 100,
		.slack_uses = 5 };
	struct tu_clock clk = { .now = 1000000 };
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t w[2], nw[2], T = clk.now;
	shmt_decision_t d;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "wrap");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(h, "wrap", &l), 0);
	assert_int_equal(shmt__lim_lookup(h, "wrap", &scratch, &v), 0);
	assert_int_equal(v->nb, 12);
	/* Every slot a released bucket far behind, then the two live ones:
	 * sealed 2^32 - 1 (2 uses, closed at T - 50, due at T + 950) and
	 * active 0 (1 use, closes at T + 50, due at T + 1050). */
	for (uint32_t i = 0; i < v->nb; i++) {
		v->ring[i].r[0] = 1;
		v->ring[i].r[1] = (uint64_t)(0xffffff00U + i) << 32;
	}
	v->ring[0xffffffffU % 12].r[0] = T - 50;
	v->ring[0xffffffffU % 12].r[1] = (uint64_t)0xffffffffU << 32 | 2;
	v->ring[0].r[0] = T + 50;
	v->ring[0].r[1] = 0;
	shmt__load128(&v->lim->lm_w, w);
	nw[0] = (uint64_t)3 << 32 | 1;                  /* inflight 3, count 1 */
	nw[1] = 1U << 17 | 1U << 16 | (w[1] & 0xffffU); /* tail 0, 1 sealed */
	assert_true(shmt__cas128(&v->lim->lm_w, w, nw));
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	/* 7 uses free: a peek counts its own grant (6 left), and every use is
	 * back when the active bucket is, at T + 1050. */
	assert_int_equal(shmt_peek(h, "wrap", NULL, 0, 1, &d), 1);
	assert_int_equal(d.remaining, 6);
	assert_int_equal(d.reset_after_ns, 1050);
	assert_int_equal(shmt_acquire(h, "wrap", NULL, 0, 1, &d), 1);
	assert_int_equal(d.remaining, 6);
	assert_int_equal(d.reset_after_ns, 1050);
	/* At T + 950 the sealed bucket is back (8 free) and the active one
	 * closed: a peek's grant would open a bucket back at T + 2050. */
	clk.now = T + 950;
	assert_int_equal(shmt_peek(h, "wrap", NULL, 0, 1, &d), 1);
	assert_int_equal(d.remaining, 7);
	assert_int_equal(d.reset_after_ns, 1100);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	/* Restored on a clock 5000 ns ahead (a snapshot's rebase): bucket 0
	 * moves with the others, so the answer is the same 5000 ns later
	 * (not bucket 0 released at once: 8 uses then, an over-grant). */
	assert_int_equal(shmt__rebase_times(h, 5000), 0);
	assert_int_equal(v->ring[0].r[0], T + 50 + 5000);
	clk.now = T + 950 + 5000;
	assert_int_equal(shmt_peek(h, "wrap", NULL, 0, 1, &d), 1);
	assert_int_equal(d.remaining, 7);
	assert_int_equal(d.reset_after_ns, 1100);
	tu_close_unlink(h, seg);
}

/*
 * Grants across the serial's wrap at 2^32 on a ring whose size does not
 * divide it (nb = 30: serials s and s + 16 share a slot there).  One use
 * per bucket, up to 20 buckets in use, so buckets 16 apart are in use
 * together as the serial wraps.  Against the seed's model, call for call
 * on an injected clock: no call fails, none is granted that the model
 * refuses, and only where a bucket's slot is still taken by one 16 before
 * it may the ring refuse what the model grants (ring full, at most nb
 * times, none once the wrap is 2 nb serials behind); the ring checks clean
 * throughout.
 */
static void
test_ring_serial_wrap(void **state)
{
	shmt_limit_t l = { .limit = 20, .window_ns = 1000, .slack_ns = 100,
		.slack_uses = 1 };
	struct tu_clock clk = { .now = 1000000 };
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	struct tl_throttle m;
	shmt_limiter_stat_t st;
	uint64_t w[2], nw[2];
	uint32_t tail = 0xffffffc0U, extra = 0, granted = 0;
	uint64_t ring_full_past = UINT64_MAX;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "wrap2");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(h, "w", &l), 0);
	assert_int_equal(shmt__lim_lookup(h, "w", &scratch, &v), 0);
	assert_int_equal(v->nb, 30);
	assert_int_equal((uint32_t)((1ULL << 32) % v->nb), 16);
	/* An idle ring whose next bucket is serial TAIL: each slot holds a
	 * bucket released long ago (the serial nb to 2 nb before TAIL that
	 * maps to it). */
	for (uint32_t s = tail - 2 * v->nb; s != tail - v->nb; s++) {
		struct shmt_ring_slot *sl = &v->ring[s % v->nb];

		sl->r[0] = 1;
		sl->r[1] = (uint64_t)s << 32;
	}
	shmt__load128(&v->lim->lm_w, w);
	nw[0] = 0;
	nw[1] = (uint64_t)tail << 32 | (w[1] & 0xffffU);
	assert_true(shmt__cas128(&v->lim->lm_w, w, nw));
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	assert_int_equal(tl_throttle_init(&m, 20, 1000, 100, 1), 0);
	for (int i = 0; i < 3000; i++) {
		int want = tl_throttle_try(&m, clk.now);
		int got = shmt_try_use_key(h, "w");

		if (got < 0 || got > want)
			fail_msg("call %d at %" PRIu64 ": model %d, ring %d", i,
			    clk.now, want, got);
		extra += (uint32_t)(want - got);
		granted += (uint32_t)got;
		clk.now += 7 + (uint64_t)(i % 5) * 13;
		if (i % 100 == 0)
			assert_int_equal(shmt_check(h, NULL, NULL), 0);
		shmt__load128(&v->lim->lm_w, w);
		if (ring_full_past == UINT64_MAX &&
		    (uint32_t)(w[1] >> 32) >= 2 * v->nb &&
		    (uint32_t)(w[1] >> 32) < 0x80000000U) {
			assert_int_equal(shmt_limiter_stat(h, "w", &st), 0);
			ring_full_past = st.denied_ring_full;
		}
	}
	tl_throttle_free(&m);
	/* The serial wrapped long before the end, and the ring refused a few
	 * grants of the model's around the wrap (as ring full), none after. */
	shmt__load128(&v->lim->lm_w, w);
	assert_true((uint32_t)(w[1] >> 32) > 4 * v->nb &&
	    (uint32_t)(w[1] >> 32) < 0x80000000U);
	assert_true(granted > 1000);
	assert_int_equal(shmt_limiter_stat(h, "w", &st), 0);
	assert_true(st.denied_ring_full > 0);    /* the wrap was met */
	assert_true(extra <= st.denied_ring_full);
	assert_true(st.denied_ring_full <= v->nb);
	assert_int_equal(st.denied_ring_full, ring_full_past);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	tu_close_unlink(h, seg);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest unit[] = {
		cmocka_unit_test(test_checkers),
		cmocka_unit_test_teardown(test_decision_serial_wrap, tu_sweep),
		cmocka_unit_test_teardown(test_ring_serial_wrap, tu_sweep),
		cmocka_unit_test_teardown(test_rate_model, tu_sweep),
		cmocka_unit_test_teardown(test_exact_model, tu_sweep),
		cmocka_unit_test_teardown(test_refusals, tu_sweep),
		cmocka_unit_test_teardown(test_other_handle, tu_sweep),
		cmocka_unit_test_teardown(test_check_word, tu_sweep),
	};
	const struct CMUnitTest stress[] = {
		cmocka_unit_test_teardown(test_rate_mp, tu_sweep),
		cmocka_unit_test_teardown(test_exact_mp, tu_sweep),
		cmocka_unit_test_teardown(test_rate_kill, tu_sweep),
		cmocka_unit_test_teardown(test_exact_kill, tu_sweep),
	};
	if (argc > 1 && strcmp(argv[1], "stress") == 0)
		return cmocka_run_group_tests(stress, NULL, NULL);
	return cmocka_run_group_tests(unit, NULL, NULL);
}
