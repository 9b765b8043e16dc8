/* SPDX-License-Identifier: MIT */
/*
 * The segment's metrics in Prometheus' text format.  Names follow
 * Prometheus' conventions: a shmthrottle_ prefix, base units (seconds,
 * bytes) in the name, _total on counters only, and one family's samples
 * together under its HELP and TYPE lines.  Counters come from the segment,
 * so they count since the segment was created and restart from zero with a
 * new segment, which Prometheus reads as a counter reset.
 */
#include "prom.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t lag_bounds_ns[SHMTD_LAG_BUCKETS] = {
	100000ULL, 500000ULL, 1000000ULL, 5000000ULL, 10000000ULL,
	50000000ULL, 100000000ULL, 500000000ULL, 1000000000ULL, 5000000000ULL
};
static const char *const lag_bounds_s[SHMTD_LAG_BUCKETS] = {
	"0.0001", "0.0005", "0.001", "0.005", "0.01",
	"0.05", "0.1", "0.5", "1", "5"
};

void
shmtd_lag_observe(struct shmtd_lag_hist *lh, uint64_t lag_ns)
{
	int b = 0;

	while (b < SHMTD_LAG_BUCKETS && lag_ns > lag_bounds_ns[b])
		b++;
	__atomic_fetch_add(&lh->lh_sum_ns, lag_ns, __ATOMIC_RELAXED);
	__atomic_fetch_add(&lh->lh_counts[b], 1, __ATOMIC_RELAXED);
}

/*
 * A label value.  Limiter names from the config are plain ASCII, but
 * shmt_limiter_define() takes any bytes, and the format wants valid UTF-8:
 * bytes outside printable ASCII and '%' itself are written as %XX, '"' and
 * '\' are escaped as the format says.  The mapping is one to one, so two
 * limiters never become one series.
 */
static void
put_label(FILE *f, const char *v)
{
	for (const unsigned char *c = (const unsigned char *)v; *c != '\0'; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20 || *c > 0x7e || *c == '%')
			fprintf(f, "%%%02X", *c);
		else
			fputc(*c, f);
	}
}

static void
family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample NAME{limiter="L"[,reason="R"]} V. */
static void
lim_sample(FILE *f, const char *name, const char *lim, const char *reason,
    uint64_t v)
{
	fprintf(f, "%s{limiter=\"", name);
	put_label(f, lim);
	if (reason != NULL)
		fprintf(f, "\",reason=\"%s", reason);
	fprintf(f, "\"} %" PRIu64 "\n", v);
}

