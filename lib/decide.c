/* SPDX-License-Identifier: MIT */
/*
 * Decisions, cost and peeking: shmt_acquire, shmt_peek,
 * shmt_next_key_decide, shmt_acquire_all and shmt_refund, with the replay
 * of a ring and of a log that computes what a decision says.
 *
 * A decision says what a grant or a refusal means for the caller: how many
 * uses are left now, when a refused request would pass, when every use in
 * flight is back.  A decision reads the ring and the log exactly as the
 * grant path does, through the same private views (table.h) and the ring's
 * inline steps (ring.h).
 *
 * Cost.  A grant of k uses (bucket mode, 1 <= k <= B) is the same single
 * CAS on W as a grant of one: it adds k to inflight and to the active
 * bucket's count when count + k <= B and the bucket is still open, and
 * otherwise seals the active bucket as it stands and opens a new one that
 * holds k.  The safety argument at the top of ring.c is unchanged: it
 * counts uses, every use of a bucket is decided before its close, and the
 * CAS either records all k uses or none.  Key pools take cost 1 only (a
 * grant hands out one name), and so does exact mode (a grant is one CAS on
 * one log slot; k slots cannot be taken in one atomic step).
 *
 * What costs more than one changes is the ring's bound: a bucket may now be
 * sealed before it holds B uses (the next grant did not fit), so more
 * buckets can be in use than ceil(C/S) + ceil(L/B).  A grant that finds the
 * ring full is refused (counted as ring full): a false negative, never an
 * over-grant, and the decision's retry_after_ns names the release that
 * frees a slot.
 *
 * The decision is computed only when the caller asks for it (OUT not
 * NULL), after the grant's CAS, from the word that CAS installed (or, for a
 * refusal, the word confirmed current) and the decision's own clock value.
 * Single-threaded it is exact: the state then changes only by releases, at
 * known times, and the functions below replay the grant path's rules on a
 * copy (they never write).  With other callers at work it describes the
 * state as the call left it; a later call may find less.
 *
 * Peeking replays the same rules on a copy of the current word and ring at
 * the caller's clock value: it writes no byte of the segment (not even the
 * releases a grant would make, nor a client entry it would claim).
 */
#include "fork.h"
#include "decide.h"

#include "analyzer.h"
#include "clients.h"
#include "exact.h"
#include "gcra.h"
#include "grant.h"
#include "ring.h"
#include "util.h"

#include <errno.h>
#include <string.h>

/* ---- The ring, replayed --------------------------------------------------- */

/*
 * A ring as one word names it, with buckets released in order as a replayed
 * clock advances.  Buckets 0 .. n-1 are the sealed ones, oldest first, then
 * the active one; FIRST of them are released.
 */
struct bk_sim {
	const struct bk_ctx *c;
	struct shmt_w w;
	uint32_t n, first;
	uint64_t inflight;      /* after the released ones */
	uint64_t close_a;       /* the active bucket's close (when active) */
	uint64_t t;             /* the replayed time */
};

/* Bucket I of the ring named by S's word: its close time and count. */
static int
sim_bucket(const struct bk_sim *s, uint32_t i, uint64_t *close,
    uint32_t *count)
{
	const struct bk_ctx *c = s->c;
	uint32_t nsealed = SHMT_W_NSEALED(s->w);
	uint32_t serial = SHMT_W_TAIL(s->w) - nsealed + i;
	uint64_t sl[2];
	int rc;

	shmt__load128(slot_of(c, serial), sl);
	if ((rc = slot_is(sl, serial)) != SLOT_OK)
		return rc;
	*close = sl[0];
	*count = i < nsealed ? SLOT_COUNT(sl) : SHMT_W_COUNT(s->w);
	return 0;
}

/* When bucket I, closed at CLOSE, is due: after the window, or after the
 * longer one it is held by since a change of parameters (bk_due). */
static uint64_t
sim_due(const struct bk_sim *s, uint32_t i, uint64_t close)
{
	return bk_due(s->c, SHMT_W_TAIL(s->w) - SHMT_W_NSEALED(s->w) + i,
	    close);
}

/* Release, in order, every bucket due at T (T never goes back). */
static int
sim_release(struct bk_sim *s, uint64_t t)
{
	s->t = t;
	while (s->first < s->n) {
		uint64_t close;
		uint32_t count;
		int rc = sim_bucket(s, s->first, &close, &count);

		if (rc != 0)
			return rc;
		if (sim_due(s, s->first, close) > t)
			break;
		if (count > s->inflight)
			return SHMT_ECORRUPT;
		s->inflight -= count;
		s->first++;
	}
	if (s->first == s->n && s->inflight != 0)
		return SHMT_ECORRUPT;
	return 0;
}

static int
sim_init(struct bk_sim *s, const struct bk_ctx *c, struct shmt_w w,
    uint64_t now)
{
	uint64_t close;
	uint32_t count;
	int rc;

	if (!w_valid(c, w))
		return SHMT_ECORRUPT;
	s->c = c;
	s->w = w;
	s->n = SHMT_W_NSEALED(w) + SHMT_W_ACTIVE(w);
	s->first = 0;
	s->inflight = SHMT_W_INFLIGHT(w);
	s->close_a = 0;
	if (SHMT_W_ACTIVE(w)) {
		if ((rc = sim_bucket(s, s->n - 1, &close, &count)) != 0)
			return rc;
		s->close_a = close;
	}
	return sim_release(s, now);
}

