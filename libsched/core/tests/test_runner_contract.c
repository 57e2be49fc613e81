/*
 * test_runner_contract.c - the core side of the runner's contracts,
 * without a real transport: sample splits, layouts, the checks of
 * dpl_transport_open and dpl_device_open on malformed tables, the host
 * device, the ring's chunking, and dpl_runner_create's parameter checks.
 */
#include <criterion/criterion.h>
#include <string.h>

#include <dpl/dpl.h>

#include "runner_internal.h"

Test(split, pieces_differ_by_at_most_one_larger_first)
{
	uint64_t b, e, prev_end = 0, sizes[4];
	uint32_t i;

	for (i = 0; i < 4; i++) {
		cr_assert_eq(dpl_split(10, 4, i, &b, &e), 0);
		cr_assert_eq(b, prev_end);
		sizes[i] = e - b;
		prev_end = e;
	}
	cr_assert_eq(prev_end, 10);
	cr_assert_eq(sizes[0], 3);
	cr_assert_eq(sizes[1], 3);
	cr_assert_eq(sizes[2], 2);
	cr_assert_eq(sizes[3], 2);
	cr_assert_eq(dpl_split(2, 3, 2, &b, &e), 0);
	cr_assert_eq(b, 2);
	cr_assert_eq(e, 2); /* empty piece */
	cr_assert_eq(dpl_split(5, 0, 0, &b, &e), DPL_EINVAL);
	cr_assert_eq(dpl_split(5, 2, 2, &b, &e), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "part 2 of 2") != NULL);
}

static dpl_schedule *lowered(enum dpl_policy pol, uint32_t s, uint32_t m)
{
	struct dpl_schedule_params p = {0};
	dpl_schedule *sc = NULL;

	p.stages = s;
	p.microbatches = m;
	p.policy = pol;
	cr_assert_eq(dpl_schedule_build(&p, &sc), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_schedule_lower(sc), 0);
	return sc;
}

Test(layout, world_ranks_number_replicas_rank_by_rank)
{
	dpl_schedule *s = lowered(DPL_POLICY_1F1B, 3, 4);
	uint32_t reps[3] = {2, 1, 3}, bad[3] = {2, 0, 1}, w, p, r;

	cr_assert_eq(dpl_runner_world_size(s, reps, &w), 0);
	cr_assert_eq(w, 6);
	cr_assert_eq(dpl_runner_world_size(s, NULL, &w), 0);
	cr_assert_eq(w, 3);
	cr_assert_eq(dpl_runner_position(s, reps, 2, &p, &r), 0);
	cr_assert_eq(p, 1);
	cr_assert_eq(r, 0);
	cr_assert_eq(dpl_runner_position(s, reps, 5, &p, &r), 0);
	cr_assert_eq(p, 2);
	cr_assert_eq(r, 2);
	cr_assert_eq(dpl_runner_position(s, reps, 6, &p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "rank 6") != NULL);
	cr_assert_eq(dpl_runner_world_size(s, bad, &w), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "pipeline rank 1") != NULL);
	dpl_schedule_destroy(s);
}

/* A transport that delivers nothing: receives stay pending until
 * cancelled, sends are refused. Enough to open handles and runners. */
static int nop_init(void *ctx, const struct dpl_transport_params *p)
{
	return p->options && strcmp(p->options, "fail") == 0 ? DPL_EIO : 0;
}
static void nop_fini(void *ctx)
{
}
static int nop_post(void *ctx, void *req, uint32_t peer, uint64_t tag,
		    const void *buf, size_t len, uint32_t mem)
{
	return DPL_ENOTSUP;
}
static int nop_recv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		    void *buf, size_t len, uint32_t mem)
{
	*(int *)req = DPL_EAGAIN;
	return 0;
}
static int nop_req(void *ctx, void *req)
{
	return *(int *)req;
}
static int nop_cancel(void *ctx, void *req)
{
	*(int *)req = DPL_ECANCELED;
	return 0;
}
static int nop_progress(void *ctx)
{
	return 0;
}
static int nop_wait(void *ctx, uint64_t ns)
{
	return 0;
}
static int nop_event(void *ctx, void *ev)
{
	return 0;
}

static struct dpl_transport_ops nop = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "nop",
	.ctx_size = 16,
	.req_size = 8,
	.init = nop_init,
	.fini = nop_fini,
	.isend = nop_post,
	.irecv = nop_recv,
	.test = nop_req,
	.progress = nop_progress,
	.cancel = nop_cancel,
};

