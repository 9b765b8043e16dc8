/* SPDX-License-Identifier: MIT */
/*
 * The daemon's config reader: units, the built-in default, the shipped
 * example, every kind of bad file (the error names file, line and key), and
 * a print -> load round trip.  argv[1] is the path of the example file.
 */
#include "config.h"

#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *example_path;

static void
test_durations(void **state)
{
	static const struct { const char *s; uint64_t ns; } good[] = {
		{ "500ms", 500000000ULL }, { "10m", 600000000000ULL },
		{ "24h", 86400000000000ULL }, { "1.5s", 1500000000ULL },
		{ "250us", 250000ULL }, { "100ns", 100ULL }, { "2", 2000000000ULL },
		{ "0.000000001", 1ULL }, { "1.1s", 1100000000ULL },
		{ "2d", 172800000000000ULL }, { "1min", 60000000000ULL },
		{ "18446744073709551615ns", UINT64_MAX }, { "0s", 0 },
	};
	static const struct { const char *s; int rc; } bad[] = {
		{ "", -EINVAL }, { "ms", -EINVAL }, { "1.5ns", -EINVAL },
		{ "1x", -EINVAL }, { "-1s", -EINVAL }, { "1 s s", -EINVAL },
		{ "18446744073709551616ns", -ERANGE }, { "1e3s", -EINVAL },
		{ "0.0000000001", -EINVAL }, { "213503982d", -ERANGE },
		{ ".", -EINVAL }, { ".5s", -EINVAL }, { "1.s", -EINVAL },
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		assert_int_equal(shmtd_parse_duration(good[i].s, &v), 0);
		assert_true(v == good[i].ns);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		assert_int_equal(shmtd_parse_duration(bad[i].s, &v), bad[i].rc);
		assert_true(v == 12345);
	}
}

