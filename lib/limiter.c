/* SPDX-License-Identifier: MIT */
/* Transient: replaced by the lock-free ring of buckets. */
#include "limiter.h"
#include <errno.h>
SHMT_EXPORT int shmt_limiter_define(shmt_t *h, const char *n, const shmt_limit_t *l) { return -ENOSYS; }
SHMT_EXPORT int shmt_try_use_key(shmt_t *h, const char *n) { return -ENOSYS; }
SHMT_EXPORT int shmt_next_key(shmt_t *h, const char *n, char *b, size_t c) { return -ENOSYS; }
SHMT_EXPORT int shmt_try_use(shmt_t *h, const char *n, const void *c, size_t l) { return -ENOSYS; }
SHMT_EXPORT int shmt_limiter_stat(shmt_t *h, const char *n, shmt_limiter_stat_t *o) { return -ENOSYS; }
SHMT_EXPORT int shmt_limiter_list(shmt_t *h, shmt_limiter_stat_t *o, size_t c) { return 0; }
SHMT_EXPORT int shmt_limiter_buckets(shmt_t *h, const char *n, shmt_bucket_info_t *o, size_t c) { return -ENOSYS; }
int shmt__limiters_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next) { return 0; }
void shmt__limiters_repair(shmt_t *h) { }
