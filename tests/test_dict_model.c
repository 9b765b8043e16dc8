/* SPDX-License-Identifier: MIT */
/*
 * The dictionary against a map kept by the test: random get, set (with and
 * without a TTL), add, replace, del and incr, with an injected clock that
 * moves TTLs past their expiry, must give the same return codes, values and
 * lengths as the model, call for call; at checkpoints a walk with
 * shmt_dict_next must return exactly the model's live keys, each once.
 * Configurations: text keys, binary keys full of NUL bytes, and keys of 1
 * and 1024 bytes.  Each dictionary is sized so it never fills (eviction is
 * off and no call may answer -ENOSPC).
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Operations in all configurations together.  Not scaled down for the
 * sanitizer builds: single-threaded calls on a small dictionary are fast
 * even there, and the count is the point of the test. */
#define DM_OPS 1200000.0
/* A walk of the whole dictionary every this many operations. */
#define DM_WALK_EVERY 20000
#define DM_MS 1000000ULL

enum dm_keys { DM_TEXT, DM_BINARY, DM_EDGE };

struct dm_params {
	const char *name;
	enum dm_keys keys;
	uint32_t nkeys;        /* the key pool */
	size_t vmax;           /* longest value */
	uint64_t dict_bytes;
	uint32_t shards;
	double share;          /* of DM_OPS */
};

/* The pools stay far below the heap: every key present at once with its
 * longest value, plus the copy a replacement needs, takes under a quarter
 * of one shard, so a correct dictionary never answers -ENOSPC. */
static const struct dm_params dm_sets[] = {
	{ "text", DM_TEXT, 512, 2048, 16ULL << 20, 4, 0.4 },
	{ "binary", DM_BINARY, 256, 512, 2ULL << 20, 1, 0.3 },
	{ "edge", DM_EDGE, 320, 4096, 16ULL << 20, 4, 0.3 },
};

struct dm_entry {
	unsigned char key[SHMT_KEY_MAX];
	size_t klen;
	int present;
	uint64_t expire;       /* ns; 0: never */
	size_t vlen;
	unsigned char *val;
	int seen;              /* walk bookkeeping */
};

struct dm_run {
	const struct dm_params *p;
	shmt_t *h;
	struct tu_clock clk;
	char seg[96];
	uint64_t rs;
	struct dm_entry *e;
	uint32_t *table;       /* open addressing: pool index + 1 */
	uint32_t tsize;
	unsigned char *buf, *tmp;
	uint64_t op;           /* operations done (the call number) */
	uint64_t counts[8];
};

enum { C_GET, C_SET, C_ADD, C_REPLACE, C_DEL, C_INCR, C_WALK, C_STEP };

static uint64_t
dm_pick(uint64_t *rs, uint64_t n)
{
	return n == 0 ? 0 : tu_rand(rs) % n;
}

/* ---- The key pool ---------------------------------------------------- */

static uint64_t
dm_hash(const unsigned char *k, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ k[i]) * 1099511628211ULL;
	return h ^ len;
}

/* The pool index of KEY, or -1. */
static long
dm_find(const struct dm_run *r, const unsigned char *k, size_t len)
{
	uint32_t i = (uint32_t)dm_hash(k, len) & (r->tsize - 1);

	while (r->table[i] != 0) {
		const struct dm_entry *e = &r->e[r->table[i] - 1];

		if (e->klen == len && memcmp(e->key, k, len) == 0)
			return (long)r->table[i] - 1;
		i = (i + 1) & (r->tsize - 1);
	}
	return -1;
}

/* Add pool key N unless an equal key is already there; 0 when it was. */
static int
dm_insert(struct dm_run *r, uint32_t n)
{
	struct dm_entry *e = &r->e[n];
	uint32_t i;

	if (dm_find(r, e->key, e->klen) >= 0)
		return 0;
	i = (uint32_t)dm_hash(e->key, e->klen) & (r->tsize - 1);
	while (r->table[i] != 0)
		i = (i + 1) & (r->tsize - 1);
	r->table[i] = n + 1;
	return 1;
}

/* Binary keys: short strings over an alphabet that is mostly NUL and
 * 0xff, so keys that differ only after a NUL, or only in a trailing NUL,
 * are common (a length-blind or strcmp-based compare would merge them). */
