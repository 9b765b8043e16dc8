/* SPDX-License-Identifier: MIT */
/*
 * Decisions and cost: shmt_acquire and shmt_peek against reference models
 * written here (the seed's ring of buckets with a cost per grant, and the
 * exact sliding-window log), call for call with an injected clock.  Every
 * decision field is compared with the model's answer, found by replaying
 * the model (remaining: grant one use after another; retry: the first
 * release after which the request passes), and the promises are checked on
 * the library itself: a request at now + retry_after - 1 ns is throttled and
 * one at now + retry_after granted; at now + reset_after the limiter is full
 * and one nanosecond before it is not.
 * Peeking changes no byte of the segment.
 */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- The model: the seed's ring with a cost per grant ------------------- */

#define MB_MAX 256

struct mb {
	uint64_t L, C, S, B, nb, used;
	struct { uint64_t count, close, id; } q[MB_MAX];
	uint32_t len;
	uint64_t ids;          /* buckets opened */
	uint64_t last;         /* the bucket the last grant went into */
};

static void
mb_release(struct mb *m, uint64_t now)
{
	while (m->len > 0 && m->q[0].close + m->C <= now) {
		m->used -= m->q[0].count;
		memmove(&m->q[0], &m->q[1], (m->len - 1) * sizeof(m->q[0]));
		m->len--;
	}
}

/* One request of K uses at NOW: 1 granted, 0 throttled. */
static int
mb_try(struct mb *m, uint64_t now, uint64_t k)
{
	mb_release(m, now);
	if (m->used + k > m->L)
		return 0;
	if (m->len > 0 && m->q[m->len - 1].count + k <= m->B &&
	    now < m->q[m->len - 1].close) {
		m->q[m->len - 1].count += k;
	} else {
		if (m->len + 1 > m->nb)
			return 0;
		m->q[m->len].count = k;
		m->q[m->len].close = now + m->S;
		m->q[m->len].id = ++m->ids;
		m->len++;
	}
	m->last = m->q[m->len - 1].id;
	m->used += k;
	return 1;
}

/* The decision the model gives for a request of K at NOW that it answered
 * GRANTED (M is the state after the request). */
static void
mb_decide(const struct mb *m, uint64_t now, uint64_t k, int granted,
    shmt_decision_t *d)
{
	struct mb x;
	uint64_t back = now;

	d->granted = granted;
	d->limit = m->L;
	x = *m;
	for (d->remaining = 0; mb_try(&x, now, 1); d->remaining++)
		assert_true(d->remaining <= m->L);
	d->retry_after_ns = 0;
	if (!granted) {
		/* Only releases make room: try at each release time. */
		uint64_t t = now;

		for (uint32_t i = 0;; i++) {
			x = *m;
			if (mb_try(&x, t, k))
				break;
			assert_true(i < m->len);
			if (m->q[i].close + m->C > t)
				t = m->q[i].close + m->C;
		}
		d->retry_after_ns = t - now;
	}
	for (uint32_t i = 0; i < m->len; i++)
		if (m->q[i].count > 0 && m->q[i].close + m->C > back)
			back = m->q[i].close + m->C;
	x = *m;
	mb_release(&x, now);
	d->reset_after_ns = x.used == 0 ? 0 : back - now;
}

/* ---- The exact log --------------------------------------------------------- */

struct mx {
	uint64_t L, C;
	uint64_t *q;
	uint64_t len;
};

static void
mx_release(struct mx *m, uint64_t now)
{
	uint64_t i = 0;

	while (i < m->len && m->q[i] + m->C <= now)
		i++;
	memmove(m->q, m->q + i, (m->len - i) * sizeof(*m->q));
	m->len -= i;
}

static int
mx_try(struct mx *m, uint64_t now)
{
	mx_release(m, now);
	if (m->len >= m->L)
		return 0;
	m->q[m->len++] = now;
	return 1;
}

static void
mx_decide(struct mx *m, uint64_t now, int granted, shmt_decision_t *d)
{
	mx_release(m, now);
	d->granted = granted;
	d->limit = m->L;
	d->remaining = m->L - m->len;
	d->retry_after_ns = granted ? 0 : m->q[0] + m->C - now;
	d->reset_after_ns = m->len == 0 ? 0 : m->q[m->len - 1] + m->C - now;
}

/* ---- Rate mode: redis-cell's CL.THROTTLE, in nanoseconds --------------- */

/*
 * Written from redis-cell's rate_limit(): Rate::per_period gives the
 * emission interval (period / count through floating point, truncated),
 * max_burst = burst - 1, limit = max_burst + 1, tolerance = interval *
 * (max_burst + 1); a missing key (-1) is an arrival time of now.
 */
struct mg {
	int64_t T, dvt, limit, tat;
};

static void
mg_init(struct mg *m, uint64_t count, uint64_t period, uint64_t burst)
{
	int64_t max_burst = (int64_t)burst - 1;

	m->T = (int64_t)((double)period / (double)count);
	m->dvt = m->T * (max_burst + 1);
	m->limit = max_burst + 1;
	m->tat = -1;
}

static int
mg_throttle(struct mg *m, int64_t now, int64_t quantity, shmt_decision_t *d)
{
	int64_t increment = m->T * quantity;
	int64_t tat = m->tat == -1 ? now : m->tat;
	int64_t new_tat = now > tat ? now + increment : tat + increment;
	int64_t allow_at = new_tat - m->dvt, diff = now - allow_at, ttl, next;
	int limited;

	d->retry_after_ns = 0;
	if (diff < 0) {
		if (increment <= m->dvt)
			d->retry_after_ns = (uint64_t)-diff;
		limited = 1;
		ttl = tat - now;
	} else {
		ttl = new_tat - now;
		m->tat = new_tat;
		limited = 0;
	}
	next = m->dvt - ttl;
	d->remaining = next > -m->T ? (uint64_t)(next / m->T) : 0;
	d->reset_after_ns = (uint64_t)ttl;
	d->granted = !limited;
	d->limit = (uint64_t)m->limit;
	return !limited;
}

/* ---- Fixture ------------------------------------------------------------------- */

static struct {
	char seg[96];
	shmt_t *h, *probe;     /* PROBE: a second handle that only peeks */
	struct tu_clock clk, pclk;
	unsigned nlim;
} g;

static int
setup(void **state)
{
	shmt_config_t cfg;

	(void)state;
	shmt_config_init(&cfg);
	cfg.max_limiters = 1024;
	cfg.arena_bytes = 8u << 20;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	tu_segname(g.seg, sizeof(g.seg), "decide");
	if (shmt_create(g.seg, &cfg, &g.h) != 0)
		return -1;
	/* A fixed secret, before the probe handle takes it at open: which
	 * entry a client reclaims in a full table (test_gcra_client_churn:
	 * how often it is full) is then the same on every run, and a seed
	 * replays a test whole.  The tests share the segment, so the secret
	 * cannot follow each one's seed. */
	{
		uint64_t ss = 0x243f6a8885a308d3ULL;

		tu_secret(g.h, &ss);
	}
	if (shmt_open(g.seg, &g.probe) != 0)
		return -1;
	g.clk.now = 0;
	g.pclk.now = 0;
	if (shmt_set_clock(g.h, tu_clock_read, &g.clk) != 0)
		return -1;
	return shmt_set_clock(g.probe, tu_clock_read, &g.pclk);
}

static int
teardown(void **state)
{
	shmt_close(g.probe);
	shmt_close(g.h);
	shmt_unlink(g.seg);
	return tu_sweep(state);
}

