/* SPDX-License-Identifier: MIT */
/*
 * limiters and buckets: the limiter table, one row per limiter, and the
 * ring of one limiter, one row per bucket.
 */
#include "cli.h"

#include "fmt.h"
#include "limlist.h"
#include "table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int
shmtc_limiter_list(shmt_t *h, shmt_limiter_stat_t **out, size_t *n)
{
	shmt_limiter_stat_t *v = NULL;
	size_t cap = 16;
	int rc;

	/* The table may grow between two calls: retry with the count seen. */
	for (;;) {
		shmt_limiter_stat_t *p = realloc(v, cap * sizeof(*v));

		if (p == NULL) {
			free(v);
			return -ENOMEM;
		}
		v = p;
		rc = shmt_limiter_list(h, v, cap);
		if (rc < 0) {
			free(v);
			return rc;
		}
		if ((size_t)rc <= cap)
			break;
		cap = (size_t)rc + 16;
	}
	*out = v;
	*n = (size_t)rc;
	return 0;
}

json_t *
shmtc_limiter_json(const shmt_limiter_stat_t *l)
{
	json_t *o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:i, s:i,"
	    " s:o, s:o, s:o, s:{s:o, s:o, s:o}}",
	    "name", l->name,
	    "mode", shmtc_mode_name(l->mode),
	    "limit", shmtc_json_u64(l->limit),
	    "window_ns", shmtc_json_u64(l->window_ns),
	    "slack_ns", shmtc_json_u64(l->slack_ns),
	    "slack_uses", shmtc_json_u64(l->slack_uses),
	    "nbuckets", (int)l->nbuckets,
	    "buckets_in_use", (int)l->buckets_in_use,
	    "in_flight", shmtc_json_u64(l->in_flight),
	    "free", shmtc_json_u64(l->free),
	    "grants", shmtc_json_u64(l->grants),
	    "denied",
	    "exhausted", shmtc_json_u64(l->denied_exhausted),
	    "slack", shmtc_json_u64(l->denied_slack),
	    "table_full", shmtc_json_u64(l->denied_table_full));

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "keys", l->nkeys == 0 ? json_null() :
	    json_pack("{s:i, s:i}", "count", (int)l->nkeys, "uses_per_key",
	    (int)l->uses_per_key));
	json_object_set_new(o, "clients", !l->per_client ? json_null() :
	    json_pack("{s:i, s:i, s:{s:i, s:i}, s:o, s:o}", "capacity",
	    (int)l->client_capacity, "in_use", (int)l->clients_in_use,
	    "overrides", "capacity", (int)l->client_overrides, "in_use",
	    (int)l->overrides_in_use,
	    "allowed_by_rule", shmtc_json_u64(l->allowed_by_rule),
	    "denied_by_rule", shmtc_json_u64(l->denied_by_rule)));
	json_object_set_new(o, "housekeeping_lag_ns",
	    shmtc_json_u64(l->housekeeping_lag_ns));
	json_object_set_new(o, "burst", l->mode == SHMT_MODE_GCRA ?
	    shmtc_json_u64(l->burst) : json_null());
	json_object_set_new(o, "shadow", json_boolean(l->shadow));
	json_object_set_new(o, "would_deny", shmtc_json_u64(l->would_deny));
	return o;
}

static const char *
global_state_name(int st)
{
	static const char *const names[] = { "unknown", "online", "offline",
		"waiting", "mismatch", "fallback" };

	return st >= 0 && st <= SHMT_GLOBAL_FALLBACK ? names[st] : "unknown";
}

json_t *
shmtc_global_json(shmt_t *h, const char *name)
{
	shmt_global_stat_t g;
	shmt_time_t now = shmt_now(h);

	if (shmt_global_stat(h, name, &g) != 0)
		return json_null();
	return json_pack("{s:s, s:{s:i, s:o, s:o, s:o}, s:o, s:o, s:o, s:o,"
	    " s:o, s:o, s:i, s:o, s:o, s:o, s:o, s:o, s:o}",
	    "state", global_state_name(g.state),
	    "lease",
	    "open", (int)g.leases_open,
	    "cap", shmtc_json_u64(g.lease_cap),
	    "used", shmtc_json_u64(g.lease_used),
	    "left_ns", shmtc_json_u64(g.lease_left_ns),
	    "host_in_flight", shmtc_json_u64(g.host_in_flight),
	    "fleet_in_flight", shmtc_json_u64(g.fleet_in_flight),
	    "host_share", g.fleet_in_flight > 0 ?
	    json_real((double)g.host_in_flight / (double)g.fleet_in_flight) :
	    json_null(),
	    "rtt_ns", shmtc_json_u64(g.rtt_ns),
	    "rtt_max_ns", shmtc_json_u64(g.rtt_max_ns),
	    "errors", shmtc_json_u64(g.errors),
	    "last_error", g.last_error,
	    "leases", shmtc_json_u64(g.leases),
	    "leased_uses", shmtc_json_u64(g.leased_uses),
	    "returned_uses", shmtc_json_u64(g.returned_uses),
	    "requests", shmtc_json_u64(g.requests),
	    "denied", shmtc_json_u64(g.denied),
	    "updated_age_ns", g.updated_ns != 0 && now >= g.updated_ns ?
	    shmtc_json_u64(now - g.updated_ns) : json_null());
}

