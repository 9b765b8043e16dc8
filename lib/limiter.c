/* SPDX-License-Identifier: MIT */
/*
 * Limiters: the seed's ring of buckets as a lock-free multi-process limiter,
 * the exact sliding-window log, key pools and per-client limiters.
 *
 * Parameters: L uses per window C; a bucket stays open for S (slack_ns) or
 * until it holds B (slack_uses) uses, then cools for C, and its uses come
 * back at close + C.
 *
 * The bound: ceil(C/S) + ceil(L/B) buckets suffice
 * -------------------------------------------------
 * Look at the buckets in use (not yet released) at the moment a new bucket
 * must be opened, at time t.  Call a bucket "timed" if it closed because its
 * S elapsed with fewer than B uses, "full" if it holds B uses.
 *  - Every bucket in use holds at least one use, and all of them are in
 *    flight, so the full ones number at most floor(L/B); when a new bucket is
 *    needed at least one use is free (else the call is denied before it
 *    opens anything), so the full ones hold at most L - 1 uses: at most
 *    floor((L-1)/B) = ceil(L/B) - 1 of them.
 *  - A bucket opened at time o closes at o + S and is released at
 *    o + S + C.  Timed buckets in use at t were opened in (t - S - C, t - S]
 *    (each closed by time, so o + S <= t; not yet released, so
 *    o + S + C > t).  Buckets are opened one after another and two openings
 *    are at least S apart when the earlier bucket closed by time, so that
 *    half-open interval of length C holds at most ceil(C/S) of them.
 *  - Plus the new bucket itself: ceil(L/B) - 1 + ceil(C/S) + 1.
 * The seed's author expected one less; the new bucket is the one.  A trace
 * that reaches the bound: C = 10, S = 1, L = 500, B = 50.  At t = 0 take
 * 451 uses: 9 full buckets and a tenth with one use, which closes by time
 * at 1.  Then take one use at each of t = 1, 2, ..., 9: each opens a bucket
 * that closes by time.  At t = 10 nothing is released yet (the first bucket
 * goes at 0 + 1 + 10 = 11), 9 full and 10 timed buckets are in use, 40 uses
 * are free, and the next use opens the 20th = ceil(10/1) + ceil(500/50).
 * tests/test_limiter_bound.c drives such traces with the injected clock.
 *
 * The protocol (why one CAS per grant is safe)
 * --------------------------------------------
 * All state a decision depends on lives in the 16-byte word W (limiter.h)
 * and in the ring slots it names.  A call:
 *
 *   w = load(W)
 *   loop:
 *     now = clock()                   -- after reading W, never before
 *     if oldest bucket cooled (close + C <= now): CAS W to release it
 *     elif inflight == L: deny
 *     elif active bucket takes uses (count < B, now < close):
 *       CAS W {inflight+1, count+1}   -- decides and records at once
 *     else: seal the active bucket (raise its slot's count), open serial
 *       tail' (write its slot once: first opener wins), then
 *       CAS W {inflight+1, count=1, tail', active}
 *     on CAS failure: w = the value the CAS returned, loop
 *
 * Safety.  Order the successful CASes on W; each carries the clock value
 * its caller read after reading the W it replaced, hence after every
 * earlier CAS.  A release of bucket b happens in a call whose clock said
 * close(b) + C <= now; every use in b was decided before close(b) (a grant
 * into b needs now < close(b), and a grant CAS only succeeds if W is
 * unchanged since the caller's read, so its clock read came after every
 * earlier transition and before its own CAS).  Hence the uses a release
 * returns were decided at least C before any decision that can spend them,
 * and at any time at most L uses decided within the last C are in flight.
 * If the clock were read before W, a caller preempted between the two could
 * spend a use released "in its future": tests/model/throttle.pml checks both orders.
 *
 * Slots.  A slot changes only by CAS: opening writes {close, serial, 0} only
 * over an older serial, so a stale opener never overwrites a newer bucket;
 * sealing raises the count monotonically, only for the same serial, and the
 * count of a bucket never exceeds what the W that sealed it showed.  So a
 * sealed slot holds exactly the count released from it.
 *
 * Liveness.  Every transition is one CAS; a process killed anywhere leaves
 * W consistent, and the use it was being granted is either recorded (and
 * released after C) or not taken.  A CAS fails only because another
 * succeeded, so some caller always progresses (lock-free).  Retries are
 * bounded (SHMT_RETRY_MAX) so a damaged segment yields SHMT_EBUSYLOOP, not
 * an endless loop.
 *
 * Torn reads.  A 16-byte atomic load is a locked cmpxchg16b on most x86-64
 * CPUs, as dear as the CAS itself.  A shared limiter's W is therefore read
 * as two 8-byte loads, high half (tail, nsealed, active, tag) first.  Every
 * transition raises (tail, active, count - nsealed) lexicographically: a
 * grant raises count, a release of a sealed bucket lowers nsealed, every
 * other step raises tail or turns active on.  So if a CAS succeeds against
 * the pair, tail and active were constant since the high load, hence only
 * grants and sealed releases can have happened; nsealed is unchanged, so no
 * release; count is unchanged since the low load, so no grant: W held the
 * pair from the low load (before the clock read) to the CAS.  The ring slot
 * a decision reads is then fixed for the same span (a slot is reused only
 * after its bucket is released), so it too is read half by half.  A denial
 * has no CAS to validate it, so it is confirmed with a full atomic load.
 * Client entries can cycle LIVE -> FREE -> LIVE with an identical word, so
 * they always use full loads.  This argument, and the one for the per-thread
 * guess below, hold as long as tail does not wrap around 2^32 between an
 * observation and the CAS that matches it (four billion buckets opened).
 *
 * Exact mode keeps the time of grant n in log slot n % L; grant n is one
 * CAS on that slot from the record of grant n - L to {n, now}, allowed when
 * that record is C old; W holds only a hint of n that anyone advances.
 *
 *   loop:
 *     n = load(hint); s = load(slot n % L)
 *     if s.n == n: CAS hint n -> n + 1 (help), loop
 *     if s.n != n - L: loop (stale hint) or corrupt
 *     now = clock()                   -- after reading the slot
 *     if s.n >= 0 and s.time + C > now: deny
 *     CAS slot {n - L, s.time} -> {n, now}; on failure loop
 *     report n; CAS hint n -> n + 1 (may fail: a helper was first)
 *
 * Order.  The hint reaches n + 1 only after slot n % L holds n, so grant
 * n + 1 reads its clock after grant n's slot CAS, hence after grant n's
 * clock read: decision times grow with n.  Grant n + L needs grant n's
 * record C old, so t(n + L) >= t(n) + C, and with the order any half-open
 * [t, t + C) holds at most L grants.  Key names: grant n gets name
 * n mod nkeys, with L = nkeys * X.  The number reported is the n written by
 * the grant's own slot CAS (the atomic step that decides and records it),
 * never the hint read back afterwards: a failed compare-and-exchange
 * overwrites its expected value with the hint's current one, which is
 * another grant's number.  Grants with one name that fall in [t, t + C)
 * have numbers n_1 < ... < n_j, all equal mod nkeys; if j > X then
 * n_j >= n_1 + L, so t(n_j) >= t(n_j - L) + C >= t(n_1) + C: impossible.
 * So every name is handed out at most X times in any [t, t + C)
 * (tests/test_limiter_keys_mp.c checks this with six processes).
 *
 * Cost.  A grant of k <= B uses is the same one CAS with inflight and count
 * raised by k (decide.inc): every argument above counts uses, not calls,
 * and holds unchanged; only the ring's bound assumes grants of one. *
 * Changing parameters in place (shmt_limiter_update)
 * ---------------------------------------------------
 * A grant decides with parameters (L, C, S, B) that its process copied
 * into a view long before; the change must reach every such grant in one
 * atomic step.  On a shared ring without keys, W's tag is the parameter
 * generation g, and the parameters of g live in row block lm_p[g & 1]
 * (g = 0: the identity fields).  Under the table lock, the updater:
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
 * of g' (view_renew) first.  Hence the change is one point in the order of
 * CASes on W: every decision before it used the old parameters, every
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
 * hold was decided, so the release rule stays safe.  Up to 65535 changes
 * overtaking one preempted grant would let its tag match again: the same
 * kind of caveat as tail wrapping above.  The argument under "Torn reads"
 * holds with the tag added to the order after (tail, active): a change
 * raises tail (it seals) or only the tag, and the tag only grows.
 */
#include "limiter.h"

#include "analyzer.h"
#include "atomic128.h"
#include "dict.h"
#include "fork.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CAS fails only when another succeeds; a million failures in one call
 * means the segment is damaged or a peer is pathological. */
#define SHMT_RETRY_MAX (1U << 20)

enum { WHY_NONE, WHY_EXHAUSTED, WHY_SLACK, WHY_RING_FULL, WHY_TABLE_FULL,
	WHY_SHADOW };

/* Client entry states (W tag bits 15..14) and epoch (bits 13..0). */
enum { CE_NEVER = 0, CE_LIVE = 1, CE_FREE = 2, CE_CLAIMING = 3 };
#define CE_EPOCH_MASK 0x3fffU
#define CE_TAG(state, ep) (((uint32_t)(state) << 14) | ((ep) & CE_EPOCH_MASK))

/*
 * A validated, process-local copy of a READY row's identity, with pointers
 * into this process's mapping.  The identity never changes once READY;
 * the parameters of a shared buckets limiter may (shmt_limiter_update), so
 * the view records the generation it was built for (pgen), and a view
 * found stale is never rewritten (other threads may be reading it): a new
 * one is chained after it (lv_next) and kept until the handle closes.
 */
struct shmt_lview {
	uint32_t lv_state;            /* 0 empty, 1 filling, 2 ready */
	uint32_t lv_row;
	struct shmt_lview *lv_next;   /* a newer view of the same row */
	uint32_t pgen;                /* W's tag this view is valid for */
	uint32_t pgen_check;          /* 1: a shared buckets ring w/o keys */
	uint32_t hold_serial, uses_cap;
	uint64_t hold_window, limit_cap;
	struct shmt_lim *lim;
	uint64_t limit, window, slack, slack_uses;
	uint32_t mode, flags, nb, nkeys, keystride, keymax, capacity, entsize;
	uint32_t uses_per_key;
	uint64_t burst;               /* rate mode */
	uint64_t nb_magic;            /* for slot_of, see there */
	struct shmt_ring_slot *ring;  /* buckets mode */
	struct shmt_log_slot *log;    /* exact mode */
	const char *keys;
	char *clients;
	char name[SHMT_LIMITER_NAME_MAX + 1];
};

static uint64_t
sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static uint64_t
div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* 128-bit hash of a client id, keyed with the segment's secret (hash.h):
 * ids come from outside, and a public hash would let anyone fill a
 * victim's neighbourhood of the table with ids found offline.  A collision
 * makes two clients share one limit, which is stricter, never looser. */
void
shmt__client_hash(const shmt_t *h, const void *id, size_t len, uint64_t out[2])
{
	shmt__hash128(&h->key, id, len, out);
	out[0] |= 1;                /* never 0: 0 marks a never-used entry */
	out[1] &= ~0xffffULL;       /* the low 16 bits hold the epoch */
}

/* ---- Parameters -------------------------------------------------------- */

static void wake_waiters(uint32_t *wake);
static int gcra_check(const shmt_limit_t *l);
struct shmt_client;
static int gcra_ce_reclaim(struct shmt_client *e, uint64_t now);
static void gcra_stat(shmt_t *h, const struct shmt_lview *v,
    shmt_limiter_stat_t *o);

struct lim_geom {
	uint64_t limit;
	uint32_t nb, keystride, keymax, entsize;
	uint64_t ring_bytes, keys_bytes, clients_bytes;
};

#define REFUSE(...) do { \
		if (why != NULL && why_len > 0) \
			snprintf(why, why_len, __VA_ARGS__); \
		return -EINVAL; \
	} while (0)

/* The one set of rules for limiter parameters (shmt_limit_check): fills G
 * with the geometry, or returns -EINVAL with WHY (may be NULL) naming the
 * field and the rule. */
