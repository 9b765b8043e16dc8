/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's answers (shmt_top_keys: every stripe's summaries of the
 * window read without a lock, their bounds combined, the exact minute's
 * cut), and what snapshots need: a summary moved in time, the region's
 * export and import.  The layout and the argument are at the top of
 * analyzer.c.
 */
#include "analyzer.h"
#include "an_sum.h"

#include "dict.h"
#include "tiles.h"
#include "fork.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- Queries ----------------------------------------------------------------- */

struct cand {
	uint64_t hash;
	uint64_t lower;         /* in the newest subw sub-windows */
	uint64_t old;           /* at most this in the oldest, from now - W */
	int used;
};

struct cmap {
	struct cand *e;
	uint64_t cap, n;
};

static int
cmap_add(struct cmap *m, uint64_t hash, uint64_t lower, uint64_t old)
{
	uint64_t i = hash & (m->cap - 1);

	for (uint64_t k = 0; k < m->cap; k++, i = (i + 1) & (m->cap - 1)) {
		if (m->e[i].used && m->e[i].hash == hash) {
			m->e[i].lower += lower;
			m->e[i].old += old;
			return 0;
		}
		if (!m->e[i].used) {
			m->e[i].used = 1;
			m->e[i].hash = hash;
			m->e[i].lower = lower;
			m->e[i].old = old;
			m->n++;
			return 0;
		}
	}
	return -ENOMEM;
}

/* What a summary adds to an answer. */
struct sum_part {
	uint64_t D, N;          /* offsets and requests, over the span */
	uint64_t Dw, Nw;        /* the exact window's (see sum_read) */
	uint64_t Eo;            /* what a key's `old` may hold of its
	                         * requests before the window (see sum_read) */
};

/* The marks of the oldest summary around the exact window's start WS:
 * B, the latest mark every request before which is before WS (d, n and
 * sequence number; the summary's start when none), and A, the earliest
 * every request after which is at or after WS (its n; none: an = n). */
struct around {
	uint64_t bd, bn, bseq, an;
};

static void
around_consider(struct around *r, const struct shmt_an_mark *m, int before,
    int after, uint64_t *aseq)
{
	uint64_t seq = __atomic_load_n(&m->mk_sq, __ATOMIC_RELAXED);

	seq &= 0xffffffffULL;
	if (before && seq >= r->bseq) {
		r->bseq = seq;
		r->bd = __atomic_load_n(&m->mk_d, __ATOMIC_RELAXED);
		r->bn = __atomic_load_n(&m->mk_n, __ATOMIC_RELAXED);
	}
	if (after && seq < *aseq) {
		*aseq = seq;
		r->an = __atomic_load_n(&m->mk_n, __ATOMIC_RELAXED);
	}
}

/* Find B and A in summary S of sub-window [SS, SE) (d D, n N) for the
 * exact window starting at WS.  Marks that do not fit d and n (a damaged
 * summary, or one read across its owner's writes) are not used. */
