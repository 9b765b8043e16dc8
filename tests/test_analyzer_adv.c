/* SPDX-License-Identifier: MIT */
/*
 * The hot-key analyzer against an exact oracle on adversarial traces, each
 * on four configurations: a key at exactly floor(threshold x N) + 1 of N
 * requests (placed first, last, interleaved, packed into the last
 * sub-window, and among keys that share its home slot); noise of
 * all-distinct keys; k + 1 keys in rotation for k counters; probe + 1 keys
 * that all hash to one home slot (found by learning hashes from the
 * library), with and without a hot key among them; mass on the last
 * nanosecond of a sub-window and on the first nanosecond of the exact
 * window; a burst in what becomes the oldest sub-window, then silence; an
 * idle gap of hours.  The same checks run at every sub-window edge and at
 * random moments (see test_analyzer_util.c).  Two more tests: an idle gap
 * of exactly (subwindows + 1) x 2^24 sub-windows, and a key requested once
 * and absent from the dictionary, listed when the window drains.
 */
#include "test_analyzer_util.h"

#include "analyzer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define AD_RATE 1200.0          /* requests per sub-window, normal build */

static uint64_t ad_seed;

static uint64_t
ad_rate(void)
{
	double n = AD_RATE * ta_scale();

	return n < 200 ? 200 : (uint64_t)n;
}

static uint64_t
ad_start(struct ta_run *r)
{
	uint64_t t0 = TA_SEC + tu_rand(&r->rs) % (100ULL * 86400 * TA_SEC);

	r->clk.now = t0;
	r->next_rand_q = t0;
	return t0;
}

/* The first sub-window edge at least a window and a sub-window after now:
 * nothing before it reaches a span that starts after it. */
static uint64_t
ad_fresh(struct ta_run *r)
{
	return ((r->clk.now + r->c->window_ns + r->w) / r->w + 1) * r->w;
}

enum { AD_FIRST, AD_LAST, AD_MIXED, AD_PACKED, AD_COLLIDING, AD_ORDERS };

/*
 * N requests in the subw sub-windows from a fresh edge T, of which
 * floor(ppm x N / 10^6) + 1 are for one key; at T + window - 1 the span
 * and the exact window hold exactly these N requests, so the key is over
 * the threshold by one request and must be listed, certified.
 */
static void
ad_exact(const struct ta_conf *c, uint64_t seed)
{
	struct ta_run r;
	uint32_t cls[SHMT_AN_PROBE_MAX + 8];

	ta_open(&r, c, "key at floor(x N) + 1", TA_SEC, seed);
	ad_start(&r);
	for (int order = 0; order < AD_ORDERS; order++) {
		uint64_t T = ad_fresh(&r), span = c->subw * r.w;
		uint64_t n = ad_rate() * c->subw;
		uint64_t hot = n * c->ppm / 1000000 + 1, *t;
		uint32_t hot_id = 10 + (uint32_t)order, ncls = 0;
		uint8_t *is_hot = calloc(n, 1);

		t = malloc(n * sizeof(*t));
		assert_true(t != NULL && is_hot != NULL);
		if (order == AD_COLLIDING) {
			ncls = ta_collide(r.counters / r.probe, TA_COLD, TA_IDS, cls,
			    r.probe + 8);
			assert_true(ncls > r.probe);
			hot_id = cls[--ncls];
		}
		/* Packed: the key's requests all in the last sub-window, the
		 * others before it. */
		for (uint64_t j = 0; j < n; j++)
			t[j] = order != AD_PACKED ? T + tu_rand(&r.rs) % (span - 1) :
			    j < n - hot ? T + tu_rand(&r.rs) % (span - r.w) :
			    T + span - r.w + tu_rand(&r.rs) % (r.w - 1);
		qsort(t, n, sizeof(*t), ta_cmp_u64);
		for (uint64_t j = 0, k = 0; k < hot; j++) {
			uint64_t at = order == AD_FIRST ? j :
			    order == AD_LAST || order == AD_PACKED ? n - 1 - j :
			    tu_rand(&r.rs) % n;

			if (!is_hot[at]) {
				is_hot[at] = 1;
				k++;
			}
		}
		r.watch = hot_id;
		for (uint64_t j = 0; j < n; j++)
			ta_get(&r, t[j], is_hot[j] ? hot_id :
			    order == AD_COLLIDING && j % 2 ? cls[j % ncls] :
			    ta_pick(&r, &(struct ta_mix){ .noise = 1 }));
		ta_advance(&r, T + span - 1);
		ta_query(&r);
		if (r.watch_count != hot || !r.watch_reported ||
		    !r.last_certified) {
			printf("# order %d: key %u had %" PRIu64 " of %" PRIu64
			    " (wanted %" PRIu64 "), reported %d, certified %d\n",
			    order, hot_id, r.watch_count, n, hot,
			    r.watch_reported, r.last_certified);
			fail();
		}
		free(t);
		free(is_hot);
	}
	r.watch = 0;
	ta_close(&r);
}

