/* SPDX-License-Identifier: MIT */
/*
 * The segment: creating, validating, attaching and describing the named
 * shared-memory object that holds every shared structure.
 *
 * Creation builds the object under a private temporary name and publishes
 * it with link(2) in /dev/shm, which fails with EEXIST when the name exists:
 * so a segment is never seen half-built, and two concurrent creators end
 * with one segment, one winner (0) and one loser (-EEXIST).  The alternative,
 * O_CREAT|O_EXCL on the final name, publishes an empty object that openers
 * must then wait on, and leaves it behind for good if the creator dies.
 */
#include "layout.h"
#include "daemon.h"

#include "analyzer.h"
#include "dict.h"
#include "limiter.h"
#include "fork.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* glibc maps shm_open names to this directory. */
#define SHMT_SHM_DIR "/dev/shm"

int
shmt__name_check(const char *name)
{
	size_t len;

	if (name == NULL || name[0] != '/')
		return -EINVAL;
	len = strnlen(name, SHMT_SEGNAME_MAX + 1);
	if (len > SHMT_SEGNAME_MAX)
		return -ENAMETOOLONG;
	if (len < 2 || strchr(name + 1, '/') != NULL)
		return -EINVAL;
	if (strcmp(name, "/.") == 0 || strcmp(name, "/..") == 0)
		return -EINVAL;
	return 0;
}

static shmt_t *
handle_new(const char *name, char *base, uint64_t size,
    const struct shmt_region reg[SHMT_R_COUNT], const struct shmt_params *p)
{
	shmt_t *h = calloc(1, sizeof(*h));
	uint64_t dsize, csize;

	if (h == NULL)
		return NULL;
	h->dict = calloc(1, sizeof(*h->dict));
	h->counters = calloc(1, sizeof(*h->counters));
	if (h->dict == NULL || h->counters == NULL ||
	    shmt__stores_geometry(p, h->dict, h->counters, &dsize, &csize, NULL,
	    0) != 0) {
		free(h->dict);
		free(h->counters);
		free(h);
		return NULL;
	}
	h->dict->base = base + reg[SHMT_R_DICT].rg_off;
	h->counters->base = base + reg[SHMT_R_COUNTERS].rg_off;
	h->dict->h = h;
	h->counters->h = h;
	if (p->sp_analyzer_bytes != 0) {
		h->an = calloc(1, sizeof(*h->an));
		if (h->an == NULL || shmt__params_an_geometry(p, h->an, NULL, 0) != 0) {
			free(h->an);
			free(h->dict);
			free(h->counters);
			free(h);
			return NULL;
		}
		h->an->base = base + reg[SHMT_R_ANALYZER].rg_off;
	}
	{
		static atomic_uint uids;

		h->uid = atomic_fetch_add(&uids, 1) + 1;
	}
	h->base = base;
	h->size = size;
	h->hdr = (struct shmt_hdr *)base;
	memcpy(h->reg, reg, sizeof(h->reg));
	/* The one read of the secret: a later writer of the segment cannot
	 * change how this handle hashes. */
	memcpy(h->key.hk_key, ((const struct shmt_hdr *)base)->sh_secret,
	    sizeof(h->key.hk_key));
	h->slot = UINT32_MAX;
	h->fd = -1;
	h->owner = (uid_t)-1;
	h->pid = shmt__env_pid();
	shmt__fork_attach(h);
	snprintf(h->name, sizeof(h->name), "%s", name);
	return h;
}

static void
handle_free(shmt_t *h)
{
	if (h == NULL)
		return;
	if (h->fd >= 0)
		close(h->fd);
	shmt__lviews_free(h);
	free(h->dict);
	free(h->counters);
	free(h->an);
	free(h);
}

/* Fill BUF with N bytes from the kernel's random source: 0 or -errno.  It
 * blocks only until the kernel's pool is first initialised (early boot). */
static int
secret_make(uint8_t *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = shmt__env_getrandom(buf + got, n - got, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)r;
	}
	return 0;
}

void
shmt__secret_set(shmt_t *h, const uint8_t key[SHMT_SECRET_BYTES])
{
	memcpy(h->hdr->sh_secret, key, SHMT_SECRET_BYTES);
	memcpy(h->key.hk_key, key, SHMT_SECRET_BYTES);
}

