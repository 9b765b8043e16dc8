/* SPDX-License-Identifier: MIT */
/*
 * metrics.h: private to shmthrottled.  The HTTP endpoint that serves the
 * segment's metrics (prom.h) to Prometheus, on a thread of its own run by
 * libmicrohttpd, so a slow scraper never delays housekeeping.
 */
#ifndef SHMTD_METRICS_H
#define SHMTD_METRICS_H

#include "prom.h"

#include <pthread.h>
#include <stddef.h>

struct shmtd_metrics;

/*
 * shmtd_metrics_start: listen on ADDR ("127.0.0.1:9464", "[::1]:0"; see
 * shmtd_addr_parse) and serve GET /metrics from the segment of H and the
 * histogram LAG (both must outlive the server), holding LOCK while it
 * reads them; the caller holds LOCK while its own thread works on the
 * segment.  Writes the address it
 * listens on, with the port chosen when ADDR asked for port 0, into
 * BOUND (CAP bytes).  Returns 0 with *OUT set, or -EINVAL (bad address),
 * -errno of socket/bind/listen, or -EIO (the HTTP server did not start),
 * with ERR saying which.  Call it after any fork: the server runs a
 * thread.
 */
int shmtd_metrics_start(const char *addr, shmt_t *h,
    const struct shmtd_lag_hist *lag, pthread_mutex_t *lock, char *bound,
    size_t cap,
    struct shmtd_metrics **out, char *err, size_t errcap);

/* shmtd_metrics_stop: stop serving, close the socket, free M (NULL: no-op).
 * Waits for a scrape in progress to end. */
void shmtd_metrics_stop(struct shmtd_metrics *m);

#endif /* SHMTD_METRICS_H */
