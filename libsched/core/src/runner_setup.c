/*
 * runner_setup.c - what dpl_runner_create() allocates and sizes from the
 * schedule: the stages this rank runs and their neighbours, activation
 * and gradient slots, request storage, the receives of failure notices.
 * Nothing here grows once the runner is created.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner_internal.h"

static uint64_t align64(uint64_t v)
{
	return (v + 63) & ~(uint64_t)63;
}

/* Checked a * b for sizes; false on overflow. */
static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	if (a != 0 && b > UINT64_MAX / a)
		return false;
	*out = a * b;
	return true;
}

int dpl__scan_list(dpl_runner *r)
{
	uint8_t *st;
	uint32_t *in_use;
	size_t i;
	char where[96];
	int rc = 0;

	st = calloc((size_t)r->nls * r->nmb, 1);
	in_use = calloc(r->nls, sizeof *in_use);
	if (st == NULL || in_use == NULL) {
		free(st);
		free(in_use);
		return dpl__error(DPL_ENOMEM, "out of memory");
	}
	enum { ACQ = 1, BW = 2, SB = 4, REL = 8 };
	for (i = 0; i < r->nlist && rc == 0; i++) {
		struct dpl_action a = r->list[i];
		struct dpl__lstage *ls;
		uint8_t *f;
		bool rel = false;

		if (a.stage >= r->nstages || r->lidx[a.stage] == DPL__NONE) {
			rc = dpl__error(DPL_ESCHED,
					"%s: stage not on this rank",
					dpl__where(where, sizeof where,
						   r->prank, i, a));
			break;
		}
		ls = &r->ls[r->lidx[a.stage]];
		if (a.kind == DPL_ACT_STEP)
			ls->has_step = true;
		if (a.kind >= DPL_ACT_REDUCE_GRAD && a.kind < DPL_ACT__COUNT)
			continue; /* no buffers of their own */
		if (a.microbatch >= r->nmb || a.kind >= DPL_ACT__COUNT) {
			rc = dpl__error(DPL_ESCHED, "%s: bad action",
					dpl__where(where, sizeof where,
						   r->prank, i, a));
			break;
		}
		if (((a.kind == DPL_ACT_RECV_F || a.kind == DPL_ACT_SEND_B) &&
		     !ls->prev_remote) ||
		    ((a.kind == DPL_ACT_RECV_B || a.kind == DPL_ACT_SEND_F) &&
		     !ls->next_remote)) {
			rc = dpl__error(DPL_ESCHED,
					"%s: no remote neighbour to talk to",
					dpl__where(where, sizeof where,
						   r->prank, i, a));
			break;
		}
		f = &st[(size_t)r->lidx[a.stage] * r->nmb + a.microbatch];
		switch (a.kind) {
		case DPL_ACT_RECV_F:
		case DPL_ACT_F:
		case DPL_ACT_RECV_B:
			if (!(*f & ACQ)) {
				*f |= ACQ;
				if (++in_use[r->lidx[a.stage]] > ls->nslots)
					ls->nslots = in_use[r->lidx[a.stage]];
			}
			break;
		case DPL_ACT_B:
			*f |= BW;
			rel = !ls->prev_remote;
			break;
		case DPL_ACT_W:
			*f |= BW;
			rel = !ls->prev_remote || (*f & SB);
			break;
		case DPL_ACT_SEND_B:
			*f |= SB;
			rel = (*f & BW) != 0;
			break;
		default:
			break;
		}
		if (rel && (*f & ACQ) && !(*f & REL)) {
			*f |= REL;
			in_use[r->lidx[a.stage]]--;
		}
	}
	free(st);
	free(in_use);
	return rc;
}

