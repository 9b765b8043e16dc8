/* SPDX-License-Identifier: MIT */
/*
 * Who owns a segment after a move (lib/move.c): the new generation keeps
 * the old object's owner, group and mode, whoever moves it.
 * - a worker running as nobody creates a segment; root moves it (as
 *   `shmthrottle resize` would): the worker's handle follows and grants,
 *   it reopens the segment by name, and the object is still nobody's;
 * - root attaches nobody's segment naming nobody as the owner it trusts;
 *   nobody moves it: root's handle follows (trusting the same owner in the
 *   new generation) and grants;
 * - a member of the segment's group, neither its owner nor root, may not
 *   move it (it could not give the new object to the owner): refused with
 *   -EPERM before anything changes.
 * It needs root to switch users and is skipped otherwise (and where root
 * cannot switch, as in some containers).
 */
#include "daemon.h"
#include "segment.h"
#include "testutil.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OW_S 1000000000ULL
/* The segment's owner (nobody), and a user in the segment's group. */
#define OW_UID 65534
#define OW_GID 65534
#define OTHER_UID 65533
#define OTHER_GID 65533

static int
become(uid_t uid, gid_t gid, const gid_t *supp, size_t nsupp)
{
	return setgroups(nsupp, supp) == 0 && setgid(gid) == 0 &&
	    setuid(uid) == 0 ? 0 : -1;
}

static int
switch_child(void *arg)
{
	(void)arg;
	return become(OW_UID, OW_GID, NULL, 0);
}

/* Skip unless this process is root and may switch users. */
static void
need_switch(const char *test)
{
	if (geteuid() != 0) {
		printf("# %s: needs root to switch users: skipped\n", test);
		skip();
	}
	if (tu_child_result(switch_child, NULL, 10) != 0) {
		printf("# %s: cannot switch users: skipped\n", test);
		skip();
	}
}

static void
ow_config(shmt_config_t *c, mode_t mode, gid_t gid)
{
	tu_config_small(c);
	c->mode = mode;
	c->gid = gid;
}

static int
ow_define(shmt_t *h)
{
	shmt_limit_t l = { .limit = 100, .window_ns = 3600 * OW_S,
		.slack_ns = OW_S, .slack_uses = 10 };

	return shmt_limiter_define(h, "api", &l);
}

/* Move H into a generation with more limiter rows: 0 or the error, with
 * the reason in ERR. */
static int
ow_move(shmt_t *h, char *err, size_t cap)
{
	shmt_config_t c;

	shmt__move_config(h, &c);
	c.max_limiters += 8;
	return shmt__move(h, &c, NULL, NULL, err, cap);
}

static void
ow_stat(const char *seg, struct stat *st)
{
	char path[160];

	snprintf(path, sizeof(path), "/dev/shm%s", seg);
	assert_int_equal(stat(path, st), 0);
}

/* The worker of test_owner_root_moves, as nobody: create, define, grant,
 * say so on UP, wait for the move on DOWN, then grant through the same
 * handle and through a new one opened by name. */
static int
root_moves_worker(const char *seg, int up, int down)
{
	shmt_config_t c;
	shmt_t *h, *n;
	char b;
	int rc;

	if (become(OW_UID, OW_GID, NULL, 0) != 0)
		return 9;
	ow_config(&c, 0600, (gid_t)-1);
	if (shmt_create(seg, &c, &h) != 0 || ow_define(h) != 0 ||
	    shmt_try_use_key(h, "api") != 1)
		return 10;
	if (write(up, "r", 1) != 1 || read(down, &b, 1) != 1)
		return 11;
	if ((rc = shmt_try_use_key(h, "api")) != 1) {
		printf("# worker after the move: %d (%s)\n", rc,
		    shmt_strerror(rc));
		return 12;
	}
	if (shmt__gen_live(h) == h)
		return 13;
	if ((rc = shmt_open(seg, &n)) != 0) {
		printf("# worker reopening by name: %d (%s)\n", rc,
		    shmt_strerror(rc));
		return 14;
	}
	rc = shmt_try_use_key(n, "api");
	shmt_close(n);
	shmt_close(h);
	return rc == 1 ? 0 : 15;
}

