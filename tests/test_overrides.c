/* SPDX-License-Identifier: MIT */
/*
 * Per-client overrides (shmt_client_set): set, clear, get and list with
 * their errors; a client's own limit, lowered (uses in flight stay counted
 * until they come back) and raised (at once), allow (granted, never
 * recorded) and deny (refused, counted); a rule that waits in the table
 * for a client's first use and survives its entry's reclaim; the same
 * through shmt_acquire's decisions and shmt_peek; a move into a new
 * generation and a snapshot round trip carry the rules; a damaged override
 * table or stamp gives SHMT_ECORRUPT and shmt_check names it.  The clock
 * is injected throughout.
 */
#include "atomic128.h"
#include "clients.h"
#include "daemon.h"
#include "fork.h"
#include "limiter.h"
#include "lock.h"
#include "segment.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define W 1000ULL               /* the window, ns */

static struct {
	char seg[96];
	shmt_t *h;
	struct tu_clock clk;
} g;

static int
ov_setup(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = W, .slack_ns = 100,
		.slack_uses = 2, .per_client = 1, .client_capacity = 8,
		.client_overrides = 4 };

	(void)state;
	tu_segname(g.seg, sizeof(g.seg), "ovr");
	if (shmt_create(g.seg, NULL, &g.h) != 0)
		return -1;
	g.clk.now = 1000000;
	if (shmt_set_clock(g.h, tu_clock_read, &g.clk) != 0)
		return -1;
	return shmt_limiter_define(g.h, "pc", &l);
}

static int
ov_teardown(void **state)
{
	(void)state;
	tu_close_unlink(g.h, g.seg);
	g.h = NULL;
	return 0;
}

static int
use(const char *client)
{
	return shmt_try_use(g.h, "pc", client, strlen(client));
}

/* Grants of CLIENT in a row at the same instant, up to MAX tries. */
static int
burst(const char *client, int max)
{
	int n = 0, rc;

	while (n < max && (rc = use(client)) == 1)
		n++;
	return n;
}

static int
set(const char *client, int kind, uint64_t limit)
{
	shmt_client_rule_t r = { .kind = kind, .limit = limit };

	return shmt_client_set(g.h, "pc", client, strlen(client), &r);
}

