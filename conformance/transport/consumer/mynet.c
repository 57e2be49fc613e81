/*
 * mynet.c - the module of an out-of-tree transport, reduced to what the
 * installed battery needs from it: the entry point dpl_transport_load()
 * calls. It hands out dpl's in-process table, so that the test checks
 * the install and the CMake function, not a new transport.
 */
#include <dpl/transport_inproc.h>
#include <dpl/transport_load.h>

DPL_EXTERN const struct dpl_transport_ops *dpl_transport_plugin_v1(void);

const struct dpl_transport_ops *dpl_transport_plugin_v1(void)
{
	return &dpl_transport_inproc;
}
