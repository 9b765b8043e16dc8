/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle-bench: multi-threaded and multi-process load on the
 * library's limiters and dictionary, side by side with the floor (clock
 * read, CAS, shared add), the obvious mutex design (a lock per limiter or
 * shard, and one lock for everything), Redis (one command per round trip,
 * and pipelined) and LMDB, all measured in the same run.  One CLOCK line
 * first (what the clock and the floor cost here), then one SUMMARY line
 * per run (or JSON with --json) and the ratios of shmt against every
 * other system.
 */
#include "bench.h"
#include "harness.h"
#include "redis.h"
#include "report.h"
#include "zipf.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct workload {
	const char *name;
	enum bench_kind kind;
	const char *what;
};

/*
 * The workloads.  A system without the op of a workload (the peers have no
 * windowed counter, LMDB no limiter) is reported as skipped.
 */
static const struct workload workloads[] = {
	{ "throttle-same", BK_THROTTLE_SAME,
	  "all workers on one limiter" },
	{ "throttle-distinct", BK_THROTTLE_DISTINCT,
	  "one limiter per worker" },
	{ "throttle-clients", BK_THROTTLE_CLIENTS,
	  "per-client limiter, clients drawn Zipf from --clients" },
	{ "next-key", BK_NEXT_KEY,
	  "next_key on one limiter with a pool of --keys names" },
	{ "dict-get", BK_DICT_GET,
	  "get of --dict-keys keys, Zipf or --uniform" },
	{ "dict-set", BK_DICT_SET,
	  "set of --value-size bytes, Zipf or --uniform keys" },
	{ "dict-mixed", BK_DICT_MIXED,
	  "90% get, 10% set" },
	{ "hit", BK_HIT,
	  "shmt_hit on --dict-keys keys, Zipf or --uniform" },
};
#define NWORKLOADS (sizeof(workloads) / sizeof(workloads[0]))

static const struct bench_sys *const systems[] = {
	&bench_sys_shmt, &bench_sys_shmt_resolved, &bench_sys_mutex,
	&bench_sys_mutex_1lock,
	&bench_sys_redis, &bench_sys_redis_pipe, &bench_sys_lmdb,
};
#define NSYSTEMS (sizeof(systems) / sizeof(systems[0]))

/* clock+cas8 runs in rate mode only: the floor of an 8-byte arrival time,
 * which rate mode's target is measured against (its word is 16 bytes). */
static const struct bench_sys *const floors[] = {
	&bench_sys_floor_clock, &bench_sys_floor_cas, &bench_sys_floor_cas8,
	&bench_sys_floor_add,
};
#define NFLOORS (sizeof(floors) / sizeof(floors[0]))

struct opts {
	struct bench_conf c;
	const char *workloads;
	const char *systems;
	int json, no_floor, no_clock, clock_only, deny, sample_set;
	int set_limit, set_window, set_slack, set_slack_uses;
};

void
bench_limiter_name(const struct bench_conf *c, int w, char *buf, size_t cap)
{
	if (c->kind == BK_THROTTLE_DISTINCT)
		snprintf(buf, cap, "bench-%d", w);
	else
		snprintf(buf, cap, "bench");
}

