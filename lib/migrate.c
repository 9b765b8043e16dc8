/* SPDX-License-Identifier: MIT */
/*
 * Upgrades: an image (image.c) of a segment of the previous format, ABI 6,
 * rewritten as an image of this build's format, which image.c then
 * restores as any other (checked record by record, re-inserted through the
 * store's calls, checked whole with shmt_check before it is published).
 *
 * What changed from ABI 6 to ABI 7, and what the rewrite does with it:
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
 *    free-list mask and an undo record.  An image holds no shard: its
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

#include "clients.h"
#include "image.h"
#include "layout.h"
#include "limiter.h"
#include "table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The format word of ABI 6 (layout.c's shmt__format_word as that version
 * built it on LP64 little-endian with gcc or clang). */
#define FORMAT_ABI6 0x0006f8ef2fad6518ULL

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
    offsetof(struct shmt_lim, lm_burst), "the identity's head is the same");

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
	if (ih->ih_format != FORMAT_ABI6)
		return shmt__bad(err, cap, SHMT_EFORMAT, "written for segment "
		    "format %#" PRIx64 " (ABI %u); this build migrates ABI 6 "
		    "(%#llx) only", ih->ih_format,
		    (unsigned)(ih->ih_format >> 48), (unsigned long long)
		    FORMAT_ABI6);
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

	/* The segment header, as ABI 6 validated it at open. */
	if (h->sh_magic != SHMT_MAGIC || h->sh_abi != 6 ||
	    h->sh_format != FORMAT_ABI6 || h->sh_nregions != SHMT_R_COUNT)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "the image's segment "
		    "header is not one of ABI 6");
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

/* Convert the client entries of a per-client row: NCAP entries of ENTSIZE
 * bytes at OLD to NEW; count the live ones and their uses in flight. */
static void
clients_convert(const unsigned char *from, unsigned char *to, uint32_t ncap,
    uint32_t entsize, struct shmt__migration *m)
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
		if ((SHMT_W_TAG(e.ce_w) >> 14) == CE_LIVE) {
			m->clients++;
			m->inflight += SHMT_W_INFLIGHT(e.ce_w);
		}
	}
}

/* Convert the READY row R6 (row R) into *R7, its storage copied from the
 * old arena into A at the places shmt_limiter_define would give it. */