/* Uses the active bucket still takes at the replayed time (0: none). */
static uint64_t
sim_takes(const struct bk_sim *s)
{
	const struct bk_ctx *c = s->c;

	/* A client's bucket filled under a higher limit of its own may
	 * count more than this view's B: it takes no more. */
	if (s->first == s->n || !SHMT_W_ACTIVE(s->w) || s->t >= s->close_a ||
	    SHMT_W_COUNT(s->w) >= c->slack_uses)
		return 0;
	return c->slack_uses - SHMT_W_COUNT(s->w);
}

/* Buckets that can still be opened: ring slots not in use. */
static uint64_t
sim_rooms(const struct bk_sim *s)
{
	return s->c->nb - (s->n - s->first);
}

/* Would a grant of K uses pass at the replayed time? */
static int
sim_can(const struct bk_sim *s, uint64_t k)
{
	if (s->inflight + k > s->c->limit)
		return 0;
	return sim_takes(s) >= k || sim_rooms(s) >= 1;
}

/* Uses of cost 1 granted one after another at the replayed time. */
static uint64_t
sim_remaining(const struct bk_sim *s)
{
	/* In flight may exceed a limit lowered in place. */
	uint64_t free = s->inflight >= s->c->limit ? 0 :
	    s->c->limit - s->inflight;
	uint64_t room = sim_takes(s) + sim_rooms(s) * s->c->slack_uses;

	return free < room ? free : room;
}

/* The time at which every use in flight is back (the replayed time when
 * none is): the release of the newest bucket that holds a use, which waits
 * for every older one. */
static int
sim_back(const struct bk_sim *s, uint64_t *at)
{
	const struct bk_ctx *c = s->c;
	uint32_t nsealed = SHMT_W_NSEALED(s->w);
	uint32_t serial = SHMT_W_TAIL(s->w) - nsealed + s->first;
	/* sim_bucket's reads, one slot after the other: consecutive serials
	 * are consecutive slots of the ring, around its end, but for the
	 * serial's own wrap from 2^32 - 1 to 0 (slot_of of each, as the
	 * writers place them). */
	struct shmt_ring_slot *slot = slot_of(c, serial), *end = c->ring + c->nb;
	uint64_t due = s->t, sl[2];
	int rc;

	for (uint32_t i = s->first; i < s->n; i++) {
		uint32_t count;

		shmt__load128(slot, sl);
		if ((rc = slot_is(sl, serial)) != SLOT_OK)
			return rc;
		count = i < nsealed ? SLOT_COUNT(sl) : SHMT_W_COUNT(s->w);
		if (count > 0 && bk_due(c, serial, sl[0]) > due)
			due = bk_due(c, serial, sl[0]);
		if (++serial == 0 || ++slot == end)
			slot = slot_of(c, serial);
	}
	*at = due;
	return 0;
}

/* The earliest time >= the replayed one at which a grant of K passes, with
 * nobody else calling: only releases make room, so it is the replayed time
 * or the release of some bucket.  Advances S to that time. */
static int
sim_when(struct bk_sim *s, uint64_t k, uint64_t *at)
{
	uint64_t close;
	uint32_t count;
	int rc;

	while (!sim_can(s, k)) {
		uint32_t first = s->first;

		if (first == s->n)
			return SHMT_ECORRUPT;   /* an empty ring takes any k <= B */
		if ((rc = sim_bucket(s, first, &close, &count)) != 0)
			return rc;
		/* Its due time as sim_release reckons it (a bucket held by an
		 * earlier, longer window is due after that one): so the
		 * release below frees it, and the loop ends within n turns. */
		close = sim_due(s, first, close);
		if ((rc = sim_release(s, close > s->t ? close : s->t)) != 0)
			return rc;
		if (s->first == first)
			return SHMT_ECORRUPT;
	}
	*at = s->t;
	return 0;
}

/*
 * Fill OUT for a ring whose word is W at decision time NOW, after a grant of
 * K (GRANTED) or for a refused or peeked request of K.  APPLY: the grant is
 * not in W yet (a peek that would grant): count it as the grant path would
 * record it.
 */
static int
bk_decide(const struct bk_ctx *c, struct shmt_w w, uint64_t now, uint64_t k,
    int granted, int apply, shmt_decision_t *out)
{
	struct bk_sim s;
	uint64_t back, at;
	int rc;

	if ((rc = sim_init(&s, c, w, now)) != 0)
		return rc;
	out->granted = granted;
	out->limit = c->limit;
	if ((rc = sim_back(&s, &back)) != 0)
		return rc;
	if (granted && apply) {
		/* The grant goes into the open active bucket, or seals it
		 * and opens one that closes at now + S. */
		uint64_t takes = sim_takes(&s), free = c->limit - s.inflight;
		uint64_t room = takes >= k ? takes - k +
		    sim_rooms(&s) * c->slack_uses :
		    sim_rooms(&s) * c->slack_uses - k;
		uint64_t due = takes >= k ? sim_due(&s, s.n - 1, s.close_a) :
		    sat_add(sat_add(now, c->slack), c->window);

		out->remaining = free - k < room ? free - k : room;
		out->retry_after_ns = 0;
		out->reset_after_ns = (due > back ? due : back) - now;
		return 0;
	}
	out->remaining = sim_remaining(&s);
	out->reset_after_ns = back - now;
	out->retry_after_ns = 0;
	if (!granted && k > c->limit) {
		/* More than the limit never passes (a client's own tier
		 * limit may be below the class's largest cost): answered as
		 * a deny rule is. */
		out->retry_after_ns = UINT64_MAX;
	} else if (!granted) {
		if ((rc = sim_when(&s, k, &at)) != 0)
			return rc;
		out->retry_after_ns = at - now;
	}
	return 0;
}

