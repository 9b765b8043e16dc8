/* This file is private to shmthrottle-bench. */
/* SPDX-License-Identifier: MIT */
/* The bench's own redis-server: started on first need, always stopped. */
#ifndef BENCH_REDIS_H
#define BENCH_REDIS_H

#include <sys/types.h>

#include "bench.h"

#define REDIS_SOCK_MAX 108

/* The socket to use: --redis-socket when given, else that of a server this
 * process starts now (once, pinned to c->redis_cpu unless it is -1) and
 * stops at exit.  Returns 0 or -errno. */
int bench_redis_socket(const struct bench_conf *c, char *buf, size_t cap);

/* Stop the server started by bench_redis_socket(), if any, and remove its
 * directory.  Safe to call again; async-signal-safe apart from the
 * directory removal, which it skips when ASYNC is set. */
void bench_redis_stop(int async);
/* Remove the directories of servers whose bench was killed with SIGKILL
 * (the kernel killed the server with it; nothing removed the directory). */
void bench_redis_clean_stale(void);

/* bench_redis_stop(0), for atexit(). */
void bench_redis_end(void);

/* The first CPU this process may run on (where the server and the first
 * client are pinned by default), or -1. */
int bench_first_cpu(void);

#endif
