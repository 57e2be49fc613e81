/*
 * lower.c - lowering: add the communication actions, one REDUCE_GRAD per
 * stage after its last backward, and one STEP per stage.
 */
#include <stdlib.h>

#include "internal.h"

/* The receive a compute action needs before it, if its input is remote. */
static bool needs_recv(const dpl_schedule *s, struct dpl_action a,
		       struct dpl_action *recv)
{
	uint32_t r = s->stage_rank[a.stage];

	if (a.kind == DPL_ACT_F && a.stage > 0 &&
	    s->stage_rank[a.stage - 1] != r) {
		*recv = dpl__act(DPL_ACT_RECV_F, a.stage, a.microbatch);
		return true;
	}
	if ((a.kind == DPL_ACT_B || a.kind == DPL_ACT_I) &&
	    a.stage + 1 < s->stages && s->stage_rank[a.stage + 1] != r) {
		*recv = dpl__act(DPL_ACT_RECV_B, a.stage, a.microbatch);
		return true;
	}
	return false;
}

/* The send a compute action does after it, if its output is remote. */
static bool needs_send(const dpl_schedule *s, struct dpl_action a,
		       struct dpl_action *send)
{
	uint32_t r = s->stage_rank[a.stage];

	if (a.kind == DPL_ACT_F && a.stage + 1 < s->stages &&
	    s->stage_rank[a.stage + 1] != r) {
		*send = dpl__act(DPL_ACT_SEND_F, a.stage, a.microbatch);
		return true;
	}
	if ((a.kind == DPL_ACT_B || a.kind == DPL_ACT_I) && a.stage > 0 &&
	    s->stage_rank[a.stage - 1] != r) {
		*send = dpl__act(DPL_ACT_SEND_B, a.stage, a.microbatch);
		return true;
	}
	return false;
}

/*
 * Where each receive goes. A lockstep replay of the compute lists (in each
 * round every rank runs its next action if its inputs were made in an
 * earlier round) gives, for every remote input, the round its producer
 * runs; the receive is placed before the action the consumer's rank has
 * next at that round, or one compute action ahead of the consumer if that
 * is earlier. By induction on rounds every send then finds its receive
 * posted once everything of earlier rounds has run, so the lists cannot
 * deadlock even when sends block until their receive is posted.
 * ins[k] is the index, in the consumer rank's compute list, before which
 * the receive of compute action k (flat index over all ranks) is placed.
 */
static int place_receives(const dpl_schedule *s, const size_t *base,
			  size_t *ins)
{
	uint32_t R = s->ranks, S = s->stages, M = s->microbatches, r;
	size_t n = (size_t)S * M, left = 0, *pc;
	uint8_t *done; /* bit0 F, bit1 B/I, per (stage, mb), by round end */
	size_t *fidx, *bidx; /* flat index of F / B-or-I of (stage, mb) */
	uint32_t *fresh, nfresh;
	int rc = 0;

	pc = calloc(R, sizeof *pc);
	done = calloc(n, 1);
	fidx = malloc(n * sizeof *fidx);
	bidx = malloc(n * sizeof *bidx);
	fresh = malloc(R * sizeof *fresh);
	if (!pc || !done || !fidx || !bidx || !fresh) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto out;
	}
	for (r = 0; r < R; r++) {
		const struct dpl__list *l = &s->lists[r];

		left += l->len;
		for (size_t i = 0; i < l->len; i++) {
			struct dpl_action a = l->a[i];
			size_t k = dpl__sm(s, a.stage, a.microbatch);

			ins[base[r] + i] = i > 0 ? i - 1 : 0;
			if (a.kind == DPL_ACT_F)
				fidx[k] = base[r] + i;
			else if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_I)
				bidx[k] = base[r] + i;
		}
	}
	while (left > 0) {
		nfresh = 0;
		for (r = 0; r < R; r++) {
			const struct dpl__list *l = &s->lists[r];
			struct dpl_action a;
			size_t k;
			bool ready = true;

			if (pc[r] == l->len)
				continue;
			a = l->a[pc[r]];
			k = dpl__sm(s, a.stage, a.microbatch);
			if (a.kind == DPL_ACT_F && a.stage > 0)
				ready = done[k - M] & 1;
			else if ((a.kind == DPL_ACT_B || a.kind == DPL_ACT_I) &&
				 a.stage + 1 < S)
				ready = done[k + M] & 2;
			if (!ready)
				continue;
			/* Its output's consumer receives no later than now. */
			if (a.kind == DPL_ACT_F && a.stage + 1 < S &&
			    s->stage_rank[a.stage + 1] != r) {
				uint32_t d = s->stage_rank[a.stage + 1];
				size_t c = fidx[k + M];

				if (pc[d] < ins[c])
					ins[c] = pc[d];
			} else if ((a.kind == DPL_ACT_B || a.kind == DPL_ACT_I) &&
				   a.stage > 0 &&
				   s->stage_rank[a.stage - 1] != r) {
				uint32_t d = s->stage_rank[a.stage - 1];
				size_t c = bidx[k - M];

				if (pc[d] < ins[c])
					ins[c] = pc[d];
			}
			fresh[nfresh++] = r;
		}
		if (nfresh == 0) {
			rc = dpl__error(DPL_EDEADLOCK,
					"compute lists stall in lockstep");
			goto out;
		}
		/* Outputs of this round become visible in the next one. */
		for (uint32_t q = 0; q < nfresh; q++) {
			struct dpl_action a;

			r = fresh[q];
			a = s->lists[r].a[pc[r]++];
			if (a.kind == DPL_ACT_F)
				done[dpl__sm(s, a.stage, a.microbatch)] |= 1;
			else if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_I)
				done[dpl__sm(s, a.stage, a.microbatch)] |= 2;
			left--;
		}
	}
