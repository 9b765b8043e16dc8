/* SPDX-License-Identifier: MIT */
/*
 * Snapshots at the library level, with an injected clock: the time-base
 * arithmetic across a reboot, a round trip that keeps the uses in flight
 * and their release times, a restore that keeps the segment's secret (so
 * per-client entries are found again), and files that are damaged,
 * foreign, made by another build, or random bytes: refused with a reason,
 * nothing left behind.
 */
#include "snapshot.h"

#include "daemon.h"
#include "segment.h"
#include "testutil.h"

#include "limiter.h"
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S 1000000000ULL

static void
test_delta(void **state)
{
	uint64_t seed = tu_seed("snapshot_delta");

	/* The same boot: monotonic times are still valid. */
	assert_true(shmtd_snapshot_delta(1000 * S, 5000 * S, 1010 * S, 5010 * S,
	    1) == 0);
	/* A reboot, 10 s later: a release due 60 s after the snapshot is due
	 * 50 s from now. */
	assert_true(shmtd_snapshot_delta(1000 * S, 5000 * S, 1010 * S, 20 * S,
	    0) == -(int64_t)(4990 * S));
	/* The wall clock went back: no time is taken to have passed. */
	assert_true(shmtd_snapshot_delta(1000 * S, 5000 * S, 990 * S, 20 * S,
	    0) == -(int64_t)(4980 * S));
	/* In general: what was left to wait shrinks by the wall time that
	 * passed, never more. */
	for (int i = 0; i < 100000; i++) {
		uint64_t then_mono = tu_rand(&seed) % (1000000 * S);
		uint64_t then_wall = tu_rand(&seed) % (1000000 * S) + 1000000 * S;
		uint64_t now_mono = tu_rand(&seed) % (1000000 * S);
		uint64_t now_wall = then_wall + tu_rand(&seed) % (1000 * S) -
		    500 * S;
		uint64_t t = then_mono + tu_rand(&seed) % (3600 * S);
		uint64_t left = t - then_mono;
		uint64_t passed = now_wall > then_wall ? now_wall - then_wall : 0;
		int64_t d = shmtd_snapshot_delta(then_wall, then_mono, now_wall,
		    now_mono, 0);

		assert_true((int64_t)(t + (uint64_t)d - now_mono) ==
		    (int64_t)left - (int64_t)passed);
	}
}

struct fixture {
	char seg[128];
	char path[64];
	struct tu_clock clk;
	shmt_t *h;
};

static void
fixture_init(struct fixture *f, const char *tag)
{
	shmt_limit_t l = { .limit = 5, .window_ns = 3600 * S,
		.slack_ns = 60 * S, .slack_uses = 1 };
	int fd;

	tu_segname(f->seg, sizeof(f->seg), tag);
	snprintf(f->path, sizeof(f->path), "/tmp/shmt-test-snap-XXXXXX");
	fd = mkstemp(f->path);
	assert_true(fd >= 0);
	close(fd);
	f->clk.now = 1000000 * S;
	assert_int_equal(shmt_create(f->seg, NULL, &f->h), 0);
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);
	assert_int_equal(shmt_limiter_define(f->h, "a", &l), 0);
	/* The restored image is checked on the clock that wrote it, and the
	 * host is the real one (a failed test may have left a fake one). */
	shmtd_snapshot_check_clock(tu_clock_read, &f->clk);
	shmtd_snapshot_host_time(NULL);
}

static void
fixture_done(struct fixture *f)
{
	shmt_close(f->h);
	shmt_unlink(f->seg);
	unlink(f->path);
}

static void
test_roundtrip(void **state)
{
	shmt_bucket_info_t before[8], after[8];
	struct fixture f;
	char err[512];
	int n;

	fixture_init(&f, "snaprt");
	for (int i = 0; i < 3; i++) {
		assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
		f.clk.now += 90 * S;
	}
	n = shmt_limiter_buckets(f.h, "a", before, 8);
	assert_int_equal(n, 3);
	assert_int_equal(shmtd_snapshot_write(f.h, f.path, err, sizeof(err)), 0);
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);

	if (shmtd_snapshot_restore(f.path, f.seg, &f.h, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_set_clock(f.h, tu_clock_read, &f.clk), 0);
	assert_int_equal(shmt_limiter_buckets(f.h, "a", after, 8), n);
	for (int i = 0; i < n; i++)
		assert_true(after[i].release_ns == before[i].release_ns &&
		    after[i].uses == before[i].uses);
	assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
	assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
	assert_int_equal(shmt_try_use_key(f.h, "a"), 0);
	/* Capacity comes back once the first bucket's release time is due. */
	f.clk.now = before[0].release_ns;
	assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
	/* Restoring over an existing segment is refused. */
	assert_int_equal(shmtd_snapshot_restore(f.path, f.seg, &f.h, err,
	    sizeof(err)), -EEXIST);
	fixture_done(&f);
}

/*
 * The per-client table stores keyed hashes of client ids, so a restore
 * must keep the snapshot's secret: with a fresh one, every client would
 * miss its entry and start again with a full allowance.  Clients that used
 * up their limit before the snapshot are still refused after the restore,
 * clients that used part of it get exactly the rest, and the restored
 * header holds the old secret.
 */
#define SR_CLIENTS 40