static void
test_sizes(void **state)
{
	static const struct { const char *s; uint64_t b; } good[] = {
		{ "64MiB", 64ULL << 20 }, { "1KiB", 1024 }, { "4096", 4096 },
		{ "1GB", 1000000000ULL }, { "2M", 2ULL << 20 }, { "1.5KiB", 1536 },
		{ "3 TiB", 3ULL << 40 }, { "10kB", 10000 }, { "7B", 7 },
	};
	static const char *const bad[] = { "", "MiB", "1.3B", "1Kb", "1 KiBs",
		"0x10", "16777216TiB" };
	uint64_t v;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(shmtd_parse_size(good[i].s, &v), 0);
		assert_true(v == good[i].b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_true(shmtd_parse_size(bad[i], &v) < 0);
}

/* Formatting picks the largest exact unit, and always reads back. */
static void
test_format_roundtrip(void **state)
{
	uint64_t seed = tu_seed("format_roundtrip");
	char buf[64];

	for (int i = 0; i < 20000; i++) {
		uint64_t r = tu_rand(&seed);
		/* Mostly round values: they exercise the unit choice. */
		uint64_t x = (r >> 8) % 5 == 0 ? r : (r % 100000) *
		    (uint64_t[]){ 1, 1000, 1000000, 1000000000ULL,
		    60000000000ULL, 1024, 1ULL << 20 }[(r >> 40) % 7];
		uint64_t back;

		shmtd_format_duration(x, buf, sizeof(buf));
		assert_int_equal(shmtd_parse_duration(buf, &back), 0);
		assert_true(back == x);
		shmtd_format_size(x, buf, sizeof(buf));
		assert_int_equal(shmtd_parse_size(buf, &back), 0);
		assert_true(back == x);
	}
	assert_string_equal(shmtd_format_duration(90000000000ULL, buf,
	    sizeof(buf)), "90s");
	assert_string_equal(shmtd_format_duration(3600000000000ULL, buf,
	    sizeof(buf)), "1h");
	assert_string_equal(shmtd_format_size(3ULL << 20, buf, sizeof(buf)),
	    "3MiB");
	assert_string_equal(shmtd_format_size(1000, buf, sizeof(buf)), "1000");
}

static const struct shmtd_limiter *
find(const struct shmtd_config *c, const char *name)
{
	for (size_t i = 0; i < c->nlimiters; i++)
		if (strcmp(c->limiters[i].name, name) == 0)
			return &c->limiters[i];
	return NULL;
}

static void
test_builtin(void **state)
{
	struct shmtd_config c;
	const struct shmtd_limiter *l;
	char err[512];

	assert_int_equal(shmtd_config_load(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.segment, SHMT_DEFAULT_SEGMENT);
	assert_int_equal(c.nlimiters, 3);
	assert_non_null(l = find(&c, "api"));
	assert_true(l->limit.limit == 100 && l->limit.window_ns == 1000000000ULL);
	assert_true(l->limit.slack_ns == 100000000ULL && l->limit.slack_uses == 10);
	assert_non_null(l = find(&c, "keys"));
	assert_int_equal(l->limit.nkeys, 4);
	assert_string_equal(l->limit.keys[3], "key-4");
	assert_true(l->limit.limit == 20 && l->limit.uses_per_key == 5);
	assert_non_null(l = find(&c, "per-ip"));
	assert_true(l->limit.per_client && l->limit.client_capacity == 4096);
	assert_true(c.dict.enabled && c.analyzer.enabled && c.counters.enabled);
	/* The sections land in the library's creation parameters. */
	assert_true(c.seg.dict_bytes == 8ULL << 20 && c.seg.dict_shards == 4);
	assert_true(c.seg.counters_bytes == 4ULL << 20);
	assert_string_equal(c.log_target, "stderr");
	shmtd_config_free(&c);
}

static void
test_example_parses(void **state)
{
	struct shmtd_config c;
	const struct shmtd_limiter *l;
	char err[512] = "";
	int rc = shmtd_config_load(example_path, &c, err, sizeof(err));

	if (rc != 0)
		fail_msg("%s", err);
	assert_int_equal(c.nlimiters, 3);
	/* The pool spans a continuation line. */
	assert_non_null(l = find(&c, "keys"));
	assert_int_equal(l->limit.nkeys, 4);
	assert_string_equal(l->limit.keys[2], "key-3");
	assert_true(c.seg.arena_bytes == 8ULL << 20);
	assert_true(c.analyzer.window_ns == 60000000000ULL);
	assert_int_equal(c.analyzer.threshold_pct, 10);
	assert_true(c.seg.analyzer_bytes == 1ULL << 20 &&
	    c.seg.analyzer_subwindows == 12 &&
	    c.seg.analyzer_threshold_ppm == 100000);
	assert_int_equal(c.seg.counters_error_ppm, 10000);
	shmtd_config_free(&c);
}

/* Write TEXT to a fresh temporary file; its name goes to PATH. */
static void
write_file(char *path, size_t cap, const char *text)
{
	int fd;

	snprintf(path, cap, "/tmp/shmt-test-conf-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

static void
test_bad_files(void **state)
{
	static const struct { const char *text; const char *want; } cases[] = {
		{ "[segment]\nname = /x\nsize = 3\n",
		  ":3: key 'size': unknown key in [segment]" },
		{ "[segmnt]\nname = /x\n",
		  ":1: unknown section [segmnt]" },
		{ "[counters]\nwindow = 1h\nsubwindows = 24\n",
		  ":3: key 'subwindows': no longer a key of [counters]" },
		{ "\n[limiter a]\nlimit = 10\nwindow = 10 parsecs\n",
		  ":4: key 'window': cannot read '10 parsecs' as a duration" },
		{ "[limiter a]\nlimit = 10\nwindow = 1s\nlimit = 11\n",
		  ":4: key 'limit': given twice in [limiter a] (first on line 2)" },
		{ "[limiter a]\nwindow = 1s\n",
		  ":1: key 'limit': [limiter a]: limit: must be from 1 to 2147483647" },
		{ "[segment]\nname = /x\nthis is not ini\n", ":3: syntax error" },
		{ "[limiter a/b]\nlimit = 1\n", ":1: [limiter a/b]: a limiter name" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nslack_uses = 6\n",
		  ":4: key 'slack_uses': [limiter a]: slack_uses: must be from 1 to limit (5)" },
		{ "[limiter a]\nwindow = 1s\nkeys = x, y,\n  x\n",
		  ":4: key 'keys': key name 'x' given twice" },
		{ "[limiter a]\nwindow = 1s\nkeys = x, y\nlimit = 3\n",
		  ":4: key 'limit': [limiter a]: limit: with a key pool it must be nkeys x uses_per_key (2)" },
		{ "[segment]\nmode = 0999\n", ":2: key 'mode': cannot read '0999' as an octal mode" },
		{ "[segment]\nmode = 0666\n", ":2: key 'mode': mode 0666 lets every user write the segment" },
		{ "[segment]\nname = shm\n", ":2: key 'name': 'shm' is not a segment name" },
		{ "[segment]\nmax_limiters = 99999999999\n",
		  ":2: key 'max_limiters': value '99999999999' is out of range" },
		{ "[limiter a]\nlimit = 1000\nwindow = 1h\nslack_time = 1ms\n",
		  ":4: key 'slack_time': [limiter a]: slack_ns: window_ns / slack_ns + limit / slack_uses needs" },
		{ "[daemon]\nlog = journal\n", ":2: key 'log': cannot read 'journal' as stderr or syslog" },
		{ "[analyzer]\nthreshold = 100%\n", ":2: key 'threshold': value '100%' is out of range" },
		{ "[counters]\nerror = lots\n",
		  ":2: key 'error': cannot read 'lots' as an error as a percentage or a fraction" },
		{ "[counters]\nerror = 100%\n", ":2: key 'error': value '100%' is out of range" },
		{ "[counters]\nerror = 0.0001\n",
		  ":2: key 'error': counters_error_ppm: must be from 1000 (0.1%) to 500000 (50%)" },
		{ "[counters]\nerror = 60%\n",
		  ":2: key 'error': counters_error_ppm: must be from 1000 (0.1%) to 500000 (50%)" },
		{ "[limiter a]\nlimit = 1\nwindow = 1s\nper_client = maybe\n",
		  ":4: key 'per_client': cannot read 'maybe' as yes or no" },
		{ "[limiter a]\nwindow = 1s\nkeys = x, y\nshadow = yes\n",
		  ":4: key 'shadow': [limiter a]: shadow: a key pool cannot be in shadow" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nburst = 2\n",
		  ":4: key 'burst': [limiter a]: burst is for mode = gcra" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nmode = gcra\nslack_uses = 2\n",
		  ":5: key 'slack_uses': [limiter a]: mode = gcra has no slack" },
		{ "[limiter a]\nwindow = 1s\nmode = gcra\nkeys = x, y\n",
		  ":4: key 'keys': [limiter a]: nkeys: SHMT_MODE_GCRA takes no key pool" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nmode = gcra\nburst = 0\n",
		  ":5: key 'burst': [limiter a]: burst: from 1 in SHMT_MODE_GCRA" },
		{ "[limiter a]\nlimit = 5\nwindow = 4ns\nmode = gcra\n",
		  ":3: key 'window': [limiter a]: window_ns: SHMT_MODE_GCRA needs window_ns / limit" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nmode = leaky\n",
		  ":4: key 'mode': cannot read 'leaky' as buckets, exact, or rate (gcra)" },
		/* Exact mode has no slack, as rate mode has none. */
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nmode = exact\nslack_time = 1ms\n",
		  ":5: key 'slack_time': [limiter a]: mode = exact has no slack" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nslack_uses = 2\nmode = exact\n",
		  ":4: key 'slack_uses': [limiter a]: mode = exact has no slack" },
		/* A section given twice would merge unseen. */
		{ "[limiter a]\nlimit = 5\nwindow = 1s\n[limiter b]\nlimit = 1\n"
		  "window = 1s\n[limiter a]\nslack_uses = 2\n",
		  ":7: section [limiter a] given twice (first on line 1)" },
		{ "[daemon]\nlog = stderr\n[segment]\nname = /x\n[daemon]\n",
		  ":5: section [daemon] given twice (first on line 1)" },
		/* A size the segment would round down. */
		{ "[dictionary]\nsize = 96MiB\nshards = 8\n",
		  ":2: key 'size': [dictionary] size 96MiB over 8 shards is 12MiB a "
		  "shard, and a shard holds a power of two bytes: the segment would "
		  "hold 64MiB; give size = 64MiB or 128MiB" },
		{ "[counters]\nshards = 2\nsize = 3MiB\n",
		  ":3: key 'size': [counters] size 3MiB over 2 shards is 1536KiB a "
		  "shard" },
		{ "[segment]\nmax_limiters = 1\n[limiter a]\nlimit = 1\nwindow = 1s\n"
		  "[limiter b]\nlimit = 1\nwindow = 1s\n",
		  ":2: key 'max_limiters': 2 limiters are configured but max_limiters is 1" },
		/* An unknown section is refused even without keys. */
		{ "[segment]\nname = /x\n[bogus]\n[daemon]\nlog = stderr\n",
		  ":3: unknown section [bogus]" },
		{ "[limiter a]\nwindow = 1s\nkeys = x, y\nuses_per_key = 0\n",
		  ":4: key 'uses_per_key': [limiter a]: uses_per_key: must be at least 1" },
		{ "[limiter a]\nwindow = 1s\nlimit = 5\nper_client = yes\ncapacity = 0\n",
		  ":5: key 'capacity': [limiter a]: client_capacity: must be from 1" },
		{ "[limiter a]\nwindow = 1s\nlimit = 5\nslack_time = 0s\n",
		  ":4: key 'slack_time': [limiter a]: slack_ns: must be above 0" },
		/* The library's rules for the segment, with the key's line. */
		{ "[dictionary]\nsize = 1MiB\nshards = 8\n",
		  ":2: key 'size': dict_bytes: each shard needs at least 2 MiB" },
		{ "[counters]\nshards = 3\n",
		  ":2: key 'shards': counters_shards: must be a power of two" },
		{ "[dictionary]\nmax_key = 2KiB\n",
		  ":2: key 'max_key': dict_max_key: at most SHMT_KEY_MAX (1024)" },
		{ "[dictionary]\nmax_value = 0\n",
		  ":2: key 'max_value': must be at least 1 byte" },
		{ "[dictionary]\ndefault_ttl = 1500us\n",
		  ":2: key 'default_ttl': must be a whole number of milliseconds" },
		/* Per-client overrides. */
		{ "[limiter a]\nlimit = 5\nwindow = 1s\noverride = x limit=3\n",
		  ":4: key 'override': [limiter a] is not per client" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\noverrides = 4\n",
		  ":4: key 'overrides': [limiter a] is not per client" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "override = x\n",
		  ":5: key 'override': expected 'CLIENT RULE'" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "override = x limit=0\n",
		  ":5: key 'override': client 'x': the rule is limit=N, allow or deny" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "override = x limit=99999999999\n",
		  ":5: key 'override': client 'x': the limit is out of range" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "override = x maybe\n",
		  ":5: key 'override': client 'x': the rule is limit=N, allow or deny" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "override = x allow\noverride = x deny\n",
		  ":6: key 'override': client 'x' given twice (first on line 5)" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "overrides = 1\noverride = x allow\noverride = y deny\n",
		  ":7: key 'override': [limiter a]: 2 overrides, more than its table holds (overrides = 1)" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "overrides = 0\n",
		  ":5: key 'overrides': [limiter a]: from 1 to 65536" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nmode = gcra\n"
		  "per_client = yes\noverride = x limit=2\n",
		  ":6: key 'override': [limiter a]: a limit= override for client 'x' needs mode = buckets" },
		/* An override's error names that override's line, not the
		 * section's last override line. */
		{ "[limiter a]\nlimit = 5\nwindow = 1s\noverride = x allow\n"
		  "override = y deny\n",
		  ":4: key 'override': [limiter a] is not per client" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nper_client = yes\n"
		  "overrides = 1\noverride = x allow\noverride = y deny\n"
		  "override = z allow\n",
		  ":7: key 'override': [limiter a]: 3 overrides, more than its table holds (overrides = 1)" },
		{ "[limiter a]\nlimit = 5\nwindow = 1s\nmode = gcra\n"
		  "per_client = yes\noverride = w allow\noverride = x limit=2\n"
		  "override = y limit=3\noverride = z deny\n",
		  ":7: key 'override': [limiter a]: a limit= override for client 'x' needs mode = buckets" },
		/* Key names a printed config would read as comments. */
		{ "[limiter a]\nwindow = 1s\nkeys = x,;y\n",
		  ":3: key 'keys': key name ';y' starts with ';'" },
		{ "[limiter a]\nwindow = 1s\nkeys = #y, x\n",
		  ":3: key 'keys': key name '#y' starts with '#'" },
	};
	char path[64], err[512], want[600];
	struct shmtd_config c;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_file(path, sizeof(path), cases[i].text);
		err[0] = '\0';
		assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)),
		    -EINVAL);
		snprintf(want, sizeof(want), "%s%s", path, cases[i].want);
		if (strncmp(err, want, strlen(want)) != 0)
			fail_msg("case %zu: got \"%s\", want \"%s...\"", i, err,
			    want);
		unlink(path);
	}
}

