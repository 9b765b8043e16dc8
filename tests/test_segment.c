/* SPDX-License-Identifier: MIT */
/*
 * The segment's life cycle and its refusals: create, open from a forked
 * child that maps it elsewhere, slots claimed, released and reaped after
 * kill -9, modes, and every kind of damaged or foreign object, each with its
 * own error.  Every library call runs with errno set to a sentinel that must
 * survive it, and every test ends with the descriptor count it began with.
 */
#include "testutil.h"

#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

/* No library call may touch errno: each one runs with this value set. */
#define SENTINEL 4242

#define E(expr) __extension__({                                        \
	errno = SENTINEL;                                              \
	__typeof__(expr) e_rc_ = (expr);                               \
	assert_int_equal(errno, SENTINEL);                             \
	e_rc_;                                                         \
})

#define EV(expr) do {                                                  \
	errno = SENTINEL;                                              \
	expr;                                                          \
	assert_int_equal(errno, SENTINEL);                             \
} while (0)

/* A forked child cannot use cmocka's asserts (they would unwind into the
 * parent's test runner), so it reports the failing line and exits. */
#define CHECK(cond) do {                                               \
	if (!(cond)) {                                                 \
		fprintf(stderr, "child %s:%d: %s\n", __FILE__,         \
		    __LINE__, #cond);                                  \
		_exit(1);                                              \
	}                                                              \
} while (0)

/* A handle pointer no successful call would ever store: calls that fail
 * must leave *out as it was. */
#define UNTOUCHED ((shmt_t *)(uintptr_t)0x5eed)

/* Ten seconds is orders of magnitude more than any child here needs; the
 * alarm only keeps a broken test from leaving processes behind. */
#define CHILD_ALARM 10

/* The unprivileged user and group of the other-user test. */
#define NOBODY 65534

static void
small_config(shmt_config_t *cfg)
{
	shmt_config_init(cfg);
	cfg->max_limiters = 4;
	cfg->max_slots = 8;
	cfg->arena_bytes = 64ULL << 10;
}

static void
shm_path(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "/dev/shm%s", name);
}

static int
object_exists(const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	shm_path(path, sizeof(path), name);
	return lstat(path, &st) == 0;
}

/* Objects in /dev/shm whose name starts with NAME and holds ".tmp.". */
static int
count_tmp(const char *name)
{
	char prefix[PATH_MAX];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int n = 0;

	assert_non_null(d);
	snprintf(prefix, sizeof(prefix), "%s.tmp.", name + 1);
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

/* Map the object NAME read-write, bypassing the library. */
static char *
map_object(const char *name, uint64_t *size)
{
	struct stat st;
	void *p;
	int fd = shm_open(name, O_RDWR, 0);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*size = (uint64_t)st.st_size;
	p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(p != MAP_FAILED);
	return p;
}

static void
resize_object(const char *name, off_t size)
{
	int fd = shm_open(name, O_RDWR, 0);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	close(fd);
}

/* A foreign object of SIZE bytes; BYTES (may be NULL: zeros) fills it. */
static void
make_object(const char *name, const void *bytes, size_t size)
{
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	if (bytes != NULL)
		assert_int_equal(pwrite(fd, bytes, size, 0), (ssize_t)size);
	close(fd);
}

static void
random_bytes(uint64_t *seed, void *buf, size_t n)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)tu_rand(seed);
}

static void
wait_ok(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static pid_t
fork_clean(void)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		alarm(CHILD_ALARM);
	return pid;
}

static shmt_segment_stat_t
stat_of(shmt_t *h)
{
	shmt_segment_stat_t st;

	assert_int_equal(E(shmt_segment_stat(h, &st)), 0);
	return st;
}

static void
expect_open(const char *name, int want)
{
	shmt_t *h = UNTOUCHED;

	assert_int_equal(E(shmt_open(name, &h)), want);
	if (want != 0) {
		assert_ptr_equal(h, UNTOUCHED);
		return;
	}
	EV(shmt_close(h));
}

static void
test_lifecycle(void **state)
{
	char name[128];
	shmt_t *h = UNTOUCHED, *h2 = UNTOUCHED;
	shmt_segment_stat_t a, b;
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "life");
	assert_int_equal(E(shmt_create(name, NULL, &h)), 0);
	assert_ptr_not_equal(h, UNTOUCHED);
	assert_string_equal(E(shmt_name(h)), name);
	assert_int_equal(E(shmt_open(name, &h2)), 0);
	a = stat_of(h);
	b = stat_of(h2);
	assert_int_equal(a.size, b.size);
	assert_int_equal(a.format, b.format);
	assert_int_equal(a.abi_version, a.format >> 48);
	assert_int_equal(a.created_wall_ns, b.created_wall_ns);
	assert_int_equal(b.slots, 2);
	EV(shmt_close(h2));
	assert_int_equal(stat_of(h).slots, 1);
	EV(shmt_close(h));
	EV(shmt_close(NULL));
	assert_true(object_exists(name));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_false(object_exists(name));
	expect_open(name, -ENOENT);
	assert_int_equal(E(shmt_unlink(name)), -ENOENT);
	assert_int_equal(count_tmp(name), 0);
	assert_int_equal(tu_fd_count(), fds);
}

