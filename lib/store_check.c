/* SPDX-License-Identifier: MIT */
/*
 * The store's self-check for shmt_check(): walk every chain and free list of
 * every shard, mark the blocks they use, and report overlaps, leaks and
 * broken links.  Read-only unless asked to repair (SHMT_CHECK_REPAIR): then
 * a shard found damaged is rebuilt as after a dead writer.
 */
#include "store.h"

#include "counters.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Checking ------------------------------------------------------------------- */

/* Mark a block in BM; report when it overlaps one seen before. */
static int
chk_mark(struct shmt_chk *c, const char *who, uint64_t *bm, uint64_t off,
    uint64_t size)
{
	if (shmt__mark_span(bm, off, size))
		return 1;
	shmt__chk(c, "%s: block at %llu overlaps another", who,
	    (unsigned long long)off);
	return 0;
}

/* Walk every chain.  Each block is marked once in BM and a walk stops at a
 * block marked before, so the walk of a shard takes at most its heap's
 * blocks, whatever the links say (a chain that loops ends there, named as an
 * overlap).  Reads racy memory: the caller validates the scan. */
static void
chk_chains(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_chk *c, const char *who, uint64_t *bm)
{
	struct shmt_bucket *index = shard_index(st, sh);
	uint64_t items = 0, used = 0;
	char *heap = shard_heap(st, sh);

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		uint64_t off = __atomic_load_n(&index[b].bk_head,
		    __ATOMIC_RELAXED);
		uint32_t filter = __atomic_load_n(&index[b].bk_filter,
		    __ATOMIC_RELAXED);
		struct slot_copy sc;
		int slot = slot_examine(st, sh, b, &sc);

		if (slot < 0)
			shmt__chk(c, "%s: bucket %llu's slot holds what no slot "
			    "of this store holds (lengths %#x, or a key of "
			    "another bucket)", who, (unsigned long long)b,
			    (unsigned)__atomic_load_n(&index[b].bk_lens,
			    __ATOMIC_RELAXED));
		else if (slot > 0)
			items++;
		while (off != 0) {
			uint32_t order = 0, lens = 0;
			struct shmt_item *it = link_unit(off) == 0 ? NULL :
			    item_at_lens(st, heap, link_off(off), &lens);
			uint64_t hash;
			char key[SHMT_KEY_MAX];

			/* The scan reads memory writers may be changing: the
			 * order item_at validated is read again once, and
			 * checked, before it sizes a shift; the key is hashed
			 * with the lengths item_at validated (a torn scan is
			 * thrown away by the caller). */
			if (it != NULL)
				order = __atomic_load_n(&it->it_order,
				    __ATOMIC_RELAXED);
			if (it == NULL || order > st->order_max) {
				shmt__chk(c,
				    "%s: bucket %llu links to an invalid "
				    "item at %llu", who, (unsigned long long)b,
				    (unsigned long long)(link_unit(off) == 0 ?
				    0 : link_off(off)));
				break;
			}
			memcpy(key, item_key(it), lens_klen(lens));
			hash = key_hash(st->h, key, lens_klen(lens));
			if (bucket_of(st, hash) != b ||
			    shard_at(st, shard_of(st, hash)) != sh)
				shmt__chk(c, "%s: item at %llu is in the wrong "
				    "bucket", who,
				        (unsigned long long)link_off(off));
			else if (link_tag(off) != hash_tag(hash))
				shmt__chk(c, "%s: the link to the item at %llu "
				    "has another key's tag", who,
				    (unsigned long long)link_off(off));
			else if ((filter & tag_bits(link_tag(off))) !=
			    tag_bits(link_tag(off)))
				shmt__chk(c, "%s: bucket %llu's filter lacks "
				    "the tag of the item at %llu", who,
				    (unsigned long long)b,
				    (unsigned long long)link_off(off));
			else if (slot > 0 && link_tag(off) == sc.tag &&
			    item_is(it, lens, slot_key(&sc),
			    lens_klen(sc.lens)))
				shmt__chk(c, "%s: the key of the item at %llu "
				    "is also in bucket %llu's slot", who,
				    (unsigned long long)link_off(off),
				    (unsigned long long)b);
			/* shmt_hit writes the whole ring of sub-window
			 * counts into the value. */
			if (st->counters)
				shmt__cnt_check_item(st, it, lens, c, who,
				    link_off(off));
			if (!shmt__mark_span(bm, link_off(off),
			    64ULL << order)) {
				shmt__chk(c,
				    "%s: bucket %llu's chain reaches the "
				    "block at %llu again (a loop, or a block "
				    "another chain or list holds)", who,
				    (unsigned long long)b,
				    (unsigned long long)link_off(off));
				break;
			}
			items++;
			used += 64ULL << order;
			off = __atomic_load_n(&it->it_next, __ATOMIC_RELAXED);
		}
	}
	if (items != sh->ds_items || used != sh->ds_used)
		shmt__chk(c, "%s: counts %llu items in %llu bytes, chains hold "
		    "%llu in %llu", who, (unsigned long long)sh->ds_items,
		    (unsigned long long)sh->ds_used, (unsigned long long)items,
		    (unsigned long long)used);
}

