/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle.h: the whole public API of libshmthrottle.
 *
 * A named POSIX shared-memory segment holds rate limiters (a lock-free ring of
 * buckets or an exact sliding-window log per limiter), key pools, per-client
 * limiters and process slots; a sharded string -> string dictionary with
 * TTLs and eviction, read without locks, whose hot keys an embedded analyzer
 * reports; and windowed counters (shmt_hit).  Any number of processes map it at whatever address they get and call into it
 * directly; nothing in the segment is a pointer, every offset read from it is
 * checked against its size before use.
 *
 * Conventions
 * -----------
 * - Functions return 0 (or a count, or a length) on success and a negative
 *   value on failure: either -errno (e.g. -ENOENT) or one of the SHMT_E*
 *   codes below, which lie beyond every errno value.  shmt_strerror() names
 *   both.  errno itself is never changed by the library.
 * - Time is a shmt_time_t: nanoseconds of CLOCK_MONOTONIC, unless the handle
 *   was given its own clock with shmt_set_clock().
 * - A handle (shmt_t) may be shared by the threads of one process.  A child
 *   of fork() may keep using an inherited handle: its first call notices the
 *   fork and attaches with a slot of the child's own (see "Handles and
 *   fork()" below).
 *
 * Caveats
 * -------
 * - Processes that share a segment must share CLOCK_MONOTONIC, i.e. the same
 *   time namespace, and the same PID namespace (process slots and writer
 *   locks name their owners by pid and thread id): containers with their
 *   own time or PID namespace must not share a segment.
 * - A process killed with kill -9 leaves its slot behind until it is reaped
 *   (by the daemon, by shmt_housekeep(), or by the next shmt_open() that runs
 *   out of slots).  A stale slot costs memory only, never correctness.
 * - Without the daemon everything stays correct and live: callers release
 *   due buckets themselves.  The daemon only keeps what the CLI shows fresh.
 * - The segment is not persistent across a reboot unless the daemon
 *   snapshots it.
 *
 * Synchronization of the throttle (one limiter's state word W)
 * -------------------------------------------------------------
 *   operation   | who             | step on W                | waits on
 *   ------------+-----------------+--------------------------+---------
 *   grant       | any caller      | one CAS: decide + record | nothing
 *   seal        | any caller/dmn  | one CAS                  | nothing
 *   release     | any caller/dmn  | one CAS                  | nothing
 *   define      | any process     | under the table lock     | definers
 *   acquire k   | any caller      | one CAS: decide + record | nothing
 *   peek        | any caller      | none (loads only)        | nothing
 *   wait        | any caller      | as acquire; sleeps on    | a release,
 *               |                 | the row's futex word     | its retry time
 * A shared rate limiter's W holds its arrival time and its parameter
 * generation in one 16-byte word: a grant, and a refund, are one 16-byte
 * CAS on it.  A release that returns uses bumps the row's futex word and
 * wakes sleepers, with a system call only when one may sleep.
 * Every operation on W is lock-free: a CAS fails only because another one
 * succeeded.  On success a CAS is a full barrier (sequentially consistent);
 * on failure it acts as an acquire load of the current word.
 */
#ifndef SHMTHROTTLE_H
#define SHMTHROTTLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SHMT_STATIC)
#define SHMT_EXPORT
#elif defined(__GNUC__)
#define SHMT_EXPORT __attribute__((visibility("default")))
#else
#define SHMT_EXPORT
#endif

#define SHMT_VERSION_MAJOR 0
#define SHMT_VERSION_MINOR 1
#define SHMT_VERSION_PATCH 0
/* The version as one number, MAJOR * 10000 + MINOR * 100 + PATCH, that
 * compares in order (0.1.0 is 100). */
#define SHMT_VERSION_NUMBER \
	(SHMT_VERSION_MAJOR * 10000UL + SHMT_VERSION_MINOR * 100UL + \
	 SHMT_VERSION_PATCH)

/* Library-specific errors.  They lie beyond every errno value. */
#define SHMT_ERRBASE   (-3100)
#define SHMT_EMAGIC    (SHMT_ERRBASE - 1) /* object is not a shmthrottle segment */
#define SHMT_EFORMAT   (SHMT_ERRBASE - 2) /* format word (ABI/layout) differs */
#define SHMT_ESIZE     (SHMT_ERRBASE - 3) /* object size differs from header */
#define SHMT_ECORRUPT  (SHMT_ERRBASE - 4) /* header or region inconsistent */
#define SHMT_ENOTREG   (SHMT_ERRBASE - 5) /* object is not a regular shm object */
#define SHMT_EBUSYLOOP (SHMT_ERRBASE - 6) /* retry bound exhausted (damaged?) */
#define SHMT_ENOSLOT   (SHMT_ERRBASE - 7) /* process slot table is full */
#define SHMT_ELOCKED   (SHMT_ERRBASE - 8) /* lock held by a live process */
#define SHMT_EUNTRUSTED (SHMT_ERRBASE - 9) /* segment owner or mode untrusted */
#define SHMT_ENAMESPACE (SHMT_ERRBASE - 10) /* created in another PID/time namespace */
#define SHMT_ESTALE    (SHMT_ERRBASE - 11) /* segment removed: reopen it by name */
#define SHMT_ERRLAST   SHMT_ESTALE

/*
 * Every call on a handle follows its segment into a new generation when
 * the segment is moved to other sizes under it (shmthrottle resize, or the
 * daemon applying changed sizes; README "Growing the segment live"): the
 * call is retried there on the same handle, and the caller sees nothing.
 * While a move holds the segment frozen, a call that writes waits for its
 * outcome, at most 5 s, then answers -EAGAIN; so does a call that moves
 * made back to back outran (32 follows): try again.  SHMT_ESTALE is only
 * for a segment removed (shmt_unlink, shmthrottle destroy, or by hand).
 * A generation the library opened to follow a move is unmapped once no
 * thread of the process is inside a call any more that began before the
 * next one was linked (a library thread waits for that, with liburcu-bp);
 * the generation the handle was opened on stays mapped until shmt_close.
 */

/* Longest segment name, including the leading '/', excluding the NUL. */
#define SHMT_SEGNAME_MAX 200
/* Longest limiter name, excluding the NUL. */
#define SHMT_LIMITER_NAME_MAX 63
/* Longest key name of a key pool, excluding the NUL. */
#define SHMT_KEYNAME_MAX 255
/* Most key names in one key pool. */
#define SHMT_KEYS_MAX 65535
/* Longest client id accepted by shmt_try_use(). */
#define SHMT_CLIENT_MAX 1024
/* Largest limit (uses per window). */
#define SHMT_LIMIT_MAX 0x7fffffffULL
/* A global limiter's window_ns + slack_ns stays below this (2^60 ns, about
 * 36 years): the daemon's hold and deadlines, and Redis's script that
 * counts microseconds in doubles, stay exact. */
#define SHMT_GLOBAL_SPAN_MAX (1ULL << 60)
/* Largest limit in exact mode (it keeps one 16-byte record per use). */
#define SHMT_EXACT_LIMIT_MAX 1048576ULL
/* Most buckets in one ring, ceil(window/slack) + ceil(limit/slack_uses). */
#define SHMT_BUCKETS_MAX 32767U

/* Default segment name used by the daemon and the CLI. */
#define SHMT_DEFAULT_SEGMENT "/shmthrottle"

typedef struct shmt shmt_t;

/* Nanoseconds on CLOCK_MONOTONIC (or on the handle's injected clock). */
typedef uint64_t shmt_time_t;

/* A clock: returns the current time in nanoseconds.  It must never go
 * backwards for one handle; a step backwards is treated as no time passing. */
typedef shmt_time_t (*shmt_clock_fn)(void *ctx);

/*
 * Creation parameters of a segment.  Fill with shmt_config_init(), then
 * change what you need.  Every region's size is fixed at creation, so the
 * memory a segment takes is known up front and the hot path never allocates.
 */
typedef struct shmt_config {
	/* Permission bits of the object (default 0600).  Only the 0777 bits,
	 * never writable by others (0002): nobody would trust it. */
	mode_t mode;
	/* Group owner of the object, or (gid_t)-1 to keep the creator's. */
	gid_t gid;
	/* Rows in the limiter table (default 64, at most 4096). */
	uint32_t max_limiters;
	/* Process slots (default 256, at most 65536). */
	uint32_t max_slots;
	/* Bytes for limiter storage: bucket rings, exact logs, key pools and
	 * per-client tables (default 8 MiB, at least 64 KiB). */
	uint64_t arena_bytes;
	/* The dictionary: heap bytes in all (default 8 MiB), split evenly
	 * over dict_shards shards (default 4, a power of two, at most 1024).
	 * Each shard's heap is a power of two of at least 2 MiB, so that the
	 * largest item (1 KiB key + 1 MiB value) fits in every shard; 0 bytes
	 * means no dictionary.  Beside each heap lies its index, half its
	 * size: one 64-byte bucket per 128 heap bytes, each with a slot that
	 * holds one item of up to 32 bytes of key and value outside the heap
	 * (README, "The dictionary"). */
	uint64_t dict_bytes;
	uint32_t dict_shards;
	/* When a shard is full, expired items are freed first; then 1
	 * (default) evicts the least recently used, and 0 makes the write
	 * fail with -ENOSPC. */
	uint32_t dict_eviction;
	/* Windowed counters (shmt_hit): heap bytes (default 4 MiB, 0: none),
	 * shards (default 4) and the window (default 24 h).  The counters no
	 * longer keep sub-windows: counters_subwindows is still checked (1 to
	 * 256, default 24) so that configs that set it load, and changes
	 * nothing; the error is counters_error_ppm, at the end. */
	uint64_t counters_bytes;
	uint32_t counters_shards;
	uint32_t counters_subwindows;
	uint64_t counters_window_ns;
	/* The hot-key analyzer: bytes (default 1 MiB, 0: off), the window
	 * (default 60 s) counted in analyzer_subwindows sub-windows (default
	 * 12, at most 64), the threshold in parts per million of the window's
	 * requests (default 100000: 10%, at least 10000: 1%), and whether
	 * per-client limiter calls feed it too (default 0). */
	uint64_t analyzer_bytes;
	uint64_t analyzer_window_ns;
	uint32_t analyzer_subwindows;
	uint32_t analyzer_threshold_ppm;
	uint32_t analyzer_clients;
	/* Dictionary limits, stored in the segment and enforced by the library
	 * for every process that writes: the longest key (bytes, 1..
	 * SHMT_KEY_MAX; default and 0: SHMT_KEY_MAX) and the longest value
	 * (bytes, up to SHMT_VALUE_MAX; default and 0: SHMT_VALUE_MAX) that
	 * shmt_set, shmt_add, shmt_replace and shmt_incr accept, and the TTL in
	 * milliseconds that a write given TTL 0 gets (default 0: such items
	 * never expire; at most UINT64_MAX / 2000000). */
	uint32_t dict_max_key;
	uint32_t dict_max_value;
	uint64_t dict_default_ttl_ms;
	/* Windowed counters: the error eps of shmt_hit and shmt_count, in
	 * parts per million (default 10000: 1%; from 1000: 0.1%, to 500000:
	 * 50%; 0 stands for the default).  Every answer is within max(1, eps
	 * x the exact count), and exact while that count is at most
	 * k = ceil(2 / (3 eps)) (67 at 1%). */
	uint32_t counters_error_ppm;
} shmt_config_t;

/* shmt_config_init: fill *CFG with the defaults stated above (NULL: no-op).
 * No errors.  It writes *CFG alone (the caller's) and touches no segment:
 * thread-safe, and a kill -9 leaves nothing behind. */
SHMT_EXPORT void shmt_config_init(shmt_config_t *cfg);

/*
 * shmt_config_check: apply to CFG exactly the rules shmt_create applies to
 * its parameters (shmt_create calls it), without creating anything.
 * Returns 0, or -EINVAL when CFG is NULL or shmt_create would refuse it;
 * then WHY (WHY_LEN bytes, may be NULL) holds one NUL-terminated sentence
 * that starts with the field's name, a colon and the rule, e.g.
 * "dict_bytes: each shard needs at least 2 MiB (bytes / shards), room for
 * the largest item".  Only the first broken rule is named.  Pure: reads
 * CFG only, touches no segment, thread-safe; nothing to leave behind.
 * Passing it does not promise that shmt_create succeeds: the name, the
 * memory in /dev/shm and permissions are checked only there.
 */
SHMT_EXPORT int shmt_config_check(const shmt_config_t *cfg, char *why,
    size_t why_len);

/* ---- Errors ------------------------------------------------------------ */

/*
 * shmt_strerror: a static, constant description of any value this library
 * returns (a negative errno or a SHMT_E* code); "unknown error" for a value
 * it does not know.  Never NULL; the string is the library's (never free
 * it) and stays valid for the life of the process.  No errors; never
 * changes errno; thread-safe; it touches no segment, so a kill -9 leaves
 * nothing behind.
 */
SHMT_EXPORT const char *shmt_strerror(int err);

/* ---- Versions ------------------------------------------------------------ */

/*
 * shmt_version: the version of the library that runs, "MAJOR.MINOR.PATCH"
 * (a static string, never NULL).  shmt_version_number: the same as
 * SHMT_VERSION_NUMBER computes it.  A program compiled with this header
 * compares them with SHMT_VERSION_* to tell the library it runs with from
 * the one it was built against.  Thread-safe; no errors; they touch no
 * segment, so a kill -9 leaves nothing behind.
 * The segment's format has its own version: the format word and ABI
 * version of shmt_segment_stat().
 */
SHMT_EXPORT const char *shmt_version(void);
SHMT_EXPORT unsigned long shmt_version_number(void);

/* ---- The segment ------------------------------------------------------- */

/*
 * shmt_create: create the segment NAME with parameters CFG (NULL: defaults)
 * and return a handle attached to it in *OUT.
 *
 * NAME has one leading '/', no other '/', and at most SHMT_SEGNAME_MAX bytes.
 * The object is built under a private temporary name and published with one
 * atomic link(2), so no process ever sees a half-built segment, and of two
 * processes creating the same name at once exactly one gets 0 and the other
 * -EEXIST (the segment it then finds is complete; shmt_open() attaches).
 *
 * Every segment gets a secret: 16 random bytes from getrandom(2), the key
 * of every hash an outsider can feed (client ids, dictionary and counter
 * keys, the analyzer's keys), so that no one without access to the segment
 * can choose inputs that collide in it.  It is kept in the header and in
 * the daemon's snapshots, and is shown by no function of this header.  The
 * call may block until the kernel's random pool is first initialised.
 *
 * Errors: -EINVAL (bad name, or parameters that shmt_config_check refuses:
 * it names the rule), -ENAMETOOLONG, -EEXIST, -ENOMEM,
 * -ENOSPC (no room in /dev/shm), -EACCES/-EPERM (mode or gid refused),
 * -ENOSYS (the kernel has no getrandom(2)), SHMT_ENOSLOT.  On error nothing
 * is left behind and *OUT is untouched.
 * Ownership: on success *OUT is the caller's, to be closed with shmt_close
 * (which never removes the segment: shmt_unlink does).  CFG is read during
 * the call only.
 * Concurrency: thread-safe; any number of processes may create at once
 * (one wins a name, as above).
 * kill -9 during the call leaves at most a temporary object named
 * "NAME.tmp.PID.N" in /dev/shm, never a half-built NAME; once NAME is
 * published it is complete (a slot the creator claimed in it is then a
 * stale slot, see Caveats).
 */
SHMT_EXPORT int shmt_create(const char *name, const shmt_config_t *cfg,
    shmt_t **out);

/*
 * shmt_open: attach to the existing segment NAME.  Checks that the object
 * can be trusted (see shmt_open_opts), reads its header once into private
 * memory and validates that copy (regular file, size, magic, format word,
 * every region inside the object, the creation parameters against the
 * regions) before mapping it; everything the handle uses comes from that
 * copy, so a header changed meanwhile gives an error or the geometry that
 * was validated, never a mix.  Claims a process slot.  The handle keeps
 * the object open (one file descriptor, close-on-exec) to notice a
 * truncation (shmt_check, shmt_segment_stat).  The segment's secret (see
 * shmt_create) is copied into the handle here, once: the handle hashes
 * with that copy until it is closed.
 *
 * Errors: -EINVAL, -ENAMETOOLONG, -ENOENT (no such segment), -EACCES,
 * -ELOOP (the name is a symbolic link: never followed), -ENOMEM,
 * SHMT_ENOTREG, SHMT_EUNTRUSTED, SHMT_EMAGIC, SHMT_EFORMAT, SHMT_ESIZE
 * (also: shorter than its header says, i.e. truncated), SHMT_ECORRUPT,
 * SHMT_ENOSLOT, SHMT_ENAMESPACE (the segment was created in another PID or
 * time namespace: its slots name processes by pid and its times are
 * CLOCK_MONOTONIC, so all its processes must share both; not compared
 * where /proc cannot tell), SHMT_ESTALE (removed as it was opened),
 * -EAGAIN (a move of the segment into a new generation outlasted the
 * wait, see above: try again).  On error *OUT is untouched.
 * Ownership: on success *OUT is the caller's, to be closed with
 * shmt_close (a child of fork() may use it too: "Handles and fork()").
 * Concurrency: thread-safe; any number of processes may open one segment
 * at once (each claims its slot with one CAS).  A segment frozen by a
 * mover that died is settled here first, as by any process that finds it
 * so (the move finished or undone by one CAS).
 * kill -9 during the call leaves at most a slot claimed for the dead
 * process, a stale slot (see Caveats); a move it was settling is settled
 * by the next process that finds the segment frozen.
 */
SHMT_EXPORT int shmt_open(const char *name, shmt_t **out);

/* Options of shmt_open_opts.  Fill with shmt_open_opts_init(). */
typedef struct shmt_open_options {
	/* Trust a segment owned by this user too ((uid_t)-1, the default:
	 * nobody beyond the rules below). */
	uid_t owner;
	uint32_t reserved[7];    /* zero */
} shmt_open_opts_t;

/* shmt_open_opts_init: fill *OPTS with the defaults (owner (uid_t)-1,
 * reserved zero); NULL is a no-op.  No errors.  It writes *OPTS alone (the
 * caller's) and touches no segment: thread-safe, and a kill -9 leaves
 * nothing behind. */
SHMT_EXPORT void shmt_open_opts_init(shmt_open_opts_t *opts);

/*
 * shmt_open_opts: shmt_open with options (OPTS NULL: the defaults).
 *
 * Whoever can write the object can forge its contents and truncate it
 * (which kills every attached process with SIGBUS), so an object is only
 * attached when its writers are trusted:
 * - an object that every user may write (mode o+w) is refused;
 * - an object owned by the effective user, by root, or by OPTS->owner is
 *   trusted;
 * - a caller other than root also trusts an object whose group is one of
 *   its groups (effective or supplementary) and which that group may write:
 *   it shares the object with that group already (workers in the daemon's
 *   group attach a 0660 segment owned by the daemon's user this way).
 *   Root trusts no group: a privileged process names the owner it trusts.
 * Anything else gives SHMT_EUNTRUSTED before a byte of the object is read.
 * The handle keeps OPTS->owner: when the segment moves into a new
 * generation (which keeps the object's owner, group and mode), the handle
 * opens that generation trusting the same owner.
 * Errors: those of shmt_open.  OPTS is read during the call only; on
 * success *OUT is the caller's, to be closed with shmt_close.
 * Thread-safe.  kill -9 during the call leaves at most a stale slot of the
 * dead process, and a move it was settling to the next process that finds
 * the segment frozen, as for shmt_open.
 */
SHMT_EXPORT int shmt_open_opts(const char *name, const shmt_open_opts_t *opts,
    shmt_t **out);

/*
 * shmt_close: release the process slot, unmap, free the handle (and close
 * its file descriptor).  On an object truncated meanwhile the slot is left
 * alone (its page is gone).  NULL is a no-op.  No other thread may use H during or after the call.  It never
 * removes the segment.  kill -9 instead of close leaves a stale slot (see
 * Caveats).
 */
SHMT_EXPORT void shmt_close(shmt_t *h);

/*
 * Handles and fork(): a handle opened before fork() may be used in the
 * child.  Its next call there (any call that takes a limiter, the
 * dictionary, the counters or the analyzer) notices the fork without a
 * system call (a generation counter bumped by a pthread_atfork child
 * handler, compared with the handle's) and transparently reattaches: the
 * handle claims a process slot of its own under the child's pid and goes
 * on; the parent's slot stays the parent's, and shmt_close in the child
 * never releases it.  When no slot is free, that call returns SHMT_ENOSLOT
 * and changes nothing; the next call tries again.  A kill -9 of the child
 * after it reattached leaves a stale slot, like any process (see Caveats).
 * Threads of the child may race on the first call: one reattaches, the
 * others wait for it.  Only the thread that called fork() exists in the
 * child, so a call on the handle that was in progress in another thread
 * of the parent is simply absent there.  A fork() made while the library
 * waits for the calls in progress to end (after following a move, see
 * above) waits for them too (liburcu-bp's fork handlers): do not fork
 * from inside a clock callback.
 */

/*
 * shmt_unlink: remove the name NAME, retiring the segment first: every
 * handle on it, in every process, answers SHMT_ESTALE from its next call on
 * (limiters, dictionary, counters, analyzer, waits), so no process goes on
 * enforcing limits on an object no new process can see; it should close the
 * handle and open NAME again once a new segment is there.  The mark is one
 * store into the header, made only when the caller may write the object and
 * it is a valid segment of this format; the name is removed either way.
 * Reading calls (stat, limiters, check) still work on a retired handle.
 * Removing the name by other means (rm, shm_unlink) writes nothing into
 * the mapping: the next shmt_housekeep (the daemon's, every heartbeat at
 * the latest) finds the object without a name and retires it, and so do
 * the processes using it, without a daemon: every 64th call of a thread
 * reads the coarse clock and at most once a second per handle one call
 * looks at the object (one fstat), so a process stops using a segment
 * removed or replaced by hand within about a second plus 64 of its
 * calls.
 * Errors: -EINVAL, -ENAMETOOLONG, -ENOENT, -EACCES.  kill -9 between the
 * mark and the unlink leaves a retired segment under its name: opens give
 * SHMT_ESTALE until it is removed (shmthrottle destroy).
 */
SHMT_EXPORT int shmt_unlink(const char *name);

/* shmt_name: the name the handle was opened with (the same after the
 * segment moved), or NULL when H is NULL.  The string is owned by the
 * handle: valid until shmt_close, never to be freed.  No errors;
 * thread-safe; it reads the handle only, so a kill -9 leaves nothing. */
SHMT_EXPORT const char *shmt_name(const shmt_t *h);

/* ---- Time -------------------------------------------------------------- */

/*
 * shmt_set_clock: make handle H read time from FN(CTX) instead of
 * CLOCK_MONOTONIC; FN == NULL restores CLOCK_MONOTONIC.  Every later call on
 * H reads time through it, and so does every generation H follows after a
 * move.  Returns 0, or -EINVAL when H is NULL.
 * Ownership: H keeps FN and CTX (not a copy of what CTX points to) until
 * the next shmt_set_clock or shmt_close: CTX must stay valid, and FN
 * callable, that long.
 * Concurrency: call it before sharing H between threads (the change is
 * not atomic against calls in progress).  It writes the handle alone,
 * nothing in the segment: a kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_set_clock(shmt_t *h, shmt_clock_fn fn, void *ctx);

/*
 * shmt_set_sleep_hooks: have a thread that is about to sleep inside a call
 * on H call BEFORE(CTX) first, and AFTER(CTX) once it is awake again, before
 * it touches anything else.  A call sleeps only when it must wait for
 * another process, and these waits call the hooks:
 *  - a lock another process holds: dictionary and counter writes, a
 *    per-client grant that claims an entry for a new client, changes of
 *    the limiter table (define, update, delete);
 *  - a lock-free read of the dictionary (shmt_get, a walk) that finds
 *    another process's writer in the middle of a write: it yields the
 *    CPU until the write is done (at most 200 ms);
 *  - a move of the segment that holds it frozen: any call, a grant
 *    included, waits for the move's outcome (at most 5 s), also when it
 *    follows the segment into a next generation that is frozen;
 *  - shmt_wait's and shmt_next_key_wait's sleeps.
 * A call that does not wait calls neither.  These waits run without the
 * hooks: the 64 us of shmt_client_set and shmt_client_clear, and their
 * wait for a per-client table's lock (they hold the limiter table's
 * lock then); a forked child's first call, which claims its process slot
 * under a lock private to the process; and any wait that begins while
 * the library's reclaim thread waits to unmap a generation a handle of
 * this process followed past (after a move, until the calls that were
 * inside that generation have returned: see below).  A runtime with a global lock (an interpreter's) releases it in
 * BEFORE and takes it again in AFTER, so that its other threads run
 * while this one waits, with no cost on the calls that do not wait.
 * BEFORE and AFTER == NULL together remove the hooks.  Returns 0, or
 * -EINVAL when H is NULL or only one of BEFORE and AFTER is NULL.
 * The promise: every BEFORE is followed by exactly one AFTER, on the same
 * thread, before the call returns, with no other call of the hooks in
 * between (a wait nested in another runs none); between them the thread
 * holds no lock of the segment, no lock private to this process, and
 * nothing that a grace period of the library's reclaim thread (which
 * fork()'s prepare handler waits for) waits on: so BEFORE may let other
 * threads call into the library on any handle, H included, and fork.  The
 * hooks must not call the library on H, nor longjmp or unwind out.  They
 * run on every generation H follows after a move.
 * Ownership: H keeps BEFORE, AFTER and CTX (not a copy of what CTX points
 * to) until the next shmt_set_sleep_hooks or shmt_close.
 * Concurrency: call it before sharing H between threads (the change is
 * not atomic against calls in progress).  It writes the handle alone,
 * nothing in the segment: a kill -9 leaves nothing.
 */
typedef void (*shmt_sleep_fn)(void *ctx);
SHMT_EXPORT int shmt_set_sleep_hooks(shmt_t *h, shmt_sleep_fn before,
    shmt_sleep_fn after, void *ctx);

/* shmt_now: the handle's current time: FN(CTX) of shmt_set_clock, else
 * CLOCK_MONOTONIC (also when H is NULL).  No errors.  Thread-safe as far
 * as the handle's clock is; it reads no segment, so a kill -9 leaves
 * nothing. */
SHMT_EXPORT shmt_time_t shmt_now(shmt_t *h);

/* ---- Segment statistics ------------------------------------------------ */

#define SHMT_REGION_NAME_MAX 15

typedef struct shmt_region_stat {
	char name[SHMT_REGION_NAME_MAX + 1];
	uint64_t offset;
	uint64_t size;
	uint64_t used;   /* bytes in use, where the region can tell */
} shmt_region_stat_t;

#define SHMT_REGIONS_MAX 8

typedef struct shmt_segment_stat {
	uint64_t size;            /* bytes of the object */
	uint64_t format;          /* the format word */
	uint32_t abi_version;
	uint32_t nregions;
	shmt_region_stat_t regions[SHMT_REGIONS_MAX];
	uint32_t max_limiters, limiters;     /* table rows, rows in use */
	uint32_t max_slots, slots;           /* process slots, in use */
	uint32_t slots_stale;                /* slots whose process is dead */
	mode_t mode;
	uint64_t created_wall_ns;            /* CLOCK_REALTIME at creation */
	int64_t daemon_pid;                  /* 0: never ran */
	int daemon_alive;                    /* pid alive and same start time */
	shmt_time_t daemon_heartbeat_ns;     /* last heartbeat (monotonic) */
	shmt_time_t daemon_lag_ns;           /* last housekeeping lag */
	uint64_t housekeeping_runs;
	uint64_t slots_reaped;
} shmt_segment_stat_t;

/*
 * shmt_segment_stat: fill *OUT from the segment: the live generation, when
 * it moved since H was opened (sizes changed live).  A consistent picture
 * is not promised while other processes work: each field is read
 * atomically.
 * Errors: -EINVAL, SHMT_ESIZE (the object was truncated after the open:
 * nothing is read from it).
 * Reads only, without a lock, beside any other call; *OUT is the
 * caller's.  kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_segment_stat(shmt_t *h, shmt_segment_stat_t *out);

/* ---- Limiters ---------------------------------------------------------- */

enum shmt_mode {
	/* The seed's ring of buckets: constant memory, false negatives only
	 * when fewer than slack_uses uses are free and all uses were taken
	 * within window + slack. */
	SHMT_MODE_BUCKETS = 0,
	/* A ring of the last `limit` grant times (a sliding-window log): no
	 * false negatives, no false positives; limit <= SHMT_EXACT_LIMIT_MAX. */
	SHMT_MODE_EXACT = 1,
	/* Rate and burst (the generic cell rate algorithm): one use every
	 * T = window_ns / limit on average, up to `burst` at once; one
	 * 16-byte word per limiter (arrival time and parameter generation).
	 * See "Rate mode" below. */
	SHMT_MODE_GCRA = 2
};

/*
 * The parameters of a limiter.  In the seed's terms: limit = uses allowed,
 * window_ns = cooldown, slack_ns = maximum_cooldown - cooldown, slack_uses
 * = key_threshold.  Zero-initialise, then set what you need.
 *
 * The promise: at most `limit` grants whose decision times fall in any
 * half-open interval [t, t + window_ns), in both modes, under any
 * interleaving and any kill -9.  A closed interval [t, t + window_ns] can
 * hold up to 2 x limit at its two ends: a use taken at t comes back at
 * exactly t + window_ns (exact mode; in buckets mode at the bucket's close
 * + window_ns, later still).  The seed's sliding-window log keeps a
 * timestamp equal to now - window, so it refuses at t + window and grants
 * one clock tick later: it keeps at most `limit` in any closed interval of
 * length window, one tick stricter than this library.
 */
typedef struct shmt_limit {
	uint64_t limit;        /* uses per window, 1..SHMT_LIMIT_MAX; 0 with a
	                        * key pool means nkeys * uses_per_key */
	uint64_t window_ns;    /* the rolling window, > 0 */
	uint64_t slack_ns;     /* buckets mode: time a bucket stays open, > 0 */
	uint64_t slack_uses;   /* buckets mode: uses a bucket holds, 1..limit */
	int mode;              /* enum shmt_mode */
	/* Key pool (optional): next_key hands out these names in rotation,
	 * each at most uses_per_key times in any [t, t + window_ns). */
	const char *const *keys;
	uint32_t nkeys;        /* 0: no key pool */
	uint32_t uses_per_key; /* with a key pool: >= 1 */
	/* Per-client (optional): one independent limit per client id. */
	int per_client;
	uint32_t client_capacity; /* entries in the client table (>= 1) */
	/* Rate mode (SHMT_MODE_GCRA) only: how many uses may come at once,
	 * 1..SHMT_LIMIT_MAX, with T * burst below 2^62; 0 in the other
	 * modes. */
	uint64_t burst;
	/* Shadow mode (1): the limiter is tried, not enforced.  Its state
	 * records only the uses enforcement would have granted; a request
	 * that enforcement would refuse is granted all the same (1, nothing
	 * recorded) and counted in would_deny, and a decision shows the
	 * enforcement view (granted 0 with its retry_after_ns).  Not with a
	 * key pool (a name handed out must be real). */
	int shadow;
	/* Global (1): the limit is shared by every host whose daemon leases
	 * uses for this name from one Redis (config [global]); this host's
	 * grants spend the leases its daemon holds (see shmt_global_stat and
	 * the README, "Limits shared by many hosts").  Buckets mode only,
	 * shared (no client, not shadow), with or without a key pool (each
	 * lease is then a range of the fleet's grant cursor, so every host
	 * hands out each name at most uses_per_key times per window in all;
	 * hosts must define the same names in the same order); slack_ns is a
	 * lease's open time and slack_uses the most uses one lease holds.  Without a
	 * daemon holding a lease every request is refused; window_ns +
	 * slack_ns below SHMT_GLOBAL_SPAN_MAX.  Leases end at
	 * CLOCK_MONOTONIC deadlines: handles that use a global limiter keep
	 * the real clock (no shmt_set_clock). */
	int global;
	/* Per-client only: the capacity of the limiter's override table
	 * (shmt_client_set), 1..SHMT_OVERRIDES_MAX; 0 takes
	 * SHMT_OVERRIDES_DEFAULT.  Each override costs 128 bytes of the
	 * arena, taken at definition; must be 0 on a shared limiter. */
	uint32_t client_overrides;
} shmt_limit_t;

/*
 * shmt_limiter_define: define the limiter NAME (1..SHMT_LIMITER_NAME_MAX
 * bytes, no NUL inside) with parameters LIMIT.  Idempotent: defining it again
 * with identical parameters (and identical key names) returns 0.
 *
 * Errors: -EINVAL (invalid combination: zero limit or window, slack_uses 0 or
 * above limit, zero slack in bucket mode, too many buckets, exact limit too
 * large, key pool size mismatch, bad key name, zero client capacity ...:
 * exactly what shmt_limit_check refuses, and it names the rule),
 * -ENAMETOOLONG, -EEXIST (defined with other parameters), -ENOSPC (limiter
 * table or storage arena full), SHMT_ELOCKED (a live process kept the
 * table's lock: 100 ms while it sleeps or is stopped, 1 s in all; a
 * stopped or preempted definer, or a damaged lock word; try again).  On any error nothing is defined.
 * Concurrency: any number of processes may define at once; they serialise
 * on the table's lock (which recovers from a dead owner and is never taken
 * from a live one).  kill -9 inside the call leaves either
 * no limiter or a complete one (a row being built is reclaimed by the next
 * definer; its storage is not reused).
 */
SHMT_EXPORT int shmt_limiter_define(shmt_t *h, const char *name,
    const shmt_limit_t *limit);

/*
 * shmt_limiter_update: change the parameters of the limiter NAME in place,
 * keeping every use in flight.  LIMIT is the whole new parameter set, as
 * for shmt_limiter_define, on a shared limiter without a key pool; what
 * may differ: in buckets mode limit, window_ns, slack_ns and slack_uses;
 * in rate mode (SHMT_MODE_GCRA) limit, window_ns and burst; in exact mode
 * limit (up to the limit the limiter was defined with, which sized its
 * log) and window_ns.  The change is one atomic step against every grant,
 * in every process: a grant decides under the old parameters or under the
 * new ones, never a mix (a process holding the old ones finds out on its
 * next call and reads the new ones).  What it promises, with old
 * parameters (L, C) and new (L', C'):
 *  - uses in flight stay counted: lowering the limit refuses every grant
 *    until fewer than L' uses are in flight;
 *  - buckets mode: every use decided before the change is held at least
 *    max(C, C') after its bucket closed (a window never shortens under a
 *    use), so any half-open interval of length max(C, C') holds at most
 *    max(L, L') grants, and one that starts after the change at most L';
 *  - exact mode: every use decided before the change is held at least
 *    max(C, C') after its grant; any half-open interval of length
 *    min(C, C') holds at most max(L, L') grants, and one of length C'
 *    lying wholly after the change at most L';
 *  - rate mode, with T = window_ns / limit and burst B before, T' and B'
 *    after: the theoretical arrival time never moves earlier, and every
 *    use in flight (ceil((TAT - now) / T), rounded up) costs T' from then
 *    on (with T unchanged, TAT stays as it is), so the uses in flight
 *    never fall at a change and a lowered burst
 *    refuses until they drain under it; any half-open interval of length
 *    d holds at most max(B, B') + floor(d / min(T, T')) uses, and one
 *    lying wholly after the change at most B' + floor(d / T') (the
 *    arguments: lib/gcra.c and lib/exact.c).
 * In buckets mode the bucket being filled is sealed by the change.  A
 * shorter slack_ns also pulls every sealed bucket's close time in to now +
 * the new slack, and opens the next bucket empty and sealed, when the ring
 * has room for it and one more: a grant that read the old parameters
 * cannot then open that bucket with the old slack, which shmt_check would
 * name and a move refuse until the old slack passed (with no room left,
 * that can still happen).  The empty bucket closes with the bucket before
 * it, or is due at once when none is in flight, so it holds a ring place
 * only while the buckets sealed before it do.  While they are held, the
 * ring may run out of buckets sooner than the new parameters alone would
 * (a refusal counted as denied_ring_full, never an over-grant).  A rate-mode receipt
 * (shmt_refund) of a grant made before a change gives nothing back.
 *
 * Returns 0 (also when nothing changes).  Errors, with WHY (WHY_LEN
 * bytes, may be NULL) holding one sentence naming the field and the rule:
 * -EINVAL (LIMIT breaks a rule of shmt_limit_check, or H or LIMIT is
 * NULL), -EOPNOTSUPP (a field that cannot change in place: mode, key pool,
 * per-client, shadow, global; or a key pool or a per-client limiter,
 * which a move into a new generation of the segment defines anew with
 * every use in flight: `shmthrottle limiter set` and shmthrottled's
 * reload make that move), -E2BIG (buckets mode: the new
 * parameters need more buckets than the ring made at definition holds:
 * raise slack_ns or slack_uses; exact mode: a limit above the one the log
 * was made for: delete and define the limiter again), -ENOENT, -EINVAL or
 * -ENAMETOOLONG (the name), SHMT_ELOCKED (as for shmt_limiter_define),
 * SHMT_ECORRUPT (the row or its word is damaged).  On any error nothing
 * changes.
 * Concurrency: any number of processes may grant meanwhile; updates and
 * definitions serialise on the table's lock (a holder killed with kill -9
 * is found dead and the lock repaired, as for shmt_limiter_define).  A
 * process keeps the views it built of older parameters (a few hundred
 * bytes per change) until it closes the handle.  kill -9 inside the call
 * leaves the old parameters or the new ones, never a mix, and the state
 * (ring, arrival time or log) of the one it leaves.  Up to 65535 changes
 * may overtake a grant preempted between reading the limiter's word and
 * its compare-and-swap; more would let that grant commit on old
 * parameters.
 */
SHMT_EXPORT int shmt_limiter_update(shmt_t *h, const char *name,
    const shmt_limit_t *limit, char *why, size_t why_len);

/*
 * shmt_limiter_delete: delete the limiter NAME.  Every later call on NAME,
 * in every process, gets -ENOENT (a process notices on its next call: each
 * call checks that the limiter's row is still defined), until NAME is
 * defined again, which takes another row.  A call that had passed that
 * check when the delete happened finishes on the deleted row, whose
 * state nobody reads again: it counts as a call made before the delete.
 * The row and its storage are never reused (so no process can act on a
 * row that now holds another limiter); they come back only when the
 * segment is created again.
 * Returns 0.  Errors: -ENOENT, -EINVAL, -ENAMETOOLONG (the name),
 * SHMT_ELOCKED (as for shmt_limiter_define).
 * Concurrency: serialises with defines and updates on the table's lock.
 * kill -9 inside the call leaves the limiter defined or deleted.
 */
SHMT_EXPORT int shmt_limiter_delete(shmt_t *h, const char *name);

/*
 * shmt_limiter_reset: give back every use in flight of the limiter NAME,
 * or, when CLIENT is not NULL, of that client of a per-client limiter
 * (CLIENT_LEN bytes, 1..SHMT_CLIENT_MAX).  This is an operator's
 * deliberate over-grant: uses granted just before the reset no longer
 * count, so up to twice the limit may be granted within one window.  The
 * uses given back are counted in the limiter's reset_uses (and among its
 * released uses, so that its grants stay counted right).  Buckets, exact mode (each record is made old) and
 * rate mode (the arrival time goes back to none) alike; a key pool keeps
 * its cursor.
 * Returns the number of uses given back (rate mode: 0; its state holds no
 * count), 0 when nothing was in flight or the client has no entry.
 * Errors: -ENOENT, -EINVAL (a client id with a shared limiter's name is
 * -EPERM, as for shmt_try_use; CLIENT NULL with CLIENT_LEN not 0),
 * -E2BIG (client id too long), -ENAMETOOLONG, SHMT_ECORRUPT,
 * SHMT_EBUSYLOOP.
 * Concurrency: lock-free against grants (one CAS per word it clears); a
 * grant racing with it is counted before it (and given back) or after it.
 * kill -9 inside the call leaves some words cleared and others not: each
 * word is consistent, and the count of reset_uses may be short.
 */
SHMT_EXPORT int shmt_limiter_reset(shmt_t *h, const char *name,
    const void *client, size_t client_len);

/*
 * shmt_limit_check: apply to LIM exactly the rules shmt_limiter_define
 * applies to its parameters (it calls this), without a segment.  Returns 0,
 * or -EINVAL when LIM is NULL or shmt_limiter_define would refuse it with
 * -EINVAL; then WHY (WHY_LEN bytes, may be NULL) holds one NUL-terminated
 * sentence that starts with the field's name, a colon and the rule, e.g.
 * "slack_uses: must be from 1 to limit (10) in buckets mode".  Only the
 * first broken rule is named.  Pure: reads LIM (and its key names) only,
 * thread-safe; nothing to leave behind.  Passing it does not promise that
 * a define succeeds: the name, room in the table and the arena, and an
 * existing limiter of that name are checked only there.
 */
SHMT_EXPORT int shmt_limit_check(const shmt_limit_t *lim, char *why,
    size_t why_len);

/*
 * shmt_try_use_key: try to take one use of limiter NAME now.
 * Returns 1 when granted, 0 when throttled, or an error: -EINVAL, -ENOENT
 * (no such limiter), -EPERM (limiter is per client: use shmt_try_use),
 * SHMT_ECORRUPT (state fails validation), SHMT_EBUSYLOOP (retry bound spent:
 * only on a damaged segment).
 * Lock-free: the grant is one CAS that both decides and records it.  Never
 * waits for the daemon.  kill -9 at any instruction loses at most the use
 * being granted (it stays in flight until its bucket is released).
 * The decision time of a grant is a clock value read during the call.
 */
SHMT_EXPORT int shmt_try_use_key(shmt_t *h, const char *name);

/*
 * shmt_next_key: like shmt_try_use_key on a limiter with a key pool, and
 * on a grant copies the key name to use, NUL-terminated, into BUF (CAP
 * bytes).  Names follow grant order (grant n gets name n mod nkeys, n taken
 * from the atomic step that decides the grant), so each name is handed out
 * at most uses_per_key times in any half-open [t, t + window_ns).  Returns
 * the name's length (> 0),
 * 0 when throttled, or an error: those of shmt_try_use_key, -ENOKEY (the
 * limiter has no key pool), -ERANGE (CAP too small for the longest key name
 * of the pool: checked before anything is granted).
 */
SHMT_EXPORT int shmt_next_key(shmt_t *h, const char *name, char *buf,
    size_t cap);

/*
 * shmt_try_use: one use of the per-client limiter NAME for client id
 * CLIENT (LEN bytes, 1..SHMT_CLIENT_MAX, any bytes).  Every client gets an
 * independent limit with the limiter's parameters, created on first use.
 * Client ids are stored as 128-bit hashes keyed with the segment's secret
 * (see shmt_create), so no one who cannot read the segment can pick ids
 * that share a part of the table; two ids that collide share one limit
 * (stricter, never looser).
 * A client's entry lies within 64 entries of its hash's home in the table,
 * so a call never scans more than that.
 * Returns 1 granted, 0 throttled (also when the 64 entries of its part of
 * the table are all live and busy: counted as "table full"), or an error:
 * those of shmt_try_use_key, SHMT_ELOCKED (a new client's entry is claimed
 * under the limiter's client lock, which a live process kept past its
 * bound: 100 ms while it sleeps or is stopped, 1 s in all; a call that
 * finds its client's entry in the middle of an override's change waits
 * for that lock too),
 * -E2BIG (LEN over SHMT_CLIENT_MAX), -EPERM (the limiter is not per client).
 * An entry is reclaimed only when it holds no use in flight.  CLIENT is
 * read during the call only.
 * Concurrency: any number of threads and processes at once.  A grant on
 * the client's live entry is lock-free: one 16-byte CAS on the entry's
 * word, which also checks that the entry is still that client's.  A new
 * client's entry is claimed (an idle one reclaimed on the way) under the
 * limiter's client lock, which recovers from a dead owner.
 * kill -9 at any instruction of a grant loses at most the use being
 * granted (it stays in flight until released: never an over-grant); one
 * during a claim leaves the client lock, and at most one entry half
 * claimed, to the lock's next holder (the next claim, shmt_client_* call
 * or housekeeping that takes it), which takes the lock over and frees
 * that entry.
 */
SHMT_EXPORT int shmt_try_use(shmt_t *h, const char *name, const void *client,
    size_t len);

/* ---- Per-client overrides ------------------------------------------------ */

/*
 * A per-client limiter gives every client the limit it was defined with,
 * unless an override names the client: its own limit (a tier), allow
 * (never throttled) or deny (always refused).  Overrides live in a table
 * of the limiter in the segment (client_overrides rules, 128 bytes each),
 * so they survive the reclaim of a client's entry, a move into a new
 * generation and a snapshot.  A client's rule is stamped into its entry
 * when the entry is claimed and whenever the rule changes, so a client
 * without an override pays nothing for the table: its grant reads one
 * more word of the line it CASes anyway.
 *
 * The promise, with the client's old limit L and new L' (the class limit
 * when it had no limit rule; allow counts as no limit, deny as 0): a change
 * is one atomic step against every grant of that client in every process
 * (it changes the epoch in the entry's state word, which every grant's CAS
 * checks), so a grant decides under the old rule or the new one, never
 * commits after the change under the old one.  Uses in flight stay counted
 * with their release times: lowering refuses the client until fewer than
 * L' of its uses are in flight; raising takes effect at once.  So at most
 * max(L, L') grants fall in any window that holds the change, and at most
 * L' in any window that starts after it.  The window, slack and buckets
 * stay the limiter's; in buckets mode the entry's ring has the class's
 * nbuckets, and a client with a limit L' of its own fills each bucket to
 * B' = max(slack_uses, ceil(L' / (nbuckets - ceil(window / slack)))) uses,
 * so the ring holds any tier (its uses come back B' at a time; the largest
 * cost of one call stays slack_uses).  Allow grants are not recorded (no
 * use in flight, not in grants) and are counted in allowed_by_rule; deny
 * refusals are counted in denied_by_rule (decision: granted 0,
 * retry_after_ns UINT64_MAX).  In
 * shadow mode a deny is counted in would_deny and granted.  Rate mode
 * (SHMT_MODE_GCRA) takes allow and deny only (a limit there would change
 * the client's emission interval under its arrival time).
 */
enum shmt_rule_kind {
	SHMT_RULE_LIMIT = 1,   /* the client's own limit */
	SHMT_RULE_ALLOW = 2,   /* never throttled */
	SHMT_RULE_DENY = 3     /* always refused */
};

typedef struct shmt_client_rule {
	int kind;              /* enum shmt_rule_kind */
	uint64_t limit;        /* SHMT_RULE_LIMIT: 1..SHMT_LIMIT_MAX; else 0 */
} shmt_client_rule_t;

/* Default capacity of a per-client limiter's override table, and its
 * largest.  An override's client id is at most SHMT_OVERRIDE_ID_MAX
 * bytes (the table keeps it whole, for shmt_client_list). */
#define SHMT_OVERRIDES_DEFAULT 16U
#define SHMT_OVERRIDES_MAX 65536U
#define SHMT_OVERRIDE_ID_MAX 104U

/*
 * shmt_client_set: give CLIENT (LEN bytes, 1..SHMT_OVERRIDE_ID_MAX, any
 * bytes) of the per-client limiter NAME the rule *RULE, replacing the one
 * it had.  Returns 0, or an error: -EINVAL (NULL handle, name, client or
 * rule, LEN 0, an unknown kind, a limit outside 1..SHMT_LIMIT_MAX or one
 * given with allow/deny, a limit on a rate-mode limiter), -E2BIG (LEN over
 * SHMT_OVERRIDE_ID_MAX), -ENOENT (no such limiter), -EPERM (the limiter
 * is not per client), -ENOSPC (the override table is full: clear one, or
 * define the limiter with a larger client_overrides), SHMT_ELOCKED (a
 * live process kept the table's lock or the limiter's client lock too
 * long: try again), SHMT_ECORRUPT (the override table or the client's
 * entry is damaged).
 * Nothing is kept of RULE or CLIENT after the call.
 * Concurrency: any process may call at any time, beside grants of every
 * kind.  A change takes the limiter table's lock first (definitions,
 * updates and deletions take it too, and a move of the segment waits for
 * it), then the limiter's client lock (the lock that claims of entries
 * take); both recover from a dead owner.  The
 * change's atomic step is the CAS of the client's entry word (a new
 * epoch, 14 bits); a grant that read the old rule fails its CAS and
 * decides again.  A change that reaches a client's entry holds the client
 * lock 64 us after its CAS, so one entry's epoch comes back to a value
 * only after 16383 changes, more than a second: a grant stopped that long
 * between its look at the rule and its CAS, through that many changes of
 * its client's rule, is the one case decided by a rule that was replaced.
 * kill -9: the override table is changed by one 4-byte store, and decides:
 * before it the old rule stands, after it the new one.  A client's entry
 * that a dead setter left with the other rule is restamped from the table
 * by the next holder of the client lock (a claim of a new client, any
 * shmt_client_* call of the limiter, the daemon's housekeeping), which
 * moves every entry's epoch; until then that client is decided by the
 * rule its entry holds, old or new.  shmt_check names an entry whose rule
 * is not the table's.
 */
SHMT_EXPORT int shmt_client_set(shmt_t *h, const char *name,
    const void *client, size_t len, const shmt_client_rule_t *rule);

/*
 * shmt_client_clear: remove CLIENT's override from limiter NAME, giving it
 * the limiter's own limit again (a lowering or a raising as above).
 * Returns 1 when an override was removed, 0 when the client had none, or
 * the errors of shmt_client_set (but -ENOSPC).  Concurrency and kill -9:
 * as shmt_client_set.
 */
SHMT_EXPORT int shmt_client_clear(shmt_t *h, const char *name,
    const void *client, size_t len);

/*
 * shmt_client_get: CLIENT's override on limiter NAME into *OUT: 1 when it
 * has one, 0 when it has none (*OUT zeroed), or the errors of
 * shmt_client_clear.  Reads the table under the limiter's client lock
 * alone (not the table's lock), beside grants and the other calls; it
 * writes nothing, unless it takes the lock over from a dead holder and
 * repairs what that one left, as every holder does (see shmt_client_set).
 * kill -9 inside leaves the override table as it was, and the client lock
 * to its next holder, which takes it over.
 */
SHMT_EXPORT int shmt_client_get(shmt_t *h, const char *name,
    const void *client, size_t len, shmt_client_rule_t *out);

/* One override as shmt_client_list returns it. */
typedef struct shmt_client_override {
	uint8_t client[SHMT_OVERRIDE_ID_MAX]; /* the id, CLIENT_LEN bytes
	                                       * (not NUL-terminated) */
	uint32_t client_len;
	shmt_client_rule_t rule;
} shmt_client_override_t;

/*
 * shmt_client_list: copy the overrides of limiter NAME into OUT (CAP
 * entries, caller-owned; may be NULL with CAP 0), in table order.  Returns
 * the number of overrides set (more than CAP when OUT was too small: the
 * first CAP are copied), or an error: -EINVAL, -ENOENT, -EPERM,
 * SHMT_ELOCKED, SHMT_ECORRUPT (a rule or an id length in the table is out
 * of range).  The copy is taken under the client lock: one instant of the
 * table.  kill -9 inside changes nothing.
 */
SHMT_EXPORT int shmt_client_list(shmt_t *h, const char *name,
    shmt_client_override_t *out, size_t cap);

/* ---- Rate mode ---------------------------------------------------------- */

/*
 * SHMT_MODE_GCRA: `limit` uses per `window_ns` as a rate (one use every
 * T = window_ns / limit ns, rounded down; window_ns >= limit), and up to
 * `burst` uses at once.  A shared limiter keeps its theoretical arrival
 * time (TAT) and its parameter generation in one 16-byte word: a request
 * of k uses at now passes when max(TAT, now) + k * T <= now + T * burst,
 * and its grant is one 16-byte CAS on the word that moves TAT there (a
 * refund is one too).  Its safety promise is its own: at most
 * burst + floor(d / T) uses are granted in any half-open interval of length
 * d (not the ring's `limit` per window: a full burst, then the rate).
 * Decisions answer as redis-cell's CL.THROTTLE key max_burst count period
 * with max_burst = burst - 1, count = limit and period = window, in
 * nanoseconds: limit = burst, remaining = (T * burst - reset) / T.  The
 * largest cost is burst.  Shared or per client (each client's entry keeps
 * its own arrival time; a grant is then one 16-byte CAS that also checks
 * the entry is still the client's, and an entry is reclaimed once its
 * arrival time has passed); no key pool; no slack_ns or slack_uses.
 */

/* ---- Decisions --------------------------------------------------------- */

/*
 * What a call decided and what the caller can do next.  Every field is
 * counted at the decision's own clock value (the grant's, or the refusal's).
 */
typedef struct shmt_decision {
	int      granted;          /* 1 granted, 0 throttled */
	uint64_t limit;            /* uses per window */
	uint64_t remaining;        /* uses that would be granted now, one after
	                            * another, with no time passing */
	uint64_t retry_after_ns;   /* 0 when granted; else the wait after which
	                            * this request would be granted if nobody
	                            * else took anything */
	uint64_t reset_after_ns;   /* the wait until every use in flight now is
	                            * back (0: none is in flight) */
} shmt_decision_t;

/*
 * shmt_acquire: take COST uses of limiter NAME now, all or nothing, and say
 * what that leaves in *OUT (may be NULL: then nothing but the grant is
 * computed, and the call costs what shmt_try_use_key costs).  CLIENT is
 * NULL (CLIENT_LEN 0) for a shared limiter or a key pool, and the client id
 * (1..SHMT_CLIENT_MAX bytes) for a per-client one.
 *
 * COST: 1..slack_uses in bucket mode (a grant of COST is recorded in one
 * bucket); 1..burst in rate mode; exactly 1 in exact mode and on a key
 * pool.  The limit holds as
 * uses: at most `limit` uses whose decision times fall in any window.
 *
 * Returns 1 granted, 0 throttled, or an error: -EINVAL (NULL handle or
 * name, COST 0 or above the largest cost of the mode, CLIENT NULL with a
 * length or non-NULL without one), -E2BIG (CLIENT_LEN over SHMT_CLIENT_MAX),
 * -ENOENT (no such limiter), -EPERM (a client for a shared limiter, or none
 * for a per-client one), -ENOMEM (a fresh view of a limiter whose
 * parameters changed could not be allocated), SHMT_ENOSLOT (the first call
 * of a forked child found no free process slot; nothing was taken),
 * SHMT_ECORRUPT, SHMT_EBUSYLOOP.
 *
 * The grant is the same single CAS as shmt_try_use_key's: lock-free, never
 * waits for the daemon; kill -9 at any instruction loses at most the COST
 * uses being granted.  The decision is computed after that CAS, from the
 * word the CAS installed: single-threaded (nobody else calling) every field
 * is exact: a request of the same cost at now + retry_after_ns - 1 ns is
 * throttled and at now + retry_after_ns granted; `remaining` requests of
 * cost 1 at the same instant are granted and the next one is not; after
 * reset_after_ns every use in flight is back.  With other callers at work
 * the fields describe the state as this call left it.
 *
 * In bucket mode a grant of COST > 1 that does not fit in the open bucket
 * seals it and opens another, so more buckets may be needed than the ring
 * holds: such a request may be refused (counted as "ring full") while
 * uses are free; retry_after_ns then names the release that makes room.
 * A per-client request refused because the client table is full has no
 * exact answer: remaining is 0 and retry_after_ns is window + slack.  A
 * COST the class takes but above the client's own limit (a tier below
 * slack_uses, shmt_client_set) never passes under that rule: it is
 * refused with retry_after_ns UINT64_MAX, as a deny rule answers
 * (remaining and reset_after_ns as for any refusal, limit the tier's).
 */
SHMT_EXPORT int shmt_acquire(shmt_t *h, const char *name, const void *client,
    size_t client_len, uint64_t cost, shmt_decision_t *out);

/*
 * shmt_peek: what shmt_acquire with the same arguments would answer now,
 * without taking anything: it changes no byte of the segment (it does not
 * even make the releases that are due, nor claim a client entry).  Returns
 * 1 (would be granted), 0 (would be throttled) and the errors of
 * shmt_acquire; *OUT (may be NULL) gets the decision shmt_acquire would
 * give.  Wait-free apart from bounded retries when the ring moves under
 * it; kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_peek(shmt_t *h, const char *name, const void *client,
    size_t client_len, uint64_t cost, shmt_decision_t *out);

/*
 * shmt_next_key_decide: shmt_next_key with the decision in *OUT (may be
 * NULL).  Returns the name's length (> 0), 0 when throttled, or the errors
 * of shmt_next_key.
 * Concurrency: any number of threads and processes; the grant is one CAS,
 * lock-free, that decides, records and numbers it (the name), and the
 * decision is computed after it from the word it installed, as in
 * shmt_acquire.  kill -9 at any instruction loses at most the use being
 * granted (its name is not handed out; the use stays in flight until
 * released).
 */
SHMT_EXPORT int shmt_next_key_decide(shmt_t *h, const char *name, char *buf,
    size_t cap, shmt_decision_t *out);

/* One request of shmt_acquire_all: shmt_acquire's arguments. */
typedef struct shmt_request {
	const char *limiter;
	const void *client;       /* NULL (with client_len 0): shared */
	size_t client_len;
	uint64_t cost;
} shmt_request_t;

/* What a grant of shmt_acquire_all remembers, to give it back with
 * shmt_refund.  Opaque; plain data (may be copied, kept in memory). */
typedef struct shmt_receipt {
	uint64_t r_[4];
} shmt_receipt_t;

/* Most requests in one shmt_acquire_all. */
#define SHMT_ACQUIRE_ALL_MAX 8

/*
 * shmt_acquire_all: grant every one of the N requests REQ[0..N) or none,
 * e.g. 10/s for this user and 1,000/day overall.  First every request is
 * looked at (shmt_peek): if any would be refused, nothing is taken and the
 * call returns 0.  Otherwise they are taken one after another (each one
 * shmt_acquire), rate-mode ones first; if another caller took what the
 * first look saw and one is refused now, the grants already made on shared
 * rate-mode limiters are given back (per-client ones cannot be, see
 * shmt_refund) and the others stay held until they are released (lost
 * uses, never extra ones), and the call returns 0.  Single-threaded with
 * an injected clock, a refused call changes nothing.
 *
 * OUT (N entries, may be NULL) gets each request's decision; RECEIPTS (N
 * entries, may be NULL) gets, when all are granted, what shmt_refund needs.
 * Returns 1 (all granted), 0 (not all), or an error: those of shmt_acquire
 * for any request (checked before anything is taken), -EINVAL also for N
 * 0 or above SHMT_ACQUIRE_ALL_MAX, or one limit asked twice (the same
 * limiter, and for a per-client one the same client: ask for the sum).  kill -9 between the steps leaves the
 * uses taken so far held until released: never an over-grant.
 */
SHMT_EXPORT int shmt_acquire_all(shmt_t *h, const shmt_request_t *req,
    size_t n, shmt_decision_t *out, shmt_receipt_t *receipts);

/*
 * shmt_refund: give back a grant that went unused, named by its RECEIPT
 * (from shmt_acquire_all) on limiter NAME, where the mode can do so without
 * breaking the window's promise:
 *  - rate mode, shared limiter: yes, while no later grant has moved the
 *    arrival time and the parameters have not changed since the grant
 *    (shmt_limiter_update; a receipt from before a change gives nothing
 *    back) (it goes back to where it was before the grant, or to the
 *    grant's time if that is later, so the promise holds as if the grant
 *    had not been made);
 *  - per client, any mode: no (the entry may serve another client by
 *    then);
 *  - bucket mode: no.  Its count of a bucket lives
 *    in the limiter's word until the bucket is sealed, and a caller that
 *    read the word before a give-back could still seal the bucket's slot
 *    with the old count, so the release would return uses other buckets
 *    hold;
 *  - exact mode: no (a log record cannot be taken back in one step);
 *  - shadow mode: a grant that was not recorded has nothing to give back.
 * Returns 1 given back (or nothing to give back), 0 not possible (the uses
 * stay held until released, as if used), or an error: -EINVAL (NULL, or a
 * receipt of another limiter), -ENOENT, SHMT_ECORRUPT, SHMT_ESTALE (the
 * segment was removed).  A receipt given back is cleared, so giving it
 * back again does nothing.  A grant made before a move of the segment is
 * given back in the generation it moved to (a move copies the word the
 * receipt names); one given back while the move copies counts as not
 * given back (0: the uses stay held).  One CAS; kill -9 leaves the grant
 * given back or not.
 */
SHMT_EXPORT int shmt_refund(shmt_t *h, const char *name,
    shmt_receipt_t *receipt);

/*
 * shmt_wait: shmt_acquire, waiting up to TIMEOUT_NS of real time for the
 * grant.  TIMEOUT_NS 0 is one try; UINT64_MAX waits without limit.  The
 * timeout runs on CLOCK_MONOTONIC even when the handle has an injected
 * clock (shmt_set_clock): the limiter's answers follow the handle's clock,
 * the sleeping does not; a test drives it with a short real timeout, or by
 * letting another handle release uses (which wakes the waiter at once).
 *
 * A refused waiter sleeps, using no CPU, on a futex word in the limiter's
 * row, shared across processes, until the refusal's retry_after_ns or
 * until someone returns uses to the limiter (a caller or the daemon
 * releasing a bucket, which makes a system call only when someone sleeps),
 * then tries again.  Returns 1 granted, 0 throttled when the timeout ran
 * out, -EINTR when a signal interrupted the sleep, or the errors of
 * shmt_acquire.  *OUT (may be NULL) gets the last try's decision (not on an
 * error).  A request that never passes under the client's rule (a deny
 * rule, a cost above its tier limit: retry_after_ns UINT64_MAX) sleeps
 * until the timeout, or until a change of that limiter's rules wakes it
 * to decide again.  Waiters are not queued: when uses come back, whoever
 * tries first gets them.  A move of the segment wakes its waiters (the
 * mover, or whoever finishes the move of a mover killed after its rename):
 * they go on waiting in the new generation until the same deadline.
 * kill -9 while asleep leaves nothing held (at most one
 * needless wake-up call for the next releaser).
 */
SHMT_EXPORT int shmt_wait(shmt_t *h, const char *name, const void *client,
    size_t client_len, uint64_t cost, uint64_t timeout_ns,
    shmt_decision_t *out);

/* ---- Resolved limiters ------------------------------------------------------- */

/*
 * A limiter resolved once, for callers that grant on the same limiter in a
 * loop: the calls below skip the name (no lookup, no compare, whatever its
 * length) and decide exactly as the named calls do.
 */
typedef struct shmt_limiter shmt_limiter_t;

/*
 * shmt_limiter_open: resolve limiter NAME of H into *OUT.
 * Errors: -EINVAL, -ENAMETOOLONG, -ENOENT (no such limiter), -ENOMEM,
 * SHMT_ECORRUPT (its row fails validation), SHMT_ESTALE, SHMT_EBUSYLOOP.
 * Ownership: *OUT belongs to the caller, who frees it with
 * shmt_limiter_close() before closing H (it refers to H's memory).
 * Concurrency: thread-safe; one resolved limiter may be used by any number
 * of threads at once, like H.  Nothing is written to the segment.
 */
SHMT_EXPORT int shmt_limiter_open(shmt_t *h, const char *name,
    shmt_limiter_t **out);
/* Free L (NULL is fine).  No call on L may be running or follow. */
SHMT_EXPORT void shmt_limiter_close(shmt_limiter_t *l);

/*
 * shmt_limiter_try: one use of L: shmt_try_use_key() when CLIENT is NULL
 * (LEN 0), shmt_try_use() for CLIENT (LEN bytes) of a per-client limiter.
 * Returns 1 when granted, 0 when throttled, or an error: those of the
 * named call, and -ENOENT once the limiter was deleted (for good: a
 * limiter defined again under the same name is another row, which L never
 * reaches; open it again), SHMT_ESTALE once the segment was removed.
 * A change of parameters (shmt_limiter_update) is followed on the next
 * call; after fork() the child's first call takes a slot of its own, as
 * for every call on H.  Lock-free, like the named calls; kill -9 at any
 * instruction loses at most the use being granted.
 */
SHMT_EXPORT int shmt_limiter_try(shmt_limiter_t *l, const void *client,
    size_t len);

/*
 * shmt_limiter_acquire: shmt_acquire() on L: COST uses for CLIENT (NULL,
 * LEN 0: a shared limiter) with the decision in OUT (may be NULL).
 * Returns and errors as shmt_acquire, plus -ENOENT and SHMT_ESTALE as
 * shmt_limiter_try.
 * Concurrency: L may be used by any number of threads at once, like H.
 * The grant is one CAS that decides and records it, lock-free, never
 * waiting for the daemon; a client without an entry has one claimed under
 * the limiter's client lock first, as in shmt_try_use.  kill -9 at any
 * instruction loses at most the COST uses being granted (they stay in
 * flight until released); one during a claim leaves the client lock to
 * its next holder, which takes it over and frees the entry half claimed.
 */
SHMT_EXPORT int shmt_limiter_acquire(shmt_limiter_t *l, const void *client,
    size_t len, uint64_t cost, shmt_decision_t *out);

/*
 * shmt_next_key_wait: shmt_next_key, waiting as shmt_wait does.  Returns the
 * name's length (> 0), 0 when the timeout ran out, -EINTR, or the errors of
 * shmt_next_key (-ENOENT also when the limiter is deleted while the call
 * waits).
 * Concurrency: any number of threads and processes; each try is
 * shmt_next_key's lock-free CAS, and a refused caller sleeps on the row's
 * futex word until uses come back or its retry time; waiters are not
 * queued.  kill -9 while asleep leaves nothing held (at most one needless
 * wake-up call for the next releaser); during a try it loses at most the
 * use being granted (its name is not handed out).
 */
SHMT_EXPORT int shmt_next_key_wait(shmt_t *h, const char *name, char *buf,
    size_t cap, uint64_t timeout_ns, shmt_decision_t *out);

typedef struct shmt_limiter_stat {
	char name[SHMT_LIMITER_NAME_MAX + 1];
	uint64_t limit, window_ns, slack_ns, slack_uses;
	int mode;
	uint32_t nbuckets;        /* ring size (buckets mode) */
	uint32_t nkeys, uses_per_key;
	int per_client;
	uint32_t client_capacity, clients_in_use;
	/* State (per-client limiters: summed over all clients). */
	uint64_t in_flight;       /* uses held, not yet released */
	uint64_t free;            /* limit - in_flight (per client: n/a, 0) */
	uint32_t buckets_in_use;  /* sealed + active */
	/* Counters since creation (best effort: a process killed at the wrong
	 * instruction may make one undercount by one). */
	uint64_t grants;
	uint64_t denied_exhausted;  /* no free use */
	uint64_t denied_slack;      /* free uses, but fewer than slack_uses
	                             * and all taken within window + slack
	                             * (the seed's allowed false negative) */
	uint64_t denied_table_full; /* per-client table full of live entries */
	uint64_t denied_ring_full;  /* no bucket free in the ring: proven not
	                             * to happen single-threaded; possible
	                             * when a caller's clock read is stale,
	                             * and for up to a window after a ring's
	                             * bucket serial wraps at 2^32 (every
	                             * 2^32 buckets) when the ring's size
	                             * does not divide 2^32 */
	shmt_time_t housekeeping_lag_ns;
	uint64_t burst;             /* rate mode: uses that may come at once */
	uint64_t would_deny;        /* shadow mode: requests enforcement would
	                             * have refused (granted unrecorded); the
	                             * denied_* counters count none of them */
	int shadow;                 /* 1: shadow mode */
	uint64_t reset_uses;        /* uses in flight given back early by
	                             * shmt_limiter_reset (an operator's
	                             * deliberate over-grant) */
	/* Per-client overrides (shmt_client_set). */
	uint32_t client_overrides;  /* capacity of the override table */
	uint32_t overrides_in_use;  /* rules set in it now */
	uint64_t allowed_by_rule;   /* grants to allow-listed clients: never
	                             * counted in grants nor in flight */
	uint64_t denied_by_rule;    /* refusals of deny-listed clients (in
	                             * shadow mode counted in would_deny) */
} shmt_limiter_stat_t;

/*
 * shmt_limiter_stat: fill *OUT for limiter NAME.  Errors: -EINVAL, -ENOENT
 * (and those of the name and its row, as for shmt_limiter_open).
 * Wait-free apart from per-client limiters, where it walks the table.
 * Reads only, without a lock, beside any other call: each field is read
 * atomically, not all at one instant.  kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_limiter_stat(shmt_t *h, const char *name,
    shmt_limiter_stat_t *out);

/*
 * shmt_limiter_list: fill OUT[0..CAP) with the stats of the defined limiters
 * in table order; returns how many are defined (may exceed CAP: call again
 * with more room).  OUT may be NULL when CAP is 0.  Errors: -EINVAL.
 * Reads only, without a lock, beside any other call: a limiter defined or
 * deleted during the call may be listed or not, and each row is read as
 * shmt_limiter_stat reads it.  kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_limiter_list(shmt_t *h, shmt_limiter_stat_t *out,
    size_t cap);

typedef struct shmt_bucket_info {
	uint32_t serial;          /* low 32 bits of the bucket's serial */
	uint32_t uses;
	int active;               /* 1: the bucket still takes uses (the last
	                           * bucket, neither full nor closed yet) */
	shmt_time_t close_ns;     /* the bucket's close time: opened at +
	                           * slack_ns.  A bucket that filled up
	                           * stopped taking uses earlier, but keeps
	                           * this time, which its release counts
	                           * from */
	shmt_time_t release_ns;   /* close_ns + window_ns */
} shmt_bucket_info_t;