static void
dm_key_binary(struct dm_run *r, struct dm_entry *e, uint32_t n)
{
	static const unsigned char alpha[] = { 0, 0, 0, 1, 'a', 0xff };

	if (n < 8) {
		/* "\0", "\0\0", ..., and "x", "x\0", "x\0\0", ... */
		e->klen = n % 4 + 1;
		memset(e->key, 0, e->klen);
		if (n >= 4)
			e->key[0] = 'x';
		return;
	}
	e->klen = 1 + dm_pick(&r->rs, 16);
	for (size_t i = 0; i < e->klen; i++)
		e->key[i] = alpha[dm_pick(&r->rs, sizeof(alpha))];
}

/* Edge keys: every 1-byte key, then 1024-byte keys that share a random
 * base and differ in one byte (the first, the last, or one between). */
static void
dm_key_edge(struct dm_run *r, struct dm_entry *e, uint32_t n)
{
	if (n < 256) {
		e->klen = 1;
		e->key[0] = (unsigned char)n;
		return;
	}
	e->klen = SHMT_KEY_MAX;
	if (n == 256) {
		for (size_t i = 0; i < SHMT_KEY_MAX; i++)
			e->key[i] = (unsigned char)tu_rand(&r->rs);
		return;
	}
	memcpy(e->key, r->e[256].key, SHMT_KEY_MAX);
	switch (n % 3) {
	case 0:
		e->key[0] = (unsigned char)tu_rand(&r->rs);
		break;
	case 1:
		e->key[SHMT_KEY_MAX - 1] = (unsigned char)tu_rand(&r->rs);
		break;
	default:
		e->key[dm_pick(&r->rs, SHMT_KEY_MAX)] ^= 0x5a;
	}
}

static void
dm_key_text(struct dm_run *r, struct dm_entry *e)
{
	e->klen = 1 + dm_pick(&r->rs, 40);
	for (size_t i = 0; i < e->klen; i++)
		e->key[i] = (unsigned char)(' ' + dm_pick(&r->rs, 95));
}

static void
dm_make_pool(struct dm_run *r)
{
	const struct dm_params *p = r->p;

	r->e = calloc(p->nkeys, sizeof(*r->e));
	r->tsize = 1;
	while (r->tsize < 4 * p->nkeys)
		r->tsize <<= 1;
	r->table = calloc(r->tsize, sizeof(*r->table));
	assert_non_null(r->e);
	assert_non_null(r->table);
	for (uint32_t n = 0; n < p->nkeys; n++) {
		struct dm_entry *e = &r->e[n];

		do {
			if (p->keys == DM_TEXT)
				dm_key_text(r, e);
			else if (p->keys == DM_BINARY)
				dm_key_binary(r, e, n);
			else
				dm_key_edge(r, e, n);
		} while (!dm_insert(r, n));
		e->val = malloc(p->vmax + 1);
		assert_non_null(e->val);
	}
}

/* ---- Values ---------------------------------------------------------- */

/* Text that incr must accept (as a decimal int64) or refuse, drawn to hit
 * the parser's edges: signs, leading zeros, the int64 limits and one past
 * them, stray characters and the empty string. */
static size_t
dm_number(uint64_t *rs, char *out)
{
	static const char *const odd[] = {
		"", "-", "+5", " 5", "5 ", "1e3", "0x10", "12a", "--1", "-0",
		"007", "-007", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809",
		"99999999999999999999", "00000000000000000001",
	};
	int n;

	switch (dm_pick(rs, 4)) {
	case 0:
		return (size_t)sprintf(out, "%s", odd[dm_pick(rs, sizeof(odd) /
		    sizeof(odd[0]))]);
	case 1:
		n = sprintf(out, "%" PRId64, INT64_MAX - (int64_t)dm_pick(rs, 3));
		return (size_t)n;
	case 2:
		n = sprintf(out, "%" PRId64, INT64_MIN + (int64_t)dm_pick(rs, 3));
		return (size_t)n;
	default:
		n = sprintf(out, "%" PRId64, (int64_t)dm_pick(rs, 2001) - 1000);
		return (size_t)n;
	}
}

/* A value for a write: mostly random bytes of a length drawn over the
 * whole range (0 included), sometimes text that incr reads as a number. */