static void
test_restore_keeps_secret(void **state)
{
	shmt_limit_t l = { .limit = 3, .window_ns = 3600 * S,
		.slack_ns = 60 * S, .slack_uses = 3, .per_client = 1,
		.client_capacity = 256 };
	uint8_t secret[SHMT_SECRET_BYTES];
	shmt_limiter_stat_t st;
	struct fixture f;
	char err[512], id[32];
	int used[SR_CLIENTS];

	fixture_init(&f, "snapkey");
	assert_int_equal(shmt_limiter_define(f.h, "pc", &l), 0);
	memcpy(secret, f.h->hdr->sh_secret, sizeof(secret));
	for (int c = 0; c < SR_CLIENTS; c++) {
		int n = snprintf(id, sizeof(id), "client-%d", c);

		used[c] = c % 4;            /* 0, 1, 2 or all 3 uses */
		for (int i = 0; i < used[c]; i++)
			assert_int_equal(shmt_try_use(f.h, "pc", id, (size_t)n), 1);
	}
	assert_int_equal(shmtd_snapshot_write(f.h, f.path, err, sizeof(err)), 0);
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);

	if (shmtd_snapshot_restore(f.path, f.seg, &f.h, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_set_clock(f.h, tu_clock_read, &f.clk), 0);
	assert_int_equal(shmt_limiter_stat(f.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, SR_CLIENTS - SR_CLIENTS / 4);
	for (int c = 0; c < SR_CLIENTS; c++) {
		int n = snprintf(id, sizeof(id), "client-%d", c);

		for (int i = used[c]; i < 3; i++)
			if (shmt_try_use(f.h, "pc", id, (size_t)n) != 1)
				fail_msg("client %d: use %d of 3 refused after "
				    "the restore", c, i + 1);
		if (shmt_try_use(f.h, "pc", id, (size_t)n) != 0)
			fail_msg("client %d used %d of 3 before the snapshot "
			    "and was granted a 4th after the restore", c,
			    used[c]);
	}
	assert_int_equal(shmt_limiter_stat(f.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, SR_CLIENTS);
	assert_int_equal(st.denied_table_full, 0);
	assert_memory_equal(f.h->hdr->sh_secret, secret, sizeof(secret));
	assert_memory_equal(f.h->key.hk_key, secret, sizeof(secret));
	fixture_done(&f);
}

/* Rate mode keeps its arrival times (shared and per client) across a
 * snapshot: the same decisions before and after. */
static void
test_roundtrip_gcra(void **state)
{
	shmt_limit_t g = { .limit = 1, .window_ns = 3600 * S,
		.mode = SHMT_MODE_GCRA, .burst = 3 };
	shmt_decision_t d0, d1, c0, c1;
	struct fixture f;
	char err[512];

	(void)state;
	fixture_init(&f, "snapgc");
	assert_int_equal(shmt_limiter_define(f.h, "g", &g), 0);
	g.per_client = 1;
	g.client_capacity = 4;
	assert_int_equal(shmt_limiter_define(f.h, "gp", &g), 0);
	assert_int_equal(shmt_acquire(f.h, "g", NULL, 0, 2, NULL), 1);
	assert_int_equal(shmt_acquire(f.h, "gp", "ann", 3, 3, NULL), 1);
	f.clk.now += 60 * S;
	assert_int_equal(shmt_peek(f.h, "g", NULL, 0, 2, &d0), 0);
	assert_int_equal(shmt_peek(f.h, "gp", "ann", 3, 1, &c0), 0);
	assert_int_equal(shmtd_snapshot_write(f.h, f.path, err, sizeof(err)), 0);
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);
	if (shmtd_snapshot_restore(f.path, f.seg, &f.h, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_set_clock(f.h, tu_clock_read, &f.clk), 0);
	assert_int_equal(shmt_peek(f.h, "g", NULL, 0, 2, &d1), 0);
	assert_int_equal(shmt_peek(f.h, "gp", "ann", 3, 1, &c1), 0);
	assert_true(d0.retry_after_ns > 0 && c0.retry_after_ns > 0);
	assert_true(d1.retry_after_ns == d0.retry_after_ns &&
	    d1.reset_after_ns == d0.reset_after_ns &&
	    d1.remaining == d0.remaining);
	assert_true(c1.retry_after_ns == c0.retry_after_ns &&
	    c1.reset_after_ns == c0.reset_after_ns);
	/* And the retry is taken at its word. */
	f.clk.now += d1.retry_after_ns;
	assert_int_equal(shmt_acquire(f.h, "g", NULL, 0, 2, NULL), 1);
	fixture_done(&f);
}

static uint64_t
fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Restoring F's file must fail with RC and a message holding WHY, and
 * leave no segment behind. */
static void
expect_refused(struct fixture *f, int rc, const char *why)
{
	char err[512] = "";
	shmt_t *h = NULL;

	assert_int_equal(shmtd_snapshot_restore(f->path, f->seg, &h, err,
	    sizeof(err)), rc);
	if (strstr(err, why) == NULL)
		fail_msg("got \"%s\", want \"%s\"", err, why);
	assert_null(h);
	assert_int_equal(shmt_open(f->seg, &h), -ENOENT);
}

static void
test_other_build(void **state)
{
	unsigned char hdr[112];
	struct fixture f;
	char err[512];
	uint64_t sum;
	int fd;

	fixture_init(&f, "snapfmt");
	assert_int_equal(shmtd_snapshot_write(f.h, f.path, err, sizeof(err)), 0);
	shmt_close(f.h);
	f.h = NULL;
	assert_int_equal(shmt_unlink(f.seg), 0);
	/* Another format word, with a header checksum that matches it: the
	 * file is whole, but for another layout. */
	fd = open(f.path, O_RDWR);
	assert_true(fd >= 0);
	assert_true(pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr));
	hdr[16] ^= 1;
	sum = fnv1a(hdr, 104);
	memcpy(hdr + 104, &sum, sizeof(sum));
	assert_true(pwrite(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr));
	close(fd);
	expect_refused(&f, SHMT_EFORMAT, "written for segment format");
	fixture_done(&f);
}


/* FNV-1a over 8-byte words, then the tail's bytes: the image's checksum. */
static uint64_t
fnv1a_words(const unsigned char *b, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, sizeof(w));
		h ^= w;
		h *= 0x100000001b3ULL;
	}
	for (; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* True when /dev/shm holds a name that starts with PREFIX (without its
 * leading '/'). */
static int
shm_has_prefix(const char *prefix)
{
	char cmd[256];
	FILE *p;
	int found;

	snprintf(cmd, sizeof(cmd), "ls /dev/shm | grep -q '^%s'", prefix + 1);
	p = popen(cmd, "r");
	assert_non_null(p);
	found = pclose(p) == 0;
	return found;
}

/*
 * A snapshot whose limiter state word is out of range, with both checksums
 * made right again: the file is whole, the state it holds is not.  The
 * restore checks the image with shmt_check while it is private and refuses
 * it, naming the problem; nothing is published and no temporary segment is
 * left.
 */
static void
test_damaged_state_refused(void **state)
{
	struct fixture f;
	unsigned char *file;
	char err[512], tmpname[160];
	uint64_t hdr_region, sum, w0;
	off_t size;
	size_t at;
	int fd;

	fixture_init(&f, "snapbad");
	assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
	assert_int_equal(shmtd_snapshot_write(f.h, f.path, err, sizeof(err)), 0);
	shmt_close(f.h);
	f.h = NULL;
	assert_int_equal(shmt_unlink(f.seg), 0);

	/* The file: a 112-byte header, then the header region, the limiter
	 * table (row 0 is "a") and the used arena. */
	fd = open(f.path, O_RDWR);
	assert_true(fd >= 0);
	size = lseek(fd, 0, SEEK_END);
	assert_true(size > 112);
	file = malloc((size_t)size);
	assert_non_null(file);
	assert_true(pread(fd, file, (size_t)size, 0) == (ssize_t)size);
	memcpy(&hdr_region, file + 112 +
	    offsetof(struct shmt_hdr, sh_regions[SHMT_R_HEADER].rg_size),
	    sizeof(hdr_region));
	at = 112 + (size_t)hdr_region + offsetof(struct shmt_lim, lm_w);
	assert_true(at + 16 <= (size_t)size);
	memcpy(&w0, file + at, sizeof(w0));
	assert_true((w0 >> 32) == 1);         /* one use in flight */
	w0 |= 0xffffffffULL << 32;            /* far more than the limit */
	memcpy(file + at, &w0, sizeof(w0));
	sum = fnv1a_words(file + 112, (size_t)size - 112);
	memcpy(file + 96, &sum, sizeof(sum));
	sum = fnv1a(file, 104);
	memcpy(file + 104, &sum, sizeof(sum));
	assert_true(pwrite(fd, file, (size_t)size, 0) == (ssize_t)size);
	close(fd);
	free(file);

	expect_refused(&f, SHMT_ECORRUPT, "state word out of range");
	expect_refused(&f, SHMT_ECORRUPT, "fails its check (1 problem)");
	snprintf(tmpname, sizeof(tmpname), "%s.restore.", f.seg);
	assert_false(shm_has_prefix(tmpname));
	fixture_done(&f);
}

/* Run shmtd_snapshot_restore (WRITE 0) or shmtd_snapshot_write (WRITE 1)
 * on PATH in a child with a 10 s alarm, so that a blocking open fails the
 * test instead of hanging it; the child exits 0 when the call returned RC
 * with WHY in its message. */
static void
expect_in_child(const char *path, const char *seg, int write, int rc,
    const char *why)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char err[512] = "";
		shmt_t *h = NULL;
		int got;

		alarm(10);
		if (write) {
			if (shmt_create(seg, NULL, &h) != 0)
				_exit(3);
			got = shmtd_snapshot_write(h, path, err, sizeof(err));
			shmt_close(h);
			shmt_unlink(seg);
		} else {
			got = shmtd_snapshot_restore(path, seg, &h, err,
			    sizeof(err));
		}
		if (got != rc || strstr(err, why) == NULL) {
			fprintf(stderr, "got %d \"%s\", want %d \"%s\"\n", got,
			    err, rc, why);
			_exit(1);
		}
		_exit(shmt_open(seg, &h) == -ENOENT ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("the call did not return (signal %d: blocked in "
		    "open?)", WTERMSIG(status));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A FIFO (no writer, no reader) or a directory at the snapshot path is
 * refused at once, for restore and for write; a FIFO used to block the
 * daemon in open() for ever. */
static void
test_not_a_regular_file(void **state)
{
	char dir[64], fifo[96], seg[128];

	tu_segname(seg, sizeof(seg), "snapfifo");
	snprintf(dir, sizeof(dir), "/tmp/shmt-test-snapdir-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/state.snap", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	expect_in_child(fifo, seg, 0, -EINVAL, "not a regular file (a FIFO)");
	expect_in_child(fifo, seg, 1, -EINVAL, "not a regular file (a FIFO)");
	expect_in_child(dir, seg, 0, -EISDIR, "not a regular file "
	    "(a directory)");
	expect_in_child(dir, seg, 1, -EISDIR, "not a regular file "
	    "(a directory)");
	assert_int_equal(unlink(fifo), 0);
	assert_int_equal(rmdir(dir), 0);
}


/* The dictionary's creation limits come back with the segment: a restored
 * segment refuses what the original refused. */
static void
test_restore_keeps_dict_limits(void **state)
{
	struct tu_clock clk = { 5 * S };
	char seg[128], path[64], err[512], val[8];
	shmt_config_t cfg;
	shmt_t *h;
	size_t vlen;
	int fd;

	tu_segname(seg, sizeof(seg), "snaplim");
	snprintf(path, sizeof(path), "/tmp/shmt-test-snap-XXXXXX");
	assert_true((fd = mkstemp(path)) >= 0);
	close(fd);
	shmt_config_init(&cfg);
	cfg.dict_max_key = 4;
	cfg.dict_max_value = 16;
	cfg.dict_default_ttl_ms = 2000;
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmtd_snapshot_write(h, path, err, sizeof(err)), 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	if (shmtd_snapshot_restore(path, seg, &h, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_set(h, "k", 1, "0123456789abcdefg", 17, 0),
	    -EMSGSIZE);
	assert_int_equal(shmt_set(h, "kkkkk", 5, "v", 1, 0), -E2BIG);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	clk.now += 2 * S;
	assert_int_equal(shmt_get(h, "k", 1, val, sizeof(val), &vlen), -ENOENT);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	unlink(path);
}

static void
test_random_files(void **state)
{
	uint64_t seed = tu_seed("snapshot_random");
	static unsigned char buf[1 << 16];
	struct fixture f;
	char err[512];

	fixture_init(&f, "snaprnd");
	assert_int_equal(shmtd_snapshot_write(f.h, f.path, err, sizeof(err)), 0);
	shmt_close(f.h);
	f.h = NULL;
	assert_int_equal(shmt_unlink(f.seg), 0);
	for (int i = 0; i < (int)(200 * tu_scale()) + 1; i++) {
		size_t len = tu_rand(&seed) % sizeof(buf);
		shmt_t *h = NULL;
		FILE *out;

		for (size_t k = 0; k < len; k++)
			buf[k] = (unsigned char)tu_rand(&seed);
		/* Half the files start like a snapshot, to get past the magic. */
		if (i % 2 == 0 && len >= 8)
			memcpy(buf, "SMHTSNP1", 8);
		out = fopen(f.path, "w");
		assert_non_null(out);
		assert_true(fwrite(buf, 1, len, out) == len);
		assert_int_equal(fclose(out), 0);
		err[0] = '\0';
		assert_true(shmtd_snapshot_restore(f.path, f.seg, &h, err,
		    sizeof(err)) < 0);
		assert_true(strncmp(err, "snapshot ", 9) == 0);
		assert_int_equal(shmt_open(f.seg, &h), -ENOENT);
	}
	unlink(f.path);
	expect_refused(&f, -ENOENT, "");
	fixture_done(&f);
}


/* ---- The dictionary, the counters and the analyzer ------------------------ */

/* What the test says the host's clocks and boot are: THEN when a snapshot
 * is written, NOW when it is restored. */
static struct shmt__host_time fake_then, fake_now;

static void
fake_host(int restoring, struct shmt__host_time *t)
{
	*t = restoring ? fake_now : fake_then;
}

static void
host(struct shmt__host_time *t, uint64_t wall, uint64_t mono, const char *boot)
{
	memset(t, 0, sizeof(*t));
	t->wall_ns = wall;
	t->mono_ns = mono;
	snprintf(t->boot_id, sizeof(t->boot_id), "%s", boot);
}

static int
has(shmt_t *h, const char *key, const char *want)
{
	char buf[256];
	size_t n = 0;
	int rc = shmt_get(h, key, strlen(key), buf, sizeof(buf), &n);

	if (rc == -ENOENT)
		return 0;
	assert_int_equal(rc, 0);
	if (want != NULL) {
		assert_int_equal(n, strlen(want));
		assert_memory_equal(buf, want, n);
	}
	return 1;
}

static uint64_t
count_of(shmt_t *h, const char *key)
{
	uint64_t c = 0;

	assert_int_equal(shmt_count(h, key, strlen(key), 0, &c), 0);
	return c;
}

static uint64_t
dict_items(shmt_t *h)
{
	shmt_dict_stat_t ds;

	assert_int_equal(shmt_dict_stat(h, &ds), 0);
	return ds.items;
}

static void
restore_ok(struct fixture *f)
{
	char err[512];

	if (shmtd_snapshot_restore(f->path, f->seg, &f->h, err,
	    sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);
}

static void
write_ok(struct fixture *f)
{
	char err[512];

	if (shmtd_snapshot_write(f->h, f->path, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	shmt_close(f->h);
	f->h = NULL;
	assert_int_equal(shmt_unlink(f->seg), 0);
}

/*
 * A restart on the same boot keeps every live item with its bytes and its
 * expiry, binary keys and large values included, and the items that had
 * expired are not written; many random items all come back (the restore
 * places the largest blocks first, so everything that fitted fits again).
 */
static void
test_dict_roundtrip(void **state)
{
	uint64_t seed0 = tu_seed("snapshot_dict"), seed = seed0;
	static char big[200000], got[200000];
	struct fixture f;
	char key[32], val[64];
	size_t n;

	(void)state;
	fixture_init(&f, "snapdict");
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)tu_rand(&seed);
	assert_int_equal(shmt_set(f.h, "ten", 3, "minutes", 7, 600000), 0);
	assert_int_equal(shmt_set(f.h, "forever", 7, "", 0, 0), 0);
	assert_int_equal(shmt_set(f.h, "a\0b", 3, "nul", 3, 0), 0);
	assert_int_equal(shmt_set(f.h, "big", 3, big, sizeof(big), 0), 0);
	assert_int_equal(shmt_set(f.h, "gone", 4, "x", 1, 1000), 0);
	for (int i = 0; i < 3000; i++) {
		int kl = snprintf(key, sizeof(key), "k%d", i);
		size_t vl = 1 + tu_rand(&seed) % sizeof(val);

		memset(val, 'a' + i % 26, vl);
		assert_int_equal(shmt_set(f.h, key, (size_t)kl, val, vl,
		    i % 2 ? 3600000 : 0), 0);
	}
	f.clk.now += 2 * S;     /* "gone" expires */
	assert_int_equal(dict_items(f.h), 3005);
	write_ok(&f);
	restore_ok(&f);
	assert_int_equal(dict_items(f.h), 3004);
	assert_true(has(f.h, "ten", "minutes"));
	assert_true(has(f.h, "forever", ""));
	assert_false(has(f.h, "gone", NULL));
	assert_int_equal(shmt_get(f.h, "a\0b", 3, val, sizeof(val), &n), 0);
	assert_true(n == 3 && memcmp(val, "nul", 3) == 0);
	assert_int_equal(shmt_get(f.h, "big", 3, got, sizeof(got), &n), 0);
	assert_true(n == sizeof(big) && memcmp(got, big, n) == 0);
	seed = seed0;
	for (size_t i = 0; i < sizeof(big); i++)
		(void)tu_rand(&seed);
	for (int i = 0; i < 3000; i++) {
		size_t vl = 1 + tu_rand(&seed) % sizeof(val), m = 0;
		int kl = snprintf(key, sizeof(key), "k%d", i);

		assert_int_equal(shmt_get(f.h, key, (size_t)kl, val, sizeof(val),
		    &m), 0);
		assert_int_equal(m, vl);
		assert_true(val[0] == 'a' + i % 26 && val[vl - 1] == val[0]);
	}
	/* The expiry is the one the item had: "ten" lives 600 s from its
	 * write, 2 s of which passed before the snapshot. */
	f.clk.now += 598 * S - 1;
	assert_true(has(f.h, "ten", "minutes"));
	f.clk.now += 1;
	assert_false(has(f.h, "ten", NULL));
	assert_true(has(f.h, "forever", ""));
	fixture_done(&f);
}

/*
 * After a reboot (another boot id) 3 minutes of wall time later, an item
 * with 10 minutes left has 7, one with 2 minutes left is gone; counters
 * keep their hits, less those older than the window by then; the
 * analyzer's window has passed, so its hot keys are gone.  The same file
 * restored as after a reboot with no wall time lost keeps the hot keys.
 */
static void
test_reboot(void **state)
{
	const uint64_t W0 = 1700000000 * S, T0 = 1000000 * S;
	shmt_hotkey_t top[4];
	struct fixture f;
	uint64_t M;

	(void)state;
	fixture_init(&f, "snapboot");
	/* Hits 22.5 h, 19 h and 0 h before the snapshot.  The window is 24 h
	 * in sub-windows of 1 h: a count keeps every hit up to 23 h old, and
	 * a restore across boots moves the sub-windows by whole ones toward
	 * the past, so every hit up to 22 h old is kept, none older than
	 * 24 h. */
	f.clk.now = T0 - 81000 * S;
	for (int i = 0; i < 3; i++)
		assert_int_equal(shmt_hit(f.h, "old", 3, NULL), 0);
	f.clk.now = T0 - 68400 * S;
	for (int i = 0; i < 4; i++)
		assert_int_equal(shmt_hit(f.h, "mid", 3, NULL), 0);
	f.clk.now = T0;
	for (int i = 0; i < 5; i++)
		assert_int_equal(shmt_hit(f.h, "new", 3, NULL), 0);
	assert_int_equal(shmt_set(f.h, "ten", 3, "v", 1, 600000), 0);
	assert_int_equal(shmt_set(f.h, "two", 3, "v", 1, 120000), 0);
	assert_int_equal(shmt_set(f.h, "hot", 3, "v", 1, 0), 0);
	for (int i = 0; i < 50; i++)
		assert_true(has(f.h, "hot", "v"));
	assert_int_equal(shmt_top_keys(f.h, top, 4, NULL), 1);
	assert_int_equal(top[0].lower, 50);
	host(&fake_then, W0, T0, "boot-a");
	shmtd_snapshot_host_time(fake_host);
	write_ok(&f);

	/* 3 minutes later, on a boot whose clock reads 50 s.  The counters'
	 * hits fall before that boot's clock began: they cannot be placed
	 * and are never counted more than they were. */
	M = 50 * S;
	host(&fake_now, W0 + 180 * S, M, "boot-b");
	f.clk.now = M;
	restore_ok(&f);
	assert_int_equal(shmt_top_keys(f.h, top, 4, NULL), 0);
	assert_int_equal(dict_items(f.h), 2);
	assert_false(has(f.h, "two", NULL));
	f.clk.now = M + 420 * S - 1;
	assert_true(has(f.h, "ten", "v"));
	f.clk.now = M + 420 * S;
	assert_false(has(f.h, "ten", NULL));
	f.clk.now = M;
	assert_true(count_of(f.h, "old") <= 3 && count_of(f.h, "mid") <= 4 &&
	    count_of(f.h, "new") <= 5);
	/* The histograms drop every bucket they cannot place: kept at the
	 * new clock's zero instead, these hits would count for a whole
	 * window of the new boot. */
	assert_true(count_of(f.h, "old") == 0 && count_of(f.h, "mid") == 0 &&
	    count_of(f.h, "new") == 0);
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);

	/* The same 3 minutes, on a boot whose clock reads 2 days (its
	 * daemon restored late): every hit up to 22 h old is there. */
	M = 172800 * S;
	host(&fake_now, W0 + 180 * S, M, "boot-b");
	f.clk.now = M;
	restore_ok(&f);
	assert_true(count_of(f.h, "old") <= 3 && count_of(f.h, "mid") == 4 &&
	    count_of(f.h, "new") == 5);
	f.clk.now = M + 420 * S - 1;
	assert_true(has(f.h, "ten", "v"));
	f.clk.now = M + 420 * S;
	assert_false(has(f.h, "ten", NULL));
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);

	/* 2 hours later: the hits of 22.5 h ago are now 24.5 h old. */
	host(&fake_now, W0 + 7200 * S, M, "boot-b");
	f.clk.now = M;
	restore_ok(&f);
	assert_true(count_of(f.h, "old") == 0 && count_of(f.h, "mid") == 4 &&
	    count_of(f.h, "new") == 5);
	assert_int_equal(shmt_hit(f.h, "new", 3, NULL), 0);
	assert_int_equal(count_of(f.h, "new"), 6);
	assert_int_equal(dict_items(f.h), 1);
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);

	/* Another boot, no wall time lost: the hot key is still hot. */
	host(&fake_now, W0, M, "boot-c");
	restore_ok(&f);
	assert_int_equal(shmt_top_keys(f.h, top, 4, NULL), 1);
	assert_int_equal(top[0].lower, 50);
	assert_true(top[0].klen == 3 && memcmp(top[0].key, "hot", 3) == 0);
	shmtd_snapshot_host_time(NULL);
	fixture_done(&f);
}

/* A restart on the same boot keeps the counters and the hot keys as they
 * were: the same counts, the same top keys with the same bounds. */
static void
test_counters_analyzer_roundtrip(void **state)
{
	shmt_hotkey_t before[8], after[8];
	struct fixture f;
	char key[16];
	int n;

	(void)state;
	fixture_init(&f, "snapcnt");
	for (int i = 0; i < 500; i++) {
		int kl = snprintf(key, sizeof(key), "c%d", i);

		for (int k = 0; k <= i % 7; k++)
			assert_int_equal(shmt_hit(f.h, key, (size_t)kl, NULL), 0);
	}
	assert_int_equal(shmt_set(f.h, "h1", 2, "v", 1, 0), 0);
	assert_int_equal(shmt_set(f.h, "h2", 2, "v", 1, 0), 0);
	for (int i = 0; i < 300; i++) {
		int kl = snprintf(key, sizeof(key), "cold%d", i);

		assert_true(has(f.h, "h1", "v"));
		if (i % 2)
			assert_true(has(f.h, "h2", "v"));
		assert_int_equal(shmt_get(f.h, key, (size_t)kl, NULL, 0,
		    &(size_t){ 0 }), -ENOENT);
	}
	n = shmt_top_keys(f.h, before, 8, NULL);
	assert_int_equal(n, 2);
	write_ok(&f);
	restore_ok(&f);
	for (int i = 0; i < 500; i++) {
		snprintf(key, sizeof(key), "c%d", i);
		if (count_of(f.h, key) != (uint64_t)(i % 7 + 1))
			fail_msg("%s: %" PRIu64 " hits after the restore, %d "
			    "before", key, count_of(f.h, key), i % 7 + 1);
	}
	assert_int_equal(shmt_top_keys(f.h, after, 8, NULL), n);
	for (int i = 0; i < n; i++)
		assert_true(after[i].hash == before[i].hash &&
		    after[i].lower == before[i].lower &&
		    after[i].upper == before[i].upper);
	assert_true(after[0].klen == 2 && memcmp(after[0].key, "h1", 2) == 0);
	fixture_done(&f);
}

/* ---- Damaged sections ---------------------------------------------------- */

/* A snapshot file in memory, with its sections found. */
struct snapfile {
	unsigned char *b;
	size_t len;
	size_t sec[4];                  /* offset of section kind k's header */
};

static void
snap_load(struct snapfile *sf, const char *path)
{
	uint64_t hreg, lreg, arena;
	size_t at;
	FILE *in = fopen(path, "rb");

	assert_non_null(in);
	assert_int_equal(fseek(in, 0, SEEK_END), 0);
	sf->len = (size_t)ftell(in);
	rewind(in);
	sf->b = malloc(sf->len);
	assert_non_null(sf->b);
	assert_true(fread(sf->b, 1, sf->len, in) == sf->len);
	fclose(in);
	memcpy(&hreg, sf->b + 112 + offsetof(struct shmt_hdr,
	    sh_regions[SHMT_R_HEADER].rg_size), 8);
	memcpy(&lreg, sf->b + 112 + offsetof(struct shmt_hdr,
	    sh_regions[SHMT_R_LIMITERS].rg_size), 8);
	memcpy(&arena, sf->b + 88, 8);
	memset(sf->sec, 0, sizeof(sf->sec));
	for (at = 112 + hreg + lreg + arena; at + 24 <= sf->len;) {
		uint32_t kind;
		uint64_t bytes;

		memcpy(&kind, sf->b + at, 4);
		memcpy(&bytes, sf->b + at + 16, 8);
		assert_true(kind >= 1 && kind <= 3);
		sf->sec[kind] = at;
		at += 24 + bytes;
	}
	assert_true(at == sf->len);
}

/* Write SF back to PATH, cut to LEN bytes, with its size and both checksums
 * made right: the file is whole, what it says is not. */
static void
snap_store(struct snapfile *sf, const char *path, size_t len)
{
	uint64_t v = len - 112;
	FILE *out;

	memcpy(sf->b + 80, &v, 8);
	v = fnv1a_words(sf->b + 112, len - 112);
	memcpy(sf->b + 96, &v, 8);
	v = fnv1a(sf->b, 104);
	memcpy(sf->b + 104, &v, 8);
	out = fopen(path, "wb");
	assert_non_null(out);
	assert_true(fwrite(sf->b, 1, len, out) == len);
	assert_int_equal(fclose(out), 0);
}

static void
put_u32(struct snapfile *sf, size_t at, uint32_t v)
{
	memcpy(sf->b + at, &v, 4);
}

static void
put_u64(struct snapfile *sf, size_t at, uint64_t v)
{
	memcpy(sf->b + at, &v, 8);
}

/* The offset of the record of KEY in section KIND. */
static size_t
rec_of(const struct snapfile *sf, int kind, const char *key)
{
	uint64_t count, at = sf->sec[kind] + 24;

	memcpy(&count, sf->b + sf->sec[kind] + 8, 8);
	for (uint64_t i = 0; i < count; i++) {
		uint32_t kl, vl;

		memcpy(&kl, sf->b + at, 4);
		memcpy(&vl, sf->b + at + 4, 4);
		if (kl == strlen(key) && memcmp(sf->b + at + 16, key, kl) == 0)
			return at;
		at += 16 + kl + vl;
	}
	fail_msg("no record of %s", key);
	return 0;
}

/*
 * Files whose checksums are right but whose sections lie: cut short, a
 * count past the records, a key or value length past the section's end or
 * past the segment's limits, a key twice, a counter's value of the wrong
 * shape, an analyzer of another geometry, a section in the wrong place.
 * Each is refused with its reason; nothing is published, nothing crashes.
 */
static void
test_damaged_sections(void **state)
{
	struct snapfile sf, good;
	struct fixture f;
	uint64_t c;
	size_t r;

	(void)state;
	fixture_init(&f, "snapsec");
	assert_int_equal(shmt_set(f.h, "dupA", 4, "1", 1, 0), 0);
	assert_int_equal(shmt_set(f.h, "dupB", 4, "2", 1, 0), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(shmt_set(f.h, (char[]){ 'x', (char)('0' + i) },
		    2, "v", 1, 0), 0);
	assert_int_equal(shmt_hit(f.h, "cnt", 3, NULL), 0);
	assert_true(has(f.h, "dupA", "1"));
	write_ok(&f);
	snap_load(&good, f.path);
	assert_true(good.sec[1] != 0 && good.sec[2] != 0 && good.sec[3] != 0);
	sf = good;
	sf.b = malloc(good.len);
	assert_non_null(sf.b);

#define RESET() memcpy(sf.b, good.b, good.len)
	/* Cut in the middle of the dictionary's records. */
	RESET();
	snap_store(&sf, f.path, sf.sec[1] + 24 + 20);
	expect_refused(&f, SHMT_ECORRUPT, "section 1 claims");
	/* One record more than there are. */
	RESET();
	memcpy(&c, sf.b + sf.sec[1] + 8, 8);
	put_u64(&sf, sf.sec[1] + 8, c + 1);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "is cut short");
	/* A count no section can hold. */
	put_u64(&sf, sf.sec[1] + 8, 1ULL << 60);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "records in");
	/* One record fewer: bytes are left over. */
	put_u64(&sf, sf.sec[1] + 8, c - 1);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "bytes past its");
	/* A key length past the section's end, a value length past the
	 * limit, a key of no bytes. */
	RESET();
	r = rec_of(&sf, 1, "dupB");
	put_u32(&sf, r, 1000000);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "past its limits or the section's end");
	RESET();
	put_u32(&sf, r + 4, 0xffffffffU);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "past its limits or the section's end");
	RESET();
	put_u32(&sf, r, 0);
	put_u32(&sf, r + 4, 5);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "past its limits or the section's end");
	/* The same key twice. */
	RESET();
	memcpy(sf.b + r + 16, "dupA", 4);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "appears twice");
	/* A counter whose value is one byte short (its key one longer). */
	RESET();
	r = rec_of(&sf, 2, "cnt");
	put_u32(&sf, r, 4);
	memcpy(&c, sf.b + r + 4, 4);
	put_u32(&sf, r + 4, (uint32_t)c - 1);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "value of its shape");
	/* An analyzer of another geometry. */
	RESET();
	put_u32(&sf, sf.sec[3] + 24, 99);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "analyzer's section is refused");
	/* Sections out of order. */
	RESET();
	put_u32(&sf, sf.sec[2], 1);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "out of place");
	/* And the file as it was still restores. */
	RESET();
	snap_store(&sf, f.path, sf.len);
	restore_ok(&f);
	assert_true(has(f.h, "dupA", "1") && has(f.h, "dupB", "2"));
	assert_int_equal(count_of(f.h, "cnt"), 1);
