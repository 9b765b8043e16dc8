/* SPDX-License-Identifier: MIT */
/*
 * Changing a limiter's parameters in place (shmt_limiter_update): the
 * parameter generation in the state word's tag, the two parameter blocks
 * of a row, and the proof that no grant decides on a mix (buckets mode
 * here; rate and exact mode at the top of gcra.c and exact.c).
 *
 * Changing parameters in place (shmt_limiter_update)
 * ---------------------------------------------------
 * A grant decides with parameters (L, C, S, B) that its process copied
 * into a view long before; the change must reach every such grant in one
 * atomic step.  On a shared ring without keys, W's tag is the parameter
 * generation g, and the parameters of g live in row block lm_p[g & 1]
 * (g = 0: the identity fields).  (Rate and exact mode use the same tag and
 * blocks with their own steps and promises: see gcra.c and exact.c;
 * update_gcra and update_exact below.)  Under the table lock, the updater:
 *
 *   w = load(W)
 *   loop:
 *     g' = g + 1 (skipping 0)
 *     write block lm_p[g' & 1] = {L', C', S', B', hold, hold_serial, caps}
 *     if w.active: raise the active slot's count (seal it); tail' = tail + 1
 *     CAS W {inflight, count 0, tail', nsealed', active 0, tag g'}
 *     on CAS failure: w = load(W), loop
 *
 * Every grant and every release checks W's tag against its view's g before
 * deciding and commits by a CAS of the whole W, so one that read W before
 * the change fails its CAS, and one that reads the new tag builds a view
 * of g' (shmt__view_renew) first.  Hence the change is one point in the
 * order of CASes on W: every decision before it used the old parameters, every
 * decision after it the new ones.  A view reads the block like a seqlock
 * against the tag: a block is rewritten only for g + 2, after W left g.
 * A process killed before the CAS leaves the old generation (the block it
 * wrote is for a generation W never named); after it, the new one.
 *
 * Uses in flight stay in W (inflight) and in their buckets, which keep
 * their close times.  The grant test is inflight + k <= L', so a lowered
 * limit refuses until releases bring inflight under L'.  Releases use
 * close + max(C', hold) for serials below hold_serial (the buckets sealed
 * by then, the active one included), with hold = C, or the previous hold
 * if buckets of that earlier change are still in flight.  So every use
 * decided before the change is released no sooner than close + max(C, C')
 * >= its decision time + max(C, C').  The promises that follow:
 *  - an interval of length m = min(C, C') holds at most max(L, L') grants:
 *    a use decided in [t, t + m) is still in flight at the interval's end,
 *    and after any grant at most L (before) or L' (after) are in flight;
 *  - an interval of length C' lying after the change holds at most L': the
 *    grants in it are all in flight at its last grant, which left at most L'.
 * The caps in the block (limit_cap = max(L', inflight at the change),
 * uses_cap = largest count a held bucket may have) keep w_valid's and the
 * checker's tests of a damaged word true for the old uses.  The ring built
 * for the first parameters must hold the new ones (ceil(C'/S') + ceil(L'/B')
 * <= nb); while old buckets are held it may fill sooner, which refuses
 * (denied_ring_full), never over-grants.  A stale view may still open a
 * bucket (write a slot) with its old slack before its CAS fails; as for any
 * stale opener, the slot keeps a close time at which every use it will
 * hold was decided, so the release rule stays safe.  With a shorter slack
 * that close time may lie past now + S', which shmt_check's rule (no
 * bucket closes after now + the slack) calls damage: so a change to a
 * shorter slack opens the next serial itself (slot_open, new close time,
 * or the stale opener's if it came first) and seals it empty in its CAS
 * (tail' + 1, nsealed' + 1), then pulls every sealed close time in to now
 * + S'.  Sealed, that serial never takes a use, so its close may move;
 * the only serial a stale view can open is that one (its W's tail + 1 or
 * its tail, both at most the change's next serial), and every later one
 * is opened from the new W, with S'.  The empty bucket then takes the
 * close time of the bucket before it (or one a window back: due at once),
 * so it is released with them and holds no ring place of its own once
 * they are gone; the change makes it only with room for it and one more.
 * The pass reads the clock once, after the CAS, and may run late: a slot
 * reused meanwhile for a later bucket (whose uses may be later than that
 * clock read) is left alone (shmt__fix_ring_times checks each serial).  Up to 65535 changes
 * overtaking one preempted grant would let its tag match again: the same
 * kind of caveat as tail wrapping above.  The argument under "Torn reads"
 * holds with the tag added to the order after (tail, active): a change
 * raises tail (it seals) or only the tag, and the tag only grows.
 */
