/* SPDX-License-Identifier: MIT */
/* The log-linear latency histogram of shmthrottle-bench (see hist.h). */
#include "hist.h"

/*
 * Values below 2*HIST_SUB get one bucket each.  Above, a value whose top bit
 * is m keeps its HIST_SUB_BITS bits below the top: bucket row m - SUB_BITS
 * + 1, column (v >> (m - SUB_BITS)) - HIST_SUB.
 */
unsigned
hist_index(uint64_t v)
{
	unsigned m, shift;

	if (v < 2 * HIST_SUB)
		return (unsigned)v;
	m = 63U - (unsigned)__builtin_clzll(v);
	shift = m - HIST_SUB_BITS;
	return (shift + 1) * HIST_SUB + (unsigned)((v >> shift) - HIST_SUB);
}

uint64_t
hist_bucket_top(unsigned i)
{
	unsigned row = i / HIST_SUB, col = i % HIST_SUB, shift;

	if (row < 2)
		return i;
	shift = row - 1;
	if (shift + HIST_SUB_BITS >= 63 && col == HIST_SUB - 1)
		return UINT64_MAX;
	return (((uint64_t)(HIST_SUB + col + 1)) << shift) - 1;
}

void
hist_record(struct hist *h, uint64_t v)
{
	h->b[hist_index(v)]++;
	h->count++;
	if (v > h->max)
		h->max = v;
}

void
hist_merge(struct hist *into, const struct hist *from)
{
	for (unsigned i = 0; i < HIST_NBUCKETS; i++)
		into->b[i] += from->b[i];
	into->count += from->count;
	if (from->max > into->max)
		into->max = from->max;
}

uint64_t
hist_quantile(const struct hist *h, double q)
{
	uint64_t want, seen = 0;

	if (h->count == 0)
		return 0;
	want = (uint64_t)(q * (double)h->count + 0.5);
	if (want < 1)
		want = 1;
	for (unsigned i = 0; i < HIST_NBUCKETS; i++) {
		seen += h->b[i];
		if (seen >= want)
			return hist_bucket_top(i) < h->max ?
			    hist_bucket_top(i) : h->max;
	}
	return h->max;
}
