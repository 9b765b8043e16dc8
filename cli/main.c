/* SPDX-License-Identifier: MIT */
/*
 * shmthrottle: shows and operates a shmthrottle segment, for people (aligned
 * tables, a live view) and for scripts (--json, documented exit codes).
 * This file holds the command table, the option parsing every command
 * shares, and the mapping from library errors to exit codes.
 */
#include "cli.h"

#include "bytes.h"
#include "segment.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/stat.h>

/*
 * The command table.  Commands appear here only once the library has their
 * capability; a new one is one more row and one cmd_*.c file, with its help
 * text in help.c.
 */
extern const char shmtc_help_stat[], shmtc_help_limiters[],
    shmtc_help_buckets[], shmtc_help_try[], shmtc_help_wait[],
    shmtc_help_next_key[],
    shmtc_help_create[], shmtc_help_destroy[], shmtc_help_check[],
    shmtc_help_watch[], shmtc_help_help[], shmtc_help_get[],
    shmtc_help_set[], shmtc_help_del[], shmtc_help_incr[], shmtc_help_keys[],
    shmtc_help_hit[], shmtc_help_count[], shmtc_help_top[],
    shmtc_help_limiter[], shmtc_help_reset[], shmtc_help_resize[],
    shmtc_help_client[];

const struct shmtc_cmd shmtc_commands[] = {
	{ "stat", "[--prometheus]", "the segment, its regions, daemon and slots",
	  shmtc_help_stat, 1, shmtc_cmd_stat },
	{ "limiters", "", "one row per limiter: limits, use and counters",
	  shmtc_help_limiters, 1, shmtc_cmd_limiters },
	{ "buckets", "LIMITER", "the ring of buckets of one limiter",
	  shmtc_help_buckets, 1, shmtc_cmd_buckets },
	{ "try", "LIMITER [CLIENT] [--cost N] [--peek]",
	  "take uses, print the decision (exit 0 granted, 1 throttled)",
	  shmtc_help_try, 1, shmtc_cmd_try },
	{ "wait", "LIMITER [CLIENT] [--cost N] [--timeout D]",
	  "wait for a grant, sleeping (exit 0 granted, 1 timed out)",
	  shmtc_help_wait, 1, shmtc_cmd_wait },
	{ "next-key", "LIMITER", "take one use of a key pool, print the key",
	  shmtc_help_next_key, 1, shmtc_cmd_next_key },
	{ "limiter", "set NAME KEY=VALUE...|delete NAME",
	  "change a limiter in place, or delete it",
	  shmtc_help_limiter, 1, shmtc_cmd_limiter },
	{ "client", "set|clear|list LIMITER [CLIENT [RULE]]",
	  "a client's own limit, or allow or deny it (RULE: limit=N|allow|deny)",
	  shmtc_help_client, 1, shmtc_cmd_client },
	{ "reset", "LIMITER [CLIENT]",
	  "give back the uses in flight (all, or one client's)",
	  shmtc_help_reset, 1, shmtc_cmd_reset },
	{ "get", "KEY", "write the value of KEY to stdout",
	  shmtc_help_get, 1, shmtc_cmd_get },
	{ "set", "KEY VALUE|-", "store a value (- reads it from stdin)",
	  shmtc_help_set, 1, shmtc_cmd_set },
	{ "del", "KEY", "remove KEY (exit 1 when absent)",
	  shmtc_help_del, 1, shmtc_cmd_del },
	{ "incr", "KEY [N]", "add N (default 1) to a number, print it",
	  shmtc_help_incr, 1, shmtc_cmd_incr },
	{ "keys", "[PATTERN]", "list the keys, or those matching a glob",
	  shmtc_help_keys, 1, shmtc_cmd_keys },
	{ "hit", "KEY", "count one hit, print hits in the window",
	  shmtc_help_hit, 1, shmtc_cmd_hit },
	{ "count", "KEY [--window D]", "hits in the window, without counting",
	  shmtc_help_count, 1, shmtc_cmd_count },
	{ "top", "[-n N]", "the hot keys of the window, with their bounds",
	  shmtc_help_top, 1, shmtc_cmd_top },
	{ "check", "[--repair]", "scan the segment and name every problem found",
	  shmtc_help_check, 1, shmtc_cmd_check },
	{ "watch", "[-d SECS] [-n FRAMES]", "a live full-screen view",
	  shmtc_help_watch, 0, shmtc_cmd_watch },
	{ "create", "[-c CONFIG] [OPTIONS]", "create the segment",
	  shmtc_help_create, 1, shmtc_cmd_create },
	{ "destroy", "[--force]", "retire the segment and remove its name",
	  shmtc_help_destroy, 1, shmtc_cmd_destroy },
	{ "resize", "KEY=VALUE...", "move the segment to new sizes, live",
	  shmtc_help_resize, 1, shmtc_cmd_resize },
	{ "help", "[COMMAND]", "this text, or a command's page",
	  shmtc_help_help, 0, shmtc_cmd_help },
	{ NULL, NULL, NULL, NULL, 0, NULL }
};

