/*
 * runner.c - a runner's life: parameter checks, create (the allocation
 * itself is runner_setup.c), cancel after a failure, destroy. Execution
 * is in runner_step.c, statistics and traces in runner_trace.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner_internal.h"

static int check_stage_ops(const struct dpl_stage_ops *o, bool split,
			   bool whole)
{
	if (o == NULL)
		return dpl__error(DPL_EINVAL, "stage_ops is NULL");
	if (o->abi_version != DPL_STAGE_ABI_VERSION)
		return dpl__error(DPL_EABI, "stage_ops: abi_version %u, "
				  "expected %u", o->abi_version,
				  DPL_STAGE_ABI_VERSION);
	if (o->size < offsetof(struct dpl_stage_ops, step) +
			      sizeof o->step)
		return dpl__error(DPL_EABI, "stage_ops: size %u too small",
				  o->size);
	if (o->forward == NULL)
		return dpl__error(DPL_EINVAL, "stage_ops: forward is NULL");
	if (whole && o->backward == NULL)
		return dpl__error(DPL_EINVAL, "stage_ops: backward is NULL "
				  "and the schedule has B actions");
	if (split && (o->backward_input == NULL ||
		      o->backward_weight == NULL))
		return dpl__error(DPL_EINVAL, "stage_ops: backward_input and "
				  "backward_weight are needed for I and W "
				  "actions");
	if (o->grads == NULL)
		return dpl__error(DPL_EINVAL, "stage_ops: grads is NULL");
	if (o->step == NULL)
		return dpl__error(DPL_EINVAL, "stage_ops: step is NULL");
	return 0;
}

/*
 * Scan this rank's list: check that every action belongs here and that
 * communication matches the layout, and count for each stage the buffer
 * sets alive at once (from the first RECV_F/F of a micro-batch until its
 * B or W and, with a remote previous stage, its SEND_B).
 */

static int check_params(const struct dpl_runner_params *p, bool *split,
			bool *whole)
{
	const struct dpl_action *l;
	size_t n, i;
	uint32_t rk;

	if (p == NULL)
		return dpl__error(DPL_EINVAL, "runner params are NULL");
	if (p->schedule == NULL)
		return dpl__error(DPL_EINVAL, "schedule is NULL");
	if (!dpl_schedule_is_lowered(p->schedule))
		return dpl__error(DPL_EINVAL,
				  "schedule is not lowered (call "
				  "dpl_schedule_lower first)");
	if (dpl_schedule_stages(p->schedule) >= DPL__TAG_STAGE_LIMIT)
		return dpl__error(DPL_ERANGE, "stages %u >= 2^20",
				  dpl_schedule_stages(p->schedule));
	if (dpl_schedule_microbatches(p->schedule) >= DPL__TAG_INDEX_LIMIT)
		return dpl__error(DPL_ERANGE, "microbatches %u >= 2^28",
				  dpl_schedule_microbatches(p->schedule));
	if (p->batch < dpl_schedule_microbatches(p->schedule))
		return dpl__error(DPL_EINVAL,
				  "batch %llu < microbatches %u: every "
				  "micro-batch needs a sample",
				  (unsigned long long)p->batch,
				  dpl_schedule_microbatches(p->schedule));
	*split = *whole = false;
	for (rk = 0; rk < dpl_schedule_ranks(p->schedule); rk++) {
		l = dpl_schedule_actions(p->schedule, rk, &n);
		for (i = 0; i < n; i++) {
			if (l[i].kind == DPL_ACT_B)
				*whole = true;
			if (l[i].kind == DPL_ACT_I || l[i].kind == DPL_ACT_W)
				*split = true;
		}
	}
	return check_stage_ops(p->stage_ops, *split, *whole);
}

