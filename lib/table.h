/* This file is private to libshmthrottle: views of limiter rows and finding one by name. */
/* SPDX-License-Identifier: MIT */
/*
 * A process reads a limiter row through a view: a validated, process-local
 * copy of the row's identity with pointers into its own mapping (table.c
 * builds them).  Finding a view by name is on every call's path, so its
 * first step (the thread's last limiter) is inline here; the process-local
 * name cache and the scan of the table are behind shmt__lim_lookup().
 */
#ifndef SHMT_TABLE_H
#define SHMT_TABLE_H

#include "fork.h"
#include "limiter.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A CAS fails only when another succeeds; a million failures in one call
 * means the segment is damaged or a peer is pathological. */
#define SHMT_RETRY_MAX (1U << 20)

enum { WHY_NONE, WHY_EXHAUSTED, WHY_SLACK, WHY_RING_FULL, WHY_TABLE_FULL,
	WHY_SHADOW, WHY_RULE };

/*
 * A validated, process-local copy of a READY row's identity, with pointers
 * into this process's mapping.  The identity never changes once READY;
 * the parameters of a shared limiter without keys may (shmt_limiter_update), so
 * the view records the generation it was built for (pgen), and a view
 * found stale is never rewritten (other threads may be reading it): a new
 * one is chained after it (lv_next) and kept until the handle closes.
 * A view already on the chain with the same generation and the same
 * parameters is used again instead of chaining another, so a word whose
 * tag goes back and forth between generations (a hostile writer) costs no
 * memory; and the row's first view keeps the one last found in force
 * (lv_tail), which lookups take without walking the chain (the chain's
 * last view is not always it: the tag may have gone back to an older one).
 */
struct shmt_lview {
	uint32_t lv_state;            /* 0 empty, 1 filling, 2 ready */
	uint32_t lv_row;
	struct shmt_lview *lv_next;   /* a newer view of the same row */
	struct shmt_lview *lv_tail;   /* the row's first view only: the
				       * one last found in force (a hint;
				       * NULL: none yet) */
	uint32_t pgen;                /* W's tag this view is valid for */
	uint32_t pgen_check;          /* 1: shared, without keys (the
				       * parameters may change in place) */
	uint32_t hold_serial;
	union {
		uint32_t uses_cap;    /* buckets mode */
		uint32_t nlog;        /* exact mode: the log's length */
	};
	uint64_t hold_window;
	uint64_t hold_until;          /* per client: see bk_due_of (ring.h) */
	union {
		uint64_t limit_cap;   /* buckets mode */
		int64_t hold_seq;     /* exact mode: see struct shmt_lparams */
	};
	struct shmt_lim *lim;
	uint64_t limit, window, slack, slack_uses;
	uint32_t mode, flags, nb, nkeys, keystride, keymax, capacity, entsize;
	uint32_t uses_per_key;
	uint64_t burst;               /* rate mode */
	uint64_t rate_t, rate_d;      /* rate mode: window / limit and
				       * rate_t * burst (view_fill), so that
				       * a grant divides nothing */
	uint64_t nb_magic;            /* for slot_of, see there */
	struct shmt_ring_slot *ring;  /* buckets mode */
	struct shmt_log_slot *log;    /* exact mode */
	const char *keys;
	char *clients;
	struct shmt_override *ov;     /* per client: the override table */
	uint32_t ovcap;               /* its entries */
	char name[SHMT_LIMITER_NAME_MAX + 1];
};

static inline uint64_t
sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static inline uint64_t
div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

struct lim_geom {
	uint64_t limit;
	uint32_t nb, keystride, keymax, entsize, ovcap;
	uint64_t ring_bytes, keys_bytes, clients_bytes, ov_bytes;
};

/* The limiter this thread used last, per handle: a ready view never
 * changes and lives as long as its handle (whose uid is never reused), so
 * a name equal to the view's is the whole check (table.c).  Initial-exec
 * TLS, as liburcu-bp's pointer (rcu.h): a named grant reads it, and in the
 * shared library the local-dynamic model cost a __tls_get_addr call there
 * (about 4 ns of a 55 ns grant); its 16 bytes come from the static TLS
 * block, or from glibc's surplus for a dlopen (Python). */
struct shmt_lim_last {
	uint32_t uid;
	const struct shmt_lview *v;
};
extern __thread struct shmt_lim_last shmt__lim_last
    __attribute__((visibility("hidden"), tls_model("initial-exec")));

/* The one set of rules for limiter parameters (shmt_limit_check): fills G
 * with the geometry, or returns -EINVAL with WHY (may be NULL) naming the
 * field and the rule. */
int shmt__limit_check(const shmt_limit_t *l, struct lim_geom *g, char *why,
    size_t why_len);

/* A limiter name: *LENP gets its length; -EINVAL when NULL or empty,
 * -ENAMETOOLONG past SHMT_LIMITER_NAME_MAX bytes. */
int shmt__lim_name_check(const char *name, size_t *lenp);

/* The limiter rows of H's segment; *N gets their number. */
struct shmt_lim *shmt__rows(const shmt_t *h, uint32_t *n);
/* The index of the READY row named NAME among the N rows at LIM (under the
 * table lock, or racy), or N when there is none. */
