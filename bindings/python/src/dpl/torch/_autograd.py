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

_engine = getattr(getattr(torch.autograd, "graph", None), "_engine_run_backward", None)
_Tensor = torch.Tensor


def _plain(t: torch.Tensor) -> bool:
    return type(t) is _Tensor or type(t) is torch.nn.Parameter


def backward(out: torch.Tensor, grad: torch.Tensor | None) -> None:
    """``torch.autograd.backward(out, grad)``: accumulate into the leaves'
    ``.grad``; frees the graph. ``grad`` None only for a one-element
    ``out`` (a loss). Raises what autograd raises."""
    if _engine is None or not _plain(out) or (grad is None and out.numel() != 1):
        torch.autograd.backward(out, grad)
        return
    if grad is None:
        grad = torch.ones_like(out, memory_format=torch.preserve_format)
    _engine((out,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)


def grad(out: torch.Tensor, inputs: Sequence[torch.Tensor], grad_out: torch.Tensor | None,
         retain_graph: bool) -> tuple:
    """``torch.autograd.grad(out, inputs, grad_out, retain_graph=...,
    allow_unused=True)``: the gradients of ``inputs`` (None for an unused
    one), nothing accumulated. Raises what autograd raises."""
    if _engine is None or not _plain(out) or (grad_out is None and out.numel() != 1) \
            or not all(_plain(t) for t in inputs):
        return torch.autograd.grad(out, list(inputs), grad_out, retain_graph=retain_graph,
                                   allow_unused=True)
    if grad_out is None:
        grad_out = torch.ones_like(out, memory_format=torch.preserve_format)
    return _engine((out,), (grad_out,), retain_graph, False, tuple(inputs), True,
                   accumulate_grad=False)


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
