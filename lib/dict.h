/* SPDX-License-Identifier: MIT */
/*
 * The dictionary's private calls, for the analyzer's report and the
 * segment's setup; the store under it is in store.h.
 */
#ifndef SHMT_DICT_H
#define SHMT_DICT_H

#include "store.h"

/* The key whose hash is HASH, for the analyzer's report: 0, -ENOENT or
 * -EAGAIN. */
int shmt__dict_key_by_hash(shmt_t *h, uint64_t hash, void *buf, size_t cap,
    size_t *klen);

/* What the counters (counters.c) need of the dictionary's writers; the rest
 * of the store they reach through store.h.  Lock KEY's shard of ST (0 or -errno; then *HASH and *SHP). */
int shmt__store_lock_key(shmt_t *h, const struct shmt_store *st,
    const void *key, size_t klen, uint64_t *hash, struct shmt_shard **shp);
/* Under the lock: add KEY with VAL (copy, link, as shmt_add); 0 or -errno. */
int shmt__store_add(shmt_t *h, const struct shmt_store *st,
    struct shmt_shard *sh, uint64_t hash, const void *key, size_t klen,
    const void *val, size_t vlen, uint64_t expire);

#endif /* SHMT_DICT_H */
