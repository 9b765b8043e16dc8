/* SPDX-License-Identifier: MIT */
/*
 * The mutex design's locks, tested on their own: a limiter has its own
 * lock, so a process holding one limiter's lock does not stop a grant on
 * another; a lock whose owner was killed with kill -9 is taken over, and
 * the limiter behind it still counts exactly.  The one-lock variant is
 * checked to be what its name says.
 */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

uint64_t
bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Two limiters (one per worker) of 1000 uses over a minute: no use expires
 * while the test runs, however slow the machine. */
static struct bench_conf
conf(void)
{
	struct bench_conf c;

	memset(&c, 0, sizeof(c));
	c.kind = BK_THROTTLE_DISTINCT;
	c.workload = "throttle-distinct";
	c.procs = 2;
	c.threads = 1;
	c.workers = 2;
	c.mode = SHMT_MODE_BUCKETS;
	c.limit = 1000;
	c.window_ns = 60ULL * 1000000000ULL;
	c.slack_ns = 1000000000ULL;
	c.slack_uses = 100;
	c.nkeys = 1000;
	c.value_size = 16;
	c.seed = 1;
	return c;
}

/* A child that attaches as worker 0, takes its limiter's lock and waits
 * to be killed; returns its pid once it holds the lock. */
static pid_t
holder(const struct bench_sys *sys, void *g, const struct bench_conf *c)
{
	int fd[2];
	char x;
	pid_t pid;

	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		void *p, *w;
		bench_op_fn op;

		/* Gone with the test, whatever ends it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fd[0]);
		if (sys->attach(g, c, &p) < 0 ||
		    sys->attach_thread(p, 0, &w, &op) < 0 ||
		    bench_mutex_hold(w) < 0)
			_exit(1);
		if (write(fd[1], "h", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fd[1]);
	assert_int_equal(read(fd[0], &x, 1), 1);
	close(fd[0]);
	return pid;
}

static void
on_alarm(int sig)
{
	(void)sig;
	/* A grant waited on a lock it should not have needed. */
	_exit(3);
}

static void
test_mutex_lock_per_limiter(void **state)
{
	struct bench_conf c = conf();
	void *g = NULL, *p, *w0, *w1;
	bench_op_fn op0, op1;
	pid_t pid;
	int n = 0;

	assert_int_equal(bench_sys_mutex.setup(&c, &g), 0);
	pid = holder(&bench_sys_mutex, g, &c);
	assert_int_equal(bench_sys_mutex.attach(g, &c, &p), 0);
	assert_int_equal(bench_sys_mutex.attach_thread(p, 1, &w1, &op1), 0);
	assert_int_equal(bench_sys_mutex.attach_thread(p, 0, &w0, &op0), 0);
	/* Limiter 1 while limiter 0's lock is held: no wait. */
	signal(SIGALRM, on_alarm);
	alarm(20);
	assert_int_equal(op1(w1, 0), 1);
	alarm(0);
	/* The holder dies with limiter 0's lock: the next grant takes the
	 * lock over (EOWNERDEAD), and the limiter counts its 1000 uses. */
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	alarm(20);
	while (n < 2000 && op0(w0, 0) == 1)
		n++;
	alarm(0);
	assert_int_equal(n, 1000);
	assert_int_equal(op0(w0, 0), 0);
	bench_sys_mutex.detach_thread(w0);
	bench_sys_mutex.detach_thread(w1);
	bench_sys_mutex.detach(p);
	bench_sys_mutex.teardown(g);
}

/* mutex-1lock: limiter 1 waits while limiter 0's holder lives, and is
 * granted once the holder is killed. */
static void
test_mutex_one_lock(void **state)
{
	struct bench_conf c = conf();
	void *g = NULL, *p, *w1;
	bench_op_fn op1;
	pid_t pid, waiter;
	int st, fd[2];
	char x;

	assert_int_equal(bench_sys_mutex_1lock.setup(&c, &g), 0);
	pid = holder(&bench_sys_mutex_1lock, g, &c);
	assert_int_equal(pipe(fd), 0);
	waiter = fork();
	assert_true(waiter >= 0);
	if (waiter == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fd[0]);
		if (bench_sys_mutex_1lock.attach(g, &c, &p) < 0 ||
		    bench_sys_mutex_1lock.attach_thread(p, 1, &w1, &op1) < 0 ||
		    write(fd[1], "w", 1) != 1)
			_exit(1);
		_exit(op1(w1, 0) == 1 ? 0 : 2);
	}
	close(fd[1]);
	assert_int_equal(read(fd[0], &x, 1), 1);
	close(fd[0]);
	/* The waiter, about to ask, cannot finish while the one lock is
	 * held (with a lock of its own it would in microseconds). */
	for (int i = 0; i < 20; i++) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		assert_int_equal(waitpid(waiter, &st, WNOHANG), 0);
		nanosleep(&ts, NULL);
	}
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	assert_int_equal(waitpid(waiter, &st, 0), waiter);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	bench_sys_mutex_1lock.teardown(g);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mutex_lock_per_limiter),
		cmocka_unit_test(test_mutex_one_lock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
