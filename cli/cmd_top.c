/* SPDX-License-Identifier: MIT */
/*
 * top: the hot keys of the analyzer's window, each with the bounds of its
 * request count, and the span the answer covers.  The reading and naming
 * helpers here serve watch's hot-keys panel too.
 */
#include "hot.h"

#include "bytes.h"
#include "fmt.h"
#include "table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Cap 0 first when all are wanted: the count tells how many rows to make.
 * Keys may turn hot between two calls, so try a few times; the last answer
 * stands, cut to what fits, which is still a true answer for its span. */
#define READ_TRIES 4

int
shmtc_hot_read(shmt_t *h, size_t max, shmt_hotkey_t **out, size_t *n,
    shmt_top_info_t *info)
{
	size_t cap = max;
	int rc = 0;

	*out = NULL;
	*n = 0;
	if (cap == 0 && (rc = shmt_top_keys(h, NULL, 0, info)) <= 0)
		return rc;
	for (int t = 0; t < READ_TRIES; t++) {
		shmt_hotkey_t *v;

		if (max == 0)
			cap = (size_t)rc + 8;
		if ((v = realloc(*out, cap * sizeof(*v))) == NULL) {
			free(*out);
			*out = NULL;
			return -ENOMEM;
		}
		*out = v;
		rc = shmt_top_keys(h, v, cap, info);
		if (rc < 0) {
			free(*out);
			*out = NULL;
			return rc;
		}
		*n = (size_t)rc < cap ? (size_t)rc : cap;
		if (max != 0 || (size_t)rc <= cap)
			break;
	}
	return rc;
}

const char *
shmtc_hot_kind(int kind)
{
	return kind == SHMT_HOT_CLIENT ? "client" : "dict";
}

char *
shmtc_hot_name(const shmt_hotkey_t *k)
{
	char *shown, *s;
	size_t len;

	if (k->klen == 0) {
		if ((s = malloc(32)) != NULL)
			snprintf(s, 32, "(hash 0x%016" PRIx64 ")", k->hash);
		return s;
	}
	if ((shown = shmtc_escape(k->key, k->kept)) == NULL ||
	    k->kept >= k->klen)
		return shown;
	len = strlen(shown) + 32;
	if ((s = malloc(len)) != NULL)
		snprintf(s, len, "%s... (%" PRIu32 " bytes)", shown, k->klen);
	free(shown);
	return s;
}

char *
shmtc_hot_pct_ppm(char *buf, size_t cap, uint32_t ppm)
{
	if (ppm % 10000 == 0)
		snprintf(buf, cap, "%" PRIu32 "%%", ppm / 10000);
	else
		snprintf(buf, cap, "%.4g%%", ppm / 10000.0);
	return buf;
}

int
shmtc_hot_nodev(const struct shmtc *c)
{
	shmtc_err("segment %s has no analyzer (created with its size 0)",
	    c->segment);
	return SHMTC_MISSING;
}

/* ---- top ------------------------------------------------------------------- */

/* What a listed key's bound holds beyond error_window: its part of the
 * oldest sub-window, which may lie before the exact window (the oldest
 * sub-window's corner, see README "Hot keys"). */
static uint64_t
oldest_part(const shmt_hotkey_t *k, const shmt_top_info_t *in)
{
	uint64_t w = k->upper - k->lower;

	return k->upper >= k->lower && w > in->error_window ?
	    w - in->error_window : 0;
}

/* A listed key had more than this many requests of the exact window:
 * threshold x total_window - error_window - error_oldest (0 when that is
 * negative). */
static double
listed_floor(const shmt_top_info_t *in)
{
	double f = (double)in->threshold_ppm * (double)in->total_window / 1e6 -
	    (double)in->error_window - (double)in->error_oldest;

	return f > 0 ? f : 0;
}

