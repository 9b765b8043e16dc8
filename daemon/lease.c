/* SPDX-License-Identifier: MIT */
/*
 * The lease thread: for each global limiter, lease blocks of uses from
 * Redis with one Lua script (its clock, its check and its record in one
 * atomic step), put them in the segment's lease slots for the workers,
 * close them before their local deadline, and give back what they did not
 * grant.  The protocol and why it never over-grants are at the top of
 * lib/global.c; this file is the Redis side.
 *
 * Redis keys of limiter NAME (the hash tag {NAME} keeps them on one slot
 * of a Redis Cluster, so one script may touch all three):
 *   shmt:{NAME}:l  hash: n:ID -> uses of lease ID still counted, h:ID ->
 *                  the host that holds it ([global] host; only that host
 *                  gives it back), inflight (their sum), params ("L:C:S":
 *                  hosts must agree);
 *                  expires H + 1 s after the last lease (H: the hold)
 *   shmt:{NAME}:z  sorted set: ID scored by its release time T + H (us)
 *   shmt:{NAME}:b  hash, never expires: born (when these records began),
 *                  seq (the last lease ID), last (the script's clock)
 * and, for a key pool, in shmt:{NAME}:l: cur (the fleet's grant cursor),
 * s:ID and e:ID (the range of it lease ID holds); the script is in
 * lease_script.c.
 * A script that finds no born key (a fresh Redis, or one restarted without
 * its data) writes one and grants nothing until born + H: the leases the
 * old records counted have all been released by then (see global.c).
 *
 * (A name whose first byte is '}' would make an empty tag: its keys are
 * shmt:x{HEX}:l and so on; conf/addr.c.)  The script touches no other key
 * and declares all three in KEYS.
 *
 * One thread serves every global limiter of the host, with blocking
 * connections: Redis sees a request per lease (a few per slack per host),
 * a give-back per closed lease with uses left, never one per grant.  A
 * request or connection that fails drops the connection; the thread
 * reconnects with a backoff of 50 ms doubling to 1 s, while the leases in
 * the segment run out by their own deadlines.
 *
 * Where the script runs.  One address: that Redis.  Several: the seeds of
 * a Redis Cluster (a seed that is not a cluster node is refused: hosts on
 * independent servers would not count each other's leases).  A cluster's
 * slot map comes from CLUSTER SLOTS; each limiter's script goes to its
 * slot's master, MOVED is followed (and the map read again), ASK once
 * with ASKING; TRYAGAIN, CLUSTERDOWN, LOADING and MASTERDOWN are asked
 * again 5 ms later.  A redirection is an answer from a node that did not
 * run the script, so only the reply carrying the script's answer
 * installs a lease, and the lease's local interval starts at the first
 * send (a redirection only shortens it).  sentinel://HOST:PORT/NAME
 * addresses are Sentinels: the master they name is checked with ROLE and
 * asked again when it fails or answers READONLY.
 */
#include "lease.h"
#include "lease_script.h"

#include "addr.h"
#include "log.h"

#include "daemon.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#define MS 1000000ULL
/* Leases of one limiter this host may have in flight in Redis at once,
 * counted for the host's share (display only: older ones are dropped). */
#define HELD_MAX 256
/* A blocking Redis call gives up after this; a reply that late is a lease
 * nobody could use anyway (slack is usually shorter). */
#define REDIS_TIMEOUT_US 250000
/* Redis servers one thread keeps track of (seeds and cluster nodes), and
 * the redirections one request follows. */
#define NODES_MAX 64
#define HOPS_MAX 5
#define GL_REPLY SHMTD_LEASE_REPLY

struct held {
	uint64_t until;               /* local ns after which Redis freed it */
	uint64_t n;
	long long id;
	int owed;                     /* offline: already reported to Redis */
};

struct gslot {
	int mine;                     /* this thread installed it */
	int offline;                  /* an offline_limit lease, not Redis's */
	long long id, born, start;     /* start: a key pool's, on the cursor */
	uint32_t cap;
	uint64_t installed;
};

struct glim {
	char name[SHMT_LIMITER_NAME_MAX + 1];
	char k_l[SHMTD_REDIS_KEY_MAX], k_z[SHMTD_REDIS_KEY_MAX];
	char k_b[SHMTD_REDIS_KEY_MAX], params[128];
	unsigned hslot;               /* the keys' Redis Cluster slot */
	struct shmt__gref ref;
	uint64_t use_ns;              /* S' = S - S/1000: the local use span */
	uint64_t hold_us, hold_ns;    /* H, in Redis's and in local units */
	uint64_t offline_limit;
	struct gslot slot[SHMT_GL_SLOTS];
	struct held held[HELD_MAX];   /* this host's leases in Redis */
	unsigned nheld;
	struct held off[HELD_MAX];    /* offline leases still in flight */
	unsigned noff;
	long long off_seq;
	uint64_t want;                /* the next lease's size */
	uint64_t denied_seen, last_demand, used_seen, used_last;
	uint64_t next_ask, retry_at;
	int owe;                      /* offline uses to report on reconnect */
	int hello;                    /* Redis has seen this limiter since the
				       * connection was made */
	shmt_global_stat_t st;
};

/* A Redis server: a seed from [global] redis, or a cluster node learnt
 * from a redirection or from CLUSTER SLOTS. */
struct rnode {
	struct shmtd_redis_addr a;
	redisContext *c;
	uint64_t reconnect_at, backoff;
	uint64_t busy_said;           /* when a "try again" was last logged */
};

