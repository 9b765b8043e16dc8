/* This file is private to libshmthrottle: the ring of buckets, the grant's inline steps. */
/* SPDX-License-Identifier: MIT */
/*
 * The steps of a grant on a ring of buckets, inline because every grant
 * (shmt_try_use_key, shmt_try_use, shmt_acquire) runs them: the ring slots,
 * the context a ring is read with, the release of a cooled bucket and the
 * one-CAS grant loop.  Why it is safe, and the rest of the protocol
 * (housekeeping, checking), are in ring.c.
 */
#ifndef SHMT_RING_H
#define SHMT_RING_H

#include "atomic128.h"
#include "table.h"

/* The fields of a slot's second word (limiter.h). */
#define SLOT_SERIAL(s) ((uint32_t)((s)[1] >> 32))
#define SLOT_COUNT(s) ((uint32_t)(s)[1])

/* A slot read for serial SERIAL: SLOT_OK when it holds it, SLOT_STALE when
 * it holds a newer one (the caller's W is stale: the ring has moved on, so
 * reload W and retry), or SHMT_ECORRUPT when it holds an older one (a
 * bucket's slot is written before any W names the bucket). */
#define SLOT_OK 0
#define SLOT_STALE 2

struct bk_ctx {
	uint64_t limit, window, slack;
	uint32_t slack_uses, nb;
	uint64_t limit_cap, hold_window; /* see shmt_limiter_update */
	uint32_t uses_cap, hold_serial;
	uint64_t hold_until;          /* see bk_due_of */
	uint32_t ntags;               /* key pool size, or 0: tag is fixed */
	int check_tag;                /* client entries: W must carry... */
	uint32_t tag_expect;          /* ...this tag (LIVE, epoch) */
	struct shmt_ring_slot *ring;
	uint64_t *released;           /* statistics: uses released */
	int torn_ok;                  /* reads may be half by half */
	uint64_t nb_magic;            /* for slot_of: 2^64 / nb, rounded up */
};

/*
 * The last word each thread saw of each shared limiter it used lately, to
 * CAS against directly instead of reading the word first: under contention
 * that read pulls the line across cores once more for nothing, since a
 * failed CAS returns the current word anyway.  A value observed atomically
 * (by a CAS) and later matched by a successful CAS was held by W all along
 * in between (its fields only move one way, see "Torn reads"), so the
 * observation counts as the read that precedes the clock.  Keyed by the
 * word's address and the handle's uid, so a remapped segment never matches.
 */
#define WGUESS 8

struct shmt_wguess {
	const void *wp;
	uint32_t uid;
	uint64_t w[2];
};
extern __thread struct shmt_wguess shmt__wguess[WGUESS]
    __attribute__((visibility("hidden"), tls_model("local-dynamic")));

/* Raise the count of SERIAL's slot to COUNT (a monotone max).  Returns 0,
 * or SHMT_ECORRUPT when the slot holds an older serial (impossible: a bucket
 * is opened in its slot before any W names it).  A newer serial means the
 * caller's W is stale; its CAS on W will fail, so nothing is written. */
int shmt__slot_raise(struct shmt_ring_slot *slot, uint32_t serial,
    uint32_t count);

/* Fill C to read the ring RING (V's own, or a client entry's) with V's
 * parameters; the caller sets torn_ok and, for client entries, ntags. */
void shmt__bk_ctx_init(struct bk_ctx *c, const struct shmt_lview *v,
    struct shmt_ring_slot *ring);

/* CAS *WP from *W to NW, a release; on success count the uses it returned
 * and make *W the new word.  Returns 1 on success. */
int shmt__bk_commit_release(const struct bk_ctx *c, struct shmt_w *wp,
    struct shmt_w *w, struct shmt_w nw);

/* A denial at the limit without the loop (ring.c, where its conditions
 * are): 0 denied (reason in *WHY), 1 not decided here (nothing changed),
 * 2 W had changed (the current word in *W). */
int shmt__bk_deny(const struct shmt_lview *v, struct shmt_ring_slot *ring,
    int tag_ok, int torn_ok, struct shmt_w *wp, struct shmt_w *w,
    uint64_t now, int *why);

/* The reason of a denial at NOW, from slot S of the oldest bucket in use
 * (SERIAL): WHY_SLACK when the bucket's first use may be older than the
 * window (the seed's allowed false negative), else WHY_EXHAUSTED. */