static void
gauge1(FILE *f, const char *name, const char *type, const char *help,
    uint64_t v)
{
	family(f, name, type, help);
	fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void
write_limiters(FILE *f, const shmt_limiter_stat_t *ls, size_t n)
{
	static const char *const reasons[] = { "exhausted", "slack",
		"table_full", "ring_full", "rule" };

	family(f, "shmthrottle_grants_total", "counter",
	    "Uses granted by the limiter since the segment was created.");
	for (size_t i = 0; i < n; i++)
		lim_sample(f, "shmthrottle_grants_total", ls[i].name, NULL,
		    ls[i].grants);
	family(f, "shmthrottle_denials_total", "counter",
	    "Uses denied by the limiter, by reason: exhausted (no free use), "
	    "slack (the buckets' allowed false negative), table_full (per-"
	    "client table full), ring_full (no free bucket), rule (a "
	    "client's deny override).");
	for (size_t i = 0; i < n; i++) {
		const uint64_t v[] = { ls[i].denied_exhausted, ls[i].denied_slack,
			ls[i].denied_table_full, ls[i].denied_ring_full,
			ls[i].denied_by_rule };

		for (size_t r = 0; r < 5; r++)
			lim_sample(f, "shmthrottle_denials_total", ls[i].name,
			    reasons[r], v[r]);
	}
	family(f, "shmthrottle_limit_uses", "gauge",
	    "Uses the limiter allows per window (per client for per-client "
	    "limiters).");
	for (size_t i = 0; i < n; i++)
		lim_sample(f, "shmthrottle_limit_uses", ls[i].name, NULL,
		    ls[i].limit);
	family(f, "shmthrottle_window_seconds", "gauge",
	    "The limiter's rolling window.");
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "shmthrottle_window_seconds{limiter=\"");
		put_label(f, ls[i].name);
		fprintf(f, "\"} %" PRIu64 ".%09" PRIu64 "\n",
		    ls[i].window_ns / (uint64_t)1000000000,
		    ls[i].window_ns % (uint64_t)1000000000);
	}
	family(f, "shmthrottle_in_flight_uses", "gauge",
	    "Uses held and not yet released (per-client limiters: summed "
	    "over their clients).");
	for (size_t i = 0; i < n; i++)
		lim_sample(f, "shmthrottle_in_flight_uses", ls[i].name, NULL,
		    ls[i].in_flight);
	family(f, "shmthrottle_free_uses", "gauge",
	    "Uses that may be granted now (not for per-client limiters).");
	for (size_t i = 0; i < n; i++)
		if (!ls[i].per_client)
			lim_sample(f, "shmthrottle_free_uses", ls[i].name, NULL,
			    ls[i].free);
	family(f, "shmthrottle_buckets_in_use", "gauge",
	    "Buckets sealed or active in the limiter's ring (buckets mode).");
	for (size_t i = 0; i < n; i++)
		if (ls[i].mode == SHMT_MODE_BUCKETS && !ls[i].per_client)
			lim_sample(f, "shmthrottle_buckets_in_use", ls[i].name,
			    NULL, ls[i].buckets_in_use);
	family(f, "shmthrottle_buckets", "gauge",
	    "Buckets in the limiter's ring (buckets mode).");
	for (size_t i = 0; i < n; i++)
		if (ls[i].mode == SHMT_MODE_BUCKETS && !ls[i].per_client)
			lim_sample(f, "shmthrottle_buckets", ls[i].name, NULL,
			    ls[i].nbuckets);
	family(f, "shmthrottle_clients_in_use", "gauge",
	    "Entries in use in a per-client limiter's table.");
	for (size_t i = 0; i < n; i++)
		if (ls[i].per_client)
			lim_sample(f, "shmthrottle_clients_in_use", ls[i].name,
			    NULL, ls[i].clients_in_use);
	family(f, "shmthrottle_clients", "gauge",
	    "Entries in a per-client limiter's table.");
	for (size_t i = 0; i < n; i++)
		if (ls[i].per_client)
			lim_sample(f, "shmthrottle_clients", ls[i].name, NULL,
			    ls[i].client_capacity);	family(f, "shmthrottle_allowed_by_rule_total", "counter",
	    "Requests of a per-client limiter granted by a client's allow "
	    "override (not counted in grants).");
	for (size_t i = 0; i < n; i++)
		if (ls[i].per_client)
			lim_sample(f, "shmthrottle_allowed_by_rule_total",
			    ls[i].name, NULL, ls[i].allowed_by_rule);
	family(f, "shmthrottle_overrides_in_use", "gauge",
	    "Clients of a per-client limiter with an override (a limit, "
	    "allow or deny).");
	for (size_t i = 0; i < n; i++)
		if (ls[i].per_client)
			lim_sample(f, "shmthrottle_overrides_in_use", ls[i].name,
			    NULL, ls[i].overrides_in_use);
}

/* Global limiters (leased from Redis): the same names as the CLI's
 * `global` object; no family at all when there is none. */