SHMT_EXPORT int
shmt_create(const char *name, const shmt_config_t *cfg, shmt_t **out)
{
	static atomic_uint counter;
	struct shmt_region reg[SHMT_R_COUNT];
	shmt_config_t defaults;
	char tmp[SHMT_SEGNAME_MAX + 64];
	char tmppath[sizeof(tmp) + sizeof(SHMT_SHM_DIR)];
	char path[SHMT_SEGNAME_MAX + sizeof(SHMT_SHM_DIR) + 1];
	struct shmt_params params;
	struct shmt_hdr *hdr;
	uint64_t size;
	shmt_t *h = NULL;
	void *base = MAP_FAILED;
	int saved = errno;
	int fd = -1, rc;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	if (out == NULL)
		return -EINVAL;
	if (cfg == NULL) {
		shmt_config_init(&defaults);
		cfg = &defaults;
	}
	if ((rc = shmt_config_check(cfg, NULL, 0)) != 0)
		return rc;
	shmt__params_from(cfg, &params);
	if ((size = shmt__layout(&params, reg)) == 0)
		return -EINVAL;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%u", name,
	    (int)shmt__env_pid(), atomic_fetch_add(&counter, 1));
	snprintf(tmppath, sizeof(tmppath), SHMT_SHM_DIR "%s", tmp);
	snprintf(path, sizeof(path), SHMT_SHM_DIR "%s", name);

	fd = shm_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	/* The umask must not narrow what the caller asked for. */
	if (fchmod(fd, cfg->mode) != 0 ||
	    (cfg->gid != (gid_t)-1 && fchown(fd, (uid_t)-1, cfg->gid) != 0)) {
		rc = -errno;
		goto out_unlink;
	}
	/* Reserve the memory now: a tmpfs that fills up later would kill the
	 * users with SIGBUS instead of failing here. */
	if ((rc = posix_fallocate(fd, 0, (off_t)size)) != 0) {
		rc = rc == ENOSPC ? -ENOSPC : -rc;
		goto out_unlink;
	}
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto out_unlink;
	}
	hdr = base;
	shmt__hdr_init(hdr, &params, size, reg);
	if ((rc = secret_make(hdr->sh_secret, sizeof(hdr->sh_secret))) != 0)
		goto out_unlink;
	shmt__lock_init(&hdr->sh_table_lock);
	if ((h = handle_new(name, base, size, reg, &params)) == NULL) {
		rc = -ENOMEM;
		goto out_unlink;
	}
	if ((rc = shmt__store_init(h->dict)) != 0 ||
	    (rc = shmt__store_init(h->counters)) != 0)
		goto out_unlink;
	/* The magic goes last: a reader that sees it sees everything. */
	__atomic_store_n(&hdr->sh_magic, SHMT_MAGIC, __ATOMIC_RELEASE);

	if (link(tmppath, path) != 0) {
		rc = -errno;
		goto out_unlink;
	}
	shm_unlink(tmp);
	h->fd = fd;
	fd = -1;
	if ((rc = shmt__slot_claim(h)) != 0) {
		shm_unlink(name);
		goto out;
	}
	*out = h;
	errno = saved;
	return 0;

out_unlink:
	shm_unlink(tmp);
out:
	handle_free(h);
	if (base != MAP_FAILED)
		munmap(base, size);
	if (fd >= 0)
		close(fd);
	errno = saved;
	return rc;
}

SHMT_EXPORT void
shmt_open_opts_init(shmt_open_opts_t *o)
{
	if (o == NULL)
		return;
	memset(o, 0, sizeof(*o));
	o->owner = (uid_t)-1;
}

/* 1 when GID is the caller's effective group or one of its supplementary
 * groups. */
int
shmt__in_group(gid_t gid)
{
	gid_t *list;
	int n, yes = 0;

	if (gid == getegid())
		return 1;
	n = getgroups(0, NULL);
	if (n <= 0)
		return 0;
	list = calloc((size_t)n, sizeof(*list));
	if (list == NULL)
		return 0;
	n = getgroups(n, list);
	for (int i = 0; i < n && !yes; i++)
		yes = list[i] == gid;
	free(list);
	return yes;
}

/*
 * Whether the caller may trust what the object ST holds.  Whoever can write
 * the object can also truncate it (which kills its users with SIGBUS) and
 * forge its contents, so the writers must be people the caller trusts:
 * - never an object that every user may write (mode o+w);
 * - an object owned by the caller's effective user, by root, or by the
 *   user the caller names (OWNER);
 * - for a caller other than root, also an object whose group is one of the
 *   caller's groups and which that group may write: the caller already
 *   shares the object with every member of that group, and this is how
 *   workers in the daemon's group attach to a 0660 segment owned by the
 *   daemon's user.  Root never trusts a group this way: a privileged
 *   process names the owner it trusts.
 */
