/* SPDX-License-Identifier: MIT */
/*
 * create and destroy: make or remove a segment without the daemon, for
 * scripts and tests.  With a config file, create defines its limiters too,
 * through the daemon's own parser, so both read a file the same way.
 */
#include "cli.h"

#include "daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHMT_CLI_HAVE_CONFIG
#include "config.h"
#endif

enum { OPT_MAXLIM = 0x200, OPT_MAXSLOTS, OPT_ARENA, OPT_MODE, OPT_DICT,
	OPT_DICT_SHARDS, OPT_NO_EVICTION, OPT_COUNTERS, OPT_ANALYZER };

/* A number with an optional K, M, G or T (binary) suffix. */
static int
parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -ERANGE;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' && shift != 0)
		end++;
	if (*end == 'B' || (*end == 'b' && shift != 0))
		end++;
	if (*end != '\0')
		return -EINVAL;
	if (shift != 0 && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

static int
parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;

	if (parse_size(s, &v) != 0 || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int
parse_mode(const char *s, mode_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 8);
	/* Writable by every user: the library refuses such a segment. */
	if (errno != 0 || *s == '\0' || *end != '\0' || v > 0777 || (v & 02))
		return -EINVAL;
	*out = (mode_t)v;
	return 0;
}

struct create_opts {
	const char *config;
	int segment_given;
	shmt_config_t seg;
};

static int
create_parse(struct shmtc *c, int argc, char **argv, struct create_opts *o)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "max-limiters", required_argument, NULL, OPT_MAXLIM },
		{ "max-slots", required_argument, NULL, OPT_MAXSLOTS },
		{ "arena", required_argument, NULL, OPT_ARENA },
		{ "mode", required_argument, NULL, OPT_MODE },
		{ "dict", required_argument, NULL, OPT_DICT },
		{ "dict-shards", required_argument, NULL, OPT_DICT_SHARDS },
		{ "no-eviction", no_argument, NULL, OPT_NO_EVICTION },
		{ "counters", required_argument, NULL, OPT_COUNTERS },
		{ "analyzer", required_argument, NULL, OPT_ANALYZER },
		{ NULL, 0, NULL, 0 }
	};
	char *arg;
	int opt, bad = 0;

	shmt_config_init(&o->seg);
	while ((opt = shmtc_getopt(c, argc, argv, "c:", longopts, &arg)) >= 0) {
		if (opt == 'c')
			o->config = arg;
		else if (opt == OPT_MAXLIM)
			bad = parse_u32(arg, &o->seg.max_limiters);
		else if (opt == OPT_MAXSLOTS)
			bad = parse_u32(arg, &o->seg.max_slots);
		else if (opt == OPT_ARENA)
			bad = parse_size(arg, &o->seg.arena_bytes);
		else if (opt == OPT_MODE)
			bad = parse_mode(arg, &o->seg.mode);
		else if (opt == OPT_DICT)
			bad = parse_size(arg, &o->seg.dict_bytes);
		else if (opt == OPT_DICT_SHARDS)
			bad = parse_u32(arg, &o->seg.dict_shards);
		else if (opt == OPT_NO_EVICTION)
			o->seg.dict_eviction = 0;
		else if (opt == OPT_COUNTERS)
			bad = parse_size(arg, &o->seg.counters_bytes);
		else if (opt == OPT_ANALYZER)
			bad = parse_size(arg, &o->seg.analyzer_bytes);
		if (bad != 0)
			return shmtc_usage_error(c, "bad value '%s'", arg);
	}
	if (opt == -2)
		return -1;      /* help printed: exit 0 without running */
	if (opt != -1)
		return shmtc_getopt_exit(opt);
	o->segment_given = c->segment_given;
	return shmtc_operands(c, argc, argv, 0, 0);
}

static int
create_report(const struct shmtc *c, shmt_t *h, size_t nlimiters)
{
	shmt_segment_stat_t st;

	if (shmt_segment_stat(h, &st) != 0)
		memset(&st, 0, sizeof(st));
	if (c->json)
		return shmtc_json_emit(json_pack("{s:s, s:b, s:o, s:i}",
		    "segment", shmt_name(h), "created", 1,
		    "size", shmtc_json_u64(st.size),
		    "limiters", (int)nlimiters));
	printf("created %s (%" PRIu64 " bytes, %zu limiters)\n", shmt_name(h),
	    st.size, nlimiters);
	return SHMTC_OK;
}

