/*
 * test_runner_half.c - BF16 and F16 gradients reduced by the runner over
 * the in-process transport (threads as ranks): the core's ring, and a
 * transport whose own allreduce refuses the dtype (the runner falls back
 * to the ring), against a sum computed here in the ring's fixed order
 * with rounding written here (double arithmetic, nearbyint); every
 * replica ends with the same bits. Plus what happens with a device that
 * cannot sum the dtype: refused at setup when the ring is sure to run,
 * the step failing when a native allreduce refused it.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/transport_inproc.h>

#include "ar_shim.h"

#define MAX_RANKS 4
#define N 103 /* not a multiple of any world size here */
#define ITERS 3

struct world;

struct rank {
	struct world *w;
	uint32_t rank;
	uint16_t g[N];
	struct dpl_buffer buf;
	int create_rc;
	int step_rc[ITERS];
	int errors;
	char msg[300];
};

struct world {
	uint32_t n;
	uint32_t dtype;
	const struct dpl_transport_ops *tops;
	const struct dpl_device_ops *dops;
	const char *name;
	dpl_schedule *sched;
	pthread_barrier_t bar;
	struct rank r[MAX_RANKS];
	uint16_t got[ITERS][MAX_RANKS][N]; /* each rank's reduced bits */
	uint64_t bytes_reduced[MAX_RANKS];
};

/* ---- the 16-bit formats, from their definitions ---------------------- */

static int frac_bits(uint32_t dtype)
{
	return dtype == DPL_DTYPE_BF16 ? 7 : 10;
}

static int bias(uint32_t dtype)
{
	return dtype == DPL_DTYPE_BF16 ? 127 : 15;
}

static bool is_nan16(uint32_t dtype, uint16_t h)
{
	int f = frac_bits(dtype);
	uint16_t emask = (uint16_t)(((1u << (15 - f)) - 1) << f);

	return (h & emask) == emask && (h & ((1u << f) - 1)) != 0;
}

static double value16(uint32_t dtype, uint16_t h)
{
	int f = frac_bits(dtype), e = (h & 0x7fff) >> f;
	double m = h & ((1u << f) - 1), v;

	if (is_nan16(dtype, h))
		return NAN;
	if (e == (1 << (15 - f)) - 1)
		v = INFINITY;
	else if (e == 0)
		v = ldexp(m, 1 - bias(dtype) - f);
	else
		v = ldexp(m + ldexp(1, f), e - bias(dtype) - f);
	return (h & 0x8000) ? -v : v;
}

/* v rounded to the format, nearest and ties to even, as a double. The
 * exact sum of two 16-bit values rounded to double and then here is the
 * correctly rounded sum (double has more than 2p + 2 bits). */
static double round16(uint32_t dtype, double v)
{
	int f = frac_bits(dtype), b = bias(dtype), e;
	double a = fabs(v), q, r;

	if (a == 0 || isinf(a) || isnan(a))
		return v;
	frexp(a, &e);
	if (e - 1 < 1 - b)
		e = 2 - b;
	q = ldexp(1, e - 1 - f);
	r = nearbyint(a / q) * q;
	if (r > ldexp(2 - ldexp(1, -f), b)) /* past the largest finite */
		r = INFINITY;
	return v < 0 ? -r : r;
}

/* ---- the gradients ---------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Element i of rank r's gradient in iteration it: a pattern with a random
 * sign and fraction and an exponent over most of the range (subnormals,
 * and F16 values large enough for sums to overflow, included); every
 * 16th a small integer, every 16th a subnormal or zero on every rank;
 * a few infinities of both signs and a NaN. */
