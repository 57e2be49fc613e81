/*
 * nccl.c - the NCCL shim (dpl/transport_nccl.h): point-to-point goes to
 * an inner transport opened in init; iallreduce on device memory runs
 * ncclAllReduce through the seam (nccl_seam.h), one communicator per
 * group, built lazily with its unique id sent over the inner transport.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/backend.h>
#include <dpl/device.h>
#include <dpl/transport_nccl.h>

#include "nccl_seam.h"

#define NONE UINT32_MAX
#define COMMS_MAX 64

enum { C_EMPTY, C_BUILDING, C_READY };
enum { S_P2P, S_ID_SEND, S_ID_RECV, S_WAIT_COMM, S_RUN };

struct ncomm {
	uint32_t n, state;
	uint32_t *group;
	uint64_t gen; /* bumped whenever the communicator is dropped */
	void *comm;
};

/* A request: what the shim keeps, then the inner transport's storage. */
struct nreq {
	uint32_t state, slot, me, next, n, dtype;
	uint64_t gen, tag, deadline_ns;
	size_t count;
	void *buf, *event;
	alignas(max_align_t) unsigned char id[NCCL_SEAM_ID_BYTES];
	alignas(max_align_t) unsigned char inner[DPL_NCCL_INNER_REQ_MAX];
};

struct nctx {
	dpl_transport *inner;
	const struct nccl_seam *s;
	uint32_t rank, timeout_ms, live; /* live: reductions pending */
	void *stream;
	struct ncomm comms[COMMS_MAX];
};

static const struct nccl_seam *seam = &dpl__nccl_cuda_seam;

void dpl__nccl_set_seam(const struct nccl_seam *s)
{
	seam = s ? s : &dpl__nccl_cuda_seam;
}

static struct dpl_wrap_names names;

int dpl_transport_nccl_register(const struct dpl_transport_ops *inner)
{
	return dpl_wrap_register(&names, "nccl", inner);
}

static int init_common(void *vctx, const struct dpl_transport_params *p,
		       bool threads)
{
	struct nctx *c = vctx;
	size_t n = p->options ? strlen(p->options) + 1 : 1;
	char *mine = malloc(n), *theirs = malloc(n), inner[4096] = "";
	bool have_inner = false;
	int rc;

	memset(c, 0, sizeof *c);
	c->rank = p->rank;
	c->s = seam;
	c->timeout_ms = p->timeout_ms ? p->timeout_ms : 60000;
	if (mine == NULL || theirs == NULL) {
		rc = dpl_set_error(DPL_ENOMEM, "nccl: out of memory");
		goto out;
	}
	dpl_wrap_split_options(p->options, "nccl.", mine, theirs);
	{
		struct dpl_option t[] = {
		    {"nccl.inner", DPL_OPT_TEXT, inner, 0, 0, sizeof inner,
		     NULL, &have_inner},
		};

		if ((rc = dpl_options_parse("nccl", mine, t, 1)) != 0)
			goto out;
	}
	if (!have_inner) {
		rc = dpl_set_error(DPL_EINVAL, "nccl: option nccl.inner=NAME "
				   "(the point-to-point transport) is required");
		goto out;
	}
	rc = dpl_wrap_open(&names, "nccl", inner, DPL_NCCL_INNER_REQ_MAX,
			   "DPL_NCCL_INNER_REQ_MAX", threads, p, theirs,
			   &c->inner);
out:
	free(mine);
	free(theirs);
	return rc;
}

static int init_procs(void *ctx, const struct dpl_transport_params *p)
{
	return init_common(ctx, p, false);
}

static int init_threads(void *ctx, const struct dpl_transport_params *p)
{
	return init_common(ctx, p, true);
}

static void drop_comm(struct nctx *c, struct ncomm *m, bool abort_it)
{
	if (m->comm != NULL) {
		if (abort_it)
			c->s->comm_abort(m->comm);
		else
			c->s->comm_destroy(m->comm);
	}
	m->comm = NULL;
	m->state = C_EMPTY;
	m->gen++;
}

static void fini(void *vctx)
{
	struct nctx *c = vctx;

	for (size_t i = 0; i < COMMS_MAX; i++) {
		drop_comm(c, &c->comms[i], false);
		free(c->comms[i].group);
		c->comms[i].group = NULL;
	}
	if (c->stream != NULL)
		c->s->stream_destroy(c->stream);
	c->stream = NULL;
	dpl_transport_close(c->inner);
	c->inner = NULL;
}

static int isend(void *vctx, void *req, uint32_t peer, uint64_t tag,
		 const void *buf, size_t len, uint32_t mem)
{
	struct nreq *q = req;

	q->state = S_P2P;
	return dpl_transport_isend(((struct nctx *)vctx)->inner, q->inner,
				   peer, tag, buf, len, mem);
}

