/*
 * runner_compute.c - the compute actions of a step: F, B, I and W through
 * the stage callbacks, and an OVERLAP_F_B pair through the callbacks'
 * `overlap` member when they have one.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "runner_internal.h"

int dpl__callback_failed(dpl_runner *r, int rc, const char *what)
{
	char t[DPL_ACTION_TEXT_MAX];
	const char *msg = dpl_last_error();

	if (rc > 0)
		rc = DPL_ECALLBACK;
	return dpl__fail(r, rc, "%s callback failed in %s at iteration %llu: %s "
		    "(%s)%s%s",
		    what, dpl__act_text(r->cur, t, sizeof t),
		    (unsigned long long)r->iter, dpl_strerror(rc),
		    dpl_err_name(rc), msg[0] ? ": " : "", msg);
}

/* Wait until the device finished the work a callback queued. */
static int device_sync(dpl_runner *r)
{
	char t[DPL_ACTION_TEXT_MAX];
	int rc;

	if (!r->dev->has_events)
		return 0;
	rc = r->dev->ops->event_record(r->dev->ctx, r->event);
	if (rc != 0)
		return dpl__fail(r, rc, "device %s: event_record in %s: %s",
			    r->dev->ops->name, dpl__act_text(r->cur, t, sizeof t),
			    dpl_strerror(rc));
	rc = dpl__wait_for(r, dpl__event_done, NULL);
	return rc;
}

/* The arguments of a compute action on a slot. */
static int fill_args(dpl_runner *r, struct dpl__lstage *ls,
		     struct dpl__slot *sl, uint32_t kind,
		     struct dpl_stage_args *a)
{
	uint64_t n = sl->end - sl->begin;
	struct dpl__slot *psl = NULL;
	int rc;

	memset(a, 0, sizeof *a);
	a->stage = ls->stage;
	a->microbatch = sl->mb;
	a->slot = sl->live_idx;
	a->replica = r->replica;
	a->iteration = r->iter;
	a->begin = sl->begin;
	a->end = sl->end;
	a->batch = r->batch;
	if (!ls->first && !ls->prev_remote) {
		struct dpl__lstage *lp = &r->ls[r->lidx[ls->stage - 1]];

		if ((rc = dpl__lookup(r, lp, sl->mb, &psl)) != 0)
			return rc;
	}
	if (!ls->first) {
		a->input = ls->prev_remote ? sl->in_act : psl->out_act;
		a->input_bytes = (size_t)(n * ls->in_bps);
	}
	if (!ls->last) {
		a->output = sl->out_act;
		a->output_bytes = (size_t)(n * ls->out_bps);
	}
	if (kind == DPL_ACT_F)
		return 0;
	if (!ls->last) {
		a->grad_output = sl->in_grad;
		a->grad_output_bytes = (size_t)(n * ls->out_bps);
	}
	if (!ls->first && kind != DPL_ACT_W) {
		a->grad_input = ls->prev_remote ? sl->out_grad : psl->in_grad;
		a->grad_input_bytes = (size_t)(n * ls->in_bps);
	}
	return 0;
}

/* One compute action made ready: its slot, its arguments, and whether
 * this replica has samples of it (a callback to call). */
struct job {
	struct dpl__lstage *ls;
	struct dpl__slot *sl;
	uint32_t kind;
	bool work;
	struct dpl_stage_args a;
};

/* Everything before the forward callback: the slot, the input, a live
 * index. */
static int forward_begin(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
			 struct job *o)
{
	char t[DPL_ACTION_TEXT_MAX];
	struct dpl__slot *sl;
	int rc;

	o->ls = ls;
	o->kind = DPL_ACT_F;
	o->work = false;
	if ((rc = dpl__acquire(r, ls, j, &sl)) != 0)
		return rc;
	o->sl = sl;
	if (ls->prev_remote && (rc = dpl__wait_reqs(r, sl->rf, sl->nrf)) != 0)
		return rc;
	if (ls->live_top == 0)
		return dpl__fail(r, DPL_ESCHED, "%s: more micro-batches alive on "
			    "stage %u than its bound %u",
			    dpl__act_text(r->cur, t, sizeof t), ls->stage,
			    ls->bound);
	sl->live_idx = ls->live_free[--ls->live_top];
	if (++ls->live > ls->peak_live)
		ls->peak_live = ls->live;
	if (sl->begin == sl->end)
		return 0;
	o->work = true;
	return fill_args(r, ls, sl, DPL_ACT_F, &o->a);
}

/* Everything before a backward callback (B, I or W). */
static int backward_begin(dpl_runner *r, struct dpl__lstage *ls, uint32_t j,
			  uint32_t kind, struct job *o)
{
	struct dpl__slot *sl;
	int rc;

	o->ls = ls;
	o->kind = kind;
	o->work = false;
	if ((rc = dpl__lookup(r, ls, j, &sl)) != 0)
		return rc;
	o->sl = sl;
	if (kind != DPL_ACT_W && ls->next_remote &&
	    (rc = dpl__wait_reqs(r, sl->rb, sl->nrb)) != 0)
		return rc;
	if (sl->begin == sl->end)
		return 0;
	o->work = true;
	return fill_args(r, ls, sl, kind, &o->a);
}