static void
chk_free_lists(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_chk *c, const char *who, uint64_t *bm)
{
	char *heap = shard_heap(st, sh);

	for (uint32_t k = 0; k <= st->order_max; k++) {
		uint64_t off = sh->ds_free[k], prev = 0;

		while (off != 0) {
			struct shmt_fblock *b;

			if (!shmt__fl_link_ok(st, off, k)) {
				shmt__chk(c,
				    "%s: free list %u links outside the "
				    "heap", who, k);
				break;
			}
			b = fb_at(heap, off - 1);
			if (b->fb_magic != SHMT_IT_FREE || b->fb_order != k ||
			    b->fb_prev != prev) {
				shmt__chk(c,
				    "%s: free block at %llu is damaged",
				    who, (unsigned long long)(off - 1));
				break;
			}
			if (!chk_mark(c, who, bm, off - 1, 64ULL << k))
				break;
			prev = off;
			off = b->fb_next;
		}
	}
}

/* The problems one scan of a shard found, kept until the scan is known to
 * have seen the shard at rest. */
struct chk_buf {
	char **msg;
	size_t n, cap;
	int lost;                       /* named none: out of memory */
};

static void
chk_buf_add(void *ctx, const char *problem)
{
	struct chk_buf *b = ctx;
	char *m;

	if (b->n == b->cap) {
		size_t cap = b->cap == 0 ? 8 : 2 * b->cap;
		char **v = realloc(b->msg, cap * sizeof(*v));

		if (v == NULL) {
			b->lost++;
			return;
		}
		b->msg = v;
		b->cap = cap;
	}
	if ((m = strdup(problem)) == NULL) {
		b->lost++;
		return;
	}
	b->msg[b->n++] = m;
}

static void
chk_buf_clear(struct chk_buf *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->msg[i]);
	b->n = 0;
	b->lost = 0;
}

/* The undo record of an overwrite in place (store.c) is armed only while
 * a writer overwrites an item: armed at rest, it is what a writer killed
 * inside an overwrite left (the repair puts the item back from it), or
 * damage; a record that names no block it fits in is damage either way. */
static void
chk_undo(const struct shmt_store *st, struct shmt_shard *sh,
    struct shmt_chk *c, const char *who)
{
	uint64_t at = __atomic_load_n(&sh->ds_undo, __ATOMIC_RELAXED);
	uint64_t len = __atomic_load_n(&sh->ds_undo_len, __ATOMIC_RELAXED);

