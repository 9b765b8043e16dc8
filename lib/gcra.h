/* This file is private to libshmthrottle: rate mode (the generic cell rate algorithm). */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_GCRA_H
#define SHMT_GCRA_H

#include "ring.h"
#include "table.h"

#include <shmthrottle.h>

/* The rules of rate mode, beyond the common ones: 0, or -EINVAL (keys,
 * slack or a burst out of range, or an interval T of 0 or too large). */
int shmt__gcra_check(const shmt_limit_t *l);

/* The arrival time after changing V's parameters to L at NOW, from TAT
 * (see "Changing the parameters in place" in gcra.c). */
uint64_t shmt__gcra_rescale(const struct shmt_lview *v, const shmt_limit_t *l,
    uint64_t tat, uint64_t now);

/* Fill OUT for a request of K at NOW that saw TAT (refused), or that
 * installed TAT (granted). */
void shmt__gcra_decide(const struct shmt_lview *v, uint64_t tat, uint64_t now,
    uint64_t k, int granted, shmt_decision_t *out);

/* A grant of COST with its decision in OUT (may be NULL); *TATP (may be
 * NULL) gets the arrival time a grant installed, for a refund.  -EAGAIN:
 * the parameters changed since V was built (shmt__view_renew, again). */
int shmt__gcra_acquire_at(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out, uint64_t *tatp);

/*
 * Give back a grant of COST that installed TAT: only while TAT is still
 * the limiter's arrival time (no grant since).  It then goes back to
 * max(previous TAT, the grant's time), which is never below what it was
 * before the grant, so the promise above holds as if the grant had not
 * been made.  GEN: the parameter generation the grant was decided with
 * (its receipt's); under other parameters nothing is given back.
 * Returns 1 given back, 0 not (a later grant built on it, or a change).
 */
int shmt__gcra_refund(const struct shmt_lview *v, uint64_t tat, uint64_t cost,
    uint32_t gen);

/* What a grant of COST would answer at NOW on arrival time TAT. */
int shmt__gcra_peek_tat(const struct shmt_lview *v, uint64_t tat, uint64_t now,
    uint64_t cost, shmt_decision_t *out);

/* What gcra_acquire would answer now; reads the word once, writes nothing
 * (V should be fresh: shmt__view_fresh). */
int shmt__gcra_peek(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out);

/* In flight: the uses not yet back, ceil((TAT - now) / T) (per client:
 * summed over the live clients); free: what would be granted now (per
 * client: 0, as for the ring). */
void shmt__gcra_stat(shmt_t *h, const struct shmt_lview *v,
    shmt_limiter_stat_t *o);

/*
 * A client entry in rate mode keeps its arrival time in the first half of
 * its 16-byte word and its state and epoch in the tag of the second, so a
 * grant is one 16-byte CAS that also checks the entry is still the
 * caller's (as the ring's grant does).  Its ring is empty.
 */
int shmt__gcra_ce_take(shmt_t *h, const struct shmt_lview *v,
    struct shmt_client *e, uint32_t expect, uint64_t cost, uint64_t *nowp,
    uint64_t *tatp);

/* Reclaim entry E (called under the client lock) once its arrival time has
 * passed: it then holds nothing.  Returns 1 when E is free afterwards. */
int shmt__gcra_ce_reclaim(struct shmt_client *e, uint64_t now);

/* Rate mode: the arrival time at *TP goes back to none (0), keeping the
 * second word (a client entry's state) as it is. */
int64_t shmt__gcra_reset(struct shmt_w *wp, int is_client);

/*
 * The grants of a shared rate limiter: the count of uses it granted is the
 * row's lm_exact_grants plus the count in the upper 48 bits of W's second
 * half (above the parameter generation), which the grant's own CAS raises,
 * so a grant costs no other atomic.  When raising it would pass
 * GCRA_COUNT_MAX (2^48 - 2^32: years of grants at millions per second) or
 * the cost is above GCRA_COST_IN_WORD, the grant leaves the word's count
 * as it is and adds to lm_exact_grants instead (an atomic add, the older
 * way, after the CAS: a kill -9 between the two loses that grant's count,
 * never its use), so the word's count never wraps and the sum is never
 * read half moved.  A refund takes its cost off the word's count in its
 * own CAS, or off lm_exact_grants when the word holds less.  A change of
 * parameters and a reset keep the count; a repair that finds it past the
 * bound (damage) clears it, leaving lm_exact_grants.
 */
