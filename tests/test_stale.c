/* SPDX-License-Identifier: MIT */
/*
 * A removed segment is never used silently, and a segment is never shared
 * across PID or time namespaces:
 * - shmt_unlink() retires the segment before its name goes: every handle
 *   on it, in this process and in others, answers SHMT_ESTALE from its next
 *   call (limiters, dictionary, counters), while a new segment under the
 *   same name serves new handles;
 * - a segment removed by hand (shm_unlink, rm) is found by the next
 *   housekeeping (the daemon's), which retires it the same way, and,
 *   without a daemon, by the workers' own look at the name (paced: at
 *   most once a second per handle, every 64th call of a thread);
 * - a process in another PID (or time) namespace gets SHMT_ENAMESPACE at
 *   open, both from a header that says so and from a real unshare(2) when
 *   this process may create namespaces (root in CI; skipped, and said so,
 *   otherwise).
 */
#include "segment.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ST_S 1000000000ULL

static shmt_t *
st_make(char *seg, size_t cap, const char *tag)
{
	shmt_limit_t l = { .limit = 1000, .window_ns = 60 * ST_S,
		.slack_ns = ST_S, .slack_uses = 100 };
	shmt_t *h = NULL;

	tu_segname(seg, cap, tag);
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "api", &l), 0);
	return h;
}

/* Every kind of call on H answers RC. */
static void
st_calls_give(shmt_t *h, int rc)
{
	char buf[16];
	uint64_t n = 0;
	size_t vlen = 0;

	assert_int_equal(shmt_try_use_key(h, "api"), rc);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), rc);
	assert_int_equal(shmt_get(h, "k", 1, buf, sizeof(buf), &vlen), rc);
	assert_int_equal(shmt_hit(h, "c", 1, &n), rc);
}

static void
test_unlink_retires(void **state)
{
	char seg[96], buf[16];
	shmt_t *a, *b, *fresh = NULL;
	size_t vlen = 0;
	uint64_t n = 0;
	int up[2], down[2], st;
	char go = 0;
	pid_t pid;

	(void)state;
	a = st_make(seg, sizeof(seg), "unlink");
	assert_int_equal(shmt_open(seg, &b), 0);
	assert_int_equal(shmt_try_use_key(b, "api"), 1);
	assert_int_equal(shmt_set(b, "k", 1, "v", 1, 0), 0);
	assert_int_equal(shmt_get(a, "k", 1, buf, sizeof(buf), &vlen), 0);
	assert_int_equal(shmt_hit(a, "c", 1, &n), 0);

	/* A child attached before the removal must learn of it too: it
	 * attaches and grants, says so, waits for the removal, tries again. */
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_t *c = NULL;
		char x = 1;

		if (shmt_open(seg, &c) != 0 ||
		    shmt_try_use_key(c, "api") != 1)
			_exit(1);
		if (write(up[1], &x, 1) != 1 || read(down[0], &x, 1) != 1)
			_exit(3);
		_exit(shmt_try_use_key(c, "api") == SHMT_ESTALE ? 0 : 2);
	}
	assert_int_equal(read(up[0], &go, 1), 1);
	assert_int_equal(shmt_unlink(seg), 0);
	assert_int_equal(write(down[1], &go, 1), 1);
	st_calls_give(a, SHMT_ESTALE);
	st_calls_give(b, SHMT_ESTALE);
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	for (int i = 0; i < 2; i++) {
		close(up[i]);
		close(down[i]);
	}

	/* The name serves a new segment; the old handles stay stale. */
	fresh = st_make(seg, sizeof(seg), "unlink");
	assert_int_equal(shmt_try_use_key(fresh, "api"), 1);
	assert_int_equal(shmt_get(fresh, "k", 1, buf, sizeof(buf), &vlen),
	    -ENOENT);
	st_calls_give(a, SHMT_ESTALE);
	shmt_close(a);
	shmt_close(b);
	shmt_close(fresh);
	assert_int_equal(shmt_unlink(seg), 0);
}

