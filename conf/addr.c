/* SPDX-License-Identifier: MIT */
/*
 * Listen addresses of the daemon ([daemon] metrics).  Only numeric
 * addresses are read: a name would make the daemon's start depend on a
 * resolver, and a metrics endpoint is bound to one known interface anyway.
 */
#include "addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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
