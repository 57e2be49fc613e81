/*
 * sim.c - the discrete-event simulator: a timed replay of each rank's list
 * in order, with FIFO links between ranks and a per-rank communication
 * stream for gradient reductions.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/sim.h>


struct dpl_sim {
	struct dpl_sim_summary sum;
	double *rank_busy;                 /* [ranks] */
	struct dpl_sim_stage_stats *stage; /* [stages] */
	struct dpl_sim_event *ev;
	size_t nev;
	size_t cap;
};

/* One directed link from a rank: its peer and when it is next free. */
struct link {
	uint32_t dst;
	double free_at;
};

struct links {
	struct link *l;
	size_t n;
	size_t cap;
};

struct run {
	const dpl_schedule *s;
	const struct dpl_sim_params *p;
	dpl_sim *sim;
	double *fend;   /* [S*M] end of F */
	double *bend;   /* [S*M] end of B or I */
	double *iend;   /* [S*M] end of I */
	double *farr;   /* [S*M] F(s, j)'s activation at s + 1's rank */
	double *barr;   /* [S*M] B/I(s, j)'s gradient at s - 1's rank */
	double *rend;   /* [S] end of the stage's reduction */
	size_t *last;   /* [S] index of the stage's last backward */
	uint32_t *live; /* [S] micro-batches alive */
	double *tfree;  /* [R] */
	double *comm;   /* [R] communication stream free at */
	size_t *pc;     /* [R] */
	struct links *links; /* [R] */
};

static struct dpl_stage_cost cost_of(const struct run *x, uint32_t stage)
{
	if (x->p->costs)
		return dpl_stage_cost_resolve(x->p->costs[stage]);
	return dpl_stage_cost_resolve(x->p->uniform);
}

