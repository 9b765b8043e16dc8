/* SPDX-License-Identifier: MIT */
/*
 * shmthrottled: creates (or attaches to) the segment from its config,
 * claims it as its one daemon, defines the configured limiters, and then
 * sleeps until the next deadline (housekeeping, heartbeat, snapshot,
 * systemd watchdog), does what is due, and sleeps again.  SIGHUP reloads
 * the config; SIGTERM and SIGINT stop it cleanly.  Workers never wait for
 * it: without the daemon they stay correct and live.
 */
#include "config.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "snapshot.h"

#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_CONFIG = 2 };

/* The longest sleep: the heartbeat the CLI shows must stay fresh. */
#define HEARTBEAT_NS 1000000000ULL
/* The shortest: a library that keeps reporting work already due must not
 * turn the loop into a spin. */
#define MIN_SLEEP_NS 100000ULL

struct daemon {
	/* Options. */
	const char *config_arg;       /* -c, or NULL: built-in */
	const char *segment_arg;      /* -s */
	int foreground, recreate, unlink_on_exit, ignore_snapshot;
	char config_path[PATH_MAX];   /* absolute, for reloads */
	char start_dir[PATH_MAX];     /* the directory it was started in:
	                               * relative paths of the config are
	                               * resolved against it, also after the
	                               * chdir("/") of background mode */

	struct shmtd_config cfg;
	shmt_t *h;                    /* the newest generation's handle */
	shmt_t *h_root;               /* the first, when the segment moved */
	pid_t pid;
	uint64_t start;               /* our /proc start time */
	int claimed;
	uint64_t watchdog_ns;         /* 0: no systemd watchdog */
	int ready_fd;                 /* background: the waiting parent */
	struct shmtd_metrics *metrics; /* NULL: no metrics endpoint */
	struct shmtd_lag_hist lag;    /* housekeeping lag, for the metrics */
	struct shmtd_lease *lease;    /* global limiters' leases (lease.c) */
	pthread_mutex_t seg_lock;     /* the loop and a scrape take turns */
	sigset_t sigs;
};

/* ---- Options ------------------------------------------------------------ */

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: shmthrottled [-c FILE] [-f] [-s SEGMENT] [--recreate]\n"
	    "                    [--unlink-on-exit] [--ignore-snapshot]\n"
	    "       shmthrottled --check-config FILE\n"
	    "  -c, --config FILE     read FILE (default: the built-in config)\n"
	    "  -f, --foreground      stay in the foreground, log to stderr\n"
	    "  -s, --segment NAME    use segment NAME instead of the config's\n"
	    "      --check-config F  print the resolved config of F (exit 0)\n"
	    "                        or its first error (exit 2)\n"
	    "      --recreate        replace an incompatible segment (its\n"
	    "                        state is lost)\n"
	    "      --unlink-on-exit  remove the segment when stopping\n"
	    "      --ignore-snapshot start empty when the snapshot is bad\n"
	    "  -h, --help, -V, --version\n");
}

static int
check_config(const char *path)
{
	struct shmtd_config cfg;
	char err[1024];

	if (shmtd_config_load(path, &cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "shmthrottled: %s\n", err);
		return EXIT_CONFIG;
	}
	shmtd_config_print(stdout, &cfg);
	shmtd_config_free(&cfg);
	return EXIT_OK;
}

/* Returns -1 to go on, or an exit code. */
static int
parse_options(struct daemon *d, int argc, char **argv)
{
	enum { O_CHECK = 256, O_RECREATE, O_UNLINK, O_IGNSNAP };
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "segment", required_argument, NULL, 's' },
		{ "check-config", required_argument, NULL, O_CHECK },
		{ "recreate", no_argument, NULL, O_RECREATE },
		{ "unlink-on-exit", no_argument, NULL, O_UNLINK },
		{ "ignore-snapshot", no_argument, NULL, O_IGNSNAP },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	while ((c = getopt_long(argc, argv, "c:fs:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': d->config_arg = optarg; break;
		case 'f': d->foreground = 1; break;
		case 's': d->segment_arg = optarg; break;
		case O_CHECK: return check_config(optarg);
		case O_RECREATE: d->recreate = 1; break;
		case O_UNLINK: d->unlink_on_exit = 1; break;
		case O_IGNSNAP: d->ignore_snapshot = 1; break;
		case 'h': usage(stdout); return EXIT_OK;
		case 'V':
			printf("shmthrottled %d.%d.%d\n", SHMT_VERSION_MAJOR,
			    SHMT_VERSION_MINOR, SHMT_VERSION_PATCH);
			return EXIT_OK;
		default: usage(stderr); return EXIT_CONFIG;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return EXIT_CONFIG;
	}
	return -1;
}

/* ---- Config --------------------------------------------------------------- */

/* Load the config for this daemon: the -s override, and a relative
 * snapshot path made absolute against the directory the daemon was started
 * in, at start and on every reload alike (background mode has done
 * chdir("/") since). */
static int
load_config(struct daemon *d, struct shmtd_config *cfg, char *err, size_t cap)
{
	const char *path = d->config_arg != NULL ? d->config_path : NULL;
	int rc = shmtd_config_load(path, cfg, err, cap);

	if (rc != 0)
		return rc;
	if (d->segment_arg != NULL)
		snprintf(cfg->segment, sizeof(cfg->segment), "%s", d->segment_arg);
	if (cfg->snapshot[0] != '\0' && cfg->snapshot[0] != '/') {
		char abs[sizeof(cfg->snapshot)];

		if (d->start_dir[0] == '\0') {
			snprintf(err, cap, "%.400s: snapshot path '%.400s' is "
			    "relative, and the directory the daemon was "
			    "started in is unknown: give an absolute path",
			    cfg->source, cfg->snapshot);
			shmtd_config_free(cfg);
			return -ENOENT;
		}
		if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", d->start_dir,
		    cfg->snapshot) >= sizeof(abs)) {
			snprintf(err, cap, "%.900s: snapshot path too long",
			    cfg->source);
			shmtd_config_free(cfg);
			return -ENAMETOOLONG;
		}
		memcpy(cfg->snapshot, abs, sizeof(abs));
	}
	return 0;
}

