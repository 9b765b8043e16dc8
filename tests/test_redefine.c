/* SPDX-License-Identifier: MIT */
/*
 * A per-client limiter defined anew by a move (shmt__move_redefine): uses
 * in flight before the change stay counted after it (a lowered limit
 * refuses until in flight falls under it, a raised one grants more at
 * once), a widened window holds each use until its grant + the new window,
 * a narrowed one keeps the old release times, a bigger or smaller client
 * table keeps every client, overrides and their stamps stay, rate mode
 * keeps its arrival times, a handle opened before the change (in this
 * process and in another) follows to the new generation; what the new
 * segment cannot hold is refused with the old generation untouched.  The
 * clock is injected throughout.
 */
#include "atomic128.h"
#include "clients.h"
#include "daemon.h"
#include "fork.h"
#include "table.h"
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define W 1000000ULL            /* the window, ns */
#define S 100000ULL             /* the slack, ns */
#define T0 1000000000ULL        /* the clock at the start */

static struct {
	char seg[96];
	shmt_t *h;
	struct tu_clock clk;
} g;

static shmt_limit_t
pc_limit(uint64_t limit, uint64_t window, uint32_t capacity)
{
	shmt_limit_t l = { .limit = limit, .window_ns = window, .slack_ns = S,
		.slack_uses = 2, .per_client = 1, .client_capacity = capacity,
		.client_overrides = 4 };

	return l;
}

static int
rd_setup(void **state)
{
	shmt_limit_t l = pc_limit(10, W, 16);

	(void)state;
	tu_segname(g.seg, sizeof(g.seg), "redef");
	if (shmt_create(g.seg, NULL, &g.h) != 0)
		return -1;
	g.clk.now = T0;
	if (shmt_set_clock(g.h, tu_clock_read, &g.clk) != 0)
		return -1;
	return shmt_limiter_define(g.h, "pc", &l);
}

static int
rd_teardown(void **state)
{
	(void)state;
	tu_close_unlink(g.h, g.seg);
	g.h = NULL;
	return 0;
}

static int
use(const char *client)
{
	int rc = shmt_try_use(g.h, "pc", client, strlen(client));

	if (rc < 0)
		fail_msg("try_use %s: %s", client, shmt_strerror(rc));
	return rc;
}

/* Grants of CLIENT in a row at the same instant, up to MAX tries. */
static int
burst(const char *client, int max)
{
	int n = 0;

	while (n < max && use(client) == 1)
		n++;
	return n;
}

/* Define NAME anew as L by a move; the move's result. */
static int
redefine(const char *name, const shmt_limit_t *l, char *err, size_t cap)
{
	struct shmt__redef d = { name, l };
	shmt_config_t c;

	shmt__move_config(g.h, &c);
	return shmt__move_redefine(shmt__gen_live(g.h), &c, &d, 1,
	    tu_clock_read, &g.clk, err, cap);
}

static void
redefine_ok(const char *name, const shmt_limit_t *l)
{
	char err[768] = "";

	if (redefine(name, l, err, sizeof(err)) != 0)
		fail_msg("redefine %s: %s", name, err);
}

static shmt_limiter_stat_t
stat_of(const char *name)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(g.h, name, &st), 0);
	return st;
}

static void
check_clean(void)
{
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

/* A lowered limit refuses until the uses in flight fall under it; the
 * new parameters and the table are the new definition's. */
static void
test_lower(void **state)
{
	shmt_limit_t l = pc_limit(4, W, 32);
	shmt_limiter_stat_t st;

	(void)state;
	assert_int_equal(burst("a", 8), 8);
	assert_int_equal(burst("b", 1), 1);
	g.clk.now += 10;
	redefine_ok("pc", &l);
	st = stat_of("pc");
	assert_int_equal(st.limit, 4);
	assert_int_equal(st.client_capacity, 32);
	assert_int_equal(st.in_flight, 9);
	assert_int_equal(st.clients_in_use, 2);
	assert_int_equal(use("a"), 0);
	/* b holds 1 of its 4. */
	assert_int_equal(burst("b", 10), 3);
	g.clk.now = T0 + S + W - 1;
	assert_int_equal(use("a"), 0);
	g.clk.now = T0 + S + W;
	assert_int_equal(burst("a", 10), 4);
	check_clean();
}

/* A client whose ring's serial is past 2^31, defined anew by a move: the
 * carried bucket keeps its uses and the new ring opens buckets after it
 * (the zeroed slots marked released, as for a pool). */
static void
test_client_high_serial(void **state)
{
	shmt_limit_t l = pc_limit(20, W, 16);
	uint32_t tail = 0x90000000U, n, row;
	struct shmt_client *e = NULL;
	struct shmt_ring_slot *ring;
	struct shmt_w w = { { 0, 0 } };
	struct shmt_lview v;
	struct shmt_lim *lim;

	(void)state;
	assert_int_equal(use("a"), 1);
	lim = shmt__rows(g.h, &n);
	row = shmt__row_named(lim, n, "pc");
	assert_true(row < n);
	assert_int_equal(shmt__view_fill(g.h, row, &lim[row], &v), 0);
	for (uint32_t i = 0; i < v.capacity && e == NULL; i++) {
		shmt__load128(&ce_at(&v, i)->ce_w, w.w);
		if (SHMT_W_INFLIGHT(w) == 1)
			e = ce_at(&v, i);
	}
	assert_non_null(e);
	/* The same one use, in the active bucket TAIL; every other slot a
	 * bucket released long ago. */
	ring = ce_ring(e);
	for (uint32_t s = tail - v.nb; s != tail; s++) {
		ring[s % v.nb].r[0] = 1;
		ring[s % v.nb].r[1] = (uint64_t)s << 32;
	}
	ring[tail % v.nb].r[0] = T0 + S;
	ring[tail % v.nb].r[1] = (uint64_t)tail << 32;
	w.w[1] = (uint64_t)tail << 32 | (w.w[1] & 0x1ffffULL);
	shmt__store128(&e->ce_w, w.w);
	check_clean();
	redefine_ok("pc", &l);
	assert_int_equal(stat_of("pc").in_flight, 1);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(burst("a", 30), round == 0 ? 19 : 20);
		check_clean();
		g.clk.now += S + W + W;
	}
}

