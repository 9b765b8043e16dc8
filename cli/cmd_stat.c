/* SPDX-License-Identifier: MIT */
/*
 * stat: the segment as a whole: identity, regions, the daemon, the slots,
 * the dictionary, the counters and the hot-key analyzer.  Every region is shown, also one of size
 * zero: that is a feature the segment was created without, worth seeing.
 */
#include "cli.h"

#include "env.h"
#include "fmt.h"
#include "hot.h"
#include "prom.h"
#include "limlist.h"
#include "table.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The daemon's state in words: "up", "down" (it ran once) or "never". */
static const char *
daemon_state(const shmt_segment_stat_t *st)
{
	if (st->daemon_pid == 0)
		return "never";
	return st->daemon_alive ? "up" : "down";
}

/* The heartbeat's age, or 0 with *KNOWN cleared when there was none. */
static uint64_t
heartbeat_age(const shmt_segment_stat_t *st, shmt_time_t now, int *known)
{
	*known = st->daemon_heartbeat_ns != 0;
	if (!*known || st->daemon_heartbeat_ns > now)
		return 0;
	return now - st->daemon_heartbeat_ns;
}

static json_t *
region_json(const shmt_region_stat_t *r)
{
	return json_pack("{s:s, s:o, s:o, s:o}", "name", r->name,
	    "offset", shmtc_json_u64(r->offset),
	    "size", shmtc_json_u64(r->size),
	    "used", shmtc_json_u64(r->used));
}

/* The region named NAME, or NULL. */
static const shmt_region_stat_t *
region_of(const shmt_segment_stat_t *st, const char *name)
{
	for (uint32_t i = 0; i < st->nregions && i < SHMT_REGIONS_MAX; i++)
		if (strcmp(st->regions[i].name, name) == 0)
			return &st->regions[i];
	return NULL;
}

/* The dictionary's numbers, or null when the segment has none. */
static json_t *
dict_json(const shmt_dict_stat_t *d, int have)
{
	if (!have)
		return json_null();
	return json_pack("{s:i, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
	    "shards", (int)d->shards, "eviction", d->eviction != 0,
	    "bytes", shmtc_json_u64(d->bytes), "used", shmtc_json_u64(d->used),
	    "items", shmtc_json_u64(d->items),
	    "value_room", shmtc_json_u64(d->value_room),
	    "evictions", shmtc_json_u64(d->evictions),
	    "expirations", shmtc_json_u64(d->expirations),
	    "repairs", shmtc_json_u64(d->repairs));
}

/* The counters as the region table shows them (the library has no
 * counters statistics of their own), or null when there are none. */
/* The counters' error eps (*PPM) and k, the greatest exact count that is
 * answered exactly (shmt_hit's contract: k = ceil(2 / (3 eps))), found
 * from shmt_count_bound itself so that it shows what the library answers:
 * the answers 1..k-1 stand for themselves only, the answer k may also
 * stand for k + 1.  0 where the segment has no counters. */
static uint64_t
counters_exact_up_to(shmt_t *h, uint32_t *ppm)
{
	uint64_t lo, hi, a = 1, b = 1;

	*ppm = 0;
	if (shmt_count_bound(h, 1, &lo, &hi, ppm) != 0)
		return 0;
	if (lo != hi)
		return 1;
	/* Exactness holds for 1..k and fails above: double, then bisect. */
	while (b < (UINT64_C(1) << 40)) {
		b *= 2;
		if (shmt_count_bound(h, b, &lo, &hi, NULL) != 0 || lo != hi)
			break;
		a = b;
	}
	while (b - a > 1) {
		uint64_t m = a + (b - a) / 2;

		if (shmt_count_bound(h, m, &lo, &hi, NULL) == 0 && lo == hi)
			a = m;
		else
			b = m;
	}
	return a + 1;
}

static json_t *
counters_json(shmt_t *h, const shmt_segment_stat_t *st)
{
	const shmt_region_stat_t *r = region_of(st, "counters");
	uint32_t ppm = 0;
	uint64_t k;

	if (r == NULL || r->size == 0)
		return json_null();
	k = counters_exact_up_to(h, &ppm);
	return json_pack("{s:o, s:o, s:f, s:o}", "region_size",
	    shmtc_json_u64(r->size), "used", shmtc_json_u64(r->used),
	    "error", (double)ppm / 1e6, "exact_up_to", shmtc_json_u64(k));
}

