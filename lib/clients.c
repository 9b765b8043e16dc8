/* SPDX-License-Identifier: MIT */
/*
 * Per-client limiters: a table of client entries, each with its own state
 * word and ring, found by the keyed hash of the client's id within a short
 * probe from its home entry, claimed under the row's client lock, and
 * reclaimed once idle; housekept and checked here too.  Per-client
 * overrides (shmt_client_set) live here as well.
 *
 * Overrides.  A limiter's override table (struct shmt_override, in the
 * arena after its client table, so moves and snapshots carry it) is the
 * authority; a client's entry carries a stamp of its rule (ce_rule, on the
 * entry's own line) so that a grant of a client without an override reads
 * nothing more than the line it CASes anyway.  The stamp is written when
 * the entry is claimed (the table is looked up then, under the client
 * lock), and by every change:
 *
 *   under sh_table_lock (a move waits for it) and the client lock:
 *     ov_rule = new                    -- the change's kill -9 point
 *     e = the client's entry, if any (live or free)
 *     ce_rule = new
 *     CAS ce_w: tag (state, ep) -> (state, ep + 1), all else kept
 *     ce_hash's epoch = ep + 1
 *
 * A grant looks the entry up (tag (LIVE, ep) from the hash word and the
 * state word), then reads ce_rule, then decides, and commits with a CAS
 * that insists on the tag: a grant that read the rule before the change
 * finds ep + 1 and looks again, so none commits under the old rule after
 * the epoch's CAS (the change's commit point; a grant that saw the new
 * stamp a moment before it only decided under the new rule early).  Allow
 * and deny commit nothing: they read the clock after the rule, then check
 * that the word still carries ep, so their decision time precedes any
 * later commit.  Between the CAS and the hash's epoch, lookups find the
 * epochs apart and take the client lock, which the setter holds.  A setter
 * killed in between leaves the lock to the next holder, whose repair
 * (ce_repair) makes the hash's epoch the word's and restamps every entry
 * from the table, moving every entry's epoch even where the stamp is
 * already the table's (the dead setter may have stamped without its CAS,
 * and a grant that read the old rule must still fail); a restored
 * snapshot is repaired the same way (shmt__clients_restore), since its
 * words were copied one by one.  The epoch has 14 bits: a setter keeps the
 * client lock OV_GAP_NS (64 us) after its CAS, so 16383 changes, the
 * fewest that bring an entry's epoch back, take over a second, and only a
 * grant stopped that long between its read of the rule and its CAS could
 * still commit under a replaced rule (the same kind of bound as the
 * parameter generation's in update.c).
 */
#include "clients.h"

#include "gcra.h"
#include "hash.h"
#include "lock.h"
#include "ring.h"
#include "util.h"
#include "wait.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

void
shmt__client_hash(const shmt_t *h, const void *id, size_t len, uint64_t out[2])
{
	ce_client_hash(h, id, len, out);
}

/* ---- Override table ---------------------------------------------------------- */

static int
ov_match(const struct shmt_override *o, const uint64_t hash[2])
{
	return __atomic_load_n(&o->ov_hash[0], __ATOMIC_RELAXED) == hash[0] &&
	    __atomic_load_n(&o->ov_hash[1], __ATOMIC_RELAXED) == hash[1];
}

/* The rule V's override table holds for HASH (CE_RULE_NONE when none),
 * *IDX its entry (or -1); SHMT_ECORRUPT on a rule out of range.  Under the
 * client lock, or racy and advisory (peek). */
static int64_t
ov_find(const struct shmt_lview *v, const uint64_t hash[2], int64_t *idx)
{
	if (idx != NULL)
		*idx = -1;
	for (uint32_t i = 0; i < v->ovcap; i++) {
		const struct shmt_override *o = &v->ov[i];
		uint32_t r = __atomic_load_n(&o->ov_rule, __ATOMIC_ACQUIRE);

		if (r == CE_RULE_NONE)
			continue;
		if (!ce_rule_valid(r))
			return SHMT_ECORRUPT;
		if (ov_match(o, hash)) {
			if (idx != NULL)
				*idx = i;
			return r;
		}
	}
	return CE_RULE_NONE;
}

