/* SPDX-License-Identifier: MIT */
/*
 * Generations: a segment moved into a new one with other sizes while
 * workers run, and how every process learns of it.
 *
 * The move (shmt__move, run by the daemon):
 *   1. take the limiter table's lock (movers and limiter changes
 *      serialise on it), write the mover's pid and start time into the
 *      header, then freeze: one CAS of sh_retired from LIVE to FROZEN;
 *   2. take the segment's image (image.c): the limiter table and the used
 *      arena word by word, every dictionary and counter shard under its
 *      lock, the analyzer's summaries;
 *   3. build the new generation from that image with the new sizes under
 *      the private name NAME.move.PID, and check it (image.c);
 *   4. publish it with rename(2) of /dev/shm/NAME.move.PID over
 *      /dev/shm/NAME: glibc's shm_open names objects of the tmpfs mounted
 *      at /dev/shm, and a rename within one tmpfs replaces the target in
 *      one step, so every shm_open of NAME finds the old object or the new
 *      one, never neither;
 *   5. CAS sh_retired from FROZEN to MOVED, and wake every sleeper.
 *
 * One step decides for every write.  A write to the segment is either a
 * grant's CAS on a limiter's word or a change under a lock (a dictionary
 * or counter shard, the limiter table).  Every such write is followed, in
 * the writer, by a load of sh_retired: for a grant, right after its CAS
 * succeeded (shmt__grant_check); for a locked change, right after the lock
 * was taken (shmt__shard_lock, shmt__table_lock).  The freeze's CAS, the
 * grants' CASes, the locks' acquisitions are locked instructions, totally
 * ordered (sequentially consistent; on x86-64 every locked instruction is
 * a full barrier, so the loads after them are plain loads).  So:
 *   - a grant whose load finds LIVE made its CAS before the freeze, and the
 *     image, copied after the freeze, holds it: it is carried;
 *   - a grant whose load finds FROZEN may or may not be in the image: it is
 *     not reported granted.  The caller waits for the move's outcome: MOVED
 *     -> SHMT_ESTALE (the caller reopens the name and asks again there; the
 *     use, if carried, is held unused for its window: never an over-grant);
 *     the move undone (LIVE again) -> the grant stands, since it is in the
 *     generation that stayed authoritative;
 *   - a locked writer whose load finds LIVE took its lock before the freeze;
 *     the mover's copy of that shard or table takes the same lock after the
 *     freeze, so it waits for the write and copies it.  One that finds
 *     FROZEN drops the lock without writing and waits for the outcome.
 * Releases, refunds and resets that land in the old generation after its
 * copy are lost: the new one holds those uses until their windows end,
 * which is the safe direction.  The analyzer's counts fed during the copy
 * may be lost (its answers are estimates of the last minute either way).
 *
 * Exactly one generation is authoritative: the one the name points to.
 * The rename is the commit point.  Before it the old segment owns the name
 * and is LIVE or FROZEN; after it the old one is FROZEN or MOVED, never
 * LIVE again, so it takes no grant and no locked write (see above).
 * kill -9 of the mover:
 *   - before the freeze: nothing changed (at most the lock, which the next
 *     locker takes over, and the private object, which the next move or
 *     recovery removes);
 *   - frozen, before the rename: the name still points to the frozen old
 *     segment; whoever next finds it FROZEN with its mover dead (a worker
 *     waiting in shmt__frozen_wait, shmt_open, or the next daemon through
 *     shmt__move_settle) checks that the name still points to it and
 *     undoes the freeze (CAS FROZEN -> LIVE), removing NAME.move.PID;
 *   - after the rename: the name points to the new generation; whoever
 *     finds the old one FROZEN with its mover dead sees another object
 *     under the name and finishes the move (CAS FROZEN -> MOVED).
 * A mover is alive when its pid runs with the recorded start time (a
 * zombie counts as dead); while it is, nobody undoes its move, and callers
 * wait for it at most SHMT_MOVE_WAIT_NS.
 */
#include "daemon.h"

