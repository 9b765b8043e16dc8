/* SPDX-License-Identifier: MIT */
/*
 * The one reader of durations and sizes, for config files and the CLI
 * alike, and the writer that spells a value back so that it reads the same.
 */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct unit {
	const char *suffix;
	uint64_t mult;
};

#define NS_S 1000000000ULL

static const struct unit duration_units[] = {
	{ "", NS_S }, { "ns", 1 }, { "us", 1000 }, { "ms", 1000000 },
	{ "s", NS_S }, { "m", 60 * NS_S }, { "min", 60 * NS_S },
	{ "h", 3600 * NS_S }, { "d", 86400 * NS_S }, { NULL, 0 }
};

static const struct unit size_units[] = {
	{ "", 1 }, { "B", 1 },
	{ "K", 1ULL << 10 }, { "KiB", 1ULL << 10 }, { "KB", 1000ULL },
	{ "kB", 1000ULL },
	{ "M", 1ULL << 20 }, { "MiB", 1ULL << 20 }, { "MB", 1000000ULL },
	{ "G", 1ULL << 30 }, { "GiB", 1ULL << 30 }, { "GB", 1000000000ULL },
	{ "T", 1ULL << 40 }, { "TiB", 1ULL << 40 }, { "TB", 1000000000000ULL },
	{ NULL, 0 }
};

/*
 * Parse "I[.F]UNIT" exactly: the value is I * mult + F * mult / 10^k and
 * must be a whole number.  Integer arithmetic throughout (128-bit), so
 * "1.1s" is exactly 1100000000 ns, never 1099999999.
 */
static int
parse_units(const char *s, const struct unit *units, uint64_t *out)
{
	unsigned __int128 ip = 0, fp = 0, den = 1, v;
	int digits = 0;
	const char *p = s;

	while (isspace((unsigned char)*p))
		p++;
	for (; isdigit((unsigned char)*p); p++, digits++) {
		ip = ip * 10 + (unsigned)(*p - '0');
		if (ip > UINT64_MAX)
			return -ERANGE;
	}
	if (digits == 0)
		return -EINVAL;         /* ".5s": a digit comes first */
	if (*p == '.') {
		digits = 0;
		for (p++; isdigit((unsigned char)*p); p++, digits++) {
			if (den >= 1000000000000000000ULL)
				return -EINVAL; /* finer than any unit needs */
			fp = fp * 10 + (unsigned)(*p - '0');
			den *= 10;
		}
		if (digits == 0)
			return -EINVAL; /* "1.s": and one after the point */
	}
	while (isspace((unsigned char)*p))
		p++;
	for (const struct unit *u = units; u->suffix != NULL; u++) {
		size_t n = strlen(u->suffix);
		const char *q = p + n;

		if (strncmp(p, u->suffix, n) != 0)
			continue;
		while (isspace((unsigned char)*q))
			q++;
		if (*q != '\0')
			continue;
		if ((fp * u->mult) % den != 0)
			return -EINVAL;
		v = ip * u->mult + fp * u->mult / den;
		if (v > UINT64_MAX)
			return -ERANGE;
		*out = (uint64_t)v;
		return 0;
	}
	return -EINVAL;
}

int
shmtd_parse_duration(const char *s, uint64_t *ns)
{
	if (s == NULL || ns == NULL)
		return -EINVAL;
	return parse_units(s, duration_units, ns);
}

int
shmtd_parse_size(const char *s, uint64_t *bytes)
{
	if (s == NULL || bytes == NULL)
		return -EINVAL;
	return parse_units(s, size_units, bytes);
}

char *
shmtd_format_duration(uint64_t ns, char *buf, size_t cap)
{
	static const struct unit order[] = {
		{ "d", 86400 * NS_S }, { "h", 3600 * NS_S }, { "m", 60 * NS_S },
		{ "s", NS_S }, { "ms", 1000000 }, { "us", 1000 }, { "ns", 1 },
	};
	size_t i = 0;

	if (ns == 0) {
		snprintf(buf, cap, "0s");
		return buf;
	}
	while (ns % order[i].mult != 0)
		i++;
	snprintf(buf, cap, "%" PRIu64 "%s", ns / order[i].mult, order[i].suffix);
	return buf;
}

char *
shmtd_format_size(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const names[] = { "TiB", "GiB", "MiB", "KiB" };

	for (int i = 0; i < 4; i++) {
		uint64_t m = 1ULL << (10 * (4 - i));

		if (bytes != 0 && bytes % m == 0) {
			snprintf(buf, cap, "%" PRIu64 "%s", bytes / m, names[i]);
			return buf;
		}
	}
	snprintf(buf, cap, "%" PRIu64, bytes);
	return buf;
}

int
shmtd_parse_rule(const char *s, int *kind, uint64_t *limit)
{
	size_t n;
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	*kind = 0;
	*limit = 0;
	if (n == 5 && strncmp(s, "allow", 5) == 0) {
		*kind = 2;
		return 0;
	}
	if (n == 4 && strncmp(s, "deny", 4) == 0) {
		*kind = 3;
		return 0;
	}
	if (n < 7 || strncmp(s, "limit=", 6) != 0 || s[6] < '0' || s[6] > '9')
		return -EINVAL;
	errno = 0;
	*limit = strtoull(s + 6, &end, 10);
	if ((size_t)(end - s) != n)
		return -EINVAL;
	if (errno != 0 || *limit > 0x7fffffffULL)
		return -ERANGE;
	if (*limit == 0)
		return -EINVAL;
	*kind = 1;
	return 0;
}
