/* SPDX-License-Identifier: MIT */
/*
 * TTLs and eviction, driven by an injected clock: an item reads as absent
 * from the instant it expires and shmt_housekeep() reclaims it; a full
 * dictionary with eviction on first takes back expired items, then the
 * least recently read ones (an approximation of LRU, so the test asks for
 * a clear difference between read and unread keys, not an exact order);
 * with eviction off a full dictionary refuses every write that needs room
 * with -ENOSPC and changes nothing.  shmt_dict_stat counts it all.
 */
#include "testutil.h"

#include "segment.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MS 1000000ULL
/* Items of the fill tests: a 6-byte key and a 400-byte value take one
 * 512-byte block each (48-byte header, rounded up to a power of two), so
 * a 2 MiB shard holds exactly 4096 of them and never fragments. */
#define VAL_LEN 400
#define SHARD_ITEMS 4096
#define SMALL_LEN 40

struct de {
	shmt_t *h;
	struct tu_clock clk;
	char seg[96];
};

static void
de_open(struct de *d, uint64_t dict_bytes, uint32_t shards, int eviction)
{
	shmt_config_t cfg;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = dict_bytes;
	cfg.dict_shards = shards;
	cfg.dict_eviction = (uint32_t)eviction;
	cfg.counters_bytes = 0;
	tu_segname(d->seg, sizeof(d->seg), "devict");
	assert_int_equal(shmt_create(d->seg, &cfg, &d->h), 0);
	d->clk.now = 3600ULL * 1000 * MS;
	assert_int_equal(shmt_set_clock(d->h, tu_clock_read, &d->clk), 0);
}

static void
de_close(struct de *d)
{
	shmt_close(d->h);
	assert_int_equal(shmt_unlink(d->seg), 0);
}

static shmt_dict_stat_t
de_stat(struct de *d)
{
	shmt_dict_stat_t ds;

	assert_int_equal(shmt_dict_stat(d->h, &ds), 0);
	return ds;
}

/* Fill item N: key "<c>NNNNN", value derived from N and the tag C. */
static void
de_key(char c, unsigned n, char key[7])
{
	char tmp[16];

	snprintf(tmp, sizeof(tmp), "%c%05u", c, n % 100000);
	memcpy(key, tmp, 6);
}

static void
de_val(char c, unsigned n, unsigned char *v)
{
	uint64_t s = (uint64_t)n * 0x9e3779b97f4a7c15ULL + (unsigned char)c + 1;

	for (size_t i = 0; i < VAL_LEN; i++)
		v[i] = (unsigned char)tu_rand(&s);
}

static int
item_set(struct de *d, char c, unsigned n, uint64_t ttl_ms)
{
	unsigned char v[VAL_LEN];
	char key[7];

	de_key(c, n, key);
	de_val(c, n, v);
	return shmt_set(d->h, key, 6, v, VAL_LEN, ttl_ms);
}

/* 1: item N reads back with its own value; 0: absent.  Anything else
 * fails the test. */
static int
item_there(struct de *d, char c, unsigned n)
{
	unsigned char v[VAL_LEN], got[VAL_LEN];
	size_t vlen;
	char key[7];
	int rc;

	de_key(c, n, key);
	rc = shmt_get(d->h, key, 6, got, sizeof(got), &vlen);
	if (rc == -ENOENT)
		return 0;
	assert_int_equal(rc, 0);
	assert_int_equal(vlen, VAL_LEN);
	de_val(c, n, v);
	assert_memory_equal(got, v, VAL_LEN);
	return 1;
}

static int
walk_count(struct de *d)
{
	uint64_t cursor = 0;
	char key[SHMT_KEY_MAX];
	size_t klen;
	int n = 0, rc;

	while ((rc = shmt_dict_next(d->h, &cursor, key, sizeof(key),
	    &klen)) == 1)
		n++;
	assert_int_equal(rc, 0);
	return n;
}

/* ---- TTLs -------------------------------------------------------------- */

/* An item is there until the nanosecond before its expiry, absent from
 * that instant on (get, walk, replace, add all agree), counted as an item
 * until shmt_housekeep() reclaims it, which counts an expiration and says
 * when the next item expires. */
