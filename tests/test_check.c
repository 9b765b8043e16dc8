/* SPDX-License-Identifier: MIT */
/*
 * shmt_check names each kind of damage it is documented to cover: each test
 * builds a sound segment (checked clean first), writes one kind of damage
 * into the real segment, and requires the check to name it, with the number
 * of problems, and to leave every byte of the segment as it was.  Then the
 * damage is undone and the check must be clean again.  Only
 * shmt_check_ex with SHMT_CHECK_REPAIR repairs, after naming the damage,
 * and the repaired segment checks clean and works.  A lock word naming a
 * live process never stalls the check.  The clock is injected: nothing
 * here waits for a window.
 */
#include "testutil.h"

#include "dict.h"
#include "limiter.h"
#include "segment.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS_S 1000000000ULL
#define HOUR (3600 * NS_S)
/* The injected clock starts here: far from 0, so "before" exists. */
#define T0 (1000 * NS_S)

struct fx {
	char seg[128];
	shmt_t *h;
	struct tu_clock clk;
};

/* What one check reported: every sentence, joined by newlines. */
struct seen {
	int n;
	char text[16384];
};

static void
seen_add(void *ctx, const char *problem)
{
	struct seen *s = ctx;
	size_t len = strlen(s->text);

	s->n++;
	snprintf(s->text + len, sizeof(s->text) - len, "%s\n", problem);
	printf("#   problem: %s\n", problem);
}

static void
fx_make(struct fx *f, const char *tag)
{
	shmt_config_t cfg;

	memset(f, 0, sizeof(*f));
	tu_segname(f->seg, sizeof(f->seg), tag);
	tu_config_small(&cfg);
	assert_int_equal(shmt_create(f->seg, &cfg, &f->h), 0);
	f->clk.now = T0;
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);

	tu_define_check_limiters(f->h);

	/* api: one bucket sealed full, one active with one use. */
	for (int i = 0; i < 5; i++)
		assert_int_equal(shmt_try_use_key(f->h, "api"), 1);
	f->clk.now += NS_S / 2;
	assert_int_equal(shmt_try_use(f->h, "pc", "alice", 5), 1);
	assert_int_equal(shmt_try_use_key(f->h, "exact"), 1);
	f->clk.now += NS_S / 4;
	assert_int_equal(shmt_try_use_key(f->h, "exact"), 1);
	for (int i = 0; i < 40; i++) {
		char k[16], v[16];
		int kn = snprintf(k, sizeof(k), "key-%d", i);
		int vn = snprintf(v, sizeof(v), "value-%d", i);

		assert_int_equal(shmt_set(f->h, k, (size_t)kn, v, (size_t)vn, 0),
		    0);
	}
	/* Items too long for a slot: in chains. */
	for (int i = 0; i < 32; i++) {
		char k[16], v[40];
		int kn = snprintf(k, sizeof(k), "long-%d", i);

		memset(v, 'L', sizeof(v));
		assert_int_equal(shmt_set(f->h, k, (size_t)kn, v, sizeof(v), 0),
		    0);
	}
	assert_int_equal(shmt_hit(f->h, "ip:1", 4, NULL), 0);
	assert_int_equal(shmt_hit(f->h, "ip:2", 4, NULL), 0);
}

static void
fx_free(struct fx *f)
{
	tu_close_unlink(f->h, f->seg);
}

/* Run the read-only check into *S and require it to leave every byte of
 * the segment as it was.  Returns what shmt_check returned. */
static int
check_ro(shmt_t *h, struct seen *s)
{
	char *before = malloc(h->size);
	int rc;

	assert_non_null(before);
	memset(s, 0, sizeof(*s));
	memcpy(before, h->base, h->size);
	rc = shmt_check(h, seen_add, s);
	if (memcmp(before, h->base, h->size) != 0) {
		size_t i = 0;

		while (before[i] == h->base[i])
			i++;
		fail_msg("shmt_check changed the segment at offset %zu", i);
	}
	free(before);
	assert_int_equal(rc, s->n);
	return rc;
}

