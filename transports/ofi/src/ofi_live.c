/*
 * ofi_live.c - peer liveness for the libfabric transport.
 *
 * libfabric 1.17 does not report a dead peer on shm or net (sends to it
 * keep "succeeding" or return EAGAIN forever), and rxm only on the next
 * send. dpl therefore watches its peers itself, on a small thread that
 * never touches the fabric, so a rank that computes for a long time
 * without calling progress is not mistaken for a dead one:
 *
 *  - heartbeats: every rank sends a 24-byte UDP datagram to every peer
 *    each interval (timeout / 6); a peer not heard from for the liveness
 *    timeout is dead ("stopped answering");
 *  - goodbye: a rank that closes its context sends BYE with the number of
 *    messages it completed to each peer, so a peer can still receive
 *    those (they are on their way or already here) and then sees it as
 *    failed at once;
 *  - ICMP: the socket has IP_RECVERR, so a heartbeat sent to the port of
 *    a process that died (SIGKILL included) comes back as "port
 *    unreachable" within one interval, on this host or another;
 *  - process exit: for peers in this host's pid namespace, a pidfd says
 *    the moment the process is gone.
 *
 * Datagrams carry the job's nonce (rank 0's random number), so stray
 * datagrams of an earlier job on a recycled port are ignored. The thread
 * publishes deaths through per-peer atomic flags and a generation
 * counter that progress() compares with the last one it saw.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ofi_internal.h"

#define LIVE_MAGIC 0x64706c48u /* "dplH" */
#define LIVE_HB 1u
#define LIVE_BYE 2u

struct live_msg {
	uint32_t magic;
	uint32_t type;
	uint32_t rank;
	uint32_t reserved;
	uint64_t nonce;
	uint64_t count; /* BYE: messages the sender completed to this rank */
};

struct ofi_live {
	pthread_t th;
	bool started;
	int udp;
	int efd;
	uint32_t rank;
	uint32_t n;
	uint64_t nonce;
	uint64_t timeout_ns;
	uint64_t interval_ns;
	struct sockaddr_in *to; /* [n] */
	int *pidfd;             /* [n], -1 = none */
	int32_t *pid;           /* [n], 0 = not on this host */
	uint64_t *last;         /* [n], thread only */
	atomic_uchar *dead;     /* [n] */
	_Atomic uint64_t *bye;  /* [n], UINT64_MAX until a BYE came */
	_Atomic(const uint64_t *) sent; /* counts for our BYEs */
	atomic_uint gen;
	struct pollfd *pfd;     /* [n + 2] */
};

static void mark_dead(struct ofi_live *l, uint32_t r)
{
	if (atomic_exchange(&l->dead[r], 1) == 0)
		atomic_fetch_add(&l->gen, 1);
}

int dpl__ofi_live_open(uint32_t ip, struct ofi_live **out, uint16_t *port)
{
	struct ofi_live *l = calloc(1, sizeof *l);
	struct sockaddr_in sin;
	socklen_t len = sizeof sin;
	int one = 1;

	if (l == NULL)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	l->efd = -1;
	l->udp = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->udp < 0)
		goto fail;
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = ip;
	if (bind(l->udp, (struct sockaddr *)&sin, sizeof sin) != 0 ||
	    getsockname(l->udp, (struct sockaddr *)&sin, &len) != 0 ||
	    setsockopt(l->udp, IPPROTO_IP, IP_RECVERR, &one, sizeof one) != 0)
		goto fail;
	l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->efd < 0)
		goto fail;
	atomic_init(&l->gen, 0);
	*port = sin.sin_port;
	*out = l;
	return 0;
fail:;
	int e = errno;
	char ipb[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &ip, ipb, sizeof ipb);
	if (l->udp >= 0)
		close(l->udp);
	if (l->efd >= 0)
		close(l->efd);
	free(l);
	return dpl_set_error(DPL_EIO,
			     "ofi: liveness socket on %s: %s", ipb,
			     strerror(e));
}

