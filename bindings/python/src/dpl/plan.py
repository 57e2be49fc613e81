"""DAPPLE's planner: layer profiles, clusters and hybrid data/pipeline plans.

A :class:`Profile` holds a model's layers as measured at a profile batch
size (``pbs``); a :class:`Cluster` describes the machines; :func:`plan`
runs DAPPLE's search (libdpl-plan, the same code as ``dpl plan``) and
returns a :class:`Plan`: the stages (layer ranges), the replicas of each
stage, the micro-batching, the schedule policy and the predicted iteration
time. ``Plan.save`` writes the JSON file that ``dpl train --plan`` and
``dpl simulate --plan`` read.

Units follow the profiles: times in milliseconds, sizes in bytes,
bandwidths in bytes per second and latencies in seconds; only
``Plan.predicted_time`` is in seconds. Profiles, clusters and plans are
immutable once built and may be shared between threads; the planner's
calls release the GIL.
"""

from __future__ import annotations

import ctypes
import json as _json
import math
import os
from dataclasses import dataclass
from typing import Sequence

from . import _plan_capi as C
from . import errors as _errors
from ._plan_inputs import (HOST_BANDWIDTH, HOST_LATENCY, Cluster, Layer,  # noqa: F401
                           PathLike, Profile, _fail, _int, _num, _read)
from ._files import write_atomic
from .errors import Error, check

__all__ = ["Cluster", "Layer", "Plan", "PlanStage", "Profile", "plan",
           "HOST_BANDWIDTH", "HOST_LATENCY"]

# --------------------------------------------------------------------------
# Plans


@dataclass(frozen=True)
class PlanStage:
    """One stage of a plan: layers [first_layer, end_layer) on ``devices``
    (replica k is the k-th lowest), with its costs per micro-batch (ms,
    slowest replica), gradient allreduce per iteration (ms), micro-batches
    alive at peak, peak memory per device (bytes) and the activation bytes
    one micro-batch keeps alive on one device (``activation_bytes``: the
    ``act_bytes`` of a byte-capped ``bounded`` or ``zb-auto`` schedule)."""
    first_layer: int
    end_layer: int
    first_name: str | None
    last_name: str | None
    devices: tuple[int, ...]
    forward_ms: float
    backward_ms: float
    send_ms: float
    allreduce_ms: float
    inflight: int
    memory_bytes: int
    parameter_bytes: float
    activation_bytes: int = 0

    @property
    def replicas(self) -> int:
        """Number of devices."""
        return len(self.devices)


def _devices(mask: int) -> tuple[int, ...]:
    return tuple(d for d in range(C.MAX_DEVICES) if mask >> d & 1)


def _ranges(ds: Sequence[int]) -> str:
    out, i = [], 0
    while i < len(ds):
        j = i
        while j + 1 < len(ds) and ds[j + 1] == ds[j] + 1:
            j += 1
        out.append(f"{ds[i]}" if i == j else f"{ds[i]}-{ds[j]}")
        i = j + 1
    return ",".join(out)


