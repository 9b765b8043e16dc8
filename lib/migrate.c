/* SPDX-License-Identifier: MIT */
/*
 * Upgrades: an image (image.c) of a segment of an older format, ABI 9, 8,
 * 7 or 6, rewritten as an image of this build's format (ABI 10), which
 * image.c then restores as any other (checked record by record,
 * re-inserted through the store's calls, checked whole with shmt_check
 * before it is published); and a live segment of ABI 9, 8, 7 or 6 in
 * /dev/shm taken over in place (below).  Each older format is one entry of
 * oldfmts[]: its format word, its shard header's size, the gap between its
 * shards, whether its rows need converting, whether its analyzer does;
 * the code is the same for all.
 *
 * What changed from ABI 9 to ABI 10, and what the migration does with it:
 *
 *  - The stores' index: a bucket is a 64-byte line (struct shmt_bucket,
 *    store.h) whose slot holds a small item of the dictionary, one bucket
 *    per 128 heap bytes in the dictionary and per 512 in the counters'
 *    store; ABI 9's was 16 bytes (struct shmt_bucket9 here), one per 128
 *    heap bytes in both.  Items are carried as records (an image's as
 *    they are; a live segment's read with ABI 9's own geometry, every
 *    link and item checked, as for ABI 8 below) and re-inserted through
 *    the store's calls, which put the small ones in their slots.
 *  - Nothing else changed: rows, arena, analyzer and header are carried
 *    as they are (an ABI 9 analyzer is this build's: no rewrite).  The
 *    format word changed so that no ABI 9 process works on an ABI 10
 *    segment (it would read every bucket at the wrong place).
 *
 * What changed from ABI 8 to ABI 9, and what the migration does with it:
 *
 *  - The analyzer's summaries give half the room their piece marks had to
 *    crossing records (analyzer.h: its region's size and every other
 *    place in it are the same; a summary may be longer, so the summaries
 *    and the name table lie elsewhere in it).  The analyzer's section of
 *    an image, or its copy from a live segment, is rewritten in this
 *    build's layout (shmt__an_upgrade: counters, offsets, slice marks and
 *    names as they were, the piece marks thinned as a writer thins them
 *    to fit, no records: a summary of before the upgrade is read with its
 *    marks alone, as ABI 8 read it, until its sub-window leaves the span).
 *    Nothing else changed: rows, arena, stores and header are carried as
 *    for ABI 7 below (and an ABI 8 rate limiter's count in its word is
 *    this build's).  The format word changed so that no ABI 8 process
 *    works on an ABI 9 segment (it would take records for piece marks).
 *
 * What changed from ABI 7 to ABI 8, and what the migration does with it:
 *
 *  - A shared rate limiter's state word: the upper 48 bits of its second
 *    half (above the parameter generation) count its grants, raised by
 *    the grant's own CAS (gcra.h); in ABI 7 they were 0, and the row's
 *    lm_exact_grants counted every grant.  So an ABI 7 row is an ABI 8 row
 *    whose word counts 0 grants, its grants all in lm_exact_grants: the
 *    sum shmt_limiter_stat reports is the same, and the row is carried as
 *    it is.  The format word changed so that no ABI 7 process works on an
 *    ABI 8 segment (its checker would take the count for damage).
 *  - The stores did not change, but a live segment's shards are read with
 *    ABI 7's own geometry, hard-coded here (store_old: a shard header of
 *    896 bytes, one 16-byte bucket per 128 heap bytes from the next line,
 *    the heap from the next page, one line more between shards), never
 *    with this build's, every link and item checked, the walk bounded,
 *    and the items re-inserted through the store's calls, as for ABI 6:
 *    a format that changes the stores next needs nothing more here.
 *  - Everything else (the rest of the limiter rows, the arena and its
 *    client entries and override tables, the stores, the analyzer, the
 *    records, the segment header but for the ABI number and the format
 *    word) is the same: an image's rows and arena are carried as they are, each READY
 *    row checked as ABI 6's are (its parameters, key pool, every span and
 *    its override table inside the arena's used part), a row a definition
 *    left half built made free (as the repair of a row makes it); the
 *    segment header gets this format's word and regions.
 *
 * What changed from ABI 6 to ABI 7 (a migration from ABI 6 carries ABI 6's
 * state to ABI 8 through these, then through the above), and what the
 * rewrite does with it:
 *
 *  - struct shmt_lim (a limiter row, 1280 bytes in both): lm_ov_off,
 *    lm_ov_cap and a pad word come before lm_name (which moves from byte
 *    112 to 128), and two counters (lm_allowed_by_rule, lm_denied_by_rule)
 *    take room that was padding.  Every field is carried to its new place;
 *    the new counters start at 0.
 *  - A per-client limiter's storage in the arena is ring, keys, clients,
 *    then an override table (SHMT_OVERRIDES_DEFAULT entries of 128 bytes,
 *    all free: ABI 6 had no overrides).  The arena is laid out again, row
 *    by row, as shmt_limiter_define would lay it out, and every arena
 *    offset of a row is rebased to its new place; the rings, key names
 *    and client entries are copied to it.  When the used arena no longer
 *    fits arena_bytes, the new segment's arena grows (in 64 KiB steps) by
 *    what the override tables take.
 *  - struct shmt_client (a client's entry, 64 bytes in both): ce_id[20]
 *    became ce_rule and ce_id[16].  ce_id is not a hash: it is the first
 *    bytes of the client id, kept for display only (ce_idlen keeps the
 *    id's whole length); the client's identity is its keyed 128-bit hash
 *    ce_hash, which is carried as it is (with the segment's secret).  So
 *    every client keeps its entry, its uses in flight and their release
 *    times; what is lost is bytes 17 to 20 of the displayed prefix of ids
 *    longer than 16 bytes.  ce_rule starts at 0 (no override).
 *  - struct shmt_shard (a dictionary or counters shard's header) grew a
 *    free-list mask and an undo record (512 bytes in ABI 6, 896 in ABI 7
 *    and ABI 8), and ABI 7 put one line more between shards.  An image
 *    holds no shard: its
 *    dictionary items and counters are records (image.c), whose format is
 *    the same in both, and they are re-inserted through the store's calls
 *    into the new shards.  Counters keep their own bytes (counters.c did
 *    not change).
 *  - The analyzer's region and summaries are the same in both (the same
 *    types, sizes and export, topkeys.c): they are carried as they are.
 *  - The segment header is the same but for the ABI number and the format
 *    word; the regions are laid out again from the creation parameters.
 *
 * Nothing in the old image is trusted: its header, checksums, segment
 * header and regions, every row's parameters (through the same checks as
 * a row of this format, shmt__limit_check) and every arena offset and
 * span are checked before a byte is copied; a damaged image gives
 * SHMT_ECORRUPT (or SHMT_EFORMAT, SHMT_EMAGIC) with the reason, never a
 * crash.  What is not checked here (the records, the analyzer's bytes, the
 * state words) image.c checks when it restores the result.
 */
#include "daemon.h"

#include "analyzer.h"
#include "clients.h"
#include "image.h"
#include "layout.h"
#include "limiter.h"
#include "lock.h"
#include "proc.h"
#include "segment.h"
#include "store.h"
#include "table.h"
#include "wait.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The format words of ABI 6, 7, 8 and 9 (layout.c's shmt__format_word as
 * those versions built it on LP64 little-endian with gcc or clang). */
#define FORMAT_ABI6 0x0006f8ef2fad6518ULL
#define FORMAT_ABI7 0x00078ea78d338708ULL
#define FORMAT_ABI8 0x0008a234bd752efeULL
#define FORMAT_ABI9 0x0009f57c0f57efbeULL

/* The index's bucket of every format up to ABI 9: 16 bytes, four to a
 * line, one per 128 heap bytes in both stores, no slot. */
struct shmt_bucket9 {
	uint64_t bk_head;
	uint32_t bk_atime;
	uint32_t bk_filter;
};

/* ABI 6's client entry. */
struct shmt_client6 {
	uint64_t ce_hash[2];
	alignas(16) struct shmt_w ce_w;
	uint64_t ce_last_ns;
	uint32_t ce_idlen;
	uint8_t ce_id[20];
};
_Static_assert(sizeof(struct shmt_client6) == 64 &&
    offsetof(struct shmt_client6, ce_id) == 44, "ABI 6 client entry");
_Static_assert(sizeof(struct shmt_client) == 64 &&
    offsetof(struct shmt_client, ce_idlen) == 40, "ABI 7 client entry");

/* ABI 6's limiter row (limiter.h as it was): the same types but for the
 * identity's tail and the counters. */
struct shmt_lim6 {
	uint32_t lm_state;
	uint32_t lm_mode;
	uint64_t lm_limit;
	uint64_t lm_window;
	uint64_t lm_slack;
	uint64_t lm_slack_uses;
	uint32_t lm_nbuckets;
	uint32_t lm_flags;
	uint32_t lm_nkeys;
	uint32_t lm_uses_per_key;
	uint32_t lm_keystride;
	uint32_t lm_keymax;
	uint32_t lm_capacity;
	uint32_t lm_entsize;
	uint64_t lm_ring_off;
	uint64_t lm_keys_off;
	uint64_t lm_clients_off;
	uint64_t lm_storage;
	uint64_t lm_burst;
	char lm_name[SHMT_LIMITER_NAME_MAX + 1];
	alignas(SHMT_LINE) struct shmt_lock lm_client_lock;
	alignas(SHMT_LINE) struct shmt_w lm_w;
	uint64_t lm_handoff;
	alignas(SHMT_LINE) uint64_t lm_released_uses;
	uint64_t lm_denied_exhausted;
	uint64_t lm_denied_slack;
	uint64_t lm_denied_table_full;
	uint64_t lm_exact_grants;
	uint64_t lm_denied_ring_full;
	uint64_t lm_would_deny;
	uint64_t lm_reset_uses;
	alignas(SHMT_LINE) uint32_t lm_wake;
	alignas(SHMT_LINE) struct shmt_lparams lm_p[2];
	alignas(SHMT_LINE) struct shmt_glease lm_g;
};
_Static_assert(sizeof(struct shmt_lim6) == 1280 &&
    offsetof(struct shmt_lim6, lm_name) == 112 &&
    offsetof(struct shmt_lim6, lm_client_lock) == 256 &&
    offsetof(struct shmt_lim6, lm_w) == 384 &&
    offsetof(struct shmt_lim6, lm_released_uses) == 512 &&
    offsetof(struct shmt_lim6, lm_reset_uses) == 568 &&
    offsetof(struct shmt_lim6, lm_wake) == 640 &&
    offsetof(struct shmt_lim6, lm_p) == 768 &&
    offsetof(struct shmt_lim6, lm_g) == 896, "ABI 6 limiter row");
