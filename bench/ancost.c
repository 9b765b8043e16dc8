/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-ancost: what the hot-key analyzer adds to a get, in thread
 * CPU time (time this thread ran, so a loaded machine's waits do not
 * count, though its cache and core sharing still do).  Two segments, one
 * with the default analyzer and one without, each holding KEYS keys; the
 * same Zipf(0.99) sequence of gets runs on each in turn, ROUNDS rounds
 * alternated, and the medians are printed.
 *
 *   shmthrottle-ancost [GETS [ROUNDS [KEYS]]]   (default 2000000 9 100000)
 */
#include "shmthrottle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

static shmt_t *
make(const char *name, int on, long keys)
{
	shmt_config_t cfg;
	shmt_t *h;
	char k[32];

	shmt_config_init(&cfg);
	if (!on)
		cfg.analyzer_bytes = 0;
	shmt_unlink(name);
	if (shmt_create(name, &cfg, &h) != 0)
		return NULL;
	for (long i = 0; i < keys; i++) {
		int l = snprintf(k, sizeof(k), "key:%ld", i);

		if (shmt_set(h, k, (size_t)l, "value", 5, 0) != 0) {
			shmt_close(h);
			return NULL;
		}
	}
	return h;
}

static double
run(shmt_t *h, char (*key)[16], const int *klen, const int *seq, long n)
{
	char v[16];
	size_t vl;
	double t0 = probe_cpu_ns();

	for (long j = 0; j < n; j++)
		(void)shmt_get(h, key[seq[j]], (size_t)klen[seq[j]], v, sizeof(v),
		    &vl);
	return (probe_cpu_ns() - t0) / (double)n;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 9;
	long keys = argc > 3 ? atol(argv[3]) : 100000;
	char on_name[64], off_name[64], (*key)[16];
	double *cdf, sum = 0, *t_on, *t_off;
	int *seq, *klen, rc = 1;
	uint64_t r = 88172645463325252ULL;
	shmt_t *on = NULL, *off = NULL;

	if (n <= 0 || rounds <= 0 || rounds > 1000 || keys <= 0 ||
	    keys > 10000000) {
		fprintf(stderr, "usage: shmthrottle-ancost [GETS [ROUNDS "
		    "[KEYS]]]\n");
		return 2;
	}
	cdf = malloc((size_t)keys * sizeof(*cdf));
	seq = malloc((size_t)n * sizeof(*seq));
	key = malloc((size_t)keys * sizeof(*key));
	klen = malloc((size_t)keys * sizeof(*klen));
	t_on = calloc((size_t)rounds, sizeof(*t_on));
	t_off = calloc((size_t)rounds, sizeof(*t_off));
	if (!cdf || !seq || !key || !klen || !t_on || !t_off)
		goto out;
	for (long i = 0; i < keys; i++) {
		sum += 1 / pow((double)i + 1, 0.99);
		cdf[i] = sum;
		klen[i] = snprintf(key[i], sizeof(key[i]), "key:%ld", i);
	}
	for (long j = 0; j < n; j++) {
		double u;
		long lo = 0, hi = keys - 1;

		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		u = (double)(r >> 11) / 9007199254740992.0 * sum;
		while (lo < hi) {
			long m = (lo + hi) / 2;

			if (cdf[m] < u)
				lo = m + 1;
			else
				hi = m;
		}
		seq[j] = (int)lo;
	}
	snprintf(on_name, sizeof(on_name), "/shmt-ancost-on-%d", (int)getpid());
	snprintf(off_name, sizeof(off_name), "/shmt-ancost-off-%d",
	    (int)getpid());
	on = make(on_name, 1, keys);
	off = make(off_name, 0, keys);
	if (on == NULL || off == NULL) {
		fprintf(stderr, "shmthrottle-ancost: cannot create segments\n");
		goto out;
	}
	run(on, key, klen, seq, n / 4);         /* warm up */
	run(off, key, klen, seq, n / 4);
	for (int i = 0; i < rounds; i++) {
		t_on[i] = run(on, key, klen, seq, n);
		t_off[i] = run(off, key, klen, seq, n);
		printf("round %d: on %.1f ns, off %.1f ns\n", i + 1, t_on[i],
		    t_off[i]);
	}
	qsort(t_on, (size_t)rounds, sizeof(*t_on), probe_cmp_d);
	qsort(t_off, (size_t)rounds, sizeof(*t_off), probe_cmp_d);
	printf("ancost gets=%ld rounds=%d keys=%ld on_median_ns=%.1f "
	    "off_median_ns=%.1f added_ns=%.1f\n", n, rounds, keys,
	    t_on[rounds / 2], t_off[rounds / 2],
	    t_on[rounds / 2] - t_off[rounds / 2]);
	rc = 0;
out:
	if (on != NULL)
		shmt_close(on);
	if (off != NULL)
		shmt_close(off);
	shmt_unlink(on_name);
	shmt_unlink(off_name);
	free(cdf);
	free(seq);
	free(key);
	free(klen);
	free(t_on);
	free(t_off);
	return rc;
}
