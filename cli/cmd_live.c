/* SPDX-License-Identifier: MIT */
/*
 * limiter set, limiter delete and reset: change a limiter while workers run
 * (its uses in flight stay counted), delete it, or give back its uses in
 * flight (a deliberate over-grant).
 */
#include "cli.h"
#include "daemon.h"

#include "fmt.h"
#include "limlist.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "250ms", "1.5s" is not taken: a whole number and a unit among ns, us,
 * ms, s, m, h (a bare number is seconds). */
static int
parse_ns(const char *s, uint64_t *out)
{
	static const struct { const char *u; uint64_t mul; } units[] = {
		{ "ns", 1 }, { "us", 1000 }, { "ms", 1000000 },
		{ "s", 1000000000ULL }, { "", 1000000000ULL },
		{ "m", 60000000000ULL }, { "h", 3600000000000ULL },
	};
	char *end;
	uint64_t v;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].u) == 0) {
			if (v > UINT64_MAX / units[i].mul)
				return -1;
			*out = v * units[i].mul;
			return 0;
		}
	return -1;
}

static int
parse_count(const char *s, uint64_t *out)
{
	char *end;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno != 0 || *end != '\0' ? -1 : 0;
}

/* The names of a key pool, "a,b,c", into L (kept in static storage: one
 * command, one list). */
static int
set_keys(shmt_limit_t *l, const char *v)
{
	static char buf[SHMT_KEYS_MAX * (SHMT_KEYNAME_MAX + 1)];
	static const char *keys[SHMT_KEYS_MAX];
	uint32_t n = 0;
	char *p, *save = NULL;

	if (strlen(v) >= sizeof(buf) || *v == '\0')
		return -1;
	memcpy(buf, v, strlen(v) + 1);
	for (p = strtok_r(buf, ",", &save); p != NULL;
	    p = strtok_r(NULL, ",", &save)) {
		if (n == SHMT_KEYS_MAX)
			return -1;
		keys[n++] = p;
	}
	l->nkeys = n;
	l->keys = keys;
	return n == 0 ? -1 : 0;
}

/* Apply one KEY=VALUE to L. */
static int
set_one(const struct shmtc *c, shmt_limit_t *l, const char *kv)
{
	const char *eq = strchr(kv, '=');
	size_t klen = eq != NULL ? (size_t)(eq - kv) : 0;
	const char *v = eq != NULL ? eq + 1 : "";
	int bad;

	if (eq == NULL || klen == 0)
		return shmtc_usage_error(c, "'%s': expected KEY=VALUE", kv);
	if (klen == 5 && strncmp(kv, "limit", 5) == 0)
		bad = parse_count(v, &l->limit);
	else if (klen == 6 && strncmp(kv, "window", 6) == 0)
		bad = parse_ns(v, &l->window_ns);
	else if (klen == 10 && strncmp(kv, "slack_time", 10) == 0)
		bad = parse_ns(v, &l->slack_ns);
	else if (klen == 10 && strncmp(kv, "slack_uses", 10) == 0)
		bad = parse_count(v, &l->slack_uses);
	else if (klen == 5 && strncmp(kv, "burst", 5) == 0)
		bad = parse_count(v, &l->burst);
	else if (klen == 4 && strncmp(kv, "mode", 4) == 0) {
		bad = 0;
		if (strcmp(v, "rate") == 0 || strcmp(v, "gcra") == 0)
			l->mode = SHMT_MODE_GCRA;
		else if (strcmp(v, "buckets") == 0)
			l->mode = SHMT_MODE_BUCKETS;
		else if (strcmp(v, "exact") == 0)
			l->mode = SHMT_MODE_EXACT;
		else
			return shmtc_usage_error(c, "'%s': the modes are "
			    "buckets, rate (gcra) and exact", kv);
	}
	else if (klen == 8 && strncmp(kv, "capacity", 8) == 0 &&
	    l->per_client) {
		uint64_t n = 0;

		bad = parse_count(v, &n) || n > UINT32_MAX;
		l->client_capacity = (uint32_t)n;
	} else if (klen == 9 && strncmp(kv, "overrides", 9) == 0 &&
	    l->per_client) {
		uint64_t n = 0;

		bad = parse_count(v, &n) || n > UINT32_MAX;
		l->client_overrides = (uint32_t)n;
	} else if (klen == 12 && strncmp(kv, "uses_per_key", 12) == 0 &&
	    l->uses_per_key != 0) {
		uint64_t n = 0;

		bad = parse_count(v, &n) || n == 0 || n > UINT32_MAX;
		l->uses_per_key = (uint32_t)n;
	} else if (klen == 4 && strncmp(kv, "keys", 4) == 0 &&
	    l->uses_per_key != 0) {
		bad = set_keys(l, v);
	} else
		return shmtc_usage_error(c, "'%.*s': the keys are mode, limit, "
		    "window, slack_time and slack_uses (buckets mode), burst (rate "
		    "mode), capacity and overrides for a per-client limiter, "
		    "keys (NAME,NAME...) and uses_per_key for a key pool",
		    (int)klen, kv);
	if (bad)
		return shmtc_usage_error(c, "'%s': %s", kv, klen == 6 ||
		    (klen == 10 && kv[6] == 't') ? "a whole number and a unit "
		    "(ns, us, ms, s, m, h), e.g. 500ms" : "a whole number");
	return 0;
}