struct shmtd_lease {
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, started;
	shmt_t *h;
	char me[256];
	struct rnode node[NODES_MAX];
	unsigned nnode, nseed;
	unsigned cur;                 /* the seed asked while no slot map */
	int cluster;                  /* the servers are a Redis Cluster */
	int sentinel;                 /* the seeds are Sentinels */
	unsigned mnode;               /* Sentinel: 1 + the master's node, or
				       * 0: ask a Sentinel */
	unsigned msaid;               /* the master last logged */
	unsigned last_node;           /* where the last script ran */
	unsigned gen;                 /* node_find forgot the learnt nodes */
	uint32_t replicas;            /* [global] replicas */
	uint64_t asked_at;            /* when a Sentinel was last asked */
	int refresh;                  /* the slot map wants CLUSTER SLOTS */
	uint64_t refresh_at;
	/* Slot -> 1 + the node that serves it (0: not known: ask a seed,
	 * which redirects). */
	uint8_t slotmap[SHMTD_REDIS_SLOTS];
	struct glim *g;
	size_t ng;
};

/* ---- Redis ----------------------------------------------------------------- */

static const char *
naddr(const struct rnode *n, char *buf, size_t cap)
{
	if (n->a.path[0] != '\0')
		snprintf(buf, cap, "unix:%s", n->a.path);
	else
		snprintf(buf, cap, "%s:%d", n->a.host, n->a.port);
	return buf;
}

static void
backoff(struct rnode *n, uint64_t now)
{
	n->backoff = n->backoff == 0 ? 50 * MS : n->backoff * 2;
	if (n->backoff > 1000 * MS)
		n->backoff = 1000 * MS;
	n->reconnect_at = now + n->backoff;
}

/* Drop node N's connection after a failure (of limiter G's request, or
 * none); in a cluster, the slot map is read again (a failover moves
 * slots), and without one the next seed is tried. */
static void
node_drop(struct shmtd_lease *l, unsigned n, struct glim *g, int err,
    const char *what)
{
	struct rnode *r = &l->node[n];
	char a[300];

	if (g != NULL) {
		g->st.errors++;
		g->st.last_error = err;
	}
	if (r->c != NULL) {
		shmtd_log(LOG_WARNING, "global: redis %s %s: %s: %s",
		    naddr(r, a, sizeof(a)), what, r->c->errstr[0] != '\0' ?
		    r->c->errstr : "bad reply", "dropping the connection");
		redisFree(r->c);
		r->c = NULL;
	}
	backoff(r, shmt__mono_ns());
	if (l->sentinel && n + 1 == l->mnode)
		l->mnode = 0;
	else if (l->cluster)
		l->refresh = 1;
	else if (n == l->cur && l->nseed > 1)
		l->cur = (l->cur + 1) % l->nseed;
}

static int load_slots(struct shmtd_lease *l, unsigned n);

/* ROLE's first word is "master". */
static int
is_master(redisContext *c)
{
	redisReply *r = redisCommand(c, "ROLE");
	int ok = r != NULL && r->type == REDIS_REPLY_ARRAY &&
	    r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") == 0;

	if (r != NULL)
		freeReplyObject(r);
	return ok;
}

/* Node N's connection, made if it is not and its backoff allows; NULL if
 * there is none. */
static redisContext *
node_conn(struct shmtd_lease *l, unsigned n, uint64_t now)
{
	struct timeval tv = { 0, REDIS_TIMEOUT_US };
	struct rnode *r = &l->node[n];
	redisContext *c;
	char a[300];
	int rc;

	if (r->c != NULL)
		return r->c;
	if (now < r->reconnect_at) {
		/* A master that cannot be reached: the Sentinels may know a
		 * new one by now. */
		if (l->sentinel && n + 1 == l->mnode)
			l->mnode = 0;
		return NULL;
	}
	c = r->a.path[0] != '\0' ?
	    redisConnectUnixWithTimeout(r->a.path, tv) :
	    redisConnectWithTimeout(r->a.host, r->a.port, tv);
	if (c == NULL || c->err) {
		if (r->backoff == 0 || r->backoff >= 1000 * MS)
			shmtd_log(LOG_WARNING, "global: cannot reach redis "
			    "%s: %s", naddr(r, a, sizeof(a)),
			    c != NULL ? c->errstr : "no memory");
		redisFree(c);
		for (size_t i = 0; i < l->ng; i++) {
			l->g[i].st.errors++;
			l->g[i].st.last_error = -ECONNREFUSED;
		}
		backoff(r, now);
		if (l->sentinel && n + 1 == l->mnode)
			l->mnode = 0;
		else if (l->cluster)
			l->refresh = 1;
		else if (n == l->cur && l->nseed > 1)
			l->cur = (l->cur + 1) % l->nseed;
		return NULL;
	}
	redisSetTimeout(c, tv);
	r->c = c;
	if (l->sentinel && n < l->nseed)
		return r->c;          /* a Sentinel: asked for the master only */
	/* The master a Sentinel named must say it is one: a Sentinel's
	 * answer may be stale, and a replica's records are not the ones
	 * the master counts. */
	if (l->sentinel && !is_master(r->c)) {
		shmtd_log(LOG_WARNING, "global: redis %s is not a master; "
		    "asking the Sentinels again", naddr(r, a, sizeof(a)));
		redisFree(r->c);
		r->c = NULL;
		backoff(r, now);
		l->mnode = 0;
		return NULL;
	}
	/* Several addresses are the seeds of one Redis Cluster, never
	 * several Redis servers that each keep their own records (the
	 * hosts that reached one would not count the leases of those that
	 * reached another): a seed that is not a cluster node is refused. */
	if (l->nseed > 1 && !l->cluster && !l->sentinel &&
	    (rc = load_slots(l, n)) != 0) {
		if (r->c != NULL && rc == -EPROTO)
			shmtd_log(LOG_ERR, "global: redis %s is not a Redis "
			    "Cluster node: several addresses in [global] redis "
			    "are the seeds of one cluster; not leasing from it",
			    naddr(r, a, sizeof(a)));
		if (r->c != NULL) {
			redisFree(r->c);
			r->c = NULL;
		}
		for (size_t i = 0; i < l->ng; i++) {
			l->g[i].st.errors++;
			l->g[i].st.last_error = -EPROTO;
		}
		backoff(r, now);
		l->cur = (l->cur + 1) % l->nseed;
		return NULL;
	}
	r->backoff = 0;
	for (size_t i = 0; i < l->ng; i++) {
		for (unsigned j = 0; j < l->g[i].noff; j++)
			if (!l->g[i].off[j].owed)
				l->g[i].owe = 1;
		l->g[i].hello = 0;
	}
	return r->c;
}

