/* SPDX-License-Identifier: MIT */
/*
 * What only the daemon may call: claiming a segment as its one daemon, the
 * heartbeat and lag it publishes, the few facts of the format it names in
 * its messages, and the segment's image that its snapshots hold (image.c).  Private to libshmthrottle and shmthrottled; the daemon
 * includes this and the public header, nothing else of lib/.
 */
#ifndef SHMT_DAEMON_H
#define SHMT_DAEMON_H

#include "shmthrottle.h"
#include "util.h"

#include <stdint.h>
#include <sys/types.h>

/* The format word this build writes (layout.c). */
uint64_t shmt__format_word(void);
/* 0 when NAME is a valid segment name, else -EINVAL or -ENAMETOOLONG. */
int shmt__name_check(const char *name);
/* Start time of PID in clock ticks since boot, 0 when unknown (proc.c). */
uint64_t shmt__proc_start(pid_t pid);

/*
 * Claim H's segment for the daemon PID (START: its start time), atomically
 * with the pair {pid, start} as one 16-byte word, so that a second daemon
 * never reads a new pid beside an old start time.  Returns 0 (claimed;
 * *PREV gets the pid of a dead daemon taken over, or 0), -EBUSY (a live
 * daemon holds it; *PREV gets its pid), or -EAGAIN (the word kept changing
 * for 1000 tries).  kill -9 after the claim leaves the word naming a dead
 * process, which the next daemon takes over.
 */
int shmt__daemon_claim(shmt_t *h, pid_t pid, uint64_t start, uint64_t *prev);
/* Give the claim back, if the word still names PID and START. */
void shmt__daemon_unclaim(shmt_t *h, pid_t pid, uint64_t start);
/* Publish the daemon's heartbeat (the time NOW) and its housekeeping lag,
 * which the CLI and shmt_check read. */
void shmt__daemon_heartbeat(shmt_t *h, shmt_time_t now);
void shmt__daemon_lag(shmt_t *h, uint64_t lag_ns);

/* What the header of the object NAME says, read without validating it, to
 * explain a refusal: 0 when the whole header was read, -1 when only the
 * magic was, -errno when nothing could be. */
struct shmt__hdr_facts {
	uint64_t magic;
	uint64_t format;
	uint64_t size;                  /* the size the header claims */
	int64_t file_size;              /* the object's size */
	uint64_t want_magic;            /* what this build expects */
	unsigned abi;                   /* the ABI version this build writes */
};
int shmt__hdr_facts(const char *name, struct shmt__hdr_facts *f);

/* ---- Segment images: the snapshot format (image.c) ---------------------- */

#define SHMT_BOOT_ID_LEN 40
#define SHMT_IMAGE_HDR_BYTES 112

/* A limiter to define anew by a move: its name and its new definition
 * (shmt__move_redefine). */
struct shmt__redef {
	const char *name;
	const shmt_limit_t *limit;
};

/* Where and when an image is taken or restored: the host's clocks and the
 * boot it is on.  An empty boot id never matches another. */
struct shmt__host_time {
	uint64_t wall_ns;               /* CLOCK_REALTIME */
	uint64_t mono_ns;               /* CLOCK_MONOTONIC */
	char boot_id[SHMT_BOOT_ID_LEN]; /* /proc/sys/kernel/random/boot_id */
};
/* The host's clocks and boot id now. */
void shmt__host_time_now(struct shmt__host_time *t);

/* How far a monotonic time of the image's boot must move to mean the same
 * instant on this boot: 0 on the same boot, else now_mono - (then_mono +
 * elapsed), elapsed = now_wall - then_wall taken as 0 when the wall clock
 * went back (things stay held longer, never shorter). */
int64_t shmt__image_delta(uint64_t then_wall, uint64_t then_mono,
    uint64_t now_wall, uint64_t now_mono, int same_boot);

