/*
 * bootstrap_env.c - the rendezvous from the environment
 * (dpl_bootstrap_open_env()): rank and world size (also read alone,
 * dpl_bootstrap_env_rank()) and root address from DPL_* or torchrun's
 * variables; rank 0's listener inherited from its
 * launcher (DPL_ROOT_FD).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "bootstrap_internal.h"


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
int dpl__bs_env_root(char *buf, size_t size)
{
	const char *v = getenv("DPL_ROOT"), *addr, *port;
	unsigned pn;

	if (v != NULL) {
		if ((size_t)snprintf(buf, size, "%s", v) >= size)
			return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT is "
					  "longer than %zu bytes", size - 1);
		return 0;
	}
	addr = getenv("MASTER_ADDR");
	port = getenv("MASTER_PORT");
	if (addr == NULL && port == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: neither DPL_ROOT nor "
				  "MASTER_ADDR/MASTER_PORT is set");
	if (addr == NULL || *addr == '\0')
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_PORT is set "
				  "but MASTER_ADDR is %s",
				  addr == NULL ? "not" : "empty");
	if (port == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_ADDR is set "
				  "but MASTER_PORT is not");
	if (dpl__bs_parse_port(port, &pn) != 0 || pn == 0 || pn >= 65535)
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_PORT='%s' is "
				  "not a port in 1..65534 (dpl listens on "
				  "MASTER_PORT + 1)", port);
	if ((size_t)snprintf(buf, size, strchr(addr, ':') ? "[%s]:%u"
			     : "%s:%u", addr, pn + 1) >= size)
		return dpl_set_error(DPL_EINVAL, "bootstrap: MASTER_ADDR is "
				  "longer than %zu bytes", size - 16);
	return 0;
}

/* Set once a rank-0 open has taken the descriptor DPL_ROOT_FD names:
 * later opens bind their root themselves (the number may by then name
 * another file). */
static atomic_bool listener_taken;

int dpl__bs_env_listener(unsigned port, int *fd_out)
{
	const char *v = getenv("DPL_ROOT_FD");
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	int fd, type = 0, dom = 0, acc = 0, fl;
	socklen_t il = sizeof(int);
	uint32_t x;
	unsigned bound;

	*fd_out = -1;
	if (v == NULL || atomic_load(&listener_taken))
		return 0;
	if (parse_u32(v, &x) != 0 || x > INT32_MAX)
		return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT_FD='%s' is "
				  "not a file descriptor (a decimal integer)",
				  v);
	fd = (int)x;
	if (fcntl(fd, F_GETFD) < 0)
		return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT_FD=%d is not "
				  "an open file descriptor: %s", fd,
				  strerror(errno));
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &il) != 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &il) != 0 ||
	    type != SOCK_STREAM || (dom != AF_INET && dom != AF_INET6))
		return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT_FD=%d is not "
				  "a TCP socket", fd);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &il) != 0 ||
	    acc == 0)
		return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT_FD=%d is a "
				  "TCP socket that does not listen", fd);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		return dpl_set_error(DPL_EIO, "bootstrap: DPL_ROOT_FD=%d: "
				  "getsockname: %s", fd, strerror(errno));
	bound = ntohs(ss.ss_family == AF_INET6
		      ? ((struct sockaddr_in6 *)&ss)->sin6_port
		      : ((struct sockaddr_in *)&ss)->sin_port);
	if (port != 0 && bound != port)
		return dpl_set_error(DPL_EINVAL, "bootstrap: DPL_ROOT_FD=%d listens "
				  "on port %u, not on the root's port %u", fd,
				  bound, port);
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
		return dpl_set_error(DPL_EIO, "bootstrap: DPL_ROOT_FD=%d: fcntl: "
				  "%s", fd, strerror(errno));
	/* Another thread's open may have taken it meanwhile: then it is
	 * that one's. */
	if (!atomic_exchange(&listener_taken, true))
		*fd_out = fd;
	return 0;
}

/* Both functions say it, with their own codes. */
#define NO_RANK "bootstrap: neither DPL_RANK nor RANK is set"

int dpl_bootstrap_env_rank(uint32_t *rank, uint32_t *world_size)
{
	const char *rs, *ws, *rn, *wn;
	uint32_t r, n;

	if (rank == NULL || world_size == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: env_rank: %s is NULL",
				  rank == NULL ? "rank" : "world_size");
	rs = env2("DPL_RANK", "RANK", &rn);
	ws = env2("DPL_WORLD_SIZE", "WORLD_SIZE", &wn);
	if (rs == NULL)
		return dpl_set_error(DPL_ENOENT, NO_RANK);
	if (parse_u32(rs, &r) != 0)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s='%s' is not a "
				  "rank (a decimal integer)", rn, rs);
	if (ws == NULL)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s is set but neither "
				  "DPL_WORLD_SIZE nor WORLD_SIZE is", rn);
	if (parse_u32(ws, &n) != 0 || n == 0 || n > BS_WORLD_MAX)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s='%s' is not a "
				  "world size (1..%u)", wn, ws, BS_WORLD_MAX);
	if (r >= n)
		return dpl_set_error(DPL_EINVAL, "bootstrap: %s=%u is not below "
				  "%s=%u", rn, r, wn, n);
	*rank = r;
	*world_size = n;
	return 0;
}

int dpl_bootstrap_open_env(uint32_t timeout_ms, dpl_bootstrap **out)
{
	struct dpl_bootstrap_params p;
	char root[BS_HOST_MAX + 16];
	int rc;

	memset(&p, 0, sizeof p);
	rc = dpl_bootstrap_env_rank(&p.rank, &p.world_size);
	if (rc == DPL_ENOENT)	/* the join needs a rank: a bad input here */
		return dpl_set_error(DPL_EINVAL, NO_RANK);
	if (rc != 0)
		return rc;
	/* Checked here so that its error comes before any socket is
	 * touched; dpl_bootstrap_open reads it again (root NULL), and then
	 * takes rank 0's inherited listener too. */
	rc = dpl__bs_env_root(root, sizeof root);
	if (rc != 0)
		return rc;
	p.root = NULL;
	p.timeout_ms = timeout_ms;
	return dpl_bootstrap_open(&p, out);
}
