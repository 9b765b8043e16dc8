/* SPDX-License-Identifier: MIT */
/*
 * Torn reads: forked writer processes keep rewriting (and now and then
 * deleting) a small set of keys with self-checking values while forked
 * reader processes read them without locks; every value read must be whole
 * and one writer's: its header names the key, its length and a seed, and
 * every byte after it is derived from the seed.  At least ten million reads
 * in the normal build (scaled by SHMT_STRESS_SCALE), values from 24 bytes
 * to 64 KiB.  A second test does the same with threads sharing one handle,
 * which is where ThreadSanitizer can watch the protocol.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MP_READS 10000000.0     /* reads in all, normal build */
#define MP_THREAD_READS 2000000.0
#define MP_KEYS 16
#define MP_LARGE 65536
#define MP_READERS 3
#define MP_WRITERS 2
/* No call here takes more than microseconds; a child still running after
 * this long is stuck, and the alarm ends it (and the test) loudly. */
#define MP_ALARM 240

#ifdef SHMT_SANITIZE_THREAD
/*
 * The lock-free readers copy blocks that a writer may be reusing, and check
 * the copy afterwards by the shard's version: those reads race by design.
 * tests/tsan.supp suppresses them by the reader's function, but TSan can
 * match a suppression only against a stack it still has, and a reader's
 * access is often too old for that by the time a writer reuses the block
 * ("failed to restore the stack").  So the reader threads here also tell
 * TSan to ignore their plain reads during shmt_get and shmt_dict_next, and
 * only there: atomics still synchronize, and every write, the writers'
 * included, is still checked.
 */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define READER_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define READER_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define READER_BEGIN() ((void)0)
#define READER_END() ((void)0)
#endif

/* The value's header; the body follows. */
struct mp_hdr {
	uint32_t key;
	uint32_t len;           /* the whole value, header included */
	uint64_t seed;
};

/* What each process reports back, in a shared anonymous page. */
struct mp_counts {
	_Atomic uint64_t reads, values, absent, again, torn, writes, dels;
};

struct mp_shared {
	atomic_int stop;
	struct mp_counts c[MP_READERS + MP_WRITERS + 1];
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

/* Body byte I of a value with SEED: one word of mix() per 8 bytes. */
static void
mp_body(uint64_t seed, unsigned char *p, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = mix(seed + i);

		memcpy(p + i, &w, 8);
	}
	if (i < len) {
		uint64_t w = mix(seed + i);

		memcpy(p + i, &w, len - i);
	}
}

static int
mp_body_ok(uint64_t seed, const unsigned char *p, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = mix(seed + i), got;

		memcpy(&got, p + i, 8);
		if (got != w)
			return 0;
	}
	if (i < len) {
		uint64_t w = mix(seed + i);

		return memcmp(p + i, &w, len - i) == 0;
	}
	return 1;
}

static void
mp_key(unsigned k, char key[12])
{
	snprintf(key, 12, "mp-key-%02u", k);
}

/* The size of a value of key K: keys 0 and 1 hold 64 KiB, 2 to 5 up to
 * 4 KiB, the rest up to 256 bytes. */
static size_t
mp_len(unsigned k, uint64_t *rs)
{
	size_t h = sizeof(struct mp_hdr);

	if (k < 2)
		return MP_LARGE;
	if (k < 6)
		return h + tu_rand(rs) % (4096 - h + 1);
	return h + tu_rand(rs) % (256 - h + 1);
}

/* Build a value for key K in BUF; returns its length. */
static size_t
mp_make(unsigned k, uint64_t *rs, unsigned char *buf)
{
	struct mp_hdr hd = { k, (uint32_t)mp_len(k, rs), tu_rand(rs) };

	memcpy(buf, &hd, sizeof(hd));
	mp_body(hd.seed, buf + sizeof(hd), hd.len - sizeof(hd));
	return hd.len;
}

static void
mp_torn(struct mp_shared *sh, struct mp_counts *c, unsigned k, size_t vlen,
    const char *why)
{
	int no = 0;

	atomic_fetch_add(&c->torn, 1);
	if (atomic_compare_exchange_strong(&sh->torn_claimed, &no, 1))
		snprintf(sh->first_torn, sizeof(sh->first_torn),
		    "pid %d, key %u, %zu bytes: %s", (int)getpid(), k, vlen, why);
}

