"""Pipeline schedules: dpl's action lists, from Python.

A :class:`Schedule` owns one C ``dpl_schedule``: an ordered list of
:class:`Action` per rank of one pipeline. Build one with :func:`schedule`
(a policy), :meth:`Schedule.from_lists` (by hand), :meth:`Schedule.from_csv`
(PyTorch's ``torch.distributed.pipelining`` CSV) or
:meth:`Schedule.from_json` (dpl's schedule file). Actions print in
PyTorch's notation (``"0F3"``, ``"1SEND_B2"``), so lists move between the
two unchanged.

Threads: a Schedule is not locked. Concurrent readers are safe (every
method but :meth:`Schedule.close` only reads); closing needs exclusive
access. Nothing here blocks.
"""

from __future__ import annotations

import ctypes
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from . import _schedule_capi as capi
from ._schedule_capi import bad as _bad, int_seq as _seq, to_int as _int
from ._schedule_capi import u64_array as _u64_array
from .errors import InvalidArgument, check, error_for
from ._action import KINDS, Action, CostsArg, StageCost, _cost_array, _costs  # noqa: F401

if TYPE_CHECKING:
    from .sim import SimResult

__all__ = ["Action", "StageCost", "Schedule", "ScheduleIssue", "ScheduleError",
           "schedule", "KINDS", "POLICIES"]

#: Policy names in the order of ``enum dpl_policy``; all but "custom" build.
POLICIES = ("gpipe", "1f1b", "1f1b-comm", "bounded", "interleaved", "zb-h1",
            "custom", "looped-bfs", "interleaved-zb", "zbv", "zb-h2", "zb-auto",
            "dualpipev")
#: Policies that take ``chunks`` V >= 2; zbv and dualpipev always have 2.
_CHUNKED = ("interleaved", "looped-bfs", "interleaved-zb")
_ESCHED, _EDEADLOCK = -4002, -4003


@dataclass(frozen=True)
class ScheduleIssue:
    """Where and why a schedule is invalid (``struct dpl_schedule_issue``).

    ``code`` is DPL_ESCHED or DPL_EDEADLOCK (``name`` its symbol), ``rank``
    and ``position`` locate the offending ``action`` (None when the action
    itself is malformed), ``message`` is dpl's text
    ("rank 1, position 4 (1B2): ...")."""

    code: int
    name: str
    rank: int
    position: int
    action: Action | None
    message: str


class ScheduleError(InvalidArgument):
    """A schedule breaks a rule of ``dpl_schedule_validate``; ``issues``
    holds the :class:`ScheduleIssue` found (dpl reports the first one:
    rule 6, deadlock, names the first blocked action of the lowest blocked
    rank). Its message is the issues' messages."""

    def __init__(self, code: int, name: str, message: str, issues: Sequence[ScheduleIssue]):
        super().__init__(code, name, message)
        self.issues = list(issues)


