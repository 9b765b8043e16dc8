/* This file is private to libshmthrottle: the hot-key analyzer's layout. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_ANALYZER_H
#define SHMT_ANALYZER_H

#include "segment.h"

#include <stddef.h>
#include <stdint.h>

/*
 * The region: stripe owners, the overflow lock, then rings x stripes
 * summaries (sub-window r % rings, stripe p), then the name table.
 *
 *   owner    u64 (pid << 32 | handle uid), 0: free; u64 start time
 *   summary  [header: am_ver, am_id, am_d, am_n, am_slice, am_seq,
 *             am_next, am_step, am_pieces, am_mver, am_tmax, am_rlog,
 *             5 slice marks; 256 bytes]
 *            [groups x {probe u16 tags, probe u64 counter words
 *             (count << 16 | mark number), hint, floor} on whole lines]
 *            [groups x probe u64 hashes]
 *            [pieces x piece mark {mk_t, mk_d, mk_n, mk_sq}]
 *            [recs x crossing record u64 (time << (sbits + 12) |
 *             place << 12 | count >> shift)]
 *   name     {an_hash, an_klen, an_kind, an_kept, an_rank, an_check,
 *             an_bytes[40]}; a key has two places (shmt__an_name_slots)
 *
 * A key's counters are one group: probe counters (as many as a summary
 * holds, up to SHMT_AN_PROBE_MAX; the default 1 MiB gives one group of 128
 * per summary) whose tags (the top 16 bits of their keys' hashes) are
 * compared sixteen at a time, so a request that misses reads the tags, its
 * group's header words and nothing else; a count and a hash are read only
 * when a tag matches.
 *
 * A summary is written by the one thread that owns its stripe, so its
 * words change by plain atomic stores.  am_id is the full sub-window
 * number; am_ver is odd while the owner clears the summary for a new
 * sub-window.  Readers take a count, its hash, then d, and keep the pair
 * when the count is over that d; they check the version before and after
 * reading the summary.  The top bit of a
 * hash tells a client id (1) from a dictionary key (0).
 */

#define SHMT_AN_STRIPES 16U      /* owned stripes; one more is shared */
#define SHMT_AN_NAME_BYTES 40U

struct shmt_an_owner {
	uint64_t ao_owner;      /* pid << 32 | handle id; 0: free; the top bit
	                         * while the claim is under way (analyzer.c) */
	uint64_t ao_start;      /* the owner's process start time */
};

/* A sub-window is cut into SHMT_AN_SLICES slices of time; a summary marks
 * d and n as they were when its first request of each slice came: slice k
 * of sub-window [S, E) starts at S + ceil(k (E - S) / SHMT_AN_SLICES).  It
 * is also cut into pieces by weight (n + (probe + 1) d): a piece mark is
 * taken before a request that brings the piece's weight to am_step, or to
 * a quarter of it with a time later than the last one counted; when the
 * summary's an->pieces piece marks are all used, every other one is
 * dropped and the step doubles.  Each mark has a sequence number, and each
 * counter keeps the sequence number of the latest mark at its last count
 * (its low SHMT_AN_SEQ_BITS bits), so a query knows whether a key was
 * counted after a mark at all.  See the top of analyzer.c. */
#define SHMT_AN_SLICES 6U
#define SHMT_AN_SEQ_BITS 16      /* a counter: count << 16 | seq */
#define SHMT_AN_SEQ_MAX 0xffffULL  /* a saturated seq: "any mark" */
#define SHMT_AN_PIECES_MIN 4U    /* piece marks per summary, at least
                                  * (none when the counters need the room) */
#define SHMT_AN_PIECES_MAX 64U   /* and at most (an even number) */

/* A mark: d, n and the sequence number as they were before the request
 * that took it.  Slice marks: every request counted before one is before
 * its slice's first moment, every one after at or after it (readers
 * compute that moment; mk_t holds the time of the request that took it).
 * Piece marks: every request counted after one is at or after mk_t, every
 * one before it at or before mk_t - gap, gap = mk_sq >> 32 (the latest
 * time counted before it, clamped: a gap over 2^32 - 1 ns is stored as
 * that, which only makes the bound later).  Times are the clock's ns
 * (shmt_set_clock's, CLOCK_MONOTONIC by default); a sequence number is
 * mk_sq's low 32 bits. */
struct shmt_an_mark {
	uint64_t mk_t;
	uint64_t mk_d;
	uint64_t mk_n;
	uint64_t mk_sq;          /* gap << 32 | sequence number */
};

