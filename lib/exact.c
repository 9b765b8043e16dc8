/* SPDX-License-Identifier: MIT */
/*
 * Exact mode: the sliding log of grant times, one CAS per grant on the log
 * slot of its number, with its proof (below), and resetting, checking and
 * repairing a log.
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
 * Changing the parameters in place (shmt_limiter_update)
 * ------------------------------------------------------
 * A shared exact limiter without keys keeps the parameter generation g in
 * the low 16 bits of W's second half (the rest 0; the hint is the first
 * half), and the parameters (L, C) of g != 0 in row block lm_p[g & 1]
 * (g = 0: the identity fields), read like a seqlock against the tag as in
 * update.c.  The log keeps the length N it was defined with (lm_limit), so
 * L <= N: grant n checks the record of grant n - L, in slot (n - L) % N,
 * which holds exactly that grant (every grant below n is recorded, and
 * n - L + N > n is not made yet); with L = N that is the slot it writes.
 * A grant reads W's tag after the hint (and decides only when it is its
 * view's generation; else its call renews the view, shmt__view_renew).
 * Under the table lock, the updater:
 *
 *   {n, g} = load(W)
 *   g' = g + 1 (skipping 0)
 *   hold = C, or the last change's hold if its records (grants below its
 *          hold_seq) may still be read (hold_seq > n - N) and it is longer
 *   write block lm_p[g' & 1] = {L', C', hold_seq = n + 1,
 *                               hold_window = hold > C' ? hold : 0}
 *   CAS W {n, g} -> {n, g'}; on failure load W, again
 *
 * and a record of a grant numbered below hold_seq is due max(C', hold)
 * after its time (ex_due), later ones C'.
 *
 * One decision, one set of parameters: each grant reads its generation's
 * block, decided before it reads the clock.  Which grants used which:
 * the CAS found the hint at n, so every grant below n was recorded (its
 * slot CAS, after its tag read) before the change: all used g.  A grant
 * numbered above n read a hint above n, moved there after the change's
 * CAS (the CAS compared the hint), and its tag after that: all use g' (or
 * later).  Grant n itself may have been recorded before the change (the
 * hint not yet moved on), or read the tag before it and record after it
 * (with g), or read g': whichever, it decides wholly with one of them.
 * So the generations grow with the grant number, and, as decision times
 * do too, the change splits the grants at one number.
 * kill -9 of the updater: before its CAS the block it wrote is one W does
 * not name; after it the change is whole.  The hint's own CAS (8 bytes on
 * W's first half) and the change's 16-byte CAS are locked instructions on
 * one word: one total order.
 *
 * Uses in flight stay counted: the log keeps their times, and every use
 * decided before the change, grant n included, is held max(C, C') after
 * it (and an earlier change's longer hold while its uses may still be
 * read; an earlier change's records are out of reach once the hint is N
 * past its hold_seq), so a lowered
 * limit refuses until enough of them are due.  The promises, for grants
 * numbered in order with nondecreasing times, grant m checking m - L_m
 * against a hold of at least C_m (its own window):
 *  - an interval of length min(C, C') holds at most max(L, L') grants: the
 *    grants in an interval are consecutive numbers a .. a + M; if M =
 *    max(L, L'), the last one checked a + M - L_m >= a, which lies in the
 *    interval and was at least C_m >= min(C, C') older: impossible;
 *  - an interval of length C' wholly after the change holds at most L':
 *    its grants are consecutive numbers, all with g' but perhaps the first
 *    (grant n, above); if there were L' + 1 of them, a .. a + L', the last
 *    one (g') checked a against C': impossible.
 * The log cannot hold a limit above N in place: shmt_limiter_update
 * refuses it with -E2BIG (define the limiter again for more).  Grant n is
 * held as an old one even when it used g' (at most one use per change held
 * longer than it needs).  Up to 65535 changes overtaking one
 * preempted grant would let its tag match again (as in update.c).
 */
#include "exact.h"

#include "ring.h"
#include "util.h"

#include <stdio.h>

