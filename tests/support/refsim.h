/*
 * refsim.h - a deliberately simple reference for the tests: replays
 * compute-only lists (one stage per rank) with per-stage F/B costs and no
 * communication, by fixed-point iteration instead of dpl's event order,
 * and builds the greedy "ready backward, else forward under the cap"
 * order by stepping time. Independent of dpl's own code.
 */
#ifndef DPL_TEST_REFSIM_H
#define DPL_TEST_REFSIM_H

#include <math.h>
#include <stdlib.h>

#include <dpl/dpl.h>

/* Makespan of `s` (one stage per rank, F and B only), or -1 on a stall. */
static inline double ref_makespan(const dpl_schedule *s, const double *f,
				  const double *b)
{
	uint32_t S = dpl_schedule_stages(s), M = dpl_schedule_microbatches(s);
	double *fe = malloc(sizeof(double) * S * M);
	double *be = malloc(sizeof(double) * S * M);
	size_t *pc = calloc(S, sizeof *pc);
	double *t = calloc(S, sizeof *t), end = 0;
	int progress = 1;

	for (size_t k = 0; k < (size_t)S * M; k++)
		fe[k] = be[k] = -1;
	while (progress) {
		progress = 0;
		for (uint32_t r = 0; r < S; r++) {
			size_t n;
			const struct dpl_action *a = dpl_schedule_actions(s, r, &n);

			while (pc[r] < n) {
				struct dpl_action x = a[pc[r]];
				double in;

				if (x.kind == DPL_ACT_F)
					in = x.stage ? fe[(x.stage - 1) * M + x.microbatch] : 0;
				else
					in = x.stage + 1 < S ? be[(x.stage + 1) * M + x.microbatch]
							     : fe[x.stage * M + x.microbatch];
				if (in < 0)
					break;
				t[r] = fmax(t[r], in) + (x.kind == DPL_ACT_F ? f[x.stage] : b[x.stage]);
				(x.kind == DPL_ACT_F ? fe : be)[x.stage * M + x.microbatch] = t[r];
				pc[r]++;
				progress = 1;
			}
		}
	}
	for (uint32_t r = 0; r < S; r++) {
		size_t n;

		dpl_schedule_actions(s, r, &n);
		if (pc[r] != n)
			end = -1;
		else if (end >= 0)
			end = fmax(end, t[r]);
	}
	free(fe);
	free(be);
	free(pc);
	free(t);
	return end;
}

/*
 * Makespan of the greedy order with caps, by stepping through decision
 * instants: at each instant, every free stage takes its oldest ready
 * backward, else its next ready forward if fewer than cap are alive.
 */
static inline double ref_greedy_makespan(uint32_t S, uint32_t M,
					 const uint32_t *cap, const double *f,
					 const double *b)
{
	double *fe = malloc(sizeof(double) * S * M);
	double *be = malloc(sizeof(double) * S * M);
	double *busy_until = calloc(S, sizeof(double));
	uint32_t *nf = calloc(S, sizeof *nf), *nb = calloc(S, sizeof *nb);
	double now = 0, end = 0;
	size_t left = 2 * (size_t)S * M;

	for (size_t k = 0; k < (size_t)S * M; k++)
		fe[k] = be[k] = INFINITY;
	while (left > 0) {
		double next = INFINITY;

		for (uint32_t s = 0; s < S; s++) {
			if (busy_until[s] > now)
				continue;
			if (nb[s] < nf[s]) {
				double rd = s == S - 1 ? fe[s * M + nb[s]]
						       : be[(s + 1) * M + nb[s]];
				if (rd <= now) {
					busy_until[s] = now + b[s];
					be[s * M + nb[s]++] = busy_until[s];
					left--;
					continue;
				}
			}
			if (nf[s] < M && nf[s] - nb[s] < cap[s]) {
				double rd = s == 0 ? 0 : fe[(s - 1) * M + nf[s]];
				if (rd <= now) {
					busy_until[s] = now + f[s];
					fe[s * M + nf[s]++] = busy_until[s];
					left--;
				}
			}
		}
		/* Next instant: the earliest end of work after now. */
		for (uint32_t s = 0; s < S; s++)
			if (busy_until[s] > now && busy_until[s] < next)
				next = busy_until[s];
		if (!isfinite(next))
			break;
		now = next;
	}
	for (uint32_t s = 0; s < S; s++)
		end = fmax(end, busy_until[s]);
	free(fe);
	free(be);
	free(busy_until);
	free(nf);
	free(nb);
	return left ? -1 : end;
}

#endif