/* What the child checks and writes back, all through its own mapping. */
struct shared_check {
	uint64_t size, format, heartbeat;
	uint32_t max_limiters, max_slots;
	unsigned char pattern[64];
};

static void
child_reads(const char *name, const struct shmt *parent,
    const struct shared_check *want)
{
	shmt_segment_stat_t st;
	shmt_t *h = NULL;
	unsigned char *arena;

	CHECK(shmt_open(name, &h) == 0);
	/* The parent's mapping is still there at its address, so this one
	 * lies elsewhere: only offsets can have brought the data here. */
	CHECK(h->base != parent->base);
	CHECK(shmt_segment_stat(h, &st) == 0);
	CHECK(st.size == want->size && st.format == want->format);
	CHECK(st.max_limiters == want->max_limiters);
	CHECK(st.max_slots == want->max_slots);
	CHECK(st.daemon_heartbeat_ns == want->heartbeat);
	CHECK(st.slots == 2 && st.slots_stale == 0);
	arena = shmt__region(h, SHMT_R_ARENA);
	CHECK(memcmp(arena + h->reg[SHMT_R_ARENA].rg_size - sizeof(want->pattern),
	    want->pattern, sizeof(want->pattern)) == 0);
	/* Write back: the pattern reversed at the arena's start, and one
	 * housekeeping run in the header's counters. */
	for (size_t i = 0; i < sizeof(want->pattern); i++)
		arena[i] = want->pattern[sizeof(want->pattern) - 1 - i];
	CHECK(shmt_housekeep(h, NULL) == 0);
	shmt_close(h);
	_exit(0);
}

static void
test_child_sees_parent(void **state)
{
	uint64_t seed = tu_seed("child_sees_parent");
	struct shared_check want;
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL;
	shmt_segment_stat_t st;
	unsigned char *arena;
	uint64_t asize;
	pid_t pid;
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "child");
	small_config(&cfg);
	cfg.max_limiters = 3 + (uint32_t)(tu_rand(&seed) % 13);
	cfg.max_slots = 5 + (uint32_t)(tu_rand(&seed) % 11);
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);

	st = stat_of(h);
	want.size = st.size;
	want.format = st.format;
	want.max_limiters = cfg.max_limiters;
	want.max_slots = cfg.max_slots;
	want.heartbeat = tu_rand(&seed) | 1;
	assert_int_equal(st.max_limiters, cfg.max_limiters);
	assert_int_equal(st.max_slots, cfg.max_slots);
	random_bytes(&seed, want.pattern, sizeof(want.pattern));
	__atomic_store_n(&h->hdr->sh_heartbeat_ns, want.heartbeat,
	    __ATOMIC_RELEASE);
	arena = shmt__region(h, SHMT_R_ARENA);
	asize = h->reg[SHMT_R_ARENA].rg_size;
	memcpy(arena + asize - sizeof(want.pattern), want.pattern,
	    sizeof(want.pattern));

	pid = fork_clean();
	if (pid == 0)
		child_reads(name, h, &want);
	wait_ok(pid);

	st = stat_of(h);
	assert_int_equal(st.housekeeping_runs, 1);
	assert_int_equal(st.slots, 1);
	for (size_t i = 0; i < sizeof(want.pattern); i++)
		assert_int_equal(arena[i], want.pattern[sizeof(want.pattern) - 1 - i]);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

static mode_t
object_mode(const char *name, gid_t *gid)
{
	char path[PATH_MAX];
	struct stat st;

	shm_path(path, sizeof(path), name);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	if (gid != NULL)
		*gid = st.st_gid;
	return st.st_mode & 07777;
}

