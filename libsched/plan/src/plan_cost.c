/*
 * plan_cost.c - the planner's cost model: stage costs, split-concat
 * transfers, allreduce, memory, DAPPLE's pivot latency, and a plan's
 * derived fields from them. Schedules, simulation and the choice of
 * micro-batching are in plan_tune.c.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

int dpl__plan_check(const dpl_profile *prof, const struct dpl_cluster *c,
		    const struct dpl_plan_params *p)
{
	int rc;

	if (prof == NULL || p == NULL)
		return dpl_set_error(DPL_EINVAL,
				  "profile and params must not be NULL");
	if ((rc = dpl_cluster_check(c)))
		return rc;
	if (p->profile_batch < 1)
		return dpl_set_error(DPL_EINVAL,
				  "profile batch must be >= 1 (got %u)",
				  p->profile_batch);
	if (p->global_batch < 1)
		return dpl_set_error(DPL_EINVAL,
				  "global batch must be >= 1 (got %u)",
				  p->global_batch);
	if (!isfinite(p->optimizer_factor) || p->optimizer_factor < 0)
		return dpl_set_error(DPL_EINVAL,
				  "optimizer factor must be finite and >= 0 "
				  "(got %g)",
				  p->optimizer_factor);
	if (p->rank > DPL_PLAN_RANK_PIVOT)
		return dpl_set_error(DPL_EINVAL, "unknown rank mode %u", p->rank);
	if (p->microbatch_size > p->global_batch)
		return dpl_set_error(DPL_EINVAL,
				  "micro-batch size %u is larger than the "
				  "global batch %u",
				  p->microbatch_size, p->global_batch);
	return 0;
}

int dpl__pctx_init(struct dpl__pctx *x, const dpl_profile *prof,
		   const struct dpl_cluster *c, const struct dpl_plan_params *p)
{
	uint32_t n;
	int rc;

	memset(x, 0, sizeof *x);
	if ((rc = dpl__plan_check(prof, c, p)))
		return rc;
	n = dpl_profile_layers(prof);
	x->prof = prof;
	x->c = c;
	x->p = p;
	x->n = n;
	x->G = dpl_cluster_devices(c);
	x->all = x->G >= 64 ? ~0ULL : ((1ULL << x->G) - 1);
	x->pbs = p->profile_batch;
	x->opt = p->optimizer_factor;
	x->mem = c->device_memory;
	x->F = calloc((size_t)n + 1, sizeof *x->F);
	x->B = calloc((size_t)n + 1, sizeof *x->B);
	x->A = calloc((size_t)n + 1, sizeof *x->A);
	x->P = calloc((size_t)n + 1, sizeof *x->P);
	x->cut = calloc((size_t)n + 1, sizeof *x->cut);
	if (!x->F || !x->B || !x->A || !x->P || !x->cut) {
		dpl__pctx_fini(x);
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct dpl_layer *l = dpl_profile_layer(prof, i);

		x->F[i + 1] = x->F[i] + l->forward_ms;
		x->B[i + 1] = x->B[i] + l->backward_ms;
		x->A[i + 1] = x->A[i] + l->activation_bytes;
		x->P[i + 1] = x->P[i] + l->parameter_bytes;
		x->cut[i] = dpl_profile_cut_bytes(prof, i);
	}
	return 0;
}

void dpl__pctx_fini(struct dpl__pctx *x)
{
	free(x->F);
	free(x->B);
	free(x->A);
	free(x->P);
	free(x->cut);
	memset(x, 0, sizeof *x);
}

/* ---- transfers and allreduce -------------------------------------- */

