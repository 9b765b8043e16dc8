/* SPDX-License-Identifier: MIT */
/*
 * Limiter rows: the one set of rules for a limiter's parameters, defining a
 * row under the table lock, the process-local views of rows (validated
 * copies, renewed when a shared ring's parameters change), finding a row by
 * name through the process-local name cache, and the row's denial counters.
 */
#include "table.h"

#include "clients.h"
#include "gcra.h"
#include "lock.h"
#include "ring.h"
#include "util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- Parameters -------------------------------------------------------- */

#define REFUSE(...) do { \
		if (why != NULL && why_len > 0) \
			snprintf(why, why_len, __VA_ARGS__); \
		return -EINVAL; \
	} while (0)

int
shmt__limit_check(const shmt_limit_t *l, struct lim_geom *g, char *why,
    size_t why_len)
{
	uint64_t limit = l->limit;

	memset(g, 0, sizeof(*g));
	if (why != NULL && why_len > 0)
		why[0] = '\0';
	if (l->mode != SHMT_MODE_BUCKETS && l->mode != SHMT_MODE_EXACT &&
	    l->mode != SHMT_MODE_GCRA)
		REFUSE("mode: must be SHMT_MODE_BUCKETS, SHMT_MODE_EXACT or "
		    "SHMT_MODE_GCRA, not %d", l->mode);
	if ((l->burst != 0) != (l->mode == SHMT_MODE_GCRA))
		REFUSE("burst: from 1 in SHMT_MODE_GCRA, 0 in the other modes");
	if (l->shadow != 0 && l->shadow != 1)
		REFUSE("shadow: must be 0 or 1");
	if (l->shadow && l->nkeys > 0)
		REFUSE("shadow: a key pool cannot be in shadow mode (a name "
		    "handed out must be real)");
	if (l->window_ns == 0)
		REFUSE("window_ns: must be above 0");
	if (l->global != 0 && (l->global != 1 || l->mode != SHMT_MODE_BUCKETS ||
	    l->per_client || l->shadow))
		REFUSE("global: 0 or 1, and a global limiter is a shared "
		    "buckets limiter, with or without a key pool (not per "
		    "client, not shadow)");
	/* Each below the span first, so that the sum cannot wrap. */
	if (l->global != 0 && (l->window_ns >= SHMT_GLOBAL_SPAN_MAX ||
	    l->slack_ns >= SHMT_GLOBAL_SPAN_MAX ||
	    l->window_ns + l->slack_ns >= SHMT_GLOBAL_SPAN_MAX))
		REFUSE("global: window_ns + slack_ns must be below %llu ns "
		    "(SHMT_GLOBAL_SPAN_MAX)",
		    (unsigned long long)SHMT_GLOBAL_SPAN_MAX);
	if (l->nkeys > 0) {
		if (l->nkeys > SHMT_KEYS_MAX)
			REFUSE("nkeys: at most SHMT_KEYS_MAX (%d) key names",
			    SHMT_KEYS_MAX);
		if (l->keys == NULL)
			REFUSE("keys: NULL, but nkeys is %u", l->nkeys);
		if (l->uses_per_key == 0)
			REFUSE("uses_per_key: must be at least 1 with a key "
			    "pool");
		if (l->per_client)
			REFUSE("per_client: a key pool cannot be per client");
		if (limit == 0)
			limit = (uint64_t)l->nkeys * l->uses_per_key;
		if (limit != (uint64_t)l->nkeys * l->uses_per_key)
			REFUSE("limit: with a key pool it must be nkeys x "
			    "uses_per_key (%" PRIu64 ") or 0",
			    (uint64_t)l->nkeys * l->uses_per_key);
		for (uint32_t i = 0; i < l->nkeys; i++) {
			size_t n;

			if (l->keys[i] == NULL)
				REFUSE("keys: name %u is NULL", i);
			n = strnlen(l->keys[i], SHMT_KEYNAME_MAX + 1);
			if (n == 0 || n > SHMT_KEYNAME_MAX)
				REFUSE("keys: name %u must be 1 to "
				    "SHMT_KEYNAME_MAX (%d) bytes", i,
				    SHMT_KEYNAME_MAX);
			if (n > g->keymax)
				g->keymax = (uint32_t)n;
		}
		g->keystride = (g->keymax + 1 + 7) & ~7U;
		g->keys_bytes = (uint64_t)g->keystride * l->nkeys;
	} else if (l->keys != NULL) {
		REFUSE("keys: set, but nkeys is 0");
	} else if (l->uses_per_key != 0) {
		REFUSE("uses_per_key: needs a key pool (nkeys is 0)");
	}
	if (limit == 0 || limit > SHMT_LIMIT_MAX)
		REFUSE("limit: must be from 1 to %llu",
		    (unsigned long long)SHMT_LIMIT_MAX);
	g->limit = limit;
	if (l->mode == SHMT_MODE_GCRA) {
		if (l->nkeys != 0)
			REFUSE("nkeys: SHMT_MODE_GCRA takes no key pool");
		if (l->slack_ns != 0)
			REFUSE("slack_ns: SHMT_MODE_GCRA has no slack (it has "
			    "burst)");
		if (l->slack_uses != 0)
			REFUSE("slack_uses: SHMT_MODE_GCRA has no slack (it has "
			    "burst)");
		if (l->burst > SHMT_LIMIT_MAX)
			REFUSE("burst: must be from 1 to %llu",
			    (unsigned long long)SHMT_LIMIT_MAX);
		if (shmt__gcra_check(l) != 0)
			REFUSE("window_ns: SHMT_MODE_GCRA needs window_ns / limit "
			    "of at least 1 ns, and burst x (window_ns / limit) "
			    "under 2^62 ns");
	} else if (l->mode == SHMT_MODE_EXACT) {
		if (limit > SHMT_EXACT_LIMIT_MAX)
			REFUSE("limit: exact mode keeps one record per use: "
			    "at most %llu",
			    (unsigned long long)SHMT_EXACT_LIMIT_MAX);
		if (l->per_client)
			REFUSE("per_client: exact mode cannot be per client");
		g->ring_bytes = limit * sizeof(struct shmt_log_slot);
	} else {
		uint64_t nb;

		if (l->slack_ns == 0)
			REFUSE("slack_ns: must be above 0 in buckets mode");
		if (l->slack_uses == 0 || l->slack_uses > limit)
			REFUSE("slack_uses: must be from 1 to limit (%" PRIu64
			    ") in buckets mode", limit);
		nb = div_up(l->window_ns, l->slack_ns) +
		    div_up(limit, l->slack_uses);
		if (nb > SHMT_BUCKETS_MAX)
			REFUSE("slack_ns: window_ns / slack_ns + limit / "
			    "slack_uses needs %" PRIu64 " buckets, more than "
			    "%u: raise slack_ns or slack_uses", nb,
			    SHMT_BUCKETS_MAX);
		g->nb = (uint32_t)nb;
		g->ring_bytes = nb * sizeof(struct shmt_ring_slot);
	}
	if (l->per_client) {
		if (l->client_capacity == 0 || l->client_capacity > (1U << 24))
			REFUSE("client_capacity: must be from 1 to %u for a "
			    "per-client limiter", 1U << 24);
		g->entsize = (uint32_t)(sizeof(struct shmt_client) +
		    g->ring_bytes);
		g->clients_bytes = (uint64_t)g->entsize * l->client_capacity;
		g->ring_bytes = 0;
		if (l->client_overrides > SHMT_OVERRIDES_MAX)
			REFUSE("client_overrides: must be from 0 (%u) to %u",
			    SHMT_OVERRIDES_DEFAULT, SHMT_OVERRIDES_MAX);
		g->ovcap = l->client_overrides != 0 ? l->client_overrides :
		    SHMT_OVERRIDES_DEFAULT;
		g->ov_bytes = (uint64_t)g->ovcap * sizeof(struct shmt_override);
	} else if (l->client_capacity != 0) {
		REFUSE("client_capacity: set, but per_client is 0");
	} else if (l->client_overrides != 0) {
		REFUSE("client_overrides: set, but per_client is 0");
	}
	return 0;
}

