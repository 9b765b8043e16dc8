/* SPDX-License-Identifier: MIT */
/*
 * Upgrades (lib/migrate.c): the snapshots of a segment of ABI 6, 7, 8 and
 * 9 in tests/data/abi6.snap.zr, abi7.snap.zr, abi8.snap.zr and
 * abi9.snap.zr, made by those versions' daemons and CLIs (see
 * tests/data/README.md), rewritten in this format and restored; their
 * segments (abi6.seg.zr to abi9.seg.zr) migrated in place, on the
 * fixtures' clock.  Every test runs on the fixtures of the four versions.  Every limiter comes back with
 * its uses in flight (they deny until their release time, then grant, on
 * an injected clock), every client entry, key pool cursor, dictionary
 * item, counter and the analyzer's summaries (rewritten in this format's
 * layout: the key read twice is listed).
 * A damaged old image (truncated, bytes flipped, or fields of its header,
 * rows, arena and sections set out of range and the checksums made right
 * again: seeded mutations) gives an error and never a crash; what passes
 * the migration is restored, checked and used without one.
 */
#include "daemon.h"
#include "image.h"
#include "limiter.h"
#include "proc.h"
#include "segment.h"
#include "store.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000ULL

/* A limiter row of ABI 6 or ABI 7: 1280 bytes in both (lib/migrate.c). */
#define ROW6 1280U
#define HDR_REGION 640U         /* the segment header's region */

/* The fixtures of one older format (tests/data/README.md). */
struct fx {
	int abi;
	const char *snap, *seg, *modes;
	uint32_t name_off;      /* lm_name in its limiter row */
	uint32_t w_off;         /* lm_w in its limiter row */
};

static const struct fx fx6 = {
	6, SHMT_TEST_DATA "/abi6.snap.zr", SHMT_TEST_DATA "/abi6.seg.zr",
	SHMT_TEST_DATA "/abi6-modes.snap.zr", 112, 384,
};
static const struct fx fx7 = {
	7, SHMT_TEST_DATA "/abi7.snap.zr", SHMT_TEST_DATA "/abi7.seg.zr",
	SHMT_TEST_DATA "/abi7-modes.snap.zr", 128, 384,
};
static const struct fx fx8 = {
	8, SHMT_TEST_DATA "/abi8.snap.zr", SHMT_TEST_DATA "/abi8.seg.zr",
	SHMT_TEST_DATA "/abi8-modes.snap.zr", 128, 384,
};
static const struct fx fx9 = {
	9, SHMT_TEST_DATA "/abi9.snap.zr", SHMT_TEST_DATA "/abi9.seg.zr",
	SHMT_TEST_DATA "/abi9-modes.snap.zr", 128, 384,
};

static unsigned char *
load(const struct fx *f, size_t *len)
{
	unsigned char *img = tu_zr_load(f->snap, len);

	assert_int_equal(shmt__image_abi(img, *len), f->abi);
	return img;
}

/* The seed of the seeded test NAME for fixture F (ABI 6's is NAME's own). */
static uint64_t
fx_seed(const struct fx *f, const char *name)
{
	char full[96];

	if (f->abi == 6)
		snprintf(full, sizeof(full), "%s", name);
	else
		snprintf(full, sizeof(full), "%s_abi%d", name, f->abi);
	return tu_seed(full);
}

/* The image's own clocks and boot: a restore "on the same boot", so no
 * time moves (delta 0) and the test's clock is the image's. */
static void
image_time(const unsigned char *img, struct shmt__host_time *t)
{
	struct img_hdr ih;

	memcpy(&ih, img, sizeof(ih));
	memset(t, 0, sizeof(*t));
	t->wall_ns = ih.ih_wall_ns;
	t->mono_ns = ih.ih_mono_ns;
	memcpy(t->boot_id, ih.ih_boot_id, sizeof(t->boot_id));
	t->boot_id[sizeof(t->boot_id) - 1] = '\0';
	if (t->boot_id[0] == '\0')
		strcpy(t->boot_id, "fixture");
}

static void
get_is(shmt_t *h, const char *key, const char *want)
{
	char buf[64];
	size_t n = 0;

	assert_int_equal(shmt_get(h, key, strlen(key), buf, sizeof(buf), &n), 0);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(buf, want, n);
}

/* Uses of limiter NAME granted (to CLIENT of a per-client one), one after
 * another until the first refusal, at most 10. */
static int
grants(shmt_t *h, const char *name, const char *client)
{
	int n = 0, rc;

	for (int i = 0; i < 10; i++) {
		rc = client != NULL ?
		    shmt_try_use(h, name, client, strlen(client)) :
		    shmt_try_use_key(h, name);
		assert_true(rc == 0 || rc == 1);
		n += rc;
		if (rc == 0)
			break;
	}
	return n;
}

/* Every item, counter, limiter and use in flight of the fixture, in the
 * migrated segment H, whose clock CLK is T0 (the fixture's time) plus a
 * second; the uses deny until their release time, then grant. */
