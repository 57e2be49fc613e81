"""One rank of a benchmark run, for either library.

Run by the launcher (benchmarks/torch_pipelining.py), never by hand:

    worker.py --side torch|dpl --case NAME --rundir DIR --iters N --warmup W

The rank and world size come from the environment (RANK/WORLD_SIZE from
torchrun or the launcher's own spawn, DPL_RANK/DPL_WORLD_SIZE from
python -m dpl.run). The rank:

1. sets one intra-op thread, pins itself to one CPU with --bind core or
   fold (the same rule on both sides), builds its stage module, creates the stage
   and the schedule (PyTorch: after dist.init_process_group("gloo") on
   127.0.0.1; dpl: dpl.torch over the transport dpl.run gave it);
2. writes DIR/ready.R holding time.time() at that moment: the launcher
   takes "ready to step" as the largest of these minus its launch time;
3. meets the other ranks at a file barrier (outside both libraries), runs
   the first step (timed alone: lazy shape inference and buffer set-up
   happen there), `warmup` more steps, a second barrier, then `iters`
   timed steps (schedule step, SGD step, zero_grad; the schedule step
   alone for the callback case "tiny"); then, but for "tiny", one
   forward-only pass (`eval()` under `torch.no_grad()`), a third barrier
   and `iters` timed passes;
4. writes DIR/result.R (JSON): seconds of the timed steps, of the timed
   passes (null for "tiny"), of the first
   step, the ready stamp, time.time() at the first step's end,
   ru_maxrss (KiB), the CPU seconds of the timed steps, its voluntary
   and involuntary context switches (getrusage), and the stamps of
   the script's first line and of the end of its imports (torch, models).

Every wait is bounded by --timeout; a rank that fails exits non-zero and
the launcher kills the others.
"""
from __future__ import annotations

import time

T_MAIN = time.time()  # before the imports: torch's import is part of start-up

import argparse
import json
import os
import resource
import sys
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import models  # noqa: E402

T_IMPORTED = time.time()


def env_rank() -> tuple[int, int]:
    """(rank, world size) from DPL_* or torchrun's variables."""
    for r, w in (("DPL_RANK", "DPL_WORLD_SIZE"), ("RANK", "WORLD_SIZE")):
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    raise RuntimeError("no rank in the environment (DPL_RANK/DPL_WORLD_SIZE "
                       "or RANK/WORLD_SIZE)")


def file_barrier(rundir: str, name: str, rank: int, world: int,
                 timeout: float,
                 idle: Callable[[], object] = lambda: time.sleep(0.0005)) -> None:
    """Wait until every rank has reached barrier `name`, calling `idle`
    between looks (by default a 0.5 ms sleep); bounded by `timeout`."""
    with open(os.path.join(rundir, f"{name}.{rank}"), "w") as f:
        f.write(repr(time.time()))
    deadline = time.monotonic() + timeout
    paths = [os.path.join(rundir, f"{name}.{r}") for r in range(world)]
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name!r}: not every rank of {world} "
                               f"arrived within {timeout} s")
        idle()


def pin(rank: int, world: int, how: str) -> None:
    """Pin this process to one CPU by python -m dpl.run --bind's rule
    (the same placement on every side): "core" = rank mod CPUs, "fold" =
    ranks r and world-1-r together; "none" leaves it unpinned."""
    if how == "none":
        return
    cpus = sorted(os.sched_getaffinity(0))
    k = rank if how == "core" else min(rank, world - 1 - rank)
    os.sched_setaffinity(0, {cpus[k % len(cpus)]})


STAMPS: dict[str, float] = {}


def stamp(name: str) -> None:
    """Note time.time() under `name` (reported in the result's stamps)."""
    STAMPS[name] = time.time()


def build_torch(case: models.Case, rank: int, world: int, timeout: float):
    """A torch.distributed.pipelining stage and schedule for this rank."""
    import datetime

    import torch.distributed as dist
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B,
                                              ScheduleGPipe)

    stamp("library_imported")
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    stamp("group_joined")
    mod = models.stage_module(case, rank, world)
    stamp("module_built")
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))
    stamp("stage_built")
    cls = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}[case.schedule]
    return mod, cls(stage, case.microbatches, loss_fn=models.loss_fn(case))


