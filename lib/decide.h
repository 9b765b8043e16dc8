/* This file is private to libshmthrottle: decisions, cost and peeking. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_DECIDE_H
#define SHMT_DECIDE_H

#include "table.h"

#include <shmthrottle.h>

/* Find NAME and check CLIENT/LEN against it and COST against its mode. */
int shmt__decide_find(shmt_t *h, const char *name, const void *client,
    size_t len, uint64_t cost, struct shmt_lview *scratch,
    const struct shmt_lview **vp);

/* CLIENT/LEN against V's kind and COST against its mode: 0, -EINVAL,
 * -E2BIG or -EPERM, as shmt_acquire. */
int shmt__decide_check(const struct shmt_lview *v, const void *client,
    size_t len, uint64_t cost);

/* One grant of COST on a shared limiter, with its decision in OUT (may be
 * NULL) and the key-pool cursor in *CURSOR. */
int shmt__acquire_shared(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    uint64_t *cursor, shmt_decision_t *out, shmt_receipt_t *rcpt);

/* One grant of COST to CLIENT (LEN bytes) of a per-client limiter, with
 * its decision in OUT and its receipt in RCPT (both may be NULL). */
int shmt__acquire_client(shmt_t *h, const struct shmt_lview *v,
    const void *client, size_t len, uint64_t cost, shmt_decision_t *out,
    shmt_receipt_t *rcpt);

#endif /* SHMT_DECIDE_H */