static void
check_migrated(shmt_t *h, struct tu_clock *clk, uint64_t t0)
{
	shmt_limiter_stat_t st;
	shmt_hotkey_t top[8];
	char key[16];
	uint64_t c = 0;
	int64_t v = 0;
	int n, found = 0;

	assert_int_equal(shmt_check(h, NULL, NULL), 0);

	/* The dictionary and the counters. */
	get_is(h, "user:1", "alice");
	get_is(h, "user:2", "bob");
	get_is(h, "session:abc", "v3");
	assert_int_equal(shmt_incr(h, "n", 1, 1, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(shmt_count(h, "page:/home", 10, 0, &c), 0);
	assert_int_equal(c, 5);
	assert_int_equal(shmt_count(h, "page:/about", 11, 0, &c), 0);
	assert_int_equal(c, 1);

	/* The analyzer's summaries: the two gets of user:1 (before this
	 * test's own gets, which it counts too). */
	n = shmt_top_keys(h, top, 8, NULL);
	assert_true(n >= 1);
	for (int i = 0; i < n && i < 8; i++)
		if (top[i].kept == 6 && memcmp(top[i].key, "user:1", 6) == 0) {
			assert_true(top[i].lower >= 2);
			found = 1;
		}
	assert_true(found);

	/* The shared limiter: 3 uses in flight of 10. */
	assert_int_equal(shmt_limiter_stat(h, "api", &st), 0);
	assert_int_equal(st.in_flight, 3);
	assert_int_equal(grants(h, "api", NULL), 7);
	/* The key pool: 3 of 6 in flight, its cursor after gamma. */
	assert_int_equal(shmt_next_key(h, "keys", key, sizeof(key)), 5);
	assert_string_equal(key, "alpha");
	assert_int_equal(shmt_next_key(h, "keys", key, sizeof(key)), 4);
	assert_string_equal(key, "beta");
	assert_int_equal(shmt_next_key(h, "keys", key, sizeof(key)), 5);
	assert_string_equal(key, "gamma");
	assert_int_equal(shmt_next_key(h, "keys", key, sizeof(key)), 0);
	/* The per-client limiter: its clients and their uses (3 each). */
	assert_int_equal(shmt_limiter_stat(h, "per-ip", &st), 0);
	assert_int_equal(st.clients_in_use, 3);
	assert_int_equal(st.in_flight, 4);
	assert_int_equal(grants(h, "per-ip", "10.0.0.1"), 1);
	assert_int_equal(grants(h, "per-ip",
	    "client-with-a-long-identifier-0123456789"), 2);
	assert_int_equal(grants(h, "per-ip", "192.168.100.200"), 2);
	assert_int_equal(grants(h, "per-ip", "10.9.9.9"), 3);
	/* The long id's entry keeps its length and its first 16 bytes. */
	{
		struct shmt_lim *r = tu_row_of(h, "per-ip");
		char *a = tu_arena(h);
		int seen = 0;

		assert_non_null(r);
		for (uint32_t i = 0; i < r->lm_capacity; i++) {
			struct shmt_client *e = (struct shmt_client *)(void *)
			    (a + r->lm_clients_off + (uint64_t)i * r->lm_entsize);

			if (e->ce_idlen != 40)
				continue;
			assert_memory_equal(e->ce_id, "client-with-a-lo", 16);
			assert_int_equal(e->ce_rule, 0);
			seen++;
		}
		assert_int_equal(seen, 1);
	}

	/* The old uses still deny an hour on (they were taken less than a
	 * minute before the fixture's time, for 66 minutes)... */
	clk->now = t0 + 3700 * SEC;
	assert_int_equal(shmt_try_use_key(h, "api"), 0);
	assert_int_equal(grants(h, "per-ip", "10.0.0.1"), 0);
	assert_int_equal(shmt_next_key(h, "keys", key, sizeof(key)), 0);
	/* ...and are all back two hours on. */
	clk->now = t0 + 7200 * SEC;
	assert_int_equal(grants(h, "api", NULL), 10);
	assert_int_equal(grants(h, "per-ip", "10.0.0.1"), 3);
	assert_int_equal(grants(h, "per-ip",
	    "client-with-a-long-identifier-0123456789"), 3);
	for (int i = 0; i < 6; i++)
		assert_true(shmt_next_key(h, "keys", key, sizeof(key)) > 0);
	assert_int_equal(shmt_next_key(h, "keys", key, sizeof(key)), 0);
	/* The new format's own parts work on the migrated limiter. */
	assert_int_equal(shmt_client_set(h, "per-ip", "10.0.0.7", 8,
	    &(shmt_client_rule_t){ .kind = SHMT_RULE_DENY }), 0);
	assert_int_equal(shmt_try_use(h, "per-ip", "10.0.0.7", 8), 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
}

/* What the migration of the fixture F reports. */
static void
check_report(const struct fx *f, const struct shmt__migration *m)
{
	char note[768], want[64];

	shmt__migration_text(m, note, sizeof(note));
	printf("# %s\n", note);
	assert_int_equal(m->from_abi, f->abi);
	snprintf(want, sizeof(want), "from segment format ABI %d to ABI %u:",
	    f->abi, (unsigned)SHMT_ABI_VERSION);
	assert_non_null(strstr(note, want));
	assert_int_equal(m->limiters, 3);
	assert_int_equal(m->inflight, 10);    /* 3 api, 3 keys, 4 per-ip */
	assert_int_equal(m->clients, 3);
	assert_int_equal(m->dict_items, 4);
	assert_int_equal(m->counters, 2);
	assert_int_equal(m->analyzer, 1);
	assert_int_equal(m->deleted, 0);
}

static void
test_migrate_fixture(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct tu_clock clk;
	unsigned char *img, *img7;
	size_t len, len7;
	char err[640], seg[96];
	const struct fx *f = *state;
	shmt_t *h;

	img = load(f, &len);
	err[0] = '\0';
	if (shmt__image_migrate(img, len, &img7, &len7, &m, err,
	    sizeof(err)) != 0)
		fail_msg("migrate: %s", err);
	check_report(f, &m);
	assert_int_equal(shmt__image_abi(img7, len7), SHMT_ABI_VERSION);

	/* Restored on the image's own clock, one second after it. */
	image_time(img, &now);
	clk.now = now.mono_ns + SEC;
	tu_segname(seg, sizeof(seg), "mig");
	if (shmt__image_restore(img7, len7, seg, &now, tu_clock_read, &clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img7);
	free(img);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	check_migrated(h, &clk, now.mono_ns);
	tu_close_unlink(h, seg);
}

/* The other modes (tests/data/abi6-modes.snap.zr, abi7-modes.snap.zr):
 * rate mode shared and per client, exact mode, a shadow limiter, a deleted
 * one. */
static void
test_migrate_modes(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct tu_clock clk;
	shmt_limiter_stat_t st;
	unsigned char *img, *img7;
	size_t len, len7;
	char err[640], seg[96];
	shmt_limit_t l = { .limit = 3, .window_ns = 60 * SEC,
		.slack_ns = 6 * SEC, .slack_uses = 1 };
	const struct fx *f = *state;
	shmt_t *h;

	img = tu_zr_load(f->modes, &len);
	if (shmt__image_migrate(img, len, &img7, &len7, &m, err,
	    sizeof(err)) != 0)
		fail_msg("migrate: %s", err);
	assert_int_equal(m.from_abi, f->abi);
	assert_int_equal(m.limiters, 4);
	assert_int_equal(m.deleted, 1);
	assert_int_equal(m.clients, 1);
	assert_int_equal(m.inflight, 2);        /* the shadow limiter's */
	assert_int_equal(m.analyzer, 0);
	image_time(img, &now);
	clk.now = now.mono_ns + SEC;
	tu_segname(seg, sizeof(seg), "mig-m");
	if (shmt__image_restore(img7, len7, seg, &now, tu_clock_read, &clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(img7);
	free(img);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);

	/* Rate mode, burst 3, 4 an hour: 2 taken, 1 left. */
	assert_int_equal(grants(h, "rate", NULL), 1);
	/* Per client, burst 2: alice took 1. */
	assert_int_equal(grants(h, "rate-pc", "alice"), 1);
	assert_int_equal(grants(h, "rate-pc", "bob"), 2);
	/* Exact mode, 5 an hour: 3 taken. */
	assert_int_equal(grants(h, "exact", NULL), 2);
	/* Shadow: granted, and its "would deny" count goes on from 1. */
	assert_int_equal(shmt_try_use_key(h, "shadow"), 1);
	assert_int_equal(shmt_limiter_stat(h, "shadow", &st), 0);
	assert_int_equal(st.would_deny, 2);
	/* The deleted limiter is gone, and its name can be defined again. */
	assert_int_equal(shmt_limiter_stat(h, "gone", &st), -ENOENT);
	assert_int_equal(shmt_limiter_define(h, "gone", &l), 0);
	assert_int_equal(grants(h, "gone", NULL), 3);
	/* Two hours on, everything is back. */
	clk.now = now.mono_ns + 7200 * SEC;
	assert_int_equal(grants(h, "rate", NULL), 3);
	assert_int_equal(grants(h, "rate-pc", "alice"), 2);
	assert_int_equal(grants(h, "exact", NULL), 5);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	tu_close_unlink(h, seg);
}

/* Make the image's checksums right again after a change of its bytes. */
static void
reseal(unsigned char *img, size_t len)
{
	struct img_hdr ih;

	memcpy(&ih, img, sizeof(ih));
	ih.ih_size = len - sizeof(ih);
	ih.ih_sum = shmt__fnv1a_words(SHMT_FNV_INIT, img + sizeof(ih),
	    ih.ih_size);
	ih.ih_hdr_sum = shmt__fnv1a(SHMT_FNV_INIT, &ih,
	    offsetof(struct img_hdr, ih_hdr_sum));
	memcpy(img, &ih, sizeof(ih));
}

/* A row a definition left half built (BUILDING: its definer killed) is
 * dropped, the rows after it carried; a deleted row keeps its name. */
static void
test_migrate_half_built(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct tu_clock clk;
	shmt_limiter_stat_t st;
	unsigned char *img, *out = NULL;
	size_t len, outlen = 0;
	uint32_t building = SHMT_LIM_BUILDING;
	char err[640], seg[96];
	const struct fx *f = *state;
	shmt_t *h;

	img = load(f, &len);
	/* Row 0 is "api". */
	assert_string_equal((char *)img + SHMT_IMAGE_HDR_BYTES + HDR_REGION +
	    f->name_off, "api");
	memcpy(img + SHMT_IMAGE_HDR_BYTES + HDR_REGION, &building,
	    sizeof(building));
	reseal(img, len);
	if (shmt__image_migrate(img, len, &out, &outlen, &m, err,
	    sizeof(err)) != 0)
		fail_msg("migrate: %s", err);
	assert_int_equal(m.dropped, 1);
	assert_int_equal(m.limiters, 2);
	assert_int_equal(m.inflight, 7);        /* 3 keys, 4 per-ip */
	image_time(img, &now);
	clk.now = now.mono_ns + SEC;
	tu_segname(seg, sizeof(seg), "mig-hb");
	if (shmt__image_restore(out, outlen, seg, &now, tu_clock_read, &clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(out);
	free(img);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	assert_int_equal(shmt_limiter_stat(h, "api", &st), -ENOENT);
	assert_int_equal(shmt_limiter_stat(h, "per-ip", &st), 0);
	assert_int_equal(st.in_flight, 4);
	assert_int_equal(grants(h, "per-ip", "10.0.0.1"), 1);
	tu_close_unlink(h, seg);
}

/* ABI 7's rows are carried as they are, their override table with them:
 * a table outside the arena, none for a per-client row, or one over its
 * clients, is refused by the migration itself (right checksums). */
static void
test_migrate_abi7_overrides(void **state)
{
	struct shmt__migration m;
	unsigned char *img, *work, *out = NULL;
	size_t len, outlen = 0;
	uint64_t far = 1ULL << 40;
	uint32_t cap0 = 0;
	unsigned char *row = NULL;
	char err[640];
	int rc;

	(void)state;
	img = load(&fx7, &len);
	work = malloc(len);
	assert_non_null(work);
	for (uint32_t r = 0; r < 8; r++)
		if (strcmp((char *)img + SHMT_IMAGE_HDR_BYTES + HDR_REGION +
		    (uint64_t)r * ROW6 + fx7.name_off, "per-ip") == 0)
			row = work + SHMT_IMAGE_HDR_BYTES + HDR_REGION +
			    (uint64_t)r * ROW6;
	assert_non_null(row);
	for (int k = 0; k < 3; k++) {
		memcpy(work, img, len);
		if (k == 0)
			memcpy(row + offsetof(struct shmt_lim, lm_ov_off), &far, 8);
		else if (k == 1)
			memcpy(row + offsetof(struct shmt_lim, lm_ov_cap), &cap0, 4);
		else
			memset(row + offsetof(struct shmt_lim, lm_ov_off), 0, 8);
		reseal(work, len);
		rc = shmt__image_migrate(work, len, &out, &outlen, &m, err,
		    sizeof(err));
		printf("# %d: %s\n", k, err);
		assert_int_equal(rc, SHMT_ECORRUPT);
		assert_null(out);
		assert_non_null(strstr(err, "limiter per-ip"));
	}
	free(work);
	free(img);
}

/* A shared rate limiter's word held its parameter generation alone in ABI
 * 6 and 7 (a bit above it was damage), and since ABI 8 those bits count
 * grants: an ABI 6 or 7 row whose word has them is refused, not read as a
 * count; the same row without them is carried with its grants.  An ABI 8
 * row's word counts its grants, and is carried as it is. */
static void
test_migrate_rate_word(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct tu_clock clk;
	shmt_limiter_stat_t st;
	unsigned char *img, *work, *out = NULL, *row = NULL;
	size_t len, outlen = 0;
	char err[640], seg[96];
	const struct fx *f = *state;
	uint64_t w1;
	shmt_t *h;
	int rc;

	img = tu_zr_load(f->modes, &len);
	work = malloc(len);
	assert_non_null(work);
	memcpy(work, img, len);
	for (uint32_t r = 0; r < 8; r++)
		if (strcmp((char *)work + SHMT_IMAGE_HDR_BYTES + HDR_REGION +
		    (uint64_t)r * ROW6 + f->name_off, "rate") == 0)
			row = work + SHMT_IMAGE_HDR_BYTES + HDR_REGION +
			    (uint64_t)r * ROW6;
	assert_non_null(row);
	memcpy(&w1, row + f->w_off + 8, 8);
	/* ABI 8: the fixture's two grants, in the word. */
	assert_int_equal(w1 >> 16, f->abi >= 8 ? 2 : 0);
	if (f->abi < 8) {
		w1 |= 5ULL << 16;
		memcpy(row + f->w_off + 8, &w1, 8);
		reseal(work, len);
		rc = shmt__image_migrate(work, len, &out, &outlen, &m, err,
		    sizeof(err));
		printf("# %s\n", err);
		assert_int_equal(rc, SHMT_ECORRUPT);
		assert_null(out);
		assert_non_null(strstr(err, "limiter rate"));
		assert_non_null(strstr(err,
		    "more than a parameter generation"));
	}

	/* Untouched: the two grants of the fixture, counted by the row. */
	if (shmt__image_migrate(img, len, &out, &outlen, &m, err,
	    sizeof(err)) != 0)
		fail_msg("migrate: %s", err);
	image_time(img, &now);
	clk.now = now.mono_ns + SEC;
	tu_segname(seg, sizeof(seg), "mig-rw");
	if (shmt__image_restore(out, outlen, seg, &now, tu_clock_read, &clk,
	    err, sizeof(err)) != 0)
		fail_msg("restore: %s", err);
	free(out);
	free(work);
	free(img);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	assert_int_equal(shmt_limiter_stat(h, "rate", &st), 0);
	assert_int_equal(st.grants, 2);
	assert_int_equal(shmt_try_use_key(h, "rate"), 1);
	assert_int_equal(shmt_limiter_stat(h, "rate", &st), 0);
	assert_int_equal(st.grants, 3);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	tu_close_unlink(h, seg);
}

/* Not an older format: this format's own image, not an image, an empty
 * one. */
static void
test_migrate_refuses_others(void **state)
{
	struct shmt__migration m;
	unsigned char *img, *img7, *out = NULL;
	size_t len, len7, outlen = 0;
	char err[640];
	const struct fx *f = *state;

	img = load(f, &len);
	assert_int_equal(shmt__image_migrate(img, len, &img7, &len7, &m, err,
	    sizeof(err)), 0);
	assert_int_equal(shmt__image_migrate(img7, len7, &out, &outlen, &m,
	    err, sizeof(err)), SHMT_EFORMAT);
	assert_null(out);
	printf("# %s\n", err);
	/* Without the migration, the old image is refused as before. */
	{
		struct shmt__host_time now;
		char seg[96];

		image_time(img, &now);
		tu_segname(seg, sizeof(seg), "mig-r");
		assert_int_equal(shmt__image_restore(img, len, seg, &now, NULL,
		    NULL, err, sizeof(err)), SHMT_EFORMAT);
	}
	memset(img7, 'x', 8);
	assert_int_equal(shmt__image_abi(img7, len7), -1);
	assert_int_equal(shmt__image_migrate(img7, len7, &out, &outlen, &m,
	    err, sizeof(err)), SHMT_EMAGIC);
	assert_int_equal(shmt__image_migrate(img, 0, &out, &outlen, &m, err,
	    sizeof(err)), SHMT_ECORRUPT);
	assert_int_equal(shmt__image_migrate(img, len - 8, &out, &outlen, &m,
	    err, sizeof(err)), SHMT_ECORRUPT);
	assert_null(out);
	free(img7);
	free(img);
}

/* A value that is likely to hurt: 0, small, at or past a bound, huge. */
static uint64_t
nasty(uint64_t *rs, uint64_t near)
{
	switch (tu_rand(rs) % 8) {
	case 0: return 0;
	case 1: return tu_rand(rs) % 64;
	case 2: return near;
	case 3: return near + 16;
	case 4: return near - 16;
	case 5: return UINT64_MAX - tu_rand(rs) % 4096;
	case 6: return (uint64_t)1 << (tu_rand(rs) % 64);
	default: return tu_rand(rs);
	}
}

/* One seeded mutation of IMG (*LEN bytes, may shrink); 1 when it was
 * resealed (its checksums right), 0 when not. */
static int
mutate(uint64_t *rs, unsigned char *img, size_t *len, uint64_t arena)
{
	/* Fields of a row of ABI 6 or ABI 7 (offsets in the row) worth
	 * aiming at: the identity (the same up to byte 112), ABI 6's name
	 * (112) and ABI 7's override table (112, 120) and name (128), the
	 * state word. */
	static const struct { uint32_t off, size; } row_fields[] = {
		{ 0, 4 }, { 4, 4 }, { 8, 8 }, { 16, 8 }, { 24, 8 }, { 32, 8 },
		{ 40, 4 }, { 44, 4 }, { 48, 4 }, { 52, 4 }, { 56, 4 },
		{ 60, 4 }, { 64, 4 }, { 68, 4 }, { 72, 8 }, { 80, 8 },
		{ 88, 8 }, { 96, 8 }, { 104, 8 }, { 112, 8 }, { 120, 4 },
		{ 128, 8 }, { 168, 8 }, { 184, 8 }, { 384, 8 }, { 392, 8 },
	};
	unsigned char *body = img + SHMT_IMAGE_HDR_BYTES;
	uint64_t kind = tu_rand(rs) % 8, v, at;
	uint32_t r, f, sz;

	switch (kind) {
	case 0:         /* truncated */
		*len = tu_rand(rs) % *len;
		return 0;
	case 1:         /* bytes flipped, checksums left wrong */
		for (int i = 0; i < 1 + (int)(tu_rand(rs) % 4); i++)
			img[tu_rand(rs) % *len] ^= (unsigned char)(1 + tu_rand(rs) %
			    255);
		return 0;
	case 2:         /* a field of a limiter row (rows 0 to 2 are used) */
		r = (uint32_t)(tu_rand(rs) % 3);
		f = (uint32_t)(tu_rand(rs) % (sizeof(row_fields) /
		    sizeof(row_fields[0])));
		v = nasty(rs, arena);
		at = HDR_REGION + (uint64_t)r * ROW6 + row_fields[f].off;
		memcpy(body + at, &v, row_fields[f].size);
		break;
	case 3:         /* a word of the segment header */
		at = (tu_rand(rs) % (sizeof(struct shmt_hdr) / 8)) * 8;
		v = nasty(rs, arena);
		memcpy(body + at, &v, 8);
		break;
	case 4:         /* the image header's arena size */
		v = nasty(rs, arena);
		memcpy(img + offsetof(struct img_hdr, ih_arena_bytes), &v, 8);
		break;
	case 5:         /* a word of the arena (client entries, rings) */
		at = HDR_REGION + 8 * ROW6 + (tu_rand(rs) % (arena / 8)) * 8;
		v = nasty(rs, arena);
		memcpy(body + at, &v, 8);
		break;
	default:        /* any aligned word or bytes anywhere after the header */
		sz = tu_rand(rs) % 2 ? 8 : 4;
		at = (tu_rand(rs) % ((*len - SHMT_IMAGE_HDR_BYTES) / sz)) * sz;
		v = nasty(rs, arena);
		memcpy(body + at, &v, sz);
		break;
	}
	reseal(img, *len);
	return 1;
}

static void
test_migrate_hostile(void **state)
{
	const struct fx *f = *state;
	uint64_t seed = fx_seed(f, "test_migrate_hostile"), rs = seed;
	unsigned char *img, *work;
	size_t len;
	struct img_hdr ih;
	struct shmt__host_time now;
	struct tu_clock clk;
	char seg[96], err[640];
	int runs = (int)(600 * tu_scale()), refused = 0, sealed_refused = 0;
	int migrated = 0, restored = 0;

	img = load(f, &len);
	memcpy(&ih, img, sizeof(ih));
	image_time(img, &now);
	work = malloc(len);
	assert_non_null(work);
	tu_segname(seg, sizeof(seg), "mig-h");
	for (int i = 0; i < runs; i++) {
		struct shmt__migration m;
		unsigned char *out = NULL;
		size_t wlen = len, outlen = 0;
		int sealed, rc;
		shmt_t *h;

		memcpy(work, img, len);
		sealed = mutate(&rs, work, &wlen, ih.ih_arena_bytes);
		rc = shmt__image_migrate(work, wlen, &out, &outlen, &m, err,
		    sizeof(err));
		if (rc != 0) {
			assert_true(rc == SHMT_ECORRUPT || rc == SHMT_EFORMAT ||
			    rc == SHMT_EMAGIC);
			assert_null(out);
			refused++;
			sealed_refused += sealed;
			continue;
		}
		migrated++;
		/* What the migration let through, the restore checks; what
		 * both let through is a segment that works. */
		clk.now = now.mono_ns + SEC;
		shmt_unlink(seg);
		rc = shmt__image_restore(out, outlen, seg, &now, tu_clock_read,
		    &clk, err, sizeof(err));
		free(out);
		if (rc != 0)
			continue;
		restored++;
		assert_int_equal(shmt_open(seg, &h), 0);
		assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
		assert_true(shmt_check(h, NULL, NULL) >= 0);
		(void)shmt_try_use_key(h, "api");
		(void)shmt_try_use(h, "per-ip", "10.0.0.1", 8);
		(void)shmt_try_use_key(h, "keys");
		tu_close_unlink(h, seg);
	}
	printf("# seed %" PRIu64 ": %d mutations, %d refused by the "
	    "migration (%d of them with right checksums), %d migrated, %d "
	    "restored\n", seed, runs, refused, sealed_refused, migrated,
	    restored);
	/* The checks past the checksums were reached and refused some. */
	assert_true(sealed_refused > 0);
	assert_true(refused > 0);
	free(work);
	free(img);
}

/* ---- A segment of ABI 6 or ABI 7 in /dev/shm ------------------------------ */

/* Put the old segment of the fixture F under SEG (as the old daemon left
 * it); *SIZE gets its size. */
static void
seg_put(const struct fx *f, const char *seg, size_t *size)
{
	unsigned char *b = tu_zr_load(f->seg, size);
	int fd = shm_open(seg, O_RDWR | O_CREAT | O_EXCL, 0600);

	assert_true(fd >= 0);
	assert_true(write(fd, b, *size) == (ssize_t)*size);
	close(fd);
	free(b);
}

/* Map SEG as an old worker would (read-write, shared). */
static struct shmt_hdr *
seg_map(const char *seg, size_t size)
{
	int fd = shm_open(seg, O_RDWR, 0);
	void *p;

	assert_true(fd >= 0);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(p != MAP_FAILED);
	return p;
}

/* The clock of the migrations below: the fixture's, a second after it
 * stopped.  A live segment lies on the boot that made it; the fixture's
 * times are another machine's CLOCK_MONOTONIC, which this machine's may
 * not have reached (so the real clock would find its buckets in the
 * future, and the verdict would depend on this machine's uptime). */
static struct tu_clock seg_clk;

/* The fixture's clocks: the snapshot's, taken when the old daemon stopped
 * and left the segment as it is; seg_clk is set to it. */
static void
seg_time(const struct fx *f, struct shmt__host_time *now)
{
	size_t len;
	unsigned char *img = load(f, &len);

	image_time(img, now);
	free(img);
	seg_clk.now = now->mono_ns + SEC;
}

static uint32_t
state_of(const struct shmt_hdr *hdr)
{
	return __atomic_load_n(&hdr->sh_retired, __ATOMIC_ACQUIRE);
}

/* Migrate the old segment SEG of fixture F in place, on the fixture's
 * clock a second after it stopped (*NOW, *CLK); the report in *M. */
static void
migrate_in_place(const struct fx *f, const char *seg,
    struct shmt__host_time *now, struct tu_clock *clk,
    struct shmt__migration *m)
{
	char err[640];

	seg_time(f, now);
	clk->now = now->mono_ns + SEC;
	err[0] = '\0';
	if (shmt__segment_old_migrate(seg, now, tu_clock_read, clk, m, err,
	    sizeof(err)) != 0)
		fail_msg("migrate: %s", err);
}

static void
test_migrate_segment(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct shmt_hdr *old;
	struct tu_clock clk;
	struct stat a, b;
	char seg[96], path[128];
	size_t size;
	shmt_t *h;
	const struct fx *f = *state;

	tu_segname(seg, sizeof(seg), "mig-seg");
	seg_put(f, seg, &size);
	assert_int_equal(shmt_open(seg, &h), SHMT_EFORMAT);
	old = seg_map(seg, size);
	snprintf(path, sizeof(path), "/dev/shm%s", seg);
	assert_int_equal(stat(path, &a), 0);
	migrate_in_place(f, seg, &now, &clk, &m);
	check_report(f, &m);
	/* The name is a new object; the old one, still mapped here, is
	 * retired: its ABI 6 workers answer SHMT_ESTALE. */
	assert_int_equal(stat(path, &b), 0);
	assert_true(a.st_ino != b.st_ino);
	assert_int_equal(state_of(old), SHMT_SEG_RETIRED);
	assert_int_equal(old->sh_abi, (uint32_t)f->abi);
	munmap(old, size);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	check_migrated(h, &clk, now.mono_ns);
	tu_close_unlink(h, seg);
}

/* The fixture's segment as a writer killed half way through an overwrite
 * in place of user:1's value left it (ABI 7 and later keep an undo
 * record: ABI 6's writers copied on write): the shard's version odd, the
 * record armed with the item's bytes, the item's value half written, the
 * shard's lock naming a thread that is gone.  The migration carries the
 * old value, whole, as the repair of that version would have put it back,
 * and everything else as from a sound segment. */
static void
test_migrate_segment_dead_writer(void **state)
{
	const struct fx *f = *state;
	static const char pat[] = "user:1alice";
	struct shmt__migration m;
	struct shmt__host_time now;
	struct shmt_shard *sh;
	struct shmt_hdr *old;
	struct tu_clock clk;
	unsigned char *map, *it = NULL;
	uint64_t per, heap = 1, heap_off, nb;
	char seg[96];
	size_t size;
	shmt_t *h;

	tu_segname(seg, sizeof(seg), "mig-dw");
	seg_put(f, seg, &size);
	old = seg_map(seg, size);
	map = (unsigned char *)old;
	/* The fixture's dictionary is one shard of 2 MiB: its header, its
	 * index of 16-byte buckets (one per 128 heap bytes) from the next
	 * line, its heap from the next page. */
	assert_int_equal(old->sh_params.sp_dict_shards, 1);
	per = old->sh_params.sp_dict_bytes;
	while (heap * 2 <= per)
		heap *= 2;
	nb = heap >> 7;
	heap_off = (((896 + 127) / 128 * 128 + nb * 16) + 4095) / 4096 * 4096;
	sh = (struct shmt_shard *)(void *)(map +
	    old->sh_regions[SHMT_R_DICT].rg_off);
	for (uint64_t i = 0; i + sizeof(pat) < heap; i += 64)
		if (memcmp((char *)sh + heap_off + i + 32, pat,
		    sizeof(pat) - 1) == 0)
			it = (unsigned char *)sh + heap_off + i;
	assert_non_null(it);
	assert_int_equal(((struct shmt_item *)(void *)it)->it_magic,
	    SHMT_IT_ALLOC);
	memcpy(sh->ds_undo_bytes, it, 64);
	sh->ds_undo_len = 32 + 6 + 5;
	sh->ds_undo = (uint64_t)(it - ((unsigned char *)sh + heap_off)) + 1;
	sh->ds_seq |= 1;
	memcpy(it + 32 + 6, "ZZi", 3);          /* "alice" half overwritten */
	sh->ds_lock.lk_owner = tu_dead_tid();

	migrate_in_place(f, seg, &now, &clk, &m);
	munmap(old, size);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
	check_migrated(h, &clk, now.mono_ns);
	tu_close_unlink(h, seg);
}

/* Refusals: another format; a damaged segment; its daemon alive; a lock
 * kept by a live thread.  Each leaves the old segment live and named. */
static void
test_migrate_segment_refused(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct shmt_hdr *old;
	struct stat a, b;
	char seg[96], path[128], err[640];
	uint64_t v = 1ULL << 40, t0;
	size_t size;
	pid_t child;
	shmt_t *h;
	const struct fx *f = *state;

	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-ref");
	snprintf(path, sizeof(path), "/dev/shm%s", seg);

	/* This format's own segment. */
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err)), SHMT_EFORMAT);
	tu_close_unlink(h, seg);

	seg_put(f, seg, &size);
	old = seg_map(seg, size);
	assert_int_equal(stat(path, &a), 0);
	/* A row whose ring lies past the arena. */
	{
		unsigned char *row0 = (unsigned char *)old +
		    old->sh_regions[SHMT_R_LIMITERS].rg_off;
		uint64_t keep;

		memcpy(&keep, row0 + 72, 8);
		memcpy(row0 + 72, &v, 8);
		assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
		    &seg_clk, &m, err, sizeof(err)), SHMT_ECORRUPT);
		printf("# %s\n", err);
		assert_non_null(strstr(err, "storage outside"));
		assert_int_equal(state_of(old), SHMT_SEG_LIVE);
		memcpy(row0 + 72, &keep, 8);
	}
	/* Its ABI 6 daemon still runs (a live process stands for it). */
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		pause();
		_exit(0);
	}
	t0 = shmt__proc_start(child);
	old->sh_daemon_pid = child;
	old->sh_daemon_start = t0;
	assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err)), -EBUSY);
	printf("# %s\n", err);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	old->sh_daemon_pid = 0;
	assert_int_equal(state_of(old), SHMT_SEG_LIVE);
	/* A live thread (this one) keeps the limiter table's lock. */
	old->sh_table_lock.lk_owner = (uint32_t)syscall(SYS_gettid);
	assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err)), -EBUSY);
	printf("# %s\n", err);
	assert_int_equal(state_of(old), SHMT_SEG_LIVE);
	old->sh_table_lock.lk_owner = 0;
	/* Nothing was published: the name is the old object. */
	assert_int_equal(stat(path, &b), 0);
	assert_true(a.st_ino == b.st_ino);
	/* And with all that undone, it migrates. */
	assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err)), 0);
	assert_int_equal(state_of(old), SHMT_SEG_RETIRED);
	munmap(old, size);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* Seeded damage to the raw segment (any word of its header, a nonzero word
 * anywhere: rows, client entries, bucket heads, items, the analyzer), read
 * as the migration reads it: an error, or an image that migrates and
 * restores into a segment that works; never a crash or an endless loop. */