struct shmt_an_sum {
	uint64_t am_ver;
	uint64_t am_id;
	uint64_t am_d;
	uint64_t am_n;
	uint64_t am_slice;       /* slice marks 1 .. am_slice are set */
	uint64_t am_seq;         /* the latest mark's sequence number */
	uint64_t am_next;        /* the weight at which a piece mark is
	                          * considered next */
	uint64_t am_step;        /* the weight of a piece, at most */
	uint64_t am_pieces;      /* piece marks in use */
	uint64_t am_mver;        /* odd while the piece marks are thinned */
	uint64_t am_tmax;        /* the latest time counted at (readers: a
	                          * summary all before the exact window) */
	uint64_t am_rlog;        /* the crossing log: version << 32 | shift
	                          * << 24 | records in use (see below) */
	struct shmt_an_mark am_smark[SHMT_AN_SLICES - 1]; /* [k - 1]: slice k */
	/* Then the groups, the hashes, an->pieces piece marks (struct
	 * shmt_an_mark) in the order taken, and an->recs crossing records. */
};
_Static_assert(sizeof(struct shmt_an_sum) == 256, "a header is four lines");

/*
 * The crossing log: a counter's count is never lowered while its summary
 * holds its sub-window (a claim raises it to d + 1, over every count the
 * counter held before), so it is a clock of its place.  Each time a count
 * (the count << 16 word's count) reaches a multiple of 2^shift by a
 * request of the key that holds it, the owner appends a record: that
 * time and (place, count >> shift).  When the log is full, or a
 * count >> shift would not fit, only the records of even multiples are
 * kept and shift grows.  A record is 8 bytes: its time less the
 * sub-window's start in ns (the rest of the word), the place (an->rec_sbits
 * bits), count >> shift (SHMT_AN_REC_QBITS bits).  A geometry whose
 * sub-windows are too long for the time's bits keeps no records.  am_rlog:
 * the version (odd while records are dropped), shift (SHMT_AN_REC_OFF:
 * no records are kept in this summary, and readers use none), and how
 * many are in use.  See the top of analyzer.c ("Crossings").
 */
#define SHMT_AN_REC_QBITS 12
#define SHMT_AN_REC_QMAX ((1ULL << SHMT_AN_REC_QBITS) - 1)
#define SHMT_AN_REC_SHIFT_MAX 47        /* a count is below 2^48 */
#define SHMT_AN_REC_OFF 63U             /* shift: no records */
#define SHMT_AN_REC_MAX 256U            /* records per summary, at most */

static inline uint64_t
shmt__an_rlog(uint64_t ver, uint64_t shift, uint64_t count)
{
	return ver << 32 | (shift & 0xff) << 24 | (count & 0xffffff);
}

#define SHMT_AN_TAG_SHIFT 48    /* a tag is hash >> 48 */
#define SHMT_AN_PROBE_STEP 8U   /* probe is a multiple of this */
#define SHMT_AN_PROBE_MAX 128U  /* and at most this */

#define SHMT_AN_CLIENT_BIT (1ULL << 63)

struct shmt_an_name {
	uint64_t an_hash;
	uint32_t an_klen;
	uint8_t an_kind;
	uint8_t an_kept;
	uint16_t an_rank;        /* (sub-window & 0xfff) << 4 | level: see
	                          * name_put; outside the check word */
	uint64_t an_check;
	uint8_t an_bytes[SHMT_AN_NAME_BYTES];   /* 8-aligned: offset 24 */
};
_Static_assert(sizeof(struct shmt_an_name) == 64, "a name is one line");
_Static_assert(offsetof(struct shmt_an_name, an_bytes) % 8 == 0 &&
    SHMT_AN_NAME_BYTES % 8 == 0, "names move as 8-byte words");

/* Trusted, process-local geometry. */
struct shmt_an {
	char *base;
	uint64_t bytes;
	uint64_t window, w;          /* window and sub-window (ns) */
	uint32_t subw, rings;        /* rings = subw + 1 */
	uint32_t stripes;            /* SHMT_AN_STRIPES + 1 (the shared one) */
	uint32_t cap, probe, names;   /* cap = groups x probe */
	uint32_t groups;
	uint32_t pieces;             /* piece marks per summary */
	uint32_t recs;               /* crossing records per summary */
	uint32_t rec_sbits;          /* a record's place: bits */
	uint32_t tag_bytes, meta_bytes;  /* per group: tags, tags + counts */
	uint64_t marks_off, groups_off;  /* in a summary */
	uint64_t hashes_off;             /* in a summary */
	uint64_t recs_off;               /* in a summary */
	uint32_t ppm;
	int clients;
	uint64_t lock_off, sums_off, sum_size, names_off;
};

/* The two places of a key's name in a table of NAMES (a power of two):
 * bits 20 and up of its hash, and that index with other bits of the hash
 * flipped (the same place only in a table of one). */
static inline void
shmt__an_name_slots(uint32_t names, uint64_t hash, uint32_t *i0, uint32_t *i1)
{
	uint32_t m = names - 1;

	*i0 = (uint32_t)(hash >> 20) & m;
	*i1 = m == 0 ? *i0 : *i0 ^ (((uint32_t)(hash >> 42) & m) | 1U);
}

