/* SPDX-License-Identifier: MIT */
/*
 * Handles carried across fork(): the child's first call reattaches the
 * handle with a process slot of its own (the parent's stays the parent's),
 * a full slot table gives SHMT_ENOSLOT and a later call tries again, and
 * eight children using one inherited handle keep the limit exactly.
 * Children report through their exit status (0: fine, else the check that
 * failed); the parent waits for each one.
 */
#include "segment.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FK_S 1000000000ULL

static int
fk_wait(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static shmt_t *
fk_make(char *seg, size_t cap, uint32_t slots, struct tu_clock *clk)
{
	shmt_config_t cfg;
	shmt_limit_t l = { .limit = 100, .window_ns = 3600 * FK_S,
		.slack_ns = 60 * FK_S, .slack_uses = 10 };
	shmt_t *h = NULL;

	tu_segname(seg, cap, "fork");
	shmt_config_init(&cfg);
	cfg.max_slots = slots;
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, clk), 0);
	assert_int_equal(shmt_limiter_define(h, "l", &l), 0);
	return h;
}

/* The child's first call takes a slot under its own pid; closing the
 * handle in the child gives back that slot, never the parent's. */
static void
test_child_reattaches(void **state)
{
	struct tu_clock clk = { 1 };
	shmt_segment_stat_t st;
	char seg[96];
	shmt_t *h;
	pid_t pid, parent = getpid();

	(void)state;
	h = fk_make(seg, sizeof(seg), 16, &clk);
	assert_int_equal(shmt__slot_held_by(h, parent), 1);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (shmt__slot_held_by(h, getpid()) != 0)
			_exit(1);
		if (shmt_try_use_key(h, "l") != 1)
			_exit(2);
		if (shmt__slot_held_by(h, getpid()) != 1)
			_exit(3);       /* still on the parent's slot */
		if (h->pid != getpid())
			_exit(4);
		if (shmt_segment_stat(h, &st) != 0 || st.slots != 2)
			_exit(5);
		shmt_close(h);
		_exit(0);
	}
	assert_int_equal(fk_wait(pid), 0);
	/* The child released its own slot and left the parent's alone. */
	assert_int_equal(shmt__slot_held_by(h, parent), 1);
	assert_int_equal(shmt__slot_held_by(h, pid), 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	assert_int_equal(st.slots, 1);
	/* The parent's handle never reattaches: same slot, same pid. */
	assert_int_equal(h->pid, parent);
	assert_int_equal(shmt_try_use_key(h, "l"), 1);
	assert_int_equal(st.slots, 1);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A grandchild reattaches too, and the dictionary and the counters are
 * entry points like the limiters. */
static void
test_grandchild_and_dict(void **state)
{
	struct tu_clock clk = { 1 };
	char seg[96], buf[16];
	size_t vlen;
	uint64_t n;
	shmt_t *h;
	pid_t pid;

	(void)state;
	h = fk_make(seg, sizeof(seg), 16, &clk);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pid_t g;
		int st;

		if (shmt_set(h, "k", 1, "v", 1, 0) != 0)
			_exit(1);
		if (shmt__slot_held_by(h, getpid()) != 1)
			_exit(2);
		g = fork();
		if (g < 0)
			_exit(3);
		if (g == 0) {
			if (shmt_hit(h, "c", 1, &n) != 0 || n != 1)
				_exit(4);
			if (shmt__slot_held_by(h, getpid()) != 1)
				_exit(5);
			if (shmt_get(h, "k", 1, buf, sizeof(buf), &vlen) != 0 ||
			    vlen != 1 || buf[0] != 'v')
				_exit(6);
			shmt_close(h);
			_exit(0);
		}
		if (waitpid(g, &st, 0) != g || !WIFEXITED(st))
			_exit(7);
		if (WEXITSTATUS(st) != 0)
			_exit(10 + WEXITSTATUS(st));
		shmt_close(h);
		_exit(0);
	}
	assert_int_equal(fk_wait(pid), 0);
	assert_int_equal(shmt_hit(h, "c", 1, &n), 0);
	assert_int_equal(n, 2);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* With every slot taken, the child's call fails with SHMT_ENOSLOT, takes
 * nothing, and the next call tries again (and gets the slot once one is
 * free). */
static void
test_no_slot(void **state)
{
	struct tu_clock clk = { 1 };
	shmt_limiter_stat_t ls;
	char seg[96];
	shmt_t *h, *h2 = NULL;
	int pfd[2], cfd[2];
	char c = 0;
	pid_t pid;

	(void)state;
	h = fk_make(seg, sizeof(seg), 2, &clk);
	assert_int_equal(shmt_open(seg, &h2), 0);      /* both slots taken */
	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(pipe(cfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (shmt_try_use_key(h, "l") != SHMT_ENOSLOT)
			_exit(1);
		if (shmt_try_use_key(h, "l") != SHMT_ENOSLOT)
			_exit(2);
		if (write(cfd[1], &c, 1) != 1)
			_exit(3);
		if (read(pfd[0], &c, 1) != 1)   /* the parent freed a slot */
			_exit(4);
		if (shmt_try_use_key(h, "l") != 1)
			_exit(5);
		if (shmt__slot_held_by(h, getpid()) != 1)
			_exit(6);
		shmt_close(h);
		_exit(0);
	}
	close(cfd[1]);
	close(pfd[0]);
	if (read(cfd[0], &c, 1) != 1)
		fail_msg("child exited with %d before its two calls",
		    fk_wait(pid));
	assert_int_equal(shmt_limiter_stat(h, "l", &ls), 0);
	assert_int_equal(ls.grants, 0);
	shmt_close(h2);
	assert_int_equal(write(pfd[1], &c, 1), 1);
	assert_int_equal(fk_wait(pid), 0);
	assert_int_equal(shmt_limiter_stat(h, "l", &ls), 0);
	assert_int_equal(ls.grants, 1);
	close(pfd[1]);
	close(cfd[0]);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* Eight children on one inherited handle, a clock that never moves: the
 * limit of 100 is granted exactly, however the calls interleave. */
#define FK_KIDS 8
static void
test_children_keep_the_limit(void **state)
{
	struct tu_clock clk = { 1 };
	char seg[96];
	pid_t pids[FK_KIDS];
	uint64_t *granted;
	uint64_t sum = 0;
	shmt_t *h;

	(void)state;
	granted = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(granted != MAP_FAILED);
	h = fk_make(seg, sizeof(seg), 16, &clk);
	for (int i = 0; i < FK_KIDS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			for (int k = 0; k < 100; k++) {
				int rc = shmt_try_use_key(h, "l");

				if (rc < 0)
					_exit(1);
				granted[i] += (uint64_t)rc;
			}
			if (shmt__slot_held_by(h, getpid()) != 1)
				_exit(2);
			shmt_close(h);
			_exit(0);
		}
	}
	for (int i = 0; i < FK_KIDS; i++)
		assert_int_equal(fk_wait(pids[i]), 0);
	for (int i = 0; i < FK_KIDS; i++)
		sum += granted[i];
	assert_int_equal(sum, 100);
	assert_int_equal(shmt_try_use_key(h, "l"), 0);
	munmap(granted, 4096);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* Threads of the child racing on the handle's first call: one reattaches,
 * every call is answered, and the child holds exactly one slot. */
#define FK_THREADS 4
static void *
fk_thread(void *arg)
{
	shmt_t *h = arg;

	for (int i = 0; i < 20; i++)
		if (shmt_try_use_key(h, "l") < 0)
			return (void *)1;
	return NULL;
}

static void
test_threads_race_in_child(void **state)
{
	struct tu_clock clk = { 1 };
	shmt_segment_stat_t st;
	char seg[96];
	shmt_t *h;
	pid_t pid;

	(void)state;
	h = fk_make(seg, sizeof(seg), 16, &clk);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pthread_t t[FK_THREADS];
		void *ret;
		int bad = 0;

		for (int i = 0; i < FK_THREADS; i++)
			if (pthread_create(&t[i], NULL, fk_thread, h) != 0)
				_exit(1);
		for (int i = 0; i < FK_THREADS; i++) {
			pthread_join(t[i], &ret);
			bad |= ret != NULL;
		}
		if (bad)
			_exit(2);
		if (shmt__slot_held_by(h, getpid()) != 1)
			_exit(3);
		if (shmt_segment_stat(h, &st) != 0 || st.slots != 2)
			_exit(4);
		shmt_close(h);
		_exit(0);
	}
	assert_int_equal(fk_wait(pid), 0);
	assert_int_equal(shmt_try_use_key(h, "l"), 1);   /* 80 of 100 taken */
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_child_reattaches, tu_sweep),
		cmocka_unit_test_teardown(test_grandchild_and_dict, tu_sweep),
		cmocka_unit_test_teardown(test_no_slot, tu_sweep),
		cmocka_unit_test_teardown(test_children_keep_the_limit, tu_sweep),
		cmocka_unit_test_teardown(test_threads_race_in_child, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
