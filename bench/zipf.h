/* This file is private to shmthrottle-bench. */
/* SPDX-License-Identifier: MIT */
/*
 * Zipf-distributed ranks in O(1) per draw: Walker's alias table over the N
 * ranks, built once before the workers start (and shared with forked
 * workers copy-on-write).  A binary search over the CDF would cost about 20
 * dependent loads per draw, as much as the operation being measured.
 */
#ifndef BENCH_ZIPF_H
#define BENCH_ZIPF_H

#include <stdint.h>

struct zipf {
	uint32_t n;
	double s;
	uint32_t *alias;
	uint32_t *cut;   /* accept rank i when the 32-bit draw is below cut[i] */
};

/* Build the table of ranks 0..N-1 with P(i) proportional to 1/(i+1)^S.
 * S = 0 is the uniform distribution.  Returns 0, -EINVAL or -ENOMEM. */
int zipf_init(struct zipf *z, uint32_t n, double s);
void zipf_free(struct zipf *z);

/* One rank from 64 random bits. */
static inline uint32_t
zipf_draw(const struct zipf *z, uint64_t r)
{
	uint32_t i = (uint32_t)(((r >> 32) * z->n) >> 32);

	return (uint32_t)r < z->cut[i] ? i : z->alias[i];
}

/* xorshift64*: the workers' random source. */
static inline uint64_t
bench_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

#endif
