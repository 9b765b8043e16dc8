/* SPDX-License-Identifier: MIT */
/*
 * Rate mode keeps one number per limiter: the theoretical arrival time TAT,
 * when the next use would be due if uses came evenly at the rate.  With
 * emission interval T = window / limit (whole nanoseconds, rounded down) and
 * tolerance D = T * burst, a request of k uses at NOW is
 *
 *   tat = load(TAT)                      -- before the clock, as in the ring
 *   now = clock()
 *   new = max(tat, now) + k * T
 *   if new - D > now: refuse             -- allowed at new - D
 *   else CAS TAT from tat to new         -- decides and records at once
 *   on CAS failure: tat = the value it returned; again
 *
 * which is the algorithm redis-cell implements for CL.THROTTLE with
 * max_burst = burst - 1, count_per_period = limit and period = window,
 * decided in nanoseconds (redis-cell: limit = max_burst + 1, tolerance =
 * T * (max_burst + 1)).  It reads the limiter rows through the views of
 * table.h, as the other modes do.
 *
 * The safety promise (its own, not the ring's): at most burst + floor(d/T)
 * uses are granted with decision times in any half-open interval [a, a+d).
 * Proof.  Order the successful CASes; each read TAT (the previous CAS's
 * value) before its clock, so its clock value is at least that of every
 * earlier grant: the CASes form a sequential run with nondecreasing times.
 * TAT never falls.  Let the grants in [a, a+d) take U uses, the first at
 * t1, the last at t2.  Just after the first, TAT >= t1 + k1 * T (max(tat,
 * now) >= now); each later grant adds its k * T to a TAT at least as large,
 * so after the last TAT >= t1 + U * T.  That grant passed: TAT <= t2 + D.
 * So U * T <= t2 - t1 + D < d + burst * T, and U < burst + d / T, which for
 * an integer U is U <= burst + floor(d / T) (when d / T is whole, one
 * less).  A refusal needs no CAS: TAT only grows, so a request refused on an
 * older TAT is refused on the current one too.  kill -9 anywhere: the CAS
 * happened (the uses are granted, and counted in the same word) or not
 * (nothing changed); only a grant counted on the row's counter (past the
 * word's bound, gcra.h) can lose its count, not its use, to a kill between
 * the CAS and the add.
 * The word is only ever replaced whole, so there is no torn state.
 *
 * Decisions, exactly as redis-cell's, in nanoseconds: granted: reset =
 * new - now, remaining = (D - reset) / T; refused: retry = (new - D) - now,
 * reset = tat - now, remaining = (D - reset) / T when positive, else 0.
 * With nobody else calling, a request of k at now + retry has new - D <=
 * that time and passes, and one nanosecond earlier it does not; the j-th
 * request of one use at the same instant passes iff TAT + j * T - D <= now,
 * which is j <= remaining; at now + reset (TAT) the limiter is full again.
 *
 * Changing the parameters in place (shmt_limiter_update)
 * ------------------------------------------------------
 * A shared rate limiter keeps TAT in W's first half and the parameter
 * generation g in the low 16 bits of its second (above it, the count of
 * its grants, gcra.h, which a grant's CAS raises and a change keeps); the
 * parameters (limit, window, burst) of g != 0 live in row block
 * lm_p[g & 1] (g = 0: the identity fields), read like a seqlock against
 * the tag as in update.c.  A grant is one 16-byte CAS of the whole W from
 * {tat, g} to {new, g}, made only when g is its view's generation; a
 * refusal makes no CAS but reads the tag again after TAT and decides only
 * if it is unchanged (so it saw TAT and g together).  Under the table
 * lock, the updater, with old (T, D = T * B) and new (T', D' = T' * B'):
 *
 *   {tat, g} = load(W); u = clock()
 *   g' = g + 1 (skipping 0); write block lm_p[g' & 1] = {L', C', B'}
 *   tat' = tat                                   if tat <= u or T' = T
 *        = max(tat, u + ceil((tat - u) / T) * T') otherwise
 *   CAS W {tat, g} -> {tat', g'}; on failure load W, read the clock, again
 *
 * One decision, one set of parameters.  Every grant is a CAS of the whole
 * W that compares the tag, and the change is one CAS of W, so the change
 * is one point in the order of W's CASes: a grant before it compared g and
 * decided with g's parameters, one after it compared g' (a view of g
 * fails its CAS, and its call renews the view, shmt__view_renew, and
 * decides again); a refusal saw one (TAT, tag) pair.  The block is complete
 * before the CAS names it, and rewritten only for g' + 1 after W left g'.
 * Times: a grant before the change read its clock before the updater
 * loaded W (else the updater's CAS would fail), so at or before u; one
 * after the change read it after the CAS, so at or after u.
 *
 * Uses in flight stay counted.  Read GCRA as a bucket of level
 * q(t) = max(0, TAT - t) / T uses, which drains one use per T, that a
 * grant of k passes iff q + k <= B, and raises by k.  At the change,
 * tat' >= tat (TAT never moves earlier than the old parameters owed: a
 * use in flight is not let go sooner than they said), and
 * q' = (tat' - u) / T' >= ceil(q) >= q when T changes (q' = q when it
 * does not): every use in flight, rounded up to a whole one, costs T'
 * from now on (a lowered rate or a longer window
 * holds the old uses longer; a raised rate keeps tat, so their old debt
 * reads as more new uses, for at most tat - u).  So a lowered burst refuses
 * until the level drains under B' - k, and stat's in_flight never falls
 * at a change.  What is promised across a change at u:
 *  - grants decided wholly after it (times >= u, the tag g') obey the
 *    promise above with (T', B'): at most B' + floor(d / T') uses in any
 *    [a, a + d) after u (that proof needs only TAT never falling);
 *  - any [a, a + d) that holds u holds fewer than
 *    B_e + (u - a) / T + (a + d - u) / T' uses, B_e the burst of its last
 *    grant's parameters, so at most max(B, B') + floor(d / min(T, T')),
 *    the old promise with the larger burst and the shorter interval: with t1
 *    and t2 the first and the last grant in it, the level is at least k1
 *    just after t1, grows by each later grant's k, drains by at most
 *    (u - t1) / T + (t2 - u) / T', never falls at u, and is at most B_e
 *    after t2: U <= B_e + (u - t1) / T + (t2 - u) / T', with t2 - t1 < d.
 *    With more than one change in [a, a + d), each stretch drains at its
 *    own 1 / T in the same sum.
 * kill -9 of the updater: before its CAS nothing changed (the block it
 * wrote is one W does not name); after it, the change is whole.  A reset
 * (shmt_limiter_reset) puts TAT to 0 and keeps the tag; a refund (batch.c)
 * is a CAS of the whole W with the generation of the grant's receipt, so a
 * grant of g is never given back at g's cost under g'.  Up to 65535
 * changes overtaking one preempted grant would let its tag match again (as
 * in update.c).
 */