/* A raised limit grants the difference at once. */
static void
test_raise(void **state)
{
	shmt_limit_t l = pc_limit(20, W, 16);

	(void)state;
	assert_int_equal(burst("a", 20), 10);
	redefine_ok("pc", &l);
	assert_int_equal(burst("a", 30), 10);
	assert_int_equal(stat_of("pc").in_flight, 20);
	check_clean();
}

/* A widened window holds each use until its grant + the new window. */
static void
test_widen(void **state)
{
	shmt_limit_t l = pc_limit(10, 5 * W, 16);

	(void)state;
	assert_int_equal(burst("a", 20), 10);
	g.clk.now += 10;
	redefine_ok("pc", &l);
	g.clk.now = T0 + S + W;         /* the old release time */
	assert_int_equal(use("a"), 0);
	g.clk.now = T0 + 5 * W - 1;     /* before grant + the new window */
	assert_int_equal(use("a"), 0);
	g.clk.now = T0 + S + 5 * W;
	assert_int_equal(burst("a", 20), 10);
	check_clean();
}

/* A narrowed window keeps the old release times; uses granted after the
 * change have the new window. */
static void
test_narrow(void **state)
{
	shmt_limit_t wide = pc_limit(10, 5 * W, 16), l = pc_limit(10, W, 16);

	(void)state;
	redefine_ok("pc", &wide);
	assert_int_equal(burst("a", 20), 10);
	assert_int_equal(burst("b", 3), 3);
	g.clk.now += 10;
	redefine_ok("pc", &l);
	check_clean();
	g.clk.now = T0 + S + W;         /* grant + the new window: still held */
	assert_int_equal(use("a"), 0);
	g.clk.now = T0 + S + 5 * W - 1; /* just before the old release time */
	assert_int_equal(use("a"), 0);
	assert_int_equal(burst("c", 20), 10);
	g.clk.now = T0 + S + 5 * W;
	assert_int_equal(burst("a", 20), 10);
	assert_int_equal(burst("b", 20), 10);
	/* c's uses, granted after the change, have the new window. */
	g.clk.now = T0 + S + 5 * W - 1 + S + W;
	assert_int_equal(burst("c", 20), 10);
	check_clean();
}

/* A narrowed window's hold survives a snapshot restored on another boot:
 * the restore shifts every close time by the boots' difference, so the
 * time that tells carried buckets from later ones must shift with them. */
static void
test_narrow_restored(void **state)
{
	shmt_limit_t wide = pc_limit(10, 5 * W, 16), l = pc_limit(10, W, 16);
	const uint64_t D = 100 * W;     /* the new boot's clock is D ahead */
	struct shmt__host_time then, now;
	unsigned char *img = NULL;
	size_t len = 0;
	char err[512] = "", seg2[128];
	shmt_t *h2;
	int n = 0;

	(void)state;
	redefine_ok("pc", &wide);
	assert_int_equal(burst("a", 20), 10);
	g.clk.now += 10;
	redefine_ok("pc", &l);
	check_clean();
	(void)stat_of("pc");            /* the handle follows the move */
	shmt__host_time_now(&then);
	assert_int_equal(shmt__image_build(shmt__gen_live(g.h), &then, &img,
	    &len), 0);
	now = then;
	now.mono_ns += D;
	snprintf(now.boot_id, sizeof(now.boot_id), "another-boot");
	tu_segname(seg2, sizeof(seg2), "redef2");
	g.clk.now += D;
	if (shmt__image_restore(img, len, seg2, &now, tu_clock_read, &g.clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img);
	assert_int_equal(shmt_open(seg2, &h2), 0);
	assert_int_equal(shmt_set_clock(h2, tu_clock_read, &g.clk), 0);
	/* a's uses were granted at T0 under a window of 5 W: on the new
	 * boot's clock they are held until T0 + D + S + 5 W. */
	g.clk.now = T0 + D + S + 2 * W;
	while (n < 20 && shmt_try_use(h2, "pc", "a", 1) == 1)
		n++;
	assert_int_equal(n, 0);
	tu_close_unlink(h2, seg2);
}

/* A per-client limiter in rate mode restored on a boot whose clock is
 * behind: each client's arrival time moves with the clock (it was left as
 * it was, a time of the old boot far ahead of the new clock, which
 * refused the client until the new clock caught up). */
static void
test_rate_restored_behind(void **state)
{
	shmt_limit_t q = { .mode = SHMT_MODE_GCRA, .limit = 10,
		.window_ns = W, .burst = 2, .per_client = 1,
		.client_capacity = 8 };
	const uint64_t D = 100 * W;     /* the new boot's clock is D behind */
	struct shmt__host_time then, now;
	unsigned char *img = NULL;
	size_t len = 0;
	char err[512] = "", seg2[128];
	shmt_t *h2;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "rate", &q), 0);
	g.clk.now = T0 + D;
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 0);
	shmt__host_time_now(&then);
	assert_int_equal(shmt__image_build(shmt__gen_live(g.h), &then, &img,
	    &len), 0);
	now = then;
	now.mono_ns -= D;
	snprintf(now.boot_id, sizeof(now.boot_id), "another-boot");
	tu_segname(seg2, sizeof(seg2), "redef3");
	g.clk.now = T0;
	if (shmt__image_restore(img, len, seg2, &now, tu_clock_read, &g.clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img);
	assert_int_equal(shmt_open(seg2, &h2), 0);
	assert_int_equal(shmt_set_clock(h2, tu_clock_read, &g.clk), 0);
	/* The two uses are held as before: one comes back W / 10 later. */
	assert_int_equal(shmt_try_use(h2, "rate", "a", 1), 0);
	g.clk.now = T0 + W / 10;
	assert_int_equal(shmt_try_use(h2, "rate", "a", 1), 1);
	assert_int_equal(shmt_try_use(h2, "rate", "a", 1), 0);
	tu_close_unlink(h2, seg2);
}

