/* SPDX-License-Identifier: MIT */
/*
 * The dictionary's limits: values of 1 MiB stored and read back byte for
 * byte; keys of exactly 1024 bytes, one under and one over, and of 0 bytes;
 * values of exactly 1 MiB, one under and one over; after every refused call
 * nothing has changed.  A get into a short buffer says how long the value
 * is.  And the promise of shmt_dict_stat: whenever value_room says N bytes
 * fit, a set of N bytes under a fresh key succeeds, at every fill level of a
 * dictionary filled with random items (eviction off, so nothing makes room).
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024 * 1024)

/* Random bytes to take values from at random offsets: far cheaper than
 * drawing every value afresh, which matters under the sanitizers. */
#define NOISE (2 * MIB)

struct dl {
	shmt_t *h;
	char seg[96];
	unsigned char *a, *b;   /* two buffers of 1 MiB + 1 */
	unsigned char *noise;
};

static void fill_random(uint64_t *rs, unsigned char *p, size_t len);

static void
dl_open(struct dl *d, uint64_t dict_bytes, uint32_t shards)
{
	shmt_config_t cfg;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = dict_bytes;
	cfg.dict_shards = shards;
	cfg.dict_eviction = 0;
	cfg.counters_bytes = 256ULL << 10;
	cfg.counters_shards = 1;
	tu_segname(d->seg, sizeof(d->seg), "dlimits");
	assert_int_equal(shmt_create(d->seg, &cfg, &d->h), 0);
	d->a = malloc(MIB + 1);
	d->b = malloc(MIB + 1);
	d->noise = malloc(NOISE);
	assert_non_null(d->noise);
	fill_random(&(uint64_t){ 0x243f6a8885a308d3ULL }, d->noise, NOISE);
	assert_non_null(d->a);
	assert_non_null(d->b);
}

static void
dl_close(struct dl *d)
{
	shmt_close(d->h);
	assert_int_equal(shmt_unlink(d->seg), 0);
	free(d->a);
	free(d->b);
	free(d->noise);
}

static void
fill_random(uint64_t *rs, unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = tu_rand(rs);

		memcpy(p + i, &w, len - i < 8 ? len - i : 8);
	}
}

/* LEN random bytes: a window of the noise at a place drawn from RS. */
static const unsigned char *
noise_at(struct dl *d, uint64_t r, size_t len)
{
	return d->noise + r % (NOISE - len + 1);
}

/* KEY must read back as exactly WANT (LEN bytes). */
static void
dl_expect(struct dl *d, const void *key, size_t klen, const void *want,
    size_t len)
{
	size_t vlen = (size_t)-1;

	assert_int_equal(shmt_get(d->h, key, klen, d->b, MIB + 1, &vlen), 0);
	assert_int_equal(vlen, len);
	assert_memory_equal(d->b, want, len);
}

static void
dl_absent(struct dl *d, const void *key, size_t klen)
{
	size_t vlen;

	assert_int_equal(shmt_get(d->h, key, klen, d->b, MIB + 1, &vlen),
	    -ENOENT);
}

/* What a refused call must leave as it was: the counts of the stat. */
static void
dl_same_stat(struct dl *d, const shmt_dict_stat_t *before)
{
	shmt_dict_stat_t now;

	assert_int_equal(shmt_dict_stat(d->h, &now), 0);
	assert_int_equal(now.items, before->items);
	assert_int_equal(now.used, before->used);
	assert_int_equal(now.value_room, before->value_room);
}

/* Values of 1 MiB, one byte less, and the small ones, under keys of 1,
 * 1023 and 1024 bytes: each read back byte for byte, then overwritten by
 * another value of the same size (which needs room for both at once). */