static int irecv(void *vctx, void *req, uint32_t peer, uint64_t tag,
		 void *buf, size_t len, uint32_t mem)
{
	struct nreq *q = req;

	q->state = S_P2P;
	return dpl_transport_irecv(((struct nctx *)vctx)->inner, q->inner,
				   peer, tag, buf, len, mem);
}

/* The cache slot for this group: the one holding it, else a free one. */
static int find_slot(struct nctx *c, const uint32_t *group, uint32_t n)
{
	int free_slot = -1;

	for (int i = 0; i < COMMS_MAX; i++) {
		struct ncomm *m = &c->comms[i];

		if (m->group == NULL) {
			if (free_slot < 0)
				free_slot = i;
		} else if (m->n == n &&
			   memcmp(m->group, group, n * sizeof *group) == 0) {
			return i;
		}
	}
	if (free_slot < 0)
		return dpl_set_error(DPL_ENOMEM, "nccl: more than %d groups",
				     COMMS_MAX);
	c->comms[free_slot].group = malloc(n * sizeof *group);
	if (c->comms[free_slot].group == NULL)
		return dpl_set_error(DPL_ENOMEM, "nccl: out of memory");
	memcpy(c->comms[free_slot].group, group, n * sizeof *group);
	c->comms[free_slot].n = n;
	return free_slot;
}

/* Launch the reduction and record the request's event after it. */
static int launch(struct nctx *c, struct nreq *q)
{
	struct ncomm *m = &c->comms[q->slot];
	int rc = c->s->allreduce_sum(q->buf, q->count, q->dtype, m->comm,
				     c->stream);

	if (rc == 0)
		rc = c->s->event_record(q->event, c->stream);
	q->gen = m->gen;
	q->state = S_RUN;
	return rc;
}

/* This member's id step is done: join the communicator, then launch. */
static int join(struct nctx *c, struct nreq *q)
{
	struct ncomm *m = &c->comms[q->slot];
	int rc = c->s->comm_init_rank(&m->comm, (int)q->n, q->id, (int)q->me);

	if (rc != 0) {
		m->comm = NULL;
		drop_comm(c, m, false);
		return rc;
	}
	m->state = C_READY;
	return launch(c, q);
}

static int post_id(struct nctx *c, struct nreq *q)
{
	struct ncomm *m = &c->comms[q->slot];

	if (q->me != 0)
		return dpl_transport_irecv(c->inner, q->inner, m->group[0],
					   q->tag, q->id, sizeof q->id,
					   DPL_MEM_HOST);
	return dpl_transport_isend(c->inner, q->inner, m->group[q->next],
				   q->tag, q->id, sizeof q->id, DPL_MEM_HOST);
}

static int start(struct nctx *c, struct nreq *q)
{
	struct ncomm *m = &c->comms[q->slot];
	int rc;

	if (m->state == C_READY)
		return launch(c, q);
	if (m->state == C_BUILDING) {
		q->state = S_WAIT_COMM;
		q->gen = m->gen;
		return 0;
	}
	m->state = C_BUILDING;
	q->gen = m->gen;
	if (q->me == 0) {
		if ((rc = c->s->get_unique_id(q->id)) != 0)
			goto fail;
		q->next = 1;
		if (q->n == 1)
			return join(c, q);
		q->state = S_ID_SEND;
	} else {
		q->state = S_ID_RECV;
	}
	if ((rc = post_id(c, q)) == 0)
		return 0;
fail:
	drop_comm(c, m, false);
	return rc;
}

static int iallreduce(void *vctx, void *req, const uint32_t *group,
		      uint32_t n, void *buf, size_t count, uint32_t dtype,
		      uint32_t mem, uint64_t tag)
{
	struct nctx *c = vctx;
	struct nreq *q = req;
	int slot, rc;

	if (mem != DPL_MEM_CUDA)
		return dpl_set_error(DPL_ENOTSUP, "nccl: iallreduce of memory "
				     "kind %u: only device memory (%u) is "
				     "reduced by NCCL", mem, DPL_MEM_CUDA);
	if (dtype >= DPL_DTYPE__COUNT || n == 0 || group == NULL)
		return dpl_set_error(DPL_EINVAL, "nccl: iallreduce of dtype "
				     "%u over %u ranks", dtype, n);
	memset(q, 0, offsetof(struct nreq, inner));
	for (q->me = 0; q->me < n && group[q->me] != c->rank; q->me++)
		;
	if (q->me == n)
		return dpl_set_error(DPL_EINVAL, "nccl: rank %u is not in the "
				     "group of %u ranks", c->rank, n);
	if (c->stream == NULL && (rc = c->s->stream_create(&c->stream)) != 0) {
		c->stream = NULL;
		return rc;
	}
	if ((slot = find_slot(c, group, n)) < 0)
		return slot;
	if ((rc = c->s->event_create(&q->event)) != 0)
		return rc;
	q->slot = (uint32_t)slot;
	q->n = n;
	q->buf = buf;
	q->count = count;
	q->dtype = dtype;
	q->tag = tag;
	q->deadline_ns = dpl_clock_ns() + (uint64_t)c->timeout_ms * 1000000u;
	if ((rc = start(c, q)) != 0) {
		c->s->event_destroy(q->event);
		return rc;
	}
	c->live++;
	return 0;
}

