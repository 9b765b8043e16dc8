/* SPDX-License-Identifier: MIT */
/*
 * The dictionary: set, add, replace, del, incr and the lock-free get over
 * the sharded store (store.c), the cursor walk and the stats.  The
 * windowed counters (counters.c) live in a second store built the same way
 * and reach it through the helpers at the end of this file.
 */
#include "dict.h"

#include "analyzer.h"
#include "tiles.h"
#include "fork.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum put_mode { PUT_SET, PUT_ADD, PUT_REPLACE };

/* ---- Writes ------------------------------------------------------------------ */

struct put {
	uint64_t hash;
	const void *key;
	size_t klen;
	const void *val;
	size_t vlen;
	uint64_t expire;
	uint64_t now;                   /* the call's one clock read */
	int keep_ttl;
	enum put_mode mode;
};

/*
 * A get's clock.  A get uses its time for the expiry, the access time and
 * the analyzer's stamp, so without a clock of the caller's it reads
 * CLOCK_MONOTONIC_COARSE: the time of the kernel's last tick (1-4 ms old
 * with HZ 1000-250, never ahead of CLOCK_MONOTONIC), at the cost of a load
 * instead of a timer read.  So an item may still be read up to one tick
 * after it expired, never before, and the analyzer counts a get up to one
 * tick early (what that does to its exact minute: the top of analyzer.c);
 * a write that sets an expiry (shmt_set with a TTL or the default TTL,
 * shmt_incr creating a key with the default TTL) reads the precise clock,
 * so the expiry is exact; a write without one reads the coarse clock too:
 * its time is then the item's age for eviction and the time at which an
 * old item counts as expired, as for a get (a write may so replace an item
 * up to one tick after it expired as if it had not: shmt_add finds it
 * present).  An injected clock drives all of it.
 */
static inline uint64_t
get_now(shmt_t *h)
{
	if (h->clock == NULL)
		return shmt__clock_ns(CLOCK_MONOTONIC_COARSE);
	return shmt__now(h);
}

/*
 * Under the lock: store P in SH.  A key lives in its bucket's slot or in
 * its chain, never in both but for one moment (below).  A new key whose
 * key and value fit the slot takes it when it is empty; a key in the slot
 * stays there while its values fit (written over in place), and moves to
 * a heap item when a value outgrows the slot: the item is linked first,
 * the slot emptied after (store.c, "Slots").  A key in the chain stays in
 * the chain: over the old item when the new one takes its block, else in
 * a fresh block (copy on write).  Returns 0 or -errno.
 */
