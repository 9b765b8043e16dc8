/* SPDX-License-Identifier: MIT */
/*
 * Which 16-byte load this process uses (atomic128.h): decided once, before
 * main, from the CPU's AVX flag.  $SHMT_ATOMIC16=cas keeps the locked load
 * (the tests run both).
 */
#include "atomic128.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
int shmt__atomic16_sse;

static __attribute__((constructor)) void
atomic16_decide(void)
{
	const char *e = getenv("SHMT_ATOMIC16");

	/* Needed in a constructor that may run before libgcc's. */
	__builtin_cpu_init();
	__atomic_store_n(&shmt__atomic16_sse, __builtin_cpu_supports("avx") &&
	    (e == NULL || strcmp(e, "cas") != 0), __ATOMIC_RELAXED);
}
#else
typedef int shmt__atomic128_none;   /* GCC's __atomic builtins */
#endif