int64_t
shmt__ov_peek(const struct shmt_lview *v, const uint64_t hash[2])
{
	return ov_find(v, hash, NULL);
}

/* Put RULE into entry E (live or free, under the client lock): the stamp,
 * then the epoch's CAS (the change's commit point), then the hash's
 * epoch.  An entry that holds RULE already keeps its epoch unless FORCE
 * (a repair: a setter may have died between its stamp and its CAS, and
 * a grant that read the rule before the stamp must still fail).  0, or
 * SHMT_ECORRUPT / SHMT_EBUSYLOOP. */
static int
ce_restamp(struct shmt_client *e, uint32_t rule, int force)
{
	struct shmt_w w, nw;
	uint64_t hw[2];
	uint32_t st, ep = 0;
	unsigned i;

	if (!force && __atomic_load_n(&e->ce_rule, __ATOMIC_ACQUIRE) == rule)
		return 0;
	__atomic_store_n(&e->ce_rule, rule, __ATOMIC_RELEASE);
	shmt__load128(&e->ce_w, w.w);
	for (i = 0; i < SHMT_RETRY_MAX; i++) {
		st = SHMT_W_TAG(w) >> 14;
		if (st != CE_LIVE && st != CE_FREE)
			return SHMT_ECORRUPT;
		ep = ((SHMT_W_TAG(w) & CE_EPOCH_MASK) % CE_EPOCH_MASK) + 1;
		nw = w;
		nw.w[1] = (w.w[1] & ~0xffffULL) | CE_TAG(st, ep);
		if (shmt__cas128(&e->ce_w, w.w, nw.w))
			break;
		shmt__load128(&e->ce_w, w.w);
	}
	if (i == SHMT_RETRY_MAX)
		return SHMT_EBUSYLOOP;
	shmt__load128(e->ce_hash, hw);
	hw[1] = (hw[1] & ~0xffffULL) | ep;
	shmt__store128(e->ce_hash, hw);
	return 0;
}

/* The entry of HASH on its probe path that a lookup would find (live or
 * free with the hash), or NULL.  Under the client lock. */
static struct shmt_client *
ce_entry_of(const struct shmt_lview *v, const uint64_t hash[2])
{
	uint32_t cap = v->capacity, home = shmt__client_home(hash, cap);

	for (uint32_t k = 0; k < ce_probe(v); k++) {
		struct shmt_client *e = ce_at(v, (home + k) % cap);
		uint64_t hw[2];
		struct shmt_w w;
		uint32_t st;

		shmt__load128(e->ce_hash, hw);
		if (hw[0] == 0 && hw[1] == 0)
			return NULL;
		if (!ce_hash_match(hw, hash))
			continue;
		shmt__load128(&e->ce_w, w.w);
		st = SHMT_W_TAG(w) >> 14;
		if (st == CE_LIVE || st == CE_FREE)
			return e;
	}
	return NULL;
}

/* Make every entry's hash epoch its word's and every stamp the table's
 * (after a setter died, or a snapshot copied the words one by one).
 * Under the client lock.  Entries the table disagrees with are found
 * both ways: stamped entries looked up in the table, and the table's
 * clients looked up in theirs. */
