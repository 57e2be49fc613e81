/*
 * policy_dualpipev.c - dualpipev: DeepSeek's DualPipeV (the V-shaped
 * DualPipe), in the order of PyTorch's ScheduleDualPipeV. Rank r holds
 * stages r (chunk 0) and 2S-1-r (chunk 1), as zbv.
 *
 * PyTorch pairs a forward of one chunk with the full backward of the
 * other as one compound OVERLAP_F_B action; its runtime runs the pair's
 * two sub-actions one after the other (forward first) unless a custom
 * function is registered for it. dpl writes each pair as its marker and
 * its two actions, in the steps PyTorch pairs them (4 and 5 below); the
 * runner gives the pair to the stage callbacks' `overlap` member when
 * they have one. A pair one of whose parts is a left-out padding
 * micro-batch is its remaining action alone.
 *
 * Rank r, with n micro-batches (M, or 2S when M < 2S: the padding
 * micro-batches are then left out, which keeps every dependency):
 *   1. 2 (S-r-1) F0
 *   2. r+1 times F0 F1
 *   3. S-r-1 times I1, the oldest pending W, F1
 *   4. n-2S+r+1 times (F0 B1) (F1 B0) -- the last rank's first pair is
 *      F0 B1 too, not overlapped in PyTorch either
 *   5. S-r-1 times B1 (F1 B0)
 *   6. r+1 times B1 B0, switching to I (zero bubble) halfway (chunk 1
 *      first on odd ranks, chunk 0 first on even ones)
 *   7. S-r-1 times the oldest pending W, then B0 or I0
 *   8. r+1 times the oldest pending W
 * where Fc/Bc/Ic take chunk c's next micro-batch (B and I share one
 * counter) and every I queues its W.
 */
#include <stdlib.h>

#include "internal.h"

struct dpv {
	dpl_schedule *s;
	uint32_t st[2];      /* stage of chunk 0 and chunk 1 */
	uint32_t nf[2], nb[2];
	uint32_t *wq_st, *wq_mb; /* pending W, oldest first */
	size_t wq_head, wq_len;
	int rc;
};

static void put(struct dpv *d, uint32_t kind, uint32_t stage, uint32_t mb)
{
	if (d->rc == 0 && mb < d->s->microbatches)
		d->rc = dpl__list_push(
			&d->s->lists[d->s->stage_rank[stage]],
			dpl__act(kind, stage,
				 kind == DPL_ACT_OVERLAP_F_B ? DPL_NO_MICROBATCH
							     : mb));
}

static void fwd(struct dpv *d, int c)
{
	put(d, DPL_ACT_F, d->st[c], d->nf[c]++);
}

/* B (full backward) or, with zb, I with its W queued. */
static void bwd(struct dpv *d, int c, int zb)
{
	uint32_t mb = d->nb[c]++;

	put(d, zb ? DPL_ACT_I : DPL_ACT_B, d->st[c], mb);
	if (zb) {
		size_t k = d->wq_head + d->wq_len++;

		d->wq_st[k] = d->st[c];
		d->wq_mb[k] = mb;
	}
}

/* Chunk cf's next forward and chunk cb's next full backward as one
 * OVERLAP_F_B pair (a marker, then the two). */
static void pair(struct dpv *d, int cf, int cb)
{
	if (d->nf[cf] < d->s->microbatches && d->nb[cb] < d->s->microbatches)
		put(d, DPL_ACT_OVERLAP_F_B, d->st[cf], 0);
	fwd(d, cf);
	bwd(d, cb, 0);
}

static void pending_w(struct dpv *d)
{
	if (d->wq_len == 0)
		return;
	put(d, DPL_ACT_W, d->wq_st[d->wq_head], d->wq_mb[d->wq_head]);
	d->wq_head++;
	d->wq_len--;
}

static int dualpipev_rank(dpl_schedule *s, uint32_t r, uint32_t n,
			  uint32_t *wq)
{
	uint32_t S = s->ranks, k, half = (r + 1) / 2;
	struct dpv d = {.s = s, .st = {r, 2 * S - 1 - r}, .wq_st = wq,
			.wq_mb = wq + 2 * (size_t)n};
	int zb = 0;

	for (k = 0; k < 2 * (S - r - 1); k++)
		fwd(&d, 0);
	for (k = 0; k < r + 1; k++) {
		fwd(&d, 0);
		fwd(&d, 1);
	}
	for (k = 0; k < S - r - 1; k++) {
		bwd(&d, 1, 1);
		pending_w(&d);
		fwd(&d, 1);
	}
	for (k = 0; k < n - 2 * S + r + 1; k++) {
		if (k == 0 && r == S - 1) {
			fwd(&d, 0);
			bwd(&d, 1, 0);
		} else {
			pair(&d, 0, 1);
		}
		pair(&d, 1, 0);
	}
	for (k = 0; k < S - r - 1; k++) {
		bwd(&d, 1, 0);
		pair(&d, 1, 0);
	}
	for (k = 0; k < r + 1; k++) {
		if (k == half && r % 2 == 1)
			zb = 1;
		bwd(&d, 1, zb);
		if (k == half && r % 2 == 0)
			zb = 1;
		bwd(&d, 0, zb);
	}
	for (k = 0; k < S - r - 1; k++) {
		pending_w(&d);
		bwd(&d, 0, zb);
	}
	for (k = 0; k < r + 1; k++)
		pending_w(&d);
	if (d.rc == 0 && (d.wq_len != 0 || d.nf[0] != n || d.nf[1] != n ||
			  d.nb[0] != n || d.nb[1] != n))
		d.rc = dpl__error(DPL_ESCHED,
				  "dualpipev: rank %u's order is incomplete "
				  "(%zu W pending)",
				  r, d.wq_len);
	return d.rc;
}

int dpl__build_dualpipev(const struct dpl_schedule_params *p,
			 dpl_schedule *s)
{
	uint32_t S = s->ranks, M = s->microbatches, n, r, *wq;
	int rc = 0;

	(void)p;
	if (s->stages != 2 * S)
		return dpl__error(DPL_EINVAL,
				  "dualpipev: needs 2 chunks per rank (%u "
				  "stages for %u ranks)",
				  s->stages, S);
	dpl__place_v(s);
	n = M > 2 * S ? M : 2 * S;
	wq = malloc(4 * (size_t)n * sizeof *wq);
	if (wq == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	for (r = 0; r < S && rc == 0; r++)
		if ((rc = dpl__list_reserve(&s->lists[r], 6 * (size_t)M)) == 0)
			rc = dualpipev_rank(s, r, n, wq);
	free(wq);
	return rc;
}
