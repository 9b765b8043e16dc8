/* SPDX-License-Identifier: MIT */
/*
 * Overrides changed under load: forked workers grant for three clients of
 * one per-client limiter while the parent changes each client's rule
 * through a sequence of lowerings, raisings, denies and clears.  The clock
 * is injected and stands still, and the window is longer than the test, so
 * every grant stays in flight and every decision falls in one window.
 * Every call is bracketed by a shared sequence number (taken before and
 * after it) and by the phase numbers (the last change completed before
 * it, the last change started after it), and its clock reads note the
 * last change completed when the decision's clock was read.  The workers'
 * clock parks now and then (seeded) until the next change completes, so
 * that grants straddle changes: they read the old rule, then find their
 * decision time after the change.  The checker, per client:
 *  - a grant decided after a change completed (its clock read) and made
 *    before the next began: never under deny, and fewer than the phase's
 *    limit L of the client's grants had returned before its call began
 *    (no grant after a change under the old rule, lowered or not);
 *  - a refusal made wholly inside a phase with limit L: at least L grants
 *    had begun before the refusal returned (no false refusal);
 *  - at most max(every limit) grants in all, and exactly the last phase's
 *    limit once it has run.
 * SHMT_STRESS_SCALE scales the calls made per phase.
 *
 * kill -9 of a setter: a process changes one client's rule again and again
 * and is killed at seeded random points; afterwards the table holds one of
 * the rules it set, and once the client lock is taken again (any call of
 * the limiter's overrides) the client's entry carries that rule with its
 * epochs agreed, and shmt_check finds nothing.
 */
#include "limiter.h"
#include "testutil.h"

#include <inttypes.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define NW 3                     /* workers */
#define NC 4                     /* clients */
#define NP 8                     /* phases: 0 is the class limit */
#define NREC 300000
#define CLASS 8
#define R_DENY (-1)
#define R_ALLOW (-2)
#define R_CLEAR 0

/* The rule of client c in phase k: a limit, R_CLEAR (the class's),
 * R_DENY or R_ALLOW.  A client under a limit is never allowed (an allowed
 * grant is not counted, which the counting checks would need to know);
 * the last client goes from allow to deny and back: a grant that read
 * allow must not be made after a deny completed. */
static const int rules[NC][NP] = {
	{ R_CLEAR, 5, 12, 3, R_DENY, 16, R_CLEAR, 20 },
	{ R_CLEAR, 12, R_DENY, 6, 18, 4, R_CLEAR, 20 },
	{ R_CLEAR, 3, 9, R_DENY, R_CLEAR, 15, 2, 20 },
	{ R_ALLOW, R_DENY, R_ALLOW, R_DENY, R_ALLOW, R_DENY, R_ALLOW, R_DENY },
};

struct rec {
	uint64_t s, e;
	uint8_t client, k_lo, k_hi, k_dec, granted;
};

struct shared {
	struct tu_clock clk;
	int done_k, start_k, stop;
	uint64_t seq;
	uint64_t progress[NW];
	uint32_t nrec[NW];
	int full[NW];
	struct rec rec[NW][NREC];
};

static struct shared *sh;
static char seg[96];
static const char *ids[NC] = { "client-zero", "client-one", "client-two",
	"client-vip" };

static int dec_k;               /* the worker's: done_k at its last clock */
static uint64_t rs;

/* The shared, standing clock; one read in 16 parks until the next change
 * completes (bounded), as a preempted caller would. */
static shmt_time_t
park_clock(void *ctx)
{
	int k = __atomic_load_n(&sh->done_k, __ATOMIC_SEQ_CST);

	(void)ctx;
	if (tu_rand(&rs) % 16 == 0)
		for (int spin = 0; spin < 2000 &&
		    __atomic_load_n(&sh->done_k, __ATOMIC_SEQ_CST) == k; spin++)
			sched_yield();
	dec_k = __atomic_load_n(&sh->done_k, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&sh->clk.now, __ATOMIC_SEQ_CST);
}

