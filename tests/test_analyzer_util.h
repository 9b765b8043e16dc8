/* This file is private to the tests of libshmthrottle. */
/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's tests share an exact oracle: every request fed with
 * shmt_get is kept as (time, key), and each query of shmt_top_keys is
 * checked against the counts of the covered span and of the exact window.
 * Keys are numbered; their 64-bit hashes are computed with the library's
 * keyed hash and the segment's secret (ta_learn), so the test can name any
 * key the analyzer reports.
 */
#ifndef TEST_ANALYZER_UTIL_H
#define TEST_ANALYZER_UTIL_H

#include "testutil.h"

#include <stddef.h>
#include <stdint.h>

#define TA_SEC 1000000000ULL
#define TA_MS 1000000ULL

/* The key universe: ids below TA_IDS have learned hashes.  Ids from
 * TA_COLD are a cold pool, ids from TA_NOISE are handed out once each. */
#define TA_IDS (1U << 20)
#define TA_HOT 0U
#define TA_COLD 256U
#define TA_NOISE 4096U

/* Write key ID into BUF (at least 96 bytes); returns its length.  One id in
 * seven gets a key longer than the analyzer keeps in its name table. */
size_t ta_key(uint32_t id, char *buf);
/* Learn the hash of every id as H's segment computes it (keyed with its
 * secret); a later call for a segment with the same secret does nothing. */
void ta_learn(shmt_t *h);
/* The hash of key ID in the segment learned last. */
uint64_t ta_hash(uint32_t id);
/* The id whose key has HASH, or -1. */
long ta_id_of(uint64_t hash);
/* Up to WANT ids in [FROM, TO) whose counters fall in one group of the
 * analyzer's GROUPS (the most populous one) in the segment learned last;
 * returns how many were written to OUT. */
uint32_t ta_collide(uint32_t groups, uint32_t from, uint32_t to, uint32_t *out,
    uint32_t want);

struct ta_conf {
	const char *name;
	uint64_t bytes;
	uint64_t window_ns;
	uint32_t subw;
	uint32_t ppm;
};

struct ta_req {
	uint64_t t;
	uint32_t id;
};

struct ta_run {
	const struct ta_conf *c;
	const char *scen;
	shmt_t *h;
	struct tu_clock clk;
	char seg[96];
	uint64_t w;
	uint32_t counters, probe;
	struct ta_req *req;
	size_t n, cap;
	uint32_t *cnt_span, *cnt_win, *touched;
	uint8_t *seen;
	size_t ntouched;
	shmt_hotkey_t *out;
	size_t outcap;
	int must_certify;      /* the traffic is steady: certified always */
	/* Or: certified at the moments this says (may be NULL). */
	int (*certify_at)(const struct ta_run *r, uint64_t now);
	uint64_t rs;           /* the scenario's random state */
	uint64_t last_q;       /* time of the last query */
	uint64_t next_rand_q;  /* a random moment in the current sub-window */
	/* What the queries saw, for the summary line and non-vacuity. */
	uint64_t queries, certified, must_report, must_report_win, reported;
	uint64_t max_error, max_total;
	uint64_t unnamed;      /* listed with kind 0 and no key bytes */
	uint64_t left_over_error; /* left out with more than `error` */
	uint64_t missed;       /* over the threshold of the exact window, not
	                        * listed (by an uncertified answer) */
	uint64_t far_below;    /* listed with less than (threshold - max(error
	                        * / total, 1 / (probe + 1))) of the exact
	                        * window */
	uint64_t fp;           /* listed with less than threshold x total_window
	                        * - error_window requests of the exact window,
	                        * by one or more (the oldest sub-window's
	                        * corner) */
	uint64_t fp_cert;      /* of them, listed by certified answers */
	uint64_t fp_excess;    /* the most such a key lacked, in requests */
	uint64_t fp_frac;      /* listed short of it by less than a request */
	uint64_t old_after;    /* the oldest sub-window's requests from mark
	                        * B's slice on (one writer; ta_old_after) */
	int writers;           /* processes feeding (0: this one alone) */
	int recs_off;          /* turn every summary's crossing log off
	                        * before each query (the fallback bound) */
	double max_eo;         /* the largest error_oldest / total_window */
	/* The last query's answer about WATCH (ta_watch), or 0. */
	uint32_t watch;
	int watch_reported;
	uint64_t watch_count;
	uint32_t noise_next;   /* the next all-distinct noise id */
	int last_certified;
	/* Moments a scenario wants a query at, in increasing order. */
	uint64_t force[16];
	int nforce, iforce;
};

extern const struct ta_conf ta_confs[];
extern const size_t ta_nconfs;
/* tu_scale(), and a quarter of it in sanitizer builds. */
double ta_scale(void);
/* Queue a query at moment T (after every moment queued before). */
void ta_force(struct ta_run *r, uint64_t t);

/* Who requests: hot keys with their shares, then noise (a new key each
 * time) with its share, and the rest from a cold pool. */
struct ta_mix {
	uint32_t nhot;
	uint32_t hot[8];
	double share[8];
	double noise;
	uint32_t cold_from, cold_n;
};


/* Create a segment for configuration C (clock at T0). */
void ta_open(struct ta_run *r, const struct ta_conf *c, const char *scen,
    uint64_t t0, uint64_t seed);
void ta_close(struct ta_run *r);
/* Store key ID in the dictionary (its gets are then found). */
void ta_set(struct ta_run *r, uint32_t id);
/* Move the clock to T (>= now), running the queries due on the way: at
 * both sides of every sub-window edge and at one random moment in each
 * sub-window. */
void ta_advance(struct ta_run *r, uint64_t t);
/* One shmt_get of key ID at time T (after ta_advance(r, T)). */
void ta_get(struct ta_run *r, uint64_t t, uint32_t id);
/* Query now and check the answer against the oracle. */
void ta_query(struct ta_run *r);
/* qsort comparison of uint64_t. */
int ta_cmp_u64(const void *a, const void *b);
/* One key drawn from M. */
uint32_t ta_pick(struct ta_run *r, const struct ta_mix *m);
/* NREQ requests drawn from M at random moments of [FROM, TO), in time
 * order, with the queries due on the way. */
void ta_traffic(struct ta_run *r, uint64_t from, uint64_t to, uint64_t nreq,
    const struct ta_mix *m);
/* Print the run's summary line. */
void ta_summary(const struct ta_run *r);

#endif
