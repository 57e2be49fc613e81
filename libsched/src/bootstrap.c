/*
 * bootstrap.c - the out-of-band TCP rendezvous of a job (dpl/bootstrap.h).
 *
 * A star over plain POSIX sockets: rank 0 listens on the root address,
 * every other rank connects and introduces itself (HELLO), and rank 0
 * answers everyone (WELCOME) once all ranks are there. A collective is a
 * gather at rank 0 (DATA from every rank) followed by a broadcast of the
 * concatenation (RESULT). When rank 0 sees a failure (a rank that died, a
 * rank that did not take part, a malformed contribution) it tells every
 * other rank why (ABORT, or REJECT during the rendezvous), so that every
 * rank reports the same cause naming the same rank.
 *
 * Every socket is non-blocking and close-on-exec; every wait is a poll()
 * bounded by the deadline of the call (the timeout given at open), so no
 * call blocks longer than its timeout. Sends use MSG_NOSIGNAL: a dead
 * peer is an error (DPL_EPEER), never a SIGPIPE.
 *
 * Wire format: a 20-byte header of five big-endian 32-bit words
 * (magic, type, a, b, payload length) followed by the payload.
 *
 * After a failed collective the channel is out of step (contributions of
 * other ranks may still be in flight), so the handle keeps the failure and
 * every later collective returns it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <dpl/bootstrap.h>

#include "internal.h"

#define BS_MAGIC 0x44504c42u /* "DPLB" */
#define BS_HDR 20
#define BS_WORLD_MAX 65536u
#define BS_MSG_MAX 400   /* text of REJECT/ABORT */
#define BS_HOST_MAX 256
#define BS_RETRY_MS 20   /* between connection attempts to the root */
#define BS_HELLO_MS 1000 /* a connection must say HELLO within this */
#define BS_DEFAULT_TIMEOUT_MS 60000u
#define BS_NONE DPL_BOOTSTRAP_NO_RANK

enum bs_type {
	BS_HELLO = 1,   /* a = rank, b = world size */
	BS_WELCOME = 2, /* a = world size */
	BS_REJECT = 3,  /* a = -code, payload = message */
	BS_DATA = 4,    /* a = collective number, b = -code of a local
			   failure (0), payload = contribution */
	BS_RESULT = 5,  /* a = collective number, payload = all of them */
	BS_ABORT = 6    /* a = -code, b = collective number, payload =
			   the rank that died (4 bytes, BS_NONE when
			   none did), then the message */
};

struct bs_hdr {
	uint32_t magic, type, a, b, len;
};

struct dpl_bootstrap {
	uint32_t rank;
	uint32_t world;
	uint32_t timeout_ms;
	uint32_t seq;       /* collectives done */
	int *fd;            /* rank 0: fd[r] of rank r (fd[0] = -1);
			       others: fd[0] to rank 0 */
	char host[BS_HOST_MAX];
	unsigned port;      /* bound (rank 0) or connected to */
	bool v6;            /* host needs brackets when printed */
	int broken;         /* error of an earlier failed collective */
	uint32_t dead;      /* the rank whose death broke it, or BS_NONE */
	char broken_msg[512];
};

/* ---- time and small helpers ---------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int left_ms(uint64_t deadline)
{
	uint64_t n = now_ms();

	if (n >= deadline)
		return 0;
	return deadline - n > INT32_MAX ? INT32_MAX : (int)(deadline - n);
}

static void put32(unsigned char *p, uint32_t v)
{
	uint32_t n = htonl(v);

	memcpy(p, &n, 4);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t n;

	memcpy(&n, p, 4);
	return ntohl(n);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- bounded socket I/O ------------------------------------------- */

/*
 * Read exactly n bytes before the deadline. Returns 0, DPL_ETIMEDOUT,
 * DPL_EPEER (the other end closed or reset) or DPL_EIO (errno kept).
 */