static void
test_big_values(void **state)
{
	static const size_t sizes[] = { MIB, MIB - 1, 0, 1, MIB / 2 + 1 };
	static const size_t klens[] = { 1, SHMT_KEY_MAX - 1, SHMT_KEY_MAX };
	uint64_t rs = tu_seed("test_big_values");
	unsigned char key[SHMT_KEY_MAX];
	struct dl d;

	dl_open(&d, 16ULL << 20, 4);
	for (size_t k = 0; k < sizeof(klens) / sizeof(klens[0]); k++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			fill_random(&rs, key, klens[k]);
			fill_random(&rs, d.a, sizes[s]);
			assert_int_equal(shmt_set(d.h, key, klens[k], d.a,
			    sizes[s], 0), 0);
			dl_expect(&d, key, klens[k], d.a, sizes[s]);
			fill_random(&rs, d.a, sizes[s]);
			assert_int_equal(shmt_set(d.h, key, klens[k], d.a,
			    sizes[s], 0), 0);
			dl_expect(&d, key, klens[k], d.a, sizes[s]);
			assert_int_equal(shmt_del(d.h, key, klens[k]), 0);
			dl_absent(&d, key, klens[k]);
		}
	}
	dl_close(&d);
}

/* Every call that takes a key refuses 0 bytes (-EINVAL) and 1025 bytes
 * (-E2BIG).  The 1025-byte key starts with a stored 1024-byte key, so a
 * call that cut the key short would change that one: it must not. */
static void
test_key_limits(void **state)
{
	uint64_t rs = tu_seed("test_key_limits"), cnt;
	unsigned char key[SHMT_KEY_MAX + 1], val[16] = "old value";
	size_t lens[] = { 0, SHMT_KEY_MAX + 1, SIZE_MAX };
	shmt_dict_stat_t before;
	int64_t res;
	size_t vlen;
	struct dl d;

	dl_open(&d, 4ULL << 20, 2);
	fill_random(&rs, key, sizeof(key));
	/* The edges that are allowed: 1024 and 1023 bytes. */
	assert_int_equal(shmt_set(d.h, key, SHMT_KEY_MAX, val, 9, 0), 0);
	assert_int_equal(shmt_set(d.h, key, SHMT_KEY_MAX - 1, "x", 1, 0), 0);
	dl_expect(&d, key, SHMT_KEY_MAX, val, 9);
	dl_expect(&d, key, SHMT_KEY_MAX - 1, "x", 1);
	assert_int_equal(shmt_hit(d.h, key, SHMT_KEY_MAX, &cnt), 0);
	assert_int_equal(cnt, 1);
	assert_int_equal(shmt_dict_stat(d.h, &before), 0);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		int want = lens[i] == 0 ? -EINVAL : -E2BIG;

		assert_int_equal(shmt_set(d.h, key, lens[i], "n", 1, 0), want);
		assert_int_equal(shmt_add(d.h, key, lens[i], "n", 1, 0), want);
		assert_int_equal(shmt_replace(d.h, key, lens[i], "n", 1, 0),
		    want);
		assert_int_equal(shmt_del(d.h, key, lens[i]), want);
		assert_int_equal(shmt_incr(d.h, key, lens[i], 1, &res), want);
		assert_int_equal(shmt_get(d.h, key, lens[i], d.b, 16, &vlen),
		    want);
		assert_int_equal(shmt_hit(d.h, key, lens[i], &cnt), want);
		dl_same_stat(&d, &before);
		dl_expect(&d, key, SHMT_KEY_MAX, val, 9);
		dl_expect(&d, key, SHMT_KEY_MAX - 1, "x", 1);
	}
	/* The counter of the 1024-byte key was not touched either. */
	assert_int_equal(shmt_hit(d.h, key, SHMT_KEY_MAX, &cnt), 0);
	assert_int_equal(cnt, 2);
	dl_close(&d);
}

/* Values of 1 MiB + 1 are refused with -EMSGSIZE by set, add and replace,
 * on a present key and on an absent one, and nothing changes; exactly
 * 1 MiB and one byte less are stored. */
