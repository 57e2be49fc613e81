/*
 * linked.c - the table a per-module conformance binary is linked with.
 * Built once per module with DPL_CONF_TABLE naming the module's table
 * (dpl_transport_<name>); built without it for dpl-conformance, which
 * loads its module at run time (--transport PATH.so).
 */
#include "harness.h"

#ifdef DPL_CONF_TABLE
extern const struct dpl_transport_ops DPL_CONF_TABLE;

const struct dpl_transport_ops *conf_linked_table(void)
{
	return &DPL_CONF_TABLE;
}
#else
const struct dpl_transport_ops *conf_linked_table(void)
{
	return NULL;
}
#endif
