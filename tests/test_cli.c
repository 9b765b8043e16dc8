/* SPDX-License-Identifier: MIT */
/*
 * The shmthrottle CLI, run as a real process on segments made here: golden
 * output of every command (human output after masking what changes from run
 * to run; JSON parsed and compared as documents, the volatile fields checked
 * against the library and the clock), exit codes and messages for a missing,
 * incompatible and damaged segment, and for bad command lines.
 *
 * Usage: test_cli CLI-BINARY GOLDEN-DIR.  SHMT_GOLDEN_UPDATE=1 rewrites the
 * golden files from the actual output (review the diff before committing).
 */
#include "testutil.h"

#include "dict.h"
#include "limiter.h"
#include "segment.h"
#include "test_cli_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#define NS_S 1000000000ULL
#define HOUR (3600 * NS_S)

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* A segment with four limiters and a known history: every grant was made
 * with an injected clock set 10 s in the past, and every window is an hour,
 * so nothing is released while the test runs and each count is exact. */
struct fx {
	char seg[128];
	shmt_t *h;
	struct tu_clock clk;
	shmt_time_t t0;
};

static void
define(shmt_t *h, const char *name, uint64_t limit, uint64_t slack_uses,
    int mode)
{
	shmt_limit_t l = { 0 };

	l.limit = limit;
	l.window_ns = HOUR;
	l.slack_ns = NS_S;
	l.slack_uses = slack_uses;
	l.mode = mode;
	assert_int_equal(shmt_limiter_define(h, name, &l), 0);
}

static void
define_extras(shmt_t *h)
{
	static const char *const keys[] = { "key-a", "key-b", "key-c" };
	shmt_limit_t l = { 0 };

	l.window_ns = HOUR;
	l.slack_ns = NS_S;
	l.slack_uses = 1;
	l.keys = keys;
	l.nkeys = 3;
	l.uses_per_key = 1;
	assert_int_equal(shmt_limiter_define(h, "pool", &l), 0);
	memset(&l, 0, sizeof(l));
	l.limit = 2;
	l.window_ns = HOUR;
	l.slack_ns = NS_S;
	l.slack_uses = 1;
	l.per_client = 1;
	l.client_capacity = 8;
	assert_int_equal(shmt_limiter_define(h, "per", &l), 0);
}

static void
grants(struct fx *f, const char *name, int n, int expect)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(shmt_try_use_key(f->h, name), expect);
}

/* Give a fixture's segment a fixed secret before anything is stored: the
 * golden files hold hashes and analyzer bounds, and the tests that damage
 * one shard expect the keys where they were, all of which depend on where
 * keys land. */
static void
fx_fixed_secret(shmt_t *h)
{
	static const uint8_t key[SHMT_SECRET_BYTES] = {
		0x67, 0x6f, 0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x73,
		0x65, 0x63, 0x72, 0x65, 0x74, 0x2d, 0x30, 0x31,
	};

	shmt__secret_set(h, key);
}

static void
fx_make(struct fx *f, const char *tag, int limiters)
{
	shmt_config_t cfg;

	memset(f, 0, sizeof(*f));
	tu_segname(f->seg, sizeof(f->seg), tag);
	tc_track(f->seg);
	tu_config_small(&cfg);
	assert_int_equal(shmt_create(f->seg, &cfg, &f->h), 0);
	fx_fixed_secret(f->h);
	if (!limiters)
		return;
	f->t0 = f->clk.now = shmt_now(f->h) - 10 * NS_S;
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);
	define(f->h, "api", 10, 4, SHMT_MODE_BUCKETS);
	define(f->h, "exact1", 3, 1, SHMT_MODE_EXACT);
	define_extras(f->h);
	/* api: a bucket sealed full (4), one closed by time at t0 + 1 s (2),
	 * one sealed full (4); then one denial with nothing free. */
	grants(f, "api", 6, 1);
	f->clk.now = f->t0 + 2 * NS_S;
	grants(f, "api", 4, 1);
	grants(f, "api", 1, 0);
	grants(f, "exact1", 2, 1);
}

#define BINKEY "\x01\xfe"
#define BINVAL "\x00\xff"

/* Dictionary items and counter hits written at t0, 10 s before the CLI
 * runs (on the real clock): "gone" had a 1 s TTL, so the CLI finds it
 * expired; "user:2" has an hour left. */
static void
fx_dict(struct fx *f)
{
	shmt_t *h = f->h;
	uint64_t n;

	assert_int_equal(shmt_set(h, "user:1", 6, "alice", 5, 0), 0);
	assert_int_equal(shmt_set(h, "user:2", 6, "bob", 3, 3600 * 1000), 0);
	assert_int_equal(shmt_set(h, "gone", 4, "x", 1, 1000), 0);
	assert_int_equal(shmt_set(h, "count", 5, "41", 2, 0), 0);
	assert_int_equal(shmt_set(h, BINKEY, 2, BINVAL, 2, 0), 0);
	assert_int_equal(shmt_set(h, "back\\slash", 10, "", 0, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(shmt_hit(h, "ip:10.0.0.1", 11, &n), 0);
	assert_int_equal(n, 3);
}

static void
fx_free(struct fx *f)
{
	tu_close_unlink(f->h, f->seg);
}

static void
expect_err(const struct tc_run *r, const char *what)
{
	if (strstr(r->err, what) == NULL)
		fail_msg("stderr lacks \"%s\": %s", what, r->err);
}

static json_t *
parse(const struct tc_run *r)
{
	json_error_t e;
	json_t *j = json_loads(r->out, 0, &e);

	if (j == NULL)
		fail_msg("not JSON (%s, line %d): %s", e.text, e.line, r->out);
	return j;
}

/* Null the volatile field at PATH ("a.b", "a[].b": in every element). */
static void
null_field(json_t *j, const char *path)
{
	const char *dot = strchr(path, '.');
	char key[64];

	if (dot == NULL) {
		if (json_object_get(j, path) == NULL)
			fail_msg("field %s missing", path);
		json_object_set_new(j, path, json_null());
		return;
	}
	snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
	if (strlen(key) > 2 && strcmp(key + strlen(key) - 2, "[]") == 0) {
		size_t i;
		json_t *e;

		key[strlen(key) - 2] = '\0';
		json_array_foreach(json_object_get(j, key), i, e)
			null_field(e, dot + 1);
		return;
	}
	null_field(json_object_get(j, key), dot + 1);
}

static void
golden_json(const char *name, json_t *actual)
{
	char path[4096], *text;
	json_error_t e;
	json_t *want;

	if (getenv("SHMT_GOLDEN_UPDATE") != NULL) {
		text = json_dumps(actual, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		assert_non_null(text);
		tc_golden(name, text);
		free(text);
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", tc_golden_dir, name);
	want = json_load_file(path, 0, &e);
	if (want == NULL)
		fail_msg("golden %s: %s", path, e.text);
	if (!json_equal(want, actual)) {
		text = json_dumps(actual, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		printf("# actual %s:\n%s\n", name, text);
		free(text);
		json_decref(want);
		fail_msg("JSON differs from golden %s", name);
	}
	json_decref(want);
}

static uint64_t
jint(json_t *j, const char *key)
{
	json_t *v = json_object_get(j, key);

	if (!json_is_integer(v))
		fail_msg("field %s is not an integer", key);
	return (uint64_t)json_integer_value(v);
}

static void
expect_now_inside(json_t *j, const struct tc_run *r)
{
	uint64_t now = jint(j, "now_ns");

	assert_true(now >= r->t_start && now <= r->t_end);
}

/* ---- stat ------------------------------------------------------------ */

static void
test_stat(void **state)
{
	shmt_segment_stat_t st;
	struct tc_run r;
	char fmtword[24];
	struct fx f;
	json_t *j;

	fx_make(&f, "stat", 1);
	fx_dict(&f);
	assert_int_equal(shmt_segment_stat(f.h, &st), 0);
	snprintf(fmtword, sizeof(fmtword), "0x%016" PRIx64, st.format);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "stat"));
	tc_replace(&r.out, f.seg, "{SEG}");
	tc_replace(&r.out, fmtword, "{FORMAT}");
	tc_mask(&r.out, "^created .*$", "created    {CREATED}");
	tc_golden("stat.txt", r.out);
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "stat"));
	j = parse(&r);
	assert_string_equal(json_string_value(json_object_get(j, "segment")),
	    f.seg);
	assert_string_equal(json_string_value(json_object_get(j, "format")),
	    fmtword);
	assert_true(jint(j, "created_wall_ns") == st.created_wall_ns);
	expect_now_inside(j, &r);
	null_field(j, "segment");
	null_field(j, "format");
	null_field(j, "created_wall_ns");
	null_field(j, "now_ns");
	golden_json("stat.json", j);
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

/* The default segment comes from $SHMTHROTTLE_SEGMENT; -s wins over it. */
static void
test_env_segment(void **state)
{
	char env[200], other[128];
	struct tc_run r;
	struct fx f;

	fx_make(&f, "env", 0);
	snprintf(env, sizeof(env), "SHMTHROTTLE_SEGMENT=%s", f.seg);
	tc_run(&r, (const char *const[]){ env, NULL }, ARGV("stat"));
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, f.seg));
	tc_run_free(&r);
	tu_segname(other, sizeof(other), "absent");
	tc_track(other);
	tc_run(&r, (const char *const[]){ env, NULL },
	    ARGV("-s", other, "stat"));
	assert_int_equal(r.status, 3);
	expect_err(&r, other);
	tc_run_free(&r);
	fx_free(&f);
}

/* The daemon line: up (a live pid with its start time and a heartbeat),
 * and down (a pid whose process is gone), as the header records them. */