/* Overrides: read, printed back, applied at start and again on a reload
 * (shmtd_limiter_apply, as the daemon's apply_limiters calls it): the
 * config's rule wins for each client it names, and an override set by
 * hand for a client the config does not name stays. */
static void
test_overrides(void **state)
{
	char path[64], path2[64], err[512], seg[96], *text = NULL;
	struct shmtd_config c, c2;
	shmt_client_override_t list[8];
	shmt_client_rule_t r;
	size_t n = 0;
	shmt_t *h;
	FILE *f;

	(void)state;
	write_file(path, sizeof(path), "[limiter api]\nlimit = 10\n"
	    "window = 1m\nper_client = yes\noverrides = 4\n"
	    "override = gold limit=100\noverride = bad-bot  deny \n"
	    "override = monitor allow\n");
	if (shmtd_config_load(path, &c, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	unlink(path);
	assert_int_equal(c.limiters[0].limit.client_overrides, 4);
	assert_int_equal(c.limiters[0].noverrides, 3);
	assert_string_equal(c.limiters[0].overrides[1].id, "bad-bot");
	assert_int_equal(c.limiters[0].overrides[1].rule.kind, SHMT_RULE_DENY);
	assert_int_equal(c.limiters[0].overrides[0].rule.limit, 100);
	f = open_memstream(&text, &n);
	shmtd_config_print(f, &c);
	fclose(f);
	assert_non_null(strstr(text, "overrides = 4\noverride = gold limit=100\n"
	    "override = bad-bot deny\noverride = monitor allow\n"));
	write_file(path2, sizeof(path2), text);
	free(text);
	if (shmtd_config_load(path2, &c2, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	unlink(path2);
	assert_int_equal(c2.limiters[0].noverrides, 3);
	shmtd_config_free(&c2);

	tu_segname(seg, sizeof(seg), "cfgov");
	assert_int_equal(shmt_create(seg, NULL, &h), 0);
	if (shmtd_config_apply(h, &c, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_client_list(h, "api", list, 8), 3);
	assert_int_equal(shmt_try_use(h, "api", "bad-bot", 7), 0);
	/* By hand: one the config names, one it does not. */
	r = (shmt_client_rule_t){ .kind = SHMT_RULE_LIMIT, .limit = 2 };
	assert_int_equal(shmt_client_set(h, "api", "gold", 4, &r), 0);
	assert_int_equal(shmt_client_set(h, "api", "cli-set", 7, &r), 0);
	assert_int_equal(shmt_client_clear(h, "api", "monitor", 7), 1);
	/* The reload. */
	if (shmtd_config_apply(h, &c, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmt_client_get(h, "api", "gold", 4, &r), 1);
	assert_int_equal(r.limit, 100);
	assert_int_equal(shmt_client_get(h, "api", "monitor", 7, &r), 1);
	assert_int_equal(r.kind, SHMT_RULE_ALLOW);
	assert_int_equal(shmt_client_get(h, "api", "cli-set", 7, &r), 1);
	assert_int_equal(r.limit, 2);
	/* A table the config and the CLI together overfill: named. */
	c.limiters[0].overrides[2].id[0] = 'M';
	assert_int_equal(shmtd_config_apply(h, &c, err, sizeof(err)), -ENOSPC);
	assert_non_null(strstr(err, "override for client 'Monitor': the "
	    "segment's override table is full"));
	shmtd_config_free(&c);
	tu_close_unlink(h, seg);
}

/* Rate mode reads its burst (1 when not given) and shadow mode its flag,
 * and both print back; `mode = rate`, the CLI's name, reads as gcra. */
static void
test_gcra(void **state)
{
	char path[64], err[512], *text = NULL;
	struct shmtd_config c;
	size_t n = 0;
	FILE *f;

	(void)state;
	write_file(path, sizeof(path), "[limiter a]\nlimit = 100\nwindow = 1s\n"
	    "mode = gcra\nburst = 7\n[limiter b]\nlimit = 10\nwindow = 1s\n"
	    "mode = rate\nshadow = yes\n");
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(c.nlimiters, 2);
	assert_int_equal(c.limiters[0].limit.mode, SHMT_MODE_GCRA);
	assert_int_equal(c.limiters[0].limit.burst, 7);
	assert_int_equal(c.limiters[0].limit.slack_ns, 0);
	assert_int_equal(c.limiters[1].limit.mode, SHMT_MODE_GCRA);
	assert_int_equal(c.limiters[1].limit.burst, 1);
	assert_int_equal(c.limiters[0].limit.shadow, 0);
	assert_int_equal(c.limiters[1].limit.shadow, 1);
	f = open_memstream(&text, &n);
	assert_non_null(f);
	shmtd_config_print(f, &c);
	fclose(f);
	assert_non_null(strstr(text, "[limiter a]\nlimit = 100\nwindow = 1s\n"
	    "mode = gcra\nburst = 7\n"));
	assert_non_null(strstr(text, "burst = 1\nshadow = yes\n"));
	free(text);
	shmtd_config_free(&c);
}

/* [global] and global = yes: the Redis address, the host name, the
 * rules, and a print that loads back. */
static void
test_global(void **state)
{
	static const struct { const char *text; const char *want; } bad[] = {
		{ "[limiter a]\nlimit = 10\nwindow = 1s\nglobal = yes\n",
		  ":4: key 'global': [limiter a] is global, but [global] names no redis" },
		{ "[global]\nredis = localhost:6379\n",
		  ":2: key 'redis': 'localhost:6379' is not a Redis address" },
		{ "[global]\nredis = unix:relative.sock\n",
		  ":2: key 'redis': 'unix:relative.sock' is not a Redis address" },
		{ "[global]\nredis = tcp://h:0\n",
		  ":2: key 'redis': 'tcp://h:0' is not a Redis address" },
		{ "[global]\nredis = tcp://a:1, b:2\n",
		  ":2: key 'redis': 'tcp://a:1, b:2' is not a Redis address" },
		{ "[global]\nredis = , ,\n",
		  ":2: key 'redis': ', ,' is not a Redis address" },
		{ "[global]\nredis = sentinel://s:26379/a sentinel://t:26379/b\n",
		  ":2: key 'redis': 'sentinel://s:26379/a sentinel://t:26379/b' is not a Redis address" },
		{ "[global]\nredis = unix:/r.sock\n[limiter a]\nlimit = 10\n"
		  "window = 1s\nglobal = yes\nmode = exact\n",
		  ":6: key 'global': [limiter a]: global: 0 or 1, and a global limiter is a shared buckets limiter" },
		{ "[limiter a]\nlimit = 10\nwindow = 1s\noffline_limit = 5\n",
		  ":4: key 'offline_limit': [limiter a] is not global" },
		{ "[global]\nredis = unix:/r.sock\n[limiter a]\nlimit = 10\n"
		  "window = 1s\nglobal = yes\noffline_limit = 11\n",
		  ":7: key 'offline_limit': [limiter a]: at most limit (10)" },
		{ "[global]\nredis = unix:/r.sock\n[limiter a]\nkeys = x, y\n"
		  "window = 1s\nglobal = yes\noffline_limit = 1\n",
		  ":7: key 'offline_limit': [limiter a]: a global key pool takes no offline_limit" },
	};
	char path[64], path2[64], err[512], *text = NULL;
	struct shmtd_config c, c2;
	size_t n = 0;
	FILE *f;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(path, sizeof(path), bad[i].text);
		assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)),
		    -EINVAL);
		unlink(path);
		if (strstr(err, bad[i].want) == NULL)
			fail_msg("case %zu: got '%s', want '%s'", i, err,
			    bad[i].want);
	}
	write_file(path, sizeof(path), "[limiter g]\nlimit = 500\n"
	    "window = 10m\nglobal = yes\noffline_limit = 50\n[global]\n"
	    "redis = tcp://redis.internal:6379\nhost = web-17\nreplicas = 2\n");
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.global.redis, "tcp://redis.internal:6379");
	assert_string_equal(c.global.host, "web-17");
	assert_int_equal(c.global.replicas, 2);
	assert_int_equal(c.limiters[0].limit.global, 1);
	assert_int_equal(c.limiters[0].offline_limit, 50);
	f = open_memstream(&text, &n);
	assert_non_null(f);
	shmtd_config_print(f, &c);
	fclose(f);
	write_file(path2, sizeof(path2), text);
	assert_int_equal(shmtd_config_load(path2, &c2, err, sizeof(err)), 0);
	unlink(path2);
	assert_string_equal(c2.global.redis, c.global.redis);
	assert_string_equal(c2.global.host, "web-17");
	assert_int_equal(c2.global.replicas, 2);
	assert_int_equal(c2.limiters[0].limit.global, 1);
	assert_int_equal(c2.limiters[0].offline_limit, 50);
	free(text);
	shmtd_config_free(&c);
	shmtd_config_free(&c2);
	/* Cluster seeds: spaces, commas or both, kept as written. */
	write_file(path, sizeof(path), "[global]\nredis = tcp://10.0.0.1:7000, "
	    "tcp://10.0.0.2:7000 tcp://[::1]:7000,unix:/run/r.sock\n");
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.global.redis, "tcp://10.0.0.1:7000, "
	    "tcp://10.0.0.2:7000 tcp://[::1]:7000,unix:/run/r.sock");
	shmtd_config_free(&c);
	write_file(path, sizeof(path), "[global]\nredis = "
	    "sentinel://10.0.0.9:26379/main\n");
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.global.redis, "sentinel://10.0.0.9:26379/main");
	shmtd_config_free(&c);
	/* Without host =, the host's own name. */
	write_file(path, sizeof(path), "[global]\nredis = unix:/run/r.sock\n");
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), 0);
	unlink(path);
	assert_true(c.global.host[0] != '\0');
	shmtd_config_free(&c);
}