/*
 * D's segment moved to a new generation (by this daemon or by anyone):
 * take the new one as D's handle and claim it.  The old generation stays
 * linked to the first handle (closed at exit): the metrics thread may
 * still be reading it.  Returns 0, or the error (logged) when the new one
 * cannot be opened.
 */
static int
adopt_generation(struct daemon *d)
{
	shmt_t *nh;
	int rc;

	if ((nh = shmt__move_follow(d->h, &rc)) == NULL) {
		if (rc == SHMT_ESTALE)
			return rc;    /* retired: removed, not moved */
		shmtd_log(LOG_ERR, "segment %s moved to a new generation, but "
		    "this daemon cannot open it (%s): restart it", d->cfg.segment,
		    shmt_strerror(rc));
		return rc;
	}
	if (nh == d->h)
		return 0;
	if (d->h_root == NULL)
		d->h_root = d->h;
	d->h = nh;
	d->claimed = 0;
	if (shmt__daemon_claim(d->h, d->pid, d->start, &(uint64_t){ 0 }) == 0)
		d->claimed = 1;
	return 0;
}

/*
 * The segment's sizes differ from the config's: move it into a new
 * generation with the config's sizes (shmt__move carries every limiter,
 * item, counter and the analyzer; workers follow on their next call).
 * WHY names the occasion in the log.
 */
static void
apply_sizes(struct daemon *d, const struct shmtd_config *cfg, const char *why)
{
	const shmt_config_t *want = &cfg->seg;
	char err[768];
	uint64_t t0;
	int rc;

	if (!shmt__move_wanted(d->h, want))
		return;
	t0 = shmt__mono_ns();
	rc = shmt__move(d->h, want, NULL, NULL, err, sizeof(err));
	if (rc != 0) {
		shmtd_log(LOG_ERR, "%s: cannot move segment %s to the sizes "
		    "in %s: %s; it keeps its sizes, parameters and state. "
		    "Change that key in %s and apply it with kill -HUP %ld, "
		    "or check the segment with 'shmthrottle -s %s check'",
		    why, d->cfg.segment, cfg->source, err, cfg->source,
		    (long)getpid(), d->cfg.segment);
		return;
	}
	if (adopt_generation(d) != 0)
		return;
	shmtd_log(LOG_NOTICE, "%s: segment %s moved to a new generation in %"
	    PRIu64 " ms: max_limiters=%u max_slots=%u arena=%" PRIu64
	    " dictionary=%" PRIu64 " counters=%" PRIu64 " bytes; every limiter "
	    "(with its uses in flight), item, counter and the analyzer's "
	    "summaries moved, and running workers follow on their next call",
	    why, d->cfg.segment, (shmt__mono_ns() - t0) / 1000000,
	    want->max_limiters, want->max_slots, want->arena_bytes,
	    want->dict_bytes, want->counters_bytes);
}

/*
 * Define every limiter of CFG.  A limiter the segment holds with other
 * parameters (-EEXIST) is changed in place (shmt_limiter_update), which
 * keeps its uses in flight and never over-grants.  Per-client limiters
 * and key pools cannot change in place, nor can a shared exact limiter
 * take a limit above its log: every such one is defined anew in one move
 * into a new generation (shmt__move_redefine), every use in flight
 * carried; if the move fails, all of them keep their running definitions
 * and state, and the log says why.  A change that can be made neither way
 * (another mode, a global key pool, a bigger ring of a shared limiter...)
 * keeps the running definition and its state, and the
 * log names the reason and the commands that apply it (deleting forgets
 * the uses in flight, so that stays the operator's decision).  OLD (may
 * be NULL) tells which limiters are new.  Returns the first error other
 * than -EEXIST, or 0.
 */

/* Limiters that change by a move (per-client ones, key pools, exact ones
 * given a limit above their log), gathered by update_limiter and applied
 * together by redefine_limiters. */
struct redefs {
	struct shmt__redef *d;
	size_t n;
};

/* L is defined with other parameters (ERR says which): change it in place,
 * queue it in R for the move (a per-client limiter, a key pool, an exact
 * limit above its log), or say why not and how to apply it. */
