/* SPDX-License-Identifier: MIT */
/*
 * The hand-off word of a shared limiter (see "Contention" in lib/ring.c):
 * a grant that finds another process's request takes it (clears the word)
 * and still grants, a request left by a process that is gone costs one
 * grant a bounded wait and is gone after it, a request nobody takes is
 * withdrawn, and two processes granting on one limiter through hand-offs
 * grant exactly the limit, leaving no request behind: in buckets, exact
 * and rate mode, which hand their words over alike.
 */
#include "testutil.h"

#include "limiter.h"
#include "ring.h"
#include "segment.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define HS 1000000000ULL

static shmt_limit_t
hf_limit(uint64_t limit)
{
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.limit = limit;
	l.window_ns = 3600 * HS;
	l.slack_ns = 60 * HS;
	l.slack_uses = limit;
	return l;
}

/* Exact mode: the log of LIMIT grants. */
static shmt_limit_t
hf_exact(uint64_t limit)
{
	shmt_limit_t l = hf_limit(limit);

	l.mode = SHMT_MODE_EXACT;
	l.slack_ns = 0;
	l.slack_uses = 0;
	return l;
}

/* Rate mode: BURST grants at once, then one each 1000 s. */
static shmt_limit_t
hf_rate(uint64_t burst)
{
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_GCRA;
	l.limit = 1;
	l.window_ns = 1000 * HS;
	l.burst = burst;
	return l;
}

/* A token no thread of this test has (a token is pid << 32 | tid, and no
 * process has pid 0). */
#define FOREIGN 12345U

static void
test_request_taken(void **state)
{
	shmt_limit_t l = hf_limit(100);
	struct shmt_lim *row;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "handoff-taken");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "a", &l), 0);
	row = tu_row_of(h, "a");
	assert_int_equal(row->lm_handoff, 0);
	/* Twice: the first grant of a handle reads W, later ones CAS
	 * against the word they last saw; both take the request. */
	for (int i = 0; i < 2; i++) {
		__atomic_store_n(&row->lm_handoff, FOREIGN, __ATOMIC_RELAXED);
		assert_int_equal(shmt_try_use_key(h, "a"), 1);
		assert_int_equal(__atomic_load_n(&row->lm_handoff,
		    __ATOMIC_RELAXED), 0);
	}
	/* A denial makes no CAS and leaves a request alone. */
	l = hf_limit(1);
	assert_int_equal(shmt_limiter_define(h, "one", &l), 0);
	row = tu_row_of(h, "one");
	assert_int_equal(shmt_try_use_key(h, "one"), 1);
	__atomic_store_n(&row->lm_handoff, FOREIGN, __ATOMIC_RELAXED);
	assert_int_equal(shmt_try_use_key(h, "one"), 0);
	assert_int_equal(row->lm_handoff, FOREIGN);
	tu_close_unlink(h, seg);
}

/* Exact and rate mode: a grant takes a request too; a refusal leaves it. */
static void
test_request_taken_modes(void **state)
{
	const shmt_limit_t ls[2] = { hf_exact(3), hf_rate(3) };
	const char *names[2] = { "exact", "rate" };
	struct shmt_lim *row;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "handoff-modes");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	for (int m = 0; m < 2; m++) {
		assert_int_equal(shmt_limiter_define(h, names[m], &ls[m]), 0);
		row = tu_row_of(h, names[m]);
		for (int i = 0; i < 3; i++) {
			__atomic_store_n(&row->lm_handoff, FOREIGN,
			    __ATOMIC_RELAXED);
			assert_int_equal(shmt_try_use_key(h, names[m]), 1);
			assert_int_equal(__atomic_load_n(&row->lm_handoff,
			    __ATOMIC_RELAXED), 0);
		}
		__atomic_store_n(&row->lm_handoff, FOREIGN, __ATOMIC_RELAXED);
		assert_int_equal(shmt_try_use_key(h, names[m]), 0);
		assert_int_equal(row->lm_handoff, FOREIGN);
	}
	tu_close_unlink(h, seg);
}

