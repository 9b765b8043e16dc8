/* SPDX-License-Identifier: MIT */
/*
 * The dictionary's layout (store.h): keys whose links carry the same tag
 * and that share their first bytes are told apart by their whole key; a
 * bucket's filter holds the tag of every item of its chain and is empty
 * with the chain, after any mix of writes, deletes, expiries and
 * evictions; and a get, a set and an incr read the clock once each.
 */
#include "testutil.h"

#include "dict.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static shmt_t *
lay_open(char *seg, size_t cap, int eviction)
{
	shmt_config_t cfg;
	shmt_t *h = NULL;

	tu_config_tiny(&cfg);
	cfg.dict_eviction = eviction;
	tu_segname(seg, cap, "layout");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	return h;
}

/* Put KEY under the hash HASH (not its own: the test picks where it goes). */
static void
put_at(shmt_t *h, uint64_t hash, const char *key, const char *val)
{
	const struct shmt_store *st = h->dict;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));

	assert_true(shmt__shard_lock(st, sh) >= 0);
	assert_int_equal(shmt__store_add(h, st, sh, hash, key, strlen(key),
	    val, strlen(val), 0), 0);
	shmt__unlock(&sh->ds_lock);
}

/* The value of the item found for KEY under HASH, or NULL. */
static const char *
find_at(shmt_t *h, uint64_t hash, const char *key, char *buf, size_t cap)
{
	const struct shmt_store *st = h->dict;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));
	struct slot_copy c;
	struct shmt_item *it;
	uint64_t *link;

	slot_load(bucket_at(st, sh, bucket_of(st, hash)), &c);
	if (slot_holds(&c, hash_tag(hash), key, strlen(key))) {
		assert_true(lens_vlen(c.lens) < cap);
		memcpy(buf, slot_val(&c), lens_vlen(c.lens));
		buf[lens_vlen(c.lens)] = '\0';
		return buf;
	}
	it = shmt__store_find(st, sh, hash, key, strlen(key), &link);
	assert_non_null(link);
	if (it == NULL)
		return NULL;
	assert_true(item_vlen(it) < cap);
	memcpy(buf, item_val(it), item_vlen(it));
	buf[item_vlen(it)] = '\0';
	return buf;
}

/* Remove KEY, stored under HASH, from its bucket's slot or from its chain
 * (never both). */
static void
remove_at(shmt_t *h, uint64_t hash, const char *key)
{
	const struct shmt_store *st = h->dict;
	struct shmt_shard *sh = shard_at(st, shard_of(st, hash));
	struct slot_copy c;
	struct shmt_item *it;
	uint64_t *link;

	assert_true(shmt__shard_lock(st, sh) >= 0);
	slot_load(bucket_at(st, sh, bucket_of(st, hash)), &c);
	it = shmt__store_find(st, sh, hash, key, strlen(key), &link);
	assert_non_null(link);
	if (slot_holds(&c, hash_tag(hash), key, strlen(key))) {
		assert_null(it);
		shmt__slot_clear(st, sh, bucket_of(st, hash));
	} else {
		assert_non_null(it);
		shmt__store_unlink(st, sh, link, it);
	}
	shmt__unlock(&sh->ds_lock);
}

/* Four keys of one hash (so one bucket and one tag), two of them equal
 * but for their last byte and one a prefix of the others, the first in
 * the bucket's slot and the others in its chain: each finds its own item,
 * an absent key of the same hash finds none, and a key removed takes none
 * of the others with it.  (The check would call these items misplaced:
 * their hash is not their key's.) */
