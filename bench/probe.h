/* This file is private to the bench's probes. */
/* SPDX-License-Identifier: MIT */
/*
 * What the small cost probes share: the calling thread's CPU time, which a
 * loaded machine's other work does not add to (shmthrottle-ancost,
 * -fullcost, -hitcost, -rcucost), and the order of qsort for taking medians
 * of rounds (those, -globalcost and -snapcost).
 */
#ifndef SHMT_BENCH_PROBE_H
#define SHMT_BENCH_PROBE_H

#include <time.h>

/* The calling thread's CPU time in nanoseconds. */
static inline double
probe_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* qsort's order of doubles, ascending. */
static inline int
probe_cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#endif
