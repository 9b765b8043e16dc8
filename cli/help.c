/* SPDX-License-Identifier: MIT */
/*
 * The usage text, laid out like a manual page, and each command's page.
 * The tool's page lists the commands from the command table, so a command
 * added there appears here without another edit.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdint.h>

const char shmtc_help_stat[] =
"Shows the segment: its size, format word and mode, each region with its\n"
"offset, size and use; the daemon (pid, up or down, heartbeat age,\n"
"housekeeping lag and runs); process slots in use and stale; limiters;\n"
"the dictionary (shards, items, bytes used, room for a value now, eviction,\n"
"evictions, expirations, repairs after a dead writer) and the counters.\n"
"A region of size 0 is one the segment was created without.  Works\n"
"whether or not the daemon runs, and says which.  --prometheus prints the\n"
"segment's metrics in Prometheus' text format instead, with the names the\n"
"daemon's /metrics endpoint uses (the same code writes both; the daemon's\n"
"housekeeping lag histogram is its own), for a node exporter's textfile\n"
"collector or a look without the daemon.\n";

const char shmtc_help_limiters[] =
"One row per limiter: NAME, MODE (buckets or exact), LIMIT uses per WINDOW,\n"
"SLACK (time a bucket stays open / uses it holds), INFLIGHT (uses held, not\n"
"yet released), FREE, BUCKETS (in use / ring size), GRANTS, and denials by\n"
"reason: EXHAUSTED (no free use), SLACK (fewer than slack uses free and all\n"
"taken within window + slack), FULL (per-client table full).  EXTRA shows\n"
"key pools (keys x uses per key) and per-client tables (clients in use /\n"
"capacity; with overrides: rules set / table size, grants by allow and\n"
"refusals by deny rules).  Counters count since the segment was created.\n";

const char shmtc_help_buckets[] =
"One row per bucket in use of LIMITER, oldest first: SERIAL, USES, STATE\n"
"(active: still takes uses; sealed: waits for its release), CLOSES (the end\n"
"of the bucket's slack time: it takes no use after it, and a bucket sealed\n"
"early because it filled up keeps it) and RELEASES (when its uses come\n"
"back: CLOSES + window), as times relative to now.  Only for limiters in\n"
"buckets mode that are not per client.  Exit 1 when LIMITER does not exist.\n";

const char shmtc_help_try[] =
"Takes one use of LIMITER now (--cost N: N uses, all or nothing) and prints\n"
"the decision: granted or throttled, the uses that remain, when to retry\n"
"(rounded up: retrying then is never too early) and when every use in\n"
"flight is back.  --peek shows what a try would decide and takes nothing.\n"
"A per-client limiter needs CLIENT (any string); others refuse one.  With\n"
"--json: limit, remaining, retry_after_ns (and retry_after_s, rounded up),\n"
"reset_after_ns.  Exit 0 granted, 1 throttled, 2 a cost the limiter's mode\n"
"cannot take at once, 5 no such limiter.\n";

const char shmtc_help_wait[] =
"Like try, but a throttled request sleeps until its retry time (or until\n"
"uses come back sooner) and tries again, until granted or until --timeout\n"
"D (e.g. 500ms, 2s; default: no limit) has passed.  Exit 0 granted, 1\n"
"timed out or interrupted, 5 no such limiter.\n";

const char shmtc_help_next_key[] =
"Takes one use of LIMITER, which has a key pool, and prints the key name to\n"
"use.  Exit 0 with the name on stdout, 1 throttled (nothing on stdout), 2\n"
"when LIMITER has no key pool, 5 no such limiter.\n";

const char shmtc_help_check[] =
"Scans the whole segment with the library's check (shmt_check), the one\n"
"set of rules: the header against what was validated when attaching and\n"
"the daemon's heartbeat; every limiter's row, state word, ring of buckets\n"
"(its own and each client's: counts, serial order, close times no later\n"
"than now + slack) and exact log (each slot holding the grant its hint\n"
"implies, grant times no later than now); every dictionary and counter\n"
"shard (chains, free lists, item and byte counts, every heap byte in\n"
"exactly one block, a lock left by a dead writer, counter values as long\n"
"as their rings).  It takes no lock and changes nothing.  Prints each\n"
"problem on its own line, named by where it is (e.g. 'dictionary shard\n"
"3'), and exits 4 when there is one; warnings (daemon down, stale slots)\n"
"do not change the exit code.\n"
"\n"
"    --repair   after naming the problems, repair what can be repaired\n"
"               without ever allowing more than a limit: rebuild each\n"
"               damaged dictionary or counter shard under its lock (items\n"
"               past a damaged link are lost), pull close and grant times\n"
"               back from the future, make an exact log agree with its\n"
"               hint; then check again: prints 'repaired: N problems left'\n"
"               and each one left, and exits 0 when none is left, 4\n"
"               otherwise.  A limiter state word out of range or a ring\n"
"               that does not add up is named, not repaired.\n";

/* The key rules, shared by every dictionary page. */
#define KEY_RULES \
"KEY is 1 to 1024 bytes as given; with --key-hex it is written in hex\n" \
"(\"00ff41\") so that any bytes can be named.\n"

