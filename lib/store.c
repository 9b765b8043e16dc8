/* SPDX-License-Identifier: MIT */
/*
 * The sharded store behind the dictionary and the windowed counters: a
 * string -> bytes hash in the segment, read without locks, written under a
 * per-shard lock (lock.h), with TTLs and eviction.
 *
 * A write of a new key, or of a value that needs another block size, fills
 * a fresh block, then links it with one 8-byte store, then frees the old
 * block.  A value that fits the old item's block (up to SHMT_UNDO_MAX
 * bytes) is written over it, saved first in the shard's undo record
 * (shmt__store_overwrite proves that readers and kill -9 see the old or the
 * new value); the counters change their items in place their own way (see
 * counters.c).  Readers walk chains with no lock and check the shard's
 * version (ds_seq) before and after; a writer makes the version odd around
 * the store that relinks a chain or the bytes it overwrites, and frees
 * blocks only after making it even again, so a reader that may have
 * reached a block before it was unlinked sees the version moved and
 * retries.  Everything a reader
 * reads is bounds-checked against the shard's heap, so a block freed and
 * reused under it yields garbage that fails validation, never a crash.
 *
 * Crash model.  Each chain is consistent after every single store, so a
 * writer killed at any instruction leaves every key with its old or its new
 * value; it may leave the version odd, a block allocated but unlinked, a
 * free list half-edited, or an item half overwritten with its undo record
 * armed.  The next locker (told by shmt__lock that the holder died,
 * lock.h), or a reader that finds the version stuck odd with a dead owner,
 * repairs the shard: it puts back the item the undo record saved, then
 * walks the chains (cutting any that fail validation), marks the blocks the
 * items use, and rebuilds the free lists from the gaps, without trusting any
 * free block's header.  That is also why the allocator is a buddy system:
 * a gap decomposes into maximal aligned blocks, and the result is exactly
 * the allocator's own invariant.  Its cost is internal fragmentation (an
 * item takes the next power of two), which `stat` reports as used bytes.
 */
#include "store.h"

#include "counters.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Geometry ----------------------------------------------------------- */


/* The release fence of an overwrite in place and of its repair: the odd
 * version (and the undo record) before any byte of the item changes.  gcc
 * cannot instrument fences for ThreadSanitizer (-Wtsan): its build does
 * not overwrite in place (shmt__store_overwrite), and a compiler barrier
 * stands in where the code remains (x86-64 keeps stores in order). */
static inline void
store_fence(void)
{
#if defined(SHMT_SANITIZE_THREAD)
	__asm__ __volatile__("" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

static int
ilog2(uint64_t v)
{
	return 63 - __builtin_clzll(v);
}

int
shmt__store_geometry(uint64_t bytes, uint32_t shards, int counters,
    struct shmt_store *st, uint64_t *size, const char **why)
{
	uint64_t per, heap, min = counters ? (64ULL << 10) : (2ULL << 20);
	const char *dummy;

	if (why == NULL)
		why = &dummy;
	memset(st, 0, sizeof(*st));
	*size = 0;
	if (bytes == 0)
		return 0;
	if (shards == 0 || shards > 1024 || (shards & (shards - 1)) != 0) {
		*why = "shards: must be a power of two from 1 to 1024";
		return -EINVAL;
	}
	per = bytes / shards;
	if (per < min) {
		*why = counters ? "bytes: each shard needs at least 64 KiB "
		    "(bytes / shards)" : "bytes: each shard needs at least 2 MiB "
		    "(bytes / shards), room for the largest item";
		return -EINVAL;
	}
	if (per > (1ULL << 36)) {
		*why = "bytes: each shard holds at most 64 GiB (bytes / shards)";
		return -EINVAL;
	}
	heap = 1ULL << ilog2(per);
	st->shards = shards;
	st->heap_bytes = heap;
	st->order_max = (uint32_t)(ilog2(heap) - SHMT_BLOCK_MIN_SHIFT);
	/* The dictionary: one bucket per 128 heap bytes, so that a chain
	 * holds at most one item on average in a heap half full of the
	 * smallest items (64 bytes), and a small item usually has its
	 * bucket's slot to itself; the index is half the heap (64 bytes a
	 * bucket).  The counters' items are larger and never in a slot: one
	 * bucket per 512 heap bytes, an index of an eighth of the heap. */
	st->nbuckets = heap >> (counters ? 9 : 7);
	st->index_off = shmt__align_up(sizeof(struct shmt_shard), SHMT_LINE);
	st->heap_off = shmt__align_up(st->index_off +
	    st->nbuckets * sizeof(struct shmt_bucket), SHMT_PAGE);
	/* Shards one line further apart than their size, so that their
	 * headers (the version every get loads, the lock and the free
	 * lists every set reads) fall in different sets of the caches.
	 * Without the extra line the stride is a multiple of the page and
	 * of 64 KiB, every shard's version maps to one set of an 8-way L1
	 * and L2, and 16 shards evict one another's (measured: half an L1
	 * miss per get, callgrind --cache-sim).  Up to 4096 / 128 = 32
	 * shards get sets of their own; more share them, 8 to a set only
	 * past 256. */
	st->stride = st->heap_off + heap + SHMT_LINE;
	st->counters = counters;
	*size = st->stride * shards;
	return 0;
}

/* ---- The buddy allocator (writers only, under the shard lock) ------------ */

/* A free-list link (offset + 1) read from the segment names a block of
 * ORDER inside the heap, on its size's alignment. */
int
shmt__fl_link_ok(const struct shmt_store *st, uint64_t link, uint32_t order)
{
	uint64_t size = 64ULL << order;

	return link != 0 && link - 1 < st->heap_bytes &&
	    ((link - 1) & (size - 1)) == 0 && st->heap_bytes - (link - 1) >= size;
}

static void
fl_push(const struct shmt_store *st, struct shmt_shard *sh, uint64_t off,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);
	struct shmt_fblock *b = fb_at(heap, off);
	uint64_t head = sh->ds_free[order];

	/* A damaged head is dropped (the blocks behind it are lost until a
	 * repair rebuilds the lists), never followed. */
	if (!shmt__fl_link_ok(st, head, order))
		head = 0;
	b->fb_magic = SHMT_IT_FREE;
	b->fb_order = (uint8_t)order;
	b->fb_prev = 0;
	b->fb_next = head;
	if (head != 0)
		fb_at(heap, head - 1)->fb_prev = off + 1;
	sh->ds_free[order] = off + 1;
	sh->ds_free_mask |= 1ULL << order;
}

/* Unlink free block OFF of ORDER; -1 when the lists are inconsistent. */
static int
fl_remove(const struct shmt_store *st, struct shmt_shard *sh, uint64_t off,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);
	struct shmt_fblock *b = fb_at(heap, off);
	uint64_t next = b->fb_next, prev = b->fb_prev;

	if ((next != 0 && !shmt__fl_link_ok(st, next, order)) ||
	    (prev != 0 && !shmt__fl_link_ok(st, prev, order)))
		return -1;
	if (prev != 0)
		fb_at(heap, prev - 1)->fb_next = next;
	else if (sh->ds_free[order] == off + 1) {
		sh->ds_free[order] = next;
		if (next == 0)
			sh->ds_free_mask &= ~(1ULL << order);
	}
	else
		return -1;
	if (next != 0)
		fb_at(heap, next - 1)->fb_prev = prev;
	b->fb_magic = 0;
	return 0;
}