/* The same restored on a boot whose clock is behind (the common case
 * after a reboot): a client new to the restored segment has the new
 * window, not the hold of the uses carried by the change. */
static void
test_narrow_restored_behind(void **state)
{
	shmt_limit_t wide = pc_limit(10, 5 * W, 16), l = pc_limit(10, W, 16);
	const uint64_t D = 100 * W;     /* the new boot's clock is D behind */
	struct shmt__host_time then, now;
	unsigned char *img = NULL;
	size_t len = 0;
	char err[512] = "", seg2[128];
	shmt_t *h2;
	uint64_t t1;
	int n = 0;

	(void)state;
	redefine_ok("pc", &wide);
	assert_int_equal(burst("a", 20), 10);
	g.clk.now += 10;
	redefine_ok("pc", &l);
	(void)stat_of("pc");            /* the handle follows the move */
	shmt__host_time_now(&then);
	assert_int_equal(shmt__image_build(shmt__gen_live(g.h), &then, &img,
	    &len), 0);
	now = then;
	now.mono_ns -= D;
	snprintf(now.boot_id, sizeof(now.boot_id), "another-boot");
	tu_segname(seg2, sizeof(seg2), "redef3");
	g.clk.now -= D;
	if (shmt__image_restore(img, len, seg2, &now, tu_clock_read, &g.clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img);
	assert_int_equal(shmt_open(seg2, &h2), 0);
	assert_int_equal(shmt_set_clock(h2, tu_clock_read, &g.clk), 0);
	/* c's 10 uses, granted after the restore, come back after their
	 * close + the new window W. */
	t1 = g.clk.now;
	while (n < 20 && shmt_try_use(h2, "pc", "c", 1) == 1)
		n++;
	assert_int_equal(n, 10);
	g.clk.now = t1 + S + W;
	n = 0;
	while (n < 20 && shmt_try_use(h2, "pc", "c", 1) == 1)
		n++;
	assert_int_equal(n, 10);
	tu_close_unlink(h2, seg2);
}

/* Every client with its uses moves to a bigger table and to a smaller
 * one; uses granted before either move stay counted. */
static void
test_capacity(void **state)
{
	shmt_limit_t big = pc_limit(10, W, 64), small = pc_limit(10, W, 12);
	char id[16];

	(void)state;
	for (int i = 0; i < 12; i++) {
		snprintf(id, sizeof(id), "c%d", i);
		assert_int_equal(burst(id, i % 3 + 1), i % 3 + 1);
	}
	redefine_ok("pc", &big);
	assert_int_equal(stat_of("pc").clients_in_use, 12);
	redefine_ok("pc", &small);
	assert_int_equal(stat_of("pc").client_capacity, 12);
	assert_int_equal(stat_of("pc").in_flight, 24);
	for (int i = 0; i < 12; i++) {
		snprintf(id, sizeof(id), "c%d", i);
		assert_int_equal(burst(id, 20), 10 - (i % 3 + 1));
	}
	check_clean();
}

/* Overrides and the stamps of their clients stay. */
static void
test_overrides(void **state)
{
	shmt_client_rule_t r = { .kind = SHMT_RULE_LIMIT, .limit = 3 }, out;
	shmt_client_rule_t deny = { .kind = SHMT_RULE_DENY };
	shmt_limit_t l = pc_limit(20, W, 32);

	(void)state;
	l.client_overrides = 8;
	assert_int_equal(shmt_client_set(g.h, "pc", "x", 1, &r), 0);
	assert_int_equal(shmt_client_set(g.h, "pc", "z", 1, &deny), 0);
	assert_int_equal(burst("x", 10), 3);
	redefine_ok("pc", &l);
	assert_int_equal(stat_of("pc").client_overrides, 8);
	assert_int_equal(stat_of("pc").overrides_in_use, 2);
	assert_int_equal(use("x"), 0);
	assert_int_equal(use("z"), 0);
	assert_int_equal(shmt_client_get(g.h, "pc", "x", 1, &out), 1);
	assert_int_equal(out.kind, SHMT_RULE_LIMIT);
	assert_int_equal(out.limit, 3);
	assert_int_equal(burst("y", 30), 20);
	g.clk.now = T0 + S + W;
	assert_int_equal(burst("x", 10), 3);
	check_clean();
}

/* Rate mode: each client's arrival time is carried, rescaled. */
static void
test_rate(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_GCRA, .limit = 10, .window_ns = W,
		.burst = 5, .per_client = 1, .client_capacity = 8 };
	shmt_limit_t l2 = l;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "rate", &l), 0);
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 1);
	for (int i = 0; i < 4; i++)
		assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 0);
	l2.limit = 20;                  /* the interval halves */
	l2.client_capacity = 16;
	redefine_ok("rate", &l2);
	/* The arrival time T0 + 5 x W / 10 never moves earlier; the new
	 * burst, 5 x W / 20, admits one more use W / 20 after that time less
	 * the burst. */
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 0);
	g.clk.now = T0 + 5 * (W / 10) - 5 * (W / 20) + W / 20 - 1;
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 0);
	g.clk.now++;
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 1);
	assert_int_equal(shmt_try_use(g.h, "rate", "a", 1), 0);
	check_clean();
}

