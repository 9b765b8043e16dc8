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
 * 3. The answer.  A query adds the summaries of the sub-window holding now
 *    and the subw before it (the span, which holds the exact window, see
 *    shmt_top_keys): a key's count in the span lies in [L, L + D], L the
 *    sum of its effective counts and D the sum of the d, and a key absent
 *    everywhere had at most D <= N / (p + 1) requests in the span (N the
 *    span's requests).  Every key whose upper bound L + Dw is over the
 *    threshold of Nwin (requests all inside the exact window, see below)
 *    is listed, with `error` = D and Dw below in place of D.
 *    - The exact window.  The oldest sub-window is cut in SHMT_AN_SLICES
 *      slices (slice_of), and a summary marks d and n when the first
 *      request of each slice comes, before counting it.  For any key x and
 *      the mark of slice k: x's requests counted after the mark are at most
 *      c_end + (d_end - d_mark).  (Each of them raises c_x by one or is a
 *      step of d with x absent; each other step of d lowers c_x by at most
 *      one; so c_end >= c_mark + f' - (d_end - d_mark) >= f' - Delta d.)
 *      With k0 the slice of now - W, every request at or after now - W is
 *      counted after mark k0 (slice_of is monotone), and every request
 *      counted after mark k0 + 1 is after now - W.  So a key's requests in
 *      the exact window are at most L + Dw, with Dw (`error_window`) the d
 *      of the newest subw summaries plus the growth of the oldest ones' d
 *      since mark k0, and Nwin (`total_window`) counts the newest subw
 *      sub-windows and the oldest's requests after mark k0 + 1.
 *    - Missed keys: a key with more than theta of the exact window's
 *      requests had more than theta Nwin of them; if it is in some
 *      summary, L + Dw is at least that and it is listed; if it is in
 *      none, it had at most Dw.  So when Dw <= theta Nwin (`certified`)
 *      nothing over the threshold of the exact window is missing.
 *    - When that holds.  Dw <= D <= N / (p + 1), so every answer is
 *      certified when the oldest sub-window holds at most
 *      1 - 1 / (theta (p + 1)) of the span's requests (92.2% with the
 *      defaults, 10% and p = 128).  Past that, the oldest sub-window's
 *      offsets count only by their growth since mark k0, and each of those
 *      steps of d drops one request counted after the mark: their sum is
 *      at most the oldest sub-window's requests from slice k0 on.  So an
 *      answer can be uncertified only when the oldest sub-window holds
 *      more than 92.2% of the span AND its part from slice k0 on (the
 *      slice holding now - W, at most W / (6 subw) long, and after) holds
 *      more than theta Nwin less the newest offsets, about the threshold
 *      of the exact minute's other requests, while its summaries are full.
 *      A burst wholly before slice k0, however large, costs nothing; the
 *      answer says certified = 0 in the corner.
 *    - Listed keys: L + Dw > theta Nwin, so each had more than
 *      theta Nwin - Dw requests in the span.
 *    A request whose thread's clock is behind its stripe's (the shared
 *    stripe, a clock that stepped back) counts at the stripe's time.
 * 4. Cost.  A request compares the p tags of its group sixteen at a time
 *    and reads a count and a hash only on a tag match.  A miss looks for a
 *    free counter only when d has reached the group's floor (the least
 *    count a search that found none free saw): a full group steps d at
 *    once, and a search over the group happens at most once per step of d,
 *    which removes p + 1 units: O(1) reads per request, amortized.
 * 5. Writers.  A summary is written by the one thread that owns its stripe
 *    (SHMT_AN_STRIPES of them); threads beyond that share one more stripe
 *    under a lock, and the lines of that stripe are then written by
 *    several processes in turn.  The bounds above hold in either case.
 *
 * Crash model: every change is one aligned store, ordered so that a
 * reader or a later owner never takes a counter half-claimed (a claim
 * writes the tag, the hash, then the count that makes it live).  A writer
 * killed between two stores leaves a summary whose bounds hold; its stripe
 * is freed when its process is found dead, and the next owner carries on.
 */
#include "analyzer.h"

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

static uint64_t
pow2_floor(uint64_t v)
{
	return v == 0 ? 0 : 1ULL << (63 - __builtin_clzll(v));
}

