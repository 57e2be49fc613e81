"""dpl.torch's direct autograd calls (dpl/torch/_autograd.py) against
torch's public functions: same gradients, same accumulation, the same
errors where the public function raises, and training with the public
path forced gives the same parameters bit for bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, Schedule1F1B, ScheduleDAPPLE  # noqa: E402
from dpl.torch import _autograd  # noqa: E402


def _net(seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7, dtype=torch.float64), torch.nn.Tanh(),
                               torch.nn.Linear(7, 3, dtype=torch.float64))


def test_engine_in_use_on_this_torch():
    # torch 2.x has the entry point; if a future torch drops it, the
    # fallback keeps dpl.torch correct and this test says so.
    assert _autograd.uses_engine()


def test_backward_accumulates_like_torch():
    a, b = _net(), _net()
    x = torch.randn(4, 5, dtype=torch.float64)
    g = torch.randn(4, 3, dtype=torch.float64)
    for _ in range(2):   # the second call accumulates into .grad
        xa = x.clone().requires_grad_(True)
        xb = x.clone().requires_grad_(True)
        _autograd.backward(a(xa), g)
        torch.autograd.backward(b(xb), g)
        assert torch.equal(xa.grad, xb.grad)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_scalar_loss_without_gradient():
    a, b = _net(), _net()
    x = torch.randn(4, 5, dtype=torch.float64)
    _autograd.backward(a(x).square().mean(), None)
    b(x).square().mean().backward()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_grad_inputs_then_weights_like_torch():
    a, b = _net(), _net()
    x = torch.randn(4, 5, dtype=torch.float64)
    g = torch.randn(4, 3, dtype=torch.float64)
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    oa, ob = a(xa), b(xb)
    (ga,) = _autograd.grad(oa, (xa,), g, True)
    (gb,) = torch.autograd.grad(ob, [xb], g, retain_graph=True)
    assert torch.equal(ga, gb) and xa.grad is None
    wa = _autograd.grad(oa, list(a.parameters()), g, False)
    wb = torch.autograd.grad(ob, list(b.parameters()), g)
    assert all(torch.equal(u, v) for u, v in zip(wa, wb))
    assert all(p.grad is None for p in a.parameters())   # nothing accumulated


def test_unused_input_gives_none():
    x = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    out = x * 2
    gx, gy = _autograd.grad(out, (x, y), torch.ones_like(out), False)
    assert torch.equal(gx, torch.full_like(x, 2.0)) and gy is None


def test_non_scalar_without_gradient_raises_torchs_error():
    out = _net()(torch.randn(4, 5, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        _autograd.backward(out, None)


def test_graph_freed_after_backward():
    net = _net()
    out = net(torch.randn(2, 5, dtype=torch.float64))
    g = torch.ones_like(out)
    _autograd.backward(out, g)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        _autograd.backward(out, g)


def _train(policy, steps=3):
    """A 2-stage pipeline x 2 replicas (4 threads), returns rank 0's and
    rank 2's parameters after `steps` SGD steps."""
    torch.manual_seed(0)
    full = torch.nn.Sequential(torch.nn.Linear(6, 8, dtype=torch.float64), torch.nn.ReLU(),
                               torch.nn.Linear(8, 2, dtype=torch.float64))
    parts = [full[:2], full[2:]]
    x = torch.randn(12, 6, dtype=torch.float64)
    y = torch.randn(12, 2, dtype=torch.float64)

    def fn():
        import copy
        r = dpl.run.rank()
        s = 0 if r < 2 else 1
        mod = copy.deepcopy(parts[s])
        sch = ScheduleDAPPLE(PipelineStage(mod, s, 2), 3, torch.nn.MSELoss(), replicas=[2, 2],
                             policy=policy)
        opt = torch.optim.SGD(mod.parameters(), lr=0.1)
        for _ in range(steps):
            if s == 0:
                sch.step(x)
            else:
                sch.step(target=y)
            opt.step()
            opt.zero_grad()
        return [p.detach().clone() for p in mod.parameters()]
    return dpl.run.threads(4, fn, timeout=60)


@pytest.mark.parametrize("policy", ["1f1b", "zb-h1"])
def test_public_fallback_trains_identically(policy, monkeypatch):
    fast = _train(policy)
    monkeypatch.setattr(_autograd, "_engine", None)
    assert not _autograd.uses_engine()
    slow = _train(policy)
    for a, b in zip(fast, slow):
        for p, q in zip(a, b):
            assert torch.equal(p, q)