/* The node for HOST:PORT (HOST "" is node FROM's host), added if new.
 * The table is full only with more than NODES_MAX nodes: then every
 * learnt node is forgotten (the seeds stay) and the map read again. */
static unsigned
node_find(struct shmtd_lease *l, const char *host, int port, unsigned from)
{
	const char *h = host[0] != '\0' ? host : l->node[from].a.host;
	struct rnode *r;

	for (unsigned i = 0; i < l->nnode; i++)
		if (l->node[i].a.path[0] == '\0' && l->node[i].a.port == port &&
		    strcmp(l->node[i].a.host, h) == 0)
			return i;
	if (h[0] == '\0')             /* from a unix socket: no host known */
		return from;
	if (l->nnode == NODES_MAX) {
		for (unsigned i = l->nseed; i < l->nnode; i++)
			if (l->node[i].c != NULL)
				redisFree(l->node[i].c);
		memset(&l->node[l->nseed], 0,
		    (NODES_MAX - l->nseed) * sizeof(l->node[0]));
		memset(l->slotmap, 0, sizeof(l->slotmap));
		l->nnode = l->nseed;
		l->mnode = 0;
		l->refresh = 1;
		l->gen++;
	}
	r = &l->node[l->nnode];
	memset(r, 0, sizeof(*r));
	snprintf(r->a.host, sizeof(r->a.host), "%s", h);
	r->a.port = port;
	return l->nnode++;
}

/* Read the slot map from node N (connected) with CLUSTER SLOTS.  Returns
 * 0, or -EPROTO (not a cluster node: the connection stays) or -EIO (it
 * failed: the connection is dropped). */
static int
load_slots(struct shmtd_lease *l, unsigned n)
{
	uint8_t map[SHMTD_REDIS_SLOTS];
	redisReply *r = redisCommand(l->node[n].c, "CLUSTER SLOTS");
	unsigned gen = l->gen;

	if (r == NULL) {
		node_drop(l, n, NULL, -EIO, "CLUSTER SLOTS");
		return -EIO;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return -EPROTO;
	}
	memset(map, 0, sizeof(map));
	for (size_t i = 0; i < r->elements; i++) {
		redisReply *e = r->element[i], *m;
		long long a, b;
		char host[256];
		unsigned k;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    (m = e->element[2])->type != REDIS_REPLY_ARRAY ||
		    m->elements < 2 || m->element[0]->type !=
		    REDIS_REPLY_STRING || m->element[1]->type !=
		    REDIS_REPLY_INTEGER)
			continue;
		a = e->element[0]->integer;
		b = e->element[1]->integer;
		if (a < 0 || b >= SHMTD_REDIS_SLOTS || a > b ||
		    m->element[1]->integer <= 0 ||
		    m->element[1]->integer > 65535 ||
		    m->element[0]->len >= sizeof(host))
			continue;
		/* "?" or "": the node does not know its address: the one
		 * asked answers for it. */
		snprintf(host, sizeof(host), "%s", strcmp(m->element[0]->str,
		    "?") == 0 ? "" : m->element[0]->str);
		k = node_find(l, host, (int)m->element[1]->integer, n);
		if (l->gen != gen) {
			/* More nodes than the table holds: the indices of
			 * this map are stale; the next refresh starts anew. */
			freeReplyObject(r);
			return -EIO;
		}
		for (long long s = a; s <= b; s++)
			map[s] = (uint8_t)(k + 1);
	}
	freeReplyObject(r);
	memcpy(l->slotmap, map, sizeof(map));
	l->cluster = 1;
	l->refresh = 0;
	return 0;
}

/* Read the slot map again from the first node that answers. */
static void
refresh_slots(struct shmtd_lease *l, uint64_t now)
{
	if (!l->refresh || now < l->refresh_at)
		return;
	l->refresh_at = now + 100 * MS;
	for (unsigned i = 0; i < l->nnode; i++)
		if (node_conn(l, i, now) != NULL && load_slots(l, i) == 0)
			return;
}

/* Ask the Sentinels, one after the other, for the master's address:
 * when none is known (at most every 50 ms), and once a second while one
 * is (a failover may leave the old master up and answering). */
static uint64_t
sentinel_due(const struct shmtd_lease *l)
{
	return l->asked_at + (l->mnode != 0 ? 1000 : 50) * MS;
}

