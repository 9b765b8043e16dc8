/* SPDX-License-Identifier: MIT */
/*
 * Concurrent creation of one segment by several processes released from a
 * barrier at the same moment, with openers polling alongside: exactly one
 * creator wins, the others get -EEXIST and can attach, no opener ever sees a
 * half-built segment, and no temporary object is left behind.  Also kill -9
 * in the middle of shmt_create: the name is then absent or complete.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CREATORS 5
#define MAX_OPENERS 2
#define MAX_PROCS (MAX_CREATORS + MAX_OPENERS)
#define SENTINEL 4242
/* Enough for any process here by orders of magnitude; it only keeps a
 * broken barrier from leaving processes behind. */
#define CHILD_ALARM 20
/* An opener that keeps finding no segment gives up after this many tries,
 * each followed by a yield: far more than the winner needs to publish. */
#define OPEN_TRIES 2000000

/* One round, in a MAP_SHARED anonymous page that every child writes. */
struct round {
	atomic_uint arrived;
	unsigned nprocs;
	int create_rc[MAX_CREATORS];
	int reopen_rc[MAX_CREATORS];
	int open_rc[MAX_OPENERS];
	int errno_bad[MAX_PROCS];
	atomic_int started;
};

static void
barrier(struct round *r)
{
	unsigned spins = 0;

	atomic_fetch_add(&r->arrived, 1);
	/* Spin, so that all leave within a few cycles of each other; yield
	 * now and then, since there may be more processes than cores. */
	while (atomic_load(&r->arrived) < r->nprocs)
		if (++spins % 4096 == 0)
			sched_yield();
}

static void
creator(struct round *r, int k, const char *name)
{
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int rc;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	/* Each creator asks for its own slot count: the segment that
	 * survives tells whose it is. */
	cfg.max_slots = 8 + (uint32_t)k;
	barrier(r);
	errno = SENTINEL;
	rc = shmt_create(name, &cfg, &h);
	r->errno_bad[k] |= errno != SENTINEL;
	r->create_rc[k] = rc;
	if (rc == -EEXIST) {
		errno = SENTINEL;
		rc = shmt_open(name, &h);
		r->errno_bad[k] |= errno != SENTINEL;
		r->reopen_rc[k] = rc;
	}
	if (h != NULL)
		shmt_close(h);
	_exit(0);
}

static void
opener(struct round *r, int k, const char *name)
{
	shmt_t *h = NULL;
	int rc = -ENOENT;

	barrier(r);
	for (long i = 0; i < OPEN_TRIES && rc == -ENOENT; i++) {
		errno = SENTINEL;
		rc = shmt_open(name, &h);
		r->errno_bad[MAX_CREATORS + k] |= errno != SENTINEL;
		/* Let a creator that shares this core finish. */
		if (rc == -ENOENT)
			sched_yield();
	}
	r->open_rc[k] = rc;
	if (rc == 0)
		shmt_close(h);
	_exit(0);
}

static pid_t
spawn(void)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		alarm(CHILD_ALARM);
	return pid;
}

static void
wait_ok(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child %d ended with status 0x%x", (int)pid, st);
}

/* Remove the temporary objects a killed creator of NAME left; return how
 * many there were. */
static int
remove_tmp(const char *name)
{
	char prefix[PATH_MAX], path[PATH_MAX + 16];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int n = 0;

	assert_non_null(d);
	snprintf(prefix, sizeof(prefix), "%s.tmp.", name + 1);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		assert_int_equal(unlink(path), 0);
		n++;
	}
	closedir(d);
	return n;
}

