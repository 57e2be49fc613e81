"""The benchmark's models, data and split, shared by both sides.

Every rank builds the whole model from the same seed and keeps its stage's
slice, so the two libraries train the same parameters on the same data.
Nothing here touches a process group.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

SEED = 1234


@dataclass(frozen=True)
class Case:
    """One benchmark configuration.

    name: short label ("a", "a-gpipe", "a-f64", "b", "c", "tiny");
    kind: "mlp", "transformer" or "tiny"; widths: MLP layer widths (input ..
    classes); batch: samples per step; microbatches: M; dtype: "f32" or
    "f64"; schedule: "1f1b" or "gpipe"; iters: timed steps per run by
    default; layers: transformer layers; seq, d_model, nhead, ffn: the
    transformer's shape.
    """

    name: str
    kind: str
    batch: int
    microbatches: int
    dtype: str = "f32"
    schedule: str = "1f1b"
    iters: int = 10
    widths: tuple[int, ...] = ()
    layers: int = 8
    seq: int = 64
    d_model: int = 256
    nhead: int = 4
    ffn: int = 1024


SMALL = (16,) + (64,) * 7 + (4,)
LARGE = (16,) + (1024,) * 7 + (4,)

CASES: dict[str, Case] = {
    "a": Case("a", "mlp", 64, 32, widths=SMALL, iters=100),
    "a-gpipe": Case("a-gpipe", "mlp", 64, 32, schedule="gpipe",
                    widths=SMALL, iters=100),
    "a-f64": Case("a-f64", "mlp", 64, 32, dtype="f64", widths=SMALL,
                  iters=100),
    "b": Case("b", "mlp", 256, 8, widths=LARGE, iters=20),
    "c": Case("c", "transformer", 16, 8, iters=6),
}

# --cases a,b,c expands to these rows.
GROUPS: dict[str, tuple[str, ...]] = {
    "a": ("a", "a-gpipe", "a-f64"),
    "b": ("b",),
    "c": ("c",),
}


def torch_dtype(case: Case) -> torch.dtype:
    """The torch dtype of a case ("f32" -> float32, "f64" -> float64)."""
    return {"f32": torch.float32, "f64": torch.float64}[case.dtype]


def _layers(case: Case) -> list[nn.Module]:
    if case.kind == "mlp":
        out: list[nn.Module] = []
        w = case.widths
        for i in range(len(w) - 1):
            block = [nn.Linear(w[i], w[i + 1])]
            if i < len(w) - 2:
                block.append(nn.ReLU())
            out.append(nn.Sequential(*block))
        return out
    if case.kind == "transformer":
        return [nn.TransformerEncoderLayer(case.d_model, case.nhead,
                                           dim_feedforward=case.ffn,
                                           dropout=0.0, batch_first=True)
                for _ in range(case.layers)]
    raise ValueError(f"case kind {case.kind!r} has no layers")


class Scale(nn.Module):
    """A nearly free stage: multiplies its input by one scalar parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def stage_modules(case: Case, stages: int) -> list[nn.Module]:
    """The case's model as `stages` stage modules, built once from SEED.

    Every call builds the same parameters, so every rank gets the same
    model; layers are split into `stages` contiguous groups of equal size
    (the layer count must divide evenly).
    """
    torch.manual_seed(SEED)
    if case.kind == "tiny":
        return [Scale() for _ in range(stages)]
    layers = _layers(case)
    if len(layers) % stages:
        raise ValueError(f"{len(layers)} layers do not split into "
                         f"{stages} equal stages")
    per = len(layers) // stages
    return [nn.Sequential(*layers[s * per:(s + 1) * per]).to(torch_dtype(case))
            for s in range(stages)]


def stage_module(case: Case, stage: int, stages: int) -> nn.Module:
    """Stage `stage` of `stages` of the case's model (stage_modules)."""
    return stage_modules(case, stages)[stage]


