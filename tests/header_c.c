/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle.h compiled on its own as strict ISO C11 (-pedantic, no GNU
 * extensions, no _GNU_SOURCE): it must include everything it uses, and
 * twice must be harmless.
 */
#undef _GNU_SOURCE
#include "shmthrottle.h"
#include "shmthrottle.h"

_Static_assert(SHMT_ERRLAST < SHMT_ERRBASE && SHMT_ERRBASE < -3000,
    "library errors lie beyond every errno value");
_Static_assert(sizeof(shmt_time_t) == 8, "nanoseconds need 64 bits");

/* Every declaration must be usable from C: take the address of a few. */
int (*const shmt_header_c_create)(const char *, const shmt_config_t *,
    shmt_t **) = shmt_create;
const char *(*const shmt_header_c_strerror)(int) = shmt_strerror;
int (*const shmt_header_c_next_key)(shmt_t *, const char *, char *,
    size_t) = shmt_next_key;
