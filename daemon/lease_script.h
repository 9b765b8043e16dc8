/* SPDX-License-Identifier: MIT */
/*
 * lease_script.h: the Lua script of the lease thread (lease_script.c, where
 * its keys, arguments and answer are described), apart so that the tests
 * can run it alone against a real Redis.
 */
#ifndef SHMTD_LEASE_SCRIPT_H
#define SHMTD_LEASE_SCRIPT_H

extern const char shmtd_lease_lua[];
/* The integers the script answers. */
#define SHMTD_LEASE_REPLY 7

#endif /* SHMTD_LEASE_SCRIPT_H */