static void
same_decision(const shmt_decision_t *want, const shmt_decision_t *got,
    uint64_t op)
{
	if (want->granted != got->granted || want->limit != got->limit ||
	    want->remaining != got->remaining ||
	    want->retry_after_ns != got->retry_after_ns ||
	    want->reset_after_ns != got->reset_after_ns)
		fail_msg("op %" PRIu64 ": want granted %d limit %" PRIu64
		    " remaining %" PRIu64 " retry %" PRIu64 " reset %" PRIu64
		    ", got %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, op,
		    want->granted, want->limit, want->remaining,
		    want->retry_after_ns, want->reset_after_ns, got->granted,
		    got->limit, got->remaining, got->retry_after_ns,
		    got->reset_after_ns);
}

/* A probe from the second handle at time T: what a request would get. */
static int
probe(const char *name, const void *client, size_t len, uint64_t cost,
    uint64_t t, shmt_decision_t *d)
{
	g.pclk.now = t;
	return shmt_peek(g.probe, name, client, len, cost, d);
}

/*
 * The promises, checked on the library from the probe handle: with D the
 * decision of a request of COST at NOW, the same request at now + retry - 1
 * is throttled and at now + retry granted; the limiter is full (remaining
 * == limit) at now + reset and not one nanosecond before.
 */
static void
check_promises(const char *name, const void *client, size_t len,
    uint64_t cost, uint64_t now, const shmt_decision_t *d)
{
	shmt_decision_t p;

	if (!d->granted) {
		assert_true(d->retry_after_ns > 0);
		assert_int_equal(probe(name, client, len, cost,
		    now + d->retry_after_ns - 1, &p), 0);
		assert_int_equal(probe(name, client, len, cost,
		    now + d->retry_after_ns, &p), 1);
	}
	if (d->reset_after_ns > 0) {
		/* A peek's remaining counts its own grant: full is a grant
		 * that leaves limit - 1. */
		probe(name, client, len, 1, now + d->reset_after_ns - 1, &p);
		assert_false(p.granted && p.remaining == d->limit - 1);
		probe(name, client, len, 1, now + d->reset_after_ns, &p);
		assert_true(p.granted && p.remaining == d->limit - 1);
	}
}

static void
define_bucket(char *name, size_t cap, struct mb *m, uint64_t *rs, int per_client)
{
	shmt_limit_t l;

	memset(m, 0, sizeof(*m));
	m->L = 1 + tu_rand(rs) % 40;
	m->C = 50 + tu_rand(rs) % 1000;
	m->S = m->C / 16 + 1 + tu_rand(rs) % m->C;
	m->B = 1 + tu_rand(rs) % m->L;
	m->nb = (m->C + m->S - 1) / m->S + (m->L + m->B - 1) / m->B;
	memset(&l, 0, sizeof(l));
	l.limit = m->L;
	l.window_ns = m->C;
	l.slack_ns = m->S;
	l.slack_uses = m->B;
	l.mode = SHMT_MODE_BUCKETS;
	l.per_client = per_client;
	l.client_capacity = per_client ? 64 : 0;
	snprintf(name, cap, "b%u", g.nlim++);
	assert_int_equal(shmt_limiter_define(g.h, name, &l), 0);
}

/* ---- Tests ----------------------------------------------------------------------- */

static void
run_bucket(int per_client)
{
	uint64_t seed = tu_seed(per_client ? "test_decide_client" :
	    "test_decide_buckets"), rs = seed;
	uint64_t rounds = (uint64_t)(150 * tu_scale()) + 2, op = 0;

	for (uint64_t r = 0; r < rounds; r++) {
		static struct mb m[3];
		char name[32];
		const char *ids[3] = { "alice", "bob", "carol" };
		uint64_t ops = 1500;

		define_bucket(name, sizeof(name), &m[0], &rs, per_client);
		m[1] = m[0];
		m[2] = m[0];
		for (uint64_t i = 0; i < ops; i++, op++) {
			uint64_t x = tu_rand(&rs), k = 1 + (x >> 8) % m[0].B;
			int c = per_client ? (int)((x >> 20) % 3) : 0;
			const void *id = per_client ? ids[c] : NULL;
			size_t len = per_client ? strlen(ids[c]) : 0;
			shmt_decision_t want, got, pk;
			int rc, prc;

			if (x % 3 == 0)
				g.clk.now += (x >> 24) % (m[0].C / 4 + 2);
			if (x % 7 == 0)
				k = 1;
			if (!per_client && k == 1 && (x >> 50) % 4 == 0) {
				/* The plain call, between calls with
				 * decisions, answers as the model does. */
				assert_int_equal(shmt_try_use_key(g.h, name),
				    mb_try(&m[0], g.clk.now, 1));
				continue;
			}
			/* A peek answers what the acquire will. */
			g.pclk.now = g.clk.now;
			prc = shmt_peek(g.probe, name, id, len, k, &pk);
			rc = shmt_acquire(g.h, name, id, len, k, &got);
			assert_int_equal(rc, mb_try(&m[c], g.clk.now, k));
			assert_int_equal(prc, rc);
			mb_decide(&m[c], g.clk.now, k, rc, &want);
			same_decision(&want, &got, op);
			same_decision(&want, &pk, op);
			if (x % 5 == 0)
				check_promises(name, id, len, k, g.clk.now, &got);
			if (!rc && (x >> 40) % 4 == 0) {
				/* Take the retry at its word: just before it
				 * the request is refused, at it granted. */
				uint64_t t = g.clk.now + got.retry_after_ns;

				g.clk.now = t - 1;
				rc = shmt_acquire(g.h, name, id, len, k, NULL);
				assert_int_equal(rc, 0);
				assert_int_equal(mb_try(&m[c], t - 1, k), 0);
				g.clk.now = t;
				rc = shmt_acquire(g.h, name, id, len, k, NULL);
				assert_int_equal(rc, 1);
				assert_int_equal(mb_try(&m[c], t, k), 1);
			}
		}
	}
}

static void
test_decide_buckets(void **state)
{
	(void)state;
	run_bucket(0);
}

static void
test_decide_client(void **state)
{
	(void)state;
	run_bucket(1);
}

static void
test_decide_exact(void **state)
{
	uint64_t seed = tu_seed("test_decide_exact"), rs = seed, op = 0;
	uint64_t rounds = (uint64_t)(150 * tu_scale()) + 2;

	for (uint64_t r = 0; r < rounds; r++) {
		struct mx m;
		shmt_limit_t l;
		char name[32];

		memset(&l, 0, sizeof(l));
		m.L = 1 + tu_rand(&rs) % 40;
		m.C = 50 + tu_rand(&rs) % 1000;
		m.q = calloc(m.L + 1, sizeof(*m.q));
		m.len = 0;
		assert_non_null(m.q);
		l.limit = m.L;
		l.window_ns = m.C;
		l.mode = SHMT_MODE_EXACT;
		snprintf(name, sizeof(name), "x%u", g.nlim++);
		assert_int_equal(shmt_limiter_define(g.h, name, &l), 0);
		assert_int_equal(shmt_acquire(g.h, name, NULL, 0, 2, NULL),
		    -EINVAL);
		for (uint64_t i = 0; i < 1500; i++, op++) {
			uint64_t x = tu_rand(&rs);
			shmt_decision_t want, got, pk;
			int rc, prc;

			if (x % 3 == 0)
				g.clk.now += (x >> 24) % (m.C / 4 + 2);
			g.pclk.now = g.clk.now;
			prc = shmt_peek(g.probe, name, NULL, 0, 1, &pk);
			rc = shmt_acquire(g.h, name, NULL, 0, 1, &got);
			assert_int_equal(rc, mx_try(&m, g.clk.now));
			assert_int_equal(prc, rc);
			mx_decide(&m, g.clk.now, rc, &want);
			same_decision(&want, &got, op);
			same_decision(&want, &pk, op);
			if (x % 5 == 0)
				check_promises(name, NULL, 0, 1, g.clk.now, &got);
		}
		free(m.q);
	}
}

