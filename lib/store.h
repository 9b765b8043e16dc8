/* SPDX-License-Identifier: MIT */
/*
 * The sharded store: the heap of items behind the dictionary and the
 * windowed counters (shards, chains, the buddy allocator, repair, expiry
 * and eviction).  Private to libshmthrottle; store.c says why it is built
 * this way.
 */
#ifndef SHMT_STORE_H
#define SHMT_STORE_H

#include "hash.h"
#include "segment.h"

#include <ck_pr.h>

#include <errno.h>
#include <sched.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * A store is a region of shards.  Each shard is
 *   [struct shmt_shard][index: nbuckets buckets of 64 bytes]
 *   [heap: 2^k bytes of buddy blocks, 64 bytes at least]
 * A bucket is one cache line: the head of its chain, the coarse time of
 * its last read, a filter of its chain's tags, and a slot that holds one
 * small item of the dictionary (key and value of SHMT_SLOT_DATA bytes at
 * most) in the index itself, so that a get of that item reads one line.
 * Other items live in heap blocks and chain from the bucket by links
 * (link_make): the item's 64-byte unit + 1 (0 ends a chain) and its tag.
 * Units are relative to the shard's heap and checked against it before
 * every use; a slot's lengths are checked against the slot.
 */

#define SHMT_BLOCK_MIN_SHIFT 6          /* 64-byte blocks at least */
#define SHMT_ORDER_MAX 40

/* The largest item (header, key and value) a write overwrites in place;
 * larger ones are copied on write.  Four lines: room for the small items
 * that most writes replace, while the undo record stays a small part of a
 * shard's header (a copy of this size costs a few instructions per line). */
#define SHMT_UNDO_MAX 256

#define SHMT_IT_ALLOC 0x5449U           /* "IT" (16 bits) */
#define SHMT_IT_FREE 0x45455246U        /* "FREE" (32 bits: never an item's) */

struct shmt_shard {
	struct shmt_lock ds_lock;       /* writers */
	uint64_t ds_items;
	uint64_t ds_used;               /* bytes in allocated blocks */
	uint64_t ds_evictions;
	uint64_t ds_expirations;
	uint64_t ds_repairs;
	uint64_t ds_hand;               /* eviction sampling position */
	uint64_t ds_free[SHMT_ORDER_MAX + 1]; /* free lists: offset + 1 */
	uint64_t ds_free_mask;          /* bit k: list k was not empty (a
	                                 * hint, checked against the list) */
	/* The reap hint (store.c, "Reaping"), in bytes that were padding
	 * before it (all zero: a reap is due): while ds_seq is ds_reap_seq,
	 * no item of the shard expires before ds_reap_at.  ds_reap_wait: the
	 * failed allocations still to pass, with eviction, before the next
	 * walk for expired items. */
	uint64_t ds_reap_seq;
	uint64_t ds_reap_at;
	uint64_t ds_reap_wait;
	/* The version: odd while a writer relinks a chain or overwrites an
	 * item.  On a line of its own but for the undo record of an overwrite
	 * in place (store.c), which only a writer stores, and only just
	 * before it stores the version: readers load the version twice per
	 * read, and the record costs the writer no other line for a small
	 * item. */
	alignas(SHMT_LINE) uint64_t ds_seq;
	uint64_t ds_undo;               /* heap offset + 1 of the item being
	                                 * overwritten; 0: none */
	uint64_t ds_undo_len;           /* bytes saved */
	unsigned char ds_undo_bytes[SHMT_UNDO_MAX]; /* its bytes before */
};

/* The bytes of key and value a bucket's slot holds. */
#define SHMT_SLOT_DATA 32