static int
limit_check(const shmt_limit_t *l, struct lim_geom *g, char *why,
    size_t why_len)
{
	uint64_t limit = l->limit;

	memset(g, 0, sizeof(*g));
	if (why != NULL && why_len > 0)
		why[0] = '\0';
	if (l->mode != SHMT_MODE_BUCKETS && l->mode != SHMT_MODE_EXACT &&
	    l->mode != SHMT_MODE_GCRA)
		REFUSE("mode: must be SHMT_MODE_BUCKETS, SHMT_MODE_EXACT or "
		    "SHMT_MODE_GCRA, not %d", l->mode);
	if ((l->burst != 0) != (l->mode == SHMT_MODE_GCRA))
		REFUSE("burst: from 1 in SHMT_MODE_GCRA, 0 in the other modes");
	if (l->shadow != 0 && l->shadow != 1)
		REFUSE("shadow: must be 0 or 1");
	if (l->shadow && l->nkeys > 0)
		REFUSE("shadow: a key pool cannot be in shadow mode (a name "
		    "handed out must be real)");
	if (l->window_ns == 0)
		REFUSE("window_ns: must be above 0");
	if (l->global != 0 && (l->global != 1 || l->mode != SHMT_MODE_BUCKETS ||
	    l->nkeys != 0 || l->per_client || l->shadow))
		REFUSE("global: 0 or 1, and a global limiter is a shared "
		    "buckets limiter (no key pool, not per client, not shadow)");
	if (l->nkeys > 0) {
		if (l->nkeys > SHMT_KEYS_MAX)
			REFUSE("nkeys: at most SHMT_KEYS_MAX (%d) key names",
			    SHMT_KEYS_MAX);
		if (l->keys == NULL)
			REFUSE("keys: NULL, but nkeys is %u", l->nkeys);
		if (l->uses_per_key == 0)
			REFUSE("uses_per_key: must be at least 1 with a key "
			    "pool");
		if (l->per_client)
			REFUSE("per_client: a key pool cannot be per client");
		if (limit == 0)
			limit = (uint64_t)l->nkeys * l->uses_per_key;
		if (limit != (uint64_t)l->nkeys * l->uses_per_key)
			REFUSE("limit: with a key pool it must be nkeys x "
			    "uses_per_key (%" PRIu64 ") or 0",
			    (uint64_t)l->nkeys * l->uses_per_key);
		for (uint32_t i = 0; i < l->nkeys; i++) {
			size_t n;

			if (l->keys[i] == NULL)
				REFUSE("keys: name %u is NULL", i);
			n = strnlen(l->keys[i], SHMT_KEYNAME_MAX + 1);
			if (n == 0 || n > SHMT_KEYNAME_MAX)
				REFUSE("keys: name %u must be 1 to "
				    "SHMT_KEYNAME_MAX (%d) bytes", i,
				    SHMT_KEYNAME_MAX);
			if (n > g->keymax)
				g->keymax = (uint32_t)n;
		}
		g->keystride = (g->keymax + 1 + 7) & ~7U;
		g->keys_bytes = (uint64_t)g->keystride * l->nkeys;
	} else if (l->keys != NULL) {
		REFUSE("keys: set, but nkeys is 0");
	} else if (l->uses_per_key != 0) {
		REFUSE("uses_per_key: needs a key pool (nkeys is 0)");
	}
	if (limit == 0 || limit > SHMT_LIMIT_MAX)
		REFUSE("limit: must be from 1 to %llu",
		    (unsigned long long)SHMT_LIMIT_MAX);
	g->limit = limit;
	if (l->mode == SHMT_MODE_GCRA) {
		if (l->nkeys != 0)
			REFUSE("nkeys: SHMT_MODE_GCRA takes no key pool");
		if (l->slack_ns != 0)
			REFUSE("slack_ns: SHMT_MODE_GCRA has no slack (it has "
			    "burst)");
		if (l->slack_uses != 0)
			REFUSE("slack_uses: SHMT_MODE_GCRA has no slack (it has "
			    "burst)");
		if (l->burst > SHMT_LIMIT_MAX)
			REFUSE("burst: must be from 1 to %llu",
			    (unsigned long long)SHMT_LIMIT_MAX);
		if (gcra_check(l) != 0)
			REFUSE("window_ns: SHMT_MODE_GCRA needs window_ns / limit "
			    "of at least 1 ns, and burst x (window_ns / limit) "
			    "under 2^62 ns");
	} else if (l->mode == SHMT_MODE_EXACT) {
		if (limit > SHMT_EXACT_LIMIT_MAX)
			REFUSE("limit: exact mode keeps one record per use: "
			    "at most %llu",
			    (unsigned long long)SHMT_EXACT_LIMIT_MAX);
		if (l->per_client)
			REFUSE("per_client: exact mode cannot be per client");
		g->ring_bytes = limit * sizeof(struct shmt_log_slot);
	} else {
		uint64_t nb;

		if (l->slack_ns == 0)
			REFUSE("slack_ns: must be above 0 in buckets mode");
		if (l->slack_uses == 0 || l->slack_uses > limit)
			REFUSE("slack_uses: must be from 1 to limit (%" PRIu64
			    ") in buckets mode", limit);
		nb = div_up(l->window_ns, l->slack_ns) +
		    div_up(limit, l->slack_uses);
		if (nb > SHMT_BUCKETS_MAX)
			REFUSE("slack_ns: window_ns / slack_ns + limit / "
			    "slack_uses needs %" PRIu64 " buckets, more than "
			    "%u: raise slack_ns or slack_uses", nb,
			    SHMT_BUCKETS_MAX);
		g->nb = (uint32_t)nb;
		g->ring_bytes = nb * sizeof(struct shmt_ring_slot);
	}
	if (l->per_client) {
		if (l->client_capacity == 0 || l->client_capacity > (1U << 24))
			REFUSE("client_capacity: must be from 1 to %u for a "
			    "per-client limiter", 1U << 24);
		g->entsize = (uint32_t)(sizeof(struct shmt_client) +
		    g->ring_bytes);
		g->clients_bytes = (uint64_t)g->entsize * l->client_capacity;
		g->ring_bytes = 0;
	} else if (l->client_capacity != 0) {
		REFUSE("client_capacity: set, but per_client is 0");
	}
	return 0;
}

#undef REFUSE

SHMT_EXPORT int
shmt_limit_check(const shmt_limit_t *lim, char *why, size_t why_len)
{
	struct lim_geom g;

	if (lim == NULL) {
		if (why != NULL && why_len > 0)
			snprintf(why, why_len, "lim: NULL");
		return -EINVAL;
	}
	return limit_check(lim, &g, why, why_len);
}

static int
name_check(const char *name, size_t *lenp)
{
	size_t len;

	if (name == NULL)
		return -EINVAL;
	len = strnlen(name, SHMT_LIMITER_NAME_MAX + 1);
	if (len > SHMT_LIMITER_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0)
		return -EINVAL;
	*lenp = len;
	return 0;
}

/* ---- Views: validated copies of rows ----------------------------------- */

static struct shmt_lim *
rows(const shmt_t *h, uint32_t *n)
{
	*n = (uint32_t)(h->reg[SHMT_R_LIMITERS].rg_size / sizeof(struct shmt_lim));
	return shmt__region(h, SHMT_R_LIMITERS);
}

static int
arena_span(const shmt_t *h, uint64_t off, uint64_t len, void **out)
{
	if (off % 16 != 0 || !shmt__in_region(h, SHMT_R_ARENA, off, len))
		return SHMT_ECORRUPT;
	*out = (char *)shmt__region(h, SHMT_R_ARENA) + off;
	return 0;
}

/* The parameters in force for the generation W's tag names, read like a
 * seqlock against W's tag (a block is rewritten only after W has left its
 * generation, see shmt_limiter_update), and checked: the ring must hold
 * them, and the caps must cover them.  Every load is an acquire, so that
 * none moves after the tag's second load (no fence: gcc cannot instrument
 * one for ThreadSanitizer). */
static int
view_params(struct shmt_lim *lim, struct shmt_lview *v)
{
	for (int tries = 0; tries < 64; tries++) {
		uint32_t gen = (uint32_t)__atomic_load_n(&lim->lm_w.w[1],
		    __ATOMIC_ACQUIRE) & 0xffffU;
		const struct shmt_lparams *p = &lim->lm_p[gen & 1];
		struct shmt_lparams q;

		v->pgen = gen;
		if (gen == 0)
			return 0;        /* the identity's parameters */
		q.lp_limit = __atomic_load_n(&p->lp_limit, __ATOMIC_ACQUIRE);
		q.lp_window = __atomic_load_n(&p->lp_window, __ATOMIC_ACQUIRE);
		q.lp_slack = __atomic_load_n(&p->lp_slack, __ATOMIC_ACQUIRE);
		q.lp_hold_window = __atomic_load_n(&p->lp_hold_window,
		    __ATOMIC_ACQUIRE);
		q.lp_slack_uses = __atomic_load_n(&p->lp_slack_uses,
		    __ATOMIC_ACQUIRE);
		q.lp_hold_serial = __atomic_load_n(&p->lp_hold_serial,
		    __ATOMIC_ACQUIRE);
		q.lp_gen = __atomic_load_n(&p->lp_gen, __ATOMIC_ACQUIRE);
		q.lp_limit_cap = __atomic_load_n(&p->lp_limit_cap,
		    __ATOMIC_ACQUIRE);
		q.lp_uses_cap = __atomic_load_n(&p->lp_uses_cap,
		    __ATOMIC_ACQUIRE);
		if (((uint32_t)__atomic_load_n(&lim->lm_w.w[1],
		    __ATOMIC_RELAXED) & 0xffffU) != gen)
			continue;
		if (q.lp_gen != gen || q.lp_limit == 0 ||
		    q.lp_limit > SHMT_LIMIT_MAX || q.lp_window == 0 ||
		    q.lp_slack == 0 || q.lp_slack_uses == 0 ||
		    q.lp_slack_uses > q.lp_limit ||
		    div_up(q.lp_window, q.lp_slack) +
		    div_up(q.lp_limit, q.lp_slack_uses) > v->nb ||
		    q.lp_limit_cap < q.lp_limit ||
		    q.lp_limit_cap > SHMT_LIMIT_MAX ||
		    q.lp_uses_cap < q.lp_slack_uses ||
		    q.lp_uses_cap > q.lp_limit_cap)
			return SHMT_ECORRUPT;
		v->limit = q.lp_limit;
		v->window = q.lp_window;
		v->slack = q.lp_slack;
		v->slack_uses = q.lp_slack_uses;
		v->hold_window = q.lp_hold_window;
		v->hold_serial = q.lp_hold_serial;
		v->limit_cap = q.lp_limit_cap;
		v->uses_cap = q.lp_uses_cap;
		return 0;
	}
	return SHMT_EBUSYLOOP;
}

/* Fill V from row R, checking every field and offset.  SHMT_ECORRUPT when
 * the row is inconsistent, -ENOENT when it is not READY. */
static int
view_fill(const shmt_t *h, uint32_t r, struct shmt_lim *lim,
    struct shmt_lview *v)
{
	shmt_limit_t l;
	struct lim_geom g;
	void *p;
	int rc;

	if (__atomic_load_n(&lim->lm_state, __ATOMIC_ACQUIRE) != SHMT_LIM_READY)
		return -ENOENT;
	memset(v, 0, sizeof(*v));
	memcpy(v->name, lim->lm_name, sizeof(v->name));
	v->name[SHMT_LIMITER_NAME_MAX] = '\0';
	v->lv_row = r;
	v->lim = lim;
	v->mode = lim->lm_mode;
	v->limit = lim->lm_limit;
	v->window = lim->lm_window;
	v->slack = lim->lm_slack;
	v->slack_uses = lim->lm_slack_uses;
	v->flags = lim->lm_flags;
	v->nb = lim->lm_nbuckets;
	v->nkeys = lim->lm_nkeys;
	v->uses_per_key = lim->lm_uses_per_key;
	v->nb_magic = v->nb != 0 ? UINT64_MAX / v->nb + 1 : 0;
	v->keystride = lim->lm_keystride;
	v->keymax = lim->lm_keymax;
	v->capacity = lim->lm_capacity;
	v->entsize = lim->lm_entsize;

	/* Recompute the geometry from the parameters and insist on it. */
	memset(&l, 0, sizeof(l));
	l.limit = v->limit;
	l.window_ns = v->window;
	l.slack_ns = v->slack;
	l.slack_uses = v->slack_uses;
	l.mode = (int)v->mode;
	l.per_client = (v->flags & SHMT_LIMF_PER_CLIENT) != 0;
	l.client_capacity = l.per_client ? v->capacity : 0;
	l.burst = v->burst = lim->lm_burst;
	l.global = (v->flags & SHMT_LIMF_GLOBAL) != 0;
	if ((v->flags & SHMT_LIMF_SHADOW) && (v->flags & SHMT_LIMF_KEYS))
		return SHMT_ECORRUPT;
	if ((rc = limit_check(&l, &g, NULL, 0)) != 0 || g.nb != v->nb ||
	    v->name[0] == '\0')
		return SHMT_ECORRUPT;
	if (v->mode == SHMT_MODE_GCRA && !l.per_client) {
		/* One word: the theoretical arrival time, in lm_w. */
	} else if (v->mode == SHMT_MODE_EXACT) {
		if ((rc = arena_span(h, lim->lm_ring_off, g.ring_bytes, &p)) != 0)
			return rc;
		v->log = p;
	} else if (!l.per_client) {
		if ((rc = arena_span(h, lim->lm_ring_off, g.ring_bytes, &p)) != 0)
			return rc;
		v->ring = p;
	} else {
		if (v->entsize != g.entsize ||
		    (rc = arena_span(h, lim->lm_clients_off, g.clients_bytes,
		    &p)) != 0)
			return SHMT_ECORRUPT;
		v->clients = p;
	}
	if (v->flags & SHMT_LIMF_KEYS) {
		if (v->nkeys == 0 || v->nkeys > SHMT_KEYS_MAX ||
		    v->keymax == 0 || v->keymax > SHMT_KEYNAME_MAX ||
		    v->keystride != ((v->keymax + 1 + 7) & ~7U) ||
		    lim->lm_uses_per_key == 0 ||
		    (uint64_t)v->nkeys * lim->lm_uses_per_key != v->limit)
			return SHMT_ECORRUPT;
		if ((rc = arena_span(h, lim->lm_keys_off,
		    (uint64_t)v->nkeys * v->keystride, &p)) != 0)
			return rc;
		v->keys = p;
	} else if (v->nkeys != 0) {
		return SHMT_ECORRUPT;
	}
	v->limit_cap = v->limit;
	v->uses_cap = (uint32_t)v->slack_uses;
	v->pgen_check = v->mode == SHMT_MODE_BUCKETS &&
	    !(v->flags & (SHMT_LIMF_PER_CLIENT | SHMT_LIMF_KEYS));
	return v->pgen_check ? view_params(lim, v) : 0;
}

