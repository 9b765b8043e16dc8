/* SPDX-License-Identifier: MIT */
/*
 * The dictionary: a sharded string -> string hash in the segment, read
 * without locks, written under a per-shard robust mutex, with TTLs and
 * eviction; and the windowed counters of shmt_hit(), kept in a second store
 * built the same way.
 *
 * Writes never change an item in place (counters excepted, see hit_update):
 * a write fills a fresh block, then links it with one 8-byte store, then
 * frees the old block.  Readers walk chains with no lock and check the
 * shard's version (ds_seq) before and after; a writer makes the version odd
 * only around the store that relinks a chain, and frees blocks only after
 * making it even again, so a reader that may have reached a block before it
 * was unlinked sees the version moved and retries.  Everything a reader
 * reads is bounds-checked against the shard's heap, so a block freed and
 * reused under it yields garbage that fails validation, never a crash.
 *
 * Crash model.  Each chain is consistent after every single store, so a
 * writer killed at any instruction leaves every key with its old or its new
 * value; it may leave the version odd, a block allocated but unlinked, or a
 * free list half-edited.  The next locker (EOWNERDEAD), or a reader that
 * finds the version stuck odd with a dead owner, repairs the shard: it
 * walks the chains (cutting any that fail validation), marks the blocks the
 * items use, and rebuilds the free lists from the gaps, without trusting any
 * free block's header.  That is also why the allocator is a buddy system:
 * a gap decomposes into maximal aligned blocks, and the result is exactly
 * the allocator's own invariant.  Its cost is internal fragmentation (an
 * item takes the next power of two), which `stat` reports as used bytes.
 */
#include "dict.h"

#include "analyzer.h"
#include "tiles.h"
#include "fork.h"

#include <ck_pr.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounded retries of an optimistic read.  A write holds the version odd
 * only for one store, so a reader retries only when a write linked or
 * unlinked in its shard during its copy. */
#define READ_RETRIES 4096

enum put_mode { PUT_SET, PUT_ADD, PUT_REPLACE };

/* ---- Geometry ----------------------------------------------------------- */

static uint64_t
rnd_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int
ilog2(uint64_t v)
{
	return 63 - __builtin_clzll(v);
}

int
shmt__store_geometry(uint64_t bytes, uint32_t shards, int counters,
    struct shmt_store *st, uint64_t *size, const char **why)
{
	uint64_t per, heap, min = counters ? (64ULL << 10) : (2ULL << 20);
	const char *dummy;

	if (why == NULL)
		why = &dummy;
	memset(st, 0, sizeof(*st));
	*size = 0;
	if (bytes == 0)
		return 0;
	if (shards == 0 || shards > 1024 || (shards & (shards - 1)) != 0) {
		*why = "shards: must be a power of two from 1 to 1024";
		return -EINVAL;
	}
	per = bytes / shards;
	if (per < min) {
		*why = counters ? "bytes: each shard needs at least 64 KiB "
		    "(bytes / shards)" : "bytes: each shard needs at least 2 MiB "
		    "(bytes / shards), room for the largest item";
		return -EINVAL;
	}
	if (per > (1ULL << 36)) {
		*why = "bytes: each shard holds at most 64 GiB (bytes / shards)";
		return -EINVAL;
	}
	heap = 1ULL << ilog2(per);
	st->shards = shards;
	st->heap_bytes = heap;
	st->order_max = (uint32_t)(ilog2(heap) - SHMT_BLOCK_MIN_SHIFT);
	/* About one chain per 256 heap bytes (128 for counters, whose items
	 * are small): short chains at a typical fill. */
	st->nbuckets = heap >> (counters ? 7 : 8);
	st->index_off = rnd_up(sizeof(struct shmt_shard), SHMT_LINE);
	st->atime_off = st->index_off + st->nbuckets * sizeof(uint64_t);
	st->heap_off = rnd_up(st->atime_off + st->nbuckets * sizeof(uint32_t),
	    SHMT_PAGE);
	st->stride = st->heap_off + heap;
	st->counters = counters;
	*size = st->stride * shards;
	return 0;
}

static struct shmt_shard *
shard_at(const struct shmt_store *st, uint32_t i)
{
	return (struct shmt_shard *)(st->base + (uint64_t)i * st->stride);
}

static uint64_t *
shard_index(const struct shmt_store *st, struct shmt_shard *sh)
{
	return (uint64_t *)((char *)sh + st->index_off);
}

static uint32_t *
shard_atime(const struct shmt_store *st, struct shmt_shard *sh)
{
	return (uint32_t *)((char *)sh + st->atime_off);
}

static char *
shard_heap(const struct shmt_store *st, struct shmt_shard *sh)
{
	return (char *)sh + st->heap_off;
}

/* ---- Hashing ---------------------------------------------------------------- */

/* Keys come from outside: their hash is keyed with the segment's secret
 * (hash.h), so no one can aim keys at one shard or one chain. */
static uint64_t
key_hash(const shmt_t *h, const void *key, size_t len)
{
	return shmt__hash64(&h->key, key, len);
}

static uint32_t
shard_of(const struct shmt_store *st, uint64_t hash)
{
	return (uint32_t)(hash >> 48) & (st->shards - 1);
}

static uint64_t
bucket_of(const struct shmt_store *st, uint64_t hash)
{
	return hash & (st->nbuckets - 1);
}

/* Coarse access time for eviction: about a second per unit (2^30 ns).  A
 * get stores it only when it changed, so a finer unit would make nearly
 * every get of a rarely read key write a cache line; a second is as fine as
 * an approximation of LRU needs (Redis's LRU clock has the same unit). */
static uint32_t
coarse(uint64_t now)
{
	return (uint32_t)(now >> 30);
}

/* ---- Items ------------------------------------------------------------------ */

static uint32_t
order_for(uint64_t bytes)
{
	uint32_t o = 0;

	while ((64ULL << o) < bytes)
		o++;
	return o;
}

/* The item at heap offset OFF, or NULL when OFF cannot start a valid item of
 * this store.  Reads racy memory: callers that hold no lock must check the
 * version afterwards. */
static struct shmt_item *
item_at(const struct shmt_store *st, char *heap, uint64_t off)
{
	struct shmt_item *it;
	uint32_t order, klen, vlen;

	if (off >= st->heap_bytes || off % 64 != 0)
		return NULL;
	it = (struct shmt_item *)(heap + off);
	if (__atomic_load_n(&it->it_magic, __ATOMIC_RELAXED) != SHMT_IT_ALLOC)
		return NULL;
	order = __atomic_load_n(&it->it_order, __ATOMIC_RELAXED);
	klen = __atomic_load_n(&it->it_klen, __ATOMIC_RELAXED);
	vlen = __atomic_load_n(&it->it_vlen, __ATOMIC_RELAXED);
	if (order > st->order_max || (off & ((64ULL << order) - 1)) != 0 ||
	    klen == 0 || klen > SHMT_KEY_MAX || vlen > SHMT_VALUE_MAX ||
	    sizeof(*it) + klen + vlen > (64ULL << order))
		return NULL;
	return it;
}

/* The value length of every counter item of ST: the index of the newest
 * sub-window, then one count per sub-window. */
