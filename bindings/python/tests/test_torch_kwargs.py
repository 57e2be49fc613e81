"""Keyword inputs of ``step`` and ``eval`` reach every stage of the rank,
as in ``torch.distributed.pipelining`` (whose stages call their module
with the step's keyword inputs whatever their place in the pipeline): an
attention-style mask passed on every rank is cut into the micro-batches
(and a replica's share of them) and given to each stage's forward. Checked
against the same training in one process, for single-stage, interleaved
and replicated layouts; test_torch_parity.py runs the same rule through
PyTorch's runtime."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, ScheduleDAPPLE  # noqa: E402
from dpl.torch import microbatch as dmb  # noqa: E402
from torch_models import make_opt, max_rel_diff, stages_of_rank  # noqa: E402

W, B, ITERS = 6, 8, 3


class Masked(torch.nn.Module):
    """tanh(lin(h)) * mask: every stage takes the step's mask."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = torch.nn.Linear(W, W, dtype=torch.float64)

    def forward(self, h, mask):
        return torch.tanh(self.lin(h)) * mask


def batches(seed=3):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(B, W, generator=g, dtype=torch.float64),
             (torch.rand(B, W, generator=g, dtype=torch.float64) > 0.3).double(),
             torch.randn(B, W, generator=g, dtype=torch.float64)) for _ in range(ITERS + 1)]


def reference(parts, data, M):
    parts = copy.deepcopy(parts)
    opt = make_opt("sgd", [p for m in parts for p in m.parameters()])
    for x, mask, y in data[:-1]:
        opt.zero_grad()
        for xs, ms, ys in zip(x.tensor_split(M), mask.tensor_split(M), y.tensor_split(M)):
            h = xs
            for m in parts:
                h = m(h, ms)
            torch.nn.functional.mse_loss(h, ys).backward()
        for m in parts:
            for p in m.parameters():
                p.grad.div_(M)
        opt.step()
    x, mask, _ = data[-1]
    with torch.no_grad():
        h = x
        for m in parts:
            h = m(h, mask)
    return parts, h


def rank(parts, data, policy, reps, V, M):
    w = dpl.world.current()
    mine = stages_of_rank(policy, reps, V, w.rank)
    mods = {s: copy.deepcopy(parts[s]) for s in mine}
    S = len(parts)
    stages = [PipelineStage(mods[s], s, S) for s in mine]
    sched = ScheduleDAPPLE(stages if V > 1 else stages[0], M, torch.nn.MSELoss(),
                           replicas=reps, policy=policy,
                           kwargs_chunk_spec={"mask": dmb.TensorChunkSpec(0)})
    opt = make_opt("sgd", [p for m in mods.values() for p in m.parameters()])
    try:
        for x, mask, y in data[:-1]:
            opt.zero_grad()
            # every rank passes the mask, as PyTorch's scripts do
            sched.step(*((x,) if 0 in mine else ()), mask=mask,
                       target=y if S - 1 in mine else None)
            opt.step()
        x, mask, _ = data[-1]
        with torch.no_grad():
            out = sched.eval(*((x,) if 0 in mine else ()), mask=mask)
    finally:
        sched.close()
    return {s: list(m.parameters()) for s, m in mods.items()}, out


@pytest.mark.parametrize("policy,reps,V,M", [
    ("1f1b", [1, 1, 1], 1, 4),
    ("gpipe", [1, 1, 1], 1, 2),      # M < S
    ("interleaved", [1, 1], 2, 4),   # both stages of a rank take the mask
    ("zb-h1", [1, 1, 1], 1, 3),
    ("1f1b", [1, 2, 1], 1, 3),       # a replicated middle stage: its share of the mask
])
def test_every_stage_gets_the_steps_keyword_inputs(policy, reps, V, M):
    S = len(reps) * V
    parts = [Masked(10 + s) for s in range(S)]
    data = batches()
    want, want_out = reference(parts, data, M)
    res = dpl.run.threads(sum(reps), rank, parts, data, policy, reps, V, M, timeout=60)
    got: dict = {}
    outs = []
    for params, out in res:
        got.update(params)
        if out is not None:
            outs.append(out)
    assert sorted(got) == list(range(S))
    for s in range(S):
        assert max_rel_diff(got[s], list(want[s].parameters())) <= 1e-10
    # the last stage's replicas return their shares; together the whole batch
    assert torch.allclose(torch.cat(outs), want_out, rtol=1e-10, atol=0)


def wrong_rank(parts):
    w = dpl.world.current()
    st = PipelineStage(copy.deepcopy(parts[w.rank]), w.rank, 2)
    sched = ScheduleDAPPLE(st, 2, torch.nn.MSELoss(), replicas=[1, 1], timeout=10)
    x = torch.zeros(B, W, dtype=torch.float64)
    try:
        if w.rank == 0:
            sched.step(x, mask=torch.ones(B, W, dtype=torch.float64))
        else:   # a mask of another batch size on the last rank
            sched.step(mask=torch.ones(B - 2, W, dtype=torch.float64), target=x)
    except dpl.Error as e:
        return type(e).__name__, str(e)
    finally:
        sched.close()
    return None


def test_keyword_inputs_of_another_batch_size_are_refused():
    parts = [Masked(1), Masked(2)]
    res = dpl.run.threads(2, wrong_rank, parts, timeout=60)
    assert res[1][0] == "InvalidArgument"
    assert "keyword inputs of 6 samples; the batch has 8" in res[1][1]
    assert res[0] is not None and res[0][0] in ("PeerError", "TimeoutError")
