/* SPDX-License-Identifier: MIT */
/*
 * Reference models for the limiter tests, transcribed from the seed's Python
 * (Throttler, Bucket) and from the definition of an exact sliding window, and
 * the checker for windows that certainly hold too many grants.
 */
#include "test_limiter_util.h"
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t
tl_div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

uint32_t
tl_buckets_needed(uint64_t limit, uint64_t window, uint64_t slack,
    uint64_t slack_uses)
{
	return (uint32_t)(tl_div_up(window, slack) + tl_div_up(limit, slack_uses));
}

int
tl_throttle_init(struct tl_throttle *m, uint64_t limit, uint64_t window,
    uint64_t slack, uint64_t slack_uses)
{
	m->limit = limit;
	m->cooldown = window;
	m->open_time = slack;
	m->bucket_size = slack_uses;
	m->num_buckets = tl_buckets_needed(limit, window, slack, slack_uses);
	m->free = limit;
	m->head = 0;
	m->len = 0;
	m->overflow = 0;
	m->q = calloc(m->num_buckets, sizeof(*m->q));
	return m->q == NULL ? -ENOMEM : 0;
}

void
tl_throttle_free(struct tl_throttle *m)
{
	free(m->q);
	m->q = NULL;
}

static struct tl_bucket *
tl_at(struct tl_throttle *m, uint32_t i)
{
	return &m->q[(m->head + i) % m->num_buckets];
}

int
tl_throttle_try(struct tl_throttle *m, shmt_time_t now)
{
	struct tl_bucket *last;

	/* release_expired_buckets */
	while (m->len > 0 && tl_at(m, 0)->close + m->cooldown <= now) {
		m->free += tl_at(m, 0)->keycount;
		m->head = (m->head + 1) % m->num_buckets;
		m->len--;
	}
	if (m->free == 0)
		return 0;
	last = m->len > 0 ? tl_at(m, m->len - 1) : NULL;
	/* will_accept: not full and not closed. */
	if (last == NULL || last->keycount == m->bucket_size ||
	    now >= last->close) {
		if (m->len >= m->num_buckets) {
			/* The seed asserts here; the bound says it cannot. */
			m->overflow = 1;
			return 0;
		}
		last = tl_at(m, m->len++);
		last->keycount = 0;
		last->close = now + m->open_time;
	}
	last->keycount++;
	m->free--;
	return 1;
}

int
tl_exact_init(struct tl_exact *m, uint64_t limit, uint64_t window)
{
	m->limit = limit;
	m->window = window;
	m->head = 0;
	m->len = 0;
	m->q = calloc(limit, sizeof(*m->q));
	return m->q == NULL ? -ENOMEM : 0;
}

void
tl_exact_free(struct tl_exact *m)
{
	free(m->q);
	m->q = NULL;
}

uint64_t
tl_exact_held(struct tl_exact *m, shmt_time_t now)
{
	while (m->len > 0 && m->q[m->head] + m->window <= now) {
		m->head = (m->head + 1) % m->limit;
		m->len--;
	}
	return m->len;
}

int
tl_exact_try(struct tl_exact *m, shmt_time_t now)
{
	if (tl_exact_held(m, now) >= m->limit)
		return 0;
	m->q[(m->head + m->len) % m->limit] = now;
	m->len++;
	return 1;
}

static int
tl_cmp_before(const void *a, const void *b)
{
	const struct tl_grant *x = a, *y = b;

	return (x->before > y->before) - (x->before < y->before);
}

uint64_t
tl_violations(struct tl_grant *g, size_t n, uint64_t window, uint64_t limit,
    uint32_t group, uint64_t *worst)
{
	uint64_t bad = 0, most = 0;
	size_t j, k, lo = 0;

	qsort(g, n, sizeof(*g), tl_cmp_before);
	for (j = 0; j < n; j++) {
		uint64_t a = g[j].before, in = 0;

		if (group != UINT32_MAX && g[j].group != group)
			continue;
		/* Only grants with before >= a can certainly lie in the
		 * window (lo is the first of them, ties included), and none
		 * with before >= a + window. */
		while (g[lo].before < a)
			lo++;
		for (k = lo; k < n && g[k].before - a < window; k++)
			if ((group == UINT32_MAX || g[k].group == group) &&
			    g[k].after >= g[k].before &&
			    g[k].after - a < window)
				in++;
		if (in > limit) {
			bad++;
			if (in > most)
				most = in;
		}
	}
	if (worst != NULL)
		*worst = most;
	return bad;
}