/* Allocate a block of ORDER; returns its offset, or UINT64_MAX. */
uint64_t
shmt__blk_alloc(const struct shmt_store *st, struct shmt_shard *sh,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);
	uint32_t k = order;
	uint64_t off;

	while (k <= st->order_max && sh->ds_free[k] == 0)
		k++;
	if (k > st->order_max)
		return UINT64_MAX;
	if (!shmt__fl_link_ok(st, sh->ds_free[k], k))
		return UINT64_MAX;
	off = sh->ds_free[k] - 1;
	if (fb_at(heap, off)->fb_magic != SHMT_IT_FREE ||
	    fl_remove(st, sh, off, k) != 0)
		return UINT64_MAX;
	while (k > order) {
		k--;
		fl_push(st, sh, off + (64ULL << k), k);
	}
	sh->ds_used += 64ULL << order;
	return off;
}

void
shmt__blk_free(const struct shmt_store *st, struct shmt_shard *sh, uint64_t off,
    uint32_t order)
{
	char *heap = shard_heap(st, sh);

	sh->ds_used -= 64ULL << order;
	while (order < st->order_max) {
		uint64_t buddy = off ^ (64ULL << order);
		struct shmt_fblock *b = fb_at(heap, buddy);

		if (b->fb_magic != SHMT_IT_FREE || b->fb_order != order ||
		    fl_remove(st, sh, buddy, order) != 0)
			break;
		off &= ~(64ULL << order);
		order++;
	}
	fl_push(st, sh, off, order);
}

/* ---- Repair ------------------------------------------------------------------ */

int
shmt__bit_get(const uint64_t *bm, uint64_t i)
{
	return (bm[i / 64] >> (i % 64)) & 1;
}

void
shmt__bit_set(uint64_t *bm, uint64_t i)
{
	bm[i / 64] |= 1ULL << (i % 64);
}

/* Mark the 64-byte units of [off, off + len); 0 when one was marked. */
int
shmt__mark_span(uint64_t *bm, uint64_t off, uint64_t len)
{
	for (uint64_t u = off / 64; u < (off + len) / 64; u++)
		if (shmt__bit_get(bm, u))
			return 0;
	for (uint64_t u = off / 64; u < (off + len) / 64; u++)
		shmt__bit_set(bm, u);
	return 1;
}

int
shmt__span_clear(const uint64_t *bm, uint64_t u, uint64_t n)
{
	for (uint64_t i = u; i < u + n; i++)
		if (shmt__bit_get(bm, i))
			return 0;
	return 1;
}

/* Walk every chain of SH, cutting it at the first item that fails
 * validation or overlaps one seen before, and mark the blocks in BM. */
static void
repair_chains(const struct shmt_store *st, struct shmt_shard *sh, uint64_t *bm)
{
	struct shmt_bucket *index = shard_index(st, sh);
	char *heap = shard_heap(st, sh);

	sh->ds_items = 0;
	sh->ds_used = 0;
	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t *link = &index[b].bk_head, l;
		uint32_t filter = 0;
		struct slot_copy sc;
		int slot = slot_examine(st, sh, b, &sc), twice = 0;

		/* A slot that does not hold an item of this bucket is
		 * emptied. */
		if (slot < 0)
			__atomic_store_n(&index[b].bk_lens, 0, __ATOMIC_RELAXED);
		/* Lock-free readers load these words while the repair
		 * rewrites them (their version check discards what they
		 * saw): every access is atomic. */
		while ((l = __atomic_load_n(link, __ATOMIC_RELAXED)) != 0) {
			uint32_t lens = 0;
			struct shmt_item *it = link_unit(l) == 0 ? NULL :
			    item_at_lens(st, heap, link_off(l), &lens);
			uint64_t size, hash;

			if (it == NULL || (st->counters &&
			    !shmt__cnt_item_ok(st, it, lens))) {
				__atomic_store_n(link, 0, __ATOMIC_RELAXED);
				break;
			}
			/* The item's place and its link's tag follow from its
			 * key: an item that is not where its key puts it is
			 * cut off with the rest of the chain. */
			hash = key_hash(st->h, item_key(it), item_klen(it));
			if (bucket_of(st, hash) != b ||
			    shard_at(st, shard_of(st, hash)) != sh ||
			    link_tag(l) != hash_tag(hash)) {
				__atomic_store_n(link, 0, __ATOMIC_RELAXED);
				break;
			}
			size = 64ULL << it->it_order;
			if (!shmt__mark_span(bm, link_off(l), size)) {
				__atomic_store_n(link, 0, __ATOMIC_RELAXED);
				break;
			}
			if (slot > 0 && link_tag(l) == sc.tag &&
			    item_is(it, lens, slot_key(&sc), lens_klen(sc.lens)))
				twice = 1;
			sh->ds_items++;
			sh->ds_used += size;
			filter |= tag_bits(link_tag(l));
			link = &it->it_next;
		}
		/* A key in the slot and in the chain: a writer moving it from
		 * the slot to the heap died between linking the new item and
		 * emptying the slot.  The chain's is the newer value. */
		if (slot > 0 && twice)
			__atomic_store_n(&index[b].bk_lens, 0, __ATOMIC_RELAXED);
		else if (slot > 0)
			sh->ds_items++;
		__atomic_store_n(&index[b].bk_filter, filter, __ATOMIC_RELAXED);
	}
}

