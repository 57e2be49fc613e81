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
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

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
	struct addrinfo *ai;
	int lfd = -1, err = 0, rc;

	if (b->lfd >= 0) {
		/* Bound by the launcher before it started the ranks, so no
		 * other process can take the port in between. */
		lfd = b->lfd;
		b->lfd = -1;
		goto bound;
	}
	rc = dpl__bs_resolve(b->host, b->port, &ai);
	if (rc != 0)
		return rc;
	/* Held by this process since it chose the port
	 * (dpl_bootstrap_hold_root): the same guarantee. */
	lfd = b->port != 0 ? dpl__bs_take_held(ai) : -1;
	if (lfd < 0)
		lfd = dpl__bs_listen(ai, (int)(b->world < 1024 ? b->world
						: 1024), &err);
	freeaddrinfo(ai);
	if (lfd < 0) {
		errno = err;
		return dpl_set_error(err == EADDRINUSE ? DPL_EBUSY : DPL_EIO,
				  "bootstrap: rank 0 cannot listen on "
				  "%s%s%s:%u: %s", b->v6 ? "[" : "", b->host,
				  b->v6 ? "]" : "", b->port, strerror(err));
	}
bound:
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

/* Say no to a connection (REJECT with msg) and close it. */
static void turn_away(struct bs_conn *c, int code, const char *msg)
{
	dpl__bs_send_msg(c->fd, BS_REJECT, (uint32_t)-code, 0, msg,
			 (uint32_t)strnlen(msg, BS_MSG_MAX),
			 dpl__bs_now_ms() + 200);
	dpl__bs_close_fd(&c->fd);
}

/*
 * An authenticated connection: admit it, or turn it away. Returns 0
 * (the rendezvous goes on) or a negative code that fails it.
 */
static int admit(dpl_bootstrap *b, struct bs_conn *c)
{
	char msg[BS_MSG_MAX];
	uint32_t r = c->rank;
	bool range = r == 0 || r >= b->world;

	if (c->world != b->world) {
		snprintf(msg, sizeof msg, "bootstrap: rank %u says the world "
			 "has %u ranks, rank 0 says %u", r, c->world, b->world);
		turn_away(c, DPL_EINVAL, msg);
		return dpl_set_error(DPL_EINVAL, "%s", msg);
	}
	if (range || b->fd[r] >= 0) {
		snprintf(msg, sizeof msg, "bootstrap: rank %u %s", r,
			 range ? "is out of range"
			       : "arrived twice; the second one is turned "
				 "away");
		dpl__bs_refused(b, c, msg);
		turn_away(c, range ? DPL_EINVAL : DPL_EBUSY, msg);
		return 0;
	}
	dpl__bs_tune(c->fd);
	b->fd[r] = c->fd;
	c->fd = -1;
	return 0;
}

/*
 * Rank r, admitted, spoke or closed before the welcome: it gave up
 * (LEAVE: its timeout passed first) or it died. Returns the error.
 */
static int lost_rank(dpl_bootstrap *b, uint32_t r, bool *have)
{
	char msg[BS_MSG_MAX + 1], tail[BS_MSG_MAX + 64];
	struct bs_hdr h;
	int rc;

	rc = dpl__bs_recv_hdr(b->fd[r], &h, dpl__bs_now_ms() + 100);
	if (rc == DPL_EPEER) {
		dpl__bs_close_fd(&b->fd[r]);
		return dpl_set_error(DPL_EPEER, "bootstrap: rank %u died during "
				  "the rendezvous", r);
	}
	if (rc == 0 && h.type == BS_LEAVE &&
	    dpl__bs_recv_text(b->fd[r], h.len, msg, sizeof msg,
			      dpl__bs_now_ms() + 100) == 0) {
		if (dpl__bs_code(h.a) == DPL_ETIMEDOUT)
			snprintf(tail, sizeof tail, " (rank %u stopped waiting "
				 "first: its timeout passed)", r);
		else
			snprintf(tail, sizeof tail, " (rank %u stopped waiting "
				 "first: %s)", r, msg);
		if (dpl__bs_count_missing(b, have) == 0)
			return dpl_set_error(DPL_ETIMEDOUT, "bootstrap:%s", tail);
		return dpl__bs_missing_error(b, have, DPL_ETIMEDOUT, tail);
	}
	return dpl_set_error(DPL_EIO, "bootstrap: rank %u broke the "
			  "rendezvous protocol (message type %u before the "
			  "welcome)", r, rc == 0 ? h.type : 0);
}