Test(transport_open, checks_version_size_members_and_rank)
{
	struct dpl_transport_params p = {0};
	struct dpl_transport_ops o = nop;
	dpl_transport *t = NULL;

	p.rank = 1;
	p.world_size = 2;
	cr_assert_eq(dpl_transport_open(&o, &p, &t), 0);
	cr_assert_eq(dpl_transport_rank(t), 1);
	cr_assert_eq(dpl_transport_world_size(t), 2);
	cr_assert_eq(dpl_transport_ops(t), &o);
	cr_assert_not_null(dpl_transport_ctx(t));
	dpl_transport_close(t);
	t = NULL;
	o.abi_version = 99;
	cr_assert_eq(dpl_transport_open(&o, &p, &t), DPL_EABI);
	cr_assert(strstr(dpl_last_error(), "abi_version 99") != NULL);
	o = nop;
	o.size = offsetof(struct dpl_transport_ops, progress);
	cr_assert_eq(dpl_transport_open(&o, &p, &t), DPL_EABI);
	o = nop;
	o.cancel = NULL;
	cr_assert_eq(dpl_transport_open(&o, &p, &t), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "cancel is NULL") != NULL);
	o = nop;
	o.req_size = 0;
	cr_assert_eq(dpl_transport_open(&o, &p, &t), DPL_EINVAL);
	o = nop;
	p.rank = 2;
	cr_assert_eq(dpl_transport_open(&o, &p, &t), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "rank 2 out of range") != NULL);
	p.rank = 0;
	p.options = "fail";
	cr_assert_eq(dpl_transport_open(&o, &p, &t), DPL_EIO);
	cr_assert(strstr(dpl_last_error(), "nop: init of rank 0") != NULL,
		  "%s", dpl_last_error());
	cr_assert_null(t);
	/* Optional members: absent when the table is too short for them. */
	o = nop;
	o.wait = nop_wait;
	cr_assert(DPL_HAS_OP(&o, wait));
	o.size = offsetof(struct dpl_transport_ops, wait);
	cr_assert(!DPL_HAS_OP(&o, wait));
}

Test(device_open, checks_the_table_and_host_memory_works)
{
	struct dpl_device_ops o = dpl_device_host;
	dpl_device *d = NULL;
	double a[2] = {1, 2}, b[2] = {3, 5};
	void *p = NULL;

	cr_assert_eq(dpl_device_open(&dpl_device_host, NULL, &d), 0);
	cr_assert_eq(dpl_device_alloc(d, 100, &p), 0);
	cr_assert_eq((uintptr_t)p % 64, 0);
	cr_assert_eq(dpl_device_copy(d, p, a, sizeof a), 0);
	cr_assert_eq(memcmp(p, a, sizeof a), 0);
	cr_assert_eq(dpl_device_alloc(d, 0, &p), DPL_EINVAL);
	dpl_device_free(d, p);
	cr_assert_eq(dpl_device_host.sum(NULL, a, b, 2, DPL_DTYPE_F64), 0);
	cr_assert_eq(a[1], 7.0);
	cr_assert_eq(dpl_device_host.sum(NULL, a, b, 2, 5), DPL_ENOTSUP);
	dpl_device_close(d);
	o.sum = NULL;
	cr_assert_eq(dpl_device_open(&o, NULL, &d), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "sum is NULL") != NULL);
	o = dpl_device_host;
	o.event_record = nop_event;
	cr_assert_eq(dpl_device_open(&o, NULL, &d), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "all four") != NULL);
	o = dpl_device_host;
	o.abi_version = 0;
	cr_assert_eq(dpl_device_open(&o, NULL, &d), DPL_EABI);
	cr_assert_eq(dpl_dtype_size(DPL_DTYPE_F32), 4);
	cr_assert_eq(dpl_dtype_size(DPL_DTYPE_F64), 8);
	cr_assert_eq(dpl_dtype_size(7), 0);
}

Test(ring, chunks_cover_the_vector_in_order)
{
	size_t off, len, next = 0;
	uint32_t c;

	for (c = 0; c < 4; c++) {
		dpl__ring_chunk(10, 4, c, &off, &len);
		cr_assert_eq(off, next);
		cr_assert_eq(len, c < 2 ? 3u : 2u);
		next = off + len;
	}
	cr_assert_eq(next, 10);
	dpl__ring_chunk(2, 3, 2, &off, &len);
	cr_assert_eq(len, 0);
	cr_assert_eq(off, 2);
}