static void
test_default_config(void **state)
{
	shmt_config_t def;
	char name[128];
	shmt_t *h = NULL;
	shmt_segment_stat_t st;
	mode_t old = umask(0);
	int fds = tu_fd_count();

	/* The defaults the header documents. */
	shmt_config_init(&def);
	assert_int_equal(def.mode, 0600);
	assert_int_equal(def.gid, (gid_t)-1);
	assert_int_equal(def.max_limiters, 64);
	assert_int_equal(def.max_slots, 256);
	assert_int_equal(def.arena_bytes, 8ULL << 20);
	assert_int_equal(def.dict_bytes, 8ULL << 20);
	assert_int_equal(def.dict_shards, 4);
	assert_int_equal(def.counters_bytes, 4ULL << 20);
	EV(shmt_config_init(NULL));

	tu_segname(name, sizeof(name), "defaults");
	assert_int_equal(E(shmt_create(name, NULL, &h)), 0);
	st = stat_of(h);
	/* Half of a container's default 64 MiB /dev/shm at most. */
	assert_true(st.size <= 32ULL << 20);
	assert_int_equal(st.max_limiters, def.max_limiters);
	assert_int_equal(st.max_slots, def.max_slots);
	assert_int_equal(st.limiters, 0);
	assert_int_equal(st.mode, 0600);
	assert_int_equal(object_mode(name, NULL), 0600);
	assert_int_equal(st.nregions, SHMT_R_COUNT);
	assert_string_equal(st.regions[SHMT_R_ARENA].name, "arena");
	assert_int_equal(st.regions[SHMT_R_ARENA].size, def.arena_bytes);
	/* Regions lie in order, inside the object, without overlap. */
	for (uint32_t i = 1; i < st.nregions; i++)
		assert_true(st.regions[i].offset >=
		    st.regions[i - 1].offset + st.regions[i - 1].size);
	assert_true(st.regions[st.nregions - 1].offset +
	    st.regions[st.nregions - 1].size <= st.size);
	assert_int_equal(st.daemon_pid, 0);
	assert_int_equal(st.daemon_alive, 0);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
	umask(old);
	assert_int_equal(tu_fd_count(), fds);
}

static void
create_with_mode(mode_t mode, mode_t umask_value, gid_t gid)
{
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL;
	gid_t got;
	mode_t old = umask(umask_value);

	tu_segname(name, sizeof(name), "mode");
	small_config(&cfg);
	cfg.mode = mode;
	cfg.gid = gid;
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
	umask(old);
	assert_int_equal(object_mode(name, &got), mode);
	assert_int_equal(stat_of(h).mode, mode);
	if (gid != (gid_t)-1)
		assert_int_equal(got, gid);
	else
		assert_int_equal(got, getegid());
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
}

static void
test_config_mode(void **state)
{
	/* Root may give the object any group; others only their own. */
	gid_t other = geteuid() == 0 ? 4321 : getegid();
	int fds = tu_fd_count();

	create_with_mode(0600, 022, (gid_t)-1);
	/* The umask must not narrow what the config asks for. */
	create_with_mode(0660, 077, (gid_t)-1);
	create_with_mode(0644, 0, other);
	create_with_mode(0400, 022, (gid_t)-1);
	assert_int_equal(tu_fd_count(), fds);
}

/* Open NAME as another user (uid and gid NOBODY) in a child; return what
 * shmt_open said, or INT_MIN when the child could not become that user. */
static int
open_as_nobody(const char *name)
{
	int p[2], rc = INT_MIN;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork_clean();
	if (pid == 0) {
		shmt_t *h = NULL;

		close(p[0]);
		/* Root without CAP_SETUID (some containers) cannot switch. */
		if (setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 &&
		    setuid(NOBODY) == 0)
			rc = shmt_open(name, &h);
		CHECK(write(p[1], &rc, sizeof(rc)) == sizeof(rc));
		shmt_close(h);
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &rc, sizeof(rc)), sizeof(rc));
	close(p[0]);
	wait_ok(pid);
	return rc;
}

/* The mode and group are what decide who else may attach; a mode that
 * lets every user write is never trusted (it was attached before: the
 * object is now made 0666 behind the library's back, since create refuses
 * that mode). */
static void
test_other_user(void **state)
{
	const struct { mode_t mode; gid_t gid; int want; } cases[] = {
		{ 0600, (gid_t)-1, -EACCES },
		{ 0644, (gid_t)-1, -EACCES },  /* attaching needs write */
		{ 0660, (gid_t)-1, -EACCES },
		{ 0660, NOBODY, 0 },
		{ 0666, (gid_t)-1, SHMT_EUNTRUSTED },
	};
	int fds = tu_fd_count();

	if (geteuid() != 0)
		skip();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		shmt_config_t cfg;
		char name[128];
		shmt_t *h = NULL;
		int rc;

		tu_segname(name, sizeof(name), "user");
		small_config(&cfg);
		cfg.mode = cases[i].mode;
		cfg.gid = cases[i].gid;
		if (cases[i].mode & S_IWOTH) {
			char path[192];

			assert_int_equal(E(shmt_create(name, &cfg, &h)), -EINVAL);
			cfg.mode = 0600;
			assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
			snprintf(path, sizeof(path), "/dev/shm%s", name);
			assert_int_equal(chmod(path, cases[i].mode), 0);
		} else {
			assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
		}
		rc = open_as_nobody(name);
		if (rc == INT_MIN) {
			EV(shmt_close(h));
			assert_int_equal(E(shmt_unlink(name)), 0);
			skip();
		}
		assert_int_equal(rc, cases[i].want);
		assert_int_equal(stat_of(h).slots, 1);
		EV(shmt_close(h));
		assert_int_equal(E(shmt_unlink(name)), 0);
	}
	assert_int_equal(tu_fd_count(), fds);
}

/* Fork a child that attaches to NAME, says so on a pipe, and waits to be
 * killed.  Returns its pid once it holds its slot. */