/*
 * Take the image of H's segment, stamped with NOW: the limiters' part,
 * every live dictionary item and counter (each shard copied under its
 * writer lock, which its writers wait for), the analyzer's summaries.
 * *IMAGE (malloc'd; the caller frees it) gets *LEN bytes.  Returns 0,
 * -EINVAL, -ENOMEM, SHMT_ECORRUPT (a shard holds more than its heap: run
 * shmthrottle check) or a shard lock's error.  Writers and readers of H
 * may run meanwhile; kill -9 in the middle leaves at most a shard lock
 * held by a dead process, which the next writer repairs.
 */
int shmt__image_build(shmt_t *h, const struct shmt__host_time *now,
    unsigned char **image, size_t *len);

/*
 * Build segment NAME from IMAGE (LEN bytes, untrusted: every length,
 * count and offset is checked), its times moved to NOW's boot, under a
 * private name; check it with shmt_check (on CLOCK, when not NULL, which
 * the private segment reads throughout: a test knob); publish it with one
 * link(2), so no process ever sees it half built.  Returns 0; -EEXIST
 * when NAME exists; SHMT_EMAGIC (not an image), SHMT_EFORMAT (another
 * build or version), SHMT_ECORRUPT (damaged, inconsistent, or it fails the
 * check) or another negative errno; ERR (CAP bytes) says why, without the
 * file's name.  kill -9 in the middle leaves at most the private segment
 * NAME.restore.PID, which the next restore by that pid removes.
 */
int shmt__image_restore(const unsigned char *image, size_t len,
    const char *name, const struct shmt__host_time *now, shmt_clock_fn clock,
    void *clock_ctx, char *err, size_t cap);

/*
 * Build, under the private name TMP, a segment from IMAGE (checked as for
 * shmt__image_restore) with the image's own parameters (WANT NULL) or with
 * WANT's (a move: the limiter rows in use and the used arena must fit,
 * else -ENOSPC with the size to keep), and check it.  *OUT gets the open,
 * unpublished segment (the caller publishes it under its name, closes it
 * and removes TMP).  Errors as shmt__image_restore; on error nothing is
 * left under TMP.  kill -9 in the middle leaves the object TMP.
 */
int shmt__image_rebuild(const unsigned char *image, size_t len,
    const char *tmp, const shmt_config_t *want,
    const struct shmt__redef *defs, size_t ndefs,
    const struct shmt__host_time *now, shmt_clock_fn clock, void *clock_ctx,
    shmt_t **out, char *err, size_t cap);

/* ---- Upgrades: images of an older segment format (migrate.c) ------------- */

/* The ABI version of the segment format IMAGE (LEN bytes) was taken from
 * (the top 16 bits of its format word), or -1 when it is no image. */
int shmt__image_abi(const unsigned char *image, size_t len);
/* 1 when this build migrates segments and images of ABI version ABI (an
 * older format: ABI 7 and ABI 6), else 0. */
int shmt__abi_migrates(int abi);

/* What a migration carried, for the daemon's log. */
struct shmt__migration {
	unsigned from_abi;
	uint32_t limiters;              /* ready rows carried */
	uint32_t deleted;               /* deleted rows (no storage) */
	uint32_t dropped;               /* rows a definition left half built */
	uint64_t inflight;              /* uses in flight carried (buckets
					 * mode: rate and exact mode keep
					 * times, carried as they are) */
	uint64_t clients;               /* live per-client entries carried */
	uint64_t dict_items, counters;  /* records of the image's sections */
	int analyzer;                   /* analyzer summaries carried */
	uint64_t arena_grown;           /* bytes the arena grew by */
	uint64_t arena_bytes;           /* the new segment's arena */
	int published;                  /* the new segment has the name
					 * (set even when an error follows) */
};