static int
lviews_ensure(shmt_t *h)
{
	struct shmt_lview *v, *expect = NULL;
	uint32_t n;

	if (__atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE) != NULL)
		return 0;
	rows(h, &n);
	v = calloc(n, sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	if (!__atomic_compare_exchange_n(&h->lviews, &expect, v, 0,
	    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		free(v);
	return 0;
}

void
shmt__lviews_free(shmt_t *h)
{
	uint32_t n;

	if (h->lviews != NULL) {
		rows(h, &n);
		for (uint32_t r = 0; r < n; r++) {
			struct shmt_lview *v = h->lviews[r].lv_next;

			while (v != NULL) {
				struct shmt_lview *next = v->lv_next;

				free(v);
				v = next;
			}
		}
	}
	free(h->lviews);
	h->lviews = NULL;
}

/* The newest view chained after V. */
static inline const struct shmt_lview *
view_latest(const struct shmt_lview *v)
{
	const struct shmt_lview *n;

	while ((n = __atomic_load_n(&v->lv_next, __ATOMIC_ACQUIRE)) != NULL)
		v = n;
	return v;
}

/* The view of row R, filled on first use.  Threads race to fill it; the
 * winner of the 0 -> 1 CAS fills and publishes with a release store, the
 * others fill a copy of their own in SCRATCH. */
static int
view_get(shmt_t *h, uint32_t r, struct shmt_lview *scratch,
    const struct shmt_lview **out)
{
	struct shmt_lview *v;
	struct shmt_lim *lim;
	uint32_t n, expect = 0;
	int rc;

	if ((rc = lviews_ensure(h)) != 0)
		return rc;
	lim = rows(h, &n);
	if (r >= n)
		return -ENOENT;
	v = &h->lviews[r];
	if (__atomic_load_n(&v->lv_state, __ATOMIC_ACQUIRE) == 2) {
		*out = view_latest(v);
		return 0;
	}
	if (!__atomic_compare_exchange_n(&v->lv_state, &expect, 1, 0,
	    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		if ((rc = view_fill(h, r, &lim[r], scratch)) != 0)
			return rc;
		*out = scratch;
		return 0;
	}
	rc = view_fill(h, r, &lim[r], scratch);
	if (rc != 0) {
		__atomic_store_n(&v->lv_state, 0, __ATOMIC_RELEASE);
		return rc;
	}
	memcpy((char *)v + sizeof(v->lv_state),
	    (char *)scratch + sizeof(scratch->lv_state),
	    sizeof(*v) - sizeof(v->lv_state));
	__atomic_store_n(&v->lv_state, 2, __ATOMIC_RELEASE);
	*out = v;
	return 0;
}

/* Length and hash of a limiter name in one pass: -ENAMETOOLONG past
 * SHMT_LIMITER_NAME_MAX bytes, -EINVAL when empty.  FNV-1a, unkeyed: it
 * only picks an entry of this process's cache, names are chosen by the
 * operator, and a collision costs a miss, never a wrong answer. */
static int
name_scan(const char *name, size_t *lenp, uint32_t *hashp)
{
	uint32_t h = 2166136261U;
	size_t len = 0;

	if (name == NULL)
		return -EINVAL;
	for (; name[len] != '\0'; len++) {
		if (len == SHMT_LIMITER_NAME_MAX)
			return -ENAMETOOLONG;
		h = (h ^ (uint8_t)name[len]) * 16777619U;
	}
	if (len == 0)
		return -EINVAL;
	*lenp = len;
	*hashp = h;
	return 0;
}

/* The limiter this thread used last, per handle: a ready view never
 * changes and lives as long as its handle (whose uid is never reused), so
 * a name equal to the view's is the whole check. */
static __thread struct {
	uint32_t uid;
	const struct shmt_lview *v;
} lim_last;

/* The view's row is still defined (shmt_limiter_delete): one load of a
 * line that is written only when the row is defined or deleted. */
static inline int
row_live(const struct shmt_lview *v)
{
	return __atomic_load_n(&v->lim->lm_state, __ATOMIC_RELAXED) ==
	    SHMT_LIM_READY;
}

/* NAME equals the view's name (NUL-terminated within its buffer). */
static inline int
name_is(const char *vname, const char *name)
{
	for (size_t i = 0;; i++) {
		if (vname[i] != name[i])
			return 0;
		if (vname[i] == '\0')
			return 1;
	}
}

/* Find limiter NAME: the thread's last one, then the process-local cache
 * (a hint, confirmed by the view's name), then a scan of the table. */
static int
lim_find(shmt_t *h, const char *name, struct shmt_lview *scratch,
    const struct shmt_lview **out)
{
	struct shmt_lview *views;
	struct shmt_lim *lim;
	uint32_t n, hash, slot, r;
	uint64_t ent;
	size_t len;
	int rc;

	if (h == NULL)
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if (lim_last.uid == h->uid && name != NULL &&
	    name_is(lim_last.v->name, name) &&
	    __builtin_expect(row_live(lim_last.v), 1)) {
		*out = view_latest(lim_last.v);
		return 0;
	}
	if ((rc = name_scan(name, &len, &hash)) != 0)
		return rc;
	slot = hash % SHMT_LCACHE_SIZE;
	ent = __atomic_load_n(&h->lcache.lc_ent[slot], __ATOMIC_RELAXED);
	r = (uint32_t)ent - 1;
	views = __atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE);
	/* The hot path: a cached row whose view is ready and whose name is
	 * this one. */
	if (ent != 0 && (uint32_t)(ent >> 32) == hash && views != NULL &&
	    r < h->reg[SHMT_R_LIMITERS].rg_size / sizeof(struct shmt_lim) &&
	    __atomic_load_n(&views[r].lv_state, __ATOMIC_ACQUIRE) == 2 &&
	    memcmp(views[r].name, name, len + 1) == 0 &&
	    row_live(&views[r])) {
		*out = view_latest(&views[r]);
		lim_last.uid = h->uid;
		lim_last.v = *out;
		return 0;
	}
	if (ent != 0 && (uint32_t)(ent >> 32) == hash &&
	    view_get(h, r, scratch, out) == 0 &&
	    memcmp((*out)->name, name, len + 1) == 0 && row_live(*out))
		return 0;
	lim = rows(h, &n);
	for (r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY ||
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) != 0)
			continue;
		if ((rc = view_get(h, r, scratch, out)) != 0)
			return rc;
		__atomic_store_n(&h->lcache.lc_ent[slot],
		    ((uint64_t)hash << 32) | (r + 1), __ATOMIC_RELAXED);
		return 0;
	}
	return -ENOENT;
}

/*
 * V was found stale (W's tag names other parameters): *VP gets a view of
 * the parameters in force, chained after the row's views so that later
 * calls find it.  Returns 0, or an error (-ENOENT: the row is gone).
 */
static __attribute__((noinline, cold)) int
view_renew(shmt_t *h, const struct shmt_lview **vp)
{
	struct shmt_lview scratch, *head, *nv, *tail, *expect;
	const struct shmt_lview *got;
	uint32_t r = (*vp)->lv_row, n;
	int rc;

	if ((rc = view_get(h, r, &scratch, &got)) != 0)
		return rc;
	rows(h, &n);
	head = &h->lviews[r];
	if (__atomic_load_n(&head->lv_state, __ATOMIC_ACQUIRE) != 2)
		return SHMT_EBUSYLOOP;    /* another thread is filling it */
	nv = malloc(sizeof(*nv));
	if (nv == NULL)
		return -ENOMEM;
	if ((rc = view_fill(h, r, rows(h, &n) + r, nv)) != 0) {
		free(nv);
		return rc;
	}
	nv->lv_state = 2;
	tail = (struct shmt_lview *)view_latest(head);
	for (;;) {
		if (tail->pgen == nv->pgen) {
			/* Another thread chained this generation first. */
			free(nv);
			*vp = tail;
			break;
		}
		expect = NULL;
		if (__atomic_compare_exchange_n(&tail->lv_next, &expect, nv, 0,
		    __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
			*vp = nv;
			break;
		}
		tail = (struct shmt_lview *)view_latest(expect);
	}
	if (lim_last.uid == h->uid && lim_last.v != NULL &&
	    lim_last.v->lv_row == r)
		lim_last.v = *vp;
	return 0;
}

/* ---- Ring slots ---------------------------------------------------------- */

#define SLOT_SERIAL(s) ((uint32_t)((s)[1] >> 32))
#define SLOT_COUNT(s) ((uint32_t)(s)[1])

/* Raise the count of SERIAL's slot to COUNT (a monotone max).  Returns 0,
 * or SHMT_ECORRUPT when the slot holds an older serial (impossible: a bucket
 * is opened in its slot before any W names it).  A newer serial means the
 * caller's W is stale; its CAS on W will fail, so nothing is written. */
static int
slot_raise(struct shmt_ring_slot *slot, uint32_t serial, uint32_t count)
{
	uint64_t s[2], d[2];

	shmt__load128(slot, s);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		int32_t age = (int32_t)(SLOT_SERIAL(s) - serial);

		if (age > 0)
			return 0;
		if (age < 0)
			return SHMT_ECORRUPT;
		if (SLOT_COUNT(s) >= count)
			return 0;
		d[0] = s[0];
		d[1] = ((uint64_t)serial << 32) | count;
		if (shmt__cas128(slot, s, d))
			return 0;
	}
	return SHMT_EBUSYLOOP;
}

/* Open bucket SERIAL with close time CLOSE unless someone already did (first
 * opener wins).  Returns the close time of SERIAL, or 0 when the slot
 * already holds a newer serial (the caller's W is stale). */
static uint64_t
slot_open(struct shmt_ring_slot *slot, uint32_t serial, uint64_t close)
{
	uint64_t s[2], d[2] = { close, (uint64_t)serial << 32 };

	shmt__load128(slot, s);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		int32_t age = (int32_t)(serial - SLOT_SERIAL(s));

		if (age == 0)
			return s[0];
		if (age < 0)
			return 0;
		if (shmt__cas128(slot, s, d))
			return close;
	}
	return 0;
}

/* ---- The ring of buckets ------------------------------------------------- */

/* A slot read for serial SERIAL: SLOT_OK when it holds it, SLOT_STALE when
 * it holds a newer one (the caller's W is stale: the ring has moved on, so
 * reload W and retry), or SHMT_ECORRUPT when it holds an older one (a
 * bucket's slot is written before any W names the bucket). */
#define SLOT_OK 0
#define SLOT_STALE 2

static inline int
slot_is(const uint64_t s[2], uint32_t serial)
{
	int32_t age = (int32_t)(SLOT_SERIAL(s) - serial);

	return age == 0 ? SLOT_OK : age > 0 ? SLOT_STALE : SHMT_ECORRUPT;
}

struct bk_ctx {
	uint64_t limit, window, slack;
	uint32_t slack_uses, nb;
	uint64_t limit_cap, hold_window; /* see shmt_limiter_update */
	uint32_t uses_cap, hold_serial;
	uint32_t ntags;               /* key pool size, or 0: tag is fixed */
	int check_tag;                /* client entries: W must carry... */
	uint32_t tag_expect;          /* ...this tag (LIVE, epoch) */
	struct shmt_ring_slot *ring;
	uint64_t *released;           /* statistics: uses released */
	int torn_ok;                  /* reads may be half by half */
	uint64_t nb_magic;            /* for slot_of: 2^64 / nb, rounded up */
};

/*
 * The ring slot of serial S: S mod nb without a division.  A 32-bit
 * modulus by a constant that is only known at run time costs a 20-40 cycle
 * DIV on every grant; with M = ceil(2^64 / nb), the product M * S keeps the
 * fraction S / nb in its low 64 bits, and multiplying that fraction by nb
 * gives the remainder exactly for every 32-bit S (Lemire, Kaser and Kurz,
 * "Faster remainder by direct computation", 2019).
 */
static inline struct shmt_ring_slot *
slot_of(const struct bk_ctx *c, uint32_t s)
{
	uint64_t frac = c->nb_magic * s;

	return &c->ring[(uint32_t)(((shmt_u128)frac * c->nb) >> 64)];
}

static inline void
bk_load(const struct bk_ctx *c, const void *p, uint64_t out[2])
{
	if (c->torn_ok)
		shmt__load128_hilo(p, out);
	else
		shmt__load128(p, out);
}

static void
bk_ctx_init(struct bk_ctx *c, const struct shmt_lview *v,
    struct shmt_ring_slot *ring)
{
	c->limit = v->limit;
	c->window = v->window;
	c->slack = v->slack;
	c->slack_uses = (uint32_t)v->slack_uses;
	c->nb = v->nb;
	c->ntags = v->nkeys;
	c->limit_cap = v->limit_cap;
	c->uses_cap = v->uses_cap;
	c->hold_window = v->hold_window;
	c->hold_serial = v->hold_serial;
	/* A shared ring's tag is its parameter generation: a grant or a
	 * release on a view of another generation must not commit. */
	c->check_tag = ring == v->ring && v->pgen_check;
	c->tag_expect = v->pgen;
	c->ring = ring;
	c->released = &v->lim->lm_released_uses;
	c->torn_ok = 0;
	c->nb_magic = v->nb_magic;
}

/* CAS *WP from *W to NW, a release; on success count the uses it returned
 * and make *W the new word.  Returns 1 on success. */
static int
bk_commit_release(const struct bk_ctx *c, struct shmt_w *wp, struct shmt_w *w,
    struct shmt_w nw)
{
	uint32_t returned = SHMT_W_INFLIGHT(*w) - SHMT_W_INFLIGHT(nw);

	if (!shmt__cas128(wp, w->w, nw.w))
		return 0;
	*w = nw;
	if (returned != 0) {
		__atomic_fetch_add(c->released, returned, __ATOMIC_RELAXED);
		/* The row's futex word, found from its counter. */
		wake_waiters((uint32_t *)(void *)((char *)c->released -
		    offsetof(struct shmt_lim, lm_released_uses) +
		    offsetof(struct shmt_lim, lm_wake)));
	}
	return 1;
}

static inline int
w_valid(const struct bk_ctx *c, struct shmt_w w)
{
	uint32_t inflight = SHMT_W_INFLIGHT(w), count = SHMT_W_COUNT(w);
	uint32_t nsealed = SHMT_W_NSEALED(w), active = SHMT_W_ACTIVE(w);

	return inflight <= c->limit_cap && count <= c->uses_cap &&
	    count <= inflight && nsealed + active <= c->nb &&
	    (active || count == 0) &&
	    (c->ntags == 0 || SHMT_W_TAG(w) < c->ntags);
}

/* The time bucket SERIAL, closed at CLOSE, is due: a bucket sealed before
 * the last change of parameters keeps the longer of the two windows. */
static inline uint64_t
bk_due(const struct bk_ctx *c, uint32_t serial, uint64_t close)
{
	uint64_t win = c->window;

	if (__builtin_expect(c->hold_window > win, 0) &&
	    (int32_t)(serial - c->hold_serial) < 0)
		win = c->hold_window;
	return sat_add(close, win);
}

/*
 * If the oldest bucket in use has cooled at NOW, compute in *NW the word
 * that releases it and return 1; return 0 when nothing is due, SLOT_STALE
 * when W is stale, or an error.  *DUE gets the time the oldest bucket will
 * be due.  A sealed bucket may hold no use: a serial skipped because a
 * stale opener gave it a close time in the past.
 */
