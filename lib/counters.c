/* SPDX-License-Identifier: MIT */
/*
 * The windowed counters of shmt_hit() and shmt_count(): one item per key in
 * the counters' store (store.c), an exponential histogram (Datar, Gionis,
 * Indyk and Motwani, 2002, in its deterministic form) changed in place under
 * the shard's lock.  Its error is relative to the count, whatever the trace.
 *
 * Structure.  A key's hits, in time order, are cut into buckets of 2^i
 * consecutive hits (level i); a bucket keeps one time, its newest hit's.
 * Levels hold older hits the higher they are: every bucket of level i + 1
 * is older than every bucket of level i.  A hit appends a bucket of one hit
 * at level 0; when a level holds m = k + 2 buckets, its two oldest merge
 * into one bucket of the next level (keeping the newer time), and so on up
 * (a carry, as in a binary counter: amortised at most 2 merges a hit).  A
 * bucket whose time is older than the window goes, oldest first.  With
 * eps the configured error (counters_error_ppm, 1% by default),
 *
 *     k = ceil(2 / (3 eps))            (67 at 1%, 667 at 0.1%, 2 at 50%)
 *
 * Invariant P: if level j >= 1 holds a bucket, every level i < j holds at
 * least k.  (A merge at level i leaves k there and is the only way level
 * i + 1 gets a bucket; after it level i loses buckets only by merging, back
 * to k, or by expiring, which takes a level's buckets only once every
 * higher level is empty.)
 *
 * The estimate.  For a window w (shmt_hit: w = W) let lo = now - w + 1; a
 * hit counts when its time t >= lo.  Let B be the oldest bucket with time
 * >= lo, at level j, and S the hits of the buckets newer than B.  Buckets
 * older than B hold only hits older than lo; those newer than B hold only
 * hits at or after B's time, so inside; B's newest hit is inside.  So the
 * exact count C lies in [S + 1, S + 2^j], and the answer is
 *
 *     S + 1 (j = 0),   S + 2^(j-1) (j >= 1),
 *
 * or S + 2^j when B is the oldest bucket kept and no hit the item ever held
 * is older than lo (ch_floor below, e.g. a key born inside the window).  By
 * P, S >= k (2^j - 1).  The error is at most 1 for j <= 1 and for j >= 2
 * at most 2^(j-1), while C >= S + 1 > k (2^j - 1) >= 2 (2^j - 1) / (3 eps)
 * >= 2^(j-1) / eps (as 2 (2^j - 1) >= 3 2^(j-1) for j >= 2).  Hence
 *
 *     |answer - C| <= max(1, eps C)   for every window w <= W, every trace,
 *
 * and the answer is exact while C <= k (j >= 1 forces C >= k + 1).
 * shmt_hit answers the estimate for w = W just after counting; shmt_count
 * for any w <= W (the bucket straddling now - w is bounded by the newer
 * buckets whatever w is, which is why P is about every level below j).
 * Buckets older than W are dropped before each hit is counted, so the
 * buckets kept all end inside the window at the last hit.
 *
 * The value (after the key, padded so that it starts 8-byte aligned):
 *
 *     struct shmt_cnt_hdr (counters.h):
 *       ch_shape  magic "EH" | cap << 16 | levels << 32 | padding << 40
 *                 (fixed per block)
 *       ch_state  0 at rest; CS_DIRTY while a writer changes the item;
 *                 CS_MERGE with the last merge's level and old meta
 *                 words from its start to the next merge or the end of
 *                 the update (see crash safety); bits: 63 dirty, 62
 *                 merge, 56-61 level, 40-55 level's old start, 24-39 its
 *                 old count, 8-23 the next level's old count
 *     (moving ch_state's times is never needed: it holds none)
 *       ch_total  the hits of all buckets kept
 *       ch_top    the highest level holding a bucket (0 when none)
 *       ch_floor  no hit the buckets hold is older than this (ns)
 *     u32 meta[levels] (padded to 8 bytes): level i's ring, start | n << 16
 *     u64 ts[levels][cap]: level i's bucket times (absolute ns of the
 *                 library's clock), oldest at ring slot start
 *
 * Every time is an absolute clock value (ch_floor and ts[][]), so moving a
 * counter to another clock adds one delta to each of them, clamped to
 * [0, UINT64_MAX], which keeps their order.
 *
 * Memory.  An item is a buddy block: 64 << order bytes holding the 32-byte
 * item header, the key, up to 7 bytes of padding, the 40-byte value header
 * and, for L levels of rings of cap slots, 4 L bytes of meta words (padded
 * to 8) and 8 L cap bytes of times.  While a key holds at most k + 1
 * buckets it has one level (L = 1) whose ring is as long as its block
 * allows (3 slots in a 128-byte block with a 6-byte key), the block
 * doubling as the hits do; past that every level has cap = m = k + 2, and
 * by P a key whose count at its last hit was N > k + 1 has
 *
 *     L <= 1 + floor(log2((N - 1) / k + 1))  levels, so at most
 *     bytes(N) = 32 + klen + 7 + 40 + 4 L + 4 + 8 (k + 2) L,
 *
 * in the smallest block that holds it, times 2 at most (a block is shrunk
 * only when one two orders smaller would do, so that a key on the edge
 * does not move on every hit, and only into a block already free: a
 * shrink saves memory, which is not worth another key's count, so it never
 * evicts; without a free block the key keeps its larger one).  Measured
 * at 1% (k = 67) with a 6-byte key (test_memory_per_key): 128 bytes for 1
 * or 2 hits, 256 for 10, 1 KiB for 67, 2 KiB for 100 (L = 2), 4 KiB for
 * 1000, 8 KiB for 10^4 to 10^6 (L = 14); by the formula 32 KiB for a
 * million hits a second over 24 h (N = 8.64e10, L = 31).  A block is
 * filled with as many levels as fit, so a key moves O(log N) times in all.
 * That is O((1/eps) log^2 N) bits, the lower bound's order.  A block grows
 * (or shrinks) by filling a fresh block, linking it with one store, then
 * freeing the old one, as the dictionary writes (store.c); growing may
 * evict other keys (by last hit, below), never this one, and shrinking
 * never does; when the key cannot fit in its shard at all the hit fails
 * with -ENOSPC and changes nothing.
 *
 * Updates.  A hit drops expired buckets (amortised one a hit: each is
 * dropped once), appends one, and merges while a level is full (amortised
 * two), each a constant number of stores; ch_total and ch_top make the
 * answer O(1).  shmt_count walks the levels, binary-searching the one that
 * straddles now - w: O(L + log k).
 *
 * Crash safety.  Under the shard lock the item changes in place, store by
 * store, and every store that changes what the item says is one aligned
 * 4- or 8-byte release store.  A writer first stores ch_state = CS_DIRTY;
 * each meta word moves a ring's start or count in one store; ch_total and
 * ch_top are then stale until the end, where ch_state = 0.  A merge writes
 * the new bucket's time into a free slot of level i + 1, then the journal
 * (CS_MERGE, i, level i's old start and count, level i + 1's old count) in
 * ch_state, then the two meta words; the journal stays until the next
 * merge's replaces it or the update ends (no meta word changes in between,
 * so redoing a finished merge from it changes nothing).  Whoever takes the
 * lock next and finds ch_state set settles the item: it redoes the
 * journalled merge from the old values (idempotent), finishes any merge a
 * level at m still needs, and recomputes ch_total and ch_top from the meta
 * words, then clears ch_state (a reader, which writes nothing, settles a
 * copy of the meta words).  So a writer killed at any instruction leaves the
 * buckets of some moment of its update: the hits before it, with or without
 * its own one, and P holds at each such moment, so every answer keeps its
 * bound (the killed writer's hit counted or not).  A block move is a fresh
 * block linked by one store: the old item or the new one, both settled.
 */
