/* This file is private to shmthrottle-bench. */
/* SPDX-License-Identifier: MIT */
/*
 * One measured run: start the workers (threads, forked processes, or
 * both), let them warm up, count and time their ops for the duration, stop
 * them, and merge what they recorded.
 */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include "bench.h"
#include "hist.h"
#include "zipf.h"

struct bench_result {
	struct bench_conf conf;
	double elapsed_s;
	uint64_t ops, grants, errors;
	int first_err;
	double ops_s;
	struct hist h;
};

/* Ticks of the latency timer per nanosecond (set by harness_init). */
extern double bench_ticks_per_ns;

/* Calibrate the timer.  Call once before any run. */
void harness_init(void);

/* Run C on SYS; Z is the distribution of client ids or keys, for the
 * workloads that draw them (bench_kind_draws).
 * Returns 0 or a negative errno (the run's first error). */
int harness_run(const struct bench_conf *c, const struct bench_sys *sys,
    const struct zipf *z, struct bench_result *out);

/* Ask a run in progress to stop early (from a signal handler). */
void harness_abort(void);

#endif