/*
 * Rewrite IMAGE (LEN bytes, untrusted), an image of a segment of an older
 * format (ABI 7 or ABI 6, told by its format word), as an image of this
 * build's format, the segment header's regions laid out again.  Of ABI 6:
 * limiter rows and their arena storage moved to this format's layout
 * (offsets rebased, client entries converted, per-client limiters given
 * an empty override table).  Of ABI 7: rows and arena carried as they are
 * (each READY row checked as a row of ABI 6 is, its override table
 * included; a row a definition left half built made free).  The
 * dictionary's, counters' and analyzer's sections carried as they are
 * (migrate.c says why each is safe).  *OUT (malloc'd; the caller frees
 * it) gets *OUTLEN bytes, to be restored with shmt__image_restore or
 * shmt__image_rebuild, which check the rest.  *M says what was carried.
 * Returns 0; SHMT_EMAGIC (not an image), SHMT_EFORMAT (not of ABI 7 or
 * ABI 6), SHMT_ECORRUPT (damaged: a length, count, offset or row that
 * does not hold), -ENOMEM, -EINVAL; ERR (CAP bytes) says why.  Pure
 * computation on private memory: thread-safe, and a kill -9 leaves
 * nothing behind.
 */
int shmt__image_migrate(const unsigned char *image, size_t len,
    unsigned char **out, size_t *outlen, struct shmt__migration *m,
    char *err, size_t cap);

/*
 * The image (as shmt__image_build makes one, of the segment's own format)
 * of the segment of ABI 7 or ABI 6 mapped at MAP (SIZE bytes, untrusted:
 * its header, regions, every chain and item are checked; its stores are
 * read with that format's shard geometry, hard-coded in migrate.c),
 * stamped NOW: the header, limiter table and used arena copied with
 * 16-byte atomic loads, every item and counter of its stores as a record
 * (their shards read without their locks: the caller freezes the segment
 * first), the analyzer's summaries.  *IMAGE (malloc'd) gets *LEN bytes.
 * Returns 0; SHMT_EMAGIC, SHMT_EFORMAT (not ABI 7 or ABI 6), SHMT_ESIZE,
 * SHMT_ECORRUPT, -ENOMEM; ERR says why.
 */
int shmt__segment_old_image(const unsigned char *map, uint64_t size,
    const struct shmt__host_time *now, unsigned char **image, size_t *len,
    char *err, size_t cap);

/*
 * Migrate the segment NAME of ABI 7 or ABI 6 in place (migrate.c gives the
 * protocol): freeze it as its version's own move does, wait for its writer
 * locks, take its image, rewrite it in this format, build and check the
 * new segment under a private name (on CLOCK when not NULL: a test knob),
 * publish it under NAME with rename(2), and retire the old object (its
 * old workers then answer SHMT_ESTALE, and SHMT_EFORMAT when they reopen
 * NAME).  *M says what was carried.  Returns 0; -EBUSY (its old daemon
 * still runs, another process migrates it, or a live worker kept a lock
 * for 2 s); SHMT_ESTALE (frozen by a live mover, or moved or retired: a
 * freeze left by a dead mover is first undone when NAME still names the
 * object, as the old version's recovery does); -EAGAIN (its freeze was
 * undone during the migration, before the rename: nothing published);
 * SHMT_EUNTRUSTED; the errors of shmt__segment_old_image,
 * shmt__image_migrate and shmt__image_rebuild.  On those errors the old
 * segment is left live as it was (M->published 0).  SHMT_ECORRUPT with
 * M->published 1: the new segment is published and the old one retired,
 * but its freeze was undone between the last check and the rename, so
 * uses granted by old workers in between may be lost.  Only for the
 * daemon, at start, before it opens NAME.  kill -9 in the middle: see
 * migrate.c.
 */
int shmt__segment_old_migrate(const char *name,
    const struct shmt__host_time *now, shmt_clock_fn clock, void *clock_ctx,
    struct shmt__migration *m, char *err, size_t cap);

/* One line for the log: what migration M carried. */
void shmt__migration_text(const struct shmt__migration *m, char *buf,
    size_t cap);

