/* SPDX-License-Identifier: MIT */
/*
 * check: scan everything the library shows of a segment and name every
 * inconsistency.  It sees the segment through the public API only, so it
 * checks what that API reports (header, regions, slots, each limiter's
 * parameters, state and ring); it grows as the library shows more.
 *
 * Other processes may work while it reads.  A limiter's ring is compared
 * with its counts only when two stat reads around the ring read agree, so a
 * busy limiter is read again rather than reported falsely.
 */
#include "cli.h"

#include "limlist.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Reads of a busy limiter before giving up on checking its ring. */
#define CHECK_TRIES 16

struct report {
	json_t *problems;
	json_t *warnings;
	size_t nlimiters, nbuckets;
};

static void
add(json_t *list, const char *where, const char *fmt, va_list ap)
{
	char what[256];

	vsnprintf(what, sizeof(what), fmt, ap);
	json_array_append_new(list, json_pack("{s:s, s:s}", "where", where,
	    "what", what));
}

static void __attribute__((format(printf, 3, 4)))
problem(struct report *r, const char *where, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	add(r->problems, where, fmt, ap);
	va_end(ap);
}

static void __attribute__((format(printf, 3, 4)))
warning(struct report *r, const char *where, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	add(r->warnings, where, fmt, ap);
	va_end(ap);
}

static void
check_regions(struct report *r, const shmt_segment_stat_t *st)
{
	uint64_t end = 0;

	if (st->nregions == 0 || st->nregions > SHMT_REGIONS_MAX) {
		problem(r, "header", "%u regions (1 to %u expected)",
		    st->nregions, SHMT_REGIONS_MAX);
		return;
	}
	for (uint32_t i = 0; i < st->nregions; i++) {
		const shmt_region_stat_t *g = &st->regions[i];
		char where[32];

		snprintf(where, sizeof(where), "region %.15s", g->name);
		if (g->offset < end)
			problem(r, where, "starts at %" PRIu64 ", inside the "
			    "region before it (ends at %" PRIu64 ")",
			    g->offset, end);
		if (g->offset > st->size || g->size > st->size - g->offset)
			problem(r, where, "ends past the segment's %" PRIu64
			    " bytes", st->size);
		if (g->used > g->size)
			problem(r, where, "uses %" PRIu64 " of its %" PRIu64
			    " bytes", g->used, g->size);
		end = g->offset + g->size;
	}
}

static void
check_segment(struct report *r, const shmt_segment_stat_t *st,
    shmt_time_t now)
{
	check_regions(r, st);
	if (st->format >> 48 != st->abi_version)
		problem(r, "header", "format word 0x%016" PRIx64 " does not "
		    "carry ABI version %u", st->format, st->abi_version);
	if (st->limiters > st->max_limiters)
		problem(r, "limiter table", "%u limiters in %u rows",
		    st->limiters, st->max_limiters);
	if (st->slots > st->max_slots || st->slots_stale > st->slots)
		problem(r, "slots", "%u in use (%u stale) of %u", st->slots,
		    st->slots_stale, st->max_slots);
	if (st->slots_stale > 0)
		warning(r, "slots", "%u stale (their processes died; the "
		    "daemon or the next housekeeping reaps them)",
		    st->slots_stale);
	if (st->daemon_pid == 0)
		warning(r, "daemon", "never ran on this segment");
	else if (!st->daemon_alive)
		warning(r, "daemon", "down (pid %" PRId64 " is gone)",
		    st->daemon_pid);
	if (st->daemon_heartbeat_ns > now)
		problem(r, "daemon", "heartbeat %" PRIu64 "ns in the future",
		    st->daemon_heartbeat_ns - now);
}

static void
check_params(struct report *r, const char *w, const shmt_limiter_stat_t *l)
{
	if (l->limit == 0 || l->limit > SHMT_LIMIT_MAX)
		problem(r, w, "limit %" PRIu64 " out of range", l->limit);
	if (l->window_ns == 0)
		problem(r, w, "window is zero");
	if (l->mode == SHMT_MODE_EXACT && l->limit > SHMT_EXACT_LIMIT_MAX)
		problem(r, w, "exact mode with limit %" PRIu64, l->limit);
	if (l->mode != SHMT_MODE_BUCKETS && l->mode != SHMT_MODE_EXACT)
		problem(r, w, "unknown mode %d", l->mode);
	if (l->nkeys > SHMT_KEYS_MAX || (l->nkeys > 0 && l->uses_per_key == 0))
		problem(r, w, "key pool of %u keys x %u uses", l->nkeys,
		    l->uses_per_key);
	if (l->per_client && (l->client_capacity == 0 ||
	    l->clients_in_use > l->client_capacity))
		problem(r, w, "%u clients in a table of %u",
		    l->clients_in_use, l->client_capacity);
	if (l->mode != SHMT_MODE_BUCKETS)
		return;
	if (l->slack_ns == 0 || l->slack_uses == 0 || l->slack_uses > l->limit)
		problem(r, w, "slack %" PRIu64 "ns / %" PRIu64 " uses out of "
		    "range", l->slack_ns, l->slack_uses);
	else if (l->window_ns != 0 && l->limit != 0) {
		/* The ring never needs more than ceil(C/S) + ceil(L/B). */
		uint64_t need = (l->window_ns + l->slack_ns - 1) / l->slack_ns +
		    (l->limit + l->slack_uses - 1) / l->slack_uses;

		if (l->nbuckets == 0 || l->nbuckets > need ||
		    l->nbuckets > SHMT_BUCKETS_MAX)
			problem(r, w, "ring of %u buckets (at most %" PRIu64
			    " needed)", l->nbuckets, need);
	}
	if (l->buckets_in_use > l->nbuckets)
		problem(r, w, "%u buckets in use in a ring of %u",
		    l->buckets_in_use, l->nbuckets);
}

