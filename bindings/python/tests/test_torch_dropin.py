"""The rest of ``torch.distributed.pipelining``'s public names on
dpl.torch, module by module: the schedule classes' bases and
``get_schedule_class``, a stage's forward context, a schedule read from
PyTorch's CSV with ``_load_csv``, and the ``microbatch`` functions,
each checked against the installed torch."""

from __future__ import annotations

import contextlib
import copy
import importlib

import pytest

torch = pytest.importorskip("torch")
tpp = pytest.importorskip("torch.distributed.pipelining")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
import dpl.torch  # noqa: E402
from dpl.torch import (PipelineScheduleMulti, PipelineStage, PipelineStageInfo,  # noqa: E402
                       Schedule1F1B)
from dpl.torch import microbatch as dmb  # noqa: E402
from torch_models import data, make_opt, max_rel_diff, mlp, reference  # noqa: E402

tmb = importlib.import_module("torch.distributed.pipelining.microbatch")
tsched = importlib.import_module("torch.distributed.pipelining.schedules")

@pytest.mark.parametrize("module", ["", ".schedules", ".stage", ".microbatch"])
def test_every_public_name_of_pytorch_is_in_dpl(module):
    theirs = importlib.import_module("torch.distributed.pipelining" + module)
    ours = importlib.import_module("dpl.torch" + module)
    missing = [n for n in theirs.__all__ if not hasattr(ours, n)]
    assert missing == []


def test_schedule_classes_by_name_as_pytorch_maps_them():
    names = ["1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble",
             "PipelineScheduleSingle", "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV"]
    for name in names:
        for spelled in (name, name.lower(), name.upper()):
            want = tsched.get_schedule_class(spelled)
            got = dpl.torch.get_schedule_class(spelled)
            assert got.__name__ == want.__name__
            assert got is getattr(dpl.torch, got.__name__)
            # which classes take a list of stages, as scripts test it
            assert issubclass(got, dpl.torch.PipelineScheduleMulti) == \
                issubclass(want, tsched.PipelineScheduleMulti)
            assert issubclass(got, dpl.torch.PipelineScheduleSingle) == \
                issubclass(want, tsched.PipelineScheduleSingle)
    assert dpl.torch.get_schedule_class("dapple") is dpl.torch.ScheduleDAPPLE
    with pytest.raises(ValueError) as e:
        dpl.torch.get_schedule_class("OneFOneB")
    assert isinstance(e.value, dpl.InvalidArgument)
    assert "'OneFOneB'" in str(e.value) and "'Interleaved1F1B'" in str(e.value)


# --- a stage's forward context ---------------------------------------
class Seen(torch.nn.Module):
    """A Linear that records the forward context it ran in."""

    def __init__(self, lin, log):
        super().__init__()
        self.lin, self.log = lin, log

    def forward(self, x):
        self.log.append(("forward", ACTIVE.get(id(self.log))))
        return self.lin(x)


ACTIVE: dict = {}


def context_rank(parts, M, passes):
    w = dpl.world.current()
    log: list = []
    mod = Seen(copy.deepcopy(parts[w.rank]), log)
    st = PipelineStage(mod, w.rank, 2)

    @contextlib.contextmanager
    def ctx(info):
        assert isinstance(info, PipelineStageInfo)
        ACTIVE[id(log)] = info
        try:
            yield
        finally:
            ACTIVE.pop(id(log))

    handle = st.register_forward_context(ctx)
    sched = Schedule1F1B(st, M, torch.nn.MSELoss())
    x, y = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 4, dtype=torch.float64)
    try:
        for p in passes:
            if p == "remove":
                handle.remove()
            elif p == "eval":
                sched.eval(*(() if w.rank else (x,)), target=y if w.rank else None)
            else:
                sched.step(*(() if w.rank else (x,)), target=y if w.rank else None)
    finally:
        sched.close()
    return log


