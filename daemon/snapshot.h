/* SPDX-License-Identifier: MIT */
/*
 * snapshot.h: the segment's state saved to a file and restored from it, so
 * that limits in flight, the dictionary, the windowed counters and the
 * analyzer's hot keys survive a restart and a reboot.  The image's format
 * is the library's (lib/image.c); this is the file around it.
 */
#ifndef SHMTD_SNAPSHOT_H
#define SHMTD_SNAPSHOT_H

#include "shmthrottle.h"

#include <stddef.h>
#include <stdint.h>

/*
 * shmtd_snapshot_write: save the segment of H to PATH atomically (a
 * temporary file in the same directory, fsync, rename, fsync of the
 * directory).  Something at PATH that is neither a regular file nor a
 * symbolic link (a FIFO, a directory) is refused (-EINVAL, -EISDIR), and
 * the temporary file is created without following links or blocking.
 * Returns 0 or -errno, with ERR saying what failed.
 */
int shmtd_snapshot_write(shmt_t *h, const char *path, char *err, size_t cap);

/*
 * shmtd_snapshot_restore: create segment NAME from the snapshot PATH and
 * attach to it (*OUT).  The segment is built and rebased under a private
 * name and published with one link(2), so no worker ever sees it half
 * restored.  PATH is opened without blocking and must be a regular file
 * (a FIFO, a device or a directory is refused: -EINVAL, -EISDIR).  The
 * restored segment is checked with shmt_check while still private; any
 * problem refuses it (SHMT_ECORRUPT, ERR listing the problems) and nothing
 * is published.  Returns 0; -ENOENT when PATH does not exist; -EEXIST when
 * NAME appeared meanwhile; SHMT_ECORRUPT (bad checksum, truncated,
 * inconsistent, fails the check), SHMT_EFORMAT (made by another build) or
 * another negative errno, with ERR saying what is wrong.
 */
int shmtd_snapshot_restore(const char *path, const char *name, shmt_t **out,
    char *err, size_t cap);

/*
 * shmtd_snapshot_restore_note: shmtd_snapshot_restore, that also says in
 * NOTE (NOTECAP bytes; empty when nothing was migrated) what it migrated
 * when PATH holds the image of a segment of an older format (ABI 7 or 6):
 * that image is rewritten in this build's format first (lib/migrate.c),
 * then restored as any other.  An image of any other format is refused
 * (SHMT_EFORMAT) as shmtd_snapshot_restore refuses it.
 */
int shmtd_snapshot_restore_note(const char *path, const char *name,
    shmt_t **out, char *note, size_t notecap, char *err, size_t cap);

/*
 * shmtd_snapshot_check_clock: the clock the check of a restored image
 * reads (NULL: CLOCK_MONOTONIC, as the daemon always uses).  A test knob:
 * a test whose segment lives on an injected clock restores it with that
 * clock, so its times are judged against the clock that wrote them.  Not
 * thread-safe; set it before restoring.
 */
void shmtd_snapshot_check_clock(shmt_clock_fn fn, void *ctx);

/*
 * shmtd_snapshot_host_time: what the snapshot code takes for the host's
 * clocks and boot id (lib/daemon.h, struct shmt__host_time) when it writes
 * (RESTORING 0) or restores (1); NULL: the real ones.  A test knob, to
 * make a restore look like one after a reboot some wall time later.  Not
 * thread-safe; set it before writing or restoring.
 */
struct shmt__host_time;
typedef void (*shmtd_host_time_fn)(int restoring, struct shmt__host_time *t);
void shmtd_snapshot_host_time(shmtd_host_time_fn fn);

/*
 * shmtd_snapshot_delta: how far a monotonic time of the snapshot's boot
 * must move to mean the same instant on this boot: 0 on the same boot,
 * else now_mono - (then_mono + elapsed), elapsed = now_wall - then_wall
 * taken as 0 when the wall clock went back (uses then stay held longer,
 * never shorter).
 */
int64_t shmtd_snapshot_delta(uint64_t then_wall, uint64_t then_mono,
    uint64_t now_wall, uint64_t now_mono, int same_boot);

#endif /* SHMTD_SNAPSHOT_H */
