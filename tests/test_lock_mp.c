/* SPDX-License-Identifier: MIT */
/*
 * The segment's writer lock between real processes: mutual exclusion while
 * waiters spin, sleep on the lock's futex word and are woken, with no wake
 * lost (the sleep's timeout is raised to a minute, so a lost wake hangs
 * the test and its alarm fails it) and no sleeper flag left behind; a
 * sleeping waiter killed with kill -9, and an owner killed while a waiter
 * sleeps (taken over once the sleep times out), a woken waiter that gives
 * up passing the wake on, and a snapshot that carries no lock word.
 */
#include "testutil.h"

#include "daemon.h"
#include "dict.h"
#include "limiter.h"
#include "lock.h"
#include "segment.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LK_ALARM 60
/* Long enough that a test passes only on wakes, never on timeouts. */
#define LK_SLEEP_NS (60ULL * 1000000000ULL)

struct lk_shared {
	uint64_t counter;       /* read, paused, written back under the lock */
	uint64_t inside;        /* 1 while someone holds the lock */
	uint64_t violations;    /* two holders at once */
	uint64_t takeovers;     /* shmt__lock answered 1 (nobody died) */
	uint64_t errors;
	uint64_t sleepers_seen; /* a holder found the sleeper flag set */
};

static struct shmt_lock *
lock0(shmt_t *h)
{
	return &tu_shard(h->dict, 0)->ds_lock;
}

static void
hold_ns(uint64_t ns)
{
	struct timespec ts = { 0, (long)ns };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Wait (bounded) until process PID sleeps ('S' in /proc/PID/stat): a
 * waiter whose flag is up is then inside its futex wait, not before it. */
static void
wait_asleep(pid_t pid)
{
	uint64_t t0 = tu_mono_ns();
	char path[64], buf[256], *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (;;) {
		FILE *f = fopen(path, "r");
		size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f != NULL)
			fclose(f);
		buf[n] = '\0';
		/* "pid (comm) S ...": the state follows the last ')'. */
		if ((p = strrchr(buf, ')')) != NULL && p[1] == ' ' && p[2] == 'S')
			return;
		if (tu_mono_ns() - t0 > 20000000000ULL)
			fail_msg("process %d never slept", (int)pid);
		tu_pause_ms(1);
	}
}

/* Child I of the exclusion test: ITERS turns, one in 32 (of its seed's
 * draws) held for 200-1000 us so that the others pass their spins and
 * sleep. */
static void
exclusion_child(const char *name, struct lk_shared *sh, uint64_t seed,
    int iters)
{
	shmt_t *c = NULL;
	uint64_t st = seed;

	alarm(LK_ALARM);
	shmt__lock_sleep_ns = LK_SLEEP_NS;
	if (shmt_open(name, &c) != 0)
		_exit(2);
	for (int i = 0; i < iters; i++) {
		uint64_t r = tu_rand(&st);
		int rc = shmt__lock(c, lock0(c));

		if (rc < 0) {
			__atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
			_exit(3);
		}
		if (rc == 1)
			__atomic_add_fetch(&sh->takeovers, 1, __ATOMIC_RELAXED);
		if (__atomic_exchange_n(&sh->inside, 1, __ATOMIC_ACQ_REL) != 0)
			__atomic_add_fetch(&sh->violations, 1, __ATOMIC_RELAXED);
		uint64_t v = __atomic_load_n(&sh->counter, __ATOMIC_RELAXED);
		if (r % 32 == 0) {
			hold_ns(200000 + (r >> 8) % 800000);
			if (__atomic_load_n(&lock0(c)->lk_pad, __ATOMIC_ACQUIRE))
				__atomic_add_fetch(&sh->sleepers_seen, 1,
				    __ATOMIC_RELAXED);
		}
		__atomic_store_n(&sh->counter, v + 1, __ATOMIC_RELAXED);
		__atomic_store_n(&sh->inside, 0, __ATOMIC_RELEASE);
		shmt__unlock(lock0(c));
	}
	shmt_close(c);
	_exit(0);
}