#include "fork.h"
#include "layout.h"
#include "limiter.h"
#include "proc.h"
#include "segment.h"
#include "table.h"
#include "wait.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* This thread is moving a segment: its own freeze does not hold it. */
static __thread int moving;

static void
obj_path(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "/dev/shm%s", name);
}

static int
tmp_name(char *buf, size_t cap, const char *name, long pid)
{
	if ((size_t)snprintf(buf, cap, "%s.move.%ld", name, pid) >=
	    (cap < SHMT_SEGNAME_MAX + 1 ? cap : SHMT_SEGNAME_MAX + 1))
		return -ENAMETOOLONG;
	return 0;
}

/* 1 when the object FD is the one NAME names now, 0 when NAME names
 * another object, -ENOENT when none, or another -errno. */
static int
owns_name(int fd, const char *name)
{
	char path[SHMT_SEGNAME_MAX + 16];
	struct stat a, b;

	if (fstat(fd, &a) != 0)
		return -errno;
	obj_path(path, sizeof(path), name);
	if (stat(path, &b) != 0)
		return -errno;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Remove the private objects of the move of NAME by PID: NAME.move.PID,
 * and what a shmt_create of it killed midway left (NAME.move.PID.tmp.*). */
static void
remove_leftovers(const char *name, long pid)
{
	char tmp[SHMT_SEGNAME_MAX + 1], obj[SHMT_SEGNAME_MAX + 2];
	struct dirent *e;
	size_t n;
	DIR *d;

	if (tmp_name(tmp, sizeof(tmp), name, pid) != 0)
		return;
	(void)shm_unlink(tmp);
	if ((d = opendir("/dev/shm")) == NULL)
		return;
	n = strlen(tmp + 1);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, tmp + 1, n) == 0 &&
		    strncmp(e->d_name + n, ".tmp.", 5) == 0 &&
		    (size_t)snprintf(obj, sizeof(obj), "/%s", e->d_name) <
		    sizeof(obj))
			(void)shm_unlink(obj);
	closedir(d);
}

/* Remove what movers of NAME that are gone left behind (NAME.move.PID,
 * NAME.move.PID.tmp.*): a sweep by name, for the daemon and shmt_open's
 * settling, whatever point each mover reached. */
static void
sweep_dead_movers(const char *name)
{
	char pre[SHMT_SEGNAME_MAX + 8];
	struct dirent *e;
	size_t n;
	DIR *d;

	if ((size_t)snprintf(pre, sizeof(pre), "%s.move.", name + 1) >=
	    sizeof(pre) || (d = opendir("/dev/shm")) == NULL)
		return;
	n = strlen(pre);
	while ((e = readdir(d)) != NULL) {
		char *end;
		long pid;

		if (strncmp(e->d_name, pre, n) != 0)
			continue;
		pid = strtol(e->d_name + n, &end, 10);
		if (end == e->d_name + n || pid <= 0 || pid > INT32_MAX ||
		    (*end != '\0' && *end != '.') ||
		    shmt__pid_alive((pid_t)pid, 0))
			continue;
		remove_leftovers(name, pid);
	}
	closedir(d);
}

/*
 * One look at the generation whose header is HDR (object FD, named NAME
 * when it was opened): 0 LIVE, SHMT_ESTALE MOVED or RETIRED, -EAGAIN
 * frozen by a live mover (or this thread), after finishing or undoing the
 * move of a dead one as the name says.  CHECK_MOVER: look the mover up
 * (a read of /proc), else report a frozen segment busy.  *FINISHED is set
 * to 1 when this call finished a dead mover's move (its CAS to MOVED or
 * RETIRED): the caller then wakes the old generation's sleepers, as the
 * mover would have (wake_all, wake_object).
 */
