/* SPDX-License-Identifier: MIT */
/*
 * shmt_wait: a refused caller sleeps (its CPU time stays small while the
 * wall clock runs), is granted no earlier than the limiter allows, gives
 * up at its real-time timeout, is woken at once by a release made in
 * another process, returns -EINTR on a signal, and a waiter killed with
 * kill -9 leaves nothing that stops the next one.  Real time, short bounded
 * windows; every check holds whatever the machine's load (only lower bounds
 * on elapsed time, and upper bounds far from the values a working waiter
 * gives).
 */
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ULL

static char seg[96];
static shmt_t *h;

static uint64_t
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t
cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
	    1000000000ULL + ((uint64_t)ru.ru_utime.tv_usec +
	    (uint64_t)ru.ru_stime.tv_usec) * 1000ULL;
}

static int
setup(void **state)
{
	(void)state;
	tu_segname(seg, sizeof(seg), "wait");
	return shmt_create(seg, NULL, &h);
}

static int
teardown(void **state)
{
	shmt_close(h);
	shmt_unlink(seg);
	return tu_sweep(state);
}

/* A waiter is granted when the bucket comes back (not before), and spends
 * almost no CPU getting there. */
static void
test_wait_sleeps(void **state)
{
	shmt_limit_t l = { .limit = 2, .window_ns = 80 * MS, .slack_ns = 10 * MS,
		.slack_uses = 2 };
	shmt_decision_t d;
	uint64_t t0, t1, c0, c1;

	(void)state;
	assert_int_equal(shmt_limiter_define(h, "ws", &l), 0);
	t0 = mono();
	assert_int_equal(shmt_acquire(h, "ws", NULL, 0, 2, NULL), 1);
	c0 = cpu_ns();
	assert_int_equal(shmt_wait(h, "ws", NULL, 0, 1, 5000 * MS, &d), 1);
	c1 = cpu_ns();
	t1 = mono();
	assert_int_equal(d.granted, 1);
	/* The bucket opened after t0 and comes back at its close + window. */
	assert_true(t1 - t0 >= l.slack_ns + l.window_ns);
	printf("# waited %.1f ms, CPU %.3f ms\n", (double)(t1 - t0) / 1e6,
	    (double)(c1 - c0) / 1e6);
	/* A spinning waiter would burn most of the 90 ms. */
	assert_true(c1 - c0 < 10 * MS);
}

/* Rate mode: the next use is due one interval after the last. */
static void
test_wait_gcra(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 300 * MS,
		.mode = SHMT_MODE_GCRA, .burst = 1 };
	uint64_t t0, c0;

	(void)state;
	assert_int_equal(shmt_limiter_define(h, "wg", &l), 0);
	t0 = mono();
	assert_int_equal(shmt_acquire(h, "wg", NULL, 0, 1, NULL), 1);
	c0 = cpu_ns();
	assert_int_equal(shmt_wait(h, "wg", NULL, 0, 1, 5000 * MS, NULL), 1);
	assert_true(mono() - t0 >= 30 * MS);
	assert_true(cpu_ns() - c0 < 10 * MS);
}

static void
test_wait_timeout(void **state)
{
	shmt_limit_t l = { .limit = 1, .window_ns = 10000 * MS,
		.slack_ns = 10 * MS, .slack_uses = 1 };
	static const char *const keys[] = { "only" };
	shmt_limit_t kp = { .window_ns = 10000 * MS, .slack_ns = 10 * MS,
		.slack_uses = 1, .keys = keys, .nkeys = 1, .uses_per_key = 1 };
	shmt_decision_t d;
	char buf[8];
	uint64_t t0, t1;

	(void)state;
	assert_int_equal(shmt_limiter_define(h, "wt", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "wk", &kp), 0);
	assert_int_equal(shmt_acquire(h, "wt", NULL, 0, 1, NULL), 1);
	/* 0: one try. */
	assert_int_equal(shmt_wait(h, "wt", NULL, 0, 1, 0, &d), 0);
	assert_true(d.retry_after_ns > 9000 * MS);
	t0 = mono();
	assert_int_equal(shmt_wait(h, "wt", NULL, 0, 1, 30 * MS, &d), 0);
	t1 = mono();
	assert_int_equal(d.granted, 0);
	assert_true(t1 - t0 >= 30 * MS);
	assert_true(t1 - t0 < 5000 * MS);
	/* A key pool waits the same way and hands out its name. */
	assert_int_equal(shmt_next_key_wait(h, "wk", buf, sizeof(buf), 0, &d), 4);
	assert_string_equal(buf, "only");
	assert_int_equal(shmt_next_key_wait(h, "wk", buf, sizeof(buf), 20 * MS,
	    &d), 0);
	assert_int_equal(shmt_next_key_wait(h, "wk", buf, 2, 0, &d), -ERANGE);
	assert_int_equal(shmt_wait(h, "none", NULL, 0, 1, 0, &d), -ENOENT);
	assert_int_equal(shmt_wait(h, "wt", NULL, 0, 2, 0, &d), -EINVAL);
}