#define CNT_VLEN(st) (sizeof(uint64_t) + 4ULL * (st)->subw)

static const char *
item_key(const struct shmt_item *it)
{
	return (const char *)(it + 1);
}

static char *
item_val(struct shmt_item *it)
{
	return (char *)(it + 1) + it->it_klen;
}

/* ---- The buddy allocator (writers only, under the shard lock) ------------ */

static struct shmt_fblock *
fb_at(char *heap, uint64_t off)
{
	return (struct shmt_fblock *)(heap + off);
}

/* A free-list link (offset + 1) read from the segment names a block of
 * ORDER inside the heap, on its size's alignment. */
static int
fl_link_ok(const struct shmt_store *st, uint64_t link, uint32_t order)
{
	uint64_t size = 64ULL << order;

	return link != 0 && link - 1 < st->heap_bytes &&
	    ((link - 1) & (size - 1)) == 0 && st->heap_bytes - (link - 1) >= size;
}

static void
fl_push(const struct shmt_store *st, struct shmt_shard *sh, uint64_t off,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);
	struct shmt_fblock *b = fb_at(heap, off);
	uint64_t head = sh->ds_free[order];

	/* A damaged head is dropped (the blocks behind it are lost until a
	 * repair rebuilds the lists), never followed. */
	if (!fl_link_ok(st, head, order))
		head = 0;
	b->fb_magic = SHMT_IT_FREE;
	b->fb_order = (uint8_t)order;
	b->fb_prev = 0;
	b->fb_next = head;
	if (head != 0)
		fb_at(heap, head - 1)->fb_prev = off + 1;
	sh->ds_free[order] = off + 1;
}

/* Unlink free block OFF of ORDER; -1 when the lists are inconsistent. */
static int
fl_remove(const struct shmt_store *st, struct shmt_shard *sh, uint64_t off,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);
	struct shmt_fblock *b = fb_at(heap, off);
	uint64_t next = b->fb_next, prev = b->fb_prev;

	if ((next != 0 && !fl_link_ok(st, next, order)) ||
	    (prev != 0 && !fl_link_ok(st, prev, order)))
		return -1;
	if (prev != 0)
		fb_at(heap, prev - 1)->fb_next = next;
	else if (sh->ds_free[order] == off + 1)
		sh->ds_free[order] = next;
	else
		return -1;
	if (next != 0)
		fb_at(heap, next - 1)->fb_prev = prev;
	b->fb_magic = 0;
	return 0;
}

/* Allocate a block of ORDER; returns its offset, or UINT64_MAX. */
static uint64_t
blk_alloc(const struct shmt_store *st, struct shmt_shard *sh, uint32_t order)
{
	char *heap = shard_heap(st, sh);
	uint32_t k = order;
	uint64_t off;

	while (k <= st->order_max && sh->ds_free[k] == 0)
		k++;
	if (k > st->order_max)
		return UINT64_MAX;
	if (!fl_link_ok(st, sh->ds_free[k], k))
		return UINT64_MAX;
	off = sh->ds_free[k] - 1;
	if (fb_at(heap, off)->fb_magic != SHMT_IT_FREE ||
	    fl_remove(st, sh, off, k) != 0)
		return UINT64_MAX;
	while (k > order) {
		k--;
		fl_push(st, sh, off + (64ULL << k), k);
	}
	sh->ds_used += 64ULL << order;
	return off;
}

static void
blk_free(const struct shmt_store *st, struct shmt_shard *sh, uint64_t off,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);

	sh->ds_used -= 64ULL << order;
	while (order < st->order_max) {
		uint64_t buddy = off ^ (64ULL << order);
		struct shmt_fblock *b = fb_at(heap, buddy);

		if (b->fb_magic != SHMT_IT_FREE || b->fb_order != order ||
		    fl_remove(st, sh, buddy, order) != 0)
			break;
		off &= ~(64ULL << order);
		order++;
	}
	fl_push(st, sh, off, order);
}

/* ---- Repair ------------------------------------------------------------------ */

static int
bit_get(const uint64_t *bm, uint64_t i)
{
	return (bm[i / 64] >> (i % 64)) & 1;
}

static void
bit_set(uint64_t *bm, uint64_t i)
{
	bm[i / 64] |= 1ULL << (i % 64);
}

/* Mark the 64-byte units of [off, off + len); 0 when one was marked. */
static int
mark_span(uint64_t *bm, uint64_t off, uint64_t len)
{
	for (uint64_t u = off / 64; u < (off + len) / 64; u++)
		if (bit_get(bm, u))
			return 0;
	for (uint64_t u = off / 64; u < (off + len) / 64; u++)
		bit_set(bm, u);
	return 1;
}

static int
span_clear(const uint64_t *bm, uint64_t u, uint64_t n)
{
	for (uint64_t i = u; i < u + n; i++)
		if (bit_get(bm, i))
			return 0;
	return 1;
}

/* Walk every chain of SH, cutting it at the first item that fails
 * validation or overlaps one seen before, and mark the blocks in BM. */
static void
repair_chains(const struct shmt_store *st, struct shmt_shard *sh, uint64_t *bm)
{
	uint64_t *index = shard_index(st, sh);
	char *heap = shard_heap(st, sh);

	sh->ds_items = 0;
	sh->ds_used = 0;
	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t *link = &index[b];

		while (*link != 0) {
			struct shmt_item *it = item_at(st, heap, *link - 1);
			uint64_t size;

			if (it == NULL || bucket_of(st, it->it_hash) != b ||
			    (st->counters && it->it_vlen != CNT_VLEN(st))) {
				*link = 0;
				break;
			}
			size = 64ULL << it->it_order;
			if (!mark_span(bm, *link - 1, size)) {
				*link = 0;
				break;
			}
			sh->ds_items++;
			sh->ds_used += size;
			link = &it->it_next;
		}
	}
}

/* Rebuild the free lists from the units BM leaves unmarked: each gap
 * becomes its maximal aligned blocks. */
static void
repair_free(const struct shmt_store *st, struct shmt_shard *sh,
    const uint64_t *bm)
{
	uint64_t units = st->heap_bytes / 64, u = 0;

	memset(sh->ds_free, 0, sizeof(sh->ds_free));
	while (u < units) {
		uint32_t k;

		if (bit_get(bm, u)) {
			u++;
			continue;
		}
		k = u == 0 ? st->order_max : (uint32_t)__builtin_ctzll(u);
		if (k > st->order_max)
			k = st->order_max;
		while (u + (1ULL << k) > units || !span_clear(bm, u, 1ULL << k))
			k--;
		fl_push(st, sh, u * 64, k);
		u += 1ULL << k;
	}
}

/* Repair SH; the caller holds its lock (just acquired with EOWNERDEAD). */
static int
shard_repair(const struct shmt_store *st, struct shmt_shard *sh)
{
	uint64_t *bm = calloc(st->heap_bytes / 64 / 64 + 1, sizeof(uint64_t));

	if (bm == NULL)
		return -ENOMEM;
	repair_chains(st, sh, bm);
	repair_free(st, sh, bm);
	free(bm);
	sh->ds_repairs++;
	if (sh->ds_seq & 1)
		__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELEASE);
	return 0;
}

