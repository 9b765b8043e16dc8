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
 * The function is SipHash-1-3 (Aumasson and Bernstein's SipHash with one
 * compression and three finalization rounds; 128 bits for the per-client
 * table, which stores a 128-bit hash of each id, 64 bits elsewhere), the
 * round counts Rust's standard hasher and CPython's str hash use: a keyed
 * PRF against inputs aimed without the key, at about half the cost of
 * SipHash-2-4 on the short inputs seen here.  It is written here, inline,
 * because no packaged library has the 1-3 variant and a call into one
 * costs what the hash does (bench/hashcost.c: this file's hashes against
 * libsodium's crypto_shorthash SipHash-2-4).  The same code with two and
 * four rounds gives libsodium's crypto_shorthash_siphash24 and
 * crypto_shorthash_siphashx24 bit for bit (tests/test_siphash.c), which
 * checks everything but the round counts.
 *
 * The alternative measured was XXH3 with a seed or a secret (libxxhash):
 * a few ns less again, but XXH3 is not a PRF and makes no claim against an
 * attacker who aims inputs, which is the whole point here.
 *
 * The key is copied into the handle at open from the validated header and
 * never re-read from the segment, so a writer of the segment cannot change
 * it under a running process.  The function is part of the segment's
 * format (layout.c folds SHMT_HASH_ID into the format word): two builds
 * hashing differently never share a segment or a snapshot.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHMT_SECRET_BYTES 16U

/* Which keyed hash a segment's stored hashes come from (format word):
 * 2 = SipHash-1-3 (1 was SipHash-2-4). */
#define SHMT_HASH_ID 2U

struct shmt_hkey {
	unsigned char hk_key[SHMT_SECRET_BYTES];
};

static inline uint64_t
shmt__le64(const unsigned char *b)
{
	uint64_t v;

	memcpy(&v, b, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

#define SHMT_ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

struct shmt_sip {
	uint64_t v0, v1, v2, v3;
};

static inline __attribute__((always_inline)) void
shmt__sip_round(struct shmt_sip *s)
{
	s->v0 += s->v1;
	s->v1 = SHMT_ROTL64(s->v1, 13);
	s->v1 ^= s->v0;
	s->v0 = SHMT_ROTL64(s->v0, 32);
	s->v2 += s->v3;
	s->v3 = SHMT_ROTL64(s->v3, 16);
	s->v3 ^= s->v2;
	s->v0 += s->v3;
	s->v3 = SHMT_ROTL64(s->v3, 21);
	s->v3 ^= s->v0;
	s->v2 += s->v1;
	s->v1 = SHMT_ROTL64(s->v1, 17);
	s->v1 ^= s->v2;
	s->v2 = SHMT_ROTL64(s->v2, 32);
}

/* N rounds (1 to 4, a constant at every call): written out, since a loop
 * of three rounds is not unrolled at -O2 and its counter costs a tenth of
 * the hash. */
static inline __attribute__((always_inline)) void
shmt__sip_rounds(struct shmt_sip *s, int n)
{
	switch (n) {
	case 4: shmt__sip_round(s); /* FALLTHROUGH */
	case 3: shmt__sip_round(s); /* FALLTHROUGH */
	case 2: shmt__sip_round(s); /* FALLTHROUGH */
	default: shmt__sip_round(s); break;
	}
}

/*
 * SipHash-C-D of [P, P + N) under the 16-byte KEY: OUT[0], and with WIDE
 * also OUT[1] (the 128-bit output).  C (1 to 4), D (1 to 4) and WIDE are
 * constants at every call, so the rounds are written out; a call with N a
 * constant too folds the message loop and the padding away.  The message is read in 8-byte little-endian
 * words; the last word holds the remaining bytes and N mod 256 in its top
 * byte (the specification's padding).
 */
static inline __attribute__((always_inline)) void
shmt__siphash(int c, int d, int wide, const unsigned char key[16],
    const void *p, size_t n, uint64_t out[2])
{
	const unsigned char *in = p;
	uint64_t k0 = shmt__le64(key), k1 = shmt__le64(key + 8);
	uint64_t m, b = (uint64_t)n << 56;
	struct shmt_sip s = {
		k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
		k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL,
	};
	size_t left = n & 7;

	if (wide)
		s.v1 ^= 0xee;
	for (const unsigned char *end = in + (n - left); in != end; in += 8) {
		m = shmt__le64(in);
		s.v3 ^= m;
		shmt__sip_rounds(&s, c);
		s.v0 ^= m;
	}
	switch (left) {
	case 7: b |= (uint64_t)in[6] << 48; /* FALLTHROUGH */
	case 6: b |= (uint64_t)in[5] << 40; /* FALLTHROUGH */
	case 5: b |= (uint64_t)in[4] << 32; /* FALLTHROUGH */
	case 4: b |= (uint64_t)in[3] << 24; /* FALLTHROUGH */
	case 3: b |= (uint64_t)in[2] << 16; /* FALLTHROUGH */
	case 2: b |= (uint64_t)in[1] << 8;  /* FALLTHROUGH */
	case 1: b |= (uint64_t)in[0]; break;
	default: break;
	}
	s.v3 ^= b;
	shmt__sip_rounds(&s, c);
	s.v0 ^= b;
	s.v2 ^= wide ? 0xee : 0xff;
	shmt__sip_rounds(&s, d);
	out[0] = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
	if (wide) {
		s.v1 ^= 0xdd;
		shmt__sip_rounds(&s, d);
		out[1] = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
	}
}

/* The 64-bit keyed hash of [P, P + N) (N may be 0). */
static inline uint64_t
shmt__hash64(const struct shmt_hkey *k, const void *p, size_t n)
{
	uint64_t out[2];

	shmt__siphash(1, 3, 0, k->hk_key, p, n, out);
	return out[0];
}

/* The 128-bit keyed hash of [P, P + N) (N may be 0). */
static inline void
shmt__hash128(const struct shmt_hkey *k, const void *p, size_t n,
    uint64_t out[2])
{
	shmt__siphash(1, 3, 1, k->hk_key, p, n, out);
}

#endif /* SHMT_HASH_H */