/* Rebuild the free lists from the units BM leaves unmarked: each gap
 * becomes its maximal aligned blocks. */
static void
repair_free(const struct shmt_store *st, struct shmt_shard *sh,
    const uint64_t *bm)
{
	uint64_t units = st->heap_bytes / 64, u = 0;

	memset(sh->ds_free, 0, sizeof(sh->ds_free));
	sh->ds_free_mask = 0;
	while (u < units) {
		uint32_t k;

		if (shmt__bit_get(bm, u)) {
			u++;
			continue;
		}
		k = u == 0 ? st->order_max : (uint32_t)__builtin_ctzll(u);
		if (k > st->order_max)
			k = st->order_max;
		while (u + (1ULL << k) > units || !shmt__span_clear(bm, u,
		    1ULL << k))
			k--;
		fl_push(st, sh, u * 64, k);
		u += 1ULL << k;
	}
}

/* Repair: put back the item an overwrite in place was changing when its
 * writer died (the undo record is armed), with the version odd meanwhile.
 * The record comes from the segment: it is used only when it names a
 * block of the heap that it fits in and holds an item's header for that
 * block; otherwise it is dropped, and the chain walk that follows cuts
 * whatever the dead writer left torn. */
static void
repair_undo(const struct shmt_store *st, struct shmt_shard *sh)
{
	uint64_t at = __atomic_load_n(&sh->ds_undo, __ATOMIC_RELAXED);
	uint64_t len = sh->ds_undo_len, off = at - 1;
	struct shmt_item saved;

	if (at == 0)
		return;
	/* An overwrite arms the record before it makes the version odd and
	 * disarms it before it makes it even, and changes the item only
	 * while it is odd: a record armed beside an even version saved an
	 * item that was never touched (or it is damage), and is dropped. */
	if ((at & SHMT_UNDO_SLOT) != 0) {
		/* A slot's: its bytes go back word by word (readers load
		 * them as atomic words); the slot's check in the repair of
		 * the chains that follows empties a slot they do not make
		 * valid. */
		uint64_t b = (at & ~SHMT_UNDO_SLOT) - 1;
		struct shmt_bucket *bk, sv;

		if ((sh->ds_seq & 1) != 0 && b < st->nbuckets &&
		    len == SHMT_SLOT_BYTES) {
			bk = bucket_at(st, sh, b);
			memcpy(&sv.bk_lens, sh->ds_undo_bytes, SHMT_SLOT_BYTES);
			store_fence();
			__atomic_store_n(&bk->bk_tag, sv.bk_tag,
			    __ATOMIC_RELAXED);
			__atomic_store_n(&bk->bk_expire, sv.bk_expire,
			    __ATOMIC_RELAXED);
			for (int i = 0; i < SHMT_SLOT_DATA / 8; i++)
				__atomic_store_n(&bk->bk_data[i],
				    sv.bk_data[i], __ATOMIC_RELAXED);
			__atomic_store_n(&bk->bk_lens, sv.bk_lens,
			    __ATOMIC_RELAXED);
		}
	} else if ((sh->ds_seq & 1) != 0 && off < st->heap_bytes &&
	    off % 64 == 0 && len >= sizeof(saved) && len <= SHMT_UNDO_MAX &&
	    st->heap_bytes - off >= len) {
		memcpy(&saved, sh->ds_undo_bytes, sizeof(saved));
		if (saved.it_magic == SHMT_IT_ALLOC &&
		    saved.it_order <= st->order_max &&
		    (off & ((64ULL << saved.it_order) - 1)) == 0 &&
		    len <= (64ULL << saved.it_order)) {
			store_fence();
			memcpy(shard_heap(st, sh) + off, sh->ds_undo_bytes, len);
		}
	}
	__atomic_store_n(&sh->ds_undo, 0, __ATOMIC_RELEASE);
}

/* Repair SH; the caller holds its lock (just taken over from a dead holder). */
int
shmt__shard_repair(const struct shmt_store *st, struct shmt_shard *sh)
{
	uint64_t *bm = calloc(st->heap_bytes / 64 / 64 + 1, sizeof(uint64_t));

	if (bm == NULL)
		return -ENOMEM;
	repair_undo(st, sh);
	repair_chains(st, sh, bm);
	repair_free(st, sh, bm);
	free(bm);
	sh->ds_repairs++;
	if (sh->ds_seq & 1)
		__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELEASE);
	return 0;
}

int
shmt__shard_lock_any(const struct shmt_store *st, struct shmt_shard *sh)
{
	int rc = shmt__lock(st->h, &sh->ds_lock);

	if (rc == 1) {
		rc = shmt__shard_repair(st, sh);
		if (rc != 0) {
			/* Unrepaired: the next locker must repair it. */
			shmt__unlock_unrepaired(&sh->ds_lock);
			return rc;
		}
		return 1;
	}
	return rc;
}

