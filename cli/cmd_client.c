/* SPDX-License-Identifier: MIT */
/*
 * client set, client clear and client list: the per-client overrides of a
 * per-client limiter (a client's own limit, allow, deny), changed while
 * workers run.
 */
#include "cli.h"

#include "limlist.h"
#include "units.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "limit=N", "allow" or "deny" for R. */
static void
rule_text(const shmt_client_rule_t *r, char *buf, size_t cap)
{
	if (r->kind == SHMT_RULE_ALLOW)
		snprintf(buf, cap, "allow");
	else if (r->kind == SHMT_RULE_DENY)
		snprintf(buf, cap, "deny");
	else
		snprintf(buf, cap, "limit=%" PRIu64, r->limit);
}

static json_t *
rule_json(const shmt_client_rule_t *r)
{
	return json_pack("{s:s, s:o}", "rule", r->kind == SHMT_RULE_ALLOW ?
	    "allow" : r->kind == SHMT_RULE_DENY ? "deny" : "limit", "limit",
	    r->kind == SHMT_RULE_LIMIT ? shmtc_json_u64(r->limit) :
	    json_null());
}

static int
client_error(const struct shmtc *c, const char *name, const char *client,
    int err)
{
	switch (err) {
	case -ENOSPC:
		shmtc_err("limiter '%s': its override table is full (clear one, "
		    "or define it with a larger client_overrides)", name);
		return SHMTC_NO;
	case -E2BIG:
		shmtc_err("client '%s': longer than %u bytes", client,
		    SHMT_OVERRIDE_ID_MAX);
		return SHMTC_USAGE;
	case -EPERM:
		shmtc_err("limiter '%s' is not per client", name);
		return SHMTC_USAGE;
	case -EINVAL:
		if (client != NULL) {
			shmtc_err("limiter '%s': a rule it cannot take (rate "
			    "mode takes allow and deny only)", name);
			return SHMTC_USAGE;
		}
		/* fall through */
	default:
		return shmtc_limiter_error(c, name, err);
	}
}

static int
client_list(const struct shmtc *c, shmt_t *h, const char *name)
{
	shmt_client_override_t *o = NULL;
	json_t *arr = NULL;
	int n, cap = 0;
	char rt[48];

	/* The table may grow between the count and the copy: again. */
	for (int tries = 0; tries < 4; tries++) {
		if ((n = shmt_client_list(h, name, o, (size_t)cap)) < 0 ||
		    n <= cap)
			break;
		free(o);
		cap = n + 8;
		if ((o = calloc((size_t)cap, sizeof(*o))) == NULL) {
			n = -ENOMEM;
			break;
		}
	}
	if (n < 0) {
		free(o);
		return client_error(c, name, NULL, n);
	}
	if (n > cap)
		n = cap;
	if (c->json) {
		arr = json_array();
		for (int i = 0; i < n && arr != NULL; i++) {
			json_t *e = rule_json(&o[i].rule);

			if (e == NULL || shmtc_json_bytes(e, "client",
			    "client_encoding", o[i].client,
			    o[i].client_len) != 0) {
				json_decref(e);
				json_decref(arr);
				arr = NULL;
				break;
			}
			json_array_append_new(arr, e);
		}
		free(o);
		return shmtc_json_emit(arr == NULL ? NULL : json_pack("{s:s, s:o}",
		    "limiter", name, "overrides", arr));
	}
	for (int i = 0; i < n; i++) {
		rule_text(&o[i].rule, rt, sizeof(rt));
		printf("%-12s ", rt);
		for (uint32_t j = 0; j < o[i].client_len; j++) {
			unsigned char ch = o[i].client[j];

			if (ch >= 0x20 && ch < 0x7f && ch != '\\')
				putchar(ch);
			else
				printf("\\x%02x", ch);
		}
		putchar('\n');
	}
	free(o);
	return SHMTC_OK;
}

/* client set LIMITER CLIENT RULE | client clear LIMITER CLIENT |
 * client list LIMITER */
int
shmtc_cmd_client(struct shmtc *c, int argc, char **argv)
{
	shmt_client_rule_t r = { 0 };
	const char *sub, *name, *client = NULL;
	shmt_t *h = NULL;
	char *arg, rt[48];
	int rc, want;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if (argc - optind < 2)
		return shmtc_usage_error(c, "expected 'set LIMITER CLIENT RULE', "
		    "'clear LIMITER CLIENT' or 'list LIMITER'");
	sub = argv[optind];
	name = argv[optind + 1];
	if (strcmp(sub, "set") == 0)
		want = 4;
	else if (strcmp(sub, "clear") == 0)
		want = 3;
	else if (strcmp(sub, "list") == 0)
		want = 2;
	else
		return shmtc_usage_error(c, "'%s': expected set, clear or list",
		    sub);
	if (argc - optind != want)
		return shmtc_usage_error(c, "client %s: expected %s", sub,
		    want == 4 ? "LIMITER CLIENT limit=N|allow|deny" :
		    want == 3 ? "LIMITER CLIENT" : "LIMITER");
	if (want >= 3) {
		client = argv[optind + 2];
		if (client[0] == '\0')
			return shmtc_usage_error(c, "client %s: an empty client",
			    sub);
	}
	if (want == 4 && shmtd_parse_rule(argv[optind + 3], &r.kind,
	    &r.limit) != 0)
		return shmtc_usage_error(c, "'%s': the rule is limit=N (1 to "
		    "%llu), allow or deny", argv[optind + 3],
		    (unsigned long long)SHMT_LIMIT_MAX);
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	if (want == 2) {
		rc = client_list(c, h, name);
		shmt_close(h);
		return rc;
	}
	rc = want == 4 ? shmt_client_set(h, name, client, strlen(client), &r) :
	    shmt_client_clear(h, name, client, strlen(client));
	shmt_close(h);
	if (rc < 0)
		return client_error(c, name, client, rc);
	if (c->json) {
		json_t *o = want == 4 ? rule_json(&r) : json_object();
		int jrc;

		/* The client id is bytes: base64 when it is not UTF-8, as
		 * client list writes it. */
		if (o != NULL && (json_object_set_new(o, "limiter",
		    json_string(name)) != 0 || shmtc_json_bytes(o, "client",
		    "client_encoding", client, strlen(client)) != 0)) {
			json_decref(o);
			o = NULL;
		}
		if (o != NULL && want == 3)
			json_object_set_new(o, "cleared", json_boolean(rc == 1));
		if ((jrc = shmtc_json_emit(o)) != 0)
			return jrc;
		/* The same exit code as without --json. */
		return want == 3 && rc == 0 ? SHMTC_NO : SHMTC_OK;
	}
	if (want == 4) {
		rule_text(&r, rt, sizeof(rt));
		printf("%s: client %s: %s\n", name, client, rt);
		return SHMTC_OK;
	}
	if (rc == 0) {
		printf("%s: client %s had no override\n", name, client);
		return SHMTC_NO;
	}
	printf("%s: client %s: override cleared\n", name, client);
	return SHMTC_OK;
}
