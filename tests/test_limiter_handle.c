/* SPDX-License-Identifier: MIT */
/*
 * Resolved limiters (shmt_limiter_open): call for call the same answers as
 * the named calls, in every mode, shared and per client, with and without
 * decisions, across a change of parameters; -ENOENT for good once the row
 * is deleted (never a grant on the row defined again under the name);
 * SHMT_ESTALE once the segment is removed; a child after fork() and threads
 * sharing one resolved limiter keep the limit exactly.
 */
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HS 1000000000ULL

struct hfix {
	char seg[96];
	shmt_t *h;
	struct tu_clock clk;
};

static void
hf_init(struct hfix *f, const char *tag)
{
	memset(f, 0, sizeof(*f));
	f->clk.now = 1000 * HS;
	tu_segname(f->seg, sizeof(f->seg), tag);
	assert_int_equal(shmt_create(f->seg, NULL, &f->h), 0);
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);
}

static void
hf_done(struct hfix *f)
{
	shmt_close(f->h);
	assert_int_equal(shmt_unlink(f->seg), 0);
}

/* Two limiters with the parameters L, "named" and "resolved"; the same
 * seeded sequence of calls, times and costs on each, one by name and one
 * through a resolved limiter, must give the same answers and decisions. */
static void
same_answers(const shmt_limit_t *l, const char *tag, uint64_t seed)
{
	shmt_decision_t dn, dr;
	shmt_limiter_t *r = NULL;
	struct hfix f;
	const char *clients[] = { "alpha", "beta", "gamma" };
	uint64_t cost_max = l->mode == SHMT_MODE_GCRA ? l->burst :
	    l->mode == SHMT_MODE_EXACT ? 1 : l->slack_uses;
	int grants = 0, denials = 0;

	hf_init(&f, tag);
	assert_int_equal(shmt_limiter_define(f.h, "named", l), 0);
	assert_int_equal(shmt_limiter_define(f.h, "resolved", l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "resolved", &r), 0);
	for (int i = 0; i < 4000; i++) {
		uint64_t x = tu_rand(&seed);
		const char *c = l->per_client ? clients[x % 3] : NULL;
		size_t clen = c != NULL ? strlen(c) : 0;
		int rn, rr;

		f.clk.now += (x >> 8) % (l->window_ns / 64 + 1);
		if ((x >> 40) % 2 == 0) {
			rn = c != NULL ? shmt_try_use(f.h, "named", c, clen) :
			    shmt_try_use_key(f.h, "named");
			rr = shmt_limiter_try(r, c, clen);
			assert_int_equal(rn, rr);
		} else {
			uint64_t cost = 1 + (x >> 48) % cost_max;

			memset(&dn, 0xa5, sizeof(dn));
			memset(&dr, 0x5a, sizeof(dr));
			rn = shmt_acquire(f.h, "named", c, clen, cost, &dn);
			rr = shmt_limiter_acquire(r, c, clen, cost, &dr);
			assert_int_equal(rn, rr);
			assert_int_equal(dn.granted, dr.granted);
			assert_int_equal(dn.limit, dr.limit);
			assert_int_equal(dn.remaining, dr.remaining);
			assert_int_equal(dn.retry_after_ns, dr.retry_after_ns);
			assert_int_equal(dn.reset_after_ns, dr.reset_after_ns);
		}
		assert_true(rn == 0 || rn == 1);
		if (rn == 1)
			grants++;
		else
			denials++;
	}
	/* Both outcomes were exercised, or the comparison proved little. */
	printf("# %s: %d granted, %d refused, the same both ways\n", tag, grants,
	    denials);
	assert_true(grants > 100 && denials > 100);
	shmt_limiter_close(r);
	hf_done(&f);
}

