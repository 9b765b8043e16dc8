/* SPDX-License-Identifier: MIT */
/*
 * Defining a per-client limiter, a key pool, a shared exact limiter or a
 * shared limiter going into rate mode anew by a move
 * (shmt__move_redefine): its parameters, table, ring, log and names
 * change in the new generation, every use in flight carried (key pools,
 * exact limiters and rate mode: below).  Run on the private segment a
 * move builds (image.c's fill), after the limiters were copied and the
 * client tables repaired, before the stores and the final shmt_check: no
 * other process sees the segment yet, so nothing here races.
 *
 * Storage.  The new client table, its rings and the override table are
 * laid out as a new row's would be: over the limiter's old storage when
 * they fit there or when it is the arena's last part (it then grows into
 * the free arena), else after the arena's used part (sh_arena_used), the
 * old storage then left unused (rows never give arena back, see
 * table.c).  The old storage is copied aside first and read from there.
 * The row's offsets and identity are rewritten to the new storage.

 * Clients.  Every LIVE entry moves to the first free entry of its probe
 * path in the new table (its home is its hash modulo the new capacity),
 * with its hash and epoch, its id, its last use and its override stamp;
 * the override table is copied entry by entry.  An entry that holds no use
 * and finds no room is left behind (as housekeeping would reclaim it: the
 * client's next call claims a new one, its override read from the table);
 * one that holds uses and finds no room refuses the whole move (-ENOSPC).
 * Free entries are not carried: they hold no use.
 *
 * Uses in flight, buckets mode.  An entry's buckets (the active one sealed:
 * its uses were decided before the change) are written oldest first into
 * the new ring, each split into buckets of at most the new slack_uses; when
 * that needs more buckets than the new ring has, consecutive ones are
 * packed together instead (ceil(in flight / slack_uses) buckets, which the
 * ring holds whenever in flight is at most nbuckets x slack_uses; a client
 * holding more refuses the move with -E2BIG).  A bucket made of several
 * takes the latest close time among them.  So every use stays counted in
 * the entry's word, and the grant test (in flight + cost <= limit) refuses
 * until a lowered limit is reached.  Release: a bucket of close time c is
 * released at c + window.  A carried bucket keeps c (the latest of the
 * buckets it holds, each use decided before it), lowered to now + the new
 * slack - 1 when that is earlier (shmt_check's rule; every use in it was
 * decided before now), so it is released no sooner than each use's
 * decision + the new window.  And no sooner than each use's old release
 * time: the row's block 0 records a hold window H (the largest old
 * release time less the carried close time, over every carried bucket)
 * and U, the latest carried close time; a bucket that closes at or before
 * U keeps H instead of the window when H is longer (bk_due_of, ring.h).
 * Only carried buckets close that early: a bucket opened after the change
 * closes at least now + the new slack, past U.  Hence each use in flight
 * is held until at least max(its old release time, its decision + the new
 * window): a wider window holds the carried uses for the new one, a
 * narrower one keeps their old release times (some carried buckets a
 * little longer: H is the largest, which is the safe direction).  The
 * carried buckets keep the entry's serials (the active one's sealed),
 * moved up when they are more than the serials already used.  A client
 * with a limit of its own (a tier, stamped in its entry) runs on buckets of
 * its own B' (shmt__tier_slack_uses, clients.h): its buckets are split and
 * packed to the B' of the new definition, so a tier that fitted its old
 * ring fits a new one as large.
 *
 * Uses in flight, rate mode.  An entry's arrival time is rescaled as an
 * in-place change rescales a shared limiter's (shmt__gcra_rescale: every
 * use in flight costs the new interval, never earlier than it was); rate
 * mode takes no limit override, so every arrival time is at the class's
 * interval.
 *
 * Key pools (buckets mode, not global).  A pool hands out names in grant
 * order: grant n gets name n mod K (the cursor in W's tag), and since the
 * ring releases its oldest uses first, the uses in flight are always the
 * last ones granted, so a name is held at most ceil(in flight / K) <= X
 * times (X uses per key).  The new pool (K' names, X') must start in the
 * same shape: its cursor is set to 0 and it is given I' = K' x m uses in
 * flight, m the most any kept name holds now (its share of the last grants
 * under the old cursor; a name that is new holds none), and at least
 * ceil(in flight / K'): as if the last I' grants of the new pool were in
 * flight, each name m times.  So every name's uses in flight are counted
 * (m covers each kept name's, and I' covers them all, names removed
 * included: those are never handed out again, their uses stay counted
 * until released), and a name is never held more than X' times once the
 * pool is under its new limit (a lowered X' or K' refuses until then: the
 * row's block 0 records the caps the word and the bucket may exceed the
 * new limit and bucket size by, lp_limit_cap and lp_uses_cap).  Those I'
 * uses sit in one sealed bucket with the latest close time of the old
 * ones (lowered to now + the new slack - 1), and the hold above covers the
 * latest old release time: every use is held until at least max(its old
 * release time, its grant + the new window), the earlier ones longer
 * (the safe direction), and uses counted beyond the real ones are taken
 * off the row's released count, so that grants (released + in flight)
 * stay right.  A definition without names (nkeys 0, keys NULL, with
 * uses_per_key) keeps the pool's names.
 *
 * Shared exact limiters (not global, no keys).  In place, the log keeps
 * the length N it was defined with and a limit above N is refused
 * (exact.c); a move gives the row a new log of N' = the new limit L'
 * records, laid out as a new row's (over the old storage when it fits,
 * grown in place when it is the arena's last, else after the used part).
 * The grant numbers go on: with the hint n (moved past grant n when its
 * record is already written), the old log holds exactly the records of
 * grants n - N .. n - 1 (each slot checked, a damaged one refused as
 * damage), and new slot j gets the latest grant m < n with m = j mod N':
 * its record {m, time} copied when m >= n - N, else {m, 0} (a grant the
 * old log no longer held: it counted nowhere, and time 0 is long past) or
 * {m, 0} with m < 0 (none yet, as a new log starts).  So the new log is
 * the one the grant protocol expects at hint n, every use in flight keeps
 * its decision time and its order, and grant n' >= n checks the record of
 * grant n' - L' as always.  Release: a carried record is due at its time
 * + max(C', H), H the longest hold among them in the old definition
 * (ex_due - time: its window, or an in-place change's longer hold): when
 * H > C' the row gets parameter generation 1 whose block names the
 * carried grants (lp_hold_seq = n) and H (lp_hold_window), exactly as an
 * in-place change does (exact.c), else generation 0 and no hold.  Hence
 * each use in flight is held until at least max(its old release time,
 * its decision + the new window) (some a little longer, H being the
 * largest: the safe direction), and exact.c's argument for a change
 * applies unchanged, the generations splitting the grants at number n: an
 * interval of length C' wholly after the change holds at most L' grants,
 * one of length min(C, C') at most max(L, L').
 *
 * A shared limiter into rate mode (from buckets or exact mode; not
 * global, no keys).  Rate mode keeps one arrival time TAT and no storage
 * (the old storage is left unused).  At the move's NOW the old definition
 * holds n uses not yet due (a bucket's count when its release time is
 * past NOW, an exact record's use when its ex_due is), the latest of
 * their release times R.  The row gets TAT = max(NOW + n x T', R) (0 when
 * n is 0), T' = window' / limit'.  Rate mode's promise (gcra.c) counts
 * the uses behind TAT: with TAT >= NOW + n x T', the n uses count as n
 * grants of the new definition decided at NOW, so the grants decided in
 * any interval [a, a + d) after the change number at most B' + d / T'
 * less those of the n that TAT still holds; none is forgotten, each
 * costs the new interval, and TAT >= R keeps the limiter from being
 * whole again (TAT <= now) before the last old use is released.  A burst
 * below n refuses until they drain under it, as an in-place change does
 * (shmt__gcra_rescale).  Other changes of a shared limiter's mode (into
 * buckets or exact mode) are refused (-EOPNOTSUPP).
 */
