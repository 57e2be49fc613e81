"""Activation lifetimes of a schedule and reusable slots for them
(PyTorch 2.15's ``analyze_pipeline_activation_liveness`` and
``PipelineActivationLiveness``), computed from a dpl.torch schedule's own
lists: its runner's order of compute actions, written in PyTorch's form,
so a caller that sizes buffers from the result sizes them for what dpl
does.

Pure functions of the schedule's lists; nothing here blocks or touches
the transport. Call it on any thread that may read the schedule.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

from ._boundary import _bad

if TYPE_CHECKING:
    from .schedules import _PipelineSchedule

Granularity = Literal["microbatch", "stage_microbatch"]
_GRANULARITIES = ("microbatch", "stage_microbatch")


@dataclass(frozen=True)
class PipelineActivationLiveness:
    """Logical activation slots of one pipeline rank's schedule.

    ``slot_by_stage_and_microbatch`` maps each analysed (global stage,
    micro-batch) pair to a slot id in ``range(num_slots)``; two pairs share
    an id only when their lifetimes do not overlap. A lifetime runs from
    the pair's forward to the action that frees what the forward kept: its
    whole backward (B), or its weight backward (W) when the schedule splits
    the backward (I alone frees nothing). Both ends are inclusive
    positions in the rank's list, so a lifetime ending where another
    starts overlaps it.

    The slots describe storage; nothing is allocated. With ``granularity``
    "microbatch" every analysed stage of a micro-batch shares one lifetime
    (its earliest forward to its latest release) and so one slot.

    Immutable; the mappings are read-only views. Equal values compare
    equal; not hashable. Built by :func:`analyze_pipeline_activation_liveness`.
    """

    pp_rank: int
    granularity: Granularity
    stage_indices: tuple[int, ...]
    num_microbatches: int
    slot_by_stage_and_microbatch: Mapping[tuple[int, int], int]
    num_slots: int
    _lifetimes: Mapping[tuple[int, int], tuple[int, int]] = field(repr=False)
    __hash__ = None  # type: ignore[assignment]

    def slot_for(self, stage_index: int, microbatch_index: int) -> int:
        """The slot of the activation of (``stage_index``,
        ``microbatch_index``). Raises InvalidArgument (a ValueError)
        naming the pair when it was not analysed."""
        return self._get(self.slot_by_stage_and_microbatch, "slot", stage_index,
                         microbatch_index)

    def get_activation_lifetime(self, stage_index: int,
                                microbatch_index: int) -> tuple[int, int]:
        """The inclusive (forward, release) positions of the pair's
        activation in the analysed list (at "microbatch" granularity, the
        micro-batch's span over the analysed stages). Raises
        InvalidArgument (a ValueError) naming the pair when it was not
        analysed."""
        return self._get(self._lifetimes, "lifetime", stage_index, microbatch_index)

    def _get(self, table: Mapping, what: str, stage_index: int, microbatch_index: int):
        got = table.get((stage_index, microbatch_index))
        if got is None:
            raise _bad(f"no activation {what} for stage {stage_index}, microbatch "
                       f"{microbatch_index} (stages analysed: {list(self.stage_indices)}, "
                       f"microbatches 0..{self.num_microbatches - 1})")
        return got


def _positions(actions: Sequence) -> list[tuple[int, object]]:
    """(position, action) for each compute action of a rank's list. An
    OVERLAP_F_B marker and the two actions after it, which run as one,
    share the marker's position; every other action is at its index."""
    out = []
    shared, left = 0, 0
    for i, a in enumerate(actions):
        if a.kind == "OVERLAP_F_B":
            shared, left = i, 2
            continue
        pos = shared if left else i
        left = max(left - 1, 0)
        if a.kind in ("F", "B", "I", "W"):
            out.append((pos, a))
    return out


def _slots(spans: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """A slot per inclusive span, in input order, and the number of slots:
    spans taken by (start, end, index); a span takes the lowest-numbered
    slot whose last span ended before it starts, else a new one."""
    owner = [0] * len(spans)
    busy: list[tuple[int, int]] = []   # (end, slot) of the spans placed
    free: list[int] = []
    count = 0
    for i in sorted(range(len(spans)), key=lambda k: (spans[k][0], spans[k][1], k)):
        start, end = spans[i]
        while busy and busy[0][0] < start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            slot = heapq.heappop(free)
        else:
            slot, count = count, count + 1
        owner[i] = slot
        heapq.heappush(busy, (end, slot))
    return owner, count


def _stages(stage_indices: Sequence[int]) -> tuple[int, ...]:
    try:
        stages = tuple(stage_indices)
    except TypeError:
        raise _bad(f"stage_indices must be a sequence of stage indices "
                   f"(got {stage_indices!r})") from None
    if not stages:
        raise _bad("stage_indices must name at least one stage (got an empty sequence)")
    if len(set(stages)) != len(stages):
        raise _bad(f"stage_indices must be unique (got {list(stages)})")
    return stages


def analyze_pipeline_activation_liveness(
        schedule: "_PipelineSchedule", *, pp_rank: int, stage_indices: Sequence[int],
        granularity: Granularity) -> PipelineActivationLiveness:
    """The activation lifetimes of ``stage_indices`` on pipeline rank
    ``pp_rank`` of ``schedule`` and the fewest reusable slots for them
    (PyTorch's function of the same name and arguments).

    The list analysed is the one dpl runs: ``schedule.pipeline_order_with_comms``
    for the runtime classes (PyTorch's ``_PipelineScheduleRuntime`` and
    its subclasses), else ``schedule.pipeline_order``; positions index
    that list. dpl's lists hold no bubbles, and an OVERLAP_F_B pair's F
    and B sit at their marker's position, so positions can differ from
    PyTorch's for the same schedule; the slots cannot, where the compute
    order is the same. Slots are assigned by start, then end, then stage
    and micro-batch, lowest free id first, as PyTorch does.

    Raises InvalidArgument (a ValueError) naming the bad value: an unknown
    ``granularity``; an empty or repeated ``stage_indices``; a ``pp_rank``
    the schedule has not; a selected stage without exactly one forward and
    one release per micro-batch on that rank, or a weight backward
    without its input backward. Raises as ``pipeline_order`` does for a
    schedule dpl cannot build."""
    if granularity not in _GRANULARITIES:
        raise _bad(f"granularity must be 'microbatch' or 'stage_microbatch' "
                   f"(got {granularity!r})")
    stages = _stages(stage_indices)
    from .schedules import _PipelineScheduleRuntime
    order = (schedule.pipeline_order_with_comms
             if isinstance(schedule, _PipelineScheduleRuntime) else schedule.pipeline_order)
    if pp_rank not in order:
        raise _bad(f"pp_rank {pp_rank!r} is not a rank of the schedule "
                   f"(ranks 0..{len(order) - 1})")
    M = schedule._n_microbatches
    keys = [(s, j) for s in sorted(stages) for j in range(M)]
    want = set(keys)
    fwd: dict[tuple[int, int], int] = {}
    end: dict[tuple[int, int], int] = {}
    inputs: set[tuple[int, int]] = set()
    weights: set[tuple[int, int]] = set()
    for pos, a in _positions(order[pp_rank]):
        if a.stage not in stages:
            continue
        key = (a.stage, a.microbatch)
        if a.microbatch >= M:
            raise _bad(f"action {a} of rank {pp_rank} names micro-batch {a.microbatch}; "
                       f"the schedule has {M}")
        if a.kind == "I":
            if key in inputs:
                raise _bad(f"stage {key[0]}, microbatch {key[1]} has two input backwards")
            inputs.add(key)
            continue
        seen = fwd if a.kind == "F" else end
        if key in seen:
            what = "forwards" if a.kind == "F" else "releases (B or W)"
            raise _bad(f"stage {key[0]}, microbatch {key[1]} has two {what} on rank {pp_rank}")
        seen[key] = pos
        if a.kind == "W":
            weights.add(key)
    for what, got in (("forward", fwd), ("release (B or W)", end)):
        if got.keys() != want:
            lost = sorted(want - got.keys())
            raise _bad(f"rank {pp_rank} has no {what} for (stage, microbatch) {lost[:8]}"
                       f"{' ...' if len(lost) > 8 else ''}")
    if weights - inputs:
        raise _bad(f"weight backward without input backward for (stage, microbatch) "
                   f"{sorted(weights - inputs)}")
    for k in keys:
        if end[k] < fwd[k]:
            raise _bad(f"stage {k[0]}, microbatch {k[1]} is released at position {end[k]}, "
                       f"before its forward at {fwd[k]}")
    if granularity == "microbatch":
        span_of = [(min(fwd[(s, j)] for s in stages), max(end[(s, j)] for s in stages))
                   for j in range(M)]
        slot_of, count = _slots(span_of)
        slots = {k: slot_of[k[1]] for k in keys}
        spans = {k: span_of[k[1]] for k in keys}
    else:
        spans = {k: (fwd[k], end[k]) for k in keys}
        slot_of, count = _slots([spans[k] for k in keys])
        slots = dict(zip(keys, slot_of))
    return PipelineActivationLiveness(pp_rank, granularity, stages, M,
                                      MappingProxyType(slots), count, MappingProxyType(spans))
