"""PyTorch's chunk specs as dpl.torch takes them: how the first stage's
inputs (and the last stage's target) are cut into micro-batches
(``args_chunk_spec``, ``kwargs_chunk_spec``) and how the last stage's
outputs are put back together (``output_merge_spec``).

A tensor is cut along one dimension (``TensorChunkSpec(dim)``, by default
0) into the micro-batches dpl's runner numbers (sizes that differ by at
most one, larger first, as ``torch.tensor_split``), or given whole to every
micro-batch (``_Replicate``, the default for a value that is not a
tensor). A container (tuple, list, dict, or any other pytree node) is cut
leaf by leaf, as PyTorch cuts it: its spec is a container of the same
structure, or one spec for all its leaves, or none (each tensor leaf along
dimension 0). Specs are given per top-level argument, as a tuple for the
positional ones and a dict for the keyword ones. An output is
concatenated along a dimension (``TensorChunkSpec``), reduced over the
micro-batches (a ``_CustomReducer`` such as ``sum_reducer``), or, for a
container, leaf by leaf. The spec classes are PyTorch's or
``dpl.torch.microbatch``'s, recognised by their names and fields so that
``import dpl.torch`` does not load ``torch.distributed``.

A value's cut is an int (a tensor's dimension), ``REPLICATE`` (the value
whole), or a :class:`Tree` (a container's structure and each leaf's cut).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from ._boundary import _bad

REPLICATE = None   # a value given whole to every micro-batch


class Tree:
    """The cut of a container: its pytree structure and, per leaf, a
    dimension or REPLICATE."""

    __slots__ = ("spec", "dims")

    def __init__(self, spec: Any, dims: list):
        self.spec, self.dims = spec, dims


def _is_chunk(spec: Any) -> bool:
    return type(spec).__name__ == "TensorChunkSpec" and isinstance(
        getattr(spec, "split_dim", None), int)


def _is_replicate(spec: Any) -> bool:
    return type(spec).__name__ == "_Replicate"


def _is_reducer(spec: Any) -> bool:
    return hasattr(spec, "init_value") and callable(getattr(spec, "reduce_fn", None))


def _is_leaf_spec(spec: Any) -> bool:
    return _is_chunk(spec) or _is_replicate(spec) or _is_reducer(spec)


def _leaf_dim(v: Any, spec: Any) -> int | None:
    if spec is None:
        return 0 if torch.is_tensor(v) else REPLICATE
    return spec.split_dim if _is_chunk(spec) else REPLICATE


def _check_spec(spec: Any, what: str, merge: bool = False) -> None:
    """Refuse a spec tree with a leaf that is no input spec
    (TensorChunkSpec, _Replicate) or, with ``merge``, no output spec
    (TensorChunkSpec, _CustomReducer)."""
    if spec is None:
        return
    other, kinds = (_is_reducer, "a _CustomReducer") if merge else (_is_replicate, "_Replicate")
    for s in pytree.tree_leaves(spec, is_leaf=_is_leaf_spec):
        if not (_is_chunk(s) or other(s)):
            raise _bad(f"{what}: {s!r} is not a TensorChunkSpec or {kinds}")


def cut_of(v: Any, spec: Any, what: str) -> Any:
    """The cut of value ``v`` under ``spec`` (None: PyTorch's default).
    Raises InvalidArgument when a container spec's structure is not the
    value's."""
    if _is_replicate(spec):
        return REPLICATE
    leaves, tspec = ([v], None) if torch.is_tensor(v) else pytree.tree_flatten(v)
    if tspec is None or tspec.is_leaf():
        if spec is not None and not _is_chunk(spec):
            raise _bad(f"{what}: a spec of several values ({spec!r}) for one value")
        return _leaf_dim(v, spec)
    if spec is None or _is_leaf_spec(spec):
        return Tree(tspec, [_leaf_dim(x, spec) for x in leaves])
    sleaves, sspec = pytree.tree_flatten(spec, is_leaf=_is_leaf_spec)
    if sspec != tspec:
        raise _bad(f"{what}: the spec's structure {sspec} is not the input's {tspec}")
    return Tree(tspec, [_leaf_dim(x, s) for x, s in zip(leaves, sleaves)])


def _named_leaves(v: Any, d: Any, what: str) -> list[tuple[str, Any, Any]]:
    """(name, value, cut) of each leaf of ``v`` under its cut ``d``."""
    if not isinstance(d, Tree):
        return [(what, v, d)]
    pairs, _ = pytree.tree_flatten_with_path(v)
    return [(what + pytree.keystr(p), x, dd) for (p, x), dd in zip(pairs, d.dims)]


def split(v: Any, d: Any, sections: Any) -> list | None:
    """``v`` cut by ``d`` at ``sections`` (``torch.tensor_split``'s
    argument): one value per piece, or None when ``v`` goes whole."""
    if d is REPLICATE:
        return None
    if not isinstance(d, Tree):
        return list(v.tensor_split(sections, d)) if torch.is_tensor(v) else None
    leaves = _leaves_of(v, d)
    cut = [None if dd is REPLICATE else x.tensor_split(sections, dd)
           for x, dd in zip(leaves, d.dims)]
    n = next((len(p) for p in cut if p is not None), 0)
    if n == 0:
        return None
    return [pytree.tree_unflatten([x if p is None else p[k] for x, p in zip(leaves, cut)],
                                  d.spec) for k in range(n)]


def _leaves_of(v: Any, d: Tree) -> list:
    leaves, tspec = pytree.tree_flatten(v)
    if tspec != d.spec:
        raise _bad(f"an input has the structure {tspec}; its cut was made for {d.spec}")
    return leaves


def _map(v: Any, d: Any, fn: Any) -> Any:
    """``v`` with ``fn(tensor, dim)`` applied to each tensor cut by ``d``."""
    if d is REPLICATE:
        return v
    if not isinstance(d, Tree):
        return fn(v, d)
    return pytree.tree_unflatten([x if dd is REPLICATE else fn(x, dd)
                                  for x, dd in zip(_leaves_of(v, d), d.dims)], d.spec)


def narrow(v: Any, d: Any, begin: int, n: int) -> Any:
    """Samples [begin, begin + n) of ``v`` along its cut."""
    return _map(v, d, lambda x, dim: x.narrow(dim, begin, n))


def repeat(v: Any, d: Any, times: int) -> Any:
    """``v`` with its samples ``times`` times over (for a dry forward)."""
    return _map(v, d, lambda x, dim: torch.cat([x] * times, dim))


def columns(values: list, what: str, strict: bool = True) -> tuple[Any, list]:
    """Values of one structure (one per micro-batch), leaf by leaf: the
    first value's structure and, per leaf, its value in each. Raises
    InvalidArgument naming a value of another structure; ``strict=False``
    compares leaf counts only (``tree_leaves`` costs two thirds of
    ``tree_flatten``, which builds the structure to compare)."""
    leaves0, tspec = pytree.tree_flatten(values[0])
    flat = [leaves0]
    for j, v in enumerate(values[1:], 1):
        if strict:
            leaves, sp = pytree.tree_flatten(v)
            if sp != tspec:
                raise _bad(f"{what}: micro-batch {j} has the structure {sp}; micro-batch 0 "
                           f"has {tspec}")
        else:
            leaves = pytree.tree_leaves(v)
            if len(leaves) != len(leaves0):
                raise _bad(f"{what} differ in structure between micro-batches")
        flat.append(leaves)
    return tspec, [list(c) for c in zip(*flat)]


class Chunking:
    """The validated specs of one schedule. Raises InvalidArgument naming
    a spec that is not PyTorch's."""

    def __init__(self, args_spec: Any, kwargs_spec: Any, merge_spec: Any):
        if args_spec is not None and not isinstance(args_spec, (tuple, list)):
            raise _bad(f"args_chunk_spec must be a tuple of specs (got {type(args_spec).__name__})")
        if kwargs_spec is not None and not isinstance(kwargs_spec, dict):
            raise _bad(f"kwargs_chunk_spec must be a dict of specs "
                       f"(got {type(kwargs_spec).__name__})")
        for i, s in enumerate(args_spec or ()):
            _check_spec(s, f"args_chunk_spec[{i}]")
        for k, s in (kwargs_spec or {}).items():
            _check_spec(s, f"kwargs_chunk_spec[{k!r}]")
        self.args = None if args_spec is None else list(args_spec)
        self.kwargs = None if kwargs_spec is None else dict(kwargs_spec)
        _check_spec(merge_spec, "output_merge_spec", merge=True)
        self.merge = merge_spec

    def arg_cut(self, i: int, v: Any) -> Any:
        """The cut of positional input ``i`` (value ``v``)."""
        return cut_of(v, self.args[i] if self.args is not None and i < len(self.args)
                      else None, f"positional input {i}")

    def kwarg_cut(self, k: str, v: Any) -> Any:
        """The cut of keyword input ``k`` (value ``v``)."""
        return cut_of(v, self.kwargs.get(k) if self.kwargs is not None else None,
                      f"keyword input {k!r}")

    def cut(self, args: tuple, kwargs: dict) -> tuple[tuple, int]:
        """The cut of each input, as ``(positional list, keyword dict)``,
        and the batch size: every tensor that is cut has it along its cut
        dimension. Raises InvalidArgument when the specs do not fit the
        inputs, when the inputs disagree on the batch size (naming both),
        or when no input is cut."""
        if self.args is not None and len(self.args) != len(args):
            raise _bad(f"args_chunk_spec has {len(self.args)} specs for {len(args)} "
                       "positional inputs")
        ad = [self.arg_cut(i, a) for i, a in enumerate(args)]
        kd, named = self._kwarg_cuts(kwargs)
        named = [x for i, (a, d) in enumerate(zip(args, ad))
                 for x in _named_leaves(a, d, f"positional input {i}")] + named
        batch = batch_of(named)
        if batch is None:
            raise _bad("the first stage's inputs hold no tensor to split into micro-batches")
        return (ad, kd), batch

    def cut_kwargs(self, kwargs: dict) -> tuple[tuple, int | None]:
        """:meth:`cut` for a rank without the first stage, whose step
        passes keyword inputs only (PyTorch hands them to every stage of
        the rank): the positional specs are the first stage's business,
        and the batch is None when no keyword input is cut."""
        kd, named = self._kwarg_cuts(kwargs)
        return ([], kd), batch_of(named)

    def _kwarg_cuts(self, kwargs: dict) -> tuple[dict, list]:
        if self.kwargs is not None and set(self.kwargs) != set(kwargs):
            raise _bad(f"kwargs_chunk_spec has keys {sorted(self.kwargs)} for keyword inputs "
                       f"{sorted(kwargs)}")
        kd = {k: self.kwarg_cut(k, v) for k, v in kwargs.items()}
        return kd, [x for k, d in kd.items()
                    for x in _named_leaves(kwargs[k], d, f"keyword input {k!r}")]

    def merge_outputs(self, outs: list) -> Any:
        """The last stage's micro-batch outputs as one, by the merge spec
        (default: each tensor of the output concatenated along dimension
        0; a value that is not a tensor, or a 0-dimensional one, taken
        from the first micro-batch). Raises InvalidArgument when the spec's
        structure is not the output's."""
        if not outs:
            return None
        spec = self.merge
        if torch.is_tensor(outs[0]) and (spec is None or _is_leaf_spec(spec)):
            return _merge_one(outs, spec)   # the common case, without pytree's walk
        tspec, cols = columns(outs, "the last stage's outputs", strict=False)
        if spec is None or _is_leaf_spec(spec):
            specs = [spec] * len(cols)
        else:
            specs, sspec = pytree.tree_flatten(spec, is_leaf=_is_leaf_spec)
            if sspec != tspec:
                raise _bad(f"output_merge_spec has the structure {sspec}; the output has {tspec}")
        return pytree.tree_unflatten([_merge_one(c, s) for c, s in zip(cols, specs)], tspec)


def batch_of(named: list[tuple[str, Any, Any]]) -> int | None:
    """The batch size of values (name, value, cut): every value cut has it
    along its dimension; None when none is cut. Raises InvalidArgument
    naming a value that is not a tensor but is cut, or two that disagree."""
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
    return None if batch is None else batch[0]


def default_cut(v: Any) -> Any:
    """A value's cut without a spec: a tensor along 0, a container's
    tensors along 0, anything else whole (PyTorch's default)."""
    return cut_of(v, None, "a value")


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
