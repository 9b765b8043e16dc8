/* This file is private to libshmthrottle: the analyzer's summaries. */
/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's summaries as they lie in its region: a summary of a
 * stripe and sub-window, its groups of counters, its piece marks, the name
 * table, and the slices of a sub-window.  Shared by the updates
 * (analyzer.c, where the layout and the argument are written out) and the
 * queries and snapshots (topkeys.c).
 */
#ifndef SHMT_AN_SUM_H
#define SHMT_AN_SUM_H

#include "analyzer.h"

#include <stdint.h>

/* The largest power of two at most V (0 for 0). */
static inline uint64_t
pow2_floor(uint64_t v)
{
	return v == 0 ? 0 : 1ULL << (63 - __builtin_clzll(v));
}

/* A group of P counters (P a multiple of 8): P 16-bit tags, then P counts,
 * the hint and the floor, on whole cache lines; its P hashes lie apart.
 * The tags start on a 64-byte boundary: the region does (its offset is a
 * multiple of SHMT_LINE, checked at open), and so do the summaries
 * (sums_off, sum_size), their 256-byte header and each group. */
static inline uint32_t
tag_bytes_of(uint32_t p)
{
	return (2 * p + 15) & ~15U;
}

static inline uint32_t
meta_bytes_of(uint32_t p)
{
	return (tag_bytes_of(p) + 8 * p + 16 + 63) & ~63U;
}

static inline struct shmt_an_sum *
sum_at(const struct shmt_an *an, uint32_t ring, uint32_t stripe)
{
	return (struct shmt_an_sum *)(an->base + an->sums_off +
	    ((uint64_t)ring * an->stripes + stripe) * an->sum_size);
}

/* Group G of summary S: its tags, counts and hashes. */
struct group {
	uint16_t *tags;
	uint64_t *cnt, *hash;
	uint64_t *hint;         /* no free counter below it (see below) */
	uint64_t *floor;        /* no counter is free while d is under it */
};

/* The same for groups of P counters (P a constant where the caller can
 * make it one: the sizes below then fold away). */
static inline __attribute__((always_inline)) struct group
group_at_p(const struct shmt_an *an, struct shmt_an_sum *s, uint32_t g,
    uint32_t p)
{
	uint32_t tag_bytes = tag_bytes_of(p), meta_bytes = meta_bytes_of(p);
	char *m = (char *)(s + 1) + (uint64_t)g * meta_bytes;

	return (struct group){
		.tags = (uint16_t *)m,
		.cnt = (uint64_t *)(m + tag_bytes),
		.hint = (uint64_t *)(m + tag_bytes) + p,
		.floor = (uint64_t *)(m + tag_bytes) + p + 1,
		.hash = (uint64_t *)((char *)s + an->hashes_off) +
		    (uint64_t)g * p,
	};
}

static inline struct group
group_at(const struct shmt_an *an, struct shmt_an_sum *s, uint32_t g)
{
	return group_at_p(an, s, g, an->probe);
}

static inline struct shmt_an_name *
names(const struct shmt_an *an)
{
	return (struct shmt_an_name *)(an->base + an->names_off);
}

/* Summary S's piece marks (an->pieces of them). */
static inline struct shmt_an_mark *
pieces_of(const struct shmt_an *an, struct shmt_an_sum *s)
{
	return (struct shmt_an_mark *)((char *)s + an->marks_off);
}

/* Summary S's crossing records (an->recs of them). */
static inline uint64_t *
recs_of(const struct shmt_an *an, struct shmt_an_sum *s)
{
	return (uint64_t *)(void *)((char *)s + an->recs_off);
}

/* The slice of T in sub-window [S, E): floor((T - S) SLICES / (E - S)). */
static inline uint32_t
slice_of(uint64_t S, uint64_t E, uint64_t t)
{
	return (uint32_t)((unsigned __int128)(t - S) * SHMT_AN_SLICES / (E - S));
}

/* The first moment of slice K: slice_of(t) >= K exactly when t >= this. */
static inline uint64_t
slice_start(uint64_t S, uint64_t E, uint64_t k)
{
	return S + (uint64_t)(((unsigned __int128)(E - S) * k +
	    SHMT_AN_SLICES - 1) / SHMT_AN_SLICES);
}

/* The name kept for HASH in the name table, into K: 1, or 0 when another
 * key's name is there or the entry is being written. */
int shmt__an_name_get(const struct shmt_an *an, uint64_t hash,
    shmt_hotkey_t *k);

#endif /* SHMT_AN_SUM_H */
