/* SPDX-License-Identifier: MIT */
/*
 * prom.h: shared by shmthrottled (its /metrics endpoint) and shmthrottle
 * (`stat --prometheus`), so that both write the same metric names.  The
 * segment's state in Prometheus' text exposition format (version 0.0.4),
 * read through the public API only, and the histogram of the daemon's
 * housekeeping lag.
 */
#ifndef SHMTD_PROM_H
#define SHMTD_PROM_H

#include "shmthrottle.h"

#include <stdint.h>
#include <stdio.h>

/* Upper bounds of the lag histogram's buckets, in nanoseconds: from 100 us
 * (a wake-up on an idle host) to 5 s (a daemon that stalled for several
 * heartbeats); the last bucket, +Inf, holds the rest. */
#define SHMTD_LAG_BUCKETS 10

/*
 * The housekeeping lag: how late each housekeeping run started after its
 * deadline.  One writer (the daemon's loop), any number of readers (the
 * metrics thread): every field is read and written with relaxed atomics,
 * and the per-bucket counts are not cumulative, so a reader that sums them
 * gets monotonic cumulative buckets and a count equal to the +Inf bucket
 * even while the writer goes on.  Zero-initialise.
 */
struct shmtd_lag_hist {
	uint64_t lh_counts[SHMTD_LAG_BUCKETS + 1];
	uint64_t lh_sum_ns;
};

/* shmtd_lag_observe: count one run that started LAG_NS late. */
void shmtd_lag_observe(struct shmtd_lag_hist *lh, uint64_t lag_ns);

/*
 * shmtd_prom_write: write every metric of the segment of H (and LAG, when
 * not NULL: the daemon's own histogram, which the CLI has not) to F.  Returns 0, -ENOMEM, -EIO (F failed) or an error of
 * shmt_segment_stat.  Each value is read atomically, but the whole is not
 * one consistent picture while workers run.
 */
int shmtd_prom_write(FILE *f, shmt_t *h, const struct shmtd_lag_hist *lag);

#endif /* SHMTD_PROM_H */
