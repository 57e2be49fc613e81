/*
 * bootstrap_wire.c - the rendezvous' wire format and bounded socket I/O:
 * whole reads and writes before a deadline, messages (header and
 * payload), and whether a peer has gone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dpl/backend.h>

#include "bootstrap_internal.h"

int dpl__bs_left_ms(uint64_t deadline)
{
	uint64_t n = dpl__bs_now_ms();

	if (n >= deadline)
		return 0;
	return deadline - n > INT32_MAX ? INT32_MAX : (int)(deadline - n);
}

void dpl__bs_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int dpl__bs_listen(const struct addrinfo *ai, int backlog, int *err)
{
	int fd, one = 1;

	*err = 0;
	for (; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
			    SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			*err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, backlog) == 0)
			return fd;
		*err = errno;
		close(fd);
	}
	return -1;
}

/* ---- bounded socket I/O ------------------------------------------- */

/*
 * Read exactly n bytes before the deadline. Returns 0, DPL_ETIMEDOUT,
 * DPL_EPEER (the other end closed or reset) or DPL_EIO (errno kept).
 */
int dpl__bs_read_full(int fd, void *buf, size_t n, uint64_t deadline)
{
	unsigned char *p = buf;

	while (n > 0) {
		struct pollfd pfd = {fd, POLLIN, 0};
		ssize_t k;
		int rc;

		rc = poll(&pfd, 1, dpl__bs_left_ms(deadline));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return DPL_EIO;
		if (rc == 0)
			return DPL_ETIMEDOUT;
		k = recv(fd, p, n, MSG_DONTWAIT);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
		} else if (k == 0) {
			return DPL_EPEER;
		} else if (errno == ECONNRESET || errno == EPIPE) {
			return DPL_EPEER;
		} else if (errno != EAGAIN && errno != EWOULDBLOCK &&
			   errno != EINTR) {
			return DPL_EIO;
		}
	}
	return 0;
}

/* Write exactly n bytes before the deadline; returns like read_full. */
static int write_full(int fd, const void *buf, size_t n, uint64_t deadline)
{
	const unsigned char *p = buf;

	while (n > 0) {
		struct pollfd pfd = {fd, POLLOUT, 0};
		ssize_t k;
		int rc;

		k = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && (errno == ECONNRESET || errno == EPIPE))
			return DPL_EPEER;
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
		    errno != EINTR)
			return DPL_EIO;
		rc = poll(&pfd, 1, dpl__bs_left_ms(deadline));
		if (rc < 0 && errno != EINTR)
			return DPL_EIO;
		if (rc == 0)
			return DPL_ETIMEDOUT;
	}
	return 0;
}

int dpl__bs_send_msg(int fd, uint32_t type, uint32_t a, uint32_t b,
		     const void *payload, uint32_t len, uint64_t deadline)
{
	unsigned char h[BS_HDR];
	int rc;

	dpl_put_u32(h, BS_MAGIC);
	dpl_put_u32(h + 4, type);
	dpl_put_u32(h + 8, a);
	dpl_put_u32(h + 12, b);
	dpl_put_u32(h + 16, len);
	rc = write_full(fd, h, sizeof h, deadline);
	if (rc == 0 && len > 0)
		rc = write_full(fd, payload, len, deadline);
	return rc;
}

/* Read a header; DPL_EIO for one that is not ours. */
int dpl__bs_recv_hdr(int fd, struct bs_hdr *h, uint64_t deadline)
{
	unsigned char b[BS_HDR];
	int rc;

	rc = dpl__bs_read_full(fd, b, sizeof b, deadline);
	if (rc != 0)
		return rc;
	h->magic = dpl_get_u32(b);
	h->type = dpl_get_u32(b + 4);
	h->a = dpl_get_u32(b + 8);
	h->b = dpl_get_u32(b + 12);
	h->len = dpl_get_u32(b + 16);
	if (h->magic != BS_MAGIC) {
		errno = EPROTO;
		return DPL_EIO;
	}
	return 0;
}

/* Read a text payload (REJECT, ABORT) into msg, NUL-terminated. */
int dpl__bs_recv_text(int fd, uint32_t len, char *msg, size_t size,
		      uint64_t deadline)
{
	char tmp[BS_MSG_MAX + 1];
	int rc;

	if (len > BS_MSG_MAX) {
		errno = EPROTO;
		return DPL_EIO;
	}
	rc = dpl__bs_read_full(fd, tmp, len, deadline);
	if (rc != 0)
		return rc;
	tmp[len] = '\0';
	snprintf(msg, size, "%s", tmp);
	return 0;
}

/* Whether the peer of a connected socket has closed it (non-blocking). */
bool dpl__bs_peer_gone(int fd)
{
	struct pollfd pfd = {fd, POLLIN, 0};
	char c;
	ssize_t k;

	if (poll(&pfd, 1, 0) <= 0)
		return false;
	if (pfd.revents & (POLLHUP | POLLERR))
		return true;
	if (!(pfd.revents & POLLIN))
		return false;
	k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			  errno != EINTR);
}

/*
 * After sending to rank 0 (send_rc): read its answer. When the send
 * failed because rank 0 already closed the connection, its reason (a
 * message of type `why`) may still be waiting in the socket: read it
 * briefly, so that every rank reports the cause rank 0 saw.
 */
int dpl__bs_recv_verdict(int fd, int send_rc, struct bs_hdr *h,
			 uint32_t why, uint64_t deadline)
{
	uint64_t brief = dpl__bs_now_ms() + 100;
	int rc;

	if (send_rc == 0)
		return dpl__bs_recv_hdr(fd, h, deadline);
	if (send_rc != DPL_EPEER)
		return send_rc;
	rc = dpl__bs_recv_hdr(fd, h, brief < deadline ? brief : deadline);
	return rc == 0 && h->type == why ? 0 : send_rc;
}
