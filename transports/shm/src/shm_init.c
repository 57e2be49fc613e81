/*
 * shm_init.c - joining and leaving a job. init parses the options, then
 * meets the other ranks through the host's out-of-band exchange
 * (params.oob, dpl/transport.h): an allgather of hellos (pid, options,
 * host, user, and a job id that rank 0 picks), then one agreement per
 * step (create the own segment, map every peer's), so that a failure on
 * any rank fails init on every rank, naming it. After the last step
 * every rank has mapped every segment and unlinks its own name, so no
 * file outlives init. fini marks the rank closed and hands back what is
 * pending. The protocol: shm.c.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <dpl/backend.h>
#include <dpl/transport_shm.h>

#include "shm_internal.h"

/* What each rank tells the others first (one oob allgather). */
struct hello {
	uint64_t magic;
	uint64_t jobid;      /* rank 0's names the job */
	uint64_t boot;       /* hash of the kernel's boot id */
	uint64_t probe_addr; /* where peers read probe_val */
	uint64_t probe_val;
	uint64_t ring, eager;
	int32_t pid;
	uint32_t version;
	uint32_t uid;
	uint32_t pad;
};

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = UINT64_C(14695981039346656037);
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * UINT64_C(1099511628211);
	return h;
}

static uint64_t boot_hash(void)
{
	char id[64];
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	size_t n = 0;

	if (f != NULL) {
		n = fread(id, 1, sizeof id, f);
		fclose(f);
	}
	return n ? fnv1a(id, n) : 0;
}

static uint64_t random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
		v = dpl_clock_ns() ^ ((uint64_t)getpid() << 32);
	return v;
}

/*
 * The job's id: rank 0's is the job's, spread with the hellos, and goes
 * into every segment name. Random bits mixed with the pid and the clock,
 * so that jobs sharing /dev/shm do not pick the same one.
 */
static uint64_t job_id(void)
{
	return random64() ^ ((uint64_t)getpid() << 40) ^ dpl_clock_ns();
}

/* The options of dpl/transport_shm.h, into c (defaults first). */
static int parse_options(struct ctx *c, const char *opts)
{
	uint64_t spin_us = DPL_SHM_DEFAULT_SPIN_US;
	bool cma = true;
	const struct dpl_option table[] = {
		{.key = "ring", .kind = DPL_OPT_SIZE, .dst = &c->ring,
		 .lo = 65536, .hi = UINT64_C(1) << 30},
		{.key = "eager", .kind = DPL_OPT_SIZE, .dst = &c->eager,
		 .lo = 0, .hi = (UINT64_C(1) << 30) / 4},
		{.key = "spin_us", .kind = DPL_OPT_U64, .dst = &spin_us,
		 .lo = 0, .hi = 1000000},
		{.key = "cma", .kind = DPL_OPT_BOOL, .dst = &cma},
	};
	int rc;

	c->ring = DPL_SHM_DEFAULT_RING;
	c->eager = DPL_SHM_DEFAULT_EAGER;
	rc = dpl_options_parse("shm", opts, table,
			       sizeof table / sizeof table[0]);
	if (rc != 0)
		return rc;
	if ((c->ring & (c->ring - 1)) != 0)
		return dpl_set_error(DPL_EINVAL, "shm: ring=%" PRIu64 " must "
				     "be a power of two in 64k..1024m",
				     c->ring);
	if (c->eager > c->ring / 4)
		return dpl_set_error(DPL_EINVAL, "shm: eager=%" PRIu64 " is "
				     "more than a quarter of ring=%" PRIu64,
				     c->eager, c->ring);
	c->mask = c->ring - 1;
	c->chunk = c->ring / 4;
	c->spin_ns = spin_us * 1000u;
	c->want_cma = cma;
	return 0;
}

/* Undo init: unmap, close, unlink what exists. */
static void teardown(struct ctx *c)
{
	uint32_t q;

	if (c->peer != NULL) {
		for (q = 0; q < c->world; q++) {
			struct peer *p = &c->peer[q];

			if (p->seg != NULL)
				munmap(p->seg, c->seg_bytes);
			if (p->pidfd >= 0)
				close(p->pidfd);
			free(p->shadow);
		}
		free(c->peer);
	}
	free(c->pfd);
	free(c->pfd_rank);
	if (c->linked)
		shm_unlink(c->name);
	if (c->seg != NULL && c->world == 1)
		free(c->seg);
	else if (c->seg != NULL)
		munmap(c->seg, c->seg_bytes);
	c->peer = NULL;
	c->pfd = NULL;
	c->pfd_rank = NULL;
	c->seg = NULL;
	c->hdr = NULL;
	c->linked = false;
}

/*
 * One init step for everyone: each rank contributes its step's result,
 * and a failure anywhere fails every rank, naming the one that failed.
 */