/* Four processes take one shard lock in turns, some holds long enough for
 * the others to sleep: the count is exact, no two ever held it at once,
 * nobody was taken over, waiters reached the sleep (a long hold found the
 * flag up) and every sleeper was woken (a lost wake waits a minute: the
 * alarm), and the flag ends clear.  A child's turns take milliseconds in
 * all, far from the 100 ms after which a waiter gives up on a sleeping
 * holder (a hold sleeps in nanosleep). */
static void
test_lock_exclusion_with_sleepers(void **state)
{
	enum { NPROC = 4, ITERS = 1500 };
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	uint64_t seed = tu_seed("test_lock_exclusion_with_sleepers");
	struct lk_shared *sh;
	pid_t pids[NPROC];

	(void)state;
	/* Zeroed, shared with the children (MAP_ANONYMOUS). */
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	tu_segname(name, sizeof(name), "lkx");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	for (int i = 0; i < NPROC; i++) {
		fflush(stdout);
		if ((pids[i] = fork()) < 0)
			fail_msg("fork: %s", strerror(errno));
		if (pids[i] == 0)
			exclusion_child(name, sh, seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL,
			    ITERS);
	}
	for (int i = 0; i < NPROC; i++) {
		int ws = 0;

		assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			fail_msg("child %d: %s %d (seed %llu)", i,
			    WIFEXITED(ws) ? "exit" : "signal",
			    WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws),
			    (unsigned long long)seed);
	}
	printf("lock: %llu turns, %llu long holds found a sleeper\n",
	    (unsigned long long)sh->counter,
	    (unsigned long long)sh->sleepers_seen);
	assert_int_equal(sh->counter, (uint64_t)NPROC * ITERS);
	assert_int_equal(sh->violations, 0);
	assert_int_equal(sh->takeovers, 0);
	assert_int_equal(sh->errors, 0);
	assert_true(sh->sleepers_seen > 0);
	assert_int_equal(lock0(h)->lk_owner, 0);
	assert_int_equal(lock0(h)->lk_pad, 0);
	munmap(sh, sizeof(*sh));
	tu_close_unlink(h, name);
}

/* Wait (bounded) until L's sleeper flag is up: a waiter spun and slept. */
static void
wait_for_sleeper(struct shmt_lock *l)
{
	uint64_t t0 = tu_mono_ns();

	while (__atomic_load_n(&l->lk_pad, __ATOMIC_ACQUIRE) == 0) {
		if (tu_mono_ns() - t0 > 20000000000ULL)
			fail_msg("no waiter went to sleep");
		tu_pause_ms(1);
	}
}

/* Any answer of a bounded wait: the lock (0) or SHMT_ELOCKED. */
#define WANT_0_OR_ELOCKED 100

/* A child that opens NAME and waits for shard 0's lock; exits with 0 when
 * shmt__lock answered WANT (or, for WANT_0_OR_ELOCKED, either). */
static pid_t
waiter_child(const char *name, int want)
{
	pid_t pid;

	fflush(stdout);
	if ((pid = fork()) < 0)
		fail_msg("fork: %s", strerror(errno));
	if (pid == 0) {
		shmt_t *c = NULL;
		int rc;

		alarm(LK_ALARM);
		if (shmt_open(name, &c) != 0)
			_exit(2);
		rc = shmt__lock(c, lock0(c));
		if (rc >= 0)
			shmt__unlock(lock0(c));
		_exit(rc == want || (want == WANT_0_OR_ELOCKED &&
		    (rc == 0 || rc == SHMT_ELOCKED)) ? 0 : 3);
	}
	return pid;
}

