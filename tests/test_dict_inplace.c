/* SPDX-License-Identifier: MIT */
/*
 * The overwrite in place (store.c, shmt__store_overwrite): a value that
 * fits its item's block is written over the item, which keeps its place
 * in the heap and its link, while a value of another block size is copied
 * to a fresh block as before; and a writer killed with kill -9 half way
 * through an overwrite leaves the key its old value, put back from the
 * shard's undo record by the repair, with nothing for shmt_check to find;
 * and shmt_check names an undo record left armed.
 */
#include "testutil.h"

#include "dict.h"
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static shmt_t *
ip_open(char *seg, size_t cap)
{
	shmt_config_t cfg;
	shmt_t *h = NULL;

	tu_config_tiny(&cfg);
	tu_segname(seg, cap, "inplace");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	return h;
}

/* The link that names KEY's item now (0 when absent). */
static uint64_t
link_of(shmt_t *h, const char *key)
{
	const struct shmt_store *st = h->dict;
	uint64_t hash = key_hash(h, key, strlen(key)), *link;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));
	struct shmt_item *it;

	it = shmt__store_find(st, sh, hash, key, strlen(key), &link);
	assert_non_null(link);
	return it == NULL ? 0 : *link;
}

static void
get_is(shmt_t *h, const char *key, const void *want, size_t wlen)
{
	char buf[512];
	size_t n = 0;

	assert_int_equal(shmt_get(h, key, strlen(key), buf, sizeof(buf), &n), 0);
	assert_int_equal(n, wlen);
	assert_memory_equal(buf, want, wlen);
}

/* Values whose item takes the same 128-byte block are written over it (the
 * link stays); a value that needs a larger block, and one that needs a
 * smaller one, move the item; the shard's counts stay those of one item.
 * (Items of one 64-byte block are held in their bucket's slot:
 * test_slot_overwrite.) */
static void
test_overwrite_keeps_place(void **state)
{
	char seg[128], big[200], v40[40], v91[91], v28[28];
	shmt_dict_stat_t a, b;
	uint64_t l0, l1;
	shmt_t *h;

	(void)state;
	h = ip_open(seg, sizeof(seg));
	memset(v40, 'a', sizeof(v40));
	memset(v91, 'b', sizeof(v91));
	memset(v28, '0', sizeof(v28));
	v28[27] = '1';
	assert_int_equal(shmt_set(h, "key:1", 5, v40, sizeof(v40), 0), 0);
	l0 = link_of(h, "key:1");
	assert_int_not_equal(l0, 0);
	assert_int_equal(shmt_dict_stat(h, &a), 0);
	/* 32 + 5 + 91 = 128, 32 + 5 + 28 = 65: the same block, longer and
	 * shorter values. */
	assert_int_equal(shmt_set(h, "key:1", 5, v91, sizeof(v91), 0), 0);
	assert_int_equal(link_of(h, "key:1"), l0);
	get_is(h, "key:1", v91, sizeof(v91));
	assert_int_equal(shmt_set(h, "key:1", 5, v28, sizeof(v28), 0), 0);
	assert_int_equal(link_of(h, "key:1"), l0);
	get_is(h, "key:1", v28, sizeof(v28));
	v28[27] = '2';
	assert_int_equal(shmt_replace(h, "key:1", 5, v28, sizeof(v28), 0), 0);
	assert_int_equal(link_of(h, "key:1"), l0);
	get_is(h, "key:1", v28, sizeof(v28));
	assert_int_equal(shmt_dict_stat(h, &b), 0);
	assert_int_equal(b.items, a.items);
	assert_int_equal(b.used, a.used);
	assert_int_equal(b.repairs, 0);
	/* A 200-byte value needs a 256-byte block: copied, not overwritten. */
	memset(big, 'z', sizeof(big));
	assert_int_equal(shmt_set(h, "key:1", 5, big, sizeof(big), 0), 0);
	l1 = link_of(h, "key:1");
	assert_int_not_equal(l1, l0);
	get_is(h, "key:1", big, sizeof(big));
	/* Over 256 bytes before: always copied, here back to 128 bytes. */
	assert_int_equal(shmt_set(h, "key:1", 5, v40, sizeof(v40), 0), 0);
	assert_int_not_equal(link_of(h, "key:1"), l1);
	get_is(h, "key:1", v40, sizeof(v40));
	assert_int_equal(shmt_dict_stat(h, &b), 0);
	assert_int_equal(b.items, a.items);
	assert_int_equal(b.used, a.used);
	/* A key in a chain stays there, whatever its value's size. */
	assert_int_equal(shmt_set(h, "key:1", 5, "small", 5, 0), 0);
	assert_int_not_equal(link_of(h, "key:1"), 0);
	get_is(h, "key:1", "small", 5);
	tu_close_unlink(h, seg);
}