static void
test_ttl_expiry(void **state)
{
	shmt_time_t t0, next = 0;
	shmt_dict_stat_t ds;
	uint64_t used_c;
	size_t vlen;
	char buf[8];
	struct de d;

	de_open(&d, 2ULL << 20, 1, 1);
	t0 = d.clk.now;
	assert_int_equal(shmt_set(d.h, "c", 1, "stay", 4, 0), 0);
	used_c = de_stat(&d).used;
	assert_int_equal(shmt_set(d.h, "a", 1, "one", 3, 1000), 0);
	assert_int_equal(shmt_set(d.h, "b", 1, "two", 3, 2000), 0);
	d.clk.now = t0 + 1000 * MS - 1;
	assert_int_equal(shmt_get(d.h, "a", 1, buf, sizeof(buf), &vlen), 0);
	assert_int_equal(walk_count(&d), 3);
	d.clk.now = t0 + 1000 * MS;
	assert_int_equal(shmt_get(d.h, "a", 1, buf, sizeof(buf), &vlen),
	    -ENOENT);
	assert_int_equal(walk_count(&d), 2);
	/* Readers reclaim nothing: the item still takes its room. */
	ds = de_stat(&d);
	assert_int_equal(ds.items, 3);
	assert_int_equal(ds.expirations, 0);
	/* Housekeeping reclaims "a" and names b's expiry as the next work. */
	assert_true(shmt_housekeep(d.h, &next) >= 1);
	assert_int_equal(next, t0 + 2000 * MS);
	ds = de_stat(&d);
	assert_int_equal(ds.items, 2);
	assert_int_equal(ds.expirations, 1);
	assert_int_equal(ds.evictions, 0);
	assert_int_equal(shmt_replace(d.h, "a", 1, "x", 1, 0), -ENOENT);
	/* An expired key can be added again; the old TTL is gone with it. */
	d.clk.now = t0 + 2500 * MS;
	assert_int_equal(shmt_add(d.h, "b", 1, "new", 3, 0), 0);
	assert_int_equal(de_stat(&d).expirations, 2);
	assert_int_equal(shmt_del(d.h, "b", 1), 0);
	assert_int_equal(shmt_set(d.h, "a", 1, "x", 1, 1), 0);
	d.clk.now += MS;
	assert_true(shmt_housekeep(d.h, &next) >= 1);
	assert_int_equal(next, UINT64_MAX);
	ds = de_stat(&d);
	assert_int_equal(ds.items, 1);
	assert_int_equal(ds.expirations, 3);
	assert_int_equal(ds.used, used_c);
	assert_int_equal(shmt_get(d.h, "c", 1, buf, sizeof(buf), &vlen), 0);
	assert_memory_equal(buf, "stay", 4);
	de_close(&d);
}

/* ---- Eviction on ------------------------------------------------------- */

/* A full shard, a quarter of it expired: new items take the expired ones'
 * room and nothing live is evicted. */
static void
test_expired_first(void **state)
{
	unsigned expiring = SHARD_ITEMS / 4, live = 0, fresh = SHARD_ITEMS / 5;
	shmt_dict_stat_t ds;
	struct de d;

	de_open(&d, 2ULL << 20, 1, 1);
	for (unsigned n = 0; n < expiring; n++)
		assert_int_equal(item_set(&d, 't', n, 1000), 0);
	for (ds = de_stat(&d); ds.used < ds.bytes; ds = de_stat(&d))
		assert_int_equal(item_set(&d, 'p', live++, 0), 0);
	assert_int_equal(ds.items, SHARD_ITEMS);
	assert_int_equal(ds.evictions, 0);
	assert_int_equal(ds.value_room, 0);
	d.clk.now += 1000 * MS;
	for (unsigned n = 0; n < fresh; n++)
		assert_int_equal(item_set(&d, 'f', n, 0), 0);
	ds = de_stat(&d);
	assert_int_equal(ds.evictions, 0);
	assert_true(ds.expirations >= fresh);
	for (unsigned n = 0; n < live; n++)
		assert_int_equal(item_there(&d, 'p', n), 1);
	for (unsigned n = 0; n < fresh; n++)
		assert_int_equal(item_there(&d, 'f', n), 1);
	for (unsigned n = 0; n < expiring; n++)
		assert_int_equal(item_there(&d, 't', n), 0);
	de_close(&d);
}

