/* SPDX-License-Identifier: MIT */
/*
 * Segment images: the bytes a snapshot holds (the limiters' part of the
 * segment, then every live dictionary item, every counter and the
 * analyzer's summaries), how they are taken from a live segment, and how a
 * segment is rebuilt from them, checked and published.  The daemon only
 * moves these bytes to and from files (daemon/snapshot.c).
 *
 * The image.  A 112-byte header (struct img_hdr: magic, version, the
 * segment format word, the wall and monotonic clocks and the boot id when
 * it was taken, sizes, two checksums), then three pieces copied word by
 * word from the segment (the header region, the limiter table, the used
 * part of the arena), then sections, each a struct img_sec and its bytes:
 *   dictionary  records {u32 klen, u32 vlen, u64 expire} key value
 *   counters    the same records; the values are the counters' own bytes
 *               (counters.c reads them back: shmt__cnt_restore)
 *   analyzer    the analyzer's own bytes (analyzer.c: shmt__an_export)
 * A restore keeps no slot, stripe owner or lock word: they name
 * processes and threads of the old segment, and after a reboot a lock's
 * owner id may name a live, unrelated thread.  Slots, stripe owners and
 * the shards' locks are not in the image; the header region and the
 * limiter rows are, lock words included, and the restore puts the old
 * header's counts into a new header (not its lock) and clears the rows'
 * client locks (fill_limiters).  Version 2 images (the pieces only) are
 * still read: their dictionary comes back empty.
 *
 * Consistency.  The pieces are copied word by word (see copy_range).
 * Most words stand alone, and for them the image is what a kill -9 of
 * everyone at each word's copy would leave.  Not so a limiter's state word
 * W and its storage (an exact limiter's grant hint and log, a ring's
 * word and slots): copied at different moments, grants in between leave
 * records ahead of the hint or slots reused for newer buckets, which no
 * kill -9 leaves and shmt_check refuses.  So every shared exact or buckets
 * limiter's row and storage are copied again as one cut (copy_cuts): W
 * read, the row and the storage copied, W read again; when both reads
 * agree (whole 16 bytes: the hint and the tag only grow, a ring's word
 * rises lexicographically, see ring.c "Torn reads"), nothing that W
 * names changed in between (a grant changes W; a slot changes without W
 * only where W does not look yet: grant n's own record with the hint
 * still n, a bucket opened ahead of tail, the active bucket's count), so
 * the pair is what a kill -9 of everyone at the second read would leave.
 * After IMG_CUT_TRIES tries without agreement (a limiter busier than its
 * copy is long) the last copy is repaired, from the row's W as copied (an
 * atomic read before the storage's copy), with NOW a clock value read
 * after it:
 *   exact: the hint moves to the number after the highest record copied,
 *     m.  A record of grant k is written only after grants below k are,
 *     so at the moment grant m - 1 was recorded the log held the latest
 *     grant below m of each slot; a copied slot holds that grant with its
 *     own time, or an older one (copied before it was overwritten), which
 *     is rewritten to it stamped NOW, no earlier than its true time.  So
 *     the image is the log at that moment with some times later: never
 *     more permissive (fix_exact_copy, as shmt_check's repair does).
 *   buckets: every bucket the copied W names held its slot at W's read
 *     (a slot is opened before W names it, a sealed count is final before
 *     the seal's CAS); a slot found holding a newer serial was released
 *     and reused since.  It is put back closed at NOW holding the uses W
 *     counts in flight that no other bucket holds (sealed counts add up
 *     to W's in flight less the active count), and close times are raised
 *     to keep their order.  So the image is the ring at W's read with some
 *     releases put off: uses in flight then stay in flight at least as
 *     long (fix_ring_copy).
 * A move (move.c) builds its new segment from such an image, so what it
 * carries into a new definition (redefine.c) is one of these states too.
 * Per-client limiters' entries are still copied word by word (their
 * words and rings; shmt__clients_restore finishes a claim half done).
 * A shard of the dictionary or
 * of the counters is copied whole under its writer lock: writers of that
 * shard wait for the copy (readers never do), so the image holds each
 * shard as it was at one instant.  (An optimistic copy under the shard's
 * version would not block writers, but counters change in place under the
 * lock without touching the version, and one code path for both is worth
 * a millisecond of a writer's wait per megabyte of shard.)
 *
 * Time base.  Stored times are CLOCK_MONOTONIC, which restarts near zero
 * at every boot.  On the same boot (same boot id) they are still valid and
 * kept as they are.  Across a reboot a time T of the old boot becomes
 * T + delta with delta = mono_now - (mono_then + elapsed), elapsed being
 * the wall-clock time between image and restore, never taken below 0: a
 * release time or an expiry stays as far in the future as it was, minus
 * the time that truly passed (an item with 10 minutes to live, restored 3
 * minutes of wall time later, has 7).  A wall clock stepped back keeps
 * things longer (safe for limits); only a wall clock stepped forward
 * between the two could release them early, and nothing on the host can
 * tell.
 *
 * Restore.  Nothing in an image is trusted: the header, every region of
 * the segment header, every section and record is checked for bounds and
 * counts before use.  The segment is created under a private name, its
 * limiters filled from the pieces and rebased, its items re-inserted
 * through the store's own calls (largest blocks first, so the buddy
 * allocator places every item that fitted before), checked with
 * shmt_check, and only then published under its name with one link(2).
 */
#include "daemon.h"

#include "analyzer.h"
#include "clients.h"
#include "counters.h"
#include "dict.h"
#include "image.h"
#include "layout.h"
#include "limiter.h"
#include "lock.h"
#include "proc.h"
#include "ring.h"
#include "segment.h"
#include "table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { P_HEADER, P_LIMITERS, P_ARENA, P_COUNT };

/* Tries at copying a limiter's word and storage as one cut. */
#define IMG_CUT_TRIES 8

struct piece {
	uint64_t off, len;
};

typedef unsigned __int128 u128;