static void
sum_around(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t ss,
    uint64_t se, uint64_t ws, uint64_t d, uint64_t n, struct around *r)
{
	struct shmt_an_mark *mk = pieces_of(an, s);
	uint64_t sl = __atomic_load_n(&s->am_slice, __ATOMIC_ACQUIRE), aseq;
	struct around best = { 0, 0, 0, n };
	uint64_t tmax;

	aseq = UINT64_MAX;
	/* Slice k: every request before its mark is before its first moment,
	 * every one after it at or after. */
	for (uint64_t k = 1; sl < SHMT_AN_SLICES && k <= sl; k++) {
		uint64_t t = slice_start(ss, se, k);

		around_consider(&best, &s->am_smark[k - 1], t <= ws, t >= ws,
		    &aseq);
	}
	/* Piece marks: every request before is at most mk_t - gap, every one
	 * after at least mk_t.  Read under their version (odd while
	 * thinned). */
	for (int tries = 0; tries < 8; tries++) {
		struct around r2 = best;
		uint64_t v = __atomic_load_n(&s->am_mver, __ATOMIC_ACQUIRE);
		uint64_t np = __atomic_load_n(&s->am_pieces, __ATOMIC_ACQUIRE);
		uint64_t aseq2 = aseq;

		if (v & 1)
			continue;
		if (np > an->pieces)
			break;
		struct shmt_an_mark prev = { 0, 0, 0, 0 };
		int sorted = 1;

		for (uint64_t i = 0; i < np && sorted; i++) {
			struct shmt_an_mark m = {
				/* Acquire loads: the version's second load
				 * below cannot move before them (no fence:
				 * gcc cannot instrument one for TSan). */
				__atomic_load_n(&mk[i].mk_t, __ATOMIC_ACQUIRE),
				__atomic_load_n(&mk[i].mk_d, __ATOMIC_ACQUIRE),
				__atomic_load_n(&mk[i].mk_n, __ATOMIC_ACQUIRE),
				__atomic_load_n(&mk[i].mk_sq, __ATOMIC_ACQUIRE),
			};
			uint64_t gap = m.mk_sq >> 32;

			sorted = gap <= m.mk_t && m.mk_t - gap >= prev.mk_t &&
			    m.mk_d >= prev.mk_d && m.mk_n >= prev.mk_n &&
			    (uint32_t)m.mk_sq > (uint32_t)prev.mk_sq;
			around_consider(&r2, &m, m.mk_t - gap < ws,
			    m.mk_t >= ws, &aseq2);
			prev = m;
		}
		if (__atomic_load_n(&s->am_mver, __ATOMIC_RELAXED) != v)
			continue;
		if (sorted)
			best = r2;
		break;
	}
	if (best.bd > d || best.bn > n)
		best.bd = best.bn = best.bseq = 0;
	if (best.an > n)
		best.an = n;
	/* The summary's latest time counted at, read after d and n (it is
	 * stored before each count): before WS, every request read is before
	 * the exact window, and B is the summary's end.  A time outside the
	 * sub-window (a damaged summary, or one kept by a build that stored
	 * none) is not used. */
	tmax = __atomic_load_n(&s->am_tmax, __ATOMIC_ACQUIRE);
	if (tmax >= ss && tmax < se && tmax < ws) {
		best.bd = d;
		best.bn = n;
		best.bseq = UINT64_MAX;
		best.an = n;
	}
	*r = best;
}

/*
 * The crossing records of summary S of sub-window [SS, SE) before the
 * exact window's start WS: LB[place] (an->cap of them, zeroed here) gets
 * the largest count a record says the place's counter had reached before
 * WS.  Returns the log's step (a power of two), or 0 when its records are
 * not used (turned off, being thinned, damaged, or thinned while read).
 * A record says its count was reached at or before its time, so each LB
 * is at most the count at WS.
 */
static uint64_t
recs_read(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t ss,
    uint64_t ws, uint64_t *lb)
{
	uint64_t *r = recs_of(an, s);
	uint64_t rl = __atomic_load_n(&s->am_rlog, __ATOMIC_ACQUIRE);
	uint64_t sh = (rl >> 24) & 0xff, n = rl & 0xffffff;

	if (an->recs == 0 || ((rl >> 32) & 1) || sh > SHMT_AN_REC_SHIFT_MAX ||
	    n > an->recs)
		return 0;
	memset(lb, 0, an->cap * sizeof(*lb));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = __atomic_load_n(&r[i], __ATOMIC_ACQUIRE);
		uint64_t T = v >> (SHMT_AN_REC_QBITS + an->rec_sbits);
		uint64_t slot = (v >> SHMT_AN_REC_QBITS) &
		    ((1ULL << an->rec_sbits) - 1);
		uint64_t c = (v & SHMT_AN_REC_QMAX) << sh;

		/* At or before ss + T. */
		if (slot < an->cap && T < ws - ss && c > lb[slot])
			lb[slot] = c;
	}
	if (((__atomic_load_n(&s->am_rlog, __ATOMIC_ACQUIRE) ^ rl) >> 24) != 0)
		return 0;       /* thinned or turned off meanwhile */
	return 1ULL << sh;
}