static void
check_counts(struct report *r, const char *w, const shmt_limiter_stat_t *l)
{
	if (l->per_client)
		return;
	if (l->in_flight > l->limit)
		problem(r, w, "%" PRIu64 " uses in flight, more than the "
		    "limit %" PRIu64, l->in_flight, l->limit);
	else if (l->free != l->limit - l->in_flight)
		problem(r, w, "%" PRIu64 " free + %" PRIu64 " in flight != "
		    "limit %" PRIu64, l->free, l->in_flight, l->limit);
}

static void
check_bucket(struct report *r, const char *w, const shmt_limiter_stat_t *l,
    const shmt_bucket_info_t *b, int last, shmt_time_t now)
{
	if (b->uses > l->slack_uses)
		problem(r, w, "bucket %u holds %u uses, more than %" PRIu64,
		    b->serial, b->uses, l->slack_uses);
	if (b->release_ns != b->close_ns + l->window_ns)
		problem(r, w, "bucket %u releases %" PRId64 "ns off close + "
		    "window", b->serial,
		    (int64_t)(b->release_ns - b->close_ns - l->window_ns));
	if (b->active && !last)
		problem(r, w, "bucket %u is active but not the newest",
		    b->serial);
	/* A bucket opened no later than now closes by time no later than
	 * now + slack; one sealed early because it filled up keeps that
	 * planned close time, so the bound is the same for both. */
	if (b->close_ns > now + l->slack_ns)
		problem(r, w, "bucket %u closes %" PRIu64 "ns after now + slack",
		    b->serial, b->close_ns - now - l->slack_ns);
}

static void
check_ring(struct report *r, const char *w, const shmt_limiter_stat_t *l,
    const shmt_bucket_info_t *b, size_t n, shmt_time_t now)
{
	uint64_t sum = 0;

	r->nbuckets += n;
	if (n != l->buckets_in_use)
		problem(r, w, "%zu buckets in the ring, %u counted", n,
		    l->buckets_in_use);
	for (size_t i = 0; i < n; i++) {
		sum += b[i].uses;
		check_bucket(r, w, l, &b[i], i + 1 == n, now);
		if (i > 0 && b[i].serial != b[i - 1].serial + 1)
			problem(r, w, "bucket %u follows bucket %u",
			    b[i].serial, b[i - 1].serial);
		if (i > 0 && b[i].close_ns < b[i - 1].close_ns)
			problem(r, w, "bucket %u closes before bucket %u",
			    b[i].serial, b[i - 1].serial);
	}
	if (sum != l->in_flight)
		problem(r, w, "buckets hold %" PRIu64 " uses, %" PRIu64
		    " counted in flight", sum, l->in_flight);
}

static int
same_state(const shmt_limiter_stat_t *a, const shmt_limiter_stat_t *b)
{
	return a->in_flight == b->in_flight && a->grants == b->grants &&
	    a->buckets_in_use == b->buckets_in_use && a->free == b->free;
}

/* Read stat, ring, stat until both stats agree; then check the ring. */
static void
check_limiter_ring(struct report *r, shmt_t *h, const char *w,
    const shmt_limiter_stat_t *l0)
{
	shmt_limiter_stat_t a = *l0, b;
	shmt_bucket_info_t *ring = calloc(l0->nbuckets + 1, sizeof(*ring));
	int n, tries;

	if (ring == NULL) {
		warning(r, w, "out of memory: ring not checked");
		return;
	}
	for (tries = 0; tries < CHECK_TRIES; tries++) {
		n = shmt_limiter_buckets(h, l0->name, ring, l0->nbuckets + 1);
		if (n < 0) {
			problem(r, w, "reading its ring: %s", shmt_strerror(n));
			break;
		}
		if (shmt_limiter_stat(h, l0->name, &b) != 0 ||
		    !same_state(&a, &b)) {
			a = b;
			continue;
		}
		check_counts(r, w, &b);
		check_ring(r, w, &b, ring, (size_t)n, shmt_now(h));
		break;
	}
	if (tries == CHECK_TRIES)
		warning(r, w, "changed on every read: ring not checked");
	free(ring);
}