#undef RESET
	free(sf.b);
	free(good.b);
	fixture_done(&f);
}

/* A segment without a dictionary, counters or analyzer round-trips with no
 * sections; a file that adds a section for a part the segment lacks is
 * refused. */
static void
test_sections_without_regions(void **state)
{
	struct snapfile sf;
	shmt_config_t cfg;
	struct fixture f;
	size_t len;

	(void)state;
	fixture_init(&f, "snapnone");
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);
	shmt_config_init(&cfg);
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	assert_int_equal(shmt_create(f.seg, &cfg, &f.h), 0);
	write_ok(&f);
	snap_load(&sf, f.path);
	assert_true(sf.sec[1] == 0 && sf.sec[2] == 0 && sf.sec[3] == 0);
	restore_ok(&f);
	assert_int_equal(shmt_set(f.h, "k", 1, "v", 1, 0), -ENODEV);
	shmt_close(f.h);
	f.h = NULL;
	assert_int_equal(shmt_unlink(f.seg), 0);

	len = sf.len;
	sf.b = realloc(sf.b, len + 24 + 5);
	assert_non_null(sf.b);
	memset(sf.b + len, 0, 24 + 5);
	for (uint32_t kind = 1; kind <= 3; kind++) {
		put_u32(&sf, len, kind);
		put_u64(&sf, len + 16, 5);
		snap_store(&sf, f.path, len + 24 + 5);
		expect_refused(&f, SHMT_ECORRUPT, kind == 3 ?
		    "without an analyzer" : "the segment has no");
	}
	free(sf.b);
	fixture_done(&f);
}