#undef REFUSE

int
shmt__lim_name_check(const char *name, size_t *lenp)
{
	size_t len;

	if (name == NULL)
		return -EINVAL;
	len = strnlen(name, SHMT_LIMITER_NAME_MAX + 1);
	if (len > SHMT_LIMITER_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0)
		return -EINVAL;
	*lenp = len;
	return 0;
}

/* ---- Views: validated copies of rows ----------------------------------- */

struct shmt_lim *
shmt__rows(const shmt_t *h, uint32_t *n)
{
	*n = (uint32_t)(h->reg[SHMT_R_LIMITERS].rg_size / sizeof(struct shmt_lim));
	return shmt__region(h, SHMT_R_LIMITERS);
}

uint32_t
shmt__row_named(const struct shmt_lim *lim, uint32_t n, const char *name)
{
	uint32_t r;

	for (r = 0; r < n; r++)
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) ==
		    SHMT_LIM_READY &&
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) == 0)
			break;
	return r;
}

static int
arena_span(const shmt_t *h, uint64_t off, uint64_t len, void **out)
{
	if (off % 16 != 0 || !shmt__in_region(h, SHMT_R_ARENA, off, len))
		return SHMT_ECORRUPT;
	*out = (char *)shmt__region(h, SHMT_R_ARENA) + off;
	return 0;
}

