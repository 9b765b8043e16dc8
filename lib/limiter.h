/* This file is private to libshmthrottle: limiter rows and their state words. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_LIMITER_H
#define SHMT_LIMITER_H

#include "global.h"
#include "segment.h"

#include <stdalign.h>
#include <stdint.h>

enum shmt_lim_state {
	SHMT_LIM_FREE = 0,     /* row never used, or reclaimed by repair */
	SHMT_LIM_BUILDING = 1, /* being defined under sh_table_lock */
	SHMT_LIM_READY = 2,    /* defined; identity fields never change again */
	SHMT_LIM_DELETED = 3   /* deleted: never used again, nor its storage */
};

#define SHMT_LIMF_PER_CLIENT 0x1U
#define SHMT_LIMF_KEYS 0x2U
#define SHMT_LIMF_SHADOW 0x4U
#define SHMT_LIMF_GLOBAL 0x8U   /* leases from Redis: lm_g, global.c */

/*
 * The state word W of a ring of buckets (one per limiter, one per client
 * entry), 16 bytes, changed only by a 16-byte CAS:
 *
 *   w[0] = inflight:32 | count:32
 *   w[1] = tail:32 | nsealed:15 | active:1 | tag:16
 *
 * inflight  uses held: every sealed bucket's count plus the active count.
 * count     uses in the active bucket (0 when none is active).
 * tail      serial of the active bucket (when active), or of the next one
 *           to open; sealed buckets are serials tail-nsealed .. tail-1.
 *           Bucket serial s lives in ring slot s % nbuckets.
 * nsealed   sealed buckets not yet released.
 * active    1 while bucket `tail` takes uses.
 * tag       key pools: the cursor (name index of the next grant, mod nkeys).
 *           Client entries: state:2 | epoch:14 (see clients.h).
 *           A shared limiter without keys: the parameter generation, which
 *           names the parameters in force (lm_p, see shmt_limiter_update).
 *           Rate mode keeps its arrival time in w[0] and exact mode its
 *           grant hint; in both the rest of w[1] is 0 and its low 16 bits
 *           are that generation (gcra.c, exact.c).
 */
struct shmt_w {
	uint64_t w[2];
};

#define SHMT_W_INFLIGHT(x) ((uint32_t)((x).w[0] >> 32))
#define SHMT_W_COUNT(x) ((uint32_t)(x).w[0])
#define SHMT_W_TAIL(x) ((uint32_t)((x).w[1] >> 32))
#define SHMT_W_NSEALED(x) ((uint32_t)(((x).w[1] >> 17) & 0x7fffU))
#define SHMT_W_ACTIVE(x) ((uint32_t)(((x).w[1] >> 16) & 1U))
#define SHMT_W_TAG(x) ((uint32_t)((x).w[1] & 0xffffU))

static inline struct shmt_w
shmt__w_make(uint32_t inflight, uint32_t count, uint32_t tail,
    uint32_t nsealed, uint32_t active, uint32_t tag)
{
	struct shmt_w x;

	x.w[0] = ((uint64_t)inflight << 32) | count;
	x.w[1] = ((uint64_t)tail << 32) | ((uint64_t)(nsealed & 0x7fffU) << 17) |
	    ((uint64_t)(active & 1U) << 16) | (tag & 0xffffU);
	return x;
}

/*
 * A ring slot, 16 bytes, changed only by a 16-byte CAS:
 *   r[0] = close time (ns)
 *   r[1] = serial:32 | count:32
 * Opening bucket s writes {close, s, 0} unless the slot already holds serial
 * s (first opener wins).  Sealing raises count to the bucket's final count
 * (a monotone max), so a late, stale writer can never lower or raise the
 * final value (see the proof at the top of ring.c).
 */
struct shmt_ring_slot {
	uint64_t r[2];
};

/* Exact mode: record of grant number rs_seq (int64), at time rs_time.
 * Slot n % limit holds the record of the latest grant n that used it. */