static void
write_global(FILE *f, shmt_t *h, const shmt_limiter_stat_t *ls, size_t n)
{
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{ "shmthrottle_global_state", "gauge", "What the daemon last knew "
		    "of Redis: 0 unknown, 1 online, 2 offline, 3 waiting (Redis "
		    "lost its state), 4 mismatch, 5 fallback (offline_limit)." },
		{ "shmthrottle_global_lease_uses", "gauge",
		    "Uses in this host's open leases." },
		{ "shmthrottle_global_lease_used_uses", "gauge",
		    "Of those, granted." },
		{ "shmthrottle_global_host_in_flight_uses", "gauge",
		    "Uses this host holds in Redis." },
		{ "shmthrottle_global_fleet_in_flight_uses", "gauge",
		    "Uses every host holds, as Redis counted at this host's "
		    "last request." },
		{ "shmthrottle_global_rtt_seconds", "gauge",
		    "Redis's round trip, last request." },
		{ "shmthrottle_global_errors_total", "counter",
		    "Failed Redis requests since the daemon started." },
		{ "shmthrottle_global_leases_total", "counter",
		    "Leases taken since the daemon started." },
		{ "shmthrottle_global_requests_total", "counter",
		    "Redis calls since the daemon started." },
	};
	shmt_global_stat_t *g = calloc(n > 0 ? n : 1, sizeof(*g));
	int *is = calloc(n > 0 ? n : 1, sizeof(*is));
	size_t any = 0;

	if (g == NULL || is == NULL)
		goto out;
	for (size_t i = 0; i < n; i++)
		any += is[i] = shmt_global_stat(h, ls[i].name, &g[i]) == 0;
	for (size_t k = 0; any > 0 && k < sizeof(fam) / sizeof(fam[0]); k++) {
		family(f, fam[k].name, fam[k].type, fam[k].help);
		for (size_t i = 0; i < n; i++) {
			const uint64_t v[] = { (uint64_t)g[i].state,
				g[i].lease_cap, g[i].lease_used,
				g[i].host_in_flight, g[i].fleet_in_flight,
				g[i].rtt_ns, g[i].errors, g[i].leases,
				g[i].requests };

			if (!is[i])
				continue;
			if (k == 5) {
				fprintf(f, "%s{limiter=\"", fam[k].name);
				put_label(f, ls[i].name);
				fprintf(f, "\"} %" PRIu64 ".%09" PRIu64 "\n",
				    v[k] / 1000000000, v[k] % 1000000000);
			} else {
				lim_sample(f, fam[k].name, ls[i].name, NULL,
				    v[k]);
			}
		}
	}
out:
	free(g);
	free(is);
}

static void
write_dict(FILE *f, shmt_t *h)
{
	shmt_dict_stat_t ds;

	if (shmt_dict_stat(h, &ds) != 0)
		return; /* no dictionary in this segment */
	gauge1(f, "shmthrottle_dict_items", "gauge",
	    "Items in the dictionary.", ds.items);
	gauge1(f, "shmthrottle_dict_bytes", "gauge",
	    "Heap bytes of the dictionary, all shards.", ds.bytes);
	gauge1(f, "shmthrottle_dict_used_bytes", "gauge",
	    "Dictionary heap bytes in allocated blocks.", ds.used);
	gauge1(f, "shmthrottle_dict_value_room_bytes", "gauge",
	    "Largest value that fits now under any key without evicting.",
	    ds.value_room);
	gauge1(f, "shmthrottle_dict_shards", "gauge",
	    "Shards of the dictionary.", ds.shards);
	gauge1(f, "shmthrottle_dict_evictions_total", "counter",
	    "Dictionary items evicted to make room.", ds.evictions);
	gauge1(f, "shmthrottle_dict_expirations_total", "counter",
	    "Expired dictionary items reclaimed.", ds.expirations);
	gauge1(f, "shmthrottle_dict_repairs_total", "counter",
	    "Dictionary shards repaired after a writer died holding the "
	    "lock.", ds.repairs);
}

