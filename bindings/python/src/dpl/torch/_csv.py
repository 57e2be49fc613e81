"""PyTorch's schedule CSV files on a dpl.torch schedule: what
``_load_csv`` reads, what ``_dump_csv`` writes and the ``pipeline_order``
they describe. The schedule classes (``schedules.py``) hold the
documented methods; the work is here. Called on the rank's thread only.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from .._files import write_atomic
from ..schedule import Schedule
from . import _ranks
from ._boundary import _bad

if TYPE_CHECKING:
    from .schedules import _PipelineSchedule

_FORMATS = ("compute_only", "compute_comms")


def _format(who: str, fmt: Any) -> bool:
    """Whether ``fmt`` is "compute_comms"; InvalidArgument naming it when
    it is neither format."""
    if fmt not in _FORMATS:
        raise _bad(f"{who}: format must be 'compute_only' or 'compute_comms' (got {fmt!r})")
    return fmt == "compute_comms"


def load(sched: "_PipelineSchedule", filename: Any, fmt: Any) -> None:
    """Read ``filename`` and make it the schedule ``sched`` runs
    (``PipelineScheduleMulti._load_csv``, whose docstring says what is
    refused)."""
    comms = _format("_load_csv", fmt)
    if sched._runner is not None:
        raise _bad("_load_csv: the schedule has stepped already; load before the first step")
    with open(filename, "rb") as f:
        read = Schedule.from_csv(f.read())
    S = sched._num_stages
    M = sched._n_microbatches
    try:
        if read.lowered != comms:
            raise _bad(f"_load_csv: {filename} " + (
                "has no SEND/RECV actions; load it as 'compute_only'" if comms else
                "holds SEND/RECV actions; load it as 'compute_comms'"))
        if read.stages != S or read.microbatches != M:
            raise _bad(f"_load_csv: {filename} schedules {read.stages} stages and "
                       f"{read.microbatches} micro-batches; this schedule has {S} stages "
                       f"and {M} micro-batches")
        if comms:   # run as written: checked here (lower() checks its own input)
            read.validate()
        lowered = read if comms else read.lower()
    except BaseException:
        read.close()
        raise
    if lowered is not read:
        read.close()
    if sched._loaded is not None:
        sched._loaded.close()
    sched._loaded = lowered
    _ranks.fixed(sched, lowered, False)


@contextmanager
def _running(sched: "_PipelineSchedule") -> Iterator[Schedule]:
    """The lowered schedule ``sched``'s steps run: the runner's, the one
    :func:`load` read, or, before either, one built for the asking and
    closed on leaving."""
    if sched._runner is not None:
        yield sched._sched
    elif sched._loaded is not None:
        yield sched._loaded
    else:
        with sched._build(sched._num_stages) as s:
            yield s


def _text(sched: "_PipelineSchedule", comms: bool) -> str:
    """The schedule ``sched`` runs as PyTorch's CSV: compute-only, or
    lowered in the form its runtime loads."""
    with _running(sched) as s:
        return s.to_csv(comms="pytorch" if comms else False, layout=False)


def compute_order(sched: "_PipelineSchedule") -> dict[int, list]:
    """Each pipeline rank's compute actions (F, B, I, W, OVERLAP_F_B) in
    the order ``sched`` runs them (``pipeline_order``)."""
    with _running(sched) as s:
        return {r: [a for a in s.actions(r) if a.is_compute or a.kind == "OVERLAP_F_B"]
                for r in range(s.ranks)}


def dump(sched: "_PipelineSchedule", filename: Any, fmt: Any) -> None:
    """Write the schedule ``sched`` runs to ``filename`` as PyTorch's CSV
    of format ``fmt``, atomically (``_dump_csv``)."""
    write_atomic(filename, _text(sched, _format("_dump_csv", fmt)))


def comms_order(sched: "_PipelineSchedule") -> dict[int, list]:
    """Each pipeline rank's lowered list in the form PyTorch's runtime
    runs (``pipeline_order_with_comms``): what :func:`dump` writes as
    "compute_comms", read back as actions."""
    with Schedule.from_csv(_text(sched, True)) as t:
        return {r: t.actions(r) for r in range(t.ranks)}