/* The check names exactly N problems, one of them containing PHRASE. */
static void
expect_named(struct fx *f, int n, const char *phrase)
{
	struct seen s;

	assert_int_equal(check_ro(f->h, &s), n);
	if (strstr(s.text, phrase) == NULL)
		fail_msg("check does not name \"%s\":\n%s", phrase, s.text);
}

static void
expect_clean(struct fx *f)
{
	struct seen s;

	if (check_ro(f->h, &s) != 0)
		fail_msg("check finds problems in a sound segment:\n%s", s.text);
}

/* The slot of the active bucket of the ring RING with word W. */
static struct shmt_ring_slot *
active_slot(struct shmt_ring_slot *ring, uint32_t nb, struct shmt_w w)
{
	assert_true(SHMT_W_ACTIVE(w));
	return &ring[SHMT_W_TAIL(w) % nb];
}

/* The live client entry of per-client limiter ROW (there is one). */
static struct shmt_client *
live_client(shmt_t *h, struct shmt_lim *row)
{
	for (uint32_t i = 0; i < row->lm_capacity; i++) {
		struct shmt_client *e = (struct shmt_client *)(tu_arena(h) +
		    row->lm_clients_off + (uint64_t)i * row->lm_entsize);

		if (e->ce_hash[0] != 0 && SHMT_W_ACTIVE(e->ce_w))
			return e;
	}
	fail_msg("no live client entry");
	return NULL;
}

/* ---- Limiters ---------------------------------------------------------- */

/* A bucket whose close time lies hours ahead holds its uses for hours
 * past the window.  The legitimate latest is now + slack. */
static void
test_bucket_close_future(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	struct shmt_ring_slot *s;
	uint64_t saved;

	(void)state;
	fx_make(&f, "bkfut");
	expect_clean(&f);
	row = tu_row_of(f.h, "api");
	s = active_slot((struct shmt_ring_slot *)(tu_arena(f.h) + row->lm_ring_off),
	    row->lm_nbuckets, row->lm_w);
	saved = s->r[0];
	/* Exactly at the bound is legitimate; one past it is not. */
	s->r[0] = f.clk.now + NS_S;
	expect_clean(&f);
	s->r[0] = f.clk.now + NS_S + 1;
	expect_named(&f, 1, "limiter api: bucket");
	s->r[0] = f.clk.now + 10 * HOUR;
	expect_named(&f, 1, "close time in the future");
	s->r[0] = saved;
	expect_clean(&f);
	fx_free(&f);
}

/* Sealed buckets out of serial order: the CLI named it; the library now. */
static void
test_bucket_order(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	struct shmt_ring_slot *ring, *sealed;
	uint32_t tail;
	uint64_t saved;

	(void)state;
	fx_make(&f, "bkord");
	row = tu_row_of(f.h, "api");
	ring = (struct shmt_ring_slot *)(tu_arena(f.h) + row->lm_ring_off);
	tail = SHMT_W_TAIL(row->lm_w);
	assert_int_equal(SHMT_W_NSEALED(row->lm_w), 1);
	sealed = &ring[(tail - 1) % row->lm_nbuckets];
	saved = sealed->r[0];
	/* The sealed bucket now closes after the active one. */
	sealed->r[0] = active_slot(ring, row->lm_nbuckets, row->lm_w)->r[0] + 1;
	expect_named(&f, 1, "closes before bucket");
	sealed->r[0] = saved;
	expect_clean(&f);
	fx_free(&f);
}

/* One lie in a shared limiter's word or slots: a grant through a handle
 * that has not seen the word (so it reads W, lied, and decides from it
 * rather than from a word of its own) answers SHMT_ECORRUPT and writes
 * nothing; the ring is clean again once the lie is undone. */
static void
expect_grant_corrupt(shmt_t *h2, struct shmt_lim *row)
{
	struct shmt_w before = row->lm_w;

	assert_int_equal(shmt_try_use_key(h2, "api"), SHMT_ECORRUPT);
	assert_memory_equal(&row->lm_w, &before, sizeof(before));
}