static inline int
bk_why_of(const uint64_t s[2], uint32_t serial, uint64_t slack,
    uint64_t window, uint64_t now)
{
	return SLOT_SERIAL(s) == serial && s[0] >= slack &&
	    sat_add(s[0] - slack, window) <= now ? WHY_SLACK : WHY_EXHAUSTED;
}

/* Classify a denial at NOW with W: the seed's allowed false negative
 * ("slack") when the oldest bucket's first use may be older than the
 * window, else plain exhaustion. */
int shmt__bk_why(const struct bk_ctx *c, struct shmt_w w, uint64_t now);

/* After a lost CAS: wait a random, growing, bounded time (see
 * "Contention" in ring.c).  *LOST counts the losses in a row. */
void shmt__cas_backoff(unsigned *lost);

/* The hand-off of a shared limiter's word (see "Contention" in ring.c).
 * shmt__handoff_ask: after a lost CAS on W at WP, ask the word's holder to
 * step aside, and wait (bounded) until it does, stops, or the wait runs
 * out.  shmt__handoff_yield: called by the winner of a CAS on W that found
 * a request in the hand-off word: clear it and wait (bounded) while the
 * asker has the word. */
void shmt__handoff_ask(uint64_t *ho, const struct shmt_w *wp);
void shmt__handoff_yield(uint64_t *ho, const struct shmt_w *wp);

/* The hand-off word of the ring word at WP: a shared limiter's (the only
 * words read half by half, torn_ok), or NULL (client entries: each
 * client's own word, and a grant on it is rarely contended). */
static inline uint64_t *
bk_handoff(const struct bk_ctx *c, struct shmt_w *wp)
{
	if (!c->torn_ok)
		return NULL;
	return (uint64_t *)(void *)((char *)wp +
	    (offsetof(struct shmt_lim, lm_handoff) -
	    offsetof(struct shmt_lim, lm_w)));
}

/* After a grant's CAS lost to another writer: ask for the word (shared
 * limiters) or back off (client entries).  Then read W afresh with the
 * locked load (on x86-64 also where an SSE load would do): it takes the
 * line for writing, so the CAS that follows it after the clock read finds
 * the line still here more often than after a plain load. */
static inline void
bk_lost(const struct bk_ctx *c, struct shmt_w *wp, struct shmt_w *w,
    unsigned *lost)
{
	uint64_t *ho = bk_handoff(c, wp);

	if (ho != NULL) {
		(*lost)++;
		shmt__handoff_ask(ho, wp);
	} else {
		shmt__cas_backoff(lost);
	}
	shmt__load128_excl(wp, w->w);
}

/* After a grant's CAS won: step aside if another process asked for the
 * word.  The hand-off word shares W's line, which the CAS just took, so
 * this read costs next to nothing when nobody asked. */
static inline void
bk_won(const struct bk_ctx *c, struct shmt_w *wp)
{
	uint64_t *ho = bk_handoff(c, wp);

	if (ho != NULL &&
	    __builtin_expect(__atomic_load_n(ho, __ATOMIC_RELAXED) != 0, 0))
		shmt__handoff_yield(ho, wp);
}

/* Release every cooled bucket and seal an active bucket that closed (by
 * time or by count).  Sets *NEXT to the next time this ring has work.
 * Returns the number of transitions made, or an error. */
int shmt__bk_housekeep(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp,
    uint64_t now, uint64_t *next);

/* Give back every use in the ring word at WP: one CAS to an empty ring
 * (tail moves past an active bucket; the tag is kept).  Returns the uses
 * given back, or an error. */
int64_t shmt__bk_reset(struct shmt_w *wp, int is_client);

/*
 * Repair the close times of the N buckets in use from serial FIRST: none
 * later than NOW + slack, none earlier than the bucket before it.  Both
 * only delay a release (a bucket's uses were all decided before the latest
 * legitimate close time), so the limit still holds.  A slot that no longer
 * holds its serial (released and reused for a later bucket while the
 * caller was delayed) is left alone: NOW may be older than that bucket's
 * uses.  Each slot changes by a CAS on its whole record, which fails
 * harmlessly when the slot is reused meanwhile.  Returns the close time
 * of the last bucket that still held its serial, or 0 for none.
 */
uint64_t shmt__fix_ring_times(const struct bk_ctx *bc, uint32_t first,
    uint32_t n, uint64_t now);

