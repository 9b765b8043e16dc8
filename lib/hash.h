/* This file is private to libshmthrottle: the keyed hash of everything an outsider can feed. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_HASH_H
#define SHMT_HASH_H

/*
 * Client ids, dictionary keys and counter keys come from outside (request
 * headers, URLs, API keys), and their hashes pick a neighbourhood of the
 * per-client table, a shard and chain of a store, and a counter group of
 * the analyzer.  With a public hash anyone can search, offline, for inputs
 * that land in one place: 64 ids that fill a victim's neighbourhood, or
 * keys that crowd one analyzer group.  So every such hash is keyed with the
 * segment's secret (16 random bytes made at creation, kept in the header
 * and in snapshots) and is a pseudo-random function of the input: without
 * the secret, where an input lands cannot be predicted or learned offline.
 *
 * The function is SipHash-2-4 from libsodium (crypto_shorthash; 128 bits
 * for the per-client table, which stores a 128-bit hash of each id).  The
 * alternative measured was XXH3 with a seed or a secret (libxxhash): about
 * 2-6 ns against SipHash's 14-35 ns (64 bits) and 21-43 ns (128 bits) on
 * keys of 8-64 bytes (bench/hashcost.c), but XXH3 is not a PRF and makes
 * no claim against an attacker who aims inputs, which is the whole point
 * here; a dictionary get costs a few hundred ns, so the difference is a
 * few per cent of it.
 *
 * The siphash functions have one portable implementation and keep no
 * global state, so sodium_init() (which picks implementations of other
 * primitives and may open /dev/urandom) is not called: a library should not
 * open descriptors behind its caller's back.
 *
 * The key is copied into the handle at open from the validated header and
 * never re-read from the segment, so a writer of the segment cannot change
 * it under a running process.
 */

#include <sodium/crypto_shorthash_siphash24.h>

#include <stddef.h>
#include <stdint.h>

#define SHMT_SECRET_BYTES 16U

_Static_assert(SHMT_SECRET_BYTES == crypto_shorthash_siphash24_KEYBYTES &&
    SHMT_SECRET_BYTES == crypto_shorthash_siphashx24_KEYBYTES,
    "the secret is a SipHash key");

struct shmt_hkey {
	unsigned char hk_key[SHMT_SECRET_BYTES];
};

static inline uint64_t
shmt__le64(const unsigned char *b)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | b[i];
	return v;
}

/* The 64-bit keyed hash of [P, P + N) (N may be 0). */
static inline uint64_t
shmt__hash64(const struct shmt_hkey *k, const void *p, size_t n)
{
	unsigned char out[crypto_shorthash_siphash24_BYTES];

	crypto_shorthash_siphash24(out, p, n, k->hk_key);
	return shmt__le64(out);
}

/* The 128-bit keyed hash of [P, P + N) (N may be 0). */
static inline void
shmt__hash128(const struct shmt_hkey *k, const void *p, size_t n,
    uint64_t out[2])
{
	unsigned char b[crypto_shorthash_siphashx24_BYTES];

	crypto_shorthash_siphashx24(b, p, n, k->hk_key);
	out[0] = shmt__le64(b);
	out[1] = shmt__le64(b + 8);
}

#endif /* SHMT_HASH_H */