struct shmt_log_slot {
	int64_t ls_seq;
	uint64_t ls_time;
};

/* A per-client entry; its bucket ring (nbuckets slots) follows it. */
struct shmt_client {
	uint64_t ce_hash[2];         /* hash:112 | epoch:16 in ce_hash[1] low */
	alignas(16) struct shmt_w ce_w;
	uint64_t ce_last_ns;         /* last grant (for reclaim order) */
	uint32_t ce_idlen;           /* id bytes kept for display */
	uint32_t ce_rule;            /* the client's override (CE_RULE_*,
				      * clients.h), stamped at claim and at
				      * every change, under the epoch in ce_w */
	uint8_t ce_id[16];           /* first bytes of the client id */
};
_Static_assert(sizeof(struct shmt_client) == 64, "client entry is one line");

/*
 * One override of a per-client limiter (clients.c), in the arena after the
 * client table.  ov_rule (CE_RULE_*) is 0 while the entry is free; a new
 * override fills hash and id first, then publishes with one store of
 * ov_rule; a change or a clear is one store of ov_rule.  All under the
 * limiter's client lock, so a kill -9 leaves the old rule or the new.
 */
struct shmt_override {
	uint64_t ov_hash[2];         /* the client's hash (shmt__client_hash) */
	uint32_t ov_rule;
	uint32_t ov_idlen;           /* 1..SHMT_OVERRIDE_ID_MAX */
	uint8_t ov_id[104];          /* the client id, whole */
};
_Static_assert(sizeof(struct shmt_override) == 128, "an override is 128 bytes");

/*
 * Parameters of a shared limiter without keys changed in place (generation
 * lp_gen, 1..65535; generation 0 is the row's identity fields).  Written
 * under sh_table_lock before the CAS that puts lp_gen into W's tag, and
 * rewritten only for generation lp_gen + 2, after W has left lp_gen.
 * Buckets mode uses every field (update.c); rate mode lp_limit, lp_window
 * and lp_burst (gcra.c); exact mode lp_limit (at most the log's length,
 * lm_limit), lp_window, and lp_hold_window for the records of grants
 * numbered below lp_hold_seq (exact.c).
 */
struct shmt_lparams {
	uint64_t lp_limit;
	uint64_t lp_window;
	union {
		uint64_t lp_slack;   /* buckets mode */
		uint64_t lp_burst;   /* rate mode */
		int64_t lp_hold_seq; /* exact mode */
	};
	uint64_t lp_hold_window;     /* buckets before lp_hold_serial (exact
				      * mode: records of grants before
				      * lp_hold_seq) cool for
				      * max(lp_window, this) */
	uint32_t lp_slack_uses;
	uint32_t lp_hold_serial;
	uint32_t lp_gen;
	uint32_t lp_limit_cap;       /* most uses W may hold in flight */
	uint32_t lp_uses_cap;        /* most uses a sealed bucket may hold */
	uint32_t lp_pad;
};
_Static_assert(sizeof(struct shmt_lparams) == 56, "two fit in a line");

struct shmt_lim {
	/* Identity: written while BUILDING, read-only once READY. */
	uint32_t lm_state;
	uint32_t lm_mode;
	uint64_t lm_limit;
	uint64_t lm_window;
	uint64_t lm_slack;
	uint64_t lm_slack_uses;
	uint32_t lm_nbuckets;
	uint32_t lm_flags;
	uint32_t lm_nkeys;
	uint32_t lm_uses_per_key;
	uint32_t lm_keystride;       /* bytes per key name record */
	uint32_t lm_keymax;          /* longest key name */
	uint32_t lm_capacity;        /* client entries */
	uint32_t lm_entsize;         /* bytes per client entry incl. its ring */
	uint64_t lm_ring_off;        /* arena offsets */
	uint64_t lm_keys_off;
	uint64_t lm_clients_off;
	uint64_t lm_storage;         /* arena bytes taken */
	uint64_t lm_burst;           /* rate mode: uses that may come at once */
	uint64_t lm_ov_off;          /* per client: the override table */
	uint32_t lm_ov_cap;          /* its entries (struct shmt_override) */
	uint32_t lm_ov_pad;
	char lm_name[SHMT_LIMITER_NAME_MAX + 1];