static int
settle_once(struct shmt_hdr *hdr, int fd, const char *name, int check_mover,
    int *finished)
{
	uint64_t w = shmt__genword_load(hdr), seen;
	uint32_t s = (uint32_t)w, seq = (uint32_t)(w >> 32);
	int64_t pid;
	uint64_t start;
	int own;

	if (s == SHMT_SEG_LIVE)
		return 0;
	if (s != SHMT_SEG_FROZEN)
		return SHMT_ESTALE;
	if (moving || !check_mover)
		return -EAGAIN;
	/* The mover of freeze SEQ wrote these before its freeze; a later
	 * mover may have written its own since, but then SEQ is gone from
	 * the state word and every CAS below, which expects W whole, fails:
	 * a move is only ever undone or finished by the number it froze
	 * with, never a live mover's by a recoverer that looked at an older
	 * one. */
	pid = __atomic_load_n(&hdr->sh_mover_pid, __ATOMIC_ACQUIRE);
	start = __atomic_load_n(&hdr->sh_mover_start, __ATOMIC_ACQUIRE);
	if (pid > 0 && pid <= INT32_MAX && shmt__pid_alive((pid_t)pid, start))
		return -EAGAIN;
	/* The mover is dead: the name says how far it got (no name at all:
	 * removed meanwhile, so retired). */
	seen = w;
	if ((own = owns_name(fd, name)) == -ENOENT) {
		if (shmt__genword_cas(hdr, &seen, SHMT_SEG_RETIRED, seq))
			*finished = 1;
		return (uint32_t)shmt__genword_load(hdr) == SHMT_SEG_LIVE ? 0 :
		    SHMT_ESTALE;
	}
	if (own < 0)
		return own;
	if (own) {
		if (shmt__genword_cas(hdr, &seen, SHMT_SEG_LIVE, seq) &&
		    pid > 0 && pid <= INT32_MAX)
			remove_leftovers(name, (long)pid);
	} else if (shmt__genword_cas(hdr, &seen, SHMT_SEG_MOVED, seq)) {
		*finished = 1;
	}
	return (uint32_t)shmt__genword_load(hdr) == SHMT_SEG_LIVE ? 0 :
	    SHMT_ESTALE;
}

/* settle_once until it is not busy, for at most WAIT_NS; *FINISHED as
 * settle_once's (left alone when no call finished a move). */
static int
settle(const shmt_t *h, struct shmt_hdr *hdr, int fd, const char *name,
    uint64_t wait_ns, int *finished)
{
	uint64_t t0 = shmt__mono_ns(), last = 0;
	long nap = 20000;
	struct shmt_sleep sl;

	for (;;) {
		uint64_t now = shmt__mono_ns();
		/* /proc is read every 10 ms at most. */
		int check = now - last >= 10000000ULL;
		int rc = settle_once(hdr, fd, name, check, finished);

		if (check)
			last = now;
		if (rc != -EAGAIN || moving)
			return rc;
		if (now - t0 >= wait_ns)
			return -EAGAIN;
		sl = shmt__sleep_begin(h);
		nanosleep(&(struct timespec){ 0, nap }, NULL);
		shmt__sleep_end(sl);
		if (nap < 1000000)
			nap *= 2;
	}
}

static void wake_all(shmt_t *h);

/* Wake every sleeper in shmt_wait on the limiters of the segment object
 * FD, mapped here only for this: its header is read and validated (as
 * shmt_open does) before any row is touched. */
static void
wake_object(int fd)
{
	struct shmt_region reg[SHMT_R_COUNT];
	struct shmt_hdr hc;
	struct shmt_lim *lim;
	struct stat st;
	uint64_t n;
	void *base;

	if (fstat(fd, &st) != 0 || st.st_size <= 0 ||
	    shmt__header_read(fd, (uint64_t)st.st_size, &hc, reg) != 0)
		return;
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
	    MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return;
	lim = (struct shmt_lim *)(void *)((char *)base +
	    reg[SHMT_R_LIMITERS].rg_off);
	n = reg[SHMT_R_LIMITERS].rg_size / sizeof(struct shmt_lim);
	for (uint64_t r = 0; r < n; r++)
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_FREE)
			shmt__wake_waiters(&lim[r].lm_wake);
	munmap(base, (size_t)st.st_size);
}