uint64_t
shmt__seq_wait(const struct shmt_store *st, struct shmt_shard *sh)
{
	struct shmt_sleep sl = { NULL, NULL };
	uint64_t start = 0, s;

	for (unsigned i = 0;; i++) {
		s = __atomic_load_n(&sh->ds_seq, __ATOMIC_ACQUIRE);
		if ((s & 1) == 0)
			break;
		if (i < 128) {
			ck_pr_stall();
			continue;
		}
		if (start == 0) {
			start = shmt__mono_ns();
			/* From here on the reader gives its CPU away: a
			 * runtime may run its other threads meanwhile. */
			sl = shmt__sleep_begin(st->h);
		} else if (shmt__mono_ns() - start > READ_WAIT_NS) {
			s = 1;
			break;
		}
		/* The first check comes with the first yield, not 128 yields
		 * later: on a loaded machine each yield may give up a whole
		 * time slice, and READ_WAIT_NS could run out before a dead
		 * writer's shard was ever looked at. */
		if (i % 256 == 128)
			shmt__shard_check_owner(st, sh);
		sched_yield();
	}
	shmt__sleep_end(sl);
	return s;
}

int
shmt__shard_lock(const struct shmt_store *st, struct shmt_shard *sh)
{
	for (;;) {
		int rc = shmt__shard_lock_any(st, sh);

		/* A writer decides under the lock whether the segment still
		 * takes writes (move.c: the mover freezes, then takes each
		 * shard's lock to copy it). */
		if (rc < 0 || __builtin_expect(shmt__frozen_load(st->h) == 0, 1))
			return rc;
		shmt__unlock(&sh->ds_lock);
		if ((rc = shmt__frozen_wait(st->h)) != 0)
			return rc;
	}
}

/* A reader found the version odd for long: if the writer died, repair the
 * shard (the only time a reader takes the lock); if it lives, go on. */
void
shmt__shard_check_owner(const struct shmt_store *st, struct shmt_shard *sh)
{
	int rc = shmt__lock_try(st->h, &sh->ds_lock);

	if (rc == 1 || rc == 0) {
		/* rc 0: nobody holds it, yet the version is odd: a writer
		 * makes it even before it lets go, so this is damage; repair
		 * it too.  A repair that failed (out of memory) is left to
		 * the next locker. */
		if ((rc == 1 || (__atomic_load_n(&sh->ds_seq,
		    __ATOMIC_ACQUIRE) & 1)) && shmt__shard_repair(st, sh) != 0)
			shmt__unlock_unrepaired(&sh->ds_lock);
		else
			shmt__unlock(&sh->ds_lock);
	}
}

int
shmt__store_init(struct shmt_store *st)
{
	for (uint32_t i = 0; i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);

		memset(sh, 0, st->heap_off);
		shmt__lock_init(&sh->ds_lock);
		fl_push(st, sh, 0, st->order_max);
	}
	return 0;
}


/* Under the lock: find KEY in its chain.  *LINKP gets the link that points
 * to it (or to the end of the chain), or NULL when the chain is longer than
 * chain_bound() (a cycle: the caller reports SHMT_ECORRUPT).  Returns the
 * item or NULL. */
struct shmt_item *
shmt__store_find_lens(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t hash, const void *key, size_t klen, uint64_t **linkp,
    uint32_t *lensp)
{
	struct shmt_item *it;
	struct chain c;

	chain_start(&c, st, sh, bucket_of(st, hash));
	it = chain_find_key(&c, hash, key, klen);
	*linkp = c.cut ? NULL : c.link;
	if (it != NULL)
		*lensp = c.lens;
	return it;
}

struct shmt_item *
shmt__store_find(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t hash,
    const void *key, size_t klen, uint64_t **linkp)
{
	uint32_t lens;

	return shmt__store_find_lens(st, sh, hash, key, klen, linkp, &lens);
}

/* After LINK was stored: when LINK is a bucket's head and the chain is now
 * empty, the bucket's filter is cleared (a filter only ever gains bits
 * otherwise; reap and repair set it anew). */
static void
filter_settle(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t *link)
{
	struct shmt_bucket *index = shard_index(st, sh);
	uint64_t at = (uint64_t)((char *)link - (char *)index);

	if (at < st->nbuckets * sizeof(*index) && link_unit(*link) == 0)
		__atomic_store_n(&index[at / sizeof(*index)].bk_filter, 0,
		    __ATOMIC_RELAXED);
}


/*
 * An overwrite in place: the one change of an item a reader can see other
 * than a link.  Under the lock, for an item of at most SHMT_UNDO_MAX bytes
 * whose new size takes the same block:
 *
 *   undo_bytes = item's bytes; undo_len = their count
 *   undo = offset + 1                 (release: the copy is whole first)
 *   seq = seq + 1 (odd)
 *   fence (release): the odd version and the record before any byte below
 *   lengths, expiry, write time, value
 *   undo = 0
 *   seq = seq + 1 (even)              (release: every byte above first)
 *
 * A reader (seq_read) loads the version with acquire, copies, and after an
 * acquire fence loads it again.  If its copy read any byte the write
 * stored, then (the fences pair with the writer's) its second load sees
 * the odd version or a later one, and the copy is thrown away: a reader
 * that keeps a copy read only bytes from before the first bump or only
 * from after the second, never a mix of the two values.  Its lengths are
 * one 4-byte load, checked against the block as for any racy read, so a
 * torn copy never reads outside the item's block.
 *
 * A writer killed at any instruction: before the record is armed, the item
 * is untouched; while it is armed, the repair (shmt__shard_repair, run by
 * whoever finds the writer dead) puts the saved bytes back with the
 * version odd, so the key keeps its old value; once it is disarmed, every
 * byte of the new value was stored before it, so the key has its new value
 * and the repair only makes the version even.  Old or new value, as for a
 * write that copies.  The version stays odd for the copy of a small value
 * instead of one store, so a reader of the shard waits those few
 * instructions or retries, as it would across a relink.
 */