/* The slot of KEY's bucket holds KEY. */
static int
in_slot(shmt_t *h, const char *key)
{
	const struct shmt_store *st = h->dict;
	uint64_t hash = key_hash(h, key, strlen(key));
	struct slot_copy c;

	slot_load(bucket_at(st, shard_at(st, shard_of(st, hash)),
	    bucket_of(st, hash)), &c);
	return slot_holds(&c, hash_tag(hash), key, strlen(key));
}

/* An item of one 64-byte block lives in its bucket's slot, with no heap:
 * new values that fit are written over it there (set, replace, incr, an
 * empty value), and a value that outgrows the slot moves the key to a heap
 * item of its chain, where it then stays; a delete empties the slot. */
static void
test_slot_overwrite(void **state)
{
	char seg[128], big[200];
	shmt_dict_stat_t a;
	int64_t r = 0;
	shmt_t *h;

	(void)state;
	h = ip_open(seg, sizeof(seg));
	assert_int_equal(shmt_set(h, "key:1", 5, "0123456789abcdef", 16, 0), 0);
	assert_true(in_slot(h, "key:1"));
	assert_int_equal(link_of(h, "key:1"), 0);
	/* 5 + 27 = 32: the most a slot holds. */
	assert_int_equal(shmt_set(h, "key:1", 5, "abcdefghijklmnopqrstuvwxyz!",
	    27, 0), 0);
	get_is(h, "key:1", "abcdefghijklmnopqrstuvwxyz!", 27);
	assert_int_equal(shmt_set(h, "key:1", 5, "", 0, 0), 0);
	get_is(h, "key:1", "", 0);
	assert_int_equal(shmt_replace(h, "key:1", 5, "41", 2, 0), 0);
	assert_int_equal(shmt_incr(h, "key:1", 5, 1, &r), 0);
	assert_int_equal(r, 42);
	get_is(h, "key:1", "42", 2);
	assert_true(in_slot(h, "key:1"));
	assert_int_equal(shmt_add(h, "key:1", 5, "x", 1, 0), -EEXIST);
	assert_int_equal(shmt_dict_stat(h, &a), 0);
	assert_int_equal(a.items, 1);
	assert_int_equal(a.used, 0);
	/* 5 + 28 = 33: outgrown, to the heap. */
	assert_int_equal(shmt_set(h, "key:1", 5, "abcdefghijklmnopqrstuvwxyz!?",
	    28, 0), 0);
	assert_false(in_slot(h, "key:1"));
	assert_int_not_equal(link_of(h, "key:1"), 0);
	get_is(h, "key:1", "abcdefghijklmnopqrstuvwxyz!?", 28);
	memset(big, 'z', sizeof(big));
	assert_int_equal(shmt_set(h, "key:1", 5, big, sizeof(big), 0), 0);
	get_is(h, "key:1", big, sizeof(big));
	assert_int_equal(shmt_set(h, "key:1", 5, "s", 1, 0), 0);
	assert_false(in_slot(h, "key:1"));
	get_is(h, "key:1", "s", 1);
	assert_int_equal(shmt_dict_stat(h, &a), 0);
	assert_int_equal(a.items, 1);
	assert_int_equal(a.used, 64);
	assert_int_equal(shmt_del(h, "key:1", 5), 0);
	/* A new key takes the empty slot; its delete empties it. */
	assert_int_equal(shmt_set(h, "key:2", 5, "v", 1, 0), 0);
	assert_true(in_slot(h, "key:2"));
	assert_int_equal(shmt_del(h, "key:2", 5), 0);
	assert_false(in_slot(h, "key:2"));
	{
		size_t n = 0;

		assert_int_equal(shmt_get(h, "key:2", 5, big, sizeof(big), &n),
		    -ENOENT);
	}
	assert_int_equal(shmt_dict_stat(h, &a), 0);
	assert_int_equal(a.items, 0);
	assert_int_equal(a.used, 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	tu_close_unlink(h, seg);
}

/* An overwrite keeps or replaces the TTL as a copy did: a set's TTL is the
 * new one, an incr keeps the key's own. */
static void
test_overwrite_ttl(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	char seg[128];
	int64_t r = 0;
	shmt_t *h;
	char buf[16];
	size_t n;

	(void)state;
	h = ip_open(seg, sizeof(seg));
	shmt_set_clock(h, tu_clock_read, &clk);
	assert_int_equal(shmt_set(h, "t", 1, "1", 1, 0), 0);
	assert_int_equal(shmt_set(h, "t", 1, "5", 1, 100), 0);
	assert_int_equal(shmt_incr(h, "t", 1, 1, &r), 0);
	assert_int_equal(r, 6);
	clk.now += 99 * 1000000ULL;
	get_is(h, "t", "6", 1);
	clk.now += 1000000ULL;
	assert_int_equal(shmt_get(h, "t", 1, buf, sizeof(buf), &n), -ENOENT);
	/* Expired: the set starts over (no TTL now). */
	assert_int_equal(shmt_set(h, "t", 1, "7", 1, 0), 0);
	clk.now += 1000ULL * 1000000000ULL;
	get_is(h, "t", "7", 1);
	tu_close_unlink(h, seg);
}

struct half {
	shmt_t *h;
	const char *key;
	const char *val;
	size_t vlen;
	int slot;               /* 1: KEY is in its bucket's slot */
};

/* In a child: begin an overwrite of KEY as shmt__store_overwrite (or, for
 * a key in its slot, shmt__slot_overwrite) does,
 * store the first half of the new value, and die with SIGKILL there,
 * holding the shard's lock with the version odd and the record armed. */
static void
die_half_way(const struct half *w)
{
	const struct shmt_store *st = w->h->dict;
	uint64_t hash = key_hash(w->h, w->key, strlen(w->key)), *link;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));
	struct shmt_item *it;

	if (shmt__shard_lock(st, sh) < 0)
		_exit(2);
	if (w->slot) {
		struct shmt_bucket *bk = bucket_at(st, sh, bucket_of(st, hash));
		char data[SHMT_SLOT_DATA];

		shmt__slot_overwrite_begin(st, sh, bucket_of(st, hash));
		memcpy(data, bk->bk_data, sizeof(data));
		memcpy(data + strlen(w->key), w->val, w->vlen / 2);
		__atomic_store_n(&bk->bk_lens, lens_make(strlen(w->key),
		    w->vlen), __ATOMIC_RELAXED);
		memcpy(bk->bk_data, data, sizeof(data));
		raise(SIGKILL);
		_exit(4);
	}
	it = shmt__store_find(st, sh, hash, w->key, strlen(w->key), &link);
	if (it == NULL)
		_exit(3);
	shmt__store_overwrite_begin(st, sh, it);
	__atomic_store_n(&it->it_lens, lens_make(strlen(w->key), w->vlen),
	    __ATOMIC_RELAXED);
	memcpy(item_val(it), w->val, w->vlen / 2);
	raise(SIGKILL);
	_exit(4);
}