/* Check a ring and its word: the word's fields, each sealed bucket's slot,
 * that the uses in flight are the sealed counts plus the active count, and
 * the close times (see above).  The word is read before and after; a change
 * means a concurrent call, so the check runs again (a few times at most). */
void shmt__chk_ring(shmt_t *h, struct shmt_chk *c, const char *who,
    const struct bk_ctx *bc, struct shmt_w *wp);

/* Open bucket SERIAL with close time CLOSE unless someone already did (first
 * opener wins).  Returns the close time of SERIAL, or 0 when the slot
 * already holds a newer serial (the caller's W is stale) or, with *BUSY
 * set, a bucket still in use: one at or after OLDEST, the oldest serial the
 * caller's W holds.  Serials wrap at 2^32, and where nb does not divide
 * 2^32, serials s and s + (2^32 mod nb) fall in one slot across the wrap
 * (slot_of): then, and only then, the slot of the next bucket may still
 * hold one in use, and the ring has no room for it until it is released
 * (within a window and its slack; elsewhere the buckets in use span fewer
 * than nb serials, so their slots differ). */
static inline uint64_t
slot_open(struct shmt_ring_slot *slot, uint32_t serial, uint32_t oldest,
    uint64_t close, int *busy)
{
	uint64_t s[2], d[2] = { close, (uint64_t)serial << 32 };

	*busy = 0;
	shmt__load128(slot, s);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		int32_t age = (int32_t)(serial - SLOT_SERIAL(s));

		if (age == 0)
			return s[0];
		if (age < 0)
			return 0;
		if ((int32_t)(SLOT_SERIAL(s) - oldest) >= 0) {
			*busy = 1;
			return 0;
		}
		if (shmt__cas128(slot, s, d))
			return close;
	}
	return 0;
}

static inline int
slot_is(const uint64_t s[2], uint32_t serial)
{
	int32_t age = (int32_t)(SLOT_SERIAL(s) - serial);

	return age == 0 ? SLOT_OK : age > 0 ? SLOT_STALE : SHMT_ECORRUPT;
}

/*
 * The ring slot of serial S: S mod nb without a division.  A 32-bit
 * modulus by a constant that is only known at run time costs a 20-40 cycle
 * DIV on every grant; with M = ceil(2^64 / nb), the product M * S keeps the
 * fraction S / nb in its low 64 bits, and multiplying that fraction by nb
 * gives the remainder exactly for every 32-bit S (Lemire, Kaser and Kurz,
 * "Faster remainder by direct computation", 2019).
 */
static inline struct shmt_ring_slot *
ring_slot(struct shmt_ring_slot *ring, uint64_t nb_magic, uint32_t nb,
    uint32_t s)
{
	uint64_t frac = nb_magic * s;

	return &ring[(uint32_t)(((shmt_u128)frac * nb) >> 64)];
}

static inline struct shmt_ring_slot *
slot_of(const struct bk_ctx *c, uint32_t s)
{
	return ring_slot(c->ring, c->nb_magic, c->nb, s);
}

static inline void
bk_load(const struct bk_ctx *c, const void *p, uint64_t out[2])
{
	if (c->torn_ok)
		shmt__load128_hilo(p, out);
	else
		shmt__load128(p, out);
}

static inline int
w_valid(const struct bk_ctx *c, struct shmt_w w)
{
	uint32_t inflight = SHMT_W_INFLIGHT(w), count = SHMT_W_COUNT(w);
	uint32_t nsealed = SHMT_W_NSEALED(w), active = SHMT_W_ACTIVE(w);

	return inflight <= c->limit_cap && count <= c->uses_cap &&
	    count <= inflight && nsealed + active <= c->nb &&
	    (active || count == 0) &&
	    (c->ntags == 0 || SHMT_W_TAG(w) < c->ntags);
}

/* The time bucket SERIAL, closed at CLOSE, is due with window WINDOW: a
 * bucket sealed before the last change of parameters keeps the longer of
 * the two windows.  Those buckets are the serials below HOLD_SERIAL after
 * a change in place (update.c), or, after a per-client limiter was
 * defined anew by a move (redefine.c), those that close at or before
 * HOLD_UNTIL (0: none such). */
static inline uint64_t
bk_due_of(uint64_t window, uint64_t hold_window, uint32_t hold_serial,
    uint64_t hold_until, uint32_t serial, uint64_t close)
{
	if (__builtin_expect(hold_window > window, 0) &&
	    (hold_until != 0 ? close <= hold_until :
	    (int32_t)(serial - hold_serial) < 0))
		window = hold_window;
	return sat_add(close, window);
}