#include "fork.h"
#include "limiter.h"

#include "gcra.h"
#include "lock.h"
#include "ring.h"
#include "table.h"
#include "util.h"
#include "wait.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define REFUSE(rc, ...) do { \
		if (why != NULL && why_len > 0) \
			snprintf(why, why_len, __VA_ARGS__); \
		return (rc); \
	} while (0)

static const char *
mode_name(uint32_t mode)
{
	return mode == SHMT_MODE_EXACT ? "exact" :
	    mode == SHMT_MODE_GCRA ? "gcra" : "buckets";
}

/* What may change in place on V (a fresh view of the row), for a shared
 * limiter without keys: in buckets mode limit, window, slack_ns and
 * slack_uses, as long as the ring holds the new parameters; in rate mode
 * limit, window and burst; in exact mode limit and window, as long as the
 * log holds the new limit.  Nothing else. */
static int
update_check(const struct shmt_lview *v, const shmt_limit_t *l, char *why,
    size_t why_len)
{
	struct lim_geom g;
	shmt_limit_t want = *l;
	int rc;

	if (l->mode != (int)v->mode)
		REFUSE(-EOPNOTSUPP, "mode: cannot change in place (it is %s): "
		    "delete and define the limiter again", mode_name(v->mode));
	if (!v->pgen_check)
		REFUSE(-EOPNOTSUPP, "%s: its parameters cannot change in "
		    "place (only a shared limiter without keys can): a move "
		    "into a new generation defines it anew with its uses in "
		    "flight (shmthrottle limiter set, or the daemon's reload)",
		    (v->flags & SHMT_LIMF_KEYS) ? "a key pool" :
		    "a per-client limiter");
	if (l->per_client || l->client_capacity != 0 || l->nkeys != 0 ||
	    l->keys != NULL || l->uses_per_key != 0)
		REFUSE(-EOPNOTSUPP, "per_client, client_capacity, nkeys, keys "
		    "and uses_per_key cannot change in place");
	if ((l->shadow != 0) != ((v->flags & SHMT_LIMF_SHADOW) != 0))
		REFUSE(-EOPNOTSUPP, "shadow: cannot change in place");
	if (l->global || (v->flags & SHMT_LIMF_GLOBAL))
		REFUSE(-EOPNOTSUPP, "global: a global limiter's parameters "
		    "are the fleet's: they cannot change in place");
	if ((rc = shmt__limit_check(&want, &g, why, why_len)) != 0)
		return rc;
	if (v->mode == SHMT_MODE_BUCKETS && g.nb > v->nb)
		REFUSE(-E2BIG, "the new parameters need %u buckets "
		    "(window_ns / slack_ns + limit / slack_uses, rounded up), "
		    "the limiter's ring has %u: raise slack_ns or slack_uses, "
		    "or delete and define the limiter again", g.nb, v->nb);
	if (v->mode == SHMT_MODE_EXACT && l->limit > v->nlog)
		REFUSE(-E2BIG, "limit %" PRIu64 ": an exact limiter's log "
		    "holds the %" PRIu64 " grants it was defined with, and a "
		    "limit up to that can change in place; for more, a move "
		    "into a new generation gives it a larger log with its "
		    "uses in flight (shmthrottle limiter set, or the daemon's "
		    "reload)", l->limit, (uint64_t)v->nlog);
	return 0;
}

