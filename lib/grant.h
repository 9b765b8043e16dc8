/* This file is private to libshmthrottle: one use of a shared limiter, inline. */
/* SPDX-License-Identifier: MIT */
/*
 * One use of a shared limiter of any mode, always inlined into its callers
 * (shmt_try_use_key and shmt_next_key in limiter.c, shmt_acquire's exact
 * path in decide.c), so that the plain grant is compiled with its
 * constants and calls nothing it does not need.
 */
#ifndef SHMT_GRANT_H
#define SHMT_GRANT_H

#include "exact.h"
#include "gcra.h"
#include "global.h"
#include "ring.h"
#include "table.h"

/* One use of a shared limiter in exact or rate mode (limiter.c), renewing
 * V as often as the parameters change under it: the slow path of a grant
 * that found them changed (-EAGAIN), out of line. */
int shmt__take_log_or_rate(shmt_t *h, const struct shmt_lview *v,
    uint64_t *cursor);

/* One use of the shared ring of V after a grant from V answered -EAGAIN
 * (its parameters changed since V was built): V renewed, and the use taken
 * again, up to 64 times (then SHMT_EBUSYLOOP); the slow path of a grant,
 * out of line, with take_shared_once's result. */
int shmt__take_ring_renewed(shmt_t *h, const struct shmt_lview *v,
    uint64_t *cursor);

/* The end of a rate or exact grant RC (SEQ: an exact grant's number):
 * the key-pool cursor, or the denial's count.  (An exact limiter's grants
 * are its grant number, W's first half: nothing else counts them.) */
static inline __attribute__((always_inline)) int
log_or_rate_done(const struct shmt_lview *v, int rc, uint64_t seq,
    uint64_t *cursor)
{
	if (v->mode == SHMT_MODE_GCRA)
		return rc;
	if (rc == 1) {
		*cursor = v->nkeys != 0 ? seq % v->nkeys : 0;
	} else if (rc == 0) {
		shmt__count_denial(v->lim, WHY_EXHAUSTED);
	}
	return rc;
}

/* One use of V's shared ring (V neither global nor in exact or rate mode):
 * take_shared_once's ring part. */
static inline __attribute__((always_inline)) int
take_ring_once(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	uint32_t tag = 0;
	int why = WHY_NONE, rc;

	rc = bk_take_view(h, v, &tag, &why);
	if (__builtin_expect(rc == -EAGAIN, 0))
		/* The parameters changed since V was built. */
		return shmt__take_ring_renewed(h, v, cursor);
	if (rc == 1)
		*cursor = tag;
	else if (rc == 0)
		shmt__count_denial(v->lim, why);
	return rc;
}

/* One use of V's shared arrival time (V in rate mode, not global):
 * take_shared_once's rate part.  Rate mode counts its own denials
 * (gcra_grant) and names no key. */
static inline __attribute__((always_inline)) int
take_rate_once(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	int rc = gcra_grant(h, v, 1);

	if (__builtin_expect(rc == -EAGAIN, 0))
		/* The parameters changed since V was built. */
		rc = shmt__take_log_or_rate(h, v, cursor);
	return rc;
}

static inline __attribute__((always_inline)) int
take_shared_once(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	int rc;

	if (__builtin_expect(v->flags & SHMT_LIMF_GLOBAL, 0)) {
		uint64_t pos = 0;

		rc = shmt__global_take(h, &v->lim->lm_g, v->limit, v->window,
		    v->slack, 1, NULL, &pos);
		/* A key pool's name follows the fleet's grant cursor. */
		if (rc == 1 && v->nkeys != 0)
			*cursor = pos % v->nkeys;
		return rc;
	}
	if (v->mode == SHMT_MODE_GCRA)
		return take_rate_once(h, v, cursor);
	if (v->mode != SHMT_MODE_BUCKETS) {
		uint64_t seq = 0;

		rc = shmt__ex_take(h, v, &seq);
		if (__builtin_expect(rc == -EAGAIN, 0))
			/* The parameters changed since V was built. */
			return shmt__take_log_or_rate(h, v, cursor);
		return log_or_rate_done(v, rc, seq, cursor);
	}
	return take_ring_once(h, v, cursor);
}

/* take_shared_raw on V, a limiter that is neither global nor in exact or
 * rate mode: the ring's grant alone, inline. */
static inline __attribute__((always_inline)) int
take_ring_raw(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	return shmt__grant_check(h, take_ring_once(h, v, cursor));
}

/* take_shared_raw on V, a limiter in rate mode that is not global: the
 * arrival time's grant alone, inline. */
static inline __attribute__((always_inline)) int
take_rate_raw(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	return shmt__grant_check(h, take_rate_once(h, v, cursor));
}

/* One use of the shared limiter V: 1 granted (*CURSOR: the key-pool
 * cursor), 0 refused, or an error; a grant that raced with a move is
 * decided by shmt__grant_check (move.c). */
static inline __attribute__((always_inline)) int
take_shared_raw(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	return shmt__grant_check(h, take_shared_once(h, v, cursor));
}

#endif /* SHMT_GRANT_H */
