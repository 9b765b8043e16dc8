/* SPDX-License-Identifier: MIT */
/*
 * The ring of buckets: the seed's limiter as a lock-free multi-process
 * protocol, with its bound and its proof (below), the grant's out-of-line
 * steps, housekeeping, resetting and checking a ring.  The grant's inline
 * steps are in ring.h.
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
 * Torn reads.  A 16-byte atomic load is a locked cmpxchg16b on x86-64 CPUs
 * without AVX, as dear as the CAS itself (with AVX it is one SSE load:
 * atomic128.h).  A shared limiter's W is therefore read as two 8-byte
 * loads, high half (tail, nsealed, active, tag) first, which costs as
 * little as the SSE load and the same on every CPU.  Every
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
 * Cost.  A grant of k <= B uses is the same one CAS with inflight and count
 * raised by k (decide.c): every argument above counts uses, not calls,
 * and holds unchanged; only the ring's bound assumes grants of one.
 */
#include "ring.h"

#include "clients.h"
#include "env.h"
#include "wait.h"

#include <stdio.h>

int
shmt__slot_raise(struct shmt_ring_slot *slot, uint32_t serial, uint32_t count)
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

void
shmt__bk_ctx_init(struct bk_ctx *c, const struct shmt_lview *v,
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
	c->hold_until = v->hold_until;
	/* A shared ring's tag is its parameter generation: a grant or a
	 * release on a view of another generation must not commit. */
	c->check_tag = ring == v->ring && v->pgen_check;
	c->tag_expect = v->pgen;
	c->ring = ring;
	c->released = &v->lim->lm_released_uses;
	c->torn_ok = 0;
	c->nb_magic = v->nb_magic;
}

int
shmt__bk_commit_release(const struct bk_ctx *c, struct shmt_w *wp,
    struct shmt_w *w, struct shmt_w nw)
{
	uint32_t returned = SHMT_W_INFLIGHT(*w) - SHMT_W_INFLIGHT(nw);

	if (!shmt__cas128(wp, w->w, nw.w))
		return 0;
	*w = nw;
	if (returned != 0) {
		__atomic_fetch_add(c->released, returned, __ATOMIC_RELAXED);
		/* The row's futex word, found from its counter. */
		shmt__wake_waiters((uint32_t *)(void *)((char *)c->released -
		    offsetof(struct shmt_lim, lm_released_uses) +
		    offsetof(struct shmt_lim, lm_wake)));
	}
	return 1;
}

int
shmt__bk_why(const struct bk_ctx *c, struct shmt_w w, uint64_t now)
{
	uint32_t serial = SHMT_W_TAIL(w) - SHMT_W_NSEALED(w);
	uint64_t s[2];

	shmt__load128(slot_of(c, serial), s);
	return bk_why_of(s, serial, c->slack, c->window, now);
}

/* The per-thread guesses of W (see ring.h). */
__thread struct shmt_wguess shmt__wguess[WGUESS]
    __attribute__((tls_model("local-dynamic")));

