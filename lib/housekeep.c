/* SPDX-License-Identifier: MIT */
/*
 * Housekeeping: the work callers would otherwise do lazily, done on time by
 * the daemon (or by anyone): seal and release due buckets, reclaim idle
 * client entries, free expired dictionary items and counters, reap the
 * slots of dead processes.
 */
#include "segment.h"

#include "analyzer.h"
#include "dict.h"
#include "limiter.h"

#include <errno.h>

SHMT_EXPORT int
shmt_housekeep(shmt_t *h, shmt_time_t *next_ns)
{
	shmt_time_t next = UINT64_MAX;
	int n, actions = 0, locked = 0, damaged = 0;

	uint64_t now_size;

	if (h == NULL)
		return -EINVAL;
	/* A truncated object: every page past its end raises SIGBUS. */
	if (shmt__size_check(h, &now_size) != 0)
		return SHMT_ESIZE;
	/* A segment removed by hand writes nothing into the mappings: this
	 * is where its processes learn of it (each answers SHMT_ESTALE from
	 * its next call on). */
	if ((n = shmt__gone_check(h)) != 0)
		return n;
	/* A lock kept past its bound (SHMT_ELOCKED) stops only what it
	 * guards: the rest is housekept, and the error comes after. */
	n = shmt__limiters_housekeep(h, shmt__now(h), &next);
	if (n == SHMT_ELOCKED)
		locked = n;
	else if (n < 0)
		return n;
	else
		actions += n;
	n = shmt__stores_housekeep(h, shmt__now(h), &next);
	if (n == SHMT_ELOCKED)
		locked = n;
	else if (n == SHMT_ECORRUPT)
		damaged = n;
	else if (n < 0)
		return n;
	else
		actions += n;
	actions += shmt__slots_reap(h);
	actions += shmt__an_reap(h);
	__atomic_fetch_add(&h->hdr->sh_hk_runs, 1, __ATOMIC_RELAXED);
	/* What a kept lock made us skip is due now, whatever NEXT says of
	 * the rest.  (A damaged shard is not: walking it again changes
	 * nothing until it is repaired.) */
	if (locked != 0)
		next = shmt__now(h);
	if (next_ns != NULL)
		*next_ns = next;
	return damaged != 0 ? damaged : locked != 0 ? locked : actions;
}
