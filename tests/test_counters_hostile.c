/* SPDX-License-Identifier: MIT */
/*
 * Windowed counters in a segment someone else damages: a ring word changed
 * by another process while a hit runs (the hit reads it once, checks it,
 * and works on what it checked), shard walks over chains that all link to
 * one looping item (one budget for the whole shard), counters whose header
 * contradicts their buckets (named by the check, refused by a restore),
 * and a hit that only shrinks a key's block (it evicts no other key).
 */
#include "testutil.h"
#include "counters.h"
#include "daemon.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000ULL

struct hr {
	shmt_t *h;
	struct tu_clock clk;
	char seg[96];
};

static void
hr_open(struct hr *r, uint64_t window, uint32_t eps_ppm, uint64_t bytes,
    uint32_t shards)
{
	shmt_config_t cfg;
	uint64_t ss = 0x243f6a8885a308d3ULL;

	memset(r, 0, sizeof(*r));
	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = bytes;
	cfg.counters_shards = shards;
	cfg.counters_window_ns = window;
	cfg.counters_error_ppm = eps_ppm;
	tu_segname(r->seg, sizeof(r->seg), "cnthostile");
	assert_int_equal(shmt_create(r->seg, &cfg, &r->h), 0);
	/* A fixed secret: the same chains on every run. */
	tu_secret(r->h, &ss);
	r->clk.now = 1000 * SEC;
	assert_int_equal(shmt_set_clock(r->h, tu_clock_read, &r->clk), 0);
}

static void
hr_close(struct hr *r)
{
	shmt_close(r->h);
	assert_int_equal(shmt_unlink(r->seg), 0);
}

/* The counter item of KEY (white box: found as the store finds it). */
static struct shmt_item *
hr_item(struct hr *r, const char *key)
{
	const struct shmt_store *st = r->h->counters;
	uint64_t hash = key_hash(r->h, key, strlen(key)), *link;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));

	return shmt__store_find(st, sh, hash, key, strlen(key), &link);
}

/* ---- A ring word changed between its check and its use ---------------- */

/*
 * Another process stores a start of 0xffff (outside every ring) into level
 * 0's ring word of the only key, and puts the word back, in a loop, while
 * a child hits the key on a clock that moves a window less one ns per hit
 * (each hit drops one bucket and appends one: the ring word changes on
 * every hit, and the key stays in its block).  A hit that read the word
 * once and checked it answers 0, or SHMT_ECORRUPT when the word it read
 * was the bad one; one that read it again after its check would index
 * slots past the level's ring: up to 512 KiB past it, into the analyzer's
 * region that follows the counters' (no hit writes there), or past the
 * mapping.  The test fails when the child dies or answers another error,
 * or when a byte of the analyzer's region changed.
 */
struct flip {
	const struct shmt_store *st;
	struct shmt_shard *sh;
	uint64_t bucket;
};

static void
flip_loop(const struct flip *f)
{
	struct shmt_bucket *index = shard_index(f->st, f->sh);
	char *heap = shard_heap(f->st, f->sh);

	for (;;) {
		uint64_t l = __atomic_load_n(&index[f->bucket].bk_head,
		    __ATOMIC_RELAXED);
		uint32_t *meta, w;

		if (link_unit(l) == 0 || link_off(l) + 128 > f->st->heap_bytes)
			continue;
		/* Key "victim" (6 bytes, 2 of padding), the 40-byte head:
		 * level 0's word. */
		meta = (uint32_t *)(heap + link_off(l) + 32 + 8 + 40);
		w = __atomic_load_n(meta, __ATOMIC_RELAXED);
		__atomic_store_n(meta, (w & 0xffff0000U) | 0xffffU,
		    __ATOMIC_RELAXED);
		for (volatile int i = 0; i < 8; i++)
			;
		__atomic_store_n(meta, w, __ATOMIC_RELAXED);
	}
}

static int
hit_loop(struct hr *r, uint64_t window, uint64_t ns)
{
	uint64_t end = tu_mono_ns() + ns, n = 0, bad = 0, c;

	while (tu_mono_ns() < end || n < 1000) {
		int rc;

		r->clk.now += window - 1;
		rc = shmt_hit(r->h, "victim", 6, &c);
		if (rc != 0 && rc != SHMT_ECORRUPT) {
			fprintf(stderr, "hit %" PRIu64 ": %d\n", n, rc);
			return 2;
		}
		bad += rc != 0;
		rc = shmt_count(r->h, "victim", 6, 0, &c);
		if (rc != 0 && rc != SHMT_ECORRUPT) {
			fprintf(stderr, "count %" PRIu64 ": %d\n", n, rc);
			return 3;
		}
		n++;
	}
	printf("%" PRIu64 " hits, %" PRIu64 " refused\n", n, bad);
	fflush(stdout);
	return 0;
}

