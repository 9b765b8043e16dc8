/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-ancost: what the hot-key analyzer adds to a get, in thread
 * CPU time (time this thread ran, so a loaded machine's waits do not
 * count, though its cache and core sharing still do).
 *
 * One segment with the default analyzer holds KEYS keys, and one Zipf(0.99)
 * sequence of gets runs on it in blocks of BLOCK gets, the analyzer on for
 * one block and off for the next (the handle's analyzer set aside, so that
 * a get takes the path of a segment that has none), in the order on, off,
 * off, on, ... so that neither side always runs first.  Both sides read
 * the same dictionary, in the same memory, with the same keys, a few
 * milliseconds apart: the difference of a pair is the analyzer's, not the
 * placement's or the minute's.  A round is GETS gets of each side; each
 * round prints its medians, and the last line the medians over every pair
 * of blocks of every round (added_ns: the median of the pairs'
 * differences) and over the rounds.
 *
 *   shmthrottle-ancost [GETS [ROUNDS [KEYS]]]   (default 2000000 9 100000)
 */
#include "shmthrottle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"
#include "segment.h"       /* the handle's analyzer, set aside */

/* Gets per block: a few milliseconds, so that a pair's two blocks see the
 * same machine, and the clock's two reads are a thousandth of a block. */
#define BLOCK 16384

static shmt_t *
make(const char *name, long keys)
{
	shmt_config_t cfg;
	shmt_t *h;
	char k[32];

	shmt_config_init(&cfg);
	/* Room for every key (a 64-byte block each, half as much again),
	 * so that gets find them as the bench's dict-get does. */
	while (cfg.dict_bytes < (uint64_t)keys * 96)
		cfg.dict_bytes <<= 1;
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

/* Thread CPU ns per get of SEQ[0..N) on H, its analyzer on or set aside. */
static double
run(shmt_t *h, struct shmt_an *an, char (*key)[16], const int *klen,
    const int *seq, long n)
{
	char v[16];
	size_t vl;
	double t0;

	h->an = an;
	t0 = probe_cpu_ns();
	for (long j = 0; j < n; j++)
		(void)shmt_get(h, key[seq[j]], (size_t)klen[seq[j]], v, sizeof(v),
		    &vl);
	t0 = (probe_cpu_ns() - t0) / (double)n;
	return t0;
}

static double
median(double *a, long n)
{
	qsort(a, (size_t)n, sizeof(*a), probe_cmp_d);
	return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 9;
	long keys = argc > 3 ? atol(argv[3]) : 100000;
	char name[64] = "", (*key)[16];
	double *cdf, sum = 0, *t_on, *t_off, *t_d, *p_on, *p_off, *p_d, *tmp;
	int *seq, *klen, rc = 1;
	uint64_t r = 88172645463325252ULL;
	long blocks, np = 0, cap;
	struct shmt_an *an;
	shmt_t *h = NULL;

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
	t_d = calloc((size_t)rounds, sizeof(*t_d));
	cap = (n + BLOCK - 1) / BLOCK * rounds;
	p_on = calloc((size_t)cap, sizeof(*p_on));
	p_off = calloc((size_t)cap, sizeof(*p_off));
	p_d = calloc((size_t)cap, sizeof(*p_d));
	tmp = calloc((size_t)cap, sizeof(*tmp));
	if (!cdf || !seq || !key || !klen || !t_on || !t_off || !t_d ||
	    !p_on || !p_off || !p_d || !tmp)
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
	snprintf(name, sizeof(name), "/shmt-ancost-%d", (int)getpid());
	h = make(name, keys);
	if (h == NULL || h->an == NULL) {
		fprintf(stderr, "shmthrottle-ancost: cannot create the segment\n");
		goto out;
	}
	an = h->an;
	blocks = (n + BLOCK - 1) / BLOCK;
	run(h, an, key, klen, seq, n / 4 > BLOCK ? n / 4 : BLOCK); /* warm up */
	run(h, NULL, key, klen, seq, n / 4 > BLOCK ? n / 4 : BLOCK);
	for (int i = 0; i < rounds; i++) {
		long first = np;

		for (long b = 0; b < blocks; b++) {
			long o = b * BLOCK, m = n - o < BLOCK ? n - o : BLOCK;
			double x, y;

			/* on, off, off, on, ...: the pair's order alternates */
			if ((b + i) % 2 == 0) {
				x = run(h, an, key, klen, seq + o, m);
				y = run(h, NULL, key, klen, seq + o, m);
			} else {
				y = run(h, NULL, key, klen, seq + o, m);
				x = run(h, an, key, klen, seq + o, m);
			}
			p_on[np] = x;
			p_off[np] = y;
			p_d[np++] = x - y;
		}
		memcpy(tmp, p_on + first, (size_t)(np - first) * sizeof(*tmp));
		t_on[i] = median(tmp, np - first);
		memcpy(tmp, p_off + first, (size_t)(np - first) * sizeof(*tmp));
		t_off[i] = median(tmp, np - first);
		memcpy(tmp, p_d + first, (size_t)(np - first) * sizeof(*tmp));
		t_d[i] = median(tmp, np - first);
		printf("round %d: on %.1f ns, off %.1f ns, added %.1f ns "
		    "(medians of %ld pairs of %d gets)\n", i + 1, t_on[i],
		    t_off[i], t_d[i], np - first, BLOCK);
	}
	h->an = an;
	printf("ancost gets=%ld rounds=%d keys=%ld block=%d pairs=%ld "
	    "on_median_ns=%.1f off_median_ns=%.1f added_ns=%.1f "
	    "rounds_added_ns=%.1f\n", n, rounds, keys, BLOCK, np,
	    median(p_on, np), median(p_off, np), median(p_d, np),
	    median(t_d, rounds));
	rc = 0;
out:
	if (h != NULL)
		shmt_close(h);
	if (name[0] != '\0')
		shmt_unlink(name);
	free(p_on);
	free(p_off);
	free(p_d);
	free(tmp);
	free(t_d);
	free(cdf);
	free(seq);
	free(key);
	free(klen);
	free(t_on);
	free(t_off);
	return rc;
}