static int read_full(int fd, void *buf, size_t n, uint64_t deadline)
{
	unsigned char *p = buf;

	while (n > 0) {
		struct pollfd pfd = {fd, POLLIN, 0};
		ssize_t k;
		int rc;

		rc = poll(&pfd, 1, left_ms(deadline));
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
		rc = poll(&pfd, 1, left_ms(deadline));
		if (rc < 0 && errno != EINTR)
			return DPL_EIO;
		if (rc == 0)
			return DPL_ETIMEDOUT;
	}
	return 0;
}

static int send_msg(int fd, uint32_t type, uint32_t a, uint32_t b,
		    const void *payload, uint32_t len, uint64_t deadline)
{
	unsigned char h[BS_HDR];
	int rc;

	put32(h, BS_MAGIC);
	put32(h + 4, type);
	put32(h + 8, a);
	put32(h + 12, b);
	put32(h + 16, len);
	rc = write_full(fd, h, sizeof h, deadline);
	if (rc == 0 && len > 0)
		rc = write_full(fd, payload, len, deadline);
	return rc;
}

/* Read a header; DPL_EIO for one that is not ours. */
static int recv_hdr(int fd, struct bs_hdr *h, uint64_t deadline)
{
	unsigned char b[BS_HDR];
	int rc;

	rc = read_full(fd, b, sizeof b, deadline);
	if (rc != 0)
		return rc;
	h->magic = get32(b);
	h->type = get32(b + 4);
	h->a = get32(b + 8);
	h->b = get32(b + 12);
	h->len = get32(b + 16);
	if (h->magic != BS_MAGIC) {
		errno = EPROTO;
		return DPL_EIO;
	}
	return 0;
}

/* Read a text payload (REJECT, ABORT) into msg, NUL-terminated. */
static int recv_text(int fd, uint32_t len, char *msg, size_t size,
		     uint64_t deadline)
{
	char tmp[BS_MSG_MAX + 1];
	int rc;

	if (len > BS_MSG_MAX) {
		errno = EPROTO;
		return DPL_EIO;
	}
	rc = read_full(fd, tmp, len, deadline);
	if (rc != 0)
		return rc;
	tmp[len] = '\0';
	snprintf(msg, size, "%s", tmp);
	return 0;
}

/* Whether the peer of a connected socket has closed it (non-blocking). */
static bool peer_gone(int fd)
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

/* ---- addresses ----------------------------------------------------- */

static int parse_port(const char *s, unsigned *port)
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
static int parse_root(const char *root, char *host, unsigned *port,
		      bool *v6)
{
	const char *colon, *hs, *he;
	size_t hl;

	if (root == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: root address is "
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
	if (parse_port(colon + 1, port) != 0)
		goto bad;
	memcpy(host, hs, hl);
	host[hl] = '\0';
	return 0;
bad:
	return dpl__error(DPL_EINVAL, "bootstrap: root address '%s' is not "
			  "\"host:port\" (\"[v6addr]:port\" for IPv6, port "
			  "0..65535)", root);
}

static int resolve(const char *host, unsigned port, struct addrinfo **out)
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
		return dpl__error(DPL_EINVAL, "bootstrap: cannot resolve root "
				  "host '%s': %s", host, gai_strerror(rc));
	return 0;
}

