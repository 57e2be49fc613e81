/*
 * policy_zb_auto.c - zero-bubble orders under a memory cap, one stage per
 * rank: zb-auto (a cap per stage and costs per stage) and zb-h2 (the cap
 * twice what 1F1B keeps on its first stage).
 *
 * Both run Zero Bubble's greedy heuristic in a few variants and keep the
 * fastest order under the caller's costs, replayed with free
 * communication; zb-h1 joins the candidates wherever it fits the cap, so
 * the result is never slower than zb-h1 there. The greedy takes its
 * decisions in global time order: whenever a stage is free it runs a
 * ready I, else a ready F while fewer than cap micro-batches are alive
 * (F done, W not yet), and uses W -- which only frees memory -- to fill
 * the gaps. The variants differ in when a W may take a gap and whether a
 * ready F goes before a ready I. zb-auto's transfer time T delays every
 * input that crosses two stages (the greedy plans with it, and the
 * candidates, greedy orders planned with T and with free communication,
 * are compared with the replay under T), so an order that hides T is
 * found where one exists.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* When the greedy may run a W instead of waiting for an I or F. */
enum w_mode {
	W_EAGER, /* whenever no I or F can start now */
	W_FIT,   /* when it ends before the next known I or F can start */
	W_LAZY   /* only when no F may start (cap or done) and no I is ready */
};

struct greedy {
	uint32_t S, M;
	const uint32_t *cap;
	double T;                 /* transfer time between two stages */
	struct dpl_stage_cost *c; /* [S], resolved */
	double *fend, *iend;      /* [S * M], INFINITY = not yet */
	double *free_at;          /* [S] */
	uint32_t *nf, *ni, *nw;   /* [S] */
	double *tc;               /* [S] cached candidate start */
	uint32_t *kc;             /* [S] its kind, UINT32_MAX = none */
};

static size_t ix(const struct greedy *g, uint32_t st, uint32_t mb)
{
	return (size_t)st * g->M + mb;
}

/* The next action of stage st and its start; kind UINT32_MAX for none. */
static double candidate(const struct greedy *g, uint32_t st, enum w_mode wm,
			int f_first, uint32_t *kind)
{
	double t0 = g->free_at[st], tI = INFINITY, tF = INFINITY, next;
	uint32_t nk;
	int may_f = g->nf[st] < g->M && g->nf[st] - g->nw[st] < g->cap[st];

	if (g->ni[st] < g->nf[st]) {
		double in = st == g->S - 1
				    ? g->fend[ix(g, st, g->ni[st])]
				    : g->iend[ix(g, st + 1, g->ni[st])] + g->T;
		tI = fmax(t0, in);
	}
	if (may_f)
		tF = fmax(t0, st == 0 ? 0
				      : g->fend[ix(g, st - 1, g->nf[st])] + g->T);
	if (f_first ? tF <= tI : tI > tF) {
		next = tF;
		nk = DPL_ACT_F;
	} else {
		next = tI;
		nk = DPL_ACT_I;
	}
	if (g->nw[st] < g->ni[st] && next > t0) {
		int w;

		if (wm == W_EAGER)
			w = 1;
		else if (wm == W_FIT)
			w = isinf(next) || t0 + g->c[st].w <= next;
		else
			w = !may_f && (isinf(tI) || t0 + g->c[st].w <= tI);
		if (w) {
			*kind = DPL_ACT_W;
			return t0;
		}
	}
	*kind = isinf(next) ? UINT32_MAX : nk;
	return next;
}

/*
 * A commit on stage `who` changes only the candidates of who - 1 (its I
 * input), who and who + 1 (its F input), so the others stay cached.
 */
