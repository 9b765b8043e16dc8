/* This file is private to the shmthrottle command-line tool. */
/* SPDX-License-Identifier: MIT */
/*
 * Aligned text tables: cells are collected first, then printed with each
 * column as wide as its widest cell, numbers right-aligned.
 */
#ifndef SHMTC_TABLE_H
#define SHMTC_TABLE_H

#include <stddef.h>
#include <stdio.h>

#define SHMTC_TABLE_COLS 16

struct shmtc_table {
	size_t ncols;
	const char *align;         /* per column: 'l' or 'r' */
	char **cells;              /* rows * ncols, row 0 is the header */
	size_t nrows, caprows;
	int oom;
};

/* HEADERS: NCOLS column titles; ALIGN: NCOLS letters 'l' or 'r'. */
void shmtc_table_init(struct shmtc_table *t, size_t ncols,
    const char *const *headers, const char *align);
/* Append a row of NCOLS cells (copied). */
void shmtc_table_row(struct shmtc_table *t, const char *const *cells);
/* Print with two spaces between columns, no trailing blanks.  Returns 0,
 * or -ENOMEM when a cell could not be stored. */
int shmtc_table_print(const struct shmtc_table *t, FILE *f);
void shmtc_table_free(struct shmtc_table *t);

#endif /* SHMTC_TABLE_H */
