/*
 * bootstrap_internal.h - the out-of-band TCP rendezvous of a job
 * (dpl/bootstrap.h): the handle, the protocol and the helpers that its
 * source files share; not installed.
 *
 * A star over plain POSIX sockets: rank 0 listens on the root address,
 * every other rank connects and introduces itself (HELLO, with a fresh
 * nonce), both prove that they hold the job secret (CHALLENGE from rank
 * 0, PROOF from the rank; bootstrap_auth.c), and rank 0 answers everyone
 * (WELCOME) once all ranks are there. Rank 0 runs the handshakes of up to
 * BS_PENDING_MAX connections at once without blocking on any of them
 * (bootstrap_admit.c): a connection that fails its handshake is refused
 * and logged, and the rendezvous goes on. A collective is a
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
#define BS_WORLD_MAX DPL_BOOTSTRAP_WORLD_MAX
#define BS_MSG_MAX 400   /* text of REJECT/ABORT */
#define BS_HOST_MAX 256
#define BS_RETRY_MS 20   /* between connection attempts to the root */
#define BS_HANDSHAKE_MS 2000 /* a connection must prove itself within
				this of its accept */
#define BS_PENDING_MAX 64    /* connections in their handshake at once */
#define BS_GRACE_MS 1000     /* a connected rank waits this long past its
				timeout for rank 0's verdict */
#define BS_LOG_MAX 32        /* refusals logged per rendezvous */
#define BS_NONCE 32
#define BS_MAC 32            /* HMAC-SHA256 */
#define BS_SECRET_MIN 16     /* bytes of DPL_JOB_SECRET */
#define BS_SECRET_MAX 1024
#define BS_PEER_MAX 64       /* "[v6 address]:port" of a connection */
#define BS_DEFAULT_TIMEOUT_MS 60000u
#define BS_NONE DPL_BOOTSTRAP_NO_RANK

enum bs_type {
	BS_HELLO = 1,   /* a = rank, b = world size, payload = the rank's
			   nonce (BS_NONCE bytes) */
	BS_WELCOME = 2, /* a = world size */
	BS_REJECT = 3,  /* a = -code, payload = message */
	BS_DATA = 4,    /* a = collective number, b = -code of a local
			   failure (0), payload = contribution */
	BS_RESULT = 5,  /* a = collective number, payload = all of them */
	BS_ABORT = 6,   /* a = -code, b = collective number, payload =
			   the rank that died (4 bytes, BS_NONE when
			   none did), then the message */
	BS_CHALLENGE = 7, /* rank 0's nonce, then rank 0's proof (BS_MAC) */
	BS_PROOF = 8,   /* payload = the rank's proof (BS_MAC bytes) */
	BS_LEAVE = 9    /* a rank gives up waiting: a = -code, payload =
			   its message */
};

/* Why rank 0 refused the last connection that claimed a rank (struct
 * dpl_bootstrap, note). */
enum bs_note {
	BS_NOTE_NONE = 0,
	BS_NOTE_CLOSED,   /* closed during the handshake */
	BS_NOTE_SECRET,   /* failed the proof of the job secret */
	BS_NOTE_SILENT    /* did not finish the handshake in time */
};

/* A connection in its handshake at rank 0 (bootstrap_admit.c). */
enum bs_conn_state { BS_C_HELLO, BS_C_PROOF };

struct bs_conn {
	int fd;
	int state;           /* enum bs_conn_state */
	int note;            /* enum bs_note: why it was refused */
	uint64_t deadline;   /* of the whole handshake */
	size_t got;          /* bytes of the message in buf */
	unsigned char buf[BS_HDR + BS_MAC];
	uint32_t rank, world; /* as the HELLO claimed them */
	unsigned char nc[BS_NONCE], ns[BS_NONCE]; /* the rank's, rank 0's */
	char peer[BS_PEER_MAX];
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
	int lfd;            /* rank 0: the listener inherited through
			       DPL_ROOT_FD until the rendezvous takes it,
			       else -1 */
	bool v6;            /* host needs brackets when printed */
	int broken;         /* error of an earlier failed collective */
	uint32_t dead;      /* the rank whose death broke it, or BS_NONE */
	char broken_msg[512];
	unsigned char key[BS_SECRET_MAX]; /* the job secret (DPL_JOB_SECRET) */
	size_t keylen;      /* 0: no secret (see dpl/bootstrap.h) */
	unsigned char *note; /* rank 0, during the rendezvous: enum bs_note
				per rank */
	unsigned logged;    /* refusals logged in this rendezvous */
};

/* ---- time and sockets (bootstrap_wire.c) ---------------------------- */

/* Now, in milliseconds of dpl_clock_ns(): the clock of every deadline. */
static inline uint64_t dpl__bs_now_ms(void)
{
	return dpl_clock_ns() / 1000000u;
}

/* A dpl error code sent on the wire as its negation (REJECT, ABORT,
 * DATA): the code, or DPL_EIO for a value that is none (0, or out of
 * range: never negated past INT_MIN). */
static inline int dpl__bs_code(uint32_t wire)
{
	return wire >= 1 && wire <= 4096 ? -(int)wire : DPL_EIO;
}

/* Milliseconds left before `deadline` (0 when past), for poll(). */
int dpl__bs_left_ms(uint64_t deadline);

/* Close *fd when open and mark it closed (-1). */
void dpl__bs_close_fd(int *fd);

struct addrinfo;