/*
 * Contention.  A CAS that loses to another writer has just pulled the line
 * away from the winner; trying again at once makes every call of both pay
 * a transfer, and the loser mostly loses again: between its read of W and
 * its CAS lies a clock read, and a winner that keeps the line wins every
 * race shorter than a transfer.  Two processes on one limiter then shared
 * about half of one process's throughput, and the loser's tail was long.
 *
 * So a shared limiter's word is handed over, in turns.  The loser writes
 * its token into the hand-off word beside W (on W's line: limiter.h) and
 * watches it; the winner, after its next successful CAS, finds the request
 * on the line it already holds, clears it and stays off the word for up to
 * SHMT_HANDOFF_NS; the loser, seeing its request taken, reads W and CASes
 * alone.  The turn ends when the former winner comes back, loses a CAS and
 * asks in its turn.  Each process then runs on its own line for a turn, and
 * per turn each pays one wait of a turn (its last call before it steps
 * aside) and one of a hand-over (its first call after): the rest of its
 * calls cost what they cost alone.
 *
 * Every wait is measured in nanoseconds on CLOCK_MONOTONIC (a pause
 * instruction costs from a few to about a hundred cycles, depending on the
 * CPU) and is bounded, so no call waits on another's progress:
 *  - the asker first watches W: it asks only once W changes (someone is
 *    granting; a CAS also fails when this thread's guess of W from an
 *    earlier call is stale, with nobody granting now), and it waits at most
 *    SHMT_HANDOFF_ASK_NS in all, and no longer once W has not changed for
 *    SHMT_HANDOFF_QUIET_NS (the winner is not calling: descheduled, busy
 *    with other work, or killed); it then withdraws its request and tries
 *    anyway;
 *  - the one stepping aside looks at W after 1 us, then at 2, 4, 8, ... us,
 *    and comes back as soon as W has not changed since the last look (the
 *    asker has done its calls, or was killed while asking: a request left
 *    by a dead process costs the next winner about a microsecond, once).
 * The hand-off word only changes how long a call waits: what a call decides
 * is still decided by the CAS on W alone (above), whatever the word holds,
 * and a kill -9 anywhere in these waits holds nothing.  Rate mode (its
 * arrival time; gcra.c) hands the word over the same way, and so does
 * exact mode, whose deciding CAS is on a log slot: its loser asks for and
 * watches W's first half, the hint of the next grant number, which each
 * grant moves on (exact.c).  Client
 * entries back off instead (shmt__cas_backoff): a random time, doubling
 * with each loss in a row, at most SHMT_BACKOFF_MAX_NS.
 */
#ifndef SHMT_BACKOFF_MIN_NS
#define SHMT_BACKOFF_MIN_NS 40U
#endif
#ifndef SHMT_BACKOFF_MAX_NS
#define SHMT_BACKOFF_MAX_NS 640U
#endif
#ifndef SHMT_HANDOFF_NS
#define SHMT_HANDOFF_NS 20000U
#endif
#ifndef SHMT_HANDOFF_ASK_NS
#define SHMT_HANDOFF_ASK_NS 4000U
#endif
#ifndef SHMT_HANDOFF_QUIET_NS
#define SHMT_HANDOFF_QUIET_NS 200U
#endif
#define HANDOFF_LOOK_NS 1000U

static __thread uint32_t backoff_rnd;
static __thread uint64_t handoff_me;
static __thread unsigned handoff_gen;

/* Wait NS nanoseconds (at most NS turns of the loop, whatever the clock). */
static void
spin_ns(uint64_t ns)
{
	uint64_t t0 = shmt__mono_ns();

	for (uint64_t i = 0; i < ns && shmt__mono_ns() - t0 < ns; i++)
		ck_pr_stall();
}

void
shmt__cas_backoff(unsigned *lost)
{
	uint32_t x = backoff_rnd, cap;

	if (x == 0)
		x = (uint32_t)(uintptr_t)&backoff_rnd | 1;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	backoff_rnd = x;
	cap = *lost < 16 ? SHMT_BACKOFF_MIN_NS << *lost : SHMT_BACKOFF_MAX_NS;
	if (cap > SHMT_BACKOFF_MAX_NS)
		cap = SHMT_BACKOFF_MAX_NS;
	(*lost)++;
	spin_ns(x % cap);
}

/* This thread's token in hand-off words: its process and thread ids, made
 * again in a forked child. */
static uint64_t
handoff_token(void)
{
	unsigned gen = __atomic_load_n(&shmt__fork_generation,
	    __ATOMIC_RELAXED);

	if (handoff_me == 0 || handoff_gen != gen) {
		handoff_me = (uint64_t)(uint32_t)shmt__env_pid() << 32 |
		    shmt__env_tid();
		handoff_gen = gen;
	}
	return handoff_me;
}