#include "daemon.h"

#include "clients.h"
#include "exact.h"
#include "gcra.h"
#include "lock.h"
#include "ring.h"
#include "table.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bucket being carried: close time, release time it must keep, uses. */
struct cb {
	uint64_t close, due;
	uint32_t count;
};

/* The id of entry E for messages: its kept bytes, unprintable ones as
 * '?'. */
static void
id_text(const struct shmt_client *e, char *buf, size_t cap)
{
	uint32_t n = e->ce_idlen < sizeof(e->ce_id) ? e->ce_idlen :
	    (uint32_t)sizeof(e->ce_id);
	size_t i;

	for (i = 0; i < n && i + 1 < cap; i++)
		buf[i] = e->ce_id[i] >= 0x20 && e->ce_id[i] < 0x7f ?
		    (char)e->ce_id[i] : '?';
	buf[i] = '\0';
}

/* The buckets of entry E of the old view VO, oldest first, into OB (room
 * for VO's ring): their number, or SHMT_ECORRUPT. */
static int
old_buckets(const struct shmt_lview *vo, struct shmt_client *e,
    struct shmt_w w, struct cb *ob)
{
	struct bk_ctx oc;
	uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w);
	uint32_t n = nsealed + SHMT_W_ACTIVE(w), k = 0;
	uint64_t sum = 0;

	shmt__bk_ctx_init(&oc, vo, ce_ring(e));
	oc.ntags = 0;
	if (!w_valid(&oc, w))
		return SHMT_ECORRUPT;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t serial = tail - nsealed + i;
		uint64_t s[2];
		uint32_t count;

		shmt__load128(slot_of(&oc, serial), s);
		if (SLOT_SERIAL(s) != serial)
			return SHMT_ECORRUPT;
		count = serial == tail ? SHMT_W_COUNT(w) : SLOT_COUNT(s);
		sum += count;
		if (count == 0)
			continue;       /* a serial skipped: nothing held */
		ob[k].close = s[0];
		ob[k].due = bk_due(&oc, serial, s[0]);
		ob[k].count = count;
		k++;
	}
	if (sum != SHMT_W_INFLIGHT(w))
		return SHMT_ECORRUPT;
	return (int)k;
}

/* Lay the K old buckets OB into at most NB buckets NBK of at most SU uses
 * each (see the top): their number, or -E2BIG. */
static int
pack(const struct cb *ob, int k, struct cb *nbk, uint32_t nb, uint32_t su)
{
	uint64_t need = 0;
	uint32_t m = 0;
	int merge;

	for (int i = 0; i < k; i++)
		need += div_up(ob[i].count, su);
	merge = need > nb;
	for (int i = 0; i < k; i++) {
		uint32_t left = ob[i].count;
		int fresh = !merge;

		while (left > 0) {
			uint32_t take;

			if (m == 0 || fresh || nbk[m - 1].count == su) {
				if (m == nb)
					return -E2BIG;
				nbk[m].close = ob[i].close;
				nbk[m].due = ob[i].due;
				nbk[m].count = 0;
				m++;
				fresh = 0;
			}
			take = su - nbk[m - 1].count;
			if (take > left)
				take = left;
			nbk[m - 1].count += take;
			if (ob[i].close > nbk[m - 1].close)
				nbk[m - 1].close = ob[i].close;
			if (ob[i].due > nbk[m - 1].due)
				nbk[m - 1].due = ob[i].due;
			left -= take;
		}
	}
	return (int)m;
}

/* The view of row R (ROW) of T as rewritten, in *VN: 0, or the view's
 * error with ERR saying that limiter NAME's new row does not check. */
static int
row_check(shmt_t *t, uint32_t r, struct shmt_lim *row, struct shmt_lview *vn,
    const char *name, char *err, size_t cap)
{
	int rc = shmt__view_fill(t, r, row, vn);

	if (rc != 0)
		return shmt__bad(err, cap, rc, "limiter %s: the new row does "
		    "not check: %s", name, shmt_strerror(rc));
	return 0;
}

/* The bucket size of an entry stamped RULE under view V: a tier's own B'
 * (shmt__tier_slack_uses), else V's. */
static uint64_t
entry_b(const struct shmt_lview *v, uint32_t rule)
{
	if (rule != CE_RULE_NONE && rule <= SHMT_LIMIT_MAX &&
	    v->mode == SHMT_MODE_BUCKETS)
		return shmt__tier_slack_uses(v, rule);
	return v->slack_uses;
}

/* Carry the buckets of old entry E (word W) into new entry NE of view VN
 * at NOW: its new word in *NW; *HOLD raised to the hold its buckets need.
 * OB, NBK: scratch for VO's and VN's rings. */
/*
 * A new ring's slots read as serial 0 (zeroed).  A serial is compared with
 * a slot's by their 32-bit difference, so with the word's tail at 2^31 or
 * more a zeroed slot reads as holding a newer serial than the next to
 * open, and no bucket could ever be opened there.  Every slot that holds
 * none of the carried buckets (serials FIRST onwards) gets a bucket
 * released long ago instead: the serial below FIRST that falls in it, with
 * close time 0.  Where those serials cross 0 (FIRST < NB, far from 2^31),
 * a slot may keep its 0, which reads as older there.
 */
