"""PyTorch's tracing frontend on dpl's stages: ``pipeline``, ``Pipe``,
``build_stage``, ``SplitPoint`` and ``pipe_split``, as in
``torch.distributed.pipelining``.

PyTorch traces and splits the model (``torch.export``, then a cut at each
split point); dpl.torch takes that split as it is and builds its own
stages from it. The one difference is how values travel. PyTorch's
runtime sends a value from the stage that makes it straight to the stage
that uses it: a skip connection over several stages, or a model input
that a later stage uses (an attention mask). dpl moves values between
neighbouring stages only, so every stage also hands on what a later stage
needs: stage ``s`` returns, in graph order, each value made at stage ``s``
or before (model inputs counting as made before stage 0) that a stage
after ``s`` uses. The stage's own module runs as PyTorch runs it; only the
tuple it returns to dpl is longer. Gradients flow back the same way, so
training gives the same result as PyTorch's direct sends.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch.distributed.pipelining import SplitPoint, pipe_split  # noqa: F401
from torch.fx.node import Node, map_arg

from ._boundary import _bad
from .stage import PipelineStage

__all__ = ["Pipe", "SplitPoint", "build_stage", "pipe_split", "pipeline"]


def pipeline(module: torch.nn.Module, mb_args: tuple, mb_kwargs: dict | None = None,
             split_spec: dict | None = None,
             split_policy: Callable | None = None) -> "Pipe":
    """Trace ``module`` on one micro-batch's example inputs and split it, as
    ``torch.distributed.pipelining.pipeline`` (which does the work, with
    the same arguments: split points by submodule name in ``split_spec``,
    or a ``split_policy`` on the traced graph, or ``pipe_split()`` calls in
    the model's forward). Like PyTorch's, it wraps the forward of the
    submodules named in ``split_spec``. Returns a :class:`Pipe` whose
    :meth:`Pipe.build_stage` makes dpl stages. Raises what PyTorch's
    tracer raises."""
    from torch.distributed.pipelining import pipeline as trace
    return Pipe(trace(module, mb_args, mb_kwargs, split_spec=split_spec,
                      split_policy=split_policy))


class Pipe:
    """A traced, split model (PyTorch's ``Pipe`` inside): ``num_stages``,
    ``split_gm``, :meth:`get_stage_module`, :meth:`info`,
    :meth:`build_stage`; calling it runs the whole model in this process,
    and other attributes are those of PyTorch's ``Pipe``.
    """

    def __init__(self, torch_pipe: Any):
        self._pipe = torch_pipe

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._pipe(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "_pipe":   # not set yet (unpickling, copying)
            raise AttributeError(name)
        return getattr(self._pipe, name)

    def get_stage_module(self, stage_idx: int) -> torch.nn.Module:
        """The module of stage ``stage_idx`` (PyTorch's, unchanged)."""
        return self._pipe.get_stage_module(stage_idx)

    def info(self) -> Any:
        """PyTorch's ``PipeInfo`` of the split (for :func:`build_stage`)."""
        return self._pipe.info()

    def build_stage(self, stage_index: int, device: Any,
                    group: Any = None) -> PipelineStage:
        """dpl's :class:`PipelineStage` for stage ``stage_index``, running
        that stage's module; ``group`` is accepted for PyTorch's signature
        and ignored. Raises InvalidArgument naming a bad index, or a split
        dpl cannot run (see :func:`build_stage`)."""
        _check_index(stage_index, self.num_stages)   # before PyTorch's lookup raises its own
        return build_stage(self.get_stage_module(stage_index), stage_index, self.info(),
                           device, group)


def build_stage(stage_module: torch.nn.Module, stage_index: int, pipe_info: Any,
                device: Any, group: Any = None) -> PipelineStage:
    """dpl's :class:`PipelineStage` from a stage module of a traced split and
    its ``PipeInfo`` (``torch.distributed.pipelining.build_stage``'s
    arguments; ``group`` ignored). The stage's ``submod`` is
    ``stage_module`` itself; what it hands dpl is its outputs plus what
    later stages need (the module docstring). When a later stage uses a
    model input that the first stage's module does not take, the first
    stage takes the model's inputs, as the traced model does; the step's
    keyword inputs go to the first stage only (later stages get the
    model's inputs through the split graph). Raises InvalidArgument when
    the model's output uses a value made before the last stage."""
    num_stages = pipe_info.num_stages
    _check_index(stage_index, num_stages)
    plan = _Plan(pipe_info.graph, num_stages)
    st = PipelineStage(stage_module, stage_index, num_stages, device, group=group)
    st.set_call(_Carry(stage_module, plan, stage_index))
    return st


def _check_index(stage_index: Any, num_stages: int) -> None:
    if not isinstance(stage_index, int) or not 0 <= stage_index < num_stages:
        raise _bad(f"stage_index must be in [0, {num_stages}) (got {stage_index!r})")


class _Plan:
    """Which values cross each boundary of a split graph."""

    def __init__(self, graph: Any, num_stages: int):
        nodes = list(graph.nodes)
        calls = [n for n in nodes if n.op == "call_module"]
        if len(calls) != num_stages:
            raise _bad(f"the split graph calls {len(calls)} stage modules for {num_stages} stages")
        pos = {n: i for i, n in enumerate(calls)}
        self.calls = sorted(calls, key=lambda n: n.meta.get("stage_idx", pos[n]))
        calls = self.calls
        # the model's inputs, in order
        self.inputs = [n.target for n in nodes if n.op == "placeholder"]
        order = {n: i for i, n in enumerate(nodes)}
        made: dict[Node, int] = {}     # value -> stage that makes it (-1: a model input)
        for n in nodes:
            if n.op == "placeholder":
                made[n] = -1
        for s, c in enumerate(calls):
            made[c] = s
            for u in c.users:
                if u.op == "call_function" and u.args and u.args[0] is c:
                    made[u] = s   # getitem of the stage's outputs
        last_use: dict[Node, int] = {}
        for s, c in enumerate(calls):
            for v in _inputs_of(c):
                if v not in made:
                    raise _bad(f"stage {s} uses {v.name}, which no stage makes")
                last_use[v] = max(last_use.get(v, -1), s)
        out = next(n for n in nodes if n.op == "output")
        last = calls[-1]
        for v in _inputs_of(out):
            if made.get(v) != num_stages - 1 or not (v is last or v.args[0] is last):
                m = made.get(v)
                where = "as a model input" if m == -1 else "by no stage" if m is None \
                    else f"at stage {m}"
                raise _bad(f"the model's output uses {v.name}, made {where}; dpl.torch "
                           f"returns what the last stage ({num_stages - 1}) returns")
        # carried[s]: the values stage s hands stage s + 1, in graph order
        self.carried = [sorted((v for v, m in made.items() if m <= s and last_use.get(v, -1) > s),
                               key=order.__getitem__) for s in range(num_stages - 1)]


def _inputs_of(n: Node) -> list[Node]:
    seen: list[Node] = []
    map_arg((n.args, n.kwargs), lambda v: seen.append(v) if v not in seen else None)
    return seen


class _Carry(torch.nn.Module):
    """Stage ``s`` of a split as dpl runs it: its module called as PyTorch
    calls it, the tuple of values stage ``s + 1`` needs returned. A later
    stage takes what it received and ignores the step's keyword inputs:
    the model's inputs reach it through the split graph. Holds plain
    indices, not the graph (so the other stages' modules can go)."""

    def __init__(self, mod: torch.nn.Module, plan: _Plan, s: int):
        super().__init__()
        self.mod = mod
        call = plan.calls[s]
        self.first, self.last = s == 0, s == len(plan.calls) - 1
        ins = plan.carried[s - 1] if s > 0 else []
        outs = plan.carried[s] if not self.last else []
        if not self.first:
            for v in list(call.args) + list(call.kwargs.values()):
                if not isinstance(v, Node):
                    raise _bad(f"stage {s} is called with a constant {v!r}; dpl.torch runs "
                               "splits whose stages take values only")
            self.arg_idx = [ins.index(v) for v in call.args]
            self.kw_idx = {k: ins.index(v) for k, v in call.kwargs.items()}
        # what each handed-on value is: ("in", i) a received one, ("res",)
        # the module's result, ("item", k) its k-th value, ("root", name) a
        # model input (first stage only)
        self.recipe: list[tuple] = []
        for v in outs:
            if v is call:
                self.recipe.append(("res",))
            elif v.op == "call_function" and v.args and v.args[0] is call:
                self.recipe.append(("item", v.args[1]))
            elif v in ins:
                self.recipe.append(("in", ins.index(v)))
            else:
                self.recipe.append(("root", v.target))
        roots = [r[1] for r in self.recipe if r[0] == "root"]
        self._sig = inspect.signature(mod.forward) if roots else None
        # a model input that only later stages use: the first stage then
        # takes the model's inputs (as the traced model does) and calls its
        # module with those of them its call in the split graph names
        self._call: tuple | None = None
        if roots and any(n not in self._sig.parameters for n in roots):
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            self._sig = inspect.Signature([inspect.Parameter(n, kind) for n in plan.inputs])

            def ref(v: Any) -> tuple:
                return ("in", v.target) if isinstance(v, Node) else ("const", v)
            self._call = ([ref(v) for v in call.args],
                          {k: ref(v) for k, v in call.kwargs.items()})

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        bound = None
        if self._sig is not None:   # the first stage, handing on model inputs
            try:
                bound = self._sig.bind(*args, **kwargs)
            except TypeError as e:
                raise _bad(f"the first stage takes the model's inputs "
                           f"({', '.join(self._sig.parameters)}): {e}") from None
            bound.apply_defaults()
        if self._call is not None:
            a = bound.arguments
            res = self.mod(*[a[r[1]] if r[0] == "in" else r[1] for r in self._call[0]],
                           **{k: a[r[1]] if r[0] == "in" else r[1]
                              for k, r in self._call[1].items()})
        elif self.first:
            res = self.mod(*args, **kwargs)
        else:
            res = self.mod(*[args[i] for i in self.arg_idx],
                           **{k: args[i] for k, i in self.kw_idx.items()})
        if self.last:
            return res
        out = []
        for r in self.recipe:
            kind = r[0]
            out.append(res if kind == "res" else res[r[1]] if kind == "item"
                       else args[r[1]] if kind == "in" else bound.arguments[r[1]])
        return tuple(out)
