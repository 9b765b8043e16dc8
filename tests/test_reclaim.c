/* SPDX-License-Identifier: MIT */
/*
 * Reclaim of the generations a process followed past (lib/rcu.c): every
 * call runs inside a read-side section of liburcu-bp, and a generation the
 * library opened itself to follow a move is unmapped after a grace period
 * once the next one is linked.  What is checked, in /proc/self/maps (the
 * mappings of each generation's object, told apart by inode):
 * - a thread parked inside a call (in its clock) on a followed generation
 *   while another process completes a move and another thread follows it:
 *   that generation stays mapped (and readable) until the parked thread
 *   leaves, then is unmapped;
 * - ten moves in a row, each followed: the process keeps two generations
 *   mapped (the one its handle opened, the live one), not eleven;
 * - fork() with reclaims behind it: the child follows more moves and its
 *   own reclaims run (the fork handlers of liburcu-bp and of the reclaim
 *   queue: the child starts a reclaim worker of its own), the parent's
 *   too;
 * - a thread that called once and exited, and one that called once and
 *   idles outside the library: neither holds a grace period.
 * Waits for a reclaim are bounded by alarm(): a hang fails the test.
 */
#include "daemon.h"
#include "rcu.h"
#include "segment.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RC_LIMIT 1000U
#define RC_S 1000000000ULL

static void
rc_config(shmt_config_t *c, uint64_t dict_bytes)
{
	tu_config_small(c);
	c->dict_bytes = dict_bytes;
}

static void
rc_create(char *seg, const char *tag, size_t cap)
{
	shmt_limit_t l = { .limit = RC_LIMIT, .window_ns = 3600 * RC_S,
		.slack_ns = RC_S, .slack_uses = 50 };
	shmt_config_t c;
	shmt_t *m;

	tu_segname(seg, cap, tag);
	rc_config(&c, 4 << 20);
	assert_int_equal(shmt_create(seg, &c, &m), 0);
	assert_int_equal(shmt_limiter_define(m, "api", &l), 0);
	assert_int_equal(shmt_limiter_define(m, "mail", &l), 0);
	shmt_close(m);
}

/* Move SEG to a new generation from another process (sizes alternate). */
static void
rc_move_by_child(const char *seg, int i)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_config_t c;
		char err[512] = "";
		shmt_t *x;
		int rc;

		if (shmt_open(seg, &x) != 0)
			_exit(2);
		rc_config(&c, i % 2 ? 8 << 20 : 4 << 20);
		rc = shmt__move(x, &c, NULL, NULL, err, sizeof(err));
		if (rc != 0)
			fprintf(stderr, "move: %s (%s)\n", shmt_strerror(rc), err);
		shmt_close(x);
		_exit(rc == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static ino_t
rc_ino(shmt_t *h)
{
	struct stat st;

	assert_int_equal(fstat(h->fd, &st), 0);
	return st.st_ino;
}

/* The mappings in this process of /dev/shm objects: how many map INO
 * (when INO is not 0), else how many distinct objects named SEG (or
 * SEG (deleted)) are mapped. */
static int
rc_maps(ino_t ino, const char *seg)
{
	char line[1024], path[600];
	unsigned long long inos[64];
	int n = 0, count = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	assert_non_null(f);
	snprintf(path, sizeof(path), "/dev/shm%s", seg ? seg : "");
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long long in;
		char name[600] = "";
		int seen = 0;

		if (sscanf(line, "%*s %*s %*s %*s %llu %599s", &in, name) < 2 ||
		    strncmp(name, "/dev/shm/", 9) != 0)
			continue;
		if (ino != 0) {
			count += in == (unsigned long long)ino;
			continue;
		}
		if (strcmp(name, path) != 0)
			continue;
		for (int i = 0; i < n; i++)
			seen |= inos[i] == in;
		if (!seen && n < 64)
			inos[n++] = in;
	}
	fclose(f);
	return ino != 0 ? count : n;
}

/* Every reclaim asked so far has run, within 20 s (else SIGALRM). */
static void
rc_reclaimed(void)
{
	alarm(20);
	shmt__gen_reclaim_wait();
	alarm(0);
}

/* ---- a thread parked inside a call ------------------------------------ */