static pid_t
spawn_holder(const char *name)
{
	int p[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork_clean();
	if (pid == 0) {
		shmt_t *h = NULL;

		close(p[0]);
		CHECK(shmt_open(name, &h) == 0);
		CHECK(write(p[1], "r", 1) == 1);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void
kill_and_wait(pid_t pid)
{
	int st;

	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);
}

static void
test_slots_reaped(void **state)
{
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL;
	shmt_segment_stat_t st;
	pid_t pid;
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "slots");
	small_config(&cfg);
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
	assert_int_equal(stat_of(h).slots, 1);

	pid = spawn_holder(name);
	st = stat_of(h);
	assert_int_equal(st.slots, 2);
	assert_int_equal(st.slots_stale, 0);
	kill_and_wait(pid);
	st = stat_of(h);
	assert_int_equal(st.slots, 2);
	assert_int_equal(st.slots_stale, 1);
	assert_int_equal(st.slots_reaped, 0);

	/* No limiter is defined, so reaping the one slot is all there is. */
	assert_int_equal(E(shmt_housekeep(h, NULL)), 1);
	st = stat_of(h);
	assert_int_equal(st.slots, 1);
	assert_int_equal(st.slots_stale, 0);
	assert_int_equal(st.slots_reaped, 1);
	assert_int_equal(st.housekeeping_runs, 1);
	/* A second run finds nothing more to do. */
	assert_int_equal(E(shmt_housekeep(h, NULL)), 0);
	assert_int_equal(stat_of(h).slots, 1);

	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

static void
test_slots_full(void **state)
{
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL, *h2 = NULL, *h3 = UNTOUCHED;
	pid_t pid;
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "full");
	small_config(&cfg);
	cfg.max_slots = 2;
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
	pid = spawn_holder(name);
	kill_and_wait(pid);

	/* The table is full of one live and one dead slot: opening reaps
	 * the dead one and takes it. */
	assert_int_equal(E(shmt_open(name, &h2)), 0);
	assert_int_equal(stat_of(h).slots_reaped, 1);
	assert_int_equal(stat_of(h).slots, 2);
	assert_int_equal(E(shmt_open(name, &h3)), SHMT_ENOSLOT);
	assert_ptr_equal(h3, UNTOUCHED);
	EV(shmt_close(h2));
	assert_int_equal(E(shmt_open(name, &h3)), 0);
	EV(shmt_close(h3));
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

/* A child that closes the handle it inherited must not free the parent's
 * slot: the slot belongs to the process that claimed it. */
static void
test_inherited_close(void **state)
{
	char name[128];
	shmt_t *h = NULL;
	pid_t pid;
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "inherit");
	assert_int_equal(E(shmt_create(name, NULL, &h)), 0);
	pid = fork_clean();
	if (pid == 0) {
		shmt_close(h);
		_exit(0);
	}
	wait_ok(pid);
	assert_int_equal(stat_of(h).slots, 1);
	assert_int_equal(stat_of(h).slots_stale, 0);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

static void
test_clock(void **state)
{
	struct tu_clock clk = { .now = UINT64_MAX - 5 };
	char name[128];
	shmt_t *h = NULL;
	shmt_time_t t0, t1;

	tu_segname(name, sizeof(name), "clock");
	assert_int_equal(E(shmt_create(name, NULL, &h)), 0);
	assert_int_equal(E(shmt_set_clock(NULL, tu_clock_read, &clk)), -EINVAL);
	assert_int_equal(E(shmt_set_clock(h, tu_clock_read, &clk)), 0);
	assert_int_equal(E(shmt_now(h)), UINT64_MAX - 5);
	clk.now = 7;
	assert_int_equal(E(shmt_now(h)), 7);
	assert_int_equal(E(shmt_set_clock(h, NULL, NULL)), 0);
	t0 = E(shmt_now(h));
	t1 = E(shmt_now(h));
	assert_true(t0 != 7 && t1 >= t0);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
}

static void
test_strerror(void **state)
{
	const char *seen[SHMT_ERRBASE - SHMT_ERRLAST];
	const char *unknown = E(shmt_strerror(SHMT_ERRLAST - 1));
	const int errnos[] = { -EINVAL, -ENOENT, -EEXIST, -ENAMETOOLONG,
		-ENOSPC, -ENOMEM, -EACCES, -EPERM, -ELOOP, -EIO };

	assert_non_null(unknown);
	for (int e = SHMT_ERRBASE - 1; e >= SHMT_ERRLAST; e--) {
		const char *s = E(shmt_strerror(e));

		assert_non_null(s);
		assert_string_not_equal(s, unknown);
		/* Each code gets its own text. */
		for (int j = 0; j < SHMT_ERRBASE - 1 - e; j++)
			assert_string_not_equal(s, seen[j]);
		seen[SHMT_ERRBASE - 1 - e] = s;
	}
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++) {
		const char *s = E(shmt_strerror(errnos[i]));

		assert_non_null(s);
		assert_string_not_equal(s, unknown);
		assert_true(strlen(s) > 3);
	}
	for (int e = -5000; e <= 5000; e++)
		assert_non_null(E(shmt_strerror(e)));
	assert_non_null(E(shmt_strerror(INT_MIN)));
	assert_non_null(E(shmt_strerror(INT_MAX)));
}

/* ---- Refusals ------------------------------------------------------------ */

static void
test_invalid_names(void **state)
{
	char longname[SHMT_SEGNAME_MAX + 2];
	char huge[5000];
	const struct { const char *name; int err; } cases[] = {
		{ NULL, -EINVAL }, { "", -EINVAL }, { "noslash", -EINVAL },
		{ "/", -EINVAL }, { "/a/b", -EINVAL }, { "//", -EINVAL },
		{ "/.", -EINVAL }, { "/..", -EINVAL }, { "/a/", -EINVAL },
		{ longname, -ENAMETOOLONG }, { huge, -ENAMETOOLONG },
	};
	int fds = tu_fd_count();

	longname[0] = huge[0] = '/';
	memset(longname + 1, 'n', sizeof(longname) - 2);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(strlen(longname), SHMT_SEGNAME_MAX + 1);
	memset(huge + 1, 'h', sizeof(huge) - 2);
	huge[sizeof(huge) - 1] = '\0';

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		shmt_t *h = UNTOUCHED;

		assert_int_equal(E(shmt_create(cases[i].name, NULL, &h)),
		    cases[i].err);
		assert_ptr_equal(h, UNTOUCHED);
		expect_open(cases[i].name, cases[i].err);
		assert_int_equal(E(shmt_unlink(cases[i].name)), cases[i].err);
	}
	assert_int_equal(tu_fd_count(), fds);
}

