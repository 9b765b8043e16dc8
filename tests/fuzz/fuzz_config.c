/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config: the config parser of shmthrottled (shmtd_config_load) on a
 * file holding the input.  A config that loads is printed, and the printed
 * text must load again and print the same (the promise of
 * shmtd_config_print).
 */
#include "config.h"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path1[128], path2[128];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
cleanup(void)
{
	unlink(path1);
	unlink(path2);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fz_tmpname(path1, sizeof(path1), "a.conf");
	fz_tmpname(path2, sizeof(path2), "b.conf");
	atexit(cleanup);
	return 0;
}

static void
put(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "w");

	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		abort();
}

static char *
print(const struct shmtd_config *cfg, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);

	if (f == NULL)
		abort();
	shmtd_config_print(f, cfg);
	fclose(f);
	return text;
}

static const char *
body(const char *text)
{
	const char *nl = strchr(text, '\n');

	return nl != NULL ? nl + 1 : text;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shmtd_config cfg, again;
	char err[512], *t1, *t2;
	size_t n1, n2;

	put(path1, data, size);
	if (shmtd_config_load(path1, &cfg, err, sizeof(err)) != 0)
		return 0;
	t1 = print(&cfg, &n1);
	put(path2, t1, n1);
	if (shmtd_config_load(path2, &again, err, sizeof(err)) != 0) {
		fprintf(stderr, "printed config does not load: %s\n---\n%s",
		    err, t1);
		abort();
	}
	t2 = print(&again, &n2);
	/* The first line names the file it was read from. */
	if (strcmp(body(t1), body(t2)) != 0) {
		fprintf(stderr, "printed config prints differently:\n---\n%s"
		    "---\n%s", t1, t2);
		abort();
	}
	free(t1);
	free(t2);
	shmtd_config_free(&cfg);
	shmtd_config_free(&again);
	return 0;
}