/*
 * A client with a limit of its own (a tier) is carried in buckets of its
 * own B'.  A tier of 100 on a class of 10 fills buckets of
 * B' = 100 / (15 - 10) = 20; a new definition with buckets of 1 (20 of
 * them, 10 for the uses) gives it B' = 10, so its 100 uses in flight fit
 * (in buckets of the class's 1 they would not).
 */
static void
test_tier(void **state)
{
	shmt_client_rule_t r = { .kind = SHMT_RULE_LIMIT, .limit = 100 };
	shmt_limit_t l = pc_limit(10, W, 16);

	(void)state;
	assert_int_equal(shmt_client_set(g.h, "pc", "big", 3, &r), 0);
	assert_int_equal(burst("big", 300), 100);
	l.slack_uses = 1;
	redefine_ok("pc", &l);
	assert_int_equal(burst("big", 50), 0);
	assert_int_equal(burst("c", 50), 10);
	g.clk.now += W + S;
	assert_int_equal(burst("big", 300), 100);
	check_clean();
}

/* A process that opened the segment before the change follows to the new
 * generation on its next call and decides with the new definition. */
static void
test_follow(void **state)
{
	shmt_limit_t l = pc_limit(4, W, 16);
	int go[2], ready[2], status;
	pid_t pid;
	char b;

	(void)state;
	assert_int_equal(burst("a", 6), 6);
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	if ((pid = fork()) == 0) {
		struct tu_clock clk = { T0 + 20 };
		shmt_limiter_stat_t st;
		shmt_t *h;
		int bad = 0;

		if (shmt_open(g.seg, &h) != 0 ||
		    shmt_set_clock(h, tu_clock_read, &clk) != 0)
			_exit(10);
		bad |= shmt_try_use(h, "pc", "b", 1) != 1;
		if (write(ready[1], "r", 1) != 1 || read(go[0], &b, 1) != 1)
			_exit(11);
		/* a holds 6, more than its new 4; b 1 of 4. */
		bad |= shmt_try_use(h, "pc", "a", 1) != 0;
		for (int i = 0; i < 3; i++)
			bad |= shmt_try_use(h, "pc", "b", 1) != 1;
		bad |= shmt_try_use(h, "pc", "b", 1) != 0;
		bad |= shmt_limiter_stat(h, "pc", &st) != 0 || st.limit != 4;
		shmt_close(h);
		_exit(bad ? 12 : 0);
	}
	assert_true(pid > 0);
	assert_int_equal(read(ready[0], &b, 1), 1);
	g.clk.now += 10;
	redefine_ok("pc", &l);
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(go[0]);
	close(go[1]);
	close(ready[0]);
	close(ready[1]);
	assert_int_equal(stat_of("pc").in_flight, 10);
}

/* ---- Key pools ---- */

static const char *pool2[] = { "k1", "k2" };

static shmt_limit_t
pool_limit(const char **keys, uint32_t nkeys, uint32_t per, uint64_t window)
{
	shmt_limit_t l = { .window_ns = window, .slack_ns = S, .slack_uses = 1,
		.nkeys = nkeys, .keys = keys, .uses_per_key = per };

	return l;
}

/* The next key name of pool "kp", or "" when throttled. */
static const char *
key(void)
{
	static char buf[32];
	int rc = shmt_next_key(g.h, "kp", buf, sizeof(buf));

	if (rc < 0)
		fail_msg("next_key: %s", shmt_strerror(rc));
	if (rc == 0)
		buf[0] = '\0';
	return buf;
}

static void
pool_define(uint64_t window)
{
	shmt_limit_t l = pool_limit(pool2, 2, 2, window);

	assert_int_equal(shmt_limiter_define(g.h, "kp", &l), 0);
}

