"""dpl.torch's schedule classes: the API of ``torch.distributed.pipelining``
(``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``) on dpl's
runner, and ``ScheduleDAPPLE`` for what PyTorch lacks (uneven per-stage
replication, every dpl policy, any micro-batch count the policy accepts).

``step(*args, target=None, losses=None, ...)`` and ``eval(...)`` have
PyTorch's semantics (pre-split ``arg_mbs``/``kwarg_mbs``/``target_mbs``,
``loss_kwargs``, ``return_outputs``; without a ``loss_fn`` a step is a
forward-only pass, as ``eval``): the
first stage takes the whole batch and splits it into micro-batches along
dimension 0, or as ``args_chunk_spec``/``kwargs_chunk_spec`` say (sizes
differ by at most one, larger first, as ``torch.tensor_split``;
``_chunks.py``); the last stage takes the target, appends each
micro-batch's loss to ``losses`` and returns the outputs merged,
concatenated or as ``output_merge_spec`` says (None on a replica whose
shares of every micro-batch are empty); other ranks return None.
Gradients accumulate in the parameters' ``.grad`` (divided by the number
of micro-batches when ``scale_grads``); the caller
runs the optimizer, as with PyTorch.

Replicas (ScheduleDAPPLE): pipeline rank p runs ``replicas[p]`` copies of
its stage, each on its share of every micro-batch; the last stage weighs a
share's loss by its size over the micro-batch's (so ``loss_fn`` must average
over samples, like ``reduction="mean"``), and dpl sums each stage's
gradients over its replicas in a fixed order. ``losses`` then holds this
replica's shares; their sum over replicas is the micro-batch's loss.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import torch

from .. import errors, world as dpl_world
from ..runner import Runner, dtype_code, split
from ..schedule import schedule as build_schedule
from . import _autograd
from ._boundary import Layout, as_tuple, kept_output
from ._chunks import REPLICATE, Chunking
from ._inputs import join_microbatches
from .stage import PipelineStage, _bad, split_replicas

_META_BYTES = 8192
# model chunks per rank of a policy (dpl_policy_chunks): 1 = V >= 2 from the
# stages given, 2 = exactly two (zbv), absent = one stage per rank
_CHUNKS = {"interleaved": 1, "looped-bfs": 1, "interleaved-zb": 1, "zbv": 2, "dualpipev": 2}


class _PipelineSchedule:
    _policy = "1f1b"

    def __init__(self, stages: PipelineStage | Sequence[PipelineStage], n_microbatches: int,
                 loss_fn: Callable | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True, *, policy: str | None = None,
                 replicas: Sequence[int] | None = None, transport: str | None = None,
                 timeout: float = 60.0, world: Any = None, **policy_options: Any):
        st = [stages] if isinstance(stages, PipelineStage) else list(stages)
        if not st or not all(isinstance(s, PipelineStage) for s in st):
            raise _bad("stages must be a PipelineStage or a non-empty list of them")
        if not isinstance(n_microbatches, int) or isinstance(n_microbatches, bool) or n_microbatches < 1:
            raise _bad(f"n_microbatches must be an int >= 1 (got {n_microbatches!r})")
        self._chunking = Chunking(args_chunk_spec, kwargs_chunk_spec, output_merge_spec)
        S = st[0].num_stages
        if any(s.num_stages != S for s in st):
            raise _bad(f"stages disagree on num_stages: {[s.num_stages for s in st]}")
        self._stages = {s.stage_index: s for s in st}
        if len(self._stages) != len(st):
            raise _bad(f"stage indices repeat: {[s.stage_index for s in st]}")
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._scale_grads = scale_grads
        self._policy_name = policy or self._policy
        self._replicas = list(replicas) if replicas is not None else None
        self._transport_name = transport
        self._timeout = timeout
        self._world = world or st[0].world
        self._options = policy_options
        self._runner: Runner | None = None
        self._reduce = False
        self._batch: int | None = None
        self._failed: BaseException | None = None
        # as PyTorch: without a loss_fn there is nothing to differentiate,
        # and step() runs forward-only passes like eval()
        self._has_backward = loss_fn is not None
        self._train = True
        self._keep_outputs = True
        self._loss_kwargs: dict = {}

    # ---------------------------------------------------------------
    def step(self, *args: Any, target: Any = None, losses: list | None = None,
             return_outputs: bool = True, loss_kwargs: dict | None = None,
             arg_mbs: list | None = None, kwarg_mbs: list | None = None,
             target_mbs: list | None = None, finalize_gradients: bool = True,
             **kwargs: Any) -> Any:
        """Run one iteration (forward and backward of every micro-batch).

        Args: the whole batch's inputs on the first stage (positional and
        keyword); ``target`` and ``losses`` (a list to append the
        per-micro-batch losses to) on the last. Or, instead of the whole
        batch, ``arg_mbs``/``kwarg_mbs``/``target_mbs``: one entry per
        micro-batch, of the sizes dpl splits into (``torch.tensor_split``'s).
        ``loss_kwargs`` go to ``loss_fn``; with ``return_outputs=False`` the
        last stage keeps and returns no outputs. ``finalize_gradients`` is
        accepted for PyTorch's signature and changes nothing: dpl's stages
        hold their parameters whole (no FSDP). Without a ``loss_fn`` the
        step is a forward-only pass, as :meth:`eval`. Blocks until this
        rank's part is done; every wait is bounded by ``timeout``.
        Returns the merged output on the last stage, None elsewhere.
        Raises: the exception of this rank's stage; dpl.PeerError naming
        the rank that failed; dpl.TimeoutError; InvalidArgument for inputs
        that do not match the first step's shapes, and for a step with a
        ``loss_fn`` under ``torch.no_grad()`` (use :meth:`eval`).
        """
        if self._has_backward and not torch.is_grad_enabled():
            raise _bad("step() computes gradients and cannot run under torch.no_grad(); "
                       "use eval() for forward-only passes")
        return self._run(self._has_backward, args, kwargs, target, losses, return_outputs,
                         loss_kwargs, arg_mbs, kwarg_mbs, target_mbs)

    def eval(self, *args: Any, target: Any = None, losses: list | None = None,
             arg_mbs: list | None = None, kwarg_mbs: list | None = None,
             target_mbs: list | None = None, return_outputs: bool = True,
             loss_kwargs: dict | None = None, finalize_gradients: bool = True,
             **kwargs: Any) -> Any:
        """Run a forward-only pass over every micro-batch, as PyTorch's
        ``eval``: the arguments of :meth:`step` (PyTorch's ``eval`` passes
        ``return_outputs``, ``loss_kwargs`` and ``finalize_gradients`` on
        to its ``step``; the last changes nothing here either). The last
        stage computes each micro-batch's loss when it has a ``loss_fn``
        and a target, appends it to ``losses`` and returns the outputs
        concatenated (None elsewhere). No gradient is computed and the
        parameters and their ``.grad`` are left as they are; the forwards
        run under ``torch.no_grad()`` and the outputs are detached, as
        :meth:`step`'s. The pass runs on dpl's runner
        (``dpl_runner_forward``) in the schedule's own order with the
        backward actions left out, and uses the buffers set up for the
        steps: the batch size is the first call's (and on a replicated
        stage, a first call gives ``.grad`` zeros where it is None, as a
        step does). Every rank calls it at the same point of its sequence
        of steps and passes. Raises as
        :meth:`step`; a rank whose part of the pass was done when another
        failed raises at its next call.
        """
        return self._run(False, args, kwargs, target, losses, return_outputs, loss_kwargs,
                         arg_mbs, kwarg_mbs, target_mbs)

    def _run(self, train: bool, args: tuple, kwargs: dict, target: Any, losses: list | None,
             return_outputs: bool, loss_kwargs: dict | None, arg_mbs: Any, kwarg_mbs: Any,
             target_mbs: Any) -> Any:
        if self._failed is not None:
            raise errors.Error(errors.ECANCELED, "DPL_ECANCELED",
                               f"an earlier step failed ({self._failed}); build a new schedule")
        if losses is not None and not isinstance(losses, list):
            raise _bad(f"losses must be a list (got {type(losses).__name__})")
        if loss_kwargs is not None and not isinstance(loss_kwargs, dict):
            raise _bad(f"loss_kwargs must be a dict (got {type(loss_kwargs).__name__})")
        ch = self._chunking
        args, kwargs, target = join_microbatches(self._n_microbatches, args, kwargs, target,
                                                 arg_mbs, kwarg_mbs, target_mbs,
                                                 ch.args, ch.kwargs)
        first = self._stages.get(0)
        last = self._stages.get(next(iter(self._stages.values())).num_stages - 1)
        self._dims: tuple = ([], {})
        if first is not None:
            if not args and not kwargs:
                raise _bad("the first stage's step() and eval() need the batch's inputs")
            self._dims, b = ch.cut(args, kwargs)
        else:
            b = None
        if train and last is not None and target is None:
            raise _bad("the last stage's step() needs target= when loss_fn is given")
        self._args, self._kwargs, self._target = args, kwargs, target
        self._train, self._keep_outputs = train, bool(return_outputs)
        self._loss_kwargs = loss_kwargs or {}
        self._outputs: dict[int, list] = {}
        self._losses: dict[int, Any] = {}
        try:
            if self._runner is None:
                self._setup(args, kwargs, b)
            elif b is not None and b != self._batch:
                raise _bad(f"batch of {b} samples; the first step had {self._batch} "
                           "(dpl fixes the batch at the first step or eval)")
            if train:
                if self._reduce:
                    for s in self._stages.values():
                        s.bind_grads()
                self._runner.step()
            else:
                with torch.no_grad():
                    self._runner.forward()
        except BaseException as e:
            self._failed = e
            from .._report import report_failure
            report_failure(e)
            raise
        finally:
            self._args = self._kwargs = self._target = None
            self._train = True
            if self._runner is not None:   # the next step splits its own inputs
                self._cb.new_step()
            for s in self._stages.values():
                s.state.clear()
        if last is None:
            return None
        if losses is not None:
            losses.extend(self._losses[j] for j in sorted(self._losses))
        return self._chunking.merge_outputs(
            [t for j in sorted(self._outputs) for t in self._outputs[j]])

    # ---------------------------------------------------------------
    def _setup(self, args: tuple, kwargs: dict, batch: int | None) -> None:
        w = self._world if self._world is not None else dpl_world.current(timeout=self._timeout)
        self._world = w
        S = next(iter(self._stages.values())).num_stages
        V = len(self._stages)
        if S % V:
            raise _bad(f"{S} stages do not split into {V} stages per rank")
        P = S // V
        reps = self._replicas or [1] * P
        if len(reps) != P:
            raise _bad(f"replicas has {len(reps)} values for {P} pipeline ranks")
        if sum(reps) != w.world_size:
            raise _bad(f"the layout needs {sum(reps)} ranks (replicas {reps}); the world has "
                       f"{w.world_size}")
        prank, self._replica = split_replicas(w.rank, reps)
        # dpl sums gradients over replicas in place: only then do they need
        # buffers before the backward (else autograd makes them, as in torch)
        self._reduce = reps[prank] > 1
        M = self._n_microbatches
        opts = dict(self._options)
        kind = _CHUNKS.get(self._policy_name, 0)
        if V > 1 and kind == 0:
            raise _bad(f"policy {self._policy_name} runs one stage per rank; this rank was "
                       f"given {V} (stages {sorted(self._stages)})")
        if kind == 2 and V != 2:
            raise _bad(f"policy {self._policy_name} runs exactly two stages per rank "
                       f"(rank r holds stages r and 2P-1-r); this rank was given {V}")
        if kind == 1:
            opts.setdefault("chunks", V)
        sched = build_schedule(self._policy_name, P if kind else S, M, **opts).lower()
        mine = sorted(s for s in range(S) if sched.stage_rank(s) == prank)
        if mine != sorted(self._stages):
            raise _bad(f"rank {w.rank} (pipeline rank {prank}) runs stages {mine} under "
                       f"{self._policy_name}; it was given stages {sorted(self._stages)}")
        base = [sum(reps[:p]) for p in range(P)]
        metas: list[tuple | None] = [None] * S
        for s in range(S):
            owner = base[sched.stage_rank(s)]
            blob = b""
            if s in self._stages and self._replica == 0:
                st = self._stages[s]
                in_meta = metas[s - 1] if s > 0 else None
                st.in_meta = in_meta
                out = st.infer_output(in_meta, args, kwargs, self._dims) \
                    if not st.is_last else None
                d = {"outs": Layout(out).to_json() if out else None}
                if s == 0:
                    d["batch"] = batch
                blob = json.dumps(d).encode()
                if len(blob) > _META_BYTES:
                    raise _bad(f"stage {s}: its {len(out)} output tensors take {len(blob)} bytes "
                               f"to describe; dpl.torch's set-up exchange holds {_META_BYTES}")
            got = w.allgather(blob.ljust(_META_BYTES))
            d = json.loads(got[owner].rstrip(b" ") or b"{}")
            if s == 0:
                self._batch = d.get("batch")
            metas[s] = Layout.from_json(d["outs"]) if d.get("outs") else None
        for s, st in self._stages.items():
            st.set_layouts(metas[s - 1] if s > 0 else None, metas[s])
        ab = [m.per_sample if m is not None else 0 for m in metas]
        if self._batch is None or self._batch < M:
            raise _bad(f"a batch of {self._batch} samples cannot make {M} micro-batches")
        self._sched = sched
        self._transport = dpl_world.Transport.open(w, name=self._transport_name,
                                                   timeout=self._timeout) if w.world_size > 1 else None
        cb = self._cb = _Callbacks(self, reps[prank], self._replica)
        if self._reduce:   # dpl sizes its reduction from them, even for an eval first
            for st in self._stages.values():
                st.bind_grads()
        self._runner = Runner(sched, cb, batch=self._batch, activation_bytes=ab,
                              replicas=reps, rank=w.rank, transport=self._transport,
                              timeout=self._timeout, name="dpl.torch")

    def close(self) -> None:
        """Free the runner and close the transport (idempotent)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        t = getattr(self, "_transport", None)
        if t is not None:
            t.close()
            self._transport = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    @property
    def runner(self) -> Runner | None:
        """The dpl.Runner once the first step set it up (statistics)."""
        return self._runner


