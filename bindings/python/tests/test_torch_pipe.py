"""PyTorch's tracing frontend on dpl.torch: ``pipeline()`` cuts a model
with ``SplitPoint``s or ``pipe_split()``, ``Pipe.build_stage`` and
``build_stage`` make dpl stages of its parts, and training them equals
single-process training of the whole model on every kind of policy and
layout. The model has what PyTorch 2.15's runtime refuses and dpl.torch
hands on from stage to stage: a skip connection over every cut, and a
model input (a mask) that every stage uses, or that only stages after the
first use. Plus the errors."""

from __future__ import annotations

import copy
import inspect
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import (ScheduleDAPPLE, SplitPoint, build_stage, pipe_split,  # noqa: E402
                       pipeline)

from torch_models import stages_of_rank  # noqa: E402

D_IN, D, D_OUT, BLOCKS = 5, 8, 3, 6


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(D, D, dtype=torch.float64)

    def forward(self, h, mask):
        return torch.tanh(self.lin(h)) * mask + h * 0.5


class Net(torch.nn.Module):
    def __init__(self, seed=0, marks=()):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Linear(D_IN, D, dtype=torch.float64)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(BLOCKS)])
        self.head = torch.nn.Linear(D, D_OUT, dtype=torch.float64)
        self.marks = set(marks)   # pipe_split() before these blocks

    def forward(self, x, mask):
        h = skip = torch.tanh(self.emb(x))
        for i, b in enumerate(self.blocks):
            if i in self.marks:
                pipe_split()
            h = b(h, mask)
        return self.head(h + skip)


