/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint: libmicrohttpd parses HTTP on its own thread; each
 * GET /metrics builds the exposition text from the segment into a memory
 * stream and hands it over.  The listening socket is bound here rather than
 * by libmicrohttpd, so a refused address gets its errno in the log and a
 * port of 0 can be read back.  The handle is shared with the daemon's loop,
 * which the API allows for threads of one process; the two take turns on
 * the segment under the daemon's lock.  The library reads its statistics
 * without the shard locks while writers update them under those locks, as
 * it does for any other process; within the daemon the lock keeps the
 * housekeeping's writes and a scrape's reads apart.  A scrape holds it only
 * while the page is built in memory, never while it is sent, so a slow
 * scraper does not delay housekeeping.
 */
#include "metrics.h"
#include "addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

/* Scrapers are few; a bound keeps a flood of connections from costing
 * more than this many file descriptors and a bit of memory each. */
#define MAX_CONNECTIONS 16
/* Seconds an idle connection is kept. */
#define CONNECTION_TIMEOUT_S 10

struct shmtd_metrics {
	struct MHD_Daemon *mhd;
	int fd;
	shmt_t *h;
	const struct shmtd_lag_hist *lag;
	pthread_mutex_t *lock;
};

static enum MHD_Result
reply(struct MHD_Connection *c, unsigned status, const char *type,
    char *body, size_t len, int owned)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, body,
	    owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (r == NULL) {
		if (owned)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *c, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_len, void **req)
{
	static char not_found[] = "not found: the metrics are at /metrics\n";
	static char bad_method[] = "only GET and HEAD\n";
	static char failed[] = "cannot read the segment\n";
	struct shmtd_metrics *m = cls;
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
		    bad_method, strlen(bad_method), 0);
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, "text/plain", not_found,
		    strlen(not_found), 0);
	if ((f = open_memstream(&body, &len)) == NULL)
		return MHD_NO;
	pthread_mutex_lock(m->lock);
	rc = shmtd_prom_write(f, m->h, m->lag);
	pthread_mutex_unlock(m->lock);
	if (fclose(f) != 0 && rc == 0)
		rc = -EIO;
	if (rc != 0) {
		free(body);
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain",
		    failed, strlen(failed), 0);
	}
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
	    body, len, 1);
}

/* Write the address FD is bound to as "HOST:PORT" or "[HOST]:PORT". */
static void
describe(int fd, char *buf, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[INET6_ADDRSTRLEN];

	buf[0] = '\0';
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		snprintf(buf, cap, "%s:%u", host, ntohs(a->sin_port));
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		snprintf(buf, cap, "[%s]:%u", host, ntohs(a->sin6_port));
	}
}

static int
listen_on(const struct sockaddr_storage *ss, socklen_t len, int *out)
{
	int one = 1, fd, rc;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A restarted daemon must not wait for its old connections'
	 * TIME_WAIT to end before it can listen again. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (const struct sockaddr *)ss, len) != 0 ||
	    listen(fd, MAX_CONNECTIONS) != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

int
shmtd_metrics_start(const char *addr, shmt_t *h,
    const struct shmtd_lag_hist *lag, pthread_mutex_t *lock, char *bound,
    size_t cap,
    struct shmtd_metrics **out, char *err, size_t errcap)
{
	struct sockaddr_storage ss;
	struct shmtd_metrics *m;
	socklen_t len;
	/* MHD_USE_ITC: shmtd_metrics_stop() quiesces the server first. */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
	    MHD_USE_ITC;
	int rc;

	if (shmtd_addr_parse(addr, &ss, &len) != 0) {
		snprintf(err, errcap, "metrics: '%.200s' is not an address "
		    "(IPV4:PORT or [IPV6]:PORT)", addr);
		return -EINVAL;
	}
	if ((m = calloc(1, sizeof(*m))) == NULL) {
		snprintf(err, errcap, "metrics: out of memory");
		return -ENOMEM;
	}
	m->h = h;
	m->lag = lag;
	m->lock = lock;
	if ((rc = listen_on(&ss, len, &m->fd)) != 0) {
		snprintf(err, errcap, "metrics: cannot listen on %.200s: %s",
		    addr, strerror(-rc));
		free(m);
		return rc;
	}
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, m,
	    MHD_OPTION_LISTEN_SOCKET, m->fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
	    MHD_OPTION_END);
	if (m->mhd == NULL) {
		snprintf(err, errcap, "metrics: the HTTP server did not start "
		    "on %.200s", addr);
		close(m->fd);
		free(m);
		return -EIO;
	}
	describe(m->fd, bound, cap);
	*out = m;
	return 0;
}

void
shmtd_metrics_stop(struct shmtd_metrics *m)
{
	MHD_socket fd;

	if (m == NULL)
		return;
	/* Quiesced, the server hands the listening socket back instead of
	 * closing it itself; it is ours to close, exactly once. */
	fd = MHD_quiesce_daemon(m->mhd);
	MHD_stop_daemon(m->mhd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	free(m);
}
