/* SPDX-License-Identifier: MIT */
/* Helpers shared by the tests: unique names, an injected clock, seeds. */
#include "testutil.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void
tu_segname(char *buf, size_t cap, const char *tag)
{
	static atomic_uint n;

	snprintf(buf, cap, "/shmt-test-%d-%u-%s", (int)getpid(),
	    atomic_fetch_add(&n, 1), tag);
}

shmt_time_t
tu_clock_read(void *ctx)
{
	return ((struct tu_clock *)ctx)->now;
}

uint64_t
tu_seed(const char *test)
{
	const char *env = getenv("SHMT_SEED");
	uint64_t seed;

	if (env != NULL && *env != '\0') {
		seed = strtoull(env, NULL, 0);
	} else {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
		    (uint64_t)getpid();
	}
	if (seed == 0)
		seed = 1;
	printf("# %s: seed %" PRIu64 " (replay with SHMT_SEED=%" PRIu64 ")\n",
	    test, seed, seed);
	fflush(stdout);
	return seed;
}

uint64_t
tu_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

double
tu_scale(void)
{
	const char *env = getenv("SHMT_STRESS_SCALE");
	double v = env != NULL ? strtod(env, NULL) : 1.0;

	return v > 0 ? v : 1.0;
}

int
tu_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

int
tu_sweep(void **state)
{
	char prefix[64], path[512];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");

	(void)state;
	if (d == NULL)
		return 0;
	snprintf(prefix, sizeof(prefix), "shmt-test-%d-", (int)getpid());
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		unlink(path);
	}
	closedir(d);
	return 0;
}