static int
put_locked(shmt_t *h, const struct shmt_store *st, struct shmt_shard *sh,
    const struct put *p)
{
	uint64_t now = p->now, *link, off, seq, expire = p->expire;
	uint64_t b = bucket_of(st, p->hash);
	struct shmt_item *old = NULL, *it;
	char *heap = shard_heap(st, sh);
	int fits = slot_fits(st, p->klen, p->vlen), in_slot, rc;
	struct slot_copy sc;

	(void)h;
	/* The counters' store keeps no item in a slot (whatever a damaged
	 * one says): its adds look at the chain alone. */
	sc.lens = 0;
	if (!st->counters)
		slot_load(bucket_at(st, sh, b), &sc);
	/* An expired item leaves the slot, this key's or another's (so that
	 * a new small key takes it, even in a full heap). */
	if (sc.lens != 0 && sc.expire != 0 && sc.expire <= now) {
		shmt__slot_clear(st, sh, b);
		sh->ds_expirations++;
		sc.lens = 0;
	}
	in_slot = slot_holds(&sc, hash_tag(p->hash), p->key, p->klen);
	if (in_slot) {
		if (p->mode == PUT_ADD)
			return -EEXIST;
		if (p->keep_ttl)
			expire = sc.expire;
		if (fits) {
			shmt__slot_overwrite(st, sh, b, p->val, p->vlen,
			    expire);
			return 0;
		}
		/* Outgrown: a heap item at the chain's end (the key is not
		 * in the chain), then the slot emptied. */
		if (shmt__store_find(st, sh, p->hash, p->key, p->klen,
		    &link) != NULL || link == NULL)
			return SHMT_ECORRUPT;
	} else {
		old = shmt__store_find(st, sh, p->hash, p->key, p->klen, &link);
		if (link == NULL)
			return SHMT_ECORRUPT;
		if (old != NULL && expired(old, now)) {
			shmt__store_unlink(st, sh, link, old);
			sh->ds_expirations++;
			old = NULL;
		}
		if (p->mode == PUT_ADD && old != NULL)
			return -EEXIST;
		if (p->mode == PUT_REPLACE && old == NULL)
			return -ENOENT;
		if (old == NULL && fits && sc.lens == 0) {
			shmt__slot_fill(st, sh, b, p->hash, p->key, p->klen,
			    p->val, p->vlen, expire);
			return 0;
		}
		if (old != NULL && p->keep_ttl)
			expire = old->it_expire;
		/* A value that fits the old item's block is written over it:
		 * no block allocated or freed, no chain relinked (store.c
		 * says why a reader still never sees a mixed value). */
		if (old != NULL && shmt__store_overwrite(st, sh, old, p->val,
		    p->vlen, expire, now))
			return 0;
	}
	/* Every link or unlink moves the version: the same version after
	 * the allocation means no chain changed, and LINK still names OLD's
	 * place. */
	seq = sh->ds_seq;
	off = shmt__store_alloc(st, sh, sizeof(*it) + p->klen + p->vlen, now,
	    old, &rc);
	if (off == UINT64_MAX)
		return rc;
	it = (struct shmt_item *)(heap + off);
	it->it_order = (uint8_t)order_for(sizeof(*it) + p->klen + p->vlen);
	it->it_flags = 0;
	it->it_lens = lens_make(p->klen, p->vlen);
	it->it_expire = expire;
	it->it_born = now;
	memcpy((char *)(it + 1), p->key, p->klen);
	if (p->vlen > 0)
		memcpy((char *)(it + 1) + p->klen, p->val, p->vlen);
	/* Expiries or evictions moved a chain: find the link again (the
	 * second walk only then).  They never empty a slot whose item has
	 * not expired, as this one has not. */
	if (sh->ds_seq != seq) {
		old = shmt__store_find(st, sh, p->hash, p->key, p->klen,
		    &link);
		if (link == NULL || (in_slot && old != NULL)) {
			shmt__blk_free(st, sh, off, it->it_order);
			return SHMT_ECORRUPT;
		}
	}
	shmt__store_link_new(st, sh, p->hash, link, off, it, old);
	if (in_slot)
		shmt__slot_clear(st, sh, b);
	return 0;
}

static inline __attribute__((always_inline)) int
dict_put(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms, enum put_mode mode)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct shmt_shard *sh;
	struct put p;
	int rc;

	if (h == NULL)
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if ((rc = key_check(key, klen)) != 0)
		return rc;
	if (vlen > SHMT_VALUE_MAX)
		return -EMSGSIZE;
	if (val == NULL && vlen != 0)
		return -EINVAL;
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	/* The segment's own limits, fixed at its creation. */
	if (klen > st->max_key)
		return -E2BIG;
	if (vlen > st->max_value)
		return -EMSGSIZE;
	if (ttl_ms > UINT64_MAX / 2000000)
		return -EINVAL;
	if (ttl_ms == 0)
		ttl_ms = st->default_ttl_ms;
	p.hash = key_hash(h, key, klen);
	p.key = key;
	p.klen = klen;
	p.val = val;
	p.vlen = vlen;
	p.keep_ttl = 0;
	p.mode = mode;
	p.now = ttl_ms == 0 ? get_now(h) : shmt__now(h);
	p.expire = ttl_ms == 0 ? 0 : p.now + ttl_ms * 1000000ULL;
	sh = shard_at(st, shard_of(st, p.hash));
	if ((rc = shmt__shard_lock(st, sh)) < 0)
		return rc;
	rc = put_locked(h, st, sh, &p);
	shmt__unlock(&sh->ds_lock);
	return rc;
}

static inline __attribute__((always_inline)) int
gen_set_once(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	return dict_put(h, key, klen, val, vlen, ttl_ms, PUT_SET);
}

SHMT_EXPORT int
shmt_set(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	SHMT_GEN_CALL(h, gen_set_once(h, key, klen, val, vlen, ttl_ms));
}

