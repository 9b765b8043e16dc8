/* SPDX-License-Identifier: MIT */
/*
 * The system under test: libshmthrottle itself.  The bench process creates
 * a private segment, defines the limiters or stores every key of the
 * dictionary; every worker process opens its own handle, shared by its
 * threads as the header allows.
 */
#include "bench.h"
#include "zipf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct shmt_global {
	char seg[64];
	shmt_t *h;
	const char **keys;
	uint32_t nkeys;
};

struct shmt_proc {
	shmt_t *h;
	const struct bench_conf *c;
};

struct shmt_worker {
	shmt_t *h;
	shmt_limiter_t *lim;  /* shmt-resolved: the limiter, resolved once */
	char name[SHMT_LIMITER_NAME_MAX + 1];
	char key[SHMT_KEYNAME_MAX + 1];
	uint32_t vsize;       /* dict: the value's size */
	uint64_t rnd;         /* dict-mixed: picks get or set */
	char *value;          /* dict: read into, written from */
};

/* Dictionary and counter shards: BENCH_SHARDS (bench.h), as many as the
 * mutex design's. */
#define SHMT_BENCH_SHARDS BENCH_SHARDS

static int
shmt_supports(const struct bench_conf *c)
{
	return bench_kind_throttle(c->kind) || bench_kind_dict(c->kind) ||
	    c->kind == BK_HIT;
}

static void
shmt_limit_fill(const struct bench_conf *c, shmt_limit_t *l)
{
	memset(l, 0, sizeof(*l));
	l->limit = c->limit;
	l->window_ns = c->window_ns;
	l->slack_ns = c->slack_ns;
	l->slack_uses = c->slack_uses;
	l->mode = c->mode;
	if (c->mode == SHMT_MODE_GCRA) {
		/* Rate mode: slack_uses is the burst; there is no slack. */
		l->burst = c->slack_uses;
		l->slack_ns = 0;
		l->slack_uses = 0;
	}
	if (c->kind == BK_THROTTLE_CLIENTS) {
		l->per_client = 1;
		l->client_capacity = c->capacity;
	}
}

/* Key names "key-00000" ... for the next-key pool; the limit is then the
 * pool's size times the uses per key. */
static int
shmt_make_keys(struct shmt_global *g, const struct bench_conf *c,
    shmt_limit_t *l)
{
	g->nkeys = c->nkeys;
	g->keys = calloc(g->nkeys, sizeof(*g->keys));
	if (g->keys == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->nkeys; i++) {
		char buf[32];

		snprintf(buf, sizeof(buf), "key-%05u", i);
		if ((g->keys[i] = strdup(buf)) == NULL)
			return -ENOMEM;
	}
	l->keys = g->keys;
	l->nkeys = g->nkeys;
	l->uses_per_key = (uint32_t)((c->limit + c->nkeys - 1) / c->nkeys);
	l->limit = 0;
	return 0;
}

static uint64_t
shmt_arena_bytes(const struct bench_conf *c)
{
	uint64_t nb = (c->window_ns + c->slack_ns - 1) / c->slack_ns +
	    (c->limit + c->slack_uses - 1) / c->slack_uses;
	uint64_t per = c->mode == SHMT_MODE_EXACT ? c->limit * 16 : nb * 16;

	if (c->kind == BK_THROTTLE_CLIENTS)
		per = (per + 128) * c->capacity;
	else
		per *= (uint64_t)(c->workers + 1);
	return per + ((uint64_t)32 << 20);
}

/* Store every key once, so that reads find a value. */
static int
shmt_preload(shmt_t *h, const struct bench_conf *c)
{
	char *v = malloc((size_t)c->value_size + 1), key[16];
	int rc = 0;

	if (v == NULL)
		return -ENOMEM;
	memset(v, 'v', c->value_size);
	for (uint32_t i = 0; i < c->dict_keys && rc == 0; i++)
		rc = shmt_set(h, key, bench_key(key, i), v, c->value_size, 0);
	free(v);
	return rc;
}