/* Read key K once and check what came back. */
static void
mp_read(shmt_t *h, struct mp_shared *sh, struct mp_counts *c, unsigned k,
    unsigned char *buf)
{
	char key[12];
	struct mp_hdr hd;
	size_t vlen = 0;
	int rc;

	mp_key(k, key);
	READER_BEGIN();
	rc = shmt_get(h, key, strlen(key), buf, MP_LARGE, &vlen);
	READER_END();
	atomic_fetch_add_explicit(&c->reads, 1, memory_order_relaxed);
	if (rc == -ENOENT) {
		atomic_fetch_add_explicit(&c->absent, 1, memory_order_relaxed);
		return;
	}
	if (rc == -EAGAIN) {
		atomic_fetch_add_explicit(&c->again, 1, memory_order_relaxed);
		return;
	}
	if (rc != 0) {
		mp_torn(sh, c, k, vlen, "get failed");
		return;
	}
	atomic_fetch_add_explicit(&c->values, 1, memory_order_relaxed);
	if (vlen < sizeof(hd)) {
		mp_torn(sh, c, k, vlen, "shorter than a header");
		return;
	}
	memcpy(&hd, buf, sizeof(hd));
	if (hd.key != k)
		mp_torn(sh, c, k, vlen, "another key's value");
	else if (hd.len != vlen)
		mp_torn(sh, c, k, vlen, "length differs from the header's");
	else if (!mp_body_ok(hd.seed, buf + sizeof(hd), vlen - sizeof(hd)))
		mp_torn(sh, c, k, vlen, "body does not match its seed");
}

/* Reads mostly go to the small keys: a 64 KiB check costs as much as a
 * few hundred small ones, and the point is many reads racing many
 * writes. */
static unsigned
mp_pick_read(uint64_t *rs)
{
	uint64_t c = tu_rand(rs) % 100;

	if (c < 1)
		return (unsigned)(tu_rand(rs) % 2);
	if (c < 10)
		return 2 + (unsigned)(tu_rand(rs) % 4);
	return 6 + (unsigned)(tu_rand(rs) % (MP_KEYS - 6));
}

static void
mp_write(shmt_t *h, struct mp_counts *c, uint64_t *rs, unsigned char *buf)
{
	unsigned k = (unsigned)(tu_rand(rs) % MP_KEYS);
	uint64_t op = tu_rand(rs) % 100;
	char key[12];
	size_t len;
	int rc;

	mp_key(k, key);
	if (op < 3) {
		rc = shmt_del(h, key, strlen(key));
		if (rc != 0 && rc != -ENOENT) {
			fprintf(stderr, "writer %d: del: %s\n", (int)getpid(),
			    shmt_strerror(rc));
			_exit(3);
		}
		atomic_fetch_add_explicit(&c->dels, 1, memory_order_relaxed);
		return;
	}
	len = mp_make(k, rs, buf);
	rc = op < 10 ? shmt_add(h, key, strlen(key), buf, len, 0) :
	    op < 20 ? shmt_replace(h, key, strlen(key), buf, len, 0) :
	    shmt_set(h, key, strlen(key), buf, len, 0);
	if (rc != 0 && rc != -EEXIST && rc != -ENOENT) {
		fprintf(stderr, "writer %d: write of %zu bytes: %s\n",
		    (int)getpid(), len, shmt_strerror(rc));
		_exit(3);
	}
	atomic_fetch_add_explicit(&c->writes, 1, memory_order_relaxed);
}

static void
mp_seed_keys(shmt_t *h, uint64_t *rs, unsigned char *buf)
{
	for (unsigned k = 0; k < MP_KEYS; k++) {
		char key[12];
		size_t len = mp_make(k, rs, buf);

		mp_key(k, key);
		assert_int_equal(shmt_set(h, key, strlen(key), buf, len, 0), 0);
	}
}

/* ---- Processes --------------------------------------------------------- */

static shmt_t *
mp_child_open(const char *seg)
{
	shmt_t *h = NULL;

	alarm(MP_ALARM);
	if (shmt_open(seg, &h) != 0)
		_exit(2);
	return h;
}

static void
mp_reader(const char *seg, struct mp_shared *sh, int id, uint64_t seed,
    uint64_t quota)
{
	shmt_t *h = mp_child_open(seg);
	unsigned char *buf = malloc(MP_LARGE);
	uint64_t rs = seed;

	for (uint64_t i = 0; i < quota; i++)
		mp_read(h, sh, &sh->c[id], mp_pick_read(&rs), buf);
	free(buf);
	shmt_close(h);
	_exit(0);
}

/* A writer writes once for every four reads of its own, which keeps
 * writes frequent without starving the readers of the two cores. */