const struct shmtc_cmd *
shmtc_find(const char *name)
{
	for (const struct shmtc_cmd *k = shmtc_commands; k->name != NULL; k++)
		if (strcmp(k->name, name) == 0)
			return k;
	return NULL;
}

void
shmtc_err(const char *fmt, ...)
{
	va_list ap;

	fputs("shmthrottle: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int
shmtc_usage_error(const struct shmtc *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "shmthrottle: %s%s", c->cmd ? c->cmd->name : "",
	    c->cmd ? ": " : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (c->cmd != NULL)
		fprintf(stderr, "usage: shmthrottle [-s SEGMENT]%s %s%s%s\n"
		    "Try 'shmthrottle help %s'.\n",
		    c->cmd->reads ? " [--json]" : "", c->cmd->name,
		    *c->cmd->synopsis ? " " : "", c->cmd->synopsis,
		    c->cmd->name);
	else
		shmtc_usage_short(stderr);
	return SHMTC_USAGE;
}

enum { OPT_JSON = 0x100 };

/* Build the option lists: the common ones, then the command's own. */
static void
merge_options(const struct shmtc *c, const char *shortopts,
    const struct option *longopts, char *sbuf, size_t scap,
    struct option *lbuf, size_t lcap)
{
	static const struct option common[] = {
		{ "segment", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
	};
	size_t n = 0;

	/* Global options stop at the command name; a command's options may
	 * follow its operands ("try api --json"). */
	snprintf(sbuf, scap, "%s:s:h%s", c->cmd == NULL ? "+" : "",
	    shortopts ? shortopts : "");
	for (size_t i = 0; i < 3; i++)
		if (common[i].val != OPT_JSON || c->cmd == NULL || c->cmd->reads)
			lbuf[n++] = common[i];
	for (size_t i = 0; longopts && longopts[i].name && n + 1 < lcap; i++)
		lbuf[n++] = longopts[i];
	memset(&lbuf[n], 0, sizeof(lbuf[n]));
}

int
shmtc_getopt(struct shmtc *c, int argc, char **argv, const char *shortopts,
    const struct option *longopts, char **optarg_out)
{
	char sbuf[64];
	struct option lbuf[24];
	int opt;

	merge_options(c, shortopts, longopts, sbuf, sizeof(sbuf), lbuf,
	    sizeof(lbuf) / sizeof(lbuf[0]));
	opterr = 0;
	while ((opt = getopt_long(argc, argv, sbuf, lbuf, NULL)) != -1) {
		switch (opt) {
		case 's':
			c->segment = optarg;
			c->segment_given = 1;
			break;
		case OPT_JSON:
			c->json = 1;
			break;
		case 'h':
			if (c->cmd != NULL)
				shmtc_help_page(stdout, c->cmd);
			else
				shmtc_usage(stdout);
			return -2;
		case ':':
			shmtc_usage_error(c, "option '%s' needs a value",
			    argv[optind - 1]);
			return -3;
		case '?':
			if (optopt != 0)
				shmtc_usage_error(c, "unknown option '-%c'",
				    optopt);
			else
				shmtc_usage_error(c, "unknown option '%s'",
				    argv[optind - 1]);
			return -3;
		default:
			*optarg_out = optarg;
			return opt;
		}
	}
	return -1;
}

int
shmtc_getopt_exit(int rc)
{
	return rc == -2 ? SHMTC_OK : SHMTC_USAGE;
}

int
shmtc_prologue(struct shmtc *c, int argc, char **argv, int npos, int nopt,
    shmt_t **h)
{
	char *arg;
	int rc;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if ((rc = shmtc_operands(c, argc, argv, npos, nopt)) != 0)
		return rc;
	if ((rc = shmtc_open(c, h)) != 0)
		return rc;
	return SHMTC_GO;
}

int
shmtc_operands(const struct shmtc *c, int argc, char **argv, int npos,
    int nopt)
{
	int n = argc - optind;

	if (n < npos)
		return shmtc_usage_error(c, "missing %s", c->cmd->synopsis);
	if (n > npos + nopt)
		return shmtc_usage_error(c, "unexpected argument '%s'",
		    argv[optind + npos + nopt]);
	return 0;
}

int
shmtc_exit_for(int err)
{
	switch (err) {
	case -EINVAL:
	case -ENAMETOOLONG:
		return SHMTC_USAGE;
	case SHMT_ESIZE:
	case SHMT_ECORRUPT:
	case SHMT_EBUSYLOOP:
		return SHMTC_DAMAGED;
	default:
		return SHMTC_MISSING;
	}
}

int
shmtc_open_error(const struct shmtc *c, int err)
{
	switch (err) {
	case -ENOENT:
		shmtc_err("segment %s does not exist (start shmthrottled, or "
		    "run 'shmthrottle create')", c->segment);
		break;
	case -EINVAL:
		shmtc_err("bad segment name '%s': one leading '/', no other "
		    "'/'", c->segment);
		break;
	case SHMT_EMAGIC:
	case SHMT_EFORMAT:
	case SHMT_ENOTREG:
		shmtc_err("segment %s is incompatible: %s", c->segment,
		    shmt_strerror(err));
		break;
	case SHMT_EUNTRUSTED: {
		char path[SHMT_SEGNAME_MAX + 16];
		struct stat st;

		snprintf(path, sizeof(path), "/dev/shm%s", c->segment);
		if (lstat(path, &st) != 0)
			memset(&st, 0, sizeof(st));
		shmtc_err("segment %s is owned by uid %u with mode %04o: not "
		    "trusted (attached only when its owner is you, root or "
		    "$SHMTHROTTLE_OWNER, or, except for root, when its group is "
		    "yours and may write it; never when every user may write "
		    "it)", c->segment, (unsigned)st.st_uid,
		    (unsigned)(st.st_mode & 07777));
		break;
	}
	case SHMT_ENAMESPACE:
		shmtc_err("segment %s was created in another PID or time "
		    "namespace: its processes are named by pid and its times "
		    "are CLOCK_MONOTONIC, so every process of a segment must "
		    "share both (for containers: --pid=host or the daemon's "
		    "container's namespace, and the same time namespace)",
		    c->segment);
		break;
	default:
		shmtc_err("segment %s: %s", c->segment, shmt_strerror(err));
		break;
	}
	return shmtc_exit_for(err);
}

int
shmtc_attach(const struct shmtc *c, shmt_t **h)
{
	shmt_open_opts_t o;

	shmt_open_opts_init(&o);
	o.owner = c->owner;
	return shmt_open_opts(c->segment, &o, h);
}

int
shmtc_open(const struct shmtc *c, shmt_t **h)
{
	int rc = shmtc_attach(c, h);

	return rc == 0 ? SHMTC_OK : shmtc_open_error(c, rc);
}

json_t *
shmtc_json_u64(uint64_t v)
{
	return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) :
	    json_null();
}

int
shmtc_json_bytes(json_t *o, const char *field, const char *encfield,
    const void *p, size_t n)
{
	json_t *s = json_stringn(p, n);
	char *b64;

	if (s != NULL)
		return json_object_set_new(o, field, s) == 0 ? 0 : -ENOMEM;
	if ((b64 = shmtc_base64(p, n)) == NULL)
		return -ENOMEM;
	s = json_string(b64);
	free(b64);
	if (s == NULL || json_object_set_new(o, field, s) != 0 ||
	    json_object_set_new(o, encfield, json_string("base64")) != 0)
		return -ENOMEM;
	return 0;
}

int
shmtc_json_emit(json_t *root)
{
	int rc;

	if (root == NULL) {
		shmtc_err("out of memory");
		return SHMTC_MISSING;
	}
	rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (rc != 0) {
		shmtc_err("cannot write JSON");
		return SHMTC_MISSING;
	}
	fputc('\n', stdout);
	return SHMTC_OK;
}

const char *
shmtc_mode_name(int mode)
{
	switch (mode) {
	case SHMT_MODE_BUCKETS:
		return "buckets";
	case SHMT_MODE_EXACT:
		return "exact";
	case SHMT_MODE_GCRA:
		return "gcra";
	default:
		return "unknown";
	}
}

int
shmtc_cmd_help(struct shmtc *c, int argc, char **argv)
{
	const struct shmtc_cmd *k;
	char *arg;
	int rc;

	if ((rc = shmtc_getopt(c, argc, argv, NULL, NULL, &arg)) != -1)
		return shmtc_getopt_exit(rc);
	if ((rc = shmtc_operands(c, argc, argv, 0, 1)) != 0)
		return rc;
	if (optind == argc) {
		shmtc_usage(stdout);
		return SHMTC_OK;
	}
	k = shmtc_find(argv[optind]);
	if (k == NULL)
		return shmtc_usage_error(c, "unknown command '%s'",
		    argv[optind]);
	shmtc_help_page(stdout, k);
	return SHMTC_OK;
}

/* The tool's version, the library's (the same when linked statically),
 * and the segment format this build creates and opens: a segment whose
 * format word differs (`stat` shows a segment's own) is refused. */
static int
version(void)
{
	printf("shmthrottle %d.%d.%d (library %s)\n", SHMT_VERSION_MAJOR,
	    SHMT_VERSION_MINOR, SHMT_VERSION_PATCH, shmt_version());
	printf("segment format 0x%016" PRIx64 " (ABI %u)\n",
	    shmt__format_word(), SHMT_ABI_VERSION);
	return SHMTC_OK;
}

/* $SHMTHROTTLE_OWNER: a user name or a numeric uid whose segments are
 * trusted too (e.g. the daemon's user, for root's tool). */
static int
owner_from_env(struct shmtc *c)
{
	const char *v = getenv("SHMTHROTTLE_OWNER");
	const struct passwd *pw;
	unsigned long n;
	char *end;

	c->owner = (uid_t)-1;
	if (v == NULL || *v == '\0')
		return 0;
	if ((pw = getpwnam(v)) != NULL) {
		c->owner = pw->pw_uid;
		return 0;
	}
	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno != 0 || *end != '\0' || !isdigit((unsigned char)*v) ||
	    n >= (unsigned long)(uid_t)-1) {
		fprintf(stderr, "shmthrottle: SHMTHROTTLE_OWNER: no such user "
		    "'%s'\n", v);
		return -1;
	}
	c->owner = (uid_t)n;
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct shmtc c = { 0 };
	const struct shmtc_cmd *cmd;
	char *arg;
	int rc;

	c.segment = getenv("SHMTHROTTLE_SEGMENT");
	if (c.segment == NULL || *c.segment == '\0')
		c.segment = SHMT_DEFAULT_SEGMENT;
	if (owner_from_env(&c) != 0)
		return SHMTC_USAGE;
	rc = shmtc_getopt(&c, argc, argv, "V", longopts, &arg);
	if (rc == 'V')
		return version();
	if (rc != -1)
		return shmtc_getopt_exit(rc);
	if (optind == argc)
		return shmtc_usage_error(&c, "no command given");
	cmd = shmtc_find(argv[optind]);
	if (cmd == NULL)
		return shmtc_usage_error(&c, "unknown command '%s'",
		    argv[optind]);
	if (c.json && !cmd->reads)
		return shmtc_usage_error(&c, "%s does not take --json",
		    cmd->name);
	c.cmd = cmd;
	argc -= optind;
	argv += optind;
	/* Each command parses its own options from its own argv[0]. */
	optind = 0;
	return cmd->run(&c, argc, argv);
}
