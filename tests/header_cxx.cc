// SPDX-License-Identifier: MIT
//
// shmthrottle.h compiled as C++ (-std=c++11 -pedantic) and linked against the
// shared library: the link fails unless every declaration has C linkage.  It
// then creates, opens and removes a segment through the C++ build.
#include "shmthrottle.h"

#include <cerrno>
#include <cstdio>
#include <string>
#include <unistd.h>

static_assert(SHMT_ERRLAST < SHMT_ERRBASE, "error range is ordered");

static int
check(bool ok, const char *what, int rc)
{
	if (!ok)
		std::fprintf(stderr, "header_cxx: %s: %d (%s)\n", what, rc,
		    shmt_strerror(rc));
	return ok ? 0 : 1;
}

int
main()
{
	std::string name = "/shmt-test-" + std::to_string(getpid()) + "-cxx";
	shmt_segment_stat_t st;
	shmt_t *h = nullptr, *h2 = nullptr;
	int bad = 0, rc;

	rc = shmt_create(name.c_str(), nullptr, &h);
	bad += check(rc == 0, "shmt_create", rc);
	rc = shmt_open(name.c_str(), &h2);
	bad += check(rc == 0, "shmt_open", rc);
	rc = h2 != nullptr ? shmt_segment_stat(h2, &st) : -1;
	bad += check(rc == 0 && st.slots == 2, "shmt_segment_stat", rc);
	shmt_close(h2);
	shmt_close(h);
	rc = shmt_unlink(name.c_str());
	bad += check(rc == 0, "shmt_unlink", rc);
	rc = shmt_open(name.c_str(), &h);
	bad += check(rc == -ENOENT, "shmt_open after unlink", rc);
	if (bad == 0)
		std::printf("header_cxx: format 0x%llx\n",
		    (unsigned long long)st.format);
	return bad == 0 ? 0 : 1;
}
