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

/* ---- Redis Cluster -------------------------------------------------------- */

#define SHMTD_REDIS_SEEDS_MAX 16
#define SHMTD_REDIS_SLOTS 16384
/* A key of a global limiter: room for "shmt:x{" + 2 * 63 hex + "}:l". */
#define SHMTD_REDIS_KEY_MAX 160

struct shmtd_redis_addr {
	char path[108];       /* unix socket, or "" */
	char host[256];       /* tcp host ("" for unix) */
	int port;
	char master[128];     /* a Sentinel's: the master's name; else "" */
};

/*
 * shmtd_redis_seeds: read a [global] redis value: one address, or several
 * (the seeds of a Redis Cluster) separated by spaces, commas or both, each
 * as shmtd_redis_parse reads it; or one or more Sentinels of one master,
 * "sentinel://HOST:PORT/NAME" each (NAME: 1..127 bytes, no '/', space or
 * comma; the same NAME in all, and no other kind of address with them).
 * Fills OUT[0..n-1]; returns n (1..CAP), or -EINVAL: an address that does
 * not parse, none at all, more than CAP, Sentinels mixed with others or
 * naming different masters.
 */
int shmtd_redis_seeds(const char *s, struct shmtd_redis_addr *out, size_t cap);

/*
 * shmtd_redis_slot: the Redis Cluster hash slot of key K (LEN bytes): the
 * CRC16 (XMODEM: polynomial 0x1021, initial 0) of its hash tag -- the
 * bytes between its first '{' and the first '}' after it, if there is at
 * least one -- or of the whole key, modulo 16384.
 */
unsigned shmtd_redis_slot(const char *k, size_t len);

/*
 * shmtd_redis_keys: the three Redis keys of global limiter NAME (1..63
 * bytes) into L, Z, B (each SHMTD_REDIS_KEY_MAX bytes): "shmt:{NAME}:l",
 * ":z", ":b".  A name whose first byte is '}' would give an empty hash
 * tag, and then the three keys would hash to three slots: such a name's
 * keys are "shmt:x{HEX}:l" ... with HEX its bytes in hexadecimal (no
 * other name's keys start "shmt:x{").  The three keys always share a slot.
 */
void shmtd_redis_keys(const char *name, char *l, char *z, char *b);

/*
 * shmtd_redis_redirect: read a Redis Cluster redirection, the text of an
 * error reply "MOVED SLOT HOST:PORT" (*ASK = 0) or "ASK SLOT HOST:PORT"
 * (*ASK = 1).  HOST may be an IPv6 address (the port follows the last
 * ':'), or empty (the node that answered: HOST gets "").  Returns 0, or
 * -EINVAL for any other text.
 */
int shmtd_redis_redirect(const char *s, int *ask, unsigned *slot, char *host,
    size_t hostcap, int *port);

#endif /* SHMTD_ADDR_H */