/* Each lie leaves the rest of the word as a grant's fast path would take
 * it (an active bucket with room, under the limit, nothing due), so each
 * is refused only by its own check (ring.h, bk_take_view). */
static void
test_bucket_word_lies(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	struct shmt_ring_slot *ring, *sealed, *far;
	struct shmt_w w;
	uint32_t tail, nb;
	uint64_t saved[2];
	shmt_t *h2;

	(void)state;
	fx_make(&f, "bklie");
	assert_int_equal(shmt_open(f.seg, &h2), 0);
	assert_int_equal(shmt_set_clock(h2, tu_clock_read, &f.clk), 0);
	row = tu_row_of(f.h, "api");
	ring = (struct shmt_ring_slot *)(tu_arena(f.h) + row->lm_ring_off);
	nb = row->lm_nbuckets;
	w = row->lm_w;
	tail = SHMT_W_TAIL(w);
	assert_int_equal(SHMT_W_NSEALED(w), 1);
	assert_int_equal(SHMT_W_INFLIGHT(w), 5);
	assert_int_equal(SHMT_W_COUNT(w), 1);
	sealed = &ring[(tail - 1) % nb];
	assert_int_equal(sealed->r[1] >> 32, tail - 1);
	assert_int_equal((uint32_t)sealed->r[1], 4);

	/* The active bucket holds more uses than are in flight. */
	row->lm_w = shmt__w_make(1, 2, tail, 0, 1, SHMT_W_TAG(w));
	expect_grant_corrupt(h2, row);
	row->lm_w = w;
	expect_clean(&f);

	/* The oldest sealed bucket holds more uses than are in flight. */
	memcpy(saved, sealed->r, sizeof(saved));
	sealed->r[1] = (uint64_t)(tail - 1) << 32 | 6;
	expect_grant_corrupt(h2, row);
	memcpy(sealed->r, saved, sizeof(saved));
	expect_clean(&f);

	/* The oldest sealed bucket's slot holds an older serial. */
	sealed->r[1] = (uint64_t)(tail - 2) << 32 | 4;
	expect_grant_corrupt(h2, row);
	memcpy(sealed->r, saved, sizeof(saved));
	expect_clean(&f);

	/* More sealed buckets than the ring has, the slot the oldest of them
	 * falls on (serials are 32-bit: it wraps) holding that serial, a
	 * close time and a count that would let a grant through. */
	far = &ring[(uint32_t)(tail - 1 - nb) % nb];
	assert_true(far != &ring[tail % nb]);
	memcpy(saved, far->r, sizeof(saved));
	row->lm_w = shmt__w_make(5, 1, tail, nb + 1, 1, SHMT_W_TAG(w));
	far->r[0] = sealed->r[0];
	far->r[1] = (uint64_t)(uint32_t)(tail - 1 - nb) << 32 | 4;
	expect_grant_corrupt(h2, row);
	row->lm_w = w;
	memcpy(far->r, saved, sizeof(saved));
	expect_clean(&f);

	/* Undone, both handles grant again. */
	assert_int_equal(shmt_try_use_key(h2, "api"), 1);
	assert_int_equal(shmt_try_use_key(f.h, "api"), 1);
	expect_clean(&f);
	shmt_close(h2);
	fx_free(&f);
}

/* The same rule for a client entry's ring. */
static void
test_client_close_future(void **state)
{
	struct fx f;
	struct shmt_client *e;
	struct shmt_ring_slot *s;
	uint64_t saved;

	(void)state;
	fx_make(&f, "clfut");
	expect_clean(&f);
	e = live_client(f.h, tu_row_of(f.h, "pc"));
	s = active_slot((struct shmt_ring_slot *)(e + 1),
	    tu_row_of(f.h, "pc")->lm_nbuckets, e->ce_w);
	saved = s->r[0];
	s->r[0] = f.clk.now + 10 * HOUR;
	expect_named(&f, 1, "limiter pc client entry");
	expect_named(&f, 1, "close time in the future");
	s->r[0] = saved;
	expect_clean(&f);
	fx_free(&f);
}