/*
 * shmt_limiter_buckets: the ring of limiter NAME (buckets mode, not per
 * client), oldest first, into OUT[0..CAP); returns how many buckets are in
 * use.  Errors: -EINVAL, -ENOENT, -EPERM (exact or rate mode, or per
 * client), SHMT_ECORRUPT (the state word counts more buckets than the ring
 * holds, or a slot keeps holding another bucket than the word implies
 * while the word stands still: damage), SHMT_EBUSYLOOP (grants turned the
 * ring over under 100,000 reads in a row).
 * Reads only, without a lock, beside grants: the state word, then each
 * bucket's slot, so the ring is the one that word describes, each close
 * time as read just after it; a ring that grants turn over meanwhile (its
 * slots reused for newer buckets) is read again.  kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_limiter_buckets(shmt_t *h, const char *name,
    shmt_bucket_info_t *out, size_t cap);

/* ---- Global limiters ------------------------------------------------------ */

/* What the daemon last knew of Redis, for a global limiter. */
enum shmt_global_state {
	SHMT_GLOBAL_UNKNOWN = 0,   /* no daemon has reported yet */
	SHMT_GLOBAL_ONLINE = 1,    /* leases come from Redis */
	SHMT_GLOBAL_OFFLINE = 2,   /* Redis unreachable: open leases are
	                            * used until they close, then refused */
	SHMT_GLOBAL_WAITING = 3,   /* Redis lost its state (a restart without
	                            * persistence): no lease for slack + window */
	SHMT_GLOBAL_MISMATCH = 4,  /* another host leases this name with other
	                            * parameters: nothing is leased */
	SHMT_GLOBAL_FALLBACK = 5   /* Redis unreachable, leases closed:
	                            * offline_limit in force (not fleet-safe) */
};

