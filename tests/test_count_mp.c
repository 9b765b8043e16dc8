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
 *   no problem once the next locker has repaired the shards.  (All hits
 *   share one nanosecond: the counts are exact, however many merges the
 *   histograms made.)
 * - test_count_kill_moving: the same kills with a clock that moves: every
 *   clock read (one per shmt_hit, under the shard's lock) advances a clock
 *   shared by all processes by 1 us, and the window is 2 ms, so buckets
 *   merge and expire while writers die.  Each writer logs every acknowledged
 *   hit with the time its shmt_hit read (in a ring of the last 2^20).  At
 *   the end, for the window and
 *   shorter ones, with A the acknowledged hits inside and K the kills:
 *       A - max(1, eps A)  <=  answer  <=  A + K + max(1, eps (A + K))
 *   (the exact count of what the counter holds lies in [A, A + K]).
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
#define CM_STEP 1000ULL                 /* moving clock: ns per read */
#define CM_MWINDOW 2000000ULL           /* moving clock: the window */
#define CM_LOG (1U << 20)              /* the last hits logged, a ring */

struct cm_shared {
	_Atomic uint64_t acked[CM_WRITERS][CM_KEYS];
	_Atomic uint64_t progress[CM_WRITERS];
	_Atomic uint64_t over;          /* answers above the total possible */
	_Atomic int ready, go;          /* test_count_mp: start together */
	_Atomic uint64_t clock;         /* test_count_kill_moving */
	_Atomic uint32_t nlog;
	_Atomic uint64_t log[CM_LOG];   /* time << 4 | key + 1; 0: none */
};

/* The moving clock: each read advances the shared time by CM_STEP; the
 * value this process read last is its last hit's time. */
static uint64_t cm_last;

static uint64_t
cm_clock_moving(void *ctx)
{
	struct cm_shared *sh = ctx;

	cm_last = atomic_fetch_add(&sh->clock, CM_STEP) + CM_STEP;
	return cm_last;
}

/* The parent's reading clock: the shared time, not advanced. */
static uint64_t
cm_clock_now(void *ctx)
{
	struct cm_shared *sh = ctx;

	return atomic_load(&sh->clock);
}

static void
cm_key(unsigned k, char *key, size_t *klen)
{
	*klen = (size_t)snprintf(key, 16, "cnt-%u", k);
}

static shmt_t *
cm_create(char *seg, size_t cap, uint64_t window)
{
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 1ULL << 20;
	cfg.counters_shards = 2;
	if (window != 0)
		cfg.counters_window_ns = window;
	tu_segname(seg, cap, "cntmp");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	return h;
}

/* A writer in SEAT: LIMIT hits (0: until killed) on keys drawn from SEED,
 * each recorded after shmt_hit returned. */
static int cm_moving;                   /* writers use the moving clock */

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
	    (rc = cm_moving ? shmt_set_clock(h, cm_clock_moving, sh) :
	    shmt_set_clock(h, tu_clock_read, &clk)) != 0) {
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
		/* SHMT_ELOCKED is the contract's "try again" (a live holder
		 * descheduled past the call's patience on a loaded machine;
		 * nothing was counted): a lock never recovered still ends the
		 * writer, after a minute of tries. */
		for (int tries = 0; tries < 60; tries++)
			if ((rc = shmt_hit(h, key, klen, &count)) !=
			    SHMT_ELOCKED)
				break;
		if (rc != 0) {
			fprintf(stderr, "writer %d: hit: %s\n", (int)getpid(),
			    shmt_strerror(rc));
			_exit(3);
		}
		if (limit != 0 && count > bound)
			atomic_fetch_add(&sh->over, 1);
		if (cm_moving) {
			uint32_t i = atomic_fetch_add(&sh->nlog, 1);

			/* A ring: the hits of the last window are among the
			 * last CM_LOG by far (a window is 2000 clock reads). */
			atomic_store(&sh->log[i % CM_LOG], cm_last << 4 |
			    (k + 1));
		}
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
	shmt_t *h = cm_create(seg, sizeof(seg), 0);

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
	shmt_t *h = cm_create(seg, sizeof(seg), 0);
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

/* The acknowledged hits of key K with time in (now - w, now], from the
 * log. */
static uint64_t
cm_logged(struct cm_shared *sh, unsigned k, uint64_t now, uint64_t w)
{
	uint32_t n = atomic_load(&sh->nlog);
	uint64_t c = 0;

	for (uint32_t i = 0; i < n && i < CM_LOG; i++) {
		uint64_t e = atomic_load(&sh->log[i]);

		if (e != 0 && (e & 15) == k + 1 && now - (e >> 4) < w)
			c++;
	}
	return c;
}

static uint64_t
cm_slack(uint64_t n)
{
	uint64_t e = n / 100;           /* 1%, the default error */

	return e > 1 ? e : 1;
}

static void
test_count_kill_moving(void **state)
{
	uint64_t seed = tu_seed("test_count_kill_moving"), rs = seed | 1;
	double want = CM_KILLS * tu_scale();
	unsigned kills = want < CM_KILLS_MIN ? CM_KILLS_MIN : (unsigned)want;
	struct cm_shared *sh = cm_shared_new();
	uint64_t windows[3] = { CM_MWINDOW, CM_MWINDOW / 3, CM_MWINDOW / 20 };
	uint64_t now, checked = 0, inexact = 0;
	pid_t pid[CM_WRITERS];
	char seg[96];
	shmt_t *h = cm_create(seg, sizeof(seg), CM_MWINDOW);
	int problems;

	(void)state;
	atomic_store(&sh->clock, CM_T0);
	cm_moving = 1;
	assert_int_equal(shmt_set_clock(h, cm_clock_now, sh), 0);
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
	now = atomic_load(&sh->clock);
	for (unsigned k = 0; k < CM_KEYS; k++)
		for (int j = 0; j < 3; j++) {
			uint64_t a = cm_logged(sh, k, now, windows[j]), got = 0;
			char key[16];
			size_t klen;

			cm_key(k, key, &klen);
			assert_int_equal(shmt_count(h, key, klen, windows[j],
			    &got), 0);
			if (got + cm_slack(a) < a ||
			    got > a + kills + cm_slack(a + kills))
				fail_msg("key %u, window %" PRIu64 " ns: %" PRIu64
				    " hits acknowledged, %u kills, shmt_count %"
				    PRIu64, k, windows[j], a, kills, got);
			checked++;
			inexact += got != a;
		}
	for (unsigned k = CM_KEYS; k < 64; k++)
		assert_int_equal(cm_count(h, k), 0);
	problems = shmt_check(h, cm_report, NULL);
	printf("# %u kills, %u hits over %.1f windows; %" PRIu64 " answers "
	    "within the bound (%" PRIu64 " not exact); %d problems found by "
	    "shmt_check\n", kills, atomic_load(&sh->nlog),
	    (double)(now - CM_T0) / CM_MWINDOW, checked, inexact, problems);
	/* The clock moved past several windows: buckets expired. */
	assert_true(now - CM_T0 > 3 * CM_MWINDOW);
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
		cmocka_unit_test_teardown(test_count_kill_moving, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
