/* SPDX-License-Identifier: MIT */
/*
 * Global limiters: one limit shared by every host of a fleet.  Each host's
 * daemon leases blocks of uses from Redis; the host's workers spend a lease
 * with one CAS on a lease word in the segment, as they spend a local
 * bucket, and never talk to Redis.  This file holds the lease words (both
 * sides of them) and the proof; the daemon's Redis side is daemon/lease.c.
 *
 * The design: the seed's ring, one level up
 * ------------------------------------------
 * Parameters: L uses per window C, slack S (a lease's open time), B (the
 * most uses one lease holds).  Redis keeps, per limiter, the leases in
 * flight: a lease is a bucket of the global ring, with a count k and a
 * stamp T read from Redis's own clock (TIME) inside the one Lua script that
 * grants it, so the script's decision and its stamp are one atomic step on
 * Redis.  A lease is open for S and held for H = S + C (+ the drift margin
 * below): the script counts it in flight while T + H > now, and grants a
 * new lease of k uses only if (uses in flight) + k <= L.
 *
 * A host uses a lease only inside the local interval
 *     [reply received, request sent + S')
 * where S' = S - S/1000 (the margin is for clock rates, below).  The
 * request is sent before the script runs and the reply received after, so
 * in real time sent <= T <= received: the local interval lies inside
 * Redis's [T, T + S) whatever the offset between the two clocks.  No clock
 * synchronisation is needed, only bounded rates: we assume the host's
 * monotonic clock and Redis's clock each run within 0.1% (1000 ppm; quartz
 * is within 0.01%, NTP slews at most 0.05%) of real time over S + C, so the
 * S' measured locally is at most S real, and the hold that Redis measures,
 * H = S + C + (S + C)/1000 + 1 us, is at least S + C real.  Redis's TIME is
 * its wall clock: it must not be stepped forward (slew, do not step; a
 * step back is clamped: the script's clock never runs backwards).
 *
 * Worker side: a lease slot is a 16-byte word {count, cap | deadline,
 * state} (global.h).  A grant:
 *
 *   read slot words (high halves, then low halves)
 *   now = clock()                    -- after reading the words
 *   pick an OPEN slot with now < deadline and count + k <= cap
 *     (the one whose deadline comes first); none: refuse
 *   CAS that slot {count, cap | deadline, OPEN} -> {count + k, ...}
 *   on failure: again (bounded)
 *
 * The daemon installs a lease in an EMPTY or CLOSED slot with one CAS,
 * deadline = sent + S', only once the reply is in (so a worker that reads
 * the lease reads its clock after the reply was received), and closes it
 * with one CAS OPEN -> CLOSED; the count in the closed word is final.
 *
 * Safety: at most L grants fleet-wide in any half-open window [t, t + C)
 * of real time.  Every grant of lease l has a decision time d (the clock
 * value the CAS acted on) with received(l) <= d < sent(l) + S', hence in
 * real time T_l <= d < T_l + S.  Take the leases with a grant in [t,
 * t + C), and among them the one Redis granted last, l*, at T* < t + C
 * (its grant is in the window and comes after T*).  Any such lease l has a
 * grant d >= t, so T_l + S > t and T_l + H >= T_l + S + C > t + C > T*:
 * the script counted l in flight when it granted l*, with at least the
 * uses l granted (a lease's record in Redis only shrinks by the uses its
 * host gives back after closing it, which no grant can then spend).  The
 * script granted l* only if the uses in flight, l*'s included, were at
 * most L; so the window holds at most L grants.  Redis runs scripts one at
 * a time, and the clamped clock makes their stamps grow, so "granted
 * last" is well defined.
 *
 * Why one CAS suffices locally (as for the ring in limiter.c): a CAS that
 * succeeds against the word the worker read proves the word held that
 * value from the read, before the clock read, to the CAS.  The slot's
 * high half only grows and its count only grows within one high half, so
 * a value never comes back (no ABA), and the halves may be read one after
 * the other: if the CAS matches, the high half was unchanged since its
 * load, so the count cannot have fallen back to the value of the low
 * load.  A grant whose clock read says now < deadline decides inside the
 * lease's interval even if its CAS lands after the deadline or after the
 * daemon has read the slot, because the daemon takes the final count only
 * from the CAS that closes the slot, after which no grant CAS can match.
 *
 * Key pools.  A global key pool hands out names in the order of the
 * fleet's grant cursor, one level up from the local one (grant n gets name
 * n mod K, L = K x X).  Redis keeps the cursor; a lease of k uses is also
 * the range [s, s + k) of it, and its base s mod K goes into the slot
 * (gs_base) before the lease is installed.  The host's grant that raises
 * the slot's count from c to c + 1 takes position s + c: positions are
 * handed out once each, in grant order within a lease.  Redis grants a
 * lease only if, besides the uses in flight, the span of positions from
 * the start of the oldest lease in flight to the new cursor stays within
 * L.  Leases are released in the order they were granted (all are held
 * for the same H), so the leases in flight are the latest ones and their
 * ranges lie in that span.  A give-back returns a lease's last, unused
 * positions: the cursor comes back over them only if the lease is the
 * newest (no position after them was handed out).  Now take any window
 * [t, t + C) and, as above, the lease l* granted last among those with a
 * grant in it: every such lease was in flight when l* was granted, so the
 * positions used in the window lie in a span of at most L consecutive
 * positions, and each name (position mod K) is among them at most
 * L / K = X times.  The limit of L grants per window follows as well.  A
 * base read from the segment is used only mod K (a damaged one names a
 * wrong key, never reads outside the pool).  No offline_limit for a key
 * pool: names handed out while Redis is away would not follow the cursor.
 *
 * Faults.
 *  - kill -9 of a worker: its grant CAS happened (the use is spent) or
 *    not; nothing else is held.
 *  - kill -9 of the daemon: open leases stay open in the segment, but
 *    every worker checks the deadline itself, so they stop granting at
 *    sent + S'; the next daemon closes them and does not give back what
 *    is left (it does not know their Redis records: a loss of uses, never
 *    a gain).
 *  - a damaged lease word: a grant refuses it with SHMT_ECORRUPT (as
 *    does shmt_check), a deadline more than S ahead of the clock
 *    included (no lease has one; it would grant its cap at any time);
 *    the daemon closes such a lease and installs the next one over it.
 *  - Redis slow: a reply after sent + S' is a lease nobody can use; its
 *    uses go back at once.  Redis unreachable: the open leases run out by
 *    time, then every request is refused (or offline_limit applies: a
 *    per-host limit that does not count other hosts: not fleet-safe).
 *  - Redis restarted without its data: its records of leases in flight
 *    are gone.  Each limiter keeps a "born" key (no expiry) with the time
 *    its records started; a script that finds no born key writes one and
 *    grants nothing until born + H.  Leases of the old Redis were all
 *    stamped before the restart, so their grants end before born + S,
 *    and every new grant comes after born + H >= born + S + C: no window
 *    of length C holds both.  So a restart without persistence costs a
 *    pause of one window, not an over-grant.  What this does not cover:
 *    a failover to a replica that has the born key but not the latest
 *    leases (asynchronous replication: use WAIT 1 on the replica, or AOF
 *    with appendfsync always on one Redis), an eviction policy that drops
 *    keys (use noeviction), a clock stepped forward.
 *
 * The road not taken: one Redis call per grant (a Lua limiter called by
 * every worker) is exact but costs a round trip per use and makes Redis's
 * load grow with traffic; here Redis sees a few calls per S per host and a
 * grant costs what a local one does.  Clock synchronisation is not
 * assumed: each lease is bounded by the host's own clock.
 */
