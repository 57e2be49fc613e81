"""The autograd calls of dpl.torch's stage callbacks.

``torch.autograd.backward`` and ``torch.autograd.grad`` check and convert
their arguments in Python before they enter the C++ engine: on the small
tensors of a pipeline's micro-batches that costs about as much as the
backward itself (40-50 us a call on this project's reference CPU against
140 us for the engine's work on a 2-layer, 64-wide stage). dpl.torch makes
every gradient it passes itself, as a view of dpl's buffer with the
output's shape and dtype, so those checks hold by construction; these
functions go to the engine's entry point directly (as Megatron-LM's
``custom_backward`` does) and fall back to the public functions when:

- the installed torch has no ``torch.autograd.graph._engine_run_backward``
  or it does not behave as expected on a self-test at import;
- a tensor is a subclass (``__torch_function__`` must see the call);
- the implicit gradient of a non-scalar output is asked for (the public
  function raises its own message).

Either way the result is the same: same engine, same accumulation into
``.grad``. Called on the rank's thread only.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ._boundary import as_tuple

_engine = getattr(getattr(torch.autograd, "graph", None), "_engine_run_backward", None)
_Tensor = torch.Tensor


def _plain(t: torch.Tensor) -> bool:
    return type(t) is _Tensor or type(t) is torch.nn.Parameter


def _engine_grads(outs: tuple, grads: tuple) -> tuple | None:
    """``grads`` as the engine takes them (ones for a loss's None), or
    None where the public function must run instead (a subclass, or the
    implicit gradient of a non-scalar output)."""
    if len(outs) == 1:   # the common case, without the loop
        o, g = outs[0], grads[0]
        if not _plain(o) or (g is None and o.numel() != 1):
            return None
        return grads if g is not None else \
            (torch.ones_like(o, memory_format=torch.preserve_format),)
    fixed = []
    for o, g in zip(outs, grads):
        if not _plain(o):
            return None
        if g is None:
            if o.numel() != 1:
                return None
            g = torch.ones_like(o, memory_format=torch.preserve_format)
        fixed.append(g)
    return tuple(fixed)


def backward(out, grad) -> None:
    """``torch.autograd.backward(out, grad)``: accumulate into the leaves'
    ``.grad``; frees the graph. ``out`` is a tensor or a sequence of them,
    ``grad`` the same number of gradients; a gradient may be None only
    for a one-element output (a loss). Raises what autograd raises."""
    outs, grads = as_tuple(out), as_tuple(grad)
    gs = _engine_grads(outs, grads) if _engine is not None else None
    if gs is None:
        torch.autograd.backward(list(outs), list(grads))
        return
    _engine(outs, gs, False, False, (), allow_unreachable=True, accumulate_grad=True)


def grad(out, inputs: Sequence[torch.Tensor], grad_out, retain_graph: bool) -> tuple:
    """``torch.autograd.grad(out, inputs, grad_out, retain_graph=...,
    allow_unused=True)``: the gradients of ``inputs`` (None for an unused
    one), nothing accumulated. ``out`` and ``grad_out`` as in
    :func:`backward`. Raises what autograd raises."""
    outs, gouts = as_tuple(out), as_tuple(grad_out)
    gs = _engine_grads(outs, gouts) if _engine is not None else None
    if gs is not None:
        for t in inputs:
            if not _plain(t):
                gs = None
                break
    if gs is None:
        return torch.autograd.grad(list(outs), list(inputs), list(gouts),
                                   retain_graph=retain_graph, allow_unused=True)
    return _engine(outs, gs, retain_graph, False, tuple(inputs), True, accumulate_grad=False)


def _self_test() -> bool:
    """Whether the engine entry point gives the public functions' results
    on a small graph (its signature is torch's private business)."""
    try:
        w = torch.nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64))
        x = torch.tensor([[0.5, -1.0]], dtype=torch.float64, requires_grad=True)
        g = torch.tensor([[1.0, 0.25]], dtype=torch.float64)
        y = x @ w
        (gx,) = _engine((y,), (g,), True, False, (x,), True, accumulate_grad=False)
        if x.grad is not None or w.grad is not None or not torch.equal(gx, g @ w.detach().t()):
            return False
        _engine((y,), (g,), False, False, (), allow_unreachable=True, accumulate_grad=True)
        return torch.equal(w.grad, x.detach().t() @ g) and torch.equal(x.grad, gx)
    except Exception:  # noqa: BLE001 - any change of the private API
        return False


if _engine is not None and not _self_test():
    _engine = None


def uses_engine() -> bool:
    """True when the direct engine path is in use (else the public API)."""
    return _engine is not None
