/*
 * shm_peers.c - the other ranks as processes: failing a peer (every
 * request with it ends, later posts to it fail naming why), watching
 * their liveness (the `closed` flag fini sets, their pidfds or
 * kill(pid, 0), their heartbeats), and reading their memory with
 * cross-memory attach (process_vm_readv). The protocol: shm.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <dpl/backend.h>

#include "shm_internal.h"

/* ---- peer failure ----------------------------------------------------- */

void dpl__shm_fail_list(struct ctx *c, struct rlist *l, int code)
{
	while (l->head != NULL) {
		struct req *r = l->head;

		l_del(l, r);
		finish(c, r, code);
	}
}

/* With a device hook: wait for peer q's queued copies, close its
 * handles, end the copies' receives with `code`. */
void dpl__shm_fail_copies(struct ctx *c, uint32_t q, int code)
{
	struct peer *p = &c->peer[q];

	if (c->dev == NULL)
		return;
	c->dev->ops->peer_gone(c->dev, q);
	while (p->copies.head != NULL) {
		struct req *r = p->copies.head;

		(void)c->dev->ops->copy_done(c->dev, r->ev);
		l_del(&p->copies, r);
		finish(c, r, code);
	}
}

/* Mark peer q failed: every request with it ends with `code`. */
void dpl__shm_fail_peer(struct ctx *c, uint32_t q, int code,
			const char *why)
{
	struct peer *p = &c->peer[q];
	uint64_t slots = c->ring / FRAME, i;

	if (p->dead)
		return;
	p->dead = code;
	snprintf(p->why, sizeof p->why, "%s", why);
	dpl__shm_fail_list(c, &p->posted, code);
	dpl__shm_fail_list(c, &p->pulls, code);
	dpl__shm_fail_list(c, &p->inflight, code);
	dpl__shm_fail_list(c, &p->streams, code);
	dpl__shm_fail_copies(c, q, code);
	for (i = 0; i < slots; i++)
		p->shadow[i] = NULL;
	p->uhead = p->utail = 0;
}

/*
 * Peer q is gone (left, died, or silent too long): first take what it
 * finished before it went (frames it published, sends of ours it marked
 * done: a peer that received our last message and left at once must not
 * turn that send into a failure), then fail the rest. The frames live in
 * our own mappings; what needs the peer's process (a pull, a stream)
 * fails as it would have.
 */
static void gone(struct ctx *c, uint32_t q, const char *why)
{
	struct peer *p = &c->peer[q];

	dpl__shm_progress_in(c, q);
	if (!p->dead)
		dpl__shm_complete_sends(c, p);
	dpl__shm_fail_peer(c, q, DPL_EPEER, why);
}

/* Look at every peer's flags, heartbeat and process. */
void dpl__shm_check_liveness(struct ctx *c, uint64_t now)
{
	char why[160];
	uint32_t q;
	nfds_t i;

	atomic_store_explicit(&c->hdr->heartbeat_ns, now,
			      memory_order_relaxed);
	c->next_check = now + LIVENESS_PERIOD_NS;
	/* A rank that left says so first; then processes that are gone. */
	for (q = 0; q < c->world; q++)
		if (q != c->rank && !c->peer[q].dead &&
		    atomic_load_explicit(&c->peer[q].hdr->closed,
					 memory_order_acquire)) {
			snprintf(why, sizeof why, "rank %u left the job "
				 "(fini)", q);
			gone(c, q, why);
		}
	if (c->npfd > 0 && poll(c->pfd, c->npfd, 0) > 0)
		for (i = 0; i < c->npfd; i++)
			if (c->pfd[i].revents != 0) {
				q = c->pfd_rank[i];
				snprintf(why, sizeof why, "rank %u (pid %d) "
					 "died", q, c->peer[q].pid);
				gone(c, q, why);
				c->pfd[i].fd = -c->pfd[i].fd - 1; /* ignore */
			}
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];
		uint64_t hb;

		if (q == c->rank || p->dead)
			continue;
		if (p->pidfd < 0 && !dpl__shm_pid_alive(p->pid)) {
			snprintf(why, sizeof why, "rank %u (pid %d) died", q,
				 p->pid);
			gone(c, q, why);
			continue;
		}
		hb = atomic_load_explicit(&p->hdr->heartbeat_ns,
					  memory_order_relaxed);
		if (now > hb && now - hb > c->liveness_ns) {
			snprintf(why, sizeof why, "rank %u silent for %" PRIu64
				 " ms", q, (now - hb) / 1000000u);
			gone(c, q, why);
		}
	}
}

void dpl__shm_maybe_check_liveness(struct ctx *c)
{
	uint64_t now = dpl_clock_ns();

	if (now >= c->next_check)
		dpl__shm_check_liveness(c, now);
}

/* ---- processes -------------------------------------------------------- */

/* Copy len bytes at `addr` in peer p's process into buf (one copy). */
int dpl__shm_cma_read(const struct peer *p, void *buf, uint64_t addr,
		      size_t len)
{
	unsigned char *dst = buf;
	size_t done = 0;

	while (done < len) {
		struct iovec l = {dst + done, len - done};
		struct iovec rm = {(void *)(uintptr_t)(addr + done),
				   len - done};
		ssize_t k = process_vm_readv(p->pid, &l, 1, &rm, 1, 0);

		if (k > 0) {
			done += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == ESRCH)
			return DPL_EPEER;
		return DPL_EIO;
	}
	return 0;
}

int dpl__shm_pidfd_of(int pid)
{
#ifdef SYS_pidfd_open
	long fd = syscall(SYS_pidfd_open, pid, 0);

	return fd < 0 ? -1 : (int)fd;
#else
	(void)pid;
	return -1;
#endif
}

/* Let peers read our buffers where Yama restricts ptrace to ancestors. */
void dpl__shm_allow_cma(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
	int scope = 0;

	if (f == NULL)
		return;
	if (fscanf(f, "%d", &scope) != 1)
		scope = 0;
	fclose(f);
	if (scope == 1)
		prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}
