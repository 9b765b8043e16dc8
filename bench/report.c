/* SPDX-License-Identifier: MIT */
/*
 * Output of shmthrottle-bench.  The SUMMARY and RATIO lines are the
 * interface of bench/run (it greps them); the table is for people.
 */
#include "report.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *
mode_name(int mode)
{
	return mode == SHMT_MODE_EXACT ? "exact" : mode == SHMT_MODE_GCRA ?
	    "gcra" : "buckets";
}

/* Nanoseconds one worker spends per op. */
static double
ns_per_op(const struct bench_result *r)
{
	return r->ops_s > 0 ? r->conf.workers * 1e9 / r->ops_s : 0;
}

/* A line of fields, printed as "SUMMARY k=v ..." or as one JSON object,
 * so both forms always carry the same fields. */
struct line {
	int json, n;
};

static void
field(struct line *l, const char *k, const char *v, int quote)
{
	if (l->json)
		printf("%s\"%s\":%s%s%s", l->n++ ? "," : "{", k,
		    quote ? "\"" : "", v, quote ? "\"" : "");
	else
		printf(" %s=%s", k, v);
}

static void
field_s(struct line *l, const char *k, const char *v)
{
	field(l, k, v, 1);
}

static void
field_u(struct line *l, const char *k, uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	field(l, k, buf, 0);
}

static void
field_f(struct line *l, const char *k, double v, int digits)
{
	char buf[48];

	snprintf(buf, sizeof(buf), "%.*f", digits, v);
	field(l, k, buf, 0);
}

static void
line_begin(struct line *l, int json, const char *tag)
{
	l->json = json;
	l->n = 0;
	if (!json)
		fputs(tag, stdout);
}

static void
line_end(struct line *l)
{
	fputs(l->json ? "}\n" : "\n", stdout);
}

static void
conf_fields(struct line *l, const struct bench_conf *c)
{
	field_s(l, "workload", c->workload);
	field_s(l, "system", c->system);
	field_s(l, "mode", mode_name(c->mode));
	field_s(l, "profile", c->profile);
	field_u(l, "workers", (uint64_t)c->workers);
	field_u(l, "procs", (uint64_t)c->procs);
	field_u(l, "threads", (uint64_t)c->threads);
	field_u(l, "pin", (uint64_t)c->pin);
	field_f(l, "duration_s", c->duration_s, 3);
	field_f(l, "warmup_s", c->warmup_s, 3);
	field_u(l, "limit", c->limit);
	field_u(l, "window_ns", c->window_ns);
	field_u(l, "slack_ns", c->slack_ns);
	field_u(l, "slack_uses", c->slack_uses);
	field_u(l, "nkeys", c->nkeys);
	field_u(l, "clients", c->clients);
	field_u(l, "capacity", c->capacity);
	field_f(l, "zipf", c->zipf_s, 2);
	field_u(l, "dict_keys", c->dict_keys);
	field_u(l, "value_size", c->value_size);
	field_s(l, "keys_drawn", c->uniform ? "uniform" : "zipf");
	field_s(l, "analyzer", c->analyzer ? "on" : "off");
	field_u(l, "sample", c->sample);
	field_u(l, "pipeline", c->pipeline);
	field_s(l, "server_cpu", c->server_cpu);
	field_u(l, "seed", c->seed);
}

void
report_run(const struct bench_result *r, int json)
{
	struct line l;

	line_begin(&l, json, "SUMMARY");
	field_s(&l, "bench", "shmthrottle-bench");
	conf_fields(&l, &r->conf);
	field_f(&l, "elapsed_s", r->elapsed_s, 4);
	field_u(&l, "ops", r->ops);
	field_f(&l, "ops_s", r->ops_s, 0);
	field_f(&l, "ns_op", ns_per_op(r), 2);
	field_f(&l, "grant_ratio", r->ops ? (double)r->grants /
	    (double)r->ops : 0, 4);
	field_u(&l, "samples", r->h.count);
	field_u(&l, "p50_ns", hist_quantile(&r->h, 0.50));
	field_u(&l, "p99_ns", hist_quantile(&r->h, 0.99));
	field_u(&l, "p999_ns", hist_quantile(&r->h, 0.999));
	field_u(&l, "max_ns", r->h.max);
	field_u(&l, "errors", r->errors);
	line_end(&l);
	fflush(stdout);
}