_Static_assert(offsetof(struct shmt_lim6, lm_burst) ==
    offsetof(struct shmt_lim, lm_burst) &&
    offsetof(struct shmt_lim6, lm_name) ==
    offsetof(struct shmt_lim, lm_ov_off) &&
    sizeof(struct shmt_lim6) == sizeof(struct shmt_lim),
    "the identity's head is the same");

/* ABI 7's limiter row, client entry, arena and records are this build's:
 * its rows are struct shmt_lim, which these pin down as ABI 7 had it. */
_Static_assert(sizeof(struct shmt_lim) == 1280 &&
    offsetof(struct shmt_lim, lm_name) == 128 &&
    offsetof(struct shmt_lim, lm_w) == 384 &&
    offsetof(struct shmt_lim, lm_wake) == 640, "ABI 7 limiter row");

/* An older format this build migrates: what tells it apart. */
struct oldfmt {
	unsigned abi;
	uint64_t format;                /* its format word */
	uint32_t shard_bytes;           /* its shard header (struct shmt_shard) */
	uint32_t shard_gap;             /* bytes between a shard's heap and the
	                                 * next shard */
	int convert_rows;               /* 1: its rows, client entries and
	                                 * arena are ABI 6's (converted); 0:
	                                 * this build's (carried as they are) */
	uint32_t wake_off;              /* lm_wake in its row */
	int an_old;                     /* 1: its analyzer's summaries have
	                                 * no crossing records (rewritten);
	                                 * 0: this build's (carried) */
};

static const struct oldfmt oldfmts[] = {
	{ 6, FORMAT_ABI6, 512, 0, 1, offsetof(struct shmt_lim6, lm_wake), 1 },
	{ 7, FORMAT_ABI7, 896, SHMT_LINE, 0, offsetof(struct shmt_lim, lm_wake),
	    1 },
	{ 8, FORMAT_ABI8, 896, SHMT_LINE, 0, offsetof(struct shmt_lim, lm_wake),
	    1 },
	{ 9, FORMAT_ABI9, 896, SHMT_LINE, 0, offsetof(struct shmt_lim, lm_wake),
	    0 },
};

/* The older format of format word FORMAT, or NULL when this build does
 * not migrate it. */
static const struct oldfmt *
oldfmt_of(uint64_t format)
{
	for (size_t i = 0; i < sizeof(oldfmts) / sizeof(oldfmts[0]); i++)
		if (oldfmts[i].format == format)
			return &oldfmts[i];
	return NULL;
}

int
shmt__abi_migrates(int abi)
{
	for (size_t i = 0; i < sizeof(oldfmts) / sizeof(oldfmts[0]); i++)
		if ((int)oldfmts[i].abi == abi)
			return 1;
	return 0;
}

int
shmt__image_abi(const unsigned char *img, size_t len)
{
	struct img_hdr ih;

	if (img == NULL || len < sizeof(ih))
		return -1;
	memcpy(&ih, img, sizeof(ih));
	if (ih.ih_magic != IMG_MAGIC)
		return -1;
	return (int)(ih.ih_format >> 48);
}

/* The old image, its pieces found and bounded. */
struct old {
	const struct oldfmt *f;         /* its format */
	const unsigned char *body;      /* after the image header */
	uint64_t size;                  /* body bytes */
	struct shmt_hdr hdr;            /* a copy of its segment header */
	uint64_t hlen, llen;            /* header region, limiter table */
	const unsigned char *arena;     /* its used part: */
	uint64_t arena_used;
	uint64_t rest;                  /* where the sections start */
};

/* Check the old image's header and segment header. */
static int
old_check(const unsigned char *img, size_t len, struct img_hdr *ih,
    struct old *o, char *err, size_t cap)
{
	const struct shmt_hdr *h = &o->hdr;
	uint64_t end = 0, sum;

	if (len < sizeof(*ih))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "truncated: %zu bytes, "
		    "shorter than its header", len);
	memcpy(ih, img, sizeof(*ih));
	if (ih->ih_magic != IMG_MAGIC)
		return shmt__bad(err, cap, SHMT_EMAGIC,
		    "not a shmthrottle snapshot");
	if (ih->ih_version != IMG_VERSION &&
	    ih->ih_version != IMG_VERSION_PIECES)
		return shmt__bad(err, cap, SHMT_EFORMAT, "snapshot version %u, "
		    "this build reads versions %u and %u", ih->ih_version,
		    IMG_VERSION_PIECES, IMG_VERSION);
	if (ih->ih_hdr_size != sizeof(*ih) ||
	    ih->ih_hdr_sum != shmt__fnv1a(SHMT_FNV_INIT, ih,
	    offsetof(struct img_hdr, ih_hdr_sum)))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "header checksum "
		    "mismatch (the file is damaged)");
	if ((o->f = oldfmt_of(ih->ih_format)) == NULL)
		return shmt__bad(err, cap, SHMT_EFORMAT, "written for segment "
		    "format %#" PRIx64 " (ABI %u); this build migrates ABI 9 "
		    "(%#llx), ABI 8 (%#llx), ABI 7 (%#llx) and ABI 6 (%#llx) "
		    "only", ih->ih_format, (unsigned)(ih->ih_format >> 48),
		    (unsigned long long)FORMAT_ABI9,
		    (unsigned long long)FORMAT_ABI8, (unsigned long long)
		    FORMAT_ABI7, (unsigned long long)FORMAT_ABI6);
	if (ih->ih_size != len - sizeof(*ih))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "truncated or padded: "
		    "%zu bytes of image, the header says %" PRIu64,
		    len - sizeof(*ih), ih->ih_size);
	o->body = img + sizeof(*ih);
	o->size = ih->ih_size;
	if (shmt__fnv1a_words(SHMT_FNV_INIT, o->body, o->size) != ih->ih_sum)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "image checksum mismatch "
		    "(the file is damaged)");
	if (o->size < sizeof(o->hdr))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "image shorter than a "
		    "segment header");
	memcpy(&o->hdr, o->body, sizeof(o->hdr));

	/* The segment header, as its version validated it at open. */
	if (h->sh_magic != SHMT_MAGIC || h->sh_abi != o->f->abi ||
	    h->sh_format != o->f->format || h->sh_nregions != SHMT_R_COUNT)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "the image's segment "
		    "header is not one of ABI %u", o->f->abi);
	for (int i = 0; i < SHMT_R_COUNT; i++) {
		uint64_t off = h->sh_regions[i].rg_off;
		uint64_t rl = h->sh_regions[i].rg_size;

		if (off < end || off > h->sh_size || rl > h->sh_size - off ||
		    off % SHMT_LINE != 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "region %d of "
			    "the image's segment header is out of order or "
			    "range", i);
		end = off + rl;
	}
	o->hlen = h->sh_regions[SHMT_R_HEADER].rg_size;
	o->llen = h->sh_regions[SHMT_R_LIMITERS].rg_size;
	o->arena_used = ih->ih_arena_bytes;
	if (h->sh_regions[SHMT_R_HEADER].rg_off != 0 ||
	    o->hlen < sizeof(o->hdr) || o->hlen % 16 != 0 ||
	    h->sh_params.sp_max_limiters == 0 ||
	    h->sh_params.sp_max_limiters > 4096 ||
	    o->llen != (uint64_t)h->sh_params.sp_max_limiters *
	    sizeof(struct shmt_lim6) ||
	    h->sh_regions[SHMT_R_ARENA].rg_size != h->sh_params.sp_arena_bytes ||
	    o->arena_used % 16 != 0 ||
	    o->arena_used > h->sh_regions[SHMT_R_ARENA].rg_size)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "the image's segment "
		    "header is inconsistent with its parameters");
	/* hlen, llen and arena_used are each below sh_size, itself at most
	 * what a u64 holds: their sum cannot wrap past 2^64 for sizes a
	 * mapping can have, but is checked against the image all the same. */
	if (o->hlen > o->size || o->llen > o->size - o->hlen ||
	    o->arena_used > o->size - o->hlen - o->llen)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its pieces do not add "
		    "up to the image's layout");
	sum = o->hlen + o->llen + o->arena_used;
	if (ih->ih_version == IMG_VERSION_PIECES && sum != o->size)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its pieces do not add "
		    "up to the image's layout");
	o->arena = o->body + o->hlen + o->llen;
	o->rest = sum;
	return 0;
}

/* [OFF, OFF + LEN) lies inside the old arena's used part. */
static int
old_span(const struct old *o, uint64_t off, uint64_t len)
{
	return off <= o->arena_used && len <= o->arena_used - off;
}

/* The new arena under construction. */
struct arena {
	unsigned char *b;
	uint64_t used, cap;
};

/* Count a live client entry (its word W; BUCKETS: buckets mode, where the
 * word counts its uses in flight). */
static void
client_count(struct shmt_w w, int buckets, struct shmt__migration *m)
{
	if ((SHMT_W_TAG(w) >> 14) == CE_LIVE) {
		m->clients++;
		if (buckets)
			m->inflight += SHMT_W_INFLIGHT(w);
	}
}

/* Convert the client entries of a per-client row: NCAP entries of ENTSIZE
 * bytes at FROM to TO; count the live ones and their uses in flight. */