static void
test_value_limits(void **state)
{
	uint64_t rs = tu_seed("test_value_limits");
	shmt_dict_stat_t before;
	struct dl d;

	dl_open(&d, 16ULL << 20, 4);
	fill_random(&rs, d.a, MIB + 1);
	assert_int_equal(shmt_set(d.h, "present", 7, "old", 3, 0), 0);
	assert_int_equal(shmt_dict_stat(d.h, &before), 0);
	for (int ttl = 0; ttl <= 1; ttl++) {
		assert_int_equal(shmt_set(d.h, "present", 7, d.a, MIB + 1,
		    (uint64_t)ttl * 5), -EMSGSIZE);
		assert_int_equal(shmt_add(d.h, "present", 7, d.a, MIB + 1,
		    (uint64_t)ttl * 5), -EMSGSIZE);
		assert_int_equal(shmt_replace(d.h, "present", 7, d.a,
		    MIB + 1, (uint64_t)ttl * 5), -EMSGSIZE);
		assert_int_equal(shmt_set(d.h, "absent", 6, d.a, MIB + 1,
		    (uint64_t)ttl * 5), -EMSGSIZE);
		assert_int_equal(shmt_add(d.h, "absent", 6, d.a, MIB + 1,
		    (uint64_t)ttl * 5), -EMSGSIZE);
		assert_int_equal(shmt_set(d.h, "absent", 6, d.a, SIZE_MAX, 0),
		    -EMSGSIZE);
		/* A value pointer of NULL with a length is refused too. */
		assert_int_equal(shmt_set(d.h, "absent", 6, NULL, 1, 0),
		    -EINVAL);
		dl_same_stat(&d, &before);
		dl_expect(&d, "present", 7, "old", 3);
		dl_absent(&d, "absent", 6);
	}
	assert_int_equal(shmt_set(d.h, "present", 7, d.a, MIB, 0), 0);
	dl_expect(&d, "present", 7, d.a, MIB);
	assert_int_equal(shmt_replace(d.h, "present", 7, d.a + 1, MIB - 1, 0),
	    0);
	dl_expect(&d, "present", 7, d.a + 1, MIB - 1);
	assert_int_equal(shmt_add(d.h, "absent", 6, d.a, MIB, 0), 0);
	dl_expect(&d, "absent", 6, d.a, MIB);
	dl_close(&d);
}

/* A get into a buffer one byte short answers -ERANGE with the length
 * needed and leaves the buffer alone; a buffer of 0 bytes (NULL) asks for
 * the length only; an exact buffer reads the value.  A walk into a short
 * key buffer answers -ERANGE, with the key's length, and stays put. */
static void
test_short_buffer(void **state)
{
	static const size_t sizes[] = { 1, 100, 4096, MIB };
	uint64_t rs = tu_seed("test_short_buffer"), cursor = 0, c2;
	unsigned char key[SHMT_KEY_MAX];
	size_t vlen, klen;
	struct dl d;

	dl_open(&d, 8ULL << 20, 2);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];

		fill_random(&rs, d.a, n);
		assert_int_equal(shmt_set(d.h, "k", 1, d.a, n, 0), 0);
		memset(d.b, 0x5a, n);
		vlen = 0;
		assert_int_equal(shmt_get(d.h, "k", 1, d.b, n - 1, &vlen),
		    -ERANGE);
		assert_int_equal(vlen, n);
		for (size_t j = 0; j < n; j++)
			if (d.b[j] != 0x5a)
				fail_msg("byte %zu of a short buffer changed", j);
		vlen = 0;
		assert_int_equal(shmt_get(d.h, "k", 1, NULL, 0, &vlen), -ERANGE);
		assert_int_equal(vlen, n);
		assert_int_equal(shmt_get(d.h, "k", 1, d.b, n, &vlen), 0);
		assert_int_equal(vlen, n);
		assert_memory_equal(d.b, d.a, n);
	}
	/* An empty value fits a buffer of nothing. */
	assert_int_equal(shmt_set(d.h, "k", 1, "", 0, 0), 0);
	vlen = 7;
	assert_int_equal(shmt_get(d.h, "k", 1, NULL, 0, &vlen), 0);
	assert_int_equal(vlen, 0);
	assert_int_equal(shmt_del(d.h, "k", 1), 0);
	/* The walk: the only key is 1024 bytes long. */
	fill_random(&rs, key, sizeof(key));
	assert_int_equal(shmt_set(d.h, key, sizeof(key), "v", 1, 0), 0);
	klen = 0;
	assert_int_equal(shmt_dict_next(d.h, &cursor, d.b, SHMT_KEY_MAX - 1,
	    &klen), -ERANGE);
	assert_int_equal(klen, SHMT_KEY_MAX);
	c2 = cursor;
	assert_int_equal(shmt_dict_next(d.h, &cursor, d.b, 0, &klen), -ERANGE);
	assert_int_equal(cursor, c2);
	assert_int_equal(shmt_dict_next(d.h, &cursor, d.b, SHMT_KEY_MAX,
	    &klen), 1);
	assert_int_equal(klen, SHMT_KEY_MAX);
	assert_memory_equal(d.b, key, SHMT_KEY_MAX);
	assert_int_equal(shmt_dict_next(d.h, &cursor, d.b, SHMT_KEY_MAX,
	    &klen), 0);
	dl_close(&d);
}