static void
test_ring_word_changed_midway(void **state)
{
	uint64_t window = 1000 * SEC, hash, c = 0;
	struct flip f;
	struct hr r;
	pid_t flipper, hitter;
	char *an, *copy;
	uint64_t an_len;
	int st;

	(void)state;
	hr_open(&r, window, 10000, 64ULL << 10, 1);
	assert_int_equal(shmt_hit(r.h, "victim", 6, &c), 0);
	assert_non_null(hr_item(&r, "victim"));
	hash = key_hash(r.h, "victim", 6);
	f.st = r.h->counters;
	f.sh = shard_at(f.st, 0);
	f.bucket = bucket_of(f.st, hash);
	an = r.h->base + r.h->reg[SHMT_R_ANALYZER].rg_off;
	an_len = r.h->reg[SHMT_R_ANALYZER].rg_size;
	/* Where a start of 0xffff sends a hit (slot 0xffff - cap + n of
	 * level 0, the ring's slots just after its 8-byte word): inside. */
	{
		char *ts = (char *)(hr_item(&r, "victim") + 1) + 8 + 40 + 8;

		assert_true(ts + 8 * 0xfff0ULL >= an &&
		    ts + 8 * 0x10010ULL <= an + an_len);
	}
	copy = malloc(an_len);
	assert_non_null(copy);
	memcpy(copy, an, an_len);
	fflush(stdout);
	flipper = fork();
	assert_true(flipper >= 0);
	if (flipper == 0) {
		alarm(60);
		flip_loop(&f);
		_exit(0);
	}
	hitter = fork();
	assert_true(hitter >= 0);
	if (hitter == 0) {
		alarm(60);
		_exit(hit_loop(&r, window, 2 * SEC));
	}
	assert_int_equal(waitpid(hitter, &st, 0), hitter);
	kill(flipper, SIGKILL);
	assert_int_equal(waitpid(flipper, NULL, 0), flipper);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("the hitting process %s %d",
		    WIFSIGNALED(st) ? "died of signal" : "exited with",
		    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	for (uint64_t i = 0; i < an_len; i++)
		if (an[i] != copy[i])
			fail_msg("a hit wrote into the analyzer's region, at byte "
			    "%" PRIu64 " of it", i);
	free(copy);
	hr_close(&r);
}

/* ---- Whole-shard walks over a damaged shard ----------------------------- */

/*
 * Every bucket of a 2 MiB shard links to one item that links to itself: a
 * walk bounded per chain (heap / 64 items) would take buckets x heap / 64
 * steps under the lock (seconds).  With one budget for the whole shard the
 * walk meets the damage within heap / 64 steps: housekeeping stops that
 * walk and says SHMT_ECORRUPT, the image is refused with SHMT_ECORRUPT, and
 * the counters' eviction returns SHMT_ECORRUPT, each at once (none of them
 * returned an error before: they walked every bucket).  The image is taken
 * with the item expired, so that its walk writes no record (a live item
 * met again and again would fill the image's buffer, an error of its own).
 * The time bound is generous and only a backstop: the error is what the
 * test asks for.
 */
static void
test_shard_walk_budget(void **state)
{
	const struct shmt_store *st;
	struct shmt__host_time hn;
	struct shmt_shard *sh;
	struct shmt_item *it;
	unsigned char *img = NULL;
	size_t len = 0;
	uint64_t c = 0, off, self, t0, next = 0;
	struct hr r;

	(void)state;
	hr_open(&r, 1000 * SEC, 10000, 2ULL << 20, 1);
	assert_int_equal(shmt_hit(r.h, "victim", 6, &c), 0);
	st = r.h->counters;
	sh = shard_at(st, 0);
	it = hr_item(&r, "victim");
	assert_non_null(it);
	off = (uint64_t)((char *)it - shard_heap(st, sh));
	self = link_make(off, hash_tag(key_hash(r.h, "victim", 6)));
	it->it_next = self;
	for (uint64_t b = 0; b < st->nbuckets; b++)
		shard_index(st, sh)[b].bk_head = self;
	assert_true(st->nbuckets >= 1024);

	t0 = tu_mono_ns();
	assert_int_equal(shmt_housekeep(r.h, &next), SHMT_ECORRUPT);
	assert_true(tu_mono_ns() - t0 < SEC);

	it->it_expire = 1;
	shmt__host_time_now(&hn);
	t0 = tu_mono_ns();
	assert_int_equal(shmt__image_build(shmt__gen_live(r.h), &hn, &img,
	    &len), SHMT_ECORRUPT);
	assert_true(tu_mono_ns() - t0 < SEC);
	free(img);
	it->it_expire = r.clk.now + 1000 * SEC;

	t0 = tu_mono_ns();
	assert_int_equal(shmt__shard_lock(st, sh), 0);
	assert_int_equal(shmt__cnt_evict(st, sh, NULL), SHMT_ECORRUPT);
	shmt__unlock(&sh->ds_lock);
	assert_true(tu_mono_ns() - t0 < SEC);

	/* The check names the damage. */
	assert_true(shmt_check(r.h, NULL, NULL) > 0);
	hr_close(&r);
}

/* ---- A header that contradicts its buckets ------------------------------ */

/* The parts of counter item IT as counters.c lays them out (white box). */
struct kc {
	struct shmt_cnt_hdr *h;
	uint32_t *meta, levels, cap;
	uint64_t *ts;
};

static void
kc_of(struct shmt_item *it, struct kc *k)
{
	k->h = (struct shmt_cnt_hdr *)((char *)(it + 1) + item_klen(it) +
	    (8 - item_klen(it) % 8) % 8);
	k->cap = (uint32_t)(k->h->ch_shape >> 16) & 0xffff;
	k->levels = (uint32_t)(k->h->ch_shape >> 32) & 0xff;
	k->meta = (uint32_t *)(k->h + 1);
	k->ts = (uint64_t *)((char *)k->meta + ((4 * k->levels + 7) & ~7U));
}

/* Bucket X (0: the oldest) of level L. */
static uint64_t *
kc_ts(struct kc *k, uint32_t l, uint32_t x)
{
	return &k->ts[(uint64_t)l * k->cap + ((k->meta[l] & 0xffff) + x) %
	    k->cap];
}

struct problems {
	int n, named;
};

static void
on_problem(void *ctx, const char *problem)
{
	struct problems *p = ctx;

	p->n++;
	if (strstr(problem, "contradicts its buckets") != NULL)
		p->named++;
	printf("  check: %s\n", problem);
}

/*
 * A key hit 100 times a second apart at 1% (two levels: 68 buckets of one
 * hit, 16 of two), then one lie written into its header or buckets, each
 * in a segment of its own, with everything else left as it is:
 *   0 ch_total one more than its buckets hold (before: shmt_hit answered
 *     that total + 1, the check found nothing, a restore took it);
 *   1 ch_top 0 while level 1 holds buckets (expiry would never drop them);
 *   2 level 0's newest bucket an hour in the future (every later hit would
 *     be stored at that time);
 *   3 two buckets of level 0 swapped (out of order);
 *   4 level 1's newest bucket newer than level 0's oldest;
 *   5 ch_floor newer than the oldest bucket (the oldest counted whole).
 * shmt_check names the contradiction; the image taken of the segment
 * (whose checksums are right) is refused by a restore, with its reason.
 * Then the same segment without a lie: nothing named, the restore takes it.
 */
static void
test_header_lies(void **state)
{
	(void)state;
	for (int lie = 0; lie <= 6; lie++) {
		struct problems p = { 0, 0 };
		struct shmt__host_time hn;
		unsigned char *img = NULL;
		char err[512] = "", seg2[96];
		size_t len = 0;
		uint64_t c = 0;
		struct hr r;
		struct kc k;
		int rc;

		hr_open(&r, 3600 * SEC, 10000, 256ULL << 10, 1);
		for (int i = 0; i < 100; i++) {
			r.clk.now += SEC;
			assert_int_equal(shmt_hit(r.h, "victim", 6, &c), 0);
		}
		assert_int_equal(c, 100);
		kc_of(hr_item(&r, "victim"), &k);
		assert_true(k.levels >= 2 && k.meta[1] >> 16 > 0);
		assert_int_equal(k.h->ch_total, 100);
		switch (lie) {
		case 0:
			k.h->ch_total++;
			break;
		case 1:
			k.h->ch_top = 0;
			break;
		case 2:
			*kc_ts(&k, 0, (k.meta[0] >> 16) - 1) = r.clk.now +
			    3600 * SEC;
			break;
		case 3: {
			uint64_t t = *kc_ts(&k, 0, 0);

			*kc_ts(&k, 0, 0) = *kc_ts(&k, 0, 1);
			*kc_ts(&k, 0, 1) = t;
			/* The same times would swap to the same. */
			assert_true(*kc_ts(&k, 0, 0) != t);
			break;
		}
		case 4:
			*kc_ts(&k, 1, (k.meta[1] >> 16) - 1) =
			    *kc_ts(&k, 0, 0) + 1;
			break;
		case 5:
			k.h->ch_floor = *kc_ts(&k, 1, 0) + 1;
			break;
		default:
			break;
		}
		rc = shmt_check(r.h, on_problem, &p);
		if (lie < 6 && (rc < 1 || p.named < 1))
			fail_msg("lie %d: shmt_check %d, %d named", lie, rc,
			    p.named);
		if (lie == 6)
			assert_int_equal(rc, 0);
		shmt__host_time_now(&hn);
		assert_int_equal(shmt__image_build(shmt__gen_live(r.h), &hn,
		    &img, &len), 0);
		tu_segname(seg2, sizeof(seg2), "cntlies");
		rc = shmt__image_restore(img, len, seg2, &hn, tu_clock_read,
		    &r.clk, err, sizeof(err));
		free(img);
		printf("  lie %d: restore %d: %s\n", lie, rc, err);
		if (lie < 6) {
			assert_int_equal(rc, SHMT_ECORRUPT);
			assert_non_null(strstr(err, "contradicts its buckets"));
		} else {
			shmt_t *h2;

			assert_int_equal(rc, 0);
			assert_int_equal(shmt_open(seg2, &h2), 0);
			assert_int_equal(shmt_set_clock(h2, tu_clock_read,
			    &r.clk), 0);
			assert_int_equal(shmt_count(h2, "victim", 6, 0, &c), 0);
			assert_int_equal(c, 100);
			tu_close_unlink(h2, seg2);
		}
		hr_close(&r);
	}
}

/* ---- A hit that only shrinks a block ------------------------------------ */

/*
 * One 64 KiB shard at 0.1%: key A hit 30 000 times (a 32 KiB block), then
 * SMALL other keys hit once each, later; the clock moves so that all but
 * A's last 300 hits leave the window.  A's next hit needs a block two
 * orders smaller.  With 249 small keys the shard has no such block free:
 * A stays in its block and no key is evicted (before, the move evicted
 * most of them).  With 20 small keys one is free: A moves to it.  Every
 * small key keeps its count either way.
 */
static void
shrink_run(int small)
{
	uint64_t window = 1000 * SEC, c = 0, ev0, t_small;
	const struct shmt_store *st;
	uint32_t order0;
	struct hr r;
	char key[32];

	hr_open(&r, window, 1000, 64ULL << 10, 1);
	st = r.h->counters;
	for (int i = 0; i < 30000; i++) {
		r.clk.now += i < 29700 ? 1000 : SEC;
		assert_int_equal(shmt_hit(r.h, "A", 1, &c), 0);
	}
	order0 = hr_item(&r, "A")->it_order;
	assert_true((64U << order0) >= 32768);
	t_small = r.clk.now;
	for (int i = 0; i < small; i++) {
		r.clk.now += 1000;
		snprintf(key, sizeof(key), "small-%03d", i);
		assert_int_equal(shmt_hit(r.h, key, strlen(key), &c), 0);
		assert_int_equal(c, 1);
	}
	ev0 = shard_at(st, 0)->ds_evictions;
	assert_int_equal(ev0, 0);
	/* A's last 300 hits are 1 s apart, the first of them 300 s before
	 * t_small: a window later less 250 s, only they are inside. */
	r.clk.now = t_small + window - 250 * SEC;
	assert_int_equal(shmt_hit(r.h, "A", 1, &c), 0);
	printf("  %d small keys: A answers %" PRIu64 ", block %u -> %u, %"
	    PRIu64 " evicted\n", small, c, 64U << order0,
	    64U << hr_item(&r, "A")->it_order,
	    shard_at(st, 0)->ds_evictions - ev0);
	assert_true(c >= 250 && c <= 302);
	assert_int_equal(shard_at(st, 0)->ds_evictions, ev0);
	for (int i = 0; i < small; i++) {
		snprintf(key, sizeof(key), "small-%03d", i);
		assert_int_equal(shmt_count(r.h, key, strlen(key), 0, &c), 0);
		assert_int_equal(c, 1);
	}
	if (small < 100)
		assert_true((uint32_t)hr_item(&r, "A")->it_order + 2 <= order0);
	else
		assert_int_equal(hr_item(&r, "A")->it_order, order0);
	assert_int_equal(shmt_check(r.h, NULL, NULL), 0);
	hr_close(&r);
}

static void
test_shrink_evicts_nothing(void **state)
{
	(void)state;
	shrink_run(249);
	shrink_run(20);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_ring_word_changed_midway,
		    tu_sweep),
		cmocka_unit_test_teardown(test_shard_walk_budget, tu_sweep),
		cmocka_unit_test_teardown(test_header_lies, tu_sweep),
		cmocka_unit_test_teardown(test_shrink_evicts_nothing, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