#include "fork.h"
#include "counters.h"

#include <errno.h>
#include <string.h>

/* ---- The value ---------------------------------------------------------- */

#define CNT_MAGIC 0x4845U               /* "EH" */
#define CNT_LEVELS_MAX 64
#define CNT_CAP_MAX 0xffffU

#define CS_DIRTY (1ULL << 63)
#define CS_MERGE (1ULL << 62)

/* Where a counter item's value lies: a process-local view, made by cnt_at
 * from the item's shape after checking it against the item's lengths (as
 * the chain walk validated them: one load).  M holds the meta words as this
 * process loaded them once and checked them (cnt_load, cnt_metas), then as
 * it stored them: a writer works on M alone, never on a word read again
 * from the segment, which another process may have changed since. */
struct cnt {
	struct shmt_cnt_hdr *h;
	uint32_t *meta;
	uint64_t *ts;
	uint32_t levels, cap, klen;
	uint32_t m[CNT_LEVELS_MAX];
};

static inline uint32_t
cnt_pad(uint32_t klen)
{
	return (8 - klen % 8) % 8;
}

static inline uint64_t
meta_bytes(uint32_t levels)
{
	return (4ULL * levels + 7) & ~7ULL;
}

static uint64_t
cnt_vlen(uint32_t klen, uint32_t levels, uint32_t cap)
{
	return cnt_pad(klen) + sizeof(struct shmt_cnt_hdr) + meta_bytes(levels) +
	    8ULL * levels * cap;
}

/* The shape names the padding too, so that a value read back after its
 * key (a snapshot record) with the key's length changed is refused. */
static inline uint64_t
cnt_shape(uint32_t klen, uint32_t levels, uint32_t cap)
{
	return CNT_MAGIC | (uint64_t)cap << 16 | (uint64_t)levels << 32 |
	    (uint64_t)cnt_pad(klen) << 40;
}

/* The view of IT's value, or -1 when its shape does not match LENS, the
 * lengths item_at_lens() checked against IT's block (never read again
 * here: a length reloaded after that check would be checked against
 * nothing).  Reads the shape once: a racy reader (the check) gets a
 * consistent view of what it read.  C->m is left to cnt_load. */
static int
cnt_at(const struct shmt_item *it, uint32_t lens, struct cnt *c)
{
	uint32_t klen = lens_klen(lens), vlen = lens_vlen(lens);
	uint64_t shape;
	char *v;

	if (vlen < cnt_pad(klen) + sizeof(struct shmt_cnt_hdr))
		return -1;
	v = (char *)(it + 1) + klen + cnt_pad(klen);
	c->h = (struct shmt_cnt_hdr *)v;
	shape = __atomic_load_n(&c->h->ch_shape, __ATOMIC_RELAXED);
	c->cap = (uint32_t)(shape >> 16) & 0xffff;
	c->levels = (uint32_t)(shape >> 32) & 0xff;
	if ((shape & 0xffff) != CNT_MAGIC || shape >> 43 != 0 ||
	    (shape >> 40 & 7) != cnt_pad(klen) || c->cap == 0 || c->levels == 0 ||
	    c->levels > CNT_LEVELS_MAX ||
	    vlen != cnt_vlen(klen, c->levels, c->cap))
		return -1;
	c->klen = klen;
	c->meta = (uint32_t *)(c->h + 1);
	c->ts = (uint64_t *)((char *)c->meta + meta_bytes(c->levels));
	return 0;
}