static void tune(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- rendezvous at rank 0 ----------------------------------------- */

static int listen_root(dpl_bootstrap *b, int *lfd_out)
{
	struct addrinfo *ai, *a;
	int lfd = -1, err = 0, one = 1, rc;

	rc = resolve(b->host, b->port, &ai);
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
		close_fd(&lfd);
	}
	freeaddrinfo(ai);
	if (lfd < 0) {
		errno = err;
		return dpl__error(err == EADDRINUSE ? DPL_EBUSY : DPL_EIO,
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
static void list_missing(const dpl_bootstrap *b, const bool *have,
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

static uint32_t count_missing(const dpl_bootstrap *b, const bool *have)
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
	uint64_t deadline = now_ms() + 200;
	uint32_t r;

	for (r = 1; r < b->world; r++)
		if (b->fd[r] >= 0)
			send_msg(b->fd[r], BS_REJECT, (uint32_t)-code, 0, msg,
				 len, deadline);
}

/*
 * A new connection said HELLO (or not). Returns 0 when it joined,
 * > 0 when it was turned away (the rendezvous goes on), or a negative
 * code that fails the rendezvous.
 */
static int admit(dpl_bootstrap *b, int fd, uint64_t deadline)
{
	uint64_t hello_deadline = now_ms() + BS_HELLO_MS;
	struct bs_hdr h;
	char msg[BS_MSG_MAX];
	int rc;

	if (hello_deadline > deadline)
		hello_deadline = deadline;
	rc = recv_hdr(fd, &h, hello_deadline);
	if (rc != 0 || h.type != BS_HELLO || h.len != 0) {
		close(fd);
		return 1; /* not one of ours, or too slow: ignore */
	}
	if (h.b != b->world) {
		snprintf(msg, sizeof msg, "bootstrap: rank %u says the world "
			 "has %u ranks, rank 0 says %u", h.a, h.b, b->world);
		send_msg(fd, BS_REJECT, (uint32_t)-DPL_EINVAL, 0, msg,
			 (uint32_t)strlen(msg), now_ms() + 200);
		close(fd);
		return dpl__error(DPL_EINVAL, "%s", msg);
	}
	if (h.a == 0 || h.a >= b->world || b->fd[h.a] >= 0) {
		bool range = h.a == 0 || h.a >= b->world;

		snprintf(msg, sizeof msg, "bootstrap: rank %u %s", h.a,
			 range ? "is out of range"
			       : "arrived twice; the second one is turned "
				 "away");
		send_msg(fd, BS_REJECT,
			 (uint32_t)-(range ? DPL_EINVAL : DPL_EBUSY), 0, msg,
			 (uint32_t)strlen(msg), now_ms() + 200);
		close(fd);
		return 1;
	}
	tune(fd);
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
		rc = dpl__error(DPL_ENOMEM, "bootstrap: out of memory");
		goto out;
	}
	have[0] = true;
	while (count_missing(b, have) > 0) {
		nfds_t n = 0;
		int k;

		/* The listener, and every rank that arrived: one of those
		 * dying during the rendezvous fails it at once. */
		pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
		for (r = 1; r < b->world; r++)
			if (have[r])
				pfd[n++] = (struct pollfd){b->fd[r], POLLIN, 0};
		k = poll(pfd, n, left_ms(deadline));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = dpl__error(DPL_EIO, "bootstrap: poll: %s",
					strerror(errno));
			goto fail;
		}
		if (k == 0) {
			list_missing(b, have, list, sizeof list);
			rc = dpl__error(DPL_ETIMEDOUT, "bootstrap: rank%s %s "
					"never arrived at %s%s%s:%u within %u "
					"ms", count_missing(b, have) > 1 ? "s"
								     : "",
					list, b->v6 ? "[" : "", b->host,
					b->v6 ? "]" : "", b->port,
					b->timeout_ms);
			goto fail;
		}
		for (r = 1; r < b->world; r++)
			if (have[r] && peer_gone(b->fd[r])) {
				close_fd(&b->fd[r]);
				rc = dpl__error(DPL_EPEER, "bootstrap: rank %u "
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
		rc = send_msg(b->fd[r], BS_WELCOME, b->world, 0, NULL, 0,
			      deadline);
		if (rc != 0) {
			rc = dpl__error(rc == DPL_ETIMEDOUT ? rc : DPL_EPEER,
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
	close_fd(&lfd);
	free(pfd);
	free(have);
	return rc;
}

/* ---- rendezvous at other ranks ------------------------------------ */

/*
 * After sending to rank 0 (send_rc): read its answer. When the send
 * failed because rank 0 already closed the connection, its reason (a
 * message of type `why`) may still be waiting in the socket: read it
 * briefly, so that every rank reports the cause rank 0 saw.
 */
static int recv_verdict(int fd, int send_rc, struct bs_hdr *h, uint32_t why,
			uint64_t deadline)
{
	uint64_t brief = now_ms() + 100;
	int rc;

	if (send_rc == 0)
		return recv_hdr(fd, h, deadline);
	if (send_rc != DPL_EPEER)
		return send_rc;
	rc = recv_hdr(fd, h, brief < deadline ? brief : deadline);
	return rc == 0 && h->type == why ? 0 : send_rc;
}

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
	while (poll(&pfd, 1, left_ms(deadline)) < 0)
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

	rc = resolve(b->host, b->port, &ai);
	if (rc != 0)
		return rc;
	while (fd < 0) {
		for (a = ai; a != NULL && fd < 0; a = a->ai_next) {
			fd = try_connect(a, deadline);
			if (fd < 0)
				err = errno;
		}
		if (fd >= 0 || left_ms(deadline) == 0)
			break;
		sleep_ms(left_ms(deadline) < BS_RETRY_MS ? left_ms(deadline)
							 : BS_RETRY_MS);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return dpl__error(DPL_ETIMEDOUT, "bootstrap: root %s%s%s:%u "
				  "(rank 0) did not answer rank %u within %u "
				  "ms (last error: %s)", b->v6 ? "[" : "",
				  b->host, b->v6 ? "]" : "", b->port, b->rank,
				  b->timeout_ms, strerror(err));
	tune(fd);
	b->fd[0] = fd;
	rc = send_msg(fd, BS_HELLO, b->rank, b->world, NULL, 0, deadline);
	rc = recv_verdict(fd, rc, &h, BS_REJECT, deadline);
	if (rc == DPL_ETIMEDOUT)
		return dpl__error(rc, "bootstrap: rank 0 did not complete the "
				  "rendezvous within %u ms (rank %u waited)",
				  b->timeout_ms, b->rank);
	if (rc == DPL_EPEER)
		return dpl__error(rc, "bootstrap: rank 0 closed the "
				  "connection during the rendezvous");
	if (rc != 0)
		return dpl__error(rc, "bootstrap: rendezvous with rank 0: %s",
				  strerror(errno));
	if (h.type == BS_REJECT) {
		int code = -(int)h.a;

		if (recv_text(fd, h.len, msg, sizeof msg, deadline) != 0)
			snprintf(msg, sizeof msg, "(no reason given)");
		return dpl__error(code < 0 ? code : DPL_EIO,
				  "%s (reported by rank 0)", msg);
	}
	if (h.type != BS_WELCOME || h.a != b->world || h.len != 0)
		return dpl__error(DPL_EIO, "bootstrap: rank 0 answered with "
				  "message type %u, not the welcome", h.type);
	return 0;
}

/* ---- open / close ---------------------------------------------------- */

static int env_root(char *buf, size_t size);

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
		return dpl__error(DPL_EINVAL, "bootstrap: %s is NULL",
				  p == NULL ? "params" : "out");
	if (p->world_size == 0 || p->world_size > BS_WORLD_MAX)
		return dpl__error(DPL_EINVAL, "bootstrap: world size %u out of "
				  "range (1..%u)", p->world_size, BS_WORLD_MAX);
	if (p->rank >= p->world_size)
		return dpl__error(DPL_EINVAL, "bootstrap: rank %u out of range "
				  "for world size %u", p->rank, p->world_size);
	b = calloc(1, sizeof *b);
	if (b == NULL)
		return dpl__error(DPL_ENOMEM, "bootstrap: out of memory");
	b->dead = BS_NONE;
	root = p->root;
	if (root == NULL) {
		rc = env_root(envroot, sizeof envroot);
		if (rc != 0)
			goto fail;
		root = envroot;
	}
	rc = parse_root(root, b->host, &b->port, &b->v6);
	if (rc != 0)
		goto fail;
	if (b->port == 0 && p->rank != 0) {
		rc = dpl__error(DPL_EINVAL, "bootstrap: root address '%s' has "
				"port 0, which only rank 0 may use (rank %u "
				"cannot connect to it)", root, p->rank);
		goto fail;
	}
	b->rank = p->rank;
	b->world = p->world_size;
	b->timeout_ms = p->timeout_ms ? p->timeout_ms : BS_DEFAULT_TIMEOUT_MS;
	b->fd = malloc((size_t)b->world * sizeof *b->fd);
	if (b->fd == NULL) {
		rc = dpl__error(DPL_ENOMEM, "bootstrap: out of memory");
		goto fail;
	}
	for (r = 0; r < b->world; r++)
		b->fd[r] = -1;
	deadline = now_ms() + b->timeout_ms;
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
			close_fd(&b->fd[r]);
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
		return dpl__error(DPL_ERANGE, "bootstrap: root address needs "
				  "%d bytes, buffer has %zu", n + 1,
				  buf == NULL ? (size_t)0 : size);
	memcpy(buf, tmp, (size_t)n + 1);
	return n;
}

/* ---- environment ----------------------------------------------------- */

/* Strict decimal uint32: digits only, no sign, no blanks. */
static int parse_u32(const char *s, uint32_t *v)
{
	uint64_t x = 0;

	if (s == NULL || *s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		x = x * 10 + (uint64_t)(*s - '0');
		if (x > UINT32_MAX)
			return -1;
	}
	*v = (uint32_t)x;
	return 0;
}

/* Read `dpl` or else `torch`; names the one it used in *name. */
static const char *env2(const char *dpl, const char *torch,
			const char **name)
{
	const char *v = getenv(dpl);

	*name = dpl;
	if (v == NULL) {
		v = getenv(torch);
		*name = torch;
	}
	return v;
}

/*
 * The root address from the environment: DPL_ROOT, else MASTER_ADDR and
 * MASTER_PORT + 1 (torchrun's agent or torch.distributed's store already
 * listens on MASTER_PORT itself).
 */
static int env_root(char *buf, size_t size)
{
	const char *v = getenv("DPL_ROOT"), *addr, *port;
	unsigned pn;

	if (v != NULL) {
		if ((size_t)snprintf(buf, size, "%s", v) >= size)
			return dpl__error(DPL_EINVAL, "bootstrap: DPL_ROOT is "
					  "longer than %zu bytes", size - 1);
		return 0;
	}
	addr = getenv("MASTER_ADDR");
	port = getenv("MASTER_PORT");
	if (addr == NULL && port == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: neither DPL_ROOT nor "
				  "MASTER_ADDR/MASTER_PORT is set");
	if (addr == NULL || *addr == '\0')
		return dpl__error(DPL_EINVAL, "bootstrap: MASTER_PORT is set "
				  "but MASTER_ADDR is %s",
				  addr == NULL ? "not" : "empty");
	if (port == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: MASTER_ADDR is set "
				  "but MASTER_PORT is not");
	if (parse_port(port, &pn) != 0 || pn == 0 || pn >= 65535)
		return dpl__error(DPL_EINVAL, "bootstrap: MASTER_PORT='%s' is "
				  "not a port in 1..65534 (dpl listens on "
				  "MASTER_PORT + 1)", port);
	if ((size_t)snprintf(buf, size, strchr(addr, ':') ? "[%s]:%u"
			     : "%s:%u", addr, pn + 1) >= size)
		return dpl__error(DPL_EINVAL, "bootstrap: MASTER_ADDR is "
				  "longer than %zu bytes", size - 16);
	return 0;
}

int dpl_bootstrap_open_env(uint32_t timeout_ms, dpl_bootstrap **out)
{
	struct dpl_bootstrap_params p;
	const char *rs, *ws, *rn, *wn;
	char root[BS_HOST_MAX + 16];
	int rc;

	rs = env2("DPL_RANK", "RANK", &rn);
	ws = env2("DPL_WORLD_SIZE", "WORLD_SIZE", &wn);
	if (rs == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: neither DPL_RANK nor "
				  "RANK is set");
	if (ws == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: neither "
				  "DPL_WORLD_SIZE nor WORLD_SIZE is set");
	memset(&p, 0, sizeof p);
	if (parse_u32(rs, &p.rank) != 0)
		return dpl__error(DPL_EINVAL, "bootstrap: %s='%s' is not a "
				  "rank (a decimal integer)", rn, rs);
	if (parse_u32(ws, &p.world_size) != 0 || p.world_size == 0 ||
	    p.world_size > BS_WORLD_MAX)
		return dpl__error(DPL_EINVAL, "bootstrap: %s='%s' is not a "
				  "world size (1..%u)", wn, ws, BS_WORLD_MAX);
	if (p.rank >= p.world_size)
		return dpl__error(DPL_EINVAL, "bootstrap: %s=%u is not below "
				  "%s=%u", rn, p.rank, wn, p.world_size);
	rc = env_root(root, sizeof root);
	if (rc != 0)
		return rc;
	p.root = root;
	p.timeout_ms = timeout_ms;
	return dpl_bootstrap_open(&p, out);
}

/* ---- collectives ------------------------------------------------------ */

/* Record a collective's failure on the handle and return it. */
static int broke(dpl_bootstrap *b, int code)
{
	b->broken = code;
	snprintf(b->broken_msg, sizeof b->broken_msg, "%s", dpl_last_error());
	return code;
}

/* Rank 0: tell the others that collective `seq` failed, and why. */
static void abort_all(dpl_bootstrap *b, int code, uint32_t seq)
{
	const char *msg = dpl_last_error();
	uint32_t len = (uint32_t)strnlen(msg, BS_MSG_MAX);
	uint64_t deadline = now_ms() + 200;
	unsigned char out[4 + BS_MSG_MAX];
	uint32_t r;

	put32(out, b->dead);
	memcpy(out + 4, msg, len);
	for (r = 1; r < b->world; r++)
		if (b->fd[r] >= 0)
			send_msg(b->fd[r], BS_ABORT, (uint32_t)-code, seq, out,
				 4 + len, deadline);
}

static int root_gather(dpl_bootstrap *b, const void *mine, size_t len,
		       unsigned char *all, uint32_t seq, int local_rc)
{
	uint64_t deadline = now_ms() + b->timeout_ms;
	struct pollfd *pfd = NULL;
	uint32_t *who = NULL;
	bool *have = NULL;
	char list[160];
	uint32_t r;
	int rc = 0;

	pfd = calloc(b->world, sizeof *pfd);
	who = calloc(b->world, sizeof *who);
	have = calloc(b->world, sizeof *have);
	if (pfd == NULL || who == NULL || have == NULL) {
		rc = dpl__error(DPL_ENOMEM, "bootstrap: out of memory");
		goto fail;
	}
	if (local_rc != 0) {
		rc = local_rc;
		goto fail;
	}
	if (len > 0)
		memcpy(all, mine, len);
	have[0] = true;
	while (count_missing(b, have) > 0) {
		nfds_t n = 0, i;
		int k;

		for (r = 1; r < b->world; r++)
			if (!have[r]) {
				who[n] = r;
				pfd[n++] = (struct pollfd){b->fd[r], POLLIN, 0};
			}
		k = poll(pfd, n, left_ms(deadline));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = dpl__error(DPL_EIO, "bootstrap: poll: %s",
					strerror(errno));
			goto fail;
		}
		if (k == 0) {
			list_missing(b, have, list, sizeof list);
			rc = dpl__error(DPL_ETIMEDOUT, "bootstrap: rank%s %s "
					"did not take part in collective %u "
					"within %u ms",
					count_missing(b, have) > 1 ? "s" : "",
					list, seq, b->timeout_ms);
			goto fail;
		}
		for (i = 0; i < n; i++) {
			struct bs_hdr h;

			if (pfd[i].revents == 0)
				continue;
			r = who[i];
			rc = recv_hdr(b->fd[r], &h, deadline);
			if (rc == 0 && (h.type != BS_DATA || h.a != seq))
				rc = DPL_EIO;
			if (rc == DPL_EPEER) {
				close_fd(&b->fd[r]);
				b->dead = r;
				rc = dpl__error(rc, "bootstrap: rank %u died "
						"(closed its connection) in "
						"collective %u", r, seq);
				goto fail;
			}
			if (rc != 0) {
				rc = dpl__error(rc, "bootstrap: rank %u: "
						"protocol error in collective "
						"%u", r, seq);
				goto fail;
			}
			if (h.b != 0) {
				rc = dpl__error(-(int)h.b, "bootstrap: rank %u "
						"failed in collective %u: %s",
						r, seq,
						dpl_strerror(-(int)h.b));
				goto fail;
			}
			if (h.len != len) {
				rc = dpl__error(DPL_EINVAL, "bootstrap: "
						"rank %u contributed %u bytes "
						"to collective %u, rank 0 %zu",
						r, h.len, seq, len);
				goto fail;
			}
			rc = read_full(b->fd[r], all + (size_t)r * len, len,
				       deadline);
			if (rc != 0) {
				if (rc == DPL_EPEER)
					b->dead = r;
				rc = dpl__error(rc == DPL_EPEER ? rc : DPL_EIO,
						"bootstrap: rank %u %s in "
						"collective %u", r,
						rc == DPL_EPEER ? "died"
								: "stalled",
						seq);
				goto fail;
			}
			have[r] = true;
		}
	}
	for (r = 1; r < b->world; r++) {
		rc = send_msg(b->fd[r], BS_RESULT, seq, 0, all,
			      (uint32_t)(len * b->world), deadline);
		if (rc != 0) {
			if (rc != DPL_ETIMEDOUT)
				b->dead = r;
			rc = dpl__error(rc == DPL_ETIMEDOUT ? rc : DPL_EPEER,
					"bootstrap: rank %u %s in collective "
					"%u", r, rc == DPL_ETIMEDOUT
					? "did not take the result"
					: "died", seq);
			goto fail;
		}
	}
	free(pfd);
	free(who);
	free(have);
	return 0;
fail:
	abort_all(b, rc, seq);
	free(pfd);
	free(who);
	free(have);
	return broke(b, rc);
}

static int leaf_gather(dpl_bootstrap *b, const void *mine, size_t len,
		       void *all, uint32_t seq, int local_rc)
{
	uint64_t deadline = now_ms() + b->timeout_ms;
	char msg[BS_MSG_MAX + 1];
	struct bs_hdr h;
	int rc;

	rc = send_msg(b->fd[0], BS_DATA, seq, (uint32_t)-local_rc,
		      local_rc ? NULL : mine,
		      local_rc ? 0 : (uint32_t)len, deadline);
	if (local_rc != 0)
		return broke(b, local_rc);
	rc = recv_verdict(b->fd[0], rc, &h, BS_ABORT, deadline);
	if (rc == DPL_ETIMEDOUT)
		return broke(b, dpl__error(rc, "bootstrap: rank 0 did not "
					   "complete collective %u within %u "
					   "ms (rank %u waited)", seq,
					   b->timeout_ms, b->rank));
	if (rc == DPL_EPEER) {
		b->dead = 0;
		return broke(b, dpl__error(rc, "bootstrap: rank 0 died "
					   "(closed its connection) in "
					   "collective %u", seq));
	}
	if (rc != 0)
		return broke(b, dpl__error(rc, "bootstrap: collective %u with "
					   "rank 0: %s", seq, strerror(errno)));
	if (h.type == BS_ABORT) {
		int code = -(int)h.a;
		unsigned char dead[4];

		if (h.len < 4 ||
		    read_full(b->fd[0], dead, sizeof dead, deadline) != 0 ||
		    recv_text(b->fd[0], h.len - 4, msg, sizeof msg,
			      deadline) != 0)
			snprintf(msg, sizeof msg, "(no reason given)");
		else if (code == DPL_EPEER && get32(dead) < b->world)
			b->dead = get32(dead);
		return broke(b, dpl__error(code < 0 ? code : DPL_EIO,
					   "%s (reported by rank 0)", msg));
	}
	if (h.type != BS_RESULT || h.a != seq ||
	    h.len != (uint64_t)len * b->world)
		return broke(b, dpl__error(DPL_EIO, "bootstrap: rank 0 answered"
					   " collective %u with message type "
					   "%u of %u bytes", seq, h.type,
					   h.len));
	rc = read_full(b->fd[0], all, h.len, deadline);
	if (rc == DPL_EPEER)
		b->dead = 0;
	if (rc != 0)
		return broke(b, dpl__error(rc, "bootstrap: rank 0 %s in "
					   "collective %u",
					   rc == DPL_EPEER ? "died" : "stalled",
					   seq));
	return 0;
}

int dpl_bootstrap_allgather(dpl_bootstrap *b, const void *mine, size_t len,
			    void *all)
{
	int local_rc = 0;
	uint32_t seq;

	if (b == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: handle is NULL");
	if (b->broken != 0)
		return dpl__error(b->broken, "%s (an earlier collective "
				  "failed)", b->broken_msg);
	if (len > DPL_BOOTSTRAP_BLOB_MAX)
		local_rc = dpl__error(DPL_EINVAL, "bootstrap: rank %u "
				      "contributes %zu bytes, more than %d",
				      b->rank, len, DPL_BOOTSTRAP_BLOB_MAX);
	else if (len > 0 && (mine == NULL || all == NULL))
		local_rc = dpl__error(DPL_EINVAL, "bootstrap: rank %u passed "
				      "%s NULL for %zu bytes", b->rank,
				      mine == NULL ? "mine" : "all", len);
	seq = ++b->seq;
	if (b->world == 1) {
		if (local_rc != 0)
			return local_rc;
		if (len > 0)
			memmove(all, mine, len);
		return 0;
	}
	if (b->rank == 0)
		return root_gather(b, mine, len, all, seq, local_rc);
	return leaf_gather(b, mine, len, all, seq, local_rc);
}

int dpl_bootstrap_barrier(dpl_bootstrap *b)
{
	return dpl_bootstrap_allgather(b, NULL, 0, NULL);
}

int dpl_bootstrap_check(dpl_bootstrap *b, uint32_t *dead_rank)
{
	uint32_t r;

	if (dead_rank != NULL)
		*dead_rank = DPL_BOOTSTRAP_NO_RANK;
	if (b == NULL)
		return dpl__error(DPL_EINVAL, "bootstrap: handle is NULL");
	if (b->broken == DPL_EPEER) {
		if (dead_rank != NULL && b->dead != BS_NONE)
			*dead_rank = b->dead;
		return dpl__error(DPL_EPEER, "%s", b->broken_msg);
	}
	for (r = 0; r < b->world; r++) {
		if (r == b->rank || (b->rank != 0 && r != 0))
			continue;
		if (b->fd[r] < 0 || peer_gone(b->fd[r])) {
			if (dead_rank != NULL)
				*dead_rank = r;
			return dpl__error(DPL_EPEER, "bootstrap: rank %u "
					  "closed its connection (died or "
					  "left)", r);
		}
	}
	return 0;
}
