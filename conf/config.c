/* SPDX-License-Identifier: MIT */
/*
 * The daemon's configuration: an INI file parsed with inih into a
 * struct shmtd_config, checked key by key (every error names the file, the
 * line and the key), resolved (defaults filled in, derived values computed)
 * and printed back as INI.  The built-in default is itself INI text parsed
 * by the same code, so it cannot drift from what a file may say.
 */
#include "config.h"
#include "addr.h"
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <ini.h>

static const char builtin_config[] =
    "[segment]\n"
    "name = " SHMT_DEFAULT_SEGMENT "\n"
    "[limiter api]\n"
    "limit = 100\n"
    "window = 1s\n"
    "slack_time = 100ms\n"
    "slack_uses = 10\n"
    "[limiter keys]\n"
    "keys = key-1, key-2, key-3, key-4\n"
    "uses_per_key = 5\n"
    "window = 1s\n"
    "slack_time = 100ms\n"
    "slack_uses = 5\n"
    "[limiter per-ip]\n"
    "per_client = yes\n"
    "limit = 10\n"
    "window = 1s\n"
    "slack_time = 100ms\n"
    "slack_uses = 1\n"
    "capacity = 4096\n"
    "[dictionary]\n"
    "enabled = yes\n"
    "[analyzer]\n"
    "enabled = yes\n"
    "[counters]\n"
    "enabled = yes\n";

/* ---- Key tables ---------------------------------------------------------- */

enum ktype { K_U32, K_U64, K_DUR, K_SIZE, K_BOOL, K_STR, K_SEGNAME, K_MODE,
	K_GROUP, K_LMODE, K_KEYS, K_EVICT, K_LOG, K_PCT, K_ADDR, K_REDIS, K_ERR,
	K_OVR };

struct keydef {
	const char *name;
	enum ktype type;
	size_t off;           /* in the section's base object */
	size_t cap;           /* K_STR */
};

enum section { S_SEGMENT, S_DICT, S_ANALYZER, S_COUNTERS, S_DAEMON,
	S_GLOBAL, S_LIMITER, S_COUNT };

#define CF(f) offsetof(struct shmtd_config, f)
#define LF(f) offsetof(struct shmtd_limiter, f)