int dpl__setup_stage_neighbours(dpl_runner *r, struct dpl__lstage *ls,
				  const uint64_t *act)
{
	uint32_t s = ls->stage, q;
	uint64_t mb_max, b, e;

	ls->first = s == 0;
	ls->last = s + 1 == r->nstages;
	ls->in_bps = (act && !ls->first) ? act[s - 1] : 0;
	ls->out_bps = (act && !ls->last) ? act[s] : 0;
	if (!ls->first) {
		q = dpl_schedule_stage_rank(r->sched, s - 1);
		ls->prev_remote = q != r->prank;
		ls->prev_r = r->reps[q];
		ls->prev_base = r->base[q];
	}
	if (!ls->last) {
		q = dpl_schedule_stage_rank(r->sched, s + 1);
		ls->next_remote = q != r->prank;
		ls->next_r = r->reps[q];
		ls->next_base = r->base[q];
	}
	dpl_split(r->batch, r->nmb, 0, &b, &e);
	mb_max = e - b;
	dpl_split(mb_max, r->nrep, 0, &b, &e);
	ls->max_samples = e - b;
	ls->bound = dpl_schedule_bound(r->sched, s);
	return 0;
}

/* Buffer sizes of one slot, in the order in_act, out_act, in_grad,
 * out_grad. */
static int slot_sizes(const struct dpl__lstage *ls, uint64_t sz[4])
{
	uint64_t in = 0, out = 0;

	if (!mul_ok(ls->max_samples, ls->in_bps, &in) ||
	    !mul_ok(ls->max_samples, ls->out_bps, &out))
		return dpl__error(DPL_ERANGE, "stage %u: activation bytes "
				  "overflow", ls->stage);
	sz[0] = ls->prev_remote ? align64(in) : 0;
	sz[1] = ls->last ? 0 : align64(out);
	sz[2] = ls->last ? 0 : align64(out);
	sz[3] = ls->prev_remote ? align64(in) : 0;
	return 0;
}