def test_a_forward_context_wraps_every_forward_with_its_stage_and_microbatch():
    parts = [torch.nn.Linear(4, 4, dtype=torch.float64) for _ in range(2)]
    M = 4
    logs = dpl.run.threads(2, context_rank, parts, M, ["step", "eval", "remove", "step"],
                           timeout=60)
    for s, log in enumerate(logs):
        infos = [i for _, i in log]
        # rank 0 runs one set-up forward to learn its output's shape; the
        # last stage sends nothing and runs none
        probe = [PipelineStageInfo(stage_index=0, microbatch_index=0,
                                   is_metadata_inference=True)] if s == 0 else []
        mbs = [PipelineStageInfo(stage_index=s, microbatch_index=j) for j in range(M)]
        # step, eval, then no context once the handle is removed
        assert infos[:len(probe)] == probe
        assert infos[len(probe):] == mbs + mbs + [None] * M


def test_forward_context_errors_are_pytorchs():
    st = PipelineStage(torch.nn.Linear(2, 2), 0, 1)
    h = st.register_forward_context(lambda info: contextlib.nullcontext())
    with pytest.raises(RuntimeError, match="a forward context is registered already"):
        st.register_forward_context(lambda info: contextlib.nullcontext())
    h.remove()
    st.register_forward_context(lambda info: contextlib.suppress(ValueError))
    st.fn = lambda x: (_ for _ in ()).throw(ValueError("bad input"))
    with pytest.raises(RuntimeError, match="suppressed an exception of micro-batch 3's forward"):
        st.call_forward(3, (torch.zeros(1, 2),), {})
    with pytest.raises(dpl.InvalidArgument, match="context_factory must be callable"):
        PipelineStage(torch.nn.Linear(2, 2), 0, 1).register_forward_context(3)


# --- a schedule read from PyTorch's CSV --------------------------------
def csv_rank(parts, batches, M, path, fmt, stages_of):
    w = dpl.world.current()
    mine = stages_of(w.rank)
    mods = {s: copy.deepcopy(parts[s]) for s in mine}
    sched = PipelineScheduleMulti([PipelineStage(mods[s], s, len(parts)) for s in mine], M,
                                  torch.nn.MSELoss())
    sched._load_csv(path, format=fmt)
    opt = make_opt("sgd", [p for m in mods.values() for p in m.parameters()])
    try:
        for x, y in batches:
            opt.zero_grad()
            sched.step(*((x,) if 0 in mods else ()), target=y if len(parts) - 1 in mods else None)
            opt.step()
    finally:
        sched.close()
    return {s: [p.detach().clone() for p in m.parameters()] for s, m in mods.items()}


@pytest.mark.parametrize("policy,fmt", [("interleaved", "compute_only"),
                                        ("zbv", "compute_only"),
                                        ("interleaved", "compute_comms")])
def test_a_schedule_loaded_from_csv_trains_like_one_process(policy, fmt, tmp_path):
    P, S, M = 2, 4, 4
    widths = [5, 8, 8, 8, 8, 3]
    parts = mlp(widths, S)
    batches = data(8, widths, 2)
    s = dpl.schedule(policy, P, M, **({"chunks": 2} if policy == "interleaved" else {}))
    path = tmp_path / "order.csv"
    path.write_text(s.to_csv(comms="pytorch" if fmt == "compute_comms" else False))
    want_ranks = [sorted(st for st in range(S) if s.stage_rank(st) == r) for r in range(P)]
    got = dpl.run.threads(P, csv_rank, parts, batches, M, str(path), fmt,
                          lambda r: want_ranks[r], timeout=60)
    ref, _ = reference(parts, batches, M, "sgd")
    for r in range(P):
        for st, params in got[r].items():
            assert max_rel_diff(params, list(ref[st].parameters())) <= 1e-10


def test_load_csv_refuses_what_does_not_fit(tmp_path):
    stages = [PipelineStage(torch.nn.Linear(2, 2), s, 4) for s in (0, 2)]
    sched = PipelineScheduleMulti(stages, 4, torch.nn.MSELoss())
    good = tmp_path / "good.csv"
    good.write_text(dpl.schedule("interleaved", 2, 4, chunks=2).to_csv())
    with pytest.raises(dpl.InvalidArgument, match="format must be 'compute_only' or "
                       "'compute_comms' \\(got 'csv'\\)"):
        sched._load_csv(good, format="csv")
    with pytest.raises(dpl.InvalidArgument, match="has no SEND/RECV actions; load it as "
                       "'compute_only'"):
        sched._load_csv(good, format="compute_comms")
    other = tmp_path / "m6.csv"
    other.write_text(dpl.schedule("interleaved", 2, 6, chunks=2).to_csv())
    with pytest.raises(dpl.InvalidArgument, match="schedules 4 stages and 6 micro-batches; "
                       "this schedule has 4 stages and 4 micro-batches"):
        sched._load_csv(other)
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0X0\n")
    with pytest.raises(dpl.InvalidArgument, match="0X0"):
        sched._load_csv(bad)
    with pytest.raises(FileNotFoundError):
        sched._load_csv(tmp_path / "absent.csv")
    with pytest.raises(dpl.InvalidArgument, match="names no schedule: pass policy="):
        sched.step(torch.zeros(4, 2), target=torch.zeros(4, 2))
    sched.close()