static uint16_t grad(uint32_t dtype, uint32_t it, uint32_t r, uint32_t i)
{
	uint64_t x = mix(((uint64_t)it << 40) ^ ((uint64_t)r << 20) ^ i ^
			 ((uint64_t)dtype << 60));
	int f = frac_bits(dtype), emax = (1 << (15 - f)) - 2;
	uint32_t e, m = (uint32_t)(x & ((1u << f) - 1)), s = (x >> 20) & 1;
	double v;

	uint16_t inf = (uint16_t)(((1u << (15 - f)) - 1) << f);

	if (i % 32 == 4 && r < 2) /* +inf + -inf: NaN */
		return (uint16_t)(inf | r << 15);
	if (i % 32 == 20 && r == 1) /* the sign of infinity wins */
		return (uint16_t)(inf | (it & 1) << 15);
	if (i == 36 && r == 2)
		return (uint16_t)(inf | 1u << (f - 1)); /* a quiet NaN */
	if (i % 16 == 0) {
		v = (double)((x >> 24) % 9) - 4.0; /* exact in both */
		return dtype == DPL_DTYPE_BF16 ? dpl_f32_to_bf16((float)v)
					       : dpl_f32_to_f16((float)v);
	}
	if (dtype == DPL_DTYPE_BF16)
		e = (uint32_t)((x >> 32) % 60) + 97; /* 2^-30 .. 2^29 */
	else
		e = (uint32_t)((x >> 32) % (uint32_t)(emax + 1)); /* 0 .. 30 */
	if ((x >> 40) % 13 == 0 || i % 16 == 8)
		e = 0; /* a subnormal (or zero) */
	return (uint16_t)(s << 15 | e << f | m);
}

/* The reduced element i as the core's ring makes it: chunk c (the i-th
 * element's chunk, split as dpl__ring_chunk does) starts from replica c's
 * element and adds those of replicas c + 1, c + 2, ... (mod n) one at a
 * time, rounding after each addition (ring_allreduce.c). */
static double expect(uint32_t dtype, uint32_t it, uint32_t n, uint32_t i)
{
	uint32_t q = N / n, rem = N % n, c, j, off = 0;
	double acc;

	for (c = 0; c < n; c++) {
		uint32_t len = q + (c < rem ? 1 : 0);

		if (i < off + len)
			break;
		off += len;
	}
	acc = value16(dtype, grad(dtype, it, c, i));
	for (j = 1; j < n; j++)
		acc = round16(dtype,
			      value16(dtype, grad(dtype, it, (c + j) % n, i)) +
				      acc);
	return acc;
}

static void fill(struct rank *rk, uint32_t it)
{
	uint32_t i;

	for (i = 0; i < N; i++)
		rk->g[i] = grad(rk->w->dtype, it, rk->rank, i);
}

/* ---- the stage -------------------------------------------------------- */

static int cb_none(void *u, const struct dpl_stage_args *a)
{
	return 0;
}

static int cb_grads(void *u, uint32_t stage, const struct dpl_buffer **b,
		    size_t *n)
{
	struct rank *rk = u;

	rk->buf.ptr = rk->g;
	rk->buf.count = N;
	rk->buf.dtype = rk->w->dtype;
	rk->buf.mem = DPL_MEM_HOST;
	*b = &rk->buf;
	*n = 1;
	return 0;
}

/* Check the sum, keep its bits, and fill in the next iteration's. */
static int cb_step(void *u, uint32_t stage, uint64_t it)
{
	struct rank *rk = u;
	struct world *w = rk->w;
	uint32_t i;

	for (i = 0; i < N && it < ITERS; i++) {
		double want = expect(w->dtype, (uint32_t)it, w->n, i);
		double got = value16(w->dtype, rk->g[i]);
		bool ok = isnan(want) ? is_nan16(w->dtype, rk->g[i])
				      : got == want &&
						!signbit(got) == !signbit(want);

		if (!ok && rk->errors++ == 0)
			snprintf(rk->msg, sizeof rk->msg,
				 "rank %u iteration %u element %u: %#06x = "
				 "%a, expected %a",
				 rk->rank, (unsigned)it, i, rk->g[i], got,
				 want);
	}
	if (it < ITERS)
		memcpy(w->got[it][rk->rank], rk->g, sizeof rk->g);
	fill(rk, (uint32_t)it + 1);
	return 0;
}

static const struct dpl_stage_ops half_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "half",
	.forward = cb_none,
	.backward = cb_none,
	.grads = cb_grads,
	.step = cb_step,
};

/* ---- the world ------------------------------------------------------- */

