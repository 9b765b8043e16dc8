/* SPDX-License-Identifier: MIT */
/*
 * shmt_hit and shmt_count against the exact count of seed 002: the model
 * keeps every hit's time per key and counts those in the trailing window,
 * as the seed's bot does with its list of timestamps.  (The bot answers
 * before it records the new message; shmt_hit counts the hit first, so the
 * model records, then counts.)  With an injected clock, every answer for a
 * window w (shmt_hit: the configured W) must lie within the bound the
 * header states, for the configured error eps:
 *
 *   |answer - exact|  <=  max(1, eps x exact),  exact = #{t : now - t < w}
 *
 * and equal the exact count while that is at most k = ceil(2 / (3 eps)).
 * The traces: random over days, every hit in the oldest part of the window,
 * bursts and silences, keys hit once a day, a million hits a second.  Also:
 * a key silent for a whole window starts again at 1 and its memory is
 * reclaimed; memory per key stays within the header's formula; when the
 * store is full the least recently hit keys go first.
 */
#include "testutil.h"
#include "counters.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000ULL
#define HT_OPS 600000.0
#define HT_OPS_MIN 150000.0
#define HT_KEYS 48

/* The exact model of one key: its hit times, oldest first, from HEAD on. */
struct ht_key {
	uint64_t *t;
	size_t head, n, cap;
	char name[24];
	size_t klen;
};

struct ht_run {
	shmt_t *h;
	struct tu_clock clk;
	char seg[96];
	uint64_t window, w;             /* w: a 24th of the window */
	uint32_t eps_ppm, k;            /* the error and its exact range */
	struct ht_key k_[HT_KEYS];
	uint64_t rs, hits, below, above, err_max, dropped;
	double rel_max;                 /* largest error / exact, error > 1 */
	int count_on;                   /* check shmt_count after each hit */
	uint64_t counts;                /* shmt_count answers checked */
};

static void
ht_open(struct ht_run *r, uint64_t window, uint32_t eps_ppm, uint64_t bytes,
    uint32_t shards)
{
	shmt_config_t cfg;

	memset(r, 0, sizeof(*r));
	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = bytes;
	cfg.counters_shards = shards;
	cfg.counters_window_ns = window;
	cfg.counters_error_ppm = eps_ppm;
	tu_segname(r->seg, sizeof(r->seg), "hit");
	assert_int_equal(shmt_create(r->seg, &cfg, &r->h), 0);
	/* A fixed secret, so that where the keys land (shards, chains, and
	 * so what eviction walks first) is the same on every run; a seeded
	 * test makes it follow its seed (ht_secret). */
	{
		uint64_t ss = 0x243f6a8885a308d3ULL;

		tu_secret(r->h, &ss);
	}
	r->clk.now = 1000 * SEC;
	assert_int_equal(shmt_set_clock(r->h, tu_clock_read, &r->clk), 0);
	r->window = window;
	r->w = window / 24 > 0 ? window / 24 : 1;
	r->eps_ppm = eps_ppm;
	r->k = (2000000U + 3U * eps_ppm - 1) / (3U * eps_ppm);
	for (int i = 0; i < HT_KEYS; i++) {
		/* Binary names: a NUL in the middle, different lengths. */
		r->k_[i].klen = (size_t)snprintf(r->k_[i].name,
		    sizeof(r->k_[i].name), "hit-%d", i) + 1 + (size_t)(i % 3);
	}
}

/* Make the secret of R's segment follow SEED, before anything is stored:
 * its own stream, so the test's other draws stay as they were. */
static void
ht_secret(struct ht_run *r, uint64_t seed)
{
	uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

	tu_secret(r->h, &ss);
}

static void
ht_close(struct ht_run *r)
{
	shmt_close(r->h);
	assert_int_equal(shmt_unlink(r->seg), 0);
	for (int i = 0; i < HT_KEYS; i++)
		free(r->k_[i].t);
}

static void
ht_record(struct ht_key *k, uint64_t now)
{
	if (k->head > 0 && k->head >= k->n / 2) {
		memmove(k->t, k->t + k->head, (k->n - k->head) * sizeof(*k->t));
		k->n -= k->head;
		k->head = 0;
	}
	if (k->n == k->cap) {
		k->cap = k->cap ? 2 * k->cap : 64;
		k->t = realloc(k->t, k->cap * sizeof(*k->t));
		assert_non_null(k->t);
	}
	k->t[k->n++] = now;
}

/* Hits of K younger than AGE: those with now - t < AGE. */
static uint64_t
ht_count(const struct ht_key *k, uint64_t now, uint64_t age)
{
	size_t lo = k->head, hi = k->n;

	/* The first hit with now - t < age, by binary search (times only
	 * grow). */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (now - k->t[mid] < age)
			hi = mid;
		else
			lo = mid + 1;
	}
	return k->n - lo;
}

static void ht_count_check(struct ht_run *r, int i, uint64_t got);

/* GOT against EXACT: within max(1, eps x exact), and equal while exact is
 * at most k.  0 when it holds; counts the inexact answers. */