static void
clients_convert(const unsigned char *from, unsigned char *to, uint32_t ncap,
    uint32_t entsize, int buckets, struct shmt__migration *m)
{
	for (uint32_t i = 0; i < ncap; i++) {
		const unsigned char *s = from + (uint64_t)i * entsize;
		unsigned char *d = to + (uint64_t)i * entsize;
		struct shmt_client6 e6;
		struct shmt_client e;
		uint32_t n;

		memcpy(&e6, s, sizeof(e6));
		memset(&e, 0, sizeof(e));
		e.ce_hash[0] = e6.ce_hash[0];
		e.ce_hash[1] = e6.ce_hash[1];
		e.ce_w = e6.ce_w;
		e.ce_last_ns = e6.ce_last_ns;
		e.ce_idlen = e6.ce_idlen;
		e.ce_rule = CE_RULE_NONE;
		n = e6.ce_idlen < sizeof(e.ce_id) ? e6.ce_idlen :
		    (uint32_t)sizeof(e.ce_id);
		memcpy(e.ce_id, e6.ce_id, n);
		memcpy(d, &e, sizeof(e));
		/* The entry's ring follows it, slot for slot. */
		memcpy(d + sizeof(e), s + sizeof(e6), entsize - sizeof(e6));
		client_count(e.ce_w, buckets, m);
	}
}

/*
 * Check the identity of the READY row R, of ABI 6 or ABI 7: ID holds its
 * fields up to lm_burst (the same in both), NAME its name, OVCAP its
 * override table's entries (ABI 7; 0 for ABI 6, which had none).  Its
 * parameters go through the same rules as a definition, its key pool
 * through the rules of a row, and every span it names must lie in the old
 * arena's used part.  *G gets its geometry, *KEYS_BYTES its key names'
 * bytes.
 */
static int
row_check(const struct old *o, uint32_t r, const struct shmt_lim6 *id,
    const char *name, uint32_t ovcap, struct lim_geom *g,
    uint64_t *keys_bytes, char *err, size_t cap)
{
	shmt_limit_t l;
	char why[160];
	int per_client = (id->lm_flags & SHMT_LIMF_PER_CLIENT) != 0;

	*keys_bytes = 0;
	if (memchr(name, '\0', SHMT_LIMITER_NAME_MAX + 1) == NULL ||
	    name[0] == '\0')
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter row %u: its "
		    "name is empty or not terminated", r);
	/* The row's parameters, through the same rules as a definition. */
	memset(&l, 0, sizeof(l));
	l.limit = id->lm_limit;
	l.window_ns = id->lm_window;
	l.slack_ns = id->lm_slack;
	l.slack_uses = id->lm_slack_uses;
	l.mode = (int)id->lm_mode;
	l.per_client = per_client;
	l.client_capacity = per_client ? id->lm_capacity : 0;
	l.client_overrides = per_client ? ovcap : 0;
	l.burst = id->lm_burst;
	l.global = (id->lm_flags & SHMT_LIMF_GLOBAL) != 0;
	why[0] = '\0';
	if (id->lm_mode > SHMT_MODE_GCRA || (id->lm_flags & ~0xfU) != 0 ||
	    shmt__limit_check(&l, g, why, sizeof(why)) != 0 ||
	    g->nb != id->lm_nbuckets ||
	    (per_client && id->lm_entsize != g->entsize))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
		    "inconsistent parameters%s%s", name,
		    why[0] != '\0' ? ": " : "", why);
	if (id->lm_flags & SHMT_LIMF_KEYS) {
		if (id->lm_nkeys == 0 || id->lm_nkeys > SHMT_KEYS_MAX ||
		    id->lm_keymax == 0 || id->lm_keymax > SHMT_KEYNAME_MAX ||
		    id->lm_keystride != ((id->lm_keymax + 1 + 7) & ~7U) ||
		    id->lm_uses_per_key == 0 ||
		    (uint64_t)id->lm_nkeys * id->lm_uses_per_key != id->lm_limit)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
			    "inconsistent key pool", name);
		*keys_bytes = (uint64_t)id->lm_nkeys * id->lm_keystride;
	} else if (id->lm_nkeys != 0) {
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: keys "
		    "without a key pool", name);
	}
	/* Every span the row names lies in the old arena's used part. */
	if (id->lm_ring_off % 16 != 0 || id->lm_keys_off % 16 != 0 ||
	    id->lm_clients_off % 16 != 0 ||
	    !old_span(o, id->lm_ring_off, g->ring_bytes) ||
	    !old_span(o, id->lm_keys_off, *keys_bytes) ||
	    !old_span(o, id->lm_clients_off, g->clients_bytes))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: storage "
		    "outside the image's arena (%" PRIu64 " bytes)", name,
		    o->arena_used);
	return 0;
}

/* A shared rate limiter's word in ABI 6 and ABI 7 holds its parameter
 * generation alone in its second half: a bit above it was damage there
 * (their shmt_check named it), and in ABI 8 it would read as a count of
 * grants, so it is refused here as any other damage is. */
static int
rate_word_check(const char *name, uint32_t mode, uint32_t flags,
    const struct shmt_w *w, char *err, size_t cap)
{
	if (mode == SHMT_MODE_GCRA && !(flags & SHMT_LIMF_PER_CLIENT) &&
	    (w->w[1] >> 16) != 0)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: its "
		    "state word's second half %#" PRIx64 " holds more than a "
		    "parameter generation (the old version's `shmthrottle "
		    "check --repair` clears it)", name, w->w[1]);
	return 0;
}

/* Convert the READY row R6 (row R, of ABI 6) into *R7, its storage copied
 * from the old arena into A at the places shmt_limiter_define would give
 * it. */
static int
row_convert(const struct old *o, uint32_t r, const struct shmt_lim6 *r6,
    struct shmt_lim *r7, struct arena *a, struct shmt__migration *m,
    char *err, size_t cap)
{
	struct lim_geom g;
	uint64_t ring_off, keys_off, cl_off, ov_off, end, keys_bytes;
	int per_client = (r6->lm_flags & SHMT_LIMF_PER_CLIENT) != 0, rc;

	if ((rc = row_check(o, r, r6, r6->lm_name, 0, &g, &keys_bytes, err,
	    cap)) != 0 || (rc = rate_word_check(r6->lm_name, r6->lm_mode,
	    r6->lm_flags, &r6->lm_w, err, cap)) != 0)
		return rc;

	/* The new places, as row_build (table.c) lays a row out. */
	ring_off = shmt__align_up(a->used, SHMT_LINE);
	keys_off = shmt__align_up(ring_off + g.ring_bytes, 16);
	cl_off = shmt__align_up(keys_off + keys_bytes, SHMT_LINE);
	ov_off = shmt__align_up(cl_off + g.clients_bytes, SHMT_LINE);
	end = ov_off + g.ov_bytes;
	if (end > a->cap)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: its "
		    "storage overflows the arena", r6->lm_name);
	memset(a->b + a->used, 0, end - a->used);
	memcpy(a->b + ring_off, o->arena + r6->lm_ring_off, g.ring_bytes);
	memcpy(a->b + keys_off, o->arena + r6->lm_keys_off, keys_bytes);
	if (per_client)
		clients_convert(o->arena + r6->lm_clients_off, a->b + cl_off,
		    r6->lm_capacity, r6->lm_entsize,
		    r6->lm_mode == SHMT_MODE_BUCKETS, m);
	else if (r6->lm_mode == SHMT_MODE_BUCKETS)
		m->inflight += SHMT_W_INFLIGHT(r6->lm_w);

	memset(r7, 0, sizeof(*r7));
	r7->lm_state = SHMT_LIM_READY;
	r7->lm_mode = r6->lm_mode;
	r7->lm_limit = r6->lm_limit;
	r7->lm_window = r6->lm_window;
	r7->lm_slack = r6->lm_slack;
	r7->lm_slack_uses = r6->lm_slack_uses;
	r7->lm_nbuckets = r6->lm_nbuckets;
	r7->lm_flags = r6->lm_flags;
	r7->lm_nkeys = r6->lm_nkeys;
	r7->lm_uses_per_key = r6->lm_uses_per_key;
	r7->lm_keystride = r6->lm_keystride;
	r7->lm_keymax = r6->lm_keymax;
	r7->lm_capacity = r6->lm_capacity;
	r7->lm_entsize = r6->lm_entsize;
	r7->lm_ring_off = ring_off;
	r7->lm_keys_off = keys_off;
	r7->lm_clients_off = cl_off;
	r7->lm_ov_off = g.ovcap != 0 ? ov_off : 0;
	r7->lm_ov_cap = g.ovcap;
	r7->lm_storage = end - a->used;
	r7->lm_burst = r6->lm_burst;
	memcpy(r7->lm_name, r6->lm_name, sizeof(r7->lm_name));
	/* Lock words and the hand-off name processes of the old segment:
	 * left at 0, as image.c leaves them. */
	r7->lm_w = r6->lm_w;
	r7->lm_released_uses = r6->lm_released_uses;
	r7->lm_denied_exhausted = r6->lm_denied_exhausted;
	r7->lm_denied_slack = r6->lm_denied_slack;
	r7->lm_denied_table_full = r6->lm_denied_table_full;
	r7->lm_exact_grants = r6->lm_exact_grants;
	r7->lm_denied_ring_full = r6->lm_denied_ring_full;
	r7->lm_would_deny = r6->lm_would_deny;
	r7->lm_reset_uses = r6->lm_reset_uses;
	memcpy(r7->lm_p, r6->lm_p, sizeof(r7->lm_p));
	r7->lm_g = r6->lm_g;
	a->used = end;
	m->limiters++;
	return 0;
}

/* Check the READY row R of ABI 7 (this build's row), carried as it is with
 * the arena: its identity as row_check checks it, its override table in
 * the old arena's used part; count its client entries and uses. */
static int
row_carry(const struct old *o, uint32_t r, const struct shmt_lim *row,
    struct shmt__migration *m, char *err, size_t cap)
{
	struct shmt_lim6 id;
	struct lim_geom g;
	uint64_t keys_bytes;
	int per_client = (row->lm_flags & SHMT_LIMF_PER_CLIENT) != 0, rc;
	int buckets = row->lm_mode == SHMT_MODE_BUCKETS;