class _Callbacks:
    """The runner's stage callbacks over this rank's PipelineStages."""

    def __init__(self, sch: _PipelineSchedule, replicas: int, replica: int):
        self.s = sch
        self.M = sch._n_microbatches
        # samples of each micro-batch and this replica's range of it
        # (<dpl/runner.h>: micro-batch j is split(batch, M, j), replica r of
        # R the r-th of R sub-ranges of it), and where each range starts
        # among the cuts
        self.sizes: list[int] = []
        self.ranges: list[tuple[int, int]] = []
        for j in range(self.M):
            b, e = split(sch._batch, self.M, j)
            self.sizes.append(e - b)
            if replicas > 1:
                rb, re = split(e - b, replicas, replica)
                b, e = b + rb, b + re
            self.ranges.append((b, e))
        cuts = sorted({x for r in self.ranges for x in r} - {0, sch._batch})
        at = {0: 0, **{c: i + 1 for i, c in enumerate(cuts)}}
        self.cuts = cuts
        self.piece = [at.get(b, 0) for b, _ in self.ranges]   # empty ones: never called
        self.split_args: tuple | None = None    # this step's inputs, split
        self.split_target: tuple | None = None

    def new_step(self) -> None:
        """Forget the last step's split inputs and target."""
        self.split_args = self.split_target = None

    def _split(self, t: Any, dim: int | None = 0) -> Any:
        # the whole batch cut once per step (one call, like PyTorch's
        # split into micro-batches), not sliced once per callback
        return t.tensor_split(self.cuts, dim) if dim is not REPLICATE and torch.is_tensor(t) \
            else None

    def _take(self, a, t: Any, pieces: Any, dim: int | None = 0) -> Any:
        if pieces is None:
            return t
        j = a.microbatch
        if self.ranges[j][0] != a.begin or self.ranges[j][1] != a.end:
            # never, by <dpl/runner.h>'s contract
            return t.narrow(dim, a.begin, a.end - a.begin)
        return pieces[self.piece[j]]

    def _inputs(self, st: PipelineStage, a) -> tuple:
        n = a.end - a.begin
        if st.is_first:
            sp = self.split_args
            ad, kd = self.s._dims
            if sp is None:
                sp = self.split_args = (
                    [self._split(t, d) for t, d in zip(self.s._args, ad)],
                    {k: self._split(v, kd[k]) for k, v in self.s._kwargs.items()})
            args = tuple([self._take(a, t, p, d) for t, p, d in zip(self.s._args, sp[0], ad)])
            kw = {k: self._take(a, v, sp[1][k], kd[k]) for k, v in self.s._kwargs.items()} \
                if self.s._kwargs else {}
            return args, kw, None
        lay = st.in_meta
        if lay.single:   # the fast path (a call of this is some tenths of a us dearer)
            shape, dtype = lay.metas[0]
            v = a.tensor("input", dtype, (n, *shape))
            vs = (v,) if not self.s._train else \
                (v.detach().requires_grad_(lay.grad_mask[0]),)
            return vs, {}, vs
        vs = lay.views(a, "input", n)
        if not self.s._train:   # a forward-only pass: the views, no graph
            return vs, {}, vs
        inp = tuple([v.detach().requires_grad_(g) for v, g in zip(vs, lay.grad_mask)])
        return inp, {}, inp

    def forward(self, a) -> None:
        st = self.s._stages[a.stage]
        train = self.s._train
        args, kw, inp = self._inputs(st, a)
        out = st.fn(*args, **kw)
        if st.is_last:
            loss = None
            if self.s._loss_fn is not None and self.s._target is not None:
                tgt = self.split_target
                if tgt is None:
                    tgt = self.split_target = self._split(self.s._target)
                tgt = self._take(a, self.s._target, tgt) if tgt is not None \
                    else self.s._target[a.begin:a.end]
                loss = self.s._loss_fn(out, tgt, **self.s._loss_kwargs)
                w = self._share(a)
                if w != 1.0:
                    loss = loss * w
                self.s._losses[a.microbatch] = loss.detach()
            if self.s._keep_outputs:
                if train or inp is None:
                    o = out.detach() if type(out) is torch.Tensor else kept_output(out, None)
                else:   # dpl's input buffer is reused once this returns: an
                    # output of a pass that is a view of it is cloned
                    o = kept_output(out, inp[0].untyped_storage().data_ptr())
                self.s._outputs.setdefault(a.microbatch, []).append(o)
            if train:
                st.state[a.microbatch] = (inp, loss, None)
            return
        lay = st.out_meta
        n = a.end - a.begin
        if lay.single and type(out) is torch.Tensor:
            outs = (out,)
            shape, dtype = lay.metas[0]
            if out.dtype != dtype or out.shape != (n, *shape):
                lay.check(outs, a.stage, a.microbatch, n)   # raises, naming them
            a.tensor("output", dtype, out.shape).copy_(out.detach())
        else:
            outs = as_tuple(out)
            lay.check(outs, a.stage, a.microbatch, n)
            for dst, t in zip(lay.views(a, "output", n), outs):
                dst.copy_(t.detach())
        if train:
            st.state[a.microbatch] = (inp, outs, None)

    def _share(self, a) -> float:
        n = a.end - a.begin
        full = self.sizes[a.microbatch]
        return 1.0 if n == full else n / full

    def _roots(self, st: PipelineStage, a, out) -> tuple[tuple, tuple]:
        """The tensors to differentiate (the loss on the last stage, else
        the outputs that require grad) and their gradients (None for the
        loss, else views of dpl's grad_output buffer)."""
        if st.is_last:
            return (out,), (None,)
        gs = st.out_meta.views(a, "grad_output", a.end - a.begin)
        if len(out) == 1:
            return (out, gs) if out[0].requires_grad else ((), ())
        keep = [i for i, t in enumerate(out) if t.requires_grad]
        return tuple(out[i] for i in keep), tuple(gs[i] for i in keep)

    def _put_grad_input(self, st: PipelineStage, a, grads: Sequence) -> None:
        if st.is_first:
            return
        lay = st.in_meta
        if lay.single:   # the fast path (the loop below costs about 1 us more)
            shape, dtype = lay.metas[0]
            dst = a.tensor("grad_input", dtype, (a.end - a.begin, *shape))
            g = grads[0]
            if g is None:
                dst.zero_()
            else:
                dst.copy_(g)
            return
        for dst, g in zip(lay.views(a, "grad_input", a.end - a.begin), grads):
            if g is None:
                dst.zero_()
            else:
                dst.copy_(g)

    def backward(self, a) -> None:
        st = self.s._stages[a.stage]
        inp, out, _ = st.state.pop(a.microbatch)
        roots, gs = self._roots(st, a, out)
        if roots:
            _autograd.backward(roots, gs)
        if inp is not None:
            self._put_grad_input(st, a, (inp[0].grad,) if len(inp) == 1 else
                                 [t.grad for t in inp])

    def backward_input(self, a) -> None:
        st = self.s._stages[a.stage]
        inp, out, _ = st.state[a.microbatch]
        if inp is None:
            return
        roots, gs = self._roots(st, a, out)
        need = [i for i, t in enumerate(inp) if t.requires_grad]
        got: list = [None] * len(inp)
        if roots and need:
            for i, g in zip(need, _autograd.grad(roots, [inp[i] for i in need], gs, True)):
                got[i] = g
        self._put_grad_input(st, a, got)

    def backward_weight(self, a) -> None:
        st = self.s._stages[a.stage]
        inp, out, _ = st.state.pop(a.microbatch)
        params = st.params()
        roots, g = self._roots(st, a, out)
        if not params or not roots:
            return
        gs = _autograd.grad(roots, params, g, False)
        with torch.no_grad():
            for p, gp in zip(params, gs):
                if gp is None:
                    continue
                if p.grad is None:
                    p.grad = gp
                else:
                    p.grad.add_(gp)

    def grads(self, stage: int):
        if not self.s._reduce:
            return []
        return [(p.grad.data_ptr(), p.grad.numel(), dtype_code(p.grad.dtype))
                for p in self.s._stages[stage].params()]

    def step(self, stage: int, iteration: int) -> None:
        if self.s._scale_grads and self.M > 1:
            with torch.no_grad():
                for p in self.s._stages[stage].params():
                    if p.grad is not None:
                        p.grad.div_(self.M)


