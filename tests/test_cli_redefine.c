/* SPDX-License-Identifier: MIT */
/*
 * `shmthrottle limiter set` on a per-client limiter, run as a real process
 * on a real segment: it defines the limiter anew by a move into a new
 * generation, and a handle this process opened before follows it with
 * every client's uses in flight (a lowered limit refuses a client that
 * holds more, a bigger table keeps every client); the JSON says so; a
 * change the new segment cannot hold exits 1 with the reason and leaves
 * the limiter as it was; a key pool keeps or takes names, its uses in
 * flight carried; an exact limiter given a limit above its log gets a
 * larger log by a move, its uses in flight carried, and goes into rate
 * mode by one.
 *
 * Usage: test_cli_redefine CLI-BINARY.
 */
#include "testutil.h"

#include "test_cli_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static shmt_limiter_stat_t
stat_of(shmt_t *h, const char *name)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(h, name, &st), 0);
	return st;
}

static void
test_limiter_set_per_client(void **state)
{
	char seg[96], conf[64];
	struct tc_run r;
	json_error_t e;
	json_t *j;
	shmt_t *h;
	char name[16];
	int fd, n;

	(void)state;
	tu_segname(seg, sizeof(seg), "clird");
	tc_track(seg);
	snprintf(conf, sizeof(conf), "/tmp/shmt-test-clird-XXXXXX");
	assert_true((fd = mkstemp(conf)) >= 0);
	close(fd);
	tu_write_text(conf, "[limiter pc]\nlimit = 10\nwindow = 1h\n"
	    "slack_time = 1s\nslack_uses = 2\nper_client = yes\n"
	    "capacity = 16\n"
	    "[limiter pool]\nkeys = k1, k2\nuses_per_key = 2\nwindow = 1h\n"
	    "slack_time = 1s\nslack_uses = 1\n");
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "-c", conf));
	tc_run_free(&r);
	unlink(conf);

	/* A worker: this process, its handle opened before every change. */
	assert_int_equal(shmt_open(seg, &h), 0);
	for (n = 0; n < 6; n++)
		assert_int_equal(shmt_try_use(h, "pc", "a", 1), 1);
	assert_int_equal(shmt_try_use(h, "pc", "b", 1), 1);

	tc_expect_run(&r, 0, ARGV("-s", seg, "limiter", "set", "pc", "limit=4",
	    "capacity=64"));
	assert_non_null(strstr(r.out, "limiter pc: limit 4 per 1h, slack 1s/2; "
	    "7 uses in flight kept\n"));
	assert_non_null(strstr(r.out, "defined anew by a move into a new "
	    "generation: 2 clients carried, capacity 64"));
	tc_run_free(&r);
	/* The worker follows: a holds 6 of its new 4, b 1. */
	assert_int_equal(shmt_try_use(h, "pc", "a", 1), 0);
	for (n = 0; n < 10 && shmt_try_use(h, "pc", "b", 1) == 1; n++)
		;
	assert_int_equal(n, 3);
	assert_int_equal(stat_of(h, "pc").client_capacity, 64);
	assert_int_equal(stat_of(h, "pc").in_flight, 10);

	/* Raised: a gets the difference at once. */
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "limiter", "set", "pc",
	    "limit=8", "overrides=8"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "moved")));
	assert_int_equal(json_integer_value(json_object_get(j, "limit")), 8);
	assert_int_equal(json_integer_value(json_object_get(j, "in_flight")),
	    10);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j,
	    "clients"), "overrides")), 8);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j,
	    "clients"), "in_use")), 2);
	json_decref(j);
	tc_run_free(&r);
	for (n = 0; n < 10 && shmt_try_use(h, "pc", "a", 1) == 1; n++)
		;
	assert_int_equal(n, 2);

	/* Refused: two clients holding uses cannot share a table of one;
	 * the limiter keeps its definition and its uses. */
	tc_expect_run(&r, 1, ARGV("-s", seg, "limiter", "set", "pc",
	    "capacity=1"));
	assert_non_null(strstr(r.err, "cannot change"));
	if (strstr(r.err, "finds no free entry") == NULL)
		fail_msg("%s", r.err);
	tc_run_free(&r);
	assert_int_equal(stat_of(h, "pc").client_capacity, 64);
	assert_int_equal(stat_of(h, "pc").limit, 8);
	assert_int_equal(stat_of(h, "pc").in_flight, 12);
	/* capacity is a per-client limiter's key only. */
	tc_expect_run(&r, 2, ARGV("-s", seg, "limiter", "set", "pool",
	    "capacity=4"));
	tc_run_free(&r);
	/* A key pool: names kept, or given; uses in flight carried. */
	assert_int_equal(shmt_next_key(h, "pool", name, sizeof(name)), 2);
	assert_string_equal(name, "k1");
	tc_expect_run(&r, 0, ARGV("-s", seg, "limiter", "set", "pool",
	    "uses_per_key=3", "window=2h"));
	assert_non_null(strstr(r.out, "limiter pool: limit 6 per 2h, slack "
	    "1s/1; 2 uses in flight kept\n"));
	assert_non_null(strstr(r.out, "2 key names x 3 uses per key"));
	tc_run_free(&r);
	for (n = 0; n < 4; n++) {
		assert_int_equal(shmt_next_key(h, "pool", name, sizeof(name)), 2);
		assert_string_equal(name, n % 2 ? "k2" : "k1");
	}
	assert_int_equal(shmt_next_key(h, "pool", name, sizeof(name)), 0);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "limiter", "set", "pool",
	    "keys=k1,k2,k3,k4"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "moved")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j,
	    "keys"), "count")), 4);
	assert_int_equal(json_integer_value(json_object_get(j, "limit")), 12);
	json_decref(j);
	tc_run_free(&r);
	/* k1 and k2 hold three each: k3 and k4 are counted three each too,
	 * and the pool of 12 is full. */
	assert_int_equal(shmt_next_key(h, "pool", name, sizeof(name)), 0);
	assert_int_equal(stat_of(h, "pool").in_flight, 12);
	tc_expect_run(&r, 0, ARGV("-s", seg, "check"));
	tc_run_free(&r);
	shmt_close(h);
}

