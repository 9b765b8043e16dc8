/* SPDX-License-Identifier: MIT */
/*
 * Limiters: the public calls that define, use, change, delete, reset and
 * list them, and the limiter's parts of housekeeping, snapshot restore and
 * the self-check.  Each call finds its row (table.c) and hands the work to
 * the mode's protocol: the ring of buckets (ring.c, with its proof), the
 * exact log (exact.c), rate mode (gcra.c), per-client tables (clients.c);
 * decisions and waiting are in decide.c and wait.c; changing a limiter in
 * place, with its proof, in update.c.

 */
#include "fork.h"
#include "limiter.h"

#include "analyzer.h"
#include "clients.h"
#include "decide.h"
#include "dict.h"
#include "exact.h"
#include "gcra.h"
#include "grant.h"
#include "lock.h"
#include "ring.h"
#include "table.h"
#include "util.h"
#include "wait.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- Defining limiters ------------------------------------------------------ */

SHMT_EXPORT int
shmt_limit_check(const shmt_limit_t *lim, char *why, size_t why_len)
{
	struct lim_geom g;

	if (lim == NULL) {
		if (why != NULL && why_len > 0)
			snprintf(why, why_len, "lim: NULL");
		return -EINVAL;
	}
	return shmt__limit_check(lim, &g, why, why_len);
}

static int
gen_limiter_define_once(shmt_t *h, const char *name, const shmt_limit_t *l)
{
	struct lim_geom g;
	size_t len;
	int rc, lk;

	if (h == NULL || l == NULL)
		return -EINVAL;
	if ((rc = shmt__lim_name_check(name, &len)) != 0)
		return rc;
	if ((rc = shmt__limit_check(l, &g, NULL, 0)) != 0)
		return rc;
	if ((lk = shmt__table_lock(h)) != 0)
		return lk;
	rc = shmt__define_locked(h, name, len, l, &g);
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

SHMT_EXPORT int
shmt_limiter_define(shmt_t *h, const char *name, const shmt_limit_t *l)
{
	SHMT_GEN_CALL(h, gen_limiter_define_once(h, name, l));
}

/* ---- Public: using limiters ---------------------------------------------- */

/* take_shared_raw on a global limiter, or one in exact mode: out of line,
 * so that the ring's grant, inlined into the public calls, keeps their
 * registers and frame small. */
static __attribute__((noinline)) int
take_shared_other(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	return take_shared_raw(h, v, cursor);
}

/* The same for a limiter in rate mode that is not global, apart from the
 * others: its frame holds the rate grant's registers alone, where
 * take_shared_other compiles every mode's path in and saves the registers
 * of the largest, and its grant is inline instead of one more call. */
static __attribute__((noinline)) int
take_shared_rate(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	return take_rate_raw(h, v, cursor);
}

/* take_shared_raw, with a refusal of a shadow limiter granted (inlined, so
 * that a grant pays nothing for it, and into each public call, so that a
 * grant makes one call of the library, not two).  Only the ring's grant is
 * inlined; rate mode's is taken by take_shared_rate, the others by
 * take_shared_other. */
static inline __attribute__((always_inline)) int
take_shared(shmt_t *h, const struct shmt_lview *v, uint64_t *cursor)
{
	int rc;

	if (__builtin_expect((v->flags & SHMT_LIMF_GLOBAL) ||
	    v->mode != SHMT_MODE_BUCKETS, 0))
		rc = v->mode == SHMT_MODE_GCRA &&
		    !(v->flags & SHMT_LIMF_GLOBAL) ?
		    take_shared_rate(h, v, cursor) :
		    take_shared_other(h, v, cursor);
	else
		rc = take_ring_raw(h, v, cursor);
	if (__builtin_expect(rc == 0, 0))
		rc = enforce(v, 0);
	return rc;
}

int
shmt__take_ring_renewed(shmt_t *h, const struct shmt_lview *v,
    uint64_t *cursor)
{
	uint32_t tag = 0;
	int why = WHY_NONE, rc;

	for (int tries = 1;; tries++) {
		if ((rc = shmt__view_renew(h, &v)) != 0)
			return rc;
		rc = bk_take_view(h, v, &tag, &why);
		if (__builtin_expect(rc != -EAGAIN, 1))
			break;
		/* The parameters changed again. */
		if (tries == 64)
			return SHMT_EBUSYLOOP;
	}
	if (rc == 1)
		*cursor = tag;
	else if (rc == 0)
		shmt__count_denial(v->lim, why);
	return rc;
}

int
shmt__take_log_or_rate(shmt_t *h, const struct shmt_lview *v,
    uint64_t *cursor)
{
	uint64_t seq = 0;
	int rc;

	for (int tries = 0;; tries++) {
		rc = v->mode == SHMT_MODE_GCRA ? gcra_acquire(h, v, 1, NULL) :
		    shmt__ex_take(h, v, &seq);
		if (__builtin_expect(rc != -EAGAIN, 1))
			break;
		/* The parameters changed since this view was built. */
		if (tries == 64)
			return SHMT_EBUSYLOOP;
		if ((rc = shmt__view_renew(h, &v)) != 0)
			return rc;
	}
	return log_or_rate_done(v, rc, seq, cursor);
}

static inline __attribute__((always_inline)) int
gen_try_use_key_once(shmt_t *h, const char *name)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t cursor;
	int rc;

	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	if (v->flags & SHMT_LIMF_PER_CLIENT)
		return -EPERM;
	return take_shared(h, v, &cursor);
}