static size_t
dm_value(struct dm_run *r, unsigned char *out)
{
	uint64_t c = dm_pick(&r->rs, 100);
	size_t len;

	if (c < 20)
		return dm_number(&r->rs, (char *)out);
	if (c < 25)
		len = 0;
	else if (c < 70)
		len = 1 + dm_pick(&r->rs, 64);
	else if (c < 95)
		len = 1 + dm_pick(&r->rs, r->p->vmax / 2);
	else
		len = r->p->vmax - dm_pick(&r->rs, 2);
	for (size_t i = 0; i < len; i++)
		out[i] = (unsigned char)tu_rand(&r->rs);
	return len;
}

/* ---- The model ------------------------------------------------------- */

static int
dm_live(const struct dm_run *r, const struct dm_entry *e)
{
	return e->present && (e->expire == 0 || e->expire > r->clk.now);
}

/* The contract of shmt_incr: an optional '-', then one or more decimal
 * digits, and nothing else, naming a value that fits in int64_t. */
static int
dm_parse(const unsigned char *s, size_t len, int64_t *out)
{
	size_t i = 0;
	int neg = 0;
	int64_t v = 0;

	if (len > 0 && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == len)
		return -EINVAL;
	for (; i < len; i++) {
		int d = s[i] - '0';

		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		/* Accumulate toward the sign so INT64_MIN is reachable. */
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, neg ? -d : d, &v))
			return -EINVAL;
	}
	*out = v;
	return 0;
}

static void
dm_store(struct dm_run *r, struct dm_entry *e, const unsigned char *v,
    size_t len, uint64_t ttl_ms)
{
	e->present = 1;
	e->expire = ttl_ms == 0 ? 0 : r->clk.now + ttl_ms * DM_MS;
	e->vlen = len;
	memcpy(e->val, v, len);
}

/* ---- One operation of each kind -------------------------------------- */

#define DM_FAIL(r, what, got, want) do {                                 \
	fail_msg("%s: call %" PRIu64 " (%s): got %d, want %d",           \
	    (r)->p->name, (r)->op, what, (int)(got), (int)(want));       \
} while (0)

#define DM_EQ(r, what, got, want) do {                                   \
	if ((got) != (want))                                             \
		DM_FAIL(r, what, got, want);                             \
} while (0)

static void
dm_get(struct dm_run *r, struct dm_entry *e)
{
	size_t cap = r->p->vmax, vlen = (size_t)-1;
	int rc;

	if (e->present && dm_pick(&r->rs, 5) == 0)
		cap = dm_pick(&r->rs, e->vlen + 2);
	memset(r->buf, 0xa5, cap);
	rc = shmt_get(r->h, e->key, e->klen, r->buf, cap, &vlen);
	if (!dm_live(r, e)) {
		DM_EQ(r, "get of an absent key", rc, -ENOENT);
		return;
	}
	DM_EQ(r, "get: length", (long)vlen, (long)e->vlen);
	if (cap < e->vlen) {
		DM_EQ(r, "get into a short buffer", rc, -ERANGE);
		for (size_t i = 0; i < cap; i++)
			DM_EQ(r, "get: short buffer untouched", r->buf[i], 0xa5);
		return;
	}
	DM_EQ(r, "get", rc, 0);
	if (memcmp(r->buf, e->val, e->vlen) != 0)
		fail_msg("%s: call %" PRIu64 ": get returned other bytes",
		    r->p->name, r->op);
}

static uint64_t
dm_ttl(struct dm_run *r)
{
	/* Half the writes expire within a few clock steps. */
	return dm_pick(&r->rs, 2) == 0 ? 0 : 1 + dm_pick(&r->rs, 3000);
}

static void
dm_write(struct dm_run *r, struct dm_entry *e, int kind)
{
	uint64_t ttl = dm_ttl(r);
	size_t len = dm_value(r, r->tmp);
	int live = dm_live(r, e), want = 0, rc;

	if (kind == C_SET) {
		rc = shmt_set(r->h, e->key, e->klen, r->tmp, len, ttl);
	} else if (kind == C_ADD) {
		rc = shmt_add(r->h, e->key, e->klen, r->tmp, len, ttl);
		want = live ? -EEXIST : 0;
	} else {
		rc = shmt_replace(r->h, e->key, e->klen, r->tmp, len, ttl);
		want = live ? 0 : -ENOENT;
	}
	DM_EQ(r, kind == C_SET ? "set" : kind == C_ADD ? "add" : "replace",
	    rc, want);
	if (want == 0)
		dm_store(r, e, r->tmp, len, ttl);
}