static struct shmt_log_slot *
log_of(shmt_t *h, struct shmt_lim *row)
{
	return (struct shmt_log_slot *)(tu_arena(h) + row->lm_ring_off);
}

/* Log records far ahead of the grant hint (each still in its own slot):
 * every try spins to SHMT_EBUSYLOOP. */
static void
test_exact_ahead(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	struct shmt_log_slot *log;

	(void)state;
	fx_make(&f, "exahead");
	row = tu_row_of(f.h, "exact");
	log = log_of(f.h, row);
	for (uint64_t i = 0; i < row->lm_limit; i++)
		log[i].ls_seq += 3000;
	assert_int_equal(shmt_try_use_key(f.h, "exact"), SHMT_EBUSYLOOP);
	expect_named(&f, 1, "ahead of the grant hint 2 (3 such slots)");
	for (uint64_t i = 0; i < row->lm_limit; i++)
		log[i].ls_seq -= 3000;
	expect_clean(&f);
	/* One slot behind: a try that reaches it fails. */
	log[0].ls_seq -= 3;
	expect_named(&f, 1, "behind the grant hint");
	log[0].ls_seq += 3;
	expect_clean(&f);
	fx_free(&f);
}

/* A grant time in the future blocks its slot past the window. */
static void
test_exact_time_future(void **state)
{
	struct fx f;
	struct shmt_log_slot *log;
	uint64_t saved;

	(void)state;
	fx_make(&f, "extime");
	expect_clean(&f);
	log = log_of(f.h, tu_row_of(f.h, "exact"));
	assert_int_equal(log[1].ls_seq, 1);
	saved = log[1].ls_time;
	log[1].ls_time = f.clk.now;
	expect_clean(&f);
	log[1].ls_time = f.clk.now + 1;
	expect_named(&f, 1, "limiter exact: log slot 1: grant 1");
	log[1].ls_time = f.clk.now + 10 * HOUR;
	expect_named(&f, 1, "grant time in the future");
	log[1].ls_time = saved;
	expect_clean(&f);
	fx_free(&f);
}

/* A negative grant hint: every try returns SHMT_ECORRUPT. */
static void
test_exact_negative_hint(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	uint64_t saved;

	(void)state;
	fx_make(&f, "exneg");
	row = tu_row_of(f.h, "exact");
	saved = row->lm_w.w[0];
	row->lm_w.w[0] = (uint64_t)-5;
	assert_int_equal(shmt_try_use_key(f.h, "exact"), SHMT_ECORRUPT);
	expect_named(&f, 1, "limiter exact: exact log's grant hint -5 is "
	    "negative");
	row->lm_w.w[0] = saved;
	expect_clean(&f);
	fx_free(&f);
}

/* Repair one damage with SHMT_CHECK_REPAIR: named once, then gone. */
static void
repair_one(struct fx *f, const char *phrase)
{
	struct seen s;

	memset(&s, 0, sizeof(s));
	assert_int_equal(shmt_check_ex(f->h, SHMT_CHECK_REPAIR, seen_add, &s),
	    1);
	if (strstr(s.text, phrase) == NULL)
		fail_msg("repair does not name \"%s\":\n%s", phrase, s.text);
	expect_clean(f);
}

/* The limiter damage a repair mends: times clamped to the latest
 * legitimate one (which only delays a release), exact logs made to agree
 * with a hint moved past their grants; the limiter then works again. */