SHMT_EXPORT int
shmt_try_use_key(shmt_t *h, const char *name)
{
	SHMT_GEN_CALL(h, gen_try_use_key_once(h, name));
}

static inline __attribute__((always_inline)) int
gen_next_key_once(shmt_t *h, const char *name, char *buf, size_t cap)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint64_t cursor = 0;
	int rc;

	if (buf == NULL && cap != 0)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = shmt__keys_check(v, buf, cap)) != 0)
		return rc;
	if ((rc = take_shared(h, v, &cursor)) != 1)
		return rc;
	return shmt__key_copy(v, cursor, buf);
}

SHMT_EXPORT int
shmt_next_key(shmt_t *h, const char *name, char *buf, size_t cap)
{
	SHMT_GEN_CALL(h, gen_next_key_once(h, name, buf, cap));
}

/* One use of CLIENT (LEN bytes, checked) on V, a per-client limiter: 1
 * granted (or allowed by a rule), 0 refused (a shadow limiter's too:
 * shmt__try_client grants those), or an error.  The precise clock is read
 * once, by the grant: the entry's last use and the analyzer's count take
 * the grant's own time. */
static int
try_client_once(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len)
{
	struct shmt_client *e;
	struct shmt_lview tmp;
	const struct shmt_lview *vv;
	const struct shmt_w *w0;
	struct shmt_w w;
	uint64_t hash[2], now = 0, t0 = 0;
	uint32_t rule, tag, expect = 0;
	int why = WHY_NONE, rc = SHMT_EBUSYLOOP;

	if (!(v->flags & SHMT_LIMF_PER_CLIENT))
		return -EPERM;
	ce_client_hash(h, client, len, hash);
	for (int tries = 0; tries < 64; tries++) {
		/* A live entry is found inline, its word loaded once for the
		 * lookup and the grant; anything else takes the full way. */
		w0 = &w;
		rc = ce_lookup_live(v, hash, &expect, &w);
		if (__builtin_expect(rc < 0, 0)) {
			w0 = NULL;
			rc = shmt__ce_find_or_claim(h, v, hash, client, len,
			    &expect, &t0);
		}
		if (rc == -ENOSPC) {
			shmt__count_denial(v->lim, WHY_TABLE_FULL);
			rc = 0;
			break;
		}
		if (rc < 0)
			break;
		e = ce_at(v, (uint32_t)rc);
		/* ce_rule_gate, with the word of the lookup kept only for a
		 * client without a rule (the gate reads the word again). */
		rule = __atomic_load_n(&e->ce_rule, __ATOMIC_ACQUIRE);
		vv = v;
		rc = CE_GO;
		if (__builtin_expect(rule != CE_RULE_NONE, 0)) {
			w0 = NULL;
			rc = shmt__ce_rule_gate(h, v, e, expect, rule, &tmp,
			    &vv, &now);
		}
		if (__builtin_expect(rc != CE_GO, 0)) {
			if (rc >= 0)
				break;
			if (rc != -EAGAIN)
				return rc;
			rc = SHMT_EBUSYLOOP;
			if (ce_retry_spent(&t0))
				break;
			continue;
		}
		rc = v->mode == SHMT_MODE_GCRA ?
		    shmt__gcra_ce_take(h, vv, e, expect, 1, &now, NULL) :
		    bk_take_entry(h, vv, &e->ce_w, ce_ring(e), expect, &tag,
		    &why, &now, w0);
		if (rc == 1) {
			__atomic_store_n(&e->ce_last_ns, now, __ATOMIC_RELAXED);
			break;
		}
		if (rc == 0) {
			shmt__count_denial(v->lim, why);
			break;
		}
		/* -EAGAIN: the entry was reclaimed or changed hands between
		 * the lookup and the CAS; look it up again. */
		if (rc != -EAGAIN)
			return rc;
		rc = SHMT_EBUSYLOOP;
		if (ce_retry_spent(&t0))
			break;
	}
	if (rc >= 0 && shmt__an_counts(h->an, SHMT_HOT_CLIENT))
		shmt__an_feed(h, hash[0] ^ hash[1], client, len,
		    SHMT_HOT_CLIENT, now != 0 ? now : shmt__now(h));
	return rc;
}

/* A refusal of a shadow limiter is granted after the move check, as
 * take_shared does: what was refused recorded nothing, so it waits for no
 * move and is never asked again in a new generation (which would count it
 * twice). */