int
shmtc_global_print(shmt_t *h, const char *name)
{
	char left[SHMTC_FMT_MAX], rtt[SHMTC_FMT_MAX], rmax[SHMTC_FMT_MAX];
	char share[16];
	shmt_global_stat_t g;

	if (shmt_global_stat(h, name, &g) != 0)
		return 0;
	if (g.fleet_in_flight > 0)
		snprintf(share, sizeof(share), "%.0f%%", 100.0 *
		    (double)g.host_in_flight / (double)g.fleet_in_flight);
	else
		snprintf(share, sizeof(share), "-");
	printf("global %s: %s; lease %u open, %" PRIu64 "/%" PRIu64 " used, "
	    "%s left; host holds %" PRIu64 " of the fleet's %" PRIu64
	    " (%s); redis rtt %s (max %s), %" PRIu64 " errors%s%s\n", name,
	    global_state_name(g.state), g.leases_open, g.lease_used,
	    g.lease_cap, shmtc_fmt_dur(left, sizeof(left), g.lease_left_ns),
	    g.host_in_flight, g.fleet_in_flight, share,
	    shmtc_fmt_dur(rtt, sizeof(rtt), g.rtt_ns),
	    shmtc_fmt_dur(rmax, sizeof(rmax), g.rtt_max_ns), g.errors,
	    g.errors > 0 ? ", last: " : "",
	    g.errors > 0 ? shmt_strerror(g.last_error) : "");
	return 1;
}

/* The EXTRA column: what a key pool or a client table adds. */
static void
extra_cell(char *buf, size_t cap, const shmt_limiter_stat_t *l)
{
	if (l->nkeys > 0 && l->per_client)
		snprintf(buf, cap, "keys %ux%u, clients %u/%u", l->nkeys,
		    l->uses_per_key, l->clients_in_use, l->client_capacity);
	else if (l->nkeys > 0)
		snprintf(buf, cap, "keys %ux%u", l->nkeys, l->uses_per_key);
	else if (l->per_client)
		snprintf(buf, cap, "clients %u/%u", l->clients_in_use,
		    l->client_capacity);
	else
		snprintf(buf, cap, "-");
	if (l->per_client && (l->overrides_in_use > 0 ||
	    l->allowed_by_rule > 0 || l->denied_by_rule > 0)) {
		size_t n = strlen(buf);

		snprintf(buf + n, cap - n, ", overrides %u/%u (allowed %" PRIu64
		    ", denied %" PRIu64 ")", l->overrides_in_use,
		    l->client_overrides, l->allowed_by_rule, l->denied_by_rule);
	}
	if (l->shadow) {
		size_t n = strlen(buf);

		if (strcmp(buf, "-") == 0)
			n = 0;
		snprintf(buf + n, cap - n, "%sshadow, would deny %" PRIu64,
		    n > 0 ? ", " : "", l->would_deny);
	}
}