static inline uint64_t
bk_due(const struct bk_ctx *c, uint32_t serial, uint64_t close)
{
	return bk_due_of(c->window, c->hold_window, c->hold_serial,
	    c->hold_until, serial, close);
}

/*
 * If the oldest bucket in use has cooled at NOW, compute in *NW the word
 * that releases it and return 1; return 0 when nothing is due, SLOT_STALE
 * when W is stale, or an error.  *DUE gets the time the oldest bucket will
 * be due.  A sealed bucket may hold no use: a serial skipped because a
 * stale opener gave it a close time in the past.
 */
static inline __attribute__((always_inline)) int
bk_release_step(const struct bk_ctx *c, struct shmt_w w, uint64_t now,
    struct shmt_w *nw, uint64_t *due)
{
	uint32_t inflight = SHMT_W_INFLIGHT(w), count = SHMT_W_COUNT(w);
	uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w);
	uint32_t tag = SHMT_W_TAG(w);
	uint64_t s[2];
	int rc;

	*due = UINT64_MAX;
	if (nsealed > 0) {
		uint32_t serial = tail - nsealed;

		bk_load(c, slot_of(c, serial), s);
		if ((rc = slot_is(s, serial)) != SLOT_OK)
			return rc;
		if (SLOT_COUNT(s) > inflight)
			return SHMT_ECORRUPT;
		*due = bk_due(c, serial, s[0]);
		if (*due > now)
			return 0;
		*nw = shmt__w_make(inflight - SLOT_COUNT(s), count, tail,
		    nsealed - 1, SHMT_W_ACTIVE(w), tag);
		return 1;
	}
	if (!SHMT_W_ACTIVE(w))
		return 0;
	bk_load(c, slot_of(c, tail), s);
	if ((rc = slot_is(s, tail)) != SLOT_OK)
		return rc;
	*due = bk_due(c, tail, s[0]);
	if (*due > now)
		return 0;
	if ((rc = shmt__slot_raise(slot_of(c, tail), tail, count)) != 0)
		return rc;
	*nw = shmt__w_make(inflight - count, 0, tail + 1, 0, 0, tag);
	return 1;
}

static inline unsigned
wguess_slot(const void *wp)
{
	return (unsigned)((uintptr_t)wp >> 7) & (WGUESS - 1);
}

/*
 * A denial decided on a word that may be stale (a guess, or read half by
 * half) is confirmed with a full atomic load: 1 when W still holds *W, else
 * 0 with the current word in *W.
 */
static inline int
bk_confirm(const struct bk_ctx *c, struct shmt_w *wp, struct shmt_w *w)
{
	struct shmt_w cur;

	if (!c->torn_ok)
		return 1;
	shmt__load128(wp, cur.w);
	if (cur.w[0] == w->w[0] && cur.w[1] == w->w[1])
		return 1;
	*w = cur;
	return 0;
}

/*
 * The loop of bk_take_n and bk_take_view from the word *W (read, or
 * guessed); leaves in *W the last word known to be current.  A grant takes
 * COST uses; AT (may be NULL) gets the decision's clock value.  NOW0 (may
 * be NULL) is a clock value the caller read after *W, used by the first
 * turn instead of a read of its own (bk_take_view's fall-back: the clock is
 * read once per turn either way).  Always inlined, so that the plain path
 * (COST 1, AT NULL, NOW0 NULL) is compiled with those constants.
 */
