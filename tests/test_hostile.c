/* SPDX-License-Identifier: MIT */
/*
 * A hostile segment: one process maps the segment writable and scribbles
 * random bytes at random offsets of every region while forked workers run
 * every operation of the API in loops.  The workers may get errors but must
 * never crash and never hang: each call is timed through shared memory and a
 * watchdog in the test process fails the test (and kills everyone) when one
 * call has run longer than its limit (HS_CALL_LIMIT_NS; shmt_housekeep's
 * is HS_HOUSEKEEP_LIMIT_NS, see there).  Returned lengths must stay
 * inside the buffers they describe.  Afterwards shmt_check() must name the
 * damage, and it must also find it when only the limiter rows or only the
 * dictionary were scribbled.  Seeded: replay with SHMT_SEED=<seed>.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HS_WORKERS 3
/* No call takes more than milliseconds on a sound segment; a call that
 * runs for two seconds is stuck (a lock that is never released, a chain
 * that loops).  On a damaged one a call may wait for a lock word that
 * names a live, running worker: 1 s at most per wait (lib/lock.c), after
 * which it gives up with SHMT_ELOCKED.  Every call makes one such wait at
 * most but shmt_housekeep, whose header allows one per store and one for
 * the client tables: three, so its own limit is above those 3 s. */
#define HS_CALL_LIMIT_NS (2ULL * 1000000000ULL)
#define HS_HOUSEKEEP_LIMIT_NS (4ULL * 1000000000ULL)
/* Chaos phase length in the normal build (scaled, at least HS_MIN_NS). */
#define HS_CHAOS_NS 3.0e9
#define HS_MIN_NS 1000000000ULL
/* Every child's last resort against a broken watchdog. */
#define HS_ALARM 120

/* The operations, named for the report. */
enum hs_op {
	OP_NONE, OP_OPEN, OP_TRY, OP_NEXT_KEY, OP_CLIENT, OP_LSTAT, OP_LIST,
	OP_BUCKETS, OP_GET, OP_SET, OP_ADD, OP_REPLACE, OP_DEL, OP_INCR,
	OP_WALK, OP_DSTAT, OP_HIT, OP_TOP, OP_SSTAT, OP_HOUSEKEEP, OP_CHECK,
	OP_CLOSE, OP_ACQUIRE, OP_PEEK, OP_WAIT, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"none", "shmt_open", "shmt_try_use_key", "shmt_next_key",
	"shmt_try_use", "shmt_limiter_stat", "shmt_limiter_list",
	"shmt_limiter_buckets", "shmt_get", "shmt_set", "shmt_add",
	"shmt_replace", "shmt_del", "shmt_incr", "shmt_dict_next",
	"shmt_dict_stat", "shmt_hit", "shmt_top_keys", "shmt_segment_stat",
	"shmt_housekeep", "shmt_check", "shmt_close", "shmt_acquire",
	"shmt_peek", "shmt_wait"
};

struct hs_worker {
	_Atomic uint64_t call_start;  /* CLOCK_MONOTONIC; 0 between calls */
	atomic_int op;
	_Atomic uint64_t calls, errors;
	_Atomic uint64_t max_ns[OP_COUNT];
};

struct hs_shared {
	atomic_int stop;
	_Atomic uint64_t scribbles;
	struct hs_worker w[HS_WORKERS];
};

static void
small_config(shmt_config_t *cfg)
{
	tu_config_tiny(cfg);
	cfg->max_limiters = 8;
	cfg->analyzer_bytes = 64ULL << 10;
	cfg->analyzer_window_ns = 4000000000ULL;
	cfg->analyzer_subwindows = 4;
	cfg->analyzer_clients = 1;
}

static const char *const pool_keys[] = { "k-one", "k-two", "k-three" };
static const char *const limiter_names[] = { "api", "exact", "pool", "pc" };

/* A segment with a limiter of every kind, keys, hits and hot keys; its
 * secret, and so where the keys lie (what a scribble lands on), is drawn
 * from SEED, on a stream of its own. */
