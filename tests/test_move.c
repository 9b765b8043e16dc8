/* SPDX-License-Identifier: MIT */
/*
 * Segment generations (lib/move.c): a segment moved into a new one with
 * other sizes while workers run.
 * - a move carries every limiter with its uses in flight, every dictionary
 *   item with its expiry, the counters; the old generation says MOVED, the
 *   name holds the new one with the new sizes, and a handle on the old one
 *   follows on its next call; a move that cannot fit the state is undone
 *   and the old generation serves on;
 * - four forked workers grant on three limiters and write and read the
 *   dictionary while it is grown twice, through the handles they opened
 *   first: over both generations no limiter grants more than its limit
 *   (the window is longer than the test, so every grant's decision time
 *   lies in one window) nor fewer than its limit less one use per worker
 *   and move, every value written is read back after each move, and no call
 *   fails but with -EAGAIN;
 * - a thread parked inside a grant (in its clock) while another process
 *   completes the move, and another thread of its process follows the
 *   move meanwhile: it finishes on a valid mapping, its grant taken again
 *   on the new generation (one use there, none counted twice);
 * - kill -9 of the mover at seeded random points (SHMT_SEED, the seed is
 *   printed; as many kills as fit in 20 s, or 100 x SHMT_STRESS_SCALE when
 *   that is above 1)
 *   leaves exactly one authoritative generation under the name, no private
 *   object behind once settled, and no over-grant by a worker that keeps
 *   granting throughout;
 * - a mover killed by kill -9 right after its rename: the process that
 *   then marks the old generation MOVED wakes a waiter of another process
 *   asleep in shmt_wait there, which follows at once instead of sleeping
 *   to its retry time.
 */
#include "daemon.h"
#include "limiter.h"
#include "proc.h"
#include "segment.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MV_S 1000000000ULL
#define MV_LIMIT 2000U
#define MV_NLIM 3

static const char *mv_names[MV_NLIM] = { "api", "mail", "exact" };

static void
mv_config(shmt_config_t *c, uint64_t dict_bytes)
{
	tu_config_small(c);
	c->dict_bytes = dict_bytes;
}

static void
mv_define(shmt_t *h)
{
	shmt_limit_t l = { .limit = MV_LIMIT, .window_ns = 3600 * MV_S,
		.slack_ns = MV_S, .slack_uses = 50 };
	shmt_limit_t e = { .limit = 300, .window_ns = 3600 * MV_S,
		.mode = SHMT_MODE_EXACT };

	assert_int_equal(shmt_limiter_define(h, "api", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "mail", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "exact", &e), 0);
}

static uint64_t
mv_limit_of(int i)
{
	return i == 2 ? 300 : MV_LIMIT;
}

static int
mv_move(shmt_t *h, uint64_t dict_bytes)
{
	shmt_config_t c;
	char err[512] = "";
	int rc;

	mv_config(&c, dict_bytes);
	rc = shmt__move(h, &c, NULL, NULL, err, sizeof(err));
	if (rc != 0)
		print_message("move: %s (%s)\n", shmt_strerror(rc), err);
	return rc;
}

/* The names under /dev/shm that start with SEG's (without its slash). */
static int
mv_objects(const char *seg, int *moves)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t n = strlen(seg + 1);
	int count = 0;

	*moves = 0;
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, seg + 1, n) != 0)
			continue;
		if (e->d_name[n] == '\0')
			count++;
		else if (strncmp(e->d_name + n, ".move.", 6) == 0) {
			print_message("left: %s\n", e->d_name);
			(*moves)++;
		}
	}
	closedir(d);
	return count;
}

