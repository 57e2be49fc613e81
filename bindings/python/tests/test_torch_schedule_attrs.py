"""The attributes of PyTorch's schedules that trainers reach into, on
dpl.torch's: ``_stages`` (a list, in the order given), ``_stage`` on the
single-stage classes, ``_num_stages``, ``_n_microbatches``, and
``_loss_fn``/``_has_backward`` swapped around an evaluation and
replaced between steps (as torchtitan-based trainers do). Checked against
the installed torch's classes and against training in one process."""

from __future__ import annotations

import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")
sys.path.insert(0, os.path.dirname(__file__))

import dpl  # noqa: E402
import dpl.run  # noqa: E402
import dpl.torch  # noqa: E402
from dpl.torch import PipelineStage  # noqa: E402
from test_torch_csv import (CLASSES, SINGLE, VSHAPE, dpl_torch_schedule,  # noqa: E402
                            torch_schedule)
from torch_models import Chain, data, make_opt, max_rel_diff, mlp  # noqa: E402

WIDTHS = [4, 6, 6, 6, 6, 3]
B, M = 8, 4


@pytest.mark.parametrize("name", CLASSES)
def test_stage_attributes_are_pytorchs(name):
    ranks = 2
    theirs = torch_schedule(name, ranks, 4)
    cls = getattr(dpl.torch, name)
    if name in SINGLE:
        st = PipelineStage(mlp([4, 4], 1)[0], 0, ranks)
        ours = cls(st, 4, torch.nn.MSELoss())
        assert ours._stage is st and ours._stages == [st]
        assert hasattr(theirs, "_stage")
    else:
        n = 2 * ranks
        parts = mlp([4] * (n + 1), n)
        mine = [n - 1, 0] if name in VSHAPE else [ranks, 0]   # not in stage order
        given = [PipelineStage(parts[s], s, n) for s in mine]
        ours = cls(given, 4, torch.nn.MSELoss())
        assert type(ours._stages) is list and ours._stages == given
        assert [s.stage_index for s in ours._stages] == mine
        assert not hasattr(ours, "_stage") and not hasattr(theirs, "_stage")
    assert type(theirs._stages if name not in SINGLE else [theirs._stage]) is list
    assert ours._num_stages == theirs._num_stages
    assert ours._n_microbatches == theirs._n_microbatches == 4
    assert ours._has_backward is theirs._has_backward is True


def _mse2(out, y):
    return 2 * torch.nn.functional.mse_loss(out, y)


def _reference(parts, batches, x_eval):
    """Step 1 with MSE, an eval of x_eval, step 2 with 2 x MSE."""
    parts = copy.deepcopy(parts)
    model = Chain(parts)
    opt = make_opt("sgd", model.parameters())
    outs = []
    for (x, y), fn in zip(batches, (torch.nn.functional.mse_loss, None, _mse2)):
        if fn is None:
            with torch.no_grad():
                outs.append(model(x_eval))
            continue
        opt.zero_grad()
        for xs, ys in zip(x.tensor_split(M), y.tensor_split(M)):
            fn(model(xs), ys).backward()
        for p in model.parameters():
            p.grad.div_(M)
        opt.step()
    return parts, outs[0]


def _rank(parts, batches, x_eval, name, V):
    w = dpl.world.current()
    P = w.world_size
    n = P * V
    mine = [w.rank] if V == 1 else [w.rank, w.rank + P]
    mods = [copy.deepcopy(parts[s]) for s in mine]
    stages = [PipelineStage(m, s, n) for m, s in zip(mods, mine)]
    cls = getattr(dpl.torch, name)
    sched = cls(stages[0] if V == 1 else stages, M, torch.nn.MSELoss())
    # the trainer's pattern: pair the schedule's stages with its modules
    for st, m in zip(sched._stages, mods):
        assert st.submod is m
    first, last = 0 in mine, n - 1 in mine
    opt = make_opt("sgd", [p for m in mods for p in m.parameters()])
    losses_seen = []
    out = None
    try:
        for i, (x, y) in enumerate(batches):
            if i == 1:   # an evaluation with the loss swapped out
                fn, hb = sched._loss_fn, sched._has_backward
                sched._loss_fn, sched._has_backward = None, False
                losses: list = []
                with torch.no_grad():
                    got = sched.eval(*((x_eval,) if first else ()),
                                     target=y if last else None, losses=losses)
                sched._loss_fn, sched._has_backward = fn, hb
                losses_seen.append(len(losses))
                out = got if last else out
                continue
            if i == 2:   # a new loss between steps
                sched._loss_fn = _mse2
            opt.zero_grad()
            losses = []
            sched.step(*((x,) if first else ()), target=y if last else None,
                       losses=losses if last else None)
            losses_seen.append(len(losses))
            opt.step()
    finally:
        sched.close()
    return {s: list(m.parameters()) for s, m in zip(mine, mods)}, out, losses_seen, last


@pytest.mark.parametrize("name,V", [("Schedule1F1B", 1), ("ScheduleGPipe", 1),
                                    ("ScheduleInterleaved1F1B", 2)])
def test_loss_swapped_for_an_eval_and_replaced_between_steps(name, V):
    P = 2
    parts = mlp(WIDTHS, P * V)
    batches = data(B, WIDTHS, 3)
    x_eval = data(B, WIDTHS, 1, seed=9)[0][0]
    want, want_out = _reference(parts, batches, x_eval)
    res = dpl.run.threads(P, _rank, parts, batches, x_eval, name, V, timeout=60)
    got: dict = {}
    for params, out, seen, last in res:
        got.update(params)
        if last:
            # M losses per step, none from the evaluation without a loss_fn
            assert seen == [M, 0, M]
            assert torch.allclose(out, want_out, rtol=1e-10, atol=0)
    assert sorted(got) == list(range(P * V))
    for s in range(P * V):
        assert max_rel_diff(got[s], list(want[s].parameters())) <= 1e-10


@pytest.mark.parametrize("name", CLASSES)
def test_register_custom_function_is_refused_where_pytorch_has_it(name):
    theirs = torch_schedule(name, 2, 4)
    ours_cls = getattr(dpl.torch, name)
    assert hasattr(ours_cls, "register_custom_function") == \
        hasattr(theirs, "register_custom_function")
    if not hasattr(theirs, "register_custom_function"):
        return
    ours = dpl_torch_schedule(name, 2, 4)
    with pytest.raises(dpl.InvalidArgument,
                       match="register_custom_function\\(_ComputationType.FORWARD, "
                             "\\.\\.\\.\\): dpl.torch runs every action in dpl's runner"):
        ours.register_custom_function(S.FORWARD, lambda action, ctx: None)