static inline __attribute__((always_inline)) int
bk_release_step(const struct bk_ctx *c, struct shmt_w w, uint64_t now,
    struct shmt_w *nw, uint64_t *due)
{
	uint32_t inflight = SHMT_W_INFLIGHT(w), count = SHMT_W_COUNT(w);
	uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w);
	uint32_t tag = SHMT_W_TAG(w);
	uint64_t s[2];
	int rc;

	*due = UINT64_MAX;
	if (nsealed > 0) {
		uint32_t serial = tail - nsealed;

		bk_load(c, slot_of(c, serial), s);
		if ((rc = slot_is(s, serial)) != SLOT_OK)
			return rc;
		if (SLOT_COUNT(s) > inflight)
			return SHMT_ECORRUPT;
		*due = bk_due(c, serial, s[0]);
		if (*due > now)
			return 0;
		*nw = shmt__w_make(inflight - SLOT_COUNT(s), count, tail,
		    nsealed - 1, SHMT_W_ACTIVE(w), tag);
		return 1;
	}
	if (!SHMT_W_ACTIVE(w))
		return 0;
	bk_load(c, slot_of(c, tail), s);
	if ((rc = slot_is(s, tail)) != SLOT_OK)
		return rc;
	*due = bk_due(c, tail, s[0]);
	if (*due > now)
		return 0;
	if ((rc = slot_raise(slot_of(c, tail), tail, count)) != 0)
		return rc;
	*nw = shmt__w_make(inflight - count, 0, tail + 1, 0, 0, tag);
	return 1;
}

/* Classify a denial at NOW with W: the seed's allowed false negative
 * ("slack") when the oldest bucket's first use may be older than the
 * window, else plain exhaustion. */
static int
bk_why(const struct bk_ctx *c, struct shmt_w w, uint64_t now)
{
	uint32_t serial = SHMT_W_TAIL(w) - SHMT_W_NSEALED(w);
	uint64_t s[2];

	shmt__load128(slot_of(c, serial), s);
	if (SLOT_SERIAL(s) == serial && s[0] >= c->slack &&
	    sat_add(s[0] - c->slack, c->window) <= now)
		return WHY_SLACK;
	return WHY_EXHAUSTED;
}

/*
 * The last word each thread saw of each shared limiter it used lately, to
 * CAS against directly instead of reading the word first: under contention
 * that read pulls the line across cores once more for nothing, since a
 * failed CAS returns the current word anyway.  A value observed atomically
 * (by a CAS) and later matched by a successful CAS was held by W all along
 * in between (its fields only move one way, see "Torn reads"), so the
 * observation counts as the read that precedes the clock.  Keyed by the
 * word's address and the handle's uid, so a remapped segment never matches.
 */
#define WGUESS 8
static __thread struct {
	const void *wp;
	uint32_t uid;
	uint64_t w[2];
} wguess[WGUESS];

static inline unsigned
wguess_slot(const void *wp)
{
	return (unsigned)((uintptr_t)wp >> 7) & (WGUESS - 1);
}

/*
 * A denial decided on a word that may be stale (a guess, or read half by
 * half) is confirmed with a full atomic load: 1 when W still holds *W, else
 * 0 with the current word in *W.
 */
static int
bk_confirm(const struct bk_ctx *c, struct shmt_w *wp, struct shmt_w *w)
{
	struct shmt_w cur;

	if (!c->torn_ok)
		return 1;
	shmt__load128(wp, cur.w);
	if (cur.w[0] == w->w[0] && cur.w[1] == w->w[1])
		return 1;
	*w = cur;
	return 0;
}

/*
 * Contention.  A CAS that loses to another writer has just pulled the line
 * away from the winner; trying again at once makes every call of both pay
 * a transfer.  The loser waits a little (a random number of pauses, up to
 * twice as many after each loss in a row, at most BACKOFF_MAX), then reads
 * W afresh: meanwhile the winner's calls succeed on its own line, one after
 * the other.  Only throughput depends on it, never safety, and the wait is
 * bounded, so no caller waits on another's progress.
 */
#ifndef SHMT_BACKOFF_MAX
#define SHMT_BACKOFF_MAX 64U
#endif

static __thread uint32_t backoff_rnd;

static void
cas_backoff(unsigned *lost)
{
	uint32_t x = backoff_rnd, cap, n;

	if (x == 0)
		x = (uint32_t)(uintptr_t)&backoff_rnd | 1;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	backoff_rnd = x;
	cap = *lost < 8 ? 4U << *lost : SHMT_BACKOFF_MAX;
	if (cap > SHMT_BACKOFF_MAX)
		cap = SHMT_BACKOFF_MAX;
	(*lost)++;
	for (n = x % cap; n > 0; n--)
		ck_pr_stall();
}

/*
 * The loop of bk_take from the word *W (read, or guessed); leaves in *W the
 * last word known to be current.  A grant takes COST uses; AT (may be
 * NULL) gets the decision's clock value.  Always inlined, so that the
 * plain path (COST 1, AT NULL) is compiled with those constants.
 */
static inline __attribute__((always_inline)) int
bk_take_loop(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp,
    struct shmt_w *wio, uint32_t *tag, int *why, uint32_t cost, uint64_t *at)
{
	struct shmt_w w = *wio, nw;
	uint64_t s[2], due, now = 0;
	int rc = SHMT_EBUSYLOOP;
	unsigned lost = 0, i;

	for (i = 0; i < SHMT_RETRY_MAX; i++) {
		now = shmt__now(h);
		uint32_t inflight = SHMT_W_INFLIGHT(w), count = SHMT_W_COUNT(w);
		uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w);
		uint32_t wtag = SHMT_W_TAG(w), ntag, tail2, nsealed2;
		uint64_t close;

		if (c->check_tag && wtag != c->tag_expect) {
			/* A guess may be of another time. */
			if (!bk_confirm(c, wp, &w))
				continue;
			rc = -EAGAIN;
			break;
		}
		if (!w_valid(c, w)) {
			/* A guess may be of another time: check before
			 * calling the segment damaged. */
			if (!bk_confirm(c, wp, &w))
				continue;
			rc = SHMT_ECORRUPT;
			break;
		}
		rc = bk_release_step(c, w, now, &nw, &due);
		if (rc < 0)
			break;
		if (rc == SLOT_STALE) {
			shmt__load128(wp, w.w);
			continue;
		}
		if (rc == 1) {
			bk_commit_release(c, wp, &w, nw);
			continue;
		}
		if ((uint64_t)inflight + cost > c->limit) {
			if (!bk_confirm(c, wp, &w))
				continue;
			*why = bk_why(c, w, now);
			rc = 0;
			break;
		}
		ntag = c->ntags != 0 ? (wtag + 1) % c->ntags : wtag;
		tail2 = tail;
		nsealed2 = nsealed;
		if (SHMT_W_ACTIVE(w)) {
			struct shmt_ring_slot *slot = slot_of(c, tail);

			bk_load(c, slot, s);
			if ((rc = slot_is(s, tail)) == SLOT_STALE) {
				shmt__load128(wp, w.w);
				continue;
			}
			if (rc != SLOT_OK)
				break;
			if ((uint64_t)count + cost <= c->slack_uses &&
			    now < s[0]) {
				nw = shmt__w_make(inflight + cost,
				    count + cost, tail,
				    nsealed, 1, ntag);
				if (shmt__cas128(wp, w.w, nw.w)) {
					*tag = wtag;
					w = nw;
					rc = 1;
					break;
				}
				cas_backoff(&lost);
				bk_load(c, wp, w.w);
				continue;
			}
			if ((rc = slot_raise(slot, tail, count)) != 0)
				break;
			tail2 = tail + 1;
			nsealed2 = nsealed + 1;
		}
		if (nsealed2 + 1 > c->nb) {
			if (!bk_confirm(c, wp, &w))
				continue;
			*why = WHY_RING_FULL;
			rc = 0;
			break;
		}
		close = slot_open(slot_of(c, tail2), tail2,
		    sat_add(now, c->slack));
		if (close <= now) {
			/* A stale opener set this serial's close in the past
			 * (or W is stale): skip the serial, which stays in the
			 * ring as an empty sealed bucket until it is due. */
			nw = shmt__w_make(inflight, 0, tail2 + 1, nsealed2 + 1,
			    0, wtag);
			shmt__cas128(wp, w.w, nw.w) ? (void)(w = nw) : (void)0;
			continue;
		}
		nw = shmt__w_make(inflight + cost, cost, tail2, nsealed2,
		    1, ntag);
		if (shmt__cas128(wp, w.w, nw.w)) {
			*tag = wtag;
			w = nw;
			rc = 1;
			break;
		}
		cas_backoff(&lost);
		bk_load(c, wp, w.w);
	}
	/* Every way out of the loop but this one sets rc; a loop that ran
	 * out (a segment changed under us without end) is an error, whatever
	 * the last step left in rc. */
	if (i == SHMT_RETRY_MAX)
		rc = SHMT_EBUSYLOOP;
	if (at != NULL)
		*at = now;
	*wio = w;
	return rc;
}

/*
 * Take one use from the ring whose word is at WP.  Returns 1 granted (with
 * the key-pool cursor in *TAG), 0 denied (reason in *WHY), or an error.
 * The tag is advanced mod ntags on every grant, or kept when ntags is 0
 * (client entries keep their state and epoch there; the CAS then also checks
 * that the entry is still the caller's).
 */
static inline __attribute__((always_inline)) int
bk_take_n(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp, uint32_t *tag,
    int *why, uint32_t cost, uint64_t *at)
{
	unsigned g = wguess_slot(wp);
	int guessed = c->torn_ok && wguess[g].wp == wp &&
	    wguess[g].uid == h->uid;
	struct shmt_w w;
	int rc;

	if (guessed) {
		w.w[0] = wguess[g].w[0];
		w.w[1] = wguess[g].w[1];
	} else {
		bk_load(c, wp, w.w);
	}
	rc = bk_take_loop(h, c, wp, &w, tag, why, cost, at);
	if (c->torn_ok) {
		/* Keep the last word seen for the next call, but only one
		 * known to be current: from a CAS or a full load. */
		wguess[g].wp = rc >= 0 ? wp : NULL;
		wguess[g].uid = h->uid;
		wguess[g].w[0] = w.w[0];
		wguess[g].w[1] = w.w[1];
	}
	return rc;
}

/* One use (the plain path). */
static int
bk_take(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp, uint32_t *tag,
    int *why)
{
	return bk_take_n(h, c, wp, tag, why, 1, NULL);
}

/* Release every cooled bucket and seal an active bucket that closed (by
 * time or by count).  Sets *NEXT to the next time this ring has work.
 * Returns the number of transitions made, or an error. */
static int
bk_housekeep(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp,
    uint64_t now, uint64_t *next)
{
	struct shmt_w w, nw;
	uint64_t s[2], due;
	int n = 0;

	shmt__load128(wp, w.w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		int rc;

		if (c->check_tag && SHMT_W_TAG(w) != c->tag_expect)
			return -EAGAIN;
		if (!w_valid(c, w))
			return SHMT_ECORRUPT;
		rc = bk_release_step(c, w, now, &nw, &due);
		if (rc < 0)
			return rc;
		if (rc == SLOT_STALE) {
			shmt__load128(wp, w.w);
			continue;
		}
		if (rc == 0 && SHMT_W_ACTIVE(w)) {
			uint32_t tail = SHMT_W_TAIL(w);

			shmt__load128(slot_of(c, tail), s);
			if ((rc = slot_is(s, tail)) == SLOT_STALE) {
				shmt__load128(wp, w.w);
				continue;
			}
			if (rc != SLOT_OK)
				return rc;
			if (now < s[0] && SHMT_W_COUNT(w) < c->slack_uses) {
				if (s[0] < due)
					due = s[0];
				break;
			}
			rc = slot_raise(slot_of(c, tail), tail,
			    SHMT_W_COUNT(w));
			if (rc != 0)
				return rc;
			nw = shmt__w_make(SHMT_W_INFLIGHT(w), 0, tail + 1,
			    SHMT_W_NSEALED(w) + 1, 0, SHMT_W_TAG(w));
		} else if (rc == 0) {
			break;
		}
		if (bk_commit_release(c, wp, &w, nw))
			n++;
	}
	if (due < *next)
		*next = due;
	return n;
}

/* ---- Exact mode ---------------------------------------------------------- */

/* One use of an exact limiter.  Returns 1 with the grant number in *SEQ,
 * 0 denied, or an error. */
