/* SPDX-License-Identifier: MIT */
/*
 * Per-client limiters: every client gets the seed's limit of its own (a
 * model per client, call for call), a full table throttles and counts "table
 * full" but never over-grants, and an entry is reclaimed only once none of
 * its uses is in flight, so a reclaim never resets a live limit.
 */
#include "atomic128.h"
#include "clients.h"
#include "limiter.h"
#include "test_limiter_util.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TC_CLIENTS 6
#define TC_CHURN 24

static struct {
	char seg[96];
	shmt_t *h;
	struct tu_clock clk;
	struct tl_throttle m[TC_CLIENTS];
	struct tl_exact ex[TC_CHURN];
} tc_g;

static int
tc_setup(void **state)
{
	tu_segname(tc_g.seg, sizeof(tc_g.seg), "client");
	if (shmt_create(tc_g.seg, NULL, &tc_g.h) != 0)
		return -1;
	tc_g.clk.now = 0;
	return shmt_set_clock(tc_g.h, tu_clock_read, &tc_g.clk);
}

static int
tc_teardown(void **state)
{
	int c;

	for (c = 0; c < TC_CLIENTS; c++)
		tl_throttle_free(&tc_g.m[c]);
	for (c = 0; c < TC_CHURN; c++)
		tl_exact_free(&tc_g.ex[c]);
	shmt_close(tc_g.h);
	tc_g.h = NULL;
	return shmt_unlink(tc_g.seg) == 0 ? 0 : -1;
}

static int
tc_use(const char *client, shmt_time_t t)
{
	tc_g.clk.now = t;
	return shmt_try_use(tc_g.h, "pc", client, strlen(client));
}

/* Independent limits: a seed model per client agrees on every call while
 * the table has room for all of them. */
static void
test_client_models(void **state)
{
	shmt_limit_t lim = { .limit = 7, .window_ns = 1000, .slack_ns = 130,
		.slack_uses = 3, .per_client = 1, .client_capacity = 8 };
	struct tl_throttle *m = tc_g.m;
	uint64_t seed = tu_seed("test_client_models"), rs = seed;
	uint64_t ops = (uint64_t)(200000 * tu_scale()), i, free_sum;
	shmt_limiter_stat_t st;
	char id[32];
	int c, want, got;

	assert_int_equal(shmt_limiter_define(tc_g.h, "pc", &lim), 0);
	for (c = 0; c < TC_CLIENTS; c++)
		assert_int_equal(tl_throttle_init(&m[c], 7, 1000, 130, 3), 0);
	for (i = 0; i < ops; i++) {
		uint64_t r = tu_rand(&rs);

		c = (int)(r % TC_CLIENTS);
		if ((r >> 8) % 4 == 0)
			tc_g.clk.now += (r >> 16) % 300;
		/* Ids that differ in one byte, with a NUL inside. */
		memset(id, 'i', sizeof(id));
		id[3] = '\0';
		id[20] = (char)c;
		want = tl_throttle_try(&m[c], tc_g.clk.now);
		got = shmt_try_use(tc_g.h, "pc", id, sizeof(id));
		if (got != want)
			fail_msg("seed %" PRIu64 " call %" PRIu64 " client %d at "
			    "%" PRIu64 ": model %d, library %d", seed, i, c,
			    tc_g.clk.now, want, got);
	}
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_true(st.clients_in_use <= 8);
	assert_int_equal(st.denied_table_full, 0);
	free_sum = 0;
	for (c = 0; c < TC_CLIENTS; c++)
		free_sum += m[c].free;
	assert_int_equal(st.in_flight, 7 * TC_CLIENTS - free_sum);
}

/*
 * A grant releases what is due before it takes: the entry's word after it
 * is the one the general loop writes, on the fast path's terms too.  One
 * client, limit 10 per window 100, slack 10, buckets of 2: two uses at 0
 * (bucket 1, closed at 10, due at 110), one at 109 (bucket 2, closes at
 * 119).  At 110 bucket 1 is due and bucket 2 still takes uses: the grant
 * releases bucket 1's two uses, then takes one, leaving 2 in flight.
 */