/* A request nobody takes (no other process calls) is withdrawn by its
 * asker, which then grants as usual. */
static void
test_request_withdrawn(void **state)
{
	shmt_limit_t l = hf_limit(100);
	struct shmt_lim *row;
	char seg[96];
	shmt_t *h;

	(void)state;
	tu_segname(seg, sizeof(seg), "handoff-withdrawn");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "a", &l), 0);
	row = tu_row_of(h, "a");
	shmt__handoff_ask(&row->lm_handoff, &row->lm_w);
	assert_int_equal(row->lm_handoff, 0);
	assert_int_equal(shmt_try_use_key(h, "a"), 1);
	tu_close_unlink(h, seg);
}

/* Two processes on one limiter of parameters L (LIMIT grants at most),
 * started together: exactly the limit is granted between them, then both
 * are refused, and no request is left. */
static void
two_processes(const shmt_limit_t *lp, uint64_t limit)
{
	shmt_limit_t l = *lp;
	struct shmt_lim *row;
	struct { volatile int go; uint64_t grants[2]; int bad[2]; } *sh;
	char seg[96];
	pid_t pid[2];
	shmt_t *h;
	int st;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	tu_segname(seg, sizeof(seg), "handoff-mp");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "a", &l), 0);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			shmt_t *c;
			int rc;

			alarm(100);
			if (shmt_open(seg, &c) != 0)
				_exit(2);
			while (!sh->go)
				;
			while ((rc = shmt_try_use_key(c, "a")) == 1)
				sh->grants[i]++;
			sh->bad[i] = rc != 0;
			shmt_close(c);
			_exit(0);
		}
	}
	sh->go = 1;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		assert_int_equal(sh->bad[i], 0);
	}
	print_message("grants %llu + %llu of %llu\n",
	    (unsigned long long)sh->grants[0],
	    (unsigned long long)sh->grants[1], (unsigned long long)limit);
	assert_int_equal(sh->grants[0] + sh->grants[1], limit);
	assert_int_equal(shmt_try_use_key(h, "a"), 0);
	row = tu_row_of(h, "a");
	assert_int_equal(row->lm_handoff, 0);
	munmap(sh, sizeof(*sh));
	tu_close_unlink(h, seg);
}

static void
test_two_processes_exact(void **state)
{
	const uint64_t limit = (uint64_t)(2000000 * tu_scale());
	shmt_limit_t l = hf_limit(limit);

	(void)state;
	two_processes(&l, limit);
}

/* Exact mode: its log holds a grant's record each (16 bytes). */
static void
test_two_processes_exact_mode(void **state)
{
	/* The log takes 16 bytes a record from the default segment's
	 * arena: at most 250,000 of them, whatever the scale. */
	uint64_t limit = (uint64_t)(200000 * tu_scale());
	shmt_limit_t l;

	if (limit > 250000)
		limit = 250000;
	l = hf_exact(limit);

	(void)state;
	two_processes(&l, limit);
}

static void
test_two_processes_rate_mode(void **state)
{
	/* burst x T (1000 s) stays under 2^62 ns. */
	uint64_t burst = (uint64_t)(2000000 * tu_scale());
	shmt_limit_t l;

	if (burst > 4000000)
		burst = 4000000;
	l = hf_rate(burst);

	(void)state;
	two_processes(&l, burst);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_request_taken, tu_sweep),
		cmocka_unit_test_teardown(test_request_withdrawn, tu_sweep),
		cmocka_unit_test_teardown(test_two_processes_exact, tu_sweep),
		cmocka_unit_test_teardown(test_request_taken_modes, tu_sweep),
		cmocka_unit_test_teardown(test_two_processes_exact_mode,
		    tu_sweep),
		cmocka_unit_test_teardown(test_two_processes_rate_mode,
		    tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