int
shmt__try_client(shmt_t *h, const struct shmt_lview *v, const void *client,
    size_t len)
{
	return enforce(v, shmt__grant_check(h, try_client_once(h, v, client,
	    len)));
}

static inline __attribute__((always_inline)) int
gen_try_use_once(shmt_t *h, const char *name, const void *client, size_t len)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	if (client == NULL || len == 0)
		return -EINVAL;
	if (len > SHMT_CLIENT_MAX)
		return -E2BIG;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	return shmt__try_client(h, v, client, len);
}

SHMT_EXPORT int
shmt_try_use(shmt_t *h, const char *name, const void *client, size_t len)
{
	SHMT_GEN_CALL(h, gen_try_use_once(h, name, client, len));
}

/* ---- Resolved limiters ------------------------------------------------------- */

/*
 * A resolved limiter is the row's view, found once.  Views live as long as
 * the handle and are never reused for another row; rows are never reused
 * for another limiter (a deleted row stays DELETED), so the pointer can
 * only go stale by the row's deletion (row_live, one load per call), by a
 * change of parameters (view_latest follows the chain the change left), by
 * a fork or a retired segment (SHMT_FORK_CHECK).  What a call skips is the
 * name: no thread-local lookup, no compare, whatever its length.
 */
struct lh_pair {
	shmt_t *h;                    /* a generation's handle */
	const struct shmt_lview *v;   /* the row's view in it */
	struct lh_pair *older;        /* kept until shmt_limiter_close */
};

/* After a move (move.c) the view of the old generation is resolved again
 * by name on the new one: the pair {handle, view} changes in one pointer,
 * so a call never mixes a generation's handle with another's view. */
struct shmt_limiter {
	struct lh_pair *cur;
	pthread_mutex_t mu;           /* serialises re-resolutions */
};

static int
lh_find(shmt_t *h, const char *name, const struct shmt_lview **out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	/* A view in SCRATCH means another thread of this process is filling
	 * the row's own view: fill it again until that one is published (it
	 * is a copy of a few hundred bytes, no wait on another process). */
	for (unsigned i = 0; v == &scratch; i++) {
		if (i == SHMT_RETRY_MAX)
			return SHMT_EBUSYLOOP;
		sched_yield();
		if ((rc = shmt__view_get(h, scratch.lv_row, &scratch, &v)) != 0)
			return rc;
	}
	/* The row's first view: view_latest() gives the one in force from
	 * it (a later view of the chain need not be). */
	*out = &__atomic_load_n(&h->lviews, __ATOMIC_ACQUIRE)[v->lv_row];
	return 0;
}

static int
gen_limiter_open_once(shmt_t *h, const char *name, shmt_limiter_t **out)
{
	const struct shmt_lview *v;
	struct shmt_limiter *l;
	int rc;

	if (out == NULL)
		return -EINVAL;
	if ((rc = lh_find(h, name, &v)) != 0)
		return rc;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return -ENOMEM;
	if ((l->cur = calloc(1, sizeof(*l->cur))) == NULL) {
		free(l);
		return -ENOMEM;
	}
	pthread_mutex_init(&l->mu, NULL);
	l->cur->h = h;
	l->cur->v = v;
	*out = l;
	return 0;
}

SHMT_EXPORT int
shmt_limiter_open(shmt_t *h, const char *name, shmt_limiter_t **out)
{
	SHMT_GEN_CALL(h, gen_limiter_open_once(h, name, out));
}