/* Read summary S of sub-window ID into M (with SCRATCH, cap slots of room);
 * adds its d and n to P->D and P->N.  A summary of the newest subw
 * sub-windows (OLDEST 0) lies inside the exact window: its effective counts
 * go to the keys' lower bounds, its d and n to P->Dw and P->Nw.  The
 * oldest one's (OLDEST 1, sub-window [SS, SE), the exact window starting
 * at WS) go to the keys' `old` part, each capped by the requests after
 * mark B and left out when the counter was last counted before mark B; it
 * adds to P->Dw what d grew by since mark B, and to P->Nw the requests
 * after mark A (see sum_around).  A summary being cleared, or holding
 * another sub-window, adds nothing: what it held lies outside the span. */
static int
sum_read(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    int oldest, uint64_t ss, uint64_t se, uint64_t ws, struct cand *scratch,
    uint64_t *lb, int recs, struct cmap *m, struct sum_part *P)
{
	for (int tries = 0; tries < 4; tries++) {
		uint64_t v1 = __atomic_load_n(&s->am_ver, __ATOMIC_ACQUIRE), d, n;
		uint64_t step = 0, eo;
		struct around r = { 0, 0, 0, 0 };
		uint32_t k = 0;
		int rc;

		if ((v1 & 1) || __atomic_load_n(&s->am_id, __ATOMIC_ACQUIRE) != id)
			return 0;
		for (uint32_t g = 0; g < an->groups; g++) {
			struct group gr = group_at(an, s, g);

			for (uint32_t j = 0; j < an->probe; j++) {
				uint64_t c = __atomic_load_n(&gr.cnt[j], __ATOMIC_ACQUIRE);
				uint64_t h = __atomic_load_n(&gr.hash[j], __ATOMIC_ACQUIRE);
				uint64_t dd = __atomic_load_n(&s->am_d, __ATOMIC_ACQUIRE);

				/* A count over the d read after the hash was
				 * live from before the hash was read until
				 * then (counts only grow, d only grows, and a
				 * counter is claimed only when its count is
				 * at most d), so the hash is its key's, even
				 * while the owner keeps counting it.  A count
				 * at most dd would give a lower bound of 0 or
				 * less below anyway. */
				if ((c >> SHMT_AN_SEQ_BITS) <= dd ||
				    shmt__an_group(an->groups, h) != g)
					continue;
				scratch[k].hash = h;
				scratch[k].old = (uint64_t)g * an->probe + j;
				scratch[k++].lower = c;
			}
		}
		/* Counts are taken against the d read after them: a larger d
		 * gives a smaller lower bound, which holds whatever the owner
		 * did meanwhile. */
		d = __atomic_load_n(&s->am_d, __ATOMIC_ACQUIRE);
		n = __atomic_load_n(&s->am_n, __ATOMIC_ACQUIRE);
		/* A mark is taken before the requests after it; the marks are
		 * read after d and n, so a mark newer than them only lowers
		 * what they add below, and one over them is not used. */
		if (oldest) {
			sum_around(an, s, ss, se, ws, d, n, &r);
			/* The records are read after the counts: each says a
			 * count reached before WS, so at most the count read. */
			step = recs ? recs_read(an, s, ss, ws, lb) : 0;
		}
		if (__atomic_load_n(&s->am_ver, __ATOMIC_ACQUIRE) != v1)
			continue;
		for (uint32_t j = 0; j < k; j++) {
			uint64_t c = scratch[j].lower >> SHMT_AN_SEQ_BITS;
			uint64_t seq = scratch[j].lower & SHMT_AN_SEQ_MAX;
			uint64_t old, b;

			if (c <= d)
				continue;
			if (!oldest) {
				rc = cmap_add(m, scratch[j].hash, c - d, 0);
			} else if (seq < SHMT_AN_SEQ_MAX && seq < r.bseq) {
				continue;       /* not counted since mark B */
			} else {
				old = c - d < n - r.bn ? c - d : n - r.bn;
				/* Its counts after the place's count before
				 * WS, at least LB (the records). */
				b = step != 0 ? lb[scratch[j].old] : 0;
				if (b <= c && c - b < old)
					old = c - b;
				rc = cmap_add(m, scratch[j].hash, 0, old);
			}
			if (rc != 0)
				return rc;
		}
		/* What `old` may hold of a key's requests before WS: less
		 * than the step with the records; without, up to all the
		 * requests after mark B; nothing when every request of the
		 * summary is before WS (no counter is counted since B). */
		eo = r.bseq == UINT64_MAX ? 0 : n - r.bn;
		if (step != 0 && step < eo)
			eo = step;
		P->D += d;
		P->N += n;
		P->Dw += oldest ? d - r.bd : d;
		P->Nw += oldest ? n - r.an : n;
		P->Eo += oldest ? eo : 0;
		return 0;
	}
	return 0;
}

