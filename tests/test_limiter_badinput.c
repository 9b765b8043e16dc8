/* SPDX-License-Identifier: MIT */
/*
 * Bad input to the limiter API: every documented error comes back as
 * documented, and after each one the limiter table shows nothing half
 * defined (the same limiters as before, with their state untouched).
 */
#include "testutil.h"

#include "limiter.h"
#include "segment.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct {
	char seg[96];
	shmt_t *h;
	char seg2[96];
	shmt_t *h2;
} bi_g;

static int
bi_setup(void **state)
{
	tu_segname(bi_g.seg, sizeof(bi_g.seg), "bad");
	return shmt_create(bi_g.seg, NULL, &bi_g.h) == 0 ? 0 : -1;
}

static int
bi_teardown(void **state)
{
	int rc = 0;

	if (bi_g.h != NULL) {
		shmt_close(bi_g.h);
		bi_g.h = NULL;
		rc |= shmt_unlink(bi_g.seg);
	}
	if (bi_g.h2 != NULL) {
		shmt_close(bi_g.h2);
		bi_g.h2 = NULL;
		rc |= shmt_unlink(bi_g.seg2);
	}
	return rc == 0 ? 0 : -1;
}

static const shmt_limit_t bi_good = { .limit = 10, .window_ns = 1000,
	.slack_ns = 100, .slack_uses = 2 };

/* The table holds exactly N limiters, none of them named BAD. */
static void
bi_table_is(shmt_t *h, int n, const char *bad)
{
	shmt_limiter_stat_t st[8];
	int i;

	assert_int_equal(shmt_limiter_list(h, NULL, 0), n);
	assert_int_equal(shmt_limiter_list(h, st, 8), n);
	for (i = 0; i < n && i < 8; i++) {
		if (bad != NULL)
			assert_string_not_equal(st[i].name, bad);
		assert_int_equal(st[i].in_flight, 0);
	}
	if (bad != NULL && strlen(bad) <= SHMT_LIMITER_NAME_MAX)
		assert_int_equal(shmt_limiter_stat(h, bad, &st[0]), -ENOENT);
}

static void
test_unknown_limiter(void **state)
{
	shmt_limiter_stat_t st;
	shmt_bucket_info_t bi[2];
	char buf[64];

	assert_int_equal(shmt_try_use_key(bi_g.h, "nope"), -ENOENT);
	assert_int_equal(shmt_next_key(bi_g.h, "nope", buf, sizeof(buf)),
	    -ENOENT);
	assert_int_equal(shmt_try_use(bi_g.h, "nope", "c", 1), -ENOENT);
	assert_int_equal(shmt_limiter_stat(bi_g.h, "nope", &st), -ENOENT);
	assert_int_equal(shmt_limiter_buckets(bi_g.h, "nope", bi, 2), -ENOENT);
	bi_table_is(bi_g.h, 0, "nope");
}

static const char *const bi_keys3[] = { "k0", "k1", "k2" };
static const char *const bi_keys_null[] = { "k0", NULL };
static const char *const bi_keys_empty[] = { "k0", "" };