	/* Serialises claims of per-client entries. */
	alignas(SHMT_LINE) struct shmt_lock lm_client_lock;

	/* The state word, alone on its line but for the hand-off word: every
	 * grant CASes it.  lm_handoff is a process's request to have the word
	 * to itself for a while (see "Contention" in ring.c): advisory, it
	 * changes how long a call waits, never what it decides; 0 when none.
	 * On W's line, so the winner of each CAS reads it for free. */
	alignas(SHMT_LINE) struct shmt_w lm_w;
	uint64_t lm_handoff;

	/* Counters, on their own line: written on denials and releases only,
	 * so a grant costs no extra atomic (grants = released + in flight;
	 * exact mode: its grant number; rate mode: the count in W plus
	 * lm_exact_grants, gcra.h; per client in rate mode, lm_exact_grants
	 * alone). */
	alignas(SHMT_LINE) uint64_t lm_released_uses;
	uint64_t lm_denied_exhausted;
	uint64_t lm_denied_slack;
	uint64_t lm_denied_table_full;
	uint64_t lm_exact_grants;    /* rate mode's grants beside W's count
	                              * (the name is older); unused in the
	                              * others */
	uint64_t lm_denied_ring_full;
	uint64_t lm_would_deny;      /* shadow mode: refusals not enforced */
	uint64_t lm_reset_uses;      /* uses given back by shmt_limiter_reset */
	uint64_t lm_allowed_by_rule; /* grants of allow-listed clients */
	uint64_t lm_denied_by_rule;  /* refusals of deny-listed clients */

	/* Waiters (wait.c): a futex word, bit 0 set while someone may
	 * sleep on it, the rest a count of releases; on its own line. */
	alignas(SHMT_LINE) uint32_t lm_wake;

	/* Parameters changed in place: lm_p[gen & 1] for W's tag gen. */
	alignas(SHMT_LINE) struct shmt_lparams lm_p[2];

	/* Global limiters: the leases this host's daemon holds (global.h). */
	alignas(SHMT_LINE) struct shmt_glease lm_g;
};
_Static_assert(offsetof(struct shmt_lim, lm_w) % 16 == 0, "W is 16-aligned");
_Static_assert(offsetof(struct shmt_lim, lm_handoff) ==
    offsetof(struct shmt_lim, lm_w) + sizeof(struct shmt_w) &&
    offsetof(struct shmt_lim, lm_handoff) / SHMT_LINE ==
    offsetof(struct shmt_lim, lm_w) / SHMT_LINE, "the hand-off word follows W on its line");
_Static_assert(sizeof(struct shmt_lim) % SHMT_LINE == 0, "rows are whole lines");

/* Private API of the limiter module. */
int shmt__limiters_housekeep(shmt_t *h, shmt_time_t now, shmt_time_t *next);
/* Shift every stored time (bucket close times, log times, client last-use
 * times) by DELTA_NS.  Only for a segment nobody else uses: a restored
 * snapshot, before it is published. */
int shmt__rebase_times(shmt_t *h, int64_t delta_ns);
void shmt__lviews_free(shmt_t *h);
/* The 128-bit keyed hash of client id [ID, ID + LEN) in H's segment, as
 * the per-client table stores it (out[0] never 0, out[1]'s low 16 bits 0). */
void shmt__client_hash(const shmt_t *h, const void *id, size_t len,
    uint64_t out[2]);

/* The home entry of HASH in a per-client table of CAP entries: a client
 * lives within 64 entries after it (tests that aim ids use it too). */
static inline uint32_t
shmt__client_home(const uint64_t hash[2], uint32_t cap)
{
	return (uint32_t)(hash[0] % cap);
}

#endif /* SHMT_LIMITER_H */