typedef struct shmt_global_stat {
	int state;                  /* enum shmt_global_state */
	uint32_t leases_open;       /* this host's leases workers may spend */
	uint64_t lease_cap;         /* uses the open leases hold, in all */
	uint64_t lease_used;        /* of which granted */
	shmt_time_t lease_left_ns;  /* until the last open lease closes */
	uint64_t host_in_flight;    /* uses this host holds in Redis (leases not
	                             * yet released, less what it gave back) */
	uint64_t fleet_in_flight;   /* every host's, as Redis counted them at
	                             * this host's last lease request */
	uint64_t rtt_ns;            /* Redis round trip of the last request */
	uint64_t rtt_max_ns;        /* the longest seen */
	uint64_t errors;            /* failed requests (connection, reply) */
	int last_error;             /* negative errno of the last failure */
	uint64_t leases;            /* leases taken since the daemon started */
	uint64_t leased_uses;       /* uses they held */
	uint64_t returned_uses;     /* unused uses given back at close */
	uint64_t requests;          /* Redis calls made (leases asked, given
	                             * back, refused), since the daemon started */
	uint64_t denied;            /* requests refused on this host */
	shmt_time_t updated_ns;     /* when the daemon last wrote this (0:
	                             * never; compare with shmt_now) */
} shmt_global_stat_t;

