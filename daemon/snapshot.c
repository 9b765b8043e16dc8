/* SPDX-License-Identifier: MIT */
/*
 * Snapshots: the whole segment image in a file, with a header that says
 * which build wrote it, when (on both clocks, and on which boot), and a
 * checksum, so that a restart after a reboot enforces the uses still in
 * flight instead of handing out a fresh allowance.
 *
 * Time base.  Limiters hold CLOCK_MONOTONIC times, which restart near zero
 * at every boot.  On the same boot (same boot id) they are still valid and
 * are kept as they are.  Across a reboot a time T of the old boot becomes
 * T + delta with delta = mono_now - (mono_then + elapsed), elapsed being
 * the wall-clock time between snapshot and restore, never taken below 0:
 * an old release time stays as far in the future as it was, minus the time
 * that truly passed.  A wall clock stepped back makes uses stay held longer
 * (safe); only a wall clock stepped forward between the two could release
 * them early, and nothing on the host can tell.
 */
#include "snapshot.h"

#include "limiter.h"
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SNAP_MAGIC 0x31504e5354484d53ULL /* "SMHTSNP1" little-endian */
#define SNAP_VERSION 1U
#define BOOT_ID_LEN 40

struct snap_hdr {
	uint64_t sn_magic;
	uint32_t sn_version;
	uint32_t sn_hdr_size;
	uint64_t sn_format;            /* the segment's format word */
	uint64_t sn_wall_ns;           /* CLOCK_REALTIME when written */
	uint64_t sn_mono_ns;           /* CLOCK_MONOTONIC when written */
	char sn_boot_id[BOOT_ID_LEN];  /* /proc/sys/kernel/random/boot_id */
	uint64_t sn_size;              /* image bytes that follow */
	uint64_t sn_sum;               /* FNV-1a 64 of the image */
	uint64_t sn_hdr_sum;           /* FNV-1a 64 of the fields above */
};
_Static_assert(sizeof(struct snap_hdr) == 104, "no hidden padding");

typedef unsigned __int128 u128;

static uint64_t
fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define FNV_INIT 0xcbf29ce484222325ULL

static uint64_t
clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void
boot_id(char out[BOOT_ID_LEN])
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	memset(out, 0, BOOT_ID_LEN);
	if (f == NULL)
		return;
	if (fgets(out, BOOT_ID_LEN, f) != NULL)
		out[strcspn(out, "\n")] = '\0';
	fclose(f);
}

/*
 * Copy the mapping 16 bytes at a time with atomic 16-byte loads.  Every
 * shared word of the segment (8 or 16 bytes, naturally aligned) lies inside
 * one such chunk, so no word is ever copied half old, half new while
 * workers change it.  Words are copied one by one: the image is what a
 * kill -9 of everyone at the moment of each word's copy would leave, which
 * the library recovers from by design.
 */
static void
copy_image(const shmt_t *h, unsigned char *dst)
{
	const u128 *src = (const u128 *)(const void *)h->base;

	for (uint64_t i = 0; i < h->size / sizeof(u128); i++) {
		u128 v = __atomic_load_n(&src[i], __ATOMIC_RELAXED);

		memcpy(dst + i * sizeof(u128), &v, sizeof(v));
	}
}