static void
usage(FILE *f)
{
	fprintf(f,
"usage: shmthrottle-bench [options]\n"
"  -W, --workload LIST   comma-separated workloads (default throttle-same)\n"
"  -s, --systems LIST    of shmt, mutex (a lock per limiter and per shard),\n"
"                        mutex-1lock (one lock), redis, redis-pipe (--pipeline\n"
"                        commands in flight), lmdb (dict-* only); default all\n"
"  -t, --threads N       threads per process (default 1)\n"
"  -p, --procs N         forked worker processes, each with its own handle\n"
"                        (default 0: the threads run in the bench itself)\n"
"  -d, --duration S      measured seconds (default 2)\n"
"  -w, --warmup S        warm-up seconds, not counted (default 0.5)\n"
"      --pin             pin worker i to the i-th allowed CPU (mod count)\n"
"  -m, --mode M          buckets (default), exact, or gcra (rate and\n"
"                        burst; --slack-uses is the burst)\n"
"      --deny            limits that throttle most calls (default: limits\n"
"                        so high that every call is granted)\n"
"      --limit N --window-ms N --slack-ms N --slack-uses N\n"
"                        override the limiter parameters\n"
"      --keys N          next-key: names in the pool (default 1000)\n"
"      --clients N       throttle-clients: ids drawn from (default 1000000)\n"
"      --capacity N      throttle-clients: table entries (default 262144)\n"
"      --zipf S          Zipf exponent of client ids and keys (0.99)\n"
"      --dict-keys N     dict-*: keys, all stored first (default 1000000)\n"
"      --value-size N    dict-*: bytes per value (default 16)\n"
"      --uniform         dict-*: keys drawn uniformly instead of Zipf\n"
"      --no-analyzer     shmt: segment without the hot-key analyzer (its\n"
"                        profile reads analyzer-off)\n"
"      --sample N        time one op in N, a power of two (default 64;\n"
"                        1 for redis, whose calls take microseconds)\n"
"      --seed N          random seed (printed in SUMMARY)\n"
"      --no-floor        skip the floor runs\n"
"      --no-clock        skip the CLOCK line (clock and floor costs)\n"
"      --clock-only      print the CLOCK line (9 rounds) and exit\n"
"      --redis-socket P  use a running server instead of starting one\n"
"      --redis-cpu N     pin the bench's redis-server to CPU N (default:\n"
"                        the first allowed CPU, worker 0's; 'none': not\n"
"                        pinned); redis clients are always pinned, worker\n"
"                        i to the i-th allowed CPU as --pin does\n"
"      --pipeline N      redis-pipe: commands in flight per worker (16)\n"
"      --progress / --no-progress  bar on stderr (default: if a tty)\n"
"      --json            JSON lines instead of SUMMARY lines\n"
"      --list            list the workloads\n"
"      --list-systems    list the systems this build has\n");
}

static void
list_workloads(void)
{
	for (size_t i = 0; i < NWORKLOADS; i++)
		printf("%-18s %s\n", workloads[i].name, workloads[i].what);
}

/* The systems, one a line, but those this build lacks (LMDB without
 * liblmdb: it has no workload). */
static void
list_systems(void)
{
	struct bench_conf c = { .kind = BK_DICT_GET };
	int any;

	for (size_t i = 0; i < NSYSTEMS; i++) {
		any = 0;
		for (c.kind = BK_THROTTLE_SAME; c.kind <= BK_HIT; c.kind++)
			any |= systems[i]->supports(&c);
		if (any)
			printf("%s\n", systems[i]->name);
	}
}

static const struct workload *
find_workload(const char *name)
{
	for (size_t i = 0; i < NWORKLOADS; i++)
		if (strcmp(workloads[i].name, name) == 0)
			return &workloads[i];
	return NULL;
}

static const struct bench_sys *
find_system(const char *name)
{
	for (size_t i = 0; i < NSYSTEMS; i++)
		if (strcmp(systems[i]->name, name) == 0)
			return systems[i];
	return NULL;
}

static int
parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end != '\0' || *s == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

static int
parse_pos(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end != '\0' || !(v >= 0))
		return -EINVAL;
	*out = v;
	return 0;
}

enum {
	OPT_PIN = 256, OPT_DENY, OPT_LIMIT, OPT_WINDOW, OPT_SLACK,
	OPT_SLACK_USES, OPT_KEYS, OPT_CLIENTS, OPT_CAPACITY, OPT_ZIPF,
	OPT_SAMPLE, OPT_SEED, OPT_NO_FLOOR, OPT_REDIS, OPT_PROGRESS,
	OPT_NO_PROGRESS, OPT_JSON, OPT_LIST, OPT_DICT_KEYS, OPT_VALUE_SIZE,
	OPT_UNIFORM, OPT_NO_ANALYZER, OPT_NO_CLOCK, OPT_REDIS_CPU, OPT_PIPELINE,
	OPT_LIST_SYSTEMS, OPT_CLOCK_ONLY
};