static int add_event(dpl_sim *sim, uint32_t kind, uint32_t rank,
		     uint32_t peer, struct dpl_action a, double start,
		     double end)
{
	if (sim->nev == sim->cap) {
		size_t cap = sim->cap ? 2 * sim->cap : 1024;
		struct dpl_sim_event *ev = realloc(sim->ev, cap * sizeof *ev);

		if (ev == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		sim->ev = ev;
		sim->cap = cap;
	}
	sim->ev[sim->nev++] = (struct dpl_sim_event){kind, rank, peer, a,
						     start, end};
	return 0;
}

/* Ship `bytes` from rank `src` to `dst` once `ready`; returns arrival. */
static int transfer(struct run *x, uint32_t src, uint32_t dst,
		    struct dpl_action a, uint64_t bytes, double ready,
		    double *arrival)
{
	struct links *ls = &x->links[src];
	struct link *lk = NULL;
	double bw = x->p->link_bandwidth, dur, start;

	for (size_t i = 0; i < ls->n; i++)
		if (ls->l[i].dst == dst)
			lk = &ls->l[i];
	if (lk == NULL) {
		if (ls->n == ls->cap) {
			size_t cap = ls->cap ? 2 * ls->cap : 4;
			struct link *l = realloc(ls->l, cap * sizeof *l);

			if (l == NULL)
				return dpl_set_error(DPL_ENOMEM, "out of memory");
			ls->l = l;
			ls->cap = cap;
		}
		lk = &ls->l[ls->n++];
		lk->dst = dst;
		lk->free_at = 0;
	}
	dur = bw > 0 ? (double)bytes / bw : 0;
	start = fmax(ready, lk->free_at);
	lk->free_at = start + dur;
	*arrival = start + dur + x->p->link_latency;
	return add_event(x->sim, DPL_SIM_TRANSFER, src, dst, a, start,
			 *arrival);
}

static uint64_t act_bytes(const struct run *x, uint32_t stage)
{
	return x->p->activation_bytes ? x->p->activation_bytes[stage] : 0;
}

static uint64_t grad_bytes(const struct run *x, uint32_t stage)
{
	if (x->p->grad_bytes)
		return x->p->grad_bytes[stage];
	return stage > 0 ? act_bytes(x, stage - 1) : 0;
}

static double reduce_time(const struct run *x, uint32_t stage)
{
	uint32_t n = x->p->replicas ? x->p->replicas[stage] : 1;
	double bytes, t = 0;

	if (n <= 1)
		return 0;
	bytes = x->p->param_bytes ? (double)x->p->param_bytes[stage] : 0;
	if (x->p->ar_bandwidth > 0)
		t += 2.0 * (n - 1) / n * bytes / x->p->ar_bandwidth;
	t += 2.0 * (n - 1) * x->p->ar_latency;
	return t;
}

/*
 * Run rank r as far as its inputs are known. Sets *woke to the ranks
 * whose inputs this made known (at most two per action, pushed to the
 * queue by the caller through wake()).
 */
static int advance(struct run *x, uint32_t r, uint32_t *wake_a,
		   uint32_t *wake_b)
{
	const dpl_schedule *s = x->s;
	size_t len;
	const struct dpl_action *acts = dpl_schedule_actions(s, r, &len);
	uint32_t S = dpl_schedule_stages(s), M = dpl_schedule_microbatches(s);
	int rc;

	*wake_a = *wake_b = UINT32_MAX;
	while (x->pc[r] < len) {
		struct dpl_action a = acts[x->pc[r]];
		size_t k = a.microbatch != DPL_NO_MICROBATCH
				   ? ((size_t)a.stage * M + a.microbatch)
				   : 0;
		struct dpl_stage_cost c;
		double in = 0, dur = 0, start, end;
		bool remote;

		switch (a.kind) {
		case DPL_ACT_F:
			if (a.stage > 0) {
				remote = dpl_schedule_stage_rank(s, a.stage - 1) != r;
				in = remote ? x->farr[k - M]
					    : x->fend[k - M];
			}
			dur = cost_of(x, a.stage).f;
			break;
		case DPL_ACT_B:
		case DPL_ACT_I:
			if (a.stage + 1 < S) {
				remote = dpl_schedule_stage_rank(s, a.stage + 1) != r;
				in = remote ? x->barr[k + M]
					    : x->bend[k + M];
			} else {
				in = x->fend[k];
			}
			c = cost_of(x, a.stage);
			dur = a.kind == DPL_ACT_B ? c.b : c.i;
			break;
		case DPL_ACT_W:
			in = x->iend[k];
			dur = cost_of(x, a.stage).w;
			break;
		case DPL_ACT_STEP:
			in = x->rend[a.stage];
			dur = x->p->step_cost;
			break;
		default: /* SEND, RECV, REDUCE_GRAD: carried by links/streams */
			x->pc[r]++;
			continue;
		}
		if (isnan(in))
			return 0; /* input not known yet */
		start = fmax(x->tfree[r], in);
		end = start + dur;
		x->tfree[r] = end;
		if (a.kind == DPL_ACT_STEP) {
			rc = add_event(x->sim, DPL_SIM_STEP, r, r, a, start, end);
			if (rc)
				return rc;
			x->sim->stage[a.stage].finish =
			    fmax(x->sim->stage[a.stage].finish, end);
			x->pc[r]++;
			continue;
		}
		x->sim->rank_busy[r] += dur;
		x->sim->stage[a.stage].busy += dur;
		x->sim->stage[a.stage].finish =
		    fmax(x->sim->stage[a.stage].finish, end);
		if ((rc = add_event(x->sim, DPL_SIM_COMPUTE, r, r, a, start,
				    end)))
			return rc;
		if (a.kind == DPL_ACT_F) {
			struct dpl_sim_stage_stats *st = &x->sim->stage[a.stage];

			x->fend[k] = end;
			if (++x->live[a.stage] > st->peak_inflight)
				st->peak_inflight = x->live[a.stage];
			if (a.stage + 1 < S) {
				uint32_t d = dpl_schedule_stage_rank(s, a.stage + 1);

				if (d != r && (rc = transfer(x, r, d, a,
							     act_bytes(x, a.stage),
							     end, &x->farr[k])))
					return rc;
				*wake_a = d;
			}
		} else if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_I) {
			x->bend[k] = end;
			if (a.kind == DPL_ACT_I)
				x->iend[k] = end;
			else
				x->live[a.stage]--;
			if (a.stage > 0) {
				uint32_t d = dpl_schedule_stage_rank(s, a.stage - 1);

				if (d != r && (rc = transfer(x, r, d, a,
							     grad_bytes(x, a.stage),
							     end, &x->barr[k])))
					return rc;
				*wake_b = d;
			}
		} else {
			x->live[a.stage]--;
		}
		if (x->last[a.stage] == x->pc[r]) {
			struct dpl_sim_stage_stats *st = &x->sim->stage[a.stage];
			struct dpl_action g = ((struct dpl_action){DPL_ACT_REDUCE_GRAD,
						       a.stage,
						       DPL_NO_MICROBATCH});

			st->reduce_start = fmax(end, x->comm[r]);
			st->reduce_end = st->reduce_start + reduce_time(x, a.stage);
			x->comm[r] = st->reduce_end;
			x->rend[a.stage] = st->reduce_end;
			st->finish = fmax(st->finish, st->reduce_end);
			if (st->reduce_end > st->reduce_start &&
			    (rc = add_event(x->sim, DPL_SIM_REDUCE, r, r, g,
					    st->reduce_start, st->reduce_end)))
				return rc;
		}
		x->pc[r]++;
		if (*wake_a != UINT32_MAX || *wake_b != UINT32_MAX)
			return 0; /* let the woken ranks run in turn */
	}
	return 0;
}