/* When the ring cannot be read consistently (its word moved on under a
 * decision that already happened, again and again), say what is safe:
 * nothing left, and ask again after a whole window and slack. */
static void
decide_unknown(uint64_t limit, uint64_t wait, int granted,
    shmt_decision_t *out)
{
	out->granted = granted;
	out->limit = limit;
	out->remaining = 0;
	out->retry_after_ns = granted ? 0 : wait;
	out->reset_after_ns = wait;
}

/* Decide on the ring at WP: first from W (the word the call acted on), then,
 * if its buckets have moved on meanwhile, from the current word. */
static int
bk_decide_at(const struct bk_ctx *c, struct shmt_w *wp, struct shmt_w w,
    uint64_t now, uint64_t k, int granted, shmt_decision_t *out)
{
	for (int tries = 0; tries < 8; tries++) {
		int rc = bk_decide(c, w, now, k, granted, 0, out);

		if (rc == 0)
			return 0;
		if (rc != SLOT_STALE && rc != SHMT_ECORRUPT)
			return rc;
		shmt__load128(wp, w.w);
	}
	decide_unknown(c->limit, sat_add(c->window, c->slack), granted, out);
	return 0;
}

/* ---- Exact mode ------------------------------------------------------------- */

/* The log's next grant number as the log shows it (the hint may lag). */
static int
ex_next(const struct shmt_lview *v, int64_t *np)
{
	int64_t L = (int64_t)v->nlog;
	int64_t n = __atomic_load_n((int64_t *)&v->lim->lm_w.w[0],
	    __ATOMIC_ACQUIRE);

	for (int64_t i = 0; i <= L; i++, n++) {
		uint64_t s[2];

		if (n < 0)
			return SHMT_ECORRUPT;
		shmt__load128(&v->log[(uint64_t)n % (uint64_t)L], s);
		if ((int64_t)s[0] != n) {
			*np = n;
			return 0;
		}
	}
	return SHMT_EBUSYLOOP;
}

/* A log slot that no longer holds the record a decision expected: the log
 * moved on under it (another caller's grant), so decide again. */
#define EX_STALE (-EAGAIN)

/* The record in front of grant number M (grant M - L), read and checked:
 * 1 with the time it stops counting in *T (ex_due), 0 when there is none
 * yet, EX_STALE. */
static int
ex_before(const struct shmt_lview *v, int64_t m, uint64_t *t)
{
	int64_t L = (int64_t)v->limit;
	uint64_t s[2];

	shmt__load128(ex_slot(v, m - L), s);
	if ((int64_t)s[0] != m - L)
		return EX_STALE;
	*t = (int64_t)s[0] >= 0 ? ex_due(v, (int64_t)s[0], s[1]) : 0;
	return (int64_t)s[0] >= 0 ? 1 : 0;
}

/* Grant M passes at NOW: the grant L before it is due. */
static int
ex_free_at(const struct shmt_lview *v, int64_t m, uint64_t now)
{
	uint64_t t;
	int rc = ex_before(v, m, &t);

	if (rc <= 0)
		return rc == 0 ? 1 : rc;
	return t <= now;
}

/*
 * When the limiter whose next grant is N is full again: when grants N ..
 * N + L - 1 all pass, i.e. the records of grants N - L .. N - 1 are all due
 * (0 when there is none).  Due times grow with grant numbers, but for a
 * change that holds the older records longer (exact.c): among the records
 * it holds and among the others they grow, so the latest is the newest
 * record's or the newest held one's.  0 or EX_STALE.
 */
static int
ex_full_at(const struct shmt_lview *v, int64_t n, uint64_t *at)
{
	int64_t L = (int64_t)v->limit, held;
	uint64_t t;
	int rc;

	*at = 0;
	if ((rc = ex_before(v, n - 1 + L, &t)) < 0)
		return rc;
	if (rc == 1)
		*at = t;
	if (__builtin_expect(v->hold_window <= v->window, 1))
		return 0;
	held = v->hold_seq - 1 < n - 1 ? v->hold_seq - 1 : n - 1;
	if (held < 0 || held < n - L || held == n - 1)
		return 0;
	if ((rc = ex_before(v, held + L, &t)) < 0)
		return rc;
	if (rc == 1 && t > *at)
		*at = t;
	return 0;
}