/* A group of P counters (P a multiple of 8): P 16-bit tags, then P counts,
 * the hint and the floor, on whole cache lines; its P hashes lie apart. */
static inline uint32_t
tag_bytes_of(uint32_t p)
{
	return (2 * p + 15) & ~15U;
}

static inline uint32_t
meta_bytes_of(uint32_t p)
{
	return (tag_bytes_of(p) + 8 * p + 16 + 63) & ~63U;
}

int
shmt__an_geometry(uint64_t bytes, uint64_t window, uint32_t subw, uint32_t ppm,
    struct shmt_an *an, const char **why)
{
	uint64_t rest, per, names;
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
	/* A quarter for names, the rest for summaries. */
	names = pow2_floor(bytes / 4 / sizeof(struct shmt_an_name));
	an->lock_off = SHMT_LINE * 2;   /* after the owners (16 x 16 bytes) */
	an->sums_off = an->lock_off + SHMT_LINE;
	rest = bytes - an->sums_off - names * sizeof(struct shmt_an_name);
	per = rest / ((uint64_t)an->rings * an->stripes);
	if (per <= sizeof(struct shmt_an_sum) + 64)
		return -EINVAL;
	per -= sizeof(struct shmt_an_sum) + 64;  /* header, rounding */
	an->probe = SHMT_AN_PROBE_MAX;
	while (an->probe > SHMT_AN_PROBE_STEP &&
	    meta_bytes_of(an->probe) + 8ULL * an->probe > per)
		an->probe -= SHMT_AN_PROBE_STEP;
	if (an->probe < minp) {
		*why = "analyzer_bytes: too small for this threshold (each "
		    "summary needs groups of 1.2 / threshold counters)";
		return -EINVAL;
	}
	an->tag_bytes = tag_bytes_of(an->probe);
	an->meta_bytes = meta_bytes_of(an->probe);
	an->groups = (uint32_t)(per / (an->meta_bytes + 8ULL * an->probe));
	if (an->groups == 0 || an->groups > (1U << 16)) {
		if (an->groups != 0)
			*why = "analyzer_bytes: too large for this threshold "
			    "(at most 65536 groups of counters)";
		return -EINVAL;
	}
	an->cap = an->groups * an->probe;
	an->hashes_off = sizeof(struct shmt_an_sum) +
	    (uint64_t)an->groups * an->meta_bytes;
	an->sum_size = (an->hashes_off + 8ULL * an->cap + 63) & ~63ULL;
	an->names_off = an->sums_off +
	    an->sum_size * an->rings * an->stripes;
	an->names = (uint32_t)names;
	if (an->names_off + names * sizeof(struct shmt_an_name) > bytes)
		return -EINVAL;
	return 0;
}

static struct shmt_an_owner *
owners(const struct shmt_an *an)
{
	return (struct shmt_an_owner *)an->base;
}

static struct shmt_an_sum *
sum_at(const struct shmt_an *an, uint32_t ring, uint32_t stripe)
{
	return (struct shmt_an_sum *)(an->base + an->sums_off +
	    ((uint64_t)ring * an->stripes + stripe) * an->sum_size);
}

/* Group G of summary S: its tags, counts and hashes. */
struct group {
	uint16_t *tags;
	uint64_t *cnt, *hash;
	uint64_t *hint;         /* no free counter below it (see below) */
	uint64_t *floor;        /* no counter is free while d is under it */
};

/* The same for groups of P counters (P a constant where the caller can
 * make it one: the sizes below then fold away). */
static inline __attribute__((always_inline)) struct group
group_at_p(const struct shmt_an *an, struct shmt_an_sum *s, uint32_t g,
    uint32_t p)
{
	uint32_t tag_bytes = tag_bytes_of(p), meta_bytes = meta_bytes_of(p);
	char *m = (char *)(s + 1) + (uint64_t)g * meta_bytes;

	return (struct group){
		.tags = (uint16_t *)m,
		.cnt = (uint64_t *)(m + tag_bytes),
		.hint = (uint64_t *)(m + tag_bytes) + p,
		.floor = (uint64_t *)(m + tag_bytes) + p + 1,
		.hash = (uint64_t *)((char *)s + an->hashes_off) +
		    (uint64_t)g * p,
	};
}

