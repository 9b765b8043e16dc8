/* SPDX-License-Identifier: MIT */
/*
 * Namespaces: a process in another PID namespace or another time namespace
 * than a segment's creator is refused at attach with SHMT_ENAMESPACE (its
 * pids and monotonic times would mean something else), both ways round;
 * a process in the same namespaces attaches.  Real namespaces, made with
 * unshare(2) in forked children; skipped where the kernel or the user may
 * not make them.
 */
#include "testutil.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* What the grandchild does in the new namespace. */
enum act { OPEN_REFUSED, CREATE };

/* Unshare FLAGS in a child, then act in a grandchild (the first process
 * in the new namespaces).  Returns the grandchild's exit status, or 77
 * when the namespace could not be made. */
static int
in_new_ns(int flags, const char *seg, enum act act)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		pid_t g;

		alarm(20);
		if (unshare(flags) != 0)
			_exit(77);
		if ((g = fork()) < 0)
			_exit(3);
		if (g == 0) {
			shmt_t *h = NULL;
			int rc;

			if (act == CREATE) {
				rc = shmt_create(seg, NULL, &h);
				if (rc == 0)
					shmt_close(h);
				_exit(rc == 0 ? 0 : 4);
			}
			rc = shmt_open(seg, &h);
			if (rc != SHMT_ENAMESPACE) {
				fprintf(stderr, "open in a new namespace: %d "
				    "(%s), want SHMT_ENAMESPACE\n", rc,
				    shmt_strerror(rc));
				_exit(5);
			}
			_exit(0);
		}
		if (waitpid(g, &status, 0) != g || !WIFEXITED(status))
			_exit(6);
		_exit(WEXITSTATUS(status));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void
test_other_namespaces_refused(void **state)
{
	const int kinds[] = { CLONE_NEWPID, CLONE_NEWTIME };
	const char *names[] = { "PID", "time" };
	char seg[128];
	shmt_t *h;
	int ran = 0;

	(void)state;
	tu_segname(seg, sizeof(seg), "ns");
	for (int i = 0; i < 2; i++) {
		int rc;

		assert_int_equal(shmt_create(seg, NULL, &h), 0);
		rc = in_new_ns(kinds[i], seg, OPEN_REFUSED);
		shmt_close(h);
		assert_int_equal(shmt_unlink(seg), 0);
		if (rc == 77) {
			printf("# no new %s namespace here: not checked\n",
			    names[i]);
			continue;
		}
		if (rc != 0)
			fail_msg("%s namespace: the grandchild exited %d",
			    names[i], rc);
		/* The other way round: made in the new namespace, refused
		 * here. */
		rc = in_new_ns(kinds[i], seg, CREATE);
		assert_int_equal(rc, 0);
		assert_int_equal(shmt_open(seg, &h), SHMT_ENAMESPACE);
		assert_int_equal(shmt_unlink(seg), 0);
		ran++;
	}
	if (ran == 0)
		skip();
}

/* A forked child, in its parent's namespaces, attaches as always. */
static void
test_same_namespaces_attach(void **state)
{
	char seg[128];
	shmt_t *h;
	int status;
	pid_t pid;

	(void)state;
	tu_segname(seg, sizeof(seg), "nsok");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_t *c = NULL;

		_exit(shmt_open(seg, &c) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_other_namespaces_refused),
		cmocka_unit_test(test_same_namespaces_attach),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