static void
ov_restamp_all(const struct shmt_lview *v)
{
	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		uint64_t hw[2], key[2];
		struct shmt_w w;
		uint32_t st, ep;
		int64_t r;

		shmt__load128(&e->ce_w, w.w);
		st = SHMT_W_TAG(w) >> 14;
		if (st != CE_LIVE && st != CE_FREE)
			continue;
		ep = SHMT_W_TAG(w) & CE_EPOCH_MASK;
		shmt__load128(e->ce_hash, hw);
		if (hw[0] == 0)
			continue;       /* a tombstone */
		if ((hw[1] & CE_EPOCH_MASK) != ep) {
			hw[1] = (hw[1] & ~0xffffULL) | ep;
			shmt__store128(e->ce_hash, hw);
		}
		/* Every entry's epoch moves, its rule the same or not: a
		 * dead setter may have stamped the new rule without its
		 * CAS.  (An entry stamped with no rule keeps no rule here;
		 * the table's clients are stamped below.) */
		r = CE_RULE_NONE;
		if (__atomic_load_n(&e->ce_rule, __ATOMIC_RELAXED) != 0) {
			key[0] = hw[0];
			key[1] = hw[1] & ~0xffffULL;
			if ((r = ov_find(v, key, NULL)) < 0)
				continue;
		}
		(void)ce_restamp(e, (uint32_t)r, 1);
	}
	for (uint32_t j = 0; j < v->ovcap; j++) {
		struct shmt_override *o = &v->ov[j];
		uint32_t r = __atomic_load_n(&o->ov_rule, __ATOMIC_ACQUIRE);
		struct shmt_client *e;

		if (r == CE_RULE_NONE || !ce_rule_valid(r))
			continue;
		if ((e = ce_entry_of(v, o->ov_hash)) != NULL)
			(void)ce_restamp(e, r, 0);
	}
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
	struct shmt_lview tmp;
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
	shmt__bk_ctx_init(&c, shmt__ce_view(v, e, &tmp), ce_ring(e));
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
	ov_restamp_all(v);
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

	int64_t rule;

	/* Another claimer may have added it while we waited for the lock. */
	rc = ce_lookup(v, hash, tagp);
	if (rc >= 0 && rc != CE_SLOWPATH)
		return rc;
	if ((rule = ov_find(v, hash, NULL)) < 0)
		return (int)rule;
	for (uint32_t k = 0; k < ce_probe(v); k++) {
		i = (home + k) % cap;
		if (ce_try_reclaim(h, v, ce_at(v, i), now)) {
			e = ce_at(v, i);
			break;
		}
	}
	if (e == NULL)
		return -ENOSPC;
	/* The word again: its own client may have revived it (FREE to
	 * LIVE, with no lock) and granted on it since ce_try_reclaim saw it
	 * free.  The CAS below compares this load, not that look, so only
	 * a word still free (and, in buckets mode, idle) may be taken:
	 * else its client's use would be wiped and granted again. */
	shmt__load128(&e->ce_w, w.w);
	if ((SHMT_W_TAG(w) >> 14 != CE_FREE && SHMT_W_TAG(w) >> 14 !=
	    CE_NEVER) || (v->mode == SHMT_MODE_BUCKETS && !ce_idle(w)))
		return -EAGAIN;       /* revived under us: look again */
	ep = ((SHMT_W_TAG(w) & CE_EPOCH_MASK) % CE_EPOCH_MASK) + 1;
	nw = ce_word(SHMT_W_TAIL(w), CE_CLAIMING, ep);
	if (!shmt__cas128(&e->ce_w, w.w, nw.w))
		return -EAGAIN;       /* revived under us: look again */
	hw[0] = hash[0];
	hw[1] = hash[1] | ep;
	shmt__store128(e->ce_hash, hw);
	e->ce_idlen = (uint32_t)idlen;
	memcpy(e->ce_id, id, idlen < sizeof(e->ce_id) ? idlen : sizeof(e->ce_id));
	/* Before the entry turns LIVE: no grant reads it earlier. */
	__atomic_store_n(&e->ce_rule, (uint32_t)rule, __ATOMIC_RELEASE);
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
		struct shmt_lview tmp;
		struct shmt_w w;
		struct bk_ctx c;

		shmt__load128(&e->ce_w, w.w);
		if (SHMT_W_TAG(w) >> 14 != CE_LIVE)
			continue;
		shmt__bk_ctx_init(&c, shmt__ce_view(v, e, &tmp), ce_ring(e));
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

	uint64_t stamped = 0, matched = 0;
	uint32_t owner;

	shmt__chk_overrides(c, v);
	for (uint32_t i = 0; i < v->capacity; i++) {
		struct shmt_client *e = ce_at(v, i);
		struct shmt_lview tmp;
		uint64_t hw[2];
		struct shmt_w w;
		struct bk_ctx bc;
		uint32_t st, ep;

		shmt__load128(&e->ce_w, w.w);
		shmt__load128(e->ce_hash, hw);
		st = SHMT_W_TAG(w) >> 14;
		ep = SHMT_W_TAG(w) & CE_EPOCH_MASK;
		snprintf(who, sizeof(who), "limiter %s client entry %u", v->name, i);
		if (!ce_rule_valid(__atomic_load_n(&e->ce_rule,
		    __ATOMIC_RELAXED)))
			shmt__chk(c, "%s: rule %#x out of range", who,
			    e->ce_rule);
		if (st == CE_NEVER) {
			if (w.w[0] != 0 || w.w[1] != 0 || hw[0] != 0 || hw[1] != 0)
				shmt__chk(c, "%s: never used, yet not empty", who);
			continue;
		}
		if (st == CE_CLAIMING)
			continue;       /* a claim in progress, or repaired later */
		if (hw[0] != 0 && __atomic_load_n(&e->ce_rule,
		    __ATOMIC_RELAXED) != CE_RULE_NONE)
			stamped++;
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
		shmt__bk_ctx_init(&bc, shmt__ce_view(v, e, &tmp), ce_ring(e));
		bc.ntags = 0;
		shmt__chk_ring(h, c, who, &bc, &e->ce_w);
	}
	/* Every stamp is the table's, when no change is under way (the
	 * client lock free): each client of the table is looked up in its
	 * entry, and the entries stamped with a rule are counted against
	 * those found stamped with theirs, so a stamp the table does not
	 * give (an allow left behind) shows too. */
	if (shmt__lock_peek(h, &v->lim->lm_client_lock, &owner) !=
	    SHMT_LOCK_FREE)
		return;
	for (uint32_t j = 0; j < v->ovcap; j++) {
		const struct shmt_override *o = &v->ov[j];
		uint32_t r = __atomic_load_n(&o->ov_rule, __ATOMIC_ACQUIRE);
		const struct shmt_client *e;
		uint32_t got;

		if (r == CE_RULE_NONE || !ce_rule_valid(r) ||
		    (e = ce_entry_of(v, o->ov_hash)) == NULL)
			continue;
		got = __atomic_load_n(&e->ce_rule, __ATOMIC_RELAXED);
		if (got != r)
			shmt__chk(c, "limiter %s override %u: its client's entry "
			    "is stamped %#x, the table gives %#x", v->name, j,
			    got, r);
		else
			matched++;
	}
	if (stamped > matched)
		shmt__chk(c, "limiter %s: %" PRIu64 " client entries carry a "
		    "rule the override table does not give them", v->name,
		    stamped - matched);
}