#define GCRA_COUNT_SHIFT 16
#define GCRA_COUNT_MAX ((1ULL << 48) - (1ULL << 32))
#define GCRA_COST_IN_WORD (1ULL << 31)

static inline uint64_t
gcra_word_count(uint64_t w1)
{
	return w1 >> GCRA_COUNT_SHIFT;
}

/* The uses a shared rate limiter granted (see above). */
uint64_t shmt__gcra_grants(const struct shmt_lview *v);

/* The interval T = window / limit of V's parameters (view_fill). */
static inline uint64_t
gcra_T(const struct shmt_lview *v)
{
	return v->rate_t;
}

/* One request of COST: 1 granted, 0 refused, -EAGAIN when W's tag names
 * other parameters than V's (renew the view and call again).  *NOWP gets
 * its clock value, *TATP the arrival time it installed (granted) or saw
 * (refused).  W's halves are read apart (the CAS checks both); a refusal,
 * which makes no CAS, reads the tag again after the arrival time, so that
 * it saw the two together (see "Changing the parameters in place"). */
static inline __attribute__((always_inline)) int
gcra_take(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    uint64_t *nowp, uint64_t *tatp)
{
	struct shmt_w *wp = &v->lim->lm_w;
	uint64_t inc = gcra_T(v) * cost, D = v->rate_d;
	uint64_t w[2], nw[2];

	w[1] = __atomic_load_n(&wp->w[1], __ATOMIC_ACQUIRE);
	w[0] = __atomic_load_n(&wp->w[0], __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint64_t now, nt;

		if (__builtin_expect((uint32_t)(w[1] & 0xffffU) != v->pgen, 0))
			return -EAGAIN;
		now = shmt__now(h);
		nt = sat_add(w[0] > now ? w[0] : now, inc);
		*nowp = now;
		if (nt > sat_add(now, D)) {
			if (__atomic_load_n(&wp->w[1], __ATOMIC_ACQUIRE) !=
			    w[1]) {
				w[1] = __atomic_load_n(&wp->w[1],
				    __ATOMIC_ACQUIRE);
				w[0] = __atomic_load_n(&wp->w[0],
				    __ATOMIC_ACQUIRE);
				continue;
			}
			*tatp = w[0];
			return 0;
		}
		nw[0] = nt;
		/* The grant counts itself in the word (see above). */
		nw[1] = w[1];
		if (__builtin_expect(cost <= GCRA_COST_IN_WORD &&
		    gcra_word_count(w[1]) <= GCRA_COUNT_MAX - cost, 1))
			nw[1] += cost << GCRA_COUNT_SHIFT;
		if (shmt__cas128(wp, w, nw)) {
			*tatp = nt;
			if (__builtin_expect(nw[1] == w[1], 0))
				__atomic_fetch_add(&v->lim->lm_exact_grants,
				    cost, __ATOMIC_RELAXED);
			/* Another process asked for the word: step aside
			 * (see "Contention" in ring.c). */
			if (__builtin_expect(__atomic_load_n(
			    &v->lim->lm_handoff, __ATOMIC_RELAXED) != 0, 0))
				shmt__handoff_yield(&v->lim->lm_handoff, wp);
			return 1;
		}
		/* Lost to another grant: ask for the word, then read it
		 * afresh (taking its line, for the CAS that follows). */
		shmt__handoff_ask(&v->lim->lm_handoff, wp);
		shmt__load128_excl(wp, w);
	}
	return SHMT_EBUSYLOOP;
}

/* The count of a rate grant's end RC: a denial's (a grant counted
 * itself, gcra_take). */
static inline __attribute__((always_inline)) void
gcra_count(const struct shmt_lview *v, int rc)
{
	if (rc == 0)
		shmt__count_denial(v->lim, WHY_EXHAUSTED);
}

/* A grant of COST with no decision, inline (the plain grant's path):
 * 1 granted, 0 refused, -EAGAIN (renew V), or SHMT_EBUSYLOOP. */
static inline __attribute__((always_inline)) int
gcra_grant(shmt_t *h, const struct shmt_lview *v, uint64_t cost)
{
	uint64_t now, tat;
	int rc = gcra_take(h, v, cost, &now, &tat);

	gcra_count(v, rc);
	return rc;
}

/* A grant of COST with its decision in OUT (may be NULL). */
static inline int
gcra_acquire(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out)
{
	if (out == NULL)
		return gcra_grant(h, v, cost);
	return shmt__gcra_acquire_at(h, v, cost, out, NULL);
}

#endif /* SHMT_GCRA_H */
