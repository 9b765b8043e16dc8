/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's crossing records, white-box (lib/analyzer.h, "The
 * crossing log"): after a stream that fills and thins the log many times,
 * every record names a place of the summary, its count is at most that
 * place's count, the records are in time order, and the hot key's place has
 * a record of every multiple of the step from its first to its count now;
 * a stripe whose writer was killed (SIGKILL) is named dead until it is
 * reaped, and the reaper turns its logs off; an image brought back has
 * every log off; a stripe's claim under way is judged by its pid alone;
 * and logs and records overwritten with random words (a hostile segment)
 * give answers, never a crash or a hang.
 */
#include "test_analyzer_util.h"

#include "analyzer.h"
#include "an_sum.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t tr_seed;

/* The summary of sub-window ID that counted requests, or NULL. */
static struct shmt_an_sum *
tr_sum(const struct shmt_an *an, uint64_t id, uint32_t *stripe)
{
	for (uint32_t p = 0; p < an->stripes; p++) {
		struct shmt_an_sum *s = sum_at(an, (uint32_t)(id % an->rings), p);

		if (s->am_id == id && s->am_n > 0) {
			*stripe = p;
			return s;
		}
	}
	return NULL;
}

static void
test_recs_thinned(void **state)
{
	const struct ta_conf *c = &ta_confs[0];
	struct ta_mix mix = { 1, { 1 }, { 0.4 }, 1, 0, 0 };
	uint64_t t0 = 100 * TA_SEC * 60, id, *r, hot, rl, sh, n;
	uint64_t slot_cnt = 0, q_lo = UINT64_MAX, q_hi = 0, last_t = 0;
	struct shmt_an_sum *s;
	struct ta_run run;
	const struct shmt_an *an;
	uint32_t stripe, hslot = UINT32_MAX;
	uint8_t *seen;

	(void)state;
	ta_open(&run, c, "crossing records thinned", t0, tr_seed);
	an = run.h->an;
	assert_true(an->recs >= 4);
	hot = ta_hash(1);
	/* 60 000 requests in one sub-window: the hot key 40%, the rest
	 * one-off keys. */
	ta_traffic(&run, t0, t0 + run.w / 2, (uint64_t)(60000 * ta_scale()),
	    &mix);
	id = t0 / run.w;
	s = tr_sum(an, id, &stripe);
	assert_non_null(s);
	rl = s->am_rlog;
	sh = (rl >> 24) & 0xff;
	n = rl & 0xffffff;
	printf("# log: version %" PRIu64 ", shift %" PRIu64 ", %" PRIu64
	    " of %u records, n %" PRIu64 ", d %" PRIu64 "\n", rl >> 32, sh, n,
	    an->recs, s->am_n, s->am_d);
	assert_int_equal((rl >> 32) & 1, 0);
	assert_true(sh > 0 && sh <= SHMT_AN_REC_SHIFT_MAX);
	assert_true(n > 0 && n <= an->recs);
	/* The hot key's place. */
	for (uint32_t g = 0; g < an->groups; g++) {
		struct group gr = group_at(an, s, g);

		for (uint32_t j = 0; j < an->probe; j++)
			if (gr.hash[j] == (hot & ~SHMT_AN_CLIENT_BIT) &&
			    (gr.cnt[j] >> SHMT_AN_SEQ_BITS) > s->am_d) {
				hslot = g * an->probe + j;
				slot_cnt = gr.cnt[j] >> SHMT_AN_SEQ_BITS;
			}
	}
	assert_true(hslot != UINT32_MAX);
	seen = calloc(1U << SHMT_AN_REC_QBITS, 1);
	assert_non_null(seen);
	r = recs_of(an, s);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = r[i], q = v & SHMT_AN_REC_QMAX;
		uint64_t slot = (v >> SHMT_AN_REC_QBITS) &
		    ((1ULL << an->rec_sbits) - 1);
		uint64_t t = v >> (SHMT_AN_REC_QBITS + an->rec_sbits);
		struct group gr = group_at(an, s, (uint32_t)(slot / an->probe));

		assert_true(slot < an->cap);
		assert_true(q << sh <=
		    gr.cnt[slot % an->probe] >> SHMT_AN_SEQ_BITS);
		assert_true(t >= last_t && t < run.w);
		last_t = t;
		if (slot == hslot) {
			seen[q] = 1;
			if (q < q_lo)
				q_lo = q;
			if (q > q_hi)
				q_hi = q;
		}
	}
	/* Every multiple of the step from the first recorded to the count. */
	assert_int_equal(q_hi, slot_cnt >> sh);
	for (uint64_t q = q_lo; q <= q_hi; q++)
		assert_true(seen[q]);
	printf("# hot key: count %" PRIu64 ", records %" PRIu64 " to %" PRIu64
	    " of step %llu\n", slot_cnt, q_lo, q_hi, 1ULL << sh);
	free(seen);
	ta_close(&run);
}