static void
test_move_carries(void **state)
{
	char seg[96], key[32], val[64], buf[64];
	shmt_limiter_stat_t ls;
	shmt_dict_stat_t ds0, ds1;
	shmt_t *h, *n;
	size_t vlen;
	uint64_t hits = 0;
	int i, moves;

	(void)state;
	tu_segname(seg, sizeof(seg), "carry");
	{
		shmt_config_t c;

		mv_config(&c, 4 << 20);
		assert_int_equal(shmt_create(seg, &c, &h), 0);
	}
	mv_define(h);
	for (i = 0; i < 700; i++)
		assert_int_equal(shmt_try_use_key(h, "api"), 1);
	for (i = 0; i < 300; i++)
		assert_int_equal(shmt_try_use_key(h, "exact"), 1);
	assert_int_equal(shmt_try_use_key(h, "exact"), 0);
	for (i = 0; i < 500; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		snprintf(val, sizeof(val), "value-%d", i * 7);
		assert_int_equal(shmt_set(h, key, strlen(key), val, strlen(val),
		    i % 2 ? 0 : 3600 * 1000), 0);
	}
	for (i = 0; i < 9; i++)
		assert_int_equal(shmt_hit(h, "c", 1, &hits), 0);
	assert_int_equal(shmt_dict_stat(h, &ds0), 0);

	/* A move whose sizes cannot hold the state is undone. */
	{
		shmt_config_t c;
		char err[256] = "";

		mv_config(&c, 4 << 20);
		c.max_limiters = 2;
		assert_int_equal(shmt__move(h, &c, NULL, NULL, err, sizeof(err)),
		    -ENOSPC);
		assert_non_null(strstr(err, "max_limiters at 3"));
		assert_int_equal(shmt_try_use_key(h, "api"), 1);
		assert_int_equal(mv_objects(seg, &moves), 1);
		assert_int_equal(moves, 0);
	}

	assert_int_equal(mv_move(h, 16 << 20), 0);
	/* The old generation takes nothing more: it says MOVED, and the
	 * handle follows to the new one on its next call. */
	assert_int_equal(h->hdr->sh_retired, SHMT_SEG_MOVED);
	assert_int_equal(mv_objects(seg, &moves), 1);
	assert_int_equal(moves, 0);
	assert_int_equal(shmt_open(seg, &n), 0);
	assert_int_equal(shmt_try_use_key(h, "api"), 1);
	assert_true(shmt__gen_live(h) != h);
	assert_int_equal(shmt_limiter_stat(n, "api", &ls), 0);
	assert_int_equal(ls.in_flight, 702);
	assert_int_equal(shmt_try_use_key(n, "exact"), 0);
	for (i = 0; i < 500; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		snprintf(val, sizeof(val), "value-%d", i * 7);
		vlen = 0;
		assert_int_equal(shmt_get(n, key, strlen(key), buf, sizeof(buf),
		    &vlen), 0);
		assert_int_equal(vlen, strlen(val));
		assert_memory_equal(buf, val, vlen);
	}
	assert_int_equal(shmt_hit(h, "c", 1, &hits), 0);
	assert_int_equal(hits, 10);
	assert_int_equal(shmt_dict_stat(n, &ds1), 0);
	assert_int_equal(ds1.items, ds0.items);
	assert_true(ds1.bytes >= 3 * ds0.bytes);
	assert_int_equal(shmt_check(n, NULL, NULL), 0);
	shmt_close(h);
	tu_close_unlink(n, seg);
}

/* ---- Four workers, two moves ------------------------------------------ */

struct mv_report {
	uint64_t granted[MV_NLIM];
	uint64_t lost[MV_NLIM];     /* grants answered ESTALE/EAGAIN */
	uint64_t reopens, keys, bad;
	int err;
};

/* A worker: grant round-robin, write its own keys, and after every reopen
 * read back every key it wrote; stop when every limiter refuses. */