SHMT_EXPORT void
shmt_limiter_close(shmt_limiter_t *l)
{
	struct lh_pair *p, *o;

	if (l == NULL)
		return;
	for (p = l->cur; p != NULL; p = o) {
		o = p->older;
		free(p);
	}
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* Resolve L's limiter again, by name, on the generation LIVE. */
static int
lh_resolve(shmt_limiter_t *l, shmt_t *live)
{
	struct lh_pair *c, *n;
	int rc = 0;

	shmt__quiet_lock(&l->mu);
	c = l->cur;
	if (c->h != live) {
		const struct shmt_lview *v;

		if ((rc = lh_find(live, c->v->name, &v)) == 0) {
			if ((n = malloc(sizeof(*n))) == NULL) {
				rc = -ENOMEM;
			} else {
				n->h = live;
				n->v = v;
				n->older = c;
				__atomic_store_n(&l->cur, n, __ATOMIC_RELEASE);
			}
		}
	}
	shmt__quiet_unlock(&l->mu);
	return rc;
}

/* The handle and view of L for a call: 0, or an error for the whole
 * call. */
static inline __attribute__((always_inline)) int
lh_view(shmt_limiter_t *l, shmt_t **hp, const struct shmt_lview **vp)
{
	struct lh_pair *c;
	shmt_t *live;
	int rc;

	if (__builtin_expect(l == NULL, 0))
		return -EINVAL;
	c = __atomic_load_n(&l->cur, __ATOMIC_ACQUIRE);
	live = shmt__gen_live(c->h);
	if (__builtin_expect(live != c->h, 0)) {
		if ((rc = lh_resolve(l, live)) != 0)
			return rc;
		c = __atomic_load_n(&l->cur, __ATOMIC_ACQUIRE);
	}
	SHMT_FORK_CHECK(c->h);
	if (__builtin_expect(!row_live(c->v), 0))
		return -ENOENT;
	*hp = c->h;
	*vp = view_latest(c->v);
	return 0;
}

/* shmt__name_paced for L's current handle (L may be NULL: an argument
 * error; its cur is loaded only when a look is due). */
static inline void
lh_name_paced(shmt_limiter_t *l)
{
	if (__builtin_expect((++shmt__name_tick & (SHMT_NAME_TICKS - 1)) == 0,
	    0) && l != NULL)
		shmt__name_look(shmt__gen_live(
		    __atomic_load_n(&l->cur, __ATOMIC_ACQUIRE)->h));
}

/* Retry a call on L on the next generation when its segment moved; all
 * of it inside one read-side section (rcu.h). */
#define LH_GEN_CALL(l, call) do { \
	shmt__rcu_enter(); \
	for (int lt_ = 0;; lt_++) { \
		int lrc_ = (call); \
		if (__builtin_expect(lrc_ != SHMT_ESTALE, 1) || lt_ == 8 || \
		    shmt__gen_follow(shmt__gen_live( \
		    __atomic_load_n(&(l)->cur, __ATOMIC_ACQUIRE)->h)) != 0) { \
			lh_name_paced(l); \
			shmt__rcu_leave(); \
			return lrc_; \
		} \
	} \
} while (0)

static int
limiter_try_once(shmt_limiter_t *l, const void *client, size_t len)
{
	const struct shmt_lview *v;
	uint64_t cursor;
	shmt_t *h;
	int rc;

	if ((rc = lh_view(l, &h, &v)) != 0)
		return rc;
	if (client == NULL) {
		if (len != 0)
			return -EINVAL;
		if (v->flags & SHMT_LIMF_PER_CLIENT)
			return -EPERM;
		return take_shared(h, v, &cursor);
	}
	if (len == 0)
		return -EINVAL;
	if (len > SHMT_CLIENT_MAX)
		return -E2BIG;
	return shmt__try_client(h, v, client, len);
}

SHMT_EXPORT int
shmt_limiter_try(shmt_limiter_t *l, const void *client, size_t len)
{
	LH_GEN_CALL(l, limiter_try_once(l, client, len));
}

static int
limiter_acquire_once(shmt_limiter_t *l, const void *client, size_t len,
    uint64_t cost, shmt_decision_t *out)
{
	const struct shmt_lview *v;
	uint64_t cursor = 0;
	shmt_t *h;
	int rc;

	if ((rc = lh_view(l, &h, &v)) != 0 ||
	    (rc = shmt__decide_check(h, &v, client, len, cost)) != 0)
		return rc;
	if (client != NULL)
		return enforce(v, shmt__acquire_client(h, v, client, len,
		    cost, out, NULL));
	return enforce(v, shmt__acquire_shared(h, v, cost, &cursor, out,
	    NULL));
}

SHMT_EXPORT int
shmt_limiter_acquire(shmt_limiter_t *l, const void *client, size_t len,
    uint64_t cost, shmt_decision_t *out)
{
	LH_GEN_CALL(l, limiter_acquire_once(l, client, len, cost, out));
}

/* ---- Deleting and resetting -------------------------------------------------- */

static int
gen_limiter_delete_once(shmt_t *h, const char *name)
{
	struct shmt_lim *lim;
	uint32_t n, r;
	size_t len;
	int rc, lk;

	if (h == NULL)
		return -EINVAL;
	if ((rc = shmt__lim_name_check(name, &len)) != 0)
		return rc;
	if ((lk = shmt__table_lock(h)) != 0)
		return lk;
	lim = shmt__rows(h, &n);
	rc = -ENOENT;
	for (r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY ||
		    strncmp(lim[r].lm_name, name, sizeof(lim[r].lm_name)) != 0)
			continue;
		/* Never FREE: a process may still hold a view of the row,
		 * and must never find another limiter under it. */
		__atomic_store_n(&lim[r].lm_state, SHMT_LIM_DELETED,
		    __ATOMIC_RELEASE);
		__atomic_fetch_add(&h->hdr->sh_generation, 1, __ATOMIC_RELEASE);
		/* Sleepers in shmt_wait wake, see the row deleted and
		 * return -ENOENT. */
		shmt__wake_waiters(&lim[r].lm_wake);
		rc = 0;
		break;
	}
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

SHMT_EXPORT int
shmt_limiter_delete(shmt_t *h, const char *name)
{
	SHMT_GEN_CALL(h, gen_limiter_delete_once(h, name));
}