/* The parameters in force for the generation W's tag names, read like a
 * seqlock against W's tag (a block is rewritten only after W has left its
 * generation, see shmt_limiter_update), and checked: buckets mode's ring
 * must hold them and the caps must cover them; rate mode's interval and
 * tolerance must be in range (shmt__gcra_check); exact mode's limit must
 * fit the log.  Every load is an acquire, so that none moves after the
 * tag's second load (no fence: gcc cannot instrument one for
 * ThreadSanitizer). */
static int
view_params(struct shmt_lim *lim, struct shmt_lview *v)
{
	for (int tries = 0; tries < 64; tries++) {
		uint32_t gen = (uint32_t)__atomic_load_n(&lim->lm_w.w[1],
		    __ATOMIC_ACQUIRE) & 0xffffU;
		const struct shmt_lparams *p = &lim->lm_p[gen & 1];
		struct shmt_lparams q;
		shmt_limit_t l;
		int bad;

		v->pgen = gen;
		if (gen == 0)
			return 0;        /* the identity's parameters */
		q.lp_limit = __atomic_load_n(&p->lp_limit, __ATOMIC_ACQUIRE);
		q.lp_window = __atomic_load_n(&p->lp_window, __ATOMIC_ACQUIRE);
		q.lp_slack = __atomic_load_n(&p->lp_slack, __ATOMIC_ACQUIRE);
		q.lp_hold_window = __atomic_load_n(&p->lp_hold_window,
		    __ATOMIC_ACQUIRE);
		q.lp_slack_uses = __atomic_load_n(&p->lp_slack_uses,
		    __ATOMIC_ACQUIRE);
		q.lp_hold_serial = __atomic_load_n(&p->lp_hold_serial,
		    __ATOMIC_ACQUIRE);
		q.lp_gen = __atomic_load_n(&p->lp_gen, __ATOMIC_ACQUIRE);
		q.lp_limit_cap = __atomic_load_n(&p->lp_limit_cap,
		    __ATOMIC_ACQUIRE);
		q.lp_uses_cap = __atomic_load_n(&p->lp_uses_cap,
		    __ATOMIC_ACQUIRE);
		if (((uint32_t)__atomic_load_n(&lim->lm_w.w[1],
		    __ATOMIC_RELAXED) & 0xffffU) != gen)
			continue;
		bad = q.lp_gen != gen || q.lp_limit == 0 ||
		    q.lp_limit > SHMT_LIMIT_MAX || q.lp_window == 0;
		if (v->mode == SHMT_MODE_GCRA) {
			memset(&l, 0, sizeof(l));
			l.mode = SHMT_MODE_GCRA;
			l.limit = q.lp_limit;
			l.window_ns = q.lp_window;
			l.burst = q.lp_burst;
			if (bad || shmt__gcra_check(&l) != 0)
				return SHMT_ECORRUPT;
			v->burst = q.lp_burst;
		} else if (v->mode == SHMT_MODE_EXACT) {
			if (bad || q.lp_limit > v->nlog || q.lp_hold_seq < 0)
				return SHMT_ECORRUPT;
			v->hold_seq = q.lp_hold_seq;
		} else {
			if (bad || q.lp_slack == 0 || q.lp_slack_uses == 0 ||
			    q.lp_slack_uses > q.lp_limit ||
			    div_up(q.lp_window, q.lp_slack) +
			    div_up(q.lp_limit, q.lp_slack_uses) > v->nb ||
			    q.lp_limit_cap < q.lp_limit ||
			    q.lp_limit_cap > SHMT_LIMIT_MAX ||
			    q.lp_uses_cap < q.lp_slack_uses ||
			    q.lp_uses_cap > q.lp_limit_cap)
				return SHMT_ECORRUPT;
			v->slack = q.lp_slack;
			v->slack_uses = q.lp_slack_uses;
			v->hold_serial = q.lp_hold_serial;
			v->limit_cap = q.lp_limit_cap;
			v->uses_cap = q.lp_uses_cap;
		}
		v->limit = q.lp_limit;
		v->window = q.lp_window;
		v->hold_window = q.lp_hold_window;
		return 0;
	}
	return SHMT_EBUSYLOOP;
}

int
shmt__view_fill(const shmt_t *h, uint32_t r, struct shmt_lim *lim,
    struct shmt_lview *v)
{
	shmt_limit_t l;
	struct lim_geom g;
	void *p;
	int rc;

