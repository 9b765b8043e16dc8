/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-globalcost: what a grant costs on a global limiter (a lease
 * word in the segment, filled here by hand as the daemon would) against a
 * local one (the bucket ring), one thread, rounds alternated, in thread
 * CPU time; and the same for a key pool (shmt_next_key: the name follows
 * the lease's base on a global pool, the ring's tag on a local one).  All
 * limits are set so high that every call is a grant.  One SUMMARY line per kind:
 * the median of ROUNDS rounds of N calls each, in ns per call.
 *
 * Against them, the obvious alternative: one Redis call per grant, a Lua
 * limiter that every worker calls (envoy's ratelimit service keeps a
 * fixed-window counter per limit and unit in Redis and bumps it for each
 * request): here EVALSHA of a script that adds the cost to the current
 * window's counter, sets its expiry on the window's first use and says
 * whether the count is within the limit.  The bench's own redis-server
 * (unix socket, no persistence) is pinned as shmthrottle-bench pins it, to
 * REDIS_CPU (default: the first CPU this process may run on), and this
 * process to that first CPU too, as the bench pins its worker 0: a round
 * trip is then two context switches on one CPU (REDIS_CPU 1 measures a
 * server on a CPU of its own).  Its rounds are N / 100 calls, in wall time
 * (the caller waits for the round trip) and in thread CPU time; every call
 * is one Redis command, so one saturated worker sends 1e9 / wall_ns
 * commands per second.  REDIS_CPU -1: no Redis row.
 *
 * Usage: shmthrottle-globalcost [N [ROUNDS [REDIS_CPU]]]
 *        (defaults 5000000, 7 and the first CPU)
 */
#include "global.h"
#include "util.h"

#include "bench.h"
#include "redis.h"

#include <hiredis/hiredis.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

#define GC_ROUNDS_MAX 64

/* Thread CPU time: on a shared machine, time spent preempted is not the
 * call's cost. */
static uint64_t
cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t
wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* envoy's ratelimit in one script: KEYS[1] the counter of the current
 * window, ARGV cost, limit, window (ms). */
static const char lua_fixed[] =
    "local n = redis.call('INCRBY', KEYS[1], ARGV[1])\n"
    "if n == tonumber(ARGV[1]) then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "end\n"
    "if n > tonumber(ARGV[2]) then return 0 end\n"
    "return 1\n";

struct rl {
	redisContext *c;
	char sha[48];
	uint64_t window_ms;
};

static int
rl_open(struct rl *r, int cpu)
{
	struct bench_conf bc;
	char sock[REDIS_SOCK_MAX];
	redisReply *rep;
	int rc;

	memset(&bc, 0, sizeof(bc));
	bc.redis_cpu = cpu;
	if ((rc = bench_redis_socket(&bc, sock, sizeof(sock))) < 0) {
		fprintf(stderr, "globalcost: redis-server: %s\n",
		    strerror(-rc));
		return rc;
	}
	r->c = redisConnectUnix(sock);
	if (r->c == NULL || r->c->err) {
		fprintf(stderr, "globalcost: cannot reach redis-server\n");
		return -1;
	}
	rep = redisCommand(r->c, "SCRIPT LOAD %s", lua_fixed);
	if (rep == NULL || rep->type != REDIS_REPLY_STRING) {
		fprintf(stderr, "globalcost: SCRIPT LOAD failed\n");
		return -1;
	}
	snprintf(r->sha, sizeof(r->sha), "%s", rep->str);
	freeReplyObject(rep);
	r->window_ms = 3600ULL * 1000;
	return 0;
}

/* N grants through Redis: wall ns per call into *WALL, thread CPU ns per
 * call returned. */
static double
rl_round(struct rl *r, long n, double *wall)
{
	uint64_t t0 = cpu_ns(), w0 = wall_ns();
	char key[64];

	for (long i = 0; i < n; i++) {
		redisReply *rep;

		/* The key names the window, as envoy's does: the clock is
		 * read for each request. */
		snprintf(key, sizeof(key), "rl:api-key:%llu",
		    (unsigned long long)(wall_ns() / 1000000ULL /
		    r->window_ms));
		rep = redisCommand(r->c, "EVALSHA %s 1 %s 1 %llu %llu", r->sha,
		    key, (unsigned long long)SHMT_LIMIT_MAX,
		    (unsigned long long)r->window_ms);
		if (rep == NULL || rep->type != REDIS_REPLY_INTEGER ||
		    rep->integer != 1) {
			fprintf(stderr, "globalcost: redis refused a use\n");
			exit(1);
		}
		freeReplyObject(rep);
	}
	*wall = (double)(wall_ns() - w0) / (double)n;
	return (double)(cpu_ns() - t0) / (double)n;
}