static void
test_daemon_states(void **state)
{
	struct tc_run r;
	struct fx f;
	pid_t dead;
	json_t *j;

	fx_make(&f, "daemon", 0);
	f.h->hdr->sh_daemon_pid = getpid();
	f.h->hdr->sh_daemon_start = shmt__proc_start(getpid());
	f.h->hdr->sh_heartbeat_ns = shmt_now(f.h) - 250000000;
	f.h->hdr->sh_lag_ns = 35000;
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "stat"));
	if (strstr(r.out, "daemon     up, pid ") == NULL ||
	    strstr(r.out, "lag 35us") == NULL)
		fail_msg("stat: %s", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "stat"));
	j = parse(&r);
	{
		json_t *d = json_object_get(j, "daemon");
		uint64_t age = jint(d, "heartbeat_age_ns");

		assert_string_equal(json_string_value(json_object_get(d,
		    "state")), "up");
		assert_int_equal(jint(d, "pid"), getpid());
		/* The heartbeat was set 250 ms before "now" on our clock;
		 * the tool read its clock before r.t_end. */
		assert_true(age >= 250000000 &&
		    age <= r.t_end - f.h->hdr->sh_heartbeat_ns);
	}
	json_decref(j);
	tc_run_free(&r);

	dead = fork();
	assert_true(dead >= 0);
	if (dead == 0)
		_exit(0);
	assert_int_equal(waitpid(dead, NULL, 0), dead);
	f.h->hdr->sh_daemon_pid = dead;
	f.h->hdr->sh_daemon_start = 0;
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "stat"));
	if (strstr(r.out, "daemon     down, pid ") == NULL)
		fail_msg("stat: %s", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "check"));
	if (strstr(r.out, "warning: daemon: down (pid ") == NULL)
		fail_msg("check: %s", r.out);
	tc_run_free(&r);
	fx_free(&f);
}

/* ---- limiters and buckets -------------------------------------------- */

static void
test_limiters(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j, *api;

	fx_make(&f, "limiters", 1);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "limiters"));
	tc_golden("limiters.txt", r.out);
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "limiters", "--json"));
	j = parse(&r);
	expect_now_inside(j, &r);
	/* What the fixture did, independently of the golden file. */
	api = json_array_get(json_object_get(j, "limiters"), 0);
	assert_string_equal(json_string_value(json_object_get(api, "name")),
	    "api");
	assert_int_equal(jint(api, "in_flight"), 10);
	assert_int_equal(jint(api, "free"), 0);
	assert_int_equal(jint(api, "grants"), 10);
	assert_int_equal(jint(json_object_get(api, "denied"), "exhausted"), 1);
	null_field(j, "segment");
	null_field(j, "now_ns");
	golden_json("limiters.json", j);
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

/* Parse "in 1.5s", "2m05s ago", "now" back to signed nanoseconds. */
static int64_t
parse_rel(const char *s)
{
	static const struct { const char *u; double ns; } units[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
		{ "m", 60e9 }, { "h", 3600e9 }, { "d", 86400e9 },
	};
	int sign = strncmp(s, "in ", 3) == 0 ? 1 : -1;
	const char *p = sign > 0 ? s + 3 : s;
	double total = 0;

	if (strcmp(s, "now") == 0)
		return 0;
	while (*p >= '0' && *p <= '9') {
		char *end;
		double v = strtod(p, &end);
		size_t best = 0, k = 0;

		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (strncmp(end, units[i].u, strlen(units[i].u)) == 0 &&
			    strlen(units[i].u) > best)
				best = strlen(units[i].u), k = i;
		assert_true(best > 0);
		total += v * units[k].ns;
		p = end + best;
	}
	assert_true(sign > 0 ? *p == '\0' : strcmp(p, " ago") == 0);
	return (int64_t)(sign * total);
}

/* A relative time shown for T by a run that read its clock inside
 * [r->t_start, r->t_end]: within 1% (three digits) or 1 s (the m/s form)
 * of the truth, plus the run's own duration. */
static void
expect_rel(const char *cell, uint64_t t, const struct tc_run *r)
{
	int64_t shown = parse_rel(cell);
	int64_t hi = (int64_t)(t - r->t_start), lo = (int64_t)(t - r->t_end);
	int64_t slack = (llabs(hi) > llabs(lo) ? llabs(hi) : llabs(lo)) / 100 +
	    (int64_t)NS_S;

	if (shown < lo - slack || shown > hi + slack)
		fail_msg("'%s' is not %" PRId64 "..%" PRId64 " ns", cell, lo,
		    hi);
}

static void
check_bucket_rows(const struct tc_run *r, const shmt_bucket_info_t *b,
    int n)
{
	const char *line = strchr(r->out, '\n') + 1;  /* the title */
	int row = 0;

	line = strchr(line, '\n') + 1;                 /* the header */
	for (; *line != '\0' && row < n; row++) {
		char state[16], cl[32], rl[32];
		unsigned serial, uses;
		const char *eol = strchr(line, '\n');

		/* SERIAL USES STATE CLOSES RELEASES; the times have spaces
		 * ("in 1s", "8s ago"), so split on the two-space gutters. */
		assert_int_equal(sscanf(line, "%u %u %15s", &serial, &uses,
		    state), 3);
		assert_int_equal(serial, b[row].serial);
		assert_int_equal(uses, b[row].uses);
		assert_string_equal(state, b[row].active ? "active" : "sealed");
		{
			const char *p = strstr(line, state) + strlen(state);
			const char *q;

			while (*p == ' ')
				p++;
			q = strstr(p, "  ");
			assert_non_null(q);
			snprintf(cl, sizeof(cl), "%.*s", (int)(q - p), p);
			while (*q == ' ')
				q++;
			snprintf(rl, sizeof(rl), "%.*s", (int)(eol - q), q);
		}
		expect_rel(cl, b[row].close_ns, r);
		expect_rel(rl, b[row].release_ns, r);
		line = eol + 1;
	}
	assert_int_equal(row, n);
}

static void
test_buckets(void **state)
{
	shmt_bucket_info_t b[32];
	struct tc_run r;
	struct fx f;
	json_t *j, *e;
	size_t i;
	int n;

	fx_make(&f, "buckets", 1);
	n = shmt_limiter_buckets(f.h, "api", b, 32);
	assert_int_equal(n, 3);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "buckets", "api"));
	check_bucket_rows(&r, b, n);
	tc_mask(&r.out, "in [0-9][0-9.a-z]*|[0-9][0-9.a-z]* ago", "{REL}");
	tc_mask(&r.out, " +", " ");
	tc_golden("buckets.txt", r.out);
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "buckets", "api"));
	j = parse(&r);
	expect_now_inside(j, &r);
	assert_int_equal(json_array_size(json_object_get(j, "buckets")), 3);
	json_array_foreach(json_object_get(j, "buckets"), i, e) {
		uint64_t now = jint(j, "now_ns");

		assert_true(jint(e, "close_ns") == b[i].close_ns);
		assert_true(jint(e, "release_ns") == b[i].release_ns);
		assert_true(jint(e, "closes_in_ns") == b[i].close_ns - now);
		assert_true(jint(e, "releases_in_ns") == b[i].release_ns - now);
	}
	null_field(j, "now_ns");
	null_field(j, "buckets[].close_ns");
	null_field(j, "buckets[].release_ns");
	null_field(j, "buckets[].closes_in_ns");
	null_field(j, "buckets[].releases_in_ns");
	golden_json("buckets.json", j);
	json_decref(j);
	tc_run_free(&r);

	tc_expect_run(&r, 1, ARGV("-s", f.seg, "buckets", "nosuch"));
	expect_err(&r, "no limiter 'nosuch'");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "buckets", "exact1"));
	expect_err(&r, "exact mode");
	tc_run_free(&r);
	fx_free(&f);
}

/* ---- try and next-key ------------------------------------------------ */

static void
expect_out(struct fx *f, int status, const char *out, const char *const *argv)
{
	struct tc_run r;

	tc_expect_run(&r, status, argv);
	assert_string_equal(r.out, out);
	tc_run_free(&r);
}

static void
expect_prefix(struct fx *f, int status, const char *prefix,
    const char *const *argv)
{
	struct tc_run r;

	(void)f;
	tc_expect_run(&r, status, argv);
	if (strncmp(r.out, prefix, strlen(prefix)) != 0)
		fail_msg("stdout \"%s\" does not begin with \"%s\"", r.out,
		    prefix);
	tc_run_free(&r);
}

static uint64_t
ju64(json_t *j, const char *key)
{
	json_t *v = json_object_get(j, key);

	assert_true(json_is_integer(v));
	return (uint64_t)json_integer_value(v);
}

static void
test_try(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;
	uint64_t t0;

	fx_make(&f, "try", 1);
	expect_prefix(&f, 1, "throttled: retry in ", ARGV("-s", f.seg, "try",
	    "api"));
	expect_prefix(&f, 0, "granted: 0 of 3 remaining, all back in ",
	    ARGV("-s", f.seg, "try", "exact1"));
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "try", "exact1", "--json"));
	j = parse(&r);
	assert_true(json_is_false(json_object_get(j, "granted")));
	assert_string_equal(json_string_value(json_object_get(j, "limiter")),
	    "exact1");
	assert_int_equal(ju64(j, "limit"), 3);
	assert_int_equal(ju64(j, "remaining"), 0);
	assert_true(ju64(j, "retry_after_ns") > 0);
	/* Whole seconds, rounded up: waiting them is never too early. */
	assert_int_equal(ju64(j, "retry_after_s"),
	    (ju64(j, "retry_after_ns") + 999999999) / 1000000000);
	assert_true(ju64(j, "reset_after_ns") >= ju64(j, "retry_after_ns"));
	json_decref(j);
	tc_run_free(&r);

	expect_prefix(&f, 0, "granted: 1 of 2 remaining", ARGV("-s", f.seg,
	    "try", "per", "alice"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "try", "per", "alice"));
	j = parse(&r);
	assert_true(json_is_true(json_object_get(j, "granted")));
	assert_string_equal(json_string_value(json_object_get(j, "client")),
	    "alice");
	json_decref(j);
	tc_run_free(&r);
	expect_prefix(&f, 1, "throttled: retry in ", ARGV("-s", f.seg, "try",
	    "per", "alice"));
	/* A peek takes nothing: twice the same answer, then a try. */
	for (int i = 0; i < 2; i++) {
		tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "try", "per", "bob",
		    "--peek"));
		j = parse(&r);
		assert_true(json_is_true(json_object_get(j, "peek")));
		assert_int_equal(ju64(j, "remaining"), 1);
		json_decref(j);
		tc_run_free(&r);
	}
	expect_prefix(&f, 0, "would be granted: 1 of 2", ARGV("-s", f.seg, "try",
	    "per", "bob", "--peek"));
	/* per takes one use a bucket: no cost of 2. */
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "try", "per", "carol", "--cost",
	    "2"));
	expect_err(&r, "takes no cost of 2");
	tc_run_free(&r);
	expect_prefix(&f, 0, "granted: 1 of 2", ARGV("-s", f.seg, "try", "per",
	    "bob"));

	tc_expect_run(&r, 2, ARGV("-s", f.seg, "try", "per"));
	expect_err(&r, "is per client: give a CLIENT");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "try", "api", "bob"));
	expect_err(&r, "is not per client");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "try", "api", "--cost", "5"));
	expect_err(&r, "takes no cost of 5");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "try", "api", "--cost", "0"));
	tc_run_free(&r);
	/* An unknown limiter has its own exit code. */
	tc_expect_run(&r, 5, ARGV("-s", f.seg, "try", "nosuch"));
	expect_err(&r, "no limiter 'nosuch'");
	tc_run_free(&r);
	tc_expect_run(&r, 5, ARGV("-s", f.seg, "wait", "nosuch"));
	tc_run_free(&r);
	tc_expect_run(&r, 5, ARGV("-s", f.seg, "next-key", "nosuch"));
	tc_run_free(&r);

	/* wait: granted at once when there is room; a real timeout when
	 * there is not (api's uses come back in an hour). */
	expect_prefix(&f, 0, "granted: ", ARGV("-s", f.seg, "wait", "per",
	    "dave"));
	t0 = shmt__mono_ns();
	expect_prefix(&f, 1, "throttled: retry in ", ARGV("-s", f.seg, "wait",
	    "api", "--timeout", "60ms"));
	assert_true(shmt__mono_ns() - t0 >= 60000000ULL);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "wait", "api", "--timeout", "soon"));
	tc_run_free(&r);
	fx_free(&f);
}