/* Fill a shard, read a random quarter of its keys, then write half a shard
 * of new items: each needs an eviction.  Exact LRU would evict only keys
 * never read; the sampling approximation may miss, so the test asks that
 * read keys survive at a rate far above unread ones. */
static void
test_lru(void **state)
{
	uint64_t rs = tu_seed("test_lru");
	unsigned char *hot = calloc(SHARD_ITEMS, 1);
	unsigned nhot = 0, hot_left = 0, cold_left = 0, new_left = 0;
	unsigned fresh = SHARD_ITEMS / 2;
	double hot_rate, cold_rate;
	shmt_dict_stat_t ds;
	struct de d;

	assert_non_null(hot);
	de_open(&d, 2ULL << 20, 1, 1);
	/* Which keys share a bucket (and so its read time, which the
	 * eviction samples) follows the seed too: its own stream, so the
	 * keys read stay as they were. */
	{
		uint64_t ss = rs ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(d.h, &ss);
	}
	for (unsigned n = 0; n < SHARD_ITEMS; n++) {
		assert_int_equal(item_set(&d, 'o', n, 0), 0);
		d.clk.now += MS / 4;
	}
	assert_int_equal(de_stat(&d).used, de_stat(&d).bytes);
	d.clk.now += 10000 * MS;
	while (nhot < SHARD_ITEMS / 4) {
		unsigned n = (unsigned)(tu_rand(&rs) % SHARD_ITEMS);

		if (!hot[n]) {
			hot[n] = 1;
			nhot++;
			assert_int_equal(item_there(&d, 'o', n), 1);
		}
	}
	d.clk.now += 10000 * MS;
	for (unsigned n = 0; n < fresh; n++) {
		assert_int_equal(item_set(&d, 'n', n, 0), 0);
		d.clk.now += MS / 4;
	}
	for (unsigned n = 0; n < SHARD_ITEMS; n++) {
		if (hot[n])
			hot_left += (unsigned)item_there(&d, 'o', n);
		else
			cold_left += (unsigned)item_there(&d, 'o', n);
	}
	for (unsigned n = 0; n < fresh; n++)
		new_left += (unsigned)item_there(&d, 'n', n);
	ds = de_stat(&d);
	hot_rate = (double)hot_left / nhot;
	cold_rate = (double)cold_left / (SHARD_ITEMS - nhot);
	printf("# lru: %u read keys, %.3f survived; %u unread, %.3f survived; "
	    "%u of %u new items left; %" PRIu64 " evictions\n", nhot,
	    hot_rate, SHARD_ITEMS - nhot, cold_rate, new_left, fresh,
	    ds.evictions);
	/* Every item gone was evicted, and counted. */
	assert_int_equal(ds.items, hot_left + cold_left + new_left);
	assert_int_equal(ds.evictions, SHARD_ITEMS + fresh - ds.items);
	assert_int_equal(ds.expirations, 0);
	assert_true(ds.evictions >= fresh);
	assert_true(hot_rate >= 0.8);
	assert_true(hot_rate >= cold_rate + 0.3);
	free(hot);
	de_close(&d);
}

/* ---- Eviction off ------------------------------------------------------ */

struct snapshot {
	shmt_dict_stat_t ds;
	int keys;
};

static struct snapshot
snap(struct de *d)
{
	struct snapshot s = { de_stat(d), walk_count(d) };

	return s;
}

/* Nothing changed since S: the counts, the walk, every item's value. */
static void
same_as(struct de *d, const struct snapshot *s, unsigned big, unsigned small)
{
	struct snapshot now = snap(d);
	unsigned char got[SMALL_LEN];
	size_t vlen;

	assert_int_equal(now.ds.items, s->ds.items);
	assert_int_equal(now.ds.used, s->ds.used);
	assert_int_equal(now.ds.evictions, 0);
	assert_int_equal(now.ds.expirations, s->ds.expirations);
	assert_int_equal(now.keys, s->keys);
	for (unsigned n = 0; n < big; n++)
		assert_int_equal(item_there(d, 'b', n), 1);
	for (unsigned n = 0; n < small; n++) {
		char key[7];

		de_key('s', n, key);
		assert_int_equal(shmt_get(d->h, key, 6, got, sizeof(got),
		    &vlen), 0);
		assert_int_equal(vlen, SMALL_LEN);
		assert_int_equal(got[SMALL_LEN - 1], '0' + n % 10);
	}
}