Test(tags, fields_do_not_overlap_and_fit_the_caller_bits)
{
	uint64_t t = dpl__tag(DPL__TAG_CTRL, 255, DPL__TAG_STAGE_LIMIT - 1,
			      DPL__TAG_INDEX_LIMIT - 1);

	cr_assert_leq(t, DPL_TAG_MAX);
	cr_assert_neq(dpl__tag(DPL__TAG_ACT, 0, 1, 0),
		      dpl__tag(DPL__TAG_ACT, 0, 0, 1));
	cr_assert_neq(dpl__tag(DPL__TAG_ACT, 1, 0, 0),
		      dpl__tag(DPL__TAG_GRAD, 0, 0, 0));
	cr_assert_eq(dpl__tag(DPL__TAG_ACT, 256, 3, 4),
		     dpl__tag(DPL__TAG_ACT, 0, 3, 4));
}

static int cb_ok(void *u, const struct dpl_stage_args *a)
{
	return 0;
}
static int cb_grads(void *u, uint32_t s, const struct dpl_buffer **b,
		    size_t *n)
{
	static double g[4];
	static struct dpl_buffer bufs[2] = {{g, 2, DPL_DTYPE_F64, 0},
					    {g + 2, 2, DPL_DTYPE_F32, 0}};

	*b = bufs;
	*n = u ? 2 : 1; /* user != NULL: mixed dtypes */
	return 0;
}
static int cb_step(void *u, uint32_t s, uint64_t it)
{
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

Test(runner_create, rejects_bad_parameters_with_the_reason)
{
	dpl_schedule *s = lowered(DPL_POLICY_1F1B, 2, 4), *raw = NULL;
	struct dpl_schedule_params sp = {0};
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params p = {0};
	struct dpl_stage_ops no_split = ops;
	uint32_t reps[2] = {1, 2}, zero[2] = {1, 0};
	dpl_transport *t = NULL;
	dpl_runner *r = NULL;
	int one = 1;

	tp.rank = 0;
	tp.world_size = 3;
	cr_assert_eq(dpl_transport_open(&nop, &tp, &t), 0);
	p.schedule = s;
	p.replicas = reps;
	p.batch = 8;
	p.stage_ops = &ops;
	p.transport = t;
	/* A world of 3 needs a rank-0 transport of 3: this is fine. */
	cr_assert_eq(dpl_runner_create(&p, &r), 0, "%s", dpl_last_error());
	dpl_runner_destroy(r);
	r = NULL;
	p.rank = 1;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "transport is rank 0 of 3") != NULL,
		  "%s", dpl_last_error());
	p.rank = 0;
	p.replicas = zero;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "must be >= 1 (got 0)") != NULL);
	p.replicas = NULL;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "layout needs rank 0 of 2") != NULL,
		  "%s", dpl_last_error());
	p.replicas = reps;
	p.batch = 3;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "batch 3 < microbatches 4") != NULL);
	p.batch = 8;
	p.stage_user = &one;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "dtype") != NULL, "%s",
		  dpl_last_error());
	p.stage_user = NULL;
	p.transport = NULL;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "transport is NULL") != NULL);
	p.transport = t;
	sp.stages = 2;
	sp.microbatches = 4;
	sp.policy = DPL_POLICY_1F1B;
	cr_assert_eq(dpl_schedule_build(&sp, &raw), 0);
	p.schedule = raw;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "not lowered") != NULL);
	dpl_schedule_destroy(raw);
	raw = NULL;
	sp.policy = DPL_POLICY_ZB_H1;
	cr_assert_eq(dpl_schedule_build(&sp, &raw), 0);
	cr_assert_eq(dpl_schedule_lower(raw), 0);
	p.schedule = raw;
	no_split.backward = NULL;
	p.stage_ops = &no_split;
	cr_assert_eq(dpl_runner_create(&p, &r), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "backward_input") != NULL);
	cr_assert_null(r);
	dpl_schedule_destroy(raw);
	dpl_schedule_destroy(s);
	dpl_transport_close(t);
}

Test(runner_create, a_lone_rank_needs_no_transport_and_steps)
{
	dpl_schedule *s = lowered(DPL_POLICY_GPIPE, 1, 3);
	struct dpl_runner_params p = {0};
	struct dpl_runner_stats st;
	struct dpl_runner_stage_stats ss;
	dpl_runner *r = NULL;

	p.schedule = s;
	p.batch = 5;
	p.stage_ops = &ops;
	cr_assert_eq(dpl_runner_create(&p, &r), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_runner_step(r), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_runner_step(r), 0);
	dpl_runner_stats(r, &st);
	cr_assert_eq(st.iterations, 2);
	cr_assert_eq(st.count[DPL_ACT_F], 6);
	cr_assert_eq(st.count[DPL_ACT_STEP], 2);
	cr_assert_eq(st.bytes_sent, 0);
	cr_assert_eq(dpl_runner_stage_stats(r, 0, &ss), 0);
	cr_assert_eq(ss.peak_inflight, 3); /* gpipe keeps all 3 alive */
	cr_assert_eq(ss.peak_inflight, dpl_schedule_bound(s, 0));
	cr_assert_eq(dpl_runner_stage_stats(r, 1, &ss), DPL_EINVAL);
	cr_assert_str_eq(dpl_runner_last_error(r), "");
	cr_assert_eq(dpl_runner_cause(r), DPL_RUNNER_NO_RANK);
	dpl_runner_destroy(r);
	dpl_schedule_destroy(s);
}

