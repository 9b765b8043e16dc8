/* This file is private to libshmthrottle: the windowed counters of
 * shmt_hit(), kept in a store (dict.h). */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_COUNTERS_H
#define SHMT_COUNTERS_H

#include "dict.h"

/* The head of a counter item's value (counters.c says what each field
 * means and how the item is laid out): 8-byte aligned after the key. */
struct shmt_cnt_hdr {
	uint64_t ch_shape;      /* magic | slots << 16 | levels << 32 | pad << 40 */
	uint64_t ch_state;      /* 0 at rest; a writer's mark and journal */
	uint64_t ch_total;      /* hits in all buckets kept */
	uint64_t ch_top;        /* highest level holding a bucket */
	uint64_t ch_floor;      /* no hit kept is older than this (ns) */
};
_Static_assert(sizeof(struct shmt_cnt_hdr) == 40, "counter head: 40 bytes");

/* The version of the counters' value format, in the format word. */
#define SHMT_CNT_FORMAT 2

/* k of the error EPS_PPM (parts per million): ceil(2 / (3 eps)). */
static inline uint32_t
shmt__cnt_k(uint32_t eps_ppm)
{
	return (2000000U + 3U * eps_ppm - 1) / (3U * eps_ppm);
}

/* IT's value has the shape of a counter of ST (repair, check, update). */
int shmt__cnt_item_ok(const struct shmt_store *st,
    const struct shmt_item *it, uint32_t lens);
/* Under SH's lock: evict the counters hit least recently, in a batch;
 * EXCEPT is never chosen.  Returns how many were evicted, or SHMT_ECORRUPT
 * when a walk of the shard met more items than its heap holds (damage: it
 * stops there). */
int shmt__cnt_evict(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except);
/* Shift every time counter IT holds by D ns, clamped to [0, UINT64_MAX]
 * (snapshot restore); an item not of a counter's shape is left alone.
 * LENS: IT's lengths as item_at_lens() checked them (here and below: the
 * lengths are read once, and never again after that check). */
void shmt__cnt_rebase(const struct shmt_store *st, struct shmt_item *it,
    uint32_t lens, int64_t d);
/* Report to C each problem of counter item IT, whose lengths are LENS, at
 * heap offset OFF: its shape, its rings, and at rest a header that
 * contradicts its buckets (a total or top level that is not theirs, times
 * out of order or in the future, a floor newer than the oldest bucket). */
void shmt__cnt_check_item(const struct shmt_store *st,
    const struct shmt_item *it, uint32_t lens, struct shmt_chk *c,
    const char *who, uint64_t off);

/* Snapshot restore, in a segment not yet shared: add counter KEY of H with
 * the value VAL of VLEN bytes as an image holds it (the counters' own
 * bytes, never read outside this module) and expiry EXPIRE (already on
 * this boot's clock), then move its times by DELTA_NS as
 * shmt__cnt_rebase does.  0; -EINVAL when VAL is not a counter's value
 * (its shape, or a ring outside its slots: nothing is added); -EBADMSG
 * when its header contradicts its buckets, or a bucket lies past now once
 * moved (nothing is added); -EEXIST,
 * -ENOSPC or another negative errno from the store. */
int shmt__cnt_restore(shmt_t *h, const void *key, size_t klen,
    const void *val, size_t vlen, uint64_t expire, int64_t delta_ns);

#endif /* SHMT_COUNTERS_H */