static void
update_limiter(struct daemon *d, const struct shmtd_limiter *l,
    const char *err, struct redefs *r)
{
	char why[512], burst[48] = "";
	shmt_limiter_stat_t st;
	int rc = shmt_limiter_update(d->h, l->name, &l->limit, why,
	    sizeof(why));

	if ((rc == -EOPNOTSUPP || rc == -E2BIG) &&
	    shmt_limiter_stat(d->h, l->name, &st) == 0 &&
	    (st.mode == l->limit.mode || (l->limit.mode == SHMT_MODE_GCRA &&
	    !st.per_client && st.nkeys == 0)) &&
	    ((st.per_client && l->limit.per_client) ||
	    (rc == -E2BIG && st.mode == SHMT_MODE_EXACT && !st.per_client &&
	    st.nkeys == 0 && !l->limit.per_client && l->limit.nkeys == 0 &&
	    !l->limit.global) ||
	    (rc == -EOPNOTSUPP && st.mode != SHMT_MODE_GCRA &&
	    l->limit.mode == SHMT_MODE_GCRA && !st.per_client &&
	    st.nkeys == 0 && !l->limit.per_client && l->limit.nkeys == 0 &&
	    !l->limit.global) ||
	    (st.nkeys > 0 && l->limit.nkeys > 0 && !l->limit.global &&
	    st.mode == SHMT_MODE_BUCKETS))) {
		r->d[r->n].name = l->name;
		r->d[r->n].limit = &l->limit;
		r->n++;
		return;
	}
	if (l->limit.mode == SHMT_MODE_GCRA)
		snprintf(burst, sizeof(burst), ", burst %" PRIu64,
		    l->limit.burst);
	if (rc == 0)
		shmtd_log(LOG_NOTICE, "limiter '%s' changed in place: limit %"
		    PRIu64 " per %" PRIu64 " ns%s; its uses in flight stay "
		    "counted", l->name, l->limit.limit, l->limit.window_ns,
		    burst);
	else
		shmtd_log(LOG_ERR, "%s; it cannot change in place (%s: %s), so "
		    "it keeps its running definition and state; to apply it, "
		    "forgetting its uses in flight: shmthrottle -s %s limiter "
		    "delete %s && kill -HUP %ld", err, shmt_strerror(rc),
		    why[0] != '\0' ? why : "no reason given", d->cfg.segment,
		    l->name, (long)getpid());
}

/* Define the limiters of R anew, all in one move into a new generation. */
static void
redefine_limiters(struct daemon *d, const struct redefs *r)
{
	char err[768], names[512] = "";
	size_t len = 0;
	shmt_config_t c;
	uint64_t t0;
	int rc;

	if (r->n == 0)
		return;
	for (size_t i = 0; i < r->n && len < sizeof(names); i++)
		len += (size_t)snprintf(names + len, sizeof(names) - len,
		    "%s'%s'", i > 0 ? ", " : "", r->d[i].name);
	shmt__move_config(d->h, &c);
	t0 = shmt__mono_ns();
	rc = shmt__move_redefine(d->h, &c, r->d, r->n, NULL, NULL, err,
	    sizeof(err));
	if (rc != 0) {
		shmtd_log(LOG_ERR, "limiter%s %s cannot change: the "
		    "move that defines %s anew failed (%s), so %s running "
		    "definition%s and state; fix the config and apply it with "
		    "kill -HUP %ld, or, forgetting the uses in flight: "
		    "shmthrottle -s %s limiter delete NAME && kill -HUP %ld",
		    r->n > 1 ? "s" : "", names, r->n > 1 ? "them" : "it", err,
		    r->n > 1 ? "they keep their" : "it keeps its",
		    r->n > 1 ? "s" : "", (long)getpid(), d->cfg.segment,
		    (long)getpid());
		return;
	}
	if (adopt_generation(d) != 0)
		return;
	shmtd_log(LOG_NOTICE, "limiter%s %s defined anew by a move into a new "
	    "generation in %" PRIu64 " ms: every use in flight carried, of "
	    "every client of a per-client limiter, every name of a key pool "
	    "and every record of an exact log (a lowered limit refuses until fewer are in flight), and running "
	    "workers follow on their next call",
	    r->n > 1 ? "s" : "", names, (shmt__mono_ns() - t0) / 1000000);
}

/* Set the overrides of every limiter of CFG that DEFINED says is in the
 * segment.  An override that cannot be set is logged with its file and
 * line and left out; the limiter and the other overrides stay applied. */
static void
apply_overrides(struct daemon *d, const struct shmtd_config *cfg,
    const int *defined)
{
	char err[1024];

	for (size_t i = 0; i < cfg->nlimiters; i++) {
		const struct shmtd_limiter *l = &cfg->limiters[i];
		size_t failed = 0;

		for (size_t j = 0; defined[i] && j < l->noverrides; j++)
			if (shmtd_override_apply(d->h, cfg, l, j, err,
			    sizeof(err)) != 0) {
				shmtd_log(LOG_ERR, "%s: this override is not "
				    "applied", err);
				failed++;
			}
		if (failed > 0)
			shmtd_log(LOG_WARNING, "limiter '%s': %zu of its %zu "
			    "overrides in %s not applied (see above); the "
			    "limiter itself is", l->name, failed,
			    l->noverrides, cfg->source);
	}
}

/*
 * Define every limiter of CFG, change or define anew the ones the segment
 * holds with other parameters (update_limiter, redefine_limiters), and
 * only then set their overrides: a larger override table comes with the
 * move, before the rules that need it.  DEFINED (one per limiter of CFG)
 * says which are in the segment afterwards.  Returns the first error
 * defining a limiter, or 0; an override that fails is logged, not
 * returned.
 */
