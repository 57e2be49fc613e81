/*
 * test_nccl.c - the NCCL shim's CPU-side logic under a fake seam, over
 * inproc with one thread driving the ranks: refusals, the unique id
 * travelling over the inner transport, one communicator per group built
 * once, completion only when the event says so, abort on an
 * asynchronous error and on the timeout, fini releasing everything; the
 * absent GPU with the real seam. The nccl_gpu suite: real reductions, skipped
 * without two GPUs.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dpl/device.h>
#include <dpl/transport_inproc.h>
#include <dpl/transport_nccl.h>

#include "nccl_seam.h"

/* The fake: counts what is alive and what was called. */
static int live, ids, inits, aborts, reduces, async_rc, done;
static unsigned char seen_id[4][NCCL_SEAM_ID_BYTES];

static int f_new(void **p)
{
	*p = malloc(1);
	live++;
	return 0;
}

static void f_free(void *p)
{
	free(p);
	live--;
}

static int f_record(void *ev, void *s)
{
	(void)ev, (void)s;
	return 0;
}

static int f_query(void *ev)
{
	(void)ev;
	return done ? 0 : DPL_EAGAIN;
}

static int f_id(unsigned char id[NCCL_SEAM_ID_BYTES])
{
	ids++;
	for (int i = 0; i < NCCL_SEAM_ID_BYTES; i++)
		id[i] = (unsigned char)(i * 7 + ids);
	return 0;
}

static int f_init(void **comm, int n, const unsigned char *id, int rank)
{
	cr_assert(rank >= 0 && rank < n && n <= 4);
	memcpy(seen_id[rank], id, NCCL_SEAM_ID_BYTES);
	inits++;
	return f_new(comm);
}

static int f_reduce(void *buf, size_t count, uint32_t dtype, void *comm,
		    void *s)
{
	(void)buf, (void)count, (void)dtype, (void)comm, (void)s;
	reduces++;
	return 0;
}

static int f_async(void *comm)
{
	(void)comm;
	return async_rc ? dpl_set_error(async_rc, "fake: comm failed") : 0;
}

static void f_abort(void *comm)
{
	aborts++;
	f_free(comm);
}

static const struct nccl_seam fake = {
	.stream_create = f_new, .stream_destroy = f_free,
	.event_create = f_new, .event_destroy = f_free,
	.event_record = f_record, .event_query = f_query,
	.get_unique_id = f_id, .comm_init_rank = f_init,
	.allreduce_sum = f_reduce, .async_error = f_async,
	.comm_abort = f_abort, .comm_destroy = f_free,
};

static void setup(void)
{
	cr_assert_eq(dpl_transport_nccl_register(&dpl_transport_inproc), 0);
	dpl__nccl_set_seam(&fake);
	live = ids = inits = aborts = reduces = async_rc = done = 0;
}

TestSuite(nccl, .init = setup);

struct pair {
	dpl_transport *t[2];
	void *rq[2];
	float buf[2][4];
};

static void open_pair(struct pair *p, const char *world, uint32_t tmo)
{
	for (uint32_t r = 0; r < 2; r++) {
		struct dpl_transport_params pp = {0};

		pp.rank = r;
		pp.world_size = 2;
		pp.world = world;
		pp.options = "nccl.inner=inproc";
		pp.timeout_ms = tmo;
		cr_assert_eq(dpl_transport_open(&dpl_transport_nccl_threads,
						&pp, &p->t[r]), 0, "%s",
			     dpl_last_error());
		p->rq[r] = calloc(1, dpl_transport_nccl_threads.req_size);
	}
}

static void close_pair(struct pair *p)
{
	for (int r = 0; r < 2; r++) {
		dpl_transport_close(p->t[r]);
		free(p->rq[r]);
	}
}

static const uint32_t group[2] = {0, 1};

static void post_both(struct pair *p, uint32_t mem, uint64_t tag, int want)
{
	for (int r = 0; r < 2; r++)
		cr_assert_eq(dpl_transport_iallreduce(p->t[r], p->rq[r], group,
						      2, p->buf[r], 4,
						      DPL_DTYPE_F32, mem, tag),
			     want, "rank %d: %s", r, dpl_last_error());
}