static int check_param(const char *name, double v)
{
	if (!isfinite(v) || v < 0)
		return dpl_set_error(DPL_EINVAL, "%s must be finite and >= 0 (got %g)",
				  name, v);
	return 0;
}

static int check_params(const dpl_schedule *s, const struct dpl_sim_params *p)
{
	int rc;

	if ((rc = check_param("link_latency", p->link_latency)) ||
	    (rc = check_param("link_bandwidth", p->link_bandwidth)) ||
	    (rc = check_param("ar_bandwidth", p->ar_bandwidth)) ||
	    (rc = check_param("ar_latency", p->ar_latency)) ||
	    (rc = check_param("step_cost", p->step_cost)))
		return rc;
	for (uint32_t st = 0; st < (p->costs ? dpl_schedule_stages(s) : 1); st++) {
		struct dpl_stage_cost c = p->costs ? p->costs[st] : p->uniform;

		if (!isfinite(c.f) || !isfinite(c.b) || !isfinite(c.i) ||
		    !isfinite(c.w) || c.f < 0 || c.b < 0 || c.i < 0 || c.w < 0)
			return dpl_set_error(DPL_EINVAL,
					  "stage %u: costs must be finite and "
					  ">= 0 (got F=%g B=%g I=%g W=%g)",
					  st, c.f, c.b, c.i, c.w);
	}
	if (p->replicas)
		for (uint32_t st = 0; st < dpl_schedule_stages(s); st++)
			if (p->replicas[st] < 1)
				return dpl_set_error(DPL_EINVAL,
						  "stage %u: replicas must be "
						  ">= 1 (got 0)",
						  st);
	return 0;
}

static size_t rank_len(const dpl_schedule *s, uint32_t r)
{
	size_t n;

	dpl_schedule_actions(s, r, &n);
	return n;
}

static int cmp_event(const void *pa, const void *pb)
{
	const struct dpl_sim_event *a = pa, *b = pb;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	return 0;
}

static void free_run(struct run *x)
{
	free(x->fend);
	free(x->bend);
	free(x->iend);
	free(x->farr);
	free(x->barr);
	free(x->rend);
	free(x->last);
	free(x->live);
	free(x->tfree);
	free(x->comm);
	free(x->pc);
	if (x->links)
		for (uint32_t r = 0; r < dpl_schedule_ranks(x->s); r++)
			free(x->links[r].l);
	free(x->links);
}

static int replay(struct run *x)
{
	const dpl_schedule *s = x->s;
	uint32_t R = dpl_schedule_ranks(s), S = dpl_schedule_stages(s), *queue, qh = 0, qt = 0, r;
	uint8_t *queued;
	size_t n = (size_t)S * dpl_schedule_microbatches(s);
	int rc = 0;

	x->fend = malloc(n * sizeof *x->fend);
	x->bend = malloc(n * sizeof *x->bend);
	x->iend = malloc(n * sizeof *x->iend);
	x->farr = malloc(n * sizeof *x->farr);
	x->barr = malloc(n * sizeof *x->barr);
	x->rend = malloc(S * sizeof *x->rend);
	x->last = malloc(S * sizeof *x->last);
	x->live = calloc(S, sizeof *x->live);
	x->tfree = calloc(R, sizeof *x->tfree);
	x->comm = calloc(R, sizeof *x->comm);
	x->pc = calloc(R, sizeof *x->pc);
	x->links = calloc(R, sizeof *x->links);
	queue = malloc(R * sizeof *queue);
	queued = calloc(R, 1);
	if (!x->fend || !x->bend || !x->iend || !x->farr || !x->barr ||
	    !x->rend || !x->last || !x->live || !x->tfree || !x->comm ||
	    !x->pc || !x->links || !queue || !queued) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < n; k++)
		x->fend[k] = x->bend[k] = x->iend[k] = x->farr[k] =
		    x->barr[k] = NAN;
	for (uint32_t st = 0; st < S; st++) {
		x->rend[st] = NAN;
		x->last[st] = SIZE_MAX;
		x->sim->stage[st].rank = dpl_schedule_stage_rank(s, st);
	}
	for (r = 0; r < R; r++) {
		size_t len;
		const struct dpl_action *l = dpl_schedule_actions(s, r, &len);

		for (size_t i = 0; i < len; i++)
			if (l[i].kind == DPL_ACT_B || l[i].kind == DPL_ACT_W)
				x->last[l[i].stage] = i;
		queue[qt++ % R] = r;
		queued[r] = 1;
	}
	while (qh != qt) {
		uint32_t wa, wb;

		r = queue[qh++ % R];
		queued[r] = 0;
		if ((rc = advance(x, r, &wa, &wb)))
			goto out;
		if (wa != UINT32_MAX && !queued[wa]) {
			queued[wa] = 1;
			queue[qt++ % R] = wa;
		}
		if (wb != UINT32_MAX && !queued[wb]) {
			queued[wb] = 1;
			queue[qt++ % R] = wb;
		}
		/* advance() stops after waking someone: run it again later. */
		if (x->pc[r] < rank_len(s, r) && !queued[r] &&
		    (wa != UINT32_MAX || wb != UINT32_MAX)) {
			queued[r] = 1;
			queue[qt++ % R] = r;
		}
	}
	for (r = 0; r < R; r++)
		if (x->pc[r] < rank_len(s, r)) {
			rc = dpl_set_error(DPL_EDEADLOCK,
					"rank %u stalled at position %zu", r,
					x->pc[r]);
			goto out;
		}
