/* SPDX-License-Identifier: MIT */
/*
 * get, set, del, incr, keys and hit: the dictionary and the windowed
 * counters from a shell.  Keys and values are bytes: get writes a value
 * exactly as stored, set reads one from stdin as is, and whatever is shown
 * as text (key lists, JSON) is escaped or base64 so no byte is lost.
 */
#include "cli.h"

#include "bytes.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_KEY_HEX = 0x300, OPT_TTL, OPT_NX, OPT_XX, OPT_WINDOW };

/* A key as the command line gave it: as is, or decoded with --key-hex. */
struct key {
	unsigned char buf[SHMT_KEY_MAX];
	const void *p;
	size_t len;
	char *shown;            /* escaped, for messages */
};

static int
key_parse(const struct shmtc *c, struct key *k, const char *arg, int hex)
{
	int rc;

	k->shown = NULL;
	if (!hex) {
		k->p = arg;
		k->len = strlen(arg);
	} else if ((rc = shmtc_hex_decode(arg, k->buf, sizeof(k->buf),
	    &k->len)) == -E2BIG) {
		return shmtc_usage_error(c, "key over %d bytes", SHMT_KEY_MAX);
	} else if (rc != 0) {
		return shmtc_usage_error(c, "bad hex key '%s' (an even number "
		    "of hex digits)", arg);
	} else {
		k->p = k->buf;
	}
	if (k->len == 0)
		return shmtc_usage_error(c, "the key must not be empty");
	if (k->len > SHMT_KEY_MAX)
		return shmtc_usage_error(c, "key of %zu bytes: at most %d",
		    k->len, SHMT_KEY_MAX);
	k->shown = shmtc_escape(k->p, k->len);
	if (k->shown == NULL) {
		shmtc_err("out of memory");
		return SHMTC_MISSING;
	}
	return 0;
}

/*
 * Print why ERR happened to key K; return the exit code.  A segment made
 * without a dictionary (or without counters) is unusable for the command,
 * like a missing segment: exit 3.  Refusals that are the answer to the
 * question asked (absent, present, not a number, no room) exit 1.
 */
static int
dict_error(const struct shmtc *c, const struct key *k, int err)
{
	const char *what = strcmp(c->cmd->name, "hit") == 0 ||
	    strcmp(c->cmd->name, "count") == 0 ? "counters" : "dictionary";

	switch (err) {
	case -ENOENT:
		shmtc_err("no key '%s' in %s", k->shown, c->segment);
		return SHMTC_NO;
	case -EEXIST:
		shmtc_err("key '%s' already exists", k->shown);
		return SHMTC_NO;
	case -EINVAL:
		if (strcmp(c->cmd->name, "incr") == 0) {
			shmtc_err("the value of '%s' is not a decimal integer",
			    k->shown);
			return SHMTC_NO;
		}
		break;
	case -ERANGE:
		shmtc_err("'%s': the sum overflows a signed 64-bit integer",
		    k->shown);
		return SHMTC_NO;
	case -ENOSPC:
		shmtc_err("no room for '%s' in the %s (%s)", k->shown, what,
		    strcmp(what, "counters") == 0 ? "its shard is full" :
		    "eviction off, or the item never fits");
		return SHMTC_NO;
	case -ENODEV:
		shmtc_err("segment %s has no %s (created with its size 0)",
		    c->segment, what);
		return SHMTC_MISSING;
	case -EAGAIN:
		shmtc_err("'%s': its shard stayed busy through every retry",
		    k->shown);
		return SHMTC_MISSING;
	case SHMT_ELOCKED:
		shmtc_err("'%s': its shard's lock is held by a live process that "
		    "does not let go (a stopped writer, or damage: 'check' names "
		    "the process); nothing changed", k->shown);
		return SHMTC_MISSING;
	default:
		break;
	}
	shmtc_err("'%s': %s", k->shown, shmt_strerror(err));
	return err == -E2BIG || err == -EMSGSIZE || err == -EINVAL ?
	    SHMTC_USAGE : shmtc_exit_for(err);
}

