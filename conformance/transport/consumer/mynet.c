/*
 * mynet.c - the module of an out-of-tree transport, reduced to what the
 * installed battery needs from it: the entry point dpl_transport_load()
 * calls, defined by DPL_TRANSPORT_PLUGIN (the build defines
 * DPL_BUILDING_PLUGIN). It hands out dpl's in-process table, so that the
 * test checks the install and the CMake function, not a new transport.
 */
#include <dpl/backend.h>
#include <dpl/transport_inproc.h>

DPL_TRANSPORT_PLUGIN(dpl_transport_inproc);