static int
gen_limiter_reset_once(shmt_t *h, const char *name, const void *client,
    size_t client_len)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int64_t n = 0, k;
	int rc;

	if ((client == NULL) != (client_len == 0))
		return -EINVAL;
	if (client_len > SHMT_CLIENT_MAX)
		return -E2BIG;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0)
		return rc;
	if (client != NULL && !(v->flags & SHMT_LIMF_PER_CLIENT))
		return -EPERM;
	if (v->flags & SHMT_LIMF_PER_CLIENT) {
		uint64_t hash[2], hw[2];
		uint32_t home = 0, probe = v->capacity;

		if (client != NULL) {
			shmt__client_hash(h, client, client_len, hash);
			home = shmt__client_home(hash, v->capacity);
			probe = ce_probe(v);
		}
		for (uint32_t j = 0; j < probe; j++) {
			struct shmt_client *e = ce_at(v,
			    (home + j) % v->capacity);

			if (client != NULL) {
				shmt__load128(e->ce_hash, hw);
				if (hw[0] == 0 && hw[1] == 0)
					break;
				if (!ce_hash_match(hw, hash))
					continue;
			}
			if ((k = shmt__ce_reset(v, e)) < 0)
				return (int)k;
			n += k;
		}
	} else if (v->mode == SHMT_MODE_GCRA) {
		n = shmt__gcra_reset(&v->lim->lm_w, 0);
	} else if (v->mode == SHMT_MODE_EXACT) {
		n = shmt__ex_reset(v, shmt__now(h));
	} else {
		n = shmt__bk_reset(&v->lim->lm_w, 0);
	}
	if (n < 0)
		return (int)n;
	if (n > 0) {
		__atomic_fetch_add(&v->lim->lm_reset_uses, (uint64_t)n,
		    __ATOMIC_RELAXED);
		if (v->mode == SHMT_MODE_BUCKETS)
			__atomic_fetch_add(&v->lim->lm_released_uses,
			    (uint64_t)n, __ATOMIC_RELAXED);
		shmt__wake_waiters(&v->lim->lm_wake);
	}
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

SHMT_EXPORT int
shmt_limiter_reset(shmt_t *h, const char *name, const void *client,
    size_t client_len)
{
	SHMT_GEN_CALL(h, gen_limiter_reset_once(h, name, client, client_len));
}

/* ---- Statistics ------------------------------------------------------------- */

static void
stat_fill(shmt_t *h, const struct shmt_lview *v, shmt_limiter_stat_t *o)
{
	struct shmt_lim *lim = v->lim;
	uint64_t inflight = 0;
	struct shmt_w w;

	memset(o, 0, sizeof(*o));
	memcpy(o->name, v->name, sizeof(o->name));
	o->limit = v->limit;
	o->window_ns = v->window;
	o->slack_ns = v->slack;
	o->slack_uses = v->slack_uses;
	o->mode = (int)v->mode;
	o->nbuckets = v->nb;
	o->nkeys = v->nkeys;
	o->uses_per_key = v->uses_per_key;
	o->per_client = (v->flags & SHMT_LIMF_PER_CLIENT) != 0;
	o->client_capacity = v->capacity;
	if (v->mode == SHMT_MODE_EXACT) {
		inflight = shmt__ex_inflight(v, shmt__now(h));
		o->grants = (uint64_t)__atomic_load_n(
		    (int64_t *)&lim->lm_w.w[0], __ATOMIC_RELAXED);
	} else if (!o->per_client) {
		shmt__load128(&lim->lm_w, w.w);
		inflight = SHMT_W_INFLIGHT(w);
		o->buckets_in_use = SHMT_W_NSEALED(w) + SHMT_W_ACTIVE(w);
	} else {
		for (uint32_t i = 0; i < v->capacity; i++) {
			shmt__load128(&ce_at(v, i)->ce_w, w.w);
			if (SHMT_W_TAG(w) >> 14 != CE_LIVE)
				continue;
			o->clients_in_use++;
			inflight += SHMT_W_INFLIGHT(w);
			o->buckets_in_use += SHMT_W_NSEALED(w) + SHMT_W_ACTIVE(w);
		}
	}
	o->in_flight = inflight;
	o->free = !o->per_client && inflight <= v->limit ? v->limit - inflight : 0;
	if (v->mode != SHMT_MODE_EXACT)
		o->grants = __atomic_load_n(&lim->lm_released_uses,
		    __ATOMIC_RELAXED) + inflight;
	o->denied_exhausted = __atomic_load_n(&lim->lm_denied_exhausted,
	    __ATOMIC_RELAXED);
	o->denied_slack = __atomic_load_n(&lim->lm_denied_slack, __ATOMIC_RELAXED);
	o->denied_table_full = __atomic_load_n(&lim->lm_denied_table_full,
	    __ATOMIC_RELAXED);
	o->denied_ring_full = __atomic_load_n(&lim->lm_denied_ring_full,
	    __ATOMIC_RELAXED);
	o->housekeeping_lag_ns = __atomic_load_n(&h->hdr->sh_lag_ns,
	    __ATOMIC_RELAXED);
	o->burst = v->burst;
	o->reset_uses = __atomic_load_n(&lim->lm_reset_uses, __ATOMIC_RELAXED);
	o->shadow = (v->flags & SHMT_LIMF_SHADOW) != 0;
	o->would_deny = __atomic_load_n(&lim->lm_would_deny, __ATOMIC_RELAXED);
	o->client_overrides = v->ovcap;
	for (uint32_t i = 0; i < v->ovcap; i++)
		if (__atomic_load_n(&v->ov[i].ov_rule, __ATOMIC_RELAXED) != 0)
			o->overrides_in_use++;
	o->allowed_by_rule = __atomic_load_n(&lim->lm_allowed_by_rule,
	    __ATOMIC_RELAXED);
	o->denied_by_rule = __atomic_load_n(&lim->lm_denied_by_rule,
	    __ATOMIC_RELAXED);
	if (v->mode == SHMT_MODE_GCRA)
		shmt__gcra_stat(h, v, o);
}