/* An object {"key": K} (with "key_encoding" when K is not UTF-8). */
static json_t *
key_json(const struct key *k)
{
	json_t *o = json_object();

	if (o != NULL && shmtc_json_bytes(o, "key", "key_encoding", k->p, k->len)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/*
 * Parse the options of a dictionary command: --key-hex always, and set's
 * when TTL is not NULL.  Returns 0 with the operands checked, -1 after
 * printing help (the command then exits 0 without running), or the exit
 * code.  The TTL and the set variant come back through TTL and MODE.
 */
static int
dict_opts(struct shmtc *c, int argc, char **argv, int npos, int nopt,
    int *hex, uint64_t *ttl, int *mode)
{
	static const struct option all[] = {
		{ "key-hex", no_argument, NULL, OPT_KEY_HEX },
		{ "ttl", required_argument, NULL, OPT_TTL },
		{ "nx", no_argument, NULL, OPT_NX },
		{ "xx", no_argument, NULL, OPT_XX },
		{ NULL, 0, NULL, 0 }
	};
	static const struct option hexonly[] = {
		{ "key-hex", no_argument, NULL, OPT_KEY_HEX },
		{ NULL, 0, NULL, 0 }
	};
	char *arg;
	int opt;

	*hex = 0;
	while ((opt = shmtc_getopt(c, argc, argv, NULL, ttl ? all : hexonly,
	    &arg)) >= 0) {
		if (opt == OPT_KEY_HEX) {
			*hex = 1;
		} else if (opt == OPT_TTL) {
			if (shmtc_parse_ms(arg, ttl) != 0)
				return shmtc_usage_error(c, "bad TTL '%s' (e.g. "
				    "500ms, 30s, 10m, 24h; whole milliseconds)",
				    arg);
		} else if (opt == OPT_NX || opt == OPT_XX) {
			if (*mode != 0 && *mode != opt)
				return shmtc_usage_error(c, "--nx and --xx "
				    "exclude each other");
			*mode = opt;
		}
	}
	if (opt == -2)
		return -1;
	if (opt != -1)
		return shmtc_getopt_exit(opt);
	return shmtc_operands(c, argc, argv, npos, nopt);
}

/* ---- get ------------------------------------------------------------------ */

static int
get_output(const struct shmtc *c, const struct key *k, const void *v,
    size_t vlen, int found)
{
	json_t *o;

	if (!c->json) {
		/* The exact bytes, no newline added: $(...) and redirection
		 * give back what was stored. */
		if (found && (fwrite(v, 1, vlen, stdout) != vlen ||
		    fflush(stdout) != 0)) {
			shmtc_err("cannot write the value");
			return SHMTC_MISSING;
		}
		return SHMTC_OK;
	}
	if ((o = key_json(k)) == NULL ||
	    json_object_set_new(o, "found", json_boolean(found)) != 0 ||
	    (found && (json_object_set_new(o, "length",
	    shmtc_json_u64(vlen)) != 0 ||
	    shmtc_json_bytes(o, "value", "encoding", v, vlen) != 0))) {
		json_decref(o);
		o = NULL;
	}
	return shmtc_json_emit(o);
}

int
shmtc_cmd_get(struct shmtc *c, int argc, char **argv)
{
	struct key k = { .shown = NULL };
	shmt_t *h = NULL;
	char *v = NULL;
	size_t vlen = 0;
	int hex, rc;

	if ((rc = dict_opts(c, argc, argv, 1, 0, &hex, NULL, NULL)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = key_parse(c, &k, argv[optind], hex)) != 0)
		goto out;
	/* One buffer of the largest value: no second read that could see
	 * another value than the first when the value grows meanwhile. */
	if ((v = malloc(SHMT_VALUE_MAX)) == NULL) {
		shmtc_err("out of memory");
		rc = SHMTC_MISSING;
		goto out;
	}
	if ((rc = shmtc_open(c, &h)) != 0)
		goto out;
	rc = shmt_get(h, k.p, k.len, v, SHMT_VALUE_MAX, &vlen);
	if (rc == 0)
		rc = get_output(c, &k, v, vlen, 1);
	else if (rc == -ENOENT && c->json)
		rc = get_output(c, &k, NULL, 0, 0) == SHMTC_OK ? SHMTC_NO :
		    SHMTC_MISSING;
	else
		rc = dict_error(c, &k, rc);
out:
	shmt_close(h);
	free(v);
	free(k.shown);
	return rc;
}

/* ---- set ------------------------------------------------------------------ */

/* Read all of stdin, at most SHMT_VALUE_MAX bytes, into a new *BUF.
 * Returns 0, or the exit code after saying why not. */
static int
read_stdin(const struct shmtc *c, char **buf, size_t *len)
{
	/* One byte more than the limit tells "exactly 1 MiB" from "more". */
	char *b = malloc(SHMT_VALUE_MAX + 1);
	size_t n = 0, got;

	if (b == NULL) {
		shmtc_err("out of memory");
		return SHMTC_MISSING;
	}
	while (n <= SHMT_VALUE_MAX &&
	    (got = fread(b + n, 1, SHMT_VALUE_MAX + 1 - n, stdin)) > 0)
		n += got;
	if (ferror(stdin)) {
		free(b);
		shmtc_err("cannot read the value from stdin");
		return SHMTC_MISSING;
	}
	if (n > SHMT_VALUE_MAX) {
		free(b);
		return shmtc_usage_error(c, "the value on stdin is over %d "
		    "bytes (1 MiB), the largest a value may be",
		    SHMT_VALUE_MAX);
	}
	*buf = b;
	*len = n;
	return 0;
}

static int
set_output(const struct shmtc *c, const struct key *k, size_t vlen,
    uint64_t ttl)
{
	json_t *o;

	if (!c->json)
		return SHMTC_OK;
	if ((o = key_json(k)) == NULL ||
	    json_object_set_new(o, "stored", json_true()) != 0 ||
	    json_object_set_new(o, "length", shmtc_json_u64(vlen)) != 0 ||
	    json_object_set_new(o, "ttl_ms", ttl ? shmtc_json_u64(ttl) :
	    json_null()) != 0) {
		json_decref(o);
		o = NULL;
	}
	return shmtc_json_emit(o);
}

int
shmtc_cmd_set(struct shmtc *c, int argc, char **argv)
{
	struct key k = { .shown = NULL };
	shmt_t *h = NULL;
	char *v = NULL, *in = NULL;
	uint64_t ttl = 0;
	size_t vlen = 0;
	int hex, mode = 0, rc;

	if ((rc = dict_opts(c, argc, argv, 2, 0, &hex, &ttl, &mode)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = key_parse(c, &k, argv[optind], hex)) != 0)
		goto out;
	v = argv[optind + 1];
	if (strcmp(v, "-") == 0) {
		if ((rc = read_stdin(c, &in, &vlen)) != 0)
			goto out;
		v = in;
	} else {
		vlen = strlen(v);
	}
	if ((rc = shmtc_open(c, &h)) != 0)
		goto out;
	if (mode == OPT_NX)
		rc = shmt_add(h, k.p, k.len, v, vlen, ttl);
	else if (mode == OPT_XX)
		rc = shmt_replace(h, k.p, k.len, v, vlen, ttl);
	else
		rc = shmt_set(h, k.p, k.len, v, vlen, ttl);
	rc = rc == 0 ? set_output(c, &k, vlen, ttl) : dict_error(c, &k, rc);
out:
	shmt_close(h);
	free(in);
	free(k.shown);
	return rc;
}

/* ---- del, incr, hit -------------------------------------------------------- */

/* The JSON answer of del, incr and hit: the key and one more field. */
static int
key_answer(const struct key *k, const char *field, json_t *value)
{
	json_t *o = key_json(k);

	if (o == NULL || json_object_set_new(o, field, value) != 0) {
		json_decref(o);
		return shmtc_json_emit(NULL);
	}
	return shmtc_json_emit(o);
}

int
shmtc_cmd_del(struct shmtc *c, int argc, char **argv)
{
	struct key k = { .shown = NULL };
	shmt_t *h = NULL;
	int hex, rc;

	if ((rc = dict_opts(c, argc, argv, 1, 0, &hex, NULL, NULL)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = key_parse(c, &k, argv[optind], hex)) != 0 ||
	    (rc = shmtc_open(c, &h)) != 0)
		goto out;
	rc = shmt_del(h, k.p, k.len);
	if (rc == 0 && c->json)
		rc = key_answer(&k, "deleted", json_true());
	else if (rc != 0)
		rc = dict_error(c, &k, rc);
out:
	shmt_close(h);
	free(k.shown);
	return rc;
}

/* A signed 64-bit decimal, as incr's N. */
static int
parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

int
shmtc_cmd_incr(struct shmtc *c, int argc, char **argv)
{
	struct key k = { .shown = NULL };
	shmt_t *h = NULL;
	int64_t delta = 1, result;
	int hex, rc;

	if ((rc = dict_opts(c, argc, argv, 1, 1, &hex, NULL, NULL)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = key_parse(c, &k, argv[optind], hex)) != 0)
		goto out;
	if (optind + 1 < argc && parse_i64(argv[optind + 1], &delta) != 0) {
		rc = shmtc_usage_error(c, "bad number '%s' (a signed 64-bit "
		    "integer; write a negative one after --)", argv[optind + 1]);
		goto out;
	}
	if ((rc = shmtc_open(c, &h)) != 0)
		goto out;
	rc = shmt_incr(h, k.p, k.len, delta, &result);
	if (rc != 0)
		rc = dict_error(c, &k, rc);
	else if (c->json)
		rc = key_answer(&k, "value", json_integer(result));
	else
		printf("%" PRId64 "\n", result);
out:
	shmt_close(h);
	free(k.shown);
	return rc;
}

/* A counter's answer with its bound: "1234 (within 1%: exact in [1222,
 * 1247])", or "3 (exact)" when only one count is possible; in JSON, the
 * key, "count", "exact" (a bool), "error" (eps as a fraction) and "low",
 * "high" (the exact count lies in [low, high]). */
static int
count_answer(struct shmtc *c, shmt_t *h, const struct key *k, uint64_t count)
{
	uint64_t lo = count, hi = count;
	uint32_t ppm = 0;
	char pct[32];
	json_t *o;
	size_t n;

	if (shmt_count_bound(h, count, &lo, &hi, &ppm) != 0)
		lo = hi = count;
	if (c->json) {
		o = key_json(k);
		if (o == NULL || json_object_set_new(o, "count",
		    shmtc_json_u64(count)) != 0 ||
		    json_object_set_new(o, "exact", json_boolean(lo == hi)) != 0 ||
		    json_object_set_new(o, "error", json_real(ppm / 1e6)) != 0 ||
		    json_object_set_new(o, "low", shmtc_json_u64(lo)) != 0 ||
		    json_object_set_new(o, "high", shmtc_json_u64(hi)) != 0) {
			json_decref(o);
			return shmtc_json_emit(NULL);
		}
		return shmtc_json_emit(o);
	}
	if (lo == hi) {
		printf("%" PRIu64 " (exact)\n", count);
		return SHMTC_OK;
	}
	/* eps in percent, exactly: ppm / 10^4, trailing zeros dropped. */
	snprintf(pct, sizeof(pct), "%u.%04u", ppm / 10000, ppm % 10000);
	for (n = strlen(pct); pct[n - 1] == '0'; n--)
		pct[n - 1] = '\0';
	if (pct[n - 1] == '.')
		pct[n - 1] = '\0';
	printf("%" PRIu64 " (within %s%%: exact in [%" PRIu64 ", %" PRIu64
	    "])\n", count, pct, lo, hi);
	return SHMTC_OK;
}

int
shmtc_cmd_hit(struct shmtc *c, int argc, char **argv)
{
	struct key k = { .shown = NULL };
	shmt_t *h = NULL;
	uint64_t count;
	int hex, rc;

	if ((rc = dict_opts(c, argc, argv, 1, 0, &hex, NULL, NULL)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = key_parse(c, &k, argv[optind], hex)) != 0 ||
	    (rc = shmtc_open(c, &h)) != 0)
		goto out;
	rc = shmt_hit(h, k.p, k.len, &count);
	if (rc != 0)
		rc = dict_error(c, &k, rc);
	else
		rc = count_answer(c, h, &k, count);
out:
	shmt_close(h);
	free(k.shown);
	return rc;
}

/* count's options: --key-hex and --window D (0 when absent: the segment's
 * window).  Returns as dict_opts. */
static int
count_opts(struct shmtc *c, int argc, char **argv, int *hex, uint64_t *win)
{
	static const struct option opts[] = {
		{ "key-hex", no_argument, NULL, OPT_KEY_HEX },
		{ "window", required_argument, NULL, OPT_WINDOW },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t ms;
	char *arg;
	int opt;

	*hex = 0;
	*win = 0;
	while ((opt = shmtc_getopt(c, argc, argv, NULL, opts, &arg)) >= 0) {
		if (opt == OPT_KEY_HEX) {
			*hex = 1;
		} else if (opt == OPT_WINDOW) {
			if (shmtc_parse_ms(arg, &ms) != 0 || ms == 0 ||
			    ms > UINT64_MAX / 1000000)
				return shmtc_usage_error(c, "bad window '%s' (e.g. "
				    "1m, 1h, 24h; whole milliseconds, above 0)",
				    arg);
			*win = ms * 1000000;
		}
	}
	if (opt == -2)
		return -1;
	if (opt != -1)
		return shmtc_getopt_exit(opt);
	return shmtc_operands(c, argc, argv, 1, 0);
}

int
shmtc_cmd_count(struct shmtc *c, int argc, char **argv)
{
	struct key k = { .shown = NULL };
	shmt_t *h = NULL;
	uint64_t count, win;
	int hex, rc;

	if ((rc = count_opts(c, argc, argv, &hex, &win)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = key_parse(c, &k, argv[optind], hex)) != 0 ||
	    (rc = shmtc_open(c, &h)) != 0)
		goto out;
	rc = shmt_count(h, k.p, k.len, win, &count);
	if (rc == -EINVAL && win != 0) {
		shmtc_err("window longer than the counters' window of %s",
		    c->segment);
		rc = SHMTC_NO;
	} else if (rc != 0)
		rc = dict_error(c, &k, rc);
	else
		rc = count_answer(c, h, &k, count);
out:
	shmt_close(h);
	free(k.shown);
	return rc;
}

/* ---- keys ------------------------------------------------------------------ */

struct rawkey {
	unsigned char *p;
	size_t len;
	char *shown;
};

static int
rawkey_cmp(const void *a, const void *b)
{
	const struct rawkey *x = a, *y = b;
	int d = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);

	if (d != 0)
		return d;
	return (x->len > y->len) - (x->len < y->len);
}

static void
keys_free(struct rawkey *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].p);
		free(v[i].shown);
	}
	free(v);
}