static void
ask_sentinel(struct shmtd_lease *l, uint64_t now)
{
	if (!l->sentinel || (l->asked_at != 0 && now < sentinel_due(l)))
		return;
	l->asked_at = now;
	for (unsigned k = 0; k < l->nseed; k++) {
		unsigned n = (l->cur + k) % l->nseed;
		redisContext *c = node_conn(l, n, now);
		redisReply *r;
		char a[300];

		if (c == NULL)
			continue;
		r = redisCommand(c, "SENTINEL get-master-addr-by-name %s",
		    l->node[n].a.master);
		if (r == NULL) {
			node_drop(l, n, NULL, -EIO, "SENTINEL");
			continue;
		}
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING &&
		    r->element[0]->len < 256) {
			int port = atoi(r->element[1]->str);

			if (port > 0 && port < 65536) {
				unsigned m = node_find(l, r->element[0]->str,
				    port, n);

				if (m >= l->nseed) {
					char b[300];

					l->mnode = m + 1;
					l->cur = n;
					/* Said when it changes. */
					if (l->msaid != l->mnode)
						shmtd_log(LOG_NOTICE, "global: "
						    "Sentinel %s: master %s is "
						    "%s", naddr(&l->node[n], a,
						    sizeof(a)),
						    l->node[n].a.master,
						    naddr(&l->node[m], b,
						    sizeof(b)));
					l->msaid = l->mnode;
					freeReplyObject(r);
					return;
				}
			}
		}
		shmtd_log(LOG_WARNING, "global: Sentinel %s knows no master "
		    "%s", naddr(&l->node[n], a, sizeof(a)),
		    l->node[n].a.master);
		freeReplyObject(r);
	}
}

/* The node that serves G: its slot's in a cluster, the master a Sentinel
 * named, else the seed; -1: none known yet (Sentinel). */
static int
gnode(const struct shmtd_lease *l, const struct glim *g)
{
	if (l->sentinel)
		return l->mnode != 0 ? (int)l->mnode - 1 : -1;
	if (l->cluster && l->slotmap[g->hslot] != 0)
		return l->slotmap[g->hslot] - 1;
	return (int)l->cur;
}

/* Whether G's node is connected (or could be now). */
static int
gonline(struct shmtd_lease *l, struct glim *g, uint64_t now)
{
	int n = gnode(l, g);

	return n >= 0 && node_conn(l, (unsigned)n, now) != NULL;
}

static int
is_busy(const char *e)
{
	/* Redis Cluster's answers while a slot moves or a master fails
	 * over, and a Redis still loading its data: the request did not
	 * run; ask again shortly on the same connection. */
	return strncmp(e, "TRYAGAIN", 8) == 0 ||
	    strncmp(e, "CLUSTERDOWN", 11) == 0 ||
	    strncmp(e, "LOADING", 7) == 0 ||
	    strncmp(e, "MASTERDOWN", 10) == 0;
}

/*
 * Run the script: OP on G with N uses (and lease ID of epoch BORN for a
 * give-back).  Fills OUT {id, uses, fleet in flight, retry us, born,
 * code}; *SENT gets the local time before the first send (a redirection
 * only makes the lease's local interval shorter), *RTT (may be NULL) the
 * time from it to the reply.  Returns 0 or a negative errno: -EAGAIN
 * (Redis said try again: the connection stays), other errors drop the
 * connection.
 *
 * Redis Cluster: a MOVED reply updates the slot map and is followed; an
 * ASK reply is followed once, with ASKING before the script on the same
 * connection.  Either reply means the script did not run where it was
 * sent, so only the reply that carries the script's answer counts, and it
 * comes from the node that ran it and recorded the lease.
 */
static int
script(struct shmtd_lease *l, struct glim *g, const char *op, uint64_t n,
    long long id, long long born, long long start, long long out[GL_REPLY],
    uint64_t *sentp, uint64_t *rtt)
{
	char sL[24], sH[24], sN[24], sI[24], sB[24], sK[16], sS[24];
	redisReply *r;
	uint64_t t0;
	int gn = gnode(l, g), asking = 0;
	unsigned node = gn >= 0 ? (unsigned)gn : 0;

	g->st.requests++;
	snprintf(sL, sizeof(sL), "%" PRIu64, g->ref.limit);
	snprintf(sH, sizeof(sH), "%" PRIu64, g->hold_us);
	snprintf(sN, sizeof(sN), "%" PRIu64, n);
	snprintf(sI, sizeof(sI), "%lld", id);
	snprintf(sB, sizeof(sB), "%lld", born);
	snprintf(sK, sizeof(sK), "%" PRIu32, g->ref.nkeys);
	snprintf(sS, sizeof(sS), "%lld", start);
	t0 = shmt__mono_ns();
	if (sentp != NULL)
		*sentp = t0;
	if (gn < 0)
		return -ENOTCONN;
	for (int hop = 0; hop < HOPS_MAX; hop++) {
		redisContext *c = node_conn(l, node, shmt__mono_ns());
		char host[256];
		unsigned slot;
		int ask, port;

		if (c == NULL)
			return -ENOTCONN;
		r = NULL;
		if (asking && (redisAppendCommand(c, "ASKING") != REDIS_OK ||
		    redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL ||
		    r->type != REDIS_REPLY_STATUS)) {
			if (r != NULL)
				freeReplyObject(r);
			node_drop(l, node, g, -EPROTO, "ASKING");
			return -EPROTO;
		}
		if (r != NULL)
			freeReplyObject(r);
		r = redisCommand(c,
		    "EVAL %s 3 %s %s %s %s %s %s %s %s %s %s %s %s %s",
		    shmtd_lease_lua, g->k_l, g->k_z, g->k_b, op, sL, sH, g->params,
		    sN, sI, sB, l->me, sK, sS);
		if (rtt != NULL)
			*rtt = shmt__mono_ns() - t0;
		if (r == NULL) {
			int rc = c->err == REDIS_ERR_EOF ? -ECONNRESET : -EIO;

			node_drop(l, node, g, rc, op);
			return rc;
		}
		if (r->type == REDIS_REPLY_ERROR &&
		    shmtd_redis_redirect(r->str, &ask, &slot, host,
		    sizeof(host), &port) == 0) {
			unsigned to = node_find(l, host, port, node);

			if (!ask) {
				l->slotmap[slot] = (uint8_t)(to + 1);
				l->cluster = 1;
				l->refresh = 1;
			}
			freeReplyObject(r);
			r = NULL;
			node = to;
			asking = ask;
			continue;
		}
		/* A master that became a replica refuses the script's
		 * writes: nothing was recorded; ask the Sentinels again. */
		if (r->type == REDIS_REPLY_ERROR && l->sentinel &&
		    strstr(r->str, "READONLY") != NULL) {
			g->st.errors++;
			g->st.last_error = -EROFS;
			freeReplyObject(r);
			redisFree(l->node[node].c);
			l->node[node].c = NULL;
			l->mnode = 0;
			return -EAGAIN;
		}
		if (r->type == REDIS_REPLY_ERROR && is_busy(r->str)) {
			char a[300];
			uint64_t now = shmt__mono_ns();

			/* Said at most once a second per server. */
			if (now >= l->node[node].busy_said + 1000 * MS) {
				l->node[node].busy_said = now;
				shmtd_log(LOG_NOTICE, "global: redis %s %s: %s: "
				    "trying again", naddr(&l->node[node], a,
				    sizeof(a)), op, r->str);
			}
			g->st.errors++;
			g->st.last_error = -EAGAIN;
			freeReplyObject(r);
			return -EAGAIN;
		}
		break;
	}
	if (r == NULL) {
		/* Redirected HOPS_MAX times: the map is read again. */
		l->refresh = 1;
		g->st.errors++;
		g->st.last_error = -ELOOP;
		return -ELOOP;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != GL_REPLY) {
		if (r->type == REDIS_REPLY_ERROR)
			shmtd_log(LOG_WARNING, "global: redis %s: %s", op,
			    r->str);
		freeReplyObject(r);
		node_drop(l, node, g, -EPROTO, op);
		return -EPROTO;
	}
	l->last_node = node;
	for (int i = 0; i < GL_REPLY; i++) {
		if (r->element[i]->type != REDIS_REPLY_INTEGER) {
			freeReplyObject(r);
			node_drop(l, node, g, -EPROTO, op);
			return -EPROTO;
		}
		out[i] = r->element[i]->integer;
	}
	freeReplyObject(r);
	return 0;
}

