/* SPDX-License-Identifier: MIT */
/*
 * Listen addresses of the daemon ([daemon] metrics).  Only numeric
 * addresses are read: a name would make the daemon's start depend on a
 * resolver, and a metrics endpoint is bound to one known interface anyway.
 * Also the Redis side of [global] redis: its addresses (one, or the seeds
 * of a Redis Cluster), the cluster's key slots and its redirections.
 */
#include "addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
parse_port(const char *s, in_port_t *port)
{
	unsigned long v = 0;

	if (*s == '\0' || strlen(s) > 5)
		return -EINVAL;
	for (const char *c = s; *c != '\0'; c++) {
		if (*c < '0' || *c > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*c - '0');
	}
	if (v > 65535)
		return -EINVAL;
	*port = htons((in_port_t)v);
	return 0;
}

int
shmtd_addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[64];
	const char *colon;
	size_t hlen;
	in_port_t port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

		if (end == NULL || end[1] != ':' ||
		    (hlen = (size_t)(end - s - 1)) == 0 || hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hlen);
		host[hlen] = '\0';
		if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1 ||
		    parse_port(end + 2, &port) != 0)
			return -EINVAL;
		a6->sin6_family = AF_INET6;
		a6->sin6_port = port;
		*len = sizeof(*a6);
		return 0;
	}
	colon = strrchr(s, ':');
	if (colon == NULL || (hlen = (size_t)(colon - s)) == 0 ||
	    hlen >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	{
		struct sockaddr_in *a4 = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &a4->sin_addr) != 1 ||
		    parse_port(colon + 1, &port) != 0)
			return -EINVAL;
		a4->sin_family = AF_INET;
		a4->sin_port = port;
		*len = sizeof(*a4);
	}
	return 0;
}

/* A Redis address ([global] redis).  A host name is allowed here: hiredis
 * resolves it when it connects, and a Redis behind a name is common. */
int
shmtd_redis_parse(const char *s, char *path, size_t pathcap, char *host,
    size_t hostcap, int *port)
{
	const char *c;
	in_port_t p;
	size_t n;

	if (s == NULL || pathcap == 0 || hostcap == 0)
		return -EINVAL;
	path[0] = host[0] = '\0';
	*port = 0;
	if (strncmp(s, "unix:", 5) == 0) {
		s += 5;
		n = strlen(s);
		if (s[0] != '/' || n >= pathcap || n >= 108)
			return -EINVAL;
		memcpy(path, s, n + 1);
		return 0;
	}
	if (strncmp(s, "tcp://", 6) != 0)
		return -EINVAL;
	s += 6;
	c = strrchr(s, ':');
	if (c == NULL || c == s || (size_t)(c - s) >= hostcap)
		return -EINVAL;
	if (parse_port(c + 1, &p) != 0 || ntohs(p) == 0)
		return -EINVAL;
	n = (size_t)(c - s);
	if (s[0] == '[' && n >= 2 && s[n - 1] == ']') {
		s++;
		n -= 2;
	}
	for (size_t i = 0; i < n; i++)
		if (s[i] == '/' || s[i] == ' ' || s[i] == '[' || s[i] == ']')
			return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = ntohs(p);
	return n > 0 ? 0 : -EINVAL;
}

