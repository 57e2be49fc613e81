"""PyTorch's chunk specs on dpl.torch: ``args_chunk_spec`` and
``kwargs_chunk_spec`` cut the first stage's inputs along another
dimension or give them whole to every micro-batch, and
``output_merge_spec`` merges the last stage's outputs. What the first
stage receives, micro-batch by micro-batch, equals what PyTorch's own
``split_args_kwargs_into_chunks`` makes of the same inputs and specs, and
the merged output equals PyTorch's ``merge_chunks`` of the micro-batch
outputs; training equals one process. Plus the errors."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
microbatch = pytest.importorskip("torch.distributed.pipelining.microbatch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, Schedule1F1B  # noqa: E402

TensorChunkSpec = microbatch.TensorChunkSpec
Replicate = microbatch._Replicate
F, D, D_OUT, B, M = 5, 6, 3, 10, 4


class FeatureFirst(torch.nn.Module):
    """Takes x as (features, batch), a per-feature scale given whole, and
    a tag that is not a tensor; records what each call received."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(F, D, dtype=torch.float64)
        self.seen: list = []

    def forward(self, x, scale=None, tag="t"):
        if x.device.type != "meta":
            self.seen.append((x.detach().clone(), scale.detach().clone(), tag))
        return torch.tanh(self.lin((x * scale.unsqueeze(1)).t()))


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.lin = torch.nn.Linear(D, D_OUT, dtype=torch.float64)

    def forward(self, h):
        return self.lin(h)


ARGS_SPEC = (TensorChunkSpec(1),)
KWARGS_SPEC = {"scale": Replicate(), "tag": Replicate()}


def inputs():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(F, B, generator=g, dtype=torch.float64)
    scale = torch.rand(F, generator=g, dtype=torch.float64) + 0.5
    y = torch.randn(B, D_OUT, generator=g, dtype=torch.float64)
    return x, scale, y


def chunk_rank(parts, merge_spec, how):
    w = dpl.world.current()
    mod = copy.deepcopy(parts[w.rank])
    sched = Schedule1F1B(PipelineStage(mod, w.rank, 2), M, torch.nn.MSELoss(),
                         args_chunk_spec=ARGS_SPEC, kwargs_chunk_spec=KWARGS_SPEC,
                         output_merge_spec=merge_spec)
    x, scale, y = inputs()
    try:
        if w.rank == 0:
            if how == "whole":
                sched.step(x, scale=scale, tag="t")
            else:   # pre-split: PyTorch's own split of the same inputs
                a, k = microbatch.split_args_kwargs_into_chunks(
                    (x,), {"scale": scale, "tag": "t"}, M, ARGS_SPEC, KWARGS_SPEC)
                sched.step(arg_mbs=a, kwarg_mbs=k)
            return mod.seen, [p.grad.clone() for p in mod.parameters()]
        out = sched.step(target=y)
        return out, [p.grad.clone() for p in mod.parameters()]
    finally:
        sched.close()


@pytest.mark.parametrize("how", ["whole", "pre-split"])
def test_inputs_are_cut_as_pytorch_cuts_them(how):
    parts = [FeatureFirst(), Head()]
    (seen, g0), (out, g1) = dpl.run.threads(2, chunk_rank, parts, None, how, timeout=60)
    x, scale, y = inputs()
    want_args, want_kwargs = microbatch.split_args_kwargs_into_chunks(
        (x,), {"scale": scale, "tag": "t"}, M, ARGS_SPEC, KWARGS_SPEC)
    assert len(seen) == M
    for (sx, ss, tag), wa, wk in zip(seen, want_args, want_kwargs):
        assert torch.equal(sx, wa[0]) and torch.equal(ss, wk["scale"]) and tag == wk["tag"]
        assert torch.equal(ss, scale)   # whole, not cut
    # training on those micro-batches equals one process
    ref = copy.deepcopy(parts)
    for (a,), k, ys in zip(want_args, want_kwargs, y.tensor_split(M)):
        torch.nn.functional.mse_loss(ref[1](ref[0](a, **k)), ys).backward()
    for got, mod in ((g0, ref[0]), (g1, ref[1])):
        for gp, p in zip(got, mod.parameters()):
            assert float((gp - p.grad / M).abs().max() / p.grad.abs().max()) <= 1e-12
    with torch.no_grad():
        want = torch.cat([ref[1](ref[0](a, **k)) for (a,), k in zip(want_args, want_kwargs)])
    assert torch.allclose(out, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("spec", ["sum", "dim0"])
def test_outputs_are_merged_as_pytorch_merges_them(spec):
    merge = {"sum": microbatch._CustomReducer(torch.tensor(0.0, dtype=torch.float64),
                                              lambda a, b: a + b.sum()),
             "dim0": TensorChunkSpec(0)}[spec]
    parts = [FeatureFirst(), Head()]
    _, (out, _) = dpl.run.threads(2, chunk_rank, parts, merge, "whole", timeout=60)
    x, scale, _ = inputs()
    a, k = microbatch.split_args_kwargs_into_chunks(
        (x,), {"scale": scale, "tag": "t"}, M, ARGS_SPEC, KWARGS_SPEC)
    with torch.no_grad():
        chunks = [parts[1](parts[0](ai[0], **ki)) for ai, ki in zip(a, k)]
    want = microbatch.merge_chunks(chunks, merge)
    assert torch.is_tensor(out) and out.shape == want.shape
    assert torch.allclose(out, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kw,needle", [
    (dict(args_chunk_spec=(0,)), "args_chunk_spec[0]: 0 is not a TensorChunkSpec or _Replicate"),
    (dict(args_chunk_spec=TensorChunkSpec(0)), "args_chunk_spec must be a tuple of specs"),
    (dict(kwargs_chunk_spec=[TensorChunkSpec(0)]), "kwargs_chunk_spec must be a dict"),
    (dict(output_merge_spec="cat"), "output_merge_spec: 'cat' is not a TensorChunkSpec"),
])
def test_bad_specs_are_refused_naming_them(kw, needle):
    with pytest.raises(dpl.InvalidArgument) as e:
        Schedule1F1B(PipelineStage(Head(), 0, 1), 2, torch.nn.MSELoss(), **kw)
    assert needle in str(e.value)


@pytest.mark.parametrize("kw,args,needle", [
    (dict(args_chunk_spec=(TensorChunkSpec(0), TensorChunkSpec(0))), 1,
     "args_chunk_spec has 2 specs for 1 positional inputs"),
    (dict(args_chunk_spec=(TensorChunkSpec(2),)), 1,
     "positional input 0: cut along dimension 2, but it is a tensor of 2 dimensions"),
    (dict(), 2, "positional input 1 has 5 samples along dimension 0; positional input 0 "
     "has 4 along dimension 0"),
])
def test_specs_that_do_not_fit_the_inputs_are_refused(kw, args, needle):
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(D, D, dtype=torch.float64)

        def forward(self, x, z=None):
            return self.lin(x)

    sched = Schedule1F1B(PipelineStage(Two(), 0, 1), 2, torch.nn.MSELoss(), **kw)
    x = torch.zeros(4, D, dtype=torch.float64)
    try:
        with pytest.raises(dpl.InvalidArgument) as e:
            sched.step(*((x,) if args == 1 else (x, torch.zeros(5, D, dtype=torch.float64))),
                       target=x)
    finally:
        sched.close()
    assert needle in str(e.value)
