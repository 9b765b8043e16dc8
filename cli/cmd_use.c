/* SPDX-License-Identifier: MIT */
/*
 * try and next-key: take one use of a limiter, as a worker would, and say
 * whether it was granted (and, for a key pool, which key to use).
 */
#include "cli.h"

#include "limlist.h"

#include <errno.h>
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

int
shmtc_cmd_try(struct shmtc *c, int argc, char **argv)
{
	const char *name, *client;
	shmt_t *h = NULL;
	char *arg;
	int rc;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if ((rc = shmtc_operands(c, argc, argv, 1, 1)) != 0)
		return rc;
	name = argv[optind];
	client = optind + 1 < argc ? argv[optind + 1] : NULL;
	if (client != NULL && *client == '\0')
		return shmtc_usage_error(c, "CLIENT must not be empty");
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	if (client != NULL)
		rc = shmt_try_use(h, name, client, strlen(client));
	else
		rc = shmt_try_use_key(h, name);
	if (rc == -EPERM)
		rc = shmtc_usage_error(c, "limiter '%s' %s", name, client ?
		    "is not per client: give no CLIENT" :
		    "is per client: give a CLIENT");
	else if (rc < 0)
		rc = shmtc_limiter_error(c, name, rc);
	else
		rc = use_result(c, name, client, NULL, rc == 1);
	shmt_close(h);
	return rc;
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
	if (rc < 0)
		rc = shmtc_limiter_error(c, argv[optind], rc);
	else
		rc = use_result(c, argv[optind], NULL, key, rc > 0);
	shmt_close(h);
	return rc;
}
