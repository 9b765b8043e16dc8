/* SPDX-License-Identifier: MIT */
/*
 * addr.h: for the config reader and shmthrottled.  Reads a listen address
 * such as "127.0.0.1:9464" or "[::1]:9464" (numeric only: the daemon never
 * asks a resolver) into a socket address, and the Redis address of
 * [global] redis.
 */
#ifndef SHMTD_ADDR_H
#define SHMTD_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/*
 * shmtd_addr_parse: parse S, "IPV4:PORT" or "[IPV6]:PORT" with PORT
 * 0..65535 (0: any free port, chosen when the socket is bound), into *SS
 * and *LEN.  Returns 0 or -EINVAL.
 */
int shmtd_addr_parse(const char *s, struct sockaddr_storage *ss,
    socklen_t *len);

/*
 * shmtd_redis_parse: read a [global] redis value, "unix:PATH" (PATH
 * absolute, under 108 bytes) or "tcp://HOST:PORT" (PORT 1..65535).  Fills
 * PATH (unix) or HOST and *PORT (tcp; PATH gets ""); returns 0 or -EINVAL.
 */
int shmtd_redis_parse(const char *s, char *path, size_t pathcap, char *host,
    size_t hostcap, int *port);

#endif /* SHMTD_ADDR_H */
