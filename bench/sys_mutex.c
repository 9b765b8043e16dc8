/* SPDX-License-Identifier: MIT */
/*
 * The obvious design, as a peer: the seed's throttler (a deque of buckets
 * and a free count), the sliding-window log for exact mode, and a
 * per-client table, all in one shared-memory segment behind one robust,
 * process-shared pthread mutex.  Written plainly, as one would first write
 * it: read the clock, take the lock, run the seed's algorithm, unlock.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How far a client lookup probes before it gives up (table full). */
#define MX_PROBE 64

/* The seed's Throttler; its bucket deque (nbuckets entries) follows it. */
struct mx_thr {
	uint64_t free;
	uint32_t head, len;   /* deque of buckets: ring positions */
	uint32_t cursor;      /* next-key: the next name's index */
	uint32_t pad;
};

struct mx_bucket {
	uint64_t close;
	uint64_t count;
};

struct mx_client {
	uint64_t id;
	uint64_t used;
};

struct mx_hdr {
	pthread_mutex_t lock;
	uint64_t size;
	uint32_t nthr;        /* limiters (or client entries) */
	uint32_t nbuckets;    /* buckets mode: ring size; exact: limit */
	uint64_t thr_size;    /* bytes per limiter */
	uint64_t limit, window, open, bsize;
	int mode;
	uint32_t nkeys, per_client;
	uint64_t denied_full;
};

struct mx_global {
	char seg[64];
	size_t size;
};

struct mx_proc {
	struct mx_hdr *hdr;
	size_t size;
	const struct bench_conf *c;
};

struct mx_worker {
	struct mx_proc *p;
	uint32_t thr;         /* this worker's limiter */
};

static struct mx_thr *
mx_thr_at(struct mx_hdr *h, uint32_t i)
{
	char *base = (char *)h + sizeof(*h) + sizeof(struct mx_client) *
	    (h->per_client ? h->nthr : 0);

	return (struct mx_thr *)(base + h->thr_size * i);
}

static struct mx_bucket *
mx_buckets(struct mx_thr *t)
{
	return (struct mx_bucket *)(t + 1);
}

/* The seed's release_expired_buckets and try_use_key, word for word. */
static int
mx_try_use_buckets(struct mx_hdr *h, struct mx_thr *t, uint64_t now)
{
	struct mx_bucket *b = mx_buckets(t), *last;

	while (t->len > 0 && b[t->head].close + h->window <= now) {
		t->free += b[t->head].count;
		t->head = (t->head + 1) % h->nbuckets;
		t->len--;
	}
	if (t->free == 0)
		return 0;
	last = t->len ? &b[(t->head + t->len - 1) % h->nbuckets] : NULL;
	if (last == NULL || last->count == h->bsize || now >= last->close) {
		if (t->len == h->nbuckets)
			return -EOVERFLOW;
		last = &b[(t->head + t->len++) % h->nbuckets];
		last->close = now + h->open;
		last->count = 0;
	}
	last->count++;
	t->free--;
	return 1;
}

/* The sliding-window log: the last `limit` grant times, oldest first. */
static int
mx_try_use_exact(struct mx_hdr *h, struct mx_thr *t, uint64_t now)
{
	uint64_t *log = (uint64_t *)(t + 1);

	while (t->len > 0 && log[t->head] + h->window <= now) {
		t->head = (uint32_t)((t->head + 1) % h->limit);
		t->len--;
	}
	if (t->len == h->limit)
		return 0;
	log[(t->head + t->len++) % h->limit] = now;
	return 1;
}

static int
mx_try_use(struct mx_hdr *h, struct mx_thr *t, uint64_t now)
{
	return h->mode == SHMT_MODE_EXACT ? mx_try_use_exact(h, t, now) :
	    mx_try_use_buckets(h, t, now);
}