/* Rate mode answers as redis-cell does, call for call and field for
 * field, shared and per client (a model per client). */
static void
test_decide_gcra(void **state)
{
	uint64_t seed = tu_seed("test_decide_gcra"), rs = seed, op = 0;
	uint64_t rounds = (uint64_t)(150 * tu_scale()) + 2;
	const char *ids[3] = { "alice", "bob", "carol" };

	(void)state;
	for (uint64_t r = 0; r < rounds; r++) {
		int pc = (int)(r % 2);
		shmt_limit_t l;
		struct mg m[3];
		char name[32];

		memset(&l, 0, sizeof(l));
		l.mode = SHMT_MODE_GCRA;
		l.limit = 1 + tu_rand(&rs) % 50;
		l.window_ns = l.limit * (1 + tu_rand(&rs) % 100) +
		    tu_rand(&rs) % l.limit;
		l.burst = 1 + tu_rand(&rs) % 12;
		l.per_client = pc;
		l.client_capacity = pc ? 8 : 0;
		for (int c = 0; c < 3; c++)
			mg_init(&m[c], l.limit, l.window_ns, l.burst);
		snprintf(name, sizeof(name), "g%u", g.nlim++);
		assert_int_equal(shmt_limiter_define(g.h, name, &l), 0);
		assert_int_equal(shmt_acquire(g.h, name, pc ? "x" : NULL,
		    pc ? 1 : 0, l.burst + 1, NULL), -EINVAL);
		for (uint64_t i = 0; i < 1500; i++, op++) {
			uint64_t x = tu_rand(&rs), k = 1 + (x >> 8) % l.burst;
			int c = pc ? (int)((x >> 20) % 3) : 0;
			const char *id = pc ? ids[c] : NULL;
			size_t len = pc ? strlen(ids[c]) : 0;
			shmt_decision_t want, got, pk;
			int rc, prc;

			if (x % 3 == 0)
				g.clk.now += (x >> 24) %
				    (l.window_ns / l.limit * 3 + 2);
			if (x % 4 == 0)
				k = 1;
			if (k == 1 && (x >> 40) % 4 == 0) {
				/* The plain calls answer as the model. */
				rc = pc ? shmt_try_use(g.h, name, id, len) :
				    shmt_try_use_key(g.h, name);
				assert_int_equal(rc, mg_throttle(&m[c],
				    (int64_t)g.clk.now, 1, &want));
				continue;
			}
			g.pclk.now = g.clk.now;
			prc = shmt_peek(g.probe, name, id, len, k, &pk);
			rc = shmt_acquire(g.h, name, id, len, k, &got);
			assert_int_equal(rc, mg_throttle(&m[c],
			    (int64_t)g.clk.now, (int64_t)k, &want));
			assert_int_equal(prc, rc);
			same_decision(&want, &got, op);
			same_decision(&want, &pk, op);
			if (x % 5 == 0)
				check_promises(name, id, len, k, g.clk.now, &got);
		}
		assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
	}
}

/* Rate mode per client with a small table: entries are reclaimed once
 * their arrival time has passed; a grant is always one the client's model
 * allows (a full table only refuses), and the segment checks clean. */
static void
test_gcra_client_churn(void **state)
{
	uint64_t seed = tu_seed("test_gcra_client_churn"), rs = seed;
	shmt_limit_t l = { .limit = 4, .window_ns = 400, .mode = SHMT_MODE_GCRA,
		.burst = 2, .per_client = 1, .client_capacity = 4 };
	struct mg m[12];
	shmt_limiter_stat_t st;
	uint64_t grants = 0, full = 0, refused = 0;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "gchurn", &l), 0);
	for (int c = 0; c < 12; c++)
		mg_init(&m[c], 4, 400, 2);
	for (int i = 0; i < 30000; i++) {
		uint64_t x = tu_rand(&rs);
		int c = (int)(x % 12), rc;
		char id[8];
		struct mg copy;
		shmt_decision_t d;

		if ((x >> 8) % 2 == 0)
			g.clk.now += (x >> 16) % 60;
		snprintf(id, sizeof(id), "c%d", c);
		copy = m[c];
		rc = shmt_try_use(g.h, "gchurn", id, strlen(id));
		if (rc == 1) {
			assert_int_equal(mg_throttle(&m[c], (int64_t)g.clk.now,
			    1, &d), 1);
			grants++;
		} else {
			assert_int_equal(rc, 0);
			refused++;
			m[c] = copy;
			/* Refused where the model grants: the table was full. */
			if (mg_throttle(&copy, (int64_t)g.clk.now, 1, &d))
				full++;
		}
	}
	assert_int_equal(shmt_limiter_stat(g.h, "gchurn", &st), 0);
	/* A full table may also refuse what the model refuses. */
	assert_true(st.denied_table_full >= full);
	assert_int_equal(st.denied_table_full + st.denied_exhausted, refused);
	assert_true(grants > 1000 && full > 100);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

/*
 * The safety promise of rate mode, checked on every grant: uses granted in
 * any [a, a + d) are at most burst + floor(d / T), single-threaded with
 * the injected clock and greedy callers (every window start a is a grant
 * time, every window end is just past one).
 */
static void
test_gcra_bound(void **state)
{
	uint64_t seed = tu_seed("test_gcra_bound"), rs = seed;
	enum { N = 4000 };
	static uint64_t t[N], u[N];

	(void)state;
	for (int r = 0; r < 20; r++) {
		shmt_limit_t l;
		char name[32];
		uint64_t T, n = 0, worst = 0;

		memset(&l, 0, sizeof(l));
		l.mode = SHMT_MODE_GCRA;
		l.limit = 1 + tu_rand(&rs) % 20;
		l.window_ns = l.limit * (5 + tu_rand(&rs) % 50);
		l.burst = 1 + tu_rand(&rs) % 8;
		T = l.window_ns / l.limit;
		snprintf(name, sizeof(name), "gb%u", g.nlim++);
		assert_int_equal(shmt_limiter_define(g.h, name, &l), 0);
		while (n < N) {
			uint64_t x = tu_rand(&rs), k = 1 + x % l.burst;

			g.clk.now += (x >> 16) % 3 == 0 ? (x >> 20) % (2 * T) : 0;
			if (shmt_acquire(g.h, name, NULL, 0, k, NULL) == 1) {
				t[n] = g.clk.now;
				u[n++] = k;
			}
		}
		for (uint64_t i = 0; i < N; i++) {
			uint64_t sum = 0;

			for (uint64_t j = i; j < N; j++) {
				uint64_t d = t[j] - t[i] + 1;

				sum += u[j];
				if (sum > l.burst + d / T)
					fail_msg("%" PRIu64 " uses in %" PRIu64
					    " ns (T %" PRIu64 ", burst %" PRIu64
					    ")", sum, d, T, l.burst);
				if (sum > worst + d / T)
					worst = sum - d / T;
				if (d > 40 * T)
					break;
			}
		}
		/* The bound is reached, not just respected. */
		assert_int_equal(worst, l.burst);
	}
}

/*
 * Shadow mode: a shadow limiter and an enforced one with the same
 * parameters get the same requests.  The shadow one grants every request,
 * yet its state and its decisions are the enforced one's (it records only
 * what enforcement granted), and it counts in would_deny what the enforced
 * one refused.  Every mode, shared and per client; key pools refuse it.
 */