/* An exact limiter given a limit above its log: the move gives it a
 * larger log, the uses in flight carried; a change into buckets mode is
 * refused and leaves it as it was; into rate mode it moves. */
static void
test_limiter_set_exact(void **state)
{
	char seg[96], conf[64];
	struct tc_run r;
	json_error_t e;
	json_t *j;
	shmt_t *h;
	int fd, n;

	(void)state;
	tu_segname(seg, sizeof(seg), "clirx");
	tc_track(seg);
	snprintf(conf, sizeof(conf), "/tmp/shmt-test-clirx-XXXXXX");
	assert_true((fd = mkstemp(conf)) >= 0);
	close(fd);
	tu_write_text(conf, "[limiter ex]\nmode = exact\nlimit = 4\n"
	    "window = 1h\n");
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "-c", conf));
	tc_run_free(&r);
	unlink(conf);

	assert_int_equal(shmt_open(seg, &h), 0);
	for (n = 0; n < 3; n++)
		assert_int_equal(shmt_try_use_key(h, "ex"), 1);
	tc_expect_run(&r, 0, ARGV("-s", seg, "limiter", "set", "ex",
	    "limit=10"));
	assert_non_null(strstr(r.out, "limiter ex: limit 10 per 1h; 3 uses "
	    "in flight kept\n"));
	assert_non_null(strstr(r.out, "defined anew by a move into a new "
	    "generation: a log of 10 records"));
	tc_run_free(&r);
	/* The worker follows: the three carried count, seven more fit. */
	for (n = 0; n < 20 && shmt_try_use_key(h, "ex") == 1; n++)
		;
	assert_int_equal(n, 7);
	assert_int_equal(stat_of(h, "ex").in_flight, 10);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "limiter", "set", "ex",
	    "limit=12"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "moved")));
	assert_int_equal(json_integer_value(json_object_get(j, "limit")), 12);
	assert_int_equal(json_integer_value(json_object_get(j, "in_flight")),
	    10);
	json_decref(j);
	tc_run_free(&r);
	/* Lowered: in place, no move. */
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "limiter", "set", "ex",
	    "limit=11"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_false(json_is_true(json_object_get(j, "moved")));
	json_decref(j);
	tc_run_free(&r);
	assert_int_equal(shmt_try_use_key(h, "ex"), 1);
	assert_int_equal(shmt_try_use_key(h, "ex"), 0);
	/* Another mode than rate: refused, nothing changes. */
	tc_expect_run(&r, 1, ARGV("-s", seg, "limiter", "set", "ex",
	    "mode=buckets", "slack_time=1m", "slack_uses=1"));
	assert_non_null(strstr(r.err, "mode"));
	tc_run_free(&r);
	assert_int_equal(stat_of(h, "ex").mode, SHMT_MODE_EXACT);
	/* Into rate mode by a move: the 11 uses in flight keep it full
	 * (their release, an hour on, is past now + 11 x 5 min). */
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "limiter", "set", "ex",
	    "mode=rate", "limit=12", "burst=4"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "moved")));
	assert_string_equal(json_string_value(json_object_get(j, "mode")),
	    "gcra");
	assert_true(json_integer_value(json_object_get(j, "in_flight")) >= 11);
	json_decref(j);
	tc_run_free(&r);
	assert_int_equal(shmt_try_use_key(h, "ex"), 0);
	assert_int_equal(stat_of(h, "ex").mode, SHMT_MODE_GCRA);
	tc_expect_run(&r, 0, ARGV("-s", seg, "check"));
	tc_run_free(&r);
	shmt_close(h);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_limiter_set_per_client,
		    tc_cleanup),
		cmocka_unit_test_teardown(test_limiter_set_exact, tc_cleanup),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s CLI-BINARY\n", argv[0]);
		return 2;
	}
	tc_bin = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