/* A name of exactly SHMT_SEGNAME_MAX bytes is valid end to end. */
static void
test_name_max(void **state)
{
	char name[SHMT_SEGNAME_MAX + 1];
	shmt_t *h = UNTOUCHED;
	size_t len;

	tu_segname(name, sizeof(name), "max");
	len = strlen(name);
	memset(name + len, 'x', SHMT_SEGNAME_MAX - len);
	name[SHMT_SEGNAME_MAX] = '\0';
	assert_int_equal(E(shmt_create(name, NULL, &h)), 0);
	expect_open(name, 0);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(count_tmp(name), 0);
}

static void
test_null_arguments(void **state)
{
	shmt_segment_stat_t st;
	char name[128];
	shmt_t *h = NULL;

	tu_segname(name, sizeof(name), "nullout");
	assert_int_equal(E(shmt_create(name, NULL, NULL)), -EINVAL);
	assert_false(object_exists(name));
	assert_int_equal(E(shmt_create(name, NULL, &h)), 0);
	assert_int_equal(E(shmt_open(name, NULL)), -EINVAL);
	assert_int_equal(E(shmt_segment_stat(NULL, &st)), -EINVAL);
	assert_int_equal(E(shmt_segment_stat(h, NULL)), -EINVAL);
	assert_int_equal(E(shmt_housekeep(NULL, NULL)), -EINVAL);
	assert_null(E(shmt_name(NULL)));
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
}

static void
test_exists(void **state)
{
	uint64_t seed = tu_seed("exists");
	shmt_config_t cfg;
	char name[128], junk[256];
	shmt_t *h = NULL, *h2 = UNTOUCHED;
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "exists");
	small_config(&cfg);
	cfg.max_slots = 3;
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
	cfg.max_slots = 9;
	assert_int_equal(E(shmt_create(name, &cfg, &h2)), -EEXIST);
	assert_int_equal(E(shmt_create(name, NULL, &h2)), -EEXIST);
	assert_ptr_equal(h2, UNTOUCHED);
	/* The segment that was there is untouched. */
	assert_int_equal(stat_of(h).max_slots, 3);
	assert_int_equal(stat_of(h).slots, 1);
	assert_int_equal(count_tmp(name), 0);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);

	/* A foreign object under the name is not replaced either. */
	random_bytes(&seed, junk, sizeof(junk));
	make_object(name, junk, sizeof(junk));
	assert_int_equal(E(shmt_create(name, NULL, &h2)), -EEXIST);
	assert_ptr_equal(h2, UNTOUCHED);
	assert_int_equal(count_tmp(name), 0);
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

static void
test_missing(void **state)
{
	char name[128];

	tu_segname(name, sizeof(name), "missing");
	expect_open(name, -ENOENT);
	assert_int_equal(E(shmt_unlink(name)), -ENOENT);
	assert_false(object_exists(name));
}