#define NO_DICT \
"Exit 3 when the segment was created without a dictionary.\n"

const char shmtc_help_get[] =
"Writes the value of KEY to stdout, byte for byte, with no newline added.\n"
"Exit 0 found, 1 absent or expired (a message on stderr; with --json the\n"
"document says \"found\": false).  With --json the value is a string when it\n"
"is valid UTF-8, else base64 with \"encoding\": \"base64\".\n"
KEY_RULES NO_DICT
"\n"
"Options:\n"
"      --key-hex         KEY is hex\n";

const char shmtc_help_set[] =
"Stores VALUE under KEY; VALUE '-' reads the value from stdin, byte for\n"
"byte, up to 1 MiB (1048576 bytes; more is an error, exit 2, and nothing\n"
"changes).  Prints nothing unless --json.  Exit 1 when --nx finds the key,\n"
"--xx does not, or there is no room (eviction off).\n"
KEY_RULES NO_DICT
"\n"
"Options:\n"
"      --ttl DURATION    expire after DURATION (500ms, 30s, 10m, 24h, 1d;\n"
"                        whole milliseconds; 0: never)\n"
"      --nx              only if KEY is absent\n"
"      --xx              only if KEY is present (its TTL is replaced too)\n"
"      --key-hex         KEY is hex\n";

const char shmtc_help_del[] =
"Removes KEY.  Exit 0 removed, 1 absent.\n"
KEY_RULES NO_DICT
"\n"
"Options:\n"
"      --key-hex         KEY is hex\n";

const char shmtc_help_incr[] =
"Adds N (default 1, may be negative: write it after --, as in\n"
"'incr KEY -- -5') to the decimal integer stored under KEY and prints the\n"
"sum.  An absent key counts as 0 and is created without a TTL; a present\n"
"one keeps its TTL.  Exit 1 when the value is not a decimal integer or the\n"
"sum overflows a signed 64-bit integer.\n"
KEY_RULES NO_DICT
"\n"
"Options:\n"
"      --key-hex         KEY is hex\n";

const char shmtc_help_keys[] =
"Lists the keys, sorted by their bytes, one per line.  Printable ASCII is\n"
"shown as is, a backslash as \\\\, any other byte as \\xHH.  PATTERN is a\n"
"shell glob (fnmatch(3)) matched against the key as shown, so it can name\n"
"keys with any bytes.  Keys written while it walks may or may not appear.\n"
NO_DICT;

const char shmtc_help_hit[] =
"Counts one hit of KEY now and prints how many hits KEY had in the\n"
"trailing window of the segment's counters (24 h by default), this one\n"
"included, with the exact counts it may stand for: \"3 (exact)\", or\n"
"\"1234 (within 1%: exact in [1222, 1247])\".  The count is within\n"
"max(1, eps x the exact count), eps the counters' error (1% by default),\n"
"and exact up to ceil(2 / (3 eps)) (67 at 1%).\n"
KEY_RULES
"Exit 3 when the segment was created without counters.\n"
"\n"
"Options:\n"
"      --key-hex         KEY is hex\n";

const char shmtc_help_count[] =
"Prints how many hits KEY had in the trailing window D (default and at\n"
"most: the window of the segment's counters, 24 h by default) without\n"
"counting one, with the same bound as hit relative to the exact count of\n"
"that window, shown the same way.  A key never hit, evicted or silent for\n"
"the whole window prints 0.\n"
KEY_RULES
"Exit 1 when D is longer than the counters' window, 3 when the segment\n"
"was created without counters.\n"
"\n"
"Options:\n"
"      --key-hex         KEY is hex\n"
"      --window D        the window, e.g. 1m, 1h, 24h (whole milliseconds)\n";

