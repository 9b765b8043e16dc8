/* SPDX-License-Identifier: MIT */
/*
 * Error names: one function covers the negative errno values the library
 * returns and its own SHMT_E* codes.  It never touches errno.
 */
#include "shmthrottle.h"

#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

SHMT_EXPORT const char *
shmt_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case SHMT_EMAGIC:
		return "not a shmthrottle segment (bad magic)";
	case SHMT_EFORMAT:
		return "segment format differs from this library's (ABI or layout)";
	case SHMT_ESIZE:
		return "segment size differs from its header (truncated or resized)";
	case SHMT_ECORRUPT:
		return "segment is corrupted (inconsistent header, region or state)";
	case SHMT_ENOTREG:
		return "shared-memory object is not a regular object";
	case SHMT_EBUSYLOOP:
		return "retry bound exhausted (segment damaged?)";
	case SHMT_ENOSLOT:
		return "process slot table is full";
	case SHMT_ELOCKED:
		return "lock held by a live process (busy too long, or damaged)";
	case SHMT_EUNTRUSTED:
		return "segment not trusted (owned by another user, or world-writable)";
	case SHMT_ENAMESPACE:
		return "segment created in another PID or time namespace";
	case SHMT_ESTALE:
		return "segment removed since this handle opened it (reopen it by name)";
	case -EINVAL:
		return "invalid argument";
	case -ENOENT:
		return "no such segment, limiter or key";
	case -EEXIST:
		return "already exists (with other parameters)";
	case -ENAMETOOLONG:
		return "name too long";
	case -ENOSPC:
		return "no space left (table, arena or memory full)";
	case -ENOMEM:
		return "out of memory";
	case -EACCES:
		return "permission denied";
	case -EPERM:
		return "operation not permitted on this object";
	case -E2BIG:
		return "argument too large";
	case -EMSGSIZE:
		return "value too large";
	case -ERANGE:
		return "buffer too small";
	case -ENOKEY:
		return "limiter has no key pool";
	default:
		break;
	}
	/* strerrordesc_np is static and thread-safe, unlike strerror. */
	if (err < 0 && err > -4096) {
		const char *s = strerrordesc_np(-err);

		if (s != NULL)
			return s;
	}
	return "unknown error";
}

int
shmt__bad(char *err, size_t cap, int rc, const char *fmt, ...)
{
	va_list ap;

	if (cap > 0) {
		va_start(ap, fmt);
		vsnprintf(err, cap, fmt, ap);
		va_end(ap);
	}
	return rc;
}