/* A bucket of the index: one cache line. */
struct shmt_bucket {
	uint64_t bk_head;               /* the chain's first link */
	uint32_t bk_atime;              /* coarse() of the last get */
	uint32_t bk_filter;             /* tag_bits() of every item linked
	                                 * since the chain was last empty */
	/* The slot: a dictionary item of this bucket whose key and value
	 * fit SHMT_SLOT_DATA bytes.  Written only under the shard's lock,
	 * with the version odd, word by word (atomic words: a lock-free
	 * reader copies them as they are and its version check says
	 * whether the copy is whole); the counters' store never uses it. */
	uint32_t bk_lens;               /* lens_make(); 0: the slot is empty */
	uint32_t bk_tag;                /* hash_tag() of its key */
	uint64_t bk_expire;             /* ns; 0: never */
	uint64_t bk_data[SHMT_SLOT_DATA / 8]; /* the key, then the value */
};
/* The reap hint lies in what was the padding before the version's line:
 * the format (its sizes and offsets) is as it was. */
_Static_assert(offsetof(struct shmt_shard, ds_seq) ==
    (offsetof(struct shmt_shard, ds_free_mask) + 8 + SHMT_LINE - 1) /
    SHMT_LINE * SHMT_LINE, "the shard header's layout");
_Static_assert(sizeof(struct shmt_bucket) == 64 && SHMT_LINE % 64 == 0,
    "a bucket is one 64-byte line, the index starts on one");
/* The slot's part of a bucket (what an undo record of it saves). */
#define SHMT_SLOT_BYTES (sizeof(struct shmt_bucket) - \
    offsetof(struct shmt_bucket, bk_lens))

/* An item: header, then the key, then the value.  32 bytes, so that an
 * item of a short key and value (up to 32 bytes together) is one line. */
struct shmt_item {
	uint16_t it_magic;
	uint8_t it_order;
	uint8_t it_flags;
	uint32_t it_lens;               /* key length | value length << 11 */
	uint64_t it_next;               /* the next item's link; 0: the end */
	uint64_t it_expire;             /* ns; 0: never */
	uint64_t it_born;               /* ns of the write (for eviction) */
};
_Static_assert(sizeof(struct shmt_item) == 32, "item header is 32 bytes");

/* The two lengths in one word: one load reads both as one writer wrote
 * them. */
#define SHMT_KLEN_BITS 11
_Static_assert(SHMT_KEY_MAX < (1U << SHMT_KLEN_BITS) &&
    SHMT_VALUE_MAX < (1U << (32 - SHMT_KLEN_BITS)), "lengths fit it_lens");

static inline uint32_t
lens_make(uint64_t klen, uint64_t vlen)
{
	return (uint32_t)klen | (uint32_t)vlen << SHMT_KLEN_BITS;
}

static inline uint32_t
lens_klen(uint32_t lens)
{
	return lens & ((1U << SHMT_KLEN_BITS) - 1);
}

static inline uint32_t
lens_vlen(uint32_t lens)
{
	return lens >> SHMT_KLEN_BITS;
}

/* The lengths of IT, for a holder of the lock (one load). */
static inline uint32_t
item_klen(const struct shmt_item *it)
{
	return lens_klen(__atomic_load_n(&it->it_lens, __ATOMIC_RELAXED));
}

static inline uint32_t
item_vlen(const struct shmt_item *it)
{
	return lens_vlen(__atomic_load_n(&it->it_lens, __ATOMIC_RELAXED));
}

/* A free block's header. */
struct shmt_fblock {
	uint32_t fb_magic;
	uint8_t fb_order;
	uint8_t fb_pad[3];
	uint64_t fb_next;               /* offset + 1 */
	uint64_t fb_prev;               /* offset + 1 */
};

/* The process-local, trusted geometry of a store: computed from the
 * creation parameters, never read back from the segment. */
struct shmt_store {
	shmt_t *h;                      /* the handle this geometry belongs to */
	char *base;
	uint32_t shards;
	uint32_t order_max;             /* heap = 64 << order_max */
	uint64_t heap_bytes;
	uint64_t nbuckets;              /* power of two */
	uint64_t index_off, heap_off, stride;
	int eviction;
	int counters;                   /* 1: counters store */
	uint32_t cnt_k;                 /* counters: k of the error bound */
	uint32_t cnt_error_ppm;         /* counters: the error eps (ppm) */
	uint64_t window;                /* counters: window (ns) */
	/* dictionary: the creation limits every writer enforces */
	uint32_t max_key;               /* 1..SHMT_KEY_MAX */
	uint32_t max_value;             /* 0..SHMT_VALUE_MAX */
	uint64_t default_ttl_ms;        /* TTL of a write without one; 0: none */
};