static int
row_convert(const struct old *o, uint32_t r, const struct shmt_lim6 *r6,
    struct shmt_lim *r7, struct arena *a, struct shmt__migration *m,
    char *err, size_t cap)
{
	shmt_limit_t l;
	struct lim_geom g;
	uint64_t ring_off, keys_off, cl_off, ov_off, end, keys_bytes = 0;
	char why[160];
	int per_client = (r6->lm_flags & SHMT_LIMF_PER_CLIENT) != 0;

	if (memchr(r6->lm_name, '\0', sizeof(r6->lm_name)) == NULL ||
	    r6->lm_name[0] == '\0')
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter row %u: its "
		    "name is empty or not terminated", r);
	/* The row's parameters, through the same rules as a definition. */
	memset(&l, 0, sizeof(l));
	l.limit = r6->lm_limit;
	l.window_ns = r6->lm_window;
	l.slack_ns = r6->lm_slack;
	l.slack_uses = r6->lm_slack_uses;
	l.mode = (int)r6->lm_mode;
	l.per_client = per_client;
	l.client_capacity = per_client ? r6->lm_capacity : 0;
	l.burst = r6->lm_burst;
	l.global = (r6->lm_flags & SHMT_LIMF_GLOBAL) != 0;
	why[0] = '\0';
	if (r6->lm_mode > SHMT_MODE_GCRA || (r6->lm_flags & ~0xfU) != 0 ||
	    shmt__limit_check(&l, &g, why, sizeof(why)) != 0 ||
	    g.nb != r6->lm_nbuckets || (per_client && r6->lm_entsize != g.entsize))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
		    "inconsistent parameters%s%s", r6->lm_name,
		    why[0] != '\0' ? ": " : "", why);
	if (r6->lm_flags & SHMT_LIMF_KEYS) {
		if (r6->lm_nkeys == 0 || r6->lm_nkeys > SHMT_KEYS_MAX ||
		    r6->lm_keymax == 0 || r6->lm_keymax > SHMT_KEYNAME_MAX ||
		    r6->lm_keystride != ((r6->lm_keymax + 1 + 7) & ~7U) ||
		    r6->lm_uses_per_key == 0 ||
		    (uint64_t)r6->lm_nkeys * r6->lm_uses_per_key != r6->lm_limit)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
			    "inconsistent key pool", r6->lm_name);
		keys_bytes = (uint64_t)r6->lm_nkeys * r6->lm_keystride;
	} else if (r6->lm_nkeys != 0) {
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: keys "
		    "without a key pool", r6->lm_name);
	}
	/* Every span the row names lies in the old arena's used part. */
	if (r6->lm_ring_off % 16 != 0 || r6->lm_keys_off % 16 != 0 ||
	    r6->lm_clients_off % 16 != 0 ||
	    !old_span(o, r6->lm_ring_off, g.ring_bytes) ||
	    !old_span(o, r6->lm_keys_off, keys_bytes) ||
	    !old_span(o, r6->lm_clients_off, g.clients_bytes))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: storage "
		    "outside the image's arena (%" PRIu64 " bytes)", r6->lm_name,
		    o->arena_used);

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
		    r6->lm_capacity, r6->lm_entsize, m);
	else
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
	uint32_t nrows, per_client = 0;
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
	m->from_abi = 6;
	nrows = o.hdr.sh_params.sp_max_limiters;

	/* Room for the new arena: the old one's used part, each row's
	 * alignment (three lines at most) and each per-client row's new
	 * override table. */
	for (uint32_t r = 0; r < nrows; r++) {
		struct shmt_lim6 r6;

		memcpy(&r6, o.body + o.hlen + (uint64_t)r * sizeof(r6),
		    sizeof(r6));
		if (r6.lm_state == SHMT_LIM_READY &&
		    (r6.lm_flags & SHMT_LIMF_PER_CLIENT))
			per_client++;
	}
	a.cap = o.arena_used + (uint64_t)nrows * 3 * SHMT_LINE +
	    (uint64_t)per_client * SHMT_OVERRIDES_DEFAULT *
	    sizeof(struct shmt_override);
	if ((a.b = calloc(1, a.cap)) == NULL ||
	    (rows = aligned_alloc(alignof(struct shmt_lim),
	    (size_t)nrows * sizeof(*rows))) == NULL) {
		rc = shmt__bad(err, cap, -ENOMEM, "no memory for the migration");
		goto out;
	}
	memset(rows, 0, (size_t)nrows * sizeof(*rows));
	for (uint32_t r = 0; r < nrows; r++) {
		struct shmt_lim6 r6;

		memcpy(&r6, o.body + o.hlen + (uint64_t)r * sizeof(r6),
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
			rows[r].lm_state = SHMT_LIM_DELETED;
			memcpy(rows[r].lm_name, r6.lm_name,
			    sizeof(rows[r].lm_name));
			rows[r].lm_name[SHMT_LIMITER_NAME_MAX] = '\0';
			m->deleted++;
			break;
		case SHMT_LIM_READY:
			if ((rc = row_convert(&o, r, &r6, &rows[r], &a, m, err,
			    cap)) != 0)
				goto out;
			break;
		default:
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "limiter row %u: "
			    "unknown state %u", r, r6.lm_state);
			goto out;
		}
	}
	a.used = shmt__align_up(a.used, 16);

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

	/* The new image: header, pieces, the sections as they were. */
	tail = o.size - o.rest;
	n = sizeof(ih) + o.hlen + o.llen + a.used + tail;
	if ((b = malloc(n)) == NULL) {
		rc = shmt__bad(err, cap, -ENOMEM, "no memory for the migration");
		goto out;
	}
	memcpy(b + sizeof(ih), o.body, o.hlen);
	memcpy(b + sizeof(ih), &nh, sizeof(nh));
	memcpy(b + sizeof(ih) + o.hlen, rows, o.llen);
	memcpy(b + sizeof(ih) + o.hlen + o.llen, a.b, a.used);
	memcpy(b + sizeof(ih) + o.hlen + o.llen + a.used, o.body + o.rest,
	    tail);
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
	    m->dropped == 1 ? "" : "s",
	    m->arena_grown > 0 ? "; the arena grew for the override tables" :
	    "");
}
