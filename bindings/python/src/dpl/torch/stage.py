"""dpl.torch.PipelineStage: one stage of a model on this rank, as in
``torch.distributed.pipelining.PipelineStage``.

A stage holds its submodule and, between the forward of a micro-batch and
its backward, the autograd state of that micro-batch. Activations and their
gradients travel between stages in dpl's buffers, seen as tensors without
copying: a stage's input is a view of the buffer its receive landed in, and
its output is written once into the buffer its send goes out from.
A stage hands the next one tensor or a tuple of tensors, each with the
micro-batch as its first dimension (``_boundary.py``); the first stage
takes any positional and keyword arguments.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.utils import _pytree as pytree
from torch.utils.hooks import RemovableHandle

from ..run import peek
from ._boundary import Layout, _bad, check_grad_metas, meta_of_output, metas_of_example
from ._chunks import narrow, repeat
from ._ranks import stage_to_rank

__all__ = ["PipelineStage", "PipelineStageInfo", "build_stage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineStageInfo:
    """Which forward of a stage a forward context wraps (PyTorch's
    ``PipelineStageInfo``): the global ``stage_index``, the
    ``microbatch_index`` within the step, and ``is_metadata_inference``,
    True for the one forward dpl.torch runs at set-up to learn the shapes
    of a stage's output (micro-batch 0). Holds no tensors."""

    stage_index: int
    microbatch_index: int
    is_metadata_inference: bool = False


def __getattr__(name: str):
    if name == "build_stage":   # the tracing frontend loads torch.distributed
        from .pipe import build_stage
        return build_stage
    raise AttributeError(f"module 'dpl.torch.stage' has no attribute {name!r}")


