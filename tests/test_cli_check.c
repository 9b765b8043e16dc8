/* SPDX-License-Identifier: MIT */
/*
 * `shmthrottle check`, run as a real process: each kind of damage the
 * library's check names comes out as one "problem: WHERE: WHAT" line (and
 * one JSON problem) with exit 4, the tool adds no rule of its own, a check
 * without --repair leaves the damaged shard's bytes as they were, and
 * --repair repairs what it can, says what is left and exits by it.  Grants use
 * the real clock, as the tool does.
 *
 * Usage: test_cli_check CLI-BINARY.
 */
#include "testutil.h"

#include "dict.h"
#include "limiter.h"
#include "segment.h"
#include "test_cli_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_S 1000000000ULL
#define HOUR (3600 * NS_S)

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

struct fx {
	char seg[128];
	shmt_t *h;
};

static void
fx_make(struct fx *f, const char *tag)
{
	shmt_config_t cfg;

	memset(f, 0, sizeof(*f));
	tu_segname(f->seg, sizeof(f->seg), tag);
	tc_track(f->seg);
	tu_config_small(&cfg);
	assert_int_equal(shmt_create(f->seg, &cfg, &f->h), 0);
	tu_define_check_limiters(f->h);
	assert_int_equal(shmt_try_use_key(f->h, "api"), 1);
	assert_int_equal(shmt_try_use(f->h, "pc", "alice", 5), 1);
	assert_int_equal(shmt_try_use_key(f->h, "exact"), 1);
	for (int i = 0; i < 20; i++) {
		char k[16];
		int n = snprintf(k, sizeof(k), "key-%d", i);

		assert_int_equal(shmt_set(f->h, k, (size_t)n, "v", 1, 0), 0);
	}
	assert_int_equal(shmt_hit(f->h, "ip:1", 4, NULL), 0);
}

static void
fx_free(struct fx *f)
{
	tu_close_unlink(f->h, f->seg);
}

/* `check` exits 4 with exactly one problem, on a line that holds LINE;
 * `--json check` lists that one problem, its where starting with WHERE
 * (NULL: counters shard, either). */
static void
expect_one_problem(const struct fx *f, const char *line, const char *where)
{
	struct tc_run r;
	json_error_t e;
	json_t *j, *p;
	const char *w;

	tc_expect_run(&r, 4, ARGV("-s", f->seg, "check"));
	if (strstr(r.out, ": 1 problem,") == NULL || strstr(r.out, line) == NULL)
		fail_msg("check does not name \"%s\" alone:\n%s", line, r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 4, ARGV("-s", f->seg, "--json", "check"));
	j = json_loads(r.out, 0, &e);
	assert_non_null(j);
	assert_true(json_is_false(json_object_get(j, "ok")));
	p = json_object_get(j, "problems");
	assert_int_equal(json_array_size(p), 1);
	w = json_string_value(json_object_get(json_array_get(p, 0), "where"));
	assert_non_null(w);
	if (where == NULL)
		where = "counters shard ";
	if (strncmp(w, where, strlen(where)) != 0)
		fail_msg("where is \"%s\", not \"%s...\"", w, where);
	json_decref(j);
	tc_run_free(&r);
}

static void
expect_clean(const struct fx *f)
{
	struct tc_run r;

	tc_expect_run(&r, 0, ARGV("-s", f->seg, "check"));
	if (strstr(r.out, ": 0 problems,") == NULL)
		fail_msg("check: %s", r.out);
	tc_run_free(&r);
}

/* Each kind of limiter damage, one at a time, as the tool prints it. */
static void
test_limiter_kinds(void **state)
{
	struct fx f;
	struct shmt_lim *row;
	struct shmt_ring_slot *s;
	struct shmt_log_slot *log;
	struct shmt_client *e = NULL;
	uint64_t saved;

	(void)state;
	fx_make(&f, "clikinds");
	expect_clean(&f);

	/* A bucket's close time hours ahead. */
	row = tu_row_of(f.h, "api");
	s = (struct shmt_ring_slot *)(tu_arena(f.h) + row->lm_ring_off) +
	    SHMT_W_TAIL(row->lm_w) % row->lm_nbuckets;
	saved = s->r[0];
	s->r[0] += 10 * HOUR;
	expect_one_problem(&f, "problem: limiter api: bucket ",
	    "limiter api");
	s->r[0] = saved;

	/* A client's bucket likewise. */
	row = tu_row_of(f.h, "pc");
	for (uint32_t i = 0; i < row->lm_capacity && e == NULL; i++) {
		struct shmt_client *c = (struct shmt_client *)(tu_arena(f.h) +
		    row->lm_clients_off + (uint64_t)i * row->lm_entsize);

		if (SHMT_W_ACTIVE(c->ce_w))
			e = c;
	}
	assert_non_null(e);
	s = (struct shmt_ring_slot *)(e + 1) +
	    SHMT_W_TAIL(e->ce_w) % row->lm_nbuckets;
	saved = s->r[0];
	s->r[0] += 10 * HOUR;
	expect_one_problem(&f, "(close time in the future)", "limiter pc "
	    "client entry");
	s->r[0] = saved;

	/* An exact log ahead of its hint; a grant time ahead; a negative
	 * hint. */
	row = tu_row_of(f.h, "exact");
	log = (struct shmt_log_slot *)(tu_arena(f.h) + row->lm_ring_off);
	for (uint64_t i = 0; i < row->lm_limit; i++)
		log[i].ls_seq += 30;
	expect_one_problem(&f, "ahead of the grant hint", "limiter exact");
	for (uint64_t i = 0; i < row->lm_limit; i++)
		log[i].ls_seq -= 30;
	saved = log[0].ls_time;
	log[0].ls_time += 10 * HOUR;
	expect_one_problem(&f, "(grant time in the future)", "limiter exact");
	log[0].ls_time = saved;
	saved = row->lm_w.w[0];
	row->lm_w.w[0] = (uint64_t)-1;
	expect_one_problem(&f, "problem: limiter exact: exact log's grant hint "
	    "-1 is negative", "limiter exact");
	row->lm_w.w[0] = saved;
	expect_clean(&f);
	fx_free(&f);
}

