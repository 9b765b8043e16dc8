/* SPDX-License-Identifier: MIT */
/*
 * The obvious design, as a peer: the seed's throttler (a deque of buckets
 * and a free count), the sliding-window log for exact mode, and a
 * per-client table, and for the dictionary's workloads a hash table of
 * fixed-size slots, all in one shared-memory segment behind robust,
 * process-shared pthread mutexes.  Written plainly: take the lock, read
 * the clock, run the seed's algorithm, unlock.  The clock is read under
 * the lock so that this peer keeps the same safety promise as the library:
 * a caller that read the clock before the lock and was preempted could
 * spend capacity another caller released at a later time than its own.
 *
 * Two variants share every line but the choice of lock:
 *   mutex        one lock per limiter, and one per shard of the client
 *                table and of the dictionary (BENCH_SHARDS, as many as the
 *                library's segment in the bench has): the design done
 *                properly, each lock on its own cache line;
 *   mutex-1lock  one lock for the whole segment.
 * A lock whose owner died (EOWNERDEAD) is made consistent and taken over
 * as it is: the obvious design has nothing to repair with, and a killed
 * owner can at worst leave the one limiter or slot it was changing half
 * written.
 */
#include "bench.h"
#include "zipf.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* How far a client lookup probes before it gives up (table full). */
#define MX_PROBE 64

/* A robust mutex alone on its cache line. */
struct mx_lock {
	alignas(64) pthread_mutex_t m;
};

/* The seed's Throttler, behind its own lock; its bucket deque (nbuckets
 * entries) follows it.  Limiters are a multiple of 64 bytes apart. */