	memcpy(&id, row, offsetof(struct shmt_lim6, lm_name));
	if ((rc = row_check(o, r, &id, row->lm_name, row->lm_ov_cap, &g,
	    &keys_bytes, err, cap)) != 0 ||
	    (o->f->abi < 8 && (rc = rate_word_check(row->lm_name,
	    row->lm_mode, row->lm_flags, &row->lm_w, err, cap)) != 0))
		return rc;
	if (row->lm_ov_cap != g.ovcap || (g.ovcap == 0 ?
	    row->lm_ov_off != 0 : (row->lm_ov_off % 16 != 0 ||
	    row->lm_ov_off < row->lm_clients_off + g.clients_bytes ||
	    !old_span(o, row->lm_ov_off, g.ov_bytes))))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: its "
		    "override table is outside the image's arena (%" PRIu64
		    " bytes) or of another size than its parameters give",
		    row->lm_name, o->arena_used);
	if (per_client) {
		for (uint32_t i = 0; i < row->lm_capacity; i++) {
			struct shmt_client e;

			memcpy(&e, o->arena + row->lm_clients_off +
			    (uint64_t)i * row->lm_entsize, sizeof(e));
			client_count(e.ce_w, buckets, m);
		}
	} else if (buckets) {
		m->inflight += SHMT_W_INFLIGHT(row->lm_w);
	}
	m->limiters++;
	return 0;
}

/* The rows and arena of an image of ABI 6, converted: each READY row
 * (row_convert) and its storage laid out again in *A, a row that a
 * definition left half built dropped (free), a deleted one kept without
 * its storage; *ROWS (aligned, malloc'd) gets the new rows. */
static int
convert_rows(const struct old *o, struct arena *a, struct shmt_lim **rows,
    struct shmt__migration *m, char *err, size_t cap)
{
	uint32_t nrows = o->hdr.sh_params.sp_max_limiters, per_client = 0;
	int rc;

	/* Room for the new arena: the old one's used part, each row's
	 * alignment (three lines at most) and each per-client row's new
	 * override table. */
	for (uint32_t r = 0; r < nrows; r++) {
		struct shmt_lim6 r6;

		memcpy(&r6, o->body + o->hlen + (uint64_t)r * sizeof(r6),
		    sizeof(r6));
		if (r6.lm_state == SHMT_LIM_READY &&
		    (r6.lm_flags & SHMT_LIMF_PER_CLIENT))
			per_client++;
	}
	a->cap = o->arena_used + (uint64_t)nrows * 3 * SHMT_LINE +
	    (uint64_t)per_client * SHMT_OVERRIDES_DEFAULT *
	    sizeof(struct shmt_override);
	if ((a->b = calloc(1, a->cap)) == NULL ||
	    (*rows = aligned_alloc(alignof(struct shmt_lim),
	    (size_t)nrows * sizeof(**rows))) == NULL)
		return shmt__bad(err, cap, -ENOMEM, "no memory for the migration");
	memset(*rows, 0, (size_t)nrows * sizeof(**rows));
	for (uint32_t r = 0; r < nrows; r++) {
		struct shmt_lim6 r6;

		memcpy(&r6, o->body + o->hlen + (uint64_t)r * sizeof(r6),
		    sizeof(r6));
		switch (r6.lm_state) {
		case SHMT_LIM_FREE:
			break;
		case SHMT_LIM_BUILDING:
			/* A definition killed midway: its row would be
			 * reclaimed by the next repair; it starts free. */
			m->dropped++;
			break;
		case SHMT_LIM_DELETED:
			/* Never used again: its name stays (for the row's
			 * history), its storage is not carried. */
			(*rows)[r].lm_state = SHMT_LIM_DELETED;
			memcpy((*rows)[r].lm_name, r6.lm_name,
			    sizeof((*rows)[r].lm_name));
			(*rows)[r].lm_name[SHMT_LIMITER_NAME_MAX] = '\0';
			m->deleted++;
			break;
		case SHMT_LIM_READY:
			if ((rc = row_convert(o, r, &r6, &(*rows)[r], a, m, err,
			    cap)) != 0)
				return rc;
			break;
		default:
			return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter row %u: "
			    "unknown state %u", r, r6.lm_state);
		}
	}
	a->used = shmt__align_up(a->used, 16);
	return 0;
}

/* The rows and arena of an image of ABI 7, this build's but for what a
 * rate limiter's word may hold (rate_word_check): the arena copied as it
 * is into *A, the rows into *ROWS
 * (aligned, malloc'd), each READY one checked (row_carry), a row that a
 * definition left half built made free (as shmt__rows_repair makes it),
 * the rest carried as they are. */
static int
carry_rows(const struct old *o, struct arena *a, struct shmt_lim **rows,
    struct shmt__migration *m, char *err, size_t cap)
{
	uint32_t nrows = o->hdr.sh_params.sp_max_limiters;

	a->cap = o->arena_used;
	a->used = o->arena_used;
	if ((a->b = malloc(a->cap != 0 ? a->cap : 1)) == NULL ||
	    (*rows = aligned_alloc(alignof(struct shmt_lim),
	    (size_t)nrows * sizeof(**rows))) == NULL)
		return shmt__bad(err, cap, -ENOMEM, "no memory for the migration");
	memcpy(a->b, o->arena, a->used);
	memcpy(*rows, o->body + o->hlen, (size_t)nrows * sizeof(**rows));
	for (uint32_t r = 0; r < nrows; r++) {
		struct shmt_lim *row = &(*rows)[r];
		int rc;

		switch (row->lm_state) {
		case SHMT_LIM_FREE:
			break;
		case SHMT_LIM_BUILDING:
			memset(row, 0, sizeof(*row));
			m->dropped++;
			break;
		case SHMT_LIM_DELETED:
			if (memchr(row->lm_name, '\0', sizeof(row->lm_name)) ==
			    NULL)
				return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter "
				    "row %u: deleted, its name not terminated",
				    r);
			m->deleted++;
			break;
		case SHMT_LIM_READY:
			if ((rc = row_carry(o, r, row, m, err, cap)) != 0)
				return rc;
			break;
		default:
			return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter row %u: "
			    "unknown state %u", r, row->lm_state);
		}
	}
	return 0;
}

/* Count the records of the sections that follow the pieces (for the
 * report only: image.c checks them when it restores). */
static void
count_sections(const struct old *o, struct shmt__migration *m)
{
	uint64_t at = o->rest;

	while (o->size - at >= sizeof(struct img_sec)) {
		struct img_sec s;

		memcpy(&s, o->body + at, sizeof(s));
		at += sizeof(s);
		if (s.is_bytes > o->size - at)
			return;
		if (s.is_kind == IMG_S_DICT)
			m->dict_items = s.is_count;
		else if (s.is_kind == IMG_S_COUNTERS)
			m->counters = s.is_count;
		else if (s.is_kind == IMG_S_ANALYZER)
			m->analyzer = 1;
		at += s.is_bytes;
	}
}

/* The old image O's sections, for a segment of header NH, into OUT (NULL:
 * only their size, into *LEN): each as it was, but the analyzer's, which
 * formats up to ABI 8 laid out without crossing records
 * (shmt__an_upgrade rewrites it; ABI 9's is this build's).  0, or
 * SHMT_ECORRUPT. */
static int
sections_new(const struct old *o, const struct shmt_hdr *nh,
    unsigned char *out, uint64_t *len, char *err, size_t cap)
{
	uint64_t at = o->rest, n = 0;
	struct shmt_an an;

	while (o->size - at >= sizeof(struct img_sec)) {
		struct img_sec s;
		int64_t k;

		memcpy(&s, o->body + at, sizeof(s));
		if (s.is_bytes > o->size - at - sizeof(s))
			break;
		if (s.is_kind != IMG_S_ANALYZER || !o->f->an_old) {
			if (out != NULL)
				memcpy(out + n, o->body + at,
				    sizeof(s) + s.is_bytes);
			n += sizeof(s) + s.is_bytes;
			at += sizeof(s) + s.is_bytes;
			continue;
		}
		if (shmt__params_an_geometry(&nh->sh_params, &an, NULL, 0) != 0 ||
		    an.bytes == 0 || (k = shmt__an_upgrade(&an, o->body + at +
		    sizeof(s), s.is_bytes, out != NULL ? out + n + sizeof(s) :
		    NULL, out != NULL ? *len - n - sizeof(s) : 0)) < 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "its analyzer's "
			    "section does not fit its creation parameters");
		at += sizeof(s) + s.is_bytes;
		s.is_bytes = (uint64_t)k;
		if (out != NULL)
			memcpy(out + n, &s, sizeof(s));
		n += sizeof(s) + (uint64_t)k;
	}
	/* Whatever follows the last whole section, as it was. */
	if (out != NULL)
		memcpy(out + n, o->body + at, o->size - at);
	n += o->size - at;
	if (out == NULL)
		*len = n;
	return 0;
}

