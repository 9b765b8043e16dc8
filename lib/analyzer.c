/* SPDX-License-Identifier: MIT */
/*
 * The hot-key analyzer: which keys had more than a threshold of the
 * requests of the last window, deterministically, in fixed memory, with no
 * two processes writing the same cache line on the request path.
 *
 * Each (sub-window, writer stripe) pair has a Misra-Gries summary of cap
 * counters with a lazy offset d: a counter's effective count is
 * count - d, and it is free when that is not positive (or when it belongs
 * to an older sub-window).  The counters come in groups of p (`probe`),
 * and x's hash picks its group.  An update of key x: x live in its group:
 * count + 1; else a free counter of the group: {x, d + 1}; else d + 1
 * (every counter loses one, x's request is dropped).
 *
 * 1. Bounds.  With f the true count of x in the summary's sub-window and
 *    c its effective count (0 when absent), f - d <= c <= f after every
 *    step: a request counted raises f and c; a claim raises f by one and
 *    c from 0 to 1; a step of d raises f (x's request is dropped) and d,
 *    and lowers every other live c by one while d rises by one.  So
 *    c <= f <= c + d, for every key, whatever the order of the requests.
 * 2. Offset.  A step of d happens only when all p counters of x's group
 *    are live, i.e. each holds at least one unit of effective count: the
 *    step removes p units from them and drops x's request, p + 1 units of
 *    the n requests in all.  Effective counts are never negative, so
 *    d (p + 1) <= n: d <= n / (p + 1).  This holds for every trace: a
 *    trace aimed at one group (possible only with the segment's secret,
 *    which the hash is keyed with) can drive d to that bound and no
 *    further.  So the groups are as large as the summary allows (up to
 *    SHMT_AN_PROBE_MAX = 128, the most a request compares within the
 *    cost asked of it): the default 1 MiB gives one group of 128 counters
 *    per summary (it has room for 184), d <= n / 129, and aiming at a
 *    group is moot.
 * 3. The answer: the exact window.  A query at now reads the summaries of
 *    the sub-window holding now and the subw before it (the span: it holds
 *    the exact window [now - W, now], see shmt_top_keys).  The newest subw
 *    sub-windows lie inside the exact window; the oldest holds its start
 *    ws = now - W.  For the newest ones, by 1., a key's requests lie in
 *    [sum c, sum c + sum d].  For the oldest, two kinds of marks record
 *    (d, n, sequence number) before the request that takes them:
 *    - slice marks: the first request of each of SHMT_AN_SLICES slices of
 *      time (slice_of);
 *    - piece marks, cut by count: the weight n + (p + 1) d grows by p + 2
 *      at most per request; a piece mark is taken when the piece since the
 *      last mark reaches the step (am_step), or a quarter of it at a
 *      request whose time is later than the last one counted (so a burst
 *      at one moment ends a piece where it ends).  A piece mark stores that
 *      request's time t and the latest time counted before it, tb: every
 *      request counted before it is at or before tb, every one after it at
 *      or after t.  When the summary's marks are all used, every other one
 *      is dropped and the step doubles.  Before a doubling the K =
 *      an->pieces marks (22 by default) each close a piece of at least a
 *      quarter step, so the step stays at most 8 W_tot / K (W_tot the
 *      summary's weight), and a piece weighs less than the step plus
 *      2 (p + 2): it steps d at most 8 W_tot / (K (p + 2)) + 2 times.
 *    Let B be the latest mark all of whose earlier requests are before ws
 *    (the sub-window's start when none), and A the earliest all of whose
 *    later requests are at or after ws.  Then:
 *    - Absent keys.  Of key x's requests after B, each raises c_x or is a
 *      step of d with x absent, and each other step of d lowers c_x by at
 *      most one, so they are at most c_x + (d - d_B); a key in no summary
 *      had at most Dw = (sum of the newest d) + (d - d_B) requests in the
 *      exact window (`error_window`).
 *    - Last counted.  Each counter keeps the sequence number of the latest
 *      mark when it was last counted (its low 16 bits).  A live counter
 *      whose number is below B's had its last count before B, and its key
 *      has no other live counter (a key has one at most, and a counter
 *      goes from free to live only by a claim, which is a count), so its
 *      key had no counted request after B: only the d - d_B bound applies.
 *      Otherwise its contribution is min(c_x, n - n_B) (n - n_B: all the
 *      requests after B).  This is `old`: a key hot before the window and
 *      silent since adds nothing.
 *    - Certain requests.  Every request counted after A is in the exact
 *      window: Nwin (`total_window`) = the newest n + (n - n_A) <= Nexact.
 *    - Bounds.  lower = sum of the newest c <= f_win <= upper = lower + old
 *      + Dw, for every key, on every trace; a key absent from every
 *      summary had at most Dw.
 *    - Listed: every key with upper over theta Nwin.  A key over theta of
 *      the exact window has f_win > theta Nexact >= theta Nwin, so it is
 *      listed if it is in some summary, and has at most Dw if in none: when
 *      Dw <= theta Nwin (`certified`), nothing over the threshold of the
 *      exact window is missing.
 *    - False positives.  A listed key has f_win >= lower > theta Nwin - Dw
 *      - old, and old - (its requests in the oldest after ws) is at most its
 *      requests in the oldest before ws: a listed key had more than theta
 *      Nwin - Dw requests in the exact window, less those it had in the
 *      oldest sub-window before ws (none for a key silent since B).
 *    - Crossings.  A counter's count never goes down while its summary
 *      holds the sub-window, across owners too (a claim sets it to d + 1,
 *      over every count of a free counter), so it is a clock of its place.
 *      Each time a request of its key raises it to a multiple of the log's
 *      step s = 2^shift, the owner appends a record (its time, rounded up;
 *      the place; count / s) after the count's store; when the an->recs
 *      records are all used, or count / s would not fit, only those of
 *      multiples of 2s are kept and s doubles, so every multiple of s that
 *      a request raised a count to is recorded.  A record says the place's
 *      count had reached its value by its time; LB, the largest of a place's
 *      records before ws, is at most the count c_ws at ws.  For key x on
 *      that place (count c now), `old` becomes also at most c - LB:
 *      * x's counter claimed after ws: c - LB >= c - d_claim, all x's counts;
 *      * claimed before ws, with r = c_ws - d_claim - 1 of its requests
 *        counted before ws after the claim: if r >= s, one of them raised
 *        the count to a multiple of s in [c_ws - s + 1, c_ws], recorded, so
 *        c - LB <= (c - c_ws) + s - 1, its counts after ws plus s - 1; if
 *        r < s, c_x = c - d <= c - d_claim <= (c - c_ws) + s.
 *      So `old` holds at most s of x's requests before ws (Eo, the sum of
 *      the oldest summaries' s, `error_oldest`; without usable records,
 *      n - n_B as before).  A writer stopped or killed between a count and
 *      its record leaves that crossing out, which costs nothing while the
 *      summary is its last: am_tmax, stored before the count, is at least
 *      the crossing's time, so either ws is past it (every request of the
 *      summary is before ws: `old` is 0) or the crossing is at or after
 *      ws (LB does not need it).  A writer that goes on in the summary
 *      after it could make it cost a step: so the reaper (or the shared
 *      lock's next taker) turns a dead writer's logs off for the
 *      sub-window before anyone takes the stripe up (rec_off, an atomic
 *      OR that the owner's CAS cannot undo), readers use no record of a
 *      stripe whose owner (or the shared lock's holder) is dead, and a
 *      summary restored from an image (copied while writers counted) has
 *      its log off.
 *    - False positives, with the records.  upper <= f_win + Dw + Eo: a
 *      listed key had more than theta Nwin - Dw - Eo requests in the exact
 *      window, every answer says so (error_oldest).  With R records and
 *      one writer the step stays under about 4 n / R (every record but the
 *      one a claim's first count may add is one of s counts), so Eo is
 *      about 4 / R of the oldest sub-window's requests: 91 records with the
 *      defaults.
 *    - When certified.  Dw <= newest d + (d - d_B), and d - d_B counts
 *      only the steps after B: those before ws in B's piece (at most its
 *      weight / (p + 2)) and those after ws (each drops one of the oldest's
 *      requests after ws, which are in the exact window).  So a burst at
 *      one moment before ws, of any size, costs nothing (the piece ends
 *      with it), nor does a burst in an earlier piece.  An answer can be
 *      uncertified only when ws falls inside a piece that stepped d by
 *      more than theta Nwin less the newest offsets before ws, which needs
 *      W_tot > K (p + 2) (theta Nwin - newest d - 2) / 8: for one-off keys
 *      (W_tot about 2 n) the oldest sub-window holding more than about
 *      18 times the exact window's requests with the defaults, spread over
 *      time with ws in its last pieces.  That is a sufficient bound, not a
 *      measure: with the defaults, bursts of 99, 300 and 1000 times a
 *      minute's traffic at one moment or spread over a tenth of a slice,
 *      at every slice, with the window starting just before, at and after
 *      them, left every answer certified (test_analyzer_window); with 5%
 *      and 6 sub-windows, spread bursts of 99 to 1000 times left 0-30 of
 *      359 answers uncertified (four runs; the window starting in the
 *      burst's last pieces), and 0, 28 and 28 with 4 marks where there
 *      were 8 before the crossing records, and 256 KiB (4 and 2 marks, 24
 *      and 80 counters) spread bursts of 99 times 27-31 of 683 and 359,
 *      as with 8 and 4.
 *    - Last time.  A summary keeps the latest time it counted at
 *      (am_tmax, stored before the request's count).  When that is before
 *      ws, every request the summary counted is before the exact window:
 *      B is its end (d, n, and no counter counted since), and it adds
 *      nothing to any key, to Dw or to Nwin.  So a key whose requests end
 *      the oldest sub-window (no request follows them in that summary to
 *      cut a piece) is not listed for them once ws is past them.
 *    A request whose thread's clock is behind its stripe's (the shared
 *    stripe, a clock that stepped back) counts at the stripe's time: the
 *    owner's latest time (an_tls.tmax), or under the shared stripe's lock,
 *    am_tmax.
 *    The clock.  All of the above is about the times requests are counted
 *    at (their stamps) and the query's now, read from the handle's clock.
 *    With an injected clock (shmt_set_clock) that clock is every one of
 *    them.  Without one, a get is stamped with CLOCK_MONOTONIC_COARSE
 *    (dict.c's get_now: the kernel's last timekeeping tick, a load where
 *    CLOCK_MONOTONIC is a timer read, the larger part of what the analyzer
 *    added to a get), a client's request with the limiter's own
 *    CLOCK_MONOTONIC read, and the query reads CLOCK_MONOTONIC.  The
 *    coarse clock is never ahead of CLOCK_MONOTONIC and lags it by at most
 *    L, the time since the last tick: clock_getres(CLOCK_MONOTONIC_COARSE),
 *    1 to 4 ms, while the kernel keeps its ticks (longer only when it
 *    misses them, as a stalled virtual machine does).  A stripe's time
 *    never goes back (above), so a request at time t has a stamp in
 *    (t - L, t].  The exact window of an answer at now is then exactly the
 *    requests stamped in [now - W, now]: every one in [now - W + L, now],
 *    none before now - W, and those of [now - W, now - W + L) whose stamp
 *    is at or after now - W.  Every bound above holds, word for word, for
 *    that set, which lies inside the true last minute [now - W, now].  So
 *    against the true minute, with e_x key x's requests in its first tick
 *    [now - W, now - W + L): lower and the false-positive bound hold as
 *    they are; x had at most upper + e_x requests in it (Dw + e_x when in
 *    no summary); Nwin is at most its requests; and when certified, every
 *    key with more than the threshold of the true minute's requests plus
 *    its own e_x is listed.  Nothing moves at the minute's end: a request
 *    counted before the query began has a stamp at or before its now.
 *
 * 4. Cost.  A request compares the p tags of its group in one pass with
 *    no branch (the comparisons OR-ed, one test: 16 comparisons of eight
 *    tags for 128, or 8 of sixteen in the copy compiled for AVX2, see
 *    shmt__an_feed), and only on a match finds the matching lanes and
 *    reads their counts and hashes.  A miss looks for a
 *    free counter only when d has reached the group's floor (the least
 *    count a search that found none free saw): a full group steps d at
 *    once, and a search over the group happens at most once per step of d,
 *    which removes p + 1 units: O(1) reads per request, amortized.  The
 *    pieces add a comparison of the weight with am_next (in the header line
 *    a request reads anyway), and of the time with the last one while the
 *    owner holds a moment open (piece_cut), and, once per quarter step at
 *    most, a mark
 *    (a few stores, and a thinning of K marks when they are all used, once
 *    per doubling of the weight): O(1) amortized; the counter word's mark
 *    number costs no comparison (a counter is live when its word is over
 *    d << 16 | 0xffff); the latest time is one store per request (its
 *    owner reads it back once per sub-window).  The hash is the
 *    dictionary's own keyed hash of the key (dict.c hands it over), so a
 *    get hashes its key once.  The clock is the get's own coarse read (3.,
 *    "The clock").  Measured: see the README, "Hot keys", "Cost".
 * 5. Writers.  A summary is written by the one thread that owns its stripe
 *    (SHMT_AN_STRIPES of them); threads beyond that share one more stripe
 *    under a lock, and the lines of that stripe are then written by
 *    several processes in turn.  The bounds above hold in either case.
 *
 * Layout of a summary (see analyzer.h): a 256-byte header (am_ver, am_id,
 * am_d, am_n, am_slice, am_seq, am_next, am_step, am_pieces, am_mver,
 * am_tmax, am_rlog, then the 5 slice marks), the groups (tags, counter
 * words count << 16 | sequence number, hint, floor), the hashes, then
 * an->pieces piece marks of 32 bytes ({mk_t, mk_d, mk_n, mk_sq = gap << 32
 * | sequence number}), then an->recs crossing records of 8 bytes (their
 * times relative to the sub-window's start: a summary moved in time keeps
 * them).  The times in it are the handle's clock in ns (shmt_set_clock,
 * CLOCK_MONOTONIC by default): am_tmax, each mark's mk_t, and a piece
 * mark's mk_t - gap; am_id is the sub-window number of that clock.  A
 * slice mark's mk_t is informative only (readers use the slice's first
 * moment).  A summary brought back on another clock must move all of them
 * with its am_id: shmt__an_sum_retime (at the end of this file) does.
 *
 * Crash model: every change is one aligned store, ordered so that a
 * reader or a later owner never takes a counter half-claimed (a claim
 * writes the tag, the hash, then the count that makes it live).  A writer
 * killed between two stores leaves a summary whose bounds hold; its stripe
 * is freed when its process is found dead, and the next owner carries on.
 * A mark is written before the count (am_slice, am_pieces) that makes
 * readers use it; a thinning runs with am_mver odd, which a writer killed
 * in it leaves odd: readers then use no piece mark (their bounds only
 * widen), and the next owner's next piece mark drops them all and makes it
 * even again.  Readers also use no piece mark when the marks are not in
 * order (times, d, n and numbers never decrease along them).
 */
