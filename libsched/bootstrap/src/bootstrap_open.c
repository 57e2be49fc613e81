/*
 * bootstrap_open.c - the rendezvous: rank 0 listens and admits every
 * rank, the others connect and are welcomed (dpl_bootstrap_open()); the
 * handle's close and accessors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_internal.h"

/* Sleep ms milliseconds (between attempts to reach the root). */
static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- rendezvous at rank 0 ----------------------------------------- */

static int listen_root(dpl_bootstrap *b, int *lfd_out)
{
	struct addrinfo *ai, *a;
	int lfd = -1, err = 0, one = 1, rc;

	rc = dpl__bs_resolve(b->host, b->port, &ai);
	if (rc != 0)
		return rc;
	for (a = ai; a != NULL; a = a->ai_next) {
		lfd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK |
			     SOCK_CLOEXEC, a->ai_protocol);
		if (lfd < 0) {
			err = errno;
			continue;
		}
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(lfd, a->ai_addr, a->ai_addrlen) == 0 &&
		    listen(lfd, (int)(b->world < 1024 ? b->world : 1024)) ==
			    0)
			break;
		err = errno;
		dpl__bs_close_fd(&lfd);
	}
	freeaddrinfo(ai);
	if (lfd < 0) {
		errno = err;
		return dpl_set_error(err == EADDRINUSE ? DPL_EBUSY : DPL_EIO,
				  "bootstrap: rank 0 cannot listen on "
				  "%s%s%s:%u: %s", b->v6 ? "[" : "", b->host,
				  b->v6 ? "]" : "", b->port, strerror(err));
	}
	if (b->port == 0) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;

		if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0)
			b->port = ntohs(ss.ss_family == AF_INET6
				? ((struct sockaddr_in6 *)&ss)->sin6_port
				: ((struct sockaddr_in *)&ss)->sin_port);
	}
	*lfd_out = lfd;
	return 0;
}

/* "ranks 2, 3, 7 never arrived" style list of ranks without a mark. */
void dpl__bs_list_missing(const dpl_bootstrap *b, const bool *have,
			  char *out, size_t size)
{
	size_t used = 0;
	uint32_t r, n = 0;

	out[0] = '\0';
	for (r = 1; r < b->world; r++) {
		int k;

		if (have[r])
			continue;
		if (n == 16) {
			snprintf(out + used, size - used, ", ...");
			break;
		}
		k = snprintf(out + used, size - used, "%s%u", n ? ", " : "",
			     r);
		if (k < 0 || (size_t)k >= size - used)
			break;
		used += (size_t)k;
		n++;
	}
}

uint32_t dpl__bs_count_missing(const dpl_bootstrap *b, const bool *have)
{
	uint32_t r, n = 0;

	for (r = 1; r < b->world; r++)
		n += !have[r];
	return n;
}

/* Tell every connected rank why the rendezvous failed, then close. */
static void reject_all(dpl_bootstrap *b, int code)
{
	const char *msg = dpl_last_error();
	uint32_t len = (uint32_t)strnlen(msg, BS_MSG_MAX);
	uint64_t deadline = dpl__bs_now_ms() + 200;
	uint32_t r;

	for (r = 1; r < b->world; r++)
		if (b->fd[r] >= 0)
			dpl__bs_send_msg(b->fd[r], BS_REJECT, (uint32_t)-code,
					 0, msg, len, deadline);
}

/*
 * A new connection said HELLO (or not). Returns 0 when it joined,
 * > 0 when it was turned away (the rendezvous goes on), or a negative
 * code that fails the rendezvous.
 */
