/* SPDX-License-Identifier: MIT */
/*
 * The windowed counters of shmt_hit() and shmt_count(): one item per key in
 * the counters' store (store.c), changed in place under the shard's lock.
 *
 * Structure.  The window W is cut into n sub-windows that tile the clock
 * exactly (tiles.h): sub-window k spans [floor(k W / n), floor((k+1) W / n)),
 * each w = floor(W / n) or c = ceil(W / n) ns long, and any n in a row span
 * exactly W.  A key's item holds the index of the newest sub-window it has
 * counted and a ring of n 32-bit counts, slot k % n for sub-window k.
 *
 * Bound of shmt_hit.  It sums the n sub-windows up to now's, which span
 * (s, s + W] with s + W > now >= s + W - c: so it counts no hit with
 * now - t >= W and every hit with now - t < W - c + 1; it misses at most
 * the hits of one sub-window, the oldest.  (The error is relative to that
 * sub-window's hits, not to the count: a key hit only in its oldest
 * sub-window can be under-counted by all of them.)
 *
 * Bound of shmt_count(w), w <= W.  It sums the sub-windows whose start is
 * at least now - w + 1, newest first, stopping at the first that starts
 * earlier.  Each summed sub-window lies inside (now - w, now], so no hit
 * with now - t >= w is counted.  A hit with now - t <= w - c lies in a
 * sub-window of start > t - c >= now - w, so it is counted.  Those
 * sub-windows are all in the ring: the n up to now's reach back past
 * now - W + 1 > now - w.  So
 *   #{t : now - t <= w - c}  <=  shmt_count(w)  <=  #{t : now - t < w},
 * and with w = W it is shmt_hit's sum.  A read never writes.
 *
 * Memory.  Per key: a 48-byte item header, the key, and 8 + 4 n bytes,
 * rounded up to a power of two of at least 64 bytes (the store's buddy
 * blocks); fixed whatever the count.  A count saturates at 2^32 - 1 per
 * sub-window.
 *
 * Crash safety.  Stale slots are zeroed before the index moves (a repeat
 * zeroes them again), and a count is one 4-byte store: a writer killed at
 * any instruction leaves each sub-window's count old or new, so every
 * answer keeps its bound with at most the killed writer's one hit missing.
 */
#include "counters.h"

#include "tiles.h"

#include <errno.h>
#include <string.h>

/* CNT_VLEN (store.h): the value length of every counter item of ST, the
 * index of the newest sub-window, then one count per sub-window.
 * item_val and expired are the store's (store.h). */

int
shmt__cnt_item_ok(const struct shmt_store *st, const struct shmt_item *it)
{
	return it->it_vlen == CNT_VLEN(st);
}

/* ---- Eviction --------------------------------------------------------------- */

/*
 * Counters evict by last hit, in batches, with a bound.  (The dictionary's
 * sampling, in store.c, has none: with keys re-hit well within the capacity it
 * lost a few in a thousand to a few in a hundred of their first hits.  A
 * second-chance bit has none either: when every item's bit is set, the
 * hand clears them all and takes the item just ahead of it, however fresh.)  One pass over the shard finds its N items'
 * oldest and newest last hit (it_born); a second counts them in 64 bins of
 * equal width over that range; the third evicts the items of the oldest
 * bins that together hold at most N / 8 items, or, when the oldest bin alone
 * holds more, the one item hit least recently.  So an evicted item is among
 * the max(1, N / 8) least recently hit: at least N - N / 8 items (or, for the
 * single one, all others) were hit later, and a key hit again before 7N/8
 * other keys of its shard were hit keeps its count.  The cost is three walks
 * of the shard once per N / 8 evictions (a few visits per eviction, but one
 * call pays for the walk under the shard lock); exact LRU would need a list
 * in every item, relinked on every hit.  EXCEPT is never chosen.  Returns
 * how many items were evicted.
 */
#define CNT_BINS 64

static uint64_t
cnt_evict_pass(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except, int mode, uint64_t lo, uint64_t width,
    uint64_t *acc)
{
	uint64_t *index = shard_index(st, sh), n = 0;
	char *heap = shard_heap(st, sh);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t *link = &index[b], steps = st->heap_bytes / 64;

		while (*link != 0 && steps-- > 0) {
			struct shmt_item *it = item_at(st, heap, *link - 1);
			uint64_t t;

			if (it == NULL)
				break;
			t = it->it_born < lo ? lo : it->it_born;
			if (it == except) {
				link = &it->it_next;
				continue;
			}
			if (mode == 0) {                /* range */
				acc[0] = n == 0 || t < acc[0] ? t : acc[0];
				acc[1] = n == 0 || t > acc[1] ? t : acc[1];
			} else if (mode == 1) {         /* histogram */
				uint64_t j = (t - lo) / width;

				acc[j < CNT_BINS ? j : CNT_BINS - 1]++;
			} else if ((t - lo) / width <= acc[0] &&
			    (mode == 2 || t == lo)) {    /* evict */
				shmt__store_unlink(st, sh, link, it);
				sh->ds_evictions++;
				n++;
				if (mode == 3)
					return n;
				continue;
			}
			if (mode < 2)
				n++;
			link = &it->it_next;
		}
	}
	return n;
}