/* Append one key; returns 0 or -ENOMEM. */
static int
keys_push(struct rawkey **v, size_t *n, size_t *cap, const void *p,
    size_t len, char *shown)
{
	struct rawkey *r;

	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;

		if ((r = realloc(*v, nc * sizeof(*r))) == NULL)
			return -ENOMEM;
		*v = r;
		*cap = nc;
	}
	r = &(*v)[*n];
	if ((r->p = malloc(len ? len : 1)) == NULL)
		return -ENOMEM;
	memcpy(r->p, p, len);
	r->len = len;
	r->shown = shown;
	(*n)++;
	return 0;
}

/*
 * Walk the whole dictionary and keep the keys whose escaped form matches
 * PATTERN (NULL: all).  Matching the escaped form lets a glob name any key,
 * also one with bytes a shell cannot pass.
 */
static int
keys_collect(shmt_t *h, const char *pattern, struct rawkey **v, size_t *n)
{
	unsigned char kbuf[SHMT_KEY_MAX];
	uint64_t cursor = 0;
	size_t klen, cap = 0;
	int rc;

	*v = NULL;
	*n = 0;
	while ((rc = shmt_dict_next(h, &cursor, kbuf, sizeof(kbuf), &klen)) == 1) {
		char *shown = shmtc_escape(kbuf, klen);

		if (shown == NULL)
			return -ENOMEM;
		if (pattern != NULL && fnmatch(pattern, shown, 0) != 0) {
			free(shown);
			continue;
		}
		if (keys_push(v, n, &cap, kbuf, klen, shown) != 0) {
			free(shown);
			return -ENOMEM;
		}
	}
	return rc;
}

