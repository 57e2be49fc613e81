"""dpl.Runner: execute a lowered schedule on this rank with Python stage
callbacks, on dpl's own buffers (seen as numpy arrays or torch tensors
without copying).

The C runner (<dpl/runner.h>) does the work: it walks this rank's action
list, posts receives and sends on the transport, bounds every wait, and
sums each stage's gradients over its replicas. For every compute action it
calls back into Python on the thread that called :meth:`Runner.step`; the
GIL is released while C runs and taken for each callback.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Callable, Sequence

from . import _runner_capi as capi
from ._transport_capi import set_error
from . import errors

_DTYPE_CODES = {"float32": capi.DTYPE_F32, "float64": capi.DTYPE_F64,
                "bfloat16": capi.DTYPE_BF16, "float16": capi.DTYPE_F16}


def dtype_code(name: str) -> int:
    """dpl's ``enum dpl_dtype`` for a dtype name ("float32", "torch.float32",
    numpy's "float64", ...). Raises InvalidArgument naming an unsupported one."""
    key = str(name).replace("torch.", "")
    key = {"f32": "float32", "f64": "float64", "bf16": "bfloat16",
           "f16": "float16", "half": "float16", "float": "float32",
           "double": "float64"}.get(key, key)
    code = _DTYPE_CODES.get(key)
    if code is None:
        raise errors.InvalidArgument(
            errors.EINVAL, "DPL_EINVAL",
            f"dtype {name!r} cannot be reduced by dpl (float32, float64, bfloat16, float16)")
    return code


class StageArgs(capi.StageArgs):
    """What one stage callback gets: ``struct dpl_stage_args`` itself.

    Fields: ``stage``, ``microbatch``, ``slot``, ``replica``,
    ``iteration``, ``begin``, ``end`` (this replica's samples), ``batch``;
    ``input``, ``output``, ``grad_output``, ``grad_input`` are addresses
    (None when they do not apply) with their ``*_bytes``. The buffers
    belong to the runner and stay valid from the forward of the
    micro-batch until its backward (or W) returns. Use :meth:`array` or
    :meth:`tensor` to see them without copying. Valid only during the
    callback it was passed to (it is read in place from the C struct).
    """

    _runner: "Runner | None" = None   # set on each runner's own subclass

    def array(self, which: str, dtype: Any = "float64", shape: Sequence[int] | None = None):
        """The buffer ``which`` ("input", "output", "grad_output",
        "grad_input") as a numpy array of ``dtype`` (1-D, or ``shape``),
        sharing dpl's memory. None when the buffer does not apply."""
        return self._runner._view(self, which, "numpy", dtype, shape)

    def tensor(self, which: str, dtype: Any, shape: Sequence[int] | None = None):
        """Like :meth:`array`, as a torch tensor (torch must be installed)."""
        return self._runner._view(self, which, "torch", dtype, shape)


def _view_numpy(addr: int, nbytes: int, dtype: Any):
    import numpy as np
    dt = np.dtype(dtype)
    raw = (ctypes.c_char * nbytes).from_address(addr)
    return np.frombuffer(raw, dtype=dt, count=nbytes // dt.itemsize)


def _view_torch(addr: int, nbytes: int, dtype: Any):
    import torch
    raw = (ctypes.c_char * nbytes).from_address(addr)
    return torch.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize)


