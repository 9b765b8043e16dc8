/* SPDX-License-Identifier: MIT */
/*
 * Telling a live process from a dead one, where a wrong "dead" would let
 * two holders into a lock: a lock owner whose /proc status this process
 * cannot read (no descriptor left) is not taken over; a process claiming a
 * slot keeps it against a reaper that runs at the same moment; and a
 * limiter word whose generation tag goes back and forth costs no memory
 * per change.
 */
#include "testutil.h"

#include "dict.h"
#include "lock.h"
#include "segment.h"
#include "store.h"
#include "table.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static struct shmt_lock *
lock0(shmt_t *h)
{
	return &tu_shard(h->dict, 0)->ds_lock;
}

/* shmt__lock of shard 0's lock while this process has no descriptor left
 * (so no /proc file can be opened), all given back after. */
static int
lock_without_fds(shmt_t *h)
{
	struct rlimit saved, rl;
	int fds[4096], nfd = 0, rc;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	rl = saved;
	rl.rlim_cur = 64;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	while (nfd < (int)(sizeof(fds) / sizeof(fds[0])) &&
	    (fds[nfd] = dup(0)) >= 0)
		nfd++;
	rc = shmt__lock(h, lock0(h));
	while (nfd > 0)
		close(fds[--nfd]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
	return rc;
}

/* A live owner, running inside its critical section, whose status this
 * process cannot read (its descriptors used up): the wait ends with
 * SHMT_ELOCKED at its bound, never with a takeover (1). */
static void
test_owner_status_unreadable(void **state)
{
	char name[64], c = 0;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int p[2], rc;
	pid_t pid;

	(void)state;
	tu_segname(name, sizeof(name), "lvs");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	pid = tu_fork_pipe(p);
	if (pid == 0) {
		shmt_t *x = NULL;

		alarm(60);
		close(p[0]);
		if (shmt_open(name, &x) != 0 || shmt__lock(x, lock0(x)) != 0)
			_exit(2);
		if (write(p[1], "h", 1) != 1)
			_exit(3);
		for (;;)
			;       /* holds the lock, running */
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	rc = lock_without_fds(h);
	if (rc >= 0)
		shmt__unlock(lock0(h));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(rc, SHMT_ELOCKED);
	tu_close_unlink(h, name);
}

/* The same with the lock word naming a live process that is not attached
 * (as a dead owner's tid taken by another process): no slot's process has
 * that thread, so the lock is taken over (1) without reading /proc. */
static void
test_unattached_owner_status_unreadable(void **state)
{
	char name[64], c = 0;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int p[2], rc;
	pid_t pid;

	(void)state;
	tu_segname(name, sizeof(name), "lvu");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	pid = tu_fork_pipe(p);
	if (pid == 0) {
		alarm(60);
		close(p[0]);
		if (write(p[1], "u", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	__atomic_store_n(&lock0(h)->lk_owner, (uint32_t)pid, __ATOMIC_RELEASE);
	rc = lock_without_fds(h);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(rc, 1);
	shmt__unlock(lock0(h));
	tu_close_unlink(h, name);
}

/* Housekeeping with a shard lock that a live process keeps: it answers
 * SHMT_ELOCKED, yet still reaps the slot of a process killed with kill -9
 * (the lock stops only the shard it guards). */
static void
test_housekeep_past_kept_lock(void **state)
{
	char name[64], c = 0;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	uint32_t used, stale;
	shmt_time_t before, next = UINT64_MAX;
	int p[2], q[2];
	pid_t holder, dead;

	(void)state;
	tu_segname(name, sizeof(name), "lvk");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	holder = tu_fork_pipe(p);
	if (holder == 0) {
		shmt_t *x = NULL;

		alarm(60);
		close(p[0]);
		if (shmt_open(name, &x) != 0 || shmt__lock(x, lock0(x)) != 0)
			_exit(2);
		if (write(p[1], "h", 1) != 1)
			_exit(3);
		for (;;)
			pause();        /* keeps the lock, asleep */
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	dead = tu_fork_pipe(q);
	if (dead == 0) {
		shmt_t *x = NULL;

		close(q[0]);
		if (shmt_open(name, &x) != 0 || write(q[1], "a", 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	close(q[1]);
	assert_int_equal(read(q[0], &c, 1), 1);
	close(q[0]);
	assert_int_equal(kill(dead, SIGKILL), 0);
	assert_int_equal(waitpid(dead, NULL, 0), dead);
	shmt__slots_count(h, &used, &stale);
	assert_int_equal(stale, 1);
	before = shmt_now(h);
	assert_int_equal(shmt_housekeep(h, &next), SHMT_ELOCKED);
	shmt__slots_count(h, &used, &stale);
	assert_int_equal(stale, 0);
	/* The shard it skipped is due at once. */
	assert_true(next >= before && next <= shmt_now(h));
	kill(holder, SIGKILL);
	waitpid(holder, NULL, 0);
	tu_close_unlink(h, name);
}

/* Processes that attach while another reaps slots in a loop: each finds
 * its own pid in its slot afterwards (a reaper that judged a claimer by
 * the start time its slot's last holder left took it from 1 in 20). */
static void
test_slot_claim_against_reaper(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	volatile int *stop;
	int lost = 0, trials;
	pid_t reaper;

	(void)state;
	stop = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(stop != MAP_FAILED);
	tu_segname(name, sizeof(name), "lvr");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	fflush(stdout);
	if ((reaper = fork()) == 0) {
		shmt_t *r = NULL;

		alarm(120);
		if (shmt_open(name, &r) != 0)
			_exit(3);
		while (!*stop)
			shmt__slots_reap(r);
		_exit(0);
	}
	for (trials = 0; trials < 400; trials++) {
		int p[2];
		char res = 0;
		pid_t c = tu_fork_pipe(p);

		if (c == 0) {
			shmt_t *x = NULL;
			struct shmt_slot *s;

			close(p[0]);
			if (shmt_open(name, &x) != 0)
				res = 'e';
			else {
				s = shmt__region(x, SHMT_R_SLOTS);
				usleep(200);
				res = __atomic_load_n(&s[x->slot].sl_pid,
				    __ATOMIC_ACQUIRE) == (uint32_t)getpid() ?
				    'k' : 'L';
			}
			if (write(p[1], &res, 1) != 1)
				_exit(4);
			_exit(0);       /* no close: its slot is left to reap */
		}
		close(p[1]);
		if (read(p[0], &res, 1) != 1)
			res = '?';
		close(p[0]);
		waitpid(c, NULL, 0);
		assert_true(res == 'k' || res == 'L');
		lost += res == 'L';
	}
	*stop = 1;
	waitpid(reaper, NULL, 0);
	printf("# %d attaches, %d lost their slot\n", trials, lost);
	assert_int_equal(lost, 0);
	munmap((void *)stop, 4096);
	tu_close_unlink(h, name);
}

/* The reaper's view of a half-claimed slot: kept while its claimer lives
 * (whatever start time the slot holds), freed once the claimer is gone. */
static void
test_slot_half_claimed(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	struct shmt_slot *s;
	uint32_t n, free_i = UINT32_MAX;
	pid_t dead;
	int ws;

	(void)state;
	tu_segname(name, sizeof(name), "lvh");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	s = shmt__region(h, SHMT_R_SLOTS);
	n = (uint32_t)(h->reg[SHMT_R_SLOTS].rg_size / sizeof(*s));
	for (uint32_t i = 0; i < n && free_i == UINT32_MAX; i++)
		if (s[i].sl_pid == 0)
			free_i = i;
	assert_true(free_i != UINT32_MAX);
	/* A live claimer (this process) and a start time that is not its. */
	s[free_i].sl_start = 12345;
	s[free_i].sl_pid = (uint32_t)getpid() | 0x80000000U;
	assert_int_equal(shmt__slots_reap(h), 0);
	assert_int_equal(s[free_i].sl_pid, (uint32_t)getpid() | 0x80000000U);
	/* A claimer that is gone. */
	if ((dead = fork()) == 0)
		_exit(0);
	assert_int_equal(waitpid(dead, &ws, 0), dead);
	s[free_i].sl_pid = (uint32_t)dead | 0x80000000U;
	assert_int_equal(shmt__slots_reap(h), 1);
	assert_int_equal(s[free_i].sl_pid, 0);
	/* A claim completes with the plain pid and its own start time. */
	assert_int_equal(s[h->slot].sl_pid, (uint32_t)getpid());
	assert_int_not_equal(s[h->slot].sl_start, 12345);
	tu_close_unlink(h, name);
}

/* Views of row R chained in this handle. */
static unsigned
chain_len(shmt_t *h, uint32_t r)
{
	unsigned len = 0;

	for (const struct shmt_lview *v = &h->lviews[r]; v != NULL;
	    v = v->lv_next)
		len++;
	return len;
}

/* A rate limiter's tag flipped between two valid generations before each
 * of 20,000 grants (as a hostile writer could): the process keeps one view
 * per generation, not one per flip; and legitimate changes still chain a
 * view each. */
static void
test_view_tag_flip(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	shmt_limit_t l;
	struct shmt_lim *row;
	uint32_t r;

	(void)state;
	tu_segname(name, sizeof(name), "lvf");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_GCRA;
	l.limit = 1000000;
	l.window_ns = 1000000000ULL;
	l.burst = 1000000;
	assert_int_equal(shmt_limiter_define(h, "g", &l), 0);
	assert_int_equal(shmt_try_use_key(h, "g"), 1);
	l.limit = 999999;
	assert_int_equal(shmt_limiter_update(h, "g", &l, NULL, 0), 0);
	assert_int_equal(shmt_try_use_key(h, "g"), 1);
	l.limit = 999998;
	assert_int_equal(shmt_limiter_update(h, "g", &l, NULL, 0), 0);
	assert_int_equal(shmt_try_use_key(h, "g"), 1);
	row = tu_row_of(h, "g");
	r = (uint32_t)(row - shmt__rows(h, &(uint32_t){ 0 }));
	assert_int_equal(chain_len(h, r), 3);
	for (int i = 0; i < 20000; i++) {
		/* Between two tags the row's parameters accept (the tag
		 * names the generation; the parameters are the row's). */
		__atomic_fetch_xor(&row->lm_w.w[1], 3ULL, __ATOMIC_SEQ_CST);
		assert_true(shmt_try_use_key(h, "g") >= 0);
	}
	assert_true(chain_len(h, r) <= 5);
	/* Once more to the other tag, whose view is not the chain's last:
	 * after one call, lookups take the view in force, not the chain's
	 * end. */
	__atomic_fetch_xor(&row->lm_w.w[1], 3ULL, __ATOMIC_SEQ_CST);
	assert_true(shmt_try_use_key(h, "g") >= 0);
	assert_true(view_latest(&h->lviews[r])->lv_next != NULL);
	assert_int_equal(view_latest(&h->lviews[r])->pgen,
	    (uint32_t)(row->lm_w.w[1] & 0xffffU));
	tu_close_unlink(h, name);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_owner_status_unreadable),
		cmocka_unit_test(test_unattached_owner_status_unreadable),
		cmocka_unit_test(test_slot_half_claimed),
		cmocka_unit_test(test_housekeep_past_kept_lock),
		cmocka_unit_test(test_slot_claim_against_reaper),
		cmocka_unit_test(test_view_tag_flip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