/* Each of these is invalid on its own (the rest is bi_good). */
static void
bi_invalid(int i, shmt_limit_t *l)
{
	static char longkey[SHMT_KEYNAME_MAX + 2];
	static const char *keys_long[1];

	*l = bi_good;
	switch (i) {
	case 0: l->limit = 0; break;
	case 1: l->window_ns = 0; break;
	case 2: l->slack_ns = 0; break;
	case 3: l->slack_uses = 0; break;
	case 4: l->slack_uses = l->limit + 1; break;
	case 5: l->limit = SHMT_LIMIT_MAX + 1; l->slack_uses = 1; break;
	case 6:
		l->mode = SHMT_MODE_EXACT;
		l->limit = SHMT_EXACT_LIMIT_MAX + 1;
		l->slack_uses = 1;
		break;
	case 7: l->mode = 7; break;
	case 8:  /* pool of 3 x 2 with limit 5 */
		l->keys = bi_keys3; l->nkeys = 3; l->uses_per_key = 2;
		l->limit = 5;
		break;
	case 9: l->keys = bi_keys3; l->nkeys = 3; l->uses_per_key = 0; break;
	case 10: l->keys = NULL; l->nkeys = 3; l->uses_per_key = 1;
		l->limit = 3; break;
	case 11: l->keys = bi_keys_null; l->nkeys = 2; l->uses_per_key = 1;
		l->limit = 2; break;
	case 12: l->keys = bi_keys_empty; l->nkeys = 2; l->uses_per_key = 1;
		l->limit = 2; break;
	case 13:
		memset(longkey, 'x', sizeof(longkey) - 1);
		keys_long[0] = longkey;
		l->keys = keys_long; l->nkeys = 1; l->uses_per_key = 10;
		break;
	case 14:  /* ceil(window / slack) far beyond SHMT_BUCKETS_MAX */
		l->window_ns = 1000000000; l->slack_ns = 1;
		break;
	case 15: l->per_client = 1; l->client_capacity = 0; break;
	default: fail();
	}
}

#define BI_NINVALID 16

static void
test_invalid_parameters(void **state)
{
	shmt_limit_t l;
	int i;

	/* The field each case breaks, as shmt_limit_check names it. */
	static const char *const field[BI_NINVALID] = {
		"limit", "window_ns", "slack_ns", "slack_uses", "slack_uses",
		"limit", "limit", "mode", "limit", "uses_per_key", "keys",
		"keys", "keys", "keys", "slack_ns", "client_capacity",
	};
	char why[256];

	assert_int_equal(shmt_limit_check(&bi_good, why, sizeof(why)), 0);
	assert_string_equal(why, "");
	assert_int_equal(shmt_limiter_define(bi_g.h, "good", &bi_good), 0);
	for (i = 0; i < BI_NINVALID; i++) {
		bi_invalid(i, &l);
		if (shmt_limiter_define(bi_g.h, "bad", &l) != -EINVAL)
			fail_msg("invalid case %d not refused with -EINVAL", i);
		bi_table_is(bi_g.h, 1, "bad");
		/* The same verdict without a segment, with a sentence that
		 * starts with the field. */
		assert_int_equal(shmt_limit_check(&l, why, sizeof(why)),
		    -EINVAL);
		if (strncmp(why, field[i], strlen(field[i])) != 0 ||
		    why[strlen(field[i])] != ':')
			fail_msg("case %d: \"%s\" does not name %s", i, why,
			    field[i]);
		assert_int_equal(shmt_limit_check(&l, NULL, 0), -EINVAL);
	}
	assert_int_equal(shmt_limit_check(NULL, why, sizeof(why)), -EINVAL);
	assert_int_equal(shmt_limiter_define(NULL, "bad", &bi_good), -EINVAL);
	assert_int_equal(shmt_limiter_define(bi_g.h, NULL, &bi_good), -EINVAL);
	assert_int_equal(shmt_limiter_define(bi_g.h, "", &bi_good), -EINVAL);
	assert_int_equal(shmt_limiter_define(bi_g.h, "bad", NULL), -EINVAL);
	bi_table_is(bi_g.h, 1, "bad");
	/* The good one still works. */
	assert_int_equal(shmt_try_use_key(bi_g.h, "good"), 1);
}

static void
test_name_too_long(void **state)
{
	char name[SHMT_LIMITER_NAME_MAX + 2];

	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(shmt_limiter_define(bi_g.h, name, &bi_good),
	    -ENAMETOOLONG);
	bi_table_is(bi_g.h, 0, name);
	assert_int_equal(shmt_try_use_key(bi_g.h, name), -ENAMETOOLONG);
	name[SHMT_LIMITER_NAME_MAX] = '\0';
	assert_int_equal(shmt_limiter_define(bi_g.h, name, &bi_good), 0);
	assert_int_equal(shmt_try_use_key(bi_g.h, name), 1);
}

