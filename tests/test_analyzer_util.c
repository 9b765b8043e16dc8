/* SPDX-License-Identifier: MIT */
/*
 * The exact oracle of the analyzer's tests: the requests fed, the hashes of
 * the test's keys as the library computes them, and the check of one
 * shmt_top_keys answer against the true counts: the bounds of every listed
 * key hold its count in the exact window [now - W, now], and the span's
 * and the exact window's totals and errors are checked as the header
 * states them.
 */
#include "test_analyzer_util.h"

#include "analyzer.h"
#include "an_sum.h"
#include "tiles.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Keys and their hashes ------------------------------------------------ */

#define TA_LONG 60              /* longer than the analyzer's name entry */
#define TA_MAP (TA_IDS * 2)     /* hash -> id, open addressing */

static uint64_t ta_hashes[TA_IDS];
static uint32_t ta_map[TA_MAP];        /* id + 1, 0: empty */
static int ta_learned;
static struct shmt_hkey ta_key_of;     /* the secret they were learned with */

size_t
ta_key(uint32_t id, char *buf)
{
	int n = snprintf(buf, 96, "key-%" PRIu32 "-", id);

	if (id % 7 == 3) {
		memset(buf + n, 'x', TA_LONG - (size_t)n);
		n = TA_LONG;
	}
	buf[n] = '\0';
	return (size_t)n;
}

/*
 * Learn every id's hash as H's segment computes it: the dictionary's keyed
 * hash with the segment's secret, the top bit cleared as the analyzer
 * clears it for a dictionary key.  Every answer of shmt_top_keys is then
 * checked to carry one of these hashes (ta_check_key), so a test whose
 * hashes differ from the library's fails there.
 */
void
ta_learn(shmt_t *h)
{
	char key[96];

	if (ta_learned && memcmp(&ta_key_of, &h->key, sizeof(ta_key_of)) == 0)
		return;
	memset(ta_map, 0, sizeof(ta_map));
	ta_key_of = h->key;
	for (uint32_t id = 0; id < TA_IDS; id++) {
		size_t kl = ta_key(id, key);

		ta_hashes[id] = shmt__hash64(&h->key, key, kl) &
		    ~SHMT_AN_CLIENT_BIT;
	}
	for (uint32_t id = 0; id < TA_IDS; id++) {
		uint32_t i = (uint32_t)ta_hashes[id] & (TA_MAP - 1);

		while (ta_map[i] != 0) {
			/* Two keys of the universe with one 64-bit hash would
			 * make the oracle ambiguous. */
			assert_int_not_equal(ta_hashes[ta_map[i] - 1],
			    ta_hashes[id]);
			i = (i + 1) & (TA_MAP - 1);
		}
		ta_map[i] = id + 1;
	}
	ta_learned = 1;
}

uint64_t
ta_hash(uint32_t id)
{
	assert_true(ta_learned);
	assert_true(id < TA_IDS);
	return ta_hashes[id];
}

long
ta_id_of(uint64_t hash)
{
	uint32_t i = (uint32_t)hash & (TA_MAP - 1);

	assert_true(ta_learned);
	while (ta_map[i] != 0) {
		if (ta_hashes[ta_map[i] - 1] == hash)
			return (long)ta_map[i] - 1;
		i = (i + 1) & (TA_MAP - 1);
	}
	return -1;
}

uint32_t
ta_collide(uint32_t groups, uint32_t from, uint32_t to, uint32_t *out,
    uint32_t want)
{
	uint32_t *count = calloc(groups, sizeof(*count)), best = 0, n = 0;

	assert_non_null(count);
	for (uint32_t id = from; id < to; id++)
		count[shmt__an_group(groups, ta_hash(id))]++;
	for (uint32_t g = 1; g < groups; g++)
		if (count[g] > count[best])
			best = g;
	for (uint32_t id = from; id < to && n < want; id++)
		if (shmt__an_group(groups, ta_hash(id)) == best)
			out[n++] = id;
	free(count);
	return n;
}

