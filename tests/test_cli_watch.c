/* SPDX-License-Identifier: MIT */
/*
 * `shmthrottle watch` under a pseudo-terminal: it draws frames, switches the
 * terminal to raw input while it runs, and gives the terminal back exactly
 * as it found it when 'q' is typed, on SIGTERM and on Ctrl-C (SIGINT from
 * the terminal); it also releases its process slot.  Frames show the hot
 * keys the test requested.  Without a terminal it prints plain frames.
 * Frames come every 50 ms (-d 0.05), so no test waits for a real second.
 *
 * Usage: test_cli_watch CLI-BINARY.
 */
#include "testutil.h"

#include "test_cli_util.h"

#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define LIMIT_NS (30ULL * 1000000000ULL)

struct term {
	int master, slave;
	pid_t pid;
	struct termios before;
	char *out;
	size_t len;
	char seg[128];
	shmt_t *h;
};

static void
term_start(struct term *t, const char *tag)
{
	struct winsize ws = { .ws_row = 24, .ws_col = 100 };
	shmt_limit_t l = { .limit = 100, .window_ns = 3600000000000ULL,
		.slack_ns = 1000000000ULL, .slack_uses = 10 };

	memset(t, 0, sizeof(*t));
	tu_segname(t->seg, sizeof(t->seg), tag);
	tc_track(t->seg);
	assert_int_equal(shmt_create(t->seg, NULL, &t->h), 0);
	assert_int_equal(shmt_limiter_define(t->h, "web", &l), 0);
	assert_int_equal(openpty(&t->master, &t->slave, NULL, NULL, &ws), 0);
	assert_int_equal(tcgetattr(t->slave, &t->before), 0);
	fflush(NULL);
	t->pid = fork();
	assert_true(t->pid >= 0);
	if (t->pid == 0) {
		close(t->master);
		setsid();
		ioctl(t->slave, TIOCSCTTY, 0);
		dup2(t->slave, 0);
		dup2(t->slave, 1);
		dup2(t->slave, 2);
		if (t->slave > 2)
			close(t->slave);
		setenv("LC_ALL", "C.UTF-8", 1);
		execl(tc_bin, tc_bin, "-s", t->seg, "watch", "-d", "0.05",
		    (char *)NULL);
		_exit(127);
	}
}

/* Read what the terminal shows for up to 50 ms. */
static void
term_read(struct term *t)
{
	struct pollfd p = { t->master, POLLIN, 0 };
	char buf[4096];
	ssize_t n;

	if (poll(&p, 1, 50) <= 0)
		return;
	n = read(t->master, buf, sizeof(buf));
	if (n <= 0)
		return;
	t->out = realloc(t->out, t->len + (size_t)n + 1);
	assert_non_null(t->out);
	memcpy(t->out + t->len, buf, (size_t)n);
	t->len += (size_t)n;
	t->out[t->len] = '\0';
}

/* Frames end with "clear to end of screen". */
static int
frames(const struct term *t)
{
	int n = 0;

	for (const char *p = t->out; p && (p = strstr(p, "\033[J")); p += 3)
		n++;
	return n;
}

static void
wait_frames(struct term *t, int n)
{
	uint64_t start = tu_mono_ns();

	while (frames(t) < n) {
		if (tu_mono_ns() - start > LIMIT_NS) {
			kill(t->pid, SIGKILL);
			fail_msg("%d frames in 30 s, %d wanted: %s", frames(t), n,
			    t->out ? t->out : "");
		}
		term_read(t);
	}
}

/* Drain the terminal until the child exits; returns its wait status. */
static int
term_wait(struct term *t)
{
	uint64_t start = tu_mono_ns();
	int st;

	while (waitpid(t->pid, &st, WNOHANG) == 0) {
		if (tu_mono_ns() - start > LIMIT_NS) {
			kill(t->pid, SIGKILL);
			waitpid(t->pid, &st, 0);
			fail_msg("watch did not stop: %s", t->out ? t->out : "");
		}
		term_read(t);
	}
	for (int i = 0; i < 4; i++)
		term_read(t);
	return st;
}

/* The terminal is as it was before watch ran, and the screen was given
 * back (cursor shown, main screen) after the last frame. */
static void
expect_restored(struct term *t)
{
	struct termios after;
	const char *last = strstr(t->out, "\033[J"), *p;
	shmt_segment_stat_t st;

	assert_int_equal(tcgetattr(t->slave, &after), 0);
	assert_int_equal(after.c_lflag, t->before.c_lflag);
	assert_int_equal(after.c_iflag, t->before.c_iflag);
	assert_int_equal(after.c_oflag, t->before.c_oflag);
	assert_int_equal(after.c_cflag, t->before.c_cflag);
	assert_memory_equal(after.c_cc, t->before.c_cc, sizeof(after.c_cc));
	for (p = last; p != NULL; p = strstr(p + 3, "\033[J"))
		last = p;
	assert_non_null(last);
	assert_non_null(strstr(last, "\033[?25h\033[?1049l"));
	/* Its slot went with it: only this process is attached. */
	assert_int_equal(shmt_segment_stat(t->h, &st), 0);
	assert_int_equal(st.slots, 1);
}

static void
term_free(struct term *t)
{
	close(t->master);
	close(t->slave);
	free(t->out);
	shmt_close(t->h);
	assert_int_equal(shmt_unlink(t->seg), 0);
}