static void
pieces_of(const struct shmt_region *reg, uint64_t arena_used,
    struct piece p[P_COUNT])
{
	p[P_HEADER] = (struct piece){ reg[SHMT_R_HEADER].rg_off,
		reg[SHMT_R_HEADER].rg_size };
	p[P_LIMITERS] = (struct piece){ reg[SHMT_R_LIMITERS].rg_off,
		reg[SHMT_R_LIMITERS].rg_size };
	p[P_ARENA] = (struct piece){ reg[SHMT_R_ARENA].rg_off, arena_used };
}

void
shmt__host_time_now(struct shmt__host_time *t)
{
	memset(t, 0, sizeof(*t));
	t->wall_ns = shmt__clock_ns(CLOCK_REALTIME);
	t->mono_ns = shmt__clock_ns(CLOCK_MONOTONIC);
	if (shmt__proc_read("/proc/sys/kernel/random/boot_id", t->boot_id,
	    sizeof(t->boot_id)) != 0)
		memset(t->boot_id, 0, sizeof(t->boot_id));
	t->boot_id[sizeof(t->boot_id) - 1] = '\0';
	t->boot_id[strcspn(t->boot_id, "\n")] = '\0';
}

int64_t
shmt__image_delta(uint64_t then_wall, uint64_t then_mono, uint64_t now_wall,
    uint64_t now_mono, int same_boot)
{
	uint64_t elapsed = now_wall > then_wall ? now_wall - then_wall : 0;

	if (same_boot)
		return 0;
	return (int64_t)(now_mono - then_mono - elapsed);
}

/* ---- Taking an image ---------------------------------------------------- */

/* The image under construction: a buffer sized once, before any lock is
 * taken, for the most the segment can hold. */
struct out {
	unsigned char *b;
	uint64_t len, cap;
};

/*
 * Copy the mapping 16 bytes at a time with atomic 16-byte loads.  Every
 * shared word of the segment (8 or 16 bytes, naturally aligned) lies inside
 * one such chunk, so no word is ever copied half old, half new while
 * workers change it.
 */
static void
copy_range(const shmt_t *h, unsigned char *dst, uint64_t off, uint64_t len)
{
	const u128 *src = (const u128 *)(const void *)(h->base + off);

	for (uint64_t i = 0; i < len / sizeof(u128); i++) {
		u128 v = __atomic_load_n(&src[i], __ATOMIC_RELAXED);

		memcpy(dst + i * sizeof(u128), &v, sizeof(v));
	}
}

/*
 * Copy the pieces, packed.  The limiter table goes first, the arena's fill
 * level is read after it: a row that is ready in the copy had its storage
 * allocated before it was published, so that storage lies below the level
 * read and is copied too.  The header region is copied after the level, so
 * its own copy of the level is at least the one used here; *ARENA gets the
 * level used.
 */
static void
copy_pieces(const shmt_t *h, struct out *o, uint64_t *arena)
{
	uint64_t size = h->reg[SHMT_R_ARENA].rg_size & ~(uint64_t)15;
	uint64_t hlen = h->reg[SHMT_R_HEADER].rg_size;
	uint64_t llen = h->reg[SHMT_R_LIMITERS].rg_size;
	uint64_t used;

	copy_range(h, o->b + o->len + hlen, h->reg[SHMT_R_LIMITERS].rg_off,
	    llen);
	used = __atomic_load_n(&h->hdr->sh_arena_used, __ATOMIC_ACQUIRE);
	used = (used + 15) & ~(uint64_t)15;
	if (used > size)
		used = size;
	copy_range(h, o->b + o->len, 0, hlen);
	copy_range(h, o->b + o->len + hlen + llen, h->reg[SHMT_R_ARENA].rg_off,
	    used);
	o->len += hlen + llen + used;
	*arena = used;
}

/*
 * A row's word and storage copied as one cut (see "Consistency" at the
 * top): copy row R's table entry to ROWC and its NB storage bytes at
 * arena offset OFF to STC, and say whether W held one value from before
 * the row's copy to after the storage's (then the pair is what a kill -9
 * of everyone at that instant would leave).  Tried a few times.
 */
static int
copy_row_cut(const shmt_t *h, struct shmt_lim *lim, unsigned char *rowc,
    uint64_t off, uint64_t nb, unsigned char *stc)
{
	uint64_t roff = (uint64_t)((const char *)lim - (const char *)h->base);
	uint64_t aoff = h->reg[SHMT_R_ARENA].rg_off + off;

	for (int i = 0; i < IMG_CUT_TRIES; i++) {
		uint64_t w1[2], w2[2];

		shmt__load128(&lim->lm_w, w1);
		copy_range(h, rowc, roff, sizeof(*lim));
		copy_range(h, stc, aoff, nb);
		shmt__load128(&lim->lm_w, w2);
		if (w1[0] == w2[0] && w1[1] == w2[1])
			return 1;
	}
	return 0;
}

/*
 * Make the copied exact log at LOG (N slots) agree with the copied row
 * ROWC, whose hint was read before the log was copied: the hint becomes
 * the number after the highest record copied, and each slot that does not
 * hold the latest grant below it of its number is rewritten to that grant,
 * stamped NOW (a clock value read after the copy).  Slots holding another
 * slot's number are left for the check to name.
 */
static void
fix_exact_copy(struct shmt_lim *rowc, struct shmt_log_slot *log, int64_t N,
    uint64_t now)
{
	int64_t m = (int64_t)rowc->lm_w.w[0];

	if (m < 0 || m == INT64_MAX)
		return;                 /* damage: the check names it */
	for (int64_t i = 0; i < N; i++) {
		int64_t seq = log[i].ls_seq;

		if (seq < -N || (seq - i) % N != 0)
			return;
		if (seq >= m && seq < INT64_MAX - 1)
			m = seq + 1;
	}
	for (int64_t i = 0; i < N; i++) {
		int64_t want = m - 1 - (((m - 1 - i) % N) + N) % N;

		if (log[i].ls_seq != want) {
			log[i].ls_seq = want;
			log[i].ls_time = want >= 0 ? now : 0;
		} else if (log[i].ls_time > now) {
			log[i].ls_time = now;
		}
	}
	rowc->lm_w.w[0] = (uint64_t)m;
}

