/* This file is private to the tests of libshmthrottle. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_TESTUTIL_H
#define SHMT_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "shmthrottle.h"

/* A segment name unique to this process and call: "/shmt-test-PID-N-TAG". */
void tu_segname(char *buf, size_t cap, const char *tag);

/* A hand-driven clock for shmt_set_clock(). */
struct tu_clock {
	shmt_time_t now;
};
shmt_time_t tu_clock_read(void *ctx);

/* Seed from $SHMT_SEED or from the time; printed either way so a failing
 * run can be replayed with SHMT_SEED=<seed>. */
uint64_t tu_seed(const char *test);
/* xorshift64* */
uint64_t tu_rand(uint64_t *state);

/* Scale for stress loops: $SHMT_STRESS_SCALE (default 1.0; sanitizer
 * builds set it lower in CI). */
double tu_scale(void);

/* A cmocka teardown: remove every /dev/shm object named after this
 * process (tu_segname's "shmt-test-PID-"), so that a test that failed
 * before its own cleanup leaves nothing behind.  Always returns 0. */
int tu_sweep(void **state);

/* Count open file descriptors of this process (leak checks). */
int tu_fd_count(void);

#endif
