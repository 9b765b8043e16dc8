/* SPDX-License-Identifier: MIT */
/*
 * check: name every inconsistency of a segment.  The rules are the
 * library's alone: shmt_check_ex() names every problem, and this file only
 * prints them, with the warnings a person wants besides (daemon down, stale
 * slots), which are states, not damage.  With --repair it asks the library
 * to repair what it can, then checks again to say what is left.
 */
#include "cli.h"

#include "limlist.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct report {
	json_t *problems;
	json_t *warnings;
	json_t *left;           /* after --repair: what the second check found */
	json_t *into;           /* where library_problem adds */
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

/* The warnings: the daemon's state and stale slots, as the tool reads them
 * now.  Neither is damage (the library's check names the heartbeat when it
 * lies in the future). */
static void
check_segment(struct report *r, const shmt_segment_stat_t *st)
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
}

/* How much the library's check looked at, for the summary line: the
 * limiters, and the buckets in use of those with a shared ring. */
static void
count_limiters(struct report *r, shmt_t *h)
{
	shmt_limiter_stat_t *v = NULL;
	size_t n = 0;
	int rc = shmtc_limiter_list(h, &v, &n);

	if (rc != 0) {
		problem(r, "limiter table", "%s", shmt_strerror(rc));
		return;
	}
	r->nlimiters = n;
	for (size_t i = 0; i < n; i++)
		if (v[i].mode == SHMT_MODE_BUCKETS && !v[i].per_client)
			r->nbuckets += v[i].buckets_in_use;
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
		json_array_append_new(r->into, json_pack("{s:s, s:s}", "where",
		    "segment", "what", text));
		return;
	}
	json_array_append_new(r->into, json_pack("{s:s%, s:s}", "where",
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
	size_t nl = json_array_size(r->left);
	int ok = r->left != NULL ? nl == 0 : np == 0, rc;
	json_t *j;

	if (c->json) {
		j = json_pack("{s:s, s:b, s:O, s:O, s:i, s:i}", "segment",
		    c->segment, "ok", ok, "problems", r->problems, "warnings",
		    r->warnings, "limiters_checked", (int)r->nlimiters,
		    "buckets_checked", (int)r->nbuckets);
		if (j != NULL && r->left != NULL) {
			json_object_set_new(j, "repaired", json_true());
			json_object_set(j, "left", r->left);
		}
		if ((rc = shmtc_json_emit(j)) != 0)
			return rc;
	} else {
		printf("check %s: %zu problem%s, %zu warning%s (%zu limiters, "
		    "%zu buckets checked)\n", c->segment, np, np == 1 ? "" : "s",
		    nw, nw == 1 ? "" : "s", r->nlimiters, r->nbuckets);
		print_list("problem", r->problems);
		print_list("warning", r->warnings);
		if (r->left != NULL) {
			printf("repaired: %zu problem%s left\n", nl,
			    nl == 1 ? "" : "s");
			print_list("left", r->left);
		}
	}
	return ok ? SHMTC_OK : SHMTC_DAMAGED;
}

int
shmtc_cmd_check(struct shmtc *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "repair", no_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 }
	};
	struct report r = { json_array(), json_array(), NULL, NULL, 0, 0 };
	shmt_segment_stat_t st;
	shmt_t *h = NULL;
	int repair = 0;
	char *arg;
	int rc;

	r.into = r.problems;
	while ((rc = shmtc_getopt(c, argc, argv, NULL, longopts, &arg)) == 'R')
		repair = 1;
	if (rc != -1)
		goto out;
	if ((rc = shmtc_operands(c, argc, argv, 0, 0)) != 0)
		goto out;
	rc = shmtc_attach(c, &h);
	if (rc != 0 && shmtc_exit_for(rc) == SHMTC_DAMAGED) {
		/* Damage found while attaching is the first problem; there
		 * is nothing to repair it with. */
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
	else
		check_segment(&r, &st);
	rc = shmt_check_ex(h, repair ? SHMT_CHECK_REPAIR : 0, library_problem,
	    &r);
	if (rc < 0)
		problem(&r, "segment", "the library's check: %s",
		    shmt_strerror(rc));
	if (repair && rc >= 0) {
		r.left = r.into = json_array();
		if ((rc = shmt_check(h, library_problem, &r)) < 0)
			problem(&r, "segment", "the library's check: %s",
			    shmt_strerror(rc));
	}
	count_limiters(&r, h);
	rc = check_output(c, &r);
out:
	shmt_close(h);
	json_decref(r.problems);
	json_decref(r.warnings);
	json_decref(r.left);
	return rc < 0 ? shmtc_getopt_exit(rc) : rc;
}
