/* SPDX-License-Identifier: MIT */
/*
 * Who may attach: the segment's mode and group decide, for users other
 * than the creator.  test_segment's other-user test opens as nobody with
 * nobody's group; this one separates the user from the group: a member of
 * the segment's group (as primary or as supplementary group) gets in with
 * group mode 0660 and not with 0600 or 0640 (attaching needs write), and a
 * user outside the group stays out.  It needs root to switch users and is
 * skipped otherwise (and where root cannot switch, as in some containers).
 */
#include "testutil.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A user id that owns nothing and the group the segments are given. */
#define OTHER_UID 65533
#define SEG_GID 65534
#define OTHER_GID 65533

/* Open NAME in a child running as OTHER_UID with primary group GID and
 * supplementary groups SUPP (NSUPP of them).  Returns shmt_open's result,
 * or INT_MIN when the child could not switch. */
static int
open_as(const char *name, gid_t gid, const gid_t *supp, size_t nsupp)
{
	int p[2], rc = INT_MIN, st;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_t *h = NULL;

		alarm(10);
		close(p[0]);
		if (setgroups(nsupp, supp) == 0 && setgid(gid) == 0 &&
		    setuid(OTHER_UID) == 0)
			rc = shmt_open(name, &h);
		shmt_close(h);
		_exit(write(p[1], &rc, sizeof(rc)) == sizeof(rc) ? 0 : 1);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &rc, sizeof(rc)), sizeof(rc));
	close(p[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return rc;
}

static void
test_group(void **state)
{
	const gid_t seg_gid = SEG_GID;
	const struct {
		mode_t mode;
		gid_t gid;           /* the user's primary group */
		int supp;            /* 1: SEG_GID as supplementary group */
		int want;
		const char *who;
	} cases[] = {
		{ 0600, SEG_GID, 0, -EACCES, "group member, owner-only mode" },
		{ 0640, SEG_GID, 0, -EACCES, "group member, group read-only" },
		{ 0660, SEG_GID, 0, 0, "group member (primary)" },
		{ 0660, OTHER_GID, 1, 0, "group member (supplementary)" },
		{ 0660, OTHER_GID, 0, -EACCES, "outside the group" },
		{ 0600, OTHER_GID, 0, -EACCES, "outside the group, owner-only" },
	};
	int fds = tu_fd_count();

	(void)state;
	if (geteuid() != 0) {
		printf("# test_group: needs root to switch users: skipped\n");
		skip();
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		shmt_config_t cfg;
		char name[128];
		shmt_t *h = NULL;
		int rc;

		tu_segname(name, sizeof(name), "perm");
		shmt_config_init(&cfg);
		cfg.max_limiters = 4;
		cfg.max_slots = 8;
		cfg.arena_bytes = 64ULL << 10;
		cfg.dict_bytes = 0;
		cfg.counters_bytes = 0;
		cfg.analyzer_bytes = 0;
		cfg.mode = cases[i].mode;
		cfg.gid = SEG_GID;
		assert_int_equal(shmt_create(name, &cfg, &h), 0);
		rc = open_as(name, cases[i].gid, &seg_gid, cases[i].supp);
		shmt_close(h);
		assert_int_equal(shmt_unlink(name), 0);
		if (rc == INT_MIN) {
			printf("# test_group: cannot switch users: skipped\n");
			skip();
		}
		printf("# mode %04o, %s: %s\n", (unsigned)cases[i].mode,
		    cases[i].who, rc == 0 ? "attached" : shmt_strerror(rc));
		assert_int_equal(rc, cases[i].want);
	}
	assert_int_equal(tu_fd_count(), fds);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_group),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
