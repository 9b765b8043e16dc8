/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's name table under collisions, with the segment's secret
 * known to the test: keys are chosen whose names share a place with a hot
 * key's, and the hot key must still be listed with its bytes, whether the
 * colder keys come after it, before it, or in a later sub-window of the
 * span.  A key that reached a higher level keeps its name; one of the span
 * that is gone no longer holds its place once the span has moved on.
 */
#include "test_analyzer_util.h"

#include "analyzer.h"
#include "hash.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define NM_COLD 12

struct nm {
	struct tu_clock clk;
	char seg[96];
	shmt_t *h;
	uint32_t hot0, hot1;     /* the hot key's two places */
	char cold[NM_COLD][32];  /* keys sharing one of them */
	int cold_len[NM_COLD];
};

static uint64_t
nm_hash(shmt_t *h, const char *key, size_t len)
{
	return shmt__hash64(&h->key, key, len) & ~SHMT_AN_CLIENT_BIT;
}

static void
nm_open(struct nm *t)
{
	shmt_config_t cfg;
	uint32_t i0, i1;
	uint64_t ss = tu_seed("test_analyzer_names");
	int found = 0;

	t->clk.now = 5 * 86400 * TA_SEC;
	shmt_config_init(&cfg);
	cfg.dict_bytes = 4ULL << 20;
	cfg.dict_shards = 2;
	tu_segname(t->seg, sizeof(t->seg), "annames");
	assert_int_equal(shmt_create(t->seg, &cfg, &t->h), 0);
	/* The secret follows the seed, before the places are computed: the
	 * cold keys chosen, and which counter groups they share with the hot
	 * key, are then the same on every run of one seed. */
	tu_secret(t->h, &ss);
	assert_int_equal(shmt_set_clock(t->h, tu_clock_read, &t->clk), 0);
	assert_non_null(t->h->an);
	assert_true(t->h->an->names >= 2);
	shmt__an_name_slots(t->h->an->names, nm_hash(t->h, "hot", 3),
	    &t->hot0, &t->hot1);
	assert_int_not_equal(t->hot0, t->hot1);
	/* Half the cold keys share the hot key's first place, half its
	 * second; of each half, every other key by its own first place (so
	 * that it goes there when both its places are free or stale), the
	 * others by their second. */
	for (uint32_t n = 0; found < NM_COLD && n < 50000000U; n++) {
		char key[32];
		int len = snprintf(key, sizeof(key), "cold-%" PRIu32, n);
		uint32_t want = found < NM_COLD / 2 ? t->hot0 : t->hot1;

		shmt__an_name_slots(t->h->an->names,
		    nm_hash(t->h, key, (size_t)len), &i0, &i1);
		if ((found % 2 == 0 ? i0 : i1) != want || i0 == i1)
			continue;
		memcpy(t->cold[found], key, (size_t)len + 1);
		t->cold_len[found++] = len;
	}
	assert_int_equal(found, NM_COLD);
}

static void
nm_close(struct nm *t)
{
	shmt_close(t->h);
	assert_int_equal(shmt_unlink(t->seg), 0);
}

static void
nm_get(struct nm *t, const char *key, size_t len, int times)
{
	char v[8];
	size_t vlen;

	for (int i = 0; i < times; i++) {
		t->clk.now += 1000;
		assert_int_equal(shmt_get(t->h, key, len, v, sizeof(v), &vlen),
		    -ENOENT);
	}
}

static void
nm_cold(struct nm *t, int times)
{
	for (int k = 0; k < NM_COLD; k++)
		nm_get(t, t->cold[k], (size_t)t->cold_len[k], times);
}

/* The listed entry of KEY: 1 with its bytes, 0 listed without them;
 * fails when KEY is not listed at all. */
static int
nm_named(struct nm *t, const char *key, size_t len)
{
	shmt_hotkey_t out[64];
	shmt_top_info_t info;
	uint64_t hash = nm_hash(t->h, key, len);
	int rc = shmt_top_keys(t->h, out, 64, &info);

	assert_true(rc > 0);
	for (int k = 0; k < rc; k++) {
		if (out[k].hash != hash)
			continue;
		assert_int_equal(out[k].kind, SHMT_HOT_DICT);
		if (out[k].klen == 0)
			return 0;
		assert_int_equal(out[k].klen, len);
		assert_int_equal(out[k].kept, len);
		assert_memory_equal(out[k].key, key, len);
		return 1;
	}
	printf("# %.*s not listed (%d listed)\n", (int)len, key, rc);
	fail();
	return -1;
}

/* A key named PREFIX-<n> whose first place is WANT (its second another). */
static int
nm_fresh(struct nm *t, uint32_t want, const char *prefix, char *key,
    size_t cap)
{
	uint32_t i0 = 0, i1 = 0;
	int len = 0;

	for (uint32_t n = 0; n < 50000000U; n++) {
		len = snprintf(key, cap, "%s-%" PRIu32, prefix, n);
		shmt__an_name_slots(t->h->an->names,
		    nm_hash(t->h, key, (size_t)len), &i0, &i1);
		if (i0 == want && i1 != want)
			return len;
	}
	fail();
	return -1;
}