/* ---- The room promise ------------------------------------------------ */

/* The fill: each item's key is 8 bytes of its number, its value a window
 * of the noise placed by its seed, so the end can check that nothing
 * moved. */
struct fill_item {
	uint64_t seed;
	size_t len;
};

/* A fill item's length: mostly small, sometimes large, so the heap
 * fragments the way a real one does. */
static size_t
fill_len(uint64_t *rs)
{
	uint64_t c = tu_rand(rs) % 100;

	if (c < 60)
		return tu_rand(rs) % 2048;
	if (c < 95)
		return tu_rand(rs) % 32768;
	return tu_rand(rs) % (256 * 1024);
}

/* Check the promise once: read value_room, set that many bytes and a
 * random smaller number under fresh keys (of 1024 bytes, the worst case,
 * and of 1 byte), then delete them again.  Returns value_room. */
static uint64_t
check_room(struct dl *d, uint64_t *rs, uint64_t level)
{
	unsigned char key[SHMT_KEY_MAX];
	shmt_dict_stat_t ds;
	uint64_t room;

	assert_int_equal(shmt_dict_stat(d->h, &ds), 0);
	room = ds.value_room;
	assert_true(room <= SHMT_VALUE_MAX);
	assert_int_equal(ds.evictions, 0);
	for (int i = 0; i < 3 && room > 0; i++) {
		size_t n = i == 0 ? room : (size_t)(tu_rand(rs) % room) + 1;
		size_t klen = i == 2 ? 1 : SHMT_KEY_MAX;
		const unsigned char *val;
		int rc;

		/* A fresh key: the fill keys are 8 bytes, so no other
		 * length is ever present. */
		fill_random(rs, key, klen);
		if (klen == 1)
			key[0] = 0xfe;
		val = noise_at(d, tu_rand(rs), n);
		rc = shmt_set(d->h, key, klen, val, n, 0);
		if (rc != 0)
			fail_msg("fill level %" PRIu64 " (%" PRIu64 " of %"
			    PRIu64 " bytes used): value_room %" PRIu64
			    " but a set of %zu bytes under a %zu-byte key "
			    "answered %d", level, ds.used, ds.bytes, room, n,
			    klen, rc);
		dl_expect(d, key, klen, val, n);
		assert_int_equal(shmt_del(d->h, key, klen), 0);
	}
	return room;
}

/* Add one fill item, smaller and smaller until one fits; 0 when not even
 * an empty value fits any more. */
static int
add_fill(struct dl *d, uint64_t *rs, struct fill_item *f, uint64_t n)
{
	size_t len = fill_len(rs);
	uint64_t key = n;

	f->seed = tu_rand(rs);
	for (;;) {
		int rc;

		f->len = len;
		rc = shmt_set(d->h, &key, sizeof(key),
		    noise_at(d, f->seed, len), len, 0);
		if (rc == 0)
			return 1;
		assert_int_equal(rc, -ENOSPC);
		if (len == 0)
			return 0;
		len /= 4;
	}
}

