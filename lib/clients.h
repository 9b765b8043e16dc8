/* This file is private to libshmthrottle: per-client tables of a limiter. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_CLIENTS_H
#define SHMT_CLIENTS_H

#include "atomic128.h"
#include "hash.h"
#include "table.h"

struct shmt_chk;

/* 128-bit hash of a client id, keyed with the segment's secret (hash.h):
 * ids come from outside, and a public hash would let anyone fill a
 * victim's neighbourhood of the table with ids found offline.  A collision
 * makes two clients share one limit, which is stricter, never looser.
 * shmt__client_hash, inline for the grants.  An 8-byte id (an address, a
 * number) is the common case: with the length a constant the message loop
 * and the padding fold away. */
static inline __attribute__((always_inline)) void
ce_client_hash(const shmt_t *h, const void *id, size_t len, uint64_t out[2])
{
	if (len == 8)
		shmt__siphash(1, 3, 1, h->key.hk_key, id, 8, out);
	else
		shmt__siphash(1, 3, 1, h->key.hk_key, id, len, out);
	out[0] |= 1;                /* never 0: 0 marks a never-used entry */
	out[1] &= ~0xffffULL;       /* the low 16 bits hold the epoch */
}

/* Client entry states (W tag bits 15..14) and epoch (bits 13..0). */
enum { CE_NEVER = 0, CE_LIVE = 1, CE_FREE = 2, CE_CLAIMING = 3 };

#define CE_EPOCH_MASK 0x3fffU
#define CE_TAG(state, ep) (((uint32_t)(state) << 14) | ((ep) & CE_EPOCH_MASK))

/*
 * Look HASH up along its probe path without a lock.  Returns the index of
 * the entry that holds it (reviving it if it was free) with *LIVE set when
 * its word is LIVE with the hash's epoch; -ENOENT when the path ends (a
 * never-used entry, or the whole table) without it; 1 << 30 when the entry
 * is mid-claim or inconsistent (the caller takes the lock).
 */
#define CE_SLOWPATH (1 << 30)

/* A client lives within CE_PROBE entries of its home, so a lookup or a
 * claim never scans more than that, however full the table: past it the
 * table counts as full for that client (throttled, "table full"), which
 * costs a denial instead of a scan of the whole table on every call. */
#define CE_PROBE 64U

/*
 * A call that keeps finding its client's entry changed under it (a claim
 * racing with a reclaim, or a damaged table) retries, and each retry may
 * wait for the client lock (up to 1 s when its holder is stopped).  So the
 * retries of one call share a budget of time: past SHMT_CE_RETRY_NS since
 * its first retry, the call gives up with SHMT_EBUSYLOOP.  *T0 is 0 before
 * the first retry; the clock is read on retries only.
 */
#define SHMT_CE_RETRY_NS 250000000ULL
static inline int
ce_retry_spent(uint64_t *t0)
{
	uint64_t now = shmt__mono_ns();

	if (*t0 == 0) {
		*t0 = now;
		return 0;
	}
	return now - *t0 > SHMT_CE_RETRY_NS;
}

/* The entry of the client with HASH (ID, IDLEN bytes kept for display),
 * claimed under the client lock when it has none: its index, with the tag
 * (LIVE, epoch) its word must carry in *TAGP; -ENOSPC when its probe
 * path is full (the caller counts a refusal, "table full"), or an error
 * (SHMT_EBUSYLOOP once the call's retries spent their budget, *T0). */
int shmt__ce_find_or_claim(shmt_t *h, const struct shmt_lview *v,
    const uint64_t hash[2], const void *id, size_t idlen, uint32_t *tagp,
    uint64_t *t0);

/*
 * The common case of the lookup, inline in the grant: the entry of HASH on
 * its probe path LIVE with the hash's epoch.  Returns its index, with the
 * tag its word must carry in *TAGP and the word itself in *W (one full
 * load); -1 for anything else (no entry, a free one to revive, a claim in
 * progress, damage), which the caller hands to shmt__ce_find_or_claim to
 * look up afresh.  Reads only: the table is left as it was.
 */