static int
ex_take(shmt_t *h, const struct shmt_lview *v, uint64_t *seq)
{
	int64_t *np = (int64_t *)&v->lim->lm_w.w[0];
	int64_t L = (int64_t)v->limit;
	unsigned lost = 0;

	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		int64_t n = __atomic_load_n(np, __ATOMIC_ACQUIRE), m;
		struct shmt_log_slot *slot;
		uint64_t s[2], d[2], now;

		/* 2^63 grants take centuries: a count that high is damage. */
		if (n < 0 || n == INT64_MAX)
			return SHMT_ECORRUPT;
		m = n + 1;
		slot = &v->log[(uint64_t)n % (uint64_t)L];
		shmt__load128(slot, s);
		if ((int64_t)s[0] == n) {
			/* Grant n is recorded; help move the hint on. */
			__atomic_compare_exchange_n(np, &n, m, 0,
			    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
			continue;
		}
		if ((int64_t)s[0] != n - L) {
			if ((int64_t)s[0] > n)
				continue;       /* our hint was stale */
			return SHMT_ECORRUPT;
		}
		now = shmt__now(h);
		if ((int64_t)s[0] >= 0 && sat_add(s[1], v->window) > now)
			return 0;
		d[0] = (uint64_t)n;
		d[1] = now;
		if (!shmt__cas128(slot, s, d)) {
			cas_backoff(&lost);
			continue;
		}
		/* Our grant is number n: the one the slot CAS recorded.  The
		 * hint CAS below may fail (a helper moved it on first) and
		 * then overwrites its expected value with the hint's current
		 * value, so it gets a copy and n stays ours. */
		*seq = (uint64_t)n;
		__atomic_compare_exchange_n(np, &(int64_t){ n }, m, 0,
		    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		return 1;
	}
	return SHMT_EBUSYLOOP;
}

/* Grants in flight in an exact limiter at NOW: records younger than C. */
static uint64_t
ex_inflight(const struct shmt_lview *v, uint64_t now)
{
	uint64_t n = 0, s[2];

	for (uint64_t i = 0; i < v->limit; i++) {
		shmt__load128(&v->log[i], s);
		if ((int64_t)s[0] >= 0 && sat_add(s[1], v->window) > now)
			n++;
	}
	return n;
}

/* ---- Counting denials ---------------------------------------------------- */

static void
count_denial(struct shmt_lim *lim, int why)
{
	uint64_t *ctr;

	if (lim->lm_flags & SHMT_LIMF_SHADOW)
		why = WHY_SHADOW;
	switch (why) {
	case WHY_SLACK:
		ctr = &lim->lm_denied_slack;
		break;
	case WHY_RING_FULL:
		ctr = &lim->lm_denied_ring_full;
		break;
	case WHY_TABLE_FULL:
		ctr = &lim->lm_denied_table_full;
		break;
	case WHY_SHADOW:
		ctr = &lim->lm_would_deny;
		break;
	default:
		ctr = &lim->lm_denied_exhausted;
		break;
	}
	__atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
}

/* ---- Public: using limiters ---------------------------------------------- */

/* What a call returns for decision RC: in shadow mode a refusal is granted
 * all the same (nothing was recorded; count_denial counted it as such). */
static inline int
enforce(const struct shmt_lview *v, int rc)
{
	return rc == 0 && (v->flags & SHMT_LIMF_SHADOW) ? 1 : rc;
}

static int gcra_acquire(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out);
static int gcra_ce_take(shmt_t *h, const struct shmt_lview *v,
    struct shmt_client *e, uint32_t expect, uint64_t cost, uint64_t *nowp,
    uint64_t *tatp);

static inline __attribute__((always_inline)) int
take_shared_raw(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	struct bk_ctx c;
	uint32_t tag = 0;
	int why = WHY_NONE, rc;

	if (__builtin_expect(v->flags & SHMT_LIMF_GLOBAL, 0))
		return shmt__global_take(h, &v->lim->lm_g, v->limit, v->window,
		    v->slack, 1, NULL);
	if (v->mode != SHMT_MODE_BUCKETS) {
		uint64_t seq = 0;

		if (v->mode == SHMT_MODE_GCRA)
			return gcra_acquire(h, v, 1, NULL);

		rc = ex_take(h, v, &seq);
		if (rc == 1) {
			__atomic_fetch_add(&v->lim->lm_exact_grants, 1,
			    __ATOMIC_RELAXED);
			*cursor = v->nkeys != 0 ? seq % v->nkeys : 0;
		} else if (rc == 0) {
			count_denial(v->lim, WHY_EXHAUSTED);
		}
		return rc;
	}
	for (int tries = 0;; tries++) {
		bk_ctx_init(&c, v, v->ring);
		c.torn_ok = 1;
		rc = bk_take(h, &c, &v->lim->lm_w, &tag, &why);
		if (__builtin_expect(rc != -EAGAIN, 1))
			break;
		/* The parameters changed since this view was built. */
		if (tries == 64)
			return SHMT_EBUSYLOOP;
		if ((rc = view_renew(h, &v)) != 0)
			return rc;
	}
	if (rc == 1)
		*cursor = tag;
	else if (rc == 0)
		count_denial(v->lim, why);
	return rc;
}

/* take_shared_raw, with a refusal of a shadow limiter granted (inlined, so
 * that a grant pays nothing for it). */
static int
take_shared(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	int rc = take_shared_raw(h, v, cursor);

	if (__builtin_expect(rc == 0, 0))
		rc = enforce(v, 0);
	return rc;
}

SHMT_EXPORT int
shmt_try_use_key(shmt_t *h, const char *name)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t cursor;
	int rc;

	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	if (v->flags & SHMT_LIMF_PER_CLIENT)
		return -EPERM;
	return take_shared(h, v, &cursor);
}

SHMT_EXPORT int
shmt_next_key(shmt_t *h, const char *name, char *buf, size_t cap)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t cursor = 0;
	const char *key;
	size_t len;
	int rc;

	if (buf == NULL && cap != 0)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	if (v->flags & SHMT_LIMF_PER_CLIENT)
		return -EPERM;
	if (!(v->flags & SHMT_LIMF_KEYS))
		return -ENOKEY;
	if (cap < (size_t)v->keymax + 1)
		return -ERANGE;
	if ((rc = take_shared(h, v, &cursor)) != 1)
		return rc;
	if (cursor >= v->nkeys)
		return SHMT_ECORRUPT;
	/* Copy first, then measure the copy: a name in a damaged segment
	 * may change under the reader, and the length returned must be that
	 * of the bytes returned. */
	key = v->keys + cursor * v->keystride;
	memcpy(buf, key, v->keymax);
	buf[v->keymax] = '\0';
	len = strlen(buf);
	return len == 0 ? SHMT_ECORRUPT : (int)len;
}

/* ---- Per-client entries --------------------------------------------------- */

static struct shmt_client *
ce_at(const struct shmt_lview *v, uint32_t i)
{
	return (struct shmt_client *)(v->clients + (uint64_t)i * v->entsize);
}

static struct shmt_ring_slot *
ce_ring(struct shmt_client *e)
{
	return (struct shmt_ring_slot *)(e + 1);
}

static int
ce_hash_match(const uint64_t hw[2], const uint64_t hash[2])
{
	return hw[0] == hash[0] && (hw[1] & ~0xffffULL) == hash[1];
}

/* Fresh word of a client entry in STATE with EPOCH, keeping TAIL so that
 * the serials of its ring only grow. */
static struct shmt_w
ce_word(uint32_t tail, uint32_t state, uint32_t epoch)
{
	return shmt__w_make(0, 0, tail == 0 ? 1 : tail, 0, 0,
	    CE_TAG(state, epoch));
}

static int
ce_idle(struct shmt_w w)
{
	return SHMT_W_INFLIGHT(w) == 0 && SHMT_W_NSEALED(w) == 0 &&
	    !SHMT_W_ACTIVE(w);
}

/*
 * Look HASH up along its probe path without a lock.  Returns the index of
 * the entry that holds it (reviving it if it was free) with *LIVE set when
 * its word is LIVE with the hash's epoch; -ENOENT when the path ends (a
 * never-used entry, or the whole table) without it; 1 << 30 when the entry
 * is mid-claim or inconsistent (the caller takes the lock).
 */
#define CE_SLOWPATH (1 << 30)

/* A client lives within CE_PROBE entries of its home, so a lookup or a
 * claim never scans more than that, however full the table: past it the
 * table counts as full for that client (throttled, "table full"), which
 * costs a denial instead of a scan of the whole table on every call. */
#define CE_PROBE 64U

static uint32_t
ce_probe(const struct shmt_lview *v)
{
	return v->capacity < CE_PROBE ? v->capacity : CE_PROBE;
}

static int
ce_lookup(const struct shmt_lview *v, const uint64_t hash[2], uint32_t *tagp)
{
	uint32_t cap = v->capacity, home = shmt__client_home(hash, cap);

	for (uint32_t k = 0; k < ce_probe(v); k++) {
		uint32_t i = (home + k) % cap;
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2];
		struct shmt_w w;
		uint32_t ep;

		shmt__load128(e->ce_hash, hw);
		if (hw[0] == 0 && hw[1] == 0)
			return -ENOENT;
		if (!ce_hash_match(hw, hash))
			continue;
		ep = (uint32_t)(hw[1] & CE_EPOCH_MASK);
		shmt__load128(&e->ce_w, w.w);
		if ((SHMT_W_TAG(w) & CE_EPOCH_MASK) != ep)
			return CE_SLOWPATH;
		*tagp = CE_TAG(CE_LIVE, ep);
		switch (SHMT_W_TAG(w) >> 14) {
		case CE_LIVE:
			return (int)i;
		case CE_FREE: {
			struct shmt_w nw = ce_word(SHMT_W_TAIL(w), CE_LIVE, ep);

			if (!ce_idle(w))
				return SHMT_ECORRUPT;
			/* Revive it; if the CAS fails someone else changed
			 * it, and the tag check of the grant decides. */
			shmt__cas128(&e->ce_w, w.w, nw.w);
			return (int)i;
		}
		default:
			return CE_SLOWPATH;
		}
	}
	return -ENOENT;
}

/* Release due buckets of entry E at NOW and mark it free when idle.  Called
 * with the client lock held.  Returns 1 when E is free afterwards. */
static int
ce_try_reclaim(shmt_t *h, const struct shmt_lview *v, struct shmt_client *e,
    uint64_t now)
{
	struct bk_ctx c;
	struct shmt_w w, nw;
	uint64_t next = UINT64_MAX;
	uint32_t tag;

	shmt__load128(&e->ce_w, w.w);
	tag = SHMT_W_TAG(w);
	if (tag >> 14 == CE_FREE || tag >> 14 == CE_NEVER)
		return 1;
	if (tag >> 14 != CE_LIVE)
		return 0;
	if (v->mode == SHMT_MODE_GCRA)
		return gcra_ce_reclaim(e, now);
	bk_ctx_init(&c, v, ce_ring(e));
	c.ntags = 0;
	if (bk_housekeep(h, &c, &e->ce_w, now, &next) < 0)
		return 0;
	shmt__load128(&e->ce_w, w.w);
	if (SHMT_W_TAG(w) >> 14 != CE_LIVE || !ce_idle(w))
		return 0;
	nw = w;
	nw.w[1] = (nw.w[1] & ~0xffffULL) |
	    CE_TAG(CE_FREE, SHMT_W_TAG(w) & CE_EPOCH_MASK);
	return shmt__cas128(&e->ce_w, w.w, nw.w);
}

/* Repair after a claimer died holding the client lock: an entry left
 * CLAIMING becomes free, with its hash word's epoch made to match. */
static void
ce_repair(const struct shmt_lview *v)
{
	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2];
		struct shmt_w w, nw;
		uint32_t ep;

		shmt__load128(&e->ce_w, w.w);
		if (SHMT_W_TAG(w) >> 14 != CE_CLAIMING)
			continue;
		ep = SHMT_W_TAG(w) & CE_EPOCH_MASK;
		shmt__load128(e->ce_hash, hw);
		if ((hw[1] & CE_EPOCH_MASK) != ep) {
			/* The new hash never landed: a tombstone that matches
			 * no client (no real hash has hw[0] == 0). */
			hw[0] = 0;
			hw[1] = ep;
			shmt__store128(e->ce_hash, hw);
		}
		nw = ce_word(SHMT_W_TAIL(w), CE_FREE, ep);
		shmt__cas128(&e->ce_w, w.w, nw.w);
	}
}

/* Claim an entry for HASH under the client lock.  Returns its index, or
 * -ENOSPC when every entry on the path is live and busy. */
static int
ce_claim(shmt_t *h, const struct shmt_lview *v, const uint64_t hash[2],
    const void *id, size_t idlen, uint32_t *tagp)
{
	uint32_t cap = v->capacity, home = shmt__client_home(hash, cap);
	uint64_t now = shmt__now(h), hw[2];
	struct shmt_client *e = NULL;
	struct shmt_w w, nw;
	uint32_t i = 0, ep;
	int rc;

	/* Another claimer may have added it while we waited for the lock. */
	rc = ce_lookup(v, hash, tagp);
	if (rc >= 0 && rc != CE_SLOWPATH)
		return rc;
	for (uint32_t k = 0; k < ce_probe(v); k++) {
		i = (home + k) % cap;
		if (ce_try_reclaim(h, v, ce_at(v, i), now)) {
			e = ce_at(v, i);
			break;
		}
	}
	if (e == NULL)
		return -ENOSPC;
	shmt__load128(&e->ce_w, w.w);
	ep = ((SHMT_W_TAG(w) & CE_EPOCH_MASK) % CE_EPOCH_MASK) + 1;
	nw = ce_word(SHMT_W_TAIL(w), CE_CLAIMING, ep);
	if (!shmt__cas128(&e->ce_w, w.w, nw.w))
		return -EAGAIN;       /* revived under us: look again */
	hw[0] = hash[0];
	hw[1] = hash[1] | ep;
	shmt__store128(e->ce_hash, hw);
	e->ce_idlen = (uint32_t)idlen;
	memcpy(e->ce_id, id, idlen < sizeof(e->ce_id) ? idlen : sizeof(e->ce_id));
	w = nw;
	nw = ce_word(SHMT_W_TAIL(w), CE_LIVE, ep);
	if (!shmt__cas128(&e->ce_w, w.w, nw.w))
		return SHMT_ECORRUPT;
	*tagp = CE_TAG(CE_LIVE, ep);
	return (int)i;
}

static int
ce_find_or_claim(shmt_t *h, const struct shmt_lview *v, const uint64_t hash[2],
    const void *id, size_t idlen, uint32_t *tagp)
{
	int rc = ce_lookup(v, hash, tagp);

	if (rc >= 0 && rc != CE_SLOWPATH)
		return rc;
	if (rc < 0 && rc != -ENOENT)
		return rc;
	for (int tries = 0; tries < 8; tries++) {
		int lk = shmt__lock(h, &v->lim->lm_client_lock);

		if (lk < 0)
			return lk;
		if (lk == 1)
			ce_repair(v);
		rc = ce_claim(h, v, hash, id, idlen, tagp);
		shmt__unlock(&v->lim->lm_client_lock);
		if (rc != -EAGAIN)
			return rc;
	}
	return SHMT_EBUSYLOOP;
}

SHMT_EXPORT int
shmt_try_use(shmt_t *h, const char *name, const void *client, size_t len)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	struct shmt_client *e;
	struct bk_ctx c;
	uint64_t hash[2];
	uint32_t tag, expect = 0;
	int why = WHY_NONE, rc;

	if (client == NULL || len == 0)
		return -EINVAL;
	if (len > SHMT_CLIENT_MAX)
		return -E2BIG;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	if (!(v->flags & SHMT_LIMF_PER_CLIENT))
		return -EPERM;
	shmt__client_hash(h, client, len, hash);
	if (h->an != NULL)
		shmt__an_feed(h, hash[0] ^ hash[1], client, len,
		    SHMT_HOT_CLIENT, shmt__now(h));
	for (int tries = 0; tries < 64; tries++) {
		rc = ce_find_or_claim(h, v, hash, client, len, &expect);
		if (rc == -ENOSPC) {
			count_denial(v->lim, WHY_TABLE_FULL);
			return enforce(v, 0);
		}
		if (rc < 0)
			return rc;
		e = ce_at(v, (uint32_t)rc);
		bk_ctx_init(&c, v, ce_ring(e));
		c.ntags = 0;
		c.check_tag = 1;
		c.tag_expect = expect;
		rc = v->mode == SHMT_MODE_GCRA ?
		    gcra_ce_take(h, v, e, expect, 1, NULL, NULL) :
		    bk_take(h, &c, &e->ce_w, &tag, &why);
		if (rc == 1) {
			__atomic_store_n(&e->ce_last_ns, shmt__now(h),
			    __ATOMIC_RELAXED);
			return 1;
		}
		if (rc == 0) {
			count_denial(v->lim, why);
			return enforce(v, 0);
		}
		/* -EAGAIN: the entry was reclaimed or changed hands between
		 * the lookup and the CAS; look it up again. */
		if (rc != -EAGAIN)
			return rc;
	}
	return SHMT_EBUSYLOOP;
}

