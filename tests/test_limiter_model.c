/* SPDX-License-Identifier: MIT */
/*
 * The library against the seed: with an injected clock and random time
 * steps, shmt_try_use_key, shmt_next_key and exact mode must answer exactly
 * as the reference models in test_limiter_util.c do, call for call, and the
 * limiter's stat must agree with the model's state after every call.
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TM_OPS_BUCKETS 1000000.0
#define TM_OPS_KEYS 400000.0
#define TM_OPS_EXACT 1000000.0
/* Sanitizer builds scale the work down, but never below this: the point of
 * the test is many calls across many parameter sets. */
#define TM_OPS_MIN 100000.0
#define TM_KEYS_MAX 16

struct tm_params {
	uint64_t limit, window, slack, slack_uses;
	int mode;
	uint32_t nkeys, uses_per_key;
	shmt_time_t start;
	uint64_t burst;        /* mean calls at one instant, less one */
};

struct tm_run {
	shmt_t *h;
	struct tu_clock clk;
	char seg[96];
	uint64_t *rs;
	uint64_t seed;
	unsigned set;
	const struct tm_params *p;
	struct tl_throttle m;
	struct tl_exact ex;
	char keynames[TM_KEYS_MAX][16];
	const char *keys[TM_KEYS_MAX];
};

static uint64_t
tm_pick(uint64_t *rs, uint64_t n)
{
	return n == 0 ? 0 : tu_rand(rs) % n;
}

/* A step of the clock, drawn to land on the edges the algorithm has: the
 * same instant, a nanosecond or two, around the slack, around the window,
 * around window + slack, and huge jumps. */
static uint64_t
tm_step(uint64_t *rs, const struct tm_params *p)
{
	uint64_t c = p->window, s = p->slack, per_use = c / p->limit;

	if (tm_pick(rs, p->burst + 1) != 0)
		return 0;
	switch (tm_pick(rs, 12)) {
	case 0:
	case 1:
		return 1 + tm_pick(rs, 3);
	case 2:
		return s - 1 + tm_pick(rs, 3);
	case 3:
		return tm_pick(rs, s + 1);
	case 4:
		return c - 1 + tm_pick(rs, 3);
	case 5:
		return c + s - 1 + tm_pick(rs, 3);
	case 6:
		return tm_pick(rs, 2 * s + 1);
	case 7:
		return tm_pick(rs, per_use + 2);
	case 8:
		return tm_pick(rs, c + s + 1);
	case 9:
		return tm_pick(rs, s / 4 + 2);
	case 10:
		return tm_pick(rs, 4) == 0 ? (c + s) * (1 + tm_pick(rs, 64)) : 0;
	default:
		return tm_pick(rs, per_use / 4 + 1);
	}
}

/* The run in progress, static so that the teardown can clean up after an
 * assertion ended the test early. */
static struct tm_run tm_run_g;
static struct tm_run *tm_cur;

static void
tm_open(struct tm_run *r, const struct tm_params *p, const char *tag)
{
	shmt_limit_t lim;
	uint32_t i;

	memset(&lim, 0, sizeof(lim));
	lim.limit = p->limit;
	lim.window_ns = p->window;
	lim.mode = p->mode;
	if (p->mode == SHMT_MODE_BUCKETS) {
		lim.slack_ns = p->slack;
		lim.slack_uses = p->slack_uses;
	}
	if (p->nkeys > 0) {
		for (i = 0; i < p->nkeys; i++) {
			snprintf(r->keynames[i], sizeof(r->keynames[i]),
			    "key-%u", i);
			r->keys[i] = r->keynames[i];
		}
		lim.keys = r->keys;
		lim.nkeys = p->nkeys;
		lim.uses_per_key = p->uses_per_key;
	}
	r->p = p;
	r->clk.now = p->start;
	tu_segname(r->seg, sizeof(r->seg), tag);
	assert_int_equal(shmt_create(r->seg, NULL, &r->h), 0);
	tm_cur = r;
	assert_int_equal(shmt_set_clock(r->h, tu_clock_read, &r->clk), 0);
	assert_int_equal(shmt_limiter_define(r->h, "m", &lim), 0);
}

static void
tm_close(struct tm_run *r)
{
	tm_cur = NULL;
	shmt_close(r->h);
	r->h = NULL;
	assert_int_equal(shmt_unlink(r->seg), 0);
}

