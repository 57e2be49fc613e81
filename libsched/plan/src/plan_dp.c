/*
 * plan_dp.c - DAPPLE's dynamic programme over layer cuts, device counts
 * and placements, built from the last stage back.
 *
 * A partial plan covers the layers [i, N) with k stages on the devices
 * `occ`; it is summarised by three numbers that make the pivot latency
 * of any completion computable when stages are prepended:
 *   z = the latency of the partial pipeline alone (max over pairs of
 *       pivot Q and stage s of the formula's terms, measured from the
 *       start of its first stage);
 *   u = max over its stages s of AR_s - sum of B of the stages before s;
 *   v = max over its stages Q of sum of (F + B) before Q + M (F_Q + B_Q).
 * Prepending a stage (F, B, AR) gives
 *   z' = max(F + z, AR + M (F + B), M F + (M - 1) B + u, AR + F + B + v)
 *   u' = max(AR, u - B),  v' = max(M (F + B), F + B + v),
 * and the complete plan's z is exactly DAPPLE's L (plan.h). Every term
 * only grows with z, u, v and the number of stages k (warm-up depth and
 * so memory of the stages still to come), so a state (i, occ) keeps the
 * partial plans not dominated in (z, u, v, k) among those whose first
 * stage's devices cost the same to reach.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/plan.h>

#include "plan_internal.h"

/* Most cut positions the DP tries (the paper's models have up to 51). */
#define DP_MAX_CUTS 64
/* Transitions tried over all micro-batch sizes (about a second); a run
 * that reaches its share stops expanding states (report not exact). */
#define DP_WORK 25000000ULL

struct ent {
	double z, u, v;
	uint64_t first; /* devices of the first stage */
	uint64_t occ;   /* devices of all stages */
	int32_t parent; /* entry this one extends; -1 for the root */
	uint32_t i, j;  /* first stage = layers [i, j) */
	uint32_t k;     /* stages */
	uint32_t r;     /* devices of the first stage */
};

struct front {
	uint64_t occ;
	uint32_t pos;
	int32_t *idx;
	uint32_t n, cap;
};

struct opt {
	uint32_t r;
	uint64_t g;
	double nrep; /* samples per replica / profile batch */
};

struct dp {
	const struct dpl__pctx *x;
	uint32_t mb, M, cap;
	double bound, slack;
	int flat; /* one level of links: only replica counts matter */
	int capped;
	struct ent *e;
	size_t ne, ecap;
	struct front *f;
	size_t nf, fcap;
	int32_t *ht; /* (pos, occ) -> front, -1 empty */
	size_t htcap;
	uint32_t **bypos; /* per position: front ids */
	uint32_t *nbypos, *capbypos;
	uint32_t *cuts; /* allowed positions, ascending, with 0 and N */
	uint32_t ncuts;
	struct dpl__pool *pool;
	uint64_t states;
	uint64_t work, budget; /* transitions tried, and the limit of a run */
	int truncated;
	double nmin[DPL_PLAN_MAX_DEVICES + 1]; /* see lower_bound() */
	double mbf[DPL_PLAN_MAX_DEVICES + 1];
};


static uint64_t hkey(uint32_t pos, uint64_t occ)
{
	uint64_t h = occ * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)pos << 32 | pos);

	h ^= h >> 29;
	return h * 0xBF58476D1CE4E5B9ULL;
}

static int ht_grow(struct dp *d)
{
	size_t cap = d->htcap ? 2 * d->htcap : 1024;
	int32_t *t = malloc(cap * sizeof *t);

	if (t == NULL)
		return dpl_set_error(DPL_ENOMEM, "out of memory");
	for (size_t k = 0; k < cap; k++)
		t[k] = -1;
	for (size_t k = 0; k < d->nf; k++) {
		size_t h = hkey(d->f[k].pos, d->f[k].occ) & (cap - 1);

		while (t[h] >= 0)
			h = (h + 1) & (cap - 1);
		t[h] = (int32_t)k;
	}
	free(d->ht);
	d->ht = t;
	d->htcap = cap;
	return 0;
}

