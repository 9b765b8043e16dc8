/* SPDX-License-Identifier: MIT */
/*
 * shmt_check: a read-only scan of the whole segment that names every
 * inconsistency it finds.  The header is compared with what was validated at
 * open; each module checks its own structures (limiters in limiter.c, the
 * dictionary and counters in dict.c) and reports through shmt__chk().
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
	const struct shmt_hdr *hdr = h->hdr;

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
}

SHMT_EXPORT int
shmt_check(shmt_t *h, shmt_check_fn report, void *ctx)
{
	struct shmt_chk c = { report, ctx, 0 };
	uint64_t now_size;

	if (h == NULL)
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