static void
report(void *ctx, const char *problem)
{
	(void)ctx;
	printf("# check: %s\n", problem);
}

/* Where KEY's item is: 1 in its bucket's slot, else the link that names
 * it in its chain. */
static uint64_t
place_of(shmt_t *h, const char *key)
{
	return in_slot(h, key) ? 1 : link_of(h, key);
}

/* A writer killed half way through an overwrite of W's key, whose value is
 * OLDV: a reader waits out the odd version, finds the writer dead, repairs
 * the shard and reads the old value whole; so do later reads, the key
 * keeps its place, the next set succeeds, and shmt_check finds nothing
 * wrong. */
static void
overwrite_killed(struct half *w, const char *oldv)
{
	uint64_t p0;
	shmt_dict_stat_t ds;
	char seg[128];
	int status;
	pid_t pid;

	w->h = ip_open(seg, sizeof(seg));
	assert_int_equal(shmt_set(w->h, "victim", 6, oldv, strlen(oldv), 0), 0);
	assert_int_equal(shmt_set(w->h, "bystander", 9, "b", 1, 0), 0);
	assert_int_equal(in_slot(w->h, "victim"), w->slot);
	p0 = place_of(w->h, "victim");
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		die_half_way(w);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	get_is(w->h, "victim", oldv, strlen(oldv));
	get_is(w->h, "victim", oldv, strlen(oldv));
	get_is(w->h, "bystander", "b", 1);
	assert_int_equal(place_of(w->h, "victim"), p0);
	assert_int_equal(shmt_dict_stat(w->h, &ds), 0);
	assert_int_equal(ds.repairs, 1);
	assert_int_equal(ds.items, 2);
	assert_int_equal(shmt_check(w->h, report, NULL), 0);
	assert_int_equal(shmt_set(w->h, "victim", 6, w->val, w->vlen, 0), 0);
	get_is(w->h, "victim", w->val, w->vlen);
	assert_int_equal(shmt_check(w->h, report, NULL), 0);
	tu_close_unlink(w->h, seg);
}

/* An item of the heap (its value too long for the slot). */
static void
test_overwrite_killed(void **state)
{
	struct half w = { .key = "victim",
	    .val = "NEW-VALUE-abcdefghij-0123456789", .vlen = 30 };

	(void)state;
	overwrite_killed(&w, "old-value-0123456789-abcdefghij");
}

