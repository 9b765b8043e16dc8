/* SPDX-License-Identifier: MIT */
/*
 * Eviction of the windowed counters' items (counters.c): by last hit, in
 * batches, with a bound on how recently an evicted key was hit.
 */
#include "counters.h"

#include <errno.h>
#include <string.h>

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
 *
 * Each walk of the shard passes at most chain_bound() items in all, as
 * many as a sound shard holds in all its chains.  A walk that would pass
 * more has met damage (chains that loop or share items): it stops there
 * and the eviction returns SHMT_ECORRUPT, having evicted nothing (the
 * first walk, which evicts nothing, is the one that meets it), so a hit
 * that needs room in a damaged shard fails at once instead of holding the
 * lock for a walk per bucket.
 */
#define CNT_BINS 64

static uint64_t
cnt_evict_pass(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except, int mode, uint64_t lo, uint64_t width,
    uint64_t *acc, int *damaged)
{
	struct shmt_bucket *index = shard_index(st, sh);
	uint64_t n = 0, steps = chain_bound(st);
	char *heap = shard_heap(st, sh);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t *link = &index[b].bk_head;

		while (link_unit(*link) != 0) {
			struct shmt_item *it;
			uint64_t t;

			if (steps == 0) {
				*damaged = 1;
				return n;
			}
			steps--;
			it = item_at(st, heap, link_off(*link));
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
	int found = 0, damaged = 0;

	n = cnt_evict_pass(st, sh, except, 0, 0, 1, range, &damaged);
	if (damaged)
		return SHMT_ECORRUPT;
	if (n == 0)
		return 0;
	width = (range[1] - range[0]) / CNT_BINS + 1;
	cnt_evict_pass(st, sh, except, 1, range[0], width, bins, &damaged);
	for (uint64_t j = 0; j < CNT_BINS && sum + bins[j] <= n / 8; j++) {
		sum += bins[j];
		last = j;
		found = 1;
	}
	/* The oldest bin alone holds more than N / 8: the least recently hit
	 * item only (range[0] is its last hit). */
	if (!found || sum == 0)
		last = 0;
	n = cnt_evict_pass(st, sh, except, found && sum > 0 ? 2 : 3, range[0],
	    width, &last, &damaged);
	return damaged ? SHMT_ECORRUPT : (int)n;
}