static void
test_migrate_segment_hostile(void **state)
{
	const struct fx *f = *state;
	uint64_t seed = fx_seed(f, "test_migrate_segment_hostile"), rs = seed;
	struct shmt__host_time now;
	struct tu_clock clk;
	unsigned char *raw, *work;
	uint64_t *words, nwords = 0;
	size_t size;
	char seg[96], err[640];
	int runs = (int)(300 * tu_scale()), refused = 0, restored = 0;

	raw = tu_zr_load(f->seg, &size);
	work = aligned_alloc(4096, size);
	words = calloc(size / 8, sizeof(*words));
	assert_true(work != NULL && words != NULL);
	for (uint64_t i = 0; i < size / 8; i++) {
		uint64_t w;

		memcpy(&w, raw + 8 * i, 8);
		if (w != 0)
			words[nwords++] = 8 * i;
	}
	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-sh");
	for (int i = 0; i < runs; i++) {
		struct shmt__migration m;
		unsigned char *img = NULL, *img7 = NULL;
		size_t len = 0, len7 = 0;
		int k = 1 + (int)(tu_rand(&rs) % 3), rc;
		shmt_t *h;

		memcpy(work, raw, size);
		for (int j = 0; j < k; j++) {
			uint64_t at = tu_rand(&rs) % 4 == 0 ?
			    (tu_rand(&rs) % (sizeof(struct shmt_hdr) / 8)) * 8 :
			    words[tu_rand(&rs) % nwords];
			uint64_t v = nasty(&rs, tu_rand(&rs) % size);

			memcpy(work + at, &v, tu_rand(&rs) % 2 ? 8 : 4);
		}
		rc = shmt__segment_old_image(work, size, &now, &img, &len, err,
		    sizeof(err));
		if (rc == 0)
			rc = shmt__image_migrate(img, len, &img7, &len7, &m, err,
			    sizeof(err));
		if (rc == 0) {
			clk.now = now.mono_ns + SEC;
			shmt_unlink(seg);
			rc = shmt__image_restore(img7, len7, seg, &now,
			    tu_clock_read, &clk, err, sizeof(err));
		}
		free(img);
		free(img7);
		if (rc != 0) {
			refused++;
			continue;
		}
		restored++;
		assert_int_equal(shmt_open(seg, &h), 0);
		assert_int_equal(shmt_set_clock(h, tu_clock_read, &clk), 0);
		assert_true(shmt_check(h, NULL, NULL) >= 0);
		(void)shmt_try_use_key(h, "api");
		(void)shmt_try_use(h, "per-ip", "10.0.0.1", 8);
		tu_close_unlink(h, seg);
	}
	printf("# seed %" PRIu64 ": %d mutations of %" PRIu64 " words, %d "
	    "refused, %d restored\n", seed, runs, nwords, refused, restored);
	assert_true(refused > 0 && restored > 0);
	free(words);
	free(work);
	free(raw);
}

