/* SPDX-License-Identifier: MIT */
/*
 * Snapshots: the segment's image (lib/image.c: its format, how it is taken
 * and checked, and how a segment is rebuilt from it) kept in a file.  This
 * file holds the file's side only: where it goes, how it is replaced
 * atomically and durably, what may stand at its path, and the test knobs.
 */
#include "snapshot.h"

#include "daemon.h"

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

static shmtd_host_time_fn host_time_fn;

void
shmtd_snapshot_host_time(shmtd_host_time_fn fn)
{
	host_time_fn = fn;
}

/* The host's clocks and boot, or what the test knob says they are. */
static void
host_time(int restoring, struct shmt__host_time *t)
{
	if (host_time_fn != NULL)
		host_time_fn(restoring, t);
	else
		shmt__host_time_now(t);
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
	struct shmt__host_time now;
	unsigned char *img = NULL;
	const char *what = "write";
	struct stat st;
	size_t len = 0;
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
	host_time(0, &now);
	if ((rc = shmt__image_build(h, &now, &img, &len)) != 0) {
		snprintf(err, cap, "snapshot %s: cannot take the segment's "
		    "image: %s", path, shmt_strerror(rc));
		return rc;
	}
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
	if ((rc = write_all(fd, img, len)) != 0)
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
		snprintf(err, cap, "snapshot: cannot %s %s: %s", what, tmp,
		    strerror(-rc));
	return rc;
}

/* ---- Restore ------------------------------------------------------------ */

static int
bad(char *err, size_t cap, int rc, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int
bad(char *err, size_t cap, int rc, const char *path, const char *fmt, ...)
{
	char what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(err, cap, "snapshot %s: %s", path, what);
	return rc;
}

/* Read PATH whole; on success *IMG (malloc'd) holds its *LEN bytes. */
static int
read_file(const char *path, unsigned char **img, size_t *len, char *err,
    size_t cap)
{
	struct stat st;
	unsigned char *buf = NULL;
	int fd, rc = 0;

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
	if ((uint64_t)st.st_size < SHMT_IMAGE_HDR_BYTES) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "truncated: %jd bytes, "
		    "shorter than its header", (intmax_t)st.st_size);
		goto out;
	}
	if ((uint64_t)st.st_size > SIZE_MAX / 2 ||
	    (buf = malloc((size_t)st.st_size)) == NULL) {
		rc = bad(err, cap, -ENOMEM, path, "no memory for %jd bytes",
		    (intmax_t)st.st_size);
		goto out;
	}
	if (pread(fd, buf, (size_t)st.st_size, 0) != (ssize_t)st.st_size) {
		rc = bad(err, cap, SHMT_ECORRUPT, path, "short read");
		goto out;
	}
	*len = (size_t)st.st_size;
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
	return shmt__image_delta(then_wall, then_mono, now_wall, now_mono,
	    same_boot);
}

static shmt_clock_fn check_clock_fn;
static void *check_clock_ctx;

void
shmtd_snapshot_check_clock(shmt_clock_fn fn, void *ctx)
{
	check_clock_fn = fn;
	check_clock_ctx = ctx;
}

int
shmtd_snapshot_restore_note(const char *path, const char *name, shmt_t **out,
    char *note, size_t notecap, char *err, size_t cap)
{
	struct shmt__host_time now;
	struct shmt__migration m;
	unsigned char *img = NULL, *imgn = NULL;
	char why[640];
	size_t len = 0, lenn = 0;
	int rc, abi;

	if (note != NULL && notecap > 0)
		note[0] = '\0';
	if ((rc = read_file(path, &img, &len, err, cap)) != 0)
		return rc;
	why[0] = '\0';
	abi = shmt__image_abi(img, len);
	if (shmt__abi_migrates(abi)) {
		/* An older format: rewritten in this one, then restored
		 * (and checked) as any image. */
		rc = shmt__image_migrate(img, len, &imgn, &lenn, &m, why,
		    sizeof(why));
		free(img);
		if (rc != 0)
			return bad(err, cap, rc, path, "cannot migrate it from "
			    "segment format ABI %d: %s", abi, why);
		img = imgn;
		len = lenn;
		if (note != NULL && notecap > 0)
			shmt__migration_text(&m, note, notecap);
	}
	host_time(1, &now);
	rc = shmt__image_restore(img, len, name, &now, check_clock_fn,
	    check_clock_ctx, why, sizeof(why));
	free(img);
	if (rc != 0) {
		if (note != NULL && notecap > 0)
			note[0] = '\0';
		return bad(err, cap, rc, path, "%s", why);
	}
	if ((rc = shmt_open(name, out)) != 0)
		return bad(err, cap, rc, path, "restored %s but cannot open it: "
		    "%s", name, shmt_strerror(rc));
	return 0;
}

int
shmtd_snapshot_restore(const char *path, const char *name, shmt_t **out,
    char *err, size_t cap)
{
	return shmtd_snapshot_restore_note(path, name, out, NULL, 0, err, cap);
}