static inline __attribute__((always_inline)) int
gen_add_once(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	return dict_put(h, key, klen, val, vlen, ttl_ms, PUT_ADD);
}

SHMT_EXPORT int
shmt_add(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	SHMT_GEN_CALL(h, gen_add_once(h, key, klen, val, vlen, ttl_ms));
}

static inline __attribute__((always_inline)) int
gen_replace_once(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	return dict_put(h, key, klen, val, vlen, ttl_ms, PUT_REPLACE);
}

SHMT_EXPORT int
shmt_replace(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	SHMT_GEN_CALL(h, gen_replace_once(h, key, klen, val, vlen, ttl_ms));
}

/* The locked prologue shared by del and incr. */
static int
lock_key(shmt_t *h, const struct shmt_store *st, const void *key, size_t klen,
    uint64_t *hash, struct shmt_shard **shp)
{
	int rc;

	if (h == NULL)
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if ((rc = key_check(key, klen)) != 0)
		return rc;
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	*hash = key_hash(h, key, klen);
	*shp = shard_at(st, shard_of(st, *hash));
	rc = shmt__shard_lock(st, *shp);
	return rc < 0 ? rc : 0;
}

static int
gen_del_once(shmt_t *h, const void *key, size_t klen)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	struct slot_copy sc;
	uint64_t hash, *link, b;
	int rc;

	if ((rc = lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	b = bucket_of(st, hash);
	slot_load(bucket_at(st, sh, b), &sc);
	if (slot_holds(&sc, hash_tag(hash), key, klen)) {
		rc = sc.expire != 0 && sc.expire <= shmt__now(h) ? -ENOENT : 0;
		if (rc != 0)
			sh->ds_expirations++;
		shmt__slot_clear(st, sh, b);
		shmt__unlock(&sh->ds_lock);
		return rc;
	}
	it = shmt__store_find(st, sh, hash, key, klen, &link);
	rc = link == NULL ? SHMT_ECORRUPT : -ENOENT;
	if (it != NULL) {
		rc = expired(it, shmt__now(h)) ? -ENOENT : 0;
		if (rc != 0)
			sh->ds_expirations++;
		shmt__store_unlink(st, sh, link, it);
	}
	shmt__unlock(&sh->ds_lock);
	return rc;
}

SHMT_EXPORT int
shmt_del(shmt_t *h, const void *key, size_t klen)
{
	SHMT_GEN_CALL(h, gen_del_once(h, key, klen));
}

/* Parse exactly LEN bytes as a decimal int64: an optional '-', then digits
 * only (leading zeros allowed), nothing else, no overflow. */
static int
parse_i64(const char *s, size_t len, int64_t *out)
{
	int neg = len > 0 && s[0] == '-';
	uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
	size_t i = (size_t)neg;

	if (i == len)
		return -EINVAL;
	for (; i < len; i++) {
		unsigned dgt = (unsigned char)s[i] - '0';

		if (dgt > 9 || v > (lim - dgt) / 10)
			return -EINVAL;
		v = v * 10 + dgt;
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

static int
gen_incr_once(shmt_t *h, const void *key, size_t klen, int64_t delta,
    int64_t *result)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	struct slot_copy sc;
	char num[24];
	uint64_t hash, *link, now;
	int64_t cur = 0, sum;
	struct put p;
	int rc;

	if (st != NULL && st->shards != 0 && key != NULL && klen != 0 &&
	    klen <= SHMT_KEY_MAX && klen > st->max_key)
		return -E2BIG;
	if ((rc = lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	now = st->default_ttl_ms == 0 ? get_now(h) : shmt__now(h);
	slot_load(bucket_at(st, sh, bucket_of(st, hash)), &sc);
	if (slot_holds(&sc, hash_tag(hash), key, klen)) {
		if ((sc.expire == 0 || sc.expire > now) &&
		    (rc = parse_i64(slot_val(&sc), lens_vlen(sc.lens),
		    &cur)) != 0)
			goto out;
	} else {
		it = shmt__store_find(st, sh, hash, key, klen, &link);
		if (link == NULL) {
			rc = SHMT_ECORRUPT;
			goto out;
		}
		if (it != NULL && !expired(it, now) &&
		    (rc = parse_i64(item_val(it), item_vlen(it), &cur)) != 0)
			goto out;
	}
	if (__builtin_add_overflow(cur, delta, &sum)) {
		rc = -ERANGE;
		goto out;
	}
	p.hash = hash;
	p.key = key;
	p.klen = klen;
	p.vlen = (size_t)snprintf(num, sizeof(num), "%lld", (long long)sum);
	p.val = num;
	if (p.vlen > st->max_value) {
		rc = -EMSGSIZE;
		goto out;
	}
	/* A key created here gets the default TTL; one that exists keeps
	 * its own (keep_ttl). */
	p.now = now;
	p.expire = st->default_ttl_ms == 0 ? 0 :
	    now + st->default_ttl_ms * 1000000ULL;
	p.keep_ttl = 1;
	p.mode = PUT_SET;
	rc = put_locked(h, st, sh, &p);
	if (rc == 0 && result != NULL)
		*result = sum;
out:
	shmt__unlock(&sh->ds_lock);
	return rc;
}

SHMT_EXPORT int
shmt_incr(shmt_t *h, const void *key, size_t klen, int64_t delta,
    int64_t *result)
{
	SHMT_GEN_CALL(h, gen_incr_once(h, key, klen, delta, result));
}


/*
 * A read without the lock: what it looks for in bucket B of shard SH (a
 * key and its hash, or a position), where it copies what it finds (BUF,
 * CAP bytes), and what it found.  Its copy function runs under seq_read()
 * and sets only the fields below the line; the caller acts on them once
 * the version says the copy is whole.
 */
struct dict_read {
	const struct shmt_store *st;
	struct shmt_shard *sh;
	uint64_t b, hash;
	const void *key;
	size_t klen;
	void *buf;
	size_t cap;
	/* ---- */
	size_t len;                     /* the value's or the key's length */
	uint64_t expire;                /* the item's expiry */
};

/* The read of bucket HASH names, in the shard it names. */
static struct dict_read
dict_read_of(const struct shmt_store *st, uint64_t hash)
{
	return (struct dict_read){ .st = st,
		.sh = shard_at(st, shard_of(st, hash)),
		.b = bucket_of(st, hash), .hash = hash };
}


/* shmt_get's copy: the value of KEY. */
static int
get_copy(void *arg)
{
	struct dict_read *g = arg;
	struct shmt_bucket *bk = &shard_index(g->st, g->sh)[g->b];
	uint32_t tag = hash_tag(g->hash), bits = tag_bits(tag);
	struct slot_copy sc;
	struct shmt_item *it;
	struct chain c;

	/* The bucket's slot: a small item's get ends on the index's line. */
	slot_load(bk, &sc);
	if (slot_holds(&sc, tag, g->key, g->klen)) {
		g->len = lens_vlen(sc.lens);
		g->expire = sc.expire;
		if (g->len > g->cap)
			return -ERANGE;
		copy_short(g->buf, slot_val(&sc), g->len);
		return 0;
	}
	/* A key whose tag the bucket's filter lacks is not in the chain:
	 * most misses end here, on the index's line. */
	if ((__atomic_load_n(&bk->bk_filter, __ATOMIC_RELAXED) & bits) != bits)
		return -ENOENT;
	chain_start(&c, g->st, g->sh, g->b);
	it = chain_find_key(&c, g->hash, g->key, g->klen);
	if (it == NULL)
		return -ENOENT;
	g->len = lens_vlen(c.lens);
	g->expire = __atomic_load_n(&it->it_expire, __ATOMIC_RELAXED);
	if (g->len > g->cap)
		return -ERANGE;
	copy_short(g->buf, (char *)(it + 1) + g->klen, g->len);
	return 0;
}

static inline __attribute__((always_inline)) int
gen_get_once(shmt_t *h, const void *key, size_t klen, void *buf, size_t cap,
    size_t *vlen)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct dict_read g;
	uint32_t *at, t;
	uint64_t hash, now;
	int rc;

	if (h == NULL || vlen == NULL || (buf == NULL && cap != 0))
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if ((rc = key_check(key, klen)) != 0)
		return rc;
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	hash = key_hash(h, key, klen);
	now = get_now(h);
	g = dict_read_of(st, hash);
	/* Every get is a request the analyzer counts, found or not.  The
	 * bucket's line is asked for first, so its miss overlaps the
	 * analyzer's work instead of following it. */
	if (h->an != NULL) {
		__builtin_prefetch(&shard_index(st, g.sh)[g.b]);
		shmt__an_feed(h, hash, key, klen, SHMT_HOT_DICT, now);
	}
	g.key = key;
	g.klen = klen;
	g.buf = buf;
	g.cap = cap;
	rc = seq_read(st, g.sh, get_copy, &g);
	if (rc == -ENOENT || rc == -EAGAIN)
		return rc;
	if (g.expire != 0 && g.expire <= now)
		return -ENOENT;
	*vlen = g.len;
	/* The access time lives beside the index, never in an item, so this
	 * store cannot land in a reused block. */
	at = &shard_index(st, g.sh)[g.b].bk_atime;
	t = coarse(now);
	if (__atomic_load_n(at, __ATOMIC_RELAXED) != t)
		__atomic_store_n(at, t, __ATOMIC_RELAXED);
	return rc;
}

SHMT_EXPORT int
shmt_get(shmt_t *h, const void *key, size_t klen, void *buf, size_t cap,
    size_t *vlen)
{
	SHMT_GEN_CALL(h, gen_get_once(h, key, klen, buf, cap, vlen));
}

/* shmt__dict_key_by_hash's copy: the key of the item with HASH. */
static int
key_copy(void *arg)
{
	struct dict_read *k = arg;
	struct slot_copy sc;
	struct shmt_item *it;
	struct chain c;

	slot_load(bucket_at(k->st, k->sh, k->b), &sc);
	if (sc.lens != 0 && (key_hash(k->st->h, slot_key(&sc),
	    lens_klen(sc.lens)) & ~SHMT_AN_CLIENT_BIT) ==
	    (k->hash & ~SHMT_AN_CLIENT_BIT)) {
		k->len = lens_klen(sc.lens);
		if (k->len > k->cap)
			return -ENOENT;
		memcpy(k->buf, slot_key(&sc), k->len);
		return 0;
	}
	chain_start(&c, k->st, k->sh, k->b);
	/* The analyzer keeps the hash's top bit for itself, so the tag
	 * (which mixes every bit) cannot pick the item: each key of the
	 * chain is hashed again (a report's few lookups, not a get's). */
	while ((it = chain_item(&c)) != NULL &&
	    (key_hash(k->st->h, item_key(it), lens_klen(c.lens)) &
	    ~SHMT_AN_CLIENT_BIT) != (k->hash & ~SHMT_AN_CLIENT_BIT))
		chain_next(&c, it);
	if (it == NULL)
		return -ENOENT;
	k->len = lens_klen(c.lens);
	if (k->len > k->cap)
		return -ENOENT;
	memcpy(k->buf, item_key(it), k->len);
	return 0;
}

/* Find the key whose hash is HASH (for the analyzer's report).  Returns 0
 * with the key in BUF, or -ENOENT. */
int
shmt__dict_key_by_hash(shmt_t *h, uint64_t hash, void *buf, size_t cap,
    size_t *klen)
{
	const struct shmt_store *st = h->dict;
	struct dict_read k;
	int rc;

	if (st == NULL || st->shards == 0)
		return -ENOENT;
	k = dict_read_of(st, hash);
	k.buf = buf;
	k.cap = cap;
	rc = seq_read(st, k.sh, key_copy, &k);
	if (rc == 0)
		*klen = k.len;
	return rc;
}

/*
 * The walk (shmt_dict_next) and moves.  A cursor that named a shard, a
 * bucket and a place in its chain would mean nothing in a generation with
 * other sizes.  So the walk goes in an order of the keys that no size
 * changes: a key's place is its keyed hash with the bits reversed, less
 * the lowest bit of the result (bit 63 of the hash, which picks neither a
 * shard nor a bucket), and the cursor is the next place to look at.  A
 * move carries the secret, so every key keeps its place in every
 * generation; a key present for the whole walk has its place ahead of the
 * cursor until it is returned, and behind it after, so it is returned
 * once, whatever moves happen between two calls.
 *
 * Buckets take the low bits of the hash, so the places whose top n bits
 * are fixed (n = log2 of the buckets per shard) are one bucket's, in every
 * shard: a call reads that bucket's chain in each shard (seq_read: no
 * lock) for the live key with the least place at or after the cursor, and
 * moves to the next bucket's places when there is none.  A key stored
 * where its hash does not lead is damage (no writer puts it there, and a
 * get could not find it): the walk stops with SHMT_ECORRUPT, as at a chain
 * longer than the heap holds.  So every chain it reads holds only its own
 * bucket's keys, and the walk of a shard passes each item once, however
 * a damaged segment's links run (passing over misplaced items instead, a
 * walk of buckets that all lead into one chain would read that chain once
 * per bucket).  Two keys with the same place (63 bits of
 * their keyed hash equal: for n keys a chance of about n^2 / 2^64 that
 * some pair is) are one place, and the walk returns one of them.
 */
#define WALK_END (1ULL << 63)

static inline uint64_t
bits_reversed(uint64_t v)
{
	v = ((v >> 1) & 0x5555555555555555ULL) |
	    ((v & 0x5555555555555555ULL) << 1);
	v = ((v >> 2) & 0x3333333333333333ULL) |
	    ((v & 0x3333333333333333ULL) << 2);
	v = ((v >> 4) & 0x0f0f0f0f0f0f0f0fULL) |
	    ((v & 0x0f0f0f0f0f0f0f0fULL) << 4);
	return __builtin_bswap64(v);
}

static inline uint64_t
walk_place(uint64_t hash)
{
	return bits_reversed(hash) >> 1;
}

/* What a walk's read of one chain looks for and finds. */
struct walk_read {
	const struct shmt_store *st;
	shmt_t *h;
	struct shmt_shard *sh;
	uint32_t shard;
	uint64_t b, from, to, now;      /* places [FROM, TO) */
	/* ---- */
	int found;
	uint64_t place;
	size_t len;
	unsigned char key[SHMT_KEY_MAX];
};

/* The key KEY (LEN bytes, expiry EXPIRE) of W's bucket: W's find when it
 * is live and its place the least in [FROM, TO) so far; SHMT_ECORRUPT
 * when its hash does not lead to W's bucket. */
static int
walk_consider(struct walk_read *w, const char *key, size_t len,
    uint64_t expire)
{
	uint64_t hash = key_hash(w->h, key, len), place;

	if (shard_of(w->st, hash) != w->shard || bucket_of(w->st, hash) != w->b)
		return SHMT_ECORRUPT;
	if (expire != 0 && expire <= w->now)
		return 0;
	place = walk_place(hash);
	if (place < w->from || place >= w->to ||
	    (w->found && place >= w->place))
		return 0;
	w->found = 1;
	w->place = place;
	w->len = len;
	memcpy(w->key, key, len);
	return 0;
}

/* seq_read's copy: the live key of bucket B with the least place in
 * [FROM, TO); SHMT_ECORRUPT at an item stored where its hash does not
 * lead, or at a chain longer than the heap holds. */
static int
walk_copy(void *arg)
{
	struct walk_read *w = arg;
	struct slot_copy sc;
	struct shmt_item *it;
	struct chain c;
	int rc;

	w->found = 0;
	/* The slot's item, then the chain's. */
	slot_load(bucket_at(w->st, w->sh, w->b), &sc);
	if (sc.lens != 0 && (rc = walk_consider(w, slot_key(&sc),
	    lens_klen(sc.lens), sc.expire)) != 0)
		return rc;
	chain_start(&c, w->st, w->sh, w->b);
	for (; (it = chain_item(&c)) != NULL; chain_next(&c, it))
		if ((rc = walk_consider(w, item_key(it), lens_klen(c.lens),
		    it->it_expire)) != 0)
			return rc;
	return c.cut ? SHMT_ECORRUPT : 0;
}

static int
gen_dict_next_once(shmt_t *h, uint64_t *cursor, void *kbuf, size_t kcap,
    size_t *klen)
{
	const struct shmt_store *st = h->dict;
	struct walk_read w;
	unsigned span;

	SHMT_FORK_CHECK(h);
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	if (*cursor > WALK_END)
		return -EINVAL;
	/* The top bits of a place that name its bucket: log2(nbuckets). */
	span = 63 - (unsigned)__builtin_ctzll(st->nbuckets);
	w.st = st;
	w.h = h;
	while (*cursor < WALK_END) {
		uint64_t best_place = 0;
		size_t best_len = 0;
		int best = 0, rc;

		w.from = *cursor;
		w.to = ((w.from >> span) + 1) << span;
		w.now = shmt__now(h);
		w.b = bucket_of(st, bits_reversed(w.from << 1));
		for (uint32_t s = 0; s < st->shards; s++) {
			w.shard = s;
			w.sh = shard_at(st, s);
			if ((rc = seq_read(st, w.sh, walk_copy, &w)) != 0)
				return rc;
			if (!w.found || (best && w.place >= best_place))
				continue;
			best = 1;
			best_place = w.place;
			best_len = w.len;
			if (best_len <= kcap)
				memcpy(kbuf, w.key, best_len);
		}
		if (!best) {
			*cursor = w.to;
			continue;
		}
		*klen = best_len;
		if (best_len > kcap)
			return -ERANGE;
		*cursor = best_place + 1;
		return 1;
	}
	return 0;
}

SHMT_EXPORT int
shmt_dict_next(shmt_t *h, uint64_t *cursor, void *kbuf, size_t kcap,
    size_t *klen)
{
	if (h == NULL || cursor == NULL || klen == NULL ||
	    (kbuf == NULL && kcap != 0))
		return -EINVAL;
	SHMT_GEN_CALL(h, gen_dict_next_once(h, cursor, kbuf, kcap, klen));
}

static int
gen_dict_stat_once(shmt_t *h, shmt_dict_stat_t *out)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	uint32_t room = UINT32_MAX;

	if (h == NULL || out == NULL)
		return -EINVAL;
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	memset(out, 0, sizeof(*out));
	out->shards = st->shards;
	out->eviction = st->eviction;
	out->bytes = st->heap_bytes * st->shards;
	for (uint32_t i = 0; i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);
		uint32_t top = 0;

		out->used += __atomic_load_n(&sh->ds_used, __ATOMIC_RELAXED);
		out->items += __atomic_load_n(&sh->ds_items, __ATOMIC_RELAXED);
		out->evictions += __atomic_load_n(&sh->ds_evictions,
		    __ATOMIC_RELAXED);
		out->expirations += __atomic_load_n(&sh->ds_expirations,
		    __ATOMIC_RELAXED);
		out->repairs += __atomic_load_n(&sh->ds_repairs,
		    __ATOMIC_RELAXED);
		for (uint32_t k = 0; k <= st->order_max; k++)
			if (__atomic_load_n(&sh->ds_free[k], __ATOMIC_RELAXED))
				top = k + 1;
		if (top < room)
			room = top;
	}
	/* room - 1 is the largest free order present in every shard. */
	if (room > 0) {
		uint64_t block = 64ULL << (room - 1);
		uint64_t over = sizeof(struct shmt_item) + SHMT_KEY_MAX;

		out->value_room = block > over ? block - over : 0;
		if (out->value_room > SHMT_VALUE_MAX)
			out->value_room = SHMT_VALUE_MAX;
	}
	return 0;
}

SHMT_EXPORT int
shmt_dict_stat(shmt_t *h, shmt_dict_stat_t *out)
{
	SHMT_GEN_READ(h, gen_dict_stat_once(h, out));
}

/* ---- Store helpers for the counters (counters.c) -------------------------- */

int
shmt__store_lock_key(shmt_t *h, const struct shmt_store *st, const void *key,
    size_t klen, uint64_t *hash, struct shmt_shard **shp)
{
	return lock_key(h, st, key, klen, hash, shp);
}

int
shmt__store_add(shmt_t *h, const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t hash, const void *key, size_t klen, const void *val, size_t vlen,
    uint64_t expire)
{
	struct put p = { .hash = hash, .key = key, .klen = klen, .val = val,
	    .vlen = vlen, .expire = expire, .now = shmt__now(h),
	    .mode = PUT_ADD };

	return put_locked(h, st, sh, &p);
}
