/* SPDX-License-Identifier: MIT */
/*
 * The sleep hooks (shmt_set_sleep_hooks): a call that must wait for
 * another process calls BEFORE right before it sleeps and AFTER once awake,
 * on its own thread, paired, never nested; a call that does not wait calls
 * neither; a thread holding a lock private to the process calls none; the
 * hooks follow the handle into the next generation after a move.
 *
 * The verdicts need no timing: the other process (a forked child that
 * holds every lock of the dictionary, or freezes the segment as a live
 * mover would) lets go only when the waiting call's BEFORE hook tells it
 * to, on a pipe.  Without the hook the call waits until it gives up
 * (SHMT_ELOCKED, or -EAGAIN after a move's 5 s) and the test fails.
 */
#include "daemon.h"
#include "fork.h"
#include "lock.h"
#include "segment.h"
#include "store.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* What the hooks saw. */
struct rec {
	int before, after;
	int depth;              /* 1 between BEFORE and AFTER */
	int bad;                /* nested, unpaired, or another thread */
	pid_t tid;
	int go_fd;              /* BEFORE writes a byte here once, then -1 */
};

static void
rec_before(void *ctx)
{
	struct rec *r = ctx;
	char c = 'g';

	if (r->depth != 0 || (r->tid != 0 && r->tid != gettid()))
		r->bad++;
	r->tid = gettid();
	r->depth++;
	r->before++;
	if (r->go_fd >= 0) {
		if (write(r->go_fd, &c, 1) != 1)
			r->bad++;
		r->go_fd = -1;
	}
}

static void
rec_after(void *ctx)
{
	struct rec *r = ctx;

	if (r->depth != 1 || r->tid != gettid())
		r->bad++;
	r->depth--;
	r->after++;
}

static void
rec_init(struct rec *r, int go_fd)
{
	memset(r, 0, sizeof(*r));
	r->go_fd = go_fd;
}

static void
rec_paired(const struct rec *r)
{
	assert_int_equal(r->bad, 0);
	assert_int_equal(r->depth, 0);
	assert_int_equal(r->before, r->after);
}

/* The other process's ways of making a call wait: hold every shard lock
 * of the dictionary; freeze the segment as a live mover; hold the locks
 * for 50 ms, running; hold the locks with every shard's version odd, as a
 * writer in the middle of a write. */
enum hold { HOLD_LOCKS, HOLD_FREEZE, HOLD_LOCKS_BRIEFLY, HOLD_WRITING };

/*
 * Fork the other process on SEG: it makes calls wait as HOW says, writes
 * one byte on *READY_FD once they would, and lets go when a byte comes on
 * the pipe whose write end is *GO_FD (HOLD_LOCKS_BRIEFLY: after running
 * for 50 ms instead, never sleeping, so that a waiter gives it the
 * running owner's bound, 1 s).  An alarm ends it after 30 s.
 */
static pid_t
holder(const char *seg, enum hold how, int *ready_fd, int *go_fd)
{
	int rp[2], gp[2];
	pid_t pid;

	assert_int_equal(pipe(rp), 0);
	assert_int_equal(pipe(gp), 0);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct shmt_store *st;
		shmt_t *h;
		uint64_t w, t0;
		char c = 'r';

		alarm(30);
		close(rp[0]);
		close(gp[1]);
		if (shmt_open(seg, &h) != 0)
			_exit(10);
		st = h->dict;
		if (how == HOLD_FREEZE) {
			w = shmt__genword_load(h->hdr);
			__atomic_store_n(&h->hdr->sh_mover_pid,
			    (int64_t)getpid(), __ATOMIC_RELEASE);
			__atomic_store_n(&h->hdr->sh_mover_start,
			    shmt__proc_start(getpid()), __ATOMIC_RELEASE);
			if ((uint32_t)w != SHMT_SEG_LIVE ||
			    !shmt__genword_cas(h->hdr, &w, SHMT_SEG_FROZEN,
			    (uint32_t)(w >> 32) + 1))
				_exit(11);
		} else {
			for (uint32_t i = 0; i < st->shards; i++)
				if (shmt__lock(h, &tu_shard(st, i)->ds_lock) !=
				    0)
					_exit(12);
			for (uint32_t i = 0; how == HOLD_WRITING &&
			    i < st->shards; i++)
				__atomic_fetch_add(&tu_shard(st, i)->ds_seq, 1,
				    __ATOMIC_SEQ_CST);
		}
		if (write(rp[1], &c, 1) != 1)
			_exit(13);
		if (how == HOLD_LOCKS_BRIEFLY) {
			for (t0 = tu_mono_ns(); tu_mono_ns() - t0 < 50000000ULL;)
				;
		} else if (read(gp[0], &c, 1) != 1) {
			_exit(14);
		}
		if (how == HOLD_FREEZE) {
			w = shmt__genword_load(h->hdr);
			if ((uint32_t)w != SHMT_SEG_FROZEN ||
			    !shmt__genword_cas(h->hdr, &w, SHMT_SEG_LIVE,
			    (uint32_t)(w >> 32)))
				_exit(15);
		} else {
			for (uint32_t i = 0; how == HOLD_WRITING &&
			    i < st->shards; i++)
				__atomic_fetch_add(&tu_shard(st, i)->ds_seq, 1,
				    __ATOMIC_SEQ_CST);
			for (uint32_t i = 0; i < st->shards; i++)
				shmt__unlock(&tu_shard(st, i)->ds_lock);
		}
		shmt_close(h);
		_exit(0);
	}
	close(rp[1]);
	close(gp[0]);
	*ready_fd = rp[0];
	*go_fd = gp[1];
	return pid;
}

