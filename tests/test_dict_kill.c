/* SPDX-License-Identifier: MIT */
/*
 * kill -9 of dictionary writers: forked writers keep setting a small set of
 * keys with self-checking values, and the test kills one with SIGKILL at a
 * random moment (after a random number of its sets, then a random spin), at
 * least 200 times, starting a new writer after each kill, while forked
 * readers keep reading.  Nothing may hang (every wait is bounded and every
 * child has an alarm), no read may be torn, the sentinel keys written once
 * at the start must read back unchanged throughout and at the end, and
 * afterwards every shard must take sets and gets, shmt_dict_stat must show
 * the repairs, and shmt_check must find nothing wrong.
 */
#include "testutil.h"

#include <dirent.h>
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

#define DK_KILLS 200.0          /* normal build; scaled, at least DK_KILLS_MIN */
#define DK_KILLS_MIN 50
#define DK_KEYS 24              /* keys the writers write */
#define DK_SENTINELS 32
#define DK_PROBES 1024
#define DK_WRITERS 2
#define DK_READERS 2
#define DK_LARGE 65536
#define DK_POOL 4               /* prebuilt values per key and writer */
/* No call here takes more than milliseconds; these only turn a hang into a
 * loud failure instead of a stuck test. */
#define DK_ALARM 240
#define DK_PROGRESS_NS (60ULL * 1000000000ULL)

struct dk_hdr {
	uint32_t key;           /* key number; sentinels from 1000 */
	uint32_t len;
	uint64_t seed;
};

struct dk_shared {
	atomic_int stop;
	_Atomic uint64_t progress[DK_WRITERS];  /* sets done, per writer seat */
	_Atomic uint64_t reads, values, again, torn, sentinel_reads;
	char first_torn[256];
	atomic_int torn_claimed;
};

static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void
dk_body(uint64_t seed, unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = mix(seed + i);

		memcpy(p + i, &w, len - i < 8 ? len - i : 8);
	}
}

static int
dk_body_ok(uint64_t seed, const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = mix(seed + i);

		if (memcmp(p + i, &w, len - i < 8 ? len - i : 8) != 0)
			return 0;
	}
	return 1;
}

/* Key K's name: writer keys "kill-NN", sentinels "sentinel-NN". */
static size_t
dk_key(unsigned k, char key[16])
{
	if (k >= 1000)
		return (size_t)snprintf(key, 16, "sentinel-%02u", k - 1000);
	return (size_t)snprintf(key, 16, "kill-%02u", k);
}

static size_t
dk_make(unsigned k, size_t len, uint64_t seed, unsigned char *buf)
{
	struct dk_hdr hd = { k, (uint32_t)len, seed };

	memcpy(buf, &hd, sizeof(hd));
	dk_body(seed, buf + sizeof(hd), len - sizeof(hd));
	return len;
}

/* A sentinel's one value, fixed by its number. */
static size_t
dk_sentinel(unsigned s, unsigned char *buf)
{
	return dk_make(1000 + s, sizeof(struct dk_hdr) + 1 + s * 211,
	    mix(s + 0x5e17), buf);
}

static void
dk_torn(struct dk_shared *sh, unsigned k, size_t vlen, const char *why)
{
	int no = 0;

	atomic_fetch_add(&sh->torn, 1);
	if (atomic_compare_exchange_strong(&sh->torn_claimed, &no, 1))
		snprintf(sh->first_torn, sizeof(sh->first_torn),
		    "pid %d, key %u, %zu bytes: %s", (int)getpid(), k, vlen, why);
}

/* Check a value read for key K: whole, K's, and for a sentinel exactly
 * its one value.  TMP has room for a sentinel. */
