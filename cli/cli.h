/* This file is private to the shmthrottle command-line tool. */
/* SPDX-License-Identifier: MIT */
/*
 * The pieces every command shares: the invocation context, the exit codes,
 * the command table, opening the segment with errors mapped to exit codes,
 * and writing JSON.
 */
#ifndef SHMTC_CLI_H
#define SHMTC_CLI_H

#include "shmthrottle.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

/* Exit codes, documented in the usage text and relied on by scripts. */
enum {
	SHMTC_OK = 0,
	SHMTC_NO = 1,       /* throttled, not found, already exists, refused */
	SHMTC_USAGE = 2,    /* bad command line */
	SHMTC_MISSING = 3,  /* segment missing, incompatible or unusable (also:
	                     * made without the dictionary a command needs) */
	SHMTC_DAMAGED = 4,  /* segment damaged */
	SHMTC_NOLIMITER = 5 /* try, wait, next-key, limiter set: no such
	                     * limiter */
};

/* What the global options and the environment decided. */
struct shmtc {
	const char *segment;
	int segment_given;      /* -s was on the command line */
	uid_t owner;            /* $SHMTHROTTLE_OWNER: trusted too; -1: none */
	int json;
	const struct shmtc_cmd *cmd;
};

struct shmtc_cmd {
	const char *name;
	const char *synopsis;   /* arguments after the command name */
	const char *summary;    /* one line for the command list */
	const char *help;       /* the command's own page */
	int reads;              /* 1: a reading command (takes --json) */
	int (*run)(struct shmtc *c, int argc, char **argv);
};

/* Attach to the segment, trusting $SHMTHROTTLE_OWNER too: shmt_open_opts's
 * result. */
int shmtc_attach(const struct shmtc *c, shmt_t **h);

/* The command table (main.c), ending with a zeroed entry. */
extern const struct shmtc_cmd shmtc_commands[];
const struct shmtc_cmd *shmtc_find(const char *name);

/* help.c: the tool's page and each command's. */
void shmtc_usage(FILE *f);
/* The synopsis and the command names, for usage errors. */
void shmtc_usage_short(FILE *f);
void shmtc_help_page(FILE *f, const struct shmtc_cmd *cmd);

/*
 * Parse the options common to every command (-s, --json, -h) plus the
 * command's own (SHORTOPTS/LONGOPTS, getopt_long syntax, may be NULL).
 * Returns the next option the command must handle itself, -1 at the end of
 * the options, or -2 after printing help (exit 0) or -3 after a usage error
 * (exit 2).  *OPTARG_OUT receives optarg.
 */
int shmtc_getopt(struct shmtc *c, int argc, char **argv, const char *shortopts,
    const struct option *longopts, char **optarg_out);
int shmtc_getopt_exit(int rc);

/* Print "shmthrottle: CMD: message" on stderr and return SHMTC_USAGE. */
int shmtc_usage_error(const struct shmtc *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Print "shmthrottle: message" on stderr. */
void shmtc_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The exit code for a library error about the segment itself. */
int shmtc_exit_for(int err);

/* Open the segment; on failure print why and return the exit code. */
int shmtc_open(const struct shmtc *c, shmt_t **h);
/* Print why opening the segment failed with ERR; return the exit code. */
int shmtc_open_error(const struct shmtc *c, int err);

/* Check that exactly NPOS operands remain after the options (at most
 * NPOS + NOPT); otherwise print a usage error. */
int shmtc_operands(const struct shmtc *c, int argc, char **argv, int npos,
    int nopt);

/* The prologue of a command that takes only the common options: parse
 * them, check NPOS (+ NOPT optional) operands, open the segment into *H.
 * Returns SHMTC_GO to carry on, or the exit code to return at once (0
 * after --help; after printing why otherwise). */
#define SHMTC_GO (-1)
int shmtc_prologue(struct shmtc *c, int argc, char **argv, int npos, int nopt,
    shmt_t **h);

/* Write ROOT as one JSON document on stdout and release it.  Returns 0,
 * or SHMTC_MISSING when out of memory. */
int shmtc_json_emit(json_t *root);
/* json_integer for an unsigned value; values above INT64_MAX are written
 * as null, which no field here reaches in practice. */
json_t *shmtc_json_u64(uint64_t v);
/* Set FIELD of O to bytes P[0..N): a JSON string when they are valid
 * UTF-8, else base64 with ENCFIELD = "base64".  Returns 0 or -ENOMEM. */
int shmtc_json_bytes(json_t *o, const char *field, const char *encfield,
    const void *p, size_t n);

/* The commands. */
int shmtc_cmd_stat(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_limiters(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_buckets(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_try(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_wait(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_next_key(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_create(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_destroy(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_resize(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_limiter(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_reset(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_client(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_check(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_watch(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_get(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_set(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_del(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_incr(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_keys(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_hit(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_count(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_top(struct shmtc *c, int argc, char **argv);
int shmtc_cmd_help(struct shmtc *c, int argc, char **argv);

/* Names shared by the human and JSON views. */
const char *shmtc_mode_name(int mode);

#endif /* SHMTC_CLI_H */