int
shmt__frozen_wait(shmt_t *h)
{
	int finished = 0;
	int rc = settle(h, h->hdr, h->fd, h->name, SHMT_MOVE_WAIT_NS,
	    &finished);

	if (finished)
		wake_all(h);

	return rc == -EAGAIN && moving ? 0 : rc;
}

int
shmt__grant_moved(shmt_t *h)
{
	int rc = shmt__frozen_wait(h);

	return rc == 0 ? 1 : rc;
}

int
shmt__table_lock(shmt_t *h)
{
	for (;;) {
		int lk = shmt__lock(h, &h->hdr->sh_table_lock);

		if (lk < 0)
			return lk;
		if (lk == 1)
			shmt__rows_repair(h);
		if (__builtin_expect(shmt__frozen_load(h) == 0, 1))
			return 0;
		shmt__unlock(&h->hdr->sh_table_lock);
		if ((lk = shmt__frozen_wait(h)) != 0)
			return lk;
	}
}

int
shmt__move_settle(const char *name, uint64_t wait_ns)
{
	return shmt__move_settle_h(name, wait_ns, NULL);
}

int
shmt__move_settle_h(const char *name, uint64_t wait_ns, const shmt_t *hk)
{
	struct shmt_hdr *hdr;
	struct stat st;
	int fd, rc, finished = 0;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	if ((fd = shm_open(name, O_RDWR | O_CLOEXEC, 0)) < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < sizeof(*hdr)) {
		close(fd);
		return SHMT_ESIZE;
	}
	hdr = mmap(NULL, sizeof(*hdr), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
	    0);
	if (hdr == MAP_FAILED) {
		rc = -errno;
		close(fd);
		return rc;
	}
	/* Only the state word and the mover's are read, each a whole
	 * aligned word: a foreign object cannot steer more than them. */
	if (hdr->sh_magic != SHMT_MAGIC || hdr->sh_format !=
	    shmt__format_word())
		rc = SHMT_EMAGIC;
	else
		rc = settle(hk, hdr, fd, name, wait_ns, &finished);
	munmap(hdr, sizeof(*hdr));
	if (finished)
		wake_object(fd);
	close(fd);
	if (rc == 0 || rc == SHMT_ESTALE)
		sweep_dead_movers(name);
	return rc;
}

enum kept { KEPT_NUM, KEPT_NS, KEPT_PPM, KEPT_BYTES, KEPT_BOOL };

/* X, a parameter of the segment, in the unit its config key takes
 * (a duration, a percentage, bytes, yes or no). */
static const char *
kept_value(uint64_t x, enum kept kind, char *buf, size_t cap)
{
	static const struct { uint64_t ns; const char *unit; } units[] = {
		{ 3600000000000ULL, "h" }, { 60000000000ULL, "m" },
		{ 1000000000ULL, "s" }, { 1000000ULL, "ms" }, { 1000ULL, "us" },
		{ 1, "ns" }
	};
	size_t i = 0;

	switch (kind) {
	case KEPT_NS:
		while (x != 0 && x % units[i].ns != 0)
			i++;
		snprintf(buf, cap, "%" PRIu64 "%s", x / units[i].ns,
		    units[i].unit);
		break;
	case KEPT_PPM:
		/* Parts per million as a percentage, no trailing zeros. */
		snprintf(buf, cap, "%" PRIu64 ".%04" PRIu64, x / 10000,
		    x % 10000);
		for (i = strlen(buf); buf[i - 1] == '0'; i--)
			buf[i - 1] = '\0';
		if (buf[i - 1] == '.')
			buf[i - 1] = '\0';
		strncat(buf, "%", cap - strlen(buf) - 1);
		break;
	case KEPT_BYTES:
		snprintf(buf, cap, "%" PRIu64 " bytes", x);
		break;
	case KEPT_BOOL:
		snprintf(buf, cap, "%s", x != 0 ? "yes" : "no");
		break;
	default:
		snprintf(buf, cap, "%" PRIu64, x);
		break;
	}
	return buf;
}

