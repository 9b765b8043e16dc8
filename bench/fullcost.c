/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-fullcost: what a set of a new key costs on a dictionary that
 * has room, and on one that is full and evicts (the default 16 MiB, 8
 * shards), in thread CPU time: the segment is filled with 10-byte keys and
 * 16-byte values, without TTL, until every shard evicts; then ROUNDS rounds of SETS
 * sets of new keys each, and the median.  The first sets, while it has
 * room, give the other figure.  Prints the whole-shard walks for expired
 * items this process made (lib/store.c, "Reaping").  TTL_MS > 0 gives
 * every item that TTL (with the real clock).
 *
 *   shmthrottle-fullcost [SETS [ROUNDS [TTL_MS]]]   (default 20000 5 0)
 */
#include "shmthrottle.h"
#include "store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

/* SETS sets of keys NEXT, NEXT + 1, ...: ns per set, or -1. */
static double
sets(shmt_t *h, uint64_t *next, long n, uint64_t ttl_ms)
{
	char k[32];
	double t0 = probe_cpu_ns();

	for (long i = 0; i < n; i++) {
		int l = snprintf(k, sizeof(k), "k%09" PRIu64, (*next)++);

		if (shmt_set(h, k, (size_t)l, "0123456789abcdef", 16,
		    ttl_ms) != 0)
			return -1;
	}
	return (probe_cpu_ns() - t0) / (double)n;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	long ttl = argc > 3 ? atol(argv[3]) : 0;
	shmt_config_t cfg;
	shmt_dict_stat_t ds;
	shmt_t *h;
	char name[64];
	uint64_t next = 0, w0;
	double room, *t;
	int rc = 1;

	if (n <= 0 || rounds <= 0 || rounds > 1000 || ttl < 0) {
		fprintf(stderr, "usage: shmthrottle-fullcost [SETS [ROUNDS "
		    "[TTL_MS]]]\n");
		return 2;
	}
	t = calloc((size_t)rounds, sizeof(*t));
	snprintf(name, sizeof(name), "/shmt-fullcost-%d", (int)getpid());
	shmt_config_init(&cfg);
	cfg.analyzer_bytes = 0;
	shmt_unlink(name);
	if (t == NULL || shmt_create(name, &cfg, &h) != 0) {
		fprintf(stderr, "shmthrottle-fullcost: cannot create %s\n", name);
		free(t);
		return 1;
	}
	/* With room: the first sets of an empty dictionary. */
	room = sets(h, &next, n, (uint64_t)ttl);
	/* Fill until every shard evicts: 1000 sets, 1000 evictions. */
	if (shmt_dict_stat(h, &ds) != 0)
		goto out;
	for (uint64_t ev = ds.evictions;; ev = ds.evictions) {
		if (sets(h, &next, 1000, (uint64_t)ttl) < 0 ||
		    shmt_dict_stat(h, &ds) != 0)
			goto out;
		if (ds.evictions - ev >= 1000)
			break;
	}
	w0 = __atomic_load_n(&shmt__store_walks, __ATOMIC_RELAXED);
	for (int i = 0; i < rounds; i++) {
		if ((t[i] = sets(h, &next, n, (uint64_t)ttl)) < 0)
			goto out;
		printf("round %d: %.1f ns a set on the full dictionary\n", i + 1,
		    t[i]);
	}
	if (shmt_dict_stat(h, &ds) != 0 || room < 0)
		goto out;
	qsort(t, (size_t)rounds, sizeof(*t), probe_cmp_d);
	printf("fullcost sets=%ld rounds=%d ttl_ms=%ld items=%" PRIu64
	    " with_room_ns=%.1f full_median_ns=%.1f walks=%" PRIu64
	    " evictions=%" PRIu64 " expirations=%" PRIu64 "\n", n, rounds, ttl,
	    ds.items, room, t[rounds / 2],
	    __atomic_load_n(&shmt__store_walks, __ATOMIC_RELAXED) - w0,
	    ds.evictions, ds.expirations);
	rc = 0;
out:
	if (rc != 0)
		fprintf(stderr, "shmthrottle-fullcost: a set failed\n");
	shmt_close(h);
	shmt_unlink(name);
	free(t);
	return rc;
}