static int
cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	return x->lower < y->lower ? 1 : x->lower > y->lower ? -1 :
	    x->hash < y->hash ? -1 : x->hash > y->hash;
}

static void
fill_key(shmt_t *h, const struct shmt_an *an, uint64_t hash, shmt_hotkey_t *k)
{
	size_t len = 0;

	k->kind = hash & SHMT_AN_CLIENT_BIT ? SHMT_HOT_CLIENT : SHMT_HOT_DICT;
	if (shmt__an_name_get(an, hash, k) && k->kept == k->klen)
		return;
	/* Only a prefix was kept, or none: a dictionary key can be found by
	 * its hash in the dictionary itself. */
	if (k->kind == SHMT_HOT_DICT &&
	    shmt__dict_key_by_hash(h, hash, k->key, sizeof(k->key), &len) == 0) {
		k->klen = (uint32_t)len;
		k->kept = (uint32_t)len;
		k->kind = SHMT_HOT_DICT;
	}
}

static int
gen_top_keys_once(shmt_t *h, shmt_hotkey_t *out, size_t cap, shmt_top_info_t *info)
{
	const struct shmt_an *an = h != NULL ? h->an : NULL;
	uint64_t now, i, D = 0, N = 0, Dw = 0, Nwin, hot = 0, *lb;
	uint32_t dead;
	struct sum_part part = { 0, 0, 0, 0, 0 };
	struct cand *scratch;
	struct cmap m;
	int rc = 0;

	if (h == NULL || (out == NULL && cap != 0))
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if (an == NULL)
		return -ENODEV;
	m.cap = pow2_floor((uint64_t)an->rings * an->stripes * an->cap) * 2;
	m.n = 0;
	m.e = calloc(m.cap, sizeof(*m.e));
	scratch = calloc(an->cap, sizeof(*scratch));
	lb = calloc(an->cap, sizeof(*lb));
	if (m.e == NULL || scratch == NULL || lb == NULL) {
		free(m.e);
		free(scratch);
		free(lb);
		return -ENOMEM;
	}
	/* Sub-window i holds now; i - subw .. i cover [start(i) - W, now],
	 * which holds the exact window [now - W, now] since start(i) <= now
	 * (tiles.h: any subw sub-windows span exactly W).  The newest subw of
	 * them start at start(i + 1) - W > now - W: all inside the window. */
	/* A writer that died between a count and its record left the
	 * record out: its stripe's records are not used until it is reaped
	 * (the reaper turns them off). */
	dead = shmt__an_dead_writers(an);
	now = shmt__now(h);
	i = shmt__tile_of(now, an->window, an->subw);
	for (uint64_t k = 0; k <= an->subw && rc == 0; k++) {
		uint64_t id = i - k;
		int oldest = k == an->subw;
		uint64_t ss = 0, se = 0;

		if (k > i)
			break;
		/* The oldest holds the exact window's start now - W (its
		 * start is start(i) - W <= now - W). */
		if (oldest) {
			ss = shmt__tile_start(id, an->window, an->subw);
			se = shmt__tile_start(id + 1, an->window, an->subw);
		}
		for (uint32_t p = 0; p < an->stripes && rc == 0; p++)
			rc = sum_read(an, sum_at(an, (uint32_t)(id % an->rings), p),
			    id, oldest, ss, se, now - an->window, scratch, lb,
			    !(dead >> p & 1), &m, &part);
	}
	D = part.D;
	N = part.N;
	Dw = part.Dw;
	Nwin = part.Nw;
	free(scratch);
	free(lb);
	if (rc != 0) {
		free(m.e);
		return rc;
	}
	/* A key's requests in the exact window are at least `lower` and at
	 * most lower + old + Dw; Nwin requests are certainly in the exact
	 * window.  Listed: every key whose upper bound is over the threshold
	 * of Nwin. */
	for (uint64_t k = 0; k < m.cap; k++) {
		struct cand *c = &m.e[k];

		if (!c->used)
			continue;
		if ((c->lower + c->old + Dw) * 1000000.0 >
		    (double)an->ppm * (double)Nwin)
			m.e[hot++] = *c;
	}
	qsort(m.e, hot, sizeof(*m.e), cand_cmp);
	for (uint64_t k = 0; k < hot && k < cap; k++) {
		shmt_hotkey_t *o = &out[k];

		memset(o, 0, offsetof(shmt_hotkey_t, klen));
		o->klen = o->kept = 0;
		o->kind = 0;
		o->hash = m.e[k].hash;
		o->lower = m.e[k].lower;
		o->upper = m.e[k].lower + m.e[k].old + Dw;
		o->share = N ? (double)o->lower / (double)N : 0;
		fill_key(h, an, o->hash, o);
	}
	if (info != NULL) {
		memset(info, 0, sizeof(*info));
		info->span_start_ns = i >= an->subw ?
		    shmt__tile_start(i - an->subw, an->window, an->subw) : 0;
		info->span_end_ns = now;
		info->window_ns = an->window;
		info->subwindow_ns = an->w;
		info->total = N;
		info->total_window = Nwin;
		info->error = D;
		info->error_window = Dw;
		info->error_oldest = part.Eo;
		info->threshold_ppm = an->ppm;
		info->certified = Dw * 1000000.0 <= (double)an->ppm * (double)Nwin;
		info->stripes = an->stripes;
		info->counters = an->cap;
		info->probe = an->probe;
		info->memory_bytes = an->bytes;
	}
	free(m.e);
	return hot > INT32_MAX ? INT32_MAX : (int)hot;
}