/* The analyzer's geometry, or null when the segment has none. */
static json_t *
analyzer_json(const shmt_top_info_t *a, int have)
{
	if (!have)
		return json_null();
	return json_pack("{s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i}",
	    "memory_bytes", shmtc_json_u64(a->memory_bytes),
	    "window_ns", shmtc_json_u64(a->window_ns),
	    "subwindow_ns", shmtc_json_u64(a->subwindow_ns),
	    "subwindows", shmtc_json_u64(a->window_ns / a->subwindow_ns),
	    "threshold_ppm", (int)a->threshold_ppm,
	    "stripes", (int)a->stripes, "counters", (int)a->counters,
	    "probe", (int)a->probe);
}

static json_t *
stat_json(shmt_t *h, const shmt_segment_stat_t *st, shmt_time_t now,
    const shmt_dict_stat_t *d, int have_dict, const shmt_top_info_t *a,
    int have_an)
{
	json_t *regions = json_array();
	char fmtword[24];
	char mode[8];
	int known;
	uint64_t age = heartbeat_age(st, now, &known);

	for (uint32_t i = 0; i < st->nregions && i < SHMT_REGIONS_MAX; i++)
		json_array_append_new(regions, region_json(&st->regions[i]));
	snprintf(fmtword, sizeof(fmtword), "0x%016" PRIx64, st->format);
	snprintf(mode, sizeof(mode), "%04o", (unsigned)st->mode);
	return json_pack("{s:s, s:o, s:s, s:i, s:s, s:o, s:o, s:o,"
	    " s:{s:I, s:s, s:b, s:o, s:o, s:o, s:o},"
	    " s:{s:i, s:i, s:i, s:o}, s:{s:i, s:i}, s:o, s:o, s:o}",
	    "segment", shmt_name(h),
	    "size", shmtc_json_u64(st->size),
	    "format", fmtword,
	    "abi_version", (int)st->abi_version,
	    "mode", mode,
	    "created_wall_ns", shmtc_json_u64(st->created_wall_ns),
	    "now_ns", shmtc_json_u64(now),
	    "regions", regions,
	    "daemon",
	    "pid", (json_int_t)st->daemon_pid,
	    "state", daemon_state(st),
	    "alive", st->daemon_alive != 0,
	    "heartbeat_ns", shmtc_json_u64(st->daemon_heartbeat_ns),
	    "heartbeat_age_ns", known ? shmtc_json_u64(age) : json_null(),
	    "lag_ns", shmtc_json_u64(st->daemon_lag_ns),
	    "housekeeping_runs", shmtc_json_u64(st->housekeeping_runs),
	    "slots",
	    "max", (int)st->max_slots,
	    "in_use", (int)st->slots,
	    "stale", (int)st->slots_stale,
	    "reaped", shmtc_json_u64(st->slots_reaped),
	    "limiters",
	    "max", (int)st->max_limiters,
	    "in_use", (int)st->limiters,
	    "dictionary", dict_json(d, have_dict),
	    "counters", counters_json(h, st),
	    "analyzer", analyzer_json(a, have_an));
}

static void
print_daemon(const shmt_segment_stat_t *st, shmt_time_t now)
{
	char age[SHMTC_FMT_MAX], lag[SHMTC_FMT_MAX];
	int known;
	uint64_t a = heartbeat_age(st, now, &known);

	if (st->daemon_pid == 0) {
		printf("daemon     down (never ran on this segment)\n");
		return;
	}
	shmtc_fmt_dur(age, sizeof(age), a);
	shmtc_fmt_dur(lag, sizeof(lag), st->daemon_lag_ns);
	printf("daemon     %s, pid %" PRId64 ", last heartbeat %s%s, lag %s, "
	    "%" PRIu64 " housekeeping runs\n",
	    st->daemon_alive ? "up" : "down", st->daemon_pid,
	    known ? age : "never", known ? " ago" : "", lag,
	    st->housekeeping_runs);
}

static void
print_created(uint64_t wall_ns)
{
	time_t t = (time_t)(wall_ns / 1000000000ULL);
	struct tm tm;
	char when[64], ago[SHMTC_FMT_MAX];
	uint64_t now = shmt__clock_ns(CLOCK_REALTIME);

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	printf("created    %s (%s)\n", when,
	    shmtc_fmt_rel(ago, sizeof(ago), wall_ns, now));
}