class LateMask(Net):
    """Net whose blocks in the first half do not use the mask: the first
    stage's module does not take it, later stages do."""

    def forward(self, x, mask):
        h = skip = torch.tanh(self.emb(x))
        for i, b in enumerate(self.blocks):
            if i in self.marks:
                pipe_split()
            h = b(h, mask if i >= BLOCKS // 2 else torch.ones_like(h))
        return self.head(h + skip)


def cuts(S):
    """Blocks to split before, so that S parts remain."""
    return [round(k * BLOCKS / S) for k in range(1, S)]


def batches(n, iters=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(iters):
        x = torch.randn(n, D_IN, generator=g, dtype=torch.float64)
        mask = (torch.rand(n, D, generator=g) > 0.25).double()
        out.append((x, mask, torch.randn(n, D_OUT, generator=g, dtype=torch.float64)))
    return out


def reference(model, data, M):
    """SGD on the whole model in one process, PyTorch's pipelining
    semantics (per-micro-batch losses, gradients / M); then its outputs on
    the last batch."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, mask, y in data[:-1]:
        opt.zero_grad()
        for xs, ms, ys in zip(x.tensor_split(M), mask.tensor_split(M), y.tensor_split(M)):
            torch.nn.functional.mse_loss(model(xs, ms), ys).backward()
        for p in model.parameters():
            p.grad.div_(M)
        opt.step()
    x, mask, _ = data[-1]
    with torch.no_grad():
        return dict(model.named_parameters()), model(x, mask)



def train_rank(pipe, data, reps, V, policy, M, how):
    w = dpl.world.current()
    pipe = copy.deepcopy(pipe)   # ranks are threads here: each its own model
    mine = stages_of_rank(policy, reps, V, w.rank)
    S = pipe.num_stages
    if how == "function":   # torch.distributed.pipelining.build_stage's form
        stages = [build_stage(pipe.get_stage_module(s), s, pipe.info(), torch.device("cpu"))
                  for s in mine]
    else:
        stages = [pipe.build_stage(s, torch.device("cpu")) for s in mine]
    sched = ScheduleDAPPLE(stages if len(stages) > 1 else stages[0], M, torch.nn.MSELoss(),
                           replicas=reps, policy=policy)
    params = [p for st in stages for p in st.submod.parameters()]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    first, last = 0 in mine, S - 1 in mine
    try:
        for x, mask, y in data[:-1]:
            opt.zero_grad()
            if first:
                sched.step(x, mask=mask, target=y if last else None)
            else:
                sched.step(target=y if last else None)
            opt.step()
        x, mask, _ = data[-1]
        out = sched.eval(x, mask=mask) if first else sched.eval()
    finally:
        sched.close()
    return {n: p.detach().clone() for st in stages for n, p in st.submod.named_parameters()}, out


# (policy, replicas per pipeline rank, stages per rank, M, how the cut is
# marked, the model)
CASES = [
    ("gpipe", [1, 1, 1], 1, 4, "spec", Net),
    ("1f1b", [1, 1, 1], 1, 2, "pipe_split", Net),    # M < S
    ("zb-h1", [1, 1, 1], 1, 5, "spec", Net),         # input and weight gradients apart
    ("1f1b", [2, 1, 1], 1, 5, "function", Net),      # a replicated first stage
    ("interleaved", [1, 1], 2, 4, "spec", Net),
    ("zbv", [1, 1], 2, 5, "pipe_split", Net),
    ("1f1b", [1, 1, 1], 1, 4, "spec", LateMask),     # the mask handed on by stage 0
    ("zbv", [1, 1], 2, 5, "spec", LateMask),
]


@pytest.mark.parametrize("policy,reps,V,M,how,net", CASES)
def test_a_traced_split_trains_like_one_process(policy, reps, V, M, how, net):
    S = len(reps) * V
    data = batches(10)
    model = net(marks=cuts(S) if how == "pipe_split" else ())
    want_params, want_out = reference(model, data, M)
    x0, m0, _ = data[0]
    n0 = len(x0) // M
    spec = {f"blocks.{i}": SplitPoint.BEGINNING for i in cuts(S)} \
        if how != "pipe_split" else None
    pipe = pipeline(copy.deepcopy(model), (x0[:n0],), {"mask": m0[:n0]}, split_spec=spec)
    assert pipe.num_stages == S
    res = dpl.run.threads(sum(reps), train_rank, pipe, data, reps, V, policy, M,
                          "function" if how == "function" else "method", timeout=120)
    seen = set()
    worst = 0.0
    for params, _ in res:
        for n, p in params.items():
            seen.add(n)
            w = want_params[n].detach()
            worst = max(worst, float((p - w).abs().max() / w.abs().max()))
    assert seen == set(want_params), "a parameter of the model is on no stage"
    assert worst <= 1e-10, f"{policy} {reps}: max rel diff {worst:.3g}"
    outs = [o for _, o in res if o is not None]
    rows = torch.cat(outs)
    assert rows.shape == want_out.shape
    rows, want = rows[rows[:, 0].argsort()], want_out[want_out[:, 0].argsort()]
    assert float((rows - want).abs().max() / want.abs().max()) <= 1e-10


def test_each_stage_hands_on_what_later_stages_use():
    """Stage s returns its own output and the values later stages need
    (the skip connection and the mask), and nothing more: the last stage
    receives three tensors, the middle ones as well."""
    data = batches(6)
    x0, m0, _ = data[0]
    pipe = pipeline(Net(), (x0[:2],), {"mask": m0[:2]},
                    split_spec={f"blocks.{i}": SplitPoint.BEGINNING for i in cuts(3)})
    stages = [pipe.build_stage(s, "cpu") for s in range(3)]
    with torch.no_grad():
        mid = stages[0].fn(x0, mask=m0)
        assert isinstance(mid, tuple) and len(mid) == 3
        assert any(torch.equal(t, m0) for t in mid), "the mask is handed on"
        mid2 = stages[1].fn(*mid)
        assert len(mid2) == 3
        out = stages[2].fn(*mid2)
        assert torch.is_tensor(out)
        assert torch.allclose(out, pipe(x0, mask=m0)[0], rtol=0, atol=1e-12)
    assert stages[1].submod is pipe.get_stage_module(1)


def test_a_first_stage_whose_module_lacks_a_later_input_takes_the_models_inputs():
    data = batches(4)
    x0, m0, _ = data[0]
    model = LateMask()
    pipe = pipeline(copy.deepcopy(model), (x0,), {"mask": m0},
                    split_spec={f"blocks.{i}": SplitPoint.BEGINNING for i in cuts(3)})
    first = pipe.build_stage(0, "cpu")
    assert list(inspect.signature(first.submod.forward).parameters) == ["x"]
    stages = [first] + [pipe.build_stage(s, "cpu") for s in (1, 2)]
    with torch.no_grad():
        mid = stages[0].fn(x0, mask=m0)
        assert any(torch.equal(t, m0) for t in mid), "the mask is handed on"
        out = stages[2].fn(*stages[1].fn(*mid))
        assert torch.allclose(out, model(x0, m0), rtol=0, atol=1e-12)
        with pytest.raises(dpl.InvalidArgument, match="the first stage takes the model's "
                           "inputs \\(x, mask\\): missing a required argument: 'mask'"):
            stages[0].fn(x0)


class OutUsesEarly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        return self.b(h), h


def test_an_output_made_before_the_last_stage_is_refused():
    pipe = pipeline(OutUsesEarly(), (torch.randn(2, 4),), split_spec={"b": SplitPoint.BEGINNING})
    with pytest.raises(dpl.InvalidArgument, match="the model's output uses .* made at stage 0; "
                       "dpl.torch returns what the last stage .1. returns"):
        pipe.build_stage(1, "cpu")


@pytest.mark.parametrize("bad", [2, -1, "0"])
def test_a_bad_stage_index_is_refused(bad):
    pipe = pipeline(OutUsesEarly(), (torch.randn(2, 4),), split_spec={"b": SplitPoint.BEGINNING})
    with pytest.raises(dpl.InvalidArgument, match=r"stage_index must be in \[0, 2\) \(got"):
        pipe.build_stage(bad, "cpu")


def test_importing_dpl_torch_does_not_load_the_tracer():
    # torch.distributed.pipelining costs seconds and ~150 MiB to import
    code = ("import sys, dpl.torch; assert 'torch.distributed.pipelining' not in sys.modules; "
            "from dpl.torch import pipeline; "
            "assert 'torch.distributed.pipelining' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
