"""PyTorch's constructors on dpl.torch, argument by argument: the schedule
classes and PipelineStage take PyTorch 2.15's parameters in its order
(checked against the installed torch), the runtime-tuning arguments of
the multi-stage classes are accepted and change nothing, the values
PyTorch refuses are refused, and the stage's and schedule's gradient
scaling and flags are PyTorch's."""

from __future__ import annotations

import copy
import importlib
import inspect
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
import dpl.torch  # noqa: E402
from dpl.torch import PipelineStage  # noqa: E402
from dpl.torch import microbatch as dmb  # noqa: E402
from torch_models import data, make_opt, max_rel_diff, mlp, reference  # noqa: E402

tsched = importlib.import_module("torch.distributed.pipelining.schedules")
tstage = importlib.import_module("torch.distributed.pipelining.stage")

CLASSES = ["PipelineScheduleSingle", "PipelineScheduleMulti", "ScheduleGPipe", "Schedule1F1B",
           "ScheduleInterleaved1F1B", "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble",
           "ScheduleZBVZeroBubble", "ScheduleDualPipeV"]
P_KW = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _params(fn):
    ps = inspect.signature(fn).parameters
    pos = [n for n, p in ps.items() if p.kind is P_KW]
    return ps, pos


@pytest.mark.parametrize("name,theirs,ours", [
    *[(c, getattr(tsched, c), getattr(dpl.torch, c)) for c in CLASSES],
    ("PipelineStage", tstage.PipelineStage, dpl.torch.PipelineStage)])
def test_constructor_takes_pytorchs_parameters_in_its_order(name, theirs, ours):
    tps, tpos = _params(theirs.__init__)
    ops, opos = _params(ours.__init__)
    # every positional parameter of PyTorch's at the same place, by the same name
    assert opos[:len(tpos)] == tpos
    # every keyword-only one accepted by name, with PyTorch's default
    for n, p in tps.items():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            assert n in ops
        if n in ops and p.default is not inspect.Parameter.empty and n != "device":
            assert ops[n].default == p.default, n


# --- a two-rank interleaved pipeline in threads -------------------------
P, S, M = 2, 4, 4
WIDTHS = [5, 8, 8, 8, 8, 3]


def interleaved_rank(cls_name, parts, batches, kw):
    w = dpl.world.current()
    mine = [w.rank, w.rank + P]
    mods = {s: copy.deepcopy(parts[s]) for s in mine}
    cls = getattr(dpl.torch, cls_name)
    sched = cls([PipelineStage(mods[s], s, S) for s in mine], M, torch.nn.MSELoss(), **kw)
    opt = make_opt("sgd", [p for m in mods.values() for p in m.parameters()])
    try:
        for x, y in batches:
            opt.zero_grad()
            sched.step(*((x,) if 0 in mods else ()), target=y if S - 1 in mods else None)
            opt.step()
    finally:
        sched.close()
    return {s: [p.detach().clone() for p in m.parameters()] for s, m in mods.items()}


RUNTIME_ARGS = dict(backward_requires_autograd=True, defer_pp_recv=True, max_active_stages=2,
                    unshard_lookahead=(1, 2), defer_reduce_grad_wait=True,
                    max_outstanding_sends=1)