static const char *callback_name(uint32_t kind)
{
	return kind == DPL_ACT_F   ? "forward"
	       : kind == DPL_ACT_B ? "backward"
	       : kind == DPL_ACT_I ? "backward_input"
				   : "backward_weight";
}

/* The job's own callback, then the device's completion. */
static int call(dpl_runner *r, struct job *o)
{
	int rc;

	if (!o->work)
		return 0;
	/* Clear the thread's message so that a failing callback's own
	 * dpl_set_error() text is the one reported. */
	dpl__clear_error();
	if (o->kind == DPL_ACT_F)
		rc = r->ops->forward(r->user, &o->a);
	else if (o->kind == DPL_ACT_B)
		rc = r->ops->backward(r->user, &o->a);
	else if (o->kind == DPL_ACT_I)
		rc = r->ops->backward_input(r->user, &o->a);
	else
		rc = r->ops->backward_weight(r->user, &o->a);
	if (rc != 0)
		return dpl__callback_failed(r, rc, callback_name(o->kind));
	return device_sync(r);
}

/* The micro-batch's callback slot (dpl_stage_args.slot) is free again. */
static void free_live(struct dpl__lstage *ls, struct dpl__slot *sl)
{
	if (sl->live_idx == DPL__NONE)
		return;
	ls->live_free[ls->live_top++] = sl->live_idx;
	sl->live_idx = DPL__NONE;
	ls->live--;
}

/* A forward-only pass: the forward of (ls, sl) returned. Its callback
 * slot is free at once; the buffers go back once nothing reads them: on
 * the last stage now, with a remote next stage at SEND_F (runner_step.c),
 * with a local one when that stage's forward returned. This forward
 * read a local previous stage's output: that stage's slot goes back. */
static void finish_forward_only(dpl_runner *r, struct dpl__lstage *ls,
				struct dpl__slot *sl)
{
	free_live(ls, sl);
	if (!ls->first && !ls->prev_remote) {
		struct dpl__lstage *lp = &r->ls[r->lidx[ls->stage - 1]];

		if (lp->mb_slot[sl->mb] != DPL__NONE)
			dpl__release(lp, &lp->slots[lp->mb_slot[sl->mb]]);
	}
	if (ls->last)
		dpl__release(ls, sl);
}

/* Everything after the callback. */
static void finish(dpl_runner *r, struct job *o)
{
	struct dpl__lstage *ls = o->ls;
	struct dpl__slot *sl = o->sl;

	if (o->kind == DPL_ACT_F) {
		sl->fwd_done = true;
		if (r->fwd_only)
			finish_forward_only(r, ls, sl);
		return;
	}
	if (o->kind == DPL_ACT_I)
		return;
	free_live(ls, sl);
	sl->bw_done = true;
	dpl__maybe_release(ls, sl);
}

int dpl__run_compute(dpl_runner *r, struct dpl_action a)
{
	struct dpl__lstage *ls = &r->ls[r->lidx[a.stage]];
	struct job o;
	int rc;

	if (a.kind == DPL_ACT_F)
		rc = forward_begin(r, ls, a.microbatch, &o);
	else
		rc = backward_begin(r, ls, a.microbatch, a.kind, &o);
	if (rc == 0)
		rc = call(r, &o);
	if (rc == 0)
		finish(r, &o);
	return rc;
}

int dpl__run_overlap(dpl_runner *r, struct dpl_action f, struct dpl_action b)
{
	struct job fo, bo;
	int rc;

	r->cur = f;
	if ((rc = forward_begin(r, &r->ls[r->lidx[f.stage]], f.microbatch,
				&fo)) != 0)
		return rc;
	r->cur = b;
	if ((rc = backward_begin(r, &r->ls[r->lidx[b.stage]], b.microbatch,
				 b.kind, &bo)) != 0)
		return rc;
	if (fo.work && bo.work) {
		r->cur = dpl__act(DPL_ACT_OVERLAP_F_B, f.stage,
				  DPL_NO_MICROBATCH);
		dpl__clear_error();
		rc = r->overlap(r->user, &fo.a, &bo.a);
		if (rc != 0)
			return dpl__callback_failed(r, rc, "overlap");
		if ((rc = device_sync(r)) != 0)
			return rc;
	} else {
		/* One part has no samples on this replica: the other alone. */
		r->cur = f;
		if ((rc = call(r, &fo)) != 0)
			return rc;
		r->cur = b;
		if ((rc = call(r, &bo)) != 0)
			return rc;
	}
	finish(r, &fo);
	finish(r, &bo);
	return 0;
}
