/* SPDX-License-Identifier: MIT */
/*
 * Targeted damage: each test writes one precise lie into the segment, as a
 * process that can write it may, and checks that the library answers with
 * an error, promptly, without crashing and without changing anything:
 * a lock word naming a live process that does not hold it, a counter item
 * shorter than its ring, a chain that links to itself, creation parameters
 * changed while an open runs, an object truncated under its users, and a
 * full shard asked to take an item that can never fit.  Every test runs
 * under an alarm, so a hang fails instead of stalling the suite.
 */
#include "testutil.h"

#include "dict.h"
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A lock whose live owner sleeps is given up on after 100 ms; this
 * leaves room for a loaded machine while staying far below the old
 * ten-second stalls. */
#define HC_PROMPT_NS 1500000000ULL
/* An owner that runs gets 1 s (it may be a preempted writer); the same
 * room on top. */
#define HC_PROMPT_BUSY_NS 2500000000ULL
#define HC_ALARM 30

static void
small_config(shmt_config_t *cfg)
{
	tu_config_tiny(cfg);
	cfg->max_limiters = 4;
	cfg->analyzer_bytes = 0;
}

static struct shmt_shard *
shard0(const struct shmt_store *st)
{
	return (struct shmt_shard *)st->base;
}

/* ---- A lock word naming a live process ------------------------------------ */

/* A child that attaches to NAME, takes shard 0's lock for real (HOW 1),
 * or keeps running without it (HOW 2), or neither (HOW 0), reports its pid
 * on a pipe and waits to be killed (sleeping, unless it runs). */
static pid_t
attached_child(const char *name, int how)
{
	int p[2];
	pid_t pid, got = 0;

	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_t *c = NULL;
		pid_t me = getpid();

		alarm(HC_ALARM);
		close(p[0]);
		if (shmt_open(name, &c) != 0)
			_exit(2);
		if (how == 1 &&
		    shmt__lock(c, &shard0(c->dict)->ds_lock) != 0)
			_exit(3);
		if (write(p[1], &me, sizeof(me)) != sizeof(me))
			_exit(4);
		for (;;)
			if (how != 2)
				pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &got, sizeof(got)), sizeof(got));
	close(p[0]);
	assert_int_equal(got, pid);
	return pid;
}

static void
reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

struct hc_report {
	char text[512];
	int n;
};

static void
keep_report(void *ctx, const char *problem)
{
	struct hc_report *r = ctx;

	if (r->n++ == 0 || strstr(r->text, "lock") == NULL)
		snprintf(r->text, sizeof(r->text), "%s", problem);
}

