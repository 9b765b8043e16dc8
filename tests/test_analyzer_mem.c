/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's memory is fixed at creation: a segment that saw 10 keys
 * and one that saw ten million distinct keys (a quarter of that, times
 * SHMT_STRESS_SCALE, in sanitizer builds) report the same memory_bytes,
 * the same "analyzer" region and the same object size, and after the ten
 * million the guarantee still holds: the one key over the threshold is
 * listed with bounds around its exact count, the total is exact, the error
 * within total / (probe + 1), and no distinct key is listed.  Also: per-
 * client limiter calls feed the analyzer as SHMT_HOT_CLIENT keys exactly
 * when analyzer_clients is set.
 */
#include "test_analyzer_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AM_KEYS 10000000.0

struct am_size {
	uint64_t memory, region, object;
};

static void
am_size(shmt_t *h, struct am_size *s)
{
	shmt_segment_stat_t st;
	shmt_top_info_t info;
	int found = 0;

	assert_true(shmt_top_keys(h, NULL, 0, &info) >= 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	for (uint32_t k = 0; k < st.nregions; k++)
		if (strcmp(st.regions[k].name, "analyzer") == 0) {
			s->region = st.regions[k].size;
			found++;
		}
	assert_int_equal(found, 1);
	s->memory = info.memory_bytes;
	s->object = st.size;
}

static shmt_t *
am_create(char *seg, size_t cap, struct tu_clock *clk, int clients)
{
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.dict_bytes = 4ULL << 20;
	cfg.dict_shards = 2;
	cfg.analyzer_clients = (uint32_t)clients;
	tu_segname(seg, cap, "anmem");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, clk), 0);
	return h;
}

static void
test_memory(void **state)
{
	struct tu_clock clk = { 7 * 86400 * TA_SEC };
	struct am_size few, many, mid;
	uint64_t n = (uint64_t)(AM_KEYS * ta_scale()), hot = 0, w, W, t0;
	char seg1[96], seg2[96], key[32], v[8];
	shmt_hotkey_t out[4];
	shmt_top_info_t info;
	shmt_t *h1, *h2;
	size_t vlen;
	int rc;

	(void)state;
	h1 = am_create(seg1, sizeof(seg1), &clk, 0);
	for (int j = 0; j < 100; j++) {
		int len = snprintf(key, sizeof(key), "few-%d", j % 10);

		assert_int_equal(shmt_get(h1, key, (size_t)len, v, sizeof(v),
		    &vlen), -ENOENT);
	}
	assert_true(shmt_top_keys(h1, out, 4, &info) >= 0);
	assert_int_equal(info.total, 100);
	am_size(h1, &few);

	h2 = am_create(seg2, sizeof(seg2), &clk, 0);
	assert_true(shmt_top_keys(h2, NULL, 0, &info) == 0);
	W = info.window_ns;
	w = info.subwindow_ns;
	t0 = clk.now = (clk.now / w + 1) * w;
	/* One request in eight is for "hot"; the others are all distinct. */
	for (uint64_t j = 0; j < n; j++) {
		int len = j % 8 == 0 ? snprintf(key, sizeof(key), "hot") :
		    snprintf(key, sizeof(key), "m%010" PRIu64, j);

		clk.now = t0 + j * ((W - w) / n);
		hot += j % 8 == 0;
		rc = shmt_get(h2, key, (size_t)len, v, sizeof(v), &vlen);
		assert_int_equal(rc, -ENOENT);
		if (j == n / 2) {
			am_size(h2, &mid);
			assert_memory_equal(&mid, &few, sizeof(few));
		}
	}
	clk.now = t0 + W - 1;
	rc = shmt_top_keys(h2, out, 4, &info);
	am_size(h2, &many);
	printf("# %" PRIu64 " requests, %" PRIu64 " distinct keys: memory %"
	    PRIu64 ", region %" PRIu64 ", object %" PRIu64 " (10 keys: %" PRIu64
	    ", %" PRIu64 ", %" PRIu64 "); total %" PRIu64 ", error %" PRIu64
	    ", listed %d\n", n, n - hot, many.memory, many.region, many.object,
	    few.memory, few.region, few.object, info.total, info.error, rc);
	assert_memory_equal(&many, &few, sizeof(few));
	assert_int_equal(few.memory, 1ULL << 20);
	assert_true(few.region >= few.memory);
	assert_int_equal(info.total, n);
	assert_true(info.error * (info.probe + 1) <= info.total);
	assert_true(info.certified);
	assert_int_equal(rc, 1);
	assert_int_equal(out[0].klen, 3);
	assert_memory_equal(out[0].key, "hot", 3);
	assert_true(out[0].lower <= hot && hot <= out[0].upper);
	shmt_close(h1);
	shmt_close(h2);
	assert_int_equal(shmt_unlink(seg1), 0);
	assert_int_equal(shmt_unlink(seg2), 0);
}