static const struct keydef segment_keys[] = {
	{ "name", K_SEGNAME, CF(segment), 0 },
	{ "mode", K_MODE, CF(seg.mode), 0 },
	{ "group", K_GROUP, CF(seg.gid), 0 },
	{ "max_limiters", K_U32, CF(seg.max_limiters), 0 },
	{ "max_slots", K_U32, CF(seg.max_slots), 0 },
	{ "arena", K_SIZE, CF(seg.arena_bytes), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct keydef limiter_keys[] = {
	{ "limit", K_U64, LF(limit.limit), 0 },
	{ "window", K_DUR, LF(limit.window_ns), 0 },
	{ "slack_time", K_DUR, LF(limit.slack_ns), 0 },
	{ "slack_uses", K_U64, LF(limit.slack_uses), 0 },
	{ "mode", K_LMODE, LF(limit.mode), 0 },
	{ "keys", K_KEYS, 0, 0 },
	{ "uses_per_key", K_U32, LF(limit.uses_per_key), 0 },
	{ "per_client", K_BOOL, LF(limit.per_client), 0 },
	{ "capacity", K_U32, LF(limit.client_capacity), 0 },
	{ "overrides", K_U32, LF(limit.client_overrides), 0 },
	{ "override", K_OVR, 0, 0 },
	{ "burst", K_U64, LF(limit.burst), 0 },
	{ "shadow", K_BOOL, LF(limit.shadow), 0 },
	{ "global", K_BOOL, LF(limit.global), 0 },
	{ "offline_limit", K_U64, LF(offline_limit), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct keydef dict_keys[] = {
	{ "enabled", K_BOOL, CF(dict.enabled), 0 },
	{ "size", K_SIZE, CF(dict.size), 0 },
	{ "shards", K_U32, CF(dict.shards), 0 },
	{ "max_key", K_SIZE, CF(dict.max_key), 0 },
	{ "max_value", K_SIZE, CF(dict.max_value), 0 },
	{ "eviction", K_EVICT, CF(dict.eviction), 0 },
	{ "default_ttl", K_DUR, CF(dict.default_ttl_ns), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct keydef analyzer_keys[] = {
	{ "enabled", K_BOOL, CF(analyzer.enabled), 0 },
	{ "size", K_SIZE, CF(analyzer.size), 0 },
	{ "window", K_DUR, CF(analyzer.window_ns), 0 },
	{ "subwindows", K_U32, CF(analyzer.subwindows), 0 },
	{ "threshold", K_PCT, CF(analyzer.threshold_pct), 0 },
	{ "clients", K_BOOL, CF(analyzer.clients), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct keydef counters_keys[] = {
	{ "enabled", K_BOOL, CF(counters.enabled), 0 },
	{ "size", K_SIZE, CF(counters.size), 0 },
	{ "shards", K_U32, CF(counters.shards), 0 },
	{ "window", K_DUR, CF(counters.window_ns), 0 },
	{ "error", K_ERR, CF(counters.error_ppm), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct keydef daemon_keys[] = {
	{ "snapshot", K_STR, CF(snapshot), sizeof(((struct shmtd_config *)0)->snapshot) },
	{ "snapshot_interval", K_DUR, CF(snapshot_interval_ns), 0 },
	{ "log", K_LOG, CF(log_target), 0 },
	{ "metrics", K_ADDR, CF(metrics), sizeof(((struct shmtd_config *)0)->metrics) },
	{ "delete_removed", K_BOOL, CF(delete_removed), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct keydef global_keys[] = {
	{ "redis", K_REDIS, CF(global.redis), sizeof(((struct shmtd_config *)0)->global.redis) },
	{ "host", K_STR, CF(global.host), sizeof(((struct shmtd_config *)0)->global.host) },
	{ "replicas", K_U32, CF(global.replicas), 0 },
	{ NULL, 0, 0, 0 }
};

static const struct {
	const char *name;
	const struct keydef *keys;
} sections[S_COUNT] = {
	[S_SEGMENT] = { "segment", segment_keys },
	[S_DICT] = { "dictionary", dict_keys },
	[S_ANALYZER] = { "analyzer", analyzer_keys },
	[S_COUNTERS] = { "counters", counters_keys },
	[S_DAEMON] = { "daemon", daemon_keys },
	[S_GLOBAL] = { "global", global_keys },
	[S_LIMITER] = { "limiter", limiter_keys },
};

/* Which keys a section object has seen, and on which line. */
#define KEYS_MAX 16
struct seen {
	uint32_t bits;
	int first_line;
	int line[KEYS_MAX];
};

struct parse {
	struct shmtd_config *cfg;
	const char *file;
	/* The source: a FILE, or the rest of a string. */
	FILE *f;
	const char *str;
	int line;
	/* The section of the lines read so far, tracked here by inih's own
	 * rules: inih cuts a section name to 49 bytes, and calls the handler
	 * for keys only, so an empty section would pass unseen. */
	char section[256];
	int after_key;        /* a key line seen since the last header */
	struct seen fixed[S_LIMITER];
	struct seen *lseen;   /* one per limiter */
	size_t lcap;
	char *err;
	size_t errcap;
	int err_line;         /* 0: no error yet */
	int rc;
};

static void
fail(struct parse *p, int line, const char *key, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	if (p->err_line != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	p->err_line = line > 0 ? line : 1;
	if (p->rc == 0)
		p->rc = -EINVAL;
	if (p->err == NULL || p->errcap == 0)
		return;
	if (key != NULL)
		snprintf(p->err, p->errcap, "%s:%d: key '%s': %s", p->file,
		    p->err_line, key, what);
	else
		snprintf(p->err, p->errcap, "%s:%d: %s", p->file, p->err_line,
		    what);
}

/* True when the source has nothing left to read. */
static int
at_end(struct parse *p)
{
	int ch;

	if (p->f == NULL)
		return *p->str == '\0';
	if ((ch = getc(p->f)) == EOF)
		return 1;
	ungetc(ch, p->f);
	return 0;
}

static int section_open(struct parse *p, const char *name);

/*
 * Follow inih's reading of one line (lskip, comment, continuation, section
 * header, key) to know the section: a header line opens a section here, so
 * that an unknown or empty one is refused at its own line, and the full
 * name is kept.
 */
static void
track_line(struct parse *p, const char *line)
{
	const char *s = line, *e;
	int was_space = 0;
	char name[sizeof(p->section)];
	size_t n;

	if (p->line == 1 && (unsigned char)s[0] == 0xEF &&
	    (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
		s += 3;
	while (*s != '\0' && isspace((unsigned char)*s))
		s++;
	if (*s == '\0' || *s == ';' || *s == '#')
		return;
	if (p->after_key && s > line)
		return; /* a continuation line */
	if (*s != '[') {
		p->after_key = 1;
		return;
	}
	/* inih: up to ']' or an inline comment (';' after a space). */
	for (e = s + 1; *e != '\0' && *e != ']' && !(was_space && *e == ';');
	    e++)
		was_space = isspace((unsigned char)*e);
	if (*e != ']')
		return; /* inih reports the syntax error */
	n = (size_t)(e - (s + 1));
	if (n >= sizeof(name)) {
		fail(p, p->line, NULL, "section name longer than %zu bytes",
		    sizeof(name) - 1);
		return;
	}
	memcpy(name, s + 1, n);
	name[n] = '\0';
	memcpy(p->section, name, n + 1);
	p->after_key = 0;
	section_open(p, name);
}

/*
 * The line reader for inih: counts lines so the handler knows where it is,
 * refuses a NUL byte (which would cut the line short unseen) and a line
 * longer than inih's buffer, which inih would otherwise split silently into
 * two lines, and tracks sections (track_line).
 */
static char *
read_line(char *buf, int cap, void *stream)
{
	struct parse *p = stream;
	size_t n = 0;
	int nul = 0;

	if (p->f != NULL) {
		int ch = EOF;

		while (n < (size_t)cap - 1 && (ch = getc(p->f)) != EOF) {
			if (ch == '\0')
				nul = 1;
			buf[n++] = (char)ch;
			if (ch == '\n')
				break;
		}
		if (n == 0)
			return NULL;
		buf[n] = '\0';
	} else {
		const char *nl;

		if (*p->str == '\0')
			return NULL;
		nl = strchr(p->str, '\n');
		n = nl != NULL ? (size_t)(nl - p->str) + 1 : strlen(p->str);
		if (n >= (size_t)cap)
			n = (size_t)cap - 1;
		memcpy(buf, p->str, n);
		buf[n] = '\0';
		p->str += n;
	}
	p->line++;
	if (nul) {
		fail(p, p->line, NULL, "NUL byte in the line (a config is "
		    "text)");
		return NULL;
	}
	if (n == (size_t)cap - 1 && buf[n - 1] != '\n' && !at_end(p)) {
		fail(p, p->line, NULL, "line longer than %d characters "
		    "(continue a long value on indented lines)", cap - 2);
		p->rc = -E2BIG;
		return NULL;
	}
	if (p->err_line == 0)
		track_line(p, buf);
	return buf;
}

static int
parse_u64(const char *v, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (!isdigit((unsigned char)v[0]))
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno == ERANGE || x > max)
		return -ERANGE;
	while (isspace((unsigned char)*end))
		end++;
	if (*end != '\0')
		return -EINVAL;
	*out = x;
	return 0;
}

/* An error bound: a percentage ("1%", "0.25%") or a fraction ("0.01"),
 * into parts per million, rounded to the nearest.  Only its form is read
 * here (above 0, below 100%); the library's check says which values it
 * takes (shmt_config_check: counters_error_ppm). */
static int
parse_error_ppm(const char *v, uint32_t *out)
{
	char num[32], *end;
	size_t n = strlen(v);
	int pct = n > 0 && v[n - 1] == '%';
	double x;

	if (pct)
		n--;
	if (n == 0 || n >= sizeof(num) || !(isdigit((unsigned char)v[0]) ||
	    v[0] == '.'))
		return -EINVAL;
	snprintf(num, sizeof(num), "%.*s", (int)n, v);
	errno = 0;
	x = strtod(num, &end);
	if (*end != '\0' || errno != 0)
		return -EINVAL;
	x *= pct ? 10000.0 : 1000000.0;
	if (!(x > 0.0) || x >= 1000000.0)
		return -ERANGE;
	*out = (uint32_t)(x + 0.5);
	return *out == 0 ? -ERANGE : 0;
}

static int
parse_bool(const char *v, int *out)
{
	static const char *const yes[] = { "yes", "true", "on", "1", NULL };
	static const char *const no[] = { "no", "false", "off", "0", NULL };

	for (int i = 0; yes[i] != NULL; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -EINVAL;
}

static int
choose(const char *v, const char *const *choices, char *dst, size_t cap)
{
	for (int i = 0; choices[i] != NULL; i++)
		if (strcmp(v, choices[i]) == 0) {
			snprintf(dst, cap, "%s", choices[i]);
			return 0;
		}
	return -EINVAL;
}

static int
segname_ok(const char *v)
{
	size_t n = strlen(v);

	return v[0] == '/' && n >= 2 && n <= SHMT_SEGNAME_MAX &&
	    strchr(v + 1, '/') == NULL && strcmp(v, "/.") != 0 &&
	    strcmp(v, "/..") != 0;
}

static int
keyname_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One `override = ID RULE` line: ID (no blanks, 1 to
 * SHMT_OVERRIDE_ID_MAX bytes) and RULE (limit=N, allow or deny). */
static int
add_override(struct parse *p, struct shmtd_limiter *lim, const char *v)
{
	struct shmtd_override *o;
	const char *b = v, *e;
	size_t n;
	int rc;

	while (isspace((unsigned char)*b))
		b++;
	for (e = b; *e != '\0' && !isspace((unsigned char)*e); e++)
		;
	n = (size_t)(e - b);
	if (n == 0 || *e == '\0') {
		fail(p, p->line, "override", "expected 'CLIENT RULE' (RULE: "
		    "limit=N, allow or deny), got '%s'", v);
		return -EINVAL;
	}
	if (n > SHMT_OVERRIDE_ID_MAX) {
		fail(p, p->line, "override", "client id longer than %u bytes",
		    SHMT_OVERRIDE_ID_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < lim->noverrides; i++)
		if (strlen(lim->overrides[i].id) == n &&
		    memcmp(lim->overrides[i].id, b, n) == 0) {
			fail(p, p->line, "override", "client '%.*s' given twice "
			    "(first on line %d)", (int)n, b,
			    lim->overrides[i].line);
			return -EINVAL;
		}
	if (lim->noverrides >= SHMT_OVERRIDES_MAX) {
		fail(p, p->line, "override", "more than %u overrides",
		    SHMT_OVERRIDES_MAX);
		return -EINVAL;
	}
	o = realloc(lim->overrides, (lim->noverrides + 1) * sizeof(*o));
	if (o == NULL)
		return -ENOMEM;
	lim->overrides = o;
	o = &o[lim->noverrides];
	memset(o, 0, sizeof(*o));
	memcpy(o->id, b, n);
	o->line = p->line;
	if ((rc = shmtd_parse_rule(e, &o->rule.kind, &o->rule.limit)) != 0) {
		fail(p, p->line, "override", rc == -ERANGE ? "client '%s': "
		    "the limit is out of range (1 to 2147483647)" :
		    "client '%s': the rule is limit=N, allow or deny", o->id);
		return -EINVAL;
	}
	lim->noverrides++;
	return 0;
}

/* Append the comma-separated names of V to the key pool of LIM. */
static int
add_keys(struct parse *p, struct shmtd_limiter *lim, const char *v)
{
	const char *s = v;

	while (*s != '\0') {
		const char *e = strchr(s, ',');
		size_t n = e != NULL ? (size_t)(e - s) : strlen(s);
		const char *b = s, *t = s + n;
		char **keys;

		while (b < t && isspace((unsigned char)*b))
			b++;
		while (t > b && isspace((unsigned char)t[-1]))
			t--;
		if (t == b) {
			if (e == NULL && b != v)
				break; /* a trailing comma ends the line */
			fail(p, p->line, "keys", "empty key name in '%s'", v);
			return -EINVAL;
		}
		if (*b == ';' || *b == '#') {
			/* Printed back after ", " or at the start of an
			 * indented line, it would read as a comment. */
			fail(p, p->line, "keys", "key name '%.*s' starts with "
			    "'%c', which starts a comment", (int)(t - b), b, *b);
			return -EINVAL;
		}
		if ((size_t)(t - b) > SHMT_KEYNAME_MAX) {
			fail(p, p->line, "keys", "key name longer than %d bytes",
			    SHMT_KEYNAME_MAX);
			return -EINVAL;
		}
		if (lim->limit.nkeys >= SHMT_KEYS_MAX) {
			fail(p, p->line, "keys", "more than %d key names",
			    SHMT_KEYS_MAX);
			return -EINVAL;
		}
		keys = realloc(lim->keys, (lim->limit.nkeys + 1) * sizeof(*keys));
		if (keys == NULL)
			return -ENOMEM;
		lim->keys = keys;
		keys[lim->limit.nkeys] = strndup(b, (size_t)(t - b));
		if (keys[lim->limit.nkeys] == NULL)
			return -ENOMEM;
		lim->limit.nkeys++;
		lim->limit.keys = (const char *const *)lim->keys;
		if (e == NULL)
			break;
		s = e + 1;
	}
	return 0;
}

/* Store value V of key K into BASE; returns 0 or fails P. */
static int
set_value(struct parse *p, const struct keydef *k, char *base, const char *v)
{
	static const char *const lmodes[] = { "buckets", "exact", "gcra", "rate",
		NULL };
	static const char *const evictions[] = { "lru", "none", NULL };
	static const char *const logs[] = { "stderr", "syslog", NULL };
	void *dst = base + k->off;
	uint64_t x;
	char tmp[16];
	struct sockaddr_storage ss;
	socklen_t sslen;
	int rc = 0, b;

	switch (k->type) {
	case K_U32:
		if ((rc = parse_u64(v, UINT32_MAX, &x)) == 0)
			*(uint32_t *)dst = (uint32_t)x;
		break;
	case K_U64:
		rc = parse_u64(v, UINT64_MAX, (uint64_t *)dst);
		break;
	case K_DUR:
		rc = shmtd_parse_duration(v, (uint64_t *)dst);
		break;
	case K_SIZE:
		rc = shmtd_parse_size(v, (uint64_t *)dst);
		break;
	case K_BOOL:
		if ((rc = parse_bool(v, &b)) == 0)
			*(int *)dst = b;
		break;
	case K_REDIS: {
		struct shmtd_redis_addr seeds[SHMTD_REDIS_SEEDS_MAX];

		if (shmtd_redis_seeds(v, seeds, SHMTD_REDIS_SEEDS_MAX) < 0) {
			fail(p, p->line, k->name, "'%s' is not a Redis address "
			    "(unix:/absolute/path or tcp://HOST:PORT, or up to "
			    "%d of them, separated by spaces or commas, for the "
			    "seeds of a Redis Cluster; or "
			    "sentinel://HOST:PORT/MASTER, one or more, all for "
			    "one MASTER)", v,
			    SHMTD_REDIS_SEEDS_MAX);
			return -EINVAL;
		}
		if (strlen(v) >= k->cap)
			rc = -ERANGE;
		else
			snprintf(dst, k->cap, "%s", v);
		break;
	}
	case K_ADDR:
		if (shmtd_addr_parse(v, &ss, &sslen) != 0)
			rc = -EINVAL;
		/* FALLTHROUGH */
	case K_STR:
		if (rc == 0 && strlen(v) >= k->cap)
			rc = -ERANGE;
		else if (rc == 0)
			snprintf(dst, k->cap, "%s", v);
		break;
	case K_SEGNAME:
		if (!segname_ok(v)) {
			fail(p, p->line, k->name, "'%s' is not a segment name "
			    "(one leading '/', no other, at most %d bytes)", v,
			    SHMT_SEGNAME_MAX);
			return -EINVAL;
		}
		snprintf(dst, SHMT_SEGNAME_MAX + 1, "%s", v);
		break;
	case K_MODE: {
		char *end;
		unsigned long m = strtoul(v, &end, 8);

		if (!isdigit((unsigned char)*v) || *end != '\0' || m > 0777)
			rc = -EINVAL;
		else if (m & 02) {
			/* The library refuses it: nobody trusts a segment
			 * that every user may write. */
			fail(p, p->line, k->name, "mode %04lo lets every user "
			    "write the segment, which nobody would then trust "
			    "(use 0600, or 0660 with a group)", m);
			return -EINVAL;
		} else
			*(mode_t *)dst = (mode_t)m;
		break;
	}
	case K_GROUP: {
		struct group *g = NULL;

		if (parse_u64(v, INT32_MAX, &x) == 0) {
			*(gid_t *)dst = (gid_t)x;
			break;
		}
		g = getgrnam(v);
		if (g == NULL) {
			fail(p, p->line, k->name, "no group named '%s'", v);
			return -EINVAL;
		}
		*(gid_t *)dst = g->gr_gid;
		break;
	}
	case K_LMODE:
		if ((rc = choose(v, lmodes, tmp, sizeof(tmp))) == 0)
			/* "rate" is the CLI's name of the same mode. */
			*(int *)dst = strcmp(tmp, "exact") == 0 ?
			    SHMT_MODE_EXACT : strcmp(tmp, "gcra") == 0 ||
			    strcmp(tmp, "rate") == 0 ?
			    SHMT_MODE_GCRA : SHMT_MODE_BUCKETS;
		break;
	case K_KEYS:
		return add_keys(p, (struct shmtd_limiter *)base, v);
	case K_OVR:
		return add_override(p, (struct shmtd_limiter *)base, v);
	case K_EVICT:
		rc = choose(v, evictions, dst, 16);
		break;
	case K_LOG:
		rc = choose(v, logs, dst, 16);
		break;
	case K_ERR:
		rc = parse_error_ppm(v, (uint32_t *)dst);
		break;
	case K_PCT: {
		char num[32];
		size_t n = strlen(v);

		if (n > 0 && n < sizeof(num) && v[n - 1] == '%')
			n--;
		snprintf(num, sizeof(num), "%.*s", (int)n, v);
		if ((rc = parse_u64(num, 99, &x)) == 0 && x == 0)
			rc = -ERANGE;
		if (rc == 0)
			*(uint32_t *)dst = (uint32_t)x;
		break;
	}
	}
	if (rc == -ERANGE)
		fail(p, p->line, k->name, "value '%s' is out of range", v);
	else if (rc != 0)
		fail(p, p->line, k->name, "cannot read '%s' as %s", v,
		    k->type == K_DUR ? "a duration (e.g. 500ms, 1.5s, 10m, 24h)" :
		    k->type == K_SIZE ? "a size (e.g. 4096, 64KiB, 16MiB, 1GB)" :
		    k->type == K_BOOL ? "yes or no" :
		    k->type == K_MODE ? "an octal mode (e.g. 0660)" :
		    k->type == K_LMODE ? "buckets, exact, or rate (gcra)" :
		    k->type == K_EVICT ? "lru or none" :
		    k->type == K_LOG ? "stderr or syslog" :
		    k->type == K_PCT ? "a percentage from 1 to 99" :
		    k->type == K_ERR ? "an error as a percentage or a fraction "
		    "(e.g. 1% or 0.01)" :
		    k->type == K_ADDR ? "IPV4:PORT or [IPV6]:PORT" :
		    "a whole number");
	return rc;
}

static int
limiter_name_ok(const char *n)
{
	size_t len = strlen(n);

	if (len == 0 || len > SHMT_LIMITER_NAME_MAX)
		return 0;
	for (; *n != '\0'; n++)
		if (!isalnum((unsigned char)*n) && strchr("._:-", *n) == NULL)
			return 0;
	return 1;
}

/* The limiter named NAME, created on first mention. */
static struct shmtd_limiter *
limiter_get(struct parse *p, const char *name, struct seen **seen)
{
	struct shmtd_config *c = p->cfg;
	struct shmtd_limiter *l;

	for (size_t i = 0; i < c->nlimiters; i++)
		if (strcmp(c->limiters[i].name, name) == 0) {
			*seen = &p->lseen[i];
			return &c->limiters[i];
		}
	if (c->nlimiters == p->lcap) {
		size_t cap = p->lcap == 0 ? 8 : p->lcap * 2;
		struct shmtd_limiter *nl;
		struct seen *ns;

		nl = realloc(c->limiters, cap * sizeof(*nl));
		if (nl == NULL)
			return NULL;
		c->limiters = nl;
		ns = realloc(p->lseen, cap * sizeof(*ns));
		if (ns == NULL)
			return NULL;
		p->lseen = ns;
		p->lcap = cap;
	}
	l = &c->limiters[c->nlimiters];
	memset(l, 0, sizeof(*l));
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->line = p->line;
	*seen = &p->lseen[c->nlimiters];
	memset(*seen, 0, sizeof(**seen));
	c->nlimiters++;
	return l;
}

/* Find the section object and key table for SECTION. */
static int
section_lookup(struct parse *p, const char *section, const char *key,
    char **base, const struct keydef **keys, struct seen **seen)
{
	char word[32], rest[256];
	int n = 0;

	word[0] = rest[0] = '\0';
	sscanf(section, "%31s %255[^\n]%n", word, rest, &n);
	for (int i = 0; i < S_LIMITER; i++)
		if (strcmp(section, sections[i].name) == 0) {
			*base = (char *)p->cfg;
			*keys = sections[i].keys;
			*seen = &p->fixed[i];
			return 0;
		}
	if (strcmp(word, "limiter") != 0) {
		fail(p, p->line, key, "unknown section [%s] (expected segment, "
		    "limiter NAME, dictionary, analyzer, counters, daemon or "
		    "global)",
		    section);
		return -EINVAL;
	}
	for (size_t t = strlen(rest); t > 0 && isspace((unsigned char)rest[t - 1]); t--)
		rest[t - 1] = '\0';
	if (!limiter_name_ok(rest)) {
		fail(p, p->line, key, "[%s]: a limiter name is 1 to %d letters, "
		    "digits, '.', '_', ':' or '-'", section, SHMT_LIMITER_NAME_MAX);
		return -EINVAL;
	}
	*base = (char *)limiter_get(p, rest, seen);
	if (*base == NULL)
		return -ENOMEM;
	*keys = limiter_keys;
	return 0;
}

/* A section header on the current line: refuse an unknown section there,
 * even one without keys, and create a limiter (an empty [limiter NAME] then
 * fails its checks instead of vanishing). */
static int
section_open(struct parse *p, const char *name)
{
	const struct keydef *keys;
	struct seen *seen;
	char *base;
	int rc = section_lookup(p, name, NULL, &base, &keys, &seen);

	if (rc == -ENOMEM)
		p->rc = rc;
	if (rc == 0 && seen->first_line != 0) {
		/* Two sections of one name would merge unseen: a second
		 * [limiter a] pasted below the first would change it. */
		fail(p, p->line, NULL, "section [%s] given twice (first on "
		    "line %d)", name, seen->first_line);
		return -EINVAL;
	}
	if (rc == 0)
		seen->first_line = p->line;
	return rc;
}

static int
on_key(void *user, const char *section, const char *name, const char *value)
{
	struct parse *p = user;
	const struct keydef *keys;
	struct seen *seen;
	char *base;
	int rc, i;

	if (p->err_line != 0)
		return 1; /* report the first error only */
	/* inih's copy of the section name is cut at 49 bytes. */
	(void)section;
	section = p->section;
	rc = section_lookup(p, section, name, &base, &keys, &seen);
	if (rc == -ENOMEM)
		p->rc = rc;
	if (rc != 0)
		return 0;
	for (i = 0; keys[i].name != NULL; i++)
		if (strcmp(keys[i].name, name) == 0)
			break;
	if (keys[i].name == NULL) {
		if (strcmp(section, "counters") == 0 &&
		    strcmp(name, "subwindows") == 0)
			fail(p, p->line, name, "no longer a key of [counters]: "
			    "the counters keep exponential histograms, not "
			    "sub-windows; their error is `error` (default 1%%)");
		else
			fail(p, p->line, name, "unknown key in [%s]", section);
		return 0;
	}
	/* A key pool may go on over several lines, and inih hands indented
	 * continuation lines over as the same key again. */
	if ((seen->bits & (1U << i)) && keys[i].type != K_KEYS &&
	    keys[i].type != K_OVR) {
		fail(p, p->line, name, "given twice in [%s] (first on line %d)",
		    section, seen->line[i]);
		return 0;
	}
	if (seen->bits == 0 && seen->first_line == 0)
		seen->first_line = p->line;
	seen->bits |= 1U << i;
	seen->line[i] = p->line;
	rc = set_value(p, &keys[i], base, value);
	if (rc == -ENOMEM)
		p->rc = rc;
	return rc == 0;
}

/* ---- Defaults and checks after parsing --------------------------------- */

static void
defaults(struct shmtd_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->segment, sizeof(c->segment), "%s", SHMT_DEFAULT_SEGMENT);
	shmt_config_init(&c->seg);
	/* The dictionary and the counters start from the library's own
	 * defaults, so the two never disagree. */
	c->dict.enabled = c->seg.dict_bytes != 0;
	c->dict.size = c->seg.dict_bytes;
	c->dict.shards = c->seg.dict_shards;
	c->dict.max_key = c->seg.dict_max_key;
	c->dict.max_value = c->seg.dict_max_value;
	c->dict.default_ttl_ns = c->seg.dict_default_ttl_ms * 1000000;
	snprintf(c->dict.eviction, sizeof(c->dict.eviction), "%s",
	    c->seg.dict_eviction ? "lru" : "none");
	c->analyzer.enabled = c->seg.analyzer_bytes != 0;
	c->analyzer.size = c->seg.analyzer_bytes;
	c->analyzer.window_ns = c->seg.analyzer_window_ns;
	c->analyzer.subwindows = c->seg.analyzer_subwindows;
	c->analyzer.threshold_pct = c->seg.analyzer_threshold_ppm / 10000;
	c->analyzer.clients = c->seg.analyzer_clients != 0;
	c->counters.enabled = c->seg.counters_bytes != 0;
	c->counters.size = c->seg.counters_bytes;
	c->counters.shards = c->seg.counters_shards;
	c->counters.window_ns = c->seg.counters_window_ns;
	c->counters.subwindows = c->seg.counters_subwindows;
	c->counters.error_ppm = c->seg.counters_error_ppm;
	c->snapshot_interval_ns = 60 * 1000000000ULL;
	snprintf(c->log_target, sizeof(c->log_target), "stderr");
}

/* True when S has seen key K. */
static int
has_key(const struct seen *s, const struct keydef *keys, const char *k)
{
	for (int i = 0; keys[i].name != NULL; i++)
		if (strcmp(keys[i].name, k) == 0)
			return (s->bits & (1U << i)) != 0;
	return 0;
}

/* The line of key K in S, or the section's first line when K is absent. */
static int
key_line(const struct seen *s, const struct keydef *keys, const char *k)
{
	for (int i = 0; keys[i].name != NULL; i++)
		if (strcmp(keys[i].name, k) == 0 && (s->bits & (1U << i)))
			return s->line[i];
	return s->first_line;
}

#define LFAIL(key, ...) \
	fail(p, key_line(s, limiter_keys, key), key, __VA_ARGS__)
/* An error about override I of LIM: it names that override's own line. */
#define OFAIL(i, ...) \
	fail(p, lim->overrides[(i)].line, "override", __VA_ARGS__)

/* The config key that holds field FIELD of a library rule ("FIELD: rule",
 * as shmt_limit_check and shmt_config_check write it). */
struct field_key {
	const char *field;
	enum section sec;
	const char *key;
};

static const struct field_key limit_fields[] = {
	{ "limit", S_LIMITER, "limit" }, { "window_ns", S_LIMITER, "window" },
	{ "slack_ns", S_LIMITER, "slack_time" },
	{ "slack_uses", S_LIMITER, "slack_uses" },
	{ "mode", S_LIMITER, "mode" }, { "keys", S_LIMITER, "keys" },
	{ "nkeys", S_LIMITER, "keys" },
	{ "uses_per_key", S_LIMITER, "uses_per_key" },
	{ "per_client", S_LIMITER, "per_client" },
	{ "client_capacity", S_LIMITER, "capacity" },
	{ "burst", S_LIMITER, "burst" }, { "shadow", S_LIMITER, "shadow" },
	{ "global", S_LIMITER, "global" },
	{ NULL, 0, NULL }
};

static const struct field_key config_fields[] = {
	{ "mode", S_SEGMENT, "mode" },
	{ "max_limiters", S_SEGMENT, "max_limiters" },
	{ "max_slots", S_SEGMENT, "max_slots" },
	{ "arena_bytes", S_SEGMENT, "arena" },
	{ "dict_bytes", S_DICT, "size" }, { "dict_shards", S_DICT, "shards" },
	{ "dict_eviction", S_DICT, "eviction" },
	{ "dict_max_key", S_DICT, "max_key" },
	{ "dict_max_value", S_DICT, "max_value" },
	{ "dict_default_ttl_ms", S_DICT, "default_ttl" },
	{ "counters_bytes", S_COUNTERS, "size" },
	{ "counters_shards", S_COUNTERS, "shards" },
	{ "counters_subwindows", S_COUNTERS, "subwindows" },
	{ "counters_window_ns", S_COUNTERS, "window" },
	{ "counters_error_ppm", S_COUNTERS, "error" },
	{ "analyzer_bytes", S_ANALYZER, "size" },
	{ "analyzer_window_ns", S_ANALYZER, "window" },
	{ "analyzer_subwindows", S_ANALYZER, "subwindows" },
	{ "analyzer_threshold_ppm", S_ANALYZER, "threshold" },
	{ "analyzer_clients", S_ANALYZER, "clients" },
	{ NULL, 0, NULL }
};

/* The entry of TABLE for the field WHY starts with (NULL: none). */
static const struct field_key *
field_of(const struct field_key *table, const char *why)
{
	size_t n = strcspn(why, ":");

	for (; table->field != NULL; table++)
		if (strlen(table->field) == n &&
		    strncmp(table->field, why, n) == 0)
			return table;
	return NULL;
}

/* The index of LIM's first limit= override, or noverrides if none. */
static size_t
ovr_first_limit(const struct shmtd_limiter *lim)
{
	size_t i;

	for (i = 0; i < lim->noverrides; i++)
		if (lim->overrides[i].rule.kind == SHMT_RULE_LIMIT)
			break;
	return i;
}

/* Fill in what LIM left out (only keys that are absent: a key given as 0
 * is checked as 0), then apply the library's own rules
 * (shmt_limit_check) and the rules of the file itself. */
static void
limiter_resolve(struct parse *p, struct shmtd_limiter *lim, struct seen *s)
{
	shmt_limit_t *l = &lim->limit;
	const struct field_key *fk;
	char why[256];

	if (l->nkeys > 0 && !has_key(s, limiter_keys, "uses_per_key"))
		l->uses_per_key = 1;
	if (l->nkeys > 0 && l->limit == 0 && l->uses_per_key != 0)
		l->limit = (uint64_t)l->nkeys * l->uses_per_key;
	if (l->per_client && !has_key(s, limiter_keys, "capacity"))
		l->client_capacity = 1024;
	if (l->mode == SHMT_MODE_BUCKETS &&
	    !has_key(s, limiter_keys, "slack_time"))
		l->slack_ns = l->window_ns / 10 > 0 ? l->window_ns / 10 : 1;
	if (l->mode == SHMT_MODE_BUCKETS &&
	    !has_key(s, limiter_keys, "slack_uses"))
		l->slack_uses = l->limit / 10 > 0 ? l->limit / 10 : 1;
	if (l->mode == SHMT_MODE_GCRA && l->burst == 0 &&
	    !has_key(s, limiter_keys, "burst"))
		l->burst = 1;

	/* Rules about what the file says, not about the parameters. */
	if (l->nkeys == 0 && has_key(s, limiter_keys, "uses_per_key"))
		LFAIL("uses_per_key", "[limiter %s] has no keys", lim->name);
	else if (!l->per_client && has_key(s, limiter_keys, "capacity"))
		LFAIL("capacity", "[limiter %s] is not per client", lim->name);
	else if (!l->per_client && has_key(s, limiter_keys, "overrides"))
		LFAIL("overrides", "[limiter %s] is not per client", lim->name);
	else if (!l->per_client && lim->noverrides > 0)
		OFAIL(0, "[limiter %s] is not per client", lim->name);
	else if (l->per_client && has_key(s, limiter_keys, "overrides") &&
	    l->client_overrides == 0)
		LFAIL("overrides", "[limiter %s]: from 1 to %u (leave it out "
		    "for %u)", lim->name, SHMT_OVERRIDES_MAX,
		    SHMT_OVERRIDES_DEFAULT);
	else if (lim->noverrides > (l->client_overrides != 0 ?
	    l->client_overrides : SHMT_OVERRIDES_DEFAULT))
		OFAIL(l->client_overrides != 0 ? l->client_overrides :
		    SHMT_OVERRIDES_DEFAULT, "[limiter %s]: %zu overrides, "
		    "more than its table holds (overrides = %u)", lim->name,
		    lim->noverrides,
		    l->client_overrides != 0 ? l->client_overrides :
		    SHMT_OVERRIDES_DEFAULT);
	else if (l->mode != SHMT_MODE_BUCKETS &&
	    ovr_first_limit(lim) < lim->noverrides)
		OFAIL(ovr_first_limit(lim), "[limiter %s]: a limit= override "
		    "for client '%s' needs mode "
		    "= buckets (rate mode takes allow and deny)", lim->name,
		    lim->overrides[ovr_first_limit(lim)].id);
	else if (l->mode != SHMT_MODE_GCRA && has_key(s, limiter_keys, "burst"))
		LFAIL("burst", "[limiter %s]: burst is for mode = gcra", lim->name);
	else if (l->mode == SHMT_MODE_GCRA &&
	    has_key(s, limiter_keys, "slack_time"))
		LFAIL("slack_time", "[limiter %s]: mode = gcra has no slack "
		    "(it has burst)", lim->name);
	else if (l->mode == SHMT_MODE_GCRA &&
	    has_key(s, limiter_keys, "slack_uses"))
		LFAIL("slack_uses", "[limiter %s]: mode = gcra has no slack "
		    "(it has burst)", lim->name);
	else if (l->mode == SHMT_MODE_EXACT &&
	    has_key(s, limiter_keys, "slack_time"))
		LFAIL("slack_time", "[limiter %s]: mode = exact has no slack "
		    "(it keeps one record per use)", lim->name);
	else if (l->mode == SHMT_MODE_EXACT &&
	    has_key(s, limiter_keys, "slack_uses"))
		LFAIL("slack_uses", "[limiter %s]: mode = exact has no slack "
		    "(it keeps one record per use)", lim->name);
	else if (!l->global && has_key(s, limiter_keys, "offline_limit"))
		LFAIL("offline_limit", "[limiter %s] is not global", lim->name);
	else if (l->global && l->nkeys > 0 &&
	    has_key(s, limiter_keys, "offline_limit"))
		LFAIL("offline_limit", "[limiter %s]: a global key pool takes no "
		    "offline_limit (names handed out offline would not follow "
		    "the fleet's cursor, so a name could be used more than "
		    "uses_per_key times)", lim->name);
	else if (l->global && lim->offline_limit > l->limit)
		LFAIL("offline_limit", "[limiter %s]: at most limit (%" PRIu64
		    ")", lim->name, l->limit);
	else if (l->global && p->cfg->global.redis[0] == '\0')
		LFAIL("global", "[limiter %s] is global, but [global] names no "
		    "redis", lim->name);
	else if (shmt_limit_check(l, why, sizeof(why)) != 0) {
		fk = field_of(limit_fields, why);
		LFAIL(fk != NULL ? fk->key : "limit", "[limiter %s]: %s",
		    lim->name, why);
	}
	if (l->nkeys > 1 && p->err_line == 0) {
		char **sorted = malloc(l->nkeys * sizeof(*sorted));

		if (sorted == NULL) {
			p->rc = -ENOMEM;
			return;
		}
		memcpy(sorted, lim->keys, l->nkeys * sizeof(*sorted));
		qsort(sorted, l->nkeys, sizeof(*sorted), keyname_cmp);
		for (uint32_t i = 1; i < l->nkeys; i++)
			if (strcmp(sorted[i - 1], sorted[i]) == 0) {
				LFAIL("keys", "key name '%s' given twice",
				    sorted[i]);
				break;
			}
		free(sorted);
	}
}

#define SFAIL(sec, keys, key, ...) \
	fail(p, key_line(&p->fixed[sec], keys, key), key, __VA_ARGS__)

/*
 * The library gives each shard of the dictionary and of the counters a
 * heap of a power of two bytes, the largest that fits size / shards: a
 * size it would round down is refused here, so that the size the file
 * says (and --check-config prints) is the size the segment holds.
 */
static void
heap_exact(struct parse *p, enum section sec, const struct keydef *keys,
    const char *name, uint64_t size, uint32_t shards)
{
	uint64_t per, heap, lo, hi;
	char a[32], b[32], c[32], d[32];

	if (shards == 0)
		return; /* shmt_config_check refused it */
	per = size / shards;
	for (heap = 1; heap <= per / 2; heap *= 2)
		;
	if (heap * shards == size)
		return;
	lo = heap * shards;
	hi = lo * 2;
	SFAIL(sec, keys, has_key(&p->fixed[sec], keys, "size") ? "size" :
	    "shards", "[%s] size %s over %u shards is %s a shard, and a shard "
	    "holds a power of two bytes: the segment would hold %s; give "
	    "size = %s or %s (or other shards)", name,
	    shmtd_format_size(size, a, sizeof(a)), shards,
	    shmtd_format_size(per, b, sizeof(b)),
	    shmtd_format_size(lo, c, sizeof(c)), c,
	    shmtd_format_size(hi, d, sizeof(d)));
}

static void
resolve(struct parse *p)
{
	struct shmtd_config *c = p->cfg;
	const struct field_key *fk;
	char why[256];

	if (c->global.host[0] == '\0' &&
	    gethostname(c->global.host, sizeof(c->global.host) - 1) != 0)
		snprintf(c->global.host, sizeof(c->global.host), "localhost");
	for (size_t i = 0; i < c->nlimiters && p->err_line == 0; i++)
		limiter_resolve(p, &c->limiters[i], &p->lseen[i]);
	if (p->err_line != 0)
		return;
	c->seg.dict_bytes = c->dict.enabled ? c->dict.size : 0;
	c->seg.dict_shards = c->dict.shards;
	c->seg.dict_eviction = strcmp(c->dict.eviction, "lru") == 0;
	c->seg.dict_max_key = (uint32_t)(c->dict.max_key <= UINT32_MAX ?
	    c->dict.max_key : UINT32_MAX);
	c->seg.dict_max_value = (uint32_t)(c->dict.max_value <= UINT32_MAX ?
	    c->dict.max_value : UINT32_MAX);
	c->seg.dict_default_ttl_ms = c->dict.default_ttl_ns / 1000000;
	c->seg.counters_bytes = c->counters.enabled ? c->counters.size : 0;
	c->seg.counters_shards = c->counters.shards;
	c->seg.counters_window_ns = c->counters.window_ns;
	c->seg.counters_subwindows = c->counters.subwindows;
	c->seg.counters_error_ppm = c->counters.error_ppm;
	c->seg.analyzer_bytes = c->analyzer.enabled ? c->analyzer.size : 0;
	c->seg.analyzer_window_ns = c->analyzer.window_ns;
	c->seg.analyzer_subwindows = c->analyzer.subwindows;
	c->seg.analyzer_threshold_ppm = c->analyzer.threshold_pct * 10000;
	c->seg.analyzer_clients = (uint32_t)c->analyzer.clients;

	/* Rules of the file.  max_key or max_value 0 would mean "the hard
	 * limit" to the library, which a file says by leaving the key out. */
	if (c->nlimiters > c->seg.max_limiters)
		SFAIL(S_SEGMENT, segment_keys, "max_limiters",
		    "%zu limiters are configured but max_limiters is %u",
		    c->nlimiters, c->seg.max_limiters);
	else if (c->dict.max_key == 0)
		SFAIL(S_DICT, dict_keys, "max_key", "must be at least 1 byte");
	else if (c->dict.max_value == 0)
		SFAIL(S_DICT, dict_keys, "max_value", "must be at least 1 byte");
	else if (c->dict.default_ttl_ns % 1000000 != 0)
		SFAIL(S_DICT, dict_keys, "default_ttl", "must be a whole "
		    "number of milliseconds (items keep TTLs in ms)");
	else if (shmt_config_check(&c->seg, why, sizeof(why)) != 0) {
		/* The library's own rules for creating the segment. */
		fk = field_of(config_fields, why);
		if (fk == NULL)
			fail(p, 1, NULL, "%s", why);
		else
			SFAIL(fk->sec, sections[fk->sec].keys, fk->key, "%s",
			    why);
	} else if (c->dict.enabled)
		heap_exact(p, S_DICT, dict_keys, "dictionary", c->dict.size,
		    c->dict.shards);
	if (p->err_line == 0 && c->counters.enabled)
		heap_exact(p, S_COUNTERS, counters_keys, "counters",
		    c->counters.size, c->counters.shards);
}

/* ---- Load, apply, free ---------------------------------------------------- */

static int
parse_source(struct parse *p)
{
	int line = ini_parse_stream(read_line, p, on_key, p);

	if (p->rc == -ENOMEM || line == -2)
		return -ENOMEM;
	if (line > 0 && (p->err_line == 0 || line < p->err_line)) {
		p->err_line = 0;
		fail(p, line, NULL, "syntax error (expected '[section]', "
		    "'key = value' or a comment)");
	}
	if (p->err_line == 0)
		resolve(p);
	if (p->rc == -E2BIG)
		p->rc = -EINVAL;
	return p->rc;
}

/* Open PATH for reading, refusing anything but a regular file (a
 * directory would read as an empty config, a FIFO would block): 0, or a
 * negative errno with ERR saying why. */
static int
open_regular(const char *path, FILE **out, char *err, size_t errcap)
{
	struct stat st;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		close(fd);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		if (err != NULL && errcap > 0)
			snprintf(err, errcap, "%s: not a regular file (%s)", path,
			    S_ISDIR(st.st_mode) ? "a directory" :
			    S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	/* Reads of a regular file never block; clear the flag anyway. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	if ((*out = fdopen(fd, "r")) == NULL) {
		rc = -errno;
		close(fd);
		goto fail;
	}
	return 0;
fail:
	if (err != NULL && errcap > 0)
		snprintf(err, errcap, "%s: cannot read: %s", path, strerror(-rc));
	return rc;
}

int
shmtd_config_load(const char *path, struct shmtd_config *out, char *err,
    size_t errcap)
{
	struct parse p;
	int rc;

	if (out == NULL)
		return -EINVAL;
	if (err != NULL && errcap > 0)
		err[0] = '\0';
	memset(&p, 0, sizeof(p));
	defaults(out);
	p.cfg = out;
	p.err = err;
	p.errcap = errcap;
	p.file = path != NULL ? path : SHMTD_BUILTIN_NAME;
	snprintf(out->source, sizeof(out->source), "%s", p.file);
	if (path == NULL) {
		p.str = builtin_config;
	} else if ((rc = open_regular(path, &p.f, err, errcap)) != 0) {
		return rc;
	}
	rc = parse_source(&p);
	if (p.f != NULL)
		fclose(p.f);
	free(p.lseen);
	if (rc != 0)
		shmtd_config_free(out);
	return rc;
}

int
shmtd_limiter_define_cfg(shmt_t *h, const struct shmtd_config *cfg,
    const struct shmtd_limiter *lim, char *err, size_t errcap)
{
	int rc = shmt_limiter_define(h, lim->name, &lim->limit);

	if (rc == -EEXIST)
		snprintf(err, errcap, "%s:%d: limiter '%s': the segment holds "
		    "it with other parameters", cfg->source, lim->line,
		    lim->name);
	else if (rc < 0)
		snprintf(err, errcap, "%s:%d: limiter '%s': %s", cfg->source,
		    lim->line, lim->name, shmt_strerror(rc));
	return rc < 0 ? rc : 0;
}

int
shmtd_override_apply(shmt_t *h, const struct shmtd_config *cfg,
    const struct shmtd_limiter *lim, size_t i, char *err, size_t errcap)
{
	const struct shmtd_override *o = &lim->overrides[i];
	int rc = shmt_client_set(h, lim->name, o->id, strlen(o->id),
	    &o->rule);

	if (rc >= 0)
		return 0;
	snprintf(err, errcap, "%s:%d: limiter '%s': override for client "
	    "'%s': %s", cfg->source, o->line, lim->name, o->id,
	    rc == -ENOSPC ? "the segment's override table is full" :
	    shmt_strerror(rc));
	return rc;
}

int
shmtd_limiter_apply(shmt_t *h, const struct shmtd_config *cfg,
    const struct shmtd_limiter *lim, char *err, size_t errcap)
{
	char why[512];
	int rc = shmtd_limiter_define_cfg(h, cfg, lim, why, sizeof(why));

	/* The limiter exists (with these parameters or others): its
	 * overrides; the first that fails names itself. */
	for (size_t i = 0; (rc == 0 || rc == -EEXIST) &&
	    i < lim->noverrides; i++) {
		int orc = shmtd_override_apply(h, cfg, lim, i, err, errcap);

		if (orc < 0)
			return orc;
	}
	if (rc < 0)
		snprintf(err, errcap, "%s", why);
	return rc;
}

int
shmtd_config_apply(shmt_t *h, const struct shmtd_config *cfg, char *err,
    size_t errcap)
{
	char one[512];
	int first = 0, failed = 0;

	if (h == NULL || cfg == NULL)
		return -EINVAL;
	if (err != NULL && errcap > 0)
		err[0] = '\0';
	for (size_t i = 0; i < cfg->nlimiters; i++) {
		int rc = shmtd_limiter_apply(h, cfg, &cfg->limiters[i], one,
		    sizeof(one));

		if (rc == 0)
			continue;
		if (failed++ == 0) {
			first = rc;
			if (err != NULL && errcap > 0)
				snprintf(err, errcap, "%s", one);
		}
	}
	if (failed > 1 && err != NULL && errcap > 0) {
		size_t n = strlen(err);

		snprintf(err + n, errcap - n, " (and %d more limiters failed)",
		    failed - 1);
	}
	return first;
}

static void
limiter_free(struct shmtd_limiter *l)
{
	for (uint32_t k = 0; k < l->limit.nkeys; k++)
		free(l->keys[k]);
	free(l->keys);
	free(l->overrides);
}

void
shmtd_config_drop_limiter(struct shmtd_config *cfg, size_t i)
{
	if (cfg == NULL || i >= cfg->nlimiters)
		return;
	limiter_free(&cfg->limiters[i]);
	memmove(&cfg->limiters[i], &cfg->limiters[i + 1],
	    (cfg->nlimiters - i - 1) * sizeof(cfg->limiters[0]));
	cfg->nlimiters--;
}

void
shmtd_config_free(struct shmtd_config *cfg)
{
	if (cfg == NULL)
		return;
	for (size_t i = 0; i < cfg->nlimiters; i++)
		limiter_free(&cfg->limiters[i]);
	free(cfg->limiters);
	cfg->limiters = NULL;
	cfg->nlimiters = 0;
}

/* ---- Printing ------------------------------------------------------------- */

/* The longest line the loader reads (read_line: inih's buffer of 200
 * bytes, less the newline and the NUL). */
#define CONF_LINE_MAX 198

static void
print_keys(FILE *f, const struct shmtd_limiter *lim)
{
	size_t col;

	/* Wrapped onto indented lines near 150 columns, and never past
	 * CONF_LINE_MAX: a name that a config could hold (on a line of its
	 * own, after one space) prints on a line of its own when it is long.
	 * A line ends with a comma where the comma fits; the loader needs
	 * none (each line adds its names). */
	col = (size_t)fprintf(f, "keys =");
	for (uint32_t i = 0; i < lim->limit.nkeys; i++) {
		size_t n = strlen(lim->keys[i]);

		if (col + 2 + n > 150 && col > 1) {
			if (i > 0 && col + 1 <= CONF_LINE_MAX)
				fputc(',', f);
			fputc('\n', f);
			col = 0;
		} else if (i > 0) {
			col += (size_t)fprintf(f, ",");
		}
		col += (size_t)fprintf(f, " %s", lim->keys[i]);
	}
	fprintf(f, "\n");
}

static void
print_limiter(FILE *f, const struct shmtd_limiter *lim)
{
	const shmt_limit_t *l = &lim->limit;
	char b[64];

	fprintf(f, "\n[limiter %s]\n", lim->name);
	fprintf(f, "limit = %" PRIu64 "\n", l->limit);
	fprintf(f, "window = %s\n", shmtd_format_duration(l->window_ns, b,
	    sizeof(b)));
	fprintf(f, "mode = %s\n", l->mode == SHMT_MODE_EXACT ? "exact" :
	    l->mode == SHMT_MODE_GCRA ? "gcra" : "buckets");
	if (l->mode == SHMT_MODE_GCRA)
		fprintf(f, "burst = %" PRIu64 "\n", l->burst);
	if (l->mode == SHMT_MODE_BUCKETS) {
		fprintf(f, "slack_time = %s\n",
		    shmtd_format_duration(l->slack_ns, b, sizeof(b)));
		fprintf(f, "slack_uses = %" PRIu64 "\n", l->slack_uses);
	}
	if (l->nkeys > 0) {
		print_keys(f, lim);
		fprintf(f, "uses_per_key = %u\n", l->uses_per_key);
	}
	if (l->per_client)
		fprintf(f, "per_client = yes\ncapacity = %u\n",
		    l->client_capacity);
	if (l->client_overrides != 0)
		fprintf(f, "overrides = %u\n", l->client_overrides);
	for (size_t i = 0; i < lim->noverrides; i++) {
		const shmt_client_rule_t *r = &lim->overrides[i].rule;

		if (r->kind == SHMT_RULE_LIMIT)
			fprintf(f, "override = %s limit=%" PRIu64 "\n",
			    lim->overrides[i].id, r->limit);
		else
			fprintf(f, "override = %s %s\n", lim->overrides[i].id,
			    r->kind == SHMT_RULE_ALLOW ? "allow" : "deny");
	}
	if (l->shadow)
		fprintf(f, "shadow = yes\n");
	if (l->global)
		fprintf(f, "global = yes\n");
	if (lim->offline_limit != 0)
		fprintf(f, "offline_limit = %" PRIu64 "\n", lim->offline_limit);
}

void
shmtd_config_print(FILE *f, const struct shmtd_config *c)
{
	char b[64];

	fprintf(f, "# resolved from %s\n", c->source);
	if (c->global.redis[0] != '\0')
		fprintf(f, "[global]\nredis = %s\nhost = %s\nreplicas = %u\n",
		    c->global.redis, c->global.host, c->global.replicas);
	fprintf(f, "[segment]\n");
	fprintf(f, "name = %s\nmode = 0%03o\n", c->segment,
	    (unsigned)c->seg.mode);
	if (c->seg.gid != (gid_t)-1)
		fprintf(f, "group = %u\n", (unsigned)c->seg.gid);
	fprintf(f, "max_limiters = %u\nmax_slots = %u\narena = %s\n",
	    c->seg.max_limiters, c->seg.max_slots,
	    shmtd_format_size(c->seg.arena_bytes, b, sizeof(b)));
	for (size_t i = 0; i < c->nlimiters; i++)
		print_limiter(f, &c->limiters[i]);
	fprintf(f, "\n[dictionary]\nenabled = %s\n", c->dict.enabled ? "yes" : "no");
	fprintf(f, "size = %s\n", shmtd_format_size(c->dict.size, b, sizeof(b)));
	fprintf(f, "shards = %u\n", c->dict.shards);
	fprintf(f, "max_key = %s\n", shmtd_format_size(c->dict.max_key, b,
	    sizeof(b)));
	fprintf(f, "max_value = %s\n", shmtd_format_size(c->dict.max_value, b,
	    sizeof(b)));
	fprintf(f, "eviction = %s\n", c->dict.eviction);
	fprintf(f, "default_ttl = %s\n", shmtd_format_duration(
	    c->dict.default_ttl_ns, b, sizeof(b)));
	fprintf(f, "\n[analyzer]\nenabled = %s\n",
	    c->analyzer.enabled ? "yes" : "no");
	fprintf(f, "size = %s\n", shmtd_format_size(c->analyzer.size, b,
	    sizeof(b)));
	fprintf(f, "window = %s\n", shmtd_format_duration(c->analyzer.window_ns,
	    b, sizeof(b)));
	fprintf(f, "subwindows = %u\nthreshold = %u%%\nclients = %s\n",
	    c->analyzer.subwindows, c->analyzer.threshold_pct,
	    c->analyzer.clients ? "yes" : "no");
	fprintf(f, "\n[counters]\nenabled = %s\n",
	    c->counters.enabled ? "yes" : "no");
	fprintf(f, "size = %s\nshards = %u\n", shmtd_format_size(
	    c->counters.size, b, sizeof(b)), c->counters.shards);
	fprintf(f, "window = %s\n",
	    shmtd_format_duration(c->counters.window_ns, b, sizeof(b)));
	/* The error in percent, exactly: ppm / 10^4 with its four decimals,
	 * trailing zeros dropped. */
	snprintf(b, sizeof(b), "%u.%04u", c->counters.error_ppm / 10000,
	    c->counters.error_ppm % 10000);
	for (size_t n = strlen(b); b[n - 1] == '0' || b[n - 1] == '.'; n--) {
		int dot = b[n - 1] == '.';

		b[n - 1] = '\0';
		if (dot)
			break;
	}
	fprintf(f, "error = %s%%\n", b);
	fprintf(f, "\n[daemon]\n");
	if (c->snapshot[0] != '\0')
		fprintf(f, "snapshot = %s\n", c->snapshot);
	fprintf(f, "snapshot_interval = %s\nlog = %s\n",
	    shmtd_format_duration(c->snapshot_interval_ns, b, sizeof(b)),
	    c->log_target);
	if (c->metrics[0] != '\0')
		fprintf(f, "metrics = %s\n", c->metrics);
	if (c->delete_removed)
		fprintf(f, "delete_removed = yes\n");
}