int dpl_runner_create(const struct dpl_runner_params *p, dpl_runner **out)
{
	dpl_runner *r;
	bool split, whole;
	uint32_t q, s;
	int rc;

	if ((rc = check_params(p, &split, &whole)) != 0)
		return rc;
	r = calloc(1, sizeof *r);
	if (r == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	r->sched = p->schedule;
	r->ops = p->stage_ops;
	if (r->ops->size >= offsetof(struct dpl_stage_ops, overlap) +
				sizeof r->ops->overlap)
		r->overlap = r->ops->overlap;
	r->user = p->stage_user;
	r->t = p->transport;
	r->rank = p->rank;
	r->err_peer = DPL__NONE;
	r->cause = DPL__NONE;
	r->wait_peer = DPL__NONE;
	r->batch = p->batch;
	r->timeout_ns = (uint64_t)(p->timeout_ms ? p->timeout_ms
						: DPL_RUNNER_TIMEOUT_MS) *
			1000000u;
	r->nranks = dpl_schedule_ranks(p->schedule);
	r->nstages = dpl_schedule_stages(p->schedule);
	r->nmb = dpl_schedule_microbatches(p->schedule);
	if ((rc = dpl_runner_world_size(p->schedule, p->replicas,
					&r->world)) != 0)
		goto fail;
	if ((rc = dpl_runner_position(p->schedule, p->replicas, p->rank,
				      &r->prank, &r->replica)) != 0)
		goto fail;
	if (r->t == NULL && r->world > 1) {
		rc = dpl__error(DPL_EINVAL, "transport is NULL for a world of "
				"%u ranks", r->world);
		goto fail;
	}
	if (r->t != NULL && (dpl_transport_world_size(r->t) != r->world ||
			     dpl_transport_rank(r->t) != r->rank)) {
		rc = dpl__error(DPL_EINVAL,
				"transport is rank %u of %u, the layout needs "
				"rank %u of %u",
				dpl_transport_rank(r->t),
				dpl_transport_world_size(r->t), r->rank,
				r->world);
		goto fail;
	}
	r->base = calloc(r->nranks + 1, sizeof *r->base);
	r->reps = calloc(r->nranks, sizeof *r->reps);
	r->lidx = malloc(r->nstages * sizeof *r->lidx);
	r->ls = calloc(r->nstages, sizeof *r->ls);
	r->mb_off = malloc(((size_t)r->nmb + 1) * sizeof *r->mb_off);
	if (!r->base || !r->reps || !r->lidx || !r->ls || !r->mb_off) {
		rc = dpl__error(DPL_ENOMEM, "out of memory");
		goto fail;
	}
	for (q = 0; q < r->nmb; q++) {
		uint64_t e;

		dpl_split(r->batch, r->nmb, q, &r->mb_off[q], &e);
		r->mb_off[q + 1] = e;
	}
	for (q = 0; q < r->nranks; q++) {
		r->reps[q] = p->replicas ? p->replicas[q] : 1;
		r->base[q + 1] = r->base[q] + r->reps[q];
	}
	r->nrep = r->reps[r->prank];
	if (p->device != NULL) {
		r->dev = p->device;
	} else {
		if ((rc = dpl_device_open(&dpl_device_host, NULL,
					  &r->own_dev)) != 0)
			goto fail;
		r->dev = r->own_dev;
	}
	if (r->t != NULL && r->dev->ops->mem != DPL_MEM_HOST &&
	    r->dev->ops->mem == DPL_MEM_CUDA &&
	    !(r->t->ops->caps & DPL_TRANSPORT_CAP_MEM_CUDA)) {
		rc = dpl__error(DPL_EINVAL, "transport %s cannot move device "
				"%s's memory", r->t->ops->name,
				r->dev->ops->name);
		goto fail;
	}
	for (s = 0; s < r->nstages; s++) {
		r->lidx[s] = DPL__NONE;
		if (dpl_schedule_stage_rank(r->sched, s) == r->prank) {
			r->lidx[s] = r->nls;
			r->ls[r->nls++].stage = s;
		}
	}
	for (s = 0; s < r->nls; s++)
		dpl__setup_stage_neighbours(r, &r->ls[s], p->activation_bytes);
	r->list = dpl_schedule_actions(r->sched, r->prank, &r->nlist);
	if ((rc = dpl__scan_list(r)) != 0)
		goto fail;
	for (s = 0; s < r->nls; s++) {
		uint64_t cap = p->cap_bytes ? p->cap_bytes[r->ls[s].stage]
					    : 0;

		if ((rc = dpl__setup_slots(r, &r->ls[s], cap)) != 0)
			goto fail;
		dpl__runner_reset_stage(&r->ls[s], r->nmb);
	}
	if ((rc = dpl__setup_requests(r)) != 0)
		goto fail;
	for (s = 0; s < r->nls; s++)
		if ((rc = dpl__setup_grads(r, &r->ls[s])) != 0)
			goto fail;
	if (r->dev->has_events) {
		size_t es = r->dev->ops->event_size;

		if (posix_memalign(&r->event, _Alignof(max_align_t),
				   (es + 15) / 16 * 16) != 0) {
			r->event = NULL;
			rc = dpl__error(DPL_ENOMEM, "out of memory");
			goto fail;
		}
		if ((rc = r->dev->ops->event_create(r->dev->ctx,
						    r->event)) != 0) {
			free(r->event);
			r->event = NULL;
			goto fail;
		}
	}
	if (p->trace_capacity > 0) {
		r->trace = calloc(p->trace_capacity, sizeof *r->trace);
		if (r->trace == NULL) {
			rc = dpl__error(DPL_ENOMEM, "out of memory for %zu "
					"trace events", p->trace_capacity);
			goto fail;
		}
		r->trace_cap = p->trace_capacity;
	}
	if ((rc = dpl__setup_ctrl(r)) != 0)
		goto fail;
	*out = r;
	return 0;
fail:
	{
		char msg[512];

		snprintf(msg, sizeof msg, "%s", dpl_last_error());
		dpl_runner_destroy(r);
		dpl__error(rc, "%s", msg);
	}
	return rc;
}

static void cancel_rreq(dpl_runner *r, struct dpl__rreq *q, uint64_t deadline)
{
	(void)deadline;
	if (q->live)
		dpl_transport_cancel(r->t, q->req);
}

/* Collect a cancelled request. One the transport keeps past the
 * deadline is given up: the runner leaks its memory rather than free
 * what the transport still uses, and does not wait for it again. */
static void collect_into(dpl_runner *r, struct dpl__rreq *q,
			 uint64_t deadline)
{
	if (q->live && !dpl__transport_collect(r->t, q->req, deadline))
		r->leak = true;
	q->live = false;
}

/* fn on every data request of the slots. */
static void each_slot_rreq(dpl_runner *r,
			   void (*fn)(dpl_runner *, struct dpl__rreq *,
				      uint64_t),
			   uint64_t deadline)
{
	uint32_t i, j, k;

	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		for (j = 0; j < ls->nslots; j++) {
			struct dpl__slot *sl = &ls->slots[j];

			for (k = 0; ls->prev_remote && k < ls->prev_r; k++) {
				fn(r, &sl->rf[k], deadline);
				fn(r, &sl->sb[k], deadline);
			}
			for (k = 0; ls->next_remote && k < ls->next_r; k++) {
				fn(r, &sl->rb[k], deadline);
				fn(r, &sl->sf[k], deadline);
			}
		}
	}
}