/*
 * shmt_global_stat: fill *OUT for the global limiter NAME: its open leases
 * (read from the lease words) and what the host's daemon last published.
 * Errors: -EINVAL (NULL argument), -ENOENT (no such limiter), -EPERM (not a
 * global limiter), SHMT_ECORRUPT (a lease word breaks its rules).  Reads
 * only; wait-free; kill -9 leaves nothing.  The daemon's fields are each
 * read atomically, not together.
 */
SHMT_EXPORT int shmt_global_stat(shmt_t *h, const char *name,
    shmt_global_stat_t *out);

/* ---- Dictionary ---------------------------------------------------------- */

/* Keys are 1..SHMT_KEY_MAX bytes, values 0..SHMT_VALUE_MAX bytes, any bytes. */
#define SHMT_KEY_MAX 1024
#define SHMT_VALUE_MAX 1048576

/*
 * The dictionary is a sharded string -> string hash in the segment.
 * Readers (shmt_get, shmt_dict_next) take no lock: they copy optimistically
 * and check the shard's version, retrying a bounded number of times; they
 * never return a torn or mixed value, and never crash even when the item
 * they read is freed and reused under them.  Writers take the shard's
 * lock, which recovers from a dead owner; a live owner is never robbed: a
 * writer that finds one process keeping the lock for 100 ms while it sleeps
 * or is stopped, or for 1 s in all (a stopped or long-preempted writer, or
 * a damaged lock word naming a live process) gives up with SHMT_ELOCKED,
 * changing nothing.  A writer that finds a
 * chain longer than a shard can hold (a cycle: damage) gives up with
 * SHMT_ECORRUPT, changing nothing.  A writer killed at any instruction
 * leaves the shard usable and every other key intact (the next writer, or a reader
 * that finds the version stuck, repairs the shard: every key keeps its old
 * or its new value).  A write builds a new item and links it with one
 * store, or, when the new value fits the old item's block (items of up to
 * 256 bytes), writes over the old item with the shard's version odd, after
 * saving it in the shard's undo record, from which the repair puts it back
 * if the writer dies half way.
 *
 * TTLs are in milliseconds (0: no expiry); an expired item reads as absent
 * and its memory is reclaimed by writers and by shmt_housekeep().  Without
 * shmt_set_clock, a write that sets an expiry reads CLOCK_MONOTONIC (the
 * expiry is exact); a get, and a write without one, read
 * CLOCK_MONOTONIC_COARSE (one tick behind at most, 1-4 ms), so an item may
 * still be read, found present by shmt_add or counted on by shmt_incr up to
 * one tick after it expired, never before.
 */