static int
create_error(const struct shmtc *c, const char *name, int err)
{
	if (err == -EEXIST) {
		shmtc_err("segment %s already exists", name);
		return SHMTC_NO;
	}
	shmtc_err("cannot create %s: %s", name, shmt_strerror(err));
	return err == -EINVAL || err == -ENAMETOOLONG ? SHMTC_USAGE :
	    SHMTC_MISSING;
}

#ifdef SHMT_CLI_HAVE_CONFIG
/* Create from a config file: its sizes, its limiters, and its segment name
 * unless -s named one.  A limiter that cannot be defined removes the
 * segment again, so a failed create leaves nothing behind. */
static int
create_from_config(struct shmtc *c, const struct create_opts *o)
{
	struct shmtd_config cfg;
	char err[512];
	const char *name;
	shmt_t *h = NULL;
	int rc;

	if ((rc = shmtd_config_load(o->config, &cfg, err, sizeof(err))) != 0) {
		shmtc_err("%s", err);
		return rc == -EINVAL ? SHMTC_USAGE : SHMTC_MISSING;
	}
	name = o->segment_given ? c->segment : cfg.segment;
	if ((rc = shmt_create(name, &cfg.seg, &h)) != 0) {
		rc = create_error(c, name, rc);
		goto out;
	}
	if ((rc = shmtd_config_apply(h, &cfg, err, sizeof(err))) != 0) {
		shmtc_err("%s", err);
		shmt_close(h);
		shmt_unlink(name);
		rc = rc == -EINVAL || rc == -EEXIST ? SHMTC_USAGE :
		    shmtc_exit_for(rc);
		goto out;
	}
	rc = create_report(c, h, cfg.nlimiters);
	shmt_close(h);
out:
	shmtd_config_free(&cfg);
	return rc;
}
#endif

int
shmtc_cmd_create(struct shmtc *c, int argc, char **argv)
{
	struct create_opts o = { 0 };
	shmt_t *h = NULL;
	int rc;

	if ((rc = create_parse(c, argc, argv, &o)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if (o.config != NULL) {
#ifdef SHMT_CLI_HAVE_CONFIG
		return create_from_config(c, &o);
#else
		shmtc_err("this build reads no config files (built without "
		    "the daemon)");
		return SHMTC_USAGE;
#endif
	}
	if ((rc = shmt_create(c->segment, &o.seg, &h)) != 0)
		return create_error(c, c->segment, rc);
	rc = create_report(c, h, 0);
	shmt_close(h);
	return rc;
}

/* Refuse to remove an object that is not a segment (a typo in -s must not
 * delete another program's memory); a damaged or older segment goes. */
static int
destroy_guard(const struct shmtc *c)
{
	shmt_t *h = NULL;
	int rc = shmtc_attach(c, &h);

	shmt_close(h);
	if (rc == SHMT_EMAGIC || rc == SHMT_ENOTREG) {
		shmtc_err("%s is not a shmthrottle segment (%s): not removed; "
		    "--force removes it anyway", c->segment, shmt_strerror(rc));
		return SHMTC_MISSING;
	}
	return 0;
}

int
shmtc_cmd_destroy(struct shmtc *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 }
	};
	int force = 0;
	char *arg;
	int rc;

	while ((rc = shmtc_getopt(c, argc, argv, "f", longopts, &arg)) == 'f')
		force = 1;
	if (rc != -1)
		return shmtc_getopt_exit(rc);
	if ((rc = shmtc_operands(c, argc, argv, 0, 0)) != 0)
		return rc;
	if (!force && (rc = destroy_guard(c)) != 0)
		return rc;
	rc = shmt_unlink(c->segment);
	if (rc == -ENOENT) {
		shmtc_err("segment %s does not exist", c->segment);
		return SHMTC_MISSING;
	}
	if (rc != 0) {
		shmtc_err("cannot remove %s: %s", c->segment, shmt_strerror(rc));
		return shmtc_exit_for(rc);
	}
	if (c->json)
		return shmtc_json_emit(json_pack("{s:s, s:b}", "segment",
		    c->segment, "destroyed", 1));
	printf("destroyed %s\n", c->segment);
	return SHMTC_OK;
}