static inline __attribute__((always_inline)) int
bk_take_loop_at(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp,
    struct shmt_w *wio, uint32_t *tag, int *why, uint32_t cost, uint64_t *at,
    const uint64_t *now0)
{
	struct shmt_w w = *wio, nw;
	uint64_t s[2], due, now = 0;
	int rc = SHMT_EBUSYLOOP, busy;
	unsigned lost = 0, i;

	for (i = 0; i < SHMT_RETRY_MAX; i++) {
		now = now0 != NULL && i == 0 ? *now0 : shmt__now(h);
		uint32_t inflight = SHMT_W_INFLIGHT(w), count = SHMT_W_COUNT(w);
		uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w);
		uint32_t wtag = SHMT_W_TAG(w), ntag, tail2, nsealed2;
		uint64_t close;

		if (c->check_tag && wtag != c->tag_expect) {
			/* A guess may be of another time. */
			if (!bk_confirm(c, wp, &w))
				continue;
			rc = -EAGAIN;
			break;
		}
		if (!w_valid(c, w)) {
			/* A guess may be of another time: check before
			 * calling the segment damaged. */
			if (!bk_confirm(c, wp, &w))
				continue;
			rc = SHMT_ECORRUPT;
			break;
		}
		rc = bk_release_step(c, w, now, &nw, &due);
		if (rc < 0)
			break;
		if (rc == SLOT_STALE) {
			shmt__load128(wp, w.w);
			continue;
		}
		if (rc == 1) {
			shmt__bk_commit_release(c, wp, &w, nw);
			continue;
		}
		if ((uint64_t)inflight + cost > c->limit) {
			if (!bk_confirm(c, wp, &w))
				continue;
			*why = shmt__bk_why(c, w, now);
			rc = 0;
			break;
		}
		ntag = c->ntags != 0 ? (wtag + 1) % c->ntags : wtag;
		tail2 = tail;
		nsealed2 = nsealed;
		if (SHMT_W_ACTIVE(w)) {
			struct shmt_ring_slot *slot = slot_of(c, tail);

			bk_load(c, slot, s);
			if ((rc = slot_is(s, tail)) == SLOT_STALE) {
				shmt__load128(wp, w.w);
				continue;
			}
			if (rc != SLOT_OK)
				break;
			if ((uint64_t)count + cost <= c->slack_uses &&
			    now < s[0]) {
				nw = shmt__w_make(inflight + cost,
				    count + cost, tail,
				    nsealed, 1, ntag);
				if (shmt__cas128(wp, w.w, nw.w)) {
					*tag = wtag;
					w = nw;
					rc = 1;
					bk_won(c, wp);
					break;
				}
				bk_lost(c, wp, &w, &lost);
				continue;
			}
			if ((rc = shmt__slot_raise(slot, tail, count)) != 0)
				break;
			tail2 = tail + 1;
			nsealed2 = nsealed + 1;
		}
		if (nsealed2 + 1 > c->nb) {
			if (!bk_confirm(c, wp, &w))
				continue;
			*why = WHY_RING_FULL;
			rc = 0;
			break;
		}
		close = slot_open(slot_of(c, tail2), tail2, tail2 - nsealed2,
		    sat_add(now, c->slack), &busy);
		if (busy) {
			/* Across the serial's wrap, the slot's bucket is still
			 * in use (slot_open): no room yet, as a full ring. */
			if (!bk_confirm(c, wp, &w))
				continue;
			*why = WHY_RING_FULL;
			rc = 0;
			break;
		}
		if (close <= now) {
			/* A stale opener set this serial's close in the past
			 * (or W is stale): skip the serial, which stays in the
			 * ring as an empty sealed bucket until it is due. */
			nw = shmt__w_make(inflight, 0, tail2 + 1, nsealed2 + 1,
			    0, wtag);
			shmt__cas128(wp, w.w, nw.w) ? (void)(w = nw) : (void)0;
			continue;
		}
		nw = shmt__w_make(inflight + cost, cost, tail2, nsealed2,
		    1, ntag);
		if (shmt__cas128(wp, w.w, nw.w)) {
			*tag = wtag;
			w = nw;
			rc = 1;
			bk_won(c, wp);
			break;
		}
		bk_lost(c, wp, &w, &lost);
	}
	/* Every way out of the loop but this one sets rc; a loop that ran
	 * out (a segment changed under us without end) is an error, whatever
	 * the last step left in rc. */
	if (i == SHMT_RETRY_MAX)
		rc = SHMT_EBUSYLOOP;
	if (at != NULL)
		*at = now;
	*wio = w;
	return rc;
}

static inline __attribute__((always_inline)) int
bk_take_loop(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp,
    struct shmt_w *wio, uint32_t *tag, int *why, uint32_t cost, uint64_t *at)
{
	return bk_take_loop_at(h, c, wp, wio, tag, why, cost, at, NULL);
}

/*
 * Take one use from the ring whose word is at WP.  Returns 1 granted (with
 * the key-pool cursor in *TAG), 0 denied (reason in *WHY), or an error.
 * The tag is advanced mod ntags on every grant, or kept when ntags is 0
 * (client entries keep their state and epoch there; the CAS then also checks
 * that the entry is still the caller's).
 */