# --- microbatch ---------------------------------------------------------
def _inputs():
    g = torch.Generator().manual_seed(3)
    return (torch.randn(7, 3, generator=g), torch.randn(2, 7, generator=g), "tag"), \
        {"mask": torch.randn(7, generator=g), "scale": torch.randn(3, generator=g)}


@pytest.mark.parametrize("specs", ["default", "dims"])
def test_split_and_merge_as_pytorch(specs):
    args, kwargs = _inputs()
    if specs == "default":
        args = args[:1]
        ours, theirs = (None, None), (None, None)
    else:
        ours = (dmb.TensorChunkSpec.from_tuple((0, 1)) + (dmb._Replicate(),),
                {"mask": dmb.TensorChunkSpec(0), "scale": dmb._Replicate()})
        theirs = (tmb.TensorChunkSpec.from_tuple((0, 1)) + (tmb._Replicate(),),
                  {"mask": tmb.TensorChunkSpec(0), "scale": tmb._Replicate()})
    kw = kwargs if specs == "dims" else {"mask": kwargs["mask"]}
    a, k = dmb.split_args_kwargs_into_chunks(args, kw, 3, *ours)
    ta, tk = tmb.split_args_kwargs_into_chunks(args, kw, 3, *theirs)
    assert len(a) == len(ta) == 3 and len(k) == len(tk) == 3
    for x, y in zip(a + k, ta + tk):
        for u, v in zip(x.values() if isinstance(x, dict) else x,
                        y.values() if isinstance(y, dict) else y):
            assert (torch.equal(u, v) if torch.is_tensor(u) else u == v)
    outs = [(torch.randn(2, 4), torch.randn(3, 2)) for _ in range(3)]
    for spec, tspec in ((None, None),
                        ((dmb.TensorChunkSpec(1), dmb.sum_reducer),
                         (tmb.TensorChunkSpec(1), tmb.sum_reducer))):
        got, want = dmb.merge_chunks(outs, spec), tmb.merge_chunks(outs, tspec)
        assert all(torch.equal(u, v) for u, v in zip(got, want))


def test_split_refuses_fewer_samples_than_chunks():
    with pytest.raises(dpl.InvalidArgument, match="a batch of 2 samples cannot make 3"):
        dmb.split_args_kwargs_into_chunks((torch.zeros(2, 1),), None, 3)
    with pytest.raises(dpl.InvalidArgument, match="chunks must be an int >= 1 \\(got 0\\)"):
        dmb.split_args_kwargs_into_chunks((torch.zeros(2, 1),), None, 0)
    with pytest.raises(dpl.InvalidArgument, match="split_dim must be an int \\(got '0'\\)"):
        dmb.TensorChunkSpec("0")


def specs_rank(part, x, y, M):
    sched = Schedule1F1B(PipelineStage(part, 0, 1), M, torch.nn.MSELoss(),
                         args_chunk_spec=(dmb.TensorChunkSpec(1),))
    try:
        return sched.step(x, target=y)
    finally:
        sched.close()


class Transposed(torch.nn.Module):
    """Takes its input as (features, samples)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2, dtype=torch.float64)

    def forward(self, t):
        return self.lin(t.t())


def test_schedules_take_dpls_own_specs():
    model = Transposed()
    x = torch.randn(3, 6, dtype=torch.float64)   # samples along dimension 1
    y = torch.randn(6, 2, dtype=torch.float64)
    out, = dpl.run.threads(1, specs_rank, model, x, y, 3, timeout=60)
    assert torch.allclose(out, model(x).detach(), rtol=1e-12, atol=0)
