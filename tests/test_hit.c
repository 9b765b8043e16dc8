/* SPDX-License-Identifier: MIT */
/*
 * shmt_hit against the exact count of seed 002: the model keeps every
 * hit's time per key and counts those in the trailing window, as the
 * seed's bot does with its list of timestamps.  (The bot answers before it
 * records the new message; shmt_hit counts the hit first, so the model
 * records, then counts.)  With an injected clock and random hit patterns
 * over days, every answer must lie within the bound the header states:
 *
 *   #{hits t : now - t < window - w}  <=  answer  <=  #{hits t : now - t < window}
 *
 * where w = window / sub-windows: the answer never counts a hit older than
 * the window and misses at most the hits of one sub-window.  Also: a key
 * silent for a whole window starts again at 1 and its memory is reclaimed;
 * memory grows per key, never per hit; the window and sub-window count come
 * from shmt_config_t; when the store is full the least recently hit keys go
 * first.
 */
#include "testutil.h"

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
	uint64_t window, subw, w;
	struct ht_key k[HT_KEYS];
	uint64_t rs, hits, below, err_max;
	int count_on;                   /* check shmt_count after each hit */
	uint64_t counts;                /* shmt_count answers checked */
};

static void
ht_open(struct ht_run *r, uint64_t window, uint32_t subw, uint64_t bytes,
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
	cfg.counters_subwindows = subw;
	tu_segname(r->seg, sizeof(r->seg), "hit");
	assert_int_equal(shmt_create(r->seg, &cfg, &r->h), 0);
	r->clk.now = 1000 * SEC;
	assert_int_equal(shmt_set_clock(r->h, tu_clock_read, &r->clk), 0);
	r->window = window;
	r->subw = subw;
	r->w = window / subw;
	for (int i = 0; i < HT_KEYS; i++) {
		/* Binary names: a NUL in the middle, different lengths. */
		r->k[i].klen = (size_t)snprintf(r->k[i].name,
		    sizeof(r->k[i].name), "hit-%d", i) + 1 + (size_t)(i % 3);
	}
}