static void
test_lock_live_owner(void **state)
{
	struct hc_report rep = { .n = 0 };
	struct shmt_shard *sh;
	shmt_config_t cfg;
	shmt_limit_t l;
	char name[128], pidtxt[32];
	shmt_t *h = NULL;
	uint64_t t0, dt;
	pid_t child;
	int rc;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "lk");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	sh = shard0(h->dict);
	child = attached_child(name, 0);

	/* The child is alive and attached, but holds nothing. */
	__atomic_store_n(&sh->ds_lock.lk_owner, (uint32_t)child, __ATOMIC_RELEASE);
	t0 = tu_mono_ns();
	rc = shmt_set(h, "k", 1, "v", 1, 0);
	dt = tu_mono_ns() - t0;
	printf("# set on a lock naming live pid %d: %s after %.3f s\n",
	    (int)child, shmt_strerror(rc), dt / 1e9);
	assert_int_equal(rc, SHMT_ELOCKED);
	assert_true(dt < HC_PROMPT_NS);
	/* Never taken from a live owner. */
	assert_int_equal(__atomic_load_n(&sh->ds_lock.lk_owner, __ATOMIC_ACQUIRE),
	    (uint32_t)child);

	/* The check names the owner, promptly. */
	t0 = tu_mono_ns();
	rc = shmt_check(h, keep_report, &rep);
	dt = tu_mono_ns() - t0;
	printf("# check: %d problems after %.3f s: %s\n", rc, dt / 1e9, rep.text);
	assert_true(rc >= 1);
	assert_true(dt < HC_PROMPT_NS);
	snprintf(pidtxt, sizeof(pidtxt), "process %d", (int)child);
	assert_non_null(strstr(rep.text, pidtxt));
	assert_int_equal(__atomic_load_n(&sh->ds_lock.lk_owner, __ATOMIC_ACQUIRE),
	    (uint32_t)child);

	/* The limiter table's lock: define gives up as promptly. */
	__atomic_store_n(&h->hdr->sh_table_lock.lk_owner, (uint32_t)child,
	    __ATOMIC_RELEASE);
	memset(&l, 0, sizeof(l));
	l.limit = 5, l.window_ns = 1000000000ULL, l.slack_ns = 1000000ULL;
	l.slack_uses = 1;
	t0 = tu_mono_ns();
	rc = shmt_limiter_define(h, "x", &l);
	dt = tu_mono_ns() - t0;
	printf("# define: %s after %.3f s\n", shmt_strerror(rc), dt / 1e9);
	assert_int_equal(rc, SHMT_ELOCKED);
	assert_true(dt < HC_PROMPT_NS);
	assert_int_equal(shmt_limiter_stat(h, "x", &(shmt_limiter_stat_t){ 0 }),
	    -ENOENT);

	/* Once that process is gone, its word is recovered as a dead owner's. */
	reap(child);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);

	/* A word naming a live process that runs (busy with its own work)
	 * gets the longer bound, and is not taken either. */
	child = attached_child(name, 2);
	__atomic_store_n(&sh->ds_lock.lk_owner, (uint32_t)child, __ATOMIC_RELEASE);
	t0 = tu_mono_ns();
	rc = shmt_set(h, "k", 1, "v", 1, 0);
	dt = tu_mono_ns() - t0;
	printf("# set on a lock naming busy pid %d: %s after %.3f s\n",
	    (int)child, shmt_strerror(rc), dt / 1e9);
	assert_int_equal(rc, SHMT_ELOCKED);
	assert_true(dt < HC_PROMPT_BUSY_NS);
	assert_int_equal(__atomic_load_n(&sh->ds_lock.lk_owner, __ATOMIC_ACQUIRE),
	    (uint32_t)child);
	reap(child);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	assert_int_equal(shmt_limiter_define(h, "x", &l), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* A real writer stopped with SIGSTOP while it holds the lock is never
 * robbed: others get SHMT_ELOCKED, and after SIGCONT the lock is its own. */
static void
test_lock_stopped_holder(void **state)
{
	struct shmt_shard *sh;
	shmt_config_t cfg;
	char name[128], v[8];
	shmt_t *h = NULL;
	uint64_t t0, dt;
	size_t vlen;
	pid_t child;
	int rc, st;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "lks");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt_set(h, "k", 1, "old", 3, 0), 0);
	sh = shard0(h->dict);
	child = attached_child(name, 1);
	assert_int_equal(kill(child, SIGSTOP), 0);
	assert_int_equal(waitpid(child, &st, WUNTRACED), child);
	assert_true(WIFSTOPPED(st));
	for (int i = 0; i < 3; i++) {
		t0 = tu_mono_ns();
		rc = shmt_set(h, "k", 1, "new", 3, 0);
		dt = tu_mono_ns() - t0;
		assert_int_equal(rc, SHMT_ELOCKED);
		assert_true(dt < HC_PROMPT_NS);
		assert_int_equal(__atomic_load_n(&sh->ds_lock.lk_owner,
		    __ATOMIC_ACQUIRE), (uint32_t)child);
	}
	assert_int_equal(shmt_get(h, "k", 1, v, sizeof(v), &vlen), 0);
	assert_int_equal(vlen, 3);
	assert_memory_equal(v, "old", 3);
	assert_int_equal(kill(child, SIGCONT), 0);
	reap(child);
	assert_int_equal(shmt_set(h, "k", 1, "new", 3, 0), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* ---- Items that lie ---------------------------------------------------------- */

/* A value that with any key of these tests is too long for a bucket's
 * slot (store.h): its item is in a chain of the heap. */
#define LONG_VALUE "a value of forty bytes: too long for any"

static struct shmt_bucket *
index_of(const struct shmt_store *st)
{
	return (struct shmt_bucket *)(st->base + st->index_off);
}

static char *
heap_of(const struct shmt_store *st)
{
	return st->base + st->heap_off;
}

/* The chain link (link_make()) of the only item in ST's shard 0. */
static uint64_t
only_item(const struct shmt_store *st, uint64_t *bucket)
{
	const struct shmt_bucket *index = index_of(st);
	uint64_t link = 0;

	for (uint64_t b = 0; b < st->nbuckets; b++) {
		if (index[b].bk_head != 0) {
			assert_int_equal(link, 0);
			link = index[b].bk_head;
			*bucket = b;
		}
	}
	assert_true(link != 0);
	return link;
}

/* A counter item whose value is shorter than its shape: the hit is refused
 * and not one byte of the segment changes. */
static void
test_counter_short_value(void **state)
{
	struct tu_clock clk = { .now = 1000000000ULL };
	const struct shmt_store *st;
	struct shmt_item *it;
	shmt_config_t cfg;
	char name[128], *copy;
	uint64_t b, count = 0, size;
	shmt_t *h = NULL;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "cnt");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	shmt_set_clock(h, tu_clock_read, &clk);
	assert_int_equal(shmt_hit(h, "c", 1, &count), 0);
	assert_int_equal(count, 1);
	st = h->counters;
	it = (struct shmt_item *)(heap_of(st) + link_off(only_item(st, &b)));
	assert_true(item_vlen(it) > 40);
	/* Shorter than its shape: not even the head of the value fits. */
	it->it_lens = lens_make(item_klen(it), 8);
	size = h->size;
	copy = malloc(size);
	assert_non_null(copy);
	clk.now += cfg.counters_window_ns / 2;  /* a write of new sub-windows */
	memcpy(copy, h->base, size);
	assert_int_equal(shmt_hit(h, "c", 1, &count), SHMT_ECORRUPT);
	assert_memory_equal(copy, h->base, size);
	free(copy);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* Every chain of a shard leads into one item that links to itself. */
static void
make_cycle(const struct shmt_store *st)
{
	uint64_t b, link = only_item(st, &b);
	struct shmt_bucket *index = index_of(st);
	struct shmt_item *it = (struct shmt_item *)(heap_of(st) +
	    link_off(link));

	it->it_next = link;
	for (b = 0; b < st->nbuckets; b++) {
		index[b].bk_head = link;
		/* Every bucket's filter passes the key, so that a get walks
		 * into the cycle. */
		index[b].bk_filter = UINT32_MAX;
	}
}

static void
test_chain_cycle(void **state)
{
	char name[128], kbuf[SHMT_KEY_MAX];
	uint64_t cursor = 0, count;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	size_t klen;
	int64_t sum;
	int rc = 0, keys = 0;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "cyc");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	/* A value too long for the bucket's slot: the item is in a chain. */
	assert_int_equal(shmt_set(h, "a", 1, LONG_VALUE, strlen(LONG_VALUE),
	    0), 0);
	assert_int_equal(shmt_hit(h, "a", 1, NULL), 0);
	make_cycle(h->dict);
	make_cycle(h->counters);

	/* The walk reports the damage before it returns a key twice. */
	for (int i = 0; i < 4; i++) {
		rc = shmt_dict_next(h, &cursor, kbuf, sizeof(kbuf), &klen);
		if (rc != 1)
			break;
		keys++;
	}
	printf("# walk over a cycle: %d keys, then %s\n", keys,
	    shmt_strerror(rc));
	assert_int_equal(rc, SHMT_ECORRUPT);
	assert_true(keys <= 1);

	/* Writers that walk a chain to its end report it too. */
	assert_int_equal(shmt_set(h, "b", 1, "2", 1, 0), SHMT_ECORRUPT);
	assert_int_equal(shmt_add(h, "b", 1, "2", 1, 0), SHMT_ECORRUPT);
	assert_int_equal(shmt_del(h, "b", 1), SHMT_ECORRUPT);
	assert_int_equal(shmt_incr(h, "b", 1, 1, &sum), SHMT_ECORRUPT);
	assert_int_equal(shmt_hit(h, "b", 1, &count), SHMT_ECORRUPT);
	/* The damage is left for shmt_check to name: nothing was linked. */
	assert_int_equal(shard0(h->dict)->ds_items, 1);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* Every bucket of the dictionary's shard leads into one chain that holds
 * all its items, each where its own key does not lead but one: no cycle,
 * no invalid item, yet a walk that passed over misplaced items would read
 * the whole chain again for every bucket (buckets x items steps: minutes
 * with a full heap).  The walk names the damage at the first bucket. */
static void
test_walk_shared_chain(void **state)
{
	char name[128], key[16], kbuf[SHMT_KEY_MAX];
	const struct shmt_store *st;
	struct shmt_shard *sh;
	uint64_t cursor = 0, first = 0, *tail = &first, b;
	size_t klen;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int n = 0, rc;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "share");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	for (int i = 0; i < 2000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(shmt_set(h, key, strlen(key), LONG_VALUE,
		    strlen(LONG_VALUE), 0), 0);
	}
	st = h->dict;
	sh = shard0(st);
	/* String every item of every chain into one. */
	for (b = 0; b < st->nbuckets; b++) {
		uint64_t l = shard_index(st, sh)[b].bk_head;

		while (l != 0) {
			struct shmt_item *it = (struct shmt_item *)(
			    shard_heap(st, sh) + link_off(l));

			*tail = l;
			tail = &it->it_next;
			l = it->it_next;
			n++;
		}
	}
	*tail = 0;
	assert_int_equal(n, 2000);
	for (b = 0; b < st->nbuckets; b++) {
		shard_index(st, sh)[b].bk_head = first;
		shard_index(st, sh)[b].bk_filter = UINT32_MAX;
	}
	rc = shmt_dict_next(h, &cursor, kbuf, sizeof(kbuf), &klen);
	printf("# walk over one chain shared by every bucket: %s\n",
	    rc == 1 ? "a key" : shmt_strerror(rc));
	assert_int_equal(rc, SHMT_ECORRUPT);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* ---- Nothing changes on error ------------------------------------------------ */

/* The keys of H's dictionary, sorted, one per line, into a malloc'd text. */
static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *
key_list(shmt_t *h, int *n)
{
	char *keys[256], kbuf[SHMT_KEY_MAX + 1], *out;
	uint64_t cursor = 0;
	size_t klen, len = 1;
	int rc;

	*n = 0;
	while ((rc = shmt_dict_next(h, &cursor, kbuf, SHMT_KEY_MAX, &klen)) == 1) {
		assert_true(*n < 256);
		kbuf[klen] = '\0';
		keys[(*n)++] = strdup(kbuf);
		len += klen + 1;
	}
	assert_int_equal(rc, 0);
	qsort(keys, (size_t)*n, sizeof(keys[0]), cmp_str);
	out = calloc(1, len);
	assert_non_null(out);
	for (int i = 0; i < *n; i++) {
		strcat(out, keys[i]);
		strcat(out, "\n");
		free(keys[i]);
	}
	return out;
}

/* Replacing a small value with one that needs the whole shard can never
 * fit while the old value stays: refused before anything is evicted. */
static void
test_set_never_fits(void **state)
{
	shmt_dict_stat_t before, after;
	char name[128], k[32], v[64], *big, *keys0, *keys1;
	size_t vlen;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int n0, n1;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "fit");
	small_config(&cfg);
	cfg.dict_eviction = 1;
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	big = calloc(1, SHMT_VALUE_MAX);
	assert_non_null(big);
	/* Too long for its bucket's slot: the old value is in the heap. */
	assert_int_equal(shmt_set(h, "small", 5, LONG_VALUE,
	    strlen(LONG_VALUE), 0), 0);
	/* 50 items of 32 KiB blocks next to it. */
	for (int i = 0; i < 50; i++) {
		snprintf(k, sizeof(k), "key-%02d", i);
		assert_int_equal(shmt_set(h, k, strlen(k), big, 30000, 0), 0);
	}
	assert_int_equal(shmt_dict_stat(h, &before), 0);
	assert_int_equal(before.items, 51);
	keys0 = key_list(h, &n0);
	assert_int_equal(n0, 51);

	assert_int_equal(shmt_set(h, "small", 5, big, SHMT_VALUE_MAX, 0),
	    -ENOSPC);
	assert_int_equal(shmt_replace(h, "small", 5, big, SHMT_VALUE_MAX, 0),
	    -ENOSPC);

	assert_int_equal(shmt_dict_stat(h, &after), 0);
	keys1 = key_list(h, &n1);
	printf("# keys before %d, after %d; evictions %llu -> %llu\n", n0, n1,
	    (unsigned long long)before.evictions,
	    (unsigned long long)after.evictions);
	assert_int_equal(n1, n0);
	assert_string_equal(keys1, keys0);
	assert_int_equal(after.evictions, before.evictions);
	assert_int_equal(after.used, before.used);
	assert_int_equal(shmt_get(h, "small", 5, v, sizeof(v), &vlen), 0);
	assert_int_equal(vlen, strlen(LONG_VALUE));
	assert_memory_equal(v, LONG_VALUE, strlen(LONG_VALUE));
	/* A new key of that size may evict everything: it fits then. */
	assert_int_equal(shmt_set(h, "huge", 4, big, SHMT_VALUE_MAX, 0), 0);
	free(keys0);
	free(keys1);
	free(big);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* ---- The header changed under an open ------------------------------------------ */

#define HC_OPENS 2000

/* A child that maps NAME and flips the dictionary's size in the header's
 * creation parameters between its true value and a far larger one, until
 * it is killed. */
static pid_t
flipper(const char *name, uint64_t true_bytes)
{
	int p[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = shm_open(name, O_RDWR, 0);
		struct stat st;
		struct shmt_hdr *hdr;

		alarm(HC_ALARM);
		if (fd < 0 || fstat(fd, &st) != 0)
			_exit(2);
		hdr = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0);
		if (hdr == MAP_FAILED)
			_exit(3);
		if (write(p[1], "g", 1) != 1)
			_exit(4);
		/* Each value stays for a moment, so that opens see both. */
		for (;;) {
			__atomic_store_n(&hdr->sh_params.sp_dict_bytes,
			    true_bytes << 6, __ATOMIC_RELAXED);
			for (volatile int i = 0; i < 2000; i++)
				;
			__atomic_store_n(&hdr->sh_params.sp_dict_bytes,
			    true_bytes, __ATOMIC_RELAXED);
			for (volatile int i = 0; i < 2000; i++)
				;
		}
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void
test_open_header_changing(void **state)
{
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL;
	pid_t flip, opener;
	int st;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "flip");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	flip = flipper(name, cfg.dict_bytes);
	/* The opens run in a child of their own, so that a crash is told
	 * from a failed check. */
	fflush(stdout);
	opener = fork();
	assert_true(opener >= 0);
	if (opener == 0) {
		int ok = 0, refused = 0;

		alarm(HC_ALARM);
		for (int i = 0; i < HC_OPENS; i++) {
			shmt_t *o = NULL;
			shmt_dict_stat_t ds;
			uint64_t cursor = 0;
			char kbuf[SHMT_KEY_MAX];
			size_t klen;
			int rc = shmt_open(name, &o);

			if (rc != 0) {
				if (rc != SHMT_ECORRUPT)
					_exit(10);
				refused++;
				continue;
			}
			/* Consistent geometry: the one the segment was made
			 * with, used over the whole dictionary. */
			if (shmt_dict_stat(o, &ds) != 0 ||
			    ds.bytes != cfg.dict_bytes || ds.shards != 1)
				_exit(11);
			if (shmt_set(o, "k", 1, "v", 1, 0) != 0)
				_exit(12);
			while (shmt_dict_next(o, &cursor, kbuf, sizeof(kbuf),
			    &klen) == 1)
				;
			shmt_close(o);
			ok++;
		}
		printf("# %d opens while the header changed: %d attached, "
		    "%d refused (SHMT_ECORRUPT)\n", HC_OPENS, ok, refused);
		fflush(stdout);
		_exit(0);
	}
	assert_int_equal(waitpid(opener, &st, 0), opener);
	reap(flip);
	if (WIFSIGNALED(st))
		printf("# the opener died of signal %d\n", WTERMSIG(st));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* With the header left alone, an open attaches. */
	h->hdr->sh_params.sp_dict_bytes = cfg.dict_bytes;
	{
		shmt_t *o = NULL;

		assert_int_equal(shmt_open(name, &o), 0);
		shmt_close(o);
	}
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

/* ---- A truncated object -------------------------------------------------------- */

static void
count_report(void *ctx, const char *problem)
{
	struct hc_report *r = ctx;

	if (r->n++ == 0)
		snprintf(r->text, sizeof(r->text), "%s", problem);
}

/* Truncating the object under its users is the one damage the library
 * cannot survive in every call (the missing pages raise SIGBUS); the check,
 * the statistics and every open name it without touching those pages. */
static void
test_truncated(void **state)
{
	const uint64_t cuts[] = { 0, 100, 4096, 0 };
	shmt_segment_stat_t ss;
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL, *o = NULL;

	(void)state;
	alarm(HC_ALARM);
	tu_segname(name, sizeof(name), "trunc");
	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	assert_int_equal(shmt_segment_stat(h, &ss), 0);
	/* Cut off the last half, then all but the first page, then all but
	 * the first 100 bytes (less than a header). */
	for (int i = 0; i < 3; i++) {
		struct hc_report rep = { .n = 0 };
		uint64_t cut = i == 0 ? h->size / 2 : cuts[3 - i];
		int fd = shm_open(name, O_RDWR, 0);

		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, (off_t)cut), 0);
		close(fd);
		assert_int_equal(shmt_check(h, count_report, &rep), SHMT_ESIZE);
		printf("# cut to %llu bytes: check says \"%s\"\n",
		    (unsigned long long)cut, rep.text);
		assert_int_equal(rep.n, 1);
		assert_non_null(strstr(rep.text, "truncated"));
		assert_int_equal(shmt_segment_stat(h, &ss), SHMT_ESIZE);
		assert_int_equal(shmt_open(name, &o), SHMT_ESIZE);
		assert_null(o);
	}
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_lock_live_owner, tu_sweep),
		cmocka_unit_test_teardown(test_lock_stopped_holder, tu_sweep),
		cmocka_unit_test_teardown(test_counter_short_value, tu_sweep),
		cmocka_unit_test_teardown(test_chain_cycle, tu_sweep),
		cmocka_unit_test_teardown(test_walk_shared_chain, tu_sweep),
		cmocka_unit_test_teardown(test_set_never_fits, tu_sweep),
		cmocka_unit_test_teardown(test_open_header_changing, tu_sweep),
		cmocka_unit_test_teardown(test_truncated, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