static void *rank_main(void *arg)
{
	struct rank *rk = arg;
	struct world *w = rk->w;
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	struct dpl_runner_stats st;
	uint32_t reps[1] = {w->n}, i;
	dpl_transport *t = NULL;
	dpl_device *dev = NULL;
	dpl_runner *r = NULL;

	fill(rk, 0);
	tp.rank = rk->rank;
	tp.world_size = w->n;
	tp.world = w->name;
	rk->create_rc = dpl_transport_open(w->tops, &tp, &t);
	if (rk->create_rc == 0 && w->dops != NULL)
		rk->create_rc = dpl_device_open(w->dops, NULL, &dev);
	if (rk->create_rc == 0) {
		rp.schedule = w->sched;
		rp.replicas = reps;
		rp.rank = rk->rank;
		rp.timeout_ms = 20000;
		rp.batch = 8;
		rp.stage_ops = &half_ops;
		rp.stage_user = rk;
		rp.transport = t;
		rp.device = dev;
		rk->create_rc = dpl_runner_create(&rp, &r);
	}
	if (rk->create_rc != 0)
		snprintf(rk->msg, sizeof rk->msg, "%s", dpl_last_error());
	pthread_barrier_wait(&w->bar);
	for (i = 0; r != NULL && i < ITERS; i++) {
		rk->step_rc[i] = dpl_runner_step(r);
		if (rk->step_rc[i] != 0) {
			snprintf(rk->msg, sizeof rk->msg, "%s",
				 dpl_last_error());
			break;
		}
	}
	if (r != NULL) {
		dpl_runner_stats(r, &st);
		w->bytes_reduced[rk->rank] = st.bytes_reduced;
	}
	pthread_barrier_wait(&w->bar);
	dpl_runner_destroy(r);
	pthread_barrier_wait(&w->bar);
	dpl_transport_close(t);
	dpl_device_close(dev);
	return NULL;
}

static struct world *run(uint32_t n, uint32_t dtype,
			 const struct dpl_transport_ops *tops,
			 const struct dpl_device_ops *dops, const char *name)
{
	struct dpl_schedule_params sp = {0};
	struct world *w = calloc(1, sizeof *w);
	pthread_t th[MAX_RANKS];
	uint32_t i, world = 0, reps[1] = {n};

	cr_assert_not_null(w);
	cr_assert_eq(fegetround(), FE_TONEAREST);
	w->n = n;
	w->dtype = dtype;
	w->tops = tops;
	w->dops = dops;
	w->name = name;
	sp.stages = 1;
	sp.microbatches = 2;
	sp.policy = DPL_POLICY_GPIPE;
	cr_assert_eq(dpl_schedule_build(&sp, &w->sched), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_schedule_lower(w->sched), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_runner_world_size(w->sched, reps, &world), 0);
	cr_assert_eq(world, n);
	pthread_barrier_init(&w->bar, NULL, n);
	for (i = 0; i < n; i++) {
		w->r[i].w = w;
		w->r[i].rank = i;
		pthread_create(&th[i], NULL, rank_main, &w->r[i]);
	}
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&w->bar);
	dpl_schedule_destroy(w->sched);
	return w;
}

/* Every rank stepped, saw the expected sums, and holds the same bits. */
static void check(struct world *w)
{
	uint32_t i, it, k, nan = 0, inf = 0, sub = 0;

	for (i = 0; i < w->n; i++) {
		struct rank *rk = &w->r[i];

		cr_assert_eq(rk->create_rc, 0, "%s: rank %u create: %s",
			     w->name, i, rk->msg);
		for (it = 0; it < ITERS; it++)
			cr_assert_eq(rk->step_rc[it], 0, "%s: rank %u: %s",
				     w->name, i, rk->msg);
		cr_assert_eq(rk->errors, 0, "%s: %d wrong, first %s",
			     w->name, rk->errors, rk->msg);
		cr_assert_eq(w->bytes_reduced[i], (uint64_t)ITERS * N * 2);
		for (it = 0; it < ITERS; it++)
			cr_assert_eq(memcmp(w->got[it][i], w->got[it][0],
					    sizeof w->got[it][0]),
				     0, "%s: rank %u differs from rank 0",
				     w->name, i);
	}
	/* The values reached the corners the test means to cover. */
	for (it = 0; it < ITERS; it++)
		for (k = 0; k < N; k++) {
			uint16_t h = w->got[it][0][k];
			int f = frac_bits(w->dtype);

			nan += is_nan16(w->dtype, h);
			inf += isinf(value16(w->dtype, h));
			sub += (h & 0x7fff) >> f == 0 && (h & 0x7fff) != 0;
		}
	cr_log_info("%s: %u NaN, %u infinite, %u subnormal sums", w->name, nan,
		    inf, sub);
	free(w);
}