int
shmt__image_migrate(const unsigned char *img, size_t len, unsigned char **out,
    size_t *outlen, struct shmt__migration *m, char *err, size_t cap)
{
	struct shmt_region reg[SHMT_R_COUNT];
	struct img_hdr ih;
	struct shmt_hdr nh;
	struct old o;
	struct arena a = { 0 };
	struct shmt_lim *rows = NULL;
	unsigned char *b = NULL;
	uint32_t nrows;
	uint64_t tail, size, grow, n;
	int rc;

	if (img == NULL || out == NULL || outlen == NULL || m == NULL)
		return shmt__bad(err, cap, -EINVAL, "no image");
	*out = NULL;
	*outlen = 0;
	memset(m, 0, sizeof(*m));
	memset(&o, 0, sizeof(o));
	if ((rc = old_check(img, len, &ih, &o, err, cap)) != 0)
		return rc;
	m->from_abi = o.f->abi;
	nrows = o.hdr.sh_params.sp_max_limiters;
	rc = o.f->convert_rows ? convert_rows(&o, &a, &rows, m, err, cap) :
	    carry_rows(&o, &a, &rows, m, err, cap);
	if (rc != 0)
		goto out;

	/* The new segment header: this format, the regions laid out again,
	 * the arena grown when the rows no longer fit it. */
	nh = o.hdr;
	grow = 0;
	if (a.used > nh.sh_params.sp_arena_bytes) {
		uint64_t want = shmt__align_up(a.used, 64ULL << 10);

		grow = want - nh.sh_params.sp_arena_bytes;
		nh.sh_params.sp_arena_bytes = want;
	}
	m->arena_grown = grow;
	m->arena_bytes = nh.sh_params.sp_arena_bytes;
	if ((size = shmt__layout(&nh.sh_params, reg)) == 0) {
		rc = shmt__bad(err, cap, SHMT_ECORRUPT, "the image's creation "
		    "parameters make no segment of this format");
		goto out;
	}
	nh.sh_format = shmt__format_word();
	nh.sh_abi = SHMT_ABI_VERSION;
	nh.sh_size = size;
	for (int i = 0; i < SHMT_R_COUNT; i++)
		nh.sh_regions[i] = reg[i];
	nh.sh_arena_used = a.used;
	if (reg[SHMT_R_HEADER].rg_size != o.hlen ||
	    reg[SHMT_R_LIMITERS].rg_size != (uint64_t)nrows * sizeof(*rows)) {
		rc = shmt__bad(err, cap, SHMT_ECORRUPT, "the image's header or "
		    "limiter table has an unexpected size");
		goto out;
	}
	count_sections(&o, m);

	/* The new image: header, pieces, the sections as they were but the
	 * analyzer's, rewritten in this build's layout (sections_new). */
	if ((rc = sections_new(&o, &nh, NULL, &tail, err, cap)) != 0)
		goto out;
	n = sizeof(ih) + o.hlen + o.llen + a.used + tail;
	if ((b = malloc(n)) == NULL) {
		rc = shmt__bad(err, cap, -ENOMEM, "no memory for the migration");
		goto out;
	}
	memcpy(b + sizeof(ih), o.body, o.hlen);
	memcpy(b + sizeof(ih), &nh, sizeof(nh));
	memcpy(b + sizeof(ih) + o.hlen, rows, o.llen);
	memcpy(b + sizeof(ih) + o.hlen + o.llen, a.b, a.used);
	if ((rc = sections_new(&o, &nh, b + sizeof(ih) + o.hlen + o.llen +
	    a.used, &tail, err, cap)) != 0)
		goto out;
	ih.ih_format = shmt__format_word();
	ih.ih_size = n - sizeof(ih);
	ih.ih_arena_bytes = a.used;
	ih.ih_sum = shmt__fnv1a_words(SHMT_FNV_INIT, b + sizeof(ih),
	    ih.ih_size);
	ih.ih_hdr_sum = shmt__fnv1a(SHMT_FNV_INIT, &ih,
	    offsetof(struct img_hdr, ih_hdr_sum));
	memcpy(b, &ih, sizeof(ih));
	*out = b;
	*outlen = n;
	b = NULL;
	rc = 0;
out:
	free(b);
	free(a.b);
	free(rows);
	return rc;
}

void
shmt__migration_text(const struct shmt__migration *m, char *buf, size_t cap)
{
	char grown[200] = "";

	if (m->arena_grown > 0)
		snprintf(grown, sizeof(grown), "; the arena grew for the "
		    "override tables, to %" PRIu64 " bytes: raise arena in the "
		    "daemon's configuration to at least that, or every start and "
		    "reload fails to resize the segment (-ENOSPC)",
		    m->arena_bytes);
	snprintf(buf, cap, "migrated from segment format ABI %u to ABI %u: "
	    "%" PRIu32 " limiter%s (%" PRIu64 " use%s in flight, %" PRIu64
	    " client entr%s), %" PRIu64 " dictionary item%s, %" PRIu64
	    " counter%s, analyzer summaries %s; %" PRIu32 " deleted row%s "
	    "kept without storage, %" PRIu32 " half-defined row%s dropped%s",
	    m->from_abi, (unsigned)SHMT_ABI_VERSION, m->limiters,
	    m->limiters == 1 ? "" : "s", m->inflight,
	    m->inflight == 1 ? "" : "s", m->clients,
	    m->clients == 1 ? "y" : "ies", m->dict_items,
	    m->dict_items == 1 ? "" : "s", m->counters,
	    m->counters == 1 ? "" : "s", m->analyzer ? "kept" : "none",
	    m->deleted, m->deleted == 1 ? "" : "s", m->dropped,
	    m->dropped == 1 ? "" : "s", grown);
}

/* ---- A segment of ABI 6 or ABI 7 in /dev/shm ----------------------------- */

/*
 * A daemon of this version that finds a segment of ABI 6 or ABI 7 under its
 * name (shmt__segment_old_migrate) takes it over as that version's own move
 * (move.c) takes a segment into a new generation, in the terms its
 * library understands, so the old workers still attached to it stop
 * cleanly.  The words this touches are at the same places in both: the
 * segment header's state word, mover record and table lock (struct
 * shmt_hdr did not change), each shard's lock (its first word), each
 * row's wake word (lm_wake, at byte 640 of a row in both).
 *
 *   1. take the object's flock (migrations of it take turns: -EBUSY
 *      when another holds it), remove what migrations of it by processes
 *      that no longer run left (NAME.migrate.PID*), check the object's
 *      header (the old version's magic, format word, size, regions) and
 *      that no live daemon of that version holds it;
 *   2. read its state as the old version's settling does: FROZEN by a live
 *      mover is refused (SHMT_ESTALE, its mover record untouched); FROZEN
 *      by a dead one is undone (CAS FROZEN -> LIVE with the recorded
 *      freeze number) when NAME still names this object (same st_dev,
 *      st_ino), finished as MOVED when it names another, RETIRED when none
 *      (both refused, SHMT_ESTALE).  Only when it is LIVE, write this
 *      process as the mover and freeze it: one CAS of its state word from
 *      LIVE to FROZEN.  From there on an old worker's grant is not
 *      reported granted and its locked writers drop their lock without
 *      writing (the old version's move.c proves it); they wait for the
 *      outcome;
 *   3. wait until every writer lock (the limiter table's, every shard's)
 *      has been seen free, or held by a thread that no longer exists:
 *      whoever held one before the freeze has finished its write, and
 *      whoever takes one after it writes nothing;
 *   4. take its image (shmt__segment_old_image: the pieces word by word
 *      with 16-byte atomic loads, every live item and counter as a record,
 *      read with the old version's shard geometry, the analyzer's
 *      summaries), rewrite it in this format (shmt__image_migrate), and
 *      restore it as a snapshot under the private name NAME.migrate.PID
 *      (image.c: built under NAME.migrate.PID.restore.PID, checked,
 *      linked);
 *   5. check that the freeze is still ours (an old worker's recovery that
 *      took this process for a dead mover may have undone it: then uses
 *      granted since are not in the image, nothing is published and the
 *      answer is -EAGAIN), and publish it with rename(2) over
 *      /dev/shm/NAME, so every shm_open of NAME finds the old object or
 *      the new one;
 *   6. CAS the old state word from FROZEN (our freeze number) to RETIRED
 *      and wake its sleepers.  When that CAS fails (the freeze undone
 *      between 5's check and the rename) it is retired whatever its state,
 *      and the answer is SHMT_ECORRUPT, as the old move answers: uses
 *      granted in between may be lost.
 *      Old workers then answer SHMT_ESTALE on every call (the segment they
 *      mapped is retired), and a reopen of NAME with the old library
 *      answers SHMT_EFORMAT: they must be restarted against this library.
 *      Until they are, they enforce nothing and hold only their mapping of
 *      the retired object.
 * On any failure before 5 the freeze is undone (FROZEN -> LIVE) and the old
 * segment goes on as it was.  kill -9 of the migrating daemon leaves the
 * old segment FROZEN with a dead mover: the next migration (step 2) or
 * the old version's own recovery undoes it (before the rename: the name still points
 * to it; the next migration then takes it) or finishes it (after: MOVED;
 * its workers then find SHMT_EFORMAT at the name), and the private
 * objects NAME.migrate.PID and NAME.migrate.PID.restore.PID, which the
 * next migration of NAME removes (step 1).
 */

typedef unsigned __int128 u128;

/* Copy LEN bytes (a multiple of 16) of the mapping at SRC (16-aligned)
 * with 16-byte atomic loads: no shared word is copied half old. */
static void
copy16(unsigned char *dst, const unsigned char *src, uint64_t len)
{
	const u128 *s = (const u128 *)(const void *)src;

	for (uint64_t i = 0; i < len / sizeof(u128); i++) {
		u128 v = __atomic_load_n(&s[i], __ATOMIC_RELAXED);

		memcpy(dst + i * sizeof(u128), &v, sizeof(v));
	}
}

/* 1 + the highest bit set of X (X > 0). */
static uint32_t
bits_of(uint64_t x)
{
	uint32_t n = 0;

	while (x != 0) {
		n++;
		x >>= 1;
	}
	return n;
}

/*
 * The geometry of the store of format F (of BYTES heap bytes over SHARDS
 * shards; COUNTERS: the counters' store) in region RG of the mapping MAP,
 * computed here as that format's shmt__store_geometry computed it, with
 * its rules: a shard header of F->shard_bytes, then the index (one bucket
 * of 16 bytes, struct shmt_bucket9, per 128 heap bytes) from the next
 * line, the heap (the largest power of two in BYTES / SHARDS) from the
 * next page, F->shard_gap bytes more between shards.  This build's own
 * store geometry is not asked: a later format may change it, and this
 * reading of the old one must not follow.  0, or
 * SHMT_ECORRUPT when the parameters make no store of F or the region does
 * not match them.
 */
static int
store_old(const struct oldfmt *f, uint64_t bytes, uint32_t shards,
    int counters, const struct shmt_region *rg, unsigned char *map,
    struct shmt_store *st)
{
	uint64_t per, min = counters ? (64ULL << 10) : (2ULL << 20);

