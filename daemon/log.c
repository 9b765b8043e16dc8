/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log.  Each event is formatted into one buffer and written
 * with one write(2), so lines from a daemon and its tests never interleave
 * mid-line, and a reader polling the file sees whole lines.
 *
 * Three forms: syslog(3); stderr with a UTC time stamp (a terminal, a
 * file); and, when stderr is the journal's stream (systemd says so with
 * JOURNAL_STREAM=DEV:INO, which must match stderr itself, since a child
 * may inherit the variable with another stderr), stderr with the
 * priority as a "<N>" prefix, which journald reads as the line's priority
 * (journalctl -p err) and strips.  The journal stamps lines itself.
 * sd_journal_print() would do the same through another socket; the prefix
 * keeps one write per line and the order of stderr.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int use_syslog;
static int use_journal;

/* True when JOURNAL_STREAM names the file stderr is open on. */
static int
stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int end = 0;

	if (js == NULL || sscanf(js, "%llu:%llu%n", &dev, &ino, &end) != 2 ||
	    js[end] != '\0' || fstat(STDERR_FILENO, &st) != 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	    (unsigned long long)st.st_ino == ino;
}

void
shmtd_log_open(const char *target)
{
	int want = strcmp(target, "syslog") == 0;

	if (want && !use_syslog)
		openlog("shmthrottled", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	else if (!want && use_syslog)
		closelog();
	use_syslog = want;
	use_journal = !want && stderr_is_journal();
}

static const char *
level_name(int level)
{
	switch (level) {
	case LOG_ERR: return "error";
	case LOG_WARNING: return "warning";
	case LOG_NOTICE: return "notice";
	case LOG_INFO: return "info";
	default: return "debug";
	}
}

void
shmtd_log(int level, const char *fmt, ...)
{
	char msg[1024], line[1200];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (use_syslog) {
		syslog(level, "%s: %s", level_name(level), msg);
		return;
	}
	if (use_journal) {
		/* journald takes a line per entry: a newline inside the
		 * message would start an entry without the priority. */
		for (char *c = msg; *c != '\0'; c++)
			if (*c == '\n')
				*c = ' ';
		n = snprintf(line, sizeof(line), "<%d>%s: %s\n", level & 7,
		    level_name(level), msg);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:"
		    "%02d.%03ldZ shmthrottled[%d]: %s: %s\n", tm.tm_year + 1900,
		    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		    ts.tv_nsec / 1000000, (int)getpid(), level_name(level), msg);
	}
	if (n > (int)sizeof(line) - 1) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return; /* nowhere left to report it */
}