def build_dpl(case: models.Case, rank: int, world: int, timeout: float):
    """A dpl.torch stage and schedule for this rank."""
    from dpl.torch import PipelineStage, Schedule1F1B, ScheduleGPipe

    stamp("library_imported")
    mod = models.stage_module(case, rank, world)
    stamp("module_built")
    stage = PipelineStage(mod, rank, world, device="cpu")
    stamp("stage_built")
    cls = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}[case.schedule]
    return mod, cls(stage, case.microbatches, loss_fn=models.loss_fn(case),
                    timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    """Run one rank; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=("torch", "dpl"), required=True)
    p.add_argument("--case", required=True)
    p.add_argument("--rundir", required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--tiny-microbatches", type=int, default=32)
    p.add_argument("--bind", choices=("none", "core", "fold"), default="none",
                   help="pin this rank to one CPU: core = rank mod CPUs, fold = ranks r "
                        "and N-1-r together (python -m dpl.run --bind's rule)")
    a = p.parse_args(argv)

    torch.set_num_threads(1)
    rank, world = env_rank()
    pin(rank, world, a.bind)
    if a.case == "tiny":
        case = models.tiny_case(world, a.tiny_microbatches, a.iters)
    else:
        case = models.CASES[a.case]
    build = build_torch if a.side == "torch" else build_dpl
    mod, sched = build(case, rank, world, a.timeout)
    stamp("schedule_built")
    opt = torch.optim.SGD(mod.parameters(), lr=1e-3)
    stamp("optimizer_built")
    x, y = models.batch_data(case)
    ready = time.time()
    with open(os.path.join(a.rundir, f"ready.{rank}"), "w") as f:
        f.write(repr(ready))

    def call(fn: Callable) -> None:
        """sched.step or sched.eval with this rank's part of the batch."""
        if rank == 0:
            fn(x)
        elif rank == world - 1:
            fn(target=y, losses=[])
        else:
            fn()

    def step() -> None:
        call(sched.step)
        if case.kind != "tiny":  # the callback case times the schedule alone
            opt.step()
            opt.zero_grad(set_to_none=False)

    file_barrier(a.rundir, "start", rank, world, a.timeout)
    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    first_end = time.time()
    for _ in range(a.warmup):
        step()
    file_barrier(a.rundir, "timed", rank, world, a.timeout)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    for _ in range(a.iters):
        step()
    seconds = time.perf_counter() - t
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime

    def evaluate() -> None:
        with torch.no_grad():
            call(sched.eval)

    # forward-only passes after the steps (one untimed): the steps' figures
    # above never include a switch between training and eval
    eval_seconds = None
    if case.kind != "tiny":
        evaluate()
        file_barrier(a.rundir, "eval", rank, world, a.timeout)
        t = time.perf_counter()
        for _ in range(a.iters):
            evaluate()
        eval_seconds = time.perf_counter() - t
    out = {"rank": rank, "seconds": seconds, "eval_seconds": eval_seconds,
           "first_step_s": first,
           "ready": ready, "first_end": first_end, "maxrss_kib": ru1.ru_maxrss,
           "iters": a.iters,
           "cpu_s": cpu, "main": T_MAIN, "imported": T_IMPORTED,
           "switches": [ru1.ru_nvcsw - ru0.ru_nvcsw, ru1.ru_nivcsw - ru0.ru_nivcsw],
           "stamps": STAMPS}
    with open(os.path.join(a.rundir, f"result.{rank}"), "w") as f:
        json.dump(out, f)
    # Nobody leaves before everyone has finished: a rank that exits tears
    # down its transport while a peer may still be draining a send.
    file_barrier(a.rundir, "done", rank, world, a.timeout)
    if a.side == "torch":
        import torch.distributed as dist
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
