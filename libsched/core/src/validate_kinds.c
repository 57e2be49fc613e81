/*
 * validate_kinds.c - rule 7 of the validator: the kinds PyTorch's lowered
 * schedules hold besides dpl's (UNSHARD, RESHARD, WAIT_REDUCE_GRAD,
 * WAIT_SEND_F, WAIT_SEND_B) and the OVERLAP_F_B marker, checked in one
 * pass over each list (see dpl/schedule.h).
 */
#include <stdlib.h>

#include "validate.h"

/* Per-stage flags. */
enum {
	K_REDUCE = 1u << 0,   /* REDUCE_GRAD seen */
	K_STEP = 1u << 1,     /* STEP seen */
	K_WAITRED = 1u << 2,  /* WAIT_REDUCE_GRAD seen */
	K_UNSHARD = 1u << 3,  /* between an UNSHARD and its RESHARD */
	K_SHARDED = 1u << 4,  /* the stage has UNSHARD or RESHARD at all */
};

/* Per (stage, micro-batch) flags of sends and their waits. */
enum {
	W_SENT_F = 1u << 0,
	W_SENT_B = 1u << 1,
	W_WAIT_F = 1u << 2,
	W_WAIT_B = 1u << 3,
};

static bool has_no_mb(uint32_t k)
{
	return !dpl__kind_has_mb(k);
}

/* The OVERLAP_F_B marker at l[i]: its two parts follow it. */
static int check_overlap(struct dpl__vctx *v, uint32_t r,
			 const struct dpl__list *l, size_t i)
{
	struct dpl_action a = l->a[i];

	if (i + 2 >= l->len)
		return dpl__vreport(v, DPL_ESCHED, r, i, a,
				    "needs its two parts (an F, then a B or "
				    "I) right after it");
	if (l->a[i + 1].kind != DPL_ACT_F || l->a[i + 1].stage != a.stage)
		return dpl__vreport(v, DPL_ESCHED, r, i + 1, l->a[i + 1],
				    "the first part of OVERLAP_F_B must be an "
				    "F of stage %u",
				    a.stage);
	if (l->a[i + 2].kind != DPL_ACT_B && l->a[i + 2].kind != DPL_ACT_I)
		return dpl__vreport(v, DPL_ESCHED, r, i + 2, l->a[i + 2],
				    "the second part of OVERLAP_F_B must be "
				    "a B or an I");
	return 0;
}

static int check_rank(struct dpl__vctx *v, uint32_t r, uint8_t *flags,
		      uint8_t *sent)
{
	const dpl_schedule *s = v->s;
	const struct dpl__list *l = &s->lists[r];
	uint32_t M = s->microbatches;
	size_t i;
	int rc;

	for (i = 0; i < l->len; i++) {
		struct dpl_action a = l->a[i];
		uint8_t *f = &flags[a.stage], *w = NULL;
		uint32_t k = a.kind;
		const char *name = dpl_action_kind_name(k);

		if (k >= DPL_ACT_UNSHARD) {
			if (has_no_mb(k) != (a.microbatch == DPL_NO_MICROBATCH))
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "%s carries %s micro-batch",
						    name,
						    has_no_mb(k) ? "no" : "a");
			if (k != DPL_ACT_OVERLAP_F_B && !s->lowered)
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "compute-only lists hold "
						    "no %s",
						    name);
			if (!has_no_mb(k) && a.microbatch >= M)
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "micro-batch %u out of "
						    "range (0..%u)",
						    a.microbatch, M - 1);
		}
		if (dpl__kind_has_mb(k) && a.microbatch < M)
			w = &sent[dpl__sm(s, a.stage, a.microbatch)];
		switch (k) {
		case DPL_ACT_F:
		case DPL_ACT_B:
		case DPL_ACT_I:
		case DPL_ACT_W:
			if ((*f & K_SHARDED) && !(*f & K_UNSHARD))
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "stage %u is sharded here "
						    "(no UNSHARD since its "
						    "last RESHARD)",
						    a.stage);
			break;
		case DPL_ACT_UNSHARD:
			if (*f & K_UNSHARD)
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "stage %u is unsharded "
						    "already",
						    a.stage);
			*f |= K_UNSHARD;
			break;
		case DPL_ACT_RESHARD:
			if (!(*f & K_UNSHARD))
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "without an UNSHARD of "
						    "stage %u before it",
						    a.stage);
			*f &= (uint8_t)~K_UNSHARD;
			break;
		case DPL_ACT_REDUCE_GRAD:
			*f |= K_REDUCE;
			break;
		case DPL_ACT_STEP:
			*f |= K_STEP;
			break;
		case DPL_ACT_WAIT_REDUCE_GRAD:
			if (!(*f & K_REDUCE) || (*f & K_WAITRED) ||
			    (*f & K_STEP))
				return dpl__vreport(
					v, DPL_ESCHED, r, i, a, "%s",
					!(*f & K_REDUCE)
						? "before its REDUCE_GRAD"
					: (*f & K_WAITRED)
						? "second WAIT_REDUCE_GRAD"
						: "after the stage's STEP");
			*f |= K_WAITRED;
			break;
		case DPL_ACT_SEND_F:
			*w |= W_SENT_F;
			break;
		case DPL_ACT_SEND_B:
			*w |= W_SENT_B;
			break;
		case DPL_ACT_WAIT_SEND_F:
		case DPL_ACT_WAIT_SEND_B: {
			bool fw = k == DPL_ACT_WAIT_SEND_F;

			if (!(*w & (fw ? W_SENT_F : W_SENT_B)))
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "before its %s",
						    fw ? "SEND_F" : "SEND_B");
			if (*w & (fw ? W_WAIT_F : W_WAIT_B))
				return dpl__vreport(v, DPL_ESCHED, r, i, a,
						    "second wait for one send");
			*w |= fw ? W_WAIT_F : W_WAIT_B;
			break;
		}
		case DPL_ACT_OVERLAP_F_B:
			if ((rc = check_overlap(v, r, l, i)) != 0)
				return rc;
			break;
		default:
			break;
		}
	}
	return 0;
}

int dpl__validate_kinds(struct dpl__vctx *v)
{
	const dpl_schedule *s = v->s;
	uint8_t *flags, *sent;
	bool any = false;
	uint32_t r;
	int rc = 0;

	/* Most schedules hold none of these kinds: look before allocating. */
	for (r = 0; r < s->ranks && !any; r++)
		for (size_t i = 0; i < s->lists[r].len && !any; i++)
			any = s->lists[r].a[i].kind >= DPL_ACT_UNSHARD;
	if (!any)
		return 0;
	flags = calloc(s->stages, 1);
	sent = calloc((size_t)s->stages * s->microbatches, 1);
	if (flags == NULL || sent == NULL) {
		free(flags);
		free(sent);
		return dpl__error(DPL_ENOMEM, "out of memory");
	}
	for (r = 0; r < s->ranks; r++)
		for (size_t i = 0; i < s->lists[r].len; i++) {
			struct dpl_action a = s->lists[r].a[i];

			if (a.kind == DPL_ACT_UNSHARD ||
			    a.kind == DPL_ACT_RESHARD)
				flags[a.stage] |= K_SHARDED;
		}
	for (r = 0; r < s->ranks && rc == 0; r++)
		rc = check_rank(v, r, flags, sent);
	free(flags);
	free(sent);
	return rc;
}