static void
ring_fill_released(struct shmt_ring_slot *ring, uint32_t nb, uint32_t first)
{
	for (uint32_t k = 1; k <= nb; k++) {
		uint32_t serial = first - k;
		struct shmt_ring_slot *sl = &ring[serial % nb];

		if (sl->r[0] == 0 && sl->r[1] == 0)
			sl->r[1] = (uint64_t)serial << 32;
	}
}

static int
carry_ring(const struct shmt_lview *vo, const struct shmt_lview *vn,
    struct shmt_client *e, struct shmt_w w, struct shmt_client *ne,
    uint64_t now, struct shmt_w *nw, uint64_t *hold, uint64_t *until,
    struct cb *ob, struct cb *nbk)
{
	struct shmt_ring_slot *ring = ce_ring(ne);
	uint64_t prev = 0, top = sat_add(now, vn->slack - 1);
	uint32_t tail = SHMT_W_TAIL(w) + SHMT_W_ACTIVE(w);
	int k, m;

	if ((k = old_buckets(vo, e, w, ob)) < 0)
		return k;
	if ((m = pack(ob, k, nbk, vn->nb, (uint32_t)entry_b(vn,
	    e->ce_rule))) < 0)
		return m;
	/* Serials only grow, and the carried ones stay above 0 (the serial
	 * of a slot never opened). */
	if (tail < (uint32_t)m + 1)
		tail = (uint32_t)m + 1;
	for (int j = 0; j < m; j++) {
		uint32_t serial = tail - (uint32_t)m + (uint32_t)j;
		uint64_t close = nbk[j].close > prev ? nbk[j].close : prev;
		uint64_t s[2];

		prev = close;
		if (close > top)
			close = top;
		if (nbk[j].due > close && nbk[j].due - close > *hold)
			*hold = nbk[j].due - close;
		if (close > *until)
			*until = close;
		s[0] = close;
		s[1] = ((uint64_t)serial << 32) | nbk[j].count;
		shmt__store128(&ring[serial % vn->nb], s);
	}
	ring_fill_released(ring, vn->nb, tail - (uint32_t)m);
	*nw = shmt__w_make(SHMT_W_INFLIGHT(w), 0, tail, (uint32_t)m, 0,
	    SHMT_W_TAG(w));
	return 0;
}

/* Carry the override table of VO into VN's, entry by entry. */
static int
carry_overrides(const struct shmt_lview *vo, const struct shmt_lview *vn,
    char *err, size_t cap)
{
	uint32_t m = 0, used = 0;

	for (uint32_t j = 0; j < vo->ovcap; j++)
		if (vo->ov[j].ov_rule != CE_RULE_NONE)
			used++;
	if (used > vn->ovcap)
		return shmt__bad(err, cap, -ENOSPC, "limiter %s: %u client "
		    "overrides are set, the new definition holds %u: keep "
		    "client_overrides at %u or more, or clear some "
		    "(shmthrottle client clear)", vo->name, used, vn->ovcap,
		    used);
	for (uint32_t j = 0; j < vo->ovcap; j++) {
		uint32_t r = vo->ov[j].ov_rule;

		if (r == CE_RULE_NONE)
			continue;
		if (!ce_rule_valid(r))
			return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
			    "override %u holds rule %#x", vo->name, j, r);

		memcpy(&vn->ov[m++], &vo->ov[j], sizeof(vo->ov[j]));
	}
	return 0;
}

/* The free entry of HASH's probe path in VN's table, or NULL. */
static struct shmt_client *
new_entry(const struct shmt_lview *vn, const uint64_t hash[2])
{
	uint32_t home = shmt__client_home(hash, vn->capacity);

	for (uint32_t k = 0; k < ce_probe(vn); k++) {
		struct shmt_client *ne = ce_at(vn, (home + k) % vn->capacity);

		if (ne->ce_hash[0] == 0 && ne->ce_hash[1] == 0)
			return ne;
	}
	return NULL;
}

/* Carry every live client of VO into VN at NOW (see the top). */
static int
carry_clients(const struct shmt_lview *vo, const struct shmt_lview *vn,
    const shmt_limit_t *l, uint64_t now, uint64_t *hold, uint64_t *until,
    char *err, size_t cap)
{
	struct cb *ob = NULL, *nbk = NULL;
	char id[sizeof(((struct shmt_client *)0)->ce_id) + 1];
	int rc = 0;

	if (vo->mode == SHMT_MODE_BUCKETS &&
	    ((ob = calloc((size_t)vo->nb + 1, sizeof(*ob))) == NULL ||
	    (nbk = calloc((size_t)vn->nb, sizeof(*nbk))) == NULL)) {
		rc = shmt__bad(err, cap, -ENOMEM, "no memory");
		goto out;
	}
	for (uint32_t i = 0; i < vo->capacity && rc == 0; i++) {
		struct shmt_client *e = ce_at(vo, i), *ne;
		uint64_t hw[2], key[2];
		struct shmt_w w, nw;

		shmt__load128(&e->ce_w, w.w);
		if (SHMT_W_TAG(w) >> 14 != CE_LIVE)
			continue;
		shmt__load128(e->ce_hash, hw);
		if (hw[0] == 0) {
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
			    "client entry %u is live without a hash", vo->name,
			    i);
			break;
		}
		key[0] = hw[0];
		key[1] = hw[1] & ~0xffffULL;
		if ((ne = new_entry(vn, key)) == NULL) {
			if (vo->mode == SHMT_MODE_GCRA ? w.w[0] <= now :
			    ce_idle(w))
				continue;       /* idle: reclaimed */
			id_text(e, id, sizeof(id));
			rc = shmt__bad(err, cap, -ENOSPC, "limiter %s: client "
			    "'%s' holds uses in flight and finds no free entry "
			    "within %u of its home in a table of %u: keep "
			    "client_capacity higher", vo->name, id,
			    ce_probe(vn), vn->capacity);
			break;
		}
		if (vo->mode == SHMT_MODE_GCRA) {
			nw.w[0] = shmt__gcra_rescale(vo, l, w.w[0], now);
			nw.w[1] = w.w[1];
		} else if ((rc = carry_ring(vo, vn, e, w, ne, now, &nw, hold,
		    until, ob, nbk)) != 0) {
			id_text(e, id, sizeof(id));
			if (rc == -E2BIG)
				rc = shmt__bad(err, cap, -E2BIG, "limiter %s: client "
				    "'%s' holds %u uses in flight, more than its "
				    "new ring holds (%u buckets of %" PRIu64 "): "
				    "raise the limit or slack_uses, or wait for "
				    "them to drain", vo->name, id,
				    SHMT_W_INFLIGHT(w), vn->nb, vn->slack_uses);
			else
				rc = shmt__bad(err, cap, rc, "limiter %s: client "
				    "entry %u is damaged: %s", vo->name, i,
				    shmt_strerror(rc));
			break;
		}
		shmt__store128(ne->ce_hash, hw);
		ne->ce_last_ns = e->ce_last_ns;
		ne->ce_idlen = e->ce_idlen;
		ne->ce_rule = e->ce_rule;
		memcpy(ne->ce_id, e->ce_id, sizeof(ne->ce_id));
		shmt__store128(&ne->ce_w, nw.w);
	}