static void
test_invalid_configs(void **state)
{
	enum { MODE, LIMITERS, SLOTS, ARENA };
	const struct { int field; uint64_t value; } bad[] = {
		{ MODE, 01600 }, { MODE, 02600 }, { MODE, 04600 },
		{ MODE, S_IFREG | 0600 }, { MODE, 07777 },
		{ LIMITERS, 0 }, { LIMITERS, 4097 }, { LIMITERS, UINT32_MAX },
		{ SLOTS, 0 }, { SLOTS, 65537 },
		{ ARENA, 0 }, { ARENA, 1 }, { ARENA, (64ULL << 10) - 1 },
		{ ARENA, (1ULL << 40) + 1 }, { ARENA, UINT64_MAX },
	};
	int fds = tu_fd_count();

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		shmt_config_t cfg;
		char name[128];
		shmt_t *h = UNTOUCHED;

		small_config(&cfg);
		switch (bad[i].field) {
		case MODE: cfg.mode = (mode_t)bad[i].value; break;
		case LIMITERS: cfg.max_limiters = (uint32_t)bad[i].value; break;
		case SLOTS: cfg.max_slots = (uint32_t)bad[i].value; break;
		default: cfg.arena_bytes = bad[i].value; break;
		}
		tu_segname(name, sizeof(name), "badcfg");
		assert_int_equal(E(shmt_create(name, &cfg, &h)), -EINVAL);
		assert_ptr_equal(h, UNTOUCHED);
		assert_false(object_exists(name));
		assert_int_equal(count_tmp(name), 0);
	}
	assert_int_equal(tu_fd_count(), fds);
}

/* The limits themselves are accepted. */
static void
test_config_bounds(void **state)
{
	shmt_config_t cfg;
	char name[128];
	shmt_t *h = NULL;
	shmt_segment_stat_t st;

	small_config(&cfg);
	cfg.max_limiters = 4096;
	cfg.max_slots = 65536;
	cfg.arena_bytes = 64ULL << 10;
	tu_segname(name, sizeof(name), "bounds");
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
	st = stat_of(h);
	assert_int_equal(st.max_limiters, 4096);
	assert_int_equal(st.max_slots, 65536);
	assert_int_equal(st.regions[SHMT_R_ARENA].size, 64ULL << 10);
	EV(shmt_close(h));
	assert_int_equal(E(shmt_unlink(name)), 0);
}

/* A segment larger than /dev/shm can hold is refused at creation, and the
 * failed attempt leaves nothing behind. */
static void
test_no_space(void **state)
{
	shmt_config_t cfg;
	struct statvfs vfs;
	char name[128];
	shmt_t *h = UNTOUCHED;
	int fds = tu_fd_count();

	small_config(&cfg);
	cfg.arena_bytes = 1ULL << 40;
	assert_int_equal(statvfs("/dev/shm", &vfs), 0);
	if ((uint64_t)vfs.f_blocks * vfs.f_frsize > cfg.arena_bytes / 2)
		skip();
	tu_segname(name, sizeof(name), "nospace");
	assert_int_equal(E(shmt_create(name, &cfg, &h)), -ENOSPC);
	assert_ptr_equal(h, UNTOUCHED);
	assert_false(object_exists(name));
	assert_int_equal(count_tmp(name), 0);
	assert_int_equal(tu_fd_count(), fds);
}

/* A real small segment, closed, ready to be damaged; returns its size. */
static uint64_t
make_segment(char *name, size_t cap, const char *tag)
{
	shmt_config_t cfg;
	shmt_t *h = NULL;
	uint64_t size;

	tu_segname(name, cap, tag);
	small_config(&cfg);
	assert_int_equal(E(shmt_create(name, &cfg, &h)), 0);
	size = stat_of(h).size;
	EV(shmt_close(h));
	return size;
}

static void
test_bad_magic(void **state)
{
	uint64_t seed = tu_seed("bad_magic");
	char name[128];
	uint64_t size = make_segment(name, sizeof(name), "magic");
	unsigned char *junk = malloc(size);
	uint64_t magic = SHMT_MAGIC;
	int fds = tu_fd_count();

	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_non_null(junk);
	random_bytes(&seed, junk, size);
	if (memcmp(junk, &magic, sizeof(magic)) == 0)
		junk[0] ^= 1;
	make_object(name, junk, size);
	expect_open(name, SHMT_EMAGIC);
	/* All zeros, as a creator that died before writing would leave. */
	assert_int_equal(E(shmt_unlink(name)), 0);
	make_object(name, NULL, size);
	expect_open(name, SHMT_EMAGIC);
	assert_int_equal(E(shmt_unlink(name)), 0);
	free(junk);
	assert_int_equal(tu_fd_count(), fds);
}