/* A block of ORDER could be allocated now without reaping or evicting.
 * An overwrite in place asks this too, so that a write behaves as the copy
 * would: with eviction off, a full shard refuses to replace a value
 * (-ENOSPC: "replacing a value needs room for the new item while the old
 * one is still there", shmthrottle.h), and with eviction on, replacing in
 * a full shard evicts as before.  It reads the free-list heads only, in
 * the shard's header, which the writer's lock brought into its cache. */
static __attribute__((unused)) int
room_for(const struct shmt_store *st, struct shmt_shard *sh, uint32_t order)
{
	uint64_t m = sh->ds_free_mask >> order;

	/* The mask names the first list that was not empty: one look where
	 * the loop below reads up to order_max heads.  It is a hint kept
	 * beside the lists, so its answer is checked against the list, and a
	 * shard with no room (or a damaged mask) asks the lists themselves. */
	if (m != 0) {
		uint32_t k = order + (uint32_t)__builtin_ctzll(m);

		if (k <= st->order_max && sh->ds_free[k] != 0 &&
		    shmt__fl_link_ok(st, sh->ds_free[k], k))
			return 1;
	}
	for (uint32_t k = order; k <= st->order_max; k++)
		if (sh->ds_free[k] != 0)
			return shmt__fl_link_ok(st, sh->ds_free[k], k);
	return 0;
}

void
shmt__store_overwrite_begin(const struct shmt_store *st,
    struct shmt_shard *sh, struct shmt_item *it)
{
	uint32_t lens = __atomic_load_n(&it->it_lens, __ATOMIC_RELAXED);
	uint64_t was = sizeof(*it) + lens_klen(lens) + lens_vlen(lens);

	/* Every item's block is 64 bytes at least: a small item's copy is
	 * one fixed-size move the compiler inlines. */
	if (was <= 64)
		memcpy(sh->ds_undo_bytes, it, 64);
	else
		memcpy(sh->ds_undo_bytes, it, was);
	sh->ds_undo_len = was;
	__atomic_store_n(&sh->ds_undo,
	    (uint64_t)((char *)it - shard_heap(st, sh)) + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELAXED);
	store_fence();
}

int
shmt__store_overwrite(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_item *it, const void *val, size_t vlen, uint64_t expire,
    uint64_t born)
{
	uint32_t lens = __atomic_load_n(&it->it_lens, __ATOMIC_RELAXED);
	uint64_t klen = lens_klen(lens), was = sizeof(*it) + klen +
	    lens_vlen(lens), seq = sh->ds_seq;

#if defined(SHMT_SANITIZE_THREAD)
	/* ThreadSanitizer cannot pair a reader's plain copy with the version
	 * that makes it safe (and gcc cannot instrument the fences), so its
	 * build always copies on write; the other builds test this path. */
	(void)was;
	(void)seq;
	(void)val;
	(void)expire;
	(void)born;
	return 0;
#else
	if (was > SHMT_UNDO_MAX || order_for(sizeof(*it) + klen + vlen) !=
	    it->it_order || !room_for(st, sh, it->it_order))
		return 0;
	shmt__store_overwrite_begin(st, sh, it);
	__atomic_store_n(&it->it_lens, lens_make(klen, vlen), __ATOMIC_RELAXED);
	__atomic_store_n(&it->it_expire, expire, __ATOMIC_RELAXED);
	it->it_born = born;
	copy_short((char *)(it + 1) + klen, val, vlen);
	/* Disarmed only once every byte above is stored (a release store:
	 * the compiler may not move it before them either; a killed writer's
	 * repair trusts a disarmed record's item to be whole). */
	__atomic_store_n(&sh->ds_undo, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, seq + 2, __ATOMIC_RELEASE);
	reap_hint_follow(sh, seq, expire);
	return 1;
#endif
}

/* Unlink the item *LINK points to and free it; the version brackets the
 * one store that other readers could see. */
void
shmt__store_link_new(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t hash, uint64_t *link, uint64_t off, struct shmt_item *it,
    struct shmt_item *old)
{
	char *heap = shard_heap(st, sh);
	uint32_t tag = hash_tag(hash), *filter =
	    &shard_index(st, sh)[bucket_of(st, hash)].bk_filter;
	uint64_t seq = sh->ds_seq;

	/* A new key goes where LINK points: the chain's end, or the place
	 * of an expired item just unlinked (its successors follow). */
	it->it_next = old != NULL ? old->it_next :
	    __atomic_load_n(link, __ATOMIC_RELAXED);
	it->it_magic = SHMT_IT_ALLOC;
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELAXED);
	/* The filter gains the tag before the link names the item. */
	__atomic_store_n(filter, *filter | tag_bits(tag), __ATOMIC_RELAXED);
	__atomic_store_n(link, link_make(off, tag), __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELEASE);
	reap_hint_follow(sh, seq, it->it_expire);
	sh->ds_items++;
	if (old != NULL) {
		old->it_magic = 0;
		shmt__blk_free(st, sh, (uint64_t)((char *)old - heap),
		    old->it_order);
		sh->ds_items--;
	}
}

/*
 * Slots.  A bucket's slot holds one small item of the dictionary in the
 * index's line.  Its writes follow the protocol of the chains and of the
 * overwrite in place above, word by word (a reader loads the slot's words
 * as atomic words, so a torn copy is a copy of words, thrown away by the
 * version check):
 *
 *   fill (the slot was empty):  seq odd, fence; tag, expiry, data; the
 *                               lengths (release); seq even
 *   overwrite (the same key):   undo record of the slot armed (as above,
 *                               with SHMT_UNDO_SLOT), seq odd, fence;
 *                               lengths, expiry, data; record disarmed;
 *                               seq even
 *   clear:                      seq odd; lengths 0 (release); seq even
 *
 * A writer killed in a fill leaves the lengths 0 (the slot empty, its
 * other words unread) or the whole item; in an overwrite, the repair puts
 * the saved slot back (old value) or finds the record disarmed (new
 * value); a clear is one store.  A write whose value outgrows the slot
 * links a heap item first and clears the slot after: killed between the
 * two, the key is in both, the slot's the old value, which readers see
 * (they look at the slot first) until the repair, which the dead lock
 * holder brings about, keeps the chain's, the new value.
 */
