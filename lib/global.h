/* This file is private to libshmthrottle and shmthrottled: the leases of global limiters. */
/* SPDX-License-Identifier: MIT */
/*
 * A global limiter's row carries two lease slots, filled by the host's
 * daemon with blocks of uses leased from Redis and spent by the workers
 * with one CAS each (the protocol and its proof are at the top of
 * global.c).  The daemon's calls (shmt__global_ref, _install, _close, ...)
 * are declared in daemon.h, the one private header shmthrottled includes;
 * it touches no field itself.
 */
#ifndef SHMT_GLOBAL_H
#define SHMT_GLOBAL_H

#include "daemon.h"
#include "segment.h"

#include <stdalign.h>
#include <stdint.h>


/*
 * One lease, 16 bytes, changed only by a 16-byte CAS:
 *   gs_w[0] = count:32 | cap:32      uses granted from it, uses it holds
 *   gs_w[1] = deadline:62 | state:2  local monotonic ns after which no
 *                                    grant may decide from it
 * gs_w[1] only grows: a lease goes OPEN -> CLOSED with its deadline, and
 * a new lease is installed only over EMPTY or CLOSED with a larger
 * deadline.  Within one gs_w[1] the count only grows.
 */
struct shmt_glslot {
	alignas(16) uint64_t gs_w[2];
	uint64_t gs_opened_ns;       /* when the lease was installed (display) */
	/* Key pools: the lease's first position on the fleet's grant cursor,
	 * mod nkeys (a grant's name is (gs_base + count before it) mod
	 * nkeys).  Written by the daemon (release) before the CAS that
	 * installs the lease, over an EMPTY or CLOSED slot only, and read by
	 * a grant (acquire) between its loads of gs_w and its CAS: a CAS that
	 * succeeds proves the slot held the same lease throughout, so the
	 * base read was that lease's (global.c). */
	uint64_t gs_base;
};

#define SHMT_GL_COUNT(lo) ((uint32_t)((lo) >> 32))
#define SHMT_GL_CAP(lo) ((uint32_t)(lo))
#define SHMT_GL_STATE(hi) ((uint32_t)((hi) & 3U))
#define SHMT_GL_DEADLINE(hi) ((hi) >> 2)
#define SHMT_GL_DEADLINE_MAX ((1ULL << 62) - 1)

struct shmt_glease {
	/* The lease words: every grant CASes one of them. */
	alignas(SHMT_LINE) struct shmt_glslot gl_slot[SHMT_GL_SLOTS];
	/* Written by workers on refusals only (relaxed): the daemon's demand
	 * signal. */
	alignas(SHMT_LINE) uint64_t gl_denied;
	uint64_t gl_denied_uses;
	/* Written by the daemon only (relaxed), for the CLI and for the
	 * retry hint of a refusal; none of them bears on safety. */
	alignas(SHMT_LINE) uint64_t gl_state;      /* SHMT_GLOBAL_* */
	uint64_t gl_rtt_ns;
	uint64_t gl_rtt_max_ns;
	uint64_t gl_errors;
	int64_t gl_last_error;
	uint64_t gl_leases;
	uint64_t gl_leased_uses;
	uint64_t gl_returned_uses;
	uint64_t gl_requests;
	uint64_t gl_host_inflight;
	uint64_t gl_fleet_inflight;
	uint64_t gl_retry_at_ns;                   /* local time of the next
						    * lease, as expected */
	uint64_t gl_updated_ns;
};

/* Library side (limiter.c's grant paths call these for rows flagged
 * SHMT_LIMF_GLOBAL).  G is the row's lease area, LIMIT its limit.
 * shmt__global_take: grant COST uses at the handle's clock if an open lease
 * holds them; 1 granted, 0 refused, SHMT_ECORRUPT (a slot word breaks its
 * rules, or an open lease's deadline is more than the slack ahead of the
 * clock), SHMT_EBUSYLOOP.  OUT (may be NULL) gets the host's view; POS
 * (may be NULL), on a grant, the grant's position on the fleet's cursor
 * (the lease's base + its count before the grant: a key pool's name is POS
 * mod nkeys). */
int shmt__global_take(shmt_t *h, struct shmt_glease *g, uint64_t limit,
    uint64_t window, uint64_t slack, uint64_t cost, shmt_decision_t *out,
    uint64_t *pos);
/* What shmt__global_take would answer, changing nothing. */
int shmt__global_peek(shmt_t *h, struct shmt_glease *g, uint64_t limit,
    uint64_t window, uint64_t slack, uint64_t cost, shmt_decision_t *out);
/* The self-check of G's lease words (shmt_check): each word within its
 * rules, no open lease more than SLACK past the handle's clock. */
void shmt__global_chk(shmt_t *h, struct shmt_chk *c, const char *name,
    struct shmt_glease *g, uint64_t limit, uint64_t slack);
/* Empty both slots: for a segment nobody else uses yet (a new row, a
 * restored snapshot, whose leases belong to another boot). */
void shmt__global_forget(struct shmt_glease *g);

#endif /* SHMT_GLOBAL_H */