/* What a move may change, and what must stay (the records of the
 * counters and the analyzer's summaries are shaped by it): P the
 * segment's parameters, C those asked for. */
static int
move_compatible(const struct shmt_params *p, const struct shmt_params *c,
    char *err, size_t cap)
{
	/* The value kept is written as the config writes it. */
#define SAME(field, what, kind) \
	if ((uint64_t)p->field != (uint64_t)c->field) \
		return shmt__bad(err, cap, -EINVAL, "%s cannot change by a move " \
		    "(it shapes the data moved): it stays %s", what, \
		    kept_value((uint64_t)p->field, kind, v, sizeof(v)))
	char v[48];

	SAME(sp_counters_subwindows, "[counters] subwindows", KEPT_NUM);
	SAME(sp_counters_window_ns, "[counters] window", KEPT_NS);
	SAME(sp_counters_error_ppm, "[counters] error", KEPT_PPM);
	SAME(sp_analyzer_bytes, "[analyzer] size", KEPT_BYTES);
	SAME(sp_analyzer_window_ns, "[analyzer] window", KEPT_NS);
	SAME(sp_analyzer_subwindows, "[analyzer] subwindows", KEPT_NUM);
	SAME(sp_analyzer_threshold_ppm, "[analyzer] threshold", KEPT_PPM);
	SAME(sp_analyzer_clients, "[analyzer] clients", KEPT_BOOL);
#undef SAME
	if (c->sp_dict_max_key < p->sp_dict_max_key ||
	    c->sp_dict_max_value < p->sp_dict_max_value)
		return shmt__bad(err, cap, -EINVAL, "the dictionary's largest key "
		    "and value can only grow by a move (now %u and %u bytes)",
		    p->sp_dict_max_key, p->sp_dict_max_value);
	if ((c->sp_dict_bytes == 0) != (p->sp_dict_bytes == 0) ||
	    (c->sp_counters_bytes == 0) != (p->sp_counters_bytes == 0))
		return shmt__bad(err, cap, -EINVAL, "a move cannot add or remove "
		    "the dictionary or the counters, only resize them");
	return 0;
}

int
shmt__move_wanted(shmt_t *h, const shmt_config_t *want)
{
	struct shmt_params p, c;

	if (h == NULL || want == NULL)
		return 0;
	shmt__rcu_enter();
	h = shmt__gen_live(h);
	memcpy(&p, &h->hdr->sh_params, sizeof(p));
	shmt__rcu_leave();
	memset(&c, 0, sizeof(c));
	shmt__params_from(want, &c);
	return memcmp(&p, &c, sizeof(p)) != 0;
}

/*
 * Who owns the next generation: the old object's user, always (its workers
 * and the daemon trust that user; a move by root or by a user the caller
 * named as owner must not lock them out), and its group and mode, unless
 * the move asks for another group or mode than the segment was made with
 * (the daemon's reload of [segment] mode or group).  Only root, or the
 * owner itself when it is in that group, can give a new object that owner
 * and group: anyone else is refused here, before anything changes.
 */
struct owner_want {
	uid_t uid;
	gid_t gid;
	mode_t mode;
};

static int
owner_plan(shmt_t *h, const struct shmt_params *p, const shmt_config_t *want,
    struct owner_want *o, char *err, size_t cap)
{
	uid_t me = geteuid();
	struct stat st;

	if (h->fd < 0 || fstat(h->fd, &st) != 0)
		return shmt__bad(err, cap, h->fd < 0 ? -EBADF : -errno, "cannot "
		    "read the owner of segment %s", h->name);
	o->uid = st.st_uid;
	o->gid = want->gid != (gid_t)-1 && (uint32_t)want->gid != p->sp_gid ?
	    want->gid : st.st_gid;
	o->mode = (uint32_t)want->mode != p->sp_mode ? want->mode & 0777 :
	    st.st_mode & 0777;
	if (me != 0 && me != o->uid)
		return shmt__bad(err, cap, -EPERM, "segment %s is owned by uid %u: "
		    "only that user or root may move it (a move keeps the "
		    "owner, and uid %u cannot give a new object to another "
		    "user)", h->name, (unsigned)o->uid, (unsigned)me);
	if (me != 0 && !shmt__in_group(o->gid))
		return shmt__bad(err, cap, -EPERM, "segment %s has group %u, "
		    "which uid %u is not in: only root may move it (a move "
		    "keeps the group)", h->name, (unsigned)o->gid,
		    (unsigned)me);
	return 0;
}