/* Geometry of a store of BYTES heap bytes over SHARDS shards; *SIZE gets
 * the region size (0 when BYTES is 0).  -EINVAL when the parameters cannot
 * make a store; then *WHY (WHY may be NULL) names the rule, as a constant
 * sentence about the byte count or the shard count. */
int shmt__store_geometry(uint64_t bytes, uint32_t shards, int counters,
    struct shmt_store *st, uint64_t *size, const char **why);
/* Initialise every shard of a new store (creation only). */
int shmt__store_init(struct shmt_store *st);
/* Reclaim expired items of both stores; sets *NEXT to the next expiry. */
int shmt__stores_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next);
/* Bytes in allocated blocks of every shard. */
uint64_t shmt__store_used(const struct shmt_store *st);
/* Shift stored times (snapshot restore). */
void shmt__stores_rebase(shmt_t *h, int64_t delta_ns);


/* ---- Under the shard lock (store.c) ---------------------------------------- */

/* Lock SH: 0, 1 when a dead holder's shard was repaired first (the lock is
 * held then too), or a negative error (not held). */
int shmt__shard_lock(const struct shmt_store *st, struct shmt_shard *sh);
/* The same, taken on a segment in any state: the mover's copy. */
int shmt__shard_lock_any(const struct shmt_store *st, struct shmt_shard *sh);
/* A reader found the version odd for long: repair SH when its writer died. */
void shmt__shard_check_owner(const struct shmt_store *st,
    struct shmt_shard *sh);
/* Find KEY in its chain; *LINKP gets the link that points to it (or to the
 * chain's end), NULL when the chain is too long (a cycle).  The item or
 * NULL. */
struct shmt_item *shmt__store_find(const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t hash, const void *key, size_t klen,
    uint64_t **linkp);
/* The same; *LENSP gets the item's lengths as the walk checked them
 * against its block (one load: use these, never a reload). */
struct shmt_item *shmt__store_find_lens(const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t hash, const void *key, size_t klen,
    uint64_t **linkp, uint32_t *lensp);
/* Under the shard lock: link IT (its key's hash HASH), filled in the fresh
 * block at heap offset OFF, where *LINK points, in place of OLD (NULL: a
 * new key, put before what *LINK names; the bucket's filter gains its tag
 * first), with one
 * release store between two bumps of the shard's version (the only store
 * a lock-free reader can see), then free OLD's block.  A writer killed
 * before the store leaves OLD in place and the block allocated but
 * unlinked (repair frees it); after it, the new item. */
void shmt__store_link_new(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t hash, uint64_t *link, uint64_t off, struct shmt_item *it,
    struct shmt_item *old);
/* Under the shard lock: overwrite IT in place with the value VAL (VLEN
 * bytes), the expiry EXPIRE and the write time BORN, when the new item
 * takes IT's block order and IT spans at most SHMT_UNDO_MAX bytes: 1 when
 * done, 0 when it cannot be (the caller copies on write).  IT's bytes go
 * to the shard's undo record first and its version is odd while they
 * change (store.c proves what a reader and a kill -9 see). */
int shmt__store_overwrite(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_item *it, const void *val, size_t vlen, uint64_t expire,
    uint64_t born);
/* Its first steps, for IT of at most SHMT_UNDO_MAX bytes: save IT in the
 * undo record, arm it, make the version odd.  (Apart for the test of a
 * writer killed half way.) */
void shmt__store_overwrite_begin(const struct shmt_store *st,
    struct shmt_shard *sh, struct shmt_item *it);
/* Unlink the item *LINK points to and free its block. */
void shmt__store_unlink(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t *link, struct shmt_item *it);
/* Whole-shard walks for expired items this process made (tests read it). */
extern uint64_t shmt__store_walks;
/* Free every expired item of SH: how many; *NEXT gets the next expiry if
 * earlier.  The whole walk passes at most chain_bound() items: past that
 * (damage) it stops and sets *DAMAGED; a whole walk sets the reap hint. */