static int
shard_lock(const struct shmt_store *st, struct shmt_shard *sh)
{
	int rc = shmt__lock(st->h, &sh->ds_lock);

	if (rc == 1) {
		rc = shard_repair(st, sh);
		if (rc != 0) {
			shmt__unlock(&sh->ds_lock);
			return rc;
		}
	}
	return rc;
}

/* A reader found the version odd for long: if the writer died, repair the
 * shard (the only time a reader takes the lock); if it lives, go on. */
static void
reader_check_owner(const struct shmt_store *st, struct shmt_shard *sh)
{
	int rc = shmt__lock_try(st->h, &sh->ds_lock);

	if (rc == 1) {
		shard_repair(st, sh);
		shmt__unlock(&sh->ds_lock);
	} else if (rc == 0) {
		/* Nobody holds it, yet the version is odd: a writer makes it
		 * even before it lets go, so this is damage; repair it too. */
		if (__atomic_load_n(&sh->ds_seq, __ATOMIC_ACQUIRE) & 1)
			shard_repair(st, sh);
		shmt__unlock(&sh->ds_lock);
	}
}

int
shmt__store_init(struct shmt_store *st)
{
	for (uint32_t i = 0; i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);

		memset(sh, 0, st->heap_off);
		shmt__lock_init(&sh->ds_lock);
		fl_push(st, sh, 0, st->order_max);
	}
	return 0;
}

/* ---- Lookups ------------------------------------------------------------------- */

static int
key_check(const void *key, size_t klen)
{
	if (key == NULL || klen == 0)
		return -EINVAL;
	if (klen > SHMT_KEY_MAX)
		return -E2BIG;
	return 0;
}

/* The most items a chain of ST can hold: every item takes a 64-byte block
 * at least, so a walk that passes more links than this has come round to
 * an item it saw before (a cycle: damage).  Every chain walk stops there. */
static uint64_t
chain_bound(const struct shmt_store *st)
{
	return st->heap_bytes / 64;
}

/* Under the lock: find KEY in its chain.  *LINKP gets the link that points
 * to it (or to the end of the chain), or NULL when the chain is longer than
 * chain_bound() (a cycle: the caller reports SHMT_ECORRUPT).  Returns the
 * item or NULL. */
static struct shmt_item *
find_locked(const struct shmt_store *st, struct shmt_shard *sh, uint64_t hash,
    const void *key, size_t klen, uint64_t **linkp)
{
	char *heap = shard_heap(st, sh);
	uint64_t *link = &shard_index(st, sh)[bucket_of(st, hash)];
	uint64_t steps = chain_bound(st);

	while (*link != 0) {
		struct shmt_item *it = item_at(st, heap, *link - 1);

		if (it == NULL)
			break;
		if (steps-- == 0) {
			*linkp = NULL;
			return NULL;
		}
		if (it->it_hash == hash && it->it_klen == klen &&
		    memcmp(item_key(it), key, klen) == 0) {
			*linkp = link;
			return it;
		}
		link = &it->it_next;
	}
	*linkp = link;
	return NULL;
}

static int
expired(const struct shmt_item *it, uint64_t now)
{
	return it->it_expire != 0 && it->it_expire <= now;
}

/* Unlink the item *LINK points to and free it; the version brackets the
 * one store that other readers could see. */
static void
unlink_free(const struct shmt_store *st, struct shmt_shard *sh, uint64_t *link,
    struct shmt_item *it)
{
	uint64_t off = (uint64_t)((char *)it - shard_heap(st, sh));

	/* The release store of the link orders the odd version before it: a
	 * reader that sees the new link sees the version moved. */
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(link, it->it_next, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELEASE);
	it->it_magic = 0;
	blk_free(st, sh, off, it->it_order);
	sh->ds_items--;
}

/* Free every expired item of SH.  Returns how many; *NEXT gets the earliest
 * expiry left. */
static uint64_t
reap_expired(const struct shmt_store *st, struct shmt_shard *sh, uint64_t now,
    uint64_t *next)
{
	uint64_t *index = shard_index(st, sh), n = 0;
	char *heap = shard_heap(st, sh);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t *link = &index[b], steps = st->heap_bytes / 64;

		/* The step bound stops a cycle in a damaged chain. */
		while (*link != 0 && steps-- > 0) {
			struct shmt_item *it = item_at(st, heap, *link - 1);

			if (it == NULL)
				break;
			if (expired(it, now)) {
				unlink_free(st, sh, link, it);
				n++;
				continue;
			}
			if (it->it_expire != 0 && it->it_expire < *next)
				*next = it->it_expire;
			link = &it->it_next;
		}
	}
	sh->ds_expirations += n;
	return n;
}

/*
 * Evict one item of SH: among the non-empty chains of up to 16 buckets from
 * the sampling hand, the one whose bucket was read least recently (ties: the
 * oldest write); an expired item goes first.  EXCEPT is never chosen.
 * Returns 1 when an item was evicted.  An approximation of LRU, as Redis's
 * sampling: exact LRU would need a shared list that every read updates.
 */
static int
evict_one(const struct shmt_store *st, struct shmt_shard *sh, uint64_t now,
    const struct shmt_item *except)
{
	uint64_t *index = shard_index(st, sh), *best_link = NULL;
	uint32_t *atime = shard_atime(st, sh), best_age = 0;
	struct shmt_item *best = NULL;
	char *heap = shard_heap(st, sh);
	uint64_t seen = 0;

	for (uint64_t k = 0; k < st->nbuckets && seen < 16; k++) {
		uint64_t b = (sh->ds_hand + k) & (st->nbuckets - 1);
		uint64_t *link = &index[b], steps = st->heap_bytes / 64;
		uint32_t age = coarse(now) - atime[b];

		while (*link != 0 && steps-- > 0) {
			struct shmt_item *it = item_at(st, heap, *link - 1);

			if (it == NULL)
				break;
			if (it != except) {
				if (expired(it, now)) {
					unlink_free(st, sh, link, it);
					sh->ds_expirations++;
					return 1;
				}
				if (best == NULL || age > best_age ||
				    (age == best_age && it->it_born < best->it_born)) {
					best = it;
					best_link = link;
					best_age = age;
				}
				seen++;
			}
			link = &it->it_next;
		}
	}
	sh->ds_hand = (sh->ds_hand + 16) & (st->nbuckets - 1);
	if (best == NULL)
		return 0;
	unlink_free(st, sh, best_link, best);
	sh->ds_evictions++;
	return 1;
}

/*
 * Counters evict by last hit, in batches, with a bound.  (The dictionary's
 * sampling above has none: with keys re-hit well within the capacity it
 * lost a few in a thousand to a few in a hundred of their first hits.  A
 * second-chance bit has none either: when every item's bit is set, the
 * hand clears them all and takes the item just ahead of it, however fresh.)  One pass over the shard finds its N items'
 * oldest and newest last hit (it_born); a second counts them in 64 bins of
 * equal width over that range; the third evicts the items of the oldest
 * bins that together hold at most N / 8 items, or, when the oldest bin alone
 * holds more, the one item hit least recently.  So an evicted item is among
 * the max(1, N / 8) least recently hit: at least N - N / 8 items (or, for the
 * single one, all others) were hit later, and a key hit again before 7N/8
 * other keys of its shard were hit keeps its count.  The cost is three walks
 * of the shard once per N / 8 evictions (a few visits per eviction, but one
 * call pays for the walk under the shard lock); exact LRU would need a list
 * in every item, relinked on every hit.  EXCEPT is never chosen.  Returns
 * how many items were evicted.
 */
