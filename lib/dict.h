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

#endif /* SHMT_DICT_H */