/*
 * Make the copied ring RING (view V's geometry) agree with the copied
 * row ROWC, whose word W was read before the ring was copied: a bucket W
 * names whose slot already holds a newer serial was released and its slot
 * reused during the copy; it is put back, closed at NOW (read after the
 * copy), holding its share of the uses W counts in flight that no other
 * bucket holds.  Then no bucket closes before the one before it (a close
 * time only moves later).  Anything else is left for the check to name.
 */
static void
fix_ring_copy(const struct shmt_lview *v, struct shmt_lim *rowc,
    struct shmt_ring_slot *ring, uint64_t now)
{
	struct shmt_w w = rowc->lm_w;
	struct bk_ctx c;
	uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w), n;
	uint64_t known = 0, left, prev = 0;
	unsigned char *put;

	shmt__bk_ctx_init(&c, v, ring);
	c.ntags = v->nkeys;
	c.check_tag = 0;
	if (!w_valid(&c, w))
		return;
	n = nsealed + SHMT_W_ACTIVE(w);
	if ((put = calloc(n > 0 ? n : 1, 1)) == NULL)
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t serial = tail - nsealed + i;
		struct shmt_ring_slot *sl = slot_of(&c, serial);
		int age = slot_is(sl->r, serial);

		if (age == SHMT_ECORRUPT)
			goto out;
		if (age == SLOT_STALE) {
			sl->r[0] = now;
			sl->r[1] = (uint64_t)serial << 32;
			put[i] = 1;
		} else if (serial != tail) {
			known += SLOT_COUNT(sl->r);
		}
	}
	if (known + SHMT_W_COUNT(w) > SHMT_W_INFLIGHT(w))
		goto out;
	left = SHMT_W_INFLIGHT(w) - SHMT_W_COUNT(w) - known;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t serial = tail - nsealed + i;
		struct shmt_ring_slot *sl = slot_of(&c, serial);

		if (put[i] && serial != tail) {
			uint64_t take = left < c.uses_cap ? left : c.uses_cap;

			sl->r[1] |= (uint32_t)take;
			left -= take;
		}
		if (sl->r[0] < prev)
			sl->r[0] = prev;
		prev = sl->r[0];
	}
out:
	free(put);
}

/*
 * Copy again, as one cut each, the word and storage of every shared
 * buckets or exact limiter of H over the pieces copied at B (header HLEN,
 * table LLEN, arena USED bytes), and where a busy limiter never holds
 * still for one, repair the copy (above).
 */
static void
copy_cuts(shmt_t *h, unsigned char *b, uint64_t hlen, uint64_t llen,
    uint64_t used)
{
	uint32_t nrows;
	struct shmt_lim *lim = shmt__rows(h, &nrows);
	unsigned char *tab = b + hlen, *ar = b + hlen + llen;

	for (uint32_t r = 0; r < nrows; r++) {
		/* The image's rows are not on their type's alignment: each is
		 * read into ROW, and written back from it when repaired. */
		unsigned char *at = tab + (uint64_t)r * sizeof(*lim);
		struct shmt_lim row, *rowc = &row;
		struct shmt_lview v;
		uint64_t off, nb;
		unsigned char *p;

		if ((uint64_t)(r + 1) * sizeof(*lim) > llen)
			break;
		memcpy(&row, at, sizeof(row));
		if (rowc->lm_state != SHMT_LIM_READY ||
		    shmt__view_fill(h, r, &lim[r], &v) != 0)
			continue;
		if (v.mode == SHMT_MODE_EXACT && v.log != NULL) {
			p = (unsigned char *)v.log;
			nb = (uint64_t)v.nlog * sizeof(struct shmt_log_slot);
		} else if (v.mode == SHMT_MODE_BUCKETS && v.ring != NULL) {
			p = (unsigned char *)v.ring;
			nb = (uint64_t)v.nb * sizeof(struct shmt_ring_slot);
		} else {
			continue;
		}
		off = (uint64_t)(p - (unsigned char *)shmt__region(h,
		    SHMT_R_ARENA));
		/* The copied row must name this storage, inside the copy. */
		if (rowc->lm_mode != v.mode || rowc->lm_ring_off != off ||
		    off > used || nb > used - off || off % 16 != 0)
			continue;
		if (copy_row_cut(h, &lim[r], at, off, nb, ar + off))
			continue;
		memcpy(&row, at, sizeof(row));
		if (v.mode == SHMT_MODE_EXACT)
			fix_exact_copy(rowc, (struct shmt_log_slot *)(void *)
			    (ar + off), (int64_t)v.nlog, shmt__now(h));
		else
			fix_ring_copy(&v, rowc, (struct shmt_ring_slot *)
			    (void *)(ar + off), shmt__now(h));
		memcpy(at, &row, sizeof(row));
	}
}

/* Append the live items of shard SH (held locked) as records; *COUNT
 * counts them.  SHMT_ECORRUPT when the shard holds more than its heap
 * (chains that share items or loop: damage).  The walk of the whole shard
 * passes at most chain_bound() items, as many as a sound shard holds in
 * all its chains: a bound per chain would let a shard whose every bucket
 * leads into one loop cost buckets x heap / 64 steps under the lock. */