#define CNT_BINS 64

static uint64_t
cnt_evict_pass(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except, int mode, uint64_t lo, uint64_t width,
    uint64_t *acc)
{
	uint64_t *index = shard_index(st, sh), n = 0;
	char *heap = shard_heap(st, sh);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t *link = &index[b], steps = st->heap_bytes / 64;

		while (*link != 0 && steps-- > 0) {
			struct shmt_item *it = item_at(st, heap, *link - 1);
			uint64_t t;

			if (it == NULL)
				break;
			t = it->it_born < lo ? lo : it->it_born;
			if (it == except) {
				link = &it->it_next;
				continue;
			}
			if (mode == 0) {                /* range */
				acc[0] = n == 0 || t < acc[0] ? t : acc[0];
				acc[1] = n == 0 || t > acc[1] ? t : acc[1];
			} else if (mode == 1) {         /* histogram */
				uint64_t j = (t - lo) / width;

				acc[j < CNT_BINS ? j : CNT_BINS - 1]++;
			} else if ((t - lo) / width <= acc[0] &&
			    (mode == 2 || t == lo)) {    /* evict */
				unlink_free(st, sh, link, it);
				sh->ds_evictions++;
				n++;
				if (mode == 3)
					return n;
				continue;
			}
			if (mode < 2)
				n++;
			link = &it->it_next;
		}
	}
	return n;
}

static int
cnt_evict(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except)
{
	uint64_t range[2] = { 0, 0 }, bins[CNT_BINS] = { 0 }, n, width, sum = 0;
	uint64_t last = 0;
	int found = 0;

	n = cnt_evict_pass(st, sh, except, 0, 0, 1, range);
	if (n == 0)
		return 0;
	width = (range[1] - range[0]) / CNT_BINS + 1;
	cnt_evict_pass(st, sh, except, 1, range[0], width, bins);
	for (uint64_t j = 0; j < CNT_BINS && sum + bins[j] <= n / 8; j++) {
		sum += bins[j];
		last = j;
		found = 1;
	}
	if (found && sum > 0)
		return (int)cnt_evict_pass(st, sh, except, 2, range[0], width,
		    &last);
	/* The oldest bin alone holds more than N / 8: the least recently hit
	 * item only (range[0] is its last hit). */
	last = 0;
	return (int)cnt_evict_pass(st, sh, except, 3, range[0], width, &last);
}

/* Allocate a block for an item of BYTES, evicting when allowed.  KEEP (the
 * item being replaced, may be NULL) is never evicted.  Returns the offset or
 * UINT64_MAX. */
static uint64_t
alloc_item(const struct shmt_store *st, struct shmt_shard *sh, uint64_t bytes,
    uint64_t now, const struct shmt_item *keep)
{
	uint32_t order = order_for(bytes);
	uint64_t off, next = UINT64_MAX;

	/* Decide before anything is freed whether the item can fit at all:
	 * the heap is one block of order_max, so with every other item gone
	 * a block of ORDER is free unless KEEP overlaps every such block,
	 * which happens when either of them is the whole heap.  A write that
	 * can never fit changes nothing, instead of evicting the whole shard
	 * first and failing after. */
	if (order > st->order_max || (keep != NULL &&
	    (order == st->order_max || keep->it_order >= st->order_max)))
		return UINT64_MAX;
	if ((off = blk_alloc(st, sh, order)) != UINT64_MAX)
		return off;
	/* Expired items are garbage whatever the eviction setting. */
	if (reap_expired(st, sh, now, &next) > 0 &&
	    (off = blk_alloc(st, sh, order)) != UINT64_MAX)
		return off;
	if (!st->eviction)
		return UINT64_MAX;
	while (st->counters ? cnt_evict(st, sh, keep) :
	    evict_one(st, sh, now, keep))
		if ((off = blk_alloc(st, sh, order)) != UINT64_MAX)
			return off;
	return UINT64_MAX;
}

/* ---- Writes ------------------------------------------------------------------ */

struct put {
	uint64_t hash;
	const void *key;
	size_t klen;
	const void *val;
	size_t vlen;
	uint64_t expire;
	int keep_ttl;
	enum put_mode mode;
};

/* Under the lock: store P in SH (copy-on-write).  Returns 0 or -errno. */
static int
put_locked(shmt_t *h, const struct shmt_store *st, struct shmt_shard *sh,
    const struct put *p)
{
	uint64_t now = shmt__now(h), *link, off;
	struct shmt_item *old, *it;
	char *heap = shard_heap(st, sh);

	old = find_locked(st, sh, p->hash, p->key, p->klen, &link);
	if (link == NULL)
		return SHMT_ECORRUPT;
	if (old != NULL && expired(old, now)) {
		unlink_free(st, sh, link, old);
		sh->ds_expirations++;
		old = NULL;
	}
	if (p->mode == PUT_ADD && old != NULL)
		return -EEXIST;
	if (p->mode == PUT_REPLACE && old == NULL)
		return -ENOENT;
	off = alloc_item(st, sh, sizeof(*it) + p->klen + p->vlen, now, old);
	if (off == UINT64_MAX)
		return -ENOSPC;
	it = (struct shmt_item *)(heap + off);
	it->it_order = (uint8_t)order_for(sizeof(*it) + p->klen + p->vlen);
	it->it_flags = 0;
	it->it_pad = 0;
	it->it_klen = (uint32_t)p->klen;
	it->it_vlen = (uint32_t)p->vlen;
	it->it_hash = p->hash;
	it->it_expire = p->keep_ttl && old != NULL ? old->it_expire : p->expire;
	it->it_born = now;
	memcpy((char *)(it + 1), p->key, p->klen);
	if (p->vlen > 0)
		memcpy((char *)(it + 1) + p->klen, p->val, p->vlen);
	/* Evictions may have moved the chain: find the link again. */
	old = find_locked(st, sh, p->hash, p->key, p->klen, &link);
	if (link == NULL) {
		blk_free(st, sh, off, it->it_order);
		return SHMT_ECORRUPT;
	}
	it->it_next = old != NULL ? old->it_next : 0;
	it->it_magic = SHMT_IT_ALLOC;
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(link, off + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELEASE);
	sh->ds_items++;
	if (old != NULL) {
		old->it_magic = 0;
		blk_free(st, sh, (uint64_t)((char *)old - heap), old->it_order);
		sh->ds_items--;
	}
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
	p.expire = ttl_ms == 0 ? 0 : shmt__now(h) + ttl_ms * 1000000ULL;
	sh = shard_at(st, shard_of(st, p.hash));
	if ((rc = shard_lock(st, sh)) < 0)
		return rc;
	rc = put_locked(h, st, sh, &p);
	shmt__unlock(&sh->ds_lock);
	return rc;
}