static int
apply_limiters(struct daemon *d, const struct shmtd_config *cfg,
    const struct shmtd_config *old, int *defined)
{
	char err[1024];
	struct redefs r = { NULL, 0 };
	shmt_limiter_stat_t st;
	int first = 0;

	if (cfg->nlimiters > 0 &&
	    (r.d = calloc(cfg->nlimiters, sizeof(*r.d))) == NULL) {
		shmtd_log(LOG_ERR, "out of memory applying the limiters");
		return -ENOMEM;
	}
	for (size_t i = 0; i < cfg->nlimiters; i++) {
		const struct shmtd_limiter *l = &cfg->limiters[i];
		int rc = shmtd_limiter_define_cfg(d->h, cfg, l, err,
		    sizeof(err));
		int known = 0;

		for (size_t j = 0; old != NULL && j < old->nlimiters; j++)
			known |= strcmp(old->limiters[j].name, l->name) == 0;
		if (rc == 0 && old != NULL && !known)
			shmtd_log(LOG_NOTICE, "limiter '%s' added", l->name);
		else if (rc == -EEXIST)
			update_limiter(d, l, err, &r);
		else if (rc != 0)
			shmtd_log(LOG_ERR, "%s", err);
		if (rc != 0 && rc != -EEXIST && first == 0)
			first = rc;
		/* A define that failed may still leave one in the segment
		 * (one defined meanwhile by another process). */
		defined[i] = rc == 0 || rc == -EEXIST ||
		    shmt_limiter_stat(d->h, l->name, &st) == 0;
	}
	redefine_limiters(d, &r);
	free(r.d);
	apply_overrides(d, cfg, defined);
	return first;
}

static int
start_lease(struct daemon *d)
{
	char err[512];

	if (shmtd_lease_start(&d->cfg, &d->lease, err, sizeof(err)) != 0) {
		shmtd_log(LOG_ERR, "%s", err);
		return EXIT_FAIL;
	}
	if (d->lease != NULL)
		shmtd_log(LOG_NOTICE, "global limiters lease from %s as %s",
		    d->cfg.global.redis, d->cfg.global.host);
	return 0;
}

static void
reload(struct daemon *d)
{
	struct shmtd_config cfg;
	char err[1024], names[512] = "";
	int *defined = NULL;
	size_t len = 0, nfailed = 0;

	shmtd_log(LOG_NOTICE, "SIGHUP: reloading %s", d->cfg.source);
	sd_notify(0, "RELOADING=1");
	if (load_config(d, &cfg, err, sizeof(err)) != 0) {
		shmtd_log(LOG_ERR, "reload failed, keeping the running config: "
		    "%s", err);
		sd_notify(0, "READY=1");
		return;
	}
	if (strcmp(cfg.metrics, d->cfg.metrics) != 0) {
		shmtd_log(LOG_WARNING, "[daemon] metrics changed to '%s': "
		    "ignored until restart", cfg.metrics);
		memcpy(cfg.metrics, d->cfg.metrics, sizeof(cfg.metrics));
	}
	if (strcmp(cfg.segment, d->cfg.segment) != 0) {
		shmtd_log(LOG_WARNING, "[segment] name changed to %s: ignored "
		    "until restart", cfg.segment);
		snprintf(cfg.segment, sizeof(cfg.segment), "%s", d->cfg.segment);
	}
	for (size_t j = 0; j < d->cfg.nlimiters; j++) {
		int found = 0;

		for (size_t i = 0; i < cfg.nlimiters; i++)
			found |= strcmp(cfg.limiters[i].name,
			    d->cfg.limiters[j].name) == 0;
		if (found)
			continue;
		if (!cfg.delete_removed) {
			shmtd_log(LOG_WARNING, "limiter '%s' is no longer in the "
			    "config; it stays in the segment: delete it with "
			    "'shmthrottle -s %s limiter delete %s' (with "
			    "[daemon] delete_removed = yes, a reload deletes "
			    "the limiters it removes)",
			    d->cfg.limiters[j].name, cfg.segment,
			    d->cfg.limiters[j].name);
		} else {
			int rc = shmt_limiter_delete(d->h,
			    d->cfg.limiters[j].name);

			if (rc == 0 || rc == -ENOENT)
				shmtd_log(LOG_NOTICE, "limiter '%s' is no longer "
				    "in the config: deleted", d->cfg.limiters[j].name);
			else
				shmtd_log(LOG_ERR, "limiter '%s' is no longer in "
				    "the config, and deleting it failed: %s",
				    d->cfg.limiters[j].name, shmt_strerror(rc));
		}
	}
	/* The lease thread starts again on the new config: it stops first,
	 * before a move, so that its leases are closed and what is left of
	 * them given back in the generation they were granted in (closed
	 * after the freeze, a lease the copy carried open would be given
	 * back while the new generation still grants from it). */
	shmtd_lease_stop(d->lease);
	d->lease = NULL;
	apply_sizes(d, &cfg, "SIGHUP");
	if (cfg.nlimiters > 0 &&
	    (defined = calloc(cfg.nlimiters, sizeof(*defined))) == NULL) {
		shmtd_log(LOG_ERR, "reload failed, keeping the running config: "
		    "out of memory");
		shmtd_config_free(&cfg);
		start_lease(d);
		sd_notify(0, "READY=1");
		return;
	}
	apply_limiters(d, &cfg, &d->cfg, defined);
	/* A limiter that could not be defined is not in the segment: the
	 * running config leaves it out, so that the next reload neither
	 * counts it nor says it stays in the segment. */
	for (size_t i = cfg.nlimiters; i-- > 0;)
		if (!defined[i]) {
			len += (size_t)snprintf(names + len, len < sizeof(names) ?
			    sizeof(names) - len : 0, "%s'%s'", nfailed > 0 ?
			    ", " : "", cfg.limiters[i].name);
			if (len >= sizeof(names))
				len = sizeof(names);
			nfailed++;
			shmtd_config_drop_limiter(&cfg, i);
		}
	free(defined);
	shmtd_config_free(&d->cfg);
	d->cfg = cfg;
	start_lease(d);
	if (d->foreground)
		shmtd_log_open(d->cfg.log_target);
	if (nfailed > 0)
		shmtd_log(LOG_NOTICE, "reloaded: %zu limiters configured; %zu "
		    "in the file could not be defined and are not (%s): see "
		    "the errors above", d->cfg.nlimiters, nfailed, names);
	else
		shmtd_log(LOG_NOTICE, "reloaded: %zu limiters configured",
		    d->cfg.nlimiters);
	sd_notify(0, "READY=1");
}