class Schedule:
    """One pipeline's action lists; owns a C ``dpl_schedule``.

    Not built directly: use :func:`schedule`, :meth:`from_lists`,
    :meth:`from_csv` or :meth:`from_json`. The C object is freed by
    :meth:`close`, by leaving a ``with`` block, or when the Schedule is
    garbage collected. ``_ptr`` is the ``dpl_schedule *`` for other parts
    of dpl (a runner): keep the Schedule alive and open while they use it.
    Methods that derive a schedule (:meth:`lower`, :meth:`clone`) return a
    new one and leave this one unchanged.
    """

    def __init__(self, ptr: ctypes.c_void_p, costs: StageCost | tuple[StageCost, ...] | None = None):
        if not isinstance(ptr, ctypes.c_void_p) or not ptr.value:
            raise TypeError("Schedule() takes a dpl_schedule pointer; use dpl.schedule() "
                            "or Schedule.from_lists/from_csv/from_json")
        self._p: ctypes.c_void_p | None = ptr
        self._destroy = capi.core().dpl_schedule_destroy
        #: The ``dpl_csv_layout *`` of the file from_csv read, or None.
        self._layout: ctypes.c_void_p | None = None
        #: Default per-stage costs for simulate/timeline/trace (from schedule()).
        self.costs = costs

    # -- lifetime ---------------------------------------------------------
    @property
    def _ptr(self) -> ctypes.c_void_p:
        """The ``dpl_schedule *`` (owned by this Schedule). ValueError once closed."""
        if self._p is None:
            raise ValueError("dpl: the schedule is closed")
        return self._p

    def close(self) -> None:
        """Free the C schedule now; later calls raise ValueError. Idempotent."""
        p, self._p = self._p, None
        if p is not None:
            self._destroy(p)
        lay, self._layout = self._layout, None
        if lay is not None:
            capi.csv().dpl_csv_layout_destroy(lay)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self) -> "Schedule":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def _adopt(cls, fill, costs=None) -> "Schedule":
        """Run ``fill(byref(ptr))`` (a C constructor) and own the result."""
        p = ctypes.c_void_p()
        check(fill(ctypes.byref(p)))
        return cls(p, costs)

    # -- shape ------------------------------------------------------------
    @property
    def policy(self) -> str:
        """The policy name ("1f1b", ..., "custom" for loaded/hand-built)."""
        return capi.core().dpl_policy_name(capi.core().dpl_schedule_policy(self._ptr)).decode()

    @property
    def ranks(self) -> int:
        """Number of ranks (lists)."""
        return capi.core().dpl_schedule_ranks(self._ptr)

    @property
    def stages(self) -> int:
        """Number of stages (ranks * chunks for interleaved)."""
        return capi.core().dpl_schedule_stages(self._ptr)

    @property
    def microbatches(self) -> int:
        """Number of micro-batches per iteration."""
        return capi.core().dpl_schedule_microbatches(self._ptr)

    @property
    def lowered(self) -> bool:
        """True once communication, REDUCE_GRAD and STEP are in the lists."""
        return bool(capi.core().dpl_schedule_is_lowered(self._ptr))

    @property
    def action_count(self) -> int:
        """Total number of actions over all ranks."""
        return capi.core().dpl_schedule_action_count(self._ptr)

    def _stage(self, stage: Any) -> int:
        s = _int("stage", stage)
        if s >= self.stages:
            raise _bad(f"stage {s} out of range (0..{self.stages - 1})")
        return s

    def stage_rank(self, stage: int) -> int:
        """The rank that runs ``stage``; InvalidArgument when out of range."""
        return capi.core().dpl_schedule_stage_rank(self._ptr, self._stage(stage))

    @property
    def stage_ranks(self) -> list[int]:
        """``stage_rank(s)`` for every stage."""
        return [self.stage_rank(s) for s in range(self.stages)]

    def bound(self, stage: int) -> int:
        """The most micro-batches ``stage`` keeps alive (forward done,
        backward or W not yet) anywhere in its list (``dpl_schedule_bound``)."""
        return capi.core().dpl_schedule_bound(self._ptr, self._stage(stage))

    def cap(self, stage: int) -> int:
        """The memory cap validate() enforces on ``stage``; 0 = none."""
        return capi.core().dpl_schedule_cap(self._ptr, self._stage(stage))

    def actions(self, rank: int) -> list[Action]:
        """A copy of ``rank``'s list; InvalidArgument when out of range."""
        r = _int("rank", rank)
        if r >= self.ranks:
            raise _bad(f"rank {r} out of range (0..{self.ranks - 1})")
        n = ctypes.c_size_t()
        a = capi.core().dpl_schedule_actions(self._ptr, r, ctypes.byref(n))
        return [Action._from_c(a[k]) for k in range(n.value)]

    def lists(self) -> list[list[Action]]:
        """``actions(r)`` for every rank."""
        return [self.actions(r) for r in range(self.ranks)]

    def __repr__(self) -> str:
        if self._p is None:
            return "<Schedule (closed)>"
        return (f"<Schedule policy={self.policy!r} stages={self.stages} ranks={self.ranks} "
                f"microbatches={self.microbatches} lowered={self.lowered}>")

    # -- derived schedules --------------------------------------------------
    def clone(self) -> "Schedule":
        """A deep copy (same policy, caps, mapping, lists and costs)."""
        return Schedule._adopt(lambda out: capi.core().dpl_schedule_clone(self._ptr, out),
                               self.costs)

    def lower(self) -> "Schedule":
        """A new schedule with SEND/RECV, REDUCE_GRAD and STEP added
        (``dpl_schedule_lower``); this one is unchanged. Raises
        InvalidArgument when already lowered, ScheduleError (with
        ``issues``) when the compute lists are invalid."""
        c = self.clone()
        rc = capi.core().dpl_schedule_lower(c._ptr)
        if rc in (_ESCHED, _EDEADLOCK):
            c.validate()
        if rc < 0:
            c.close()
            check(rc)
        return c

    def _compute_only(self) -> "Schedule":
        lists = [[a for a in l if a.is_compute or a.kind == "OVERLAP_F_B"]
                 for l in self.lists()]
        s = Schedule.from_lists(self.ranks, self.stages, self.microbatches, lists,
                                self.stage_ranks, policy=self.policy)
        for st in range(self.stages):
            check(capi.core().dpl_schedule_set_cap(s._ptr, st, self.cap(st)))
        s.costs = self.costs
        return s

    # -- validation -------------------------------------------------------
    def validate(self) -> None:
        """Check every rule of ``dpl_schedule_validate`` (placement, one F
        and one B or I+W per (stage, micro-batch), order, caps, matched
        communication, no deadlock). Returns None; raises ScheduleError
        (an InvalidArgument) carrying ``issues`` otherwise."""
        iss = capi.CScheduleIssue()
        rc = capi.core().dpl_schedule_validate(self._ptr, ctypes.byref(iss))
        if rc == 0:
            return
        err = error_for(rc)
        try:
            act = Action._from_c(iss.action)
        except (IndexError, InvalidArgument, TypeError):
            act = None
        msg = iss.message.decode("utf-8", "replace")
        issue = ScheduleIssue(rc, err.name, iss.rank, iss.position, act, msg)
        raise ScheduleError(rc, err.name, msg, [issue])

    # -- files ------------------------------------------------------------
    def to_csv(self, comms: bool | str = False, *, layout: bool = True) -> str:
        """PyTorch's CSV form: one line per rank, actions comma separated
        (an OVERLAP_F_B pair as PyTorch's ``(0F7;7B3)OVERLAP_F_B`` field).

        A Schedule read by :meth:`from_csv` keeps the file's layout -- its
        empty fields (PyTorch's bubbles), line ends ("\\r\\n" as PyTorch's
        csv.writer writes them), byte order mark and tail -- and, asked for
        its lists as they are (``comms`` False for a compute-only file,
        True for a lowered one), writes the file back byte for byte
        (``dpl_schedule_write_csv_layout``); ``layout=False`` writes dpl's
        plain form (no empty fields, "\\n" line ends) instead.

        ``comms=False`` writes the compute actions only (PyTorch's
        compute-only format, what ``_load_csv`` reads); ``comms=True`` the
        lowered lists as dpl runs them (this schedule's, or those of
        ``self.lower()`` when it is not lowered); ``comms="pytorch"`` the
        lowered lists in the form PyTorch's ``_PipelineScheduleRuntime``
        runs with ``_load_csv(path, format="compute_comms")``: no STEP, a
        WAIT_REDUCE_GRAD after each REDUCE_GRAD and one WAIT_SEND_F/B per
        send (``dpl_schedule_write_csv_comms``). Raises InvalidArgument
        when a rank has no action or a stage none (a CSV places each stage
        by the line holding it) or for another ``comms`` value.
        """
        if comms not in (False, True, "pytorch"):
            raise _bad(f"to_csv: comms must be False, True or 'pytorch' (got {comms!r})")
        if comms and not self.lowered:
            with self.lower() as low:
                return low.to_csv(comms=comms)
        if not comms and self.lowered:
            with self._compute_only() as c:
                return c.to_csv()
        if comms == "pytorch":
            fn = capi.csv().dpl_schedule_write_csv_comms
            return capi.write_to_string(lambda f: fn(self._ptr, f))
        if layout and self._layout is not None:
            lay = self._layout
            fl = capi.csv().dpl_schedule_write_csv_layout
            return capi.write_to_string(lambda f: fl(self._ptr, lay, f))
        fn = capi.csv().dpl_schedule_write_csv
        return capi.write_to_string(lambda f: fn(self._ptr, f))

    @classmethod
    def from_csv(cls, text: str | bytes, *, policy: str | None = None) -> "Schedule":
        """Load PyTorch's CSV (``dpl_schedule_read_csv``): ranks = lines,
        stages and micro-batches = largest indices + 1, each stage on the
        line that holds it; a file with SEND/RECV loads as lowered. The
        lists are not validated (call :meth:`validate`). ``policy`` records
        the policy the file was built by (default "custom"). The file's
        layout is kept, so :meth:`to_csv` gives ``text`` back unchanged
        (pass bytes, or text read with ``newline=""``, to keep CRLF line
        ends: Python's text mode turns them into "\\n"). Raises
        InvalidArgument (DPL_EPARSE, "line L, field K: ...")."""
        raw = _text(text, "from_csv")
        lay = ctypes.c_void_p()
        lib = capi.csv()
        s = cls._adopt(lambda out: lib.dpl_schedule_read_csv_layout(
            raw, len(raw), out, ctypes.byref(lay)))
        s._layout = lay
        if policy is not None:
            check(capi.core().dpl_schedule_set_policy(s._ptr, _policy(policy, custom=True)))
        return s

    def to_json(self) -> str:
        """dpl's schedule file, version 1 (``dpl_schedule_write_json``):
        keeps policy, caps, the stage mapping and empty lists."""
        fn = capi.json().dpl_schedule_write_json
        return capi.write_to_string(lambda f: fn(self._ptr, f))

    @classmethod
    def from_json(cls, text: str | bytes) -> "Schedule":
        """Load a version 1 schedule file (``dpl_schedule_read_json``); not
        validated. Raises InvalidArgument (DPL_EPARSE naming the JSON path)."""
        raw = _text(text, "from_json")
        return cls._adopt(lambda out: capi.json().dpl_schedule_read_json(raw, len(raw), out))

    @classmethod
    def from_lists(cls, ranks: int, stages: int, microbatches: int,
                   lists: Sequence[Sequence[Action | str]],
                   stage_rank: Sequence[int] | None = None, *,
                   policy: str = "custom", caps: int | Sequence[int] | None = None) -> "Schedule":
        """A schedule built by hand (``dpl_schedule_create``, ``map_stage``,
        ``append``): ``lists[r]`` is rank r's order, as Actions or their
        text. Stage s runs on ``stage_rank[s]`` (default s % ranks).
        ``caps`` sets the validator's cap per stage (int: all stages).
        Appending checks only ranges and placement (InvalidArgument naming
        the action); the rest is :meth:`validate`'s job. A list holding a
        communication action makes the schedule lowered."""
        R = _int("ranks", ranks, 1)
        S = _int("stages", stages, 1)
        M = _int("microbatches", microbatches, 1)
        if isinstance(lists, (str, bytes)) or len(lists) != R:
            raise _bad(f"lists: {len(lists)} lists for {R} ranks")
        parsed = [[Action._coerce(a) for a in l] for l in lists]
        lib = capi.core()
        s = cls._adopt(lambda out: lib.dpl_schedule_create(R, S, M, out))
        try:
            if stage_rank is not None:
                if len(stage_rank) != S:
                    raise _bad(f"stage_rank: {len(stage_rank)} values for {S} stages")
                for st, r in enumerate(stage_rank):
                    check(lib.dpl_schedule_map_stage(s._ptr, st, _int(f"stage_rank[{st}]", r)))
            if caps is not None:
                vals = [caps] * S if isinstance(caps, numbers.Integral) else list(caps)
                if len(vals) != S:
                    raise _bad(f"caps: {len(vals)} values for {S} stages")
                for st, c in enumerate(vals):
                    check(lib.dpl_schedule_set_cap(s._ptr, st, _int(f"caps[{st}]", c)))
            for r, l in enumerate(parsed):
                for a in l:
                    check(lib.dpl_schedule_append(s._ptr, r, a._to_c()))
            check(lib.dpl_schedule_set_policy(s._ptr, _policy(policy, custom=True)))
        except BaseException:
            s.close()
            raise
        return s

    # -- simulation (dpl.sim) ----------------------------------------------
    def simulate(self, costs: CostsArg = None, latency: float = 0.0, **kw: Any) -> "SimResult":
        """Replay the lists with ``dpl_sim_run``; see :func:`dpl.sim.simulate`
        for every keyword (bandwidth, activation_bytes, replicas, ...).
        ``costs=None`` uses the costs given to :func:`schedule`, else F=1,
        B=2. Raises ScheduleError for invalid lists, InvalidArgument for
        bad parameters."""
        from . import sim
        return sim.simulate(self, costs=costs, latency=latency, **kw)

    def timeline(self, costs: CostsArg = None, **kw: Any) -> str:
        """The ASCII timeline ``dpl schedule`` prints (one row per rank);
        see :func:`dpl.sim.timeline` (unit, width and simulate's keywords)."""
        from . import sim
        return sim.timeline(self, costs=costs, **kw)

    def trace(self, path: Any, costs: CostsArg = None, **kw: Any) -> None:
        """Write the Chrome/Perfetto trace ``dpl simulate --trace`` writes,
        atomically (temporary file, then rename); see :func:`dpl.sim.trace`."""
        from . import sim
        sim.trace(self, path, costs=costs, **kw)