/* The front of state (pos, occ), created when missing. */
static int front_get(struct dp *d, uint32_t pos, uint64_t occ, uint32_t *out)
{
	size_t h;
	int rc;

	if (2 * (d->nf + 1) > d->htcap && (rc = ht_grow(d)))
		return rc;
	h = hkey(pos, occ) & (d->htcap - 1);
	while (d->ht[h] >= 0) {
		struct front *f = &d->f[d->ht[h]];

		if (f->pos == pos && f->occ == occ) {
			*out = (uint32_t)d->ht[h];
			return 0;
		}
		h = (h + 1) & (d->htcap - 1);
	}
	if (d->nf == d->fcap) {
		size_t cap = d->fcap ? 2 * d->fcap : 256;
		struct front *p = realloc(d->f, cap * sizeof *p);

		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		d->f = p;
		d->fcap = cap;
	}
	if (d->nbypos[pos] == d->capbypos[pos]) {
		uint32_t cap = d->capbypos[pos] ? 2 * d->capbypos[pos] : 8;
		uint32_t *p = realloc(d->bypos[pos], cap * sizeof *p);

		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		d->bypos[pos] = p;
		d->capbypos[pos] = cap;
	}
	d->f[d->nf] = (struct front){occ, pos, NULL, 0, 0};
	d->ht[h] = (int32_t)d->nf;
	d->bypos[pos][d->nbypos[pos]++] = (uint32_t)d->nf;
	*out = (uint32_t)d->nf++;
	return 0;
}

static int dominates(const struct dp *d, const struct ent *a,
		     const struct ent *b)
{
	if (d->flat ? a->r < b->r : a->first != b->first)
		return 0;
	return a->z <= b->z && a->u <= b->u && a->v <= b->v && a->k <= b->k;
}

/* Pool of complete structures, best pivot first. */
static int same_structure(const struct dpl_plan *a, const struct dpl_plan *b)
{
	if (a->stages != b->stages)
		return 0;
	for (uint32_t s = 0; s < a->stages; s++)
		if (a->stage[s].last_layer != b->stage[s].last_layer ||
		    a->stage[s].devices != b->stage[s].devices)
			return 0;
	return 1;
}

static void pool_offer(struct dp *d, int32_t idx)
{
	struct dpl__pool *pool = d->pool;
	struct dpl_plan *pl;
	const struct ent *e = &d->e[idx];
	double z = e->z;
	uint32_t at, s = 0;

	if (pool->n == pool->cap && z >= pool->pivot[pool->n - 1])
		return;
	/* Build the structure in the spare slot past the end. */
	pl = &pool->plan[pool->cap];
	memset(pl, 0, sizeof *pl);
	for (int32_t k = idx; k >= 0 && d->e[k].k > 0; k = d->e[k].parent) {
		const struct ent *t = &d->e[k];

		pl->stage[s].first_layer = t->i;
		pl->stage[s].last_layer = t->j - 1;
		pl->stage[s].devices = t->first;
		s++;
	}
	pl->stages = s;
	pl->microbatch_size = d->mb;
	pl->microbatches = d->M;
	pl->policy = DPL_POLICY_1F1B;
	for (uint32_t k = 0; k < pool->n; k++)
		if (same_structure(&pool->plan[k], pl)) {
			if (z >= pool->pivot[k])
				return;
			/* drop the old copy; re-insert below */
			memmove(&pool->plan[k], &pool->plan[k + 1],
				(pool->n - k - 1) * sizeof *pool->plan);
			memmove(&pool->pivot[k], &pool->pivot[k + 1],
				(pool->n - k - 1) * sizeof *pool->pivot);
			pool->n--;
			break;
		}
	at = pool->n;
	while (at > 0 && pool->pivot[at - 1] > z)
		at--;
	if (at >= pool->cap)
		return;
	{
		struct dpl_plan tmp = *pl;
		uint32_t last = pool->n < pool->cap ? pool->n : pool->cap - 1;

		memmove(&pool->plan[at + 1], &pool->plan[at],
			(last - at) * sizeof *pool->plan);
		memmove(&pool->pivot[at + 1], &pool->pivot[at],
			(last - at) * sizeof *pool->pivot);
		pool->plan[at] = tmp;
		pool->pivot[at] = z;
		if (pool->n < pool->cap)
			pool->n++;
	}
}