class PipelineStage:
    """This rank's part of a pipeline.

    Args:
        submodule: the ``nn.Module`` of stage ``stage_index``.
        stage_index: global stage index in [0, num_stages).
        num_stages: stages of the whole pipeline (all ranks, all chunks).
        device: where the submodule runs: "cpu" (dpl.torch's boundary
            buffers are host memory; another device is refused).
        input_args: an example input (a tensor, or a tuple of them) with
            the micro-batch as first dimension; optional. dpl learns a
            stage's inputs from the stage before it, and checks them
            against this when given.
        output_args: an example output (a tensor or a tuple of them), to
            skip shape inference for the output; optional.
        output_grads, input_grads: example gradients of the outputs and
            inputs (None entries allowed), as PyTorch takes them; optional.
            dpl moves a gradient in its tensor's layout, so each one given
            must have the per-sample shape and dtype of its tensor
            (checked against ``output_args``/``input_args`` here, else at
            the first step).
        group: accepted for compatibility with PyTorch and kept as
            ``group``; dpl's world comes from ``world`` or
            :func:`dpl.world.current`, whatever group is given.
        dw_builder: must be None: PyTorch's custom weight-gradient
            runners; dpl.torch computes weight gradients with autograd.
        get_mesh: accepted for compatibility with PyTorch (used there
            for DTensor stages only); ignored.
        world: keyword-only, a :class:`dpl.world.World` to run in
            (default: found when the schedule first steps).

    PyTorch's attributes: ``submod``, ``stage_index``, ``num_stages``,
    ``device``, ``group``, ``dw_builder`` (None), ``is_first``,
    ``is_last``, ``has_backward``, ``group_rank`` and ``group_size``
    (this rank in dpl's world, read without joining it),
    ``stage_index_to_group_rank`` (stage s on rank s mod
    ``group_size`` until a multi-stage schedule sets its placement),
    ``chunks`` (None until the first step sets it to the schedule's
    micro-batches), ``output_chunks`` (on the last stage, after each
    step or pass that returns outputs, the micro-batches' outputs in
    order, detached; emptied by one that returns none) and
    ``log_prefix``.

    Raises InvalidArgument naming a bad index, count, example, a
    ``dw_builder``, or a malformed rank variable in the environment. Not
    thread-safe: one thread (the rank's) uses a stage.
    """

    def __init__(self, submodule: torch.nn.Module, stage_index: int, num_stages: int,
                 device: Any = "cpu", input_args: Any = None, output_args: Any = None,
                 output_grads: Any = None, input_grads: Any = None, group: Any = None,
                 dw_builder: Any = None, get_mesh: Any = None, *, world: Any = None):
        if not isinstance(submodule, torch.nn.Module):
            raise _bad(f"submodule must be an nn.Module (got {type(submodule).__name__})")
        for name, v in (("stage_index", stage_index), ("num_stages", num_stages)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise _bad(f"{name} must be an int (got {v!r})")
        if num_stages < 1:
            raise _bad(f"num_stages must be >= 1 (got {num_stages})")
        if not 0 <= stage_index < num_stages:
            raise _bad(f"stage_index must be in [0, {num_stages}) (got {stage_index})")
        dev = torch.device(device)
        if dev.type != "cpu":
            raise _bad(f"device {device!r}: dpl.torch runs stages on the CPU only "
                       "(its boundary buffers are host memory)")
        if dw_builder is not None:
            raise _bad(f"stage {stage_index}: dw_builder is not supported: dpl.torch computes "
                       "weight gradients with autograd (pass None)")
        self.submod = submodule
        self.fn: torch.nn.Module = submodule   # what the schedule calls
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.device = dev
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.world = world
        self.group = group
        self.dw_builder = None
        self.stage_index_to_group_rank = stage_to_rank(self.group_size, num_stages, False)
        self.chunks: int | None = None
        self.output_chunks: list = []
        self.log_prefix = f"[Stage {stage_index}]"
        #: whether the schedule runs backward passes (it has a loss_fn);
        #: set by the schedule, as PyTorch's
        self.has_backward = False
        self._in_meta = metas_of_example(input_args, f"stage {stage_index} input_args") \
            if input_args is not None and not self.is_first else None
        self._out_meta = metas_of_example(output_args, f"stage {stage_index} output_args") \
            if output_args is not None and not self.is_last else None
        self._in_grads = metas_of_example(input_grads, f"stage {stage_index} input_grads", True) \
            if input_grads is not None and not self.is_first else None
        self._out_grads = metas_of_example(output_grads, f"stage {stage_index} output_grads",
                                           True) \
            if output_grads is not None and not self.is_last else None
        check_grad_metas(self._in_grads, self._in_meta, f"stage {stage_index} input_grads")
        check_grad_metas(self._out_grads, self._out_meta, f"stage {stage_index} output_grads")
        self.in_meta: Layout | None = None   # what it receives and sends, once known
        self.out_meta: Layout | None = None
        self._params: list[torch.nn.Parameter] | None = None
        self.state: dict[int, tuple] = {}   # micro-batch -> autograd state
        # a RemovableHandle's dict (an OrderedDict can be weakly referenced)
        self._contexts: OrderedDict[int, Callable] = OrderedDict()

    @property
    def group_rank(self) -> int:
        """This rank in the world the stage's schedule runs in (PyTorch's
        rank in ``group``): ``world``'s when given, else where
        :func:`dpl.world.current` looks, without joining
        (:func:`dpl.run.peek`). Raises InvalidArgument for a malformed rank
        variable in the environment."""
        return peek(self.world)[0]

    @property
    def group_size(self) -> int:
        """The ranks of that world (PyTorch's size of ``group``); raises as
        :attr:`group_rank`."""
        return peek(self.world)[1]

    def register_forward_context(
            self, context_factory: Callable[[PipelineStageInfo], Any]) -> RemovableHandle:
        """Run this stage's forwards inside ``context_factory(info)``, a
        fresh context manager per forward, ``info`` a
        :class:`PipelineStageInfo` (PyTorch's ``register_forward_context``).
        It wraps every forward a step or eval runs, and the set-up forward
        that infers the output's shapes (``is_metadata_inference=True``;
        none runs when ``output_args`` were given, nor on the last stage).
        Backward passes run outside it. Returns a handle whose
        ``remove()`` unregisters it. Raises RuntimeError (PyTorch's) when
        a context is registered already, and when a context swallows an
        exception of the forward (a context must not suppress them)."""
        if self._contexts:
            raise RuntimeError(f"stage {self.stage_index}: a forward context is registered "
                               "already; remove its handle before registering another")
        if not callable(context_factory):
            raise _bad(f"context_factory must be callable (got {type(context_factory).__name__})")
        handle = RemovableHandle(self._contexts)
        self._contexts[handle.id] = context_factory
        return handle

    def call_forward(self, microbatch: int, args: tuple, kwargs: dict) -> Any:
        """Call the stage's module on ``args`` and ``kwargs``, inside the
        registered forward context if any."""
        return self._in_context(microbatch, False, self.fn, args, kwargs)

    def _in_context(self, microbatch: int, inference: bool, fn: Callable, args: tuple,
                    kwargs: dict) -> Any:
        if not self._contexts:
            return fn(*args, **kwargs)
        factory = next(iter(self._contexts.values()))
        done = False
        with factory(PipelineStageInfo(stage_index=self.stage_index, microbatch_index=microbatch,
                                       is_metadata_inference=inference)):
            out = fn(*args, **kwargs)
            done = True
        if not done:   # PyTorch's contract
            what = "the set-up forward" if inference else f"micro-batch {microbatch}'s forward"
            raise RuntimeError(f"stage {self.stage_index}: the forward context suppressed an "
                               f"exception of {what}; forward contexts must not suppress "
                               "exceptions")
        return out

    def scale_grads(self, grad_scale_factor: int) -> None:
        """Divide every gradient of the submodule's parameters by
        ``grad_scale_factor`` (PyTorch's ``scale_grads``): what a schedule
        built with ``scale_grads=True`` does after each step, for a script
        that builds it with False and scales itself. Call it once per step,
        after the step. Raises InvalidArgument for a factor that is not a
        positive number."""
        f = grad_scale_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0:
            raise _bad(f"grad_scale_factor must be a positive number (got {f!r})")
        if f != 1:
            with torch.no_grad():
                for p in self.submod.parameters():
                    if p.grad is not None:
                        p.grad.div_(f)

    def clear_runtime_states(self) -> None:
        """Drop the autograd state the stage keeps between a micro-batch's
        forward and its backward, and ``output_chunks`` (PyTorch's
        ``clear_runtime_states``; a step clears the state when it ends,
        failed or not, then refills ``output_chunks`` on the last stage)."""
        self.state.clear()
        self.output_chunks.clear()

    # parameters whose gradients dpl reduces, in a fixed order
    def params(self) -> list[torch.nn.Parameter]:
        """The submodule's parameters that require grad, in module order."""
        if self._params is None:
            self._params = [p for p in self.submod.parameters() if p.requires_grad]
        return self._params

    def bind_grads(self) -> None:
        """Give every parameter a contiguous ``.grad`` (zeros where it is
        None, as after ``zero_grad()``), so dpl can reduce them over the
        stage's replicas in place. Raises InvalidArgument when the
        parameters have more than one dtype (dpl reduces one per stage)."""
        dts = {p.dtype for p in self.params()}
        if len(dts) > 1:
            raise _bad(f"stage {self.stage_index}: parameters of mixed dtypes "
                       f"{sorted(str(d) for d in dts)}; dpl reduces one dtype per stage "
                       "(replicated stages need one dtype)")
        for p in self.params():
            g = p.grad
            if g is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            elif not g.is_contiguous():
                p.grad = g.contiguous()

    def set_call(self, fn: torch.nn.Module) -> None:
        """Have the schedule call ``fn``, a module around ``submod`` with
        the same parameters (as :func:`dpl.torch.build_stage` makes for a
        traced split), instead of ``submod`` itself."""
        self.fn = fn

    def set_layouts(self, in_meta: Layout | None, out_meta: Layout | None) -> None:
        """Fix what this stage receives and sends, as the set-up agreed.
        Raises InvalidArgument when ``input_args`` disagrees with what the
        stage before sends."""
        if self._in_meta is not None and in_meta is not None and self._in_meta != in_meta.metas:
            raise _bad(f"stage {self.stage_index}: input_args describe {self._in_meta}; "
                       f"stage {self.stage_index - 1} sends {in_meta.metas}")
        if in_meta is not None:
            check_grad_metas(self._in_grads, in_meta.metas, f"stage {self.stage_index} input_grads")
        if out_meta is not None:
            check_grad_metas(self._out_grads, out_meta.metas,
                             f"stage {self.stage_index} output_grads")
        self.in_meta, self.out_meta = in_meta, out_meta

    def infer_output(self, in_meta: Layout | None, sample_args: tuple, sample_kwargs: dict,
                     dims: tuple) -> list[tuple]:
        """(per-sample shape, dtype) of each tensor of this stage's output,
        from output_args or by running the submodule on meta tensors
        (falling back to a real forward of zeros without grad, buffers
        restored). The first stage runs on one sample of ``sample_args``,
        a later one on one sample of zeros as its input, both with one
        sample of ``sample_kwargs`` (the step's keyword inputs), each cut by ``dims`` (``Chunking.cut``'s or
        ``cut_kwargs``'s).
        Raises InvalidArgument when the output is not tensors."""
        if self._out_meta is not None:
            return self._out_meta
        ad, kd = dims
        kwargs = {k: narrow(v, kd[k], 0, 1) for k, v in sample_kwargs.items()}
        if self.is_first:
            args = tuple(narrow(a, d, 0, 1) for a, d in zip(sample_args, ad))
        else:
            args = tuple(torch.zeros((1, *shape), dtype=dtype) for shape, dtype in in_meta.metas)
            ad = [0] * len(args)
        cut = (ad, {k: kd[k] for k in kwargs})
        out = self._in_context(0, True, _dry_forward, (self.fn, args, kwargs, cut), {})
        return meta_of_output(out, self.stage_index)


def _dry_forward(mod: torch.nn.Module, args: tuple, kwargs: dict, cut: tuple) -> Any:
    try:
        from torch.func import functional_call
        meta = {k: torch.empty_like(v, device="meta")
                for k, v in list(mod.named_parameters()) + list(mod.named_buffers())}
        margs, mkw = pytree.tree_map_only(
            torch.Tensor, lambda t: torch.empty_like(t, device="meta"), (args, kwargs))
        with torch.no_grad():
            return functional_call(mod, meta, margs, mkw)
    except Exception:  # noqa: BLE001 - some modules do not run on meta
        saved = {k: v.clone() for k, v in mod.named_buffers()}
        try:
            with torch.no_grad():
                # two samples (one could be taken for a batch dimension)
                ad, kd = cut
                two = tuple(repeat(a, d, 2) for a, d in zip(args, ad))
                kw2 = {k: repeat(v, kd[k], 2) for k, v in kwargs.items()}
                out = mod(*two, **kw2)
            if isinstance(out, (tuple, list)):
                return type(out)(t[:1] if torch.is_tensor(t) else t for t in out)
            return out[:1] if torch.is_tensor(out) else out
        finally:
            with torch.no_grad():
                for k, v in mod.named_buffers():
                    v.copy_(saved[k])


def split_replicas(rank: int, replicas: Sequence[int]) -> tuple[int, int]:
    """(pipeline rank, replica index) of world ``rank`` when pipeline rank
    p has ``replicas[p]`` replicas numbered one after the other."""
    base = 0
    for p, r in enumerate(replicas):
        if r < 1:
            raise _bad(f"replicas[{p}] must be >= 1 (got {r})")
        if rank < base + r:
            return p, rank - base
        base += r
    raise _bad(f"rank {rank} is outside a world of {base} ranks (replicas {list(replicas)})")
