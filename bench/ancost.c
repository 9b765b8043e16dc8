/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-ancost: what the hot-key analyzer adds to a get, in thread
 * CPU time (time this thread ran, so a loaded machine's waits do not
 * count, though its cache and core sharing still do).
 *
 * One segment with the default analyzer holds KEYS keys, and one Zipf(0.99)
 * sequence of gets runs on it in blocks of BLOCK gets, each block twice:
 * with the analyzer on and with it set aside (the handle's analyzer set
 * aside, so that a get takes the path of a segment that has none), in the
 * order on, off, off, on, ... so that each side runs first in half the
 * pairs (the second run of a block finds its keys warmer: see added()).
 * Both sides read the same dictionary, in the same memory, with the same
 * keys, a few milliseconds apart: the difference of a pair is the
 * analyzer's, not the placement's or the minute's.  A round is GETS gets
 * of each side; each round prints its medians, and the last line the
 * medians over every pair of blocks of every round (added_ns: the pairs'
 * differences, the order's part cancelled, see added()), over the rounds,
 * and over the quiet pairs alone (added_quiet_ns: those after which the
 * core's speed probe ran within PROBE_QUIET of the run's fastest, probe.h:
 * the analyzer's cost on a core of its own; the analyzer is instructions,
 * which a busy neighbour on the core's other hyperthread slows), and the
 * analyzer's memory (an_bytes, fixed at creation: the default's, whatever
 * KEYS).
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
#include "analyzer.h"      /* its memory */
#include "segment.h"       /* the handle's analyzer, set aside */

/* Gets per block: a millisecond or two, so that a pair's two blocks see
 * the same machine, and the clock's two reads are a thousandth of a
 * block; and steps of the core's speed probe after each pair (probe.h). */
#define BLOCK 8192
#define ALU_STEPS 2000

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
	return (probe_cpu_ns() - t0) / (double)n;
}

static double
median(double *a, long n)
{
	if (n == 0)
		return 0;
	qsort(a, (size_t)n, sizeof(*a), probe_cmp_d);
	return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

/*
 * The analyzer's cost from the pairs I in [FROM, TO) with SEL[i] set (all
 * when SEL is NULL): the side that runs second in a pair is faster (on
 * this VM by about 35 ns a get: it finds the block's keys warmer), so the
 * differences of pairs run on first and of pairs run off first form two
 * groups, each about that far from the cost; the mean of the two groups'
 * medians is the cost, with the order's part cancelled (the median of all
 * the differences would fall between the groups, anywhere).  TMP holds
 * TO - FROM values; *USED gets the number of pairs taken.
 */
static double
added(const double *d, const char *onfirst, const char *sel, long from,
    long to, double *tmp, long *used)
{
	double m[2];

	*used = 0;
	for (int f = 0; f < 2; f++) {
		long k = 0;

		for (long i = from; i < to; i++)
			if (onfirst[i] == f && (sel == NULL || sel[i]))
				tmp[k++] = d[i];
		if (k == 0)
			return NAN;
		m[f] = median(tmp, k);
		*used += k;
	}
	return (m[0] + m[1]) / 2;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 9;
	long keys = argc > 3 ? atol(argv[3]) : 100000;
	char name[64] = "", (*key)[16];
	double *cdf, sum = 0, *t_on, *t_off, *t_d, *p_on, *p_off, *p_d, *tmp;
	double *p_alu, alu_min, a_all, a_quiet;
	char *p_first, *p_quiet;
	long nq = 0, used;
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
	p_alu = calloc((size_t)cap, sizeof(*p_alu));
	p_first = calloc((size_t)cap, 1);
	p_quiet = calloc((size_t)cap, 1);
	if (!cdf || !seq || !key || !klen || !t_on || !t_off || !t_d ||
	    !p_on || !p_off || !p_d || !tmp || !p_alu || !p_first || !p_quiet)
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

			/* on, off, off, on, ...: the order alternates (see
			 * added()) */
			p_first[np] = (b + i) % 2 == 0;
			if (p_first[np]) {
				x = run(h, an, key, klen, seq + o, m);
				y = run(h, NULL, key, klen, seq + o, m);
			} else {
				y = run(h, NULL, key, klen, seq + o, m);
				x = run(h, an, key, klen, seq + o, m);
			}
			p_on[np] = x;
			p_off[np] = y;
			p_alu[np] = probe_alu_ns(ALU_STEPS);
			p_d[np++] = x - y;
		}
		memcpy(tmp, p_on + first, (size_t)(np - first) * sizeof(*tmp));
		t_on[i] = median(tmp, np - first);
		memcpy(tmp, p_off + first, (size_t)(np - first) * sizeof(*tmp));
		t_off[i] = median(tmp, np - first);
		t_d[i] = added(p_d, p_first, NULL, first, np, tmp, &used);
		printf("round %d: on %.1f ns, off %.1f ns, added %.1f ns "
		    "(medians of %ld pairs of %d gets)\n", i + 1, t_on[i],
		    t_off[i], t_d[i], np - first, BLOCK);
	}
	h->an = an;
	/* The quiet pairs: those whose speed probe ran within PROBE_QUIET of
	 * the run's fastest (probe.h). */
	alu_min = p_alu[0];
	for (long i = 1; i < np; i++)
		if (p_alu[i] < alu_min)
			alu_min = p_alu[i];
	for (long i = 0; i < np; i++)
		p_quiet[i] = p_alu[i] <= alu_min * PROBE_QUIET;
	a_all = added(p_d, p_first, NULL, 0, np, tmp, &used);
	a_quiet = added(p_d, p_first, p_quiet, 0, np, tmp, &nq);
	printf("ancost gets=%ld rounds=%d keys=%ld block=%d pairs=%ld "
	    "on_median_ns=%.1f off_median_ns=%.1f added_ns=%.1f "
	    "rounds_added_ns=%.1f quiet=%ld added_quiet_ns=%.1f "
	    "alu_min_ns=%.2f an_bytes=%llu\n", n, rounds, keys, BLOCK, np,
	    median(p_on, np), median(p_off, np), a_all, median(t_d, rounds),
	    nq, a_quiet, alu_min, (unsigned long long)an->bytes);
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
	free(p_alu);
	free(p_first);
	free(p_quiet);
	free(t_d);
	free(cdf);
	free(seq);
	free(key);
	free(klen);
	free(t_on);
	free(t_off);
	return rc;
}
