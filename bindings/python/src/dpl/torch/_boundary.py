"""What one stage hands the next: one tensor or a tuple of them, laid out
in the single buffer dpl moves per micro-batch.

PyTorch's stages may return a tuple of tensors; the next stage's forward
takes them as positional arguments (a lone tensor is a tuple of one).
dpl's runner moves one buffer of ``n * per_sample`` bytes per micro-batch
of ``n`` samples between two stages, and one of the same size for the
gradients, with the samples one after the other (``<dpl/runner.h>``:
replicas of different counts send each other ranges of samples). So a
sample's bytes hold each tensor's part of it in turn, each part padded to
``_ALIGN`` bytes so that every dtype's view is aligned, and each tensor is
a strided view of the buffer (rows of ``per_sample`` bytes); a lone
tensor is the buffer itself, unpadded and contiguous. The gradient buffer
has the same layout; the part of a tensor that has no gradient (an
integer or bool tensor, one that does not require grad, or an input the
stage did not use) holds zeros.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .. import errors

_ALIGN = 16   # bytes per sample; covers every dtype's element size


def _bad(msg: str) -> errors.InvalidArgument:
    """dpl.torch's error for a bad argument or value (``DPL_EINVAL``)."""
    return errors.InvalidArgument(errors.EINVAL, "DPL_EINVAL", msg)


def differentiable(dtype: torch.dtype) -> bool:
    """Whether a received tensor of ``dtype`` is made to require grad (as
    PyTorch: floating point and complex only)."""
    return dtype.is_floating_point or dtype.is_complex


def as_tuple(out: Any) -> tuple:
    """A stage's output as the tuple the next stage is called with (a
    tuple itself as it is: the callbacks and autograd calls pass tuples)."""
    if type(out) is tuple:
        return out
    if isinstance(out, (tuple, list)):
        return tuple(out)
    return (out,)


