/* This file is private to libshmthrottle: the segment's layout and the handle. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_SEGMENT_H
#define SHMT_SEGMENT_H

#include "shmthrottle.h"

#include "env.h"
#include "hash.h"
#include "lock.h"
#include "proc.h"
#include "util.h"

#include <limits.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <time.h>

/*
 * The segment is a file format: it is read by processes built from other
 * versions of this code, mapped at any address, and may be damaged.  So:
 * no pointers inside, only offsets; a layout word (sh_format) that folds the
 * ABI version and the size and alignment of every shared type; and every
 * offset checked before use.  Members of shared structs carry a prefix per
 * struct (sh_, rg_, sl_, lm_, ...) so one grep finds every access.
 */

#define SHMT_MAGIC 0x31544d4854524853ULL /* "SHRTHMT1" little-endian */
#define SHMT_ABI_VERSION 10U

/* Hot shared words are padded to 128 bytes: x86 prefetches adjacent lines
 * in pairs, so 64-byte padding still lets two writers fight. */
#define SHMT_LINE 128
#define SHMT_PAGE 4096

enum shmt_region_id {
	SHMT_R_HEADER = 0,
	SHMT_R_SLOTS,
	SHMT_R_LIMITERS,
	SHMT_R_ARENA,
	SHMT_R_DICT,
	SHMT_R_COUNTERS,
	SHMT_R_ANALYZER,
	SHMT_R_COUNT
};

struct shmt_region {
	uint64_t rg_off;
	uint64_t rg_size;
};

/* Creation parameters, as stored in the segment. */
struct shmt_params {
	uint32_t sp_max_limiters;
	uint32_t sp_max_slots;
	uint64_t sp_arena_bytes;
	uint32_t sp_mode;
	uint32_t sp_gid;
	uint64_t sp_dict_bytes;
	uint32_t sp_dict_shards;
	uint32_t sp_dict_eviction;
	uint64_t sp_counters_bytes;
	uint32_t sp_counters_shards;
	uint32_t sp_counters_subwindows;
	uint64_t sp_counters_window_ns;
	uint64_t sp_analyzer_bytes;
	uint64_t sp_analyzer_window_ns;
	uint32_t sp_analyzer_subwindows;
	uint32_t sp_analyzer_threshold_ppm;
	uint32_t sp_analyzer_clients;
	uint32_t sp_dict_max_key;       /* 1..SHMT_KEY_MAX */
	uint32_t sp_dict_max_value;     /* 0..SHMT_VALUE_MAX */
	uint32_t sp_counters_error_ppm; /* 1000..500000 */
	uint64_t sp_dict_default_ttl_ms; /* 0: items without a TTL never expire */
};

struct shmt_hdr {
	/* Identity: written once before the segment is published. */
	uint64_t sh_magic;
	uint64_t sh_format;
	uint64_t sh_size;
	uint32_t sh_abi;
	uint32_t sh_nregions;
	struct shmt_region sh_regions[SHMT_REGIONS_MAX];
	struct shmt_params sh_params;
	uint64_t sh_created_wall_ns;
	uint64_t sh_created_mono_ns;
	/* The key of every hash an outsider can feed (hash.h): random bytes
	 * from getrandom() at creation, or the snapshot's own on a restore
	 * (its stored hashes stay valid).  Read once per handle, at open. */
	uint8_t sh_secret[SHMT_SECRET_BYTES];
	/* The creator's PID and time namespaces (device and inode of
	 * /proc/self/ns/pid and ns/time; 0 when /proc could not tell).  Slots
	 * name processes by pid and the segment keeps CLOCK_MONOTONIC times,
	 * so a process in another namespace is refused at open
	 * (SHMT_ENAMESPACE) instead of corrupting slots and windows. */
	uint64_t sh_pidns_dev;
	uint64_t sh_pidns_ino;
	uint64_t sh_timens_dev;
	uint64_t sh_timens_ino;
	/* The generation's state (SHMT_SEG_*): LIVE (0); RETIRED for good
	 * once the segment's name is removed by shmt_unlink() (or by the
	 * daemon, when it finds its object unlinked by hand): every handle
	 * then answers SHMT_ESTALE instead of enforcing limits no new process
	 * can see; FROZEN while a move copies it into a new generation (move.c;
	 * back to LIVE when the move is undone); MOVED for good once the new
	 * generation owns the name.  Any value but LIVE means: take no write
	 * here.  Read on every call, written at most a few times: it shares
	 * the read-mostly identity lines.
	 * Beside it, in one aligned 8-byte word (sh_genword), the number of
	 * the last freeze: every change of the state is a CAS of the whole
	 * word, so one that expects the freeze it looked at (undoing or
	 * finishing a dead mover's move) fails once another move froze the
	 * segment since (move.c). */
	union {
		struct {
			uint32_t sh_retired;
			uint32_t sh_move_seq;
		};
		uint64_t sh_genword;
	};