static void
reap_ok(pid_t pid)
{
	int ws = 0;

	assert_int_equal(waitpid(pid, &ws, 0), pid);
	if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
		fail_msg("child %d: %s %d", (int)pid,
		    WIFEXITED(ws) ? "exit" : "signal",
		    WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
}

/* A waiter that went to sleep behind a holder is woken by the unlock (the
 * sleep's timeout is a minute: only the wake can end it within the
 * alarm), takes the lock as a plain acquisition, and its own unlock
 * leaves the flag clear. */
static void
test_lock_sleeper_woken(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	uint64_t saved = shmt__lock_sleep_ns;
	pid_t pid;

	(void)state;
	tu_segname(name, sizeof(name), "lkw");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt__lock(h, lock0(h)), 0);
	/* The child spins, then raises the flag and sleeps for a minute at
	 * most (its alarm comes first): only the unlock's wake ends it. */
	shmt__lock_sleep_ns = LK_SLEEP_NS;
	pid = waiter_child(name, 0);
	shmt__lock_sleep_ns = saved;
	wait_for_sleeper(lock0(h));
	wait_asleep(pid);
	shmt__unlock(lock0(h));
	reap_ok(pid);
	assert_int_equal(lock0(h)->lk_owner, 0);
	assert_int_equal(lock0(h)->lk_pad, 0);
	tu_close_unlink(h, name);
}

/* kill -9 of a sleeping waiter leaves the flag up: the next unlock clears
 * it (one wake to nobody), and the lock goes on working for others. */
static void
test_lock_sleeper_killed(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	uint64_t saved;
	pid_t pid;
	int ws = 0;

	(void)state;
	tu_segname(name, sizeof(name), "lkk");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt__lock(h, lock0(h)), 0);
	pid = waiter_child(name, 0);
	wait_for_sleeper(lock0(h));
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
	assert_int_equal(lock0(h)->lk_pad, 1);
	shmt__unlock(lock0(h));
	assert_int_equal(lock0(h)->lk_owner, 0);
	assert_int_equal(lock0(h)->lk_pad, 0);
	/* Another waiter, asleep behind us, is still woken as usual (its
	 * sleep is a minute long: only the wake ends it in time). */
	assert_int_equal(shmt__lock(h, lock0(h)), 0);
	saved = shmt__lock_sleep_ns;
	shmt__lock_sleep_ns = LK_SLEEP_NS;
	pid = waiter_child(name, 0);
	wait_for_sleeper(lock0(h));
	shmt__unlock(lock0(h));
	reap_ok(pid);
	shmt__lock_sleep_ns = saved;
	assert_int_equal(lock0(h)->lk_pad, 0);
	tu_close_unlink(h, name);
}

/* An owner killed with kill -9 while a waiter sleeps: nobody unlocks, so
 * the waiter's sleep times out, it finds the owner dead and takes the lock
 * over (shmt__lock answers 1). */
static void
test_lock_owner_killed_under_sleeper(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int p[2], ws = 0;
	pid_t owner, waiter;
	char ready = 0;

	(void)state;
	tu_segname(name, sizeof(name), "lko");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	owner = tu_fork_pipe(p);
	if (owner == 0) {
		shmt_t *c = NULL;

		alarm(LK_ALARM);
		close(p[0]);
		if (shmt_open(name, &c) != 0 || shmt__lock(c, lock0(c)) != 0)
			_exit(2);
		if (write(p[1], "l", 1) != 1)
			_exit(4);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &ready, 1), 1);
	close(p[0]);
	waiter = waiter_child(name, 1);
	wait_for_sleeper(lock0(h));
	assert_int_equal(kill(owner, SIGKILL), 0);
	assert_int_equal(waitpid(owner, &ws, 0), owner);
	reap_ok(waiter);
	assert_int_equal(lock0(h)->lk_owner, 0);
	tu_close_unlink(h, name);
}

/* A woken waiter that gives up (its 1 s bound passed while the owner ran)
 * passes the wake on: the other sleeper, whose sleep is a minute long,
 * must end within its alarm.  The owner holds the lock, busy, past the
 * bound, then unlocks and takes it again at once (before the woken waiter
 * runs), so the waiter it woke finds it held and gives up. */
