/* SPDX-License-Identifier: MIT */
/*
 * The floor, measured in the same run as the systems and with the same
 * workers: what a grant cannot be cheaper than.  clock: one CLOCK_MONOTONIC
 * read (the vDSO).  clock+cas: one clock read and one uncontended 16-byte
 * CAS on the worker's own line, the least a lock-free grant does.  add:
 * one atomic add on a line every worker shares, the cost of contention.
 */
#include "bench.h"

#include <ck_pr.h>
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <sys/mman.h>

struct floor_line {
	alignas(128) uint64_t w[2];
};

struct floor_global {
	size_t size;
	struct floor_line *lines;   /* [0] shared, [1 + worker] own */
};

static int
floor_supports(const struct bench_conf *c)
{
	return 1;
}

/* The lines are mapped shared before any worker is forked, so processes
 * contend on the same memory as threads do. */
static int
floor_setup(const struct bench_conf *c, void **gp)
{
	struct floor_global *g = calloc(1, sizeof(*g));
	void *m;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	g->size = sizeof(struct floor_line) * ((size_t)c->workers + 1);
	m = mmap(NULL, g->size, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	g->lines = m;
	return 0;
}

static int
floor_attach(void *g, const struct bench_conf *c, void **pctx)
{
	*pctx = g;
	return 0;
}

static int
floor_op_clock(void *wctx, uint64_t arg)
{
	return bench_now_ns() != 0;
}

/* Read the word, read the clock, CAS: the order of a grant's steps. */
static int
floor_op_cas(void *wctx, uint64_t arg)
{
	uint64_t *w = ((struct floor_line *)wctx)->w;
	uint64_t cmp[2] = { ck_pr_load_64(&w[0]), ck_pr_load_64(&w[1]) };
	uint64_t set[2] = { cmp[0] + 1, bench_now_ns() };

	return ck_pr_cas_64_2(w, cmp, set);
}

static int
floor_op_add(void *wctx, uint64_t arg)
{
	ck_pr_faa_64(&((struct floor_line *)wctx)->w[0], 1);
	return 1;
}

static int
floor_thread(void *pctx, int worker, void **wctx, bench_op_fn op_fn,
    bench_op_fn *op)
{
	struct floor_global *g = pctx;

	*wctx = op_fn == floor_op_add ? &g->lines[0] : &g->lines[1 + worker];
	*op = op_fn;
	return 0;
}

static int
floor_thread_clock(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	return floor_thread(pctx, worker, wctx, floor_op_clock, op);
}

static int
floor_thread_cas(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	return floor_thread(pctx, worker, wctx, floor_op_cas, op);
}

static int
floor_thread_add(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	return floor_thread(pctx, worker, wctx, floor_op_add, op);
}

static void
floor_nothing(void *ctx)
{
}

static void
floor_teardown(void *gp)
{
	struct floor_global *g = gp;

	if (g == NULL)
		return;
	if (g->lines != NULL)
		munmap(g->lines, g->size);
	free(g);
}

#define FLOOR_SYS(NAME, THREAD) { \
	.name = NAME, .supports = floor_supports, .setup = floor_setup, \
	.attach = floor_attach, .attach_thread = THREAD, \
	.detach_thread = floor_nothing, .detach = floor_nothing, \
	.teardown = floor_teardown }

const struct bench_sys bench_sys_floor_clock =
    FLOOR_SYS("clock", floor_thread_clock);
const struct bench_sys bench_sys_floor_cas =
    FLOOR_SYS("clock+cas", floor_thread_cas);
const struct bench_sys bench_sys_floor_add =
    FLOOR_SYS("add", floor_thread_add);