static int
gen_limiter_stat_once(shmt_t *h, const char *name, shmt_limiter_stat_t *out)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	if (out == NULL)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = shmt__view_fresh(h, &v)) != 0)
		return rc;
	stat_fill(h, v, out);
	return 0;
}

SHMT_EXPORT int
shmt_limiter_stat(shmt_t *h, const char *name, shmt_limiter_stat_t *out)
{
	SHMT_GEN_READ(h, gen_limiter_stat_once(h, name, out));
}

static int
gen_limiter_list_once(shmt_t *h, shmt_limiter_stat_t *out, size_t cap)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	struct shmt_lim *lim;
	uint32_t n;
	size_t k = 0;

	if (h == NULL || (out == NULL && cap != 0))
		return -EINVAL;
	lim = shmt__rows(h, &n);
	for (uint32_t r = 0; r < n; r++) {
		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY || shmt__view_get(h, r, &scratch, &v) != 0 ||
		    shmt__view_fresh(h, &v) != 0)
			continue;
		if (k < cap)
			stat_fill(h, v, &out[k]);
		k++;
	}
	return k > INT32_MAX ? INT32_MAX : (int)k;
}

SHMT_EXPORT int
shmt_limiter_list(shmt_t *h, shmt_limiter_stat_t *out, size_t cap)
{
	SHMT_GEN_READ(h, gen_limiter_list_once(h, out, cap));
}

/* How often shmt_limiter_buckets reads a ring whose word moved under it. */
#define BUCKETS_READS 100000

static int buckets_read(shmt_t *h, const struct shmt_lview *v,
    shmt_bucket_info_t *out, size_t cap, struct shmt_w *wp);

static int
gen_limiter_buckets_once(shmt_t *h, const char *name, shmt_bucket_info_t *out,
    size_t cap)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	struct shmt_w w;
	int rc;

	if (out == NULL && cap != 0)
		return -EINVAL;
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = shmt__view_fresh(h, &v)) != 0)
		return rc;
	if (v->mode != SHMT_MODE_BUCKETS || (v->flags & SHMT_LIMF_PER_CLIENT))
		return -EPERM;
	/* A ring that turns over while it is read (grants that release and
	 * reuse slots) shows slots of later serials: read it again while its
	 * word moves.  A bucket's slot is written before the CAS of the word
	 * that opens it (slot_open), so a slot that holds another serial
	 * under a word that stood still is damage. */
	for (unsigned t = 0;; t++) {
		struct shmt_w w2;

		rc = buckets_read(h, v, out, cap, &w);
		if (rc != SHMT_ECORRUPT)
			return rc;
		shmt__load128(&v->lim->lm_w, w2.w);
		if (w2.w[0] == w.w[0] && w2.w[1] == w.w[1])
			return rc;
		if (t >= BUCKETS_READS)
			return SHMT_EBUSYLOOP;
	}
}

/* One read of V's ring into OUT (CAP entries): its bucket count, or
 * SHMT_ECORRUPT when a slot does not hold the serial the word *W (read
 * first) gives it. */
static int
buckets_read(shmt_t *h, const struct shmt_lview *v, shmt_bucket_info_t *out,
    size_t cap, struct shmt_w *wp)
{
	struct shmt_w w;
	uint32_t tail, nsealed, total;
	uint64_t now;

	shmt__load128(&v->lim->lm_w, w.w);
	*wp = w;
	tail = SHMT_W_TAIL(w);
	nsealed = SHMT_W_NSEALED(w);
	total = nsealed + SHMT_W_ACTIVE(w);
	if (total > v->nb)
		return SHMT_ECORRUPT;
	now = shmt__now(h);
	for (uint32_t i = 0; i < total && i < cap; i++) {
		uint32_t serial = tail - nsealed + i;
		uint64_t s[2];

		shmt__load128(&v->ring[serial % v->nb], s);
		out[i].serial = serial;
		/* The last bucket's count lives in W, not in its slot, until it
		 * is sealed; it takes uses while it is neither full nor closed. */
		out[i].uses = serial == tail ? SHMT_W_COUNT(w) : SLOT_COUNT(s);
		out[i].active = serial == tail && out[i].uses < v->slack_uses &&
		    now < s[0];
		out[i].close_ns = s[0];
		out[i].release_ns = bk_due_of(v->window, v->hold_window,
		    v->hold_serial, v->hold_until, serial, s[0]);
		if (SLOT_SERIAL(s) != serial)
			return SHMT_ECORRUPT;
	}
	return (int)total;
}