static void
write_segment(FILE *f, const shmt_segment_stat_t *st)
{
	gauge1(f, "shmthrottle_segment_bytes", "gauge",
	    "Size of the shared-memory segment.", st->size);
	family(f, "shmthrottle_segment_info", "gauge",
	    "The segment's format word and ABI version, and the version of "
	    "the daemon reading it; always 1.");
	fprintf(f, "shmthrottle_segment_info{format=\"0x%016" PRIx64 "\","
	    "abi=\"%u\",version=\"%s\"} 1\n", st->format, st->abi_version,
	    shmt_version());
	family(f, "shmthrottle_region_bytes", "gauge",
	    "Size of each region of the segment.");
	for (uint32_t i = 0; i < st->nregions && i < SHMT_REGIONS_MAX; i++)
		fprintf(f, "shmthrottle_region_bytes{region=\"%s\"} %" PRIu64
		    "\n", st->regions[i].name, st->regions[i].size);
	family(f, "shmthrottle_region_used_bytes", "gauge",
	    "Bytes in use in each region, where the region can tell.");
	for (uint32_t i = 0; i < st->nregions && i < SHMT_REGIONS_MAX; i++)
		fprintf(f, "shmthrottle_region_used_bytes{region=\"%s\"} %"
		    PRIu64 "\n", st->regions[i].name, st->regions[i].used);
	gauge1(f, "shmthrottle_limiters", "gauge",
	    "Limiters defined in the segment.", st->limiters);
	gauge1(f, "shmthrottle_limiters_max", "gauge",
	    "Rows of the limiter table.", st->max_limiters);
	gauge1(f, "shmthrottle_slots", "gauge",
	    "Process slots of the segment.", st->max_slots);
	gauge1(f, "shmthrottle_slots_in_use", "gauge",
	    "Process slots held, stale ones included.", st->slots);
	gauge1(f, "shmthrottle_slots_stale", "gauge",
	    "Process slots whose process is dead and not yet reaped.",
	    st->slots_stale);
	gauge1(f, "shmthrottle_daemon_housekeeping_runs_total", "counter",
	    "Housekeeping runs recorded in the segment.",
	    st->housekeeping_runs);
	gauge1(f, "shmthrottle_daemon_slots_reaped_total", "counter",
	    "Slots of dead processes reaped.", st->slots_reaped);
}

static void
write_lag(FILE *f, const struct shmtd_lag_hist *lh)
{
	const char *n = "shmthrottle_daemon_housekeeping_lag_seconds";
	uint64_t cum = 0, sum;

	family(f, n, "histogram",
	    "How late each housekeeping run of this daemon started after its "
	    "deadline.");
	for (int b = 0; b <= SHMTD_LAG_BUCKETS; b++) {
		cum += __atomic_load_n(&lh->lh_counts[b], __ATOMIC_RELAXED);
		fprintf(f, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", n,
		    b < SHMTD_LAG_BUCKETS ? lag_bounds_s[b] : "+Inf", cum);
	}
	sum = __atomic_load_n(&lh->lh_sum_ns, __ATOMIC_RELAXED);
	fprintf(f, "%s_sum %" PRIu64 ".%09" PRIu64 "\n%s_count %" PRIu64 "\n",
	    n, sum / (uint64_t)1000000000, sum % (uint64_t)1000000000, n, cum);
}

int
shmtd_prom_write(FILE *f, shmt_t *h, const struct shmtd_lag_hist *lag)
{
	shmt_segment_stat_t st;
	shmt_limiter_stat_t *ls;
	int n, rc;

	if ((rc = shmt_segment_stat(h, &st)) != 0)
		return rc;
	/* The table holds at most max_limiters rows; one call fills them. */
	ls = calloc(st.max_limiters > 0 ? st.max_limiters : 1, sizeof(*ls));
	if (ls == NULL)
		return -ENOMEM;
	n = shmt_limiter_list(h, ls, st.max_limiters);
	if (n < 0) {
		free(ls);
		return n;
	}
	if ((uint32_t)n > st.max_limiters)
		n = (int)st.max_limiters;
	write_limiters(f, ls, (size_t)n);
	write_global(f, h, ls, (size_t)n);
	free(ls);
	write_dict(f, h);
	write_segment(f, &st);
	if (lag != NULL)
		write_lag(f, lag);
	return ferror(f) ? -EIO : 0;
}