out:
	free(ob);
	free(nbk);
	return rc;
}

/* What may not change by a move, old view VO against L. */
static int
redef_check(const struct shmt_lview *vo, const shmt_limit_t *l, char *err,
    size_t cap)
{
	if (vo->flags & SHMT_LIMF_KEYS) {
		if ((vo->flags & SHMT_LIMF_GLOBAL) || l->global)
			return shmt__bad(err, cap, -EOPNOTSUPP, "limiter %s: a "
			    "global key pool's names are the fleet's: delete and "
			    "define it again", vo->name);
		if (vo->mode != SHMT_MODE_BUCKETS)
			return shmt__bad(err, cap, -EOPNOTSUPP, "limiter %s: only "
			    "a key pool in buckets mode is defined anew by a "
			    "move: delete and define it again", vo->name);
		if ((l->nkeys == 0 && l->uses_per_key == 0) ||
		    l->mode != SHMT_MODE_BUCKETS || l->per_client)
			return shmt__bad(err, cap, -EINVAL, "limiter %s: a key "
			    "pool stays a key pool in buckets mode: delete and "
			    "define it again", vo->name);
		return 0;
	}
	if (vo->mode != SHMT_MODE_GCRA && l->mode == SHMT_MODE_GCRA &&
	    !(vo->flags & (SHMT_LIMF_PER_CLIENT | SHMT_LIMF_GLOBAL))) {
		if (l->per_client || l->nkeys != 0 || l->global)
			return shmt__bad(err, cap, -EINVAL, "limiter %s: a "
			    "shared limiter stays shared, without keys: delete "
			    "and define it again", vo->name);
		return 0;
	}
	if (vo->mode == SHMT_MODE_EXACT &&
	    !(vo->flags & (SHMT_LIMF_PER_CLIENT | SHMT_LIMF_GLOBAL))) {
		if (l->mode != SHMT_MODE_EXACT)
			return shmt__bad(err, cap, -EOPNOTSUPP, "limiter %s: "
			    "a shared limiter's mode changes only into rate mode: "
			    "delete and define it again", vo->name);
		if (l->per_client || l->nkeys != 0 || l->global)
			return shmt__bad(err, cap, -EINVAL, "limiter %s: a "
			    "shared exact limiter stays shared, without keys: "
			    "delete and define it again", vo->name);
		return 0;
	}
	if (!(vo->flags & SHMT_LIMF_PER_CLIENT)) {
		if ((uint32_t)l->mode != vo->mode)
			return shmt__bad(err, cap, -EOPNOTSUPP, "limiter %s: "
			    "a shared limiter's mode changes only into rate mode: "
			    "delete and define it again", vo->name);
		return shmt__bad(err, cap, -EOPNOTSUPP, "limiter %s: only "
		    "per-client limiters, key pools and shared exact "
		    "limiters are defined anew by a move (a shared one "
		    "changes in place)", vo->name);
	}
	if (!l->per_client)
		return shmt__bad(err, cap, -EINVAL, "limiter %s: per_client "
		    "cannot change: delete and define it again", vo->name);
	if ((uint32_t)l->mode != vo->mode)
		return shmt__bad(err, cap, -EINVAL, "limiter %s: its mode "
		    "cannot change: delete and define it again", vo->name);
	return 0;
}

/* ---- Key pools ------------------------------------------------------------ */

/* The index of NAME among the names of VO, or VO's nkeys. */
static uint32_t
key_index(const struct shmt_lview *vo, const char *name)
{
	for (uint32_t k = 0; k < vo->nkeys; k++)
		if (strncmp(vo->keys + (uint64_t)k * vo->keystride, name,
		    vo->keystride) == 0)
			return k;
	return vo->nkeys;
}

/*
 * The uses in flight of key pool VO (word W), as the new pool L (K' names,
 * U' uses per key) takes them: *IN the uses the new word holds, *CLOSE and
 * *DUE the close and release time of the one bucket that holds them.
 */
static int
pool_carry(const struct shmt_lview *vo, struct shmt_w w, const shmt_limit_t *l,
    uint64_t *in, uint64_t *close, uint64_t *due)
{
	struct bk_ctx oc;
	uint32_t inflight = SHMT_W_INFLIGHT(w), cursor = SHMT_W_TAG(w);
	uint32_t tail = SHMT_W_TAIL(w), nsealed = SHMT_W_NSEALED(w);
	uint32_t nbk = nsealed + SHMT_W_ACTIVE(w);
	uint64_t sum = 0, most = 0, per;

	shmt__bk_ctx_init(&oc, vo, vo->ring);
	if (!w_valid(&oc, w))
		return SHMT_ECORRUPT;
	*in = *close = *due = 0;
	for (uint32_t i = 0; i < nbk; i++) {
		uint32_t serial = tail - nsealed + i;
		uint64_t s[2];

		shmt__load128(slot_of(&oc, serial), s);
		if (SLOT_SERIAL(s) != serial)
			return SHMT_ECORRUPT;
		sum += serial == tail ? SHMT_W_COUNT(w) : SLOT_COUNT(s);
		if (s[0] > *close)
			*close = s[0];
		if (bk_due(&oc, serial, s[0]) > *due)
			*due = bk_due(&oc, serial, s[0]);
	}
	if (sum != inflight)
		return SHMT_ECORRUPT;
	if (inflight == 0)
		return 0;
	/* The uses in flight are the last grants: grant i back (1 the
	 * latest) had name (cursor - i) mod nkeys, so name k holds
	 * inflight / nkeys, or one more for the remainder's names. */
	for (uint32_t j = 0; j < l->nkeys; j++) {
		uint32_t k = key_index(vo, l->keys[j]), back;
		uint64_t held;

		if (k == vo->nkeys)
			continue;       /* a new name holds none */
		back = (cursor + vo->nkeys - k) % vo->nkeys;
		if (back == 0)
			back = vo->nkeys;
		held = inflight / vo->nkeys + (back <= inflight % vo->nkeys);
		if (held > most)
			most = held;
	}
	per = div_up(inflight, l->nkeys);
	if (most > per)
		per = most;
	*in = per * l->nkeys;
	return 0;
}