static void
check_round(const struct round *r, int ncreators, int nopeners,
    const char *name)
{
	shmt_segment_stat_t st;
	shmt_t *h = NULL;
	int winner = -1;

	for (int k = 0; k < ncreators; k++) {
		assert_int_equal(r->errno_bad[k], 0);
		if (r->create_rc[k] == 0) {
			if (winner >= 0)
				fail_msg("creators %d and %d both won", winner, k);
			winner = k;
			continue;
		}
		assert_int_equal(r->create_rc[k], -EEXIST);
		assert_int_equal(r->reopen_rc[k], 0);
	}
	assert_true(winner >= 0);
	for (int k = 0; k < nopeners; k++) {
		assert_int_equal(r->errno_bad[MAX_CREATORS + k], 0);
		assert_int_equal(r->open_rc[k], 0);
	}
	assert_int_equal(shmt_open(name, &h), 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	assert_int_equal(st.max_slots, 8 + winner);
	assert_int_equal(st.slots, 1);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
	assert_int_equal(remove_tmp(name), 0);
}

static void
test_create_race(void **state)
{
	struct round *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int rounds = (int)(200 * tu_scale());
	int fds = tu_fd_count();

	assert_true(r != MAP_FAILED);
	if (rounds < 10)
		rounds = 10;
	for (int i = 0; i < rounds; i++) {
		int nc = 2 + i % (MAX_CREATORS - 1), no = i % (MAX_OPENERS + 1);
		pid_t pids[MAX_PROCS];
		char name[128];

		tu_segname(name, sizeof(name), "race");
		memset(r, 0, sizeof(*r));
		for (int k = 0; k < MAX_CREATORS; k++)
			r->create_rc[k] = r->reopen_rc[k] = INT_MIN;
		for (int k = 0; k < MAX_OPENERS; k++)
			r->open_rc[k] = INT_MIN;
		r->nprocs = (unsigned)(nc + no);
		for (int k = 0; k < nc + no; k++) {
			pids[k] = spawn();
			if (pids[k] == 0 && k < nc)
				creator(r, k, name);
			if (pids[k] == 0)
				opener(r, k - nc, name);
		}
		for (int k = 0; k < nc + no; k++)
			wait_ok(pids[k]);
		check_round(r, nc, no, name);
	}
	printf("# create_race: %d rounds of 2-%d creators and 0-%d openers\n",
	    rounds, MAX_CREATORS, MAX_OPENERS);
	munmap(r, sizeof(*r));
	assert_int_equal(tu_fd_count(), fds);
}

/*
 * kill -9 at a random moment of shmt_create: afterwards the name is either
 * absent or a complete segment, and only temporary objects may be left.
 * The delay is a busy loop of random length, not a sleep: it only spreads
 * the kills over the call.
 */
static void
test_kill_during_create(void **state)
{
	uint64_t seed = tu_seed("kill_during_create");
	struct round *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int rounds = (int)(200 * tu_scale());
	int absent = 0, complete = 0, leftovers = 0;

	assert_true(r != MAP_FAILED);
	if (rounds < 10)
		rounds = 10;
	for (int i = 0; i < rounds; i++) {
		volatile uint64_t spin = tu_rand(&seed) % 3000000;
		shmt_t *h = NULL;
		char name[128];
		pid_t pid;
		int st, rc;

		tu_segname(name, sizeof(name), "kill");
		atomic_store(&r->started, 0);
		pid = spawn();
		if (pid == 0) {
			atomic_store(&r->started, 1);
			if (shmt_create(name, NULL, &h) == 0)
				shmt_close(h);
			for (;;)
				pause();
		}
		while (atomic_load(&r->started) == 0)
			sched_yield();
		while (spin > 0)
			spin = spin - 1;
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st));

		rc = shmt_open(name, &h);
		if (rc == -ENOENT) {
			absent++;
		} else {
			if (rc != 0)
				fail_msg("round %d: open after kill: %d (%s)", i,
				    rc, shmt_strerror(rc));
			complete++;
			shmt_close(h);
			assert_int_equal(shmt_unlink(name), 0);
		}
		leftovers += remove_tmp(name);
	}
	printf("# kill_during_create: %d rounds: absent %d, complete %d, "
	    "temporary objects removed %d\n", rounds, absent, complete,
	    leftovers);
	munmap(r, sizeof(*r));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_create_race, tu_sweep),
		cmocka_unit_test_teardown(test_kill_during_create, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
