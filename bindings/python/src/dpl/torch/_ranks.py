"""The rank attributes PyTorch's stages and multi-stage schedules carry
(``group_rank``, ``group_size``, ``rank``, ``pp_group_size``,
``stage_index_to_group_rank``, ``n_local_stages``, ...), on dpl.torch's.

PyTorch reads them from the process group when a stage is built. dpl.torch
joins its world at the first step, so these are read without joining:
:func:`dpl.run.peek` looks where :func:`dpl.world.current` would, in
the same order, and never blocks. Called on the rank's thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..run import peek

if TYPE_CHECKING:
    from .schedules import _PipelineSchedule

# PyTorch's classes that count rounds of micro-batches, and those that
# also say how many stages a rank holds (by their dpl policy)
_ROUNDS = ("interleaved", "interleaved-zb")
_LOCAL = _ROUNDS + ("zbv", "dualpipev")


def stage_to_rank(ranks: int, stages: int, v: bool) -> dict[int, int]:
    """Which rank of ``ranks`` holds each of ``stages`` stages: stage s on
    rank s mod ranks (loop), or down and back up again (V: with two
    stages a rank, rank r holds r and 2P-1-r), as PyTorch's
    ``generate_stage_to_rank_mapping``."""
    out = {}
    for s in range(stages):
        k, r = divmod(s, ranks)
        out[s] = ranks - 1 - r if v and k % 2 else r
    return out


def set_multi(sched: "_PipelineSchedule", v: bool) -> None:
    """Give a multi-stage schedule, and its stages, PyTorch's attributes:
    ``pp_group_size`` and ``rank`` (the world's, or with ``replicas`` the
    pipeline's: ranks and this rank's), ``stage_index_to_group_rank``
    (the policy's placement, V when ``v``, else a loop; :func:`fixed`
    sets the one that runs), and by class ``n_local_stages``,
    ``number_of_rounds`` and ``microbatches_per_round``. Raises as
    :func:`dpl.run.peek`."""
    rank, size = peek(sched._world)
    reps = sched._replicas
    if reps:
        from .stage import split_replicas
        rank, size = split_replicas(rank, reps)[0], len(reps)
    sched.rank, sched.pp_group_size = rank, size
    placed(sched, stage_to_rank(size, sched._num_stages, v))
    policy = type(sched)._policy
    if policy in _LOCAL:
        sched.n_local_stages = len(sched._stages)
    if policy in _ROUNDS:
        sched.number_of_rounds = max(1, sched._n_microbatches // size)
        sched.microbatches_per_round = sched._n_microbatches // sched.number_of_rounds


def placed(sched: "_PipelineSchedule", mapping: dict[int, int]) -> None:
    """Set ``stage_index_to_group_rank`` on a multi-stage schedule and on
    its stages (one dict, shared, as PyTorch's)."""
    sched.stage_index_to_group_rank = mapping
    for st in sched._stages:
        st.stage_index_to_group_rank = mapping


def fixed(sched: "_PipelineSchedule", lowered: Any, stepping: bool) -> None:
    """What PyTorch sets once the schedule that runs is known: on a
    multi-stage schedule, the placement of ``lowered`` (a
    :class:`dpl.Schedule`: the one the first step sets up with, or the
    one ``_load_csv`` read) as ``stage_index_to_group_rank``; and when
    ``stepping`` (the first step), each stage's ``chunks``, the
    micro-batches of a step."""
    if stepping:
        for st in sched._stages:
            st.chunks = sched._n_microbatches
    if hasattr(sched, "stage_index_to_group_rank"):
        placed(sched, dict(enumerate(lowered.stage_ranks)))