#include "fork.h"
#include "global.h"

#include "atomic128.h"
#include "limiter.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* As limiter.c's: a CAS fails only when another succeeds. */
#define GL_RETRY_MAX (1U << 20)

/* A slot as one worker read it, checked against the limiter's limit. */
struct gl_view {
	uint64_t lo, hi;
	uint32_t count, cap, state;
	uint64_t deadline;
};

static int
gl_load(const struct shmt_glslot *s, uint64_t limit, struct gl_view *v)
{
	/* High half first (see the top of the file). */
	v->hi = __atomic_load_n(&s->gs_w[1], __ATOMIC_ACQUIRE);
	v->lo = __atomic_load_n(&s->gs_w[0], __ATOMIC_ACQUIRE);
	v->count = SHMT_GL_COUNT(v->lo);
	v->cap = SHMT_GL_CAP(v->lo);
	v->state = SHMT_GL_STATE(v->hi);
	v->deadline = SHMT_GL_DEADLINE(v->hi);
	if (v->state > SHMT_GL_CLOSED || v->cap > limit || v->count > v->cap)
		return SHMT_ECORRUPT;
	if (v->state == SHMT_GL_EMPTY && v->lo != 0)
		return SHMT_ECORRUPT;
	return 0;
}

/* An open lease's deadline is the daemon's send time plus less than the
 * slack, and every reader reads its clock after the lease went in, so
 * one more than SLACK ahead of NOW is damage: it would grant its cap at
 * any time, however late.  SHMT_ECORRUPT then. */
