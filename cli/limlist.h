/* This file is private to the shmthrottle command-line tool. */
/* SPDX-License-Identifier: MIT */
/*
 * Limiter helpers shared by limiters, buckets, try, check and watch.
 */
#ifndef SHMTC_LIMLIST_H
#define SHMTC_LIMLIST_H

#include "cli.h"

/* Every limiter's stats into a new array *OUT (free() it) of *N rows.
 * Returns 0 or a negative error. */
int shmtc_limiter_list(shmt_t *h, shmt_limiter_stat_t **out, size_t *n);
/* One limiter as the JSON object `limiters --json` prints. */
json_t *shmtc_limiter_json(const shmt_limiter_stat_t *l);
/* A global limiter's lease, host share, Redis round trip and errors:
 * as a JSON object (json null when NAME is not global), or as one line
 * on stdout (returns 1 when printed, 0 when NAME is not global). */
json_t *shmtc_global_json(shmt_t *h, const char *name);
int shmtc_global_print(shmt_t *h, const char *name);
/* Print why ERR happened to limiter NAME; return the exit code. */
int shmtc_limiter_error(const struct shmtc *c, const char *name, int err);

#endif /* SHMTC_LIMLIST_H */