static void
test_long_line_and_missing_file(void **state)
{
	char text[400], path[64], err[512], want[128];
	struct shmtd_config c;

	snprintf(text, sizeof(text), "[limiter a]\nlimit = 1\nwindow = 1s\n"
	    "keys = %0300d\n", 7);
	write_file(path, sizeof(path), text);
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:4: line longer than", path);
	assert_true(strncmp(err, want, strlen(want)) == 0);
	unlink(path);
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "cannot read"));
}

/* A pool too long for one line is printed over continuation lines and
 * loads back identical; printing the reloaded config gives the same text. */
static void
test_print_roundtrip(void **state)
{
	struct shmtd_config a, b;
	char path[64], path2[64], err[512];
	char *text1 = NULL, *text2 = NULL;
	size_t n1 = 0, n2 = 0;
	FILE *f;
	char big[8192];
	size_t off;

	off = (size_t)snprintf(big, sizeof(big), "[segment]\nname = /rt\n"
	    "mode = 0640\narena = 1GiB\n[limiter pool]\nwindow = 250ms\n"
	    "uses_per_key = 3\nkeys = k0");
	for (int i = 1; i < 300; i++)
		off += (size_t)snprintf(big + off, sizeof(big) - off,
		    i % 10 == 0 ? ",\n  k%d" : ", k%d", i);
	snprintf(big + off, sizeof(big) - off, "\n[limiter ex]\nlimit = 7\n"
	    "window = 1.5s\nmode = exact\n[daemon]\nsnapshot = /tmp/x.snap\n"
	    "snapshot_interval = 90s\nlog = syslog\n[dictionary]\nenabled = no\n"
	    "[analyzer]\nthreshold = 25\n[counters]\nwindow = 1h\n"
	    "error = 0.0025\n");
	write_file(path, sizeof(path), big);
	assert_int_equal(shmtd_config_load(path, &a, err, sizeof(err)), 0);
	assert_int_equal(a.limiters[0].limit.nkeys, 300);
	assert_true(a.limiters[0].limit.limit == 900);

	f = open_memstream(&text1, &n1);
	shmtd_config_print(f, &a);
	fclose(f);
	write_file(path2, sizeof(path2), text1);
	if (shmtd_config_load(path2, &b, err, sizeof(err)) != 0)
		fail_msg("%s\n%s", err, text1);
	assert_int_equal(b.nlimiters, a.nlimiters);
	for (size_t i = 0; i < a.nlimiters; i++) {
		const shmt_limit_t *x = &a.limiters[i].limit, *y = &b.limiters[i].limit;

		assert_string_equal(a.limiters[i].name, b.limiters[i].name);
		assert_true(x->limit == y->limit && x->window_ns == y->window_ns &&
		    x->slack_ns == y->slack_ns && x->slack_uses == y->slack_uses &&
		    x->mode == y->mode && x->nkeys == y->nkeys &&
		    x->uses_per_key == y->uses_per_key);
		for (uint32_t k = 0; k < x->nkeys; k++)
			assert_string_equal(x->keys[k], y->keys[k]);
	}
	assert_true(b.seg.mode == 0640 && b.seg.arena_bytes == 1ULL << 30);
	assert_true(b.seg.dict_bytes == 0 && b.seg.analyzer_threshold_ppm == 250000);
	assert_true(b.seg.counters_window_ns == 3600000000000ULL);
	assert_int_equal(a.seg.counters_error_ppm, 2500);
	assert_int_equal(b.seg.counters_error_ppm, 2500);
	assert_non_null(strstr(text1, "error = 0.25%\n"));
	assert_string_equal(b.snapshot, "/tmp/x.snap");
	assert_string_equal(b.log_target, "syslog");
	snprintf(b.source, sizeof(b.source), "%s", a.source);
	f = open_memstream(&text2, &n2);
	shmtd_config_print(f, &b);
	fclose(f);
	assert_string_equal(text1, text2);
	free(text1);
	free(text2);
	shmtd_config_free(&a);
	shmtd_config_free(&b);
	unlink(path);
	unlink(path2);
}