static void
room_run(uint64_t dict_bytes, uint32_t shards, uint64_t seed)
{
	uint64_t rs = seed, levels = 0, full_room = 0, n = 0, room;
	struct fill_item *f = calloc(65536, sizeof(*f));
	struct dl d;

	assert_non_null(f);
	dl_open(&d, dict_bytes, shards);
	/* Which shard each fill item lands in, and so when a shard is full
	 * and how much room is left, follows the seed too: its own stream,
	 * so the items drawn stay as they were. */
	{
		uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(d.h, &ss);
	}
	for (;;) {
		room = check_room(&d, &rs, levels++);
		full_room += room == SHMT_VALUE_MAX;
		if (n == 65536 || !add_fill(&d, &rs, &f[n], n))
			break;
		n++;
	}
	/* The dictionary is full: even an empty value is refused.  Every
	 * fill item is still there, byte for byte. */
	for (uint64_t i = 0; i < n; i++)
		dl_expect(&d, &i, sizeof(i), noise_at(&d, f[i].seed, f[i].len),
		    f[i].len);
	printf("# room: %u shard(s) of %" PRIu64 " MiB: %" PRIu64 " fill "
	    "levels checked (%" PRIu64 " with room for 1 MiB), %" PRIu64
	    " items at the end, room %" PRIu64 "\n", shards,
	    dict_bytes / shards / MIB, levels, full_room, n, room);
	assert_true(full_room > 0);
	assert_true(levels > 100);
	dl_close(&d);
	free(f);
}

static void
test_value_room(void **state)
{
	uint64_t seed = tu_seed("test_value_room");

	room_run(4ULL << 20, 2, seed);
	room_run(4ULL << 20, 1, seed + 1);
	room_run(16ULL << 20, 4, seed + 2);
}


/* The segment's own limits (dict_max_key, dict_max_value), set at creation:
 * every process's set, add, replace and incr refuse a key or value over
 * them with the errors of the hard limits, and change nothing; a write with
 * TTL 0 gets dict_default_ttl_ms (seen on an injected clock). */
