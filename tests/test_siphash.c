/* SPDX-License-Identifier: MIT */
/*
 * The keyed hash of lib/hash.h, against implementations that are not ours:
 * - SipHash-2-4 (the same code with two and four rounds) against
 *   libsodium's crypto_shorthash_siphash24 (64 bits) and
 *   crypto_shorthash_siphashx24 (128 bits), bit for bit, for every length
 *   0..130 under fixed keys, and the specification's own example;
 * - SipHash-1-3, the library's hash, against CPython's: CPython 3.11 and
 *   later hash bytes with SipHash-1-3 (sys.hash_info.algorithm
 *   'siphash13'), and with PYTHONHASHSEED=0 its key is 16 zero bytes.  The
 *   values below are hash(bytes(range(n))) & (2**64 - 1) as
 *   "PYTHONHASHSEED=0 /usr/bin/python3" printed them (CPython 3.11.2;
 *   n = 0 is left out: CPython answers 0 for empty bytes without hashing);
 * - and the library's 64- and 128-bit hashes are these functions: the
 *   first word of the 128-bit one is not the 64-bit one (the wide variant
 *   starts and ends differently), so the two are checked separately.
 */
#include "testutil.h"

#include "hash.h"

#include <sodium/crypto_shorthash_siphash24.h>

#include <string.h>

static const struct {
	size_t n;
	uint64_t h;
} cpython13[] = {
	{ 1, 0x68a914128e01e473ULL },
	{ 2, 0x010bac45c41e3669ULL },
	{ 3, 0x4d4c9a4a8ef6e0adULL },
	{ 4, 0x7cc43f98813e4dbdULL },
	{ 5, 0x5abe2169dff36275ULL },
	{ 6, 0xe3c25f87624f1cdbULL },
	{ 7, 0x2f098ab0c751325aULL },
	{ 8, 0xead411e67ebe2eeaULL },
	{ 9, 0x75927f9d95124362ULL },
	{ 10, 0xaf9f77a65ab51a1dULL },
	{ 11, 0xfe64ce8b6617fcffULL },
	{ 12, 0xa6baf4fb0f9fe1c2ULL },
	{ 13, 0xa0cf3211850f8e0dULL },
	{ 14, 0x7f86049379fbfe67ULL },
	{ 15, 0xf30eb725bb91c9eaULL },
	{ 16, 0x8972188433a5c5b7ULL },
	{ 17, 0x4883c49a2c009c1dULL },
	{ 23, 0x37332b1389daa4ffULL },
	{ 24, 0x31185a47af932f3aULL },
	{ 25, 0xebf352e82ae23e2fULL },
	{ 31, 0x169739443111d49bULL },
	{ 32, 0x31ef8061c910629bULL },
	{ 33, 0x7fb71d24dfa4c9f6ULL },
	{ 63, 0x385d3e39e5f37359ULL },
	{ 64, 0x75e05fd5bbc870c6ULL },
};

static void
key_fill(unsigned char key[16], uint32_t seed)
{
	uint32_t x = seed * 2654435761U | 1;

	for (int i = 0; i < 16; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		key[i] = (unsigned char)x;
	}
}

static void
test_siphash24_is_libsodium(void **state)
{
	unsigned char key[16], msg[130], o8[8], o16[16];
	uint64_t out[2];
	int checked = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)(i * 37 + 11);
	for (uint32_t k = 0; k < 8; k++) {
		key_fill(key, k);
		for (size_t n = 0; n <= sizeof(msg); n++) {
			crypto_shorthash_siphash24(o8, msg, n, key);
			shmt__siphash(2, 4, 0, key, msg, n, out);
			assert_int_equal(out[0], shmt__le64(o8));
			crypto_shorthash_siphashx24(o16, msg, n, key);
			shmt__siphash(2, 4, 1, key, msg, n, out);
			assert_int_equal(out[0], shmt__le64(o16));
			assert_int_equal(out[1], shmt__le64(o16 + 8));
			checked += 2;
		}
	}
	assert_int_equal(checked, 8 * 131 * 2);
}

/* The example of the SipHash paper (Aumasson and Bernstein, 2012, appendix
 * A): key 00 01 .. 0f, message 00 01 .. 0e, SipHash-2-4 a129ca6149be45e5. */
static void
test_siphash24_paper(void **state)
{
	unsigned char key[16], msg[15];
	uint64_t out[2];

	(void)state;
	for (int i = 0; i < 16; i++)
		key[i] = (unsigned char)i;
	for (int i = 0; i < 15; i++)
		msg[i] = (unsigned char)i;
	shmt__siphash(2, 4, 0, key, msg, sizeof(msg), out);
	assert_int_equal(out[0], 0xa129ca6149be45e5ULL);
}

static void
test_siphash13_is_cpython(void **state)
{
	struct shmt_hkey zero;
	unsigned char msg[64];

	(void)state;
	memset(&zero, 0, sizeof(zero));
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)i;
	for (size_t i = 0; i < sizeof(cpython13) / sizeof(cpython13[0]); i++) {
		uint64_t h = shmt__hash64(&zero, msg, cpython13[i].n);

		if (h != cpython13[i].h)
			fail_msg("SipHash-1-3 of %zu bytes: %#llx, CPython %#llx",
			    cpython13[i].n, (unsigned long long)h,
			    (unsigned long long)cpython13[i].h);
	}
}

/* The library's hashes are SipHash-1-3: keyed (another key, another
 * value), and the 128-bit one is the wide variant, not two 64-bit ones. */
static void
test_library_hashes(void **state)
{
	struct shmt_hkey a, b;
	unsigned char msg[40];
	uint64_t w[2], x[2], ref[2];

	(void)state;
	key_fill(a.hk_key, 1);
	key_fill(b.hk_key, 2);
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)(255 - i);
	for (size_t n = 0; n <= sizeof(msg); n++) {
		shmt__siphash(1, 3, 0, a.hk_key, msg, n, ref);
		assert_int_equal(shmt__hash64(&a, msg, n), ref[0]);
		assert_true(shmt__hash64(&a, msg, n) != shmt__hash64(&b, msg, n));
		shmt__hash128(&a, msg, n, w);
		shmt__siphash(1, 3, 1, a.hk_key, msg, n, x);
		assert_int_equal(w[0], x[0]);
		assert_int_equal(w[1], x[1]);
		assert_true(w[0] != ref[0]);
		shmt__siphash(2, 4, 1, a.hk_key, msg, n, x);
		assert_true(w[0] != x[0] || w[1] != x[1]);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_siphash24_is_libsodium),
		cmocka_unit_test(test_siphash24_paper),
		cmocka_unit_test(test_siphash13_is_cpython),
		cmocka_unit_test(test_library_hashes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
