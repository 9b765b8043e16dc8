/* SPDX-License-Identifier: MIT */
/*
 * `shmthrottle client`, run as a real process: a segment made by `create
 * -c` from a config that names overrides lists them (text and JSON), set
 * and clear change what the library then decides, `try` says when a rule
 * decided, and every error has its documented exit code.
 *
 * Usage: test_cli_client CLI-BINARY.
 */
#include "testutil.h"

#include "test_cli_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void
test_client_commands(void **state)
{
	char seg[96], conf[64];
	struct tc_run r;
	shmt_client_rule_t rule;
	shmt_limiter_stat_t ls;
	json_error_t e;
	json_t *j, *o;
	shmt_t *h;
	int fd;

	(void)state;
	tu_segname(seg, sizeof(seg), "cliov");
	tc_track(seg);
	snprintf(conf, sizeof(conf), "/tmp/shmt-test-cliov-XXXXXX");
	assert_true((fd = mkstemp(conf)) >= 0);
	close(fd);
	tu_write_text(conf, "[limiter api]\nlimit = 10\nwindow = 1h\n"
	    "per_client = yes\ncapacity = 64\noverrides = 3\n"
	    "override = gold limit=100\noverride = bad-bot deny\n"
	    "[limiter shared]\nlimit = 10\nwindow = 1h\n");
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "-c", conf));
	tc_run_free(&r);
	unlink(conf);

	tc_expect_run(&r, 0, ARGV("-s", seg, "client", "list", "api"));
	assert_string_equal(r.out, "limit=100    gold\ndeny         bad-bot\n");
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", seg, "try", "api", "bad-bot"));
	assert_non_null(strstr(r.out, "throttled: the client's deny rule"));
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", seg, "client", "set", "api", "vip",
	    "allow"));
	assert_string_equal(r.out, "api: client vip: allow\n");
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "try", "api", "vip"));
	assert_non_null(strstr(r.out, "granted: the client's allow rule"));
	tc_run_free(&r);
	/* The table holds 3. */
	tc_expect_run(&r, 1, ARGV("-s", seg, "client", "set", "api", "more",
	    "limit=4"));
	assert_non_null(strstr(r.err, "override table is full"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "client", "clear", "api",
	    "gold"));
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", seg, "client", "clear", "api",
	    "gold"));
	assert_non_null(strstr(r.out, "had no override"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "client", "set", "api",
	    "silver", "limit=2"));
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "client", "list",
	    "api"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "limiter")),
	    "api");
	o = json_object_get(j, "overrides");
	assert_int_equal(json_array_size(o), 3);
	/* Table order: silver took the entry gold left. */
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(o, 0), "client")), "silver");
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(o, 0), "rule")), "limit");
	assert_int_equal(json_integer_value(json_object_get(
	    json_array_get(o, 0), "limit")), 2);
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(o, 1), "rule")), "deny");
	assert_true(json_is_null(json_object_get(json_array_get(o, 1),
	    "limit")));
	json_decref(j);
	tc_run_free(&r);

	/* What the CLI set, the library decides by. */
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_client_get(h, "api", "silver", 6, &rule), 1);
	assert_int_equal(rule.limit, 2);
	assert_int_equal(shmt_try_use(h, "api", "silver", 6), 1);
	assert_int_equal(shmt_try_use(h, "api", "silver", 6), 1);
	assert_int_equal(shmt_try_use(h, "api", "silver", 6), 0);
	assert_int_equal(shmt_try_use(h, "api", "gold", 4), 1);
	assert_int_equal(shmt_try_use(h, "api", "vip", 3), 1);
	assert_int_equal(shmt_try_use(h, "api", "bad-bot", 7), 0);
	shmt_close(h);

	/* The limiters view counts the rules set and what they decided:
	 * vip allowed by `try` and by the call above, bad-bot denied.  Each
	 * call took an entry of the client table; silver's and gold's hold
	 * uses for the hour and bad-bot's was taken last, but vip's holds
	 * none (an allow takes no use), so a later claim whose probe path
	 * passes it (the keyed hash decides, with the segment's random
	 * secret) may reclaim it: 3 or 4 entries live.  Whichever it is, the
	 * view says exactly what the library counts. */
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_limiter_stat(h, "api", &ls), 0);
	shmt_close(h);
	assert_true(ls.clients_in_use == 3 || ls.clients_in_use == 4);
	tc_expect_run(&r, 0, ARGV("-s", seg, "limiters"));
	{
		const char *c = strstr(r.out, "clients ");
		unsigned n = 0, cap = 0;

		assert_non_null(c);
		assert_int_equal(sscanf(c, "clients %u/%u", &n, &cap), 2);
		assert_int_equal(cap, 64);
		assert_int_equal(n, ls.clients_in_use);
	}
	assert_non_null(strstr(r.out, "/64, overrides 3/3 (allowed 2, "
	    "denied 2)"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "limiters"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	o = NULL;
	for (size_t i = 0; i < json_array_size(json_object_get(j,
	    "limiters")); i++) {
		json_t *l = json_array_get(json_object_get(j, "limiters"), i);

		if (strcmp(json_string_value(json_object_get(l, "name")),
		    "api") == 0)
			o = json_object_get(l, "clients");
	}
	assert_non_null(o);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(o,
	    "overrides"), "capacity")), 3);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(o,
	    "overrides"), "in_use")), 3);
	assert_int_equal(json_integer_value(json_object_get(o,
	    "allowed_by_rule")), 2);
	assert_int_equal(json_integer_value(json_object_get(o,
	    "denied_by_rule")), 2);
	assert_int_equal(json_integer_value(json_object_get(o, "in_use")),
	    ls.clients_in_use);
	json_decref(j);
	tc_run_free(&r);

	/* Errors. */
	tc_expect_run(&r, 2, ARGV("-s", seg, "client", "set", "api", "x",
	    "limit=0"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", seg, "client", "set", "api", "x",
	    "sometimes"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", seg, "client", "frob", "api"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", seg, "client", "list"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", seg, "client", "set", "shared", "x",
	    "deny"));
	assert_non_null(strstr(r.err, "not per client"));
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", seg, "client", "list", "nope"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "client", "--help"));
	assert_non_null(strstr(r.out, "client set LIMITER CLIENT RULE"));
	tc_run_free(&r);
}

