/* SPDX-License-Identifier: MIT */
/*
 * The hot-key analyzer: which keys had more than a threshold of the
 * requests of the last window, deterministically, in fixed memory, with no
 * two processes writing the same cache line on the request path.
 *
 * Each (sub-window, writer stripe) pair has a Misra-Gries summary of cap
 * counters with a lazy offset d: a counter's effective count is
 * count - d, and it is free when that is not positive (or when it belongs
 * to an older sub-window).  The counters come in groups of `probe`, and
 * x's hash picks its group.  An update of key x: x live in its group:
 * count + 1; else a free counter of the group: {x, d + 1}; else d + 1
 * (every counter loses one, x's request is dropped).  With f the true
 * count and c the effective one, f - d <= c <= f holds after every step
 * (the usual Misra-Gries argument: each step that drops a request or lowers
 * x's counter is a step of d), and a step of d happens only when all probe
 * counters of x's group are live, so it removes at least probe + 1 units
 * of count: d <= n / (probe + 1).
 *
 * A query adds the summaries of the sub-windows covering the window: each
 * key's count lies in [sum c, sum c + D] with D the sum of the d, and a key
 * absent everywhere had at most D <= N / (probe + 1) requests.  With probe
 * at least 1.2 / threshold, D stays under the threshold of the requests
 * certainly in the window (see shmt__an_geometry), so no key over the
 * threshold can be absent: no false negatives, and no probability in it.
 * The rule the seed used touched every sub-window on each request; here a
 * request touches one group of one summary of one sub-window.
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

static uint64_t
pow2_floor(uint64_t v)
{
	return v == 0 ? 0 : 1ULL << (63 - __builtin_clzll(v));
}

/* A group of P counters: P 16-bit tags (rounded to 8 bytes), then P counts
 * and the hint, on whole cache lines; its P hashes lie apart. */
static inline uint32_t
tag_bytes_of(uint32_t p)
{
	return (2 * p + 7) & ~7U;
}

static inline uint32_t
meta_bytes_of(uint32_t p)
{
	return (tag_bytes_of(p) + 8 * p + 8 + 63) & ~63U;
}

int
shmt__an_geometry(uint64_t bytes, uint64_t window, uint32_t subw, uint32_t ppm,
    struct shmt_an *an, const char **why)
{
	uint64_t rest, per, names;
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
	/* The guarantee needs d < threshold x (requests certainly in the
	 * window), and d <= n / (probe + 1); the oldest of subwindows + 1
	 * sub-windows may lie outside the exact window, so take 1.2 / threshold
	 * probes: d stays under 83% of the threshold of all requests, which
	 * covers a 1/13 share in the oldest sub-window with room to spare.  Each
	 * probe is a slot read on a miss, the analyzer's main cost. */
	an->probe = (uint32_t)((1200000ULL + ppm - 1) / ppm);
	if (an->probe < 8)
		an->probe = 8;
	/* A key's counters are one group of probe counters whose tags and
	 * counts fill whole cache lines (hashes apart): a miss reads those
	 * lines only.  More counters than 1.2 / threshold only lower the
	 * error. */
	an->probe = (an->probe + SHMT_AN_PROBE_STEP - 1) &
	    ~(SHMT_AN_PROBE_STEP - 1);
	an->tag_bytes = tag_bytes_of(an->probe);
	an->meta_bytes = meta_bytes_of(an->probe);
	/* A quarter for names, the rest for summaries. */
	names = pow2_floor(bytes / 4 / sizeof(struct shmt_an_name));
	an->lock_off = SHMT_LINE * 2;   /* after the owners (16 x 16 bytes) */
	an->sums_off = an->lock_off + SHMT_LINE;
	rest = bytes - an->sums_off - names * sizeof(struct shmt_an_name);
	per = rest / ((uint64_t)an->rings * an->stripes);
	if (per <= sizeof(struct shmt_an_sum))
		return -EINVAL;
	an->groups = (uint32_t)((per - sizeof(struct shmt_an_sum)) /
	    (an->meta_bytes + 8ULL * an->probe));
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
	uint64_t sub_start, sub_end, id;
	struct shmt_an_sum *sum;        /* this sub-window's summary */
};
static __thread struct an_tls an_tls[4];

static uint64_t
owner_word(const shmt_t *h)
{
	return ((uint64_t)(uint32_t)getpid() << 32) | h->uid;
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
				    shmt__proc_start(getpid()), __ATOMIC_RELAXED);
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
		if (an_tls[i].uid == h->uid)
			return &an_tls[i];
		if (t == NULL && an_tls[i].uid == 0)
			t = &an_tls[i];
	}
	if (t == NULL)
		t = &an_tls[h->uid % 4];   /* forget the oldest guess */
	t->uid = h->uid;
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
	uint32_t me = (uint32_t)getpid();

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

	for (uint32_t i = 0; i < kept; i++)
		c = (c ^ b[i]) * 0x100000001b3ULL;
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
	}
	__atomic_store_n(&s->am_d, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_n, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_id, id, __ATOMIC_RELAXED);
	__atomic_store_n(&s->am_ver, ver + 1, __ATOMIC_RELEASE);
}

/* The 16-bit lanes of X that may be zero: bit 15 of every zero lane is
 * set; a lane above a zero one may be flagged too (the borrow), which only
 * makes a candidate that its count and hash then turn down. */
static inline uint64_t
zero_lanes16(uint64_t x)
{
	const uint64_t ones = 0x0001000100010001ULL;

	return (x - ones) & ~x & (ones << 15);
}