static int
mv_worker(const char *seg, int id, int fd, long pace_ns, int follow)
{
	struct mv_report r;
	shmt_t *h, *seen;
	int done[MV_NLIM] = { 0 }, left = MV_NLIM;
	char key[32], val[32], buf[32];

	memset(&r, 0, sizeof(r));
	if (shmt_open(seg, &h) != 0)
		return 1;
	seen = h;
	for (uint64_t i = 0; left > 0 && r.err == 0; i++) {
		int l = (int)(i % MV_NLIM), rc;

		if (done[l])
			continue;
		if (pace_ns > 0)
			nanosleep(&(struct timespec){ 0, pace_ns }, NULL);
		rc = shmt_try_use_key(h, mv_names[l]);
		if (rc == 1) {
			r.granted[l]++;
		} else if (rc == 0) {
			done[l] = 1;
			left--;
		} else if (rc == -EAGAIN || (!follow && rc == SHMT_ESTALE)) {
			r.lost[l]++;
		} else {
			fprintf(stderr, "worker %d: %s: %s\n", id, mv_names[l],
			    shmt_strerror(rc));
			r.err = rc;
			break;
		}
		if (i % 4 == 0) {
			snprintf(key, sizeof(key), "w%d-%" PRIu64, id, r.keys);
			snprintf(val, sizeof(val), "v%" PRIu64, r.keys * 31 + 7);
			rc = shmt_set(h, key, strlen(key), val, strlen(val), 0);
			if (rc == 0)
				r.keys++;
			else if (rc != -EAGAIN && (follow || rc != SHMT_ESTALE)) {
				fprintf(stderr, "worker %d: set: %s\n", id,
				    shmt_strerror(rc));
				r.err = rc;
			}
		}
		if (follow && shmt__gen_live(h) != seen) {
			/* The handle followed a move: every key is there. */
			seen = shmt__gen_live(h);
			r.reopens++;
			for (uint64_t k = 0; k < r.keys; k++) {
				size_t vlen = 0;
				int grc;

				snprintf(key, sizeof(key), "w%d-%" PRIu64, id, k);
				snprintf(val, sizeof(val), "v%" PRIu64, k * 31 + 7);
				grc = shmt_get(h, key, strlen(key), buf,
				    sizeof(buf), &vlen);
				if (grc == -EAGAIN)
					continue;
				if (grc != 0 || vlen != strlen(val) ||
				    memcmp(buf, val, vlen) != 0) {
					if (r.bad++ < 3)
						fprintf(stderr, "worker %d: %s: "
						    "%s\n", id, key,
						    shmt_strerror(grc));
				}
			}
		}
		if (rc == SHMT_ESTALE) {
			/* Reopen, and read back every key written so far;
			 * a generation that moves meanwhile is reopened
			 * again. */
			int again = 1;

			for (int t = 0; again; t++) {
				if (t == 2000)
					return 2;
				shmt_close(h);
				h = NULL;
				if (shmt_open(seg, &h) != 0) {
					tu_pause_ms(1);
					continue;
				}
				again = 0;
				for (uint64_t k = 0; k < r.keys && !again; k++) {
					size_t vlen = 0;
					int grc;

					snprintf(key, sizeof(key), "w%d-%" PRIu64,
					    id, k);
					snprintf(val, sizeof(val), "v%" PRIu64,
					    k * 31 + 7);
					grc = shmt_get(h, key, strlen(key), buf,
					    sizeof(buf), &vlen);
					if (grc == SHMT_ESTALE || grc == -EAGAIN)
						again = 1;
					else if (grc != 0 || vlen != strlen(val) ||
					    memcmp(buf, val, vlen) != 0) {
						if (r.bad++ < 3)
							fprintf(stderr, "worker "
							    "%d: %s: %s\n", id,
							    key,
							    shmt_strerror(grc));
					}
				}
			}
			r.reopens++;
		}
	}
	shmt_close(h);
	if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		return 3;
	return 0;
}

/*
 * A walk of the keys (shmt_dict_next) across moves.  W is a handle opened
 * before every move, so its own mapping stays the first generation; H
 * moves the segment.  A walk begun after a move reads the live generation;
 * a walk cut by moves into other numbers of shards and buckets (grown,
 * then shrunk) returns every key present for the whole walk exactly once,
 * and a key deleted in the new generation before the walk reached it is
 * not returned.
 */
#define WK_KEYS 400

static int
wk_index(const char *k, size_t len)
{
	char b[32];

	assert_true(len > 3 && len < sizeof(b) && memcmp(k, "wk-", 3) == 0);
	memcpy(b, k, len);
	b[len] = '\0';
	return atoi(b + 3);
}

/* Walk on with W from *CURSOR for at most STEPS keys (-1: to the end),
 * counting each key's returns in SEEN; returns how many were returned. */
static int
wk_walk(shmt_t *w, uint64_t *cursor, int steps, int seen[WK_KEYS])
{
	char kbuf[SHMT_KEY_MAX];
	size_t klen;
	int n = 0, rc;

	while (steps < 0 || n < steps) {
		rc = shmt_dict_next(w, cursor, kbuf, sizeof(kbuf), &klen);
		if (rc != 0 && rc != 1)
			print_message("shmt_dict_next: %s\n", shmt_strerror(rc));
		assert_true(rc == 0 || rc == 1);
		if (rc == 0)
			break;
		seen[wk_index(kbuf, klen)]++;
		n++;
	}
	return n;
}

/* Move *HP's segment (SEG) to DICT_BYTES over SHARDS shards; *HP is then
 * a handle opened on the new generation (a mover moves a live one). */
static void
wk_move(shmt_t **hp, const char *seg, uint64_t dict_bytes, uint32_t shards)
{
	shmt_config_t c;
	char err[512] = "";

	mv_config(&c, dict_bytes);
	c.dict_shards = shards;
	assert_int_equal(shmt__move(*hp, &c, NULL, NULL, err, sizeof(err)), 0);
	shmt_close(*hp);
	assert_int_equal(shmt_open(seg, hp), 0);
}