const char shmtc_help_top[] =
"The hot keys of the analyzer's window (60 s by default): every key that\n"
"may have more than the threshold (10% by default) of the requests, most\n"
"requested first.  Dictionary gets count as requests of their key (kind\n"
"dict), and per-client limiter calls as requests of their client (kind\n"
"client) when the segment was created so.  Each row has LOWER and UPPER\n"
"bounds of the key's requests in the exact window (the true count lies\n"
"between them) and its SHARE (LOWER of all requests).  A key is shown\n"
"escaped as 'keys' shows it; a truncated one as its first bytes, '...' and\n"
"its length; one known by its hash alone as '(hash 0x...)'.  The first\n"
"line gives the covered span (the window and at most one sub-window more),\n"
"the requests in it and the error there, then the requests certainly in\n"
"the exact window and its error (a key in no summary had at most that\n"
"many), the threshold, and whether every key over the threshold of the\n"
"exact window is listed (certified).  Exit 0, also with no hot key; exit 3\n"
"when the segment was created without the analyzer.\n"
"\n"
"Options:\n"
"  -n, --count N         show at most N keys (default 20; 0: all)\n";

const char shmtc_help_watch[] =
"A live full-screen view, refreshed every SECS seconds (default 1): the\n"
"daemon, the slots, and per limiter a bar of used and free uses, operations\n"
"per second and a sparkline of operations per second over the last minutes\n"
"(history is kept by this process from its start); below, the five hottest\n"
"keys of the analyzer's window with bars of their share (see top).  Keys:\n"
"q quits, r redraws.  The terminal is restored on exit and on SIGINT,\n"
"SIGTERM and SIGHUP.  -n FRAMES stops after that many frames.  On a\n"
"non-terminal it prints the frames one after another without escapes.\n"
"\n"
"Options:\n"
"  -d, --delay SECS      seconds between frames (0.05 to 3600)\n"
"  -n, --frames N        stop after N frames\n";

/* The options with their defaults follow from create_options(). */
const char shmtc_help_create[] =
"Creates the segment without the daemon (for scripts and tests).  With\n"
"-c CONFIG the sizes, mode and limiters come from the daemon's config file\n"
"(its segment name too, unless -s is given); otherwise from the options\n"
"below or the library's defaults.  Exit 1 when the segment already exists.\n";

/* BYTES as the size options take it: the largest of G, M, K that divides
 * it, else plain bytes. */
static const char *
size_opt(char *buf, size_t cap, uint64_t bytes)
{
	static const char units[] = "GMK";

	for (int i = 0; i < 3; i++) {
		uint64_t u = 1ULL << (10 * (3 - i));

		if (bytes != 0 && bytes % u == 0) {
			snprintf(buf, cap, "%" PRIu64 "%c", bytes / u, units[i]);
			return buf;
		}
	}
	snprintf(buf, cap, "%" PRIu64, bytes);
	return buf;
}

/* create's options, each default read from the library
 * (shmt_config_init), so that the page cannot drift from what create
 * makes. */
static void
create_options(FILE *f)
{
	shmt_config_t d;
	char a[24], b[24], k[24], z[24];

	shmt_config_init(&d);
	fprintf(f,
"\n"
"Options:\n"
"  -c, --config FILE     a shmthrottled config file\n"
"      --max-limiters N  rows in the limiter table (default %u)\n"
"      --max-slots N     process slots (default %u)\n"
"      --arena BYTES     limiter storage, K/M/G suffixes (default %s)\n"
"      --dict BYTES      dictionary heap, 0 for none (default %s)\n"
"      --dict-shards N   dictionary shards, a power of two (default %u);\n"
"                        each needs at least 2M of the heap\n"
"      --no-eviction     a full dictionary refuses writes (exit 1)\n"
"      --counters BYTES  counters heap, 0 for none (default %s)\n"
"      --analyzer BYTES  hot-key analyzer, 0 for none (default %s)\n"
"      --mode OCTAL      permission bits (default %04o)\n",
	    d.max_limiters, d.max_slots, size_opt(a, sizeof(a), d.arena_bytes),
	    size_opt(b, sizeof(b), d.dict_bytes), d.dict_shards,
	    size_opt(k, sizeof(k), d.counters_bytes),
	    size_opt(z, sizeof(z), d.analyzer_bytes), (unsigned)d.mode);
}