	memset(st, 0, sizeof(*st));
	st->counters = counters;
	if (bytes == 0)
		return rg->rg_size == 0 ? 0 : SHMT_ECORRUPT;
	if (shards == 0 || shards > 1024 || (shards & (shards - 1)) != 0)
		return SHMT_ECORRUPT;
	per = bytes / shards;
	if (per < min || per > (1ULL << 36))
		return SHMT_ECORRUPT;
	st->shards = shards;
	st->heap_bytes = 1ULL << (bits_of(per) - 1);
	st->order_max = bits_of(st->heap_bytes) - 1 - 6; /* 64-byte blocks */
	st->nbuckets = st->heap_bytes >> 7;
	st->index_off = shmt__align_up(f->shard_bytes, SHMT_LINE);
	st->heap_off = shmt__align_up(st->index_off +
	    st->nbuckets * sizeof(struct shmt_bucket9), SHMT_PAGE);
	st->stride = st->heap_off + st->heap_bytes + f->shard_gap;
	if (rg->rg_size != st->stride * st->shards)
		return SHMT_ECORRUPT;
	st->base = (char *)map + rg->rg_off;
	return 0;
}

/* The lock word of shard I of an old store ST: its first word (ds_lock,
 * in ABI 6 and ABI 7 alike). */
static const struct shmt_lock *
old_shard_lock(const struct shmt_store *st, uint32_t i)
{
	return (const struct shmt_lock *)(const void *)(st->base +
	    (uint64_t)i * st->stride);
}

/* The image under construction. */
struct buf {
	unsigned char *b;
	uint64_t len, cap;
};

/* ABI 7 to 9 laid out a shard's header as this build does (its undo
 * record at the same place). */
_Static_assert(sizeof(struct shmt_shard) == 896, "the shard header of ABI 7");

/*
 * The item a writer of old format F was writing over in place when it died,
 * in the shard SH of the old store ST: with the shard's version odd and its
 * undo record armed and sound (the checks of the repair, store.c), the
 * bytes the record saved stand for the item at *OFF (its own may be half
 * written), *LEN of them.  NULL (and *OFF UINT64_MAX) when there is none:
 * ABI 6 kept no record, and a record at rest or unsound is dropped, as the
 * repair drops it.
 */
static const unsigned char *
old_undo(const struct oldfmt *f, const struct shmt_store *st, const char *sh,
    uint64_t *off, uint64_t *len)
{
	const struct shmt_shard *hd = (const struct shmt_shard *)(const void *)sh;
	uint64_t at, n;
	struct shmt_item sv;

	*off = UINT64_MAX;
	if (f->shard_bytes != sizeof(struct shmt_shard) ||
	    (__atomic_load_n(&hd->ds_seq, __ATOMIC_ACQUIRE) & 1) == 0)
		return NULL;
	at = __atomic_load_n(&hd->ds_undo, __ATOMIC_RELAXED);
	n = __atomic_load_n(&hd->ds_undo_len, __ATOMIC_RELAXED);
	if (at == 0 || (at & SHMT_UNDO_SLOT) != 0 || at - 1 >= st->heap_bytes ||
	    (at - 1) % 64 != 0 || n < sizeof(sv) || n > SHMT_UNDO_MAX ||
	    st->heap_bytes - (at - 1) < n)
		return NULL;
	memcpy(&sv, hd->ds_undo_bytes, sizeof(sv));
	if (sv.it_magic != SHMT_IT_ALLOC || sv.it_order > st->order_max ||
	    ((at - 1) & ((64ULL << sv.it_order) - 1)) != 0 ||
	    n > (64ULL << sv.it_order))
		return NULL;
	*off = at - 1;
	*len = n;
	return hd->ds_undo_bytes;
}

/* Append the live items of the old store ST (store_old, format F) as a
 * section of KIND.  Every link and item is checked (item_at_lens: an
 * item's header is the same in every format); a shard's walk passes at
 * most as many items as its heap can hold, so a cycle or shared chains end
 * it with SHMT_ECORRUPT.  An item a dead writer was overwriting is carried
 * as its undo record saved it (old_undo): the old value, whole.  The index
 * is read as the old format laid it out (struct shmt_bucket9 at
 * ST->index_off), never through this build's views of a shard. */
static int
store_old_section(const struct oldfmt *f, const struct shmt_store *st,
    uint32_t kind, struct buf *o, uint64_t *count)
{
	struct img_sec s = { .is_kind = kind };
	uint64_t at = o->len;

	*count = 0;
	if (st->shards == 0)
		return 0;
	o->len += sizeof(s);
	for (uint32_t i = 0; i < st->shards; i++) {
		char *sh = st->base + (uint64_t)i * st->stride;
		const struct shmt_bucket9 *index = (const struct shmt_bucket9 *)
		    (const void *)(sh + st->index_off);
		char *heap = sh + st->heap_off;
		/* Every item takes a 64-byte block at least. */
		uint64_t budget = st->heap_bytes / 64, uoff, ulen = 0;
		const unsigned char *saved = old_undo(f, st, sh, &uoff, &ulen);

		for (uint64_t b = 0; b < st->nbuckets; b++) {
			uint64_t off = __atomic_load_n(&index[b].bk_head,
			    __ATOMIC_RELAXED);

			while (link_unit(off) != 0) {
				uint32_t lens;
				struct shmt_item *it, sv;
				const char *bytes;
				struct img_rec r;

				if (budget-- == 0)
					return SHMT_ECORRUPT;
				if (saved != NULL && link_off(off) == uoff) {
					memcpy(&sv, saved, sizeof(sv));
					lens = sv.it_lens;
					if (lens_klen(lens) == 0 ||
					    lens_klen(lens) > SHMT_KEY_MAX ||
					    lens_vlen(lens) > SHMT_VALUE_MAX ||
					    sizeof(sv) + lens_klen(lens) +
					    lens_vlen(lens) > ulen)
						return SHMT_ECORRUPT;
					it = &sv;
					bytes = (const char *)saved + sizeof(sv);
				} else {
					it = item_at_lens(st, heap, link_off(off),
					    &lens);
					if (it == NULL)
						return SHMT_ECORRUPT;
					bytes = item_key(it);
				}
				off = __atomic_load_n(&it->it_next,
				    __ATOMIC_RELAXED);
				r.ir_klen = lens_klen(lens);
				r.ir_vlen = lens_vlen(lens);
				r.ir_expire = it->it_expire;
				if (o->cap - o->len < sizeof(r) + r.ir_klen +
				    r.ir_vlen)
					return SHMT_ECORRUPT;
				memcpy(o->b + o->len, &r, sizeof(r));
				memcpy(o->b + o->len + sizeof(r), bytes,
				    (size_t)r.ir_klen + r.ir_vlen);
				o->len += sizeof(r) + r.ir_klen + r.ir_vlen;
				(*count)++;
			}
		}
	}
	s.is_count = *count;
	s.is_bytes = o->len - at - sizeof(s);
	memcpy(o->b + at, &s, sizeof(s));
	return 0;
}

/* Check the header of the segment MAP (SIZE bytes) of an older format
 * into *HDR, *F its format, and the stores' and the analyzer's geometry. */
static int
seg_old_check(const unsigned char *map, uint64_t size, struct shmt_hdr *hdr,
    const struct oldfmt **f, struct shmt_store *dict, struct shmt_store *ctr,
    struct shmt_an *an, char *err, size_t cap)
{
	uint64_t end = 0;

	if (size < sizeof(*hdr))
		return shmt__bad(err, cap, SHMT_ESIZE, "%" PRIu64 " bytes, shorter "
		    "than a segment header", size);
	copy16((unsigned char *)hdr, map, sizeof(*hdr));
	if (hdr->sh_magic != SHMT_MAGIC)
		return shmt__bad(err, cap, SHMT_EMAGIC, "not a shmthrottle "
		    "segment");
	if ((*f = oldfmt_of(hdr->sh_format)) == NULL ||
	    hdr->sh_abi != (*f)->abi)
		return shmt__bad(err, cap, SHMT_EFORMAT, "segment format %#"
		    PRIx64 " (ABI %u): this build migrates ABI 9, 8, 7 and 6 "
		    "only",
		    hdr->sh_format, hdr->sh_abi);
	if (hdr->sh_size != size)
		return shmt__bad(err, cap, SHMT_ESIZE, "%" PRIu64 " bytes, its "
		    "header says %" PRIu64, size, hdr->sh_size);
	if (hdr->sh_nregions != SHMT_R_COUNT)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "%u regions",
		    hdr->sh_nregions);
	for (int i = 0; i < SHMT_R_COUNT; i++) {
		uint64_t off = hdr->sh_regions[i].rg_off;
		uint64_t rl = hdr->sh_regions[i].rg_size;

		if (off < end || off > size || rl > size - off ||
		    off % SHMT_PAGE != 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "region %d is "
			    "out of order or range", i);
		end = off + rl;
	}
	if (shmt__params_an_geometry(&hdr->sh_params, an, NULL, 0) != 0)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its creation parameters "
		    "make no segment");
	if (store_old(*f, hdr->sh_params.sp_dict_bytes,
	    hdr->sh_params.sp_dict_shards, 0, &hdr->sh_regions[SHMT_R_DICT],
	    (unsigned char *)map, dict) != 0 ||
	    store_old(*f, hdr->sh_params.sp_counters_bytes,
	    hdr->sh_params.sp_counters_shards, 1,
	    &hdr->sh_regions[SHMT_R_COUNTERS], (unsigned char *)map, ctr) != 0 ||
	    hdr->sh_regions[SHMT_R_ANALYZER].rg_size != an->bytes)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its regions do not "
		    "match its creation parameters");
	/* Its analyzer is laid out as formats up to ABI 8 laid it out (ABI
	 * 9's as this build's). */
	if (an->bytes != 0 && (*f)->an_old) {
		struct shmt_an cur = *an;

		if (shmt__an_geometry_old(&cur, an) != 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "its creation "
			    "parameters make no analyzer");
	}
	an->base = (char *)map + hdr->sh_regions[SHMT_R_ANALYZER].rg_off;
	if (an->bytes == 0)
		an->base = NULL;
	return 0;
}