static void
test_next_key(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "nextkey", 1);
	expect_out(&f, 0, "key-a\n", ARGV("-s", f.seg, "next-key", "pool"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "next-key", "pool"));
	j = parse(&r);
	assert_string_equal(json_string_value(json_object_get(j, "key")),
	    "key-b");
	json_decref(j);
	tc_run_free(&r);
	expect_out(&f, 0, "key-c\n", ARGV("-s", f.seg, "next-key", "pool"));
	/* Throttled: nothing on stdout, so $(...) is empty. */
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "next-key", "pool"));
	assert_string_equal(r.out, "");
	expect_err(&r, "throttled");
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "next-key", "pool", "--json"));
	j = parse(&r);
	assert_true(json_is_false(json_object_get(j, "granted")));
	assert_true(json_is_null(json_object_get(j, "key")));
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "next-key", "api"));
	expect_err(&r, "has no key pool");
	tc_run_free(&r);
	fx_free(&f);
}

/* ---- limiter set, limiter delete, reset -------------------------------- */

/* api holds 10 uses in flight (limit 10, window 1h, slack 1s/4, a ring of
 * 3603 buckets). */
static void
test_limiter_live(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "live", 1);
	{
		shmt_limit_t l;

		memset(&l, 0, sizeof(l));
		l.mode = SHMT_MODE_GCRA;
		l.limit = 10;
		l.window_ns = NS_S;
		l.burst = 2;
		assert_int_equal(shmt_limiter_define(f.h, "rate1", &l), 0);
	}
	expect_out(&f, 0, "limiter api: limit 6 per 1h, slack 1s/4; 10 uses in "
	    "flight kept\n", ARGV("-s", f.seg, "limiter", "set", "api",
	    "limit=6"));
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "try", "api"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "limiter", "set", "api",
	    "limit=20", "slack_time=1500ms"));
	j = parse(&r);
	assert_true(jint(j, "limit") == 20 && jint(j, "in_flight") == 10);
	assert_true(jint(j, "slack_ns") == 1500000000ULL);
	json_decref(j);
	tc_run_free(&r);
	/* 7200 + 5 buckets: more than the ring holds. */
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "limiter", "set", "api",
	    "window=2h"));
	expect_err(&r, "cannot change in place: the new parameters need 4805 "
	    "buckets");
	tc_run_free(&r);
	/* Exact mode: within the log it was defined with (3 grants). */
	expect_out(&f, 0, "limiter exact1: limit 2 per 2h; 2 uses in flight "
	    "kept\n", ARGV("-s", f.seg, "limiter", "set", "exact1", "limit=2",
	    "window=2h"));
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "try", "exact1"));
	tc_run_free(&r);
	/* Above it: a move gives it a larger log, its uses carried. */
	expect_prefix(&f, 0, "limiter exact1: limit 4 per 2h; 2 uses in flight "
	    "kept\ndefined anew by a move into a new generation: a log of 4 "
	    "records", ARGV("-s", f.seg, "limiter", "set", "exact1",
	    "limit=4"));
	/* Rate mode: limit, window and burst. */
	expect_out(&f, 0, "limiter rate1: limit 5 per 1s, burst 3; 0 uses in "
	    "flight kept\n", ARGV("-s", f.seg, "limiter", "set", "rate1",
	    "limit=5", "burst=3"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "limiter", "set",
	    "rate1", "window=2s"));
	j = parse(&r);
	assert_true(jint(j, "burst") == 3 && jint(j, "window_ns") == 2 * NS_S);
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "limiter", "set", "api", "mode=1"));
	expect_err(&r, "the modes are buckets, rate (gcra) and exact");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "limiter", "set", "api",
	    "colour=1"));
	expect_err(&r, "the keys are mode, limit, window, slack_time and "
	    "slack_uses");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "limiter", "set", "api",
	    "window=soon"));
	expect_err(&r, "a whole number and a unit");
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "limiter", "set", "api"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "limiter", "rename", "api"));
	tc_run_free(&r);
	/* No such limiter: 5, as try, wait and next-key say it. */
	tc_expect_run(&r, 5, ARGV("-s", f.seg, "limiter", "set", "nosuch",
	    "limit=3"));
	expect_err(&r, "no limiter 'nosuch'");
	tc_run_free(&r);
	tc_expect_run(&r, 5, ARGV("-s", f.seg, "--json", "limiter", "set",
	    "nosuch", "limit=3"));
	assert_string_equal(r.out, "");
	tc_run_free(&r);

	/* reset: everything back, counted; the per-client one by client. */
	expect_out(&f, 0, "reset api: 10 uses given back\n",
	    ARGV("-s", f.seg, "reset", "api"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "try", "api"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "try", "per", "10.0.0.1"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "try", "per", "10.0.0.1"));
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "try", "per", "10.0.0.1"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "reset", "per",
	    "10.0.0.1"));
	j = parse(&r);
	assert_true(jint(j, "given_back") == 2);
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "try", "per", "10.0.0.1"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", f.seg, "reset", "api", "10.0.0.1"));
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "reset", "nope"));
	tc_run_free(&r);

	/* delete */
	expect_out(&f, 0, "deleted limiter exact1\n",
	    ARGV("-s", f.seg, "limiter", "delete", "exact1"));
	tc_expect_run(&r, 5, ARGV("-s", f.seg, "try", "exact1"));
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "limiter", "delete", "exact1"));
	expect_err(&r, "no limiter 'exact1'");
	tc_run_free(&r);
	fx_free(&f);
}

/* ---- check ------------------------------------------------------------ */

static void
test_check_healthy(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "checkok", 1);
	/* Two buckets sealed full just now, on the real clock: their close
	 * times lie ahead, which is no problem. */
	assert_int_equal(shmt_set_clock(f.h, NULL, NULL), 0);
	grants(&f, "pool", 2, 1);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "check"));
	tc_replace(&r.out, f.seg, "{SEG}");
	tc_golden("check.txt", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "check", "--json"));
	j = parse(&r);
	assert_true(json_is_true(json_object_get(j, "ok")));
	assert_int_equal(json_array_size(json_object_get(j, "problems")), 0);
	assert_int_equal(jint(j, "limiters_checked"), 4);
	assert_int_equal(jint(j, "buckets_checked"), 3 + 2);
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

/* A state word that claims more uses in flight than the limit: check
 * names the limiter and exits 4. */
static void
test_check_damaged_limiter(void **state)
{
	struct shmt_lim *row;
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "checkbad", 1);
	row = tu_row_of(f.h, "api");
	row->lm_w.w[0] += (uint64_t)5 << 32;
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "check"));
	if (strstr(r.out, "problem: limiter api: ") == NULL)
		fail_msg("check does not name limiter api: %s", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "--json", "check"));
	j = parse(&r);
	assert_true(json_is_false(json_object_get(j, "ok")));
	assert_true(json_array_size(json_object_get(j, "problems")) >= 1);
	json_decref(j);
	tc_run_free(&r);
	row->lm_w.w[0] -= (uint64_t)5 << 32;
	fx_free(&f);
}

/* ---- the dictionary and the counters ---------------------------------- */

static void expect_usage(const char *const *argv, const char *msg);

/* Run with stdin IN and expect exit STATUS. */
static void
expect_run_in(struct tc_run *r, int status, const void *in, size_t inlen,
    const char *const *argv)
{
	tc_run_in(r, NULL, argv, in, inlen);
	if (r->status != status)
		fail_msg("%s: exit %d, expected %d\nstderr: %s", argv[2],
		    r->status, status, r->err);
}

/* The value of KEY through the library, as a NUL-terminated copy (the
 * test's values have no NUL), or NULL when absent. */
static char *
lib_get(shmt_t *h, const char *key)
{
	static char buf[256];
	size_t n;
	int rc = shmt_get(h, key, strlen(key), buf, sizeof(buf) - 1, &n);

	if (rc == -ENOENT)
		return NULL;
	assert_int_equal(rc, 0);
	buf[n] = '\0';
	return buf;
}

static void
test_get(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "get", 1);
	fx_dict(&f);
	/* The exact bytes: no newline added. */
	expect_out(&f, 0, "alice", ARGV("-s", f.seg, "get", "user:1"));
	expect_out(&f, 0, "", ARGV("-s", f.seg, "get", "back\\slash"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "get", "--key-hex", "01FE"));
	assert_int_equal(r.outlen, 2);
	assert_memory_equal(r.out, BINVAL, 2);
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "get", "user:2"));
	j = parse(&r);
	golden_json("get.json", j);
	json_decref(j);
	tc_run_free(&r);
	/* Neither key nor value is UTF-8: both come as base64. */
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "get", "--json", "--key-hex",
	    "01fe"));
	j = parse(&r);
	golden_json("get-binary.json", j);
	json_decref(j);
	tc_run_free(&r);

	/* Expired 9 s before the CLI ran, and never there: exit 1. */
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "get", "gone"));
	assert_string_equal(r.out, "");
	expect_err(&r, "no key 'gone'");
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "get", "--json", "nosuch"));
	j = parse(&r);
	assert_true(json_is_false(json_object_get(j, "found")));
	assert_null(json_object_get(j, "value"));
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

