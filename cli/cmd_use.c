/* SPDX-License-Identifier: MIT */
/*
 * try, wait and next-key: take uses of a limiter, as a worker would, and
 * say what was decided: granted or throttled, what remains, when to retry,
 * when the limiter is full again (and, for a key pool, which key to use).
 */
#include "cli.h"

#include "limlist.h"

#include "bytes.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int
use_result(const struct shmtc *c, const char *name, const char *client,
    const char *key, int granted)
{
	if (c->json) {
		json_t *o = json_pack("{s:s, s:b}", "limiter", name,
		    "granted", granted);
		int rc;

		if (o != NULL && client != NULL)
			json_object_set_new(o, "client", json_string(client));
		if (o != NULL && key != NULL)
			json_object_set_new(o, "key", granted ? json_string(key) :
			    json_null());
		rc = shmtc_json_emit(o);
		if (rc != 0)
			return rc;
	} else if (key != NULL && granted) {
		puts(key);
	} else if (key != NULL) {
		/* stdout stays empty so that `$(shmthrottle next-key x)` is
		 * either a key or nothing. */
		fputs("throttled\n", stderr);
	} else {
		puts(granted ? "granted" : "throttled");
	}
	return granted ? SHMTC_OK : SHMTC_NO;
}

/* A wait shown to people: rounded up, so that waiting what is shown is
 * never too early ("retry in 1s" means at least that). */
static char *
dur_up(char *buf, size_t cap, uint64_t ns)
{
	if (ns == 0)
		snprintf(buf, cap, "0s");
	else if (ns < 10000000000ULL)
		snprintf(buf, cap, "%" PRIu64 "ms", (ns + 999999) / 1000000);
	else
		snprintf(buf, cap, "%" PRIu64 "s", (ns + 999999999) / 1000000000);
	return buf;
}

/* retry_after_ns in whole seconds, rounded up, for JSON: null when the
 * wait is "never" (UINT64_MAX: a client's deny rule), which the rounding
 * would otherwise wrap to 0. */
static json_t *
retry_s_json(uint64_t ns)
{
	if (ns == UINT64_MAX)
		return json_null();
	return shmtc_json_u64(ns / 1000000000 + (ns % 1000000000 != 0));
}

/* Print decision D of a request for LIMITER (CLIENT may be NULL). */
static int
decision_result(const struct shmtc *c, const char *name, const char *client,
    uint64_t cost, int peek, int rc, const shmt_decision_t *d)
{
	char a[32], b[32];

	if (c->json) {
		json_t *o = json_pack("{s:s, s:b, s:b, s:o, s:o, s:o, s:o, s:o,"
		    " s:o, s:b}", "limiter", name, "granted", rc == 1,
		    "decision_granted", d->granted,
		    "cost", shmtc_json_u64(cost),
		    "limit", shmtc_json_u64(d->limit),
		    "remaining", shmtc_json_u64(d->remaining),
		    "retry_after_ns", shmtc_json_u64(d->retry_after_ns),
		    "retry_after_s", retry_s_json(d->retry_after_ns),
		    "reset_after_ns", shmtc_json_u64(d->reset_after_ns),
		    "peek", peek);
		int jrc;

		if (o != NULL && client != NULL && shmtc_json_bytes(o,
		    "client", "client_encoding", client, strlen(client)) != 0) {
			json_decref(o);
			o = NULL;
		}
		if ((jrc = shmtc_json_emit(o)) != 0)
			return jrc;
	} else if (d->limit == 0) {
		/* Only a client's allow or deny rule decides with limit 0
		 * (shmt_client_set). */
		printf("%s: the client's %s rule\n", d->granted ? (rc == 1 &&
		    peek ? "would be granted" : "granted") : (peek ?
		    "would be throttled" : "throttled"), d->granted ? "allow" :
		    "deny");
	} else if (d->granted) {
		printf("%s: %" PRIu64 " of %" PRIu64 " remaining, all back in "
		    "%s\n", rc == 1 && peek ? "would be granted" : "granted",
		    d->remaining, d->limit,
		    dur_up(b, sizeof(b), d->reset_after_ns));
	} else {
		printf("%s: retry in %s, %" PRIu64 " of %" PRIu64 " remaining, "
		    "all back in %s%s\n", peek ? "would be throttled" :
		    "throttled", dur_up(a, sizeof(a), d->retry_after_ns),
		    d->remaining, d->limit, dur_up(b, sizeof(b),
		    d->reset_after_ns), rc == 1 ? " (shadow: granted)" : "");
	}
	return rc == 1 ? SHMTC_OK : SHMTC_NO;
}