/* ---- The segment ---------------------------------------------------------- */

/* Say what differs between the object NAME and what this build expects. */
static void
explain_incompatible(const char *name, int err)
{
	struct shmt__hdr_facts f;
	int n = shmt__hdr_facts(name, &f);

	if (err == SHMT_EFORMAT && n == 0)
		shmtd_log(LOG_ERR, "segment %s has format word %#" PRIx64
		    " (ABI %u); this build writes %#" PRIx64 " (ABI %u): it was "
		    "made by another version or build", name, f.format,
		    (unsigned)(f.format >> 48), shmt__format_word(),
		    f.abi);
	else if (err == SHMT_EMAGIC && (n == 0 || n == -1))
		shmtd_log(LOG_ERR, "segment %s is not a shmthrottle segment "
		    "(magic %#" PRIx64 ", expected %#" PRIx64 ")", name,
		    f.magic, f.want_magic);
	else if (err == SHMT_ESIZE && n == 0)
		shmtd_log(LOG_ERR, "segment %s is %jd bytes but its header says "
		    "%" PRIu64, name, (intmax_t)f.file_size, f.size);
	else
		shmtd_log(LOG_ERR, "segment %s is unusable: %s (%jd bytes)", name,
		    shmt_strerror(err), (intmax_t)f.file_size);
	shmtd_log(LOG_ERR, "refusing segment %s; stop its users and start "
	    "with --recreate to replace it (its state is lost)", name);
}

/* The segment's owner or mode is not trusted: say whose it is and what to
 * do, and never attach (its owner could forge or truncate it). */
static void
explain_untrusted(const char *name)
{
	char path[SHMT_SEGNAME_MAX + 16];
	struct stat st;

	snprintf(path, sizeof(path), "/dev/shm%s", name);
	if (lstat(path, &st) != 0) {
		shmtd_log(LOG_ERR, "cannot open segment %s: %s", name,
		    shmt_strerror(SHMT_EUNTRUSTED));
		return;
	}
	shmtd_log(LOG_ERR, "segment %s is owned by uid %u with mode %04o: not "
	    "trusted (a segment must belong to this daemon's user or root, and "
	    "never be writable by every user); not attached.  Remove it if it "
	    "is not yours (rm %s) and start again", name, (unsigned)st.st_uid,
	    (unsigned)(st.st_mode & 07777), path);
}

static int
incompatible(int rc)
{
	return rc == SHMT_EMAGIC || rc == SHMT_EFORMAT || rc == SHMT_ESIZE ||
	    rc == SHMT_ECORRUPT || rc == SHMT_ENOTREG;
}

/* Create the segment: from the snapshot when there is one, else empty. */
static int
segment_new(struct daemon *d)
{
	const char *name = d->cfg.segment;
	char err[1024], why[256], note[768];
	int rc;

	if (d->cfg.snapshot[0] != '\0') {
		rc = shmtd_snapshot_restore_note(d->cfg.snapshot, name, &d->h,
		    note, sizeof(note), err, sizeof(err));
		if (rc == 0) {
			shmtd_log(LOG_NOTICE, "segment %s restored from %s%s%s",
			    name, d->cfg.snapshot, note[0] != '\0' ? ", " : "",
			    note);
			return 0;
		}
		if (rc == -EEXIST)
			return rc;
		if (rc != -ENOENT && !d->ignore_snapshot) {
			shmtd_log(LOG_ERR, "%s (start with --ignore-snapshot to "
			    "start empty)", err);
			return EXIT_CONFIG;
		}
		if (rc != -ENOENT)
			shmtd_log(LOG_WARNING, "%s; ignored (--ignore-snapshot)",
			    err);
	}
	rc = shmt_create(name, &d->cfg.seg, &d->h);
	if (rc == 0) {
		shmtd_log(LOG_NOTICE, "segment %s created", name);
	} else if (rc == -EINVAL &&
	    shmt_config_check(&d->cfg.seg, why, sizeof(why)) != 0) {
		/* The config was checked by these same rules when it
		 * loaded; name the rule anyway rather than a bare errno. */
		shmtd_log(LOG_ERR, "cannot create segment %s (config %s): %s",
		    name, d->cfg.source, why);
	} else if (rc != -EEXIST) {
		shmtd_log(LOG_ERR, "cannot create segment %s: %s", name,
		    shmt_strerror(rc));
	}
	return rc == 0 || rc == -EEXIST ? rc : EXIT_FAIL;
}

/* The segment is of another format: when it is an older one this build
 * migrates (ABI 7 or ABI 6), migrate it into a new generation of this
 * format (lib/migrate.c).  0 done (open it again), an exit code when it
 * was of such a format and could not be migrated, -1 when it is of a
 * format this build does not migrate. */