/*
 * Fill OUT for an exact limiter whose next grant is N at NOW.  Grant times
 * follow grant numbers (each grant reads the clock after the previous one
 * was recorded), so grants N, N+1, ... pass at NOW up to the first one whose
 * predecessor L back is younger than the window: a binary search.
 * APPLY: a peek that would grant; count its grant as made at NOW.  After a
 * change that holds the older records longer (exact.c), due times may
 * fall back once, where the hold ends: the search then looks at the held
 * records and at the others apart, and reset counts the held ones
 * (ex_full_at).
 */
static int
ex_decide(const struct shmt_lview *v, int64_t n, uint64_t now, int granted,
    int apply, shmt_decision_t *out)
{
	int64_t L = (int64_t)v->limit, lo = 0, hi = L;
	uint64_t t;
	int rc;

	out->granted = granted;
	out->limit = v->limit;
	out->retry_after_ns = 0;
	/* remaining: the largest r with grants n .. n+r-1 all passing.
	 * Grant n + j checks record n - L + j; those the change holds
	 * (below hold_seq) come first, and within them and within the
	 * others the due times grow: search the held ones first, and the
	 * others only when every held one passes. */
	if (__builtin_expect(v->hold_window > v->window, 0) &&
	    v->hold_seq - (n - L) < L)
		hi = v->hold_seq - (n - L) > 0 ? v->hold_seq - (n - L) : 0;
	for (;;) {
		int64_t end = hi;

		while (lo < hi) {
			int64_t mid = lo + (hi - lo + 1) / 2;

			if ((rc = ex_free_at(v, n + mid - 1, now)) < 0)
				return rc;
			if (rc)
				lo = mid;
			else
				hi = mid - 1;
		}
		if (lo < end || end == L)
			break;
		hi = L;
	}
	out->remaining = (uint64_t)lo;
	/* Back to full once every record that counts is due. */
	if ((rc = ex_full_at(v, n, &t)) < 0)
		return rc;
	out->reset_after_ns = t > now ? t - now : 0;
	if (apply) {
		/* The peek's own grant is record N, due after a window, or
		 * after the hold when the change came after its number was
		 * reached (exact.c). */
		out->remaining = out->remaining > 0 ? out->remaining - 1 : 0;
		t = ex_due(v, n, now) - now;
		if (t > out->reset_after_ns)
			out->reset_after_ns = t;
	} else if (!granted) {
		if ((rc = ex_before(v, n, &t)) < 0)
			return rc;
		out->retry_after_ns = rc == 1 && t > now ? t - now : 0;
	}
	return 0;
}

static int
ex_decide_now(const struct shmt_lview *v, uint64_t now, int granted,
    int apply, shmt_decision_t *out)
{
	for (int tries = 0; tries < 8; tries++) {
		int64_t n;
		int rc = ex_next(v, &n);

		if (rc == 0)
			rc = ex_decide(v, n, now, granted, apply, out);
		if (rc != EX_STALE)
			return rc;
	}
	decide_unknown(v->limit, v->window, granted, out);
	return 0;
}

/* ---- Receipts --------------------------------------------------------------- */

/* The receipt's layout: decide.h (RC_*). */

static void
rcpt_set(shmt_receipt_t *r, unsigned kind, uint32_t row, uint32_t entry,
    uint64_t a, uint64_t cost, uint32_t tag)
{
	r->r_[0] = kind | ((uint64_t)(row & 0xffffffU) << 8) |
	    ((uint64_t)entry << 32);
	r->r_[1] = a;
	r->r_[2] = cost;
	r->r_[3] = tag;
}

/* ---- Acquire and peek --------------------------------------------------------- */

/* The largest cost a grant of V may take: B in bucket mode, 1 for exact
 * mode and key pools. */
uint64_t
shmt__cost_max(const struct shmt_lview *v)
{
	if (v->mode == SHMT_MODE_GCRA)
		return v->burst;
	if (v->mode == SHMT_MODE_EXACT || (v->flags & SHMT_LIMF_KEYS))
		return 1;
	return v->slack_uses;
}

int
shmt__decide_find(shmt_t *h, const char *name, const void *client, size_t len,
    uint64_t cost, struct shmt_lview *scratch, const struct shmt_lview **vp)
{
	const struct shmt_lview *v;
	int rc;

	if ((client == NULL) != (len == 0))
		return -EINVAL;
	if (len > SHMT_CLIENT_MAX)
		return -E2BIG;
	if ((rc = lim_find(h, name, scratch, &v)) != 0 ||
	    (rc = shmt__decide_check(h, &v, client, len, cost)) != 0)
		return rc;
	*vp = v;
	return 0;
}

int
shmt__decide_check(shmt_t *h, const struct shmt_lview **vp,
    const void *client, size_t len, uint64_t cost)
{
	const struct shmt_lview *v = *vp;
	int rc;

	if ((client == NULL) != (len == 0))
		return -EINVAL;
	if (len > SHMT_CLIENT_MAX)
		return -E2BIG;
	if ((client != NULL) != ((v->flags & SHMT_LIMF_PER_CLIENT) != 0))
		return -EPERM;
	if (cost == 0)
		return -EINVAL;
	/* Over the view's largest cost: the view may be older than the
	 * parameters in force (a renew by another thread can leave the
	 * row's hint on the older of two views), so ask the word first. */
	if (cost > shmt__cost_max(v)) {
		if (!v->pgen_check)
			return -EINVAL;
		if ((rc = shmt__view_fresh(h, vp)) != 0)
			return rc;
		if (cost > shmt__cost_max(*vp))
			return -EINVAL;
	}
	return 0;
}