int
shmt__cnt_evict(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except)
{
	uint64_t range[2] = { 0, 0 }, bins[CNT_BINS] = { 0 }, n, width, sum = 0;
	uint64_t last = 0;
	int found = 0;

	n = cnt_evict_pass(st, sh, except, 0, 0, 1, range);
	if (n == 0)
		return 0;
	width = (range[1] - range[0]) / CNT_BINS + 1;
	cnt_evict_pass(st, sh, except, 1, range[0], width, bins);
	for (uint64_t j = 0; j < CNT_BINS && sum + bins[j] <= n / 8; j++) {
		sum += bins[j];
		last = j;
		found = 1;
	}
	if (found && sum > 0)
		return (int)cnt_evict_pass(st, sh, except, 2, range[0], width,
		    &last);
	/* The oldest bin alone holds more than N / 8: the least recently hit
	 * item only (range[0] is its last hit). */
	last = 0;
	return (int)cnt_evict_pass(st, sh, except, 3, range[0], width, &last);
}

/* ---- Counting --------------------------------------------------------------- */

/*
 * A counter item's value: the index of the newest sub-window it has counted
 * (u64), then one u32 count per sub-window, sub-window i in slot i % n.
 * Counters change in place under the shard lock; no lock-free reader reads
 * them.  Each step is crash-safe: stale slots are zeroed before the index
 * moves (so a repeat zeroes them again), and a count is one 4-byte store.
 */
/* Counts follow a key of any length, so they are unaligned: memcpy moves
 * each one with a single 4-byte load or store (one instruction, so a kill
 * -9 cannot split it). */
static uint32_t
cnt_get(const char *c, uint64_t i)
{
	uint32_t v;

	memcpy(&v, c + 4 * i, sizeof(v));
	return v;
}

static void
cnt_put(char *c, uint64_t i, uint32_t v)
{
	memcpy(c + 4 * i, &v, sizeof(v));
}

static uint64_t
hit_update(const struct shmt_store *st, struct shmt_item *it, uint64_t now)
{
	uint64_t idx = shmt__tile_of(now, st->window, st->subw), cur, sum = 0;
	char *v = item_val(it), *cnt = v + sizeof(cur);
	uint32_t c;

	memcpy(&cur, v, sizeof(cur));
	if (idx > cur) {
		uint64_t gap = idx - cur < st->subw ? idx - cur : st->subw;

		for (uint64_t i = 1; i <= gap; i++)
			cnt_put(cnt, (cur + i) % st->subw, 0);
		memcpy(v, &idx, sizeof(idx));
		cur = idx;
	}
	c = cnt_get(cnt, cur % st->subw);
	if (c != UINT32_MAX)
		cnt_put(cnt, cur % st->subw, c + 1);
	for (uint32_t i = 0; i < st->subw; i++)
		sum += cnt_get(cnt, i);
	it->it_expire = now + st->window;
	/* Counters are evicted by their last hit, not by their creation. */
	it->it_born = now;
	return sum;
}