const struct ta_conf ta_confs[] = {
	{ "60s/12/10%/1MiB", 1ULL << 20, 60 * TA_SEC, 12, 100000 },
	{ "60s/6/5%/1MiB", 1ULL << 20, 60 * TA_SEC, 6, 50000 },
	{ "60s/12/10%/256KiB", 256ULL << 10, 60 * TA_SEC, 12, 100000 },
	{ "60s/6/5%/256KiB", 256ULL << 10, 60 * TA_SEC, 6, 50000 },
};
const size_t ta_nconfs = sizeof(ta_confs) / sizeof(ta_confs[0]);

double
ta_scale(void)
{
#if defined(SHMT_SANITIZE_ADDRESS) || defined(SHMT_SANITIZE_THREAD)
	return tu_scale() / 4;
#else
	return tu_scale();
#endif
}

/* ---- A run ------------------------------------------------------------------ */

#define TA_FAIL(r, ...) do {                                              \
	printf("# FAIL %s on %s, query %" PRIu64 " at %" PRIu64 " ns: ",  \
	    (r)->scen, (r)->c->name, (r)->queries, (r)->clk.now);          \
	printf(__VA_ARGS__);                                              \
	printf("\n");                                                     \
	fail();                                                           \
} while (0)

void
ta_open(struct ta_run *r, const struct ta_conf *c, const char *scen,
    uint64_t t0, uint64_t seed)
{
	shmt_top_info_t info;
	shmt_config_t cfg;

	memset(r, 0, sizeof(*r));
	r->c = c;
	r->scen = scen;
	r->rs = seed ^ 0x5bd1e995ULL;
	r->clk.now = t0;
	r->w = c->window_ns / c->subw;
	shmt_config_init(&cfg);
	cfg.dict_bytes = 4ULL << 20;
	cfg.dict_shards = 2;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = c->bytes;
	cfg.analyzer_window_ns = c->window_ns;
	cfg.analyzer_subwindows = c->subw;
	cfg.analyzer_threshold_ppm = c->ppm;
	tu_segname(r->seg, sizeof(r->seg), "an");
	assert_int_equal(shmt_create(r->seg, &cfg, &r->h), 0);
	assert_int_equal(shmt_set_clock(r->h, tu_clock_read, &r->clk), 0);
	/* The secret follows the seed too (its own stream, so the draws of
	 * the scenario stay as they were). */
	{
		uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(r->h, &ss);
	}
	ta_learn(r->h);
	assert_int_equal(shmt_top_keys(r->h, NULL, 0, &info), 0);
	r->counters = info.counters;
	r->probe = info.probe;
	assert_true(r->counters >= r->probe && r->probe > 0);
	r->cap = 1 << 16;
	r->req = malloc(r->cap * sizeof(*r->req));
	r->cnt_span = calloc(TA_IDS, sizeof(*r->cnt_span));
	r->cnt_win = calloc(TA_IDS, sizeof(*r->cnt_win));
	r->touched = malloc(TA_IDS * sizeof(*r->touched));
	r->seen = calloc(TA_IDS, 1);
	r->outcap = 64;
	r->out = malloc(r->outcap * sizeof(*r->out));
	assert_true(r->req && r->cnt_span && r->cnt_win && r->touched &&
	    r->seen && r->out);
	r->last_q = UINT64_MAX;
	r->noise_next = TA_NOISE;
	r->next_rand_q = (t0 / r->w) * r->w + tu_rand(&r->rs) % r->w;
}

void
ta_close(struct ta_run *r)
{
	ta_summary(r);
	shmt_close(r->h);
	assert_int_equal(shmt_unlink(r->seg), 0);
	free(r->req);
	free(r->cnt_span);
	free(r->cnt_win);
	free(r->touched);
	free(r->seen);
	free(r->out);
}