static struct shmt_an_name *
nm_place(struct nm *t, uint32_t i)
{
	return (struct shmt_an_name *)(t->h->an->base + t->h->an->names_off) +
	    i;
}

/* Colder keys after the hot key, in both its places: each reaches the
 * level where its name is put, and more, but stays below the hot key's. */
static void
test_colder_after(void **state)
{
	struct nm t;

	(void)state;
	nm_open(&t);
	nm_get(&t, "hot", 3, 200);
	nm_cold(&t, 40);
	assert_int_equal(nm_named(&t, "hot", 3), 1);
	nm_close(&t);
}

/* Colder keys first: the hot key takes a place back as its level rises. */
static void
test_colder_before(void **state)
{
	struct nm t;

	(void)state;
	nm_open(&t);
	nm_cold(&t, 20);
	nm_get(&t, "hot", 3, 200);
	nm_cold(&t, 20);
	assert_int_equal(nm_named(&t, "hot", 3), 1);
	nm_close(&t);
}

/* The hot key's sub-window is older but still in the span: colder keys
 * of the newest sub-window leave its name; once the span has moved past
 * its sub-window, they may take its place (and it is no longer listed). */
static void
test_colder_later(void **state)
{
	struct nm t;
	uint64_t w;

	(void)state;
	nm_open(&t);
	w = t.h->an->w;
	nm_get(&t, "hot", 3, 200);
	t.clk.now += w;
	nm_cold(&t, 40);
	assert_int_equal(nm_named(&t, "hot", 3), 1);
	/* Past the span: the hot key's places rank below any put, so a new
	 * key whose first place is one of them goes there. */
	t.clk.now += t.h->an->window + 2 * w;
	assert_int_equal(nm_place(&t, t.hot0)->an_hash, nm_hash(t.h, "hot", 3));
	for (int p = 0; p < 2; p++) {
		uint32_t want = p == 0 ? t.hot0 : t.hot1;
		const struct shmt_an_name *e = nm_place(&t, want);
		char key[32];
		int len = nm_fresh(&t, want, "late", key, sizeof(key));

		nm_get(&t, key, (size_t)len, 8);
		assert_true(e->an_hash == nm_hash(t.h, key, (size_t)len));
	}
	nm_close(&t);
}

/* The hot key's entry holds its hash with a check word that is not its
 * own (what an interleaved or killed writer leaves): it reads as absent,
 * and the key's next level writes it whole again. */
static void
test_torn_entry(void **state)
{
	struct shmt_an_name *e;
	struct nm t;

	(void)state;
	nm_open(&t);
	e = nm_place(&t, t.hot0);
	nm_get(&t, "hot", 3, 8);
	assert_int_equal(e->an_hash, nm_hash(t.h, "hot", 3));
	e->an_check ^= 2;
	assert_int_equal(nm_named(&t, "hot", 3), 0);
	nm_get(&t, "hot", 3, 8);
	assert_int_equal(nm_named(&t, "hot", 3), 1);
	nm_close(&t);
}

/* A restore on another clock moves the summaries by K sub-windows; the
 * ranks move with them, modulo 4096, their levels kept. */
static void
test_rank_shift(void **state)
{
	struct shmt_an_name *e;
	struct nm t;
	uint16_t r;

	(void)state;
	nm_open(&t);
	e = nm_place(&t, t.hot0);
	nm_get(&t, "hot", 3, 64);
	r = e->an_rank;
	assert_int_equal(r & 15, 3);   /* 64 = 8 << 3 */
	shmt__an_names_shift(t.h->an, 5);
	assert_int_equal(((e->an_rank >> 4) - (r >> 4)) & 0xfff, 5);
	assert_int_equal(e->an_rank & 15, 3);
	shmt__an_names_shift(t.h->an, -5);
	assert_int_equal(e->an_rank, r);
	shmt__an_names_shift(t.h->an, -4097);
	assert_int_equal(((r >> 4) - (e->an_rank >> 4)) & 0xfff, 1);
	/* Moved back by 4097 = one sub-window in 12 bits, with the clock
	 * one sub-window on: the name is still live at its level, so a
	 * colder key sharing its place does not take it. */
	shmt__an_names_shift(t.h->an, 4097);
	assert_int_equal(e->an_rank, r);
	t.clk.now += t.h->an->w;
	nm_cold(&t, 40);
	assert_int_equal(nm_named(&t, "hot", 3), 1);
	/* A rank one sub-window ahead of the writers (put by one whose
	 * clock is ahead) is live too: a new key whose first place it is
	 * does not take it. */
	e = nm_place(&t, t.hot0);
	assert_int_equal(e->an_hash, nm_hash(t.h, "hot", 3));
	shmt__an_names_shift(t.h->an, 2);
	{
		char key[32];
		int len = nm_fresh(&t, t.hot0, "ahead", key, sizeof(key));

		nm_get(&t, key, (size_t)len, 40);
	}
	assert_int_equal(e->an_hash, nm_hash(t.h, "hot", 3));
	nm_close(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_colder_after),
		cmocka_unit_test(test_colder_before),
		cmocka_unit_test(test_colder_later),
		cmocka_unit_test(test_torn_entry),
		cmocka_unit_test(test_rank_shift),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