/* A try of COST found the parameters changed since *V was built (TRIES
 * times before): a fresh view, or the error for the call (SHMT_EBUSYLOOP
 * after 64 changes, -EINVAL if COST is more than the new parameters
 * allow). */
static int
renew_for_cost(shmt_t *h, const struct shmt_lview **v, uint64_t cost,
    int tries)
{
	int rc;

	if (tries == 64)
		return SHMT_EBUSYLOOP;
	if ((rc = shmt__view_renew(h, v)) != 0)
		return rc;
	return cost > shmt__cost_max(*v) ? -EINVAL : 0;
}

static int
acquire_shared_once(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    uint64_t *cursor, shmt_decision_t *out, shmt_receipt_t *rcpt)
{
	struct bk_ctx c;
	struct shmt_w w;
	uint64_t now = 0;
	uint32_t tag = 0;
	int why = WHY_NONE, rc, drc;

	if (rcpt != NULL)
		memset(rcpt, 0, sizeof(*rcpt));
	if (v->flags & SHMT_LIMF_GLOBAL) {
		uint64_t pos = 0;

		rc = shmt__global_take(h, &v->lim->lm_g, v->limit, v->window,
		    v->slack, cost, out, &pos);
		if (rc == 1 && v->nkeys != 0)
			*cursor = pos % v->nkeys;
		return rc;
	}
	if (v->mode == SHMT_MODE_GCRA) {
		uint64_t tat = 0;

		for (int tries = 0;; tries++) {
			rc = shmt__gcra_acquire_at(h, v, cost, out, &tat);
			if (rc != -EAGAIN)
				break;
			if ((rc = renew_for_cost(h, &v, cost, tries)) != 0)
				return rc;
		}
		if (rc == 1 && rcpt != NULL)
			rcpt_set(rcpt, RC_GCRA, v->lv_row, 0, tat, cost,
			    v->pgen);
		return rc;
	}
	if (v->mode == SHMT_MODE_EXACT) {
		if (rcpt != NULL)
			rcpt_set(rcpt, RC_EXACT, v->lv_row, 0, 0, cost, 0);
		/* The decision reads the clock once more after the grant;
		 * with an injected clock it is the grant's time. */
		rc = take_shared_raw(h, v, cursor);
		if (rc < 0 || out == NULL)
			return rc;
		/* The grant may have renewed its own copy of the view. */
		if ((drc = shmt__view_fresh(h, &v)) != 0)
			return drc;
		now = shmt__now(h);
		drc = ex_decide_now(v, now, rc, 0, out);
		return drc < 0 ? drc : rc;
	}
	/* Through bk_take_view_at (one use: the plain grant's fast path) or
	 * bk_take_n, so that this thread's guess of W stays the last word it
	 * saw: a stale guess would make the next shmt_try_use_key open a
	 * bucket early (safe, but no longer the seed's answer).  Both decide
	 * as bk_take_n (ring.h proves the fast path's steps), and the
	 * decision below reads the guess. */
	for (int tries = 0;; tries++) {
		if (cost == 1) {
			rc = bk_take_view_at(h, v, &tag, &why, &now);
		} else {
			shmt__bk_ctx_init(&c, v, v->ring);
			c.torn_ok = 1;
			rc = bk_take_n(h, &c, &v->lim->lm_w, &tag, &why,
			    (uint32_t)cost, &now);
		}
		if (rc != -EAGAIN)
			break;
		if ((rc = renew_for_cost(h, &v, cost, tries)) != 0)
			return rc;
	}
	if (rc >= 0) {
		unsigned gs = wguess_slot(&v->lim->lm_w);

		w.w[0] = shmt__wguess[gs].w[0];
		w.w[1] = shmt__wguess[gs].w[1];
	}
	if (rc == 1)
		*cursor = tag;
	else if (rc == 0)
		shmt__count_denial(v->lim, why);
	if (rc == 1 && rcpt != NULL)
		rcpt_set(rcpt, RC_BUCKET, v->lv_row, 0, SHMT_W_TAIL(w), cost, 0);
	if (rc < 0 || out == NULL)
		return rc;
	if (cost == 1) {
		shmt__bk_ctx_init(&c, v, v->ring);
		c.torn_ok = 1;
	}
	drc = bk_decide_at(&c, &v->lim->lm_w, w, now, cost, rc, out);
	return drc < 0 ? drc : rc;
}

int
shmt__acquire_shared(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    uint64_t *cursor, shmt_decision_t *out, shmt_receipt_t *rcpt)
{
	/* One use, no decision, no receipt: shmt_try_use_key's grant, with
	 * its fast path (ring.h, bk_take_view) which decides as the loop
	 * below does (the proof is there). */
	if (cost == 1 && out == NULL && rcpt == NULL)
		return take_shared_raw(h, v, cursor);
	return shmt__grant_check(h, acquire_shared_once(h, v, cost, cursor, out,
	    rcpt));
}