static int insert(struct dp *d, uint32_t pos, const struct ent *ne)
{
	uint32_t fid, w = 0;
	struct front *f;
	int rc;

	if ((rc = front_get(d, pos, ne->occ, &fid)))
		return rc;
	f = &d->f[fid];
	for (uint32_t k = 0; k < f->n; k++)
		if (dominates(d, &d->e[f->idx[k]], ne))
			return 0;
	for (uint32_t k = 0; k < f->n; k++)
		if (!dominates(d, ne, &d->e[f->idx[k]]))
			f->idx[w++] = f->idx[k];
	f->n = w;
	if (f->n == f->cap) {
		uint32_t cap = f->cap ? 2 * f->cap : 4;
		int32_t *p = realloc(f->idx, cap * sizeof *p);

		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		f->idx = p;
		f->cap = cap;
	}
	if (d->ne == d->ecap) {
		size_t cap = d->ecap ? 2 * d->ecap : 4096;
		struct ent *p = realloc(d->e, cap * sizeof *p);

		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		d->e = p;
		d->ecap = cap;
	}
	d->e[d->ne] = *ne;
	f->idx[f->n++] = (int32_t)d->ne;
	d->states++;
	if (pos == 0) {
		if (ne->z < d->bound)
			d->bound = ne->z;
		pool_offer(d, (int32_t)d->ne);
	}
	d->ne++;
	if (f->n > d->cap) {
		uint32_t worst = 0;

		for (uint32_t k = 1; k < f->n; k++)
			if (d->e[f->idx[k]].z > d->e[f->idx[worst]].z)
				worst = k;
		f->idx[worst] = f->idx[--f->n];
		d->capped = 1;
	}
	return 0;
}

static inline double dmax(double a, double b)
{
	return a > b ? a : b;
}

static void prepend(double M, double F, double B, double AR, double *z,
		    double *u, double *v)
{
	double nz = F + *z;

	nz = dmax(nz, AR + M * (F + B));
	nz = dmax(nz, M * F + (M - 1) * B + *u);
	nz = dmax(nz, AR + F + B + *v);
	*u = dmax(AR, *u - B);
	*v = dmax(M * (F + B), F + B + *v);
	*z = nz;
}

/* Lower bound on the latency of any completion of a partial plan. */
static double lower_bound(const struct dp *d, double z, uint32_t i,
			  uint32_t nfree)
{
	const struct dpl__pctx *x = d->x;

	if (i == 0)
		return z;
	if (nfree == 0)
		return HUGE_VAL;
	/* nmin[f]: samples per profile batch of the widest stage f free
	 * devices allow; mbf[f]: mb / (pbs f) */
	return dmax(z + x->F[i] * d->nmin[nfree],
		    d->M * (x->F[i] + x->B[i]) * d->mbf[nfree]);
}

static double limit(const struct dp *d)
{
	return d->bound * (1 + d->slack);
}

