"""Inputs given already split into micro-batches (``arg_mbs``,
``kwarg_mbs``, ``target_mbs`` of ``torch.distributed.pipelining``'s
``step`` and ``eval``), joined back into the whole batch dpl splits itself.

dpl cuts a batch of B samples into M micro-batches of sizes that differ by
at most one, larger first (``torch.tensor_split``'s sizes); pre-split
inputs are accepted when their sizes are those, and refused with the sizes
named otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..runner import split
from ._boundary import _bad
from ._chunks import Chunking, Tree, columns, default_cut


def _sizes(batch: int, m: int) -> list[int]:
    """The micro-batch sizes dpl cuts a batch into (``dpl_split``)."""
    return [e - b for b, e in (split(batch, m, j) for j in range(m))]


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    return bool(a == b)


def _join(parts: list, what: str, cut: Any) -> Any:
    """One value from M micro-batch values cut by ``cut``: tensors
    concatenated along their dimension (their sizes checked); a value given
    whole to every micro-batch (REPLICATE) must be the same in each and is
    taken once; a container, leaf by leaf."""
    if not isinstance(cut, Tree):
        return _join_leaf(parts, what, cut)
    tspec, cols = columns(parts, what)
    paths = [p for p, _ in pytree.tree_flatten_with_path(parts[0])[0]]
    return pytree.tree_unflatten([_join_leaf(c, what + pytree.keystr(p), d)
                                  for c, p, d in zip(cols, paths, cut.dims)], tspec)


def _join_leaf(parts: list, what: str, dim: int | None) -> Any:
    first = parts[0]
    if dim is None:
        if not all(_same(p, first) for p in parts):
            raise _bad(f"{what}: a value given whole to every micro-batch must be the same "
                       "in each")
        return first
    if torch.is_tensor(first):
        if not all(torch.is_tensor(p) and -p.dim() <= dim < p.dim() for p in parts):
            raise _bad(f"{what}: every micro-batch needs a tensor with dimension {dim}")
        sizes = [int(p.shape[dim]) for p in parts]
        want = _sizes(sum(sizes), len(parts))
        if sizes != want:
            raise _bad(f"{what}: micro-batch sizes {sizes}; dpl splits a batch of {sum(sizes)} "
                       f"into {want} (sizes differ by at most one, larger first, as "
                       "torch.tensor_split)")
        return torch.cat(parts, dim)
    raise _bad(f"{what}: cut along dimension {dim}, but it is {type(first).__name__}")


def join_microbatches(m: int, args: tuple, kwargs: dict, target: Any, arg_mbs: Any,
                      kwarg_mbs: Any, target_mbs: Any,
                      chunking: Chunking | None = None) -> tuple[tuple, dict, Any]:
    """(args, kwargs, target) for the whole batch, from either whole-batch
    values or pre-split ones (never both, as PyTorch requires). Inputs are
    joined along their cuts (by ``chunking``'s specs; without, PyTorch's
    default: tensors along 0, other values given whole); the target as an
    input without a spec."""
    if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
        return args, kwargs, target
    if args:
        raise _bad("with pre-split inputs, pass the positional inputs through arg_mbs=..., "
                   "not as positional arguments")
    if kwargs:
        raise _bad(f"unexpected keyword arguments with pre-split inputs: "
                   f"{', '.join(sorted(kwargs))}; pass them through kwarg_mbs=...")
    if target is not None:
        raise _bad("with pre-split inputs, pass the targets through target_mbs=..., not target=")
    for name, mbs, kind in (("arg_mbs", arg_mbs, tuple), ("kwarg_mbs", kwarg_mbs, dict),
                            ("target_mbs", target_mbs, None)):
        if mbs is None:
            continue
        if not isinstance(mbs, list):
            raise _bad(f"{name} must be a list (got {type(mbs).__name__})")
        if len(mbs) != m:
            raise _bad(f"{name} has {len(mbs)} entries for {m} micro-batches")
        if kind is not None:
            for j, x in enumerate(mbs):
                if not isinstance(x, kind):
                    raise _bad(f"{name}[{j}] must be a {kind.__name__} "
                               f"(got {type(x).__name__})")
    ch = chunking or Chunking(None, None, None)
    if arg_mbs is not None:
        n = len(arg_mbs[0])
        if any(len(x) != n for x in arg_mbs):
            raise _bad(f"arg_mbs: micro-batches have {sorted({len(x) for x in arg_mbs})} "
                       "positional inputs; they need the same number")
        args = tuple(_join([x[i] for x in arg_mbs], f"arg_mbs[*][{i}]",
                           ch.arg_cut(i, arg_mbs[0][i])) for i in range(n))
    if kwarg_mbs is not None:
        keys = set(kwarg_mbs[0])
        if any(set(x) != keys for x in kwarg_mbs):
            raise _bad("kwarg_mbs: micro-batches have different keys")
        kwargs = {k: _join([x[k] for x in kwarg_mbs], f"kwarg_mbs[*][{k!r}]",
                           ch.kwarg_cut(k, kwarg_mbs[0][k])) for k in sorted(keys)}
    if target_mbs is not None:
        target = _join(list(target_mbs), "target_mbs", default_cut(target_mbs[0]))
    return args, kwargs, target