static void
test_repair_limiters(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	struct shmt_ring_slot *ring, *s;
	struct shmt_log_slot *log;
	struct shmt_client *e;

	(void)state;
	fx_make(&f, "replim");
	row = tu_row_of(f.h, "api");
	ring = (struct shmt_ring_slot *)(tu_arena(f.h) + row->lm_ring_off);
	s = active_slot(ring, row->lm_nbuckets, row->lm_w);
	s->r[0] = f.clk.now + 10 * HOUR;
	repair_one(&f, "close time in the future");
	assert_int_equal(s->r[0], f.clk.now + NS_S);
	ring[(SHMT_W_TAIL(row->lm_w) - 1) % row->lm_nbuckets].r[0] =
	    f.clk.now + NS_S / 2 + 1;
	s->r[0] = f.clk.now + NS_S / 2;
	repair_one(&f, "closes before bucket");
	assert_int_equal(s->r[0], f.clk.now + NS_S / 2 + 1);
	assert_true(shmt_try_use_key(f.h, "api") >= 0);

	e = live_client(f.h, tu_row_of(f.h, "pc"));
	s = active_slot((struct shmt_ring_slot *)(e + 1),
	    tu_row_of(f.h, "pc")->lm_nbuckets, e->ce_w);
	s->r[0] = f.clk.now + 10 * HOUR;
	repair_one(&f, "limiter pc client entry");
	assert_true(shmt_try_use(f.h, "pc", "alice", 5) >= 0);

	row = tu_row_of(f.h, "exact");
	log = log_of(f.h, row);
	for (uint64_t i = 0; i < row->lm_limit; i++)
		log[i].ls_seq += 3000;
	repair_one(&f, "ahead of the grant hint");
	assert_int_equal((int64_t)row->lm_w.w[0], 3002);
	/* A try decides again (it spun to SHMT_EBUSYLOOP): the log holds
	 * three grants of the last hour. */
	assert_int_equal(shmt_try_use_key(f.h, "exact"), 0);
	row->lm_w.w[0] = (uint64_t)-7;
	repair_one(&f, "is negative");
	assert_int_equal((int64_t)row->lm_w.w[0], 3002);
	assert_int_equal(shmt_try_use_key(f.h, "exact"), 0);
	log[0].ls_time = f.clk.now + 10 * HOUR;
	repair_one(&f, "grant time in the future");
	assert_int_equal(log[0].ls_time, f.clk.now);
	/* A slot behind: rewritten as a grant made now (it takes a use for a
	 * window, never gives one). */
	log[1].ls_seq -= 3;
	repair_one(&f, "behind the grant hint");
	assert_int_equal(log[1].ls_time, f.clk.now);
	f.clk.now += HOUR;
	assert_int_equal(shmt_try_use_key(f.h, "exact"), 1);
	fx_free(&f);
}

/* ---- Stores ------------------------------------------------------------ */

/* A counter whose value is shorter than its header says (the 40-byte head
 * and the rings its shape names). */
static void
test_counter_short_value(void **state)
{
	struct fx f;
	struct shmt_item *it = NULL;
	uint32_t i, saved;

	(void)state;
	fx_make(&f, "cshort");
	expect_clean(&f);
	for (i = 0; i < f.h->counters->shards && it == NULL; i++)
		it = tu_first_item(f.h->counters, i);
	assert_non_null(it);
	saved = it->it_lens;
	assert_true(lens_vlen(saved) > 40);
	it->it_lens = lens_make(lens_klen(saved), 8);
	expect_named(&f, 1, "has a value of 8 bytes, not a counter's shape");
	it->it_lens = saved;
	expect_clean(&f);
	fx_free(&f);
}

/* An item that links to itself: the walk ends at once and names the
 * loop. */
static void
test_chain_loop(void **state)
{
	struct fx f;
	const struct shmt_store *st;
	char *sh;
	struct shmt_bucket *index;
	uint64_t off = 0;

	(void)state;
	fx_make(&f, "loop");
	st = f.h->dict;
	sh = (char *)tu_shard(st, 0);
	index = (struct shmt_bucket *)(sh + st->index_off);
	/* The last item of the first chain (OFF: the link that names it). */
	for (uint64_t b = 0; b < st->nbuckets && off == 0; b++)
		for (uint64_t l = index[b].bk_head; l != 0;) {
			struct shmt_item *it = (struct shmt_item *)(sh +
			    st->heap_off + link_off(l));

			if (it->it_next == 0) {
				off = l;
				break;
			}
			l = it->it_next;
		}
	assert_int_not_equal(off, 0);
	((struct shmt_item *)(sh + st->heap_off + link_off(off)))->it_next =
	    off;
	expect_named(&f, 1, "chain reaches the block at");
	((struct shmt_item *)(sh + st->heap_off + link_off(off)))->it_next = 0;
	expect_clean(&f);
	fx_free(&f);
}