/* One KEY=VALUE of resize into C. */
static int
resize_one(struct shmtc *c, shmt_config_t *cfg, const char *kv)
{
	const char *eq = strchr(kv, '=');
	const char *v = eq != NULL ? eq + 1 : NULL;
	size_t klen = eq != NULL ? (size_t)(eq - kv) : 0;
	int bad;

#define KEY(k) (klen == strlen(k) && strncmp(kv, k, klen) == 0)
	if (v == NULL || *v == '\0')
		return shmtc_usage_error(c, "'%s': expected KEY=VALUE", kv);
	if (KEY("max_limiters"))
		bad = parse_u32(v, &cfg->max_limiters);
	else if (KEY("max_slots"))
		bad = parse_u32(v, &cfg->max_slots);
	else if (KEY("arena"))
		bad = parse_size(v, &cfg->arena_bytes);
	else if (KEY("dict"))
		bad = parse_size(v, &cfg->dict_bytes);
	else if (KEY("dict_shards"))
		bad = parse_u32(v, &cfg->dict_shards);
	else if (KEY("counters"))
		bad = parse_size(v, &cfg->counters_bytes);
	else if (KEY("counters_shards"))
		bad = parse_u32(v, &cfg->counters_shards);
	else
		return shmtc_usage_error(c, "'%.*s': the keys are max_limiters, "
		    "max_slots, arena, dict, dict_shards, counters and "
		    "counters_shards", (int)klen, kv);
#undef KEY
	if (bad != 0)
		return shmtc_usage_error(c, "bad value '%s'", v);
	return 0;
}

/* resize KEY=VALUE...: move the segment into a new generation. */
int
shmtc_cmd_resize(struct shmtc *c, int argc, char **argv)
{
	shmt_config_t cfg;
	shmt_t *h = NULL;
	char err[768], *arg;
	uint64_t t0;
	int rc;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if (argc - optind < 1)
		return shmtc_usage_error(c, "expected KEY=VALUE...");
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	shmt__move_config(h, &cfg);
	for (int i = optind; i < argc; i++)
		if ((rc = resize_one(c, &cfg, argv[i])) != 0) {
			shmt_close(h);
			return rc;
		}
	t0 = shmt__mono_ns();
	rc = shmt__move(h, &cfg, NULL, NULL, err, sizeof(err));
	shmt_close(h);
	if (rc != 0) {
		shmtc_err("cannot resize %s: %s; it keeps its sizes and its "
		    "state", c->segment, err);
		return rc == -EINVAL || rc == -ENOSPC ? SHMTC_NO :
		    shmtc_exit_for(rc);
	}
	t0 = shmt__mono_ns() - t0;
	if (c->json)
		return shmtc_json_emit(json_pack("{s:s, s:b, s:o, s:i, s:i, "
		    "s:o, s:o, s:o}", "segment", c->segment, "moved", 1,
		    "ms", shmtc_json_u64(t0 / 1000000),
		    "max_limiters", (int)cfg.max_limiters,
		    "max_slots", (int)cfg.max_slots,
		    "arena", shmtc_json_u64(cfg.arena_bytes),
		    "dict", shmtc_json_u64(cfg.dict_bytes),
		    "counters", shmtc_json_u64(cfg.counters_bytes)));
	printf("moved %s to a new generation in %" PRIu64 " ms: max_limiters=%u "
	    "max_slots=%u arena=%" PRIu64 " dict=%" PRIu64 " counters=%" PRIu64
	    "\nrunning workers follow on their next call.  If shmthrottled "
	    "runs from a config, put the same sizes in it ([segment], "
	    "[dictionary], [counters]): its next reload moves the segment to "
	    "the config's sizes.\n", c->segment, t0 / 1000000,
	    cfg.max_limiters, cfg.max_slots, cfg.arena_bytes, cfg.dict_bytes,
	    cfg.counters_bytes);
	return SHMTC_OK;
}
