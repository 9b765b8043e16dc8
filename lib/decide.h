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

/* CLIENT/LEN against *VP's kind and COST against its mode: 0, -EINVAL,
 * -E2BIG or -EPERM, as shmt_acquire.  A cost over *VP's largest is asked
 * again of a fresh view (*VP renewed when the word's tag moved). */
int shmt__decide_check(shmt_t *h, const struct shmt_lview **vp,
    const void *client, size_t len, uint64_t cost);

/* One grant of COST on a shared limiter, with its decision in OUT (may be
 * NULL) and the key-pool cursor in *CURSOR. */
int shmt__acquire_shared(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    uint64_t *cursor, shmt_decision_t *out, shmt_receipt_t *rcpt);

/* One grant of COST to CLIENT (LEN bytes) of a per-client limiter, with
 * its decision in OUT and its receipt in RCPT (both may be NULL). */
int shmt__acquire_client(shmt_t *h, const struct shmt_lview *v,
    const void *client, size_t len, uint64_t cost, shmt_decision_t *out,
    shmt_receipt_t *rcpt);

/* One use for CLIENT (LEN bytes, checked by the caller) of the per-client
 * limiter V: shmt_try_use's grant (limiter.c), a refusal of a shadow
 * limiter granted. */
int shmt__try_client(shmt_t *h, const struct shmt_lview *v,
    const void *client, size_t len);

/* What a grant must remember to be given back (shmt_receipt_t, opaque):
 * r[0] = kind:8 | row:24 | entry:32, r[1] = bucket serial or arrival time,
 * r[2] = cost, r[3] = the client entry's tag. */
enum { RC_NONE = 0, RC_BUCKET, RC_CLIENT, RC_GCRA, RC_EXACT };

/* The largest cost a grant of V may take: B in bucket mode, the burst in
 * rate mode, 1 for exact mode and key pools. */
uint64_t shmt__cost_max(const struct shmt_lview *v);
/* What a grant of COST would answer on a shared limiter, or for CLIENT
 * (LEN bytes) of a per-client one, changing nothing (shmt_peek). */
int shmt__peek_shared(shmt_t *h, const struct shmt_lview *v, uint64_t cost,
    shmt_decision_t *out);
int shmt__peek_client(shmt_t *h, const struct shmt_lview *v,
    const void *client, size_t len, uint64_t cost, shmt_decision_t *out);

#endif /* SHMT_DECIDE_H */
