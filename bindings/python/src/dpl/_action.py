"""Actions and stage costs: the two small value types of dpl's schedules
(``struct dpl_action`` and ``struct dpl_stage_cost``), and how cost
arguments are read. Re-exported by :mod:`dpl.schedule`, where they
belong to the public API.

Threads: every value here is immutable; nothing blocks.
"""

from __future__ import annotations

import ctypes
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, Union

from . import _schedule_capi as capi
from ._schedule_capi import bad as _bad, to_int as _int, to_num as _num
from .errors import check

#: Action kinds in the order of ``enum dpl_action_kind`` (stable).
#: UNSHARD, RESHARD, WAIT_REDUCE_GRAD and WAIT_SEND_* are PyTorch's lowered
#: kinds; OVERLAP_F_B marks that the next F and B (or I) run as one pair
#: (see ``dpl/schedule.h``).
KINDS = ("F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B",
         "REDUCE_GRAD", "STEP", "UNSHARD", "RESHARD", "WAIT_REDUCE_GRAD",
         "WAIT_SEND_F", "WAIT_SEND_B", "OVERLAP_F_B")
_KIND_INDEX = {k: i for i, k in enumerate(KINDS)}
_NO_MB = ("REDUCE_GRAD", "STEP", "UNSHARD", "RESHARD", "WAIT_REDUCE_GRAD",
          "OVERLAP_F_B")


@dataclass(frozen=True)
class Action:
    """One action of a rank's list (``struct dpl_action``).

    ``kind`` is one of :data:`KINDS`; ``stage`` the global stage index (the
    sender's for SEND_*, the receiver's for RECV_*, as in PyTorch);
    ``microbatch`` the micro-batch, None exactly for REDUCE_GRAD, STEP,
    UNSHARD, RESHARD, WAIT_REDUCE_GRAD and OVERLAP_F_B.
    ``str(a)`` is PyTorch's notation (``dpl_action_format``); the inverse
    is :meth:`parse`. Immutable and hashable. Raises TypeError for
    wrong types and InvalidArgument naming a bad kind or index.
    """

    kind: str
    stage: int
    microbatch: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise TypeError(f"Action kind must be a str (got {self.kind!r})")
        if self.kind not in _KIND_INDEX:
            raise _bad(f"action kind '{self.kind}' is not one of {', '.join(KINDS)}")
        object.__setattr__(self, "stage", _int("Action stage", self.stage, 0,
                                               capi.U32_MAX - 1))
        if self.kind in _NO_MB:
            if self.microbatch is not None:
                raise _bad(f"{self.kind} carries no micro-batch (got {self.microbatch!r})")
        elif self.microbatch is None:
            raise _bad(f"{self.kind} needs a micro-batch")
        else:
            object.__setattr__(self, "microbatch", _int(
                "Action microbatch", self.microbatch, 0, capi.U32_MAX - 1))

    @property
    def is_compute(self) -> bool:
        """True for F, B, I and W."""
        return self.kind in ("F", "B", "I", "W")

    def __str__(self) -> str:
        buf = ctypes.create_string_buffer(capi.ACTION_TEXT_MAX)
        n = check(capi.core().dpl_action_format(self._to_c(), buf, len(buf)))
        return buf.raw[:n].decode()

    @classmethod
    def parse(cls, text: str) -> "Action":
        """Parse PyTorch's notation (``"0F3"``, ``"2REDUCE_GRAD"``) with
        ``dpl_action_parse``. Raises TypeError for a non-str and
        InvalidArgument (DPL_EPARSE, naming the text) when malformed."""
        if not isinstance(text, str):
            raise TypeError(f"Action.parse needs a str (got {text!r})")
        raw = text.encode("utf-8")
        out = capi.CAction()
        check(capi.core().dpl_action_parse(raw, len(raw), ctypes.byref(out)))
        return cls._from_c(out)

    def _to_c(self) -> capi.CAction:
        mb = capi.NO_MICROBATCH if self.microbatch is None else self.microbatch
        return capi.CAction(_KIND_INDEX[self.kind], self.stage, mb)

    @classmethod
    def _from_c(cls, a: capi.CAction) -> "Action":
        mb = None if a.microbatch == capi.NO_MICROBATCH else a.microbatch
        return cls(KINDS[a.kind], a.stage, mb)

    @classmethod
    def _coerce(cls, x: Union["Action", str]) -> "Action":
        if isinstance(x, Action):
            return x
        if isinstance(x, str):
            return cls.parse(x)
        raise TypeError(f"expected an Action or its text (got {x!r})")


@dataclass(frozen=True)
class StageCost:
    """Compute costs of one stage for one micro-batch (``struct
    dpl_stage_cost``), in any time unit. ``i`` and ``w`` split the backward
    for zb-h1; 0 means ``b / 2``. A tuple ``(f, b)`` or ``(f, b, i, w)`` is
    accepted wherever a StageCost is. Raises TypeError for non-numbers and
    InvalidArgument for negative, non-finite or all-zero costs."""

    f: float = 1.0
    b: float = 2.0
    i: float = 0.0
    w: float = 0.0

    def __post_init__(self) -> None:
        for k in ("f", "b", "i", "w"):
            object.__setattr__(self, k, _num(f"StageCost.{k}", getattr(self, k)))
        if self.f + self.b + self.i + self.w <= 0:
            raise _bad("StageCost: at least one cost must be > 0 (got all 0)")

    def resolved(self) -> "StageCost":
        """This cost with its defaults filled in (``dpl_stage_cost_resolve``:
        a zero I or W is B / 2)."""
        c = capi.core().dpl_stage_cost_resolve(self._to_c())
        return StageCost(c.f, c.b, c.i, c.w)

    def _to_c(self) -> capi.CStageCost:
        return capi.CStageCost(self.f, self.b, self.i, self.w)

    @classmethod
    def _coerce(cls, x: Any) -> "StageCost":
        if isinstance(x, StageCost):
            return x
        if isinstance(x, (tuple, list)) and len(x) in (2, 4):
            return cls(*x)
        raise TypeError(f"a stage cost is a StageCost, (f, b) or (f, b, i, w) (got {x!r})")


CostsArg = Union[None, StageCost, Sequence[float], Sequence[Union[StageCost, Sequence[float]]]]


def _is_one_cost(x: Any) -> bool:
    return isinstance(x, StageCost) or (
        isinstance(x, (tuple, list)) and len(x) in (2, 4) and
        all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in x))


def _costs(costs: CostsArg, n: int) -> StageCost | tuple[StageCost, ...] | None:
    """None, one StageCost for every stage, or a tuple of n StageCosts."""
    if costs is None:
        return None
    if _is_one_cost(costs):
        return StageCost._coerce(costs)
    if isinstance(costs, (str, bytes)) or not isinstance(costs, Iterable):
        raise TypeError(f"costs must be a StageCost, (f, b[, i, w]) or one per stage (got {costs!r})")
    items = list(costs)
    if items and all(isinstance(v, numbers.Real) for v in items):
        raise TypeError(f"a stage cost is (f, b) or (f, b, i, w) (got {costs!r})")
    per = tuple(StageCost._coerce(c) for c in items)
    if len(per) != n:
        raise _bad(f"costs: {len(per)} values for {n} stages")
    return per


def _cost_array(c: StageCost | tuple[StageCost, ...], n: int) -> ctypes.Array:
    per = c if isinstance(c, tuple) else (c,) * n
    return (capi.CStageCost * n)(*(x._to_c() for x in per))
