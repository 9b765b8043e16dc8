/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-layoutfloor: what a dictionary get costs in memory reads
 * alone, for each layout, with none of either system's code around them:
 * the floor under the bench's dict-get rows on this machine.
 *
 * Three models of KEYS keys, each in a shared anonymous mapping (the kind
 * of memory a POSIX shared-memory segment is), read with the bench's
 * dict-get sequence (ranks drawn from Zipf(0.99), rank r being the r-th
 * key stored, as the bench stores them):
 *
 *   peer    the mutex peer's table (sys_mutex.c): BENCH_SHARDS runs of
 *           slots of 32 + 16 bytes (its header and a 16-byte value; 48,
 *           so that half of them cross a line), twice a run's share of
 *           the keys and 64 more, linear probing from the hash; a get
 *           reads the slot's first word until it finds the key, then the
 *           value's.  The inline model's runs are as many slots.
 *   chain   the library's store (store.h), in the geometry the bench's
 *           segment has (shmt__store_geometry over bench_store_bytes):
 *           per shard a header, the index of 64-byte buckets and the heap;
 *           a key's shard and bucket from its hash as a get picks them;
 *           the first key stored in a bucket in its slot (the bucket's
 *           line), every other one a 64-byte block of its shard's heap,
 *           placed from the heap's start in the order stored (as the buddy
 *           allocator places them in an empty heap), chained from the
 *           bucket; a get reads the slot's key word, and for a key not
 *           there the bucket's head, then the item's first word (its next
 *           link when it is another key's), then the value.
 *   inline  small items in the index itself: BENCH_SHARDS runs of 64-byte
 *           slots (a line: a header, a short key and value), twice as
 *           many as keys, linear probing; a get reads the key's line.
 *   draw    the Zipf draw and the hash alone, which every get above pays.
 *
 * The hash is the library's keyed hash of the rank under a fixed key, the
 * same for every layout: what is measured is where the reads land and how
 * many wait for one another, not the cost of either system's code.  Each
 * get's draw waits for the last read of the get before (its value word, 0,
 * added to the random state): gets one after the other, as one caller
 * makes them, not overlapping in the core as a bare loop of independent
 * reads would (which measures the memory's throughput, not what one get
 * waits).  One round runs OPS gets of each layout in thread CPU time
 * (probe.h), the order rotating from round to round, after one unmeasured
 * pass of each; the last line gives the medians over the rounds and the
 * median of the rounds' ratios
 * chain_ratio = peer_ns / chain_ns and inline_ratio = peer_ns / inline_ns
 * (the layout's gets per second over the peer's, as the bench's dict-get
 * rows compare).
 *
 *   shmthrottle-layoutfloor [OPS [ROUNDS [KEYS]]]  (default 2000000 7 1000000)
 */
#include "shmthrottle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "bench.h"
#include "probe.h"
#include "zipf.h"
#include "store.h"         /* the store's geometry and hash picks */

enum { L_DRAW, L_PEER, L_CHAIN, L_INLINE, L_N };
static const char *const lname[L_N] = { "draw", "peer", "chain", "inline" };

#define VALUE 16
#define PEER_SLOT ((32 + VALUE + 7) & ~7ULL)    /* sys_mutex.c's slot */
#define INLINE_SLOT 64ULL
#define ITEM 64ULL                              /* the library's block */
#define VALUE_AT 40                             /* a word of the value */

struct model {
	struct zipf z;
	uint64_t keys;
	/* peer and inline: BENCH_SHARDS runs of run_n slots */
	char *peer, *inl;
	uint64_t run_n;
	/* chain */
	struct shmt_store st;
	uint64_t st_size;
	uint64_t slotted;       /* keys in their bucket's slot */
};

/* The stand-in hash of rank K: the library's keyed hash of its 4 bytes
 * under a fixed key (the same for every layout). */
static const struct shmt_hkey mix_key = { { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
    11, 12, 13, 14, 15, 16 } };

static inline uint64_t
mix(uint32_t k)
{
	return shmt__hash64(&mix_key, &k, sizeof(k));
}

