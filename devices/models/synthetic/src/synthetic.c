/*
 * synthetic.c - the synthetic model: stage callbacks that sleep until a
 * deadline and account activation memory, so that a long pipeline can be
 * timed on few cores.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <dpl/model_synthetic.h>

struct sstage {
	double ns[4];        /* F, B, I, W per micro-batch */
	uint64_t act;        /* bytes alive per micro-batch */
	uint64_t avg_late;   /* recent wake-up lateness, ns */
	struct dpl_synthetic_stats st;
	float *grad;
	struct dpl_buffer gbuf;
};

struct dpl_synthetic {
	uint32_t stages;
	uint64_t spm;
	struct sstage *s;
};

static bool cost_ok(const struct dpl_stage_cost *c)
{
	return isfinite(c->f) && isfinite(c->b) && isfinite(c->i) &&
	       isfinite(c->w) && c->f >= 0 && c->b >= 0 && c->i >= 0 &&
	       c->w >= 0;
}

void dpl_synthetic_destroy(dpl_synthetic *s)
{
	uint32_t i;

	if (s == NULL)
		return;
	for (i = 0; s->s && i < s->stages; i++)
		free(s->s[i].grad);
	free(s->s);
	free(s);
}

int dpl_synthetic_create(const struct dpl_synthetic_params *p,
			 dpl_synthetic **out)
{
	dpl_synthetic *s;
	uint32_t i;

	if (p == NULL || p->stages == 0)
		return dpl_set_error(DPL_EINVAL,
				     "synthetic: stages must be >= 1");
	if (!(p->unit_ns > 0) || !isfinite(p->unit_ns))
		return dpl_set_error(DPL_EINVAL,
				     "synthetic: unit_ns must be > 0 (got %g)",
				     p->unit_ns);
	for (i = 0; i < (p->costs ? p->stages : 1); i++) {
		const struct dpl_stage_cost *c =
			p->costs ? &p->costs[i] : &p->uniform;

		if (!cost_ok(c))
			return dpl_set_error(DPL_EINVAL,
					     "synthetic: stage %u: cost F=%g "
					     "B=%g I=%g W=%g", i, c->f, c->b,
					     c->i, c->w);
	}
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return dpl_set_error(DPL_ENOMEM, "synthetic: out of memory");
	s->stages = p->stages;
	s->spm = p->samples_per_microbatch;
	s->s = calloc(p->stages, sizeof *s->s);
	if (s->s == NULL) {
		dpl_synthetic_destroy(s);
		return dpl_set_error(DPL_ENOMEM, "synthetic: out of memory");
	}
	for (i = 0; i < p->stages; i++) {
		struct sstage *st = &s->s[i];
		struct dpl_stage_cost c = p->costs ? p->costs[i] : p->uniform;

		if (c.i == 0)
			c.i = c.b / 2;
		if (c.w == 0)
			c.w = c.b / 2;
		st->ns[0] = c.f * p->unit_ns;
		st->ns[1] = c.b * p->unit_ns;
		st->ns[2] = c.i * p->unit_ns;
		st->ns[3] = c.w * p->unit_ns;
		st->act = p->activation_bytes ? p->activation_bytes[i] : 0;
		if (p->grad_count > 0) {
			st->grad = calloc(p->grad_count, sizeof *st->grad);
			if (st->grad == NULL) {
				dpl_synthetic_destroy(s);
				return dpl_set_error(DPL_ENOMEM,
						     "synthetic: out of "
						     "memory");
			}
		}
		st->gbuf.ptr = st->grad;
		st->gbuf.count = p->grad_count;
		st->gbuf.dtype = DPL_DTYPE_F32;
		st->gbuf.mem = DPL_MEM_HOST;
	}
	*out = s;
	return 0;
}

/*
 * Linux lets a sleeping thread wake up to 50 us late by default (timer
 * slack), which would add up along a pipeline; ask for exact wake-ups,
 * once per thread.
 */
static void precise_timers(void)
{
#if defined(__linux__) && defined(PR_SET_TIMERSLACK)
	static _Thread_local bool done;

	if (!done) {
		prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
		done = true;
	}
#endif
}