static void send_all(struct ofi_live *l, uint32_t type)
{
	struct live_msg m = {LIVE_MAGIC, type, l->rank, 0, l->nonce, 0};
	const uint64_t *sent = atomic_load_explicit(&l->sent,
						    memory_order_acquire);
	uint32_t r;

	for (r = 0; r < l->n; r++) {
		if (r == l->rank || (type == LIVE_HB && atomic_load(&l->dead[r])))
			continue;
		m.count = sent != NULL ? sent[r] : UINT64_MAX;
		(void)sendto(l->udp, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL,
			     (const struct sockaddr *)&l->to[r],
			     sizeof l->to[r]);
	}
}

static void read_datagrams(struct ofi_live *l, uint64_t now)
{
	struct live_msg m;
	ssize_t k;

	for (;;) {
		k = recv(l->udp, &m, sizeof m, MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			break;
		if ((size_t)k != sizeof m || m.magic != LIVE_MAGIC ||
		    m.nonce != l->nonce || m.rank >= l->n || m.rank == l->rank)
			continue;
		l->last[m.rank] = now;
		if (m.type == LIVE_BYE) {
			if (m.count != UINT64_MAX)
				atomic_store(&l->bye[m.rank], m.count);
			mark_dead(l, m.rank);
		}
	}
}

/* ICMP errors of heartbeats: "port unreachable" means the peer is gone. */
static void read_errors(struct ofi_live *l)
{
	char ctl[512];
	struct live_msg m;
	struct sockaddr_in to;
	struct iovec iov = {&m, sizeof m};
	struct msghdr h;
	struct cmsghdr *cm;
	uint32_t r;

	for (;;) {
		memset(&h, 0, sizeof h);
		h.msg_name = &to;
		h.msg_namelen = sizeof to;
		h.msg_iov = &iov;
		h.msg_iovlen = 1;
		h.msg_control = ctl;
		h.msg_controllen = sizeof ctl;
		if (recvmsg(l->udp, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			break;
		for (cm = CMSG_FIRSTHDR(&h); cm != NULL;
		     cm = CMSG_NXTHDR(&h, cm)) {
			struct sock_extended_err ee;

			if (cm->cmsg_level != IPPROTO_IP ||
			    cm->cmsg_type != IP_RECVERR)
				continue;
			memcpy(&ee, CMSG_DATA(cm), sizeof ee);
			if (ee.ee_origin != SO_EE_ORIGIN_ICMP || ee.ee_type != 3)
				continue;
			for (r = 0; r < l->n; r++) {
				const struct sockaddr_in *a = &l->to[r];

				if (r != l->rank &&
				    a->sin_addr.s_addr == to.sin_addr.s_addr &&
				    a->sin_port == to.sin_port)
					mark_dead(l, r);
			}
		}
	}
}

static void *live_main(void *arg)
{
	struct ofi_live *l = arg;
	uint64_t now = dpl_clock_ns(), next = now;
	uint32_t r, k;
	int ms;

	for (r = 0; r < l->n; r++)
		l->last[r] = now;
	for (;;) {
		l->pfd[0] = (struct pollfd){l->efd, POLLIN, 0};
		l->pfd[1] = (struct pollfd){l->udp, POLLIN, 0};
		for (r = 0, k = 2; r < l->n; r++)
			if (l->pidfd[r] >= 0)
				l->pfd[k++] = (struct pollfd){l->pidfd[r],
							      POLLIN, 0};
		ms = next > now ? (int)((next - now) / 1000000u) + 1 : 0;
		if (poll(l->pfd, k, ms) < 0 && errno != EINTR)
			break;
		if (l->pfd[0].revents != 0)
			break;
		now = dpl_clock_ns();
		if (l->pfd[1].revents & POLLIN)
			read_datagrams(l, now);
		if (l->pfd[1].revents & POLLERR)
			read_errors(l);
		for (r = 0, k = 2; r < l->n; r++) {
			if (l->pidfd[r] < 0)
				continue;
			if (l->pfd[k++].revents != 0) {
				mark_dead(l, r);
				close(l->pidfd[r]);
				l->pidfd[r] = -1;
			}
		}
		if (now < next)
			continue;
		send_all(l, LIVE_HB);
		for (r = 0; r < l->n; r++) {
			if (r == l->rank || atomic_load(&l->dead[r]))
				continue;
			if (now - l->last[r] > l->timeout_ns)
				mark_dead(l, r);
			else if (l->pid[r] > 0 && l->pidfd[r] < 0 &&
				 kill(l->pid[r], 0) != 0 && errno == ESRCH)
				mark_dead(l, r);
		}
		next = now + l->interval_ns;
	}
	send_all(l, LIVE_BYE);
	return NULL;
}

int dpl__ofi_live_start(struct ofi_live *l, uint32_t rank, uint32_t n,
			const struct ofi_live_peer *peers, uint64_t nonce,
			uint32_t timeout_ms)
{
	sigset_t all, old;
	uint32_t r;
	int rc;

	l->rank = rank;
	l->nonce = nonce;
	l->timeout_ns = (uint64_t)timeout_ms * 1000000u;
	l->interval_ns = l->timeout_ns / 6;
	if (l->interval_ns < 5000000u)
		l->interval_ns = 5000000u;
	l->to = calloc(n, sizeof *l->to);
	l->pidfd = calloc(n, sizeof *l->pidfd);
	l->pid = calloc(n, sizeof *l->pid);
	l->last = calloc(n, sizeof *l->last);
	l->dead = calloc(n, sizeof *l->dead);
	l->bye = calloc(n, sizeof *l->bye);
	l->pfd = calloc((size_t)n + 2, sizeof *l->pfd);
	if (!l->to || !l->pidfd || !l->pid || !l->last || !l->dead ||
	    !l->bye || !l->pfd)
		return dpl_set_error(DPL_ENOMEM, "ofi: out of memory");
	l->n = n;
	for (r = 0; r < n; r++)
		l->pidfd[r] = -1;
	for (r = 0; r < n; r++) {
		atomic_init(&l->dead[r], 0);
		atomic_init(&l->bye[r], UINT64_MAX);
		l->to[r].sin_family = AF_INET;
		l->to[r].sin_addr.s_addr = peers[r].ip;
		l->to[r].sin_port = peers[r].port;
		l->pid[r] = r == rank ? 0 : peers[r].pid;
		if (l->pid[r] > 0) {
			l->pidfd[r] = (int)syscall(SYS_pidfd_open,
						   (pid_t)l->pid[r], 0);
			if (l->pidfd[r] < 0 && errno == ESRCH)
				mark_dead(l, r);
		}
	}
	/* The thread takes no signals: they stay with the application. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&l->th, NULL, live_main, l);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return dpl_set_error(DPL_EIO,
				     "ofi: liveness thread: %s",
				     strerror(rc));
	l->started = true;
	return 0;
}

unsigned dpl__ofi_live_gen(struct ofi_live *l)
{
	return atomic_load_explicit(&l->gen, memory_order_acquire);
}

bool dpl__ofi_live_dead(struct ofi_live *l, uint32_t peer, uint64_t *bye)
{
	if (l->dead == NULL || atomic_load(&l->dead[peer]) == 0)
		return false;
	*bye = atomic_load(&l->bye[peer]);
	return true;
}

void dpl__ofi_live_close(struct ofi_live *l, const uint64_t *sent)
{
	uint64_t one = 1;
	uint32_t r;

	if (l == NULL)
		return;
	atomic_store_explicit(&l->sent, sent, memory_order_release);
	if (l->started) {
		while (write(l->efd, &one, sizeof one) < 0 && errno == EINTR)
			;
		pthread_join(l->th, NULL);
	}
	if (l->pidfd != NULL)
		for (r = 0; r < l->n; r++)
			if (l->pidfd[r] >= 0)
				close(l->pidfd[r]);
	close(l->udp);
	close(l->efd);
	free(l->to);
	free(l->pidfd);
	free(l->pid);
	free(l->last);
	free(l->dead);
	free((void *)l->bye);
	free(l->pfd);
	free(l);
}