double dpl__xfer_ms(const struct dpl__pctx *x, double bytes, uint32_t mb,
		    uint64_t from, uint64_t to)
{
	const struct dpl_cluster *c = x->c;
	uint32_t dpm = c->devices_per_machine;
	uint32_t sd[DPL_PLAN_MAX_DEVICES], rd[DPL_PLAN_MAX_DEVICES];
	double out[DPL_PLAN_MAX_DEVICES], in[DPL_PLAN_MAX_DEVICES];
	double mout[DPL_PLAN_MAX_DEVICES], min_[DPL_PLAN_MAX_DEVICES];
	uint32_t ns = 0, nr = 0, a = 0, b = 0;
	double t = 0, per;
	int intra = 0, inter = 0;

	if (bytes <= 0 || mb == 0 || from == 0 || to == 0)
		return 0;
	per = bytes / mb;
	for (uint64_t m = from; m; m &= m - 1) {
		sd[ns] = (uint32_t)__builtin_ctzll(m);
		out[ns] = 0;
		mout[sd[ns] / dpm] = 0;
		ns++;
	}
	for (uint64_t m = to; m; m &= m - 1) {
		rd[nr] = (uint32_t)__builtin_ctzll(m);
		in[nr] = 0;
		min_[rd[nr] / dpm] = 0;
		nr++;
	}
	/* Merge the two partitions of [0, mb) into overlapping pieces. */
	while (a < ns && b < nr) {
		uint64_t as = (uint64_t)a * mb / ns, ae = (uint64_t)(a + 1) * mb / ns;
		uint64_t bs = (uint64_t)b * mb / nr, be = (uint64_t)(b + 1) * mb / nr;
		uint64_t lo = as > bs ? as : bs, hi = ae < be ? ae : be;

		if (hi > lo) {
			double v = per * (double)(hi - lo);
			uint32_t ms = sd[a] / dpm, mr = rd[b] / dpm;

			if (ms == mr) {
				out[a] += v;
				in[b] += v;
				intra = 1;
			} else {
				mout[ms] += v;
				min_[mr] += v;
				inter = 1;
			}
		}
		if (ae <= be)
			a++;
		else
			b++;
	}
	if (intra) {
		double mx = 0;

		for (uint32_t k = 0; k < ns; k++)
			mx = out[k] > mx ? out[k] : mx;
		for (uint32_t k = 0; k < nr; k++)
			mx = in[k] > mx ? in[k] : mx;
		t = mx / c->intra_bandwidth;
	}
	if (inter) {
		double mx = 0;

		for (uint32_t k = 0; k < ns; k++)
			mx = mout[sd[k] / dpm] > mx ? mout[sd[k] / dpm] : mx;
		for (uint32_t k = 0; k < nr; k++)
			mx = min_[rd[k] / dpm] > mx ? min_[rd[k] / dpm] : mx;
		mx /= c->inter_bandwidth;
		t = mx > t ? mx : t;
		t += c->inter_latency;
	} else if (intra) {
		t += c->intra_latency;
	}
	return t * 1e3;
}

double dpl__ar_ms(const struct dpl__pctx *x, double bytes, uint64_t devs)
{
	const struct dpl_cluster *c = x->c;
	uint32_t n = dpl__popcount64(devs), dpm = c->devices_per_machine;
	uint32_t lo = (uint32_t)__builtin_ctzll(devs | (1ULL << 63));
	uint32_t hi = 63 - (uint32_t)__builtin_clzll(devs | 1);
	double bw, lat;

	if (n <= 1 || bytes <= 0)
		return 0;
	if (lo / dpm != hi / dpm) {
		bw = c->ar_inter_bandwidth;
		lat = c->inter_latency;
	} else {
		bw = c->ar_intra_bandwidth;
		if (c->ar_intra_pairs && n >= 2)
			bw *= n / 2;
		lat = c->intra_latency;
	}
	return (2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat) * 1e3;
}

uint32_t dpl__inflight(enum dpl_policy pol, uint32_t S, uint32_t s,
		       uint32_t M)
{
	uint32_t k;

	switch (pol) {
	case DPL_POLICY_GPIPE:
		return M;
	case DPL_POLICY_1F1B_COMM:
		k = 2 * (S - s) - 1;
		break;
	default:
		k = S - s;
		break;
	}
	return k < M ? k : M;
}

/* ---- the pivot formula -------------------------------------------- */

double dpl_plan_pivot(const double *f, const double *b, const double *ar,
		      uint32_t n, uint32_t m, uint32_t *q)
{
	double best = -HUGE_VAL, fsum = 0;
	uint32_t bq = 0;

	if (n == 0 || m == 0 || f == NULL || b == NULL) {
		if (q)
			*q = 0;
		return 0;
	}
	/* L(Q) for Q = n-1 .. 0; a later Q keeps ties (DAPPLE's scan). */
	for (uint32_t Q = n; Q-- > 0;) {
		double L, tail = -HUGE_VAL, k;

		fsum = 0;
		for (uint32_t s = 0; s <= Q; s++)
			fsum += f[s];
		/* s <= Q: AR_s + sum_{s..Q} B */
		k = 0;
		for (uint32_t s = Q + 1; s-- > 0;) {
			k += b[s];
			tail = fmax(tail, (ar ? ar[s] : 0) + k);
		}
		/* s > Q: AR_s - sum_{Q+1..s-1} B */
		k = 0;
		for (uint32_t s = Q + 1; s < n; s++) {
			tail = fmax(tail, (ar ? ar[s] : 0) - k);
			k += b[s];
		}
		L = fsum + (double)(m - 1) * (f[Q] + b[Q]) + tail;
		if (L > best) {
			best = L;
			bq = Q;
		}
	}
	if (q)
		*q = bq;
	return best;
}

/* ---- plans ---------------------------------------------------------- */