int dpl__setup_grads(dpl_runner *r, struct dpl__lstage *ls)
{
	const struct dpl_buffer *b = NULL;
	size_t n = 0, i, esize, total = 0, q, rem, chunk;
	int rc;

	rc = r->ops->grads(r->user, ls->stage, &b, &n);
	if (rc != 0)
		return dpl__error(rc < 0 ? rc : DPL_ECALLBACK,
				  "stage %u: grads callback failed (%s)",
				  ls->stage,
				  dpl_err_name(rc < 0 ? rc : DPL_ECALLBACK));
	if (n > 0 && b == NULL)
		return dpl__error(DPL_EINVAL, "stage %u: grads returned %zu "
				  "buffers and a NULL array", ls->stage, n);
	for (i = 0; i < n; i++) {
		if (i > 0 && b[i].dtype != b[0].dtype)
			return dpl__error(DPL_EINVAL,
					  "stage %u: gradient buffer %zu has "
					  "dtype %u, buffer 0 has %u",
					  ls->stage, i, b[i].dtype,
					  b[0].dtype);
		if (dpl_dtype_size(b[i].dtype) == 0)
			return dpl__error(DPL_EINVAL, "stage %u: gradient "
					  "buffer %zu: dtype %u", ls->stage,
					  i, b[i].dtype);
		if (b[i].mem != r->dev->ops->mem)
			return dpl__error(DPL_EINVAL, "stage %u: gradient "
					  "buffer %zu in memory kind %u, the "
					  "device has %u", ls->stage, i,
					  b[i].mem, r->dev->ops->mem);
		if (b[i].count > 0 && b[i].ptr == NULL)
			return dpl__error(DPL_EINVAL, "stage %u: gradient "
					  "buffer %zu is NULL", ls->stage, i);
		total += b[i].count;
	}
	ls->gcount = total;
	ls->gdtype = n > 0 ? b[0].dtype : DPL_DTYPE_F32;
	esize = dpl_dtype_size(ls->gdtype);
	if (r->nrep < 2 || total == 0)
		return 0;
	if (total > SIZE_MAX / esize)
		return dpl__error(DPL_ERANGE, "stage %u: gradient too large",
				  ls->stage);
	rc = r->dev->ops->alloc(r->dev->ctx, r->dev->ops->mem, total * esize,
				&ls->gvec);
	if (rc != 0)
		return rc;
	/* Without a native allreduce the ring runs: the device must sum the
	 * dtype. With one, the ring may still run (the transport refuses the
	 * dtype at the first reduction), so its chunk is allocated anyway. */
	if (!r->t->can_allreduce &&
	    (rc = r->dev->ops->sum(r->dev->ctx, ls->gvec, ls->gvec, 0,
				   ls->gdtype)) != 0)
		return dpl__error(rc, "stage %u: device %s cannot sum gradient "
				  "dtype %u (%s)", ls->stage,
				  r->dev->ops->name, ls->gdtype,
				  dpl_err_name(rc));
	q = total / r->nrep;
	rem = total % r->nrep;
	chunk = q + (rem ? 1 : 0);
	if (chunk > 0) {
		rc = r->dev->ops->alloc(r->dev->ctx, r->dev->ops->mem,
					chunk * esize, &ls->gscratch);
		if (rc != 0)
			return rc;
	}
	ls->group = malloc(r->nrep * sizeof *ls->group);
	if (ls->group == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	for (i = 0; i < r->nrep; i++)
		ls->group[i] = r->base[r->prank] + (uint32_t)i;
	ls->ring.t = r->t;
	ls->ring.dev = r->dev;
	ls->ring.n = r->nrep;
	ls->ring.pos = r->replica;
	ls->ring.prev = r->base[r->prank] +
			(r->replica + r->nrep - 1) % r->nrep;
	ls->ring.next = r->base[r->prank] + (r->replica + 1) % r->nrep;
	ls->ring.stage = ls->stage;
	ls->ring.dtype = ls->gdtype;
	ls->ring.esize = esize;
	ls->ring.vec = ls->gvec;
	ls->ring.count = total;
	ls->ring.scratch = ls->gscratch;
	ls->ring.bytes_sent = &r->st.bytes_sent;
	ls->ring.bytes_received = &r->st.bytes_received;
	return 0;
}

/* Carve the requests out of one allocation. */
int dpl__setup_requests(dpl_runner *r)
{
	size_t n = 0, i, k = 0;
	uint32_t j;
	unsigned char *mem;

	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];
		uint32_t per = 0;

		if (ls->prev_remote)
			per += 2 * ls->prev_r;
		if (ls->next_remote)
			per += 2 * ls->next_r;
		n += (size_t)per * ls->nslots + 3;
	}
	if (r->world > 1)
		n += 2 * (size_t)r->world;
	if (r->t == NULL)
		return 0;
	r->req_stride = dpl__req_stride(r->t);
	if (n > SIZE_MAX / r->req_stride)
		return dpl__error(DPL_ERANGE, "too many requests");
	r->rreqs = calloc(n, sizeof *r->rreqs);
	if (posix_memalign(&r->req_mem, _Alignof(max_align_t),
			   n * r->req_stride) != 0)
		r->req_mem = NULL;
	if (r->rreqs == NULL || r->req_mem == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory for %zu requests",
				  n);
	memset(r->req_mem, 0, n * r->req_stride);
	mem = r->req_mem;
	for (i = 0; i < n; i++)
		r->rreqs[i].req = mem + i * r->req_stride;
	for (i = 0; i < r->nls; i++) {
		struct dpl__lstage *ls = &r->ls[i];

		for (j = 0; j < ls->nslots; j++) {
			struct dpl__slot *sl = &ls->slots[j];

			if (ls->prev_remote) {
				sl->rf = &r->rreqs[k];
				k += ls->prev_r;
				sl->sb = &r->rreqs[k];
				k += ls->prev_r;
			}
			if (ls->next_remote) {
				sl->rb = &r->rreqs[k];
				k += ls->next_r;
				sl->sf = &r->rreqs[k];
				k += ls->next_r;
			}
		}
		ls->ring.sreq = r->rreqs[k++].req;
		ls->ring.rreq = r->rreqs[k++].req;
		ls->ar_req = r->rreqs[k++].req;
	}
	if (r->world > 1) {
		r->ctrl_r = &r->rreqs[k];
		k += r->world;
		r->ctrl_s = &r->rreqs[k];
	}
	return 0;
}