static shmt_t *
make_segment(const char *name, uint64_t seed)
{
	shmt_config_t cfg;
	shmt_limit_t l;
	shmt_t *h = NULL;
	uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;
	char k[32];

	small_config(&cfg);
	assert_int_equal(shmt_create(name, &cfg, &h), 0);
	tu_secret(h, &ss);
	memset(&l, 0, sizeof(l));
	l.limit = 50, l.window_ns = 100000000ULL, l.slack_ns = 10000000ULL;
	l.slack_uses = 5;
	assert_int_equal(shmt_limiter_define(h, "api", &l), 0);
	memset(&l, 0, sizeof(l));
	l.limit = 20, l.window_ns = 100000000ULL, l.mode = SHMT_MODE_EXACT;
	l.slack_uses = 1;
	assert_int_equal(shmt_limiter_define(h, "exact", &l), 0);
	memset(&l, 0, sizeof(l));
	l.window_ns = 100000000ULL, l.slack_ns = 20000000ULL, l.slack_uses = 1;
	l.keys = pool_keys, l.nkeys = 3, l.uses_per_key = 4;
	assert_int_equal(shmt_limiter_define(h, "pool", &l), 0);
	memset(&l, 0, sizeof(l));
	l.limit = 5, l.window_ns = 100000000ULL, l.slack_ns = 10000000ULL;
	l.slack_uses = 1, l.per_client = 1, l.client_capacity = 16;
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	for (int i = 0; i < 64; i++) {
		snprintf(k, sizeof(k), "key-%d", i);
		assert_int_equal(shmt_set(h, k, strlen(k), k, strlen(k), 0), 0);
		assert_int_equal(shmt_hit(h, k, strlen(k), NULL), 0);
	}
	return h;
}

/* ---- The workers ------------------------------------------------------- */

struct hs_ctx {
	struct hs_worker *w;
	shmt_t *h;
	uint64_t rng;
	struct tu_clock clock;
};

static void
begin(struct hs_ctx *c, enum hs_op op)
{
	atomic_store(&c->w->op, (int)op);
	atomic_store(&c->w->call_start, tu_mono_ns());
	c->clock.now += 1000000ULL;
}

static void
end(struct hs_ctx *c, int rc)
{
	uint64_t d = tu_mono_ns() - atomic_load(&c->w->call_start);
	int op = atomic_load(&c->w->op);

	if (d > atomic_load(&c->w->max_ns[op]))
		atomic_store(&c->w->max_ns[op], d);
	atomic_store(&c->w->call_start, 0);
	atomic_fetch_add(&c->w->calls, 1);
	if (rc < 0)
		atomic_fetch_add(&c->w->errors, 1);
}

/* A broken promise about a returned length: the child dies loudly. */
static void
bad_result(const char *what, long v)
{
	fprintf(stderr, "hostile: %s returned an impossible %ld\n", what, v);
	abort();
}

