/* SPDX-License-Identifier: MIT */
/*
 * Durations and sizes as people write them, in config files and on the
 * command line: one parser for both (units.c).
 */
#ifndef SHMT_CONF_UNITS_H
#define SHMT_CONF_UNITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * shmtd_parse_duration: "500ms", "10m", "24h", "1.5s", "250us", "100ns",
 * "2d", "1min" (m and min are both minutes); a bare number is seconds.
 * A digit comes before the point and another after it; blanks may surround
 * the number and the unit.  The result must be a whole number of
 * nanoseconds.  Returns 0, -EINVAL (syntax) or -ERANGE (overflow).
 */
int shmtd_parse_duration(const char *s, uint64_t *ns);

/*
 * shmtd_parse_size: "64MiB", "1KiB", "4096", "1GB", "2M" (K, M, G, T alone
 * are binary); a bare number is bytes.  Returns 0, -EINVAL or -ERANGE.
 */
int shmtd_parse_size(const char *s, uint64_t *bytes);

/*
 * shmtd_parse_rule: a per-client override as people write it: "limit=N"
 * (N a whole number, 1 or more), "allow" or "deny"; blanks may surround
 * it.  *KIND gets 1, 2 or 3 (SHMT_RULE_LIMIT, _ALLOW, _DENY of
 * shmthrottle.h) and *LIMIT N, or 0.  Returns 0, -EINVAL or -ERANGE (N
 * past 2^31 - 1, SHMT_LIMIT_MAX).  The config file and the CLI both read
 * rules here.
 */
int shmtd_parse_rule(const char *s, int *kind, uint64_t *limit);

/* shmtd_format_duration / _size: the shortest exact spelling of V, as the
 * parsers read it back.  Return BUF. */
char *shmtd_format_duration(uint64_t ns, char *buf, size_t cap);
char *shmtd_format_size(uint64_t bytes, char *buf, size_t cap);

#endif /* SHMT_CONF_UNITS_H */