/* The next generation after TAG (0 names the identity). */
static uint32_t
next_gen(uint32_t tag)
{
	uint32_t gen = (tag + 1) & 0xffffU;

	return gen == 0 ? 1 : gen;
}

/* Rate mode (see "Changing the parameters in place" in gcra.c): the block
 * of g', then one CAS of W from {tat, g} to {tat', g'}. */
static int
update_gcra(shmt_t *h, struct shmt_lim *lim, const struct shmt_lview *v,
    const shmt_limit_t *l)
{
	uint64_t w[2], nw[2];

	shmt__load128(&lim->lm_w, w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint32_t gen = next_gen((uint32_t)w[1] & 0xffffU);
		struct shmt_lparams *p = &lim->lm_p[gen & 1];
		uint64_t now;

		if ((uint32_t)(w[1] & 0xffffU) != v->pgen ||
		    gcra_word_count(w[1]) > GCRA_COUNT_MAX)
			return SHMT_ECORRUPT;   /* only we change it */
		now = shmt__now(h);
		__atomic_store_n(&p->lp_limit, l->limit, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_window, l->window_ns, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_burst, l->burst, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_window, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_slack_uses, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_serial, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_limit_cap, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_uses_cap, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_gen, gen, __ATOMIC_RELAXED);
		nw[0] = shmt__gcra_rescale(v, l, w[0], now);
		nw[1] = (w[1] & ~0xffffULL) | gen;   /* the grants' count stays */
		/* The block is complete before W names it (a locked
		 * cmpxchg16b, as below). */
		if (shmt__cas128(&lim->lm_w, w, nw))
			return 0;
	}
	return SHMT_EBUSYLOOP;
}

/* Exact mode (see "Changing the parameters in place" in exact.c): the
 * block of g', then one CAS of W from {n, g} to {n, g'}, n the grant
 * hint; the records of grants up to n cool for max(C, C') (and for an
 * earlier change's hold while its records may still be read). */
static int
update_exact(struct shmt_lim *lim, const struct shmt_lview *v,
    const shmt_limit_t *l)
{
	uint64_t w[2], nw[2];

	shmt__load128(&lim->lm_w, w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint32_t gen = next_gen((uint32_t)w[1] & 0xffffU);
		struct shmt_lparams *p = &lim->lm_p[gen & 1];
		int64_t n = (int64_t)w[0];
		uint64_t hold = v->window;

		if (w[1] != v->pgen)
			return SHMT_ECORRUPT;   /* only we change it */
		if (n < 0 || n == INT64_MAX)
			return SHMT_ECORRUPT;
		/* Grants from n - nlog on may still be read (the log holds
		 * them); those below the last change's mark keep its hold. */
		if (v->hold_window > hold &&
		    v->hold_seq > n - (int64_t)v->nlog)
			hold = v->hold_window;
		__atomic_store_n(&p->lp_limit, l->limit, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_window, l->window_ns, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_seq, n + 1, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_window,
		    hold > l->window_ns ? hold : 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_slack_uses, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_serial, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_limit_cap, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_uses_cap, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_gen, gen, __ATOMIC_RELAXED);
		nw[0] = w[0];
		nw[1] = gen;
		if (shmt__cas128(&lim->lm_w, w, nw))
			return 0;
	}
	return SHMT_EBUSYLOOP;
}

/*
 * The empty bucket a shorter slack seals (update_locked), serial S, after
 * the change's CAS: it takes the close time LAST of the bucket before it
 * (their order kept), or with no bucket before it one a WINDOW before NOW,
 * so that it is due at once.  Either way it is released no later than the
 * buckets before it (releases go in serial order), so it holds a place in
 * the ring only while they do: none on a limiter with nothing in flight.
 * Sealed and empty, its close time holds no use; a CAS on its whole slot
 * leaves a slot reused meanwhile alone.
 */
