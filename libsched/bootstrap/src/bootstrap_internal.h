/*
 * bootstrap_internal.h - the out-of-band TCP rendezvous of a job
 * (dpl/bootstrap.h): the handle, the protocol and the helpers that its
 * source files share; not installed.
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
 * Wire format: a 20-byte header of five little-endian 32-bit words
 * (magic, type, a, b, payload length; dpl_put_u32() of dpl/backend.h)
 * followed by the payload.
 *
 * After a failed collective the channel is out of step (contributions of
 * other ranks may still be in flight), so the handle keeps the failure and
 * every later collective returns it.
 *
 * Deadlines are absolute times in milliseconds of dpl_clock_ns().
 */
#ifndef DPL_BOOTSTRAP_INTERNAL_H
#define DPL_BOOTSTRAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dpl/bootstrap.h>
#include <dpl/common.h>

struct addrinfo;

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

/* ---- time and sockets (bootstrap_wire.c) ---------------------------- */

/* Now, in milliseconds of dpl_clock_ns(): the clock of every deadline. */
static inline uint64_t dpl__bs_now_ms(void)
{
	return dpl_clock_ns() / 1000000u;
}

/* Milliseconds left before `deadline` (0 when past), for poll(). */
int dpl__bs_left_ms(uint64_t deadline);

/* Close *fd when open and mark it closed (-1). */
void dpl__bs_close_fd(int *fd);

/*
 * Read exactly n bytes before the deadline. Returns 0, DPL_ETIMEDOUT,
 * DPL_EPEER (the other end closed or reset) or DPL_EIO (errno kept).
 */
int dpl__bs_read_full(int fd, void *buf, size_t n, uint64_t deadline);

/* Send one message (header, then `len` bytes of payload) before the
 * deadline; returns like dpl__bs_read_full(). */
int dpl__bs_send_msg(int fd, uint32_t type, uint32_t a, uint32_t b,
		     const void *payload, uint32_t len, uint64_t deadline);

/* Read a header; DPL_EIO (errno EPROTO) for one that is not ours. */
int dpl__bs_recv_hdr(int fd, struct bs_hdr *h, uint64_t deadline);

/* Read a text payload (REJECT, ABORT) of `len` bytes into msg,
 * NUL-terminated; DPL_EIO (errno EPROTO) when longer than BS_MSG_MAX. */
int dpl__bs_recv_text(int fd, uint32_t len, char *msg, size_t size,
		      uint64_t deadline);

/* Whether the peer of a connected socket has closed it (non-blocking). */
bool dpl__bs_peer_gone(int fd);

/*
 * After sending to rank 0 (send_rc): read its answer into *h. When the
 * send failed because rank 0 already closed the connection, its reason
 * (a message of type `why`) may still be waiting in the socket: read it
 * briefly, so that every rank reports the cause rank 0 saw.
 */
int dpl__bs_recv_verdict(int fd, int send_rc, struct bs_hdr *h,
			 uint32_t why, uint64_t deadline);

/* ---- addresses (bootstrap_addr.c) ----------------------------------- */

/* Strict decimal port 0..65535; -1 when s is not one. */
int dpl__bs_parse_port(const char *s, unsigned *port);

/*
 * Split "host:port" or "[v6]:port" into host (BS_HOST_MAX bytes), port
 * and whether the host is IPv6. DPL_EINVAL naming the root otherwise.
 */
int dpl__bs_parse_root(const char *root, char *host, unsigned *port,
		       bool *v6);

/* getaddrinfo() for a TCP stream to host:port; DPL_EINVAL naming the
 * host when it does not resolve. Free *out with freeaddrinfo(). */
int dpl__bs_resolve(const char *host, unsigned port, struct addrinfo **out);

/* The socket options of a rendezvous connection (TCP_NODELAY). */
void dpl__bs_tune(int fd);

/* ---- ranks (bootstrap_open.c) --------------------------------------- */

/* "2, 3, 7" style list (at most 16, then "...") of the ranks 1.. whose
 * mark in `have` is false. */
void dpl__bs_list_missing(const dpl_bootstrap *b, const bool *have,
			  char *out, size_t size);

/* How many of the ranks 1.. have no mark in `have`. */
uint32_t dpl__bs_count_missing(const dpl_bootstrap *b, const bool *have);

/* ---- environment (bootstrap_env.c) ---------------------------------- */

/*
 * The root address from the environment: DPL_ROOT, else MASTER_ADDR and
 * MASTER_PORT + 1. DPL_EINVAL naming the variable at fault.
 */
int dpl__bs_env_root(char *buf, size_t size);

#endif /* DPL_BOOTSTRAP_INTERNAL_H */