static void
test_removed_by_hand(void **state)
{
	char seg[96];
	shmt_t *a, *b;
	int rc;

	(void)state;
	a = st_make(seg, sizeof(seg), "hand");
	assert_int_equal(shmt_open(seg, &b), 0);
	assert_true(shmt_housekeep(a, NULL) >= 0);
	/* Removed without shmt_unlink: nothing is written into the mapping,
	 * so calls go on until housekeeping (or a worker's paced look, which
	 * this call may be) looks at the object. */
	assert_int_equal(shm_unlink(seg), 0);
	rc = shmt_try_use_key(b, "api");
	assert_true(rc == 1 || rc == SHMT_ESTALE);
	assert_int_equal(shmt_housekeep(a, NULL), SHMT_ESTALE);
	st_calls_give(a, SHMT_ESTALE);
	st_calls_give(b, SHMT_ESTALE);
	assert_int_equal(shmt_housekeep(b, NULL), SHMT_ESTALE);
	shmt_close(a);
	shmt_close(b);
}

static uint64_t
st_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * ST_S + (uint64_t)ts.tv_nsec;
}

/*
 * No daemon: a worker granting in a loop (named calls and a resolved
 * limiter, alternately) while its segment is removed by hand and another
 * one created under the name.  The worker's own paced look at the name
 * finds the old segment without a name and retires it: the worker gets
 * SHMT_ESTALE (never another grant from the dead segment after that),
 * opens the name again and grants from the new segment its limit, 5.
 * Real time (the pace is the coarse monotonic clock): the bound asserted,
 * 3 s, is the 1 s pace with room for a loaded machine; the figure is
 * printed.
 */
static void
test_removed_no_daemon(void **state)
{
	shmt_limit_t l5 = { .limit = 5, .window_ns = 60 * ST_S,
		.slack_ns = ST_S, .slack_uses = 5 };
	uint64_t *sh, removed, seen;
	char seg[96];
	shmt_t *a, *b;
	pid_t pid;
	int st;

	(void)state;
	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	a = st_make(seg, sizeof(seg), "nodaemon");
	shmt_close(a);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_limiter_t *lh;
		uint64_t i = 0;
		int rc = 1, n = 0;

		alarm(20);
		if (shmt_open(seg, &b) != 0 ||
		    shmt_limiter_open(b, "api", &lh) != 0)
			_exit(2);
		/* Until the removal, then until the look finds it. */
		while (rc == 1 || rc == 0) {
			uint64_t r;

			rc = i++ % 2 ? shmt_try_use_key(b, "api") :
			    shmt_limiter_try(lh, NULL, 0);
			__atomic_store_n(&sh[0], 1, __ATOMIC_RELEASE);
			/* The removal's time, read once: read twice, a
			 * removal between the reads looked 10 s old. */
			r = __atomic_load_n(&sh[1], __ATOMIC_ACQUIRE);
			if (r != 0 && st_mono() > r + ST_S * 10)
				_exit(3);    /* never found */
		}
		sh[2] = st_mono();
		if (rc != SHMT_ESTALE)
			_exit(4);
		/* Found: no call on the old segment grants any more. */
		if (shmt_try_use_key(b, "api") != SHMT_ESTALE ||
		    shmt_limiter_try(lh, NULL, 0) != SHMT_ESTALE)
			_exit(5);
		shmt_limiter_close(lh);
		shmt_close(b);
		/* The name holds the new segment, with its limiter, once the
		 * parent says so (the look may find the name gone before
		 * the new segment is made): its limit applies. */
		while (__atomic_load_n(&sh[3], __ATOMIC_ACQUIRE) == 0)
			usleep(1000);
		if (shmt_open(seg, &b) != 0)
			_exit(6);
		while ((rc = shmt_try_use_key(b, "api")) == 1)
			n++;
		shmt_close(b);
		_exit(rc == 0 && n == 5 ? 0 : 7);
	}
	while (__atomic_load_n(&sh[0], __ATOMIC_ACQUIRE) == 0)
		usleep(1000);
	/* By hand: the name removed, a new segment made under it. */
	removed = st_mono();
	assert_int_equal(shm_unlink(seg), 0);
	__atomic_store_n(&sh[1], removed, __ATOMIC_RELEASE);
	assert_int_equal(shmt_create(seg, NULL, &a), 0);
	assert_int_equal(shmt_limiter_define(a, "api", &l5), 0);
	__atomic_store_n(&sh[3], 1, __ATOMIC_RELEASE);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	seen = sh[2];
	printf("# removed by hand, no daemon: the worker found it %.3f s "
	    "after (worker exit %d)\n", seen > removed ?
	    (double)(seen - removed) / 1e9 : 0.0, WIFEXITED(st) ?
	    WEXITSTATUS(st) : -1);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(seen - removed <= 3 * ST_S);
	shmt_close(a);
	assert_int_equal(shmt_unlink(seg), 0);
	munmap(sh, 4096);
}

