/* SPDX-License-Identifier: MIT */
/*
 * Who is alive: a process named by its pid and /proc start time (so that a
 * reused pid is not taken for the process that held a slot), and the state
 * and process of a thread (so that a lock's holder can be judged).  Linux
 * only: everything is read from /proc.
 */
#include "proc.h"

#include "env.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SHMT_FUZZ_ENV /* the fuzz build's is in tests/fuzz/fuzz_util.c */
int
shmt__proc_read(const char *path, char *buf, size_t cap)
{
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, cap - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}
#endif

/* Start time of PID in clock ticks since boot (field 22 of /proc/PID/stat)
 * and its state letter (field 3).  Returns 0 for start when unknown.
 * Together with the pid the start time names one process: a reused pid has
 * another start time. */
static uint64_t
proc_stat(pid_t pid, char *state)
{
	char path[64], buf[1024];
	const char *p;
	unsigned long long start = 0;
	int field;

	*state = '?';
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (shmt__proc_read(path, buf, sizeof(buf)) != 0)
		return 0;
	/* The command name may hold spaces and ')': skip to the last ')'. */
	p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return 0;
	*state = p[2];
	for (field = 2; *p != '\0' && field < 22; p++)
		if (*p == ' ')
			field++;
	if (sscanf(p, "%llu", &start) != 1)
		return 0;
	return start;
}

uint64_t
shmt__proc_start(pid_t pid)
{
	int saved = errno;
	char state;
	uint64_t start = proc_stat(pid, &state);

	errno = saved;
	return start;
}

/* 1 when PID runs and (if START is known) is the same process.  A zombie
 * (killed, not yet waited for) counts as dead: it holds nothing. */
int
shmt__pid_alive(pid_t pid, uint64_t start)
{
	int saved = errno;
	uint64_t now_start;
	char state;
	int alive;

	if (pid <= 0)
		return 0;
	alive = shmt__env_kill0(pid) == 0 || errno == EPERM;
	if (alive) {
		now_start = proc_stat(pid, &state);
		if (state == 'Z' || state == 'X')
			alive = 0;
		else if (start != 0 && now_start != 0 && now_start != start)
			alive = 0;
	}
	errno = saved;
	return alive;
}

/* The process (thread group) of thread TID, or 0 when it is a zombie: a
 * thread killed and not yet waited for holds nothing, and its parent may
 * take its time to reap it.  -1 when its status cannot be read (no
 * descriptor left, /proc hidden by hidepid or not mounted, or the thread
 * just exited): unknown, never taken for dead, since the callers ask
 * kill(2) first and a thread that is gone fails that next time.  *RUNNING gets 1 when the thread
 * runs or waits for a CPU (R), or waits in the kernel without being
 * interruptible (D: a page fault, a memory allocation), which is how a
 * writer inside a critical section looks; 0 when it sleeps or is stopped. */
pid_t
shmt__tid_status(uint32_t tid, int *running)
{
	char path[64], buf[512];
	const char *p;

	*running = 0;
	snprintf(path, sizeof(path), "/proc/%u/status", tid);
	if (shmt__proc_read(path, buf, sizeof(buf)) != 0)
		return -1;
	p = strstr(buf, "\nState:");
	if (p != NULL) {
		p += 7;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == 'Z' || *p == 'X')
			return 0;
		*running = *p == 'R' || *p == 'D';
	}
	p = strstr(buf, "\nTgid:");
	return p != NULL ? (pid_t)atoi(p + 6) : -1;
}

pid_t
shmt__tid_process(uint32_t tid)
{
	int running;
	pid_t p = shmt__tid_status(tid, &running);

	return p > 0 ? p : 0;
}