SHMT_EXPORT int
shmt_set(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	return dict_put(h, key, klen, val, vlen, ttl_ms, PUT_SET);
}

SHMT_EXPORT int
shmt_add(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	return dict_put(h, key, klen, val, vlen, ttl_ms, PUT_ADD);
}

SHMT_EXPORT int
shmt_replace(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t ttl_ms)
{
	return dict_put(h, key, klen, val, vlen, ttl_ms, PUT_REPLACE);
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
	rc = shard_lock(st, *shp);
	return rc < 0 ? rc : 0;
}

SHMT_EXPORT int
shmt_del(shmt_t *h, const void *key, size_t klen)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link;
	int rc;

	if ((rc = lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	it = find_locked(st, sh, hash, key, klen, &link);
	rc = link == NULL ? SHMT_ECORRUPT : -ENOENT;
	if (it != NULL) {
		rc = expired(it, shmt__now(h)) ? -ENOENT : 0;
		if (rc != 0)
			sh->ds_expirations++;
		unlink_free(st, sh, link, it);
	}
	shmt__unlock(&sh->ds_lock);
	return rc;
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

SHMT_EXPORT int
shmt_incr(shmt_t *h, const void *key, size_t klen, int64_t delta,
    int64_t *result)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	char num[24];
	uint64_t hash, *link;
	int64_t cur = 0, sum;
	struct put p;
	int rc;

	if (st != NULL && st->shards != 0 && key != NULL && klen != 0 &&
	    klen <= SHMT_KEY_MAX && klen > st->max_key)
		return -E2BIG;
	if ((rc = lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	it = find_locked(st, sh, hash, key, klen, &link);
	if (link == NULL) {
		rc = SHMT_ECORRUPT;
		goto out;
	}
	if (it != NULL && !expired(it, shmt__now(h)) &&
	    (rc = parse_i64(item_val(it), it->it_vlen, &cur)) != 0)
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
	p.expire = st->default_ttl_ms == 0 ? 0 :
	    shmt__now(h) + st->default_ttl_ms * 1000000ULL;
	p.keep_ttl = 1;
	p.mode = PUT_SET;
	rc = put_locked(h, st, sh, &p);
	if (rc == 0 && result != NULL)
		*result = sum;
out:
	shmt__unlock(&sh->ds_lock);
	return rc;
}

/* ---- Reads (no lock) --------------------------------------------------------- */

/* How long a reader waits for a version held odd: a writer holds it odd
 * for one store, but may be descheduled right there (more processes than
 * cores), so the wait is bounded by time, not by a spin count. */
#define READ_WAIT_NS 200000000ULL

/* Wait while a writer holds the version odd: spin, then yield; now and
 * then check whether the writer died.  Returns the even version, or 1
 * (odd) when READ_WAIT_NS ran out. */
static uint64_t
seq_begin(const struct shmt_store *st, struct shmt_shard *sh)
{
	uint64_t start = 0;

	for (unsigned i = 0;; i++) {
		uint64_t s = __atomic_load_n(&sh->ds_seq, __ATOMIC_ACQUIRE);

		if ((s & 1) == 0)
			return s;
		if (i < 128) {
			ck_pr_stall();
			continue;
		}
		if (start == 0)
			start = shmt__mono_ns();
		else if (shmt__mono_ns() - start > READ_WAIT_NS)
			return 1;
		if (i % 256 == 255)
			reader_check_owner(st, sh);
		sched_yield();
	}
}

/* After the copy: the version unchanged means the copy is whole.  The
 * acquire fence keeps every load of the copy before the version's load. */
static int
seq_valid(struct shmt_shard *sh, uint64_t s)
{
#if defined(SHMT_SANITIZE_THREAD)
	/* gcc cannot instrument fences for ThreadSanitizer (-Wtsan): in that
	 * build a compiler barrier and a sequentially consistent load stand in
	 * (x86-64 keeps loads in order). */
	__asm__ __volatile__("" ::: "memory");
	return __atomic_load_n(&sh->ds_seq, __ATOMIC_SEQ_CST) == s;
#else
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&sh->ds_seq, __ATOMIC_RELAXED) == s;
#endif
}

SHMT_EXPORT int
shmt_get(shmt_t *h, const void *key, size_t klen, void *buf, size_t cap,
    size_t *vlen)
{
	const struct shmt_store *st = h != NULL ? h->dict : NULL;
	struct shmt_shard *sh;
	uint64_t hash, b, *index, now;
	char *heap;
	int rc;

	if (h == NULL || vlen == NULL || (buf == NULL && cap != 0))
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if ((rc = key_check(key, klen)) != 0)
		return rc;
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	hash = key_hash(h, key, klen);
	now = shmt__now(h);
	/* Every get is a request the analyzer counts, found or not. */
	if (h->an != NULL)
		shmt__an_feed(h, hash, key, klen, SHMT_HOT_DICT, now);
	sh = shard_at(st, shard_of(st, hash));
	b = bucket_of(st, hash);
	index = shard_index(st, sh);
	heap = shard_heap(st, sh);
	for (unsigned t = 0; t < READ_RETRIES; t++) {
		uint64_t s = seq_begin(st, sh), off, steps = st->heap_bytes / 64;
		uint64_t expire = 0;
		size_t len = 0;

		if (s & 1)
			return -EAGAIN;
		rc = -ENOENT;
		off = __atomic_load_n(&index[b], __ATOMIC_RELAXED);
		while (off != 0 && steps-- > 0) {
			struct shmt_item *it = item_at(st, heap, off - 1);

			if (it == NULL)
				break;  /* moved under us: the version says so */
			if (it->it_hash == hash && it->it_klen == klen &&
			    memcmp(item_key(it), key, klen) == 0) {
				len = it->it_vlen;
				expire = it->it_expire;
				if (len <= cap) {
					if (len > 0)
						memcpy(buf, (char *)(it + 1) + klen,
						    len);
					rc = 0;
				} else {
					rc = -ERANGE;
				}
				break;
			}
			off = __atomic_load_n(&it->it_next, __ATOMIC_RELAXED);
		}
		if (!seq_valid(sh, s))
			continue;
		if (rc != -ENOENT) {
			uint32_t *at = &shard_atime(st, sh)[b];

			if (expire != 0 && expire <= now)
				return -ENOENT;
			*vlen = len;
			/* The access time lives beside the index, never in an
			 * item, so this store cannot land in a reused block. */
			if (__atomic_load_n(at, __ATOMIC_RELAXED) != coarse(now))
				__atomic_store_n(at, coarse(now), __ATOMIC_RELAXED);
		}
		return rc;
	}
	return -EAGAIN;
}

/* Find the key whose hash is HASH (for the analyzer's report).  Returns 0
 * with the key in BUF, or -ENOENT. */
int
shmt__dict_key_by_hash(shmt_t *h, uint64_t hash, void *buf, size_t cap,
    size_t *klen)
{
	const struct shmt_store *st = h->dict;
	struct shmt_shard *sh;
	uint64_t b;

	if (st == NULL || st->shards == 0)
		return -ENOENT;
	sh = shard_at(st, shard_of(st, hash));
	b = bucket_of(st, hash);
	for (unsigned t = 0; t < READ_RETRIES; t++) {
		uint64_t s = seq_begin(st, sh), off, steps = st->heap_bytes / 64;
		char *heap = shard_heap(st, sh);
		size_t len = 0;
		int found = 0;

		if (s & 1)
			return -EAGAIN;
		off = __atomic_load_n(&shard_index(st, sh)[b], __ATOMIC_RELAXED);
		while (off != 0 && steps-- > 0) {
			struct shmt_item *it = item_at(st, heap, off - 1);

			if (it == NULL)
				break;
			/* The analyzer keeps the hash's top bit for itself. */
			if ((it->it_hash & ~SHMT_AN_CLIENT_BIT) ==
			    (hash & ~SHMT_AN_CLIENT_BIT)) {
				len = it->it_klen;
				if (len <= cap) {
					memcpy(buf, item_key(it), len);
					found = 1;
				}
				break;
			}
			off = __atomic_load_n(&it->it_next, __ATOMIC_RELAXED);
		}
		if (!seq_valid(sh, s))
			continue;
		if (!found)
			return -ENOENT;
		*klen = len;
		return 0;
	}
	return -EAGAIN;
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
		struct shmt_shard *sh;
		int found = 0, tries = 0;
		uint64_t now = shmt__now(h);

		if (shard >= st->shards)
			return 0;
		if (b >= st->nbuckets) {
			*cursor = (shard + 1) << 52;
			continue;
		}
		sh = shard_at(st, (uint32_t)shard);
		for (;;) {
			uint64_t s = seq_begin(st, sh), k = 0, off;
			char *heap = shard_heap(st, sh);
			size_t len = 0;

			if ((s & 1) || ++tries > READ_RETRIES)
				return -EAGAIN;
			found = 0;
			off = __atomic_load_n(&shard_index(st, sh)[b],
			    __ATOMIC_RELAXED);
			/* The whole chain, not just up to POS: a chain that
			 * comes round to itself must be found at its first
			 * visit, before it hands out one key twice. */
			while (off != 0 && k <= chain_bound(st)) {
				struct shmt_item *it = item_at(st, heap, off - 1);

				if (it == NULL)
					break;
				if (k == pos) {
					found = it->it_expire == 0 ||
					    it->it_expire > now ? 1 : 2;
					len = it->it_klen;
					if (found == 1 && len <= kcap)
						memcpy(kbuf, item_key(it), len);
				}
				k++;
				off = __atomic_load_n(&it->it_next,
				    __ATOMIC_RELAXED);
			}
			if (!seq_valid(sh, s))
				continue;
			if (k > chain_bound(st))
				return SHMT_ECORRUPT;
			if (found == 1 && len > kcap) {
				*klen = len;
				return -ERANGE;
			}
			if (found == 0) {
				*cursor = (shard << 52) | ((b + 1) << 20);
			} else {
				*cursor = (shard << 52) | (b << 20) | (pos + 1);
				if (found == 1) {
					*klen = len;
					return 1;
				}
			}
			break;
		}
	}
}

SHMT_EXPORT int
shmt_dict_stat(shmt_t *h, shmt_dict_stat_t *out)
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

/* ---- Windowed counters ----------------------------------------------------- */

/*
 * A counter item's value: the index of the newest sub-window it has counted
 * (u64), then one u32 count per sub-window, sub-window i in slot i % n.
 * Counters change in place under the shard lock; no lock-free reader reads
 * them.  Each step is crash-safe: stale slots are zeroed before the index
 * moves (so a repeat zeroes them again), and a count is one 4-byte store.
 */
/* Counts follow a key of any length, so they are unaligned: memcpy moves
 * each one with a single 4-byte load or store (one instruction, so a kill
 * -9 cannot split it). */
static uint32_t
cnt_get(const char *c, uint64_t i)
{
	uint32_t v;

	memcpy(&v, c + 4 * i, sizeof(v));
	return v;
}

static void
cnt_put(char *c, uint64_t i, uint32_t v)
{
	memcpy(c + 4 * i, &v, sizeof(v));
}

static uint64_t
hit_update(const struct shmt_store *st, struct shmt_item *it, uint64_t now)
{
	uint64_t idx = shmt__tile_of(now, st->window, st->subw), cur, sum = 0;
	char *v = item_val(it), *cnt = v + sizeof(cur);
	uint32_t c;

	memcpy(&cur, v, sizeof(cur));
	if (idx > cur) {
		uint64_t gap = idx - cur < st->subw ? idx - cur : st->subw;

		for (uint64_t i = 1; i <= gap; i++)
			cnt_put(cnt, (cur + i) % st->subw, 0);
		memcpy(v, &idx, sizeof(idx));
		cur = idx;
	}
	c = cnt_get(cnt, cur % st->subw);
	if (c != UINT32_MAX)
		cnt_put(cnt, cur % st->subw, c + 1);
	for (uint32_t i = 0; i < st->subw; i++)
		sum += cnt_get(cnt, i);
	it->it_expire = now + st->window;
	/* Counters are evicted by their last hit, not by their creation. */
	it->it_born = now;
	return sum;
}

SHMT_EXPORT int
shmt_hit(shmt_t *h, const void *key, size_t klen, uint64_t *count)
{
	const struct shmt_store *st = h != NULL ? h->counters : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link, now, sum;
	int rc;

	if ((rc = lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	now = shmt__now(h);
	it = find_locked(st, sh, hash, key, klen, &link);
	/* A counter item's value is exactly its index and ring: a shorter
	 * one (damage) would make the update write past the item. */
	if (link == NULL || (it != NULL && it->it_vlen != CNT_VLEN(st))) {
		rc = SHMT_ECORRUPT;
		goto out;
	}
	if (it != NULL && expired(it, now)) {
		unlink_free(st, sh, link, it);
		sh->ds_expirations++;
		it = NULL;
	}
	if (it == NULL) {
		uint64_t vlen = CNT_VLEN(st);
		uint64_t idx = shmt__tile_of(now, st->window, st->subw);
		struct put p = { .hash = hash, .key = key, .klen = klen,
		    .vlen = vlen, .expire = now + st->window, .mode = PUT_ADD };
		char zero[8 + 4 * 256];

		memset(zero, 0, sizeof(zero));
		memcpy(zero, &idx, sizeof(idx));
		p.val = zero;
		if ((rc = put_locked(h, st, sh, &p)) != 0)
			goto out;
		it = find_locked(st, sh, hash, key, klen, &link);
		if (it == NULL || it->it_vlen != CNT_VLEN(st)) {
			rc = SHMT_ECORRUPT;
			goto out;
		}
	}
	sum = hit_update(st, it, now);
	if (count != NULL)
		*count = sum;
out:
	shmt__unlock(&sh->ds_lock);
	return rc;
}

/* ---- Housekeeping and rebasing ---------------------------------------------- */

uint64_t
shmt__store_used(const struct shmt_store *st)
{
	uint64_t n = 0;

	for (uint32_t i = 0; st != NULL && i < st->shards; i++)
		n += __atomic_load_n(&shard_at(st, i)->ds_used, __ATOMIC_RELAXED);
	return n;
}

static int
store_housekeep(shmt_t *h, const struct shmt_store *st, uint64_t now,
    uint64_t *next)
{
	int n = 0;

	for (uint32_t i = 0; st != NULL && i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);
		int rc = shard_lock(st, sh);

		if (rc < 0)
			return rc;
		n += (int)reap_expired(st, sh, now, next);
		shmt__unlock(&sh->ds_lock);
	}
	return n;
}

int
shmt__stores_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next)
{
	int a = store_housekeep(h, h->dict, now, next), b;

	if (a < 0)
		return a;
	b = store_housekeep(h, h->counters, now, next);
	return b < 0 ? b : a + b;
}

/* Move a counter's newest sub-window index with the clock, rounding toward
 * the past so no count is kept longer than its window.  Moving every index
 * by k moves each sub-window's start by floor(k W / n) or ceil(k W / n)
 * (tiles.h); k = floor(d n / W) keeps that at most d, and for d < 0,
 * k = -ceil(-d n / W) makes it at least -d in size. */
static void
counter_rebase(const struct shmt_store *st, struct shmt_item *it, int64_t d)
{
	unsigned __int128 a = (unsigned __int128)(d >= 0 ? (uint64_t)d :
	    -(uint64_t)d) * st->subw;
	uint64_t k, cur;

	a = d >= 0 ? a / st->window : (a + st->window - 1) / st->window;
	k = a > UINT64_MAX ? UINT64_MAX : (uint64_t)a;
	memcpy(&cur, item_val(it), sizeof(cur));
	if (d >= 0)
		cur = cur > UINT64_MAX - k ? UINT64_MAX : cur + k;
	else
		cur = cur > k ? cur - k : 0;
	memcpy(item_val(it), &cur, sizeof(cur));
}

static void
store_rebase(const struct shmt_store *st, int64_t d)
{
	for (uint32_t i = 0; st != NULL && i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);
		uint64_t *index = shard_index(st, sh);
		char *heap = shard_heap(st, sh);

		for (uint64_t b = 0; b < st->nbuckets; b++) {
			uint64_t off = index[b], steps = st->heap_bytes / 64;

			while (off != 0 && steps-- > 0) {
				struct shmt_item *it = item_at(st, heap, off - 1);

				if (it == NULL)
					break;
				if (it->it_expire != 0) {
					int64_t e = (int64_t)it->it_expire + d;

					it->it_expire = e > 0 ? (uint64_t)e : 1;
				}
				if (st->counters && it->it_vlen == CNT_VLEN(st))
					counter_rebase(st, it, d);
				off = it->it_next;
			}
		}
	}
}