static int
ht_within(struct ht_run *r, uint64_t got, uint64_t exact)
{
	uint64_t err = got > exact ? got - exact : exact - got;

	if (err == 0)
		return 0;
	if (got < exact)
		r->below++;
	else
		r->above++;
	if (err > r->err_max)
		r->err_max = err;
	if (err > 1 && (double)err / (double)exact > r->rel_max)
		r->rel_max = (double)err / (double)exact;
	if (exact <= r->k)
		return -1;
	/* err <= max(1, eps exact), in integers: err 1, or err 10^6 <= ppm
	 * exact. */
	return err == 1 || (unsigned __int128)err * 1000000 <=
	    (unsigned __int128)r->eps_ppm * exact ? 0 : -1;
}

/* One hit of key I: the answer must be within the bound. */
static void
ht_hit(struct ht_run *r, int i)
{
	struct ht_key *k = &r->k_[i];
	uint64_t now = r->clk.now, got = 0, exact;

	ht_record(k, now);
	/* Hits older than the window can never count again: drop them. */
	while (k->head < k->n && now - k->t[k->head] >= r->window) {
		k->head++;
		r->dropped++;
	}
	exact = k->n - k->head;
	assert_int_equal(shmt_hit(r->h, k->name, k->klen, &got), 0);
	r->hits++;
	if (ht_within(r, got, exact) != 0)
		fail_msg("hit %" PRIu64 " of key %d at %" PRIu64 " ns: answer %"
		    PRIu64 ", exact %" PRIu64 " (window %" PRIu64 " ns, error %u "
		    "ppm, exact up to %u)", r->hits, i, now, got, exact,
		    r->window, r->eps_ppm, r->k);
	if (r->count_on)
		ht_count_check(r, i, got);
}

/* A clock step, in units of a 24th of the window: mostly bursts and short
 * pauses, sometimes a pause of a few units, rarely one longer than the
 * window; and now and then a step to the very start of the next sub-window
 * (or a nanosecond before it), where the ring turns. */
static void
ht_step(struct ht_run *r)
{
	uint64_t c = tu_rand(&r->rs) % 100000, u = r->window / 24, w = r->w;

	if (c < 20000)
		return;
	if (c < 70000)
		r->clk.now += tu_rand(&r->rs) % (u / 2000 + 1);
	else if (c < 99000)
		r->clk.now += tu_rand(&r->rs) % (u / 200 + 1);
	else if (c < 99800)
		r->clk.now += (r->clk.now / w + 1) * w - r->clk.now -
		    tu_rand(&r->rs) % 2;
	else if (c < 99998)
		r->clk.now += tu_rand(&r->rs) % (3 * u);
	else
		r->clk.now += r->window + tu_rand(&r->rs) % r->window;
}

/* Skewed keys: a few take most hits, the rest are sparse and go silent. */
static int
ht_pick(struct ht_run *r)
{
	if (tu_rand(&r->rs) % 10 < 7)
		return (int)(tu_rand(&r->rs) % 4);
	return (int)(tu_rand(&r->rs) % HT_KEYS);
}

static void
ht_report(struct ht_run *r, const char *what)
{
	printf("# %s (window %" PRIu64 " ns, error %u ppm, exact up to %u): %"
	    PRIu64 " hits, %" PRIu64 " reads; %" PRIu64 " answers below the "
	    "exact count, %" PRIu64 " above, by at most %" PRIu64 " (errors "
	    "above 1: %.4f%% of the count at most)\n", what, r->window, r->eps_ppm, r->k, r->hits,
	    r->counts, r->below, r->above, r->err_max, 100.0 * r->rel_max);
}

