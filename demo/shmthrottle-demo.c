/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-demo: worker processes sharing the limiters of a segment.
 * Each worker attaches on its own, then for a few seconds waits for the
 * shared limiter (shmt_wait: a refused worker sleeps until its retry time),
 * takes key names from the key pool and throttles a handful of client ids; at the end every worker reports what it saw and the parent
 * checks the totals against the limits.
 */
#include "shmthrottle.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_KEYS 16

struct tally {
	uint64_t api_granted, api_denied;
	uint64_t key_granted, key_denied;
	uint64_t client_granted, client_denied;
	uint64_t errors;
	char keys[MAX_KEYS][SHMT_KEYNAME_MAX + 1];
	uint64_t key_uses[MAX_KEYS];
};

struct opts {
	const char *segment;
	const char *limiter, *pool, *per_client;
	int workers;
	double seconds;
};

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: shmthrottle-demo [-s SEGMENT] [-p WORKERS] [-d SECONDS]\n"
	    "                        [--limiter NAME] [--pool NAME] [--per-client NAME]\n"
	    "Forks WORKERS processes (default 4) that share the limiters of\n"
	    "SEGMENT (default $SHMTHROTTLE_SEGMENT or " SHMT_DEFAULT_SEGMENT ")\n"
	    "for SECONDS (default 3), then prints what each one saw.  The\n"
	    "limiters default to those of shmthrottled's built-in config:\n"
	    "api, keys and per-ip.\n");
}

static double
mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Count N uses of KEY in T (the first MAX_KEYS names seen are kept). */
static void
note_key(struct tally *t, const char *key, uint64_t n)
{
	for (int i = 0; i < MAX_KEYS; i++) {
		if (t->keys[i][0] == '\0')
			snprintf(t->keys[i], sizeof(t->keys[i]), "%s", key);
		if (strcmp(t->keys[i], key) == 0) {
			t->key_uses[i] += n;
			return;
		}
	}
}

static int
worker(const struct opts *o, int id, struct tally *t)
{
	char key[SHMT_KEYNAME_MAX + 1], client[32];
	double end = mono_s() + o->seconds;
	shmt_t *h;
	unsigned n = 0;
	int rc;

	if ((rc = shmt_open(o->segment, &h)) != 0) {
		fprintf(stderr, "worker %d: open %s: %s\n", id, o->segment,
		    shmt_strerror(rc));
		return 1;
	}
	while (mono_s() < end) {
		double left = end - mono_s();

		/* Wait for the shared limiter instead of spinning on it: a
		 * refused worker sleeps until its retry time (no CPU). */
		rc = shmt_wait(h, o->limiter, NULL, 0, 1,
		    left > 0 ? (uint64_t)(left * 1e9) : 0, NULL);
		if (rc == 1)
			t->api_granted++;
		else if (rc == 0)
			t->api_denied++;
		else
			t->errors++;
		if (n % 8 == 0) {
			rc = shmt_next_key(h, o->pool, key, sizeof(key));
			if (rc > 0) {
				t->key_granted++;
				note_key(t, key, 1);
			} else if (rc == 0) {
				t->key_denied++;
			} else {
				t->errors++;
			}
		}
		/* Eight clients, each asking at its own pace. */
		snprintf(client, sizeof(client), "10.0.0.%u", (n * 7 + (unsigned)id) % 8);
		rc = shmt_try_use(h, o->per_client, client, strlen(client));
		if (rc == 1)
			t->client_granted++;
		else if (rc == 0)
			t->client_denied++;
		else
			t->errors++;
		n++;
	}
	shmt_close(h);
	return 0;
}

