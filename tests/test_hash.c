/* SPDX-License-Identifier: MIT */
/*
 * The segment's secret: every segment gets its own, a handle takes it once
 * at open, and inputs aimed at one place of one segment (client ids at a
 * victim's neighbourhood of the per-client table, keys at one counter
 * group of the analyzer) scatter in another.  Each attack is first shown
 * to work where it was aimed (a segment whose secret the attacker knew),
 * then shown to fail elsewhere.
 *
 * The secrets come from getrandom(), so the ids and keys differ from run to
 * run; each check below fails by chance with a probability under 1e-15,
 * stated where it is made.  The secrets are printed, so a failure can be
 * studied.
 */
#include "test_analyzer_util.h"
#include "testutil.h"

#include "analyzer.h"
#include "limiter.h"
#include "segment.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TH_SEC 1000000000ULL
#define TH_CAP 1024U             /* per-client table */
#define TH_PROBE 64U             /* a client lives within 64 entries */
#define TH_ATTACKERS 1200U       /* more than the table holds */

static void
th_print_secret(const char *what, const shmt_t *h)
{
	printf("# %s secret ", what);
	for (unsigned i = 0; i < SHMT_SECRET_BYTES; i++)
		printf("%02x", h->hdr->sh_secret[i]);
	printf("\n");
}

static shmt_t *
th_create(char *seg, size_t cap, const char *tag, struct tu_clock *clk)
{
	shmt_limit_t l = { .limit = 2, .window_ns = 3600 * TH_SEC,
		.slack_ns = 60 * TH_SEC, .slack_uses = 2, .per_client = 1,
		.client_capacity = TH_CAP };
	shmt_config_t cfg;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.dict_bytes = 4ULL << 20;
	cfg.dict_shards = 2;
	cfg.counters_bytes = 0;
	/* 8 MiB: 120 counter groups per summary, so that random keys share
	 * one only by a chance small enough to state (test_aimed_keys_spread). */
	cfg.analyzer_bytes = 8ULL << 20;
	tu_segname(seg, cap, tag);
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, clk), 0);
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	th_print_secret(tag, h);
	return h;
}

static void
th_destroy(shmt_t *h, const char *seg)
{
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

static size_t
th_id(uint32_t n, char *buf)
{
	return (size_t)snprintf(buf, 32, "attacker-%" PRIu32, n);
}

/* Up to WANT ids (numbers written to OUT) whose home in H's table is the
 * home of VICTIM: the search an attacker who knows the secret makes. */
static uint32_t
th_aim(const shmt_t *h, const char *victim, uint32_t *out, uint32_t want)
{
	uint64_t hv[2], hx[2];
	uint32_t home, n = 0;
	char id[32];

	shmt__client_hash(h, victim, strlen(victim), hv);
	home = shmt__client_home(hv, TH_CAP);
	for (uint32_t x = 0; n < want && x < 64U * TH_CAP * want; x++) {
		size_t len = th_id(x, id);

		shmt__client_hash(h, id, len, hx);
		if (shmt__client_home(hx, TH_CAP) == home)
			out[n++] = x;
	}
	return n;
}

static uint64_t
th_table_full(shmt_t *h)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(h, "pc", &st), 0);
	return st.denied_table_full;
}

/* Two segments, two secrets; a handle holds its segment's, and a restore
 * keeping it is checked in test_daemon_snapshot. */
static void
test_secrets_differ(void **state)
{
	static const uint8_t zero[SHMT_SECRET_BYTES];
	struct tu_clock clk = { 0 };
	char sa[96], sb[96];
	shmt_t *a = th_create(sa, sizeof(sa), "hashsa", &clk);
	shmt_t *b = th_create(sb, sizeof(sb), "hashsb", &clk);
	shmt_t *a2;

	(void)state;
	/* Equal by chance: 2^-128. */
	assert_memory_not_equal(a->hdr->sh_secret, b->hdr->sh_secret,
	    SHMT_SECRET_BYTES);
	assert_memory_not_equal(a->hdr->sh_secret, zero, SHMT_SECRET_BYTES);
	assert_memory_equal(a->key.hk_key, a->hdr->sh_secret, SHMT_SECRET_BYTES);
	assert_int_equal(shmt_open(sa, &a2), 0);
	assert_memory_equal(a2->key.hk_key, a->hdr->sh_secret,
	    SHMT_SECRET_BYTES);
	shmt_close(a2);
	th_destroy(a, sa);
	th_destroy(b, sb);
}

/*
 * The secret is taken once per handle: a segment whose secret is changed
 * after a handle opened it (by a bug or a hostile writer) does not change
 * how that handle hashes; a handle opened afterwards hashes with the new
 * one, and no longer finds the key.
 */
static void
test_secret_once_per_handle(void **state)
{
	struct tu_clock clk = { 0 };
	char seg[96], v[8];
	shmt_t *h = th_create(seg, sizeof(seg), "hashonce", &clk);
	shmt_t *h2;
	size_t vlen;

	(void)state;
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	h->hdr->sh_secret[0] ^= 0x5a;
	assert_int_equal(shmt_get(h, "k", 1, v, sizeof(v), &vlen), 0);
	assert_int_equal(shmt_open(seg, &h2), 0);
	/* Found by chance: the new hash picks the old chain and equals the
	 * stored 64-bit hash, 2^-64. */
	assert_int_equal(shmt_get(h2, "k", 1, v, sizeof(v), &vlen), -ENOENT);
	shmt_close(h2);
	th_destroy(h, seg);
}

