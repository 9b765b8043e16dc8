/* SPDX-License-Identifier: MIT */
/*
 * log.h: shmthrottled's log, one line per event with a level, to stderr
 * (with a UTC time stamp, or a priority prefix for the journal) or to
 * syslog.
 */
#ifndef SHMTD_LOG_H
#define SHMTD_LOG_H

#include <syslog.h>

/* TARGET: "stderr" or "syslog".  May be called again to switch.  With
 * "stderr", when JOURNAL_STREAM matches stderr (systemd runs the daemon
 * with its stderr on the journal), each line carries its priority as a
 * "<N>" prefix instead of a time stamp. */
void shmtd_log_open(const char *target);

/* LEVEL is a syslog priority: LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO,
 * LOG_DEBUG. */
void shmtd_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* SHMTD_LOG_H */
