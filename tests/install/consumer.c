/* SPDX-License-Identifier: MIT */
/*
 * A program outside the source tree, built against an installed
 * libshmthrottle: creates, opens and removes a segment and prints its format
 * word, so the install test can compare what each way of building gives.
 */
#include <shmthrottle.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

static int
run(const char *name)
{
	shmt_segment_stat_t st;
	shmt_t *h = NULL, *h2 = NULL;
	int rc;

	if ((rc = shmt_create(name, NULL, &h)) != 0)
		return rc;
	if ((rc = shmt_open(name, &h2)) == 0)
		rc = shmt_segment_stat(h2, &st);
	if (rc == 0 && st.slots != 2)
		rc = SHMT_ECORRUPT;
	if (rc == 0)
		printf("format 0x%016" PRIx64 " abi %" PRIu32 " version %d.%d.%d\n",
		    st.format, st.abi_version, SHMT_VERSION_MAJOR,
		    SHMT_VERSION_MINOR, SHMT_VERSION_PATCH);
	shmt_close(h2);
	shmt_close(h);
	if (shmt_unlink(name) != 0 && rc == 0)
		rc = -EIO;
	if (rc == 0 && shmt_open(name, &h) != -ENOENT)
		rc = -EIO;
	return rc;
}

int
main(int argc, char **argv)
{
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s /segment-name\n", argv[0]);
		return 2;
	}
	rc = run(argv[1]);
	if (rc != 0) {
		fprintf(stderr, "%s: %s\n", argv[0], shmt_strerror(rc));
		return 1;
	}
	return 0;
}