/*
 * The old storage of ROW, [*START, OLD_END) in the arena of T (FIRST: the
 * offset of its first part), checked against the arena's size and its fill
 * level USED, and copied aside into *COPY (the caller frees it): the new storage
 * may take its place, and the old one is read from the copy.  Returns 0,
 * or SHMT_ECORRUPT / -ENOMEM with ERR filled.
 */
static int
old_storage(shmt_t *t, uint64_t used, const struct shmt_lim *row,
    uint64_t first, uint64_t old_end, const char *name, uint64_t *start,
    void **copy, char *err, size_t cap)
{
	uint64_t size = t->reg[SHMT_R_ARENA].rg_size;
	const char *arena = shmt__region(t, SHMT_R_ARENA);

	*start = old_end - row->lm_storage;
	if (used > size || row->lm_storage > old_end || *start > first ||
	    *start % 16 != 0 || old_end > size)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: its "
		    "storage does not add up", name);
	if ((*copy = aligned_alloc(SHMT_LINE, shmt__align_up(old_end - *start,
	    SHMT_LINE))) == NULL)
		return shmt__bad(err, cap, -ENOMEM, "no memory");
	memcpy(*copy, arena + *start, old_end - *start);
	return 0;
}

/* Define key pool row R of T (old view VO) anew as L (checked into G). */
static int
redefine_pool(shmt_t *t, struct shmt_lim *row, uint32_t r,
    struct shmt_lview *vo, const shmt_limit_t *l, const struct lim_geom *g,
    char *err, size_t cap)
{
	struct shmt_hdr *hdr = t->hdr;
	uint64_t size = t->reg[SHMT_R_ARENA].rg_size, used, start, old_end;
	uint64_t ring_off, keys_off, end, now, in, close, due, top;
	char *arena = shmt__region(t, SHMT_R_ARENA);
	struct shmt_lparams *b0 = &row->lm_p[0];
	struct shmt_lview vn;
	struct shmt_w w;
	void *copy = NULL;
	uint32_t tail;
	int rc;

	shmt__load128(&row->lm_w, w.w);
	now = shmt__now(t);
	if ((rc = pool_carry(vo, w, l, &in, &close, &due)) != 0)
		return shmt__bad(err, cap, rc, "limiter %s: its ring is "
		    "damaged: %s", vo->name, shmt_strerror(rc));
	if (in > SHMT_LIMIT_MAX || in > UINT32_MAX / 2)
		return shmt__bad(err, cap, -E2BIG, "limiter %s: its uses in "
		    "flight cannot be carried", vo->name);
	used = __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	old_end = shmt__align_up(row->lm_keys_off + (uint64_t)vo->nkeys *
	    vo->keystride, SHMT_LINE);
	if ((rc = old_storage(t, used, row, row->lm_ring_off, old_end, vo->name,
	    &start, &copy, err, cap)) != 0)
		return rc;
	vo->ring = (struct shmt_ring_slot *)(void *)((char *)copy +
	    (row->lm_ring_off - start));
	vo->keys = (char *)copy + (row->lm_keys_off - start);
	/* As for a client table (see the top): over the old storage, the
	 * names at its end, when they fit there; grown in place when it is
	 * the arena's last; else after the used part. */
	ring_off = shmt__align_up(start, SHMT_LINE);
	keys_off = shmt__align_up(ring_off + g->ring_bytes, 16);
	end = shmt__align_up(keys_off + g->keys_bytes, SHMT_LINE);
	if (end < old_end && ((old_end - g->keys_bytes) & ~(uint64_t)15) >=
	    keys_off) {
		keys_off = (old_end - g->keys_bytes) & ~(uint64_t)15;
		end = old_end;
	}
	if (end > old_end && (old_end != used || end > size)) {
		start = used;
		ring_off = shmt__align_up(used, SHMT_LINE);
		keys_off = shmt__align_up(ring_off + g->ring_bytes, 16);
		end = shmt__align_up(keys_off + g->keys_bytes, SHMT_LINE);
	}
	if (end > size || end < start) {
		rc = shmt__bad(err, cap, -ENOSPC, "limiter %s: its new "
		    "definition needs %" PRIu64 " arena bytes, %" PRIu64 " are "
		    "free: move to a larger arena first (shmthrottle resize "
		    "arena=...)", vo->name, end - start, size - used);
		goto out;
	}
	memset(arena + ring_off, 0, end - ring_off);
	for (uint32_t i = 0; i < l->nkeys; i++)
		memcpy(arena + keys_off + (uint64_t)i * g->keystride, l->keys[i],
		    strlen(l->keys[i]));
	row->lm_limit = g->limit;
	row->lm_window = l->window_ns;
	row->lm_slack = l->slack_ns;
	row->lm_slack_uses = l->slack_uses;
	row->lm_nbuckets = g->nb;
	row->lm_nkeys = l->nkeys;
	row->lm_uses_per_key = l->uses_per_key;
	row->lm_keystride = g->keystride;
	row->lm_keymax = g->keymax;
	row->lm_ring_off = ring_off;
	row->lm_keys_off = keys_off;
	row->lm_clients_off = end;
	row->lm_storage = end - start;
	memset(&row->lm_p, 0, sizeof(row->lm_p));
	if (end > used)
		__atomic_store_n(&hdr->sh_arena_used, end, __ATOMIC_RELAXED);
	/* The carried uses: one sealed bucket, closed no later than now +
	 * the new slack - 1, cursor 0. */
	tail = SHMT_W_TAIL(w) + SHMT_W_ACTIVE(w);
	if (tail < 2)
		tail = 2;
	if (in == 0) {
		w = shmt__w_make(0, 0, tail, 0, 0, 0);
	} else {
		struct shmt_ring_slot *ring = (void *)(arena + ring_off);
		uint64_t s[2];

		top = sat_add(now, l->slack_ns - 1);
		if (close > top)
			close = top;
		s[0] = close;
		s[1] = ((uint64_t)(tail - 1) << 32) | in;
		shmt__store128(&ring[(tail - 1) % g->nb], s);
		w = shmt__w_make((uint32_t)in, 0, tail, 1, 0, 0);
		if (due > close && due - close > l->window_ns) {
			b0->lp_hold_window = due - close;
			b0->lp_slack = close;
		}
		if (in > g->limit)
			b0->lp_limit_cap = (uint32_t)in;
		if (in > l->slack_uses)
			b0->lp_uses_cap = (uint32_t)in;
		/* Grants are released + in flight: the uses added to keep
		 * every name's count are not grants. */
		if (in > SHMT_W_INFLIGHT(row->lm_w))
			row->lm_released_uses -= row->lm_released_uses <
			    in - SHMT_W_INFLIGHT(row->lm_w) ? row->lm_released_uses :
			    in - SHMT_W_INFLIGHT(row->lm_w);
	}
	ring_fill_released((void *)(arena + ring_off), g->nb,
	    tail - (in == 0 ? 0 : 1));
	shmt__store128(&row->lm_w, w.w);
	if ((rc = row_check(t, r, row, &vn, vo->name, err, cap)) != 0)
		goto out;
	__atomic_fetch_add(&hdr->sh_generation, 1, __ATOMIC_RELEASE);
out:
	free(copy);
	return rc;
}