static inline __attribute__((always_inline)) int
ce_lookup_live(const struct shmt_lview *v, const uint64_t hash[2],
    uint32_t *tagp, struct shmt_w *w)
{
	uint32_t cap = v->capacity, i = shmt__client_home(hash, cap);
	uint32_t n = cap < CE_PROBE ? cap : CE_PROBE;

	for (uint32_t k = 0; k < n; k++) {
		const struct shmt_client *e = (const struct shmt_client *)
		    (v->clients + (uint64_t)i * v->entsize);
		uint64_t hw[2];
		uint32_t ep;

		shmt__load128(e->ce_hash, hw);
		if (hw[0] == hash[0] && (hw[1] & ~0xffffULL) == hash[1]) {
			ep = (uint32_t)(hw[1] & CE_EPOCH_MASK);
			shmt__load128(&e->ce_w, w->w);
			if (SHMT_W_TAG(*w) != CE_TAG(CE_LIVE, ep))
				return -1;
			*tagp = CE_TAG(CE_LIVE, ep);
			return (int)i;
		}
		if (hw[0] == 0 && hw[1] == 0)
			return -1;
		if (++i == cap)
			i = 0;
	}
	return -1;
}

/* Give back every use of client entry E (its ring or its arrival time):
 * the uses given back, or an error. */
int64_t shmt__ce_reset(const struct shmt_lview *v, struct shmt_client *e);

/* Housekeep every live entry of V's client table under the client lock:
 * release cooled buckets, reclaim idle entries; *NEXT gets the next time
 * there is work.  Returns the entries changed, or an error. */
int shmt__hk_clients(shmt_t *h, const struct shmt_lview *v, uint64_t now,
    uint64_t *next);

/* Check V's client table (the limiter's part of shmt_check()). */
void shmt__chk_clients(shmt_t *h, struct shmt_chk *c,
    const struct shmt_lview *v);

/*
 * Overrides (shmt_client_set).  A rule is one 32-bit word, the same in the
 * override table (ov_rule) and stamped in a client's entry (ce_rule):
 * 0 none (the class limit), 1..SHMT_LIMIT_MAX the client's own limit,
 * CE_RULE_DENY, CE_RULE_ALLOW.  Anything else is damage.
 */
#define CE_RULE_NONE 0U
#define CE_RULE_DENY 0xfffffffeU
#define CE_RULE_ALLOW 0xffffffffU

static inline int
ce_rule_valid(uint32_t r)
{
	return r <= SHMT_LIMIT_MAX || r == CE_RULE_DENY || r == CE_RULE_ALLOW;
}

/*
 * A tier: a client's own limit L' (an override above or below the class
 * limit L) runs on the entry's ring of nb buckets, nb = ceil(W / C) +
 * ceil(L / B) by the class geometry.  Of those, ceil(W / C) may be cooling
 * while the rest hold the uses in flight, so buckets of B' = max(B,
 * ceil(L' / (nb - ceil(W / C)))) uses let the ring hold L' (a tier of 200
 * on a class of 10 with B = 1 would otherwise stop at the ring's 20).  B'
 * at SHMT_LIMIT_MAX bounds what any entry's bucket may count.
 */
static inline uint64_t
shmt__tier_slack_uses(const struct shmt_lview *v, uint64_t limit)
{
	uint64_t cool = div_up(v->window, v->slack), room, b;

	/* The view's nb was checked against the geometry: nb > cool. */
	room = v->nb > cool ? v->nb - cool : 1;
	b = div_up(limit, room);
	return b > v->slack_uses ? b : v->slack_uses;
}

/* The view of V for a client whose rule is the limit RULE (1 to
 * SHMT_LIMIT_MAX, buckets mode): TMP, filled.  Returns TMP. */
static inline const struct shmt_lview *
shmt__tier_view(const struct shmt_lview *v, uint32_t rule,
    struct shmt_lview *tmp)
{
	memcpy(tmp, v, sizeof(*tmp));
	tmp->limit = rule;
	tmp->slack_uses = shmt__tier_slack_uses(v, rule);
	return tmp;
}

/* The view entry E's ring is kept under, for the lock holders'
 * housekeeping and the checks: its tier's (TMP) when its stamp gives it a
 * limit of its own, else V (no rule, allow, deny, or a damaged stamp,
 * which the check reports). */