static int
worker(int w, uint64_t seed)
{
	shmt_t *h;
	uint32_t i = 0;

	rs = seed + (uint64_t)w * 0x9e3779b97f4a7c15ULL;
	if (shmt_open(seg, &h) != 0 ||
	    shmt_set_clock(h, park_clock, NULL) != 0)
		return 2;
	for (uint64_t n = 0; !__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE);
	    n++) {
		int c = (int)((n + (uint64_t)w) % NC), rc;
		struct rec *r = &sh->rec[w][i];

		r->client = (uint8_t)c;
		r->k_lo = (uint8_t)__atomic_load_n(&sh->done_k,
		    __ATOMIC_SEQ_CST);
		r->s = __atomic_fetch_add(&sh->seq, 1, __ATOMIC_SEQ_CST);
		rc = shmt_try_use(h, "pc", ids[c], strlen(ids[c]));
		r->e = __atomic_fetch_add(&sh->seq, 1, __ATOMIC_SEQ_CST);
		r->k_hi = (uint8_t)__atomic_load_n(&sh->start_k,
		    __ATOMIC_SEQ_CST);
		/* A call that found the client's entry mid-change waits for
		 * the setter's lock: on a loaded machine the setter may be
		 * off the CPU long enough for SHMT_ELOCKED (try again); and
		 * a call whose every try met a change (its CAS failing on the
		 * moved epoch, its clock parked in between) spends its retry
		 * budget of 250 ms: SHMT_EBUSYLOOP.  Either took nothing: not
		 * recorded. */
		if (rc == SHMT_ELOCKED || rc == SHMT_EBUSYLOOP)
			continue;
		if (rc < 0) {
			fprintf(stderr, "worker %d: %s\n", w, shmt_strerror(rc));
			return 3;
		}
		r->granted = (uint8_t)rc;
		r->k_dec = (uint8_t)dec_k;
		__atomic_store_n(&sh->nrec[w], ++i, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->progress[w], n + 1, __ATOMIC_RELEASE);
		if (i == NREC) {
			__atomic_store_n(&sh->full[w], 1, __ATOMIC_RELEASE);
			break;
		}
	}
	shmt_close(h);
	return 0;
}

static int
set_rule(shmt_t *h, int c, int rule)
{
	shmt_client_rule_t r = { 0 };

	if (rule == R_CLEAR) {
		int rc = shmt_client_clear(h, "pc", ids[c], strlen(ids[c]));

		return rc < 0 ? rc : 0;
	}
	r.kind = rule == R_DENY ? SHMT_RULE_DENY : rule == R_ALLOW ?
	    SHMT_RULE_ALLOW : SHMT_RULE_LIMIT;
	r.limit = rule < 0 ? 0 : (uint64_t)rule;
	return shmt_client_set(h, "pc", ids[c], strlen(ids[c]), &r);
}

/* Let the workers make CALLS calls each, in all, that begin after this
 * point (or fill their records): counted in all, so that a worker parked
 * in its clock, waiting for the next change, does not hold the change. */
static void
let_run(uint64_t calls)
{
	uint64_t from = 0, now;

	for (int w = 0; w < NW; w++)
		from += __atomic_load_n(&sh->progress[w], __ATOMIC_ACQUIRE);
	do {
		int full = 0;

		now = 0;
		for (int w = 0; w < NW; w++) {
			now += __atomic_load_n(&sh->progress[w],
			    __ATOMIC_ACQUIRE);
			full |= __atomic_load_n(&sh->full[w], __ATOMIC_ACQUIRE);
		}
		if (full)
			break;
		sched_yield();
	} while (now < from + (calls + 1) * NW);
}

static int
limit_of(int c, int k)
{
	return rules[c][k] == R_CLEAR ? CLASS : rules[c][k];
}

/* The checks of the file's comment over every record; returns the
 * client's grants. */