void
shmt__handoff_ask(uint64_t *ho, const struct shmt_w *wp)
{
	uint64_t me = 0, t0, quiet, now;
	uint64_t w0 = __atomic_load_n(&wp->w[0], __ATOMIC_RELAXED), w1;

	t0 = quiet = shmt__mono_ns();
	for (unsigned i = 0; i < SHMT_HANDOFF_ASK_NS; i++) {
		ck_pr_stall();
		if (me != 0 && __atomic_load_n(ho, __ATOMIC_RELAXED) != me)
			return;         /* taken (or another asker's now) */
		now = shmt__mono_ns();
		w1 = __atomic_load_n(&wp->w[0], __ATOMIC_RELAXED);
		if (w1 != w0) {
			/* Someone is granting: ask (once). */
			w0 = w1;
			quiet = now;
			if (me == 0) {
				me = handoff_token();
				__atomic_store_n(ho, me, __ATOMIC_RELAXED);
			}
		} else if (now - quiet >= SHMT_HANDOFF_QUIET_NS) {
			break;
		}
		if (now - t0 >= SHMT_HANDOFF_ASK_NS)
			break;
	}
	/* Not taken: withdraw it, unless another asker replaced it. */
	if (me != 0)
		__atomic_compare_exchange_n(ho, &me, 0, 0, __ATOMIC_RELAXED,
		    __ATOMIC_RELAXED);
}

void
shmt__handoff_yield(uint64_t *ho, const struct shmt_w *wp)
{
	uint64_t v = __atomic_load_n(ho, __ATOMIC_RELAXED), t0, now, w0, w1;
	uint64_t look = HANDOFF_LOOK_NS;

	if (v == 0 || !__atomic_compare_exchange_n(ho, &v, 0, 0,
	    __ATOMIC_RELAXED, __ATOMIC_RELAXED) || v == handoff_token())
		return;
	w0 = __atomic_load_n(&wp->w[0], __ATOMIC_RELAXED);
	t0 = shmt__mono_ns();
	for (unsigned i = 0; i < SHMT_HANDOFF_NS; i++) {
		ck_pr_stall();
		now = shmt__mono_ns();
		if (now - t0 >= SHMT_HANDOFF_NS)
			return;
		if (now - t0 < look)
			continue;
		w1 = __atomic_load_n(&wp->w[0], __ATOMIC_RELAXED);
		if (w1 == w0)
			return;         /* the asker is done, or gone */
		w0 = w1;
		look *= 2;
	}
}

/*
 * A denial at the limit, decided as the loop's first turn decides it (a
 * throttled caller's usual answer, without the loop's context and turns).
 * From W and NOW read after it, with V the view whose context the loop
 * would use (shmt__bk_ctx_init(V, RING)) and TORN_OK that context's (1 for
 * a shared limiter's word, which may be this thread's guess or read half
 * by half; 0 for a client entry's, read whole), the loop's first turn
 * passes its tag check and finds w_valid true when
 *   D1  TAG_OK: the tag is what the context expects (a shared limiter:
 *       its parameter generation, or a key-pool cursor below nkeys; a
 *       client entry: the caller's, with no bound from ntags, which is 0);
 *   D2  a bucket is active;
 *   D3  L <= inflight <= limit_cap, count <= uses_cap, count <= inflight;
 *   D4  nsealed < nb;
 * releases nothing when the oldest bucket in use (the oldest sealed one's
 * slot, with at most inflight uses, else the active one's) holds its
 * serial and is not due at NOW (D5: what bk_release_step checks, with the
 * same due time); then, at inflight + 1 > L (D3), confirms W by a full
 * load when TORN_OK (bk_confirm) and names the reason from the oldest
 * bucket's slot read afresh (shmt__bk_why).  This makes the same reads, in
 * the same order, and the same decision; it returns 0 then (*W is
 * current), 2 when the confirmation found another word (now in *W: the
 * loop goes on from it, with a clock read of its own, as after its own
 * failed confirmation; its budget of turns then starts afresh), and 1 when
 * one of D1-D5 does not hold (the loop decides from W and NOW, which this
 * changed nothing of).
 */