static void
test_owner_root_moves(void **state)
{
	shmt_open_opts_t o;
	struct stat st;
	char seg[96], err[512] = "", b;
	int up[2], down[2], ws, rc;
	shmt_t *h;
	pid_t pid;

	(void)state;
	need_switch("test_owner_root_moves");
	tu_segname(seg, sizeof(seg), "rootmv");
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		_exit(root_moves_worker(seg, up[1], down[0]));
	}
	close(up[1]);
	close(down[0]);
	assert_int_equal(read(up[0], &b, 1), 1);
	/* Root, as an operator's resize: it names the owner it trusts. */
	shmt_open_opts_init(&o);
	o.owner = OW_UID;
	assert_int_equal(shmt_open_opts(seg, &o, &h), 0);
	if ((rc = ow_move(h, err, sizeof(err))) != 0)
		print_message("move: %s\n", err);
	assert_int_equal(rc, 0);
	ow_stat(seg, &st);
	assert_int_equal(st.st_uid, OW_UID);
	assert_int_equal(st.st_gid, OW_GID);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(write(down[1], "m", 1), 1);
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	close(up[0]);
	close(down[1]);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

static int
create_child(void *arg)
{
	const char *seg = arg;
	shmt_config_t c;
	shmt_t *h;
	int rc;

	if (become(OW_UID, OW_GID, (gid_t[]){ OTHER_GID }, 1) != 0)
		return 9;
	ow_config(&c, 0660, OTHER_GID);
	if ((rc = shmt_create(seg, &c, &h)) != 0)
		return rc;
	rc = ow_define(h);
	shmt_close(h);
	return rc;
}

static int
nobody_move_child(void *arg)
{
	const char *seg = arg;
	char err[512] = "";
	shmt_t *h;
	int rc;

	if (become(OW_UID, OW_GID, (gid_t[]){ OTHER_GID }, 1) != 0)
		return 9;
	if ((rc = shmt_open(seg, &h)) != 0)
		return rc;
	if ((rc = ow_move(h, err, sizeof(err))) != 0)
		printf("# nobody's move: %s\n", err);
	shmt_close(h);
	return rc;
}

static void
test_owner_kept_on_follow(void **state)
{
	shmt_open_opts_t o;
	struct stat st;
	char seg[96];
	shmt_t *h;
	int rc;

	(void)state;
	need_switch("test_owner_kept_on_follow");
	tu_segname(seg, sizeof(seg), "follow");
	assert_int_equal(tu_child_result(create_child, seg, 10), 0);
	shmt_open_opts_init(&o);
	o.owner = OW_UID;
	assert_int_equal(shmt_open_opts(seg, &o, &h), 0);
	assert_int_equal(shmt_try_use_key(h, "api"), 1);
	assert_int_equal(tu_child_result(nobody_move_child, seg, 20), 0);
	rc = shmt_try_use_key(h, "api");
	if (rc != 1)
		print_message("root after nobody's move: %d (%s)\n", rc,
		    shmt_strerror(rc));
	assert_int_equal(rc, 1);
	assert_true(shmt__gen_live(h) != h);
	ow_stat(seg, &st);
	assert_int_equal(st.st_uid, OW_UID);
	assert_int_equal(st.st_gid, OTHER_GID);
	assert_int_equal(st.st_mode & 0777, 0660);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

static int
other_move_child(void *arg)
{
	const char *seg = arg;
	char err[512] = "";
	shmt_t *h;
	int rc;

	if (become(OTHER_UID, OTHER_GID, NULL, 0) != 0)
		return 9;
	/* Trusted through its group (0660), as a worker is. */
	if ((rc = shmt_open(seg, &h)) != 0)
		return 100 + (rc < 0 ? -rc : rc) % 100;
	rc = ow_move(h, err, sizeof(err));
	printf("# a group member's move: %d: %s\n", rc, err);
	if (rc == -EPERM && strstr(err, "only that user or root") == NULL)
		rc = 10;
	shmt_close(h);
	return rc == -EPERM ? 0 : 11;
}

static void
test_owner_move_refused(void **state)
{
	struct stat before, after;
	shmt_open_opts_t o;
	char seg[96];
	shmt_t *h;

	(void)state;
	need_switch("test_owner_move_refused");
	tu_segname(seg, sizeof(seg), "refused");
	assert_int_equal(tu_child_result(create_child, seg, 10), 0);
	ow_stat(seg, &before);
	assert_int_equal(tu_child_result(other_move_child, seg, 20), 0);
	/* Nothing changed: the same object, live, with its owner. */
	ow_stat(seg, &after);
	assert_true(before.st_ino == after.st_ino);
	assert_int_equal(after.st_uid, OW_UID);
	shmt_open_opts_init(&o);
	o.owner = OW_UID;
	assert_int_equal(shmt_open_opts(seg, &o, &h), 0);
	assert_int_equal(__atomic_load_n(&h->hdr->sh_retired, __ATOMIC_ACQUIRE),
	    SHMT_SEG_LIVE);
	assert_int_equal(shmt_try_use_key(h, "api"), 1);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_owner_root_moves, tu_sweep),
		cmocka_unit_test_teardown(test_owner_kept_on_follow, tu_sweep),
		cmocka_unit_test_teardown(test_owner_move_refused, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