static int
mx_idle(struct mx_hdr *h, struct mx_thr *t, uint64_t now)
{
	uint64_t *log = (uint64_t *)(t + 1);
	struct mx_bucket *b = mx_buckets(t);

	if (h->mode == SHMT_MODE_EXACT)
		return t->len == 0 || log[(t->head + t->len - 1) % h->limit] +
		    h->window <= now;
	return t->len == 0 || b[(t->head + t->len - 1) % h->nbuckets].close +
	    h->window <= now;
}

static void
mx_thr_init(struct mx_hdr *h, struct mx_thr *t)
{
	memset(t, 0, h->thr_size);
	t->free = h->limit;
}

/* Find the client's limiter: its own entry, a free one, or an idle one to
 * take over; none within MX_PROBE slots means the table is full. */
static struct mx_thr *
mx_client(struct mx_hdr *h, uint64_t id, uint64_t now)
{
	struct mx_client *tab = (struct mx_client *)(h + 1);
	uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ULL;
	uint32_t start = (uint32_t)((x >> 32) % h->nthr), idle = UINT32_MAX;

	for (uint32_t k = 0; k < MX_PROBE && k < h->nthr; k++) {
		uint32_t i = (start + k) % h->nthr;

		if (tab[i].used && tab[i].id == id)
			return mx_thr_at(h, i);
		if (!tab[i].used || (idle == UINT32_MAX &&
		    mx_idle(h, mx_thr_at(h, i), now))) {
			idle = i;
			if (!tab[i].used)
				break;
		}
	}
	if (idle == UINT32_MAX)
		return NULL;
	tab[idle].used = 1;
	tab[idle].id = id;
	mx_thr_init(h, mx_thr_at(h, idle));
	return mx_thr_at(h, idle);
}

/* A robust mutex whose owner died is taken over as it is: the obvious
 * design has nothing to repair with. */
static int
mx_lock(struct mx_hdr *h)
{
	int rc = pthread_mutex_lock(&h->lock);

	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(&h->lock);
	return -rc;
}

static int
mx_op_key(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;
	struct mx_hdr *h = w->p->hdr;
	uint64_t now = bench_now_ns();
	int rc;

	if ((rc = mx_lock(h)) < 0)
		return rc;
	rc = mx_try_use(h, mx_thr_at(h, w->thr), now);
	pthread_mutex_unlock(&h->lock);
	return rc;
}

static int
mx_op_next(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;
	struct mx_hdr *h = w->p->hdr;
	struct mx_thr *t = mx_thr_at(h, w->thr);
	uint64_t now = bench_now_ns();
	uint32_t key = 0;
	int rc;

	if ((rc = mx_lock(h)) < 0)
		return rc;
	if ((rc = mx_try_use(h, t, now)) > 0) {
		key = t->cursor;
		t->cursor = (t->cursor + 1) % h->nkeys;
	}
	pthread_mutex_unlock(&h->lock);
	/* The caller gets the name, as with shmt_next_key. */
	if (rc > 0) {
		char buf[32];

		rc = snprintf(buf, sizeof(buf), "key-%05u", key);
	}
	return rc;
}