static void
mp_writer(const char *seg, struct mp_shared *sh, int id, uint64_t seed)
{
	shmt_t *h = mp_child_open(seg);
	unsigned char *buf = malloc(MP_LARGE), *rbuf = malloc(MP_LARGE);
	uint64_t rs = seed;

	while (!atomic_load(&sh->stop)) {
		mp_write(h, &sh->c[id], &rs, buf);
		for (int i = 0; i < 4; i++)
			mp_read(h, sh, &sh->c[id], mp_pick_read(&rs), rbuf);
	}
	free(buf);
	free(rbuf);
	shmt_close(h);
	_exit(0);
}

static void
mp_wait_ok(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child %d ended with status 0x%x%s", (int)pid, st,
		    WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ?
		    " (stuck: the alarm ended it)" : "");
}

static struct mp_counts
mp_sum(struct mp_shared *sh, int from, int to)
{
	struct mp_counts s;

	memset(&s, 0, sizeof(s));
	for (int i = from; i < to; i++) {
		s.reads += sh->c[i].reads;
		s.values += sh->c[i].values;
		s.absent += sh->c[i].absent;
		s.again += sh->c[i].again;
		s.torn += sh->c[i].torn;
		s.writes += sh->c[i].writes;
		s.dels += sh->c[i].dels;
	}
	return s;
}

/* The segment, its secret drawn from SEED (on a stream of its own) before
 * any key is stored or any worker opens it: which keys share a shard, and
 * so how often a reader retries, follows the seed. */
static shmt_t *
mp_create(char *seg, size_t cap, uint64_t seed)
{
	uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	/* Room for every key at its largest, twice over, in any shard:
	 * nothing is ever evicted, so a key is absent only when deleted. */
	cfg.dict_bytes = 32ULL << 20;
	cfg.dict_shards = 4;
	cfg.counters_bytes = 0;
	tu_segname(seg, cap, "dmp");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	tu_secret(h, &ss);
	return h;
}

/* Checks common to both tests: nothing torn, the reads done, -EAGAIN
 * rare, nothing evicted, and shmt_check content with the shards. */
static void
mp_verdict(shmt_t *h, struct mp_shared *sh, const struct mp_counts *r,
    const struct mp_counts *all, uint64_t target)
{
	shmt_dict_stat_t ds;

	if (all->torn != 0)
		fail_msg("%" PRIu64 " torn reads; the first: %s", all->torn,
		    sh->first_torn);
	assert_true(r->reads >= target);
	/* A reader gives up only after thousands of retries in a row, which
	 * a write-heavy shard can cause for a 64 KiB copy (mostly under the
	 * sanitizers, where copies are slow): rare, never common. */
	assert_true(all->again * 100 <= all->reads);
	assert_true(all->values > all->reads / 2);
	assert_true(all->writes > 0 && all->dels > 0);
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_int_equal(ds.evictions, 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
}

static void
test_processes(void **state)
{
	uint64_t seed = tu_seed("test_dict_mp"), rs = seed;
	uint64_t target = (uint64_t)(MP_READS * tu_scale());
	pid_t readers[MP_READERS], writers[MP_WRITERS];
	struct mp_counts r, all;
	struct mp_shared *sh;
	unsigned char *buf = malloc(MP_LARGE);
	char seg[96];
	shmt_t *h;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	assert_non_null(buf);
	memset(sh, 0, sizeof(*sh));
	h = mp_create(seg, sizeof(seg), seed);
	mp_seed_keys(h, &rs, buf);
	fflush(stdout);
	for (int i = 0; i < MP_WRITERS; i++)
		if ((writers[i] = fork()) == 0)
			mp_writer(seg, sh, MP_READERS + i, seed + 100 + i);
	for (int i = 0; i < MP_READERS; i++)
		if ((readers[i] = fork()) == 0)
			mp_reader(seg, sh, i, seed + 200 + i,
			    target / MP_READERS + 1);
	for (int i = 0; i < MP_READERS; i++)
		mp_wait_ok(readers[i]);
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < MP_WRITERS; i++)
		mp_wait_ok(writers[i]);
	r = mp_sum(sh, 0, MP_READERS);
	all = mp_sum(sh, 0, MP_READERS + MP_WRITERS);
	printf("# processes: %" PRIu64 " reads (%" PRIu64 " by readers), %"
	    PRIu64 " values checked, %" PRIu64 " absent, %" PRIu64 " -EAGAIN, %"
	    PRIu64 " torn; %" PRIu64 " writes, %" PRIu64 " deletes\n",
	    all.reads, r.reads, all.values, all.absent, all.again, all.torn,
	    all.writes, all.dels);
	mp_verdict(h, sh, &r, &all, target);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	munmap(sh, sizeof(*sh));
	free(buf);
}

