/*
 * test_synthetic.c - the synthetic model: parameter checks, the
 * configured time accounted per call (from the configuration, not
 * measured), and activation memory alive at once equal to the schedule's
 * bound times the activation size when the runner drives it on the
 * synthetic device. The device's counted memory is tested beside it
 * (devices/synthetic/tests/test_synthetic_device.c).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include <dpl/dpl.h>
#include <dpl/model_synthetic.h>
#include <dpl/transport_inproc.h>

Test(synthetic, rejects_bad_parameters)
{
	struct dpl_synthetic_params p = {0};
	struct dpl_stage_cost c[2] = {{1, 2, 0, 0}, {1, -1, 0, 0}};
	dpl_synthetic *s = NULL;

	cr_assert_eq(dpl_synthetic_create(&p, &s), DPL_EINVAL);
	p.stages = 2;
	cr_assert_eq(dpl_synthetic_create(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "unit_ns") != NULL);
	p.unit_ns = 1000;
	p.costs = c;
	cr_assert_eq(dpl_synthetic_create(&p, &s), DPL_EINVAL);
	cr_assert(strstr(dpl_last_error(), "stage 1") != NULL);
	cr_assert_null(s);
}

Test(synthetic, each_call_takes_its_configured_time)
{
	struct dpl_synthetic_params p = {0};
	struct dpl_synthetic_stats st;
	struct dpl_stage_args a = {0};
	uint64_t act[1] = {100};
	dpl_synthetic *s = NULL;
	const struct dpl_stage_ops *o = &dpl_synthetic_stage_ops;

	p.stages = 1;
	p.uniform.f = 2;
	p.uniform.b = 4;
	p.unit_ns = 100000; /* 0.1 ms */
	p.activation_bytes = act;
	p.samples_per_microbatch = 4;
	cr_assert_eq(dpl_synthetic_create(&p, &s), 0);
	a.end = 4;
	cr_assert_eq(o->forward(s, &a), 0);
	cr_assert_eq(o->forward(s, &a), 0);
	a.end = 2; /* half the samples: half the time */
	cr_assert_eq(o->backward(s, &a), 0);
	cr_assert_eq(o->backward_input(s, &a), 0);
	cr_assert_eq(o->backward_weight(s, &a), 0);
	cr_assert_eq(dpl_synthetic_stats(s, 0, &st), 0);
	cr_assert_eq(st.calls[0], 2);
	cr_assert_eq(st.calls[1], 1);
	cr_assert_eq(st.calls[2], 1);
	cr_assert_eq(st.calls[3], 1);
	/* 2 x 0.2 ms + 0.2 ms + 0.1 ms + 0.1 ms (I and W default to B/2) */
	cr_assert_eq(st.busy_ns, 800000u, "%llu",
		     (unsigned long long)st.busy_ns);
	cr_assert_eq(st.peak_live_bytes, 200);
	cr_assert_eq(st.live_bytes, 0);
	cr_assert_eq(dpl_synthetic_stats(s, 1, &st), DPL_EINVAL);
	a.stage = 3;
	cr_assert_eq(o->forward(s, &a), DPL_EINVAL);
	dpl_synthetic_destroy(s);
}

/* Four ranks, one stage each, gpipe and 1f1b: live activation peaks. */
struct rank {
	uint32_t rank;
	dpl_schedule *sched;
	const char *world;
	uint64_t peak;
	int rc;
};

static void *rank_main(void *arg)
{
	struct rank *x = arg;
	struct dpl_synthetic_params sp = {0};
	struct dpl_transport_params tp = {0};
	struct dpl_runner_params rp = {0};
	struct dpl_synthetic_stats st;
	uint64_t act[4] = {1000, 1000, 1000, 1000};
	dpl_synthetic *s = NULL;
	dpl_transport *t = NULL;
	dpl_device *d = NULL;
	dpl_runner *r = NULL;

	sp.stages = 4;
	sp.uniform.f = 1;
	sp.uniform.b = 2;
	sp.unit_ns = 20000;
	sp.activation_bytes = act;
	sp.grad_count = 3;
	tp.rank = x->rank;
	tp.world_size = 4;
	tp.world = x->world;
	if ((x->rc = dpl_synthetic_create(&sp, &s)) != 0 ||
	    (x->rc = dpl_transport_open(&dpl_transport_inproc, &tp, &t)) ||
	    (x->rc = dpl_device_open(&dpl_device_synthetic, NULL, &d)))
		return NULL;
	rp.schedule = x->sched;
	rp.rank = x->rank;
	rp.batch = 8;
	rp.activation_bytes = act;
	rp.stage_ops = &dpl_synthetic_stage_ops;
	rp.stage_user = s;
	rp.transport = t;
	rp.device = d;
	if ((x->rc = dpl_runner_create(&rp, &r)) == 0 &&
	    (x->rc = dpl_runner_step(r)) == 0 &&
	    (x->rc = dpl_synthetic_stats(s, x->rank, &st)) == 0)
		x->peak = st.peak_live_bytes;
	dpl_runner_destroy(r);
	dpl_device_close(d);
	dpl_synthetic_destroy(s);
	/* Leave only once every rank finished: closing is a failure to the
	 * others. */
	return t;
}

static void run(enum dpl_policy pol, const char *world)
{
	struct dpl_schedule_params p = {0};
	struct rank x[4];
	pthread_t th[4];
	void *t[4];
	uint32_t i;

	p.stages = 4;
	p.microbatches = 8;
	p.policy = pol;
	memset(x, 0, sizeof x);
	cr_assert_eq(dpl_schedule_build(&p, &x[0].sched), 0);
	cr_assert_eq(dpl_schedule_lower(x[0].sched), 0);
	for (i = 0; i < 4; i++) {
		x[i].rank = i;
		x[i].sched = x[0].sched;
		x[i].world = world;
		cr_assert_eq(pthread_create(&th[i], NULL, rank_main, &x[i]), 0);
	}
	for (i = 0; i < 4; i++)
		pthread_join(th[i], &t[i]);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(x[i].rc, 0, "rank %u: %d", i, x[i].rc);
		cr_assert_eq(x[i].peak,
			     1000u * dpl_schedule_bound(x[0].sched, i),
			     "%s stage %u: %llu bytes alive", world, i,
			     (unsigned long long)x[i].peak);
		dpl_transport_close(t[i]);
	}
	dpl_schedule_destroy(x[0].sched);
}

Test(synthetic, live_activations_follow_the_schedule_bound)
{
	run(DPL_POLICY_GPIPE, "syn-gpipe");
	run(DPL_POLICY_1F1B, "syn-1f1b");
}
