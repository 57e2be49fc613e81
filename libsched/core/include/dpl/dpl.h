/*
 * dpl/dpl.h - the one header users of the core include (library dpl::dpl):
 * schedules, the runner, transports and devices as handles, run-time
 * loading of transport modules. Backend authors include <dpl/transport.h>,
 * <dpl/device.h> and <dpl/backend.h> instead.
 *
 * The satellites have headers of their own, each with its library:
 * <dpl/sim.h> (dpl::sim), <dpl/plan.h> (dpl::plan), <dpl/bootstrap.h>
 * (dpl::bootstrap), <dpl/bootstrap_mpi.h> (dpl::mpi), <dpl/json.h>
 * (dpl::json); the modules one each (<dpl/transport_shm.h>, ...).
 */
#ifndef DPL_DPL_H
#define DPL_DPL_H

#include <dpl/common.h>
#include <dpl/schedule.h>
#include <dpl/runner.h>
#include <dpl/transport_load.h>

#endif /* DPL_DPL_H */