uint64_t shmt__store_reap(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t now, uint64_t *next, int *damaged);
/* A block for an item of BYTES, evicting when the store allows it; KEEP is
 * never evicted.  The heap offset, or UINT64_MAX and *ERR set: -ENOSPC, or
 * SHMT_ECORRUPT (the shard's chains hold more items than its heap can). */
uint64_t shmt__store_alloc(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t bytes, uint64_t now, const struct shmt_item *keep, int *err);

/* The buddy allocator: a block of ORDER (64 << ORDER bytes), or
 * UINT64_MAX; give one back. */
uint64_t shmt__blk_alloc(const struct shmt_store *st, struct shmt_shard *sh,
    uint32_t order);
void shmt__blk_free(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t off, uint32_t order);
/* Rebuild SH's chains and free lists after a writer died (store.c says
 * how): 0 or -ENOMEM. */
int shmt__shard_repair(const struct shmt_store *st, struct shmt_shard *sh);

/* ---- Block bitmaps (repair and check) ----------------------------------- */

int shmt__bit_get(const uint64_t *bm, uint64_t i);
void shmt__bit_set(uint64_t *bm, uint64_t i);
/* Mark LEN bytes at OFF (64-byte units): 0 when one was marked before. */
int shmt__mark_span(uint64_t *bm, uint64_t off, uint64_t len);
/* 1 when the N units from U are all unmarked. */
int shmt__span_clear(const uint64_t *bm, uint64_t u, uint64_t n);
/* A free-list link names a block of ORDER inside the heap. */
int shmt__fl_link_ok(const struct shmt_store *st, uint64_t link,
    uint32_t order);

/* ---- Provided by the counters ------------------------------------------- */

/* The counters' calls the store makes (eviction, rebasing, item checks)
 * are declared in counters.h, which the store's sources include. */

/* ---- The reap hint (store.c, "Reaping") ------------------------------------ */

/* An item of SH now expires at EXPIRE (0: never); under SH's lock, before
 * the store that makes it so is published: the hint's time comes down to
 * it. */
static inline void
reap_hint_lower(struct shmt_shard *sh, uint64_t expire)
{
	if (expire != 0 && expire < sh->ds_reap_at)
		sh->ds_reap_at = expire;
}

/* This writer moved SH's version on from SEQ (even) to what it is now,
 * linking or rewriting an item of expiry EXPIRE (0: never, or none) or
 * unlinking one: a hint that held at SEQ holds now.  Under SH's lock. */
static inline void
reap_hint_follow(struct shmt_shard *sh, uint64_t seq, uint64_t expire)
{
	reap_hint_lower(sh, expire);
	if (sh->ds_reap_seq == seq)
		sh->ds_reap_seq = sh->ds_seq;
}

/* ---- Views of a shard (no check: the geometry is trusted) ---------------- */

static inline struct shmt_shard *
shard_at(const struct shmt_store *st, uint32_t i)
{
	return (struct shmt_shard *)(st->base + (uint64_t)i * st->stride);
}

static inline struct shmt_bucket *
shard_index(const struct shmt_store *st, struct shmt_shard *sh)
{
	return (struct shmt_bucket *)((char *)sh + st->index_off);
}

/* The head link of bucket B. */
static inline uint64_t *
shard_head(const struct shmt_store *st, struct shmt_shard *sh, uint64_t b)
{
	return &shard_index(st, sh)[b].bk_head;
}

static inline char *
shard_heap(const struct shmt_store *st, struct shmt_shard *sh)
{
	return (char *)sh + st->heap_off;
}

/* ---- Hashing ---------------------------------------------------------------- */

/* Keys come from outside: their hash is keyed with the segment's secret
 * (hash.h), so no one can aim keys at one shard or one chain. */
static inline uint64_t
key_hash(const shmt_t *h, const void *key, size_t len)
{
	return shmt__hash64(&h->key, key, len);
}