static int admit(dpl_bootstrap *b, int fd, uint64_t deadline)
{
	uint64_t hello_deadline = dpl__bs_now_ms() + BS_HELLO_MS;
	struct bs_hdr h;
	char msg[BS_MSG_MAX];
	int rc;

	if (hello_deadline > deadline)
		hello_deadline = deadline;
	rc = dpl__bs_recv_hdr(fd, &h, hello_deadline);
	if (rc != 0 || h.type != BS_HELLO || h.len != 0) {
		close(fd);
		return 1; /* not one of ours, or too slow: ignore */
	}
	if (h.b != b->world) {
		snprintf(msg, sizeof msg, "bootstrap: rank %u says the world "
			 "has %u ranks, rank 0 says %u", h.a, h.b, b->world);
		dpl__bs_send_msg(fd, BS_REJECT, (uint32_t)-DPL_EINVAL, 0, msg,
				 (uint32_t)strlen(msg), dpl__bs_now_ms() + 200);
		close(fd);
		return dpl_set_error(DPL_EINVAL, "%s", msg);
	}
	if (h.a == 0 || h.a >= b->world || b->fd[h.a] >= 0) {
		bool range = h.a == 0 || h.a >= b->world;

		snprintf(msg, sizeof msg, "bootstrap: rank %u %s", h.a,
			 range ? "is out of range"
			       : "arrived twice; the second one is turned "
				 "away");
		dpl__bs_send_msg(fd, BS_REJECT,
				 (uint32_t)-(range ? DPL_EINVAL : DPL_EBUSY), 0,
				 msg, (uint32_t)strlen(msg),
				 dpl__bs_now_ms() + 200);
		close(fd);
		return 1;
	}
	dpl__bs_tune(fd);
	b->fd[h.a] = fd;
	return 0;
}

static int root_rendezvous(dpl_bootstrap *b, uint64_t deadline)
{
	struct pollfd *pfd;
	bool *have;
	int lfd = -1, rc = 0;
	uint32_t r;
	char list[160];

	rc = listen_root(b, &lfd);
	if (rc != 0)
		return rc;
	pfd = calloc(b->world, sizeof *pfd);
	have = calloc(b->world, sizeof *have);
	if (pfd == NULL || have == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "bootstrap: out of memory");
		goto out;
	}
	have[0] = true;
	while (dpl__bs_count_missing(b, have) > 0) {
		nfds_t n = 0;
		int k;

		/* The listener, and every rank that arrived: one of those
		 * dying during the rendezvous fails it at once. */
		pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
		for (r = 1; r < b->world; r++)
			if (have[r])
				pfd[n++] = (struct pollfd){b->fd[r], POLLIN, 0};
		k = poll(pfd, n, dpl__bs_left_ms(deadline));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = dpl_set_error(DPL_EIO, "bootstrap: poll: %s",
					strerror(errno));
			goto fail;
		}
		if (k == 0) {
			dpl__bs_list_missing(b, have, list, sizeof list);
			rc = dpl_set_error(DPL_ETIMEDOUT, "bootstrap: rank%s %s "
					"never arrived at %s%s%s:%u within %u "
					"ms",
					dpl__bs_count_missing(b, have) > 1
						? "s"
						: "",
					list, b->v6 ? "[" : "", b->host,
					b->v6 ? "]" : "", b->port,
					b->timeout_ms);
			goto fail;
		}
		for (r = 1; r < b->world; r++)
			if (have[r] && dpl__bs_peer_gone(b->fd[r])) {
				dpl__bs_close_fd(&b->fd[r]);
				rc = dpl_set_error(DPL_EPEER, "bootstrap: rank %u "
						"died during the rendezvous",
						r);
				goto fail;
			}
		if (pfd[0].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL,
					 SOCK_NONBLOCK | SOCK_CLOEXEC);

			if (fd < 0)
				continue; /* EAGAIN, ECONNABORTED, EMFILE */
			rc = admit(b, fd, deadline);
			if (rc < 0)
				goto fail;
			for (r = 1; r < b->world; r++)
				have[r] = b->fd[r] >= 0;
		}
	}
	for (r = 1; r < b->world; r++) {
		rc = dpl__bs_send_msg(b->fd[r], BS_WELCOME, b->world, 0, NULL,
				      0, deadline);
		if (rc != 0) {
			rc = dpl_set_error(rc == DPL_ETIMEDOUT ? rc : DPL_EPEER,
					"bootstrap: rank %u %s during the "
					"rendezvous", r,
					rc == DPL_ETIMEDOUT
						? "did not take the answer"
						: "died");
			goto fail;
		}
	}
	rc = 0;
	goto out;