static inline __attribute__((always_inline)) int
bk_take_n(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp, uint32_t *tag,
    int *why, uint32_t cost, uint64_t *at)
{
	unsigned g = wguess_slot(wp);
	int guessed = c->torn_ok && shmt__wguess[g].wp == wp &&
	    shmt__wguess[g].uid == h->uid;
	struct shmt_w w;
	int rc;

	if (guessed) {
		w.w[0] = shmt__wguess[g].w[0];
		w.w[1] = shmt__wguess[g].w[1];
	} else {
		bk_load(c, wp, w.w);
	}
	rc = bk_take_loop(h, c, wp, &w, tag, why, cost, at);
	if (c->torn_ok) {
		/* Keep the last word seen for the next call, but only one
		 * known to be current: from a CAS or a full load. */
		shmt__wguess[g].wp = rc >= 0 ? wp : NULL;
		shmt__wguess[g].uid = h->uid;
		shmt__wguess[g].w[0] = w.w[0];
		shmt__wguess[g].w[1] = w.w[1];
	}
	return rc;
}

/* The general path of bk_take_view (ring.c): the loop from the word {W0,
 * W1} (its halves, passed in registers), with the clock value NOW read
 * after it when HAVE_NOW (else the loop reads the clock), keeping this
 * thread's guess of the word as bk_take_n does.  AT (may be NULL) gets the
 * decision's clock value. */
int shmt__bk_take_view_slow(shmt_t *h, const struct shmt_lview *v,
    uint64_t w0, uint64_t w1, int have_now, uint64_t now, uint32_t *tag,
    int *why, uint64_t *at);

/*
 * One use of the shared ring of view V (shmt_try_use_key, shmt_next_key,
 * shmt_limiter_try): what bk_take_n decides with V's context, torn reads
 * allowed, cost 1, but with a fast path for the commonest case that needs
 * no context, and the general loop (out of line) for everything else.
 *
 * The fast path.  From the word w (this thread's guess of it, or read half
 * by half, as bk_take_n reads it) and the clock value now read after it,
 * it grants when all of these hold:
 *   F1  the tag is the view's: its parameter generation (pgen_check), or
 *       a key-pool cursor below nkeys (key pools);
 *   F2  a bucket is active;
 *   F3  inflight < L (the view's limit);
 *   F4  count < B (slack_uses) and count <= inflight;
 *   F5  nsealed < nb;
 *   F6  with a sealed bucket, the oldest one's slot holds its serial with at
 *       most inflight uses, and it is not due at now (bk_due_of);
 *   F7  the active bucket's slot holds tail, and now < its close time;
 * by one CAS of W to {inflight + 1, count + 1, the same tail, nsealed and
 * active, the next tag}.  When one fails, it hands w and now to the loop
 * (shmt__bk_take_view_slow), whose first turn decides from them; a lost CAS
 * asks for the word as the loop's does (bk_lost) and the loop goes on from
 * the word read after it, with a clock read of its own.
 *
 * Why the fast path decides what the loop decides.  Given the same w and
 * now, the loop's first turn: passes the tag check (F1); finds w_valid
 * true, since L <= limit_cap, B <= uses_cap and nb >= 1 hold for every view
 * (shmt__view_fill and view_params refuse a row without them, so a hostile
 * row cannot break them) and a view with pgen_check has no key pool
 * (nkeys 0): inflight < L <= limit_cap, count < B <= uses_cap, count <=
 * inflight, nsealed + 1 <= nb, active, tag < ntags where ntags != 0 (F1-F5);
 * releases nothing: with a sealed bucket its release step is F6 itself
 * (the same serial, slot checks and due time), without one it looks at
 * the active bucket, due at sat_add(close, window) >= close > now (F7);
 * passes the limit (F3: inflight + 1 <= L); and grants into the active
 * bucket (F4: count + 1 <= B; F7: the slot holds tail and now < close)
 * with the same CAS, the tag advanced by (tag + 1) mod ntags, which is
 * tag + 1 or 0 since tag < ntags (F1).  So the two paths make the same
 * clock reads, the same decision and the same write; every check the loop
 * makes of a damaged segment (w_valid, the slot serials and counts) is
 * made here or follows from the view's checks, and a word or slot that
 * fails one goes to the loop, which reports it.  The loop reads the
 * active bucket's slot twice where this reads it once: by "Torn reads"
 * (ring.c) a slot that a decision reads is fixed from the read of the
 * word to a CAS that succeeds, so both reads give the same value.  The
 * parameter generation is checked against the tag before the CAS and
 * committed by it (update.c); the check after the grant for a move
 * (shmt__grant_check) follows both paths alike (grant.h).
 */