/* ---- Defining limiters ------------------------------------------------------ */

/* Rows left BUILDING by a definer that died holding the table lock go back
 * to FREE; the arena space they took is not reused (it is bounded by the
 * arena, and reusing it would need the dead definer's intent). */
static void
rows_repair(shmt_t *h)
{
	uint32_t n;
	struct shmt_lim *lim = rows(h, &n);

	for (uint32_t r = 0; r < n; r++)
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) ==
		    SHMT_LIM_BUILDING)
			__atomic_store_n(&lim[r].lm_state, SHMT_LIM_FREE,
			    __ATOMIC_RELEASE);
}

/* 1 when READY row LIM was defined with exactly L (normalised in G). */
static int
same_params(const shmt_t *h, uint32_t r, struct shmt_lim *lim,
    const shmt_limit_t *l, const struct lim_geom *g)
{
	struct shmt_lview v;

	if (view_fill(h, r, lim, &v) != 0)
		return 0;
	if (v.mode != (uint32_t)l->mode || v.limit != g->limit ||
	    v.window != l->window_ns ||
	    (l->mode == SHMT_MODE_BUCKETS &&
	    (v.slack != l->slack_ns || v.slack_uses != l->slack_uses)) ||
	    v.nkeys != l->nkeys || v.uses_per_key != l->uses_per_key ||
	    ((v.flags & SHMT_LIMF_PER_CLIENT) != 0) != (l->per_client != 0) ||
	    v.burst != l->burst ||
	    ((v.flags & SHMT_LIMF_SHADOW) != 0) != (l->shadow != 0) ||
	    ((v.flags & SHMT_LIMF_GLOBAL) != 0) != (l->global != 0) ||
	    (l->per_client && v.capacity != l->client_capacity))
		return 0;
	for (uint32_t i = 0; i < l->nkeys; i++)
		if (strncmp(v.keys + (uint64_t)i * v.keystride, l->keys[i],
		    v.keystride) != 0)
			return 0;
	return 1;
}

/* Lay out storage for the new row in the arena and initialise it. */
static int
row_build(shmt_t *h, struct shmt_lim *lim, const char *name, size_t len,
    const shmt_limit_t *l, const struct lim_geom *g)
{
	struct shmt_hdr *hdr = h->hdr;
	uint64_t size = h->reg[SHMT_R_ARENA].rg_size;
	uint64_t used = __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	uint64_t ring_off, keys_off, cl_off, end;
	char *arena = shmt__region(h, SHMT_R_ARENA);

	if (used > size)
		return SHMT_ECORRUPT;
	ring_off = shmt__align_up(used, SHMT_LINE);
	keys_off = shmt__align_up(ring_off + g->ring_bytes, 16);
	cl_off = shmt__align_up(keys_off + g->keys_bytes, SHMT_LINE);
	end = cl_off + g->clients_bytes;
	if (end > size || end < used)
		return -ENOSPC;

	memset((char *)lim + 0, 0, sizeof(*lim));
	__atomic_store_n(&lim->lm_state, SHMT_LIM_BUILDING, __ATOMIC_RELEASE);
	memcpy(lim->lm_name, name, len);
	lim->lm_mode = (uint32_t)l->mode;
	lim->lm_limit = g->limit;
	lim->lm_window = l->window_ns;
	if (l->mode == SHMT_MODE_BUCKETS) {
		lim->lm_slack = l->slack_ns;
		lim->lm_slack_uses = l->slack_uses;
	}
	lim->lm_nbuckets = g->nb;
	lim->lm_burst = l->burst;
	lim->lm_flags = (l->shadow ? SHMT_LIMF_SHADOW : 0) |
	    (l->per_client ? SHMT_LIMF_PER_CLIENT : 0) |
	    (l->nkeys ? SHMT_LIMF_KEYS : 0) |
	    (l->global ? SHMT_LIMF_GLOBAL : 0);
	lim->lm_nkeys = l->nkeys;
	lim->lm_uses_per_key = l->uses_per_key;
	lim->lm_keystride = g->keystride;
	lim->lm_keymax = g->keymax;
	lim->lm_capacity = l->per_client ? l->client_capacity : 0;
	lim->lm_entsize = g->entsize;
	lim->lm_ring_off = ring_off;
	lim->lm_keys_off = keys_off;
	lim->lm_clients_off = cl_off;
	lim->lm_storage = end - used;

	memset(arena + ring_off, 0, end - ring_off);
	if (l->mode == SHMT_MODE_EXACT) {
		struct shmt_log_slot *log = (void *)(arena + ring_off);

		/* Slot i holds the record of grant i - L: none yet. */
		for (uint64_t i = 0; i < g->limit; i++)
			log[i].ls_seq = (int64_t)i - (int64_t)g->limit;
		lim->lm_w.w[0] = 0;
	} else if (l->mode == SHMT_MODE_GCRA) {
		lim->lm_w.w[0] = 0;     /* no arrival yet */
	} else {
		lim->lm_w = shmt__w_make(0, 0, 1, 0, 0, 0);
	}
	for (uint32_t i = 0; i < l->nkeys; i++)
		memcpy(arena + keys_off + (uint64_t)i * g->keystride, l->keys[i],
		    strlen(l->keys[i]));
	if (l->per_client)
		shmt__lock_init(&lim->lm_client_lock);
	__atomic_store_n(&hdr->sh_arena_used, end, __ATOMIC_RELAXED);
	/* Everything above is visible before READY is. */
	__atomic_store_n(&lim->lm_state, SHMT_LIM_READY, __ATOMIC_RELEASE);
	__atomic_fetch_add(&hdr->sh_generation, 1, __ATOMIC_RELEASE);
	return 0;
}

static int
define_locked(shmt_t *h, const char *name, size_t len, const shmt_limit_t *l,
    const struct lim_geom *g)
{
	uint32_t n;
	struct shmt_lim *lim = rows(h, &n), *free_row = NULL;

	for (uint32_t r = 0; r < n; r++) {
		uint32_t st = __atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE);

		if (st == SHMT_LIM_FREE && free_row == NULL)
			free_row = &lim[r];
		if (st == SHMT_LIM_READY &&
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) == 0)
			return same_params(h, r, &lim[r], l, g) ? 0 : -EEXIST;
	}
	if (free_row == NULL)
		return -ENOSPC;
	return row_build(h, free_row, name, len, l, g);
}

SHMT_EXPORT int
shmt_limiter_define(shmt_t *h, const char *name, const shmt_limit_t *l)
{
	struct lim_geom g;
	size_t len;
	int rc, lk;

	if (h == NULL || l == NULL)
		return -EINVAL;
	if ((rc = name_check(name, &len)) != 0)
		return rc;
	if ((rc = limit_check(l, &g, NULL, 0)) != 0)
		return rc;
	lk = shmt__lock(h, &h->hdr->sh_table_lock);
	if (lk < 0)
		return lk;
	if (lk == 1)
		rows_repair(h);
	rc = define_locked(h, name, len, l, &g);
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

/* ---- Changing a limiter in place --------------------------------------------- */

#define REFUSE(rc, ...) do { \
		if (why != NULL && why_len > 0) \
			snprintf(why, why_len, __VA_ARGS__); \
		return (rc); \
	} while (0)

/* What may change in place on V (a fresh view of the row): limit, window,
 * slack_ns and slack_uses of a shared buckets limiter without keys, as long
 * as the ring holds the new parameters; nothing else. */
static int
update_check(const struct shmt_lview *v, const shmt_limit_t *l, char *why,
    size_t why_len)
{
	struct lim_geom g;
	shmt_limit_t want = *l;
	int rc;

	if (l->mode != (int)v->mode)
		REFUSE(-EOPNOTSUPP, "mode: cannot change in place (it is %s): "
		    "delete and define the limiter again",
		    v->mode == SHMT_MODE_EXACT ? "exact" :
		    v->mode == SHMT_MODE_GCRA ? "gcra" : "buckets");
	if (v->mode != SHMT_MODE_BUCKETS || !v->pgen_check)
		REFUSE(-EOPNOTSUPP, "%s: its parameters cannot change in "
		    "place yet (only a shared buckets limiter without keys "
		    "can): delete and define it again",
		    v->mode == SHMT_MODE_EXACT ? "exact mode" :
		    v->mode == SHMT_MODE_GCRA ? "rate mode" :
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
	if ((rc = limit_check(&want, &g, why, why_len)) != 0)
		return rc;
	if (g.nb > v->nb)
		REFUSE(-E2BIG, "the new parameters need %u buckets "
		    "(window_ns / slack_ns + limit / slack_uses, rounded up), "
		    "the limiter's ring has %u: raise slack_ns or slack_uses, "
		    "or delete and define the limiter again", g.nb, v->nb);
	return 0;
}

/*
 * The one step that changes the parameters (see "Changing parameters in
 * place" at the top of this file), under sh_table_lock.  V is a fresh view
 * of the row.
 */
static void fix_ring_times(const struct bk_ctx *bc, uint32_t first,
    uint32_t n, uint64_t now);

static int
update_locked(shmt_t *h, struct shmt_lim *lim, const struct shmt_lview *v,
    const shmt_limit_t *l)
{
	struct bk_ctx c;
	struct shmt_w w, nw;

	bk_ctx_init(&c, v, v->ring);
	shmt__load128(&lim->lm_w, w.w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint32_t tag = SHMT_W_TAG(w), gen = (tag + 1) & 0xffffU;
		uint32_t inflight = SHMT_W_INFLIGHT(w), tail = SHMT_W_TAIL(w);
		uint32_t nsealed = SHMT_W_NSEALED(w), hold_serial;
		uint64_t hold = v->window, cap;
		struct shmt_lparams *p;
		uint32_t ucap;
		int rc;

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
			if ((rc = slot_raise(slot_of(&c, tail), tail,
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

			if (wguess[gs].wp == &lim->lm_w) {
				wguess[gs].w[0] = nw.w[0];
				wguess[gs].w[1] = nw.w[1];
			}
			if (l->slack_ns < v->slack) {
				/* A shorter slack: no bucket may close later
				 * than now + the new slack (shmt_check's rule).
				 * The buckets are all sealed by the CAS above,
				 * so no use can be decided into them any more,
				 * and each use they hold was decided before
				 * now: an earlier close still follows every
				 * decision in its bucket. */
				c.slack = l->slack_ns;
				fix_ring_times(&c, SHMT_W_TAIL(nw) -
				    SHMT_W_NSEALED(nw), SHMT_W_NSEALED(nw),
				    shmt__now(h));
			}
			return 0;
		}
		shmt__load128(&lim->lm_w, w.w);
	}
	return SHMT_EBUSYLOOP;
}

SHMT_EXPORT int
shmt_limiter_update(shmt_t *h, const char *name, const shmt_limit_t *l,
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
	if ((rc = name_check(name, &len)) != 0)
		return rc;
	lk = shmt__lock(h, &h->hdr->sh_table_lock);
	if (lk < 0)
		return lk;
	if (lk == 1)
		rows_repair(h);
	lim = rows(h, &n);
	rc = -ENOENT;
	for (r = 0; r < n; r++)
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) ==
		    SHMT_LIM_READY &&
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) == 0)
			break;
	if (r < n && (rc = view_fill(h, r, &lim[r], &v)) == 0 &&
	    (rc = update_check(&v, l, why, why_len)) == 0) {
		rc = update_locked(h, &lim[r], &v, l);
		if (rc == 0)
			__atomic_fetch_add(&h->hdr->sh_generation, 1,
			    __ATOMIC_RELEASE);
	}
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

#undef REFUSE

/* ---- Deleting and resetting -------------------------------------------------- */

SHMT_EXPORT int
shmt_limiter_delete(shmt_t *h, const char *name)
{
	struct shmt_lim *lim;
	uint32_t n, r;
	size_t len;
	int rc, lk;

	if (h == NULL)
		return -EINVAL;
	if ((rc = name_check(name, &len)) != 0)
		return rc;
	lk = shmt__lock(h, &h->hdr->sh_table_lock);
	if (lk < 0)
		return lk;
	if (lk == 1)
		rows_repair(h);
	lim = rows(h, &n);
	rc = -ENOENT;
	for (r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY ||
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) != 0)
			continue;
		/* Never FREE: a process may still hold a view of the row,
		 * and must never find another limiter under it. */
		__atomic_store_n(&lim[r].lm_state, SHMT_LIM_DELETED,
		    __ATOMIC_RELEASE);
		__atomic_fetch_add(&h->hdr->sh_generation, 1, __ATOMIC_RELEASE);
		/* Sleepers in shmt_wait wake, see the row deleted and
		 * return -ENOENT. */
		wake_waiters(&lim[r].lm_wake);
		rc = 0;
		break;
	}
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

/* Give back every use in the ring word at WP: one CAS to an empty ring
 * (tail moves past an active bucket; the tag is kept).  Returns the uses
 * given back, or an error. */
static int64_t
bk_reset(struct shmt_w *wp, int is_client)
{
	struct shmt_w w, nw;

	shmt__load128(wp, w.w);
	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		uint32_t tag = SHMT_W_TAG(w);

		if (is_client && tag >> 14 != CE_LIVE)
			return 0;
		if (SHMT_W_INFLIGHT(w) == 0 && SHMT_W_NSEALED(w) == 0 &&
		    !SHMT_W_ACTIVE(w))
			return 0;
		/* Raises tail (past the active bucket) or, with none active,
		 * count - nsealed: the order "Torn reads" relies on. */
		nw = shmt__w_make(0, 0, SHMT_W_TAIL(w) + SHMT_W_ACTIVE(w), 0, 0,
		    tag);
		if (shmt__cas128(wp, w.w, nw.w))
			return SHMT_W_INFLIGHT(w);
	}
	return SHMT_EBUSYLOOP;
}