/* ---- Threads ----------------------------------------------------------- */

struct mp_thread {
	shmt_t *h;
	struct mp_shared *sh;
	int id;
	uint64_t seed, quota;
	pthread_t tid;
};

/* A walk racing the writers: every key it returns must be one of the
 * test's keys, whole (a key copied from a block reused under the walk
 * would not be). */
static void
mp_walk(shmt_t *h, struct mp_shared *sh, struct mp_counts *c)
{
	char key[SHMT_KEY_MAX], want[12];
	uint64_t cursor = 0;
	size_t klen;
	int rc;

	for (;;) {
		unsigned k = 0;

		READER_BEGIN();
		rc = shmt_dict_next(h, &cursor, key, sizeof(key), &klen);
		READER_END();
		if (rc != 1)
			break;
		if (klen == 9 && sscanf(key, "mp-key-%2u", &k) == 1 &&
		    k < MP_KEYS) {
			mp_key(k, want);
			if (memcmp(key, want, 9) == 0)
				continue;
		}
		mp_torn(sh, c, k, klen, "the walk returned a torn key");
	}
	if (rc == -EAGAIN)
		atomic_fetch_add_explicit(&c->again, 1, memory_order_relaxed);
	else if (rc != 0)
		mp_torn(sh, c, 0, 0, "the walk failed");
}

/* Reader 0 also walks the keys now and then. */
static void *
mp_thread_reader(void *arg)
{
	struct mp_thread *t = arg;
	unsigned char *buf = malloc(MP_LARGE);
	uint64_t rs = t->seed;

	for (uint64_t i = 0; buf != NULL && i < t->quota; i++) {
		mp_read(t->h, t->sh, &t->sh->c[t->id], mp_pick_read(&rs), buf);
		if (t->id == 0 && i % 5000 == 0)
			mp_walk(t->h, t->sh, &t->sh->c[t->id]);
	}
	free(buf);
	return NULL;
}

static void *
mp_thread_writer(void *arg)
{
	struct mp_thread *t = arg;
	unsigned char *buf = malloc(MP_LARGE), *rbuf = malloc(MP_LARGE);
	uint64_t rs = t->seed;

	while (buf != NULL && rbuf != NULL && !atomic_load(&t->sh->stop)) {
		mp_write(t->h, &t->sh->c[t->id], &rs, buf);
		for (int i = 0; i < 4; i++)
			mp_read(t->h, t->sh, &t->sh->c[t->id],
			    mp_pick_read(&rs), rbuf);
	}
	free(buf);
	free(rbuf);
	return NULL;
}

/* Two reader threads (one of them also walking the keys) and one writer
 * thread on one handle. */
static void
test_threads(void **state)
{
	uint64_t seed = tu_seed("test_dict_mp threads"), rs = seed;
	uint64_t target = (uint64_t)(MP_THREAD_READS * tu_scale());
	struct mp_thread t[3];
	struct mp_counts r, all;
	struct mp_shared *sh = calloc(1, sizeof(*sh));
	unsigned char *buf = malloc(MP_LARGE);
	char seg[96];
	shmt_t *h;

	assert_non_null(sh);
	assert_non_null(buf);
	h = mp_create(seg, sizeof(seg), seed);
	mp_seed_keys(h, &rs, buf);
	for (int i = 0; i < 3; i++) {
		t[i] = (struct mp_thread){ h, sh, i, seed + 300 + (uint64_t)i,
		    target / 2 + 1, 0 };
		assert_int_equal(pthread_create(&t[i].tid, NULL, i < 2 ?
		    mp_thread_reader : mp_thread_writer, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(t[i].tid, NULL), 0);
	atomic_store(&sh->stop, 1);
	assert_int_equal(pthread_join(t[2].tid, NULL), 0);
	r = mp_sum(sh, 0, 2);
	all = mp_sum(sh, 0, 3);
	printf("# threads: %" PRIu64 " reads (%" PRIu64 " by readers), %"
	    PRIu64 " values checked, %" PRIu64 " -EAGAIN, %" PRIu64 " torn; %"
	    PRIu64 " writes\n", all.reads, r.reads, all.values, all.again,
	    all.torn, all.writes);
	mp_verdict(h, sh, &r, &all, target);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	free(sh);
	free(buf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_processes, tu_sweep),
		cmocka_unit_test_teardown(test_threads, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
