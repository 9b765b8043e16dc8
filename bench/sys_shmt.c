/* SPDX-License-Identifier: MIT */
/*
 * The system under test: libshmthrottle itself.  The bench process creates
 * a private segment and defines the limiters; every worker process opens
 * its own handle, shared by its threads as the header allows.
 */
#include "bench.h"

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
	char name[SHMT_LIMITER_NAME_MAX + 1];
	char key[SHMT_KEYNAME_MAX + 1];
};

static int
shmt_supports(const struct bench_conf *c)
{
	return bench_kind_throttle(c->kind);
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

static int
shmt_setup(const struct bench_conf *c, void **gp)
{
	struct shmt_global *g = calloc(1, sizeof(*g));
	shmt_config_t cfg;
	shmt_limit_t l;
	int rc, n = c->kind == BK_THROTTLE_DISTINCT ? c->workers : 1;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	snprintf(g->seg, sizeof(g->seg), "/shmt-bench-%d", (int)getpid());
	shmt_config_init(&cfg);
	cfg.max_slots = (uint32_t)c->workers + 16;
	cfg.max_limiters = (uint32_t)n + 4;
	cfg.arena_bytes = shmt_arena_bytes(c);
	shmt_unlink(g->seg);
	if ((rc = shmt_create(g->seg, &cfg, &g->h)) < 0)
		return rc;
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
shmt_attach_thread(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	struct shmt_proc *p = pctx;
	struct shmt_worker *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -ENOMEM;
	w->h = p->h;
	bench_limiter_name(p->c, worker, w->name, sizeof(w->name));
	*op = p->c->kind == BK_THROTTLE_CLIENTS ? shmt_op_client :
	    p->c->kind == BK_NEXT_KEY ? shmt_op_next : shmt_op_key;
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