class Runner:
    """One rank's executor of a lowered schedule.

    Args:
        schedule: a lowered :class:`dpl.Schedule` (or any object with a
            ``_ptr`` to a lowered ``dpl_schedule``); kept alive by the runner.
        callbacks: an object with ``forward(args)`` and, as the schedule
            needs them, ``backward(args)``, ``backward_input(args)``,
            ``backward_weight(args)``; ``grads(stage)`` returning a sequence
            of ``(address, count, dtype)`` (the stage's gradient buffers on
            the host, one dtype per stage; the runner sums them over the
            stage's replicas in place, in a fixed order); and
            ``step(stage, iteration)``. Exceptions they raise abort the
            iteration on every rank.
        batch: samples per iteration (>= micro-batches).
        activation_bytes: per stage, bytes of one sample of its output.
        replicas: per pipeline rank, its replica count (None: 1 each).
        rank: this runner's world rank.
        transport: an open :class:`dpl.world.Transport` (or an object with
            ``_ptr``); None only for a world of one rank.
        timeout: bound of every wait, in seconds.
        trace: events kept per step (0: none).

    Raises the mapped :class:`dpl.Error` of ``dpl_runner_create`` (e.g.
    InvalidArgument naming a bad layout). Does not communicate. A runner
    is used by one thread at a time.
    """

    def __init__(self, schedule: Any, callbacks: Any, *, batch: int,
                 activation_bytes: Sequence[int] | None = None,
                 replicas: Sequence[int] | None = None, rank: int = 0,
                 transport: Any = None, timeout: float = 60.0,
                 trace: int = 0, name: str = "python"):
        lib = capi.core()
        self._lib = lib
        self._ptr = c_void_p()
        self._exc: BaseException | None = None
        self._views: dict = {}
        self._schedule = schedule
        self._transport = transport
        self._cb = callbacks
        stages = lib.dpl_schedule_stages(schedule._ptr)
        ranks = lib.dpl_schedule_ranks(schedule._ptr)
        if not isinstance(batch, int) or batch < 1:
            raise errors.InvalidArgument(errors.EINVAL, "DPL_EINVAL", f"batch must be an int >= 1 (got {batch!r})")
        if timeout is None or not timeout > 0:
            raise errors.InvalidArgument(errors.EINVAL, "DPL_EINVAL", f"timeout must be > 0 seconds (got {timeout!r})")
        ab = list(activation_bytes) if activation_bytes is not None else [0] * stages
        if len(ab) != stages:
            raise errors.InvalidArgument(errors.EINVAL, "DPL_EINVAL",
                f"activation_bytes has {len(ab)} values, the schedule has {stages} stages")
        self._ab = (c_uint64 * stages)(*ab)
        self._reps = None
        if replicas is not None:
            if len(replicas) != ranks:
                raise errors.InvalidArgument(errors.EINVAL, "DPL_EINVAL",
                    f"replicas has {len(replicas)} values, the schedule has {ranks} pipeline ranks")
            self._reps = (c_uint32 * ranks)(*replicas)
        self._grad_bufs: dict[int, Any] = {}
        self._args_cls: type | None = None
        self._make_ops(callbacks, name)
        p = capi.RunnerParams()
        p.schedule = schedule._ptr
        p.replicas = self._reps
        p.rank = rank
        p.timeout_ms = max(1, int(timeout * 1000))
        p.batch = batch
        p.activation_bytes = self._ab
        p.stage_ops = ctypes.pointer(self._ops)
        p.stage_user = None
        p.transport = transport._ptr if transport is not None else None
        p.device = None
        p.trace_capacity = trace
        self._params = p
        rc = lib.dpl_runner_create(byref(p), byref(self._ptr))
        if rc == 0 and transport is not None and hasattr(transport, "attach"):
            transport.attach(self)
        if rc != 0:
            exc, self._exc = self._exc, None
            err = errors.error_for(rc)
            if exc is not None:
                raise exc from err
            raise err

    # -- callbacks ----------------------------------------------------
    def _make_ops(self, cb: Any, name: str) -> None:
        self._name = name.encode()
        ops = capi.StageOps()
        ops.abi_version = capi.DPL_STAGE_ABI_VERSION
        ops.size = ctypes.sizeof(capi.StageOps)
        ops.name = self._name
        keep = []
        for member in ("forward", "backward", "backward_input", "backward_weight"):
            fn = getattr(cb, member, None)
            if fn is not None:
                c = capi.STAGE_FN(self._wrap_stage(fn))
                keep.append(c)
                setattr(ops, member, c)
        g = capi.GRADS_FN(self._wrap_grads(cb.grads))
        s = capi.STEP_FN(self._wrap_step(cb.step))
        keep += [g, s]
        ops.grads = g
        ops.step = s
        self._keep = keep
        self._ops = ops

    def _fail(self, e: BaseException, what: str) -> int:
        if self._exc is None:
            self._exc = e
        set_error(errors.ECALLBACK, f"{what}: {type(e).__name__}: {e}")
        return errors.ECALLBACK

    def _wrap_stage(self, fn: Callable) -> Callable:
        if self._args_cls is None:
            self._args_cls = type("StageArgs", (StageArgs,), {"_runner": self})
        from_address = self._args_cls.from_address

        def call(user, addr):
            try:
                fn(from_address(addr))
                return 0
            except BaseException as e:  # noqa: BLE001 - reported through dpl
                return self._fail(e, "stage callback")
        return call

    def _wrap_grads(self, fn: Callable) -> Callable:
        def call(user, stage, bufs, n):
            try:
                items = list(fn(stage))
                arr = (capi.Buffer * max(1, len(items)))()
                for i, (addr, count, dtype) in enumerate(items):
                    arr[i].ptr = addr
                    arr[i].count = count
                    arr[i].dtype = dtype if isinstance(dtype, int) else dtype_code(dtype)
                    arr[i].mem = capi.MEM_HOST
                self._grad_bufs[stage] = arr   # valid until step returns
                bufs[0] = ctypes.cast(arr, ctypes.POINTER(capi.Buffer))
                n[0] = len(items)
                return 0
            except BaseException as e:  # noqa: BLE001
                return self._fail(e, f"grads of stage {stage}")
        return call

    def _wrap_step(self, fn: Callable) -> Callable:
        def call(user, stage, iteration):
            try:
                fn(stage, iteration)
                return 0
            except BaseException as e:  # noqa: BLE001
                return self._fail(e, f"step of stage {stage}")
        return call

    def _view(self, c: capi.StageArgs, which: str, kind: str, dtype: Any, shape: Any) -> Any:
        addr = getattr(c, which)
        if not addr:
            return None
        nbytes = getattr(c, which + "_bytes")
        shape = tuple(shape) if shape is not None else None
        key = (addr, nbytes, kind, dtype, shape)   # buffers never move: keep their views
        v = self._views.get(key)
        if v is None:
            v = (_view_torch if kind == "torch" else _view_numpy)(addr, nbytes, dtype)
            if shape is not None:
                v = v.reshape(shape) if kind == "numpy" else v.view(shape)
            self._views[key] = v
        return v

    # -- running ------------------------------------------------------
    def step(self) -> None:
        """Run one iteration of this rank's actions. Blocks until done;
        every wait is bounded by the timeout.

        Raises: the exception a stage callback of this rank raised (with
        dpl's error as its cause); :class:`dpl.PeerError` naming the rank
        that failed when another rank failed; :class:`dpl.TimeoutError`
        naming the peer waited for; other :class:`dpl.Error`. After a
        failure the runner stays failed (close it).
        """
        self._run(self._lib.dpl_runner_step)

    def forward(self) -> None:
        """Run a forward-only pass (``dpl_runner_forward``): this rank's
        RECV_F, F and SEND_F actions of the list, in order; no backward,
        gradient reduction or step callback. The forward callback's
        buffers are dpl's only until it returns. Every rank calls it at
        the same point of its sequence of steps and passes. Blocks and
        raises as :meth:`step` does; a rank whose part of the pass was
        done when another failed raises at its next call.
        """
        self._run(self._lib.dpl_runner_forward)

    def _run(self, fn) -> None:
        if not self._ptr:
            raise errors.Error(errors.ECANCELED, "DPL_ECANCELED", "the runner is closed")
        rc = fn(self._ptr)
        self._grad_bufs.clear()
        if rc == 0:
            return
        msg = (self._lib.dpl_runner_last_error(self._ptr) or b"").decode("utf-8", "replace")
        err = errors.error_for(rc, msg or None)
        if isinstance(err, errors.PeerError):
            # The cause the runner settled on, not one read off the text.
            cause = self._lib.dpl_runner_cause(self._ptr)
            err.rank = None if cause == 0xFFFFFFFF else cause
        exc, self._exc = self._exc, None
        from ._report import report_failure
        report_failure(exc if exc is not None else err)
        if exc is not None:
            if isinstance(exc, Exception) or isinstance(exc, KeyboardInterrupt):
                raise exc.with_traceback(exc.__traceback__) from err
            raise exc
        raise err

    def stats(self) -> dict:
        """Totals since creation (``struct dpl_runner_stats``) as a dict;
        times in seconds, ``count``/``time`` per action kind."""
        s = capi.RunnerStats()
        self._lib.dpl_runner_stats(self._ptr, byref(s))
        return {
            "iterations": s.iterations, "actions": s.actions,
            "count": {k: s.count[i] for i, k in enumerate(capi.ACTION_KINDS)},
            "time": {k: s.ns[i] / 1e9 for i, k in enumerate(capi.ACTION_KINDS)},
            "wait": s.wait_ns / 1e9, "step": s.step_ns / 1e9,
            "bytes_sent": s.bytes_sent, "bytes_received": s.bytes_received,
            "bytes_reduced": s.bytes_reduced, "buffer_bytes": s.buffer_bytes,
        }

    def stage_stats(self, stage: int) -> dict:
        """Figures of one stage this rank runs (slots, peak in flight,
        buffer bytes). InvalidArgument when this rank does not run it."""
        s = capi.StageStats()
        errors.check(self._lib.dpl_runner_stage_stats(self._ptr, stage, byref(s)))
        return {"stage": s.stage, "slots": s.slots, "peak_inflight": s.peak_inflight,
                "slot_bytes": s.slot_bytes, "peak_buffer_bytes": s.peak_buffer_bytes}

    def close(self) -> None:
        """Cancel what is pending and free every buffer (idempotent). Does
        not close the transport."""
        if self._ptr:
            self._lib.dpl_runner_destroy(self._ptr)
            self._ptr = c_void_p()
            t = self._transport
            if t is not None and hasattr(t, "detach"):
                t.detach(self)
        self._views.clear()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def split(total: int, parts: int, index: int) -> tuple[int, int]:
    """The ``index``-th of ``parts`` contiguous ranges of [0, total), sizes
    differing by at most one, larger first (``dpl_split``)."""
    b, e = c_uint64(), c_uint64()
    errors.check(capi.core().dpl_split(total, parts, index, byref(b), byref(e)))
    return b.value, e.value


def position(schedule: Any, replicas: Sequence[int] | None, rank: int) -> tuple[int, int]:
    """(pipeline rank, replica index) of world ``rank`` in a layout."""
    lib = capi.core()
    n = lib.dpl_schedule_ranks(schedule._ptr)
    reps = (c_uint32 * n)(*replicas) if replicas is not None else None
    p, r = c_uint32(), c_uint32()
    errors.check(lib.dpl_runner_position(schedule._ptr, reps, rank, byref(p), byref(r)))
    return p.value, r.value


def world_size(schedule: Any, replicas: Sequence[int] | None) -> int:
    """The world size of a layout (sum of replicas)."""
    lib = capi.core()
    n = lib.dpl_schedule_ranks(schedule._ptr)
    reps = (c_uint32 * n)(*replicas) if replicas is not None else None
    out = c_uint32()
    errors.check(lib.dpl_runner_world_size(schedule._ptr, reps, byref(out)))
    return out.value


__all__ = ["Runner", "StageArgs", "split", "position", "world_size", "dtype_code"]