static int run_greedy(struct greedy *g, dpl_schedule *s, enum w_mode wm,
		      int f_first)
{
	uint32_t S = g->S, M = g->M, st;
	size_t left = 3 * (size_t)S * M;

	for (size_t k = 0; k < (size_t)S * M; k++)
		g->fend[k] = g->iend[k] = INFINITY;
	memset(g->free_at, 0, S * sizeof *g->free_at);
	memset(g->nf, 0, 3 * S * sizeof *g->nf);
	for (st = 0; st < S; st++)
		g->tc[st] = candidate(g, st, wm, f_first, &g->kc[st]);
	while (left > 0) {
		double best = INFINITY, t;
		uint32_t who = UINT32_MAX, kind;

		for (st = 0; st < S; st++)
			if (g->kc[st] != UINT32_MAX && g->tc[st] < best) {
				best = g->tc[st];
				who = st;
			}
		if (who == UINT32_MAX)
			return dpl__error(DPL_EDEADLOCK,
					  "zero-bubble greedy order stalled");
		kind = g->kc[who];
		if (kind == DPL_ACT_F) {
			t = g->free_at[who] = best + g->c[who].f;
			g->fend[ix(g, who, g->nf[who])] = t;
			dpl__list_push(&s->lists[who],
				       dpl__act(DPL_ACT_F, who, g->nf[who]++));
		} else if (kind == DPL_ACT_I) {
			t = g->free_at[who] = best + g->c[who].i;
			g->iend[ix(g, who, g->ni[who])] = t;
			dpl__list_push(&s->lists[who],
				       dpl__act(DPL_ACT_I, who, g->ni[who]++));
		} else {
			g->free_at[who] = best + g->c[who].w;
			dpl__list_push(&s->lists[who],
				       dpl__act(DPL_ACT_W, who, g->nw[who]++));
		}
		for (st = who > 0 ? who - 1 : 0; st <= who + 1 && st < S; st++)
			g->tc[st] = candidate(g, st, wm, f_first, &g->kc[st]);
		left--;
	}
	return 0;
}

/* Nonzero when every stage of `c` keeps at most cap[st] alive. */
static int fits(const dpl_schedule *c, const uint32_t *cap)
{
	for (uint32_t st = 0; st < c->stages; st++)
		if (dpl_schedule_bound(c, st) > cap[st])
			return 0;
	return 1;
}

static void take_lists(dpl_schedule *dst, dpl_schedule *src)
{
	struct dpl__list *tmp = dst->lists;

	dst->lists = src->lists;
	src->lists = tmp;
}

/*
 * The fastest, replayed under transfer time T, of zb-h1 (when it fits)
 * and the greedy variants under `cap` planned with T (and, when T > 0,
 * with free communication too), into s; `nvar` bounds how many variants
 * run (the first is the one that wins most often). Ties go to the
 * earlier candidate.
 */