static void
ht_model_run(uint64_t window, uint32_t eps_ppm, double share, uint64_t seed)
{
	uint64_t ops = (uint64_t)(HT_OPS * share * tu_scale()), t0;
	struct ht_run r;

	if (ops < HT_OPS_MIN * share)
		ops = (uint64_t)(HT_OPS_MIN * share);
	ht_open(&r, window, eps_ppm, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	t0 = r.clk.now;
	/* The patterns must carry hits out of the window and make answers
	 * that are not exact, or the bound was not tested where it bites: a
	 * short run (a sanitizer build's scale) goes on until they have, up
	 * to the unscaled length. */
	while (r.hits < ops || ((r.dropped == 0 || r.below + r.above == 0 ||
	    r.clk.now - t0 <= 3 * window) && r.hits < 4 * HT_OPS * share)) {
		ht_step(&r);
		ht_hit(&r, ht_pick(&r));
	}
	ht_report(&r, "random trace");
	assert_true(r.clk.now - t0 > 3 * window);
	assert_true(r.dropped > 0 && r.below + r.above > 0);
	ht_close(&r);
}

/* The default (24 h at 1%), then other windows and errors from
 * shmt_config_t, from the finest to the coarsest allowed. */
static void
test_hit_model(void **state)
{
	uint64_t seed = tu_seed("test_hit_model");

	(void)state;
	ht_model_run(24 * 3600 * SEC, 10000, 0.4, seed);
	ht_model_run(60 * SEC, 1000, 0.2, seed + 1);
	ht_model_run(10 * SEC, 500000, 0.2, seed + 2);
	ht_model_run(256 * SEC, 50000, 0.2, seed + 3);
}

/* ---- Window edges ------------------------------------------------------ */

static int
ht_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Hits of one key on a grid of N points per window and one nanosecond
 * either side, over four windows from T0, each answer checked against the
 * exact model (ht_hit).  Two grids are probed: multiples of window / N
 * rounded down, and floor(i x window / N); and for each probe p also
 * p + window and one nanosecond either side, where a hit leaves the window.
 * DENSE hits every nanosecond instead (tiny windows: counts below k, which
 * must be exact at every edge). */
static void
ht_edges_run(uint64_t window, uint32_t subw, uint64_t t0, int dense)
{
	uint64_t w = window / subw, span = 4 * window, *p, np = 0, cap;
	struct ht_run r;

	ht_open(&r, window, 10000, 1ULL << 20, 2);
	r.clk.now = t0;
	cap = dense ? span + 1 : 9 * 2 * (span / w + 2) * 3;
	p = malloc(cap * sizeof(*p));
	assert_non_null(p);
	if (dense) {
		for (uint64_t t = t0; t <= t0 + span; t++)
			p[np++] = t;
	} else {
		uint64_t k0 = t0 / w, j0 = (uint64_t)((unsigned __int128)t0 *
		    subw / window);

		for (uint64_t k = k0; k * w <= t0 + span + w; k++)
			for (int e = 0; e < 2; e++) {
				uint64_t edge = e == 0 ? k * w :
				    (uint64_t)((unsigned __int128)(j0 + k - k0) *
				    window / subw);

				for (int a = -1; a <= 1; a++)
					for (int b = 0; b < 3; b++) {
						uint64_t x = edge + (uint64_t)a +
						    (b == 0 ? 0 : window + (uint64_t)b - 2);

						if (x >= t0 && x <= t0 + span)
							p[np++] = x;
					}
			}
	}
	assert_true(np <= cap);
	qsort(p, np, sizeof(*p), ht_cmp_u64);
	for (uint64_t i = 0; i < np; i++) {
		if (i > 0 && p[i] == p[i - 1])
			continue;
		r.clk.now = p[i];
		ht_hit(&r, 0);
	}
	ht_report(&r, "window edges");
	/* Not vacuous: hits left the window at its edge. */
	assert_true(r.dropped > 0);
	free(p);
	ht_close(&r);
}

/* Grids that do not divide the window (and one that does): the answer
 * never counts a hit as old as the window and keeps the bound at every edge
 * and one nanosecond either side. */
static void
test_hit_edges(void **state)
{
	ht_edges_run(10 * SEC, 7, 1000 * SEC + 12345, 0);
	ht_edges_run(60 * SEC, 7, 86400 * SEC + 999, 0);
	ht_edges_run(24 * 3600 * SEC, 24, 3 * 86400 * SEC + 1, 0);
	ht_edges_run(11, 3, 1000 * SEC + 5, 1);
	ht_edges_run(11, 3, 7, 1);
	ht_edges_run(100003, 64, 77 * SEC, 1);
	/* Around the largest time for which the sub-window's index is found
	 * with 64-bit arithmetic. */
	ht_edges_run(11, 3, UINT64_MAX / 3 - 30, 1);
}

/* ---- Silence, memory, errors ----------------------------------------- */

static uint64_t
counters_used(shmt_t *h)
{
	shmt_segment_stat_t ss;

	assert_int_equal(shmt_segment_stat(h, &ss), 0);
	for (uint32_t i = 0; i < ss.nregions; i++)
		if (strcmp(ss.regions[i].name, "counters") == 0)
			return ss.regions[i].used;
	fail_msg("no counters region");
	return 0;
}

static uint64_t
hit(struct ht_run *r, const char *key)
{
	uint64_t c = 0;

	assert_int_equal(shmt_hit(r->h, key, strlen(key), &c), 0);
	return c;
}

/* A key silent for a whole window starts again at 1; one silent a
 * nanosecond less still has its last hit; and housekeeping reclaims the
 * memory of a silent key. */
static void
test_silent_key(void **state)
{
	struct ht_run r;
	uint64_t last;

	ht_open(&r, 24 * 3600 * SEC, 10000, 1ULL << 20, 2);
	assert_int_equal(counters_used(r.h), 0);
	for (int i = 1; i <= 5; i++) {
		assert_int_equal(hit(&r, "quiet"), (uint64_t)i);
		r.clk.now += 7 * SEC;
	}
	last = r.clk.now - 7 * SEC;
	r.clk.now = last + r.window;
	assert_int_equal(hit(&r, "quiet"), 1);
	/* One hit 1 ns inside the window: it counts (counts this small are
	 * exact). */
	r.clk.now += r.window - 1;
	last = hit(&r, "quiet");
	assert_int_equal(last, 2);
	assert_true(counters_used(r.h) > 0);
	r.clk.now += r.window;
	assert_true(shmt_housekeep(r.h, NULL) >= 1);
	assert_int_equal(counters_used(r.h), 0);
	assert_int_equal(hit(&r, "quiet"), 1);
	ht_close(&r);
}

/* The items of the counters' store, summed over its shards. */
static uint64_t
counters_items(shmt_t *h)
{
	const struct shmt_store *st = h->counters;
	uint64_t n = 0;

	for (uint32_t i = 0; i < st->shards; i++)
		n += shard_at(st, i)->ds_items;
	return n;
}

/* The header's memory formula: the block of a key of KLEN whose count at
 * its last hit was N may take, for error k: twice the smallest power of two
 * of 48 + klen + 7 + 40 + 8 L + 8 cap L, with L = 1 and cap = N + 1 while
 * N <= k + 1 (one ring as long as the hits, plus the next), else cap = k + 2
 * and L = 1 + floor(log2((N - 1) / k + 1)). */
static uint64_t
mem_bound(uint64_t klen, uint64_t n, uint64_t k)
{
	uint64_t levels = 1, cap = n + 1, need, p = 64;

	if (n > k + 1) {
		cap = k + 2;
		while ((1ULL << levels) <= (n - 1) / k + 1)
			levels++;
	}
	need = 48 + klen + 7 + 40 + 8 * levels + 8 * cap * levels;
	while (p < need)
		p *= 2;
	return 2 * p;
}

/* Memory per key follows the count, not the hits: a key's block after N
 * hits inside the window stays within mem_bound(N) (a key hit a few times
 * takes a few words, one hit a million times kilobytes), and shrinks back
 * when its hits leave the window. */
static void
test_memory_per_key(void **state)
{
	static const uint64_t marks[] = { 1, 2, 10, 67, 68, 100, 1000, 10000,
	    100000, 1000000 };
	struct ht_run r;
	uint64_t n = 0, used, c;
	char key[16];

	(void)state;
	ht_open(&r, 3600 * SEC, 10000, 1ULL << 20, 2);
	for (size_t j = 0; j < sizeof(marks) / sizeof(marks[0]); j++) {
		for (; n < marks[j]; n++) {
			r.clk.now += 1000;
			assert_int_equal(shmt_hit(r.h, "key-00", 6, &c), 0);
		}
		used = counters_used(r.h);
		printf("# a key hit %" PRIu64 " times in the window: %" PRIu64
		    " bytes (bound %" PRIu64 ")\n", n, used,
		    mem_bound(6, n, r.k));
		assert_true(used <= mem_bound(6, n, r.k));
	}
	assert_true(counters_used(r.h) >= 4096);
	/* The burst leaves the window; a hit every tenth of it keeps the
	 * key alive with about ten hits: back to a small block. */
	for (int i = 0; i < 25; i++) {
		r.clk.now += r.window / 10;
		assert_int_equal(shmt_hit(r.h, "key-00", 6, &c), 0);
	}
	used = counters_used(r.h);
	printf("# the same key with %" PRIu64 " hits in the window: %" PRIu64
	    " bytes\n", c, used);
	assert_int_equal(c, 10);
	assert_true(used <= mem_bound(6, 10, r.k));
	/* A hundred keys of 50 hits each: each within the bound for 50. */
	for (int k = 1; k <= 100; k++) {
		snprintf(key, sizeof(key), "kk-%03d", k);
		for (int i = 0; i < 50; i++) {
			r.clk.now += SEC;
			assert_int_equal(hit(&r, key), (uint64_t)i + 1);
		}
	}
	assert_int_equal(counters_items(r.h), 101);
	assert_true(counters_used(r.h) - used <= 100 * mem_bound(6, 50, r.k));
	printf("# 100 keys of 50 hits: %" PRIu64 " bytes each\n",
	    (counters_used(r.h) - used) / 100);
	ht_close(&r);
}

static void
test_hit_errors(void **state)
{
	char big[SHMT_KEY_MAX + 1];
	shmt_config_t cfg;
	struct ht_run r;
	char seg[96];
	uint64_t c = 77;
	shmt_t *h;

	memset(big, 'k', sizeof(big));
	ht_open(&r, 60 * SEC, 10000, 256ULL << 10, 1);
	assert_int_equal(shmt_hit(r.h, big, 0, &c), -EINVAL);
	assert_int_equal(shmt_hit(r.h, NULL, 1, &c), -EINVAL);
	assert_int_equal(shmt_hit(NULL, big, 1, &c), -EINVAL);
	assert_int_equal(shmt_hit(r.h, big, SHMT_KEY_MAX + 1, &c), -E2BIG);
	assert_int_equal(c, 77);
	assert_int_equal(counters_used(r.h), 0);
	/* COUNT may be NULL; the longest key is counted like any other. */
	assert_int_equal(shmt_hit(r.h, big, SHMT_KEY_MAX, NULL), 0);
	assert_int_equal(shmt_hit(r.h, big, SHMT_KEY_MAX, &c), 0);
	assert_int_equal(c, 2);
	ht_close(&r);
	/* A segment without counters. */
	shmt_config_init(&cfg);
	cfg.counters_bytes = 0;
	cfg.dict_bytes = 0;
	tu_segname(seg, sizeof(seg), "nohit");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmt_hit(h, "k", 1, &c), -ENODEV);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A full counter store evicts the least recently hit keys first: a hot set
 * hit every round keeps its counts while a stream of keys hit once each
 * overflows the store many times over.  The test asks that the hot keys
 * lose their count at most a quarter as often as eviction at random would
 * make them (which picks a hot key with the hot keys' share of the store);
 * test_hit_rehit_kept checks the bound eviction by last hit gives.  The
 * error is set to 50%: eviction does not depend on it, and the hot keys'
 * blocks (which grow with their counts) then leave most of the 64 KiB to
 * the stream.  A hot key that lost its count answers 1 again, which no
 * kept one can after its third round (at 50%, 1 is within the bound only of
 * counts up to 2). */
static void
test_hit_eviction(void **state)
{
	enum { HOT = 16, ROUNDS = 6000 };
	uint64_t hot_lost = 0, made = 0, c, items;
	double evictions, at_random;
	struct ht_run r;
	char key[24];

	ht_open(&r, 3600 * SEC, 500000, 64ULL << 10, 1);
	for (int round = 0; round < ROUNDS; round++) {
		for (int k = 0; k < HOT; k++) {
			snprintf(key, sizeof(key), "hot-%02d", k);
			c = hit(&r, key);
			/* All rounds fit in the window, so a key never
			 * evicted counts round + 1 hits; an evicted one
			 * starts again at 1. */
			hot_lost += round >= 2 && c == 1;
			made += c == 1;
			r.clk.now += SEC / 100;
		}
		snprintf(key, sizeof(key), "cold-%06d", round);
		assert_int_equal(hit(&r, key), 1);
		made++;
		r.clk.now += SEC / 10;
	}
	items = counters_items(r.h);
	evictions = (double)(made - items);
	at_random = evictions * HOT / (double)items;
	printf("# counters: %" PRIu64 " keys made, %" PRIu64 " fit, %.0f "
	    "evicted; hot keys lost their count %" PRIu64 " times (%.0f at "
	    "random)\n", made, items, evictions, hot_lost, at_random);
	assert_true(evictions > 10.0 * (double)items);
	assert_true((double)hot_lost <= at_random / 4);
	ht_close(&r);
}

/* Keys re-hit within the capacity keep their first hit.  A stream of new
 * keys, each hit again after d in [1, D] further new keys (seeded, random),
 * into one shard that holds C keys and is overflowed many times.  Between a
 * key's two hits at most d + D <= 2D other keys are hit (the new ones and
 * the re-hits due meanwhile), and 2D stays under 7C/8, so eviction by last
 * hit (the header's bound) never takes the first hit: every second hit must
 * answer 2.  The dictionary's sampled eviction, used for counters before,
 * lost about 30 of the 15,300 here. */
static void
test_hit_rehit_kept(void **state)
{
	uint64_t seed = tu_seed("test_hit_rehit_kept"), rs = seed;
	uint64_t block, cap, prev = 0, lost = 0, second = 0, D, K;
	uint64_t *head, *next;   /* keys due at step t: a list, index + 1 */
	struct ht_run r;
	char key[32];

	(void)state;
	ht_open(&r, 3600 * SEC, 10000, 64ULL << 10, 1);
	ht_secret(&r, seed);
	/* The capacity in keys: fill with keys of the trace's length until
	 * the store stops growing (the first eviction). */
	snprintf(key, sizeof(key), "fill-%07d", 0);
	assert_int_equal(hit(&r, key), 1);
	block = counters_used(r.h);
	for (int i = 1; i < 100000 && counters_used(r.h) > prev; i++) {
		prev = counters_used(r.h);
		snprintf(key, sizeof(key), "fill-%07d", i);
		r.clk.now += 1000;
		hit(&r, key);
	}
	cap = prev / block;
	assert_true(cap >= 64);
	D = (7 * cap / 8 - 2) / 2;
	K = 60 * cap;
	head = calloc(K + D + 1, sizeof(*head));
	next = calloc(K, sizeof(*next));
	assert_true(head != NULL && next != NULL);
	for (uint64_t i = 0; i < K; i++) {
		uint64_t d = 1 + tu_rand(&rs) % D;

		r.clk.now += 1000;
		snprintf(key, sizeof(key), "rhit-%07" PRIu64, i);
		assert_int_equal(hit(&r, key), 1);
		next[i] = head[i + d];
		head[i + d] = i + 1;
		for (uint64_t j = head[i]; j != 0; j = next[j - 1]) {
			r.clk.now += 1000;
			snprintf(key, sizeof(key), "rhit-%07" PRIu64, j - 1);
			second++;
			lost += hit(&r, key) != 2;
		}
	}
	printf("# %" PRIu64 " keys fit; %" PRIu64 " keys each hit again "
	    "within %" PRIu64 " new keys: %" PRIu64 " of %" PRIu64 " second "
	    "hits lost the first\n", cap, K, D, lost, second);
	assert_true(second > K - D - 1);
	assert_int_equal(lost, 0);
	free(head);
	free(next);
	ht_close(&r);
}

/* ---- shmt_count: the same ring, any window up to the configured one ---- */

/* shmt_count of key I for window W must satisfy the header's bound against
 * the exact #{hits t : now - t < w} (W 0 means the configured window). */
static uint64_t
ht_count_one(struct ht_run *r, int i, uint64_t w)
{
	struct ht_key *k = &r->k_[i];
	uint64_t now = r->clk.now, got = 7, eff = w == 0 ? r->window : w, exact;

	assert_int_equal(shmt_count(r->h, k->name, k->klen, w, &got), 0);
	exact = ht_count(k, now, eff);
	if (ht_within(r, got, exact) != 0)
		fail_msg("count of key %d at %" PRIu64 " ns for window %" PRIu64
		    " ns: answer %" PRIu64 ", exact %" PRIu64 " (window %" PRIu64
		    " ns, error %u ppm, exact up to %u)", i, now, eff, got,
		    exact, r->window, r->eps_ppm, r->k);
	r->counts++;
	return got;
}

/* After a hit that answered GOT: the configured window answers the same
 * (shmt_count does not count: asking twice changes nothing), and a few
 * shorter windows (a minute and an hour of a day, a random one, one
 * shorter than a sub-window) lie within the bound. */
static void
ht_count_check(struct ht_run *r, int i, uint64_t got)
{
	uint64_t w[5] = { r->window, r->window / 24, r->window / 1440 + 1,
	    1 + tu_rand(&r->rs) % r->window, 1 + tu_rand(&r->rs) % r->w };

	assert_int_equal(ht_count_one(r, i, 0), got);
	assert_int_equal(ht_count_one(r, i, 0), got);
	for (int j = 0; j < 5; j++)
		ht_count_one(r, i, w[j]);
}

static void
ht_count_run(uint64_t window, uint32_t eps_ppm, double share, uint64_t seed)
{
	uint64_t ops = (uint64_t)(HT_OPS * share * tu_scale());
	struct ht_run r;

	if (ops < HT_OPS_MIN * share)
		ops = (uint64_t)(HT_OPS_MIN * share);
	ht_open(&r, window, eps_ppm, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	r.count_on = 1;
	while (r.hits < ops) {
		ht_step(&r);
		ht_hit(&r, ht_pick(&r));
	}
	ht_report(&r, "shmt_count, random trace");
	assert_true(r.below + r.above > 0);
	ht_close(&r);
}

/* Random traces as test_hit_model's, each hit followed by reads of
 * several windows. */
static void
test_count_model(void **state)
{
	uint64_t seed = tu_seed("test_count_model");

	(void)state;
	ht_count_run(24 * 3600 * SEC, 10000, 0.2, seed);
	ht_count_run(60 * SEC, 2000, 0.1, seed + 1);
	ht_count_run(10 * SEC, 500000, 0.1, seed + 2);
}

/* Adversarial: every hit in the oldest part of the window (a burst just
 * before a sub-window boundary, then a burst just after it), then only
 * reads, at every step of a slow clock across the whole window and past
 * it; and bursts alternating with silences of random length. */
static void
test_count_adversarial(void **state)
{
	uint64_t seed = tu_seed("test_count_adversarial");
	struct ht_run r;

	(void)state;
	ht_open(&r, 24 * 3600 * SEC, 10000, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	r.clk.now = (r.clk.now / r.w + 1) * r.w - 5;
	for (int j = 0; j < 10; j++) {
		ht_hit(&r, 0);
		r.clk.now++;
	}
	for (uint64_t end = r.clk.now + r.window + r.w; r.clk.now < end;
	    r.clk.now += r.w / 97 + tu_rand(&r.rs) % 3) {
		uint64_t w[4] = { 0, r.w, r.w - 1, 1 + tu_rand(&r.rs) %
		    r.window };

		for (int j = 0; j < 4; j++)
			ht_count_one(&r, 0, w[j]);
	}
	/* Alternating bursts and silences. */
	r.count_on = 1;
	for (int b = 0; b < 200; b++) {
		uint64_t n = 1 + tu_rand(&r.rs) % 200;

		for (uint64_t j = 0; j < n; j++) {
			ht_hit(&r, 1);
			r.clk.now += tu_rand(&r.rs) % 1000;
		}
		r.clk.now += tu_rand(&r.rs) % (r.window / 3);
	}
	printf("# adversarial: %" PRIu64 " answers within the bound\n",
	    r.counts);
	ht_close(&r);
}

/* ---- Traces the sub-window ring got wrong ------------------------------- */

/* Reads of key I after a hit: the whole window and a few shorter ones. */
static void
ht_reads(struct ht_run *r, int i)
{
	uint64_t w[4] = { 0, r->window / 2, r->w, 1 + tu_rand(&r->rs) %
	    r->window };

	for (int j = 0; j < 4; j++)
		ht_count_one(r, i, w[j]);
}

/* Every hit in the oldest part of the window: a burst of 5000 hits in the
 * first half hour of a 24 h window, then one hit every 1/500 of the window
 * while the burst ages out of it, each answer and reads of several windows
 * checked.  The ring of 24 sub-windows dropped the burst a whole hour early
 * (answers short by 5000 of about 5450). */
static void
test_hit_oldest_burst(void **state)
{
	uint64_t seed = tu_seed("test_hit_oldest_burst");
	struct ht_run r;

	(void)state;
	ht_open(&r, 24 * 3600 * SEC, 10000, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	for (int i = 0; i < 5000; i++) {
		r.clk.now += 1800 * SEC / 5000;
		ht_hit(&r, 0);
	}
	for (int i = 0; i < 750; i++) {
		r.clk.now += r.window / 500 - tu_rand(&r.rs) % 1000;
		ht_hit(&r, 0);
		ht_reads(&r, 0);
	}
	ht_report(&r, "burst in the oldest part");
	assert_true(r.dropped >= 5000 && r.below + r.above > 0);
	ht_close(&r);
}

/* Bursts of up to 20000 hits a microsecond apart, each followed by a
 * silence of up to 1.2 windows, on three keys at once; every hit checked,
 * and reads after one hit in 50. */
static void
test_hit_bursts(void **state)
{
	uint64_t seed = tu_seed("test_hit_bursts");
	struct ht_run r;

	(void)state;
	ht_open(&r, 3600 * SEC, 10000, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	for (int b = 0; b < 60; b++) {
		uint64_t n = 1 + tu_rand(&r.rs) % 20000;

		for (uint64_t j = 0; j < n; j++) {
			int i = (int)(tu_rand(&r.rs) % 3);

			r.clk.now += 1000;
			ht_hit(&r, i);
			if (j % 50 == 0)
				ht_reads(&r, i);
		}
		r.clk.now += tu_rand(&r.rs) % (r.window + r.window / 5);
	}
	ht_report(&r, "bursts and silences");
	assert_true(r.dropped > 0 && r.below + r.above > 0);
	ht_close(&r);
}

/* Keys hit about once a day (a day give or take up to ten minutes) in a
 * 24 h window: answers of 1 or 2, which must be exact.  The ring missed a
 * hit lying in its oldest sub-window. */
static void
test_hit_daily(void **state)
{
	uint64_t seed = tu_seed("test_hit_daily");
	struct ht_run r;

	(void)state;
	ht_open(&r, 24 * 3600 * SEC, 10000, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	for (int day = 0; day < 400; day++)
		for (int i = 0; i < 8; i++) {
			r.clk.now += r.window / 8 - 600 * SEC +
			    tu_rand(&r.rs) % (1200 * SEC);
			ht_hit(&r, i);
			ht_reads(&r, i);
		}
	ht_report(&r, "keys hit once a day");
	assert_int_equal(r.below + r.above, 0);
	assert_true(r.dropped > 0);
	ht_close(&r);
}

/* A key hit a million times a second (1 us apart) for three windows of a
 * second, beside one hit a hundred thousand times a second: every answer
 * within 1%, reads of several windows every 1000 hits, and the hot key's
 * block within the memory formula.  The ring of 24 sub-windows was short by
 * up to a 24th, 4%. */
static void
test_hit_million(void **state)
{
	uint64_t seed = tu_seed("test_hit_million"), n = 3000000;
	struct ht_run r;

	(void)state;
	ht_open(&r, SEC, 10000, 1ULL << 20, 2);
	r.rs = seed;
	ht_secret(&r, seed);
	for (uint64_t j = 0; j < n; j++) {
		r.clk.now += 1000;
		ht_hit(&r, 0);
		if (j % 10 == 0)
			ht_hit(&r, 1);
		if (j % 1000 == 0) {
			ht_reads(&r, 0);
			ht_reads(&r, 1);
		}
	}
	ht_report(&r, "a million hits a second");
	printf("# the two keys take %" PRIu64 " bytes (bound %" PRIu64 ")\n",
	    counters_used(r.h), mem_bound(7, 1000000, r.k) +
	    mem_bound(7, 100000, r.k));
	assert_true(counters_used(r.h) <= mem_bound(7, 1000000, r.k) +
	    mem_bound(7, 100000, r.k));
	assert_true(r.dropped > 0 && r.below + r.above > 0);
	ht_close(&r);
}

/* ---- A writer killed in the middle of a hit ---------------------------- */

/* The counter item of the only key of a one-shard store, and its parts as
 * counters.c lays them out (white box: the test plays a writer's stores). */
struct kc {
	struct shmt_item *it;
	struct shmt_cnt_hdr *h;
	uint32_t *meta, levels, cap;
	uint64_t *ts;
};

static void
kc_find(shmt_t *h, struct kc *k)
{
	const struct shmt_store *st = h->counters;
	struct shmt_shard *sh = shard_at(st, 0);
	struct shmt_bucket *index = shard_index(st, sh);

	k->it = NULL;
	for (uint64_t b = 0; b < st->nbuckets && k->it == NULL; b++)
		if (index[b].bk_head != 0)
			k->it = (struct shmt_item *)(shard_heap(st, sh) +
			    link_off(index[b].bk_head));
	assert_non_null(k->it);
	k->h = (struct shmt_cnt_hdr *)((char *)(k->it + 1) +
	    item_klen(k->it) + (8 - item_klen(k->it) % 8) % 8);
	k->cap = (uint32_t)(k->h->ch_shape >> 16) & 0xffff;
	k->levels = (uint32_t)(k->h->ch_shape >> 32) & 0xff;
	k->meta = (uint32_t *)(k->h + 1);
	k->ts = (uint64_t *)((char *)k->meta + ((4 * k->levels + 7) & ~7U));
}

/* Level L's ring: start, count, and bucket X's time. */
static uint32_t kc_s(struct kc *k, int l) { return k->meta[l] & 0xffff; }
static uint32_t kc_n(struct kc *k, int l) { return k->meta[l] >> 16; }
static uint64_t *
kc_ts(struct kc *k, int l, uint32_t x)
{
	return &k->ts[(uint64_t)l * k->cap + (kc_s(k, l) + x) % k->cap];
}

/*
 * A writer killed at each point of a hit that merges: the key holds 72
 * hits at 1% (level 0: 68 buckets, level 1: 2), and the 73rd hit appends
 * a 69th bucket at level 0, which merges its two oldest into level 1.  The
 * test plays the writer's stores up to a point (counters.c's order: mark,
 * slot, level 0's count, total; the merge's slot, journal, level 1's count,
 * level 0's start and count) and stops there, as a kill -9 would.  After
 * each: shmt_count answers 72 or 73 (the killed hit counted or not; counts
 * this size are exact: the key was born inside the window), every later
 * hit one more, and shmt_check finds nothing wrong.
 */
static void
test_hit_killed_midway(void **state)
{
	(void)state;
	for (int stop = 0; stop <= 8; stop++) {
		struct ht_run r;
		struct kc k;
		uint64_t c = 0, t, c2 = 0;
		uint32_t s0, n0, s1, n1;

		ht_open(&r, 3600 * SEC, 10000, 256ULL << 10, 1);
		for (int i = 0; i < 72; i++) {
			r.clk.now += 1000;
			assert_int_equal(hit(&r, "victim"), (uint64_t)i + 1);
		}
		kc_find(r.h, &k);
		assert_true(k.levels >= 2 && k.cap == 69);
		assert_true(kc_n(&k, 0) == 68 && kc_n(&k, 1) == 2);
		s0 = kc_s(&k, 0), n0 = kc_n(&k, 0);
		s1 = kc_s(&k, 1), n1 = kc_n(&k, 1);
		r.clk.now += 1000;
		t = r.clk.now;
		/* The hit's stores, in counters.c's order, up to STOP. */
		if (stop > 0)
			k.h->ch_state = 1ULL << 63;
		if (stop > 1)
			*kc_ts(&k, 0, n0) = t;
		if (stop > 2)
			k.meta[0] = s0 | (n0 + 1) << 16;
		if (stop > 3)
			k.h->ch_total++;
		if (stop > 4)
			k.ts[(uint64_t)k.cap + (s1 + n1) % k.cap] =
			    k.ts[(s0 + 1) % k.cap];
		if (stop > 5)
			k.h->ch_state = 3ULL << 62 | (uint64_t)s0 << 40 |
			    (uint64_t)(n0 + 1) << 24 | (uint64_t)n1 << 8;
		if (stop > 6)
			k.meta[1] = s1 | (n1 + 1) << 16;
		if (stop > 7)
			k.meta[0] = (s0 + 2) % k.cap | (n0 - 1) << 16;
		assert_int_equal(shmt_count(r.h, "victim", 6, 0, &c), 0);
		/* Counted once its level 0 count moved (stop 3 on). */
		if (c != (stop > 2 ? 73U : 72U))
			fail_msg("killed at step %d: shmt_count %" PRIu64, stop,
			    c);
		r.clk.now += 1000;
		assert_int_equal(shmt_hit(r.h, "victim", 6, &c2), 0);
		assert_int_equal(c2, c + 1);
		r.clk.now += 1000;
		assert_int_equal(shmt_hit(r.h, "victim", 6, &c2), 0);
		assert_int_equal(c2, c + 2);
		kc_find(r.h, &k);
		assert_int_equal(k.h->ch_state, 0);
		assert_int_equal(shmt_check(r.h, NULL, NULL), 0);
		ht_close(&r);
	}
}

/* shmt_count's refusals, and an absent key's zero. */
static void
test_count_errors(void **state)
{
	struct ht_run r;
	uint64_t got = 5;

	(void)state;
	ht_open(&r, 60 * SEC, 10000, 1ULL << 20, 2);
	assert_int_equal(shmt_count(r.h, "k", 1, 0, NULL), -EINVAL);
	assert_int_equal(shmt_count(NULL, "k", 1, 0, &got), -EINVAL);
	assert_int_equal(got, 0);
	got = 5;
	assert_int_equal(shmt_count(r.h, NULL, 1, 0, &got), -EINVAL);
	assert_int_equal(shmt_count(r.h, "k", 0, 0, &got), -EINVAL);
	assert_int_equal(shmt_count(r.h, "k", 1, 60 * SEC + 1, &got),
	    -EINVAL);
	got = 5;
	assert_int_equal(shmt_count(r.h, "k", 1, 60 * SEC, &got), 0);
	assert_int_equal(got, 0);
	assert_int_equal(shmt_hit(r.h, "k", 1, NULL), 0);
	assert_int_equal(shmt_count(r.h, "k", 1, 60 * SEC, &got), 0);
	assert_int_equal(got, 1);
	/* Silent for a whole window: gone. */
	r.clk.now += 60 * SEC;
	assert_int_equal(shmt_count(r.h, "k", 1, 0, &got), 0);
	assert_int_equal(got, 0);
	ht_close(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_hit_model, tu_sweep),
		cmocka_unit_test_teardown(test_count_model, tu_sweep),
		cmocka_unit_test_teardown(test_count_adversarial, tu_sweep),
		cmocka_unit_test_teardown(test_count_errors, tu_sweep),
		cmocka_unit_test_teardown(test_hit_oldest_burst, tu_sweep),
		cmocka_unit_test_teardown(test_hit_bursts, tu_sweep),
		cmocka_unit_test_teardown(test_hit_daily, tu_sweep),
		cmocka_unit_test_teardown(test_hit_million, tu_sweep),
		cmocka_unit_test_teardown(test_hit_killed_midway, tu_sweep),
		cmocka_unit_test_teardown(test_hit_edges, tu_sweep),
		cmocka_unit_test_teardown(test_silent_key, tu_sweep),
		cmocka_unit_test_teardown(test_memory_per_key, tu_sweep),
		cmocka_unit_test_teardown(test_hit_errors, tu_sweep),
		cmocka_unit_test_teardown(test_hit_eviction, tu_sweep),
		cmocka_unit_test_teardown(test_hit_rehit_kept, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
