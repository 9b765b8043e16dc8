/* SPDX-License-Identifier: MIT */
/*
 * Liveness of processes and threads, read from /proc (proc.c).  Private to
 * libshmthrottle.
 */
#ifndef SHMT_PROC_H
#define SHMT_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Read the start of the small /proc file PATH into BUF (at most CAP - 1
 * bytes, NUL-terminated): 0, or -1 when it cannot be read. */
int shmt__proc_read(const char *path, char *buf, size_t cap);
/* Start time of PID in clock ticks since boot, 0 when unknown.  Keeps
 * errno. */
uint64_t shmt__proc_start(pid_t pid);
/* 1 when PID runs and (if START is known) is the same process; a zombie
 * counts as dead.  Keeps errno. */
int shmt__pid_alive(pid_t pid, uint64_t start);
/* The process (thread group) of thread TID, 0 when it is a zombie, or -1
 * when its status cannot be read (unknown: not dead).  *RUNNING gets 1 when the thread runs, waits for a CPU (R)
 * or waits in the kernel uninterruptibly (D), as a writer inside a critical
 * section looks; 0 when it sleeps or is stopped. */
pid_t shmt__tid_status(uint32_t tid, int *running);
/* The process of thread TID, or 0 when no such thread exists. */
pid_t shmt__tid_process(uint32_t tid);

#endif /* SHMT_PROC_H */