uint32_t shmt__row_named(const struct shmt_lim *lim, uint32_t n,
    const char *name);

/* Fill V from row R, checking every field and offset.  SHMT_ECORRUPT when
 * the row is inconsistent, -ENOENT when it is not READY. */
int shmt__view_fill(const shmt_t *h, uint32_t r, struct shmt_lim *lim,
    struct shmt_lview *v);

/* The view of row R, filled on first use.  Threads race to fill it; the
 * winner of the 0 -> 1 CAS fills and publishes with a release store, the
 * others fill a copy of their own in SCRATCH. */
int shmt__view_get(shmt_t *h, uint32_t r, struct shmt_lview *scratch,
    const struct shmt_lview **out);

/* The slow part of lim_find (table.h): the process-local cache (a hint,
 * confirmed by the view's name), then a scan of the table. */
int shmt__lim_lookup(shmt_t *h, const char *name, struct shmt_lview *scratch,
    const struct shmt_lview **out);

/*
 * V was found stale (W's tag names other parameters): *VP gets a view of
 * the parameters in force, chained after the row's views so that later
 * calls find it.  Returns 0, or an error (-ENOENT: the row is gone).
 */
__attribute__((noinline, cold)) int shmt__view_renew(shmt_t *h,
    const struct shmt_lview **vp);

/* *VP, renewed if its parameters changed since it was built (readers that
 * make no CAS, which would find out by failing it). */
int shmt__view_fresh(shmt_t *h, const struct shmt_lview **vp);

/* The checks of a call that returns a key name of V into BUF (CAP bytes):
 * 0, -EINVAL, -EPERM (per client), -ENOKEY (no key pool) or -ERANGE. */
int shmt__keys_check(const struct shmt_lview *v, const char *buf, size_t cap);

/* Copy key CURSOR of V into BUF (keymax + 1 bytes): its length, or
 * SHMT_ECORRUPT.  The copy comes first, then its measure: a name in a
 * damaged segment may change under the reader, and the length returned
 * must be that of the bytes returned. */
int shmt__key_copy(const struct shmt_lview *v, uint64_t cursor, char *buf);

/* Count a refusal for reason WHY (WHY_*) in the row's counters; a shadow
 * limiter counts it as a refusal it did not enforce. */
void shmt__count_denial(struct shmt_lim *lim, int why);

/* Rows left BUILDING by a definer that died holding the table lock go back
 * to FREE; the arena space they took is not reused (it is bounded by the
 * arena, and reusing it would need the dead definer's intent). */
void shmt__rows_repair(shmt_t *h);

/* Define NAME (LEN bytes) with L, checked into G, under the table lock:
 * 0 when defined, or when it exists with exactly these parameters;
 * -EEXIST with others; -ENOSPC when no row or arena space is left;
 * SHMT_ECORRUPT on a damaged row. */
int shmt__define_locked(shmt_t *h, const char *name, size_t len,
    const shmt_limit_t *l, const struct lim_geom *g);

/* The view to use for V's row: for the row's first view, the one last
 * found in force when there is one; else the newest chained after V.
 * (Callers check it against the word's tag and renew it when it is not.) */
static inline const struct shmt_lview *
view_latest(const struct shmt_lview *v)
{
	const struct shmt_lview *n = __atomic_load_n(&v->lv_tail,
	    __ATOMIC_ACQUIRE);

	if (n != NULL)
		return n;
	while ((n = __atomic_load_n(&v->lv_next, __ATOMIC_ACQUIRE)) != NULL)
		v = n;
	return v;
}

/* The view's row is still defined (shmt_limiter_delete): one load of a
 * line that is written only when the row is defined or deleted. */
static inline int
row_live(const struct shmt_lview *v)
{
	return __atomic_load_n(&v->lim->lm_state, __ATOMIC_RELAXED) ==
	    SHMT_LIM_READY;
}

/* NAME equals the view's name (NUL-terminated within its buffer).  The
 * C library's strcmp compares a word or a vector at a time without reading
 * past a page that holds neither string's end, so a long name costs about
 * what a short one does (a byte loop cost 5 instructions a byte). */
static inline int
name_is(const char *vname, const char *name)
{
	return strcmp(vname, name) == 0;
}

/* Find limiter NAME: the thread's last one here, inline, then the
 * process-local cache and the table (shmt__lim_lookup). */
static inline int
lim_find(shmt_t *h, const char *name, struct shmt_lview *scratch,
    const struct shmt_lview **out)
{
	if (h == NULL)
		return -EINVAL;
	SHMT_FORK_CHECK(h);
	if (shmt__lim_last.uid == h->uid && name != NULL &&
	    name_is(shmt__lim_last.v->name, name) &&
	    __builtin_expect(row_live(shmt__lim_last.v), 1)) {
		*out = view_latest(shmt__lim_last.v);
		return 0;
	}
	return shmt__lim_lookup(h, name, scratch, out);
}

/* What a call returns for decision RC: in shadow mode a refusal is granted
 * all the same (nothing was recorded; shmt__count_denial counted it as
 * such). */
static inline int
enforce(const struct shmt_lview *v, int rc)
{
	return rc == 0 && (v->flags & SHMT_LIMF_SHADOW) ? 1 : rc;
}

#endif /* SHMT_TABLE_H */