static inline uint32_t
shard_of(const struct shmt_store *st, uint64_t hash)
{
	return (uint32_t)(hash >> 48) & (st->shards - 1);
}

static inline uint64_t
bucket_of(const struct shmt_store *st, uint64_t hash)
{
	return hash & (st->nbuckets - 1);
}

/* The tag of a key: 32 bits of its hash, mixed from all 64 (the bits that
 * pick the shard and the bucket are the same for every key of a chain, so
 * a plain slice of the hash would waste some of them). */
static inline uint32_t
hash_tag(uint64_t hash)
{
	return (uint32_t)((hash * 0x9e3779b97f4a7c15ULL) >> 32);
}

/* The bits a tag sets in a bucket's filter: two of 32. */
static inline uint32_t
tag_bits(uint32_t tag)
{
	return (1U << (tag & 31)) | (1U << ((tag >> 5) & 31));
}

/* ---- Links ------------------------------------------------------------------ */

/*
 * A link names an item: its 64-byte unit in the heap + 1 in the low 32 bits
 * (a heap holds at most 2^30 units), 0 for the end of a chain, and the
 * item's tag in the high 32 bits, so that a walk compares the key only of
 * an item whose tag matches.  A link is one 8-byte word: one store links or
 * unlinks an item, as before.
 */
static inline uint64_t
link_make(uint64_t off, uint32_t tag)
{
	return (uint64_t)tag << 32 | (off / 64 + 1);
}

/* The link names an item (0: the chain ends here). */
static inline uint32_t
link_unit(uint64_t link)
{
	return (uint32_t)link;
}

/* The heap offset of the item a link names (link_unit() != 0). */
static inline uint64_t
link_off(uint64_t link)
{
	return ((uint64_t)link_unit(link) - 1) * 64;
}

static inline uint32_t
link_tag(uint64_t link)
{
	return (uint32_t)(link >> 32);
}

/* Coarse access time for eviction: about a second per unit (2^30 ns).  A
 * get stores it only when it changed, so a finer unit would make nearly
 * every get of a rarely read key write a cache line; a second is as fine as
 * an approximation of LRU needs (Redis's LRU clock has the same unit). */
static inline uint32_t
coarse(uint64_t now)
{
	return (uint32_t)(now >> 30);
}

/* ---- Items ------------------------------------------------------------------ */

static inline uint32_t
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
static inline struct shmt_item *
item_at_lens(const struct shmt_store *st, char *heap, uint64_t off,
    uint32_t *lensp)
{
	struct shmt_item *it;
	uint32_t order, lens, klen, vlen;

	if (off >= st->heap_bytes || off % 64 != 0)
		return NULL;
	it = (struct shmt_item *)(heap + off);
	if (__atomic_load_n(&it->it_magic, __ATOMIC_RELAXED) != SHMT_IT_ALLOC)
		return NULL;
	order = __atomic_load_n(&it->it_order, __ATOMIC_RELAXED);
	lens = __atomic_load_n(&it->it_lens, __ATOMIC_RELAXED);
	klen = lens_klen(lens);
	vlen = lens_vlen(lens);
	if (order > st->order_max || (off & ((64ULL << order) - 1)) != 0 ||
	    klen == 0 || klen > SHMT_KEY_MAX || vlen > SHMT_VALUE_MAX ||
	    sizeof(*it) + klen + vlen > (64ULL << order))
		return NULL;
	*lensp = lens;
	return it;
}

static inline struct shmt_item *
item_at(const struct shmt_store *st, char *heap, uint64_t off)
{
	uint32_t lens;

	return item_at_lens(st, heap, off, &lens);
}

static inline const char *
item_key(const struct shmt_item *it)
{
	return (const char *)(it + 1);
}

static inline char *
item_val(struct shmt_item *it)
{
	return (char *)(it + 1) + item_klen(it);
}

/* ---- Lookups ------------------------------------------------------------------- */

static inline int
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
static inline uint64_t
chain_bound(const struct shmt_store *st)
{
	return st->heap_bytes / 64;
}

static inline int
expired(const struct shmt_item *it, uint64_t now)
{
	return it->it_expire != 0 && it->it_expire <= now;
}

