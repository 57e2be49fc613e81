/*
 * plan_pipedream.c - PipeDream's planner (optimizer_graph_hierarchical.py
 * of msr-fiddle/pipedream), as a baseline: the same DP, the same cost
 * terms and memory check, level by level over the cluster's hierarchy,
 * on dpl's topological layer order (its states are the prefixes of that
 * order; PipeDream's antichain states reduce to these for chains).
 *
 * Faithful details: compute time is forward + backward in seconds at the
 * profile batch; a source layer whose name starts with "Input" costs
 * nothing; the replicated-stage time is (compute + 4 (m-1) P / (bw m)) / m,
 * with the all-reduce term of whole-range replication divided by the
 * devices per machine at the upper level (PipeDream's
 * num_machines_within_machine) and that of a split's last stage not; the
 * transfer term 2 A / (bw m') is counted on both sides of a cut (PipeDream
 * counts it when --activation_compression_ratio is given; here with ratio
 * 1); the memory check ceil((N - m) / m) (activations + P) <= memory
 * uses the stage's summed activation and parameter bytes; every device
 * is used (no --use_fewer_machines); a range's time at the upper level is
 * its best time on a whole machine.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

struct cell {
	double t;     /* NAN: none */
	int32_t k;    /* split: prefix i..k on m - mp devices; -1: none */
	int32_t mrem; /* devices (index) of the prefix */
	int32_t mp;   /* devices of the last stage (or of the whole range) */
};

struct level {
	uint32_t nm;     /* machines at this level */
	double bw;
	double within;   /* num_machines_within_machine */
	struct cell *a;  /* [n][n][nm] */
};

struct pd {
	const struct dpl__pctx *x;
	uint32_t n;
	double *c;   /* [n + 1] prefix compute, seconds */
	double *act; /* [n + 1] prefix activation bytes */
	double *par; /* [n + 1] prefix parameter bytes */
	double *out; /* [n] output activation of prefix ..k (cut after k) */
	double mem;
};

static inline double dmax(double a, double b)
{
	return a > b ? a : b;
}

static struct cell *at(const struct level *lv, uint32_t n, uint32_t i,
		       uint32_t j, uint32_t m)
{
	return &lv->a[((size_t)i * n + j) * lv->nm + m];
}

/* compute_times[i][j] of this level: layer sums or the level below. */
static double ctime(const struct pd *d, const struct level *below, uint32_t i,
		    uint32_t j)
{
	if (below == NULL)
		return d->c[j + 1] - d->c[i];
	return at(below, d->n, i, j, below->nm - 1)->t;
}

static void solve_level(const struct pd *d, const struct level *below,
			struct level *lv, int final)
{
	uint32_t n = d->n, nm = lv->nm;
	double bw = lv->bw, mem = d->mem;

	for (size_t k = 0; k < (size_t)n * n * nm; k++)
		lv->a[k] = (struct cell){NAN, -1, -1, 0};
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = i; j < n; j++) {
			double cc = ctime(d, below, i, j);
			double ca = d->act[j + 1] - d->act[i];
			double cp = d->par[j + 1] - d->par[i];

			for (uint32_t m = 0; m < nm; m++) {
				double stash = ceil((double)(nm - (m + 1)) /
						    (m + 1)) *
					       (ca + cp);
				double dp;

				if (stash > mem || isnan(cc))
					continue;
				dp = m ? 4.0 * m * cp / (bw * (m + 1)) / lv->within
				       : 0;
				*at(lv, n, i, j, m) = (struct cell){
				    (cc + dp) / (m + 1), -1, -1, (int32_t)m + 1};
			}
		}
	for (uint32_t i = 0; i < (final ? 1u : n); i++)
		for (uint32_t m = 1; m < nm; m++)
			for (uint32_t j = i + 1; j < n; j++) {
				struct cell best = *at(lv, n, i, j, m);
				double cap = ceil((double)(nm - (m + 1)));

				for (uint32_t k = i; k < j; k++) {
					double last0 = ctime(d, below, k + 1, j);
					double la = d->act[j + 1] - d->act[k + 1];
					double lp = d->par[j + 1] - d->par[k + 1];
					double xfer = 2.0 * d->out[k], xout;

					if (isnan(last0))
						continue;
					xout = j < n - 1 ? 2.0 * d->out[j] : 0;
					for (uint32_t mp = 1; mp <= m; mp++) {
						const struct cell *pre =
						    at(lv, n, i, k, m - mp);
						double inv = 1.0 / (bw * mp), t;
						double stash = (la + lp) *
							       ceil(cap / mp);

						if (stash > mem || isnan(pre->t))
							continue;
						t = (last0 + 4.0 * (mp - 1) * lp *
								 inv) /
						    mp;
						t = dmax(t, pre->t);
						t = dmax(t, xfer * inv);
						t = dmax(t, xout * inv);
						if (isnan(best.t) || best.t > t)
							best = (struct cell){
							    t, (int32_t)k,
							    (int32_t)(m - mp),
							    (int32_t)mp};
					}
				}
				*at(lv, n, i, j, m) = best;
			}
}