#include "analyzer.h"
#include "an_sum.h"

#include "dict.h"
#include "tiles.h"
#include "fork.h"

#include <ck_pr.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static int
an_geometry(uint64_t bytes, uint64_t window, uint32_t subw, uint32_t ppm,
    struct shmt_an *an, const char **why, int legacy);

int
shmt__an_geometry(uint64_t bytes, uint64_t window, uint32_t subw, uint32_t ppm,
    struct shmt_an *an, const char **why)
{
	return an_geometry(bytes, window, subw, ppm, an, why, 0);
}

int
shmt__an_geometry_old(const struct shmt_an *an, struct shmt_an *old)
{
	int rc = an_geometry(an->bytes, an->window, an->subw, an->ppm, old,
	    NULL, 1);

	old->clients = an->clients;
	return rc;
}

/* LEGACY: the layout of segment formats up to ABI 8, whose summaries kept
 * no crossing records (the whole room for piece marks). */
static int
an_geometry(uint64_t bytes, uint64_t window, uint32_t subw, uint32_t ppm,
    struct shmt_an *an, const char **why, int legacy)
{
	uint64_t rest, per, names, mk, room, reserve;
	uint32_t minp;
	const char *dummy;

	if (why == NULL)
		why = &dummy;
	memset(an, 0, sizeof(*an));
	if (bytes == 0)
		return 0;
	*why = "analyzer_bytes: too small for its summaries";
	if (bytes < (64ULL << 10) || bytes > (1ULL << 32)) {
		*why = "analyzer_bytes: must be from 64 KiB to 4 GiB (or 0: none)";
		return -EINVAL;
	}
	if (subw == 0 || subw > 64) {
		*why = "analyzer_subwindows: must be from 1 to 64";
		return -EINVAL;
	}
	if (window / subw == 0) {
		*why = "analyzer_window_ns: must be at least analyzer_subwindows "
		    "nanoseconds";
		return -EINVAL;
	}
	if (ppm < 10000 || ppm > 1000000) {
		*why = "analyzer_threshold_ppm: must be from 10000 (1%) to "
		    "1000000";
		return -EINVAL;
	}
	an->bytes = bytes;
	an->window = window;
	an->subw = subw;
	an->w = window / subw;
	an->rings = subw + 1;
	an->stripes = SHMT_AN_STRIPES + 1;
	an->ppm = ppm;
	/* A summary of k counters in groups of p bounds its offset by
	 * n / (p + 1) (see the top of this file), so the groups are as large
	 * as the summary allows, up to SHMT_AN_PROBE_MAX counters (a request
	 * compares all p tags of its group, sixteen at a time): with the default
	 * 1 MiB one group holds the whole summary.  The threshold needs
	 * p >= 1.2 / threshold at least (see shmt_top_keys). */
	minp = (uint32_t)((1200000ULL + ppm - 1) / ppm);
	minp = (minp + SHMT_AN_PROBE_STEP - 1) & ~(SHMT_AN_PROBE_STEP - 1);
	/* An eighth for names, the rest for summaries: a header, at least
	 * SHMT_AN_PIECES_MIN piece marks, the counters, and the rest of the
	 * room (up to SHMT_AN_PIECES_MAX) for more piece marks. */
	names = pow2_floor(bytes / 8 / sizeof(struct shmt_an_name));
	an->lock_off = SHMT_LINE * 2;   /* after the owners (16 x 16 bytes) */
	an->sums_off = an->lock_off + SHMT_LINE;
	rest = bytes - an->sums_off - names * sizeof(struct shmt_an_name);
	per = rest / ((uint64_t)an->rings * an->stripes);
	mk = sizeof(struct shmt_an_mark);
	if (per <= sizeof(struct shmt_an_sum) + 64)
		return -EINVAL;
	per -= sizeof(struct shmt_an_sum) + 64;  /* header, rounding */
	/* Room for SHMT_AN_PIECES_MIN piece marks, unless the counters the
	 * threshold needs take it (the smallest summaries: no piece marks,
	 * the slice marks alone). */
	reserve = SHMT_AN_PIECES_MIN * mk;
	for (;;) {
		an->probe = SHMT_AN_PROBE_MAX;
		while (an->probe > SHMT_AN_PROBE_STEP &&
		    meta_bytes_of(an->probe) + 8ULL * an->probe + reserve > per)
			an->probe -= SHMT_AN_PROBE_STEP;
		if ((an->probe >= minp && meta_bytes_of(an->probe) +
		    8ULL * an->probe + reserve <= per) || reserve == 0)
			break;
		reserve = 0;
	}
	if (an->probe < minp ||
	    meta_bytes_of(an->probe) + 8ULL * an->probe > per) {
		*why = "analyzer_bytes: too small for this threshold (each "
		    "summary needs groups of 1.2 / threshold counters)";
		return -EINVAL;
	}
	an->tag_bytes = tag_bytes_of(an->probe);
	an->meta_bytes = meta_bytes_of(an->probe);
	an->groups = (uint32_t)((per - reserve) /
	    (an->meta_bytes + 8ULL * an->probe));
	if (an->groups == 0 || an->groups > (1U << 16)) {
		if (an->groups != 0)
			*why = "analyzer_bytes: too large for this threshold "
			    "(at most 65536 groups of counters)";
		return -EINVAL;
	}
	an->cap = an->groups * an->probe;
	room = per - (uint64_t)an->groups * (an->meta_bytes + 8ULL * an->probe);
	/* Half of what the counters leave for crossing records (up to
	 * SHMT_AN_REC_MAX), the rest for piece marks.  A record names a place
	 * in rec_sbits bits and its time in the sub-window in ns with the
	 * rest: no records when the longest sub-window does not fit. */
	an->rec_sbits = 1;
	while ((1ULL << an->rec_sbits) < an->cap)
		an->rec_sbits++;
	an->recs = (uint32_t)(room / 2 / 8);
	if (an->recs > SHMT_AN_REC_MAX)
		an->recs = SHMT_AN_REC_MAX;
	if (legacy || an->recs < 4 || ((an->window + subw - 1) / subw) >>
	    (64 - SHMT_AN_REC_QBITS - an->rec_sbits) != 0)
		an->recs = 0;
	an->pieces = (uint32_t)((room - 8ULL * an->recs) / mk);
	if (an->pieces > SHMT_AN_PIECES_MAX)
		an->pieces = SHMT_AN_PIECES_MAX;
	an->pieces &= ~1U;
	/* The groups right after the header (a constant offset for the
	 * request path), then the hashes, the piece marks, the records. */
	an->groups_off = sizeof(struct shmt_an_sum);
	an->hashes_off = an->groups_off +
	    (uint64_t)an->groups * an->meta_bytes;
	an->marks_off = an->hashes_off + 8ULL * an->cap;
	an->recs_off = an->marks_off + (uint64_t)an->pieces * mk;
	an->sum_size = (an->recs_off + 8ULL * an->recs + 63) & ~63ULL;
	an->names_off = an->sums_off +
	    an->sum_size * an->rings * an->stripes;
	an->names = (uint32_t)names;
	if (an->names_off + names * sizeof(struct shmt_an_name) > bytes)
		return -EINVAL;
	return 0;
}

