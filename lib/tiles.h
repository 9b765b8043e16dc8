/* This file is private to libshmthrottle. */
/* SPDX-License-Identifier: MIT */
/*
 * Sub-windows that tile a window exactly: the window W in n sub-windows,
 * sub-window k spans [floor(k W / n), floor((k + 1) W / n)).  Any n
 * consecutive sub-windows span exactly W, whether or not n divides W; each
 * is floor(W / n) or ceil(W / n) long.  (Rounding the width down instead
 * makes n sub-windows cover up to n - 1 ns less than W, which lost the
 * analyzer part of its window and the counters a second sub-window.)
 */
#ifndef SHMT_TILES_H
#define SHMT_TILES_H

#include <stdint.h>

/* The start of sub-window K, saturated at UINT64_MAX. */
static inline uint64_t
shmt__tile_start(uint64_t k, uint64_t window, uint32_t n)
{
	unsigned __int128 b = (unsigned __int128)k * window / n;

	return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

/* The sub-window holding time T: the largest k with start(k) <= T, that
 * is floor((n (T + 1) - 1) / W).  One 64-bit division while n (T + 1) fits
 * in 64 bits (T below 2^58 ns, nine years of uptime, for n <= 64). */
static inline uint64_t
shmt__tile_of(uint64_t t, uint64_t window, uint32_t n)
{
	if (t < UINT64_MAX / n - 1)
		return ((t + 1) * n - 1) / window;
	return (uint64_t)((((unsigned __int128)t + 1) * n - 1) / window);
}

#endif