static void
limiter_row(struct shmtc_table *t, const shmt_limiter_stat_t *l)
{
	char lim[24], win[SHMTC_FMT_MAX], slack[48], infl[24], fr[24], bk[24];
	char gr[24], dx[24], ds[24], df[24], extra[192], d[SHMTC_FMT_MAX];
	const char *row[13] = { l->name, shmtc_mode_name(l->mode), lim, win,
		slack, infl, fr, bk, gr, dx, ds, df, extra };

	snprintf(lim, sizeof(lim), "%" PRIu64, l->limit);
	shmtc_fmt_dur(win, sizeof(win), l->window_ns);
	if (l->mode == SHMT_MODE_BUCKETS)
		snprintf(slack, sizeof(slack), "%s/%" PRIu64,
		    shmtc_fmt_dur(d, sizeof(d), l->slack_ns), l->slack_uses);
	else if (l->mode == SHMT_MODE_GCRA)
		snprintf(slack, sizeof(slack), "burst %" PRIu64, l->burst);
	else
		snprintf(slack, sizeof(slack), "-");
	snprintf(infl, sizeof(infl), "%" PRIu64, l->in_flight);
	if (l->per_client)
		snprintf(fr, sizeof(fr), "-");
	else
		snprintf(fr, sizeof(fr), "%" PRIu64, l->free);
	if (l->mode == SHMT_MODE_BUCKETS)
		snprintf(bk, sizeof(bk), "%u/%u", l->buckets_in_use,
		    l->nbuckets);
	else
		snprintf(bk, sizeof(bk), "-");
	snprintf(gr, sizeof(gr), "%" PRIu64, l->grants);
	snprintf(dx, sizeof(dx), "%" PRIu64, l->denied_exhausted);
	snprintf(ds, sizeof(ds), "%" PRIu64, l->denied_slack);
	snprintf(df, sizeof(df), "%" PRIu64, l->denied_table_full);
	extra_cell(extra, sizeof(extra), l);
	shmtc_table_row(t, row);
}

static int
limiters_human(shmt_t *h, const shmt_limiter_stat_t *v, size_t n)
{
	static const char *const hdr[] = { "NAME", "MODE", "LIMIT", "WINDOW",
		"SLACK", "INFLIGHT", "FREE", "BUCKETS", "GRANTS", "EXHAUSTED",
		"SLACK", "FULL", "EXTRA" };
	struct shmtc_table t;
	int rc;

	if (n == 0) {
		printf("no limiters defined\n");
		return SHMTC_OK;
	}
	shmtc_table_init(&t, 13, hdr, "llrrrrrrrrrrl");
	for (size_t i = 0; i < n; i++)
		limiter_row(&t, &v[i]);
	rc = shmtc_table_print(&t, stdout);
	shmtc_table_free(&t);
	for (size_t i = 0; i < n && rc == 0; i++)
		shmtc_global_print(h, v[i].name);
	return rc == 0 ? SHMTC_OK : SHMTC_MISSING;
}

static int
limiters_json(shmt_t *h, const shmt_limiter_stat_t *v, size_t n)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *o = shmtc_limiter_json(&v[i]);

		if (o != NULL)
			json_object_set_new(o, "global",
			    shmtc_global_json(h, v[i].name));
		json_array_append_new(arr, o);
	}
	return shmtc_json_emit(json_pack("{s:s, s:o, s:o}",
	    "segment", shmt_name(h),
	    "now_ns", shmtc_json_u64(shmt_now(h)),
	    "limiters", arr));
}

int
shmtc_cmd_limiters(struct shmtc *c, int argc, char **argv)
{
	shmt_limiter_stat_t *v = NULL;
	shmt_t *h = NULL;
	size_t n = 0;
	int rc;

	if ((rc = shmtc_prologue(c, argc, argv, 0, 0, &h)) != SHMTC_GO)
		return rc;
	if ((rc = shmtc_limiter_list(h, &v, &n)) != 0) {
		shmtc_err("%s: limiters: %s", c->segment, shmt_strerror(rc));
		rc = shmtc_exit_for(rc);
		goto out;
	}
	rc = c->json ? limiters_json(h, v, n) : limiters_human(h, v, n);
out:
	free(v);
	shmt_close(h);
	return rc;
}

/* ---- buckets --------------------------------------------------------- */

static json_t *
bucket_json(const shmt_bucket_info_t *b, shmt_time_t now)
{
	return json_pack("{s:I, s:i, s:b, s:o, s:o, s:I, s:I}",
	    "serial", (json_int_t)b->serial,
	    "uses", (int)b->uses,
	    "active", b->active != 0,
	    "close_ns", shmtc_json_u64(b->close_ns),
	    "release_ns", shmtc_json_u64(b->release_ns),
	    "closes_in_ns", (json_int_t)(b->close_ns - now),
	    "releases_in_ns", (json_int_t)(b->release_ns - now));
}

