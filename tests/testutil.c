/* SPDX-License-Identifier: MIT */
/* Helpers shared by the tests: unique names, an injected clock, seeds, the
 * small segment, files, child processes and the daemon, and the places
 * inside a segment that tests damage. */
#include "testutil.h"

#include "limiter.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef SHMT_SANITIZE_THREAD
/* A process that followed moves has the library's reclaim worker thread
 * (lib/rcu.c), and a child that follows more starts one of its own: a
 * thread made in the child of a threaded process, which TSan allows only
 * when told to. */
const char *__tsan_default_options(void);
const char *
__tsan_default_options(void)
{
	return "die_after_fork=0";
}
#endif

void
tu_segname(char *buf, size_t cap, const char *tag)
{
	static atomic_uint n;

	snprintf(buf, cap, "/shmt-test-%d-%u-%s", (int)getpid(),
	    atomic_fetch_add(&n, 1), tag);
}

shmt_time_t
tu_clock_read(void *ctx)
{
	return ((struct tu_clock *)ctx)->now;
}

uint64_t
tu_seed(const char *test)
{
	const char *env = getenv("SHMT_SEED");
	uint64_t seed;

	if (env != NULL && strcmp(env, "random") == 0) {
		/* Exploration, by hand: a new seed each run. */
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
		    (uint64_t)getpid();
	} else if (env != NULL && *env != '\0') {
		seed = strtoull(env, NULL, 0);
	} else {
		/* The default, and the gate's: a seed of the test's own (FNV-1a
		 * of its name), the same on every run, so that a verdict
		 * depends on the code and not on the draw. */
		seed = 14695981039346656037ULL;
		for (const char *c = test; *c != '\0'; c++) {
			seed ^= (unsigned char)*c;
			seed *= 1099511628211ULL;
		}
	}
	if (seed == 0)
		seed = 1;
	printf("# %s: seed %" PRIu64 " (replay with SHMT_SEED=%" PRIu64 ")\n",
	    test, seed, seed);
	fflush(stdout);
	return seed;
}

uint64_t
tu_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

void
tu_secret(shmt_t *h, uint64_t *state)
{
	uint8_t key[SHMT_SECRET_BYTES];

	for (size_t i = 0; i < sizeof(key); i += 8) {
		uint64_t r = tu_rand(state);

		memcpy(key + i, &r, sizeof(key) - i < 8 ? sizeof(key) - i : 8);
	}
	shmt__secret_set(h, key);
}

double
tu_scale(void)
{
	const char *env = getenv("SHMT_STRESS_SCALE");
	double v = env != NULL ? strtod(env, NULL) : 1.0;

	return v > 0 ? v : 1.0;
}

int
tu_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

int
tu_sweep(void **state)
{
	char prefix[64], path[512];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");

	(void)state;
	if (d == NULL)
		return 0;
	snprintf(prefix, sizeof(prefix), "shmt-test-%d-", (int)getpid());
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		unlink(path);
	}
	closedir(d);
	return 0;
}

uint64_t
tu_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void
tu_pause_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

void
tu_config_small(shmt_config_t *cfg)
{
	shmt_config_init(cfg);
	cfg->max_limiters = 8;
	cfg->max_slots = 16;
	cfg->arena_bytes = 1 << 20;
	cfg->dict_bytes = 4 << 20;
	cfg->dict_shards = 2;
	cfg->counters_bytes = 256 << 10;
	cfg->counters_shards = 2;
}

void
tu_config_tiny(shmt_config_t *cfg)
{
	shmt_config_init(cfg);
	cfg->max_slots = 16;
	cfg->arena_bytes = 64ULL << 10;
	cfg->dict_bytes = 2ULL << 20;
	cfg->dict_shards = 1;
	cfg->counters_bytes = 64ULL << 10;
	cfg->counters_shards = 1;
	cfg->counters_subwindows = 4;
	cfg->counters_window_ns = 4000000000ULL;
}