static int
shard_records(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t now, struct out *o, uint64_t *count)
{
	struct shmt_bucket *index = shard_index(st, sh);
	char *heap = shard_heap(st, sh);
	uint64_t steps = chain_bound(st);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t off = index[b].bk_head;
		struct slot_copy sc;

		/* The slot's item first (a damaged slot is the check's: only
		 * an item a slot can hold is written). */
		slot_load(&index[b], &sc);
		if (!st->counters && sc.lens != 0 &&
		    (sc.expire == 0 || sc.expire > now)) {
			struct img_rec r = { .ir_klen = lens_klen(sc.lens),
			    .ir_vlen = lens_vlen(sc.lens),
			    .ir_expire = sc.expire };

			if (o->cap - o->len < sizeof(r) + r.ir_klen + r.ir_vlen)
				return SHMT_ECORRUPT;
			memcpy(o->b + o->len, &r, sizeof(r));
			memcpy(o->b + o->len + sizeof(r), slot_key(&sc),
			    (size_t)r.ir_klen + r.ir_vlen);
			o->len += sizeof(r) + r.ir_klen + r.ir_vlen;
			(*count)++;
		}

		while (link_unit(off) != 0) {
			uint32_t lens;
			struct shmt_item *it;
			struct img_rec r;

			if (steps == 0)
				return SHMT_ECORRUPT;
			steps--;
			it = item_at_lens(st, heap, link_off(off), &lens);
			if (it == NULL)
				break;
			off = it->it_next;
			if (expired(it, now))
				continue;
			r.ir_klen = lens_klen(lens);
			r.ir_vlen = lens_vlen(lens);
			r.ir_expire = it->it_expire;
			if (o->cap - o->len < sizeof(r) + r.ir_klen + r.ir_vlen)
				return SHMT_ECORRUPT;
			memcpy(o->b + o->len, &r, sizeof(r));
			memcpy(o->b + o->len + sizeof(r), item_key(it),
			    (size_t)r.ir_klen + r.ir_vlen);
			o->len += sizeof(r) + r.ir_klen + r.ir_vlen;
			(*count)++;
		}
	}
	return 0;
}

/* Append store ST's section of KIND: every shard copied under its lock. */
static int
store_section(shmt_t *h, const struct shmt_store *st, uint32_t kind,
    struct out *o)
{
	struct img_sec s = { .is_kind = kind };
	uint64_t at = o->len;
	int rc = 0;

	if (st == NULL || st->shards == 0)
		return 0;
	o->len += sizeof(s);
	for (uint32_t i = 0; i < st->shards && rc == 0; i++) {
		struct shmt_shard *sh = shard_at(st, i);

		if ((rc = shmt__shard_lock_any(st, sh)) < 0)
			return rc;
		rc = shard_records(st, sh, shmt__now(h), o, &s.is_count);
		shmt__unlock(&sh->ds_lock);
	}
	s.is_bytes = o->len - at - sizeof(s);
	memcpy(o->b + at, &s, sizeof(s));
	return rc;
}

/* Append the analyzer's section. */
static int
analyzer_section(shmt_t *h, struct out *o)
{
	struct img_sec s = { .is_kind = IMG_S_ANALYZER };
	int64_t n;

	if (h->an == NULL)
		return 0;
	n = shmt__an_export(h, o->b + o->len + sizeof(s),
	    o->cap - o->len - sizeof(s));
	if (n < 0)
		return (int)n;
	s.is_bytes = (uint64_t)n;
	memcpy(o->b + o->len, &s, sizeof(s));
	o->len += sizeof(s) + (uint64_t)n;
	return 0;
}

int
shmt__image_build(shmt_t *h, const struct shmt__host_time *now,
    unsigned char **image, size_t *len)
{
	struct img_hdr ih;
	struct out o = { 0 };
	uint64_t cap, arena;
	int rc;

	if (h == NULL || now == NULL || image == NULL || len == NULL)
		return -EINVAL;
	/* The most the image can take: the pieces, and each store's heap
	 * (a record is smaller than the block of its item) and the
	 * dictionary's slots (a record and SHMT_SLOT_DATA bytes each). */
	cap = sizeof(ih) + h->reg[SHMT_R_HEADER].rg_size +
	    h->reg[SHMT_R_LIMITERS].rg_size + h->reg[SHMT_R_ARENA].rg_size +
	    3 * sizeof(struct img_sec);
	if (h->dict != NULL)
		cap += (h->dict->heap_bytes + h->dict->nbuckets *
		    (sizeof(struct img_rec) + SHMT_SLOT_DATA)) *
		    h->dict->shards;
	if (h->counters != NULL)
		cap += h->counters->heap_bytes * h->counters->shards;
	if (h->an != NULL)
		cap += shmt__an_export(h, NULL, 0);
	if ((o.b = malloc(cap)) == NULL)
		return -ENOMEM;
	o.cap = cap;
	o.len = sizeof(ih);
	copy_pieces(h, &o, &arena);
	copy_cuts(h, o.b + sizeof(ih), h->reg[SHMT_R_HEADER].rg_size,
	    h->reg[SHMT_R_LIMITERS].rg_size, arena);
	if ((rc = store_section(h, h->dict, IMG_S_DICT, &o)) != 0 ||
	    (rc = store_section(h, h->counters, IMG_S_COUNTERS, &o)) != 0 ||
	    (rc = analyzer_section(h, &o)) != 0) {
		free(o.b);
		return rc;
	}
	memset(&ih, 0, sizeof(ih));
	ih.ih_magic = IMG_MAGIC;
	ih.ih_version = IMG_VERSION;
	ih.ih_hdr_size = sizeof(ih);
	ih.ih_format = shmt__format_word();
	ih.ih_wall_ns = now->wall_ns;
	ih.ih_mono_ns = now->mono_ns;
	memcpy(ih.ih_boot_id, now->boot_id, sizeof(ih.ih_boot_id));
	ih.ih_boot_id[sizeof(ih.ih_boot_id) - 1] = '\0';
	ih.ih_size = o.len - sizeof(ih);
	ih.ih_arena_bytes = arena;
	ih.ih_sum = shmt__fnv1a_words(SHMT_FNV_INIT, o.b + sizeof(ih),
	    ih.ih_size);
	ih.ih_hdr_sum = shmt__fnv1a(SHMT_FNV_INIT, &ih,
	    offsetof(struct img_hdr, ih_hdr_sum));
	memcpy(o.b, &ih, sizeof(ih));
	*image = o.b;
	*len = o.len;
	return 0;
}

/* ---- Checking an image ---------------------------------------------------- */