static void
skip_settle(const struct bk_ctx *c, uint32_t s, uint64_t last, uint64_t now,
    uint64_t window)
{
	struct shmt_ring_slot *slot = slot_of(c, s);
	uint64_t w[2], d[2];

	shmt__load128(slot, w);
	if (SLOT_SERIAL(w) != s || SLOT_COUNT(w) != 0)
		return;
	d[0] = last != 0 ? last : now > window ? now - window : 1;
	d[1] = w[1];
	if (d[0] != w[0])
		(void)shmt__cas128(slot, w, d);
}

static int
update_locked(shmt_t *h, struct shmt_lim *lim, const struct shmt_lview *v,
    const shmt_limit_t *l)
{
	struct bk_ctx c;
	struct shmt_w w, nw;

	shmt__bk_ctx_init(&c, v, v->ring);
	shmt__load128(&lim->lm_w, w.w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint32_t tag = SHMT_W_TAG(w), gen = (tag + 1) & 0xffffU;
		uint32_t inflight = SHMT_W_INFLIGHT(w), tail = SHMT_W_TAIL(w);
		uint32_t nsealed = SHMT_W_NSEALED(w), hold_serial;
		uint64_t hold = v->window, cap;
		struct shmt_lparams *p;
		uint32_t ucap;
		int rc, skip;

		if (tag != v->pgen)
			return SHMT_ECORRUPT;   /* only we change it */
		if (!w_valid(&c, w))
			return SHMT_ECORRUPT;
		if (gen == 0)
			gen = 1;                /* 0 names the identity */
		/* Buckets still held from before the last change keep their
		 * longer window too. */
		if ((int32_t)(tail - nsealed - v->hold_serial) < 0 &&
		    v->hold_window > hold)
			hold = v->hold_window;
		if (SHMT_W_ACTIVE(w)) {
			/* Seal the active bucket: its uses were decided under
			 * the old parameters and cool for the old window. */
			if ((rc = shmt__slot_raise(slot_of(&c, tail), tail,
			    SHMT_W_COUNT(w))) != 0)
				return rc;
			nw = shmt__w_make(inflight, 0, tail + 1, nsealed + 1, 0,
			    gen);
			hold_serial = tail + 1;
		} else {
			nw = shmt__w_make(inflight, 0, tail, nsealed, 0, gen);
			hold_serial = tail;
		}
		cap = l->limit > inflight ? l->limit : inflight;
		ucap = (uint32_t)l->slack_uses;
		if (SHMT_W_NSEALED(nw) > 0 && v->uses_cap > ucap)
			ucap = v->uses_cap;
		if (ucap > cap)
			cap = ucap;
		/* A shorter slack: the serial the next grant would open is
		 * opened here and sealed empty by the CAS below.  A grant that
		 * read the old parameters may be about to open that serial
		 * with the old slack (the first opener's close time wins,
		 * slot_open), and a grant under the new W would then take its
		 * uses into a bucket that closes after now + the new slack:
		 * shmt_check's damage, a move refused until the old slack has
		 * passed.  Sealed by this CAS, the serial takes no use, so its
		 * close time may move after the CAS (skip_settle); and no later
		 * serial is opened but from the new W, under the new
		 * parameters.  With no room for the extra bucket in the ring
		 * (or a slot still in use across the serials' wrap), the
		 * update goes on without it.  (The caps above count the
		 * sealed buckets without it: it holds no use.) */
		skip = 0;
		if (l->slack_ns < v->slack &&
		    SHMT_W_NSEALED(nw) + 2 <= c.nb) {
			uint32_t s = SHMT_W_TAIL(nw), ns = SHMT_W_NSEALED(nw);
			int busy;

			if (slot_open(slot_of(&c, s), s, s - ns,
			    sat_add(shmt__now(h), l->slack_ns), &busy) != 0) {
				nw = shmt__w_make(inflight, 0, s + 1, ns + 1, 0,
				    gen);
				skip = 1;
			} else if (!busy) {
				/* The slot holds a later serial: W moved. */
				shmt__load128(&lim->lm_w, w.w);
				continue;
			}
		}
		p = &lim->lm_p[gen & 1];
		__atomic_store_n(&p->lp_limit, l->limit, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_window, l->window_ns, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_slack, l->slack_ns, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_window,
		    hold > l->window_ns ? hold : 0, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_slack_uses, (uint32_t)l->slack_uses,
		    __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_hold_serial, hold_serial,
		    __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_gen, gen, __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_limit_cap, (uint32_t)cap,
		    __ATOMIC_RELAXED);
		__atomic_store_n(&p->lp_uses_cap, ucap, __ATOMIC_RELAXED);
		/* The block is complete before W names it: the CAS is a
		 * locked cmpxchg16b (a full barrier) or a sequentially
		 * consistent compare-and-swap (atomic128.h). */
		if (shmt__cas128(&lim->lm_w, w.w, nw.w)) {
			/* This thread's guess of W is now the new word, so
			 * that its next grant decides as a fresh reader would
			 * (a stale guess is safe, but may open a bucket with
			 * the old slack). */
			unsigned gs = wguess_slot(&lim->lm_w);

			if (shmt__wguess[gs].wp == &lim->lm_w) {
				shmt__wguess[gs].w[0] = nw.w[0];
				shmt__wguess[gs].w[1] = nw.w[1];
			}
			if (l->slack_ns < v->slack) {
				/* A shorter slack: no bucket may close later
				 * than now + the new slack (shmt_check's rule).
				 * The buckets are all sealed by the CAS above,
				 * so no use can be decided into them any more,
				 * and each use they hold was decided before
				 * now: an earlier close still follows every
				 * decision in its bucket. */
				uint32_t n = SHMT_W_NSEALED(nw) - (uint32_t)skip;
				uint64_t now = shmt__now(h), last;

				c.slack = l->slack_ns;
				last = shmt__fix_ring_times(&c, SHMT_W_TAIL(nw) -
				    SHMT_W_NSEALED(nw), n, now);
				if (skip)
					skip_settle(&c, SHMT_W_TAIL(nw) - 1, last,
					    now, l->window_ns);
			}
			return 0;
		}
		shmt__load128(&lim->lm_w, w.w);
	}
	return SHMT_EBUSYLOOP;
}

