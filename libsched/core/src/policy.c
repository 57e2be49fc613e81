/* policy.c - the schedule policies: compute-only action lists per rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const policy_names[DPL_POLICY__COUNT] = {
	[DPL_POLICY_GPIPE] = "gpipe",
	[DPL_POLICY_1F1B] = "1f1b",
	[DPL_POLICY_1F1B_COMM] = "1f1b-comm",
	[DPL_POLICY_BOUNDED] = "bounded",
	[DPL_POLICY_INTERLEAVED] = "interleaved",
	[DPL_POLICY_ZB_H1] = "zb-h1",
	[DPL_POLICY_CUSTOM] = "custom",
	[DPL_POLICY_LOOPED_BFS] = "looped-bfs",
	[DPL_POLICY_INTERLEAVED_ZB] = "interleaved-zb",
	[DPL_POLICY_ZBV] = "zbv",
	[DPL_POLICY_ZB_H2] = "zb-h2",
	[DPL_POLICY_ZB_AUTO] = "zb-auto",
	[DPL_POLICY_DUALPIPEV] = "dualpipev",
};

const char *dpl_policy_name(enum dpl_policy p)
{
	return (unsigned)p < DPL_POLICY__COUNT ? policy_names[p] : NULL;
}

int dpl_policy_parse(const char *name, enum dpl_policy *out)
{
	int p;

	for (p = 0; p < DPL_POLICY__COUNT; p++)
		if (strcmp(name, policy_names[p]) == 0) {
			*out = (enum dpl_policy)p;
			return 0;
		}
	return dpl__error(DPL_EINVAL,
			  "unknown policy '%s' (expected gpipe, 1f1b, "
			  "1f1b-comm, bounded, interleaved, zb-h1, "
			  "looped-bfs, interleaved-zb, zbv, zb-h2, zb-auto, "
			  "dualpipev)",
			  name);
}

static int push(dpl_schedule *s, uint32_t kind, uint32_t stage, uint32_t mb)
{
	return dpl__list_push(&s->lists[s->stage_rank[stage]],
			      dpl__act(kind, stage, mb));
}

/*
 * The 1F1B family, one stage per rank: stage s runs K[s] forwards, then
 * strictly one backward and one forward, then drains the backwards.
 * K[s] = M gives GPipe. Valid when K is non-increasing in s: stage s + 1
 * then never waits for a forward that stage s only runs after a
 * backward that depends on it.
 */