static double
round_ns(shmt_t *h, const char *name, long n)
{
	char key[SHMT_KEYNAME_MAX + 1];
	int pool = strstr(name, "pool") != NULL;
	uint64_t t0 = cpu_ns();

	for (long i = 0; i < n; i++)
		if ((pool ? shmt_next_key(h, name, key, sizeof(key)) <= 0 :
		    shmt_try_use_key(h, name) != 1)) {
			fprintf(stderr, "globalcost: %s refused a use\n", name);
			exit(1);
		}
	return (double)(cpu_ns() - t0) / (double)n;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 5000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 7;
	int cpu0 = bench_first_cpu(), rcpu = argc > 3 ? atoi(argv[3]) : cpu0;
	static const char *const keys[] = { "key-a", "key-b", "key-c",
		"key-d" };
	static const char *const kind[] = { "local", "global", "local-pool",
		"global-pool" };
	double t[4][GC_ROUNDS_MAX];
	double rcpu_ns[GC_ROUNDS_MAX], rwall[GC_ROUNDS_MAX];
	long rn = n / 100 > 0 ? n / 100 : 1;
	struct rl rl;
	struct shmt__gref ref;
	shmt_config_t cfg;
	shmt_limit_t l;
	shmt_t *h;
	char seg[64];
	uint64_t now;
	int rc;

	if (n <= 0 || rounds <= 0 || rounds > GC_ROUNDS_MAX) {
		fprintf(stderr, "usage: shmthrottle-globalcost [N [ROUNDS "
		    "[REDIS_CPU]]]\n");
		return 2;
	}
	if (cpu0 >= 0) {
		cpu_set_t one;

		CPU_ZERO(&one);
		CPU_SET(cpu0, &one);
		sched_setaffinity(0, sizeof(one), &one);
	}
	memset(&rl, 0, sizeof(rl));
	if (rcpu >= 0 && rl_open(&rl, rcpu) != 0)
		return 1;
	snprintf(seg, sizeof(seg), "/shmt-globalcost-%d", (int)getpid());
	shmt_config_init(&cfg);
	if ((rc = shmt_create(seg, &cfg, &h)) != 0) {
		fprintf(stderr, "globalcost: %s\n", shmt_strerror(rc));
		return 1;
	}
	memset(&l, 0, sizeof(l));
	l.limit = SHMT_LIMIT_MAX;
	l.window_ns = 3600ULL * 1000000000ULL;
	l.slack_ns = l.window_ns;
	l.slack_uses = SHMT_LIMIT_MAX;
	l.mode = SHMT_MODE_BUCKETS;
	rc = shmt_limiter_define(h, "local", &l);
	l.global = 1;
	if (rc == 0)
		rc = shmt_limiter_define(h, "global", &l);
	if (rc == 0)
		rc = shmt__global_ref(h, "global", &ref);
	now = shmt__mono_ns();
	if (rc == 0)
		rc = shmt__global_install(&ref, 0, (uint32_t)SHMT_LIMIT_MAX,
		    now + l.window_ns, 0, now);
	l.keys = keys;
	l.nkeys = 4;
	l.uses_per_key = (uint32_t)(SHMT_LIMIT_MAX / 4);
	l.limit = (uint64_t)l.nkeys * l.uses_per_key;
	l.slack_uses = l.limit;
	if (rc == 0)
		rc = shmt_limiter_define(h, "global-pool", &l);
	if (rc == 0)
		rc = shmt__global_ref(h, "global-pool", &ref);
	if (rc == 0)
		rc = shmt__global_install(&ref, 0, (uint32_t)l.limit,
		    now + l.window_ns, 0, now);
	l.global = 0;
	if (rc == 0)
		rc = shmt_limiter_define(h, "local-pool", &l);
	if (rc != 0) {
		fprintf(stderr, "globalcost: setup: %s\n", shmt_strerror(rc));
		shmt_close(h);
		shmt_unlink(seg);
		return 1;
	}
	for (int k = 0; k < 4; k++)
		round_ns(h, kind[k], n / 10);
	if (rl.c != NULL)
		rl_round(&rl, rn / 10 + 1, &rwall[0]);
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 4; k++)
			t[k][r] = round_ns(h, kind[k], n);
		if (rl.c != NULL)
			rcpu_ns[r] = rl_round(&rl, rn, &rwall[r]);
	}
	for (int k = 0; k < 4; k++) {
		qsort(t[k], (size_t)rounds, sizeof(double), probe_cmp_d);
		printf("SUMMARY kind=%s n=%ld rounds=%d median_ns=%.1f "
		    "min_ns=%.1f\n", kind[k], n, rounds, t[k][rounds / 2],
		    t[k][0]);
	}
	if (rl.c != NULL) {
		qsort(rcpu_ns, (size_t)rounds, sizeof(double), probe_cmp_d);
		qsort(rwall, (size_t)rounds, sizeof(double), probe_cmp_d);
		printf("SUMMARY kind=redis-per-grant n=%ld rounds=%d "
		    "median_wall_ns=%.1f min_wall_ns=%.1f median_cpu_ns=%.1f "
		    "redis_commands_per_grant=1 "
		    "redis_commands_per_s_per_worker=%.0f client_cpu=%d "
		    "server_cpu=%d\n", rn, rounds, rwall[rounds / 2], rwall[0],
		    rcpu_ns[rounds / 2], 1e9 / rwall[rounds / 2], cpu0, rcpu);
		redisFree(rl.c);
	}
	shmt_close(h);
	shmt_unlink(seg);
	return 0;
}
