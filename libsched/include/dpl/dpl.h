/*
 * dpl/dpl.h - the one header users include. Backend authors include
 * <dpl/transport.h> or <dpl/device.h> instead.
 */
#ifndef DPL_DPL_H
#define DPL_DPL_H

#include <dpl/common.h>
#include <dpl/schedule.h>
#include <dpl/sim.h>
#include <dpl/plan.h>
#include <dpl/runner.h>
#include <dpl/bootstrap.h>
#include <dpl/transport_load.h>

#endif /* DPL_DPL_H */