static void
test_move_walk(void **state)
{
	int seen[WK_KEYS], gone = -1, i;
	char seg[96], key[32];
	shmt_dict_stat_t ds;
	uint64_t cursor;
	shmt_t *h, *w;

	(void)state;
	tu_segname(seg, sizeof(seg), "walk");
	{
		shmt_config_t c;

		mv_config(&c, 4 << 20);
		assert_int_equal(shmt_create(seg, &c, &h), 0);
	}
	assert_int_equal(shmt_open(seg, &w), 0);

	/* Moved before any key: the keys live in the second generation
	 * only, and a walk through W finds every one. */
	wk_move(&h, seg, 8 << 20, 4);
	for (i = 0; i < WK_KEYS; i++) {
		snprintf(key, sizeof(key), "wk-%d", i);
		assert_int_equal(shmt_set(h, key, strlen(key), "v", 1, 0), 0);
	}
	memset(seen, 0, sizeof(seen));
	cursor = 0;
	assert_int_equal(wk_walk(w, &cursor, -1, seen), WK_KEYS);
	for (i = 0; i < WK_KEYS; i++)
		assert_int_equal(seen[i], 1);

	/* Cut by a move to 16 MiB over 8 shards (more buckets, more
	 * shards), then one back to 4 MiB over 2. */
	memset(seen, 0, sizeof(seen));
	cursor = 0;
	assert_int_equal(wk_walk(w, &cursor, WK_KEYS / 3, seen), WK_KEYS / 3);
	wk_move(&h, seg, 16 << 20, 8);
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_int_equal(ds.shards, 8);
	/* A key the walk has not reached, deleted in the new generation. */
	for (i = 0; i < WK_KEYS && gone < 0; i++)
		if (seen[i] == 0)
			gone = i;
	assert_true(gone >= 0);
	snprintf(key, sizeof(key), "wk-%d", gone);
	assert_int_equal(shmt_del(h, key, strlen(key)), 0);
	assert_int_equal(wk_walk(w, &cursor, WK_KEYS / 3, seen), WK_KEYS / 3);
	wk_move(&h, seg, 4 << 20, 2);
	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	assert_int_equal(ds.shards, 2);
	wk_walk(w, &cursor, -1, seen);
	for (i = 0; i < WK_KEYS; i++)
		assert_int_equal(seen[i], i == gone ? 0 : 1);
	/* The walk is over, and stays over. */
	assert_int_equal(wk_walk(w, &cursor, -1, seen), 0);

	shmt_close(w);
	shmt_close(h);
	shmt_unlink(seg);
}

/*
 * Calls that used to stay on a handle's first generation: a segment's
 * statistics and a give-back.  W is opened before the move, H moves.
 * After the move, W's shmt_segment_stat describes the new generation (its
 * dictionary's size), and a rate-mode grant made through W before the
 * move, given back through W after it, is given back in the new generation
 * (H is granted again there), once.
 */
static void
test_move_follow_calls(void **state)
{
	shmt_limit_t rl = { .limit = 1, .window_ns = 3600 * MV_S,
		.mode = SHMT_MODE_GCRA, .burst = 1 };
	shmt_request_t q = { .limiter = "rate", .cost = 1 };
	shmt_segment_stat_t ss0, ss1;
	shmt_receipt_t r;
	char seg[96];
	shmt_t *h, *w;

	(void)state;
	tu_segname(seg, sizeof(seg), "follow");
	{
		shmt_config_t c;

		mv_config(&c, 4 << 20);
		assert_int_equal(shmt_create(seg, &c, &h), 0);
	}
	assert_int_equal(shmt_limiter_define(h, "rate", &rl), 0);
	assert_int_equal(shmt_open(seg, &w), 0);
	assert_int_equal(shmt_segment_stat(w, &ss0), 0);
	assert_int_equal(shmt_acquire_all(w, &q, 1, NULL, &r), 1);
	assert_int_equal(shmt_acquire_all(w, &q, 1, NULL, NULL), 0);

	assert_int_equal(mv_move(h, 16 << 20), 0);
	shmt_close(h);
	assert_int_equal(shmt_open(seg, &h), 0);

	assert_int_equal(shmt_segment_stat(w, &ss1), 0);
	assert_true(ss1.regions[SHMT_R_DICT].size >
	    ss0.regions[SHMT_R_DICT].size);
	assert_int_equal(shmt_try_use_key(h, "rate"), 0);
	assert_int_equal(shmt_refund(w, "rate", &r), 1);
	assert_int_equal(shmt_try_use_key(h, "rate"), 1);
	/* Given back once: the receipt is spent. */
	assert_int_equal(shmt_refund(w, "rate", &r), 1);
	assert_int_equal(shmt_try_use_key(h, "rate"), 0);

	shmt_close(w);
	shmt_close(h);
	shmt_unlink(seg);
}