/* Whether any of the P tags at TAGS equals the tag spread over SPREAD's
 * four lanes (exact: no lane is flagged unless one is zero). */
static inline __attribute__((always_inline)) uint64_t
tags_match(const uint16_t *tags, uint32_t p, uint64_t spread)
{
	uint64_t any = 0;

#pragma GCC unroll 4
	for (uint32_t base = 0; base < p; base += 4) {
		uint64_t x;

		memcpy(&x, tags + base, 8);
		any |= zero_lanes16(x ^ spread);
	}
	return any;
}

/*
 * Count one request of HASH in summary S.  A counter is live when its count
 * is over d; the key's counter is the live one whose tag and hash match.
 * The tags are compared four at a time, with no branch per counter; a miss
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
    uint64_t hash, const void *key, size_t klen, int kind, const uint32_t p)
{
	struct group g = group_at_p(an, s, shmt__an_group(an->groups, hash), p);
	uint64_t cur = __atomic_load_n(&s->am_id, __ATOMIC_RELAXED), d;
	uint16_t tag = (uint16_t)(hash >> SHMT_AN_TAG_SHIFT);
	uint64_t spread = tag * 0x0001000100010001ULL, any = 0;
	uint32_t j;

	if (id < cur)
		id = cur;       /* this thread's clock is behind: count it in the
		                 * newer sub-window */
	if (id != cur || (__atomic_load_n(&s->am_ver, __ATOMIC_RELAXED) & 1))
		sum_reset(an, s, id);
	d = __atomic_load_n(&s->am_d, __ATOMIC_RELAXED);
	/* Most requests of a noisy stream match no tag: one pass over the
	 * tags tells, and only a match looks at counts and hashes. */
	any = tags_match(g.tags, p, spread);
	for (uint32_t base = 0; any != 0 && base < p; base += 4) {
		uint64_t four, hit;

		memcpy(&four, g.tags + base, 8);
		for (hit = zero_lanes16(four ^ spread); hit != 0; hit &= hit - 1) {
			uint64_t c;

			j = base + (uint32_t)__builtin_ctzll(hit) / 16;
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
	/* The first free counter.  The hint says none lies below it: a claim
	 * takes the first free one and moves the hint past it, and only a
	 * step of d frees counters, which sets it back to 0.  It only saves
	 * reads: d steps only after a search from 0 found every counter
	 * live, whatever the hint said. */
	j = (uint32_t)g.hint[0];
	if (j >= p)
		j = 0;
	for (; j < p && g.cnt[j] > d; j++)
		;
	if (j == p)
		for (j = 0; j < p && g.cnt[j] > d; j++)
			;
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

/* Count one request in summary S: the default group of 12 counters (for
 * a 10% threshold) has its own copy, with every size a constant. */
static void
sum_update(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    uint64_t hash, const void *key, size_t klen, int kind)
{
	if (an->probe == 12)
		sum_update_p(an, s, id, hash, key, klen, kind, 12);
	else
		sum_update_p(an, s, id, hash, key, klen, kind, an->probe);
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
	}
	s = t->sum;
	shared = t->stripe == SHMT_AN_STRIPES;
	if (shared && shared_lock(an) != 0)
		return;
	sum_update(an, s, t->id, hash, key, klen, kind);
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

/* Read summary S of sub-window ID into M (with SCRATCH, cap slots of
 * room); adds its d to *D and its n to *N.  A summary being cleared, or
 * holding another sub-window, adds nothing: what it held lies outside the
 * span. */
static int
sum_read(const struct shmt_an *an, struct shmt_an_sum *s, uint64_t id,
    struct cand *scratch, struct cmap *m, uint64_t *D, uint64_t *N)
{
	for (int tries = 0; tries < 4; tries++) {
		uint64_t v1 = __atomic_load_n(&s->am_ver, __ATOMIC_ACQUIRE), d, n;
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
		if (__atomic_load_n(&s->am_ver, __ATOMIC_ACQUIRE) != v1)
			continue;
		for (uint32_t j = 0; j < k; j++)
			if (scratch[j].lower > d && (rc = cmap_add(m,
			    scratch[j].hash, scratch[j].lower - d)) != 0)
				return rc;
		*D += d;
		*N += n;
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
	uint64_t now, i, D = 0, N = 0, Nold = 0, Nwin, hot = 0;
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
		uint64_t id = i - k, before = N;

		if (k > i)
			break;
		for (uint32_t p = 0; p < an->stripes && rc == 0; p++)
			rc = sum_read(an, sum_at(an, (uint32_t)(id % an->rings), p),
			    id, scratch, &m, &D, &N);
		if (k == an->subw)
			Nold = N - before;
	}
	free(scratch);
	if (rc != 0) {
		free(m.e);
		return rc;
	}
	/* The oldest sub-window may lie partly before the exact window: only
	 * the others' requests are certainly in it. */
	Nwin = N - Nold;
	for (uint64_t k = 0; k < m.cap; k++) {
		struct cand *c = &m.e[k];

		if (!c->used)
			continue;
		if ((c->lower + D) * 1000000.0 > (double)an->ppm * (double)Nwin)
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
		info->threshold_ppm = an->ppm;
		info->certified = D * 1000000.0 <= (double)an->ppm * (double)Nwin;
		info->stripes = an->stripes;
		info->counters = an->cap;
		info->probe = an->probe;
		info->memory_bytes = an->bytes;
	}
	free(m.e);
	return hot > INT32_MAX ? INT32_MAX : (int)hot;
}