/* WAIT for l->replicas replicas of the node that ran G's last script, no
 * longer than G's use span (a lease acknowledged later is of no use);
 * 1 if they have it. */
static int
wait_replicas(struct shmtd_lease *l, struct glim *g)
{
	unsigned n = l->last_node;
	uint64_t ms = g->use_ns / MS;
	redisReply *r;
	int ok;

	if (n >= l->nnode || l->node[n].c == NULL)
		return 0;
	if (ms == 0)
		ms = 1;
	r = redisCommand(l->node[n].c, "WAIT %u %" PRIu64, l->replicas, ms);
	if (r == NULL) {
		node_drop(l, n, g, -EIO, "WAIT");
		return 0;
	}
	ok = r->type == REDIS_REPLY_INTEGER &&
	    r->integer >= (long long)l->replicas;
	freeReplyObject(r);
	if (!ok) {
		g->st.errors++;
		g->st.last_error = -ETIMEDOUT;
	}
	return ok;
}

/* ---- Bookkeeping ------------------------------------------------------------ */

static void
held_add(struct held *a, unsigned *n, uint64_t until, uint64_t k, long long id)
{
	if (*n == HELD_MAX) {
		memmove(a, a + 1, (HELD_MAX - 1) * sizeof(*a));
		(*n)--;
	}
	a[*n].until = until;
	a[*n].n = k;
	a[*n].id = id;
	a[*n].owed = 0;
	(*n)++;
}

static uint64_t
held_sum(struct held *a, unsigned *n, uint64_t now)
{
	uint64_t s = 0;
	unsigned j = 0;

	for (unsigned i = 0; i < *n; i++)
		if (a[i].until > now) {
			s += a[i].n;
			a[j++] = a[i];
		}
	*n = j;
	return s;
}

static void
held_less(struct held *a, unsigned n, long long id, uint64_t k)
{
	for (unsigned i = 0; i < n; i++)
		if (a[i].id == id) {
			a[i].n = a[i].n > k ? a[i].n - k : 0;
			return;
		}
}

/* ---- One limiter ------------------------------------------------------------- */

/* Close slot I if it is due (deadline passed, or full), and give back
 * what it did not grant. */
static void
close_due(struct shmtd_lease *l, struct glim *g, unsigned i, uint64_t now,
    int force)
{
	struct gslot *s = &g->slot[i];
	uint32_t st, used, cap;
	uint64_t dl;
	long long out[GL_REPLY];

	if (shmt__global_read(&g->ref, i, &st, &used, &cap, &dl) != 0 ||
	    st != SHMT_GL_OPEN)
		return;
	/* A deadline more than the slack ahead is damage (no lease of
	 * ours has one): close it, so its slot takes a lease again. */
	if (!force && now < dl && used < cap && dl - now <= g->ref.slack)
		return;
	if (shmt__global_close(&g->ref, i, &used, &cap, &dl) != 1)
		return;
	if (!s->mine)
		return;        /* a dead daemon's lease: its record is unknown */
	s->mine = 0;
	g->used_seen += used;
	/* The next lease's size follows demand: double when one ran dry,
	 * halve when one closed by time less than half used. */
	if (used == cap && g->want < g->ref.slack_uses)
		g->want = g->want * 2 < g->ref.slack_uses ? g->want * 2 :
		    g->ref.slack_uses;
	else if (used < cap / 2 && g->want > 1)
		g->want /= 2;
	if (used == cap)
		return;
	if (s->offline) {
		held_less(g->off, g->noff, s->id, cap - used);
		return;
	}
	if (script(l, g, "give", cap - used, s->id, s->born, s->start, out,
	    NULL, NULL) == 0) {
		g->st.returned_uses += (uint64_t)out[0];
		held_less(g->held, g->nheld, s->id, (uint64_t)out[0]);
	}
}