/* A key pool defined anew without names (L's nkeys 0, keys NULL) keeps
 * the names of VO. */
static int
redefine_pool_names(shmt_t *t, struct shmt_lim *row, uint32_t r,
    struct shmt_lview *vo, const shmt_limit_t *l, char *err, size_t cap)
{
	shmt_limit_t k = *l;
	struct lim_geom g;
	char why[256], *names;
	const char **keys;
	int rc;

	names = calloc(vo->nkeys, (size_t)vo->keymax + 1);
	keys = calloc(vo->nkeys, sizeof(*keys));
	if (names == NULL || keys == NULL) {
		free(names);
		free(keys);
		return shmt__bad(err, cap, -ENOMEM, "no memory");
	}
	for (uint32_t i = 0; i < vo->nkeys; i++) {
		char *n = names + (size_t)i * (vo->keymax + 1);

		if (shmt__key_copy(vo, i, n) < 0) {
			rc = shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: key "
			    "name %u is damaged", vo->name, i);
			goto out;
		}
		keys[i] = n;
	}
	k.nkeys = vo->nkeys;
	k.keys = keys;
	if ((rc = shmt__limit_check(&k, &g, why, sizeof(why))) != 0)
		rc = shmt__bad(err, cap, rc, "limiter %s: %s", vo->name, why);
	else
		rc = redefine_pool(t, row, r, vo, &k, &g, err, cap);
out:
	free(names);
	free(keys);
	return rc;
}

/* ---- Shared exact limiters -------------------------------------------------- */

/*
 * Define shared exact limiter row R of T (old view VO, grant hint n) anew
 * as L (checked into G), with a log of G's limit records (see the top).
 */
static int
redefine_exact(shmt_t *t, struct shmt_lim *row, uint32_t r,
    struct shmt_lview *vo, const shmt_limit_t *l, const struct lim_geom *g,
    char *err, size_t cap)
{
	struct shmt_hdr *hdr = t->hdr;
	uint64_t size = t->reg[SHMT_R_ARENA].rg_size, used, start, old_end;
	uint64_t ring_off, end, hold = 0, N = vo->nlog, N2 = g->limit;
	char *arena = shmt__region(t, SHMT_R_ARENA);
	struct shmt_log_slot *log;
	struct shmt_lview vn;
	uint64_t s[2];
	void *copy = NULL;
	int64_t n;
	int rc;

	n = (int64_t)row->lm_w.w[0];
	if (n < 0 || n == INT64_MAX || N == 0)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: its "
		    "grant hint is damaged", vo->name);
	/* Grant n may be recorded, the hint not moved on yet. */
	shmt__load128(ex_slot(vo, n), s);
	if ((int64_t)s[0] == n)
		n++;
	/* Every slot must hold the latest grant below n of its number. */
	for (int64_t m = n - (int64_t)N; m < n; m++) {
		shmt__load128(ex_slot(vo, m), s);
		if ((int64_t)s[0] != m || (m >= 0 && s[1] > shmt__now(t)))
			return shmt__bad(err, cap, SHMT_ECORRUPT, "limiter %s: "
			    "its log is damaged (slot of grant %" PRId64 ")",
			    vo->name, m);
		if (m >= 0 && ex_due(vo, m, s[1]) - s[1] > hold)
			hold = ex_due(vo, m, s[1]) - s[1];
	}
	used = __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	old_end = shmt__align_up(row->lm_ring_off + N *
	    sizeof(struct shmt_log_slot), SHMT_LINE);
	if ((rc = old_storage(t, used, row, row->lm_ring_off, old_end, vo->name,
	    &start, &copy, err, cap)) != 0)
		return rc;
	vo->log = (struct shmt_log_slot *)(void *)((char *)copy +
	    (row->lm_ring_off - start));
	/* Over the old storage when it fits there; grown in place when it
	 * is the arena's last; else after the used part. */
	ring_off = shmt__align_up(start, SHMT_LINE);
	end = shmt__align_up(ring_off + g->ring_bytes, SHMT_LINE);
	if (end > old_end && (old_end != used || end > size)) {
		start = used;
		ring_off = shmt__align_up(used, SHMT_LINE);
		end = shmt__align_up(ring_off + g->ring_bytes, SHMT_LINE);
	}
	if (end > size || end < start) {
		rc = shmt__bad(err, cap, -ENOSPC, "limiter %s: its new "
		    "definition needs %" PRIu64 " arena bytes, %" PRIu64 " are "
		    "free: move to a larger arena first (shmthrottle resize "
		    "arena=...)", vo->name, end - start, size - used);
		goto out;
	}
	memset(arena + ring_off, 0, end - ring_off);
	log = (struct shmt_log_slot *)(void *)(arena + ring_off);
	/* Slot j: the latest grant m below n with m = j mod N2, its record
	 * copied when the old log holds it (m >= n - N), else one made long
	 * ago (time 0) or none (m < 0). */
	for (uint64_t j = 0; j < N2; j++) {
		int64_t m = n - 1 - (((n - 1 - (int64_t)j) % (int64_t)N2) +
		    (int64_t)N2) % (int64_t)N2;

		log[j].ls_seq = m;
		log[j].ls_time = 0;
		if (m >= 0 && m >= n - (int64_t)N)
			log[j].ls_time = vo->log[(uint64_t)m % N].ls_time;
	}
	row->lm_limit = g->limit;
	row->lm_window = l->window_ns;
	row->lm_slack = 0;
	row->lm_slack_uses = 0;
	row->lm_nbuckets = g->nb;
	row->lm_burst = l->burst;
	row->lm_flags = l->shadow ? SHMT_LIMF_SHADOW : 0;
	row->lm_ring_off = ring_off;
	row->lm_keys_off = shmt__align_up(ring_off + g->ring_bytes, 16);
	row->lm_clients_off = shmt__align_up(row->lm_keys_off, SHMT_LINE);
	row->lm_storage = end - start;
	memset(&row->lm_p, 0, sizeof(row->lm_p));
	/* The carried records keep their old hold when it is longer than
	 * the new window: generation 1, its block naming them (below n). */
	s[0] = (uint64_t)n;
	s[1] = 0;
	if (hold > l->window_ns) {
		struct shmt_lparams *p = &row->lm_p[1];

		p->lp_limit = g->limit;
		p->lp_window = l->window_ns;
		p->lp_hold_seq = n;
		p->lp_hold_window = hold;
		p->lp_gen = 1;
		s[1] = 1;
	}
	shmt__store128(&row->lm_w, s);
	if (end > used)
		__atomic_store_n(&hdr->sh_arena_used, end, __ATOMIC_RELAXED);
	if ((rc = row_check(t, r, row, &vn, vo->name, err, cap)) != 0)
		goto out;
	__atomic_fetch_add(&hdr->sh_generation, 1, __ATOMIC_RELEASE);
