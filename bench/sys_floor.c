/* SPDX-License-Identifier: MIT */
/*
 * The floor, measured in the same run as the systems and with the same
 * workers: what a grant cannot be cheaper than.  clock: one CLOCK_MONOTONIC
 * read (the vDSO).  clock+cas: one clock read and one uncontended 16-byte
 * CAS on the worker's own line, the least a lock-free grant does (a
 * bucket's state word is 16 bytes); clock+cas8: the same with an 8-byte
 * CAS (an 8-byte arrival time: the floor rate mode's target names; its
 * word is 16 bytes, the arrival time and the parameters' generation).  add: one atomic add on a line every
 * worker shares, the cost of contention.
 *
 * bench_clock_measure() times the same ops in one thread, outside the
 * harness, for the CLOCK line every invocation prints first: what a clock
 * read and the floors cost on this machine, so that ratios against them
 * carry to another machine.
 */
#include "bench.h"
#include "segment.h"

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

/* The same with an 8-byte word. */
static int
floor_op_cas8(void *wctx, uint64_t arg)
{
	uint64_t *w = ((struct floor_line *)wctx)->w;
	uint64_t cmp = ck_pr_load_64(&w[0]);

	return ck_pr_cas_64(&w[0], cmp, cmp + (bench_now_ns() & 0xff) + 1);
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
floor_thread_cas8(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	return floor_thread(pctx, worker, wctx, floor_op_cas8, op);
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
const struct bench_sys bench_sys_floor_cas8 =
    FLOOR_SYS("clock+cas8", floor_thread_cas8);
const struct bench_sys bench_sys_floor_add =
    FLOOR_SYS("add", floor_thread_add);

/* A handle with no clock of its own: shmt__now() on it reads the clock the
 * library reads when shmt_set_clock() gave none. */
static struct shmt clock_handle;

static int
floor_op_shmt_clock(void *wctx, uint64_t arg)
{
	return shmt__now(wctx) != 0;
}

/* Ns per call of OP, called through a pointer the compiler cannot see
 * through, as the harness calls it: the median of ROUNDS rounds of N. */
static double
clock_time(bench_op_fn op, void *ctx, int rounds, uint32_t n)
{
	double v[16], t;
	bench_op_fn volatile fn = op;

	if (rounds > 16)
		rounds = 16;
	for (int r = 0; r < rounds; r++) {
		uint64_t t0 = bench_now_ns();

		for (uint32_t i = 0; i < n; i++)
			fn(ctx, i);
		v[r] = (double)(bench_now_ns() - t0) / n;
		for (int j = r; j > 0 && v[j - 1] > v[j]; j--) {
			t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	}
	return v[rounds / 2];
}

int
bench_clock_measure(struct bench_clock *out, int rounds, uint32_t n)
{
	struct floor_line *line = mmap(NULL, sizeof(*line),
	    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	void *volatile hp = &clock_handle;

	if (line == MAP_FAILED)
		return -ENOMEM;
	/* One round unmeasured, so the first measured one finds the line and
	 * the code in the caches. */
	clock_time(floor_op_cas, line, 1, n / 4 + 1);
	out->clock_ns = clock_time(floor_op_clock, NULL, rounds, n);
	out->shmt_clock_ns = clock_time(floor_op_shmt_clock, hp, rounds, n);
	out->clock_cas16_ns = clock_time(floor_op_cas, line, rounds, n);
	out->clock_cas8_ns = clock_time(floor_op_cas8, line, rounds, n);
	out->rounds = rounds;
	out->n = n;
	munmap(line, sizeof(*line));
	return 0;
}