static int
free_slot(struct glim *g)
{
	for (unsigned i = 0; i < SHMT_GL_SLOTS; i++) {
		uint32_t st, used, cap;
		uint64_t dl;

		if (shmt__global_read(&g->ref, i, &st, &used, &cap, &dl) == 0 &&
		    st != SHMT_GL_OPEN)
			return (int)i;
	}
	return -1;
}

/* Uses the open leases still hold that will last beyond SOON; *NOPEN
 * gets how many are open, *USED what they granted. */
static uint64_t
open_left(struct glim *g, uint64_t soon, unsigned *nopen, uint64_t *usedp)
{
	uint64_t left = 0;

	*nopen = 0;
	*usedp = 0;
	for (unsigned i = 0; i < SHMT_GL_SLOTS; i++) {
		uint32_t st, used, cap;
		uint64_t dl;

		if (shmt__global_read(&g->ref, i, &st, &used, &cap, &dl) != 0 ||
		    st != SHMT_GL_OPEN)
			continue;
		(*nopen)++;
		*usedp += used;
		if (dl > soon)
			left += cap - used;
	}
	return left;
}

/* Report offline uses still in flight to Redis, once it is back, so the
 * fleet counts them from now on.  The records stay until their hold ends,
 * marked reported: should Redis go away again within it, ask_offline
 * still counts them against offline_limit (forgetting them would let a
 * host that loses Redis twice in a window grant offline_limit twice). */
static void
pay_debt(struct shmtd_lease *l, struct glim *g, uint64_t now)
{
	uint64_t debt = 0;
	long long out[GL_REPLY];

	(void)held_sum(g->off, &g->noff, now);
	for (unsigned i = 0; i < g->noff; i++)
		if (!g->off[i].owed)
			debt += g->off[i].n;
	if (debt > 0 && script(l, g, "owe", debt, 0, 0, 0, out, NULL, NULL) != 0)
		return;
	for (unsigned i = 0; i < g->noff; i++)
		g->off[i].owed = 1;
	g->owe = 0;
}

static void
ask(struct shmtd_lease *l, struct glim *g, int i)
{
	long long out[GL_REPLY];
	uint64_t sent, recv, rtt, dl;
	struct gslot *s = &g->slot[i];
	uint64_t k;
	int rc;

	if ((rc = script(l, g, "take", g->want, 0, 0, 0, out, &sent, &rtt)) !=
	    0) {
		g->st.state = SHMT_GLOBAL_OFFLINE;
		/* Redis said try again (a slot on the move, a failover):
		 * not at once. */
		if (rc == -EAGAIN || rc == -ELOOP)
			g->next_ask = shmt__mono_ns() + 5 * MS;
		return;
	}
	recv = sent + rtt;
	g->st.rtt_ns = rtt;
	if (rtt > g->st.rtt_max_ns)
		g->st.rtt_max_ns = rtt;
	g->st.fleet_in_flight = out[2] > 0 ? (uint64_t)out[2] : 0;
	g->st.state = out[5] == 1 ? SHMT_GLOBAL_WAITING :
	    out[5] == 2 ? SHMT_GLOBAL_MISMATCH : SHMT_GLOBAL_ONLINE;
	if (out[5] == 2) {
		if (g->st.errors++ == 0 || g->st.last_error != -EEXIST)
			shmtd_log(LOG_ERR, "global: limiter %s: another host "
			    "leases it with other parameters (ours: %s)",
			    g->name, g->params);
		g->st.last_error = -EEXIST;
		g->next_ask = recv + 1000 * MS;
		return;
	}
	k = out[1] > 0 ? (uint64_t)out[1] : 0;
	if (k == 0) {
		uint64_t wait = out[3] > 0 ? (uint64_t)out[3] * 1000 : 0;

		g->retry_at = recv + wait;
		/* Another host may give uses back sooner than the first
		 * release: look again within half a slack. */
		if (wait > g->ref.slack / 2)
			wait = g->ref.slack / 2;
		g->next_ask = recv + (wait > 0 ? wait : MS / 2);
		return;
	}
	/* [global] replicas: the lease is used only once that many
	 * replicas of the master that recorded it have it, so a failover to
	 * any of them keeps it counted; else all of it goes back. */
	if (l->replicas > 0) {
		int acked = wait_replicas(l, g);

		recv = shmt__mono_ns();
		if (!acked) {
			long long id = out[0], o2[GL_REPLY];

			if (script(l, g, "give", k, id, out[4], out[6], o2,
			    NULL, NULL) ==
			    0)
				g->st.returned_uses += (uint64_t)o2[0];
			return;
		}
	}
	dl = sent + g->use_ns;
	held_add(g->held, &g->nheld, sent + g->hold_ns, k, out[0]);
	g->st.leases++;
	g->st.leased_uses += k;
	g->retry_at = 0;
	if (recv >= dl || k > g->ref.limit ||
	    shmt__global_install(&g->ref, (unsigned)i, (uint32_t)k, dl,
	    (uint64_t)out[6], recv) != 0) {
		/* Too late to use (or refused): every use goes back. */
		long long id = out[0];

		if (script(l, g, "give", k, id, out[4], out[6], out, NULL,
		    NULL) ==
		    0) {
			g->st.returned_uses += (uint64_t)out[0];
			held_less(g->held, g->nheld, id, (uint64_t)out[0]);
		}
		return;
	}
	s->mine = 1;
	s->offline = 0;
	s->id = out[0];
	s->born = out[4];
	s->start = out[6];
	s->cap = (uint32_t)k;
	s->installed = recv;
}

