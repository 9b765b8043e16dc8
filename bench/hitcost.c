/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-hitcost: what one shmt_hit costs, in thread CPU time (time
 * this thread ran, so a loaded machine's waits do not count, though its
 * cache and core sharing still do), on an injected clock so that the
 * clock's own cost (about 35 ns) is left out and the hit rate is exact.
 * Workloads, each after one window of warm-up in a fresh segment:
 *
 *   hot     one key hit a million times a second, window 1 s: every hit
 *           also drops what left the window (about 10^6 hits kept);
 *   spread  10000 keys hit in turn, 100000 hits a second, window 1 s
 *           (about 10 hits a second per key, 10 kept each);
 *   burst   one key: 50000 hits 1 us apart, then 10 s of silence, in a
 *           60 s window (growth, then the burst ageing out).
 *
 * One line per workload and round, for scripts (bench/hitcost-compare.sh
 * alternates this program built on two trees and prints the medians):
 *
 *   hitcost workload=hot hits=2000000 ns_per_hit=41.2 bytes=8192
 *
 *   shmthrottle-hitcost [HITS [ROUNDS [WORKLOAD]]]   (default 2000000 3,
 *                                                     every workload)
 *
 * Under a loaded machine the times wander; instructions do not: e.g.
 *   valgrind --tool=callgrind --toggle-collect=shmt_hit \
 *     shmthrottle-hitcost 200000 1 hot
 * counts the instructions of every shmt_hit (warm-up included: divide by
 * the calls callgrind_annotate shows).
 */
#include "shmthrottle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

#define SEC 1000000000ULL

static uint64_t now_ns;

static uint64_t
clock_read(void *ctx)
{
	(void)ctx;
	return now_ns;
}

static uint64_t
counters_used(shmt_t *h)
{
	shmt_segment_stat_t ss;

	if (shmt_segment_stat(h, &ss) != 0)
		return 0;
	for (uint32_t i = 0; i < ss.nregions; i++)
		if (strcmp(ss.regions[i].name, "counters") == 0)
			return ss.regions[i].used;
	return 0;
}

static shmt_t *
make(const char *name, uint64_t window)
{
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.dict_bytes = 0;
	cfg.analyzer_bytes = 0;
	cfg.counters_bytes = 64ULL << 20;
	cfg.counters_window_ns = window;
	shmt_unlink(name);
	if (shmt_create(name, &cfg, &h) != 0)
		return NULL;
	now_ns = 1000 * SEC;
	shmt_set_clock(h, clock_read, NULL);
	return h;
}

/* The spread workload's keys, made once: formatting them per hit would
 * be timed with the hits. */
static char spread_keys[10000][16];

/* Hit number I of workload W: its key (*LEN bytes) and the step of the
 * clock before it. */
static const char *
step(int w, uint64_t i, size_t *len, uint64_t *dt)
{
	switch (w) {
	case 0:
		*dt = 1000;
		*len = 3;
		return "hot";
	case 1:
		*dt = 10000;
		*len = strlen(spread_keys[i % 10000]);
		return spread_keys[i % 10000];
	default:
		*dt = i % 50000 == 0 ? 10 * SEC : 1000;
		*len = 5;
		return "burst";
	}
}

static const char *const names[] = { "hot", "spread", "burst" };

static int
run(int w, const char *seg, uint64_t hits)
{
	uint64_t window = w == 2 ? 60 * SEC : SEC, warm, dt, c;
	shmt_t *h = make(seg, window);
	const char *key;
	double t0, t1;
	size_t len;

	if (h == NULL)
		return -1;
	/* One window of warm-up: the counters reach their steady state. */
	for (warm = 0; warm < hits; warm++) {
		key = step(w, warm, &len, &dt);
		now_ns += dt;
		if (shmt_hit(h, key, len, &c) != 0)
			return -1;
		if (now_ns > 1000 * SEC + window && w != 2)
			break;
	}
	t0 = probe_cpu_ns();
	for (uint64_t i = 0; i < hits; i++) {
		key = step(w, warm + i, &len, &dt);
		now_ns += dt;
		if (shmt_hit(h, key, len, &c) != 0)
			return -1;
	}
	t1 = probe_cpu_ns();
	printf("hitcost workload=%s hits=%llu ns_per_hit=%.1f bytes=%llu\n",
	    names[w], (unsigned long long)hits, (t1 - t0) / (double)hits,
	    (unsigned long long)counters_used(h));
	fflush(stdout);
	shmt_close(h);
	shmt_unlink(seg);
	return 0;
}

int
main(int argc, char **argv)
{
	uint64_t hits = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	const char *only = argc > 3 ? argv[3] : NULL;
	char seg[64];

	snprintf(seg, sizeof(seg), "/shmt-hitcost-%d", (int)getpid());
	for (int i = 0; i < 10000; i++)
		snprintf(spread_keys[i], sizeof(spread_keys[i]), "key:%d", i);
	for (int r = 0; r < rounds; r++)
		for (int w = 0; w < 3; w++)
			if ((only == NULL || strcmp(only, names[w]) == 0) &&
			    run(w, seg, hits) != 0) {
				fprintf(stderr, "hitcost: workload %d failed\n", w);
				return 1;
			}
	return 0;
}
