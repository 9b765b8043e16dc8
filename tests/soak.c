/* SPDX-License-Identifier: MIT */
/*
 * The soak: SHMT_SOAK_SECONDS (default 180) of mixed load from several
 * processes (a shared limiter, a per-client limiter, dictionary reads and
 * writes with self-checking values, hits and hot keys) while the test kills
 * random workers with SIGKILL and starts new ones, and kills the daemon
 * (shmthrottled, when its path is given) with SIGKILL and starts it again.
 * Every grant is logged with the clock read before and after its call, in
 * memory that outlives the worker; at the end:
 *   over-grants  more than `limit` grants certainly inside one window
 *                (their brackets fit in it), per limiter and per client: 0
 *   torn reads   values that fail their own check: 0
 *   leaked slots slots of dead processes left after shmt_housekeep: 0
 *   lost keys    sentinel keys written once at the start (eviction is off)
 *                missing or changed at the end: 0
 * and shmt_check finds nothing.  One summary line says it all.
 * usage: soak [SHMTHROTTLED]; seeded (SHMT_SEED).
 */
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SK_WORKERS 4
#define SK_CLIENTS 8
#define SK_SENTINELS 128
#define SK_KEYS 64
#define SK_LOG (1u << 22)          /* grant records, all workers */
#define SK_LIMIT 200ULL            /* "soak": uses per window */
#define SK_WINDOW 200000000ULL     /* 200 ms */
#define SK_CLIENT_LIMIT 5ULL

struct sk_grant {
	uint64_t start, end;     /* CLOCK_MONOTONIC around the call */
	uint32_t who;            /* 0: "soak"; 1 + client: "pc" */
};

struct sk_shared {
	atomic_int stop;
	_Atomic uint64_t ops, torn, errors;
	_Atomic uint32_t nlog;
	struct sk_grant log[SK_LOG];
};

/* A self-checking value: 16 bytes of header (length, seed), then bytes
 * that follow from the seed. */
static size_t
make_value(unsigned char *v, size_t len, uint64_t seed)
{
	uint64_t s = seed | 1, l = len;

	memcpy(v, &l, 8);
	memcpy(v + 8, &seed, 8);
	for (size_t i = 16; i < len; i++)
		v[i] = (unsigned char)tu_rand(&s);
	return len;
}

static int
value_ok(const unsigned char *v, size_t len)
{
	uint64_t l, seed, s;

	if (len < 16)
		return 0;
	memcpy(&l, v, 8);
	memcpy(&seed, v + 8, 8);
	if (l != len)
		return 0;
	s = seed | 1;
	for (size_t i = 16; i < len; i++)
		if (v[i] != (unsigned char)tu_rand(&s))
			return 0;
	return 1;
}

static void
log_grant(struct sk_shared *sh, uint64_t s, uint64_t e, uint32_t who)
{
	uint32_t i = atomic_fetch_add(&sh->nlog, 1);

	if (i < SK_LOG)
		sh->log[i] = (struct sk_grant){ s, e, who };
}

static void
worker(struct sk_shared *sh, const char *name, uint64_t seed)
{
	static unsigned char v[8192], buf[8192];
	uint64_t rng = seed;
	shmt_t *h;
	char k[32];
	size_t len;
	int rc;

	alarm(600);
	if (shmt_open(name, &h) != 0)
		_exit(3);
	while (!atomic_load(&sh->stop)) {
		uint64_t r = tu_rand(&rng), s, e;
		unsigned c = (unsigned)(r % SK_CLIENTS);

		s = tu_mono_ns();
		rc = shmt_try_use_key(h, "soak");
		e = tu_mono_ns();
		if (rc == 1)
			log_grant(sh, s, e, 0);
		snprintf(k, sizeof(k), "client-%u", c);
		s = tu_mono_ns();
		rc = shmt_try_use(h, "pc", k, strlen(k));
		e = tu_mono_ns();
		if (rc == 1)
			log_grant(sh, s, e, 1 + c);
		snprintf(k, sizeof(k), "%s-%u", r & 1 ? "key" : "sentinel",
		    (unsigned)((r >> 8) % (r & 1 ? SK_KEYS : SK_SENTINELS)));
		rc = shmt_get(h, k, strlen(k), buf, sizeof(buf), &len);
		if (rc == 0 && !value_ok(buf, len))
			atomic_fetch_add(&sh->torn, 1);
		if ((r & 1) && (r >> 20) % 4 == 0) {
			len = make_value(v, 16 + (r >> 24) % 4000, tu_rand(&rng));
			shmt_set(h, k, strlen(k), v, len, 0);
		}
		shmt_hit(h, k, strlen(k), NULL);
		if ((r >> 40) % 256 == 0) {
			shmt_hotkey_t hot[4];

			shmt_top_keys(h, hot, 4, NULL);
		}
		atomic_fetch_add(&sh->ops, 5);
	}
	shmt_close(h);
	_exit(0);
}