SHMT_EXPORT int
shmt_top_keys(shmt_t *h, shmt_hotkey_t *out, size_t cap, shmt_top_info_t *info)
{
	SHMT_GEN_CALL(h, gen_top_keys_once(h, out, cap, info));
}

/* ---- Moving a summary in time --------------------------------------------- */

void
shmt__an_sum_retime(const struct shmt_an *an, struct shmt_an_sum *s,
    uint64_t from_id, uint64_t to_id)
{
	uint64_t shift = shmt__tile_start(to_id, an->window, an->subw) -
	    shmt__tile_start(from_id, an->window, an->subw);   /* mod 2^64 */
	struct shmt_an_mark *mk = pieces_of(an, s);

	/* Every time in a summary is the clock's ns: move each by the shift
	 * of its sub-window's start (wrapping: a shift toward the past is a
	 * large one), so the marks keep their place in the sub-window; a
	 * piece mark's gap is a difference and stays. */
	__atomic_store_n(&s->am_tmax, __atomic_load_n(&s->am_tmax,
	    __ATOMIC_RELAXED) + shift, __ATOMIC_RELAXED);
	for (uint32_t k = 0; k + 1 < SHMT_AN_SLICES; k++)
		__atomic_store_n(&s->am_smark[k].mk_t, __atomic_load_n(
		    &s->am_smark[k].mk_t, __ATOMIC_RELAXED) + shift,
		    __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < an->pieces; i++)
		__atomic_store_n(&mk[i].mk_t, __atomic_load_n(&mk[i].mk_t,
		    __ATOMIC_RELAXED) + shift, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_id, to_id, __ATOMIC_RELAXED);
}

/* ---- Snapshots ------------------------------------------------------------- */