struct rc_park {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int armed, parked, release;
	int rc;
	shmt_t *h;
};

static shmt_time_t
rc_park_clock(void *ctx)
{
	struct rc_park *k = ctx;

	pthread_mutex_lock(&k->mu);
	if (k->armed && !k->parked) {
		k->parked = 1;
		pthread_cond_broadcast(&k->cv);
		while (!k->release)
			pthread_cond_wait(&k->cv, &k->mu);
	}
	pthread_mutex_unlock(&k->mu);
	return tu_mono_ns();
}

static void *
rc_park_thread(void *arg)
{
	struct rc_park *k = arg;

	k->rc = shmt_try_use_key(k->h, "api");
	return NULL;
}

static void
test_reclaim_parked(void **state)
{
	struct rc_park k = { .mu = PTHREAD_MUTEX_INITIALIZER,
		.cv = PTHREAD_COND_INITIALIZER };
	shmt_limiter_stat_t ls;
	char seg[96];
	shmt_t *h, *g1, *n;
	pthread_t t;
	uint64_t t0;
	ino_t ino1;

	(void)state;
	rc_create(seg, "reclaim-parked", sizeof(seg));
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, rc_park_clock, &k), 0);
	k.h = h;
	/* Generation 1, opened by the library to follow the first move. */
	rc_move_by_child(seg, 1);
	assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	g1 = shmt__gen_live(h);
	assert_true(g1 != h && g1->gen_owned);
	ino1 = rc_ino(g1);
	assert_int_equal(rc_maps(ino1, NULL), 1);
	/* A thread parks inside a grant on generation 1. */
	k.armed = 1;
	assert_int_equal(pthread_create(&t, NULL, rc_park_thread, &k), 0);
	pthread_mutex_lock(&k.mu);
	while (!k.parked)
		pthread_cond_wait(&k.cv, &k.mu);
	pthread_mutex_unlock(&k.mu);
	/* Another process moves it on; this thread follows, which links
	 * generation 2 and asks for generation 1's reclaim. */
	rc_move_by_child(seg, 2);
	assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	assert_true(shmt__gen_live(h) != g1);
	assert_true(g1->gen_reclaimed);
	/* While the thread is inside, generation 1 stays mapped and
	 * readable: for 200 ms, time enough for a reclaim that did not wait
	 * for it to have run many times over. */
	t0 = tu_mono_ns();
	do {
		assert_int_equal(rc_maps(ino1, NULL), 1);
		assert_int_equal(__atomic_load_n(&g1->hdr->sh_retired,
		    __ATOMIC_ACQUIRE), SHMT_SEG_MOVED);
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
	} while (tu_mono_ns() - t0 < 200000000ULL);
	pthread_mutex_lock(&k.mu);
	k.release = 1;
	pthread_cond_broadcast(&k.cv);
	pthread_mutex_unlock(&k.mu);
	assert_int_equal(pthread_join(t, NULL), 0);
	/* Its grant, refused on generation 1, was taken on generation 2. */
	assert_int_equal(k.rc, 1);
	rc_reclaimed();
	assert_int_equal(rc_maps(ino1, NULL), 0);
	assert_int_equal(shmt_open(seg, &n), 0);
	assert_int_equal(shmt_limiter_stat(n, "api", &ls), 0);
	assert_int_equal(ls.in_flight, 1);
	shmt_close(h);
	tu_close_unlink(n, seg);
}

/* ---- moves in a row ---------------------------------------------------- */

static void
test_reclaim_many(void **state)
{
	char seg[96];
	shmt_limiter_t *l;
	shmt_t *h;

	(void)state;
	rc_create(seg, "reclaim-many", sizeof(seg));
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_limiter_open(h, "api", &l), 0);
	assert_int_equal(rc_maps(0, seg), 1);
	for (int i = 1; i <= 10; i++) {
		rc_move_by_child(seg, i);
		/* Followed by a call on the handle, then one on the limiter
		 * handle (which resolves again on the new generation). */
		assert_int_equal(shmt_try_use_key(h, "mail"), 1);
		assert_int_equal(shmt_limiter_try(l, NULL, 0), 1);
	}
	rc_reclaimed();
	/* The generation h opened, and the live one. */
	assert_int_equal(rc_maps(0, seg), 2);
	shmt_limiter_close(l);
	shmt_close(h);
	assert_int_equal(rc_maps(0, seg), 0);
	assert_int_equal(shmt_open(seg, &h), 0);
	tu_close_unlink(h, seg);
}

