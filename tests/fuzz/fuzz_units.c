/* SPDX-License-Identifier: MIT */
/*
 * fuzz_units: the duration and size parsers of the config.  The first byte
 * picks the parser, the rest is the text.  A value that parses must format
 * back to a spelling that parses to the same value.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[256], out[64];
	uint64_t v, back;

	if (size == 0 || size > sizeof(text))
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	if (data[0] & 1) {
		if (shmtd_parse_size(text, &v) != 0)
			return 0;
		shmtd_format_size(v, out, sizeof(out));
		if (shmtd_parse_size(out, &back) != 0 || back != v) {
			fprintf(stderr, "size '%s' = %llu formats as '%s'\n",
			    text, (unsigned long long)v, out);
			abort();
		}
	} else {
		if (shmtd_parse_duration(text, &v) != 0)
			return 0;
		shmtd_format_duration(v, out, sizeof(out));
		if (shmtd_parse_duration(out, &back) != 0 || back != v) {
			fprintf(stderr, "duration '%s' = %llu formats as '%s'\n",
			    text, (unsigned long long)v, out);
			abort();
		}
	}
	return 0;
}