static void
dk_check(struct dk_shared *sh, unsigned k, const unsigned char *buf,
    size_t vlen, unsigned char *tmp)
{
	struct dk_hdr hd;

	if (vlen < sizeof(hd)) {
		dk_torn(sh, k, vlen, "shorter than a header");
		return;
	}
	memcpy(&hd, buf, sizeof(hd));
	if (hd.key != k)
		dk_torn(sh, k, vlen, "another key's value");
	else if (hd.len != vlen)
		dk_torn(sh, k, vlen, "length differs from the header's");
	else if (!dk_body_ok(hd.seed, buf + sizeof(hd), vlen - sizeof(hd)))
		dk_torn(sh, k, vlen, "body does not match its seed");
	else if (k >= 1000 && (dk_sentinel(k - 1000, tmp) != vlen ||
	    memcmp(tmp, buf, vlen) != 0))
		dk_torn(sh, k, vlen, "a sentinel changed");
}

/* ---- Children ---------------------------------------------------------- */

static shmt_t *
dk_child_open(const char *seg)
{
	shmt_t *h = NULL;
	int rc;

	alarm(DK_ALARM);
	if ((rc = shmt_open(seg, &h)) != 0) {
		fprintf(stderr, "child %d: open: %s\n", (int)getpid(),
		    shmt_strerror(rc));
		_exit(2);
	}
	return h;
}

/* A writer: values built beforehand, so nearly all its time is spent
 * inside shmt_set (mostly copying, under the shard lock), where a kill
 * does the most damage.  Keys 0 and 1 take 64 KiB values. */
static void
dk_writer(const char *seg, struct dk_shared *sh, int seat, uint64_t seed)
{
	shmt_t *h = dk_child_open(seg);
	static unsigned char *pool[DK_KEYS][DK_POOL];
	static size_t plen[DK_KEYS][DK_POOL];
	uint64_t rs = seed;

	for (unsigned k = 0; k < DK_KEYS; k++) {
		for (int i = 0; i < DK_POOL; i++) {
			size_t len = k < 2 ? DK_LARGE : sizeof(struct dk_hdr) +
			    tu_rand(&rs) % 2048;

			pool[k][i] = malloc(len);
			if (pool[k][i] == NULL)
				_exit(4);
			plen[k][i] = dk_make(k, len, tu_rand(&rs), pool[k][i]);
		}
	}
	for (;;) {
		unsigned k = (unsigned)(tu_rand(&rs) % DK_KEYS);
		int i = (int)(tu_rand(&rs) % DK_POOL), rc;
		char key[16];
		size_t klen = dk_key(k, key);

		if (tu_rand(&rs) % 32 == 0) {
			rc = shmt_del(h, key, klen);
			rc = rc == -ENOENT ? 0 : rc;
		} else {
			rc = shmt_set(h, key, klen, pool[k][i], plen[k][i], 0);
		}
		/* SHMT_ELOCKED is the documented "try again": a live holder
		 * kept the shard's lock over the call's patience (descheduled
		 * on a loaded machine).  A lock that is never recovered still
		 * fails the test: the writer stops making progress. */
		if (rc == SHMT_ELOCKED)
			continue;
		if (rc != 0) {
			fprintf(stderr, "writer %d: set: %s\n", (int)getpid(),
			    shmt_strerror(rc));
			_exit(3);
		}
		atomic_fetch_add(&sh->progress[seat], 1);
	}
}

static void
dk_reader(const char *seg, struct dk_shared *sh, uint64_t seed)
{
	shmt_t *h = dk_child_open(seg);
	unsigned char *buf = malloc(DK_LARGE), *tmp = malloc(DK_LARGE);
	uint64_t rs = seed;

	if (buf == NULL || tmp == NULL)
		_exit(4);
	while (!atomic_load(&sh->stop)) {
		unsigned k = (unsigned)(tu_rand(&rs) % (DK_KEYS + DK_SENTINELS));
		char key[16];
		size_t vlen = 0, klen;
		int rc;

		if (k >= DK_KEYS)
			k = 1000 + k - DK_KEYS;
		klen = dk_key(k, key);
		rc = shmt_get(h, key, klen, buf, DK_LARGE, &vlen);
		atomic_fetch_add(&sh->reads, 1);
		if (rc == -EAGAIN) {
			atomic_fetch_add(&sh->again, 1);
			continue;
		}
		if (rc == -ENOENT && k < 1000)
			continue;
		if (rc != 0) {
			dk_torn(sh, k, vlen, k >= 1000 ? "a sentinel is gone" :
			    "get failed");
			continue;
		}
		atomic_fetch_add(&sh->values, 1);
		sh->sentinel_reads += k >= 1000;
		dk_check(sh, k, buf, vlen, tmp);
	}
	shmt_close(h);
	_exit(0);
}