int
shmt__cnt_item_ok(const struct shmt_store *st, const struct shmt_item *it,
    uint32_t lens)
{
	struct cnt c;

	(void)st;
	return cnt_at(it, lens, &c) == 0;
}

/* A meta word: a level's ring starts at slot START and holds N buckets. */
static inline uint32_t m_start(uint32_t m) { return m & 0xffff; }
static inline uint32_t m_n(uint32_t m) { return m >> 16; }
static inline uint32_t m_make(uint32_t s, uint32_t n) { return s | n << 16; }

static inline int
m_ok(const struct cnt *c, uint32_t m)
{
	return m_start(m) < c->cap && m_n(m) <= c->cap;
}

/* Bucket X (0: oldest) of a level whose ring starts at S < cap, X <= cap. */
static inline uint64_t *
slot(const struct cnt *c, uint32_t level, uint32_t s, uint32_t x)
{
	uint32_t p = s + x;

	if (p >= c->cap)
		p -= c->cap;
	return &c->ts[(uint64_t)level * c->cap + p];
}

/* The stores a killed writer's successor relies on: whole, and in order
 * after every store before them (release: the compiler keeps them in
 * program order; x86 keeps stores in order). */
static inline void
put32(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline void
put64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Level L's meta word becomes V, in C->m and in the segment. */
static inline void
m_put(struct cnt *c, uint32_t l, uint32_t v)
{
	c->m[l] = v;
	put32(&c->meta[l], v);
}

/* Under the lock, C at rest: load every meta word once into C->m.  -1 when
 * one is out of its ring. */
static int
cnt_load(struct cnt *c)
{
	for (uint32_t l = 0; l < c->levels; l++) {
		c->m[l] = __atomic_load_n(&c->meta[l], __ATOMIC_RELAXED);
		if (!m_ok(c, c->m[l]))
			return -1;
	}
	return 0;
}

/* The meta words of C as the item means them: copied into OUT, with a
 * half-done merge's journal applied.  -1 when one is out of its ring. */
static int
cnt_metas(const struct cnt *c, uint32_t *out)
{
	uint64_t s = __atomic_load_n(&c->h->ch_state, __ATOMIC_RELAXED);

	for (uint32_t l = 0; l < c->levels; l++) {
		out[l] = __atomic_load_n(&c->meta[l], __ATOMIC_RELAXED);
		if (!m_ok(c, out[l]))
			return -1;
	}
	if (s & CS_MERGE) {
		uint32_t i = (uint32_t)(s >> 56) & 63;
		uint32_t si = (uint32_t)(s >> 40) & 0xffff;
		uint32_t ni = (uint32_t)(s >> 24) & 0xffff;
		uint32_t nj = (uint32_t)(s >> 8) & 0xffff;

		if (i + 1 >= c->levels || si >= c->cap || ni < 2 ||
		    ni > c->cap || nj + 1 > c->cap)
			return -1;
		out[i + 1] = m_make(m_start(out[i + 1]), nj + 1);
		si += 2;
		out[i] = m_make(si >= c->cap ? si - c->cap : si, ni - 2);
	}
	return 0;
}

/* Under the lock, with ch_state set: merge the two oldest buckets of level
 * I into one of level I + 1 (the caller checked I + 1 < levels, level I
 * holds two and level I + 1 has a free slot).  The journal makes the two
 * meta stores one step for whoever settles after a kill. */
static void
cnt_merge(struct cnt *c, uint32_t i)
{
	uint32_t mi = c->m[i], mj = c->m[i + 1];
	uint32_t si = m_start(mi), ni = m_n(mi), sj = m_start(mj), nj = m_n(mj);
	uint32_t s2 = si + 2 >= c->cap ? si + 2 - c->cap : si + 2;

	*slot(c, i + 1, sj, nj) = *slot(c, i, si, 1);
	put64(&c->h->ch_state, CS_DIRTY | CS_MERGE | (uint64_t)i << 56 |
	    (uint64_t)si << 40 | (uint64_t)ni << 24 | (uint64_t)nj << 8);
	m_put(c, i + 1, m_make(sj, nj + 1));
	m_put(c, i, m_make(s2, ni - 2));
	if (c->h->ch_top < i + 1)
		put64(&c->h->ch_top, i + 1);
	/* The journal stays until the next merge's replaces it or the update
	 * ends: no meta word changes in between, so redoing it is a no-op. */
}

/* Merge upward from level FROM while a level holds M buckets or more. */
static void
cnt_carry(struct cnt *c, uint32_t from, uint32_t m)
{
	for (uint32_t i = from; i + 1 < c->levels && m_n(c->m[i]) >= m; i++)
		while (m_n(c->m[i]) >= m && m_n(c->m[i + 1]) < c->cap)
			cnt_merge(c, i);
}

/* ch_total and ch_top from the meta words. */
static void
cnt_sums(const struct cnt *c)
{
	uint64_t total = 0, top = 0;

	for (uint32_t l = 0; l < c->levels; l++) {
		uint32_t n = m_n(c->m[l]);

		total += (uint64_t)n << l;
		if (n > 0)
			top = l;
	}
	put64(&c->h->ch_total, total);
	put64(&c->h->ch_top, top);
}

/* Under the lock: a writer was killed while it changed C (ch_state set).
 * Redo its half-done merge, finish the merges a full level still needs,
 * recompute the sums, then mark it at rest.  Each step can be repeated, so
 * a kill in here is settled by the next locker the same way. */
static int
cnt_settle(struct cnt *c, uint32_t m)
{
	if (cnt_metas(c, c->m) != 0)
		return SHMT_ECORRUPT;
	for (uint32_t l = 0; l < c->levels; l++)
		put32(&c->meta[l], c->m[l]);
	put64(&c->h->ch_state, CS_DIRTY);
	for (uint32_t l = 0; l + 1 < c->levels; l++)
		cnt_carry(c, l, m);
	cnt_sums(c);
	put64(&c->h->ch_state, 0);
	return 0;
}

/* ---- Counting --------------------------------------------------------------- */

/* The answer when the oldest bucket kept is at level TOP and every newer
 * bucket holds TOTAL - 2^TOP hits: the straddling bucket counts half (one
 * when it is a single hit), or whole when FLOOR shows no hit older than LO
 * was ever kept. */
static uint64_t
cnt_estimate(uint64_t newer, uint32_t j, int whole)
{
	if (whole || j == 0)
		return newer + (1ULL << j);
	return newer + (1ULL << (j - 1));
}

/* Under the lock, C at rest: drop the buckets older than LO (their newest
 * hit is, so all of theirs are), oldest first: the top level's oldest.
 * Leaves ch_state CS_DIRTY when it dropped any (*DIRTY set), for the
 * caller's update to go on under the same mark.  -1 on a meta word out of
 * its ring. */
static int
cnt_expire(struct cnt *c, uint64_t lo, int *dirty)
{
	uint64_t top = c->h->ch_top;

	while (top < c->levels) {
		uint32_t mt = c->m[top], s = m_start(mt), n = m_n(mt);
		uint64_t t;

		if (!m_ok(c, mt))
			return -1;
		if (n == 0 || (t = *slot(c, (uint32_t)top, s, 0)) >= lo)
			break;
		if (!*dirty) {
			put64(&c->h->ch_state, CS_DIRTY);
			*dirty = 1;
		}
		m_put(c, (uint32_t)top, m_make(s + 1 == c->cap ? 0 : s + 1,
		    n - 1));
		put64(&c->h->ch_total, c->h->ch_total - (1ULL << top));
		put64(&c->h->ch_floor, t);
		if (n == 1) {
			if (top == 0)
				break;
			put64(&c->h->ch_top, --top);
		}
	}
	return 0;
}

/* The shape C needs so that one more hit and its carries fit: *LEVELS
 * levels and rings of *CAP.  The carry stops at the first level below m - 1
 * buckets (at rest every level holds fewer than m). */
static int
cnt_need(const struct cnt *c, uint32_t m, uint32_t *levels, uint32_t *cap)
{
	uint64_t top = c->h->ch_top;
	uint32_t i = 0;

	if (top >= c->levels)
		return -1;
	/* The levels the carry reads (C->m, checked when loaded). */
	while (i < c->levels && m_n(c->m[i]) + 1 >= m)
		i++;
	*levels = (i > top ? i : (uint32_t)top) + 1;
	*cap = *levels >= 2 ? m : m_n(c->m[0]) + 1;
	return 0;
}

static int
cnt_fits(const struct cnt *c, uint32_t levels, uint32_t cap)
{
	return levels <= c->levels && cap <= c->cap;
}

/* The bytes of an item of KLEN with LEVELS rings of CAP. */
static uint64_t
cnt_bytes(uint32_t klen, uint32_t levels, uint32_t cap)
{
	return sizeof(struct shmt_item) + klen + cnt_vlen(klen, levels, cap);
}

/* order_for (store.h) without its loop: the hit path asks on every hit. */
static inline uint32_t
cnt_order(uint64_t bytes)
{
	return bytes <= 64 ? 0 : (uint32_t)(64 - __builtin_clzll(bytes - 1)) -
	    SHMT_BLOCK_MIN_SHIFT;
}

/* The shape that fills a block of ORDER for a counter that needs LEVELS of
 * CAP (fits by the choice of ORDER): as many levels of M as fit once it
 * has two, else one ring as long as fits, up to M. */
static void
cnt_fill(uint32_t klen, uint32_t order, uint32_t m, uint32_t levels,
    uint32_t cap, uint32_t *lv, uint32_t *cp)
{
	uint64_t block = 64ULL << order;

	if (cap < m && cnt_bytes(klen, 2, m) <= block)
		cap = m;
	if (levels >= 2 || cap >= m) {
		*cp = cap;
		*lv = levels;
		while (*lv < CNT_LEVELS_MAX &&
		    cnt_bytes(klen, *lv + 1, cap) <= block &&
		    cnt_vlen(klen, *lv + 1, cap) <= SHMT_VALUE_MAX)
			(*lv)++;
		return;
	}
	*lv = 1;
	*cp = cap;
	while (*cp < m && cnt_bytes(klen, 1, *cp + 1) <= block)
		(*cp)++;
}

/* Under the lock: a fresh block for KEY's counter with room for LEVELS
 * rings of CAP, filled with the buckets of OLD, whose view is OC (OLD at
 * rest, OC->m loaded; NULL: none, a key hit first at NOW), then linked in
 * OLD's place by one store and OLD freed (store.c's write: a kill leaves
 * OLD or the new item, and a block the repair reclaims).  *OUT gets the new
 * item and *NC its view.  May evict other keys, never OLD, unless SHRINK:
 * a block that only saves memory is taken only when one is free already
 * (the key would otherwise cost others their counts).  0, 1 (SHRINK and no
 * block free: nothing changed), -ENOSPC (the key cannot fit in its shard),
 * SHMT_ECORRUPT. */
static int
cnt_place(const struct shmt_store *st, struct shmt_shard *sh, uint64_t hash,
    const void *key, size_t klen, struct shmt_item *old, const struct cnt *oc,
    uint32_t levels, uint32_t cap, uint64_t now, int shrink,
    struct shmt_item **out, struct cnt *nc)
{
	uint32_t m = st->cnt_k + 2, kl = (uint32_t)klen, order, lv, cp, lens;
	char *heap = shard_heap(st, sh);
	struct shmt_item *it, *o2;
	uint64_t off, *link, bytes;
	int rc;

	if (old != NULL) {
		/* Room for every ring as it is (a counter made under another
		 * error setting may hold more than m - 1 in a level). */
		for (uint32_t l = 0; l < oc->levels; l++) {
			uint32_t n = m_n(oc->m[l]) + (l == 0);

			if (m_n(oc->m[l]) > 0 && l + 1 > levels)
				levels = l + 1;
			if (n > cap)
				cap = n > CNT_CAP_MAX ? CNT_CAP_MAX : n;
		}
	}
	if (levels >= 2 && cap < m)
		cap = m;
	if (levels > CNT_LEVELS_MAX)
		return -ENOSPC;
	bytes = cnt_bytes(kl, levels, cap);
	order = order_for(bytes);
	if (cnt_vlen(kl, levels, cap) > SHMT_VALUE_MAX)
		return -ENOSPC;
	if (shrink) {
		if (order > st->order_max ||
		    (off = shmt__blk_alloc(st, sh, order)) == UINT64_MAX)
			return 1;
	} else if ((off = shmt__store_alloc(st, sh, bytes, now, old, &rc)) ==
	    UINT64_MAX) {
		return rc;
	}
	cnt_fill(kl, order, m, levels, cap, &lv, &cp);
	it = (struct shmt_item *)(heap + off);
	it->it_order = (uint8_t)order;
	it->it_flags = 0;
	lens = lens_make(kl, cnt_vlen(kl, lv, cp));
	it->it_lens = lens;
	it->it_expire = now + st->window;
	it->it_born = now;
	memcpy((char *)(it + 1), key, klen);
	memset((char *)(it + 1) + klen, 0, lens_vlen(lens));
	nc->h = (struct shmt_cnt_hdr *)((char *)(it + 1) + klen + cnt_pad(kl));
	nc->h->ch_shape = cnt_shape(kl, lv, cp);
	if (cnt_at(it, lens, nc) != 0) {
		shmt__blk_free(st, sh, off, order);
		return SHMT_ECORRUPT;
	}
	memset(nc->m, 0, sizeof(nc->m));
	nc->h->ch_floor = now;
	if (old != NULL) {
		for (uint32_t l = 0; l < oc->levels && l < nc->levels; l++) {
			uint32_t mo = oc->m[l], n = m_n(mo);

			for (uint32_t x = 0; x < n; x++)
				nc->ts[(uint64_t)l * nc->cap + x] =
				    *slot(oc, l, m_start(mo), x);
			nc->m[l] = m_make(0, n);
			nc->meta[l] = nc->m[l];
		}
		nc->h->ch_total = oc->h->ch_total;
		nc->h->ch_top = oc->h->ch_top;
		nc->h->ch_floor = oc->h->ch_floor;
		it->it_expire = old->it_expire;
	}
	/* Evictions may have moved the chain: find the link again. */
	o2 = shmt__store_find(st, sh, hash, key, klen, &link);
	if (link == NULL || o2 != old) {
		shmt__blk_free(st, sh, off, order);
		return SHMT_ECORRUPT;
	}
	shmt__store_link_new(st, sh, hash, link, off, it, old);
	*out = it;
	return 0;
}

/*
 * Under the lock: count one hit of KEY at NOW in IT, whose view is C (IT
 * NULL: a new key), and set *SUM to the estimate for the window W.  The
 * steps: settle a killed writer's item (or load its meta words once);
 * drop the buckets older than the window; move to a block of the right size
 * when the hit's carries would not fit (or, when a block is free, to one
 * two orders smaller that would do); then append the hit and carry.
 */
static int
cnt_hit(const struct shmt_store *st, struct shmt_shard *sh, uint64_t hash,
    const void *key, size_t klen, struct shmt_item *it, struct cnt *c,
    uint64_t now, uint64_t *sum)
{
	uint64_t lo = now >= st->window ? now - st->window + 1 : 0, t = now;
	uint32_t m = st->cnt_k + 2, lv, cp, m0, n0, top;
	int rc, dirty = 0, grow;
	struct cnt nc;

	if (it == NULL) {
		if ((rc = cnt_place(st, sh, hash, key, klen, NULL, NULL, 1, 1,
		    now, 0, &it, c)) != 0)
			return rc;
	}
	if (c->h->ch_state != 0) {
		if ((rc = cnt_settle(c, m)) != 0)
			return rc;
	} else if (cnt_load(c) != 0) {
		return SHMT_ECORRUPT;
	}
	if (c->h->ch_top >= c->levels || cnt_expire(c, lo, &dirty) != 0 ||
	    cnt_need(c, m, &lv, &cp) != 0)
		return SHMT_ECORRUPT;
	grow = !cnt_fits(c, lv, cp);
	if (grow || cnt_order(cnt_bytes(c->klen, lv, cp)) + 2 <= it->it_order) {
		/* The sums are exact between the expiry's steps, so the item
		 * is at rest: the move copies it, or it stays as it is. */
		if (dirty)
			put64(&c->h->ch_state, 0);
		dirty = 0;
		rc = cnt_place(st, sh, hash, key, klen, it, c, lv, cp, now,
		    !grow, &it, &nc);
		if (rc < 0)
			return rc;
		if (rc == 0)
			*c = nc;
	}
	m0 = c->m[0];
	n0 = m_n(m0);
	if (n0 >= c->cap) {
		if (dirty)
			put64(&c->h->ch_state, 0);
		return SHMT_ECORRUPT;
	}
	/* Times only grow along the buckets (a clock injected per process may
	 * step back): a hit is never stored older than the newest. */
	if (n0 > 0 && *slot(c, 0, m_start(m0), n0 - 1) > now)
		t = *slot(c, 0, m_start(m0), n0 - 1);
	if (!dirty)
		put64(&c->h->ch_state, CS_DIRTY);
	/* Nor older than the floor (every bucket gone, then a clock behind
	 * the one that dropped them): the floor comes down to it. */
	if (c->h->ch_floor > t)
		put64(&c->h->ch_floor, t);
	*slot(c, 0, m_start(m0), n0) = t;
	m_put(c, 0, m_make(m_start(m0), n0 + 1));
	put64(&c->h->ch_total, c->h->ch_total + 1);
	cnt_carry(c, 0, m);
	put64(&c->h->ch_state, 0);
	/* A clock behind another process's can bring the expiry down. */
	reap_hint_lower(sh, now + st->window);
	it->it_expire = now + st->window;
	/* Counters are evicted by their last hit, not by their creation. */
	it->it_born = now;
	top = (uint32_t)c->h->ch_top;
	if (top >= c->levels)
		return SHMT_ECORRUPT;
	*sum = cnt_estimate(c->h->ch_total - (1ULL << top), top,
	    c->h->ch_floor >= lo);
	return 0;
}

static int
gen_hit_once(shmt_t *h, const void *key, size_t klen, uint64_t *count)
{
	const struct shmt_store *st = h != NULL ? h->counters : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link, now, sum = 0;
	uint32_t lens = 0;
	struct cnt c;
	int rc;

	if ((rc = shmt__store_lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	now = shmt__now(h);
	it = shmt__store_find_lens(st, sh, hash, key, klen, &link, &lens);
	/* A value not of a counter's shape (damage) would make the update
	 * write past the item. */
	if (link == NULL || (it != NULL && cnt_at(it, lens, &c) != 0)) {
		rc = SHMT_ECORRUPT;
		goto out;
	}
	if (it != NULL && expired(it, now)) {
		shmt__store_unlink(st, sh, link, it);
		sh->ds_expirations++;
		it = NULL;
	}
	if ((rc = cnt_hit(st, sh, hash, key, klen, it, &c, now, &sum)) == 0 &&
	    count != NULL)
		*count = sum;
out:
	shmt__unlock(&sh->ds_lock);
	return rc;
}

SHMT_EXPORT int
shmt_hit(shmt_t *h, const void *key, size_t klen, uint64_t *count)
{
	SHMT_GEN_CALL(h, gen_hit_once(h, key, klen, count));
}

/* ---- Rebasing and checking ------------------------------------------------- */

static uint64_t
shift(uint64_t t, int64_t d)
{
	uint64_t a = d >= 0 ? (uint64_t)d : -(uint64_t)d;

	if (d >= 0)
		return t > UINT64_MAX - a ? UINT64_MAX : t + a;
	return t > a ? t - a : 0;
}

/* Move every time of counter IT by D ns, clamped, which keeps their order
 * (every slot, used or not).  A time that would fall before the clock's
 * zero (after a reboot, the new boot's clock began after it) cannot be
 * placed: those buckets, the oldest, are dropped, so no hit is counted
 * past its window (kept at zero, they would count for a whole window of
 * the new clock).  The store calls this on a segment no one else uses yet
 * (snapshot restore), so the item is settled in place first. */
void
shmt__cnt_rebase(const struct shmt_store *st, struct shmt_item *it,
    uint32_t lens, int64_t d)
{
	int dirty = 0;
	struct cnt c;

	if (cnt_at(it, lens, &c) != 0)
		return;
	if (c.h->ch_state != 0 ? cnt_settle(&c, st->cnt_k + 2) != 0 :
	    cnt_load(&c) != 0)
		return;
	for (uint64_t i = 0; i < (uint64_t)c.levels * c.cap; i++)
		c.ts[i] = shift(c.ts[i], d);
	c.h->ch_floor = shift(c.h->ch_floor, d);
	/* Times of 0 are the ones that could not be placed (a clock reading
	 * 0 is the boot itself): drop them as expired. */
	if (c.h->ch_top < c.levels && cnt_expire(&c, 1, &dirty) == 0 && dirty)
		put64(&c.h->ch_state, 0);
}

/*
 * What a counter at rest (ch_state 0) with the meta words METAS must say of
 * itself: ch_total the hits of its buckets, ch_top the highest level holding
 * one (0: none), times that never go down from the top level's oldest
 * bucket to level 0's newest (along each ring and from each level to the
 * one below), and ch_floor no newer than the oldest bucket; *NEWEST gets
 * the newest bucket's time (0: none), for the caller to compare with its
 * clock.  NULL when it does, else what it contradicts.  Each word is read
 * once (the check reads racy memory: its caller confirms at rest).  A
 * header that lies would make every later answer lie: ch_total is the
 * answer of shmt_hit, ch_top says which buckets expire, a bucket time in
 * the future is the time of every later hit.
 */
static const char *
cnt_rest_why(const struct cnt *c, const uint32_t *metas, uint64_t *newest)
{
	uint64_t total = __atomic_load_n(&c->h->ch_total, __ATOMIC_RELAXED);
	uint64_t top = __atomic_load_n(&c->h->ch_top, __ATOMIC_RELAXED);
	uint64_t floor = __atomic_load_n(&c->h->ch_floor, __ATOMIC_RELAXED);
	uint64_t prev = 0, oldest = 0, high = 0;
	unsigned __int128 sum = 0;
	int any = 0;

	*newest = 0;
	for (uint32_t l = c->levels; l-- > 0;) {
		uint32_t s = m_start(metas[l]), n = m_n(metas[l]);

		if (n == 0)
			continue;
		sum += (unsigned __int128)n << l;
		if (!any)
			high = l;
		for (uint32_t x = 0; x < n; x++) {
			uint64_t t = __atomic_load_n(slot(c, l, s, x),
			    __ATOMIC_RELAXED);

			if (any && t < prev)
				return "bucket times out of order";
			if (!any)
				oldest = t;
			any = 1;
			prev = t;
		}
	}
	if (sum != total)
		return "a total that is not its buckets' hits";
	if (top != high)
		return "a top level that is not its highest holding a bucket";
	*newest = prev;
	if (any && floor > oldest)
		return "a floor newer than its oldest bucket";
	return NULL;
}

/* The shape of the value, each ring inside its slots, a journal that names
 * a level with one above it, and at rest a header that says what its
 * buckets hold (cnt_rest_why).  What a writer killed midway leaves
 * (ch_state set, ch_total stale) is not a problem: the next locker settles
 * it.  Reads racy memory (the check does not lock): each word once, with
 * the lengths the chain walk checked (LENS); a counter that a writer
 * changed while it was read (ch_state or a meta word not the same after)
 * is passed over, and the time is read after the buckets, so a hit the
 * read saw is never in its future. */
void
shmt__cnt_check_item(const struct shmt_store *st, const struct shmt_item *it,
    uint32_t lens, struct shmt_chk *c, const char *who, uint64_t off)
{
	uint32_t metas[CNT_LEVELS_MAX], again[CNT_LEVELS_MAX];
	uint64_t state, newest;
	const char *why;
	struct cnt v;

	if (cnt_at(it, lens, &v) != 0) {
		shmt__chk(c, "%s: counter item at %llu has a value of %u bytes, "
		    "not a counter's shape for its header", who,
		    (unsigned long long)off, lens_vlen(lens));
		return;
	}
	state = __atomic_load_n(&v.h->ch_state, __ATOMIC_ACQUIRE);
	if (cnt_metas(&v, metas) != 0) {
		shmt__chk(c, "%s: counter item at %llu has a level ring outside "
		    "its %u slots, or a merge journal naming no level", who,
		    (unsigned long long)off, v.cap);
		return;
	}
	if (state != 0)
		return;
	why = cnt_rest_why(&v, metas, &newest);
	if (why == NULL && newest > shmt__now(st->h))
		why = "a bucket time in the future";
	if (why == NULL ||
	    __atomic_load_n(&v.h->ch_state, __ATOMIC_ACQUIRE) != 0 ||
	    cnt_metas(&v, again) != 0 ||
	    memcmp(metas, again, 4ULL * v.levels) != 0)
		return;
	shmt__chk(c, "%s: counter item at %llu contradicts its buckets: %s "
	    "(the key's counts cannot be trusted)", who,
	    (unsigned long long)off, why);
}

/* ---- Reading without counting ------------------------------------------------ */

/*
 * The estimate for the window (now - w, now] from C's meta words METAS
 * (settled): the oldest bucket with time >= lo is found in the highest
 * level whose newest bucket is at or after lo, by binary search (times grow
 * along a ring); every bucket after it counts whole.
 */
static uint64_t
count_read(const struct cnt *c, const uint32_t *metas, uint64_t now,
    uint64_t w)
{
	uint64_t lo = now + 1 >= w ? now + 1 - w : 0, sum;
	int oldest = 1;

	for (uint32_t i = c->levels; i-- > 0;) {
		uint32_t s = m_start(metas[i]), n = m_n(metas[i]), a = 0, b;

		if (n == 0)
			continue;
		if (*slot(c, i, s, n - 1) < lo) {
			oldest = 0;
			continue;
		}
		b = n - 1;
		while (a < b) {
			uint32_t mid = a + (b - a) / 2;

			if (*slot(c, i, s, mid) >= lo)
				b = mid;
			else
				a = mid + 1;
		}
		sum = (uint64_t)(n - a - 1) << i;
		for (uint32_t l = 0; l < i; l++)
			sum += (uint64_t)m_n(metas[l]) << l;
		return cnt_estimate(sum, i, oldest && a == 0 &&
		    c->h->ch_floor >= lo);
	}
	return 0;
}

static int
gen_count_once(shmt_t *h, const void *key, size_t klen, uint64_t window_ns,
    uint64_t *count)
{
	const struct shmt_store *st = h != NULL ? h->counters : NULL;
	uint32_t metas[CNT_LEVELS_MAX];
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link, now;
	uint32_t lens = 0;
	struct cnt c;
	int rc;

	if (count == NULL)
		return -EINVAL;
	*count = 0;
	if (st != NULL && st->shards != 0 && window_ns > st->window)
		return -EINVAL;
	if ((rc = shmt__store_lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	now = shmt__now(h);
	it = shmt__store_find_lens(st, sh, hash, key, klen, &link, &lens);
	if (link == NULL || (it != NULL && (cnt_at(it, lens, &c) != 0 ||
	    cnt_metas(&c, metas) != 0)))
		rc = SHMT_ECORRUPT;
	else if (it != NULL && !expired(it, now))
		*count = count_read(&c, metas, now, window_ns == 0 ?
		    st->window : window_ns);
	shmt__unlock(&sh->ds_lock);
	return rc;
}

SHMT_EXPORT int
shmt_count(shmt_t *h, const void *key, size_t klen, uint64_t window_ns,
    uint64_t *count)
{
	SHMT_GEN_READ(h, gen_count_once(h, key, klen, window_ns, count));
}

/* The C that answer A may stand for: C = A when C <= k, else |A - C| <=
 * max(1, eps C), i.e. min(A - 1, ceil(A / (1 + eps))) <= C <= max(A + 1,
 * floor(A / (1 - eps))), an interval; with C <= k only A itself. */
static int
gen_count_bound_once(shmt_t *h, uint64_t count, uint64_t *lo, uint64_t *hi,
    uint32_t *error_ppm)
{
	const struct shmt_store *st = h != NULL ? h->counters : NULL;
	unsigned __int128 a = count, e, up, dn;
	uint64_t l, u, k;

	if (h == NULL)
		return -EINVAL;
	if (st == NULL || st->shards == 0)
		return -ENODEV;
	e = st->cnt_error_ppm;
	k = st->cnt_k;
	dn = (a * 1000000 + 1000000 + e - 1) / (1000000 + e);
	up = a * 1000000 / (1000000 - e);
	l = count == 0 ? 0 : count - 1;
	if (dn < l)
		l = (uint64_t)dn;
	u = up > UINT64_MAX ? UINT64_MAX : (uint64_t)up;
	if (u < count + (count < UINT64_MAX))
		u = count + (count < UINT64_MAX);
	if (l <= k)
		l = k + 1;
	if (count <= k) {
		/* A itself, and the C above k next to it (none unless A = k). */
		u = l <= u && l == count + 1 ? u : count;
		l = count;
	}
	if (lo != NULL)
		*lo = l;
	if (hi != NULL)
		*hi = u;
	if (error_ppm != NULL)
		*error_ppm = st->cnt_error_ppm;
	return 0;
}

SHMT_EXPORT int
shmt_count_bound(shmt_t *h, uint64_t count, uint64_t *lo, uint64_t *hi,
    uint32_t *error_ppm)
{
	SHMT_GEN_READ(h, gen_count_bound_once(h, count, lo, hi, error_ppm));
}

/* ---- Snapshot restore ----------------------------------------------------- */

/* The value is the counters' own bytes (padding, head, rings), so it goes
 * back as it was; its times move by DELTA_NS (shmt__cnt_rebase, which
 * settles a value left by a writer killed midway).  Then it must say what
 * its buckets hold (cnt_rest_why), with no bucket past now: the image's
 * time moved by DELTA_NS is at most that. */
int
shmt__cnt_restore(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t expire, int64_t delta_ns)
{
	const struct shmt_store *st = h->counters;
	uint32_t metas[CNT_LEVELS_MAX];
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link, newest;
	uint32_t lens = 0;
	struct cnt c;
	int rc;

	if ((rc = shmt__store_lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	rc = shmt__store_add(h, st, sh, hash, key, klen, val, vlen, expire);
	if (rc == 0) {
		it = shmt__store_find_lens(st, sh, hash, key, klen, &link,
		    &lens);
		if (it == NULL || link == NULL) {
			rc = SHMT_ECORRUPT;
		} else if (cnt_at(it, lens, &c) != 0 ||
		    cnt_metas(&c, metas) != 0 || c.h->ch_top >= c.levels) {
			shmt__store_unlink(st, sh, link, it);
			rc = -EINVAL;
		} else {
			shmt__cnt_rebase(st, it, lens, delta_ns);
			if (c.h->ch_state != 0 || cnt_metas(&c, metas) != 0 ||
			    cnt_rest_why(&c, metas, &newest) != NULL ||
			    newest > shmt__now(h)) {
				shmt__store_unlink(st, sh, link, it);
				rc = -EBADMSG;
			}
		}
	}
	shmt__unlock(&sh->ds_lock);
	return rc;
}