static void
work_limiters(struct hs_ctx *c)
{
	static shmt_limiter_stat_t ls[8];
	static shmt_bucket_info_t bi[64];
	char key[SHMT_KEYNAME_MAX + 1], client[16];
	const char *name = limiter_names[tu_rand(&c->rng) % 4];
	int rc;

	begin(c, OP_TRY);
	end(c, shmt_try_use_key(c->h, name));
	begin(c, OP_NEXT_KEY);
	rc = shmt_next_key(c->h, name, key, sizeof(key));
	end(c, rc);
	if (rc > 0 && (size_t)rc != strnlen(key, sizeof(key)))
		bad_result("shmt_next_key", rc);
	snprintf(client, sizeof(client), "c%u", (unsigned)(tu_rand(&c->rng) % 40));
	begin(c, OP_CLIENT);
	end(c, shmt_try_use(c->h, "pc", client, strlen(client)));
	{
		shmt_decision_t d;
		uint64_t cost = 1 + tu_rand(&c->rng) % 2;

		begin(c, OP_ACQUIRE);
		rc = shmt_acquire(c->h, name, NULL, 0, cost, &d);
		end(c, rc);
		if (rc > 1)
			bad_result("shmt_acquire", rc);
		begin(c, OP_PEEK);
		rc = shmt_peek(c->h, "pc", client, strlen(client), cost, &d);
		end(c, rc);
		if (rc > 1)
			bad_result("shmt_peek", rc);
		begin(c, OP_WAIT);
		rc = shmt_wait(c->h, name, NULL, 0, 1, 0, &d);
		end(c, rc);
		if (rc > 1)
			bad_result("shmt_wait", rc);
	}
	begin(c, OP_LSTAT);
	end(c, shmt_limiter_stat(c->h, name, &ls[0]));
	begin(c, OP_LIST);
	rc = shmt_limiter_list(c->h, ls, 8);
	end(c, rc);
	for (int i = 0; i < rc && i < 8; i++)
		if (memchr(ls[i].name, '\0', sizeof(ls[i].name)) == NULL)
			bad_result("shmt_limiter_list name", i);
	begin(c, OP_BUCKETS);
	rc = shmt_limiter_buckets(c->h, "api", bi, 64);
	end(c, rc);
}

static void
work_dict(struct hs_ctx *c)
{
	static unsigned char kbuf[SHMT_KEY_MAX];
	char k[32], v[256];
	uint64_t cursor = 0, count;
	size_t len = 0;
	int64_t sum;
	long steps = 0;
	int rc;

	snprintf(k, sizeof(k), "key-%u", (unsigned)(tu_rand(&c->rng) % 80));
	begin(c, OP_GET);
	rc = shmt_get(c->h, k, strlen(k), v, sizeof(v), &len);
	end(c, rc);
	if (rc == 0 && len > sizeof(v))
		bad_result("shmt_get length", (long)len);
	begin(c, OP_SET);
	end(c, shmt_set(c->h, k, strlen(k), k, strlen(k), tu_rand(&c->rng) % 3));
	begin(c, OP_ADD);
	end(c, shmt_add(c->h, k, strlen(k), "added", 5, 0));
	begin(c, OP_REPLACE);
	end(c, shmt_replace(c->h, k, strlen(k), "replaced", 8, 0));
	begin(c, OP_INCR);
	end(c, shmt_incr(c->h, "counter", 7, 1, &sum));
	if (tu_rand(&c->rng) % 4 == 0) {
		begin(c, OP_DEL);
		end(c, shmt_del(c->h, k, strlen(k)));
	}
	begin(c, OP_HIT);
	end(c, shmt_hit(c->h, k, strlen(k), &count));
	if (tu_rand(&c->rng) % 16 != 0)
		return;
	/* The walk must end: count every step against a bound far above
	 * what the heap can hold. */
	for (;;) {
		begin(c, OP_WALK);
		rc = shmt_dict_next(c->h, &cursor, kbuf, sizeof(kbuf), &len);
		end(c, rc);
		if (rc != 1)
			break;
		if (len > SHMT_KEY_MAX)
			bad_result("shmt_dict_next length", (long)len);
		if (++steps > 200000)
			bad_result("shmt_dict_next steps", steps);
	}
}

static void
work_rest(struct hs_ctx *c)
{
	static shmt_hotkey_t hot[4];
	shmt_segment_stat_t st;
	shmt_dict_stat_t ds;
	shmt_top_info_t ti;
	shmt_time_t next;
	int rc;

	begin(c, OP_DSTAT);
	end(c, shmt_dict_stat(c->h, &ds));
	begin(c, OP_TOP);
	rc = shmt_top_keys(c->h, hot, 4, &ti);
	end(c, rc);
	for (int i = 0; i < rc && i < 4; i++)
		if (hot[i].kept > SHMT_KEY_MAX || hot[i].kept > hot[i].klen)
			bad_result("shmt_top_keys kept", (long)hot[i].kept);
	begin(c, OP_SSTAT);
	end(c, shmt_segment_stat(c->h, &st));
	if (tu_rand(&c->rng) % 8 == 0) {
		begin(c, OP_HOUSEKEEP);
		end(c, shmt_housekeep(c->h, &next));
	}
	if (tu_rand(&c->rng) % 32 == 0) {
		begin(c, OP_CHECK);
		end(c, shmt_check(c->h, NULL, NULL));
	}
}

