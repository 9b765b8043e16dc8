/* SPDX-License-Identifier: MIT */
/*
 * config.h: the configuration of shmthrottled, read from an INI file (or the
 * built-in default), shared by the daemon and by `shmthrottle create -c`.
 *
 * A loaded config owns all its memory; release it with shmtd_config_free().
 * Every function reports errors as a negative errno value and, where it
 * takes ERR, writes one line "FILE:LINE: key 'K': what is wrong" there.
 */
#ifndef SHMTD_CONFIG_H
#define SHMTD_CONFIG_H

#include "shmthrottle.h"
#include "units.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The name under which the built-in default config reports errors. */
#define SHMTD_BUILTIN_NAME "<built-in>"

/* One `override = ID RULE` line of a per-client limiter. */
struct shmtd_override {
	char id[SHMT_OVERRIDE_ID_MAX + 1];
	shmt_client_rule_t rule;
	int line;
};

struct shmtd_limiter {
	char name[SHMT_LIMITER_NAME_MAX + 1];
	shmt_limit_t limit;   /* limit.keys points into KEYS */
	char **keys;          /* owned: limit.nkeys names */
	struct shmtd_override *overrides; /* owned: NOVERRIDES rules */
	size_t noverrides;
	uint64_t offline_limit; /* global: uses per window this host grants
	                       * alone while Redis is unreachable (0: none) */
	int line;             /* line of its section header */
};

/* [dictionary]: the sharded string -> string store.  Resolved into
 * seg.dict_bytes (0 when disabled), seg.dict_shards, seg.dict_eviction. */
struct shmtd_dict {
	int enabled;
	uint64_t size;        /* heap bytes in all */
	uint32_t shards;      /* a power of two, at most 1024 */
	uint64_t max_key;     /* bytes, at most SHMT_KEY_MAX */
	uint64_t max_value;   /* bytes, at most SHMT_VALUE_MAX */
	char eviction[16];    /* "lru" | "none" */
	uint64_t default_ttl_ns; /* 0: items never expire by default */
};

/* [analyzer]: windowed heavy hitters.  Resolved into seg.analyzer_bytes
 * (0 when disabled), _window_ns, _subwindows, _threshold_ppm, _clients. */
struct shmtd_analyzer {
	int enabled;
	uint64_t size;        /* bytes */
	uint64_t window_ns;
	uint32_t subwindows;  /* 1..64 */
	uint32_t threshold_pct; /* report keys above this share, 1..99 */
	int clients;          /* per-client limiter calls feed it too */
};

/* [counters]: windowed per-key hit counters.  Resolved into
 * seg.counters_bytes (0 when disabled), _shards, _window_ns, _subwindows,
 * _error_ppm. */
struct shmtd_counters {
	int enabled;
	uint64_t size;        /* heap bytes in all */
	uint32_t shards;
	uint64_t window_ns;
	uint32_t subwindows;  /* 1..256; no longer used by the counters */
	uint32_t error_ppm;   /* the error bound, parts per million */
};

/* [global]: where global limiters lease their uses. */
struct shmtd_global {
	char redis[512];      /* "unix:PATH" or "tcp://HOST:PORT", or several
	                       * (cluster seeds, space or comma separated),
	                       * or sentinel://HOST:PORT/MASTER ones;
	                       * "": none */
	char host[256];       /* this host's name in Redis (default: the
	                       * host name) */
	uint32_t replicas;    /* a lease is used only once WAIT says this
	                       * many replicas have it (0: not asked) */
};

struct shmtd_config {
	char segment[SHMT_SEGNAME_MAX + 1];   /* default SHMT_DEFAULT_SEGMENT */
	shmt_config_t seg;                    /* region sizes, mode, gid */
	struct shmtd_limiter *limiters;
	size_t nlimiters;
	struct shmtd_dict dict;
	struct shmtd_analyzer analyzer;
	struct shmtd_counters counters;
	struct shmtd_global global;
	char snapshot[4096];                  /* "": no snapshots */
	uint64_t snapshot_interval_ns;        /* 0: only at stop */
	char log_target[16];                  /* "stderr" | "syslog" */
	char metrics[64];                     /* "": no metrics endpoint */
	int delete_removed;                   /* SIGHUP deletes limiters no
					       * longer in the config */
	char source[4096];                    /* the file it came from */
};

/*
 * shmtd_config_load: parse PATH (NULL: the built-in default) into *OUT.
 * Returns 0, -EINVAL (with ERR naming file, line and key), -ENOENT or
 * -EACCES (file not readable; ERR says so) or -ENOMEM.  On error *OUT holds
 * nothing that needs freeing.
 */
int shmtd_config_load(const char *path, struct shmtd_config *out, char *err,
    size_t errcap);

/*
 * shmtd_config_apply: define every limiter of CFG in the segment of H.
 * Every limiter is tried; returns 0, or the first error (ERR names that
 * limiter and counts the others that failed).
 */
int shmtd_config_apply(shmt_t *h, const struct shmtd_config *cfg, char *err,
    size_t errcap);

/* shmtd_limiter_apply: define one limiter; as shmt_limiter_define, with
 * ERR naming the limiter and its line.  Then, when the limiter is defined
 * (now or before, with these parameters or others), set every override
 * its section names (shmt_client_set): the config's rule wins for every
 * client it names; overrides it does not name (set by the CLI, or by a
 * line since removed) stay as they are. */
int shmtd_limiter_apply(shmt_t *h, const struct shmtd_config *cfg,
    const struct shmtd_limiter *lim, char *err, size_t errcap);

/* shmtd_limiter_define_cfg: define one limiter, as shmt_limiter_define
 * (-EEXIST: the segment holds it with other parameters), with ERR naming
 * the limiter and its line; no override is set. */
int shmtd_limiter_define_cfg(shmt_t *h, const struct shmtd_config *cfg,
    const struct shmtd_limiter *lim, char *err, size_t errcap);

/* shmtd_override_apply: set override I of LIM (shmt_client_set); 0, or
 * its error with ERR naming the file, the override's line, the limiter
 * and the client (-ENOSPC: the segment's override table is full). */
int shmtd_override_apply(shmt_t *h, const struct shmtd_config *cfg,
    const struct shmtd_limiter *lim, size_t i, char *err, size_t errcap);

/* shmtd_config_drop_limiter: remove limiter I from CFG (freeing what it
 * owns); the limiters after it move down by one. */
void shmtd_config_drop_limiter(struct shmtd_config *cfg, size_t i);

void shmtd_config_free(struct shmtd_config *cfg);


/* shmtd_config_print: the resolved config, as INI that loads back to the
 * same config. */
void shmtd_config_print(FILE *f, const struct shmtd_config *cfg);

#endif /* SHMTD_CONFIG_H */