/*
 * (a) 64 ids aimed at the victim's home in segment A fill its whole
 * neighbourhood there; in segment B (another secret) they spread: few land
 * in B's neighbourhood of the victim, and they take many homes.
 */
static void
test_aimed_ids_spread(void **state)
{
	struct tu_clock clk = { 0 };
	char sa[96], sb[96], id[32];
	uint32_t ids[TH_PROBE], homes_b[TH_PROBE], vhome, near = 0, distinct = 0;
	uint64_t hv[2], hx[2];
	shmt_t *a = th_create(sa, sizeof(sa), "hashaa", &clk);
	shmt_t *b = th_create(sb, sizeof(sb), "hashab", &clk);

	(void)state;
	assert_int_equal(th_aim(a, "victim", ids, TH_PROBE), TH_PROBE);
	/* Where it was aimed, the attack works: the victim is refused on its
	 * first request, for a full table, with the table at 64 of 1024. */
	for (uint32_t i = 0; i < TH_PROBE; i++) {
		size_t len = th_id(ids[i], id);

		assert_int_equal(shmt_try_use(a, "pc", id, len), 1);
	}
	assert_int_equal(shmt_try_use(a, "pc", "victim", 6), 0);
	assert_int_equal(th_table_full(a), 1);

	shmt__client_hash(b, "victim", 6, hv);
	vhome = shmt__client_home(hv, TH_CAP);
	for (uint32_t i = 0; i < TH_PROBE; i++) {
		size_t len = th_id(ids[i], id);
		uint32_t j;

		shmt__client_hash(b, id, len, hx);
		homes_b[i] = shmt__client_home(hx, TH_CAP);
		near += (homes_b[i] - vhome + TH_CAP) % TH_CAP < TH_PROBE ||
		    (vhome - homes_b[i] + TH_CAP) % TH_CAP < TH_PROBE;
		for (j = 0; j < i && homes_b[j] != homes_b[i]; j++)
			;
		distinct += j == i;
	}
	printf("# in B: %u of %u aimed ids within %u entries of the victim's "
	    "home, %u distinct homes\n", near, TH_PROBE, TH_PROBE, distinct);
	/* Random homes: about 8 of 64 fall within 64 entries either side of
	 * the victim's; 40 or more with probability under 1e-15.  Fewer than
	 * 40 distinct homes of 64 among 1024: under 1e-15 as well. */
	assert_true(near < 40);
	assert_true(distinct >= 40);
	for (uint32_t i = 0; i < TH_PROBE; i++) {
		size_t len = th_id(ids[i], id);

		assert_int_equal(shmt_try_use(b, "pc", id, len), 1);
	}
	assert_int_equal(shmt_try_use(b, "pc", "victim", 6), 1);
	assert_int_equal(th_table_full(b), 0);
	th_destroy(a, sa);
	th_destroy(b, sb);
}

/*
 * (b) The attacker sends 1200 ids, all aimed (with A's secret) at the
 * victim's home, at segment B: 256 of them, then the victim's first
 * request, then the rest, until the table is full and beyond.  The victim
 * is granted, and every "table full" denial falls on an attacker's
 * request; the victim's entry stays, so its second request is granted too.
 */
static void
test_victim_granted(void **state)
{
	struct tu_clock clk = { 0 };
	char sa[96], sb[96], id[32];
	uint32_t *ids = calloc(TH_ATTACKERS, sizeof(*ids));
	uint64_t full = 0, attacker_full = 0, granted = 0;
	shmt_t *a = th_create(sa, sizeof(sa), "hashva", &clk);
	shmt_t *b = th_create(sb, sizeof(sb), "hashvb", &clk);
	shmt_limiter_stat_t st;

	(void)state;
	assert_non_null(ids);
	assert_int_equal(th_aim(a, "victim", ids, TH_ATTACKERS), TH_ATTACKERS);
	for (uint32_t i = 0; i < TH_ATTACKERS; i++) {
		size_t len = th_id(ids[i], id);
		uint64_t now_full;

		if (i == 256) {
			/* 256 of 1024 entries live, spread at random: a run of
			 * 64 live entries from the victim's home has probability
			 * under 1e-15. */
			assert_int_equal(shmt_try_use(b, "pc", "victim", 6), 1);
			assert_int_equal(th_table_full(b), full);
		}
		granted += (uint64_t)shmt_try_use(b, "pc", id, len);
		now_full = th_table_full(b);
		attacker_full += now_full - full;
		full = now_full;
	}
	assert_int_equal(shmt_try_use(b, "pc", "victim", 6), 1);
	assert_int_equal(shmt_limiter_stat(b, "pc", &st), 0);
	printf("# in B: %" PRIu64 " attacker ids granted, %" PRIu64 " refused "
	    "for a full table, %u of %u entries live\n", granted,
	    attacker_full, st.clients_in_use, TH_CAP);
	/* The table did fill: more attackers than entries. */
	assert_true(attacker_full >= TH_ATTACKERS + 1 - TH_CAP);
	assert_int_equal(granted + attacker_full, TH_ATTACKERS);
	assert_int_equal(st.denied_table_full, attacker_full);
	/* In A, where the ids were aimed, the victim is refused. */
	for (uint32_t i = 0; i < TH_PROBE; i++) {
		size_t len = th_id(ids[i], id);

		assert_int_equal(shmt_try_use(a, "pc", id, len), 1);
	}
	assert_int_equal(shmt_try_use(a, "pc", "victim", 6), 0);
	free(ids);
	th_destroy(a, sa);
	th_destroy(b, sb);
}