static int
parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "limiter", required_argument, NULL, 'L' },
		{ "pool", required_argument, NULL, 'K' },
		{ "per-client", required_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	const char *env = getenv("SHMTHROTTLE_SEGMENT");
	int c;

	o->segment = env != NULL && *env != '\0' ? env : SHMT_DEFAULT_SEGMENT;
	o->limiter = "api";
	o->pool = "keys";
	o->per_client = "per-ip";
	o->workers = 4;
	o->seconds = 3;
	while ((c = getopt_long(argc, argv, "s:p:d:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			o->segment = optarg;
			break;
		case 'p':
			o->workers = atoi(optarg);
			break;
		case 'd':
			o->seconds = atof(optarg);
			break;
		case 'L':
			o->limiter = optarg;
			break;
		case 'K':
			o->pool = optarg;
			break;
		case 'C':
			o->per_client = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc || o->workers < 1 || o->workers > MAX_WORKERS ||
	    !(o->seconds > 0 && o->seconds <= 3600)) {
		usage(stderr);
		return -1;
	}
	return 0;
}

static void
report(const struct opts *o, struct tally *t, shmt_t *h)
{
	struct tally sum = { 0 };
	shmt_limiter_stat_t st;

	printf("%-7s %10s %8s %10s %8s %10s %8s\n", "worker", "api-ok",
	    "api-no", "key-ok", "key-no", "client-ok", "client-no");
	for (int i = 0; i < o->workers; i++) {
		printf("%-7d %10" PRIu64 " %8" PRIu64 " %10" PRIu64 " %8" PRIu64
		    " %10" PRIu64 " %8" PRIu64 "\n", i, t[i].api_granted,
		    t[i].api_denied, t[i].key_granted, t[i].key_denied,
		    t[i].client_granted, t[i].client_denied);
		sum.api_granted += t[i].api_granted;
		sum.key_granted += t[i].key_granted;
		sum.client_granted += t[i].client_granted;
		sum.errors += t[i].errors;
		for (int k = 0; k < MAX_KEYS && t[i].keys[k][0]; k++)
			note_key(&sum, t[i].keys[k], t[i].key_uses[k]);
	}
	printf("all     %10" PRIu64 " %8s %10" PRIu64 " %8s %10" PRIu64 "\n",
	    sum.api_granted, "", sum.key_granted, "", sum.client_granted);
	printf("key names handed out:");
	for (int k = 0; k < MAX_KEYS && sum.keys[k][0]; k++)
		printf(" %s x%" PRIu64, sum.keys[k], sum.key_uses[k]);
	printf("\n");
	if (shmt_limiter_stat(h, o->limiter, &st) == 0)
		printf("%s: limit %" PRIu64 " per %.3gs, so at most %.0f grants "
		    "in %.3gs; granted %" PRIu64 "\n", o->limiter, st.limit,
		    (double)st.window_ns / 1e9,
		    (double)st.limit * (1 + o->seconds * 1e9 / (double)st.window_ns),
		    o->seconds, sum.api_granted);
	if (sum.errors != 0)
		printf("errors: %" PRIu64 "\n", sum.errors);
}

int
main(int argc, char **argv)
{
	struct opts o;
	struct tally *t;
	pid_t pids[MAX_WORKERS];
	shmt_t *h;
	int rc, failed = 0;

	if (parse(argc, argv, &o) != 0)
		return 2;
	if ((rc = shmt_open(o.segment, &h)) != 0) {
		fprintf(stderr, "shmthrottle-demo: open %s: %s (is shmthrottled "
		    "running?)\n", o.segment, shmt_strerror(rc));
		return 3;
	}
	t = mmap(NULL, sizeof(*t) * MAX_WORKERS, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(t, 0, sizeof(*t) * MAX_WORKERS);
	printf("%d workers share %s for %.1fs\n", o.workers, o.segment, o.seconds);
	fflush(stdout);
	for (int i = 0; i < o.workers; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(worker(&o, i, &t[i]));
		if (pids[i] < 0) {
			perror("fork");
			return 1;
		}
	}
	for (int i = 0; i < o.workers; i++) {
		int st;

		if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			failed++;
	}
	report(&o, t, h);
	shmt_close(h);
	return failed != 0 || t[0].errors != 0;
}
