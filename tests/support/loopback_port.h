/*
 * loopback_port.h - a TCP port on 127.0.0.1 that nobody listens on right
 * now (bind to port 0, read it back, release it), for tests whose ranks
 * meet at a rendezvous root. Header-only; needs no test framework.
 */
#ifndef DPL_TEST_LOOPBACK_PORT_H
#define DPL_TEST_LOOPBACK_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The port, or -1 when no socket could be bound. */
static inline int dpl_test_loopback_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

#endif /* DPL_TEST_LOOPBACK_PORT_H */