static int
tm_teardown(void **state)
{
	struct tm_run *r = tm_cur;

	if (r == NULL)
		return 0;
	tm_cur = NULL;
	tl_throttle_free(&r->m);
	tl_exact_free(&r->ex);
	shmt_close(r->h);
	r->h = NULL;
	return shmt_unlink(r->seg) == 0 ? 0 : -1;
}

static void
tm_report(const struct tm_run *r, uint64_t call, const char *what,
    uint64_t want, uint64_t got)
{
	const struct tm_params *p = r->p;

	fail_msg("seed %" PRIu64 " set %u (limit %" PRIu64 " window %" PRIu64
	    " slack %" PRIu64 " slack_uses %" PRIu64 " mode %d keys %u x %u "
	    "start %" PRIu64 ") call %" PRIu64 " at t=%" PRIu64
	    ": %s: model %" PRIu64 ", library %" PRIu64,
	    r->seed, r->set, p->limit, p->window, p->slack, p->slack_uses,
	    p->mode, p->nkeys, p->uses_per_key, p->start, call, r->clk.now,
	    what, want, got);
}

#define TM_CHECK(r, call, what, want, got)                                   \
	do {                                                                 \
		uint64_t want_ = (uint64_t)(want), got_ = (uint64_t)(got);   \
		if (want_ != got_)                                           \
			tm_report((r), (call), (what), want_, got_);         \
	} while (0)

/* One call of the library, checked against the seed's Throttler. */
static void
tm_bucket_call(struct tm_run *r, struct tl_throttle *m, uint64_t call,
    uint64_t *grants, uint64_t *denials)
{
	const struct tm_params *p = r->p;
	shmt_limiter_stat_t st;
	char name[64];
	int want, got;

	want = tl_throttle_try(m, r->clk.now);
	if (m->overflow)
		tm_report(r, call, "model ran out of buckets", m->num_buckets,
		    m->len);
	if (p->nkeys == 0) {
		got = shmt_try_use_key(r->h, "m");
		TM_CHECK(r, call, "try_use_key", want, got);
	} else {
		got = shmt_next_key(r->h, "m", name, sizeof(name));
		TM_CHECK(r, call, "next_key granted", want, got > 0);
		if (got > 0) {
			const char *exp = r->keys[*grants % p->nkeys];

			TM_CHECK(r, call, "next_key length", strlen(exp), got);
			if (strcmp(exp, name) != 0)
				tm_report(r, call, "next_key name index",
				    *grants % p->nkeys, strtoull(name + 4,
				    NULL, 10));
		}
	}
	*grants += want;
	*denials += !want;
	assert_int_equal(shmt_limiter_stat(r->h, "m", &st), 0);
	TM_CHECK(r, call, "stat.in_flight", p->limit - m->free, st.in_flight);
	TM_CHECK(r, call, "stat.free", m->free, st.free);
	TM_CHECK(r, call, "stat.buckets_in_use", m->len, st.buckets_in_use);
	TM_CHECK(r, call, "stat.grants", *grants, st.grants);
	TM_CHECK(r, call, "stat.denials", *denials,
	    st.denied_exhausted + st.denied_slack + st.denied_ring_full);
	TM_CHECK(r, call, "stat.denied_ring_full", 0, st.denied_ring_full);
	TM_CHECK(r, call, "stat.nbuckets", m->num_buckets, st.nbuckets);
}

/* Returns the number of denials, so that the caller can check that the
 * runs did exercise throttling. */
static uint64_t
tm_run_buckets(struct tm_run *r, const struct tm_params *p, uint64_t ops)
{
	struct tl_throttle *m = &r->m;
	uint64_t i, grants = 0, denials = 0;

	tm_open(r, p, "model");
	assert_int_equal(tl_throttle_init(m, p->limit, p->window, p->slack,
	    p->slack_uses), 0);
	for (i = 0; i < ops; i++) {
		r->clk.now += tm_step(r->rs, p);
		tm_bucket_call(r, m, i, &grants, &denials);
	}
	assert_true(grants > 0);
	tl_throttle_free(m);
	tm_close(r);
	return denials;
}