static void
test_other_format(void **state)
{
	char name[128];
	uint64_t size, format;
	struct shmt_hdr *hdr;
	int fds = tu_fd_count();

	make_segment(name, sizeof(name), "format");
	hdr = (struct shmt_hdr *)map_object(name, &size);
	format = hdr->sh_format;
	/* Another layout hash, then another ABI version. */
	hdr->sh_format = format ^ 1;
	expect_open(name, SHMT_EFORMAT);
	hdr->sh_format = format + (1ULL << 48);
	expect_open(name, SHMT_EFORMAT);
	hdr->sh_format = format;
	expect_open(name, 0);
	munmap(hdr, size);
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

static void
test_wrong_size(void **state)
{
	char name[128];
	uint64_t size = make_segment(name, sizeof(name), "size");
	const off_t sizes[] = {
		(off_t)size / 2, (off_t)size - 1, SHMT_PAGE,
		(off_t)sizeof(struct shmt_hdr) - 1, 8,
		(off_t)size + 1, (off_t)size + SHMT_PAGE, (off_t)size * 2,
	};
	int fds = tu_fd_count();

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		shmt_t *h = NULL;

		/* Each time from a fresh, valid segment. */
		if (i > 0)
			make_segment(name, sizeof(name), "size");
		expect_open(name, 0);
		resize_object(name, sizes[i]);
		expect_open(name, SHMT_ESIZE);
		assert_int_equal(E(shmt_create(name, NULL, &h)), -EEXIST);
		assert_int_equal(E(shmt_unlink(name)), 0);
	}
	assert_int_equal(tu_fd_count(), fds);
}