void
tu_close_unlink(shmt_t *h, const char *seg)
{
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

void
tu_define_check_limiters(shmt_t *h)
{
	const uint64_t s = 1000000000ULL, hour = 3600 * s;
	shmt_limit_t l;

	memset(&l, 0, sizeof(l));
	l.limit = 10, l.window_ns = hour, l.slack_ns = s, l.slack_uses = 4;
	assert_int_equal(shmt_limiter_define(h, "api", &l), 0);
	l.per_client = 1, l.client_capacity = 16;
	assert_int_equal(shmt_limiter_define(h, "pc", &l), 0);
	memset(&l, 0, sizeof(l));
	l.limit = 3, l.window_ns = hour, l.mode = SHMT_MODE_EXACT;
	l.slack_uses = 1;
	assert_int_equal(shmt_limiter_define(h, "exact", &l), 0);
}

/* ---- Files ------------------------------------------------------------------ */

void
tu_write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

char *
tu_read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_true(fread(buf, 1, (size_t)n, f) == (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

int
tu_file_has(const char *path, const char *needle)
{
	char *text;
	int found;

	if (access(path, R_OK) != 0)
		return 0;
	text = tu_read_all(path);
	found = strstr(text, needle) != NULL;
	free(text);
	return found;
}

unsigned char *
tu_zr_load(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *out;
	char magic[8];
	uint64_t n, at = 0;

	if (f == NULL)
		fail_msg("cannot open %s", path);
	assert_true(fread(magic, 1, 8, f) == 8 &&
	    memcmp(magic, "SHMTZR1\n", 8) == 0);
	assert_true(fread(&n, 8, 1, f) == 1 && n > 0 && n < (1ULL << 30));
	out = calloc(1, (size_t)n);
	assert_non_null(out);
	for (;;) {
		uint64_t off;
		uint32_t cl[2];

		if (fread(&off, 8, 1, f) != 1)
			break;
		assert_true(fread(cl, 4, 2, f) == 2);
		assert_true(off >= at && off <= n && cl[0] <= n - off);
		assert_true(fread(out + off, 1, cl[0], f) == cl[0]);
		at = off + cl[0];
	}
	fclose(f);
	*len = (size_t)n;
	return out;
}

void
tu_tmpdir(char *dir, size_t cap, const char *tag)
{
	snprintf(dir, cap, "/tmp/shmt-test-%s-XXXXXX", tag);
	assert_non_null(mkdtemp(dir));
}

int
tu_rmdir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[512];

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (unlink(p) != 0 && errno == EISDIR)
			(void)tu_rmdir(p);
	}
	closedir(d);
	return rmdir(dir) == 0 ? 0 : -1;
}

/* ---- Processes -------------------------------------------------------------- */

pid_t
tu_fork_pipe(int p[2])
{
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	return pid;
}

int
tu_child_result(int (*fn)(void *arg), void *arg, unsigned alarm_s)
{
	int p[2], rc = 0, st;
	pid_t pid;

	pid = tu_fork_pipe(p);
	if (pid == 0) {
		alarm(alarm_s);
		close(p[0]);
		rc = fn(arg);
		_exit(write(p[1], &rc, sizeof(rc)) == sizeof(rc) ? 0 : 1);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &rc, sizeof(rc)), sizeof(rc));
	close(p[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return rc;
}

pid_t
tu_daemon_spawn(const char *bin, const char *conf, const char *seg,
    const char *log, const char *const *args, const char *const *envs)
{
	const char *argv[16];
	int n = 0;
	pid_t pid;

	argv[n++] = bin;
	argv[n++] = "-f";
	argv[n++] = "-c";
	argv[n++] = conf;
	argv[n++] = "-s";
	argv[n++] = seg;
	for (; args != NULL && *args != NULL && n < 15; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(126);
		for (; envs != NULL && *envs != NULL; envs++)
			putenv((char *)*envs);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

int
tu_wait_exit(pid_t *pidp, int wait_ms)
{
	pid_t pid = *pidp;
	int st;

	for (int i = 0; i < wait_ms / 5; i++) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		assert_true(r >= 0);
		if (r == pid) {
			*pidp = 0;
			if (WIFSIGNALED(st))
				fail_msg("pid %d died of signal %d", (int)pid,
				    WTERMSIG(st));
			return WEXITSTATUS(st);
		}
		tu_pause_ms(5);
	}
	fail_msg("pid %d did not exit", (int)pid);
	return -1;
}

/* ---- Inside a segment -------------------------------------------------------- */

struct shmt_lim *
tu_row_of(shmt_t *h, const char *name)
{
	struct shmt_lim *lim = shmt__region(h, SHMT_R_LIMITERS);
	uint32_t n = (uint32_t)(h->reg[SHMT_R_LIMITERS].rg_size / sizeof(*lim));

	for (uint32_t i = 0; i < n; i++)
		if (strcmp(lim[i].lm_name, name) == 0)
			return &lim[i];
	fail_msg("no row %s", name);
	return NULL;
}

char *
tu_arena(shmt_t *h)
{
	return shmt__region(h, SHMT_R_ARENA);
}

struct shmt_shard *
tu_shard(const struct shmt_store *st, uint32_t i)
{
	return (struct shmt_shard *)(st->base + (uint64_t)i * st->stride);
}

struct shmt_item *
tu_first_item(const struct shmt_store *st, uint32_t i)
{
	char *sh = (char *)tu_shard(st, i);
	struct shmt_bucket *index = (struct shmt_bucket *)(sh + st->index_off);

	for (uint64_t b = 0; b < st->nbuckets; b++)
		if (index[b].bk_head != 0)
			return (struct shmt_item *)(sh + st->heap_off +
			    link_off(index[b].bk_head));
	return NULL;
}

uint32_t
tu_dead_tid(void)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return (uint32_t)pid;
}