static void
test_shadow(void **state)
{
	static const char *const keys[] = { "a", "b" };
	uint64_t seed = tu_seed("test_shadow"), rs = seed;
	shmt_limit_t ls[4] = {
		{ .limit = 9, .window_ns = 500, .slack_ns = 60, .slack_uses = 3 },
		{ .limit = 9, .window_ns = 500, .slack_ns = 60, .slack_uses = 3,
		  .per_client = 1, .client_capacity = 8 },
		{ .limit = 6, .window_ns = 500, .mode = SHMT_MODE_EXACT },
		{ .limit = 10, .window_ns = 500, .mode = SHMT_MODE_GCRA,
		  .burst = 4 },
	};
	shmt_limit_t kp = { .window_ns = 100, .slack_ns = 10, .slack_uses = 1,
		.keys = keys, .nkeys = 2, .uses_per_key = 1, .shadow = 1 };
	uint64_t refused = 0;

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "shkeys", &kp), -EINVAL);
	kp.shadow = 2;
	kp.nkeys = 0;
	kp.keys = NULL;
	kp.uses_per_key = 0;
	kp.limit = 1;
	assert_int_equal(shmt_limiter_define(g.h, "shtwo", &kp), -EINVAL);
	for (int m = 0; m < 4; m++) {
		char en[16], sh[16];
		shmt_limiter_stat_t se, ss;
		uint64_t maxk = ls[m].mode == SHMT_MODE_GCRA ? ls[m].burst :
		    ls[m].mode == SHMT_MODE_EXACT ? 1 : ls[m].slack_uses;

		snprintf(en, sizeof(en), "en%d", m);
		snprintf(sh, sizeof(sh), "sh%d", m);
		assert_int_equal(shmt_limiter_define(g.h, en, &ls[m]), 0);
		ls[m].shadow = 1;
		assert_int_equal(shmt_limiter_define(g.h, sh, &ls[m]), 0);
		for (int i = 0; i < 3000; i++) {
			uint64_t x = tu_rand(&rs), k = 1 + (x >> 8) % maxk;
			const char *id = ls[m].per_client ?
			    ((x >> 16) & 1 ? "p" : "q") : NULL;
			size_t len = id != NULL ? 1 : 0;
			shmt_decision_t de, ds, dp;
			int re, rs2, rp;

			if (x % 3 == 0)
				g.clk.now += (x >> 24) % 120;
			g.pclk.now = g.clk.now;
			rp = shmt_peek(g.probe, sh, id, len, k, &dp);
			re = shmt_acquire(g.h, en, id, len, k, &de);
			if ((x >> 20) % 3 == 0 && k == 1)
				rs2 = id != NULL ? shmt_try_use(g.h, sh, id, len) :
				    shmt_try_use_key(g.h, sh);
			else
				rs2 = shmt_acquire(g.h, sh, id, len, k, &ds);
			assert_true(re == 0 || re == 1);
			assert_int_equal(rs2, 1);
			assert_int_equal(rp, 1);
			same_decision(&de, &dp, (uint64_t)m * 100000 + (uint64_t)i);
			if (!((x >> 20) % 3 == 0 && k == 1))
				same_decision(&de, &ds, (uint64_t)i);
			refused += re == 0;
		}
		assert_int_equal(shmt_limiter_stat(g.h, en, &se), 0);
		assert_int_equal(shmt_limiter_stat(g.h, sh, &ss), 0);
		assert_int_equal(ss.shadow, 1);
		assert_int_equal(se.shadow, 0);
		assert_int_equal(se.would_deny, 0);
		assert_int_equal(ss.would_deny, se.denied_exhausted +
		    se.denied_slack + se.denied_ring_full + se.denied_table_full);
		assert_int_equal(ss.denied_exhausted + ss.denied_slack +
		    ss.denied_ring_full + ss.denied_table_full, 0);
		assert_int_equal(ss.grants, se.grants);
		assert_int_equal(ss.in_flight, se.in_flight);
	}
	/* The requests did run into the limits. */
	assert_true(refused > 100);
}

/*
 * Several limits in one step: a per-client limit and a shared one granted
 * both or neither, against the models (a request that one of them would
 * refuse takes nothing from the other); every decision is the model's.
 * Refunds: rate mode gives a grant back unless a later one came; bucket
 * and exact mode never do; a receipt is spent once given back.
 */
