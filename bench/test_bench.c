/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bench's own arithmetic: the log-linear histogram's
 * quantiles against an exact sort, and the Zipf alias table's frequencies
 * against the distribution it claims.
 */
#include "hist.h"
#include "zipf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Every value lands in a bucket whose range holds it, and buckets are in
 * order, from 0 up to the largest 64-bit value. */
static void
test_hist_buckets(void **state)
{
	uint64_t edges[] = { 0, 1, 63, 64, 65, 127, 128, 1000, 1ULL << 40,
		(1ULL << 63) - 1, 1ULL << 63, UINT64_MAX };

	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
		unsigned b = hist_index(edges[i]);

		assert_true(b < HIST_NBUCKETS);
		assert_true(edges[i] <= hist_bucket_top(b));
		if (b > 0)
			assert_true(edges[i] > hist_bucket_top(b - 1));
	}
	for (unsigned b = 1; b < HIST_NBUCKETS; b++)
		assert_true(hist_bucket_top(b) > hist_bucket_top(b - 1));
	assert_int_equal(hist_bucket_top(HIST_NBUCKETS - 1), UINT64_MAX);
}

/* Quantiles of random log-spread values are within one sub-bucket (1/32)
 * above the exact quantile and never below it. */
static void
test_hist_quantiles(void **state)
{
	uint64_t seed = tu_seed("bench_hist_quantiles"), s = seed;
	enum { N = 100000 };
	uint64_t *v = malloc(sizeof(*v) * N);
	struct hist *h = calloc(1, sizeof(*h));
	double qs[] = { 0.5, 0.9, 0.99, 0.999, 1.0 };

	assert_non_null(v);
	assert_non_null(h);
	for (int i = 0; i < N; i++) {
		v[i] = tu_rand(&s) >> (tu_rand(&s) % 60);
		hist_record(h, v[i]);
	}
	qsort(v, N, sizeof(*v), cmp_u64);
	assert_int_equal(h->count, N);
	assert_int_equal(h->max, v[N - 1]);
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		uint64_t exact = v[(size_t)(qs[i] * N + 0.5) - 1];
		uint64_t got = hist_quantile(h, qs[i]);

		assert_true(got >= exact);
		assert_true((double)got <= (double)exact * (1.0 + 1.0 / 32) + 1);
	}
	free(v);
	free(h);
}

/* Merging two histograms is the histogram of both inputs. */
static void
test_hist_merge(void **state)
{
	struct hist *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct hist *all = calloc(1, sizeof(*all));
	uint64_t s = tu_seed("bench_hist_merge");

	assert_true(a && b && all);
	for (int i = 0; i < 1000; i++) {
		uint64_t x = tu_rand(&s) % 100000;

		hist_record(i % 3 ? a : b, x);
		hist_record(all, x);
	}
	hist_merge(a, b);
	assert_memory_equal(a, all, sizeof(*a));
	free(a);
	free(b);
	free(all);
}

/* The alias table draws rank i with probability (1/(i+1)^s) / H: the
 * first ranks' frequencies over 4 million draws are within 5 standard
 * deviations, and the tail's total is right too. */
static void
test_zipf_frequencies(void **state)
{
	uint64_t seed = tu_seed("bench_zipf"), r = seed;
	enum { N = 100000, DRAWS = 4000000, TOP = 8 };
	struct zipf z;
	uint64_t count[TOP + 1] = { 0 };
	double h = 0;

	assert_int_equal(zipf_init(&z, N, 0.99), 0);
	for (uint32_t i = 0; i < N; i++)
		h += pow(i + 1.0, -0.99);
	for (int i = 0; i < DRAWS; i++) {
		uint32_t k = zipf_draw(&z, bench_rand(&r));

		assert_true(k < N);
		count[k < TOP ? k : TOP]++;
	}
	for (int i = 0; i <= TOP; i++) {
		double p = 0, mean, sd;

		if (i < TOP) {
			p = pow(i + 1.0, -0.99) / h;
		} else {
			p = 1;
			for (int j = 0; j < TOP; j++)
				p -= pow(j + 1.0, -0.99) / h;
		}
		mean = p * DRAWS;
		sd = sqrt(DRAWS * p * (1 - p));
		assert_true(fabs((double)count[i] - mean) < 5 * sd);
	}
	zipf_free(&z);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hist_buckets),
		cmocka_unit_test(test_hist_quantiles),
		cmocka_unit_test(test_hist_merge),
		cmocka_unit_test(test_zipf_frequencies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