Test(runner_half, bf16_over_a_ring_of_4, .timeout = 60)
{
	check(run(4, DPL_DTYPE_BF16, &dpl_transport_inproc, NULL, "bf16-4"));
}

Test(runner_half, f16_over_a_ring_of_3, .timeout = 60)
{
	check(run(3, DPL_DTYPE_F16, &dpl_transport_inproc, NULL, "f16-3"));
}

Test(runner_half, f16_over_a_ring_of_4, .timeout = 60)
{
	check(run(4, DPL_DTYPE_F16, &dpl_transport_inproc, NULL, "f16-4"));
}

/* The shim's allreduce takes F64 only: it refuses with DPL_ENOTSUP, and
 * the runner reduces with the ring instead, the same bits. */
Test(runner_half, a_refusing_native_allreduce_falls_back_to_the_ring,
     .timeout = 60)
{
	const struct dpl_transport_ops *shim = dpl_test_ar_shim();
	unsigned before = atomic_load(&dpl_test_ar_calls);

	check(run(4, DPL_DTYPE_BF16, shim, NULL, "bf16-shim"));
	check(run(3, DPL_DTYPE_F16, shim, NULL, "f16-shim"));
	cr_assert_eq(atomic_load(&dpl_test_ar_calls), before,
		     "the shim accepted a 16-bit allreduce");
}

/* A host device whose sum knows F64 only. */
static int f64_only_sum(void *ctx, void *dst, const void *src, size_t count,
			uint32_t dtype)
{
	if (dtype != DPL_DTYPE_F64)
		return dpl_set_error(DPL_ENOTSUP, "f64-only: dtype %u", dtype);
	return dpl_device_host.sum(ctx, dst, src, count, dtype);
}

Test(runner_half, a_device_that_cannot_sum_the_dtype_is_refused_at_setup,
     .timeout = 60)
{
	static struct dpl_device_ops f64_only;
	struct world *w;
	uint32_t i;

	f64_only = dpl_device_host;
	f64_only.name = "f64-only";
	f64_only.sum = f64_only_sum;
	w = run(2, DPL_DTYPE_BF16, &dpl_transport_inproc, &f64_only,
		"bf16-f64-only");
	for (i = 0; i < 2; i++) {
		cr_assert_eq(w->r[i].create_rc, DPL_ENOTSUP, "rank %u: %s", i,
			     w->r[i].msg);
		cr_assert(strstr(w->r[i].msg, "cannot sum gradient dtype 2"),
			  "%s", w->r[i].msg);
	}
	free(w);
	/* With a native allreduce the ring may never run, so setup does not
	 * ask; when the transport refuses the dtype the ring's first sum
	 * fails the step instead. */
	w = run(2, DPL_DTYPE_BF16, dpl_test_ar_shim(), &f64_only,
		"bf16-shim-f64-only");
	for (i = 0; i < 2; i++) {
		cr_assert_eq(w->r[i].create_rc, 0, "rank %u: %s", i,
			     w->r[i].msg);
		cr_assert(w->r[i].step_rc[0] == DPL_ENOTSUP ||
				  w->r[i].step_rc[0] == DPL_EPEER,
			  "rank %u: %s (%s)", i,
			  dpl_err_name(w->r[i].step_rc[0]), w->r[i].msg);
	}
	cr_assert(w->r[0].step_rc[0] == DPL_ENOTSUP ||
		  w->r[1].step_rc[0] == DPL_ENOTSUP);
	free(w);
}
