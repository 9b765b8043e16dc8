/* SPDX-License-Identifier: MIT */
/* Runs the CLI as a child process and compares its output with golden files. */
#include "test_cli_util.h"

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_LIMIT_NS (60ULL * 1000000000ULL)

const char *tc_bin;
const char *tc_golden_dir;

#define TRACK_MAX 16
static char tracked[TRACK_MAX][SHMT_SEGNAME_MAX + 1];
static int ntracked;

void
tc_track(const char *seg)
{
	assert_true(ntracked < TRACK_MAX);
	snprintf(tracked[ntracked++], sizeof(tracked[0]), "%s", seg);
}

int
tc_cleanup(void **state)
{
	for (int i = 0; i < ntracked; i++)
		shmt_unlink(tracked[i]);
	ntracked = 0;
	return 0;
}

static void
child(const char *const *env, const char *const *argv, int in, int out,
    int err)
{
	const char *args[64];
	size_t n = 0;

	unsetenv("SHMTHROTTLE_SEGMENT");
	for (size_t i = 0; env != NULL && env[i] != NULL; i++)
		putenv((char *)env[i]);
	args[n++] = tc_bin;
	for (size_t i = 0; argv[i] != NULL && n < 63; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	if (in >= 0)
		dup2(in, STDIN_FILENO);
	dup2(out, STDOUT_FILENO);
	dup2(err, STDERR_FILENO);
	execv(tc_bin, (char *const *)args);
	_exit(127);
}

/* Append what FD has to BUF; returns 0 at end of file. */
static int
drain(int fd, char **buf, size_t *len)
{
	char tmp[4096];
	ssize_t n = read(fd, tmp, sizeof(tmp));

	if (n <= 0)
		return n < 0 && errno == EINTR;
	*buf = realloc(*buf, *len + (size_t)n + 1);
	assert_non_null(*buf);
	memcpy(*buf + *len, tmp, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
	return 1;
}

/* Run with stdin from the file IN (-1: inherit ours). */
static void
run_fd(struct tc_run *r, const char *const *env, const char *const *argv,
    int in)
{
	int po[2], pe[2], st = 0;
	size_t errlen = 0;
	pid_t pid;
	struct pollfd p[2];

	memset(r, 0, sizeof(*r));
	assert_int_equal(pipe2(po, O_CLOEXEC), 0);
	assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
	fflush(NULL);
	r->t_start = tu_mono_ns();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child(env, argv, in, po[1], pe[1]);
	close(po[1]);
	close(pe[1]);
	p[0] = (struct pollfd){ po[0], POLLIN, 0 };
	p[1] = (struct pollfd){ pe[0], POLLIN, 0 };
	while (p[0].fd >= 0 || p[1].fd >= 0) {
		if (tu_mono_ns() - r->t_start > RUN_LIMIT_NS) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			fail_msg("%s %s: no exit within 60 s", tc_bin, argv[0]);
		}
		if (poll(p, 2, 1000) <= 0)
			continue;
		if (p[0].revents && !drain(po[0], &r->out, &r->outlen))
			p[0].fd = -1;
		if (p[1].revents && !drain(pe[0], &r->err, &errlen))
			p[1].fd = -1;
	}
	close(po[0]);
	close(pe[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	r->t_end = tu_mono_ns();
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (r->out == NULL)
		r->out = strdup("");
	if (r->err == NULL)
		r->err = strdup("");
	assert_non_null(r->out);
	assert_non_null(r->err);
}

void
tc_run(struct tc_run *r, const char *const *env, const char *const *argv)
{
	run_fd(r, env, argv, -1);
}

void
tc_run_in(struct tc_run *r, const char *const *env, const char *const *argv,
    const void *in, size_t inlen)
{
	/* A memory file rather than a pipe: the whole input is there before
	 * the child starts, so no writer has to be interleaved with the
	 * reading of its output. */
	int fd = memfd_create("tc-stdin", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, in, inlen), (ssize_t)inlen);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	run_fd(r, env, argv, fd);
	close(fd);
}

void
tc_run_free(struct tc_run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

void
tc_replace(char **s, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to), n = 0;
	char *p, *q, *res;

	for (p = strstr(*s, from); p != NULL; p = strstr(p + fl, from))
		n++;
	if (n == 0 || fl == 0)
		return;
	res = malloc(strlen(*s) + n * tl + 1);
	assert_non_null(res);
	q = res;
	for (p = *s;;) {
		char *m = strstr(p, from);

		if (m == NULL)
			break;
		memcpy(q, p, (size_t)(m - p));
		q += m - p;
		memcpy(q, to, tl);
		q += tl;
		p = m + fl;
	}
	strcpy(q, p);
	free(*s);
	*s = res;
}

void
tc_mask(char **s, const char *re, const char *to)
{
	regex_t rx;
	regmatch_t m;
	size_t cap = strlen(*s) * 2 + 64, len = 0;
	char *res = malloc(cap), *p = *s;

	assert_non_null(res);
	assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE), 0);
	while (regexec(&rx, p, 1, &m, p == *s ? 0 : REG_NOTBOL) == 0 &&
	    m.rm_eo > 0) {
		size_t need = len + (size_t)m.rm_so + strlen(to) + 1;

		if (need > cap) {
			cap = need * 2;
			res = realloc(res, cap);
			assert_non_null(res);
		}
		memcpy(res + len, p, (size_t)m.rm_so);
		len += (size_t)m.rm_so;
		memcpy(res + len, to, strlen(to));
		len += strlen(to);
		p += m.rm_eo;
	}
	regfree(&rx);
	res = realloc(res, len + strlen(p) + 1);
	assert_non_null(res);
	strcpy(res + len, p);
	free(*s);
	*s = res;
}

/* Print the first line where A and B differ, for the test log. */
static void
first_difference(const char *a, const char *b)
{
	int line = 1;

	while (*a != '\0' && *a == *b) {
		if (*a == '\n')
			line++;
		a++;
		b++;
	}
	printf("# first difference on line %d\n# expected: %.*s\n# actual:   "
	    "%.*s\n", line, (int)strcspn(a, "\n"), a, (int)strcspn(b, "\n"),
	    b);
}

void
tc_golden(const char *name, const char *actual)
{
	char path[4096];
	const char *upd = getenv("SHMT_GOLDEN_UPDATE");
	char *expected = NULL;
	size_t cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tc_golden_dir, name);
	if (upd != NULL && strcmp(upd, "1") == 0) {
		f = fopen(path, "w");
		assert_non_null(f);
		fputs(actual, f);
		fclose(f);
		printf("# wrote %s\n", path);
		return;
	}
	f = fopen(path, "r");
	if (f == NULL)
		fail_msg("golden file %s: %s", path, strerror(errno));
	if (getdelim(&expected, &cap, '\0', f) < 0)
		expected = strdup("");
	fclose(f);
	if (strcmp(expected, actual) != 0) {
		printf("# %s differs; actual output:\n%s", name, actual);
		first_difference(expected, actual);
		free(expected);
		fail_msg("output differs from golden file %s", name);
	}
	free(expected);
}

void
tc_expect_run(struct tc_run *r, int status, const char *const *argv)
{
	tc_run(r, NULL, argv);
	if (r->status != status)
		fail_msg("%s: exit %d, expected %d\nstdout: %s\nstderr: %s",
		    argv[0], r->status, status, r->out, r->err);
}