#include "gcra.h"

#include "clients.h"
#include "ring.h"
#include "util.h"
#include "wait.h"

#include <errno.h>
#include <stdio.h>

/* The largest tolerance accepted: D = T * burst, with room to add NOW. */
#define GCRA_D_MAX (UINT64_MAX / 4)

int
shmt__gcra_check(const shmt_limit_t *l)
{
	uint64_t T;

	if (l->nkeys != 0 || l->slack_ns != 0 ||
	    l->slack_uses != 0 || l->burst == 0 || l->burst > SHMT_LIMIT_MAX)
		return -EINVAL;
	T = l->window_ns / l->limit;
	if (T == 0 || T > GCRA_D_MAX / l->burst)
		return -EINVAL;
	return 0;
}

uint64_t
shmt__gcra_rescale(const struct shmt_lview *v, const shmt_limit_t *l,
    uint64_t tat, uint64_t now)
{
	unsigned __int128 want;

	if (tat <= now || l->window_ns / l->limit == gcra_T(v))
		return tat;             /* nothing in flight, or the same T */
	/* Every use in flight, rounded up to a whole one, at the new T. */
	want = (unsigned __int128)div_up(tat - now, gcra_T(v)) *
	    (l->window_ns / l->limit) + now;
	if (want > UINT64_MAX)
		return UINT64_MAX;
	return (uint64_t)want > tat ? (uint64_t)want : tat;
}

void
shmt__gcra_decide(const struct shmt_lview *v, uint64_t tat, uint64_t now,
    uint64_t k, int granted, shmt_decision_t *out)
{
	uint64_t T = gcra_T(v), D = v->rate_d;
	uint64_t ttl = tat > now ? tat - now : 0;

	out->granted = granted;
	out->limit = v->burst;
	out->reset_after_ns = ttl;
	out->remaining = D > ttl ? (D - ttl) / T : 0;
	out->retry_after_ns = 0;
	if (!granted) {
		uint64_t allow = (tat > now ? tat : now) + k * T - D;

		out->retry_after_ns = allow > now ? allow - now : 0;
	}
}

int
shmt__gcra_acquire_at(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out, uint64_t *tatp)
{
	uint64_t now = 0, tat = 0;
	int rc = gcra_take(h, v, cost, &now, &tat);

	if (tatp != NULL)
		*tatp = tat;
	gcra_count(v, rc);
	if (rc >= 0 && out != NULL)
		shmt__gcra_decide(v, tat, now, cost, rc, out);
	return rc;
}

int
shmt__gcra_refund(const struct shmt_lview *v, uint64_t tat, uint64_t cost,
    uint32_t gen)
{
	uint64_t back = gcra_T(v) * cost, w[2], nw[2];

	if (tat < back)
		return SHMT_ECORRUPT;
	/* Granted under other parameters than V's: the arrival time was
	 * rescaled since (or V is older), so nothing is given back. */
	if (gen != v->pgen)
		return 0;
	w[0] = tat;
	w[1] = __atomic_load_n(&v->lim->lm_w.w[1], __ATOMIC_ACQUIRE);
	if ((uint32_t)(w[1] & 0xffffU) != gen)
		return 0;
	nw[0] = tat - back;
	/* Taken off the word's count in the same CAS when it holds the
	 * cost (it counted the grant, unless the grant went to the row's
	 * counter, gcra.h), else off the row's counter. */
	nw[1] = w[1];
	if (gcra_word_count(w[1]) >= cost)
		nw[1] -= cost << GCRA_COUNT_SHIFT;
	if (!shmt__cas128(&v->lim->lm_w, w, nw))
		return 0;
	if (nw[1] == w[1])
		__atomic_fetch_sub(&v->lim->lm_exact_grants, cost,
		    __ATOMIC_RELAXED);
	shmt__wake_waiters(&v->lim->lm_wake);
	return 1;
}

