/* This file is private to the fuzz targets of libshmthrottle. */
/* SPDX-License-Identifier: MIT */
/*
 * What the fuzz targets share: a small real segment built the same way on
 * every start (its bytes are the base that patch-mode inputs change), the
 * patch format, and the calls that exercise every region of an opened
 * segment.
 */
#ifndef SHMT_FUZZ_UTIL_H
#define SHMT_FUZZ_UTIL_H

#include "shmthrottle.h"

#include <stddef.h>
#include <stdint.h>

/* The injected clock of every handle the targets open: the base segment is
 * made at FZ_T0 and inputs run a little later, so that nothing depends on
 * the host's clock. */
#define FZ_T0 1000000000000ULL

struct fz_image {
	unsigned char *bytes;
	size_t size;
	shmt_segment_stat_t stat;   /* of the base, for the region table */
};

/* The small config of the base segment (every region present). */
void fz_base_config(shmt_config_t *cfg);

/* Fill segment NAME (already created, handle H) with limiters of every
 * kind, dictionary keys, hits and hot keys, all on the injected clock. */
void fz_populate(shmt_t *h);

/* Build the base segment under a private name, copy its bytes into *IMG
 * and remove it.  Aborts on failure (the harness is broken, not the
 * library). */
void fz_base_image(struct fz_image *img);

/*
 * Apply patches from DATA (SIZE bytes) to a copy of BASE in OUT (BASE's
 * size).  A patch is: region selector (1 byte, modulo the regions), offset
 * inside the region (4 bytes little-endian, modulo its size), length (1
 * byte, at most 64) and that many bytes.  A short tail is ignored.
 */
void fz_apply_patches(const struct fz_image *base, unsigned char *out,
    const uint8_t *data, size_t size);

/* Write BYTES (SIZE) as the whole shm object NAME (created, 0600). */
void fz_write_object(const char *name, const void *bytes, size_t size);

/* Run every operation once or more against H: check, stats, every listed
 * limiter, the dictionary (get, walk, set, del, incr), hits, hot keys and
 * housekeeping.  Every result is allowed except a crash, a hang or a
 * broken promise that does not depend on the data (aborts then). */
void fz_exercise(shmt_t *h);

/*
 * The fixed host of the fuzz build (lib/env.h, SHMT_FUZZ_ENV): this
 * process is FZ_PID (its only thread too), started at FZ_START clock ticks,
 * and no other process exists; both clocks advance by FZ_STEP_NS on every
 * read; the random bytes are a fixed sequence.  fz_env_reset() starts the
 * clocks and the random bytes over: every target calls it at the start of
 * each input, so that an input runs the same alone as within a run.
 */
#define FZ_PID 4242
#define FZ_START 424242ULL
#define FZ_STEP_NS 1000000ULL
void fz_env_reset(void);

/*
 * What this run's names are made of: $SHMT_FUZZ_ID as tests/fuzz/run.sh
 * sets it ("<target>-<n>", one n per target at a time on this host, so the
 * names are the same on every run and never collide), or the real pid when
 * the target is run by hand.  Aborts on an ID that does not fit a name.
 */
const char *fz_id(void);

/* A private segment name: "/shmt-fuzz-ID-TAG". */
void fz_segname(char *buf, size_t cap, const char *tag);

/* A private file name: "/tmp/shmt-fuzz-ID-TAG" (TAG may hold a suffix). */
void fz_tmpname(char *buf, size_t cap, const char *tag);

#endif