/* Load TEXT (N bytes, written as is), print it, load the print and print
 * that: both must load and the two prints must match after their first
 * line (which names the file).  Returns the first print (malloc'd). */
static char *
roundtrip(const char *text, size_t n, struct shmtd_config *out)
{
	struct shmtd_config a, b;
	char path[64], path2[64], err[512];
	char *t1 = NULL, *t2 = NULL;
	size_t n1 = 0, n2 = 0;
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "/tmp/shmt-test-conf-XXXXXX");
	assert_true((fd = mkstemp(path)) >= 0);
	assert_true(write(fd, text, n) == (ssize_t)n);
	close(fd);
	if (shmtd_config_load(path, &a, err, sizeof(err)) != 0)
		fail_msg("does not load: %s", err);
	f = open_memstream(&t1, &n1);
	shmtd_config_print(f, &a);
	fclose(f);
	write_file(path2, sizeof(path2), t1);
	if (shmtd_config_load(path2, &b, err, sizeof(err)) != 0)
		fail_msg("its print does not load: %s\n%s", err, t1);
	f = open_memstream(&t2, &n2);
	shmtd_config_print(f, &b);
	fclose(f);
	assert_non_null(strchr(t1, '\n'));
	assert_non_null(strchr(t2, '\n'));
	assert_string_equal(strchr(t1, '\n'), strchr(t2, '\n'));
	free(t2);
	shmtd_config_free(&b);
	*out = a;
	unlink(path);
	unlink(path2);
	return t1;
}

