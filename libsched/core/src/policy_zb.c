/*
 * policy_zb.c - the zero-bubble policies with model chunks: zbv (the
 * Zero Bubble paper's ZB-V, PyTorch's ScheduleZBVZeroBubble order) and
 * interleaved-zb (PyTorch's ScheduleInterleavedZeroBubble, ZB1P with V
 * chunks). Both emit PyTorch's lists without its deliberate bubbles, so
 * CSV files move both ways and the makespans are the same.
 */
#include <stdlib.h>

#include "internal.h"

static int push(dpl_schedule *s, uint32_t kind, uint32_t stage, uint32_t mb)
{
	if (mb >= s->microbatches)
		return 0; /* a padding micro-batch: not run */
	return dpl__list_push(&s->lists[s->stage_rank[stage]],
			      dpl__act(kind, stage, mb));
}

/*
 * ZB-V on rank r, chunk 0 = stage r, chunk 1 = stage 2S-1-r: 2(S-r)-1
 * forwards of chunk 0, r pairs (F1, F0), S-r triples (F1, I1, W1), then
 * (F0, I0, W0, F1, I1, W1) until every forward ran, and the cool-down
 * r pairs (I0, I1), S-r pairs (I0, W0), the remaining W1 and W0. With
 * fewer than 2S-1 micro-batches the lists are built for 2S-1 and the
 * padding micro-batches are left out, which keeps every dependency.
 */
static int zbv_rank(dpl_schedule *s, uint32_t r, uint32_t n)
{
	uint32_t S = s->ranks, c0 = r, c1 = 2 * S - 1 - r;
	uint32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0, w1, k;
	int rc = 0;

#define P(kind, st, mb)                                                       \
	do {                                                                  \
		if ((rc = push(s, kind, st, mb)))                             \
			return rc;                                            \
	} while (0)
	for (k = 0; k < 2 * (S - r) - 1; k++)
		P(DPL_ACT_F, c0, f0++);
	for (k = 0; k < r; k++) {
		P(DPL_ACT_F, c1, f1++);
		P(DPL_ACT_F, c0, f0++);
	}
	for (k = 0; k < S - r; k++) {
		P(DPL_ACT_F, c1, f1++);
		P(DPL_ACT_I, c1, b1);
		P(DPL_ACT_W, c1, b1++);
	}
	while (f1 < f0 || f0 < n) {
		if (f0 < n)
			P(DPL_ACT_F, c0, f0++);
		P(DPL_ACT_I, c0, b0);
		P(DPL_ACT_W, c0, b0++);
		P(DPL_ACT_F, c1, f1++);
		P(DPL_ACT_I, c1, b1);
		P(DPL_ACT_W, c1, b1++);
	}
	w0 = b0;
	w1 = b1;
	for (k = 0; k < r; k++) {
		P(DPL_ACT_I, c0, b0++);
		P(DPL_ACT_I, c1, b1++);
	}
	for (k = 0; k < S - r; k++) {
		P(DPL_ACT_I, c0, b0++);
		P(DPL_ACT_W, c0, w0++);
	}
	while (w1 < b1)
		P(DPL_ACT_W, c1, w1++);
	while (w0 < b0)
		P(DPL_ACT_W, c0, w0++);
#undef P
	return rc;
}

void dpl__place_v(dpl_schedule *s)
{
	for (uint32_t r = 0; r < s->ranks; r++) {
		s->stage_rank[r] = r;
		s->stage_rank[2 * s->ranks - 1 - r] = r;
	}
}

int dpl__build_zbv(const struct dpl_schedule_params *p, dpl_schedule *s)
{
	uint32_t S = s->ranks, M = s->microbatches, n, r;
	int rc;

	(void)p;
	if (s->stages != 2 * S)
		return dpl__error(DPL_EINVAL,
				  "zbv: needs 2 chunks per rank (%u stages "
				  "for %u ranks)",
				  s->stages, S);
	dpl__place_v(s);
	n = M > 2 * S - 1 ? M : 2 * S - 1;
	for (r = 0; r < S; r++) {
		if ((rc = dpl__list_reserve(&s->lists[r], 6 * (size_t)M)))
			return rc;
		if ((rc = zbv_rank(s, r, n)))
			return rc;
	}
	return 0;
}

/*
 * interleaved-zb (PyTorch's _get_1f1b_rank_ops with zero bubble): the
 * micro-batches run in max(1, M / S) rounds whose sizes differ by at most
 * one, the larger first (all of size G = M / rounds where that divides,
 * PyTorch's rule). Every rank shares one forward order -- round by round,
 * chunk by chunk, the round's micro-batches in order -- and one I order,
 * the same with the chunks reversed. Rank r warms up with
 * (V-1) G0 + S-1-r forwards (G0 the first round's size), then runs F, I
 * and -- once r of them went by -- the W of the oldest I, then drains
 * the I and the W.
 */
struct cmb {
	uint32_t chunk, mb;
};

static uint32_t izb_rounds(uint32_t S, uint32_t M)
{
	return M / S > 1 ? M / S : 1;
}

static void izb_order(uint32_t S, uint32_t M, uint32_t V, struct cmb *fwd,
		      struct cmb *bwd)
{
	uint32_t rounds = izb_rounds(S, M), g, c, i, start = 0;
	size_t k = 0;

	for (g = 0; g < rounds; g++) {
		uint32_t n = M / rounds + (g < M % rounds);

		for (c = 0; c < V; c++)
			for (i = 0; i < n; i++, k++) {
				fwd[k] = (struct cmb){c, start + i};
				bwd[k] = (struct cmb){V - 1 - c, start + i};
			}
		start += n;
	}
}

static int izb_rank(dpl_schedule *s, uint32_t r, const struct cmb *fwd,
		    const struct cmb *bwd, uint64_t warm)
{
	uint32_t S = s->ranks;
	uint64_t total = (uint64_t)s->chunks * s->microbatches, op, ni = 0;
	uint64_t nw = 0;
	int rc = 0;

	if (warm > total)
		warm = total;
#define P(kind, e)                                                            \
	do {                                                                  \
		if ((rc = push(s, kind, (e).chunk * S + r, (e).mb)))          \
			return rc;                                            \
	} while (0)
	for (op = 0; op < total + warm; op++) {
		if (op < total)
			P(DPL_ACT_F, fwd[op]);
		if (op < warm)
			continue;
		P(DPL_ACT_I, bwd[ni]);
		ni++;
		if (op - warm >= r) {
			P(DPL_ACT_W, bwd[nw]);
			nw++;
		}
	}
	while (nw < ni) {
		P(DPL_ACT_W, bwd[nw]);
		nw++;
	}
#undef P
	return 0;
}

int dpl__build_interleaved_zb(const struct dpl_schedule_params *p,
			      dpl_schedule *s)
{
	uint32_t S = s->ranks, M = s->microbatches, V = s->chunks, r;
	uint32_t rounds = izb_rounds(S, M);
	uint32_t G0 = M / rounds + (M % rounds != 0);
	struct cmb *fwd = malloc(2 * (size_t)V * M * sizeof *fwd), *bwd;
	int rc = 0;

	(void)p;
	if (fwd == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	bwd = fwd + (size_t)V * M;
	izb_order(S, M, V, fwd, bwd);
	for (r = 0; r < S && rc == 0; r++) {
		uint64_t warm = (uint64_t)(V - 1) * G0 + (S - 1 - r);

		if (!(rc = dpl__list_reserve(&s->lists[r], 3 * (size_t)V * M)))
			rc = izb_rank(s, r, fwd, bwd, warm);
	}
	free(fwd);
	return rc;
}
