/*
 * loopback_port.h - TCP ports on 127.0.0.1 that nobody holds right now,
 * for tests whose ranks meet at a rendezvous root they bind later.
 * Header-only; needs no test framework.
 *
 * A port found free by binding port 0 and releasing it comes from the
 * kernel's ephemeral range (net.ipv4.ip_local_port_range), the range it
 * also hands every outgoing connection its local port from: with many
 * tests connecting at once, another process can hold the port by the
 * time the rank binds it. So the port is drawn at random from the 8,000
 * ports below that range, where the kernel places nothing by itself, and
 * checked free by binding it (as the rendezvous binds, with
 * SO_REUSEADDR); only when none is found there does it fall back to port
 * 0's answer.
 */
#ifndef DPL_TEST_LOOPBACK_PORT_H
#define DPL_TEST_LOOPBACK_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Bind 127.0.0.1:port (0: any) and release it; the port bound, or -1. */
static inline int dpl_test__try_port(int port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	int got = -1;

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		got = ntohs(a.sin_port);
	close(fd);
	return got;
}

/*
 * dpl_test_loopback_ports - the first of n (1..8) consecutive ports that
 * are all free now, drawn below the ephemeral range as above (up to 200
 * draws); else the port 0 gives (checked the same way for n > 1); -1 when
 * none is found.
 */
static inline int dpl_test_loopback_ports(int n)
{
	unsigned low = 32768, high = 60999, seed;
	struct timespec ts;
	FILE *f;
	int tries, k, p, lo;

	if (n < 1 || n > 8)
		return -1;
	f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f != NULL) {
		if (fscanf(f, "%u %u", &low, &high) != 2)
			low = 32768;
		fclose(f);
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	seed = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec ^
	       (unsigned)ts.tv_sec * 40503u;
	lo = low > 9024 ? (int)low - 8000 : 1024;
	for (tries = 0; tries < 200 && (int)low - n > lo; tries++) {
		seed = seed * 1103515245u + 12345u;
		p = lo + (int)((seed >> 8) % (unsigned)((int)low - n - lo));
		for (k = 0; k < n && dpl_test__try_port(p + k) == p + k; k++)
			;
		if (k == n)
			return p;
	}
	for (tries = 0; tries < 50; tries++) {
		p = dpl_test__try_port(0);
		if (p < 0 || p + n > 65536)
			continue;
		for (k = 1; k < n && dpl_test__try_port(p + k) == p + k; k++)
			;
		if (k == n)
			return p;
	}
	return -1;
}

/* One free port (dpl_test_loopback_ports(1)), or -1. */
static inline int dpl_test_loopback_port(void)
{
	return dpl_test_loopback_ports(1);
}

#endif /* DPL_TEST_LOOPBACK_PORT_H */