/* Check the image header IH of an image of LEN bytes. */
static int
check_header(const struct img_hdr *ih, uint64_t len, char *err, size_t cap)
{
	if (ih->ih_magic != IMG_MAGIC)
		return shmt__bad(err, cap, SHMT_EMAGIC,
		    "not a shmthrottle snapshot");
	if (ih->ih_version != IMG_VERSION &&
	    ih->ih_version != IMG_VERSION_PIECES)
		return shmt__bad(err, cap, SHMT_EFORMAT, "snapshot version %u, "
		    "this build reads versions %u and %u", ih->ih_version,
		    IMG_VERSION_PIECES, IMG_VERSION);
	if (ih->ih_hdr_size != sizeof(*ih))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "header of %u bytes, "
		    "version %u has %zu", ih->ih_hdr_size, ih->ih_version,
		    sizeof(*ih));
	if (ih->ih_hdr_sum != shmt__fnv1a(SHMT_FNV_INIT, ih,
	    offsetof(struct img_hdr, ih_hdr_sum)))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "header checksum "
		    "mismatch (the file is damaged)");
	if (ih->ih_format != shmt__format_word())
		return shmt__bad(err, cap, SHMT_EFORMAT, "written for segment "
		    "format %#" PRIx64 ", this build uses %#" PRIx64,
		    ih->ih_format, shmt__format_word());
	if (ih->ih_size != len - sizeof(*ih))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "truncated or padded: "
		    "%" PRIu64 " bytes of image, the header says %" PRIu64,
		    len - sizeof(*ih), ih->ih_size);
	return 0;
}

/* Check the segment header HDR that opens the image, that the pieces it
 * implies are what the image holds, and set *REST to where the sections
 * start (relative to the pieces). */
static int
check_pieces(const struct shmt_hdr *hdr, const struct img_hdr *ih,
    uint64_t *rest, char *err, size_t cap)
{
	struct shmt_region reg[SHMT_R_COUNT];
	struct piece p[P_COUNT];
	uint64_t sum;
	int rc;

	/* The segment header's own checks, as for a segment being opened:
	 * magic, format, regions in order, aligned, inside the size it
	 * claims, and the layout its creation parameters give. */
	if ((rc = shmt__hdr_validate(hdr, hdr->sh_size, reg)) != 0)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "the image's segment "
		    "header is inconsistent (%s)", shmt_strerror(rc));
	pieces_of(reg, ih->ih_arena_bytes, p);
	sum = p[P_HEADER].len + p[P_LIMITERS].len + p[P_ARENA].len;
	if (p[P_HEADER].off != 0 || p[P_HEADER].len < sizeof(*hdr) ||
	    p[P_HEADER].len % 16 != 0 || p[P_LIMITERS].len % 16 != 0 ||
	    ih->ih_arena_bytes % 16 != 0 ||
	    ih->ih_arena_bytes > reg[SHMT_R_ARENA].rg_size ||
	    sum > ih->ih_size ||
	    (ih->ih_version == IMG_VERSION_PIECES && sum != ih->ih_size))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "its pieces do not add "
		    "up to the image's layout");
	*rest = sum;
	return 0;
}

/* The sections of an image, found and bounded. */
struct sections {
	const unsigned char *at[4];     /* by kind; NULL: absent */
	uint64_t count[4], bytes[4];
};

/* Split [B, B + LEN) into sections: each kind at most once, in order,
 * each wholly inside. */
static int
find_sections(const unsigned char *b, uint64_t len, struct sections *s,
    char *err, size_t cap)
{
	uint64_t at = 0;
	uint32_t last = 0;

	memset(s, 0, sizeof(*s));
	while (at < len) {
		struct img_sec sec;

		if (len - at < sizeof(sec))
			return shmt__bad(err, cap, SHMT_ECORRUPT, "a section header "
			    "is cut short at byte %" PRIu64, at);
		memcpy(&sec, b + at, sizeof(sec));
		at += sizeof(sec);
		if (sec.is_kind <= last || sec.is_kind > IMG_S_ANALYZER ||
		    sec.is_pad != 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "section of kind "
			    "%u out of place", sec.is_kind);
		if (sec.is_bytes > len - at)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "section %u claims "
			    "%" PRIu64 " bytes, %" PRIu64 " are left", sec.is_kind,
			    sec.is_bytes, len - at);
		s->at[sec.is_kind] = b + at;
		s->count[sec.is_kind] = sec.is_count;
		s->bytes[sec.is_kind] = sec.is_bytes;
		at += sec.is_bytes;
		last = sec.is_kind;
	}
	return 0;
}

/* ---- Restoring ------------------------------------------------------------ */

/* Copy the limiters' pieces of IMG into the fresh segment T and set the
 * header fields that go with them.  T has the image's own layout, or (a
 * move, RESIZED) its own sizes: then the rows in use must fit T's table
 * and the arena's used part T's arena, which rows name by offsets from the
 * arena's start, so both move as they are. */
