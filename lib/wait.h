/* This file is private to libshmthrottle: waiting for a grant. */
/* SPDX-License-Identifier: MIT */
#ifndef SHMT_WAIT_H
#define SHMT_WAIT_H

#include <stdint.h>

/* After uses went back to a limiter: bump its futex word WAKE and, only
 * when a waiter may sleep on it, wake them all (one system call). */
void shmt__wake_waiters(uint32_t *wake);

#endif /* SHMT_WAIT_H */