static int
migrate(struct daemon *d)
{
	const char *name = d->cfg.segment;
	struct shmt__hdr_facts f;
	struct shmt__host_time now;
	struct shmt__migration m;
	char err[768], note[768];
	unsigned abi;
	int rc;

	if (shmt__hdr_facts(name, &f) != 0)
		return -1;
	abi = (unsigned)(f.format >> 48);
	if (!shmt__abi_migrates((int)abi))
		return -1;
	/* A freeze undone under the migration (-EAGAIN) published nothing:
	 * the old segment is live as it was, and is taken again. */
	for (int tries = 0; tries < 3; tries++) {
		shmt__host_time_now(&now);
		rc = shmt__segment_old_migrate(name, &now, NULL, NULL, &m, err,
		    sizeof(err));
		if (rc != -EAGAIN)
			break;
		shmtd_log(LOG_WARNING, "segment %s: %s", name, err);
	}
	if (rc != 0 && m.published) {
		/* Published, but the old segment's freeze was undone on the
		 * way: go on with the new one, and say what may be lost. */
		shmtd_log(LOG_WARNING, "segment %s: %s", name, err);
	} else if (rc != 0) {
		shmtd_log(LOG_ERR, "segment %s is of format ABI %u and cannot be "
		    "migrated: %s; it is left as it was (start with --recreate "
		    "to replace it, losing its state)", name, abi, err);
		return EXIT_FAIL;
	}
	shmt__migration_text(&m, note, sizeof(note));
	shmtd_log(LOG_NOTICE, "segment %s %s; the old object is retired: "
	    "workers built against the ABI %u library get SHMT_ESTALE until "
	    "they are restarted against this one", name, note, abi);
	return 0;
}

/* Attach to the segment or make it.  Returns 0 or an exit code. */
static int
segment_attach(struct daemon *d)
{
	const char *name = d->cfg.segment;
	int rc = -ENOENT;

	/* Each turn ends or makes progress: a segment that vanishes or
	 * appears between our calls (another creator) costs one more turn. */
	for (int turn = 0; turn < 4; turn++) {
		rc = shmt_open(name, &d->h);
		if (rc == 0) {
			shmtd_log(LOG_NOTICE, "attached to segment %s", name);
			return 0;
		}
		if (rc == -ENOENT) {
			rc = segment_new(d);
			if (rc == -EEXIST)
				continue;
			return rc;
		}
		if (rc == SHMT_EUNTRUSTED) {
			explain_untrusted(name);
			return EXIT_FAIL;
		}
		if (!incompatible(rc)) {
			shmtd_log(LOG_ERR, "cannot open segment %s: %s", name,
			    shmt_strerror(rc));
			return EXIT_FAIL;
		}
		if (rc == SHMT_EFORMAT && !d->recreate) {
			int m = migrate(d);

			if (m == 0)
				continue;
			if (m > 0)
				return m;
		}
		if (!d->recreate) {
			explain_incompatible(name, rc);
			return EXIT_FAIL;
		}
		shmtd_log(LOG_WARNING, "segment %s: %s; replacing it "
		    "(--recreate)", name, shmt_strerror(rc));
		shmt_unlink(name);
		d->recreate = 0;
	}
	shmtd_log(LOG_ERR, "segment %s keeps changing under us: %s", name,
	    shmt_strerror(rc));
	return EXIT_FAIL;
}

/* ---- One daemon per segment ---------------------------------------------- */

/* The daemon word of the segment names one live daemon at most: the
 * library claims it (shmt__daemon_claim says how). */
static int
claim(struct daemon *d)
{
	uint64_t prev;
	int rc = shmt__daemon_claim(d->h, d->pid, d->start, &prev);

	if (rc == -EBUSY) {
		shmtd_log(LOG_ERR, "segment %s: already running as pid %"
		    PRIu64, d->cfg.segment, prev);
		return EXIT_FAIL;
	}
	if (rc != 0) {
		shmtd_log(LOG_ERR, "segment %s: cannot claim the daemon word",
		    d->cfg.segment);
		return EXIT_FAIL;
	}
	if (prev != 0 && prev != (uint64_t)d->pid)
		shmtd_log(LOG_NOTICE, "taking over segment %s from pid %" PRIu64
		    ", which is gone", d->cfg.segment, prev);
	d->claimed = 1;
	return 0;
}

static void
unclaim(struct daemon *d)
{
	if (d->claimed)
		shmt__daemon_unclaim(d->h, d->pid, d->start);
	d->claimed = 0;
}

/* ---- Start, loop, stop ---------------------------------------------------- */

static void
snapshot(struct daemon *d, const char *why)
{
	char err[1024];

	if (d->cfg.snapshot[0] == '\0')
		return;
	if (shmtd_snapshot_write(d->h, d->cfg.snapshot, err, sizeof(err)) != 0)
		shmtd_log(LOG_ERR, "%s", err);
	else
		shmtd_log(LOG_INFO, "snapshot (%s) written to %s", why,
		    d->cfg.snapshot);
}

/* Background mode: fork; the parent waits until the child is ready (or
 * failed) and exits with its status, so `shmthrottled && use-it` works. */
static int
daemonize(struct daemon *d)
{
	int fds[2];
	unsigned char status = EXIT_FAIL;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(fds[1]);
		if (read(fds[0], &status, 1) != 1)
			status = EXIT_FAIL;
		_exit(status);
	}
	close(fds[0]);
	d->ready_fd = fds[1];
	setsid();
	return 0;
}

/* Tell whoever waits that start-up ended with STATUS. */
static void
report_ready(struct daemon *d, int status)
{
	unsigned char b = (unsigned char)status;
	int fd;

	if (d->ready_fd < 0)
		return;
	if (write(d->ready_fd, &b, 1) != 1)
		shmtd_log(LOG_WARNING, "cannot report start-up to the parent");
	close(d->ready_fd);
	d->ready_fd = -1;
	if (status != EXIT_OK)
		return;
	/* From now on nobody reads our terminal: log to syslog. */
	shmtd_log_open("syslog");
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	if (chdir("/") != 0)
		shmtd_log(LOG_WARNING, "chdir /: %s", strerror(errno));
}

