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
	/* The restored image is checked on the clock that wrote it. */
	shmtd_snapshot_check_clock(tu_clock_read, &f->clk);
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