/* A bucket of shard 0 of the dictionary whose slot holds an item. */
static struct shmt_bucket *
used_slot(const struct shmt_store *st, uint64_t *bp)
{
	struct shmt_bucket *index = (struct shmt_bucket *)((char *)
	    tu_shard(st, 0) + st->index_off);

	for (uint64_t b = 0; b < st->nbuckets; b++)
		if (index[b].bk_lens != 0) {
			*bp = b;
			return &index[b];
		}
	fail_msg("no slot in use");
	return NULL;
}

/* A slot whose lengths no slot holds, or whose key's tag is another's, or
 * whose key belongs to another bucket: each named (with the shard's item
 * count, which counted it); the undo record of a slot armed at rest:
 * named. */
static void
test_slot_damage(void **state)
{
	struct shmt_shard *sh;
	struct shmt_bucket *bk, save;
	struct fx f;
	uint64_t b = 0;

	(void)state;
	fx_make(&f, "slot");
	bk = used_slot(f.h->dict, &b);
	save = *bk;
	expect_clean(&f);
	bk->bk_lens = lens_make(0, 4);
	expect_named(&f, 2, "slot holds what no slot of this store holds");
	bk->bk_lens = lens_make(20, 13);
	expect_named(&f, 2, "slot holds what no slot of this store holds");
	*bk = save;
	bk->bk_tag ^= 1;
	expect_named(&f, 2, "slot holds what no slot of this store holds");
	*bk = save;
	/* Its key's last byte changed: the hash leads elsewhere. */
	((char *)bk->bk_data)[lens_klen(bk->bk_lens) - 1] ^= 0x20;
	expect_named(&f, 2, "slot holds what no slot of this store holds");
	*bk = save;
	expect_clean(&f);
	sh = tu_shard(f.h->dict, 0);
	sh->ds_undo = SHMT_UNDO_SLOT | (b + 1);
	sh->ds_undo_len = SHMT_SLOT_BYTES;
	expect_named(&f, 1, "armed outside a write (the slot of bucket");
	sh->ds_undo = SHMT_UNDO_SLOT | (f.h->dict->nbuckets + 1);
	expect_named(&f, 1, "undo record names no slot");
	sh->ds_undo = 0;
	sh->ds_undo_len = 0;
	expect_clean(&f);
	fx_free(&f);
}

/* A shard whose item count is wrong and whose lock names a dead writer:
 * the check names both and changes nothing (check_ro compares every
 * byte); only SHMT_CHECK_REPAIR repairs, after naming them. */
static void
test_dead_writer_readonly(void **state)
{
	struct fx f;
	struct shmt_shard *sh;
	struct shmt_dict_stat ds;
	struct seen s;
	uint64_t items;

	(void)state;
	fx_make(&f, "deadro");
	expect_clean(&f);
	sh = tu_shard(f.h->dict, 1);
	items = sh->ds_items;
	assert_true(items > 0);
	sh->ds_items = items + 3;
	sh->ds_lock.lk_owner = tu_dead_tid();
	expect_named(&f, 2, "dictionary shard 1: counts");
	expect_named(&f, 2, "dictionary shard 1: lock names thread");
	/* Still there: a read-only check repairs nothing. */
	assert_int_equal(sh->ds_items, items + 3);
	assert_int_not_equal(sh->ds_lock.lk_owner, 0);

	memset(&s, 0, sizeof(s));
	assert_int_equal(shmt_check_ex(f.h, SHMT_CHECK_REPAIR, seen_add, &s), 2);
	assert_int_equal(s.n, 2);
	assert_non_null(strstr(s.text, "dictionary shard 1: counts"));
	assert_int_equal(sh->ds_items, items);
	assert_int_equal(sh->ds_lock.lk_owner, 0);
	assert_int_equal(shmt_dict_stat(f.h, &ds), 0);
	assert_int_equal(ds.items, 72);
	assert_true(ds.repairs >= 1);
	expect_clean(&f);
	fx_free(&f);
}

