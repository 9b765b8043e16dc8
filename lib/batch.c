/* SPDX-License-Identifier: MIT */
/*
 * Several limits in one step (shmt_acquire_all: all granted or none) and
 * giving a grant back (shmt_refund), over the decisions of decide.c and the
 * receipts they fill.
 */
#include "fork.h"
#include "decide.h"

#include "analyzer.h"
#include "clients.h"
#include "gcra.h"
#include "table.h"
#include "util.h"

#include <errno.h>
#include <string.h>

/*
 * Bucket mode cannot give a grant back.  Lowering the active bucket's
 * count in W would break the rule that a bucket's slot never holds more
 * than the W that seals it shows: a caller that read W before the give-back
 * may still raise the slot to the old count (shmt__slot_raise is a
 * monotone max, made before its own CAS fails), and the release would then
 * return uses that other buckets hold.  So a bucket-mode receipt gives nothing back.
 */
static int
refund_view(const struct shmt_lview *v, const shmt_receipt_t *r)
{
	unsigned kind = (unsigned)(r->r_[0] & 0xff);
	uint32_t entry = (uint32_t)(r->r_[0] >> 32);
	uint64_t cost = r->r_[2];

	if (kind == RC_NONE)
		return 1;       /* nothing was recorded (shadow mode) */
	if (((r->r_[0] >> 8) & 0xffffffU) != v->lv_row || cost == 0)
		return -EINVAL;
	/* A rate grant decided under parameters since changed: its cost may
	 * pass the new burst, and nothing is given back (gcra.h). */
	if (kind == RC_GCRA && v->mode == SHMT_MODE_GCRA &&
	    (uint32_t)r->r_[3] != v->pgen)
		return 0;
	if (cost > shmt__cost_max(v))
		return -EINVAL;
	switch (kind) {
	case RC_GCRA:
		return v->mode == SHMT_MODE_GCRA ?
		    shmt__gcra_refund(v, r->r_[1], cost,
		    (uint32_t)r->r_[3]) : -EINVAL;
	case RC_EXACT:
		return v->mode == SHMT_MODE_EXACT ? 0 : -EINVAL;
	case RC_BUCKET:
		if (v->mode != SHMT_MODE_BUCKETS ||
		    (v->flags & SHMT_LIMF_PER_CLIENT))
			return -EINVAL;
		return 0;
	case RC_CLIENT:
		/* Per client, no mode gives back (rate mode's arrival time
		 * may belong to another client by then). */
		if (!(v->flags & SHMT_LIMF_PER_CLIENT) || entry >= v->capacity)
			return -EINVAL;
		return 0;
	default:
		return -EINVAL;
	}
}

static int
gen_refund_once(shmt_t *h, const char *name, shmt_receipt_t *receipt)
{
	struct shmt_lview scratch;
	const struct shmt_lview *v;
	int rc;

	SHMT_FORK_CHECK(h);
	if ((rc = lim_find(h, name, &scratch, &v)) != 0 ||
	    (rc = shmt__view_fresh(h, &v)) != 0)
		return rc;
	if ((rc = refund_view(v, receipt)) != 1)
		return rc;
	/* A give-back made while a move was copying the segment may not be
	 * in the copy: it counts as not made, and the uses stay held (the
	 * safe side; giving the receipt back again on the new generation
	 * finds the arrival time moved and gives nothing twice). */
	if (shmt__frozen_load(h) != 0)
		return 0;
	memset(receipt, 0, sizeof(*receipt));  /* once only */
	return 1;
}

/* On the live generation: a receipt names a row and a word that a move
 * copies as they are. */
SHMT_EXPORT int
shmt_refund(shmt_t *h, const char *name, shmt_receipt_t *receipt)
{
	if (receipt == NULL)
		return -EINVAL;
	SHMT_GEN_CALL(h, gen_refund_once(h, name, receipt));
}