/* Wait for the holder's byte on READY_FD. */
static void
holder_ready(int ready_fd)
{
	char c;

	assert_int_equal(read(ready_fd, &c, 1), 1);
}

static void
holder_done(pid_t pid, int ready_fd, int go_fd)
{
	int st;

	close(ready_fd);
	close(go_fd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* A wait made for the test: the other process on SEG holding as HOW, and
 * H's hooks recording into R, whose BEFORE tells the holder to let go. */
struct waited {
	struct rec r;
	pid_t pid;
	int ready, go;
};

static void
wait_begin(struct waited *w, shmt_t *h, const char *seg, enum hold how)
{
	w->pid = holder(seg, how, &w->ready, &w->go);
	holder_ready(w->ready);
	rec_init(&w->r, w->go);
	assert_int_equal(shmt_set_sleep_hooks(h, rec_before, rec_after,
	    &w->r), 0);
}

/* The call made in between waited inside the hooks, on this thread. */
static void
wait_end(struct waited *w)
{
	assert_true(w->r.before >= 1);
	rec_paired(&w->r);
	assert_int_equal(w->r.tid, gettid());
	holder_done(w->pid, w->ready, w->go);
}

static shmt_t *
segment(char *seg, size_t cap, const char *tag)
{
	shmt_config_t c;
	shmt_limit_t l = { .limit = 100000, .window_ns = 3600000000000ULL,
		.slack_ns = 1000000000ULL, .slack_uses = 50 };
	shmt_t *h;

	tu_segname(seg, cap, tag);
	tu_config_small(&c);
	assert_int_equal(shmt_create(seg, &c, &h), 0);
	assert_non_null(h->dict);
	assert_true(h->dict->shards > 0);
	assert_int_equal(shmt_limiter_define(h, "a", &l), 0);
	return h;
}

/* Move H's segment into a generation with a dictionary twice as large,
 * and close H. */
static void
move_bigger(shmt_t *h)
{
	shmt_config_t c;
	char err[512] = "";

	tu_config_small(&c);
	c.dict_bytes *= 2;
	assert_int_equal(shmt__move(h, &c, NULL, NULL, err, sizeof(err)), 0);
	shmt_close(h);
}

/* The arguments: both hooks or neither. */
static void
test_hooks_args(void **state)
{
	struct rec r;
	char seg[96];
	shmt_t *h;

	(void)state;
	rec_init(&r, -1);
	h = segment(seg, sizeof(seg), "hkarg");
	assert_int_equal(shmt_set_sleep_hooks(NULL, rec_before, rec_after,
	    &r), -EINVAL);
	assert_int_equal(shmt_set_sleep_hooks(h, rec_before, NULL, &r),
	    -EINVAL);
	assert_int_equal(shmt_set_sleep_hooks(h, NULL, rec_after, &r),
	    -EINVAL);
	assert_int_equal(shmt_set_sleep_hooks(h, rec_before, rec_after, &r),
	    0);
	assert_int_equal(shmt_set_sleep_hooks(h, NULL, NULL, NULL), 0);
	assert_null(h->sleep_before);
	tu_close_unlink(h, seg);
}

/* Calls that do not wait call no hook: grants, gets, sets, hits. */
static void
test_hooks_not_on_fast_path(void **state)
{
	struct rec r;
	char seg[96], buf[16];
	size_t n;
	shmt_t *h;

	(void)state;
	rec_init(&r, -1);
	h = segment(seg, sizeof(seg), "hkfast");
	assert_int_equal(shmt_set_sleep_hooks(h, rec_before, rec_after, &r),
	    0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(shmt_try_use_key(h, "a"), 1);
		assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
		assert_int_equal(shmt_get(h, "k", 1, buf, sizeof(buf), &n), 0);
	}
	assert_int_equal(r.before, 0);
	assert_int_equal(r.after, 0);
	tu_close_unlink(h, seg);
}

/* A write that sleeps on a shard lock another process holds calls BEFORE
 * (which lets the holder go) and AFTER, then succeeds. */
static void
test_hooks_lock_wait(void **state)
{
	struct waited w;
	char seg[96], buf[16];
	size_t n;
	shmt_t *h;

	(void)state;
	h = segment(seg, sizeof(seg), "hklock");
	wait_begin(&w, h, seg, HOLD_LOCKS);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	wait_end(&w);
	assert_int_equal(shmt_get(h, "k", 1, buf, sizeof(buf), &n), 0);
	tu_close_unlink(h, seg);
}

/* A grant that lands while a live mover holds the segment frozen waits
 * for the move's outcome, calling the hooks around each nap; the mover
 * (told by BEFORE) thaws it, and the grant stands. */
static void
test_hooks_frozen_grant(void **state)
{
	shmt_limiter_stat_t st;
	struct waited w;
	char seg[96];
	shmt_t *h;

	(void)state;
	h = segment(seg, sizeof(seg), "hkfrz");
	wait_begin(&w, h, seg, HOLD_FREEZE);
	assert_int_equal(shmt_try_use_key(h, "a"), 1);
	wait_end(&w);
	assert_int_equal(shmt_limiter_stat(h, "a", &st), 0);
	assert_int_equal(st.grants, 1);
	tu_close_unlink(h, seg);
}

/* A thread that holds a lock private to the process (shmt__sleep_quiet
 * raised, as fork.c and a resolved limiter's re-resolution do) sleeps on
 * a shard lock without calling the hooks. */
static void
test_hooks_quiet(void **state)
{
	int ready, go;
	struct rec r;
	char seg[96];
	shmt_t *h;
	pid_t pid;

	(void)state;
	h = segment(seg, sizeof(seg), "hkqt");
	pid = holder(seg, HOLD_LOCKS_BRIEFLY, &ready, &go);
	holder_ready(ready);
	rec_init(&r, -1);
	assert_int_equal(shmt_set_sleep_hooks(h, rec_before, rec_after, &r),
	    0);
	shmt__sleep_quiet++;
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	shmt__sleep_quiet--;
	assert_int_equal(r.before, 0);
	assert_int_equal(r.after, 0);
	holder_done(pid, ready, go);
	tu_close_unlink(h, seg);
}

/* After a move, the handle's calls go to the next generation, and so do
 * its hooks: a lock wait there calls them. */
static void
test_hooks_follow_move(void **state)
{
	struct waited wt;
	struct rec r;
	char seg[96];
	shmt_t *h, *w;

	(void)state;
	h = segment(seg, sizeof(seg), "hkmv");
	assert_int_equal(shmt_open(seg, &w), 0);
	rec_init(&r, -1);
	/* Set before the move: the hooks must reach the next generation. */
	assert_int_equal(shmt_set_sleep_hooks(w, rec_before, rec_after, &r),
	    0);
	assert_int_equal(shmt_try_use_key(w, "a"), 1);
	move_bigger(h);
	/* W's next call follows the move; then the new generation's locks
	 * are held by another process. */
	assert_int_equal(shmt_try_use_key(w, "a"), 1);
	assert_non_null(w->gen_next);
	wt.pid = holder(seg, HOLD_LOCKS, &wt.ready, &wt.go);
	holder_ready(wt.ready);
	r.go_fd = wt.go;
	assert_int_equal(shmt_set(w, "k", 1, "v", 1, 0), 0);
	assert_true(r.before >= 1);
	rec_paired(&r);
	holder_done(wt.pid, wt.ready, wt.go);
	tu_close_unlink(w, seg);
}

/* A lock-free get that finds a writer of another process in the middle of
 * a write (the shard's version odd, its lock held by a live process) waits
 * for it, yielding its CPU, inside the hooks. */
static void
test_hooks_reader_wait(void **state)
{
	struct waited w;
	char seg[96], buf[16];
	size_t n;
	shmt_t *h;

	(void)state;
	h = segment(seg, sizeof(seg), "hkrd");
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	wait_begin(&w, h, seg, HOLD_WRITING);
	assert_int_equal(shmt_get(h, "k", 1, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 1);
	wait_end(&w);
	tu_close_unlink(h, seg);
}

/* A handle whose segment moved follows it into the next generation on its
 * next call; when that generation is itself frozen by a live mover, the
 * follow waits for the move's outcome inside the hooks too. */
static void
test_hooks_follow_frozen(void **state)
{
	struct waited wt;
	char seg[96];
	shmt_t *h, *w;

	(void)state;
	h = segment(seg, sizeof(seg), "hkff");
	assert_int_equal(shmt_open(seg, &w), 0);
	assert_int_equal(shmt_try_use_key(w, "a"), 1);
	move_bigger(h);
	/* The next generation frozen before W follows into it. */
	wait_begin(&wt, w, seg, HOLD_FREEZE);
	assert_int_equal(shmt_try_use_key(w, "a"), 1);
	assert_non_null(w->gen_next);
	wait_end(&wt);
	tu_close_unlink(w, seg);
}

/*
 * A hooked sleep inside a call, and a grace period of the library's
 * reclaim worker (after a handle followed two moves): the sleep's hook has
 * handed a "runtime lock" to another thread, which forks while holding it.
 * fork()'s prepare handler waits for the grace period, which must not wait
 * for the sleeping thread (its AFTER hook needs the runtime lock back): a
 * sleep that begins while the worker waits runs no hook, and the worker
 * waits for hooked sleeps to end before its grace period.  Run in a child
 * whose alarm fails the test on a deadlock.
 */
static pthread_mutex_t fk_gil = PTHREAD_MUTEX_INITIALIZER;
static int fk_in_before, fk_done;
static shmt_t *fk_w;

static void
fk_before(void *ctx)
{
	(void)ctx;
	__atomic_store_n(&fk_in_before, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&fk_gil);
}

static void
fk_after(void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&fk_gil);
}

static void *
fk_writer(void *arg)
{
	int rc;

	(void)arg;
	pthread_mutex_lock(&fk_gil);
	rc = shmt_set(fk_w, "k", 1, "v", 1, 0);
	pthread_mutex_unlock(&fk_gil);
	__atomic_store_n(&fk_done, rc == 0 ? 1 : 2, __ATOMIC_SEQ_CST);
	return NULL;
}

static int
fk_run(void *arg)
{
	const char *seg = arg;
	shmt_config_t c;
	char err[512] = "";
	int ready, go, st;
	shmt_t *h, *h2;
	pthread_t t;
	pid_t pid, child;

	if (shmt_open(seg, &fk_w) != 0 || shmt_open(seg, &h) != 0)
		return 1;
	shmt_set_sleep_hooks(fk_w, fk_before, fk_after, NULL);
	tu_config_small(&c);
	c.dict_bytes *= 2;
	if (shmt__move(h, &c, NULL, NULL, err, sizeof(err)) != 0)
		return 2;
	shmt_close(h);
	/* W follows the first move; the second leaves its next generation
	 * moved, and W's next call follows it and queues a reclaim. */
	if (shmt_try_use_key(fk_w, "a") != 1 || shmt_open(seg, &h2) != 0)
		return 3;
	c.dict_bytes *= 2;
	if (shmt__move(h2, &c, NULL, NULL, err, sizeof(err)) != 0)
		return 4;
	shmt_close(h2);
	pid = holder(seg, HOLD_LOCKS_BRIEFLY, &ready, &go);
	holder_ready(ready);
	pthread_create(&t, NULL, fk_writer, NULL);
	while (!__atomic_load_n(&fk_in_before, __ATOMIC_SEQ_CST) &&
	    !__atomic_load_n(&fk_done, __ATOMIC_SEQ_CST))
		tu_pause_ms(1);
	pthread_mutex_lock(&fk_gil);
	tu_pause_ms(20);        /* the worker in its grace period, or not */
	child = fork();
	if (child == 0)
		_exit(0);
	pthread_mutex_unlock(&fk_gil);
	if (child < 0 || waitpid(child, &st, 0) != child)
		return 5;
	pthread_join(t, NULL);
	holder_done(pid, ready, go);
	shmt_close(fk_w);
	return __atomic_load_n(&fk_done, __ATOMIC_SEQ_CST) == 1 ? 0 : 6;
}

static void
test_hooks_fork_in_grace_period(void **state)
{
	char seg[96];
	shmt_t *h;

	(void)state;
	h = segment(seg, sizeof(seg), "hkgp");
	assert_int_equal(tu_child_result(fk_run, seg, 30), 0);
	tu_close_unlink(h, seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_hooks_args, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_not_on_fast_path,
		    tu_sweep),
		cmocka_unit_test_teardown(test_hooks_lock_wait, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_frozen_grant, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_quiet, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_follow_move, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_reader_wait, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_follow_frozen, tu_sweep),
		cmocka_unit_test_teardown(test_hooks_fork_in_grace_period,
		    tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