	if (__atomic_load_n(&lim->lm_state, __ATOMIC_ACQUIRE) != SHMT_LIM_READY)
		return -ENOENT;
	memset(v, 0, sizeof(*v));
	memcpy(v->name, lim->lm_name, sizeof(v->name));
	v->name[SHMT_LIMITER_NAME_MAX] = '\0';
	v->lv_row = r;
	v->lim = lim;
	v->mode = lim->lm_mode;
	v->limit = lim->lm_limit;
	v->window = lim->lm_window;
	v->slack = lim->lm_slack;
	v->slack_uses = lim->lm_slack_uses;
	v->flags = lim->lm_flags;
	v->nb = lim->lm_nbuckets;
	v->nkeys = lim->lm_nkeys;
	v->uses_per_key = lim->lm_uses_per_key;
	v->nb_magic = v->nb != 0 ? UINT64_MAX / v->nb + 1 : 0;
	v->keystride = lim->lm_keystride;
	v->keymax = lim->lm_keymax;
	v->capacity = lim->lm_capacity;
	v->entsize = lim->lm_entsize;

	/* Recompute the geometry from the parameters and insist on it. */
	memset(&l, 0, sizeof(l));
	l.limit = v->limit;
	l.window_ns = v->window;
	l.slack_ns = v->slack;
	l.slack_uses = v->slack_uses;
	l.mode = (int)v->mode;
	l.per_client = (v->flags & SHMT_LIMF_PER_CLIENT) != 0;
	l.client_capacity = l.per_client ? v->capacity : 0;
	l.client_overrides = l.per_client ? lim->lm_ov_cap : 0;
	l.burst = v->burst = lim->lm_burst;
	l.global = (v->flags & SHMT_LIMF_GLOBAL) != 0;
	if ((v->flags & SHMT_LIMF_SHADOW) && (v->flags & SHMT_LIMF_KEYS))
		return SHMT_ECORRUPT;
	if ((rc = shmt__limit_check(&l, &g, NULL, 0)) != 0 || g.nb != v->nb ||
	    v->name[0] == '\0')
		return SHMT_ECORRUPT;
	if (v->mode == SHMT_MODE_GCRA && !l.per_client) {
		/* One word: the theoretical arrival time, in lm_w. */
	} else if (v->mode == SHMT_MODE_EXACT) {
		if ((rc = arena_span(h, lim->lm_ring_off, g.ring_bytes, &p)) != 0)
			return rc;
		v->log = p;
	} else if (!l.per_client) {
		if ((rc = arena_span(h, lim->lm_ring_off, g.ring_bytes, &p)) != 0)
			return rc;
		v->ring = p;
	} else {
		if (v->entsize != g.entsize ||
		    (rc = arena_span(h, lim->lm_clients_off, g.clients_bytes,
		    &p)) != 0)
			return SHMT_ECORRUPT;
		v->clients = p;
		/* The override table follows the clients, on its own lines. */
		if (lim->lm_ov_cap != g.ovcap || lim->lm_ov_off % 16 != 0 ||
		    lim->lm_ov_off < lim->lm_clients_off + g.clients_bytes ||
		    arena_span(h, lim->lm_ov_off, g.ov_bytes, &p) != 0)
			return SHMT_ECORRUPT;
		v->ov = p;
		v->ovcap = g.ovcap;
	}
	if (v->flags & SHMT_LIMF_KEYS) {
		if (v->nkeys == 0 || v->nkeys > SHMT_KEYS_MAX ||
		    v->keymax == 0 || v->keymax > SHMT_KEYNAME_MAX ||
		    v->keystride != ((v->keymax + 1 + 7) & ~7U) ||
		    lim->lm_uses_per_key == 0 ||
		    (uint64_t)v->nkeys * lim->lm_uses_per_key != v->limit)
			return SHMT_ECORRUPT;
		if ((rc = arena_span(h, lim->lm_keys_off,
		    (uint64_t)v->nkeys * v->keystride, &p)) != 0)
			return rc;
		v->keys = p;
	} else if (v->nkeys != 0) {
		return SHMT_ECORRUPT;
	}
	if (v->mode == SHMT_MODE_EXACT) {
		v->nlog = (uint32_t)v->limit;   /* at most 2^20 */
		v->hold_seq = 0;
	} else {
		v->limit_cap = v->limit;
		v->uses_cap = (uint32_t)v->slack_uses;
		/* A client's entry may hold what an override let it take,
		 * above the class limit: a tier's buckets count up to its B'
		 * (shmt__tier_slack_uses), its in flight up to its limit. */
		if ((v->flags & SHMT_LIMF_PER_CLIENT) &&
		    v->mode == SHMT_MODE_BUCKETS) {
			v->limit_cap = SHMT_LIMIT_MAX;
			v->uses_cap = (uint32_t)shmt__tier_slack_uses(v,
			    SHMT_LIMIT_MAX);
		}
	}
	/* Key pools (their names follow the grant numbers) and per-client
	 * limiters keep their definition's parameters; global limiters only
	 * in buckets mode exist. */
	v->pgen_check = !(v->flags & (SHMT_LIMF_PER_CLIENT | SHMT_LIMF_KEYS));
	if ((v->flags & (SHMT_LIMF_PER_CLIENT | SHMT_LIMF_KEYS)) &&
	    v->mode == SHMT_MODE_BUCKETS) {
		/* A definition changed by a move (redefine.c) leaves in block
		 * 0 how long the buckets it carried stay held (lp_hold_window)
		 * and the latest close time among them (in lp_slack), and for
		 * a key pool the uses it carried past the new limit and bucket
		 * size (lp_limit_cap, lp_uses_cap), written before the new
		 * generation was published and never again; zero in a row
		 * defined in place. */
		const struct shmt_lparams *hp = &lim->lm_p[0];

		v->hold_window = hp->lp_hold_window;
		v->hold_until = hp->lp_slack;
		if (hp->lp_gen != 0 || (v->hold_window != 0 &&
		    (v->hold_window <= v->window || v->hold_until == 0)))
			return SHMT_ECORRUPT;
		if (hp->lp_limit_cap != 0) {
			if (!(v->flags & SHMT_LIMF_KEYS) ||
			    hp->lp_limit_cap <= v->limit ||
			    hp->lp_limit_cap > SHMT_LIMIT_MAX)
				return SHMT_ECORRUPT;
			v->limit_cap = hp->lp_limit_cap;
		}
		if (hp->lp_uses_cap != 0) {
			if (!(v->flags & SHMT_LIMF_KEYS) ||
			    hp->lp_uses_cap <= v->slack_uses ||
			    hp->lp_uses_cap > v->limit_cap)
				return SHMT_ECORRUPT;
			v->uses_cap = hp->lp_uses_cap;
		}
	}
	if (v->pgen_check && (rc = view_params(lim, v)) != 0)
		return rc;
	if (v->mode == SHMT_MODE_GCRA) {
		/* In range: shmt__gcra_check passed on these parameters. */
		v->rate_t = v->window / v->limit;
		v->rate_d = v->rate_t * v->burst;
	}
	return 0;
}