/* The fill's small items: a 6-byte key and a number of SMALL_LEN digits
 * (leading zeros, SMALL_LEN at the top of the file), too long for a
 * bucket's slot: each takes a 128-byte block. */
static int
small_set(struct de *d, unsigned n)
{
	char key[7], v[SMALL_LEN];

	de_key('s', n, key);
	memset(v, '0', SMALL_LEN);
	v[SMALL_LEN - 1] = (char)('0' + n % 10);
	return shmt_set(d->h, key, 6, v, SMALL_LEN, 0);
}

/* With eviction off, fill the shard to the last 128-byte block; then every
 * write that needs a block answers -ENOSPC and changes nothing: a new key,
 * a new value for a present key (the old one stays until the new one is
 * in), add, replace, incr.  A new key small enough for its bucket's slot
 * needs no block and is written.  A delete still works and makes room. */
static void
test_eviction_off(void **state)
{
	unsigned big = 0, small = 0;
	struct snapshot s;
	int64_t res = 0;
	char key[7], v40[40];
	struct de d;
	int rc;

	de_open(&d, 2ULL << 20, 1, 0);
	assert_int_equal(de_stat(&d).eviction, 0);
	/* Leave one 512-byte block for four small items. */
	while (de_stat(&d).used + 512 < de_stat(&d).bytes)
		assert_int_equal(item_set(&d, 'b', big++, 0), 0);
	while ((rc = small_set(&d, small)) == 0)
		small++;
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(big, SHARD_ITEMS - 1);
	assert_int_equal(small, 4);
	s = snap(&d);
	assert_int_equal(s.ds.used, s.ds.bytes);
	assert_int_equal(item_set(&d, 'x', 0, 0), -ENOSPC);
	assert_int_equal(item_set(&d, 'x', 0, 5), -ENOSPC);
	memset(v40, 'n', sizeof(v40));
	assert_int_equal(shmt_add(d.h, "new", 3, v40, sizeof(v40), 0),
	    -ENOSPC);
	assert_int_equal(shmt_set(d.h, "new", 3, v40, sizeof(v40), 0),
	    -ENOSPC);
	/* A new key whose key and value fit its bucket's slot (every slot
	 * is empty here: no item so far fits one) takes no block. */
	assert_int_equal(shmt_incr(d.h, "new", 3, 1, &res), 0);
	assert_int_equal(res, 1);
	assert_int_equal(shmt_set(d.h, "tiny", 4, "t", 1, 0), 0);
	assert_int_equal(de_stat(&d).items, s.ds.items + 2);
	assert_int_equal(de_stat(&d).used, s.ds.used);
	/* Outgrowing the slot needs a block: refused, the old value kept. */
	assert_int_equal(shmt_set(d.h, "new", 3, v40, sizeof(v40), 0),
	    -ENOSPC);
	assert_int_equal(shmt_incr(d.h, "new", 3, 1, &res), 0);
	assert_int_equal(res, 2);
	assert_int_equal(shmt_del(d.h, "new", 3), 0);
	assert_int_equal(shmt_del(d.h, "tiny", 4), 0);
	res = 0;
	de_key('s', 3, key);
	assert_int_equal(shmt_set(d.h, key, 6, "9", 1, 0), -ENOSPC);
	assert_int_equal(shmt_replace(d.h, key, 6, "9", 1, 0), -ENOSPC);
	assert_int_equal(shmt_incr(d.h, key, 6, 1, &res), -ENOSPC);
	assert_int_equal(res, 0);
	assert_int_equal(item_set(&d, 'b', 0, 0), -ENOSPC);
	same_as(&d, &s, big, small);
	/* A delete frees a block, which a new item of its size then takes. */
	de_key('b', big - 1, key);
	assert_int_equal(shmt_del(d.h, key, 6), 0);
	assert_int_equal(item_set(&d, 'x', 0, 0), 0);
	assert_int_equal(item_there(&d, 'x', 0), 1);
	assert_int_equal(item_set(&d, 'x', 1, 0), -ENOSPC);
	same_as(&d, &s, big - 1, small);
	de_close(&d);
}