static void
test_set(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;
	uint64_t ttl_ms = 500;

	fx_make(&f, "set", 1);
	fx_dict(&f);
	expect_out(&f, 0, "", ARGV("-s", f.seg, "set", "user:3", "carol"));
	assert_string_equal(lib_get(f.h, "user:3"), "carol");
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "set", "user:3", "dave",
	    "--ttl", "10m"));
	j = parse(&r);
	golden_json("set.json", j);
	json_decref(j);
	tc_run_free(&r);
	assert_string_equal(lib_get(f.h, "user:3"), "dave");

	/* --nx only adds, --xx only replaces; a refusal changes nothing. */
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "set", "--nx", "user:1", "eve"));
	expect_err(&r, "key 'user:1' already exists");
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "set", "--xx", "user:9", "eve"));
	expect_err(&r, "no key 'user:9'");
	tc_run_free(&r);
	assert_string_equal(lib_get(f.h, "user:1"), "alice");
	assert_null(lib_get(f.h, "user:9"));
	expect_out(&f, 0, "", ARGV("-s", f.seg, "set", "--nx", "user:9",
	    "eve"));
	expect_out(&f, 0, "", ARGV("-s", f.seg, "set", "--xx", "user:9",
	    "frank"));
	assert_string_equal(lib_get(f.h, "user:9"), "frank");

	/* --ttl 500ms: the item expires between 500 ms after the run began
	 * and 500 ms after it ended, seen through the injected clock. */
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "set", "short", "v", "--ttl",
	    "500ms"));
	f.clk.now = r.t_start + ttl_ms * 1000000 - 1;
	assert_string_equal(lib_get(f.h, "short"), "v");
	f.clk.now = r.t_end + ttl_ms * 1000000;
	assert_null(lib_get(f.h, "short"));
	tc_run_free(&r);
	fx_free(&f);
}

/* Values through stdin keep every byte, up to exactly 1 MiB; one byte
 * more is refused with exit 2 and leaves the old value. */
static void
test_set_stdin(void **state)
{
	static const char bin[] = "a\0b\xff\n\x00\xfe";
	unsigned char *big = malloc(SHMT_VALUE_MAX + 1);
	shmt_config_t cfg;
	struct tc_run r;
	char seg[128];
	size_t n;
	shmt_t *h;

	assert_non_null(big);
	tu_segname(seg, sizeof(seg), "stdin");
	tc_track(seg);
	/* One shard of 4 MiB: a 1 MiB value always fits. */
	shmt_config_init(&cfg);
	cfg.max_slots = 16;
	cfg.arena_bytes = 64 << 10;
	cfg.dict_bytes = 4 << 20;
	cfg.dict_shards = 1;
	cfg.counters_bytes = 0;
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);

	expect_run_in(&r, 0, bin, sizeof(bin) - 1, ARGV("-s", seg, "set", "b",
	    "-"));
	tc_run_free(&r);
	assert_int_equal(shmt_get(h, "b", 1, big, SHMT_VALUE_MAX, &n), 0);
	assert_int_equal(n, sizeof(bin) - 1);
	assert_memory_equal(big, bin, n);
	tc_expect_run(&r, 0, ARGV("-s", seg, "get", "b"));
	assert_int_equal(r.outlen, sizeof(bin) - 1);
	assert_memory_equal(r.out, bin, r.outlen);
	tc_run_free(&r);

	for (size_t i = 0; i <= SHMT_VALUE_MAX; i++)
		big[i] = (unsigned char)(i * 7 + (i >> 12));
	expect_run_in(&r, 0, big, SHMT_VALUE_MAX, ARGV("-s", seg, "set", "big",
	    "-"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "get", "big"));
	assert_int_equal(r.outlen, SHMT_VALUE_MAX);
	assert_memory_equal(r.out, big, SHMT_VALUE_MAX);
	tc_run_free(&r);
	expect_run_in(&r, 2, big, SHMT_VALUE_MAX + 1, ARGV("-s", seg, "set",
	    "b", "-"));
	expect_err(&r, "over 1048576 bytes");
	tc_run_free(&r);
	assert_int_equal(shmt_get(h, "b", 1, big, SHMT_VALUE_MAX, &n), 0);
	assert_int_equal(n, sizeof(bin) - 1);
	/* An empty stdin stores an empty value. */
	expect_run_in(&r, 0, "", 0, ARGV("-s", seg, "set", "b", "-"));
	tc_run_free(&r);
	assert_int_equal(shmt_get(h, "b", 1, big, SHMT_VALUE_MAX, &n), 0);
	assert_int_equal(n, 0);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
	free(big);
}

static void
test_del_incr(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "delincr", 1);
	fx_dict(&f);
	expect_out(&f, 0, "", ARGV("-s", f.seg, "del", "user:1"));
	assert_null(lib_get(f.h, "user:1"));
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "del", "user:1"));
	expect_err(&r, "no key 'user:1'");
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "del", "--key-hex",
	    "01fe"));
	j = parse(&r);
	golden_json("del.json", j);
	json_decref(j);
	tc_run_free(&r);

	expect_out(&f, 0, "42\n", ARGV("-s", f.seg, "incr", "count"));
	expect_out(&f, 0, "50\n", ARGV("-s", f.seg, "incr", "count", "8"));
	expect_out(&f, 0, "-10\n", ARGV("-s", f.seg, "incr", "count", "--",
	    "-60"));
	assert_string_equal(lib_get(f.h, "count"), "-10");
	expect_out(&f, 0, "1\n", ARGV("-s", f.seg, "incr", "fresh"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "incr", "--json", "fresh", "2"));
	j = parse(&r);
	golden_json("incr.json", j);
	json_decref(j);
	tc_run_free(&r);

	tc_expect_run(&r, 1, ARGV("-s", f.seg, "incr", "user:2"));
	expect_err(&r, "not a decimal integer");
	tc_run_free(&r);
	assert_int_equal(shmt_set(f.h, "max", 3, "9223372036854775807", 19, 0),
	    0);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "incr", "max"));
	expect_err(&r, "overflows");
	tc_run_free(&r);
	assert_string_equal(lib_get(f.h, "max"), "9223372036854775807");
	fx_free(&f);
}

static void
test_keys(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_make(&f, "keys", 1);
	fx_dict(&f);
	/* Sorted by bytes, escaped; the expired key is not listed. */
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "keys"));
	tc_golden("keys.txt", r.out);
	tc_run_free(&r);
	expect_out(&f, 0, "user:1\nuser:2\n", ARGV("-s", f.seg, "keys",
	    "user:*"));
	expect_out(&f, 0, "\\x01\\xfe\n", ARGV("-s", f.seg, "keys",
	    "\\\\x01*"));
	expect_out(&f, 0, "", ARGV("-s", f.seg, "keys", "nomatch*"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "keys"));
	j = parse(&r);
	null_field(j, "segment");
	golden_json("keys.json", j);
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

/* A chain that links to itself: keys reports the damage and ends, instead
 * of listing one key for ever. */
static void
test_keys_cycle(void **state)
{
	const struct shmt_store *st;
	struct tc_run r;
	struct fx f;
	int made = 0;

	(void)state;
	fx_make(&f, "keycyc", 0);
	/* A value too long for the bucket's slot: the item is in a chain. */
	assert_int_equal(shmt_set(f.h, "loop", 4,
	    "a value of forty bytes: too long for any", 40, 0), 0);
	st = f.h->dict;
	for (uint32_t i = 0; i < st->shards; i++) {
		char *sh = st->base + (uint64_t)i * st->stride;
		struct shmt_bucket *index =
		    (struct shmt_bucket *)(sh + st->index_off);
		uint64_t link = 0;
		struct shmt_item *it;

		for (uint64_t b = 0; b < st->nbuckets && link == 0; b++)
			link = index[b].bk_head;
		if (link == 0)
			continue;
		it = (struct shmt_item *)(sh + st->heap_off + link_off(link));
		it->it_next = link;
		made++;
	}
	assert_int_equal(made, 1);
	tc_run(&r, NULL, ARGV("-s", f.seg, "keys"));
	assert_int_equal(r.status, 4);
	assert_non_null(strstr(r.err, "corrupted"));
	/* Not one key listed twice. */
	assert_true(strstr(r.out, "loop\nloop") == NULL);
	tc_run_free(&r);
	fx_free(&f);
}

/* A shard whose lock word names a live process that holds nothing: set
 * says so promptly, and check names the process. */
static void
test_set_locked(void **state)
{
	char pid_text[32], *sh;
	struct tc_run r;
	struct fx f;
	int p[2];
	pid_t child;

	(void)state;
	fx_make(&f, "locked", 0);
	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		shmt_t *c = NULL;

		alarm(60);
		close(p[0]);
		if (shmt_open(f.seg, &c) != 0 || write(p[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], pid_text, 1), 1);
	close(p[0]);
	/* Every shard of the dictionary names the child. */
	for (uint32_t i = 0; i < f.h->dict->shards; i++) {
		sh = f.h->dict->base + (uint64_t)i * f.h->dict->stride;
		__atomic_store_n(&((struct shmt_shard *)(void *)sh)->ds_lock.lk_owner,
		    (uint32_t)child, __ATOMIC_RELEASE);
	}
	tc_run(&r, NULL, ARGV("-s", f.seg, "set", "k", "v"));
	assert_int_equal(r.status, 3);
	assert_non_null(strstr(r.err, "held by a live process"));
	assert_true(r.t_end - r.t_start < 5000000000ULL);
	tc_run_free(&r);
	snprintf(pid_text, sizeof(pid_text), "process %d", (int)child);
	tc_run(&r, NULL, ARGV("-s", f.seg, "check"));
	assert_int_equal(r.status, 4);
	assert_non_null(strstr(r.out, pid_text));
	tc_run_free(&r);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	fx_free(&f);
}

static void
test_hit(void **state)
{
	struct tc_run r;
	struct fx f;
	uint64_t n;
	json_t *j;

	fx_make(&f, "hit", 1);
	fx_dict(&f);
	/* Three hits 8 s earlier lie in the window: the CLI's is the 4th. */
	expect_out(&f, 0, "4 (exact)\n", ARGV("-s", f.seg, "hit",
	    "ip:10.0.0.1"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "hit", "ip:10.0.0.1"));
	j = parse(&r);
	golden_json("hit.json", j);
	json_decref(j);
	tc_run_free(&r);
	expect_out(&f, 0, "1 (exact)\n", ARGV("-s", f.seg, "hit", "--key-hex",
	    "00"));
	f.clk.now = tu_mono_ns();
	assert_int_equal(shmt_hit(f.h, "ip:10.0.0.1", 11, &n), 0);
	assert_int_equal(n, 6);
	fx_free(&f);
}