static void
dm_del(struct dm_run *r, struct dm_entry *e)
{
	int rc = shmt_del(r->h, e->key, e->klen);

	DM_EQ(r, "del", rc, dm_live(r, e) ? 0 : -ENOENT);
	e->present = 0;
}

/* VAL as C string syntax for messages (the first bytes only). */
static const char *
dm_show(const unsigned char *val, size_t len, char *out, size_t cap)
{
	size_t n = 0, i;

	out[n++] = '"';
	for (i = 0; i < len && n + 10 < cap; i++)
		n += (size_t)snprintf(out + n, cap - n, val[i] >= ' ' &&
		    val[i] < 127 && val[i] != '"' && val[i] != '\\' ? "%c" :
		    "\\x%02x", val[i]);
	snprintf(out + n, cap - n, "%s", i < len ? "\"..." : "\"");
	return out;
}

static int64_t
dm_delta(uint64_t *rs)
{
	switch (dm_pick(rs, 10)) {
	case 0:
		return (int64_t)tu_rand(rs);
	case 1:
		return dm_pick(rs, 2) ? INT64_MAX - (int64_t)dm_pick(rs, 3) :
		    INT64_MIN + (int64_t)dm_pick(rs, 3);
	default:
		return (int64_t)dm_pick(rs, 201) - 100;
	}
}

static void
dm_incr(struct dm_run *r, struct dm_entry *e)
{
	int64_t delta = dm_delta(&r->rs), cur = 0, sum, got = 0x5eed;
	int live = dm_live(r, e), want = 0, rc;
	char text[64];

	if (live)
		want = dm_parse(e->val, e->vlen, &cur);
	if (want == 0 && __builtin_add_overflow(cur, delta, &sum))
		want = -ERANGE;
	rc = shmt_incr(r->h, e->key, e->klen, delta, &got);
	if (rc != want)
		fail_msg("%s: call %" PRIu64 ": incr by %" PRId64 " of %s: got "
		    "%d, want %d", r->p->name, r->op, delta, live ? dm_show(e->val,
		    e->vlen, text, sizeof(text)) : "an absent key", rc, want);
	if (want != 0)
		return;
	if (got != sum)
		fail_msg("%s: call %" PRIu64 ": incr gave %" PRId64 ", want %"
		    PRId64, r->p->name, r->op, got, sum);
	sprintf(text, "%" PRId64, sum);
	/* An existing key keeps its TTL; an absent one gets none. */
	e->expire = live ? e->expire : 0;
	e->present = 1;
	e->vlen = strlen(text);
	memcpy(e->val, text, e->vlen);
}

/* ---- Checkpoints ----------------------------------------------------- */

/* The walk must return every live key of the model exactly once and
 * nothing else (nothing changes during it, so nothing is optional). */
static void
dm_walk(struct dm_run *r)
{
	uint64_t cursor = 0, live = 0, got = 0;
	size_t klen;
	int rc;

	for (uint32_t n = 0; n < r->p->nkeys; n++) {
		r->e[n].seen = 0;
		live += (uint64_t)dm_live(r, &r->e[n]);
	}
	while ((rc = shmt_dict_next(r->h, &cursor, r->tmp, SHMT_KEY_MAX,
	    &klen)) == 1) {
		long n = dm_find(r, r->tmp, klen);

		if (n < 0 || !dm_live(r, &r->e[n]) || r->e[n].seen)
			fail_msg("%s: call %" PRIu64 ": walk returned a key "
			    "that is %s", r->p->name, r->op, n < 0 ?
			    "not in the pool" : r->e[n].seen ? "seen before" :
			    "not live");
		r->e[n].seen = 1;
		got++;
	}
	DM_EQ(r, "walk: end", rc, 0);
	DM_EQ(r, "walk: keys", (long)got, (long)live);
}

/* After shmt_housekeep() every expired item is gone, so the item count is
 * exactly the model's live keys, and nothing was ever evicted. */