static inline __attribute__((always_inline)) int
bk_take_view_at(shmt_t *h, const struct shmt_lview *v, uint32_t *tag, int *why,
    uint64_t *at)
{
	struct shmt_lim *lim = v->lim;
	struct shmt_w *wp = &lim->lm_w, w, nw;
	struct shmt_wguess *g = &shmt__wguess[wguess_slot(wp)];
	uint32_t inflight, count, tail, nsealed, wtag;
	uint64_t now, s[2];

	if (g->wp == wp && g->uid == h->uid) {
		w.w[0] = g->w[0];
		w.w[1] = g->w[1];
	} else {
		shmt__load128_hilo(wp, w.w);
	}
	now = shmt__now(h);
	inflight = SHMT_W_INFLIGHT(w);
	count = SHMT_W_COUNT(w);
	tail = SHMT_W_TAIL(w);
	nsealed = SHMT_W_NSEALED(w);
	wtag = SHMT_W_TAG(w);
	if (__builtin_expect(!(v->pgen_check ? wtag == v->pgen :
	    wtag < v->nkeys) || !SHMT_W_ACTIVE(w) || inflight >= v->limit ||
	    count >= v->slack_uses || count > inflight || nsealed >= v->nb,
	    0))
		goto slow;
	if (nsealed > 0) {
		uint32_t serial = tail - nsealed;

		shmt__load128_hilo(ring_slot(v->ring, v->nb_magic, v->nb,
		    serial), s);
		if (__builtin_expect(SLOT_SERIAL(s) != serial ||
		    SLOT_COUNT(s) > inflight || bk_due_of(v->window,
		    v->hold_window, v->hold_serial, v->hold_until, serial,
		    s[0]) <= now, 0))
			goto slow;
	}
	shmt__load128_hilo(ring_slot(v->ring, v->nb_magic, v->nb, tail), s);
	if (__builtin_expect(SLOT_SERIAL(s) != tail || now >= s[0], 0))
		goto slow;
	/* {inflight + 1, count + 1}: neither carries (F3, F4). */
	nw.w[0] = w.w[0] + ((uint64_t)1 << 32) + 1;
	nw.w[1] = v->nkeys == 0 ? w.w[1] : (w.w[1] & ~(uint64_t)0xffffU) |
	    (wtag + 1 == v->nkeys ? 0 : wtag + 1);
	if (__builtin_expect(shmt__cas128(wp, w.w, nw.w), 1)) {
		g->wp = wp;
		g->uid = h->uid;
		g->w[0] = nw.w[0];
		g->w[1] = nw.w[1];
		*tag = wtag;
		if (at != NULL)
			*at = now;
		/* bk_won */
		if (__builtin_expect(__atomic_load_n(&lim->lm_handoff,
		    __ATOMIC_RELAXED) != 0, 0))
			shmt__handoff_yield(&lim->lm_handoff, wp);
		return 1;
	}
	/* bk_lost, then the loop on the word read afresh. */
	shmt__handoff_ask(&lim->lm_handoff, wp);
	shmt__load128(wp, w.w);
	return shmt__bk_take_view_slow(h, v, w.w[0], w.w[1], 0, 0, tag, why,
	    at);
slow:
	return shmt__bk_take_view_slow(h, v, w.w[0], w.w[1], 1, now, tag, why,
	    at);
}

/* bk_take_view_at without the clock value: the plain grant. */
static inline __attribute__((always_inline)) int
bk_take_view(shmt_t *h, const struct shmt_lview *v, uint32_t *tag, int *why)
{
	return bk_take_view_at(h, v, tag, why, NULL);
}

