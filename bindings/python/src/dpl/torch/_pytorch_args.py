"""The constructor arguments of PyTorch's schedule classes that tune
PyTorch's own runtime, as dpl.torch takes them.

``PipelineScheduleMulti`` and the classes built on
``_PipelineScheduleRuntime`` (interleaved, looped, zero-bubble, V) take
arguments that change when PyTorch's runtime posts receives, waits for
sends and gradient reductions, and unshards FSDP modules, never what a
step computes. dpl's runner posts its transfers where the lowered lists
place them, bounds the sends in flight by its buffer sets and holds every
stage's parameters whole, so these arguments have nothing to tune here:
dpl.torch accepts every value PyTorch accepts, so that scripts run
unchanged, and refuses the values PyTorch refuses, with an
``InvalidArgument`` (a ``ValueError``, as PyTorch's) naming the argument.
``backward_requires_autograd=False``, which PyTorch allows for
backward passes run by ``register_custom_function``, is refused: every
backward of dpl.torch is autograd's.

dpl's own policy options (``chunks``, ``cap``, ...) are checked here too,
against :func:`dpl.schedule.schedule`'s keyword arguments, so that an
unknown one fails at construction rather than at the first step.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from ..schedule import schedule as _build_schedule
from ._boundary import _bad

#: dpl.schedule()'s keyword-only arguments: the options a policy takes
POLICY_OPTIONS = tuple(n for n, p in inspect.signature(_build_schedule).parameters.items()
                       if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _flag(name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise _bad(f"{name} must be a bool (got {v!r})")


def check_multi(use_full_backward: Any, backward_requires_autograd: Any) -> None:
    """Check ``PipelineScheduleMulti``'s own arguments. ``use_full_backward``
    is deprecated in PyTorch and changes nothing there either (a
    DeprecationWarning when given); ``backward_requires_autograd`` must
    be True."""
    if use_full_backward is not None:
        _flag("use_full_backward", use_full_backward)
        warnings.warn("use_full_backward is no longer supported (as in PyTorch); stop passing "
                      "it", DeprecationWarning, stacklevel=4)
    _flag("backward_requires_autograd", backward_requires_autograd)
    if not backward_requires_autograd:
        raise _bad("backward_requires_autograd=False: dpl.torch computes every backward "
                   "with autograd (it has no register_custom_function); pass True or "
                   "leave it out")


def check_runtime(ranks: int, defer_pp_recv: Any, max_active_stages: Any,
                  unshard_lookahead: Any, defer_reduce_grad_wait: Any,
                  max_outstanding_sends: Any) -> None:
    """Check ``_PipelineScheduleRuntime``'s tuning arguments as PyTorch
    does (``ranks``: the pipeline degree, for ``unshard_lookahead``'s
    tuple). They change nothing in dpl (module docstring)."""
    _flag("defer_pp_recv", defer_pp_recv)
    _flag("defer_reduce_grad_wait", defer_reduce_grad_wait)
    m = max_active_stages
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise _bad(f"max_active_stages must be a positive integer (got {m!r})")
    u = unshard_lookahead
    if u not in ("full", "auto"):
        if not isinstance(u, tuple):
            raise _bad(f"unshard_lookahead must be 'full', 'auto', or a tuple of {ranks} "
                       f"integers (got {u!r})")
        if len(u) != ranks:
            raise _bad(f"unshard_lookahead has {len(u)} values; the pipeline has {ranks} "
                       "ranks")
        for r, k in enumerate(u):
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= m:
                raise _bad(f"unshard_lookahead[{r}] must be an integer within "
                           f"[1, max_active_stages={m}] (got {k!r})")
    s = max_outstanding_sends
    if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
        raise _bad(f"max_outstanding_sends must be None or a non-negative integer (got {s!r})")


def check_policy_options(options: dict) -> None:
    """Refuse a keyword that is neither PyTorch's nor a dpl policy option,
    naming it and the accepted ones."""
    unknown = sorted(k for k in options if k not in POLICY_OPTIONS)
    if unknown:
        raise _bad(f"unknown argument(s) {unknown}: a schedule takes PyTorch's arguments, "
                   f"policy=, replicas=, transport=, timeout=, world= and the policy options "
                   f"{list(POLICY_OPTIONS)}")