/* Rate mode: the arrival time at *TP goes back to none (0), keeping the
 * second word (a client entry's state) as it is. */
static int64_t
gcra_reset(struct shmt_w *wp, int is_client)
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

/* Exact mode: every record still in the window gets time 0, as if made
 * long ago (its number is kept: the grant protocol needs it). */
static int64_t
ex_reset(const struct shmt_lview *v, uint64_t now)
{
	int64_t n = 0;

	for (uint64_t i = 0; i < v->limit; i++) {
		uint64_t s[2], d[2];
		unsigned k;

		shmt__load128(&v->log[i], s);
		for (k = 0; k < SHMT_RETRY_MAX; k++) {
			if ((int64_t)s[0] < 0 || s[1] == 0)
				break;
			d[0] = s[0];
			d[1] = 0;
			if (shmt__cas128(&v->log[i], s, d)) {
				n += sat_add(s[1], v->window) > now;
				break;
			}
		}
		if (k == SHMT_RETRY_MAX)
			return SHMT_EBUSYLOOP;
	}
	return n;
}

static int64_t
ce_reset(const struct shmt_lview *v, struct shmt_client *e)
{
	return v->mode == SHMT_MODE_GCRA ? gcra_reset(&e->ce_w, 1) :
	    bk_reset(&e->ce_w, 1);
}

SHMT_EXPORT int
shmt_limiter_reset(shmt_t *h, const char *name, const void *client,
    size_t client_len)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int64_t n = 0, k;
	int rc;

	if ((client == NULL) != (client_len == 0))
		return -EINVAL;
	if (client_len > SHMT_CLIENT_MAX)
		return -E2BIG;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	if (client != NULL && !(v->flags & SHMT_LIMF_PER_CLIENT))
		return -EPERM;
	if (v->flags & SHMT_LIMF_PER_CLIENT) {
		uint64_t hash[2], hw[2];
		uint32_t home = 0, probe = v->capacity;

		if (client != NULL) {
			shmt__client_hash(h, client, client_len, hash);
			home = shmt__client_home(hash, v->capacity);
			probe = ce_probe(v);
		}
		for (uint32_t j = 0; j < probe; j++) {
			struct shmt_client *e = ce_at(v,
			    (home + j) % v->capacity);

			if (client != NULL) {
				shmt__load128(e->ce_hash, hw);
				if (hw[0] == 0 && hw[1] == 0)
					break;
				if (!ce_hash_match(hw, hash))
					continue;
			}
			if ((k = ce_reset(v, e)) < 0)
				return (int)k;
			n += k;
		}
	} else if (v->mode == SHMT_MODE_GCRA) {
		n = gcra_reset(&v->lim->lm_w, 0);
	} else if (v->mode == SHMT_MODE_EXACT) {
		n = ex_reset(v, shmt__now(h));
	} else {
		n = bk_reset(&v->lim->lm_w, 0);
	}
	if (n < 0)
		return (int)n;
	if (n > 0) {
		__atomic_fetch_add(&v->lim->lm_reset_uses, (uint64_t)n,
		    __ATOMIC_RELAXED);
		if (v->mode == SHMT_MODE_BUCKETS)
			__atomic_fetch_add(&v->lim->lm_released_uses,
			    (uint64_t)n, __ATOMIC_RELAXED);
		wake_waiters(&v->lim->lm_wake);
	}
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* ---- Statistics ------------------------------------------------------------- */

static void
stat_fill(shmt_t *h, const struct shmt_lview *v, shmt_limiter_stat_t *o)
{
	struct shmt_lim *lim = v->lim;
	uint64_t inflight = 0;
	struct shmt_w w;

	memset(o, 0, sizeof(*o));
	memcpy(o->name, v->name, sizeof(o->name));
	o->limit = v->limit;
	o->window_ns = v->window;
	o->slack_ns = v->slack;
	o->slack_uses = v->slack_uses;
	o->mode = (int)v->mode;
	o->nbuckets = v->nb;
	o->nkeys = v->nkeys;
	o->uses_per_key = v->uses_per_key;
	o->per_client = (v->flags & SHMT_LIMF_PER_CLIENT) != 0;
	o->client_capacity = v->capacity;
	if (v->mode == SHMT_MODE_EXACT) {
		inflight = ex_inflight(v, shmt__now(h));
		o->grants = (uint64_t)__atomic_load_n(
		    (int64_t *)&lim->lm_w.w[0], __ATOMIC_RELAXED);
	} else if (!o->per_client) {
		shmt__load128(&lim->lm_w, w.w);
		inflight = SHMT_W_INFLIGHT(w);
		o->buckets_in_use = SHMT_W_NSEALED(w) + SHMT_W_ACTIVE(w);
	} else {
		for (uint32_t i = 0; i < v->capacity; i++) {
			shmt__load128(&ce_at(v, i)->ce_w, w.w);
			if (SHMT_W_TAG(w) >> 14 != CE_LIVE)
				continue;
			o->clients_in_use++;
			inflight += SHMT_W_INFLIGHT(w);
			o->buckets_in_use += SHMT_W_NSEALED(w) + SHMT_W_ACTIVE(w);
		}
	}
	o->in_flight = inflight;
	o->free = !o->per_client && inflight <= v->limit ? v->limit - inflight : 0;
	if (v->mode != SHMT_MODE_EXACT)
		o->grants = __atomic_load_n(&lim->lm_released_uses,
		    __ATOMIC_RELAXED) + inflight;
	o->denied_exhausted = __atomic_load_n(&lim->lm_denied_exhausted,
	    __ATOMIC_RELAXED);
	o->denied_slack = __atomic_load_n(&lim->lm_denied_slack, __ATOMIC_RELAXED);
	o->denied_table_full = __atomic_load_n(&lim->lm_denied_table_full,
	    __ATOMIC_RELAXED);
	o->denied_ring_full = __atomic_load_n(&lim->lm_denied_ring_full,
	    __ATOMIC_RELAXED);
	o->housekeeping_lag_ns = __atomic_load_n(&h->hdr->sh_lag_ns,
	    __ATOMIC_RELAXED);
	o->burst = v->burst;
	o->reset_uses = __atomic_load_n(&lim->lm_reset_uses, __ATOMIC_RELAXED);
	o->shadow = (v->flags & SHMT_LIMF_SHADOW) != 0;
	o->would_deny = __atomic_load_n(&lim->lm_would_deny, __ATOMIC_RELAXED);
	if (v->mode == SHMT_MODE_GCRA)
		gcra_stat(h, v, o);
}

/* *VP, renewed if its parameters changed since it was built (readers that
 * make no CAS, which would find out by failing it). */
static int
view_fresh(shmt_t *h, const struct shmt_lview **vp)
{
	const struct shmt_lview *v = *vp;

	if (v->pgen_check && (uint32_t)(__atomic_load_n(&v->lim->lm_w.w[1],
	    __ATOMIC_ACQUIRE) & 0xffffU) != v->pgen)
		return view_renew(h, vp);
	return 0;
}

SHMT_EXPORT int
shmt_limiter_stat(shmt_t *h, const char *name, shmt_limiter_stat_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	if (out == NULL)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = view_fresh(h, &v)) != 0)
		return rc;
	stat_fill(h, v, out);
	return 0;
}

SHMT_EXPORT int
shmt_limiter_list(shmt_t *h, shmt_limiter_stat_t *out, size_t cap)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	struct shmt_lim *lim;
	uint32_t n;
	size_t k = 0;

	if (h == NULL || (out == NULL && cap != 0))
		return -EINVAL;
	lim = rows(h, &n);
	for (uint32_t r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY || view_get(h, r, &scratch, &v) != 0 ||
		    view_fresh(h, &v) != 0)
			continue;
		if (k < cap)
			stat_fill(h, v, &out[k]);
		k++;
	}
	return k > INT32_MAX ? INT32_MAX : (int)k;
}

SHMT_EXPORT int
shmt_limiter_buckets(shmt_t *h, const char *name, shmt_bucket_info_t *out,
    size_t cap)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	struct shmt_w w;
	uint32_t tail, nsealed, total;
	uint64_t now;
	int rc;

	if (out == NULL && cap != 0)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = view_fresh(h, &v)) != 0)
		return rc;
	if (v->mode != SHMT_MODE_BUCKETS || (v->flags & SHMT_LIMF_PER_CLIENT))
		return -EPERM;
	shmt__load128(&v->lim->lm_w, w.w);
	tail = SHMT_W_TAIL(w);
	nsealed = SHMT_W_NSEALED(w);
	total = nsealed + SHMT_W_ACTIVE(w);
	if (total > v->nb)
		return SHMT_ECORRUPT;
	now = shmt__now(h);
	for (uint32_t i = 0; i < total && i < cap; i++) {
		uint32_t serial = tail - nsealed + i;
		uint64_t s[2];

		shmt__load128(&v->ring[serial % v->nb], s);
		out[i].serial = serial;
		/* The last bucket's count lives in W, not in its slot, until it
		 * is sealed; it takes uses while it is neither full nor closed. */
		out[i].uses = serial == tail ? SHMT_W_COUNT(w) : SLOT_COUNT(s);
		out[i].active = serial == tail && out[i].uses < v->slack_uses &&
		    now < s[0];
		out[i].close_ns = s[0];
		out[i].release_ns = sat_add(s[0], v->hold_window > v->window &&
		    (int32_t)(serial - v->hold_serial) < 0 ? v->hold_window :
		    v->window);
		if (SLOT_SERIAL(s) != serial)
			return SHMT_ECORRUPT;
	}
	return (int)total;
}

/* ---- Housekeeping --------------------------------------------------------- */

static int
hk_clients(shmt_t *h, const struct shmt_lview *v, uint64_t now, uint64_t *next)
{
	int lk = shmt__lock(h, &v->lim->lm_client_lock), n = 0;

	if (lk < 0)
		return lk;
	if (lk == 1)
		ce_repair(v);
	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		struct shmt_w w;
		struct bk_ctx c;

		shmt__load128(&e->ce_w, w.w);
		if (SHMT_W_TAG(w) >> 14 != CE_LIVE)
			continue;
		bk_ctx_init(&c, v, ce_ring(e));
		c.ntags = 0;
		if (v->mode != SHMT_MODE_GCRA &&
		    bk_housekeep(h, &c, &e->ce_w, now, next) > 0)
			n++;
		if (ce_try_reclaim(h, v, e, now))
			n++;
	}
	shmt__unlock(&v->lim->lm_client_lock);
	return n;
}

int
shmt__limiters_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint32_t n;
	struct shmt_lim *lim = rows(h, &n);
	int actions = 0;

	for (uint32_t r = 0; r < n; r++) {
		struct bk_ctx c;
		int rc;

		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY || view_get(h, r, &scratch, &v) != 0)
			continue;
		if (v->mode == SHMT_MODE_EXACT || v->mode == SHMT_MODE_GCRA)
			continue;  /* its log or arrival time ages alone */
		if (v->flags & SHMT_LIMF_PER_CLIENT) {
			rc = hk_clients(h, v, now, next);
		} else {
			rc = -EAGAIN;
			/* -EAGAIN: the parameters changed meanwhile. */
			for (int tries = 0; rc == -EAGAIN && tries < 64;
			    tries++) {
				if ((rc = view_fresh(h, &v)) != 0)
					break;
				bk_ctx_init(&c, v, v->ring);
				rc = bk_housekeep(h, &c, &v->lim->lm_w, now,
				    next);
			}
			if (rc == -EAGAIN)
				rc = SHMT_EBUSYLOOP;
			if (rc == -ENOENT)
				continue;      /* deleted meanwhile */
		}
		if (rc < 0)
			return rc;
		actions += rc;
	}
	return actions;
}

/* ---- Rebasing stored times (snapshot restore) ------------------------------- */

static uint64_t
shift(uint64_t t, int64_t d)
{
	if (d < 0)
		return t < (uint64_t)-d ? 0 : t - (uint64_t)-d;
	return sat_add(t, (uint64_t)d);
}

static void
rebase_ring(struct shmt_ring_slot *ring, uint32_t nb, int64_t d)
{
	for (uint32_t i = 0; i < nb; i++)
		if (SLOT_SERIAL(ring[i].r) != 0)
			ring[i].r[0] = shift(ring[i].r[0], d);
}

int
shmt__rebase_times(shmt_t *h, int64_t d)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint32_t n;
	struct shmt_lim *lim = rows(h, &n);

	if (h == NULL)
		return -EINVAL;
	for (uint32_t r = 0; r < n; r++) {
		int rc;

		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY)
			continue;
		if ((rc = view_get(h, r, &scratch, &v)) != 0)
			return rc;
		if (v->mode == SHMT_MODE_GCRA) {
			if (v->lim->lm_w.w[0] != 0)
				v->lim->lm_w.w[0] = shift(v->lim->lm_w.w[0], d);
		} else if (v->mode == SHMT_MODE_EXACT) {
			for (uint64_t i = 0; i < v->limit; i++)
				if (v->log[i].ls_seq >= 0)
					v->log[i].ls_time =
					    shift(v->log[i].ls_time, d);
		} else if (v->flags & SHMT_LIMF_GLOBAL) {
			/* Leases of another boot's daemon and Redis. */
			shmt__global_forget(&v->lim->lm_g);
		} else if (v->flags & SHMT_LIMF_PER_CLIENT) {
			for (uint32_t i = 0; i < v->capacity; i++) {
				struct shmt_client *e = ce_at(v, i);

				rebase_ring(ce_ring(e), v->nb, d);
				if (v->mode == SHMT_MODE_GCRA &&
				    e->ce_w.w[0] != 0)
					e->ce_w.w[0] = shift(e->ce_w.w[0], d);
				if (e->ce_last_ns != 0)
					e->ce_last_ns = shift(e->ce_last_ns, d);
			}
		} else {
			rebase_ring(v->ring, v->nb, d);
		}
	}
	shmt__stores_rebase(h, d);
	return 0;
}

/* ---- Checking ------------------------------------------------------------------ */