static void
test_move_workers(void **state)
{
	char seg[96];
	struct mv_report sum, r;
	pid_t pid[4];
	int p[2], st;
	shmt_t *h, *n;
	shmt_config_t c;

	(void)state;
	memset(&sum, 0, sizeof(sum));
	tu_segname(seg, sizeof(seg), "workers");
	mv_config(&c, 4 << 20);
	assert_int_equal(shmt_create(seg, &c, &h), 0);
	mv_define(h);
	assert_int_equal(pipe(p), 0);
	for (int w = 0; w < 4; w++) {
		pid[w] = fork();
		assert_true(pid[w] >= 0);
		if (pid[w] == 0) {
			close(p[0]);
			_exit(mv_worker(seg, w, p[1], 50000, 1));
		}
	}
	close(p[1]);
	/* Two moves while they run: wait until some grants were made. */
	for (int m = 0; m < 2; m++) {
		shmt_limiter_stat_t ls;

		for (int t = 0; t < 5000; t++) {
			assert_int_equal(shmt_limiter_stat(h, "api", &ls), 0);
			if (ls.in_flight >= (m + 1) * MV_LIMIT / 4)
				break;
			tu_pause_ms(1);
		}
		assert_int_equal(mv_move(h, (8ULL << 20) << m), 0);
		shmt_close(h);
		assert_int_equal(shmt_open(seg, &h), 0);
	}
	for (int w = 0; w < 4; w++) {
		assert_int_equal(read(p[0], &r, sizeof(r)), sizeof(r));
		assert_int_equal(r.err, 0);
		for (int l = 0; l < MV_NLIM; l++) {
			sum.granted[l] += r.granted[l];
			sum.lost[l] += r.lost[l];
		}
		sum.reopens += r.reopens;
		sum.keys += r.keys;
		sum.bad += r.bad;
	}
	for (int w = 0; w < 4; w++) {
		assert_int_equal(waitpid(pid[w], &st, 0), pid[w]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(p[0]);
	print_message("workers: %" PRIu64 " reopens, %" PRIu64 " keys\n",
	    sum.reopens, sum.keys);
	for (int l = 0; l < MV_NLIM; l++) {
		print_message("%s: %" PRIu64 " granted, %" PRIu64 " not\n",
		    mv_names[l], sum.granted[l], sum.lost[l]);
		/* Never over the limit across both generations; a use lost
		 * to a move stays held, unused (at most one per racing
		 * call). */
		assert_true(sum.granted[l] <= mv_limit_of(l));
		assert_true(sum.granted[l] + 4 * 2 >= mv_limit_of(l));
	}
	assert_true(sum.reopens >= 4);
	assert_int_equal(sum.bad, 0);
	assert_int_equal(shmt_open(seg, &n), 0);
	{
		shmt_dict_stat_t ds;

		assert_int_equal(shmt_dict_stat(n, &ds), 0);
		assert_int_equal(ds.items, sum.keys);
		assert_true(ds.bytes >= (16ULL << 20) * 9 / 10);
	}
	shmt_close(n);
	tu_close_unlink(h, seg);
}

/* ---- A thread parked inside a call ------------------------------------ */

struct mv_park {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int parked, release;
	int rc;
	shmt_t *h;
};

static shmt_time_t
mv_park_clock(void *ctx)
{
	struct mv_park *k = ctx;

	pthread_mutex_lock(&k->mu);
	if (k->parked) {
		/* Only the first call parks. */
		pthread_mutex_unlock(&k->mu);
		return tu_mono_ns();
	}
	k->parked = 1;
	pthread_cond_broadcast(&k->cv);
	while (!k->release)
		pthread_cond_wait(&k->cv, &k->mu);
	pthread_mutex_unlock(&k->mu);
	return tu_mono_ns();
}

static void *
mv_park_thread(void *arg)
{
	struct mv_park *k = arg;

	k->rc = shmt_try_use_key(k->h, "api");
	return NULL;
}

static void
test_move_parked(void **state)
{
	struct mv_park k = { .mu = PTHREAD_MUTEX_INITIALIZER,
		.cv = PTHREAD_COND_INITIALIZER };
	shmt_limiter_stat_t ls;
	char seg[96];
	shmt_config_t c;
	pthread_t t;
	shmt_t *h, *m, *n;
	pid_t pid;
	int st;

	(void)state;
	tu_segname(seg, sizeof(seg), "parked");
	mv_config(&c, 4 << 20);
	assert_int_equal(shmt_create(seg, &c, &m), 0);
	mv_define(m);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, mv_park_clock, &k), 0);
	k.h = h;
	assert_int_equal(pthread_create(&t, NULL, mv_park_thread, &k), 0);
	pthread_mutex_lock(&k.mu);
	while (!k.parked)
		pthread_cond_wait(&k.cv, &k.mu);
	pthread_mutex_unlock(&k.mu);
	/* The move, by another process, while the thread is inside. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(mv_move(m, 8 << 20) == 0 ? 0 : 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* This thread's call on the same handle follows the move while the
	 * other is still inside the old mapping... */
	assert_int_equal(shmt_try_use_key(h, "mail"), 1);
	assert_true(shmt__gen_live(h) != h);
	pthread_mutex_lock(&k.mu);
	k.release = 1;
	pthread_cond_broadcast(&k.cv);
	pthread_mutex_unlock(&k.mu);
	assert_int_equal(pthread_join(t, NULL), 0);
	/* ...which it leaves safely: its CAS there came after the freeze, so
	 * the grant was taken again on the new generation. */
	assert_int_equal(k.rc, 1);
	assert_int_equal(shmt_open(seg, &n), 0);
	assert_int_equal(shmt_limiter_stat(n, "api", &ls), 0);
	assert_int_equal(ls.in_flight, 1);
	assert_int_equal(shmt_limiter_stat(n, "mail", &ls), 0);
	assert_int_equal(ls.in_flight, 1);

	shmt_close(h);
	shmt_close(m);
	tu_close_unlink(n, seg);
}