void
ta_summary(const struct ta_run *r)
{
	printf("# %s on %s: %zu requests, %" PRIu64 " queries (%" PRIu64
	    " certified), %" PRIu64 " keys over the threshold of the exact "
	    "window checked (%" PRIu64 " missed, %" PRIu64 " by certified "
	    "answers), %" PRIu64 " reported (%" PRIu64 " below threshold - "
	    "error / total of the exact window, %" PRIu64 " without kind or "
	    "name); counters %u, probe %u, piece marks %u, records %u, largest "
	    "error %" PRIu64 " of total %" PRIu64 "; %" PRIu64 " keys left out "
	    "with more than error; %" PRIu64 " listed with less than threshold "
	    "x total_window - error_window (%" PRIu64 " by certified answers, "
	    "short by %" PRIu64 " at most; %" PRIu64 " more short by less than "
	    "one); error_oldest at most %.4f of total_window\n",
	    r->scen, r->c->name, r->n, r->queries, r->certified,
	    r->must_report, r->missed, r->must_report_win, r->reported,
	    r->far_below, r->unnamed, r->counters, r->probe, r->h->an->pieces,
	    r->h->an->recs, r->max_error, r->max_total, r->left_over_error,
	    r->fp, r->fp_cert, r->fp_excess, r->fp_frac, r->max_eo);
}

void
ta_force(struct ta_run *r, uint64_t t)
{
	assert_true(r->nforce < 16);
	assert_true(r->nforce == 0 || r->force[r->nforce - 1] < t);
	r->force[r->nforce++] = t;
}

void
ta_set(struct ta_run *r, uint32_t id)
{
	char key[96];
	size_t kl = ta_key(id, key);

	assert_int_equal(shmt_set(r->h, key, kl, "value", 5, 0), 0);
}

void
ta_get(struct ta_run *r, uint64_t t, uint32_t id)
{
	char key[96], v[16];
	size_t kl = ta_key(id, key), vlen;
	int rc;

	assert_true(id < TA_IDS);
	ta_advance(r, t);
	rc = shmt_get(r->h, key, kl, v, sizeof(v), &vlen);
	if (rc != 0 && rc != -ENOENT)
		TA_FAIL(r, "shmt_get of key %u: %d", id, rc);
	if (r->n == r->cap) {
		r->cap *= 2;
		r->req = realloc(r->req, r->cap * sizeof(*r->req));
		assert_non_null(r->req);
	}
	r->req[r->n].t = t;
	r->req[r->n++].id = id;
}

void
ta_advance(struct ta_run *r, uint64_t t)
{
	uint64_t W = r->c->window_ns;

	if (t < r->clk.now)
		TA_FAIL(r, "the scenario went back in time to %" PRIu64, t);
	/* A long idle gap: queries while the old traffic drains, then a jump
	 * to one window before T, then the queries up to T. */
	if (t - r->clk.now > 3 * W) {
		ta_advance(r, r->clk.now + W + 2 * r->w);
		r->clk.now = t - W;
		r->next_rand_q = r->clk.now + tu_rand(&r->rs) % r->w;
		ta_query(r);
	}
	for (;;) {
		uint64_t cur = r->clk.now, e = (cur / r->w + 1) * r->w;
		uint64_t next = e - 1 > cur ? e - 1 : e;

		if (r->next_rand_q > cur && r->next_rand_q < next)
			next = r->next_rand_q;
		while (r->iforce < r->nforce && r->force[r->iforce] <= cur)
			r->iforce++;
		if (r->iforce < r->nforce && r->force[r->iforce] < next)
			next = r->force[r->iforce];
		if (next > t)
			break;
		r->clk.now = next;
		if (next == e)
			r->next_rand_q = e + tu_rand(&r->rs) % r->w;
		ta_query(r);
	}
	r->clk.now = t;
}

