/* SPDX-License-Identifier: MIT */
/*
 * The windowed counters across processes.  Every process injects the same
 * clock, frozen inside one sub-window, so the exact count of a key is the
 * number of its hits and shmt_count over the whole window must answer it:
 *
 * - test_count_mp: forked writers hit the same two keys at once (they
 *   start together); no hit is lost (the answer is the exact total, and
 *   each shmt_hit answered at most that total).
 * - test_count_kill: writers are killed with kill -9 at seeded random
 *   moments (a random number of hits, then a random number of idle turns)
 *   and replaced.  Each writer records a hit in shared memory after
 *   shmt_hit returned it, so for every key
 *       acknowledged  <=  answer  <=  acknowledged + kills
 *   (a killed writer had at most one hit in flight), and shmt_check finds
 *   no problem once the next locker has repaired the shards.
 */
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEC 1000000000ULL
#define CM_KEYS 8
#define CM_WRITERS 4
#define CM_HITS 50000
#define CM_KILLS 200
#define CM_KILLS_MIN 40
#define CM_T0 (100 * 3600 * SEC + 17)

struct cm_shared {
	_Atomic uint64_t acked[CM_WRITERS][CM_KEYS];
	_Atomic uint64_t progress[CM_WRITERS];
	_Atomic uint64_t over;          /* answers above the total possible */
	_Atomic int ready, go;          /* test_count_mp: start together */
};

static void
cm_key(unsigned k, char *key, size_t *klen)
{
	*klen = (size_t)snprintf(key, 16, "cnt-%u", k);
}

static shmt_t *
cm_create(char *seg, size_t cap)
{
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 1ULL << 20;
	cfg.counters_shards = 2;
	tu_segname(seg, cap, "cntmp");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	return h;
}

/* A writer in SEAT: LIMIT hits (0: until killed) on keys drawn from SEED,
 * each recorded after shmt_hit returned. */
static void
cm_writer(const char *seg, struct cm_shared *sh, int seat, uint64_t seed,
    uint64_t limit)
{
	struct tu_clock clk = { CM_T0 };
	uint64_t rs = seed | 1, bound = (uint64_t)CM_WRITERS * CM_HITS;
	shmt_t *h = NULL;
	int rc;

	alarm(120);
	if ((rc = shmt_open(seg, &h)) != 0 ||
	    (rc = shmt_set_clock(h, tu_clock_read, &clk)) != 0) {
		fprintf(stderr, "writer %d: %s\n", (int)getpid(),
		    shmt_strerror(rc));
		_exit(2);
	}
	if (limit != 0) {
		atomic_fetch_add(&sh->ready, 1);
		while (!atomic_load(&sh->go))
			sched_yield();
	}
	for (uint64_t n = 0; limit == 0 || n < limit; n++) {
		/* All at once on two keys, or spread over all keys. */
		unsigned k = (unsigned)(tu_rand(&rs) % (limit != 0 ? 2 :
		    CM_KEYS));
		uint64_t count = 0;
		char key[16];
		size_t klen;

		cm_key(k, key, &klen);
		if ((rc = shmt_hit(h, key, klen, &count)) != 0) {
			fprintf(stderr, "writer %d: hit: %s\n", (int)getpid(),
			    shmt_strerror(rc));
			_exit(3);
		}
		if (limit != 0 && count > bound)
			atomic_fetch_add(&sh->over, 1);
		atomic_fetch_add(&sh->acked[seat][k], 1);
		atomic_fetch_add(&sh->progress[seat], 1);
	}
	shmt_close(h);
	_exit(0);
}

static pid_t
cm_start(const char *seg, struct cm_shared *sh, int seat, uint64_t seed,
    uint64_t limit)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		cm_writer(seg, sh, seat, seed, limit);
	return pid;
}

static void
cm_report(void *ctx, const char *problem)
{
	(void)ctx;
	printf("# check: %s\n", problem);
}

/* The acknowledged hits of key K, over every seat. */
static uint64_t
cm_acked(struct cm_shared *sh, unsigned k)
{
	uint64_t n = 0;

	for (int s = 0; s < CM_WRITERS; s++)
		n += atomic_load(&sh->acked[s][k]);
	return n;
}

/* The parent's answer for key K over the whole window (on the frozen
 * clock), asked twice: a read does not count. */
static uint64_t
cm_count(shmt_t *h, unsigned k)
{
	uint64_t a = 0, b = 0;
	char key[16];
	size_t klen;

	cm_key(k, key, &klen);
	assert_int_equal(shmt_count(h, key, klen, 0, &a), 0);
	assert_int_equal(shmt_count(h, key, klen, 0, &b), 0);
	assert_int_equal(a, b);
	return a;
}

static struct cm_shared *
cm_shared_new(void)
{
	struct cm_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	return sh;
}

