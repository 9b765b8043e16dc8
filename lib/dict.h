/* This file is private to libshmthrottle: the sharded store behind the
 * dictionary and the windowed counters. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_DICT_H
#define SHMT_DICT_H

#include "segment.h"

#include <stdalign.h>
#include <stdint.h>

/*
 * A store is a region of shards.  Each shard is
 *   [struct shmt_shard][index: nbuckets chain heads][atime: nbuckets u32]
 *   [heap: 2^k bytes of buddy blocks, 64 bytes at least]
 * Items live in heap blocks and chain from the index by heap offset + 1
 * (0 ends a chain).  Offsets are relative to the shard's heap and checked
 * against it before every use.
 */

#define SHMT_BLOCK_MIN_SHIFT 6          /* 64-byte blocks at least */
#define SHMT_ORDER_MAX 40

#define SHMT_IT_ALLOC 0x4d455449U       /* "ITEM" */
#define SHMT_IT_FREE 0x45455246U        /* "FREE" */

struct shmt_shard {
	struct shmt_lock ds_lock;       /* writers */
	uint64_t ds_items;
	uint64_t ds_used;               /* bytes in allocated blocks */
	uint64_t ds_evictions;
	uint64_t ds_expirations;
	uint64_t ds_repairs;
	uint64_t ds_hand;               /* eviction sampling position */
	uint64_t ds_free[SHMT_ORDER_MAX + 1]; /* free lists: offset + 1 */
	/* The version: odd while a writer relinks a chain.  Alone on its line
	 * because every reader loads it twice. */
	alignas(SHMT_LINE) uint64_t ds_seq;
};

/* An item: header, then the key, then the value. */
struct shmt_item {
	uint32_t it_magic;
	uint8_t it_order;
	uint8_t it_flags;
	uint16_t it_pad;
	uint32_t it_klen;
	uint32_t it_vlen;
	uint64_t it_next;               /* next in chain: offset + 1, 0: end */
	uint64_t it_hash;
	uint64_t it_expire;             /* ns; 0: never */
	uint64_t it_born;               /* ns of the write (for eviction) */
};
_Static_assert(sizeof(struct shmt_item) == 48, "item header is 48 bytes");

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
	uint64_t index_off, atime_off, heap_off, stride;
	int eviction;
	int counters;                   /* 1: counters store */
	uint32_t subw;                  /* counters: sub-windows */
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
/* The key whose hash is HASH, for the analyzer's report: 0, -ENOENT or
 * -EAGAIN. */
int shmt__dict_key_by_hash(shmt_t *h, uint64_t hash, void *buf, size_t cap,
    size_t *klen);
/* Bytes in allocated blocks of every shard. */
uint64_t shmt__store_used(const struct shmt_store *st);
/* Shift stored times (snapshot restore). */
void shmt__stores_rebase(shmt_t *h, int64_t delta_ns);

/* Store helpers for the counters (counters.c); each as its static twin in
 * dict.c.  Lock KEY's shard of ST (0 or -errno; then *HASH and *SHP). */
int shmt__store_lock_key(shmt_t *h, const struct shmt_store *st,
    const void *key, size_t klen, uint64_t *hash, struct shmt_shard **shp);
/* Under the lock: KEY's item or NULL; *LINKP the link to it (or to the
 * chain's end), NULL when the chain loops. */
struct shmt_item *shmt__store_find(const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t hash, const void *key, size_t klen,
    uint64_t **linkp);
/* Under the lock: add KEY with VAL (copy, link, as shmt_add); 0 or -errno. */
int shmt__store_add(shmt_t *h, const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t hash, const void *key, size_t klen,
    const void *val, size_t vlen, uint64_t expire);
/* Under the lock: unlink the item *LINK points to and free it. */
void shmt__store_unlink(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t *link, struct shmt_item *it);
/* The valid item at heap offset OFF of SH, or NULL. */
struct shmt_item *shmt__store_item_at(const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t off);
/* SH's chain heads. */
uint64_t *shmt__store_index(const struct shmt_store *st,
    struct shmt_shard *sh);

#endif /* SHMT_DICT_H */