/*
 * shmt_get: copy the value of KEY (KLEN bytes) into BUF (CAP bytes) and set
 * *VLEN to its length.  Returns 0; -ENOENT (absent or expired); -ERANGE
 * when CAP is too small (then *VLEN holds the length needed; BUF holds
 * nothing usable: a read that a concurrent write made retry may have
 * filled it with the discarded copy of a shorter value); -E2BIG (KLEN 0 or over SHMT_KEY_MAX: -EINVAL for 0); -ENODEV
 * (the segment has no dictionary); -EAGAIN when writers kept the shard busy
 * through every retry.  Lock-free for readers; kill -9 leaves nothing.
 */
SHMT_EXPORT int shmt_get(shmt_t *h, const void *key, size_t klen, void *buf,
    size_t cap, size_t *vlen);

/*
 * shmt_set: store VAL (VLEN bytes) under KEY with a TTL of TTL_MS
 * milliseconds; TTL 0 means the segment's default TTL (dict_default_ttl_ms
 * at creation), and no expiry when that is 0.  Returns 0, or -EINVAL,
 * -E2BIG (key over SHMT_KEY_MAX or over the segment's dict_max_key),
 * -EMSGSIZE (value over SHMT_VALUE_MAX or over the segment's
 * dict_max_value), -ENOSPC (no room and eviction off, or the item can never
 * fit), -ENODEV, SHMT_ELOCKED (a live process kept the shard's lock: 100 ms
 * while it sleeps or is stopped, 1 s in all), SHMT_ECORRUPT (the key's chain
 * loops, or the walk for room met more items than the shard's heap holds:
 * damage that shmt_check names), -ENOMEM (the shard's last writer died
 * and its repair found no memory: the next writer repairs it); on any
 * error nothing changes (only
 * expired items, which read as absent, may be reclaimed).  Replacing a value needs room for the new item
 * while the old one is still there: a new item that needs the whole shard
 * can never fit beside the old one, and is refused before anything is
 * evicted.  kill -9 during the call leaves the old value or the new one.
 */