/* Copy N bytes, for the short keys and values of most calls: two
 * overlapping fixed-size moves the compiler inlines, where a call to
 * memcpy costs more than the copy (every byte written lies in [0, N)). */
static inline void
copy_short(void *dst, const void *src, size_t n)
{
	char *d = dst;
	const char *s = src;
	uint64_t a, b;
	uint32_t x, y;

	if (n >= 8 && n <= 16) {
		memcpy(&a, s, 8);
		memcpy(&b, s + n - 8, 8);
		memcpy(d, &a, 8);
		memcpy(d + n - 8, &b, 8);
	} else if (n >= 4 && n < 8) {
		memcpy(&x, s, 4);
		memcpy(&y, s + n - 4, 4);
		memcpy(d, &x, 4);
		memcpy(d + n - 4, &y, 4);
	} else if (n > 0) {
		memcpy(d, s, n);
	}
}

/* The N bytes at A and B are equal; short keys (4 to 16 bytes) without a
 * call to memcmp, as copy_short. */
static inline int
same_bytes(const void *a, const void *b, size_t n)
{
	const char *p = a, *q = b;
	uint64_t a0, a1, b0, b1;
	uint32_t x0, x1, y0, y1;

	if (n >= 8 && n <= 16) {
		memcpy(&a0, p, 8);
		memcpy(&a1, p + n - 8, 8);
		memcpy(&b0, q, 8);
		memcpy(&b1, q + n - 8, 8);
		return ((a0 ^ b0) | (a1 ^ b1)) == 0;
	}
	if (n >= 4 && n < 8) {
		memcpy(&x0, p, 4);
		memcpy(&x1, p + n - 4, 4);
		memcpy(&y0, q, 4);
		memcpy(&y1, q + n - 4, 4);
		return ((x0 ^ y0) | (x1 ^ y1)) == 0;
	}
	return memcmp(p, q, n) == 0;
}

/* IT, whose lengths are LENS, holds KEY (KLEN bytes); the caller compared
 * the tags. */
static inline int
item_is(const struct shmt_item *it, uint32_t lens, const void *key,
    size_t klen)
{
	return lens_klen(lens) == klen && same_bytes(item_key(it), key, klen);
}

/* ---- Slots ------------------------------------------------------------------- */

/* ds_undo of an overwrite of a bucket's slot: this bit, and the bucket's
 * index + 1 below it (an item's heap offset + 1 never has it). */
#define SHMT_UNDO_SLOT (1ULL << 63)

static inline struct shmt_bucket *
bucket_at(const struct shmt_store *st, struct shmt_shard *sh, uint64_t b)
{
	return &shard_index(st, sh)[b];
}

/* Lengths LENS, read from a slot, name an item a slot holds: a key of at
 * least a byte, key and value within SHMT_SLOT_DATA. */
static inline int
slot_lens_ok(uint32_t lens)
{
	uint32_t k = lens_klen(lens), v = lens_vlen(lens);

	return k != 0 && v <= SHMT_SLOT_DATA && k + v <= SHMT_SLOT_DATA;
}

/* An item a slot holds is one an item of one 64-byte block would be. */
_Static_assert(sizeof(struct shmt_item) + SHMT_SLOT_DATA == 64,
    "a slot holds what one block does");

/* An item of KLEN and VLEN bytes goes in a slot (of the dictionary's
 * store: the counters' items never do). */
static inline int
slot_fits(const struct shmt_store *st, size_t klen, size_t vlen)
{
	return !st->counters && klen + vlen <= SHMT_SLOT_DATA;
}

/* A copy of a slot, word by word as a reader or a writer loads it. */
struct slot_copy {
	uint32_t lens;                  /* 0: empty (nothing else loaded) */
	uint32_t tag;
	uint64_t expire;
	uint64_t data[SHMT_SLOT_DATA / 8];
};

/* Copy BK's slot into *C.  Racy without the lock: a reader checks the
 * version afterwards; the lengths are one load and checked, so a torn
 * copy is never read past its words. */