/* Redis is unreachable and no lease is open: a local lease within
 * offline_limit per window, counted like a Redis lease. */
static void
ask_offline(struct glim *g, int i, uint64_t now)
{
	uint64_t inflight = held_sum(g->off, &g->noff, now), k;
	struct gslot *s = &g->slot[i];

	if (g->offline_limit <= inflight)
		return;
	k = g->offline_limit - inflight;
	if (k > g->want)
		k = g->want;
	if (shmt__global_install(&g->ref, (unsigned)i, (uint32_t)k,
	    now + g->use_ns, 0, now) != 0)
		return;
	held_add(g->off, &g->noff, now + g->hold_ns, k, --g->off_seq);
	s->mine = 1;
	s->offline = 1;
	s->id = g->off_seq;
	s->cap = (uint32_t)k;
	s->installed = now;
	g->st.state = SHMT_GLOBAL_FALLBACK;
}

/* Everything due for G at NOW; returns when it wants to run again. */
static uint64_t
step(struct shmtd_lease *l, struct glim *g, uint64_t now)
{
	uint64_t denied, soon, left, next, tick, used;
	unsigned nopen;
	int i, refused, online;

	for (unsigned j = 0; j < SHMT_GL_SLOTS; j++)
		close_due(l, g, j, now, 0);
	denied = shmt__global_denied(&g->ref);
	refused = denied != g->denied_seen;
	/* The uses refused since the last look are at least the cost of
	 * each refused request: the next lease holds that many (up to
	 * slack_uses), or a request larger than the leases that demand
	 * has shrunk would be refused lease after lease. */
	if (refused && denied - g->denied_seen > g->want)
		g->want = denied - g->denied_seen < g->ref.slack_uses ?
		    denied - g->denied_seen : g->ref.slack_uses;
	g->denied_seen = denied;
	soon = now + 2 * g->st.rtt_ns + MS;
	left = open_left(g, soon, &nopen, &used);
	/* Demand: a refusal, or a grant since the last look. */
	if (refused || used + g->used_seen != g->used_last)
		g->last_demand = now;
	g->used_last = used + g->used_seen;
	online = gonline(l, g, now);
	if (online && g->owe)
		pay_debt(l, g, now);
	/* Say hello again once a fresh Redis's hold is over, so an idle
	 * host does not keep showing "waiting". */
	if (g->st.state == SHMT_GLOBAL_WAITING && g->retry_at != 0 &&
	    now >= g->retry_at)
		g->hello = 0;
	if (online && !g->hello) {
		/* A request for nothing: a fresh Redis starts its hold now,
		 * not at the first demand, and the CLI gets a round trip. */
		uint64_t want = g->want;

		g->want = 0;
		ask(l, g, 0);
		g->want = want;
		g->hello = gonline(l, g, now);
		if (g->st.state != SHMT_GLOBAL_MISMATCH)
			g->next_ask = 0;
	}
	i = free_slot(g);
	if (i >= 0 && now >= g->next_ask &&
	    (refused || (left < g->want / 2 + 1 &&
	    now - g->last_demand < g->ref.slack))) {
		if (online)
			ask(l, g, i);
		else if (nopen == 0 && g->offline_limit > 0)
			ask_offline(g, i, now);
	}
	online = gonline(l, g, now);
	if (!online && g->st.state != SHMT_GLOBAL_FALLBACK)
		g->st.state = SHMT_GLOBAL_OFFLINE;
	g->st.host_in_flight = held_sum(g->held, &g->nheld, now);
	shmt__global_publish(&g->ref, &g->st, g->retry_at, now);

	/* Look again within a millisecond while there is demand (refusals
	 * are noticed by polling), else within 20 ms. */
	tick = now - g->last_demand < 1000 * MS ? MS : 20 * MS;
	next = now + tick;
	for (unsigned j = 0; j < SHMT_GL_SLOTS; j++) {
		uint32_t st, u, cap;
		uint64_t dl;

		if (shmt__global_read(&g->ref, j, &st, &u, &cap, &dl) == 0 &&
		    st == SHMT_GL_OPEN && dl < next)
			next = dl;
	}
	return next;
}

/* ---- The thread ------------------------------------------------------------------ */

