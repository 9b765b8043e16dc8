/* SPDX-License-Identifier: MIT */
/*
 * Images of limiters that grant while the image is taken (lib/image.c,
 * "Consistency"): forked processes grant as fast as they can on an exact
 * and on a buckets limiter placed after a large per-client table (so the
 * arena's copy takes a while), the parent takes images and restores each
 * into a fresh segment.  Every restore must succeed and pass shmt_check,
 * and the restored exact limiter must count at least the uses in flight
 * the live one counted just before the image, at the same clock value.
 */
#include "daemon.h"
#include "image.h"
#include "segment.h"
#include "testutil.h"

#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define IMAGES 12

static void
problem(void *ctx, const char *p)
{
	(void)ctx;
	printf("# restored segment: %s\n", p);
}

static void
granter(const char *seg, const char *name)
{
	shmt_t *x;

	if (shmt_open(seg, &x) != 0)
		_exit(1);
	for (uint64_t i = 0; i < 2000000000ULL; i++)
		if (shmt_try_use_key(x, name) < 0)
			_exit(2);
	_exit(0);
}

static void
test_image_busy_limiters(void **state)
{
	uint64_t seed = tu_seed("test_image_busy_limiters"), rs = seed;
	char seg[96], rest[96];
	shmt_config_t c;
	shmt_t *h;
	pid_t kid[2];
	int refused = 0;
	shmt_limit_t big = { .limit = 10, .window_ns = 3600000000000ULL,
		.slack_ns = 3600000000000ULL, .slack_uses = 10,
		.per_client = 1, .client_capacity = 100000 };
	shmt_limit_t ex = { .limit = 64, .window_ns = 1000,
		.mode = SHMT_MODE_EXACT };
	shmt_limit_t bk = { .limit = 8, .window_ns = 1000, .slack_ns = 1000,
		.slack_uses = 1 };

	(void)state;
	tu_segname(seg, sizeof(seg), "cut");
	tu_segname(rest, sizeof(rest), "cutr");
	shmt_config_init(&c);
	c.dict_bytes = 0;
	c.counters_bytes = 0;
	c.analyzer_bytes = 0;
	c.arena_bytes = 16ULL << 20;
	c.max_slots = 16;
	assert_int_equal(shmt_create(seg, &c, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "big", &big), 0);
	assert_int_equal(shmt_limiter_define(h, "ex", &ex), 0);
	assert_int_equal(shmt_limiter_define(h, "bk", &bk), 0);
	fflush(NULL);
	if ((kid[0] = fork()) == 0)
		granter(seg, "ex");
	if ((kid[1] = fork()) == 0)
		granter(seg, "bk");
	assert_true(kid[0] > 0 && kid[1] > 0);
	tu_pause_ms(50);
	for (int i = 0; i < IMAGES; i++) {
		struct shmt__host_time now;
		struct tu_clock clk;
		shmt_limiter_stat_t live, got;
		unsigned char *img;
		size_t len;
		char err[600] = "";
		shmt_t *t;
		int rc, n;

		/* A seeded pause: images fall at varied points of the
		 * granters' work. */
		tu_pause_ms((int)(tu_rand(&rs) % 5));
		clk.now = tu_mono_ns();
		assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
		assert_int_equal(shmt_limiter_stat(h, "ex", &live), 0);
		assert_int_equal(shmt_set_clock(h, NULL, NULL), 0);
		shmt__host_time_now(&now);
		assert_int_equal(shmt__image_build(h, &now, &img, &len), 0);
		shmt_unlink(rest);
		rc = shmt__image_restore(img, len, rest, &now, NULL, NULL, err,
		    sizeof(err));
		free(img);
		if (rc != 0) {
			printf("# image %d refused: %d %s\n", i, rc, err);
			refused++;
			continue;
		}
		assert_int_equal(shmt_open(rest, &t), 0);
		n = shmt_check(t, problem, NULL);
		assert_int_equal(n, 0);
		assert_int_equal(shmt_set_clock(t, tu_clock_read, &clk), 0);
		assert_int_equal(shmt_limiter_stat(t, "ex", &got), 0);
		assert_true(got.in_flight >= live.in_flight);
		assert_int_equal(shmt_limiter_stat(t, "bk", &got), 0);
		assert_true(got.in_flight <= bk.limit);
		shmt_close(t);
		shmt_unlink(rest);
	}
	for (int k = 0; k < 2; k++) {
		kill(kid[k], SIGKILL);
		waitpid(kid[k], NULL, 0);
	}
	printf("# seed %" PRIu64 ": %d of %d images refused\n", seed, refused,
	    IMAGES);
	assert_int_equal(refused, 0);
	tu_close_unlink(h, seg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_image_busy_limiters),
	};

	return cmocka_run_group_tests(tests, NULL, tu_sweep);
}