struct mx_thr {
	struct mx_lock lock;  /* per-client entries use their shard's */
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

/* A dictionary slot; the value (up to the configured size) follows. */
struct mx_slot {
	uint32_t used;
	uint32_t klen;
	uint32_t vlen;
	char key[16];
	uint32_t pad;
};

/*
 * The segment: this header, the shard locks, the client table (per-client
 * workloads: BENCH_SHARDS runs of `shard_n` entries), the limiters, the
 * dictionary (BENCH_SHARDS runs of `shard_n` slots).
 */
struct mx_hdr {
	struct mx_lock lock;  /* mutex-1lock: the one lock */
	struct mx_lock shard[BENCH_SHARDS];
	int single;           /* mutex-1lock */
	uint32_t shard_n;     /* client entries or dictionary slots per shard */
	uint64_t dict_slots;  /* dictionary: slots, at least twice the keys */
	uint64_t slot_size;
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
	uint64_t rnd;         /* dict-mixed: picks get or set */
	char *value;          /* dict: read into, written from */
};

/* Bytes of the client table, rounded up to whole cache lines. */
static uint64_t
mx_client_bytes(const struct mx_hdr *h)
{
	return h->per_client ? ((uint64_t)h->nthr * sizeof(struct mx_client) +
	    63) & ~63ULL : 0;
}

static struct mx_slot *
mx_slot_at(struct mx_hdr *h, uint64_t i)
{
	return (struct mx_slot *)((char *)(h + 1) + h->slot_size * i);
}

static struct mx_thr *
mx_thr_at(struct mx_hdr *h, uint32_t i)
{
	char *base = (char *)h + sizeof(*h) + mx_client_bytes(h);

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
	/* Everything but the lock. */
	memset(&t->free, 0, h->thr_size - offsetof(struct mx_thr, free));
	t->free = h->limit;
}

/* The lock that guards M's data: itself, or the one lock of mutex-1lock. */
static pthread_mutex_t *
mx_pick_lock(struct mx_hdr *h, struct mx_lock *m)
{
	return h->single ? &h->lock.m : &m->m;
}

/* A robust mutex whose owner died is taken over as it is: the obvious
 * design has nothing to repair with. */
static int
mx_lock(pthread_mutex_t *m)
{
	int rc = pthread_mutex_lock(m);

	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(m);
	return -rc;
}

/* The shard of a 64-bit hash and the first position it probes there.  The
 * high bits of FNV-1a over a short key are poorly mixed: MurmurHash3's
 * finaliser mixes them first. */
static uint32_t
mx_shard_of(const struct mx_hdr *h, uint64_t x, uint32_t *start)
{
	uint32_t hi;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	hi = (uint32_t)(x >> 32);

	*start = hi / BENCH_SHARDS % h->shard_n;
	return hi % BENCH_SHARDS;
}

/* Find the client's limiter in its shard (whose lock the caller holds):
 * its own entry, a free one, or an idle one to take over; none within
 * MX_PROBE entries means the shard is full. */
static struct mx_thr *
mx_client(struct mx_hdr *h, uint32_t shard, uint32_t start, uint64_t id,
    uint64_t now)
{
	struct mx_client *tab = (struct mx_client *)(h + 1) +
	    (uint64_t)shard * h->shard_n;
	uint32_t base = shard * h->shard_n, idle = UINT32_MAX;

	for (uint32_t k = 0; k < MX_PROBE && k < h->shard_n; k++) {
		uint32_t i = (start + k) % h->shard_n;

		if (tab[i].used && tab[i].id == id)
			return mx_thr_at(h, base + i);
		if (!tab[i].used || (idle == UINT32_MAX &&
		    mx_idle(h, mx_thr_at(h, base + i), now))) {
			idle = i;
			if (!tab[i].used)
				break;
		}
	}
	if (idle == UINT32_MAX)
		return NULL;
	tab[idle].used = 1;
	tab[idle].id = id;
	mx_thr_init(h, mx_thr_at(h, base + idle));
	return mx_thr_at(h, base + idle);
}

static int
mx_op_key(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;
	struct mx_hdr *h = w->p->hdr;
	struct mx_thr *t = mx_thr_at(h, w->thr);
	pthread_mutex_t *m = mx_pick_lock(h, &t->lock);
	uint64_t now;
	int rc;

	if ((rc = mx_lock(m)) < 0)
		return rc;
	now = bench_now_ns();
	rc = mx_try_use(h, t, now);
	pthread_mutex_unlock(m);
	return rc;
}

static int
mx_op_next(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;
	struct mx_hdr *h = w->p->hdr;
	struct mx_thr *t = mx_thr_at(h, w->thr);
	pthread_mutex_t *m = mx_pick_lock(h, &t->lock);
	uint64_t now;
	uint32_t key = 0;
	int rc;

	if ((rc = mx_lock(m)) < 0)
		return rc;
	now = bench_now_ns();
	if ((rc = mx_try_use(h, t, now)) > 0) {
		key = t->cursor;
		t->cursor = (t->cursor + 1) % h->nkeys;
	}
	pthread_mutex_unlock(m);
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
	uint32_t start, shard = mx_shard_of(h, (arg + 1) *
	    0x9E3779B97F4A7C15ULL, &start);
	pthread_mutex_t *m = mx_pick_lock(h, &h->shard[shard]);
	uint64_t now;
	struct mx_thr *t;
	int rc;

	if ((rc = mx_lock(m)) < 0)
		return rc;
	now = bench_now_ns();
	if ((t = mx_client(h, shard, start, arg, now)) != NULL) {
		rc = mx_try_use(h, t, now);
	} else {
		h->denied_full++;
		rc = 0;
	}
	pthread_mutex_unlock(m);
	return rc;
}

/* FNV-1a of KEY: the table's hash. */
static uint64_t
mx_hash(const char *key, uint32_t klen)
{
	uint64_t x = 0xcbf29ce484222325ULL;

	for (uint32_t k = 0; k < klen; k++)
		x = (x ^ (unsigned char)key[k]) * 0x100000001b3ULL;
	return x;
}

/* The slot of KEY in its shard (whose lock the caller holds), or the free
 * slot where it goes (linear probing; a shard is sized to stay at most
 * half full); NULL if the shard is full. */
static struct mx_slot *
mx_find(struct mx_hdr *h, uint32_t shard, uint32_t start, const char *key,
    uint32_t klen)
{
	uint64_t base = (uint64_t)shard * h->shard_n;

	for (uint32_t k = 0, i = start; k < h->shard_n;
	    k++, i = (i + 1) % h->shard_n) {
		struct mx_slot *s = mx_slot_at(h, base + i);

		if (!s->used || (s->klen == klen && !memcmp(s->key, key, klen)))
			return s;
	}
	return NULL;
}

static int
mx_get(struct mx_worker *w, uint64_t arg)
{
	struct mx_hdr *h = w->p->hdr;
	struct mx_slot *s;
	char key[16];
	uint32_t klen = (uint32_t)bench_key(key, arg), start;
	uint32_t shard = mx_shard_of(h, mx_hash(key, klen), &start);
	pthread_mutex_t *m = mx_pick_lock(h, &h->shard[shard]);
	int rc;

	if ((rc = mx_lock(m)) < 0)
		return rc;
	s = mx_find(h, shard, start, key, klen);
	if ((rc = s != NULL && s->used != 0))
		memcpy(w->value, s + 1, s->vlen);
	pthread_mutex_unlock(m);
	return rc;
}

static int
mx_set(struct mx_hdr *h, uint64_t arg, const char *val, uint32_t vlen)
{
	struct mx_slot *s;
	char key[16];
	uint32_t klen = (uint32_t)bench_key(key, arg), start;
	uint32_t shard = mx_shard_of(h, mx_hash(key, klen), &start);
	pthread_mutex_t *m = mx_pick_lock(h, &h->shard[shard]);
	int rc;

	if ((rc = mx_lock(m)) < 0)
		return rc;
	if ((s = mx_find(h, shard, start, key, klen)) != NULL) {
		s->used = 1;
		s->klen = klen;
		memcpy(s->key, key, klen);
		s->vlen = vlen;
		memcpy(s + 1, val, vlen);
	}
	pthread_mutex_unlock(m);
	return s != NULL ? 1 : -ENOSPC;
}

static int
mx_op_get(void *wctx, uint64_t arg)
{
	return mx_get(wctx, arg);
}

static int
mx_op_set(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;

	return mx_set(w->p->hdr, arg, w->value, w->p->c->value_size);
}

/* One op in ten is a set. */
static int
mx_op_mixed(void *wctx, uint64_t arg)
{
	struct mx_worker *w = wctx;

	return bench_rand(&w->rnd) % 10 == 0 ? mx_op_set(w, arg) :
	    mx_get(w, arg);
}

static int
mx_supports(const struct bench_conf *c)
{
	if (c->mode == SHMT_MODE_GCRA)
		return 0;       /* the mutex design has no rate mode */
	return bench_kind_throttle(c->kind) || bench_kind_dict(c->kind);
}

static void
mx_hdr_fill(struct mx_hdr *h, const struct bench_conf *c, int single)
{
	h->single = single;
	h->limit = c->limit;
	h->window = c->window_ns;
	h->open = c->slack_ns;
	h->bsize = c->slack_uses;
	h->mode = c->mode;
	h->nkeys = c->nkeys;
	h->per_client = c->kind == BK_THROTTLE_CLIENTS;
	if (h->per_client) {
		h->shard_n = (c->capacity + BENCH_SHARDS - 1) / BENCH_SHARDS;
		h->nthr = h->shard_n * BENCH_SHARDS;
	} else {
		h->nthr = c->kind == BK_THROTTLE_DISTINCT ?
		    (uint32_t)c->workers : bench_kind_throttle(c->kind) ? 1 : 0;
	}
	if (bench_kind_dict(c->kind)) {
		/* Twice a shard's share of the keys, and some room for the
		 * spread of keys over shards when there are few. */
		h->shard_n = 2 * ((c->dict_keys + BENCH_SHARDS - 1) /
		    BENCH_SHARDS) + 64;
		h->dict_slots = (uint64_t)h->shard_n * BENCH_SHARDS;
		h->slot_size = (sizeof(struct mx_slot) + c->value_size + 7) &
		    ~7ULL;
	}
	h->nbuckets = (uint32_t)((c->window_ns + c->slack_ns - 1) / c->slack_ns +
	    (c->limit + c->slack_uses - 1) / c->slack_uses);
	h->thr_size = (sizeof(struct mx_thr) + (c->mode == SHMT_MODE_EXACT ?
	    c->limit * sizeof(uint64_t) :
	    h->nbuckets * sizeof(struct mx_bucket)) + 63) & ~63ULL;
}

static int
mx_lock_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -rc;
}