/* ---- fork() with reclaims behind it ------------------------------------ */

static void
test_reclaim_fork(void **state)
{
	char seg[96];
	shmt_t *h;
	pid_t pid;
	int st;

	(void)state;
	rc_create(seg, "reclaim-fork", sizeof(seg));
	assert_int_equal(shmt_open(seg, &h), 0);
	for (int i = 1; i <= 3; i++) {
		rc_move_by_child(seg, i);
		assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	}
	/* The last reclaim may still be under way: fork now. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int bad = 0;

		alarm(20);
		for (int i = 4; i <= 6; i++) {
			rc_move_by_child(seg, i);
			bad |= shmt_try_use_key(h, "mail") != 1;
		}
		shmt__gen_reclaim_wait();
		if (rc_maps(0, seg) != 2) {
			fprintf(stderr, "child: %d generations mapped\n",
			    rc_maps(0, seg));
			bad = 1;
		}
		shmt_close(h);
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		print_message("child killed by signal %d\n", WTERMSIG(st));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The parent follows the child's moves and reclaims too. */
	assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	rc_reclaimed();
	assert_int_equal(rc_maps(0, seg), 2);
	shmt_close(h);
	assert_int_equal(shmt_open(seg, &h), 0);
	tu_close_unlink(h, seg);
}

/* ---- threads that stopped calling -------------------------------------- */

struct rc_idle {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int called, release;
	shmt_t *h;
};

static void *
rc_once_thread(void *arg)
{
	struct rc_idle *d = arg;

	(void)shmt_try_use_key(d->h, "mail");
	return NULL;
}

static void *
rc_idle_thread(void *arg)
{
	struct rc_idle *d = arg;

	(void)shmt_try_use_key(d->h, "mail");
	pthread_mutex_lock(&d->mu);
	d->called = 1;
	pthread_cond_broadcast(&d->cv);
	while (!d->release)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static void
test_reclaim_idle(void **state)
{
	struct rc_idle d = { .mu = PTHREAD_MUTEX_INITIALIZER,
		.cv = PTHREAD_COND_INITIALIZER };
	pthread_t once, idle;
	char seg[96];
	shmt_t *h, *g1;
	ino_t ino1;

	(void)state;
	rc_create(seg, "reclaim-idle", sizeof(seg));
	assert_int_equal(shmt_open(seg, &h), 0);
	d.h = h;
	rc_move_by_child(seg, 1);
	assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	g1 = shmt__gen_live(h);
	ino1 = rc_ino(g1);
	/* One thread calls on generation 1 and exits, another calls and
	 * then waits outside the library. */
	assert_int_equal(pthread_create(&once, NULL, rc_once_thread, &d), 0);
	assert_int_equal(pthread_join(once, NULL), 0);
	assert_int_equal(pthread_create(&idle, NULL, rc_idle_thread, &d), 0);
	pthread_mutex_lock(&d.mu);
	while (!d.called)
		pthread_cond_wait(&d.cv, &d.mu);
	pthread_mutex_unlock(&d.mu);
	rc_move_by_child(seg, 2);
	assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	/* Neither holds the grace period. */
	rc_reclaimed();
	assert_int_equal(rc_maps(ino1, NULL), 0);
	pthread_mutex_lock(&d.mu);
	d.release = 1;
	pthread_cond_broadcast(&d.cv);
	pthread_mutex_unlock(&d.mu);
	assert_int_equal(pthread_join(idle, NULL), 0);
	shmt_close(h);
	assert_int_equal(shmt_open(seg, &h), 0);
	tu_close_unlink(h, seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_reclaim_parked, tu_sweep),
		cmocka_unit_test_teardown(test_reclaim_many, tu_sweep),
		cmocka_unit_test_teardown(test_reclaim_fork, tu_sweep),
		cmocka_unit_test_teardown(test_reclaim_idle, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
