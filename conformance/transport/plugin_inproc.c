/*
 * plugin_inproc.c - the in-process transport as a loadable module: the
 * one function a shared transport library exports so that
 * dpl_transport_load() (and `dpl-conformance --transport PATH.so`) can
 * find its table. A backend author adds the same three lines to the
 * shared build of their own module.
 */
#include <dpl/transport_load.h>

extern const struct dpl_transport_ops dpl_transport_inproc;

DPL_EXTERN const struct dpl_transport_ops *dpl_transport_plugin_v1(void);

const struct dpl_transport_ops *dpl_transport_plugin_v1(void)
{
	return &dpl_transport_inproc;
}