/* ---- kill -9 of the mover ---------------------------------------------- */

static void
test_move_kill(void **state)
{
	uint64_t seed = tu_seed("test_move_kill"), rs = seed;
	double scale = tu_scale();
	uint64_t drained[MV_NLIM] = { 0 };
	int kills = 0, target;
	uint64_t deadline;
	char seg[96];
	shmt_config_t c;
	shmt_t *h;
	int p[2], st, moves;
	struct mv_report r;
	pid_t worker;

	(void)state;
	target = scale > 1.0 ? (int)(100 * scale) : 0;
	deadline = tu_mono_ns() + (uint64_t)(20.0 * (scale < 1 ? scale : 1) *
	    MV_S);
	tu_segname(seg, sizeof(seg), "kill");
	mv_config(&c, 4 << 20);
	assert_int_equal(shmt_create(seg, &c, &h), 0);
	mv_define(h);
	shmt_close(h);
	assert_int_equal(pipe(p), 0);
	worker = fork();
	assert_true(worker >= 0);
	if (worker == 0) {
		close(p[0]);
		_exit(mv_worker(seg, 0, p[1], 4000000, 1));
	}
	close(p[1]);
	while ((target > 0 && kills < target) ||
	    (target == 0 && tu_mono_ns() < deadline)) {
		uint64_t delay = tu_rand(&rs) % 20000; /* us */
		pid_t mover = fork();

		assert_true(mover >= 0);
		if (mover == 0) {
			shmt_t *mh;

			if (shmt_open(seg, &mh) != 0)
				_exit(2);
			for (int i = 0;; i++)
				if (mv_move(mh, (4ULL << 20) << (i % 2 ? 0 : 1)) ==
				    0) {
					shmt_close(mh);
					if (shmt_open(seg, &mh) != 0)
						_exit(3);
				}
		}
		nanosleep(&(struct timespec){ 0, (long)delay * 1000 }, NULL);
		kill(mover, SIGKILL);
		assert_int_equal(waitpid(mover, &st, 0), mover);
		assert_true(WIFSIGNALED(st));
		kills++;
		/* Whatever the point: one authoritative generation. */
		int rc = shmt__move_settle(seg, 5 * MV_S);
		assert_true(rc == 0);
		assert_int_equal(mv_objects(seg, &moves), 1);
		assert_int_equal(moves, 0);
		assert_int_equal(shmt_open(seg, &h), 0);
		assert_int_equal(__atomic_load_n(&h->hdr->sh_retired,
		    __ATOMIC_ACQUIRE), SHMT_SEG_LIVE);
		shmt_close(h);
	}
	print_message("seed %" PRIu64 ": %d kills\n", seed, kills);
	/* Drain the worker: it stops once every limiter refuses. */
	assert_int_equal(shmt_open(seg, &h), 0);
	for (int l = 0; l < MV_NLIM; l++)
		while (shmt_try_use_key(h, mv_names[l]) == 1)
			drained[l]++;
	shmt_close(h);
	assert_int_equal(read(p[0], &r, sizeof(r)), sizeof(r));
	assert_int_equal(waitpid(worker, &st, 0), worker);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(p[0]);
	assert_int_equal(r.err, 0);
	assert_int_equal(r.bad, 0);
	for (int l = 0; l < MV_NLIM; l++) {
		print_message("%s: worker %" PRIu64 " granted, %" PRIu64
		    " not; %" PRIu64 " more at the end\n", mv_names[l],
		    r.granted[l], r.lost[l], drained[l]);
		/* Over every generation the name held: never more than the
		 * limit, whatever the kills. */
		assert_true(r.granted[l] + drained[l] <= mv_limit_of(l));
	}
	assert_int_equal(shmt_open(seg, &h), 0);
	tu_close_unlink(h, seg);
}