/* Test both until neither is pending or `rounds` passed; the results. */
static void drive(struct pair *p, int rounds, int rc[2])
{
	rc[0] = rc[1] = DPL_EAGAIN;
	for (int i = 0; i < rounds && (rc[0] == DPL_EAGAIN ||
				       rc[1] == DPL_EAGAIN); i++)
		for (int r = 0; r < 2; r++) {
			dpl_transport_progress(p->t[r]);
			if (rc[r] == DPL_EAGAIN)
				rc[r] = dpl_transport_test(p->t[r], p->rq[r]);
		}
}

Test(nccl, host_memory_is_refused_alike_and_posts_nothing)
{
	struct pair p;

	open_pair(&p, "nccl-host", 0);
	post_both(&p, DPL_MEM_HOST, 5, DPL_ENOTSUP);
	cr_assert(strstr(dpl_last_error(), "memory kind") != NULL);
	cr_assert_eq(ids + inits + reduces + live, 0);
	close_pair(&p);
}

Test(nccl, id_travels_comm_is_built_once_and_event_completes)
{
	struct pair p;
	int rc[2];

	open_pair(&p, "nccl-ok", 0);
	post_both(&p, DPL_MEM_CUDA, 7, 0);
	drive(&p, 200, rc);
	cr_assert_eq(rc[0], DPL_EAGAIN, "completed before the event");
	cr_assert_eq(rc[1], DPL_EAGAIN);
	cr_assert_eq(ids, 1);
	cr_assert_eq(inits, 2);
	cr_assert_eq(reduces, 2);
	cr_assert_eq(memcmp(seen_id[0], seen_id[1], NCCL_SEAM_ID_BYTES), 0,
		     "rank 1 joined with another id");
	done = 1;
	drive(&p, 10, rc);
	cr_assert_eq(rc[0], 0);
	cr_assert_eq(rc[1], 0);
	/* The second reduction reuses the communicator. */
	post_both(&p, DPL_MEM_CUDA, 8, 0);
	drive(&p, 10, rc);
	cr_assert_eq(rc[0], 0);
	cr_assert_eq(rc[1], 0);
	cr_assert_eq(ids, 1);
	cr_assert_eq(inits, 2);
	cr_assert_eq(reduces, 4);
	close_pair(&p);
	cr_assert_eq(live, 0, "%d fake objects left after fini", live);
}

Test(nccl, async_error_aborts_and_the_group_is_rebuilt)
{
	struct pair p;
	int rc[2];

	open_pair(&p, "nccl-async", 0);
	post_both(&p, DPL_MEM_CUDA, 7, 0);
	drive(&p, 50, rc);
	async_rc = DPL_EPEER;
	drive(&p, 10, rc);
	cr_assert_eq(rc[0], DPL_EPEER);
	cr_assert_eq(rc[1], DPL_EPEER);
	cr_assert_eq(aborts, 2);
	async_rc = 0;
	done = 1;
	post_both(&p, DPL_MEM_CUDA, 9, 0);
	drive(&p, 200, rc);
	cr_assert_eq(rc[0], 0, "%s", dpl_last_error());
	cr_assert_eq(rc[1], 0);
	cr_assert_eq(ids, 2);
	cr_assert_eq(inits, 4);
	close_pair(&p);
	cr_assert_eq(live, 0);
}

Test(nccl, a_reduction_past_the_timeout_is_aborted)
{
	struct pair p;
	int rc[2];

	open_pair(&p, "nccl-tmo", 30);
	post_both(&p, DPL_MEM_CUDA, 7, 0);
	drive(&p, 50, rc);
	nanosleep(&(struct timespec){0, 60000000}, NULL);
	drive(&p, 10, rc);
	cr_assert_eq(rc[0], DPL_ETIMEDOUT);
	cr_assert_eq(rc[1], DPL_ETIMEDOUT);
	cr_assert(strstr(dpl_last_error(), "30 ms") != NULL, "%s",
		  dpl_last_error());
	cr_assert_eq(aborts, 2);
	close_pair(&p);
	cr_assert_eq(live, 0);
}