static void
test_table_full(void **state)
{
	shmt_config_t cfg;

	shmt_config_init(&cfg);
	cfg.max_limiters = 2;
	tu_segname(bi_g.seg2, sizeof(bi_g.seg2), "bad2");
	assert_int_equal(shmt_create(bi_g.seg2, &cfg, &bi_g.h2), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h2, "a", &bi_good), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h2, "b", &bi_good), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h2, "c", &bi_good), -ENOSPC);
	bi_table_is(bi_g.h2, 2, "c");
	/* Idempotent even when full. */
	assert_int_equal(shmt_limiter_define(bi_g.h2, "a", &bi_good), 0);
	bi_table_is(bi_g.h2, 2, "c");
}

static void
test_idempotent_define(void **state)
{
	shmt_limit_t l = bi_good;
	static const char *const other_keys[] = { "k0", "k1", "kX" };

	assert_int_equal(shmt_limiter_define(bi_g.h, "x", &l), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h, "x", &l), 0);
	l.window_ns++;
	assert_int_equal(shmt_limiter_define(bi_g.h, "x", &l), -EEXIST);
	l = bi_good;
	l.mode = SHMT_MODE_EXACT;
	l.slack_ns = 0;
	l.slack_uses = 0;
	assert_int_equal(shmt_limiter_define(bi_g.h, "x", &l), -EEXIST);
	l = bi_good;
	l.keys = bi_keys3;
	l.nkeys = 3;
	l.uses_per_key = 2;
	l.limit = 6;
	assert_int_equal(shmt_limiter_define(bi_g.h, "k", &l), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h, "k", &l), 0);
	l.keys = other_keys;
	assert_int_equal(shmt_limiter_define(bi_g.h, "k", &l), -EEXIST);
	bi_table_is(bi_g.h, 2, NULL);
}

static void
test_wrong_kind_of_call(void **state)
{
	shmt_limit_t pc = bi_good, pool = bi_good, ex = bi_good;
	shmt_limiter_stat_t st;
	shmt_bucket_info_t bi[4];
	char big[SHMT_CLIENT_MAX + 1], buf[8];

	pc.per_client = 1;
	pc.client_capacity = 4;
	pool.keys = bi_keys3;
	pool.nkeys = 3;
	pool.uses_per_key = 2;
	pool.limit = 6;
	ex.mode = SHMT_MODE_EXACT;
	ex.slack_ns = 0;
	ex.slack_uses = 0;
	assert_int_equal(shmt_limiter_define(bi_g.h, "plain", &bi_good), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h, "pc", &pc), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h, "pool", &pool), 0);
	assert_int_equal(shmt_limiter_define(bi_g.h, "ex", &ex), 0);

	assert_int_equal(shmt_try_use_key(bi_g.h, "pc"), -EPERM);
	assert_int_equal(shmt_try_use(bi_g.h, "plain", "c", 1), -EPERM);
	assert_int_equal(shmt_next_key(bi_g.h, "plain", buf, sizeof(buf)),
	    -ENOKEY);
	assert_int_equal(shmt_limiter_buckets(bi_g.h, "ex", bi, 4), -EPERM);
	assert_int_equal(shmt_limiter_buckets(bi_g.h, "pc", bi, 4), -EPERM);

	/* Client ids: 1..SHMT_CLIENT_MAX bytes. */
	memset(big, 'c', sizeof(big));
	assert_int_equal(shmt_try_use(bi_g.h, "pc", big, sizeof(big)), -E2BIG);
	assert_int_equal(shmt_try_use(bi_g.h, "pc", big, 0), -EINVAL);
	assert_int_equal(shmt_limiter_stat(bi_g.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, 0);
	assert_int_equal(st.in_flight, 0);

	/* next_key: the longest name is 2 bytes, so 3 are needed; a short
	 * buffer grants nothing. */
	assert_int_equal(shmt_next_key(bi_g.h, "pool", buf, 2), -ERANGE);
	assert_int_equal(shmt_limiter_stat(bi_g.h, "pool", &st), 0);
	assert_int_equal(st.in_flight, 0);
	assert_int_equal(st.grants, 0);
	bi_table_is(bi_g.h, 4, NULL);

	assert_int_equal(shmt_try_use(bi_g.h, "pc", big, SHMT_CLIENT_MAX), 1);
	assert_int_equal(shmt_next_key(bi_g.h, "pool", buf, 3), 2);
	assert_string_equal(buf, "k0");
}