static int expand(struct dp *d, uint32_t fid)
{
	const struct dpl__pctx *x = d->x;
	struct opt opts[3 * DPL_PLAN_MAX_DEVICES];
	uint32_t nopt = 0, j = d->f[fid].pos, nfree, rmax;
	uint64_t occ = d->f[fid].occ, freem = x->all & ~occ;
	uint32_t max_stages = x->p->max_stages;
	double nrep_min = HUGE_VAL;
	int rc;

	nfree = dpl__popcount64(freem);
	if (nfree == 0)
		return 0;
	rmax = nfree < d->mb ? nfree : d->mb;
	for (uint32_t r = 1; r <= rmax; r++)
		for (int pol = 0; pol < DPL_PLACE__COUNT; pol++) {
			uint64_t g;
			int dup = 0;

			if (dpl__place(x->c, occ, r, (enum dpl_placement)pol, &g))
				continue;
			for (uint32_t k = 0; k < nopt; k++)
				dup |= opts[k].g == g;
			if (dup)
				continue;
			opts[nopt++] = (struct opt){
			    r, g, ceil((double)d->mb / r) / x->pbs};
			if (opts[nopt - 1].nrep < nrep_min)
				nrep_min = opts[nopt - 1].nrep;
		}
	for (uint32_t q = 0; q < d->f[fid].n; q++) {
		struct ent e = d->e[d->f[fid].idx[q]];
		uint32_t infl, ci;
		double xfer_bytes = x->cut[j] * d->mb / x->pbs;
		double cost[3 * DPL_PLAN_MAX_DEVICES];

		if (lower_bound(d, e.z, j, nfree) > limit(d))
			continue;
		if (max_stages && e.k >= max_stages)
			continue;
		if (d->work > d->budget) {
			d->truncated = 1;
			return 0;
		}
		infl = e.k + 1 < d->M ? e.k + 1 : d->M;
		/* the transfer into the suffix depends on the option only */
		for (uint32_t k = 0; k < nopt; k++)
			cost[k] = e.k > 0 ? dpl__xfer_ms(x, xfer_bytes, d->mb,
							 opts[k].g, e.first)
					  : 0;
		/* allowed positions below j, descending */
		for (ci = d->ncuts; ci-- > 0 && d->cuts[ci] >= j;)
			;
		for (ci++; ci-- > 0;) {
			uint32_t i = d->cuts[ci];
			double Fs = x->F[j] - x->F[i], Bs = x->B[j] - x->B[i];
			double As = x->A[j] - x->A[i], Ps = x->P[j] - x->P[i];
			double stat = Ps * (2 + x->opt), lim = limit(d);

			if (stat + infl * As * nrep_min > x->mem)
				break;
			if (d->M * (Fs + Bs) * nrep_min > lim)
				break;
			for (uint32_t k = 0; k < nopt; k++) {
				const struct opt *o = &opts[k];
				struct ent ne;
				double F, B, AR;

				d->work++;
				if (stat + infl * As * o->nrep > x->mem)
					continue;
				F = Fs * o->nrep;
				B = Bs * o->nrep;
				if (d->M * (F + B) > lim)
					continue;
				AR = dpl__ar_ms(x, Ps, o->g);
				ne = (struct ent){e.z, e.u, e.v, o->g, occ | o->g,
						  d->f[fid].idx[q], i, j,
						  e.k + 1, o->r};
				if (e.k > 0)
					prepend(d->M, cost[k], cost[k], 0, &ne.z,
						&ne.u, &ne.v);
				prepend(d->M, F, B, AR, &ne.z, &ne.u, &ne.v);
				if (lower_bound(d, ne.z, i, nfree - o->r) > lim)
					continue;
				if ((rc = insert(d, i, &ne)))
					return rc;
			}
		}
	}
	return 0;
}

static void dp_reset(struct dp *d)
{
	for (size_t k = 0; k < d->nf; k++)
		free(d->f[k].idx);
	d->nf = 0;
	d->ne = 0;
	for (size_t k = 0; k < d->htcap; k++)
		d->ht[k] = -1;
	for (uint32_t p = 0; p <= d->x->n; p++)
		d->nbypos[p] = 0;
}

static void dp_free(struct dp *d)
{
	dp_reset(d);
	free(d->f);
	free(d->e);
	free(d->ht);
	if (d->bypos)
		for (uint32_t p = 0; p <= d->x->n; p++)
			free(d->bypos[p]);
	free(d->bypos);
	free(d->nbypos);
	free(d->capbypos);
	free(d->cuts);
}