static void
test_acquire_all_refund(void **state)
{
	uint64_t seed = tu_seed("test_acquire_all_refund"), rs = seed;
	shmt_limit_t pu = { .limit = 4, .window_ns = 1000, .slack_ns = 100,
		.slack_uses = 2, .per_client = 1, .client_capacity = 16 };
	shmt_limit_t al = { .limit = 12, .window_ns = 3000, .slack_ns = 250,
		.slack_uses = 4 };
	shmt_limit_t gc = { .limit = 10, .window_ns = 1000,
		.mode = SHMT_MODE_GCRA, .burst = 3 };
	shmt_limit_t ex = { .limit = 3, .window_ns = 1000,
		.mode = SHMT_MODE_EXACT };
	static struct mb mp[3], ma;
	struct mg mgc;
	const char *ids[3] = { "u1", "u2", "u3" };
	uint64_t both = 0, neither = 0, refunds = 0, kept = 0;
	shmt_request_t rq[3];
	shmt_decision_t out[3], want;
	shmt_receipt_t rc3[3];

	(void)state;
	assert_int_equal(shmt_limiter_define(g.h, "all-pu", &pu), 0);
	assert_int_equal(shmt_limiter_define(g.h, "all-al", &al), 0);
	assert_int_equal(shmt_limiter_define(g.h, "all-gc", &gc), 0);
	assert_int_equal(shmt_limiter_define(g.h, "all-ex", &ex), 0);
	memset(&ma, 0, sizeof(ma));
	ma.L = 12; ma.C = 3000; ma.S = 250; ma.B = 4; ma.nb = 12 + 3;
	for (int c = 0; c < 3; c++) {
		memset(&mp[c], 0, sizeof(mp[c]));
		mp[c].L = 4; mp[c].C = 1000; mp[c].S = 100; mp[c].B = 2;
		mp[c].nb = 10 + 2;
	}
	mg_init(&mgc, 10, 1000, 3);
	/* Bad calls take nothing. */
	memset(rq, 0, sizeof(rq));
	rq[0].limiter = "all-ex";
	rq[0].cost = 1;
	rq[1] = rq[0];
	assert_int_equal(shmt_acquire_all(g.h, rq, 0, NULL, NULL), -EINVAL);
	assert_int_equal(shmt_acquire_all(g.h, rq, SHMT_ACQUIRE_ALL_MAX + 1,
	    NULL, NULL), -EINVAL);
	rq[1].limiter = "nosuch";
	assert_int_equal(shmt_acquire_all(g.h, rq, 2, NULL, NULL), -ENOENT);
	/* One limit twice: each look alone would pass. */
	rq[0].limiter = rq[1].limiter = "all-al";
	assert_int_equal(shmt_acquire_all(g.h, rq, 2, NULL, NULL), -EINVAL);
	rq[0].limiter = rq[1].limiter = "all-pu";
	rq[0].client = rq[1].client = "u9";
	rq[0].client_len = rq[1].client_len = 2;
	assert_int_equal(shmt_acquire_all(g.h, rq, 2, NULL, NULL), -EINVAL);
	rq[1].client = "u8";
	assert_int_equal(shmt_acquire_all(g.h, rq, 2, NULL, NULL), 1);
	rq[0].client = rq[1].client = NULL;
	rq[0].client_len = rq[1].client_len = 0;
	rq[0].limiter = "all-ex";
	rq[1].limiter = "all-gc";
	rq[1].cost = 4;
	assert_int_equal(shmt_acquire_all(g.h, rq, 2, NULL, NULL), -EINVAL);

	for (int i = 0; i < 20000; i++) {
		uint64_t x = tu_rand(&rs), k0 = 1 + (x >> 8) % 2;
		uint64_t k1 = 1 + (x >> 12) % 4;
		int c = (int)((x >> 16) % 3), rc, m0, m1;
		struct mb a0 = mp[c], a1 = ma;

		if (x % 3 == 0)
			g.clk.now += (x >> 24) % 200;
		rq[0].limiter = "all-pu";
		rq[0].client = ids[c];
		rq[0].client_len = 2;
		rq[0].cost = k0;
		rq[1].limiter = "all-al";
		rq[1].client = NULL;
		rq[1].client_len = 0;
		rq[1].cost = k1;
		rc = shmt_acquire_all(g.h, rq, 2, out, rc3);
		m0 = mb_try(&a0, g.clk.now, k0);
		m1 = mb_try(&a1, g.clk.now, k1);
		assert_int_equal(rc, m0 && m1);
		if (rc == 1) {
			mp[c] = a0;
			ma = a1;
			both++;
		} else {
			/* Nothing taken: the models keep only the
			 * releases that were due. */
			mb_release(&mp[c], g.clk.now);
			mb_release(&ma, g.clk.now);
			neither++;
		}
		mb_decide(&a0, g.clk.now, k0, m0, &want);
		same_decision(&want, &out[0], (uint64_t)i);
		mb_decide(&a1, g.clk.now, k1, m1, &want);
		same_decision(&want, &out[1], (uint64_t)i);
		if (rc == 1 && (x >> 40) % 3 == 0) {
			/* Bucket mode keeps its grants. */
			assert_int_equal(shmt_refund(g.h, "all-pu", &rc3[0]), 0);
			assert_int_equal(shmt_refund(g.h, "all-al", &rc3[1]), 0);
			assert_int_equal(shmt_refund(g.h, "all-pu", &rc3[1]),
			    -EINVAL);
		}
		/* Rate mode: a grant given back unless one came after it. */
		if ((x >> 44) % 2 == 0) {
			shmt_decision_t dw;
			int later = (x >> 46) & 1, r;
			shmt_receipt_t keep;

			rq[2].limiter = "all-gc";
			rq[2].client = NULL;
			rq[2].client_len = 0;
			rq[2].cost = 1 + (x >> 48) % 3;
			rc = shmt_acquire_all(g.h, &rq[2], 1, NULL, &keep);
			assert_int_equal(rc, mg_throttle(&mgc, (int64_t)g.clk.now,
			    (int64_t)rq[2].cost, &dw));
			if (rc == 1) {
				int64_t tat = mgc.tat;

				if (later) {
					later = mg_throttle(&mgc,
					    (int64_t)g.clk.now, 1, &dw);
					assert_int_equal(shmt_acquire(g.h,
					    "all-gc", NULL, 0, 1, NULL), later);
				}
				r = shmt_refund(g.h, "all-gc", &keep);
				assert_int_equal(r, !later);
				if (r) {
					mgc.tat = tat - mgc.T *
					    (int64_t)rq[2].cost;
					refunds++;
					/* Spent: again, nothing happens. */
					assert_int_equal(shmt_refund(g.h,
					    "all-gc", &keep), 1);
				} else {
					kept++;
				}
			}
		}
	}
	printf("# %" PRIu64 " both, %" PRIu64 " neither, %" PRIu64
	    " given back, %" PRIu64 " kept\n", both, neither, refunds, kept);
	assert_true(both > 100 && neither > 100 && refunds > 10 && kept > 10);
	/* Exact mode keeps its grants too. */
	rq[0].limiter = "all-ex";
	rq[0].client = NULL;
	rq[0].client_len = 0;
	rq[0].cost = 1;
	rq[1].limiter = "all-gc";
	rq[1].cost = 1;
	g.clk.now += 100000;
	assert_int_equal(shmt_acquire_all(g.h, rq, 2, out, rc3), 1);
	assert_int_equal(shmt_refund(g.h, "all-ex", &rc3[0]), 0);
	assert_int_equal(shmt_refund(g.h, "all-gc", &rc3[0]), -EINVAL);
	assert_int_equal(shmt_refund(g.h, "all-gc", &rc3[1]), 1);
	assert_int_equal(shmt_check(g.h, NULL, NULL), 0);
}

/* A key pool reports the decision of its grant and hands out names in
 * grant order. */
static void
test_decide_keys(void **state)
{
	static const char *const keys[] = { "k0", "key-1", "k2" };
	uint64_t seed = tu_seed("test_decide_keys"), rs = seed;
	shmt_limit_t l;
	struct mb m;
	char buf[16];
	uint64_t grants = 0;

	(void)state;
	memset(&l, 0, sizeof(l));
	l.window_ns = 1000;
	l.slack_ns = 100;
	l.slack_uses = 2;
	l.keys = keys;
	l.nkeys = 3;
	l.uses_per_key = 2;
	assert_int_equal(shmt_limiter_define(g.h, "pool", &l), 0);
	memset(&m, 0, sizeof(m));
	m.L = 6;
	m.C = 1000;
	m.S = 100;
	m.B = 2;
	m.nb = 10 + 3;
	assert_int_equal(shmt_acquire(g.h, "pool", NULL, 0, 2, NULL), -EINVAL);
	assert_int_equal(shmt_next_key_decide(g.h, "pool", buf, 2, NULL),
	    -ERANGE);
	for (uint64_t i = 0; i < 20000; i++) {
		uint64_t x = tu_rand(&rs);
		shmt_decision_t want, got;
		int rc, model;

		if (x % 3 == 0)
			g.clk.now += (x >> 24) % 300;
		rc = shmt_next_key_decide(g.h, "pool", buf, sizeof(buf), &got);
		model = mb_try(&m, g.clk.now, 1);
		assert_int_equal(rc > 0, model);
		if (rc > 0) {
			assert_string_equal(buf, keys[grants % 3]);
			assert_int_equal(rc, (int)strlen(keys[grants % 3]));
			grants++;
		}
		mb_decide(&m, g.clk.now, 1, model, &want);
		same_decision(&want, &got, i);
	}
}