static void
print_dict(shmt_t *h, const shmt_segment_stat_t *st,
    const shmt_dict_stat_t *d, int have)
{
	const shmt_region_stat_t *r = region_of(st, "counters");
	char used[SHMTC_FMT_MAX], bytes[SHMTC_FMT_MAX], room[SHMTC_FMT_MAX];

	if (!have) {
		printf("dictionary none (created with its size 0)\n");
	} else {
		printf("dictionary %u shards, %" PRIu64 " items, %s of %s used, "
		    "room for a %s value, eviction %s\n", d->shards, d->items,
		    shmtc_fmt_bytes(used, sizeof(used), d->used),
		    shmtc_fmt_bytes(bytes, sizeof(bytes), d->bytes),
		    shmtc_fmt_bytes(room, sizeof(room), d->value_room),
		    d->eviction ? "on" : "off");
		printf("           %" PRIu64 " evictions, %" PRIu64
		    " expirations, %" PRIu64 " repairs\n", d->evictions,
		    d->expirations, d->repairs);
	}
	if (r == NULL || r->size == 0)
		printf("counters   none (created with its size 0)\n");
	else {
		uint32_t ppm;
		uint64_t k = counters_exact_up_to(h, &ppm);

		printf("counters   %s of %s used, error %g%% (exact up to %"
		    PRIu64 " hits)\n",
		    shmtc_fmt_bytes(used, sizeof(used), r->used),
		    shmtc_fmt_bytes(bytes, sizeof(bytes), r->size),
		    (double)ppm / 1e4, k);
	}
}

static void
print_analyzer(const shmt_top_info_t *a, int have)
{
	char bytes[SHMTC_FMT_MAX], win[SHMTC_FMT_MAX], sub[SHMTC_FMT_MAX];
	char pct[16];

	if (!have) {
		printf("analyzer   none (created with its size 0)\n");
		return;
	}
	printf("analyzer   %s, window %s in %" PRIu64 " sub-windows of %s, "
	    "threshold %s, %u stripes x %u counters\n",
	    shmtc_fmt_bytes(bytes, sizeof(bytes), a->memory_bytes),
	    shmtc_fmt_dur(win, sizeof(win), a->window_ns),
	    a->window_ns / a->subwindow_ns,
	    shmtc_fmt_dur(sub, sizeof(sub), a->subwindow_ns),
	    shmtc_hot_pct_ppm(pct, sizeof(pct), a->threshold_ppm),
	    a->stripes, a->counters);
}

/* One line per global limiter (none: nothing). */
static void
print_global(shmt_t *h)
{
	shmt_limiter_stat_t *v = NULL;
	size_t n = 0;

	if (shmtc_limiter_list(h, &v, &n) != 0)
		return;
	for (size_t i = 0; i < n; i++)
		shmtc_global_print(h, v[i].name);
	free(v);
}

static json_t *
global_json(shmt_t *h)
{
	shmt_limiter_stat_t *v = NULL;
	json_t *o = json_object();
	size_t n = 0;

	if (shmtc_limiter_list(h, &v, &n) != 0)
		return o;
	for (size_t i = 0; i < n; i++) {
		json_t *g = shmtc_global_json(h, v[i].name);

		if (json_is_null(g))
			json_decref(g);
		else
			json_object_set_new(o, v[i].name, g);
	}
	free(v);
	return o;
}