static void
shmt_config_fill(const struct bench_conf *c, shmt_config_t *cfg)
{
	shmt_config_init(cfg);
	cfg->max_slots = (uint32_t)c->workers + 16;
	cfg->max_limiters = (uint32_t)c->workers + 4;
	cfg->arena_bytes = bench_kind_throttle(c->kind) ?
	    shmt_arena_bytes(c) : 1ULL << 20;
	cfg->dict_bytes = 0;
	cfg->counters_bytes = 0;
	if (!c->analyzer)
		cfg->analyzer_bytes = 0;
	if (bench_kind_dict(c->kind)) {
		cfg->dict_shards = SHMT_BENCH_SHARDS;
		cfg->dict_bytes = bench_store_bytes(c->dict_keys,
		    32 + 16 + c->value_size, 2ULL << 20);
	} else if (c->kind == BK_HIT) {
		/* A counter item: the header, the key and one count per
		 * sub-window. */
		cfg->counters_shards = SHMT_BENCH_SHARDS;
		cfg->counters_bytes = bench_store_bytes(c->dict_keys,
		    32 + 16 + 8 * cfg->counters_subwindows, 64ULL << 10);
	}
}

static int
shmt_setup(const struct bench_conf *c, void **gp)
{
	struct shmt_global *g = calloc(1, sizeof(*g));
	shmt_config_t cfg;
	shmt_limit_t l;
	int rc, n = c->kind == BK_THROTTLE_DISTINCT ? c->workers :
	    bench_kind_throttle(c->kind) ? 1 : 0;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	snprintf(g->seg, sizeof(g->seg), "/shmt-bench-%d", (int)getpid());
	shmt_config_fill(c, &cfg);
	shmt_unlink(g->seg);
	if ((rc = shmt_create(g->seg, &cfg, &g->h)) < 0)
		return rc;
	if (bench_kind_dict(c->kind))
		return shmt_preload(g->h, c);
	shmt_limit_fill(c, &l);
	if (c->kind == BK_NEXT_KEY && (rc = shmt_make_keys(g, c, &l)) < 0)
		return rc;
	for (int w = 0; w < n; w++) {
		char name[SHMT_LIMITER_NAME_MAX + 1];

		bench_limiter_name(c, w, name, sizeof(name));
		if ((rc = shmt_limiter_define(g->h, name, &l)) < 0)
			return rc;
	}
	return 0;
}

static int
shmt_attach(void *gp, const struct bench_conf *c, void **pctx)
{
	struct shmt_global *g = gp;
	struct shmt_proc *p = calloc(1, sizeof(*p));
	int rc;

	if (p == NULL)
		return -ENOMEM;
	p->c = c;
	if ((rc = shmt_open(g->seg, &p->h)) < 0) {
		free(p);
		return rc;
	}
	*pctx = p;
	return 0;
}

static int
shmt_op_key(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;

	return shmt_try_use_key(w->h, w->name);
}

static void
shmt_free(void *p)
{
	shmt_limiter_close(((struct shmt_worker *)p)->lim);
	free(((struct shmt_worker *)p)->value);
	free(p);
}

static void
shmt_detach(void *pctx)
{
	struct shmt_proc *p = pctx;

	shmt_close(p->h);
	free(p);
}

static void
shmt_teardown(void *gp)
{
	struct shmt_global *g = gp;

	if (g == NULL)
		return;
	shmt_close(g->h);
	shmt_unlink(g->seg);
	for (uint32_t i = 0; g->keys != NULL && i < g->nkeys; i++)
		free((void *)g->keys[i]);
	free(g->keys);
	free(g);
}

static int
shmt_op_client(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;

	return shmt_try_use(w->h, w->name, &arg, sizeof(arg));
}

static int
shmt_op_next(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;

	return shmt_next_key(w->h, w->name, w->key, sizeof(w->key));
}