/* Client ids and dictionary keys, counted apart. */
enum { AC_HOT, AC_LONG, AC_DICT, AC_COLD, AC_N = AC_COLD + 200 };

static void
ac_run(int clients)
{
	struct tu_clock clk = { 3 * 86400 * TA_SEC };
	shmt_limit_t lim = { .limit = 1000, .window_ns = TA_SEC,
	    .slack_ns = TA_SEC / 10, .slack_uses = 100, .per_client = 1,
	    .client_capacity = 512 };
	uint64_t count[AC_N] = { 0 }, gets = 0, uses = 0, rs;
	char seg[96], longid[100], id[32], v[8];
	shmt_hotkey_t out[64];
	shmt_top_info_t info;
	shmt_t *h;
	size_t vlen;
	int rc, seen[AC_N] = { 0 };

	rs = tu_seed(clients ? "test_analyzer_clients on" :
	    "test_analyzer_clients off");
	h = am_create(seg, sizeof(seg), &clk, clients);
	tu_secret(h, &rs);
	assert_int_equal(shmt_limiter_define(h, "per-client", &lim), 0);
	memset(longid, 'c', sizeof(longid));
	for (int j = 0; j < 20000; j++) {
		uint64_t u = tu_rand(&rs) % 100;
		int which = u < 30 ? AC_HOT : u < 50 ? AC_LONG :
		    u < 65 ? AC_DICT : AC_COLD + (int)(tu_rand(&rs) % 200);

		clk.now += 1000;
		if (which == AC_DICT) {
			rc = shmt_get(h, "client-hot", 10, v, sizeof(v), &vlen);
			assert_int_equal(rc, -ENOENT);
			gets++;
		} else if (which == AC_LONG) {
			assert_true(shmt_try_use(h, "per-client", longid,
			    sizeof(longid)) >= 0);
			uses++;
		} else {
			int len = which == AC_HOT ?
			    snprintf(id, sizeof(id), "client-hot") :
			    snprintf(id, sizeof(id), "client-%d", which);

			assert_true(shmt_try_use(h, "per-client", id,
			    (size_t)len) >= 0);
			uses++;
		}
		count[which]++;
	}
	rc = shmt_top_keys(h, out, 64, &info);
	printf("# analyzer_clients %d: %" PRIu64 " gets, %" PRIu64 " uses, "
	    "total %" PRIu64 ", %d listed\n", clients, gets, uses, info.total,
	    rc);
	assert_int_equal(info.total, clients ? gets + uses : gets);
	assert_true(rc >= 0 && rc <= 64);
	for (int k = 0; k < rc; k++) {
		const shmt_hotkey_t *o = &out[k];
		int which = -1;

		if (o->kind == SHMT_HOT_DICT && o->klen == 10 &&
		    memcmp(o->key, "client-hot", 10) == 0) {
			which = AC_DICT;
		} else if (o->kind == SHMT_HOT_CLIENT && o->klen == 10 &&
		    memcmp(o->key, "client-hot", 10) == 0) {
			which = AC_HOT;
		} else if (o->kind == SHMT_HOT_CLIENT &&
		    o->klen == sizeof(longid) && o->kept > 0 &&
		    o->kept < o->klen && memcmp(o->key, longid, o->kept) == 0) {
			which = AC_LONG;
		} else {
			printf("# listed: kind %d, klen %u, kept %u, lower %"
			    PRIu64 "\n", o->kind, o->klen, o->kept, o->lower);
			fail();
		}
		assert_true(which >= 0);
		assert_false(seen[which]);
		seen[which] = 1;
		assert_true(o->lower <= count[which] &&
		    count[which] <= o->upper);
	}
	/* 30%, 20% and 15% of the requests with clients; the dictionary key
	 * alone is every request without. */
	assert_true(seen[AC_DICT]);
	assert_int_equal(seen[AC_HOT], clients);
	assert_int_equal(seen[AC_LONG], clients);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

static void
test_clients(void **state)
{
	(void)state;
	ac_run(1);
	ac_run(0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clients),
		cmocka_unit_test(test_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