static void recs_off_stripe(const struct shmt_an *an, uint32_t p);

static struct shmt_an_owner *
owners(const struct shmt_an *an)
{
	return (struct shmt_an_owner *)an->base;
}


/* ---- Stripes: one per writer thread ------------------------------------- */

/*
 * The calling thread's stripe for each handle it used lately.  Up to
 * SHMT_AN_STRIPES threads get a stripe of their own; a thread that finds
 * none free shares the last stripe under a lock that recovers from a dead
 * owner.  A thread keeps its stripe until its handle is closed.
 */
struct an_tls {
	uint32_t uid;
	uint32_t stripe;
	unsigned fork_gen;              /* the handle's, when claimed */
	uint64_t sub_start, sub_end, id;
	uint64_t slice_end;             /* where the next slice starts */
	uint32_t slice;                 /* the slice of the last request */
	uint64_t tmax;                  /* the latest time it counted at */
	struct shmt_an_sum *sum;        /* this sub-window's summary */
	uint32_t hold;                  /* sum's moment held open (piece_cut) */
};
static __thread struct an_tls an_tls[4];

static uint64_t
owner_word(const shmt_t *h)
{
	return ((uint64_t)(uint32_t)shmt__env_pid() << 32) | h->uid;
}

/* An owner word whose claim is not whole yet: its process start time is
 * not stored, so the pid alone says whether it lives (a pid is below
 * 2^31: the bit is free). */
#define AN_CLAIMING (1ULL << 63)

/* Whether stripe owner W (of O, not 0) is dead: a whole claim's process
 * by its pid and start time (a pid reused by another process is dead), a
 * claim under way by its pid alone. */
static int
owner_dead(const struct shmt_an_owner *o, uint64_t w)
{
	return !shmt__pid_alive((pid_t)((w & ~AN_CLAIMING) >> 32),
	    (w & AN_CLAIMING) ? 0 :
	    __atomic_load_n(&o->ao_start, __ATOMIC_RELAXED));
}