static void
test_grant_releases_due_first(void **state)
{
	shmt_limit_t lim = { .limit = 10, .window_ns = 100, .slack_ns = 10,
		.slack_uses = 2, .per_client = 1, .client_capacity = 1 };
	struct shmt_client *e;
	struct shmt_lim *row;
	struct shmt_w w;

	(void)state;
	assert_int_equal(shmt_limiter_define(tc_g.h, "pc", &lim), 0);
	assert_int_equal(tc_use("c", 0), 1);
	assert_int_equal(tc_use("c", 0), 1);
	assert_int_equal(tc_use("c", 109), 1);
	row = tu_row_of(tc_g.h, "pc");
	assert_non_null(row);
	e = (struct shmt_client *)(tu_arena(tc_g.h) + row->lm_clients_off);
	shmt__load128(&e->ce_w, w.w);
	assert_int_equal(SHMT_W_INFLIGHT(w), 3);
	assert_int_equal(SHMT_W_NSEALED(w), 1);
	assert_int_equal(tc_use("c", 110), 1);
	shmt__load128(&e->ce_w, w.w);
	assert_int_equal(SHMT_W_INFLIGHT(w), 2);
	assert_int_equal(SHMT_W_NSEALED(w), 0);
	assert_int_equal(SHMT_W_COUNT(w), 2);
}

/*
 * Capacity 2, limit 3 per window 100 (slack 10, one use per bucket).
 * B takes one use at 0 (due at 110); A takes all three at 50 (due at 160).
 * C at 50 finds the table full.  At 110 B's use is due: C gets B's entry,
 * while A, whose uses are still in flight, keeps its entry and stays
 * throttled; D and B then find the table full.
 */
static void
test_table_full_and_reclaim(void **state)
{
	shmt_limit_t lim = { .limit = 3, .window_ns = 100, .slack_ns = 10,
		.slack_uses = 1, .per_client = 1, .client_capacity = 2 };
	shmt_limiter_stat_t st;
	int i;

	assert_int_equal(shmt_limiter_define(tc_g.h, "pc", &lim), 0);
	assert_int_equal(tc_use("B", 0), 1);
	for (i = 0; i < 3; i++)
		assert_int_equal(tc_use("A", 50), 1);
	assert_int_equal(tc_use("A", 50), 0);
	assert_int_equal(tc_use("C", 50), 0);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.denied_table_full, 1);
	assert_int_equal(st.clients_in_use, 2);

	assert_int_equal(tc_use("C", 110), 1);
	assert_int_equal(tc_use("A", 110), 0);
	assert_int_equal(tc_use("D", 110), 0);
	assert_int_equal(tc_use("B", 110), 0);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.denied_table_full, 3);
	assert_int_equal(st.clients_in_use, 2);

	/* A's uses come back at 160, in its own entry. */
	assert_int_equal(tc_use("A", 160), 1);
	assert_int_equal(tc_use("A", 160), 1);
	assert_int_equal(tc_use("A", 160), 1);
	assert_int_equal(tc_use("A", 160), 0);
	assert_int_equal(tc_use("D", 200), 0);
	/* Everything is due by 300: D and B get entries again. */
	assert_int_equal(tc_use("D", 300), 1);
	assert_int_equal(tc_use("B", 300), 1);
	assert_int_equal(tc_use("A", 300), 0);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.denied_table_full, 5);
}

/* Housekeeping reclaims the idle entries of a per-client table in rate
 * mode as in buckets mode: once every client's arrival time has passed,
 * none is in use, and a client still limited keeps its entry. */