int
shmt__segment_old_image(const unsigned char *map, uint64_t size,
    const struct shmt__host_time *now, unsigned char **image, size_t *len,
    char *err, size_t cap)
{
	const struct oldfmt *f;
	struct shmt_store dict, ctr;
	struct shmt_an an, an_cur;
	struct shmt_hdr hdr;
	struct img_hdr ih;
	struct buf o = { 0 };
	uint64_t hlen, llen, used, arena, ndict, nctr;
	int64_t an_bytes = 0;
	int rc;

	*image = NULL;
	*len = 0;
	memset(&an, 0, sizeof(an));
	if ((rc = seg_old_check(map, size, &hdr, &f, &dict, &ctr, &an, err,
	    cap)) != 0)
		return rc;
	hlen = hdr.sh_regions[SHMT_R_HEADER].rg_size;
	llen = hdr.sh_regions[SHMT_R_LIMITERS].rg_size;
	arena = hdr.sh_regions[SHMT_R_ARENA].rg_size & ~(uint64_t)15;
	if (hlen % 16 != 0 || llen % 16 != 0)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its header or limiter "
		    "region is not a whole number of words");
	used = (__atomic_load_n((const uint64_t *)(const void *)(map +
	    offsetof(struct shmt_hdr, sh_arena_used)), __ATOMIC_ACQUIRE) + 15) &
	    ~(uint64_t)15;
	if (used > arena)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its arena's fill level "
		    "is past the arena");
	/* The analyzer is copied in the old layout, then rewritten in this
	 * build's (shmt__an_upgrade). */
	if (an.base != NULL) {
		if (shmt__params_an_geometry(&hdr.sh_params, &an_cur, NULL,
		    0) != 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "its creation "
			    "parameters make no analyzer");
		an_bytes = shmt__an_export_an(&an_cur, NULL, 0);
	}

	/* The most the image takes: the pieces, each store's heaps, the
	 * analyzer (a record is smaller than the block of its item). */
	o.cap = sizeof(ih) + hlen + llen + used + 3 * sizeof(struct img_sec) +
	    dict.heap_bytes * dict.shards + ctr.heap_bytes * ctr.shards +
	    (uint64_t)an_bytes;
	if ((o.b = malloc(o.cap)) == NULL)
		return shmt__bad(err, cap, -ENOMEM, "no memory for its image");
	o.len = sizeof(ih);
	copy16(o.b + o.len, map, hlen);
	copy16(o.b + o.len + hlen, map + hdr.sh_regions[SHMT_R_LIMITERS].rg_off,
	    llen);
	copy16(o.b + o.len + hlen + llen,
	    map + hdr.sh_regions[SHMT_R_ARENA].rg_off, used);
	/* The header's copy says the fill level used here. */
	memcpy(o.b + o.len + offsetof(struct shmt_hdr, sh_arena_used), &used,
	    sizeof(used));
	o.len += hlen + llen + used;
	for (int k = 0; k < 2; k++) {
		rc = k == 0 ? store_old_section(f, &dict, IMG_S_DICT, &o,
		    &ndict) : store_old_section(f, &ctr, IMG_S_COUNTERS, &o,
		    &nctr);
		if (rc != 0) {
			free(o.b);
			return shmt__bad(err, cap, rc, "its %s is damaged (a "
			    "chain names something that is not an item, or "
			    "loops)", k == 0 ? "dictionary" : "counters");
		}
	}
	if (an.base != NULL) {
		struct img_sec s = { .is_kind = IMG_S_ANALYZER };
		int64_t old = shmt__an_export_an(&an, NULL, 0), n = -ENOMEM;
		unsigned char *tmp = old > 0 ? malloc((size_t)old) : NULL;

		if (tmp != NULL &&
		    (n = shmt__an_export_an(&an, tmp, (uint64_t)old)) >= 0) {
			if (f->an_old)
				n = shmt__an_upgrade(&an_cur, tmp, (uint64_t)n,
				    o.b + o.len + sizeof(s),
				    o.cap - o.len - sizeof(s));
			else if ((uint64_t)n > o.cap - o.len - sizeof(s))
				n = -ENOMEM;
			else
				memcpy(o.b + o.len + sizeof(s), tmp,
				    (size_t)n);
		}
		free(tmp);
		if (n < 0) {
			free(o.b);
			return shmt__bad(err, cap, (int)n, "cannot copy its "
			    "analyzer");
		}
		s.is_bytes = (uint64_t)n;
		memcpy(o.b + o.len, &s, sizeof(s));
		o.len += sizeof(s) + (uint64_t)n;
	}
	memset(&ih, 0, sizeof(ih));
	ih.ih_magic = IMG_MAGIC;
	ih.ih_version = IMG_VERSION;
	ih.ih_hdr_size = sizeof(ih);
	ih.ih_format = f->format;
	ih.ih_wall_ns = now->wall_ns;
	ih.ih_mono_ns = now->mono_ns;
	memcpy(ih.ih_boot_id, now->boot_id, sizeof(ih.ih_boot_id));
	ih.ih_boot_id[sizeof(ih.ih_boot_id) - 1] = '\0';
	ih.ih_size = o.len - sizeof(ih);
	ih.ih_arena_bytes = used;
	ih.ih_sum = shmt__fnv1a_words(SHMT_FNV_INIT, o.b + sizeof(ih),
	    ih.ih_size);
	ih.ih_hdr_sum = shmt__fnv1a(SHMT_FNV_INIT, &ih,
	    offsetof(struct img_hdr, ih_hdr_sum));
	memcpy(o.b, &ih, sizeof(ih));
	*image = o.b;
	*len = o.len;
	return 0;
}

/* Wait until the lock word at L has been seen free, or naming a thread
 * that no longer exists: 0; -EBUSY when a live thread kept it WAIT_NS. */
static int
lock_quiet(const struct shmt_lock *l, uint64_t wait_ns)
{
	uint64_t start = shmt__clock_ns(CLOCK_MONOTONIC);

	for (;;) {
		uint32_t tid = __atomic_load_n(&l->lk_owner, __ATOMIC_ACQUIRE);
		char path[32];
		struct timespec ts = { 0, 1000000 };

		if (tid == 0)
			return 0;
		snprintf(path, sizeof(path), "/proc/%u", tid);
		if (access(path, F_OK) != 0)
			return 0;
		if (shmt__clock_ns(CLOCK_MONOTONIC) - start > wait_ns)
			return -EBUSY;
		nanosleep(&ts, NULL);
	}
}

/* Steps 3 of the protocol above: every writer lock of the frozen MAP, of
 * format F. */
static int
locks_quiet(unsigned char *map, const struct oldfmt *f,
    const struct shmt_store *dict, const struct shmt_store *ctr, char *err,
    size_t cap)
{
	const struct shmt_store *st[2] = { dict, ctr };

	if (lock_quiet((const struct shmt_lock *)(void *)(map +
	    offsetof(struct shmt_hdr, sh_table_lock)), 2000000000ULL) != 0)
		return shmt__bad(err, cap, -EBUSY, "a worker of ABI %u holds its "
		    "limiter table's lock", f->abi);
	for (int k = 0; k < 2; k++)
		for (uint32_t i = 0; i < st[k]->shards; i++)
			if (lock_quiet(old_shard_lock(st[k], i),
			    2000000000ULL) != 0)
				return shmt__bad(err, cap, -EBUSY, "a worker of "
				    "ABI %u holds the lock of %s shard %u",
				    f->abi, k == 0 ? "dictionary" : "counters",
				    i);
	return 0;
}

/* Wake every sleeper of the old segment's limiters (rows of format F). */
static void
wake_old(unsigned char *map, const struct shmt_hdr *hdr,
    const struct oldfmt *f)
{
	uint32_t n = hdr->sh_params.sp_max_limiters;
	unsigned char *rows = map + hdr->sh_regions[SHMT_R_LIMITERS].rg_off;

	if ((uint64_t)n * sizeof(struct shmt_lim6) >
	    hdr->sh_regions[SHMT_R_LIMITERS].rg_size)
		return;
	for (uint32_t r = 0; r < n; r++)
		shmt__wake_waiters((uint32_t *)(void *)(rows +
		    (uint64_t)r * sizeof(struct shmt_lim6) + f->wake_off));
}

/* 1 when the object FD is the one NAME names now, 0 when NAME names
 * another object, -ENOENT when none, or another -errno. */
