/*
 * test_runner_cap.c - dpl_runner_create() refuses a schedule whose
 * activation buffers exceed the byte cap of a stage (struct
 * dpl_runner_params.cap_bytes): a cap just at the need passes, one byte
 * less fails with a message naming the stage, the bytes needed, the cap
 * and the in-flight bound; NULL caps and 0 entries mean no cap; only the
 * stages of this rank are checked.
 *
 * The needs are worked out by hand from the lowered lists (written out
 * below) and the buffer layout documented in <dpl/runner.h>: one buffer
 * set per micro-batch alive from its first RECV_F/F/RECV_B to its B and,
 * with a remote previous stage, its SEND_B; a set holds the input and
 * output activations and their gradients (those that apply), each
 * rounded up to 64 bytes.
 */
#include <criterion/criterion.h>
#include <string.h>

#include <dpl/dpl.h>

/* A transport that delivers nothing: enough to create runners. */
static int nop_init(void *ctx, const struct dpl_transport_params *p)
{
	(void)ctx;
	(void)p;
	return 0;
}
static void nop_fini(void *ctx)
{
	(void)ctx;
}
static int nop_send(void *ctx, void *req, uint32_t peer, uint64_t tag,
		    const void *buf, size_t len, uint32_t mem)
{
	(void)ctx, (void)req, (void)peer, (void)tag, (void)buf, (void)len,
		(void)mem;
	return DPL_ENOTSUP;
}
static int nop_recv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		    void *buf, size_t len, uint32_t mem)
{
	(void)ctx, (void)peer, (void)tag, (void)buf, (void)len, (void)mem;
	*(int *)req = DPL_EAGAIN;
	return 0;
}
static int nop_test(void *ctx, void *req)
{
	(void)ctx;
	return *(int *)req;
}
static int nop_cancel(void *ctx, void *req)
{
	(void)ctx;
	*(int *)req = DPL_ECANCELED;
	return 0;
}
static int nop_progress(void *ctx)
{
	(void)ctx;
	return 0;
}

static const struct dpl_transport_ops nop = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "nop",
	.ctx_size = 16,
	.req_size = 8,
	.init = nop_init,
	.fini = nop_fini,
	.isend = nop_send,
	.irecv = nop_recv,
	.test = nop_test,
	.progress = nop_progress,
	.cancel = nop_cancel,
};

static int cb_ok(void *u, const struct dpl_stage_args *a)
{
	(void)u;
	(void)a;
	return 0;
}
static int cb_grads(void *u, uint32_t s, const struct dpl_buffer **b,
		    size_t *n)
{
	static double g[2];
	static const struct dpl_buffer buf = {g, 2, DPL_DTYPE_F64, 0};

	(void)u;
	(void)s;
	*b = &buf;
	*n = 1;
	return 0;
}
static int cb_step(void *u, uint32_t s, uint64_t it)
{
	(void)u, (void)s, (void)it;
	return 0;
}

static const struct dpl_stage_ops ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.forward = cb_ok,
	.backward = cb_ok,
	.grads = cb_grads,
	.step = cb_step,
};

struct fixture {
	dpl_schedule *s;
	dpl_transport *t;
	struct dpl_runner_params p;
};

/* World rank `rank` of a one-replica layout of `pol` on `ranks` ranks,
 * M = 4, a batch of 8 (2 samples per micro-batch). */
static void setup(struct fixture *f, enum dpl_policy pol, uint32_t ranks,
		  uint32_t chunks, uint32_t rank, const uint64_t *act)
{
	struct dpl_schedule_params sp = {0};
	struct dpl_transport_params tp = {0};

	memset(f, 0, sizeof *f);
	sp.stages = ranks;
	sp.microbatches = 4;
	sp.policy = pol;
	sp.chunks = chunks;
	cr_assert_eq(dpl_schedule_build(&sp, &f->s), 0, "%s",
		     dpl_last_error());
	cr_assert_eq(dpl_schedule_lower(f->s), 0);
	tp.rank = rank;
	tp.world_size = ranks;
	cr_assert_eq(dpl_transport_open(&nop, &tp, &f->t), 0);
	f->p.schedule = f->s;
	f->p.rank = rank;
	f->p.batch = 8;
	f->p.activation_bytes = act;
	f->p.stage_ops = &ops;
	f->p.transport = f->t;
}

static void teardown(struct fixture *f)
{
	dpl_transport_close(f->t);
	dpl_schedule_destroy(f->s);
}

/* Create with `caps`; expect success and return the runner. */
static dpl_runner *create_ok(struct fixture *f, const uint64_t *caps)
{
	dpl_runner *r = NULL;

	f->p.cap_bytes = caps;
	cr_assert_eq(dpl_runner_create(&f->p, &r), 0, "%s", dpl_last_error());
	cr_assert_not_null(r);
	return r;
}

/* Create with `caps`; expect DPL_EINVAL, nothing written to *out, and
 * every piece of `want` in the message. */
static void create_refused(struct fixture *f, const uint64_t *caps,
			   const char *const *want, size_t nwant)
{
	dpl_runner *r = (dpl_runner *)&r; /* must stay as it is */
	size_t i;

	f->p.cap_bytes = caps;
	cr_assert_eq(dpl_runner_create(&f->p, &r), DPL_EINVAL);
	cr_assert_eq((void *)r, (void *)&r, "*out written on failure");
	for (i = 0; i < nwant; i++)
		cr_assert(strstr(dpl_last_error(), want[i]) != NULL,
			  "'%s' not in: %s", want[i], dpl_last_error());
}