static inline void
slot_load(const struct shmt_bucket *bk, struct slot_copy *c)
{
	uint32_t lens = __atomic_load_n(&bk->bk_lens, __ATOMIC_RELAXED);

	c->lens = 0;
	if (lens == 0 || !slot_lens_ok(lens))
		return;
	c->lens = lens;
	c->tag = __atomic_load_n(&bk->bk_tag, __ATOMIC_RELAXED);
	c->expire = __atomic_load_n(&bk->bk_expire, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i * 8 < lens_klen(lens) + lens_vlen(lens); i++)
		c->data[i] = __atomic_load_n(&bk->bk_data[i], __ATOMIC_RELAXED);
}

static inline const char *
slot_key(const struct slot_copy *c)
{
	return (const char *)c->data;
}

static inline const char *
slot_val(const struct slot_copy *c)
{
	return (const char *)c->data + lens_klen(c->lens);
}

/* The copy C holds KEY (KLEN bytes, tag TAG). */
static inline int
slot_holds(const struct slot_copy *c, uint32_t tag, const void *key, size_t klen)
{
	return c->lens != 0 && c->tag == tag && lens_klen(c->lens) == klen &&
	    same_bytes(slot_key(c), key, klen);
}

/* Copy bucket B's slot of SH into *C (repair, under the lock; check, a
 * racy scan that its version check validates).  0: empty; 1: an item
 * that belongs there; -1: damage (lengths no slot holds, an item in the
 * counters' store, or a key whose hash leads to another bucket or whose
 * tag is another's). */
static inline int
slot_examine(const struct shmt_store *st, struct shmt_shard *sh, uint64_t b,
    struct slot_copy *c)
{
	const struct shmt_bucket *bk = bucket_at(st, sh, b);
	uint64_t hash;

	/* One load of the lengths (slot_load's): a racy scan of the check
	 * decides on what it copied. */
	slot_load(bk, c);
	if (c->lens == 0)
		return __atomic_load_n(&bk->bk_lens, __ATOMIC_RELAXED) == 0 ?
		    0 : -1;
	if (st->counters)
		return -1;
	hash = key_hash(st->h, slot_key(c), lens_klen(c->lens));
	if (bucket_of(st, hash) != b || shard_at(st, shard_of(st, hash)) != sh ||
	    c->tag != hash_tag(hash))
		return -1;
	return 1;
}

/* Under the shard's lock (store.c): a new item in the empty slot of bucket
 * B; the slot's item takes a new value and expiry (both fit the slot);
 * the slot is emptied.  Each makes the version odd around its stores, as
 * a link does (store.c proves what a reader and a kill -9 see). */
void shmt__slot_fill(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b, uint64_t hash, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t expire);
void shmt__slot_overwrite(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b, const void *val, size_t vlen, uint64_t expire);
void shmt__slot_clear(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b);
/* An overwrite's first steps: save the slot in the undo record, arm it,
 * make the version odd.  (Apart for the test of a writer killed half
 * way.) */
void shmt__slot_overwrite_begin(const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t b);

/* ---- Walking a chain ------------------------------------------------------- */

/*
 * A walk along one chain of a shard, the one way every walk goes: from the
 * bucket's head, link by link, each link checked by item_at(), and at most
 * chain_bound() items, so that a cycle in a damaged chain ends the walk.
 * Links are loaded relaxed, so a lock-free reader walks exactly as a writer
 * does (its version check, seq_read(), says whether what it saw was
 * whole).  A writer that unlinks the current item goes on from the same
 * link: it calls chain_item() again without chain_next().
 */
struct chain {
	const struct shmt_store *st;
	char *heap;
	uint64_t *link;          /* the link that names the current item */
	uint64_t left;           /* items the walk may still pass */
	int cut;                 /* 1: stopped at chain_bound() (a cycle) */
	uint64_t lv;             /* the value of *link chain_item() read */
	uint32_t lens;           /* the current item's lengths, validated */
};

static inline void
chain_start(struct chain *c, const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t b)
{
	c->st = st;
	c->heap = shard_heap(st, sh);
	c->link = shard_head(st, sh, b);
	c->left = chain_bound(st);
	c->cut = 0;
}