static int
mx_locks_init(struct mx_hdr *h)
{
	int rc = mx_lock_init(&h->lock.m);

	for (int i = 0; rc == 0 && i < BENCH_SHARDS; i++)
		rc = mx_lock_init(&h->shard[i].m);
	for (uint32_t i = 0; rc == 0 && i < h->nthr; i++) {
		struct mx_thr *t = mx_thr_at(h, i);

		if (!h->per_client)
			mx_thr_init(h, t);
		rc = mx_lock_init(&t->lock.m);
	}
	return rc;
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

/* Store every key of the dictionary's workloads once. */
static int
mx_preload(struct mx_hdr *h, const struct bench_conf *c)
{
	char *v;
	int rc = 0;

	if (!bench_kind_dict(c->kind))
		return 0;
	if ((v = malloc((size_t)c->value_size + 1)) == NULL)
		return -ENOMEM;
	memset(v, 'v', c->value_size);
	for (uint32_t i = 0; i < c->dict_keys && rc >= 0; i++)
		rc = mx_set(h, i, v, c->value_size);
	free(v);
	return rc < 0 ? rc : 0;
}

static int
mx_setup_common(const struct bench_conf *c, void **gp, int single)
{
	struct mx_global *g = calloc(1, sizeof(*g));
	struct mx_hdr tmp, *h;
	int rc;

	if (g == NULL)
		return -ENOMEM;
	*gp = g;
	memset(&tmp, 0, sizeof(tmp));
	snprintf(g->seg, sizeof(g->seg), "/shmt-bench-mutex-%d", (int)getpid());
	mx_hdr_fill(&tmp, c, single);
	g->size = sizeof(tmp) + mx_client_bytes(&tmp) +
	    (uint64_t)tmp.nthr * tmp.thr_size +
	    tmp.dict_slots * tmp.slot_size;
	tmp.size = g->size;
	shm_unlink(g->seg);
	if ((rc = mx_map(g->seg, g->size, 1, &h)) < 0)
		return rc;
	*h = tmp;
	rc = mx_locks_init(h);
	rc = rc == 0 ? mx_preload(h, c) : rc;
	munmap(h, g->size);
	return rc;
}

static int
mx_setup(const struct bench_conf *c, void **gp)
{
	return mx_setup_common(c, gp, 0);
}

static int
mx_setup_single(const struct bench_conf *c, void **gp)
{
	return mx_setup_common(c, gp, 1);
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

int
bench_mutex_hold(void *wctx)
{
	struct mx_worker *w = wctx;
	struct mx_hdr *h = w->p->hdr;
	struct mx_thr *t = mx_thr_at(h, w->thr);

	return mx_lock(mx_pick_lock(h, &t->lock));
}

static bench_op_fn
mx_pick(enum bench_kind k)
{
	switch (k) {
	case BK_THROTTLE_CLIENTS: return mx_op_client;
	case BK_NEXT_KEY: return mx_op_next;
	case BK_DICT_GET: return mx_op_get;
	case BK_DICT_SET: return mx_op_set;
	case BK_DICT_MIXED: return mx_op_mixed;
	default: return mx_op_key;
	}
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
	w->rnd = p->c->seed ^ ((uint64_t)(worker + 1) << 32) ^ 1;
	if ((w->value = malloc((size_t)p->c->value_size + 1)) == NULL) {
		free(w);
		return -ENOMEM;
	}
	memset(w->value, 's', p->c->value_size);
	*op = mx_pick(p->c->kind);
	*wctx = w;
	return 0;
}

static void
mx_detach_thread(void *wctx)
{
	free(((struct mx_worker *)wctx)->value);
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

const struct bench_sys bench_sys_mutex_1lock = {
	.name = "mutex-1lock",
	.supports = mx_supports,
	.setup = mx_setup_single,
	.attach = mx_attach,
	.attach_thread = mx_attach_thread,
	.detach_thread = mx_detach_thread,
	.detach = mx_detach,
	.teardown = mx_teardown,
};