static int
lviews_ensure(shmt_t *h)
{
	struct shmt_lview *v, *expect = NULL;
	uint32_t n;

	if (__atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE) != NULL)
		return 0;
	shmt__rows(h, &n);
	v = calloc(n, sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	if (!__atomic_compare_exchange_n(&h->lviews, &expect, v, 0,
	    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		free(v);
	return 0;
}

void
shmt__lviews_free(shmt_t *h)
{
	uint32_t n;

	if (h->lviews != NULL) {
		shmt__rows(h, &n);
		for (uint32_t r = 0; r < n; r++) {
			struct shmt_lview *v = h->lviews[r].lv_next;

			while (v != NULL) {
				struct shmt_lview *next = v->lv_next;

				free(v);
				v = next;
			}
		}
	}
	free(h->lviews);
	h->lviews = NULL;
}

int
shmt__view_get(shmt_t *h, uint32_t r, struct shmt_lview *scratch,
    const struct shmt_lview **out)
{
	struct shmt_lview *v;
	struct shmt_lim *lim;
	uint32_t n, expect = 0;
	int rc;

	if ((rc = lviews_ensure(h)) != 0)
		return rc;
	lim = shmt__rows(h, &n);
	if (r >= n)
		return -ENOENT;
	v = &__atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE)[r];
	if (__atomic_load_n(&v->lv_state, __ATOMIC_ACQUIRE) == 2) {
		*out = view_latest(v);
		return 0;
	}
	if (!__atomic_compare_exchange_n(&v->lv_state, &expect, 1, 0,
	    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		if ((rc = shmt__view_fill(h, r, &lim[r], scratch)) != 0)
			return rc;
		*out = scratch;
		return 0;
	}
	rc = shmt__view_fill(h, r, &lim[r], scratch);
	if (rc != 0) {
		__atomic_store_n(&v->lv_state, 0, __ATOMIC_RELEASE);
		return rc;
	}
	memcpy((char *)v + sizeof(v->lv_state),
	    (char *)scratch + sizeof(scratch->lv_state),
	    sizeof(*v) - sizeof(v->lv_state));
	__atomic_store_n(&v->lv_state, 2, __ATOMIC_RELEASE);
	*out = v;
	return 0;
}

/* Length and hash of a limiter name in one pass: -ENAMETOOLONG past
 * SHMT_LIMITER_NAME_MAX bytes, -EINVAL when empty.  FNV-1a, unkeyed: it
 * only picks an entry of this process's cache, names are chosen by the
 * operator, and a collision costs a miss, never a wrong answer. */
static int
name_scan(const char *name, size_t *lenp, uint32_t *hashp)
{
	uint32_t h = 2166136261U;
	size_t len = 0;

	if (name == NULL)
		return -EINVAL;
	for (; name[len] != '\0'; len++) {
		if (len == SHMT_LIMITER_NAME_MAX)
			return -ENAMETOOLONG;
		h = (h ^ (uint8_t)name[len]) * 16777619U;
	}
	if (len == 0)
		return -EINVAL;
	*lenp = len;
	*hashp = h;
	return 0;
}

__thread struct shmt_lim_last shmt__lim_last
    __attribute__((tls_model("initial-exec")));

int
shmt__lim_lookup(shmt_t *h, const char *name, struct shmt_lview *scratch,
    const struct shmt_lview **out)
{
	struct shmt_lview *views;
	struct shmt_lim *lim;
	uint32_t n, hash, slot, r;
	uint64_t ent;
	size_t len;
	int rc;

	if ((rc = name_scan(name, &len, &hash)) != 0)
		return rc;
	slot = hash % SHMT_LCACHE_SIZE;
	ent = __atomic_load_n(&h->lcache.lc_ent[slot], __ATOMIC_RELAXED);
	r = (uint32_t)ent - 1;
	views = __atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE);
	/* The hot path: a cached row whose view is ready and whose name is
	 * this one. */
	if (ent != 0 && (uint32_t)(ent >> 32) == hash && views != NULL &&
	    r < h->reg[SHMT_R_LIMITERS].rg_size / sizeof(struct shmt_lim) &&
	    __atomic_load_n(&views[r].lv_state, __ATOMIC_ACQUIRE) == 2 &&
	    memcmp(views[r].name, name, len + 1) == 0 &&
	    row_live(&views[r])) {
		*out = view_latest(&views[r]);
		shmt__lim_last.uid = h->uid;
		shmt__lim_last.v = &views[r];
		return 0;
	}
	if (ent != 0 && (uint32_t)(ent >> 32) == hash &&
	    shmt__view_get(h, r, scratch, out) == 0 &&
	    memcmp((*out)->name, name, len + 1) == 0 && row_live(*out))
		return 0;
	lim = shmt__rows(h, &n);
	for (r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY ||
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) != 0)
			continue;
		if ((rc = shmt__view_get(h, r, scratch, out)) != 0)
			return rc;
		__atomic_store_n(&h->lcache.lc_ent[slot],
		    ((uint64_t)hash << 32) | (r + 1), __ATOMIC_RELAXED);
		return 0;
	}
	return -ENOENT;
}