static void
test_creation_limits(void **state)
{
	struct tu_clock clk = { 1000000000ULL };
	char seg[96], why[256], val[64];
	shmt_config_t cfg;
	shmt_t *h, *h2;
	size_t vlen;
	int64_t r;

	(void)state;
	shmt_config_init(&cfg);
	assert_int_equal(cfg.dict_max_key, SHMT_KEY_MAX);
	assert_int_equal(cfg.dict_max_value, SHMT_VALUE_MAX);
	assert_true(cfg.dict_default_ttl_ms == 0);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = 2ULL << 20;
	cfg.dict_shards = 1;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	cfg.dict_max_key = 8;
	cfg.dict_max_value = 16;
	cfg.dict_default_ttl_ms = 1000;
	assert_int_equal(shmt_config_check(&cfg, why, sizeof(why)), 0);
	tu_segname(seg, sizeof(seg), "dlcreate");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	/* A second process's handle sees the same limits. */
	assert_int_equal(shmt_open(seg, &h2), 0);
	assert_int_equal(shmt_set_clock(h2, tu_clock_read, &clk), 0);

	assert_int_equal(shmt_set(h2, "k", 1, "0123456789abcdef", 16, 0), 0);
	assert_int_equal(shmt_set(h2, "k", 1, "0123456789abcdefg", 17, 0),
	    -EMSGSIZE);
	assert_int_equal(shmt_add(h2, "k2", 2, "0123456789abcdefg", 17, 0),
	    -EMSGSIZE);
	assert_int_equal(shmt_replace(h, "k", 1, "0123456789abcdefg", 17, 0),
	    -EMSGSIZE);
	assert_int_equal(shmt_set(h, "123456789", 9, "v", 1, 0), -E2BIG);
	assert_int_equal(shmt_add(h, "123456789", 9, "v", 1, 0), -E2BIG);
	assert_int_equal(shmt_replace(h, "123456789", 9, "v", 1, 0), -E2BIG);
	assert_int_equal(shmt_incr(h, "123456789", 9, 1, &r), -E2BIG);
	assert_int_equal(shmt_get(h, "123456789", 9, val, sizeof(val), &vlen),
	    -ENOENT);
	assert_int_equal(shmt_get(h, "k2", 2, val, sizeof(val), &vlen),
	    -ENOENT);
	assert_int_equal(shmt_get(h, "k", 1, val, sizeof(val), &vlen), 0);
	assert_true(vlen == 16 && memcmp(val, "0123456789abcdef", 16) == 0);
	assert_int_equal(shmt_set(h, "12345678", 8, "v", 1, 0), 0);
	/* A sum whose text is longer than 16 bytes is refused, the old
	 * value kept. */
	assert_int_equal(shmt_set(h, "n", 1, "999999999999999", 15, 60000), 0);
	assert_int_equal(shmt_incr(h, "n", 1, 1, &r), 0);
	assert_true(r == 1000000000000000LL);
	assert_int_equal(shmt_incr(h, "n", 1, 9000000000000000LL, &r),
	    -EMSGSIZE);
	assert_int_equal(shmt_get(h, "n", 1, val, sizeof(val), &vlen), 0);
	assert_true(vlen == 16 && memcmp(val, "1000000000000000", 16) == 0);

	/* TTL 0 means the default TTL: gone after 1 s, an explicit TTL is
	 * kept, and incr's new key gets the default too. */
	assert_int_equal(shmt_set(h, "d", 1, "x", 1, 0), 0);
	assert_int_equal(shmt_add(h, "a", 1, "x", 1, 0), 0);
	assert_int_equal(shmt_set(h, "e", 1, "x", 1, 5000), 0);
	assert_int_equal(shmt_incr(h, "c", 1, 3, &r), 0);
	clk.now += 999000000ULL;
	assert_int_equal(shmt_get(h2, "d", 1, val, sizeof(val), &vlen), 0);
	assert_int_equal(shmt_get(h2, "c", 1, val, sizeof(val), &vlen), 0);
	clk.now += 501000000ULL;
	assert_int_equal(shmt_get(h2, "d", 1, val, sizeof(val), &vlen),
	    -ENOENT);
	assert_int_equal(shmt_get(h2, "a", 1, val, sizeof(val), &vlen),
	    -ENOENT);
	assert_int_equal(shmt_get(h2, "c", 1, val, sizeof(val), &vlen),
	    -ENOENT);
	assert_int_equal(shmt_get(h2, "e", 1, val, sizeof(val), &vlen), 0);
	assert_int_equal(shmt_get(h2, "n", 1, val, sizeof(val), &vlen), 0);

	shmt_close(h2);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* shmt_config_check names the field and the rule; shmt_create refuses
 * exactly what it refuses. */
static void
test_config_check(void **state)
{
	char seg[96], why[256];
	shmt_config_t cfg;
	shmt_t *h;

	(void)state;
	shmt_config_init(&cfg);
	assert_int_equal(shmt_config_check(&cfg, why, sizeof(why)), 0);
	assert_string_equal(why, "");
	cfg.dict_bytes = 1ULL << 20;
	cfg.dict_shards = 8;
	assert_int_equal(shmt_config_check(&cfg, why, sizeof(why)), -EINVAL);
	assert_true(strncmp(why, "dict_bytes: ", 12) == 0);
	tu_segname(seg, sizeof(seg), "dlcheck");
	assert_int_equal(shmt_create(seg, &cfg, &h), -EINVAL);
	shmt_config_init(&cfg);
	cfg.dict_max_value = SHMT_VALUE_MAX + 1;
	assert_int_equal(shmt_config_check(&cfg, why, sizeof(why)), -EINVAL);
	assert_true(strncmp(why, "dict_max_value: ", 16) == 0);
	assert_int_equal(shmt_create(seg, &cfg, &h), -EINVAL);
	shmt_config_init(&cfg);
	cfg.counters_subwindows = 0;
	assert_int_equal(shmt_config_check(&cfg, NULL, 0), -EINVAL);
	assert_int_equal(shmt_config_check(NULL, why, sizeof(why)), -EINVAL);
	assert_int_equal(shmt_create(seg, &cfg, &h), -EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_big_values, tu_sweep),
		cmocka_unit_test_teardown(test_key_limits, tu_sweep),
		cmocka_unit_test_teardown(test_value_limits, tu_sweep),
		cmocka_unit_test_teardown(test_short_buffer, tu_sweep),
		cmocka_unit_test_teardown(test_value_room, tu_sweep),
		cmocka_unit_test_teardown(test_creation_limits, tu_sweep),
		cmocka_unit_test_teardown(test_config_check, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
