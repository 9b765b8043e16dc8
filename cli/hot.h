/* This file is private to the shmthrottle command-line tool. */
/* SPDX-License-Identifier: MIT */
/*
 * The hot keys as top and watch show them: reading the analyzer's answer
 * and naming each key for a terminal.
 */
#ifndef SHMTC_HOT_H
#define SHMTC_HOT_H

#include "cli.h"

/*
 * The hottest MAX keys (0: all of them) into a new array *OUT (free() it)
 * of *N rows, and the span they cover into *INFO.  Returns how many keys
 * are hot (may exceed *N when MAX is not 0), or a negative error: -ENODEV
 * when the segment has no analyzer, -ENOMEM.
 */
int shmtc_hot_read(shmt_t *h, size_t max, shmt_hotkey_t **out, size_t *n,
    shmt_top_info_t *info);

/* "dict" or "client". */
const char *shmtc_hot_kind(int kind);

/* K's name for a terminal: its bytes escaped as `keys` shows them, with
 * "... (N bytes)" after a truncated prefix, or "(hash 0x...)" when only its
 * hash is known.  Returns a new string (free() it) or NULL. */
char *shmtc_hot_name(const shmt_hotkey_t *k);

/* A threshold in parts per million as a percentage: "10%", "2.5%". */
char *shmtc_hot_pct_ppm(char *buf, size_t cap, uint32_t ppm);

/* Print the message for a segment without an analyzer; return the exit
 * code (SHMTC_MISSING). */
int shmtc_hot_nodev(const struct shmtc *c);

#endif /* SHMTC_HOT_H */
