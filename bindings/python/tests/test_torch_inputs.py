"""The first stage's inputs: positional and keyword tensors are split into
micro-batches along dimension 0, other values reach every micro-batch
whole; the last stage's target is split the same way. Checked against
one-device torch on the same micro-batches, with replicas whose shares
are uneven (M not divisible by the replicas, an empty share)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, ScheduleDAPPLE  # noqa: E402


class First(torch.nn.Module):
    """Takes a tensor, a non-tensor and two keyword tensors."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6, dtype=torch.float64)

    def forward(self, x, power, *, scale, shift=None):
        h = self.lin(x) * scale
        if shift is not None:
            h = h + shift
        return torch.tanh(h) ** power


def _data(n):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    scale = torch.rand(n, 1, generator=g, dtype=torch.float64) + 0.5
    shift = torch.randn(n, 6, generator=g, dtype=torch.float64)
    y = torch.randn(n, 2, generator=g, dtype=torch.float64)
    return x, scale, shift, y


def _reference(first, last, n, M):
    x, scale, shift, y = _data(n)
    loss_fn = torch.nn.MSELoss()
    for xs, ss, hs, ys in zip(*(t.tensor_split(M) for t in (x, scale, shift, y))):
        loss_fn(last(first(xs, 1, scale=ss, shift=hs)), ys).backward()
    for p in list(first.parameters()) + list(last.parameters()):
        p.grad /= M
    return [p.grad.clone() for p in list(first.parameters()) + list(last.parameters())]


@pytest.mark.parametrize("n,M,reps", [(10, 4, [1, 1]), (7, 3, [2, 1]), (5, 5, [2, 3])])
def test_keyword_and_plain_inputs_split_like_torch(n, M, reps):
    torch.manual_seed(1)
    first, last = First(), torch.nn.Linear(6, 2, dtype=torch.float64)
    want = _reference(copy.deepcopy(first), copy.deepcopy(last), n, M)
    x, scale, shift, y = _data(n)

    def fn():
        r = dpl.run.rank()
        s = 0 if r < reps[0] else 1
        mod = copy.deepcopy(first if s == 0 else last)
        sch = ScheduleDAPPLE(PipelineStage(mod, s, 2), M, torch.nn.MSELoss(), replicas=reps)
        for _ in range(2):   # the second step splits that step's inputs again
            for p in mod.parameters():
                p.grad = None
            if s == 0:
                sch.step(x, 1, scale=scale, shift=shift)
            else:
                sch.step(target=y)
        return s, [p.grad.clone() for p in mod.parameters()]

    got = dpl.run.threads(sum(reps), fn, timeout=60)
    by_stage = {s: g for s, g in got}
    flat = by_stage[0] + by_stage[1]
    for a, b in zip(flat, want):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def test_inputs_of_a_new_step_are_not_the_old_ones():
    # The per-step split must not leak across steps: the second step's
    # gradients belong to its own batch.
    lin = torch.nn.Linear(3, 1, dtype=torch.float64)
    ref = copy.deepcopy(lin)
    sch = ScheduleDAPPLE(PipelineStage(lin, 0, 1), 2, torch.nn.MSELoss())
    a = torch.randn(4, 3, dtype=torch.float64)
    b = torch.randn(4, 3, dtype=torch.float64)
    t = torch.randn(4, 1, dtype=torch.float64)
    sch.step(a, target=t)
    lin.zero_grad(set_to_none=True)
    sch.step(b, target=t)
    for xs, ts in zip(b.tensor_split(2), t.tensor_split(2)):
        torch.nn.MSELoss()(ref(xs), ts).backward()
    for p, q in zip(lin.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad / 2, rtol=1e-12, atol=0)