static int
gl_sane(const struct gl_view *v, uint64_t now, uint64_t slack)
{
	if (v->state == SHMT_GL_OPEN && v->deadline > now &&
	    v->deadline - now > slack)
		return SHMT_ECORRUPT;
	return 0;
}

/* The slot a grant of COST at NOW should spend: the open one that closes
 * first among those with room, or -1. */
static int
gl_pick(const struct gl_view v[SHMT_GL_SLOTS], uint64_t now, uint64_t cost)
{
	int best = -1;

	for (int i = 0; i < SHMT_GL_SLOTS; i++) {
		if (v[i].state != SHMT_GL_OPEN || now >= v[i].deadline ||
		    (uint64_t)v[i].count + cost > v[i].cap)
			continue;
		if (best < 0 || v[i].deadline < v[best].deadline)
			best = i;
	}
	return best;
}

/* The host's view of what it may still grant at NOW, for a decision. */
static void
gl_decide(const struct shmt_glease *g, const struct gl_view v[SHMT_GL_SLOTS],
    uint64_t now, uint64_t limit, uint64_t window, uint64_t slack,
    int granted, shmt_decision_t *out)
{
	uint64_t left = 0, retry;

	for (int i = 0; i < SHMT_GL_SLOTS; i++)
		if (v[i].state == SHMT_GL_OPEN && now < v[i].deadline)
			left += v[i].cap - v[i].count;
	out->granted = granted;
	out->limit = limit;
	out->remaining = left;
	out->retry_after_ns = 0;
	if (!granted) {
		/* The daemon's guess of its next lease; the slack when it
		 * has none, so a waiter looks again soon. */
		retry = __atomic_load_n(&g->gl_retry_at_ns, __ATOMIC_RELAXED);
		out->retry_after_ns = retry > now && retry - now <= window +
		    slack ? retry - now : slack;
		if (out->retry_after_ns == 0)
			out->retry_after_ns = 1;
	}
	/* Redis holds every lease of this host for slack + window. */
	out->reset_after_ns = slack + window;
}

static int
gl_try(shmt_t *h, struct shmt_glease *g, uint64_t limit, uint64_t window,
    uint64_t slack, uint64_t cost, shmt_decision_t *out, int take,
    uint64_t *pos)
{
	struct gl_view v[SHMT_GL_SLOTS];
	int rc;

	for (unsigned tries = 0; tries < GL_RETRY_MAX; tries++) {
		uint64_t now, exp[2], des[2], base;
		int i;

		for (i = 0; i < SHMT_GL_SLOTS; i++)
			if ((rc = gl_load(&g->gl_slot[i], limit, &v[i])) != 0)
				return rc;
		now = shmt__now(h);
		for (i = 0; i < SHMT_GL_SLOTS; i++)
			if ((rc = gl_sane(&v[i], now, slack)) != 0)
				return rc;
		i = gl_pick(v, now, cost);
		if (i < 0) {
			if (take) {
				__atomic_fetch_add(&g->gl_denied, 1,
				    __ATOMIC_RELAXED);
				__atomic_fetch_add(&g->gl_denied_uses, cost,
				    __ATOMIC_RELAXED);
			}
			if (out != NULL)
				gl_decide(g, v, now, limit, window, slack, 0,
				    out);
			return 0;
		}
		if (!take) {
			if (out != NULL)
				gl_decide(g, v, now, limit, window, slack, 1,
				    out);
			return 1;
		}
		exp[0] = v[i].lo;
		exp[1] = v[i].hi;
		des[0] = v[i].lo + (cost << 32);
		des[1] = v[i].hi;
		/* After the loads, before the CAS: if the CAS succeeds, the
		 * slot held this lease throughout, and its base was written
		 * before it was installed (see global.h). */
		base = __atomic_load_n(&g->gl_slot[i].gs_base,
		    __ATOMIC_ACQUIRE);
		if (shmt__cas128(g->gl_slot[i].gs_w, exp, des)) {
			if (pos != NULL)
				*pos = base + v[i].count;
			if (out != NULL) {
				v[i].lo = des[0];
				v[i].count += (uint32_t)cost;
				gl_decide(g, v, now, limit, window, slack, 1,
				    out);
				/* The uses this grant took are counted. */
			}
			return 1;
		}
	}
	return SHMT_EBUSYLOOP;
}