const char shmtc_help_destroy[] =
"Removes the segment's name.  Processes attached keep their mapping until\n"
"they close it.  An object that is not a shmthrottle segment is left alone\n"
"(exit 3) unless --force is given.  Exit 3 when the segment does not exist.\n"
"\n"
"Options:\n"
"  -f, --force           remove the name whatever the object holds\n";

const char shmtc_help_resize[] =
"Moves the segment into a new generation with other sizes while workers\n"
"run: a new segment is built under a private name, every limiter (with\n"
"its uses in flight and their release times), dictionary item (with its\n"
"expiry), counter and the analyzer's summaries are copied into it, and it\n"
"replaces the old one under the same name.  Running processes follow on\n"
"their next call; a write that races with the copy waits for it (a few\n"
"milliseconds per megabyte of dictionary) and is retried on the new\n"
"generation.  Each process keeps the old mapping until it closes its\n"
"handle (memory: the old segment's size).  Exit 1 with the reason when the\n"
"state does not fit the new sizes; the segment then serves on unchanged.\n"
"The new segment keeps the old one's owner, group and mode: only its owner\n"
"or root may resize it (anyone else is refused before anything changes).\n"
"The daemon moves the segment back to its config's sizes on its next\n"
"reload: change the config too.\n"
"\n"
"Keys (sizes take K/M/G suffixes):\n"
"  max_limiters=N      rows in the limiter table (not below the rows used)\n"
"  max_slots=N         process slots\n"
"  arena=BYTES         limiter storage (not below the part used)\n"
"  dict=BYTES          dictionary heap\n"
"  dict_shards=N       dictionary shards, a power of two\n"
"  counters=BYTES      counters heap\n"
"  counters_shards=N   counters shards, a power of two\n"
"\n"
"Example: shmthrottle -s /shmthrottle resize dict=64M dict_shards=16\n";

const char shmtc_help_limiter[] =
"limiter set NAME KEY=VALUE... changes the limiter NAME in place while\n"
"workers use it: the keys are limit and window, with slack_time and\n"
"slack_uses in buckets mode and burst in rate mode (durations as 500ms,\n"
"2s, 1m, 1h).  Its uses in flight stay counted: a lowered limit refuses\n"
"until fewer are in flight, and a use granted before the change is held\n"
"at least as long as the longer window (rate mode: its arrival time never\n"
"moves earlier, and each use in flight costs the new interval).  A shared\n"
"limiter without a key pool can change in place: buckets mode within the\n"
"ring of buckets it was defined with, exact mode up to the limit it was\n"
"defined with (its log), rate mode freely.  A per-client limiter, a key\n"
"pool, or an exact limiter given a limit above its log is defined anew\n"
"by a move of the segment into a new generation (as resize does), with\n"
"every use in flight (an exact log's records keep their times); running\n"
"workers follow on their next call.  mode=rate (or gcra) takes a shared\n"
"buckets or exact limiter into rate mode by such a move (give burst too):\n"
"its uses in flight count at the new interval, never released before\n"
"their old release; any other change of mode needs the limiter deleted\n"
"and defined again.  A per-client limiter takes the keys capacity (client\n"
"entries) and overrides (override entries) too; a key pool takes\n"
"uses_per_key and keys=NAME,NAME... (without keys it keeps its names),\n"
"and hands names out from the first again.\n"
"Otherwise exit 1 with the reason; the limiter keeps its definition and\n"
"state; exit 5 when there is no such limiter.  A limiter defined by the\n"
"daemon's config goes back to the config's parameters on the daemon's\n"
"next reload: change the config too.\n"
"\n"
"limiter delete NAME deletes the limiter: every later call on it, in\n"
"every process, fails as 'no such limiter' until it is defined again.\n"
"Exit 1 when there is no such limiter.\n";

