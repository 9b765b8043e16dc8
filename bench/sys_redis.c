/* SPDX-License-Identifier: MIT */
/*
 * Redis as a peer, through hiredis on a private unix socket: the seed's
 * bucket limiter as a Lua script (SCRIPT LOAD once, EVALSHA per call) and
 * the sliding-window log as a sorted set, trimmed, counted and added to in
 * one Lua script; and GET and SET for the dictionary's workloads; one
 * command per round trip (redis) or --pipeline of them in flight
 * (redis-pipe).  Unless --redis-socket names a running server, the bench
 * starts its own redis-server (no persistence) in a temporary directory and
 * stops it when it exits, however it exits.
 */
#include "bench.h"
#include "redis.h"
#include "zipf.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The seed's Throttler.  KEYS[1] a hash (free, cursor), KEYS[2] the bucket
 * deque as a list of "close:count", oldest first.  ARGV: limit, window,
 * open time, bucket size, now (microseconds), pool size (0: no pool), ttl
 * (ms: idle limiters vanish, as idle client entries do in the segment).
 */
static const char lua_buckets[] =
"local limit, window, open = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
"local bsize, now, nkeys = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
"local free = tonumber(redis.call('HGET', KEYS[1], 'free') or limit)\n"
"while true do\n"
"  local head = redis.call('LINDEX', KEYS[2], 0)\n"
"  if not head then break end\n"
"  local c, n = string.match(head, '^(%d+):(%d+)$')\n"
"  if tonumber(c) + window > now then break end\n"
"  free = free + tonumber(n)\n"
"  redis.call('LPOP', KEYS[2])\n"
"end\n"
"redis.call('HSET', KEYS[1], 'free', free)\n"
"if free == 0 then return 0 end\n"
"local last = redis.call('LINDEX', KEYS[2], -1)\n"
"local lc, ln\n"
"if last then\n"
"  lc, ln = string.match(last, '^(%d+):(%d+)$')\n"
"  lc, ln = tonumber(lc), tonumber(ln)\n"
"end\n"
"if last and ln < bsize and now < lc then\n"
"  redis.call('LSET', KEYS[2], -1, string.format('%.0f:%d', lc, ln + 1))\n"
"else\n"
"  redis.call('RPUSH', KEYS[2], string.format('%.0f:1', now + open))\n"
"end\n"
"redis.call('HSET', KEYS[1], 'free', free - 1)\n"
"redis.call('PEXPIRE', KEYS[1], ARGV[7])\n"
"redis.call('PEXPIRE', KEYS[2], ARGV[7])\n"
"if nkeys == 0 then return 1 end\n"
"local k = (redis.call('HINCRBY', KEYS[1], 'cursor', 1) - 1) % nkeys\n"
"return string.format('key-%05d', k)\n";

/* The sliding-window log: KEYS[1] a sorted set of grant times, KEYS[2] the
 * hash holding the member sequence and the pool cursor.  Same ARGV. */
static const char lua_log[] =
"local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
"local now, nkeys = tonumber(ARGV[5]), tonumber(ARGV[6])\n"
"redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - window))\n"
"if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end\n"
"local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)\n"
"redis.call('ZADD', KEYS[1], string.format('%.0f', now), seq)\n"
"redis.call('PEXPIRE', KEYS[1], ARGV[7])\n"
"redis.call('PEXPIRE', KEYS[2], ARGV[7])\n"
"if nkeys == 0 then return 1 end\n"
"local k = (redis.call('HINCRBY', KEYS[2], 'cursor', 1) - 1) % nkeys\n"
"return string.format('key-%05d', k)\n";

/*
 * redis-cell's CL.THROTTLE in Lua, as the library's rate mode decides it:
 * KEYS[1] holds the arrival time (microseconds).  ARGV[1] the emission
 * interval T (microseconds, fractional), ARGV[4] the burst, ARGV[5] now,
 * ARGV[7] the ttl (ms).  Same replies as the other scripts.
 */