static int run_one(struct dp *d)
{
	struct ent root = {0, -HUGE_VAL, -HUGE_VAL, 0, 0, -1, 0, 0, 0, 0};
	uint32_t fid;
	int rc;

	dp_reset(d);
	root.i = root.j = d->x->n;
	if ((rc = front_get(d, d->x->n, 0, &fid)))
		return rc;
	if (d->f[fid].cap == 0) {
		d->f[fid].idx = malloc(4 * sizeof *d->f[fid].idx);
		if (d->f[fid].idx == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		d->f[fid].cap = 4;
	}
	if (d->ne == d->ecap) {
		struct ent *p = realloc(d->e, 4096 * sizeof *p);

		if (p == NULL)
			return dpl_set_error(DPL_ENOMEM, "out of memory");
		d->e = p;
		d->ecap = 4096;
	}
	d->e[d->ne] = root;
	d->f[fid].idx[d->f[fid].n++] = (int32_t)d->ne++;
	d->work = 0;
	for (uint32_t ci = d->ncuts; ci-- > 1 && d->work <= d->budget;) {
		uint32_t j = d->cuts[ci];

		for (uint32_t k = 0; k < d->nbypos[j]; k++)
			if ((rc = expand(d, d->bypos[j][k])))
				return rc;
	}
	return 0;
}

int dpl__dp_search(const struct dpl__pctx *x, double bound,
		   struct dpl__pool *pool, struct dpl__dp_stats *st)
{
	struct dp d = {0};
	uint32_t gbs = x->p->global_batch, sizes[64 + 130], ns = 0;
	int rc;

	d.x = x;
	d.pool = pool;
	d.bound = bound;
	d.cap = x->p->front_cap ? x->p->front_cap : 48;
	d.slack = x->p->rank == DPL_PLAN_RANK_PIVOT ? 0 : 0.15;
	d.flat = x->c->machines == 1 || x->c->devices_per_machine == 1;
	d.bypos = calloc((size_t)x->n + 1, sizeof *d.bypos);
	d.nbypos = calloc((size_t)x->n + 1, sizeof *d.nbypos);
	d.capbypos = calloc((size_t)x->n + 1, sizeof *d.capbypos);
	if (!d.bypos || !d.nbypos || !d.capbypos) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = dpl__cut_positions(x, DP_MAX_CUTS, &d.cuts, &d.ncuts)) ||
	    (rc = ht_grow(&d)))
		goto out;
	/* Micro-batch sizes, largest first. */
	if (x->p->microbatch_size) {
		sizes[ns++] = x->p->microbatch_size;
	} else if (gbs <= 64) {
		for (uint32_t M = 1; M <= gbs; M++) {
			uint32_t mb = (gbs + M - 1) / M;

			if (ns == 0 || sizes[ns - 1] != mb)
				sizes[ns++] = mb;
		}
	} else {
		uint32_t p2 = 1;

		while (p2 <= gbs / 2)
			p2 *= 2;
		if (p2 != gbs)
			sizes[ns++] = gbs;
		for (; p2 >= 1; p2 /= 2)
			sizes[ns++] = p2;
	}
	d.budget = DP_WORK / ns;
	for (uint32_t k = 0; k < ns; k++) {
		d.mb = sizes[k];
		d.M = (uint32_t)(((uint64_t)gbs + d.mb - 1) / d.mb);
		for (uint32_t f = 1; f <= DPL_PLAN_MAX_DEVICES; f++) {
			uint32_t r = f < d.mb ? f : d.mb;

			d.nmin[f] = ceil((double)d.mb / r) / x->pbs;
			d.mbf[f] = (double)d.mb / (x->pbs * f);
		}
		if ((rc = run_one(&d)))
			goto out;
		st->runs++;
	}
	st->states += d.states;
	st->capped |= d.capped;
	st->truncated |= d.truncated;
out:
	dp_free(&d);
	return rc;
}
