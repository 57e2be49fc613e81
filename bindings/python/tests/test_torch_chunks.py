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


# --- containers: cut and merged leaf by leaf, as PyTorch does -------------
class Nested(torch.nn.Module):
    """Takes x and a container (a tuple of a tensor cut along 1 and a dict
    of a tensor and a number); returns a dict (the last stage's output)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.lin = torch.nn.Linear(F, D_OUT, dtype=torch.float64)

    def forward(self, x, extra):
        cols, d = extra
        h = self.lin(x) * d["w"] * d["k"] + cols.t()
        return {"y": h, "aux": (h.sum(1, keepdim=True), "tag")}


NESTED_SPEC = (TensorChunkSpec(0), (TensorChunkSpec(1), {"w": TensorChunkSpec(0),
                                                          "k": Replicate()}))


def nested_inputs():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(B, F, generator=g, dtype=torch.float64)
    extra = (torch.randn(D_OUT, B, generator=g, dtype=torch.float64),
             {"w": torch.rand(B, 1, generator=g, dtype=torch.float64), "k": 2.0})
    target = (torch.randn(B, D_OUT, generator=g, dtype=torch.float64),
              torch.randn(B, 1, generator=g, dtype=torch.float64))
    return x, extra, target


def nested_loss(out, target):
    y, s = target
    return torch.nn.functional.mse_loss(out["y"], y) + \
        torch.nn.functional.mse_loss(out["aux"][0], s)


def nested_rank(model, spec, how):
    sched = Schedule1F1B(PipelineStage(model, 0, 1), M, nested_loss, args_chunk_spec=spec)
    x, extra, target = nested_inputs()
    try:
        if how == "whole":
            out = sched.step(x, extra, target=target)
        else:
            a, _ = microbatch.split_args_kwargs_into_chunks((x, extra), {}, M, NESTED_SPEC)
            out = sched.step(arg_mbs=a, target_mbs=[(y, s) for y, s in zip(
                target[0].tensor_split(M), target[1].tensor_split(M))])
        return out, [p.grad.clone() for p in model.parameters()]
    finally:
        sched.close()


@pytest.mark.parametrize("how", ["whole", "pre-split"])
def test_containers_are_cut_and_merged_leaf_by_leaf_as_pytorch_does(how):
    model = Nested()
    (out, grads), = dpl.run.threads(1, nested_rank, copy.deepcopy(model), NESTED_SPEC, how,
                                    timeout=60)
    x, extra, target = nested_inputs()
    a, k = microbatch.split_args_kwargs_into_chunks((x, extra), {}, M, NESTED_SPEC)
    assert a[0][1][0].shape == (D_OUT, 3) and a[0][1][1]["k"] == 2.0   # PyTorch's cut
    outs = []
    for (xs, es), y, s in zip(a, target[0].tensor_split(M), target[1].tensor_split(M)):
        o = model(xs, es)
        nested_loss(o, (y, s)).backward()
        outs.append(pytree_detach(o))
    for gp, p in zip(grads, model.parameters()):
        assert float((gp - p.grad / M).abs().max() / p.grad.abs().max()) <= 1e-12
    want = microbatch.merge_chunks(outs, {"y": TensorChunkSpec(0),
                                          "aux": (TensorChunkSpec(0), Replicate())})
    assert set(out) == {"y", "aux"} and out["aux"][1] == "tag"
    assert torch.allclose(out["y"], want["y"], rtol=1e-12, atol=0)
    assert torch.allclose(out["aux"][0], want["aux"][0], rtol=1e-12, atol=0)
    assert out["y"].shape == (B, D_OUT)


def pytree_detach(o):
    return {"y": o["y"].detach(), "aux": (o["aux"][0].detach(), o["aux"][1])}


def test_a_container_spec_of_another_structure_is_refused_naming_both():
    bad = (TensorChunkSpec(0), (TensorChunkSpec(1),))
    with pytest.raises(dpl.InvalidArgument, match="positional input 1: the spec's structure "):
        dpl.run.threads(1, nested_rank, Nested(), bad, "whole", timeout=60)
    with pytest.raises(dpl.InvalidArgument, match=r"positional input 0: a spec of several "
                       r"values \(\(.*TensorChunkSpec\(0\),\)\) for one value"):
        dpl.run.threads(1, nested_rank, Nested(), ((TensorChunkSpec(0),), Replicate()),
                        "whole", timeout=60)


def test_dpl_split_and_merge_of_containers_equal_pytorchs():
    from dpl.torch import microbatch as dmb
    x, extra, _ = nested_inputs()
    for spec in (None, NESTED_SPEC):
        if spec is None:   # the default: every tensor along 0
            args = (x, (extra[0].t().contiguous(), extra[1]))
        else:
            args = (x, extra)
        got, _ = dmb.split_args_kwargs_into_chunks(args, {}, M, spec)
        want, _ = microbatch.split_args_kwargs_into_chunks(args, {}, M, spec)
        assert len(got) == len(want) == M
        for g, w in zip(got, want):
            gl, gs = torch.utils._pytree.tree_flatten(g)
            wl, ws = torch.utils._pytree.tree_flatten(w)
            assert gs == ws
            assert all(torch.equal(a, b) if torch.is_tensor(a) else a == b
                       for a, b in zip(gl, wl))
    outs = [{"y": torch.randn(2, 3), "aux": (torch.randn(2, 1), torch.randn(4))}
            for _ in range(3)]
    spec = {"y": dmb.TensorChunkSpec(0), "aux": (dmb.TensorChunkSpec(1), dmb.sum_reducer)}
    tspec = {"y": TensorChunkSpec(0), "aux": (TensorChunkSpec(1), microbatch.sum_reducer)}
    got, want = dmb.merge_chunks(outs, spec), microbatch.merge_chunks(outs, tspec)
    assert torch.equal(got["y"], want["y"]) and torch.equal(got["aux"][0], want["aux"][0])
    assert torch.allclose(got["aux"][1], want["aux"][1])


class NestedFirst(torch.nn.Module):
    """A first stage taking a container; ``meta_fails`` makes the set-up's
    dry forward on meta tensors fail, so that it runs on real ones."""

    def __init__(self, meta_fails):
        super().__init__()
        torch.manual_seed(5)
        self.lin = torch.nn.Linear(F, D, dtype=torch.float64)
        self.meta_fails = meta_fails

    def forward(self, x, extra):
        if self.meta_fails and x.device.type == "meta":
            raise RuntimeError("no meta here")
        cols, d = extra
        return torch.tanh(self.lin(x) * d["w"] * d["k"]) + cols.t().sum(1, keepdim=True)


def nested_two_rank(parts):
    w = dpl.world.current()
    mod = parts[w.rank]
    sched = Schedule1F1B(PipelineStage(mod, w.rank, 2), M, torch.nn.MSELoss(),
                         args_chunk_spec=NESTED_SPEC if w.rank == 0 else None)
    x, extra, target = nested_inputs()
    try:
        if w.rank == 0:
            sched.step(x, extra)
        else:
            sched.step(target=target[0])
        return [p.grad.clone() for p in mod.parameters()]
    finally:
        sched.close()


@pytest.mark.parametrize("meta_fails", [False, True])
def test_a_first_stage_of_two_takes_containers(meta_fails):
    parts = [NestedFirst(meta_fails), Head()]
    got = dpl.run.threads(2, nested_two_rank, copy.deepcopy(parts), timeout=60)
    x, extra, target = nested_inputs()
    a, _ = microbatch.split_args_kwargs_into_chunks((x, extra), {}, M, NESTED_SPEC)
    for (xs, es), y in zip(a, target[0].tensor_split(M)):
        torch.nn.functional.mse_loss(parts[1](parts[0](xs, es)), y).backward()
    for g, part in zip(got, parts):
        for gp, p in zip(g, part.parameters()):
            assert float((gp - p.grad / M).abs().max() / p.grad.abs().max()) <= 1e-12