/*
 * Give each limiter DEFS[i].name of the private, unpublished segment T
 * (filled from an image, its per-client tables repaired) the definition
 * DEFS[i].limit, in new storage taken from T's free arena, with every use
 * in flight carried (redefine.c says how).  Only per-client limiters,
 * key pools in buckets mode, not global, shared exact limiters (their
 * log grown or shrunk to the new limit) and shared limiters going into
 * rate mode; another row, or a shared one going into buckets or exact
 * mode from another, gives -EOPNOTSUPP.
 * A key pool's definition without names (nkeys 0, keys NULL, with
 * uses_per_key) keeps its names.  Errors: -ENOENT (no such limiter),
 * -EINVAL (the definition breaks a rule, or changes what cannot change:
 * mode, per_client, a key pool), -ENOSPC (the arena cannot hold the new
 * storage, or a client holding uses finds no entry in the new table, or
 * more overrides are set than the new table holds), -E2BIG (a client
 * holds more uses than its new ring holds), SHMT_ECORRUPT; ERR (CAP
 * bytes) says which limiter and why.  T is left half changed on error: the caller
 * discards it.
 */
int shmt__redefine_apply(shmt_t *t, const struct shmt__redef *defs,
    size_t ndefs, char *err, size_t cap);

/* ---- Generations (move.c, where the protocol is argued) ------------------- */

/* How long a call waits for a live mover to finish before -EAGAIN. */
#define SHMT_MOVE_WAIT_NS 5000000000ULL

/*
 * Move H's segment into a new generation sized by WANT, published under
 * the same name, with every limiter (uses in flight and their release
 * times), dictionary item (with its expiry), counter and analyzer summary
 * carried.  WANT may change max_limiters (not below the rows in use),
 * max_slots, arena_bytes (not below the used part), the dictionary's and
 * the counters' bytes and shards, the eviction, the dictionary's largest
 * key and value (up only), mode and gid; the rest must stay (-EINVAL says
 * which).  CLOCK (may be NULL) is the new segment's clock while it is
 * built and checked (a test knob).  The new object keeps the old one's
 * owner uid, and its group and mode unless WANT changes them from those
 * the segment was made with: so only root, or the owner in that group,
 * may move it; anyone else gets -EPERM before anything changes.
 *
 * Returns 0: the name now holds the new generation and H's segment is
 * MOVED (every call on it answers SHMT_ESTALE; the caller reopens the
 * name).  Or an error, the move undone and H's segment LIVE again:
 * -EINVAL, -ENOSPC (the state does not fit the new sizes), -EPERM (the
 * caller is neither root nor the owner, or the owner outside the group),
 * SHMT_ESTALE (the segment was not live), -ENOMEM, a lock's error, an
 * image's error, fchown's or fchmod's error; ERR (CAP bytes) says why.
 *
 * Concurrency: workers in any process go on meanwhile; those that write
 * while the segment is frozen wait for the outcome (at most
 * SHMT_MOVE_WAIT_NS).  One mover at a time per segment (the limiter table's
 * lock).  The calling thread must make no other call on H meanwhile.
 *
 * kill -9 at any point leaves exactly one authoritative generation, the
 * one the name points to: before the rename the old one, FROZEN until
 * whoever finds it so with its mover dead (a waiting worker, shmt_open,
 * shmt__move_settle) undoes the freeze; after it the new one, and the old
 * one is marked MOVED by whoever finds it so.  A private object
 * NAME.move.PID may be left, removed by the undo.
 */
int shmt__move(shmt_t *h, const shmt_config_t *want, shmt_clock_fn clock,
    void *clock_ctx, char *err, size_t cap);

/*
 * shmt__move that also gives each limiter DEFS[i].name (NDEFS of them)
 * the definition DEFS[i].limit in the new generation, its uses in flight
 * carried (shmt__redefine_apply): the way to change a per-client limiter
 * or a key pool, which cannot change in place, or to give a shared exact
 * limiter a limit above its log.  Every change or none: on any error the
 * old generation stays authoritative and untouched, and ERR names the
 * limiter and the reason.  Errors as shmt__move and shmt__redefine_apply.
 * Concurrency and kill -9 as shmt__move.
 */
int shmt__move_redefine(shmt_t *h, const shmt_config_t *want,
    const struct shmt__redef *defs, size_t ndefs, shmt_clock_fn clock,
    void *clock_ctx, char *err, size_t cap);

/* The creation parameters of H's segment (its newest generation), as a
 * config a move starts from. */
