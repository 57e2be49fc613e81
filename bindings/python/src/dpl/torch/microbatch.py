"""dpl.torch.microbatch: ``torch.distributed.pipelining.microbatch`` on
dpl, without importing ``torch.distributed``.

``TensorChunkSpec`` (cut an input along a dimension), ``_Replicate``
(give an input whole to every micro-batch), ``_CustomReducer`` and
``sum_reducer`` (reduce an output over the micro-batches), and the two
functions a script uses to cut inputs itself (for ``step(arg_mbs=...)``)
and to put outputs back together. Their micro-batches are the ones dpl.torch's
schedules make: sizes that differ by at most one, larger first, as
``torch.tensor_split``. Specs are given per top-level argument (a tuple for
the positional ones, a dict for the keyword ones), as dpl.torch's
schedules take them, each a spec or, for a container, a container of
specs of the same structure; PyTorch's own spec classes are accepted
wherever these are.

Where PyTorch's ``split_args_kwargs_into_chunks`` quietly makes fewer
chunks when an input has fewer samples than ``chunks``, this one raises
InvalidArgument naming the input: a schedule of M micro-batches would
refuse the shorter list anyway.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch

from ._boundary import _bad
from ._chunks import Chunking, split

__all__ = ["TensorChunkSpec", "split_args_kwargs_into_chunks", "merge_chunks"]


class TensorChunkSpec:
    """Cut an input (or concatenate an output) along ``split_dim``."""

    def __init__(self, split_dim: int):
        if not isinstance(split_dim, int) or isinstance(split_dim, bool):
            raise _bad(f"split_dim must be an int (got {split_dim!r})")
        self.split_dim = split_dim

    def __repr__(self) -> str:
        return f"{type(self).__module__}.TensorChunkSpec({self.split_dim})"

    def __str__(self) -> str:
        return f"TensorChunkSpec({self.split_dim})"

    @staticmethod
    def from_tuple(chunk_dims: tuple[int, ...]) -> tuple["TensorChunkSpec", ...]:
        """One spec per positional input, from their dimensions."""
        return tuple(TensorChunkSpec(d) for d in chunk_dims)

    @staticmethod
    def from_dict(chunk_dims: dict[str, int]) -> dict[str, "TensorChunkSpec"]:
        """One spec per keyword input, from their dimensions."""
        return {k: TensorChunkSpec(d) for k, d in chunk_dims.items()}


class _Replicate:
    """Give an input whole to every micro-batch."""


class _CustomReducer:
    """Merge an output by ``reduce_fn(accumulated, next)`` from
    ``init_value``, over the micro-batches in order."""

    def __init__(self, init_value: Any, reduce_fn: Callable[[Any, Any], Any]):
        self.init_value = init_value
        self.reduce_fn = reduce_fn


class _LossReducer(_CustomReducer):
    pass


sum_reducer = _LossReducer(torch.tensor(0.0), operator.add)


def split_args_kwargs_into_chunks(
        args: tuple, kwargs: dict | None, chunks: int,
        args_chunk_spec: tuple | None = None,
        kwargs_chunk_spec: dict | None = None) -> tuple[list[tuple], list[dict]]:
    """Cut positional and keyword inputs into ``chunks`` micro-batches:
    (a tuple of positional inputs per micro-batch, a dict of keyword
    inputs per micro-batch). A tensor is cut along dimension 0 unless its
    spec says otherwise; a container leaf by leaf; any other value, and one
    whose spec is ``_Replicate``, goes whole to every micro-batch. The
    pieces are views
    of the inputs. Raises InvalidArgument naming a bad spec, an input with
    fewer samples than ``chunks``, or inputs that disagree on the batch."""
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise _bad(f"chunks must be an int >= 1 (got {chunks!r})")
    args = tuple(args)
    kwargs = dict(kwargs or {})
    (ad, kd), batch = Chunking(args_chunk_spec, kwargs_chunk_spec, None).cut(args, kwargs)
    if batch < chunks:
        raise _bad(f"a batch of {batch} samples cannot make {chunks} micro-batches")

    def pieces(v: Any, d: Any) -> list:
        got = split(v, d, chunks)
        return [v] * chunks if got is None else got

    ap = [pieces(a, d) for a, d in zip(args, ad)]
    kp = {k: pieces(v, kd[k]) for k, v in kwargs.items()}
    return ([tuple(p[j] for p in ap) for j in range(chunks)],
            [{k: p[j] for k, p in kp.items()} for j in range(chunks)])


def merge_chunks(chunks: list, chunk_spec: Any) -> Any:
    """One value from the micro-batches' values: tensors concatenated along
    dimension 0 or the spec's ``TensorChunkSpec``, reduced by a
    ``_CustomReducer``; a container leaf by leaf (a container of specs of
    its structure, or one spec for every leaf). Raises InvalidArgument
    when the spec does not fit the values."""
    if not isinstance(chunks, (list, tuple)) or not chunks:
        raise _bad("chunks must be a non-empty list of micro-batch values")
    return Chunking(None, None, chunk_spec).merge_outputs(list(chunks))