/* The request of REQ as a view, checked. */
static int
request_view(shmt_t *h, const shmt_request_t *q, struct shmt_lview *scratch,
    const struct shmt_lview **vp)
{
	return shmt__decide_find(h, q->limiter, q->client, q->client_len, q->cost,
	    scratch, vp);
}

/* A request's answer now, without taking anything. */
static int
request_peek(shmt_t *h, const struct shmt_lview *v, const shmt_request_t *q,
    shmt_decision_t *d)
{
	if (q->client != NULL)
		return enforce(v, shmt__peek_client(h, v, q->client, q->client_len,
		    q->cost, d));
	return enforce(v, shmt__peek_shared(h, v, q->cost, d));
}

static int
gen_acquire_all_once(shmt_t *h, const shmt_request_t *req, size_t n,
    shmt_decision_t *out, shmt_receipt_t *receipts)
{
	struct shmt_lview scratch[SHMT_ACQUIRE_ALL_MAX];
	const struct shmt_lview *v[SHMT_ACQUIRE_ALL_MAX];
	shmt_receipt_t held[SHMT_ACQUIRE_ALL_MAX];
	shmt_decision_t d[SHMT_ACQUIRE_ALL_MAX];
	size_t order[SHMT_ACQUIRE_ALL_MAX], k = 0;
	int rc = 1, all = 1;

	if (h == NULL || req == NULL || n == 0 || n > SHMT_ACQUIRE_ALL_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if ((rc = request_view(h, &req[i], &scratch[i], &v[i])) != 0)
			return rc;
		/* One limit asked twice would pass each look alone and
		 * fail the second take: ask for the sum once instead. */
		for (size_t j = 0; j < i; j++)
			if (v[j]->lv_row == v[i]->lv_row &&
			    req[j].client_len == req[i].client_len &&
			    (req[i].client == NULL || memcmp(req[j].client,
			    req[i].client, req[i].client_len) == 0))
				return -EINVAL;
	}
	/* First look: if any would be refused, take nothing. */
	for (size_t i = 0; i < n; i++) {
		if ((rc = request_peek(h, v[i], &req[i], &d[i])) < 0)
			return rc;
		all &= rc;
	}
	if (out != NULL)
		memcpy(out, d, n * sizeof(*out));
	if (!all)
		return 0;
	/* Then take them, those that can be given back (rate mode) first. */
	for (size_t i = 0; i < n; i++)
		if (v[i]->mode == SHMT_MODE_GCRA)
			order[k++] = i;
	for (size_t i = 0; i < n; i++)
		if (v[i]->mode != SHMT_MODE_GCRA)
			order[k++] = i;
	for (k = 0; k < n; k++) {
		size_t i = order[k];
		uint64_t cursor = 0;
		shmt_decision_t *o = out != NULL ? &out[i] : NULL;

		if (req[i].client != NULL)
			rc = shmt__acquire_client(h, v[i], req[i].client,
			    req[i].client_len, req[i].cost, o, &held[i]);
		else
			rc = shmt__acquire_shared(h, v[i], req[i].cost, &cursor, o,
			    &held[i]);
		if (rc == 0 && (v[i]->flags & SHMT_LIMF_SHADOW)) {
			memset(&held[i], 0, sizeof(held[i]));
			rc = 1;
		}
		if (rc != 1)
			break;
	}
	if (rc != 1) {
		/* Another caller took what the first look saw.  Give back
		 * what can be; the rest stays held until it is released:
		 * never an over-grant. */
		while (k-- > 0)
			if (shmt__view_fresh(h, &v[order[k]]) == 0)
				refund_view(v[order[k]], &held[order[k]]);
		return rc < 0 ? rc : 0;
	}
	if (receipts != NULL)
		memcpy(receipts, held, n * sizeof(*receipts));
	return 1;
}

SHMT_EXPORT int
shmt_acquire_all(shmt_t *h, const shmt_request_t *req, size_t n,
    shmt_decision_t *out, shmt_receipt_t *receipts)
{
	SHMT_GEN_CALL(h, gen_acquire_all_once(h, req, n, out, receipts));
}