/* A lock word naming the checking thread itself: no writer holds it (the
 * thread is busy checking), so it is a dead writer's, not a live one. */
static void
test_own_id_in_lock(void **state)
{
	struct fx f;
	struct shmt_shard *sh;

	(void)state;
	fx_make(&f, "ownid");
	sh = tu_shard(f.h->dict, 0);
	sh->ds_lock.lk_owner = (uint32_t)getpid();
	expect_named(&f, 1, "dictionary shard 0: lock names thread");
	sh->ds_lock.lk_owner = 0;
	expect_clean(&f);
	fx_free(&f);
}

/* A wrong count with the lock free: named; repaired only on request. */
static void
test_repair_on_request(void **state)
{
	struct fx f;
	struct shmt_shard *sh;
	struct seen s;

	(void)state;
	fx_make(&f, "repair");
	sh = tu_shard(f.h->dict, 0);
	sh->ds_used += 64;
	expect_named(&f, 1, "dictionary shard 0: counts");
	expect_named(&f, 1, "dictionary shard 0: counts");
	memset(&s, 0, sizeof(s));
	assert_int_equal(shmt_check_ex(f.h, SHMT_CHECK_REPAIR, seen_add, &s), 1);
	expect_clean(&f);
	assert_int_equal(shmt_check_ex(NULL, 0, NULL, NULL), -EINVAL);
	assert_int_equal(shmt_check_ex(f.h, 0x80, NULL, NULL), -EINVAL);
	fx_free(&f);
}

/* A child attached to segment SEG (it holds a slot) until *FD is closed;
 * returns its pid once its slot shows in H. */
static pid_t
attached_child(shmt_t *h, const char *seg, int *fd)
{
	int p[2], back[2];
	char c = 0;
	pid_t pid;

	/* The child says when its shmt_open has returned: the segment's
	 * process table shows its slot before the open has written all of
	 * it, and a check that copies the segment in between would see the
	 * child's own stores as changes. */
	assert_int_equal(pipe(back), 0);
	pid = tu_fork_pipe(p);
	if (pid == 0) {
		shmt_t *ch = NULL;

		close(p[1]);
		close(back[0]);
		alarm(60);
		if (shmt_open(seg, &ch) != 0)
			_exit(1);
		if (write(back[1], "o", 1) != 1)
			_exit(3);
		if (read(p[0], &c, 1) < 0)
			_exit(2);
		shmt_close(ch);
		_exit(0);
	}
	close(p[0]);
	close(back[1]);
	*fd = p[1];
	if (read(back[0], &c, 1) != 1)
		fail_msg("the child never attached");
	close(back[0]);
	for (int i = 0; i < 5000; i++) {
		shmt_segment_stat_t ss;

		assert_int_equal(shmt_segment_stat(h, &ss), 0);
		if (ss.slots >= 2)
			return pid;
		usleep(1000);
	}
	fail_msg("the child never attached");
	return -1;
}