int
shmt__gcra_peek_tat(const struct shmt_lview *v, uint64_t tat, uint64_t now,
    uint64_t cost, shmt_decision_t *out)
{
	uint64_t T = gcra_T(v), nt = sat_add(tat > now ? tat : now, T * cost);
	int ok = nt <= sat_add(now, v->rate_d);

	shmt__gcra_decide(v, ok ? nt : tat, now, cost, ok, out);
	return ok;
}

int
shmt__gcra_peek(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out)
{
	uint64_t tat = __atomic_load_n(&v->lim->lm_w.w[0], __ATOMIC_ACQUIRE);

	return shmt__gcra_peek_tat(v, tat, shmt__now(h), cost, out);
}

uint64_t
shmt__gcra_grants(const struct shmt_lview *v)
{
	uint64_t n = __atomic_load_n(&v->lim->lm_exact_grants,
	    __ATOMIC_RELAXED);

	/* A per-client limiter's word holds no count (its grants add to
	 * lm_exact_grants). */
	if (v->flags & SHMT_LIMF_PER_CLIENT)
		return n;
	return n + gcra_word_count(__atomic_load_n(&v->lim->lm_w.w[1],
	    __ATOMIC_RELAXED));
}

void
shmt__gcra_stat(shmt_t *h, const struct shmt_lview *v, shmt_limiter_stat_t *o)
{
	uint64_t now = shmt__now(h), T = gcra_T(v), D = v->rate_d, ttl;
	uint64_t tat = __atomic_load_n(&v->lim->lm_w.w[0], __ATOMIC_ACQUIRE);

	o->buckets_in_use = 0;
	o->grants = shmt__gcra_grants(v);
	if (v->flags & SHMT_LIMF_PER_CLIENT) {
		o->in_flight = 0;
		for (uint32_t i = 0; i < v->capacity; i++) {
			struct shmt_w w;

			shmt__load128(&ce_at(v, i)->ce_w, w.w);
			if (SHMT_W_TAG(w) >> 14 == CE_LIVE && w.w[0] > now)
				o->in_flight += div_up(w.w[0] - now, T);
		}
		o->free = 0;
		return;
	}
	ttl = tat > now ? tat - now : 0;
	o->in_flight = div_up(ttl, T);
	o->free = D > ttl ? (D - ttl) / T : 0;
}

/* ---- Per client ------------------------------------------------------------ */

int
shmt__gcra_ce_take(shmt_t *h, const struct shmt_lview *v, struct shmt_client *e,
    uint32_t expect, uint64_t cost, uint64_t *nowp, uint64_t *tatp)
{
	uint64_t inc = gcra_T(v) * cost, D = v->rate_d;
	struct shmt_w w, nw;
	unsigned lost = 0;

	shmt__load128(&e->ce_w, w.w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint64_t now = shmt__now(h), nt;

		if (SHMT_W_TAG(w) != expect)
			return -EAGAIN;
		nt = sat_add(w.w[0] > now ? w.w[0] : now, inc);
		if (nowp != NULL)
			*nowp = now;
		if (nt > sat_add(now, D)) {
			if (tatp != NULL)
				*tatp = w.w[0];
			return 0;
		}
		nw = w;
		nw.w[0] = nt;
		if (shmt__cas128(&e->ce_w, w.w, nw.w)) {
			if (tatp != NULL)
				*tatp = nt;
			__atomic_fetch_add(&v->lim->lm_exact_grants, cost,
			    __ATOMIC_RELAXED);
			return 1;
		}
		shmt__cas_backoff(&lost);
	}
	return SHMT_EBUSYLOOP;
}

int
shmt__gcra_ce_reclaim(struct shmt_client *e, uint64_t now)
{
	struct shmt_w w, nw;

	shmt__load128(&e->ce_w, w.w);
	if (SHMT_W_TAG(w) >> 14 != CE_LIVE || w.w[0] > now)
		return 0;
	nw = ce_word(SHMT_W_TAIL(w), CE_FREE, SHMT_W_TAG(w) & CE_EPOCH_MASK);
	return shmt__cas128(&e->ce_w, w.w, nw.w);
}

int64_t
shmt__gcra_reset(struct shmt_w *wp, int is_client)
{
	struct shmt_w w, nw;

	shmt__load128(wp, w.w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		if ((is_client && SHMT_W_TAG(w) >> 14 != CE_LIVE) || w.w[0] == 0)
			return 0;
		nw = w;
		nw.w[0] = 0;
		if (shmt__cas128(wp, w.w, nw.w))
			return 0;
	}
	return SHMT_EBUSYLOOP;
}
