/* SPDX-License-Identifier: MIT */
/*
 * Who may attach: the segment's mode and group decide, for users other
 * than the creator.  test_segment's other-user test opens as nobody with
 * nobody's group; this one separates the user from the group: a member of
 * the segment's group (as primary or as supplementary group) gets in with
 * group mode 0660 and not with 0600 or 0640 (attaching needs write), and a
 * user outside the group stays out.  Then who is trusted: a segment
 * another user made first is refused by root unless root names its owner,
 * attached by members of its group with mode 0660, and refused by
 * everyone when every user may write it.  It needs root to switch users and is
 * skipped otherwise (and where root cannot switch, as in some containers).
 */
#include "testutil.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A user id that owns nothing and the group the segments are given. */
#define OTHER_UID 65533
#define SEG_GID 65534
#define OTHER_GID 65533
/* A user who creates a segment before anyone else, in group SEG_GID. */
#define CREATOR_UID 65532

/* Open NAME in a child running as OTHER_UID with primary group GID and
 * supplementary groups SUPP (NSUPP of them), trusting OWNER too ((uid_t)-1:
 * nobody more).  Returns shmt_open_opts's result, or INT_MIN when the child
 * could not switch. */
struct open_as_args {
	const char *name;
	gid_t gid;
	const gid_t *supp;
	size_t nsupp;
	uid_t owner;
};

static int
open_as_child(void *arg)
{
	const struct open_as_args *a = arg;
	shmt_open_opts_t o;
	shmt_t *h = NULL;
	int rc = INT_MIN;

	shmt_open_opts_init(&o);
	o.owner = a->owner;
	if (setgroups(a->nsupp, a->supp) == 0 && setgid(a->gid) == 0 &&
	    setuid(OTHER_UID) == 0)
		rc = shmt_open_opts(a->name, &o, &h);
	shmt_close(h);
	return rc;
}

static int
open_as_owner(const char *name, gid_t gid, const gid_t *supp, size_t nsupp,
    uid_t owner)
{
	struct open_as_args a = { name, gid, supp, nsupp, owner };

	return tu_child_result(open_as_child, &a, 10);
}

static int
open_as(const char *name, gid_t gid, const gid_t *supp, size_t nsupp)
{
	return open_as_owner(name, gid, supp, nsupp, (uid_t)-1);
}

static void
perm_config(shmt_config_t *cfg)
{
	shmt_config_init(cfg);
	cfg->max_limiters = 4;
	cfg->max_slots = 8;
	cfg->arena_bytes = 64ULL << 10;
	cfg->dict_bytes = 0;
	cfg->counters_bytes = 0;
	cfg->analyzer_bytes = 0;
}

/* Create NAME in a child running as CREATOR_UID (group SEG_GID) with
 * MODE, then set the object's mode to CHMOD (when not 0), as that user
 * may.  Returns shmt_create's result, or INT_MIN when it could not
 * switch. */
struct create_as_args {
	const char *name;
	mode_t mode, chmod_to;
};

static int
create_as_child(void *arg)
{
	const struct create_as_args *a = arg;
	shmt_config_t cfg;
	shmt_t *h = NULL;
	char path[192];
	int rc = INT_MIN;

	perm_config(&cfg);
	cfg.mode = a->mode;
	if (setgroups(0, NULL) == 0 && setgid(SEG_GID) == 0 &&
	    setuid(CREATOR_UID) == 0) {
		rc = shmt_create(a->name, &cfg, &h);
		snprintf(path, sizeof(path), "/dev/shm%s", a->name);
		if (rc == 0 && a->chmod_to != 0 && chmod(path, a->chmod_to) != 0)
			rc = -errno;
	}
	shmt_close(h);
	return rc;
}

static int
create_as_creator(const char *name, mode_t mode, mode_t chmod_to)
{
	struct create_as_args a = { name, mode, chmod_to };

	return tu_child_result(create_as_child, &a, 10);
}

/* Root's open in this process, trusting OWNER too. */
static int
open_here(const char *name, uid_t owner)
{
	shmt_open_opts_t o;
	shmt_t *h = NULL;
	int rc;

	shmt_open_opts_init(&o);
	o.owner = owner;
	rc = shmt_open_opts(name, &o, &h);
	shmt_close(h);
	return rc;
}

/*
 * Who is trusted: a segment that another user (CREATOR_UID, group SEG_GID)
 * made first is refused by root unless root names that user; a worker in
 * the creator's group attaches a 0660 segment (as workers in the daemon's
 * group do); a segment every user may write is refused by everyone, named
 * owner or not.
 */
static void
test_owner(void **state)
{
	const gid_t seg_gid = SEG_GID;
	struct {
		mode_t mode, chmod_to;
		int root, root_named, member, member_named;
		const char *what;
	} cases[] = {
		{ 0660, 0, SHMT_EUNTRUSTED, 0, 0, 0, "another user's 0660" },
		{ 0600, 0660, SHMT_EUNTRUSTED, 0, 0, 0,
		    "another user's, made 0660" },
		{ 0660, 0666, SHMT_EUNTRUSTED, SHMT_EUNTRUSTED, SHMT_EUNTRUSTED,
		    SHMT_EUNTRUSTED, "another user's, made 0666" },
		/* A member of the group gets the group's bits (none). */
		{ 0600, 0606, SHMT_EUNTRUSTED, SHMT_EUNTRUSTED, -EACCES,
		    -EACCES, "another user's, made 0606" },
	};
	int fds = tu_fd_count();

	(void)state;
	if (geteuid() != 0) {
		printf("# test_owner: needs root to switch users: skipped\n");
		skip();
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[128];
		int root, root_named, member, member_named, rc;

		tu_segname(name, sizeof(name), "owner");
		rc = create_as_creator(name, cases[i].mode, cases[i].chmod_to);
		if (rc == INT_MIN) {
			printf("# test_owner: cannot switch users: skipped\n");
			skip();
		}
		assert_int_equal(rc, 0);
		root = open_here(name, (uid_t)-1);
		root_named = open_here(name, CREATOR_UID);
		member = open_as(name, OTHER_GID, &seg_gid, 1);
		member_named = open_as_owner(name, OTHER_GID, &seg_gid, 1,
		    CREATOR_UID);
		assert_int_equal(shmt_unlink(name), 0);
		printf("# %s: root %s; root naming it %s; group member %s\n",
		    cases[i].what, shmt_strerror(root), shmt_strerror(root_named),
		    shmt_strerror(member));
		assert_int_equal(root, cases[i].root);
		assert_int_equal(root_named, cases[i].root_named);
		assert_int_equal(member, cases[i].member);
		assert_int_equal(member_named, cases[i].member_named);
	}
	assert_int_equal(tu_fd_count(), fds);
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
		cmocka_unit_test_teardown(test_owner, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
