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
#include "util.h"

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
#define SNAP_VERSION 2U
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
	uint64_t sn_arena_bytes;       /* of which the arena's used part */
	uint64_t sn_sum;               /* FNV-1a 64 of the image */
	uint64_t sn_hdr_sum;           /* FNV-1a 64 of the fields above */
};
_Static_assert(sizeof(struct snap_hdr) == 112, "no hidden padding");

/*
 * The file holds the segment image in three pieces, in this order: the
 * header region, the limiter table, and the used part of the arena (a bump
 * allocator: the rest is zeros).  Slots, the dictionary and the counters
 * are left out: they are not restored (see fill()), and leaving them out
 * keeps a snapshot as small as the limiters' state.  The header piece
 * holds the segment's secret (the key of its hashes), which is one more
 * reason the file is created 0600.
 */
enum { P_HEADER, P_LIMITERS, P_ARENA, P_COUNT };

struct piece {
	uint64_t off, len;
};

static void
pieces_of(const struct shmt_region *reg, uint64_t arena_used,
    struct piece p[P_COUNT])
{
	p[P_HEADER] = (struct piece){ reg[SHMT_R_HEADER].rg_off,
		reg[SHMT_R_HEADER].rg_size };
	p[P_LIMITERS] = (struct piece){ reg[SHMT_R_LIMITERS].rg_off,
		reg[SHMT_R_LIMITERS].rg_size };
	p[P_ARENA] = (struct piece){ reg[SHMT_R_ARENA].rg_off, arena_used };
}

typedef unsigned __int128 u128;

static uint64_t
pieces_sum(const unsigned char *img, const struct piece p[P_COUNT])
{
	uint64_t h = SHMT_FNV_INIT;

	for (int i = 0; i < P_COUNT; i++)
		h = shmt__fnv1a_words(h, img + p[i].off, p[i].len);
	return h;
}