/* A header that names another creator namespace is refused at open, one
 * that could not tell (0) is not. */
static void
test_namespace_in_header(void **state)
{
	struct shmt_hdr *hdr;
	char seg[96];
	shmt_t *a, *b = NULL;

	(void)state;
	a = st_make(seg, sizeof(seg), "nshdr");
	hdr = a->hdr;
	assert_int_not_equal(hdr->sh_pidns_ino, 0);
	hdr->sh_pidns_ino ^= 1;
	assert_int_equal(shmt_open(seg, &b), SHMT_ENAMESPACE);
	assert_null(b);
	hdr->sh_pidns_ino ^= 1;
	if (hdr->sh_timens_ino != 0) {
		hdr->sh_timens_dev ^= 1;
		assert_int_equal(shmt_open(seg, &b), SHMT_ENAMESPACE);
		hdr->sh_timens_dev ^= 1;
	}
	hdr->sh_pidns_dev = hdr->sh_pidns_ino = 0;
	assert_int_equal(shmt_open(seg, &b), 0);
	shmt_close(b);
	shmt_close(a);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* Fork a process in a new namespace of KIND (CLONE_NEWPID: its child is
 * the one inside) that opens SEG: its exit status is 0 for SHMT_ENAMESPACE,
 * 77 when namespaces cannot be made here, else 1. */
static int
st_open_in_new_ns(const char *seg, int kind)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		pid_t inner;
		int ist;

		if (unshare(kind) != 0)
			_exit(77);
		/* Both take effect for children only. */
		if ((inner = fork()) < 0)
			_exit(1);
		if (inner == 0) {
			shmt_t *h = NULL;
			int rc = shmt_open(seg, &h);

			if (rc == 0)
				shmt_close(h);
			_exit(rc == SHMT_ENAMESPACE ? 0 : 1);
		}
		while (waitpid(inner, &ist, 0) < 0)
			;
		_exit(WIFEXITED(ist) ? WEXITSTATUS(ist) : 1);
	}
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void
test_namespace_real(void **state)
{
	char seg[96];
	shmt_t *a;
	int rc;

	(void)state;
	a = st_make(seg, sizeof(seg), "nsreal");
	rc = st_open_in_new_ns(seg, CLONE_NEWPID);
	if (rc == 77)
		print_message("no PID namespace could be made here (not "
		    "root?): the header test above covers the check\n");
	else
		assert_int_equal(rc, 0);
#ifdef CLONE_NEWTIME
	rc = st_open_in_new_ns(seg, CLONE_NEWTIME);
	if (rc == 77)
		print_message("no time namespace could be made here\n");
	else
		assert_int_equal(rc, 0);
#endif
	/* The segment itself is untouched: this process still uses it. */
	assert_int_equal(shmt_try_use_key(a, "api"), 1);
	shmt_close(a);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_unlink_retires, tu_sweep),
		cmocka_unit_test_teardown(test_removed_by_hand, tu_sweep),
		cmocka_unit_test_teardown(test_removed_no_daemon, tu_sweep),
		cmocka_unit_test_teardown(test_namespace_in_header, tu_sweep),
		cmocka_unit_test_teardown(test_namespace_real, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
