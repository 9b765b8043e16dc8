/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-grantpair: a grant against its floor in short turns, in
 * thread CPU time (time this thread ran).  A named grant
 * (shmt_try_use_key), a grant through a resolved limiter
 * (shmt_limiter_try), the floor (a read of the state word, a read of
 * CLOCK_MONOTONIC, one CAS of the word's width: 16 bytes for buckets, 8
 * for rate mode, as the bench's clock+cas and clock+cas8) and a block of
 * the core's speed probe (probe.h) each run OPS calls, one after the
 * other, the order rotating, TURNS times.  A grant's ratio is taken
 * against the floor of its own turn, under a millisecond apart.
 *
 * Printed: the medians of the turns' ratios (with their quartiles) and of
 * each block's ns per call, over every turn; and the medians of the
 * ratios over the quiet turns alone (those whose speed probe ran within
 * PROBE_QUIET of the run's fastest), the code's ratio on a core of its
 * own.  On a VM whose core is shared with a busy neighbour, the two
 * differ: the grant is instructions, which the neighbour slows, and the
 * floor mostly a clock read's latency, which it slows less.  Every call
 * is granted: the limiter's parameters are the bench's (throttle-same,
 * profile grant).
 *
 *   shmthrottle-grantpair [buckets|gcra [OPS [TURNS]]]
 *                                        (default buckets 5000 3001)
 */
#include "shmthrottle.h"

#include <ck_pr.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

static alignas(128) uint64_t word[2];
static shmt_t *seg;
static shmt_limiter_t *lim;

/* The calls, each behind a call of its own as in the bench. */
static __attribute__((noinline)) int
op_named(void)
{
	return shmt_try_use_key(seg, "g");
}

static __attribute__((noinline)) int
op_resolved(void)
{
	return shmt_limiter_try(lim, NULL, 0);
}

static __attribute__((noinline)) int
op_floor16(void)
{
	uint64_t cmp[2] = { ck_pr_load_64(&word[0]), ck_pr_load_64(&word[1]) };
	uint64_t set[2] = { cmp[0] + 1, probe_mono_ns() };

	return ck_pr_cas_64_2(word, cmp, set);
}

static __attribute__((noinline)) int
op_floor8(void)
{
	uint64_t cmp = ck_pr_load_64(&word[0]);

	return ck_pr_cas_64(&word[0], cmp, cmp + (probe_mono_ns() & 0xff) + 1);
}

/* An ALU block as a call like the others (probe.h). */
static uint64_t alu_state[4] = { 1, 2, 3, 4 };

static __attribute__((noinline)) int
op_alu(void)
{
	probe_alu_step(alu_state);
	return 1;
}

/* Thread CPU ns per call of OPS calls of OP; -1 when a call was not
 * granted (or failed). */
static double
block(int (*op)(void), long ops)
{
	double t0 = probe_cpu_ns();
	int bad = 0;

	for (long i = 0; i < ops; i++)
		bad |= op() != 1;
	t0 = (probe_cpu_ns() - t0) / (double)ops;
	return bad ? -1 : t0;
}

static double
quantile(double *a, long n, double q)
{
	qsort(a, (size_t)n, sizeof(*a), probe_cmp_d);
	return a[(long)(q * (double)(n - 1) + 0.5)];
}

int
main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "buckets";
	long ops = argc > 2 ? atol(argv[2]) : 5000;
	long turns = argc > 3 ? atol(argv[3]) : 3001;
	int (*ops3[4])(void) = { op_named, op_resolved, op_floor16, op_alu };
	double *t[4], *r[2], *q[2], alu_min;
	long nq = 0;
	char name[64];
	shmt_limit_t l;
	int rc = 1, err;

	memset(&l, 0, sizeof(l));
	if (strcmp(mode, "gcra") == 0) {
		l.mode = SHMT_MODE_GCRA;
		l.limit = 1000000000;
		l.window_ns = 1000000000;
		l.burst = 1U << 20;
		ops3[2] = op_floor8;
	} else if (strcmp(mode, "buckets") == 0) {
		l.mode = SHMT_MODE_BUCKETS;
		l.limit = SHMT_LIMIT_MAX;
		l.window_ns = 1000000000;
		l.slack_ns = 100000000;
		l.slack_uses = 1U << 20;
	} else {
		ops = 0;
	}
	if (ops <= 0 || turns <= 0 || turns > 100000) {
		fprintf(stderr, "usage: shmthrottle-grantpair [buckets|gcra "
		    "[OPS [TURNS]]]\n");
		return 2;
	}
	for (int i = 0; i < 4; i++)
		t[i] = calloc((size_t)turns, sizeof(double));
	for (int i = 0; i < 2; i++) {
		r[i] = calloc((size_t)turns, sizeof(double));
		q[i] = calloc((size_t)turns, sizeof(double));
	}
	if (!t[0] || !t[1] || !t[2] || !t[3] || !r[0] || !r[1] || !q[0] ||
	    !q[1])
		goto out;
	snprintf(name, sizeof(name), "/shmt-grantpair-%d", (int)getpid());
	shmt_unlink(name);
	if ((err = shmt_create(name, NULL, &seg)) != 0 ||
	    (err = shmt_limiter_define(seg, "g", &l)) != 0 ||
	    (err = shmt_limiter_open(seg, "g", &lim)) != 0) {
		fprintf(stderr, "shmthrottle-grantpair: %s\n",
		    shmt_strerror(err));
		goto out;
	}
	for (int i = 0; i < 4; i++)             /* warm up */
		(void)block(ops3[i], ops);
	for (long p = 0; p < turns; p++) {
		for (int k = 0; k < 4; k++) {
			int i = (int)((p + k) % 4);

			if ((t[i][p] = block(ops3[i], ops)) < 0) {
				fprintf(stderr, "shmthrottle-grantpair: a call "
				    "was not granted\n");
				goto out;
			}
		}
		r[0][p] = t[0][p] / t[2][p];
		r[1][p] = t[1][p] / t[2][p];
	}
	/* The quiet turns: those whose ALU block ran within an eighth of the
	 * fastest one's time. */
	alu_min = t[3][0];
	for (long p = 1; p < turns; p++)
		if (t[3][p] < alu_min)
			alu_min = t[3][p];
	for (long p = 0; p < turns; p++)
		if (t[3][p] <= alu_min * PROBE_QUIET) {
			q[0][nq] = r[0][p];
			q[1][nq++] = r[1][p];
		}
	printf("grantpair mode=%s ops=%ld turns=%ld named_ns=%.1f "
	    "resolved_ns=%.1f floor_ns=%.1f named_ratio=%.3f named_q1=%.3f "
	    "named_q3=%.3f ", mode, ops, turns, quantile(t[0], turns, 0.5),
	    quantile(t[1], turns, 0.5), quantile(t[2], turns, 0.5),
	    quantile(r[0], turns, 0.5), quantile(r[0], turns, 0.25),
	    quantile(r[0], turns, 0.75));
	printf("resolved_ratio=%.3f resolved_q1=%.3f resolved_q3=%.3f ",
	    quantile(r[1], turns, 0.5), quantile(r[1], turns, 0.25),
	    quantile(r[1], turns, 0.75));
	printf("alu_min_ns=%.2f alu_ns=%.2f quiet=%ld named_quiet=%.3f "
	    "resolved_quiet=%.3f\n", alu_min, quantile(t[3], turns, 0.5), nq,
	    quantile(q[0], nq, 0.5), quantile(q[1], nq, 0.5));
	rc = 0;
out:
	shmt_limiter_close(lim);
	if (seg != NULL) {
		shmt_close(seg);
		shmt_unlink(name);
	}
	for (int i = 0; i < 4; i++)
		free(t[i]);
	for (int i = 0; i < 2; i++) {
		free(r[i]);
		free(q[i]);
	}
	return rc;
}