/* Drop pending connection i (closing it), keeping the others. */
static void drop_conn(struct bs_conn *conn, unsigned *n, unsigned i)
{
	dpl__bs_close_fd(&conn[i].fd);
	conn[i] = conn[--*n];
}

/* Warn once per process that a job without a secret admits anyone. */
static void warn_no_secret(const dpl_bootstrap *b)
{
	static atomic_int warned;

	if (b->keylen > 0 || b->world < 2 || atomic_exchange(&warned, 1))
		return;
	fprintf(stderr, "dpl bootstrap: warning: DPL_JOB_SECRET is not set; "
		"the rendezvous at %s%s%s:%u admits any process that can "
		"reach it (dpl train --nprocs and python -m dpl.run set "
		"one)\n", b->v6 ? "[" : "", b->host, b->v6 ? "]" : "",
		b->port);
}

/* Take new connections into free handshake slots (the oldest handshake
 * makes room when all are taken). */
static void take_new(dpl_bootstrap *b, int lfd, struct bs_conn *conn,
		     unsigned *n)
{
	unsigned k, i, old;

	for (k = 0; k < BS_PENDING_MAX; k++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return; /* EAGAIN, ECONNABORTED, EMFILE */
		if (*n == BS_PENDING_MAX) {
			for (old = 0, i = 1; i < *n; i++)
				if (conn[i].deadline < conn[old].deadline)
					old = i;
			dpl__bs_refused(b, &conn[old], "too many connections "
					"in their handshake at once; the "
					"oldest makes room");
			drop_conn(conn, n, old);
		}
		dpl__bs_conn_start(&conn[(*n)++], fd,
				   dpl__bs_now_ms() + BS_HANDSHAKE_MS);
	}
}

/* Move every pending handshake on; admit those that proved the secret.
 * pfd[i] is conn[i]'s. Returns 0 or the code that fails the rendezvous. */
static int step_conns(dpl_bootstrap *b, struct bs_conn *conn, unsigned *n,
		      const struct pollfd *pfd, bool *have)
{
	uint64_t now = dpl__bs_now_ms();
	char why[BS_MSG_MAX];
	unsigned i;
	uint32_t r;
	int st, rc;

	for (i = *n; i-- > 0;) {
		if (pfd[i].revents != 0) {
			st = dpl__bs_conn_step(b, &conn[i], why, sizeof why);
		} else if (now >= conn[i].deadline) {
			st = BS_STEP_REFUSE;
			conn[i].note = BS_NOTE_SILENT;
			snprintf(why, sizeof why, "%s within %u ms",
				 conn[i].state == BS_C_HELLO
					 ? "said no HELLO"
					 : "did not answer the challenge",
				 BS_HANDSHAKE_MS);
		} else {
			continue;
		}
		if (st == BS_STEP_MORE)
			continue;
		if (st == BS_STEP_REFUSE) {
			dpl__bs_refused(b, &conn[i], why);
		} else {
			rc = admit(b, &conn[i]);
			if (rc < 0)
				return rc;
			for (r = 1; r < b->world; r++)
				have[r] = b->fd[r] >= 0;
		}
		drop_conn(conn, n, i);
	}
	return 0;
}

