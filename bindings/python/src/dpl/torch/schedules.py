"""dpl.torch's schedule classes: the API of ``torch.distributed.pipelining``
(``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ...,
their bases ``PipelineScheduleSingle`` and ``PipelineScheduleMulti``, and
``get_schedule_class``) on dpl's runner, and ``ScheduleDAPPLE`` for what
PyTorch lacks (uneven per-stage replication, every dpl policy, any
micro-batch count the policy accepts).

``step(*args, target=None, losses=None, ...)`` and ``eval(...)`` have
PyTorch's semantics (pre-split ``arg_mbs``/``kwarg_mbs``/``target_mbs``,
``loss_kwargs``, ``return_outputs``; without a ``loss_fn`` a step is a
forward-only pass, as ``eval``; keyword inputs reach every stage of the
rank they are given on): the
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
from ..runner import Runner
from ..schedule import Schedule, schedule as build_schedule
from . import _csv, _ranks
from ._boundary import Layout
from ._callbacks import _Callbacks
from ._chunks import REPLICATE, Chunking, default_cut
from ._inputs import join_microbatches
from .liveness import (PipelineActivationLiveness,  # noqa: F401 (PyTorch's module has them)
                       analyze_pipeline_activation_liveness)
from ._pytorch_args import check_multi, check_policy_options, check_runtime
from .stage import PipelineStage, _bad, split_replicas

_META_BYTES = 8192
# model chunks per rank of a policy (dpl_policy_chunks): 1 = V >= 2 from the
# stages given, 2 = exactly two (zbv), absent = one stage per rank
_CHUNKS = {"interleaved": 1, "looped-bfs": 1, "interleaved-zb": 1, "zbv": 2, "dualpipev": 2}


class _PipelineSchedule:
    _policy: str | None = "1f1b"

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
        self._by_index = {s.stage_index: s for s in st}
        if len(self._by_index) != len(st):
            raise _bad(f"stage indices repeat: {[s.stage_index for s in st]}")
        self._stages = st   # PyTorch's attributes, which scripts reach into
        self._num_stages = S
        check_policy_options(policy_options)
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        #: divide the gradients by the number of micro-batches after each
        #: step (PyTorch's attribute; read at every step)
        self.scale_grads = scale_grads
        self._policy_name = policy or self._policy
        self._replicas = list(replicas) if replicas is not None else None
        self._transport_name = transport
        self._timeout = timeout
        self._world = world or st[0].world
        self._options = policy_options
        self._runner: Runner | None = None
        self._loaded: Schedule | None = None   # PipelineScheduleMulti._load_csv's
        self._reduce = False
        self._batch: int | None = None
        self._failed: BaseException | None = None
        # as PyTorch: without a loss_fn there is nothing to differentiate,
        # and step() runs forward-only passes like eval()
        self._has_backward = loss_fn is not None
        for stage in st:   # PyTorch's stages carry the flag too
            stage.has_backward = self._has_backward
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
        keyword; keyword inputs given on any rank reach every stage of
        that rank, cut into micro-batches as the first stage's are, as in
        PyTorch); ``target`` and ``losses`` (a list to append the
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
                                                 arg_mbs, kwarg_mbs, target_mbs, ch)
        first = self._by_index.get(0)
        last = self._by_index.get(self._num_stages - 1)
        self._dims: tuple = ([], {})
        if first is not None:
            if not args and not kwargs:
                raise _bad("the first stage's step() and eval() need the batch's inputs")
            self._dims, b = ch.cut(args, kwargs)
            kb = None
        else:   # keyword inputs reach every stage of the rank, as in PyTorch
            b = None
            self._dims, kb = ch.cut_kwargs(kwargs) if kwargs else (([], {}), None)
        if train and last is not None and target is None:
            raise _bad("the last stage's step() needs target= when loss_fn is given")
        # a target is cut as an input without a spec (its tensors along 0)
        self._target_cut = default_cut(target) if last is not None and target is not None \
            else REPLICATE
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
            if kb is not None and kb != self._batch:
                raise _bad(f"keyword inputs of {kb} samples; the batch has {self._batch} "
                           "(the first stage's inputs)")
            if train:
                if self._reduce:
                    for s in self._stages:
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
            for s in self._stages:
                s.clear_runtime_states()
        if last is None:
            return None
        if losses is not None:
            losses.extend(self._losses[j] for j in sorted(self._losses))
        last.output_chunks[:] = [t for j in sorted(self._outputs) for t in self._outputs[j]]
        return self._chunking.merge_outputs(last.output_chunks)   # reads, keeps nothing

    # ---------------------------------------------------------------
    def _setup(self, args: tuple, kwargs: dict, batch: int | None) -> None:
        w = self._world if self._world is not None else dpl_world.current(timeout=self._timeout)
        self._world = w
        S = self._num_stages
        sched = self._loaded if self._loaded is not None else self._build(S)
        P = sched.ranks
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
        mine = sorted(s for s in range(S) if sched.stage_rank(s) == prank)
        if mine != sorted(self._by_index):
            raise _bad(f"rank {w.rank} (pipeline rank {prank}) runs stages {mine} under "
                       f"{self._policy_name or 'the loaded CSV'}; it was given stages "
                       f"{sorted(self._by_index)}")
        base = [sum(reps[:p]) for p in range(P)]
        metas: list[tuple | None] = [None] * S
        for s in range(S):
            owner = base[sched.stage_rank(s)]
            blob = b""
            if s in self._by_index and self._replica == 0:
                st = self._by_index[s]
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
        for s, st in self._by_index.items():
            st.set_layouts(metas[s - 1] if s > 0 else None, metas[s])
        ab = [m.per_sample if m is not None else 0 for m in metas]
        if self._batch is None or self._batch < M:
            raise _bad(f"a batch of {self._batch} samples cannot make {M} micro-batches")
        self._sched = sched
        _ranks.fixed(self, sched, True)
        self._transport = dpl_world.Transport.open(w, name=self._transport_name,
                                                   timeout=self._timeout) if w.world_size > 1 else None
        cb = self._cb = _Callbacks(self, reps[prank], self._replica)
        if self._reduce:   # dpl sizes its reduction from them, even for an eval first
            for st in self._stages:
                st.bind_grads()
        self._runner = Runner(sched, cb, batch=self._batch, activation_bytes=ab,
                              replicas=reps, rank=w.rank, transport=self._transport,
                              timeout=self._timeout, name="dpl.torch")

    def _build(self, S: int) -> Schedule:
        """The lowered schedule of the policy for ``S`` stages, this
        rank's stages ``V`` to a rank."""
        V = len(self._stages)
        if self._policy_name is None:
            raise _bad(f"{type(self).__name__} names no schedule: pass policy= (a dpl policy) "
                       "or load one with _load_csv(path) before the first step")
        if S % V:
            raise _bad(f"{S} stages do not split into {V} stages per rank")
        opts = dict(self._options)
        kind = _CHUNKS.get(self._policy_name, 0)
        if V > 1 and kind == 0:
            raise _bad(f"policy {self._policy_name} runs one stage per rank; this rank was "
                       f"given {V} (stages {sorted(self._by_index)})")
        if kind == 2 and V != 2:
            raise _bad(f"policy {self._policy_name} runs exactly two stages per rank "
                       f"(rank r holds stages r and 2P-1-r); this rank was given {V}")
        if kind == 1:
            opts.setdefault("chunks", V)
        return build_schedule(self._policy_name, S // V, self._n_microbatches, **opts).lower()

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
    def pipeline_order(self) -> dict[int, list]:
        """PyTorch's ``pipeline_order``: each pipeline rank's compute
        actions (F, B, I, W, OVERLAP_F_B), as :class:`dpl.Action` values
        printed in PyTorch's notation, in the order the rank runs them:
        the schedule the steps run (the policy's, or the one
        :meth:`PipelineScheduleMulti._load_csv` read). Unlike PyTorch's,
        no None entries stand for idle time, and no REDUCE_GRAD: dpl's
        runner adds its transfers and reductions itself. A new dict at
        each access. Raises InvalidArgument as the first step would for a
        schedule dpl cannot build."""
        return _csv.compute_order(self)

    @property
    def runner(self) -> Runner | None:
        """The dpl.Runner once the first step set it up (statistics)."""
        return self._runner


class PipelineScheduleSingle(_PipelineSchedule):
    """The schedules that run one stage per rank (PyTorch's
    ``PipelineScheduleSingle``): the base of :class:`ScheduleGPipe` and
    :class:`Schedule1F1B`. Built directly, it runs the dpl policy named by
    ``policy=``. PyTorch's arguments (``stage`` by that name), then
    dpl's keyword-only ones (``policy=``, ``replicas=``, ``transport=``,
    ``timeout=``, ``world=``, policy options)."""
    _policy = None

    def __init__(self, stage: PipelineStage, n_microbatches: int,
                 loss_fn: Callable | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True, **dpl_options: Any):
        super().__init__(stage, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads, **dpl_options)
        self._stage = self._stages[0]   # PyTorch's attribute


class PipelineScheduleMulti(_PipelineSchedule):
    """The schedules that run several stages per rank (PyTorch's
    ``PipelineScheduleMulti``): the base of the interleaved, looped,
    zero-bubble and V schedules. Built directly, it runs the dpl policy
    named by ``policy=`` or the schedule :meth:`_load_csv` reads.

    PyTorch's arguments in PyTorch's order; ``use_full_backward``
    (deprecated there) changes nothing, ``backward_requires_autograd``
    must be True (``_pytorch_args.py``). ``**dpl_options``: the
    keyword-only arguments of the other classes (``policy=``,
    ``replicas=``, ``transport=``, ``timeout=``, ``world=``, policy
    options). PyTorch's attributes ``rank``, ``pp_group_size``,
    ``stage_index_to_group_rank`` and, by class, ``n_local_stages``,
    ``number_of_rounds``, ``microbatches_per_round``: ``_ranks.py``."""
    _policy = None

    def __init__(self, stages: PipelineStage | Sequence[PipelineStage], n_microbatches: int,
                 loss_fn: Callable | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 use_full_backward: bool | None = None, scale_grads: bool = True,
                 backward_requires_autograd: bool = True, **dpl_options: Any):
        check_multi(use_full_backward, backward_requires_autograd)
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads, **dpl_options)
        _ranks.set_multi(self, _CHUNKS.get(self._policy_name) == 2)   # rank, pp_group_size, ...

    def _load_csv(self, filename: Any, format: str = "compute_only") -> None:  # noqa: A002
        """Run the schedule in PyTorch's CSV file ``filename`` instead of
        the class's (PyTorch's ``_load_csv``): one line per pipeline rank,
        PyTorch's action strings; ``format`` "compute_only" (F, B, I, W;
        dpl adds the sends and receives) or "compute_comms" (with SEND_F,
        RECV_F, ...; run as written). Call it before the first step, with
        the same file on every rank. Raises InvalidArgument naming a bad
        ``format``, a file that is not such a schedule (the action and line
        at fault), one of another kind than ``format`` says, or one whose
        stages or micro-batches differ from this schedule's; OSError when
        the file cannot be read."""
        _csv.load(self, filename, format)


    def _dump_csv(self, filename: Any) -> None:
        """Write :attr:`pipeline_order` to ``filename`` as PyTorch's
        compute-only CSV (PyTorch's ``_dump_csv``): one line per pipeline
        rank, what :meth:`_load_csv` reads back. Written to a temporary
        file beside it and renamed, so a failure leaves no partial file.
        Raises OSError when it cannot be written."""
        _csv.dump(self, filename, "compute_only")


