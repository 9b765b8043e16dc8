/* SPDX-License-Identifier: MIT */
/*
 * Aligned text tables.  Widths count bytes: every cell the tool prints in a
 * table is ASCII (names are shown as they are, and a name with multi-byte
 * characters only shifts its own row).
 */
#include "table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void
shmtc_table_init(struct shmtc_table *t, size_t ncols,
    const char *const *headers, const char *align)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols < SHMTC_TABLE_COLS ? ncols : SHMTC_TABLE_COLS;
	t->align = align;
	shmtc_table_row(t, headers);
}

void
shmtc_table_row(struct shmtc_table *t, const char *const *cells)
{
	if (t->nrows == t->caprows) {
		size_t cap = t->caprows ? t->caprows * 2 : 16;
		char **p = realloc(t->cells, cap * t->ncols * sizeof(*p));

		if (p == NULL) {
			t->oom = 1;
			return;
		}
		t->cells = p;
		t->caprows = cap;
	}
	for (size_t i = 0; i < t->ncols; i++) {
		char **cell = &t->cells[t->nrows * t->ncols + i];

		*cell = strdup(cells[i] != NULL ? cells[i] : "");
		if (*cell == NULL)
			t->oom = 1;
	}
	t->nrows++;
}

int
shmtc_table_print(const struct shmtc_table *t, FILE *f)
{
	size_t width[SHMTC_TABLE_COLS] = { 0 };

	if (t->oom)
		return -ENOMEM;
	for (size_t r = 0; r < t->nrows; r++)
		for (size_t i = 0; i < t->ncols; i++) {
			size_t w = strlen(t->cells[r * t->ncols + i]);

			if (w > width[i])
				width[i] = w;
		}
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t i = 0; i < t->ncols; i++) {
			const char *s = t->cells[r * t->ncols + i];
			int last = i + 1 == t->ncols;
			int w = (int)width[i];

			if (t->align[i] == 'r')
				fprintf(f, "%*s", w, s);
			else if (last)
				fputs(s, f);
			else
				fprintf(f, "%-*s", w, s);
			fputs(last ? "\n" : "  ", f);
		}
	}
	return 0;
}

void
shmtc_table_free(struct shmtc_table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}