static void *
run(void *arg)
{
	struct shmtd_lease *l = arg;

	pthread_mutex_lock(&l->mu);
	while (!l->stop) {
		uint64_t now = shmt__mono_ns(), next = now + 20 * MS;
		struct timespec ts;

		pthread_mutex_unlock(&l->mu);
		refresh_slots(l, now);
		ask_sentinel(l, now);
		for (size_t i = 0; i < l->ng; i++) {
			uint64_t n = step(l, &l->g[i], shmt__mono_ns());

			if (n < next)
				next = n;
		}
		for (size_t i = 0; i < l->ng; i++) {
			int gn = gnode(l, &l->g[i]);
			const struct rnode *r = &l->node[gn >= 0 ? gn : 0];

			if (l->sentinel && sentinel_due(l) < next)
				next = sentinel_due(l);
			if (gn >= 0 && r->c == NULL && r->reconnect_at < next)
				next = r->reconnect_at;
		}
		now = shmt__mono_ns();
		if (next < now + 100000)
			next = now + 100000;
		pthread_mutex_lock(&l->mu);
		ts.tv_sec = (time_t)(next / 1000000000ULL);
		ts.tv_nsec = (long)(next % 1000000000ULL);
		if (!l->stop)
			pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
	pthread_mutex_unlock(&l->mu);
	/* Close what this thread holds and give back what is left. */
	for (size_t i = 0; i < l->ng; i++)
		for (unsigned j = 0; j < SHMT_GL_SLOTS; j++)
			close_due(l, &l->g[i], j, shmt__mono_ns(), 1);
	return NULL;
}

/* FNV-1a (64 bits) of a key pool's names, each ended by a NUL: no secret,
 * so that every host computes the same. */
static uint64_t
names_digest(const struct shmtd_limiter *c)
{
	uint64_t d = 14695981039346656037ULL;

	for (uint32_t i = 0; i < c->limit.nkeys; i++) {
		const unsigned char *k = (const unsigned char *)c->keys[i];

		do {
			d ^= *k;
			d *= 1099511628211ULL;
		} while (*k++ != '\0');
	}
	return d;
}

static int
glim_init(struct shmtd_lease *l, struct glim *g, const struct shmtd_limiter *c,
    char *err, size_t errcap)
{
	int rc;

	snprintf(g->name, sizeof(g->name), "%s", c->name);
	if ((rc = shmt__global_ref(l->h, c->name, &g->ref)) != 0) {
		snprintf(err, errcap, "global limiter %s: %s", c->name,
		    shmt_strerror(rc));
		return rc;
	}
	shmtd_redis_keys(c->name, g->k_l, g->k_z, g->k_b);
	g->hslot = shmtd_redis_slot(g->k_l, strlen(g->k_l));
	snprintf(g->params, sizeof(g->params), "%" PRIu64 ":%" PRIu64 ":%"
	    PRIu64, g->ref.limit, g->ref.window, g->ref.slack);
	/* A key pool's hosts must hand out the same names in the same
	 * order: their count and a digest of them join the parameters. */
	if (g->ref.nkeys != 0) {
		size_t n = strlen(g->params);

		snprintf(g->params + n, sizeof(g->params) - n, ":keys=%" PRIu32
		    ":%016" PRIx64, g->ref.nkeys, names_digest(c));
	}
	/* Rates within 0.1% (see global.c): the host uses a lease for
	 * S - S/1000 of its own time, Redis holds it for (S + C) * 1.001
	 * of its own, plus the microsecond TIME rounds away. */
	g->use_ns = g->ref.slack - g->ref.slack / 1000;
	g->hold_us = (g->ref.slack + g->ref.window) / 1000;
	g->hold_us += g->hold_us / 1000 + 2;
	g->hold_ns = g->hold_us * 1000;
	/* Never for a key pool (the config refuses it): names handed out
	 * offline would not follow the fleet's cursor. */
	g->offline_limit = g->ref.nkeys == 0 ? c->offline_limit : 0;
	g->want = g->ref.slack_uses;
	return 0;
}

int
shmtd_lease_start(const struct shmtd_config *cfg, struct shmtd_lease **out,
    char *err, size_t errcap)
{
	struct shmtd_redis_addr seeds[SHMTD_REDIS_SEEDS_MAX];
	struct shmtd_lease *l;
	pthread_condattr_t ca;
	size_t n = 0;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < cfg->nlimiters; i++)
		n += cfg->limiters[i].limit.global != 0;
	if (n == 0)
		return 0;
	if ((l = calloc(1, sizeof(*l))) == NULL ||
	    (l->g = calloc(n, sizeof(*l->g))) == NULL) {
		free(l);
		snprintf(err, errcap, "global: no memory");
		return -ENOMEM;
	}
	if ((rc = shmtd_redis_seeds(cfg->global.redis, seeds,
	    SHMTD_REDIS_SEEDS_MAX)) < 0) {
		snprintf(err, errcap, "global: bad redis address '%s'",
		    cfg->global.redis);
		rc = -EINVAL;
		goto fail;
	}
	for (int i = 0; i < rc; i++)
		l->node[i].a = seeds[i];
	l->nnode = l->nseed = (unsigned)rc;
	l->sentinel = seeds[0].master[0] != '\0';
	l->replicas = cfg->global.replicas;
	snprintf(l->me, sizeof(l->me), "%s", cfg->global.host);
	/* A handle of its own: the main loop's is not shared with threads. */
	if ((rc = shmt_open(cfg->segment, &l->h)) != 0) {
		snprintf(err, errcap, "global: open %s: %s", cfg->segment,
		    shmt_strerror(rc));
		goto fail;
	}
	for (size_t i = 0; i < cfg->nlimiters; i++)
		if (cfg->limiters[i].limit.global &&
		    (rc = glim_init(l, &l->g[l->ng++], &cfg->limiters[i], err,
		    errcap)) != 0)
			goto fail;
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = pthread_create(&l->thr, NULL, run, l)) != 0) {
		snprintf(err, errcap, "global: thread: %s", strerror(rc));
		rc = -rc;
		goto fail;
	}
	l->started = 1;
	*out = l;
	return 0;
fail:
	if (l->h != NULL)
		shmt_close(l->h);
	free(l->g);
	free(l);
	return rc;
}

void
shmtd_lease_stop(struct shmtd_lease *l)
{
	if (l == NULL)
		return;
	if (l->started) {
		pthread_mutex_lock(&l->mu);
		l->stop = 1;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->thr, NULL);
	}
	for (unsigned i = 0; i < l->nnode; i++)
		if (l->node[i].c != NULL)
			redisFree(l->node[i].c);
	shmt_close(l->h);
	free(l->g);
	free(l);
}