int
shmt__bk_deny(const struct shmt_lview *v, struct shmt_ring_slot *ring,
    int tag_ok, int torn_ok, struct shmt_w *wp, struct shmt_w *w,
    uint64_t now, int *why)
{
	uint32_t inflight = SHMT_W_INFLIGHT(*w), count = SHMT_W_COUNT(*w);
	uint32_t tail = SHMT_W_TAIL(*w), nsealed = SHMT_W_NSEALED(*w);
	uint32_t serial = tail - nsealed;
	struct shmt_ring_slot *slot;
	struct shmt_w cur;
	uint64_t s[2];

	if (!tag_ok || !SHMT_W_ACTIVE(*w) || inflight < v->limit ||
	    inflight > v->limit_cap || count > v->uses_cap || count > inflight ||
	    nsealed >= v->nb)
		return 1;
	slot = ring_slot(ring, v->nb_magic, v->nb, serial);
	if (torn_ok)
		shmt__load128_hilo(slot, s);
	else
		shmt__load128(slot, s);
	if (SLOT_SERIAL(s) != serial || (nsealed > 0 && SLOT_COUNT(s) > inflight) ||
	    bk_due_of(v->window, v->hold_window, v->hold_serial, v->hold_until,
	    serial, s[0]) <= now)
		return 1;
	if (torn_ok) {
		shmt__load128(wp, cur.w);
		if (cur.w[0] != w->w[0] || cur.w[1] != w->w[1]) {
			*w = cur;
			return 2;
		}
	}
	shmt__load128(slot, s);
	*why = bk_why_of(s, serial, v->slack, v->window, now);
	return 0;
}

int
shmt__bk_take_view_slow(shmt_t *h, const struct shmt_lview *v,
    uint64_t w0, uint64_t w1, int have_now, uint64_t now, uint32_t *tag,
    int *why, uint64_t *at)
{
	struct shmt_w *wp = &v->lim->lm_w, w = { { w0, w1 } };
	struct shmt_wguess *g = &shmt__wguess[wguess_slot(wp)];
	struct bk_ctx c;
	int rc = 1;

	if (have_now && (rc = shmt__bk_deny(v, v->ring, v->pgen_check ?
	    SHMT_W_TAG(w) == v->pgen : SHMT_W_TAG(w) < v->nkeys, 1, wp, &w,
	    now, why)) == 2)
		have_now = 0;
	if (rc == 0) {
		if (at != NULL)
			*at = now;
	} else {
		shmt__bk_ctx_init(&c, v, v->ring);
		c.torn_ok = 1;
		rc = bk_take_loop_at(h, &c, wp, &w, tag, why, 1, at,
		    have_now ? &now : NULL);
	}
	/* As bk_take_n keeps it: only a word known to be current. */
	g->wp = rc >= 0 ? wp : NULL;
	g->uid = h->uid;
	g->w[0] = w.w[0];
	g->w[1] = w.w[1];
	return rc;
}

int
shmt__bk_housekeep(shmt_t *h, const struct bk_ctx *c, struct shmt_w *wp,
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
			rc = shmt__slot_raise(slot_of(c, tail), tail,
			    SHMT_W_COUNT(w));
			if (rc != 0)
				return rc;
			nw = shmt__w_make(SHMT_W_INFLIGHT(w), 0, tail + 1,
			    SHMT_W_NSEALED(w) + 1, 0, SHMT_W_TAG(w));
		} else if (rc == 0) {
			break;
		}
		if (shmt__bk_commit_release(c, wp, &w, nw))
			n++;
	}
	if (due < *next)
		*next = due;
	return n;
}

int64_t
shmt__bk_reset(struct shmt_w *wp, int is_client)
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

uint64_t
shmt__fix_ring_times(const struct bk_ctx *bc, uint32_t first, uint32_t n,
    uint64_t now)
{
	uint64_t cap = sat_add(now, bc->slack), prev = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct shmt_ring_slot *slot = slot_of(bc, first + i);
		uint64_t s[2], d[2];

		shmt__load128(slot, s);
		if (SLOT_SERIAL(s) != first + i)
			continue;
		d[0] = s[0] > cap ? cap : s[0];
		if (d[0] < prev)
			d[0] = prev;
		d[1] = s[1];
		if (d[0] != s[0])
			shmt__cas128(slot, s, d);
		prev = d[0];
	}
	return prev;
}

void
shmt__chk_ring(shmt_t *h, struct shmt_chk *c, const char *who,
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
			shmt__fix_ring_times(bc, tail - nsealed, n, now);
		return;
	}
}