static void
ad_noise(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix m = { 2, { 0, 1 }, { 0.105, 0.11 }, 1, 0, 0 };
	struct ta_run r;
	uint64_t t, rate;

	if (c->ppm < 100000) {
		m.share[0] = 0.052;
		m.share[1] = 0.055;
	}

	ta_open(&r, c, "all-distinct noise", TA_SEC, seed);
	/* Enough distinct keys per sub-window to overflow every summary (so
	 * that d grows), whatever the build's scale. */
	rate = ad_rate() > 3ULL * r.counters ? ad_rate() : 3ULL * r.counters;
	t = ad_start(&r);
	r.must_certify = 1;
	for (uint32_t s = 0; s < 3 * c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, rate, &m);
	ta_advance(&r, t);
	assert_true(r.must_report > 0 && r.max_error > 0);
	ta_close(&r);
}

/* K keys in strict rotation (each its turn, in order), and a hot key with
 * share HOT among them. */
static void
ad_rotate(struct ta_run *r, const uint32_t *ids, uint32_t k, uint32_t hot_id,
    double hot)
{
	const struct ta_conf *c = r->c;
	uint64_t t = r->clk.now, turn = 0;

	r->must_certify = 1;
	for (uint32_t s = 0; s < 3 * c->subw; s++, t += r->w) {
		/* Enough turns per sub-window to fill the group and step d,
		 * whatever the build's scale and the group's size. */
		uint64_t n = ad_rate() > 3ULL * k ? ad_rate() : 3ULL * k;

		for (uint64_t j = 0; j < n; j++) {
			uint64_t at = t + j * (r->w / n);
			double u = (double)(tu_rand(&r->rs) % 1000000) / 1e6;

			ta_get(r, at, u < hot ? hot_id : ids[turn++ % k]);
		}
	}
	ta_advance(r, t);
}

static void
ad_rotation(const struct ta_conf *c, uint64_t seed)
{
	struct ta_run r;
	uint32_t *ids;

	ta_open(&r, c, "k + 1 keys in rotation", TA_SEC, seed);
	ad_start(&r);
	ids = malloc((r.counters + 1) * sizeof(*ids));
	assert_non_null(ids);
	for (uint32_t j = 0; j <= r.counters; j++)
		ids[j] = TA_COLD + j;
	ad_rotate(&r, ids, r.counters + 1, 5, c->ppm * 1.1e-6);
	assert_true(r.must_report > 0);
	free(ids);
	ta_close(&r);
}

/* probe + 1 keys of one group (counters / probe groups, picked by the hash)
 * fill that group, so every turn of the rotation is a step of d. */