static const struct option longopts[] = {
	{ "workload", required_argument, NULL, 'W' },
	{ "systems", required_argument, NULL, 's' },
	{ "threads", required_argument, NULL, 't' },
	{ "procs", required_argument, NULL, 'p' },
	{ "duration", required_argument, NULL, 'd' },
	{ "warmup", required_argument, NULL, 'w' },
	{ "mode", required_argument, NULL, 'm' },
	{ "pin", no_argument, NULL, OPT_PIN },
	{ "deny", no_argument, NULL, OPT_DENY },
	{ "limit", required_argument, NULL, OPT_LIMIT },
	{ "window-ms", required_argument, NULL, OPT_WINDOW },
	{ "slack-ms", required_argument, NULL, OPT_SLACK },
	{ "slack-uses", required_argument, NULL, OPT_SLACK_USES },
	{ "keys", required_argument, NULL, OPT_KEYS },
	{ "clients", required_argument, NULL, OPT_CLIENTS },
	{ "capacity", required_argument, NULL, OPT_CAPACITY },
	{ "zipf", required_argument, NULL, OPT_ZIPF },
	{ "dict-keys", required_argument, NULL, OPT_DICT_KEYS },
	{ "value-size", required_argument, NULL, OPT_VALUE_SIZE },
	{ "uniform", no_argument, NULL, OPT_UNIFORM },
	{ "no-analyzer", no_argument, NULL, OPT_NO_ANALYZER },
	{ "sample", required_argument, NULL, OPT_SAMPLE },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "no-floor", no_argument, NULL, OPT_NO_FLOOR },
	{ "redis-socket", required_argument, NULL, OPT_REDIS },
	{ "redis-cpu", required_argument, NULL, OPT_REDIS_CPU },
	{ "pipeline", required_argument, NULL, OPT_PIPELINE },
	{ "no-clock", no_argument, NULL, OPT_NO_CLOCK },
	{ "clock-only", no_argument, NULL, OPT_CLOCK_ONLY },
	{ "list-systems", no_argument, NULL, OPT_LIST_SYSTEMS },
	{ "progress", no_argument, NULL, OPT_PROGRESS },
	{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "list", no_argument, NULL, OPT_LIST },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

/* Options that take a number; returns -EINVAL on a bad one. */
static int
parse_number(struct opts *o, int opt, const char *arg)
{
	struct bench_conf *c = &o->c;
	uint64_t v = 0;
	double d = 0;
	int rc = opt == 'd' || opt == 'w' || opt == OPT_ZIPF ?
	    parse_pos(arg, &d) : parse_u64(arg, &v);

	if (rc < 0)
		return rc;
	switch (opt) {
	case 't': c->threads = (int)v; return v >= 1 && v <= 1024 ? 0 : -EINVAL;
	case 'p': c->procs = (int)v; return v <= 1024 ? 0 : -EINVAL;
	case 'd': c->duration_s = d; return d > 0 ? 0 : -EINVAL;
	case 'w': c->warmup_s = d; return 0;
	case OPT_ZIPF: c->zipf_s = d; return 0;
	case OPT_WINDOW: c->window_ns = v * 1000000; o->set_window = 1; break;
	case OPT_SLACK: c->slack_ns = v * 1000000; o->set_slack = 1; break;
	case OPT_LIMIT: c->limit = v; o->set_limit = 1; break;
	case OPT_SLACK_USES: c->slack_uses = v; o->set_slack_uses = 1; break;
	case OPT_KEYS: c->nkeys = (uint32_t)v; break;
	case OPT_CLIENTS: c->clients = (uint32_t)v; break;
	case OPT_CAPACITY: c->capacity = (uint32_t)v; break;
	case OPT_DICT_KEYS: c->dict_keys = (uint32_t)v; break;
	case OPT_VALUE_SIZE:
		c->value_size = (uint32_t)v;
		return v <= (1U << 20) ? 0 : -EINVAL;
	case OPT_SEED: c->seed = v; return v >= 1 ? 0 : -EINVAL;
	case OPT_REDIS_CPU:
		c->redis_cpu = (int)v;
		return v < CPU_SETSIZE ? 0 : -EINVAL;
	case OPT_PIPELINE:
		c->pipeline = (uint32_t)v;
		return v >= 1 && v <= 1024 ? 0 : -EINVAL;
	case OPT_SAMPLE:
		c->sample = (uint32_t)v;
		o->sample_set = 1;
		return v >= 1 && (v & (v - 1)) == 0 ? 0 : -EINVAL;
	}
	return v >= 1 && v <= UINT32_MAX ? 0 : -EINVAL;
}

