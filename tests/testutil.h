/* This file is private to the tests of libshmthrottle. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_TESTUTIL_H
#define SHMT_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "shmthrottle.h"

/* A segment name unique to this process and call: "/shmt-test-PID-N-TAG". */
void tu_segname(char *buf, size_t cap, const char *tag);

/* A hand-driven clock for shmt_set_clock(). */
struct tu_clock {
	shmt_time_t now;
};
shmt_time_t tu_clock_read(void *ctx);

/* The seed of TEST's random choices: $SHMT_SEED when set (a number, or
 * "random" for one drawn from the clock: exploration by hand), else one
 * fixed per test (the gate's verdict depends on the code alone).  Printed
 * either way, so that a run can be replayed with SHMT_SEED=<seed>. */
uint64_t tu_seed(const char *test);
/* xorshift64* */
uint64_t tu_rand(uint64_t *state);
/* The id of a thread that existed and is gone (a forked child, reaped):
 * what a lock word of a writer killed inside names. */
uint32_t tu_dead_tid(void);
/* Give H's segment a secret drawn from *STATE (tu_rand), before anything
 * is stored in it: where keys land (analyzer groups and names, client
 * entries, dictionary buckets) then follows the test's seed, so a verdict
 * that depends on it replays with SHMT_SEED like the rest. */
void tu_secret(shmt_t *h, uint64_t *state);

/* Scale for stress loops: $SHMT_STRESS_SCALE (default 1.0; sanitizer
 * builds set it lower in CI). */
double tu_scale(void);

/* A cmocka teardown: remove every /dev/shm object named after this
 * process (tu_segname's "shmt-test-PID-"), so that a test that failed
 * before its own cleanup leaves nothing behind.  Always returns 0. */
int tu_sweep(void **state);

/* Count open file descriptors of this process (leak checks). */
int tu_fd_count(void);

/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t tu_mono_ns(void);

/* Sleep MS milliseconds: only between the polls of a bounded wait for a
 * real process, never to let a window pass (inject the clock instead). */
void tu_pause_ms(int ms);

/* The segment the check and CLI tests damage: 8 limiters, 16 slots, a
 * 1 MiB arena, and the smallest dictionary and counters the library
 * makes, two shards each, so that a test can damage one shard and find
 * the other intact. */
void tu_config_small(shmt_config_t *cfg);

/* The hostile tests' segment: 16 slots, a 64 KiB arena, and one shard
 * each of a 2 MiB dictionary and of 64 KiB of counters (4 sub-windows of
 * a 4 s window); the caller sets the limiters and the analyzer. */
void tu_config_tiny(shmt_config_t *cfg);

/* Close H and unlink its segment SEG, which must exist. */
void tu_close_unlink(shmt_t *h, const char *seg);

/* The limiters the check tests damage, defined in H: "api" (10 uses an
 * hour, in buckets of 1 s or 4 uses), "pc" (the same per client, 16
 * entries) and "exact" (3 uses an hour, exact mode). */
void tu_define_check_limiters(shmt_t *h);

/* ---- Files ---------------------------------------------------------------- */

/* Write TEXT to PATH (fails the test when it cannot). */
void tu_write_text(const char *path, const char *text);
/* The whole of PATH, NUL-terminated, in a malloc'd buffer (fails the test
 * when it cannot be read). */
char *tu_read_all(const char *path);
/* 1 when PATH exists and holds NEEDLE. */
int tu_file_has(const char *path, const char *needle);
/* The file PATH in the zero-run form of tests/data/zr.py, unpacked: a
 * malloc'd buffer of *LEN bytes (fails the test on a malformed file). */
unsigned char *tu_zr_load(const char *path, size_t *len);
/* A private temporary directory "/tmp/shmt-test-TAG-XXXXXX" in DIR. */
void tu_tmpdir(char *dir, size_t cap, const char *tag);
/* Remove DIR, the files in it and its subdirectories: 0, or -1. */
int tu_rmdir(const char *dir);

/* ---- Processes ------------------------------------------------------------ */

/* A pipe in P, stdout flushed, then fork(): the child's pid, or 0 in the
 * child (fails the test when the pipe or the fork fails).  Each side
 * closes the end it does not use. */
pid_t tu_fork_pipe(int p[2]);

/* Run FN(ARG) in a forked child that dies after ALARM_S seconds, and
 * return what it returned, passed back on a pipe; fails the test when the
 * child does not exit normally after sending it. */
int tu_child_result(int (*fn)(void *arg), void *arg, unsigned alarm_s);

/* Start daemon BIN in the foreground on config CONF and segment SEG, with
 * extra ARGS and environment ENVS ("NAME=VALUE"; both NULL-terminated, may
 * be NULL), its stderr appended to LOG.  Returns its pid. */
pid_t tu_daemon_spawn(const char *bin, const char *conf, const char *seg,
    const char *log, const char *const *args, const char *const *envs);
/* Wait up to WAIT_MS for *PID to exit: its exit status, with *PID set to 0
 * once reaped.  Fails the test when it died of a signal (reaped all the
 * same) or did not exit in time (left running for the teardown to kill). */
int tu_wait_exit(pid_t *pid, int wait_ms);

/* ---- Inside a segment (tests that damage one on purpose) ------------------ */

struct shmt_lim;
struct shmt_store;
struct shmt_shard;
struct shmt_item;

/* The limiter row named NAME (fails the test when there is none). */
struct shmt_lim *tu_row_of(shmt_t *h, const char *name);
/* The first byte of H's arena. */
char *tu_arena(shmt_t *h);
/* Shard I of store ST. */
struct shmt_shard *tu_shard(const struct shmt_store *st, uint32_t i);
/* The first item of the first non-empty chain of ST's shard I, or NULL. */
struct shmt_item *tu_first_item(const struct shmt_store *st, uint32_t i);

#endif