int
shmtd_redis_seeds(const char *s, struct shmtd_redis_addr *out, size_t cap)
{
	char one[512];
	size_t n = 0;

	if (s == NULL)
		return -EINVAL;
	for (;;) {
		size_t len;

		while (*s == ' ' || *s == ',' || *s == '\t')
			s++;
		if (*s == '\0')
			break;
		len = strcspn(s, " ,\t");
		if (len >= sizeof(one) || n == cap)
			return -EINVAL;
		memcpy(one, s, len);
		one[len] = '\0';
		out[n].master[0] = '\0';
		if (strncmp(one, "sentinel://", 11) == 0) {
			char *name = strchr(one + 11, '/');
			size_t nl;

			if (name == NULL || (nl = strlen(name + 1)) == 0 ||
			    nl >= sizeof(out[n].master) ||
			    strchr(name + 1, '/') != NULL)
				return -EINVAL;
			memcpy(out[n].master, name + 1, nl + 1);
			*name = '\0';
			/* HOST:PORT as tcp:// reads it. */
			memcpy(one + 5, "tcp://", 6);
			memmove(one, one + 5, strlen(one + 5) + 1);
		}
		if (shmtd_redis_parse(one, out[n].path, sizeof(out[n].path),
		    out[n].host, sizeof(out[n].host), &out[n].port) != 0)
			return -EINVAL;
		if (n > 0 && strcmp(out[n].master, out[0].master) != 0)
			return -EINVAL;
		n++;
		s += len;
	}
	return n > 0 ? (int)n : -EINVAL;
}

/* CRC16, XMODEM (CCITT polynomial 0x1021, initial value 0, no reflection,
 * no final xor): what Redis Cluster hashes keys with. */
static unsigned
crc16(const unsigned char *p, size_t n)
{
	unsigned crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (unsigned)p[i] << 8;
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000U ? (crc << 1) ^ 0x1021U : crc << 1;
		crc &= 0xffffU;
	}
	return crc;
}

unsigned
shmtd_redis_slot(const char *k, size_t len)
{
	const char *open = memchr(k, '{', len), *close;

	if (open != NULL) {
		size_t rest = len - (size_t)(open - k) - 1;

		close = memchr(open + 1, '}', rest);
		if (close != NULL && close > open + 1)
			k = open + 1, len = (size_t)(close - open - 1);
	}
	return crc16((const unsigned char *)k, len) % SHMTD_REDIS_SLOTS;
}

void
shmtd_redis_keys(const char *name, char *l, char *z, char *b)
{
	char tag[SHMTD_REDIS_KEY_MAX - 16];
	const char *pre = "shmt:";
	size_t n = strnlen(name, 63);

	if (n > 0 && name[0] == '}') {
		static const char hex[] = "0123456789abcdef";

		for (size_t i = 0; i < n; i++) {
			tag[2 * i] = hex[(unsigned char)name[i] >> 4];
			tag[2 * i + 1] = hex[(unsigned char)name[i] & 15];
		}
		tag[2 * n] = '\0';
		pre = "shmt:x";
	} else {
		memcpy(tag, name, n);
		tag[n] = '\0';
	}
	snprintf(l, SHMTD_REDIS_KEY_MAX, "%s{%s}:l", pre, tag);
	snprintf(z, SHMTD_REDIS_KEY_MAX, "%s{%s}:z", pre, tag);
	snprintf(b, SHMTD_REDIS_KEY_MAX, "%s{%s}:b", pre, tag);
}

int
shmtd_redis_redirect(const char *s, int *ask, unsigned *slot, char *host,
    size_t hostcap, int *port)
{
	const char *sp, *c;
	unsigned long v = 0;
	in_port_t p;
	size_t n;

	if (strncmp(s, "MOVED ", 6) == 0)
		*ask = 0, s += 6;
	else if (strncmp(s, "ASK ", 4) == 0)
		*ask = 1, s += 4;
	else
		return -EINVAL;
	if ((sp = strchr(s, ' ')) == NULL || sp == s || sp - s > 5)
		return -EINVAL;
	for (const char *d = s; d < sp; d++) {
		if (*d < '0' || *d > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*d - '0');
	}
	if (v >= SHMTD_REDIS_SLOTS)
		return -EINVAL;
	*slot = (unsigned)v;
	s = sp + 1;
	if ((c = strrchr(s, ':')) == NULL || (n = (size_t)(c - s)) >= hostcap ||
	    parse_port(c + 1, &p) != 0 || ntohs(p) == 0)
		return -EINVAL;
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']')
		s++, n -= 2;
	for (size_t i = 0; i < n; i++)
		if (s[i] == ' ' || s[i] == '/')
			return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = ntohs(p);
	return 0;
}