class _PipelineScheduleRuntime(PipelineScheduleMulti):
    """PyTorch's ``_PipelineScheduleRuntime``, the class scripts build to
    run a CSV file (``_load_csv``) and the base of its classes with several
    stages per rank: here :class:`PipelineScheduleMulti` under that name,
    so that those scripts and their ``issubclass`` tests run unchanged.

    Takes :class:`PipelineScheduleMulti`'s arguments and PyTorch's
    runtime ones, ``defer_pp_recv``, ``max_active_stages``,
    ``unshard_lookahead``, ``defer_reduce_grad_wait`` and
    ``max_outstanding_sends``: checked as PyTorch checks them, and
    without effect here (dpl's runner places its transfers by the lowered
    lists and holds no FSDP state; ``_pytorch_args.py``)."""

    def __init__(self, *args: Any, defer_pp_recv: bool = False, max_active_stages: int = 3,
                 unshard_lookahead: Any = "full", defer_reduce_grad_wait: bool = False,
                 max_outstanding_sends: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        check_runtime(self._num_stages // len(self._stages), defer_pp_recv, max_active_stages,
                      unshard_lookahead, defer_reduce_grad_wait, max_outstanding_sends)

    def register_custom_function(self, computation_type: Any, custom_function: Any) -> None:
        """PyTorch's hook to run an action type with the caller's function
        (built on its runtime's stage internals, ``forward_one_chunk``
        and the like): refused with InvalidArgument naming the type, since
        dpl's runner runs every action itself and its stages have no such
        internals. Nothing is registered."""
        raise _bad(f"register_custom_function({computation_type!s}, ...): dpl.torch runs "
                   f"every action in dpl's runner, with autograd for each backward, and "
                   f"takes no custom function; use a dpl policy or _load_csv for another "
                   f"order")

    @property
    def pipeline_order_with_comms(self) -> dict[int, list]:
        """PyTorch's ``pipeline_order_with_comms``: each pipeline rank's
        lowered list as :meth:`_dump_csv` writes it (sends, receives, their
        waits and the gradient reductions; an OVERLAP_F_B marker followed
        by its F and B), as :class:`dpl.Action` values. A new dict at each
        access; raises as :attr:`pipeline_order` does."""
        return _csv.comms_order(self)


    def _dump_csv(self, filename: Any, format: str = "compute_comms") -> None:  # noqa: A002
        """Write the schedule to ``filename`` as PyTorch's CSV (PyTorch's
        ``_dump_csv``): ``format`` "compute_comms" (the default, as
        PyTorch's: the lowered lists in the form its runtime loads, with
        sends, receives and their waits) or "compute_only". Written
        atomically (a temporary file renamed). Raises InvalidArgument
        naming a bad ``format``, OSError when the file cannot be
        written."""
        _csv.dump(self, filename, format)


class _Runtime(_PipelineScheduleRuntime):
    """The constructor PyTorch's interleaved, zero-bubble and V classes
    share, in PyTorch's order (the arguments: :class:`PipelineScheduleMulti`
    and :class:`_PipelineScheduleRuntime`)."""

    def __init__(self, stages: PipelineStage | Sequence[PipelineStage], n_microbatches: int,
                 loss_fn: Callable | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True, backward_requires_autograd: bool = True,
                 defer_pp_recv: bool = False, max_active_stages: int = 3,
                 unshard_lookahead: Any = "full", *, defer_reduce_grad_wait: bool = False,
                 max_outstanding_sends: int | None = None, **dpl_options: Any):
        tuning = dict(defer_pp_recv=defer_pp_recv, max_active_stages=max_active_stages,
                      unshard_lookahead=unshard_lookahead,
                      defer_reduce_grad_wait=defer_reduce_grad_wait,
                      max_outstanding_sends=max_outstanding_sends)
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, None, scale_grads, backward_requires_autograd,
                         **tuning, **dpl_options)