/*
 * What a snapshot keeps of the analyzer: a geometry line, then the
 * summaries (every sub-window ring of every stripe, the shared one too)
 * and the name table, as they are in the region.  Stripe owners and the
 * shared stripe's lock name processes of the old segment and are left
 * out.  Words are copied one by one with atomic loads: a summary copied
 * while its owner counted is one the owner could have left by dying, and
 * its bounds hold (see the top of this file); one copied while it was
 * being cleared (odd version) is not brought back.
 */
struct an_image {
	uint32_t ai_rings, ai_stripes;
	uint32_t ai_groups, ai_probe;
	uint64_t ai_sum_size;
	uint64_t ai_names;
	uint64_t ai_window;
};

static uint64_t
an_image_bytes(const struct shmt_an *an)
{
	return sizeof(struct an_image) + an->names_off - an->sums_off +
	    (uint64_t)an->names * sizeof(struct shmt_an_name);
}

int64_t
shmt__an_export(shmt_t *h, void *buf, uint64_t cap)
{
	return shmt__an_export_an(h->an, buf, cap);
}

int64_t
shmt__an_export_an(const struct shmt_an *an, void *buf, uint64_t cap)
{
	struct an_image ai;
	uint64_t n, words;
	unsigned char *b = buf;

	if (an == NULL)
		return 0;
	n = an_image_bytes(an);
	if (buf == NULL)
		return (int64_t)n;
	if (cap < n)
		return -ENOSPC;
	memset(&ai, 0, sizeof(ai));
	ai.ai_rings = an->rings;
	ai.ai_stripes = an->stripes;
	ai.ai_groups = an->groups;
	ai.ai_probe = an->probe;
	ai.ai_sum_size = an->sum_size;
	ai.ai_names = an->names;
	ai.ai_window = an->window;
	memcpy(b, &ai, sizeof(ai));
	words = (n - sizeof(ai)) / 8;
	for (uint64_t i = 0; i < words; i++) {
		uint64_t w = __atomic_load_n((const uint64_t *)(const void *)
		    (an->base + an->sums_off) + i, __ATOMIC_RELAXED);

		memcpy(b + sizeof(ai) + 8 * i, &w, 8);
	}
	return (int64_t)n;
}

int64_t
shmt__an_upgrade(const struct shmt_an *an, const void *in, uint64_t len,
    void *out, uint64_t cap)
{
	const unsigned char *b = in;
	unsigned char *o = out;
	struct shmt_an old;
	struct an_image ai;
	uint64_t n = an_image_bytes(an), mk = sizeof(struct shmt_an_mark);

	if (shmt__an_geometry_old(an, &old) != 0 ||
	    len != an_image_bytes(&old) || len < sizeof(ai) ||
	    old.marks_off != an->marks_off)
		return -EINVAL;
	memcpy(&ai, b, sizeof(ai));
	if (ai.ai_rings != old.rings || ai.ai_stripes != old.stripes ||
	    ai.ai_groups != old.groups || ai.ai_probe != old.probe ||
	    ai.ai_sum_size != old.sum_size || ai.ai_names != old.names ||
	    ai.ai_window != old.window)
		return -EINVAL;
	if (out == NULL)
		return (int64_t)n;
	if (cap < n)
		return -ENOSPC;
	memset(o, 0, n);
	ai.ai_sum_size = an->sum_size;
	memcpy(o, &ai, sizeof(ai));
	for (uint64_t i = 0; i < (uint64_t)an->rings * an->stripes; i++) {
		const unsigned char *src = b + sizeof(ai) + i * old.sum_size;
		unsigned char *dst = o + sizeof(ai) + i * an->sum_size;
		struct shmt_an_mark m[SHMT_AN_PIECES_MAX];
		struct shmt_an_sum hd;
		uint64_t np;

		/* The header, the groups and the hashes lie where they did. */
		memcpy(dst, src, an->marks_off);
		memcpy(&hd, src, sizeof(hd));
		/* The marks are thinned aside: the old ones may take more room
		 * than the new layout gives them. */
		np = hd.am_pieces <= old.pieces ? hd.am_pieces : 0;
		memcpy(m, src + old.marks_off, np * mk);
		while (np > an->pieces) {
			for (uint64_t k = 0; k < np / 2; k++)
				m[k] = m[2 * k + 1];
			np /= 2;
			hd.am_step = hd.am_step <= (1ULL << 60) ? 2 * hd.am_step :
			    hd.am_step;
		}
		memcpy(dst + an->marks_off, m, np * mk);
		hd.am_pieces = np;
		hd.am_next = 0;         /* the next request considers a cut */
		hd.am_rlog = shmt__an_rlog(0, SHMT_AN_REC_OFF, 0);
		memcpy(dst, &hd, sizeof(hd));
	}
	memcpy(o + sizeof(ai) + (an->names_off - an->sums_off),
	    b + sizeof(ai) + (old.names_off - old.sums_off),
	    (uint64_t)an->names * sizeof(struct shmt_an_name));
	return (int64_t)n;
}

