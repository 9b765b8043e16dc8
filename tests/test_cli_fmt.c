/* SPDX-License-Identifier: MIT */
/*
 * The CLI's numbers for people, at their edges: unit changes, rounding
 * that carries into the next unit, zero, and the largest values; and the
 * byte helpers of the dictionary commands: escaping, base64, hex keys and
 * TTLs, at their edges too (empty, every byte value, padding, overflow).
 */
#include "testutil.h"

#include "bytes.h"
#include "fmt.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
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

static void
test_escape(void **state)
{
	unsigned char all[256];
	char *e;

	e = shmtc_escape("", 0);
	assert_string_equal(e, "");
	free(e);
	e = shmtc_escape("a\\b\0\x7f \xff~", 8);
	assert_string_equal(e, "a\\\\b\\x00\\x7f \\xff~");
	free(e);
	/* Every byte: 95 printable ones stay, the backslash doubles, the
	 * 161 others take four characters. */
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	e = shmtc_escape(all, sizeof(all));
	assert_int_equal(strlen(e), 94 + 2 + 161 * 4);
	free(e);
}

static void
test_base64(void **state)
{
	static const struct { const char *in; size_t n; const char *want; }
	    cases[] = {
		{ "", 0, "" }, { "f", 1, "Zg==" }, { "fo", 2, "Zm8=" },
		{ "foo", 3, "Zm9v" }, { "foob", 4, "Zm9vYg==" },
		{ "fooba", 5, "Zm9vYmE=" }, { "foobar", 6, "Zm9vYmFy" },
		{ "\0\xff\xfe", 3, "AP/+" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *b = shmtc_base64(cases[i].in, cases[i].n);

		assert_string_equal(b, cases[i].want);
		free(b);
	}
}

static void
test_hex(void **state)
{
	unsigned char out[4];
	size_t n = 99;

	assert_int_equal(shmtc_hex_decode("", out, sizeof(out), &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(shmtc_hex_decode("00fFa9", out, sizeof(out), &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(out, "\x00\xff\xa9", 3);
	assert_int_equal(shmtc_hex_decode("0011223344", out, 4, &n), -E2BIG);
	assert_int_equal(shmtc_hex_decode("00112233", out, 4, &n), 0);
	assert_int_equal(shmtc_hex_decode("abc", out, 4, &n), -EINVAL);
	assert_int_equal(shmtc_hex_decode("0g", out, 4, &n), -EINVAL);
	assert_int_equal(shmtc_hex_decode(" 0", out, 4, &n), -EINVAL);
}

static void
test_ttl(void **state)
{
	static const struct { const char *s; int rc; uint64_t ms; } cases[] = {
		{ "0", 0, 0 }, { "500ms", 0, 500 }, { "10m", 0, 600000 },
		{ "1.5s", 0, 1500 }, { "2", 0, 2000 }, { "24h", 0, 86400000 },
		{ "1d", 0, 86400000 }, { "1000us", 0, 1 }, { "1min", 0, 60000 },
		{ "3000000ns", 0, 3 }, { "0.001s", 0, 1 },
		{ "1.5d", 0, 129600000 }, { "1.999999999d", -EINVAL, 0 },
		{ "1us", -EINVAL, 0 }, { "1.5ms", -EINVAL, 0 },
		{ "0.0001s", -EINVAL, 0 }, { "1.", -EINVAL, 0 },
		{ ".5s", -EINVAL, 0 }, { "1x", -EINVAL, 0 }, { "", -EINVAL, 0 },
		{ "-1s", -EINVAL, 0 }, { "1.0000000001s", -EINVAL, 0 },
		{ "18446744073709551615ms", -ERANGE, 0 },
		{ "99999999999999999999", -ERANGE, 0 },
		{ "213504d", -ERANGE, 0 }, { "213503d", 0, 18446659200000ULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ms = 7;
		int rc = shmtc_parse_ms(cases[i].s, &ms);

		if (rc != cases[i].rc || (rc == 0 && ms != cases[i].ms))
			fail_msg("'%s': %d %llu, want %d %llu", cases[i].s, rc,
			    (unsigned long long)ms, cases[i].rc,
			    (unsigned long long)cases[i].ms);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_relative),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_percent),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_ttl),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