def get_schedule_class(schedule_name: str) -> type:
    """The schedule class of a name, any case (PyTorch's
    ``get_schedule_class``): "1F1B", "Interleaved1F1B", "GPipe",
    "LoopedBFS", "InterleavedZeroBubble", "PipelineScheduleSingle",
    "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV", and dpl's
    "DAPPLE". Raises InvalidArgument (a ValueError, as PyTorch's) naming
    the name and the valid ones."""
    if not isinstance(schedule_name, str):
        raise _bad(f"schedule_name must be a str (got {type(schedule_name).__name__})")
    for name, cls in _SCHEDULES.items():
        if name.lower() == schedule_name.lower():
            return cls
    raise _bad(f"unknown schedule name {schedule_name!r}; the valid names are "
               f"{list(_SCHEDULES)}")


class ScheduleGPipe(PipelineScheduleSingle):
    """All forwards, then all backwards (``torch.distributed.pipelining.ScheduleGPipe``)."""
    _policy = "gpipe"


class Schedule1F1B(PipelineScheduleSingle):
    """One forward one backward, DAPPLE's early backward (``Schedule1F1B``)."""
    _policy = "1f1b"


class ScheduleInterleaved1F1B(_Runtime):
    """Interleaved 1F1B over several stages per rank (``ScheduleInterleaved1F1B``):
    rank r holds stages r, r + P, r + 2P, ..."""
    _policy = "interleaved"