const char shmtc_help_client[] =
"client set LIMITER CLIENT RULE gives CLIENT of the per-client limiter\n"
"LIMITER a rule of its own: limit=N (its own limit per the limiter's\n"
"window; buckets mode), allow (never throttled, uses not counted) or\n"
"deny (always refused).  The change is atomic against every grant: uses\n"
"in flight stay counted, so a lowered limit refuses the client until\n"
"fewer than N are in flight, and a raised one takes effect at once.  Exit\n"
"1 when the limiter's override table is full.  client clear LIMITER\n"
"CLIENT removes the rule (exit 1 when there was none).  client list\n"
"LIMITER prints every rule, one per line: the rule, then the client id\n"
"(bytes outside printable ASCII as \\xHH).  Rules live in the segment and\n"
"survive a resize and a snapshot; the daemon's config may name rules too\n"
"(override = in a limiter's section), and a reload sets those again.\n";

const char shmtc_help_reset[] =
"Gives back every use in flight of LIMITER, or of CLIENT's entry of a\n"
"per-client limiter, and prints how many.  This is a deliberate\n"
"over-grant: up to twice the limit may be granted within one window.  The\n"
"uses given back are counted in the limiter's reset_uses.  Exit 1 when\n"
"there is no such limiter.\n";

const char shmtc_help_help[] =
"Prints the tool's page, or the page of COMMAND.\n";

void
shmtc_usage(FILE *f)
{
	fputs(
"NAME\n"
"    shmthrottle - show and operate a shmthrottle shared-memory segment\n"
"\n"
"SYNOPSIS\n"
"    shmthrottle [-s SEGMENT] [--json] COMMAND [ARGS]\n"
"    shmthrottle help [COMMAND] | COMMAND --help | --version\n"
"\n"
"COMMANDS\n", f);
	for (const struct shmtc_cmd *k = shmtc_commands; k->name; k++) {
		char head[64];

		snprintf(head, sizeof(head), "%s %s", k->name, k->synopsis);
		fprintf(f, "    %-29s %s\n", head, k->summary);
	}
	fputs(
"\n"
"OPTIONS\n"
"    -s, --segment NAME  the segment (default $SHMTHROTTLE_SEGMENT, else\n"
"                        " SHMT_DEFAULT_SEGMENT ")\n"
"    --json              one JSON document on stdout (reading commands);\n"
"                        field names are listed in cli/README-json.md\n"
"    -h, --help          this page; after a command, the command's page\n"
"    -V, --version       the version\n"
"\n"
"EXIT STATUS\n"
"    0  success, granted\n"
"    1  throttled; not found (limiter, key); already exists (create,\n"
"       set --nx); refused (incr on a value that is not a number or that\n"
"       would overflow, no room in the dictionary with eviction off)\n"
"    2  usage error: unknown command or option, bad argument\n"
"    3  segment missing, incompatible (not a segment, other format) or\n"
"       unusable (permission, no free process slot, created without the\n"
"       dictionary or the counters the command needs)\n"
"    4  segment damaged (size, header or state inconsistent; check names\n"
"       each problem)\n"
"    5  no such limiter (try, wait, next-key, limiter set)\n"
"\n"
"ENVIRONMENT\n"
"    SHMTHROTTLE_SEGMENT  the default segment name\n"
"    SHMTHROTTLE_OWNER    a user (name or uid) whose segment is trusted\n"
"                         too: a segment is attached only when its owner\n"
"                         is you, root or this user, or (except for root)\n"
"                         when its group is yours and may write it\n"
"\n"
"NOTES\n"
"    Errors go to stderr, also with --json.  Every command works while the\n"
"    daemon is down; stat, watch and check say that it is down.  Reading a\n"
"    segment attaches to it, so the tool itself shows up as one slot.\n", f);
}

void
shmtc_usage_short(FILE *f)
{
	fputs("usage: shmthrottle [-s SEGMENT] [--json] COMMAND [ARGS]\n"
	    "commands:", f);
	for (const struct shmtc_cmd *k = shmtc_commands; k->name; k++)
		fprintf(f, " %s", k->name);
	fputs("\nTry 'shmthrottle --help' for the whole page.\n", f);
}

void
shmtc_help_page(FILE *f, const struct shmtc_cmd *cmd)
{
	fprintf(f, "usage: shmthrottle [-s SEGMENT]%s %s%s%s\n\n",
	    cmd->reads ? " [--json]" : "", cmd->name,
	    *cmd->synopsis ? " " : "", cmd->synopsis);
	fputs(cmd->help, f);
	if (cmd->help == shmtc_help_create)
		create_options(f);
}