static int root_rendezvous(dpl_bootstrap *b, uint64_t deadline)
{
	struct pollfd *pfd;
	struct bs_conn *conn;
	bool *have;
	unsigned nconn = 0, i;
	int lfd = -1, rc = 0;
	uint32_t r;

	rc = listen_root(b, &lfd);
	if (rc != 0)
		return rc;
	warn_no_secret(b);
	pfd = calloc(b->world + BS_PENDING_MAX, sizeof *pfd);
	have = calloc(b->world, sizeof *have);
	conn = calloc(BS_PENDING_MAX, sizeof *conn);
	b->note = calloc(b->world, 1);
	b->logged = 0;
	if (pfd == NULL || have == NULL || conn == NULL || b->note == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "bootstrap: out of memory");
		goto out;
	}
	have[0] = true;
	while (dpl__bs_count_missing(b, have) > 0) {
		uint64_t wake = deadline;
		nfds_t n = 0, base;
		int k;

		/* The listener, every rank that arrived (one of those dying
		 * or leaving fails the rendezvous at once) and every
		 * connection in its handshake. */
		pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
		for (r = 1; r < b->world; r++)
			if (have[r])
				pfd[n++] = (struct pollfd){b->fd[r], POLLIN, 0};
		base = n;
		for (i = 0; i < nconn; i++) {
			pfd[n++] = (struct pollfd){conn[i].fd, POLLIN, 0};
			if (conn[i].deadline < wake)
				wake = conn[i].deadline;
		}
		k = poll(pfd, n, dpl__bs_left_ms(wake));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = dpl_set_error(DPL_EIO, "bootstrap: poll: %s",
					strerror(errno));
			goto fail;
		}
		if (dpl__bs_left_ms(deadline) == 0) {
			rc = dpl__bs_missing_error(b, have, DPL_ETIMEDOUT, "");
			goto fail;
		}
		for (n = 1, r = 1; r < b->world; r++) {
			if (!have[r])
				continue;
			if (pfd[n++].revents != 0) {
				rc = lost_rank(b, r, have);
				goto fail;
			}
		}
		rc = step_conns(b, conn, &nconn, pfd + base, have);
		if (rc != 0)
			goto fail;
		if (pfd[0].revents & POLLIN)
			take_new(b, lfd, conn, &nconn);
	}
	for (i = 0; i < nconn; i++)
		dpl__bs_refused(b, &conn[i], "the rendezvous completed before "
				"its handshake");
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
	/* A rank still in its handshake learns the cause too (what a
	 * stranger learns from it: which rank failed). */
	for (i = 0; i < nconn; i++)
		turn_away(&conn[i], rc, dpl_last_error());
out:
	while (nconn > 0)
		drop_conn(conn, &nconn, nconn - 1);
	dpl__bs_close_fd(&lfd);
	free(pfd);
	free(have);
	free(conn);
	free(b->note);
	b->note = NULL;
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
	int fd = -1, err = 0, rc = 1;

	rc = dpl__bs_resolve(b->host, b->port, &ai);
	if (rc != 0)
		return rc;
	/* Connect until rank 0 takes the connection and challenges it;
	 * one it closes before that (a full handshake queue) is retried. */
	for (rc = 1; rc == 1;) {
		for (a = ai; a != NULL && fd < 0; a = a->ai_next) {
			fd = try_connect(a, deadline);
			if (fd < 0)
				err = errno;
		}
		if (fd >= 0) {
			dpl__bs_tune(fd);
			rc = dpl__bs_join_handshake(b, fd, deadline);
			if (rc != 1)
				break;
			dpl__bs_close_fd(&fd);
			err = ECONNRESET;
		}
		if (dpl__bs_left_ms(deadline) == 0)
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
	b->fd[0] = fd;
	return rc;
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
	b->lfd = -1;
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
	if (p->root == NULL && p->rank == 0) {
		rc = dpl__bs_env_listener(b->port, &b->lfd);
		if (rc != 0)
			goto fail;
	}
	b->rank = p->rank;
	b->world = p->world_size;
	b->timeout_ms = p->timeout_ms ? p->timeout_ms : BS_DEFAULT_TIMEOUT_MS;
	rc = dpl__bs_load_secret(b);
	if (rc != 0)
		goto fail;
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
	dpl__bs_close_fd(&b->lfd);
	OPENSSL_cleanse(b->key, sizeof b->key);
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