/* The group of a key's counters: the low 32 bits of its hash scaled to
 * GROUPS (tests that make keys collide use it too). */
static inline uint32_t
shmt__an_group(uint32_t groups, uint64_t hash)
{
	return (uint32_t)(((uint64_t)(uint32_t)hash * groups) >> 32);
}

/* The geometry of an analyzer of BYTES bytes (0: none): 0, or -EINVAL with
 * *WHY (WHY may be NULL) a constant sentence naming the parameter and the
 * rule. */
int shmt__an_geometry(uint64_t bytes, uint64_t window, uint32_t subw,
    uint32_t ppm, struct shmt_an *an, const char **why);
/* The geometry OLD that AN's parameters gave in segment formats up to ABI
 * 8 (no crossing records; the room for piece marks only): 0, or -EINVAL. */
int shmt__an_geometry_old(const struct shmt_an *an, struct shmt_an *old);
/* Whether the analyzer AN (NULL: none) counts requests of KIND; the
 * per-client grants ask first, so that a segment whose analyzer leaves
 * clients out costs them no call and no clock read. */
static inline int
shmt__an_counts(const struct shmt_an *an, int kind)
{
	return an != NULL && (kind != SHMT_HOT_CLIENT || an->clients);
}

/* Count one request for KEY (hash HASH) of KIND at NOW. */
void shmt__an_feed(shmt_t *h, uint64_t hash, const void *key, size_t klen,
    int kind, uint64_t now);
/* Move the sub-window of every name's rank by K sub-windows (a snapshot
 * brought back on another clock, as shmt__an_sum_retime); for a private
 * segment. */
void shmt__an_names_shift(const struct shmt_an *an, int64_t k);
/* The stripes whose writer is dead (bit p for stripe p, bit
 * SHMT_AN_STRIPES for the shared stripe's lock holder) and not yet
 * reaped: their summaries' crossing records may lack the last count's
 * (readers use none of them).  Reads only. */
uint32_t shmt__an_dead_writers(const struct shmt_an *an);
/* Free the stripes this handle owns (shmt_close). */
void shmt__an_release(shmt_t *h);
/* Free the stripes of dead processes. */
int shmt__an_reap(shmt_t *h);
/* Move summary S of sub-window FROM_ID to sub-window TO_ID (a snapshot
 * brought back on another clock): am_id becomes TO_ID, and every time in
 * it (am_tmax, the marks' mk_t) moves by start(TO_ID) - start(FROM_ID).
 * For a summary no one else uses yet (a private segment); S must lie in
 * AN's region, at the place of TO_ID's ring. */
void shmt__an_sum_retime(const struct shmt_an *an, struct shmt_an_sum *s,
    uint64_t from_id, uint64_t to_id);

/* Snapshots.  Copy H's summaries and names into BUF (CAP bytes) as the
 * analyzer's own bytes, never read outside this module: how many bytes,
 * -ENOSPC when CAP is short; with BUF NULL, how many it would take.  Safe
 * beside writers (each word is copied atomically; see analyzer.c). */
int64_t shmt__an_export(shmt_t *h, void *buf, uint64_t cap);
/* The same from the analyzer AN (NULL: none), whose base may be the
 * region of a segment of another format with the same analyzer layout (an
 * upgrade, migrate.c). */
int64_t shmt__an_export_an(const struct shmt_an *an, void *buf, uint64_t cap);
/* Rewrite IN (LEN bytes), an analyzer section exported with the geometry
 * of formats up to ABI 8 (shmt__an_geometry_old of AN), as one of AN's
 * geometry into OUT (CAP bytes): how many bytes, -ENOSPC, or -EINVAL when
 * IN is not of that geometry.  OUT NULL: how many it would take.  Each
 * summary keeps its counters, offsets and slice marks; its piece marks are
 * thinned as a writer thins them (every other one kept, the step doubled)
 * until they fit AN's room, and it keeps no crossing records (its log is
 * off: readers use the marks alone, as that format did). */
int64_t shmt__an_upgrade(const struct shmt_an *an, const void *in,
    uint64_t len, void *out, uint64_t cap);
/* Bring back what shmt__an_export wrote (LEN bytes) into H, a segment not
 * yet shared, moving its sub-windows by DELTA_NS toward the past, with
 * every crossing log off (the image was copied while writers counted, so a
 * count may be in it without its record).  0, or
 * -EINVAL when the bytes are not of this analyzer's geometry (nothing is
 * changed then). */
int shmt__an_import(shmt_t *h, const void *buf, uint64_t len,
    int64_t delta_ns);

#endif /* SHMT_ANALYZER_H */