/* The metrics endpoint, when the config asks for one.  A refused address
 * stops the start: a monitored daemon that silently serves no metrics
 * would look like a dead one. */
static int
start_metrics(struct daemon *d)
{
	char err[512], bound[80];

	if (d->cfg.metrics[0] == '\0')
		return 0;
	if (shmtd_metrics_start(d->cfg.metrics, d->h, &d->lag, &d->seg_lock,
	    bound, sizeof(bound), &d->metrics, err, sizeof(err)) != 0) {
		shmtd_log(LOG_ERR, "%s", err);
		return EXIT_FAIL;
	}
	shmtd_log(LOG_NOTICE, "metrics on http://%s/metrics", bound);
	return 0;
}

static int
start(struct daemon *d)
{
	uint64_t usec = 0;
	int *defined = NULL;
	int rc;

	if ((rc = segment_attach(d)) != 0)
		return rc;
	if ((rc = claim(d)) != 0)
		return rc;
	apply_sizes(d, &d->cfg, "start");
	if (d->cfg.nlimiters > 0 &&
	    (defined = calloc(d->cfg.nlimiters, sizeof(*defined))) == NULL) {
		shmtd_log(LOG_ERR, "out of memory applying the limiters");
		return EXIT_FAIL;
	}
	rc = apply_limiters(d, &d->cfg, NULL, defined);
	free(defined);
	if (rc != 0)
		return EXIT_FAIL;
	if ((rc = start_metrics(d)) != 0)
		return rc;
	if ((rc = start_lease(d)) != 0)
		return rc;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
		d->watchdog_ns = usec * 1000ULL / 2;
	shmtd_log(LOG_NOTICE, "running on segment %s with %zu limiters%s%s",
	    d->cfg.segment, d->cfg.nlimiters,
	    d->cfg.snapshot[0] != '\0' ? ", snapshots to " : "",
	    d->cfg.snapshot);
	sd_notify(0, "READY=1");
	return 0;
}

struct deadlines {
	shmt_time_t hk, heartbeat, snapshot, watchdog;
};

static shmt_time_t
earliest(const struct deadlines *t)
{
	shmt_time_t m = t->hk;

	if (t->heartbeat < m)
		m = t->heartbeat;
	if (t->snapshot < m)
		m = t->snapshot;
	if (t->watchdog < m)
		m = t->watchdog;
	return m;
}

/*
 * Housekeeping found D's segment not LIVE.  Frozen by a live mover (a
 * `shmthrottle resize`): wait for it (bounded, inside shmt__move_follow);
 * moved: adopt the new generation and restart the lease thread there
 * (its closes in the old one give nothing back, see shmt__global_close).
 * Returns 0 when D serves a live generation again, else the error
 * (retired: removed for good).
 */
static int
follow_move(struct daemon *d)
{
	shmt_t *old = d->h;

	if (adopt_generation(d) != 0)
		return -1;
	if (d->h != old) {
		shmtd_log(LOG_NOTICE, "segment %s was moved to a new generation "
		    "by another process (shmthrottle resize): serving the new "
		    "one; put the new sizes in %s so that a restart or reload "
		    "keeps them", d->cfg.segment, d->cfg.source);
		shmtd_lease_stop(d->lease);
		d->lease = NULL;
		(void)start_lease(d);
	}
	return 0;
}

/* Do whatever is due at NOW and move the deadlines on. */
static void
run_due(struct daemon *d, struct deadlines *t, shmt_time_t now)
{
	if (now >= t->hk) {
		shmt_time_t next = UINT64_MAX;
		int rc = shmt_housekeep(d->h, &next);

		if (rc == SHMT_ESIZE) {
			/* Every page past the new end raises SIGBUS: touch
			 * nothing more (no snapshot, no unclaim) and go. */
			shmtd_log(LOG_ERR, "segment %s was truncated (by a user "
			    "who may write it): exiting without touching it",
			    d->cfg.segment);
			exit(EXIT_FAIL);
		}
		if (rc == SHMT_ESTALE && follow_move(d) == 0) {
			/* Moved by another process (shmthrottle resize), or a
			 * move still under way: serve the generation the name
			 * names, next round. */
			t->hk = shmt__mono_ns() + MIN_SLEEP_NS;
			return;
		}
		if (rc == SHMT_ESTALE) {
			/* Removed (shmthrottle destroy, or by hand): its
			 * processes were told; serving it would help no one. */
			shmtd_log(LOG_ERR, "segment %s was removed: its "
			    "processes get SHMT_ESTALE and reopen it by name; "
			    "exiting so that a restart creates it again",
			    d->cfg.segment);
			exit(EXIT_FAIL);
		}
		if (rc < 0)
			shmtd_log(LOG_ERR, "housekeeping: %s", shmt_strerror(rc));
		shmt__daemon_lag(d->h, now - t->hk);
		shmtd_lag_observe(&d->lag, now - t->hk);
		now = shmt__mono_ns();
		/* Work that appears later (a bucket opened by a worker) is not
		 * in NEXT: look again at least once per heartbeat. */
		if (next > now + HEARTBEAT_NS)
			next = now + HEARTBEAT_NS;
		t->hk = next < now + MIN_SLEEP_NS ? now + MIN_SLEEP_NS : next;
	}
	if (now >= t->heartbeat) {
		shmt__daemon_heartbeat(d->h, now);
		t->heartbeat = now + HEARTBEAT_NS;
	}
	if (now >= t->snapshot) {
		snapshot(d, "interval");
		t->snapshot = d->cfg.snapshot_interval_ns > 0 ?
		    shmt__mono_ns() + d->cfg.snapshot_interval_ns : UINT64_MAX;
	}
	if (now >= t->watchdog) {
		sd_notify(0, "WATCHDOG=1");
		t->watchdog = now + d->watchdog_ns;
	}
}