/* Stages of range [s, e) at level lv: (end, replicas) in order. */
static uint32_t analyze(const struct pd *d, const struct level *lv,
			uint32_t s, uint32_t e, uint32_t *ends, uint32_t *reps)
{
	const struct cell *c = at(lv, d->n, s, e - 1, lv->nm - 1);
	uint32_t cnt = 0, rev_e[DPL_PLAN_MAX_DEVICES + 1];
	uint32_t rev_r[DPL_PLAN_MAX_DEVICES + 1];
	uint32_t end = e;

	while (c->k >= 0) {
		rev_e[cnt] = end;
		rev_r[cnt] = (uint32_t)c->mp;
		cnt++;
		end = (uint32_t)c->k + 1;
		c = at(lv, d->n, s, (uint32_t)c->k, (uint32_t)c->mrem);
	}
	rev_e[cnt] = end;
	rev_r[cnt] = (uint32_t)c->mp;
	cnt++;
	for (uint32_t k = 0; k < cnt; k++) {
		ends[k] = rev_e[cnt - 1 - k];
		reps[k] = rev_r[cnt - 1 - k];
	}
	return cnt;
}

/* Most layer ranges ("units") the DP runs on; deeper profiles are cut
 * into this many by dpl__coarsen() so that the O(N^3) DP stays bounded. */
#define PD_MAX_UNITS 128

