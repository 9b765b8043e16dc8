/* SPDX-License-Identifier: MIT */
/*
 * shmt_limiter_buckets reads a ring that other processes turn over: a
 * ring that moves under the read is read again, never reported damaged.
 */
#include "testutil.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child grants on a ring of four buckets as fast as it can, its clock
 * one slack further at each call, so that buckets seal, release and are
 * reused all the time; meanwhile this process reads the ring for half a
 * second: every read is whole (at most four buckets, closing in order). */
static void
test_buckets_read_while_turning(void **state)
{
	shmt_limit_t l = { .limit = 4, .window_ns = 40, .slack_ns = 10,
		.slack_uses = 1 };
	shmt_bucket_info_t b[8];
	char name[64];
	shmt_config_t cfg;
	shmt_t *h = NULL;
	int reads = 0, rc = 0, p[2];
	uint64_t t0;
	char go = 0;
	pid_t pid;

	(void)state;
	tu_segname(name, sizeof(name), "bkr");
	tu_config_tiny(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "r", &l), 0);
	if ((pid = tu_fork_pipe(p)) == 0) {
		shmt_t *c = NULL;
		struct tu_clock clk = { 1000 };

		alarm(60);
		close(p[0]);
		if (shmt_open(name, &c) != 0 ||
		    shmt_set_clock(c, tu_clock_read, &clk) != 0 ||
		    shmt_try_use_key(c, "r") != 1 || write(p[1], "g", 1) != 1)
			_exit(2);
		for (;;) {
			clk.now += 10;
			if (shmt_try_use_key(c, "r") < 0)
				_exit(3);
		}
	}
	close(p[1]);
	assert_int_equal(read(p[0], &go, 1), 1);
	close(p[0]);
	/* Reads for half a second (the child grants all along). */
	t0 = tu_mono_ns();
	while (tu_mono_ns() - t0 < 500000000ULL) {
		rc = shmt_limiter_buckets(h, "r", b, 8);
		if (rc < 0)
			break;
		assert_true(rc <= 4);
		/* One turn of the ring: each bucket closes after the one
		 * before it (slots of two turns would not). */
		for (int j = 1; j < rc; j++)
			assert_true(b[j].close_ns > b[j - 1].close_ns);
		reads++;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	if (rc < 0)
		fail_msg("read %d: %s", reads, shmt_strerror(rc));
	printf("# %d reads of a turning ring\n", reads);
	tu_close_unlink(h, name);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets_read_while_turning),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