static void *
map_shared(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The slot of the run of HASH where probing from HASH's start begins. */
static inline uint64_t
slot_start(const struct model *m, uint64_t hash, uint64_t *run)
{
	*run = (uint32_t)(hash >> 32) % BENCH_SHARDS * m->run_n;
	return (uint32_t)hash % m->run_n;
}

/* Store ID in the first free slot from HASH's start; -ENOSPC when its run
 * is full (a run holds twice its share of keys: never with a fair hash). */
static int
probe_put(const struct model *m, char *base, uint64_t size, uint64_t hash,
    uint64_t id)
{
	uint64_t run, i = slot_start(m, hash, &run);

	for (uint64_t n = 0; *(uint64_t *)(base + (run + i) * size) != 0; n++) {
		if (n + 1 == m->run_n)
			return -ENOSPC;
		i = i + 1 == m->run_n ? 0 : i + 1;
	}
	*(uint64_t *)(base + (run + i) * size) = id;
	return 0;
}

static int
build(struct model *m, uint64_t keys)
{
	const char *why = NULL;
	uint64_t *used;

	m->keys = keys;
	if (zipf_init(&m->z, (uint32_t)keys, 0.99) != 0)
		return -ENOMEM;
	m->run_n = 2 * ((keys + BENCH_SHARDS - 1) / BENCH_SHARDS) + 64;
	if (shmt__store_geometry(bench_store_bytes(keys, 32 + 16 + VALUE,
	    2ULL << 20), BENCH_SHARDS, 0, &m->st, &m->st_size, &why) != 0) {
		fprintf(stderr, "layoutfloor: geometry: %s\n", why);
		return -EINVAL;
	}
	m->peer = map_shared(m->run_n * BENCH_SHARDS * PEER_SLOT);
	m->inl = map_shared(m->run_n * BENCH_SHARDS * INLINE_SLOT);
	m->st.base = map_shared(m->st_size);
	used = calloc(BENCH_SHARDS, sizeof(*used));
	if (m->peer == NULL || m->inl == NULL || m->st.base == NULL ||
	    used == NULL) {
		free(used);
		return -ENOMEM;
	}
	for (uint64_t k = 0; k < keys; k++) {
		uint64_t h = mix((uint32_t)k), *head, off;
		struct shmt_shard *sh = shard_at(&m->st, shard_of(&m->st, h));
		char *heap = shard_heap(&m->st, sh);

		struct shmt_bucket *bk = &shard_index(&m->st, sh)[bucket_of(&m->st,
		    h)];

		off = used[shard_of(&m->st, h)];
		if (probe_put(m, m->peer, PEER_SLOT, h, k + 1) != 0 ||
		    probe_put(m, m->inl, INLINE_SLOT, h, k + 1) != 0 ||
		    off + ITEM > m->st.heap_bytes) {
			free(used);
			fprintf(stderr, "layoutfloor: a run or a shard's heap "
			    "is full\n");
			return -ENOSPC;
		}
		/* The bucket's slot: the key's word, the value's 16 bytes on. */
		if (bk->bk_lens == 0) {
			bk->bk_lens = 1;
			bk->bk_data[0] = k + 1;
			m->slotted++;
			continue;
		}
		used[shard_of(&m->st, h)] += ITEM;
		head = &bk->bk_head;
		*(uint64_t *)(heap + off) = k + 1;
		*(uint64_t *)(heap + off + 8) = *head;  /* the next item */
		*head = off + 1;
	}
	free(used);
	return 0;
}

/* One block of N gets of layout L from the random state *R; their sum
 * goes to *SINK so that no read is left out. */
static double
block(const struct model *m, int l, long n, uint64_t *r, uint64_t *sink)
{
	uint64_t s = 0, x = *r;
	double t0 = probe_cpu_ns();

	for (long i = 0; i < n; i++) {
		uint32_t k = zipf_draw(&m->z, bench_rand(&x));
		uint64_t h = mix(k), id = (uint64_t)k + 1, run, j, v = 0;
		const volatile uint64_t *w;

		switch (l) {
		case L_DRAW:
			s += h;
			break;
		case L_PEER:
		case L_INLINE: {
			const char *base = l == L_PEER ? m->peer : m->inl;
			uint64_t size = l == L_PEER ? PEER_SLOT : INLINE_SLOT;

			j = slot_start(m, h, &run);
			while (*(w = (const volatile uint64_t *)(base +
			    (run + j) * size)) != id)
				j = j + 1 == m->run_n ? 0 : j + 1;
			v = *(const volatile uint64_t *)((const char *)w +
			    (l == L_PEER ? 32 : VALUE_AT));
			break;
		}
		default: {
			struct shmt_shard *sh = shard_at(&m->st,
			    shard_of(&m->st, h));
			const char *heap = shard_heap(&m->st, sh);
			const struct shmt_bucket *bk = &shard_index(&m->st,
			    sh)[bucket_of(&m->st, h)];
			uint64_t link;

			if (*(const volatile uint64_t *)&bk->bk_data[0] == id) {
				v = *(const volatile uint64_t *)&bk->bk_data[2];
				break;
			}
			link = *(const volatile uint64_t *)&bk->bk_head;

			while (link != 0 && *(w = (const volatile uint64_t *)
			    (heap + link - 1)) != id)
				link = w[1];
			v = link != 0 ? *(const volatile uint64_t *)(heap +
			    link - 1 + VALUE_AT) : 0;
			break;
		}
		}
		/* The value word is 0, but the compiler and the core do not
		 * know it: the next draw waits for this get's last read, so
		 * that gets do not overlap (one caller, one get at a time, as
		 * a get of either system, hundreds of instructions and the
		 * peer's locked ones, leaves little to overlap). */
		x += v;
		s += v + h;
	}
	*r = x;
	*sink += s;
	return (probe_cpu_ns() - t0) / (double)n;
}

static double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), probe_cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int
main(int argc, char **argv)
{
	long ops = argc > 1 ? atol(argv[1]) : 2000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 7;
	long keys = argc > 3 ? atol(argv[3]) : 1000000;
	double *ns[L_N], *cr, *ir;
	uint64_t r = 0x2545f4914f6cdd1dULL, sink = 0;
	struct model m;
	int rc;

	if (argc > 4 || ops < 1000 || rounds < 1 || rounds > 1000 ||
	    keys < 1000 || keys > 100000000) {
		fprintf(stderr, "usage: shmthrottle-layoutfloor [OPS [ROUNDS "
		    "[KEYS]]]  (OPS >= 1000, ROUNDS 1..1000, KEYS 1000..1e8)\n");
		return 2;
	}
	memset(&m, 0, sizeof(m));
	if ((rc = build(&m, (uint64_t)keys)) != 0) {
		fprintf(stderr, "layoutfloor: %s\n", strerror(-rc));
		return 1;
	}
	for (int l = 0; l < L_N; l++)
		if ((ns[l] = calloc((size_t)rounds, sizeof(double))) == NULL)
			return 1;
	cr = calloc((size_t)rounds, sizeof(double));
	ir = calloc((size_t)rounds, sizeof(double));
	if (cr == NULL || ir == NULL)
		return 1;
	for (int l = 0; l < L_N; l++)
		(void)block(&m, l, ops, &r, &sink);
	for (int i = 0; i < rounds; i++) {
		for (int j = 0; j < L_N; j++) {
			int l = (i + j) % L_N;

			ns[l][i] = block(&m, l, ops, &r, &sink);
		}
		cr[i] = ns[L_PEER][i] / ns[L_CHAIN][i];
		ir[i] = ns[L_PEER][i] / ns[L_INLINE][i];
		printf("round %d: draw %.1f ns, peer %.1f ns, chain %.1f ns, "
		    "inline %.1f ns, chain_ratio %.3f, inline_ratio %.3f\n",
		    i + 1, ns[L_DRAW][i], ns[L_PEER][i], ns[L_CHAIN][i],
		    ns[L_INLINE][i], cr[i], ir[i]);
	}
	printf("layoutfloor keys=%ld ops=%ld rounds=%d", keys, ops, rounds);
	for (int l = 0; l < L_N; l++)
		printf(" %s_ns=%.1f", lname[l], median(ns[l], rounds));
	printf(" chain_ratio=%.3f inline_ratio=%.3f buckets=%llu slotted=%llu "
	    "heap_bytes=%llu shards=%u sink=%llu\n", median(cr, rounds),
	    median(ir, rounds),
	    (unsigned long long)(m.st.nbuckets * m.st.shards),
	    (unsigned long long)m.slotted,
	    (unsigned long long)(m.st.heap_bytes * m.st.shards),
	    m.st.shards, (unsigned long long)(sink & 1));
	return 0;
}