/* A device whose work completes on the third look: host memory plus
 * events, counting records and queries. */
static int ev_records, ev_queries;

static int ev_create(void *ctx, void *ev)
{
	*(int *)ev = 0;
	return 0;
}
static void ev_destroy(void *ctx, void *ev)
{
}
static int ev_record(void *ctx, void *ev)
{
	*(int *)ev = 2;
	ev_records++;
	return 0;
}
static int ev_query(void *ctx, void *ev)
{
	ev_queries++;
	return (*(int *)ev)-- > 0 ? DPL_EAGAIN : 0;
}

Test(runner_create, async_devices_are_waited_for_after_each_callback)
{
	dpl_schedule *s = lowered(DPL_POLICY_1F1B, 1, 3);
	struct dpl_device_ops o = dpl_device_host;
	struct dpl_runner_params p = {0};
	dpl_device *d = NULL;
	dpl_runner *r = NULL;

	o.name = "async-host";
	o.caps |= DPL_DEVICE_CAP_ASYNC;
	o.event_size = sizeof(int);
	o.event_create = ev_create;
	o.event_destroy = ev_destroy;
	o.event_record = ev_record;
	o.event_query = ev_query;
	cr_assert_eq(dpl_device_open(&o, NULL, &d), 0, "%s", dpl_last_error());
	p.schedule = s;
	p.batch = 3;
	p.stage_ops = &ops;
	p.device = d;
	cr_assert_eq(dpl_runner_create(&p, &r), 0, "%s", dpl_last_error());
	cr_assert_eq(dpl_runner_step(r), 0, "%s", dpl_last_error());
	/* 3 forwards and 3 backwards, each waited for: two busy looks and
	 * one done per event. */
	cr_assert_eq(ev_records, 6);
	cr_assert_eq(ev_queries, 18);
	dpl_runner_destroy(r);
	dpl_device_close(d);
	dpl_schedule_destroy(s);
}

/* A transport whose requests end only when cancelled, one progress call
 * later (as when the peer has to answer the cancel); it logs cancels
 * and tests in order. */
#define LOG_MAX 4096
static char rec_log[LOG_MAX]; /* 'c' cancel, 't' test of a cancelled
				 request still pending */
static int rec_n;

struct rec_req {
	int status;
	int cancelled; /* 1: asked, 2: ends at the next progress */
};

static struct rec_req *rec_live[256];
static int rec_nlive;

static int rec_post(void *ctx, void *req)
{
	struct rec_req *q = req;

	q->status = DPL_EAGAIN;
	q->cancelled = 0;
	if (rec_nlive < 256)
		rec_live[rec_nlive++] = q;
	return 0;
}
static int rec_send(void *ctx, void *req, uint32_t peer, uint64_t tag,
		    const void *buf, size_t len, uint32_t mem)
{
	return rec_post(ctx, req);
}
static int rec_recv(void *ctx, void *req, uint32_t peer, uint64_t tag,
		    void *buf, size_t len, uint32_t mem)
{
	return rec_post(ctx, req);
}
static int rec_test(void *ctx, void *req)
{
	struct rec_req *q = req;

	if (q->cancelled && q->status == DPL_EAGAIN && rec_n < LOG_MAX)
		rec_log[rec_n++] = 't';
	return q->status;
}
static int rec_cancel(void *ctx, void *req)
{
	struct rec_req *q = req;

	if (q->status != DPL_EAGAIN)
		return DPL_EINVAL;
	if (rec_n < LOG_MAX)
		rec_log[rec_n++] = 'c';
	if (!q->cancelled)
		q->cancelled = 1;
	return 0;
}
static int rec_progress(void *ctx)
{
	int i, n = 0;

	for (i = 0; i < rec_nlive; i++) {
		struct rec_req *q = rec_live[i];

		if (q->status != DPL_EAGAIN)
			continue;
		if (q->cancelled == 2) {
			q->status = DPL_ECANCELED;
			n++;
		} else if (q->cancelled == 1) {
			q->cancelled = 2;
		}
	}
	return n;
}

