/* SPDX-License-Identifier: MIT */
/*
 * The library's version: shmt_version() and shmt_version_number() agree
 * with the header's SHMT_VERSION_* and with the version the build gives
 * the project (argv[1]), so the header cannot drift from the soname's
 * version.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static const char *project_version;

static void
test_version(void **state)
{
	char want[32];
	unsigned a, b, c;

	snprintf(want, sizeof(want), "%d.%d.%d", SHMT_VERSION_MAJOR,
	    SHMT_VERSION_MINOR, SHMT_VERSION_PATCH);
	assert_string_equal(shmt_version(), want);
	assert_string_equal(shmt_version(), project_version);
	assert_true(shmt_version() == shmt_version()); /* static */
	assert_int_equal(sscanf(project_version, "%u.%u.%u", &a, &b, &c), 3);
	assert_true(shmt_version_number() == SHMT_VERSION_NUMBER);
	assert_true(shmt_version_number() == a * 10000UL + b * 100UL + c);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PROJECT_VERSION\n", argv[0]);
		return 2;
	}
	project_version = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
