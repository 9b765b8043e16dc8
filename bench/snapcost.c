/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-snapcost: the size and the time of a snapshot of a full
 * dictionary.  A segment with a 32 MiB dictionary, 8 MiB of counters and
 * the default 1 MiB analyzer (twice the default dictionary and counters)
 * is filled with items of VALUE bytes until
 * the dictionary evicts, and with COUNTERS counted keys; then the snapshot
 * is written (image + file + fsync + rename) and restored into a second
 * segment, ROUNDS times each, and the medians are printed with the file's
 * size in one line.
 *
 *   shmthrottle-snapcost [VALUE [COUNTERS [ROUNDS [DIR]]]]
 *                        (default 100 20000 5 /tmp)
 */
#include "shmthrottle.h"
#include "snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

static double
now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void
die(const char *what, int rc, const char *err)
{
	fprintf(stderr, "snapcost: %s: %s %s\n", what, shmt_strerror(rc),
	    err != NULL ? err : "");
	exit(1);
}

int
main(int argc, char **argv)
{
	size_t vlen = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 100;
	long counters = argc > 2 ? strtol(argv[2], NULL, 10) : 20000;
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	const char *dir = argc > 4 ? argv[4] : "/tmp";
	char seg[64], seg2[64], path[512], err[1024], key[32], *val;
	double *wt, *rt;
	shmt_dict_stat_t ds;
	struct stat st;
	shmt_config_t cfg;
	shmt_t *h, *r;
	long items = 0;
	int rc;

	if (vlen == 0 || vlen > 65536 || rounds < 1 || rounds > 100) {
		fprintf(stderr, "usage: shmthrottle-snapcost [VALUE (1..65536) "
		    "[COUNTERS [ROUNDS (1..100) [DIR]]]]\n");
		return 2;
	}
	snprintf(seg, sizeof(seg), "/shmt-snapcost-%d", (int)getpid());
	snprintf(seg2, sizeof(seg2), "/shmt-snapcost-%d-r", (int)getpid());
	snprintf(path, sizeof(path), "%s/shmt-snapcost-%d.snap", dir,
	    (int)getpid());
	shmt_unlink(seg);
	shmt_config_init(&cfg);
	cfg.dict_bytes = 32ULL << 20;
	cfg.counters_bytes = 8ULL << 20;
	if ((rc = shmt_create(seg, &cfg, &h)) != 0)
		die("create", rc, NULL);
	if ((val = malloc(vlen)) == NULL)
		return 1;
	memset(val, 'v', vlen);
	/* Fill until the dictionary evicts: it is full. */
	for (;; items++) {
		int kl = snprintf(key, sizeof(key), "item-%ld", items);

		if ((rc = shmt_set(h, key, (size_t)kl, val, vlen, 3600000)) != 0)
			die("set", rc, NULL);
		if (items % 1024 == 0 && shmt_dict_stat(h, &ds) == 0 &&
		    ds.evictions > 0)
			break;
	}
	for (long i = 0; i < counters; i++) {
		int kl = snprintf(key, sizeof(key), "ctr-%ld", i);

		if ((rc = shmt_hit(h, key, (size_t)kl, NULL)) != 0)
			die("hit", rc, NULL);
	}
	if ((rc = shmt_dict_stat(h, &ds)) != 0)
		die("dict stat", rc, NULL);
	wt = calloc((size_t)rounds, sizeof(*wt));
	rt = calloc((size_t)rounds, sizeof(*rt));
	if (wt == NULL || rt == NULL)
		return 1;
	for (int i = 0; i < rounds; i++) {
		double t0 = now_s();

		if ((rc = shmtd_snapshot_write(h, path, err, sizeof(err))) != 0)
			die("write", rc, err);
		wt[i] = now_s() - t0;
		shmt_unlink(seg2);
		t0 = now_s();
		if ((rc = shmtd_snapshot_restore(path, seg2, &r, err,
		    sizeof(err))) != 0)
			die("restore", rc, err);
		rt[i] = now_s() - t0;
		shmt_close(r);
		shmt_unlink(seg2);
	}
	if (stat(path, &st) != 0)
		return 1;
	qsort(wt, (size_t)rounds, sizeof(*wt), probe_cmp_d);
	qsort(rt, (size_t)rounds, sizeof(*rt), probe_cmp_d);
	printf("SUMMARY snapcost dict_bytes=%llu dict_used=%llu items=%llu "
	    "value=%zu counters=%ld rounds=%d file_bytes=%lld "
	    "write_ms_median=%.1f write_ms_max=%.1f restore_ms_median=%.1f "
	    "restore_ms_max=%.1f\n", (unsigned long long)ds.bytes,
	    (unsigned long long)ds.used, (unsigned long long)ds.items, vlen,
	    counters, rounds, (long long)st.st_size, wt[rounds / 2] * 1e3,
	    wt[rounds - 1] * 1e3, rt[rounds / 2] * 1e3, rt[rounds - 1] * 1e3);
	unlink(path);
	shmt_close(h);
	shmt_unlink(seg);
	free(val);
	free(wt);
	free(rt);
	return 0;
}