static int
write_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n > 0) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* fsync the directory holding PATH, so the rename itself is durable. */
static int
sync_dir(const char *path)
{
	char copy[PATH_MAX];
	int fd, rc = 0;

	snprintf(copy, sizeof(copy), "%s", path);
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

int
shmtd_snapshot_write(shmt_t *h, const char *path, char *err, size_t cap)
{
	char tmp[PATH_MAX];
	struct snap_hdr sh;
	unsigned char *img = NULL;
	const char *what = "write";
	int fd = -1, rc;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path,
	    (int)getpid()) >= sizeof(tmp)) {
		snprintf(err, cap, "snapshot %s: path too long", path);
		return -ENAMETOOLONG;
	}
	if ((img = malloc(h->size)) == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	memset(&sh, 0, sizeof(sh));
	copy_image(h, img);
	sh.sn_mono_ns = clock_ns(CLOCK_MONOTONIC);
	sh.sn_wall_ns = clock_ns(CLOCK_REALTIME);
	sh.sn_magic = SNAP_MAGIC;
	sh.sn_version = SNAP_VERSION;
	sh.sn_hdr_size = sizeof(sh);
	sh.sn_format = shmt__format_word();
	boot_id(sh.sn_boot_id);
	sh.sn_size = h->size;
	sh.sn_sum = fnv1a(FNV_INIT, img, h->size);
	sh.sn_hdr_sum = fnv1a(FNV_INIT, &sh, offsetof(struct snap_hdr, sn_hdr_sum));

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		what = "create";
		goto out;
	}
	if ((rc = write_all(fd, &sh, sizeof(sh))) != 0 ||
	    (rc = write_all(fd, img, h->size)) != 0)
		goto out_unlink;
	what = "fsync";
	if (fsync(fd) != 0) {
		rc = -errno;
		goto out_unlink;
	}
	close(fd);
	fd = -1;
	what = "rename";
	if (rename(tmp, path) != 0) {
		rc = -errno;
		goto out_unlink;
	}
	what = "fsync the directory of";
	rc = sync_dir(path);
	goto out;
out_unlink:
	unlink(tmp);
out:
	if (fd >= 0)
		close(fd);
	free(img);
	if (rc != 0)
		snprintf(err, cap, "snapshot: cannot %s %s: %s", what,
		    rc == -ENOMEM ? "memory for" : tmp, strerror(-rc));
	return rc;
}

/* ---- Restore ------------------------------------------------------------ */

static int
bad(char *err, size_t cap, int rc, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int
bad(char *err, size_t cap, int rc, const char *path, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(err, cap, "snapshot %s: %s", path, what);
	return rc;
}

/* Check the file header SH of a file of FSIZE bytes. */
static int
check_header(const struct snap_hdr *sh, uint64_t fsize, const char *path,
    char *err, size_t cap)
{
	if (sh->sn_magic != SNAP_MAGIC)
		return bad(err, cap, SHMT_EMAGIC, path,
		    "not a shmthrottle snapshot");
	if (sh->sn_version != SNAP_VERSION || sh->sn_hdr_size != sizeof(*sh))
		return bad(err, cap, SHMT_EFORMAT, path, "snapshot version %u, "
		    "this build reads version %u", sh->sn_version, SNAP_VERSION);
	if (sh->sn_hdr_sum != fnv1a(FNV_INIT, sh,
	    offsetof(struct snap_hdr, sn_hdr_sum)))
		return bad(err, cap, SHMT_ECORRUPT, path, "header checksum "
		    "mismatch (the file is damaged)");
	if (sh->sn_format != shmt__format_word())
		return bad(err, cap, SHMT_EFORMAT, path, "written for segment "
		    "format %#" PRIx64 ", this build uses %#" PRIx64,
		    sh->sn_format, shmt__format_word());
	if (sh->sn_size < sizeof(struct shmt_hdr) ||
	    sh->sn_size != fsize - sizeof(*sh))
		return bad(err, cap, SHMT_ECORRUPT, path, "truncated or padded: "
		    "%" PRIu64 " bytes of image, the header says %" PRIu64,
		    fsize - sizeof(*sh), sh->sn_size);
	return 0;
}

/* Check the segment header inside the image IMG of SIZE bytes. */
static int
check_image(const unsigned char *img, uint64_t size, const char *path,
    char *err, size_t cap)
{
	const struct shmt_hdr *hdr = (const struct shmt_hdr *)(const void *)img;

	if (hdr->sh_magic != SHMT_MAGIC || hdr->sh_format != shmt__format_word() ||
	    hdr->sh_size != size || hdr->sh_nregions != SHMT_R_COUNT)
		return bad(err, cap, SHMT_ECORRUPT, path, "the image's segment "
		    "header is inconsistent");
	return 0;
}

/* Read and check PATH; on success *SH and *IMG (malloc'd) hold it. */
static int
read_snapshot(const char *path, struct snap_hdr *sh, unsigned char **img,
    char *err, size_t cap)
{
	struct stat st;
	unsigned char *buf = NULL;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		return rc == -ENOENT ? rc : bad(err, cap, rc, path, "%s",
		    strerror(-rc));
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = bad(err, cap, -EINVAL, path, "not a regular file");
		goto out;
	}
	if ((uint64_t)st.st_size < sizeof(*sh) ||
	    pread(fd, sh, sizeof(*sh), 0) != (ssize_t)sizeof(*sh)) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "truncated: %jd bytes, "
		    "shorter than its header", (intmax_t)st.st_size);
		goto out;
	}
	if ((rc = check_header(sh, (uint64_t)st.st_size, path, err, cap)) != 0)
		goto out;
	if ((buf = malloc(sh->sn_size)) == NULL) {
		rc = bad(err, cap, -ENOMEM, path, "no memory for %" PRIu64
		    " bytes", sh->sn_size);
		goto out;
	}
	if (pread(fd, buf, sh->sn_size, sizeof(*sh)) != (ssize_t)sh->sn_size) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "short read");
		goto out;
	}
	if (fnv1a(FNV_INIT, buf, sh->sn_size) != sh->sn_sum) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "image checksum mismatch "
		    "(the file is damaged)");
		goto out;
	}
	if ((rc = check_image(buf, sh->sn_size, path, err, cap)) != 0)
		goto out;
	*img = buf;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