/* A clock for the migration's new segment that kills its process the
 * first time it is read: kill -9 of the migrating daemon after the freeze
 * and the image, before the rename. */
static shmt_time_t
clock_kill(void *ctx)
{
	(void)ctx;
	kill(getpid(), SIGKILL);
	return 0;
}

/* kill -9 of the migrating daemon in the middle, then the next daemon:
 * exactly one authoritative segment, the old one still named and usable
 * (not left frozen for good), which the next daemon migrates. */
static void
test_migrate_segment_killed(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct shmt_hdr *old;
	char seg[96], path[160], err[640];
	size_t size;
	pid_t child;
	int status, rc;
	const struct fx *f = *state;

	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-kill");
	seg_put(f, seg, &size);
	old = seg_map(seg, size);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		(void)shmt__segment_old_migrate(seg, &now, clock_kill, NULL, &m,
		    err, sizeof(err));
		_exit(3);
	}
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* Killed between the freeze and the rename: the name is the old
	 * object, frozen by a dead mover. */
	printf("# after kill -9: old segment state %u\n", state_of(old));
	/* The next daemon finds it under the name and must take it over. */
	err[0] = '\0';
	rc = shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err));
	printf("# next migration: %d (%s)\n", rc, err);
	snprintf(path, sizeof(path), "/dev/shm%s.migrate.%ld.restore.%ld", seg,
	    (long)child, (long)child);
	printf("# leftover %s: %s\n", path, access(path, F_OK) == 0 ?
	    "present" : "absent");
	(void)shm_unlink(path + 8);
	assert_int_equal(rc, 0);
	assert_int_equal(state_of(old), SHMT_SEG_RETIRED);
	munmap(old, size);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* A segment frozen by another live mover (a second daemon migrating it, a
 * live process stands for it): a migration that finds it frozen refuses,
 * and must leave the record of who froze it as it was, or the old
 * library's recovery takes the freeze for a dead mover's (once this
 * process is gone) and undoes it under the live one. */