static int build_warmup(dpl_schedule *s, const uint32_t *K)
{
	uint32_t st, f, b, M = s->microbatches;
	int rc;

	for (st = 0; st < s->stages; st++) {
		rc = dpl__list_reserve(&s->lists[st], 2 * (size_t)M);
		if (rc)
			return rc;
		f = b = 0;
		while (f < K[st])
			push(s, DPL_ACT_F, st, f++);
		while (f < M) {
			push(s, DPL_ACT_B, st, b++);
			push(s, DPL_ACT_F, st, f++);
		}
		while (b < M)
			push(s, DPL_ACT_B, st, b++);
	}
	return 0;
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

static int build_fixed(dpl_schedule *s, enum dpl_policy p)
{
	uint32_t S = s->stages, M = s->microbatches, st, *K;
	int rc;

	K = malloc(S * sizeof *K);
	if (K == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	for (st = 0; st < S; st++) {
		if (p == DPL_POLICY_GPIPE)
			K[st] = M;
		else if (p == DPL_POLICY_1F1B)
			K[st] = min_u32(S - st, M);
		else /* 1f1b-comm: 2(S - s) - 1 never overflows for S < 2^31 */
			K[st] = min_u32(2 * (S - st) - 1, M);
	}
	rc = build_warmup(s, K);
	free(K);
	return rc;
}

/*
 * zb-h1: 1F1B's warm-up, the backward split into I and W, and the W of
 * rank r delayed by r micro-batches so that W fills the bubbles of the
 * cool-down (ZB-H1 of the zero-bubble paper).
 */
static int build_zb_h1(dpl_schedule *s)
{
	uint32_t S = s->stages, M = s->microbatches, st;
	int rc;

	for (st = 0; st < S; st++) {
		uint32_t K = min_u32(S - st, M), d = st, f = 0, i = 0, w = 0;

		rc = dpl__list_reserve(&s->lists[st], 3 * (size_t)M);
		if (rc)
			return rc;
		while (f < K)
			push(s, DPL_ACT_F, st, f++);
		while (f < M) {
			push(s, DPL_ACT_I, st, i++);
			if (i - w > d)
				push(s, DPL_ACT_W, st, w++);
			push(s, DPL_ACT_F, st, f++);
		}
		while (i < M) {
			push(s, DPL_ACT_I, st, i++);
			if (i - w > d)
				push(s, DPL_ACT_W, st, w++);
		}
		while (w < M)
			push(s, DPL_ACT_W, st, w++);
	}
	return 0;
}

/*
 * The greedy list order of `bounded`: whenever a stage is free it runs the
 * oldest ready backward, else the next forward if its input is there and
 * fewer than cap micro-batches are alive. Decisions are taken in global
 * time order, so every readiness a decision could see is known.
 */
static int build_greedy(dpl_schedule *s, const uint32_t *cap,
			const struct dpl_stage_cost *costs)
{
	uint32_t S = s->stages, M = s->microbatches, st;
	size_t n = (size_t)S * M, left = 2 * n;
	double *fend, *bend, *free_at;
	uint32_t *nf, *nb;
	int rc = 0;

	fend = malloc(n * sizeof *fend);
	bend = malloc(n * sizeof *bend);
	free_at = calloc(S, sizeof *free_at);
	nf = calloc(S, sizeof *nf);
	nb = calloc(S, sizeof *nb);
	if (!fend || !bend || !free_at || !nf || !nb) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < n; k++)
		fend[k] = bend[k] = INFINITY;
	for (st = 0; st < S; st++)
		if ((rc = dpl__list_reserve(&s->lists[st], 2 * (size_t)M)))
			goto out;
	while (left > 0) {
		double best = INFINITY;
		uint32_t who = UINT32_MAX, kind = 0;

		for (st = 0; st < S; st++) {
			double tb = INFINITY, tf = INFINITY, ready;

			if (nb[st] < nf[st]) {
				ready = st == S - 1 ? fend[dpl__sm(s, st, nb[st])]
						    : bend[dpl__sm(s, st + 1, nb[st])];
				tb = fmax(free_at[st], ready);
			}
			if (nf[st] < M && nf[st] - nb[st] < cap[st]) {
				ready = st == 0 ? 0 : fend[dpl__sm(s, st - 1, nf[st])];
				tf = fmax(free_at[st], ready);
			}
			if (tb <= tf && tb < best) {
				best = tb;
				who = st;
				kind = DPL_ACT_B;
			} else if (tf < tb && tf < best) {
				best = tf;
				who = st;
				kind = DPL_ACT_F;
			}
		}
		if (who == UINT32_MAX) {
			rc = dpl__error(DPL_EDEADLOCK,
					"bounded: greedy order stalled");
			goto out;
		}
		struct dpl_stage_cost c = dpl_stage_cost_resolve(
		    costs ? costs[who] : (struct dpl_stage_cost){0});
		if (kind == DPL_ACT_B) {
			free_at[who] = best + c.b;
			bend[dpl__sm(s, who, nb[who])] = free_at[who];
			push(s, DPL_ACT_B, who, nb[who]++);
		} else {
			free_at[who] = best + c.f;
			fend[dpl__sm(s, who, nf[who])] = free_at[who];
			push(s, DPL_ACT_F, who, nf[who]++);
		}
		left--;
	}
out:
	free(fend);
	free(bend);
	free(free_at);
	free(nf);
	free(nb);
	return rc;
}

/* Resolve the caller's caps into one value >= 1 per stage. */
static int resolve_caps(const struct dpl_schedule_params *p, uint32_t *cap)
{
	uint32_t S = p->stages, st;
	int given = (p->cap_mb != NULL) + (p->cap_all != 0) +
		    (p->cap_bytes != NULL);

	if (given == 0)
		return dpl__error(DPL_EINVAL,
				  "policy bounded needs a cap per stage "
				  "(cap_mb, cap_all or cap_bytes)");
	if (given > 1)
		return dpl__error(DPL_EINVAL,
				  "policy bounded: give only one of cap_mb, "
				  "cap_all and cap_bytes");
	for (st = 0; st < S; st++) {
		if (p->cap_bytes) {
			uint64_t a;

			if (p->activation_bytes == NULL)
				return dpl__error(
				    DPL_EINVAL,
				    "cap_bytes needs activation_bytes per stage");
			a = p->activation_bytes[st];
			if (a == 0)
				return dpl__error(DPL_EINVAL,
						  "stage %u: activation bytes "
						  "must be >= 1 (got 0)",
						  st);
			if (p->cap_bytes[st] / a < 1)
				return dpl__error(
				    DPL_EINVAL,
				    "stage %u: cap %llu bytes holds no "
				    "micro-batch of %llu activation bytes",
				    st, (unsigned long long)p->cap_bytes[st],
				    (unsigned long long)a);
			cap[st] = p->cap_bytes[st] / a > UINT32_MAX
				      ? UINT32_MAX
				      : (uint32_t)(p->cap_bytes[st] / a);
		} else {
			cap[st] = p->cap_mb ? p->cap_mb[st] : p->cap_all;
			if (cap[st] < 1)
				return dpl__error(DPL_EINVAL,
						  "stage %u: cap %u < 1", st,
						  cap[st]);
		}
	}
	return 0;
}

static int build_bounded(const struct dpl_schedule_params *p, dpl_schedule *s)
{
	uint32_t S = s->stages, M = s->microbatches, st, *cap, *K;
	dpl_schedule *g = NULL;
	double t1, tg;
	int rc;

	cap = malloc(S * sizeof *cap);
	K = malloc(S * sizeof *K);
	if (cap == NULL || K == NULL) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = resolve_caps(p, cap)))
		goto out;
	for (st = 0; st < S; st++) {
		K[st] = min_u32(min_u32(cap[st], S - st), M);
		if (st > 0)
			K[st] = min_u32(K[st], K[st - 1]);
		s->cap[st] = cap[st];
	}
	if ((rc = build_warmup(s, K)))
		goto out;
	if ((rc = dpl_schedule_create(S, S, M, &g)))
		goto out;
	if ((rc = build_greedy(g, cap, p->costs)))
		goto out;
	if ((rc = dpl__replay_makespan(s, p->costs, 0, &t1)) ||
	    (rc = dpl__replay_makespan(g, p->costs, 0, &tg)))
		goto out;
	if (tg < t1) {
		/* The greedy order wins: take its lists. */
		struct dpl__list *tmp = s->lists;

		s->lists = g->lists;
		g->lists = tmp;
	}