static void
test_count_mp(void **state)
{
	uint64_t seed = tu_seed("test_count_mp"), total = 0;
	struct tu_clock clk = { CM_T0 };
	struct cm_shared *sh = cm_shared_new();
	pid_t pid[CM_WRITERS];
	char seg[96];
	shmt_t *h = cm_create(seg, sizeof(seg));

	(void)state;
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	for (int i = 0; i < CM_WRITERS; i++)
		pid[i] = cm_start(seg, sh, i, seed + (uint64_t)i, CM_HITS);
	while (atomic_load(&sh->ready) < CM_WRITERS)
		sched_yield();
	atomic_store(&sh->go, 1);
	for (int i = 0; i < CM_WRITERS; i++) {
		int st;

		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail_msg("writer %d ended with status 0x%x", (int)pid[i],
			    st);
	}
	for (unsigned k = 0; k < CM_KEYS; k++) {
		uint64_t want = cm_acked(sh, k), got = cm_count(h, k);

		if (got != want)
			fail_msg("key %u: %" PRIu64 " hits, shmt_count %" PRIu64,
			    k, want, got);
		total += got;
	}
	printf("# %d writers at once, %" PRIu64 " hits on 2 keys, none lost\n",
	    CM_WRITERS, total);
	assert_int_equal(total, (uint64_t)CM_WRITERS * CM_HITS);
	assert_int_equal(atomic_load(&sh->over), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	munmap(sh, sizeof(*sh));
}

/* Wait until the writer in SEAT has TARGET hits; fail when it ends by
 * itself or stalls for a minute (a lock never recovered). */
static void
cm_wait(struct cm_shared *sh, int seat, uint64_t target, pid_t pid)
{
	time_t t0 = time(NULL);

	while (atomic_load(&sh->progress[seat]) < target) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid)
			fail_msg("writer %d ended by itself (status 0x%x)",
			    (int)pid, st);
		if (time(NULL) - t0 > 60)
			fail_msg("writer %d made no progress for 60 s",
			    (int)pid);
		sched_yield();
	}
}

static void
cm_kill(pid_t pid)
{
	int st;

	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fail_msg("writer %d ended with status 0x%x before the kill",
		    (int)pid, st);
}

static void
test_count_kill(void **state)
{
	uint64_t seed = tu_seed("test_count_kill"), rs = seed | 1;
	double want = CM_KILLS * tu_scale();
	unsigned kills = want < CM_KILLS_MIN ? CM_KILLS_MIN : (unsigned)want;
	struct tu_clock clk = { CM_T0 };
	struct cm_shared *sh = cm_shared_new();
	pid_t pid[CM_WRITERS];
	uint64_t acked = 0, total = 0;
	char seg[96];
	shmt_t *h = cm_create(seg, sizeof(seg));
	int problems;

	(void)state;
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	for (int i = 0; i < CM_WRITERS; i++)
		pid[i] = cm_start(seg, sh, i, tu_rand(&rs), 0);
	for (unsigned n = 0; n < kills; n++) {
		int seat = (int)(n % CM_WRITERS);
		uint64_t hits = 1 + tu_rand(&rs) % 64;
		unsigned spin = (unsigned)(tu_rand(&rs) % 20000);

		cm_wait(sh, seat, atomic_load(&sh->progress[seat]) + hits,
		    pid[seat]);
		for (volatile unsigned i = 0; i < spin; i++)
			;
		cm_kill(pid[seat]);
		pid[seat] = cm_start(seg, sh, seat, tu_rand(&rs), 0);
	}
	for (int i = 0; i < CM_WRITERS; i++) {
		cm_wait(sh, i, atomic_load(&sh->progress[i]) + 1, pid[i]);
		cm_kill(pid[i]);
	}
	kills += CM_WRITERS;
	for (unsigned k = 0; k < CM_KEYS; k++) {
		uint64_t a = cm_acked(sh, k), got = cm_count(h, k);

		if (got < a || got > a + kills)
			fail_msg("key %u: %" PRIu64 " hits acknowledged, %u kills, "
			    "shmt_count %" PRIu64, k, a, kills, got);
		acked += a;
		total += got;
	}
	/* Lock every shard once (keys beyond the writers' cover both shards
	 * but for a chance of 2^-63): a shard left locked by a killed writer
	 * is repaired by its next locker. */
	for (unsigned k = CM_KEYS; k < 64; k++)
		assert_int_equal(cm_count(h, k), 0);
	problems = shmt_check(h, cm_report, NULL);
	printf("# %u kills; %" PRIu64 " hits acknowledged, %" PRIu64
	    " counted; %d problems found by shmt_check\n", kills, acked, total,
	    problems);
	/* At most one hit in flight per killed writer, over all keys. */
	assert_true(total >= acked && total <= acked + kills);
	assert_int_equal(problems, 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	munmap(sh, sizeof(*sh));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_count_mp, tu_sweep),
		cmocka_unit_test_teardown(test_count_kill, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