static void
test_tiny_objects(void **state)
{
	uint64_t seed = tu_seed("tiny_objects");
	unsigned char bytes[16];
	uint64_t magic = SHMT_MAGIC;
	char name[128];
	int fds = tu_fd_count();

	tu_segname(name, sizeof(name), "tiny");
	/* Zero length: nothing to read at all. */
	make_object(name, NULL, 0);
	expect_open(name, SHMT_ESIZE);
	assert_int_equal(E(shmt_unlink(name)), 0);
	/* Too short for a magic number. */
	random_bytes(&seed, bytes, sizeof(bytes));
	make_object(name, bytes, 3);
	expect_open(name, SHMT_ESIZE);
	assert_int_equal(E(shmt_unlink(name)), 0);
	/* Long enough for a magic number, and it is not ours. */
	if (memcmp(bytes, &magic, sizeof(magic)) == 0)
		bytes[0] ^= 1;
	make_object(name, bytes, sizeof(bytes));
	expect_open(name, SHMT_EMAGIC);
	assert_int_equal(E(shmt_unlink(name)), 0);
	/* Ours, cut short right after the magic. */
	memcpy(bytes, &magic, sizeof(magic));
	make_object(name, bytes, sizeof(bytes));
	expect_open(name, SHMT_ESIZE);
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

/* One damage to the region table and what it must give. */
static void
corrupt_case(struct shmt_hdr *hdr, int which, uint64_t size)
{
	struct shmt_region *r = hdr->sh_regions;

	switch (which) {
	case 0: hdr->sh_nregions = SHMT_R_COUNT + 1; break;
	case 1: hdr->sh_nregions = 0; break;
	case 2: r[SHMT_R_ARENA].rg_off = size; break;
	case 3: r[SHMT_R_ARENA].rg_size = UINT64_MAX; break;
	case 4: r[SHMT_R_ARENA].rg_size += 1; break;
	case 5: r[SHMT_R_SLOTS].rg_off = 0; break;
	case 6: r[SHMT_R_LIMITERS].rg_off += 8; break;
	case 7: r[SHMT_R_LIMITERS].rg_off = r[SHMT_R_ARENA].rg_off; break;
	case 8: r[SHMT_R_HEADER].rg_size = 8; break;
	case 9: r[SHMT_R_HEADER].rg_off = SHMT_PAGE; break;
	case 10: hdr->sh_params.sp_max_slots += 1; break;
	case 11: hdr->sh_params.sp_max_limiters = UINT32_MAX; break;
	case 12: hdr->sh_params.sp_arena_bytes -= SHMT_PAGE; break;
	case 13: r[SHMT_R_SLOTS].rg_off = UINT64_MAX - 63; break;
	default: fail();
	}
}

static void
test_corrupt_regions(void **state)
{
	struct shmt_hdr saved, *hdr;
	char name[128];
	uint64_t size;
	int fds = tu_fd_count();

	make_segment(name, sizeof(name), "corrupt");
	hdr = (struct shmt_hdr *)map_object(name, &size);
	memcpy(&saved, hdr, sizeof(saved));
	for (int i = 0; i < 14; i++) {
		corrupt_case(hdr, i, size);
		expect_open(name, SHMT_ECORRUPT);
		memcpy(hdr, &saved, sizeof(saved));
		/* Undone, it opens again: the damage alone was refused. */
		expect_open(name, 0);
	}
	munmap(hdr, size);
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(tu_fd_count(), fds);
}

/* Random damage to the header: an error from the list, or a segment that
 * opens; never a crash. */
static void
test_header_flips(void **state)
{
	uint64_t seed = tu_seed("header_flips");
	const int allowed[] = { 0, SHMT_EMAGIC, SHMT_EFORMAT, SHMT_ESIZE,
		SHMT_ECORRUPT, SHMT_ENOSLOT, SHMT_ENAMESPACE, SHMT_ESTALE };
	enum { NALLOWED = sizeof(allowed) / sizeof(allowed[0]) };
	int rounds = (int)(400 * tu_scale()) + 1, hits[NALLOWED] = { 0 };
	struct shmt_hdr saved;
	unsigned char *hdr;
	char name[128];
	uint64_t size;

	make_segment(name, sizeof(name), "flips");
	hdr = (unsigned char *)map_object(name, &size);
	memcpy(&saved, hdr, sizeof(saved));
	for (int i = 0; i < rounds; i++) {
		int flips = 1 + (int)(tu_rand(&seed) % 4), rc, k;
		shmt_t *h = NULL;

		/* The identity part of the header, before the daemon line,
		 * is what validation reads. */
		for (int f = 0; f < flips; f++)
			hdr[tu_rand(&seed) % offsetof(struct shmt_hdr,
			    sh_daemon_pid)] ^= (unsigned char)(1 +
			    tu_rand(&seed) % 255);
		rc = E(shmt_open(name, &h));
		for (k = 0; k < NALLOWED && allowed[k] != rc; k++)
			;
		if (k == NALLOWED)
			fail_msg("round %d: unexpected %d (%s)", i, rc,
			    shmt_strerror(rc));
		hits[k]++;
		if (rc == 0)
			EV(shmt_close(h));
		memcpy(hdr, &saved, sizeof(saved));
	}
	printf("# header_flips: %d rounds: ok %d magic %d format %d size %d "
	    "corrupt %d noslot %d\n", rounds, hits[0], hits[1], hits[2],
	    hits[3], hits[4], hits[5]);
	munmap(hdr, size);
	assert_int_equal(E(shmt_unlink(name)), 0);
}

static void
test_not_regular(void **state)
{
	char name[128], path[PATH_MAX], target[128], tpath[PATH_MAX];
	shmt_t *h = UNTOUCHED;
	int rc, fds = tu_fd_count();

	tu_segname(name, sizeof(name), "fifo");
	shm_path(path, sizeof(path), name);
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_open(name, SHMT_ENOTREG);
	assert_int_equal(E(shmt_create(name, NULL, &h)), -EEXIST);
	assert_int_equal(E(shmt_unlink(name)), 0);

	/* A symbolic link to a real segment is not followed (the name could
	 * have been planted by another user). */
	make_segment(target, sizeof(target), "target");
	shm_path(tpath, sizeof(tpath), target);
	assert_int_equal(symlink(tpath, path), 0);
	rc = E(shmt_open(name, &h));
	assert_true(rc == -ELOOP || rc == SHMT_ENOTREG);
	assert_ptr_equal(h, UNTOUCHED);
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(E(shmt_unlink(target)), 0);

	/* Nor is a dangling one: creating through it must not make the
	 * file it points to. */
	assert_int_equal(symlink(tpath, path), 0);
	assert_int_equal(E(shmt_create(name, NULL, &h)), -EEXIST);
	assert_ptr_equal(h, UNTOUCHED);
	assert_false(object_exists(target));
	assert_int_equal(E(shmt_unlink(name)), 0);
	assert_int_equal(count_tmp(name), 0);
	assert_int_equal(tu_fd_count(), fds);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_lifecycle, tu_sweep),
		cmocka_unit_test_teardown(test_child_sees_parent, tu_sweep),
		cmocka_unit_test_teardown(test_default_config, tu_sweep),
		cmocka_unit_test_teardown(test_config_mode, tu_sweep),
		cmocka_unit_test_teardown(test_other_user, tu_sweep),
		cmocka_unit_test_teardown(test_slots_reaped, tu_sweep),
		cmocka_unit_test_teardown(test_slots_full, tu_sweep),
		cmocka_unit_test_teardown(test_inherited_close, tu_sweep),
		cmocka_unit_test_teardown(test_clock, tu_sweep),
		cmocka_unit_test_teardown(test_strerror, tu_sweep),
		cmocka_unit_test_teardown(test_invalid_names, tu_sweep),
		cmocka_unit_test_teardown(test_name_max, tu_sweep),
		cmocka_unit_test_teardown(test_null_arguments, tu_sweep),
		cmocka_unit_test_teardown(test_exists, tu_sweep),
		cmocka_unit_test_teardown(test_missing, tu_sweep),
		cmocka_unit_test_teardown(test_invalid_configs, tu_sweep),
		cmocka_unit_test_teardown(test_config_bounds, tu_sweep),
		cmocka_unit_test_teardown(test_no_space, tu_sweep),
		cmocka_unit_test_teardown(test_bad_magic, tu_sweep),
		cmocka_unit_test_teardown(test_other_format, tu_sweep),
		cmocka_unit_test_teardown(test_wrong_size, tu_sweep),
		cmocka_unit_test_teardown(test_tiny_objects, tu_sweep),
		cmocka_unit_test_teardown(test_corrupt_regions, tu_sweep),
		cmocka_unit_test_teardown(test_header_flips, tu_sweep),
		cmocka_unit_test_teardown(test_not_regular, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