void
shmt__stores_rebase(shmt_t *h, int64_t delta_ns)
{
	store_rebase(h->dict, delta_ns);
	store_rebase(h->counters, delta_ns);
}

/* ---- Checking ------------------------------------------------------------------- */

/* Mark a block in BM; report when it overlaps one seen before. */
static int
chk_mark(struct shmt_chk *c, const char *who, uint64_t *bm, uint64_t off,
    uint64_t size)
{
	if (mark_span(bm, off, size))
		return 1;
	shmt__chk(c, "%s: block at %llu overlaps another", who,
	    (unsigned long long)off);
	return 0;
}

/* Walk every chain.  Each block is marked once in BM and a walk stops at a
 * block marked before, so the walk of a shard takes at most its heap's
 * blocks, whatever the links say (a chain that loops ends there, named as an
 * overlap).  Reads racy memory: the caller validates the scan. */
static void
chk_chains(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_chk *c, const char *who, uint64_t *bm)
{
	uint64_t *index = shard_index(st, sh), items = 0, used = 0;
	uint64_t cvlen = 8 + 4ULL * st->subw;
	char *heap = shard_heap(st, sh);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t off = __atomic_load_n(&index[b], __ATOMIC_RELAXED);

		while (off != 0) {
			struct shmt_item *it = item_at(st, heap, off - 1);

			if (it == NULL) {
				shmt__chk(c, "%s: bucket %llu links to an invalid "
				    "item at %llu", who, (unsigned long long)b,
				    (unsigned long long)(off - 1));
				break;
			}
			if (bucket_of(st, it->it_hash) != b)
				shmt__chk(c, "%s: item at %llu is in the wrong "
				    "bucket", who, (unsigned long long)(off - 1));
			/* shmt_hit writes the whole ring of sub-window
			 * counts into the value. */
			if (st->counters && it->it_vlen != cvlen)
				shmt__chk(c, "%s: counter item at %llu has a value "
				    "of %u bytes, its ring of %u sub-windows takes "
				    "%llu", who, (unsigned long long)(off - 1),
				    it->it_vlen, st->subw,
				    (unsigned long long)cvlen);
			if (!mark_span(bm, off - 1, 64ULL << it->it_order)) {
				shmt__chk(c, "%s: bucket %llu's chain reaches the "
				    "block at %llu again (a loop, or a block "
				    "another chain or list holds)", who,
				    (unsigned long long)b,
				    (unsigned long long)(off - 1));
				break;
			}
			items++;
			used += 64ULL << it->it_order;
			off = __atomic_load_n(&it->it_next, __ATOMIC_RELAXED);
		}
	}
	if (items != sh->ds_items || used != sh->ds_used)
		shmt__chk(c, "%s: counts %llu items in %llu bytes, chains hold "
		    "%llu in %llu", who, (unsigned long long)sh->ds_items,
		    (unsigned long long)sh->ds_used, (unsigned long long)items,
		    (unsigned long long)used);
}

