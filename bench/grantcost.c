/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-grantcost: N grants of shmt_try_use_key on one shared limiter
 * of MODE (buckets, gcra or exact), on an injected clock that moves 1 ns a
 * call, with parameters that grant every call.  For instruction counts,
 * which a loaded machine does not change: run it under callgrind with two
 * N, and the difference of the totals over the difference of N is the
 * instructions of one grant (the setup cancels out):
 *
 *   for n in 100000 200000; do valgrind --tool=callgrind \
 *     --callgrind-out-file=cg.$n build/bench/shmthrottle-grantcost gcra $n; done
 *   # (Ir of cg.200000 - Ir of cg.100000) / 100000, from each file's
 *   # "summary:" line
 *
 * It uses the public API only, so the same file builds against another
 * tree's library for a before/after comparison.
 */
#include "shmthrottle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t now_ns = 1000000;

static uint64_t
clock_read(void *ctx)
{
	(void)ctx;
	return now_ns++;
}

int
main(int argc, char **argv)
{
	char seg[64];
	shmt_limit_t l;
	shmt_t *h;
	long n;
	int rc;

	if (argc != 3 || (n = strtol(argv[2], NULL, 10)) <= 0) {
		fprintf(stderr, "usage: %s buckets|gcra|exact N\n", argv[0]);
		return 2;
	}
	memset(&l, 0, sizeof(l));
	if (strcmp(argv[1], "gcra") == 0) {
		l.mode = SHMT_MODE_GCRA;     /* T = 1 ns: a grant a call */
		l.limit = 1;
		l.window_ns = 1;
		l.burst = 1;
	} else if (strcmp(argv[1], "exact") == 0) {
		l.mode = SHMT_MODE_EXACT;    /* each record a window old */
		l.limit = 16;
		l.window_ns = 16;
	} else if (strcmp(argv[1], "buckets") == 0) {
		l.mode = SHMT_MODE_BUCKETS;
		l.limit = 100000;
		l.window_ns = 1000;
		l.slack_ns = 100;
		l.slack_uses = 100;
	} else {
		fprintf(stderr, "%s: mode buckets, gcra or exact\n", argv[0]);
		return 2;
	}
	snprintf(seg, sizeof(seg), "/shmt-grantcost-%ld", (long)getpid());
	if ((rc = shmt_create(seg, NULL, &h)) != 0 ||
	    (rc = shmt_set_clock(h, clock_read, NULL)) != 0 ||
	    (rc = shmt_limiter_define(h, "g", &l)) != 0) {
		fprintf(stderr, "%s: %s\n", argv[0], shmt_strerror(rc));
		return 1;
	}
	for (long i = 0; i < n; i++)
		if ((rc = shmt_try_use_key(h, "g")) != 1) {
			fprintf(stderr, "%s: call %ld: %d\n", argv[0], i, rc);
			break;
		}
	shmt_close(h);
	shmt_unlink(seg);
	printf("grantcost mode=%s grants=%ld\n", argv[1], n);
	return rc == 1 ? 0 : 1;
}
