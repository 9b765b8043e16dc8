/* SPDX-License-Identifier: MIT */
/*
 * shmt_check: a read-only scan of the whole segment that names every
 * inconsistency it finds.  The header is compared with what was validated at
 * open; each module checks its own structures (limiters in limiter.c, the
 * dictionary and counters in dict.c) and reports through shmt__chk().  It is
 * the only set of rules: the CLI's check calls it and adds none of its own.
 * Read-only unless asked to repair: it takes no lock and stores nothing in
 * the segment.
 */
#include "segment.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

void
shmt__chk(struct shmt_chk *c, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	c->problems++;
	if (c->fn == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->fn(c->ctx, msg);
}

static void
header_check(shmt_t *h, struct shmt_chk *c)
{
	struct shmt_hdr *hdr = h->hdr;
	uint64_t hb, now;

	if (hdr->sh_magic != SHMT_MAGIC)
		shmt__chk(c, "header: magic changed since open");
	if (hdr->sh_format != shmt__format_word())
		shmt__chk(c, "header: format word changed since open");
	if (hdr->sh_size != h->size)
		shmt__chk(c, "header: size %llu differs from the mapping (%llu)",
		    (unsigned long long)hdr->sh_size,
		    (unsigned long long)h->size);
	for (int i = 0; i < SHMT_R_COUNT; i++)
		if (hdr->sh_regions[i].rg_off != h->reg[i].rg_off ||
		    hdr->sh_regions[i].rg_size != h->reg[i].rg_size)
			shmt__chk(c, "header: region %d changed since open", i);
	if (hdr->sh_arena_used > h->reg[SHMT_R_ARENA].rg_size)
		shmt__chk(c, "arena: %llu bytes marked used, more than its %llu",
		    (unsigned long long)hdr->sh_arena_used,
		    (unsigned long long)h->reg[SHMT_R_ARENA].rg_size);
	/* The daemon stamps its heartbeat from CLOCK_MONOTONIC (never from
	 * a handle's injected clock), so it is compared with that clock, read
	 * after the stamp. */
	hb = __atomic_load_n(&hdr->sh_heartbeat_ns, __ATOMIC_RELAXED);
	now = shmt__mono_ns();
	if (hb > now)
		shmt__chk(c, "daemon: heartbeat %llu ns in the future",
		    (unsigned long long)(hb - now));
}

SHMT_EXPORT int
shmt_check_ex(shmt_t *h, unsigned flags, shmt_check_fn report, void *ctx)
{
	struct shmt_chk c = { report, ctx, 0, (flags & SHMT_CHECK_REPAIR) != 0,
	    SHMT_CHK_WAIT_TOTAL_NS };
	uint64_t now_size;

	if (h == NULL || (flags & ~(unsigned)SHMT_CHECK_REPAIR) != 0)
		return -EINVAL;
	/* A truncated object cannot be scanned: its missing pages raise
	 * SIGBUS.  Name the damage and stop. */
	if (shmt__size_check(h, &now_size) != 0) {
		shmt__chk(&c, "segment: the object is %llu bytes, its header "
		    "says %llu (truncated); not scanned", (unsigned long long)now_size,
		    (unsigned long long)h->size);
		return SHMT_ESIZE;
	}
	header_check(h, &c);
	shmt__limiters_check(h, &c);
	shmt__stores_check(h, &c);
	return c.problems;
}

SHMT_EXPORT int
shmt_check(shmt_t *h, shmt_check_fn report, void *ctx)
{
	return shmt_check_ex(h, 0, report, ctx);
}