class ScheduleLoopedBFS(_Runtime):
    """Breadth-first over several stages per rank (``ScheduleLoopedBFS``):
    every forward of a rank's first stage, then its next, ...; rank r holds
    stages r, r + P, ... PyTorch's constructor takes no input chunk specs:
    ``output_merge_spec`` is the fourth argument, and dpl's
    ``args_chunk_spec``/``kwargs_chunk_spec`` are keyword-only."""
    _policy = "looped-bfs"

    def __init__(self, stages: PipelineStage | Sequence[PipelineStage], n_microbatches: int,
                 loss_fn: Callable | None = None, output_merge_spec: Any = None,
                 scale_grads: bool = True, backward_requires_autograd: bool = True,
                 defer_pp_recv: bool = False, max_active_stages: int = 3,
                 unshard_lookahead: Any = "full", *, defer_reduce_grad_wait: bool = False,
                 max_outstanding_sends: int | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, **dpl_options: Any):
        # _Runtime's constructor with the specs where PyTorch's other classes take them
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads, backward_requires_autograd,
                         defer_pp_recv, max_active_stages, unshard_lookahead,
                         defer_reduce_grad_wait=defer_reduce_grad_wait,
                         max_outstanding_sends=max_outstanding_sends, **dpl_options)


class ScheduleInterleavedZeroBubble(_Runtime):
    """Interleaved 1F1B with the backward split into input and weight
    gradients (``ScheduleInterleavedZeroBubble``, ZB1P); rank r holds
    stages r, r + P, ..."""
    _policy = "interleaved-zb"


class ScheduleZBVZeroBubble(_Runtime):
    """Zero-bubble V (``ScheduleZBVZeroBubble``): two stages per rank, rank
    r holding stages r and 2P - 1 - r, backward split into I and W."""
    _policy = "zbv"


class ScheduleDualPipeV(_Runtime):
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


# get_schedule_class's names (PyTorch's, in its order), each a class's
# name without "Schedule"
_SCHEDULES: dict[str, type] = {c.__name__.removeprefix("Schedule"): c for c in (
    Schedule1F1B, ScheduleInterleaved1F1B, ScheduleGPipe, ScheduleLoopedBFS,
    ScheduleInterleavedZeroBubble, PipelineScheduleSingle, PipelineScheduleMulti,
    ScheduleZBVZeroBubble, ScheduleDualPipeV, ScheduleDAPPLE)}


def stage_of(rank: int, replicas: Sequence[int]) -> tuple[int, int]:
    """(stage index, replica index) that world ``rank`` runs under a layout
    of ``replicas`` (one count per stage, one stage per rank)."""
    return split_replicas(rank, replicas)