static void
slot_store(struct shmt_bucket *bk, uint32_t tag, uint64_t expire,
    const void *key, size_t klen, const void *val, size_t vlen)
{
	uint64_t data[SHMT_SLOT_DATA / 8] = { 0 };

	memcpy(data, key, klen);
	copy_short((char *)data + klen, val, vlen);
	__atomic_store_n(&bk->bk_tag, tag, __ATOMIC_RELAXED);
	__atomic_store_n(&bk->bk_expire, expire, __ATOMIC_RELAXED);
	for (size_t i = 0; i * 8 < klen + vlen; i++)
		__atomic_store_n(&bk->bk_data[i], data[i], __ATOMIC_RELAXED);
	__atomic_store_n(&bk->bk_lens, lens_make(klen, vlen), __ATOMIC_RELEASE);
}

void
shmt__slot_fill(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b, uint64_t hash, const void *key, size_t klen, const void *val,
    size_t vlen, uint64_t expire)
{
	uint64_t seq = sh->ds_seq;

	__atomic_store_n(&sh->ds_seq, seq + 1, __ATOMIC_RELAXED);
	store_fence();
	slot_store(bucket_at(st, sh, b), hash_tag(hash), expire, key, klen,
	    val, vlen);
	__atomic_store_n(&sh->ds_seq, seq + 2, __ATOMIC_RELEASE);
	reap_hint_follow(sh, seq, expire);
	sh->ds_items++;
}

void
shmt__slot_overwrite_begin(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b)
{
	memcpy(sh->ds_undo_bytes, &bucket_at(st, sh, b)->bk_lens,
	    SHMT_SLOT_BYTES);
	sh->ds_undo_len = SHMT_SLOT_BYTES;
	__atomic_store_n(&sh->ds_undo, SHMT_UNDO_SLOT | (b + 1),
	    __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, sh->ds_seq + 1, __ATOMIC_RELAXED);
	store_fence();
}

void
shmt__slot_overwrite(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b, const void *val, size_t vlen, uint64_t expire)
{
	struct shmt_bucket *bk = bucket_at(st, sh, b);
	uint64_t seq = sh->ds_seq, data[SHMT_SLOT_DATA / 8];
	uint32_t klen = lens_klen(__atomic_load_n(&bk->bk_lens,
	    __ATOMIC_RELAXED));

	/* Under the lock the slot holds still: its words as stored, the key
	 * in them; the new value's bytes go over the rest, and only the
	 * words they touch are stored (the key's and its tag stay). */
	for (int i = 0; i < SHMT_SLOT_DATA / 8; i++)
		data[i] = __atomic_load_n(&bk->bk_data[i], __ATOMIC_RELAXED);
	copy_short((char *)data + klen, val, vlen);
	shmt__slot_overwrite_begin(st, sh, b);
	__atomic_store_n(&bk->bk_expire, expire, __ATOMIC_RELAXED);
	for (size_t i = klen / 8; i * 8 < klen + vlen; i++)
		__atomic_store_n(&bk->bk_data[i], data[i], __ATOMIC_RELAXED);
	__atomic_store_n(&bk->bk_lens, lens_make(klen, vlen), __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_undo, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, seq + 2, __ATOMIC_RELEASE);
	reap_hint_follow(sh, seq, expire);
}

void
shmt__slot_clear(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t b)
{
	uint64_t seq = sh->ds_seq;

	__atomic_store_n(&sh->ds_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&bucket_at(st, sh, b)->bk_lens, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, seq + 2, __ATOMIC_RELEASE);
	reap_hint_follow(sh, seq, 0);
	sh->ds_items--;
}

void
shmt__store_unlink(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t *link,
    struct shmt_item *it)
{
	uint64_t off = (uint64_t)((char *)it - shard_heap(st, sh));
	uint64_t seq = sh->ds_seq;