/* A segment made without a dictionary and counters: every command that
 * needs them says so and exits 3; stat shows both as none. */
static void
test_no_dict(void **state)
{
	static const char *const cmds[][4] = {
		{ "get", "k" }, { "set", "k", "v" }, { "del", "k" },
		{ "incr", "k" }, { "keys" }, { "keys", "a*" },
	};
	shmt_config_t cfg;
	struct tc_run r;
	char seg[128];
	shmt_t *h;
	json_t *j;

	tu_segname(seg, sizeof(seg), "nodict");
	tc_track(seg);
	shmt_config_init(&cfg);
	cfg.max_slots = 16;
	cfg.arena_bytes = 64 << 10;
	cfg.dict_bytes = 0;
	cfg.counters_bytes = 0;
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		tc_expect_run(&r, 3, ARGV("-s", seg, cmds[i][0], cmds[i][1],
		    cmds[i][2], cmds[i][3]));
		expect_err(&r, "has no dictionary");
		assert_string_equal(r.out, "");
		tc_run_free(&r);
	}
	tc_expect_run(&r, 3, ARGV("-s", seg, "hit", "k"));
	expect_err(&r, "has no counters");
	tc_run_free(&r);
	tc_expect_run(&r, 3, ARGV("-s", seg, "count", "k"));
	expect_err(&r, "has no counters");
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "stat"));
	if (strstr(r.out, "dictionary none") == NULL ||
	    strstr(r.out, "counters   none") == NULL ||
	    strstr(r.out, "\ndictionary  ") == NULL)
		fail_msg("stat: %s", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "stat"));
	j = parse(&r);
	assert_true(json_is_null(json_object_get(j, "dictionary")));
	assert_true(json_is_null(json_object_get(j, "counters")));
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "check"));
	tc_run_free(&r);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

static void
test_dict_usage(void **state)
{
	char longkey[SHMT_KEY_MAX + 2];

	memset(longkey, 'k', SHMT_KEY_MAX + 1);
	longkey[SHMT_KEY_MAX + 1] = '\0';
	expect_usage(ARGV("get"), "missing KEY");
	expect_usage(ARGV("set", "k"), "missing KEY VALUE|-");
	expect_usage(ARGV("set", "k", "v", "w"), "unexpected argument 'w'");
	expect_usage(ARGV("set", "--nx", "--xx", "k", "v"), "exclude each");
	expect_usage(ARGV("set", "--ttl", "soon", "k", "v"), "bad TTL 'soon'");
	expect_usage(ARGV("set", "--ttl", "1.5us", "k", "v"), "bad TTL");
	expect_usage(ARGV("get", ""), "must not be empty");
	expect_usage(ARGV("get", longkey), "key of 1025 bytes");
	expect_usage(ARGV("get", "--key-hex", "0g"), "bad hex key '0g'");
	expect_usage(ARGV("del", "--key-hex", "abc"), "bad hex key");
	expect_usage(ARGV("incr", "k", "x"), "bad number 'x'");
	expect_usage(ARGV("incr", "k", "-5"), "unknown option '-5'");
	expect_usage(ARGV("keys", "a", "b"), "unexpected argument 'b'");
	expect_usage(ARGV("hit"), "missing KEY");
	expect_usage(ARGV("get", "--ttl", "1s", "k"), "unknown option");
}

/* A chain head of dictionary shard 1 pointing outside its heap: check
 * names the shard and exits 4; the rest of the segment still reads. */
static void
test_check_damaged_dict(void **state)
{
	const struct shmt_store *st;
	struct tc_run r;
	uint64_t *index, saved;
	struct fx f;
	json_t *j, *e;
	size_t i;
	int named = 0;

	fx_make(&f, "checkdict", 1);
	fx_dict(&f);
	st = f.h->dict;
	assert_int_equal(st->shards, 2);
	index = &((struct shmt_bucket *)(st->base + st->stride +
	    st->index_off))[3].bk_head;
	saved = index[0];
	index[0] = link_make(st->heap_bytes + 4096, 0);
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "check"));
	if (strstr(r.out, "problem: dictionary shard 1: bucket 3 links to an "
	    "invalid item") == NULL)
		fail_msg("check does not name dictionary shard 1: %s", r.out);
	if (strstr(r.out, "shard 0") != NULL)
		fail_msg("check blames shard 0: %s", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "--json", "check"));
	j = parse(&r);
	assert_true(json_is_false(json_object_get(j, "ok")));
	json_array_foreach(json_object_get(j, "problems"), i, e)
		named += strcmp(json_string_value(json_object_get(e, "where")),
		    "dictionary shard 1") == 0;
	assert_true(named >= 1);
	json_decref(j);
	tc_run_free(&r);
	index[0] = saved;
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "check"));
	tc_run_free(&r);
	fx_free(&f);
}

/* ---- top: the hot keys ------------------------------------------------- */

#define MIN_NS (60 * NS_S)
#define TOP_BATCHES 4
#define TOP_BATCH 500
#define LONGKEY "long:0123456789abcdef0123456789abcdef0123456789abcdef0123456"
#define WARMKEY "\x01warm\xff"

/* The trace: TOP_BATCHES batches of TOP_BATCH requests, one batch per
 * sub-window (5 min of a 1 h window), fed on the injected clock over the
 * last 20 minutes.  Per batch: user:hot 150 (30%), the binary WARMKEY 75
 * (15%), LONGKEY (60 bytes, more than the analyzer keeps) 60 (12%), the
 * client "bob" of a per-client limiter 55 (11%), and 160 noise keys seen
 * once each, in an order shuffled with a fixed seed so that the golden
 * files hold.  The test knows every key's true count. */
enum { T_HOT, T_WARM, T_LONG, T_CLIENT, T_NOISE };
static const unsigned top_mix[] = { 150, 75, 60, 55, 160 };

static void
fx_top(struct fx *f, const char *tag)
{
	shmt_limit_t l = { 0 };
	shmt_config_t cfg;
	uint64_t rng = 0x5eed0f70b5ULL;
	int noise = 0;

	memset(f, 0, sizeof(*f));
	tu_segname(f->seg, sizeof(f->seg), tag);
	tc_track(f->seg);
	shmt_config_init(&cfg);
	cfg.max_limiters = 4;
	cfg.max_slots = 16;
	cfg.arena_bytes = 1 << 20;
	cfg.dict_bytes = 4 << 20;
	cfg.dict_shards = 2;
	cfg.counters_bytes = 0;
	/* An hour's window: what the test fed stays inside it however slow
	 * the machine, and the covered span is 60 to 65 minutes. */
	cfg.analyzer_window_ns = HOUR;
	cfg.analyzer_subwindows = 12;
	cfg.analyzer_clients = 1;
	assert_int_equal(shmt_create(f->seg, &cfg, &f->h), 0);
	fx_fixed_secret(f->h);
	l.limit = 1000;
	l.window_ns = HOUR;
	l.slack_ns = NS_S;
	l.slack_uses = 1;
	l.per_client = 1;
	l.client_capacity = 8;
	assert_int_equal(shmt_limiter_define(f->h, "per", &l), 0);
	assert_int_equal(shmt_set(f->h, "user:hot", 8, "v", 1, 0), 0);
	f->t0 = shmt_now(f->h);
	assert_int_equal(shmt_set_clock(f->h, tu_clock_read, &f->clk), 0);
	if (f->t0 < TOP_BATCHES * 5 * MIN_NS) {
		/* The trace reaches 20 minutes back on the monotonic clock. */
		printf("# monotonic clock under 20 minutes old: skipped\n");
		fx_free(f);
		skip();
	}
	for (int b = 0; b < TOP_BATCHES; b++) {
		unsigned char order[TOP_BATCH];
		size_t k = 0;

		for (int t = T_HOT; t <= T_NOISE; t++)
			for (unsigned i = 0; i < top_mix[t]; i++)
				order[k++] = (unsigned char)t;
		assert_int_equal(k, TOP_BATCH);
		for (size_t i = TOP_BATCH - 1; i > 0; i--) {
			size_t j = tu_rand(&rng) % (i + 1);
			unsigned char x = order[i];

			order[i] = order[j];
			order[j] = x;
		}
		f->clk.now = f->t0 - (uint64_t)(TOP_BATCHES - 1 - b) * 5 * MIN_NS;
		for (size_t i = 0; i < TOP_BATCH; i++) {
			char key[32], buf[8];
			size_t n;

			switch (order[i]) {
			case T_HOT:
				assert_int_equal(shmt_get(f->h, "user:hot", 8,
				    buf, sizeof(buf), &n), 0);
				break;
			case T_WARM:
				assert_int_equal(shmt_get(f->h, WARMKEY, 6,
				    buf, sizeof(buf), &n), -ENOENT);
				break;
			case T_LONG:
				assert_int_equal(strlen(LONGKEY), 60);
				assert_int_equal(shmt_get(f->h, LONGKEY, 60,
				    buf, sizeof(buf), &n), -ENOENT);
				break;
			case T_CLIENT:
				assert_int_equal(shmt_try_use(f->h, "per", "bob",
				    3), 1);
				break;
			default:
				snprintf(key, sizeof(key), "noise:%d", noise++);
				assert_int_equal(shmt_get(f->h, key, strlen(key),
				    buf, sizeof(buf), &n), -ENOENT);
				break;
			}
		}
	}
}

/* The true count of the key of JSON row E, as the trace made it. */
static uint64_t
top_truth(json_t *e)
{
	const char *kind = json_string_value(json_object_get(e, "kind"));
	const char *key = json_string_value(json_object_get(e, "key"));
	json_t *enc = json_object_get(e, "key_encoding");
	uint64_t len = jint(e, "key_length");

	assert_non_null(key);
	if (strcmp(kind, "client") == 0) {
		assert_string_equal(key, "bob");
		return TOP_BATCHES * top_mix[T_CLIENT];
	}
	assert_string_equal(kind, "dict");
	if (enc != NULL) {
		/* WARMKEY is not UTF-8: base64 of its 6 bytes. */
		assert_string_equal(json_string_value(enc), "base64");
		assert_string_equal(key, "AXdhcm3/");
		return TOP_BATCHES * top_mix[T_WARM];
	}
	if (strcmp(key, "user:hot") == 0)
		return TOP_BATCHES * top_mix[T_HOT];
	if (len == 60) {
		/* More than the analyzer keeps: a prefix, marked. */
		assert_true(json_is_true(json_object_get(e, "truncated")));
		assert_true(strlen(key) < 60);
		assert_memory_equal(key, LONGKEY, strlen(key));
		return TOP_BATCHES * top_mix[T_LONG];
	}
	assert_memory_equal(key, "noise:", 6);
	return 1;
}