static inline struct group
group_at(const struct shmt_an *an, struct shmt_an_sum *s, uint32_t g)
{
	return group_at_p(an, s, g, an->probe);
}

static struct shmt_an_name *
names(const struct shmt_an *an)
{
	return (struct shmt_an_name *)(an->base + an->names_off);
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
	struct shmt_an_sum *sum;        /* this sub-window's summary */
};
static __thread struct an_tls an_tls[4];

static uint64_t
owner_word(const shmt_t *h)
{
	return ((uint64_t)(uint32_t)shmt__env_pid() << 32) | h->uid;
}

int
shmt__an_reap(shmt_t *h)
{
	struct shmt_an *an = h->an;
	int n = 0;

	for (uint32_t p = 0; an != NULL && p < SHMT_AN_STRIPES; p++) {
		struct shmt_an_owner *o = &owners(an)[p];
		uint64_t w = __atomic_load_n(&o->ao_owner, __ATOMIC_ACQUIRE);

		if (w == 0 || shmt__pid_alive((pid_t)(w >> 32),
		    __atomic_load_n(&o->ao_start, __ATOMIC_RELAXED)))
			continue;
		if (__atomic_compare_exchange_n(&o->ao_owner, &w, 0, 0,
		    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			n++;
	}
	return n;
}

static uint32_t
stripe_claim(shmt_t *h)
{
	struct shmt_an *an = h->an;
	uint64_t me = owner_word(h);

	for (int round = 0; round < 2; round++) {
		for (uint32_t p = 0; p < SHMT_AN_STRIPES; p++) {
			struct shmt_an_owner *o = &owners(an)[p];
			uint64_t free_word = 0;

			if (__atomic_compare_exchange_n(&o->ao_owner, &free_word,
			    me, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				__atomic_store_n(&o->ao_start,
				    shmt__proc_start(shmt__env_pid()), __ATOMIC_RELAXED);
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

static struct an_tls *
tls_get(shmt_t *h)
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
	t->sub_start = t->sub_end = 0;
	return t;
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
		    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 0;
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

/* Keep KEY's first bytes under HASH, unless they are there already.  Two
 * writers may interleave on one entry; the check word makes a mixed entry
 * read as absent. */
static void
name_put(const struct shmt_an *an, uint64_t hash, const void *key,
    size_t klen, int kind)
{
	struct shmt_an_name *e = &names(an)[(hash >> 20) & (an->names - 1)];
	uint32_t kept = klen < SHMT_AN_NAME_BYTES ? (uint32_t)klen :
	    SHMT_AN_NAME_BYTES;
	uint8_t buf[SHMT_AN_NAME_BYTES] = { 0 };

	if (__atomic_load_n(&e->an_hash, __ATOMIC_RELAXED) == hash)
		return;
	memcpy(buf, key, kept);
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
	__atomic_store_n(&e->an_check,
	    name_check(hash, (uint32_t)klen, (uint32_t)kind, kept, buf),
	    __ATOMIC_RELEASE);
	__atomic_store_n(&e->an_hash, hash, __ATOMIC_RELEASE);
}

static int
name_get(const struct shmt_an *an, uint64_t hash, shmt_hotkey_t *k)
{
	struct shmt_an_name *e = &names(an)[(hash >> 20) & (an->names - 1)];
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

/* ---- Updates ---------------------------------------------------------------- */

/* Make S the summary of sub-window ID: the owner alone does this, with
 * the version odd while the counters are cleared, so a reader never takes
 * a half-cleared summary for either sub-window.  A crash in the middle
 * leaves the version odd; the stripe's next owner clears it again. */
static void
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
	for (uint32_t k = 0; k + 1 < SHMT_AN_SLICES; k++) {
		__atomic_store_n(&s->am_mark_d[k], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->am_mark_n[k], 0, __ATOMIC_RELAXED);
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

/*
 * Count one request of HASH in summary S.  A counter is live when its count
 * is over d; the key's counter is the live one whose tag and hash match.
 * The tags are compared sixteen at a time, with no branch per counter; a miss
 * then looks for the first counter that is not live.  The writer is the
 * stripe's one owner, so its plain reads of its own tags see its own
 * stores; other threads read counts and hashes only, atomically.
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
    uint32_t slice, uint64_t hash, const void *key, size_t klen, int kind,
    const uint32_t p)
{
	struct group g = group_at_p(an, s, shmt__an_group(an->groups, hash), p);
	uint64_t cur = __atomic_load_n(&s->am_id, __ATOMIC_RELAXED), d, low;
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
	d = __atomic_load_n(&s->am_d, __ATOMIC_RELAXED);
	/* The first request of a later slice marks d and n as they are
	 * before it, for every slice started since the last mark (a request
	 * of an earlier slice, from a thread whose clock is behind, counts in
	 * the latest).  A damaged am_slice (>= SHMT_AN_SLICES) marks nothing,
	 * and readers then use no mark. */
	cur = __atomic_load_n(&s->am_slice, __ATOMIC_RELAXED);
	if (slice > cur) {
		uint64_t n = __atomic_load_n(&s->am_n, __ATOMIC_RELAXED);

		for (uint64_t k = cur + 1; k <= slice; k++) {
			__atomic_store_n(&s->am_mark_d[k - 1], d, __ATOMIC_RELAXED);
			__atomic_store_n(&s->am_mark_n[k - 1], n, __ATOMIC_RELAXED);
		}
		__atomic_store_n(&s->am_slice, slice, __ATOMIC_RELEASE);
	}
	/* Most requests of a noisy stream match no tag: one pass over the
	 * tags, sixteen at a time, tells, and only a match looks at counts and
	 * hashes. */
	for (uint32_t base = 0; base < p; base += 16) {
		/* Sixteen tags a test (eight in the last step of an odd
		 * number of eights). */
		tag8 eq = tags_eq8(g.tags + base, spread);

		if (base + 8 < p)
			eq |= tags_eq8(g.tags + base + 8, spread);
		if (!tags_any8(eq))
			continue;
		for (uint32_t lane = 0; lane < 16 && base + lane < p; lane++) {
			uint64_t c;

			if (g.tags[base + lane] != tag)
				continue;
			j = base + lane;
			c = g.cnt[j];
			if (c <= d || __atomic_load_n(&g.hash[j],
			    __ATOMIC_RELAXED) != hash)
				continue;
			__atomic_store_n(&g.cnt[j], c + 1, __ATOMIC_RELEASE);
			/* Name a key when its count here reaches NAME_AT:
			 * at most once per summary, and never for the long
			 * tail of a noisy stream, whose keys come and go
			 * below it.  A hot key reaches it at once. */
			if (c + 1 - d == NAME_AT)
				name_put(an, hash, key, klen, kind);
			goto counted;
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
		for (; j < p && g.cnt[j] > d; j++)
			;
		if (j == p) {
			low = UINT64_MAX;
			for (j = 0; j < p && g.cnt[j] > d; j++)
				if (g.cnt[j] < low)
					low = g.cnt[j];
			if (j == p)
				__atomic_store_n(g.floor, low, __ATOMIC_RELAXED);
		}
	}
	if (j < p) {
		__atomic_store_n(&g.tags[j], tag, __ATOMIC_RELAXED);
		__atomic_store_n(&g.hash[j], hash, __ATOMIC_RELEASE);
		__atomic_store_n(&g.cnt[j], d + 1, __ATOMIC_RELEASE);
		__atomic_store_n(g.hint, j + 1, __ATOMIC_RELAXED);
	} else {
		__atomic_store_n(&s->am_d, d + 1, __ATOMIC_RELEASE);
		__atomic_store_n(g.hint, 0, __ATOMIC_RELAXED);
	}
counted:
	__atomic_store_n(&s->am_n, __atomic_load_n(&s->am_n, __ATOMIC_RELAXED) + 1,
	    __ATOMIC_RELEASE);
}

/* Count one request in summary S: the default group of 128 counters (1 MiB,
 * 12 sub-windows) has its own copy, with every size a constant. */
static void
sum_update(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    uint32_t slice, uint64_t hash, const void *key, size_t klen, int kind)
{
	if (an->probe == 128)
		sum_update_p(an, s, id, slice, hash, key, klen, kind, 128);
	else
		sum_update_p(an, s, id, slice, hash, key, klen, kind, an->probe);
}

/* The slice of T in sub-window [S, E): floor((T - S) SLICES / (E - S)). */
static inline uint32_t
slice_of(uint64_t S, uint64_t E, uint64_t t)
{
	return (uint32_t)((unsigned __int128)(t - S) * SHMT_AN_SLICES / (E - S));
}

/* The first moment of slice K: slice_of(t) >= K exactly when t >= this. */
static inline uint64_t
slice_start(uint64_t S, uint64_t E, uint64_t k)
{
	return S + (uint64_t)(((unsigned __int128)(E - S) * k +
	    SHMT_AN_SLICES - 1) / SHMT_AN_SLICES);
}

void
shmt__an_feed(shmt_t *h, uint64_t hash, const void *key, size_t klen,
    int kind, uint64_t now)
{
	struct shmt_an *an = h->an;
	struct an_tls *t;
	struct shmt_an_sum *s;
	int shared;

	if (an == NULL || (kind == SHMT_HOT_CLIENT && !an->clients))
		return;
	hash = kind == SHMT_HOT_CLIENT ? hash | SHMT_AN_CLIENT_BIT :
	    hash & ~SHMT_AN_CLIENT_BIT;
	t = tls_get(h);
	/* The divisions happen once per sub-window, not once per request. */
	if (now < t->sub_start || now >= t->sub_end) {
		t->id = shmt__tile_of(now, an->window, an->subw);
		t->sub_start = shmt__tile_start(t->id, an->window, an->subw);
		t->sub_end = shmt__tile_start(t->id + 1, an->window, an->subw);
		t->sum = sum_at(an, (uint32_t)(t->id % an->rings), t->stripe);
		t->slice_end = 0;
	}
	if (now >= t->slice_end) {
		t->slice = slice_of(t->sub_start, t->sub_end, now);
		t->slice_end = slice_start(t->sub_start, t->sub_end,
		    t->slice + 1);
	}
	s = t->sum;
	shared = t->stripe == SHMT_AN_STRIPES;
	if (shared && shared_lock(an) != 0)
		return;
	sum_update(an, s, t->id, t->slice, hash, key, klen, kind);
	if (shared)
		shared_unlock(an);
}

/* ---- Queries ----------------------------------------------------------------- */

struct cand {
	uint64_t hash;
	uint64_t lower;
	int used;
};

struct cmap {
	struct cand *e;
	uint64_t cap, n;
};

static int
cmap_add(struct cmap *m, uint64_t hash, uint64_t c)
{
	uint64_t i = hash & (m->cap - 1);

	for (uint64_t k = 0; k < m->cap; k++, i = (i + 1) & (m->cap - 1)) {
		if (m->e[i].used && m->e[i].hash == hash) {
			m->e[i].lower += c;
			return 0;
		}
		if (!m->e[i].used) {
			m->e[i].used = 1;
			m->e[i].hash = hash;
			m->e[i].lower = c;
			m->n++;
			return 0;
		}
	}
	return -ENOMEM;
}

/* What a summary adds to an answer. */
struct sum_part {
	uint64_t D, N;          /* offsets and requests, over the span */
	uint64_t Dw, Nw;        /* the same from slice K0 on (see sum_read) */
};

/* Read summary S of sub-window ID into M (with SCRATCH, cap slots of
 * room); adds its d and n to P->D and P->N.  The exact window starts in
 * slice K0 of this sub-window (K0 = SHMT_AN_SLICES: before it): adds to
 * P->Dw what d grew by since the mark of slice K0 (the whole d when there
 * is no valid mark), and to P->Nw the requests after the mark of slice
 * K0 + 1 (all of them when K0 = SHMT_AN_SLICES).  A summary being
 * cleared, or holding another sub-window, adds nothing: what it held lies
 * outside the span. */
static int
sum_read(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    uint32_t k0, struct cand *scratch, struct cmap *m, struct sum_part *P)
{
	for (int tries = 0; tries < 4; tries++) {
		uint64_t v1 = __atomic_load_n(&s->am_ver, __ATOMIC_ACQUIRE), d, n;
		uint64_t sl, md = 0, mn, dw, nw;
		uint32_t k = 0;
		int rc;

		if ((v1 & 1) || __atomic_load_n(&s->am_id, __ATOMIC_ACQUIRE) != id)
			return 0;
		for (uint32_t g = 0; g < an->groups; g++) {
			struct group gr = group_at(an, s, g);

			for (uint32_t j = 0; j < an->probe; j++) {
				uint64_t c = __atomic_load_n(&gr.cnt[j], __ATOMIC_ACQUIRE);
				uint64_t h = __atomic_load_n(&gr.hash[j], __ATOMIC_ACQUIRE);
				uint64_t dd = __atomic_load_n(&s->am_d, __ATOMIC_ACQUIRE);

				/* A count over the d read after the hash was
				 * live from before the hash was read until
				 * then (counts only grow, d only grows, and a
				 * counter is claimed only when its count is
				 * at most d), so the hash is its key's, even
				 * while the owner keeps counting it.  A count
				 * at most dd would give a lower bound of 0 or
				 * less below anyway. */
				if (c <= dd || shmt__an_group(an->groups, h) != g)
					continue;
				scratch[k].hash = h;
				scratch[k++].lower = c;
			}
		}
		/* Counts are taken against the d read after them: a larger d
		 * gives a smaller lower bound, which holds whatever the owner
		 * did meanwhile. */
		d = __atomic_load_n(&s->am_d, __ATOMIC_ACQUIRE);
		n = __atomic_load_n(&s->am_n, __ATOMIC_ACQUIRE);
		/* A mark is taken before the requests of its slice; the marks
		 * are read after d and n, so a mark newer than them only
		 * lowers what they add below, and a mark over them (a
		 * damaged summary) is not used. */
		sl = __atomic_load_n(&s->am_slice, __ATOMIC_ACQUIRE);
		dw = d;
		nw = k0 >= SHMT_AN_SLICES ? n : 0;
		if (k0 < SHMT_AN_SLICES && sl < SHMT_AN_SLICES) {
			if (k0 >= 1 && k0 <= sl)
				md = __atomic_load_n(&s->am_mark_d[k0 - 1],
				    __ATOMIC_ACQUIRE);
			if (k0 > sl)
				dw = 0;         /* nothing from slice k0 on */
			else if (md <= d)
				dw = d - md;
			if (k0 + 1 <= sl) {
				mn = __atomic_load_n(&s->am_mark_n[k0],
				    __ATOMIC_ACQUIRE);
				nw = mn <= n ? n - mn : 0;
			}
		}
		if (__atomic_load_n(&s->am_ver, __ATOMIC_ACQUIRE) != v1)
			continue;
		for (uint32_t j = 0; j < k; j++)
			if (scratch[j].lower > d && (rc = cmap_add(m,
			    scratch[j].hash, scratch[j].lower - d)) != 0)
				return rc;
		P->D += d;
		P->N += n;
		P->Dw += dw;
		P->Nw += nw;
		return 0;
	}
	return 0;
}

static int
cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	return x->lower < y->lower ? 1 : x->lower > y->lower ? -1 :
	    x->hash < y->hash ? -1 : x->hash > y->hash;
}

static void
fill_key(shmt_t *h, const struct shmt_an *an, uint64_t hash, shmt_hotkey_t *k)
{
	size_t len = 0;

	k->kind = hash & SHMT_AN_CLIENT_BIT ? SHMT_HOT_CLIENT : SHMT_HOT_DICT;
	if (name_get(an, hash, k) && k->kept == k->klen)
		return;
	/* Only a prefix was kept, or none: a dictionary key can be found by
	 * its hash in the dictionary itself. */
	if (k->kind == SHMT_HOT_DICT &&
	    shmt__dict_key_by_hash(h, hash, k->key, sizeof(k->key), &len) == 0) {
		k->klen = (uint32_t)len;
		k->kept = (uint32_t)len;
		k->kind = SHMT_HOT_DICT;
	}
}

SHMT_EXPORT int
shmt_top_keys(shmt_t *h, shmt_hotkey_t *out, size_t cap, shmt_top_info_t *info)
{
	const struct shmt_an *an = h != NULL ? h->an : NULL;
	uint64_t now, i, D = 0, N = 0, Dw = 0, Nwin, hot = 0;
	struct sum_part part = { 0, 0, 0, 0 };
	struct cand *scratch;
	struct cmap m;
	int rc = 0;

	if (h == NULL || (out == NULL && cap != 0))
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if (an == NULL)
		return -ENODEV;
	m.cap = pow2_floor((uint64_t)an->rings * an->stripes * an->cap) * 2;
	m.n = 0;
	m.e = calloc(m.cap, sizeof(*m.e));
	scratch = calloc(an->cap, sizeof(*scratch));
	if (m.e == NULL || scratch == NULL) {
		free(m.e);
		free(scratch);
		return -ENOMEM;
	}
	/* Sub-window i holds now; i - subw .. i cover [start(i) - W, now],
	 * which holds the exact window [now - W, now] since start(i) <= now
	 * (tiles.h: any subw sub-windows span exactly W).  The newest subw of
	 * them start at start(i + 1) - W > now - W: all inside the window. */
	now = shmt__now(h);
	i = shmt__tile_of(now, an->window, an->subw);
	for (uint64_t k = 0; k <= an->subw && rc == 0; k++) {
		uint64_t id = i - k;
		uint32_t k0 = SHMT_AN_SLICES;

		if (k > i)
			break;
		/* The oldest: the exact window starts in its slice k0
		 * (start(i - subw) = start(i) - W <= now - W). */
		if (k == an->subw)
			k0 = slice_of(shmt__tile_start(id, an->window, an->subw),
			    shmt__tile_start(id + 1, an->window, an->subw),
			    now - an->window);
		for (uint32_t p = 0; p < an->stripes && rc == 0; p++)
			rc = sum_read(an, sum_at(an, (uint32_t)(id % an->rings), p),
			    id, k0, scratch, &m, &part);
	}
	D = part.D;
	N = part.N;
	Dw = part.Dw;
	Nwin = part.Nw;
	free(scratch);
	if (rc != 0) {
		free(m.e);
		return rc;
	}
	/* A key's requests from the start of slice k0 of the oldest
	 * sub-window on (which holds the exact window) are at most
	 * lower + Dw; Nwin requests are certainly in the exact window. */
	for (uint64_t k = 0; k < m.cap; k++) {
		struct cand *c = &m.e[k];

		if (!c->used)
			continue;
		if ((c->lower + Dw) * 1000000.0 > (double)an->ppm * (double)Nwin)
			m.e[hot++] = *c;
	}
	qsort(m.e, hot, sizeof(*m.e), cand_cmp);
	for (uint64_t k = 0; k < hot && k < cap; k++) {
		shmt_hotkey_t *o = &out[k];

		memset(o, 0, offsetof(shmt_hotkey_t, klen));
		o->klen = o->kept = 0;
		o->kind = 0;
		o->hash = m.e[k].hash;
		o->lower = m.e[k].lower;
		o->upper = m.e[k].lower + D;
		o->share = N ? (double)o->lower / (double)N : 0;
		fill_key(h, an, o->hash, o);
	}
	if (info != NULL) {
		memset(info, 0, sizeof(*info));
		info->span_start_ns = i >= an->subw ?
		    shmt__tile_start(i - an->subw, an->window, an->subw) : 0;
		info->span_end_ns = now;
		info->window_ns = an->window;
		info->subwindow_ns = an->w;
		info->total = N;
		info->total_window = Nwin;
		info->error = D;
		info->error_window = Dw;
		info->threshold_ppm = an->ppm;
		info->certified = Dw * 1000000.0 <= (double)an->ppm * (double)Nwin;
		info->stripes = an->stripes;
		info->counters = an->cap;
		info->probe = an->probe;
		info->memory_bytes = an->bytes;
	}
	free(m.e);
	return hot > INT32_MAX ? INT32_MAX : (int)hot;
}

/* ---- Snapshots ------------------------------------------------------------- */

/*
 * What a snapshot keeps of the analyzer: a geometry line, then the
 * summaries (every sub-window ring of every stripe, the shared one too)
 * and the name table, as they are in the region.  Stripe owners and the
 * shared stripe's lock name processes of the old segment and are left
 * out.  Words are copied one by one with atomic loads: a summary copied
 * while its owner counted is one the owner could have left by dying, and
 * its bounds hold (see the top of this file); one copied while it was
 * being cleared (odd version) is not brought back.
 */
struct an_image {
	uint32_t ai_rings, ai_stripes;
	uint32_t ai_groups, ai_probe;
	uint64_t ai_sum_size;
	uint64_t ai_names;
	uint64_t ai_window;
};

static uint64_t
an_image_bytes(const struct shmt_an *an)
{
	return sizeof(struct an_image) + an->names_off - an->sums_off +
	    (uint64_t)an->names * sizeof(struct shmt_an_name);
}

int64_t
shmt__an_export(shmt_t *h, void *buf, uint64_t cap)
{
	const struct shmt_an *an = h->an;
	struct an_image ai;
	uint64_t n, words;
	unsigned char *b = buf;

	if (an == NULL)
		return 0;
	n = an_image_bytes(an);
	if (buf == NULL)
		return (int64_t)n;
	if (cap < n)
		return -ENOSPC;
	memset(&ai, 0, sizeof(ai));
	ai.ai_rings = an->rings;
	ai.ai_stripes = an->stripes;
	ai.ai_groups = an->groups;
	ai.ai_probe = an->probe;
	ai.ai_sum_size = an->sum_size;
	ai.ai_names = an->names;
	ai.ai_window = an->window;
	memcpy(b, &ai, sizeof(ai));
	words = (n - sizeof(ai)) / 8;
	for (uint64_t i = 0; i < words; i++) {
		uint64_t w = __atomic_load_n((const uint64_t *)(const void *)
		    (an->base + an->sums_off) + i, __ATOMIC_RELAXED);

		memcpy(b + sizeof(ai) + 8 * i, &w, 8);
	}
	return (int64_t)n;
}

int
shmt__an_import(shmt_t *h, const void *buf, uint64_t len, int64_t delta_ns)
{
	const struct shmt_an *an = h->an;
	const unsigned char *b = buf;
	struct an_image ai;
	unsigned __int128 a;
	uint64_t k;

	if (an == NULL || len != an_image_bytes(an))
		return -EINVAL;
	memcpy(&ai, b, sizeof(ai));
	if (ai.ai_rings != an->rings || ai.ai_stripes != an->stripes ||
	    ai.ai_groups != an->groups || ai.ai_probe != an->probe ||
	    ai.ai_sum_size != an->sum_size || ai.ai_names != an->names ||
	    ai.ai_window != an->window)
		return -EINVAL;
	b += sizeof(ai);
	/* Sub-windows move by whole sub-windows, toward the past, as the
	 * counters' do (counters.c, shmt__cnt_rebase): k = floor(d n / W)
	 * for d >= 0, -ceil(-d n / W) for d < 0, so no request is kept
	 * longer than its window. */
	a = (unsigned __int128)(delta_ns >= 0 ? (uint64_t)delta_ns :
	    -(uint64_t)delta_ns) * an->subw;
	a = delta_ns >= 0 ? a / an->window : (a + an->window - 1) / an->window;
	k = a > UINT64_MAX ? UINT64_MAX : (uint64_t)a;
	for (uint32_t r = 0; r < an->rings; r++) {
		for (uint32_t p = 0; p < an->stripes; p++) {
			const unsigned char *src = b +
			    ((uint64_t)r * an->stripes + p) * an->sum_size;
			struct shmt_an_sum hd;
			uint64_t id;

			memcpy(&hd, src, sizeof(hd));
			if ((hd.am_ver & 1) || hd.am_id % an->rings != r)
				continue;
			if (delta_ns >= 0) {
				if (hd.am_id > UINT64_MAX - k)
					continue;
				id = hd.am_id + k;
			} else {
				if (hd.am_id < k)
					continue;
				id = hd.am_id - k;
			}
			/* The segment is private: plain copies will do. */
			memcpy(sum_at(an, (uint32_t)(id % an->rings), p), src,
			    an->sum_size);
			sum_at(an, (uint32_t)(id % an->rings), p)->am_id = id;
		}
	}
	memcpy(names(an), b + (an->names_off - an->sums_off),
	    (uint64_t)an->names * sizeof(struct shmt_an_name));
	return 0;
}