	/* The release store of the link orders the odd version before it: a
	 * reader that sees the new link sees the version moved. */
	__atomic_store_n(&sh->ds_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_store_n(link, it->it_next, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ds_seq, seq + 2, __ATOMIC_RELEASE);
	reap_hint_follow(sh, seq, 0);
	filter_settle(st, sh, link);
	it->it_magic = 0;
	shmt__blk_free(st, sh, off, it->it_order);
	sh->ds_items--;
}

/*
 * Reaping.  A walk of the whole shard for expired items costs every bucket
 * and item of it, so an allocation that finds the heap full walks only when
 * the walk can find something, and with eviction, not more often than it
 * pays for:
 *  - The hint: while the version is ds_reap_seq, no item expires before
 *    ds_reap_at.  A whole walk sets both (the version after it, the
 *    earliest expiry it left); a writer of this build that moves the
 *    version from the hint's, linking, rewriting or unlinking an item,
 *    first lowers ds_reap_at to the expiry it writes, then moves
 *    ds_reap_seq along (reap_hint_follow); an expiry changed in place,
 *    with the version unmoved (a counter's hit), lowers it too.  Any
 *    other change of the version leaves the hint behind it, so a reap is
 *    due: a writer killed between its version and its hint, a repair
 *    (which may put an earlier expiry back), a build that keeps no hint.
 *    Bytes that were padding before (zero in any older segment) read as
 *    a reap due at once; hostile ones can only delay a reap, which the
 *    daemon's housekeeping walk then does.
 *  - With eviction, a walk that visits V buckets and items and frees k
 *    sets ds_reap_wait to V / (16 (k + 1)): that many allocations that find
 *    the heap full evict instead (evict_one takes an expired item of its
 *    sample first), so walks cost about as much per allocation as the
 *    eviction's own sample of 16.  Without eviction a write that would
 *    fail walks whenever the hint says something expired.
 * A full shard whose items have no TTL so costs an allocation one eviction,
 * not a walk of the shard.
 */
uint64_t shmt__store_walks;

static int
reap_due(const struct shmt_store *st, struct shmt_shard *sh, uint64_t now)
{
	if (sh->ds_reap_seq == __atomic_load_n(&sh->ds_seq, __ATOMIC_RELAXED) &&
	    now < sh->ds_reap_at)
		return 0;
	if (st->eviction && sh->ds_reap_wait > 0) {
		sh->ds_reap_wait--;
		return 0;
	}
	return 1;
}

/* Free every expired item of SH.  Returns how many; *NEXT gets the earliest
 * expiry left if earlier.  The walk of the whole shard passes at most
 * chain_bound() items, as many as a sound shard holds in all its chains (a
 * bound per chain would let a shard whose every bucket leads into one loop
 * cost buckets x heap / 64 steps under the lock): past that the shard is
 * damaged, the walk stops there and *DAMAGED is set.  A whole walk sets the
 * reap hint. */
uint64_t
shmt__store_reap(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t now, uint64_t *next, int *damaged)
{
	uint64_t n = 0, left = chain_bound(st), first = UINT64_MAX, seen = 0;

	__atomic_fetch_add(&shmt__store_walks, 1, __ATOMIC_RELAXED);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint32_t filter = 0;
		struct shmt_item *it;
		struct chain c;

		struct shmt_bucket *bk = bucket_at(st, sh, b);
		uint32_t lens = __atomic_load_n(&bk->bk_lens, __ATOMIC_RELAXED);

		/* The slot's item (a damaged slot is the check's and the
		 * repair's, which count it out: left as it is here). */
		if (!st->counters && slot_lens_ok(lens) && bk->bk_expire != 0) {
			if (bk->bk_expire <= now) {
				shmt__slot_clear(st, sh, b);
				n++;
			} else if (bk->bk_expire < first) {
				first = bk->bk_expire;
			}
		}
		chain_start(&c, st, sh, b);
		c.left = left;
		while ((it = chain_item(&c)) != NULL) {
			if (expired(it, now)) {
				shmt__store_unlink(st, sh, c.link, it);
				n++;
				continue;
			}
			if (it->it_expire != 0 && it->it_expire < first)
				first = it->it_expire;
			filter |= tag_bits(link_tag(c.lv));
			chain_next(&c, it);
			seen++;
		}
		/* The walk saw the whole chain: the filter loses the tags of
		 * items gone (a cut chain keeps its filter); a line is written
		 * only where the filter changes. */
		if (c.cut) {
			*damaged = 1;
			break;
		}
		if (shard_index(st, sh)[b].bk_filter != filter)
			__atomic_store_n(&shard_index(st, sh)[b].bk_filter,
			    filter, __ATOMIC_RELAXED);
		left = c.left;
	}
	sh->ds_expirations += n;
	if (first < *next)
		*next = first;
	if (!*damaged) {
		sh->ds_reap_at = first;
		sh->ds_reap_seq = sh->ds_seq;
		sh->ds_reap_wait = (st->nbuckets + seen + n) / (16 * (n + 1));
	}
	return n;
}

/*
 * Evict one item of SH: among the non-empty chains of up to 16 buckets from
 * the sampling hand, the one whose bucket was read least recently (ties: the
 * oldest write); an expired item goes first.  EXCEPT is never chosen.
 * Returns 1 when an item was evicted.  An approximation of LRU, as Redis's
 * sampling: exact LRU would need a shared list that every read updates.
 */
static int
evict_one(const struct shmt_store *st, struct shmt_shard *sh, uint64_t now,
    const struct shmt_item *except)
{
	uint64_t *best_link = NULL;
	struct shmt_bucket *index = shard_index(st, sh);
	uint32_t best_age = 0;
	struct shmt_item *best = NULL;
	uint64_t seen = 0;
	char *heap = shard_heap(st, sh);

	/* The first items of the sample's chains are asked for at once, so
	 * their misses overlap instead of following one another (a prefetch
	 * never faults; a link past the heap is not asked for). */
	for (uint64_t k = 0; k < st->nbuckets && k < 16; k++) {
		uint64_t lv = __atomic_load_n(&index[(sh->ds_hand + k) &
		    (st->nbuckets - 1)].bk_head, __ATOMIC_RELAXED);

		if (link_unit(lv) != 0 && link_off(lv) < st->heap_bytes)
			__builtin_prefetch(heap + link_off(lv));
	}
	for (uint64_t k = 0; k < st->nbuckets && seen < 16; k++) {
		uint64_t b = (sh->ds_hand + k) & (st->nbuckets - 1);
		uint32_t age = coarse(now) - __atomic_load_n(&index[b].bk_atime,
		    __ATOMIC_RELAXED);
		struct shmt_item *it;
		struct chain c;

		chain_start(&c, st, sh, b);
		while ((it = chain_item(&c)) != NULL) {
			if (it != except) {
				if (expired(it, now)) {
					shmt__store_unlink(st, sh, c.link, it);
					sh->ds_expirations++;
					return 1;
				}
				if (best == NULL || age > best_age ||
				    (age == best_age && it->it_born < best->it_born)) {
					best = it;
					best_link = c.link;
					best_age = age;
				}
				seen++;
			}
			chain_next(&c, it);
		}
	}
	sh->ds_hand = (sh->ds_hand + 16) & (st->nbuckets - 1);
	if (best == NULL)
		return 0;
	shmt__store_unlink(st, sh, best_link, best);
	sh->ds_evictions++;
	return 1;
}