int64_t
shmtd_snapshot_delta(uint64_t then_wall, uint64_t then_mono, uint64_t now_wall,
    uint64_t now_mono, int same_boot)
{
	uint64_t elapsed = now_wall > then_wall ? now_wall - then_wall : 0;

	if (same_boot)
		return 0;
	return (int64_t)(now_mono - then_mono - elapsed);
}

/* How far to move the image's monotonic times (see the top of the file). */
static int64_t
rebase_delta(const struct snap_hdr *sh)
{
	char now_boot[BOOT_ID_LEN];
	uint64_t wall = clock_ns(CLOCK_REALTIME), mono = clock_ns(CLOCK_MONOTONIC);

	boot_id(now_boot);
	return shmtd_snapshot_delta(sh->sn_wall_ns, sh->sn_mono_ns, wall, mono,
	    now_boot[0] != '\0' && strcmp(now_boot, sh->sn_boot_id) == 0);
}

static const enum shmt_region_id restored[] = { SHMT_R_LIMITERS, SHMT_R_ARENA };

/* Copy the state of IMG into the fresh segment T, then rebase its times. */
static int
fill(shmt_t *t, const unsigned char *img, const struct snap_hdr *sh,
    const char *path, char *err, size_t cap)
{
	const struct shmt_hdr *ih = (const struct shmt_hdr *)(const void *)img;
	struct shmt_hdr *th = t->hdr;
	int rc;

	for (int i = 0; i < SHMT_R_COUNT; i++)
		if (t->reg[i].rg_off != ih->sh_regions[i].rg_off ||
		    t->reg[i].rg_size != ih->sh_regions[i].rg_size)
			return bad(err, cap, SHMT_ECORRUPT, path, "region %d of "
			    "the image does not match its own parameters", i);
	/* Only the limiters and their arena come back.  Process slots and
	 * the daemon's fields belong to processes of the old segment, and no
	 * region that holds a mutex is copied: a robust mutex records its
	 * owner's thread id, which after a reboot may name a live, unrelated
	 * thread, so the lock would look held for ever. */
	for (size_t k = 0; k < sizeof(restored) / sizeof(restored[0]); k++) {
		const struct shmt_region *r = &t->reg[restored[k]];

		memcpy(t->base + r->rg_off, img + r->rg_off, r->rg_size);
	}
	th->sh_generation = ih->sh_generation + 1;
	th->sh_arena_used = ih->sh_arena_used;
	th->sh_nlimiters = ih->sh_nlimiters;
	th->sh_hk_runs = ih->sh_hk_runs;
	th->sh_reaped = ih->sh_reaped;
	if ((rc = shmt__rebase_times(t, rebase_delta(sh))) != 0)
		return bad(err, cap, rc, path, "cannot rebase its times: %s",
		    shmt_strerror(rc));
	return 0;
}