out:
	free(copy);
	return rc;
}

/* ---- A shared limiter into rate mode --------------------------------------- */

/*
 * The uses in flight of shared limiter VO at NOW, as rate mode takes them
 * (see the top): *N those not yet due, *R the latest release time among
 * them (0: none).
 */
static int
shared_inflight(shmt_t *t, const struct shmt_lview *vo, uint64_t now,
    uint64_t *n, uint64_t *r)
{
	*n = *r = 0;
	if (vo->mode == SHMT_MODE_EXACT) {
		int64_t h = (int64_t)vo->lim->lm_w.w[0];
		uint64_t s[2];

		if (h < 0 || h == INT64_MAX)
			return SHMT_ECORRUPT;
		for (uint64_t i = 0; i < vo->nlog; i++) {
			uint64_t due;

			shmt__load128(&vo->log[i], s);
			if ((int64_t)s[0] < -(int64_t)vo->nlog ||
			    (int64_t)s[0] > h)
				return SHMT_ECORRUPT;
			if ((int64_t)s[0] < 0 || (due = ex_due(vo, (int64_t)s[0],
			    s[1])) <= now)
				continue;
			(*n)++;
			if (due > *r)
				*r = due;
		}
		return 0;
	} else {
		struct bk_ctx oc;
		struct shmt_w w;
		uint32_t tail, nsealed, nbk;
		uint64_t sum = 0;

		(void)t;
		shmt__load128(&vo->lim->lm_w, w.w);
		shmt__bk_ctx_init(&oc, vo, vo->ring);
		oc.ntags = 0;
		if (!w_valid(&oc, w))
			return SHMT_ECORRUPT;
		tail = SHMT_W_TAIL(w);
		nsealed = SHMT_W_NSEALED(w);
		nbk = nsealed + SHMT_W_ACTIVE(w);
		for (uint32_t i = 0; i < nbk; i++) {
			uint32_t serial = tail - nsealed + i, count;
			uint64_t s[2], due;

			shmt__load128(slot_of(&oc, serial), s);
			if (SLOT_SERIAL(s) != serial)
				return SHMT_ECORRUPT;
			count = serial == tail ? SHMT_W_COUNT(w) : SLOT_COUNT(s);
			sum += count;
			due = bk_due(&oc, serial, s[0]);
			if (count == 0 || due <= now)
				continue;
			*n += count;
			if (due > *r)
				*r = due;
		}
		if (sum != SHMT_W_INFLIGHT(w))
			return SHMT_ECORRUPT;
		return 0;
	}
}

/*
 * Define shared limiter row R of T (old view VO, buckets or exact mode)
 * anew in rate mode as L (checked into G): see the top.
 */
static int
redefine_to_rate(shmt_t *t, struct shmt_lim *row, uint32_t r,
    struct shmt_lview *vo, const shmt_limit_t *l, const struct lim_geom *g,
    char *err, size_t cap)
{
	uint64_t now = shmt__now(t), n, rel, T = l->window_ns / l->limit;
	uint64_t tat = 0, s[2], granted;
	struct shmt_w ow;
	unsigned __int128 want;
	struct shmt_lview vn;
	int rc;

	if ((rc = shared_inflight(t, vo, now, &n, &rel)) != 0)
		return shmt__bad(err, cap, rc, "limiter %s: its %s is damaged",
		    vo->name, vo->mode == SHMT_MODE_EXACT ? "log" : "ring");
	/* Its grants so far, as shmt_limiter_stat counted them, go on in
	 * rate mode's count (gcra.h): the row's counter, the word's at 0. */
	shmt__load128(&row->lm_w, ow.w);
	granted = vo->mode == SHMT_MODE_EXACT ? ow.w[0] :
	    row->lm_released_uses + SHMT_W_INFLIGHT(ow);
	if (n > 0) {
		/* Every use in flight at the new interval, never before the
		 * latest old release. */
		want = (unsigned __int128)n * T + now;
		tat = want > UINT64_MAX ? UINT64_MAX : (uint64_t)want;
		if (rel > tat)
			tat = rel;
	}
	/* Rate mode keeps no storage: the old is left unused (rows never
	 * give arena back). */
	row->lm_mode = SHMT_MODE_GCRA;
	row->lm_limit = g->limit;
	row->lm_window = l->window_ns;
	row->lm_slack = 0;
	row->lm_slack_uses = 0;
	row->lm_nbuckets = g->nb;
	row->lm_burst = l->burst;
	row->lm_flags = l->shadow ? SHMT_LIMF_SHADOW : 0;
	row->lm_storage = 0;
	memset(&row->lm_p, 0, sizeof(row->lm_p));
	s[0] = tat;
	s[1] = 0;
	shmt__store128(&row->lm_w, s);
	row->lm_exact_grants = granted;
	if ((rc = row_check(t, r, row, &vn, vo->name, err, cap)) != 0)
		return rc;
	__atomic_fetch_add(&t->hdr->sh_generation, 1, __ATOMIC_RELEASE);
	return 0;
}

/* ---- One limiter ------------------------------------------------------------ */

