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

/* Under the lock: store P in SH (copy-on-write).  Returns 0 or -errno. */
static int
put_locked(shmt_t *h, const struct shmt_store *st, struct shmt_shard *sh,
    const struct put *p)
{
	uint64_t now = p->now, *link, off, seq;
	struct shmt_item *old, *it;
	char *heap = shard_heap(st, sh);

	(void)h;
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
	/* Every link or unlink moves the version: the same version after
	 * the allocation means no chain changed, and LINK still names OLD's
	 * place. */
	seq = sh->ds_seq;
	off = shmt__store_alloc(st, sh, sizeof(*it) + p->klen + p->vlen, now,
	    old);
	if (off == UINT64_MAX)
		return -ENOSPC;
	it = (struct shmt_item *)(heap + off);
	it->it_order = (uint8_t)order_for(sizeof(*it) + p->klen + p->vlen);
	it->it_flags = 0;
	it->it_lens = lens_make(p->klen, p->vlen);
	it->it_expire = p->keep_ttl && old != NULL ? old->it_expire : p->expire;
	it->it_born = now;
	memcpy((char *)(it + 1), p->key, p->klen);
	if (p->vlen > 0)
		memcpy((char *)(it + 1) + p->klen, p->val, p->vlen);
	/* Expiries or evictions moved a chain: find the link again (the
	 * second walk only then). */
	if (sh->ds_seq != seq) {
		old = shmt__store_find(st, sh, p->hash, p->key, p->klen,
		    &link);
		if (link == NULL) {
			shmt__blk_free(st, sh, off, it->it_order);
			return SHMT_ECORRUPT;
		}
	}
	shmt__store_link_new(st, sh, p->hash, link, off, it, old);
	return 0;
}

static int
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
	p.now = shmt__now(h);
	p.expire = ttl_ms == 0 ? 0 : p.now + ttl_ms * 1000000ULL;
	sh = shard_at(st, shard_of(st, p.hash));
	if ((rc = shmt__shard_lock(st, sh)) < 0)
		return rc;
	rc = put_locked(h, st, sh, &p);
	shmt__unlock(&sh->ds_lock);
	return rc;
}

static int
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

static int
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

static int
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
	uint64_t hash, *link;
	int rc;

	if ((rc = lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
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
	now = shmt__now(h);
	it = shmt__store_find(st, sh, hash, key, klen, &link);
	if (link == NULL) {
		rc = SHMT_ECORRUPT;
		goto out;
	}
	if (it != NULL && !expired(it, now) &&
	    (rc = parse_i64(item_val(it), item_vlen(it), &cur)) != 0)
		goto out;
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
	uint64_t pos, now;              /* shmt_dict_next */
	void *buf;
	size_t cap;
	/* ---- */
	int found;                      /* shmt_dict_next: 1 live, 2 expired */
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

/*
 * A get's clock.  A get uses its time for the expiry, the access time and
 * the analyzer's stamp, so without a clock of the caller's it reads
 * CLOCK_MONOTONIC_COARSE: the time of the kernel's last tick (1-4 ms old
 * with HZ 1000-250, never ahead of CLOCK_MONOTONIC), at the cost of a load
 * instead of a timer read.  So an item may still be read up to one tick
 * after it expired, never before, and the analyzer counts a get up to one
 * tick early (what that does to its exact minute: the top of analyzer.c);
 * every write reads the precise clock.  An injected clock drives all of it.
 */
static inline uint64_t
get_now(shmt_t *h)
{
	if (h->clock == NULL)
		return shmt__clock_ns(CLOCK_MONOTONIC_COARSE);
	return shmt__now(h);
}

/* shmt_get's copy: the value of KEY. */
static int
get_copy(void *arg)
{
	struct dict_read *g = arg;
	struct shmt_bucket *bk = &shard_index(g->st, g->sh)[g->b];
	uint32_t bits = tag_bits(hash_tag(g->hash));
	struct shmt_item *it;
	struct chain c;

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
	if (g->len > 0)
		memcpy(g->buf, (char *)(it + 1) + g->klen, g->len);
	return 0;
}

static int
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
	/* Every get is a request the analyzer counts, found or not. */
	if (h->an != NULL)
		shmt__an_feed(h, hash, key, klen, SHMT_HOT_DICT, now);
	g = dict_read_of(st, hash);
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
	struct shmt_item *it;
	struct chain c;

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

/* shmt_dict_next's copy: the key at position POS of bucket B's chain,
 * found 1 (live) or 2 (expired), or 0 (none there). */
static int
next_copy(void *arg)
{
	struct dict_read *n = arg;
	struct shmt_item *it;
	struct chain c;

	n->found = 0;
	n->len = 0;
	chain_start(&c, n->st, n->sh, n->b);
	/* The whole chain, not just up to POS: a chain that comes round to
	 * itself must be found at its first visit, before it hands out one
	 * key twice. */
	for (uint64_t k = 0; (it = chain_item(&c)) != NULL; k++) {
		if (k == n->pos) {
			n->found = it->it_expire == 0 ||
			    it->it_expire > n->now ? 1 : 2;
			n->len = lens_klen(c.lens);
			if (n->found == 1 && n->len <= n->cap)
				memcpy(n->buf, item_key(it), n->len);
		}
		chain_next(&c, it);
	}
	return c.cut ? SHMT_ECORRUPT : 0;
}

SHMT_EXPORT int
shmt_dict_next(shmt_t *h, uint64_t *cursor, void *kbuf, size_t kcap,
    size_t *klen)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;

	if (h == NULL || cursor == NULL || klen == NULL ||
	    (kbuf == NULL && kcap != 0))
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	/* Cursor: shard (12 bits) | bucket (32 bits) | position (20 bits). */
	for (;;) {
		uint64_t c = *cursor, shard = c >> 52;
		uint64_t b = (c >> 20) & 0xffffffffULL, pos = c & 0xfffff;
		uint64_t now = shmt__now(h);
		struct dict_read n;
		int rc;

		if (shard >= st->shards)
			return 0;
		if (b >= st->nbuckets) {
			*cursor = (shard + 1) << 52;
			continue;
		}
		n = (struct dict_read){ .st = st,
			.sh = shard_at(st, (uint32_t)shard), .b = b, .pos = pos,
			.now = now, .buf = kbuf, .cap = kcap };
		if ((rc = seq_read(st, n.sh, next_copy, &n)) != 0)
			return rc;
		if (n.found == 1 && n.len > kcap) {
			*klen = n.len;
			return -ERANGE;
		}
		if (n.found == 0) {
			*cursor = (shard << 52) | ((b + 1) << 20);
		} else {
			*cursor = (shard << 52) | (b << 20) | (pos + 1);
			if (n.found == 1) {
				*klen = n.len;
				return 1;
			}
		}
	}
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