class ScheduleGPipe(_PipelineSchedule):
    """All forwards, then all backwards (``torch.distributed.pipelining.ScheduleGPipe``)."""
    _policy = "gpipe"


class Schedule1F1B(_PipelineSchedule):
    """One forward one backward, DAPPLE's early backward (``Schedule1F1B``)."""
    _policy = "1f1b"


class ScheduleInterleaved1F1B(_PipelineSchedule):
    """Interleaved 1F1B over several stages per rank (``ScheduleInterleaved1F1B``):
    rank r holds stages r, r + P, r + 2P, ..."""
    _policy = "interleaved"


class ScheduleLoopedBFS(_PipelineSchedule):
    """Breadth-first over several stages per rank (``ScheduleLoopedBFS``):
    every forward of a rank's first stage, then its next, ...; rank r holds
    stages r, r + P, ..."""
    _policy = "looped-bfs"


class ScheduleInterleavedZeroBubble(_PipelineSchedule):
    """Interleaved 1F1B with the backward split into input and weight
    gradients (``ScheduleInterleavedZeroBubble``, ZB1P); rank r holds
    stages r, r + P, ..."""
    _policy = "interleaved-zb"


class ScheduleZBVZeroBubble(_PipelineSchedule):
    """Zero-bubble V (``ScheduleZBVZeroBubble``): two stages per rank, rank
    r holding stages r and 2P - 1 - r, backward split into I and W."""
    _policy = "zbv"