/* Every key over 10% of the trace is listed, each row's bounds hold its
 * true count, and each row had more than listed_floor. */
static void
top_check_truth(json_t *j)
{
	uint64_t total = TOP_BATCHES * TOP_BATCH, seen = 0;
	size_t i;
	json_t *e;

	assert_true(jint(j, "total") == total);
	json_array_foreach(json_object_get(j, "keys"), i, e) {
		uint64_t truth = top_truth(e);

		if (jint(e, "lower") > truth || jint(e, "upper") < truth)
			fail_msg("row %zu: %" PRIu64 " not in [%" PRIu64 ", %"
			    PRIu64 "]", i, truth, jint(e, "lower"),
			    jint(e, "upper"));
		assert_true(json_real_value(json_object_get(e, "share")) ==
		    (double)jint(e, "lower") / (double)total);
		/* The bounds a listed key is held to (README "Hot keys"). */
		assert_true(jint(e, "oldest_part") == jint(e, "upper") -
		    jint(e, "lower") - jint(j, "error_window"));
		if ((double)truth <=
		    json_real_value(json_object_get(j, "listed_floor")))
			fail_msg("row %zu: %" PRIu64 " requests, not over "
			    "listed_floor", i, truth);
		if (truth * 10 > total)
			seen++;
	}
	assert_int_equal(seen, 4);
}

static void
test_top(void **state)
{
	struct tc_run r;
	struct fx f;
	json_t *j;

	fx_top(&f, "top");
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "top"));
	j = parse(&r);
	top_check_truth(j);
	expect_now_inside(j, &r);
	assert_true(jint(j, "span_end_ns") == jint(j, "now_ns"));
	assert_true(jint(j, "span_ns") == jint(j, "now_ns") -
	    jint(j, "span_start_ns"));
	/* The span covers the window and at most one sub-window more (less
	 * only when the monotonic clock has run for less than that), and so
	 * the whole trace. */
	assert_true(jint(j, "span_ns") >= HOUR || jint(j, "span_start_ns") == 0);
	assert_true(jint(j, "span_ns") <= HOUR + 5 * MIN_NS);
	assert_true(jint(j, "span_start_ns") <=
	    f.t0 - (TOP_BATCHES - 1) * 5 * MIN_NS);
	null_field(j, "segment");
	null_field(j, "now_ns");
	null_field(j, "span_start_ns");
	null_field(j, "span_end_ns");
	null_field(j, "span_ns");
	golden_json("top.json", j);
	json_decref(j);
	tc_run_free(&r);

	tc_expect_run(&r, 0, ARGV("-s", f.seg, "top"));
	{
		char span[32], ago[48];

		int64_t shown, lo = (int64_t)(r.t_start < HOUR ? r.t_start :
		    HOUR) - (int64_t)NS_S;

		/* "1h03m" (minutes truncated) or, on a clock younger than
		 * the window, "42m05s" (seconds truncated). */
		assert_int_equal(sscanf(r.out, "last %31[0-9hms]:", span), 1);
		snprintf(ago, sizeof(ago), "%s ago", span);
		shown = -parse_rel(ago);
		if (shown < lo - (int64_t)MIN_NS ||
		    shown > (int64_t)(HOUR + 5 * MIN_NS))
			fail_msg("span '%s' is not the window", span);
	}
	tc_mask(&r.out, "^last [0-9hms]+:", "last {SPAN}:");
	tc_golden("top.txt", r.out);
	tc_run_free(&r);

	/* -n cuts the list and says how many more there are. */
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "top", "-n", "1"));
	assert_non_null(strstr(r.out, "\ndict  user:hot "));
	assert_non_null(strstr(r.out, "\n... 3 more (-n 0 shows all)\n"));
	assert_null(strstr(r.out, "bob"));
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "top", "--json", "-n", "2"));
	j = parse(&r);
	assert_int_equal(jint(j, "hot"), 4);
	assert_int_equal(json_array_size(json_object_get(j, "keys")), 2);
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

/* A key seen once and absent from the dictionary is known by its hash
 * alone; a window without requests has no hot key and still exits 0. */
static void
test_top_hash_only(void **state)
{
	struct tc_run r;
	char want[64];
	struct fx f;
	json_t *j, *e;
	size_t n;

	fx_make(&f, "tophash", 0);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "top"));
	assert_non_null(strstr(r.out, ": 0 requests, error <= 0 per key "
	    "(0.00% of them; bound total / 129 = 0); last "));
	assert_non_null(strstr(r.out, " exactly: >= 0 requests, error <= 0 "
	    "per key; threshold 10%, certified for the exact window\n"
	    "(no key over the threshold)\n"));
	tc_run_free(&r);
	assert_int_equal(shmt_get(f.h, "solo", 4, NULL, 0, &n), -ENOENT);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "top"));
	j = parse(&r);
	assert_int_equal(jint(j, "total"), 1);
	e = json_array_get(json_object_get(j, "keys"), 0);
	assert_true(json_is_null(json_object_get(e, "key")));
	assert_true(json_is_null(json_object_get(e, "key_length")));
	assert_int_equal(jint(e, "lower"), 1);
	snprintf(want, sizeof(want), "dict  (hash %s)",
	    json_string_value(json_object_get(e, "hash")));
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "top"));
	if (strstr(r.out, want) == NULL)
		fail_msg("top lacks \"%s\": %s", want, r.out);
	tc_run_free(&r);
	fx_free(&f);
}

/* A segment made without the analyzer: top says so and exits 3; stat
 * shows it as none. */
static void
test_no_analyzer(void **state)
{
	shmt_config_t cfg;
	struct tc_run r;
	char seg[128];
	shmt_t *h;
	json_t *j;

	tu_segname(seg, sizeof(seg), "noan");
	tc_track(seg);
	shmt_config_init(&cfg);
	cfg.max_slots = 16;
	cfg.arena_bytes = 64 << 10;
	cfg.dict_bytes = 4 << 20;
	cfg.dict_shards = 1;
	cfg.counters_bytes = 0;
	cfg.analyzer_bytes = 0;
	assert_int_equal(shmt_create(seg, &cfg, &h), 0);
	tc_expect_run(&r, 3, ARGV("-s", seg, "top"));
	expect_err(&r, "has no analyzer");
	expect_err(&r, seg);
	assert_string_equal(r.out, "");
	tc_run_free(&r);
	tc_expect_run(&r, 3, ARGV("-s", seg, "--json", "top", "-n", "3"));
	expect_err(&r, "has no analyzer");
	assert_string_equal(r.out, "");
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "stat"));
	if (strstr(r.out, "\nanalyzer   none (created with its size 0)\n") ==
	    NULL)
		fail_msg("stat: %s", r.out);
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "stat"));
	j = parse(&r);
	assert_true(json_is_null(json_object_get(j, "analyzer")));
	json_decref(j);
	tc_run_free(&r);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);
}

/* count reads without counting: the fixture's three hits, 8 s old, lie in
 * the default window (24 h) and not in the last second, exactly (counts
 * this small are exact); a window longer than the counters' is refused. */
static void
test_count(void **state)
{
	struct tc_run r;
	struct fx f;
	uint64_t n;
	json_t *j;

	fx_make(&f, "count", 1);
	fx_dict(&f);
	expect_out(&f, 0, "3 (exact)\n", ARGV("-s", f.seg, "count",
	    "ip:10.0.0.1"));
	expect_out(&f, 0, "3 (exact)\n", ARGV("-s", f.seg, "count",
	    "ip:10.0.0.1"));
	expect_out(&f, 0, "3 (exact)\n", ARGV("-s", f.seg, "count", "--window",
	    "24h", "ip:10.0.0.1"));
	/* Younger than 1 s: no hit, and the bound allows no other answer. */
	expect_out(&f, 0, "0 (exact)\n", ARGV("-s", f.seg, "count", "--window",
	    "1s", "ip:10.0.0.1"));
	expect_out(&f, 0, "0 (exact)\n", ARGV("-s", f.seg, "count", "never"));
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "count", "ip:10.0.0.1"));
	j = parse(&r);
	assert_int_equal(json_integer_value(json_object_get(j, "count")), 3);
	json_decref(j);
	tc_run_free(&r);
	tc_expect_run(&r, 1, ARGV("-s", f.seg, "count", "--window", "25h",
	    "ip:10.0.0.1"));
	expect_err(&r, "longer than the counters' window");
	tc_run_free(&r);
	expect_usage(ARGV("count", "--window", "soon", "k"), "bad window");
	expect_usage(ARGV("count"), "missing KEY");
	expect_out(&f, 0, "4 (exact)\n", ARGV("-s", f.seg, "hit",
	    "ip:10.0.0.1"));
	expect_out(&f, 0, "4 (exact)\n", ARGV("-s", f.seg, "count",
	    "ip:10.0.0.1"));
	f.clk.now = tu_mono_ns();
	assert_int_equal(shmt_hit(f.h, "ip:10.0.0.1", 11, &n), 0);
	assert_int_equal(n, 5);
	/* Past k (67 at the default 1%) the answer comes with the exact
	 * counts it may stand for: 1000 hits, so 1000 in [low, high], and
	 * low and high those of max(1, 1% x exact). */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(shmt_hit(f.h, "many", 4, NULL), 0);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "count", "many"));
	{
		unsigned long long got, lo, hi;

		if (sscanf(r.out, "%llu (within 1%%: exact in [%llu, %llu])",
		    &got, &lo, &hi) != 3)
			fail_msg("count many: %s", r.out);
		assert_true(lo <= 1000 && 1000 <= hi && lo <= got && got <= hi);
		assert_true(got - lo <= got / 100 + 1 && hi - got <= hi / 100 + 1);
	}
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", f.seg, "--json", "count", "many"));
	j = parse(&r);
	assert_false(json_is_true(json_object_get(j, "exact")));
	assert_true(json_integer_value(json_object_get(j, "low")) <= 1000 &&
	    json_integer_value(json_object_get(j, "high")) >= 1000);
	assert_true(json_real_value(json_object_get(j, "error")) == 0.01);
	json_decref(j);
	tc_run_free(&r);
	fx_free(&f);
}

