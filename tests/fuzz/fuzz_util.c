/* SPDX-License-Identifier: MIT */
/* Helpers of the fuzz targets: the base segment, patches, the exercise. */
#include "fuzz_util.h"

#include "env.h"
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static shmt_time_t fz_now = FZ_T0;

static shmt_time_t
fz_clock(void *ctx)
{
	(void)ctx;
	return fz_now;
}

static void
fz_die(const char *what, int rc)
{
	fprintf(stderr, "fuzz harness: %s: %s\n", what, shmt_strerror(rc));
	abort();
}

/*
 * The host as the library sees it in the fuzz build (lib/env.h).  Values
 * are plausible rather than special: the pid and thread id are a small
 * positive number below the kernel's limit, the clocks start where a
 * machine up for a while would be, and the start time and boot id parse
 * as the kernel writes them.
 */
#define FZ_MONO0 (FZ_T0 + 500000000ULL)
#define FZ_WALL0 1750000000000000000ULL
#define FZ_BOOT_ID "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n"

static uint64_t fz_ticks, fz_rand_state;

void
fz_env_reset(void)
{
	fz_ticks = 0;
	fz_rand_state = 0x9e3779b97f4a7c15ULL;
}

pid_t
shmt__env_pid(void)
{
	return FZ_PID;
}

uint32_t
shmt__env_tid(void)
{
	return FZ_PID;
}

uint64_t
shmt__env_clock_ns(clockid_t id)
{
	uint64_t t = fz_ticks++ * FZ_STEP_NS;

	return (id == CLOCK_REALTIME ? FZ_WALL0 : FZ_MONO0) + t;
}

/* splitmix64, from a fixed state. */
ssize_t
shmt__env_getrandom(void *buf, size_t n, unsigned flags)
{
	unsigned char *b = buf;

	(void)flags;
	for (size_t i = 0; i < n; i++) {
		uint64_t z = (fz_rand_state += 0x9e3779b97f4a7c15ULL);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		b[i] = (unsigned char)(z ^ (z >> 31));
	}
	return (ssize_t)n;
}

int
shmt__env_kill0(pid_t pid)
{
	if (pid == FZ_PID)
		return 0;
	errno = ESRCH;
	return -1;
}

/* One fixed namespace pair: the fuzzed host never moves between them. */
void
shmt__env_ns(const char *which, uint64_t id[2])
{
	id[0] = 1;
	id[1] = which[0] == 'p' ? 2 : 3;
}

/* The /proc files the library reads, for FZ_PID alone; any other is
 * missing, as for a process that has exited. */
int
shmt__proc_read(const char *path, char *buf, size_t cap)
{
	char stat_path[64], status_path[64];
	const char *text = NULL;
	char tmp[256];

	snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", FZ_PID);
	snprintf(status_path, sizeof(status_path), "/proc/%d/status", FZ_PID);
	if (strcmp(path, stat_path) == 0) {
		/* Fields 3 to 21, then the start time (22) and two more. */
		snprintf(tmp, sizeof(tmp), "%d (fuzz) R 1 %d %d 0 -1 4194560 "
		    "0 0 0 0 0 0 0 0 20 0 1 0 %llu 0 0\n", FZ_PID, FZ_PID,
		    FZ_PID, (unsigned long long)FZ_START);
		text = tmp;
	} else if (strcmp(path, status_path) == 0) {
		snprintf(tmp, sizeof(tmp), "Name:\tfuzz\nUmask:\t0022\n"
		    "State:\tR (running)\nTgid:\t%d\nPid:\t%d\n", FZ_PID,
		    FZ_PID);
		text = tmp;
	} else if (strcmp(path, "/proc/sys/kernel/random/boot_id") == 0) {
		text = FZ_BOOT_ID;
	}
	if (text == NULL || cap == 0) {
		errno = ENOENT;
		return -1;
	}
	snprintf(buf, cap, "%s", text);
	return 0;
}