static void
test_same_answers(void **state)
{
	uint64_t seed = tu_seed("limiter_handle");
	shmt_limit_t buckets = { .limit = 50, .window_ns = 10 * HS,
		.slack_ns = HS / 2, .slack_uses = 5 };
	shmt_limit_t exact = { .mode = SHMT_MODE_EXACT, .limit = 40,
		.window_ns = 10 * HS };
	shmt_limit_t rate = { .mode = SHMT_MODE_GCRA, .limit = 30,
		.window_ns = 10 * HS, .burst = 6 };
	shmt_limit_t pc = buckets;

	(void)state;
	pc.per_client = 1;
	pc.client_capacity = 16;
	same_answers(&buckets, "hb", seed);
	same_answers(&exact, "he", seed + 1);
	same_answers(&rate, "hr", seed + 2);
	same_answers(&pc, "hp", seed + 3);
	rate.per_client = 1;
	rate.client_capacity = 16;
	same_answers(&rate, "hpr", seed + 4);
}

static void
test_deleted_for_good(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 2,
		.window_ns = 60 * HS };
	shmt_limiter_t *r = NULL, *r2 = NULL;
	struct hfix f;

	(void)state;
	hf_init(&f, "hdel");
	assert_int_equal(shmt_limiter_define(f.h, "api", &l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "api", &r), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 1);
	assert_int_equal(shmt_limiter_delete(f.h, "api"), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), -ENOENT);
	assert_int_equal(shmt_limiter_acquire(r, NULL, 0, 1, NULL), -ENOENT);
	/* Defined again: a new row, with uses of its own; R stays away. */
	assert_int_equal(shmt_limiter_define(f.h, "api", &l), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), -ENOENT);
	assert_int_equal(shmt_limiter_open(f.h, "api", &r2), 0);
	assert_int_equal(shmt_limiter_try(r2, NULL, 0), 1);
	assert_int_equal(shmt_try_use_key(f.h, "api"), 1);
	assert_int_equal(shmt_limiter_try(r2, NULL, 0), 0);
	shmt_limiter_close(r);
	shmt_limiter_close(r2);
	hf_done(&f);
}

static void
test_update_followed(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 60 * HS,
		.slack_ns = HS, .slack_uses = 10 };
	shmt_limiter_t *r = NULL;
	struct hfix f;
	int n = 0;

	(void)state;
	hf_init(&f, "hupd");
	assert_int_equal(shmt_limiter_define(f.h, "api", &l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "api", &r), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 1);
	l.limit = 4;
	l.slack_uses = 4;
	assert_int_equal(shmt_limiter_update(f.h, "api", &l, NULL, 0), 0);
	f.clk.now += 2 * HS;
	while (shmt_limiter_try(r, NULL, 0) == 1)
		n++;
	/* One use in flight from before: three more under the new limit. */
	assert_int_equal(n, 3);
	assert_int_equal(shmt_try_use_key(f.h, "api"), 0);
	shmt_limiter_close(r);
	hf_done(&f);
}

static void
test_errors(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 60 * HS,
		.slack_ns = HS, .slack_uses = 2 };
	shmt_limit_t pc = l;
	shmt_limiter_t *r = NULL, *p = NULL, *untouched = (void *)&l;
	char big[SHMT_CLIENT_MAX + 1];
	struct hfix f;

	(void)state;
	memset(big, 'x', sizeof(big));
	pc.per_client = 1;
	pc.client_capacity = 8;
	hf_init(&f, "herr");
	assert_int_equal(shmt_limiter_define(f.h, "shared", &l), 0);
	assert_int_equal(shmt_limiter_define(f.h, "pc", &pc), 0);
	assert_int_equal(shmt_limiter_open(f.h, "missing", &untouched),
	    -ENOENT);
	assert_ptr_equal(untouched, (void *)&l);
	assert_int_equal(shmt_limiter_open(NULL, "shared", &r), -EINVAL);
	assert_int_equal(shmt_limiter_open(f.h, "shared", NULL), -EINVAL);
	assert_int_equal(shmt_limiter_open(f.h, "", &r), -EINVAL);
	assert_int_equal(shmt_limiter_open(f.h, "shared", &r), 0);
	assert_int_equal(shmt_limiter_open(f.h, "pc", &p), 0);
	/* Enough calls that a paced look at the name falls on a NULL one. */
	for (int i = 0; i < 200; i++) {
		assert_int_equal(shmt_limiter_try(NULL, NULL, 0), -EINVAL);
		assert_int_equal(shmt_try_use_key(NULL, "shared"), -EINVAL);
	}
	assert_int_equal(shmt_limiter_try(r, "c", 1), -EPERM);
	assert_int_equal(shmt_limiter_try(r, NULL, 1), -EINVAL);
	assert_int_equal(shmt_limiter_try(p, NULL, 0), -EPERM);
	assert_int_equal(shmt_limiter_try(p, "c", 0), -EINVAL);
	assert_int_equal(shmt_limiter_try(p, big, sizeof(big)), -E2BIG);
	assert_int_equal(shmt_limiter_acquire(r, NULL, 0, 0, NULL), -EINVAL);
	assert_int_equal(shmt_limiter_acquire(r, NULL, 0, 3, NULL), -EINVAL);
	assert_int_equal(shmt_limiter_acquire(p, "c", 1, 2, NULL), 1);
	assert_int_equal(shmt_limiter_acquire(NULL, NULL, 0, 1, NULL),
	    -EINVAL);
	shmt_limiter_close(NULL);
	shmt_limiter_close(r);
	shmt_limiter_close(p);
	hf_done(&f);
}