/* Give the new generation T the owner, group and mode of O, before its
 * rename publishes it. */
static int
owner_apply(shmt_t *t, const struct owner_want *o, char *err, size_t cap)
{
	struct stat st;

	if (fstat(t->fd, &st) != 0)
		return shmt__bad(err, cap, -errno, "cannot read the owner of the "
		    "new generation: %s", strerror(errno));
	if ((st.st_uid != o->uid || st.st_gid != o->gid) &&
	    fchown(t->fd, o->uid, o->gid) != 0)
		return shmt__bad(err, cap, -errno, "cannot give the new generation "
		    "the segment's owner %u and group %u: %s", (unsigned)o->uid,
		    (unsigned)o->gid, strerror(errno));
	if (fchmod(t->fd, o->mode) != 0)
		return shmt__bad(err, cap, -errno, "cannot give the new generation "
		    "the segment's mode %04o: %s", (unsigned)o->mode,
		    strerror(errno));
	return 0;
}

/* Wake every sleeper in shmt_wait on H's limiters: they look again and
 * find the segment moved. */
static void
wake_all(shmt_t *h)
{
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n);

	for (uint32_t r = 0; r < n; r++)
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_FREE)
			shmt__wake_waiters(&lim[r].lm_wake);
}

int
shmt__move(shmt_t *h, const shmt_config_t *want, shmt_clock_fn clock,
    void *clock_ctx, char *err, size_t cap)
{
	return shmt__move_redefine(h, want, NULL, 0, clock, clock_ctx, err,
	    cap);
}