Test(nccl, a_peer_lost_during_the_id_exchange_ends_the_request)
{
	struct pair p;
	int rc = DPL_EAGAIN;

	open_pair(&p, "nccl-lost", 0);
	/* Rank 1 waits for the id; rank 0 never posts and is closed. */
	cr_assert_eq(dpl_transport_iallreduce(p.t[1], p.rq[1], group, 2,
					      p.buf[1], 4, DPL_DTYPE_F32,
					      DPL_MEM_CUDA, 3), 0);
	dpl_transport_close(p.t[0]);
	for (int i = 0; i < 100000 && rc == DPL_EAGAIN; i++) {
		dpl_transport_progress(p.t[1]);
		rc = dpl_transport_test(p.t[1], p.rq[1]);
	}
	cr_assert_eq(rc, DPL_EPEER, "%d: %s", rc, dpl_last_error());
	cr_assert_eq(inits, 0);
	dpl_transport_close(p.t[1]);
	free(p.rq[0]);
	free(p.rq[1]);
	cr_assert_eq(live, 0);
}

Test(nccl, no_gpu_fails_the_first_device_reduction_with_enoent)
{
	struct dpl_transport_params pp = {0};
	dpl_transport *t;
	void *rq;
	int n = 0, rc;

	if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
		cr_skip_test("a GPU is present");
	dpl__nccl_set_seam(NULL);
	pp.world_size = 1;
	pp.world = "nccl-nogpu";
	pp.options = "nccl.inner=inproc";
	cr_assert_eq(dpl_transport_open(&dpl_transport_nccl_threads, &pp, &t),
		     0, "init must not need a GPU: %s", dpl_last_error());
	rq = calloc(1, dpl_transport_nccl_threads.req_size);
	rc = dpl_transport_iallreduce(t, rq, group, 1, rq, 1, DPL_DTYPE_F32,
				      DPL_MEM_CUDA, 1);
	cr_assert_eq(rc, DPL_ENOENT, "%d: %s", rc, dpl_last_error());
	cr_assert(strstr(dpl_last_error(), "cudaStreamCreateWithFlags") != NULL,
		  "%s", dpl_last_error());
	dpl_transport_close(t);
	free(rq);
}

/* Real GPUs: two ranks as threads, one device each. */
struct gpu_rank {
	uint32_t rank;
	float got[256];
	int rc;
};

static void *gpu_rank_main(void *arg)
{
	struct gpu_rank *g = arg;
	struct dpl_transport_params pp = {0};
	dpl_transport *t = NULL;
	void *rq = calloc(1, dpl_transport_nccl_threads.req_size);
	float h[256], *d = NULL;

	for (int i = 0; i < 256; i++)
		h[i] = 0.1f * (float)(i + 1) * (float)(g->rank + 1);
	cudaSetDevice((int)g->rank);
	cudaMalloc((void **)&d, sizeof h);
	cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
	pp.rank = g->rank;
	pp.world_size = 2;
	pp.world = "nccl-gpu";
	pp.options = "nccl.inner=inproc";
	g->rc = dpl_transport_open(&dpl_transport_nccl_threads, &pp, &t);
	if (g->rc == 0)
		g->rc = dpl_transport_iallreduce(t, rq, group, 2, d, 256,
						 DPL_DTYPE_F32, DPL_MEM_CUDA, 1);
	while (g->rc == 0 && (g->rc = dpl_transport_test(t, rq)) == DPL_EAGAIN)
		g->rc = dpl_transport_progress(t);
	cudaMemcpy(g->got, d, sizeof h, cudaMemcpyDeviceToHost);
	dpl_transport_close(t);
	cudaFree(d);
	free(rq);
	return NULL;
}

Test(nccl_gpu, two_gpus_sum_as_dpl_host_sum)
{
	struct gpu_rank g[2] = {{.rank = 0}, {.rank = 1}};
	pthread_t th[2];
	float want[256], other[256];
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
		cr_skip_test("needs two GPUs");
	dpl__nccl_set_seam(NULL);
	for (int r = 0; r < 2; r++)
		pthread_create(&th[r], NULL, gpu_rank_main, &g[r]);
	for (int r = 0; r < 2; r++)
		pthread_join(th[r], NULL);
	for (int i = 0; i < 256; i++) {
		want[i] = 0.1f * (float)(i + 1);
		other[i] = 0.1f * (float)(i + 1) * 2.0f;
	}
	cr_assert_eq(dpl_host_sum(want, other, 256, DPL_DTYPE_F32), 0);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(g[r].rc, 0, "rank %d", r);
		cr_assert_eq(memcmp(g[r].got, want, sizeof want), 0,
			     "rank %d differs from dpl_host_sum", r);
	}
}