static void
test_errors(void **state)
{
	shmt_client_rule_t r = { .kind = SHMT_RULE_LIMIT, .limit = 3 }, out;
	shmt_limit_t sh = { .limit = 5, .window_ns = W, .slack_ns = 100,
		.slack_uses = 1 };
	shmt_limit_t bad = sh;
	shmt_client_override_t list[4];
	char big[SHMT_OVERRIDE_ID_MAX + 1];

	(void)state;
	memset(big, 'x', sizeof(big));
	assert_int_equal(shmt_limiter_define(g.h, "shared", &sh), 0);
	bad.client_overrides = 4;
	assert_int_equal(shmt_limiter_define(g.h, "bad", &bad), -EINVAL);
	assert_int_equal(shmt_client_set(g.h, "shared", "a", 1, &r), -EPERM);
	assert_int_equal(shmt_client_set(g.h, "nope", "a", 1, &r), -ENOENT);
	assert_int_equal(shmt_client_set(g.h, "pc", NULL, 1, &r), -EINVAL);
	assert_int_equal(shmt_client_set(g.h, "pc", "a", 0, &r), -EINVAL);
	assert_int_equal(shmt_client_set(g.h, "pc", "a", 1, NULL), -EINVAL);
	assert_int_equal(shmt_client_set(NULL, "pc", "a", 1, &r), -EINVAL);
	assert_int_equal(shmt_client_set(g.h, "pc", big, sizeof(big), &r),
	    -E2BIG);
	/* The longest id is kept whole. */
	assert_int_equal(shmt_client_set(g.h, "pc", big, sizeof(big) - 1, &r),
	    0);
	r.limit = 0;
	assert_int_equal(shmt_client_set(g.h, "pc", "a", 1, &r), -EINVAL);
	r.limit = SHMT_LIMIT_MAX + 1;
	assert_int_equal(shmt_client_set(g.h, "pc", "a", 1, &r), -EINVAL);
	r.kind = SHMT_RULE_ALLOW;
	r.limit = 5;
	assert_int_equal(shmt_client_set(g.h, "pc", "a", 1, &r), -EINVAL);
	r.kind = 9;
	r.limit = 0;
	assert_int_equal(shmt_client_set(g.h, "pc", "a", 1, &r), -EINVAL);
	assert_int_equal(shmt_client_list(g.h, "pc", NULL, 1), -EINVAL);
	assert_int_equal(shmt_client_list(g.h, "shared", list, 4), -EPERM);
	assert_int_equal(shmt_client_get(g.h, "pc", "a", 1, &out), 0);
	assert_int_equal(out.kind, 0);

	/* A full table (4 here), and what a clear makes room for. */
	assert_int_equal(set("b", SHMT_RULE_DENY, 0), 0);
	assert_int_equal(set("c", SHMT_RULE_ALLOW, 0), 0);
	assert_int_equal(set("d", SHMT_RULE_LIMIT, 7), 0);
	assert_int_equal(set("e", SHMT_RULE_LIMIT, 7), -ENOSPC);
	/* Changing an existing one needs no room. */
	assert_int_equal(set("d", SHMT_RULE_LIMIT, 6), 0);
	assert_int_equal(shmt_client_list(g.h, "pc", list, 4), 4);
	assert_int_equal(shmt_client_list(g.h, "pc", NULL, 0), 4);
	assert_int_equal(list[0].client_len, SHMT_OVERRIDE_ID_MAX);
	assert_memory_equal(list[0].client, big, SHMT_OVERRIDE_ID_MAX);
	assert_int_equal(list[0].rule.kind, SHMT_RULE_LIMIT);
	assert_int_equal(list[0].rule.limit, 3);
	assert_int_equal(list[1].client_len, 1);
	assert_int_equal(list[1].client[0], 'b');
	assert_int_equal(list[1].rule.kind, SHMT_RULE_DENY);
	assert_int_equal(list[2].rule.kind, SHMT_RULE_ALLOW);
	assert_int_equal(list[3].rule.kind, SHMT_RULE_LIMIT);
	assert_int_equal(list[3].rule.limit, 6);
	assert_int_equal(shmt_client_get(g.h, "pc", "d", 1, &out), 1);
	assert_int_equal(out.kind, SHMT_RULE_LIMIT);
	assert_int_equal(out.limit, 6);
	assert_int_equal(shmt_client_clear(g.h, "pc", "c", 1), 1);
	assert_int_equal(shmt_client_clear(g.h, "pc", "c", 1), 0);
	assert_int_equal(shmt_client_get(g.h, "pc", "c", 1, &out), 0);
	assert_int_equal(set("e", SHMT_RULE_LIMIT, 7), 0);
	assert_int_equal(shmt_client_list(g.h, "pc", list, 2), 4);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

static void
test_limits(void **state)
{
	shmt_limiter_stat_t st;

	(void)state;
	/* Its own limit, beside a client of the class (10). */
	assert_int_equal(set("tier", SHMT_RULE_LIMIT, 3), 0);
	assert_int_equal(burst("tier", 50), 3);
	assert_int_equal(burst("plain", 50), 10);
	/* Raised: at once, with the 3 in flight counted. */
	assert_int_equal(set("tier", SHMT_RULE_LIMIT, 16), 0);
	assert_int_equal(burst("tier", 50), 13);
	/* Lowered under what is in flight (16): refused until fewer than 5
	 * are, which is when the window has passed for them all. */
	assert_int_equal(set("tier", SHMT_RULE_LIMIT, 5), 0);
	assert_int_equal(burst("tier", 50), 0);
	g.clk.now += W / 2;
	assert_int_equal(burst("tier", 50), 0);
	g.clk.now += W;
	assert_int_equal(burst("tier", 50), 5);
	/* Cleared: the class limit again, the 5 counted. */
	assert_int_equal(shmt_client_clear(g.h, "pc", "tier", 4), 1);
	assert_int_equal(burst("tier", 50), 5);
	assert_int_equal(shmt_limiter_stat(g.h, "pc", &st), 0);
	assert_int_equal(st.client_overrides, 4);
	assert_int_equal(st.overrides_in_use, 0);
	assert_int_equal(st.denied_by_rule, 0);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

/*
 * A tier far above its class: the class (limit 10, B 1, 1 in 10 of the
 * window a slack) gives each entry a ring of 20 buckets, which holds 10
 * uses of the class but only 20 of a tier kept in buckets of 1.  A tier of
 * 200 fills buckets of 20: all 200 are granted at one instant, also with
 * housekeeping between the uses (which seals an entry's bucket at its
 * tier's B, not the class's), and a peek tells what an acquire then does.
 */
static void
test_tier_ring(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = W, .slack_ns = 100,
		.slack_uses = 1, .per_client = 1, .client_capacity = 8,
		.client_overrides = 4 };
	shmt_client_rule_t r = { .kind = SHMT_RULE_LIMIT, .limit = 200 };
	shmt_decision_t p, d;
	int n = 0, k = 0;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "tr", &l), 0);
	assert_int_equal(shmt_client_set(g.h, "tr", "big", 3, &r), 0);
	for (int i = 0; i < 400; i++) {
		if (shmt_try_use(g.h, "tr", "big", 3) == 1)
			n++;
		if (i % 2 == 1)
			assert_true(shmt_housekeep(g.h, NULL) >= 0);
	}
	assert_int_equal(n, 200);
	for (int i = 0; i < 40; i++)
		k += shmt_try_use(g.h, "tr", "cls", 3) == 1;
	assert_int_equal(k, 10);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);

	/* Half a window on (past every close): peek and acquire agree on
	 * the remaining count, as uses come back. */
	g.clk.now += W + 150;
	assert_true(shmt_housekeep(g.h, NULL) >= 0);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(shmt_peek(g.h, "tr", "big", 3, 1, &p), 1);
		assert_int_equal(shmt_acquire(g.h, "tr", "big", 3, 1, &d), 1);
		assert_int_equal(p.limit, 200);
		assert_int_equal(d.limit, 200);
		assert_int_equal(p.remaining, d.remaining);
	}
	assert_int_equal(d.remaining, 200 - 5);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

