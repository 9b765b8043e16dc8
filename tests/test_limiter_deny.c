/* SPDX-License-Identifier: MIT */
/*
 * Denials at the limit of a shared buckets limiter, named and resolved, with
 * one bucket or a sealed one the oldest in use, on a key pool and per
 * client: the
 * reason counted (exhausted before the window has passed the oldest use,
 * slack after), the answer once the oldest bucket is due, and a denial
 * never decided on a word that changed since this thread last saw it
 * (another process released and granted in between: this one is granted).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000ULL
#define S 1000000000ULL

static const shmt_limit_t lim = { .limit = 4, .window_ns = S,
	.slack_ns = 100 * MS, .slack_uses = 4 };

struct dfix {
	char seg[96];
	shmt_t *h;
	struct tu_clock clk;
};

static void
df_init(struct dfix *f, const char *tag)
{
	memset(f, 0, sizeof(*f));
	f->clk.now = 1000 * S;
	tu_segname(f->seg, sizeof(f->seg), tag);
	assert_int_equal(shmt_create(f->seg, NULL, &f->h), 0);
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);
	assert_int_equal(shmt_limiter_define(f->h, "d", &lim), 0);
}


/* One grant attempt, by name or through R. */
static int
try_one(struct dfix *f, shmt_limiter_t *r)
{
	return r != NULL ? shmt_limiter_try(r, NULL, 0) :
	    shmt_try_use_key(f->h, "d");
}

static void
check_stat(struct dfix *f, uint64_t grants, uint64_t exhausted,
    uint64_t slack)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(f->h, "d", &st), 0);
	assert_int_equal(st.grants, grants);
	assert_int_equal(st.denied_exhausted, exhausted);
	assert_int_equal(st.denied_slack, slack);
	assert_int_equal(st.denied_ring_full, 0);
}

static void
reasons(const char *tag, int resolved)
{
	shmt_limiter_t *r = NULL;
	struct dfix f;
	uint64_t t0;

	df_init(&f, tag);
	if (resolved)
		assert_int_equal(shmt_limiter_open(f.h, "d", &r), 0);
	t0 = f.clk.now;
	for (int i = 0; i < 4; i++)
		assert_int_equal(try_one(&f, r), 1);
	/* Full, the window not yet past the bucket's first use: exhausted,
	 * several times in a row (each after the last denial's word). */
	for (int i = 0; i < 3; i++) {
		f.clk.now = t0 + (uint64_t)(i + 1) * 10 * MS;
		assert_int_equal(try_one(&f, r), 0);
	}
	check_stat(&f, 4, 3, 0);
	/* After the bucket closed, still inside its window. */
	f.clk.now = t0 + 500 * MS;
	assert_int_equal(try_one(&f, r), 0);
	check_stat(&f, 4, 4, 0);
	/* The window has passed the bucket's opening but not its close:
	 * the slack holds the uses back. */
	f.clk.now = t0 + S + 50 * MS;
	assert_int_equal(try_one(&f, r), 0);
	f.clk.now = t0 + S + 99 * MS;
	assert_int_equal(try_one(&f, r), 0);
	check_stat(&f, 4, 4, 2);
	/* Due at its close + window: granted again, four times. */
	f.clk.now = t0 + S + 100 * MS;
	for (int i = 0; i < 4; i++)
		assert_int_equal(try_one(&f, r), 1);
	assert_int_equal(try_one(&f, r), 0);
	check_stat(&f, 8, 5, 2);
	if (r != NULL)
		shmt_limiter_close(r);
	tu_close_unlink(f.h, f.seg);
}

static void
test_deny_reasons_named(void **state)
{
	(void)state;
	reasons("deny-named", 0);
}

static void
test_deny_reasons_resolved(void **state)
{
	(void)state;
	reasons("deny-resolved", 1);
}

/* Refusals while a sealed bucket is the oldest in use (buckets of 2 uses,
 * the second one opened after the first closed), and on a key pool (the
 * word's tag is the pool's cursor), each reason counted as above. */
static void
test_deny_sealed(void **state)
{
	shmt_limit_t l = lim;
	shmt_limiter_t *r = NULL;
	struct dfix f;
	uint64_t t0;

	(void)state;
	l.slack_uses = 2;
	df_init(&f, "deny-sealed");
	assert_int_equal(shmt_limiter_define(f.h, "s", &l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "s", &r), 0);
	t0 = f.clk.now;
	assert_int_equal(shmt_try_use_key(f.h, "s"), 1);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 1);
	f.clk.now = t0 + 200 * MS;      /* the first bucket closed */
	assert_int_equal(shmt_try_use_key(f.h, "s"), 1);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 1);
	f.clk.now = t0 + 300 * MS;
	assert_int_equal(shmt_try_use_key(f.h, "s"), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 0);
	f.clk.now = t0 + S + 50 * MS;   /* past the first one's opening */
	assert_int_equal(shmt_try_use_key(f.h, "s"), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 0);
	f.clk.now = t0 + S + 100 * MS;  /* the first one is due */
	assert_int_equal(shmt_try_use_key(f.h, "s"), 1);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 1);
	assert_int_equal(shmt_try_use_key(f.h, "s"), 0);
	{
		shmt_limiter_stat_t st;

		assert_int_equal(shmt_limiter_stat(f.h, "s", &st), 0);
		assert_int_equal(st.grants, 6);
		assert_int_equal(st.denied_exhausted, 3);
		assert_int_equal(st.denied_slack, 2);
		assert_int_equal(st.denied_ring_full, 0);
	}
	shmt_limiter_close(r);
	tu_close_unlink(f.h, f.seg);
}

