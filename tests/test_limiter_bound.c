/* SPDX-License-Identifier: MIT */
/*
 * The bucket bound, reached.  With a = ceil(C/S) and b = ceil(L/B) the ring
 * has a + b buckets.  A trace that fills it:
 *
 *   at T0:           F = floor((L - 1 - g) / B) full buckets (B uses each),
 *                    then one bucket with one use;
 *   at T0 + k*S:     one use, k = 1..g, with g = min(a, L - 1): the previous
 *                    bucket closed by time exactly then, so each opens a new
 *                    bucket;
 *
 * and none is released before T0 + S + C > T0 + g*S (as (a - 1) * S < C).
 * That is M = F + 1 + g buckets with F*B + 1 + g <= L uses.  No trace holds
 * more: g timed (closed by time) buckets in use were opened at least S apart
 * within less than S + C, so g <= a; every bucket holds a use and full ones
 * hold B, so a new bucket finds at most floor((L - 1 - g) / B) full ones.
 * Hence M is the most buckets any trace can use, and M = a + b exactly when
 * (L - 1) mod B >= a (and L > a); otherwise the ring has room to spare (the
 * "one less" the seed's author expected).  The test drives the trace with an
 * injected clock, checks that the library's ring holds M buckets, equal to
 * the seed's model, that no call was denied (for a full ring or any other
 * reason), and that the remaining uses are all granted at the last instant;
 * random traces that favour new buckets never exceed M.
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct tb_set {
	uint64_t limit, window, slack, slack_uses;
	int reaches_bound;       /* expected: M == a + b */
};

static const struct tb_set tb_sets[] = {
	/* the seed's example: 10 minutes, 1 minute, 500 keys, 50 */
	{ 500, 600000000000ULL, 60000000000ULL, 50, 1 },
	{ 7, 10, 10, 7, 1 },               /* slack_uses = limit, a = 1 */
	{ 64, 1001, 100, 16, 1 },          /* window not a multiple of slack */
	{ 31, 3, 1, 8, 1 },
	{ 201, 1000, 999, 9, 1 },          /* a = 2 */
	{ 10, 1000, 300, 4, 0 },           /* 9 mod 4 < a = 4: one less */
	{ 20, 7, 2, 1, 0 },                /* slack_uses 1: at most L buckets */
	{ 1, 5, 1, 1, 0 },                 /* limit 1: one bucket */
	{ 100, 1000, 1, 10, 0 },           /* a = 1000 > L */
};

static struct {
	char seg[96];
	shmt_t *h;
	struct tl_throttle m;
} tb_g;

static int
tb_teardown(void **state)
{
	tl_throttle_free(&tb_g.m);
	if (tb_g.h == NULL)
		return 0;
	shmt_close(tb_g.h);
	tb_g.h = NULL;
	return shmt_unlink(tb_g.seg) == 0 ? 0 : -1;
}

static uint64_t
tb_div_up(uint64_t x, uint64_t y)
{
	return x / y + (x % y != 0);
}

/* One call at NOW, checked against the model; returns the result. */
static int
tb_call(struct tl_throttle *m, struct tu_clock *clk, shmt_time_t now)
{
	shmt_limiter_stat_t st;
	int want, got;

	clk->now = now;
	want = tl_throttle_try(m, now);
	got = shmt_try_use_key(tb_g.h, "b");
	assert_int_equal(got, want);
	assert_false(m->overflow);
	assert_int_equal(shmt_limiter_stat(tb_g.h, "b", &st), 0);
	assert_int_equal(st.buckets_in_use, m->len);
	assert_true(st.buckets_in_use <= st.nbuckets);
	assert_int_equal(st.denied_ring_full, 0);
	return got;
}