static void
test_allow_deny(void **state)
{
	shmt_limiter_stat_t st0, st;
	shmt_decision_t d;

	(void)state;
	assert_int_equal(shmt_limiter_stat(g.h, "pc", &st0), 0);
	assert_int_equal(burst("vip", 4), 4);
	assert_int_equal(set("vip", SHMT_RULE_ALLOW, 0), 0);
	assert_int_equal(burst("vip", 500), 500);
	assert_int_equal(shmt_acquire(g.h, "pc", "vip", 3, 2, &d), 1);
	assert_int_equal(d.granted, 1);
	assert_int_equal(d.limit, 0);
	assert_true(d.remaining == UINT64_MAX);
	assert_int_equal(shmt_limiter_stat(g.h, "pc", &st), 0);
	assert_int_equal(st.allowed_by_rule - st0.allowed_by_rule, 501);
	/* Allowed grants are not recorded: in flight, the 4 from before. */
	assert_int_equal(st.in_flight, 4);
	assert_int_equal(st.grants - st0.grants, 4);

	assert_int_equal(set("vip", SHMT_RULE_DENY, 0), 0);
	assert_int_equal(burst("vip", 5), 0);
	assert_int_equal(shmt_acquire(g.h, "pc", "vip", 3, 1, &d), 0);
	assert_int_equal(d.granted, 0);
	assert_true(d.retry_after_ns == UINT64_MAX);
	assert_int_equal(shmt_peek(g.h, "pc", "vip", 3, 1, &d), 0);
	assert_true(d.retry_after_ns == UINT64_MAX);
	assert_int_equal(shmt_limiter_stat(g.h, "pc", &st), 0);
	assert_int_equal(st.denied_by_rule - st0.denied_by_rule, 2);
	assert_int_equal(st.denied_exhausted, st0.denied_exhausted);
	/* Back to the class limit, the 4 still counted. */
	assert_int_equal(shmt_client_clear(g.h, "pc", "vip", 3), 1);
	assert_int_equal(burst("vip", 50), 6);
	/* A peek and a decision show a client's own limit. */
	assert_int_equal(set("gold", SHMT_RULE_LIMIT, 4), 0);
	assert_int_equal(shmt_peek(g.h, "pc", "gold", 4, 1, &d), 1);
	assert_int_equal(d.limit, 4);
	assert_int_equal(d.remaining, 3);
	assert_int_equal(shmt_acquire(g.h, "pc", "gold", 4, 2, &d), 1);
	assert_int_equal(d.limit, 4);
	assert_int_equal(d.remaining, 2);
	assert_int_equal(shmt_peek(g.h, "pc", "gold", 4, 1, &d), 1);
	assert_int_equal(d.remaining, 1);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

/* A rule set before the client's first use is stamped when its entry is
 * claimed, and again after the entry was reclaimed and claimed anew. */
static void
test_claim_reclaim(void **state)
{
	shmt_limiter_stat_t st;
	shmt_time_t next;

	(void)state;
	assert_int_equal(set("early", SHMT_RULE_LIMIT, 2), 0);
	assert_int_equal(burst("early", 50), 2);
	g.clk.now += 10 * W;
	assert_true(shmt_housekeep(g.h, &next) >= 0);
	assert_int_equal(shmt_limiter_stat(g.h, "pc", &st), 0);
	assert_int_equal(st.clients_in_use, 0);
	/* Fill the table with others so that "early"'s entry is reused. */
	for (int i = 0; i < 8; i++) {
		char id[8];

		snprintf(id, sizeof(id), "o%d", i);
		assert_int_equal(use(id), 1);
	}
	g.clk.now += 10 * W;
	assert_true(shmt_housekeep(g.h, &next) >= 0);
	assert_int_equal(burst("early", 50), 2);
	assert_int_equal(set("early", SHMT_RULE_DENY, 0), 0);
	assert_int_equal(use("early"), 0);
}

/* Rate mode: allow and deny only. */
static void
test_rate_mode(void **state)
{
	shmt_limit_t l = { .limit = 4, .window_ns = 4000, .burst = 2,
		.mode = SHMT_MODE_GCRA, .per_client = 1, .client_capacity = 4 };
	shmt_client_rule_t r = { .kind = SHMT_RULE_LIMIT, .limit = 3 };

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "rate", &l), 0);
	assert_int_equal(shmt_client_set(g.h, "rate", "x", 1, &r), -EINVAL);
	r.kind = SHMT_RULE_DENY;
	r.limit = 0;
	assert_int_equal(shmt_client_set(g.h, "rate", "x", 1, &r), 0);
	assert_int_equal(shmt_try_use(g.h, "rate", "x", 1), 0);
	r.kind = SHMT_RULE_ALLOW;
	assert_int_equal(shmt_client_set(g.h, "rate", "x", 1, &r), 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(shmt_try_use(g.h, "rate", "x", 1), 1);
	assert_int_equal(shmt_client_clear(g.h, "rate", "x", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "x", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "x", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "x", 1), 0);
}