static int
check_client(int c, int *inside_last)
{
	static struct rec gs[1024];
	int granted = 0, ng = 0;

	*inside_last = 0;
	for (int w = 0; w < NW; w++)
		for (uint32_t i = 0; i < sh->nrec[w]; i++) {
			if (sh->rec[w][i].client != c || !sh->rec[w][i].granted)
				continue;
			granted++;
			if (c == NC - 1)
				continue;       /* allow: nothing to count */
			if (ng == 1024)
				fail_msg("client %d: over 1024 grants", c);
			gs[ng++] = sh->rec[w][i];
		}
	for (int w = 0; w < NW; w++) {
		for (uint32_t i = 0; i < sh->nrec[w]; i++) {
			const struct rec *g = &sh->rec[w][i];
			int before = 0, k, lim;

			if (g->client != c)
				continue;
			/* A grant: decided after change k, made before the
			 * next began; a refusal: wholly inside phase k. */
			k = g->granted ? g->k_dec : g->k_lo;
			if (k != g->k_hi)
				continue;
			lim = limit_of(c, k);
			if (k == NP - 1)
				(*inside_last)++;
			if (g->granted && rules[c][k] == R_DENY)
				fail_msg("client %d: granted in phase %d (deny)",
				    c, k);
			if (!g->granted && rules[c][k] == R_ALLOW)
				fail_msg("client %d: refused in phase %d (allow)",
				    c, k);
			if (rules[c][k] < 0)
				continue;
			for (int j = 0; j < ng; j++)
				if (g->granted ? gs[j].e < g->s : gs[j].s < g->e)
					before++;
			if (g->granted && before >= lim)
				fail_msg("client %d: granted in phase %d (limit "
				    "%d) after %d grants had returned", c, k,
				    lim, before);
			if (!g->granted && before < lim)
				fail_msg("client %d: refused in phase %d (limit "
				    "%d) with only %d grants begun", c, k, lim,
				    before);
		}
	}
	return granted;
}