SHMT_EXPORT int
shmt_limiter_buckets(shmt_t *h, const char *name, shmt_bucket_info_t *out,
    size_t cap)
{
	SHMT_GEN_READ(h, gen_limiter_buckets_once(h, name, out, cap));
}

/* ---- Housekeeping --------------------------------------------------------- */

int
shmt__limiters_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n);
	int actions = 0, locked = 0;

	for (uint32_t r = 0; r < n; r++) {
		struct bk_ctx c;
		int rc;

		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY || shmt__view_get(h, r, &scratch, &v) != 0)
			continue;
		if (v->flags & SHMT_LIMF_PER_CLIENT) {
			/* Idle entries of either mode are reclaimed. */
			if (locked != 0)
				continue;
			rc = shmt__hk_clients(h, v, now, next);
		} else if (v->mode == SHMT_MODE_EXACT ||
		    v->mode == SHMT_MODE_GCRA) {
			continue;  /* its log or arrival time ages alone */
		} else {
			rc = -EAGAIN;
			/* -EAGAIN: the parameters changed meanwhile. */
			for (int tries = 0; rc == -EAGAIN && tries < 64;
			    tries++) {
				if ((rc = shmt__view_fresh(h, &v)) != 0)
					break;
				shmt__bk_ctx_init(&c, v, v->ring);
				rc = shmt__bk_housekeep(h, &c, &v->lim->lm_w, now,
				    next);
			}
			if (rc == -EAGAIN)
				rc = SHMT_EBUSYLOOP;
			if (rc == -ENOENT)
				continue;      /* deleted meanwhile */
		}
		/* A client lock a live process kept past its bound: the
		 * client tables wait for the next run (one such wait per run,
		 * not one per table); shared rings go on. */
		if (rc == SHMT_ELOCKED) {
			locked = rc;
			continue;
		}
		if (rc < 0)
			return rc;
		actions += rc;
	}
	return locked != 0 ? locked : actions;
}

/* ---- Rebasing stored times (snapshot restore) ------------------------------- */

static uint64_t
shift(uint64_t t, int64_t d)
{
	if (d < 0)
		return t < 0 - (uint64_t)d ? 0 : t - (0 - (uint64_t)d);
	return sat_add(t, (uint64_t)d);
}

/* A slot never opened holds serial 0 and close time 0 and keeps them;
 * every other moves, bucket 0 included (a serial wraps to 0 after 2^32
 * buckets, and its bucket's close time is a time like any other). */
static void
rebase_ring(struct shmt_ring_slot *ring, uint32_t nb, int64_t d)
{
	for (uint32_t i = 0; i < nb; i++)
		if (SLOT_SERIAL(ring[i].r) != 0 || ring[i].r[0] != 0)
			ring[i].r[0] = shift(ring[i].r[0], d);
}

int
shmt__rebase_times(shmt_t *h, int64_t d)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n);

	if (h == NULL)
		return -EINVAL;
	for (uint32_t r = 0; r < n; r++) {
		int rc;

		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY)
			continue;
		if ((rc = shmt__view_get(h, r, &scratch, &v)) != 0)
			return rc;
		/* A definition changed by a move holds its carried buckets
		 * until the time in block 0 (table.c): a time like theirs,
		 * kept above 0 (0 is "none"). */
		if ((v->flags & (SHMT_LIMF_PER_CLIENT | SHMT_LIMF_KEYS)) &&
		    v->mode == SHMT_MODE_BUCKETS &&
		    v->lim->lm_p[0].lp_hold_window != 0) {
			uint64_t u = shift(v->lim->lm_p[0].lp_slack, d);

			v->lim->lm_p[0].lp_slack = u != 0 ? u : 1;
		}
		if (v->flags & SHMT_LIMF_PER_CLIENT) {
			/* Each entry's ring or arrival time (rate mode). */
			for (uint32_t i = 0; i < v->capacity; i++) {
				struct shmt_client *e = ce_at(v, i);

				if (v->mode != SHMT_MODE_GCRA)
					rebase_ring(ce_ring(e), v->nb, d);
				else if (e->ce_w.w[0] != 0)
					e->ce_w.w[0] = shift(e->ce_w.w[0], d);
				if (e->ce_last_ns != 0)
					e->ce_last_ns = shift(e->ce_last_ns, d);
			}
		} else if (v->mode == SHMT_MODE_GCRA) {
			if (v->lim->lm_w.w[0] != 0)
				v->lim->lm_w.w[0] = shift(v->lim->lm_w.w[0], d);
		} else if (v->mode == SHMT_MODE_EXACT) {
			for (uint64_t i = 0; i < v->nlog; i++)
				if (v->log[i].ls_seq >= 0)
					v->log[i].ls_time =
					    shift(v->log[i].ls_time, d);
		} else if (v->flags & SHMT_LIMF_GLOBAL) {
			/* Leases of another boot's daemon and Redis. */
			shmt__global_forget(&v->lim->lm_g);
		} else {
			rebase_ring(v->ring, v->nb, d);
		}
	}
	shmt__stores_rebase(h, d);
	return 0;
}