static int
shmt_get1(struct shmt_worker *w, uint64_t arg)
{
	char key[16];
	size_t vlen;
	int rc = shmt_get(w->h, key, bench_key(key, arg), w->value, w->vsize,
	    &vlen);

	return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

static int
shmt_set1(struct shmt_worker *w, uint64_t arg)
{
	char key[16];
	int rc = shmt_set(w->h, key, bench_key(key, arg), w->value, w->vsize,
	    0);

	return rc == 0 ? 1 : rc;
}

static int
shmt_op_get(void *wctx, uint64_t arg)
{
	return shmt_get1(wctx, arg);
}

static int
shmt_op_set(void *wctx, uint64_t arg)
{
	return shmt_set1(wctx, arg);
}

/* One op in ten is a set. */
static int
shmt_op_mixed(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;

	return bench_rand(&w->rnd) % 10 == 0 ? shmt_set1(w, arg) :
	    shmt_get1(w, arg);
}

static int
shmt_op_hit(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;
	char key[16];
	uint64_t count;
	int rc = shmt_hit(w->h, key, bench_key(key, arg), &count);

	return rc == 0 ? 1 : rc;
}

static bench_op_fn
shmt_pick(enum bench_kind k)
{
	switch (k) {
	case BK_THROTTLE_CLIENTS: return shmt_op_client;
	case BK_NEXT_KEY: return shmt_op_next;
	case BK_DICT_GET: return shmt_op_get;
	case BK_DICT_SET: return shmt_op_set;
	case BK_DICT_MIXED: return shmt_op_mixed;
	case BK_HIT: return shmt_op_hit;
	default: return shmt_op_key;
	}
}

static int
shmt_attach_thread(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	struct shmt_proc *p = pctx;
	struct shmt_worker *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -ENOMEM;
	w->h = p->h;
	w->vsize = p->c->value_size;
	w->rnd = p->c->seed ^ ((uint64_t)(worker + 1) << 32) ^ 1;
	w->value = malloc((size_t)w->vsize + 1);
	if (w->value == NULL) {
		free(w);
		return -ENOMEM;
	}
	memset(w->value, 's', w->vsize);
	bench_limiter_name(p->c, worker, w->name, sizeof(w->name));
	*op = shmt_pick(p->c->kind);
	*wctx = w;
	return 0;
}

const struct bench_sys bench_sys_shmt = {
	.name = "shmt",
	.supports = shmt_supports,
	.setup = shmt_setup,
	.attach = shmt_attach,
	.attach_thread = shmt_attach_thread,
	.detach_thread = shmt_free,
	.detach = shmt_detach,
	.teardown = shmt_teardown,
};

/* ---- shmt-resolved: the same segment, grants through shmt_limiter_try ---- */

static int
resolved_supports(const struct bench_conf *c)
{
	return c->kind == BK_THROTTLE_SAME || c->kind == BK_THROTTLE_DISTINCT ||
	    c->kind == BK_THROTTLE_CLIENTS;
}

static int
resolved_op_key(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;

	(void)arg;
	return shmt_limiter_try(w->lim, NULL, 0);
}

static int
resolved_op_client(void *wctx, uint64_t arg)
{
	struct shmt_worker *w = wctx;

	return shmt_limiter_try(w->lim, &arg, sizeof(arg));
}

static int
resolved_attach_thread(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	struct shmt_worker *w;
	int rc;

	if ((rc = shmt_attach_thread(pctx, worker, wctx, op)) != 0)
		return rc;
	w = *wctx;
	if ((rc = shmt_limiter_open(w->h, w->name, &w->lim)) != 0) {
		shmt_free(w);
		return rc;
	}
	*op = ((const struct shmt_proc *)pctx)->c->kind == BK_THROTTLE_CLIENTS ?
	    resolved_op_client : resolved_op_key;
	return 0;
}

const struct bench_sys bench_sys_shmt_resolved = {
	.name = "shmt-resolved",
	.supports = resolved_supports,
	.setup = shmt_setup,
	.attach = shmt_attach,
	.attach_thread = resolved_attach_thread,
	.detach_thread = shmt_free,
	.detach = shmt_detach,
	.teardown = shmt_teardown,
};
