"""Forward-only passes and the rest of PyTorch's ``step``/``eval``
signature: ``eval()`` between steps gives single-process torch's outputs
and losses and leaves parameters, gradients and the training around it
untouched, on every kind of policy and layout; a schedule without a
``loss_fn`` steps forward only; pre-split ``arg_mbs``/``kwarg_mbs``/
``target_mbs`` equal the whole batch; ``loss_kwargs``, ``return_outputs``
and ``finalize_gradients``; the errors of each."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, Schedule1F1B, ScheduleDAPPLE  # noqa: E402

from torch_models import (V_SHAPED, data, make_opt, max_rel_diff, mlp,  # noqa: E402
                          reference, stages_of_rank)

WIDTHS = [6, 16, 16, 12, 16, 10, 3]



def eval_rank(parts, batches, reps, V, policy, M, at=1):
    """step(batch 0), eval(batch 1) with the gradients of step 0 still in
    .grad, step(batch 2) (at=1); or eval(batch 0) before any step, then
    step(batch 1) (at=0): what each call gave and the state around eval."""
    w = dpl.world.current()
    mine = stages_of_rank(policy, reps, V, w.rank)
    S = len(parts)
    mods = [copy.deepcopy(parts[s]) for s in mine]
    stages = [PipelineStage(m, s, S) for m, s in zip(mods, mine)]
    sched = ScheduleDAPPLE(stages if len(stages) > 1 else stages[0], M, torch.nn.MSELoss(),
                           replicas=reps, policy=policy)
    params = [q for m in mods for q in m.parameters()]
    opt = make_opt("sgd", params)
    first, last = 0 in mine, S - 1 in mine
    out = {}
    try:
        for it, (x, y) in enumerate(batches):
            args = (x,) if first else ()
            target = y if last else None
            if it == at:
                before = [(q.detach().clone(), q.grad,
                           None if q.grad is None else q.grad.clone()) for q in params]
                losses = []
                out["eval"] = sched.eval(*args, target=target, losses=losses)
                out["eval_losses"] = [float(v) for v in losses]
                # the same values, and the same .grad objects with the same values
                out["untouched"] = all(
                    torch.equal(q, a) and (q.grad is None if g is None else
                                           q.grad is g and torch.equal(q.grad, gv))
                    for q, (a, g, gv) in zip(params, before))
                out["grads_after"] = [None if q.grad is None else q.grad.clone() for q in params]
                out["eval_no_graph"] = out["eval"] is None or out["eval"].grad_fn is None
                continue
            opt.zero_grad()
            sched.step(*args, target=target)
            opt.step()
    finally:
        sched.close()
    return {s: list(m.parameters()) for s, m in zip(mine, mods)}, out


# (policy, replicas per pipeline rank, stages per rank, M)
EVAL_CASES = [
    ("gpipe", [1, 1, 1, 1], 1, 8),
    ("1f1b", [1, 1, 1, 1], 1, 8),
    ("1f1b", [2, 2], 1, 5),
    ("1f1b", [3, 1], 1, 3),
    ("zb-h1", [1, 1, 1], 1, 7),
    ("interleaved", [1, 1], 2, 4),
    ("looped-bfs", [1, 1], 2, 6),
    ("zbv", [1, 1], 2, 5),
    ("dualpipev", [2, 1], 2, 5),
]


@pytest.mark.parametrize("policy,reps,V,M", EVAL_CASES)
def test_eval_between_steps_equals_one_process(policy, reps, V, M):
    S = len(reps) * V
    parts = mlp(WIDTHS, S, torch.float64)
    batches = data(10, WIDTHS, 3, torch.float64)
    # single process: step 0, then the model's outputs and losses on batch 1,
    # then step 2 (eval does not train)
    ref0, _ = reference(parts, batches[:1], M, "sgd")
    model = torch.nn.Sequential(*copy.deepcopy(ref0))
    with torch.no_grad():
        x1, y1 = batches[1]
        want_out = model(x1)
        want_losses = [float(torch.nn.MSELoss()(model(a), b)) for a, b in
                       zip(torch.tensor_split(x1, M), torch.tensor_split(y1, M))]
    ref2, _ = reference(parts, [batches[0], batches[2]], M, "sgd")
    res = dpl.run.threads(sum(reps), eval_rank, parts, batches, reps, V, policy, M, timeout=120)
    outs = [o["eval"] for _, o in res if o.get("eval") is not None]
    assert outs, "no rank returned the eval output"
    replicated = reps[-1 if policy not in V_SHAPED else 0] > 1
    if replicated:   # each replica of the last stage returns its shares: rows in any order
        rows = torch.cat(outs)
        assert rows.shape == want_out.shape
        rows, want = rows[rows[:, 0].argsort()], want_out[want_out[:, 0].argsort()]
    else:
        assert len(outs) == 1
        rows, want = outs[0], want_out
    assert max_rel_diff([rows], [want]) <= 1e-10
    loss_sum = [0.0] * M
    for _, o in res:
        for j, v in enumerate(o.get("eval_losses", [])):
            loss_sum[j] += v
    if not replicated:
        assert loss_sum == pytest.approx(want_losses, rel=1e-10)
    else:
        assert sum(loss_sum) == pytest.approx(sum(want_losses), rel=1e-10)
    for _, o in res:
        assert o["untouched"], "eval changed a parameter or a gradient"
        assert o["eval_no_graph"]
    worst = max(max_rel_diff(ps, list(ref2[s].parameters()))
                for params, _ in res for s, ps in params.items())
    assert worst <= 1e-10, f"training around eval: max rel diff {worst:.3g}"


def _two_rank(fn, *args):
    return dpl.run.threads(2, fn, *args, timeout=60)


def no_loss_rank(parts, x):
    w = dpl.world.current()
    st = PipelineStage(copy.deepcopy(parts[w.rank]), w.rank, 2)
    sched = Schedule1F1B(st, 4)   # no loss_fn: forward only, as in PyTorch
    try:
        out = sched.step(x) if w.rank == 0 else sched.step()
        grads = [q.grad for q in st.submod.parameters()]
    finally:
        sched.close()
    return out, all(g is None for g in grads)


def test_a_schedule_without_loss_fn_steps_forward_only():
    parts = mlp(WIDTHS, 2, torch.float64)
    x = data(10, WIDTHS, 1, torch.float64)[0][0]
    (o0, g0), (o1, g1) = _two_rank(no_loss_rank, parts, x)
    assert o0 is None and g0 and g1
    with torch.no_grad():
        want = torch.nn.Sequential(*parts)(x)
    assert max_rel_diff([o1], [want]) <= 1e-12


def split_rank(parts, batch, M, how):
    w = dpl.world.current()
    st = PipelineStage(copy.deepcopy(parts[w.rank]), w.rank, 2)
    seen = []

    def loss_fn(out, tgt, scale=1.0):
        seen.append(scale)
        return torch.nn.MSELoss()(out, tgt) * scale

    sched = Schedule1F1B(st, M, loss_fn)
    x, y = batch
    losses = []
    try:
        if how == "whole":
            out = sched.step(x) if w.rank == 0 else sched.step(target=y, losses=losses)
        elif how == "split":
            if w.rank == 0:
                out = sched.step(arg_mbs=[(c,) for c in torch.tensor_split(x, M)])
            else:
                out = sched.step(target_mbs=list(torch.tensor_split(y, M)), losses=losses)
        elif how == "kwargs":   # loss_kwargs, no outputs kept, finalize_gradients accepted
            kw = {"finalize_gradients": False, "return_outputs": False}
            if w.rank == 0:
                out = sched.step(x, **kw)
            else:
                out = sched.step(target=y, losses=losses, loss_kwargs={"scale": 2.0}, **kw)
        else:   # the same through eval (PyTorch's passes them on to step)
            kw = {"return_outputs": False, "loss_kwargs": {"scale": 2.0},
                  "finalize_gradients": True}
            out = sched.eval(x, **kw) if w.rank == 0 else sched.eval(target=y, losses=losses, **kw)
    finally:
        sched.close()
    return (out, [float(v) for v in losses],
            [None if q.grad is None else q.grad.clone() for q in st.submod.parameters()], seen)


def test_pre_split_inputs_loss_kwargs_and_return_outputs():
    parts = mlp(WIDTHS, 2, torch.float64)
    batch = data(10, WIDTHS, 1, torch.float64)[0]
    whole = _two_rank(split_rank, parts, batch, 4, "whole")
    split = _two_rank(split_rank, parts, batch, 4, "split")
    scaled = _two_rank(split_rank, parts, batch, 4, "kwargs")
    for r in range(2):
        assert (whole[r][0] is None) == (r == 0)
        if r == 1:
            assert torch.equal(whole[r][0], split[r][0])
        assert whole[r][1] == split[r][1]
        assert all(torch.equal(a, b) for a, b in zip(whole[r][2], split[r][2]))
        # loss * 2: twice the losses and the gradients; no output kept
        assert scaled[r][0] is None
        assert scaled[r][1] == pytest.approx([2 * v for v in whole[r][1]], rel=1e-12)
        assert all(torch.allclose(2 * a, b, rtol=1e-12, atol=0)
                   for a, b in zip(whole[r][2], scaled[r][2]))
    assert scaled[1][3] == [2.0] * 4 and whole[1][3] == [1.0] * 4
    # eval with the same arguments: the step's losses (the same weights:
    # eval comes first), no output, loss_kwargs reached loss_fn
    ev = _two_rank(split_rank, parts, batch, 4, "eval-kwargs")
    assert ev[1][0] is None and ev[1][3] == [2.0] * 4
    assert all(g is None for r in range(2) for g in ev[r][2])   # no gradient made
    assert ev[1][1] == pytest.approx(scaled[1][1], rel=1e-12)


def bad_rank(parts, batch, case):
    w = dpl.world.current()
    st = PipelineStage(copy.deepcopy(parts[w.rank]), w.rank, 1)
    sched = Schedule1F1B(st, 4, torch.nn.MSELoss())
    x, y = batch
    try:
        if case == "chunk":    # torch.chunk's sizes 3, 3, 3, 1: not dpl's split
            sched.step(arg_mbs=[(c,) for c in torch.chunk(x, 4)],
                       target_mbs=list(torch.tensor_split(y, 4)))
        elif case == "mixed":
            sched.step(x, arg_mbs=[(c,) for c in torch.tensor_split(x, 4)], target=y)
        elif case == "count":
            sched.step(arg_mbs=[(c,) for c in torch.tensor_split(x, 3)],
                       target_mbs=list(torch.tensor_split(y, 4)))
        elif case == "no_grad":
            with torch.no_grad():
                sched.step(x, target=y)
        elif case == "kinds":
            sched.step(arg_mbs=[[c] for c in torch.tensor_split(x, 4)],
                       target_mbs=list(torch.tensor_split(y, 4)))
        elif case == "batch":   # eval's batch is the first call's
            sched.step(x, target=y)
            sched.eval(x[:8], target=y[:8])
    finally:
        sched.close()


@pytest.mark.parametrize("case,message", [
    ("chunk", r"micro-batch sizes \[3, 3, 3, 1\]; dpl splits a batch of 10 into \[3, 3, 2, 2\]"),
    ("mixed", "pass the positional inputs through arg_mbs"),
    ("count", "arg_mbs has 3 entries for 4 micro-batches"),
    ("no_grad", r"cannot run under torch.no_grad\(\); use eval\(\)"),
    ("kinds", r"arg_mbs\[0\] must be a tuple \(got list\)"),
    ("batch", "batch of 8 samples; the first step had 10"),
])
def test_bad_step_and_eval_arguments_are_named(case, message):
    parts = mlp(WIDTHS, 1, torch.float64)
    batch = data(10, WIDTHS, 1, torch.float64)[0]
    with pytest.raises(dpl.InvalidArgument, match=message):
        dpl.run.threads(1, bad_rank, parts, batch, case, timeout=60)


def test_eval_before_any_step_on_replicas():
    """eval as the first call sets dpl up (a replicated stage included),
    gives the initial model's outputs, and the step after it trains as if
    it were the first."""
    reps, M = [2, 1], 3
    parts = mlp(WIDTHS, 2, torch.float64)
    batches = data(10, WIDTHS, 2, torch.float64)
    with torch.no_grad():
        want = torch.nn.Sequential(*copy.deepcopy(parts))(batches[0][0])
    ref, _ = reference(parts, batches[1:], M, "sgd")
    res = dpl.run.threads(3, eval_rank, parts, batches, reps, 1, "1f1b", M, 0, timeout=120)
    outs = [o["eval"] for _, o in res if o.get("eval") is not None]
    assert len(outs) == 1 and max_rel_diff(outs, [want]) <= 1e-10
    worst = max(max_rel_diff(ps, list(ref[s].parameters()))
                for params, _ in res for s, ps in params.items())
    assert worst <= 1e-10
    for rank, (_, o) in enumerate(res):
        assert o["untouched"] or rank < 2   # ranks 0, 1: stage 0's replicas
        if rank < 2:   # .grad bound (zeros) for dpl's reduction, values untouched
            assert all(g is not None and not g.any() for g in o["grads_after"])