/* A short counter value; a dead writer's lock over a wrong count: the
 * check names them and leaves the shard's bytes as they were; --repair
 * repairs and exits 0 when nothing is left. */
static void
test_store_kinds_and_repair(void **state)
{
	struct fx f;
	struct shmt_shard *sh;
	struct tc_run r;
	char *before;
	uint64_t items, len;

	(void)state;
	fx_make(&f, "clirepair");
	sh = tu_shard(f.h->dict, 0);
	items = sh->ds_items;
	sh->ds_lock.lk_owner = tu_dead_tid();
	sh->ds_items = items + 1;
	len = f.h->reg[SHMT_R_DICT].rg_size;
	before = malloc(len);
	assert_non_null(before);
	memcpy(before, shmt__region(f.h, SHMT_R_DICT), len);
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "check"));
	if (strstr(r.out, "problem: dictionary shard 0: lock names thread") ==
	    NULL || strstr(r.out, "problem: dictionary shard 0: counts") == NULL ||
	    strstr(r.out, ": 2 problems,") == NULL)
		fail_msg("check: %s", r.out);
	tc_run_free(&r);
	assert_memory_equal(before, shmt__region(f.h, SHMT_R_DICT), len);
	free(before);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "check", "--repair"));
	if (strstr(r.out, "problem: dictionary shard 0: counts") == NULL ||
	    strstr(r.out, "repaired: 0 problems left") == NULL)
		fail_msg("check --repair: %s", r.out);
	tc_run_free(&r);
	assert_int_equal(sh->ds_items, items);
	assert_int_equal(sh->ds_lock.lk_owner, 0);
	expect_clean(&f);

	/* A negative exact hint is repaired; a state word out of range is
	 * only named: exit 4, and it is left. */
	tu_row_of(f.h, "exact")->lm_w.w[0] = (uint64_t)-1;
	tu_row_of(f.h, "api")->lm_w.w[0] += (uint64_t)50 << 32;
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "--json", "check", "--repair"));
	{
		json_error_t e;
		json_t *j = json_loads(r.out, 0, &e), *left;

		assert_non_null(j);
		assert_true(json_is_false(json_object_get(j, "ok")));
		assert_true(json_is_true(json_object_get(j, "repaired")));
		assert_int_equal(json_array_size(json_object_get(j, "problems")),
		    2);
		left = json_object_get(j, "left");
		assert_int_equal(json_array_size(left), 1);
		assert_string_equal(json_string_value(json_object_get(
		    json_array_get(left, 0), "where")), "limiter api");
		json_decref(j);
	}
	tc_run_free(&r);
	assert_int_equal(tu_row_of(f.h, "exact")->lm_w.w[0], 1);
	tu_row_of(f.h, "api")->lm_w.w[0] -= (uint64_t)50 << 32;
	expect_clean(&f);
	fx_free(&f);
}

/* A counter item shorter than its ring. */
static void
test_counter_short(void **state)
{
	struct fx f;
	struct shmt_item *it = NULL;
	uint32_t saved;

	(void)state;
	fx_make(&f, "clicshort");
	for (uint32_t i = 0; i < f.h->counters->shards && it == NULL; i++) {
		const struct shmt_store *st = f.h->counters;
		char *sh = (char *)tu_shard(st, i);
		struct shmt_bucket *index =
		    (struct shmt_bucket *)(sh + st->index_off);

		for (uint64_t b = 0; b < st->nbuckets && it == NULL; b++)
			if (index[b].bk_head != 0)
				it = (struct shmt_item *)(sh + st->heap_off +
				    link_off(index[b].bk_head));
	}
	assert_non_null(it);
	saved = it->it_lens;
	it->it_lens = lens_make(lens_klen(saved), 4);
	expect_one_problem(&f, "has a value of 4 bytes, not a counter's shape", NULL);
	it->it_lens = saved;
	expect_clean(&f);
	fx_free(&f);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_limiter_kinds, tc_cleanup),
		cmocka_unit_test_teardown(test_store_kinds_and_repair,
		    tc_cleanup),
		cmocka_unit_test_teardown(test_counter_short, tc_cleanup),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s CLI-BINARY\n", argv[0]);
		return 2;
	}
	tc_bin = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
