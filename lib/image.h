/* This file is private to libshmthrottle: the snapshot image's framing. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_IMAGE_H
#define SHMT_IMAGE_H

/*
 * The image's header, its sections and records, as image.c writes and
 * reads them (its top comment describes the whole image), and as
 * migrate.c rewrites an image of an older segment format.
 */
#include "daemon.h"

#include <stdint.h>

#define IMG_MAGIC 0x31504e5354484d53ULL /* "SMHTSNP1" little-endian */
#define IMG_VERSION 3U
#define IMG_VERSION_PIECES 2U           /* pieces only, still read */

struct img_hdr {
	uint64_t ih_magic;
	uint32_t ih_version;
	uint32_t ih_hdr_size;
	uint64_t ih_format;             /* the segment's format word */
	uint64_t ih_wall_ns;            /* CLOCK_REALTIME when taken */
	uint64_t ih_mono_ns;            /* CLOCK_MONOTONIC when taken */
	char ih_boot_id[SHMT_BOOT_ID_LEN]; /* /proc/sys/kernel/random/boot_id */
	uint64_t ih_size;               /* image bytes that follow */
	uint64_t ih_arena_bytes;        /* of which the arena's used part */
	uint64_t ih_sum;                /* FNV-1a 64 (words) of the image */
	uint64_t ih_hdr_sum;            /* FNV-1a 64 of the fields above */
};
_Static_assert(sizeof(struct img_hdr) == SHMT_IMAGE_HDR_BYTES,
    "no hidden padding");

enum { IMG_S_DICT = 1, IMG_S_COUNTERS = 2, IMG_S_ANALYZER = 3 };

struct img_sec {
	uint32_t is_kind;
	uint32_t is_pad;
	uint64_t is_count;              /* records (dictionary, counters) */
	uint64_t is_bytes;              /* bytes that follow this header */
};
_Static_assert(sizeof(struct img_sec) == 24, "no hidden padding");

struct img_rec {
	uint32_t ir_klen;
	uint32_t ir_vlen;
	uint64_t ir_expire;             /* ns on the image's clock; 0: never */
};
_Static_assert(sizeof(struct img_rec) == 16, "no hidden padding");

#endif /* SHMT_IMAGE_H */
