/* SPDX-License-Identifier: MIT */
/*
 * fuzz_snapshot: the snapshot loader of shmthrottled
 * (shmtd_snapshot_restore, over lib/image.c).  The first byte of an input
 * picks the form: odd, the rest is the whole file as it is; even, the rest
 * is patches (fuzz_util.h) to the image of a real snapshot made at start,
 * after which the harness sets both checksums again, so that mutations
 * reach the image behind them.  A patch's region is a part of the image:
 * 0 the segment header, 1 the limiter table, 2 the used arena, then the
 * sections in order (dictionary, counters, analyzer), each from its
 * section header.  A restored segment is checked, used and removed.
 */
#include "fuzz_util.h"
#include "snapshot.h"

#include "segment.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The file header as lib/image.c writes it (112 bytes); only the checksum
 * fields are rewritten here. */
#define SNAP_HDR 112
#define SNAP_SUM_OFF 96      /* FNV-1a 64 over the image's 8-byte words */
#define SNAP_HDR_SUM_OFF 104 /* FNV-1a 64 of the 104 bytes before it */

static struct fz_image base;   /* the snapshot's segment image */
static unsigned char hdr[SNAP_HDR];
static unsigned char *work;
static char path[128], name[128];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t
fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* FNV-1a over 8-byte words, then the bytes of the tail (the image sum). */
static uint64_t
fnv1a_words(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, sizeof(w));
		h ^= w;
		h *= 0x100000001b3ULL;
	}
	for (; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define SNAP_ARENA_OFF 88    /* the used arena's bytes, in the header */

/* The parts of the image (after the file header) as patch regions. */
static void
image_parts(void)
{
	uint64_t hreg, lreg, arena, at;
	uint32_t n = 0;

	memcpy(&hreg, base.bytes + offsetof(struct shmt_hdr,
	    sh_regions[SHMT_R_HEADER].rg_size), 8);
	memcpy(&lreg, base.bytes + offsetof(struct shmt_hdr,
	    sh_regions[SHMT_R_LIMITERS].rg_size), 8);
	memcpy(&arena, hdr + SNAP_ARENA_OFF, 8);
	memset(&base.stat, 0, sizeof(base.stat));
	base.stat.regions[n++] = (shmt_region_stat_t){ .offset = 0,
		.size = hreg };
	base.stat.regions[n++] = (shmt_region_stat_t){ .offset = hreg,
		.size = lreg };
	base.stat.regions[n++] = (shmt_region_stat_t){ .offset = hreg + lreg,
		.size = arena };
	for (at = hreg + lreg + arena; at + 24 <= base.size &&
	    n < SHMT_REGIONS_MAX;) {
		uint64_t bytes;

		memcpy(&bytes, base.bytes + at + 16, 8);
		if (bytes > base.size - at - 24)
			abort();
		base.stat.regions[n++] = (shmt_region_stat_t){ .offset = at,
			.size = 24 + bytes };
		at += 24 + bytes;
	}
	if (n != 6)     /* the harness's segment has all three sections */
		abort();
	base.stat.nregions = n;
}

static void
cleanup(void)
{
	unlink(path);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	shmt_config_t cfg;
	char err[512];
	shmt_t *h;
	FILE *f;
	long len;

	(void)argc, (void)argv;
	fz_env_reset();
	fz_tmpname(path, sizeof(path), "snap.snap");
	fz_segname(name, sizeof(name), "snap");
	atexit(cleanup);
	shmt_unlink(name);
	fz_base_config(&cfg);
	if (shmt_create(name, &cfg, &h) != 0)
		abort();
	fz_populate(h);
	if (shmtd_snapshot_write(h, path, err, sizeof(err)) != 0) {
		fprintf(stderr, "fuzz harness: %s\n", err);
		abort();
	}
	shmt_close(h);
	shmt_unlink(name);
	f = fopen(path, "rb");
	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) <= SNAP_HDR)
		abort();
	rewind(f);
	base.size = (size_t)len - SNAP_HDR;
	base.bytes = malloc(base.size);
	work = malloc(SNAP_HDR + base.size);
	if (base.bytes == NULL || work == NULL ||
	    fread(hdr, 1, SNAP_HDR, f) != SNAP_HDR ||
	    fread(base.bytes, 1, base.size, f) != base.size)
		abort();
	fclose(f);
	image_parts();
	return 0;
}

static void
put(const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	shmt_t *h = NULL;
	uint64_t sum;

	if (size == 0)
		return 0;
	fz_env_reset();
	if (data[0] & 1) {
		put(data + 1, size - 1);
	} else {
		memcpy(work, hdr, SNAP_HDR);
		fz_apply_patches(&base, work + SNAP_HDR, data + 1, size - 1);
		sum = fnv1a_words(work + SNAP_HDR, base.size);
		memcpy(work + SNAP_SUM_OFF, &sum, 8);
		sum = fnv1a(work, SNAP_HDR_SUM_OFF);
		memcpy(work + SNAP_HDR_SUM_OFF, &sum, 8);
		put(work, SNAP_HDR + base.size);
	}
	shmt_unlink(name);
	if (shmtd_snapshot_restore(path, name, &h, err, sizeof(err)) == 0) {
		fz_exercise(h);
		shmt_close(h);
	}
	shmt_unlink(name);
	return 0;
}