static int
keys_output(const struct shmtc *c, const char *pattern,
    const struct rawkey *v, size_t n)
{
	json_t *root, *list;

	if (!c->json) {
		for (size_t i = 0; i < n; i++)
			puts(v[i].shown);
		return SHMTC_OK;
	}
	list = json_array();
	root = json_pack("{s:s, s:o, s:o, s:o}", "segment", c->segment,
	    "pattern", pattern ? json_string(pattern) : json_null(),
	    "count", shmtc_json_u64(n), "keys", list);
	for (size_t i = 0; root != NULL && i < n; i++) {
		json_t *o = json_object();

		if (o == NULL || shmtc_json_bytes(o, "key", "encoding", v[i].p,
		    v[i].len) != 0 || json_array_append_new(list, o) != 0) {
			json_decref(root);
			root = NULL;
		}
	}
	return shmtc_json_emit(root);
}

int
shmtc_cmd_keys(struct shmtc *c, int argc, char **argv)
{
	const char *pattern;
	struct rawkey *v = NULL;
	shmt_t *h = NULL;
	size_t n = 0;
	char *arg;
	int rc;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if ((rc = shmtc_operands(c, argc, argv, 0, 1)) != 0)
		return rc;
	pattern = optind < argc ? argv[optind] : NULL;
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	rc = keys_collect(h, pattern, &v, &n);
	if (rc == -ENODEV) {
		shmtc_err("segment %s has no dictionary (created with its size "
		    "0)", c->segment);
		rc = SHMTC_MISSING;
	} else if (rc < 0) {
		shmtc_err("walking the keys: %s", shmt_strerror(rc));
		rc = rc == -EAGAIN || rc == -ENOMEM ? SHMTC_MISSING :
		    shmtc_exit_for(rc);
	} else {
		/* Walk order is hash order; sorted bytes read better and
		 * stay the same from run to run. */
		if (n > 0)      /* qsort() must not be given NULL */
			qsort(v, n, sizeof(*v), rawkey_cmp);
		rc = keys_output(c, pattern, v, n);
	}
	keys_free(v, n);
	shmt_close(h);
	return rc;
}