int
shmt__peek_shared(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out)
{
	struct bk_ctx c;
	struct shmt_w w;
	uint64_t now;
	int rc = SHMT_EBUSYLOOP;

	if (v->flags & SHMT_LIMF_GLOBAL)
		return shmt__global_peek(h, &v->lim->lm_g, v->limit, v->window,
		    v->slack, cost, out);
	if (v->mode != SHMT_MODE_BUCKETS) {
		/* The parameters in force (they may have changed since V
		 * was built); a peek decides nothing, so no CAS checks it. */
		if ((rc = shmt__view_fresh(h, &v)) != 0)
			return rc;
		if (cost > shmt__cost_max(v))
			return -EINVAL;
	}
	if (v->mode == SHMT_MODE_GCRA)
		return shmt__gcra_peek(h, v, cost, out);
	if (v->mode == SHMT_MODE_EXACT) {
		int64_t n;
		int free;

		for (int tries = 0; tries < 8; tries++) {
			if ((rc = ex_next(v, &n)) < 0)
				return rc;
			now = shmt__now(h);
			if ((free = ex_free_at(v, n, now)) >= 0)
				rc = ex_decide(v, n, now, free, free, out);
			else
				rc = free;
			if (rc != EX_STALE)
				return rc < 0 ? rc : free;
		}
		return SHMT_EBUSYLOOP;
	}
	shmt__bk_ctx_init(&c, v, v->ring);
	for (int tries = 0; tries < 8; tries++) {
		struct bk_sim s;

		shmt__load128(&v->lim->lm_w, w.w);
		if (c.check_tag && SHMT_W_TAG(w) != c.tag_expect) {
			/* The parameters changed since this view was built. */
			if ((rc = shmt__view_renew(h, &v)) != 0)
				return rc;
			/* The new slack_uses may be below COST, as
			 * shmt__acquire_shared checks too. */
			if (cost > shmt__cost_max(v))
				return -EINVAL;
			shmt__bk_ctx_init(&c, v, v->ring);
			rc = SLOT_STALE;
			continue;
		}
		now = shmt__now(h);
		if ((rc = sim_init(&s, &c, w, now)) == 0) {
			int can = sim_can(&s, cost);

			rc = bk_decide(&c, w, now, cost, can, can, out);
			if (rc == 0)
				return can;
		}
		if (rc != SLOT_STALE)
			break;
	}
	return rc == SLOT_STALE ? SHMT_EBUSYLOOP : rc;
}

/* ---- Per client ------------------------------------------------------------- */

/* The decision for CLIENT (LEN bytes, HASH) on V; *NOWP gets the clock
 * value it was made at (0 when it read none). */
static int
acquire_client_take(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len, const uint64_t hash[2], uint64_t cost, shmt_decision_t *out,
    shmt_receipt_t *rcpt, uint64_t *nowp)
{
	struct shmt_client *e;
	struct shmt_lview tmp;
	const struct shmt_lview *vv;
	struct bk_ctx c;
	struct shmt_w w;
	uint64_t now = 0, t0 = 0, tat = 0;
	uint32_t tag, expect = 0;
	int why = WHY_NONE, rc, drc;

	*nowp = 0;
	for (int tries = 0; tries < 64; tries++) {
		/* A live entry is found inline (the grant's own lookup, see
		 * try_client_once); anything else takes the full way. */
		rc = ce_lookup_live(v, hash, &expect, &w);
		if (__builtin_expect(rc < 0, 0))
			rc = shmt__ce_find_or_claim(h, v, hash, client, len,
			    &expect, &t0);
		if (rc == -ENOSPC) {
			shmt__count_denial(v->lim, WHY_TABLE_FULL);
			if (out != NULL)
				decide_unknown(v->limit,
				    sat_add(v->window, v->slack), 0, out);
			return 0;
		}
		if (rc < 0)
			return rc;
		e = ce_at(v, (uint32_t)rc);
		rc = ce_rule_gate(h, v, e, expect, &tmp, &vv, &now);
		if (__builtin_expect(rc != CE_GO, 0)) {
			if (rc == -EAGAIN) {
				if (ce_retry_spent(&t0))
					break;
				continue;
			}
			if (rc < 0)
				return rc;
			/* Allow or deny: nothing recorded, nothing to give
			 * back. */
			if (rcpt != NULL)
				memset(rcpt, 0, sizeof(*rcpt));
			if (out != NULL)
				shmt__ce_rule_decide(rc, out);
			*nowp = now;
			return rc;
		}
		if (v->mode == SHMT_MODE_GCRA) {
			rc = shmt__gcra_ce_take(h, vv, e, expect, cost, &now,
			    &tat);
			why = WHY_EXHAUSTED;
		} else {
			shmt__bk_ctx_init(&c, vv, ce_ring(e));
			c.ntags = 0;
			c.check_tag = 1;
			c.tag_expect = expect;
			rc = bk_take_n(h, &c, &e->ce_w, &tag, &why,
			    (uint32_t)cost, &now);
		}
		if (rc == -EAGAIN) {
			/* The entry changed hands: look again. */
			if (ce_retry_spent(&t0))
				break;
			continue;
		}
		if (rc < 0)
			return rc;
		if (rc == 1)
			__atomic_store_n(&e->ce_last_ns, now, __ATOMIC_RELAXED);
		else
			shmt__count_denial(v->lim, why);
		if (rcpt != NULL)
			memset(rcpt, 0, sizeof(*rcpt));
		if (rc == 1 && rcpt != NULL)
			rcpt_set(rcpt, RC_CLIENT, v->lv_row,
			    (uint32_t)(((char *)e - v->clients) / v->entsize),
			    tat, cost, expect);
		if (out != NULL && v->mode == SHMT_MODE_GCRA)
			shmt__gcra_decide(vv, tat, now, cost, rc, out);
		*nowp = now;
		if (out == NULL || v->mode == SHMT_MODE_GCRA)
			return rc;
		/* The entry's word as the call left it (single-threaded, the
		 * word its CAS installed or its refusal saw). */
		c.check_tag = 0;
		shmt__load128(&e->ce_w, w.w);
		drc = bk_decide_at(&c, &e->ce_w, w, now, cost, rc, out);
		return drc < 0 ? drc : rc;
	}
	return SHMT_EBUSYLOOP;
}