/* A and B are views of one row for the same generation and parameters:
 * equal from pgen on (view_fill zeroes every view first, so padding is
 * equal too). */
static int
view_same(const struct shmt_lview *a, const struct shmt_lview *b)
{
	size_t at = offsetof(struct shmt_lview, pgen);

	return a->pgen == b->pgen && memcmp((const char *)a + at,
	    (const char *)b + at, sizeof(*a) - at) == 0;
}

/* The view on HEAD's chain that is the same as NV, or NULL.  The chain
 * holds one view per distinct generation and parameters this process saw
 * (a hostile writer can make many; each costs one view, once). */
static const struct shmt_lview *
view_same_on_chain(const struct shmt_lview *head, const struct shmt_lview *nv)
{
	for (const struct shmt_lview *v = head; v != NULL;
	    v = __atomic_load_n(&v->lv_next, __ATOMIC_ACQUIRE))
		if (view_same(v, nv))
			return v;
	return NULL;
}

__attribute__((noinline, cold)) int
shmt__view_renew(shmt_t *h, const struct shmt_lview **vp)
{
	struct shmt_lview scratch, *head, *nv, *tail, *expect;
	const struct shmt_lview *got;
	uint32_t r = (*vp)->lv_row, n;
	int rc;

	if ((rc = shmt__view_get(h, r, &scratch, &got)) != 0)
		return rc;
	shmt__rows(h, &n);
	head = &__atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE)[r];
	if (__atomic_load_n(&head->lv_state, __ATOMIC_ACQUIRE) != 2)
		return SHMT_EBUSYLOOP;    /* another thread is filling it */
	nv = malloc(sizeof(*nv));
	if (nv == NULL)
		return -ENOMEM;
	if ((rc = shmt__view_fill(h, r, shmt__rows(h, &n) + r, nv)) != 0) {
		free(nv);
		return rc;
	}
	nv->lv_state = 2;
	/* A view of this generation and these parameters on the chain
	 * already (another thread's, or one the tag went back to): use it. */
	if ((got = view_same_on_chain(head, nv)) != NULL) {
		free(nv);
		*vp = got;
		goto done;
	}
	tail = (struct shmt_lview *)view_latest(head);
	for (;;) {
		struct shmt_lview *after = __atomic_load_n(&tail->lv_next,
		    __ATOMIC_ACQUIRE);

		if (after != NULL) {
			tail = after;           /* the hint lags: go on */
			continue;
		}
		if (view_same(tail, nv)) {
			/* Another thread chained it first. */
			free(nv);
			*vp = tail;
			break;
		}
		expect = NULL;
		if (__atomic_compare_exchange_n(&tail->lv_next, &expect, nv, 0,
		    __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
			*vp = nv;
			break;
		}
		tail = expect;
	}
done:
	/* The view in force now is the row's latest, chained last or not:
	 * lookups take it from the first view's hint (a thread that stores
	 * an older one after ours costs a renew, which stores it again). */
	__atomic_store_n(&head->lv_tail, (struct shmt_lview *)*vp,
	    __ATOMIC_RELEASE);
	if (shmt__lim_last.uid == h->uid && shmt__lim_last.v != NULL &&
	    shmt__lim_last.v->lv_row == r)
		shmt__lim_last.v = head;
	return 0;
}

