/* This file is private to the shmthrottle command-line tool. */
/* SPDX-License-Identifier: MIT */
/*
 * Numbers for people: durations, relative times and sizes, short and with
 * their unit, so that a table column reads at a glance.
 */
#ifndef SHMTC_FMT_H
#define SHMTC_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Buffers of this size hold any result. */
#define SHMTC_FMT_MAX 32

/* "0s", "850ns", "12.5us", "350ms", "1.2s", "59s", "2m05s", "1h", "3h12m",
 * "2d03h": at most three significant digits below a minute. */
char *shmtc_fmt_dur(char *buf, size_t cap, uint64_t ns);
/* T relative to NOW: "in 350ms", "1.2s ago", "now". */
char *shmtc_fmt_rel(char *buf, size_t cap, uint64_t t, uint64_t now);
/* "512 B", "4 KiB", "2.1 KiB", "16 MiB", "1.5 GiB". */
char *shmtc_fmt_bytes(char *buf, size_t cap, uint64_t bytes);
/* A share as a whole percentage: "0%", "37%", "100%" ("-" when of 0). */
char *shmtc_fmt_pct(char *buf, size_t cap, uint64_t part, uint64_t whole);

#endif /* SHMTC_FMT_H */