static uint64_t
tm_run_exact(struct tm_run *r, const struct tm_params *p, uint64_t ops)
{
	struct tl_exact *m = &r->ex;
	shmt_limiter_stat_t st;
	uint64_t i, grants = 0, denials = 0;
	int want, got;

	tm_open(r, p, "exact");
	assert_int_equal(tl_exact_init(m, p->limit, p->window), 0);
	for (i = 0; i < ops; i++) {
		r->clk.now += tm_step(r->rs, p);
		want = tl_exact_try(m, r->clk.now);
		got = shmt_try_use_key(r->h, "m");
		TM_CHECK(r, i, "exact try_use_key", want, got);
		grants += want;
		denials += !want;
		assert_int_equal(shmt_limiter_stat(r->h, "m", &st), 0);
		TM_CHECK(r, i, "exact stat.in_flight",
		    tl_exact_held(m, r->clk.now), st.in_flight);
		TM_CHECK(r, i, "exact stat.grants", grants, st.grants);
		TM_CHECK(r, i, "exact stat.denials", denials,
		    st.denied_exhausted + st.denied_slack);
	}
	assert_true(grants > 0);
	tl_exact_free(m);
	tm_close(r);
	return denials;
}

/* A set that never throttled proves little: most sets must have (the
 * trickle sets are meant not to). */
static void
tm_check_throttled(unsigned throttled, unsigned nsets)
{
	printf("# %u of %u parameter sets throttled\n", throttled, nsets);
	assert_true(throttled * 2 >= nsets);
}

/* Fixed edge cases: (limit, window, slack, slack_uses). */
static const uint64_t tm_edges[][4] = {
	{ 1, 1000, 100, 1 },              /* limit 1 */
	{ 10, 1000, 250, 1 },             /* slack_uses 1 */
	{ 10, 1000, 100, 10 },            /* slack_uses = limit */
	{ 20, 1000, 1, 3 },               /* tiny slack: 1000 + 7 buckets */
	{ 20, 1000, 1000000, 4 },         /* huge slack */
	{ 50, 1000, 300, 7 },             /* window not a multiple of slack */
	{ 500, 600000000000ULL, 60000000000ULL, 50 }, /* the seed's example */
	{ 3, 7, 3, 2 },
	{ 1, 1, 1, 1 },
	{ 1000, 1000000, 10000, 1 },
	{ 64, 1000000, 999999, 63 },
	{ 7, 100, 101, 7 },
};

#define TM_NEDGES (sizeof(tm_edges) / sizeof(tm_edges[0]))

/* Start near 0, or just below 2^63 so that the run crosses it. */
static shmt_time_t
tm_start(uint64_t *rs, unsigned k, const struct tm_params *p)
{
	switch (k % 3) {
	case 0:
		return 0;
	case 1:
		return (1ULL << 63) - (p->window + p->slack) * 3 -
		    tm_pick(rs, 1000);
	default:
		return tm_pick(rs, 1ULL << 40);
	}
}

static void
tm_random_params(uint64_t *rs, struct tm_params *p)
{
	uint64_t a;

	p->limit = 1 + tm_pick(rs, tm_pick(rs, 4) == 0 ? 2000 : 40);
	p->slack_uses = 1 + tm_pick(rs, p->limit);
	p->window = 1 + tm_pick(rs, tm_pick(rs, 2) ? 1000 : 1000000000);
	/* Keep ceil(window/slack) well inside SHMT_BUCKETS_MAX. */
	a = 1 + tm_pick(rs, tm_pick(rs, 3) == 0 ? 3000 : 20);
	p->slack = p->window / a + tm_pick(rs, 3);
	if (p->slack == 0)
		p->slack = 1;
	if (tm_pick(rs, 8) == 0)
		p->slack = p->window * (1 + tm_pick(rs, 5));
}

/* Calls per instant as a multiple of the limit, in tenths: from a trickle
 * that never exhausts the limiter to bursts that exhaust it at once. */
static const unsigned tm_burst[] = { 0, 1, 5, 20, 100 };

static uint64_t
tm_burst_of(unsigned k, uint64_t limit)
{
	return tm_burst[k % 5] * limit / 10;
}