int
shmt__view_fresh(shmt_t *h, const struct shmt_lview **vp)
{
	const struct shmt_lview *v = *vp;

	if (v->pgen_check && (uint32_t)(__atomic_load_n(&v->lim->lm_w.w[1],
	    __ATOMIC_ACQUIRE) & 0xffffU) != v->pgen)
		return shmt__view_renew(h, vp);
	return 0;
}

/* ---- Counting denials ---------------------------------------------------- */

void
shmt__count_denial(struct shmt_lim *lim, int why)
{
	uint64_t *ctr;

	if (lim->lm_flags & SHMT_LIMF_SHADOW)
		why = WHY_SHADOW;
	switch (why) {
	case WHY_SLACK:
		ctr = &lim->lm_denied_slack;
		break;
	case WHY_RING_FULL:
		ctr = &lim->lm_denied_ring_full;
		break;
	case WHY_TABLE_FULL:
		ctr = &lim->lm_denied_table_full;
		break;
	case WHY_SHADOW:
		ctr = &lim->lm_would_deny;
		break;
	case WHY_RULE:
		ctr = &lim->lm_denied_by_rule;
		break;
	default:
		ctr = &lim->lm_denied_exhausted;
		break;
	}
	__atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
}

/* ---- Defining limiters ------------------------------------------------------ */

void
shmt__rows_repair(shmt_t *h)
{
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n);

	for (uint32_t r = 0; r < n; r++)
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) ==
		    SHMT_LIM_BUILDING)
			__atomic_store_n(&lim[r].lm_state, SHMT_LIM_FREE,
			    __ATOMIC_RELEASE);
}

/* 1 when READY row LIM was defined with exactly L (normalised in G). */
static int
same_params(const shmt_t *h, uint32_t r, struct shmt_lim *lim,
    const shmt_limit_t *l, const struct lim_geom *g)
{
	struct shmt_lview v;

	if (shmt__view_fill(h, r, lim, &v) != 0)
		return 0;
	if (v.mode != (uint32_t)l->mode || v.limit != g->limit ||
	    v.window != l->window_ns ||
	    (l->mode == SHMT_MODE_BUCKETS &&
	    (v.slack != l->slack_ns || v.slack_uses != l->slack_uses)) ||
	    v.nkeys != l->nkeys || v.uses_per_key != l->uses_per_key ||
	    ((v.flags & SHMT_LIMF_PER_CLIENT) != 0) != (l->per_client != 0) ||
	    v.burst != l->burst ||
	    ((v.flags & SHMT_LIMF_SHADOW) != 0) != (l->shadow != 0) ||
	    ((v.flags & SHMT_LIMF_GLOBAL) != 0) != (l->global != 0) ||
	    (l->per_client && (v.capacity != l->client_capacity ||
	    v.ovcap != g->ovcap)))
		return 0;
	for (uint32_t i = 0; i < l->nkeys; i++)
		if (strncmp(v.keys + (uint64_t)i * v.keystride, l->keys[i],
		    v.keystride) != 0)
			return 0;
	return 1;
}