void shmt__move_config(shmt_t *h, shmt_config_t *c);

/* 1 when WANT asks for other parameters than H's segment has (a move
 * would change something), else 0. */
int shmt__move_wanted(shmt_t *h, const shmt_config_t *want);

/* The handle of the newest generation H's segment moved to, opened and
 * linked after H when no call has done it yet (H when it did not move).
 * NULL when the segment was retired, or the new generation cannot be
 * opened (*RC says why).  The handles stay linked: shmt_close of the first
 * closes them all. */
shmt_t *shmt__move_follow(shmt_t *h, int *rc);

/*
 * Settle the segment NAME: when it is FROZEN by a mover that is dead,
 * finish or undo that move as above.  Waits up to WAIT_NS for a live
 * mover.  Returns 0 (NAME is live), SHMT_ESTALE (it is moved or retired:
 * open NAME again), -EAGAIN (a live mover still holds it), SHMT_EMAGIC or
 * -errno (no such segment).  kill -9 in the middle leaves nothing to undo.
 */
int shmt__move_settle(const char *name, uint64_t wait_ns);
/* The same, its sleeps hooked as HK's (shmt_set_sleep_hooks; NULL:
 * none). */
int shmt__move_settle_h(const char *name, uint64_t wait_ns,
    const shmt_t *hk);

/* ---- Global limiters (global.c, where the lease protocol is proved) -------- */

/* Lease slots per global limiter, and their states (the low two bits of a
 * slot's second word). */
#define SHMT_GL_SLOTS 2
enum { SHMT_GL_EMPTY = 0, SHMT_GL_OPEN = 1, SHMT_GL_CLOSED = 2 };
struct shmt_glease;

struct shmt__gref {
	struct shmt_glease *g;
	uint32_t *wake;              /* the row's waiters' word */
	const uint32_t *state;       /* the generation's state (sh_retired) */
	uint64_t limit, window, slack, slack_uses;
	uint32_t nkeys;              /* a key pool's names, or 0 */
};
/* Find the global limiter NAME in H and check its row: 0, -ENOENT (no
 * such limiter), -EPERM (not global), SHMT_ECORRUPT. */
int shmt__global_ref(shmt_t *h, const char *name, struct shmt__gref *ref);
/* Install a lease of CAP uses usable until DEADLINE (local ns) in slot I,
 * which must be EMPTY or CLOSED with an earlier deadline (or a damaged one,
 * more than the slack after NOW): 0, -EBUSY (slot open, or its deadline not
 * earlier), -EINVAL, SHMT_ECORRUPT.  BASE: the lease's first position on
 * the fleet's grant cursor (key pools; kept mod nkeys, ignored without a
 * pool).  Wakes the limiter's waiters. */
int shmt__global_install(const struct shmt__gref *r, unsigned i, uint32_t cap,
    uint64_t deadline, uint64_t base, uint64_t now);
/* Close slot I (OPEN -> CLOSED, one CAS, after which no grant succeeds)
 * and give its final count and cap: 1 closed now, 0 it was not open,
 * 2 closed, but the generation was frozen or moved meanwhile (a move may
 * have carried the slot still open, and the next generation's workers
 * grant from it: give nothing back), -EINVAL, SHMT_ECORRUPT.  *DEADLINE
 * gets the slot's deadline. */
int shmt__global_close(const struct shmt__gref *r, unsigned i, uint32_t *used,
    uint32_t *cap, uint64_t *deadline);
/* Read slot I without changing it. */
int shmt__global_read(const struct shmt__gref *r, unsigned i, uint32_t *state,
    uint32_t *used, uint32_t *cap, uint64_t *deadline);
/* Refusals counted by workers so far (uses asked and refused). */
uint64_t shmt__global_denied(const struct shmt__gref *r);
/* Publish what the CLI shows (the display fields of S, plus the retry
 * hint RETRY_AT, local ns). */
void shmt__global_publish(const struct shmt__gref *r,
    const shmt_global_stat_t *s, uint64_t retry_at, uint64_t now);


#endif /* SHMT_DAEMON_H */
