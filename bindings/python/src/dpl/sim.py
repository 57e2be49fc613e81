"""dpl's discrete-event simulator, from Python (``dpl/sim.h``).

:func:`simulate` replays a :class:`~dpl.schedule.Schedule` rank by rank in
list order (an action starts when its rank is free and its inputs have
arrived; each directed rank pair is one FIFO link) and returns a
:class:`SimResult` with the figures ``dpl simulate --json`` prints.
:func:`timeline` gives the ASCII timeline of ``dpl schedule`` and
:func:`trace` writes the Chrome/Perfetto trace of ``dpl simulate --trace``.
The same methods exist on Schedule (``s.simulate()``, ...).

Parameters (all keywords, every per-stage one an int for all stages or a
sequence with one value per stage; times in the costs' unit):

* ``costs``: a StageCost / ``(f, b[, i, w])`` for every stage, or one per
  stage; None: the costs given to :func:`dpl.schedule`, else F=1, B=2.
* ``latency``, ``bandwidth``: per-transfer latency and link bandwidth in
  bytes per time unit (0 = infinite).
* ``activation_bytes``, ``grad_bytes``: bytes stage s sends forward and
  backward per micro-batch (grad_bytes None: the previous stage's
  activation size).
* ``replicas``, ``param_bytes``, ``ar_bandwidth``, ``ar_latency``: the
  ring all-reduce of each stage's gradients over its replicas.
* ``step_cost``: duration of each STEP.

Every call runs the simulation afresh (O(actions)); none blocks; all are
thread-safe on a Schedule nobody closes meanwhile.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence
from contextlib import contextmanager

from ._files import replace_atomic
from . import _schedule_capi as capi
from .errors import check
from ._schedule_capi import int_seq, to_int as _int, to_num as _num
from ._schedule_capi import u64_array as _u64_array
from .schedule import Action, CostsArg, Schedule, _costs, _cost_array, _ESCHED, _EDEADLOCK

__all__ = ["SimResult", "SimStage", "SimEvent", "simulate", "timeline", "trace"]


@dataclass(frozen=True)
class SimStage:
    """Per-stage results (``struct dpl_sim_stage_stats``): the rank it runs
    on, its compute time, the end of its last action, its gradient
    reduction interval, and its peak in-flight micro-batches and peak
    activation bytes (peak_inflight * activation_bytes)."""

    stage: int
    rank: int
    busy: float
    peak_inflight: int
    peak_activation_bytes: int
    finish: float
    reduce_start: float
    reduce_end: float


@dataclass(frozen=True)
class SimEvent:
    """One interval of the replay (``struct dpl_sim_event``): ``kind`` is
    "compute", "transfer" (from ``rank`` to ``peer``; ``action`` is the
    producer), "reduce" or "step"."""

    kind: str
    rank: int
    peer: int
    action: Action
    start: float
    end: float


@dataclass(frozen=True)
class SimResult:
    """What a simulation reports; the fields of ``dpl simulate --json``.

    ``makespan``: end of the last action; ``bubble_fraction``:
    1 - total_busy / (ranks * makespan); ``rank_busy``: compute time per
    rank; ``stages``: one :class:`SimStage` per stage; ``events``: the
    intervals (only with ``simulate(..., events=True)``, else empty).
    """

    policy: str
    ranks: int
    microbatches: int
    makespan: float
    bubble_fraction: float
    total_busy: float
    rank_busy: tuple[float, ...]
    stages: tuple[SimStage, ...]
    events: tuple[SimEvent, ...] = ()

    @property
    def rank_bubble(self) -> tuple[float, ...]:
        """Idle fraction of each rank: 1 - rank_busy[r] / makespan."""
        if self.makespan <= 0:
            return tuple(0.0 for _ in self.rank_busy)
        return tuple(1.0 - b / self.makespan for b in self.rank_busy)

    @property
    def peak_inflight(self) -> tuple[int, ...]:
        """Peak in-flight micro-batches of each stage."""
        return tuple(s.peak_inflight for s in self.stages)

    @property
    def peak_activation_bytes(self) -> tuple[int, ...]:
        """Peak activation bytes of each stage."""
        return tuple(s.peak_activation_bytes for s in self.stages)

    def to_dict(self) -> dict:
        """The JSON object ``dpl simulate --json`` prints (no events)."""
        return {
            "policy": self.policy, "ranks": self.ranks, "microbatches": self.microbatches,
            "makespan": self.makespan, "bubble_fraction": self.bubble_fraction,
            "total_busy": self.total_busy, "rank_busy": list(self.rank_busy),
            "stages": [{"stage": s.stage, "rank": s.rank, "busy": s.busy,
                        "peak_inflight": s.peak_inflight,
                        "peak_activation_bytes": s.peak_activation_bytes,
                        "finish": s.finish, "reduce_start": s.reduce_start,
                        "reduce_end": s.reduce_end} for s in self.stages],
        }


def _per_stage_u32(name: str, v: Any, n: int, lo: int) -> ctypes.Array:
    vals = [v] * n if isinstance(v, int) else int_seq(name, v, n)
    return (ctypes.c_uint32 * n)(*(_int(f"{name}[{k}]", x, lo) for k, x in enumerate(vals)))


def _params(s: Schedule, costs: CostsArg, latency: float, bandwidth: float,
            activation_bytes: Any, grad_bytes: Any, replicas: Any, param_bytes: Any,
            ar_bandwidth: float, ar_latency: float, step_cost: float
            ) -> tuple[capi.CSimParams, list]:
    """The C parameters and the arrays they point into (keep them alive)."""
    n = s.stages
    p = capi.CSimParams()
    keep: list = []
    c = _costs(costs, n) if costs is not None else s.costs
    if isinstance(c, tuple):
        arr = _cost_array(c, n)
        keep.append(arr)
        p.costs = ctypes.cast(arr, ctypes.POINTER(capi.CStageCost))
    elif c is not None:
        p.uniform = c._to_c()
    p.link_latency = _num("latency", latency)
    p.link_bandwidth = _num("bandwidth", bandwidth)
    p.ar_bandwidth = _num("ar_bandwidth", ar_bandwidth)
    p.ar_latency = _num("ar_latency", ar_latency)
    p.step_cost = _num("step_cost", step_cost)
    u64p = ctypes.POINTER(ctypes.c_uint64)
    for field, name, v in (("activation_bytes", "activation_bytes", activation_bytes),
                           ("grad_bytes", "grad_bytes", grad_bytes),
                           ("param_bytes", "param_bytes", param_bytes)):
        if v is not None:
            arr = _u64_array(name, v, n)
            keep.append(arr)
            setattr(p, field, ctypes.cast(arr, u64p))
    if replicas is not None:
        arr = _per_stage_u32("replicas", replicas, n, 1)
        keep.append(arr)
        p.replicas = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint32))
    return p, keep


@contextmanager
def _run(s: Schedule, costs: CostsArg = None, latency: float = 0.0, bandwidth: float = 0.0,
         activation_bytes: Any = None, grad_bytes: Any = None, replicas: Any = None,
         param_bytes: Any = None, ar_bandwidth: float = 0.0, ar_latency: float = 0.0,
         step_cost: float = 0.0) -> Iterator[ctypes.c_void_p]:
    """A ``dpl_sim *`` for ``s``, destroyed on leaving the block."""
    p, keep = _params(s, costs, latency, bandwidth, activation_bytes, grad_bytes,
                      replicas, param_bytes, ar_bandwidth, ar_latency, step_cost)
    lib = capi.sim()
    out = ctypes.c_void_p()
    rc = lib.dpl_sim_run(s._ptr, ctypes.byref(p), ctypes.byref(out))
    if rc in (_ESCHED, _EDEADLOCK):
        s.validate()  # raises ScheduleError with the issue
    check(rc)
    try:
        yield out
    finally:
        lib.dpl_sim_destroy(out)
        del keep


def simulate(s: Schedule, *, costs: CostsArg = None, latency: float = 0.0,
             bandwidth: float = 0.0, activation_bytes: int | Sequence[int] | None = None,
             grad_bytes: int | Sequence[int] | None = None,
             replicas: int | Sequence[int] | None = None,
             param_bytes: int | Sequence[int] | None = None, ar_bandwidth: float = 0.0,
             ar_latency: float = 0.0, step_cost: float = 0.0,
             events: bool = False) -> SimResult:
    """Simulate ``s`` (compute-only or lowered; the same result) and return
    its figures; ``events=True`` also copies every interval. Parameters as
    in the module docstring. Raises ScheduleError for invalid or
    deadlocking lists, TypeError / InvalidArgument naming a bad parameter.
    """
    with _run(s, costs, latency, bandwidth, activation_bytes, grad_bytes, replicas,
              param_bytes, ar_bandwidth, ar_latency, step_cost) as sim:
        lib = capi.sim()
        sm = capi.CSimSummary()
        lib.dpl_sim_summary(sim, ctypes.byref(sm))
        stages = []
        for st in range(sm.stages):
            x = capi.CSimStageStats()
            check(lib.dpl_sim_stage(sim, st, ctypes.byref(x)))
            stages.append(SimStage(st, x.rank, x.busy, x.peak_inflight,
                                   x.peak_activation_bytes, x.finish, x.reduce_start,
                                   x.reduce_end))
        evs: list[SimEvent] = []
        if events:
            n = ctypes.c_size_t()
            e = lib.dpl_sim_events(sim, ctypes.byref(n))
            for k in range(n.value):
                v = e[k]
                evs.append(SimEvent(capi.SIM_EVENT_KINDS[v.kind], v.rank, v.peer,
                                    Action._from_c(v.action), v.start, v.end))
        return SimResult(
            policy=s.policy, ranks=sm.ranks, microbatches=s.microbatches,
            makespan=sm.makespan, bubble_fraction=sm.bubble_fraction,
            total_busy=sm.total_busy,
            rank_busy=tuple(lib.dpl_sim_rank_busy(sim, r) for r in range(sm.ranks)),
            stages=tuple(stages), events=tuple(evs))


def timeline(s: Schedule, *, unit: float = 0.0, width: int = 0, **kw: Any) -> str:
    """The ASCII timeline (``dpl_sim_write_ascii``): one row per rank, one
    column per ``unit`` of time (0: the smallest compute cost), rows
    wrapped every ``width`` columns (0: none). With the defaults it is what
    ``dpl schedule --format text`` prints. ``kw``: simulate's parameters
    (not ``events``). Raises as :func:`simulate`, and InvalidArgument for a
    unit giving too many columns."""
    if isinstance(unit, bool) or not isinstance(unit, (int, float)):
        raise TypeError(f"unit must be a number (got {unit!r})")
    w = _int("width", width)
    with _run(s, **kw) as sim:
        fn = capi.sim().dpl_sim_write_ascii
        return capi.write_to_string(lambda f: fn(sim, f, float(unit), w))


def trace(s: Schedule, path: str | os.PathLike, *, us_per_unit: float = 0.0,
          **kw: Any) -> None:
    """Write the Chrome trace-event JSON of the replay to ``path`` (opens
    in Perfetto; ``dpl_sim_write_trace``): one time unit = ``us_per_unit``
    microseconds (<= 0: 1000). The file is written whole or not at all:
    a temporary file next to ``path`` is renamed over it on success and
    removed on any error. ``kw``: simulate's parameters. Raises as
    :func:`simulate`, OSError for file-system errors."""
    if isinstance(us_per_unit, bool) or not isinstance(us_per_unit, (int, float)):
        raise TypeError(f"us_per_unit must be a number (got {us_per_unit!r})")
    with _run(s, **kw) as sim:
        fn = capi.sim().dpl_sim_write_trace  # write_to_fd closes fd
        replace_atomic(path, lambda fd: capi.write_to_fd(
            fd, lambda f: fn(sim, f, float(us_per_unit))))