/* Lay out storage for the new row in the arena and initialise it. */
static int
row_build(shmt_t *h, struct shmt_lim *lim, const char *name, size_t len,
    const shmt_limit_t *l, const struct lim_geom *g)
{
	struct shmt_hdr *hdr = h->hdr;
	uint64_t size = h->reg[SHMT_R_ARENA].rg_size;
	uint64_t used = __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	uint64_t ring_off, keys_off, cl_off, ov_off, end;
	char *arena = shmt__region(h, SHMT_R_ARENA);

	if (used > size)
		return SHMT_ECORRUPT;
	ring_off = shmt__align_up(used, SHMT_LINE);
	keys_off = shmt__align_up(ring_off + g->ring_bytes, 16);
	cl_off = shmt__align_up(keys_off + g->keys_bytes, SHMT_LINE);
	ov_off = shmt__align_up(cl_off + g->clients_bytes, SHMT_LINE);
	end = ov_off + g->ov_bytes;
	if (end > size || end < used)
		return -ENOSPC;

	memset((char *)lim + 0, 0, sizeof(*lim));
	__atomic_store_n(&lim->lm_state, SHMT_LIM_BUILDING, __ATOMIC_RELEASE);
	memcpy(lim->lm_name, name, len);
	lim->lm_mode = (uint32_t)l->mode;
	lim->lm_limit = g->limit;
	lim->lm_window = l->window_ns;
	if (l->mode == SHMT_MODE_BUCKETS) {
		lim->lm_slack = l->slack_ns;
		lim->lm_slack_uses = l->slack_uses;
	}
	lim->lm_nbuckets = g->nb;
	lim->lm_burst = l->burst;
	lim->lm_flags = (l->shadow ? SHMT_LIMF_SHADOW : 0) |
	    (l->per_client ? SHMT_LIMF_PER_CLIENT : 0) |
	    (l->nkeys ? SHMT_LIMF_KEYS : 0) |
	    (l->global ? SHMT_LIMF_GLOBAL : 0);
	lim->lm_nkeys = l->nkeys;
	lim->lm_uses_per_key = l->uses_per_key;
	lim->lm_keystride = g->keystride;
	lim->lm_keymax = g->keymax;
	lim->lm_capacity = l->per_client ? l->client_capacity : 0;
	lim->lm_entsize = g->entsize;
	lim->lm_ring_off = ring_off;
	lim->lm_keys_off = keys_off;
	lim->lm_clients_off = cl_off;
	lim->lm_ov_off = g->ovcap != 0 ? ov_off : 0;
	lim->lm_ov_cap = g->ovcap;
	lim->lm_storage = end - used;

	memset(arena + ring_off, 0, end - ring_off);
	if (l->mode == SHMT_MODE_EXACT) {
		struct shmt_log_slot *log = (void *)(arena + ring_off);

		/* Slot i holds the record of grant i - L: none yet. */
		for (uint64_t i = 0; i < g->limit; i++)
			log[i].ls_seq = (int64_t)i - (int64_t)g->limit;
		lim->lm_w.w[0] = 0;
	} else if (l->mode == SHMT_MODE_GCRA) {
		lim->lm_w.w[0] = 0;     /* no arrival yet */
	} else {
		lim->lm_w = shmt__w_make(0, 0, 1, 0, 0, 0);
	}
	for (uint32_t i = 0; i < l->nkeys; i++)
		memcpy(arena + keys_off + (uint64_t)i * g->keystride, l->keys[i],
		    strlen(l->keys[i]));
	if (l->per_client)
		shmt__lock_init(&lim->lm_client_lock);
	__atomic_store_n(&hdr->sh_arena_used, end, __ATOMIC_RELAXED);
	/* Everything above is visible before READY is. */
	__atomic_store_n(&lim->lm_state, SHMT_LIM_READY, __ATOMIC_RELEASE);
	__atomic_fetch_add(&hdr->sh_generation, 1, __ATOMIC_RELEASE);
	return 0;
}

int
shmt__define_locked(shmt_t *h, const char *name, size_t len,
    const shmt_limit_t *l, const struct lim_geom *g)
{
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n), *free_row = NULL;

	for (uint32_t r = 0; r < n; r++) {
		uint32_t st = __atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE);

		if (st == SHMT_LIM_FREE && free_row == NULL)
			free_row = &lim[r];
		if (st == SHMT_LIM_READY &&
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) == 0)
			return same_params(h, r, &lim[r], l, g) ? 0 : -EEXIST;
	}
	if (free_row == NULL)
		return -ENOSPC;
	return row_build(h, free_row, name, len, l, g);
}

int
shmt__keys_check(const struct shmt_lview *v, const char *buf, size_t cap)
{
	if (buf == NULL && cap != 0)
		return -EINVAL;
	if (v->flags & SHMT_LIMF_PER_CLIENT)
		return -EPERM;
	if (!(v->flags & SHMT_LIMF_KEYS))
		return -ENOKEY;
	if (cap < (size_t)v->keymax + 1)
		return -ERANGE;
	return 0;
}

int
shmt__key_copy(const struct shmt_lview *v, uint64_t cursor, char *buf)
{
	size_t len;

	if (cursor >= v->nkeys)
		return SHMT_ECORRUPT;
	memcpy(buf, v->keys + cursor * v->keystride, v->keymax);
	buf[v->keymax] = '\0';
	len = strlen(buf);
	return len == 0 ? SHMT_ECORRUPT : (int)len;
}
