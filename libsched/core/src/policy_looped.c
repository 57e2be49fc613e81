/*
 * policy_looped.c - the policies with V model chunks per rank and the
 * loop stage numbering (stage chunk * S + rank): interleaved 1F1B with
 * micro-batch groups for any M, and breadth-first looped pipelines.
 */
#include <stdlib.h>

#include "internal.h"

static int push(dpl_schedule *s, uint32_t kind, uint32_t stage, uint32_t mb)
{
	return dpl__list_push(&s->lists[s->stage_rank[stage]],
			      dpl__act(kind, stage, mb));
}

/* One entry of a rank's forward (or backward) order: chunk, micro-batch. */
struct chunk_mb {
	uint32_t chunk;
	uint32_t mb;
};

/*
 * The micro-batch groups of interleaved: max(1, floor(M / S)) groups of
 * sizes that differ by at most one, the larger first, so every group but
 * a lone one (M < S) holds at least S micro-batches. Returns the size of
 * the first (largest) group.
 */
static uint32_t group0(uint32_t S, uint32_t M)
{
	uint32_t rounds = M / S > 0 ? M / S : 1;

	return M / rounds + (M % rounds != 0);
}

/*
 * Fill fwd[0..M*V) with the forward order every rank shares: group by
 * group, chunk by chunk, the group's micro-batches in order; bwd the same
 * with the chunks reversed.
 */
static void interleaved_order(uint32_t S, uint32_t M, uint32_t V,
			      struct chunk_mb *fwd, struct chunk_mb *bwd)
{
	uint32_t rounds = M / S > 0 ? M / S : 1, g, c, i, start = 0;
	size_t k = 0;

	for (g = 0; g < rounds; g++) {
		uint32_t n = M / rounds + (g < M % rounds);

		for (c = 0; c < V; c++)
			for (i = 0; i < n; i++, k++) {
				fwd[k] = (struct chunk_mb){c, start + i};
				bwd[k] = (struct chunk_mb){V - 1 - c, start + i};
			}
		start += n;
	}
}

uint32_t dpl__interleaved_warmup(uint32_t S, uint32_t M, uint32_t V,
				 uint32_t r)
{
	uint64_t warm = (uint64_t)(V - 1) * group0(S, M) + 2 * (uint64_t)(S - r - 1);

	return warm > (uint64_t)M * V ? M * V : (uint32_t)warm;
}

/*
 * Interleaved 1F1B (Megatron's and PyTorch's order): the forwards of a
 * rank follow interleaved_order; rank r warms up with (V - 1) G + 2 (S -
 * r - 1) forwards (G the first group's size), then alternates one forward
 * and one backward, then drains. With M a multiple of S every group has S
 * micro-batches (Megatron's default); where PyTorch accepts M (M divisible
 * by its number of rounds) the groups are its rounds.
 */
int dpl__build_interleaved(const struct dpl_schedule_params *p,
			   dpl_schedule *s)
{
	uint32_t S = s->ranks, V = s->chunks, M = s->microbatches, r;
	size_t total = (size_t)M * V;
	struct chunk_mb *fwd, *bwd;
	int rc = 0;

	(void)p;
	fwd = malloc(total * sizeof *fwd);
	bwd = malloc(total * sizeof *bwd);
	if (fwd == NULL || bwd == NULL) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	interleaved_order(S, M, V, fwd, bwd);
	for (r = 0; r < S; r++) {
		size_t warm = dpl__interleaved_warmup(S, M, V, r), f = 0, b = 0;

		if ((rc = dpl__list_reserve(&s->lists[r], 2 * total)))
			goto out;
#define FWD() (push(s, DPL_ACT_F, fwd[f].chunk * S + r, fwd[f].mb), f++)
#define BWD() (push(s, DPL_ACT_B, bwd[b].chunk * S + r, bwd[b].mb), b++)
		while (f < warm)
			FWD();
		while (f < total) {
			FWD();
			BWD();
		}
		while (b < total)
			BWD();
#undef FWD
#undef BWD
	}
out:
	free(fwd);
	free(bwd);
	return rc;
}

/*
 * Looped BFS (PyTorch's ScheduleLoopedBFS, arXiv 2211.05953): rank r runs
 * every forward of its chunk 0 for micro-batches 0..M-1, then those of
 * chunk 1, ..., then the backwards chunk by chunk in reverse, each chunk's
 * micro-batches from M-1 down to 0.
 */
int dpl__build_looped_bfs(const struct dpl_schedule_params *p,
			  dpl_schedule *s)
{
	uint32_t S = s->ranks, V = s->chunks, M = s->microbatches, r, c, m;
	int rc;

	(void)p;
	for (r = 0; r < S; r++) {
		if ((rc = dpl__list_reserve(&s->lists[r], 2 * (size_t)M * V)))
			return rc;
		for (c = 0; c < V; c++)
			for (m = 0; m < M; m++)
				push(s, DPL_ACT_F, c * S + r, m);
		for (c = V; c-- > 0;)
			for (m = M; m-- > 0;)
				push(s, DPL_ACT_B, c * S + r, m);
	}
	return 0;
}
