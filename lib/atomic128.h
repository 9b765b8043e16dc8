/* This file is private to libshmthrottle: 16-byte atomics on shared words. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_ATOMIC128_H
#define SHMT_ATOMIC128_H

#include <stdint.h>
#include <string.h>

/*
 * Every shared 16-byte word (a limiter's state W, a ring slot, a log slot, a
 * client's hash) is read with an atomic 16-byte load and changed only by a
 * 16-byte CAS.  A CAS is sequentially consistent on success; on failure it
 * acts as an acquire load of the current value, which it stores in
 * *expected.  Elsewhere than x86-64, GCC's __atomic builtins (libatomic)
 * do the work.
 */
typedef unsigned __int128 shmt_u128;

#if defined(__x86_64__)
/*
 * On x86-64, ck_pr's inline cmpxchg16b for the CAS: no call through
 * libatomic, and atomic across processes in every build.  (ThreadSanitizer
 * runs __atomic 16-byte operations under a lock private to each process,
 * which does not make them atomic between processes.)
 *
 * A load is one aligned 16-byte SSE load (MOVDQA) where the CPU makes it
 * atomic: every x86-64 CPU with AVX, as Intel's SDM (vol. 3A, 9.1.1) and
 * AMD's APM (vol. 2, 7.3.2) state for cacheable memory, which a segment
 * is.  Elsewhere it is a locked cmpxchg16b of the word with itself, which
 * takes the line for writing: every reader then moves it between cores, as
 * a writer does.  x86 loads are acquire loads either way; the "memory"
 * clobber keeps the compiler from moving memory accesses across it.
 * shmt__atomic16_sse is set once, by a constructor (atomic128.c), before
 * main; 0 (the locked load) until then, and where $SHMT_ATOMIC16=cas.
 */
#include <ck_pr.h>
#include <emmintrin.h>

extern int shmt__atomic16_sse;

/* The locked load on every CPU: it takes the line for writing, as a CAS
 * that follows it will (see bk_lost). */
static inline void
shmt__load128_excl(const void *p, uint64_t out[2])
{
	ck_pr_load_64_2((const uint64_t *)p, out);
}

static inline void
shmt__load128(const void *p, uint64_t out[2])
{
	if (__builtin_expect(__atomic_load_n(&shmt__atomic16_sse,
	    __ATOMIC_RELAXED) != 0, 1)) {
		__m128i v;

		__asm__ __volatile__("movdqa %1, %0" : "=x" (v) :
		    "m" (*(const __m128i *)p) : "memory");
		out[0] = (uint64_t)_mm_cvtsi128_si64(v);
		out[1] = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v));
		return;
	}
	shmt__load128_excl(p, out);
}

static inline int
shmt__cas128(void *p, uint64_t expected[2], const uint64_t desired[2])
{
	uint64_t cur[2];

	if (ck_pr_cas_64_2_value((uint64_t *)p, expected,
	    (uint64_t *)(uintptr_t)desired, cur))
		return 1;
	expected[0] = cur[0];
	expected[1] = cur[1];
	return 0;
}

static inline void
shmt__store128(void *p, const uint64_t in[2])
{
	uint64_t cur[2];

	shmt__load128(p, cur);
	while (!shmt__cas128(p, cur, in))
		;
}
#else
static inline void
shmt__load128(const void *p, uint64_t out[2])
{
	shmt_u128 v = __atomic_load_n((const shmt_u128 *)p, __ATOMIC_ACQUIRE);

	memcpy(out, &v, sizeof(v));
}

/* The load that takes the line for writing, as a CAS that follows it will:
 * a CAS of the word with a value it is unlikely to hold, whose failure
 * returns the current one (libatomic takes its lock where the CPU has no
 * 16-byte CAS, and that load is atomic too).  Where it happens to hold
 * zero, the CAS stores zero: the same value. */
static inline void
shmt__load128_excl(const void *p, uint64_t out[2])
{
	shmt_u128 e = 0;

	(void)__atomic_compare_exchange_n((shmt_u128 *)(uintptr_t)p, &e, e,
	    0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE);
	memcpy(out, &e, sizeof(e));
}

static inline void
shmt__store128(void *p, const uint64_t in[2])
{
	shmt_u128 v;

	memcpy(&v, in, sizeof(v));
	__atomic_store_n((shmt_u128 *)p, v, __ATOMIC_RELEASE);
}

/* Returns 1 on success; on failure 0, with the current value in expected. */
static inline int
shmt__cas128(void *p, uint64_t expected[2], const uint64_t desired[2])
{
	shmt_u128 e, d;
	int ok;

	memcpy(&e, expected, sizeof(e));
	memcpy(&d, desired, sizeof(d));
	ok = __atomic_compare_exchange_n((shmt_u128 *)p, &e, d, 0,
	    __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE);
	if (!ok)
		memcpy(expected, &e, sizeof(e));
	return ok;
}
#endif

/*
 * A cheaper read of a 16-byte word: the high half, then the low half, each
 * an atomic 8-byte load.  The pair may never have been in memory at once.
 * It is only used where a later CAS validates it and the word's fields only
 * move one way (see "Torn reads" in ring.c): then a successful CAS proves
 * that the word held exactly this value from the second load on.
 */
static inline void
shmt__load128_hilo(const void *p, uint64_t out[2])
{
	out[1] = __atomic_load_n((const uint64_t *)p + 1, __ATOMIC_ACQUIRE);
	out[0] = __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

#endif /* SHMT_ATOMIC128_H */