int
shmt__global_take(shmt_t *h, struct shmt_glease *g, uint64_t limit,
    uint64_t window, uint64_t slack, uint64_t cost, shmt_decision_t *out,
    uint64_t *pos)
{
	return gl_try(h, g, limit, window, slack, cost, out, 1, pos);
}

int
shmt__global_peek(shmt_t *h, struct shmt_glease *g, uint64_t limit,
    uint64_t window, uint64_t slack, uint64_t cost, shmt_decision_t *out)
{
	return gl_try(h, g, limit, window, slack, cost, out, 0, NULL);
}

void
shmt__global_forget(struct shmt_glease *g)
{
	memset(g, 0, sizeof(*g));
}

void
shmt__global_chk(shmt_t *h, struct shmt_chk *c, const char *name,
    struct shmt_glease *g, uint64_t limit, uint64_t slack)
{
	struct gl_view v[SHMT_GL_SLOTS];
	int bad[SHMT_GL_SLOTS];
	uint64_t now;

	for (int i = 0; i < SHMT_GL_SLOTS; i++)
		bad[i] = gl_load(&g->gl_slot[i], limit, &v[i]) != 0;
	now = shmt__now(h);      /* after the words, as a grant reads it */
	for (int i = 0; i < SHMT_GL_SLOTS; i++) {
		if (bad[i])
			shmt__chk(c, "limiter %s: lease slot %d: word %#" PRIx64
			    " %#" PRIx64 " breaks its rules (state %u, %u of "
			    "%u uses, limit %" PRIu64 ")", name, i, v[i].lo,
			    v[i].hi, v[i].state, v[i].count, v[i].cap, limit);
		else if (gl_sane(&v[i], now, slack) != 0)
			shmt__chk(c, "limiter %s: lease slot %d: open until %"
			    PRIu64 ", more than the slack (%" PRIu64 " ns) "
			    "after now (%" PRIu64 ")", name, i, v[i].deadline,
			    slack, now);
	}
}

/* ---- Finding a global row ------------------------------------------------ */

static const char *const row_ok_name[1] = { "k" };

static int
row_ok(const struct shmt_lim *lim)
{
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.limit = lim->lm_limit;
	l.window_ns = lim->lm_window;
	l.slack_ns = lim->lm_slack;
	l.slack_uses = lim->lm_slack_uses;
	l.mode = (int)lim->lm_mode;
	l.global = 1;
	/* The key names themselves are checked where they are read
	 * (shmt__key_copy); here only their count. */
	if (lim->lm_flags == (SHMT_LIMF_GLOBAL | SHMT_LIMF_KEYS)) {
		if (lim->lm_nkeys == 0 || lim->lm_nkeys > SHMT_KEYS_MAX ||
		    lim->lm_uses_per_key == 0 ||
		    (uint64_t)lim->lm_nkeys * lim->lm_uses_per_key !=
		    lim->lm_limit)
			return 0;
		l.nkeys = 1;              /* shmt_limit_check wants names: */
		l.uses_per_key = (uint32_t)lim->lm_limit;
		l.keys = row_ok_name;
	} else if (lim->lm_flags != SHMT_LIMF_GLOBAL) {
		return 0;
	}
	return shmt_limit_check(&l, NULL, 0) == 0;
}

static int
gl_find(shmt_t *h, const char *name, struct shmt_lim **out)
{
	struct shmt_lim *lim;
	uint64_t n;

	if (h == NULL || name == NULL)
		return -EINVAL;
	lim = (struct shmt_lim *)(void *)shmt__region(h, SHMT_R_LIMITERS);
	n = h->reg[SHMT_R_LIMITERS].rg_size / sizeof(struct shmt_lim);
	for (uint64_t r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY ||
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) != 0)
			continue;
		if (!(lim[r].lm_flags & SHMT_LIMF_GLOBAL))
			return -EPERM;
		if (!row_ok(&lim[r]))
			return SHMT_ECORRUPT;
		*out = &lim[r];
		return 0;
	}
	return -ENOENT;
}

