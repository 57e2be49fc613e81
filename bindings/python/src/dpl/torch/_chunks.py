"""PyTorch's chunk specs as dpl.torch takes them: how the first stage's
inputs are cut into micro-batches (``args_chunk_spec``,
``kwargs_chunk_spec``) and how the last stage's outputs are put back
together (``output_merge_spec``).

An input is cut along one dimension (``TensorChunkSpec(dim)``, by default
0 for a tensor) into the micro-batches dpl's runner numbers (sizes that
differ by at most one, larger first, as ``torch.tensor_split``), or given
whole to every micro-batch (``_Replicate``, the default for a value that
is not a tensor). Specs are given per top-level argument, as a tuple for
the positional ones and a dict for the keyword ones; nested specs are
refused. An output is concatenated along a dimension
(``TensorChunkSpec``), reduced over the micro-batches (a
``_CustomReducer`` such as ``sum_reducer``), or, for a tuple, one spec per
element. The classes are PyTorch's, recognised by their names and fields
so that ``import dpl.torch`` does not load ``torch.distributed``.
"""

from __future__ import annotations

from typing import Any

import torch

from ._boundary import _bad

REPLICATE = None   # an input given whole to every micro-batch


def _is_chunk(spec: Any) -> bool:
    return type(spec).__name__ == "TensorChunkSpec" and isinstance(
        getattr(spec, "split_dim", None), int)


def _is_replicate(spec: Any) -> bool:
    return type(spec).__name__ == "_Replicate"


def _is_reducer(spec: Any) -> bool:
    return hasattr(spec, "init_value") and callable(getattr(spec, "reduce_fn", None))


def _dim(spec: Any, what: str) -> int | None:
    if _is_chunk(spec):
        return spec.split_dim
    if _is_replicate(spec):
        return REPLICATE
    raise _bad(f"{what}: {spec!r} is not a TensorChunkSpec or _Replicate (dpl.torch takes "
               "one spec per top-level argument)")


class Chunking:
    """The validated specs of one schedule. Raises InvalidArgument naming
    a spec that is not PyTorch's or is nested."""

    def __init__(self, args_spec: Any, kwargs_spec: Any, merge_spec: Any):
        if args_spec is not None and not isinstance(args_spec, (tuple, list)):
            raise _bad(f"args_chunk_spec must be a tuple of specs (got {type(args_spec).__name__})")
        if kwargs_spec is not None and not isinstance(kwargs_spec, dict):
            raise _bad(f"kwargs_chunk_spec must be a dict of specs "
                       f"(got {type(kwargs_spec).__name__})")
        self.args = None if args_spec is None else \
            [_dim(s, f"args_chunk_spec[{i}]") for i, s in enumerate(args_spec)]
        self.kwargs = None if kwargs_spec is None else \
            {k: _dim(s, f"kwargs_chunk_spec[{k!r}]") for k, s in kwargs_spec.items()}
        self.merge = merge_spec
        if merge_spec is not None:
            many = isinstance(merge_spec, (tuple, list))
            for i, s in enumerate(merge_spec if many else (merge_spec,)):
                if not (_is_chunk(s) or _is_reducer(s)):
                    raise _bad(f"output_merge_spec{f'[{i}]' if many else ''}: "
                               f"{s!r} is not a TensorChunkSpec or a _CustomReducer")

    def cut(self, args: tuple, kwargs: dict) -> tuple[tuple, int]:
        """The cut dimension (or REPLICATE) of each input, as ``(positional
        list, keyword dict)``, and the batch size: every input that is cut
        has it along its cut dimension. Raises InvalidArgument when the
        specs do not fit the inputs, when the inputs disagree on the batch
        size (naming both), or when no input is cut."""
        if self.args is not None and len(self.args) != len(args):
            raise _bad(f"args_chunk_spec has {len(self.args)} specs for {len(args)} "
                       "positional inputs")
        if self.kwargs is not None and set(self.kwargs) != set(kwargs):
            raise _bad(f"kwargs_chunk_spec has keys {sorted(self.kwargs)} for keyword inputs "
                       f"{sorted(kwargs)}")
        ad = self.args if self.args is not None else [default_dim(a) for a in args]
        kd = self.kwargs if self.kwargs is not None else \
            {k: default_dim(v) for k, v in kwargs.items()}
        named = [(f"positional input {i}", a, d) for i, (a, d) in enumerate(zip(args, ad))] + \
            [(f"keyword input {k!r}", kwargs[k], d) for k, d in kd.items()]
        batch = None
        for what, v, d in named:
            if d is REPLICATE:
                continue
            if not (torch.is_tensor(v) and -v.dim() <= d < v.dim()):
                got = f"a tensor of {v.dim()} dimensions" if torch.is_tensor(v) \
                    else type(v).__name__
                raise _bad(f"{what}: cut along dimension {d}, but it is {got}")
            n = int(v.shape[d])
            if batch is None:
                batch = (n, what, d)
            elif n != batch[0]:
                raise _bad(f"{what} has {n} samples along dimension {d}; {batch[1]} has "
                           f"{batch[0]} along dimension {batch[2]}")
        if batch is None:
            raise _bad("the first stage's inputs hold no tensor to split into micro-batches")
        return (ad, kd), batch[0]

    def merge_outputs(self, outs: list) -> Any:
        """The last stage's micro-batch outputs as one, by the merge spec
        (default: tensors concatenated along dimension 0, a tuple element
        by element, anything else taken from the first micro-batch)."""
        if not outs:
            return None
        spec = self.merge
        if isinstance(outs[0], tuple):
            specs = spec if isinstance(spec, (tuple, list)) else [spec] * len(outs[0])
            if len(specs) != len(outs[0]):
                raise _bad(f"output_merge_spec has {len(specs)} specs for an output of "
                           f"{len(outs[0])} values")
            return tuple(_merge_one([o[i] for o in outs], s) for i, s in enumerate(specs))
        return _merge_one(outs, spec)


def default_dim(v: Any) -> int | None:
    """An input's cut dimension without a spec: 0 for a tensor, else given
    whole (PyTorch's default)."""
    return 0 if torch.is_tensor(v) else REPLICATE


def _merge_one(values: list, spec: Any) -> Any:
    if spec is not None and _is_reducer(spec):
        acc = spec.init_value
        for v in values:
            acc = spec.reduce_fn(acc, v)
        return acc
    first = values[0]
    if not torch.is_tensor(first) or first.dim() < 1:
        return first
    return torch.cat(values, dim=spec.split_dim if spec is not None else 0)
