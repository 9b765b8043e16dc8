/* SPDX-License-Identifier: MIT */
/*
 * Per-client limiters: a table of client entries, each with its own state
 * word and ring, found by the keyed hash of the client's id within a short
 * probe from its home entry, claimed under the row's client lock, and
 * reclaimed once idle; housekept and checked here too.
 */
#include "clients.h"

#include "gcra.h"
#include "hash.h"
#include "lock.h"
#include "ring.h"
#include "util.h"

#include <stdio.h>

/* 128-bit hash of a client id, keyed with the segment's secret (hash.h):
 * ids come from outside, and a public hash would let anyone fill a
 * victim's neighbourhood of the table with ids found offline.  A collision
 * makes two clients share one limit, which is stricter, never looser. */
void
shmt__client_hash(const shmt_t *h, const void *id, size_t len, uint64_t out[2])
{
	shmt__hash128(&h->key, id, len, out);
	out[0] |= 1;                /* never 0: 0 marks a never-used entry */
	out[1] &= ~0xffffULL;       /* the low 16 bits hold the epoch */
}

static int
ce_lookup(const struct shmt_lview *v, const uint64_t hash[2], uint32_t *tagp)
{
	uint32_t cap = v->capacity, home = shmt__client_home(hash, cap);

	for (uint32_t k = 0; k < ce_probe(v); k++) {
		uint32_t i = (home + k) % cap;
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2];
		struct shmt_w w;
		uint32_t ep;

		shmt__load128(e->ce_hash, hw);
		if (hw[0] == 0 && hw[1] == 0)
			return -ENOENT;
		if (!ce_hash_match(hw, hash))
			continue;
		ep = (uint32_t)(hw[1] & CE_EPOCH_MASK);
		shmt__load128(&e->ce_w, w.w);
		if ((SHMT_W_TAG(w) & CE_EPOCH_MASK) != ep)
			return CE_SLOWPATH;
		*tagp = CE_TAG(CE_LIVE, ep);
		switch (SHMT_W_TAG(w) >> 14) {
		case CE_LIVE:
			return (int)i;
		case CE_FREE: {
			struct shmt_w nw = ce_word(SHMT_W_TAIL(w), CE_LIVE, ep);

			if (!ce_idle(w))
				return SHMT_ECORRUPT;
			/* Revive it; if the CAS fails someone else changed
			 * it, and the tag check of the grant decides. */
			shmt__cas128(&e->ce_w, w.w, nw.w);
			return (int)i;
		}
		default:
			return CE_SLOWPATH;
		}
	}
	return -ENOENT;
}

/* Release due buckets of entry E at NOW and mark it free when idle.  Called
 * with the client lock held.  Returns 1 when E is free afterwards. */
static int
ce_try_reclaim(shmt_t *h, const struct shmt_lview *v, struct shmt_client *e,
    uint64_t now)
{
	struct bk_ctx c;
	struct shmt_w w, nw;
	uint64_t next = UINT64_MAX;
	uint32_t tag;

	shmt__load128(&e->ce_w, w.w);
	tag = SHMT_W_TAG(w);
	if (tag >> 14 == CE_FREE || tag >> 14 == CE_NEVER)
		return 1;
	if (tag >> 14 != CE_LIVE)
		return 0;
	if (v->mode == SHMT_MODE_GCRA)
		return shmt__gcra_ce_reclaim(e, now);
	shmt__bk_ctx_init(&c, v, ce_ring(e));
	c.ntags = 0;
	if (shmt__bk_housekeep(h, &c, &e->ce_w, now, &next) < 0)
		return 0;
	shmt__load128(&e->ce_w, w.w);
	if (SHMT_W_TAG(w) >> 14 != CE_LIVE || !ce_idle(w))
		return 0;
	nw = w;
	nw.w[1] = (nw.w[1] & ~0xffffULL) |
	    CE_TAG(CE_FREE, SHMT_W_TAG(w) & CE_EPOCH_MASK);
	return shmt__cas128(&e->ce_w, w.w, nw.w);
}

/* Repair after a claimer died holding the client lock: an entry left
 * CLAIMING becomes free, with its hash word's epoch made to match. */
static void
ce_repair(const struct shmt_lview *v)
{
	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2];
		struct shmt_w w, nw;
		uint32_t ep;

		shmt__load128(&e->ce_w, w.w);
		if (SHMT_W_TAG(w) >> 14 != CE_CLAIMING)
			continue;
		ep = SHMT_W_TAG(w) & CE_EPOCH_MASK;
		shmt__load128(e->ce_hash, hw);
		if ((hw[1] & CE_EPOCH_MASK) != ep) {
			/* The new hash never landed: a tombstone that matches
			 * no client (no real hash has hw[0] == 0). */
			hw[0] = 0;
			hw[1] = ep;
			shmt__store128(e->ce_hash, hw);
		}
		nw = ce_word(SHMT_W_TAIL(w), CE_FREE, ep);
		shmt__cas128(&e->ce_w, w.w, nw.w);
	}
}

/* Claim an entry for HASH under the client lock.  Returns its index, or
 * -ENOSPC when every entry on the path is live and busy. */