def batch_data(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed (input, target) batch of a case, the same on every rank."""
    g = torch.Generator().manual_seed(SEED + 1)
    dt = torch_dtype(case)
    if case.kind == "mlp":
        x = torch.randn(case.batch, case.widths[0], generator=g, dtype=dt)
        y = torch.randint(0, case.widths[-1], (case.batch,), generator=g)
        return x, y
    if case.kind == "transformer":
        shape = (case.batch, case.seq, case.d_model)
        return (torch.randn(shape, generator=g, dtype=dt),
                torch.randn(shape, generator=g, dtype=dt))
    x = torch.randn(case.batch, 2, generator=g, dtype=dt)
    return x, torch.zeros_like(x)


def loss_fn(case: Case) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Cross entropy for the MLPs, mean squared error otherwise."""
    if case.kind == "mlp":
        return nn.CrossEntropyLoss()
    return nn.MSELoss()


def tiny_case(stages: int, microbatches: int, iters: int) -> Case:
    """The callback-cost case: Scale stages, 2 values per sample, one
    sample per micro-batch."""
    return Case("tiny", "tiny", batch=microbatches,
                microbatches=microbatches, iters=iters)


def _forward(mods: list[nn.Module], x: torch.Tensor) -> tuple[list, torch.Tensor]:
    """Every stage's forward of one micro-batch, a stage's input the
    previous stage's output detached (as a pipeline stage receives it):
    the (input, output) of each stage and the last output."""
    inp, chain = x, []
    for s, m in enumerate(mods):
        if s > 0:
            inp = inp.detach().requires_grad_(True)
        out = m(inp)
        chain.append((inp, out))
        inp = out
    return chain, inp


def _backward(chain: list, loss: torch.Tensor) -> None:
    """Every stage's backward of one micro-batch, last stage first, each
    handing its input's gradient to the stage before."""
    grad = None
    for s in reversed(range(len(chain))):
        inp, out = chain[s]
        torch.autograd.backward(loss if s == len(chain) - 1 else out, grad)
        grad = inp.grad if s > 0 else None


def tiny_ops_seconds(stages: int, microbatches: int, steps: int,
                     warmup: int = 20) -> float:
    """Seconds per step of the callback case's torch work alone: every
    stage's forward and backward of every micro-batch, in this process and
    thread, no pipeline, no transfers (a stage's input is the previous
    stage's output detached, as a pipeline stage receives it)."""
    torch.set_num_threads(1)
    case = tiny_case(stages, microbatches, steps)
    mods = stage_modules(case, stages)
    x, y = batch_data(case)
    lf = loss_fn(case)

    def one() -> None:
        kept = []
        for j in range(microbatches):
            chain, out = _forward(mods, x[j:j + 1])
            kept.append((chain, lf(out, y[j:j + 1])))
        for chain, loss in kept:
            _backward(chain, loss)

    for _ in range(warmup):
        one()
    t = time.perf_counter()
    for _ in range(steps):
        one()
    return (time.perf_counter() - t) / steps


def serial_cpu_seconds(case: Case, stages: int, steps: int,
                       warmup: int = 2) -> float:
    """CPU seconds per step of a case's torch work alone, in this process
    and one thread: every stage's forward and backward of every
    micro-batch (a stage's input the previous stage's output detached, as
    a pipeline stage receives it), then each stage's SGD step and
    zero_grad as the ranks do; no pipeline, no transfers, no other
    process. What `stages` ranks on C CPUs cannot beat: this over
    min(stages, C) per step."""
    torch.set_num_threads(1)
    mods = stage_modules(case, stages)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in mods]
    x, y = batch_data(case)
    xs, ys = x.tensor_split(case.microbatches), y.tensor_split(case.microbatches)
    lf = loss_fn(case)

    def one() -> None:
        for xj, yj in zip(xs, ys):
            chain, out = _forward(mods, xj)
            _backward(chain, lf(out, yj))
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=False)

    for _ in range(warmup):
        one()
    t = time.process_time()
    for _ in range(steps):
        one()
    return (time.process_time() - t) / steps


def stage_work(case: Case, stage: int, stages: int) -> Callable[[], None]:
    """One step of stage `stage`'s torch work with no pipeline around it:
    the forward and backward of every micro-batch on inputs made once up
    front (the earlier stages' outputs, detached, as the stage receives
    them), the last stage's loss or else a fixed output gradient, then an
    SGD step and zero_grad as the ranks do. Returns the step function."""
    torch.set_num_threads(1)
    mods = stage_modules(case, stages)
    mod = mods[stage]
    opt = torch.optim.SGD(mod.parameters(), lr=1e-3)
    x, y = batch_data(case)
    ins = []
    with torch.no_grad():
        for xj in x.tensor_split(case.microbatches):
            for m in mods[:stage]:
                xj = m(xj)
            ins.append(xj)
    ys = y.tensor_split(case.microbatches)
    lf = loss_fn(case)
    last = stage == stages - 1

    def one() -> None:
        for xj, yj in zip(ins, ys):
            inp = xj.detach().requires_grad_(stage > 0)
            out = mod(inp)
            if last:
                torch.autograd.backward(lf(out, yj))
            else:
                torch.autograd.backward(out, torch.ones_like(out))
        opt.step()
        opt.zero_grad(set_to_none=False)

    return one