static void
test_segment_removed(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 60 * HS,
		.slack_ns = HS, .slack_uses = 2 };
	shmt_limiter_t *r = NULL;
	struct hfix f;

	(void)state;
	hf_init(&f, "hrm");
	assert_int_equal(shmt_limiter_define(f.h, "api", &l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "api", &r), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), 1);
	assert_int_equal(shmt_unlink(f.seg), 0);
	assert_int_equal(shmt_limiter_try(r, NULL, 0), SHMT_ESTALE);
	assert_int_equal(shmt_limiter_acquire(r, NULL, 0, 1, NULL),
	    SHMT_ESTALE);
	shmt_limiter_close(r);
	shmt_close(f.h);
}

struct hthr {
	shmt_limiter_t *r;
	int granted;
};

static void *
h_thread(void *arg)
{
	struct hthr *t = arg;

	for (int i = 0; i < 3000; i++) {
		int rc = shmt_limiter_try(t->r, NULL, 0);

		if (rc < 0)
			return NULL;
		t->granted += rc;
	}
	return arg;
}

/* Threads of two processes on resolved limiters (the child's inherited
 * across fork()): exactly the limit granted, with the clock standing
 * still. */
static void
test_threads_and_fork(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 5000,
		.window_ns = 3600 * HS };
	struct hthr t[4];
	pthread_t th[4];
	shmt_limiter_t *r = NULL;
	struct hfix f;
	int total = 0, pfd[2], st;
	pid_t pid;

	(void)state;
	hf_init(&f, "hthr");
	assert_int_equal(shmt_limiter_define(f.h, "api", &l), 0);
	assert_int_equal(shmt_limiter_open(f.h, "api", &r), 0);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int got = 0;

		for (int i = 0; i < 3000; i++) {
			int rc = shmt_limiter_try(r, NULL, 0);

			if (rc < 0)
				_exit(1);
			got += rc;
		}
		_exit(write(pfd[1], &got, sizeof(got)) == sizeof(got) ? 0 : 2);
	}
	for (int i = 0; i < 4; i++) {
		t[i].r = r;
		t[i].granted = 0;
		assert_int_equal(pthread_create(&th[i], NULL, h_thread, &t[i]),
		    0);
	}
	for (int i = 0; i < 4; i++) {
		void *ret;

		assert_int_equal(pthread_join(th[i], &ret), 0);
		assert_non_null(ret);
		total += t[i].granted;
	}
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	{
		int got = 0;

		assert_int_equal(read(pfd[0], &got, sizeof(got)), sizeof(got));
		total += got;
	}
	/* 15,000 tries for 5,000 uses: exactly the limit. */
	assert_int_equal(total, 5000);
	close(pfd[0]);
	close(pfd[1]);
	shmt_limiter_close(r);
	hf_done(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_same_answers, tu_sweep),
		cmocka_unit_test_teardown(test_deleted_for_good, tu_sweep),
		cmocka_unit_test_teardown(test_update_followed, tu_sweep),
		cmocka_unit_test_teardown(test_errors, tu_sweep),
		cmocka_unit_test_teardown(test_segment_removed, tu_sweep),
		cmocka_unit_test_teardown(test_threads_and_fork, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