static void
test_tag_collision(void **state)
{
	const uint64_t hash = 0x0123456789abcdefULL;
	char seg[128], buf[64];
	shmt_t *h;

	(void)state;
	h = lay_open(seg, sizeof(seg), 0);
	put_at(h, hash, "user:10000", "s");
	put_at(h, hash, "user:1000", "a");
	put_at(h, hash, "user:1001", "b");
	put_at(h, hash, "user:100", "c");
	assert_string_equal(find_at(h, hash, "user:1000", buf, sizeof(buf)),
	    "a");
	assert_string_equal(find_at(h, hash, "user:1001", buf, sizeof(buf)),
	    "b");
	assert_string_equal(find_at(h, hash, "user:100", buf, sizeof(buf)),
	    "c");
	assert_null(find_at(h, hash, "user:1002", buf, sizeof(buf)));
	assert_null(find_at(h, hash, "user:10", buf, sizeof(buf)));
	remove_at(h, hash, "user:1000");
	assert_null(find_at(h, hash, "user:1000", buf, sizeof(buf)));
	assert_string_equal(find_at(h, hash, "user:10000", buf, sizeof(buf)),
	    "s");
	remove_at(h, hash, "user:10000");
	assert_null(find_at(h, hash, "user:10000", buf, sizeof(buf)));
	assert_string_equal(find_at(h, hash, "user:1001", buf, sizeof(buf)),
	    "b");
	assert_string_equal(find_at(h, hash, "user:100", buf, sizeof(buf)),
	    "c");
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A slot whose item expired is free: a new small key of its bucket takes
 * it (no heap block), and the expired key is gone (counted as expired). */
static void
test_slot_expired_taken(void **state)
{
	const uint64_t hash = 0x0fedcba987654321ULL;
	const struct shmt_store *st;
	struct shmt_shard *sh;
	shmt_dict_stat_t ds;
	char seg[128], buf[64];
	shmt_t *h;

	(void)state;
	h = lay_open(seg, sizeof(seg), 0);
	st = h->dict;
	sh = shard_at(st, shard_of(st, hash));
	assert_true(shmt__shard_lock(st, sh) >= 0);
	/* Expired long ago (1 ns after the clock's start). */
	assert_int_equal(shmt__store_add(h, st, sh, hash, "old", 3, "x", 1, 1),
	    0);
	shmt__unlock(&sh->ds_lock);
	assert_non_null(find_at(h, hash, "old", buf, sizeof(buf)));
	put_at(h, hash, "new", "v");
	assert_string_equal(find_at(h, hash, "new", buf, sizeof(buf)), "v");
	assert_null(find_at(h, hash, "old", buf, sizeof(buf)));
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_int_equal(ds.items, 1);
	assert_int_equal(ds.used, 0);
	assert_int_equal(ds.expirations, 1);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* Every bucket: each item's tag is in the filter, and an empty chain has
 * an empty filter.  How many items were seen. */
static uint64_t
filters_hold(shmt_t *h)
{
	const struct shmt_store *st = h->dict;
	uint64_t items = 0;

	for (uint32_t i = 0; i < st->shards; i++) {
		struct shmt_shard *sh = shard_at(st, i);
		struct shmt_bucket *bk = shard_index(st, sh);

		for (uint64_t b = 0; b < st->nbuckets; b++) {
			struct shmt_item *it;
			struct chain c;
			uint64_t n = 0;

			chain_start(&c, st, sh, b);
			while ((it = chain_item(&c)) != NULL) {
				uint32_t bits = tag_bits(link_tag(c.lv));
				uint64_t hash = key_hash(h, item_key(it),
				    lens_klen(c.lens));

				assert_int_equal(link_tag(c.lv), hash_tag(hash));
				if ((bk[b].bk_filter & bits) != bits)
					fail_msg("shard %u bucket %" PRIu64
					    ": filter %#x lacks tag %#x", i, b,
					    bk[b].bk_filter, link_tag(c.lv));
				n++;
				chain_next(&c, it);
			}
			assert_false(c.cut);
			if (n == 0 && bk[b].bk_filter != 0)
				fail_msg("shard %u bucket %" PRIu64 ": empty, "
				    "filter %#x", i, b, bk[b].bk_filter);
			items += n;
		}
	}
	return items;
}

/* Random sets (some with TTLs), deletes and gets of a small key space
 * that overfills the dictionary (eviction on), the clock moving on: after
 * every round the filters hold, every get agrees with a model of the keys
 * that were set and not deleted (an absent one may have been evicted or
 * expired), and the check finds nothing. */
static void
test_filters_hold(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	uint64_t seed = tu_seed("test_filters_hold"), rs = seed | 1;
	enum { KEYS = 12000 };
	static uint32_t val_of[KEYS];   /* 0: not set or deleted */
	char seg[128], key[32], val[1024], got[1024];
	shmt_t *h;

	(void)state;
	memset(val_of, 0, sizeof(val_of));
	h = lay_open(seg, sizeof(seg), 1);
	/* Which keys share a chain, and so which are evicted, follows the
	 * seed too: its own stream, so the operations stay as they were. */
	{
		uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(h, &ss);
	}
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 4000; i++) {
			uint64_t r = tu_rand(&rs);
			uint32_t k = (uint32_t)(r % KEYS), op = (r >> 20) % 8;
			size_t klen = (size_t)snprintf(key, sizeof(key),
			    "k%u", k), vlen;

			if (op < 4) {
				uint32_t v = (uint32_t)(r >> 32) | 1;
				size_t len = sizeof(v) + (r >> 40) % 600;

				memset(val, 'a' + (int)(v % 26), len);
				memcpy(val, &v, sizeof(v));
				assert_int_equal(shmt_set(h, key, klen, val,
				    len, op == 0 ? 1 + (r >> 50) % 50 : 0), 0);
				val_of[k] = v;
			} else if (op < 6) {
				int rc = shmt_del(h, key, klen);

				assert_true(rc == 0 || rc == -ENOENT);
				val_of[k] = 0;
			} else {
				int rc = shmt_get(h, key, klen, got,
				    sizeof(got), &vlen);

				if (rc == 0) {
					uint32_t v;

					assert_int_not_equal(val_of[k], 0);
					memcpy(&v, got, sizeof(v));
					assert_int_equal(v, val_of[k]);
				} else {
					assert_int_equal(rc, -ENOENT);
				}
			}
			clk.now += 1000000;     /* 1 ms a call */
		}
		filters_hold(h);
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
	}
	/* Expiry by housekeeping resets what it walks, too. */
	clk.now += 3600ULL * 1000000000ULL;
	assert_true(shmt_housekeep(h, NULL) >= 0);
	filters_hold(h);
	{
		shmt_dict_stat_t ds;

		assert_int_equal(shmt_dict_stat(h, &ds), 0);
		printf("# seed %" PRIu64 ": %" PRIu64 " items at the end, %"
		    PRIu64 " evictions, %" PRIu64 " expirations\n", seed,
		    filters_hold(h), ds.evictions, ds.expirations);
		/* The run went through both ways items leave. */
		assert_true(ds.evictions > 0);
		assert_true(ds.expirations > 0);
	}
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A clock that counts its reads. */
struct counting_clock {
	shmt_time_t now;
	unsigned reads;
};

static shmt_time_t
counting_read(void *ctx)
{
	struct counting_clock *c = ctx;

	c->reads++;
	return c->now;
}

/* One read of the clock per get (found or not, analyzer on), set, add,
 * replace and incr, with and without a TTL. */
static void
test_one_clock_read(void **state)
{
	struct counting_clock clk = { .now = 5000000000ULL, .reads = 0 };
	char seg[128], buf[32];
	int64_t sum;
	size_t vlen;
	shmt_t *h;

	(void)state;
	h = lay_open(seg, sizeof(seg), 1);
	assert_int_equal(shmt_set_clock(h, counting_read, &clk), 0);
#define ONCE(call, want) do { \
		clk.reads = 0; \
		assert_int_equal((call), (want)); \
		assert_int_equal(clk.reads, 1); \
	} while (0)
	ONCE(shmt_set(h, "a", 1, "1", 1, 0), 0);
	ONCE(shmt_set(h, "a", 1, "2", 1, 60000), 0);
	ONCE(shmt_add(h, "b", 1, "3", 1, 60000), 0);
	ONCE(shmt_replace(h, "b", 1, "4", 1, 0), 0);
	ONCE(shmt_get(h, "a", 1, buf, sizeof(buf), &vlen), 0);
	ONCE(shmt_get(h, "zz", 2, buf, sizeof(buf), &vlen), -ENOENT);
	ONCE(shmt_incr(h, "n", 1, 5, &sum), 0);
	ONCE(shmt_incr(h, "n", 1, 5, &sum), 0);
	assert_int_equal(sum, 10);
#undef ONCE
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_tag_collision, tu_sweep),
		cmocka_unit_test_teardown(test_slot_expired_taken, tu_sweep),
		cmocka_unit_test_teardown(test_filters_hold, tu_sweep),
		cmocka_unit_test_teardown(test_one_clock_read, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