/* ---- The parent -------------------------------------------------------- */

static uint64_t
dk_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static pid_t
dk_start_writer(const char *seg, struct dk_shared *sh, int seat,
    uint64_t seed)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		dk_writer(seg, sh, seat, seed);
	return pid;
}

/* Wait until the writer in SEAT has done TARGET sets.  A writer that stops
 * making progress is stuck (a lock never recovered): fail. */
static void
dk_wait_progress(struct dk_shared *sh, int seat, uint64_t target, pid_t pid)
{
	uint64_t t0 = dk_now();

	while (atomic_load(&sh->progress[seat]) < target) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid)
			fail_msg("writer %d ended by itself (status 0x%x)",
			    (int)pid, st);
		if (dk_now() - t0 > DK_PROGRESS_NS)
			fail_msg("writer %d made no progress for 60 s: stuck",
			    (int)pid);
		sched_yield();
	}
}

static void
dk_kill(pid_t pid)
{
	int st;

	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fail_msg("writer %d ended with status 0x%x before the kill",
		    (int)pid, st);
}

static void
dk_wait_ok(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("reader %d ended with status 0x%x%s", (int)pid, st,
		    WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ?
		    " (stuck: the alarm ended it)" : "");
}

/* After the kills: the sentinels are unchanged and every writer key holds
 * a whole value or none. */
static void
dk_final_values(shmt_t *h, struct dk_shared *sh, unsigned char *buf,
    unsigned char *tmp)
{
	for (unsigned k = 0; k < DK_KEYS + DK_SENTINELS; k++) {
		unsigned key_no = k < DK_KEYS ? k : 1000 + k - DK_KEYS;
		size_t vlen = 0, klen;
		char key[16];
		int rc;

		klen = dk_key(key_no, key);
		rc = shmt_get(h, key, klen, buf, DK_LARGE, &vlen);
		if (rc == -ENOENT && key_no < 1000)
			continue;
		if (rc != 0)
			fail_msg("key %s at the end: %s", key, shmt_strerror(rc));
		dk_check(sh, key_no, buf, vlen, tmp);
	}
}

/* Every shard takes writes and reads: DK_PROBES fresh keys spread over the
 * shards by the hash (with 1024 keys and at most 8 shards, a shard left
 * out has a chance below 1e-58), each set, read back and deleted. */
static void
dk_probe_shards(shmt_t *h, unsigned char *buf)
{
	for (unsigned i = 0; i < DK_PROBES; i++) {
		char key[32], val[32];
		int n = snprintf(key, sizeof(key), "probe-%u", i);
		int m = snprintf(val, sizeof(val), "value-%u", i * 7);
		size_t vlen = 0;

		assert_int_equal(shmt_set(h, key, (size_t)n, val, (size_t)m, 0),
		    0);
		assert_int_equal(shmt_get(h, key, (size_t)n, buf, DK_LARGE,
		    &vlen), 0);
		assert_int_equal(vlen, m);
		assert_memory_equal(buf, val, (size_t)m);
		assert_int_equal(shmt_del(h, key, (size_t)n), 0);
	}
}

static void
dk_report(void *ctx, const char *problem)
{
	printf("# check: %s\n", problem);
}

