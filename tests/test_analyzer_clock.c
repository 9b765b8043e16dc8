/* SPDX-License-Identifier: MIT */
/*
 * The analyzer on the system's clocks (no shmt_set_clock): a get is
 * counted at CLOCK_MONOTONIC_COARSE, never ahead of it, so its stamp (its
 * stripe's latest time, am_tmax) is at or before a coarse read taken right
 * after the get; and a query, which reads CLOCK_MONOTONIC, finds every get
 * made before it inside its exact window (a stamp is never after the
 * query's now), with the hot key listed and the answer certified.
 */
#include "test_analyzer_util.h"

#include "analyzer.h"
#include "an_sum.h"
#include "segment.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CK_GETS 20000

static uint64_t
ck_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A fixed secret for H's segment, before anything is counted: which keys
 * share a counter group (and so whether an answer is certified) is then
 * the same on every run. */
static void
ck_secret(shmt_t *h)
{
	uint64_t ss = 0x243f6a8885a308d3ULL;

	tu_secret(h, &ss);
}

/* The latest time any summary of H counted at. */
static uint64_t
ck_latest_stamp(shmt_t *h)
{
	const struct shmt_an *an = h->an;
	uint64_t t = 0;

	for (uint32_t r = 0; r < an->rings; r++)
		for (uint32_t p = 0; p < an->stripes; p++) {
			uint64_t v = __atomic_load_n(&sum_at(an, r, p)->am_tmax,
			    __ATOMIC_RELAXED);

			if (v > t)
				t = v;
		}
	return t;
}

static void
test_gets_count_at_the_coarse_clock(void **state)
{
	char seg[96], key[32], v[16];
	shmt_config_t cfg;
	shmt_t *h;
	size_t vlen;
	int late = 0;

	(void)state;
	tu_segname(seg, sizeof(seg), "anclock");
	shmt_config_init(&cfg);
	shmt_unlink(seg);
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	ck_secret(h);
	assert_non_null(h->an);
	for (int i = 0; i < CK_GETS; i++) {
		uint64_t after, stamp;
		int l = snprintf(key, sizeof(key), "k%d", i % 50);

		(void)shmt_get(h, key, (size_t)l, v, sizeof(v), &vlen);
		after = ck_coarse_ns();
		stamp = ck_latest_stamp(h);
		assert_true(stamp != 0);
		if (stamp > after)
			late++;
	}
	/* With CLOCK_MONOTONIC stamps, nearly every one is past the coarse
	 * clock read after it (it lags by up to a tick). */
	printf("stamps after the coarse clock read that followed: %d of %d\n",
	    late, CK_GETS);
	assert_int_equal(late, 0);
	tu_close_unlink(h, seg);
}

static void
test_query_holds_every_earlier_get(void **state)
{
	char seg[96], key[32], v[16];
	shmt_hotkey_t out[16];
	shmt_top_info_t info;
	shmt_config_t cfg;
	shmt_t *h;
	size_t vlen;
	int n, found = 0;

	(void)state;
	tu_segname(seg, sizeof(seg), "anclockq");
	shmt_config_init(&cfg);
	shmt_unlink(seg);
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	ck_secret(h);
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 400; i++) {
			int l = i % 2 == 0 ? snprintf(key, sizeof(key), "hot") :
			    snprintf(key, sizeof(key), "cold%d-%d", round, i);

			(void)shmt_get(h, key, (size_t)l, v, sizeof(v), &vlen);
		}
		/* Every get so far lies in the last minute (the segment is
		 * younger than that), and each was stamped before this query
		 * read its clock. */
		n = shmt_top_keys(h, out, 16, &info);
		assert_true(n >= 1);
		assert_int_equal(info.total, (uint64_t)(round + 1) * 400);
		assert_int_equal(info.total_window, info.total);
		assert_true(info.certified);
		found = 0;
		for (int k = 0; k < n && k < 16; k++)
			if (out[k].klen == 3 && memcmp(out[k].key, "hot", 3) == 0) {
				found = 1;
				assert_true(out[k].lower <= (uint64_t)(round + 1) * 200);
				assert_true(out[k].upper >= (uint64_t)(round + 1) * 200);
			}
		assert_true(found);
	}
	tu_close_unlink(h, seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_gets_count_at_the_coarse_clock,
		    tu_sweep),
		cmocka_unit_test_teardown(test_query_holds_every_earlier_get,
		    tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
