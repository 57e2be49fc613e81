/*
 * csv_comms.c - a lowered dpl schedule in the form PyTorch's
 * _PipelineScheduleRuntime runs as it is (format "compute_comms"): no
 * STEP, a WAIT_REDUCE_GRAD after each REDUCE_GRAD, and one WAIT_SEND_F or
 * WAIT_SEND_B per send where PyTorch's own lowering (_add_wait_send) puts
 * it; waits the schedule holds already are kept where they are.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dpl/csv.h>

#include "csv_internal.h"

/* Flags per (stage, micro-batch). */
enum {
	C_HAS_WAIT_F = 1u << 0, /* the list waits for this SEND_F itself */
	C_HAS_WAIT_B = 1u << 1,
	C_PENDING_F = 1u << 2,  /* SEND_F written, its wait not yet */
};

struct comms {
	const dpl_schedule *s;
	FILE *f;
	uint32_t M;
	uint8_t *k;            /* [S * M] */
	bool *has_wrg;         /* [S] the list holds WAIT_REDUCE_GRAD */
	struct dpl_action *end; /* sends without a wait of their own */
	size_t nend;
	bool first;
};

static void put(struct comms *c, struct dpl_action a)
{
	char t[DPL_ACTION_TEXT_MAX];
	int n = dpl_action_format(a, t, sizeof t);

	if (!c->first)
		fputc(',', c->f);
	c->first = false;
	fwrite(t, 1, (size_t)n, c->f);
}

static uint8_t *flags(struct comms *c, struct dpl_action a)
{
	return &c->k[(size_t)a.stage * c->M + a.microbatch];
}

/* After a backward (B or I) of (stage, j): the wait of that forward's
 * send, which the backward proves the peer consumed. */
static void after_backward(struct comms *c, struct dpl_action b)
{
	uint8_t *k = flags(c, b);

	if (!(*k & C_PENDING_F))
		return;
	*k &= (uint8_t)~C_PENDING_F;
	put(c, dpl__csv_act(DPL_ACT_WAIT_SEND_F, b.stage, b.microbatch));
}

static void write_rank(struct comms *c, const struct dpl_action *l,
		       size_t len)
{
	size_t i;

	c->first = true;
	c->nend = 0;
	memset(c->has_wrg, 0, dpl_schedule_stages(c->s) * sizeof *c->has_wrg);
	for (i = 0; i < len; i++) {
		if (l[i].kind == DPL_ACT_WAIT_REDUCE_GRAD)
			c->has_wrg[l[i].stage] = true;
		else if (l[i].kind == DPL_ACT_WAIT_SEND_F)
			*flags(c, l[i]) |= C_HAS_WAIT_F;
		else if (l[i].kind == DPL_ACT_WAIT_SEND_B)
			*flags(c, l[i]) |= C_HAS_WAIT_B;
	}
	for (i = 0; i < len; i++) {
		struct dpl_action a = l[i];

		switch (a.kind) {
		case DPL_ACT_STEP:
			break; /* PyTorch steps outside the schedule */
		case DPL_ACT_OVERLAP_F_B:
			if (!c->first)
				fputc(',', c->f);
			c->first = false;
			dpl__csv_put_overlap(c->f, l + i);
			after_backward(c, l[i + 2]);
			i += 2;
			break;
		case DPL_ACT_B:
		case DPL_ACT_I:
			put(c, a);
			after_backward(c, a);
			break;
		case DPL_ACT_SEND_F:
		case DPL_ACT_SEND_B:
			put(c, a);
			if (a.kind == DPL_ACT_SEND_F &&
			    !(*flags(c, a) & C_HAS_WAIT_F)) {
				*flags(c, a) |= C_PENDING_F;
				c->end[c->nend++] = a;
			} else if (a.kind == DPL_ACT_SEND_B &&
				   !(*flags(c, a) & C_HAS_WAIT_B)) {
				c->end[c->nend++] = a;
			}
			break;
		case DPL_ACT_REDUCE_GRAD:
			put(c, a);
			if (!c->has_wrg[a.stage])
				put(c, dpl__csv_act(DPL_ACT_WAIT_REDUCE_GRAD,
						    a.stage,
						    DPL_NO_MICROBATCH));
			break;
		default:
			put(c, a);
		}
	}
	/* Sends without a backward to wait after, in the order sent. */
	for (i = 0; i < c->nend; i++) {
		struct dpl_action a = c->end[i];

		if (a.kind == DPL_ACT_SEND_F) {
			if (!(*flags(c, a) & C_PENDING_F))
				continue; /* waited for after its backward */
			*flags(c, a) &= (uint8_t)~C_PENDING_F;
		}
		put(c, dpl__csv_act(a.kind == DPL_ACT_SEND_F
					    ? DPL_ACT_WAIT_SEND_F
					    : DPL_ACT_WAIT_SEND_B,
				    a.stage, a.microbatch));
	}
	fputc('\n', c->f);
}

int dpl_schedule_write_csv_comms(const dpl_schedule *s, FILE *f)
{
	struct comms c;
	uint32_t S, r;
	size_t longest = 0;
	int rc;

	if (s == NULL || f == NULL)
		return dpl_set_error(DPL_EINVAL, "schedule and file must not be NULL");
	if (!dpl_schedule_is_lowered(s))
		return dpl_set_error(DPL_EINVAL,
				  "a compute_comms CSV needs a lowered "
				  "schedule (run dpl_schedule_lower first)");
	if ((rc = dpl_schedule_validate(s, NULL)) != 0)
		return rc;
	S = dpl_schedule_stages(s);
	if (S >= CSV_INDEX_LIMIT ||
	    dpl_schedule_microbatches(s) >= CSV_INDEX_LIMIT)
		return dpl_set_error(DPL_ERANGE,
				  "index too large for a CSV file (limit "
				  "2^31 - 1)");
	for (r = 0; r < dpl_schedule_ranks(s); r++) {
		size_t len;

		dpl_schedule_actions(s, r, &len);
		if (len > longest)
			longest = len;
	}
	memset(&c, 0, sizeof c);
	c.s = s;
	c.f = f;
	c.M = dpl_schedule_microbatches(s);
	c.k = calloc((size_t)S * c.M, 1);
	c.has_wrg = calloc(S, sizeof *c.has_wrg);
	c.end = malloc((longest ? longest : 1) * sizeof *c.end);
	if (!c.k || !c.has_wrg || !c.end) {
		rc = dpl_set_error(DPL_ENOMEM, "out of memory for %u stages",
				S);
		goto out;
	}
	for (r = 0; r < dpl_schedule_ranks(s); r++) {
		size_t len;
		const struct dpl_action *l = dpl_schedule_actions(s, r, &len);

		write_rank(&c, l, len);
	}
	if (fflush(f) != 0 || ferror(f))
		rc = dpl_set_error(DPL_EIO,
				"writing the CSV schedule failed: %s",
				strerror(errno));
out:
	free(c.k);
	free(c.has_wrg);
	free(c.end);
	return rc;
}