static void
test_deny_key_pool(void **state)
{
	static const char *const keys[] = { "k0", "k1" };
	shmt_limit_t l = lim;
	shmt_limiter_stat_t st;
	struct dfix f;
	char name[16];
	uint64_t t0;

	(void)state;
	l.limit = 0;
	l.keys = keys;
	l.nkeys = 2;
	l.uses_per_key = 2;
	df_init(&f, "deny-pool");
	assert_int_equal(shmt_limiter_define(f.h, "p", &l), 0);
	t0 = f.clk.now;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(shmt_next_key(f.h, "p", name, sizeof(name)), 2);
		assert_string_equal(name, keys[i % 2]);
	}
	f.clk.now = t0 + 10 * MS;
	assert_int_equal(shmt_next_key(f.h, "p", name, sizeof(name)), 0);
	f.clk.now = t0 + S + 50 * MS;
	assert_int_equal(shmt_next_key(f.h, "p", name, sizeof(name)), 0);
	f.clk.now = t0 + S + 100 * MS;
	assert_int_equal(shmt_next_key(f.h, "p", name, sizeof(name)), 2);
	assert_string_equal(name, "k0");
	assert_int_equal(shmt_limiter_stat(f.h, "p", &st), 0);
	assert_int_equal(st.grants, 5);
	assert_int_equal(st.denied_exhausted, 1);
	assert_int_equal(st.denied_slack, 1);
	tu_close_unlink(f.h, f.seg);
}

/* A per-client limiter: a client's refusals (its entry's word, read
 * whole) with their reasons, by name and resolved, while another client
 * is still granted. */
static void
test_deny_client(void **state)
{
	shmt_limit_t l = lim;
	shmt_limiter_stat_t st;
	shmt_limiter_t *r = NULL;
	struct dfix f;
	uint64_t t0;

	(void)state;
	l.per_client = 1;
	l.client_capacity = 16;
	df_init(&f, "deny-client");
	assert_int_equal(shmt_limiter_define(f.h, "c", &l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "c", &r), 0);
	t0 = f.clk.now;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(shmt_try_use(f.h, "c", "a", 1), 1);
		assert_int_equal(shmt_limiter_try(r, "a", 1), 1);
	}
	f.clk.now = t0 + 10 * MS;
	assert_int_equal(shmt_try_use(f.h, "c", "a", 1), 0);
	assert_int_equal(shmt_limiter_try(r, "a", 1), 0);
	assert_int_equal(shmt_try_use(f.h, "c", "b", 1), 1);
	f.clk.now = t0 + S + 50 * MS;
	assert_int_equal(shmt_try_use(f.h, "c", "a", 1), 0);
	assert_int_equal(shmt_limiter_try(r, "a", 1), 0);
	f.clk.now = t0 + S + 100 * MS;
	assert_int_equal(shmt_limiter_try(r, "a", 1), 1);
	assert_int_equal(shmt_limiter_stat(f.h, "c", &st), 0);
	assert_int_equal(st.grants, 6);
	assert_int_equal(st.denied_exhausted, 2);
	assert_int_equal(st.denied_slack, 2);
	assert_int_equal(st.denied_ring_full, 0);
	shmt_limiter_close(r);
	tu_close_unlink(f.h, f.seg);
}

/* This process fills the limiter and is denied, so its thread's last word
 * of it is a full one.  A forked child (its own handle and clock, later)
 * finds the bucket due, releases it and grants, which changes the word.
 * Then this process, at a time when the bucket its last word names is not
 * yet due, must read the word again and be granted, by name and
 * resolved. */
static void
stale(const char *tag, int resolved)
{
	shmt_limiter_t *r = NULL;
	struct dfix a;
	uint64_t t0;
	pid_t pid;
	int status;

	df_init(&a, tag);
	if (resolved)
		assert_int_equal(shmt_limiter_open(a.h, "d", &r), 0);
	t0 = a.clk.now;
	for (int i = 0; i < 4; i++)
		assert_int_equal(try_one(&a, r), 1);
	a.clk.now = t0 + 10 * MS;
	assert_int_equal(try_one(&a, r), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct tu_clock bclk = { .now = t0 + S + 200 * MS };
		shmt_t *b;

		if (shmt_open(a.seg, &b) != 0 ||
		    shmt_set_clock(b, tu_clock_read, &bclk) != 0)
			_exit(2);
		_exit(shmt_try_use_key(b, "d") == 1 ? 0 : 3);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* The bucket of this thread's last word is due at t0 + 1.1 s. */
	a.clk.now = t0 + 500 * MS;
	assert_int_equal(try_one(&a, r), 1);
	check_stat(&a, 6, 1, 0);
	if (r != NULL)
		shmt_limiter_close(r);
	tu_close_unlink(a.h, a.seg);
}

static void
test_deny_stale_named(void **state)
{
	(void)state;
	stale("deny-stale-named", 0);
}

static void
test_deny_stale_resolved(void **state)
{
	(void)state;
	stale("deny-stale-resolved", 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deny_reasons_named),
		cmocka_unit_test(test_deny_reasons_resolved),
		cmocka_unit_test(test_deny_sealed),
		cmocka_unit_test(test_deny_key_pool),
		cmocka_unit_test(test_deny_client),
		cmocka_unit_test(test_deny_stale_named),
		cmocka_unit_test(test_deny_stale_resolved),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