/* Returns 1 to go on, 0 to exit successfully, -1 on a usage error. */
static int
parse_args(struct opts *o, int argc, char **argv)
{
	int opt;

	while ((opt = getopt_long(argc, argv, "W:s:t:p:d:w:m:h", longopts,
	    NULL)) != -1) {
		switch (opt) {
		case 'W': o->workloads = optarg; break;
		case 's': o->systems = optarg; break;
		case 'm':
			if (strcmp(optarg, "buckets") && strcmp(optarg, "exact") &&
			    strcmp(optarg, "gcra"))
				goto bad;
			o->c.mode = strcmp(optarg, "exact") == 0 ?
			    SHMT_MODE_EXACT : strcmp(optarg, "gcra") == 0 ?
			    SHMT_MODE_GCRA : SHMT_MODE_BUCKETS;
			break;
		case OPT_PIN: o->c.pin = 1; break;
		case OPT_UNIFORM: o->c.uniform = 1; break;
		case OPT_NO_ANALYZER: o->c.analyzer = 0; break;
		case OPT_DENY: o->deny = 1; break;
		case OPT_NO_FLOOR: o->no_floor = 1; break;
		case OPT_NO_CLOCK: o->no_clock = 1; break;
		case OPT_CLOCK_ONLY: o->clock_only = 1; break;
		case OPT_LIST_SYSTEMS: list_systems(); return 0;
		case OPT_REDIS: o->c.redis_sock = optarg; break;
		case OPT_REDIS_CPU:
			if (strcmp(optarg, "none") == 0) {
				o->c.redis_cpu = -1;
				break;
			}
			if (parse_number(o, opt, optarg) < 0)
				goto bad;
			break;
		case OPT_PROGRESS: o->c.progress = 1; break;
		case OPT_NO_PROGRESS: o->c.progress = 0; break;
		case OPT_JSON: o->json = 1; break;
		case OPT_LIST: list_workloads(); return 0;
		case 'h': usage(stdout); return 0;
		case '?': usage(stderr); return -1;
		default:
			if (parse_number(o, opt, optarg) < 0)
				goto bad;
		}
	}
	if (optind == argc)
		return 1;
	optarg = argv[optind];
bad:
	fprintf(stderr, "shmthrottle-bench: bad argument '%s'\n", optarg);
	return -1;
}

/* The limiter parameters of a workload: by default so generous that every
 * call is granted (the bench measures the grant path), or with --deny so
 * tight that nearly every call is throttled.  Per-client limiters keep 20
 * buckets each, so a quarter of a million clients fit in ~100 MiB. */
static void
profile_defaults(const struct opts *o, struct bench_conf *c)
{
	const uint64_t ms = 1000000;
	uint64_t limit, window = 100 * ms, slack = 10 * ms, uses;

	if (c->kind == BK_THROTTLE_CLIENTS) {
		limit = o->deny ? 10 : 100000;
		uses = o->deny ? 1 : 10000;
	} else if (o->deny) {
		limit = 1000;
		uses = c->mode == SHMT_MODE_EXACT ? 1000 : 100;
	} else if (c->mode == SHMT_MODE_GCRA) {
		/* One use per nanosecond with a burst of a million: never
		 * refused at the rates one machine reaches. */
		limit = 1000000000;
		window = 1000 * ms;
		uses = 1U << 20;
	} else if (c->mode == SHMT_MODE_EXACT) {
		/* The log keeps one record per use: the largest allowed log
		 * over a window short enough that it is never full. */
		limit = SHMT_EXACT_LIMIT_MAX;
		window = 10 * ms;
		slack = 1 * ms;
		uses = limit;
	} else {
		limit = SHMT_LIMIT_MAX;
		window = 1000 * ms;
		slack = 100 * ms;
		uses = 1U << 20;
	}
	c->limit = o->set_limit ? c->limit : limit;
	c->window_ns = o->set_window ? c->window_ns : window;
	c->slack_ns = o->set_slack ? c->slack_ns : slack;
	c->slack_uses = o->set_slack_uses ? c->slack_uses : uses;
	c->profile = o->deny ? "deny" : c->analyzer ? "grant" : "analyzer-off";
}