static void
test_housekeep_reclaims_rate_mode(void **state)
{
	shmt_limit_t lim = { .mode = SHMT_MODE_GCRA, .limit = 2,
		.window_ns = 100, .burst = 2, .per_client = 1,
		.client_capacity = 8 };
	shmt_limiter_stat_t st;

	(void)state;
	assert_int_equal(shmt_limiter_define(tc_g.h, "pc", &lim), 0);
	assert_int_equal(tc_use("A", 0), 1);
	assert_int_equal(tc_use("B", 0), 1);
	assert_int_equal(tc_use("C", 0), 1);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, 3);
	/* At 40 every arrival time (50) is ahead: nothing is idle. */
	tc_g.clk.now = 40;
	assert_true(shmt_housekeep(tc_g.h, NULL) >= 0);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, 3);
	/* C asks again at 60 (arrival time 110); A and B are idle. */
	assert_int_equal(tc_use("C", 60), 1);
	tc_g.clk.now = 100;
	assert_true(shmt_housekeep(tc_g.h, NULL) >= 2);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, 1);
	/* C's limit was kept: one more now, then refused. */
	assert_int_equal(tc_use("C", 100), 1);
	assert_int_equal(tc_use("C", 100), 0);
	tc_g.clk.now = 1000;
	assert_true(shmt_housekeep(tc_g.h, NULL) >= 1);
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, 0);
}

/* Many more clients than entries, random times: a client is never granted
 * more than the seed would grant it, and whenever the library throttles a
 * client the model would grant, the table was full. */
static void
test_churn_never_overgrants(void **state)
{
	enum { N = TC_CHURN };
	shmt_limit_t lim = { .limit = 4, .window_ns = 500, .slack_ns = 50,
		.slack_uses = 2, .per_client = 1, .client_capacity = 5 };
	struct tl_exact *ex = tc_g.ex;
	uint64_t seed = tu_seed("test_churn_never_overgrants"), rs = seed;
	uint64_t ops = (uint64_t)(100000 * tu_scale()), i, grants = 0;
	uint64_t table_full = 0;
	shmt_limiter_stat_t st;
	char id[16];
	int c, got;

	/* Which entry a client reclaims (the first free one from its home)
	 * decides which clients keep theirs and so when the table is full:
	 * the secret follows the seed too, its own stream, so the calls
	 * drawn stay as they were. */
	{
		uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(tc_g.h, &ss);
	}
	assert_int_equal(shmt_limiter_define(tc_g.h, "pc", &lim), 0);
	for (c = 0; c < N; c++)
		assert_int_equal(tl_exact_init(&ex[c], 4, 500), 0);
	for (i = 0; i < ops; i++) {
		uint64_t r = tu_rand(&rs);

		c = (int)(r % N);
		tc_g.clk.now += (r >> 8) % 40;
		snprintf(id, sizeof(id), "client-%d", c);
		got = tc_use(id, tc_g.clk.now);
		assert_true(got == 0 || got == 1);
		if (got == 1) {
			/* An exact window admits it, or it is an over-grant. */
			if (tl_exact_try(&ex[c], tc_g.clk.now) != 1)
				fail_msg("seed %" PRIu64 " call %" PRIu64 ": "
				    "client %d over its limit at %" PRIu64,
				    seed, i, c, tc_g.clk.now);
			grants++;
		}
	}
	assert_int_equal(shmt_limiter_stat(tc_g.h, "pc", &st), 0);
	table_full = st.denied_table_full;
	printf("# %" PRIu64 " calls, %" PRIu64 " grants, %" PRIu64
	    " table full\n", ops, grants, table_full);
	assert_true(grants > 0);
	assert_true(table_full > 0);
	assert_true(st.clients_in_use <= 5);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_client_models,
		    tc_setup, tc_teardown),
		cmocka_unit_test_setup_teardown(test_grant_releases_due_first,
		    tc_setup, tc_teardown),
		cmocka_unit_test_setup_teardown(test_housekeep_reclaims_rate_mode,
		    tc_setup, tc_teardown),
		cmocka_unit_test_setup_teardown(test_table_full_and_reclaim,
		    tc_setup, tc_teardown),
		cmocka_unit_test_setup_teardown(test_churn_never_overgrants,
		    tc_setup, tc_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
