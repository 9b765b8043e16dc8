/* This file is private to shmthrottle-bench. */
/* SPDX-License-Identifier: MIT */
/* What a run prints: SUMMARY lines, JSON lines, a table and the ratios. */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include "harness.h"

/* One machine-readable line with every parameter and every figure:
 * "SUMMARY key=value ..." or, with JSON set, one JSON object. */
void report_run(const struct bench_result *r, int json);

/* The CLOCK line: the clock read and the floors of this machine, one
 * thread, in ns per call. */
void report_clock(const struct bench_clock *k, int json);

/* The table of the N results of one workload and worker count, and the
 * ratios of shmt against every other system in it. */
void report_table(const struct bench_result *rs, int n, int json);

#endif
