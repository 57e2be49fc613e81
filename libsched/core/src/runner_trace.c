/* runner_trace.c - a runner's statistics and its Chrome trace. */
#include <string.h>

#include "runner_internal.h"

void dpl_runner_stats(const dpl_runner *r, struct dpl_runner_stats *out)
{
	*out = r->st;
}

int dpl_runner_stage_stats(const dpl_runner *r, uint32_t stage,
			   struct dpl_runner_stage_stats *out)
{
	const struct dpl__lstage *ls;

	if (stage >= r->nstages || r->lidx[stage] == DPL__NONE)
		return dpl__error(DPL_EINVAL, "rank %u does not run stage %u",
				  r->rank, stage);
	ls = &r->ls[r->lidx[stage]];
	memset(out, 0, sizeof *out);
	out->stage = stage;
	out->slots = ls->nslots;
	out->peak_inflight = ls->peak_live;
	out->slot_bytes = ls->slot_bytes;
	out->peak_buffer_bytes = (uint64_t)ls->peak_in_use * ls->slot_bytes;
	return 0;
}

static int write_event(FILE *f, const dpl_runner *r,
		       const struct dpl_runner_event *e, uint64_t origin,
		       bool *first)
{
	char t[DPL_ACTION_TEXT_MAX];
	const char *kind = dpl_action_kind_name(e->action.kind);

	if (dpl_action_format(e->action, t, sizeof t) < 0)
		return 0;
	if (fprintf(f, "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
		    "\"pid\":0,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
		    "\"args\":{\"stage\":%u,\"microbatch\":%d,"
		    "\"iteration\":%llu}}",
		    *first ? "" : ",", t, kind ? kind : "?", r->rank,
		    (double)(e->start_ns - origin) / 1000.0,
		    (double)(e->end_ns - e->start_ns) / 1000.0, e->action.stage,
		    e->action.microbatch == DPL_NO_MICROBATCH
			    ? -1
			    : (int)e->action.microbatch,
		    (unsigned long long)(r->iter ? r->iter - 1 : 0)) < 0)
		return DPL_EIO;
	*first = false;
	return 0;
}

const struct dpl_runner_event *dpl_runner_events(const dpl_runner *r,
					       size_t *n)
{
	*n = r != NULL ? r->trace_len : 0;
	return r != NULL ? r->trace : NULL;
}

int dpl_runner_write_traces(const dpl_runner *const *r, size_t n, FILE *f)
{
	uint64_t origin = UINT64_MAX;
	bool first = true;
	size_t i, k;
	int rc;

	if (n == 0 || r == NULL)
		return dpl__error(DPL_EINVAL, "no runners to trace");
	for (i = 0; i < n; i++) {
		if (r[i] == NULL || r[i]->trace_cap == 0)
			return dpl__error(DPL_EINVAL, "runner %zu has no trace "
					  "(trace_capacity is 0)", i);
		for (k = 0; k < r[i]->trace_len; k++)
			if (r[i]->trace[k].start_ns < origin)
				origin = r[i]->trace[k].start_ns;
	}
	if (fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[") < 0)
		return dpl__error(DPL_EIO, "writing the trace failed");
	for (i = 0; i < n; i++) {
		if (fprintf(f, "%s\n{\"name\":\"thread_name\",\"ph\":\"M\","
			    "\"pid\":0,\"tid\":%u,\"args\":{\"name\":"
			    "\"rank %u (stage rank %u, replica %u)\"}}",
			    first ? "" : ",", r[i]->rank, r[i]->rank,
			    r[i]->prank, r[i]->replica) < 0)
			return dpl__error(DPL_EIO, "writing the trace failed");
		first = false;
		for (k = 0; k < r[i]->trace_len; k++)
			if ((rc = write_event(f, r[i], &r[i]->trace[k], origin,
					      &first)) != 0)
				return dpl__error(rc, "writing the trace "
						  "failed");
	}
	if (fprintf(f, "\n]}\n") < 0)
		return dpl__error(DPL_EIO, "writing the trace failed");
	return 0;
}