/*
 * 1f1b, S = 2, rank 0 (stage 0, next stage remote):
 *   0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0F2,...
 * at most 2 micro-batches hold a set (0 and 1 until 0B0): 2 sets. A set
 * is the output and its gradient: 2 x round64(2 samples x 100) = 512.
 * Need: 1024 bytes.
 */
Test(runner_cap, first_stage_cap_at_the_need_passes_one_less_fails)
{
	static const uint64_t act[2] = {100, 0};
	static const uint64_t at[2] = {1024, 0}, less[2] = {1023, 0};
	static const char *const want[] = {
		"stage 0", "need 1024 bytes", "2 buffer sets of 512 bytes",
		"up to 2 micro-batches in flight", "cap of 1023 bytes"};
	struct dpl_runner_stage_stats ss;
	struct fixture f;
	dpl_runner *r;

	setup(&f, DPL_POLICY_1F1B, 2, 0, 0, act);
	r = create_ok(&f, at);
	cr_assert_eq(dpl_runner_stage_stats(r, 0, &ss), 0);
	cr_assert_eq(ss.slots, 2);
	cr_assert_eq(ss.slot_bytes, 512);
	dpl_runner_destroy(r);
	create_refused(&f, less, want, sizeof want / sizeof want[0]);
	teardown(&f);
}

/*
 * 1f1b, S = 3, rank 1 (stage 1, both neighbours remote):
 *   1RECV_F0,1RECV_F1,1F0,1SEND_F0,1RECV_B0,1RECV_F2,1F1,1SEND_F1,
 *   1B0,1SEND_B0,...
 * micro-batches 0, 1 and 2 hold sets at once (the receive of 2 is posted
 * ahead) although at most 2 are alive from F to B: 3 sets. A set holds
 * input activations and their gradient, 2 x round64(2 x 100) = 512, and
 * output activations and their gradient, 2 x round64(2 x 40) = 256:
 * 768 bytes. Need: 2304 bytes; the bound is 2.
 */
Test(runner_cap, middle_stage_counts_receives_posted_ahead)
{
	static const uint64_t act[3] = {100, 40, 0};
	static const uint64_t at[3] = {0, 2304, 0}, less[3] = {0, 2303, 0};
	static const char *const want[] = {
		"stage 1", "need 2304 bytes", "3 buffer sets of 768 bytes",
		"up to 2 micro-batches in flight", "cap of 2303 bytes"};
	struct dpl_runner_stage_stats ss;
	struct fixture f;
	dpl_runner *r;

	setup(&f, DPL_POLICY_1F1B, 3, 0, 1, act);
	r = create_ok(&f, at);
	cr_assert_eq(dpl_runner_stage_stats(r, 1, &ss), 0);
	cr_assert_eq(ss.slots, 3);
	cr_assert_eq(ss.slot_bytes, 768);
	dpl_runner_destroy(r);
	create_refused(&f, less, want, sizeof want / sizeof want[0]);
	teardown(&f);
}

/* NULL caps and caps of 0 are no caps, however large the buffers. */
Test(runner_cap, null_caps_and_zero_entries_mean_no_cap)
{
	static const uint64_t act[3] = {1u << 20, 1u << 20, 0};
	static const uint64_t zero[3] = {0, 0, 0};
	struct fixture f;

	setup(&f, DPL_POLICY_1F1B, 3, 0, 1, act);
	dpl_runner_destroy(create_ok(&f, NULL));
	dpl_runner_destroy(create_ok(&f, zero));
	teardown(&f);
}

/*
 * interleaved, 2 ranks, V = 2: rank 0 runs stages 0 and 2.
 *   stage 0: 0F0,0F1,0F2,0F3 before 0B0: 4 sets of
 *            2 x round64(2 x 100) = 512 bytes: 2048;
 *   stage 2: 2RECV_F0,2RECV_F1,2F0,2F1,2RECV_B0,2B0,2SEND_B0,2RECV_B1,
 *            2RECV_F2,2B1,2SEND_B1,...: 2 sets of 4 x 256 = 1024: 2048,
 *            and 2 alive from F to B.
 * Caps of the stages rank 1 runs (1 and 3) do not apply to rank 0.
 */
Test(runner_cap, each_stage_of_the_rank_is_checked_against_its_own_cap)
{
	static const uint64_t act[4] = {100, 100, 100, 0};
	static const uint64_t fit[4] = {2048, 1, 2048, 1};
	static const uint64_t third[4] = {2048, 1, 2047, 1};
	static const uint64_t first[4] = {2047, 0, 0, 0};
	static const char *const want2[] = {
		"stage 2", "need 2048 bytes", "2 buffer sets of 1024 bytes",
		"up to 2 micro-batches in flight", "cap of 2047 bytes"};
	static const char *const want0[] = {
		"stage 0", "need 2048 bytes", "4 buffer sets of 512 bytes",
		"up to 4 micro-batches in flight", "cap of 2047 bytes"};
	struct fixture f;

	setup(&f, DPL_POLICY_INTERLEAVED, 2, 2, 0, act);
	dpl_runner_destroy(create_ok(&f, fit));
	create_refused(&f, third, want2, sizeof want2 / sizeof want2[0]);
	create_refused(&f, first, want0, sizeof want0 / sizeof want0[0]);
	teardown(&f);
}