/* A lowered uses_per_key: every name keeps its uses in flight, so the
 * pool refuses until they are released; names then come in grant order
 * from the first. */
static void
test_pool_lower(void **state)
{
	shmt_limit_t l = pool_limit(pool2, 2, 1, W);

	(void)state;
	pool_define(W);
	assert_string_equal(key(), "k1");
	assert_string_equal(key(), "k2");
	assert_string_equal(key(), "k1");
	g.clk.now += 10;
	redefine_ok("kp", &l);
	check_clean();
	assert_int_equal(stat_of("kp").limit, 2);
	assert_string_equal(key(), "");
	g.clk.now = T0 + S + W - 1;
	assert_string_equal(key(), "");
	g.clk.now = T0 + S + W;
	assert_string_equal(key(), "k1");
	assert_string_equal(key(), "k2");
	assert_string_equal(key(), "");
	check_clean();
}

/* A pool whose bucket serial is past 2^31 (2^32 buckets wrap, so any
 * serial comes): defined anew by a move, its new ring must still open
 * buckets.  Its zeroed slots read as serial 0, newer than such a tail by
 * their 32-bit difference, unless the move marks them released. */
static void
test_pool_high_serial(void **state)
{
	static const char *three[] = { "k1", "k2", "k3" };
	shmt_limit_t l = pool_limit(three, 3, 3, W);
	uint32_t tail = 0x90000000U;
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t w[2], nw[2];

	(void)state;
	pool_define(W);
	assert_int_equal(shmt__lim_lookup(g.h, "kp", &scratch, &v), 0);
	/* Idle, next bucket TAIL; every slot a bucket released long ago. */
	for (uint32_t s = tail - 2 * v->nb; s != tail - v->nb; s++) {
		v->ring[s % v->nb].r[0] = 1;
		v->ring[s % v->nb].r[1] = (uint64_t)s << 32;
	}
	shmt__load128(&v->lim->lm_w, w);
	nw[0] = 0;
	nw[1] = (uint64_t)tail << 32 | (w[1] & 0xffffU);
	assert_true(shmt__cas128(&v->lim->lm_w, w, nw));
	check_clean();
	assert_string_equal(key(), "k1");
	redefine_ok("kp", &l);
	for (int round = 0; round < 3; round++) {
		g.clk.now += S + W;
		for (int i = 0; i < 9; i++)
			assert_string_not_equal(key(), "");
		assert_string_equal(key(), "");
		check_clean();
	}
}

/* A raised uses_per_key and a name added: more at once, in grant order,
 * no name past its new uses per key (k1 and k2 hold two each). */
static void
test_pool_raise(void **state)
{
	static const char *three[] = { "k1", "k2", "k3" };
	shmt_limit_t l = pool_limit(three, 3, 3, W);

	(void)state;
	pool_define(W);
	for (int i = 0; i < 4; i++)
		assert_string_not_equal(key(), "");
	assert_string_equal(key(), "");
	redefine_ok("kp", &l);
	assert_string_equal(key(), "k1");
	assert_string_equal(key(), "k2");
	assert_string_equal(key(), "k3");
	assert_string_equal(key(), "");
	assert_int_equal(stat_of("kp").nkeys, 3);
	g.clk.now = T0 + S + W;
	for (int i = 0; i < 9; i++)
		assert_string_equal(key(), three[i % 3]);
	assert_string_equal(key(), "");
	check_clean();
}

/* A name removed: its use in flight stays counted until released, and is
 * never handed out again; the kept name keeps its use. */
static void
test_pool_remove(void **state)
{
	static const char *next[] = { "k3", "k2" };
	shmt_limit_t l = pool_limit(next, 2, 2, W);

	(void)state;
	pool_define(W);
	assert_string_equal(key(), "k1");
	assert_string_equal(key(), "k2");
	redefine_ok("kp", &l);
	assert_string_equal(key(), "k3");
	assert_string_equal(key(), "k2");
	assert_string_equal(key(), "");
	assert_int_equal(stat_of("kp").in_flight, 4);
	g.clk.now = T0 + S + W;
	assert_string_equal(key(), "k3");
	check_clean();
}

/* A widened window holds the pool's uses until grant + the new window; a
 * narrowed one keeps their old release times. */
static void
test_pool_windows(void **state)
{
	shmt_limit_t wide = pool_limit(pool2, 2, 2, 5 * W);
	shmt_limit_t narrow = pool_limit(pool2, 2, 2, W);

	(void)state;
	pool_define(W);
	for (int i = 0; i < 4; i++)
		assert_string_not_equal(key(), "");
	g.clk.now += 10;
	redefine_ok("kp", &wide);
	g.clk.now = T0 + S + W;
	assert_string_equal(key(), "");
	g.clk.now = T0 + 5 * W - 1;
	assert_string_equal(key(), "");
	g.clk.now = T0 + S + 5 * W;
	for (int i = 0; i < 4; i++)
		assert_string_not_equal(key(), "");
	/* Taken at T1 under the window of 5 W, then narrowed to W. */
	redefine_ok("kp", &narrow);
	check_clean();
	g.clk.now = T0 + S + 5 * W + S + W;
	assert_string_equal(key(), "");
	g.clk.now = T0 + S + 5 * W + S + 5 * W - 1;
	assert_string_equal(key(), "");
	g.clk.now = T0 + S + 5 * W + S + 5 * W;
	assert_string_equal(key(), "k1");
	check_clean();
}