/* A ring slot that names a newer bucket than W for ever (a damaged
 * segment): every call reloads W, finds the same, and the bounded loop runs
 * out.  The answer is SHMT_EBUSYLOOP, never a grant, a denial or a stray
 * internal code, and once the slot is put back the limiter works again. */
static void
test_stale_slot_for_ever(void **state)
{
	struct tu_clock clk = { .now = 1000000 };
	struct shmt_lim *lim = shmt__region(bi_g.h, SHMT_R_LIMITERS);
	uint32_t n = (uint32_t)(bi_g.h->reg[SHMT_R_LIMITERS].rg_size /
	    sizeof(*lim)), r, tail;
	struct shmt_ring_slot *ring, *slot;
	shmt_limit_t pool = bi_good;
	char buf[8];
	uint64_t keep;

	pool.keys = bi_keys3;
	pool.nkeys = 3;
	pool.uses_per_key = 2;
	pool.limit = 6;
	shmt_set_clock(bi_g.h, tu_clock_read, &clk);
	assert_int_equal(shmt_limiter_define(bi_g.h, "pool", &pool), 0);
	assert_int_equal(shmt_next_key(bi_g.h, "pool", buf, sizeof(buf)), 2);
	for (r = 0; r < n && strcmp(lim[r].lm_name, "pool") != 0; r++)
		;
	assert_true(r < n);
	tail = SHMT_W_TAIL(lim[r].lm_w);
	assert_int_equal(SHMT_W_ACTIVE(lim[r].lm_w), 1);
	ring = (struct shmt_ring_slot *)((char *)shmt__region(bi_g.h,
	    SHMT_R_ARENA) + lim[r].lm_ring_off);
	slot = &ring[tail % lim[r].lm_nbuckets];
	keep = slot->r[1];
	slot->r[1] += (uint64_t)lim[r].lm_nbuckets << 32;

	assert_int_equal(shmt_next_key(bi_g.h, "pool", buf, sizeof(buf)),
	    SHMT_EBUSYLOOP);
	assert_int_equal(shmt_try_use_key(bi_g.h, "pool"), SHMT_EBUSYLOOP);

	slot->r[1] = keep;
	assert_int_equal(shmt_next_key(bi_g.h, "pool", buf, sizeof(buf)), 2);
	shmt_set_clock(bi_g.h, NULL, NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unknown_limiter,
		    bi_setup, bi_teardown),
		cmocka_unit_test_setup_teardown(test_invalid_parameters,
		    bi_setup, bi_teardown),
		cmocka_unit_test_setup_teardown(test_name_too_long,
		    bi_setup, bi_teardown),
		cmocka_unit_test_setup_teardown(test_table_full,
		    bi_setup, bi_teardown),
		cmocka_unit_test_setup_teardown(test_idempotent_define,
		    bi_setup, bi_teardown),
		cmocka_unit_test_setup_teardown(test_wrong_kind_of_call,
		    bi_setup, bi_teardown),
		cmocka_unit_test_setup_teardown(test_stale_slot_for_ever,
		    bi_setup, bi_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