/*
 * A key pool whose names hold ';' and '#' prints to a config that loads
 * and prints the same; a name that starts with one of them (printed after
 * ", " or at the start of a continuation line it would read as a comment,
 * and the printed pool lost keys) is refused where it is written.
 */
static void
test_pool_names_roundtrip(void **state)
{
	static const char found[] = "[limiter b]\nkeys=;x,a,b,c\n"
	    "uses_per_key=1\nwindow=1s\n";
	char text[4096], path[64], err[512], want[128];
	struct shmtd_config c;
	size_t off;
	char *t;

	write_file(path, sizeof(path), found);
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)),
	    -EINVAL);
	snprintf(want, sizeof(want), "%s:2: key 'keys': key name ';x'", path);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("got \"%s\", want \"%s...\"", err, want);
	unlink(path);

	/* 60 names: the printer wraps them, so some start a line. */
	off = (size_t)snprintf(text, sizeof(text), "[limiter b]\nwindow = 1s\n"
	    "keys = a;0");
	for (int i = 1; i < 60; i++)
		off += (size_t)snprintf(text + off, sizeof(text) - off,
		    "%s%s%d", i % 10 == 0 ? ",\n  " : ", ",
		    i % 2 ? "x#" : "k;", i);
	snprintf(text + off, sizeof(text) - off, "\n");
	t = roundtrip(text, strlen(text), &c);
	assert_int_equal(c.nlimiters, 1);
	assert_int_equal(c.limiters[0].limit.nkeys, 60);
	assert_true(c.limiters[0].limit.limit == 60);
	assert_string_equal(c.limiters[0].keys[0], "a;0");
	assert_string_equal(c.limiters[0].keys[1], "x#1");
	assert_string_equal(c.limiters[0].keys[2], "k;2");
	assert_string_equal(c.limiters[0].keys[59], "x#59");
	free(t);
	shmtd_config_free(&c);

	/* Names as long as a config line allows: 191 bytes after "keys = ",
	 * 197 on a line of their own.  Each prints on a line the loader
	 * reads (the printer once ended such a line with a comma, one byte
	 * too many). */
	{
		static const size_t lens[] = { 191, 197, 3, 197, 150, 2, 197 };
		char name[200], *line;

		off = (size_t)snprintf(text, sizeof(text),
		    "[limiter c]\nwindow = 1s\nkeys =");
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			memset(name, 'a' + (int)i, lens[i]);
			name[lens[i]] = '\0';
			off += (size_t)snprintf(text + off, sizeof(text) - off,
			    "%s%s", i == 0 ? " " : "\n ", name);
		}
		snprintf(text + off, sizeof(text) - off, "\n");
		t = roundtrip(text, strlen(text), &c);
		assert_int_equal(c.limiters[0].limit.nkeys, 7);
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			assert_int_equal(strlen(c.limiters[0].keys[i]), lens[i]);
			assert_int_equal(c.limiters[0].keys[i][0], 'a' + (int)i);
		}
		for (line = t; line != NULL && *line != '\0';) {
			char *nl = strchr(line, '\n');

			assert_true((nl != NULL ? (size_t)(nl - line) :
			    strlen(line)) <= 198);
			line = nl != NULL ? nl + 1 : NULL;
		}
		free(t);
		shmtd_config_free(&c);
	}
}