static void
test_migrate_segment_frozen_by_other(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct shmt_hdr *old;
	char seg[96], err[640];
	uint64_t w, start;
	size_t size;
	pid_t other;
	const struct fx *f = *state;

	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-other");
	seg_put(f, seg, &size);
	old = seg_map(seg, size);
	other = fork();
	assert_true(other >= 0);
	if (other == 0) {
		pause();
		_exit(0);
	}
	start = shmt__proc_start(other);
	/* The other mover's freeze, as the migration makes it. */
	__atomic_store_n(&old->sh_mover_pid, (int64_t)other, __ATOMIC_RELAXED);
	__atomic_store_n(&old->sh_mover_start, start, __ATOMIC_RELAXED);
	w = shmt__genword_load(old);
	assert_true(shmt__genword_cas(old, &w, SHMT_SEG_FROZEN,
	    (uint32_t)(w >> 32) + 1));
	assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err)), SHMT_ESTALE);
	printf("# %s; mover now pid %" PRId64 " (the other is %ld)\n", err,
	    old->sh_mover_pid, (long)other);
	kill(other, SIGKILL);
	waitpid(other, NULL, 0);
	assert_int_equal(old->sh_mover_pid, (int64_t)other);
	assert_int_equal(old->sh_mover_start, start);
	munmap(old, size);
	(void)shm_unlink(seg);
}