static int
ce_claim(shmt_t *h, const struct shmt_lview *v, const uint64_t hash[2],
    const void *id, size_t idlen, uint32_t *tagp)
{
	uint32_t cap = v->capacity, home = shmt__client_home(hash, cap);
	uint64_t now = shmt__now(h), hw[2];
	struct shmt_client *e = NULL;
	struct shmt_w w, nw;
	uint32_t i = 0, ep;
	int rc;

	/* Another claimer may have added it while we waited for the lock. */
	rc = ce_lookup(v, hash, tagp);
	if (rc >= 0 && rc != CE_SLOWPATH)
		return rc;
	for (uint32_t k = 0; k < ce_probe(v); k++) {
		i = (home + k) % cap;
		if (ce_try_reclaim(h, v, ce_at(v, i), now)) {
			e = ce_at(v, i);
			break;
		}
	}
	if (e == NULL)
		return -ENOSPC;
	shmt__load128(&e->ce_w, w.w);
	ep = ((SHMT_W_TAG(w) & CE_EPOCH_MASK) % CE_EPOCH_MASK) + 1;
	nw = ce_word(SHMT_W_TAIL(w), CE_CLAIMING, ep);
	if (!shmt__cas128(&e->ce_w, w.w, nw.w))
		return -EAGAIN;       /* revived under us: look again */
	hw[0] = hash[0];
	hw[1] = hash[1] | ep;
	shmt__store128(e->ce_hash, hw);
	e->ce_idlen = (uint32_t)idlen;
	memcpy(e->ce_id, id, idlen < sizeof(e->ce_id) ? idlen : sizeof(e->ce_id));
	w = nw;
	nw = ce_word(SHMT_W_TAIL(w), CE_LIVE, ep);
	if (!shmt__cas128(&e->ce_w, w.w, nw.w))
		return SHMT_ECORRUPT;
	*tagp = CE_TAG(CE_LIVE, ep);
	return (int)i;
}

int
shmt__ce_find_or_claim(shmt_t *h, const struct shmt_lview *v,
    const uint64_t hash[2], const void *id, size_t idlen, uint32_t *tagp,
    uint64_t *t0)
{
	int rc = ce_lookup(v, hash, tagp);

	if (rc >= 0 && rc != CE_SLOWPATH)
		return rc;
	if (rc < 0 && rc != -ENOENT)
		return rc;
	for (int tries = 0; tries < 8; tries++) {
		int lk = shmt__lock(h, &v->lim->lm_client_lock);

		if (lk < 0)
			return lk;
		if (lk == 1)
			ce_repair(v);
		rc = ce_claim(h, v, hash, id, idlen, tagp);
		shmt__unlock(&v->lim->lm_client_lock);
		if (rc != -EAGAIN)
			return rc;
		if (ce_retry_spent(t0))
			break;
	}
	return SHMT_EBUSYLOOP;
}

int64_t
shmt__ce_reset(const struct shmt_lview *v, struct shmt_client *e)
{
	return v->mode == SHMT_MODE_GCRA ? shmt__gcra_reset(&e->ce_w, 1) :
	    shmt__bk_reset(&e->ce_w, 1);
}

int
shmt__hk_clients(shmt_t *h, const struct shmt_lview *v, uint64_t now,
    uint64_t *next)
{
	int lk = shmt__lock(h, &v->lim->lm_client_lock), n = 0;

	if (lk < 0)
		return lk;
	if (lk == 1)
		ce_repair(v);
	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		struct shmt_w w;
		struct bk_ctx c;

		shmt__load128(&e->ce_w, w.w);
		if (SHMT_W_TAG(w) >> 14 != CE_LIVE)
			continue;
		shmt__bk_ctx_init(&c, v, ce_ring(e));
		c.ntags = 0;
		if (v->mode != SHMT_MODE_GCRA &&
		    shmt__bk_housekeep(h, &c, &e->ce_w, now, next) > 0)
			n++;
		if (ce_try_reclaim(h, v, e, now))
			n++;
	}
	shmt__unlock(&v->lim->lm_client_lock);
	return n;
}

void
shmt__chk_clients(shmt_t *h, struct shmt_chk *c, const struct shmt_lview *v)
{
	char who[SHMT_LIMITER_NAME_MAX + 40];

	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2];
		struct shmt_w w;
		struct bk_ctx bc;
		uint32_t st, ep;

		shmt__load128(&e->ce_w, w.w);
		shmt__load128(e->ce_hash, hw);
		st = SHMT_W_TAG(w) >> 14;
		ep = SHMT_W_TAG(w) & CE_EPOCH_MASK;
		snprintf(who, sizeof(who), "limiter %s client entry %u", v->name, i);
		if (st == CE_NEVER) {
			if (w.w[0] != 0 || w.w[1] != 0 || hw[0] != 0 || hw[1] != 0)
				shmt__chk(c, "%s: never used, yet not empty", who);
			continue;
		}
		if (st == CE_CLAIMING)
			continue;       /* a claim in progress, or repaired later */
		if ((hw[1] & CE_EPOCH_MASK) != ep) {
			shmt__chk(c, "%s: hash epoch %u, word epoch %u", who,
			    (unsigned)(hw[1] & CE_EPOCH_MASK), ep);
			continue;
		}
		if (st == CE_FREE && !ce_idle(w)) {
			shmt__chk(c, "%s: free, yet holds uses", who);
			continue;
		}
		if (v->mode == SHMT_MODE_GCRA)
			continue;       /* any arrival time is a valid state */
		shmt__bk_ctx_init(&bc, v, ce_ring(e));
		bc.ntags = 0;
		shmt__chk_ring(h, c, who, &bc, &e->ce_w);
	}
}