static int
fill_limiters(shmt_t *t, const unsigned char *img, const struct shmt_hdr *sh,
    const struct img_hdr *ih, int resized, char *err, size_t cap)
{
	struct shmt_hdr *th = t->hdr;
	uint64_t lim_src = sh->sh_regions[SHMT_R_LIMITERS].rg_size;
	uint64_t lim_len = lim_src;

	if (!resized) {
		for (int i = 0; i < SHMT_R_COUNT; i++)
			if (t->reg[i].rg_off != sh->sh_regions[i].rg_off ||
			    t->reg[i].rg_size != sh->sh_regions[i].rg_size)
				return shmt__bad(err, cap, SHMT_ECORRUPT, "region %d "
				    "of the image does not match its own "
				    "parameters", i);
	} else {
		const unsigned char *lp = img +
		    sh->sh_regions[SHMT_R_HEADER].rg_size;
		uint64_t used = 0, rows;

		/* Rows are taken first free first and never given back
		 * (deleted rows stay): the table in use ends at the last
		 * row that is not FREE. */
		for (uint64_t r = 0; r < lim_src / sizeof(struct shmt_lim); r++) {
			uint32_t state;

			memcpy(&state, lp + r * sizeof(struct shmt_lim) +
			    offsetof(struct shmt_lim, lm_state), sizeof(state));
			if (state != SHMT_LIM_FREE)
				used = r + 1;
		}
		rows = used * sizeof(struct shmt_lim);
		if (rows > t->reg[SHMT_R_LIMITERS].rg_size)
			return shmt__bad(err, cap, -ENOSPC, "%" PRIu64 " limiter "
			    "rows are in use, the new table holds %" PRIu64
			    ": keep max_limiters at %" PRIu64 " or more", used,
			    t->reg[SHMT_R_LIMITERS].rg_size /
			    sizeof(struct shmt_lim), used);
		if (ih->ih_arena_bytes > t->reg[SHMT_R_ARENA].rg_size)
			return shmt__bad(err, cap, -ENOSPC, "%" PRIu64 " arena bytes "
			    "are in use, the new arena holds %" PRIu64 ": keep "
			    "arena_bytes at %" PRIu64 " or more",
			    ih->ih_arena_bytes, t->reg[SHMT_R_ARENA].rg_size,
			    ih->ih_arena_bytes);
		lim_len = rows;
	}
	memcpy(t->base + t->reg[SHMT_R_LIMITERS].rg_off,
	    img + sh->sh_regions[SHMT_R_HEADER].rg_size, lim_len);
	/* The rows' client locks came with them: they name threads of the
	 * old segment (a live one, attached here, would hold the table's
	 * claims off until it ended). */
	for (uint64_t r = 0; r < lim_len / sizeof(struct shmt_lim); r++)
		shmt__lock_init(&((struct shmt_lim *)(void *)(t->base +
		    t->reg[SHMT_R_LIMITERS].rg_off))[r].lm_client_lock);
	memcpy(t->base + t->reg[SHMT_R_ARENA].rg_off,
	    img + sh->sh_regions[SHMT_R_HEADER].rg_size + lim_src,
	    ih->ih_arena_bytes);
	th->sh_generation = sh->sh_generation + 1;
	th->sh_arena_used = ih->ih_arena_bytes;
	th->sh_nlimiters = sh->sh_nlimiters;
	th->sh_hk_runs = sh->sh_hk_runs;
	th->sh_reaped = sh->sh_reaped;
	return 0;
}

/* A record kept for re-insertion: where it is, its block order, shard. */
struct keep {
	uint64_t off;
	uint32_t order, shard;
	uint64_t expire;                /* on this boot's clock */
};

static int
keep_cmp(const void *a, const void *b)
{
	const struct keep *x = a, *y = b;

	if (x->order != y->order)
		return x->order > y->order ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Shift expiry E by D; 0 (never) stays 0, a result at or before the
 * clock's start becomes 1 (long expired). */
static uint64_t
shift_expire(uint64_t e, int64_t d)
{
	if (e == 0)
		return 0;
	if (d < 0)
		return e > 0 - (uint64_t)d ? e - (0 - (uint64_t)d) : 1;
	return e > UINT64_MAX - (uint64_t)d ? UINT64_MAX : e + (uint64_t)d;
}

/*
 * Check the records of a store's section S (COUNT records in BYTES) against
 * the fresh store ST of T, and list in *KEPT those still alive at NOW after
 * the shift D, largest blocks first.  Every length and count is checked
 * before it is used, and the blocks of each shard must fit its heap.  In
 * the dictionary, an item of one 64-byte block is one a slot holds: the
 * first of each bucket takes its slot as the store puts it back (the
 * smallest come last), the others a block.
 */
static int
scan_records(shmt_t *t, const struct shmt_store *st, const char *what,
    const unsigned char *s, uint64_t count, uint64_t bytes, int64_t d,
    uint64_t now, struct keep **kept, uint64_t *nkept, char *err, size_t cap)
{
	uint64_t at = 0, n = 0, *load = NULL, *slots = NULL;
	struct keep *k = NULL;
	int rc = 0;

	*kept = NULL;
	*nkept = 0;
	if (count > bytes / (sizeof(struct img_rec) + 1))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "%s section claims "
		    "%" PRIu64 " records in %" PRIu64 " bytes", what, count,
		    bytes);
	if (st == NULL || st->shards == 0) {
		if (count > 0 || bytes > 0)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "%s section holds "
			    "records, the segment has no %s", what, what);
		return 0;
	}
	if (count == 0 && bytes == 0)
		return 0;
	if ((k = calloc(count > 0 ? count : 1, sizeof(*k))) == NULL ||
	    (load = calloc(st->shards, sizeof(*load))) == NULL ||
	    (!st->counters && (slots = calloc(st->nbuckets / 64 * st->shards +
	    1, sizeof(*slots))) == NULL)) {
		rc = shmt__bad(err, cap, -ENOMEM, "no memory for %" PRIu64
		    " records", count);
		goto out;
	}
	for (uint64_t i = 0; i < count; i++) {
		struct img_rec r;
		uint64_t e, blk;

		if (bytes - at < sizeof(r)) {
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s record %" PRIu64
			    " of %" PRIu64 " is cut short", what, i, count);
			goto out;
		}
		memcpy(&r, s + at, sizeof(r));
		if (r.ir_klen == 0 || r.ir_klen > SHMT_KEY_MAX ||
		    r.ir_vlen > SHMT_VALUE_MAX ||
		    (!st->counters && (r.ir_klen > st->max_key ||
		    r.ir_vlen > st->max_value)) ||
		    (uint64_t)r.ir_klen + r.ir_vlen > bytes - at - sizeof(r)) {
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s record %" PRIu64
			    " has a key of %u and a value of %u bytes, past "
			    "its limits or the section's end", what, i,
			    r.ir_klen, r.ir_vlen);
			goto out;
		}
		blk = 64ULL << order_for(sizeof(struct shmt_item) + r.ir_klen +
		    r.ir_vlen);
		e = shift_expire(r.ir_expire, d);
		if (e == 0 || e > now) {
			uint64_t hash = key_hash(t, s + at + sizeof(r),
			    r.ir_klen);

			k[n].off = at;
			k[n].order = order_for(sizeof(struct shmt_item) +
			    r.ir_klen + r.ir_vlen);
			k[n].shard = shard_of(st, hash);
			k[n].expire = e;
			if (slots != NULL && k[n].order == 0 &&
			    !shmt__bit_get(slots, k[n].shard * st->nbuckets +
			    bucket_of(st, hash))) {
				shmt__bit_set(slots, k[n].shard * st->nbuckets +
				    bucket_of(st, hash));
				blk = 0;
			}
			if (k[n].order > st->order_max ||
			    blk > st->heap_bytes - load[k[n].shard]) {
				rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s records "
				    "of shard %u do not fit its %" PRIu64 " bytes",
				    what, k[n].shard, st->heap_bytes);
				goto out;
			}
			load[k[n].shard] += blk;
			n++;
		}
		at += sizeof(r) + r.ir_klen + r.ir_vlen;
	}
	if (at != bytes) {
		rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s section has %" PRIu64
		    " bytes past its %" PRIu64 " records", what, bytes - at,
		    count);
		goto out;
	}
	/* Largest first: a buddy heap whose blocks are all at least as large
	 * as the next one always has room for it while the bytes fit. */
	qsort(k, n, sizeof(*k), keep_cmp);
	*kept = k;
	*nkept = n;
	k = NULL;