const char *
fz_id(void)
{
	static char id[48];
	const char *env;

	if (id[0] != '\0')
		return id;
	env = getenv("SHMT_FUZZ_ID");
	if (env == NULL || env[0] == '\0') {
		snprintf(id, sizeof(id), "%d", (int)getpid());
		return id;
	}
	if (strlen(env) >= sizeof(id) ||
	    strspn(env, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789_-") != strlen(env)) {
		fprintf(stderr, "fuzz harness: SHMT_FUZZ_ID '%s' is not a "
		    "short name of letters, digits, '_' and '-'\n", env);
		abort();
	}
	snprintf(id, sizeof(id), "%s", env);
	return id;
}

void
fz_segname(char *buf, size_t cap, const char *tag)
{
	snprintf(buf, cap, "/shmt-fuzz-%s-%s", fz_id(), tag);
}

void
fz_tmpname(char *buf, size_t cap, const char *tag)
{
	snprintf(buf, cap, "/tmp/shmt-fuzz-%s-%s", fz_id(), tag);
}

void
fz_base_config(shmt_config_t *cfg)
{
	shmt_config_init(cfg);
	cfg->max_limiters = 8;
	cfg->max_slots = 8;
	cfg->arena_bytes = 64ULL << 10;
	cfg->dict_bytes = 2ULL << 20;
	cfg->dict_shards = 1;
	cfg->counters_bytes = 64ULL << 10;
	cfg->counters_shards = 1;
	cfg->counters_subwindows = 4;
	cfg->counters_window_ns = 4000000000ULL;
	cfg->analyzer_bytes = 64ULL << 10;
	cfg->analyzer_window_ns = 4000000000ULL;
	cfg->analyzer_subwindows = 4;
	cfg->analyzer_clients = 1;
}

static void
define(shmt_t *h, const char *name, const shmt_limit_t *l)
{
	int rc = shmt_limiter_define(h, name, l);

	if (rc != 0)
		fz_die(name, rc);
}

void
fz_populate(shmt_t *h)
{
	static const char *const keys[] = { "k-one", "k-two", "k-three" };
	shmt_limit_t l;
	char buf[64];

	shmt_set_clock(h, fz_clock, NULL);
	memset(&l, 0, sizeof(l));
	l.limit = 10, l.window_ns = 1000000000ULL, l.slack_ns = 100000000ULL;
	l.slack_uses = 2;
	define(h, "api", &l);
	memset(&l, 0, sizeof(l));
	l.limit = 5, l.window_ns = 1000000000ULL, l.mode = SHMT_MODE_EXACT;
	l.slack_uses = 1;
	define(h, "exact", &l);
	memset(&l, 0, sizeof(l));
	l.window_ns = 1000000000ULL, l.slack_ns = 200000000ULL;
	l.slack_uses = 1, l.keys = keys, l.nkeys = 3, l.uses_per_key = 2;
	define(h, "pool", &l);
	memset(&l, 0, sizeof(l));
	l.limit = 4, l.window_ns = 1000000000ULL, l.slack_ns = 100000000ULL;
	l.slack_uses = 1, l.per_client = 1, l.client_capacity = 8;
	define(h, "per-client", &l);
	for (int i = 0; i < 12; i++) {
		fz_now = FZ_T0 + (uint64_t)i * 30000000ULL;
		shmt_try_use_key(h, "api");
		shmt_try_use_key(h, "exact");
		shmt_next_key(h, "pool", buf, sizeof(buf));
		snprintf(buf, sizeof(buf), "client-%d", i % 3);
		shmt_try_use(h, "per-client", buf, strlen(buf));
		snprintf(buf, sizeof(buf), "key-%d", i % 5);
		shmt_set(h, buf, strlen(buf), "value", 5, i % 2 ? 0 : 500);
		shmt_get(h, "key-0", 5, buf, sizeof(buf), &(size_t){ 0 });
		shmt_hit(h, buf, strlen(buf), NULL);
	}
	shmt_incr(h, "counter", 7, 41, NULL);
	fz_now = FZ_T0 + 400000000ULL;
}

void
fz_base_image(struct fz_image *img)
{
	shmt_config_t cfg;
	char name[128], path[160];
	shmt_t *h;
	struct stat st;
	int rc, fd;

	fz_segname(name, sizeof(name), "base");
	shmt_unlink(name);
	fz_base_config(&cfg);
	if ((rc = shmt_create(name, &cfg, &h)) != 0)
		fz_die("create the base segment", rc);
	fz_populate(h);
	if ((rc = shmt_segment_stat(h, &img->stat)) != 0)
		fz_die("stat the base segment", rc);
	shmt_close(h);
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) != 0)
		abort();
	img->size = (size_t)st.st_size;
	img->bytes = malloc(img->size);
	if (img->bytes == NULL ||
	    pread(fd, img->bytes, img->size, 0) != (ssize_t)img->size)
		abort();
	close(fd);
	shmt_unlink(name);
}

void
fz_apply_patches(const struct fz_image *base, unsigned char *out,
    const uint8_t *data, size_t size)
{
	uint32_t nreg = base->stat.nregions;

	memcpy(out, base->bytes, base->size);
	if (nreg == 0 || nreg > SHMT_REGIONS_MAX)
		nreg = 1;
	while (size >= 6) {
		const shmt_region_stat_t *r = &base->stat.regions[data[0] % nreg];
		uint64_t off = (uint64_t)data[1] | (uint64_t)data[2] << 8 |
		    (uint64_t)data[3] << 16 | (uint64_t)data[4] << 24;
		size_t len = data[5] % 65;

		data += 6, size -= 6;
		if (len > size)
			len = size;
		if (r->size == 0 || r->offset >= base->size)
			continue;
		off = r->offset + off % r->size;
		if (off >= base->size)
			continue;
		if (off + len > base->size)
			len = base->size - off;
		memcpy(out + off, data, len);
		data += len, size -= len;
	}
}