int dpl__pipedream_stages(const struct dpl__pctx *x, struct dpl_plan *out)
{
	const struct dpl_cluster *cl = x->c;
	struct pd d = {x, 0, NULL, NULL, NULL, NULL, x->mem};
	struct level lv[2] = {{0}};
	uint32_t nlev = 0, n, N = x->n, *upos = NULL;
	double *lc = NULL, *la = NULL, *lp = NULL;
	int rc = 0;

	lc = calloc((size_t)N + 1, sizeof *lc);
	la = calloc((size_t)N + 1, sizeof *la);
	lp = calloc((size_t)N + 1, sizeof *lp);
	upos = malloc(((size_t)N + 1) * sizeof *upos);
	d.c = calloc((size_t)N + 1, sizeof *d.c);
	d.act = calloc((size_t)N + 1, sizeof *d.act);
	d.par = calloc((size_t)N + 1, sizeof *d.par);
	d.out = calloc((size_t)N + 1, sizeof *d.out);
	if (!lc || !la || !lp || !upos || !d.c || !d.act || !d.par || !d.out) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto done;
	}
	for (uint32_t i = 0; i < N; i++) {
		const struct dpl_layer *l = dpl_profile_layer(x->prof, i);
		int input = strncmp(l->name, "Input", 5) == 0;
		double f = l->forward_ms, b = l->backward_ms;
		double a = l->activation_bytes, p = l->parameter_bytes;

		/* sources named Input* are zeroed, as PipeDream does */
		if (input)
			for (size_t k = 0; k < dpl_profile_edges(x->prof); k++) {
				uint32_t from, to;

				dpl_profile_edge(x->prof, k, &from, &to);
				if (to == i) {
					input = 0;
					break;
				}
			}
		if (input)
			f = b = a = p = 0;
		lc[i + 1] = lc[i] + (f + b) / 1000.0;
		la[i + 1] = la[i] + a;
		lp[i + 1] = lp[i] + p;
	}
	/* units: single layers, or ranges of them on very deep profiles */
	for (uint32_t i = 0; i <= N; i++)
		upos[i] = i;
	n = dpl__coarsen(x, upos, N + 1, PD_MAX_UNITS - 1) - 1;
	d.n = n;
	for (uint32_t u = 0; u <= n; u++) {
		d.c[u] = lc[upos[u]];
		d.act[u] = la[upos[u]];
		d.par[u] = lp[upos[u]];
		if (u < n)
			d.out[u] = x->cut[upos[u + 1]];
	}
	if (cl->devices_per_machine > 1)
		lv[nlev++] = (struct level){cl->devices_per_machine,
					    cl->intra_bandwidth, 1, NULL};
	if (cl->machines > 1 || nlev == 0) {
		double within = nlev ? cl->devices_per_machine : 1;

		lv[nlev++] = (struct level){cl->machines, cl->inter_bandwidth,
					    within, NULL};
	}
	for (uint32_t k = 0; k < nlev; k++) {
		lv[k].a = malloc((size_t)n * n * lv[k].nm * sizeof *lv[k].a);
		if (lv[k].a == NULL) {
			rc = dpl_set_error(DPL_ENOMEM, "out of memory");
			goto done;
		}
		solve_level(&d, k ? &lv[k - 1] : NULL, &lv[k], k == nlev - 1);
	}
	if (isnan(at(&lv[nlev - 1], n, 0, n - 1, lv[nlev - 1].nm - 1)->t)) {
		rc = dpl_set_error(DPL_ENOENT,
				"PipeDream's planner finds no partition that "
				"passes its memory check");
		goto done;
	}
	memset(out, 0, sizeof *out);
	{
		uint32_t ends[DPL_PLAN_MAX_DEVICES + 1];
		uint32_t reps[DPL_PLAN_MAX_DEVICES + 1];
		uint32_t nb = analyze(&d, &lv[nlev - 1], 0, n, ends, reps);
		uint32_t start = 0, mach = 0, S = 0;

		for (uint32_t b = 0; b < nb; b++) {
			if (nlev == 1) {
				/* one level: reps[b] consecutive devices */
				uint64_t g = 0;
				uint32_t first = mach;

				for (uint32_t r = 0; r < reps[b]; r++)
					g |= 1ULL << (first + r);
				mach += reps[b];
				out->stage[S++] = (struct dpl_plan_stage){
				    .first_layer = upos[start],
				    .last_layer = upos[ends[b]] - 1,
				    .devices = g};
			} else {
				/* the block on reps[b] machines, each
				 * running the level-1 plan of the range */
				uint32_t e2[DPL_PLAN_MAX_DEVICES + 1];
				uint32_t r2[DPL_PLAN_MAX_DEVICES + 1];
				uint32_t ns = analyze(&d, &lv[0], start,
						      ends[b], e2, r2);
				uint32_t s0 = start, off = 0;

				for (uint32_t k = 0; k < ns; k++) {
					uint64_t g = 0;

					for (uint32_t m = 0; m < reps[b]; m++)
						for (uint32_t r = 0; r < r2[k]; r++)
							g |= 1ULL
							     << ((mach + m) *
								     cl->devices_per_machine +
								 off + r);
					off += r2[k];
					out->stage[S++] =
					    (struct dpl_plan_stage){
						.first_layer = upos[s0],
						.last_layer = upos[e2[k]] - 1,
						.devices = g};
					s0 = e2[k];
				}
				mach += reps[b];
			}
			start = ends[b];
		}
		out->stages = S;
	}
	out->policy = DPL_POLICY_1F1B;
done:
	free(lc);
	free(la);
	free(lp);
	free(upos);
	free(d.c);
	free(d.act);
	free(d.par);
	free(d.out);
	for (uint32_t k = 0; k < nlev; k++)
		free(lv[k].a);
	return rc;
}
