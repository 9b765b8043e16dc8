/* SPDX-License-Identifier: MIT */
/*
 * Reference models for the limiter tests, transcribed from the seed's Python
 * (Throttler, Bucket) and from the definition of an exact sliding window, and
 * the checker for windows that certainly hold too many grants.
 */
#include "test_limiter_util.h"

#include <errno.h>
#include <stdlib.h>

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
