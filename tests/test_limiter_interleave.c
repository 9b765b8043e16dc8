/* SPDX-License-Identifier: MIT */
/*
 * Chosen interleavings, made deterministic through the injected clock: a
 * call reads its clock after it has read the limiter's state, so a clock
 * function that runs other calls (on other handles of the same segment)
 * before it returns places those calls exactly between this call's read of
 * the state and its decision, as a preempted process would see them.  The
 * answers must still be those of the seed's algorithm on the order in which
 * the decisions took effect, and never an error.
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>

struct il_clock {
	shmt_time_t now;         /* what this handle's clock returns */
	unsigned reads;          /* clock reads so far */
	void (*hook)(struct il_clock *c, unsigned read);
	void *ctx;
};

static shmt_time_t
il_clock_read(void *p)
{
	struct il_clock *c = p;

	c->reads++;
	if (c->hook != NULL)
		c->hook(c, c->reads);
	return c->now;
}

struct il_env {
	char seg[96];
	shmt_t *x, *y;           /* x: the interrupted caller; y: the others */
	struct il_clock xclk;
	struct tu_clock yclk;
	int yrc[4];              /* results of y's calls inside the hook */
	unsigned fired;
	struct tl_throttle m;    /* the seed's answers, where a test needs them */
};

/* The environment of the running test, static so that the teardown can
 * clean up after an assertion ended the test early. */
static struct il_env il_env_g;
static struct il_env *il_cur;

static void
il_setup(struct il_env *e, const shmt_limit_t *lim)
{
	memset(e, 0, sizeof(*e));
	il_cur = e;
	tu_segname(e->seg, sizeof(e->seg), "ilv");
	assert_int_equal(shmt_create(e->seg, NULL, &e->x), 0);
	assert_int_equal(shmt_open(e->seg, &e->y), 0);
	e->xclk.ctx = e;
	assert_int_equal(shmt_set_clock(e->x, il_clock_read, &e->xclk), 0);
	assert_int_equal(shmt_set_clock(e->y, tu_clock_read, &e->yclk), 0);
	assert_int_equal(shmt_limiter_define(e->x, "l", lim), 0);
}

static int
il_teardown(void **state)
{
	struct il_env *e = il_cur;

	if (e == NULL)
		return 0;
	il_cur = NULL;
	tl_throttle_free(&e->m);
	shmt_close(e->y);
	shmt_close(e->x);
	return shmt_unlink(e->seg) == 0 ? 0 : -1;
}

static int
il_y_use(struct il_env *e, shmt_time_t t)
{
	e->yclk.now = t;
	return shmt_try_use_key(e->y, "l");
}

/*
 * The ring wraps while x is between reading W and reading the slot W names:
 * limit 1, window = slack = 100, so two buckets.  y takes the use at 0; x
 * reads W (bucket 0 active); y then takes a use at 200 (bucket 1) and at
 * 400 (bucket 2, in bucket 0's slot); x's clock says 400.  The limit is
 * taken (by y at 400): x must be throttled, not told the segment is corrupt.
 */
static void
il_wrap_hook(struct il_clock *c, unsigned read)
{
	struct il_env *e = c->ctx;

	if (read != 1)
		return;
	e->fired++;
	e->yrc[0] = il_y_use(e, 200);
	e->yrc[1] = il_y_use(e, 400);
}

static void
test_ring_wraps_under_a_stale_word(void **state)
{
	shmt_limit_t lim = { .limit = 1, .window_ns = 100, .slack_ns = 100,
		.slack_uses = 1 };
	shmt_limiter_stat_t st;
	struct il_env *e = &il_env_g;
	int rc;

	il_setup(e, &lim);
	assert_int_equal(il_y_use(e, 0), 1);
	e->xclk.now = 400;
	e->xclk.hook = il_wrap_hook;
	rc = shmt_try_use_key(e->x, "l");
	e->xclk.hook = NULL;
	assert_int_equal(e->fired, 1);
	assert_int_equal(e->yrc[0], 1);
	assert_int_equal(e->yrc[1], 1);
	if (rc < 0)
		fail_msg("x got %d (%s) instead of 0", rc, shmt_strerror(rc));
	assert_int_equal(rc, 0);
	assert_int_equal(shmt_limiter_stat(e->x, "l", &st), 0);
	assert_int_equal(st.in_flight, 1);
}