int
shmt__an_import(shmt_t *h, const void *buf, uint64_t len, int64_t delta_ns)
{
	const struct shmt_an *an = h->an;
	const unsigned char *b = buf;
	struct an_image ai;
	unsigned __int128 a;
	uint64_t k;

	if (an == NULL || len != an_image_bytes(an))
		return -EINVAL;
	memcpy(&ai, b, sizeof(ai));
	if (ai.ai_rings != an->rings || ai.ai_stripes != an->stripes ||
	    ai.ai_groups != an->groups || ai.ai_probe != an->probe ||
	    ai.ai_sum_size != an->sum_size || ai.ai_names != an->names ||
	    ai.ai_window != an->window)
		return -EINVAL;
	b += sizeof(ai);
	/* Sub-windows move by whole sub-windows, toward the past, as the
	 * counters' do (counters.c, shmt__cnt_rebase): k = floor(d n / W)
	 * for d >= 0, -ceil(-d n / W) for d < 0, so no request is kept
	 * longer than its window. */
	a = (unsigned __int128)(delta_ns >= 0 ? (uint64_t)delta_ns :
	    -(uint64_t)delta_ns) * an->subw;
	a = delta_ns >= 0 ? a / an->window : (a + an->window - 1) / an->window;
	k = a > UINT64_MAX ? UINT64_MAX : (uint64_t)a;
	for (uint32_t r = 0; r < an->rings; r++) {
		for (uint32_t p = 0; p < an->stripes; p++) {
			const unsigned char *src = b +
			    ((uint64_t)r * an->stripes + p) * an->sum_size;
			struct shmt_an_sum hd;
			uint64_t id;

			memcpy(&hd, src, sizeof(hd));
			if ((hd.am_ver & 1) || hd.am_id % an->rings != r)
				continue;
			if (delta_ns >= 0) {
				if (hd.am_id > UINT64_MAX - k)
					continue;
				id = hd.am_id + k;
			} else {
				if (hd.am_id < k)
					continue;
				id = hd.am_id - k;
			}
			/* The segment is private: plain copies will do. */
			memcpy(sum_at(an, (uint32_t)(id % an->rings), p), src,
			    an->sum_size);
			/* Its times (sub-window start, slice and piece
			 * marks) move with it: the bounds read them. */
			shmt__an_sum_retime(an, sum_at(an,
			    (uint32_t)(id % an->rings), p), hd.am_id, id);
			/* Its crossing log is off: the image was copied
			 * while writers counted, so a count may be in it
			 * without the record its writer stored after (or
			 * never, killed), and a writer that takes the
			 * stripe up again goes on in the same summary. */
			__atomic_store_n(&sum_at(an, (uint32_t)(id % an->rings),
			    p)->am_rlog, shmt__an_rlog(0, SHMT_AN_REC_OFF, 0),
			    __ATOMIC_RELAXED);
		}
	}
	memcpy(names(an), b + (an->names_off - an->sums_off),
	    (uint64_t)an->names * sizeof(struct shmt_an_name));
	/* The names' ranks move by the same sub-windows (only their low 12
	 * bits are kept, so K modulo 4096 will do). */
	shmt__an_names_shift(an, delta_ns >= 0 ? (int64_t)(k & 0xfffU) :
	    -(int64_t)(k & 0xfffU));
	return 0;
}