static void
dm_housekeep(struct dm_run *r)
{
	shmt_dict_stat_t ds;
	uint64_t live = 0;

	for (uint32_t n = 0; n < r->p->nkeys; n++)
		live += (uint64_t)dm_live(r, &r->e[n]);
	assert_true(shmt_housekeep(r->h, NULL) >= 0);
	assert_int_equal(shmt_dict_stat(r->h, &ds), 0);
	DM_EQ(r, "stat after housekeeping: items", (long)ds.items, (long)live);
	DM_EQ(r, "stat: evictions", (long)ds.evictions, 0);
}

/* A clock step: mostly nothing or a little, sometimes past every TTL. */
static void
dm_step(struct dm_run *r)
{
	uint64_t c = dm_pick(&r->rs, 100);

	if (c < 60)
		r->clk.now += dm_pick(&r->rs, 50 * DM_MS);
	else if (c < 95)
		r->clk.now += dm_pick(&r->rs, 1000 * DM_MS);
	else if (c < 99)
		r->clk.now += 3000 * DM_MS + dm_pick(&r->rs, 2);
	else
		r->clk.now += 1; /* a nanosecond: expiry is "at or before now" */
}

/* A key of the pool: a small hot set takes half the operations, so keys
 * go through many writes, expiries and deletions. */
static struct dm_entry *
dm_key(struct dm_run *r)
{
	uint32_t n = r->p->nkeys;

	if (dm_pick(&r->rs, 2) == 0)
		return &r->e[dm_pick(&r->rs, n < 16 ? n : 16)];
	return &r->e[dm_pick(&r->rs, n)];
}

static void
dm_one(struct dm_run *r)
{
	struct dm_entry *e = dm_key(r);
	uint64_t c = dm_pick(&r->rs, 100);

	r->op++;
	if (c < 10) {
		dm_step(r);
		r->counts[C_STEP]++;
	} else if (c < 45) {
		dm_get(r, e);
		r->counts[C_GET]++;
	} else if (c < 65) {
		dm_write(r, e, C_SET);
		r->counts[C_SET]++;
	} else if (c < 72) {
		dm_write(r, e, C_ADD);
		r->counts[C_ADD]++;
	} else if (c < 79) {
		dm_write(r, e, C_REPLACE);
		r->counts[C_REPLACE]++;
	} else if (c < 88) {
		dm_del(r, e);
		r->counts[C_DEL]++;
	} else {
		dm_incr(r, e);
		r->counts[C_INCR]++;
	}
}

static uint64_t
dm_ops(const struct dm_params *p)
{
	return (uint64_t)(DM_OPS * p->share);
}

static void
dm_open(struct dm_run *r, const struct dm_params *p, uint64_t seed)
{
	shmt_config_t cfg;

	memset(r, 0, sizeof(*r));
	r->p = p;
	r->rs = seed;
	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.arena_bytes = 64ULL << 10;
	cfg.dict_bytes = p->dict_bytes;
	cfg.dict_shards = p->shards;
	cfg.dict_eviction = 0;
	cfg.counters_bytes = 0;
	tu_segname(r->seg, sizeof(r->seg), "dmodel");
	assert_int_equal(shmt_create(r->seg, &cfg, &r->h), 0);
	/* Where the keys land (shards, shared chains) follows the seed too,
	 * so that a run replays with SHMT_SEED: its own stream, so the
	 * operations drawn stay as they were. */
	{
		uint64_t ss = seed ^ 0x9e3779b97f4a7c15ULL;

		tu_secret(r->h, &ss);
	}
	r->clk.now = 3600ULL * 1000 * DM_MS;
	assert_int_equal(shmt_set_clock(r->h, tu_clock_read, &r->clk), 0);
	r->buf = malloc(p->vmax + 64);
	r->tmp = malloc(p->vmax + SHMT_KEY_MAX + 64);
	assert_non_null(r->buf);
	assert_non_null(r->tmp);
	dm_make_pool(r);
}

static void
dm_close(struct dm_run *r)
{
	shmt_close(r->h);
	assert_int_equal(shmt_unlink(r->seg), 0);
	for (uint32_t n = 0; n < r->p->nkeys; n++)
		free(r->e[n].val);
	free(r->e);
	free(r->table);
	free(r->buf);
	free(r->tmp);
}