static void
chk_free_lists(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_chk *c, const char *who, uint64_t *bm)
{
	char *heap = shard_heap(st, sh);

	for (uint32_t k = 0; k <= st->order_max; k++) {
		uint64_t off = sh->ds_free[k], prev = 0;

		while (off != 0) {
			struct shmt_fblock *b;

			if (!fl_link_ok(st, off, k)) {
				shmt__chk(c, "%s: free list %u links outside the "
				    "heap", who, k);
				break;
			}
			b = fb_at(heap, off - 1);
			if (b->fb_magic != SHMT_IT_FREE || b->fb_order != k ||
			    b->fb_prev != prev) {
				shmt__chk(c, "%s: free block at %llu is damaged",
				    who, (unsigned long long)(off - 1));
				break;
			}
			if (!chk_mark(c, who, bm, off - 1, 64ULL << k))
				break;
			prev = off;
			off = b->fb_next;
		}
	}
}

/* The problems one scan of a shard found, kept until the scan is known to
 * have seen the shard at rest. */
struct chk_buf {
	char **msg;
	size_t n, cap;
	int lost;                       /* named none: out of memory */
};

static void
chk_buf_add(void *ctx, const char *problem)
{
	struct chk_buf *b = ctx;
	char *m;

	if (b->n == b->cap) {
		size_t cap = b->cap == 0 ? 8 : 2 * b->cap;
		char **v = realloc(b->msg, cap * sizeof(*v));

		if (v == NULL) {
			b->lost++;
			return;
		}
		b->msg = v;
		b->cap = cap;
	}
	if ((m = strdup(problem)) == NULL) {
		b->lost++;
		return;
	}
	b->msg[b->n++] = m;
}