static int
owner_trusted(const struct stat *st, uid_t owner)
{
	uid_t me = geteuid();

	if (st->st_mode & S_IWOTH)
		return SHMT_EUNTRUSTED;
	if (st->st_uid == me || st->st_uid == 0 ||
	    (owner != (uid_t)-1 && st->st_uid == owner))
		return 0;
	if (me != 0 && (st->st_mode & S_IWGRP) && shmt__in_group(st->st_gid))
		return 0;
	return SHMT_EUNTRUSTED;
}

SHMT_EXPORT int
shmt_open(const char *name, shmt_t **out)
{
	return shmt_open_opts(name, NULL, out);
}

/* Open NAME and check the object before anything is read from it: a
 * regular object whose writers are trusted.  Returns the descriptor in *FD
 * and its status in *ST, or an error. */
static int
object_open(const char *name, uid_t owner, int *fd, struct stat *st)
{
	int rc;

	*fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (*fd < 0)
		return -errno;
	if (fstat(*fd, st) != 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = SHMT_ENOTREG;
	else
		rc = owner_trusted(st, owner);
	if (rc != 0)
		close(*fd);
	return rc;
}

/* Read the header of the object FD of SIZE bytes once into *HC (private
 * memory) and validate that copy, filling REG.  By pread, not through a
 * mapping: an object truncated meanwhile gives a short read, not SIGBUS. */
int
shmt__header_read(int fd, uint64_t size, struct shmt_hdr *hc,
    struct shmt_region reg[SHMT_R_COUNT])
{
	if (size < sizeof(*hc)) {
		/* Too small to hold a header: tell a foreign object (bad
		 * magic) from a truncated segment when the magic fits. */
		uint64_t magic = 0;

		if (size >= sizeof(magic) &&
		    pread(fd, &magic, sizeof(magic), 0) == sizeof(magic) &&
		    magic != SHMT_MAGIC)
			return SHMT_EMAGIC;
		return SHMT_ESIZE;
	}
	if (pread(fd, hc, sizeof(*hc), 0) != (ssize_t)sizeof(*hc))
		return SHMT_ESIZE;
	return shmt__hdr_validate(hc, size, reg);
}

/* open_once found the segment FROZEN by a move, or MOVED (the name
 * named a newer generation by the time its header was read). */
#define OPEN_FROZEN 1
#define OPEN_MOVED 2

static int
open_once(const char *name, const shmt_open_opts_t *opts, shmt_t **out)
{
	struct shmt_region reg[SHMT_R_COUNT];
	struct shmt_hdr hc;
	struct stat st;
	shmt_t *h = NULL;
	void *base = MAP_FAILED;
	uint64_t size = 0;
	int saved = errno;
	int fd = -1, rc;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	if (out == NULL)
		return -EINVAL;
	rc = object_open(name, opts != NULL ? opts->owner : (uid_t)-1, &fd, &st);
	if (rc != 0) {
		errno = saved;
		return rc;
	}
	size = (uint64_t)st.st_size;
	/* Everything the handle trusts (regions, store and analyzer geometry,
	 * limiter table size) comes from this one private copy, never from a
	 * second read of the segment. */
	if ((rc = shmt__header_read(fd, size, &hc, reg)) != 0 ||
	    (rc = shmt__ns_check(&hc)) != 0)
		goto fail;
	if (hc.sh_retired != 0) {
		/* Opened in the moment between the mark and the unlink, or
		 * while a move holds it frozen (move.c). */
		rc = hc.sh_retired == SHMT_SEG_FROZEN ? OPEN_FROZEN :
		    hc.sh_retired == SHMT_SEG_MOVED ? OPEN_MOVED : SHMT_ESTALE;
		goto fail;
	}
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	if ((h = handle_new(name, base, size, reg, &hc.sh_params)) == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	h->fd = fd;
	fd = -1;
	if (opts != NULL)
		h->owner = opts->owner;
	if ((rc = shmt__slot_claim(h)) != 0)
		goto fail;
	*out = h;
	errno = saved;
	return 0;
fail:
	handle_free(h);
	if (base != MAP_FAILED)
		munmap(base, size);
	if (fd >= 0)
		close(fd);
	errno = saved;
	return rc;
}

SHMT_EXPORT int
shmt_open_opts(const char *name, const shmt_open_opts_t *opts, shmt_t **out)
{
	return shmt__open_hooked(name, opts, NULL, out);
}

int
shmt__open_hooked(const char *name, const shmt_open_opts_t *opts,
    const shmt_t *hk, shmt_t **out)
{
	int rc;

	/* A segment frozen by a move: wait for its outcome (finishing or
	 * undoing the move of a dead mover), then open what the name holds. */
	for (int tries = 0, moved = 0;; tries++) {
		/* Moved between the name's lookup and the header's read: the
		 * name holds a newer generation; open that (moves made back
		 * to back: -EAGAIN after a bounded number). */
		while ((rc = open_once(name, opts, out)) == OPEN_MOVED)
			if (++moved == SHMT_GEN_FOLLOW_MAX)
				return -EAGAIN;
		if (rc != OPEN_FROZEN)
			return rc;
		if (tries == 4)
			return -EAGAIN;
		rc = shmt__move_settle_h(name, SHMT_MOVE_WAIT_NS, hk);
		if (rc != 0 && rc != SHMT_ESTALE)
			return rc;
	}
}

int
shmt__size_check(shmt_t *h, uint64_t *now_size)
{
	int saved = errno;
	struct stat st;
	int rc = 0;

	*now_size = h->size;
	if (h->fd >= 0 && fstat(h->fd, &st) == 0 &&
	    (uint64_t)st.st_size < h->size) {
		*now_size = (uint64_t)st.st_size;
		rc = SHMT_ESIZE;
	}
	errno = saved;
	return rc;
}

__thread unsigned shmt__name_tick __attribute__((tls_model("initial-exec")));
__thread unsigned shmt__sleep_quiet __attribute__((tls_model("initial-exec")));

void
shmt__name_look(shmt_t *h)
{
	struct timespec ts;
	uint64_t now, due;
	int saved = errno;

	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return;
	now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	due = __atomic_load_n(&h->name_next, __ATOMIC_RELAXED);
	if (now < due || !__atomic_compare_exchange_n(&h->name_next, &due,
	    now + SHMT_NAME_PACE_NS, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	(void)shmt__gone_check(h);
	errno = saved;
}

int
shmt__gone_check(shmt_t *h)
{
	int saved = errno;
	struct stat st;
	int rc = 0;

	if (__atomic_load_n(&h->hdr->sh_retired, __ATOMIC_ACQUIRE) != 0)
		rc = SHMT_ESTALE;
	else if (h->fd >= 0 && fstat(h->fd, &st) == 0 && st.st_nlink == 0) {
		shmt__retire(h);
		rc = SHMT_ESTALE;
	}
	errno = saved;
	return rc;
}

SHMT_EXPORT void
shmt_close(shmt_t *h)
{
	int saved = errno;
	uint64_t now_size;

	if (h == NULL)
		return;
	/* The generations this handle followed (fork.c), newest last. */
	if (h->gen_next != NULL)
		shmt_close(h->gen_next);
	/* A generation already handed to reclaim (rcu.c) has no mapping or
	 * descriptor of its own any more: its slot went with its segment. */
	if (h->gen_reclaimed) {
		h->fd = -1;
		handle_free(h);
		errno = saved;
		return;
	}
	/* A handle inherited across fork() belongs to the parent's slot.  A
	 * truncated object has no slot page to release any more. */
	if (h->pid == shmt__env_pid() && shmt__size_check(h, &now_size) == 0) {
		shmt__an_release(h);
		shmt__slot_release(h);
	}
	munmap(h->base, h->size);
	handle_free(h);
	errno = saved;
}

/*
 * Mark the segment NAME retired before its last name goes, so that every process
 * still attached answers SHMT_ESTALE from its next call instead of enforcing
 * limits on an object no new process can see.  Best effort: an object this
 * caller may not write, that is not a segment of this format, or that is
 * shorter than its header is left as it is (the unlink still happens).  The
 * mark is one store into the header, read back through a private copy
 * first, so a hostile object cannot steer it.
 */
static void
retire(const char *name)
{
	struct shmt_region reg[SHMT_R_COUNT];
	struct shmt_hdr hc, *hdr;
	struct stat st;
	void *base;
	int fd;

	if (object_open(name, (uid_t)-1, &fd, &st) != 0)
		return;
	/* Only the last name retires it: removing the temporary name of a
	 * segment published under another (a restore) must not. */
	if (st.st_nlink == 1 &&
	    shmt__header_read(fd, (uint64_t)st.st_size, &hc, reg) == 0) {
		base = mmap(NULL, sizeof(hc), PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0);
		if (base != MAP_FAILED) {
			hdr = base;
			/* A generation frozen or moved keeps its state. */
			(void)shmt__genword_from_live(hdr, SHMT_SEG_RETIRED);
			munmap(base, sizeof(hc));
		}
	}
	close(fd);
}

void
shmt__retire(shmt_t *h)
{
	/* A generation frozen or moved (its name renamed over) keeps its
	 * state: the move decides it (move.c). */
	(void)shmt__genword_from_live(h->hdr, SHMT_SEG_RETIRED);
}

SHMT_EXPORT int
shmt_unlink(const char *name)
{
	int saved = errno;
	int rc;

	if ((rc = shmt__name_check(name)) != 0)
		return rc;
	retire(name);
	rc = shm_unlink(name) == 0 ? 0 : -errno;
	errno = saved;
	return rc;
}

SHMT_EXPORT const char *
shmt_name(const shmt_t *h)
{
	return h != NULL ? h->name : NULL;
}

SHMT_EXPORT int
shmt_set_clock(shmt_t *h, shmt_clock_fn fn, void *ctx)
{
	if (h == NULL)
		return -EINVAL;
	for (; h != NULL; h = __atomic_load_n(&h->gen_next, __ATOMIC_ACQUIRE)) {
		h->clock = fn;
		h->clock_ctx = fn != NULL ? ctx : NULL;
	}
	return 0;
}

SHMT_EXPORT int
shmt_set_sleep_hooks(shmt_t *h, shmt_sleep_fn before, shmt_sleep_fn after,
    void *ctx)
{
	if (h == NULL || (before == NULL) != (after == NULL))
		return -EINVAL;
	for (; h != NULL; h = __atomic_load_n(&h->gen_next, __ATOMIC_ACQUIRE)) {
		h->sleep_before = before;
		h->sleep_after = after;
		h->sleep_ctx = before != NULL ? ctx : NULL;
	}
	return 0;
}

SHMT_EXPORT shmt_time_t
shmt_now(shmt_t *h)
{
	return h != NULL ? shmt__now(h) : shmt__mono_ns();
}

static int
gen_segment_stat_once(shmt_t *h, shmt_segment_stat_t *out)
{
	const struct shmt_hdr *hdr;
	const struct shmt_lim *lim;
	uint32_t nlim, n = 0;

	uint64_t now_size;

	if (h == NULL || out == NULL)
		return -EINVAL;
	if (shmt__size_check(h, &now_size) != 0)
		return SHMT_ESIZE;
	hdr = h->hdr;
	memset(out, 0, sizeof(*out));
	out->size = h->size;
	out->format = hdr->sh_format;
	out->abi_version = hdr->sh_abi;
	out->nregions = SHMT_R_COUNT;
	for (int i = 0; i < SHMT_R_COUNT; i++) {
		snprintf(out->regions[i].name, sizeof(out->regions[i].name),
		    "%s", shmt__region_names[i]);
		out->regions[i].offset = h->reg[i].rg_off;
		out->regions[i].size = h->reg[i].rg_size;
	}
	nlim = (uint32_t)(h->reg[SHMT_R_LIMITERS].rg_size / sizeof(*lim));
	lim = shmt__region(h, SHMT_R_LIMITERS);
	for (uint32_t i = 0; i < nlim; i++)
		if (__atomic_load_n(&lim[i].lm_state, __ATOMIC_ACQUIRE) ==
		    SHMT_LIM_READY)
			n++;
	out->max_limiters = nlim;
	out->limiters = n;
	out->regions[SHMT_R_HEADER].used = sizeof(struct shmt_hdr);
	out->regions[SHMT_R_LIMITERS].used = (uint64_t)n * sizeof(*lim);
	out->regions[SHMT_R_ARENA].used =
	    __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	out->regions[SHMT_R_DICT].used = shmt__store_used(h->dict);
	out->regions[SHMT_R_COUNTERS].used = shmt__store_used(h->counters);
	out->regions[SHMT_R_ANALYZER].used = h->reg[SHMT_R_ANALYZER].rg_size;
	out->max_slots =
	    (uint32_t)(h->reg[SHMT_R_SLOTS].rg_size / sizeof(struct shmt_slot));
	shmt__slots_count(h, &out->slots, &out->slots_stale);
	out->regions[SHMT_R_SLOTS].used =
	    (uint64_t)out->slots * sizeof(struct shmt_slot);
	out->mode = (mode_t)(hdr->sh_params.sp_mode & 0777);
	out->created_wall_ns = hdr->sh_created_wall_ns;
	out->daemon_pid = __atomic_load_n(&hdr->sh_daemon_pid, __ATOMIC_ACQUIRE);
	out->daemon_alive = out->daemon_pid > 0 && out->daemon_pid < INT32_MAX &&
	    shmt__pid_alive((pid_t)out->daemon_pid,
	    __atomic_load_n(&hdr->sh_daemon_start, __ATOMIC_RELAXED));
	out->daemon_heartbeat_ns =
	    __atomic_load_n(&hdr->sh_heartbeat_ns, __ATOMIC_RELAXED);
	out->daemon_lag_ns = __atomic_load_n(&hdr->sh_lag_ns, __ATOMIC_RELAXED);
	out->housekeeping_runs = __atomic_load_n(&hdr->sh_hk_runs, __ATOMIC_RELAXED);
	out->slots_reaped = __atomic_load_n(&hdr->sh_reaped, __ATOMIC_RELAXED);
	return 0;
}

/* The live generation's: a handle whose segment moved reports the one it
 * moved to (the daemon's metrics thread keeps its first handle). */
SHMT_EXPORT int
shmt_segment_stat(shmt_t *h, shmt_segment_stat_t *out)
{
	SHMT_GEN_READ(h, gen_segment_stat_once(h, out));
}

/* ---- The daemon's claim and heartbeat ------------------------------------ */

typedef unsigned __int128 u128;

static u128 *
daemon_word(shmt_t *h)
{
	return (u128 *)(void *)&h->hdr->sh_daemon_pid;
}

static u128
daemon_pack(uint64_t pid, uint64_t start)
{
	return ((u128)start << 64) | pid;
}

int
shmt__daemon_claim(shmt_t *h, pid_t me, uint64_t start, uint64_t *prev)
{
	u128 mine = daemon_pack((uint64_t)me, start);
	u128 cur = __atomic_load_n(daemon_word(h), __ATOMIC_ACQUIRE);

	*prev = 0;
	for (int i = 0; i < 1000; i++) {
		uint64_t pid = (uint64_t)cur, st = (uint64_t)(cur >> 64);

		if (pid != 0 && pid <= INT32_MAX && (pid_t)pid != me &&
		    shmt__pid_alive((pid_t)pid, st)) {
			*prev = pid;
			return -EBUSY;
		}
		if (__atomic_compare_exchange_n(daemon_word(h), &cur, mine, 0,
		    __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
			*prev = pid;
			return 0;
		}
	}
	return -EAGAIN;
}

void
shmt__daemon_unclaim(shmt_t *h, pid_t me, uint64_t start)
{
	u128 mine = daemon_pack((uint64_t)me, start);

	__atomic_compare_exchange_n(daemon_word(h), &mine, 0, 0,
	    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
}

void
shmt__daemon_heartbeat(shmt_t *h, shmt_time_t now)
{
	__atomic_store_n(&h->hdr->sh_heartbeat_ns, now, __ATOMIC_RELAXED);
}

void
shmt__daemon_lag(shmt_t *h, uint64_t lag_ns)
{
	__atomic_store_n(&h->hdr->sh_lag_ns, lag_ns, __ATOMIC_RELAXED);
}

int
shmt__hdr_facts(const char *name, struct shmt__hdr_facts *f)
{
	char path[SHMT_SEGNAME_MAX + sizeof(SHMT_SHM_DIR)];
	struct shmt_hdr hdr;
	struct stat st;
	ssize_t n = -1;
	int fd;

	memset(f, 0, sizeof(*f));
	memset(&hdr, 0, sizeof(hdr));
	f->want_magic = SHMT_MAGIC;
	f->abi = SHMT_ABI_VERSION;
	if (shmt__name_check(name) != 0)
		return -EINVAL;
	snprintf(path, sizeof(path), "%s%s", SHMT_SHM_DIR, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) == 0) {
		f->file_size = (int64_t)st.st_size;
		n = pread(fd, &hdr, sizeof(hdr), 0);
	}
	close(fd);
	f->magic = hdr.sh_magic;
	f->format = hdr.sh_format;
	f->size = hdr.sh_size;
	if (n == (ssize_t)sizeof(hdr))
		return 0;
	return n >= 8 ? -1 : -EIO;
}