class ScheduleDualPipeV(_PipelineSchedule):
    """DualPipeV (``ScheduleDualPipeV``): two stages per rank, rank r
    holding stages r and 2P - 1 - r, a forward of one paired with the full
    backward of the other through the steady state, I/W split in the
    cool-down. PyTorch's OVERLAP_F_B pairs run as forward then backward,
    as PyTorch's runtime runs them unless a custom function is registered
    for them; any M (PyTorch needs M >= 2P)."""
    _policy = "dualpipev"


class ScheduleDAPPLE(_PipelineSchedule):
    """DAPPLE: any dpl policy (``policy=``, default "1f1b") with per-stage
    replication ``replicas=[R0, R1, ...]`` (world ranks numbered replica by
    replica, stage by stage; see :func:`stage_of`)."""
    _policy = "1f1b"

    def __init__(self, stage: PipelineStage | Sequence[PipelineStage], n_microbatches: int,
                 loss_fn: Callable | None = None, replicas: Sequence[int] | None = None,
                 policy: str = "1f1b", scale_grads: bool = True, **kw: Any):
        super().__init__(stage, n_microbatches, loss_fn, scale_grads=scale_grads,
                         policy=policy, replicas=replicas, **kw)


def stage_of(rank: int, replicas: Sequence[int]) -> tuple[int, int]:
    """(stage index, replica index) that world ``rank`` runs under a layout
    of ``replicas`` (one count per stage, one stage per rank)."""
    return split_replicas(rank, replicas)
