/* This file is private to shmthrottle-bench. */
/* SPDX-License-Identifier: MIT */
/*
 * A log-linear latency histogram in the manner of HdrHistogram: values in
 * nanoseconds, HIST_SUB sub-buckets per power of two, so every recorded
 * value is known to within 1/HIST_SUB (about 3%) up to 2^63.  Fixed size,
 * no allocation, so it can live in memory shared with worker processes.
 */
#ifndef BENCH_HIST_H
#define BENCH_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 5
#define HIST_SUB (1U << HIST_SUB_BITS)
#define HIST_NBUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t max;
	uint64_t b[HIST_NBUCKETS];
};

void hist_record(struct hist *h, uint64_t v);
void hist_merge(struct hist *into, const struct hist *from);
/* The smallest recorded value's bucket top at or above quantile Q (0..1);
 * 0 for an empty histogram. */
uint64_t hist_quantile(const struct hist *h, double q);
/* Bucket index of V and the largest value that bucket holds (for tests). */
unsigned hist_index(uint64_t v);
uint64_t hist_bucket_top(unsigned i);

#endif