static inline const struct shmt_lview *
shmt__ce_view(const struct shmt_lview *v, const struct shmt_client *e,
    struct shmt_lview *tmp)
{
	uint32_t r = __atomic_load_n(&e->ce_rule, __ATOMIC_ACQUIRE);

	if (r == CE_RULE_NONE || r > SHMT_LIMIT_MAX ||
	    v->mode != SHMT_MODE_BUCKETS)
		return v;
	return shmt__tier_view(v, r, tmp);
}

/* What shmt__ce_rule_gate leaves to the grant: decide on *VV. */
#define CE_GO 2

/*
 * The rule of entry E, found by a lookup that gave tag EXPECT, before a
 * grant: CE_GO (decide on *VV, V itself or TMP filled with the client's own
 * limit); 1 granted (allow) or 0 refused (deny), with *NOW the decision's
 * clock, read after the rule and before a check that the entry's word
 * still carries EXPECT (so no change committed in between); -EAGAIN when
 * it does not (look the entry up again); SHMT_ECORRUPT on a damaged rule.
 * Counts allowed_by_rule / denied_by_rule.  Out of line: only clients
 * with an override come here.
 */
__attribute__((noinline, cold)) int shmt__ce_rule_gate(shmt_t *h,
    const struct shmt_lview *v, struct shmt_client *e, uint32_t expect,
    uint32_t rule, struct shmt_lview *tmp, const struct shmt_lview **vv,
    uint64_t *now);

/* The hot path's part: one load of the word beside the entry's state. */
static inline __attribute__((always_inline)) int
ce_rule_gate(shmt_t *h, const struct shmt_lview *v, struct shmt_client *e,
    uint32_t expect, struct shmt_lview *tmp, const struct shmt_lview **vv,
    uint64_t *now)
{
	uint32_t rule = __atomic_load_n(&e->ce_rule, __ATOMIC_ACQUIRE);

	*vv = v;
	if (__builtin_expect(rule == CE_RULE_NONE, 1))
		return CE_GO;
	return shmt__ce_rule_gate(h, v, e, expect, rule, tmp, vv, now);
}

/* The rule the override table of V holds for HASH without a lock (peek):
 * CE_RULE_NONE when none; SHMT_ECORRUPT (negative) on a damaged one. */
int64_t shmt__ov_peek(const struct shmt_lview *v, const uint64_t hash[2]);

/* Fill the decision of an allow (RC 1) or deny (RC 0) rule. */
void shmt__ce_rule_decide(int rc, shmt_decision_t *out);

/* Repair every per-client table of H's segment (a restored image, whose
 * words were copied one by one): claims left half done, hash epochs, and
 * every entry's rule stamped from its override table.  Only for a segment
 * nobody else uses yet. */
void shmt__clients_restore(shmt_t *h);

/* Check V's override table (part of shmt_check()). */
void shmt__chk_overrides(struct shmt_chk *c, const struct shmt_lview *v);

/* The number of entries a lookup or a claim may scan. */
static inline uint32_t
ce_probe(const struct shmt_lview *v)
{
	return v->capacity < CE_PROBE ? v->capacity : CE_PROBE;
}

static inline struct shmt_client *
ce_at(const struct shmt_lview *v, uint32_t i)
{
	return (struct shmt_client *)(v->clients + (uint64_t)i * v->entsize);
}

static inline struct shmt_ring_slot *
ce_ring(struct shmt_client *e)
{
	return (struct shmt_ring_slot *)(e + 1);
}

static inline int
ce_hash_match(const uint64_t hw[2], const uint64_t hash[2])
{
	return hw[0] == hash[0] && (hw[1] & ~0xffffULL) == hash[1];
}

/* Fresh word of a client entry in STATE with EPOCH, keeping TAIL so that
 * the serials of its ring only grow. */
static inline struct shmt_w
ce_word(uint32_t tail, uint32_t state, uint32_t epoch)
{
	return shmt__w_make(0, 0, tail == 0 ? 1 : tail, 0, 0,
	    CE_TAG(state, epoch));
}

static inline int
ce_idle(struct shmt_w w)
{
	return SHMT_W_INFLIGHT(w) == 0 && SHMT_W_NSEALED(w) == 0 &&
	    !SHMT_W_ACTIVE(w);
}

#endif /* SHMT_CLIENTS_H */
