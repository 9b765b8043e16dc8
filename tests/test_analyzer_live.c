/* SPDX-License-Identifier: MIT */
/*
 * Queries while writers count.  Forked writers hammer one hot key (half of
 * their requests) among keys seen once each, all in one sub-window of a
 * shared injected clock, while the parent calls shmt_top_keys over and over.
 * Each writer counts a request as issued before its shmt_get and as done
 * after it.  Until enough answers were taken while the writers counted,
 * every answer must list the hot key (it holds half of every
 * request, far over the threshold), with lower <= issued hot requests after
 * the query and upper >= done hot requests before it, and a total between
 * the done requests before and the issued ones after.  A reader that let a
 * counter go because its owner was counting it at that moment would miss
 * the hot key here.
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
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AL_WRITERS 2
#define AL_T0 (1000ULL * 1000000000ULL)   /* well inside one sub-window */
#define AL_MIN_DONE 1000                   /* before the checks start */

struct al_shared {
	atomic_int stop;
	_Atomic uint64_t issued[AL_WRITERS], done[AL_WRITERS];
	_Atomic uint64_t hot_issued[AL_WRITERS], hot_done[AL_WRITERS];
};

static struct al_shared *al;
static char al_seg[96];

static uint64_t
al_sum(_Atomic uint64_t *v)
{
	uint64_t s = 0;

	for (int i = 0; i < AL_WRITERS; i++)
		s += atomic_load(&v[i]);
	return s;
}

static void
al_writer(int w, uint64_t seed)
{
	struct tu_clock clk = { .now = AL_T0 };
	uint64_t rng = seed ^ ((uint64_t)(w + 1) << 40);
	char key[32], val[16];
	size_t vlen;
	shmt_t *h;

	/* A parent that fails or dies takes its writers with it. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
		_exit(4);
	if (shmt_open(al_seg, &h) != 0)
		_exit(2);
	shmt_set_clock(h, tu_clock_read, &clk);
	for (uint64_t i = 0; !atomic_load(&al->stop); i++) {
		int hot = (i & 1) == 0, rc;
		size_t klen = hot ? 3 : (size_t)snprintf(key, sizeof(key),
		    "n%d-%" PRIu64 "-%" PRIu64, w, i, tu_rand(&rng) % 1000);

		if (hot)
			memcpy(key, "hot", 3);
		if (hot)
			atomic_fetch_add(&al->hot_issued[w], 1);
		atomic_fetch_add(&al->issued[w], 1);
		rc = shmt_get(h, key, klen, val, sizeof(val), &vlen);
		if (rc != 0 && rc != -ENOENT)
			_exit(3);
		atomic_fetch_add(&al->done[w], 1);
		if (hot)
			atomic_fetch_add(&al->hot_done[w], 1);
	}
	shmt_close(h);
	_exit(0);
}

static void
test_live_queries(void **state)
{
	struct tu_clock clk = { .now = AL_T0 };
	uint64_t seed = tu_seed("test_analyzer_live"), checked = 0, moving = 0;
	/* Answers taken while the writers count: on a loaded machine they
	 * may be descheduled, so query until enough overlapped (at most 20
	 * times as many answers). */
	uint64_t want = (uint64_t)(1500 * tu_scale()) + 100;
	shmt_hotkey_t *out = calloc(16, sizeof(*out));
	shmt_config_t cfg;
	pid_t pids[AL_WRITERS];
	shmt_t *h;
	int bad = 0;

	(void)state;
	assert_non_null(out);
	al = mmap(NULL, sizeof(*al), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(al != MAP_FAILED);
	memset(al, 0, sizeof(*al));
	tu_segname(al_seg, sizeof(al_seg), "anlive");
	shmt_config_init(&cfg);
	cfg.dict_bytes = 2ULL << 20;
	cfg.dict_shards = 1;
	cfg.counters_bytes = 0;
	assert_int_equal(shmt_create(al_seg, &cfg, &h), 0);
	/* Which keys share the hot key's counter group follows the seed too,
	 * before anything is stored or a writer forks: its own stream, so the
	 * writers' draws stay as they were. */
	{
		uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(h, &ss);
	}
	shmt_set_clock(h, tu_clock_read, &clk);
	assert_int_equal(shmt_set(h, "hot", 3, "v", 1, 0), 0);
	for (int w = 0; w < AL_WRITERS; w++) {
		pids[w] = fork();
		assert_true(pids[w] >= 0);
		if (pids[w] == 0)
			al_writer(w, seed);
	}
	while (al_sum(al->done) < AL_MIN_DONE)
		sched_yield();
	for (uint64_t q = 0; moving < want && q < 20 * want; q++) {
		shmt_top_info_t info;
		uint64_t done0 = al_sum(al->done), hot0 = al_sum(al->hot_done);
		uint64_t issued1, hot1;
		int n = shmt_top_keys(h, out, 16, &info), found = -1;

		issued1 = al_sum(al->issued);
		hot1 = al_sum(al->hot_issued);
		if (issued1 != done0)
			moving++;
		for (int i = 0; i < n && i < 16; i++)
			if (out[i].kind == SHMT_HOT_DICT && out[i].klen == 3 &&
			    out[i].kept == 3 && memcmp(out[i].key, "hot", 3) == 0)
				found = i;
		if (n < 1 || found < 0) {
			printf("# query %" PRIu64 ": the hot key is missing "
			    "(%d listed, total %" PRIu64 ", hot done %" PRIu64
			    ", seed %" PRIu64 ")\n", q, n, info.total, hot0, seed);
			bad = 1;
			break;
		}
		if (out[found].lower > hot1 || out[found].upper < hot0 ||
		    info.total < done0 || info.total > issued1) {
			printf("# query %" PRIu64 ": hot [%" PRIu64 ", %" PRIu64
			    "] against [%" PRIu64 ", %" PRIu64 "], total %"
			    PRIu64 " against [%" PRIu64 ", %" PRIu64 "] (seed %"
			    PRIu64 ")\n", q, out[found].lower, out[found].upper,
			    hot0, hot1, info.total, done0, issued1, seed);
			bad = 1;
			break;
		}
		checked++;
	}
	atomic_store(&al->stop, 1);
	for (int w = 0; w < AL_WRITERS; w++) {
		int st = 0;

		assert_int_equal(waitpid(pids[w], &st, 0), pids[w]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_false(bad);
	printf("# %" PRIu64 " answers checked, %" PRIu64 " of them while "
	    "writers were counting; %" PRIu64 " requests\n", checked, moving,
	    al_sum(al->done));
	/* The answers were taken while the summaries changed under them. */
	assert_true(moving >= want);
	shmt_close(h);
	assert_int_equal(shmt_unlink(al_seg), 0);
	munmap(al, sizeof(*al));
	free(out);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_live_queries, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