out:
	free(k);
	free(load);
	free(slots);
	return rc;
}

/* Put a dictionary record back, with expiry E, through the store. */
static int
dict_insert(shmt_t *t, const unsigned char *key, uint32_t klen,
    const unsigned char *val, uint32_t vlen, uint64_t e, int64_t d)
{
	struct shmt_shard *sh;
	uint64_t hash;
	int rc;

	(void)d;
	if ((rc = shmt__store_lock_key(t, t->dict, key, klen, &hash, &sh)) != 0)
		return rc;
	rc = shmt__store_add(t, t->dict, sh, hash, key, klen, val, vlen, e);
	shmt__unlock(&sh->ds_lock);
	return rc;
}

/* Put a counter record back: the counters read their own bytes. */
static int
cnt_insert(shmt_t *t, const unsigned char *key, uint32_t klen,
    const unsigned char *val, uint32_t vlen, uint64_t e, int64_t d)
{
	return shmt__cnt_restore(t, key, klen, val, vlen, e, d);
}

typedef int (*insert_fn)(shmt_t *, const unsigned char *, uint32_t,
    const unsigned char *, uint32_t, uint64_t, int64_t);

/* Re-insert the live records of section S into store ST of T. */
static int
restore_store(shmt_t *t, const struct shmt_store *st, const char *what,
    const unsigned char *s, uint64_t count, uint64_t bytes, int64_t d,
    insert_fn ins, char *err, size_t cap)
{
	struct keep *k;
	uint64_t n;
	int rc;

	rc = scan_records(t, st, what, s, count, bytes, d, shmt__now(t), &k, &n,
	    err, cap);
	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		struct img_rec r;
		const unsigned char *p = s + k[i].off;

		memcpy(&r, p, sizeof(r));
		rc = ins(t, p + sizeof(r), r.ir_klen, p + sizeof(r) + r.ir_klen,
		    r.ir_vlen, k[i].expire, d);
		if (rc == -EEXIST)
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s key of record "
			    "at byte %" PRIu64 " appears twice", what, k[i].off);
		else if (rc == -EINVAL)
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s record at byte "
			    "%" PRIu64 " does not hold a value of its shape",
			    what, k[i].off);
		else if (rc == -EBADMSG)
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "%s record at byte "
			    "%" PRIu64 " has a header that contradicts its "
			    "buckets (its count lies)", what, k[i].off);
		else if (rc != 0)
			rc = shmt__bad(err, cap, rc, "cannot restore %s record at "
			    "byte %" PRIu64 ": %s", what, k[i].off,
			    shmt_strerror(rc));
	}
	free(k);
	return rc;
}

/* The problems shmt_check reports on a restored image, joined. */
struct problems {
	char text[768];
	size_t len;
	int count;
};

static void
collect(void *ctx, const char *problem)
{
	struct problems *pr = ctx;

	pr->count++;
	if (pr->len + 1 >= sizeof(pr->text))
		return;
	pr->len += (size_t)snprintf(pr->text + pr->len,
	    sizeof(pr->text) - pr->len, "%s%s", pr->len > 0 ? "; " : "",
	    problem);
	if (pr->len >= sizeof(pr->text))
		pr->len = sizeof(pr->text) - 1;
}

/* Check the restored segment T while it is still private, with the
 * library's own checker: an image whose checksums are right but whose
 * state is not is refused, never published. */
static int
check_restored(shmt_t *t, char *err, size_t cap)
{
	struct problems pr;
	int n;

	memset(&pr, 0, sizeof(pr));
	n = shmt_check(t, collect, &pr);
	if (n < 0)
		return shmt__bad(err, cap, n, "cannot check the restored image: "
		    "%s", shmt_strerror(n));
	if (n == 0)
		return 0;
	return shmt__bad(err, cap, SHMT_ECORRUPT, "the restored image fails its "
	    "check (%d problem%s): %s", n, n == 1 ? "" : "s", pr.text);
}


/* Fill the fresh, private segment T from the image: limiters, secret,
 * rebase, then the stores and the analyzer, then the check. */