int dpl__plan_validate(const struct dpl__pctx *x, const struct dpl_plan *pl)
{
	uint64_t used = 0;
	uint32_t S = pl->stages;

	if (S < 1 || S > DPL_PLAN_MAX_STAGES)
		return dpl_set_error(DPL_EINVAL,
				  "plan: stages must be in [1, %d] (got %u)",
				  DPL_PLAN_MAX_STAGES, S);
	if (pl->microbatch_size < 1)
		return dpl_set_error(DPL_EINVAL,
				  "plan: microbatch_size must be >= 1 (got 0)");
	if (pl->microbatches < 1)
		return dpl_set_error(DPL_EINVAL,
				  "plan: microbatches must be >= 1 (got 0)");
	if (pl->policy != DPL_POLICY_GPIPE && pl->policy != DPL_POLICY_1F1B &&
	    pl->policy != DPL_POLICY_1F1B_COMM)
		return dpl_set_error(DPL_EINVAL,
				  "plan: policy must be gpipe, 1f1b or "
				  "1f1b-comm (got %d)",
				  (int)pl->policy);
	for (uint32_t s = 0; s < S; s++) {
		const struct dpl_plan_stage *st = &pl->stage[s];
		uint32_t want = s == 0 ? 0 : pl->stage[s - 1].last_layer + 1;
		uint32_t r = dpl__popcount64(st->devices);

		if (st->first_layer != want)
			return dpl_set_error(DPL_EINVAL,
					  "plan: stage %u starts at layer %u, "
					  "expected %u",
					  s, st->first_layer, want);
		if (st->last_layer < st->first_layer || st->last_layer >= x->n)
			return dpl_set_error(DPL_EINVAL,
					  "plan: stage %u ends at layer %u "
					  "(first %u, layers %u)",
					  s, st->last_layer, st->first_layer,
					  x->n);
		if (st->devices == 0)
			return dpl_set_error(DPL_EINVAL,
					  "plan: stage %u has no device", s);
		if (st->devices & ~x->all)
			return dpl_set_error(DPL_EINVAL,
					  "plan: stage %u names device %u; the "
					  "cluster has %u",
					  s,
					  63 - (uint32_t)__builtin_clzll(
						   st->devices & ~x->all),
					  x->G);
		if (st->devices & used)
			return dpl_set_error(DPL_EINVAL,
					  "plan: stage %u reuses device %u",
					  s,
					  (uint32_t)__builtin_ctzll(
					      st->devices & used));
		if (r > pl->microbatch_size)
			return dpl_set_error(DPL_EINVAL,
					  "plan: stage %u has %u replicas for "
					  "%u samples per micro-batch",
					  s, r, pl->microbatch_size);
		used |= st->devices;
	}
	if (pl->stage[S - 1].last_layer != x->n - 1)
		return dpl_set_error(DPL_EINVAL,
				  "plan: the last stage ends at layer %u, not "
				  "at the last layer %u",
				  pl->stage[S - 1].last_layer, x->n - 1);
	return 0;
}

static uint64_t to_bytes(double v)
{
	if (!(v > 0))
		return 0;
	if (v >= 1.8e19)
		return UINT64_MAX;
	return (uint64_t)ceil(v);
}

void dpl__plan_fill(const struct dpl__pctx *x, struct dpl_plan *plan)
{
	uint32_t S = plan->stages, mb = plan->microbatch_size;
	uint32_t M = plan->microbatches, q = 0;
	double f[2 * DPL_PLAN_MAX_STAGES], b[2 * DPL_PLAN_MAX_STAGES];
	double ar[2 * DPL_PLAN_MAX_STAGES], worst = -1;
	uint64_t used = 0;

	plan->fits = 1;
	for (uint32_t s = 0; s < S; s++) {
		struct dpl_plan_stage *st = &plan->stage[s];
		uint32_t i = st->first_layer, j = st->last_layer + 1;
		uint32_t r = dpl__popcount64(st->devices);
		double n = ceil((double)mb / r) / x->pbs;
		double P = x->P[j] - x->P[i], need;

		st->replicas = r;
		st->forward_ms = (x->F[j] - x->F[i]) * n;
		st->backward_ms = (x->B[j] - x->B[i]) * n;
		st->parameter_bytes = P;
		st->allreduce_ms = dpl__ar_ms(x, P, st->devices);
		st->send_ms = s + 1 < S ? dpl__xfer_ms(x, x->cut[j] * mb / x->pbs,
						       mb, st->devices,
						       plan->stage[s + 1].devices)
					: 0;
		st->inflight = dpl__inflight(plan->policy, S, s, M);
		need = P * (2 + x->opt) + st->inflight * (x->A[j] - x->A[i]) * n;
		st->memory_bytes = to_bytes(need);
		st->activation_bytes = to_bytes((x->A[j] - x->A[i]) * n);
		if (need > x->mem)
			plan->fits = 0;
		if (need > worst) {
			worst = need;
			plan->worst_stage = s;
		}
		used |= st->devices;
		f[2 * s] = st->forward_ms;
		b[2 * s] = st->backward_ms;
		ar[2 * s] = st->allreduce_ms;
		if (s + 1 < S) {
			f[2 * s + 1] = b[2 * s + 1] = st->send_ms;
			ar[2 * s + 1] = 0;
		}
	}
	plan->peak_memory_bytes = to_bytes(worst);
	plan->devices_used = dpl__popcount64(used);
	plan->pivot_ms = dpl_plan_pivot(f, b, ar, 2 * S - 1, M, &q);
	plan->pivot_stage = q / 2;
	plan->pivot_is_transfer = (int)(q % 2);
	plan->predicted_ms = plan->pivot_ms;
}

double dpl__plan_overflow(const struct dpl__pctx *x,
			  const struct dpl_plan *plan)
{
	return (double)plan->peak_memory_bytes - x->mem;
}
