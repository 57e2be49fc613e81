/*
 * ar_shim.c - the in-process transport with a native iallreduce, for
 * testing the runner's use of a transport's own allreduce. Every other
 * member forwards to dpl_transport_inproc (its context and requests sit
 * after a small header). The allreduce is deliberately simple: members
 * meet at a barrier, each sums all members' buffers in group order, meet
 * again, and write the sum back; the request is complete on return.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/transport_inproc.h>

#include "ar_shim.h"
#define BASE (&dpl_transport_inproc)
#define HDR 16

struct shim_ctx {
	uint32_t rank;
};

struct shim_req {
	int is_ar;
	int status;
};

static void *inner(void *p)
{
	return (char *)p + HDR;
}

/* One meeting point per group leader. */
#define MAX_GROUPS 64
static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static struct meet {
	uint32_t leader, n;
	pthread_barrier_t bar;
	double *bufs[64];
	int used;
} meets[MAX_GROUPS];

atomic_uint dpl_test_ar_calls;

static struct meet *meet_for(uint32_t leader, uint32_t n)
{
	struct meet *m = NULL;
	int i;

	pthread_mutex_lock(&glock);
	for (i = 0; i < MAX_GROUPS && !m; i++)
		if (meets[i].used && meets[i].leader == leader &&
		    meets[i].n == n)
			m = &meets[i];
	for (i = 0; i < MAX_GROUPS && !m; i++)
		if (!meets[i].used) {
			m = &meets[i];
			m->used = 1;
			m->leader = leader;
			m->n = n;
			pthread_barrier_init(&m->bar, NULL, n);
		}
	pthread_mutex_unlock(&glock);
	return m;
}

static int s_init(void *c, const struct dpl_transport_params *p)
{
	((struct shim_ctx *)c)->rank = p->rank;
	return BASE->init(inner(c), p);
}

static void s_fini(void *c)
{
	BASE->fini(inner(c));
}

static int s_isend(void *c, void *r, uint32_t peer, uint64_t tag,
		   const void *b, size_t n, uint32_t mem)
{
	((struct shim_req *)r)->is_ar = 0;
	return BASE->isend(inner(c), inner(r), peer, tag, b, n, mem);
}

static int s_irecv(void *c, void *r, uint32_t peer, uint64_t tag, void *b,
		   size_t n, uint32_t mem)
{
	((struct shim_req *)r)->is_ar = 0;
	return BASE->irecv(inner(c), inner(r), peer, tag, b, n, mem);
}

static int s_test(void *c, void *r)
{
	struct shim_req *q = r;

	return q->is_ar ? q->status : BASE->test(inner(c), inner(r));
}

static int s_progress(void *c)
{
	return BASE->progress(inner(c));
}

static int s_cancel(void *c, void *r)
{
	struct shim_req *q = r;

	return q->is_ar ? 0 : BASE->cancel(inner(c), inner(r));
}

static int s_wait(void *c, uint64_t ns)
{
	return BASE->wait(inner(c), ns);
}

static int s_allreduce(void *c, void *r, const uint32_t *group, uint32_t n,
		       void *buf, size_t count, uint32_t dtype, uint32_t mem,
		       uint64_t tag)
{
	struct shim_ctx *sc = c;
	struct shim_req *q = r;
	struct meet *m;
	double *sum;
	uint32_t i, me = n;
	size_t k;

	if (dtype != DPL_DTYPE_F64 || n > 64)
		return DPL_ENOTSUP;
	for (i = 0; i < n; i++)
		if (group[i] == sc->rank)
			me = i;
	if (me == n || (m = meet_for(group[0], n)) == NULL)
		return DPL_EINVAL;
	atomic_fetch_add(&dpl_test_ar_calls, 1);
	sum = calloc(count ? count : 1, sizeof *sum);
	m->bufs[me] = buf;
	pthread_barrier_wait(&m->bar);
	for (i = 0; i < n; i++)
		for (k = 0; k < count; k++)
			sum[k] += m->bufs[i][k];
	pthread_barrier_wait(&m->bar);
	memcpy(buf, sum, count * sizeof *sum);
	free(sum);
	q->is_ar = 1;
	q->status = 0;
	return 0;
}

const struct dpl_transport_ops *dpl_test_ar_shim(void)
{
	static struct dpl_transport_ops o;

	if (o.name == NULL) {
		o.abi_version = DPL_TRANSPORT_ABI_VERSION;
		o.size = sizeof o;
		o.caps = BASE->caps;
		o.ctx_size = HDR + BASE->ctx_size;
		o.req_size = HDR + BASE->req_size;
		o.init = s_init;
		o.fini = s_fini;
		o.isend = s_isend;
		o.irecv = s_irecv;
		o.test = s_test;
		o.progress = s_progress;
		o.cancel = s_cancel;
		o.wait = s_wait;
		o.iallreduce = s_allreduce;
		o.name = "inproc-ar";
	}
	return &o;
}