SHMT_EXPORT int
shmt_hit(shmt_t *h, const void *key, size_t klen, uint64_t *count)
{
	const struct shmt_store *st = h != NULL ? h->counters : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link, now, sum;
	int rc;

	if ((rc = shmt__store_lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	now = shmt__now(h);
	it = shmt__store_find(st, sh, hash, key, klen, &link);
	/* A counter item's value is exactly its index and ring: a shorter
	 * one (damage) would make the update write past the item. */
	if (link == NULL || (it != NULL && !shmt__cnt_item_ok(st, it))) {
		rc = SHMT_ECORRUPT;
		goto out;
	}
	if (it != NULL && expired(it, now)) {
		shmt__store_unlink(st, sh, link, it);
		sh->ds_expirations++;
		it = NULL;
	}
	if (it == NULL) {
		uint64_t vlen = CNT_VLEN(st);
		uint64_t idx = shmt__tile_of(now, st->window, st->subw);
		char zero[8 + 4 * 256];

		memset(zero, 0, sizeof(zero));
		memcpy(zero, &idx, sizeof(idx));
		if ((rc = shmt__store_add(h, st, sh, hash, key, klen, zero, vlen,
		    now + st->window)) != 0)
			goto out;
		it = shmt__store_find(st, sh, hash, key, klen, &link);
		if (it == NULL || !shmt__cnt_item_ok(st, it)) {
			rc = SHMT_ECORRUPT;
			goto out;
		}
	}
	sum = hit_update(st, it, now);
	if (count != NULL)
		*count = sum;
out:
	shmt__unlock(&sh->ds_lock);
	return rc;
}

/* ---- Rebasing and checking ------------------------------------------------- */

/* Move a counter's sub-windows with the clock, rounding toward the past so
 * no count is kept longer than its window.  Moving every index by k moves
 * each sub-window's start by floor(k W / n) or ceil(k W / n) (tiles.h);
 * k = floor(d n / W) keeps that at most d, and for d < 0, k = -ceil(-d n / W)
 * makes it at least -d in size.  Each count moves with its sub-window, from
 * slot s % n to slot (s + k) % n; a sub-window that would start before the
 * clock's zero (after a reboot, the new boot's clock began after it)
 * cannot be placed and its count is dropped. */
void
shmt__cnt_rebase(const struct shmt_store *st, struct shmt_item *it, int64_t d)
{
	unsigned __int128 a = (unsigned __int128)(d >= 0 ? (uint64_t)d :
	    -(uint64_t)d) * st->subw;
	char *cnt = item_val(it) + sizeof(uint64_t);
	uint32_t old[256];
	uint64_t k, cur, nc;

	if (!shmt__cnt_item_ok(st, it) || st->subw > 256)
		return;
	a = d >= 0 ? a / st->window : (a + st->window - 1) / st->window;
	k = a > UINT64_MAX ? UINT64_MAX : (uint64_t)a;
	memcpy(&cur, item_val(it), sizeof(cur));
	for (uint32_t i = 0; i < st->subw; i++) {
		old[i] = cnt_get(cnt, i);
		cnt_put(cnt, i, 0);
	}
	if (d >= 0)
		nc = cur > UINT64_MAX - k ? UINT64_MAX : cur + k;
	else
		nc = cur > k ? cur - k : 0;
	for (uint64_t j = 0; j < st->subw && j <= cur && j <= nc; j++) {
		if (nc == UINT64_MAX || (d < 0 && cur < k))
			break;
		cnt_put(cnt, (nc - j) % st->subw, old[(cur - j) % st->subw]);
	}
	memcpy(item_val(it), &nc, sizeof(nc));
}

/* shmt_hit writes the whole ring of sub-window counts into the value. */
void
shmt__cnt_check_item(const struct shmt_store *st, const struct shmt_item *it,
    struct shmt_chk *c, const char *who, uint64_t off)
{
	if (!shmt__cnt_item_ok(st, it))
		shmt__chk(c, "%s: counter item at %llu has a value of %u bytes, "
		    "its ring of %u sub-windows takes %llu", who,
		    (unsigned long long)off, it->it_vlen, st->subw,
		    (unsigned long long)CNT_VLEN(st));
}

/* ---- Reading without counting ------------------------------------------------ */

/*
 * The sum of the sub-windows of IT that lie wholly inside (now - w, now]:
 * sub-window k counts when its start is at least now - w + 1.  Those are
 * within the ring (the n sub-windows up to now's span exactly W >= w), so no
 * slot older than the ring is read; walking from the newest, the first
 * sub-window that starts too early ends the sum.
 */
static uint64_t
count_read(const struct shmt_store *st, struct shmt_item *it, uint64_t now,
    uint64_t w)
{
	char *v = item_val(it), *cnt = v + sizeof(uint64_t);
	uint64_t cur, sum = 0, lo = now + 1 >= w ? now + 1 - w : 0;

	memcpy(&cur, v, sizeof(cur));
	for (uint64_t j = 0; j < st->subw && j <= cur; j++) {
		uint64_t k = cur - j;

		if (shmt__tile_start(k, st->window, st->subw) < lo)
			break;
		sum += cnt_get(cnt, k % st->subw);
	}
	return sum;
}

SHMT_EXPORT int
shmt_count(shmt_t *h, const void *key, size_t klen, uint64_t window_ns,
    uint64_t *count)
{
	const struct shmt_store *st = h != NULL ? h->counters : NULL;
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link, now;
	int rc;

	if (count == NULL)
		return -EINVAL;
	*count = 0;
	if (st != NULL && st->shards != 0 && window_ns > st->window)
		return -EINVAL;
	if ((rc = shmt__store_lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	now = shmt__now(h);
	it = shmt__store_find(st, sh, hash, key, klen, &link);
	if (link == NULL || (it != NULL && !shmt__cnt_item_ok(st, it)))
		rc = SHMT_ECORRUPT;
	else if (it != NULL && !expired(it, now))
		*count = count_read(st, it, now, window_ns == 0 ? st->window :
		    window_ns);
	shmt__unlock(&sh->ds_lock);
	return rc;
}

/* ---- Snapshot restore ----------------------------------------------------- */

int
shmt__cnt_restore(shmt_t *h, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t expire, int64_t delta_ns)
{
	const struct shmt_store *st = h->counters;
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link;
	int rc;

	if ((rc = shmt__store_lock_key(h, st, key, klen, &hash, &sh)) != 0)
		return rc;
	rc = shmt__store_add(h, st, sh, hash, key, klen, val, vlen, expire);
	if (rc == 0) {
		it = shmt__store_find(st, sh, hash, key, klen, &link);
		if (it == NULL || link == NULL)
			rc = SHMT_ECORRUPT;
		else if (!shmt__cnt_item_ok(st, it)) {
			shmt__store_unlink(st, sh, link, it);
			rc = -EINVAL;
		} else {
			shmt__cnt_rebase(st, it, delta_ns);
		}
	}
	shmt__unlock(&sh->ds_lock);
	return rc;
}