class Plan:
    """A hybrid data/pipeline-parallel plan (struct dpl_plan).

    From :func:`plan` or :meth:`load`. ``stages`` are (first_layer,
    end_layer) pairs, end exclusive, in the profile's layer order (slice
    the model's layers with them); ``replicas`` the device count per stage;
    the global batch runs as ``microbatches`` micro-batches of
    ``microbatch_size`` samples under ``policy`` ("gpipe", "1f1b" or
    "1f1b-comm"); ``predicted_time`` is the simulated iteration time in
    seconds. Immutable and thread-safe.
    """

    def __init__(self, cplan: C.CPlan, *, report: C.CPlanReport | None = None,
                 profile: Profile | None = None, cluster: Cluster | None = None,
                 params: C.CPlanParams | None = None, text: str | None = None,
                 info: dict | None = None):
        """Internal: use :func:`plan` or :meth:`load`."""
        self._p = cplan
        self._report = report
        self._profile = profile
        self._params = params
        self._text = text
        self._info = info or {}
        self.cluster: Cluster | None = cluster
        """The cluster planned for (None for a plan file without one)."""
        names = [L.name for L in profile._layers] if profile is not None else None
        js = self._info.get("stages") or []
        st = []
        for s in range(cplan.stages):
            c = cplan.stage[s]
            if names is not None:
                fn, ln = names[c.first_layer], names[c.last_layer]
            else:
                e = js[s] if s < len(js) else {}
                fn, ln = e.get("first_name"), e.get("last_name")
            st.append(PlanStage(c.first_layer, c.last_layer + 1, fn, ln, _devices(c.devices),
                                c.forward_ms, c.backward_ms, c.send_ms, c.allreduce_ms,
                                c.inflight, c.memory_bytes, c.parameter_bytes,
                                c.activation_bytes))
        self.stage_info: list[PlanStage] = st
        """Per-stage details (PlanStage)."""

    # -- the plan ---------------------------------------------------------
    @property
    def stages(self) -> list[tuple[int, int]]:
        """(first_layer, end_layer) per stage, end exclusive."""
        return [(s.first_layer, s.end_layer) for s in self.stage_info]

    @property
    def replicas(self) -> list[int]:
        """Devices (data-parallel replicas) per stage."""
        return [s.replicas for s in self.stage_info]

    @property
    def devices(self) -> list[tuple[int, ...]]:
        """The cluster devices of each stage (replica k = k-th lowest)."""
        return [s.devices for s in self.stage_info]

    microbatches = property(lambda self: self._p.microbatches,
                            doc="Micro-batches per iteration (M).")
    microbatch_size = property(lambda self: self._p.microbatch_size,
                               doc="Samples per micro-batch.")
    predicted_ms = property(lambda self: self._p.predicted_ms,
                            doc="Predicted iteration time, ms (simulated, or the pivot formula "
                                "under rank='pivot').")
    pivot_ms = property(lambda self: self._p.pivot_ms, doc="DAPPLE's analytic latency, ms.")
    peak_memory_bytes = property(lambda self: self._p.peak_memory_bytes,
                                 doc="Largest per-device memory peak, bytes.")
    fits = property(lambda self: bool(self._p.fits), doc="Every device within memory.")
    devices_used = property(lambda self: self._p.devices_used, doc="Devices the plan uses.")

    @property
    def policy(self) -> str:
        """The schedule policy: "gpipe", "1f1b" or "1f1b-comm"."""
        return C.policy_name(self._p.policy)

    @property
    def predicted_time(self) -> float:
        """Predicted iteration time in seconds."""
        return self._p.predicted_ms / 1e3

    @property
    def profile_batch(self) -> int | None:
        """The profile batch size planned with (None if the file lacks it)."""
        return self._params.profile_batch if self._params else self._info.get("profile_batch")

    @property
    def global_batch(self) -> int:
        """The global batch planned for; microbatches * microbatch_size may
        exceed it by less than one micro-batch (unless planned with
        divisible=True)."""
        if self._params:
            return self._params.global_batch
        return self._info.get("global_batch") or self.microbatches * self.microbatch_size

    @property
    def single_device_time(self) -> float | None:
        """The global batch on one device, compute only, seconds."""
        if self._report is not None:
            return self._report.single_device_ms / 1e3
        v = self._info.get("single_device_ms")
        return None if v is None else v / 1e3

    @property
    def chosen(self) -> str | None:
        """"dapple" (the DP's plan) or the baseline that won."""
        if self._report is not None:
            fb = self._report.from_baseline
            return "dapple" if fb < 0 else C.BASELINES[fb]
        return (self._info.get("search") or {}).get("chosen")

    @property
    def baselines(self) -> dict[str, "Plan | None"]:
        """The baselines planned beside it ("data_parallel", "pipedream",
        "gpipe"), each a Plan, or None where the baseline has no plan."""
        out: dict[str, Plan | None] = {}
        if self._report is not None:
            for k, n in enumerate(C.BASELINES):
                out[n] = (Plan(self._report.baseline[k], profile=self._profile,
                               cluster=self.cluster, params=self._params)
                          if self._report.baseline_found[k] else None)
            return out
        for n, b in (self._info.get("baselines") or {}).items():
            if not b.get("found"):
                out[n] = None
                continue
            b = {k: v for k, v in b.items() if k not in ("found", "speedup")}
            out[n] = Plan.parse(_json.dumps(dict(b, format="dpl-plan", version=1)))
        return out

    # -- files ------------------------------------------------------------
    def to_json(self) -> str:
        """The version 1 plan file text (what ``dpl plan --out`` writes and
        ``dpl train --plan`` reads); a loaded plan gives its file's text."""
        if self._text is not None:
            return self._text
        r = self._report
        if r is None:
            r = C.CPlanReport()
            r.best = self._p
            r.from_baseline = -1
        prof = self._profile._h if self._profile is not None else None
        cl = ctypes.byref(self.cluster._c()) if self.cluster is not None else None
        par = ctypes.byref(self._params) if self._params is not None else None
        return C.write_to_string(
            lambda f: C.json().dpl_plan_write_json(ctypes.byref(r), prof, cl, par, f))

    def save(self, path: PathLike) -> None:
        """Write :meth:`to_json` to ``path`` through a temporary file in
        the same folder and a rename. Blocks on the file system."""
        write_atomic(path, self.to_json())

    @classmethod
    def parse(cls, text: str, source: str = "plan") -> "Plan":
        """A plan from the text of a version 1 plan file. Raises
        InvalidArgument naming ``source`` and the JSON path of the fault."""
        data = text.encode()
        p = C.CPlan()
        try:
            check(C.json().dpl_plan_read_json(data, len(data), ctypes.byref(p)))
        except Error as e:
            raise type(e)(e.code, e.name, f"{source}: {e.message}") from None
        info = _json.loads(text)
        cl = None
        if isinstance(info.get("cluster"), dict):
            cl = Cluster.parse(_json.dumps(info["cluster"]), source)
        return cls(p, cluster=cl, text=text, info=info)

    @classmethod
    def load(cls, path: PathLike) -> "Plan":
        """Read a plan file (``dpl plan --out``, :meth:`save`). Raises
        FileNotFoundError naming the path, InvalidArgument for a bad file.
        Blocks on the file system."""
        return cls.parse(_read(path, "plan"), os.fspath(path))

    # -- printing ---------------------------------------------------------
    def table(self) -> str:
        """The stages as a table, with micro-batching, policy, predicted
        time and memory (as ``dpl plan`` prints them)."""
        rows = [f"  {'stage':<5} {'layers':<9} {'first .. last layer':<34} {'devices':<12} "
                f"{'R':>4} {'F ms':>9} {'B ms':>9} {'send ms':>8} {'AR ms':>9} {'live':>4} "
                f"{'mem GB':>9}"]
        for i, s in enumerate(self.stage_info):
            nm = f"{(s.first_name or '?')[:15]} .. {(s.last_name or '?')[:15]}"
            rows.append(f"  {i:<5} {f'{s.first_layer}-{s.end_layer - 1}':<9} {nm:<34} "
                        f"{_ranges(s.devices):<12} {s.replicas:>4} {s.forward_ms:>9.3f} "
                        f"{s.backward_ms:>9.3f} {s.send_ms:>8.3f} {s.allreduce_ms:>9.3f} "
                        f"{s.inflight:>4} {s.memory_bytes / 1e9:>9.2f}")
        mem = f"{self.peak_memory_bytes / 1e9:.2f} GB"
        if self.cluster is not None:
            mem += f" of {self.cluster.device_memory / 1e9:.2f} GB"
        rows += ["", f"  micro-batch size {self.microbatch_size}, {self.microbatches} "
                 f"micro-batches, policy {self.policy}, {self.devices_used} devices",
                 f"  predicted iteration time {self.predicted_ms:.3f} ms "
                 f"(pivot model {self.pivot_ms:.3f} ms)",
                 f"  peak memory per device   {mem}{'' if self.fits else ' (does NOT fit)'}"]
        sd = self.single_device_time
        if sd and self.predicted_ms > 0:
            rows.append(f"  speedup over one device  {sd * 1e3 / self.predicted_ms:.2f}x")
        return "\n".join(rows)

    def __str__(self) -> str:
        where = f" on {self.cluster.name or 'a cluster'}" if self.cluster else ""
        return f"plan{where}: {len(self.stage_info)} stages, global batch " \
               f"{self.global_batch}\n\n{self.table()}"

    def __repr__(self) -> str:
        return (f"<dpl.Plan stages={self.stages} replicas={self.replicas} "
                f"microbatches={self.microbatches}x{self.microbatch_size} "
                f"policy={self.policy!r} predicted_time={self.predicted_time:.6g}s>")


