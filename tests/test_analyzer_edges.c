/* SPDX-License-Identifier: MIT */
/*
 * The analyzer at every sub-window edge and one nanosecond either side,
 * with windows that the sub-window count does not divide (60 s and 10 s in
 * 7, 11 ns in 3) and one it does, against the exact oracle of
 * test_analyzer_util.c: the covered span must hold the exact window
 * [now - W, now] (its slop is extra time, never missing time), its total
 * must be the span's requests, total_window at most the exact window's, and
 * a certified answer must list every key over the threshold of the exact
 * window.
 *
 * Two families of edges are probed, since either could be where the
 * sub-windows turn: multiples of W / n rounded down, and the exact tiling
 * floor(i W / n); for each probe p also p + W and one nanosecond either
 * side, where a request leaves the window.  At every probe a burst of a hot
 * key arrives (about a fifth of the window's requests in all) after a query,
 * over steady cold traffic; so a query at p + W has that burst exactly at
 * the start of its exact window.
 */
#include "test_analyzer_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define ED_BURST 3

static uint64_t ed_seed;

static const struct ta_conf ed_confs[] = {
	{ "60s/7/10%/1MiB", 1ULL << 20, 60 * TA_SEC, 7, 100000 },
	{ "10s/7/10%/256KiB", 256ULL << 10, 10 * TA_SEC, 7, 100000 },
	{ "11ns/3/10%/256KiB", 256ULL << 10, 11, 3, 100000 },
	{ "60s/12/10%/256KiB", 256ULL << 10, 60 * TA_SEC, 12, 100000 },
};

/* The probes over [FROM, TO], sorted, without repeats; returns how many. */
static size_t
ed_probes(uint64_t W, uint32_t n, uint64_t from, uint64_t to, uint64_t **out)
{
	uint64_t w = W / n, k0 = from / w, cap, np = 0, *p;
	uint64_t j0 = (uint64_t)((unsigned __int128)from * n / W);
	size_t m = 0;

	cap = 2 * 3 * 4 * ((to - from) / w + 3);
	p = malloc(cap * sizeof(*p));
	assert_non_null(p);
	for (uint64_t k = k0; k * w <= to + w; k++) {
		for (int e = 0; e < 2; e++) {
			uint64_t edge = e == 0 ? k * w :
			    (uint64_t)((unsigned __int128)(j0 + k - k0) * W / n);

			for (int a = -1; a <= 1; a++)
				for (int b = 0; b < 4; b++) {
					uint64_t x = edge + (uint64_t)a +
					    (b == 0 ? 0 : W + (uint64_t)b - 2);

					if (x >= from && x <= to)
						p[np++] = x;
				}
		}
	}
	assert_true(np <= cap);
	qsort(p, np, sizeof(*p), ta_cmp_u64);
	for (uint64_t i = 0; i < np; i++)
		if (m == 0 || p[i] != p[m - 1])
			p[m++] = p[i];
	*out = p;
	return m;
}

static void
ed_run(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix cold = { 0, { 0 }, { 0 }, 0, TA_COLD, 1000 };
	uint64_t W = c->window_ns, t0, from, to, *p, per;
	struct ta_run r;
	size_t np;

	ta_open(&r, c, "edges", TA_SEC, seed);
	t0 = r.clk.now = TA_SEC * 1000 + tu_rand(&r.rs) % (1000 * TA_SEC);
	from = t0 + W;
	to = t0 + 8 * W;
	ta_set(&r, TA_HOT);
	np = ed_probes(W, c->subw, from, to, &p);
	/* Cold requests: four times the hot bursts over any window. */
	per = 4 * ED_BURST;
	ta_traffic(&r, t0, from, np * per / 3, &cold);
	for (size_t i = 0; i < np; i++) {
		if (p[i] > r.clk.now)
			ta_traffic(&r, r.clk.now, p[i], per, &cold);
		ta_advance(&r, p[i]);
		ta_query(&r);
		for (int b = 0; b < ED_BURST; b++)
			ta_get(&r, p[i], TA_HOT);
	}
	ta_advance(&r, to + 1);
	ta_query(&r);
	printf("# %s: %zu probes from %" PRIu64 "\n", c->name, np, t0);
	/* Not vacuous: the hot key was over the threshold of the exact
	 * window in certified answers, so missing it would have failed. */
	assert_true(r.must_report_win > 0);
	assert_true(r.certified > np / 2);
	free(p);
	ta_close(&r);
}

static void
test_edges(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof(ed_confs) / sizeof(ed_confs[0]); k++)
		ed_run(&ed_confs[k], ed_seed + k);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_edges),
	};

	ed_seed = tu_seed("test_analyzer_edges");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