class Layout:
    """Where each of a boundary's tensors sits in dpl's buffer.

    ``metas``: one ``(per-sample shape, dtype)`` per tensor, in the order
    the stage returns them. Read-only once made; the views it hands out
    are cached per buffer (dpl's buffers never move).
    """

    def __init__(self, metas: Sequence[tuple]):
        if not metas:
            raise _bad("a stage must hand at least one tensor to the next")
        self.metas = [(tuple(s), d) for s, d in metas]
        self.bytes = [_nbytes(m) for m in self.metas]
        self.offsets: list[int] = []
        off = 0
        for b in self.bytes:
            self.offsets.append(off)
            off += -(-b // _ALIGN) * _ALIGN
        # one tensor: the buffer itself, unpadded (rows of any size)
        self.per_sample = self.bytes[0] if len(self.bytes) == 1 else off
        self.grad_mask = [differentiable(d) for _, d in self.metas]
        # one tensor: the callbacks' fast path
        self.single = len(self.metas) == 1
        self._cache: dict[tuple, tuple] = {}

    def views(self, a: Any, which: str, n: int) -> tuple:
        """The boundary's tensors for ``n`` samples, each a view of dpl's
        buffer ``which`` of the stage args ``a`` (no copy)."""
        if self.single:
            shape, dtype = self.metas[0]
            return (a.tensor(which, dtype, (n, *shape)),)
        raw = a.tensor(which, torch.uint8)
        key = (raw.data_ptr(), raw.numel(), n)
        v = self._cache.get(key)
        if v is None:
            rows = raw[:n * self.per_sample].view(n, self.per_sample)
            v = tuple(rows[:, off:off + b].view(dtype).view(n, *shape)
                      for (shape, dtype), off, b in zip(self.metas, self.offsets, self.bytes))
            self._cache[key] = v
        return v

    def check(self, out: tuple, stage: int, mb: int, n: int) -> None:
        """Raise InvalidArgument naming the stage, micro-batch and tensor
        when ``out`` does not match the layout fixed at the first step."""
        if len(out) != len(self.metas):
            raise _bad(f"stage {stage} micro-batch {mb}: returned {len(out)} values, the first "
                       f"step returned {len(self.metas)}")
        for i, (t, (shape, dtype)) in enumerate(zip(out, self.metas)):
            if not torch.is_tensor(t):
                raise _bad(f"stage {stage} returned {type(t).__name__} as output {i}; "
                           "dpl.torch carries tensors between stages")
            if tuple(t.shape) != (n, *shape) or t.dtype != dtype:
                what = "output" if self.single else f"output {i}"
                raise _bad(f"stage {stage} micro-batch {mb}: {what} {tuple(t.shape)} "
                           f"{t.dtype}, expected {(n, *shape)} {dtype} (from the first step)")

    def to_json(self) -> list:
        """The layout as JSON values (for the set-up exchange)."""
        return [[list(s), str(d).replace("torch.", "")] for s, d in self.metas]

    @classmethod
    def from_json(cls, v: list) -> "Layout":
        """The layout :meth:`to_json` described."""
        return cls([(tuple(s), getattr(torch, d)) for s, d in v])


def meta_of_output(out: Any, stage: int) -> list[tuple]:
    """``(per-sample shape, dtype)`` of each tensor a stage returned (on a
    sample of one), refusing what dpl cannot carry."""
    outs = as_tuple(out)
    if not outs:
        raise _bad(f"stage {stage} returned an empty {type(out).__name__}; it must hand "
                   "at least one tensor to the next stage")
    metas = []
    for i, t in enumerate(outs):
        if not torch.is_tensor(t):
            raise _bad(f"stage {stage} returned {type(t).__name__} as output {i}; dpl.torch "
                       "carries tensors between stages (one, or a tuple of them)")
        if t.dim() < 1:
            raise _bad(f"stage {stage} output {i} is a scalar; tensors between stages need "
                       "the micro-batch as their first dimension")
        metas.append((tuple(t.shape[1:]), t.dtype))
    return metas


def metas_of_example(example: Any, what: str, allow_none: bool = False) -> list:
    """``(per-sample shape, dtype)`` of each tensor of an example given to
    PipelineStage (``input_args``/``output_args``, and with ``allow_none``
    the gradients ``input_grads``/``output_grads``, whose None entries
    stay None): a tensor, or a tuple or list of tensors with the
    micro-batch as first dimension."""
    ex = as_tuple(example)
    if not ex:
        raise _bad(f"{what}: an empty {type(example).__name__}")
    metas: list = []
    for i, t in enumerate(ex):
        if t is None and allow_none:
            metas.append(None)
        elif not torch.is_tensor(t) or t.dim() < 1:
            raise _bad(f"{what}: value {i} must be a tensor with the micro-batch as first "
                       f"dimension (got {type(t).__name__})")
        else:
            metas.append((tuple(t.shape[1:]), t.dtype))
    return metas


def check_grad_metas(grads: list | None, metas: Sequence[tuple] | None, what: str) -> None:
    """Check example gradients (``metas_of_example(..., allow_none=True)``)
    against the tensors they are the gradients of: dpl moves a gradient
    in its tensor's layout, so each given one must have its tensor's
    per-sample shape and dtype. Raises InvalidArgument naming ``what``."""
    if grads is None or metas is None:
        return
    if len(grads) != len(metas):
        raise _bad(f"{what}: {len(grads)} gradients for {len(metas)} tensors")
    for i, (g, m) in enumerate(zip(grads, metas)):
        if g is not None and g != m:
            raise _bad(f"{what}: gradient {i} has per-sample shape {list(g[0])} and {g[1]}; "
                       f"its tensor has {list(m[0])} and {m[1]} (dpl moves a gradient in its "
                       "tensor's layout)")


def kept_output(out: Any, buf: int | None) -> Any:
    """A last stage's output as kept for the caller: detached, and cloned
    where it shares storage ``buf`` (dpl's input buffer)."""
    def one(t: Any) -> Any:
        if not torch.is_tensor(t):
            return t
        t = t.detach()
        return t.clone() if buf is not None and t.untyped_storage().data_ptr() == buf else t
    return tuple(one(t) for t in out) if isinstance(out, (tuple, list)) else one(out)


def _nbytes(meta: tuple) -> int:
    shape, dtype = meta
    n = 1
    for d in shape:
        n *= d
    return n * torch.empty((), dtype=dtype).element_size()