int
shmt__an_reap(shmt_t *h)
{
	struct shmt_an *an = h->an;
	int n = 0;

	for (uint32_t p = 0; an != NULL && p < SHMT_AN_STRIPES; p++) {
		struct shmt_an_owner *o = &owners(an)[p];
		uint64_t w = __atomic_load_n(&o->ao_owner, __ATOMIC_ACQUIRE);

		if (w == 0 || !owner_dead(o, w))
			continue;
		/* Before the stripe is free (no one writes it until then):
		 * the dead owner may have left a crossing unrecorded. */
		recs_off_stripe(an, p);
		if (__atomic_compare_exchange_n(&o->ao_owner, &w, 0, 0,
		    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			n++;
	}
	return n;
}

uint32_t
shmt__an_dead_writers(const struct shmt_an *an)
{
	uint32_t dead = 0, lk;

	for (uint32_t p = 0; p < SHMT_AN_STRIPES; p++) {
		const struct shmt_an_owner *o = &owners(an)[p];
		uint64_t w = __atomic_load_n(&o->ao_owner, __ATOMIC_ACQUIRE);

		if (w != 0 && owner_dead(o, w))
			dead |= 1U << p;
	}
	lk = __atomic_load_n((const uint32_t *)(const void *)(an->base +
	    an->lock_off), __ATOMIC_ACQUIRE);
	if (lk != 0 && !shmt__pid_alive((pid_t)lk, 0))
		dead |= 1U << SHMT_AN_STRIPES;
	return dead;
}

static uint32_t
stripe_claim(shmt_t *h)
{
	struct shmt_an *an = h->an;
	uint64_t me = owner_word(h), start = 0;

	for (int round = 0; round < 2; round++) {
		for (uint32_t p = 0; p < SHMT_AN_STRIPES; p++) {
			struct shmt_an_owner *o = &owners(an)[p];
			uint64_t free_word = 0;

			/* The stripe is taken with the claim bit, which a
			 * reaper judges by the pid alone (the start time left
			 * there is the last owner's); the start, then the
			 * whole word (a release: the start before it). */
			if (__atomic_compare_exchange_n(&o->ao_owner, &free_word,
			    me | AN_CLAIMING, 0, __ATOMIC_ACQ_REL,
			    __ATOMIC_RELAXED)) {
				if (start == 0)
					start = shmt__proc_start(shmt__env_pid());
				__atomic_store_n(&o->ao_start, start,
				    __ATOMIC_RELAXED);
				__atomic_store_n(&o->ao_owner, me,
				    __ATOMIC_RELEASE);
				return p;
			}
		}
		if (shmt__an_reap(h) == 0)
			break;
	}
	return SHMT_AN_STRIPES;         /* the shared stripe */
}

void
shmt__an_release(shmt_t *h)
{
	struct shmt_an *an = h->an;
	uint64_t me;

	if (an == NULL)
		return;
	me = owner_word(h);
	for (uint32_t p = 0; p < SHMT_AN_STRIPES; p++) {
		uint64_t w = me;

		__atomic_compare_exchange_n(&owners(an)[p].ao_owner, &w, 0, 0,
		    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
}

static __attribute__((noinline)) struct an_tls *
tls_find(shmt_t *h)
{
	struct an_tls *t = NULL;

	for (int i = 0; i < 4; i++) {
		if (an_tls[i].uid == h->uid) {
			/* A thread that forked carries its stripe into the
			 * child: the child, reattached with its own slot
			 * (fork.c), claims a stripe of its own, so that each
			 * stripe keeps one writer. */
			if (an_tls[i].fork_gen == h->fork_gen)
				return &an_tls[i];
			t = &an_tls[i];
			break;
		}
		if (t == NULL && an_tls[i].uid == 0)
			t = &an_tls[i];
	}
	if (t == NULL)
		t = &an_tls[h->uid % 4];   /* forget the oldest guess */
	t->uid = h->uid;
	t->fork_gen = h->fork_gen;
	t->stripe = stripe_claim(h);
	t->sub_start = t->sub_end = t->slice_end = 0;
	t->tmax = 0;
	t->hold = 0;
	return t;
}

/* The calling thread's stripe state for H: a thread that uses one handle
 * finds it in the first entry, at one comparison of two words. */
static inline __attribute__((always_inline)) struct an_tls *
tls_get(shmt_t *h)
{
	struct an_tls *t = &an_tls[0];

	if (__builtin_expect(t->uid == h->uid && t->fork_gen == h->fork_gen,
	    1))
		return t;
	return tls_find(h);
}

/* The shared stripe's lock: the owner's pid, or 0.  A waiter that finds
 * the owner dead takes the lock over.  Returns 0 when it holds the lock,
 * -1 when it gave up: the lock word names a live process that never lets
 * go (a damaged segment, or a stopped owner), and the request goes
 * uncounted rather than the caller waiting for ever. */
static int
shared_lock(const struct shmt_an *an)
{
	uint32_t *lk = (uint32_t *)(an->base + an->lock_off);
	uint32_t me = (uint32_t)shmt__env_pid();

	for (unsigned i = 0; i < (1U << 22); i++) {
		uint32_t cur = 0;

		if (__atomic_compare_exchange_n(lk, &cur, me, 0,
		    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 0;
		if (i % 4096 == 4095 && cur != 0 &&
		    !shmt__pid_alive((pid_t)cur, 0) &&
		    __atomic_compare_exchange_n(lk, &cur, me, 0,
		    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			/* Its holder died, perhaps between a count and its
			 * crossing record. */
			recs_off_stripe(an, SHMT_AN_STRIPES);
			return 0;
		}
		ck_pr_stall();
	}
	return -1;
}

static void
shared_unlock(const struct shmt_an *an)
{
	__atomic_store_n((uint32_t *)(an->base + an->lock_off), 0,
	    __ATOMIC_RELEASE);
}

/* ---- Names ------------------------------------------------------------------ */

#define NAME_AT 8

static uint64_t
name_check(uint64_t hash, uint32_t klen, uint32_t kind, uint32_t kept,
    const uint8_t *b)
{
	uint64_t c = hash ^ ((uint64_t)klen << 8) ^ kind ^ ((uint64_t)kept << 40);

	c = shmt__fnv1a(c, b, kept);
	return c | 1;
}

/* A name's rank: the sub-window it was last put in (its low 12 bits) and
 * the level its key's count had reached in one writer's summary then
 * (NAME_AT << level).  An empty place, or a rank from a sub-window outside
 * the span, ranks below every put.  A rank up to subw sub-windows ahead
 * (put by a writer whose clock or summary is ahead of this one's) is live
 * too.  12 bits tell sub-windows apart over 4096 of them: a name nobody
 * put again for that long ranks live again, at its old level, for subw + 1
 * sub-windows, until a key that reaches that level takes its place. */
#define NAME_LEVELS 16U
#define NAME_SUBW_MASK 0xfffU

static inline uint16_t
name_rank(uint64_t id, uint32_t level)
{
	return (uint16_t)((id & NAME_SUBW_MASK) << 4 |
	    (level < NAME_LEVELS ? level : NAME_LEVELS - 1));
}

static inline int
name_level_now(const struct shmt_an *an, const struct shmt_an_name *e,
    uint64_t id)
{
	uint16_t r = __atomic_load_n(&e->an_rank, __ATOMIC_RELAXED);
	uint32_t age = (uint32_t)(id - (r >> 4)) & NAME_SUBW_MASK;

	if (__atomic_load_n(&e->an_hash, __ATOMIC_RELAXED) == 0 ||
	    (age > an->subw && age < NAME_SUBW_MASK + 1 - an->subw))
		return -1;
	return r & (NAME_LEVELS - 1);
}

void
shmt__an_names_shift(const struct shmt_an *an, int64_t k)
{
	struct shmt_an_name *e = names(an);

	for (uint32_t i = 0; i < an->names; i++) {
		uint16_t r = e[i].an_rank;
		uint64_t id = (uint64_t)(r >> 4) + (uint64_t)k;

		e[i].an_rank = name_rank(id, r & (NAME_LEVELS - 1U));
	}
}

/* Keep KEY's first bytes under HASH, unless they are there already, in
 * one of its two places: an empty one, or the one whose key ranks lower,
 * and only if that key reached no higher level in the span than this one
 * now has (LEVEL, in sub-window ID).  So a key counted NAME_AT << L times
 * by one writer in a sub-window keeps its name against every key of the
 * span that reached a lower level in both its places; a hot key, which
 * comes back at each level, takes its place back from a colder one.  Two
 * writers may interleave on one entry; the check word makes a mixed entry
 * read as absent, and a torn rank only changes which entry goes first. */
static __attribute__((noinline)) void
name_put(const struct shmt_an *an, uint64_t hash, const void *key,
    size_t klen, int kind, uint64_t id, uint32_t level)
{
	struct shmt_an_name *e0, *e1, *e;
	uint32_t i0, i1;
	uint32_t kept = klen < SHMT_AN_NAME_BYTES ? (uint32_t)klen :
	    SHMT_AN_NAME_BYTES;
	uint8_t buf[SHMT_AN_NAME_BYTES] = { 0 };
	uint16_t rank = name_rank(id, level);
	uint64_t check;
	int l0, l1;

	shmt__an_name_slots(an->names, hash, &i0, &i1);
	e0 = &names(an)[i0];
	e1 = &names(an)[i1];
	memcpy(buf, key, kept);
	check = name_check(hash, (uint32_t)klen, (uint32_t)kind, kept, buf);
	e = __atomic_load_n(&e0->an_hash, __ATOMIC_RELAXED) == hash ? e0 :
	    __atomic_load_n(&e1->an_hash, __ATOMIC_RELAXED) == hash ? e1 : NULL;
	/* Found, and whole: its rank rises.  An entry with this hash but
	 * another's check word (two writers interleaved, or one killed in the
	 * middle) reads as absent; it is written again in place. */
	if (e != NULL && __atomic_load_n(&e->an_check, __ATOMIC_RELAXED) ==
	    check) {
		if (name_level_now(an, e, id) <= (int)level)
			__atomic_store_n(&e->an_rank, rank, __ATOMIC_RELAXED);
		return;
	}
	if (e == NULL) {
		l0 = name_level_now(an, e0, id);
		l1 = name_level_now(an, e1, id);
		e = l1 < l0 ? e1 : e0;
		if ((l1 < l0 ? l1 : l0) > (int)level)
			return;
	}
	__atomic_store_n(&e->an_hash, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->an_check, 0, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < SHMT_AN_NAME_BYTES / 8; i++) {
		uint64_t w;

		memcpy(&w, buf + 8 * i, 8);
		__atomic_store_n((uint64_t *)e->an_bytes + i, w, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&e->an_klen, (uint32_t)klen, __ATOMIC_RELAXED);
	__atomic_store_n(&e->an_kind, (uint8_t)kind, __ATOMIC_RELAXED);
	__atomic_store_n(&e->an_kept, (uint8_t)kept, __ATOMIC_RELAXED);
	__atomic_store_n(&e->an_rank, rank, __ATOMIC_RELAXED);
	__atomic_store_n(&e->an_check, check, __ATOMIC_RELEASE);
	__atomic_store_n(&e->an_hash, hash, __ATOMIC_RELEASE);
}

static int
name_get_at(const struct shmt_an_name *e, uint64_t hash, shmt_hotkey_t *k)
{
	uint8_t buf[SHMT_AN_NAME_BYTES];
	uint32_t klen, kind, kept;

	if (__atomic_load_n(&e->an_hash, __ATOMIC_ACQUIRE) != hash)
		return 0;
	klen = __atomic_load_n(&e->an_klen, __ATOMIC_RELAXED);
	kind = __atomic_load_n(&e->an_kind, __ATOMIC_RELAXED);
	kept = __atomic_load_n(&e->an_kept, __ATOMIC_RELAXED);
	if (kept > SHMT_AN_NAME_BYTES || klen > SHMT_KEY_MAX || kept > klen)
		return 0;
	for (uint32_t i = 0; i < SHMT_AN_NAME_BYTES / 8; i++) {
		uint64_t w = __atomic_load_n((uint64_t *)e->an_bytes + i,
		    __ATOMIC_RELAXED);

		memcpy(buf + 8 * i, &w, 8);
	}
	if (__atomic_load_n(&e->an_check, __ATOMIC_ACQUIRE) !=
	    name_check(hash, klen, kind, kept, buf) ||
	    __atomic_load_n(&e->an_hash, __ATOMIC_ACQUIRE) != hash)
		return 0;
	memcpy(k->key, buf, kept);
	k->klen = klen;
	k->kept = kept;
	k->kind = (int)kind;
	return 1;
}

int
shmt__an_name_get(const struct shmt_an *an, uint64_t hash, shmt_hotkey_t *k)
{
	uint32_t i0, i1;

	shmt__an_name_slots(an->names, hash, &i0, &i1);
	return name_get_at(&names(an)[i0], hash, k) ||
	    name_get_at(&names(an)[i1], hash, k);
}

/* ---- Updates ---------------------------------------------------------------- */

/* Make S the summary of sub-window ID: the owner alone does this, with
 * the version odd while the counters are cleared, so a reader never takes
 * a half-cleared summary for either sub-window.  A crash in the middle
 * leaves the version odd; the stripe's next owner clears it again. */
static __attribute__((noinline)) void
sum_reset(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id)
{
	uint64_t ver = __atomic_load_n(&s->am_ver, __ATOMIC_RELAXED);

	if ((ver & 1) == 0)
		__atomic_store_n(&s->am_ver, ++ver, __ATOMIC_RELEASE);
	for (uint32_t g = 0; g < an->groups; g++) {
		uint64_t *cnt = group_at(an, s, g).cnt;

		for (uint32_t j = 0; j < an->probe; j++)
			__atomic_store_n(&cnt[j], 0, __ATOMIC_RELAXED);
		__atomic_store_n(group_at(an, s, g).hint, 0, __ATOMIC_RELAXED);
		__atomic_store_n(group_at(an, s, g).floor, 0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&s->am_d, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_n, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_slice, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_seq, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_step, an->probe + 1ULL, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_next, an->pieces ? an->probe + 1ULL :
	    UINT64_MAX, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_pieces, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_mver, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_tmax, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_rlog, shmt__an_rlog(0, an->recs != 0 ? 0 :
	    SHMT_AN_REC_OFF, 0), __ATOMIC_RELAXED);
	for (uint32_t k = 0; k + 1 < SHMT_AN_SLICES; k++) {
		__atomic_store_n(&s->am_smark[k].mk_t, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->am_smark[k].mk_d, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->am_smark[k].mk_n, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->am_smark[k].mk_sq, 0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&s->am_id, id, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_ver, ver + 1, __ATOMIC_RELEASE);
}

/* Eight 16-bit tags; the compiler turns these into vector instructions
 * where the target has them (SSE2 on x86-64, NEON on arm64). */
typedef uint16_t tag8 __attribute__((vector_size(16)));

/* The eight tags at TAGS compared with SPREAD's: all ones where equal. */
static inline __attribute__((always_inline)) tag8
tags_eq8(const uint16_t *tags, tag8 spread)
{
	tag8 x;

	memcpy(&x, tags, 16);
	return (tag8)(x == spread);
}

/* Whether any lane of EQ is set (one instruction with SSE2). */
static inline __attribute__((always_inline)) int
tags_any8(tag8 eq)
{
#ifdef __SSE2__
	return _mm_movemask_epi8((__m128i)eq) != 0;
#else
	uint64_t w[2];

	memcpy(w, &eq, 16);
	return (w[0] | w[1]) != 0;
#endif
}

/* Sixteen tags: one comparison in the copy for AVX2 (see shmt__an_feed). */
typedef uint16_t tag16 __attribute__((vector_size(32)));

/* Whether any of the P tags at TAGS (P a multiple of 8) is TAG (SPREAD
 * has it in every lane): the comparisons of all of them OR-ed, then one
 * test, with no branch before it (with P a constant, a straight line of
 * P / 8 comparisons, or P / 16 when WIDE: only in a function compiled for
 * 32-byte vectors). */
static inline __attribute__((always_inline)) int
tags_any(const uint16_t *tags, tag8 spread, uint16_t tag, uint32_t p,
    const int wide)
{
	/* A group's tags start on a 64-byte boundary (see group_at_p), so
	 * each comparison can take its tags straight from memory. */
	const uint16_t *at = __builtin_assume_aligned(tags, 32);
	tag8 acc = { 0 };
	uint32_t b = 0;

	if (wide) {
		tag16 sp16 = (tag16){ 0 } + tag, acc16 = { 0 };
		tag8 half;

#pragma GCC unroll 8
		for (; b + 16 <= p; b += 16) {
			tag16 x;

			memcpy(&x, at + b, 32);
			acc16 |= (tag16)(x == sp16);
		}
		memcpy(&acc, &acc16, 16);
		memcpy(&half, (char *)&acc16 + 16, 16);
		acc |= half;
	}
#pragma GCC unroll 16
	for (; b < p; b += 8)
		acc |= tags_eq8(at + b, spread);
	return tags_any8(acc);
}

/* Which of the sixteen tags at TAGS (the first eight only when HALF) are
 * TAG (SPREAD has it in every lane): bit i for tag i. */
static inline __attribute__((always_inline)) uint32_t
tags_mask16(const uint16_t *tags, tag8 spread, uint16_t tag, int half)
{
#ifdef __SSE2__
	__m128i lo = (__m128i)tags_eq8(tags, spread);
	__m128i hi = half ? _mm_setzero_si128() :
	    (__m128i)tags_eq8(tags + 8, spread);

	(void)tag;
	/* Each 16-bit lane (0 or -1) becomes a byte, then a bit. */
	return (uint32_t)_mm_movemask_epi8(_mm_packs_epi16(lo, hi));
#else
	uint32_t m = 0;

	(void)spread;
	for (uint32_t i = 0; i < (half ? 8U : 16U); i++)
		m |= (uint32_t)(tags[i] == tag) << i;
	return m;
#endif
}

/* Write mark M: (T, D, N, SQ), one word at a time.  Release stores (plain
 * stores on x86): a reader that sees any of them sees every store before
 * it, the odd mark version of a halving included, without a fence (gcc
 * cannot instrument one for ThreadSanitizer). */
static inline void
mark_put(struct shmt_an_mark *m, uint64_t t, uint64_t d, uint64_t n,
    uint64_t sq)
{
	__atomic_store_n(&m->mk_t, t, __ATOMIC_RELEASE);
	__atomic_store_n(&m->mk_d, d, __ATOMIC_RELEASE);
	__atomic_store_n(&m->mk_n, n, __ATOMIC_RELEASE);
	__atomic_store_n(&m->mk_sq, sq, __ATOMIC_RELEASE);
}

/*
 * Perhaps take a piece mark of summary S before a request counted at T,
 * the latest time counted before it being TP, with d D and n N (weight
 * W = N + (probe + 1) D).  The piece since the last mark is cut when its
 * weight reaches the step, or a quarter of it and T is later than TP; a
 * request at TP past that quarter, or a cut at TP, makes the next one come
 * here too, so a burst at one moment is cut off at its end, whatever its
 * size (the first request of a later moment cuts).  When the an->pieces
 * marks are all used, every other one is dropped first (marks 1, 3, 5, ...
 * are kept, so each piece is at most two of the old ones) and the step
 * doubles; the marks' version is odd meanwhile, so a reader retries or
 * takes no piece mark.  Marks are taken in the order of counting, with
 * times that never go back.  Returns the sequence number of the latest
 * mark.
 *
 * "The next one comes here too": with HOLD NULL (the shared stripe, whose
 * writers take turns) am_next becomes w + 1, so every request comes back
 * until one cuts.  An owner (HOLD its thread's flag) instead sets *HOLD,
 * and am_next to the weight at which a request at the same moment cuts
 * (the last mark's plus the step); the owner then comes back at that
 * weight or at its first request of a later moment (sum_update_p), which
 * are the only requests that cut from here, so it cuts where the other
 * way does without a call per request while a moment lasts (with a coarse
 * clock a moment is a tick: thousands of requests).  A new owner of the
 * stripe (its last one died) finds *HOLD clear: it cuts at that weight,
 * or after a cut at a later moment, only later, so pieces are never
 * heavier than the step and the bounds hold as they are.
 */
static __attribute__((noinline)) uint64_t
piece_cut(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t tp,
    uint64_t t, uint64_t d, uint64_t n, uint64_t w, uint32_t *hold)
{
	struct shmt_an_mark *mk = pieces_of(an, s);
	uint64_t np = __atomic_load_n(&s->am_pieces, __ATOMIC_RELAXED);
	uint64_t step = __atomic_load_n(&s->am_step, __ATOMIC_RELAXED);
	uint64_t seq = __atomic_load_n(&s->am_seq, __ATOMIC_RELAXED);
	uint64_t ver = __atomic_load_n(&s->am_mver, __ATOMIC_RELAXED);
	uint64_t wl = 0, gap;

	if (np > an->pieces || (ver & 1)) {
		/* Damaged, or a thinning cut short: start over. */
		np = 0;
		__atomic_store_n(&s->am_pieces, 0, __ATOMIC_RELAXED);
		ver |= 1;
		__atomic_store_n(&s->am_mver, ++ver, __ATOMIC_RELEASE);
	}
	if (step < 4 || step > (1ULL << 60))
		step = an->probe + 1ULL;
	if (np > 0) {
		struct shmt_an_mark *l = &mk[np - 1];
		uint64_t last = __atomic_load_n(&l->mk_t, __ATOMIC_RELAXED);

		wl = __atomic_load_n(&l->mk_n, __ATOMIC_RELAXED) +
		    (an->probe + 1ULL) * __atomic_load_n(&l->mk_d,
		    __ATOMIC_RELAXED);
		if (tp < last)
			tp = last;
		if (wl > w)
			wl = w;
	}
	if (t < tp)
		t = tp;
	if ((w - wl < step && t == tp) || w == wl) {
		/* The same moment as the last request: no cut yet, but the
		 * first request of a later moment cuts (it comes back here),
		 * so that a burst at one moment ends a piece. */
		if (hold != NULL)
			*hold = 1;
		__atomic_store_n(&s->am_next, hold != NULL ? wl + step : w + 1,
		    __ATOMIC_RELAXED);
		return seq;
	}
	seq = (seq + 1) & 0xffffffffULL;
	if (seq == 0)
		seq = 0xffffffffULL;    /* saturated */
	if (np >= an->pieces && an->pieces >= 2) {
		/* Odd while the marks move; mark_put's release stores keep
		 * this store before theirs. */
		__atomic_store_n(&s->am_mver, ver | 1, __ATOMIC_RELAXED);
		for (uint64_t i = 0; i < np / 2; i++) {
			struct shmt_an_mark *from = &mk[2 * i + 1];

			mark_put(&mk[i],
			    __atomic_load_n(&from->mk_t, __ATOMIC_RELAXED),
			    __atomic_load_n(&from->mk_d, __ATOMIC_RELAXED),
			    __atomic_load_n(&from->mk_n, __ATOMIC_RELAXED),
			    __atomic_load_n(&from->mk_sq, __ATOMIC_RELAXED));
		}
		np /= 2;
		step *= 2;
		__atomic_store_n(&s->am_pieces, np, __ATOMIC_RELAXED);
		__atomic_store_n(&s->am_step, step, __ATOMIC_RELAXED);
		__atomic_store_n(&s->am_mver, (ver | 1) + 1, __ATOMIC_RELEASE);
	}
	gap = t - tp < 0xffffffffULL ? t - tp : 0xffffffffULL;
	if (np < an->pieces) {
		mark_put(&mk[np], t, d, n, gap << 32 | seq);
		__atomic_store_n(&s->am_pieces, np + 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&s->am_seq, seq, __ATOMIC_RELEASE);
	/* After a cut at the moment of the last request, the next request
	 * comes here too (the moment may go on); else after a quarter step.
	 * This mark's weight is w. */
	if (hold != NULL)
		*hold = t == tp;
	__atomic_store_n(&s->am_next, t != tp ? w + step / 4 :
	    hold != NULL ? w + step : w + 1, __ATOMIC_RELAXED);
	return seq;
}

/* No more crossing records in summary S this sub-window (a writer died
 * in the middle of a count, or the log is damaged): readers then use none
 * of its records.  An atomic OR, so that an owner's CAS never undoes it. */
static void
rec_off(struct shmt_an_sum *s)
{
	__atomic_fetch_or(&s->am_rlog, (uint64_t)SHMT_AN_REC_OFF << 24,
	    __ATOMIC_RELEASE);
}

/* Keep the records of summary S whose count is a multiple of 2^WANT
 * (from the log word *RL, shift below WANT), with the version odd while
 * they move.  Returns 0 with *RL the new word, or -1 when the log was
 * turned off meanwhile (the owner's CAS failed). */
static int
rec_thin(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t *rl,
    uint64_t want)
{
	uint64_t *r = recs_of(an, s), ver = *rl >> 32, sh = (*rl >> 24) & 0xff;
	uint64_t n = *rl & 0xffffff, j = 0, odd = shmt__an_rlog(ver | 1, sh, n);
	uint64_t k = want - sh, done;

	if (!__atomic_compare_exchange_n(&s->am_rlog, rl, odd, 0,
	    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return -1;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = __atomic_load_n(&r[i], __ATOMIC_RELAXED);
		uint64_t q = v & SHMT_AN_REC_QMAX;

		if (k < SHMT_AN_REC_QBITS && (q & ((1ULL << k) - 1)) == 0)
			__atomic_store_n(&r[j++], (v & ~(uint64_t)SHMT_AN_REC_QMAX) |
			    q >> k, __ATOMIC_RELEASE);
	}
	done = shmt__an_rlog((ver | 1) + 1, want, j);
	if (!__atomic_compare_exchange_n(&s->am_rlog, &odd, done, 0,
	    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return -1;
	*rl = done;
	return 0;
}

/*
 * Record that the counter at place SLOT of summary S (sub-window ID)
 * reached count C, a multiple of the log's step, by a request at T: after
 * that count's store, so a record never says more than what happened (a
 * writer killed between the two leaves a crossing unrecorded: the reaper
 * then turns the log off, see rec_off).  Its time is rounded up (a later
 * time only says less).  The owner alone writes records; it changes the
 * log word by CAS, so that a reaper's rec_off is never undone.
 */
static __attribute__((noinline)) void
rec_put(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    uint32_t slot, uint64_t c, uint64_t t)
{
	uint64_t *r = recs_of(an, s);
	uint64_t rl = __atomic_load_n(&s->am_rlog, __ATOMIC_RELAXED);
	uint64_t sh = (rl >> 24) & 0xff, n = rl & 0xffffff, want, S, T, tb;

	if (sh == SHMT_AN_REC_OFF)
		return;
	if (((rl >> 32) & 1) || sh > SHMT_AN_REC_SHIFT_MAX || n > an->recs ||
	    an->recs == 0 || slot >> an->rec_sbits != 0) {
		rec_off(s);     /* damaged, or a thinning cut short */
		return;
	}
	want = sh;
	while (want <= SHMT_AN_REC_SHIFT_MAX && (c >> want) > SHMT_AN_REC_QMAX)
		want++;
	for (;;) {
		if (want == sh && n < an->recs)
			break;
		if (want == sh)
			want++;
		if (want > SHMT_AN_REC_SHIFT_MAX) {
			rec_off(s);
			return;
		}
		if (rec_thin(an, s, &rl, want) != 0)
			return;
		sh = want;
		n = rl & 0xffffff;
	}
	if ((c & ((1ULL << sh) - 1)) != 0)
		return;         /* not a multiple of the larger step */
	/* Its time in the sub-window (a later one only says less: a clock
	 * behind the summary's counts at its start). */
	S = shmt__tile_start(id, an->window, an->subw);
	T = t > S ? t - S : 0;
	tb = 64 - SHMT_AN_REC_QBITS - an->rec_sbits;
	if (T >> tb != 0)
		T = (1ULL << tb) - 1;
	__atomic_store_n(&r[n], T << (64 - tb) |
	    (uint64_t)slot << SHMT_AN_REC_QBITS | c >> sh, __ATOMIC_RELEASE);
	__atomic_compare_exchange_n(&s->am_rlog, &rl,
	    shmt__an_rlog(rl >> 32, sh, n + 1), 0, __ATOMIC_RELEASE,
	    __ATOMIC_RELAXED);
}

/* Turn off the crossing records of every summary of stripe P: its writer
 * died, perhaps between a count and its record. */
static void
recs_off_stripe(const struct shmt_an *an, uint32_t p)
{
	for (uint32_t ring = 0; ring < an->rings; ring++)
		rec_off(sum_at(an, ring, p));
}

/*
 * Count one request of HASH in summary S, at time T (for its marks).  A
 * counter is live when its count is over d; the key's counter is the live
 * one whose tag and hash match.  A counter's word is its count shifted
 * left by 16 bits and, below it, the sequence number of the latest mark
 * when it was last counted (saturated at SHMT_AN_SEQ_MAX), so "live" is
 * one comparison of the word with d << 16 | 0xffff.  The tags are compared
 * sixteen at a time, with no branch per counter; a miss then looks for the
 * first counter that is not live.  The writer is the stripe's one owner,
 * so its plain reads of its own tags see its own stores; other threads
 * read counts and hashes only, atomically.
 *
 * Claiming a free counter takes three stores: the tag, the hash, then the
 * count d + 1.  A free counter is not live (its count is at most d, and d
 * never goes down), so readers ignore it whatever its hash; a counter's
 * count never goes down until the summary is cleared, and a claim raises
 * it, so a reader that reads a count, then the hash, then a d under that
 * count has a matching pair (see sum_read).  A crash between the stores
 * leaves a counter that is not live, free to take again.
 */
static inline __attribute__((always_inline)) void
sum_update_p(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    uint32_t slice, uint64_t tp, uint64_t t, uint64_t hash, const void *key,
    size_t klen, int kind, uint32_t *hold, const uint32_t p, const int wide)
{
	uint32_t gi = shmt__an_group(an->groups, hash);
	struct group g = group_at_p(an, s, gi, p);
	uint64_t cur = __atomic_load_n(&s->am_id, __ATOMIC_RELAXED), d, low, n;
	uint64_t seq, sb, w, dr;
	uint16_t tag = (uint16_t)(hash >> SHMT_AN_TAG_SHIFT);
	tag8 spread = (tag8){ 0 } + tag;
	uint32_t j;

	if (id < cur) {
		id = cur;       /* this thread's clock is behind: count it in the
		                 * newer sub-window, at its latest slice */
		slice = 0;
	}
	if (id != cur || (__atomic_load_n(&s->am_ver, __ATOMIC_RELAXED) & 1))
		sum_reset(an, s, id);
	/* The latest time counted at, before the count (am_n's release
	 * store below publishes it first): a reader that finds it before the
	 * exact window's start knows every request it read came before.  T
	 * is never below it: the owner's time starts from it when it takes
	 * up a summary (shmt__an_feed), the shared stripe's under its lock. */
	__atomic_store_n(&s->am_tmax, t, __ATOMIC_RELAXED);
	d = __atomic_load_n(&s->am_d, __ATOMIC_RELAXED);
	n = __atomic_load_n(&s->am_n, __ATOMIC_RELAXED);
	seq = __atomic_load_n(&s->am_seq, __ATOMIC_RELAXED);
	/* The first request of a later slice marks d and n as they are
	 * before it, for every slice started since the last mark (a request
	 * of an earlier slice, from a thread whose clock is behind, counts in
	 * the latest).  A damaged am_slice (>= SHMT_AN_SLICES) marks nothing,
	 * and readers then use no slice mark. */
	cur = __atomic_load_n(&s->am_slice, __ATOMIC_RELAXED);
	if (slice > cur) {
		if (seq < 0xffffffffULL)
			seq++;
		for (uint64_t k = cur + 1; k <= slice; k++)
			mark_put(&s->am_smark[k - 1], t, d, n, seq);
		__atomic_store_n(&s->am_seq, seq, __ATOMIC_RELEASE);
		__atomic_store_n(&s->am_slice, slice, __ATOMIC_RELEASE);
	}
	/* Perhaps a piece mark, once the weight reaches am_next, or while
	 * the owner holds a moment open, at a later moment (see piece_cut). */
	w = n + (p + 1ULL) * d;
	if (__builtin_expect(w >= __atomic_load_n(&s->am_next,
	    __ATOMIC_RELAXED) || (hold != NULL && *hold && t != tp), 0))
		seq = piece_cut(an, s, tp, t, d, n, w, hold);
	sb = seq < SHMT_AN_SEQ_MAX ? seq : SHMT_AN_SEQ_MAX;
	dr = d << SHMT_AN_SEQ_BITS | SHMT_AN_SEQ_MAX;  /* word > dr: live */
	/* Most requests of a noisy stream match no tag: one pass over the
	 * tags tells, with no branch per tag, and only a match looks for the
	 * matching lanes (a mask of sixteen at a time, visited by its set
	 * bits), their counts and hashes. */
	if (tags_any(g.tags, spread, tag, p, wide)) {
		for (uint32_t base = 0; base < p; base += 16) {
			uint32_t m = tags_mask16(g.tags + base, spread, tag,
			    base + 8 >= p);

			while (m != 0) {
				uint64_t c;

				j = base + (uint32_t)__builtin_ctz(m);
				m &= m - 1;
				c = g.cnt[j];
				if (c <= dr || __atomic_load_n(&g.hash[j],
				    __ATOMIC_RELAXED) != hash)
					continue;
				c >>= SHMT_AN_SEQ_BITS;
				__atomic_store_n(&g.cnt[j],
				    (c + 1) << SHMT_AN_SEQ_BITS | sb,
				    __ATOMIC_RELEASE);
				/* A count at a multiple of the log's step is
				 * recorded (shift SHMT_AN_REC_OFF: never, as
				 * c + 1 < 2^48). */
				if (__builtin_expect(((c + 1) & ((1ULL <<
				    ((__atomic_load_n(&s->am_rlog,
				    __ATOMIC_RELAXED) >> 24) & 63)) - 1)) == 0,
				    0))
					rec_put(an, s, id, gi * p + j, c + 1, t);
				/* Name a key when its count here reaches
				 * NAME_AT, and again at each power of two
				 * above (its level rises: name_put), so
				 * O(log n) times per summary, and never for
				 * the long tail of a noisy stream, whose keys
				 * come and go below it.  A hot key reaches it
				 * at once. */
				c = c + 1 - d;
				if (__builtin_expect(c >= NAME_AT &&
				    (c & (c - 1)) == 0, 0))
					name_put(an, hash, key, klen, kind, id,
					    (uint32_t)(__builtin_ctzll(c) -
					    __builtin_ctz(NAME_AT)));
				goto counted;
			}
		}
	}
	/* The first free counter.  The floor says none is free while d is
	 * under it: a search that finds every counter live records the least
	 * count it saw, counts only grow, and a claim happens only on a free
	 * counter.  So a full group steps d at once, and a search over the
	 * group happens once per step of d, at most: O(1) per request
	 * amortized, since each step of d removes p + 1 units.  The hint says
	 * no free counter lies below it: a claim takes the first free one and
	 * moves the hint past it, and only a step of d frees counters, which
	 * sets it back to 0.  Both only save reads: a wrong hint or floor (a
	 * crash, a damaged segment) costs a step of d too many, which the
	 * bounds below still hold with (they hold for any step of d), and the
	 * answer reports its d. */
	j = p;
	if (d >= g.floor[0]) {
		j = (uint32_t)g.hint[0];
		if (j >= p)
			j = 0;
		for (; j < p && g.cnt[j] > dr; j++)
			;
		if (j == p) {
			low = UINT64_MAX;
			for (j = 0; j < p && g.cnt[j] > dr; j++)
				if (g.cnt[j] < low)
					low = g.cnt[j];
			if (j == p)
				__atomic_store_n(g.floor,
				    low >> SHMT_AN_SEQ_BITS, __ATOMIC_RELAXED);
		}
	}
	if (j < p) {
		__atomic_store_n(&g.tags[j], tag, __ATOMIC_RELAXED);
		__atomic_store_n(&g.hash[j], hash, __ATOMIC_RELEASE);
		__atomic_store_n(&g.cnt[j], (d + 1) << SHMT_AN_SEQ_BITS | sb,
		    __ATOMIC_RELEASE);
		__atomic_store_n(g.hint, j + 1, __ATOMIC_RELAXED);
	} else {
		__atomic_store_n(&s->am_d, d + 1, __ATOMIC_RELEASE);
		__atomic_store_n(g.hint, 0, __ATOMIC_RELAXED);
	}
counted:
	__atomic_store_n(&s->am_n, n + 1, __ATOMIC_RELEASE);
}

/* Count one request in summary S: the default group of 128 counters (1 MiB,
 * 12 sub-windows) has its own copy, with every size a constant. */
static inline __attribute__((always_inline)) void
sum_update(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    uint32_t slice, uint64_t tp, uint64_t t, uint64_t hash, const void *key,
    size_t klen, int kind, uint32_t *hold, const int wide)
{
	if (an->probe == 128)
		sum_update_p(an, s, id, slice, tp, t, hash, key, klen, kind,
		    hold, 128, wide);
	else
		sum_update_p(an, s, id, slice, tp, t, hash, key, klen, kind,
		    hold, an->probe, wide);
}


/* T's sub-window and slice for a request at NOW (a later slice, a later
 * sub-window, or a clock that went back). */
static __attribute__((noinline)) void
tls_turn(const struct shmt_an *an, struct an_tls *t, uint64_t now)
{
	if (now < t->sub_start || now >= t->sub_end) {
		t->id = shmt__tile_of(now, an->window, an->subw);
		t->sub_start = shmt__tile_start(t->id, an->window, an->subw);
		t->sub_end = shmt__tile_start(t->id + 1, an->window, an->subw);
		t->sum = sum_at(an, (uint32_t)(t->id % an->rings), t->stripe);
		t->slice_end = 0;
		t->hold = 0;
		/* An earlier owner of the stripe may have counted this
		 * summary (or a newer one in its place) at later times: this
		 * thread counts from its latest, so am_tmax never goes back. */
		if (__atomic_load_n(&t->sum->am_id, __ATOMIC_RELAXED) >= t->id &&
		    __atomic_load_n(&t->sum->am_tmax, __ATOMIC_RELAXED) > t->tmax)
			t->tmax = __atomic_load_n(&t->sum->am_tmax,
			    __ATOMIC_RELAXED);
	}
	if (now >= t->slice_end) {
		t->slice = slice_of(t->sub_start, t->sub_end, now);
		t->slice_end = slice_start(t->sub_start, t->sub_end,
		    t->slice + 1);
	}
}

static inline __attribute__((always_inline)) void
feed(shmt_t *h, uint64_t hash, const void *key, size_t klen, int kind,
    uint64_t now, const int wide)
{
	struct shmt_an *an = h->an;
	struct an_tls *t;
	struct shmt_an_sum *s;
	uint64_t tp, tn;
	int shared;

	if (an == NULL || (kind == SHMT_HOT_CLIENT && !an->clients))
		return;
	hash = kind == SHMT_HOT_CLIENT ? hash | SHMT_AN_CLIENT_BIT :
	    hash & ~SHMT_AN_CLIENT_BIT;
	t = tls_get(h);
	/* The divisions happen once per slice, not once per request. */
	if (__builtin_expect(now >= t->slice_end || now < t->sub_start, 0))
		tls_turn(an, t, now);
	/* The time a request counts at, for the marks: never before the
	 * latest this stripe counted at (the owner's, or under the shared
	 * stripe's lock, the shared stripe's). */
	s = t->sum;
	shared = t->stripe == SHMT_AN_STRIPES;
	if (shared) {
		if (shared_lock(an) != 0)
			return;
		tp = __atomic_load_n(&s->am_tmax, __ATOMIC_RELAXED);
		tn = now > tp ? now : tp;
		__atomic_store_n(&s->am_tmax, tn, __ATOMIC_RELAXED);
	} else {
		tp = t->tmax;
		tn = t->tmax = now > tp ? now : tp;
	}
	sum_update(an, s, t->id, t->slice, tp, tn, hash, key, klen, kind,
	    shared ? NULL : &t->hold, wide);
	if (shared)
		shared_unlock(an);
}

/*
 * On an x86-64 with AVX2 the whole request runs in a copy compiled for it:
 * its tags are compared sixteen at a time with three-operand instructions
 * (8 comparisons and 7 ORs for 128 tags, where SSE2 takes 16 comparisons,
 * 15 ORs and a register copy before each comparison).  Which copy is
 * decided once per process (the processor, and SHMT_ANALYZER_SSE2=1 in the
 * environment asks for the portable copy: the tests run both), then read
 * on every call (a load and a test), and the call goes on as a jump.  Any
 * other target runs the portable copy.
 */
static __attribute__((noinline)) void
feed_base(shmt_t *h, uint64_t hash, const void *key, size_t klen, int kind,
    uint64_t now)
{
	feed(h, hash, key, klen, kind, now, 0);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX2__)
static __attribute__((target("avx2"), noinline)) void
feed_avx2(shmt_t *h, uint64_t hash, const void *key, size_t klen, int kind,
    uint64_t now)
{
	feed(h, hash, key, klen, kind, now, 1);
}
#define AN_FEED_AVX2 1

/* 1: feed_avx2, 0: feed_base, -1: not decided yet (threads that race on
 * it decide alike). */
static int an_wide = -1;

static __attribute__((noinline)) int
wide_decide(void)
{
	const char *e = getenv("SHMT_ANALYZER_SSE2");
	int w;

	/* Safe to repeat; needed when the first request comes from a
	 * constructor that runs before libgcc's. */
	__builtin_cpu_init();
	w = __builtin_cpu_supports("avx2") && (e == NULL || *e != '1');

	__atomic_store_n(&an_wide, w, __ATOMIC_RELAXED);
	return w;
}
#endif

void
shmt__an_feed(shmt_t *h, uint64_t hash, const void *key, size_t klen,
    int kind, uint64_t now)
{
#ifdef AN_FEED_AVX2
	int w = __atomic_load_n(&an_wide, __ATOMIC_RELAXED);

	if (__builtin_expect(w < 0, 0))
		w = wide_decide();
	if (w) {
		feed_avx2(h, hash, key, klen, kind, now);
		return;
	}
#elif defined(__AVX2__)
	feed(h, hash, key, klen, kind, now, 1);
	return;
#endif
	feed_base(h, hash, key, klen, kind, now);
}
