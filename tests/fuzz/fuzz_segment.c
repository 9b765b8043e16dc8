/* SPDX-License-Identifier: MIT */
/*
 * fuzz_segment: the segment validator.  An input is either a whole segment
 * image (it starts with the segment magic: written as the object as it is)
 * or patches to a real segment built at start (fuzz_util.h), which reach
 * deep into the regions without having to rebuild a valid header first.
 * The object is opened; if the library accepts it, every operation runs on
 * it.  Any result but a crash or a hang is allowed.
 */
#include "fuzz_util.h"

#include <stdlib.h>
#include <string.h>

static struct fz_image base;
static unsigned char *work;
static char name[128];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fz_env_reset();
	fz_base_image(&base);
	if ((work = malloc(base.size)) == NULL)
		abort();
	fz_segname(name, sizeof(name), "seg");
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	shmt_t *h = NULL;

	fz_env_reset();
	if (size >= 8 && memcmp(data, base.bytes, 8) == 0) {
		fz_write_object(name, data, size);
	} else {
		fz_apply_patches(&base, work, data, size);
		fz_write_object(name, work, base.size);
	}
	if (shmt_open(name, &h) == 0) {
		fz_exercise(h);
		shmt_close(h);
	}
	shmt_unlink(name);
	return 0;
}
