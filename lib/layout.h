/* SPDX-License-Identifier: MIT */
/*
 * The segment as a format (layout.c): from creation parameters to regions,
 * and the header's checks.  Private to libshmthrottle; the structures are
 * in segment.h.
 */
#ifndef SHMT_LAYOUT_H
#define SHMT_LAYOUT_H

#include "segment.h"

struct shmt_store;
struct shmt_an;

/* The creation parameters stored in the header, from a config. */
void shmt__params_from(const shmt_config_t *cfg, struct shmt_params *p);
/* The config that gives the creation parameters P (the inverse). */
void shmt__config_from_params(const struct shmt_params *p, shmt_config_t *c);
/* The trusted geometry of both stores, from the creation parameters: 0, or
 * -EINVAL with WHY (may be NULL) naming the parameter and the rule. */
int shmt__stores_geometry(const struct shmt_params *p, struct shmt_store *dict,
    struct shmt_store *ctr, uint64_t *dsize, uint64_t *csize, char *why,
    size_t why_len);
/* The analyzer's geometry from the creation parameters: 0 or -EINVAL, as
 * shmt__stores_geometry. */
int shmt__params_an_geometry(const struct shmt_params *p, struct shmt_an *an,
    char *why, size_t why_len);
/* Lay the regions out page by page: the total size, or 0 when the
 * parameters make no valid segment. */
uint64_t shmt__layout(const struct shmt_params *p,
    struct shmt_region reg[SHMT_R_COUNT]);
/* The regions' names, for reports. */
extern const char *const shmt__region_names[SHMT_R_COUNT];
/* Fill in a new header (creation only). */
void shmt__hdr_init(struct shmt_hdr *hdr, const struct shmt_params *p,
    uint64_t size, const struct shmt_region reg[SHMT_R_COUNT]);
/* The namespaces of this process, into HDR's sh_*ns_* fields. */
void shmt__ns_get(struct shmt_hdr *hdr);
/* SHMT_ENAMESPACE when HDR's creator ran in another PID or time namespace. */
int shmt__ns_check(const struct shmt_hdr *hdr);
/* Validate a copy of a header against the object's SIZE and fill in REG:
 * 0, SHMT_EMAGIC, SHMT_EFORMAT, SHMT_ESIZE or SHMT_ECORRUPT. */
int shmt__hdr_validate(const struct shmt_hdr *hdr, uint64_t size,
    struct shmt_region reg[SHMT_R_COUNT]);

#endif /* SHMT_LAYOUT_H */
