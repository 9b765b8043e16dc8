/* SPDX-License-Identifier: MIT */
/*
 * Keys and values of the dictionary are any bytes; this file shows them
 * safely and reads them from a command line.  Kept free of the library and
 * of JSON so that its edges are unit-tested on their own.
 */
#include "bytes.h"

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

/* Nanoseconds per unit; the longest unit name is tried first so that "ms"
 * is not read as "m" followed by junk. */
static uint64_t
unit_ns(const char *u)
{
	static const struct { const char *name; uint64_t ns; } units[] = {
		{ "ns", 1 }, { "us", 1000 }, { "ms", 1000000 },
		{ "s", 1000000000ULL }, { "m", 60000000000ULL },
		{ "h", 3600000000000ULL }, { "d", 86400000000000ULL },
		{ "", 1000000000ULL },
	};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(u, units[i].name) == 0)
			return units[i].ns;
	return 0;
}

int
shmtc_parse_ms(const char *s, uint64_t *ms)
{
	uint64_t whole = 0, frac = 0, scale = 1, unit, ns, part;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (whole > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		/* Nine fraction digits reach nanoseconds; more cannot name a
		 * whole number of milliseconds anyway. */
		for (p++; *p >= '0' && *p <= '9'; p++) {
			if (scale == 1000000000ULL)
				return -EINVAL;
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
		if (scale == 1)
			return -EINVAL;
	}
	if ((unit = unit_ns(p)) == 0)
		return -EINVAL;
	if (whole > UINT64_MAX / unit)
		return -ERANGE;
	ns = whole * unit;
	/* Every unit of a second or more is a multiple of 10^9, so it
	 * divides by SCALE; a smaller unit is below SCALE and the product
	 * stays under 10^18. */
	if (unit % scale == 0)
		part = frac * (unit / scale);
	else if (frac * unit % scale == 0)
		part = frac * unit / scale;
	else
		return -EINVAL;
	if (ns > UINT64_MAX - part)
		return -ERANGE;
	ns += part;
	if (ns % 1000000 != 0)
		return -EINVAL;
	*ms = ns / 1000000;
	return 0;
}