def _text(text: str | bytes, who: str) -> bytes:
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise TypeError(f"{who} needs str or bytes (got {type(text).__name__})")


def _policy(name: Any, custom: bool = False) -> int:
    if not isinstance(name, str):
        raise TypeError(f"policy must be a str (got {name!r})")
    out = ctypes.c_int()
    check(capi.core().dpl_policy_parse(name.encode("utf-8"), ctypes.byref(out)))
    if out.value == capi.POLICY_CUSTOM and not custom:
        raise _bad("policy 'custom' cannot be built; use Schedule.from_lists")
    return out.value


def schedule(policy: str, stages: int, microbatches: int, *, chunks: int | None = None,
             cap: int | Sequence[int] | None = None,
             cap_bytes: int | Sequence[int] | None = None,
             activation_bytes: int | Sequence[int] | None = None,
             costs: CostsArg = None, transfer: float = 0.0) -> Schedule:
    """Build a policy's compute-only lists (``dpl_schedule_build``).

    ``policy``: one of POLICIES but "custom". ``stages`` S (ranks for the
    policies with chunks, which have S * chunks stages), ``microbatches``
    M. ``chunks``: V >= 2 for interleaved, looped-bfs and interleaved-zb
    (zbv and dualpipev always have 2 and take none).
    ``cap`` (int or one per stage) or ``cap_bytes`` with
    ``activation_bytes`` (int or one per stage): bounded's memory cap.
    ``costs``: one StageCost / ``(f, b[, i, w])`` for every stage or one
    per stage; bounded picks its order under them, and the Schedule keeps
    them as the default of simulate/timeline/trace. ``transfer``: zb-auto's
    time for an activation or gradient to reach the next rank, in the
    costs' unit (it plans and picks its order with that delay).
    Raises TypeError for wrong types, InvalidArgument with dpl's message
    naming the bad value (unknown policy, stages=0, a partial interleaved
    group, ...). Does not block.
    """
    pol = _policy(policy)
    S = _int("stages", stages, 1)
    M = _int("microbatches", microbatches, 1)
    name = POLICIES[pol]
    if chunks is not None:
        chunks = _int("chunks", chunks)
        if chunks > 1 and name not in _CHUNKED:
            raise _bad(f"chunks {chunks}: only policies {', '.join(_CHUNKED)} take "
                       f"chunks (got policy '{name}')")
    if name in _CHUNKED and (chunks is None or chunks < 2):
        raise _bad(f"{name}: chunks must be >= 2 (got {chunks})")
    bounded = name in ("bounded", "zb-auto")  # the policies with a cap
    for k, v in (("cap", cap), ("cap_bytes", cap_bytes), ("activation_bytes", activation_bytes)):
        if v is not None and not bounded:
            raise _bad(f"{k}: only policies bounded and zb-auto take a cap "
                       f"(got policy '{name}')")
    if bounded and cap is None and cap_bytes is None:
        raise _bad(f"policy {name} needs cap= (int or one per stage) or cap_bytes= "
                   "with activation_bytes=")
    if cap is not None and cap_bytes is not None:
        raise _bad(f"policy {name}: give cap or cap_bytes, not both")
    if cap_bytes is not None and activation_bytes is None:
        raise _bad("cap_bytes needs activation_bytes (int or one per stage)")
    n_stages = S * (chunks if name in _CHUNKED else 2 if name in ("zbv", "dualpipev") else 1)
    c = _costs(costs, n_stages)
    if not isinstance(transfer, numbers.Real) or isinstance(transfer, bool):
        raise TypeError(f"transfer must be a number (got {transfer!r})")
    p = capi.CScheduleParams(stages=S, microbatches=M, policy=pol, chunks=chunks or 0,
                             transfer=float(transfer))
    keep: list[Any] = []
    if cap is not None:
        if isinstance(cap, numbers.Integral) and not isinstance(cap, bool):
            p.cap_all = _int("cap", cap, 1)
        else:
            arr = (ctypes.c_uint32 * S)(*(_int(f"cap[{k}]", x, 1) for k, x in
                                          enumerate(_seq("cap", cap, S))))
            keep.append(arr)
            p.cap_mb = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint32))
    if cap_bytes is not None:
        cb, ab = _u64_array("cap_bytes", cap_bytes, S), _u64_array("activation_bytes",
                                                                  activation_bytes, S, 1)
        keep += [cb, ab]
        p.cap_bytes = ctypes.cast(cb, ctypes.POINTER(ctypes.c_uint64))
        p.activation_bytes = ctypes.cast(ab, ctypes.POINTER(ctypes.c_uint64))
    if c is not None:
        arr = _cost_array(c, n_stages)
        keep.append(arr)
        p.costs = ctypes.cast(arr, ctypes.POINTER(capi.CStageCost))
    return Schedule._adopt(lambda out: capi.core().dpl_schedule_build(ctypes.byref(p), out), c)