int
shmt__global_ref(shmt_t *h, const char *name, struct shmt__gref *ref)
{
	struct shmt_lim *lim;
	int rc;

	if (ref == NULL)
		return -EINVAL;
	if ((rc = gl_find(h, name, &lim)) != 0)
		return rc;
	ref->g = &lim->lm_g;
	ref->wake = &lim->lm_wake;
	ref->state = &h->hdr->sh_retired;
	ref->limit = lim->lm_limit;
	ref->window = lim->lm_window;
	ref->slack = lim->lm_slack;
	ref->slack_uses = lim->lm_slack_uses;
	ref->nkeys = (lim->lm_flags & SHMT_LIMF_KEYS) ? lim->lm_nkeys : 0;
	return 0;
}

/* ---- Daemon side ----------------------------------------------------------- */

/* Wake the limiter's sleepers (the protocol of wait.inc: bump the count,
 * clear the sleeper bit, and make the system call only if it was set). */
static void
gl_wake(uint32_t *wake)
{
	uint32_t old = __atomic_load_n(wake, __ATOMIC_SEQ_CST), nv;
	unsigned i;

	for (i = 0; i < GL_RETRY_MAX; i++) {
		nv = (old + 2) & ~1U;
		if (__atomic_compare_exchange_n(wake, &old, nv, 0,
		    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			break;
	}
	if ((old & 1U) || i == GL_RETRY_MAX) {
		int e = errno;

		syscall(SYS_futex, wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		errno = e;
	}
}

int
shmt__global_read(const struct shmt__gref *r, unsigned i, uint32_t *state,
    uint32_t *used, uint32_t *cap, uint64_t *deadline)
{
	struct gl_view v;
	int rc;

	if (r == NULL || i >= SHMT_GL_SLOTS)
		return -EINVAL;
	if ((rc = gl_load(&r->g->gl_slot[i], r->limit, &v)) != 0)
		return rc;
	*state = v.state;
	*used = v.count;
	*cap = v.cap;
	*deadline = v.deadline;
	return 0;
}

int
shmt__global_install(const struct shmt__gref *r, unsigned i, uint32_t cap,
    uint64_t deadline, uint64_t base, uint64_t now)
{
	struct shmt_glslot *s;
	uint64_t exp[2], des[2];
	struct gl_view v;
	int rc, damaged;

	if (r == NULL || i >= SHMT_GL_SLOTS || cap == 0 || cap > r->limit ||
	    deadline == 0 || deadline > SHMT_GL_DEADLINE_MAX)
		return -EINVAL;
	s = &r->g->gl_slot[i];
	for (unsigned tries = 0; tries < GL_RETRY_MAX; tries++) {
		if ((rc = gl_load(s, r->limit, &v)) != 0)
			return rc;
		/* The high half must grow: a new lease never repeats a word
		 * a worker may still hold (see the top of the file).  But a
		 * deadline more than the slack past NOW is damage no lease
		 * wrote (gl_sane), and waiting for it would stop the slot
		 * for good: the new lease goes in below it.  A worker that
		 * read that word open refused it unless its clock was
		 * within the slack of that deadline, and no later lease
		 * has that very deadline before the clock is as close. */
		damaged = v.deadline > now && v.deadline - now > r->slack;
		if (v.state == SHMT_GL_OPEN ||
		    (deadline <= v.deadline && !damaged))
			return -EBUSY;
		__atomic_store_n(&s->gs_opened_ns, now, __ATOMIC_RELAXED);
		/* The slot is not open: no grant can spend it, and one that
		 * read the old base fails its CAS on the old word. */
		__atomic_store_n(&s->gs_base, r->nkeys != 0 ? base % r->nkeys :
		    0, __ATOMIC_RELEASE);
		exp[0] = v.lo;
		exp[1] = v.hi;
		des[0] = cap;
		des[1] = deadline << 2 | SHMT_GL_OPEN;
		if (shmt__cas128(s->gs_w, exp, des)) {
			gl_wake(r->wake);
			return 0;
		}
	}
	return SHMT_EBUSYLOOP;
}

int
shmt__global_close(const struct shmt__gref *r, unsigned i, uint32_t *used,
    uint32_t *cap, uint64_t *deadline)
{
	struct shmt_glslot *s;
	uint64_t exp[2], des[2];
	struct gl_view v;
	int rc;

	if (r == NULL || i >= SHMT_GL_SLOTS)
		return -EINVAL;
	s = &r->g->gl_slot[i];
	for (unsigned tries = 0; tries < GL_RETRY_MAX; tries++) {
		if ((rc = gl_load(s, r->limit, &v)) != 0)
			return rc;
		*used = v.count;
		*cap = v.cap;
		*deadline = v.deadline;
		if (v.state != SHMT_GL_OPEN)
			return 0;
		exp[0] = v.lo;
		exp[1] = v.hi;
		des[0] = v.lo;
		des[1] = (v.hi & ~3ULL) | SHMT_GL_CLOSED;
		/* A CAS before the freeze is in the move's copy; one after it
		 * may not be (the copy may hold the slot open): the load
		 * after the locked CAS tells which (move.c). */
		if (shmt__cas128(s->gs_w, exp, des))
			return __atomic_load_n(r->state, __ATOMIC_SEQ_CST) ==
			    SHMT_SEG_LIVE ? 1 : 2;
	}
	return SHMT_EBUSYLOOP;
}

uint64_t
shmt__global_denied(const struct shmt__gref *r)
{
	return __atomic_load_n(&r->g->gl_denied_uses, __ATOMIC_RELAXED);
}

void
shmt__global_publish(const struct shmt__gref *r, const shmt_global_stat_t *s,
    uint64_t retry_at, uint64_t now)
{
	struct shmt_glease *g = r->g;

#define PUT(f, x) __atomic_store_n(&g->f, (x), __ATOMIC_RELAXED)
	PUT(gl_state, (uint64_t)s->state);
	PUT(gl_rtt_ns, s->rtt_ns);
	PUT(gl_rtt_max_ns, s->rtt_max_ns);
	PUT(gl_errors, s->errors);
	PUT(gl_last_error, (int64_t)s->last_error);
	PUT(gl_leases, s->leases);
	PUT(gl_leased_uses, s->leased_uses);
	PUT(gl_returned_uses, s->returned_uses);
	PUT(gl_requests, s->requests);
	PUT(gl_host_inflight, s->host_in_flight);
	PUT(gl_fleet_inflight, s->fleet_in_flight);
	PUT(gl_retry_at_ns, retry_at);
	PUT(gl_updated_ns, now);
#undef PUT
}

/* ---- Public ------------------------------------------------------------------ */

static int
gen_global_stat_once(shmt_t *h, const char *name, shmt_global_stat_t *out)
{
	struct gl_view v[SHMT_GL_SLOTS];
	struct shmt_lim *lim;
	struct shmt_glease *g;
	uint64_t now, last = 0;
	int rc;

	if (out == NULL)
		return -EINVAL;
	if ((rc = gl_find(h, name, &lim)) != 0)
		return rc;
	g = &lim->lm_g;
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < SHMT_GL_SLOTS; i++)
		if ((rc = gl_load(&g->gl_slot[i], lim->lm_limit, &v[i])) != 0)
			return rc;
	/* After the words, as a grant reads it: a lease the daemon opened
	 * after a clock read taken first could lie more than the slack past
	 * it, which gl_sane calls damage. */
	now = shmt__now(h);
	for (int i = 0; i < SHMT_GL_SLOTS; i++) {
		if ((rc = gl_sane(&v[i], now, lim->lm_slack)) != 0)
			return rc;
		if (v[i].state != SHMT_GL_OPEN || now >= v[i].deadline)
			continue;
		out->leases_open++;
		out->lease_cap += v[i].cap;
		out->lease_used += v[i].count;
		if (v[i].deadline - now > last)
			last = v[i].deadline - now;
	}
	out->lease_left_ns = last;
#define GET(f) __atomic_load_n(&g->f, __ATOMIC_RELAXED)
	out->state = (int)GET(gl_state);
	if (out->state < SHMT_GLOBAL_UNKNOWN || out->state > SHMT_GLOBAL_FALLBACK)
		out->state = SHMT_GLOBAL_UNKNOWN;
	out->rtt_ns = GET(gl_rtt_ns);
	out->rtt_max_ns = GET(gl_rtt_max_ns);
	out->errors = GET(gl_errors);
	out->last_error = (int)GET(gl_last_error);
	out->leases = GET(gl_leases);
	out->leased_uses = GET(gl_leased_uses);
	out->returned_uses = GET(gl_returned_uses);
	out->requests = GET(gl_requests);
	out->host_in_flight = GET(gl_host_inflight);
	out->fleet_in_flight = GET(gl_fleet_inflight);
	out->denied = GET(gl_denied);
	out->updated_ns = GET(gl_updated_ns);
#undef GET
	return 0;
}

SHMT_EXPORT int
shmt_global_stat(shmt_t *h, const char *name, shmt_global_stat_t *out)
{
	SHMT_GEN_READ(h, gen_global_stat_once(h, name, out));
}
