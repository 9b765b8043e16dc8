/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-globalcost: what a grant costs on a global limiter (a lease
 * word in the segment, filled here by hand as the daemon would) against a
 * local one (the bucket ring), one thread, rounds alternated, in thread
 * CPU time.  Both limits
 * are set so high that every call is a grant.  One SUMMARY line per kind:
 * the median of ROUNDS rounds of N calls each, in ns per call.
 *
 * Usage: shmthrottle-globalcost [N [ROUNDS]]   (defaults 5000000 and 7)
 */
#include "global.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GC_ROUNDS_MAX 64

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Thread CPU time: on a shared machine, time spent preempted is not the
 * call's cost. */
static uint64_t
cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static double
round_ns(shmt_t *h, const char *name, long n)
{
	uint64_t t0 = cpu_ns();

	for (long i = 0; i < n; i++)
		if (shmt_try_use_key(h, name) != 1) {
			fprintf(stderr, "globalcost: %s refused a use\n", name);
			exit(1);
		}
	return (double)(cpu_ns() - t0) / (double)n;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 5000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 7;
	double loc[GC_ROUNDS_MAX], glo[GC_ROUNDS_MAX];
	struct shmt__gref ref;
	shmt_config_t cfg;
	shmt_limit_t l;
	shmt_t *h;
	char seg[64];
	uint64_t now;
	int rc;

	if (n <= 0 || rounds <= 0 || rounds > GC_ROUNDS_MAX) {
		fprintf(stderr, "usage: shmthrottle-globalcost [N [ROUNDS]]\n");
		return 2;
	}
	snprintf(seg, sizeof(seg), "/shmt-globalcost-%d", (int)getpid());
	shmt_config_init(&cfg);
	if ((rc = shmt_create(seg, &cfg, &h)) != 0) {
		fprintf(stderr, "globalcost: %s\n", shmt_strerror(rc));
		return 1;
	}
	memset(&l, 0, sizeof(l));
	l.limit = SHMT_LIMIT_MAX;
	l.window_ns = 3600ULL * 1000000000ULL;
	l.slack_ns = l.window_ns;
	l.slack_uses = SHMT_LIMIT_MAX;
	l.mode = SHMT_MODE_BUCKETS;
	rc = shmt_limiter_define(h, "local", &l);
	l.global = 1;
	if (rc == 0)
		rc = shmt_limiter_define(h, "global", &l);
	if (rc == 0)
		rc = shmt__global_ref(h, "global", &ref);
	now = shmt__mono_ns();
	if (rc == 0)
		rc = shmt__global_install(&ref, 0, (uint32_t)SHMT_LIMIT_MAX,
		    now + l.window_ns, now);
	if (rc != 0) {
		fprintf(stderr, "globalcost: setup: %s\n", shmt_strerror(rc));
		shmt_close(h);
		shmt_unlink(seg);
		return 1;
	}
	round_ns(h, "local", n / 10);
	round_ns(h, "global", n / 10);
	for (int r = 0; r < rounds; r++) {
		loc[r] = round_ns(h, "local", n);
		glo[r] = round_ns(h, "global", n);
	}
	qsort(loc, (size_t)rounds, sizeof(double), cmp_d);
	qsort(glo, (size_t)rounds, sizeof(double), cmp_d);
	printf("SUMMARY kind=local n=%ld rounds=%d median_ns=%.1f min_ns=%.1f\n",
	    n, rounds, loc[rounds / 2], loc[0]);
	printf("SUMMARY kind=global n=%ld rounds=%d median_ns=%.1f min_ns=%.1f\n",
	    n, rounds, glo[rounds / 2], glo[0]);
	shmt_close(h);
	shmt_unlink(seg);
	return 0;
}