out:
	dpl_schedule_destroy(g);
	free(cap);
	free(K);
	return rc;
}

int dpl__build_policy(const struct dpl_schedule_params *p, dpl_schedule *s)
{
	switch (p->policy) {
	case DPL_POLICY_GPIPE:
	case DPL_POLICY_1F1B:
	case DPL_POLICY_1F1B_COMM:
		return build_fixed(s, p->policy);
	case DPL_POLICY_ZB_H1:
		return build_zb_h1(s);
	case DPL_POLICY_INTERLEAVED:
		return dpl__build_interleaved(p, s);
	case DPL_POLICY_BOUNDED:
		return build_bounded(p, s);
	case DPL_POLICY_LOOPED_BFS:
		return dpl__build_looped_bfs(p, s);
	case DPL_POLICY_INTERLEAVED_ZB:
		return dpl__build_interleaved_zb(p, s);
	case DPL_POLICY_ZBV:
		return dpl__build_zbv(p, s);
	case DPL_POLICY_ZB_H2:
		return dpl__build_zb_h2(p, s);
	case DPL_POLICY_ZB_AUTO:
		return dpl__build_zb_auto(p, s);
	case DPL_POLICY_DUALPIPEV:
		return dpl__build_dualpipev(p, s);
	default:
		return dpl__error(DPL_EINVAL, "policy %d cannot be built",
				  (int)p->policy);
	}
}

int dpl_policy_buildable(enum dpl_policy p)
{
	return (unsigned)p < DPL_POLICY__COUNT && p != DPL_POLICY_CUSTOM;
}