/* The whole segment, byte for byte. */
static void *
seg_bytes(size_t *len)
{
	char path[128];
	struct stat st;
	void *buf;
	int fd;

	snprintf(path, sizeof(path), "/dev/shm%s", g.seg);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

/* Peeks change nothing: not the releases that are due, not a client entry
 * (new, free or live), not a counter. */
static void
test_peek_changes_nothing(void **state)
{
	shmt_limit_t b = { .limit = 5, .window_ns = 100, .slack_ns = 10,
		.slack_uses = 2 };
	shmt_limit_t c = b, x = { .limit = 3, .window_ns = 100,
		.mode = SHMT_MODE_EXACT };
	shmt_decision_t d;
	size_t n0, n1;
	void *before, *after;
	int found = 0;

	(void)state;
	c.per_client = 1;
	c.client_capacity = 4;
	assert_int_equal(shmt_limiter_define(g.h, "pb", &b), 0);
	assert_int_equal(shmt_limiter_define(g.h, "pc", &c), 0);
	assert_int_equal(shmt_limiter_define(g.h, "px", &x), 0);
	g.clk.now = 1000;
	for (int i = 0; i < 5; i++) {
		shmt_acquire(g.h, "pb", NULL, 0, 1, NULL);
		shmt_acquire(g.h, "pc", "u1", 2, 1, NULL);
		shmt_acquire(g.h, "px", NULL, 0, 1, NULL);
		g.clk.now += 7;
	}
	/* Later, when buckets and log records are due: a grant would
	 * release them first. */
	for (uint64_t t = 1000; t < 1400; t += 37) {
		before = seg_bytes(&n0);
		g.pclk.now = t;
		found += shmt_peek(g.probe, "pb", NULL, 0, 2, &d);
		found += shmt_peek(g.probe, "pc", "u1", 2, 1, &d);
		found += shmt_peek(g.probe, "pc", "new", 3, 1, &d);
		found += shmt_peek(g.probe, "px", NULL, 0, 1, &d);
		found += shmt_peek(g.probe, "pb", NULL, 0, 1, NULL);
		after = seg_bytes(&n1);
		assert_int_equal(n0, n1);
		assert_memory_equal(before, after, n0);
		free(before);
		free(after);
	}
	/* ... and those peeks did see grants to give. */
	assert_true(found > 0);
}

static void
test_decide_bad_input(void **state)
{
	shmt_limit_t b = { .limit = 5, .window_ns = 100, .slack_ns = 10,
		.slack_uses = 2 };
	shmt_limit_t c = b;
	shmt_decision_t d;
	char kb[8];

	(void)state;
	c.per_client = 1;
	c.client_capacity = 4;
	assert_int_equal(shmt_limiter_define(g.h, "bb", &b), 0);
	assert_int_equal(shmt_limiter_define(g.h, "bc", &c), 0);
	assert_int_equal(shmt_acquire(NULL, "bb", NULL, 0, 1, &d), -EINVAL);
	assert_int_equal(shmt_acquire(g.h, NULL, NULL, 0, 1, &d), -EINVAL);
	assert_int_equal(shmt_acquire(g.h, "none", NULL, 0, 1, &d), -ENOENT);
	assert_int_equal(shmt_peek(g.h, "none", NULL, 0, 1, &d), -ENOENT);
	assert_int_equal(shmt_acquire(g.h, "bb", NULL, 0, 0, &d), -EINVAL);
	assert_int_equal(shmt_acquire(g.h, "bb", NULL, 0, 3, &d), -EINVAL);
	assert_int_equal(shmt_peek(g.h, "bb", NULL, 0, 3, &d), -EINVAL);
	assert_int_equal(shmt_acquire(g.h, "bb", NULL, 0, 2, &d), 1);
	assert_int_equal(shmt_acquire(g.h, "bb", "x", 1, 1, &d), -EPERM);
	assert_int_equal(shmt_acquire(g.h, "bc", NULL, 0, 1, &d), -EPERM);
	assert_int_equal(shmt_acquire(g.h, "bc", NULL, 3, 1, &d), -EINVAL);
	assert_int_equal(shmt_acquire(g.h, "bc", "x", 0, 1, &d), -EINVAL);
	assert_int_equal(shmt_acquire(g.h, "bc", "x", SHMT_CLIENT_MAX + 1, 1,
	    &d), -E2BIG);
	assert_int_equal(shmt_acquire(g.h, "bc", "x", 1, 2, &d), 1);
	assert_int_equal(shmt_next_key_decide(g.h, "bb", kb, sizeof(kb), &d),
	    -ENOKEY);
}

/* After a change in place that shortens the window, the buckets sealed
 * before it stay in flight for the old, longer window: a refusal's
 * retry_after and reset_after count to that, and the decision ends (it
 * once replayed the releases by the new window and never got there). */
static void
test_decide_held_window(void **state)
{
	shmt_limit_t lim = { .limit = 3, .window_ns = 1000, .slack_ns = 100,
		.slack_uses = 3 };
	shmt_decision_t d;
	char why[128];
	uint64_t t0;

	(void)state;
	alarm(60);      /* a decision that loops fails here, not at ctest's */
	g.clk.now = t0 = 10000000;
	g.pclk.now = t0;
	assert_int_equal(shmt_limiter_define(g.h, "held", &lim), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(shmt_acquire(g.h, "held", NULL, 0, 1, &d), 1);
	/* The bucket closes at t0 + 100; the old window makes it due at
	 * t0 + 1100, the new one would at t0 + 300. */
	lim.window_ns = 200;
	g.clk.now = t0 + 50;
	assert_int_equal(shmt_limiter_update(g.h, "held", &lim, why,
	    sizeof(why)), 0);
	g.clk.now = t0 + 400;
	assert_int_equal(shmt_acquire(g.h, "held", NULL, 0, 1, &d), 0);
	assert_int_equal(d.granted, 0);
	assert_int_equal(d.remaining, 0);
	assert_int_equal(d.retry_after_ns, 700);
	assert_int_equal(d.reset_after_ns, 700);
	g.pclk.now = t0 + 400;
	assert_int_equal(shmt_peek(g.probe, "held", NULL, 0, 1, &d), 0);
	assert_int_equal(d.retry_after_ns, 700);
	/* The answer holds: refused 1 ns before, granted at it. */
	g.clk.now = t0 + 1099;
	assert_int_equal(shmt_try_use_key(g.h, "held"), 0);
	g.clk.now = t0 + 1100;
	assert_int_equal(shmt_acquire(g.h, "held", NULL, 0, 1, &d), 1);
	alarm(0);
}

/* The decision D (of a request at NOW on NAME, CLIENT) and the truth of
 * its reset: one nanosecond before now + reset the limiter is not full
 * (a probe of one use would not leave limit - 1), at it it is. */
static void
check_reset(const char *name, const void *client, size_t len, uint64_t now,
    const shmt_decision_t *d)
{
	shmt_decision_t p;
	int before = 0, at;

	if (d->reset_after_ns > 0) {
		probe(name, client, len, 1, now + d->reset_after_ns - 1, &p);
		before = p.granted && p.remaining == d->limit - 1;
	}
	probe(name, client, len, 1, now + d->reset_after_ns, &p);
	at = p.granted && p.remaining == d->limit - 1;
	if (before || !at)
		fail_msg("at %" PRIu64 ": limit %" PRIu64 " reset %" PRIu64
		    ", yet full 1 ns before: %d, full at it: %d", now,
		    d->limit, d->reset_after_ns, before, at);
}

/* Requests refused whatever the clock: the limiter's denial counters. */
static uint64_t
denials(const char *name)
{
	shmt_limiter_stat_t st;

	assert_int_equal(shmt_limiter_stat(g.h, name, &st), 0);
	return st.denied_exhausted + st.denied_slack + st.denied_ring_full +
	    st.denied_table_full;
}

/*
 * A cost the class takes (up to its slack_uses) above a client's own tier
 * limit can never pass under that rule: peek and acquire refuse it alike,
 * fresh entry or live, with retry_after_ns UINT64_MAX as a deny rule
 * answers, remaining and reset as for any refusal; shmt_acquire_all takes
 * nothing when such a request is one of its members; shmt_wait does not
 * try again and again; once the rule is cleared the cost passes.
 */
static void
test_decide_tier_cost(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 1000, .slack_ns = 100,
		.slack_uses = 5, .per_client = 1, .client_capacity = 16 };
	shmt_client_rule_t two = { .kind = SHMT_RULE_LIMIT, .limit = 2 };
	shmt_limit_t s = { .limit = 10, .window_ns = 1000, .slack_ns = 100,
		.slack_uses = 5 };
	shmt_decision_t d, p, dd[2];
	shmt_limiter_stat_t st;
	uint64_t t0 = g.clk.now + 1000000, n0;

	(void)state;
	alarm(60);
	assert_int_equal(shmt_limiter_define(g.h, "tc", &l), 0);
	assert_int_equal(shmt_limiter_define(g.h, "tcs", &s), 0);
	assert_int_equal(shmt_client_set(g.h, "tc", "alice", 5, &two), 0);
	assert_int_equal(shmt_client_set(g.h, "tc", "bob", 3, &two), 0);
	g.clk.now = g.pclk.now = t0;
	/* A fresh client: nothing in flight, two uses of cost 1 left. */
	shmt_decision_t never = { .granted = 0, .limit = 2, .remaining = 2,
		.retry_after_ns = UINT64_MAX, .reset_after_ns = 0 };
	assert_int_equal(shmt_peek(g.probe, "tc", "alice", 5, 3, &p), 0);
	same_decision(&never, &p, 0);
	assert_int_equal(shmt_acquire(g.h, "tc", "alice", 5, 3, &d), 0);
	same_decision(&never, &d, 1);
	/* Its entry is live now. */
	assert_int_equal(shmt_peek(g.probe, "tc", "alice", 5, 3, &p), 0);
	same_decision(&never, &p, 2);
	check_reset("tc", "alice", 5, t0, &d);
	/* One use in flight: one left, full again after the slack and the
	 * window of its bucket. */
	assert_int_equal(shmt_acquire(g.h, "tc", "alice", 5, 1, &d), 1);
	assert_int_equal(d.remaining, 1);
	assert_int_equal(d.reset_after_ns, 1100);
	g.clk.now = g.pclk.now = t0 + 10;
	never.remaining = 1;
	never.reset_after_ns = 1090;
	assert_int_equal(shmt_peek(g.probe, "tc", "alice", 5, 3, &p), 0);
	same_decision(&never, &p, 3);
	assert_int_equal(shmt_acquire(g.h, "tc", "alice", 5, 3, &d), 0);
	same_decision(&never, &d, 4);
	check_reset("tc", "alice", 5, t0 + 10, &d);
	/* Never, however long one waits. */
	g.clk.now = g.pclk.now = t0 + 1000000000;
	never.remaining = 2;
	never.reset_after_ns = 0;
	assert_int_equal(shmt_peek(g.probe, "tc", "alice", 5, 3, &p), 0);
	same_decision(&never, &p, 5);
	assert_int_equal(shmt_acquire(g.h, "tc", "alice", 5, 3, &d), 0);
	same_decision(&never, &d, 6);

	/* All or none: nothing is taken, in either order, fresh or live. */
	for (int live = 0; live < 2; live++) {
		for (int first = 0; first < 2; first++) {
			shmt_request_t req[2] = {
				{ "tcs", NULL, 0, 1 }, { "tc", "bob", 3, 3 } };

			if (first) {
				shmt_request_t x = req[0];

				req[0] = req[1];
				req[1] = x;
			}
			assert_int_equal(shmt_acquire_all(g.h, req, 2, dd,
			    NULL), 0);
			same_decision(&never, &dd[first ? 0 : 1], 7);
			assert_int_equal(shmt_limiter_stat(g.h, "tcs", &st), 0);
			assert_int_equal(st.in_flight, 0);
			assert_int_equal(st.grants, 0);
		}
		/* Bob's two uses are still his. */
		assert_int_equal(shmt_peek(g.probe, "tc", "bob", 3,
		    live ? 1 : 2, &p), 1);
		if (!live)
			assert_int_equal(shmt_acquire(g.h, "tc", "bob", 3, 1,
			    &d), 1);
		never.remaining = 1;
		never.reset_after_ns = 1100;
	}

	/* A waiter tries once or twice and sleeps out its timeout (20 ms of
	 * real time), as for a deny rule; it used to try again after every
	 * window and slack (1.1 us). */
	n0 = denials("tc");
	assert_int_equal(shmt_wait(g.h, "tc", "alice", 5, 3, 20000000, &d), 0);
	assert_int_equal(d.retry_after_ns, UINT64_MAX);
	assert_true(denials("tc") - n0 <= 8);

	/* Under the class's own limit it passes. */
	assert_int_equal(shmt_client_clear(g.h, "tc", "alice", 5), 1);
	assert_int_equal(shmt_peek(g.probe, "tc", "alice", 5, 3, &p), 1);
	assert_int_equal(shmt_acquire(g.h, "tc", "alice", 5, 3, &d), 1);
	assert_int_equal(d.limit, 10);
	alarm(0);
}

/* The limiter grants its L uses back to back at T and is not full 1 ns
 * before (a peek then leaves fewer than limit - 1). */
static void
exact_full_at(const char *name, uint64_t L, uint64_t t)
{
	shmt_decision_t p;

	probe(name, NULL, 0, 1, t - 1, &p);
	assert_false(p.granted && p.remaining == L - 1);
	g.clk.now = t;
	for (uint64_t i = 0; i < L; i++)
		assert_int_equal(shmt_acquire(g.h, name, NULL, 0, 1, NULL), 1);
}

/*
 * Exact mode after a change in place that shortens the window: the
 * records of grants made before it are held for the old window, and a
 * decision's reset_after_ns counts them (the limiter is full again when
 * every one is due), for a grant and for a peek alike.
 */
static void
test_decide_exact_held(void **state)
{
	shmt_limit_t l = { .limit = 3, .window_ns = 1000,
		.mode = SHMT_MODE_EXACT };
	shmt_decision_t d, p;
	uint64_t t0 = g.clk.now + 1000000;
	char why[128];

	(void)state;
	/* One grant at t0 (window 1000); the window becomes 500; at t0 + 10
	 * the record of t0 is due at t0 + 1000, and the grant made now at
	 * t0 + 10 is held as one decided before the change (exact.c):
	 * due at t0 + 1010. */
	assert_int_equal(shmt_limiter_define(g.h, "xh1", &l), 0);
	assert_int_equal(shmt_limiter_define(g.h, "xh2", &l), 0);
	g.clk.now = g.pclk.now = t0;
	assert_int_equal(shmt_acquire(g.h, "xh1", NULL, 0, 1, &d), 1);
	assert_int_equal(shmt_acquire(g.h, "xh2", NULL, 0, 1, &d), 1);
	l.window_ns = 500;
	assert_int_equal(shmt_limiter_update(g.h, "xh1", &l, why,
	    sizeof(why)), 0);
	assert_int_equal(shmt_limiter_update(g.h, "xh2", &l, why,
	    sizeof(why)), 0);
	g.clk.now = g.pclk.now = t0 + 10;
	shmt_decision_t want = { .granted = 1, .limit = 3, .remaining = 1,
		.retry_after_ns = 0, .reset_after_ns = 1000 };
	assert_int_equal(shmt_peek(g.probe, "xh1", NULL, 0, 1, &p), 1);
	same_decision(&want, &p, 0);
	assert_int_equal(shmt_acquire(g.h, "xh1", NULL, 0, 1, &d), 1);
	same_decision(&want, &d, 1);
	check_reset("xh1", NULL, 0, t0 + 10, &d);

	/* Grants at t0, t0 + 10 and t0 + 20 (the last one due at t0 + 520):
	 * full again at t0 + 1010. */
	assert_int_equal(shmt_acquire(g.h, "xh2", NULL, 0, 1, &d), 1);
	g.clk.now = g.pclk.now = t0 + 20;
	want.remaining = 0;
	want.reset_after_ns = 990;
	assert_int_equal(shmt_peek(g.probe, "xh2", NULL, 0, 1, &p), 1);
	same_decision(&want, &p, 2);
	assert_int_equal(shmt_acquire(g.h, "xh2", NULL, 0, 1, &d), 1);
	same_decision(&want, &d, 3);
	check_reset("xh2", NULL, 0, t0 + 20, &d);
	/* Refused meanwhile, with the same reset. */
	g.clk.now = g.pclk.now = t0 + 30;
	want.granted = 0;
	want.retry_after_ns = 970;
	want.reset_after_ns = 980;
	assert_int_equal(shmt_peek(g.probe, "xh2", NULL, 0, 1, &p), 0);
	same_decision(&want, &p, 4);
	assert_int_equal(shmt_acquire(g.h, "xh2", NULL, 0, 1, &d), 0);
	same_decision(&want, &d, 5);
	exact_full_at("xh1", 3, t0 + 1010);
	exact_full_at("xh2", 3, t0 + 1010);
}

/*
 * Exact mode under random changes in place of its limit and window: a peek
 * answers what the acquire then does, field for field, and every decision
 * holds against the library itself: refused 1 ns before retry_after_ns and
 * granted at it; not full 1 ns before reset_after_ns, and at it L grants
 * back to back.
 */
static void
test_decide_exact_update(void **state)
{
	uint64_t seed = tu_seed("test_decide_exact_update"), rs = seed, op = 0;
	uint64_t rounds = (uint64_t)(60 * tu_scale()) + 2;

	(void)state;
	for (uint64_t r = 0; r < rounds; r++) {
		shmt_limit_t l;
		char name[32], why[128];
		uint64_t N = 2 + tu_rand(&rs) % 12;

		memset(&l, 0, sizeof(l));
		l.limit = N;
		l.window_ns = 100 + tu_rand(&rs) % 1000;
		l.mode = SHMT_MODE_EXACT;
		snprintf(name, sizeof(name), "xu%u", g.nlim++);
		assert_int_equal(shmt_limiter_define(g.h, name, &l), 0);
		for (uint64_t i = 0; i < 400; i++, op++) {
			uint64_t x = tu_rand(&rs);
			shmt_decision_t got, pk, p;
			int rc, prc;

			if (x % 41 == 0) {
				l.limit = 1 + tu_rand(&rs) % N;
				l.window_ns = 100 + tu_rand(&rs) % 1000;
				assert_int_equal(shmt_limiter_update(g.h, name,
				    &l, why, sizeof(why)), 0);
			}
			if (x % 3 == 0)
				g.clk.now += (x >> 20) % (l.window_ns / 3 + 1);
			g.pclk.now = g.clk.now;
			prc = shmt_peek(g.probe, name, NULL, 0, 1, &pk);
			rc = shmt_acquire(g.h, name, NULL, 0, 1, &got);
			assert_int_equal(prc, rc);
			same_decision(&pk, &got, op);
			assert_int_equal(got.limit, l.limit);
			if (!rc) {
				probe(name, NULL, 0, 1, g.clk.now +
				    got.retry_after_ns - 1, &p);
				assert_int_equal(p.granted, 0);
				probe(name, NULL, 0, 1, g.clk.now +
				    got.retry_after_ns, &p);
				assert_int_equal(p.granted, 1);
			}
			check_reset(name, NULL, 0, g.clk.now, &got);
			if ((x >> 40) % 16 == 0 && got.reset_after_ns > 0)
				exact_full_at(name, l.limit, g.clk.now +
				    got.reset_after_ns);
		}
	}
	printf("test_decide_exact_update: %" PRIu64 " decisions\n", op);
}

/*
 * shmt_acquire of one use without a decision takes the plain grant's path
 * (shmt_try_use_key's, shmt_try_use's): two limiters of the same
 * parameters, one driven by the plain calls and the other by shmt_acquire
 * (named and resolved), give the same answer call for call, in every mode,
 * with shadow mode, key pools and per-client tables (a table small enough
 * to fill), and end with the same statistics.
 */
static void
test_acquire_plain_is_try(void **state)
{
	static const char *const keys[] = { "k0", "k1", "k2" };
	uint64_t seed = tu_seed("test_acquire_plain_is_try"), rs = seed;
	shmt_limit_t ls[] = {
		{ .limit = 9, .window_ns = 500, .slack_ns = 60, .slack_uses = 3 },
		{ .limit = 9, .window_ns = 500, .slack_ns = 60, .slack_uses = 3,
		  .shadow = 1 },
		{ .limit = 7, .window_ns = 500, .slack_ns = 40, .slack_uses = 2,
		  .per_client = 1, .client_capacity = 4 },
		{ .limit = 7, .window_ns = 500, .slack_ns = 40, .slack_uses = 2,
		  .per_client = 1, .client_capacity = 4, .shadow = 1 },
		{ .limit = 6, .window_ns = 500, .mode = SHMT_MODE_EXACT },
		{ .limit = 10, .window_ns = 500, .mode = SHMT_MODE_GCRA,
		  .burst = 4 },
		{ .limit = 10, .window_ns = 500, .mode = SHMT_MODE_GCRA,
		  .burst = 3, .per_client = 1, .client_capacity = 4 },
		{ .window_ns = 300, .slack_ns = 30, .slack_uses = 1,
		  .keys = keys, .nkeys = 3, .uses_per_key = 2 },
	};
	uint64_t refused = 0;

	(void)state;
	for (unsigned m = 0; m < sizeof(ls) / sizeof(ls[0]); m++) {
		char tn[16], an[16], rn[16];
		shmt_limiter_stat_t st, sa, sr;
		shmt_limiter_t *rl = NULL;

		snprintf(tn, sizeof(tn), "pt%u", m);
		snprintf(an, sizeof(an), "pa%u", m);
		snprintf(rn, sizeof(rn), "pr%u", m);
		assert_int_equal(shmt_limiter_define(g.h, tn, &ls[m]), 0);
		assert_int_equal(shmt_limiter_define(g.h, an, &ls[m]), 0);
		assert_int_equal(shmt_limiter_define(g.h, rn, &ls[m]), 0);
		assert_int_equal(shmt_limiter_open(g.h, rn, &rl), 0);
		for (int i = 0; i < 4000; i++) {
			uint64_t x = tu_rand(&rs);
			char id[2] = { (char)('a' + (x >> 16) % 6), 0 };
			const char *c = ls[m].per_client ? id : NULL;
			size_t len = c != NULL ? 1 : 0;
			int rt, ra, rr;

			if (x % 3 == 0)
				g.clk.now += (x >> 24) % 150;
			rt = c != NULL ? shmt_try_use(g.h, tn, c, len) :
			    shmt_try_use_key(g.h, tn);
			ra = shmt_acquire(g.h, an, c, len, 1, NULL);
			rr = shmt_limiter_acquire(rl, c, len, 1, NULL);
			if (rt != ra || rt != rr)
				fail_msg("seed %" PRIu64 " limiter %u op %d: "
				    "try %d, acquire %d, resolved %d", seed, m,
				    i, rt, ra, rr);
			assert_true(rt == 0 || rt == 1);
			refused += rt == 0;
		}
		assert_int_equal(shmt_limiter_stat(g.h, tn, &st), 0);
		assert_int_equal(shmt_limiter_stat(g.h, an, &sa), 0);
		assert_int_equal(shmt_limiter_stat(g.h, rn, &sr), 0);
		assert_int_equal(sa.grants, st.grants);
		assert_int_equal(sr.grants, st.grants);
		assert_int_equal(sa.in_flight, st.in_flight);
		assert_int_equal(sa.denied_exhausted, st.denied_exhausted);
		assert_int_equal(sa.denied_slack, st.denied_slack);
		assert_int_equal(sa.denied_ring_full, st.denied_ring_full);
		assert_int_equal(sa.denied_table_full, st.denied_table_full);
		assert_int_equal(sa.would_deny, st.would_deny);
		assert_int_equal(sr.would_deny, st.would_deny);
		assert_true(st.grants > 0);
		shmt_limiter_close(rl);
	}
	/* The requests did run into the limits. */
	assert_true(refused > 1000);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decide_buckets),
		cmocka_unit_test(test_decide_client),
		cmocka_unit_test(test_decide_exact),
		cmocka_unit_test(test_decide_keys),
		cmocka_unit_test(test_decide_gcra),
		cmocka_unit_test(test_gcra_bound),
		cmocka_unit_test(test_gcra_client_churn),
		cmocka_unit_test(test_shadow),
		cmocka_unit_test(test_acquire_all_refund),
		cmocka_unit_test(test_peek_changes_nothing),
		cmocka_unit_test(test_decide_bad_input),
		cmocka_unit_test(test_decide_held_window),
		cmocka_unit_test(test_decide_tier_cost),
		cmocka_unit_test(test_decide_exact_held),
		cmocka_unit_test(test_decide_exact_update),
		cmocka_unit_test(test_acquire_plain_is_try),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
