/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-hashcost: the cost of the keyed hash (lib/hash.h, SipHash-1-3
 * inline) on short keys, the lengths of client ids and dictionary keys,
 * beside libsodium's SipHash-2-4 (crypto_shorthash, the hash before) and
 * XXH3 with a seed and with a secret (when libxxhash was found at build
 * time), the alternative that was measured and not taken.  One SUMMARY line per
 * function and key length; the median of ROUNDS rounds of N calls each.
 *
 * Usage: shmthrottle-hashcost [N [ROUNDS]]   (defaults 2000000 and 7)
 */
#include "hash.h"

#ifdef SHMT_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

#include <sodium/crypto_shorthash_siphash24.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define HC_KEYS 256
#define HC_MAXLEN 64

static char hc_keys[HC_KEYS][HC_MAXLEN];
static struct shmt_hkey hc_key;
static volatile uint64_t hc_sink;

static double
hc_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t
hc_sip64(const void *p, size_t n)
{
	return shmt__hash64(&hc_key, p, n);
}

static uint64_t
hc_sip128(const void *p, size_t n)
{
	uint64_t out[2];

	shmt__hash128(&hc_key, p, n, out);
	return out[0] ^ out[1];
}

static uint64_t
hc_sodium64(const void *p, size_t n)
{
	unsigned char out[crypto_shorthash_siphash24_BYTES];

	crypto_shorthash_siphash24(out, p, n, hc_key.hk_key);
	return shmt__le64(out);
}

static uint64_t
hc_sodium128(const void *p, size_t n)
{
	unsigned char out[crypto_shorthash_siphashx24_BYTES];

	crypto_shorthash_siphashx24(out, p, n, hc_key.hk_key);
	return shmt__le64(out) ^ shmt__le64(out + 8);
}

#ifdef SHMT_HAVE_XXHASH
static unsigned char hc_secret[192];
static uint64_t hc_seed;

static uint64_t
hc_xxh3_seed(const void *p, size_t n)
{
	return XXH3_64bits_withSeed(p, n, hc_seed);
}

static uint64_t
hc_xxh3_secret(const void *p, size_t n)
{
	return XXH3_64bits_withSecret(p, n, hc_secret, sizeof(hc_secret));
}

static uint64_t
hc_xxh3_128_seed(const void *p, size_t n)
{
	XXH128_hash_t r = XXH3_128bits_withSeed(p, n, hc_seed);

	return r.low64 ^ r.high64;
}
#endif

struct hc_fn {
	const char *name;
	uint64_t (*fn)(const void *, size_t);
};

static int
hc_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	static const size_t lens[] = { 5, 8, 12, 16, 24, 32, 48, 64 };
	const struct hc_fn fns[] = {
		{ "shmt-siphash13-64", hc_sip64 },
		{ "shmt-siphash13-128", hc_sip128 },
		{ "sodium-siphash24-64", hc_sodium64 },
		{ "sodium-siphashx24-128", hc_sodium128 },
#ifdef SHMT_HAVE_XXHASH
		{ "xxh3-64-seed", hc_xxh3_seed },
		{ "xxh3-64-secret", hc_xxh3_secret },
		{ "xxh3-128-seed", hc_xxh3_128_seed },
#endif
	};
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 7;
	double *t;

	if (n <= 0 || rounds <= 0 || rounds > 1000) {
		fprintf(stderr, "usage: %s [N [ROUNDS]]\n", argv[0]);
		return 2;
	}
	if ((t = calloc((size_t)rounds, sizeof(*t))) == NULL)
		return 1;
	if (getrandom(hc_key.hk_key, sizeof(hc_key.hk_key), 0) !=
	    (ssize_t)sizeof(hc_key.hk_key))
		return 1;
#ifdef SHMT_HAVE_XXHASH
	if (getrandom(hc_secret, sizeof(hc_secret), 0) !=
	    (ssize_t)sizeof(hc_secret) ||
	    getrandom(&hc_seed, sizeof(hc_seed), 0) != (ssize_t)sizeof(hc_seed))
		return 1;
#endif
	for (int i = 0; i < HC_KEYS; i++)
		for (int j = 0; j < HC_MAXLEN; j++)
			hc_keys[i][j] = (char)('a' + (i * 7 + j * 13) % 26);
	for (size_t f = 0; f < sizeof(fns) / sizeof(fns[0]); f++)
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			for (int r = 0; r < rounds; r++) {
				double t0 = hc_now();
				uint64_t s = 0;

				for (long i = 0; i < n; i++)
					s += fns[f].fn(hc_keys[i & (HC_KEYS - 1)],
					    lens[l]);
				t[r] = (hc_now() - t0) / (double)n;
				hc_sink += s;
			}
			qsort(t, (size_t)rounds, sizeof(*t), hc_cmp);
			printf("SUMMARY bench=shmthrottle-hashcost fn=%s len=%zu "
			    "calls=%ld rounds=%d ns_min=%.2f ns_median=%.2f\n",
			    fns[f].name, lens[l], n, rounds, t[0],
			    t[rounds / 2]);
		}
	free(t);
	return 0;
}