void dpl__runner_cancel_all(dpl_runner *r)
{
	uint64_t deadline;
	uint32_t i;

	if (r->t == NULL || r->rreqs == NULL)
		return;
	/* Everything is cancelled before anything is waited for, so
	 * requests that need a peer to act on the cancel all get there at
	 * once. */
	deadline = dpl__now_ns() + r->timeout_ns;
	each_slot_rreq(r, cancel_rreq, deadline);
	for (i = 0; i < r->nls; i++)
		if (r->ls[i].ar_live)
			dpl_transport_cancel(r->t, r->ls[i].ar_req);
	each_slot_rreq(r, collect_into, deadline);
	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		if (ls->ring.n > 1 && !dpl__ring_cancel(&ls->ring, deadline))
			r->leak = true;
		if (ls->ar_live) {
			struct dpl__rreq q = {ls->ar_req, 0, true};

			collect_into(r, &q, deadline);
			ls->ar_live = q.live;
		}
		ls->reducing = false;
	}
}

void dpl_runner_destroy(dpl_runner *r)
{
	uint32_t i, q;

	if (r == NULL)
		return;
	dpl__runner_cancel_all(r);
	if (r->ctrl_r != NULL) {
		uint64_t deadline = dpl__now_ns() + r->timeout_ns;

		for (q = 0; q < r->world; q++) {
			cancel_rreq(r, &r->ctrl_s[q], deadline);
			cancel_rreq(r, &r->ctrl_r[q], deadline);
		}
		for (q = 0; q < r->world; q++) {
			collect_into(r, &r->ctrl_s[q], deadline);
			collect_into(r, &r->ctrl_r[q], deadline);
		}
	}
	if (r->event != NULL) {
		r->dev->ops->event_destroy(r->dev->ctx, r->event);
		free(r->event);
	}
	for (i = 0; r->ls != NULL && i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		if (!r->leak) {
			r->dev->ops->free(r->dev->ctx, r->dev->ops->mem,
					  ls->mem);
			r->dev->ops->free(r->dev->ctx, r->dev->ops->mem,
					  ls->gvec);
			r->dev->ops->free(r->dev->ctx, r->dev->ops->mem,
					  ls->gscratch);
		}
		free(ls->slots);
		free(ls->fifo);
		free(ls->mb_slot);
		free(ls->live_free);
		free(ls->group);
	}
	if (!r->leak) {
		free(r->req_mem);
		free(r->ctrl_in);
	}
	dpl_device_close(r->own_dev);
	free(r->rreqs);
	free(r->ctrl_got);
	free(r->trace);
	free(r->ls);
	free(r->lidx);
	free(r->mb_off);
	free(r->base);
	free(r->reps);
	free(r);
}

uint32_t dpl_runner_cause(const dpl_runner *r)
{
	return r->cause;
}

const char *dpl_runner_last_error(const dpl_runner *r)
{
	return r->errmsg;
}