/* Reopen now and then: shmt_open must also cope with a damaged header.
 * A refused open keeps the handle the worker has. */
static void
reopen(struct hs_ctx *c, const char *name)
{
	shmt_t *h = NULL;
	int rc;

	begin(c, OP_OPEN);
	rc = shmt_open(name, &h);
	end(c, rc);
	if (rc != 0)
		return;
	shmt_set_clock(h, tu_clock_read, &c->clock);
	begin(c, OP_CLOSE);
	shmt_close(c->h);
	end(c, 0);
	c->h = h;
}

static void
worker(struct hs_shared *sh, int id, const char *name, uint64_t seed)
{
	struct hs_ctx c = { .w = &sh->w[id], .rng = seed * 31 + (uint64_t)id + 1 };

	alarm(HS_ALARM);
	c.clock.now = 1000000000000ULL;
	if (shmt_open(name, &c.h) != 0)
		_exit(3);
	shmt_set_clock(c.h, tu_clock_read, &c.clock);
	while (!atomic_load(&sh->stop)) {
		work_limiters(&c);
		work_dict(&c);
		work_rest(&c);
		if (tu_rand(&c.rng) % 64 == 0)
			reopen(&c, name);
	}
	shmt_close(c.h);
	_exit(0);
}

/* ---- The scribbler ----------------------------------------------------- */

struct hs_map {
	unsigned char *base;
	size_t size;
	shmt_segment_stat_t st;
};

static void
map_raw(const char *name, shmt_t *h, struct hs_map *m)
{
	struct stat sb;
	int fd = shm_open(name, O_RDWR, 0);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	m->size = (size_t)sb.st_size;
	m->base = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m->base != MAP_FAILED);
	close(fd);
	assert_int_equal(shmt_segment_stat(h, &m->st), 0);
}

/* Write 1..16 random bytes at a random offset of region R. */
static void
scribble(struct hs_map *m, uint32_t r, uint64_t *rng)
{
	const shmt_region_stat_t *rg = &m->st.regions[r];
	uint64_t off, len = 1 + tu_rand(rng) % 16;

	if (rg->size == 0 || rg->offset >= m->size)
		return;
	off = rg->offset + tu_rand(rng) % rg->size;
	for (uint64_t i = 0; i < len && off + i < m->size; i++)
		m->base[off + i] = (unsigned char)tu_rand(rng);
}