/*
 * A non-blocking, close-on-exec TCP socket (SO_REUSEADDR) bound to the
 * first of ai's addresses that binds and listens with `backlog`; -1 with
 * the last errno in *err when none does.
 */
int dpl__bs_listen(const struct addrinfo *ai, int backlog, int *err);

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

/* ---- ranks (bootstrap_admit.c) -------------------------------------- */

/* "2, 3, 7" style list (at most 16, then "...") of the ranks 1.. whose
 * mark in `have` is false. */
void dpl__bs_list_missing(const dpl_bootstrap *b, const bool *have,
			  char *out, size_t size);

/* How many of the ranks 1.. have no mark in `have`. */
uint32_t dpl__bs_count_missing(const dpl_bootstrap *b, const bool *have);

/*
 * Set and return the error (code, usually DPL_ETIMEDOUT) naming the
 * ranks without a mark in `have` ("rank 2 never arrived at ... within
 * ... ms"), with what rank 0 knows of them (b->note: connections that
 * claimed them and were refused), then `tail`.
 */
int dpl__bs_missing_error(dpl_bootstrap *b, const bool *have, int code,
			  const char *tail);

/* ---- the job secret (bootstrap_auth.c) ------------------------------ */

/*
 * The job secret from DPL_JOB_SECRET into b->key. Unset: no secret
 * (keylen 0). DPL_EINVAL when it is set but shorter than BS_SECRET_MIN
 * or longer than BS_SECRET_MAX bytes (the value itself is never printed).
 */
int dpl__bs_load_secret(dpl_bootstrap *b);

/* n random bytes (getrandom); DPL_EIO when the kernel gives none. */
int dpl__bs_random(void *buf, size_t n);

/*
 * The proofs: HMAC-SHA256 keyed with the job secret over a label ("root"
 * for rank 0's, "rank" for the joining rank's), both nonces (the
 * prover's peer's first), the claimed rank and world size. out gets
 * BS_MAC bytes.
 */
void dpl__bs_proof(const dpl_bootstrap *b, bool root,
		   const unsigned char *first, const unsigned char *second,
		   uint32_t rank, uint32_t world, unsigned char *out);

/* Constant-time comparison of two proofs (CRYPTO_memcmp): true when
 * equal. */
bool dpl__bs_proof_ok(const unsigned char *a, const unsigned char *b);

/*
 * A joining rank's handshake on a connected socket: HELLO, check rank
 * 0's proof, PROOF, then wait for the verdict until deadline +
 * BS_GRACE_MS (on timeout it tells rank 0 it gives up: LEAVE). Returns
 * 0 when welcomed, 1 when rank 0 closed the connection before its
 * challenge (the caller may connect again), or a negative code with
 * dpl_last_error() set.
 */
int dpl__bs_join_handshake(dpl_bootstrap *b, int fd, uint64_t deadline);

/* ---- rank 0's side of a handshake (bootstrap_admit.c) ---------------- */

/* Results of dpl__bs_conn_step(). */
#define BS_STEP_MORE 0   /* not finished: poll again */
#define BS_STEP_DONE 1   /* proved the secret: c->rank, c->world hold */
#define BS_STEP_REFUSE 2 /* refused: why[] says why, c->fd still open */

/* Start the handshake of a connection accepted on fd. */
void dpl__bs_conn_start(struct bs_conn *c, int fd, uint64_t deadline);

/*
 * Move a connection's handshake on with what its socket has (one
 * non-blocking read; sends the CHALLENGE once the HELLO is in). Never
 * blocks for the peer. Returns a BS_STEP_*.
 */
int dpl__bs_conn_step(dpl_bootstrap *b, struct bs_conn *c, char *why,
		      size_t size);

/*
 * Log one refused connection on stderr ("dpl bootstrap: rank 0 refused
 * <peer>: <why>"), at most BS_LOG_MAX per rendezvous, and record c->note
 * against the rank it claimed (b->note).
 */
void dpl__bs_refused(dpl_bootstrap *b, const struct bs_conn *c,
		     const char *why);

/* "127.0.0.1:4711" of a socket's peer into out (BS_PEER_MAX bytes). */
void dpl__bs_peer_name(int fd, char *out);

/* ---- environment (bootstrap_env.c) ---------------------------------- */

/*
 * The root address from the environment: DPL_ROOT, else MASTER_ADDR and
 * MASTER_PORT + 1. DPL_EINVAL naming the variable at fault.
 */
int dpl__bs_env_root(char *buf, size_t size);

/*
 * Rank 0's listener inherited from its launcher: the descriptor
 * DPL_ROOT_FD names, checked to be a listening TCP socket bound to
 * `port` (any port when 0) and made non-blocking and close-on-exec, into
 * *fd (which the caller then owns); -1 when DPL_ROOT_FD is not set or an
 * earlier call in this process took it. DPL_EINVAL naming the value
 * (not a number, not open, not a TCP socket, not listening, another
 * port); a descriptor that fails a check is left as it is and not taken,
 * so every later open fails the same way.
 */
int dpl__bs_env_listener(unsigned port, int *fd);

/* ---- held roots (bootstrap_hold.c) ---------------------------------- */

/*
 * The listening socket dpl_bootstrap_hold_root() holds at one of ai's
 * addresses (same family, address and port), removed from the held set
 * so that the caller owns it; -1 when none is held there. Any thread.
 */
int dpl__bs_take_held(const struct addrinfo *ai);

#endif /* DPL_BOOTSTRAP_INTERNAL_H */