/* Shadow mode: a deny is counted as a refusal not enforced. */
static void
test_shadow(void **state)
{
	shmt_limit_t l = { .limit = 2, .window_ns = W, .slack_ns = 100,
		.slack_uses = 1, .per_client = 1, .client_capacity = 4,
		.shadow = 1 };
	shmt_client_rule_t r = { .kind = SHMT_RULE_DENY };
	shmt_limiter_stat_t st;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "sh", &l), 0);
	assert_int_equal(shmt_client_set(g.h, "sh", "x", 1, &r), 0);
	assert_int_equal(shmt_try_use(g.h, "sh", "x", 1), 1);
	assert_int_equal(shmt_limiter_stat(g.h, "sh", &st), 0);
	assert_int_equal(st.would_deny, 1);
	assert_int_equal(st.denied_by_rule, 0);
}

/* A move into a new generation and a snapshot round trip keep every rule,
 * and the entries stamped with them. */
static void
test_move_snapshot(void **state)
{
	shmt_config_t c;
	shmt_client_override_t list[4];
	unsigned char *img = NULL;
	size_t len = 0;
	char err[512] = "", seg2[128];
	struct shmt__host_time now;
	shmt_t *h2;

	(void)state;
	assert_int_equal(set("m1", SHMT_RULE_LIMIT, 3), 0);
	assert_int_equal(set("m2", SHMT_RULE_DENY, 0), 0);
	assert_int_equal(set("m3", SHMT_RULE_ALLOW, 0), 0);
	assert_int_equal(burst("m1", 1), 1);
	shmt_config_init(&c);
	if (shmt__move(g.h, &c, tu_clock_read, &g.clk, err, sizeof(err)) != 0)
		fail_msg("move: %s", err);
	/* The handle follows the move on its next call. */
	assert_int_equal(burst("m1", 50), 2);
	assert_int_equal(use("m2"), 0);
	assert_int_equal(burst("m3", 30), 30);
	assert_int_equal(shmt_client_list(g.h, "pc", list, 4), 3);

	/* Snapshot: the image, restored under another name. */
	shmt__host_time_now(&now);
	assert_int_equal(shmt__image_build(shmt__gen_live(g.h), &now, &img, &len), 0);
	tu_segname(seg2, sizeof(seg2), "ovr2");
	if (shmt__image_restore(img, len, seg2, &now, tu_clock_read, &g.clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img);
	assert_int_equal(shmt_open(seg2, &h2), 0);
	assert_int_equal(shmt_set_clock(h2, tu_clock_read, &g.clk), 0);
	assert_int_equal(shmt_client_list(h2, "pc", list, 4), 3);
	assert_int_equal(shmt_try_use(h2, "pc", "m1", 2), 0);
	assert_int_equal(shmt_try_use(h2, "pc", "m2", 2), 0);
	assert_int_equal(shmt_try_use(h2, "pc", "m3", 2), 1);
	/* The rule holds for a client new to the restored segment too. */
	assert_int_equal(shmt_client_set(h2, "pc", "m4", 2,
	    &(shmt_client_rule_t){ .kind = SHMT_RULE_LIMIT, .limit = 1 }), 0);
	assert_int_equal(shmt_try_use(h2, "pc", "m4", 2), 1);
	assert_int_equal(shmt_try_use(h2, "pc", "m4", 2), 0);
	assert_int_equal(shmt_check(h2, NULL, NULL), 0);
	tu_close_unlink(h2, seg2);
}

static void
count_problems(void *ctx, const char *msg)
{
	print_message("check: %s\n", msg);
	++*(int *)ctx;
}

/* Damage: a rule out of range, an id length out of range, the table's
 * offset and capacity, and an entry's stamp. */
static void
test_hostile(void **state)
{
	struct shmt_lim *row;
	struct shmt_override *ov;
	shmt_client_override_t list[4];
	struct shmt_client *e;
	uint32_t save;
	uint64_t save64;
	shmt_t *h2;
	int probs = 0;

	(void)state;
	assert_int_equal(set("h1", SHMT_RULE_LIMIT, 3), 0);
	assert_int_equal(use("h1"), 1);
	row = tu_row_of(g.h, "pc");
	ov = (struct shmt_override *)(tu_arena(g.h) + row->lm_ov_off);
	assert_int_equal(ov[0].ov_rule, 3);

	ov[0].ov_rule = 0x80000000U;
	assert_int_equal(shmt_client_list(g.h, "pc", list, 4), SHMT_ECORRUPT);
	assert_int_equal(set("h2", SHMT_RULE_LIMIT, 3), SHMT_ECORRUPT);
	/* A claim looks the table up: a new client is refused so. */
	assert_int_equal(use("h3"), SHMT_ECORRUPT);
	assert_true(shmt_check(g.h, count_problems, &probs) > 0);
	assert_true(probs > 0);
	ov[0].ov_rule = 3;

	ov[0].ov_idlen = SHMT_OVERRIDE_ID_MAX + 1;
	assert_int_equal(shmt_client_list(g.h, "pc", list, 4), SHMT_ECORRUPT);
	assert_true(shmt_check(g.h, NULL, NULL) > 0);
	ov[0].ov_idlen = 2;
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);

	/* The stamp in the client's entry. */
	e = (struct shmt_client *)(tu_arena(g.h) + row->lm_clients_off);
	for (uint32_t i = 0; i < row->lm_capacity; i++) {
		struct shmt_client *x = (struct shmt_client *)((char *)e +
		    (uint64_t)i * row->lm_entsize);

		if (x->ce_rule == 3) {
			e = x;
			break;
		}
	}
	assert_int_equal(e->ce_rule, 3);
	e->ce_rule = 0x90000000U;
	assert_int_equal(use("h1"), SHMT_ECORRUPT);
	assert_true(shmt_check(g.h, NULL, NULL) > 0);
	e->ce_rule = 3;
	assert_int_equal(use("h1"), 1);

	/* The table's place and size: a fresh handle refuses the row. */
	save64 = row->lm_ov_off;
	row->lm_ov_off = UINT64_MAX - 64;
	assert_int_equal(shmt_open(g.seg, &h2), 0);
	assert_int_equal(shmt_client_list(h2, "pc", list, 4), SHMT_ECORRUPT);
	assert_int_equal(shmt_try_use(h2, "pc", "h1", 2), SHMT_ECORRUPT);
	assert_true(shmt_check(h2, NULL, NULL) > 0);
	shmt_close(h2);
	row->lm_ov_off = save64 + 8;
	assert_int_equal(shmt_open(g.seg, &h2), 0);
	assert_int_equal(shmt_client_list(h2, "pc", list, 4), SHMT_ECORRUPT);
	shmt_close(h2);
	row->lm_ov_off = save64;
	save = row->lm_ov_cap;
	row->lm_ov_cap = 0xffffffffU;
	assert_int_equal(shmt_open(g.seg, &h2), 0);
	assert_int_equal(shmt_client_list(h2, "pc", list, 4), SHMT_ECORRUPT);
	shmt_close(h2);
	row->lm_ov_cap = save;
	assert_int_equal(shmt_open(g.seg, &h2), 0);
	assert_int_equal(shmt_client_list(h2, "pc", list, 4), 1);
	assert_int_equal(shmt_check(h2, NULL, NULL), 0);
	shmt_close(h2);
}