static void
test_buckets_model(void **state)
{
	struct tm_run *r = &tm_run_g;
	struct tm_params p;
	uint64_t seed = tu_seed("test_buckets_model"), rs = seed;
	double scale = tu_scale();
	uint64_t total = (uint64_t)(TM_OPS_BUCKETS * (scale < 1 ? scale : 1));
	unsigned nsets = 2 * TM_NEDGES + 24, k, throttled = 0;

	if (total < TM_OPS_MIN)
		total = TM_OPS_MIN;
	memset(r, 0, sizeof(*r));
	r->rs = &rs;
	r->seed = seed;
	for (k = 0; k < nsets; k++) {
		memset(&p, 0, sizeof(p));
		if (k < 2 * TM_NEDGES) {
			p.limit = tm_edges[k / 2][0];
			p.window = tm_edges[k / 2][1];
			p.slack = tm_edges[k / 2][2];
			p.slack_uses = tm_edges[k / 2][3];
		} else {
			tm_random_params(&rs, &p);
		}
		p.mode = SHMT_MODE_BUCKETS;
		p.start = tm_start(&rs, k, &p);
		p.burst = tm_burst_of(k, p.limit);
		r->set = k;
		throttled += tm_run_buckets(r, &p, total / nsets) > 0;
	}
	printf("# %u parameter sets, %" PRIu64 " calls\n", nsets,
	    total / nsets * nsets);
	tm_check_throttled(throttled, nsets);
}

/* next_key: K names x X uses, limit K * X; the i-th grant names key i % K. */
static void
test_next_key_model(void **state)
{
	static const uint32_t kx[][3] = {
		/* nkeys, uses_per_key, slack_uses */
		{ 1, 1, 1 }, { 3, 2, 2 }, { 5, 4, 20 }, { 7, 3, 1 },
		{ 16, 10, 9 }, { 2, 50, 7 }, { 16, 1, 16 }, { 9, 9, 4 },
	};
	struct tm_run *r = &tm_run_g;
	struct tm_params p;
	uint64_t seed = tu_seed("test_next_key_model"), rs = seed;
	double scale = tu_scale();
	uint64_t total = (uint64_t)(TM_OPS_KEYS * (scale < 1 ? scale : 1));
	unsigned nsets = 2 * (sizeof(kx) / sizeof(kx[0])), k, throttled = 0;

	memset(r, 0, sizeof(*r));
	r->rs = &rs;
	r->seed = seed;
	for (k = 0; k < nsets; k++) {
		memset(&p, 0, sizeof(p));
		p.nkeys = kx[k / 2][0];
		p.uses_per_key = kx[k / 2][1];
		p.limit = (uint64_t)p.nkeys * p.uses_per_key;
		p.slack_uses = kx[k / 2][2];
		p.window = 1000 + tm_pick(&rs, 1000000);
		p.slack = p.window / (1 + tm_pick(&rs, 12)) + tm_pick(&rs, 3);
		p.mode = SHMT_MODE_BUCKETS;
		p.start = tm_start(&rs, k, &p);
		p.burst = tm_burst_of(k, p.limit);
		r->set = k;
		throttled += tm_run_buckets(r, &p, total / nsets) > 0;
	}
	tm_check_throttled(throttled, nsets);
}

static void
test_exact_model(void **state)
{
	static const uint64_t lw[][2] = {
		{ 1, 1000 }, { 2, 1 }, { 5, 999 }, { 64, 100000 },
		{ 1000, 1000000 }, { 3, 7 }, { 17, 1000000000 }, { 300, 5000 },
	};
	struct tm_run *r = &tm_run_g;
	struct tm_params p;
	uint64_t seed = tu_seed("test_exact_model"), rs = seed;
	double scale = tu_scale();
	uint64_t total = (uint64_t)(TM_OPS_EXACT * (scale < 1 ? scale : 1));
	unsigned nsets = 3 * (sizeof(lw) / sizeof(lw[0])), k, throttled = 0;

	if (total < TM_OPS_MIN)
		total = TM_OPS_MIN;
	memset(r, 0, sizeof(*r));
	r->rs = &rs;
	r->seed = seed;
	for (k = 0; k < nsets; k++) {
		memset(&p, 0, sizeof(p));
		p.limit = lw[k / 3][0];
		p.window = lw[k / 3][1];
		/* Steps are drawn around a pretend slack in exact mode. */
		p.slack = p.window / 7 + 1;
		p.mode = SHMT_MODE_EXACT;
		p.start = tm_start(&rs, k, &p);
		p.burst = tm_burst_of(k, p.limit);
		r->set = k;
		throttled += tm_run_exact(r, &p, total / nsets) > 0;
	}
	tm_check_throttled(throttled, nsets);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_buckets_model, tm_teardown),
		cmocka_unit_test_teardown(test_next_key_model, tm_teardown),
		cmocka_unit_test_teardown(test_exact_model, tm_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
