/* This file is private to libshmthrottle: rate mode (the generic cell rate algorithm). */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_GCRA_H
#define SHMT_GCRA_H

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

/* A grant of COST with its decision in OUT (may be NULL). */
static inline int
gcra_acquire(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out)
{
	return shmt__gcra_acquire_at(h, v, cost, out, NULL);
}

#endif /* SHMT_GCRA_H */