	/* The daemon: its own line, written on every heartbeat. */
	alignas(SHMT_LINE) int64_t sh_daemon_pid;
	uint64_t sh_daemon_start;     /* start time of that pid (clock ticks) */
	uint64_t sh_heartbeat_ns;
	uint64_t sh_lag_ns;
	uint64_t sh_hk_runs;
	uint64_t sh_reaped;
	/* The process moving this generation into a new one (move.c): its
	 * pid and start time, written before the freeze, so that anyone who
	 * finds the segment FROZEN can tell a live mover from a dead one. */
	int64_t sh_mover_pid;
	uint64_t sh_mover_start;

	/* The limiter table: rarely written. */
	alignas(SHMT_LINE) struct shmt_lock sh_table_lock;
	uint64_t sh_generation;       /* bumped on every define */
	uint64_t sh_arena_used;       /* bump allocator over SHMT_R_ARENA */
	uint32_t sh_nlimiters;        /* rows ever used (high-water mark) */
	uint32_t sh_pad0;
};

_Static_assert(sizeof(struct shmt_hdr) <= SHMT_PAGE, "header fits a page");
_Static_assert(offsetof(struct shmt_hdr, sh_mover_start) + 8 <=
    offsetof(struct shmt_hdr, sh_table_lock), "the mover fits the daemon's line");

/* Values of sh_retired. */
enum { SHMT_SEG_LIVE = 0, SHMT_SEG_RETIRED = 1, SHMT_SEG_FROZEN = 2,
	SHMT_SEG_MOVED = 3 };
_Static_assert(offsetof(struct shmt_hdr, sh_genword) % 8 == 0 &&
    offsetof(struct shmt_hdr, sh_retired) ==
    offsetof(struct shmt_hdr, sh_genword), "the state word is the low half");

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
    "sh_retired is the low half of sh_genword");

/* The state word with its freeze number (little-endian: sh_retired is the
 * low half). */
static inline uint64_t
shmt__genword(uint32_t state, uint32_t seq)
{
	return (uint64_t)seq << 32 | state;
}

static inline uint64_t
shmt__genword_load(const struct shmt_hdr *hdr)
{
	return __atomic_load_n(&hdr->sh_genword, __ATOMIC_SEQ_CST);
}

/* CAS HDR's state word from exactly *EXPECT (state and freeze number) to
 * (STATE, SEQ): 1 done; 0 not, with *EXPECT the word found. */
