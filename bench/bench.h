/* This file is private to shmthrottle-bench. */
/* SPDX-License-Identifier: MIT */
/*
 * The benchmark's shared declarations: the run configuration, the workload
 * table and the interface every measured system (shmthrottle, the mutex
 * design, Redis) implements.
 */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "shmthrottle.h"

enum bench_kind {
	BK_FLOOR_CLOCK,     /* one CLOCK_MONOTONIC read */
	BK_FLOOR_CLOCK_CAS, /* one clock read + one uncontended 16-byte CAS */
	BK_FLOOR_ADD,       /* one atomic add on a line shared by all workers */
	BK_THROTTLE_SAME,
	BK_THROTTLE_DISTINCT,
	BK_THROTTLE_CLIENTS,
	BK_NEXT_KEY,
	BK_DICT_GET,
	BK_DICT_SET,
	BK_DICT_MIXED,
	BK_HIT
};

/* Everything a run is parameterised by; printed whole in its SUMMARY. */
struct bench_conf {
	enum bench_kind kind;
	const char *workload;
	const char *system;
	int procs;             /* 0: threads in the bench process itself */
	int threads;           /* threads per process (>= 1) */
	int workers;           /* procs * threads, or threads */
	double duration_s;
	double warmup_s;
	int pin;
	int mode;              /* enum shmt_mode */
	uint64_t limit;
	uint64_t window_ns;
	uint64_t slack_ns;
	uint64_t slack_uses;
	uint32_t nkeys;        /* next-key: key names in the pool */
	uint32_t clients;      /* throttle-clients: client ids drawn from */
	uint32_t capacity;     /* throttle-clients: client table entries */
	double zipf_s;         /* Zipf exponent of client ids and dict keys */
	uint32_t dict_keys;    /* dict-*: keys drawn from */
	uint32_t value_size;   /* dict-*: bytes per value */
	int uniform;           /* dict-*: keys drawn uniformly, not Zipf */
	int analyzer;          /* shmt: the hot-key analyzer on (default) */
	uint32_t sample;       /* time one op in `sample` */
	uint64_t seed;
	const char *profile;   /* "grant" or "deny": what the limits aim at */
	const char *redis_sock;
	int redis_cpu;         /* the CPU the bench's redis-server runs on;
				* -1: not pinned */
	uint32_t pipeline;     /* redis-pipe: commands in flight per worker */
	char server_cpu[16];   /* redis*: where its server runs, as printed */
	int progress;          /* draw a progress bar for runs over 2 s */
};

/* The outcome of one op: > 0 granted (or done), 0 denied, < 0 an error. */
typedef int (*bench_op_fn)(void *wctx, uint64_t arg);

/*
 * A measured system.  setup() runs once in the bench process before any
 * worker exists (create the segment, define limiters, load scripts);
 * attach() runs in each worker process (handle or mapping) and
 * attach_thread() in each worker thread (a connection), so that what a
 * process or thread owns is made where it is used.  attach_thread() also
 * picks the op for the workload, so the hot path is one indirect call.
 */
struct bench_sys {
	const char *name;
	int (*supports)(const struct bench_conf *c);
	int (*setup)(const struct bench_conf *c, void **g);
	int (*attach)(void *g, const struct bench_conf *c, void **pctx);
	int (*attach_thread)(void *pctx, int worker, void **wctx,
	    bench_op_fn *op);
	void (*detach_thread)(void *wctx);
	void (*detach)(void *pctx);
	void (*teardown)(void *g);
};

extern const struct bench_sys bench_sys_shmt;
extern const struct bench_sys bench_sys_shmt_resolved;
extern const struct bench_sys bench_sys_mutex;
extern const struct bench_sys bench_sys_mutex_1lock;
extern const struct bench_sys bench_sys_redis;
extern const struct bench_sys bench_sys_redis_pipe;
extern const struct bench_sys bench_sys_lmdb;
extern const struct bench_sys bench_sys_floor_clock;
extern const struct bench_sys bench_sys_floor_cas;
extern const struct bench_sys bench_sys_floor_cas8;
extern const struct bench_sys bench_sys_floor_add;

/* Shards of the dictionary and the counters in the library's segment, of
 * the dictionary and the client table in the mutex design: enough that
 * writers rarely meet on one shard's lock with 8 workers. */
#define BENCH_SHARDS 16

/* Heap bytes for N items of ITEM bytes (a buddy block each) over the
 * shards, with half as much again so that replacing a value (the new item
 * is built before the old one goes) never evicts: each shard's heap is a
 * power of two, at least MIN.  (sys_shmt.c sizes the library's stores with
 * it, shmthrottle-layoutfloor its model of them.) */
static inline uint64_t
bench_store_bytes(uint64_t n, uint64_t item, uint64_t min)
{
	uint64_t block = 64, per = 1;

	while (block < item)
		block <<= 1;
	while (per < n * block * 3 / 2 / BENCH_SHARDS)
		per <<= 1;
	return (per < min ? min : per) * BENCH_SHARDS;
}

/* Workloads whose op takes a drawn rank (client id or key) as argument. */
static inline int
bench_kind_draws(enum bench_kind k)
{
	return k == BK_THROTTLE_CLIENTS || (k >= BK_DICT_GET && k <= BK_HIT);
}

static inline int
bench_kind_throttle(enum bench_kind k)
{
	return k >= BK_THROTTLE_SAME && k <= BK_NEXT_KEY;
}

static inline int
bench_kind_dict(enum bench_kind k)
{
	return k >= BK_DICT_GET && k <= BK_DICT_MIXED;
}

/* The key of rank N, "k:N", as every system stores it; returns its length.
 * Written by hand: snprintf would cost as much as a dictionary read. */
static inline size_t
bench_key(char buf[16], uint64_t n)
{
	char tmp[24];
	size_t len = 0, i = 2;

	do {
		tmp[len++] = (char)('0' + n % 10);
		n /= 10;
	} while (n != 0 && len < 13);
	buf[0] = 'k';
	buf[1] = ':';
	while (len > 0)
		buf[i++] = tmp[--len];
	return i;
}

/* What this machine's clock and floor cost, one thread (the CLOCK line). */
struct bench_clock {
	double clock_ns;        /* clock_gettime(CLOCK_MONOTONIC) */
	double shmt_clock_ns;   /* the library's clock read (shmt__now) */
	double clock_cas16_ns;  /* load, clock read, 16-byte CAS */
	double clock_cas8_ns;   /* load, clock read, 8-byte CAS */
	int rounds;             /* median of this many rounds */
	uint32_t n;             /* of this many calls each */
};

/* Measure *OUT; returns 0 or -ENOMEM. */
int bench_clock_measure(struct bench_clock *out, int rounds, uint32_t n);

/* The bench's tests: take the lock of the mutex design's limiter that a
 * worker context of bench_sys_mutex or bench_sys_mutex_1lock uses, and
 * keep it, as an owner killed inside an op would.  Returns 0 or -errno. */
int bench_mutex_hold(void *wctx);

/* Remove the LMDB directories of benches killed with SIGKILL. */
void bench_lmdb_clean_stale(void);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* The limiter name of worker W under configuration C (distinct: one each). */
void bench_limiter_name(const struct bench_conf *c, int w, char *buf,
    size_t cap);

#endif
