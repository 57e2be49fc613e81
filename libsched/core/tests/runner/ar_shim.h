/* ar_shim.h - the in-process transport with a native allreduce (tests). */
#ifndef AR_SHIM_H
#define AR_SHIM_H

#include <stdatomic.h>

#include <dpl/transport.h>

/* The table; built on first call (call it before starting threads). */
const struct dpl_transport_ops *dpl_test_ar_shim(void);

/* iallreduce calls so far, all ranks. */
extern atomic_uint dpl_test_ar_calls;

#endif
