/* This file is private to the shmthrottle command-line tool. */
/* SPDX-License-Identifier: MIT */
/*
 * Bytes that may be anything (dictionary keys and values) turned into text
 * and back: escaping for a terminal, base64 for JSON, hex from the command
 * line; and the TTL spelling of the dictionary commands.
 */
#ifndef SHMTC_BYTES_H
#define SHMTC_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* P[0..N) as text: printable ASCII as is, a backslash as "\\", every other
 * byte as "\xHH".  Returns a new string (free() it) or NULL when out of
 * memory.  Two different keys never escape to the same text. */
char *shmtc_escape(const void *p, size_t n);

/* P[0..N) in standard base64 with padding (RFC 4648, section 4).  Returns
 * a new string or NULL. */
char *shmtc_base64(const void *p, size_t n);

/* The hex string S (an even number of digits, either case) into OUT (CAP
 * bytes); *LEN gets the byte count.  Returns 0, -EINVAL (not hex, odd
 * length) or -E2BIG (more than CAP bytes). */
int shmtc_hex_decode(const char *s, void *out, size_t cap, size_t *len);

/* A duration such as "500ms", "10m", "1min", "1.5s", "2h", "1d" (a bare
 * number is seconds; read by shmtd_parse_duration) as whole milliseconds.  Returns 0, -EINVAL (syntax, or not a
 * whole number of milliseconds) or -ERANGE. */
int shmtc_parse_ms(const char *s, uint64_t *ms);

#endif /* SHMTC_BYTES_H */