static void
reset_snapshot_deadline(struct daemon *d, struct deadlines *t)
{
	t->snapshot = d->cfg.snapshot[0] != '\0' && d->cfg.snapshot_interval_ns > 0 ?
	    shmt__mono_ns() + d->cfg.snapshot_interval_ns : UINT64_MAX;
}

/* Sleep until the next deadline or a signal; return the signal or 0. */
static int
wait_until(struct daemon *d, shmt_time_t deadline)
{
	shmt_time_t now = shmt__mono_ns();
	uint64_t left = deadline > now ? deadline - now : 0;
	struct timespec ts = { (time_t)(left / 1000000000ULL),
		(long)(left % 1000000000ULL) };
	int sig = sigtimedwait(&d->sigs, NULL, &ts);

	return sig > 0 ? sig : 0;
}

static void
loop(struct daemon *d)
{
	struct deadlines t;
	shmt_time_t now = shmt__mono_ns();

	t.hk = now;
	t.heartbeat = now;
	t.watchdog = d->watchdog_ns > 0 ? now : UINT64_MAX;
	reset_snapshot_deadline(d, &t);
	for (;;) {
		int sig;

		pthread_mutex_lock(&d->seg_lock);
		run_due(d, &t, shmt__mono_ns());
		pthread_mutex_unlock(&d->seg_lock);
		sig = wait_until(d, earliest(&t));
		if (sig == SIGHUP) {
			pthread_mutex_lock(&d->seg_lock);
			reload(d);
			pthread_mutex_unlock(&d->seg_lock);
			reset_snapshot_deadline(d, &t);
			t.hk = shmt__mono_ns(); /* new limiters: ask for their deadlines */
		} else if (sig == SIGTERM || sig == SIGINT) {
			shmtd_log(LOG_NOTICE, "%s: stopping",
			    sig == SIGTERM ? "SIGTERM" : "SIGINT");
			return;
		}
	}
}

static void
stop(struct daemon *d)
{
	sd_notify(0, "STOPPING=1");
	shmtd_metrics_stop(d->metrics);
	d->metrics = NULL;
	shmtd_lease_stop(d->lease);
	d->lease = NULL;
	snapshot(d, "stop");
	unclaim(d);
	shmt_close(d->h_root != NULL ? d->h_root : d->h);
	d->h = NULL;
	d->h_root = NULL;
	if (d->unlink_on_exit) {
		int rc = shmt_unlink(d->cfg.segment);

		shmtd_log(rc == 0 ? LOG_NOTICE : LOG_ERR, "unlink segment %s: %s",
		    d->cfg.segment, rc == 0 ? "done" : shmt_strerror(rc));
	}
	shmtd_log(LOG_NOTICE, "stopped");
}

/* Resolve -c to an absolute path before anything may chdir. */
static int
resolve_config_path(struct daemon *d)
{
	if (d->config_arg == NULL)
		return 0;
	if (realpath(d->config_arg, d->config_path) == NULL) {
		shmtd_log(LOG_ERR, "%s: %s", d->config_arg, strerror(errno));
		return EXIT_CONFIG;
	}
	return 0;
}

static int
setup(struct daemon *d)
{
	char err[1024];
	int rc;

	/* Until the config names its log, errors go to stderr, with their
	 * priority when that is the journal. */
	shmtd_log_open("stderr");
	if ((rc = resolve_config_path(d)) != 0)
		return rc;
	/* Saved once, before anything may chdir: a reload resolves the
	 * config's relative paths as the start did. */
	if (getcwd(d->start_dir, sizeof(d->start_dir)) == NULL)
		d->start_dir[0] = '\0';
	if (load_config(d, &d->cfg, err, sizeof(err)) != 0) {
		shmtd_log(LOG_ERR, "%s", err);
		return EXIT_CONFIG;
	}
	if (shmt__name_check(d->cfg.segment) != 0) {
		fprintf(stderr, "shmthrottled: bad segment name '%s'\n",
		    d->cfg.segment);
		return EXIT_CONFIG;
	}
	/* Signals are taken synchronously in the loop, never by a handler. */
	sigemptyset(&d->sigs);
	sigaddset(&d->sigs, SIGHUP);
	sigaddset(&d->sigs, SIGTERM);
	sigaddset(&d->sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &d->sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	shmtd_log_open(d->foreground ? d->cfg.log_target : "stderr");
	if (!d->foreground && (rc = daemonize(d)) != 0) {
		fprintf(stderr, "shmthrottled: fork: %s\n", strerror(-rc));
		return EXIT_FAIL;
	}
	d->pid = getpid();
	d->start = shmt__proc_start(d->pid);
	return 0;
}

int
main(int argc, char **argv)
{
	struct daemon d;
	int rc;

	memset(&d, 0, sizeof(d));
	d.ready_fd = -1;
	pthread_mutex_init(&d.seg_lock, NULL);
	if ((rc = parse_options(&d, argc, argv)) >= 0)
		return rc;
	if ((rc = setup(&d)) != 0)
		goto out;
	rc = start(&d);
	report_ready(&d, rc);
	if (rc == 0) {
		loop(&d);
		stop(&d);
	}
out:
	shmtd_metrics_stop(d.metrics);
	shmtd_lease_stop(d.lease);
	if (d.h != NULL) {
		unclaim(&d);
		shmt_close(d.h);
	}
	shmtd_config_free(&d.cfg);
	return rc;
}