/*
 * Take `ns`: sleep until a deadline. A sleeping thread wakes some tens of
 * microseconds late on a loaded machine, which would add up along a
 * pipeline, so the deadline is moved earlier by the recent lateness (an
 * average, at most a quarter of the op): an op then takes its configured
 * time on average. late_ns sums how far each op ended past start + ns
 * (early ends count as 0).
 */
static void take(struct sstage *st, double ns)
{
	struct timespec t, now;
	uint64_t d = (uint64_t)ns, start, end, aim, skew;
	int rc;

	if (d == 0)
		return;
	precise_timers();
	clock_gettime(CLOCK_MONOTONIC, &t);
	start = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
	skew = st->avg_late < d / 4 ? st->avg_late : d / 4;
	aim = start + d - skew;
	t.tv_sec = (time_t)(aim / 1000000000u);
	t.tv_nsec = (long)(aim % 1000000000u);
	do
		rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
	while (rc == EINTR);
	clock_gettime(CLOCK_MONOTONIC, &now);
	end = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	/* wake-up lateness past the aimed deadline, averaged over ~8 ops */
	st->avg_late = (7 * st->avg_late + (end > aim ? end - aim : 0)) / 8;
	st->st.busy_ns += d;
	st->st.late_ns += end > start + d ? end - (start + d) : 0;
}

static int run(void *user, const struct dpl_stage_args *a, int kind)
{
	dpl_synthetic *s = user;
	struct sstage *st;
	double ns;

	if (a->stage >= s->stages)
		return dpl_set_error(DPL_EINVAL,
				     "synthetic: stage %u of %u", a->stage,
				     s->stages);
	st = &s->s[a->stage];
	ns = st->ns[kind];
	if (s->spm > 0)
		ns = ns * (double)(a->end - a->begin) / (double)s->spm;
	take(st, ns);
	st->st.calls[kind]++;
	if (kind == 0) {
		st->st.live_bytes += st->act;
		if (st->st.live_bytes > st->st.peak_live_bytes)
			st->st.peak_live_bytes = st->st.live_bytes;
	} else if ((kind == 1 || kind == 3) && st->st.live_bytes >= st->act) {
		st->st.live_bytes -= st->act;
	}
	return 0;
}

static int syn_forward(void *u, const struct dpl_stage_args *a)
{
	return run(u, a, 0);
}

static int syn_backward(void *u, const struct dpl_stage_args *a)
{
	return run(u, a, 1);
}

static int syn_input(void *u, const struct dpl_stage_args *a)
{
	return run(u, a, 2);
}

static int syn_weight(void *u, const struct dpl_stage_args *a)
{
	return run(u, a, 3);
}

static int syn_grads(void *u, uint32_t stage, const struct dpl_buffer **b,
		     size_t *n)
{
	dpl_synthetic *s = u;

	if (stage >= s->stages)
		return dpl_set_error(DPL_EINVAL, "synthetic: stage %u", stage);
	*b = &s->s[stage].gbuf;
	*n = s->s[stage].gbuf.count > 0 ? 1 : 0;
	return 0;
}

static int syn_step(void *u, uint32_t stage, uint64_t iteration)
{
	dpl_synthetic *s = u;

	if (stage >= s->stages)
		return dpl_set_error(DPL_EINVAL, "synthetic: stage %u", stage);
	s->s[stage].st.steps++;
	return 0;
}

DPL_EXTERN const struct dpl_stage_ops dpl_synthetic_stage_ops = {
	.abi_version = DPL_STAGE_ABI_VERSION,
	.size = sizeof(struct dpl_stage_ops),
	.name = "synthetic",
	.forward = syn_forward,
	.backward = syn_backward,
	.backward_input = syn_input,
	.backward_weight = syn_weight,
	.grads = syn_grads,
	.step = syn_step,
};

int dpl_synthetic_stats(const dpl_synthetic *s, uint32_t stage,
			struct dpl_synthetic_stats *out)
{
	if (stage >= s->stages)
		return dpl_set_error(DPL_EINVAL, "synthetic: stage %u of %u",
				     stage, s->stages);
	*out = s->s[stage].st;
	return 0;
}
