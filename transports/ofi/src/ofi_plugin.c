/*
 * ofi_plugin.c - the entry point of the shared build for
 * dpl_transport_load() (dpl/transport_load.h). Not part of the static
 * library, where every module would define it.
 */
#include <dpl/transport_load.h>

#include "ofi_internal.h"

DPL_EXTERN const struct dpl_transport_ops *dpl_transport_plugin_v1(void);

const struct dpl_transport_ops *dpl_transport_plugin_v1(void)
{
	return &dpl_transport_ofi;
}