/* A definition without names keeps the pool's. */
static void
test_pool_keep_names(void **state)
{
	shmt_limit_t l = pool_limit(NULL, 0, 3, W);

	(void)state;
	pool_define(W);
	assert_string_equal(key(), "k1");
	redefine_ok("kp", &l);
	assert_int_equal(stat_of("kp").nkeys, 2);
	assert_int_equal(stat_of("kp").limit, 6);
	for (int i = 0; i < 4; i++)
		assert_string_equal(key(), pool2[i % 2]);
	assert_string_equal(key(), "");
	check_clean();
}

/* Changes again and again take the arena's space of the storage they
 * replace: a limiter that grows and shrinks 60 times, with another one
 * defined after it, fits a 16 MiB arena that 60 new tables would not. */
static void
test_again(void **state)
{
	shmt_limit_t small = pc_limit(10, W, 1024), big = pc_limit(10, W, 2048);
	shmt_limit_t other = { .limit = 5, .window_ns = W, .slack_ns = S,
		.slack_uses = 1 };
	shmt_segment_stat_t ss;
	uint64_t used = 0;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "other", &other), 0);
	assert_int_equal(burst("a", 3), 3);
	for (int i = 0; i < 60; i++) {
		redefine_ok("pc", i % 2 ? &small : &big);
		assert_int_equal(shmt_segment_stat(g.h, &ss), 0);
		assert_string_equal(ss.regions[3].name, "arena");
		if (i == 1)
			used = ss.regions[3].used;
		if (i > 1)
			assert_true(ss.regions[3].used <= used);
	}
	assert_int_equal(stat_of("pc").in_flight, 3);
	assert_int_equal(burst("a", 10), 7);
	check_clean();
}

/* What the new segment cannot hold, or what cannot change, is refused
 * with a reason; the old generation stays, untouched. */
static void
test_refused(void **state)
{
	shmt_limit_t huge = pc_limit(10, W, 1U << 24);
	shmt_limit_t tiny = { .limit = 2, .window_ns = S, .slack_ns = S,
		.slack_uses = 1, .per_client = 1, .client_capacity = 16 };
	shmt_limit_t rate = { .mode = SHMT_MODE_GCRA, .limit = 10,
		.window_ns = W, .burst = 5, .per_client = 1,
		.client_capacity = 8 };
	shmt_limit_t shared = { .limit = 5, .window_ns = W, .slack_ns = S,
		.slack_uses = 1 };
	shmt_limit_t bad = pc_limit(10, W, 16);
	shmt_limit_t ok = pc_limit(10, W, 16);
	const char *keys[] = { "k1", "k2" };
	shmt_limit_t pool = { .limit = 0, .window_ns = W, .slack_ns = S,
		.slack_uses = 1, .nkeys = 2, .keys = keys, .uses_per_key = 2 };
	struct shmt__redef two[2] = { { "pc", &ok }, { "pc", &ok } };
	shmt_config_t c;
	shmt_t *before;
	char err[768];

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "shared", &shared), 0);
	assert_int_equal(shmt_limiter_define(g.h, "pool", &pool), 0);
	assert_int_equal(burst("a", 8), 8);
	before = shmt__gen_live(g.h);

	assert_int_equal(redefine("pc", &huge, err, sizeof(err)), -ENOSPC);
	assert_non_null(strstr(err, "arena"));
	assert_int_equal(redefine("pc", &tiny, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "holds 8 uses in flight"));
	assert_int_equal(redefine("pc", &rate, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "mode"));
	assert_int_equal(redefine("shared", &ok, err, sizeof(err)),
	    -EOPNOTSUPP);
	assert_int_equal(redefine("pool", &ok, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "key pool"));
	assert_int_equal(redefine("nope", &ok, err, sizeof(err)), -ENOENT);
	bad.slack_uses = 0;
	assert_int_equal(redefine("pc", &bad, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "slack_uses"));
	bad = ok;
	bad.per_client = 0;
	bad.client_capacity = 0;
	bad.client_overrides = 0;
	assert_int_equal(redefine("pc", &bad, err, sizeof(err)), -EINVAL);
	shmt__move_config(g.h, &c);
	assert_int_equal(shmt__move_redefine(g.h, &c, two, 2, tu_clock_read,
	    &g.clk, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "twice"));

	/* A damaged client word (more uses in flight than its buckets
	 * hold) is refused as damage, never carried. */
	{
		struct shmt_lview v;
		struct shmt_lim *lim;
		struct shmt_client *e = NULL;
		struct shmt_w w = { { 0, 0 } };
		uint32_t n, row;

		lim = shmt__rows(before, &n);
		row = shmt__row_named(lim, n, "pc");
		assert_true(row < n);
		assert_int_equal(shmt__view_fill(before, row, &lim[row], &v), 0);
		for (uint32_t i = 0; i < v.capacity && e == NULL; i++) {
			shmt__load128(&ce_at(&v, i)->ce_w, w.w);
			if (SHMT_W_INFLIGHT(w) == 8)
				e = ce_at(&v, i);
		}
		assert_non_null(e);
		w.w[0] += 1ULL << 32;
		shmt__store128(&e->ce_w, w.w);
		assert_int_equal(redefine("pc", &ok, err, sizeof(err)),
		    SHMT_ECORRUPT);
		w.w[0] -= 1ULL << 32;
		shmt__store128(&e->ce_w, w.w);
	}

	/* Untouched: the same generation, live, with its definition and
	 * its uses in flight. */
	assert_ptr_equal(shmt__gen_live(g.h), before);
	assert_int_equal(stat_of("pc").limit, 10);
	assert_int_equal(stat_of("pc").in_flight, 8);
	assert_int_equal(burst("a", 10), 2);
	check_clean();
}