enum { OPT_COST = 0x400, OPT_PEEK, OPT_TIMEOUT };

/* try and wait: LIMITER [CLIENT] [--cost N] [--peek | --timeout D]. */
static int
use_cmd(struct shmtc *c, int argc, char **argv, int waiting)
{
	static const struct option tryopts[] = {
		{ "cost", required_argument, NULL, OPT_COST },
		{ "peek", no_argument, NULL, OPT_PEEK },
		{ NULL, 0, NULL, 0 }
	};
	static const struct option waitopts[] = {
		{ "cost", required_argument, NULL, OPT_COST },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ NULL, 0, NULL, 0 }
	};
	const char *name, *client;
	uint64_t cost = 1, timeout = UINT64_MAX, ms;
	shmt_decision_t d;
	shmt_t *h = NULL;
	int peek = 0, rc, opt;
	char *arg, *end;

	while ((opt = shmtc_getopt(c, argc, argv, NULL,
	    waiting ? waitopts : tryopts, &arg)) != -1) {
		if (opt < -1)
			return shmtc_getopt_exit(opt);
		if (opt == OPT_PEEK) {
			peek = 1;
		} else if (opt == OPT_COST) {
			errno = 0;
			cost = strtoull(arg, &end, 10);
			if (errno != 0 || *end != '\0' || cost == 0 ||
			    !isdigit((unsigned char)*arg))
				return shmtc_usage_error(c, "--cost needs a whole "
				    "number from 1, not '%s'", arg);
		} else if (opt == OPT_TIMEOUT) {
			if (shmtc_parse_ms(arg, &ms) != 0 ||
			    ms > UINT64_MAX / 1000000)
				return shmtc_usage_error(c, "--timeout needs a "
				    "duration (e.g. 500ms, 2s), not '%s'", arg);
			timeout = ms * 1000000;
		}
	}
	if ((rc = shmtc_operands(c, argc, argv, 1, 1)) != 0)
		return rc;
	name = argv[optind];
	client = optind + 1 < argc ? argv[optind + 1] : NULL;
	if (client != NULL && *client == '\0')
		return shmtc_usage_error(c, "CLIENT must not be empty");
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	if (waiting)
		rc = shmt_wait(h, name, client, client ? strlen(client) : 0,
		    cost, timeout, &d);
	else if (peek)
		rc = shmt_peek(h, name, client, client ? strlen(client) : 0,
		    cost, &d);
	else
		rc = shmt_acquire(h, name, client, client ? strlen(client) : 0,
		    cost, &d);
	if (rc == -EPERM)
		rc = shmtc_usage_error(c, "limiter '%s' %s", name, client ?
		    "is not per client: give no CLIENT" :
		    "is per client: give a CLIENT");
	else if (rc == -EINVAL && cost > 1)
		rc = shmtc_usage_error(c, "limiter '%s' takes no cost of %"
		    PRIu64 " at once", name, cost);
	else if (rc == -ENOENT)
		rc = shmtc_limiter_error(c, name, rc) == SHMTC_NO ?
		    SHMTC_NOLIMITER : SHMTC_USAGE;
	else if (rc == -EINTR)
		rc = SHMTC_NO;
	else if (rc < 0)
		rc = shmtc_limiter_error(c, name, rc);
	else
		rc = decision_result(c, name, client, cost, peek, rc, &d);
	shmt_close(h);
	return rc;
}

int
shmtc_cmd_try(struct shmtc *c, int argc, char **argv)
{
	return use_cmd(c, argc, argv, 0);
}

int
shmtc_cmd_wait(struct shmtc *c, int argc, char **argv)
{
	return use_cmd(c, argc, argv, 1);
}

int
shmtc_cmd_next_key(struct shmtc *c, int argc, char **argv)
{
	char key[SHMT_KEYNAME_MAX + 1];
	shmt_t *h = NULL;
	int rc;

	if ((rc = shmtc_prologue(c, argc, argv, 1, 0, &h)) != SHMTC_GO)
		return rc;
	rc = shmt_next_key(h, argv[optind], key, sizeof(key));
	if (rc == -ENOENT)
		rc = shmtc_limiter_error(c, argv[optind], rc) == SHMTC_NO ?
		    SHMTC_NOLIMITER : SHMTC_USAGE;
	else if (rc < 0)
		rc = shmtc_limiter_error(c, argv[optind], rc);
	else
		rc = use_result(c, argv[optind], NULL, key, rc > 0);
	shmt_close(h);
	return rc;
}