/* A NUL byte inside a line is refused at its line, never read as the end
 * of the value. */
static void
test_nul_byte(void **state)
{
	static const char text[] = "[daemon]\nlog = stderr\n"
	    "snapshot = /tmp/a\0/etc/passwd\n";
	char path[64], err[512], want[128];
	struct shmtd_config c;
	int fd;

	snprintf(path, sizeof(path), "/tmp/shmt-test-conf-XXXXXX");
	assert_true((fd = mkstemp(path)) >= 0);
	assert_true(write(fd, text, sizeof(text) - 1) ==
	    (ssize_t)sizeof(text) - 1);
	close(fd);
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)),
	    -EINVAL);
	snprintf(want, sizeof(want), "%s:3: NUL byte", path);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("got \"%s\", want \"%s...\"", err, want);
	unlink(path);
}

/* A directory or a FIFO given as the config file is refused at once (a
 * directory used to read as an empty file, a FIFO would block). */
static void
test_not_a_file(void **state)
{
	char dir[64], fifo[80], err[512];
	struct shmtd_config c;

	snprintf(dir, sizeof(dir), "/tmp/shmt-test-confdir-XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(shmtd_config_load(dir, &c, err, sizeof(err)),
	    -EISDIR);
	assert_non_null(strstr(err, "not a regular file"));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	/* No writer: a blocking open would wait for ever. */
	alarm(10);
	assert_int_equal(shmtd_config_load(fifo, &c, err, sizeof(err)),
	    -EINVAL);
	alarm(0);
	assert_non_null(strstr(err, "a FIFO"));
	unlink(fifo);
	rmdir(dir);
}