/* stat shows the counters' error and k, the greatest exact count answered
 * exactly, as the library's bound gives them: 67 at the default 1%, 667
 * at 0.1% (k = ceil(2 / (3 eps))). */
static void
test_stat_counters(void **state)
{
	static const struct {
		uint32_t ppm;
		const char *line;
		double error;
		int k;
	} cases[] = {
		{ 0, "error 1% (exact up to 67 hits)", 0.01, 67 },
		{ 1000, "error 0.1% (exact up to 667 hits)", 0.001, 667 },
	};
	shmt_config_t cfg;
	struct tc_run r;
	char seg[128];
	shmt_t *h;
	json_t *j, *c;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		tu_segname(seg, sizeof(seg), "cntstat");
		tc_track(seg);
		shmt_config_init(&cfg);
		cfg.max_slots = 16;
		cfg.arena_bytes = 64 << 10;
		cfg.counters_error_ppm = cases[i].ppm;
		assert_int_equal(shmt_create(seg, &cfg, &h), 0);
		tc_expect_run(&r, 0, ARGV("-s", seg, "stat"));
		if (strstr(r.out, cases[i].line) == NULL)
			fail_msg("stat: no '%s' in:\n%s", cases[i].line, r.out);
		tc_run_free(&r);
		tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "stat"));
		j = parse(&r);
		c = json_object_get(j, "counters");
		assert_true(json_real_value(json_object_get(c, "error")) ==
		    cases[i].error);
		assert_int_equal(json_integer_value(json_object_get(c,
		    "exact_up_to")), cases[i].k);
		json_decref(j);
		tc_run_free(&r);
		shmt_close(h);
		assert_int_equal(shmt_unlink(seg), 0);
	}
}

/* ---- errors: missing, incompatible, damaged ---------------------------- */

static void
test_missing(void **state)
{
	static const char *const cmds[][3] = {
		{ "stat" }, { "limiters" }, { "buckets", "x" }, { "try", "x" },
		{ "next-key", "x" }, { "check" }, { "watch", "-n", "1" },
		{ "get", "k" }, { "set", "k", "v" }, { "del", "k" },
		{ "incr", "k" }, { "keys" }, { "hit", "k" }, { "count", "k" },
		{ "top" },
	};
	char seg[128];

	tu_segname(seg, sizeof(seg), "missing");
	tc_track(seg);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		struct tc_run r;

		tc_expect_run(&r, 3, ARGV("-s", seg, cmds[i][0], cmds[i][1],
		    cmds[i][2]));
		expect_err(&r, "does not exist");
		expect_err(&r, seg);
		assert_string_equal(r.out, "");
		tc_run_free(&r);
	}
}

/* A /dev/shm object full of random bytes is not a segment (exit 3), and
 * destroy leaves it alone unless forced. */
static void
test_incompatible(void **state)
{
	uint64_t seed = tu_seed("test_incompatible"), s = seed;
	unsigned char junk[8192];
	struct tc_run r;
	char seg[128];
	int fd;

	tu_segname(seg, sizeof(seg), "junk");
	tc_track(seg);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)tu_rand(&s);
	fd = shm_open(seg, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	tc_expect_run(&r, 3, ARGV("-s", seg, "stat"));
	expect_err(&r, "is incompatible: not a shmthrottle segment");
	tc_run_free(&r);
	tc_expect_run(&r, 3, ARGV("-s", seg, "--json", "check"));
	expect_err(&r, "not a shmthrottle segment");
	tc_run_free(&r);
	tc_expect_run(&r, 3, ARGV("-s", seg, "destroy"));
	expect_err(&r, "not removed");
	tc_run_free(&r);
	fd = shm_open(seg, O_RDONLY, 0);
	assert_true(fd >= 0);
	close(fd);
	tc_expect_run(&r, 0, ARGV("-s", seg, "destroy", "--force"));
	tc_run_free(&r);
	assert_int_equal(shmt_unlink(seg), -ENOENT);
}

/* A segment written by another layout: exit 3, "format differs". */
static void
test_other_format(void **state)
{
	struct tc_run r;
	struct fx f;

	fx_make(&f, "format", 0);
	f.h->hdr->sh_format ^= 1;
	tc_expect_run(&r, 3, ARGV("-s", f.seg, "limiters"));
	expect_err(&r, "is incompatible: segment format differs");
	tc_run_free(&r);
	f.h->hdr->sh_format ^= 1;
	fx_free(&f);
}

/* A header that contradicts itself is damage: exit 4, and check names it. */
static void
test_damaged_header(void **state)
{
	struct tc_run r;
	struct fx f;

	fx_make(&f, "damaged", 0);
	f.h->hdr->sh_regions[SHMT_R_ARENA].rg_off += 64;
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "stat"));
	expect_err(&r, "segment is corrupted");
	tc_run_free(&r);
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "check"));
	if (strstr(r.out, "problem: segment: segment is corrupted") == NULL)
		fail_msg("check output: %s", r.out);
	tc_run_free(&r);
	f.h->hdr->sh_regions[SHMT_R_ARENA].rg_off -= 64;
	f.h->hdr->sh_size += 4096;
	tc_expect_run(&r, 4, ARGV("-s", f.seg, "--json", "check"));
	assert_non_null(strstr(r.out, "segment size differs"));
	tc_run_free(&r);
	f.h->hdr->sh_size -= 4096;
	fx_free(&f);
}

/* ---- the command line ------------------------------------------------ */

static void
expect_usage(const char *const *argv, const char *msg)
{
	struct tc_run r;

	tc_expect_run(&r, 2, argv);
	expect_err(&r, msg);
	expect_err(&r, "usage:");
	tc_run_free(&r);
}

static void
test_usage_errors(void **state)
{
	expect_usage(ARGV("frobnicate"), "unknown command 'frobnicate'");
	expect_usage(ARGV("--bogus", "stat"), "unknown option '--bogus'");
	expect_usage(ARGV("-x", "stat"), "unknown option '-x'");
	expect_usage(ARGV("stat", "--bogus"), "stat: unknown option");
	expect_usage(ARGV("stat", "extra"), "unexpected argument 'extra'");
	expect_usage(ARGV("buckets"), "missing LIMITER");
	expect_usage(ARGV("try", "a", "b", "c"), "unexpected argument 'c'");
	expect_usage(ARGV("-s"), "needs a value");
	expect_usage(ARGV("watch", "-d", "0"), "bad delay");
	expect_usage(ARGV("watch", "-n", "x"), "bad frame count");
	expect_usage(ARGV("--json", "watch"), "watch does not take --json");
	expect_usage(ARGV("create", "--arena", "lots"), "bad value 'lots'");
	expect_usage(ARGV("help", "nosuch"), "unknown command 'nosuch'");
	expect_usage(ARGV("top", "-n", "x"), "bad count 'x'");
	expect_usage(ARGV("top", "-n", "-1"), "bad count '-1'");
	expect_usage(ARGV("top", "extra"), "unexpected argument 'extra'");
	expect_usage((const char *const[]){ NULL }, "no command given");
	{
		struct tc_run r;

		tc_expect_run(&r, 2, ARGV("-s", "no-slash", "stat"));
		expect_err(&r, "bad segment name 'no-slash'");
		tc_run_free(&r);
	}
}

/* Every command has a page, reachable both ways, with the same text. */
static void
test_help(void **state)
{
	static const char *const cmds[] = { "stat", "limiters", "buckets",
		"try", "next-key", "check", "watch", "create", "destroy",
		"resize", "get", "set", "del", "incr", "keys", "hit", "count", "top" };
	struct tc_run r, r2;

	tc_expect_run(&r, 0, ARGV("--help"));
	tc_golden("help.txt", r.out);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "\n    %s ", cmds[i]);
		if (strstr(r.out, want) == NULL)
			fail_msg("--help does not list %s", cmds[i]);
		tc_expect_run(&r2, 0, ARGV("help", cmds[i]));
		{
			struct tc_run r3;

			tc_expect_run(&r3, 0, ARGV(cmds[i], "--help"));
			assert_string_equal(r2.out, r3.out);
			tc_run_free(&r3);
		}
		snprintf(want, sizeof(want), "] %s", cmds[i]);
		assert_non_null(strstr(r2.out, want));
		tc_run_free(&r2);
	}
	assert_non_null(strstr(r.out, "\n    5  no such limiter"));
	tc_run_free(&r);
}

/* create's page states the defaults create uses: the library's. */
static void
test_help_create_defaults(void **state)
{
	shmt_config_t d;
	struct tc_run r;
	char want[128];

	(void)state;
	shmt_config_init(&d);
	tc_expect_run(&r, 0, ARGV("create", "--help"));
	snprintf(want, sizeof(want), "(default %lluM)",
	    (unsigned long long)(d.arena_bytes >> 20));
	assert_true(d.arena_bytes % (1 << 20) == 0);
	if (strstr(strstr(r.out, "--arena"), want) == NULL)
		fail_msg("create --help: no '--arena ... %s' in\n%s", want,
		    r.out);
	snprintf(want, sizeof(want), "(default %lluM)",
	    (unsigned long long)(d.dict_bytes >> 20));
	if (strstr(strstr(r.out, "--dict "), want) == NULL)
		fail_msg("create --help: no '--dict ... %s'", want);
	snprintf(want, sizeof(want), "(default %lluM)",
	    (unsigned long long)(d.counters_bytes >> 20));
	if (strstr(strstr(r.out, "--counters"), want) == NULL)
		fail_msg("create --help: no '--counters ... %s'", want);
	snprintf(want, sizeof(want), "rows in the limiter table (default %u)",
	    d.max_limiters);
	assert_non_null(strstr(r.out, want));
	snprintf(want, sizeof(want), "process slots (default %u)", d.max_slots);
	assert_non_null(strstr(r.out, want));
	tc_run_free(&r);
}

/* ---- resize ------------------------------------------------------------- */

/* resize moves the segment to new sizes with its state; a handle opened
 * before follows; sizes the state cannot fit are refused (exit 1) and
 * nothing changes; an unknown key is a usage error. */