static void
test_changes_under_load(void **state)
{
	shmt_limit_t l = { .limit = CLASS, .window_ns = 1ULL << 50,
		.slack_ns = 1ULL << 48, .slack_uses = 4, .per_client = 1,
		.client_capacity = 16 };
	uint64_t calls = (uint64_t)(400 * tu_scale()) + 50;
	pid_t pid[NW];
	shmt_limiter_stat_t st;
	shmt_t *h;
	int status, max = 0;
	uint64_t seed = tu_seed("test_overrides_mp");

	(void)state;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	sh->clk.now = 1000000000;
	tu_segname(seg, sizeof(seg), "ovmp");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_set_clock(h, tu_clock_read, &sh->clk), 0);
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	for (int c = 0; c < NC; c++)
		assert_int_equal(set_rule(h, c, rules[c][0]), 0);
	for (int w = 0; w < NW; w++) {
		pid[w] = fork();
		assert_true(pid[w] >= 0);
		if (pid[w] == 0) {
			alarm(120);
			_exit(worker(w, seed));
		}
	}
	let_run(calls);
	for (int k = 1; k < NP; k++) {
		__atomic_store_n(&sh->start_k, k, __ATOMIC_SEQ_CST);
		for (int c = 0; c < NC; c++)
			assert_int_equal(set_rule(h, c, rules[c][k]), 0);
		__atomic_store_n(&sh->done_k, k, __ATOMIC_SEQ_CST);
		let_run(calls);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	for (int w = 0; w < NW; w++) {
		assert_int_equal(waitpid(pid[w], &status, 0), pid[w]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	for (int c = 0; c < NC - 1; c++)
		for (int k = 0; k < NP; k++)
			if (limit_of(c, k) > max)
				max = limit_of(c, k);
	for (int c = 0; c < NC; c++) {
		int inside = 0, n = check_client(c, &inside);

		print_message("client %d: %d grants, %d calls inside the last "
		    "phase\n", c, n, inside);
		if (c == NC - 1)
			continue;       /* allowed grants are not counted */
		assert_true(n <= max);
		if (inside > 0)
			assert_int_equal(n, limit_of(c, NP - 1));
	}
	assert_int_equal(shmt_limiter_stat(h, "pc", &st), 0);
	assert_int_equal(st.in_flight, (uint64_t)(NC - 1) * limit_of(0, NP - 1));
	assert_true(st.allowed_by_rule > 0);
	assert_true(st.denied_by_rule > 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	tu_close_unlink(h, seg);
	munmap(sh, sizeof(*sh));
}

static const shmt_client_rule_t kill_rules[] = {
	{ SHMT_RULE_LIMIT, 3 }, { SHMT_RULE_LIMIT, 7 }, { SHMT_RULE_DENY, 0 },
	{ SHMT_RULE_ALLOW, 0 },
};

/* The entry of client "k" in limiter "pc" of H (its id kept whole). */
static struct shmt_client *
entry_of_k(shmt_t *h)
{
	struct shmt_lim *row = tu_row_of(h, "pc");

	for (uint32_t i = 0; i < row->lm_capacity; i++) {
		struct shmt_client *e = (struct shmt_client *)(tu_arena(h) +
		    row->lm_clients_off + (uint64_t)i * row->lm_entsize);
		uint32_t st = (uint32_t)(e->ce_w.w[1] & 0xffffU) >> 14;

		if (e->ce_idlen == 1 && e->ce_id[0] == 'k' && (st == 1 ||
		    st == 2))
			return e;
	}
	return NULL;
}

static void
test_kill_setter(void **state)
{
	shmt_limit_t l = { .limit = 5, .window_ns = 1ULL << 50,
		.slack_ns = 1ULL << 48, .slack_uses = 5, .per_client = 1,
		.client_capacity = 16 };
	uint64_t seed = tu_seed("test_overrides_kill"), krs = seed;
	int kills = (int)(40 * tu_scale()) + 10;
	shmt_t *h;

	(void)state;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	tu_segname(seg, sizeof(seg), "ovkill");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	assert_int_equal(shmt_try_use(h, "pc", "k", 1), 1);
	for (int round = 0; round < kills; round++) {
		uint64_t after = tu_rand(&krs) % 40 + 1;
		uint64_t spin = tu_rand(&krs) % 200000;
		shmt_client_rule_t got;
		struct shmt_client *e;
		uint32_t want;
		int status, known = 0;
		pid_t pid;

		__atomic_store_n(&sh->progress[0], 0, __ATOMIC_RELEASE);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			shmt_t *c;

			alarm(60);
			if (shmt_open(seg, &c) != 0)
				_exit(2);
			for (uint64_t n = 0;; n++) {
				int rc = n % 5 == 4 ?
				    shmt_client_clear(c, "pc", "k", 1) :
				    shmt_client_set(c, "pc", "k", 1,
				    &kill_rules[(n + (uint64_t)round) % 4]);

				if (rc < 0)
					_exit(3);
				__atomic_store_n(&sh->progress[0], n + 1,
				    __ATOMIC_RELEASE);
			}
		}
		while (__atomic_load_n(&sh->progress[0], __ATOMIC_ACQUIRE) <
		    after)
			sched_yield();
		for (volatile uint64_t i = 0; i < spin; i++)
			;
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFSIGNALED(status))
			fail_msg("round %d: setter exited %d", round,
			    WEXITSTATUS(status));
		/* The table: one of the rules the setter set, or none. */
		if (shmt_client_get(h, "pc", "k", 1, &got) == 1) {
			for (int i = 0; i < 4; i++)
				known |= got.kind == kill_rules[i].kind &&
				    got.limit == kill_rules[i].limit;
			assert_true(known);
		}
		want = got.kind == SHMT_RULE_ALLOW ? 0xffffffffU :
		    got.kind == SHMT_RULE_DENY ? 0xfffffffeU :
		    (uint32_t)got.limit;
		/* The entry, after the get's lock restamped it. */
		e = entry_of_k(h);
		assert_non_null(e);
		if (e->ce_rule != want)
			fail_msg("round %d: entry rule %#x, table %#x", round,
			    e->ce_rule, want);
		assert_int_equal(e->ce_hash[1] & 0x3fffU,
		    e->ce_w.w[1] & 0x3fffU);
		assert_int_equal(shmt_check(h, NULL, NULL), 0);
		/* And the decisions follow it. */
		{
			shmt_decision_t d;
			int rc = shmt_peek(h, "pc", "k", 1, 1, &d);

			if (got.kind == SHMT_RULE_DENY)
				assert_true(rc == 0 &&
				    d.retry_after_ns == UINT64_MAX);
			else if (got.kind == SHMT_RULE_ALLOW)
				assert_true(rc == 1 && d.limit == 0);
			else
				assert_int_equal(d.limit, got.kind == 0 ? 5 :
				    got.limit);
		}
	}
	print_message("%d kills\n", kills);
	tu_close_unlink(h, seg);
	munmap(sh, sizeof(*sh));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_changes_under_load),
		cmocka_unit_test(test_kill_setter),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