/* One step of a pending reduction: DPL_EAGAIN while it is pending. */
static int step(struct nctx *c, struct nreq *q)
{
	struct ncomm *m = &c->comms[q->slot];
	int rc;

	if (q->gen != m->gen)
		return dpl_set_error(DPL_EPEER, "nccl: the communicator of "
				     "ranks %u..%u was aborted", m->group[0],
				     m->group[m->n - 1]);
	switch (q->state) {
	case S_ID_SEND:
	case S_ID_RECV:
		rc = dpl_transport_test(c->inner, q->inner);
		if (rc != 0) {
			if (rc != DPL_EAGAIN)
				drop_comm(c, m, false);
			return rc;
		}
		if (q->state == S_ID_SEND && ++q->next < q->n)
			return (rc = post_id(c, q)) != 0 ? rc : DPL_EAGAIN;
		return (rc = join(c, q)) != 0 ? rc : DPL_EAGAIN;
	case S_WAIT_COMM:
		if (m->state != C_READY)
			return DPL_EAGAIN;
		return (rc = launch(c, q)) != 0 ? rc : DPL_EAGAIN;
	default:
		if ((rc = c->s->async_error(m->comm)) != 0) {
			drop_comm(c, m, true);
			return rc;
		}
		return c->s->event_query(q->event);
	}
}

static int test(void *vctx, void *req)
{
	struct nctx *c = vctx;
	struct nreq *q = req;
	struct ncomm *m;
	int rc;

	if (q->state == S_P2P)
		return dpl_transport_test(c->inner, q->inner);
	m = &c->comms[q->slot];
	rc = step(c, q);
	if (rc == DPL_EAGAIN && dpl_clock_ns() > q->deadline_ns) {
		if (q->state == S_ID_SEND || q->state == S_ID_RECV)
			dpl_transport_cancel(c->inner, q->inner);
		drop_comm(c, m, m->comm != NULL);
		rc = dpl_set_error(DPL_ETIMEDOUT, "nccl: reduction over ranks "
				   "%u..%u pending for more than %u ms",
				   m->group[0], m->group[m->n - 1],
				   c->timeout_ms);
	}
	if (rc == DPL_EAGAIN)
		return rc;
	c->s->event_destroy(q->event);
	q->event = NULL;
	q->state = S_P2P; /* done: a later test goes nowhere near NCCL */
	c->live--;
	return rc;
}

static int progress(void *vctx)
{
	return dpl_transport_progress(((struct nctx *)vctx)->inner);
}

static int cancel(void *vctx, void *req)
{
	struct nctx *c = vctx;
	struct nreq *q = req;

	if (q->state == S_P2P)
		return dpl_transport_cancel(c->inner, q->inner);
	/* A reduction in flight cannot be taken back: it ends normally,
	 * or by the timeout. */
	return 0;
}

static int wait_for(void *vctx, uint64_t timeout_ns)
{
	struct nctx *c = vctx;

	/* The inner transport does not wake for the GPU: poll briefly. */
	if (c->live > 0 && timeout_ns > 50000)
		timeout_ns = 50000;
	return dpl_transport_wait(c->inner, timeout_ns);
}

#define NCCL_TABLE(init_fn, extra_caps)                                      \
	{                                                                    \
		.abi_version = DPL_TRANSPORT_ABI_VERSION,                    \
		.size = sizeof(struct dpl_transport_ops), .name = "nccl",    \
		.caps = DPL_TRANSPORT_CAP_PEER_FAILURE |                     \
			DPL_TRANSPORT_CAP_MEM_CUDA | (extra_caps),           \
		.ctx_size = sizeof(struct nctx),                             \
		.req_size = sizeof(struct nreq), .init = init_fn,            \
		.fini = fini, .isend = isend, .irecv = irecv, .test = test,  \
		.progress = progress, .cancel = cancel, .wait = wait_for,    \
		.iallreduce = iallreduce,                                    \
	}

DPL_EXTERN const struct dpl_transport_ops dpl_transport_nccl =
	NCCL_TABLE(init_procs, 0);
DPL_EXTERN const struct dpl_transport_ops dpl_transport_nccl_threads =
	NCCL_TABLE(init_threads, DPL_TRANSPORT_CAP_IN_PROCESS);

DPL_TRANSPORT_PLUGIN(dpl_transport_nccl);
