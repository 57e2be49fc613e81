/* runner_transport.c - how the runner waits on a transport request. */
#include <stdlib.h>

#include "runner_internal.h"

bool dpl__transport_collect(dpl_transport *t, void *req,
			    uint64_t deadline_ns)
{
	while (dpl__tp_test(t, req) == DPL_EAGAIN)
		if (dpl__tp_progress(t) < 0 || dpl_clock_ns() > deadline_ns)
			return false;
	return true;
}

size_t dpl__req_stride(const dpl_transport *t)
{
	size_t a = _Alignof(max_align_t);

	return (t->ops->req_size + a - 1) / a * a;
}
