/* This file is private to libshmthrottle: the windowed counters of
 * shmt_hit(), kept in a store (dict.h). */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_COUNTERS_H
#define SHMT_COUNTERS_H

#include "dict.h"

/* IT's value has the shape of a counter of ST (repair, check, update). */
int shmt__cnt_item_ok(const struct shmt_store *st,
    const struct shmt_item *it);
/* Under SH's lock: evict the counters hit least recently, in a batch;
 * EXCEPT is never chosen.  Returns how many were evicted. */
int shmt__cnt_evict(const struct shmt_store *st, struct shmt_shard *sh,
    const struct shmt_item *except);
/* Shift counter IT's sub-window index by D ns (snapshot restore); an item
 * not of a counter's shape is left alone. */
void shmt__cnt_rebase(const struct shmt_store *st, struct shmt_item *it,
    int64_t d);
/* Report to C each problem of counter item IT at heap offset OFF. */
void shmt__cnt_check_item(const struct shmt_store *st,
    const struct shmt_item *it, struct shmt_chk *c, const char *who,
    uint64_t off);

#endif /* SHMT_COUNTERS_H */