/*
 * A stale opener: x reads W (bucket 0 active, one use, closes at 10), y
 * grants into bucket 0 at 5, x's clock says 10 so x seals bucket 0 and opens
 * bucket 1 (close 20) in its slot, then x's CAS fails.  Before x reads its
 * clock again, y calls at 20: bucket 1's slot says it closed at 20, so y
 * skips serial 1.  The skip must keep bucket 0 (two uses) on the books.
 * Order of decisions: y@0, y@5, y@20, x@20: all granted by the seed (limit
 * 4, slack_uses 3), and all four uses come back after window + slack.
 */
static void
il_skip_hook(struct il_clock *c, unsigned read)
{
	struct il_env *e = c->ctx;

	if (read == 1) {
		e->fired++;
		e->yrc[0] = il_y_use(e, 5);
		c->now = 10;
	} else if (read == 2) {
		e->fired++;
		e->yrc[1] = il_y_use(e, 20);
		c->now = 20;
	}
}

static void
test_stale_opener_skip(void **state)
{
	shmt_limit_t lim = { .limit = 4, .window_ns = 100, .slack_ns = 10,
		.slack_uses = 3 };
	shmt_limiter_stat_t st;
	struct il_env *e = &il_env_g;
	struct tl_throttle *m = &e->m;
	int rc, i;

	il_setup(e, &lim);
	assert_int_equal(tl_throttle_init(m, 4, 100, 10, 3), 0);
	assert_int_equal(il_y_use(e, 0), 1);
	e->xclk.now = 10;
	e->xclk.hook = il_skip_hook;
	rc = shmt_try_use_key(e->x, "l");
	e->xclk.hook = NULL;
	assert_int_equal(e->fired, 2);
	assert_int_equal(tl_throttle_try(m, 0), 1);
	assert_int_equal(tl_throttle_try(m, 5), 1);
	assert_int_equal(tl_throttle_try(m, 20), 1);
	assert_int_equal(tl_throttle_try(m, 20), 1);
	if (e->yrc[0] != 1 || e->yrc[1] != 1 || rc != 1)
		fail_msg("y@5 %d, y@20 %d (%s), x@20 %d (%s): the seed "
		    "grants all three", e->yrc[0], e->yrc[1],
		    shmt_strerror(e->yrc[1]), rc, shmt_strerror(rc));
	assert_int_equal(shmt_limiter_stat(e->x, "l", &st), 0);
	assert_int_equal(st.in_flight, 4);
	/* Everything is due by 20 + slack + window: all four uses again. */
	e->yclk.now = 200;
	for (i = 0; i < 4; i++)
		assert_int_equal(shmt_try_use_key(e->y, "l"), 1);
	assert_int_equal(shmt_try_use_key(e->y, "l"), 0);
}

/*
 * Exact mode: x reads the next grant number and its log slot at 100, then
 * y grants at 100 and 150 (limit 2, window 100) before x's clock says 150.
 * Both uses of the window [100, 200) are taken: x must be throttled.
 */
static void
il_exact_hook(struct il_clock *c, unsigned read)
{
	struct il_env *e = c->ctx;

	if (read != 1)
		return;
	e->fired++;
	e->yrc[0] = il_y_use(e, 100);
	e->yrc[1] = il_y_use(e, 150);
}

static void
test_exact_overtaken(void **state)
{
	shmt_limit_t lim = { .limit = 2, .window_ns = 100,
		.mode = SHMT_MODE_EXACT };
	struct il_env *e = &il_env_g;
	int rc;

	il_setup(e, &lim);
	assert_int_equal(il_y_use(e, 0), 1);
	assert_int_equal(il_y_use(e, 0), 1);
	e->xclk.now = 150;
	e->xclk.hook = il_exact_hook;
	rc = shmt_try_use_key(e->x, "l");
	e->xclk.hook = NULL;
	assert_int_equal(e->fired, 1);
	assert_int_equal(e->yrc[0], 1);
	assert_int_equal(e->yrc[1], 1);
	assert_int_equal(rc, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_ring_wraps_under_a_stale_word,
		    il_teardown),
		cmocka_unit_test_teardown(test_stale_opener_skip, il_teardown),
		cmocka_unit_test_teardown(test_exact_overtaken, il_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