/* Request each of the N keys IDS in turn, ROUNDS times, at one moment. */
static void
th_rotate(shmt_t *h, const uint32_t *ids, uint32_t n, uint32_t rounds)
{
	char key[96], v[8];
	size_t vlen;

	for (uint32_t r = 0; r < rounds; r++)
		for (uint32_t i = 0; i < n; i++) {
			size_t kl = ta_key(ids[i], key);

			assert_int_equal(shmt_get(h, key, kl, v, sizeof(v), &vlen),
			    -ENOENT);
		}
}

/*
 * (c) probe + 1 keys aimed at one counter group of the analyzer of segment
 * A, requested in rotation, make every request there evict a counter: the
 * error grows to about N / (probe + 1).  In segment B they fall in many
 * groups, no group overflows, and the error stays 0.
 */
static void
test_aimed_keys_spread(void **state)
{
	struct tu_clock clk = { 1000 * TH_SEC };
	char sa[96], sb[96];
	shmt_t *a = th_create(sa, sizeof(sa), "hashka", &clk);
	shmt_t *b = th_create(sb, sizeof(sb), "hashkb", &clk);
	shmt_top_info_t ia, ib;
	uint32_t ids[260], n, groups, probe, maxg = 0, *cnt;
	const uint32_t rounds = 200;

	(void)state;
	assert_int_equal(shmt_top_keys(a, NULL, 0, &ia), 0);
	probe = ia.probe;
	groups = ia.counters / probe;
	assert_true(probe + 1 <= 256);
	ta_learn(a);
	if (groups < 100) {
		/* A summary of one group (or a few) has nothing to aim at:
		 * every key shares it, and probe + 1 keys in rotation, the
		 * worst an attacker who knew the secret could send, reach the
		 * bound total / (probe + 1) and no more. */
		n = ta_collide(groups, TA_COLD, TA_IDS, ids, probe + 1);
		assert_int_equal(n, probe + 1);
		th_rotate(a, ids, n, rounds);
		assert_int_equal(shmt_top_keys(a, NULL, 0, &ia), 0);
		printf("# %u group(s) of %u: %u keys in rotation: total %" PRIu64
		    ", error %" PRIu64 "\n", groups, probe, n, ia.total,
		    ia.error);
		assert_int_equal(ia.total, (uint64_t)n * rounds);
		assert_true(ia.error * (probe + 1) <= ia.total);
		assert_true(ia.error * (probe + 1) * 2 > ia.total);
		th_destroy(a, sa);
		th_destroy(b, sb);
		return;
	}
	n = ta_collide(groups, TA_COLD, TA_IDS, ids, probe + 1);
	assert_int_equal(n, probe + 1);
	th_rotate(a, ids, n, rounds);
	assert_int_equal(shmt_top_keys(a, NULL, 0, &ia), 0);
	printf("# A: %u keys aimed at one of %u groups of %u: total %" PRIu64
	    ", error %" PRIu64 "\n", n, groups, probe, ia.total, ia.error);
	assert_int_equal(ia.total, (uint64_t)n * rounds);
	assert_true(ia.error * (probe + 1) * 2 > ia.total);

	ta_learn(b);
	cnt = calloc(groups, sizeof(*cnt));
	assert_non_null(cnt);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = shmt__an_group(groups, ta_hash(ids[i]));

		if (++cnt[g] > maxg)
			maxg = cnt[g];
	}
	free(cnt);
	th_rotate(b, ids, n, rounds);
	assert_int_equal(shmt_top_keys(b, NULL, 0, &ib), 0);
	printf("# B: the same keys, at most %u in one group: total %" PRIu64
	    ", error %" PRIu64 "\n", maxg, ib.total, ib.error);
	/* All probe + 1 random keys in one of G >= 100 groups: G^-probe,
	 * under 1e-15; a group overflows (and d grows) only then. */
	assert_true(maxg < n);
	assert_int_equal(ib.total, (uint64_t)n * rounds);
	assert_int_equal(ib.error, 0);
	th_destroy(a, sa);
	th_destroy(b, sb);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_secrets_differ),
		cmocka_unit_test(test_secret_once_per_handle),
		cmocka_unit_test(test_aimed_ids_spread),
		cmocka_unit_test(test_victim_granted),
		cmocka_unit_test(test_aimed_keys_spread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