SHMT_EXPORT int shmt_set(shmt_t *h, const void *key, size_t klen,
    const void *val, size_t vlen, uint64_t ttl_ms);
/* shmt_add: shmt_set only if KEY is absent (else -EEXIST); the same
 * limits and the same default TTL.  Under the key's shard lock, as
 * shmt_set: kill -9 during the call leaves KEY absent or with the new
 * value (the shard repaired as after any writer killed). */
SHMT_EXPORT int shmt_add(shmt_t *h, const void *key, size_t klen,
    const void *val, size_t vlen, uint64_t ttl_ms);
/* shmt_replace: shmt_set only if KEY is present (else -ENOENT); the TTL is
 * replaced too (TTL 0: the segment's default TTL); the same limits.  Under
 * the key's shard lock, as shmt_set: kill -9 during the call leaves the
 * old value and TTL or the new ones. */
SHMT_EXPORT int shmt_replace(shmt_t *h, const void *key, size_t klen,
    const void *val, size_t vlen, uint64_t ttl_ms);
/* shmt_del: remove KEY.  Returns 0 or -ENOENT (and the errors of set).
 * Under the key's shard lock, as shmt_set: kill -9 during the call leaves
 * KEY present or removed. */
SHMT_EXPORT int shmt_del(shmt_t *h, const void *key, size_t klen);