/* Grants of shared limiter NAME in a row at the same instant, up to MAX
 * tries. */
static int
burst_shared(const char *name, int max)
{
	int n = 0, rc;

	while (n < max && (rc = shmt_try_use_key(g.h, name)) == 1)
		n++;
	if (rc < 0)
		fail_msg("try_use_key %s: %s", name, shmt_strerror(rc));
	return n;
}

/* A shared exact limiter given a limit above its log, by a move (WINDOW
 * the new window): the records of the uses in flight are carried into the
 * larger log, each held until max(its old release, its time + WINDOW). */
static void
exact_grow(uint64_t window)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 4,
		.window_ns = W };
	shmt_limit_t big = { .mode = SHMT_MODE_EXACT, .limit = 8,
		.window_ns = window };
	uint64_t t1 = T0 + 100, hold = window > W ? window : W;
	char why[256];

	assert_int_equal(shmt_limiter_define(g.h, "ex", &l), 0);
	g.clk.now = T0;
	assert_int_equal(burst_shared("ex", 2), 2);
	g.clk.now = t1;
	assert_int_equal(burst_shared("ex", 3), 2);
	/* In place, the log cannot hold 8. */
	assert_int_equal(shmt_limiter_update(g.h, "ex", &big, why,
	    sizeof(why)), -E2BIG);
	g.clk.now = T0 + 200;
	redefine_ok("ex", &big);
	assert_int_equal(stat_of("ex").limit, 8);
	assert_int_equal(stat_of("ex").window_ns, window);
	assert_int_equal(stat_of("ex").in_flight, 4);
	check_clean();
	/* Four more, then the four carried still count. */
	assert_int_equal(burst_shared("ex", 6), 4);
	/* The first two carried are held until T0 + hold, no sooner. */
	g.clk.now = T0 + hold - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now = T0 + hold;
	assert_int_equal(burst_shared("ex", 3), 2);
	g.clk.now = t1 + hold - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	/* Then the next two, and the third the four made after the change
	 * when the new window has released them (a narrower one). */
	g.clk.now = t1 + hold;
	assert_int_equal(burst_shared("ex", 3),
	    T0 + 200 + window > t1 + hold ? 2 : 3);
	/* The new limit holds: 8 in any window from here on. */
	g.clk.now += 4 * hold;
	assert_int_equal(burst_shared("ex", 10), 8);
	g.clk.now += window - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now += 1;
	assert_int_equal(burst_shared("ex", 10), 8);
	check_clean();
}

static void
test_exact_grow(void **state)
{
	(void)state;
	exact_grow(W);
}

static void
test_exact_grow_widen(void **state)
{
	(void)state;
	exact_grow(2 * W);
}

static void
test_exact_grow_narrow(void **state)
{
	(void)state;
	exact_grow(W / 2);
}

/* An exact limiter's log carried after an in-place change: a record it
 * holds longer (the change's hold) keeps that hold in the larger log. */
static void
test_exact_grow_held(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 4,
		.window_ns = 3 * W };
	shmt_limit_t mid = { .mode = SHMT_MODE_EXACT, .limit = 4,
		.window_ns = W };
	shmt_limit_t big = { .mode = SHMT_MODE_EXACT, .limit = 6,
		.window_ns = W };
	char why[256];

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "ex", &l), 0);
	g.clk.now = T0;
	assert_int_equal(burst_shared("ex", 2), 2);
	/* In place to window W: the two keep their hold of 3W. */
	assert_int_equal(shmt_limiter_update(g.h, "ex", &mid, why,
	    sizeof(why)), 0);
	g.clk.now = T0 + 10;
	assert_int_equal(burst_shared("ex", 1), 1);
	redefine_ok("ex", &big);
	check_clean();
	assert_int_equal(burst_shared("ex", 6), 3);
	/* The log is first in, first out: the next grant waits for the
	 * first record, held until T0 + 3W, though the new window alone
	 * would release it at T0 + W.  The third use, the in-place change's
	 * grant n (held as an old one, exact.c), keeps its hold too: until
	 * T0 + 10 + 3W; then the three made after the move are due. */
	g.clk.now = T0 + 10 + W;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now = T0 + 3 * W - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now = T0 + 3 * W;
	assert_int_equal(burst_shared("ex", 8), 2);
	g.clk.now = T0 + 10 + 3 * W - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now = T0 + 10 + 3 * W;
	assert_int_equal(burst_shared("ex", 8), 4);
	check_clean();
}

/* A shared exact limiter into rate mode by a move: the uses in flight
 * give the arrival time max(now + n x T', the latest old release). */
