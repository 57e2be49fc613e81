/*
 * bootstrap_addr.c - root addresses of the rendezvous: "host:port" and
 * "[v6]:port" parsed, resolved, and the socket options of a connection.
 */
#define _GNU_SOURCE
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "bootstrap_internal.h"

int dpl__bs_parse_port(const char *s, unsigned *port)
{
	unsigned long v = 0;
	const char *p;

	if (*s == '\0')
		return -1;
	for (p = s; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || p - s > 5)
			return -1;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (v > 65535)
		return -1;
	*port = (unsigned)v;
	return 0;
}

/*
 * Split "host:port" or "[v6]:port". Names the root in the error.
 */
int dpl__bs_parse_root(const char *root, char *host, unsigned *port,
		       bool *v6)
{
	const char *colon, *hs, *he;
	size_t hl;

	if (root == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: root address is "
				  "NULL (expected \"host:port\")");
	if (root[0] == '[') {
		hs = root + 1;
		he = strchr(hs, ']');
		if (he == NULL || he[1] != ':')
			goto bad;
		colon = he + 1;
		*v6 = true;
	} else {
		colon = strrchr(root, ':');
		if (colon == NULL)
			goto bad;
		hs = root;
		he = colon;
		if (memchr(hs, ':', (size_t)(he - hs)) != NULL)
			goto bad; /* IPv6 needs brackets */
		*v6 = false;
	}
	hl = (size_t)(he - hs);
	if (hl == 0 || hl >= BS_HOST_MAX)
		goto bad;
	if (dpl__bs_parse_port(colon + 1, port) != 0)
		goto bad;
	memcpy(host, hs, hl);
	host[hl] = '\0';
	return 0;
bad:
	return dpl_set_error(DPL_EINVAL, "bootstrap: root address '%s' is not "
			  "\"host:port\" (\"[v6addr]:port\" for IPv6, port "
			  "0..65535)", root);
}

int dpl__bs_resolve(const char *host, unsigned port, struct addrinfo **out)
{
	struct addrinfo hints;
	char serv[8];
	int rc;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(serv, sizeof serv, "%u", port);
	rc = getaddrinfo(host, serv, &hints, out);
	if (rc != 0)
		return dpl_set_error(DPL_EINVAL, "bootstrap: cannot resolve root "
				  "host '%s': %s", host, gai_strerror(rc));
	return 0;
}

void dpl__bs_tune(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
