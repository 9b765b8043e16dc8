/* SPDX-License-Identifier: MIT */
/*
 * Keys and values of the dictionary are any bytes; this file shows them
 * safely and reads them from a command line.  Kept free of the library and
 * of JSON so that its edges are unit-tested on their own.
 */
#include "bytes.h"

#include "units.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

char *
shmtc_escape(const void *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *b = p;
	char *out, *q;

	/* Four characters per byte at most ("\xHH"), so N up to SIZE_MAX / 4
	 * cannot overflow; keys and values are far below that. */
	if (n > (SIZE_MAX - 1) / 4 || (out = malloc(n * 4 + 1)) == NULL)
		return NULL;
	q = out;
	for (size_t i = 0; i < n; i++) {
		if (b[i] == '\\') {
			*q++ = '\\';
			*q++ = '\\';
		} else if (b[i] >= 0x20 && b[i] < 0x7f) {
			*q++ = (char)b[i];
		} else {
			*q++ = '\\';
			*q++ = 'x';
			*q++ = hex[b[i] >> 4];
			*q++ = hex[b[i] & 15];
		}
	}
	*q = '\0';
	return out;
}

char *
shmtc_base64(const void *p, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *b = p;
	char *out, *q;
	size_t i;

	if (n > (SIZE_MAX - 1) / 4 * 3 - 2 ||
	    (out = malloc((n + 2) / 3 * 4 + 1)) == NULL)
		return NULL;
	q = out;
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 |
		    b[i + 2];

		*q++ = tab[v >> 18];
		*q++ = tab[(v >> 12) & 63];
		*q++ = tab[(v >> 6) & 63];
		*q++ = tab[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)b[i] << 16 |
		    (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0);

		*q++ = tab[v >> 18];
		*q++ = tab[(v >> 12) & 63];
		*q++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		*q++ = '=';
	}
	*q = '\0';
	return out;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
shmtc_hex_decode(const char *s, void *out, size_t cap, size_t *len)
{
	size_t n = strlen(s);
	unsigned char *o = out;

	if (n % 2 != 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 2)
		if (hexval(s[i]) < 0 || hexval(s[i + 1]) < 0)
			return -EINVAL;
	if (n / 2 > cap)
		return -E2BIG;
	for (size_t i = 0; i < n; i += 2)
		o[i / 2] = (unsigned char)(hexval(s[i]) << 4 | hexval(s[i + 1]));
	*len = n / 2;
	return 0;
}

/* The one duration parser (conf/units.c), then whole milliseconds only. */
int
shmtc_parse_ms(const char *s, uint64_t *ms)
{
	uint64_t ns;
	int rc = shmtd_parse_duration(s, &ns);

	if (rc != 0)
		return rc;
	if (ns % 1000000 != 0)
		return -EINVAL;
	*ms = ns / 1000000;
	return 0;
}