/*
 * One use of a client entry's ring (shmt_try_use on a per-client limiter):
 * what bk_take_n decides with the context shmt__bk_ctx_init(V, RING) gives,
 * ntags 0 and the tag checked against EXPECT, cost 1, with a fast path
 * like bk_take_view's.  V is the view of the entry's rule (a tier's own
 * limit and B').  *AT gets the decision's clock value.
 *
 * The fast path grants from the word (one full load: entries are never
 * read half by half) and the clock read after it when F1' the tag is
 * EXPECT (the entry is still the caller's, its epoch unchanged) and F2-F7
 * of bk_take_view hold with V's limit, B, nb and window and the entry's
 * ring, by one CAS of W to {inflight + 1, count + 1, the rest the same}.
 * Why the loop decides the same from that word and clock value: its first
 * turn passes the tag check (F1'); w_valid holds, since a per-client view
 * has limit_cap SHMT_LIMIT_MAX >= L and uses_cap the B' of the largest
 * tier >= B (shmt__view_fill), and ntags is 0; the release step is F6, or
 * without a sealed bucket finds the active one due at sat_add(close,
 * window) >= close > now (F7); the limit passes (F3); the grant goes into
 * the active bucket (F4, F7) by the same CAS, the tag kept (ntags 0).  An
 * entry's word has no hand-off: a lost CAS backs off (bk_lost), reads the
 * word afresh and goes on in the loop with a clock read of its own, as the
 * loop would; anything else hands the word and the clock value to the
 * loop's first turn, so the clock is read once per turn on both paths.
 *
 * W0, when not NULL, is the word as the caller's lookup loaded it (one
 * full load, before the clock is read and before the entry's rule): the
 * fast path starts from it instead of loading W again.  Nothing above
 * changes: a CAS that succeeds proves W held W0 from that load on, so the
 * decision is the one the word would give at the clock value read after
 * it; one that fails reads the word afresh, as above.
 */
static inline __attribute__((always_inline)) int
bk_take_entry(shmt_t *h, const struct shmt_lview *v, struct shmt_w *wp,
    struct shmt_ring_slot *ring, uint32_t expect, uint32_t *tag, int *why,
    uint64_t *at, const struct shmt_w *w0)
{
	uint32_t inflight, count, tail, nsealed;
	unsigned lost = 0;
	struct shmt_w w, nw;
	struct bk_ctx c;
	uint64_t now, s[2];

	if (w0 != NULL)
		w = *w0;
	else
		shmt__load128(wp, w.w);
	now = shmt__now(h);
	inflight = SHMT_W_INFLIGHT(w);
	count = SHMT_W_COUNT(w);
	tail = SHMT_W_TAIL(w);
	nsealed = SHMT_W_NSEALED(w);
	if (__builtin_expect(SHMT_W_TAG(w) != expect || !SHMT_W_ACTIVE(w) ||
	    inflight >= v->limit || count >= v->slack_uses ||
	    count > inflight || nsealed >= v->nb, 0))
		goto slow;
	if (nsealed > 0) {
		uint32_t serial = tail - nsealed;

		shmt__load128(ring_slot(ring, v->nb_magic, v->nb, serial), s);
		if (__builtin_expect(SLOT_SERIAL(s) != serial ||
		    SLOT_COUNT(s) > inflight || bk_due_of(v->window,
		    v->hold_window, v->hold_serial, v->hold_until, serial, s[0]) <=
		    now, 0))
			goto slow;
	}
	shmt__load128(ring_slot(ring, v->nb_magic, v->nb, tail), s);
	if (__builtin_expect(SLOT_SERIAL(s) != tail || now >= s[0], 0))
		goto slow;
	nw.w[0] = w.w[0] + ((uint64_t)1 << 32) + 1;
	nw.w[1] = w.w[1];
	if (__builtin_expect(shmt__cas128(wp, w.w, nw.w), 1)) {
		*tag = expect;
		*at = now;
		return 1;
	}
	shmt__bk_ctx_init(&c, v, ring);
	c.ntags = 0;
	c.check_tag = 1;
	c.tag_expect = expect;
	bk_lost(&c, wp, &w, &lost);
	return bk_take_loop_at(h, &c, wp, &w, tag, why, 1, at, NULL);
slow:
	/* A refusal at the limit as the loop's first turn makes it (the
	 * entry's context: its word read whole, torn_ok 0, so never 2). */
	if (shmt__bk_deny(v, ring, SHMT_W_TAG(w) == expect, 0, wp, &w, now,
	    why) == 0) {
		*at = now;
		return 0;
	}
	shmt__bk_ctx_init(&c, v, ring);
	c.ntags = 0;
	c.check_tag = 1;
	c.tag_expect = expect;
	return bk_take_loop_at(h, &c, wp, &w, tag, why, 1, at, &now);
}

#endif /* SHMT_RING_H */