static int
region_index(const struct hs_map *m, const char *name)
{
	for (uint32_t i = 0; i < m->st.nregions && i < SHMT_REGIONS_MAX; i++)
		if (strcmp(m->st.regions[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Scribble until told to stop: every region in turn, the header rarely
 * (a damaged header mostly stops new opens, which is tested once). */
static void
scribbler(struct hs_shared *sh, struct hs_map *m, uint64_t seed)
{
	uint64_t rng = seed ^ 0x5c1bb1e5ULL;
	struct timespec pause = { 0, 200000 };

	alarm(HS_ALARM);
	while (!atomic_load(&sh->stop)) {
		uint32_t r = (uint32_t)(tu_rand(&rng) % m->st.nregions);

		if (r == 0 && tu_rand(&rng) % 8 != 0)
			continue;
		scribble(m, r, &rng);
		atomic_fetch_add(&sh->scribbles, 1);
		nanosleep(&pause, NULL);
	}
	_exit(0);
}

/* ---- The test process -------------------------------------------------- */

static void
count_problem(void *ctx, const char *problem)
{
	int *n = ctx;

	if ((*n)++ < 3)
		printf("#   check: %s\n", problem);
}

static void
kill_all(const pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGKILL);
}

/* Watch the workers until DEADLINE; returns the worker stuck in a call,
 * or -1. */
static int
watch(struct hs_shared *sh, uint64_t deadline, uint64_t *stuck_ns)
{
	struct timespec poll = { 0, 10000000 };

	while (tu_mono_ns() < deadline) {
		uint64_t now = tu_mono_ns();

		for (int i = 0; i < HS_WORKERS; i++) {
			/* The op is read around the start, so that a call
			 * ending in between gets the larger of the limits. */
			int op = atomic_load(&sh->w[i].op);
			uint64_t s = atomic_load(&sh->w[i].call_start);
			uint64_t limit = op == OP_HOUSEKEEP ||
			    atomic_load(&sh->w[i].op) == OP_HOUSEKEEP ?
			    HS_HOUSEKEEP_LIMIT_NS : HS_CALL_LIMIT_NS;

			if (s != 0 && now > s && now - s > limit) {
				*stuck_ns = now - s;
				return i;
			}
		}
		nanosleep(&poll, NULL);
	}
	return -1;
}

/* Wait for PID for at most the call limit; a child that does not end is
 * stuck too. */
static int
reap(pid_t pid, int *status)
{
	uint64_t until = tu_mono_ns() + HS_HOUSEKEEP_LIMIT_NS + 1000000000ULL;
	struct timespec poll = { 0, 5000000 };

	while (tu_mono_ns() < until) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 0;
		nanosleep(&poll, NULL);
	}
	return -1;
}

/*
 * shmt_check of segment NAME in a child bounded like every other call (the
 * damage may hold the very locks the check takes).  Returns the problems
 * it found (an open refused for a damaged header counts as one), or -1
 * when the check did not return within the bound.
 */
static int
bounded_check(const char *name)
{
	int p[2], n = -1, st = 0;
	pid_t pid;

	pid = tu_fork_pipe(p);
	if (pid == 0) {
		shmt_t *h = NULL;
		int found = 0, rc;

		alarm(HS_ALARM);
		close(p[0]);
		rc = shmt_open(name, &h);
		if (rc != 0) {
			printf("#   check: open refused: %s\n", shmt_strerror(rc));
			found = 1;
		} else {
			rc = shmt_check(h, count_problem, &found);
			shmt_close(h);
		}
		fflush(stdout);
		if (write(p[1], &found, sizeof(found)) != sizeof(found))
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	if (reap(pid, &st) != 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	} else if (read(p[0], &n, sizeof(n)) != sizeof(n)) {
		n = -1;
	}
	close(p[0]);
	return n;
}

static void
test_chaos(void **state)
{
	uint64_t seed = tu_seed("test_hostile chaos");
	uint64_t len = (uint64_t)(HS_CHAOS_NS * tu_scale());
	struct hs_shared *sh;
	struct hs_map m;
	pid_t pids[HS_WORKERS + 1];
	char name[128];
	shmt_t *h;
	uint64_t stuck_ns = 0, calls = 0, errors = 0;
	int stuck, problems = 0, failed = 0, killed = 0;

	(void)state;
	if (len < HS_MIN_NS)
		len = HS_MIN_NS;
	tu_segname(name, sizeof(name), "hostile");
	h = make_segment(name, seed);
	map_raw(name, h, &m);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	fflush(stdout);
	for (int i = 0; i <= HS_WORKERS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0 && i < HS_WORKERS)
			worker(sh, i, name, seed);
		if (pids[i] == 0)
			scribbler(sh, &m, seed);
	}
	stuck = watch(sh, tu_mono_ns() + len, &stuck_ns);
	atomic_store(&sh->stop, 1);
	if (stuck >= 0) {
		printf("# worker %d stuck in %s for %.1f s (seed %" PRIu64 ")\n",
		    stuck, op_names[atomic_load(&sh->w[stuck].op)],
		    (double)stuck_ns / 1e9, seed);
		failed = 1;
	}
	for (int i = 0; i <= HS_WORKERS; i++) {
		int st = 0;

		if (reap(pids[i], &st) != 0) {
			printf("# %s %d does not end; last call %s\n",
			    i < HS_WORKERS ? "worker" : "scribbler", i,
			    i < HS_WORKERS ?
			    op_names[atomic_load(&sh->w[i].op)] : "-");
			kill_all(pids, HS_WORKERS + 1);
			waitpid(pids[i], &st, 0);
			failed = killed = 1;
			continue;
		}
		/* After kill_all, SIGKILL is ours, not a crash. */
		if (killed && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
			continue;
		if (WIFSIGNALED(st) || WEXITSTATUS(st) != 0) {
			printf("# %s %d died (%s %d) in %s (seed %" PRIu64 ")\n",
			    i < HS_WORKERS ? "worker" : "scribbler", i,
			    WIFSIGNALED(st) ? "signal" : "exit",
			    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
			    i < HS_WORKERS ?
			    op_names[atomic_load(&sh->w[i].op)] : "-", seed);
			failed = 1;
		}
	}
	for (int i = 0; i < HS_WORKERS; i++) {
		calls += atomic_load(&sh->w[i].calls);
		errors += atomic_load(&sh->w[i].errors);
	}
	for (int op = 1; op < OP_COUNT; op++) {
		uint64_t mx = 0;

		for (int i = 0; i < HS_WORKERS; i++)
			if (atomic_load(&sh->w[i].max_ns[op]) > mx)
				mx = atomic_load(&sh->w[i].max_ns[op]);
		printf("#   %-22s longest call %8.3f ms\n", op_names[op],
		    (double)mx / 1e6);
	}
	problems = bounded_check(name);
	if (problems < 0) {
		printf("# shmt_check did not return within %.0f s\n",
		    (double)HS_CALL_LIMIT_NS / 1e9);
		failed = 1;
	}
	printf("# hostile: %" PRIu64 " scribbles, %" PRIu64 " calls, %" PRIu64
	    " errors, check found %d problems (seed %" PRIu64 ")\n",
	    atomic_load(&sh->scribbles), calls, errors, problems, seed);
	shmt_close(h);
	munmap(m.base, m.size);
	munmap(sh, sizeof(*sh));
	assert_int_equal(shmt_unlink(name), 0);
	assert_false(failed);
	assert_true(calls > 0);
	assert_true(problems > 0);
}

/* Scribble only region RNAME (at most BYTES random bytes in chunks) and
 * require shmt_check to find something. */
static void
damage_is_named(const char *rname, int chunks, uint64_t seed)
{
	struct hs_map m;
	char name[128];
	shmt_t *h;
	uint64_t rng = seed;
	int r, n;

	tu_segname(name, sizeof(name), "named");
	h = make_segment(name, seed);
	map_raw(name, h, &m);
	r = region_index(&m, rname);
	assert_true(r >= 0);
	assert_int_equal(shmt_check(h, NULL, NULL), 0);
	for (int i = 0; i < chunks; i++)
		scribble(&m, (uint32_t)r, &rng);
	n = bounded_check(name);
	printf("# %s scribbled (%d chunks): check found %d problems%s\n",
	    rname, chunks, n, n < 0 ? " (did not return)" : "");
	shmt_close(h);
	munmap(m.base, m.size);
	assert_int_equal(shmt_unlink(name), 0);
	assert_true(n > 0);
}

static void
test_damage_named(void **state)
{
	uint64_t seed = tu_seed("test_hostile named");

	(void)state;
	damage_is_named("limiters", 400, seed);
	damage_is_named("dictionary", 4000, seed + 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_damage_named, tu_sweep),
		cmocka_unit_test_teardown(test_chaos, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