/* The entry of V's client stamped RULE (the first one), or NULL. */
static struct shmt_client *
entry_stamped(struct shmt_lim *row, uint32_t rule)
{
	char *base = tu_arena(g.h) + row->lm_clients_off;

	for (uint32_t i = 0; i < row->lm_capacity; i++) {
		struct shmt_client *x = (struct shmt_client *)(base +
		    (uint64_t)i * row->lm_entsize);

		if (x->ce_rule == rule)
			return x;
	}
	return NULL;
}

static uint32_t
entry_epoch(struct shmt_client *e)
{
	uint64_t w[2];

	shmt__load128(&e->ce_w, w);
	return (uint32_t)(w[1] & CE_EPOCH_MASK);
}

/*
 * Stamps against the table.  A valid stamp that is not the table's (an
 * allow where the table gives 3, a rule the table no longer gives) is
 * named by shmt_check.  A setter that died between its stamp and its CAS
 * leaves the entry with the new rule and the old epoch: the repair by the
 * next holder of the client lock moves the epoch all the same (a grant
 * that read the old rule must fail).  Changes of one client's rule are
 * at least 64 us apart, so its 14-bit epoch comes back after a second at
 * the soonest.
 */
static void
test_stamps(void **state)
{
	shmt_client_rule_t r;
	struct shmt_lim *row;
	struct shmt_override *ov;
	struct shmt_client *e;
	uint64_t t0;
	uint32_t ep;
	int probs = 0, st;
	pid_t pid;

	(void)state;
	row = tu_row_of(g.h, "pc");
	ov = (struct shmt_override *)(tu_arena(g.h) + row->lm_ov_off);
	assert_int_equal(set("s1", SHMT_RULE_LIMIT, 3), 0);
	assert_int_equal(use("s1"), 1);
	assert_non_null(e = entry_stamped(row, 3));
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);

	e->ce_rule = CE_RULE_ALLOW;
	assert_true(shmt_check(g.h, count_problems, &probs) > 0);
	e->ce_rule = 3;
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
	assert_int_equal(shmt_client_clear(g.h, "pc", "s1", 2), 1);
	assert_int_equal(e->ce_rule, CE_RULE_NONE);
	e->ce_rule = 3;
	assert_true(shmt_check(g.h, NULL, NULL) > 0);
	e->ce_rule = CE_RULE_NONE;
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);

	/* A setter's death after its stamp: table and stamp say 4, the
	 * epoch is the one grants of 3 read. */
	assert_int_equal(set("s1", SHMT_RULE_LIMIT, 3), 0);
	assert_int_equal(ov[0].ov_rule, 3);
	ep = entry_epoch(e);
	ov[0].ov_rule = 4;
	e->ce_rule = 4;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_t *c;

		if (shmt_open(g.seg, &c) != 0 || shmt__lock(c,
		    &tu_row_of(c, "pc")->lm_client_lock) < 0)
			_exit(1);
		_exit(0);       /* dies holding the client lock */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(shmt_client_get(g.h, "pc", "s1", 2, &r), 1);
	assert_int_equal(r.limit, 4);
	assert_int_not_equal(entry_epoch(e), ep);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);

	/* 100 changes of one client's rule: at least 100 x 64 us. */
	t0 = tu_mono_ns();
	for (int i = 0; i < 100; i++)
		assert_int_equal(set("s1", SHMT_RULE_LIMIT, 3 + (i & 1)), 0);
	assert_true(tu_mono_ns() - t0 >= 100 * 64000ULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_errors, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_limits, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_tier_ring, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_allow_deny, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_claim_reclaim, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_rate_mode, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_shadow, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_move_snapshot, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_hostile, ov_setup,
		    ov_teardown),
		cmocka_unit_test_setup_teardown(test_stamps, ov_setup,
		    ov_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