static int
finalize(const struct opts *o, const struct workload *wl, struct bench_conf *c)
{
	uint64_t nb;

	c->kind = wl->kind;
	c->workload = wl->name;
	c->workers = c->procs ? c->procs * c->threads : c->threads;
	profile_defaults(o, c);
	if (c->kind == BK_NEXT_KEY && c->nkeys > 0)
		c->limit = c->limit / c->nkeys * c->nkeys;
	if (c->slack_uses > c->limit)
		c->slack_uses = c->limit;
	if (c->kind == BK_THROTTLE_CLIENTS && c->mode == SHMT_MODE_EXACT) {
		fprintf(stderr, "shmthrottle-bench: throttle-clients runs in "
		    "buckets mode (exact keeps 16 bytes per use per client)\n");
		return -EINVAL;
	}
	nb = (c->window_ns + c->slack_ns - 1) / c->slack_ns +
	    (c->limit + c->slack_uses - 1) / c->slack_uses;
	if (c->limit == 0 || c->limit > SHMT_LIMIT_MAX || c->window_ns == 0 ||
	    (c->mode == SHMT_MODE_BUCKETS && nb > SHMT_BUCKETS_MAX) ||
	    (c->mode == SHMT_MODE_GCRA && (c->kind == BK_NEXT_KEY ||
	    c->window_ns / c->limit == 0)) ||
	    (c->kind == BK_NEXT_KEY && (c->nkeys == 0 ||
	    c->nkeys > SHMT_KEYS_MAX || c->limit / c->nkeys > UINT32_MAX))) {
		fprintf(stderr, "shmthrottle-bench: %s: limiter parameters out "
		    "of range (limit %llu, %llu buckets)\n", wl->name,
		    (unsigned long long)c->limit, (unsigned long long)nb);
		return -EINVAL;
	}
	return 0;
}

/* Segments of earlier benches that were killed with SIGKILL (and so could
 * not unlink theirs) are removed when their process is gone. */
static void
remove_stale_segments(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL) {
		const char *p = e->d_name;
		char name[300];
		long pid;

		if (strncmp(p, "shmt-bench-", 11) != 0)
			continue;
		p += 11;
		if (strncmp(p, "mutex-", 6) == 0)
			p += 6;
		pid = strtol(p, NULL, 10);
		if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(name, sizeof(name), "/%s", e->d_name);
		shm_unlink(name);
	}
	if (d != NULL)
		closedir(d);
}

static volatile sig_atomic_t signals_seen;

/* The first signal (or the watchdog alarm) ends the run in progress
 * cleanly; a second one stops the Redis server and leaves at once. */
static void
on_signal(int sig)
{
	if (signals_seen++ == 0) {
		harness_abort();
		alarm(20);
		return;
	}
	bench_redis_stop(1);
	_exit(128 + sig);
}

static void
install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
}

/* Run one system; append its result to RS unless it fails.  A watchdog
 * alarm ends a run that overstays its time by a minute. */
static int
run_one(const struct opts *o, struct bench_conf c, const struct bench_sys *s,
    const struct zipf *z, struct bench_result *rs, int *n)
{
	int rc;

	int redis = s == &bench_sys_redis || s == &bench_sys_redis_pipe;

	c.system = s->name;
	if (!o->sample_set)
		c.sample = redis ? 1 : 64;
	if (s != &bench_sys_redis_pipe)
		c.pipeline = 1;
	/* Redis: the server on a stated CPU (redis_server.c) and its clients
	 * pinned, so that the figures do not follow the scheduler. */
	snprintf(c.server_cpu, sizeof(c.server_cpu), "-");
	if (redis) {
		c.pin = 1;
		if (c.redis_sock != NULL)
			snprintf(c.server_cpu, sizeof(c.server_cpu), "external");
		else if (c.redis_cpu < 0)
			snprintf(c.server_cpu, sizeof(c.server_cpu), "none");
		else
			snprintf(c.server_cpu, sizeof(c.server_cpu), "%d",
			    c.redis_cpu);
	}
	alarm((unsigned)(c.warmup_s + c.duration_s) + 60);
	rc = harness_run(&c, s, z, &rs[*n]);
	alarm(0);
	if (rc < 0) {
		fprintf(stderr, "shmthrottle-bench: %s on %s: %s\n", c.workload,
		    s->name, shmt_strerror(rc));
		return rc;
	}
	report_run(&rs[(*n)++], o->json);
	return 0;
}

/* The table the workers draw client ids or keys from, (re)built when the
 * workload needs another one than the last. */
static int
draw_table(const struct bench_conf *c, struct zipf *z)
{
	uint32_t n = c->kind == BK_THROTTLE_CLIENTS ? c->clients : c->dict_keys;
	double s = c->kind != BK_THROTTLE_CLIENTS && c->uniform ? 0 : c->zipf_s;

	if (!bench_kind_draws(c->kind) || (z->n == n && z->s == s))
		return 0;
	zipf_free(z);
	return zipf_init(z, n, s);
}