static const char lua_gcra[] =
"local T, burst, now = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])\n"
"local tat = tonumber(redis.call('GET', KEYS[1]) or now)\n"
"if tat < now then tat = now end\n"
"local new = tat + T\n"
"if new - T * burst > now then return 0 end\n"
"redis.call('SET', KEYS[1], string.format('%.3f', new), 'PX', ARGV[7])\n"
"return 1\n";

struct rd_global {
	char sock[REDIS_SOCK_MAX];
	char sha[48];
	char args[5][24];     /* limit, window, open, bsize, pool, as text */
	char ttl[24];
};

struct rd_proc {
	struct rd_global *g;
	const struct bench_conf *c;
};

struct rd_worker {
	struct rd_proc *p;
	redisContext *ctx;
	char name[SHMT_LIMITER_NAME_MAX + 1];
	char *value;          /* dict-set: the value written */
	uint64_t rnd;         /* dict-mixed: picks get or set */
	uint32_t pending;     /* redis-pipe: commands of this batch sent */
	int *res;             /* redis-pipe: the last batch's outcomes */
};

/* Keys are stored first, in pipelined batches of this many SETs. */
#define RD_PRELOAD_BATCH 1024

static int
rd_connect(const char *sock, redisContext **out)
{
	struct timeval tv = { .tv_sec = 5 };
	redisContext *ctx = redisConnectUnixWithTimeout(sock, tv);

	if (ctx == NULL || ctx->err) {
		redisFree(ctx);
		return -ECONNREFUSED;
	}
	redisSetTimeout(ctx, tv);
	*out = ctx;
	return 0;
}

/* One command whose reply must not be an error; the reply's string (if
 * any) is copied into OUT. */
static int
rd_simple(redisContext *ctx, char *out, size_t cap, const char *fmt, ...)
{
	va_list ap;
	redisReply *r;
	int rc = 0;

	va_start(ap, fmt);
	r = redisvCommand(ctx, fmt, ap);
	va_end(ap);
	if (r == NULL)
		return -EIO;
	if (r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "shmthrottle-bench: redis: %s\n", r->str);
		rc = -EPROTO;
	} else if (out != NULL && r->type == REDIS_REPLY_STRING) {
		snprintf(out, cap, "%s", r->str);
	}
	freeReplyObject(r);
	return rc;
}

static int
rd_supports(const struct bench_conf *c)
{
	return bench_kind_throttle(c->kind) || bench_kind_dict(c->kind);
}

/* Store every key once, so that gets find a value. */
static int
rd_preload(redisContext *ctx, const struct bench_conf *c)
{
	char *v = malloc((size_t)c->value_size + 1);
	uint32_t i = 0;
	int rc = 0;

	if (v == NULL)
		return -ENOMEM;
	memset(v, 'v', c->value_size);
	while (i < c->dict_keys && rc == 0) {
		uint32_t end = i + RD_PRELOAD_BATCH < c->dict_keys ?
		    i + RD_PRELOAD_BATCH : c->dict_keys, j;

		for (j = i; j < end; j++)
			redisAppendCommand(ctx, "SET k:%u %b", j, v,
			    (size_t)c->value_size);
		for (; i < end && rc == 0; i++) {
			redisReply *r = NULL;

			if (redisGetReply(ctx, (void **)&r) != REDIS_OK)
				rc = -EIO;
			else if (r->type == REDIS_REPLY_ERROR)
				rc = -EPROTO;
			freeReplyObject(r);
		}
	}
	free(v);
	return rc;
}

