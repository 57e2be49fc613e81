/*
 * plugin_inproc.c - the in-process transport as a loadable module of its
 * own name (libdpl_transport_inproc_plugin.so), written as a backend
 * author writes the shared build of a module: DPL_TRANSPORT_PLUGIN
 * (dpl/backend.h) defines the entry point dpl_transport_load() calls,
 * because the build defines DPL_BUILDING_PLUGIN for this module.
 */
#include <dpl/backend.h>
#include <dpl/transport_inproc.h>

DPL_TRANSPORT_PLUGIN(dpl_transport_inproc);
