/* SPDX-License-Identifier: MIT */
/*
 * Small helpers, one copy each, for the library, the daemon and the CLI:
 * rounding up, reading a clock in nanoseconds, and FNV-1a.  Header-only and
 * free of the segment, so that any tool may include it.
 */
#ifndef SHMT_UTIL_H
#define SHMT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "env.h"

/* Write the message FMT to ERR (CAP bytes, may be 0) and return RC: the
 * one-line refusals of the snapshot and move code. */
int shmt__bad(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* V rounded up to a multiple of A (A > 0, not only powers of two). */
static inline uint64_t
shmt__align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Clock ID in nanoseconds, through env.h (which the fuzz build replaces
 * with a fixed clock). */
static inline uint64_t
shmt__clock_ns(clockid_t id)
{
	return shmt__env_clock_ns(id);
}

/* CLOCK_MONOTONIC in nanoseconds: the clock every stored time is read
 * from unless shmt_set_clock() gave another. */
static inline uint64_t
shmt__mono_ns(void)
{
	return shmt__clock_ns(CLOCK_MONOTONIC);
}

/*
 * FNV-1a (64 bits): a checksum and a fingerprint, never a hash of keys from
 * outside (those use the keyed hash of hash.h).  Start from SHMT_FNV_INIT.
 */
#define SHMT_FNV_INIT 0xcbf29ce484222325ULL
#define SHMT_FNV_PRIME 0x100000001b3ULL

/* One step over a byte. */
static inline uint64_t
shmt__fnv1a_byte(uint64_t h, uint8_t b)
{
	return (h ^ b) * SHMT_FNV_PRIME;
}

/* Over the N bytes at P. */
static inline uint64_t
shmt__fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = shmt__fnv1a_byte(h, b[i]);
	return h;
}

/* Over the 8 bytes of V, low byte first (the same on every host). */
static inline uint64_t
shmt__fnv1a_u64(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		h = shmt__fnv1a_byte(h, (uint8_t)(v >> (i * 8)));
	return h;
}

/* Over 8-byte words (and the bytes of a tail): 8 times fewer steps over
 * megabytes, and still every change of one word changes the sum.  Not the
 * same sum as shmt__fnv1a(): use one or the other for a given record. */
static inline uint64_t
shmt__fnv1a_words(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, sizeof(w));
		h = (h ^ w) * SHMT_FNV_PRIME;
	}
	return shmt__fnv1a(h, b + i, n - i);
}

#endif /* SHMT_UTIL_H */