static int
fill(shmt_t *t, const unsigned char *img, const struct shmt_hdr *sh,
    const struct img_hdr *ih, const struct sections *s, int64_t d, int resized,
    const struct shmt__redef *defs, size_t ndefs, char *err, size_t cap)
{
	int rc;

	if ((rc = fill_limiters(t, img, sh, ih, resized, err, cap)) != 0)
		return rc;
	/* The image's secret, not the fresh one shmt_create made: the
	 * per-client tables and the analyzer hold hashes keyed with it, and
	 * the items are re-inserted under it. */
	shmt__secret_set(t, sh->sh_secret);
	/* The stores are empty here: only the limiters move. */
	if ((rc = shmt__rebase_times(t, d)) != 0)
		return shmt__bad(err, cap, rc, "cannot rebase its times: %s",
		    shmt_strerror(rc));
	/* The client tables' words were copied one by one: finish what a
	 * claim or an override's change left half done, as a kill -9 of
	 * everyone at the copy would need. */
	shmt__clients_restore(t);
	/* Limiters defined anew by a move, with their uses carried. */
	if (ndefs > 0 && (rc = shmt__redefine_apply(t, defs, ndefs, err,
	    cap)) != 0)
		return rc;
	if ((rc = restore_store(t, t->dict, "dictionary", s->at[IMG_S_DICT],
	    s->count[IMG_S_DICT], s->bytes[IMG_S_DICT], d, dict_insert, err,
	    cap)) != 0)
		return rc;
	if ((rc = restore_store(t, t->counters, "counters",
	    s->at[IMG_S_COUNTERS], s->count[IMG_S_COUNTERS],
	    s->bytes[IMG_S_COUNTERS], d, cnt_insert, err, cap)) != 0)
		return rc;
	if (s->at[IMG_S_ANALYZER] != NULL) {
		if (t->an == NULL)
			return shmt__bad(err, cap, SHMT_ECORRUPT, "analyzer section "
			    "without an analyzer in the segment");
		if ((rc = shmt__an_import(t, s->at[IMG_S_ANALYZER],
		    s->bytes[IMG_S_ANALYZER], d)) != 0)
			return shmt__bad(err, cap, rc == -EINVAL ? SHMT_ECORRUPT :
			    rc, "the analyzer's section is refused: %s",
			    rc == -EINVAL ? "inconsistent" : shmt_strerror(rc));
	}
	return check_restored(t, err, cap);
}

/* Check IMG (LEN bytes) whole: header, pieces, sections. */
static int
image_check(const unsigned char *img, size_t len, struct img_hdr *ih,
    struct shmt_hdr *hdr, struct sections *s, char *err, size_t cap)
{
	const unsigned char *body;
	uint64_t rest = 0;
	int rc;

	if (len < sizeof(*ih))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "truncated: %zu bytes, "
		    "shorter than its header", len);
	memcpy(ih, img, sizeof(*ih));
	if ((rc = check_header(ih, len, err, cap)) != 0)
		return rc;
	body = img + sizeof(*ih);
	if (shmt__fnv1a_words(SHMT_FNV_INIT, body, ih->ih_size) != ih->ih_sum)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "image checksum mismatch "
		    "(the file is damaged)");
	if (ih->ih_size < sizeof(struct shmt_hdr))
		return shmt__bad(err, cap, SHMT_ECORRUPT, "image shorter than a "
		    "segment header");
	memcpy(hdr, body, sizeof(*hdr));
	if ((rc = check_pieces(hdr, ih, &rest, err, cap)) != 0)
		return rc;
	return find_sections(body + rest, ih->ih_size - rest, s, err, cap);
}

int
shmt__image_rebuild(const unsigned char *img, size_t len, const char *tmp,
    const shmt_config_t *want, const struct shmt__redef *defs, size_t ndefs,
    const struct shmt__host_time *now, shmt_clock_fn clock, void *clock_ctx,
    shmt_t **out, char *err, size_t cap)
{
	const unsigned char *body;
	struct img_hdr ih;
	struct shmt_hdr sh;
	struct sections s;
	shmt_config_t c;
	shmt_t *t;
	int64_t d;
	int rc;

	*out = NULL;
	if ((rc = image_check(img, len, &ih, &sh, &s, err, cap)) != 0)
		return rc;
	body = img + sizeof(ih);
	if (want != NULL)
		c = *want;
	else
		shmt__config_from_params(&sh.sh_params, &c);
	d = shmt__image_delta(ih.ih_wall_ns, ih.ih_mono_ns, now->wall_ns,
	    now->mono_ns, now->boot_id[0] != '\0' &&
	    strncmp(now->boot_id, ih.ih_boot_id, sizeof(ih.ih_boot_id)) == 0);
	shmt_unlink(tmp); /* a leftover of a rebuild killed midway */
	if ((rc = shmt_create(tmp, &c, &t)) != 0)
		return shmt__bad(err, cap, rc, "cannot create segment %s: %s", tmp,
		    shmt_strerror(rc));
	if (clock != NULL && (rc = shmt_set_clock(t, clock, clock_ctx)) != 0)
		shmt__bad(err, cap, rc, "cannot set the clock: %s",
		    shmt_strerror(rc));
	if (rc == 0)
		rc = fill(t, body, &sh, &ih, &s, d, want != NULL, defs, ndefs,
		    err, cap);
	if (rc != 0) {
		shmt_close(t);
		shmt_unlink(tmp);
		return rc;
	}
	*out = t;
	return 0;
}

int
shmt__image_restore(const unsigned char *img, size_t len, const char *name,
    const struct shmt__host_time *now, shmt_clock_fn clock, void *clock_ctx,
    char *err, size_t cap)
{
	char tmp[SHMT_SEGNAME_MAX + 64];
	char from[SHMT_SEGNAME_MAX + 80], to[SHMT_SEGNAME_MAX + 16];
	shmt_t *t;
	int rc;

	if (img == NULL || name == NULL || now == NULL)
		return shmt__bad(err, cap, -EINVAL, "no image");
	if ((rc = shmt__name_check(name)) != 0)
		return shmt__bad(err, cap, rc, "bad segment name %s", name);
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.restore.%d", name,
	    (int)shmt__env_pid()) > SHMT_SEGNAME_MAX)
		return shmt__bad(err, cap, -ENAMETOOLONG, "segment name %s is too "
		    "long to restore under a temporary name", name);
	if ((rc = shmt__image_rebuild(img, len, tmp, NULL, NULL, 0, now, clock,
	    clock_ctx, &t, err, cap)) != 0)
		return rc;
	snprintf(from, sizeof(from), "/dev/shm%s", tmp);
	snprintf(to, sizeof(to), "/dev/shm%s", name);
	if (link(from, to) != 0) {
		rc = -errno;
		shmt__bad(err, cap, rc, "cannot publish %s: %s", name,
		    strerror(-rc));
	}
	shmt_close(t);
	shmt_unlink(tmp);
	return rc;
}
