"""dpl.torch.profile: measure a PyTorch model layer by layer into a dpl.Profile.

The planner (:func:`dpl.plan`) needs, per layer at one batch size, the
forward and backward time, the output activation size and the weight
size. :func:`profile` measures them on the sample's device and returns a
:class:`dpl.Profile` (a chain of the layers in order).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from .._plan_inputs import Layer, PathLike, Profile, _fail, _int


def _tensors(x: Any) -> list[torch.Tensor]:
    """The tensors in a layer's output (a tensor, or nested tuples, lists
    and dict values of them)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _detach(x: Any) -> Any:
    """``x`` with every floating-point tensor detached and requiring grad
    (the layer's input, so that its backward includes the input gradient)."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return x.requires_grad_(True) if x.is_floating_point() or x.is_complex() else x
    if isinstance(x, tuple):
        return tuple(_detach(v) for v in x)
    if isinstance(x, list):
        return [_detach(v) for v in x]
    if isinstance(x, dict):
        return {k: _detach(v) for k, v in x.items()}
    return x


def _call(layer: torch.nn.Module, x: Any) -> Any:
    return layer(*x) if isinstance(x, tuple) else layer(x)


def _timer(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":
        def now() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()
        return now
    return time.perf_counter


def _nbytes(ts: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _layer_name(key: str, module: torch.nn.Module) -> str:
    return f"{type(module).__name__}_{key}"


def profile(layers: torch.nn.Sequential | Sequence[torch.nn.Module], sample: Any, *,
            iterations: int = 10, warmup: int = 3, path: PathLike | None = None,
            name: str | None = None) -> Profile:
    """Profile ``layers`` (an ``nn.Sequential`` or a list of modules, run in
    order, each on the previous one's output) on ``sample`` (a tensor, or a
    tuple of the first layer's arguments, on the device to measure on; its
    first dimension is the profile batch size, ``Profile.batch``).

    Per layer, on its own and with its input detached and requiring grad:
    the forward time and the backward time (torch.autograd.grad of the
    outputs, with gradients of ones, to the input and the layer's
    parameters; the parameters' ``.grad`` are left untouched), each the
    median over ``iterations`` runs after ``warmup`` runs, in ms, CUDA
    synchronised around each run on a GPU; the activation bytes (the
    output tensors' bytes at this batch) and the parameter bytes (each
    parameter tensor counted once). Layers run in their current mode
    (train/eval); run this before training, as it calls the layers
    (dropout and batch-norm statistics change as in a forward pass).

    Layer names are ``Class_key`` (the Sequential's child names, or list
    indices); the edges are a chain. ``name`` names the profile (default
    ``path`` or "torch"). With ``path`` the profile is also written there
    in the text format (``dpl plan --profile`` reads it) through a
    temporary file and a rename.

    Blocks while measuring (about (warmup + iterations) x 2 passes of the
    model). Raises InvalidArgument for empty layers, bad counts or a
    sample without a batch dimension; a layer's own exception otherwise.
    """
    if isinstance(layers, torch.nn.Sequential):
        items = [(k, m) for k, m in layers.named_children()]
    else:
        items = [(str(i), m) for i, m in enumerate(layers)]
    if not items:
        raise _fail("profile: no layers")
    for k, m in items:
        if not isinstance(m, torch.nn.Module):
            raise _fail(f"profile: layer {k} is {type(m).__name__}, not an nn.Module")
    iterations = _int("profile iterations", iterations, 1, 1 << 20)
    warmup = _int("profile warmup", warmup, 0, 1 << 20)
    first = _tensors(sample)
    if not first or first[0].dim() < 1:
        raise _fail("profile: sample must be a tensor (or tuple of tensors) with a batch "
                    "dimension")
    batch = int(first[0].shape[0])
    if batch < 1:
        raise _fail("profile: sample has an empty batch (first dimension 0)")
    device = first[0].device
    now = _timer(device)
    out = []
    x = sample
    gc_was = gc.isenabled()
    try:
        with torch.enable_grad():
            for key, layer in items:
                gc.collect()
                gc.disable()   # no collector pauses inside the timed runs
                f_ms, b_ms, y = _measure(layer, x, iterations, warmup, now)
                if gc_was:
                    gc.enable()
                seen: set[int] = set()
                pbytes = 0
                for p in layer.parameters():
                    if id(p) not in seen:
                        seen.add(id(p))
                        pbytes += p.numel() * p.element_size()
                out.append(Layer(_layer_name(key, layer), f_ms, b_ms, _nbytes(_tensors(y)),
                                 pbytes))
                x = _strip(y)
    finally:
        if gc_was:
            gc.enable()
    prof = Profile.from_layers(out, name=name or (str(path) if path is not None else "torch"),
                               batch=batch)
    if path is not None:
        prof.save(path)
    return prof


def _strip(y: Any) -> Any:
    """The output detached from the graph (the next layer's input)."""
    if isinstance(y, torch.Tensor):
        return y.detach()
    if isinstance(y, tuple):
        return tuple(_strip(v) for v in y)
    if isinstance(y, list):
        return [_strip(v) for v in y]
    if isinstance(y, dict):
        return {k: _strip(v) for k, v in y.items()}
    return y


def _measure(layer: torch.nn.Module, x: Any, iterations: int, warmup: int,
             now: Callable[[], float]) -> tuple[float, float, Any]:
    """Median forward and backward ms of ``layer`` on ``x``, and an output."""
    params = [p for p in layer.parameters() if p.requires_grad]
    fwd, bwd = [], []
    y = None
    for it in range(warmup + iterations):
        inp = _detach(x)
        wrt = [t for t in _tensors(inp) if t.requires_grad] + params
        t0 = now()
        y = _call(layer, inp)
        t1 = now()
        outs = [t for t in _tensors(y) if t.requires_grad]
        if outs and wrt:
            grads = [torch.ones_like(t) for t in outs]
            t2 = now()
            torch.autograd.grad(outs, wrt, grads, allow_unused=True)
            t3 = now()
        else:
            t2 = t3 = 0.0
        if it >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t3 - t2)
    return statistics.median(fwd) * 1e3, statistics.median(bwd) * 1e3, y