	if (at == 0)
		return;
	if ((at & SHMT_UNDO_SLOT) != 0) {
		uint64_t b = (at & ~SHMT_UNDO_SLOT) - 1;

		if (b >= st->nbuckets || len != SHMT_SLOT_BYTES)
			shmt__chk(c, "%s: undo record names no slot (bucket "
			    "%llu, %llu bytes)", who, (unsigned long long)b,
			    (unsigned long long)len);
		else
			shmt__chk(c, "%s: undo record of an overwrite armed "
			    "outside a write (the slot of bucket %llu)", who,
			    (unsigned long long)b);
		return;
	}
	if (at - 1 >= st->heap_bytes || (at - 1) % 64 != 0 ||
	    len < sizeof(struct shmt_item) || len > SHMT_UNDO_MAX ||
	    st->heap_bytes - (at - 1) < len)
		shmt__chk(c, "%s: undo record names no item's place (offset "
		    "%llu, %llu bytes)", who, (unsigned long long)(at - 1),
		    (unsigned long long)len);
	else
		shmt__chk(c, "%s: undo record of an overwrite armed outside a "
		    "write (the item at %llu)", who,
		    (unsigned long long)(at - 1));
}

/* One scan of SH into B: version, chains, free lists, unmarked bytes, the
 * undo record. */
static void
chk_scan(const struct shmt_store *st, struct shmt_shard *sh, const char *who,
    uint64_t seq, uint64_t *bm, struct chk_buf *b)
{
	struct shmt_chk sub = { chk_buf_add, b, 0, 0, 0 };
	uint64_t units = st->heap_bytes / 64, unmarked = 0;

	chk_buf_clear(b);
	memset(bm, 0, (units / 64 + 1) * sizeof(uint64_t));
	if (seq & 1)
		shmt__chk(&sub, "%s: version odd outside a write", who);
	chk_undo(st, sh, &sub, who);
	chk_chains(st, sh, &sub, who, bm);
	chk_free_lists(st, sh, &sub, who, bm);
	for (uint64_t u = 0; u < units; u++)
		unmarked += !shmt__bit_get(bm, u);
	if (unmarked != 0)
		shmt__chk(&sub, "%s: %llu bytes in no block (leaked)", who,
		    (unsigned long long)unmarked * 64);
}

/*
 * How long the check watches a shard that is not at rest: SHMT_CHK_WAIT_NS
 * (segment.h).  Writers hold a shard for microseconds, so a scan finds it
 * at rest within a few tries unless writers keep it busy without a pause; a
 * lock held by the same live thread for that long while nothing moves is
 * damage of its own (a word naming a live process that does not hold it,
 * or a writer stopped inside), and is named as such.  The watching of all
 * shards shares SHMT_CHK_WAIT_TOTAL_NS, so that a segment whose every lock
 * word names a live process still gets its check in half a second.
 */

/*
 * Check one shard without its lock and without writing to it.  A scan is
 * "at rest" when the lock word was the same before and after it, naming no
 * live thread, and so was the version.  A scan that finds nothing ends the
 * check of the shard, at rest or not (damage stays put, so a write going
 * on cannot make damage look sound, short of repairing it).  A scan that
 * finds problems counts only at rest, and they are named only when a second
 * scan at rest finds them too, so a write that slipped between two reads
 * of the lock word cannot be taken for damage.  A shard never at rest for
 * SHMT_CHK_WAIT_NS (or what is left of the call's budget) while scans find
 * problems is left unchecked.  With REPAIR, a shard found damaged is then
 * rebuilt under its lock.
 */
static void
chk_shard(const struct shmt_store *st, struct shmt_shard *sh, const char *who,
    struct shmt_chk *c, uint64_t *bm)
{
	struct chk_buf b = { NULL, 0, 0, 0 };
	uint64_t start = shmt__mono_ns(), spent;
	uint64_t limit = c->wait_left < SHMT_CHK_WAIT_NS ? c->wait_left :
	    SHMT_CHK_WAIT_NS;
	uint32_t o1 = 0, o2 = 0, live_owner = 0;
	int lk1 = SHMT_LOCK_FREE, lk2, seen_damage = 0, done = 0, live_all = 1;
	unsigned tries_made = 0;