/* The analyzer counts the request at the decision's own clock value (one
 * read of the precise clock per call), or at a read of its own when the
 * call read none (a full table). */
static int
acquire_client_once(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len, uint64_t cost, shmt_decision_t *out, shmt_receipt_t *rcpt)
{
	uint64_t hash[2], now;
	int rc;

	ce_client_hash(h, client, len, hash);
	rc = acquire_client_take(h, v, client, len, hash, cost, out, rcpt,
	    &now);
	if (rc >= 0 && shmt__an_counts(h->an, SHMT_HOT_CLIENT))
		shmt__an_feed(h, hash[0] ^ hash[1], client, len,
		    SHMT_HOT_CLIENT, now != 0 ? now : shmt__now(h));
	return rc;
}

int
shmt__acquire_client(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len, uint64_t cost, shmt_decision_t *out, shmt_receipt_t *rcpt)
{
	/* One use, no decision, no receipt: shmt_try_use's grant, with its
	 * fast path (ring.h, bk_take_entry). */
	if (cost == 1 && out == NULL && rcpt == NULL)
		return shmt__try_client(h, v, client, len);
	return shmt__grant_check(h, acquire_client_once(h, v, client, len, cost,
	    out, rcpt));
}

/* Would entry E be reclaimed by a claim at NOW (idle once what is due is
 * released)?  Read-only. */
static int
ce_peek_idle(const struct shmt_lview *v, struct shmt_client *e, uint64_t now)
{
	struct shmt_lview tmp;
	struct bk_ctx c;
	struct bk_sim s;
	struct shmt_w w;
	uint32_t st;

	shmt__load128(&e->ce_w, w.w);
	st = SHMT_W_TAG(w) >> 14;
	if (st == CE_FREE || st == CE_NEVER)
		return 1;
	if (st != CE_LIVE)
		return 0;
	if (v->mode == SHMT_MODE_GCRA)
		return w.w[0] <= now;
	shmt__bk_ctx_init(&c, shmt__ce_view(v, e, &tmp), ce_ring(e));
	c.ntags = 0;
	return sim_init(&s, &c, w, now) == 0 && s.first == s.n;
}

/* A peek under RULE: CE_GO with *VP the view to decide on (TMP with the
 * client's own limit), or the answer of allow (1) or deny (0). */
static int
peek_rule(const struct shmt_lview *v, uint32_t rule, struct shmt_lview *tmp,
    const struct shmt_lview **vp, shmt_decision_t *out)
{
	if (__builtin_expect(rule == CE_RULE_NONE, 1))
		return CE_GO;
	if (!ce_rule_valid(rule) ||
	    (rule <= SHMT_LIMIT_MAX && v->mode != SHMT_MODE_BUCKETS))
		return SHMT_ECORRUPT;
	if (rule == CE_RULE_ALLOW || rule == CE_RULE_DENY) {
		shmt__ce_rule_decide(rule == CE_RULE_ALLOW, out);
		return rule == CE_RULE_ALLOW;
	}
	*vp = shmt__tier_view(v, rule, tmp);
	return CE_GO;
}