/* Build segment TMP from the image, then publish it as NAME. */
static int
build_and_publish(const char *tmp, const char *name, const unsigned char *img,
    const struct snap_hdr *sh, const char *path, char *err, size_t cap)
{
	const struct shmt_hdr *ih = (const struct shmt_hdr *)(const void *)img;
	char from[SHMT_SEGNAME_MAX + 80], to[SHMT_SEGNAME_MAX + 16];
	shmt_config_t c;
	shmt_t *t;
	int rc;

	shmt_config_init(&c);
	c.mode = (mode_t)(ih->sh_params.sp_mode & 0777);
	c.gid = (gid_t)ih->sh_params.sp_gid;
	c.max_limiters = ih->sh_params.sp_max_limiters;
	c.max_slots = ih->sh_params.sp_max_slots;
	c.arena_bytes = ih->sh_params.sp_arena_bytes;
	c.dict_bytes = ih->sh_params.sp_dict_bytes;
	c.dict_shards = ih->sh_params.sp_dict_shards;
	c.dict_eviction = ih->sh_params.sp_dict_eviction;
	c.counters_bytes = ih->sh_params.sp_counters_bytes;
	c.counters_shards = ih->sh_params.sp_counters_shards;
	c.counters_subwindows = ih->sh_params.sp_counters_subwindows;
	c.counters_window_ns = ih->sh_params.sp_counters_window_ns;
	shmt_unlink(tmp); /* a leftover of a restore killed midway */
	if ((rc = shmt_create(tmp, &c, &t)) != 0)
		return bad(err, cap, rc, path, "cannot create segment %s: %s",
		    tmp, shmt_strerror(rc));
	rc = fill(t, img, sh, path, err, cap);
	snprintf(from, sizeof(from), "/dev/shm%s", tmp);
	snprintf(to, sizeof(to), "/dev/shm%s", name);
	if (rc == 0 && link(from, to) != 0) {
		rc = -errno;
		if (rc != -EEXIST)
			bad(err, cap, rc, path, "cannot publish %s: %s", name,
			    strerror(-rc));
	}
	shmt_close(t);
	shmt_unlink(tmp);
	return rc;
}

int
shmtd_snapshot_restore(const char *path, const char *name, shmt_t **out,
    char *err, size_t cap)
{
	char tmp[SHMT_SEGNAME_MAX + 64];
	struct snap_hdr sh;
	unsigned char *img = NULL;
	int rc;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.restore.%d", name,
	    (int)getpid()) > SHMT_SEGNAME_MAX)
		return bad(err, cap, -ENAMETOOLONG, path, "segment name %s is "
		    "too long to restore under a temporary name", name);
	if ((rc = read_snapshot(path, &sh, &img, err, cap)) != 0)
		return rc;
	rc = build_and_publish(tmp, name, img, &sh, path, err, cap);
	free(img);
	if (rc != 0)
		return rc;
	if ((rc = shmt_open(name, out)) != 0)
		return bad(err, cap, rc, path, "restored %s but cannot open it: "
		    "%s", name, shmt_strerror(rc));
	return 0;
}