	for (unsigned tries = 0;; tries++) {
		uint64_t s1;
		int rest, clean, stuck, same;

		tries_made = tries + 1;
		lk1 = shmt__lock_peek(st->h, &sh->ds_lock, &o1);
		s1 = __atomic_load_n(&sh->ds_seq, __ATOMIC_ACQUIRE);
		chk_scan(st, sh, who, s1, bm, &b);
		/* As a reader validates its copy (the scan's loads come
		 * before the version's). */
		same = seq_valid(sh, s1);
		lk2 = shmt__lock_peek(st->h, &sh->ds_lock, &o2);
		rest = same && o1 == o2 && lk1 != SHMT_LOCK_LIVE &&
		    lk2 != SHMT_LOCK_LIVE;
		clean = b.n == 0 && b.lost == 0;
		/* The same live thread holds the lock and nothing moved: a
		 * writer inside, or a word naming a live thread that does not
		 * hold it (which stalls every writer): watch it a while. */
		stuck = lk1 == SHMT_LOCK_LIVE && lk2 == SHMT_LOCK_LIVE &&
		    o1 == o2 && same;
		if (!stuck || (live_owner != 0 && o1 != live_owner))
			live_all = 0;
		live_owner = o1;
		if (rest) {
			if (clean && lk1 == SHMT_LOCK_FREE)
				break;
			if (seen_damage) {
				done = 1;       /* confirmed */
				break;
			}
			seen_damage = 1;
			continue;
		}
		if (clean && !stuck)
			break;
		if (shmt__mono_ns() - start >= limit) {
			/* Named only after the full watch. */
			if (live_all && limit == SHMT_CHK_WAIT_NS)
				shmt__chk(c, "%s: lock held by live thread %u "
				    "(process %d) for over %llu ms", who, o1,
				    (int)shmt__tid_process(o1),
				    SHMT_CHK_WAIT_NS / 1000000ULL);
			break;
		}
		if (tries >= 2)
			sched_yield();
	}
	/* Only watching spends the shared budget, not a first scan. */
	spent = tries_made > 1 ? shmt__mono_ns() - start : 0;
	c->wait_left = spent >= c->wait_left ? 0 : c->wait_left - spent;
	if (done) {
		if (lk1 == SHMT_LOCK_DEAD)
			shmt__chk(c, "%s: lock names thread %u, which is gone (a "
			    "writer died inside: the next writer repairs the "
			    "shard)", who, o1);
		for (size_t i = 0; i < b.n; i++)
			shmt__chk(c, "%s", b.msg[i]);
		if (b.lost != 0)
			shmt__chk(c, "%s: %d more problems (no memory to name "
			    "them)", who, b.lost);
		if (c->repair) {
			int rc = shmt__shard_lock(st, sh);

			if (rc < 0)
				shmt__chk(c,
				    "%s: cannot take its lock to repair "
				    "it (%s)", who, shmt_strerror(rc));
			else {
				/* rc 1: taken over from the dead writer, and
				 * repaired as every writer does. */
				if (rc == 0 && shmt__shard_repair(st, sh) != 0) {
					shmt__chk(c, "%s: no memory to repair "
					    "it", who);
					shmt__unlock_unrepaired(&sh->ds_lock);
				} else {
					shmt__unlock(&sh->ds_lock);
				}
			}
		}
	}
	chk_buf_clear(&b);
	free(b.msg);
}

static void
chk_store(const struct shmt_store *st, const char *kind, struct shmt_chk *c)
{
	uint64_t *bm = calloc(st->heap_bytes / 64 / 64 + 1, sizeof(uint64_t));
	char who[64];

	if (bm == NULL) {
		shmt__chk(c, "%s: no memory to check it", kind);
		return;
	}
	for (uint32_t i = 0; i < st->shards; i++) {
		snprintf(who, sizeof(who), "%s shard %u", kind, i);
		chk_shard(st, shard_at(st, i), who, c, bm);
	}
	free(bm);
}

void
shmt__stores_check(shmt_t *h, struct shmt_chk *c)
{
	if (h->dict != NULL)
		chk_store(h->dict, "dictionary", c);
	if (h->counters != NULL)
		chk_store(h->counters, "counters", c);
}