static void
chk_buf_clear(struct chk_buf *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->msg[i]);
	b->n = 0;
	b->lost = 0;
}

/* One scan of SH into B: version, chains, free lists, unmarked bytes. */
static void
chk_scan(const struct shmt_store *st, struct shmt_shard *sh, const char *who,
    uint64_t seq, uint64_t *bm, struct chk_buf *b)
{
	struct shmt_chk sub = { chk_buf_add, b, 0, 0, 0 };
	uint64_t units = st->heap_bytes / 64, unmarked = 0;

	chk_buf_clear(b);
	memset(bm, 0, (units / 64 + 1) * sizeof(uint64_t));
	if (seq & 1)
		shmt__chk(&sub, "%s: version odd outside a write", who);
	chk_chains(st, sh, &sub, who, bm);
	chk_free_lists(st, sh, &sub, who, bm);
	for (uint64_t u = 0; u < units; u++)
		unmarked += !bit_get(bm, u);
	if (unmarked != 0)
		shmt__chk(&sub, "%s: %llu bytes in no block (leaked)", who,
		    (unsigned long long)unmarked * 64);
}

/*
 * How long the check watches a shard that is not at rest: SHMT_CHK_WAIT_NS
 * (segment.h).  Writers hold a shard for microseconds, so a scan finds it
 * at rest within a few tries unless writers keep it busy without a pause; a
 * lock held by the same live thread for that long while nothing moves is
 * damage of its own (a word naming a live process that does not hold it,
 * or a writer stopped inside), and is named as such.  The watching of all
 * shards shares SHMT_CHK_WAIT_TOTAL_NS, so that a segment whose every lock
 * word names a live process still gets its check in half a second.
 */

/*
 * Check one shard without its lock and without writing to it.  A scan is
 * "at rest" when the lock word was the same before and after it, naming no
 * live thread, and so was the version.  A scan that finds nothing ends the
 * check of the shard, at rest or not (damage stays put, so a write going
 * on cannot make damage look sound, short of repairing it).  A scan that
 * finds problems counts only at rest, and they are named only when a second
 * scan at rest finds them too, so a write that slipped between two reads
 * of the lock word cannot be taken for damage.  A shard never at rest for
 * SHMT_CHK_WAIT_NS (or what is left of the call's budget) while scans find
 * problems is left unchecked.  With REPAIR, a shard found damaged is then
 * rebuilt under its lock.
 */
static void
chk_shard(const struct shmt_store *st, struct shmt_shard *sh, const char *who,
    struct shmt_chk *c, uint64_t *bm)
{
	struct chk_buf b = { NULL, 0, 0, 0 };
	uint64_t start = shmt__mono_ns(), spent;
	uint64_t limit = c->wait_left < SHMT_CHK_WAIT_NS ? c->wait_left :
	    SHMT_CHK_WAIT_NS;
	uint32_t o1 = 0, o2 = 0, live_owner = 0;
	int lk1 = SHMT_LOCK_FREE, lk2, seen_damage = 0, done = 0, live_all = 1;
	unsigned tries_made = 0;

	for (unsigned tries = 0;; tries++) {
		uint64_t s1;
		int rest, clean, stuck, same;

		tries_made = tries + 1;
		lk1 = shmt__lock_peek(st->h, &sh->ds_lock, &o1);
		s1 = __atomic_load_n(&sh->ds_seq, __ATOMIC_ACQUIRE);
		chk_scan(st, sh, who, s1, bm, &b);
		/* As a reader validates its copy (the scan's loads come
		 * before the version's). */
		same = seq_valid(sh, s1);
		lk2 = shmt__lock_peek(st->h, &sh->ds_lock, &o2);
		rest = same && o1 == o2 && lk1 != SHMT_LOCK_LIVE &&
		    lk2 != SHMT_LOCK_LIVE;
		clean = b.n == 0 && b.lost == 0;
		/* The same live thread holds the lock and nothing moved: a
		 * writer inside, or a word naming a live thread that does not
		 * hold it (which stalls every writer): watch it a while. */
		stuck = lk1 == SHMT_LOCK_LIVE && lk2 == SHMT_LOCK_LIVE &&
		    o1 == o2 && same;
		if (!stuck || (live_owner != 0 && o1 != live_owner))
			live_all = 0;
		live_owner = o1;
		if (rest) {
			if (clean && lk1 == SHMT_LOCK_FREE)
				break;
			if (seen_damage) {
				done = 1;       /* confirmed */
				break;
			}
			seen_damage = 1;
			continue;
		}
		if (clean && !stuck)
			break;
		if (shmt__mono_ns() - start >= limit) {
			/* Named only after the full watch. */
			if (live_all && limit == SHMT_CHK_WAIT_NS)
				shmt__chk(c, "%s: lock held by live thread %u "
				    "(process %d) for over %llu ms", who, o1,
				    (int)shmt__tid_process(o1),
				    SHMT_CHK_WAIT_NS / 1000000ULL);
			break;
		}
		if (tries >= 2)
			sched_yield();
	}
	/* Only watching spends the shared budget, not a first scan. */
	spent = tries_made > 1 ? shmt__mono_ns() - start : 0;
	c->wait_left = spent >= c->wait_left ? 0 : c->wait_left - spent;
	if (done) {
		if (lk1 == SHMT_LOCK_DEAD)
			shmt__chk(c, "%s: lock names thread %u, which is gone (a "
			    "writer died inside: the next writer repairs the "
			    "shard)", who, o1);
		for (size_t i = 0; i < b.n; i++)
			shmt__chk(c, "%s", b.msg[i]);
		if (b.lost != 0)
			shmt__chk(c, "%s: %d more problems (no memory to name "
			    "them)", who, b.lost);
		if (c->repair) {
			int rc = shard_lock(st, sh);

			if (rc < 0)
				shmt__chk(c, "%s: cannot take its lock to repair "
				    "it (%s)", who, shmt_strerror(rc));
			else {
				/* rc 1: taken over from the dead writer, and
				 * repaired as every writer does. */
				if (rc == 0 && shard_repair(st, sh) != 0)
					shmt__chk(c, "%s: no memory to repair "
					    "it", who);
				shmt__unlock(&sh->ds_lock);
			}
		}
	}
	chk_buf_clear(&b);
	free(b.msg);
}

static void
chk_store(const struct shmt_store *st, const char *kind, struct shmt_chk *c)
{
	uint64_t *bm = calloc(st->heap_bytes / 64 / 64 + 1, sizeof(uint64_t));
	char who[64];

	if (bm == NULL) {
		shmt__chk(c, "%s: no memory to check it", kind);
		return;
	}
	for (uint32_t i = 0; i < st->shards; i++) {
		snprintf(who, sizeof(who), "%s shard %u", kind, i);
		chk_shard(st, shard_at(st, i), who, c, bm);
	}
	free(bm);
}

void
shmt__stores_check(shmt_t *h, struct shmt_chk *c)
{
	if (h->dict != NULL)
		chk_store(h->dict, "dictionary", c);
	if (h->counters != NULL)
		chk_store(h->counters, "counters", c);
}