/* What --json says matches the exit codes and the bytes: clear without a
 * rule exits 1 as without --json; a deny rule's "never" is null, not a
 * wrapped 0; a client id that is not UTF-8 is written in base64 by try,
 * client set, client clear and reset, as client list writes it. */
static void
test_client_json(void **state)
{
	static const char bin[] = "\xff\xfe" "bot";
	char seg[96], conf[64];
	struct tc_run r;
	json_error_t e;
	json_t *j;
	int fd;

	(void)state;
	tu_segname(seg, sizeof(seg), "clijs");
	tc_track(seg);
	snprintf(conf, sizeof(conf), "/tmp/shmt-test-clijs-XXXXXX");
	assert_true((fd = mkstemp(conf)) >= 0);
	close(fd);
	tu_write_text(conf, "[limiter api]\nlimit = 10\nwindow = 1h\n"
	    "per_client = yes\ncapacity = 64\noverrides = 4\n"
	    "override = bad-bot deny\noverride = vip allow\n");
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "-c", conf));
	tc_run_free(&r);
	unlink(conf);

	tc_expect_run(&r, 1, ARGV("-s", seg, "--json", "client", "clear",
	    "api", "nobody"));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_true(json_is_false(json_object_get(j, "cleared")));
	json_decref(j);
	tc_run_free(&r);

	tc_expect_run(&r, 1, ARGV("-s", seg, "--json", "try", "api",
	    "bad-bot"));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_int_equal(json_integer_value(json_object_get(j, "limit")), 0);
	assert_true(json_is_null(json_object_get(j, "retry_after_ns")));
	assert_true(json_is_null(json_object_get(j, "retry_after_s")));
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "try", "api", "vip"));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_true(json_is_null(json_object_get(j, "remaining")));
	assert_int_equal(json_integer_value(json_object_get(j,
	    "retry_after_s")), 0);
	json_decref(j);
	tc_run_free(&r);

	/* "\xff\xfe" "bot" in base64. */
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "try", "api", bin));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_string_equal(json_string_value(json_object_get(j, "client")),
	    "//5ib3Q=");
	assert_string_equal(json_string_value(json_object_get(j,
	    "client_encoding")), "base64");
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "client", "set", "api",
	    bin, "deny"));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_string_equal(json_string_value(json_object_get(j, "client")),
	    "//5ib3Q=");
	assert_string_equal(json_string_value(json_object_get(j,
	    "client_encoding")), "base64");
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "client", "clear",
	    "api", bin));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_string_equal(json_string_value(json_object_get(j, "client")),
	    "//5ib3Q=");
	assert_true(json_is_true(json_object_get(j, "cleared")));
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "reset", "api", bin));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_string_equal(json_string_value(json_object_get(j, "client")),
	    "//5ib3Q=");
	json_decref(j);
	tc_run_free(&r);
	/* A UTF-8 id stays a plain string, with no encoding field. */
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "client", "set", "api",
	    "gold", "limit=5"));
	assert_non_null(j = json_loads(r.out, 0, &e));
	assert_string_equal(json_string_value(json_object_get(j, "client")),
	    "gold");
	assert_null(json_object_get(j, "client_encoding"));
	json_decref(j);
	tc_run_free(&r);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_client_commands, tc_cleanup),
		cmocka_unit_test_teardown(test_client_json, tc_cleanup),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s CLI-BINARY\n", argv[0]);
		return 2;
	}
	tc_bin = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