/* The item C's link names, or NULL: at the chain's end, at a link that
 * names no valid item (for a reader without the lock: moved under it, the
 * version says so), or past chain_bound() items (then C->cut is set).
 * C->lv gets the link, C->lens the item's lengths as item_at() checked
 * them. */
static inline struct shmt_item *
chain_item(struct chain *c)
{
	uint64_t l = __atomic_load_n(c->link, __ATOMIC_RELAXED);
	struct shmt_item *it;

	c->lv = l;
	if (link_unit(l) == 0 || (it = item_at_lens(c->st, c->heap,
	    link_off(l), &c->lens)) == NULL)
		return NULL;
	if (c->left == 0) {
		c->cut = 1;
		return NULL;
	}
	c->left--;
	return it;
}

/* Step past IT, the item chain_item() returned. */
static inline void
chain_next(struct chain *c, struct shmt_item *it)
{
	c->link = &it->it_next;
}

/* The first item from C's link on that holds KEY (KLEN bytes, hash HASH),
 * or NULL as chain_item() ends; C's link then names the item, or the end.
 * Only an item whose link carries the key's tag has its key compared. */
static inline struct shmt_item *
chain_find_key(struct chain *c, uint64_t hash, const void *key, size_t klen)
{
	uint32_t tag = hash_tag(hash);
	struct shmt_item *it;

	while ((it = chain_item(c)) != NULL &&
	    (link_tag(c->lv) != tag || !item_is(it, c->lens, key, klen)))
		chain_next(c, it);
	return it;
}

/* ---- Reads (no lock) --------------------------------------------------------- */

/* How long a reader waits for a version held odd: a writer holds it odd
 * for one store, but may be descheduled right there (more processes than
 * cores), so the wait is bounded by time, not by a spin count. */
#define READ_WAIT_NS 200000000ULL


/* The wait of seq_begin for a version held odd (store.c). */
uint64_t shmt__seq_wait(const struct shmt_store *st, struct shmt_shard *sh);

/* The version, even, to read the shard under; while a writer holds it
 * odd, wait (shmt__seq_wait: spin, then yield, the handle's sleep hooks
 * around the yields; at the first yield and every 256 after, check
 * whether the writer died).  Returns the even version, or 1 (odd) when
 * READ_WAIT_NS ran out. */
static inline uint64_t
seq_begin(const struct shmt_store *st, struct shmt_shard *sh)
{
	uint64_t s = __atomic_load_n(&sh->ds_seq, __ATOMIC_ACQUIRE);

	if (__builtin_expect((s & 1) == 0, 1))
		return s;
	return shmt__seq_wait(st, sh);
}

/* After the copy: the version unchanged means the copy is whole.  The
 * acquire fence keeps every load of the copy before the version's load. */
static inline int
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

/* Bounded retries of an optimistic read.  A write holds the version odd
 * only for one store, so a reader retries only when a write linked or
 * unlinked in its shard during its copy. */
#define READ_RETRIES 4096

/*
 * The optimistic read, written once: wait for an even version, run COPY
 * (ARG) (which reads SH without the lock and must not act on what it read
 * yet), and keep its result only when the version did not move meanwhile.
 * Returns COPY's result from a whole copy, or -EAGAIN when a writer held
 * the version odd past READ_WAIT_NS or READ_RETRIES copies were torn.
 * Inlined with a constant COPY, the call is a direct one.
 */
static inline int
seq_read(const struct shmt_store *st, struct shmt_shard *sh,
    int (*copy)(void *arg), void *arg)
{
	for (unsigned t = 0; t < READ_RETRIES; t++) {
		uint64_t s = seq_begin(st, sh);
		int rc;

		if (s & 1)
			return -EAGAIN;
		rc = copy(arg);
		if (seq_valid(sh, s))
			return rc;
	}
	return -EAGAIN;
}

static inline struct shmt_fblock *
fb_at(char *heap, uint64_t off)
{
	return (struct shmt_fblock *)(heap + off);
}

#endif /* SHMT_STORE_H */