static int
stat_human(shmt_t *h, const shmt_segment_stat_t *st, shmt_time_t now,
    const shmt_dict_stat_t *d, int have_dict, const shmt_top_info_t *a,
    int have_an)
{
	static const char *const hdr[] = { "REGION", "OFFSET", "SIZE", "USED",
		"USE" };
	char sz[SHMTC_FMT_MAX], used[SHMTC_FMT_MAX], pct[8], off[24];
	struct shmtc_table t;
	int rc;

	printf("segment    %s\n", shmt_name(h));
	printf("size       %s (%" PRIu64 " bytes)\n",
	    shmtc_fmt_bytes(sz, sizeof(sz), st->size), st->size);
	printf("format     0x%016" PRIx64 " (ABI %u)\n", st->format,
	    st->abi_version);
	printf("mode       %04o\n", (unsigned)st->mode);
	print_created(st->created_wall_ns);
	print_daemon(st, now);
	printf("slots      %u of %u in use, %u stale, %" PRIu64 " reaped\n",
	    st->slots, st->max_slots, st->slots_stale, st->slots_reaped);
	printf("limiters   %u of %u\n", st->limiters, st->max_limiters);
	print_dict(h, st, d, have_dict);
	print_analyzer(a, have_an);
	print_global(h);
	putchar('\n');

	shmtc_table_init(&t, 5, hdr, "lrrrr");
	for (uint32_t i = 0; i < st->nregions && i < SHMT_REGIONS_MAX; i++) {
		const shmt_region_stat_t *r = &st->regions[i];
		const char *row[5] = { r->name, off,
			shmtc_fmt_bytes(sz, sizeof(sz), r->size),
			shmtc_fmt_bytes(used, sizeof(used), r->used),
			shmtc_fmt_pct(pct, sizeof(pct), r->used, r->size) };

		snprintf(off, sizeof(off), "%" PRIu64, r->offset);
		shmtc_table_row(&t, row);
	}
	rc = shmtc_table_print(&t, stdout);
	shmtc_table_free(&t);
	return rc == 0 ? SHMTC_OK : SHMTC_MISSING;
}

/* The options of stat: --prometheus (not with --json).  0 to go on, -1
 * after help, or the exit code of a usage error. */
static int
stat_parse(struct shmtc *c, int argc, char **argv, int *prometheus)
{
	static const struct option longopts[] = {
		{ "prometheus", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 }
	};
	char *arg;
	int opt;

	while ((opt = shmtc_getopt(c, argc, argv, "", longopts, &arg)) >= 0)
		*prometheus = 1;
	if (opt == -2)
		return -1;
	if (opt != -1)
		return shmtc_getopt_exit(opt);
	if (*prometheus && c->json)
		return shmtc_usage_error(c, "--prometheus and --json exclude "
		    "each other");
	return shmtc_operands(c, argc, argv, 0, 0);
}

int
shmtc_cmd_stat(struct shmtc *c, int argc, char **argv)
{
	shmt_dict_stat_t d;
	shmt_segment_stat_t st;
	shmt_top_info_t a;
	int have_dict, have_an, prometheus = 0;
	shmt_t *h = NULL;
	shmt_time_t now;
	int rc;

	if ((rc = stat_parse(c, argc, argv, &prometheus)) != 0)
		return rc < 0 ? SHMTC_OK : rc;
	if ((rc = shmtc_open(c, &h)) != 0)
		return rc;
	if (prometheus) {
		rc = shmtd_prom_write(stdout, h, NULL);
		if (rc == 0 && fflush(stdout) != 0)
			rc = -EIO;
		if (rc != 0) {
			shmtc_err("%s: metrics: %s", c->segment,
			    shmt_strerror(rc));
			rc = rc == -EIO ? SHMTC_NO : shmtc_exit_for(rc);
		}
		goto out;
	}
	if ((rc = shmt_segment_stat(h, &st)) != 0) {
		shmtc_err("%s: %s", c->segment, shmt_strerror(rc));
		rc = shmtc_exit_for(rc);
		goto out;
	}
	rc = shmt_dict_stat(h, &d);
	if (rc != 0 && rc != -ENODEV) {
		shmtc_err("%s: dictionary: %s", c->segment, shmt_strerror(rc));
		rc = shmtc_exit_for(rc);
		goto out;
	}
	have_dict = rc == 0;
	/* With room for no key, the analyzer answers with its geometry only. */
	rc = shmt_top_keys(h, NULL, 0, &a);
	if (rc < 0 && rc != -ENODEV) {
		shmtc_err("%s: analyzer: %s", c->segment, shmt_strerror(rc));
		rc = rc == -ENOMEM ? SHMTC_MISSING : shmtc_exit_for(rc);
		goto out;
	}
	have_an = rc >= 0;
	now = shmt_now(h);
	if (c->json) {
		json_t *o = stat_json(h, &st, now, &d, have_dict, &a, have_an);

		if (o != NULL)
			json_object_set_new(o, "global", global_json(h));
		rc = shmtc_json_emit(o);
	}
	else
		rc = stat_human(h, &st, now, &d, have_dict, &a, have_an);
out:
	shmt_close(h);
	return rc;
}
