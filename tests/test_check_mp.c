/* SPDX-License-Identifier: MIT */
/*
 * The read-only shmt_check beside writers: forked processes set, delete and
 * read keys and take uses of a buckets limiter, an exact limiter and a
 * per-client limiter, on the real clock, while this process checks the
 * segment again and again.  Damage planted beforehand where no writer goes
 * (a bucket closing hours ahead in an idle limiter, a short counter value)
 * must be named by every check; damage planted in a shard the writers use
 * (a byte count off by one block) may be named (when the check finds the
 * shard at rest) and nothing else may ever be: a check without locks must
 * not take a write in progress for damage.  Seeded: replay with
 * SHMT_SEED=<seed>; bounded by a number of operations per writer.
 */
#include "testutil.h"

#include "dict.h"
#include "limiter.h"
#include "segment.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CM_WRITERS 3
#define CM_OPS 400000
#define CM_KEYS 300
#define MS 1000000ULL

struct cm_seen {
	int idle_bucket, short_counter, busy_count, other;
	char first_other[512];
};

static void
cm_report(void *ctx, const char *problem)
{
	struct cm_seen *s = ctx;

	if (strstr(problem, "limiter idle: bucket ") != NULL &&
	    strstr(problem, "(close time in the future)") != NULL)
		s->idle_bucket++;
	else if (strncmp(problem, "counters shard ", 15) == 0 &&
	    strstr(problem, "has a value of 4 bytes") != NULL)
		s->short_counter++;
	else if (strncmp(problem, "dictionary shard 0: counts ", 27) == 0)
		s->busy_count++;
	else if (s->other++ == 0)
		snprintf(s->first_other, sizeof(s->first_other), "%s", problem);
}

static void
cm_define(shmt_t *h)
{
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.limit = 50, l.window_ns = 20 * MS, l.slack_ns = 2 * MS;
	l.slack_uses = 4;
	assert_int_equal(shmt_limiter_define(h, "api", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "idle", &l), 0);
	l.per_client = 1, l.client_capacity = 64;
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	memset(&l, 0, sizeof(l));
	l.limit = 8, l.window_ns = 20 * MS, l.mode = SHMT_MODE_EXACT;
	l.slack_uses = 1;
	assert_int_equal(shmt_limiter_define(h, "exact", &l), 0);
}

static void
cm_writer(const char *seg, uint64_t seed, unsigned ops)
{
	shmt_t *h = NULL;
	uint64_t rs = seed;
	char val[256], buf[256];

	alarm(120);
	if (shmt_open(seg, &h) != 0)
		_exit(10);
	memset(val, 'v', sizeof(val));
	for (unsigned i = 0; i < ops; i++) {
		uint64_t r = tu_rand(&rs);
		char key[32], client[16];
		int kn = snprintf(key, sizeof(key), "key-%u",
		    (unsigned)(r % CM_KEYS));
		size_t vlen = 1 + (size_t)((r >> 20) % 200), got;
		int rc = 0;

		switch ((r >> 40) % 6) {
		case 0:
		case 1:
			rc = shmt_set(h, key, (size_t)kn, val, vlen, 0);
			break;
		case 2:
			rc = shmt_del(h, key, (size_t)kn);
			rc = rc == -ENOENT ? 0 : rc;
			break;
		case 3:
			rc = shmt_get(h, key, (size_t)kn, buf, sizeof(buf), &got);
			rc = rc == -ENOENT ? 0 : rc;
			break;
		case 4:
			rc = shmt_try_use_key(h, (r >> 50) & 1 ? "api" : "exact");
			rc = rc > 0 ? 0 : rc;
			break;
		default:
			snprintf(client, sizeof(client), "c%u",
			    (unsigned)((r >> 50) % 40));
			rc = shmt_try_use(h, "pc", client, strlen(client));
			rc = rc > 0 ? 0 : rc;
			break;
		}
		if (rc < 0) {
			fprintf(stderr, "writer: %s\n", shmt_strerror(rc));
			_exit(11);
		}
	}
	shmt_close(h);
	_exit(0);
}

