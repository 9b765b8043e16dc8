/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-socost: what a grant costs a program linked against the
 * shared library (the bench links the library statically, where thread-
 * local variables cost a load at a fixed offset; through libshmthrottle.so
 * an access of another TLS model may call __tls_get_addr).  Loops of N
 * shmt_try_use_key and N shmt_limiter_try on one buckets limiter that
 * grants every call, on the real clock; prints the best of ROUNDS per
 * call, which a loaded machine raises least.
 *
 *   build/bench/shmthrottle-socost [N [ROUNDS]]      (default 5000000 7)
 *
 * It uses the public API only, so the same file builds against another
 * tree's library for a before/after comparison.
 */
#include "shmthrottle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double
now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 5000000;
	long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 7;
	double named = 1e300, resolved = 1e300, t0, t;
	shmt_limiter_t *lim = NULL;
	shmt_limit_t l;
	char seg[64];
	shmt_t *h;
	int rc;

	if (argc > 3 || n <= 0 || rounds <= 0) {
		fprintf(stderr, "usage: %s [N [ROUNDS]]\n", argv[0]);
		return 2;
	}
	memset(&l, 0, sizeof(l));
	l.mode = SHMT_MODE_BUCKETS;
	l.limit = 2000000000;
	l.window_ns = 1000000000ULL;
	l.slack_ns = 100000000ULL;
	l.slack_uses = 1U << 20;
	snprintf(seg, sizeof(seg), "/shmt-socost-%ld", (long)getpid());
	if ((rc = shmt_create(seg, NULL, &h)) != 0)
		goto fail;
	if ((rc = shmt_limiter_define(h, "k", &l)) != 0 ||
	    (rc = shmt_limiter_open(h, "k", &lim)) != 0) {
		shmt_close(h);
		shmt_unlink(seg);
		goto fail;
	}
	for (long r = 0; r < rounds; r++) {
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			if (shmt_try_use_key(h, "k") != 1)
				break;
		if ((t = (now_ns() - t0) / (double)n) < named)
			named = t;
		t0 = now_ns();
		for (long i = 0; i < n; i++)
			if (shmt_limiter_try(lim, NULL, 0) != 1)
				break;
		if ((t = (now_ns() - t0) / (double)n) < resolved)
			resolved = t;
	}
	printf("socost named_ns=%.2f resolved_ns=%.2f calls=%ld rounds=%ld\n",
	    named, resolved, n, rounds);
	shmt_limiter_close(lim);
	shmt_close(h);
	shmt_unlink(seg);
	return 0;
fail:
	fprintf(stderr, "%s: %s\n", argv[0], shmt_strerror(rc));
	return 1;
}