def plan(profile: Profile | PathLike, cluster: Cluster | str | PathLike,
         pbs: int | None = None, gbs: int | None = None, *,
         optimizer_factor: float = 2.0, max_stages: int | None = None,
         microbatch_size: int | None = None, rank: str = "sim",
         front_cap: int | None = None, candidates: int | None = None,
         divisible: bool = False) -> Plan:
    """DAPPLE's planner (dpl_plan_search(); the options of ``dpl plan``).

    ``profile``: a Profile or a profile file; ``cluster``: a Cluster, a
    preset name or a JSON cluster file. ``pbs`` is the batch the profile
    was measured at (default ``profile.batch``), ``gbs`` the samples per
    iteration. ``optimizer_factor``: optimizer state bytes per weight byte
    (2 Adam, 1 momentum, 0 SGD); ``max_stages``: at most this many stages;
    ``microbatch_size``: search only this size; ``rank``: "sim" (rank the
    final candidates by the simulator) or "pivot" (DAPPLE's formula);
    ``front_cap``/``candidates``: search widths (0/None: 48 and 16).
    ``divisible=True`` searches only micro-batch sizes that divide ``gbs``
    (one search per divisor), so that the batch splits evenly.

    Blocks, CPU-bound (under a second for the paper's models on 16
    devices; ``divisible`` runs one search per divisor); releases the GIL.
    Raises InvalidArgument naming a bad value, FileNotFoundError for a
    missing file, dpl.Error (DPL_ENOFIT) when no plan fits memory, naming
    the closest attempt's worst stage and its overflow.
    """
    if not isinstance(profile, Profile):
        profile = Profile.load(profile)
    if not isinstance(cluster, Cluster):
        s = os.fspath(cluster)
        cluster = Cluster.load(s) if os.path.exists(s) or s.endswith(".json") \
            else Cluster.preset(s)
    if pbs is None:
        pbs = profile.batch
        if pbs is None:
            raise _fail(f"pbs is required: the batch size profile {profile.name!r} was "
                        "measured at is not known")
    if gbs is None:
        raise _fail("gbs (the global batch size) is required")
    p = C.CPlanParams()
    p.profile_batch = _int("pbs", pbs, 1, 1 << 30)
    p.global_batch = _int("gbs", gbs, 1, 1 << 24)
    p.optimizer_factor = _num("optimizer_factor", optimizer_factor)
    if p.optimizer_factor > 64:
        raise _fail(f"optimizer_factor: {optimizer_factor} is out of range [0, 64]")
    if max_stages is not None:
        p.max_stages = _int("max_stages", max_stages, 1, C.MAX_STAGES)
    if microbatch_size is not None:
        p.microbatch_size = _int("microbatch_size", microbatch_size, 1, 1 << 24)
        if microbatch_size > gbs:
            raise _fail(f"microbatch_size: {microbatch_size} is larger than gbs {gbs}")
        if divisible and gbs % microbatch_size:
            raise _fail(f"gbs {gbs} is not divisible by microbatch_size {microbatch_size}")
    if rank not in ("sim", "pivot"):
        raise _fail(f"rank: {rank!r} is not 'sim' or 'pivot'")
    p.rank = C.RANK_SIM if rank == "sim" else C.RANK_PIVOT
    if front_cap is not None:
        p.front_cap = _int("front_cap", front_cap, 0, 1 << 20)
    if candidates is not None:
        p.candidates = _int("candidates", candidates, 0, 1 << 16)
    c = cluster._c()
    sizes = [p.microbatch_size] if not divisible or p.microbatch_size else \
        sorted({d for k in range(1, math.isqrt(gbs) + 1) if gbs % k == 0 for d in (k, gbs // k)})
    best, nofit = None, None
    for size in sizes:
        p.microbatch_size = size
        r = C.CPlanReport()
        try:
            check(C.plan().dpl_plan_search(profile._h, ctypes.byref(c), ctypes.byref(p),
                                           ctypes.byref(r)))
        except Error as e:
            if e.code != _errors.ENOFIT:
                raise
            nofit = nofit or e
            continue
        if best is None or r.best.predicted_ms < best[0].best.predicted_ms:
            best = (r, C.CPlanParams.from_buffer_copy(p))
    if best is None:
        raise nofit
    if divisible and microbatch_size is None:
        best[1].microbatch_size = 0
    return Plan(best[0].best, report=best[0], profile=profile, cluster=cluster, params=best[1])
