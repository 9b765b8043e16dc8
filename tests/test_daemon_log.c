/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log forms: with JOURNAL_STREAM naming stderr's own device
 * and inode, every line starts with its priority as "<N>" (what journald
 * reads); with it unset, naming another file, or malformed, lines carry a
 * time stamp and no prefix.  Checked on shmtd_log() itself, with stderr
 * redirected to a file, and on the daemon binary (argv[1]), whose config
 * error at start must reach the journal as an error.
 */
#include "testutil.h"
#include "log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *daemon_bin;

struct logfile {
	char path[64];
	int saved;            /* the test's own stderr */
};

/* Point stderr at a fresh file; returns the JOURNAL_STREAM value that
 * matches it in JS. */
static void
capture(struct logfile *lf, char *js, size_t cap)
{
	struct stat st;
	int fd;

	snprintf(lf->path, sizeof(lf->path), "/tmp/shmt-test-log-XXXXXX");
	fd = mkstemp(lf->path);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	snprintf(js, cap, "%llu:%llu", (unsigned long long)st.st_dev,
	    (unsigned long long)st.st_ino);
	fflush(stderr);
	lf->saved = dup(STDERR_FILENO);
	assert_true(lf->saved >= 0);
	assert_true(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
	close(fd);
}

/* Restore stderr; returns what was written (malloc'd). */
static char *
release(struct logfile *lf)
{
	char *buf = calloc(1, 8192);
	FILE *f;
	size_t n;

	assert_non_null(buf);
	assert_true(dup2(lf->saved, STDERR_FILENO) == STDERR_FILENO);
	close(lf->saved);
	f = fopen(lf->path, "r");
	assert_non_null(f);
	n = fread(buf, 1, 8191, f);
	buf[n] = '\0';
	fclose(f);
	unlink(lf->path);
	return buf;
}

static void
log_all_levels(void)
{
	shmtd_log(LOG_ERR, "e %d", 1);
	shmtd_log(LOG_WARNING, "w");
	shmtd_log(LOG_NOTICE, "n");
	shmtd_log(LOG_INFO, "i");
	shmtd_log(LOG_DEBUG, "two\nlines");
}

static void
test_journal_prefix(void **state)
{
	struct logfile lf;
	char js[64];
	char *out;

	capture(&lf, js, sizeof(js));
	assert_int_equal(setenv("JOURNAL_STREAM", js, 1), 0);
	shmtd_log_open("stderr");
	log_all_levels();
	out = release(&lf);
	assert_string_equal(out, "<3>error: e 1\n<4>warning: w\n<5>notice: n\n"
	    "<6>info: i\n<7>debug: two lines\n");
	free(out);
	unsetenv("JOURNAL_STREAM");
}

/* Not the journal: unset, another file, or not DEV:INO at all. */
static void
test_not_journal(void **state)
{
	/* "@" stands for stderr's own DEV:INO. */
	static const char *const values[] = { NULL, "1:1", "garbage",
		"@ junk", "@" };

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		struct logfile lf;
		char js[64], val[128];
		char *out;

		capture(&lf, js, sizeof(js));
		if (values[i] == NULL) {
			unsetenv("JOURNAL_STREAM");
		} else {
			snprintf(val, sizeof(val), "%s%s", values[i][0] == '@' ?
			    js : values[i], values[i][0] == '@' ?
			    values[i] + 1 : "");
			assert_int_equal(setenv("JOURNAL_STREAM", val, 1), 0);
		}
		/* The last value matches stderr, but the log goes to syslog:
		 * nothing on stderr at all. */
		shmtd_log_open(i + 1 < sizeof(values) / sizeof(values[0]) ?
		    "stderr" : "syslog");
		log_all_levels();
		shmtd_log_open("stderr");
		out = release(&lf);
		if (i + 1 == sizeof(values) / sizeof(values[0])) {
			assert_string_equal(out, "");
		} else {
			assert_null(strchr(out, '<'));
			assert_non_null(strstr(out, "Z shmthrottled["));
			assert_non_null(strstr(out, "]: error: e 1\n"));
			assert_non_null(strstr(out, "]: notice: n\n"));
		}
		free(out);
	}
	unsetenv("JOURNAL_STREAM");
}

/* The daemon under systemd: a config it cannot read is an error line for
 * the journal, "<3>...". */
static void
test_daemon_journal(void **state)
{
	struct logfile lf;
	char js[64], conf[64];
	char *out;
	pid_t pid;
	int st, fd;

	snprintf(conf, sizeof(conf), "/tmp/shmt-test-logconf-XXXXXX");
	fd = mkstemp(conf);
	assert_true(fd >= 0);
	assert_true(write(fd, "[limiter a\n", 11) == 11);
	close(fd);
	capture(&lf, js, sizeof(js));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("JOURNAL_STREAM", js, 1);
		execl(daemon_bin, daemon_bin, "-f", "-c", conf, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	out = release(&lf);
	unlink(conf);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	assert_true(strncmp(out, "<3>error: ", 10) == 0);
	assert_non_null(strstr(out, conf));
	free(out);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_journal_prefix),
		cmocka_unit_test(test_not_journal),
		cmocka_unit_test(test_daemon_journal),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s SHMTHROTTLED\n", argv[0]);
		return 2;
	}
	daemon_bin = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