static struct dpl_transport_ops rec = {
	.abi_version = DPL_TRANSPORT_ABI_VERSION,
	.size = sizeof(struct dpl_transport_ops),
	.name = "rec",
	.ctx_size = 16,
	.req_size = sizeof(struct rec_req),
	.init = nop_init,
	.fini = nop_fini,
	.isend = rec_send,
	.irecv = rec_recv,
	.test = rec_test,
	.progress = rec_progress,
	.cancel = rec_cancel,
};

/* Rank 0 of two stages times out waiting for rank 1 with sends and
 * receives pending: every one of them is cancelled before the runner
 * waits for any (a peer that must answer each cancel would otherwise be
 * asked one at a time), each is cancelled once, and all come back. */
Test(runner_fail, cancels_every_request_before_waiting_for_one)
{
	dpl_schedule *s = lowered(DPL_POLICY_1F1B, 2, 4);
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params p = {0};
	dpl_transport *t = NULL;
	dpl_runner *r = NULL;
	int i, ncancel = 0, first_t = -1, last_c = -1, pending = 0;

	tp.rank = 0;
	tp.world_size = 2;
	cr_assert_eq(dpl_transport_open(&rec, &tp, &t), 0, "%s",
		     dpl_last_error());
	p.schedule = s;
	p.batch = 4;
	p.stage_ops = &ops;
	p.transport = t;
	p.timeout_ms = 50;
	cr_assert_eq(dpl_runner_create(&p, &r), 0, "%s", dpl_last_error());
	rec_n = 0;
	cr_assert_eq(dpl_runner_step(r), DPL_ETIMEDOUT, "%s",
		     dpl_last_error());
	for (i = 0; i < rec_n; i++) {
		if (rec_log[i] == 'c') {
			ncancel++;
			last_c = i;
		} else if (first_t < 0) {
			first_t = i;
		}
	}
	cr_assert_geq(ncancel, 2, "only %d requests cancelled", ncancel);
	cr_assert(first_t < 0 || first_t > last_c,
		  "a cancelled request was waited for (log position %d) "
		  "before the last cancel (%d): %.*s", first_t, last_c, rec_n,
		  rec_log);
	for (i = 0; i < rec_nlive; i++)
		pending += rec_live[i]->status == DPL_EAGAIN &&
			   rec_live[i]->cancelled != 0;
	cr_assert_eq(pending, 0, "%d cancelled requests never collected",
		     pending);
	dpl_runner_destroy(r);
	dpl_transport_close(t);
	dpl_schedule_destroy(s);
}

Test(wait, yield_window_follows_most_of_the_recent_waits)
{
	int8_t s = 0;
	int i;

	/* A new runner yields the long window. */
	cr_assert_eq(dpl__yield_window(s), DPL__YIELD_NS);
	/* 2 ms exactly ended within the window: not a long wait. */
	s = dpl__wait_score(s, DPL__YIELD_NS);
	cr_assert_eq(s, -1);
	cr_assert_eq(dpl__yield_window(s), DPL__YIELD_NS);
	/* Two waits of 3 ms: most recent waits are long, the window short. */
	s = dpl__wait_score(s, 3000000u);
	cr_assert_eq(dpl__yield_window(s), DPL__YIELD_NS);
	s = dpl__wait_score(s, 3000000u);
	cr_assert_eq(s, 1);
	cr_assert_eq(dpl__yield_window(s), DPL__YIELD_SHORT_NS);
	cr_assert_lt(DPL__YIELD_SHORT_NS, DPL__YIELD_NS);
	/* The score saturates: a hundred long waits are undone by as many
	 * short ones as the bound, not by a hundred. */
	for (i = 0; i < 100; i++)
		s = dpl__wait_score(s, 50000000u);
	cr_assert_eq(s, DPL__WAIT_SCORE_MAX);
	for (i = 0; i < DPL__WAIT_SCORE_MAX - 1; i++) {
		s = dpl__wait_score(s, 100000u);
		cr_assert_eq(dpl__yield_window(s), DPL__YIELD_SHORT_NS,
			     "after %d short waits", i + 1);
	}
	s = dpl__wait_score(s, 100000u);
	cr_assert_eq(dpl__yield_window(s), DPL__YIELD_NS);
	for (i = 0; i < 100; i++)
		s = dpl__wait_score(s, 1000u);
	cr_assert_eq(s, -DPL__WAIT_SCORE_MAX);
}