static void
expect_raw(const struct term *t)
{
	struct termios now;

	assert_int_equal(tcgetattr(t->slave, &now), 0);
	assert_int_equal(now.c_lflag & (ICANON | ECHO), 0);
	assert_true(now.c_lflag & ISIG);
}

/* A rate above zero, shown after grants made between two frames. */
static int
shows_ops(const char *out)
{
	for (const char *p = out; (p = strstr(p, "ops/s ")) != NULL; p += 6)
		if (strtod(p + 6, NULL) > 0)
			return 1;
	return 0;
}

/* 1 when the terminal has shown NEEDLE (a string), or a rate above zero
 * (NULL). */
static int
shown(const struct term *t, const char *needle)
{
	if (t->out == NULL)
		return 0;
	return needle != NULL ? strstr(t->out, needle) != NULL :
	    shows_ops(t->out);
}

/* Read until the terminal has shown NEEDLE (see shown()), for up to 30 s:
 * a frame drawn before the test's last calls may come in after them, so
 * a count of frames alone does not say that one drawn after them was
 * read. */
static void
wait_shown(struct term *t, const char *needle)
{
	uint64_t start = tu_mono_ns();

	while (!shown(t, needle)) {
		if (tu_mono_ns() - start > LIMIT_NS) {
			kill(t->pid, SIGKILL);
			fail_msg("no frame with %s in 30 s: %s",
			    needle != NULL ? needle : "a rate above zero",
			    t->out ? t->out : "");
		}
		term_read(t);
	}
}

static void
test_quit(void **state)
{
	struct term t;
	int st;

	term_start(&t, "watchq");
	wait_frames(&t, 2);
	expect_raw(&t);
	for (int i = 0; i < 40; i++)
		assert_int_equal(shmt_try_use_key(t.h, "web"), 1);
	/* Every request of the window is for one key: a full share bar. */
	for (int i = 0; i < 10; i++) {
		size_t n;

		assert_int_equal(shmt_get(t.h, "user:hot", 8, NULL, 0, &n),
		    -ENOENT);
	}
	wait_frames(&t, 5);
	/* The frames that show the calls above: those drawn after them.
	 * Five frames in all are not enough when this process stalls for
	 * three frames' time (150 ms) after the second frame or between
	 * its grants and its gets: the frames then drawn show neither. */
	wait_shown(&t, "40/100");
	wait_shown(&t, NULL);
	wait_shown(&t, ", 10 requests, threshold 10%");
	assert_int_equal(write(t.master, "q", 1), 1);
	st = term_wait(&t);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	expect_restored(&t);
	assert_non_null(strstr(t.out, "\033[?1049h"));
	assert_non_null(strstr(t.out, "daemon down (never ran)"));
	assert_non_null(strstr(t.out, "web "));
	assert_non_null(strstr(t.out, "40/100"));
	assert_true(shows_ops(t.out));
	/* The sparkline, in block characters under a UTF-8 locale. */
	assert_non_null(strstr(t.out, "\xe2\x96"));
	/* The hot-keys panel, before and after the requests. */
	assert_non_null(strstr(t.out, "(no key over the threshold)"));
	assert_non_null(strstr(t.out, "HOT KEYS  last "));
	assert_non_null(strstr(t.out, ", 10 requests, threshold 10%"));
	assert_non_null(strstr(t.out, "dict   user:hot "));
	assert_non_null(strstr(t.out, "[####################] 100.0%  "
	    "10..10"));
	term_free(&t);
}

static void
test_signal(int sig, const char *keys)
{
	struct term t;
	int st;

	term_start(&t, "watchsig");
	wait_frames(&t, 2);
	expect_raw(&t);
	if (keys != NULL)
		assert_int_equal(write(t.master, keys, strlen(keys)),
		    (ssize_t)strlen(keys));
	else
		assert_int_equal(kill(t.pid, sig), 0);
	st = term_wait(&t);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), sig);
	expect_restored(&t);
	term_free(&t);
}

static void
test_sigterm(void **state)
{
	test_signal(SIGTERM, NULL);
}

static void
test_ctrl_c(void **state)
{
	test_signal(SIGINT, "\003");
}

/* Without a terminal: -n frames of plain text, no escapes. */
static void
test_plain(void **state)
{
	struct tc_run r;
	char seg[128];
	shmt_t *h;

	tu_segname(seg, sizeof(seg), "watchplain");
	tc_track(seg);
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	tc_run(&r, NULL, (const char *const[]){ "-s", seg, "watch", "-n", "3",
	    "-d", "0.05", NULL });
	assert_int_equal(r.status, 0);
	assert_null(strchr(r.out, '\033'));
	{
		int n = 0;

		for (const char *p = r.out; (p = strstr(p, "shmthrottle watch"));
		    p++)
			n++;
		assert_int_equal(n, 3);
	}
	assert_non_null(strstr(r.out, "(no limiters defined)"));
	assert_non_null(strstr(r.out, "\nHOT KEYS  last "));
	assert_non_null(strstr(r.out, "\n(no key over the threshold)\n"));
	tc_run_free(&r);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_quit, tc_cleanup),
		cmocka_unit_test_teardown(test_sigterm, tc_cleanup),
		cmocka_unit_test_teardown(test_ctrl_c, tc_cleanup),
		cmocka_unit_test_teardown(test_plain, tc_cleanup),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s CLI-BINARY\n", argv[0]);
		return 2;
	}
	tc_bin = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