/* What an ABI 6 worker does while the migration builds the new segment:
 * it finds the freeze undone (its recovery took the mover for dead: a
 * mover record overwritten, another PID namespace) and takes a use of
 * "api" on the old segment, after the image was copied. */
struct undo_clock {
	struct tu_clock clk;
	const struct fx *f;
	struct shmt_hdr *old;
	int done;
	uint64_t inflight;      /* api's uses in flight in the old segment */
};

static shmt_time_t
clock_undo(void *ctx)
{
	struct undo_clock *u = ctx;

	if (!u->done) {
		uint64_t w = shmt__genword_load(u->old);
		unsigned char *rows = (unsigned char *)u->old +
		    u->old->sh_regions[SHMT_R_LIMITERS].rg_off;

		u->done = 1;
		assert_int_equal((uint32_t)w, SHMT_SEG_FROZEN);
		assert_true(shmt__genword_cas(u->old, &w, SHMT_SEG_LIVE,
		    (uint32_t)(w >> 32)));
		for (uint32_t r = 0; r < u->old->sh_params.sp_max_limiters; r++)
			if (strcmp((char *)rows + (uint64_t)r * ROW6 +
			    u->f->name_off, "api") == 0) {
				uint64_t *w0 = (uint64_t *)(void *)(rows +
				    (uint64_t)r * ROW6 + u->f->w_off);

				/* One grant: in flight + 1, count + 1. */
				__atomic_fetch_add(w0, (1ULL << 32) + 1,
				    __ATOMIC_SEQ_CST);
				u->inflight = *w0 >> 32;
			}
	}
	return u->clk.now;
}