static int
mx_op_client(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;
	struct mx_hdr *h = w->p->hdr;
	uint64_t now = bench_now_ns();
	struct mx_thr *t;
	int rc;

	if ((rc = mx_lock(h)) < 0)
		return rc;
	if ((t = mx_client(h, arg, now)) != NULL) {
		rc = mx_try_use(h, t, now);
	} else {
		h->denied_full++;
		rc = 0;
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

static int
mx_supports(const struct bench_conf *c)
{
	return bench_kind_throttle(c->kind);
}

static void
mx_hdr_fill(struct mx_hdr *h, const struct bench_conf *c)
{
	h->limit = c->limit;
	h->window = c->window_ns;
	h->open = c->slack_ns;
	h->bsize = c->slack_uses;
	h->mode = c->mode;
	h->nkeys = c->nkeys;
	h->per_client = c->kind == BK_THROTTLE_CLIENTS;
	h->nthr = h->per_client ? c->capacity :
	    c->kind == BK_THROTTLE_DISTINCT ? (uint32_t)c->workers : 1;
	h->nbuckets = (uint32_t)((c->window_ns + c->slack_ns - 1) / c->slack_ns +
	    (c->limit + c->slack_uses - 1) / c->slack_uses);
	h->thr_size = sizeof(struct mx_thr) + (c->mode == SHMT_MODE_EXACT ?
	    c->limit * sizeof(uint64_t) :
	    h->nbuckets * sizeof(struct mx_bucket));
}

static int
mx_lock_init(struct mx_hdr *h)
{
	pthread_mutexattr_t a;
	int rc;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	rc = pthread_mutex_init(&h->lock, &a);
	pthread_mutexattr_destroy(&a);
	return -rc;
}

static int
mx_map(const char *seg, size_t size, int create, struct mx_hdr **out)
{
	int fd = shm_open(seg, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
	void *m;
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (create && ftruncate(fd, (off_t)size) < 0)
		rc = -errno;
	m = rc == 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
	    0) : MAP_FAILED;
	if (rc == 0 && m == MAP_FAILED)
		rc = -errno;
	close(fd);
	if (rc == 0)
		*out = m;
	return rc;
}

static int
mx_setup(const struct bench_conf *c, void **gp)
{
	struct mx_global *g = calloc(1, sizeof(*g));
	struct mx_hdr tmp = { 0 }, *h;
	int rc;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	snprintf(g->seg, sizeof(g->seg), "/shmt-bench-mutex-%d", (int)getpid());
	mx_hdr_fill(&tmp, c);
	g->size = sizeof(tmp) + tmp.nthr * (tmp.thr_size +
	    (tmp.per_client ? sizeof(struct mx_client) : 0));
	tmp.size = g->size;
	shm_unlink(g->seg);
	if ((rc = mx_map(g->seg, g->size, 1, &h)) < 0)
		return rc;
	*h = tmp;
	if ((rc = mx_lock_init(h)) == 0 && !h->per_client)
		for (uint32_t i = 0; i < h->nthr; i++)
			mx_thr_init(h, mx_thr_at(h, i));
	munmap(h, g->size);
	return rc;
}

static int
mx_attach(void *gp, const struct bench_conf *c, void **pctx)
{
	struct mx_global *g = gp;
	struct mx_proc *p = calloc(1, sizeof(*p));
	int rc;

	if (p == NULL)
		return -ENOMEM;
	p->c = c;
	p->size = g->size;
	if ((rc = mx_map(g->seg, g->size, 0, &p->hdr)) < 0) {
		free(p);
		return rc;
	}
	*pctx = p;
	return 0;
}

static int
mx_attach_thread(void *pctx, int worker, void **wctx, bench_op_fn *op)
{
	struct mx_proc *p = pctx;
	struct mx_worker *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -ENOMEM;
	w->p = p;
	w->thr = p->c->kind == BK_THROTTLE_DISTINCT ? (uint32_t)worker : 0;
	*op = p->c->kind == BK_THROTTLE_CLIENTS ? mx_op_client :
	    p->c->kind == BK_NEXT_KEY ? mx_op_next : mx_op_key;
	*wctx = w;
	return 0;
}

static void
mx_detach_thread(void *wctx)
{
	free(wctx);
}

static void
mx_detach(void *pctx)
{
	struct mx_proc *p = pctx;

	munmap(p->hdr, p->size);
	free(p);
}

static void
mx_teardown(void *gp)
{
	struct mx_global *g = gp;

	if (g == NULL)
		return;
	shm_unlink(g->seg);
	free(g);
}

const struct bench_sys bench_sys_mutex = {
	.name = "mutex",
	.supports = mx_supports,
	.setup = mx_setup,
	.attach = mx_attach,
	.attach_thread = mx_attach_thread,
	.detach_thread = mx_detach_thread,
	.detach = mx_detach,
	.teardown = mx_teardown,
};