out:
	free(queue);
	free(queued);
	return rc;
}

int dpl_sim_run(const dpl_schedule *s, const struct dpl_sim_params *p,
		dpl_sim **out)
{
	static const struct dpl_sim_params defaults;
	struct run x = {0};
	dpl_sim *sim;
	double busy = 0, end = 0;
	int rc;

	if (s == NULL || out == NULL)
		return dpl_set_error(DPL_EINVAL, "schedule and out must not be NULL");
	if (p == NULL)
		p = &defaults;
	if ((rc = check_params(s, p)) || (rc = dpl_schedule_validate(s, NULL)))
		return rc;
	sim = calloc(1, sizeof *sim);
	if (sim == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	sim->rank_busy = calloc(dpl_schedule_ranks(s), sizeof *sim->rank_busy);
	sim->stage = calloc(dpl_schedule_stages(s), sizeof *sim->stage);
	if (!sim->rank_busy || !sim->stage) {
		dpl_sim_destroy(sim);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	x.s = s;
	x.p = p;
	x.sim = sim;
	rc = replay(&x);
	if (rc == 0) {
		for (uint32_t r = 0; r < dpl_schedule_ranks(s); r++) {
			busy += sim->rank_busy[r];
			end = fmax(end, x.tfree[r]);
		}
		for (uint32_t st = 0; st < dpl_schedule_stages(s); st++) {
			struct dpl_sim_stage_stats *t = &sim->stage[st];

			end = fmax(end, t->reduce_end);
			t->peak_activation_bytes =
			    (uint64_t)t->peak_inflight * act_bytes(&x, st);
		}
		sim->sum.makespan = end;
		sim->sum.total_busy = busy;
		sim->sum.ranks = dpl_schedule_ranks(s);
		sim->sum.stages = dpl_schedule_stages(s);
		sim->sum.bubble_fraction =
		    end > 0 ? 1.0 - busy / (dpl_schedule_ranks(s) * end) : 0;
		qsort(sim->ev, sim->nev, sizeof *sim->ev, cmp_event);
	}
	free_run(&x);
	if (rc) {
		dpl_sim_destroy(sim);
		return rc;
	}
	*out = sim;
	return 0;
}

void dpl_sim_destroy(dpl_sim *sim)
{
	if (sim == NULL)
		return;
	free(sim->rank_busy);
	free(sim->stage);
	free(sim->ev);
	free(sim);
}

void dpl_sim_summary(const dpl_sim *sim, struct dpl_sim_summary *out)
{
	*out = sim->sum;
}

double dpl_sim_rank_busy(const dpl_sim *sim, uint32_t rank)
{
	return rank < sim->sum.ranks ? sim->rank_busy[rank] : 0;
}

int dpl_sim_stage(const dpl_sim *sim, uint32_t stage,
		  struct dpl_sim_stage_stats *out)
{
	if (stage >= sim->sum.stages)
		return dpl_set_error(DPL_EINVAL, "stage %u out of range (0..%u)",
				  stage, sim->sum.stages - 1);
	*out = sim->stage[stage];
	return 0;
}

const struct dpl_sim_event *dpl_sim_events(const dpl_sim *sim, size_t *count)
{
	*count = sim->nev;
	return sim->ev;
}