static void
ad_collide(const struct ta_conf *c, uint64_t seed)
{
	for (int with_hot = 0; with_hot < 2; with_hot++) {
		struct ta_run r;
		uint32_t cls[SHMT_AN_PROBE_MAX + 8], n;

		ta_open(&r, c, with_hot ? "probe + 1 colliding keys and a hot one" :
		    "probe + 1 colliding keys", TA_SEC, seed);
		ad_start(&r);
		n = ta_collide(r.counters / r.probe, TA_COLD, TA_IDS, cls, r.probe + 2);
		if (n < r.probe + 2) {
			printf("# only %u keys of the universe share a home slot "
			    "of %u\n", n, r.counters);
			fail();
		}
		ad_rotate(&r, cls, r.probe + 1, cls[r.probe + 1],
		    with_hot ? c->ppm * 1.1e-6 : 0);
		/* The trace did collide: d grew. */
		assert_true(r.max_error * (r.probe + 1) * 2 > r.max_total);
		if (with_hot)
			assert_true(r.must_report > 0);
		ta_close(&r);
	}
}

/*
 * Bursts of a hot key on the last nanosecond of a sub-window (E - 1) and on
 * its first (E), over steady cold traffic; queries at the moments the exact
 * window starts on the burst, and one nanosecond / one sub-window later.
 */
static void
ad_edges(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix m = { 0, { 0 }, { 0 }, 0, TA_COLD, 2000 };
	uint64_t t, e1, e2, burst;
	struct ta_run r;

	ta_open(&r, c, "mass at sub-window edges", TA_SEC, seed);
	t = ad_start(&r);
	t = (t / r.w + 1) * r.w;
	e1 = t + (c->subw + 2) * r.w;
	e2 = e1 + 3 * r.w;
	burst = ad_rate() * c->subw * 3 / 10;
	ta_force(&r, e1 - 1 + c->window_ns - 1);
	ta_force(&r, e1 - 1 + c->window_ns);
	ta_force(&r, e1 - 1 + c->window_ns + 1);
	ta_force(&r, e2 + c->window_ns);
	ta_force(&r, e2 + c->window_ns + 1);
	ta_force(&r, e2 + c->window_ns + r.w - 1);
	for (uint32_t s = 0; s < 4 * c->subw; s++, t += r.w) {
		if (t == e1)
			for (uint64_t j = 0; j < burst; j++)
				ta_get(&r, e1 - 1, 6);
		if (t == e2)
			for (uint64_t j = 0; j < burst; j++)
				ta_get(&r, e2, 7);
		ta_traffic(&r, t, t + r.w, ad_rate(), &m);
	}
	ta_advance(&r, t);
	assert_true(r.must_report > 0);
	ta_close(&r);
}

static void
ad_oldest(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix cold = { 0, { 0 }, { 0 }, 0, TA_COLD, 1000 };
	struct ta_mix hot = { 2, { 8, 9 }, { 0.4, 0.2 }, 0, TA_COLD, 1000 };
	struct ta_run r;
	uint64_t t;

	ta_open(&r, c, "burst in the oldest sub-window", TA_SEC, seed);
	t = ad_start(&r);
	for (uint32_t s = 0; s < c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, ad_rate(), &cold);
	ta_traffic(&r, t, t + r.w, 5 * ad_rate(), &hot);
	ta_advance(&r, t + 2 * c->window_ns);
	assert_true(r.must_report > 0);
	ta_close(&r);
}

static void
ad_gap(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix a = { 2, { 11, 12 }, { 0.3, 0.15 }, 0, TA_COLD, 500 };
	struct ta_mix b = { 2, { 13, 14 }, { 0.2, 0.12 }, 0, TA_COLD + 500,
	    500 };
	struct ta_run r;
	uint64_t t;

	ta_open(&r, c, "idle gap of hours", TA_SEC, seed);
	t = ad_start(&r);
	for (uint32_t s = 0; s < c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, ad_rate(), &a);
	t += 3 * 3600 * TA_SEC + tu_rand(&r.rs) % (3600 * TA_SEC);
	for (uint32_t s = 0; s < 2 * c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, ad_rate(), &b);
	ta_advance(&r, t);
	assert_true(r.must_report > 0);
	ta_close(&r);
}