/* The state of process PID in /proc/PID/stat ('S': asleep), or 0. */
static char
mv_proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/*
 * A mover killed after its rename (here a process that makes a move's
 * steps by hand: freeze, rename of a ready generation over the name, then
 * kill -9 of itself) leaves the old generation FROZEN.  A waiter of
 * another process sleeps in shmt_wait on it, its retry time an hour away
 * (timeout 20 s).  The next call on the old generation finds the mover
 * dead and marks it MOVED; it must wake the waiter, as the mover would
 * have, which then follows the move and is granted on the new generation
 * within 3 s.
 */
static void
test_move_dead_mover_wakes(void **state)
{
	shmt_limit_t l = { .limit = 1, .window_ns = 3600 * MV_S,
		.slack_ns = MV_S, .slack_uses = 1 };
	char seg[96], next[96], from[128], to[128];
	struct shmt_lim *row;
	shmt_config_t c;
	shmt_t *h, *n;
	pid_t waiter, mover;
	int st, rc, i;

	(void)state;
	tu_segname(seg, sizeof(seg), "wake");
	tu_segname(next, sizeof(next), "wakenext");
	mv_config(&c, 4 << 20);
	assert_int_equal(shmt_create(seg, &c, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "w", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "o", &l), 0);
	assert_int_equal(shmt_try_use_key(h, "w"), 1);
	/* The generation the mover publishes. */
	assert_int_equal(shmt_create(next, &c, &n), 0);
	assert_int_equal(shmt_limiter_define(n, "w", &l), 0);
	assert_int_equal(shmt_limiter_define(n, "o", &l), 0);
	shmt_close(n);
	fflush(stdout);
	waiter = fork();
	assert_true(waiter >= 0);
	if (waiter == 0) {
		shmt_decision_t d;
		shmt_t *w;
		uint64_t t0, el;

		if (shmt_open(seg, &w) != 0)
			_exit(2);
		t0 = tu_mono_ns();
		rc = shmt_wait(w, "w", NULL, 0, 1, 20 * MV_S, &d);
		el = tu_mono_ns() - t0;
		printf("# waiter: %d after %" PRIu64 " us\n", rc, el / 1000);
		fflush(stdout);
		shmt_close(w);
		_exit(rc == 1 && el < 3 * MV_S ? 0 : 1);
	}
	/* Asleep: its sleeper bit set and the process sleeping (bounded). */
	row = tu_row_of(h, "w");
	for (i = 0; i < 10000; i++) {
		if ((__atomic_load_n(&row->lm_wake, __ATOMIC_ACQUIRE) & 1) &&
		    mv_proc_state(waiter) == 'S')
			break;
		tu_pause_ms(1);
	}
	assert_true(i < 10000);
	mover = fork();
	assert_true(mover >= 0);
	if (mover == 0) {
		uint64_t w = shmt__genword_load(h->hdr);

		__atomic_store_n(&h->hdr->sh_mover_pid, (int64_t)getpid(),
		    __ATOMIC_RELEASE);
		__atomic_store_n(&h->hdr->sh_mover_start,
		    shmt__proc_start(getpid()), __ATOMIC_RELEASE);
		if ((uint32_t)w != SHMT_SEG_LIVE || !shmt__genword_cas(h->hdr,
		    &w, SHMT_SEG_FROZEN, (uint32_t)(w >> 32) + 1))
			_exit(2);
		snprintf(from, sizeof(from), "/dev/shm%s", next);
		snprintf(to, sizeof(to), "/dev/shm%s", seg);
		if (rename(from, to) != 0)
			_exit(3);
		raise(SIGKILL);
		_exit(4);
	}
	assert_int_equal(waitpid(mover, &st, 0), mover);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	/* This call, on another limiter, finds the mover dead and the name
	 * moved on. */
	assert_int_equal(shmt_try_use_key(h, "o"), 1);
	assert_int_equal((uint32_t)shmt__genword_load(h->hdr), SHMT_SEG_MOVED);
	assert_int_equal(waitpid(waiter, &st, 0), waiter);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	tu_close_unlink(h, seg);
}

/* A clock that freezes H's segment, as a live mover (this process)
 * would, at the read it is armed for: inside a call that found the
 * segment LIVE at its entry. */