static pid_t
spawn_worker(struct sk_shared *sh, const char *name, uint64_t seed)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		worker(sh, name, seed);
	return pid;
}

static pid_t
spawn_daemon(const char *daemon, const char *conf, const char *name)
{
	pid_t pid;

	if (daemon == NULL)
		return 0;
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (freopen("/dev/null", "w", stderr) == NULL)
			_exit(126);
		execl(daemon, daemon, "-f", "-c", conf, "-s", name, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int
by_start(const void *a, const void *b)
{
	const struct sk_grant *x = a, *y = b;

	if (x->who != y->who)
		return x->who < y->who ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Grants of one limiter (or client) certainly inside one window: for each
 * grant i, those that start at or after it and end before start_i +
 * window.  Returns how far the worst window is over LIMIT. */
static uint64_t
overgrants(const struct sk_grant *g, size_t n, uint64_t limit)
{
	uint64_t worst = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t in = 0, edge = g[i].start + SK_WINDOW;

		for (size_t j = i; j < n && g[j].start < edge; j++)
			if (g[j].end < edge)
				in++;
		if (in > limit && in - limit > worst)
			worst = in - limit;
	}
	return worst;
}

static void
define_limiters(shmt_t *h)
{
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.limit = SK_LIMIT, l.window_ns = SK_WINDOW;
	l.slack_ns = SK_WINDOW / 10, l.slack_uses = SK_LIMIT / 10;
	assert_int_equal(shmt_limiter_define(h, "soak", &l), 0);
	memset(&l, 0, sizeof(l));
	l.limit = SK_CLIENT_LIMIT, l.window_ns = SK_WINDOW;
	l.slack_ns = SK_WINDOW / 10, l.slack_uses = 1;
	l.per_client = 1, l.client_capacity = 64;
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
}

static void
test_soak(void **state)
{
	const char *daemon = *state;
	const char *env = getenv("SHMT_SOAK_SECONDS");
	double secs = env != NULL && atof(env) > 0 ? atof(env) : 180.0;
	uint64_t seed = tu_seed("soak"), rng = seed;
	struct sk_shared *sh;
	shmt_config_t cfg;
	shmt_segment_stat_t st;
	unsigned char v[64], buf[64];
	char name[128], conf[64], k[32];
	pid_t pids[SK_WORKERS], dpid;
	uint64_t end, kills = 0, dkills = 0, dexits = 0, over = 0, lost = 0;
	uint64_t next_dkill;
	size_t len, n;
	FILE *f;
	shmt_t *h;
	uint64_t torn;
	int problems;

	tu_segname(name, sizeof(name), "soak");
	snprintf(conf, sizeof(conf), "/tmp/shmt-soak-%d.conf", (int)getpid());
	shmt_config_init(&cfg);
	cfg.max_limiters = 8;
	cfg.max_slots = 64;
	cfg.arena_bytes = 1ULL << 20;
	cfg.dict_bytes = 4ULL << 20;
	cfg.dict_shards = 2;
	cfg.dict_eviction = 0;
	cfg.counters_bytes = 1ULL << 20;
	cfg.analyzer_bytes = 256ULL << 10;
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	define_limiters(h);
	for (int i = 0; i < SK_SENTINELS; i++) {
		snprintf(k, sizeof(k), "sentinel-%d", i);
		len = make_value(v, 16 + (size_t)i % 40, 1000 + (uint64_t)i);
		assert_int_equal(shmt_set(h, k, strlen(k), v, len, 0), 0);
	}
	/* The daemon attaches to the segment as it is; its config only names
	 * it (no limiters of its own). */
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "[segment]\nname = %s\n", name);
	fclose(f);

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	for (int i = 0; i < SK_WORKERS; i++)
		pids[i] = spawn_worker(sh, name, tu_rand(&rng));
	dpid = spawn_daemon(daemon, conf, name);
	end = tu_mono_ns() + (uint64_t)(secs * 1e9);
	next_dkill = tu_mono_ns() + 2000000000ULL;
	while (tu_mono_ns() < end) {
		struct timespec pause = { 0, (long)(5 + tu_rand(&rng) % 95) * 1000000L };
		int w = (int)(tu_rand(&rng) % SK_WORKERS);

		nanosleep(&pause, NULL);
		kill(pids[w], SIGKILL);
		waitpid(pids[w], NULL, 0);
		kills++;
		pids[w] = spawn_worker(sh, name, tu_rand(&rng));
		if (dpid > 0 && tu_mono_ns() > next_dkill) {
			int ds = 0;

			kill(dpid, SIGKILL);
			waitpid(dpid, &ds, 0);
			/* Only a daemon that was still running counts. */
			if (WIFSIGNALED(ds) && WTERMSIG(ds) == SIGKILL)
				dkills++;
			else
				dexits++;
			dpid = spawn_daemon(daemon, conf, name);
			next_dkill = tu_mono_ns() + 500000000ULL +
			    tu_rand(&rng) % 3000000000ULL;
		}
	}
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < SK_WORKERS; i++) {
		int status;

		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	if (dpid > 0) {
		int ds = 0;

		kill(dpid, SIGKILL);
		waitpid(dpid, &ds, 0);
		if (WIFSIGNALED(ds) && WTERMSIG(ds) == SIGKILL)
			dkills++;
		else
			dexits++;
	}

	n = atomic_load(&sh->nlog);
	assert_true(n < SK_LOG);
	qsort(sh->log, n, sizeof(sh->log[0]), by_start);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && sh->log[j].who == sh->log[i].who; j++)
			;
		over += overgrants(sh->log + i, j - i,
		    sh->log[i].who == 0 ? SK_LIMIT : SK_CLIENT_LIMIT);
	}
	for (int i = 0; i < SK_SENTINELS; i++) {
		snprintf(k, sizeof(k), "sentinel-%d", i);
		len = make_value(v, 16 + (size_t)i % 40, 1000 + (uint64_t)i);
		if (shmt_get(h, k, strlen(k), buf, sizeof(buf), &n) != 0 ||
		    n != len || memcmp(buf, v, len) != 0)
			lost++;
	}
	assert_true(shmt_housekeep(h, NULL) >= 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	problems = shmt_check(h, NULL, NULL);
	torn = atomic_load(&sh->torn);
	printf("SOAK seconds=%.0f workers=%d ops=%" PRIu64 " grants=%zu "
	    "kills=%" PRIu64 " daemon_kills=%" PRIu64 " daemon_exits=%" PRIu64 " overgrants=%" PRIu64
	    " torn=%" PRIu64 " leaked_slots=%u lost_keys=%" PRIu64
	    " check=%d seed=%" PRIu64 "\n", secs, SK_WORKERS,
	    atomic_load(&sh->ops), (size_t)atomic_load(&sh->nlog), kills,
	    dkills, dexits, over, torn, st.slots_stale, lost,
	    problems, seed);
	shmt_close(h);
	unlink(conf);
	munmap(sh, sizeof(*sh));
	assert_int_equal(shmt_unlink(name), 0);
	assert_int_equal(over, 0);
	assert_int_equal(torn, 0);
	assert_int_equal(st.slots_stale, 0);
	assert_int_equal(lost, 0);
	assert_int_equal(problems, 0);
	/* A daemon that stops on its own was never under test. */
	assert_int_equal(dexits, 0);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate(test_soak, argc > 1 ? argv[1] : NULL),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