/* A writer killed with SIGKILL while it holds its stripe: named dead (its
 * records unused) until reaped; reaped, its summaries' logs are off. */
static void
test_recs_dead_writer(void **state)
{
	const struct ta_conf *c = &ta_confs[0];
	uint64_t t0 = 200 * TA_SEC * 60;
	struct ta_run run;
	const struct shmt_an *an;
	int go[2], st;
	pid_t pid;
	char b;

	(void)state;
	ta_open(&run, c, "a writer killed", t0, tr_seed + 1);
	an = run.h->an;
	assert_int_equal(shmt__an_dead_writers(an), 0);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		shmt_t *h;
		char v[8];
		size_t vl;

		close(go[0]);
		if (shmt_open(run.seg, &h) != 0 ||
		    shmt_set_clock(h, tu_clock_read, &run.clk) != 0)
			_exit(1);
		for (int i = 0; i < 1000; i++)
			(void)shmt_get(h, "dead:hot", 8, v, sizeof(v), &vl);
		if (write(go[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(go[1]);
	assert_int_equal(read(go[0], &b, 1), 1);
	close(go[0]);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	{
		uint32_t dead = shmt__an_dead_writers(an);
		uint32_t p = (uint32_t)__builtin_ctz(dead | (1U << 31));

		printf("# dead writers: %#x\n", dead);
		assert_true(dead != 0 && p < SHMT_AN_STRIPES);
		assert_true(((sum_at(an, (uint32_t)((t0 / run.w) % an->rings),
		    p)->am_rlog >> 24) & 0xff) != SHMT_AN_REC_OFF);
		assert_true(shmt__an_reap(run.h) >= 1);
		assert_int_equal(shmt__an_dead_writers(an) & (1U << p), 0);
		for (uint32_t ring = 0; ring < an->rings; ring++)
			assert_int_equal((sum_at(an, ring, p)->am_rlog >> 24) &
			    0xff, SHMT_AN_REC_OFF);
	}
	ta_close(&run);
}

/* An image of the analyzer (a snapshot's, a move's) is copied while
 * writers count, so it may hold a count without the record its writer
 * stored after: every summary brought back from one has its log off. */
static void
test_recs_import_off(void **state)
{
	const struct ta_conf *c = &ta_confs[0];
	struct ta_mix mix = { 1, { 1 }, { 0.4 }, 1, 0, 0 };
	uint64_t t0 = 400 * TA_SEC * 60, on = 0, off = 0;
	struct ta_run run;
	const struct shmt_an *an;
	int64_t len;
	void *img;

	(void)state;
	ta_open(&run, c, "an image brought back", t0, tr_seed + 3);
	an = run.h->an;
	ta_traffic(&run, t0, t0 + run.w * 3, (uint64_t)(20000 * ta_scale()),
	    &mix);
	for (uint32_t ring = 0; ring < an->rings; ring++)
		for (uint32_t p = 0; p < an->stripes; p++)
			on += sum_at(an, ring, p)->am_n > 0 &&
			    ((sum_at(an, ring, p)->am_rlog >> 24) & 0xff) !=
			    SHMT_AN_REC_OFF;
	assert_true(on >= 3);
	len = shmt__an_export(run.h, NULL, 0);
	assert_true(len > 0);
	img = malloc((size_t)len);
	assert_non_null(img);
	assert_int_equal(shmt__an_export(run.h, img, (uint64_t)len), len);
	assert_int_equal(shmt__an_import(run.h, img, (uint64_t)len, 0), 0);
	for (uint32_t ring = 0; ring < an->rings; ring++)
		for (uint32_t p = 0; p < an->stripes; p++) {
			struct shmt_an_sum *s = sum_at(an, ring, p);

			if (s->am_n == 0)
				continue;
			assert_int_equal((s->am_rlog >> 24) & 0xff,
			    SHMT_AN_REC_OFF);
			off++;
		}
	printf("# %" PRIu64 " summaries with their log on before, %" PRIu64
	    " brought back with it off\n", on, off);
	assert_true(off >= on);
	free(img);
	ta_close(&run);
}

/* A stripe's claim stores the owner word with its top bit, then the
 * owner's start time, then the whole word: a reaper that comes in between
 * judges the claimer by its pid alone, so a live claimer is never taken
 * for a dead one by the start time its stripe's last owner left there.  A
 * claim whose process died is reaped. */
static void
test_recs_claim_under_way(void **state)
{
	const struct ta_conf *c = &ta_confs[0];
	uint64_t t0 = 500 * TA_SEC * 60, claiming = 1ULL << 63;
	struct shmt_an_owner *o;
	struct ta_run run;
	const struct shmt_an *an;
	int st;
	pid_t pid;

	(void)state;
	ta_open(&run, c, "a claim under way", t0, tr_seed + 4);
	an = run.h->an;
	/* The last stripe: this process's own claim takes the first. */
	o = &((struct shmt_an_owner *)an->base)[SHMT_AN_STRIPES - 1];
	assert_int_equal(o->ao_owner, 0);
	/* This live process, mid-claim, beside a start time that is not
	 * its own. */
	o->ao_start = 12345;
	o->ao_owner = claiming | (uint64_t)(uint32_t)getpid() << 32 | 77;
	assert_int_equal(shmt__an_reap(run.h), 0);
	assert_int_equal(shmt__an_dead_writers(an) &
	    (1U << (SHMT_AN_STRIPES - 1)), 0);
	assert_int_not_equal(o->ao_owner, 0);
	/* The same, claim whole: that start time says the pid is another
	 * process's now, so the owner is dead. */
	o->ao_owner &= ~claiming;
	assert_true(shmt__an_dead_writers(an) & (1U << (SHMT_AN_STRIPES - 1)));
	assert_int_equal(shmt__an_reap(run.h), 1);
	assert_int_equal(o->ao_owner, 0);
	/* A claimer that died mid-claim. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	o->ao_owner = claiming | (uint64_t)(uint32_t)pid << 32 | 78;
	assert_int_equal(shmt__an_reap(run.h), 1);
	assert_int_equal(o->ao_owner, 0);
	ta_close(&run);
}

/* Logs and records of random words: answers, never a crash or a hang. */
static void
test_recs_hostile(void **state)
{
	const struct ta_conf *c = &ta_confs[0];
	uint64_t t0 = 300 * TA_SEC * 60, rs = tr_seed ^ 0x6a09e667f3bcc909ULL;
	shmt_hotkey_t out[16];
	shmt_top_info_t info;
	struct ta_run run;
	const struct shmt_an *an;

	(void)state;
	ta_open(&run, c, "hostile logs", t0, tr_seed + 2);
	an = run.h->an;
	for (int round = 0; round < 40; round++) {
		uint64_t t = t0 + (uint64_t)round * run.w / 4;

		for (uint32_t ring = 0; ring < an->rings; ring++)
			for (uint32_t p = 0; p < an->stripes; p++) {
				struct shmt_an_sum *s = sum_at(an, ring, p);
				uint64_t *r = recs_of(an, s);

				if (tu_rand(&rs) % 2)
					s->am_rlog = tu_rand(&rs) >>
					    (tu_rand(&rs) % 64);
				for (uint32_t i = 0; i < an->recs; i++)
					if (tu_rand(&rs) % 4 == 0)
						r[i] = tu_rand(&rs);
			}
		/* Plain gets (the checks of ta_get's queries assume a
		 * sound segment). */
		for (int k = 0; k < 2000; k++) {
			char key[32], v[8];
			size_t vl, kl;

			run.clk.now = t + (uint64_t)k * (run.w / 4 / 2000);
			kl = (size_t)snprintf(key, sizeof(key), k % 3 ? "k%d:%d" :
			    "hot", round, k);
			(void)shmt_get(run.h, key, kl, v, sizeof(v), &vl);
		}
		run.clk.now = t + run.w / 4;
		assert_true(shmt_top_keys(run.h, out, 16, &info) >= 0);
	}
	ta_close(&run);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_recs_thinned),
		cmocka_unit_test(test_recs_dead_writer),
		cmocka_unit_test(test_recs_import_off),
		cmocka_unit_test(test_recs_claim_under_way),
		cmocka_unit_test(test_recs_hostile),
	};

	tr_seed = tu_seed("test_analyzer_recs");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