/* A version 2 file (the limiters' pieces only, as earlier builds wrote)
 * still restores; one that claims version 2 but carries sections is
 * refused. */
static void
test_version2(void **state)
{
	struct snapfile sf;
	shmt_config_t cfg;
	struct fixture f;
	uint32_t v2 = 2;

	(void)state;
	fixture_init(&f, "snapv2");
	shmt_close(f.h);
	assert_int_equal(shmt_unlink(f.seg), 0);
	shmt_config_init(&cfg);
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	assert_int_equal(shmt_create(f.seg, &cfg, &f.h), 0);
	assert_int_equal(shmt_set_clock(f.h, tu_clock_read, &f.clk), 0);
	assert_int_equal(shmt_limiter_define(f.h, "a", &(shmt_limit_t){
	    .limit = 2, .window_ns = 3600 * S, .slack_ns = 60 * S,
	    .slack_uses = 1 }), 0);
	assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
	write_ok(&f);
	snap_load(&sf, f.path);
	memcpy(sf.b + 8, &v2, 4);
	snap_store(&sf, f.path, sf.len);
	restore_ok(&f);
	assert_int_equal(shmt_try_use_key(f.h, "a"), 1);
	assert_int_equal(shmt_try_use_key(f.h, "a"), 0);
	shmt_close(f.h);
	f.h = NULL;
	assert_int_equal(shmt_unlink(f.seg), 0);
	free(sf.b);

	/* Version 2 with sections after the pieces. */
	fixture_init(&f, "snapv2s");
	write_ok(&f);
	snap_load(&sf, f.path);
	memcpy(sf.b + 8, &v2, 4);
	snap_store(&sf, f.path, sf.len);
	expect_refused(&f, SHMT_ECORRUPT, "do not add up");
	free(sf.b);
	fixture_done(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_delta),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_restore_keeps_secret),
		cmocka_unit_test(test_roundtrip_gcra),
		cmocka_unit_test(test_other_build),
		cmocka_unit_test(test_random_files),
		cmocka_unit_test(test_damaged_state_refused),
		cmocka_unit_test(test_not_a_regular_file),
		cmocka_unit_test(test_restore_keeps_dict_limits),
		cmocka_unit_test(test_dict_roundtrip),
		cmocka_unit_test(test_reboot),
		cmocka_unit_test(test_counters_analyzer_roundtrip),
		cmocka_unit_test(test_damaged_sections),
		cmocka_unit_test(test_sections_without_regions),
		cmocka_unit_test(test_version2),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
