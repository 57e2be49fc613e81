"""The runner's stage callbacks for dpl.torch's schedules: each forward,
backward (whole, or input and weight gradients apart) and optimizer
boundary of this rank's stages, on dpl's buffers seen as tensors.

The first stage takes its inputs from the step's batch, cut once per step
into this replica's share of every micro-batch; later stages take views of
the buffer their receive landed in and write their outputs into the
buffer their send goes out from (``_boundary.Layout``). Between a
micro-batch's forward and its backward, the stage keeps the inputs and
outputs autograd needs in ``PipelineStage.state``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from ..runner import dtype_code, split
from . import _autograd, _chunks
from ._boundary import as_tuple, kept_output
from .stage import PipelineStage

if TYPE_CHECKING:
    from .schedules import _PipelineSchedule


class _Callbacks:
    """The runner's stage callbacks over this rank's PipelineStages."""

    def __init__(self, sch: "_PipelineSchedule", replicas: int, replica: int):
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
        self.split_args: list | None = None     # this step's positional inputs, split
        self.split_kwargs: dict | None = None   # its keyword inputs, split
        self.split_target: tuple | None = None

    def new_step(self) -> None:
        """Forget the last step's split inputs and target."""
        self.split_args = self.split_kwargs = self.split_target = None

    def _split(self, t: Any, cut: Any) -> list | None:
        # the whole batch cut once per step (one call, like PyTorch's
        # split into micro-batches), not sliced once per callback
        return _chunks.split(t, cut, self.cuts)

    def _take(self, a, t: Any, pieces: list | None, cut: Any) -> Any:
        if pieces is None:
            return t
        j = a.microbatch
        if self.ranges[j][0] != a.begin or self.ranges[j][1] != a.end:
            # never, by <dpl/runner.h>'s contract
            return _chunks.narrow(t, cut, a.begin, a.end - a.begin)
        return pieces[self.piece[j]]

    def _kwargs(self, a) -> dict:
        # the step's keyword inputs, for every stage of the rank (PyTorch's rule)
        kwargs = self.s._kwargs
        kd = self.s._dims[1]
        sp = self.split_kwargs
        if sp is None:
            sp = self.split_kwargs = {k: self._split(v, kd[k]) for k, v in kwargs.items()}
        return {k: self._take(a, v, sp[k], kd[k]) for k, v in kwargs.items()}

    def _inputs(self, st: PipelineStage, a) -> tuple:
        n = a.end - a.begin
        kw = self._kwargs(a) if self.s._kwargs else {}
        if st.is_first:
            sp = self.split_args
            ad = self.s._dims[0]
            if sp is None:
                sp = self.split_args = [self._split(t, d) for t, d in zip(self.s._args, ad)]
            args = tuple([self._take(a, t, p, d) for t, p, d in zip(self.s._args, sp, ad)])
            return args, kw, None
        lay = st.in_meta
        if lay.single:   # the fast path (a call of this is some tenths of a us dearer)
            shape, dtype = lay.metas[0]
            v = a.tensor("input", dtype, (n, *shape))
            vs = (v,) if not self.s._train else \
                (v.detach().requires_grad_(lay.grad_mask[0]),)
            return vs, kw, vs
        vs = lay.views(a, "input", n)
        if not self.s._train:   # a forward-only pass: the views, no graph
            return vs, kw, vs
        inp = tuple([v.detach().requires_grad_(g) for v, g in zip(vs, lay.grad_mask)])
        return inp, kw, inp

    def forward(self, a) -> None:
        st = self.s._by_index[a.stage]
        train = self.s._train
        args, kw, inp = self._inputs(st, a)
        out = st.fn(*args, **kw) if not st._contexts else st.call_forward(a.microbatch, args, kw)
        if st.is_last:
            loss = None
            if self.s._loss_fn is not None and self.s._target is not None:
                tgt, cut = self.split_target, self.s._target_cut
                if tgt is None:
                    tgt = self.split_target = self._split(self.s._target, cut)
                # a target with no tensor to cut: a sequence of samples
                tgt = self._take(a, self.s._target, tgt, cut) if tgt is not None \
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
        st = self.s._by_index[a.stage]
        inp, out, _ = st.state.pop(a.microbatch)
        roots, gs = self._roots(st, a, out)
        if roots:
            _autograd.backward(roots, gs)
        if inp is not None:
            self._put_grad_input(st, a, (inp[0].grad,) if len(inp) == 1 else
                                 [t.grad for t in inp])

    def backward_input(self, a) -> None:
        st = self.s._by_index[a.stage]
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
        st = self.s._by_index[a.stage]
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
                for p in self.s._by_index[stage].params()]

    def step(self, stage: int, iteration: int) -> None:
        if self.s.scale_grads:
            self.s._by_index[stage].scale_grads(self.M)