static void
ht_close(struct ht_run *r)
{
	shmt_close(r->h);
	assert_int_equal(shmt_unlink(r->seg), 0);
	for (int i = 0; i < HT_KEYS; i++)
		free(r->k[i].t);
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

/* One hit of key I: the answer must be within the bound. */
static void
ht_hit(struct ht_run *r, int i)
{
	struct ht_key *k = &r->k[i];
	uint64_t now = r->clk.now, got = 0, exact, floor;

	ht_record(k, now);
	/* Hits older than the window can never count again: drop them. */
	while (k->head < k->n && now - k->t[k->head] >= r->window)
		k->head++;
	exact = k->n - k->head;
	floor = ht_count(k, now, r->window - r->w);
	assert_int_equal(shmt_hit(r->h, k->name, k->klen, &got), 0);
	r->hits++;
	if (got > exact || got < floor)
		fail_msg("hit %" PRIu64 " of key %d at %" PRIu64 " ns: answer %"
		    PRIu64 ", exact %" PRIu64 ", at least %" PRIu64 " (window %"
		    PRIu64 " ns in %" PRIu64 ")", r->hits, i, now, got, exact,
		    floor, r->window, r->subw);
	r->below += got < exact;
	if (exact - got > r->err_max)
		r->err_max = exact - got;
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
ht_model_run(uint64_t window, uint32_t subw, double share, uint64_t seed)
{
	uint64_t ops = (uint64_t)(HT_OPS * share * tu_scale()), t0;
	struct ht_run r;

	if (ops < HT_OPS_MIN * share)
		ops = (uint64_t)(HT_OPS_MIN * share);
	ht_open(&r, window, subw, 1ULL << 20, 2);
	r.rs = seed;
	t0 = r.clk.now;
	while (r.hits < ops) {
		ht_step(&r);
		ht_hit(&r, ht_pick(&r));
	}
	printf("# window %" PRIu64 " s in %" PRIu64 ": %" PRIu64 " hits over "
	    "%.1f windows; %" PRIu64 " answers below the exact count, by at "
	    "most %" PRIu64 "\n", (uint64_t)(window / SEC), r.subw, r.hits,
	    (double)(r.clk.now - t0) / window, r.below, r.err_max);
	/* The patterns must reach the ring's turning points, or the test
	 * would not have checked the bound where it is tight. */
	assert_true(r.clk.now - t0 > 3 * window);
	ht_close(&r);
}

/* The default (24 h in 24 sub-windows), then custom windows and
 * sub-window counts from shmt_config_t, down to a single sub-window and up
 * to the most allowed. */
static void
test_hit_model(void **state)
{
	uint64_t seed = tu_seed("test_hit_model");

	ht_model_run(24 * 3600 * SEC, 24, 0.4, seed);
	ht_model_run(60 * SEC, 12, 0.2, seed + 1);
	ht_model_run(10 * SEC, 1, 0.2, seed + 2);
	ht_model_run(256 * SEC, 256, 0.2, seed + 3);
}

/* ---- Sub-window edges -------------------------------------------------- */

static int
ht_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Hits of one key at every edge of the sub-windows and one nanosecond
 * either side, over four windows from T0, each answer checked against the
 * exact model (ht_hit).  Two families of edges are probed, since either
 * could be where the ring turns: multiples of window / sub-windows rounded
 * down, and the exact tiling floor(i x window / sub-windows); and for each
 * probe p also p + window and one nanosecond either side, where a hit
 * leaves the window.  DENSE hits every nanosecond instead (tiny windows). */
static void
ht_edges_run(uint64_t window, uint32_t subw, uint64_t t0, int dense)
{
	uint64_t w = window / subw, span = 4 * window, *p, np = 0, cap;
	struct ht_run r;

	ht_open(&r, window, subw, 1ULL << 20, 2);
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
	printf("# edges of %" PRIu64 " ns in %u from %" PRIu64 ": %" PRIu64
	    " hits, %" PRIu64 " answers below the exact count, by at most %"
	    PRIu64 "\n", window, subw, t0, r.hits, r.below, r.err_max);
	/* Not vacuous: the probes reached answers that the bound allows to
	 * be short, so the lower bound was tested where it is tight. */
	assert_true(r.below > 0);
	free(p);
	ht_close(&r);
}

/* Windows that sub-windows do not divide (and one they do): the answer
 * never counts a hit older than the window and misses at most the hits of
 * one sub-window, at every edge and one nanosecond either side. */
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

	ht_open(&r, 24 * 3600 * SEC, 24, 1ULL << 20, 2);
	assert_int_equal(counters_used(r.h), 0);
	for (int i = 1; i <= 5; i++) {
		assert_int_equal(hit(&r, "quiet"), (uint64_t)i);
		r.clk.now += 7 * SEC;
	}
	last = r.clk.now - 7 * SEC;
	r.clk.now = last + r.window;
	assert_int_equal(hit(&r, "quiet"), 1);
	/* One hit 1 ns inside the window: it counts (the answer is 2), or
	 * the bound allows 1 because the hit lies in the oldest sub-window. */
	r.clk.now += r.window - 1;
	last = hit(&r, "quiet");
	assert_true(last == 1 || last == 2);
	assert_true(counters_used(r.h) > 0);
	r.clk.now += r.window;
	assert_true(shmt_housekeep(r.h, NULL) >= 1);
	assert_int_equal(counters_used(r.h), 0);
	assert_int_equal(hit(&r, "quiet"), 1);
	ht_close(&r);
}

/* Memory is per key: the first hit of a key takes one fixed block, every
 * later hit none, whatever the number of hits and sub-windows they span. */
static void
test_memory_per_key(void **state)
{
	struct ht_run r;
	uint64_t one, c;
	char key[16];

	ht_open(&r, 3600 * SEC, 60, 1ULL << 20, 2);
	assert_int_equal(hit(&r, "key-00"), 1);
	one = counters_used(r.h);
	assert_true(one > 0);
	for (int i = 0; i < 5000; i++) {
		r.clk.now += SEC / 2;
		assert_int_equal(shmt_hit(r.h, "key-00", 6, &c), 0);
	}
	assert_int_equal(counters_used(r.h), one);
	for (int k = 1; k < 100; k++) {
		snprintf(key, sizeof(key), "key-%02d", k);
		for (int i = 0; i < 50; i++) {
			r.clk.now += SEC;
			assert_int_equal(hit(&r, key), (uint64_t)i + 1);
		}
		assert_int_equal(counters_used(r.h), one * (uint64_t)(k + 1));
	}
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
	ht_open(&r, 60 * SEC, 6, 256ULL << 10, 1);
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
 * test_hit_rehit_kept checks the bound eviction by last hit gives. */
static void
test_hit_eviction(void **state)
{
	enum { HOT = 16, ROUNDS = 3000 };
	uint64_t hot_lost = 0, made = 0, c, seen[HOT] = { 0 }, block = 0, items;
	double evictions, at_random;
	struct ht_run r;
	char key[24];

	ht_open(&r, 3600 * SEC, 24, 64ULL << 10, 1);
	for (int round = 0; round < ROUNDS; round++) {
		for (int k = 0; k < HOT; k++) {
			snprintf(key, sizeof(key), "hot-%02d", k);
			c = hit(&r, key);
			/* All rounds fit in the window, so a key never
			 * evicted counts one more each round; an evicted one
			 * starts again at 1. */
			hot_lost += c != seen[k] + 1;
			made += c == 1;
			seen[k] = c;
			r.clk.now += SEC / 100;
		}
		if (round == 0)
			block = counters_used(r.h) / HOT;
		snprintf(key, sizeof(key), "cold-%06d", round);
		assert_int_equal(hit(&r, key), 1);
		made++;
		r.clk.now += SEC / 10;
	}
	assert_true(block > 0);
	/* Every key takes one block of the same size (the names differ by
	 * a few bytes only), so the blocks in use count the keys left. */
	assert_int_equal(counters_used(r.h) % block, 0);
	items = counters_used(r.h) / block;
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
	ht_open(&r, 3600 * SEC, 24, 64ULL << 10, 1);
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

/* shmt_count of key I for window W must satisfy the header's bound, with
 * c = ceil(window / sub-windows):
 *   #{hits t : now - t <= w - c}  <=  answer  <=  #{hits t : now - t < w}
 * (W 0 means the configured window). */
static uint64_t
ht_count_one(struct ht_run *r, int i, uint64_t w)
{
	struct ht_key *k = &r->k[i];
	uint64_t now = r->clk.now, got = 7, eff = w == 0 ? r->window : w;
	uint64_t c = (r->window + r->subw - 1) / r->subw, hi, lo;

	assert_int_equal(shmt_count(r->h, k->name, k->klen, w, &got), 0);
	hi = ht_count(k, now, eff);
	lo = eff >= c ? ht_count(k, now, eff - c + 1) : 0;
	if (got > hi || got < lo)
		fail_msg("count of key %d at %" PRIu64 " ns for window %" PRIu64
		    " ns: answer %" PRIu64 ", exact %" PRIu64 ", at least %"
		    PRIu64 " (window %" PRIu64 " ns in %" PRIu64 ")", i, now,
		    eff, got, hi, lo, r->window, r->subw);
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
ht_count_run(uint64_t window, uint32_t subw, double share, uint64_t seed)
{
	uint64_t ops = (uint64_t)(HT_OPS * share * tu_scale());
	struct ht_run r;

	if (ops < HT_OPS_MIN * share)
		ops = (uint64_t)(HT_OPS_MIN * share);
	ht_open(&r, window, subw, 1ULL << 20, 2);
	r.rs = seed;
	r.count_on = 1;
	while (r.hits < ops) {
		ht_step(&r);
		ht_hit(&r, ht_pick(&r));
	}
	printf("# shmt_count, window %" PRIu64 " s in %" PRIu64 ": %" PRIu64
	    " answers within the bound\n", (uint64_t)(window / SEC), r.subw,
	    r.counts);
	ht_close(&r);
}

/* Random traces as test_hit_model's, each hit followed by reads of
 * several windows. */
static void
test_count_model(void **state)
{
	uint64_t seed = tu_seed("test_count_model");

	(void)state;
	ht_count_run(24 * 3600 * SEC, 24, 0.2, seed);
	ht_count_run(60 * SEC, 7, 0.1, seed + 1);
	ht_count_run(10 * SEC, 1, 0.1, seed + 2);
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
	ht_open(&r, 24 * 3600 * SEC, 24, 1ULL << 20, 2);
	r.rs = seed;
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

/* shmt_count's refusals, and an absent key's zero. */
static void
test_count_errors(void **state)
{
	struct ht_run r;
	uint64_t got = 5;

	(void)state;
	ht_open(&r, 60 * SEC, 12, 1ULL << 20, 2);
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
		cmocka_unit_test_teardown(test_hit_edges, tu_sweep),
		cmocka_unit_test_teardown(test_silent_key, tu_sweep),
		cmocka_unit_test_teardown(test_memory_per_key, tu_sweep),
		cmocka_unit_test_teardown(test_hit_errors, tu_sweep),
		cmocka_unit_test_teardown(test_hit_eviction, tu_sweep),
		cmocka_unit_test_teardown(test_hit_rehit_kept, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