struct freeze_clock {
	shmt_t *h;
	shmt_time_t now;
	int armed;
};

static shmt_time_t
freeze_clock_read(void *ctx)
{
	struct freeze_clock *fc = ctx;

	if (fc->armed) {
		uint64_t w = shmt__genword_load(fc->h->hdr);

		fc->armed = 0;
		__atomic_store_n(&fc->h->hdr->sh_mover_pid, (int64_t)getpid(),
		    __ATOMIC_RELEASE);
		__atomic_store_n(&fc->h->hdr->sh_mover_start,
		    shmt__proc_start(getpid()), __ATOMIC_RELEASE);
		assert_true(shmt__genword_cas(fc->h->hdr, &w, SHMT_SEG_FROZEN,
		    (uint32_t)(w >> 32) + 1));
	}
	return fc->now;
}

static void
unfreeze(shmt_t *h)
{
	uint64_t w = shmt__genword_load(h->hdr);

	assert_int_equal((uint32_t)w, SHMT_SEG_FROZEN);
	assert_true(shmt__genword_cas(h->hdr, &w, SHMT_SEG_LIVE,
	    (uint32_t)(w >> 32)));
}

/*
 * A refusal records nothing, so it waits for no move: a call that found
 * the segment LIVE at its entry and is refused after a live mover froze it
 * (the freeze made by its own clock read), on a shadow limiter, shared or
 * per client, through shmt_try_use_key, shmt_try_use and shmt_acquire of
 * one use, is granted at once and counted once.  (A grant there waits for
 * the move's outcome: with the mover alive, -EAGAIN after
 * SHMT_MOVE_WAIT_NS.)
 */
static void
test_move_shadow_refusal(void **state)
{
	shmt_limit_t l = { .limit = 1, .window_ns = 3600 * MV_S,
		.slack_ns = MV_S, .slack_uses = 1, .shadow = 1 };
	shmt_limit_t pc = l;
	struct freeze_clock fc = { .now = 1000 * MV_S };
	shmt_limiter_stat_t st;
	shmt_config_t c;
	char seg[96];
	shmt_t *h;

	(void)state;
	pc.per_client = 1;
	pc.client_capacity = 4;
	mv_config(&c, 0);
	tu_segname(seg, sizeof(seg), "mvshadow");
	assert_int_equal(shmt_create(seg, &c, &h), 0);
	fc.h = h;
	assert_int_equal(shmt_set_clock(h, freeze_clock_read, &fc), 0);
	assert_int_equal(shmt_limiter_define(h, "sh", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "shc", &pc), 0);
	assert_int_equal(shmt_try_use_key(h, "sh"), 1);
	assert_int_equal(shmt_try_use(h, "shc", "a", 1), 1);
	fc.armed = 1;
	assert_int_equal(shmt_try_use_key(h, "sh"), 1);
	unfreeze(h);
	fc.armed = 1;
	assert_int_equal(shmt_acquire(h, "sh", NULL, 0, 1, NULL), 1);
	unfreeze(h);
	fc.armed = 1;
	assert_int_equal(shmt_try_use(h, "shc", "a", 1), 1);
	unfreeze(h);
	fc.armed = 1;
	assert_int_equal(shmt_acquire(h, "shc", "a", 1, 1, NULL), 1);
	unfreeze(h);
	assert_int_equal(shmt_limiter_stat(h, "sh", &st), 0);
	assert_int_equal(st.would_deny, 2);
	assert_int_equal(st.grants, 1);
	assert_int_equal(shmt_limiter_stat(h, "shc", &st), 0);
	assert_int_equal(st.would_deny, 2);
	tu_close_unlink(h, seg);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest unit[] = {
		cmocka_unit_test_teardown(test_move_carries, tu_sweep),
		cmocka_unit_test_teardown(test_move_shadow_refusal, tu_sweep),
		cmocka_unit_test_teardown(test_move_walk, tu_sweep),
		cmocka_unit_test_teardown(test_move_follow_calls, tu_sweep),
		cmocka_unit_test_teardown(test_move_workers, tu_sweep),
		cmocka_unit_test_teardown(test_move_parked, tu_sweep),
		cmocka_unit_test_teardown(test_move_dead_mover_wakes, tu_sweep),
	};
	const struct CMUnitTest stress[] = {
		cmocka_unit_test_teardown(test_move_kill, tu_sweep),
	};

	if (argc > 1 && strcmp(argv[1], "stress") == 0)
		return cmocka_run_group_tests(stress, NULL, NULL);
	return cmocka_run_group_tests(unit, NULL, NULL);
}