static json_t *
key_json(const shmt_hotkey_t *k, const shmt_top_info_t *in)
{
	char hash[24];
	json_t *o;

	snprintf(hash, sizeof(hash), "0x%016" PRIx64, k->hash);
	o = json_pack("{s:s}", "kind", shmtc_hot_kind(k->kind));
	if (o == NULL)
		return NULL;
	if ((k->klen == 0 ? json_object_set_new(o, "key", json_null()) :
	    shmtc_json_bytes(o, "key", "key_encoding", k->key, k->kept)) != 0 ||
	    json_object_set_new(o, "key_length", k->klen == 0 ? json_null() :
	    shmtc_json_u64(k->klen)) != 0 ||
	    json_object_set_new(o, "truncated",
	    json_boolean(k->kept < k->klen)) != 0 ||
	    json_object_set_new(o, "hash", json_string(hash)) != 0 ||
	    json_object_set_new(o, "lower", shmtc_json_u64(k->lower)) != 0 ||
	    json_object_set_new(o, "upper", shmtc_json_u64(k->upper)) != 0 ||
	    json_object_set_new(o, "oldest_part",
	    shmtc_json_u64(oldest_part(k, in))) != 0 ||
	    json_object_set_new(o, "share", json_real(k->share)) != 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *
top_json(const struct shmtc *c, const shmt_top_info_t *in,
    const shmt_hotkey_t *v, size_t n, int hot)
{
	json_t *keys = json_array(), *root;

	root = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
	    " s:o, s:o, s:o, s:i, s:i, s:f, s:f, s:b, s:i, s:o}",
	    "segment", c->segment,
	    "now_ns", shmtc_json_u64(in->span_end_ns),
	    "span_start_ns", shmtc_json_u64(in->span_start_ns),
	    "span_end_ns", shmtc_json_u64(in->span_end_ns),
	    "span_ns", shmtc_json_u64(in->span_end_ns - in->span_start_ns),
	    "window_ns", shmtc_json_u64(in->window_ns),
	    "subwindow_ns", shmtc_json_u64(in->subwindow_ns),
	    "total", shmtc_json_u64(in->total),
	    "total_window", shmtc_json_u64(in->total_window),
	    "error", shmtc_json_u64(in->error),
	    "error_window", shmtc_json_u64(in->error_window),
	    "error_oldest", shmtc_json_u64(in->error_oldest),
	    "error_bound", shmtc_json_u64(in->total / ((uint64_t)in->probe + 1)),
	    "probe", (int)in->probe,
	    "threshold_ppm", (int)in->threshold_ppm,
	    "threshold_window", (double)in->threshold_ppm *
	    (double)in->total_window / 1e6,
	    "listed_floor", listed_floor(in),
	    "certified", in->certified != 0,
	    "hot", hot,
	    "keys", keys);
	for (size_t i = 0; root != NULL && i < n; i++) {
		json_t *o = key_json(&v[i], in);

		if (o == NULL || json_array_append_new(keys, o) != 0) {
			json_decref(root);
			root = NULL;
		}
	}
	return root;
}

static int
top_human(const shmt_top_info_t *in, const shmt_hotkey_t *v, size_t n,
    int hot)
{
	static const char *const hdr[] = { "KIND", "KEY", "LOWER", "UPPER",
		"SHARE" };
	char span[SHMTC_FMT_MAX], win[SHMTC_FMT_MAX], pct[16], lo[24], up[24];
	char share[16];
	struct shmtc_table t;
	uint64_t old = 0;
	int rc = 0;

	/* The span's count and error, then the exact window's: LOWER and
	 * UPPER bound each key's requests in the exact window. */
	printf("last %s: %" PRIu64 " requests, error <= %" PRIu64 " per key "
	    "(%.2f%% of them; bound total / %u = %" PRIu64 "); last %s "
	    "exactly: >= %" PRIu64 " requests, error <= %" PRIu64 " per key; "
	    "threshold %s, %scertified for the exact window\n",
	    shmtc_fmt_dur(span, sizeof(span), in->span_end_ns -
	    in->span_start_ns), in->total, in->error,
	    in->total ? 100.0 * (double)in->error / (double)in->total : 0.0,
	    in->probe + 1, in->total / ((uint64_t)in->probe + 1),
	    shmtc_fmt_dur(win, sizeof(win), in->window_ns), in->total_window,
	    in->error_window,
	    shmtc_hot_pct_ppm(pct, sizeof(pct), in->threshold_ppm),
	    in->certified ? "" : "not ");
	if (n == 0) {
		printf("(no key over the threshold)\n");
		return SHMTC_OK;
	}
	/* The bound a listed key is held to: more than threshold x
	 * total_window - error_window - error_oldest of the exact window (its
	 * part of the oldest sub-window, upper - lower - error_window, holds
	 * at most error_oldest of its requests before the window). */
	for (size_t i = 0; i < n; i++)
		if (oldest_part(&v[i], in) > old)
			old = oldest_part(&v[i], in);
	printf("listed: each key had more than %.0f requests of the exact "
	    "window (its part of the oldest sub-window, upper - lower - %"
	    PRIu64 ", here at most %" PRIu64 ", holds at most %" PRIu64
	    " before it)\n", listed_floor(in), in->error_window, old,
	    in->error_oldest);
	shmtc_table_init(&t, 5, hdr, "llrrr");
	for (size_t i = 0; i < n; i++) {
		char *name = shmtc_hot_name(&v[i]);
		const char *row[5] = { shmtc_hot_kind(v[i].kind),
			name ? name : "?", lo, up, share };

		snprintf(lo, sizeof(lo), "%" PRIu64, v[i].lower);
		snprintf(up, sizeof(up), "%" PRIu64, v[i].upper);
		snprintf(share, sizeof(share), "%.1f%%", v[i].share * 100);
		shmtc_table_row(&t, row);
		free(name);
	}
	rc = shmtc_table_print(&t, stdout);
	shmtc_table_free(&t);
	if ((size_t)hot > n)
		printf("... %zu more (-n 0 shows all)\n", (size_t)hot - n);
	return rc == 0 ? SHMTC_OK : SHMTC_MISSING;
}

static int
top_parse(struct shmtc *c, int argc, char **argv, size_t *max)
{
	static const struct option longopts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 }
	};
	char *arg, *end;
	int opt;

	*max = 20;
	while ((opt = shmtc_getopt(c, argc, argv, "n:", longopts, &arg)) >= 0) {
		long v;

		errno = 0;
		v = strtol(arg, &end, 10);
		if (errno != 0 || end == arg || *end != '\0' || v < 0 ||
		    v > 100000)
			return shmtc_usage_error(c, "bad count '%s' (0: all, "
			    "at most 100000)", arg);
		*max = (size_t)v;
	}
	if (opt == -2)
		return -1;      /* help printed: exit 0 without running */
	if (opt != -1)
		return shmtc_getopt_exit(opt);
	return shmtc_operands(c, argc, argv, 0, 0);
}

int
shmtc_cmd_top(struct shmtc *c, int argc, char **argv)
{
	shmt_top_info_t info;
	shmt_hotkey_t *v = NULL;
	shmt_t *h = NULL;
	size_t max, n = 0;
	int rc, hot;

	if ((rc = top_parse(c, argc, argv, &max)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	hot = shmtc_hot_read(h, max, &v, &n, &info);
	if (hot == -ENODEV) {
		rc = shmtc_hot_nodev(c);
	} else if (hot < 0) {
		shmtc_err("%s: hot keys: %s", c->segment, shmt_strerror(hot));
		rc = hot == -ENOMEM ? SHMTC_MISSING : shmtc_exit_for(hot);
	} else if (c->json) {
		rc = shmtc_json_emit(top_json(c, &info, v, n, hot));
	} else {
		rc = top_human(&info, v, n, hot);
	}
	free(v);
	shmt_close(h);
	return rc;
}
