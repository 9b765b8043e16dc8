/* SPDX-License-Identifier: MIT */
/*
 * The CLI's numbers for people, at their edges: unit changes, rounding
 * that carries into the next unit, zero, and the largest values.
 */
#include "testutil.h"

#include "fmt.h"

#include <stdint.h>
#include <string.h>

#define S 1000000000ULL

static void
test_durations(void **state)
{
	static const struct { uint64_t ns; const char *want; } cases[] = {
		{ 0, "0s" }, { 1, "1ns" }, { 999, "999ns" }, { 1000, "1us" },
		{ 1500, "1.5us" }, { 12345, "12.3us" }, { 123456, "123us" },
		{ 999499, "999us" }, { 999500, "1ms" }, { 350000000, "350ms" },
		{ 999499999, "999ms" }, { 999500000, "1s" }, { 1200000000, "1.2s" },
		{ 59 * S, "59s" }, { 60 * S, "1m" }, { 125 * S, "2m05s" },
		{ 3599 * S, "59m59s" }, { 3600 * S, "1h" },
		{ 3600 * S + 60 * S * 12, "1h12m" }, { 86400 * S, "1d" },
		{ 86400 * S * 2 + 3 * 3600 * S, "2d03h" },
		{ UINT64_MAX, "213503d23h" },
	};
	char buf[SHMTC_FMT_MAX];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_string_equal(shmtc_fmt_dur(buf, sizeof(buf),
		    cases[i].ns), cases[i].want);
}

static void
test_relative(void **state)
{
	char buf[SHMTC_FMT_MAX];
	uint64_t now = 1000 * S;

	assert_string_equal(shmtc_fmt_rel(buf, sizeof(buf), now, now), "now");
	assert_string_equal(shmtc_fmt_rel(buf, sizeof(buf), now + 350000000,
	    now), "in 350ms");
	assert_string_equal(shmtc_fmt_rel(buf, sizeof(buf), now - 1200000000,
	    now), "1.2s ago");
	assert_string_equal(shmtc_fmt_rel(buf, sizeof(buf), 0, UINT64_MAX),
	    "213503d23h ago");
}

static void
test_bytes(void **state)
{
	static const struct { uint64_t b; const char *want; } cases[] = {
		{ 0, "0 B" }, { 1023, "1023 B" }, { 1024, "1 KiB" },
		{ 1536, "1.5 KiB" }, { 102400, "100 KiB" },
		{ 16ULL << 20, "16 MiB" }, { (3ULL << 30) / 2, "1.5 GiB" },
		{ 5ULL << 40, "5 TiB" }, { 4096ULL << 40, "4096 TiB" },
	};
	char buf[SHMTC_FMT_MAX];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_string_equal(shmtc_fmt_bytes(buf, sizeof(buf),
		    cases[i].b), cases[i].want);
}

static void
test_percent(void **state)
{
	char buf[8];

	assert_string_equal(shmtc_fmt_pct(buf, sizeof(buf), 1, 0), "-");
	assert_string_equal(shmtc_fmt_pct(buf, sizeof(buf), 0, 7), "0%");
	assert_string_equal(shmtc_fmt_pct(buf, sizeof(buf), 1, 8), "13%");
	assert_string_equal(shmtc_fmt_pct(buf, sizeof(buf), 8, 8), "100%");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_relative),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_percent),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