/* Whether any system named in LIST runs C (else the floor is not run). */
static int
any_supports(const char *list, const struct bench_conf *c)
{
	for (size_t i = 0; i < NSYSTEMS; i++) {
		const char *p = strstr(list, systems[i]->name);
		size_t len = strlen(systems[i]->name);

		if (p != NULL && (p == list || p[-1] == ',') &&
		    (p[len] == ',' || p[len] == '\0') && systems[i]->supports(c))
			return 1;
	}
	return 0;
}

/* Run every system of LIST (and the floor) on workload WL. */
static int
run_workload(const struct opts *o, const struct workload *wl,
    struct zipf *z)
{
	struct bench_result rs[NSYSTEMS + NFLOORS];
	struct bench_conf c = o->c;
	char *list = strdup(o->systems), *save = NULL;
	int n = 0, rc = 0;

	if (list == NULL)
		return -ENOMEM;
	if ((rc = finalize(o, wl, &c)) < 0)
		goto out;
	if (!any_supports(o->systems, &c)) {
		fprintf(stderr, "shmthrottle-bench: %s: none of %s has it\n",
		    wl->name, o->systems);
		rc = -ENOSYS;
		goto out;
	}
	if ((rc = draw_table(&c, z)) < 0)
		goto out;
	for (size_t i = 0; !o->no_floor && i < NFLOORS && !signals_seen; i++) {
		if (floors[i] == &bench_sys_floor_cas8 &&
		    c.mode != SHMT_MODE_GCRA)
			continue;
		if (run_one(o, c, floors[i], z, rs, &n) < 0)
			rc = -EIO;
	}
	for (char *t = strtok_r(list, ",", &save); t && !signals_seen;
	    t = strtok_r(NULL, ",", &save)) {
		const struct bench_sys *s = find_system(t);

		if (s == NULL) {
			fprintf(stderr, "shmthrottle-bench: no system '%s'\n", t);
			rc = -EINVAL;
		} else if (!s->supports(&c)) {
			fprintf(stderr, "shmthrottle-bench: %s: skipped on %s "
			    "(no such op)\n", wl->name, s->name);
		} else if (run_one(o, c, s, z, rs, &n) < 0) {
			rc = -EIO;
		}
	}
	if (n > 0)
		report_table(rs, n, o->json);
out:
	free(list);
	return rc;
}

int
main(int argc, char **argv)
{
	struct opts o = {
		.c = { .threads = 1, .duration_s = 2, .warmup_s = 0.5,
			.nkeys = 1000, .clients = 1000000, .capacity = 262144,
			.zipf_s = 0.99, .dict_keys = 1000000, .value_size = 16,
			.analyzer = 1, .redis_cpu = -2, .pipeline = 16,
			.progress = isatty(2) },
		.workloads = "throttle-same",
		.systems = "shmt,mutex,mutex-1lock,redis,redis-pipe,lmdb",
	};
	struct zipf z = { 0 };
	char *list, *save = NULL;
	int rc = 0, go;

	o.c.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if ((go = parse_args(&o, argc, argv)) <= 0)
		return go < 0 ? 2 : 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	install_signals();
	remove_stale_segments();
	bench_redis_clean_stale();
	bench_lmdb_clean_stale();
	if (o.c.redis_cpu == -2)
		o.c.redis_cpu = bench_first_cpu();
	harness_init();
	if (!o.no_clock || o.clock_only) {
		struct bench_clock k;

		if (bench_clock_measure(&k, o.clock_only ? 9 : 5, 200000) < 0)
			return 1;
		report_clock(&k, o.json);
		if (o.clock_only)
			return 0;
	}
	if ((list = strdup(o.workloads)) == NULL)
		return 1;
	for (char *t = strtok_r(list, ",", &save); t && !signals_seen;
	    t = strtok_r(NULL, ",", &save)) {
		const struct workload *wl = find_workload(t);

		if (wl == NULL) {
			fprintf(stderr, "shmthrottle-bench: no workload '%s' "
			    "(--list shows them)\n", t);
			rc = -EINVAL;
		} else if (run_workload(&o, wl, &z) < 0) {
			rc = -EIO;
		}
	}
	free(list);
	zipf_free(&z);
	bench_redis_stop(0);
	return rc < 0 || signals_seen ? 1 : 0;
}