static int
redefine_one(shmt_t *t, const char *name, const shmt_limit_t *l, char *err,
    size_t cap)
{
	struct shmt_hdr *hdr = t->hdr;
	uint64_t size = t->reg[SHMT_R_ARENA].rg_size, used, cl_off, ov_off;
	uint64_t end, now, hold = 0, until = 0, start, old_end;
	void *copy = NULL;
	char *arena = shmt__region(t, SHMT_R_ARENA);
	struct shmt_lview vo, vn;
	struct lim_geom g;
	struct shmt_lim *lim;
	char why[256];
	uint32_t n, r;
	size_t len;
	int rc;

	if (l == NULL || shmt__lim_name_check(name, &len) != 0)
		return shmt__bad(err, cap, -EINVAL, "a limiter to define anew "
		    "needs a name and a definition");
	lim = shmt__rows(t, &n);
	if ((r = shmt__row_named(lim, n, name)) == n)
		return shmt__bad(err, cap, -ENOENT, "no limiter %s", name);
	if ((rc = shmt__view_fill(t, r, &lim[r], &vo)) != 0)
		return shmt__bad(err, cap, rc, "limiter %s: %s", name,
		    shmt_strerror(rc));
	if ((rc = redef_check(&vo, l, err, cap)) != 0)
		return rc;
	if ((vo.flags & SHMT_LIMF_KEYS) && l->nkeys == 0 && l->keys == NULL &&
	    l->uses_per_key != 0)
		return redefine_pool_names(t, &lim[r], r, &vo, l, err, cap);
	if ((rc = shmt__limit_check(l, &g, why, sizeof(why))) != 0)
		return shmt__bad(err, cap, rc, "limiter %s: %s", name, why);
	if (vo.flags & SHMT_LIMF_KEYS)
		return redefine_pool(t, &lim[r], r, &vo, l, &g, err, cap);
	if (!(vo.flags & SHMT_LIMF_PER_CLIENT) && l->mode == SHMT_MODE_GCRA)
		return redefine_to_rate(t, &lim[r], r, &vo, l, &g, err, cap);
	if (vo.mode == SHMT_MODE_EXACT)
		return redefine_exact(t, &lim[r], r, &vo, l, &g, err, cap);
	used = __atomic_load_n(&hdr->sh_arena_used, __ATOMIC_RELAXED);
	if (used > size)
		return shmt__bad(err, cap, SHMT_ECORRUPT, "the arena's fill level "
		    "is past its end");
	/* The old storage, [start, old_end), copied aside: the new one may
	 * take its place. */
	old_end = lim[r].lm_ov_off + (uint64_t)vo.ovcap *
	    sizeof(struct shmt_override);
	if ((rc = old_storage(t, used, &lim[r], lim[r].lm_clients_off, old_end,
	    name, &start, &copy, err, cap)) != 0)
		return rc;
	vo.clients = (char *)copy + (lim[r].lm_clients_off - start);
	vo.ov = (struct shmt_override *)(void *)((char *)copy +
	    (lim[r].lm_ov_off - start));
	/* Over the old storage when it fits there, or when the old storage
	 * is the arena's last (it grows into the free part); else after the
	 * arena's used part. */
	cl_off = shmt__align_up(start, SHMT_LINE);
	ov_off = shmt__align_up(cl_off + g.clients_bytes, SHMT_LINE);
	end = ov_off + g.ov_bytes;
	if (end < old_end && old_end - g.ov_bytes >= ov_off) {
		/* The override table ends where the old storage did, so that
		 * the row keeps all of it for its next change. */
		ov_off = (old_end - g.ov_bytes) & ~(uint64_t)(SHMT_LINE - 1);
		end = ov_off + g.ov_bytes;
	}
	if (end > old_end && (old_end != used || end > size)) {
		start = used;
		cl_off = shmt__align_up(used, SHMT_LINE);
		ov_off = shmt__align_up(cl_off + g.clients_bytes, SHMT_LINE);
		end = ov_off + g.ov_bytes;
	}
	if (end > size || end < start) {
		rc = shmt__bad(err, cap, -ENOSPC, "limiter %s: its new "
		    "definition needs %" PRIu64 " arena bytes, %" PRIu64 " are "
		    "free: move to a larger arena first (shmthrottle resize "
		    "arena=...)", name, end - start, size - used);
		goto out;
	}
	memset(arena + cl_off, 0, end - cl_off);
	lim[r].lm_limit = g.limit;
	lim[r].lm_window = l->window_ns;
	lim[r].lm_slack = l->mode == SHMT_MODE_BUCKETS ? l->slack_ns : 0;
	lim[r].lm_slack_uses = l->mode == SHMT_MODE_BUCKETS ? l->slack_uses : 0;
	lim[r].lm_nbuckets = g.nb;
	lim[r].lm_burst = l->burst;
	lim[r].lm_flags = SHMT_LIMF_PER_CLIENT | (l->shadow ? SHMT_LIMF_SHADOW :
	    0);
	lim[r].lm_capacity = l->client_capacity;
	lim[r].lm_entsize = g.entsize;
	lim[r].lm_ring_off = cl_off;
	lim[r].lm_keys_off = cl_off;
	lim[r].lm_clients_off = cl_off;
	lim[r].lm_ov_off = ov_off;
	lim[r].lm_ov_cap = g.ovcap;
	lim[r].lm_storage = end - start;
	memset(&lim[r].lm_p, 0, sizeof(lim[r].lm_p));
	shmt__lock_init(&lim[r].lm_client_lock);
	if (end > used)
		__atomic_store_n(&hdr->sh_arena_used, end, __ATOMIC_RELAXED);
	if ((rc = row_check(t, r, &lim[r], &vn, name, err, cap)) != 0)
		goto out;
	if ((rc = carry_overrides(&vo, &vn, err, cap)) != 0)
		goto out;
	now = shmt__now(t);
	if ((rc = carry_clients(&vo, &vn, l, now, &hold, &until, err,
	    cap)) != 0)
		goto out;
	if (hold > l->window_ns && until != 0) {
		lim[r].lm_p[0].lp_hold_window = hold;
		lim[r].lm_p[0].lp_slack = until;
	}
	__atomic_fetch_add(&hdr->sh_generation, 1, __ATOMIC_RELEASE);
out:
	free(copy);
	return rc;
}

int
shmt__redefine_apply(shmt_t *t, const struct shmt__redef *defs, size_t ndefs,
    char *err, size_t cap)
{
	for (size_t i = 0; i < ndefs; i++) {
		int rc;

		for (size_t j = 0; j < i; j++)
			if (defs[i].name != NULL && defs[j].name != NULL &&
			    strcmp(defs[i].name, defs[j].name) == 0)
				return shmt__bad(err, cap, -EINVAL, "limiter %s is "
				    "named twice", defs[i].name);
		if ((rc = redefine_one(t, defs[i].name, defs[i].limit, err,
		    cap)) != 0)
			return rc;
	}
	return 0;
}