uint32_t dpl_policy_chunks(enum dpl_policy p)
{
	switch (p) {
	case DPL_POLICY_INTERLEAVED:
	case DPL_POLICY_LOOPED_BFS:
	case DPL_POLICY_INTERLEAVED_ZB:
		return 1;
	case DPL_POLICY_ZBV:
	case DPL_POLICY_DUALPIPEV:
		return 2;
	default:
		return 0;
	}
}

static int check_costs(const struct dpl_schedule_params *p)
{
	uint32_t st;

	if (p->costs == NULL)
		return 0;
	for (st = 0; st < p->stages; st++) {
		const struct dpl_stage_cost *c = &p->costs[st];

		if (!(c->f >= 0 && c->b >= 0 && c->i >= 0 && c->w >= 0) ||
		    !isfinite(c->f + c->b + c->i + c->w))
			return dpl__error(DPL_EINVAL,
					  "stage %u: costs must be finite and "
					  ">= 0",
					  st);
	}
	return 0;
}

/*
 * The chunks per rank of p's policy into *V: V >= 2 from p->chunks where
 * dpl_policy_chunks() says 1, its fixed count where it says more, else 1.
 */
static int check_chunks(const struct dpl_schedule_params *p, uint32_t *V)
{
	uint32_t want = dpl_policy_chunks(p->policy);
	const char *name = dpl_policy_name(p->policy);

	if (want == 1) {
		if (p->chunks < 2)
			return dpl__error(DPL_EINVAL,
					  "%s: chunks must be >= 2 (got %u)",
					  name, p->chunks);
		*V = p->chunks;
	} else if (want > 1) {
		if (p->chunks != 0 && p->chunks != want)
			return dpl__error(DPL_EINVAL,
					  "%s: chunks is always %u (got %u)",
					  name, want, p->chunks);
		*V = want;
	} else if (p->chunks > 1) {
		return dpl__error(DPL_EINVAL,
				  "chunks %u: policy %s takes no chunks (only "
				  "interleaved, looped-bfs and interleaved-zb "
				  "take chunks; zbv and dualpipev have 2)",
				  p->chunks, name);
	}
	return 0;
}

int dpl_schedule_build(const struct dpl_schedule_params *p,
		       dpl_schedule **out)
{
	uint32_t ranks, stages, V = 1;
	dpl_schedule *s;
	int rc;

	if (p == NULL || out == NULL)
		return dpl__error(DPL_EINVAL, "params and out must not be NULL");
	if (p->stages < 1)
		return dpl__error(DPL_EINVAL, "stages must be >= 1 (got %u)",
				  p->stages);
	if (p->microbatches < 1)
		return dpl__error(DPL_EINVAL,
				  "microbatches must be >= 1 (got %u)",
				  p->microbatches);
	if (!dpl_policy_buildable(p->policy))
		return dpl__error(DPL_EINVAL, "policy %d is not buildable",
				  (int)p->policy);
	if ((rc = check_chunks(p, &V)))
		return rc;
	if (!(p->transfer >= 0) || isinf(p->transfer))
		return dpl__error(DPL_EINVAL, "transfer must be a finite time "
				  ">= 0 (got %g)", p->transfer);
	if (p->transfer != 0 && p->policy != DPL_POLICY_ZB_AUTO)
		return dpl__error(DPL_EINVAL, "transfer %g: only policy zb-auto "
				  "takes a transfer time (got policy %s)",
				  p->transfer, dpl_policy_name(p->policy));
	if ((uint64_t)p->stages * V * p->microbatches * 3 > DPL__MAX_ACTIONS ||
	    (uint64_t)p->stages * V >= UINT32_MAX)
		return dpl__error(DPL_ERANGE,
				  "stages %u x chunks %u x microbatches %u is "
				  "too large (over 2^31 actions)",
				  p->stages, V, p->microbatches);
	if ((rc = check_costs(p)))
		return rc;
	ranks = p->stages;
	stages = p->stages * V;
	if ((rc = dpl__schedule_alloc(ranks, stages, p->microbatches, &s)))
		return rc;
	s->policy = p->policy;
	s->chunks = V;
	if ((rc = dpl__build_policy(p, s))) {
		dpl_schedule_destroy(s);
		return rc;
	}
	*out = s;
	return 0;
}