static void
test_resize(void **state)
{
	shmt_limit_t l = { .limit = 10, .window_ns = 3600000000000ULL,
		.slack_ns = 1000000000ULL, .slack_uses = 1 };
	shmt_limiter_stat_t ls;
	shmt_dict_stat_t d;
	struct tc_run r;
	char seg[128], buf[8];
	size_t vlen = 0;
	shmt_t *h;
	json_t *j;

	(void)state;
	tu_segname(seg, sizeof(seg), "resize");
	tc_track(seg);
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "--dict", "4M",
	    "--dict-shards", "2", "--max-limiters", "4"));
	tc_run_free(&r);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_limiter_define(h, "a", &l), 0);
	assert_int_equal(shmt_limiter_define(h, "b", &l), 0);
	assert_int_equal(shmt_try_use_key(h, "a"), 1);
	assert_int_equal(shmt_set(h, "k", 1, "v", 1, 0), 0);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "resize", "dict=16M",
	    "max_limiters=64"));
	j = parse(&r);
	assert_true(json_is_true(json_object_get(j, "moved")));
	json_decref(j);
	tc_run_free(&r);
	assert_int_equal(shmt_dict_stat(h, &d), 0);
	assert_true(d.bytes >= 15ULL << 20);
	assert_int_equal(shmt_get(h, "k", 1, buf, sizeof(buf), &vlen), 0);
	assert_int_equal(shmt_limiter_stat(h, "a", &ls), 0);
	assert_int_equal(ls.in_flight, 1);
	tc_expect_run(&r, 1, ARGV("-s", seg, "resize", "max_limiters=1"));
	assert_non_null(strstr(r.err, "keep max_limiters at 2"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", seg, "resize", "colour=blue"));
	tc_run_free(&r);
	assert_int_equal(shmt_limiter_stat(h, "b", &ls), 0);
	shmt_close(h);
	tc_expect_run(&r, 0, ARGV("-s", seg, "destroy"));
	tc_run_free(&r);
}

/* ---- create and destroy ---------------------------------------------- */

static void
test_create_destroy(void **state)
{
	shmt_segment_stat_t st;
	struct tc_run r;
	char seg[128];
	shmt_t *h;
	json_t *j;

	tu_segname(seg, sizeof(seg), "create");
	tc_track(seg);
	tc_expect_run(&r, 0, ARGV("-s", seg, "--json", "create", "--max-limiters",
	    "5", "--max-slots", "7", "--arena", "128K", "--mode", "0640"));
	j = parse(&r);
	assert_true(json_is_true(json_object_get(j, "created")));
	json_decref(j);
	tc_run_free(&r);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_segment_stat(h, &st), 0);
	assert_int_equal(st.max_limiters, 5);
	assert_int_equal(st.max_slots, 7);
	assert_int_equal(st.regions[3].size, 128 << 10);
	assert_int_equal(st.mode, 0640);
	shmt_close(h);
	tc_expect_run(&r, 0, ARGV("-s", seg, "destroy"));
	tc_run_free(&r);

	/* The dictionary and counters options reach the library. */
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "--dict", "8M",
	    "--dict-shards", "2", "--no-eviction", "--counters", "0"));
	tc_run_free(&r);
	assert_int_equal(shmt_open(seg, &h), 0);
	{
		shmt_dict_stat_t d;
		uint64_t n;

		assert_int_equal(shmt_dict_stat(h, &d), 0);
		assert_int_equal(d.shards, 2);
		assert_true(d.bytes == 8 << 20);
		assert_int_equal(d.eviction, 0);
		assert_int_equal(shmt_hit(h, "k", 1, &n), -ENODEV);
	}
	shmt_close(h);
	tc_expect_run(&r, 0, ARGV("-s", seg, "destroy"));
	tc_run_free(&r);
	tc_expect_run(&r, 2, ARGV("-s", seg, "create", "--dict-shards", "3"));
	expect_err(&r, "cannot create");
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "create"));
	tc_run_free(&r);

	tc_expect_run(&r, 1, ARGV("-s", seg, "create"));
	expect_err(&r, "already exists");
	tc_run_free(&r);
	tc_expect_run(&r, 0, ARGV("-s", seg, "destroy"));
	tc_run_free(&r);
	assert_int_equal(shmt_open(seg, &h), -ENOENT);
	tc_expect_run(&r, 3, ARGV("-s", seg, "destroy"));
	expect_err(&r, "does not exist");
	tc_run_free(&r);
}

/* create -c reads the daemon's config format and defines its limiters. */
static void
test_create_config(void **state)
{
	char seg[128], path[] = "/tmp/shmt-cli-conf-XXXXXX";
	shmt_limiter_stat_t l;
	struct tc_run r;
	shmt_t *h;
	FILE *f;
	int fd;

	tu_segname(seg, sizeof(seg), "conf");
	tc_track(seg);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fprintf(f, "[segment]\nname = /not-this-one\nmax_limiters = 4\n"
	    "\n[limiter web]\nlimit = 50\nwindow = 2s\nslack_time = 500ms\n"
	    "slack_uses = 5\n");
	fclose(f);
	tc_expect_run(&r, 0, ARGV("-s", seg, "create", "-c", path));
	tc_run_free(&r);
	assert_int_equal(shmt_open(seg, &h), 0);
	assert_int_equal(shmt_limiter_stat(h, "web", &l), 0);
	assert_int_equal(l.limit, 50);
	assert_true(l.window_ns == 2 * NS_S);
	shmt_close(h);
	assert_int_equal(shmt_unlink(seg), 0);

	f = fopen(path, "w");
	fprintf(f, "[limiter web]\nlimit = many\n");
	fclose(f);
	tc_expect_run(&r, 2, ARGV("-s", seg, "create", "-c", path));
	expect_err(&r, "limit");
	tc_run_free(&r);
	assert_int_equal(shmt_open(seg, &h), -ENOENT);
	unlink(path);
}

/* A segment owned by another user is not trusted unless
 * $SHMTHROTTLE_OWNER names that user; one that every user may write is
 * never trusted.  The message says whose it is. */
static void
test_untrusted(void **state)
{
	char path[192], owner[64];
	struct tc_run r;
	struct fx f;

	(void)state;
	if (geteuid() != 0)
		skip();
	fx_make(&f, "untrusted", 0);
	snprintf(path, sizeof(path), "/dev/shm%s", f.seg);
	assert_int_equal(chown(path, 65532, (gid_t)-1), 0);
	tc_run(&r, NULL, ARGV("-s", f.seg, "stat"));
	assert_int_equal(r.status, 3);
	assert_non_null(strstr(r.err, "not trusted"));
	assert_non_null(strstr(r.err, "uid 65532"));
	tc_run_free(&r);
	snprintf(owner, sizeof(owner), "SHMTHROTTLE_OWNER=%d", 65532);
	tc_run(&r, (const char *const[]){ owner, NULL },
	    ARGV("-s", f.seg, "stat"));
	assert_int_equal(r.status, 0);
	tc_run_free(&r);
	assert_int_equal(chmod(path, 0666), 0);
	tc_run(&r, (const char *const[]){ owner, NULL },
	    ARGV("-s", f.seg, "check"));
	assert_int_equal(r.status, 3);
	assert_non_null(strstr(r.err, "mode 0666"));
	tc_run_free(&r);
	tc_run(&r, (const char *const[]){ "SHMTHROTTLE_OWNER=no such user",
	    NULL }, ARGV("-s", f.seg, "stat"));
	assert_int_equal(r.status, 2);
	tc_run_free(&r);
	fx_free(&f);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_stat, tc_cleanup),
		cmocka_unit_test_teardown(test_env_segment, tc_cleanup),
		cmocka_unit_test_teardown(test_untrusted, tc_cleanup),
		cmocka_unit_test_teardown(test_daemon_states, tc_cleanup),
		cmocka_unit_test_teardown(test_limiters, tc_cleanup),
		cmocka_unit_test_teardown(test_buckets, tc_cleanup),
		cmocka_unit_test_teardown(test_try, tc_cleanup),
		cmocka_unit_test_teardown(test_next_key, tc_cleanup),
		cmocka_unit_test_teardown(test_limiter_live, tc_cleanup),
		cmocka_unit_test_teardown(test_check_healthy, tc_cleanup),
		cmocka_unit_test_teardown(test_check_damaged_limiter, tc_cleanup),
		cmocka_unit_test_teardown(test_get, tc_cleanup),
		cmocka_unit_test_teardown(test_set, tc_cleanup),
		cmocka_unit_test_teardown(test_set_stdin, tc_cleanup),
		cmocka_unit_test_teardown(test_del_incr, tc_cleanup),
		cmocka_unit_test_teardown(test_keys, tc_cleanup),
		cmocka_unit_test_teardown(test_keys_cycle, tc_cleanup),
		cmocka_unit_test_teardown(test_set_locked, tc_cleanup),
		cmocka_unit_test_teardown(test_hit, tc_cleanup),
		cmocka_unit_test_teardown(test_count, tc_cleanup),
		cmocka_unit_test_teardown(test_stat_counters, tc_cleanup),
		cmocka_unit_test_teardown(test_no_dict, tc_cleanup),
		cmocka_unit_test_teardown(test_dict_usage, tc_cleanup),
		cmocka_unit_test_teardown(test_check_damaged_dict, tc_cleanup),
		cmocka_unit_test_teardown(test_top, tc_cleanup),
		cmocka_unit_test_teardown(test_top_hash_only, tc_cleanup),
		cmocka_unit_test_teardown(test_no_analyzer, tc_cleanup),
		cmocka_unit_test_teardown(test_missing, tc_cleanup),
		cmocka_unit_test_teardown(test_incompatible, tc_cleanup),
		cmocka_unit_test_teardown(test_other_format, tc_cleanup),
		cmocka_unit_test_teardown(test_damaged_header, tc_cleanup),
		cmocka_unit_test_teardown(test_usage_errors, tc_cleanup),
		cmocka_unit_test_teardown(test_help, tc_cleanup),
		cmocka_unit_test_teardown(test_help_create_defaults,
		    tc_cleanup),
		cmocka_unit_test_teardown(test_create_destroy, tc_cleanup),
		cmocka_unit_test_teardown(test_resize, tc_cleanup),
		cmocka_unit_test_teardown(test_create_config, tc_cleanup),
	};

	if (argc != 3) {
		fprintf(stderr, "usage: %s CLI-BINARY GOLDEN-DIR\n", argv[0]);
		return 2;
	}
	tc_bin = argv[1];
	tc_golden_dir = argv[2];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