fail:
	reject_all(b, rc);
out:
	dpl__bs_close_fd(&lfd);
	free(pfd);
	free(have);
	return rc;
}

/* ---- rendezvous at other ranks ------------------------------------ */

/* One non-blocking connection attempt; fd on success, -1 with errno. */
static int try_connect(const struct addrinfo *a, uint64_t deadline)
{
	struct pollfd pfd;
	socklen_t sl = sizeof(int);
	int fd, err = 0;

	fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, a->ai_protocol);
	if (fd < 0)
		return -1;
	if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		err = errno;
		goto fail;
	}
	pfd = (struct pollfd){fd, POLLOUT, 0};
	while (poll(&pfd, 1, dpl__bs_left_ms(deadline)) < 0)
		if (errno != EINTR) {
			err = errno;
			goto fail;
		}
	if (!(pfd.revents & (POLLOUT | POLLERR | POLLHUP))) {
		err = ETIMEDOUT;
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
		err = errno;
	if (err == 0)
		return fd;
fail:
	close(fd);
	errno = err;
	return -1;
}

static int join_root(dpl_bootstrap *b, uint64_t deadline)
{
	struct addrinfo *ai, *a;
	struct bs_hdr h;
	char msg[BS_MSG_MAX + 1];
	int fd = -1, err = 0, rc;

	rc = dpl__bs_resolve(b->host, b->port, &ai);
	if (rc != 0)
		return rc;
	while (fd < 0) {
		for (a = ai; a != NULL && fd < 0; a = a->ai_next) {
			fd = try_connect(a, deadline);
			if (fd < 0)
				err = errno;
		}
		if (fd >= 0 || dpl__bs_left_ms(deadline) == 0)
			break;
		sleep_ms(dpl__bs_left_ms(deadline) < BS_RETRY_MS
				 ? dpl__bs_left_ms(deadline)
				 : BS_RETRY_MS);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return dpl_set_error(DPL_ETIMEDOUT, "bootstrap: root %s%s%s:%u "
				  "(rank 0) did not answer rank %u within %u "
				  "ms (last error: %s)", b->v6 ? "[" : "",
				  b->host, b->v6 ? "]" : "", b->port, b->rank,
				  b->timeout_ms, strerror(err));
	dpl__bs_tune(fd);
	b->fd[0] = fd;
	rc = dpl__bs_send_msg(fd, BS_HELLO, b->rank, b->world, NULL, 0,
			      deadline);
	rc = dpl__bs_recv_verdict(fd, rc, &h, BS_REJECT, deadline);
	if (rc == DPL_ETIMEDOUT)
		return dpl_set_error(rc, "bootstrap: rank 0 did not complete the "
				  "rendezvous within %u ms (rank %u waited)",
				  b->timeout_ms, b->rank);
	if (rc == DPL_EPEER)
		return dpl_set_error(rc, "bootstrap: rank 0 closed the "
				  "connection during the rendezvous");
	if (rc != 0)
		return dpl_set_error(rc, "bootstrap: rendezvous with rank 0: %s",
				  strerror(errno));
	if (h.type == BS_REJECT) {
		int code = -(int)h.a;

		if (dpl__bs_recv_text(fd, h.len, msg, sizeof msg,
				      deadline) != 0)
			snprintf(msg, sizeof msg, "(no reason given)");
		return dpl_set_error(code < 0 ? code : DPL_EIO,
				  "%s (reported by rank 0)", msg);
	}
	if (h.type != BS_WELCOME || h.a != b->world || h.len != 0)
		return dpl_set_error(DPL_EIO, "bootstrap: rank 0 answered with "
				  "message type %u, not the welcome", h.type);
	return 0;
}

/* ---- open / close ---------------------------------------------------- */


int dpl_bootstrap_open(const struct dpl_bootstrap_params *p,
		       dpl_bootstrap **out)
{
	char envroot[BS_HOST_MAX + 16];
	dpl_bootstrap *b;
	const char *root;
	uint64_t deadline;
	uint32_t r;
	int rc;

	if (p == NULL || out == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s is NULL",
				  p == NULL ? "params" : "out");
	if (p->world_size == 0 || p->world_size > BS_WORLD_MAX)
		return dpl_set_error(DPL_EINVAL, "bootstrap: world size %u out of "
				  "range (1..%u)", p->world_size, BS_WORLD_MAX);
	if (p->rank >= p->world_size)
		return dpl_set_error(DPL_EINVAL, "bootstrap: rank %u out of range "
				  "for world size %u", p->rank, p->world_size);
	b = calloc(1, sizeof *b);
	if (b == NULL)
		return dpl_set_error(DPL_ENOMEM, "bootstrap: out of memory");
	b->dead = BS_NONE;
	root = p->root;
	if (root == NULL) {
		rc = dpl__bs_env_root(envroot, sizeof envroot);
		if (rc != 0)
			goto fail;
		root = envroot;
	}
	rc = dpl__bs_parse_root(root, b->host, &b->port, &b->v6);
	if (rc != 0)
		goto fail;
	if (b->port == 0 && p->rank != 0) {
		rc = dpl_set_error(DPL_EINVAL, "bootstrap: root address '%s' has "
				"port 0, which only rank 0 may use (rank %u "
				"cannot connect to it)", root, p->rank);
		goto fail;
	}
	b->rank = p->rank;
	b->world = p->world_size;
	b->timeout_ms = p->timeout_ms ? p->timeout_ms : BS_DEFAULT_TIMEOUT_MS;
	b->fd = malloc((size_t)b->world * sizeof *b->fd);
	if (b->fd == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "bootstrap: out of memory");
		goto fail;
	}
	for (r = 0; r < b->world; r++)
		b->fd[r] = -1;
	deadline = dpl__bs_now_ms() + b->timeout_ms;
	if (b->rank == 0)
		rc = root_rendezvous(b, deadline);
	else
		rc = join_root(b, deadline);
	if (rc != 0)
		goto fail;
	*out = b;
	return 0;
fail:
	dpl_bootstrap_close(b);
	return rc;
}

void dpl_bootstrap_close(dpl_bootstrap *b)
{
	uint32_t r;

	if (b == NULL)
		return;
	if (b->fd != NULL)
		for (r = 0; r < b->world; r++)
			dpl__bs_close_fd(&b->fd[r]);
	free(b->fd);
	free(b);
}

uint32_t dpl_bootstrap_rank(const dpl_bootstrap *b)
{
	return b->rank;
}

uint32_t dpl_bootstrap_world_size(const dpl_bootstrap *b)
{
	return b->world;
}

int dpl_bootstrap_root(const dpl_bootstrap *b, char *buf, size_t size)
{
	char tmp[BS_HOST_MAX + 16];
	int n;

	n = snprintf(tmp, sizeof tmp, "%s%s%s:%u", b->v6 ? "[" : "", b->host,
		     b->v6 ? "]" : "", b->port);
	if (buf == NULL || (size_t)n >= size)
		return dpl_set_error(DPL_ERANGE, "bootstrap: root address needs "
				  "%d bytes, buffer has %zu", n + 1,
				  buf == NULL ? (size_t)0 : size);
	memcpy(buf, tmp, (size_t)n + 1);
	return n;
}