/*
 * shmt_incr: add DELTA to the value of KEY, a decimal integer (as text, so
 * shmt_get reads it), and store the sum in *RESULT (may be NULL).  An
 * absent key counts as 0 and is created with the segment's default TTL
 * (none unless dict_default_ttl_ms was set at creation); an existing key
 * keeps its TTL.  Returns 0, -EINVAL (the value is not a decimal integer
 * that fits in int64_t), -ERANGE (the sum overflows), and the errors of
 * shmt_set: -E2BIG for a key over the segment's dict_max_key, -EMSGSIZE
 * when the sum's text is longer than its dict_max_value; nothing changes
 * on any error, and *RESULT is set only on success.  Atomic with respect
 * to every other writer of the key: the read, the sum and the store are
 * made under the key's shard lock (readers do not wait).  kill -9 during
 * the call leaves the old value or the sum, never a mix (the shard
 * repaired as after any writer killed).
 */
SHMT_EXPORT int shmt_incr(shmt_t *h, const void *key, size_t klen,
    int64_t delta, int64_t *result);

/*
 * shmt_dict_next: walk the keys.  Start with *CURSOR = 0; each call copies
 * one key into KBUF (KCAP bytes, at least SHMT_KEY_MAX to never fail) with
 * its length in *KLEN and returns 1, or returns 0 when the walk is over.
 * Keys present for the whole walk are returned once; keys added or removed
 * during it may or may not be.  That holds across moves of the segment
 * into generations with other sizes (the walk goes on in the live one):
 * keys come in an order of their keyed hash that no size changes, and the
 * cursor is a place in that order, not in a table.  Two keys that share
 * their place (63 bits of their keyed hash: for n keys, a chance of about
 * n^2 / 2^64 that some pair does) count as one, and the walk returns one
 * of them.  A call reads one bucket's chain in every shard, without a
 * lock.  Errors: -EINVAL (also a cursor no walk gives: above 2^63),
 * -ERANGE (KCAP too small: *KLEN has the length; the cursor does not
 * move), -ENODEV, -EAGAIN, SHMT_ECORRUPT (a chain longer than its shard
 * can hold: a cycle, found before any key of that chain is returned
 * twice; or a chain that holds a key of another bucket, which no writer
 * puts there: the walk reads each item once), SHMT_ESTALE (the segment was removed).  Thread-safe; the cursor
 * is the caller's.
 */
SHMT_EXPORT int shmt_dict_next(shmt_t *h, uint64_t *cursor, void *kbuf,
    size_t kcap, size_t *klen);

typedef struct shmt_dict_stat {
	uint32_t shards;
	int eviction;
	uint64_t bytes;           /* heap bytes in all shards */
	uint64_t used;            /* bytes in allocated blocks */
	uint64_t items;
	uint64_t value_room;      /* a value of up to this many bytes fits now,
	                           * under any key, without evicting anything */
	uint64_t evictions;       /* items evicted to make room */
	uint64_t expirations;     /* expired items reclaimed */
	uint64_t repairs;         /* shards repaired after a dead writer */
} shmt_dict_stat_t;

/* shmt_dict_stat: fill *OUT.  Errors: -EINVAL, -ENODEV.  Reads only,
 * without a lock, beside readers and writers: each shard's figures are
 * read atomically, not all at one instant.  kill -9 leaves nothing. */
SHMT_EXPORT int shmt_dict_stat(shmt_t *h, shmt_dict_stat_t *out);

/*
 * shmt_hit: count one occurrence of KEY now and set *COUNT (may be NULL) to
 * the number of its occurrences in the trailing window W (counters_window_ns):
 * those at times t with now - t < W, this one included.  The answer is
 * within max(1, eps x exact) of the exact number, eps = counters_error_ppm
 * (1% by default), on every trace (bursts in the oldest part of the window,
 * keys hit once a day or a million times a second), and exact while the
 * exact number is at most k = ceil(2 / (3 eps)) (67 at 1%).  Each key keeps
 * an exponential histogram (lib/counters.c proves the bound): its memory
 * grows with the logarithm of its count, from one 128-byte block for a key
 * hit a few times (short keys) to at most 32 KiB at 1% for a key hit a
 * million times a second all day; an update costs O(1) amortised.  A key
 * silent for a whole window disappears.  When a counter shard is full, the
 * keys last hit longest ago are evicted in a batch: those of the oldest of
 * 64 equal slices of the shard's last-hit times that together hold at most
 * N / 8 of its N keys, or else the one key hit least recently.  So a key
 * hit again before 7N/8 other keys of its shard were hit keeps its count,
 * and every key evicted was hit no later than every key kept.  Only a key
 * that needs a larger block evicts: one whose histogram came to need a
 * block two orders smaller moves there only when such a block is free, and
 * else stays where it is.  A full shard walk pays for N / 8 evictions, in
 * the call that triggers it, under the shard's lock; it passes at most as
 * many items as the shard's heap can hold, in all its chains.
 * Concurrency: any number of threads and processes; calls on keys of one
 * shard take its lock in turn.  A kill -9 in the middle
 * leaves the key's count within its bound, with or without the killed
 * call's hit (the next locker settles the item).  Errors: -EINVAL, -E2BIG,
 * -ENOSPC (only when the key's histogram cannot fit in its shard: nothing
 * is counted), -ENODEV, SHMT_ELOCKED (as shmt_set), SHMT_ECORRUPT (the
 * key's item is not of a counter's shape, its chain loops, or the walk for
 * room met more items than the shard's heap holds: nothing is counted).
 */
SHMT_EXPORT int shmt_hit(shmt_t *h, const void *key, size_t klen,
    uint64_t *count);

/*
 * shmt_count: set *COUNT to the number of KEY's hits in the trailing window
 * (now - w, now], w = WINDOW_NS (0: the configured window W), without
 * counting one, within the same bound as shmt_hit relative to the exact
 * number in that window:
 *
 *   |*COUNT - #{hits t : now - t < w}|  <=  max(1, eps x that number)
 *
 * and exact while that number is at most k (see shmt_hit).  With w = W at
 * the time of a hit it answers what that shmt_hit answered.  A key never
 * hit, evicted or silent for W answers 0.  It takes the key's shard lock
 * (as shmt_hit) and writes nothing, so a kill -9 in the middle leaves the
 * segment as it was (the next locker takes the lock over).  Costs O(log
 * count) under the lock.  Returns 0.  Errors: -EINVAL (H, KEY or COUNT
 * NULL, KLEN 0, WINDOW_NS above W), -E2BIG (KLEN above SHMT_KEY_MAX),
 * -ENODEV (no counters in the segment), SHMT_ELOCKED (as shmt_set),
 * SHMT_ECORRUPT (the key's item is not of a counter's shape, or its chain
 * loops).  *COUNT is 0 on every error.
 */
SHMT_EXPORT int shmt_count(shmt_t *h, const void *key, size_t klen,
    uint64_t window_ns, uint64_t *count);

/*
 * shmt_count_bound: the exact counts that an answer COUNT of shmt_hit or
 * shmt_count may stand for under this segment's counters: every exact
 * count C with |COUNT - C| <= max(1, eps C), where C is COUNT itself when
 * C <= k (see shmt_hit).  Sets *LO and *HI (each may be NULL) to the least
 * and the greatest such C (equal when COUNT is exact: below k), and
 * *ERROR_PPM (may be NULL) to eps in parts per million.  Arithmetic on the
 * segment's parameters only: no lock, nothing written, any thread.
 * Returns 0.  Errors: -EINVAL (H NULL), -ENODEV (no counters).
 */
SHMT_EXPORT int shmt_count_bound(shmt_t *h, uint64_t count, uint64_t *lo,
    uint64_t *hi, uint32_t *error_ppm);

/* ---- Hot keys ------------------------------------------------------------ */

/*
 * Every shmt_get (and, with analyzer_clients, every shmt_try_use) feeds the
 * analyzer, which answers: which keys had more than the threshold (10%) of
 * the requests of the last window (60 s)?
 *
 * The window W is counted in n = subwindows sub-windows that tile the clock
 * exactly: sub-window i spans [floor(i W / n), floor((i + 1) W / n)), so
 * each is w = floor(W / n) (subwindow_ns) or w + 1 ns long and any n in a
 * row span exactly W, whether or not n divides W.  Each
 * sub-window has one Misra-Gries summary per writer stripe (k counters each,
 * see shmt_top_info_t.counters, in groups of `probe`: a key's hash picks
 * its group); a request updates one group of one summary of one
 * sub-window, written by its thread alone, so processes never write the
 * same cache line.  A query merges the summaries of the sub-window holding
 * now and the n before it.  The covered span [span_start_ns, now] always
 * holds the exact window [now - W, now]: its slop is extra time, never
 * missing time, less than W / n rounded up (span_end_ns - span_start_ns <
 * W + ceil(W / n)).  A key missing from every summary had at most `error`
 * requests in the span, and error <= N / (probe + 1) on every trace (the
 * groups are as large as a summary allows, up to 128 counters: one group of
 * 128 with the default 1 MiB, N / 129), with probe >= 1.2 / threshold.
 *
 * The answer is about the exact window.  The newest n sub-windows lie
 * inside it; the oldest holds its start now - W.  Each summary marks its
 * offset and count at the first request of each of 6 slices of its
 * sub-window and, cut by count, between pieces of its requests (a piece
 * ends when its weight, requests plus probe + 1 per offset step, reaches a
 * step that doubles as the summary fills its marks, or a quarter of it at
 * a later moment, so a burst at one moment ends a piece); each counter
 * keeps the number of the latest mark when it was last counted.  From the
 * oldest sub-window only its offset's growth since the last mark before
 * now - W counts against the exact window (error_window), only its
 * requests after the first mark at or after now - W count in
 * total_window, and a key last counted before that mark adds only to the
 * offset's growth.  So for every key, lower <= its requests in the exact
 * window <= upper (lower counts the newest n sub-windows only; upper - lower
 * is error_window plus what the key may have in the oldest sub-window from
 * now - W on), and a key in no summary had at most error_window of them.
 * The answer lists every key whose upper bound is over the threshold of
 * total_window, so it holds every key over the threshold of the exact
 * window whenever error_window is not over that threshold, and says so in
 * `certified`.  A listed key had more than threshold x total_window -
 * error_window requests in the exact window, less those it had in the
 * oldest sub-window before now - W.  A burst at one moment before now - W,
 * of any size, costs nothing; an answer can be uncertified only when now -
 * W falls inside a piece (spread over time) that stepped the offsets by
 * more than the threshold of total_window less the newest offsets: with the
 * default 1 MiB, 12 sub-windows and 10%, bursts of 99 to 1000 times a
 * minute's traffic at every slice, at one moment or spread over 83 ms, left
 * every answer certified in the tests (test_analyzer_window); with 5% and 6
 * sub-windows, spread bursts left up to 30 of the 359 answers around them
 * uncertified.  A request whose thread's clock is
 * behind its stripe's counts at the stripe's time.
 * Times: without shmt_set_clock a get counts at CLOCK_MONOTONIC_COARSE
 * (behind the precise clock by at most one tick L, 1-4 ms) and the query
 * reads CLOCK_MONOTONIC, so "the exact window" above is the requests
 * counted at times in [now - W, now]: every request of [now - W + L, now],
 * none before now - W.  Against the true [now - W, now], a key may have up
 * to its requests of [now - W, now - W + L) more than upper (and than
 * error_window when in no summary); lower still bounds it from below.
 * With an injected clock, every time is that clock's.
 * Keys are told apart by a 64-bit hash: the bounds could only be wrong for
 * two distinct keys with the same 64-bit hash (about n^2 / 2^65 for n keys).
 * A process killed in the middle of an update leaves bounds that hold.
 * Memory is fixed at creation (analyzer_bytes), whatever the keys.
 */