void
report_clock(const struct bench_clock *k, int json)
{
	struct line l;

	line_begin(&l, json, "CLOCK");
	field_s(&l, "clock", "shmthrottle-bench");
	field_f(&l, "clock_ns", k->clock_ns, 2);
	field_f(&l, "shmt_clock_ns", k->shmt_clock_ns, 2);
	field_f(&l, "clock_cas16_ns", k->clock_cas16_ns, 2);
	field_f(&l, "clock_cas8_ns", k->clock_cas8_ns, 2);
	field_u(&l, "rounds", (uint64_t)k->rounds);
	field_u(&l, "calls", k->n);
	line_end(&l);
	fflush(stdout);
}

static const struct bench_result *
find(const struct bench_result *rs, int n, const char *system)
{
	for (int i = 0; i < n; i++)
		if (strcmp(rs[i].conf.system, system) == 0)
			return &rs[i];
	return NULL;
}

static void
ratio(const struct bench_result *me, const struct bench_result *peer,
    int json)
{
	const struct bench_conf *c = &me->conf;
	double ops_x = peer->ops_s > 0 ? me->ops_s / peer->ops_s : 0;
	double cost_x = ns_per_op(peer) > 0 ? ns_per_op(me) / ns_per_op(peer) :
	    0;
	uint64_t p99 = hist_quantile(&me->h, 0.99);
	double p99_x = p99 ? (double)hist_quantile(&peer->h, 0.99) / p99 : 0;

	struct line l;

	line_begin(&l, json, "RATIO");
	field_s(&l, "ratio", "shmthrottle-bench");
	field_s(&l, "workload", c->workload);
	field_s(&l, "mode", mode_name(c->mode));
	field_s(&l, "profile", c->profile);
	field_u(&l, "workers", (uint64_t)c->workers);
	field_u(&l, "procs", (uint64_t)c->procs);
	field_u(&l, "threads", (uint64_t)c->threads);
	field_s(&l, "system", c->system);
	field_s(&l, "vs", peer->conf.system);
	field_f(&l, "ops_x", ops_x, 3);
	field_f(&l, "cost_x", cost_x, 3);
	field_f(&l, "p99_x", p99_x, 3);
	line_end(&l);
}

void
report_table(const struct bench_result *rs, int n, int json)
{
	const struct bench_result *me = find(rs, n, "shmt");

	if (!json) {
		printf("# %s, %d worker(s) (%s), %s mode, profile %s\n",
		    rs[0].conf.workload, rs[0].conf.workers,
		    rs[0].conf.procs ? "processes" : "threads",
		    mode_name(rs[0].conf.mode), rs[0].conf.profile);
		printf("# %-10s %14s %10s %8s %9s %9s %9s\n", "system", "ops/s",
		    "ns/op", "granted", "p50 ns", "p99 ns", "p99.9 ns");
		for (int i = 0; i < n; i++)
			printf("# %-10s %14.0f %10.1f %7.1f%% %9" PRIu64 " %9"
			    PRIu64 " %9" PRIu64 "\n", rs[i].conf.system,
			    rs[i].ops_s, ns_per_op(&rs[i]), rs[i].ops ? 100.0 *
			    (double)rs[i].grants / (double)rs[i].ops : 0,
			    hist_quantile(&rs[i].h, 0.5),
			    hist_quantile(&rs[i].h, 0.99),
			    hist_quantile(&rs[i].h, 0.999));
	}
	for (int i = 0; me != NULL && i < n; i++)
		if (&rs[i] != me)
			ratio(me, &rs[i], json);
	fflush(stdout);
}