static int agree(struct ctx *c, const struct dpl_oob *oob, int rc,
		 const char *step)
{
	int32_t mine = rc, *all;
	char msg[256];
	uint32_t q;
	int brc;

	all = calloc(c->world, sizeof *all);
	if (all == NULL)
		return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
	snprintf(msg, sizeof msg, "%s", dpl_last_error());
	brc = oob->allgather(oob->user, &mine, sizeof mine, all);
	if (brc != 0) {
		free(all);
		return rc != 0 ? dpl_set_error(rc, "%s", msg) : brc;
	}
	if (rc != 0) {
		free(all);
		return dpl_set_error(rc, "%s", msg);
	}
	for (q = 0; q < c->world; q++)
		if (all[q] != 0) {
			rc = all[q];
			free(all);
			return dpl_set_error(rc, "shm: rank %u failed to %s: "
					     "%s", q, step, dpl_strerror(rc));
		}
	free(all);
	return 0;
}

static int check_hellos(struct ctx *c, const struct hello *h)
{
	uint32_t q;

	for (q = 0; q < c->world; q++) {
		if (h[q].magic != DPL__SHM_MAGIC ||
		    h[q].version != DPL__SHM_VERSION)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u speaks "
					     "another shm protocol", q);
		if (h[q].ring != c->ring || h[q].eager != c->eager)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u has "
					     "ring=%" PRIu64 ",eager=%" PRIu64
					     ", rank %u has ring=%" PRIu64
					     ",eager=%" PRIu64, q, h[q].ring,
					     h[q].eager, c->rank, c->ring,
					     c->eager);
		if (h[q].boot != h[c->rank].boot)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u runs on "
					     "another host (or boot) than rank "
					     "%u; the shm transport needs one "
					     "host", q, c->rank);
		if (h[q].uid != h[c->rank].uid)
			return dpl_set_error(DPL_EINVAL, "shm: rank %u runs as "
					     "uid %u, rank %u as uid %u; "
					     "segments are private to one "
					     "user", q, h[q].uid, c->rank,
					     h[c->rank].uid);
	}
	return 0;
}

/* Create this rank's segment and fill its header. */
static int create_own(struct ctx *c, uint64_t jobid)
{
	int rc;

	dpl__shm_name(c->name, jobid, c->rank, (int)getpid());
	rc = dpl__shm_create(c->name, c->seg_bytes, &c->seg);
	if (rc != 0)
		return rc;
	c->linked = true;
	c->hdr = c->seg;
	c->hdr->magic = DPL__SHM_MAGIC;
	c->hdr->version = DPL__SHM_VERSION;
	c->hdr->rank = c->rank;
	c->hdr->world = c->world;
	c->hdr->pid = (int32_t)getpid();
	c->hdr->jobid = jobid;
	c->hdr->ring_bytes = c->ring;
	c->hdr->seg_bytes = c->seg_bytes;
	atomic_store(&c->hdr->heartbeat_ns, dpl_clock_ns());
	return 0;
}

/* Map every peer's segment, check it, and test cross-memory attach. */
static int map_peers(struct ctx *c, uint64_t jobid, const struct hello *h)
{
	char name[DPL__SHM_NAME_MAX];
	uint32_t q;
	int rc;

	c->pfd = calloc(c->world, sizeof *c->pfd);
	c->pfd_rank = calloc(c->world, sizeof *c->pfd_rank);
	if (c->pfd == NULL || c->pfd_rank == NULL)
		return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];
		struct dpl__shm_hdr *ph;
		uint64_t v = 0;

		if (q == c->rank)
			continue;
		dpl__shm_name(name, jobid, q, h[q].pid);
		rc = dpl__shm_map(name, c->seg_bytes, &p->seg);
		if (rc != 0)
			return rc;
		ph = p->seg;
		if (ph->magic != DPL__SHM_MAGIC || ph->rank != q ||
		    ph->world != c->world || ph->pid != h[q].pid ||
		    ph->jobid != jobid)
			return dpl_set_error(DPL_EIO, "shm: segment %s does "
					     "not belong to rank %u of this "
					     "job", name, q);
		p->hdr = ph;
		p->pid = h[q].pid;
		p->octl = dpl__shm_ctl(p->seg, dpl__shm_slot(q, c->rank));
		p->oring = dpl__shm_ring(p->seg, c->world, c->ring,
					 dpl__shm_slot(q, c->rank));
		p->ictl = dpl__shm_ctl(c->seg, dpl__shm_slot(c->rank, q));
		p->iring = dpl__shm_ring(c->seg, c->world, c->ring,
					 dpl__shm_slot(c->rank, q));
		p->shadow = calloc(c->ring / FRAME, sizeof *p->shadow);
		if (p->shadow == NULL)
			return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
		p->pidfd = dpl__shm_pidfd_of(p->pid);
		if (p->pidfd >= 0) {
			c->pfd[c->npfd] = (struct pollfd){p->pidfd, POLLIN, 0};
			c->pfd_rank[c->npfd++] = q;
		}
		if (c->want_cma &&
		    dpl__shm_cma_read(p, &v, h[q].probe_addr, sizeof v) == 0 &&
		    v == h[q].probe_val)
			p->cma = true;
	}
	return 0;
}