/* ---- Reaping: a full shard walks for expired items only when one may
 * have expired (lib/store.c, "Reaping") ------------------------------------ */

/* A full shard of items without TTL, eviction on: each new item evicts
 * one, and no allocation walks the shard (before the reap hint, every one
 * walked it: 2 ms a write on a full 16 MiB dictionary). */
static void
test_reap_full_no_ttl(void **state)
{
	unsigned live = 0, more = SHARD_ITEMS;
	shmt_dict_stat_t ds;
	uint64_t w0;
	struct de d;

	(void)state;
	de_open(&d, 2ULL << 20, 1, 1);
	for (ds = de_stat(&d); ds.used < ds.bytes; ds = de_stat(&d))
		assert_int_equal(item_set(&d, 'p', live++, 0), 0);
	w0 = __atomic_load_n(&shmt__store_walks, __ATOMIC_RELAXED);
	for (unsigned n = 0; n < more; n++) {
		assert_int_equal(item_set(&d, 'f', n, 0), 0);
		d.clk.now += MS;
	}
	ds = de_stat(&d);
	printf("# %u writes on a full shard: %" PRIu64 " walks, %" PRIu64
	    " evictions\n", more,
	    __atomic_load_n(&shmt__store_walks, __ATOMIC_RELAXED) - w0,
	    ds.evictions);
	/* The first finds a hint that was never set (a segment's zero
	 * bytes): one walk; none after it. */
	assert_true(__atomic_load_n(&shmt__store_walks, __ATOMIC_RELAXED) -
	    w0 <= 1);
	assert_int_equal(ds.evictions, more);
	assert_int_equal(ds.items, SHARD_ITEMS);
	for (unsigned n = more - 64; n < more; n++)
		assert_int_equal(item_there(&d, 'f', n), 1);
	de_close(&d);
}

/* Eviction off: a write that would fail walks whenever an item may have
 * expired, and only then, so an expiry written after the hint was set,
 * earlier than every expiry the walk saw, is found: a new key's (linked)
 * and a present key's new value of the same size (written over in place,
 * or linked anew in the ThreadSanitizer build).  A version moved by a
 * writer that keeps no hint (a build before it, a killed writer's repair)
 * makes the next failing write walk; hostile hint words only delay a walk
 * until housekeeping's. */
