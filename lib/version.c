/* SPDX-License-Identifier: MIT */
/*
 * The library's version, as the running library knows it: a program
 * compiled against one header and run with another library of the same
 * soname reads the library's here, the header's in SHMT_VERSION_*.
 */
#include "shmthrottle.h"

#define SHMT_STR_(x) #x
#define SHMT_STR(x) SHMT_STR_(x)

const char *
shmt_version(void)
{
	return SHMT_STR(SHMT_VERSION_MAJOR) "." SHMT_STR(SHMT_VERSION_MINOR)
	    "." SHMT_STR(SHMT_VERSION_PATCH);
}

unsigned long
shmt_version_number(void)
{
	return SHMT_VERSION_NUMBER;
}