static int
gen_limiter_update_once(shmt_t *h, const char *name, const shmt_limit_t *l,
    char *why, size_t why_len)
{
	struct shmt_lview v;
	struct shmt_lim *lim;
	uint32_t n, r;
	size_t len;
	int rc, lk;

	if (why != NULL && why_len > 0)
		why[0] = '\0';
	if (h == NULL || l == NULL)
		return -EINVAL;
	if ((rc = shmt__lim_name_check(name, &len)) != 0)
		return rc;
	if ((lk = shmt__table_lock(h)) != 0)
		return lk;
	lim = shmt__rows(h, &n);
	rc = -ENOENT;
	r = shmt__row_named(lim, n, name);
	if (r < n && (rc = shmt__view_fill(h, r, &lim[r], &v)) == 0 &&
	    (rc = update_check(&v, l, why, why_len)) == 0) {
		if (v.mode == SHMT_MODE_GCRA)
			rc = update_gcra(h, &lim[r], &v, l);
		else if (v.mode == SHMT_MODE_EXACT)
			rc = update_exact(&lim[r], &v, l);
		else
			rc = update_locked(h, &lim[r], &v, l);
		if (rc == 0)
			/* Sleepers (shmt_wait) look again under the new
			 * parameters. */
			shmt__wake_waiters(&lim[r].lm_wake);
		if (rc == 0)
			__atomic_fetch_add(&h->hdr->sh_generation, 1,
			    __ATOMIC_RELEASE);
	}
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

SHMT_EXPORT int
shmt_limiter_update(shmt_t *h, const char *name, const shmt_limit_t *l,
    char *why, size_t why_len)
{
	SHMT_GEN_CALL(h, gen_limiter_update_once(h, name, l, why, why_len));
}

#undef REFUSE