static void
child_done(pid_t pid, int fd)
{
	int st;

	close(fd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static double
mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A lock word that names a live process attached to the segment which
 * does not hold it: the read-only check neither waits long nor takes the
 * lock from it, and names it. */
static void
test_live_owner_not_stalled(void **state)
{
	struct fx f;
	struct shmt_shard *sh;
	struct seen s;
	double t;
	pid_t pid;
	int fd;

	(void)state;
	fx_make(&f, "liveown");
	pid = attached_child(f.h, f.seg, &fd);
	sh = tu_shard(f.h->dict, 0);
	sh->ds_lock.lk_owner = (uint32_t)pid;
	t = mono_s();
	assert_int_equal(check_ro(f.h, &s), 1);
	t = mono_s() - t;
	printf("# check with a live owner took %.3f s\n", t);
	assert_non_null(strstr(s.text, "dictionary shard 0: lock held by live "
	    "thread"));
	assert_true(t < 2.0);
	assert_int_equal(sh->ds_lock.lk_owner, (uint32_t)pid);
	child_done(pid, fd);
	sh->ds_lock.lk_owner = 0;
	expect_clean(&f);
	fx_free(&f);
}

/* Every lock word of 64 small shards names a live process: the watching
 * of all shards shares one budget (500 ms), so the check ends in about
 * half a second, not 64 x 100 ms, and names only shards it watched in
 * full.  The shards are the smallest the library makes, so that scanning
 * them costs little even in the sanitizer builds. */
static void
test_live_owners_everywhere(void **state)
{
	shmt_config_t cfg;
	shmt_t *h = NULL;
	char seg[128];
	struct seen s;
	double t;
	pid_t pid;
	int fd, n, named = 0;
	const char *p;

	(void)state;
	tu_segname(seg, sizeof(seg), "liveall");
	shmt_config_init(&cfg);
	cfg.max_slots = 16;
	cfg.arena_bytes = 64 << 10;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 64 * (64 << 10);
	cfg.counters_shards = 64;
	cfg.analyzer_bytes = 0;
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(h->counters->shards, 64);
	pid = attached_child(h, seg, &fd);
	for (uint32_t i = 0; i < h->counters->shards; i++)
		tu_shard(h->counters, i)->ds_lock.lk_owner = (uint32_t)pid;
	t = mono_s();
	n = check_ro(h, &s);
	t = mono_s() - t;
	for (p = s.text; (p = strstr(p, "lock held by live thread")) != NULL;
	    p++)
		named++;
	printf("# 64 shards held by a live process: check took %.3f s and "
	    "named %d\n", t, n);
	assert_int_equal(n, named);
	assert_true(n >= 1 && n <= 5);
	assert_true(t < 3.0);
	child_done(pid, fd);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* The daemon's heartbeat ahead of CLOCK_MONOTONIC (the CLI named it; the
 * library now). */
static void
test_heartbeat_future(void **state)
{
	struct fx f;
	struct timespec ts;

	(void)state;
	fx_make(&f, "hbfut");
	clock_gettime(CLOCK_MONOTONIC, &ts);
	f.h->hdr->sh_heartbeat_ns = (uint64_t)ts.tv_sec * NS_S +
	    (uint64_t)ts.tv_nsec + HOUR;
	expect_named(&f, 1, "daemon: heartbeat");
	f.h->hdr->sh_heartbeat_ns = 0;
	expect_clean(&f);
	fx_free(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_bucket_close_future, tu_sweep),
		cmocka_unit_test_teardown(test_bucket_order, tu_sweep),
		cmocka_unit_test_teardown(test_bucket_word_lies, tu_sweep),
		cmocka_unit_test_teardown(test_client_close_future, tu_sweep),
		cmocka_unit_test_teardown(test_exact_ahead, tu_sweep),
		cmocka_unit_test_teardown(test_exact_time_future, tu_sweep),
		cmocka_unit_test_teardown(test_exact_negative_hint, tu_sweep),
		cmocka_unit_test_teardown(test_repair_limiters, tu_sweep),
		cmocka_unit_test_teardown(test_counter_short_value, tu_sweep),
		cmocka_unit_test_teardown(test_chain_loop, tu_sweep),
		cmocka_unit_test_teardown(test_slot_damage, tu_sweep),
		cmocka_unit_test_teardown(test_dead_writer_readonly, tu_sweep),
		cmocka_unit_test_teardown(test_own_id_in_lock, tu_sweep),
		cmocka_unit_test_teardown(test_repair_on_request, tu_sweep),
		cmocka_unit_test_teardown(test_live_owner_not_stalled, tu_sweep),
		cmocka_unit_test_teardown(test_live_owners_everywhere, tu_sweep),
		cmocka_unit_test_teardown(test_heartbeat_future, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