#define SHMT_HOT_DICT 1          /* a dictionary key (shmt_get) */
#define SHMT_HOT_CLIENT 2        /* a client id (shmt_try_use) */

typedef struct shmt_hotkey {
	uint8_t key[SHMT_KEY_MAX];
	/* The key's bytes are kept once it is seen 8 times by one writer in
	 * a sub-window (its first 40 bytes), in a table of two places per
	 * key where a key that one writer saw more often in a sub-window of
	 * the span keeps its place over a colder one; a dictionary key is
	 * also found in the dictionary by its hash.  A key known by its hash
	 * alone (seen fewer times per writer and sub-window, or both its
	 * places held by keys at least as hot for their writers, or its
	 * entry torn by a writer killed in the middle until the key's next
	 * count at a power of two, and not in the dictionary) has klen and
	 * kept 0. */
	uint32_t klen;           /* the key's full length, 0: unknown */
	uint32_t kept;           /* bytes of it in key[] (< klen: truncated) */
	int kind;                /* SHMT_HOT_DICT or SHMT_HOT_CLIENT, always */
	uint64_t hash;           /* keyed with the segment's secret: the same
	                          * key has another hash in another segment */
	uint64_t lower, upper;   /* bounds of its requests in the exact
	                          * window [now - W, now] */
	double share;            /* lower / total: at most its share of the
	                          * exact window */
} shmt_hotkey_t;

typedef struct shmt_top_info {
	shmt_time_t span_start_ns;   /* the covered span: [start, end] */
	shmt_time_t span_end_ns;
	shmt_time_t window_ns, subwindow_ns;
	uint64_t total;          /* requests counted in the span */
	uint64_t total_window;   /* of them, certainly in the exact window */
	uint64_t error;          /* D, the sum of the summaries' offsets: a
	                          * key in no summary had at most this many
	                          * requests in the span (<= total / (probe +
	                          * 1)) */
	uint64_t error_window;   /* at most error: a key in no summary had at
	                          * most this many requests in the exact
	                          * window, and upper - lower of a listed key
	                          * is at least this; a key absent from the
	                          * answer had at most max(error_window,
	                          * threshold_ppm x total_window / 10^6) of
	                          * them */
	uint64_t error_oldest;   /* what a listed key's upper - lower -
	                          * error_window may hold of its requests
	                          * before the exact window (in the oldest
	                          * sub-window): a listed key had more than
	                          * threshold_ppm x total_window / 10^6 -
	                          * error_window - error_oldest requests in
	                          * the exact window */
	uint32_t threshold_ppm;
	int certified;           /* every key with more than the threshold of
	                          * the exact window's requests is listed
	                          * (error_window is not over the threshold
	                          * of total_window) */
	uint32_t stripes;         /* writer stripes (summaries per sub-window) */
	uint32_t counters, probe; /* counters per summary, per group */
	uint64_t memory_bytes;   /* fixed at creation */
} shmt_top_info_t;

/*
 * shmt_top_keys: the hot keys, most requested first, into OUT[0..CAP), and
 * the span they cover into *INFO (may be NULL).  Returns how many keys are
 * hot (may exceed CAP), or -EINVAL, -ENODEV (no analyzer), -ENOMEM (the
 * private memory the merge takes, freed before it returns).  OUT and INFO
 * are the caller's.
 * Lock-free, beside any other call; reads what concurrent writers have
 * published (a summary that changes under four reads in a row is left
 * out) and writes nothing to the analyzer; a key known by its hash alone
 * is looked up in the dictionary as shmt_get looks.  kill -9 leaves
 * nothing.
 */
SHMT_EXPORT int shmt_top_keys(shmt_t *h, shmt_hotkey_t *out, size_t cap,
    shmt_top_info_t *info);

/* ---- Checking ------------------------------------------------------------ */

/* Called once per problem with a sentence naming it (owned by the library,
 * valid during the call). */
typedef void (*shmt_check_fn)(void *ctx, const char *problem);

/*
 * shmt_check: scan the whole segment for inconsistency and name each
 * problem.  It is the one set of rules (the CLI's check calls it and adds
 * none).  It covers:
 * - the header and region table against what was validated at open, the
 *   arena's allocation mark, and the daemon's heartbeat (never later than
 *   CLOCK_MONOTONIC now);
 * - every limiter row's parameters and storage; the state word of every
 *   ring of buckets (the limiter's own and each client entry's), each
 *   sealed and active bucket's slot, the sealed counts adding up to the
 *   uses in flight, close times in serial order;
 * - every global limiter's lease words: state, count within cap, cap
 *   within the limit, and no open lease's deadline after now + slack_ns
 *   (its daemon sets it less than slack_ns after it asked Redis);
 * - every exact log: each slot holding the grant the grant hint implies
 *   (a slot ahead of it makes every try return SHMT_EBUSYLOOP, one behind
 *   or a negative hint SHMT_ECORRUPT);
 * - every dictionary and counter shard: chains, free lists, item and byte
 *   counts, every heap byte in exactly one block, a version left odd, a
 *   lock that names a dead writer (damage pending repair), each counter's
 *   value of its shape with its rings inside their slots, and, at rest, a
 *   header that says what its buckets hold (the total of their hits, the
 *   highest level holding one, times that never go down from the oldest
 *   bucket to the newest, none in the future, a floor no newer than the
 *   oldest bucket).
 * Times in the future.  Every stored time is a clock value read by the call
 * that stored it, and the check reads its clock (the handle's, see
 * shmt_set_clock) after reading the time, so a time is damage when it lies
 * beyond the latest a legitimate call could store: a bucket's close time
 * after now + slack_ns (a bucket closes slack_ns after it opens, at the
 * latest), an exact log's grant time after now.  This needs the clock
 * shared by every process that uses the segment (see Caveats).
 *
 * Calls REPORT (may be NULL) once per problem and returns how many it
 * found, or -EINVAL, or SHMT_ESIZE after reporting that the object was
 * truncated after the open (then nothing else is scanned: the missing pages
 * would raise SIGBUS).  An exact log names each kind of damage once (its
 * first slot and how many slots show it); a ring names its first bad
 * bucket; a shard names each bad chain, free list and count.
 *
 * Read-only: it takes no lock and stores nothing in the segment, so it may
 * run beside any other call and never waits for a lock holder.  A limiter
 * word or grant hint that changes while it is read is read again (a few
 * times at most, then left unchecked).  A shard is sound when a scan of it
 * finds nothing; its problems count only when a scan saw it at rest (its
 * lock word and version the same before and after, naming no live writer)
 * and a second such scan finds them too.  A shard that writers never leave
 * at rest for 100 ms while scans find problems is left unchecked; one whose
 * lock the same live thread holds for 100 ms while nothing moves is named
 * ("lock held by live thread").  Watching shards that are not at rest
 * takes at most 100 ms per shard and 500 ms per call (once that is spent,
 * such shards are left unchecked, and named only when the full 100 ms was
 * watched), whatever the lock words say.  Safe on a damaged segment: every
 * offset is checked and every walk is bounded (a chain by the shard's heap
 * blocks, each visited once).  kill -9 during the call leaves nothing (it
 * changes nothing).
 */
SHMT_EXPORT int shmt_check(shmt_t *h, shmt_check_fn report, void *ctx);

/* Flags of shmt_check_ex. */
#define SHMT_CHECK_REPAIR 0x1U

/*
 * shmt_check_ex: shmt_check with FLAGS: 0 is shmt_check; SHMT_CHECK_REPAIR
 * reports first, exactly as shmt_check, then repairs what it named, where
 * a repair can never allow more than the limit:
 * - a dictionary or counter shard: it takes the shard's lock (waiting for
 *   a live holder only as long as a writer would) and rebuilds the shard
 *   as a writer does after a dead one (chains cut at the first bad item,
 *   counts recounted, free lists rebuilt from the gaps; items past a cut
 *   are lost);
 * - a ring of buckets: close times past now + slack_ns become now +
 *   slack_ns, and one earlier than the bucket before it is raised to that
 *   one's (both only delay releases);
 * - an exact log: the hint moves past every grant the log records, each
 *   slot is made to hold the grant that hint implies (a slot rewritten so
 *   is stamped now: it takes a use for a window), grant times past now
 *   become now;
 * - a shared rate or exact limiter's state word whose second half holds
 *   more than its parameter generation: the rest is cleared (the
 *   generation, and so the parameters in force, stay).
 * Other limiter damage (a state word out of range, a slot with another
 * serial, counts that do not add up, a bad row) is named, not repaired:
 * define the limiter in a new segment.  So is a counter whose header
 * contradicts its buckets (named until the key's item expires).  Returns
 * the problems found before the repair (a shard it could not lock counts
 * one more), or -EINVAL (H
 * NULL, unknown flag).  Run it again without the flag to see what is left.
 * A repair may run beside other calls: a shard is rebuilt under its lock,
 * and limiter slots, hints and times change by CAS, so a racing call sees
 * the old value or the new one.  kill -9 during a repair leaves a shard's
 * lock to the next writer, which repairs again, and a limiter partly
 * repaired (the next check names the rest).
 */
SHMT_EXPORT int shmt_check_ex(shmt_t *h, unsigned flags, shmt_check_fn report,
    void *ctx);

/* ---- Housekeeping -------------------------------------------------------- */

/*
 * shmt_housekeep: do now what callers would otherwise do lazily: seal and
 * release due buckets of every buckets-mode limiter, reclaim the idle
 * client entries of the per-client ones, in buckets and in rate mode (an
 * entry whose arrival time has passed; exact logs and shared arrival times
 * age alone), free expired dictionary items and counters, reap the slots (and
 * analyzer stripes) of dead processes.  Sets *NEXT_NS (may be NULL) to the
 * earliest time at which there will be work again (UINT64_MAX: none
 * known).  Returns the number of actions taken, or an error (among them
 * SHMT_ESIZE when the object was truncated after the open: then nothing is
 * touched, and the caller should let go of the segment; SHMT_ESTALE when the
 * segment was removed, by shmt_unlink or by hand: an object left without a
 * name is retired here, so that every process attached learns of it;
 * SHMT_ELOCKED when a live process kept a client or shard lock past its
 * bound, as in shmt_set: the rest of that store, or the other client
 * tables, wait for the next call (one such wait per store and for the
 * client tables, 1 s at most each); shared rings, the other store, the
 * slots and the stripes are still housekept, the error comes after, and
 * *NEXT_NS is the time of the call: the work skipped is due at once;
 * SHMT_ECORRUPT when a dictionary or counter shard's chains hold more
 * items than its heap can, a loop or chains that share items: each
 * shard's walk passes at most that many items in all, so a damaged shard
 * costs one heap's worth of steps under its lock; its walk stops there,
 * everything else is housekept, the error comes after (before
 * SHMT_ELOCKED), and shmt_check names the damage, which its repair
 * mends).
 * Concurrency: any number of processes may call it at once, beside every
 * other call; the daemon calls it on time.  Buckets are sealed and released
 * by CAS, as callers do; a per-client limiter's entries are reclaimed under
 * its client lock (claims of new clients wait meanwhile); expired items and
 * counters are freed under their shard's lock (writers of that shard wait,
 * readers never do); slots and stripes are reaped by CAS.
 * kill -9 in the middle leaves what it did done and the rest for later
 * (each release, reclaim and reap is one CAS), and a client or shard lock
 * it held to the next process that needs it, which finds the owner dead
 * and takes the lock over (lib/lock.c): a shard is then repaired as after
 * any writer killed, every item kept or freed whole (lib/store.c).
 */
SHMT_EXPORT int shmt_housekeep(shmt_t *h, shmt_time_t *next_ns);

#ifdef __cplusplus
}
#endif
#endif /* SHMTHROTTLE_H */
