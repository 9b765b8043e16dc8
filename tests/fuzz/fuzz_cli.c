/* SPDX-License-Identifier: MIT */
/*
 * fuzz_cli: the argument handling of the shmthrottle tool, in process.  The
 * tool's main() is compiled here as shmtc_main(); an input is split at NUL
 * bytes into arguments and run as `shmthrottle -s SEGMENT ARGS...` against
 * a real segment made at start, with stdout going to /dev/null and stdin
 * empty.  The first argument must name a command that only reads or
 * changes that segment's contents: create, destroy and watch (which draws
 * until interrupted) are left out, and so is any argument that could name
 * another segment (-s, --s...), so that the fuzzer never touches segments
 * it does not own.
 */
#include "fuzz_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 16

int shmtc_main(int argc, char **argv);
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char name[128];

static const char *const commands[] = {
	"stat", "limiters", "buckets", "try", "next-key", "get", "set", "del",
	"incr", "keys", "hit", "check", "help", NULL
};

static void
cleanup(void)
{
	shmt_unlink(name);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	shmt_config_t cfg;
	shmt_t *h;

	(void)argc, (void)argv;
	fz_env_reset();
	fz_segname(name, sizeof(name), "cli");
	shmt_unlink(name);
	fz_base_config(&cfg);
	if (shmt_create(name, &cfg, &h) != 0)
		abort();
	fz_populate(h);
	shmt_close(h);
	atexit(cleanup);
	if (freopen("/dev/null", "w", stdout) == NULL ||
	    freopen("/dev/null", "r", stdin) == NULL)
		abort();
	return 0;
}

static int
allowed(char **args, int n)
{
	int cmd = 0;

	for (int i = 0; i < n; i++) {
		const char *a = args[i];

		if (a[0] == '-' && a[1] == '-' && a[2] == 's')
			return 0;
		if (a[0] == '-' && a[1] != '-' && strchr(a, 's') != NULL)
			return 0;
		/* The first operand is the command. */
		if (!cmd && a[0] != '-') {
			for (int k = 0; commands[k] != NULL; k++)
				if (strcmp(a, commands[k]) == 0)
					cmd = 1;
			if (!cmd)
				return 0;
		}
	}
	return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy, *argv[MAX_ARGS + 4];
	int argc = 0, n = 0;
	size_t i = 0;

	if (size == 0 || size > 4096)
		return 0;
	fz_env_reset();
	if ((copy = malloc(size + 1)) == NULL)
		return 0;
	memcpy(copy, data, size);
	copy[size] = '\0';
	argv[argc++] = "shmthrottle";
	argv[argc++] = "-s";
	argv[argc++] = name;
	while (i < size && n < MAX_ARGS) {
		argv[argc + n++] = copy + i;
		i += strlen(copy + i) + 1;
	}
	argv[argc + n] = NULL;
	if (allowed(argv + argc, n)) {
		optind = 0;
		shmtc_main(argc + n, argv);
		fflush(stdout);
		clearerr(stdin);
	}
	free(copy);
	return 0;
}
