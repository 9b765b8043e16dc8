/* SPDX-License-Identifier: MIT */
/*
 * lease.h: the daemon's lease thread, which keeps this host's global
 * limiters supplied with uses leased from Redis (the design and its proof
 * are at the top of lib/global.c; the Redis side at the top of lease.c).
 */
#ifndef SHMTD_LEASE_H
#define SHMTD_LEASE_H

#include "config.h"

#include <stddef.h>

struct shmtd_lease;

/*
 * shmtd_lease_start: start the lease thread for the global limiters of CFG
 * in segment CFG->segment (already defined there).  *OUT is NULL when CFG
 * has no global limiter.  Returns 0, or a negative errno with ERR saying
 * why (a limiter missing from the segment, no memory, no thread).  Redis
 * being unreachable is not an error: the thread keeps trying.
 */
int shmtd_lease_start(const struct shmtd_config *cfg, struct shmtd_lease **out,
    char *err, size_t errcap);

/* Stop the thread: close every lease it holds, give back their unused
 * uses when Redis answers, and free L (NULL: nothing). */
void shmtd_lease_stop(struct shmtd_lease *l);

#endif /* SHMTD_LEASE_H */
