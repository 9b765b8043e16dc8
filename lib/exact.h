/* This file is private to libshmthrottle: exact mode, the sliding log of grants. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_EXACT_H
#define SHMT_EXACT_H

#include "table.h"

struct shmt_chk;

/* The log slot of grant number K (K >= -nlog: slot i starts with the
 * record of grant i - nlog, none). */
static inline struct shmt_log_slot *
ex_slot(const struct shmt_lview *v, int64_t k)
{
	int64_t N = (int64_t)v->nlog;

	return &v->log[(uint64_t)(((k % N) + N) % N)];
}

/* When record {SEQ, T} stops counting: a window after T, or the longer
 * hold of a change for a grant decided before it (see exact.c). */
static inline uint64_t
ex_due(const struct shmt_lview *v, int64_t seq, uint64_t t)
{
	uint64_t w = v->window;

	if (__builtin_expect(seq < v->hold_seq && v->hold_window > w, 0))
		w = v->hold_window;
	return sat_add(t, w);
}

/* One use of an exact limiter.  Returns 1 with the grant number in *SEQ,
 * 0 denied, -EAGAIN when the parameters changed since V was built
 * (shmt__view_renew, again), or an error. */
int shmt__ex_take(shmt_t *h, const struct shmt_lview *v, uint64_t *seq);

/* Grants in flight in an exact limiter at NOW: records not yet due. */
uint64_t shmt__ex_inflight(const struct shmt_lview *v, uint64_t now);

/* Exact mode: every record still in the window gets time 0, as if made
 * long ago (its number is kept: the grant protocol needs it). */
int64_t shmt__ex_reset(const struct shmt_lview *v, uint64_t now);

/*
 * An exact log (see shmt__ex_take).  With the grant hint n read unchanged
 * before and after the scan, slot i holds the record of the latest grant
 * m < n with m = i mod L (m < 0: none yet), or, for slot n mod L only, grant n
 * itself (recorded, the hint not moved on yet).  A record ahead of that
 * makes every try spin until SHMT_EBUSYLOOP, one behind makes it return
 * SHMT_ECORRUPT, and so does a negative hint.  Each kind of damage is
 * named once, with the first slot and how many slots show it.
 */
void shmt__chk_exact(shmt_t *h, struct shmt_chk *c,
    const struct shmt_lview *v);

#endif /* SHMT_EXACT_H */