/* A limiter defined between the count and the list makes them differ
 * once; a row that fails validation makes them differ every time.
 * Returns 1 when a second look agrees. */
static int
counts_settle(shmt_t *h)
{
	shmt_segment_stat_t st;
	int rc = shmt_limiter_list(h, NULL, 0);

	if (rc < 0 || shmt_segment_stat(h, &st) != 0)
		return 0;
	return st.limiters == (uint32_t)rc;
}

static void
check_limiters(struct report *r, shmt_t *h, const shmt_segment_stat_t *st)
{
	shmt_limiter_stat_t *v = NULL;
	size_t n = 0;
	int rc = shmtc_limiter_list(h, &v, &n);

	if (rc != 0) {
		problem(r, "limiter table", "%s", shmt_strerror(rc));
		return;
	}
	if (n != st->limiters && !counts_settle(h))
		problem(r, "limiter table", "%u rows defined, %zu pass "
		    "validation (the library hides a damaged row)",
		    st->limiters, n);
	r->nlimiters = n;
	for (size_t i = 0; i < n; i++) {
		const shmt_limiter_stat_t *l = &v[i];
		char w[SHMT_LIMITER_NAME_MAX + 16];

		snprintf(w, sizeof(w), "limiter '%.*s'", SHMT_LIMITER_NAME_MAX,
		    l->name);
		if (l->name[0] == '\0')
			problem(r, w, "row %zu has no name", i);
		for (size_t j = 0; j < i; j++)
			if (strcmp(v[j].name, l->name) == 0)
				problem(r, w, "defined twice (rows %zu and %zu)",
				    j, i);
		check_params(r, w, l);
		if (l->mode == SHMT_MODE_BUCKETS && !l->per_client &&
		    l->nbuckets > 0 && l->nbuckets <= SHMT_BUCKETS_MAX)
			check_limiter_ring(r, h, w, l);
		else
			check_counts(r, w, l);
	}
	free(v);
}

static void
print_list(const char *kind, json_t *list)
{
	size_t i;
	json_t *e;

	json_array_foreach(list, i, e)
		printf("%s: %s: %s\n", kind,
		    json_string_value(json_object_get(e, "where")),
		    json_string_value(json_object_get(e, "what")));
}

static int
check_output(const struct shmtc *c, struct report *r)
{
	size_t np = json_array_size(r->problems);
	size_t nw = json_array_size(r->warnings);
	int rc;

	if (c->json) {
		rc = shmtc_json_emit(json_pack("{s:s, s:b, s:O, s:O, s:i, s:i}",
		    "segment", c->segment, "ok", np == 0,
		    "problems", r->problems, "warnings", r->warnings,
		    "limiters_checked", (int)r->nlimiters,
		    "buckets_checked", (int)r->nbuckets));
		if (rc != 0)
			return rc;
	} else {
		printf("check %s: %zu problem%s, %zu warning%s (%zu limiters, "
		    "%zu buckets checked)\n", c->segment, np, np == 1 ? "" : "s",
		    nw, nw == 1 ? "" : "s", r->nlimiters, r->nbuckets);
		print_list("problem", r->problems);
		print_list("warning", r->warnings);
	}
	return np > 0 ? SHMTC_DAMAGED : SHMTC_OK;
}

int
shmtc_cmd_check(struct shmtc *c, int argc, char **argv)
{
	struct report r = { json_array(), json_array(), 0, 0 };
	shmt_segment_stat_t st;
	shmt_t *h = NULL;
	char *arg;
	int rc;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		goto out;
	if ((rc = shmtc_operands(c, argc, argv, 0, 0)) != 0)
		goto out;
	rc = shmt_open(c->segment, &h);
	if (rc != 0 && shmtc_exit_for(rc) == SHMTC_DAMAGED) {
		/* Damage found while attaching is the first problem. */
		problem(&r, "segment", "%s", shmt_strerror(rc));
		rc = check_output(c, &r);
		goto out;
	}
	if (rc != 0) {
		rc = shmtc_open_error(c, rc);
		goto out;
	}
	if ((rc = shmt_segment_stat(h, &st)) != 0)
		problem(&r, "header", "%s", shmt_strerror(rc));
	else {
		check_segment(&r, &st, shmt_now(h));
		check_limiters(&r, h, &st);
	}
	rc = check_output(c, &r);
out:
	shmt_close(h);
	json_decref(r.problems);
	json_decref(r.warnings);
	return rc < 0 ? shmtc_getopt_exit(rc) : rc;
}
