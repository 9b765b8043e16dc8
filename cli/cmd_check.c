/* SPDX-License-Identifier: MIT */
/*
 * check: name every inconsistency of a segment.  The library's shmt_check()
 * scans the structures (header, limiters, client tables, dictionary and
 * counter shards); this file adds what only a reader of the public API
 * with a clock sees (bucket times, the daemon's heartbeat) and the
 * warnings a person wants (daemon down, stale slots).
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

/* What the library's check leaves to the tool: the daemon's state and
 * heartbeat, and stale slots, as the tool reads them now. */
static void
check_segment(struct report *r, const shmt_segment_stat_t *st,
    shmt_time_t now)
{
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

/* The library checks each slot's serial and count against the state
 * word; the times it stores are left to this check. */
static void
check_ring(struct report *r, const char *w, const shmt_limiter_stat_t *l,
    const shmt_bucket_info_t *b, size_t n, shmt_time_t now)
{
	r->nbuckets += n;
	for (size_t i = 0; i < n; i++) {
		check_bucket(r, w, l, &b[i], i + 1 == n, now);
		if (i > 0 && b[i].close_ns < b[i - 1].close_ns)
			problem(r, w, "bucket %u closes before bucket %u",
			    b[i].serial, b[i - 1].serial);
	}
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
		check_ring(r, w, &b, ring, (size_t)n, shmt_now(h));
		break;
	}
	if (tries == CHECK_TRIES)
		warning(r, w, "changed on every read: ring not checked");
	free(ring);
}

/* Each limiter's ring of buckets, for the times only: the library's check
 * has seen its parameters, word and slots already. */
static void
check_limiters(struct report *r, shmt_t *h)
{
	shmt_limiter_stat_t *v = NULL;
	size_t n = 0;
	int rc = shmtc_limiter_list(h, &v, &n);

	if (rc != 0) {
		problem(r, "limiter table", "%s", shmt_strerror(rc));
		return;
	}
	r->nlimiters = n;
	for (size_t i = 0; i < n; i++) {
		const shmt_limiter_stat_t *l = &v[i];
		char w[SHMT_LIMITER_NAME_MAX + 16];

		/* Named as the library's check names it. */
		snprintf(w, sizeof(w), "limiter %.*s", SHMT_LIMITER_NAME_MAX,
		    l->name);
		if (l->mode == SHMT_MODE_BUCKETS && !l->per_client &&
		    l->nbuckets > 0 && l->nbuckets <= SHMT_BUCKETS_MAX)
			check_limiter_ring(r, h, w, l);
	}
	free(v);
}

/*
 * One problem from shmt_check(): its sentences read "where: what" (e.g.
 * "dictionary shard 3: bucket 5 links to an invalid item at 4096"), which
 * is split so that both views name the place the same way as the tool's
 * own problems.
 */
static void
library_problem(void *ctx, const char *text)
{
	struct report *r = ctx;
	const char *sep = strstr(text, ": ");

	if (sep == NULL) {
		problem(r, "segment", "%s", text);
		return;
	}
	json_array_append_new(r->problems, json_pack("{s:s%, s:s}", "where",
	    text, (size_t)(sep - text), "what", sep + 2));
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
	rc = shmtc_attach(c, &h);
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
		rc = shmt_check(h, library_problem, &r);
		if (rc < 0)
			problem(&r, "segment", "the library's check: %s",
			    shmt_strerror(rc));
		check_limiters(&r, h);
	}
	rc = check_output(c, &r);
out:
	shmt_close(h);
	json_decref(r.problems);
	json_decref(r.warnings);
	return rc < 0 ? shmtc_getopt_exit(rc) : rc;
}
