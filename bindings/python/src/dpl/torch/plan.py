"""dpl.torch.from_plan: this rank's stage and schedule from a DAPPLE plan."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from .. import world as dpl_world
from .schedules import ScheduleDAPPLE
from .stage import PipelineStage, _bad, split_replicas


def from_plan(plan: Any, layers: Sequence[torch.nn.Module] | torch.nn.Sequential,
              loss_fn: Callable, *, world: Any = None, device: Any = "cpu",
              **schedule_options: Any) -> tuple[PipelineStage, ScheduleDAPPLE]:
    """Build this rank's :class:`PipelineStage` and its :class:`ScheduleDAPPLE`
    from ``plan`` (a :class:`dpl.Plan`: ``stages`` as (first, end) layer
    ranges, ``replicas`` per stage, ``microbatches``, ``policy``).

    ``layers`` is the whole model as an ``nn.Sequential`` or a list of
    modules, indexed as the profile the plan was made from. World rank
    ``w`` runs stage p where ``replicas[0] + ... + replicas[p-1] <= w``.
    Raises InvalidArgument when the plan does not match the layers or the
    world. Does not communicate.
    """
    mods = list(layers)
    stages = [tuple(r) for r in plan.stages]
    reps = list(plan.replicas)
    if len(reps) != len(stages):
        raise _bad(f"the plan has {len(stages)} stages and {len(reps)} replica counts")
    if not stages or stages[0][0] != 0 or stages[-1][1] != len(mods) or any(
            a[1] != b[0] for a, b in zip(stages, stages[1:])):
        raise _bad(f"the plan's stages {stages} do not cover the model's {len(mods)} layers in order")
    w = world if world is not None else dpl_world.current()
    if w.world_size != sum(reps):
        raise _bad(f"the plan needs {sum(reps)} ranks (replicas {reps}); the world has {w.world_size}")
    p, _ = split_replicas(w.rank, reps)
    first, end = stages[p]
    sub = torch.nn.Sequential(*mods[first:end])
    stage = PipelineStage(sub, p, len(stages), device, world=w)
    sched = ScheduleDAPPLE(stage, int(plan.microbatches), loss_fn, replicas=reps,
                           policy=str(plan.policy), world=w, **schedule_options)
    return stage, sched
