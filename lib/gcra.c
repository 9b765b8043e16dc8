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
 * happened (the uses are granted and count) or not (nothing changed).
 * The word is only ever replaced whole, so there is no torn state.
 *
 * Decisions, exactly as redis-cell's, in nanoseconds: granted: reset =
 * new - now, remaining = (D - reset) / T; refused: retry = (new - D) - now,
 * reset = tat - now, remaining = (D - reset) / T when positive, else 0.
 * With nobody else calling, a request of k at now + retry has new - D <=
 * that time and passes, and one nanosecond earlier it does not; the j-th
 * request of one use at the same instant passes iff TAT + j * T - D <= now,
 * which is j <= remaining; at now + reset (TAT) the limiter is full again.
 */

#include "gcra.h"

#include "clients.h"
#include "ring.h"
#include "wait.h"
#include "util.h"

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

static inline uint64_t
gcra_T(const struct shmt_lview *v)
{
	return v->window / v->limit;
}

void
shmt__gcra_decide(const struct shmt_lview *v, uint64_t tat, uint64_t now,
    uint64_t k, int granted, shmt_decision_t *out)
{
	uint64_t T = gcra_T(v), D = T * v->burst;
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

/* One request of COST: 1 granted, 0 refused.  *NOWP gets its clock value,
 * *TATP the arrival time it installed (granted) or saw (refused). */
static inline int
gcra_take(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    uint64_t *nowp, uint64_t *tatp)
{
	uint64_t *tp = &v->lim->lm_w.w[0];
	uint64_t inc = gcra_T(v) * cost, D = gcra_T(v) * v->burst;
	uint64_t tat = __atomic_load_n(tp, __ATOMIC_ACQUIRE);
	unsigned lost = 0;

	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint64_t now = shmt__now(h), nt;

		nt = sat_add(tat > now ? tat : now, inc);
		*nowp = now;
		if (nt > sat_add(now, D)) {
			*tatp = tat;
			return 0;
		}
		if (__atomic_compare_exchange_n(tp, &tat, nt, 0,
		    __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
			*tatp = nt;
			return 1;
		}
		shmt__cas_backoff(&lost);
	}
	return SHMT_EBUSYLOOP;
}

int
shmt__gcra_acquire_at(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out, uint64_t *tatp)
{
	uint64_t now = 0, tat = 0;
	int rc = gcra_take(h, v, cost, &now, &tat);

	if (tatp != NULL)
		*tatp = tat;
	if (rc == 1)
		__atomic_fetch_add(&v->lim->lm_exact_grants, cost,
		    __ATOMIC_RELAXED);
	else if (rc == 0)
		shmt__count_denial(v->lim, WHY_EXHAUSTED);
	if (rc >= 0 && out != NULL)
		shmt__gcra_decide(v, tat, now, cost, rc, out);
	return rc;
}

int
shmt__gcra_refund(const struct shmt_lview *v, uint64_t tat, uint64_t cost)
{
	uint64_t *tp = &v->lim->lm_w.w[0], back = gcra_T(v) * cost;

	if (tat < back)
		return SHMT_ECORRUPT;
	if (!__atomic_compare_exchange_n(tp, &tat, tat - back, 0,
	    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		return 0;
	__atomic_fetch_sub(&v->lim->lm_exact_grants, cost, __ATOMIC_RELAXED);
	shmt__wake_waiters(&v->lim->lm_wake);
	return 1;
}

int
shmt__gcra_peek_tat(const struct shmt_lview *v, uint64_t tat, uint64_t now,
    uint64_t cost, shmt_decision_t *out)
{
	uint64_t T = gcra_T(v), nt = sat_add(tat > now ? tat : now, T * cost);
	int ok = nt <= sat_add(now, T * v->burst);

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

void
shmt__gcra_stat(shmt_t *h, const struct shmt_lview *v, shmt_limiter_stat_t *o)
{
	uint64_t now = shmt__now(h), T = gcra_T(v), D = T * v->burst, ttl;
	uint64_t tat = __atomic_load_n(&v->lim->lm_w.w[0], __ATOMIC_ACQUIRE);

	o->buckets_in_use = 0;
	o->grants = __atomic_load_n(&v->lim->lm_exact_grants, __ATOMIC_RELAXED);
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
	uint64_t inc = gcra_T(v) * cost, D = gcra_T(v) * v->burst;
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