static void
test_lock_giveup_passes_wake(void **state)
{
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	uint64_t saved = shmt__lock_sleep_ns, t0;
	pid_t a, b;

	(void)state;
	tu_segname(name, sizeof(name), "lkg");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt__lock(h, lock0(h)), 0);
	shmt__lock_sleep_ns = LK_SLEEP_NS;
	a = waiter_child(name, WANT_0_OR_ELOCKED);
	b = waiter_child(name, WANT_0_OR_ELOCKED);
	shmt__lock_sleep_ns = saved;
	wait_for_sleeper(lock0(h));
	t0 = tu_mono_ns();
	while (tu_mono_ns() - t0 < 1200000000ULL)
		;       /* a running owner: no 100 ms bound for the waiters */
	shmt__unlock(lock0(h));
	assert_int_equal(shmt__lock(h, lock0(h)), 0);
	t0 = tu_mono_ns();
	while (tu_mono_ns() - t0 < 2000000ULL)
		;
	shmt__unlock(lock0(h));
	reap_ok(a);
	reap_ok(b);
	tu_close_unlink(h, name);
}

/* A snapshot carries no client-table lock word: restored, the row's lock
 * is free even when the image's named a thread that lives and attaches to
 * the new segment, and a new client is claimed at once. */
static void
test_lock_not_in_image(void **state)
{
	shmt_limit_t l = { .limit = 5, .window_ns = 1000000000ULL,
		.slack_ns = 1000000, .slack_uses = 2, .per_client = 1,
		.client_capacity = 8 };
	char name[64], name2[64], err[512] = "", go = 'g', got = 0;
	shmt_config_t cfg;
	shmt_t *h = NULL, *h2 = NULL;
	struct shmt__host_time now;
	unsigned char *img = NULL;
	size_t len = 0;
	int to_child[2], from_child[2], ws = 0;
	pid_t pid;

	(void)state;
	tu_segname(name, sizeof(name), "lki");
	tu_segname(name2, sizeof(name2), "lki2");
	tu_config_small(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	assert_int_equal(pipe(to_child), 0);
	pid = tu_fork_pipe(from_child);
	if (pid == 0) {
		shmt_t *c = NULL;

		alarm(LK_ALARM);
		close(to_child[1]);
		close(from_child[0]);
		if (read(to_child[0], &go, 1) != 1 || shmt_open(name2, &c) != 0)
			_exit(2);
		if (write(from_child[1], &go, 1) != 1)
			_exit(4);
		for (;;)
			pause();
	}
	close(to_child[0]);
	close(from_child[1]);
	/* The image's row names the child (one thread: its tid is its pid)
	 * as the holder of the client lock. */
	__atomic_store_n(&tu_row_of(h, "pc")->lm_client_lock.lk_owner,
	    (uint32_t)pid, __ATOMIC_RELEASE);
	shmt__host_time_now(&now);
	assert_int_equal(shmt__image_build(h, &now, &img, &len), 0);
	__atomic_store_n(&tu_row_of(h, "pc")->lm_client_lock.lk_owner, 0,
	    __ATOMIC_RELEASE);
	if (shmt__image_restore(img, len, name2, &now, NULL, NULL, err,
	    sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img);
	assert_int_equal(write(to_child[1], &go, 1), 1);
	assert_int_equal(read(from_child[0], &got, 1), 1);
	assert_int_equal(shmt_open(name2, &h2), 0);
	assert_int_equal(tu_row_of(h2, "pc")->lm_client_lock.lk_owner, 0);
	assert_int_equal(shmt_try_use(h2, "pc", "new-client", 10), 1);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	close(to_child[1]);
	close(from_child[0]);
	tu_close_unlink(h2, name2);
	tu_close_unlink(h, name);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lock_sleeper_woken),
		cmocka_unit_test(test_lock_exclusion_with_sleepers),
		cmocka_unit_test(test_lock_sleeper_killed),
		cmocka_unit_test(test_lock_owner_killed_under_sleeper),
		cmocka_unit_test(test_lock_giveup_passes_wake),
		cmocka_unit_test(test_lock_not_in_image),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