static int build_capped(const struct dpl_schedule_params *p, dpl_schedule *s,
			const uint32_t *cap, size_t nvar)
{
	static const struct {
		enum w_mode wm;
		int f_first;
	} var[] = {{W_FIT, 0},   {W_LAZY, 0},  {W_EAGER, 0},
		   {W_FIT, 1},   {W_LAZY, 1},  {W_EAGER, 1}};
	uint32_t S = s->stages, M = s->microbatches, st;
	struct dpl_schedule_params hp = {.stages = S, .microbatches = M,
					 .policy = DPL_POLICY_ZB_H1};
	struct greedy g = {.S = S, .M = M, .cap = cap};
	dpl_schedule *c = NULL;
	double best = INFINITY, t, T = p->transfer;
	size_t nplan = T > 0 ? 2 : 1;
	int rc;

	g.c = malloc(S * sizeof *g.c);
	g.fend = malloc(2 * (size_t)S * M * sizeof *g.fend);
	g.free_at = malloc(2 * (size_t)S * sizeof *g.free_at);
	g.nf = malloc(4 * (size_t)S * sizeof *g.nf);
	if (!g.c || !g.fend || !g.free_at || !g.nf) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	g.iend = g.fend + (size_t)S * M;
	g.ni = g.nf + S;
	g.nw = g.ni + S;
	g.kc = g.nw + S;
	g.tc = g.free_at + S;
	for (st = 0; st < S; st++)
		g.c[st] = dpl_stage_cost_resolve(
		    p->costs ? p->costs[st] : (struct dpl_stage_cost){0});
	if ((rc = dpl_schedule_build(&hp, &c)))
		goto out;
	if (fits(c, cap)) {
		if ((rc = dpl__replay_makespan(c, p->costs, T, &best)))
			goto out;
		take_lists(s, c);
	}
	if (nvar > sizeof var / sizeof var[0])
		nvar = sizeof var / sizeof var[0];
	/* Candidate k: variant k / nplan, planned with T (k even) or free. */
	for (size_t k = 0; k < nplan * nvar; k++) {
		g.T = k % nplan == 0 ? T : 0;
		for (st = 0; st < S; st++)
			c->lists[st].len = 0;
		for (st = 0; st < S; st++)
			if ((rc = dpl__list_reserve(&c->lists[st],
						    3 * (size_t)M)))
				goto out;
		rc = run_greedy(&g, c, var[k / nplan].wm,
				var[k / nplan].f_first);
		if (rc == DPL_EDEADLOCK)
			continue;
		if (rc || (rc = dpl__replay_makespan(c, p->costs, T, &t)))
			goto out;
		if (t < best) {
			best = t;
			take_lists(s, c);
		}
	}
	rc = isinf(best) ? dpl__error(DPL_EDEADLOCK,
				      "%s: no order found under the cap",
				      dpl_policy_name(p->policy))
			 : 0;
	for (st = 0; st < S && rc == 0; st++)
		s->cap[st] = cap[st];
out:
	dpl_schedule_destroy(c);
	free(g.c);
	free(g.fend);
	free(g.free_at);
	free(g.nf);
	return rc;
}

/* The caller's cap per stage, as `bounded` takes it, into cap[S]. */
static int zb_caps(const struct dpl_schedule_params *p, uint32_t *cap)
{
	uint32_t S = p->stages, st;
	int given = (p->cap_mb != NULL) + (p->cap_all != 0) +
		    (p->cap_bytes != NULL);

	if (given != 1)
		return dpl__error(DPL_EINVAL,
				  "policy zb-auto needs exactly one of cap_mb, "
				  "cap_all and cap_bytes (got %d)",
				  given);
	for (st = 0; st < S; st++) {
		uint64_t q;

		if (p->cap_bytes) {
			if (p->activation_bytes == NULL)
				return dpl__error(
				    DPL_EINVAL,
				    "cap_bytes needs activation_bytes per stage");
			if (p->activation_bytes[st] == 0)
				return dpl__error(DPL_EINVAL,
						  "stage %u: activation bytes "
						  "must be >= 1 (got 0)",
						  st);
			q = p->cap_bytes[st] / p->activation_bytes[st];
		} else {
			q = p->cap_mb ? p->cap_mb[st] : p->cap_all;
		}
		if (q < 1)
			return dpl__error(DPL_EINVAL,
					  "zb-auto: stage %u's cap holds no "
					  "micro-batch (cap 1 or more needed)",
					  st);
		cap[st] = q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
	}
	return 0;
}

int dpl__build_zb_auto(const struct dpl_schedule_params *p, dpl_schedule *s)
{
	uint32_t *cap = malloc(s->stages * sizeof *cap);
	int rc;

	if (cap == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	rc = zb_caps(p, cap);
	if (rc == 0)
		rc = build_capped(p, s, cap, SIZE_MAX);
	free(cap);
	return rc;
}

int dpl__build_zb_h2(const struct dpl_schedule_params *p, dpl_schedule *s)
{
	uint32_t *cap = malloc(s->stages * sizeof *cap), st;
	int rc;

	if (cap == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	for (st = 0; st < s->stages; st++)
		cap[st] = 2 * s->stages;
	rc = build_capped(p, s, cap, 1);
	for (st = 0; st < s->stages; st++)
		s->cap[st] = 0;
	free(cap);
	return rc;
}