/* The freeze undone during the migration: a grant may have landed on the
 * old segment after its copy.  The migration must not report success with
 * that grant lost (the new segment would grant it again). */
static void
test_migrate_segment_undone(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct undo_clock u;
	shmt_limiter_stat_t st;
	char seg[96], err[640];
	size_t size;
	shmt_t *h;
	int rc;
	const struct fx *f = *state;

	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-undo");
	seg_put(f, seg, &size);
	memset(&u, 0, sizeof(u));
	u.f = f;
	u.old = seg_map(seg, size);
	u.clk.now = now.mono_ns + SEC;
	err[0] = '\0';
	rc = shmt__segment_old_migrate(seg, &now, clock_undo, &u, &m, err,
	    sizeof(err));
	printf("# migration: %d (%s); old state %u, api in flight there %"
	    PRIu64 "\n", rc, err, state_of(u.old), u.inflight);
	assert_true(u.done);
	assert_int_equal(u.inflight, 4);
	if (rc == 0) {
		assert_int_equal(shmt_open(seg, &h), 0);
		assert_int_equal(shmt_set_clock(h, tu_clock_read, &u.clk), 0);
		assert_int_equal(shmt_limiter_stat(h, "api", &st), 0);
		printf("# new segment: api in flight %" PRIu64 "\n",
		    (uint64_t)st.in_flight);
		/* Every use granted on the old segment is held in the new. */
		assert_true(st.in_flight >= u.inflight);
		shmt_close(h);
	}
	munmap(u.old, size);
	(void)shmt_unlink(seg);
}