int dpl__shm_init(void *vctx, const struct dpl_transport_params *p)
{
	struct ctx *c = vctx;
	const struct dpl_oob *oob = p->oob;
	struct hello mine, *all = NULL;
	uint64_t jobid;
	uint32_t q;
	int rc;

	memset(c, 0, sizeof *c);
	c->rank = p->rank;
	c->world = p->world_size;
	if (c->rank >= c->world)
		return dpl_set_error(DPL_EINVAL, "shm: rank %u out of range "
				     "for world size %u", c->rank, c->world);
	if ((rc = parse_options(c, p->options)) != 0)
		return rc;
	if (c->world > 1 && (oob == NULL || oob->allgather == NULL))
		return dpl_set_error(DPL_EINVAL, "shm: init needs the host's "
				     "out-of-band exchange (params.oob)");
	c->liveness_ns = (uint64_t)(p->timeout_ms ? p->timeout_ms
				    : DEFAULT_TIMEOUT_MS) * 1000000u;
	c->probe = random64() | 1u;
	c->seg_bytes = dpl__shm_seg_bytes(c->world, c->ring);
	c->peer = calloc(c->world, sizeof *c->peer);
	if (c->peer == NULL)
		return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
	for (q = 0; q < c->world; q++)
		c->peer[q].pidfd = -1;
	dpl__shm_sweep();
	if (c->world == 1) {
		/* No peers: a private header only, for wait's doorbell. */
		c->seg_bytes = DPL__SHM_HDR_BYTES;
		c->seg = calloc(1, DPL__SHM_HDR_BYTES);
		if (c->seg == NULL) {
			teardown(c);
			return dpl_set_error(DPL_ENOMEM, "shm: out of memory");
		}
		c->hdr = c->seg;
		return 0;
	}
	if (c->want_cma)
		dpl__shm_allow_cma();
	memset(&mine, 0, sizeof mine);
	mine.magic = DPL__SHM_MAGIC;
	mine.jobid = job_id();
	mine.boot = boot_hash();
	mine.probe_addr = (uint64_t)(uintptr_t)&c->probe;
	mine.probe_val = c->probe;
	mine.ring = c->ring;
	mine.eager = c->eager;
	mine.pid = (int32_t)getpid();
	mine.version = DPL__SHM_VERSION;
	mine.uid = (uint32_t)getuid();
	all = calloc(c->world, sizeof *all);
	if (all == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "shm: out of memory");
		goto fail;
	}
	rc = oob->allgather(oob->user, &mine, sizeof mine, all);
	if (rc != 0)
		goto fail;
	rc = check_hellos(c, all);
	if (rc != 0)
		goto fail;
	jobid = all[0].jobid;
	rc = agree(c, oob, create_own(c, jobid), "create its segment");
	if (rc != 0)
		goto fail;
	rc = agree(c, oob, map_peers(c, jobid, all), "map the segments");
	if (rc != 0)
		goto fail;
	/* Everyone mapped everything (the last agreement is the barrier):
	 * the names can go. */
	shm_unlink(c->name);
	c->linked = false;
	free(all);
	dpl__shm_check_liveness(c, dpl_clock_ns());
	c->completions = 0;
	return 0;
fail:
	free(all);
	teardown(c);
	return rc;
}

void dpl__shm_fini(void *vctx)
{
	struct ctx *c = vctx;
	uint32_t q;

	if (c->hdr == NULL)
		return;
	atomic_store_explicit(&c->hdr->closed, 1, memory_order_release);
	for (q = 0; q < c->world; q++) {
		struct peer *p = &c->peer[q];
		struct req *r;
		uint64_t until = dpl_clock_ns() + FINI_CLAIM_WAIT_NS;

		if (q == c->rank)
			continue;
		dpl__shm_bell(p->hdr);
		/* A receiver copying from one of our buffers right now
		 * finishes first (bounded): the buffer is the caller's
		 * again when fini returns. */
		for (r = p->inflight.head; r != NULL; r = r->next) {
			struct frame *f = frame_at(p->oring, c->mask, r->pos);
			uint32_t want = S_POSTED;

			if (p->dead || atomic_compare_exchange_strong(
					       &f->state, &want, S_CANCELLED))
				continue;
			while (atomic_load(&f->state) == S_CLAIMED &&
			       dpl_clock_ns() < until &&
			       dpl__shm_pid_alive(p->pid))
				cpu_relax();
		}
		dpl__shm_fail_list(c, &p->posted, DPL_ECANCELED);
		dpl__shm_fail_list(c, &p->pulls, DPL_ECANCELED);
		dpl__shm_fail_list(c, &p->inflight, DPL_ECANCELED);
		dpl__shm_fail_list(c, &p->streams, DPL_ECANCELED);
		dpl__shm_fail_copies(c, q, DPL_ECANCELED);
	}
	teardown(c);
}