int
shmt__peek_client(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len, uint64_t cost, shmt_decision_t *out)
{
	uint32_t cap = v->capacity, home;
	uint64_t hash[2], now = shmt__now(h);
	struct shmt_client *fresh = NULL;
	struct shmt_lview tmp;
	struct bk_ctx c;
	int64_t rule;
	int rc = SHMT_EBUSYLOOP;

	shmt__client_hash(h, client, len, hash);
	home = shmt__client_home(hash, cap);
	for (uint32_t k = 0; k < ce_probe(v); k++) {
		struct shmt_client *e = ce_at(v, (home + k) % cap);
		uint64_t hw[2];
		struct shmt_w w;

		shmt__load128(e->ce_hash, hw);
		if (hw[0] == 0 && hw[1] == 0) {
			fresh = e;      /* the path ends: a claim lands */
			break;
		}
		if (fresh == NULL && ce_peek_idle(v, e, now))
			fresh = e;
		if (!ce_hash_match(hw, hash))
			continue;
		shmt__load128(&e->ce_w, w.w);
		if ((SHMT_W_TAG(w) & CE_EPOCH_MASK) != (hw[1] & CE_EPOCH_MASK) ||
		    SHMT_W_TAG(w) >> 14 != CE_LIVE) {
			fresh = e;      /* free or mid-claim: a fresh limit */
			break;
		}
		if ((rc = peek_rule(v, __atomic_load_n(&e->ce_rule,
		    __ATOMIC_ACQUIRE), &tmp, &v, out)) != CE_GO)
			return rc;
		if (v->mode == SHMT_MODE_GCRA)
			return shmt__gcra_peek_tat(v, w.w[0], now, cost, out);
		shmt__bk_ctx_init(&c, v, ce_ring(e));
		c.ntags = 0;
		for (int tries = 0; tries < 8; tries++) {
			struct bk_sim s;

			if ((rc = sim_init(&s, &c, w, now)) == 0) {
				int can = sim_can(&s, cost);

				rc = bk_decide(&c, w, now, cost, can, can, out);
				if (rc == 0)
					return can;
			}
			if (rc != SLOT_STALE)
				return rc;
			shmt__load128(&e->ce_w, w.w);
		}
		return SHMT_EBUSYLOOP;
	}
	if (fresh == NULL) {
		/* Every entry on the path is live and busy: "table full". */
		decide_unknown(v->limit, sat_add(v->window, v->slack), 0, out);
		return 0;
	}
	/* A claim would stamp the table's rule. */
	if ((rule = shmt__ov_peek(v, hash)) < 0)
		return (int)rule;
	if ((rc = peek_rule(v, (uint32_t)rule, &tmp, &v, out)) != CE_GO)
		return rc;
	if (v->mode == SHMT_MODE_GCRA)
		return shmt__gcra_peek_tat(v, 0, now, cost, out);
	/* A fresh limit: an empty ring. */
	out->limit = v->limit;
	if (cost > v->limit) {
		/* Never, as bk_decide answers: nothing in flight. */
		out->granted = 0;
		out->remaining = v->limit;
		if (out->remaining > (uint64_t)v->nb * v->slack_uses)
			out->remaining = (uint64_t)v->nb * v->slack_uses;
		out->retry_after_ns = UINT64_MAX;
		out->reset_after_ns = 0;
		return 0;
	}
	out->granted = 1;
	out->remaining = v->limit - cost;
	if (out->remaining > (uint64_t)v->nb * v->slack_uses - cost)
		out->remaining = (uint64_t)v->nb * v->slack_uses - cost;
	out->retry_after_ns = 0;
	out->reset_after_ns = sat_add(v->slack, v->window);
	return 1;
}

/* ---- Public ------------------------------------------------------------------- */

static int
gen_acquire_once(shmt_t *h, const char *name, const void *client,
    size_t client_len, uint64_t cost, shmt_decision_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t cursor = 0;
	int rc;

	if ((rc = shmt__decide_find(h, name, client, client_len, cost, &scratch,
	    &v)) != 0)
		return rc;
	if (client != NULL)
		return enforce(v, shmt__acquire_client(h, v, client, client_len,
		    cost, out, NULL));
	return enforce(v, shmt__acquire_shared(h, v, cost, &cursor, out, NULL));
}

SHMT_EXPORT int
shmt_acquire(shmt_t *h, const char *name, const void *client,
    size_t client_len, uint64_t cost, shmt_decision_t *out)
{
	SHMT_GEN_CALL(h, gen_acquire_once(h, name, client, client_len, cost, out));
}

static int
gen_peek_once(shmt_t *h, const char *name, const void *client, size_t client_len,
    uint64_t cost, shmt_decision_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	shmt_decision_t tmp;
	int rc;

	if ((rc = shmt__decide_find(h, name, client, client_len, cost, &scratch,
	    &v)) != 0)
		return rc;
	if (out == NULL)
		out = &tmp;
	if (client != NULL)
		return enforce(v, shmt__peek_client(h, v, client, client_len, cost,
		    out));
	return enforce(v, shmt__peek_shared(h, v, cost, out));
}

SHMT_EXPORT int
shmt_peek(shmt_t *h, const char *name, const void *client, size_t client_len,
    uint64_t cost, shmt_decision_t *out)
{
	SHMT_GEN_CALL(h, gen_peek_once(h, name, client, client_len, cost, out));
}

static int
gen_next_key_decide_once(shmt_t *h, const char *name, char *buf, size_t cap,
    shmt_decision_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t cursor = 0;
	int rc;

	if (buf == NULL && cap != 0)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = shmt__keys_check(v, buf, cap)) != 0)
		return rc;
	if ((rc = shmt__acquire_shared(h, v, 1, &cursor, out, NULL)) != 1)
		return rc;
	return shmt__key_copy(v, cursor, buf);
}

SHMT_EXPORT int
shmt_next_key_decide(shmt_t *h, const char *name, char *buf, size_t cap,
    shmt_decision_t *out)
{
	SHMT_GEN_CALL(h, gen_next_key_decide_once(h, name, buf, cap, out));
}