/* The first request at or after T. */
static size_t
ta_first(const struct ta_run *r, uint64_t t)
{
	size_t lo = 0, hi = r->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->req[mid].t < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The oldest sub-window's requests from the first moment of slice k* on,
 * k* the lesser of the slice holding the exact window's start and the
 * slice of the sub-window's last request.  With one writer, slice mark k*
 * exists (slice 0: the sub-window's start) and every request before it is
 * before the exact window, so mark B is at it or later, and n - n_B of the
 * oldest summary is at most this.
 */
static uint64_t
ta_old_after(const struct ta_run *r, uint64_t now)
{
	const struct ta_conf *c = r->c;
	uint64_t i = shmt__tile_of(now, c->window_ns, c->subw), ss, se, ws;
	uint32_t k, kl;
	size_t end;

	if (i < c->subw || now < c->window_ns)
		return r->n;
	ss = shmt__tile_start(i - c->subw, c->window_ns, c->subw);
	se = shmt__tile_start(i - c->subw + 1, c->window_ns, c->subw);
	ws = now - c->window_ns;
	end = ta_first(r, se);
	if (end == 0 || r->req[end - 1].t < ss)
		return 0;
	k = slice_of(ss, se, ws);
	kl = slice_of(ss, se, r->req[end - 1].t);
	if (kl < k)
		k = kl;
	return end - ta_first(r, slice_start(ss, se, k));
}

static int
ta_over(uint64_t count, uint64_t total, uint32_t ppm)
{
	return (double)count * 1e6 > (double)ppm * (double)total;
}

static void
ta_check_key(struct ta_run *r, const shmt_top_info_t *info, int k,
    uint64_t nwin)
{
	const shmt_hotkey_t *o = &r->out[k];
	long id = ta_id_of(o->hash);
	char key[96];
	size_t kl;
	uint64_t f, pre;
	double e;

	if (id < 0)
		TA_FAIL(r, "answer %d has hash %016" PRIx64 ", no key requested "
		    "has it (lower %" PRIu64 ", upper %" PRIu64 ")", k, o->hash,
		    o->lower, o->upper);
	if (r->seen[id])
		TA_FAIL(r, "key %ld reported twice", id);
	r->seen[id] = 1;
	f = r->cnt_win[id];
	if (o->lower > f || o->upper < f)
		TA_FAIL(r, "key %ld: true count %" PRIu64 " in the exact window "
		    "(%" PRIu64 " in the span), bounds [%" PRIu64 ", %" PRIu64
		    "] (error_window %" PRIu64 ", total_window %" PRIu64 ")",
		    id, f, (uint64_t)r->cnt_span[id], o->lower, o->upper,
		    info->error_window, info->total_window);
	if (o->upper - o->lower < info->error_window)
		TA_FAIL(r, "key %ld: bounds [%" PRIu64 ", %" PRIu64 "] narrower "
		    "than error_window %" PRIu64, id, o->lower, o->upper,
		    info->error_window);
	/* A key known by its hash alone (no name kept, not in the dictionary)
	 * is counted here; test_analyzer_adv's unnamed test asserts on it. */
	if (o->kind == 0 && o->klen == 0 && o->kept == 0)
		r->unnamed++;
	else if (o->kind != SHMT_HOT_DICT)
		TA_FAIL(r, "key %ld: kind %d (klen %u, kept %u, lower %" PRIu64
		    ", upper %" PRIu64 ", total %" PRIu64 ", total_window %" PRIu64
		    ")", id, o->kind, o->klen, o->kept, o->lower, o->upper,
		    info->total, info->total_window);
	if (k > 0 && r->out[k - 1].lower < o->lower)
		TA_FAIL(r, "answer %d (lower %" PRIu64 ") after one with lower %"
		    PRIu64 ": not most requested first", k, o->lower,
		    r->out[k - 1].lower);
	/* Listed because it may be over the threshold. */
	if (!ta_over(o->upper, info->total_window, info->threshold_ppm))
		TA_FAIL(r, "key %ld listed with upper %" PRIu64 ", not over the "
		    "threshold of %" PRIu64 " requests", id, o->upper,
		    info->total_window);
	/* The false-positive bound over the exact window: a listed key had
	 * more than threshold x total_window - error_window requests in it,
	 * less the lesser of those it had in the oldest sub-window before it
	 * (in the span, not the window) and the oldest sub-window's requests
	 * from the first moment of mark B's slice on (old_after, see
	 * ta_old_after; with one writer, whose marks the test knows): a
	 * key's `old` part is at most both. */
	pre = (uint64_t)r->cnt_span[id] - f;
	if (r->writers <= 1 && r->old_after < pre)
		pre = r->old_after;
	if ((double)(f + info->error_window + pre) * 1e6 <=
	    (double)info->threshold_ppm * (double)info->total_window)
		TA_FAIL(r, "key %ld listed with %" PRIu64 " requests in the exact "
		    "window and %" PRIu64 " before it (the oldest sub-window "
		    "had %" PRIu64 " from mark B's slice on), not over the "
		    "threshold of total_window %" PRIu64 " less error_window %"
		    PRIu64, id, f, (uint64_t)r->cnt_span[id] - f, r->old_after,
		    info->total_window, info->error_window);
	/* The bound each answer reports: more than threshold x total_window
	 * - error_window - error_oldest requests in the exact window. */
	if ((double)(f + info->error_window + info->error_oldest) * 1e6 <=
	    (double)info->threshold_ppm * (double)info->total_window)
		TA_FAIL(r, "key %ld listed with %" PRIu64 " requests in the exact "
		    "window (%" PRIu64 " before it in the span), not over the "
		    "threshold of total_window %" PRIu64 " less error_window %"
		    PRIu64 " and error_oldest %" PRIu64, id, f,
		    (uint64_t)r->cnt_span[id] - f, info->total_window,
		    info->error_window, info->error_oldest);
	/* The strict false positives: listed with less than threshold x
	 * total_window - error_window requests of the exact window, by one
	 * request or more (only the oldest sub-window's part before the
	 * window can bring that about): counted, and a scenario asserts how
	 * many it may have. */
	if ((double)(f + info->error_window) * 1e6 <
	    (double)info->threshold_ppm * (double)info->total_window) {
		double lack = (double)info->threshold_ppm *
		    (double)info->total_window / 1e6 -
		    (double)(f + info->error_window);

		/* Short by a fraction of a request (the threshold of
		 * total_window is no whole number): counted apart. */
		r->fp_frac += lack < 1;
		r->fp += lack >= 1;
		r->fp_cert += lack >= 1 && info->certified;
		if (lack > (double)r->fp_excess)
			r->fp_excess = (uint64_t)lack;
		if (lack >= 1 && r->fp <= 3)
			printf("# %s on %s, query %" PRIu64 " at %" PRIu64 " ns: "
			    "key %ld listed with %" PRIu64 " requests of the "
			    "exact window (%" PRIu64 " before it in the span), "
			    "bounds [%" PRIu64 ", %" PRIu64 "], error_window %"
			    PRIu64 ", total_window %" PRIu64 "%s\n", r->scen,
			    r->c->name, r->queries, r->clk.now, id, f,
			    (uint64_t)r->cnt_span[id] - f, o->lower, o->upper,
			    info->error_window, info->total_window,
			    info->certified ? "" : " (not certified)");
	}
	/* Keys listed with less than (threshold - e) of the exact window's
	 * requests, e = max(error / total, 1 / (probe + 1)) (the bound on
	 * error / total), are counted (far_below), and the first few
	 * printed: a scenario asserts how many it may have. */
	e = (double)info->error / (double)(info->total ? info->total : 1);
	if (e < 1.0 / (info->probe + 1))
		e = 1.0 / (info->probe + 1);
	if ((double)f < ((double)info->threshold_ppm / 1e6 - e) * (double)nwin) {
		if (r->far_below++ < 3)
			printf("# %s on %s, query %" PRIu64 " at %" PRIu64 " ns: "
			    "key %ld listed with %" PRIu64 " of %" PRIu64
			    " requests of the exact window (%" PRIu64 " before "
			    "it in the span), bounds [%" PRIu64 ", %" PRIu64
			    "], error %" PRIu64 " of total %" PRIu64 "\n",
			    r->scen, r->c->name, r->queries, r->clk.now, id, f,
			    nwin, (uint64_t)r->cnt_span[id] - f, o->lower,
			    o->upper, info->error, info->total);
	}
	kl = ta_key((uint32_t)id, key);
	if (o->kept > 0 && (o->klen != kl || o->kept > o->klen ||
	    memcmp(o->key, key, o->kept) != 0))
		TA_FAIL(r, "key %ld: reported bytes (klen %u, kept %u) are not "
		    "the key's", id, o->klen, o->kept);
}

void
ta_query(struct ta_run *r)
{
	const struct ta_conf *c = r->c;
	shmt_top_info_t info;
	uint64_t now = r->clk.now, wstart, nspan = 0, nwin = 0;
	size_t first;
	int rc;

	if (r->last_q == now)
		return;
	r->last_q = now;
	r->queries++;
	if (r->recs_off) {
		const struct shmt_an *an = r->h->an;

		/* As a reaper does for a dead writer's stripe. */
		for (uint32_t ring = 0; ring < an->rings; ring++)
			for (uint32_t p = 0; p < an->stripes; p++)
				__atomic_fetch_or(&sum_at(an, ring, p)->am_rlog,
				    (uint64_t)SHMT_AN_REC_OFF << 24,
				    __ATOMIC_RELEASE);
	}
	while ((rc = shmt_top_keys(r->h, r->out, r->outcap, &info)) >= 0 &&
	    (size_t)rc > r->outcap) {
		r->outcap = (size_t)rc * 2;
		r->out = realloc(r->out, r->outcap * sizeof(*r->out));
		assert_non_null(r->out);
	}
	if (rc < 0)
		TA_FAIL(r, "shmt_top_keys: %d", rc);
	if (info.total_window > 0 && (double)info.error_oldest /
	    (double)info.total_window > r->max_eo)
		r->max_eo = (double)info.error_oldest /
		    (double)info.total_window;
	wstart = now >= c->window_ns ? now - c->window_ns : 0;
	if (info.span_end_ns != now || info.span_start_ns > wstart ||
	    info.span_start_ns + c->window_ns + (c->window_ns + c->subw - 1) /
	    c->subw <= now ||
	    info.window_ns != c->window_ns || info.subwindow_ns != r->w ||
	    info.threshold_ppm != c->ppm || info.memory_bytes != c->bytes ||
	    info.counters != r->counters || info.probe != r->probe)
		TA_FAIL(r, "info: span [%" PRIu64 ", %" PRIu64 "], window %"
		    PRIu64 ", sub-window %" PRIu64 ", ppm %u, memory %" PRIu64,
		    info.span_start_ns, info.span_end_ns, info.window_ns,
		    info.subwindow_ns, info.threshold_ppm, info.memory_bytes);
	r->old_after = ta_old_after(r, now);
	r->ntouched = 0;
	first = ta_first(r, info.span_start_ns);
	for (size_t j = first; j < r->n; j++) {
		uint32_t id = r->req[j].id;

		if (r->cnt_span[id]++ == 0)
			r->touched[r->ntouched++] = id;
		nspan++;
		if (r->req[j].t >= wstart) {
			r->cnt_win[id]++;
			nwin++;
		}
	}
	if (info.total != nspan)
		TA_FAIL(r, "total %" PRIu64 ", the span had %" PRIu64 " requests",
		    info.total, nspan);
	if (info.total_window > nwin)
		TA_FAIL(r, "total_window %" PRIu64 ", the exact window had %"
		    PRIu64, info.total_window, nwin);
	if (info.error_window > info.error)
		TA_FAIL(r, "error_window %" PRIu64 " over error %" PRIu64,
		    info.error_window, info.error);
	if (info.error * (uint64_t)(r->probe + 1) > info.total)
		TA_FAIL(r, "error %" PRIu64 " over total / (probe + 1) = %"
		    PRIu64 " / %u", info.error, info.total, r->probe + 1);
	if ((r->must_certify || (r->certify_at != NULL &&
	    r->certify_at(r, now))) && !info.certified)
		TA_FAIL(r, "not certified under steady traffic: error %" PRIu64
		    ", total %" PRIu64 ", total_window %" PRIu64, info.error,
		    info.total, info.total_window);
	r->certified += info.certified != 0;
	r->last_certified = info.certified;
	r->reported += (uint64_t)rc;
	if (info.error > r->max_error)
		r->max_error = info.error;
	if (info.total > r->max_total)
		r->max_total = info.total;
	for (int k = 0; k < rc; k++)
		ta_check_key(r, &info, k, nwin);
	r->watch_reported = r->seen[r->watch];
	r->watch_count = r->cnt_span[r->watch];
	for (size_t j = 0; j < r->ntouched; j++) {
		uint32_t id = r->touched[j];

		/* Every key over the threshold of the exact window is
		 * listed when the answer is certified (below); one missed by
		 * an uncertified answer is counted. */
		if (ta_over(r->cnt_win[id], nwin, c->ppm)) {
			r->must_report++;
			if (!r->seen[id])
				r->missed++;
		}
		if (!r->seen[id] && r->cnt_win[id] > info.error_window &&
		    ta_over(r->cnt_win[id], info.total_window, c->ppm))
			TA_FAIL(r, "key %u left out with %u requests in the exact "
			    "window, over error_window %" PRIu64 " and over the "
			    "threshold of total_window %" PRIu64, id,
			    r->cnt_win[id], info.error_window,
			    info.total_window);
		if (!r->seen[id] && r->cnt_span[id] > info.error)
			r->left_over_error++;
		if (info.certified && ta_over(r->cnt_win[id], nwin, c->ppm)) {
			r->must_report_win++;
			if (!r->seen[id])
				TA_FAIL(r, "certified, but key %u missed: %u of %"
				    PRIu64 " requests in the exact window", id,
				    r->cnt_win[id], nwin);
		}
		r->cnt_span[id] = r->cnt_win[id] = 0;
	}
	for (int k = 0; k < rc; k++)
		r->seen[ta_id_of(r->out[k].hash)] = 0;
}

uint32_t
ta_pick(struct ta_run *r, const struct ta_mix *m)
{
	double u = (double)(tu_rand(&r->rs) >> 11) / 9007199254740992.0;

	for (uint32_t k = 0; k < m->nhot; k++) {
		if (u < m->share[k])
			return m->hot[k];
		u -= m->share[k];
	}
	if (u < m->noise || m->cold_n == 0) {
		uint32_t id = r->noise_next++;

		if (r->noise_next == TA_IDS)
			r->noise_next = TA_NOISE;
		return id;
	}
	return m->cold_from + (uint32_t)(tu_rand(&r->rs) % m->cold_n);
}

int
ta_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void
ta_traffic(struct ta_run *r, uint64_t from, uint64_t to, uint64_t nreq,
    const struct ta_mix *m)
{
	uint64_t *t;

	if (nreq == 0) {
		ta_advance(r, to);
		return;
	}
	assert_true(to > from);
	t = malloc(nreq * sizeof(*t));
	assert_non_null(t);
	for (uint64_t j = 0; j < nreq; j++)
		t[j] = from + tu_rand(&r->rs) % (to - from);
	qsort(t, nreq, sizeof(*t), ta_cmp_u64);
	for (uint64_t j = 0; j < nreq; j++)
		ta_get(r, t[j] < r->clk.now ? r->clk.now : t[j], ta_pick(r, m));
	free(t);
}