/* Does the shared-memory object NAME exist? */
static int
shm_exists(const char *name)
{
	char path[200];

	snprintf(path, sizeof(path), "/dev/shm%s", name);
	return access(path, F_OK) == 0;
}

/* Make an empty shared-memory object NAME. */
static void
shm_make(const char *name)
{
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	close(fd);
}

/* What a migration killed midway leaves (NAME.migrate.PID, and
 * NAME.migrate.PID.restore.PID of the restore it was in) is removed by the
 * next migration of NAME; a live migrator's private object is not, nor an
 * object that only shares the prefix. */
static void
test_migrate_segment_leftovers(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	char seg[96], err[640], built[160], restore[160], alive[160],
	    other[160];
	size_t size;
	pid_t child, live;
	int status, rc;
	const struct fx *f = *state;

	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-left");
	seg_put(f, seg, &size);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		(void)shmt__segment_old_migrate(seg, &now, clock_kill, NULL, &m,
		    err, sizeof(err));
		_exit(3);
	}
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	snprintf(restore, sizeof(restore), "%s.migrate.%ld.restore.%ld", seg,
	    (long)child, (long)child);
	/* Killed in the restore: its half-built object is there. */
	assert_true(shm_exists(restore));
	/* As if killed after the restore, before the rename. */
	snprintf(built, sizeof(built), "%s.migrate.%ld", seg, (long)child);
	shm_make(built);
	live = fork();
	assert_true(live >= 0);
	if (live == 0) {
		pause();
		_exit(0);
	}
	snprintf(alive, sizeof(alive), "%s.migrate.%ld", seg, (long)live);
	shm_make(alive);
	snprintf(other, sizeof(other), "%s.migrated", seg);
	shm_make(other);
	rc = shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err));
	printf("# next migration %d; after it: %s %s, %s %s\n", rc, built,
	    shm_exists(built) ? "present" : "absent", restore,
	    shm_exists(restore) ? "present" : "absent");
	kill(live, SIGKILL);
	waitpid(live, NULL, 0);
	assert_int_equal(rc, 0);
	assert_false(shm_exists(built));
	assert_false(shm_exists(restore));
	assert_true(shm_exists(alive));
	assert_true(shm_exists(other));
	(void)shm_unlink(built);
	(void)shm_unlink(restore);
	(void)shm_unlink(alive);
	(void)shm_unlink(other);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* The report of a migration whose arena grew tells the operator the size
 * to put in the configuration; one that did not grow says nothing of it. */
static void
test_migrate_text_grown(void **state)
{
	struct shmt__migration m;
	char note[768];

	(void)state;
	memset(&m, 0, sizeof(m));
	m.from_abi = 6;
	shmt__migration_text(&m, note, sizeof(note));
	assert_null(strstr(note, "arena"));
	m.arena_grown = 65536;
	m.arena_bytes = 8454144;
	shmt__migration_text(&m, note, sizeof(note));
	printf("# %s\n", note);
	assert_non_null(strstr(note, "to 8454144 bytes"));
	assert_non_null(strstr(note, "raise arena in the daemon's "
	    "configuration"));
}

/* Two migrations of one segment take turns: while another process
 * migrates it (its lock on the object, held here by a child), a second
 * one answers -EBUSY and writes nothing; once that process is gone the
 * next one migrates it. */
static void
test_migrate_segment_busy(void **state)
{
	struct shmt__migration m;
	struct shmt__host_time now;
	struct shmt_hdr *old;
	char seg[96], err[640];
	int64_t mover;
	uint64_t w;
	size_t size;
	pid_t child;
	int p[2], rc;
	char c;
	const struct fx *f = *state;

	seg_time(f, &now);
	tu_segname(seg, sizeof(seg), "mig-busy");
	seg_put(f, seg, &size);
	old = seg_map(seg, size);
	assert_int_equal(pipe(p), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int fd = shm_open(seg, O_RDWR | O_CLOEXEC, 0);

		if (fd < 0 || flock(fd, LOCK_EX) != 0)
			_exit(1);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	mover = old->sh_mover_pid;
	w = shmt__genword_load(old);
	rc = shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err));
	printf("# %d (%s)\n", rc, err);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_int_equal(rc, -EBUSY);
	assert_int_equal(old->sh_mover_pid, mover);
	assert_int_equal(shmt__genword_load(old), w);
	assert_int_equal(shmt__segment_old_migrate(seg, &now, tu_clock_read,
	    &seg_clk, &m, err, sizeof(err)), 0);
	assert_int_equal(state_of(old), SHMT_SEG_RETIRED);
	munmap(old, size);
	assert_int_equal(shmt_unlink(seg), 0);
}

int
main(void)
{
	/* Each test on the fixtures of ABI 6, then of ABI 7, 8 and 9. */
#define BOTH(fn) \
	{ #fn, fn, NULL, NULL, (void *)&fx6 }, \
	{ #fn "_abi7", fn, NULL, NULL, (void *)&fx7 }, \
	{ #fn "_abi8", fn, NULL, NULL, (void *)&fx8 }, \
	{ #fn "_abi9", fn, NULL, NULL, (void *)&fx9 }
	const struct CMUnitTest tests[] = {
		BOTH(test_migrate_fixture),
		BOTH(test_migrate_modes),
		BOTH(test_migrate_half_built),
		BOTH(test_migrate_rate_word),
		BOTH(test_migrate_refuses_others),
		BOTH(test_migrate_hostile),
		BOTH(test_migrate_segment),
		BOTH(test_migrate_segment_refused),
		BOTH(test_migrate_segment_hostile),
		BOTH(test_migrate_segment_killed),
		BOTH(test_migrate_segment_frozen_by_other),
		BOTH(test_migrate_segment_undone),
		{ "test_migrate_segment_dead_writer_abi7",
		    test_migrate_segment_dead_writer, NULL, NULL, (void *)&fx7 },
		{ "test_migrate_segment_dead_writer_abi8",
		    test_migrate_segment_dead_writer, NULL, NULL, (void *)&fx8 },
		{ "test_migrate_segment_dead_writer_abi9",
		    test_migrate_segment_dead_writer, NULL, NULL, (void *)&fx9 },
		BOTH(test_migrate_segment_busy),
		BOTH(test_migrate_segment_leftovers),
		cmocka_unit_test(test_migrate_abi7_overrides),
		cmocka_unit_test(test_migrate_text_grown),
	};
#undef BOTH

	return cmocka_run_group_tests(tests, NULL, tu_sweep);
}