/* ---- Overrides: grants ------------------------------------------------------ */

int
shmt__ce_rule_gate(shmt_t *h, const struct shmt_lview *v,
    struct shmt_client *e, uint32_t expect, uint32_t rule,
    struct shmt_lview *tmp, const struct shmt_lview **vv, uint64_t *now)
{
	struct shmt_w w;

	if (!ce_rule_valid(rule))
		return SHMT_ECORRUPT;
	if (rule <= SHMT_LIMIT_MAX) {
		/* shmt_client_set gives no limit to a rate-mode limiter. */
		if (v->mode != SHMT_MODE_BUCKETS)
			return SHMT_ECORRUPT;
		*vv = shmt__tier_view(v, rule, tmp);
		return CE_GO;
	}
	*now = shmt__now(h);
	/* The clock before the word: a change that commits after this
	 * load commits after the decision time.  (gcc cannot instrument a
	 * fence for ThreadSanitizer, -Wtsan: that build issues the same
	 * instruction itself.) */
#if defined(SHMT_SANITIZE_THREAD) && defined(__x86_64__)
	__asm__ __volatile__("mfence" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
	shmt__load128(&e->ce_w, w.w);
	if (SHMT_W_TAG(w) != expect)
		return -EAGAIN;
	if (rule == CE_RULE_ALLOW) {
		__atomic_fetch_add(&v->lim->lm_allowed_by_rule, 1,
		    __ATOMIC_RELAXED);
		return 1;
	}
	shmt__count_denial(v->lim, WHY_RULE);
	return 0;
}

void
shmt__ce_rule_decide(int rc, shmt_decision_t *out)
{
	out->granted = rc;
	out->limit = 0;
	out->remaining = rc ? UINT64_MAX : 0;
	out->retry_after_ns = rc ? 0 : UINT64_MAX;
	out->reset_after_ns = 0;
}

/* ---- Overrides: set, clear, list -------------------------------------------- */

/* The rule word of *R: 0 and *OUT, or -EINVAL. */
static int
rule_word(const struct shmt_lview *v, const shmt_client_rule_t *r,
    uint32_t *out)
{
	switch (r->kind) {
	case SHMT_RULE_LIMIT:
		if (r->limit == 0 || r->limit > SHMT_LIMIT_MAX ||
		    v->mode != SHMT_MODE_BUCKETS)
			return -EINVAL;
		*out = (uint32_t)r->limit;
		return 0;
	case SHMT_RULE_ALLOW:
	case SHMT_RULE_DENY:
		if (r->limit != 0)
			return -EINVAL;
		*out = r->kind == SHMT_RULE_ALLOW ? CE_RULE_ALLOW : CE_RULE_DENY;
		return 0;
	default:
		return -EINVAL;
	}
}

static void
rule_of(uint32_t w, shmt_client_rule_t *r)
{
	memset(r, 0, sizeof(*r));
	if (w == CE_RULE_ALLOW)
		r->kind = SHMT_RULE_ALLOW;
	else if (w == CE_RULE_DENY)
		r->kind = SHMT_RULE_DENY;
	else if (w != CE_RULE_NONE) {
		r->kind = SHMT_RULE_LIMIT;
		r->limit = w;
	}
}

enum { OV_SET, OV_CLEAR, OV_GET, OV_LIST };

struct ov_req {
	int op;
	const void *client;
	size_t len;
	uint32_t rule;                  /* OV_SET */
	const shmt_client_rule_t *in;   /* OV_SET */
	shmt_client_rule_t *out;        /* OV_GET */
	shmt_client_override_t *list;   /* OV_LIST */
	size_t cap;
};

static int
ov_list_locked(const struct shmt_lview *v, struct ov_req *q)
{
	int n = 0;

	for (uint32_t i = 0; i < v->ovcap; i++) {
		const struct shmt_override *o = &v->ov[i];
		uint32_t r = __atomic_load_n(&o->ov_rule, __ATOMIC_ACQUIRE);
		uint32_t len = __atomic_load_n(&o->ov_idlen, __ATOMIC_RELAXED);

		if (r == CE_RULE_NONE)
			continue;
		if (!ce_rule_valid(r) || len == 0 ||
		    len > SHMT_OVERRIDE_ID_MAX)
			return SHMT_ECORRUPT;
		if ((size_t)n < q->cap) {
			shmt_client_override_t *d = &q->list[n];

			memset(d, 0, sizeof(*d));
			memcpy(d->client, o->ov_id, len);
			d->client_len = len;
			rule_of(r, &d->rule);
		}
		n++;
	}
	return n;
}

/*
 * The 14-bit epoch of an entry comes back to a value after 16383 changes,
 * and a grant that read the rule before the first of them could then
 * commit under it.  So every set or clear that reaches an entry keeps the
 * client lock (which every change of a rule holds) for OV_GAP_NS after its
 * change: 16383 changes take more than a second.  A sleep, not a look at
 * the clock, so that a clock that stands still cannot hold it for ever.
 */
#define OV_GAP_NS 64000L

static void
ov_gap(void)
{
	struct timespec ts = { 0, OV_GAP_NS };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Set RULE (CE_RULE_NONE: clear) for HASH (ID, LEN bytes) in V's table
 * and in the client's entry.  Under both locks.  Returns 1 when the
 * client had a rule, 0 when not, or an error. */
static int
ov_put_locked(const struct shmt_lview *v, const uint64_t hash[2],
    const void *id, size_t len, uint32_t rule)
{
	struct shmt_override *o = NULL;
	struct shmt_client *e;
	int64_t idx, had;
	int rc;

	if ((had = ov_find(v, hash, &idx)) < 0)
		return (int)had;
	if (idx >= 0) {
		o = &v->ov[idx];
	} else if (rule != CE_RULE_NONE) {
		for (uint32_t i = 0; i < v->ovcap && o == NULL; i++)
			if (__atomic_load_n(&v->ov[i].ov_rule,
			    __ATOMIC_ACQUIRE) == CE_RULE_NONE)
				o = &v->ov[i];
		if (o == NULL)
			return -ENOSPC;
		/* A free entry: nobody reads its fields until ov_rule. */
		o->ov_hash[0] = hash[0];
		o->ov_hash[1] = hash[1];
		o->ov_idlen = (uint32_t)len;
		memset(o->ov_id, 0, sizeof(o->ov_id));
		memcpy(o->ov_id, id, len);
	}
	if (o != NULL)
		__atomic_store_n(&o->ov_rule, rule, __ATOMIC_RELEASE);
	if ((e = ce_entry_of(v, hash)) != NULL) {
		if ((rc = ce_restamp(e, rule, 0)) != 0)
			return rc;
		ov_gap();
	}
	return had != CE_RULE_NONE;
}

static int
ov_locked(shmt_t *h, const struct shmt_lview *v, struct ov_req *q)
{
	uint64_t hash[2];
	int64_t r;
	int lk, rc;

	if ((lk = shmt__lock(h, &v->lim->lm_client_lock)) < 0)
		return lk;
	if (lk == 1)
		ce_repair(v);
	switch (q->op) {
	case OV_LIST:
		rc = ov_list_locked(v, q);
		break;
	case OV_GET:
		shmt__client_hash(h, q->client, q->len, hash);
		r = ov_find(v, hash, NULL);
		rc = r < 0 ? (int)r : r != CE_RULE_NONE;
		if (rc >= 0)
			rule_of((uint32_t)r, q->out);
		break;
	default:
		shmt__client_hash(h, q->client, q->len, hash);
		rc = ov_put_locked(v, hash, q->client, q->len,
		    q->op == OV_SET ? q->rule : CE_RULE_NONE);
		if (rc > 0 && q->op == OV_SET)
			rc = 0;
		break;
	}
	shmt__unlock(&v->lim->lm_client_lock);
	return rc;
}

/* One call on limiter NAME: under the table lock (a move waits for it, so
 * nothing written here is lost to a move) for a change; lock-free views
 * for a read. */
static int
gen_ov_once(shmt_t *h, const char *name, struct ov_req *q)
{
	struct shmt_lview scratch, v;
	const struct shmt_lview *cv;
	struct shmt_lim *lim;
	uint32_t n, r;
	size_t nlen;
	int rc;

	if (h == NULL)
		return -EINVAL;
	if ((rc = shmt__lim_name_check(name, &nlen)) != 0)
		return rc;
	if (q->op == OV_LIST || q->op == OV_GET) {
		if ((rc = lim_find(h, name, &scratch, &cv)) != 0)
			return rc;
		if (!(cv->flags & SHMT_LIMF_PER_CLIENT))
			return -EPERM;
		return ov_locked(h, cv, q);
	}
	if ((rc = shmt__table_lock(h)) != 0)
		return rc;
	lim = shmt__rows(h, &n);
	rc = -ENOENT;
	r = shmt__row_named(lim, n, name);
	if (r < n && (rc = shmt__view_fill(h, r, &lim[r], &v)) == 0) {
		if (!(v.flags & SHMT_LIMF_PER_CLIENT))
			rc = -EPERM;
		else if (q->op == OV_SET &&
		    (rc = rule_word(&v, q->in, &q->rule)) != 0)
			;
		else {
			/* The client lock's wait runs no sleep hook: a
			 * holder of the table's lock must not wait for a
			 * runtime's lock (other processes' waits for the
			 * table's would take it for a sleeping owner). */
			shmt__sleep_quiet++;
			rc = ov_locked(h, &v, q);
			shmt__sleep_quiet--;
			/* Sleepers (shmt_wait) decide again under the new
			 * rule. */
			if (rc >= 0)
				shmt__wake_waiters(&lim[r].lm_wake);
		}
	}
	shmt__unlock(&h->hdr->sh_table_lock);
	return rc;
}

static int
ov_args(const void *client, size_t len)
{
	if (client == NULL || len == 0)
		return -EINVAL;
	return len > SHMT_OVERRIDE_ID_MAX ? -E2BIG : 0;
}

SHMT_EXPORT int
shmt_client_set(shmt_t *h, const char *name, const void *client, size_t len,
    const shmt_client_rule_t *rule)
{
	struct ov_req q = { .op = OV_SET, .client = client, .len = len,
	    .in = rule };
	int rc;

	if (rule == NULL)
		return -EINVAL;
	if ((rc = ov_args(client, len)) != 0)
		return rc;
	SHMT_GEN_CALL(h, gen_ov_once(h, name, &q));
}

SHMT_EXPORT int
shmt_client_clear(shmt_t *h, const char *name, const void *client, size_t len)
{
	struct ov_req q = { .op = OV_CLEAR, .client = client, .len = len };
	int rc;

	if ((rc = ov_args(client, len)) != 0)
		return rc;
	SHMT_GEN_CALL(h, gen_ov_once(h, name, &q));
}

SHMT_EXPORT int
shmt_client_get(shmt_t *h, const char *name, const void *client, size_t len,
    shmt_client_rule_t *out)
{
	struct ov_req q = { .op = OV_GET, .client = client, .len = len,
	    .out = out };
	int rc;

	if (out == NULL)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if ((rc = ov_args(client, len)) != 0)
		return rc;
	SHMT_GEN_CALL(h, gen_ov_once(h, name, &q));
}

SHMT_EXPORT int
shmt_client_list(shmt_t *h, const char *name, shmt_client_override_t *out,
    size_t cap)
{
	struct ov_req q = { .op = OV_LIST, .list = out, .cap = cap };

	if (out == NULL && cap != 0)
		return -EINVAL;
	SHMT_GEN_CALL(h, gen_ov_once(h, name, &q));
}

/* ---- Overrides: restore and check ------------------------------------------- */

void
shmt__clients_restore(shmt_t *h)
{
	uint32_t n;
	struct shmt_lim *lim = shmt__rows(h, &n);

	for (uint32_t r = 0; r < n; r++) {
		struct shmt_lview v;

		if (__atomic_load_n(&lim[r].lm_state, __ATOMIC_ACQUIRE) !=
		    SHMT_LIM_READY || shmt__view_fill(h, r, &lim[r], &v) != 0 ||
		    !(v.flags & SHMT_LIMF_PER_CLIENT))
			continue;
		ce_repair(&v);
	}
}

void
shmt__chk_overrides(struct shmt_chk *c, const struct shmt_lview *v)
{
	for (uint32_t i = 0; i < v->ovcap; i++) {
		const struct shmt_override *o = &v->ov[i];
		uint32_t r = __atomic_load_n(&o->ov_rule, __ATOMIC_ACQUIRE);

		if (r == CE_RULE_NONE)
			continue;
		if (!ce_rule_valid(r)) {
			shmt__chk(c, "limiter %s override %u: rule %#x out of "
			    "range", v->name, i, r);
			continue;
		}
		if (o->ov_idlen == 0 || o->ov_idlen > SHMT_OVERRIDE_ID_MAX)
			shmt__chk(c, "limiter %s override %u: id length %u out "
			    "of range", v->name, i, o->ov_idlen);
		if (o->ov_hash[0] == 0 || (o->ov_hash[1] & 0xffffU) != 0)
			shmt__chk(c, "limiter %s override %u: not a client hash",
			    v->name, i);
		if (r <= SHMT_LIMIT_MAX && v->mode != SHMT_MODE_BUCKETS)
			shmt__chk(c, "limiter %s override %u: a limit in rate "
			    "mode", v->name, i);
		/* Duplicates: a small table only (quadratic). */
		for (uint32_t j = i + 1; j < v->ovcap && v->ovcap <= 1024; j++)
			if (__atomic_load_n(&v->ov[j].ov_rule,
			    __ATOMIC_RELAXED) != CE_RULE_NONE &&
			    ov_match(&v->ov[j], o->ov_hash))
				shmt__chk(c, "limiter %s overrides %u and %u: "
				    "the same client", v->name, i, j);
	}
}