static int
rd_setup(const struct bench_conf *c, void **gp)
{
	struct rd_global *g = calloc(1, sizeof(*g));
	redisContext *ctx = NULL;
	uint64_t ttl_ms = (c->window_ns + c->slack_ns) / 1000000 + 1000;
	int rc;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	if ((rc = bench_redis_socket(c, g->sock, sizeof(g->sock))) < 0)
		return rc;
	if ((rc = rd_connect(g->sock, &ctx)) < 0)
		return rc;
	rc = rd_simple(ctx, NULL, 0, "FLUSHALL");
	if (rc == 0 && bench_kind_dict(c->kind))
		rc = rd_preload(ctx, c);
	if (rc == 0)
		rc = rd_simple(ctx, g->sha, sizeof(g->sha), "SCRIPT LOAD %s",
		    c->mode == SHMT_MODE_EXACT ? lua_log :
		    c->mode == SHMT_MODE_GCRA ? lua_gcra : lua_buckets);
	redisFree(ctx);
	snprintf(g->args[0], sizeof(g->args[0]), "%llu",
	    (unsigned long long)c->limit);
	if (c->mode == SHMT_MODE_GCRA)
		snprintf(g->args[0], sizeof(g->args[0]), "%.6f",
		    (double)c->window_ns / 1000.0 / (double)c->limit);
	snprintf(g->args[1], sizeof(g->args[1]), "%llu",
	    (unsigned long long)(c->window_ns / 1000));
	snprintf(g->args[2], sizeof(g->args[2]), "%llu",
	    (unsigned long long)(c->slack_ns / 1000));
	snprintf(g->args[3], sizeof(g->args[3]), "%llu",
	    (unsigned long long)c->slack_uses);
	snprintf(g->args[4], sizeof(g->args[4]), "%u",
	    c->kind == BK_NEXT_KEY ? c->nkeys : 0);
	snprintf(g->ttl, sizeof(g->ttl), "%llu", (unsigned long long)ttl_ms);
	return rc;
}

/*
 * Sending and receiving.  Every op appends its command; then, without
 * pipelining, it waits for the reply.  Pipelined (redis-pipe), commands go
 * out in batches of c->pipeline: the call that completes a batch sends it
 * and reads its replies; each call returns the outcome of the command it
 * made one batch earlier (the first batch, during warm-up, counts as
 * granted), so grants and errors are counted in full, one batch late, and
 * one call in c->pipeline carries the batch's round trip in its latency.
 */

/* A reply as an op's outcome: > 0 granted or done, 0 denied or absent. */
static int
rd_outcome(const redisReply *r)
{
	switch (r->type) {
	case REDIS_REPLY_INTEGER: return r->integer > 0;
	case REDIS_REPLY_STRING: return r->len > 0 ? (int)r->len : 1;
	case REDIS_REPLY_STATUS: return 1;
	case REDIS_REPLY_NIL: return 0;
	default: return -EPROTO;
	}
}

static int
rd_reply(struct rd_worker *w)
{
	redisReply *r = NULL;
	int rc;

	if (redisGetReply(w->ctx, (void **)&r) != REDIS_OK || r == NULL)
		return -EIO;
	rc = rd_outcome(r);
	freeReplyObject(r);
	return rc;
}

/* After the op's command was appended (APPENDED: redisAppendCommand's
 * status). */
static int
rd_finish(struct rd_worker *w, int appended)
{
	uint32_t depth = w->p->c->pipeline, slot;
	int prev;

	if (appended != REDIS_OK)
		return -EIO;
	if (depth <= 1)
		return rd_reply(w);
	slot = w->pending++;
	prev = w->res[slot];
	if (w->pending == depth) {
		for (uint32_t i = 0; i < depth; i++)
			w->res[i] = rd_reply(w);
		w->pending = 0;
	}
	return prev;
}

static int
rd_call(struct rd_worker *w, const char *k1, const char *k2)
{
	struct rd_global *g = w->p->g;
	char now[24];

	snprintf(now, sizeof(now), "%llu",
	    (unsigned long long)(bench_now_ns() / 1000));
	return rd_finish(w, redisAppendCommand(w->ctx,
	    "EVALSHA %s 2 %s %s %s %s %s %s %s %s %s",
	    g->sha, k1, k2, g->args[0], g->args[1], g->args[2], g->args[3],
	    now, g->args[4], g->ttl));
}

static int
rd_op_key(void *wctx, uint64_t arg)
{
	struct rd_worker *w = wctx;
	char k1[96], k2[96];

	snprintf(k1, sizeof(k1), "%s:s", w->name);
	snprintf(k2, sizeof(k2), "%s:b", w->name);
	return rd_call(w, k1, k2);
}