/*
 * Times.  Every time a limiter stores is a clock value some caller read
 * before storing it, and the check reads its own clock after reading the
 * stored value, so on the one clock all processes share (see the header's
 * caveats) a legitimate time is never later than:
 *   - a bucket's close time: now + slack (a bucket opens at its opener's
 *     now and closes slack later; one sealed early because it filled up
 *     keeps that planned close time);
 *   - an exact log's grant time: now.
 * Anything later is damage: such a bucket holds its uses until its close
 * time + window, such a log record blocks its slot as long.  Close times
 * also follow serial order (each opener reads its clock after the word that
 * shows the bucket before it opened).
 */

/*
 * Repair the close times of the N buckets in use from serial FIRST: none
 * later than NOW + slack, none earlier than the bucket before it.  Both
 * only delay a release (a bucket's uses were all decided before the latest
 * legitimate close time), so the limit still holds.  Each slot changes by
 * a CAS on its whole record, which fails harmlessly when the slot was
 * reused meanwhile.
 */
static void
fix_ring_times(const struct bk_ctx *bc, uint32_t first, uint32_t n,
    uint64_t now)
{
	uint64_t cap = sat_add(now, bc->slack), prev = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct shmt_ring_slot *slot = slot_of(bc, first + i);
		uint64_t s[2], d[2];

		shmt__load128(slot, s);
		d[0] = s[0] > cap ? cap : s[0];
		if (d[0] < prev)
			d[0] = prev;
		d[1] = s[1];
		if (d[0] != s[0])
			shmt__cas128(slot, s, d);
		prev = d[0];
	}
}

/* Check a ring and its word: the word's fields, each sealed bucket's slot,
 * that the uses in flight are the sealed counts plus the active count, and
 * the close times (see above).  The word is read before and after; a change
 * means a concurrent call, so the check runs again (a few times at most). */
static void
chk_ring(shmt_t *h, struct shmt_chk *c, const char *who,
    const struct bk_ctx *bc, struct shmt_w *wp)
{
	for (int tries = 0; tries < 8; tries++) {
		struct shmt_w w, w2;
		uint64_t s[2], sum = 0, prev_close = 0, late = 0, now;
		uint32_t tail, nsealed, late_serial = 0, n;
		char bad[160] = "", order[160] = "";

		shmt__load128(wp, w.w);
		if (!w_valid(bc, w)) {
			shmt__chk(c, "%s: state word out of range (in flight %u, "
			    "count %u, sealed %u)", who, SHMT_W_INFLIGHT(w),
			    SHMT_W_COUNT(w), SHMT_W_NSEALED(w));
			return;
		}
		tail = SHMT_W_TAIL(w);
		nsealed = SHMT_W_NSEALED(w);
		n = nsealed + SHMT_W_ACTIVE(w);
		for (uint32_t i = 0; i < n && bad[0] == '\0'; i++) {
			uint32_t serial = tail - nsealed + i;

			shmt__load128(slot_of(bc, serial), s);
			if (serial == tail) {
				/* The active bucket. */
				if (SLOT_SERIAL(s) != tail)
					snprintf(bad, sizeof(bad), "active bucket "
					    "%u: slot holds serial %u", tail,
					    SLOT_SERIAL(s));
			} else {
				if (SLOT_SERIAL(s) != serial ||
				    SLOT_COUNT(s) > bc->uses_cap)
					snprintf(bad, sizeof(bad), "sealed bucket "
					    "%u: slot holds serial %u with %u "
					    "uses", serial, SLOT_SERIAL(s),
					    SLOT_COUNT(s));
				sum += SLOT_COUNT(s);
			}
			if (bad[0] != '\0')
				break;
			if (s[0] < prev_close && order[0] == '\0')
				snprintf(order, sizeof(order), "bucket %u closes "
				    "before bucket %u", serial, serial - 1);
			prev_close = s[0];
			if (s[0] > late) {
				late = s[0];
				late_serial = serial;
			}
		}
		if (bad[0] == '\0' && sum + SHMT_W_COUNT(w) != SHMT_W_INFLIGHT(w))
			snprintf(bad, sizeof(bad), "%u uses in flight but the "
			    "buckets hold %llu", SHMT_W_INFLIGHT(w),
			    (unsigned long long)(sum + SHMT_W_COUNT(w)));
		shmt__load128(wp, w2.w);
		if (w2.w[0] != w.w[0] || w2.w[1] != w.w[1])
			continue;
		/* After every stored time was read: see "Times" above. */
		now = shmt__now(h);
		if (bad[0] != '\0') {
			shmt__chk(c, "%s: %s", who, bad);
			return;
		}
		if (order[0] != '\0')
			shmt__chk(c, "%s: %s", who, order);
		if (late > sat_add(now, bc->slack))
			shmt__chk(c, "%s: bucket %u closes %llu ns after now + "
			    "slack (close time in the future)", who, late_serial,
			    (unsigned long long)(late - sat_add(now, bc->slack)));
		if (c->repair && (order[0] != '\0' ||
		    late > sat_add(now, bc->slack)))
			fix_ring_times(bc, tail - nsealed, n, now);
		return;
	}
}

/*
 * Repair an exact log: move the hint past every grant the log records
 * (a negative hint, or records ahead of it), then make each slot hold the
 * grant that hint implies, stamped no later than NOW: a slot rewritten (it
 * held another slot's grant, or one behind) is stamped NOW, so it takes a
 * use for a whole window, as if just granted; a time in the future becomes
 * NOW.  So the log never allows more than it did.  Slots and hint change
 * by CAS; a grant that races with the repair can only make a CAS fail.
 */
static void
fix_exact(const struct shmt_lview *v, int64_t n, uint64_t now)
{
	int64_t *np = (int64_t *)&v->lim->lm_w.w[0];
	int64_t L = (int64_t)v->limit, m = n < 0 ? 0 : n;

	for (uint64_t i = 0; i < v->limit; i++) {
		int64_t seq = __atomic_load_n(&v->log[i].ls_seq,
		    __ATOMIC_RELAXED);

		if (seq >= -L && (seq - (int64_t)i) % L == 0 && seq >= m &&
		    seq < INT64_MAX - 1)
			m = seq + 1;
	}
	for (uint64_t i = 0; i < v->limit; i++) {
		int64_t want = m - 1 - (((m - 1 - (int64_t)i) % L) + L) % L;
		uint64_t s[2], d[2];

		shmt__load128(&v->log[i], s);
		d[0] = (uint64_t)want;
		d[1] = (int64_t)s[0] != want ? (want >= 0 ? now : 0) :
		    s[1] > now ? now : s[1];
		if (d[0] != s[0] || d[1] != s[1])
			shmt__cas128(&v->log[i], s, d);
	}
	__atomic_compare_exchange_n(np, &n, m, 0, __ATOMIC_ACQ_REL,
	    __ATOMIC_RELAXED);
}

/*
 * An exact log (see ex_take).  With the grant hint n read unchanged before
 * and after the scan, slot i holds the record of the latest grant m < n
 * with m = i mod L (m < 0: none yet), or, for slot n mod L only, grant n
 * itself (recorded, the hint not moved on yet).  A record ahead of that
 * makes every try spin until SHMT_EBUSYLOOP, one behind makes it return
 * SHMT_ECORRUPT, and so does a negative hint.  Each kind of damage is
 * named once, with the first slot and how many slots show it.
 */
static void
chk_exact(shmt_t *h, struct shmt_chk *c, const struct shmt_lview *v)
{
	int64_t *np = (int64_t *)&v->lim->lm_w.w[0];
	int64_t L = (int64_t)v->limit;

	for (int tries = 0; tries < 8; tries++) {
		int64_t n = __atomic_load_n(np, __ATOMIC_ACQUIRE), n2;
		uint64_t cnt[4] = { 0, 0, 0, 0 }, first[4] = { 0, 0, 0, 0 };
		int64_t seen[4] = { 0, 0, 0, 0 };
		uint64_t late = 0, now;
		enum { K_MOD, K_AHEAD, K_BEHIND, K_FUTURE };

		if (n < 0) {
			shmt__chk(c, "limiter %s: exact log's grant hint %lld is "
			    "negative", v->name, (long long)n);
			if (c->repair)
				fix_exact(v, n, shmt__now(h));
			return;
		}
		for (uint64_t i = 0; i < v->limit; i++) {
			uint64_t s[2];
			int64_t seq, want;
			int k = -1;

			shmt__load128(&v->log[i], s);
			seq = (int64_t)s[0];
			/* The latest grant before n that used slot i. */
			want = n - 1 - (((n - 1 - (int64_t)i) % L) + L) % L;
			if (seq < -L || (seq - (int64_t)i) % L != 0)
				k = K_MOD;
			else if (seq > want && !(seq == n && want == n - L))
				k = K_AHEAD;
			else if (seq < want)
				k = K_BEHIND;
			else if (seq >= 0 && s[1] > late) {
				late = s[1];
				first[K_FUTURE] = i;
				seen[K_FUTURE] = seq;
			}
			if (k >= 0 && cnt[k]++ == 0) {
				first[k] = i;
				seen[k] = seq;
			}
		}
		n2 = __atomic_load_n(np, __ATOMIC_ACQUIRE);
		if (n2 != n)
			continue;       /* grants during the scan: again */
		now = shmt__now(h);
		if (cnt[K_MOD] != 0)
			shmt__chk(c, "limiter %s: log slot %llu holds grant %lld "
			    "of another slot (%llu such slots)", v->name,
			    (unsigned long long)first[K_MOD],
			    (long long)seen[K_MOD], (unsigned long long)cnt[K_MOD]);
		if (cnt[K_AHEAD] != 0)
			shmt__chk(c, "limiter %s: log slot %llu holds grant %lld, "
			    "ahead of the grant hint %lld (%llu such slots)",
			    v->name, (unsigned long long)first[K_AHEAD],
			    (long long)seen[K_AHEAD], (long long)n,
			    (unsigned long long)cnt[K_AHEAD]);
		if (cnt[K_BEHIND] != 0)
			shmt__chk(c, "limiter %s: log slot %llu holds grant %lld, "
			    "behind the grant hint %lld (%llu such slots)",
			    v->name, (unsigned long long)first[K_BEHIND],
			    (long long)seen[K_BEHIND], (long long)n,
			    (unsigned long long)cnt[K_BEHIND]);
		if (late > now)
			shmt__chk(c, "limiter %s: log slot %llu: grant %lld "
			    "stamped %llu ns after now (grant time in the "
			    "future)",
			    v->name, (unsigned long long)first[K_FUTURE],
			    (long long)seen[K_FUTURE],
			    (unsigned long long)(late - now));
		if (c->repair && (cnt[K_MOD] + cnt[K_AHEAD] + cnt[K_BEHIND] != 0 ||
		    late > now))
			fix_exact(v, n, now);
		return;
	}
}

static void
chk_clients(shmt_t *h, struct shmt_chk *c, const struct shmt_lview *v)
{
	char who[SHMT_LIMITER_NAME_MAX + 40];

	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2];
		struct shmt_w w;
		struct bk_ctx bc;
		uint32_t st, ep;

		shmt__load128(&e->ce_w, w.w);
		shmt__load128(e->ce_hash, hw);
		st = SHMT_W_TAG(w) >> 14;
		ep = SHMT_W_TAG(w) & CE_EPOCH_MASK;
		snprintf(who, sizeof(who), "limiter %s client entry %u", v->name, i);
		if (st == CE_NEVER) {
			if (w.w[0] != 0 || w.w[1] != 0 || hw[0] != 0 || hw[1] != 0)
				shmt__chk(c, "%s: never used, yet not empty", who);
			continue;
		}
		if (st == CE_CLAIMING)
			continue;       /* a claim in progress, or repaired later */
		if ((hw[1] & CE_EPOCH_MASK) != ep) {
			shmt__chk(c, "%s: hash epoch %u, word epoch %u", who,
			    (unsigned)(hw[1] & CE_EPOCH_MASK), ep);
			continue;
		}
		if (st == CE_FREE && !ce_idle(w)) {
			shmt__chk(c, "%s: free, yet holds uses", who);
			continue;
		}
		if (v->mode == SHMT_MODE_GCRA)
			continue;       /* any arrival time is a valid state */
		bk_ctx_init(&bc, v, ce_ring(e));
		bc.ntags = 0;
		chk_ring(h, c, who, &bc, &e->ce_w);
	}
}

void
shmt__limiters_check(shmt_t *h, struct shmt_chk *c)
{
	struct shmt_lview v;
	uint32_t n;
	struct shmt_lim *lim = rows(h, &n);

	for (uint32_t r = 0; r < n; r++) {
		uint32_t st = __atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE);
		char who[SHMT_LIMITER_NAME_MAX + 16];
		struct bk_ctx bc;
		int rc;

		if (st == SHMT_LIM_FREE || st == SHMT_LIM_BUILDING ||
		    st == SHMT_LIM_DELETED)
			continue;
		if (st != SHMT_LIM_READY) {
			shmt__chk(c, "limiter row %u: unknown state %u", r, st);
			continue;
		}
		if ((rc = view_fill(h, r, &lim[r], &v)) != 0) {
			shmt__chk(c, "limiter row %u: inconsistent parameters or "
			    "storage (%s)", r, shmt_strerror(rc));
			continue;
		}
		/* Storage is laid out ring, keys, clients: the clients end
		 * it, and it must lie below the arena's allocation mark. */
		if (lim[r].lm_clients_off +
		    (uint64_t)lim[r].lm_capacity * lim[r].lm_entsize >
		    __atomic_load_n(&h->hdr->sh_arena_used, __ATOMIC_RELAXED))
			shmt__chk(c, "limiter %s: storage beyond the arena's mark",
			    v.name);
		if (v.mode == SHMT_MODE_GCRA) {
			/* Any arrival time is a valid state. */
		} else if (v.mode == SHMT_MODE_EXACT) {
			chk_exact(h, c, &v);
		} else if (v.flags & SHMT_LIMF_PER_CLIENT) {
			chk_clients(h, c, &v);
		} else {
			snprintf(who, sizeof(who), "limiter %s", v.name);
			bk_ctx_init(&bc, &v, v.ring);
			chk_ring(h, c, who, &bc, &v.lim->lm_w);
		}
	}
}

/* Decisions, cost and peeking, and rate mode (same translation unit: see
 * there). */
#include "gcra.inc"
#include "decide.inc"
#include "wait.inc"