int
shmt__ex_take(shmt_t *h, const struct shmt_lview *v, uint64_t *seq)
{
	int64_t *np = (int64_t *)&v->lim->lm_w.w[0];
	int64_t N = (int64_t)v->nlog, L = (int64_t)v->limit;

	for (unsigned i = 0; i < SHMT_RETRY_MAX; i++) {
		int64_t n = __atomic_load_n(np, __ATOMIC_ACQUIRE), m;
		struct shmt_log_slot *slot;
		uint64_t s[2], r[2], d[2], now;

		/* 2^63 grants take centuries: a count that high is damage. */
		if (n < 0 || n == INT64_MAX)
			return SHMT_ECORRUPT;
		m = n + 1;
		slot = &v->log[(uint64_t)n % (uint64_t)N];
		shmt__load128(slot, s);
		if ((int64_t)s[0] == n) {
			/* Grant n is recorded; help move the hint on. */
			__atomic_compare_exchange_n(np, &n, m, 0,
			    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
			continue;
		}
		if ((int64_t)s[0] != n - N) {
			if ((int64_t)s[0] > n)
				continue;       /* our hint was stale */
			return SHMT_ECORRUPT;
		}
		/* The parameters, after the hint (see "Changing the
		 * parameters in place"). */
		if (__builtin_expect((uint32_t)(__atomic_load_n(
		    &v->lim->lm_w.w[1], __ATOMIC_ACQUIRE) & 0xffffU) !=
		    v->pgen, 0))
			return -EAGAIN;
		now = shmt__now(h);
		r[0] = s[0];
		r[1] = s[1];
		if (__builtin_expect(L != N, 0)) {
			/* A limit below the log's length: grant n - L's
			 * record, recorded (every grant below n is) and not
			 * yet overwritten (grant n - L + N > n is not made). */
			shmt__load128(ex_slot(v, n - L), r);
			if ((int64_t)r[0] != n - L) {
				if ((int64_t)r[0] > n - L)
					continue;       /* stale hint */
				return SHMT_ECORRUPT;
			}
		}
		if ((int64_t)r[0] >= 0 && ex_due(v, (int64_t)r[0], r[1]) > now)
			return 0;
		d[0] = (uint64_t)n;
		d[1] = now;
		if (!shmt__cas128(slot, s, d)) {
			/* Lost to another grant: ask for the hint's line
			 * (W's; see "Contention" in ring.c). */
			shmt__handoff_ask(&v->lim->lm_handoff, &v->lim->lm_w);
			continue;
		}
		/* Our grant is number n: the one the slot CAS recorded.  The
		 * hint CAS below may fail (a helper moved it on first) and
		 * then overwrites its expected value with the hint's current
		 * value, so it gets a copy and n stays ours. */
		*seq = (uint64_t)n;
		__atomic_compare_exchange_n(np, &(int64_t){ n }, m, 0,
		    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		/* Another process asked for the word: step aside. */
		if (__builtin_expect(__atomic_load_n(&v->lim->lm_handoff,
		    __ATOMIC_RELAXED) != 0, 0))
			shmt__handoff_yield(&v->lim->lm_handoff, &v->lim->lm_w);
		return 1;
	}
	return SHMT_EBUSYLOOP;
}

uint64_t
shmt__ex_inflight(const struct shmt_lview *v, uint64_t now)
{
	uint64_t n = 0, s[2];

	for (uint64_t i = 0; i < v->nlog; i++) {
		shmt__load128(&v->log[i], s);
		if ((int64_t)s[0] >= 0 && ex_due(v, (int64_t)s[0], s[1]) > now)
			n++;
	}
	return n;
}

int64_t
shmt__ex_reset(const struct shmt_lview *v, uint64_t now)
{
	int64_t n = 0;

	for (uint64_t i = 0; i < v->nlog; i++) {
		uint64_t s[2], d[2];
		unsigned k;

		shmt__load128(&v->log[i], s);
		for (k = 0; k < SHMT_RETRY_MAX; k++) {
			if ((int64_t)s[0] < 0 || s[1] == 0)
				break;
			d[0] = s[0];
			d[1] = 0;
			if (shmt__cas128(&v->log[i], s, d)) {
				n += ex_due(v, (int64_t)s[0], s[1]) > now;
				break;
			}
		}
		if (k == SHMT_RETRY_MAX)
			return SHMT_EBUSYLOOP;
	}
	return n;
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
	int64_t L = (int64_t)v->nlog, m = n < 0 ? 0 : n;

	for (uint64_t i = 0; i < v->nlog; i++) {
		int64_t seq = __atomic_load_n(&v->log[i].ls_seq,
		    __ATOMIC_RELAXED);

		if (seq >= -L && (seq - (int64_t)i) % L == 0 && seq >= m &&
		    seq < INT64_MAX - 1)
			m = seq + 1;
	}
	for (uint64_t i = 0; i < v->nlog; i++) {
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

void
shmt__chk_exact(shmt_t *h, struct shmt_chk *c, const struct shmt_lview *v)
{
	int64_t *np = (int64_t *)&v->lim->lm_w.w[0];
	int64_t L = (int64_t)v->nlog;

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
		for (uint64_t i = 0; i < v->nlog; i++) {
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
