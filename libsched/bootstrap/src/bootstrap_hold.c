/*
 * bootstrap_hold.c - roots held for a later rendezvous
 * (dpl_bootstrap_hold_root(), dpl_bootstrap_release_root()): a listening
 * socket bound now, on a port the kernel picks, kept in this process
 * until rank 0's dpl_bootstrap_open() at that root takes it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "bootstrap_internal.h"

/* At most this many roots held at once by one process. */
#define HOLD_MAX 64

struct held {
	int fd;
	struct sockaddr_storage sa; /* what it is bound to */
};

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct held holds[HOLD_MAX];
static unsigned nheld; /* slots in use: holds[0..nheld) are taken */

/* Whether two socket addresses are the same family, address and port. */
static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a;
		const struct sockaddr_in *y = (const void *)b;

		return x->sin_port == y->sin_port &&
		       x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a;
		const struct sockaddr_in6 *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       x->sin6_scope_id == y->sin6_scope_id &&
		       memcmp(&x->sin6_addr, &y->sin6_addr,
			      sizeof x->sin6_addr) == 0;
	}
	return false;
}

/* Remove and return the socket held at addr, or -1; the caller locks. */
static int unhold(const struct sockaddr *addr)
{
	unsigned i;
	int fd;

	for (i = 0; i < nheld; i++) {
		if (!same_addr((const struct sockaddr *)&holds[i].sa, addr))
			continue;
		fd = holds[i].fd;
		holds[i] = holds[--nheld];
		return fd;
	}
	return -1;
}

int dpl__bs_take_held(const struct addrinfo *ai)
{
	int fd = -1;

	pthread_mutex_lock(&hold_lock);
	for (; ai != NULL && fd < 0; ai = ai->ai_next)
		fd = unhold(ai->ai_addr);
	pthread_mutex_unlock(&hold_lock);
	return fd;
}

/* A listening socket on host at a port the kernel picks, its address in
 * *ss; -1 after dpl_set_error. */
static int listen_any(const char *host, struct sockaddr_storage *ss,
		      socklen_t *sl)
{
	struct addrinfo *ai = NULL;
	int fd, err = 0, rc;

	rc = dpl__bs_resolve(host, 0, &ai);
	if (rc != 0)
		return rc;
	fd = dpl__bs_listen(ai, 1024, &err);
	if (fd >= 0 && getsockname(fd, (struct sockaddr *)ss, sl) != 0) {
		err = errno;
		dpl__bs_close_fd(&fd);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return dpl_set_error(DPL_EIO, "bootstrap: cannot listen on a port "
				  "of root host '%s': %s", host,
				  strerror(err));
	return fd;
}

int dpl_bootstrap_hold_root(const char *host, char *root, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char num[BS_HOST_MAX], port[16], tmp[BS_HOST_MAX + 16];
	int fd, n, rc;

	if (root == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: hold root: root is "
				  "NULL");
	if (host == NULL)
		host = "127.0.0.1";
	fd = listen_any(host, &ss, &sl);
	if (fd < 0)
		return fd;
	rc = getnameinfo((struct sockaddr *)&ss, sl, num, sizeof num, port,
			 sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
	if (rc != 0) {
		dpl__bs_close_fd(&fd);
		return dpl_set_error(DPL_EIO, "bootstrap: hold root on '%s': "
				  "getnameinfo: %s", host, gai_strerror(rc));
	}
	n = snprintf(tmp, sizeof tmp, ss.ss_family == AF_INET6 ? "[%s]:%s"
		     : "%s:%s", num, port);
	if (n < 0 || (size_t)n >= size) {
		dpl__bs_close_fd(&fd);
		return dpl_set_error(DPL_ERANGE, "bootstrap: root '%s' needs %d "
				  "bytes, the buffer has %zu", tmp, n + 1,
				  size);
	}
	pthread_mutex_lock(&hold_lock);
	if (nheld == HOLD_MAX) {
		pthread_mutex_unlock(&hold_lock);
		dpl__bs_close_fd(&fd);
		return dpl_set_error(DPL_EBUSY, "bootstrap: %d roots are held "
				  "already (release one with "
				  "dpl_bootstrap_release_root)", HOLD_MAX);
	}
	holds[nheld].fd = fd;
	holds[nheld].sa = ss;
	nheld++;
	pthread_mutex_unlock(&hold_lock);
	memcpy(root, tmp, (size_t)n + 1);
	return 0;
}

int dpl_bootstrap_release_root(const char *root)
{
	struct addrinfo *ai = NULL;
	char host[BS_HOST_MAX];
	unsigned port = 0;
	bool v6 = false;
	int fd, rc;

	if (root == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: release root: root "
				  "is NULL");
	rc = dpl__bs_parse_root(root, host, &port, &v6);
	if (rc != 0)
		return rc;
	rc = dpl__bs_resolve(host, port, &ai);
	if (rc != 0)
		return rc;
	fd = dpl__bs_take_held(ai);
	freeaddrinfo(ai);
	if (fd < 0)
		return dpl_set_error(DPL_ENOENT, "bootstrap: no socket is held "
				  "for root '%s' (never held, or already taken "
				  "or released)", root);
	dpl__bs_close_fd(&fd);
	return 0;
}