static shmt_time_t
frozen(void *ctx)
{
	(void)ctx;
	return 1000;
}

static void
on_usr1(int sig)
{
	(void)sig;
}

/* A child whose clock stands still at 1000 ns waits on LIM with a real
 * timeout of TIMEOUT; its exit status: 10 granted, 11 throttled, 13
 * -EINTR, 12 anything else.  It writes one byte to FD just before it
 * waits, and takes SIGUSR1 without SA_RESTART. */
static pid_t
waiter(int fd, const char *lim, uint64_t timeout)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct sigaction sa;
		shmt_t *c;
		int rc;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGUSR1, &sa, NULL) != 0 ||
		    shmt_open(seg, &c) != 0 ||
		    shmt_set_clock(c, frozen, NULL) != 0)
			_exit(12);
		if (write(fd, "w", 1) != 1)
			_exit(12);
		rc = shmt_wait(c, lim, NULL, 0, 1, timeout, NULL);
		_exit(rc == 1 ? 10 : rc == 0 ? 11 : rc == -EINTR ? 13 : 12);
	}
	return pid;
}

static void
pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * Another process releases the bucket: the waiter (whose own clock says
 * its retry is 10 s away) is woken at once and granted.  The parent's
 * clock is injected too, and jumps past the bucket's release.
 */
static void
test_wait_woken_by_release(void **state)
{
	shmt_limit_t l = { .limit = 2, .window_ns = 10000 * MS,
		.slack_ns = 10 * MS, .slack_uses = 2 };
	struct tu_clock clk = { 1000 };
	shmt_t *p;
	int fds[2], status;
	char b;
	uint64_t t0, t1;
	pid_t pid;

	(void)state;
	assert_int_equal(shmt_open(seg, &p), 0);
	assert_int_equal(shmt_set_clock(p, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(p, "wx", &l), 0);
	assert_int_equal(shmt_acquire(p, "wx", NULL, 0, 2, NULL), 1);
	assert_int_equal(pipe(fds), 0);
	t0 = mono();
	pid = waiter(fds[1], "wx", 5000 * MS);
	assert_int_equal(read(fds[0], &b, 1), 1);
	pause_ms(100);   /* let it go to sleep */
	clk.now = 1000 + l.slack_ns + l.window_ns;
	assert_int_equal(shmt_acquire(p, "wx", NULL, 0, 1, NULL), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	t1 = mono();
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 10);
	/* Woken by the release, not by its 10 s retry nor its 5 s timeout. */
	assert_true(t1 - t0 < 4000 * MS);
	close(fds[0]);
	close(fds[1]);
	shmt_close(p);
}

/* kill -9 of a sleeping waiter; a signal to another: -EINTR.  Then the
 * limiter works as before: a new waiter is woken by a release. */
static void
test_wait_kill_and_signal(void **state)
{
	shmt_limit_t l = { .limit = 1, .window_ns = 10000 * MS,
		.slack_ns = 10 * MS, .slack_uses = 1 };
	struct tu_clock clk = { 1000 };
	shmt_t *p;
	int fds[2], status, tries;
	char b;
	pid_t pid;

	(void)state;
	assert_int_equal(shmt_open(seg, &p), 0);
	assert_int_equal(shmt_set_clock(p, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_define(p, "wz", &l), 0);
	assert_int_equal(shmt_acquire(p, "wz", NULL, 0, 1, NULL), 1);
	assert_int_equal(pipe(fds), 0);

	pid = waiter(fds[1], "wz", 5000 * MS);
	assert_int_equal(read(fds[0], &b, 1), 1);
	pause_ms(50);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	/* Without a limit, only a signal ends the wait.  It is sent until
	 * the child is gone, in case one lands before it sleeps. */
	pid = waiter(fds[1], "wz", UINT64_MAX);
	assert_int_equal(read(fds[0], &b, 1), 1);
	for (tries = 0; tries < 200; tries++) {
		pause_ms(20);
		kill(pid, SIGUSR1);
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
	}
	assert_true(tries < 200);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 13);

	/* A new waiter is woken by a release made by another process. */
	pid = waiter(fds[1], "wz", 5000 * MS);
	assert_int_equal(read(fds[0], &b, 1), 1);
	pause_ms(50);
	clk.now = 1000 + l.slack_ns + l.window_ns;
	assert_int_equal(shmt_housekeep(p, NULL) >= 1, 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 10);
	/* The waiters granted on the real clock, this process on its own:
	 * judge the stored times against the real one, which is later. */
	assert_int_equal(shmt_set_clock(p, NULL, NULL), 0);
	assert_int_equal(shmt_check(p, NULL, NULL), 0);
	close(fds[0]);
	close(fds[1]);
	shmt_close(p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_sleeps),
		cmocka_unit_test(test_wait_gcra),
		cmocka_unit_test(test_wait_timeout),
		cmocka_unit_test(test_wait_woken_by_release),
		cmocka_unit_test(test_wait_kill_and_signal),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