#define AD_EVERY_CONF(fn)                                            \
static void                                                          \
test_##fn(void **state)                                              \
{                                                                    \
	(void)state;                                                 \
	for (size_t k = 0; k < ta_nconfs; k++)                       \
		ad_##fn(&ta_confs[k], ad_seed + k);                  \
}
AD_EVERY_CONF(exact)
AD_EVERY_CONF(noise)
AD_EVERY_CONF(rotation)
AD_EVERY_CONF(collide)
AD_EVERY_CONF(edges)
AD_EVERY_CONF(oldest)
AD_EVERY_CONF(gap)

/*
 * A window of 12 ms in 12 sub-windows, idle for G sub-windows, then new
 * traffic: every request after the gap must count in the span, and nothing
 * from before it.  Sub-windows are numbered modulo some power of two in
 * the segment; these gaps are where such a number wraps: 2^23 + 13
 * sub-windows (2.3 hours), 2^24 (4.7 hours), and 13 x 2^24 (60.6 hours,
 * where a summary's ring slot and its number both come round again).
 */
static void
ad_gap_wrap(uint64_t gap, const char *name)
{
	static const struct ta_conf c = { "12ms/12/10%/1MiB", 1ULL << 20,
	    12 * TA_MS, 12, 100000 };
	struct ta_mix a = { 1, { 15 }, { 0.5 }, 0, TA_COLD, 100 };
	struct ta_mix b = { 1, { 16 }, { 0.3 }, 0, TA_COLD + 100, 100 };
	struct ta_run r;
	uint64_t t;

	ta_open(&r, &c, name, TA_SEC, ad_seed);
	t = ad_start(&r);
	t = (t / r.w + 1) * r.w;
	for (uint32_t s = 0; s < c.subw + 1; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, 300, &a);
	t += gap * r.w - (c.subw + 1) * r.w;
	for (uint32_t s = 0; s < 2 * c.subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, 300, &b);
	ta_advance(&r, t);
	ta_close(&r);
}

static void
test_gap_wrap_half(void **state)
{
	(void)state;
	ad_gap_wrap((1ULL << 23) + 13, "idle gap of 2^23 + 13 sub-windows");
}

static void
test_gap_wrap(void **state)
{
	(void)state;
	ad_gap_wrap(1ULL << 24, "idle gap of 2^24 sub-windows");
}

static void
test_gap_wrap_ring(void **state)
{
	(void)state;
	ad_gap_wrap(13ULL << 24, "idle gap of 13 x 2^24 sub-windows");
}

/* Keys absent from the dictionary are listed with their kind: one-off
 * keys, and one absent key with 3 of the 20 requests (15%, over the
 * threshold, so every answer until the window drains must list it), then
 * the window drains. */
static void
test_unnamed(void **state)
{
	struct ta_mix m = { 0, { 0 }, { 0 }, 1, 0, 0 };
	struct ta_run r;
	uint64_t t;

	(void)state;
	ta_open(&r, &ta_confs[0], "one-off keys as the window drains", TA_SEC,
	    ad_seed);
	t = ad_start(&r);
	ta_traffic(&r, t, t + r.w, 17, &m);
	for (int i = 0; i < 3; i++)
		ta_get(&r, r.clk.now + 1, 7);
	ta_advance(&r, t + 2 * ta_confs[0].window_ns);
	ta_summary(&r);
	assert_true(r.reported > 0);
	if (r.unnamed > 0)
		printf("# %" PRIu64 " listed keys had kind 0 and no key bytes; "
		    "kind must be SHMT_HOT_DICT or SHMT_HOT_CLIENT\n", r.unnamed);
	assert_int_equal(r.unnamed, 0);
	ta_close(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exact),
		cmocka_unit_test(test_noise),
		cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_collide),
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_oldest),
		cmocka_unit_test(test_gap),
		cmocka_unit_test(test_gap_wrap_half),
		cmocka_unit_test(test_gap_wrap),
		cmocka_unit_test(test_gap_wrap_ring),
		cmocka_unit_test(test_unnamed),
	};

	ad_seed = tu_seed("test_analyzer_adv");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