static void
test_exact_to_rate(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 4,
		.window_ns = W };
	/* T' = W / 10, D' = 5 T': the latest release T0 + 100 + W wins
	 * over now + 3 T'. */
	shmt_limit_t r1 = { .mode = SHMT_MODE_GCRA, .limit = 10,
		.window_ns = W, .burst = 5 };
	uint64_t T = W / 10, tat = T0 + 100 + W;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "ex", &l), 0);
	g.clk.now = T0;
	assert_int_equal(burst_shared("ex", 2), 2);
	g.clk.now = T0 + 100;
	assert_int_equal(burst_shared("ex", 1), 1);
	g.clk.now = T0 + 200;
	redefine_ok("ex", &r1);
	assert_int_equal(stat_of("ex").mode, SHMT_MODE_GCRA);
	assert_int_equal(stat_of("ex").in_flight, div_up(tat - g.clk.now, T));
	check_clean();
	/* Granted when TAT + T' - D' <= now. */
	g.clk.now = tat - 4 * T - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now = tat - 4 * T;
	assert_int_equal(burst_shared("ex", 3), 1);
	/* The new rate from here on: one per T'. */
	g.clk.now += T - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now += 1;
	assert_int_equal(burst_shared("ex", 3), 1);
	check_clean();
}

/* Into rate mode with the uses in flight at the new interval later than
 * their old releases: now + n x T'. */
static void
test_exact_to_rate_slow(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 4,
		.window_ns = W };
	shmt_limit_t r1 = { .mode = SHMT_MODE_GCRA, .limit = 2,
		.window_ns = 2 * W, .burst = 1 };
	uint64_t now = T0 + 200, tat = now + 3 * W;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "ex", &l), 0);
	g.clk.now = T0;
	assert_int_equal(burst_shared("ex", 3), 3);
	g.clk.now = now;
	redefine_ok("ex", &r1);
	assert_int_equal(stat_of("ex").in_flight, 3);
	g.clk.now = tat - 1;
	assert_int_equal(burst_shared("ex", 1), 0);
	g.clk.now = tat;
	assert_int_equal(burst_shared("ex", 3), 1);
	check_clean();
}

/* A shared buckets limiter into rate mode: the arrival time is its uses'
 * release (the exact retry_after_ns of a full limiter before the move)
 * when that is later than now + n x T'. */
static void
test_buckets_to_rate(void **state)
{
	shmt_limit_t l = { .limit = 3, .window_ns = W, .slack_ns = S,
		.slack_uses = 3 };
	shmt_limit_t r1 = { .mode = SHMT_MODE_GCRA, .limit = 10,
		.window_ns = W, .burst = 5 };
	uint64_t T = W / 10, tat;
	shmt_decision_t d;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "sb", &l), 0);
	g.clk.now = T0 + 100;
	assert_int_equal(burst_shared("sb", 4), 3);
	g.clk.now = T0 + 200;
	assert_true(shmt_peek(g.h, "sb", NULL, 0, 1, &d) >= 0);
	assert_int_equal(d.granted, 0);
	tat = g.clk.now + d.retry_after_ns;
	assert_true(tat > g.clk.now + 3 * T);
	redefine_ok("sb", &r1);
	assert_int_equal(stat_of("sb").mode, SHMT_MODE_GCRA);
	assert_int_equal(stat_of("sb").in_flight, div_up(tat - g.clk.now, T));
	check_clean();
	g.clk.now = tat - 4 * T - 1;
	assert_int_equal(burst_shared("sb", 1), 0);
	g.clk.now = tat - 4 * T;
	assert_int_equal(burst_shared("sb", 3), 1);
	check_clean();
}

/* A shared limiter's mode does not change by a move. */
static void
test_exact_refused(void **state)
{
	shmt_limit_t l = { .mode = SHMT_MODE_EXACT, .limit = 4,
		.window_ns = W };
	shmt_limit_t b = { .limit = 8, .window_ns = W, .slack_ns = S,
		.slack_uses = 1 };
	char err[768];

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "ex", &l), 0);
	assert_int_equal(burst_shared("ex", 2), 2);
	assert_int_equal(redefine("ex", &b, err, sizeof(err)), -EOPNOTSUPP);
	assert_non_null(strstr(err, "mode"));
	assert_int_equal(stat_of("ex").in_flight, 2);
	check_clean();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tier, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_lower, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_raise, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_client_high_serial, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_widen, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_narrow, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_narrow_restored, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_rate_restored_behind,
		    rd_setup, rd_teardown),
		cmocka_unit_test_setup_teardown(test_narrow_restored_behind,
		    rd_setup, rd_teardown),
		cmocka_unit_test_setup_teardown(test_capacity, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_overrides, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_rate, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_follow, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_pool_lower, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_pool_raise, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_pool_high_serial, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_pool_remove, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_pool_windows, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_pool_keep_names, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_again, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_refused, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_grow, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_grow_widen, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_grow_narrow,
		    rd_setup, rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_grow_held, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_refused, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_to_rate, rd_setup,
		    rd_teardown),
		cmocka_unit_test_setup_teardown(test_exact_to_rate_slow,
		    rd_setup, rd_teardown),
		cmocka_unit_test_setup_teardown(test_buckets_to_rate, rd_setup,
		    rd_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, tu_sweep);
}