/* ---- The multi-process stress set ---------------------------------------- */

#define TL_KEYS_N 5
#define TL_KEY_USES 10
#define TL_CLIENTS_N 8
#define TL_CLIENT_LIMIT 10

static const char *const tl_stress_names[TL_NLIM] = { "bk", "keys", "ex",
	"pc" };
static const char *const tl_keynames[TL_KEYS_N] = { "key-0", "key-1",
	"key-2", "key-3", "key-4" };

struct tl_log *
tl_log_map(uint64_t cap)
{
	size_t len = sizeof(struct tl_log) + cap * sizeof(struct tl_rec);
	struct tl_log *log = mmap(NULL, len, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (log == MAP_FAILED)
		return NULL;
	log->cap = cap;
	return log;
}

void
tl_log_unmap(struct tl_log *log)
{
	munmap(log, sizeof(struct tl_log) + log->cap * sizeof(struct tl_rec));
}

int
tl_stress_define(shmt_t *h)
{
	shmt_limit_t l[TL_NLIM];
	int i, rc;

	memset(l, 0, sizeof(l));
	for (i = 0; i < TL_NLIM; i++) {
		l[i].limit = 50;
		l[i].window_ns = TL_WINDOW_NS;
		l[i].slack_ns = TL_SLACK_NS;
		l[i].slack_uses = 5;
	}
	l[TL_KEYS].keys = tl_keynames;
	l[TL_KEYS].nkeys = TL_KEYS_N;
	l[TL_KEYS].uses_per_key = TL_KEY_USES;
	l[TL_EXACT].mode = SHMT_MODE_EXACT;
	l[TL_EXACT].slack_ns = 0;
	l[TL_EXACT].slack_uses = 0;
	l[TL_CLIENT].limit = TL_CLIENT_LIMIT;
	l[TL_CLIENT].slack_uses = 2;
	l[TL_CLIENT].per_client = 1;
	l[TL_CLIENT].client_capacity = TL_CLIENTS_N / 2;
	for (i = 0; i < TL_NLIM; i++)
		if ((rc = shmt_limiter_define(h, tl_stress_names[i], &l[i])) != 0)
			return rc;
	return 0;
}

static uint64_t
tl_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void
tl_log_grant(struct tl_log *log, uint32_t lim, uint32_t group,
    uint64_t before, uint64_t after)
{
	uint64_t i = __atomic_fetch_add(&log->n, 1, __ATOMIC_RELAXED);
	struct tl_rec *r;

	if (i >= log->cap)
		return;
	r = &log->rec[i];
	r->before = before;
	r->after = after;
	r->lim = lim;
	r->group = group;
	__atomic_store_n(&r->valid, 1, __ATOMIC_RELEASE);
}

int
tl_stress_call(shmt_t *h, struct tl_log *log, unsigned which, uint64_t *rs)
{
	uint64_t before, after, took, max;
	uint32_t group = 0;
	char key[16], client[16];
	int rc;

	if (which == TL_CLIENT) {
		group = (uint32_t)(tu_rand(rs) % TL_CLIENTS_N);
		snprintf(client, sizeof(client), "client-%u", group);
	}
	before = tl_mono();
	switch (which) {
	case TL_KEYS:
		rc = shmt_next_key(h, "keys", key, sizeof(key));
		break;
	case TL_CLIENT:
		rc = shmt_try_use(h, "pc", client, strlen(client));
		break;
	default:
		rc = shmt_try_use_key(h, tl_stress_names[which]);
		break;
	}
	after = tl_mono();
	took = after - before;
	max = __atomic_load_n(&log->max_call_ns, __ATOMIC_RELAXED);
	while (took > max && !__atomic_compare_exchange_n(&log->max_call_ns,
	    &max, took, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	__atomic_fetch_add(&log->calls, 1, __ATOMIC_RELAXED);
	if (rc < 0) {
		int64_t none = 0;

		__atomic_fetch_add(&log->errors, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&log->errors_by_lim[which], 1,
		    __ATOMIC_RELAXED);
		__atomic_compare_exchange_n(&log->first_error, &none, rc, 0,
		    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		return rc;
	}
	if (rc > 0) {
		if (which == TL_KEYS)
			group = (uint32_t)strtoul(key + 4, NULL, 10);
		tl_log_grant(log, which, group, before, after);
	}
	return rc;
}

uint64_t
tl_stress_check(struct tl_log *log, uint64_t grants[TL_NLIM])
{
	static const uint64_t limit[TL_NLIM] = { 50, 50, 50, TL_CLIENT_LIMIT };
	static const uint32_t groups[TL_NLIM] = { 0, TL_KEYS_N, 0,
		TL_CLIENTS_N };
	uint64_t n = log->n < log->cap ? log->n : log->cap, bad = 0;
	struct tl_grant *g = calloc(n + 1, sizeof(*g));
	unsigned lim;

	if (g == NULL)
		return UINT64_MAX;
	for (lim = 0; lim < TL_NLIM; lim++) {
		uint64_t k = 0, i, worst = 0, b;

		for (i = 0; i < n; i++) {
			const struct tl_rec *r = &log->rec[i];

			if (__atomic_load_n(&r->valid, __ATOMIC_ACQUIRE) &&
			    r->lim == lim) {
				g[k].before = r->before;
				g[k].after = r->after;
				g[k].group = r->group;
				k++;
			}
		}
		grants[lim] = k;
		if (groups[lim] == 0) {
			b = tl_violations(g, k, TL_WINDOW_NS, limit[lim],
			    UINT32_MAX, &worst);
		} else {
			uint64_t w;
			uint32_t grp;

			/* A key pool also keeps the limiter's limit. */
			b = lim == TL_KEYS ? tl_violations(g, k, TL_WINDOW_NS,
			    limit[lim], UINT32_MAX, &worst) : 0;
			for (grp = 0; grp < groups[lim]; grp++) {
				b += tl_violations(g, k, TL_WINDOW_NS,
				    lim == TL_KEYS ? TL_KEY_USES : limit[lim],
				    grp, &w);
				worst = w > worst ? w : worst;
			}
		}
		printf("# %-4s %8" PRIu64 " grants, %" PRIu64
		    " windows certainly over the limit (worst %" PRIu64 "), %"
		    PRIu64 " errors\n", tl_stress_names[lim], k, b, worst,
		    log->errors_by_lim[lim]);
		bad += b;
	}
	free(g);
	return bad;
}

void
tl_stress_capacity_back(shmt_t *h)
{
	shmt_limiter_stat_t st;
	char key[16];
	int i, k;

	assert_true(shmt_housekeep(h, NULL) >= 0);
	for (i = 0; i < TL_NLIM; i++) {
		assert_int_equal(shmt_limiter_stat(h, tl_stress_names[i], &st),
		    0);
		if (st.in_flight != 0)
			fail_msg("%s: %" PRIu64 " uses still in flight",
			    tl_stress_names[i], st.in_flight);
	}
	for (k = 0; k < 50; k++) {
		assert_int_equal(shmt_try_use_key(h, "bk"), 1);
		assert_true(shmt_next_key(h, "keys", key, sizeof(key)) > 0);
		assert_int_equal(shmt_try_use_key(h, "ex"), 1);
	}
	for (k = 0; k < TL_CLIENT_LIMIT; k++)
		assert_int_equal(shmt_try_use(h, "pc", "after", 5), 1);
}

uint64_t
tl_windows_over(const uint64_t *t, size_t n, uint64_t window, uint64_t limit)
{
	uint64_t bad = 0;
	size_t j = 0;

	for (size_t i = 0; i < n; i++) {
		if (j < i)
			j = i;
		while (j < n && t[j] < t[i] + window)
			j++;
		if (j - i > limit)
			bad++;
	}
	return bad;
}
