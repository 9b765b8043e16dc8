/* SPDX-License-Identifier: MIT */
/*
 * Snapshots at the library level, with an injected clock: the time-base
 * arithmetic across a reboot, a round trip that keeps the uses in flight
 * and their release times, and files that are damaged, foreign, made by
 * another build, or random bytes: refused with a reason, nothing left
 * behind.
 */
#include "snapshot.h"

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
		cmocka_unit_test(test_roundtrip_gcra),
		cmocka_unit_test(test_other_build),
		cmocka_unit_test(test_random_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