int
shmt__move_redefine(shmt_t *h, const shmt_config_t *want,
    const struct shmt__redef *defs, size_t ndefs, shmt_clock_fn clock,
    void *clock_ctx, char *err, size_t cap)
{
	char tmp[SHMT_SEGNAME_MAX + 1];
	char from[SHMT_SEGNAME_MAX + 16], to[SHMT_SEGNAME_MAX + 16];
	struct shmt_params p, np;
	struct shmt__host_time now;
	struct owner_want own = { 0, 0, 0 };
	unsigned char *img = NULL;
	uint64_t w;
	uint32_t seq;
	size_t len = 0;
	shmt_t *t = NULL;
	int rc;

	if (h == NULL || want == NULL || (defs == NULL && ndefs > 0))
		return shmt__bad(err, cap, -EINVAL, "no segment or no sizes");
	if ((rc = shmt_config_check(want, err, cap)) != 0)
		return rc;
	if (tmp_name(tmp, sizeof(tmp), h->name, (long)shmt__env_pid()) != 0)
		return shmt__bad(err, cap, -ENAMETOOLONG, "segment name %s is too "
		    "long to build its next generation under a private name",
		    h->name);
	memcpy(&p, &h->hdr->sh_params, sizeof(p));
	memset(&np, 0, sizeof(np));
	shmt__params_from(want, &np);
	if ((rc = move_compatible(&p, &np, err, cap)) != 0 ||
	    (rc = owner_plan(h, &p, want, &own, err, cap)) != 0)
		return rc;
	if ((rc = shmt__table_lock(h)) != 0)
		return shmt__bad(err, cap, rc, "cannot lock the limiter table: %s",
		    shmt_strerror(rc));
	__atomic_store_n(&h->hdr->sh_mover_pid, (int64_t)shmt__env_pid(),
	    __ATOMIC_RELAXED);
	__atomic_store_n(&h->hdr->sh_mover_start,
	    shmt__proc_start(shmt__env_pid()), __ATOMIC_RELAXED);
	/* The freeze: LIVE with freeze number N -> FROZEN with N + 1, the
	 * number every later step of this move (and any recoverer's) CASes
	 * against. */
	w = shmt__genword_load(h->hdr);
	seq = (uint32_t)(w >> 32) + 1;
	if ((uint32_t)w != SHMT_SEG_LIVE ||
	    !shmt__genword_cas(h->hdr, &w, SHMT_SEG_FROZEN, seq)) {
		shmt__unlock(&h->hdr->sh_table_lock);
		return shmt__bad(err, cap, SHMT_ESTALE, "the segment is no longer "
		    "live (state %u): reopen %s", (uint32_t)w, h->name);
	}
	moving = 1;
	shmt__host_time_now(&now);
	if ((rc = shmt__image_build(h, &now, &img, &len)) != 0) {
		shmt__bad(err, cap, rc, "cannot copy the segment: %s",
		    shmt_strerror(rc));
		goto undo;
	}
	if ((rc = shmt__image_rebuild(img, len, tmp, want, defs, ndefs, &now,
	    clock, clock_ctx, &t, err, cap)) != 0 ||
	    (rc = owner_apply(t, &own, err, cap)) != 0)
		goto undo;
	obj_path(from, sizeof(from), tmp);
	obj_path(to, sizeof(to), h->name);
	if (rename(from, to) != 0) {
		rc = shmt__bad(err, cap, -errno, "cannot publish %s by rename(2) "
		    "from %s: %s", h->name, tmp, strerror(errno));
		goto undo;
	}
	w = shmt__genword(SHMT_SEG_FROZEN, seq);
	if (!shmt__genword_cas(h->hdr, &w, SHMT_SEG_MOVED, seq)) {
		/* Our freeze was undone under us (only a recoverer that took
		 * this live mover for dead can): writes may have landed in
		 * the old generation after its copy.  The name is the new
		 * one's now: stop the old one taking more, whatever it is,
		 * and say so. */
		while ((uint32_t)w != SHMT_SEG_MOVED &&
		    !shmt__genword_cas(h->hdr, &w, SHMT_SEG_MOVED,
		    (uint32_t)(w >> 32)))
			;
		rc = shmt__bad(err, cap, SHMT_ECORRUPT, "segment %s moved, but "
		    "its freeze was undone during the move (state word %#"
		    PRIx64 "): writes made in between may be lost; check it "
		    "with 'shmthrottle -s %s check'", h->name, w, h->name);
	}
	moving = 0;
	shmt_close(t);
	free(img);
	shmt__unlock(&h->hdr->sh_table_lock);
	wake_all(h);
	return rc;
undo:
	if (t != NULL)
		shmt_close(t);
	remove_leftovers(h->name, (long)shmt__env_pid());
	free(img);
	w = shmt__genword(SHMT_SEG_FROZEN, seq);
	(void)shmt__genword_cas(h->hdr, &w, SHMT_SEG_LIVE, seq);
	moving = 0;
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

/* The generation returned is pinned (fork.c): the caller keeps it and
 * uses it outside any read-side section, so it is never reclaimed. */
shmt_t *
shmt__move_follow(shmt_t *h, int *rc)
{
	*rc = 0;
	shmt__rcu_enter();
	for (int i = 0; h != NULL && i < 4; i++) {
		h = shmt__gen_live(h);
		if (shmt__frozen_load(h) == SHMT_SEG_LIVE) {
			if (shmt__gen_pin(h) != 0)
				continue;
			shmt__rcu_leave();
			return h;
		}
		if ((*rc = shmt__gen_follow(h)) != 0) {
			shmt__rcu_leave();
			return NULL;
		}
	}
	shmt__rcu_leave();
	*rc = SHMT_ESTALE;
	return NULL;
}

void
shmt__move_config(shmt_t *h, shmt_config_t *c)
{
	shmt__rcu_enter();
	shmt__config_from_params(&shmt__gen_live(h)->hdr->sh_params, c);
	shmt__rcu_leave();
}
