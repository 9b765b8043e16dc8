/* This file is private to libshmthrottle: what the code reads from its host. */
/* SPDX-License-Identifier: MIT */
/*
 * Every read of the host that differs from one run to the next goes
 * through here: the process and thread ids, the clocks, the kernel's random
 * bytes, whether a process exists, and the files of /proc (segment.c's
 * shmt__proc_read).  In every build that is installed or tested these are
 * the plain system calls, inlined.  The fuzz targets compile their own copy
 * of the library with SHMT_FUZZ_ENV (tests/fuzz/fuzz.cmake, nowhere else),
 * and tests/fuzz/fuzz_util.c then defines them as a fixed, single-process
 * host: one pid that is alive, no other process, clocks that advance by a
 * fixed step per read, fixed random bytes.  A fuzz input then runs the same
 * code, compares the same values and so steers the mutator the same way on
 * every run, and the fixed-seed gate's verdict depends on the code alone.
 * It is a compile-time substitution, not a switch: no shipped library can
 * be told to trust a fixed secret or a fake clock.
 */
#ifndef SHMT_ENV_H
#define SHMT_ENV_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifdef SHMT_FUZZ_ENV

pid_t shmt__env_pid(void);
uint32_t shmt__env_tid(void);
uint64_t shmt__env_clock_ns(clockid_t id);
ssize_t shmt__env_getrandom(void *buf, size_t n, unsigned flags);
int shmt__env_kill0(pid_t pid);
void shmt__env_ns(const char *which, uint64_t id[2]);

#else

/* This process's id. */
static inline pid_t
shmt__env_pid(void)
{
	return getpid();
}

/* The calling thread's id (never 0). */
static inline uint32_t
shmt__env_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

/* Clock ID in nanoseconds. */
static inline uint64_t
shmt__env_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* getrandom(2). */
static inline ssize_t
shmt__env_getrandom(void *buf, size_t n, unsigned flags)
{
	return getrandom(buf, n, flags);
}

/* kill(PID, 0): 0 when PID exists, else -1 with errno (EPERM: it exists
 * but belongs to someone else). */
static inline int
shmt__env_kill0(pid_t pid)
{
	return kill(pid, 0);
}

/* The namespace WHICH ("pid", "time") of this process as the device and
 * inode of /proc/self/ns/WHICH; both 0 when /proc cannot tell (not
 * mounted, or a kernel without that namespace). */
static inline void
shmt__env_ns(const char *which, uint64_t id[2])
{
	char path[32] = "/proc/self/ns/";
	struct stat st;
	size_t n = strlen(path);

	id[0] = id[1] = 0;
	if (strlen(which) >= sizeof(path) - n)
		return;
	memcpy(path + n, which, strlen(which) + 1);
	if (stat(path, &st) == 0) {
		id[0] = (uint64_t)st.st_dev;
		id[1] = (uint64_t)st.st_ino;
	}
}

#endif /* SHMT_FUZZ_ENV */

#endif /* SHMT_ENV_H */