@pytest.mark.parametrize("cls_name", ["ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                                      "ScheduleInterleavedZeroBubble"])
def test_pytorchs_runtime_arguments_change_nothing(cls_name):
    parts = mlp(WIDTHS, S)
    batches = data(8, WIDTHS, 2)
    got = dpl.run.threads(P, interleaved_rank, cls_name, parts, batches, RUNTIME_ARGS,
                          timeout=60)
    ref, _ = reference(parts, batches, M, "sgd")
    for r in range(P):
        for st, params in got[r].items():
            assert max_rel_diff(params, list(ref[st].parameters())) <= 1e-10


def _stages():
    parts = mlp(WIDTHS, S)
    return [PipelineStage(parts[s], s, S) for s in (0, 2)]


@pytest.mark.parametrize("kw,message", [
    ({"backward_requires_autograd": False}, "backward_requires_autograd=False"),
    ({"backward_requires_autograd": 1}, "backward_requires_autograd must be a bool"),
    ({"defer_pp_recv": "yes"}, "defer_pp_recv must be a bool \\(got 'yes'\\)"),
    ({"max_active_stages": 0}, "max_active_stages must be a positive integer \\(got 0\\)"),
    ({"unshard_lookahead": "some"}, "unshard_lookahead must be 'full', 'auto'"),
    ({"unshard_lookahead": (1,)}, "unshard_lookahead has 1 values; the pipeline has 2"),
    ({"unshard_lookahead": (1, 4)}, "unshard_lookahead\\[1\\] must be an integer within "
                                    "\\[1, max_active_stages=3\\] \\(got 4\\)"),
    ({"max_outstanding_sends": -1}, "max_outstanding_sends must be None or a non-negative "
                                    "integer \\(got -1\\)"),
    ({"chunk": 2}, "unknown argument\\(s\\) \\['chunk'\\]"),
])
def test_values_pytorch_refuses_are_refused_at_construction(kw, message):
    with pytest.raises(ValueError, match=message) as e:
        dpl.torch.ScheduleInterleaved1F1B(_stages(), M, torch.nn.MSELoss(), **kw)
    assert isinstance(e.value, dpl.InvalidArgument)


def test_use_full_backward_is_deprecated_as_in_pytorch():
    with pytest.warns(DeprecationWarning, match="use_full_backward"):
        dpl.torch.PipelineScheduleMulti(_stages(), M, torch.nn.MSELoss(), use_full_backward=True)


def test_a_positional_merge_spec_reaches_looped_bfs():
    # PyTorch's ScheduleLoopedBFS takes output_merge_spec fourth (no input specs)
    spec = (dmb.TensorChunkSpec(1),)   # a tuple output's, outputs concatenated along dim 1
    s = dpl.torch.ScheduleLoopedBFS(_stages(), M, torch.nn.MSELoss(), spec)
    merged = s._chunking.merge_outputs([(torch.ones(2, 1),), (torch.zeros(2, 1),)])
    assert merged[0].shape == (2, 2)


# --- gradient scaling and flags -------------------------------------
def single_rank(parts, batches, scale, by_hand, flip):
    w = dpl.world.current()
    mod = copy.deepcopy(parts[w.rank])
    stage = PipelineStage(mod, w.rank, len(parts))
    sched = dpl.torch.Schedule1F1B(stage, M, torch.nn.MSELoss(), scale_grads=scale)
    flags = (stage.has_backward, sched.scale_grads)
    if flip:
        sched.scale_grads = not scale
    opt = make_opt("sgd", mod.parameters())
    try:
        for x, y in batches:
            opt.zero_grad()
            sched.step(*((x,) if stage.is_first else ()),
                       target=y if stage.is_last else None)
            if by_hand:
                stage.scale_grads(M)
            opt.step()
    finally:
        sched.close()
    return flags, [p.detach().clone() for p in mod.parameters()]


@pytest.mark.parametrize("scale,by_hand,flip", [(True, False, False), (False, True, False),
                                                (False, False, True)])
def test_gradients_scaled_by_the_schedule_or_by_hand_agree(scale, by_hand, flip):
    parts = mlp([5, 8, 3], 2)
    batches = data(8, [5, 8, 3], 2)
    got = dpl.run.threads(2, single_rank, parts, batches, scale, by_hand, flip, timeout=60)
    ref, _ = reference(parts, batches, M, "sgd")
    for r in range(2):
        flags, params = got[r]
        assert flags == (True, scale)
        assert max_rel_diff(params, list(ref[r].parameters())) <= 1e-10


def test_stage_scale_grads_divides_and_refuses_a_bad_factor():
    lin = torch.nn.Linear(2, 2, dtype=torch.float64)
    lin(torch.ones(1, 2, dtype=torch.float64)).sum().backward()
    before = lin.weight.grad.clone()
    st = PipelineStage(lin, 0, 1)
    assert st.has_backward is False   # no schedule yet, as PyTorch's
    st.scale_grads(4)
    assert torch.equal(lin.weight.grad, before / 4)
    for bad in (0, -2, "4", True):
        with pytest.raises(dpl.InvalidArgument, match="grad_scale_factor must be a positive"):
            st.scale_grads(bad)
    st.state[0] = ("kept",)
    st.clear_runtime_states()
    assert st.state == {}


def test_stage_examples_of_gradients_must_match_the_tensors():
    lin = torch.nn.Linear(4, 4)
    x = torch.zeros(2, 4)
    # PyTorch's positional order: output_grads then input_grads after output_args
    st = PipelineStage(lin, 1, 3, "cpu", x, x, (x,), (None,))
    assert st._out_grads == [((4,), torch.float32)] and st._in_grads == [None]
    with pytest.raises(dpl.InvalidArgument, match="stage 1 output_grads: gradient 0 has "
                                                  "per-sample shape \\[3\\]"):
        PipelineStage(lin, 1, 3, "cpu", x, x, torch.zeros(2, 3))
    with pytest.raises(dpl.InvalidArgument, match="stage 1 input_grads: 2 gradients for 1"):
        PipelineStage(lin, 1, 3, "cpu", x, None, None, (x, x))
    with pytest.raises(dpl.InvalidArgument, match="dw_builder is not supported"):
        PipelineStage(lin, 1, 3, "cpu", dw_builder=lambda: None)


# --- pipeline_order and _dump_csv -------------------------------------
def _pair(V_shape=False):
    parts = mlp([4] * 9, 2 * P)
    mine = [0, 2 * P - 1] if V_shape else [0, P]
    return [PipelineStage(parts[s], s, 2 * P) for s in mine]


@pytest.mark.parametrize("name", ["ScheduleGPipe", "ScheduleInterleaved1F1B",
                                  "ScheduleLoopedBFS"])
def test_pipeline_order_holds_pytorchs_compute_actions(name):
    from test_torch_csv import SINGLE, compute_only, torch_rows, torch_schedule
    cls = getattr(dpl.torch, name)
    if name in SINGLE:
        ours = cls(PipelineStage(mlp([4, 4], 1)[0], 0, P), M, torch.nn.MSELoss())
    else:
        ours = cls(_pair(), M, torch.nn.MSELoss())
    order = ours.pipeline_order
    assert sorted(order) == list(range(P))
    got = [[str(a) for a in order[r]] for r in range(P)]
    assert got == compute_only(torch_rows(torch_schedule(name, P, M).pipeline_order))


@pytest.mark.parametrize("fmt", ["compute_only", "compute_comms"])
def test_dump_csv_loads_in_pytorch_and_back(fmt, tmp_path):
    from test_torch_csv import _torch_reader, torch_rows
    ours = dpl.torch.ScheduleInterleaved1F1B(_pair(), M, torch.nn.MSELoss())
    path = tmp_path / "order.csv"
    ours._dump_csv(str(path), format=fmt)
    want = [[str(a) for a in ours.pipeline_order[r]] for r in range(P)]
    rt = _torch_reader(P, 2 * P, M)
    rt._load_csv(str(path), format=fmt)
    rows = torch_rows(rt.pipeline_order_with_comms if fmt == "compute_comms"
                      else rt.pipeline_order)
    assert [[a for a in row if re.fullmatch(r"\d+[FBIW]\d+", a)] for row in rows] == want
    if fmt == "compute_comms":   # PyTorch runs the transfers dpl wrote
        assert any("SEND_F" in a for a in rows[0])
    # and dpl runs what it wrote
    again = dpl.torch.ScheduleInterleaved1F1B(_pair(), M, torch.nn.MSELoss())
    again._load_csv(str(path), format=fmt)
    assert [[str(a) for a in again.pipeline_order[r]] for r in range(P)] == want


def test_dump_csv_refuses_a_bad_format_and_leaves_no_partial_file(tmp_path):
    ours = dpl.torch.ScheduleInterleaved1F1B(_pair(), M, torch.nn.MSELoss())
    with pytest.raises(dpl.InvalidArgument, match="format must be 'compute_only' or "
                                                  "'compute_comms' \\(got 'comms'\\)"):
        ours._dump_csv(str(tmp_path / "x.csv"), format="comms")
    with pytest.raises(OSError):
        ours._dump_csv(str(tmp_path / "missing" / "x.csv"))
    assert list(tmp_path.iterdir()) == []