/* An item in its bucket's slot: the repair puts the slot back from the
 * undo record. */
static void
test_slot_overwrite_killed(void **state)
{
	struct half w = { .key = "victim", .val = "NEW-VALUE-abcd",
	    .vlen = 14, .slot = 1 };

	(void)state;
	overwrite_killed(&w, "old-value-0123");
}

/* shmt_check names an undo record armed at rest, and one that names no
 * item's place; its repair puts the item back from the first (here the
 * same bytes) and drops the second. */
static void
test_check_undo(void **state)
{
	const char *key = "checked", *v1 = "v1-long-enough-for-no-slot-0123",
	    *v2 = "v2-long-enough-for-no-slot-0123";
	struct shmt_shard *sh;
	struct shmt_item *it;
	uint64_t hash, *link;
	char seg[128];
	shmt_t *h;

	(void)state;
	h = ip_open(seg, sizeof(seg));
	assert_int_equal(shmt_set(h, key, strlen(key), v1, strlen(v1), 0), 0);
	hash = key_hash(h, key, strlen(key));
	sh = shard_at(h->dict, shard_of(h->dict, hash));
	it = shmt__store_find(h->dict, sh, hash, key, strlen(key), &link);
	assert_non_null(it);
	assert_int_equal(shmt_check(h, report, NULL), 0);
	/* Armed, as a writer killed inside an overwrite leaves it. */
	memcpy(sh->ds_undo_bytes, it, sizeof(*it) + strlen(key) + strlen(v1));
	sh->ds_undo_len = sizeof(*it) + strlen(key) + strlen(v1);
	sh->ds_undo = (uint64_t)((char *)it - shard_heap(h->dict, sh)) + 1;
	assert_int_equal(shmt_check(h, report, NULL), 1);
	assert_int_equal(shmt_check_ex(h, SHMT_CHECK_REPAIR, report, NULL), 1);
	assert_int_equal(sh->ds_undo, 0);
	assert_int_equal(shmt_check(h, report, NULL), 0);
	get_is(h, key, v1, strlen(v1));
	/* Naming a place past the heap. */
	sh->ds_undo = h->dict->heap_bytes + 1;
	sh->ds_undo_len = 64;
	assert_int_equal(shmt_check(h, report, NULL), 1);
	assert_int_equal(shmt_check_ex(h, SHMT_CHECK_REPAIR, report, NULL), 1);
	assert_int_equal(shmt_check(h, report, NULL), 0);
	get_is(h, key, v1, strlen(v1));
	assert_int_equal(shmt_set(h, key, strlen(key), v2, strlen(v2), 0), 0);
	get_is(h, key, v2, strlen(v2));
	/* A plausible record at rest (version even) that names the middle
	 * of another key's item: dropped, not written over that item. */
	{
		char big[900], out[1000];
		struct shmt_item fake;
		size_t n = 0;

		memset(big, 'a', sizeof(big));
		assert_int_equal(shmt_set(h, "big", 3, big, sizeof(big), 0), 0);
		hash = key_hash(h, "big", 3);
		sh = shard_at(h->dict, shard_of(h->dict, hash));
		it = shmt__store_find(h->dict, sh, hash, "big", 3, &link);
		assert_non_null(it);
		assert_true(it->it_order >= 4);
		memcpy(&fake, it, sizeof(fake));
		fake.it_order = 0;
		memset(sh->ds_undo_bytes, 'X', 64);
		memcpy(sh->ds_undo_bytes, &fake, sizeof(fake));
		sh->ds_undo_len = 64;
		sh->ds_undo = (uint64_t)((char *)it - shard_heap(h->dict, sh)) +
		    512 + 1;
		assert_int_equal(sh->ds_seq & 1, 0);
		assert_int_equal(shmt_check(h, report, NULL), 1);
		assert_int_equal(shmt_check_ex(h, SHMT_CHECK_REPAIR, report,
		    NULL), 1);
		assert_int_equal(shmt_check(h, report, NULL), 0);
		assert_int_equal(shmt_get(h, "big", 3, out, sizeof(out), &n), 0);
		assert_int_equal(n, sizeof(big));
		assert_memory_equal(out, big, sizeof(big));
	}
	tu_close_unlink(h, seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_overwrite_keeps_place, tu_sweep),
		cmocka_unit_test_teardown(test_slot_overwrite, tu_sweep),
		cmocka_unit_test_teardown(test_slot_overwrite_killed, tu_sweep),
		cmocka_unit_test_teardown(test_overwrite_ttl, tu_sweep),
		cmocka_unit_test_teardown(test_overwrite_killed, tu_sweep),
		cmocka_unit_test_teardown(test_check_undo, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