out:
	free(pc);
	free(done);
	free(fidx);
	free(bidx);
	free(fresh);
	return rc;
}

/*
 * Lower one rank's list into `out`: receives where place_receives() put
 * them, sends right after their producer (an OVERLAP_F_B pair: after the
 * pair), REDUCE_GRAD after the sends of
 * a stage's last backward, the rank's STEPs last in stage order.
 */
static int lower_rank(const dpl_schedule *s, uint32_t r, const size_t *ins,
		      size_t *last_bwd, size_t *order, struct dpl__list *out)
{
	const struct dpl__list *in = &s->lists[r];
	struct dpl_action x, held;
	size_t i, nrecv = 0, next = 0, group_end = SIZE_MAX;
	bool has_held = false;
	int rc;

	if ((rc = dpl__list_reserve(out, 3 * in->len + 2 * (size_t)s->stages)))
		return rc;
	for (uint32_t st = 0; st < s->stages; st++)
		last_bwd[st] = SIZE_MAX;
	for (i = 0; i < in->len; i++) {
		struct dpl_action a = in->a[i];

		if (a.kind == DPL_ACT_B || a.kind == DPL_ACT_W)
			last_bwd[a.stage] = i;
		if (needs_recv(s, a, &x))
			order[nrecv++] = i;
	}
	/* Receives in order of their placement, then of their consumer. */
	for (i = 1; i < nrecv; i++) {
		size_t v = order[i], j = i;

		while (j > 0 && ins[order[j - 1]] > ins[v])
			order[j] = order[j - 1], j--;
		order[j] = v;
	}
	for (i = 0; i < in->len; i++) {
		struct dpl_action a = in->a[i];
		/* An OVERLAP_F_B pair (validated: marker, F, B or I) takes the
		 * receives of both parts before its marker and makes the
		 * forward's send after its second part. */
		size_t upto = i;

		if (a.kind == DPL_ACT_OVERLAP_F_B) {
			upto = i + 2;
			group_end = i + 2;
		}
		while (next < nrecv && ins[order[next]] <= upto) {
			needs_recv(s, in->a[order[next]], &x);
			dpl__list_push(out, x);
			next++;
		}
		dpl__list_push(out, a);
		if (i + 1 == group_end && needs_send(s, a, &held)) {
			has_held = true;
		} else {
			if (has_held && i == group_end) {
				dpl__list_push(out, held);
				has_held = false;
			}
			if (needs_send(s, a, &x))
				dpl__list_push(out, x);
		}
		if (last_bwd[a.stage] == i)
			dpl__list_push(out, dpl__act(DPL_ACT_REDUCE_GRAD, a.stage,
						     DPL_NO_MICROBATCH));
	}
	for (uint32_t st = 0; st < s->stages; st++)
		if (s->stage_rank[st] == r)
			dpl__list_push(out, dpl__act(DPL_ACT_STEP, st,
						     DPL_NO_MICROBATCH));
	return 0;
}

int dpl_schedule_lower(dpl_schedule *s)
{
	struct dpl__list *lists = NULL;
	size_t *last_bwd = NULL, *ins = NULL, *base = NULL, *order = NULL;
	size_t total = 0, longest = 0;
	uint32_t r;
	int rc;

	if (s == NULL)
		return dpl__error(DPL_EINVAL, "schedule must not be NULL");
	if (s->lowered)
		return dpl__error(DPL_EINVAL, "schedule is already lowered");
	if ((rc = dpl_schedule_validate(s, NULL)))
		return rc;
	base = malloc(s->ranks * sizeof *base);
	if (base == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	for (r = 0; r < s->ranks; r++) {
		base[r] = total;
		total += s->lists[r].len;
		if (s->lists[r].len > longest)
			longest = s->lists[r].len;
	}
	lists = calloc(s->ranks, sizeof *lists);
	last_bwd = malloc(s->stages * sizeof *last_bwd);
	ins = malloc((total ? total : 1) * sizeof *ins);
	order = malloc((longest ? longest : 1) * sizeof *order);
	if (!lists || !last_bwd || !ins || !order) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = place_receives(s, base, ins)))
		goto fail;
	for (r = 0; r < s->ranks; r++)
		if ((rc = lower_rank(s, r, ins + base[r], last_bwd, order,
				     &lists[r])))
			goto fail;
	for (r = 0; r < s->ranks; r++)
		free(s->lists[r].a);
	free(s->lists);
	s->lists = lists;
	s->lowered = true;
	lists = NULL;
fail:
	if (lists)
		for (r = 0; r < s->ranks; r++)
			free(lists[r].a);
	free(lists);
	free(last_bwd);
	free(ins);
	free(base);
	free(order);
	return rc;
}