int dpl__setup_slots(dpl_runner *r, struct dpl__lstage *ls, uint64_t cap)
{
	uint64_t sz[4] = {0, 0, 0, 0}, total;
	unsigned char *p;
	uint32_t j;
	int rc;

	if ((rc = slot_sizes(ls, sz)) != 0)
		return rc;
	ls->slot_bytes = sz[0] + sz[1] + sz[2] + sz[3];
	if (!mul_ok(ls->slot_bytes, ls->nslots, &total) || total > SIZE_MAX)
		return dpl__error(DPL_ERANGE, "stage %u: buffers overflow",
				  ls->stage);
	if (cap != 0 && total > cap)
		return dpl__error(DPL_EINVAL,
				  "stage %u: its activation buffers need %llu "
				  "bytes (%u buffer sets of %llu bytes; the "
				  "schedule keeps up to %u micro-batch%s in "
				  "flight), above its cap of %llu bytes",
				  ls->stage, (unsigned long long)total,
				  ls->nslots,
				  (unsigned long long)ls->slot_bytes,
				  ls->bound, ls->bound == 1 ? "" : "es",
				  (unsigned long long)cap);
	ls->slots = calloc(ls->nslots ? ls->nslots : 1, sizeof *ls->slots);
	ls->fifo = calloc(ls->nslots ? ls->nslots : 1, sizeof *ls->fifo);
	ls->mb_slot = malloc(r->nmb * sizeof *ls->mb_slot);
	ls->live_free = calloc(ls->bound ? ls->bound : 1,
			       sizeof *ls->live_free);
	if (!ls->slots || !ls->fifo || !ls->mb_slot || !ls->live_free)
		return dpl__error(DPL_ENOMEM, "out of memory");
	if (total > 0) {
		rc = r->dev->ops->alloc(r->dev->ctx, r->dev->ops->mem,
					(size_t)total, &ls->mem);
		if (rc != 0)
			return rc;
		r->st.buffer_bytes += total;
	}
	p = ls->mem;
	for (j = 0; j < ls->nslots; j++) {
		struct dpl__slot *sl = &ls->slots[j];

		sl->mb = DPL__NONE;
		sl->live_idx = DPL__NONE;
		if (p != NULL) {
			sl->in_act = sz[0] ? p : NULL;
			sl->out_act = sz[1] ? p + sz[0] : NULL;
			sl->in_grad = sz[2] ? p + sz[0] + sz[1] : NULL;
			sl->out_grad = sz[3] ? p + sz[0] + sz[1] + sz[2] : NULL;
			p += ls->slot_bytes;
		}
	}
	return 0;
}

/* Post the receives of failure notices from every other rank. */
int dpl__setup_ctrl(dpl_runner *r)
{
	uint64_t tag = dpl__tag(DPL__TAG_CTRL, 0, 0, 0);
	uint32_t q;
	int rc;

	if (r->world < 2)
		return 0;
	r->ctrl_in = calloc(r->world, DPL__CTRL_BYTES);
	r->ctrl_got = calloc(r->world, sizeof *r->ctrl_got);
	if (r->ctrl_in == NULL || r->ctrl_got == NULL)
		return dpl__error(DPL_ENOMEM, "out of memory");
	for (q = 0; q < r->world; q++) {
		if (q == r->rank)
			continue;
		r->ctrl_r[q].peer = q;
		r->ctrl_s[q].peer = q;
		rc = dpl_transport_irecv(r->t, r->ctrl_r[q].req, q, tag,
			      r->ctrl_in + (size_t)q * DPL__CTRL_BYTES,
			      DPL__CTRL_BYTES, DPL_MEM_HOST);
		if (rc == DPL_EPEER)
			continue; /* gone already: nothing to hear from it */
		if (rc != 0)
			return dpl__error(rc, "rank %u: posting the failure "
					  "notice receive from rank %u: %s",
					  r->rank, q, dpl_strerror(rc));
		r->ctrl_r[q].live = true;
	}
	return 0;
}

void dpl__runner_reset_stage(struct dpl__lstage *ls, uint32_t nmb)
{
	uint32_t j;

	for (j = 0; j < nmb; j++)
		ls->mb_slot[j] = DPL__NONE;
	for (j = 0; j < ls->nslots; j++) {
		ls->fifo[j] = j;
		ls->slots[j].mb = DPL__NONE;
		ls->slots[j].live_idx = DPL__NONE;
	}
	ls->fifo_head = 0;
	ls->fifo_len = ls->nslots;
	for (j = 0; j < ls->bound; j++)
		ls->live_free[j] = ls->bound - 1 - j;
	ls->live_top = ls->bound;
	ls->live = 0;
	ls->in_use = 0;
}
