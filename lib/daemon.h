/* SPDX-License-Identifier: MIT */
/*
 * What only the daemon may call: claiming a segment as its one daemon, the
 * heartbeat and lag it publishes, and the few facts of the format it names
 * in its messages.  Private to libshmthrottle and shmthrottled; the daemon
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

#endif /* SHMT_DAEMON_H */