static void
dm_run_set(const struct dm_params *p, uint64_t seed)
{
	struct dm_run r;
	uint64_t ops = dm_ops(p);

	dm_open(&r, p, seed);
	while (r.op < ops) {
		dm_one(&r);
		if (r.op % DM_WALK_EVERY == 0) {
			dm_walk(&r);
			r.counts[C_WALK]++;
		}
		if (r.op % (4 * DM_WALK_EVERY + 7) == 0)
			dm_housekeep(&r);
	}
	dm_walk(&r);
	dm_housekeep(&r);
	printf("# %s: %" PRIu64 " calls: get %" PRIu64 " set %" PRIu64
	    " add %" PRIu64 " replace %" PRIu64 " del %" PRIu64 " incr %"
	    PRIu64 ", %" PRIu64 " clock steps, %" PRIu64 " walks\n", p->name,
	    r.op, r.counts[C_GET], r.counts[C_SET], r.counts[C_ADD],
	    r.counts[C_REPLACE], r.counts[C_DEL], r.counts[C_INCR],
	    r.counts[C_STEP], r.counts[C_WALK]);
	dm_close(&r);
}

static void
test_model(void **state)
{
	uint64_t seed = tu_seed("test_dict_model");

	for (size_t i = 0; i < sizeof(dm_sets) / sizeof(dm_sets[0]); i++)
		dm_run_set(&dm_sets[i], seed + i);
}

/* The text forms incr reads, one by one: the contract names a decimal
 * integer that fits in int64_t, whatever its length, so a zero-padded
 * number longer than the longest int64 is still one. */
static void
test_incr_forms(void **state)
{
#define F(t, d, rc, w) { t, sizeof(t) - 1, d, rc, w }
	static const struct { const char *text; size_t len; int64_t delta;
	    int rc; int64_t want; } c[] = {
		F("41", 1, 0, 42),
		F("-0", 5, 0, 5),
		F("007", 1, 0, 8),
		F("9223372036854775806", 1, 0, INT64_MAX),
		F("9223372036854775807", 1, -ERANGE, 0),
		F("-9223372036854775808", -1, -ERANGE, 0),
		F("-9223372036854775807", -1, 0, INT64_MIN),
		F("9223372036854775808", 0, -EINVAL, 0),
		F("", 1, -EINVAL, 0),
		F("-", 1, -EINVAL, 0),
		F("+1", 1, -EINVAL, 0),
		F(" 1", 1, -EINVAL, 0),
		F("1 ", 1, -EINVAL, 0),
		F("1\0", 1, -EINVAL, 0),    /* the NUL is part of the value */
		F("0000000000000000000000000000042", 1, 0, 43),
	};
#undef F
	char seg[96], buf[64];
	shmt_config_t cfg;
	int wrong = 0;
	shmt_t *h;

	shmt_config_init(&cfg);
	cfg.dict_bytes = 2ULL << 20;
	cfg.dict_shards = 1;
	cfg.counters_bytes = 0;
	tu_segname(seg, sizeof(seg), "dincr");
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		size_t len = c[i].len;
		int64_t got = -1;
		size_t vlen;
		int rc;

		assert_int_equal(shmt_set(h, "n", 1, c[i].text, len, 0), 0);
		rc = shmt_incr(h, "n", 1, c[i].delta, &got);
		if (rc != c[i].rc) {
			/* Go on: one run names every form read wrongly. */
			printf("# incr of %s by %" PRId64 ": got %d, want %d\n",
			    dm_show((const unsigned char *)c[i].text, len, buf,
			    sizeof(buf)), c[i].delta, rc, c[i].rc);
			wrong++;
			continue;
		}
		assert_int_equal(shmt_get(h, "n", 1, buf, sizeof(buf), &vlen), 0);
		if (rc == 0) {
			assert_int_equal(got, c[i].want);
			buf[vlen] = '\0';
			assert_int_equal(strtoll(buf, NULL, 10), c[i].want);
		} else {
			/* Refused: the value is as it was. */
			assert_int_equal(vlen, len);
			assert_memory_equal(buf, c[i].text, len);
		}
	}
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	assert_int_equal(wrong, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_incr_forms, tu_sweep),
		cmocka_unit_test_teardown(test_model, tu_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