static inline int
shmt__genword_cas(struct shmt_hdr *hdr, uint64_t *expect, uint32_t state,
    uint32_t seq)
{
	return __atomic_compare_exchange_n(&hdr->sh_genword, expect,
	    shmt__genword(state, seq), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* From LIVE (whatever its freeze number) to STATE, keeping the number: 1
 * done, 0 the segment was not LIVE. */
static inline int
shmt__genword_from_live(struct shmt_hdr *hdr, uint32_t state)
{
	uint64_t w = shmt__genword_load(hdr);

	while ((uint32_t)w == SHMT_SEG_LIVE)
		if (shmt__genword_cas(hdr, &w, state, (uint32_t)(w >> 32)))
			return 1;
	return 0;
}
_Static_assert(sizeof(uint64_t) == 8 && sizeof(int) == 4, "LP64 please");
_Static_assert(-1 == ~0, "two's complement please");

/* One slot per attached process. sl_pid is claimed by CAS from 0, with
 * its top bit set until the claimer has stored sl_start (slots.c). */
struct shmt_slot {
	uint32_t sl_pid;
	uint32_t sl_pad;
	uint64_t sl_start;            /* /proc start time of sl_pid, 0 if unknown */
	uint64_t sl_attached_ns;
	uint64_t sl_pad2[5];
};
_Static_assert(sizeof(struct shmt_slot) == 64, "slot is one line");

/* The process-local cache of limiter name -> row.  An entry is only a hint:
 * a hit is confirmed against the row's name and state in the segment, so a
 * stale entry costs a miss, never a wrong answer.  That is why a plain array
 * of atomic words serves here, without RCU. */
#define SHMT_LCACHE_SIZE 256
struct shmt_lcache {
	uint64_t lc_ent[SHMT_LCACHE_SIZE]; /* (hash32 << 32) | (row + 1) */
};

struct shmt_lview;
struct shmt_store;
struct shmt_an;

struct shmt {
	char *base;                   /* this process's mapping */
	uint64_t size;
	struct shmt_hdr *hdr;
	/* Region table, validated at open and never re-read from the segment. */
	struct shmt_region reg[SHMT_R_COUNT];
	shmt_clock_fn clock;
	void *clock_ctx;
	/* shmt_set_sleep_hooks: called around a sleep inside a call. */
	shmt_sleep_fn sleep_before, sleep_after;
	void *sleep_ctx;
	uint32_t slot;                /* UINT32_MAX: none */
	int fd;                       /* the object, kept to notice truncation */
	pid_t pid;
	char name[SHMT_SEGNAME_MAX + 1];
	/* The segment's secret, copied from the validated header at open. */
	struct shmt_hkey key;
	struct shmt_lcache lcache;
	/* Validated process-local copies of limiter rows (table.c). */
	struct shmt_lview *lviews;   /* one per limiter row */
	/* Trusted geometry of the dictionary and the counters (dict.c);
	 * shards == 0 when the segment has none. */
	struct shmt_store *dict;
	struct shmt_store *counters;
	/* Trusted geometry of the analyzer (analyzer.c); NULL: none. */
	struct shmt_an *an;
	uint32_t uid;                 /* tells handles apart in stripe owners */
	/* The owner the caller trusted at open (shmt_open_opts' owner,
	 * (uid_t)-1: none), trusted again when a move is followed (fork.c). */
	uid_t owner;
	unsigned fork_gen;            /* fork generation attached in (fork.c) */
	/* The handle of the generation this one's segment moved to, opened
	 * by the first call that found it MOVED (fork.c); NULL until then.
	 * Written once, under fork.c's mutex; a call follows the chain to its
	 * end (shmt__gen_live).  A handle the library opened itself to follow
	 * a move (gen_owned) and never handed out (gen_pinned) is unmapped
	 * once its next one is linked and a grace period has passed (rcu.h;
	 * gen_reclaimed from then on); the others stay mapped until
	 * shmt_close() of the first. */
	struct shmt *gen_next;
	unsigned char gen_owned;
	unsigned char gen_pinned;     /* under fork.c's mutex */
	unsigned char gen_reclaimed;  /* under fork.c's mutex */
	/* When the next look at the object's name is due (CLOCK_MONOTONIC_
	 * COARSE ns; shmt__name_look): relaxed, the thread that moves it on
	 * with a CAS looks. */
	uint64_t name_next;
};

/* The handle of the newest generation H is known to have moved to (H
 * itself before any move): one load of H's own line per call. */
static inline shmt_t *
shmt__gen_live(shmt_t *h)
{
	shmt_t *n;

	if (h == NULL)
		return h;
	while (__builtin_expect((n = __atomic_load_n(&h->gen_next,
	    __ATOMIC_ACQUIRE)) != NULL, 0))
		h = n;
	return h;
}

/* Private API of the segment module. */
int shmt__name_check(const char *name);
uint64_t shmt__format_word(void);
/* 1 when GID is the caller's effective group or one of its supplementary
 * groups, else 0 (also when the groups cannot be read). */
int shmt__in_group(gid_t gid);
/* Read the header of the object FD of SIZE bytes once into *HC (private
 * memory) and validate it, filling REG: 0 or the error shmt_open gives. */
int shmt__header_read(int fd, uint64_t size, struct shmt_hdr *hc,
    struct shmt_region reg[SHMT_R_COUNT]);
/* Give the segment of H (not yet published under its final name) the
 * secret KEY and load it into H: a snapshot restore keeps the snapshot's
 * secret so that the hashes it stores stay valid. */
void shmt__secret_set(shmt_t *h, const uint8_t key[SHMT_SECRET_BYTES]);
/* SHMT_ESIZE when the object is now shorter than the mapping (truncated:
 * touching the missing pages would raise SIGBUS), else 0; *NOW_SIZE gets
 * its size. */
int shmt__size_check(shmt_t *h, uint64_t *now_size);
/* Mark H's segment retired (sh_retired): every handle on it answers
 * SHMT_ESTALE from its next call. */
void shmt__retire(shmt_t *h);
/* SHMT_ESTALE when H's segment is retired, or when its object has no name
 * left (st_nlink 0: removed by hand, with rm or shm_unlink), which marks it
 * retired; else 0.  One fstat(2). */
int shmt__gone_check(shmt_t *h);

/*
 * A segment removed or replaced by hand (rm, shm_unlink, a new segment
 * created under its name) writes nothing into the old mapping, so its
 * processes look at the name now and then: every SHMT_NAME_TICKS-th call
 * of a thread (one increment of a thread-local counter) reads the coarse
 * clock, and at most once per SHMT_NAME_PACE_NS per handle one of them
 * runs shmt__gone_check (one fstat(2)).  A segment found without a name
 * is retired, and every call on it answers SHMT_ESTALE from then on.  So
 * a worker stops using a removed segment within SHMT_NAME_PACE_NS plus
 * SHMT_NAME_TICKS of its calls (plus a clock tick, 1-4 ms) of the removal,
 * whether or not a daemon runs.
 */
#define SHMT_NAME_TICKS 64U
#define SHMT_NAME_PACE_NS 1000000000ULL
extern __thread unsigned shmt__name_tick
    __attribute__((tls_model("initial-exec")));
void shmt__name_look(shmt_t *h);

static inline void
shmt__name_paced(shmt_t *h)
{
	if (__builtin_expect((++shmt__name_tick & (SHMT_NAME_TICKS - 1)) == 0,
	    0) && h != NULL)
		shmt__name_look(h);
}

/* The generation's state word (sh_retired), read with the ordering the
 * freeze needs (move.c): after a lock's acquisition or a grant's CAS, both
 * locked instructions, so on x86-64 this is a plain load. */
static inline uint32_t
shmt__frozen_load(const shmt_t *h)
{
	return __atomic_load_n(&h->hdr->sh_retired, __ATOMIC_SEQ_CST);
}
/* H's segment is not LIVE: wait (bounded, SHMT_MOVE_WAIT_NS) while it is
 * FROZEN by a live mover, finish or undo the move of a dead one.  Returns
 * 0 when it is LIVE again (the call goes on here), SHMT_ESTALE when it
 * was MOVED or RETIRED, -EAGAIN when still frozen at the bound (move.c). */
int shmt__frozen_wait(shmt_t *h);
/* shmt_open_opts, whose waits for a move's outcome are hooked as HK's
 * (shmt_set_sleep_hooks; NULL: none): a handle following its segment's
 * move opens the next generation with it (fork.c). */
int shmt__open_hooked(const char *name, const shmt_open_opts_t *opts,
    const shmt_t *hk, shmt_t **out);

/* Pointer to a region, already validated at open. */
static inline void *
shmt__region(const shmt_t *h, enum shmt_region_id id)
{
	return h->base + h->reg[id].rg_off;
}

/* True when [off, off + len) lies inside region ID. */
static inline int
shmt__in_region(const shmt_t *h, enum shmt_region_id id, uint64_t off,
    uint64_t len)
{
	uint64_t size = h->reg[id].rg_size;

	return off <= size && len <= size - off;
}

/*
 * The sleep hooks (shmt_set_sleep_hooks), called only where a thread is
 * about to sleep: shmt__sleep_begin right before, shmt__sleep_end with
 * what it returned right after.  A hook may hand a runtime's lock (an
 * interpreter's) to another thread, and this thread needs it back to
 * return; so no hook may run while this thread holds anything that
 * thread could wait for:
 *  - a lock private to this process (fork.c's, a resolved limiter's): the
 *    holder raises shmt__sleep_quiet while it holds it (and so does a
 *    hooked sleep, so that one nested in it runs no hook);
 *  - its read-side section, while the reclaim worker waits for a grace
 *    period (rcu.c): fork()'s prepare handler waits for that grace period
 *    and so for this thread, and a thread that forks holding the runtime's
 *    lock would wait for ever.  So a hooked sleep counts itself in
 *    shmt__sleep_hooked, and the worker raises shmt__sleep_gate, waits for
 *    the count to fall to 0, and only then waits for the grace period; a
 *    sleep that finds the gate raised runs no hook.  Both sides store,
 *    then load the other's word, sequentially consistent, so one of them
 *    sees the other.
 */
extern __thread unsigned shmt__sleep_quiet
    __attribute__((tls_model("initial-exec")));
extern unsigned shmt__sleep_hooked;
extern int shmt__sleep_gate;

/* Take and let go of a mutex private to this process, with no sleep hook
 * run while it is held (above). */
static inline void
shmt__quiet_lock(pthread_mutex_t *mu)
{
	pthread_mutex_lock(mu);
	shmt__sleep_quiet++;
}

static inline void
shmt__quiet_unlock(pthread_mutex_t *mu)
{
	shmt__sleep_quiet--;
	pthread_mutex_unlock(mu);
}

struct shmt_sleep {
	shmt_sleep_fn after;
	void *ctx;
};

static inline struct shmt_sleep
shmt__sleep_begin(const shmt_t *h)
{
	struct shmt_sleep s = { NULL, NULL };

	if (h == NULL || h->sleep_before == NULL || shmt__sleep_quiet != 0)
		return s;
	__atomic_add_fetch(&shmt__sleep_hooked, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&shmt__sleep_gate, __ATOMIC_SEQ_CST)) {
		__atomic_sub_fetch(&shmt__sleep_hooked, 1, __ATOMIC_SEQ_CST);
		return s;
	}
	s.after = h->sleep_after;
	s.ctx = h->sleep_ctx;
	/* A sleep nested in this one (a reader's wait that repairs a dead
	 * writer's shard under its lock) runs no hook of its own. */
	shmt__sleep_quiet++;
	h->sleep_before(s.ctx);
	return s;
}

static inline void
shmt__sleep_end(struct shmt_sleep s)
{
	if (s.after == NULL)
		return;
	s.after(s.ctx);
	shmt__sleep_quiet--;
	__atomic_sub_fetch(&shmt__sleep_hooked, 1, __ATOMIC_SEQ_CST);
}

static inline shmt_time_t
shmt__now(shmt_t *h)
{
	if (h->clock != NULL)
		return h->clock(h->clock_ctx);
	return shmt__mono_ns();
}


/* Checking (check.c): each module reports its problems through this. */
/* How long the check watches one shard that is never at rest (see
 * chk_shard in dict.c), and all shards together in one call: a check never
 * stalls for long, whatever the lock words say. */
#define SHMT_CHK_WAIT_NS 100000000ULL
#define SHMT_CHK_WAIT_TOTAL_NS (5 * SHMT_CHK_WAIT_NS)
struct shmt_chk {
	shmt_check_fn fn;
	void *ctx;
	int problems;
	int repair;                   /* SHMT_CHECK_REPAIR was asked for */
	uint64_t wait_left;           /* of SHMT_CHK_WAIT_TOTAL_NS */
};
void shmt__chk(struct shmt_chk *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void shmt__limiters_check(shmt_t *h, struct shmt_chk *c);
void shmt__stores_check(shmt_t *h, struct shmt_chk *c);

/* Slots (slots.c). */
int shmt__slot_claim(shmt_t *h);
void shmt__slot_release(shmt_t *h);
int shmt__slots_reap(shmt_t *h);
void shmt__slots_count(shmt_t *h, uint32_t *in_use, uint32_t *stale);
/* 1 when process PID holds a slot of H's segment. */
int shmt__slot_held_by(shmt_t *h, pid_t pid);
/* 1 when thread TID is a thread of a process that holds a slot, asked of
 * tgkill(2) with no signal for each slot's process (no /proc needed).
 * Keeps errno. */
int shmt__slot_has_thread(shmt_t *h, uint32_t tid);

#endif /* SHMT_SEGMENT_H */