void
fz_write_object(const char *name, const void *bytes, size_t size)
{
	int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0 || ftruncate(fd, (off_t)size) != 0 ||
	    pwrite(fd, bytes, size, 0) != (ssize_t)size)
		abort();
	close(fd);
}

static void
exercise_limiters(shmt_t *h)
{
	shmt_limiter_stat_t ls[16];
	shmt_bucket_info_t bi[64];
	char key[SHMT_KEYNAME_MAX + 1];
	int n = shmt_limiter_list(h, ls, 16);

	if (n > 16)
		n = 16;
	for (int i = 0; i < n; i++) {
		const char *name = ls[i].name;

		/* The row's name came from the segment: it must be a
		 * terminated string whatever the bytes were. */
		if (memchr(ls[i].name, '\0', sizeof(ls[i].name)) == NULL)
			abort();
		for (int k = 0; k < 3; k++) {
			shmt_decision_t d;
			shmt_request_t rq[2] = { { name, NULL, 0, 1 },
				{ name, "client-1", 8, 2 } };

			shmt_try_use_key(h, name);
			shmt_next_key(h, name, key, sizeof(key));
			shmt_acquire(h, name, NULL, 0, 1 + (uint64_t)k, &d);
			shmt_peek(h, name, NULL, 0, 1, &d);
			shmt_peek(h, name, "client-2", 8, 1, &d);
			shmt_acquire(h, name, "client-2", 8, 1, &d);
			shmt_wait(h, name, NULL, 0, 1, 0, &d);
			shmt_next_key_decide(h, name, key, sizeof(key), &d);
			shmt_acquire_all(h, rq, 1 + (size_t)(k & 1), NULL, NULL);
			shmt_try_use(h, name, "client-1", 8);
			shmt_try_use(h, name, &k, sizeof(k));
			fz_now += 50000000ULL;
		}
		shmt_limiter_stat(h, name, &ls[i]);
		shmt_limiter_buckets(h, name, bi, 64);
	}
	shmt_try_use_key(h, "api");
	shmt_next_key(h, "pool", key, sizeof(key));
}

static void
exercise_dict(shmt_t *h)
{
	static unsigned char kbuf[SHMT_KEY_MAX];
	static char vbuf[256];
	uint64_t cursor = 0, count;
	size_t klen, vlen;
	long steps = 0;
	int rc;

	for (int i = 0; i < 6; i++) {
		char k[16];

		snprintf(k, sizeof(k), "key-%d", i);
		shmt_get(h, k, strlen(k), vbuf, sizeof(vbuf), &vlen);
		shmt_hit(h, k, strlen(k), &count);
	}
	/* A walk must end: a damaged chain may not loop it forever. */
	while ((rc = shmt_dict_next(h, &cursor, kbuf, sizeof(kbuf), &klen)) == 1) {
		if (klen > SHMT_KEY_MAX || ++steps > (1L << 20)) {
			fprintf(stderr, "fuzz: the dictionary walk does not end\n");
			abort();
		}
		shmt_get(h, kbuf, klen, vbuf, sizeof(vbuf), &vlen);
	}
	shmt_set(h, "key-9", 5, "new value", 9, 0);
	shmt_add(h, "key-8", 5, "added", 5, 100);
	shmt_replace(h, "key-1", 5, "replaced", 8, 0);
	shmt_incr(h, "counter", 7, 1, NULL);
	shmt_del(h, "key-2", 5);
	shmt_get(h, "key-9", 5, vbuf, sizeof(vbuf), &vlen);
}

void
fz_exercise(shmt_t *h)
{
	static shmt_hotkey_t hot[8];
	shmt_segment_stat_t st;
	shmt_dict_stat_t ds;
	shmt_top_info_t ti;
	shmt_time_t next;

	shmt_set_clock(h, fz_clock, NULL);
	fz_now = FZ_T0 + 400000000ULL;
	shmt_check(h, NULL, NULL);
	shmt_segment_stat(h, &st);
	shmt_dict_stat(h, &ds);
	exercise_limiters(h);
	exercise_dict(h);
	shmt_top_keys(h, hot, 8, &ti);
	fz_now += 2000000000ULL;
	shmt_housekeep(h, &next);
	shmt_try_use_key(h, "exact");
	shmt_top_keys(h, hot, 8, &ti);
	shmt_check(h, NULL, NULL);
}
