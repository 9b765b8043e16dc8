/* SPDX-License-Identifier: MIT */
/*
 * The hot-key analyzer against an exact oracle, on the seed's scenario
 * families: hot keys present, all keys cold, only top queries (traffic
 * stops, the queries go on), and random phases.  Every family runs on four
 * configurations (10% and 5%, 12 and 6 sub-windows, 1 MiB and 256 KiB).
 * At both sides of every sub-window edge and at a random moment in every
 * sub-window, shmt_top_keys must list every key over the threshold of the
 * covered span (and of the exact window when certified), bound each listed
 * key's true count, count the span's requests exactly, and keep its error
 * within total / (probe + 1); under steady traffic it must be certified.
 */
#include "test_analyzer_util.h"

#include <inttypes.h>
#include <stdio.h>

/* Requests per sub-window in the normal build. */
#define SD_RATE 1200.0

static uint64_t sd_seed;

static uint64_t
sd_rate(void)
{
	double n = SD_RATE * ta_scale();

	return n < 200 ? 200 : (uint64_t)n;
}

static uint64_t
sd_t0(struct ta_run *probe_rs)
{
	/* Anywhere in the first 100 days of a monotonic clock. */
	return TA_SEC + tu_rand(&probe_rs->rs) % (100ULL * 86400 * TA_SEC);
}

static void
sd_hot(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix m = { 3, { 0, 1, 2 }, { 0.25, 0.13, 0.105 }, 0,
	    TA_COLD, 1000 };
	struct ta_run r;
	uint64_t t;

	ta_open(&r, c, "hot keys", TA_SEC, seed);
	t = r.clk.now = sd_t0(&r);
	r.must_certify = 1;
	ta_set(&r, 0);
	ta_set(&r, 1);
	for (uint32_t s = 0; s < 3 * c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, sd_rate(), &m);
	ta_advance(&r, t);
	assert_true(r.must_report > 3 * c->subw);
	ta_close(&r);
}

static void
sd_cold(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix m = { 0, { 0 }, { 0 }, 0, TA_COLD, 300 };
	struct ta_run r;
	uint64_t t;

	ta_open(&r, c, "all cold", TA_SEC, seed);
	t = r.clk.now = sd_t0(&r);
	r.must_certify = 1;
	for (uint32_t s = 0; s < 3 * c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, sd_rate(), &m);
	ta_advance(&r, t);
	ta_close(&r);
}

static void
sd_top_only(const struct ta_conf *c, uint64_t seed)
{
	struct ta_mix m = { 2, { 3, 4 }, { 0.3, 0.12 }, 0, TA_COLD, 500 };
	struct ta_run r;
	uint64_t t;

	ta_open(&r, c, "only top queries", TA_SEC, seed);
	t = r.clk.now = sd_t0(&r);
	for (uint32_t s = 0; s < c->subw; s++, t += r.w)
		ta_traffic(&r, t, t + r.w, sd_rate(), &m);
	/* No more requests: the queries see the window drain to nothing. */
	ta_advance(&r, t + 2 * c->window_ns);
	ta_query(&r);
	assert_int_equal(r.reported > 0, 1);
	ta_close(&r);
}

static void
sd_random(const struct ta_conf *c, uint64_t seed)
{
	struct ta_run r;
	uint64_t t, end;

	ta_open(&r, c, "random phases", TA_SEC, seed);
	t = r.clk.now = sd_t0(&r);
	end = t + 5 * c->window_ns;
	while (t < end) {
		uint32_t len = 1 + (uint32_t)(tu_rand(&r.rs) % (2 * c->subw));
		uint32_t kind = (uint32_t)(tu_rand(&r.rs) % 4);
		double rate = (double)sd_rate() *
		    (0.1 + (double)(tu_rand(&r.rs) % 190) / 100.0);
		struct ta_mix m = { 0, { 0 }, { 0 }, 0, TA_COLD,
		    50 + (uint32_t)(tu_rand(&r.rs) % 2000) };

		if (kind == 0 || kind == 3) {
			double left = 0.9;

			m.nhot = 1 + (uint32_t)(tu_rand(&r.rs) % 4);
			for (uint32_t k = 0; k < m.nhot; k++) {
				m.hot[k] = (uint32_t)(tu_rand(&r.rs) % 16);
				m.share[k] = left * (0.02 +
				    (double)(tu_rand(&r.rs) % 48) / 100.0);
				left -= m.share[k];
			}
		}
		if (kind == 3)
			m.noise = 0.5;
		if (kind == 2)
			rate = 0;          /* silence */
		for (uint32_t s = 0; s < len; s++, t += r.w)
			ta_traffic(&r, t, t + r.w, (uint64_t)rate, &m);
	}
	ta_advance(&r, t);
	ta_close(&r);
}

#define SD_EVERY_CONF(fn)                                            \
static void                                                          \
test_##fn(void **state)                                              \
{                                                                    \
	(void)state;                                                 \
	for (size_t k = 0; k < ta_nconfs; k++)                       \
		sd_##fn(&ta_confs[k], sd_seed + k);                  \
}
SD_EVERY_CONF(hot)
SD_EVERY_CONF(cold)
SD_EVERY_CONF(top_only)
SD_EVERY_CONF(random)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hot),
		cmocka_unit_test(test_cold),
		cmocka_unit_test(test_top_only),
		cmocka_unit_test(test_random),
	};

	sd_seed = tu_seed("test_analyzer_seed");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