static void
boot_id(char out[BOOT_ID_LEN])
{
	memset(out, 0, BOOT_ID_LEN);
	if (shmt__proc_read("/proc/sys/kernel/random/boot_id", out,
	    BOOT_ID_LEN) != 0)
		memset(out, 0, BOOT_ID_LEN);
	out[strcspn(out, "\n")] = '\0';
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
copy_range(const shmt_t *h, unsigned char *dst, uint64_t off, uint64_t len)
{
	const u128 *src = (const u128 *)(const void *)(h->base + off);

	for (uint64_t i = 0; i < len / sizeof(u128); i++) {
		u128 v = __atomic_load_n(&src[i], __ATOMIC_RELAXED);

		memcpy(dst + off + i * sizeof(u128), &v, sizeof(v));
	}
}

/*
 * Copy the pieces of the image.  The limiter table goes first, the arena's
 * fill level is read after it: a row that is ready in the copy had its
 * storage allocated before it was published, so that storage lies below
 * the level read and is copied too.
 */
static void
copy_image(const shmt_t *h, unsigned char *img, struct piece p[P_COUNT])
{
	uint64_t size = h->reg[SHMT_R_ARENA].rg_size & ~(uint64_t)15;
	uint64_t used;

	copy_range(h, img, h->reg[SHMT_R_LIMITERS].rg_off,
	    h->reg[SHMT_R_LIMITERS].rg_size);
	used = __atomic_load_n(&h->hdr->sh_arena_used, __ATOMIC_ACQUIRE);
	used = (used + 15) & ~(uint64_t)15;
	if (used > size)
		used = size;
	copy_range(h, img, 0, h->reg[SHMT_R_HEADER].rg_size);
	copy_range(h, img, h->reg[SHMT_R_ARENA].rg_off, used);
	pieces_of(h->reg, used, p);
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

/* What kind of file MODE is, for messages. */
static const char *
file_kind(mode_t mode)
{
	return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" :
	    S_ISCHR(mode) ? "a character device" :
	    S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" :
	    S_ISLNK(mode) ? "a symbolic link" : S_ISREG(mode) ?
	    "a regular file" : "not a file";
}

int
shmtd_snapshot_write(shmt_t *h, const char *path, char *err, size_t cap)
{
	char tmp[PATH_MAX];
	struct snap_hdr sh;
	struct piece p[P_COUNT];
	unsigned char *img = NULL;
	const char *what = "write";
	struct stat st;
	int fd = -1, rc = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path,
	    (int)shmt__env_pid()) >= sizeof(tmp)) {
		snprintf(err, cap, "snapshot %s: path too long", path);
		return -ENAMETOOLONG;
	}
	/* Only a regular file (or a symbolic link, which rename replaces) is
	 * ever replaced: anything else at PATH is the operator's mistake. */
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISLNK(st.st_mode)) {
		snprintf(err, cap, "snapshot %s: not a regular file (%s)", path,
		    file_kind(st.st_mode));
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	/* calloc: the pages left out are never touched. */
	if ((img = calloc(1, h->size)) == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	memset(&sh, 0, sizeof(sh));
	copy_image(h, img, p);
	sh.sn_mono_ns = shmt__clock_ns(CLOCK_MONOTONIC);
	sh.sn_wall_ns = shmt__clock_ns(CLOCK_REALTIME);
	sh.sn_magic = SNAP_MAGIC;
	sh.sn_version = SNAP_VERSION;
	sh.sn_hdr_size = sizeof(sh);
	sh.sn_format = shmt__format_word();
	boot_id(sh.sn_boot_id);
	sh.sn_size = p[P_HEADER].len + p[P_LIMITERS].len + p[P_ARENA].len;
	sh.sn_arena_bytes = p[P_ARENA].len;
	sh.sn_sum = pieces_sum(img, p);
	sh.sn_hdr_sum = shmt__fnv1a(SHMT_FNV_INIT, &sh,
	    offsetof(struct snap_hdr, sn_hdr_sum));

	/* The temporary name is ours: whatever else sits there (a FIFO, a
	 * link) is refused instead of blocking or being followed. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW |
	    O_NONBLOCK | O_NOCTTY, 0600);
	if (fd < 0) {
		rc = -errno;
		what = "create";
		goto out;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		what = "create a regular file at";
		goto out;
	}
	rc = write_all(fd, &sh, sizeof(sh));
	for (int i = 0; i < P_COUNT && rc == 0; i++)
		rc = write_all(fd, img + p[i].off, p[i].len);
	if (rc != 0)
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
	if (sh->sn_version != SNAP_VERSION)
		return bad(err, cap, SHMT_EFORMAT, path, "snapshot version %u, "
		    "this build reads version %u", sh->sn_version, SNAP_VERSION);
	if (sh->sn_hdr_size != sizeof(*sh))
		return bad(err, cap, SHMT_ECORRUPT, path, "header of %u bytes, "
		    "version %u has %zu", sh->sn_hdr_size, SNAP_VERSION,
		    sizeof(*sh));
	if (sh->sn_hdr_sum != shmt__fnv1a(SHMT_FNV_INIT, sh,
	    offsetof(struct snap_hdr, sn_hdr_sum)))
		return bad(err, cap, SHMT_ECORRUPT, path, "header checksum "
		    "mismatch (the file is damaged)");
	if (sh->sn_format != shmt__format_word())
		return bad(err, cap, SHMT_EFORMAT, path, "written for segment "
		    "format %#" PRIx64 ", this build uses %#" PRIx64,
		    sh->sn_format, shmt__format_word());
	if (sh->sn_size != fsize - sizeof(*sh))
		return bad(err, cap, SHMT_ECORRUPT, path, "truncated or padded: "
		    "%" PRIu64 " bytes of image, the header says %" PRIu64,
		    fsize - sizeof(*sh), sh->sn_size);
	return 0;
}

/* Check the segment header HDR that opens the image of SH, and that the
 * pieces it implies are what the file holds. */
static int
check_image(const struct shmt_hdr *hdr, const struct snap_hdr *sh,
    struct piece p[P_COUNT], const char *path, char *err, size_t cap)
{
	uint64_t end = 0;

	if (hdr->sh_magic != SHMT_MAGIC || hdr->sh_format != shmt__format_word() ||
	    hdr->sh_nregions != SHMT_R_COUNT)
		return bad(err, cap, SHMT_ECORRUPT, path, "the image's segment "
		    "header is inconsistent");
	for (int i = 0; i < SHMT_R_COUNT; i++) {
		const struct shmt_region *r = &hdr->sh_regions[i];

		if (r->rg_off < end || r->rg_off > hdr->sh_size ||
		    r->rg_size > hdr->sh_size - r->rg_off || r->rg_off % 16 != 0)
			return bad(err, cap, SHMT_ECORRUPT, path, "region %d of "
			    "the image lies outside it", i);
		end = r->rg_off + r->rg_size;
	}
	pieces_of(hdr->sh_regions, sh->sn_arena_bytes, p);
	if (p[P_HEADER].off != 0 || p[P_HEADER].len < sizeof(*hdr) ||
	    p[P_HEADER].len % 16 != 0 || p[P_LIMITERS].len % 16 != 0 ||
	    sh->sn_arena_bytes > hdr->sh_regions[SHMT_R_ARENA].rg_size ||
	    p[P_HEADER].len + p[P_LIMITERS].len + p[P_ARENA].len != sh->sn_size)
		return bad(err, cap, SHMT_ECORRUPT, path, "its pieces do not add "
		    "up to the image's layout");
	return 0;
}

/* Check the pieces of BUF.  The file keeps them packed (header region,
 * limiter table, used arena) and they are copied from there into the new
 * segment: no image of the whole segment is ever allocated, so a header
 * that claims a huge segment costs nothing before shmt_create judges its
 * parameters. */
static int
unpack(const unsigned char *buf, const struct snap_hdr *sh, const char *path,
    char *err, size_t cap)
{
	const struct shmt_hdr *hdr = (const struct shmt_hdr *)(const void *)buf;
	struct piece p[P_COUNT];

	if (sh->sn_size < sizeof(*hdr))
		return bad(err, cap, SHMT_ECORRUPT, path, "image shorter than "
		    "a segment header");
	return check_image(hdr, sh, p, path, err, cap);
}

/* Read and check PATH; on success *SH and *IMG (malloc'd) hold it. */
static int
read_snapshot(const char *path, struct snap_hdr *sh, unsigned char **img,
    char *err, size_t cap)
{
	struct stat st;
	unsigned char *buf = NULL;
	int fd, rc;

	/* O_NONBLOCK: a FIFO (or a device) at PATH must not block the open
	 * for ever; whatever it is, it is refused right after. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		return rc == -ENOENT ? rc : bad(err, cap, rc, path, "%s",
		    strerror(-rc));
	}
	if (fstat(fd, &st) != 0) {
		rc = bad(err, cap, -errno, path, "cannot stat: %s",
		    strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = bad(err, cap, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
		    path, "not a regular file (%s)", file_kind(st.st_mode));
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
	if ((buf = malloc(sh->sn_size > 0 ? sh->sn_size : 1)) == NULL) {
		rc = bad(err, cap, -ENOMEM, path, "no memory for %" PRIu64
		    " bytes", sh->sn_size);
		goto out;
	}
	if (pread(fd, buf, sh->sn_size, sizeof(*sh)) != (ssize_t)sh->sn_size) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "short read");
		goto out;
	}
	if (shmt__fnv1a_words(SHMT_FNV_INIT, buf, sh->sn_size) != sh->sn_sum) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "image checksum mismatch "
		    "(the file is damaged)");
		goto out;
	}
	rc = unpack(buf, sh, path, err, cap);
out:
	if (rc == 0)
		*img = buf;
	else
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
	uint64_t wall = shmt__clock_ns(CLOCK_REALTIME);
	uint64_t mono = shmt__clock_ns(CLOCK_MONOTONIC);

	boot_id(now_boot);
	return shmtd_snapshot_delta(sh->sn_wall_ns, sh->sn_mono_ns, wall, mono,
	    now_boot[0] != '\0' && strcmp(now_boot, sh->sn_boot_id) == 0);
}

/* Copy the state of IMG (the file's packed pieces) into the fresh segment
 * T, then rebase its times. */
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
	 * region that holds a lock is copied: a lock word records its
	 * owner's thread id, which after a reboot may name a live, unrelated
	 * thread, so the lock would look held for ever. */
	/* The file's pieces, packed: the header region, the limiter table,
	 * the used arena (checked by check_image to add up to the image). */
	memcpy(t->base + t->reg[SHMT_R_LIMITERS].rg_off,
	    img + t->reg[SHMT_R_HEADER].rg_size,
	    t->reg[SHMT_R_LIMITERS].rg_size);
	memcpy(t->base + t->reg[SHMT_R_ARENA].rg_off,
	    img + t->reg[SHMT_R_HEADER].rg_size +
	    t->reg[SHMT_R_LIMITERS].rg_size, sh->sn_arena_bytes);
	/* The snapshot's secret, not the fresh one shmt_create made: the
	 * per-client tables in the arena hold hashes keyed with it, and T is
	 * not yet published under its name (build_and_publish). */
	shmt__secret_set(t, ih->sh_secret);
	th->sh_generation = ih->sh_generation + 1;
	th->sh_arena_used = sh->sn_arena_bytes;
	th->sh_nlimiters = ih->sh_nlimiters;
	th->sh_hk_runs = ih->sh_hk_runs;
	th->sh_reaped = ih->sh_reaped;
	if ((rc = shmt__rebase_times(t, rebase_delta(sh))) != 0)
		return bad(err, cap, rc, path, "cannot rebase its times: %s",
		    shmt_strerror(rc));
	return 0;
}

/* The problems shmt_check reports on a restored image, joined. */
struct problems {
	char text[768];
	size_t len;
	int count;
};

static void
collect(void *ctx, const char *problem)
{
	struct problems *pr = ctx;

	pr->count++;
	if (pr->len + 1 >= sizeof(pr->text))
		return;
	pr->len += (size_t)snprintf(pr->text + pr->len,
	    sizeof(pr->text) - pr->len, "%s%s", pr->len > 0 ? "; " : "",
	    problem);
	if (pr->len >= sizeof(pr->text))
		pr->len = sizeof(pr->text) - 1;
}

static shmt_clock_fn check_clock_fn;
static void *check_clock_ctx;

void
shmtd_snapshot_check_clock(shmt_clock_fn fn, void *ctx)
{
	check_clock_fn = fn;
	check_clock_ctx = ctx;
}

/* Check the restored segment T while it is still private, with the
 * library's own checker: a snapshot whose checksums are right but whose
 * state is not (written by a damaged segment, or crafted) is refused,
 * never published. */
static int
check_restored(shmt_t *t, const char *path, char *err, size_t cap)
{
	struct problems pr;
	int n;

	memset(&pr, 0, sizeof(pr));
	if (check_clock_fn != NULL &&
	    (n = shmt_set_clock(t, check_clock_fn, check_clock_ctx)) != 0)
		return bad(err, cap, n, path, "cannot set the check's clock: %s",
		    shmt_strerror(n));
	n = shmt_check(t, collect, &pr);
	if (n < 0)
		return bad(err, cap, n, path, "cannot check the restored "
		    "image: %s", shmt_strerror(n));
	if (n == 0)
		return 0;
	return bad(err, cap, SHMT_ECORRUPT, path, "the restored image fails "
	    "its check (%d problem%s): %s", n, n == 1 ? "" : "s", pr.text);
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
	c.analyzer_bytes = ih->sh_params.sp_analyzer_bytes;
	c.analyzer_window_ns = ih->sh_params.sp_analyzer_window_ns;
	c.analyzer_subwindows = ih->sh_params.sp_analyzer_subwindows;
	c.analyzer_threshold_ppm = ih->sh_params.sp_analyzer_threshold_ppm;
	c.analyzer_clients = ih->sh_params.sp_analyzer_clients;
	c.dict_max_key = ih->sh_params.sp_dict_max_key;
	c.dict_max_value = ih->sh_params.sp_dict_max_value;
	c.dict_default_ttl_ms = ih->sh_params.sp_dict_default_ttl_ms;
	shmt_unlink(tmp); /* a leftover of a restore killed midway */
	if ((rc = shmt_create(tmp, &c, &t)) != 0)
		return bad(err, cap, rc, path, "cannot create segment %s: %s",
		    tmp, shmt_strerror(rc));
	rc = fill(t, img, sh, path, err, cap);
	if (rc == 0)
		rc = check_restored(t, path, err, cap);
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
	    (int)shmt__env_pid()) > SHMT_SEGNAME_MAX)
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