/* A limiter name longer than inih's 49-byte section buffer keeps every
 * byte; an empty [limiter NAME] is refused instead of vanishing. */
static void
test_sections(void **state)
{
	char text[256], path[64], err[512], name[64], want[128];
	struct shmtd_config c;

	memset(name, 'n', 63);
	name[63] = '\0';
	snprintf(text, sizeof(text), "[limiter %s]\nlimit = 1\nwindow = 1s\n",
	    name);
	write_file(path, sizeof(path), text);
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)), 0);
	assert_int_equal(c.nlimiters, 1);
	assert_string_equal(c.limiters[0].name, name);
	shmtd_config_free(&c);
	unlink(path);

	write_file(path, sizeof(path), "[limiter a]\n[daemon]\nlog = stderr\n");
	assert_int_equal(shmtd_config_load(path, &c, err, sizeof(err)),
	    -EINVAL);
	snprintf(want, sizeof(want), "%s:1: key 'window': [limiter a]", path);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("got \"%s\", want \"%s...\"", err, want);
	unlink(path);
}

/* The [dictionary] limits reach the segment's parameters, and print back. */
static void
test_dict_limits(void **state)
{
	static const char text[] = "[dictionary]\nmax_key = 16\n"
	    "max_value = 16B\ndefault_ttl = 1500ms\n";
	struct shmtd_config c;
	char *t;

	t = roundtrip(text, strlen(text), &c);
	assert_int_equal(c.seg.dict_max_key, 16);
	assert_int_equal(c.seg.dict_max_value, 16);
	assert_true(c.seg.dict_default_ttl_ms == 1500);
	assert_non_null(strstr(t, "default_ttl = 1500ms\n"));
	free(t);
	shmtd_config_free(&c);
	/* Left out: today's limits, no default TTL. */
	t = roundtrip("[dictionary]\nenabled = yes\n", 27, &c);
	assert_int_equal(c.seg.dict_max_key, SHMT_KEY_MAX);
	assert_int_equal(c.seg.dict_max_value, SHMT_VALUE_MAX);
	assert_true(c.seg.dict_default_ttl_ms == 0);
	free(t);
	shmtd_config_free(&c);
}

/* Every limiter of the built-in config lands in a segment as configured;
 * applying it again changes nothing (defining is idempotent). */
static void
test_apply(void **state)
{
	struct shmtd_config c;
	shmt_limiter_stat_t st;
	char name[128], err[512];
	shmt_t *h;

	tu_segname(name, sizeof(name), "apply");
	assert_int_equal(shmtd_config_load(NULL, &c, err, sizeof(err)), 0);
	assert_int_equal(shmt_create(name, &c.seg, &h), 0);
	if (shmtd_config_apply(h, &c, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(shmtd_config_apply(h, &c, err, sizeof(err)), 0);
	assert_int_equal(shmt_limiter_stat(h, "keys", &st), 0);
	assert_true(st.limit == 20 && st.nkeys == 4 && st.uses_per_key == 5);
	assert_int_equal(shmt_limiter_stat(h, "per-ip", &st), 0);
	assert_true(st.per_client && st.client_capacity == 4096);
	/* A changed limiter is refused and named, the others still apply. */
	c.limiters[0].limit.limit = 101;
	assert_int_equal(shmtd_config_apply(h, &c, err, sizeof(err)), -EEXIST);
	assert_non_null(strstr(err, "limiter 'api'"));
	assert_int_equal(shmt_limiter_stat(h, "api", &st), 0);
	assert_true(st.limit == 100);
	shmtd_config_free(&c);
	shmt_close(h);
	assert_int_equal(shmt_unlink(name), 0);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_format_roundtrip),
		cmocka_unit_test(test_builtin),
		cmocka_unit_test(test_example_parses),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_gcra),
		cmocka_unit_test(test_overrides),
		cmocka_unit_test(test_long_line_and_missing_file),
		cmocka_unit_test(test_print_roundtrip),
		cmocka_unit_test(test_apply),
		cmocka_unit_test(test_pool_names_roundtrip),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_not_a_file),
		cmocka_unit_test(test_sections),
		cmocka_unit_test(test_dict_limits),
		cmocka_unit_test(test_global),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s EXAMPLE.conf\n", argv[0]);
		return 2;
	}
	example_path = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