static void
tb_run(const struct tb_set *p, shmt_time_t t0)
{
	shmt_limit_t lim = { .limit = p->limit, .window_ns = p->window,
		.slack_ns = p->slack, .slack_uses = p->slack_uses };
	uint64_t a = tb_div_up(p->window, p->slack);
	uint64_t b = tb_div_up(p->limit, p->slack_uses);
	uint64_t g = a < p->limit - 1 ? a : p->limit - 1;
	uint64_t full = (p->limit - 1 - g) / p->slack_uses, k, most, grants = 0;
	struct tu_clock clk = { t0 };
	shmt_limiter_stat_t st;
	struct tl_throttle *m = &tb_g.m;
	shmt_bucket_info_t info[64];
	int n;

	most = full + 1 + g;
	tu_segname(tb_g.seg, sizeof(tb_g.seg), "bound");
	assert_int_equal(shmt_create(tb_g.seg, NULL, &tb_g.h), 0);
	assert_int_equal(shmt_set_clock(tb_g.h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(tb_g.h, "b", &lim), 0);
	assert_int_equal(tl_throttle_init(m, p->limit, p->window, p->slack,
	    p->slack_uses), 0);
	for (k = 0; k < full * p->slack_uses + 1; k++)
		grants += tb_call(m, &clk, t0) == 1;
	for (k = 1; k <= g; k++)
		grants += tb_call(m, &clk, t0 + k * p->slack) == 1;
	assert_int_equal(grants, full * p->slack_uses + 1 + g);
	assert_int_equal(shmt_limiter_stat(tb_g.h, "b", &st), 0);
	printf("# L=%" PRIu64 " C=%" PRIu64 " S=%" PRIu64 " B=%" PRIu64
	    ": ring %u, bound a+b %" PRIu64 ", reached %u\n", p->limit,
	    p->window, p->slack, p->slack_uses, st.nbuckets, a + b,
	    st.buckets_in_use);
	assert_int_equal(st.nbuckets, a + b);
	assert_int_equal(st.buckets_in_use, most);
	assert_int_equal(st.in_flight, grants);
	assert_int_equal(most == a + b, p->reaches_bound);
	/* The ring as the library lists it: oldest first, every use counted. */
	n = shmt_limiter_buckets(tb_g.h, "b", info, 64);
	assert_int_equal(n, most);
	if (most <= 64) {
		uint64_t uses = 0;

		for (k = 0; k < most; k++)
			uses += info[k].uses;
		assert_int_equal(uses, grants);
		assert_int_equal(info[0].uses, full > 0 ? p->slack_uses : 1);
	}
	/* The uses left are all granted at the last instant, never more. */
	while (grants < p->limit)
		grants += tb_call(m, &clk, clk.now) == 1 ? 1 : p->limit;
	assert_int_equal(grants, p->limit);
	assert_int_equal(tb_call(m, &clk, clk.now), 0);
	assert_int_equal(tb_teardown(NULL), 0);
}

/* Random traces that favour new buckets (steps of exactly S, bursts) never
 * hold more than M buckets: the construction above is the worst case. */
static void
tb_random(const struct tb_set *p, uint64_t *rs, uint64_t calls)
{
	shmt_limit_t lim = { .limit = p->limit, .window_ns = p->window,
		.slack_ns = p->slack, .slack_uses = p->slack_uses };
	uint64_t a = tb_div_up(p->window, p->slack);
	uint64_t g = a < p->limit - 1 ? a : p->limit - 1;
	uint64_t most = (p->limit - 1 - g) / p->slack_uses + 1 + g, k, seen = 0;
	struct tu_clock clk = { tu_rand(rs) % (1ULL << 40) };
	struct tl_throttle *m = &tb_g.m;

	tu_segname(tb_g.seg, sizeof(tb_g.seg), "bound");
	assert_int_equal(shmt_create(tb_g.seg, NULL, &tb_g.h), 0);
	assert_int_equal(shmt_set_clock(tb_g.h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(tb_g.h, "b", &lim), 0);
	assert_int_equal(tl_throttle_init(m, p->limit, p->window, p->slack,
	    p->slack_uses), 0);
	for (k = 0; k < calls; k++) {
		uint64_t r = tu_rand(rs) % 10, step = 0;

		if (r >= 5 && r < 8)
			step = p->slack;
		else if (r == 8)
			step = 1 + tu_rand(rs) % p->slack;
		else if (r == 9)
			step = tu_rand(rs) % (p->window + p->slack + 1);
		tb_call(m, &clk, clk.now + step);
		if (m->len > seen)
			seen = m->len;
	}
	assert_true(seen <= most);
	assert_int_equal(tb_teardown(NULL), 0);
}

static void
test_bound_random(void **state)
{
	uint64_t seed = tu_seed("test_bound_random"), rs = seed;
	size_t i;

	for (i = 0; i < sizeof(tb_sets) / sizeof(tb_sets[0]); i++)
		tb_random(&tb_sets[i], &rs, (uint64_t)(20000 * tu_scale()));
}

static void
test_bound_reached(void **state)
{
	size_t i;

	for (i = 0; i < sizeof(tb_sets) / sizeof(tb_sets[0]); i++) {
		tb_run(&tb_sets[i], 0);
		tb_run(&tb_sets[i], (1ULL << 63) - 5 * tb_sets[i].slack);
	}
}

/*
 * The window is half-open.  L grants at t fill [t, t + C); a grant at
 * exactly t + C is allowed, and one at t + C - 1 is not, in the library and
 * in the tests' sliding-window log (tl_exact: a grant at s still counts
 * while s + C > now).  So a closed interval [t, t + C] can hold 2L grants
 * at its two ends, and the promise is "at most L in any [t, t + C)".  (The
 * seed's log keeps a timestamp equal to now - C, so it would refuse at
 * t + C and grant at t + C + 1: one clock tick stricter.)  Exact mode, with
 * a key pool too: the name handed out at t + C is the first name again.
 */
static void
test_half_open(void **state)
{
	static const char *const keys[] = { "k0", "k1", "k2" };
	const uint64_t L = 6, C = 1000, t0 = 5000000;
	struct tl_exact m;
	struct tu_clock clk = { t0 };
	shmt_limit_t l;
	char buf[8];

	(void)state;
	tu_segname(tb_g.seg, sizeof(tb_g.seg), "halfopen");
	assert_int_equal(shmt_create(tb_g.seg, NULL, &tb_g.h), 0);
	assert_int_equal(shmt_set_clock(tb_g.h, tu_clock_read, &clk), 0);
	memset(&l, 0, sizeof(l));
	l.limit = L;
	l.window_ns = C;
	l.mode = SHMT_MODE_EXACT;
	assert_int_equal(shmt_limiter_define(tb_g.h, "ex", &l), 0);
	l.limit = 0;
	l.keys = keys;
	l.nkeys = 3;
	l.uses_per_key = 2;
	assert_int_equal(shmt_limiter_define(tb_g.h, "exk", &l), 0);
	assert_int_equal(tl_exact_init(&m, L, C), 0);
	for (uint64_t i = 0; i < L; i++) {
		assert_int_equal(tl_exact_try(&m, t0), 1);
		assert_int_equal(shmt_try_use_key(tb_g.h, "ex"), 1);
		assert_int_equal(shmt_next_key(tb_g.h, "exk", buf, sizeof(buf)),
		    2);
		assert_string_equal(buf, keys[i % 3]);
	}
	/* Full at t0 and one nanosecond before t0 + C. */
	assert_int_equal(shmt_try_use_key(tb_g.h, "ex"), 0);
	clk.now = t0 + C - 1;
	assert_int_equal(tl_exact_try(&m, clk.now), 0);
	assert_int_equal(shmt_try_use_key(tb_g.h, "ex"), 0);
	assert_int_equal(shmt_next_key(tb_g.h, "exk", buf, sizeof(buf)), 0);
	/* At exactly t0 + C all L come back: [t0, t0 + C] holds 2L. */
	clk.now = t0 + C;
	for (uint64_t i = 0; i < L; i++) {
		assert_int_equal(tl_exact_try(&m, clk.now), 1);
		assert_int_equal(shmt_try_use_key(tb_g.h, "ex"), 1);
		assert_int_equal(shmt_next_key(tb_g.h, "exk", buf, sizeof(buf)),
		    2);
		assert_string_equal(buf, keys[i % 3]);
	}
	assert_int_equal(tl_exact_try(&m, clk.now), 0);
	assert_int_equal(shmt_try_use_key(tb_g.h, "ex"), 0);
	tl_exact_free(&m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_bound_reached, tb_teardown),
		cmocka_unit_test_teardown(test_bound_random, tb_teardown),
		cmocka_unit_test_teardown(test_half_open, tb_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