static shmt_t *
dk_create(char *seg, size_t cap, unsigned char *buf)
{
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	/* Few slots: the slots of killed writers must be reaped for the new
	 * ones to attach, which the run needs many times over. */
	cfg.max_slots = 32;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = 16ULL << 20;
	cfg.dict_shards = 4;
	/* Eviction off: the sentinels must never make room, and a block a
	 * killed writer leaked and no repair took back would show up as
	 * -ENOSPC. */
	cfg.dict_eviction = 0;
	cfg.counters_bytes = 0;
	tu_segname(seg, cap, "dkill");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	for (unsigned s = 0; s < DK_SENTINELS; s++) {
		char key[16];
		size_t klen = dk_key(1000 + s, key);
		size_t len = dk_sentinel(s, buf);

		assert_int_equal(shmt_set(h, key, klen, buf, len, 0), 0);
	}
	return h;
}

static void
test_kill_writers(void **state)
{
	uint64_t seed = tu_seed("test_dict_kill"), rs = seed;
	double want = DK_KILLS * tu_scale();
	unsigned kills = want < DK_KILLS_MIN ? DK_KILLS_MIN : (unsigned)want;
	pid_t writers[DK_WRITERS], readers[DK_READERS];
	unsigned char *buf = malloc(DK_LARGE), *tmp = malloc(DK_LARGE);
	struct dk_shared *sh;
	shmt_dict_stat_t ds;
	char seg[96];
	shmt_t *h;
	int problems;

	assert_non_null(buf);
	assert_non_null(tmp);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	h = dk_create(seg, sizeof(seg), buf);
	for (int i = 0; i < DK_READERS; i++) {
		fflush(stdout);
		if ((readers[i] = fork()) == 0)
			dk_reader(seg, sh, seed + 50 + (uint64_t)i);
	}
	for (int i = 0; i < DK_WRITERS; i++)
		writers[i] = dk_start_writer(seg, sh, i, tu_rand(&rs));
	for (unsigned n = 0; n < kills; n++) {
		int seat = (int)(n % DK_WRITERS);
		uint64_t sets = 1 + tu_rand(&rs) % 48;
		unsigned spin = (unsigned)(tu_rand(&rs) % 20000);

		/* A random moment: after a random number of the writer's
		 * sets, then a random number of idle turns. */
		dk_wait_progress(sh, seat, atomic_load(&sh->progress[seat]) +
		    sets, writers[seat]);
		for (volatile unsigned i = 0; i < spin; i++)
			;
		dk_kill(writers[seat]);
		writers[seat] = dk_start_writer(seg, sh, seat, tu_rand(&rs));
	}
	for (int i = 0; i < DK_WRITERS; i++) {
		dk_wait_progress(sh, i, atomic_load(&sh->progress[i]) + 1,
		    writers[i]);
		dk_kill(writers[i]);
	}
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < DK_READERS; i++)
		dk_wait_ok(readers[i]);

	dk_final_values(h, sh, buf, tmp);
	dk_probe_shards(h, buf);
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	problems = shmt_check(h, dk_report, NULL);
	printf("# kill: %u kills (and %d more at the end); %" PRIu64 " reads, %"
	    PRIu64 " values checked (%" PRIu64 " of sentinels), %" PRIu64
	    " -EAGAIN, %" PRIu64 " torn; %" PRIu64 " repairs; %d problems "
	    "found by shmt_check\n", kills, DK_WRITERS, sh->reads, sh->values,
	    sh->sentinel_reads, sh->again, sh->torn, ds.repairs, problems);
	if (sh->torn != 0)
		fail_msg("%" PRIu64 " bad reads; the first: %s", sh->torn,
		    sh->first_torn);
	assert_int_equal(problems, 0);
	assert_true(ds.repairs > 0);
	assert_true(sh->sentinel_reads > 0);
	/* -EAGAIN only while a dead writer's shard waits for its repair. */
	assert_true(sh->again * 100 <= sh->reads);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	munmap(sh, sizeof(*sh));
	free(buf);
	free(tmp);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_kill_writers, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
