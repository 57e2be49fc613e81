"""One stage's torch work alone, run beside the other stages' (the
ceiling with the cores shared). Run by the launcher, never by hand:

    stage_work.py --case NAME --stage K --stages N --rundir DIR --iters I
                  [--bind none|core|fold]

Every process builds its stage (models.stage_work), runs 2 untimed steps,
meets the others at a file barrier, times `iters` steps, writes
DIR/work.K (JSON: wall and CPU seconds per step; the launcher reads it
once every process has exited), then keeps stepping untimed while it
waits at a second barrier, so that each one's CPU time is taken with
all of them sharing the CPUs, as a pipeline's ranks do.
Every wait is bounded by --timeout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import models  # noqa: E402
from worker import file_barrier, pin  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run one stage's work; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", required=True)
    p.add_argument("--stage", type=int, required=True)
    p.add_argument("--stages", type=int, required=True)
    p.add_argument("--rundir", required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--bind", choices=("none", "core", "fold"), default="none",
                   help="pin as worker.py --bind does, the stage as the rank")
    a = p.parse_args(argv)
    pin(a.stage, a.stages, a.bind)
    one = models.stage_work(models.CASES[a.case], a.stage, a.stages)
    for _ in range(2):
        one()
    file_barrier(a.rundir, "work-start", a.stage, a.stages, a.timeout)
    t, c = time.perf_counter(), time.process_time()
    for _ in range(a.iters):
        one()
    out = {"wall_s": (time.perf_counter() - t) / a.iters,
           "cpu_s": (time.process_time() - c) / a.iters}
    with open(os.path.join(a.rundir, f"work.{a.stage}"), "w") as f:
        json.dump(out, f)
    # Keep the CPUs as busy as the others see them until all are timed.
    file_barrier(a.rundir, "work-done", a.stage, a.stages, a.timeout, one)
    return 0


if __name__ == "__main__":
    sys.exit(main())