static int
rd_op_client(void *wctx, uint64_t arg)
{
	struct rd_worker *w = wctx;
	char k1[48], k2[48];

	snprintf(k1, sizeof(k1), "c:%llu:s", (unsigned long long)arg);
	snprintf(k2, sizeof(k2), "c:%llu:b", (unsigned long long)arg);
	return rd_call(w, k1, k2);
}

static int
rd_get(struct rd_worker *w, uint64_t key)
{
	return rd_finish(w, redisAppendCommand(w->ctx, "GET k:%llu",
	    (unsigned long long)key));
}

static int
rd_set(struct rd_worker *w, uint64_t key)
{
	return rd_finish(w, redisAppendCommand(w->ctx, "SET k:%llu %b",
	    (unsigned long long)key, w->value, (size_t)w->p->c->value_size));
}

static int
rd_op_get(void *wctx, uint64_t arg)
{
	return rd_get(wctx, arg);
}

static int
rd_op_set(void *wctx, uint64_t arg)
{
	return rd_set(wctx, arg);
}

/* One op in ten is a set. */
static int
rd_op_mixed(void *wctx, uint64_t arg)
{
	struct rd_worker *w = wctx;

	return bench_rand(&w->rnd) % 10 == 0 ? rd_set(w, arg) : rd_get(w, arg);
}

static bench_op_fn
rd_pick(enum bench_kind k)
{
	switch (k) {
	case BK_THROTTLE_CLIENTS: return rd_op_client;
	case BK_DICT_GET: return rd_op_get;
	case BK_DICT_SET: return rd_op_set;
	case BK_DICT_MIXED: return rd_op_mixed;
	default: return rd_op_key;
	}
}

static int
rd_attach(void *gp, const struct bench_conf *c, void **pctx)
{
	struct rd_proc *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return -ENOMEM;
	p->g = gp;
	p->c = c;
	*pctx = p;
	return 0;
}

static int
rd_attach_thread(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	struct rd_proc *p = pctx;
	struct rd_worker *w = calloc(1, sizeof(*w));
	int rc;

	if (w == NULL)
		return -ENOMEM;
	w->p = p;
	w->rnd = p->c->seed ^ ((uint64_t)(worker + 1) << 32) ^ 1;
	bench_limiter_name(p->c, worker, w->name, sizeof(w->name));
	w->value = malloc((size_t)p->c->value_size + 1);
	w->res = malloc(sizeof(*w->res) * (p->c->pipeline + 1));
	rc = w->value == NULL || w->res == NULL ? -ENOMEM :
	    rd_connect(p->g->sock, &w->ctx);
	if (rc < 0) {
		free(w->res);
		free(w->value);
		free(w);
		return rc;
	}
	for (uint32_t i = 0; i <= p->c->pipeline; i++)
		w->res[i] = 1;
	memset(w->value, 's', p->c->value_size);
	*op = rd_pick(p->c->kind);
	*wctx = w;
	return 0;
}

static void
rd_detach_thread(void *wctx)
{
	struct rd_worker *w = wctx;

	redisFree(w->ctx);
	free(w->res);
	free(w->value);
	free(w);
}

static void
rd_detach(void *pctx)
{
	free(pctx);
}

static void
rd_teardown(void *gp)
{
	free(gp);
}

const struct bench_sys bench_sys_redis = {
	.name = "redis",
	.supports = rd_supports,
	.setup = rd_setup,
	.attach = rd_attach,
	.attach_thread = rd_attach_thread,
	.detach_thread = rd_detach_thread,
	.detach = rd_detach,
	.teardown = rd_teardown,
};

/* The same commands, c->pipeline in flight per connection. */
const struct bench_sys bench_sys_redis_pipe = {
	.name = "redis-pipe",
	.supports = rd_supports,
	.setup = rd_setup,
	.attach = rd_attach,
	.attach_thread = rd_attach_thread,
	.detach_thread = rd_detach_thread,
	.detach = rd_detach,
	.teardown = rd_teardown,
};