static void
test_reap_hint_lowered(void **state)
{
	unsigned big = 0;
	uint64_t w0;
	struct shmt_shard *sh;
	char key[7];
	struct de d;

	(void)state;
	de_open(&d, 2ULL << 20, 1, 0);
	sh = tu_shard(d.h->dict, 0);
	while (de_stat(&d).used < de_stat(&d).bytes)
		assert_int_equal(item_set(&d, 'b', big++, 10000), 0);
	assert_int_equal(big, SHARD_ITEMS);
	/* A failing write walks once, finds nothing expired, sets the hint
	 * to the earliest expiry (10 s on); the next one does not walk. */
	w0 = shmt__store_walks;
	assert_int_equal(item_set(&d, 'x', 0, 0), -ENOSPC);
	assert_int_equal(shmt__store_walks - w0, 1);
	assert_int_equal(sh->ds_reap_seq, sh->ds_seq);
	assert_int_equal(sh->ds_reap_at, d.clk.now + 10000 * MS);
	assert_int_equal(item_set(&d, 'x', 0, 0), -ENOSPC);
	assert_int_equal(shmt__store_walks - w0, 1);
	/* A new key with a 1 s TTL, in the room of a deleted one. */
	de_key('b', 0, key);
	assert_int_equal(shmt_del(d.h, key, 6), 0);
	de_key('b', 2, key);
	assert_int_equal(shmt_del(d.h, key, 6), 0);
	assert_int_equal(item_set(&d, 'n', 0, 1000), 0);
	assert_int_equal(sh->ds_reap_at, d.clk.now + 1000 * MS);
	assert_int_equal(sh->ds_reap_seq, sh->ds_seq);
	/* A present key rewritten with a value of its size and a 2 s TTL
	 * (a rewrite needs a free block of its size beside it). */
	assert_int_equal(item_set(&d, 'b', 1, 2000), 0);
	assert_int_equal(sh->ds_reap_at, d.clk.now + 1000 * MS);
	assert_int_equal(sh->ds_reap_seq, sh->ds_seq);
	assert_int_equal(item_set(&d, 'y', 0, 0), 0);
	assert_int_equal(item_set(&d, 'x', 0, 0), -ENOSPC);
	assert_int_equal(shmt__store_walks - w0, 1);
	/* 1 s on: the new key expired, a write takes its block. */
	d.clk.now += 1000 * MS;
	assert_int_equal(item_set(&d, 'x', 0, 0), 0);
	assert_int_equal(shmt__store_walks - w0, 2);
	assert_int_equal(item_there(&d, 'n', 0), 0);
	assert_int_equal(item_there(&d, 'x', 0), 1);
	assert_int_equal(sh->ds_reap_at, d.clk.now + 1000 * MS);
	/* 1 s more: the rewritten key's. */
	d.clk.now += 1000 * MS;
	assert_int_equal(item_set(&d, 'x', 1, 0), 0);
	assert_int_equal(shmt__store_walks - w0, 3);
	assert_int_equal(item_there(&d, 'b', 1), 0);
	assert_int_equal(item_set(&d, 'x', 2, 0), -ENOSPC);
	assert_int_equal(shmt__store_walks - w0, 3);
	/* The version moved past the hint by another writer: a walk. */
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 2, __ATOMIC_RELEASE);
	assert_int_equal(item_set(&d, 'x', 2, 0), -ENOSPC);
	assert_int_equal(shmt__store_walks - w0, 4);
	/* Hostile hint words delay a walk at worst: every answer stays
	 * whole, and the daemon's housekeeping walk finds what expired. */
	sh->ds_reap_at = UINT64_MAX;
	sh->ds_reap_wait = UINT64_MAX;
	d.clk.now += 8000 * MS;
	assert_int_equal(item_set(&d, 'x', 2, 0), -ENOSPC);
	assert_true(shmt_housekeep(d.h, NULL) > 0);
	assert_int_equal(item_set(&d, 'x', 2, 0), 0);
	assert_int_equal(item_there(&d, 'x', 2), 1);
	de_close(&d);
}

/* Eviction on, items whose TTLs run out one by one as writes come: walks
 * stay rare (each pays for its visits over about 16 per write), every
 * write succeeds, and items that expired are taken back by the walks and
 * by the eviction's sample, which prefers them. */
static void
test_reap_ttl_churn(void **state)
{
	unsigned live = 0, more = 4 * SHARD_ITEMS;
	shmt_dict_stat_t ds;
	uint64_t w0, walks;
	struct de d;

	(void)state;
	de_open(&d, 2ULL << 20, 1, 1);
	/* Item n expires at (n + 1) ms from now. */
	for (ds = de_stat(&d); ds.used < ds.bytes; ds = de_stat(&d)) {
		assert_int_equal(item_set(&d, 'p', live, live + 1), 0);
		live++;
	}
	w0 = shmt__store_walks;
	for (unsigned n = 0; n < more; n++) {
		d.clk.now += MS;
		assert_int_equal(item_set(&d, 'f', n, SHARD_ITEMS), 0);
	}
	ds = de_stat(&d);
	walks = shmt__store_walks - w0;
	printf("# %u writes as TTLs run out: %" PRIu64 " walks, %" PRIu64
	    " expirations, %" PRIu64 " evictions\n", more, walks,
	    ds.expirations, ds.evictions);
	assert_true(walks >= 1 && walks <= more / 64);
	assert_true(ds.expirations > more / 2);
	assert_true(ds.items <= SHARD_ITEMS);
	assert_int_equal(ds.items + ds.expirations + ds.evictions, live + more);
	for (unsigned n = more - 64; n < more; n++)
		assert_int_equal(item_there(&d, 'f', n), 1);
	de_close(&d);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_ttl_expiry, tu_sweep),
		cmocka_unit_test_teardown(test_expired_first, tu_sweep),
		cmocka_unit_test_teardown(test_lru, tu_sweep),
		cmocka_unit_test_teardown(test_eviction_off, tu_sweep),
		cmocka_unit_test_teardown(test_reap_full_no_ttl, tu_sweep),
		cmocka_unit_test_teardown(test_reap_hint_lowered, tu_sweep),
		cmocka_unit_test_teardown(test_reap_ttl_churn, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
