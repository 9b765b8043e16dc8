/* This file is private to the tests of libshmthrottle. */
/* SPDX-License-Identifier: MIT */
/*
 * Shared pieces of the limiter tests: reference models of the seed's
 * Throttler and of an exact sliding-window log, written from the seed's
 * Python (not from the library), and the checker that looks for windows that
 * certainly hold more grants than allowed.
 */
#ifndef SHMT_TEST_LIMITER_UTIL_H
#define SHMT_TEST_LIMITER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "shmthrottle.h"

/* The seed's Throttler: a deque of buckets {keycount, close_time}. */
struct tl_bucket {
	uint64_t keycount;
	shmt_time_t close;
};

struct tl_throttle {
	uint64_t limit, cooldown, open_time, bucket_size;
	uint32_t num_buckets;
	uint64_t free;
	struct tl_bucket *q;   /* ring of num_buckets entries */
	uint32_t head, len;
	int overflow;          /* the seed's assert would have fired */
};

int tl_throttle_init(struct tl_throttle *m, uint64_t limit, uint64_t window,
    uint64_t slack, uint64_t slack_uses);
void tl_throttle_free(struct tl_throttle *m);
/* The seed's try_use_key(now): 1 granted, 0 throttled. */
int tl_throttle_try(struct tl_throttle *m, shmt_time_t now);
uint32_t tl_buckets_needed(uint64_t limit, uint64_t window, uint64_t slack,
    uint64_t slack_uses);

/* Exact sliding-window log: grant iff fewer than limit grants at times t
 * with t + window > now. */
struct tl_exact {
	uint64_t limit, window;
	shmt_time_t *q;
	uint64_t head, len;
};

int tl_exact_init(struct tl_exact *m, uint64_t limit, uint64_t window);
void tl_exact_free(struct tl_exact *m);
int tl_exact_try(struct tl_exact *m, shmt_time_t now);
/* Grants still inside the window at NOW. */
uint64_t tl_exact_held(struct tl_exact *m, shmt_time_t now);

/* A grant seen from outside: the clock read before and after the call,
 * and a group (key name index, client index; 0 when unused). */
struct tl_grant {
	uint64_t before, after;
	uint32_t group;
	uint32_t pad;
};

/*
 * Counts the windows [a, a + window), one per grant's `before` taken as a,
 * that certainly hold more than LIMIT grants of GROUP (all groups when GROUP
 * is UINT32_MAX).  A grant certainly lies in [a, a + window) iff
 * before >= a and after < a + window.  G is sorted in place by `before`.
 * On a violation, *WORST (may be NULL) gets the largest count found.
 */
uint64_t tl_violations(struct tl_grant *g, size_t n, uint64_t window,
    uint64_t limit, uint32_t group, uint64_t *worst);
/* Windows [t, t + WINDOW) anchored at each of the grant times T[0..N)
 * (sorted) that hold more than LIMIT of them. */
uint64_t tl_windows_over(const uint64_t *t, size_t n, uint64_t window,
    uint64_t limit);

#endif

/*
 * The multi-process stress set (test_limiter_mp.c, test_limiter_kill.c):
 * four limiters with a 20 ms window and 2 ms slack on one segment, a log of
 * grants in a MAP_SHARED anonymous mapping made before fork, and the check.
 */
enum { TL_BK = 0, TL_KEYS, TL_EXACT, TL_CLIENT, TL_NLIM };

#define TL_WINDOW_NS 20000000ULL
#define TL_SLACK_NS 2000000ULL

struct tl_rec {
	uint64_t before, after;
	uint32_t lim, group;
	uint32_t valid;          /* written last: a killed writer leaves 0 */
	uint32_t pad;
};

struct tl_log {
	uint64_t cap;
	uint64_t n;              /* records claimed */
	uint64_t calls;
	uint64_t errors;
	uint64_t errors_by_lim[TL_NLIM];
	int64_t first_error;
	uint64_t max_call_ns;    /* slowest call seen */
	int stop;
	int pad;
	struct tl_rec rec[];
};

struct tl_log *tl_log_map(uint64_t cap);
void tl_log_unmap(struct tl_log *log);
int tl_stress_define(shmt_t *h);
/* One call on limiter WHICH, timed and logged.  Returns its result. */
int tl_stress_call(shmt_t *h, struct tl_log *log, unsigned which,
    uint64_t *rs);
/* Once nobody has called for window + slack: every stress limiter is empty
 * after housekeeping and grants its whole limit again (cmocka asserts). */
void tl_stress_capacity_back(shmt_t *h);
/* Windows that certainly hold too many grants, over every limiter, key
 * name and client; prints a line per limiter. */
uint64_t tl_stress_check(struct tl_log *log, uint64_t grants[TL_NLIM]);