static int
names_object(int fd, const char *name)
{
	char path[SHMT_SEGNAME_MAX + 16];
	struct stat a, b;

	if (fstat(fd, &a) != 0)
		return -errno;
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	if (stat(path, &b) != 0)
		return -errno;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Remove the private objects that migrations of NAME by processes that are
 * gone left behind: NAME.migrate.PID (a new segment built, not published)
 * and NAME.migrate.PID.restore.PID (one killed while being built). */
static void
sweep_dead_migrations(const char *name)
{
	char pre[SHMT_SEGNAME_MAX + 16], obj[SHMT_SEGNAME_MAX + 2];
	struct dirent *e;
	size_t n;
	DIR *d;

	if ((size_t)snprintf(pre, sizeof(pre), "%s.migrate.", name + 1) >=
	    sizeof(pre) || (d = opendir("/dev/shm")) == NULL)
		return;
	n = strlen(pre);
	while ((e = readdir(d)) != NULL) {
		char *end;
		long pid;

		if (strncmp(e->d_name, pre, n) != 0)
			continue;
		pid = strtol(e->d_name + n, &end, 10);
		if (end == e->d_name + n || pid <= 0 || pid > INT32_MAX ||
		    (*end != '\0' && *end != '.') ||
		    (pid != (long)shmt__env_pid() &&
		    shmt__pid_alive((pid_t)pid, 0)))
			continue;
		if ((size_t)snprintf(obj, sizeof(obj), "/%s", e->d_name) <
		    sizeof(obj))
			(void)shm_unlink(obj);
	}
	closedir(d);
}

/*
 * The old segment at LIVE (object FD, named NAME) before its freeze, as
 * its version's settling sees it (the same in ABI 6 and ABI 7): 0 LIVE (after undoing the freeze of a dead
 * mover when NAME still names this object), SHMT_ESTALE frozen by a live
 * mover, or moved or retired (a dead mover's freeze finished as the name
 * says: another object under NAME, MOVED; none, RETIRED).  Nothing is
 * written when it is LIVE or frozen by a live mover.
 */
static int
settle_old(struct shmt_hdr *live, int fd, const char *name, char *err,
    size_t cap)
{
	uint64_t w = shmt__genword_load(live), seen;
	uint32_t s = (uint32_t)w, seq = (uint32_t)(w >> 32);
	int64_t pid;
	uint64_t start;
	int own;

	if (s == SHMT_SEG_LIVE)
		return 0;
	if (s != SHMT_SEG_FROZEN)
		return shmt__bad(err, cap, SHMT_ESTALE, "it is not live (state "
		    "%u): moved or retired", s);
	/* The mover of freeze SEQ wrote its record before the freeze; every
	 * CAS below expects W whole, so a later mover's freeze is never
	 * undone on an older record. */
	pid = __atomic_load_n(&live->sh_mover_pid, __ATOMIC_ACQUIRE);
	start = __atomic_load_n(&live->sh_mover_start, __ATOMIC_ACQUIRE);
	if (pid > 0 && pid <= INT32_MAX && shmt__pid_alive((pid_t)pid, start))
		return shmt__bad(err, cap, SHMT_ESTALE, "it is being moved or "
		    "migrated by pid %" PRId64 " (state %u)", pid, s);
	seen = w;
	if ((own = names_object(fd, name)) == -ENOENT) {
		(void)shmt__genword_cas(live, &seen, SHMT_SEG_RETIRED, seq);
		return shmt__bad(err, cap, SHMT_ESTALE, "it was frozen by pid %"
		    PRId64 ", which is gone, and no longer has a name: retired",
		    pid);
	}
	if (own < 0)
		return shmt__bad(err, cap, own, "cannot look up %s: %s", name,
		    strerror(-own));
	if (!own) {
		(void)shmt__genword_cas(live, &seen, SHMT_SEG_MOVED, seq);
		return shmt__bad(err, cap, SHMT_ESTALE, "it was frozen by pid %"
		    PRId64 ", which is gone, and %s names another object now: "
		    "moved", pid, name);
	}
	/* The name is still this object's: the dead mover published
	 * nothing, so its freeze is undone and the segment is as it was. */
	if (!shmt__genword_cas(live, &seen, SHMT_SEG_LIVE, seq) &&
	    (uint32_t)seen != SHMT_SEG_LIVE)
		return shmt__bad(err, cap, SHMT_ESTALE, "it is not live (state "
		    "%u): moved or retired", (uint32_t)seen);
	return 0;
}

int
shmt__segment_old_migrate(const char *name, const struct shmt__host_time *now,
    shmt_clock_fn clock, void *clock_ctx, struct shmt__migration *m,
    char *err, size_t cap)
{
	char tmp[SHMT_SEGNAME_MAX + 1];
	char from[SHMT_SEGNAME_MAX + 16], to[SHMT_SEGNAME_MAX + 16];
	const struct oldfmt *f = NULL;
	struct shmt_store dict, ctr;
	struct shmt_an an;
	struct shmt_hdr hdr;
	struct shmt_hdr *live = NULL;
	struct stat sb;
	unsigned char *map = MAP_FAILED, *img = NULL, *imgn = NULL;
	size_t len = 0, lenn = 0;
	uint64_t w;
	uint32_t seq = 0;
	int fd, rc, frozen = 0, built = 0;

	memset(m, 0, sizeof(*m));
	if (name == NULL || now == NULL || shmt__name_check(name) != 0)
		return shmt__bad(err, cap, -EINVAL, "bad segment name");
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.migrate.%ld", name,
	    (long)shmt__env_pid()) >= sizeof(tmp))
		return shmt__bad(err, cap, -ENAMETOOLONG, "segment name %s is too "
		    "long to migrate under a private name", name);
	if ((fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0)) < 0)
		return shmt__bad(err, cap, -errno, "cannot open %s: %s", name,
		    strerror(errno));
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
	    (sb.st_uid != geteuid() && sb.st_uid != 0) ||
	    (sb.st_mode & S_IWOTH) != 0) {
		close(fd);
		return shmt__bad(err, cap, SHMT_EUNTRUSTED, "%s is not a regular "
		    "object of this user or root, or every user may write it",
		    name);
	}
	/* Migrations of one object take turns (the lock goes with the
	 * descriptor: a killed migrator's is released by its death). */
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return shmt__bad(err, cap, rc, "another process is migrating %s",
		    name);
	}
	/* What migrations of it killed midway left, this pid's included. */
	sweep_dead_migrations(name);
	if (sb.st_size < (off_t)sizeof(hdr) || (map = mmap(NULL,
	    (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
	    MAP_FAILED) {
		rc = sb.st_size < (off_t)sizeof(hdr) ? SHMT_ESIZE : -errno;
		close(fd);
		return shmt__bad(err, cap, rc, "cannot map %s", name);
	}
	live = (struct shmt_hdr *)(void *)map;
	memset(&an, 0, sizeof(an));
	if ((rc = seg_old_check(map, (uint64_t)sb.st_size, &hdr, &f, &dict,
	    &ctr, &an, err, cap)) != 0)
		goto out;
	/* 1. No live daemon of its version on it. */
	if (hdr.sh_daemon_pid > 0 && hdr.sh_daemon_pid != shmt__env_pid() &&
	    shmt__pid_alive((pid_t)hdr.sh_daemon_pid, hdr.sh_daemon_start)) {
		rc = shmt__bad(err, cap, -EBUSY, "its daemon (pid %" PRId64 ", of "
		    "ABI %u) still runs: stop it first", hdr.sh_daemon_pid,
		    f->abi);
		goto out;
	}
	/* 2. Its state first, as its version's settling reads it: a freeze left by
	 * a dead mover is undone (the name still this object's) or finished;
	 * one of a live mover is left alone, its record with it. */
	w = shmt__genword_load(live);
	if ((rc = settle_old(live, fd, name, err, cap)) != 0)
		goto out;
	if ((uint32_t)w != SHMT_SEG_LIVE)
		wake_old(map, &hdr, f);
	/* The freeze, as its version's move makes it: the mover's record, then one
	 * CAS from LIVE. */
	w = shmt__genword_load(live);
	seq = (uint32_t)(w >> 32) + 1;
	if ((uint32_t)w != SHMT_SEG_LIVE) {
		rc = shmt__bad(err, cap, SHMT_ESTALE, "it is not live (state %u): "
		    "retired, or being moved", (uint32_t)w);
		goto out;
	}
	__atomic_store_n(&live->sh_mover_pid, (int64_t)shmt__env_pid(),
	    __ATOMIC_RELAXED);
	__atomic_store_n(&live->sh_mover_start,
	    shmt__proc_start(shmt__env_pid()), __ATOMIC_RELEASE);
	if (!shmt__genword_cas(live, &w, SHMT_SEG_FROZEN, seq)) {
		rc = shmt__bad(err, cap, SHMT_ESTALE, "it is not live (state %u): "
		    "retired, or being moved", (uint32_t)w);
		goto out;
	}
	frozen = 1;
	/* 3, 4. Quiet locks, the image, this format, the new segment. */
	if ((rc = locks_quiet(map, f, &dict, &ctr, err, cap)) != 0 ||
	    (rc = shmt__segment_old_image(map, (uint64_t)sb.st_size, now,
	    &img, &len, err, cap)) != 0 ||
	    (rc = shmt__image_migrate(img, len, &imgn, &lenn, m, err,
	    cap)) != 0 ||
	    (rc = shmt__image_restore(imgn, lenn, tmp, now, clock, clock_ctx,
	    err, cap)) != 0)
		goto out;
	built = 1;
	/* 5. Publish, while the freeze is still ours: an old worker's
	 * recovery that took this process for a dead mover may have undone
	 * it, and uses granted since are not in the image. */
	w = shmt__genword_load(live);
	if (w != shmt__genword(SHMT_SEG_FROZEN, seq)) {
		frozen = 0;
		rc = shmt__bad(err, cap, -EAGAIN, "its freeze was undone during "
		    "the migration (state word %#" PRIx64 "): nothing was "
		    "published and the old segment goes on as it is; migrate it "
		    "again", w);
		goto out;
	}
	snprintf(from, sizeof(from), "/dev/shm%s", tmp);
	snprintf(to, sizeof(to), "/dev/shm%s", name);
	if (rename(from, to) != 0) {
		rc = shmt__bad(err, cap, -errno, "cannot publish %s by rename(2) "
		    "from %s: %s", name, tmp, strerror(errno));
		goto out;
	}
	frozen = 0;
	built = 0;
	m->published = 1;
	/* 6. Retire the old one: its workers answer SHMT_ESTALE. */
	w = shmt__genword(SHMT_SEG_FROZEN, seq);
	rc = 0;
	if (!shmt__genword_cas(live, &w, SHMT_SEG_RETIRED, seq)) {
		/* The freeze was undone between the check and the rename:
		 * uses may have been granted on the old segment after its
		 * copy.  The name is the new one's: the old one takes no
		 * more, whatever its state, and the caller hears of it. */
		uint64_t seen = w;

		while ((uint32_t)w != SHMT_SEG_RETIRED &&
		    !shmt__genword_cas(live, &w, SHMT_SEG_RETIRED,
		    (uint32_t)(w >> 32)))
			;
		rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s migrated, but its "
		    "freeze was undone during the migration (state word %#"
		    PRIx64 "): uses granted by workers of ABI %u in between "
		    "may be lost; check it with 'shmthrottle -s %s check'",
		    name, seen, f->abi, name);
	}
	wake_old(map, &hdr, f);
out:
	if (frozen) {
		w = shmt__genword(SHMT_SEG_FROZEN, seq);
		(void)shmt__genword_cas(live, &w, SHMT_SEG_LIVE, seq);
		wake_old(map, &hdr, f);
	}
	if (built && rc != 0)
		(void)shm_unlink(tmp);
	free(img);
	free(imgn);
	munmap(map, (size_t)sb.st_size);
	close(fd);
	return rc;
}