static int
buckets_json(const shmt_limiter_stat_t *l, const shmt_bucket_info_t *b,
    size_t n, shmt_time_t now)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, bucket_json(&b[i], now));
	return shmtc_json_emit(json_pack("{s:s, s:o, s:o, s:o, s:o, s:i, s:o}",
	    "limiter", l->name,
	    "now_ns", shmtc_json_u64(now),
	    "window_ns", shmtc_json_u64(l->window_ns),
	    "slack_ns", shmtc_json_u64(l->slack_ns),
	    "slack_uses", shmtc_json_u64(l->slack_uses),
	    "nbuckets", (int)l->nbuckets,
	    "buckets", arr));
}

static int
buckets_human(const shmt_limiter_stat_t *l, const shmt_bucket_info_t *b,
    size_t n, shmt_time_t now)
{
	static const char *const hdr[] = { "SERIAL", "USES", "STATE",
		"CLOSES", "RELEASES" };
	char ser[16], uses[16], cl[SHMTC_FMT_MAX], rel[SHMTC_FMT_MAX];
	char win[SHMTC_FMT_MAX], slack[SHMTC_FMT_MAX];
	struct shmtc_table t;
	int rc;

	printf("limiter %s: window %s, slack %s/%" PRIu64 ", %zu of %u "
	    "buckets in use, %" PRIu64 " in flight\n", l->name,
	    shmtc_fmt_dur(win, sizeof(win), l->window_ns),
	    shmtc_fmt_dur(slack, sizeof(slack), l->slack_ns), l->slack_uses,
	    n, l->nbuckets, l->in_flight);
	if (n == 0)
		return SHMTC_OK;
	shmtc_table_init(&t, 5, hdr, "rrlrr");
	for (size_t i = 0; i < n; i++) {
		const char *row[5] = { ser, uses,
			b[i].active ? "active" : "sealed",
			shmtc_fmt_rel(cl, sizeof(cl), b[i].close_ns, now),
			shmtc_fmt_rel(rel, sizeof(rel), b[i].release_ns, now) };

		snprintf(ser, sizeof(ser), "%u", b[i].serial);
		snprintf(uses, sizeof(uses), "%u", b[i].uses);
		shmtc_table_row(&t, row);
	}
	rc = shmtc_table_print(&t, stdout);
	shmtc_table_free(&t);
	return rc == 0 ? SHMTC_OK : SHMTC_MISSING;
}

/* Exit code and message for an error about limiter NAME. */
int
shmtc_limiter_error(const struct shmtc *c, const char *name, int err)
{
	switch (err) {
	case -ENOENT:
		shmtc_err("no limiter '%s' in %s", name, c->segment);
		return SHMTC_NO;
	case -EINVAL:
	case -ENAMETOOLONG:
		shmtc_err("bad limiter name '%s'", name);
		return SHMTC_USAGE;
	default:
		shmtc_err("limiter '%s': %s", name, shmt_strerror(err));
		return err == -EPERM || err == -ENOKEY || err == -E2BIG ?
		    SHMTC_USAGE : shmtc_exit_for(err);
	}
}

static int
buckets_show(const struct shmtc *c, shmt_t *h, const char *name)
{
	shmt_bucket_info_t *b = NULL;
	shmt_limiter_stat_t l;
	shmt_time_t now;
	int rc;

	if ((rc = shmt_limiter_stat(h, name, &l)) != 0)
		return shmtc_limiter_error(c, name, rc);
	if (l.mode != SHMT_MODE_BUCKETS || l.per_client) {
		shmtc_err("limiter '%s' has no single ring of buckets (%s)",
		    name, l.per_client ? "per client" : "exact mode");
		return SHMTC_USAGE;
	}
	b = calloc(l.nbuckets ? l.nbuckets : 1, sizeof(*b));
	if (b == NULL)
		return shmtc_limiter_error(c, name, -ENOMEM);
	rc = shmt_limiter_buckets(h, name, b, l.nbuckets);
	now = shmt_now(h);
	if (rc < 0)
		rc = shmtc_limiter_error(c, name, rc);
	else if (c->json)
		rc = buckets_json(&l, b, (size_t)rc, now);
	else
		rc = buckets_human(&l, b, (size_t)rc, now);
	free(b);
	return rc;
}

int
shmtc_cmd_buckets(struct shmtc *c, int argc, char **argv)
{
	shmt_t *h = NULL;
	int rc;

	if ((rc = shmtc_prologue(c, argc, argv, 1, 0, &h)) != SHMTC_GO)
		return rc;
	rc = buckets_show(c, h, argv[optind]);
	shmt_close(h);
	return rc;
}
