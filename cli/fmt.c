/* SPDX-License-Identifier: MIT */
/*
 * Durations, relative times and sizes for people.  Precision is three
 * significant digits at most: enough to compare rows, few enough to read.
 */
#include "fmt.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define NS_US UINT64_C(1000)
#define NS_MS UINT64_C(1000000)
#define NS_S UINT64_C(1000000000)
#define NS_MIN (60 * NS_S)
#define NS_H (60 * NS_MIN)
#define NS_D (24 * NS_H)

/* VALUE / UNIT with one decimal below 100 units, none above, and a ".0"
 * dropped so that round values read as "1s", not "1.0s".  Rounding to one
 * decimal may carry into the next unit (999.96ms): callers pick the unit
 * from the rounded value. */
static char *
scaled(char *buf, size_t cap, uint64_t value, uint64_t unit, const char *sfx)
{
	uint64_t tenths = (value * 10 + unit / 2) / unit;

	/* Rounding twice (to tenths, then to units) would turn 123.46 into
	 * 124: whole numbers are rounded from VALUE itself. */
	if (tenths >= 1000)
		snprintf(buf, cap, "%" PRIu64 "%s", (value + unit / 2) / unit,
		    sfx);
	else if (tenths % 10 == 0)
		snprintf(buf, cap, "%" PRIu64 "%s", tenths / 10, sfx);
	else
		snprintf(buf, cap, "%" PRIu64 ".%" PRIu64 "%s", tenths / 10,
		    tenths % 10, sfx);
	return buf;
}

/* "2m05s", or "2m" when the smaller unit is zero.  Truncates: a person
 * reads "1m59s" as under two minutes, which it is. */
static void
two_units(char *buf, size_t cap, uint64_t ns, uint64_t big, const char *bs,
    uint64_t small, const char *ss)
{
	uint64_t rest = ns % big / small;

	if (rest == 0)
		snprintf(buf, cap, "%" PRIu64 "%s", ns / big, bs);
	else
		snprintf(buf, cap, "%" PRIu64 "%s%02" PRIu64 "%s", ns / big, bs,
		    rest, ss);
}

char *
shmtc_fmt_dur(char *buf, size_t cap, uint64_t ns)
{
	/* Below a second the thresholds sit half a unit under the next unit,
	 * so that 999.7ms prints as "1s" and never as "1000ms". */
	if (ns == 0)
		snprintf(buf, cap, "0s");
	else if (ns < NS_US)
		snprintf(buf, cap, "%" PRIu64 "ns", ns);
	else if (ns < NS_MS - NS_US / 2)
		scaled(buf, cap, ns, NS_US, "us");
	else if (ns < NS_S - NS_MS / 2)
		scaled(buf, cap, ns, NS_MS, "ms");
	else if (ns < NS_MIN)
		scaled(buf, cap, ns, NS_S, "s");
	else if (ns < NS_H)
		two_units(buf, cap, ns, NS_MIN, "m", NS_S, "s");
	else if (ns < NS_D)
		two_units(buf, cap, ns, NS_H, "h", NS_MIN, "m");
	else
		two_units(buf, cap, ns, NS_D, "d", NS_H, "h");
	return buf;
}

char *
shmtc_fmt_rel(char *buf, size_t cap, uint64_t t, uint64_t now)
{
	char d[SHMTC_FMT_MAX];

	if (t == now)
		snprintf(buf, cap, "now");
	else if (t > now)
		snprintf(buf, cap, "in %s", shmtc_fmt_dur(d, sizeof(d), t - now));
	else
		snprintf(buf, cap, "%s ago", shmtc_fmt_dur(d, sizeof(d), now - t));
	return buf;
}

char *
shmtc_fmt_bytes(char *buf, size_t cap, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	uint64_t unit = 1024;
	size_t i = 0;

	if (bytes < 1024) {
		snprintf(buf, cap, "%" PRIu64 " B", bytes);
		return buf;
	}
	while (i + 1 < sizeof(units) / sizeof(units[0]) &&
	    bytes >= unit * 1024 - unit / 20)
		unit *= 1024, i++;
	scaled(buf, cap, bytes, unit, "");
	strncat(buf, " ", cap - strlen(buf) - 1);
	strncat(buf, units[i], cap - strlen(buf) - 1);
	return buf;
}

char *
shmtc_fmt_pct(char *buf, size_t cap, uint64_t part, uint64_t whole)
{
	if (whole == 0)
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%u%%",
		    (unsigned)((part * 100 + whole / 2) / whole));
	return buf;
}