/* Why limiter set failed with ERR; the exit code: 5 for no such limiter,
 * as try, wait and next-key say it. */
static int
set_error(const struct shmtc *c, const char *name, int err)
{
	int rc = shmtc_limiter_error(c, name, err);

	return err == -ENOENT ? SHMTC_NOLIMITER : rc;
}

/* limiter set NAME KEY=VALUE... | limiter delete NAME */
int
shmtc_cmd_limiter(struct shmtc *c, int argc, char **argv)
{
	shmt_limiter_stat_t st;
	shmt_limit_t l;
	shmt_t *h = NULL;
	const char *sub, *name;
	char why[768], *arg;
	int rc, set, moved = 0;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if (argc - optind < 2)
		return shmtc_usage_error(c, "expected 'set NAME KEY=VALUE...' "
		    "or 'delete NAME'");
	sub = argv[optind];
	name = argv[optind + 1];
	set = strcmp(sub, "set") == 0;
	if (!set && strcmp(sub, "delete") != 0)
		return shmtc_usage_error(c, "'%s': expected set or delete", sub);
	if (set && argc - optind < 3)
		return shmtc_usage_error(c, "limiter set: expected KEY=VALUE "
		    "after the name");
	if (!set && argc - optind > 2)
		return shmtc_usage_error(c, "limiter delete: unexpected '%s'",
		    argv[optind + 2]);
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	if (!set) {
		rc = shmt_limiter_delete(h, name);
		shmt_close(h);
		if (rc != 0)
			return shmtc_limiter_error(c, name, rc);
		if (c->json)
			return shmtc_json_emit(json_pack("{s:s, s:b}",
			    "limiter", name, "deleted", 1));
		printf("deleted limiter %s\n", name);
		return SHMTC_OK;
	}
	if ((rc = shmt_limiter_stat(h, name, &st)) != 0) {
		shmt_close(h);
		return set_error(c, name, rc);
	}
	memset(&l, 0, sizeof(l));
	l.mode = st.mode;
	l.limit = st.limit;
	l.window_ns = st.window_ns;
	l.slack_ns = st.slack_ns;
	l.slack_uses = st.slack_uses;
	l.burst = st.burst;
	l.shadow = st.shadow;
	if (st.per_client) {
		l.per_client = 1;
		l.client_capacity = st.client_capacity;
		l.client_overrides = st.client_overrides;
	}
	if (st.nkeys > 0) {
		/* No names: the move keeps the pool's; the limit is
		 * nkeys x uses_per_key. */
		l.uses_per_key = st.uses_per_key;
		l.limit = 0;
	}
	for (int i = optind + 2; i < argc; i++)
		if ((rc = set_one(c, &l, argv[i])) != 0) {
			shmt_close(h);
			return rc;
		}
	why[0] = '\0';
	if (st.per_client || st.nkeys > 0) {
		/* A per-client limiter or a key pool cannot change in place:
		 * a move into a new generation defines it anew, every use in
		 * flight carried. */
		struct shmt__redef d = { name, &l };
		shmt_config_t cfg;

		moved = 1;
		shmt__move_config(h, &cfg);
		rc = shmt__move_redefine(h, &cfg, &d, 1, NULL, NULL, why,
		    sizeof(why));
	} else {
		if (l.mode == SHMT_MODE_GCRA && st.mode != SHMT_MODE_GCRA) {
			/* Into rate mode: no slack. */
			l.slack_ns = 0;
			l.slack_uses = 0;
		}
		rc = shmt_limiter_update(h, name, &l, why, sizeof(why));
		if ((rc == -E2BIG && st.mode == SHMT_MODE_EXACT &&
		    l.mode == SHMT_MODE_EXACT) || (rc == -EOPNOTSUPP &&
		    l.mode == SHMT_MODE_GCRA && st.mode != SHMT_MODE_GCRA)) {
			/* A limit above the exact log, or into rate mode:
			 * a move into a new generation, every use in flight
			 * carried. */
			struct shmt__redef d = { name, &l };
			shmt_config_t cfg;

			moved = 1;
			why[0] = '\0';
			shmt__move_config(h, &cfg);
			rc = shmt__move_redefine(h, &cfg, &d, 1, NULL, NULL,
			    why, sizeof(why));
		}
	}
	if (rc == 0)
		rc = shmt_limiter_stat(h, name, &st);
	shmt_close(h);
	if (rc == -EINVAL || rc == -EOPNOTSUPP || rc == -E2BIG ||
	    (moved && rc == -ENOSPC)) {
		shmtc_err("limiter '%s' cannot change %s: %s", name,
		    moved ? "(it keeps its definition and its uses in flight)" :
		    "in place", why[0] != '\0' ? why : shmt_strerror(rc));
		return SHMTC_NO;
	}
	if (rc != 0 && moved && why[0] != '\0') {
		shmtc_err("limiter '%s': the move into a new generation failed: "
		    "%s", name, why);
		return shmtc_exit_for(rc);
	}
	if (rc != 0)
		return set_error(c, name, rc);
	if (c->json) {
		json_t *o = json_pack(
		    "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b}",
		    "limiter", name, "mode", st.mode == SHMT_MODE_GCRA ? "gcra" :
		    st.mode == SHMT_MODE_EXACT ? "exact" : "buckets",
		    "limit", (json_int_t)st.limit,
		    "window_ns", (json_int_t)st.window_ns,
		    "slack_ns", (json_int_t)st.slack_ns,
		    "slack_uses", (json_int_t)st.slack_uses,
		    "burst", (json_int_t)st.burst,
		    "in_flight", (json_int_t)st.in_flight,
		    "moved", moved);

		if (o != NULL && st.per_client)
			json_object_set_new(o, "clients", json_pack("{s:I, s:I, "
			    "s:I}", "capacity", (json_int_t)st.client_capacity,
			    "in_use", (json_int_t)st.clients_in_use,
			    "overrides", (json_int_t)st.client_overrides));
		if (o != NULL && st.nkeys > 0)
			json_object_set_new(o, "keys", json_pack("{s:I, s:I}",
			    "count", (json_int_t)st.nkeys, "uses_per_key",
			    (json_int_t)st.uses_per_key));
		return shmtc_json_emit(o);
	}
	{
		char w[32], s[32], tail[64];

		if (st.mode == SHMT_MODE_GCRA)
			snprintf(tail, sizeof(tail), ", burst %" PRIu64,
			    st.burst);
		else if (st.mode == SHMT_MODE_EXACT)
			tail[0] = '\0';
		else
			snprintf(tail, sizeof(tail), ", slack %s/%" PRIu64,
			    shmtc_fmt_dur(s, sizeof(s), st.slack_ns),
			    st.slack_uses);
		printf("limiter %s: limit %" PRIu64 " per %s%s; %" PRIu64
		    " uses in flight kept\n", name, st.limit,
		    shmtc_fmt_dur(w, sizeof(w), st.window_ns), tail,
		    st.in_flight);
		if (moved && st.per_client)
			printf("defined anew by a move into a new generation: "
			    "%u clients carried, capacity %u, %u overrides; "
			    "running workers follow on their next call\n",
			    st.clients_in_use, st.client_capacity,
			    st.client_overrides);
		else if (moved && st.mode == SHMT_MODE_GCRA)
			printf("defined anew by a move into a new generation: "
			    "in rate mode, every use in flight carried at the "
			    "new interval; running workers follow on their "
			    "next call\n");
		else if (moved && st.mode == SHMT_MODE_EXACT)
			printf("defined anew by a move into a new generation: "
			    "a log of %" PRIu64 " records, every use in flight "
			    "carried with its time; running workers follow on "
			    "their next call\n", st.limit);
		else if (moved)
			printf("defined anew by a move into a new generation: "
			    "%u key names x %u uses per key, names from the "
			    "first in grant order; running workers follow on "
			    "their next call\n", st.nkeys, st.uses_per_key);
	}
	return SHMTC_OK;
}

/* reset LIMITER [CLIENT] */
int
shmtc_cmd_reset(struct shmtc *c, int argc, char **argv)
{
	shmt_t *h = NULL;
	const char *name, *client;
	int rc;

	if ((rc = shmtc_prologue(c, argc, argv, 1, 1, &h)) != SHMTC_GO)
		return rc;
	name = argv[optind];
	client = optind + 1 < argc ? argv[optind + 1] : NULL;
	rc = shmt_limiter_reset(h, name, client,
	    client != NULL ? strlen(client) : 0);
	shmt_close(h);
	if (rc < 0)
		return shmtc_limiter_error(c, name, rc);
	if (c->json) {
		json_t *o = json_pack("{s:s, s:i}", "limiter", name,
		    "given_back", rc);

		if (o != NULL && client != NULL && shmtc_json_bytes(o,
		    "client", "client_encoding", client, strlen(client)) != 0) {
			json_decref(o);
			o = NULL;
		}
		return shmtc_json_emit(o);
	}
	printf("reset %s%s%s: %d uses given back\n", name,
	    client != NULL ? " for " : "", client != NULL ? client : "", rc);
	return SHMTC_OK;
}
