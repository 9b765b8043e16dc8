/* This file is private to the bench's probes. */
/* SPDX-License-Identifier: MIT */
/*
 * What the small cost probes share: the calling thread's CPU time, which a
 * loaded machine's other work does not add to (shmthrottle-ancost,
 * -fullcost, -grantpair, -hitcost, -rcucost), the order of qsort for taking
 * medians of rounds (those, -globalcost and -snapcost), and the core's
 * speed (shmthrottle-ancost, -grantpair).
 */
#ifndef SHMT_BENCH_PROBE_H
#define SHMT_BENCH_PROBE_H

#include <stdint.h>
#include <time.h>

/* The calling thread's CPU time in nanoseconds. */
static inline double
probe_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* CLOCK_MONOTONIC in nanoseconds (the clock a grant reads). */
static inline uint64_t
probe_mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* qsort's order of doubles, ascending. */
static inline int
probe_cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * The core's speed, measured: a step of integer operations in four
 * independent chains, with no memory and no clock, so that its time
 * follows the rate at which the core retires instructions (which a busy
 * neighbour on the core's other hyperthread lowers: on a shared VM the
 * same step takes 10 ns for a while, then 17-19 ns), not a latency.  A
 * probe runs a block of these in each turn of its rounds, and calls the
 * turn quiet when that block ran within PROBE_QUIET of the fastest block
 * of the run: the turns whose core was its own.
 */
#define PROBE_QUIET 1.125

static __attribute__((noinline, unused)) void
probe_alu_step(uint64_t *s)
{
	uint64_t a = s[0], b = s[1], c = s[2], d = s[3];

	for (int i = 0; i < 8; i++) {
		a = (a ^ (a >> 7)) + 0x9e3779b97f4a7c15ULL;
		b = (b ^ (b << 9)) + a;
		c = (c ^ (c >> 13)) + 0xbf58476d1ce4e5b9ULL;
		d = (d ^ (d << 5)) + c;
	}
	s[0] = a;
	s[1] = b;
	s[2] = c;
	s[3] = d;
}

/* Thread CPU ns per step of N steps. */
static inline double
probe_alu_ns(long n)
{
	static uint64_t s[4] = { 1, 2, 3, 4 };
	double t0 = probe_cpu_ns();

	for (long i = 0; i < n; i++)
		probe_alu_step(s);
	return (probe_cpu_ns() - t0) / (double)n;
}

#endif