/* The first item of any shard of ST (the counters), or NULL. */
static struct shmt_item *
first_counter(const struct shmt_store *st)
{
	struct shmt_item *it = NULL;

	for (uint32_t i = 0; i < st->shards && it == NULL; i++)
		it = tu_first_item(st, i);
	return it;
}

static void
test_check_beside_writers(void **state)
{
	uint64_t seed = tu_seed("test_check_mp");
	unsigned ops = (unsigned)(CM_OPS * tu_scale());
	struct cm_seen all = { 0, 0, 0, 0, "" };
	pid_t pid[CM_WRITERS];
	shmt_config_t cfg;
	struct shmt_lim *lim;
	struct shmt_ring_slot *slot;
	struct shmt_item *it;
	struct shmt_shard *sh;
	char seg[128];
	shmt_t *h = NULL;
	int running = CM_WRITERS, checks = 0, named_busy = 0;

	(void)state;
	if (ops < 1000)
		ops = 1000;
	tu_segname(seg, sizeof(seg), "checkmp");
	tu_config_small(&cfg);
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	cm_define(h);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);

	/* The planted damage. */
	assert_int_equal(shmt_try_use_key(h, "idle"), 1);
	lim = shmt__region(h, SHMT_R_LIMITERS);
	while (strcmp(lim->lm_name, "idle") != 0)
		lim++;
	slot = (struct shmt_ring_slot *)((char *)shmt__region(h, SHMT_R_ARENA) +
	    lim->lm_ring_off) + SHMT_W_TAIL(lim->lm_w) % lim->lm_nbuckets;
	slot->r[0] += 3600000 * MS;
	assert_int_equal(shmt_hit(h, "ip:1", 4, NULL), 0);
	it = first_counter(h->counters);
	assert_non_null(it);
	it->it_lens = lens_make(lens_klen(it->it_lens), 4);
	sh = (struct shmt_shard *)h->dict->base;
	__atomic_fetch_add(&sh->ds_used, 64, __ATOMIC_RELAXED);

	fflush(stdout);
	for (int i = 0; i < CM_WRITERS; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0)
			cm_writer(seg, seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL,
			    ops);
	}
	while (running > 0) {
		struct cm_seen s = { 0, 0, 0, 0, "" };
		int n = shmt_check(h, cm_report, &s);

		checks++;
		assert_int_equal(n, s.idle_bucket + s.short_counter +
		    s.busy_count + s.other);
		if (s.other != 0 && all.other == 0)
			snprintf(all.first_other, sizeof(all.first_other), "%s",
			    s.first_other);
		all.other += s.other;
		all.idle_bucket += s.idle_bucket == 1;
		all.short_counter += s.short_counter == 1;
		named_busy += s.busy_count == 1;
		all.busy_count += s.busy_count;
		for (int i = 0; i < CM_WRITERS; i++) {
			int st;

			if (pid[i] > 0 && waitpid(pid[i], &st, WNOHANG) == pid[i]) {
				assert_true(WIFEXITED(st));
				assert_int_equal(WEXITSTATUS(st), 0);
				pid[i] = 0;
				running--;
			}
		}
	}
	printf("# %d checks beside %d writers x %u ops: the busy shard's "
	    "damage named by %d, the idle damage by %d and %d; %d other "
	    "problems\n", checks, CM_WRITERS, ops, named_busy,
	    all.idle_bucket, all.short_counter, all.other);
	if (all.other != 0)
		fail_msg("a check named what is no damage: %s", all.first_other);
	assert_true(checks > 0);
	assert_int_equal(all.idle_bucket, checks);
	assert_int_equal(all.short_counter, checks);
	assert_int_equal(all.busy_count, named_busy);
	/* At rest, every planted damage is named. */
	{
		struct cm_seen s = { 0, 0, 0, 0, "" };

		assert_int_equal(shmt_check(h, cm_report, &s), 3);
		assert_int_equal(s.busy_count, 1);
	}
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_check_beside_writers, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