/* ---- Checking ------------------------------------------------------------------ */

/*
 * Times.  Every time a limiter stores is a clock value some caller read
 * before storing it, and the check reads its own clock after reading the
 * stored value, so on the one clock all processes share (see the header's
 * caveats) a legitimate time is never later than:
 *   - a bucket's close time: now + slack (a bucket opens at its opener's
 *     now and closes slack later; one sealed early because it filled up
 *     keeps that planned close time);
 *   - an exact log's grant time: now.
 * Anything later is damage: such a bucket holds its uses until its close
 * time + window, such a log record blocks its slot as long.  Close times
 * also follow serial order (each opener reads its clock after the word that
 * shows the bucket before it opened).
 */

void
shmt__limiters_check(shmt_t *h, struct shmt_chk *c)
{
	struct shmt_lview v;
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n);

	for (uint32_t r = 0; r < n; r++) {
		uint32_t st = __atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE);
		char who[SHMT_LIMITER_NAME_MAX + 16];
		struct bk_ctx bc;
		int rc;

		if (st == SHMT_LIM_FREE || st == SHMT_LIM_BUILDING ||
		    st == SHMT_LIM_DELETED)
			continue;
		if (st != SHMT_LIM_READY) {
			shmt__chk(c, "limiter row %u: unknown state %u", r, st);
			continue;
		}
		if ((rc = shmt__view_fill(h, r, &lim[r], &v)) != 0) {
			shmt__chk(c, "limiter row %u: inconsistent parameters or "
			    "storage (%s)", r, shmt_strerror(rc));
			continue;
		}
		/* Storage is laid out ring, keys, clients, overrides: the
		 * clients (or their overrides) end it, and it must lie below
		 * the arena's allocation mark. */
		if (lim[r].lm_clients_off +
		    (uint64_t)lim[r].lm_capacity * lim[r].lm_entsize >
		    __atomic_load_n(&h->hdr->sh_arena_used, __ATOMIC_RELAXED) ||
		    lim[r].lm_ov_off + (uint64_t)v.ovcap *
		    sizeof(struct shmt_override) >
		    __atomic_load_n(&h->hdr->sh_arena_used, __ATOMIC_RELAXED))
			shmt__chk(c, "limiter %s: storage beyond the arena's mark",
			    v.name);
		if (v.mode != SHMT_MODE_BUCKETS && v.pgen_check &&
		    gcra_word_count(__atomic_load_n(&v.lim->lm_w.w[1],
		    __ATOMIC_ACQUIRE)) > (v.mode == SHMT_MODE_GCRA ?
		    GCRA_COUNT_MAX : 0)) {
			/* The word's second half is the parameter generation
			 * alone (exact.c), or with the count of grants below
			 * its bound (rate mode, gcra.h); the view above
			 * checked the generation's parameters.  Repair: keep
			 * the generation, clear the rest (a rate limiter's
			 * count of grants restarts from lm_exact_grants). */
			uint64_t w[2], nw[2];

			shmt__chk(c, "limiter %s: state word's second half "
			    "%#llx holds more than a parameter generation%s",
			    v.name, (unsigned long long)v.lim->lm_w.w[1],
			    v.mode == SHMT_MODE_GCRA ? " and a count of grants "
			    "below its bound" : "");
			shmt__load128(&v.lim->lm_w, w);
			nw[0] = w[0];
			nw[1] = w[1] & 0xffffU;
			if (c->repair)
				shmt__cas128(&v.lim->lm_w, w, nw);
		}
		if (v.mode == SHMT_MODE_GCRA) {
			/* Any arrival time is a valid state. */
		} else if (v.mode == SHMT_MODE_EXACT) {
			shmt__chk_exact(h, c, &v);
		} else if (v.flags & SHMT_LIMF_PER_CLIENT) {
			shmt__chk_clients(h, c, &v);
		} else {
			snprintf(who, sizeof(who), "limiter %s", v.name);
			shmt__bk_ctx_init(&bc, &v, v.ring);
			shmt__chk_ring(h, c, who, &bc, &v.lim->lm_w);
			if (v.flags & SHMT_LIMF_GLOBAL)
				shmt__global_chk(h, c, v.name, &v.lim->lm_g,
				    v.limit, v.slack);
		}
	}
}