/* Allocate a block for an item of BYTES, evicting when allowed.  KEEP (the
 * item being replaced, may be NULL) is never evicted.  Returns the offset or
 * UINT64_MAX; then *ERR gets -ENOSPC, or SHMT_ECORRUPT when the walk for
 * expired or evictable items found the shard's chains damaged (it stops
 * there). */
uint64_t
shmt__store_alloc(const struct shmt_store *st, struct shmt_shard *sh,
    uint64_t bytes, uint64_t now, const struct shmt_item *keep, int *err)
{
	uint32_t order = order_for(bytes);
	uint64_t off, next = UINT64_MAX;
	int damaged = 0, rc;

	/* Decide before anything is freed whether the item can fit at all:
	 * the heap is one block of order_max, so with every other item gone
	 * a block of ORDER is free unless KEEP overlaps every such block,
	 * which happens when either of them is the whole heap.  A write that
	 * can never fit changes nothing, instead of evicting the whole shard
	 * first and failing after. */
	*err = -ENOSPC;
	if (order > st->order_max || (keep != NULL &&
	    (order == st->order_max || keep->it_order >= st->order_max)))
		return UINT64_MAX;
	if ((off = shmt__blk_alloc(st, sh, order)) != UINT64_MAX)
		return off;
	/* Expired items are garbage whatever the eviction setting (a walk
	 * for them only when one may have expired; see "Reaping"). */
	if (reap_due(st, sh, now) &&
	    shmt__store_reap(st, sh, now, &next, &damaged) > 0 &&
	    (off = shmt__blk_alloc(st, sh, order)) != UINT64_MAX)
		return off;
	if (damaged) {
		*err = SHMT_ECORRUPT;
		return UINT64_MAX;
	}
	if (!st->eviction)
		return UINT64_MAX;
	while ((rc = st->counters ? shmt__cnt_evict(st, sh, keep) :
	    evict_one(st, sh, now, keep)) > 0)
		if ((off = shmt__blk_alloc(st, sh, order)) != UINT64_MAX)
			return off;
	if (rc < 0)
		*err = rc;
	return UINT64_MAX;
}

/* ---- Housekeeping and rebasing ---------------------------------------------- */

uint64_t
shmt__store_used(const struct shmt_store *st)
{
	uint64_t n = 0;

	for (uint32_t i = 0; st != NULL && i < st->shards; i++)
		n += __atomic_load_n(&shard_at(st, i)->ds_used,
		    __ATOMIC_RELAXED);
	return n;
}

/* Reap every shard of ST: how many items were freed, or SHMT_ELOCKED (a
 * shard's lock kept: the rest of the store waits for the next run) or
 * SHMT_ECORRUPT (a shard's chains hold more items than its heap can: its
 * walk stopped there, the other shards were reaped) after the rest was
 * done. */
static int
store_housekeep(shmt_t *h, const struct shmt_store *st, uint64_t now,
    uint64_t *next)
{
	int n = 0, locked = 0, damaged = 0;

	for (uint32_t i = 0; st != NULL && i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);
		int rc = shmt__shard_lock(st, sh);

		/* A shard whose lock a live writer kept past its bound: this
		 * store waits for the next run (one such wait per store and
		 * run, not one per shard), the rest of the run goes on. */
		if (rc == SHMT_ELOCKED) {
			locked = rc;
			break;
		}
		if (rc < 0)
			return rc;
		n += (int)shmt__store_reap(st, sh, now, next, &damaged);
		shmt__unlock(&sh->ds_lock);
	}
	return damaged ? SHMT_ECORRUPT : locked != 0 ? locked : n;
}

/* Both stores; an error that leaves the rest done (SHMT_ELOCKED,
 * SHMT_ECORRUPT) comes after the other store was housekept, damage
 * first. */
int
shmt__stores_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next)
{
	int a = store_housekeep(h, h->dict, now, next), b;

	if (a < 0 && a != SHMT_ELOCKED && a != SHMT_ECORRUPT)
		return a;
	b = store_housekeep(h, h->counters, now, next);
	if (b < 0 && b != SHMT_ELOCKED && b != SHMT_ECORRUPT)
		return b;
	if (a == SHMT_ECORRUPT || b == SHMT_ECORRUPT)
		return SHMT_ECORRUPT;
	return a < 0 ? a : b < 0 ? b : a + b;
}

static void
store_rebase(const struct shmt_store *st, int64_t d)
{
	for (uint32_t i = 0; st != NULL && i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);

		uint64_t left = chain_bound(st);

		/* Expiries move, some earlier: the next allocation that
		 * finds the heap full walks. */
		sh->ds_reap_at = 0;

		/* Every slot's expiry (a slot is not a chain's: no budget). */
		for (uint64_t b = 0; b < st->nbuckets; b++) {
			struct shmt_bucket *bk = bucket_at(st, sh, b);

			if (bk->bk_lens != 0 && bk->bk_expire != 0) {
				int64_t e = (int64_t)bk->bk_expire + d;

				bk->bk_expire = e > 0 ? (uint64_t)e : 1;
			}
		}
		/* One budget for the shard's walk, as the reap's. */
		for (uint64_t b = 0; b < st->nbuckets && left > 0; b++) {
			struct shmt_item *it;
			struct chain c;

			chain_start(&c, st, sh, b);
			c.left = left;
			while ((it = chain_item(&c)) != NULL) {
				if (it->it_expire != 0) {
					int64_t e = (int64_t)it->it_expire + d;

					it->it_expire = e > 0 ? (uint64_t)e : 1;
				}
				if (st->counters &&
				    shmt__cnt_item_ok(st, it, c.lens))
					shmt__cnt_rebase(st, it, c.lens, d);
				chain_next(&c, it);
			}
			left = c.cut ? 0 : c.left;
		}
	}
}

void
shmt__stores_rebase(shmt_t *h, int64_t delta_ns)
{
	store_rebase(h->dict, delta_ns);
	store_rebase(h->counters, delta_ns);
}
