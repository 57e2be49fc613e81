"""The rank attributes of PyTorch's stages and multi-stage schedules on
dpl.torch's: a stage's ``group_rank``, ``group_size``, ``group``,
``dw_builder``, ``stage_index_to_group_rank``, ``chunks``,
``output_chunks`` and ``log_prefix``; a multi-stage schedule's ``rank``,
``pp_group_size``, ``stage_index_to_group_rank`` and, by class,
``n_local_stages``, ``number_of_rounds`` and ``microbatches_per_round``.

Checked against the installed torch's classes built under the same
process group (torch's "fake" backend: any rank and size in one
process), against the placement dpl's own schedule runs, against the
environment dpl.run and torchrun set (read without joining a world), and,
for ``chunks`` and ``output_chunks``, against training in one process."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch")
tpp = pytest.importorskip("torch.distributed.pipelining")
sys.path.insert(0, os.path.dirname(__file__))

import dpl  # noqa: E402
import dpl.run  # noqa: E402
import dpl.torch  # noqa: E402
from dpl.torch import PipelineStage  # noqa: E402
from test_torch_csv import CLASSES, SINGLE, stage_indices  # noqa: E402
from torch_models import Chain, data, mlp  # noqa: E402

import torch.distributed as dist  # noqa: E402

MULTI = [n for n in CLASSES if n not in SINGLE]
SCHED_ATTRS = ("rank", "pp_group_size", "stage_index_to_group_rank", "n_local_stages",
               "number_of_rounds", "microbatches_per_round")


@contextlib.contextmanager
def fake_group(rank: int, size: int):
    """torch.distributed's default group as rank `rank` of `size`, with no
    peers behind it (torch's fake backend); destroyed on leaving. Only
    the comparisons with PyTorch's classes need it."""
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    dist.init_process_group("fake", rank=rank, world_size=size, store=fake_pg.FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def _loss(out, target):
    return (out - target).sum()


def both(name: str, rank: int, ranks: int, m: int):
    """PyTorch's and dpl.torch's schedule `name` for this rank, each on its
    own stages (same indices, same module), under the current group."""
    idx = stage_indices(name, rank, ranks)
    n = ranks * len(idx)
    mod = torch.nn.Linear(4, 4)
    ts = [tpp.PipelineStage(mod, s, n, torch.device("cpu")) for s in idx]
    ds = [PipelineStage(mod, s, n) for s in idx]
    tcls, dcls = getattr(tpp, name), getattr(dpl.torch, name)
    if name in SINGLE:
        return tcls(ts[0], m, loss_fn=_loss), dcls(ds[0], m, loss_fn=_loss), ts, ds
    return tcls(ts, m, loss_fn=_loss), dcls(ds, m, loss_fn=_loss), ts, ds


CASES = [(name, ranks, rank, m) for name in CLASSES for ranks in (2, 4)
         for rank in sorted({0, 1, ranks - 1}) for m in (2 * ranks, 2 * ranks + 2, 3)
         # PyTorch refuses fewer micro-batches than these need
         if not (name == "ScheduleDualPipeV" and m < 2 * ranks)
         and not (name == "Schedule1F1B" and m < ranks)]


@pytest.mark.parametrize("name,ranks,rank,m", CASES)
def test_attributes_equal_pytorchs_under_the_same_group(name, ranks, rank, m, no_rank_env):
    with fake_group(rank, ranks):
        theirs, ours, ts, ds = both(name, rank, ranks, m)
        for a in SCHED_ATTRS:
            assert hasattr(ours, a) == hasattr(theirs, a), a
            if hasattr(theirs, a):
                assert getattr(ours, a) == getattr(theirs, a), a
        for t, d in zip(ts, ds):
            assert (d.group_rank, d.group_size) == (t.group_rank, t.group_size) == (rank, ranks)
            assert d.stage_index_to_group_rank == t.stage_index_to_group_rank
            assert d.chunks is t.chunks is None
            assert d.output_chunks == t.output_chunks == []
            assert d.group is t.group is None and d.dw_builder is t.dw_builder is None
            assert d.log_prefix == t.log_prefix
        if name not in SINGLE:   # the stages share their schedule's placement
            assert all(d.stage_index_to_group_rank is ours.stage_index_to_group_rank
                       for d in ds)


@pytest.mark.parametrize("name", MULTI)
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_placement_is_the_one_dpl_runs(name, ranks, no_rank_env):
    """stage_index_to_group_rank names, for every stage, the pipeline rank
    whose list in dpl's schedule runs its forwards."""
    no_rank_env.setenv("DPL_RANK", "0")
    no_rank_env.setenv("DPL_WORLD_SIZE", str(ranks))
    n = 2 * ranks
    parts = mlp([4] * (n + 1), n)
    st = [PipelineStage(parts[s], s, n) for s in stage_indices(name, 0, ranks)]
    sched = getattr(dpl.torch, name)(st, 2 * ranks, torch.nn.MSELoss())
    runs = {a.stage: r for r, acts in sched.pipeline_order.items() for a in acts
            if a.kind == "F"}
    assert sorted(runs) == list(range(n))
    assert sched.stage_index_to_group_rank == runs
    assert sched.rank == 0 and sched.pp_group_size == ranks


def _looped_csv(tmp_path, ranks: int, m: int):
    """A compute-only CSV placing stages as a loop (stage s on s mod P),
    written by dpl's interleaved policy."""
    path = tmp_path / "loop.csv"
    with dpl.schedule("interleaved", ranks, m, chunks=2) as s:
        path.write_text(s.to_csv())
    return path


def test_a_loaded_csv_sets_its_own_placement(tmp_path, no_rank_env):
    """A multi-stage schedule built as ZBV (V placement) that loads a file
    placing stages as a loop reports the file's placement."""
    no_rank_env.setenv("DPL_RANK", "1")
    no_rank_env.setenv("DPL_WORLD_SIZE", "2")
    parts = mlp([4] * 5, 4)
    st = [PipelineStage(parts[s], s, 4) for s in (1, 3)]
    sched = dpl.torch.PipelineScheduleMulti(st, 4, torch.nn.MSELoss(), policy="zbv")
    assert sched.stage_index_to_group_rank == {0: 0, 1: 1, 2: 1, 3: 0}
    sched._load_csv(str(_looped_csv(tmp_path, 2, 4)))
    assert sched.stage_index_to_group_rank == {0: 0, 1: 1, 2: 0, 3: 1}
    assert all(s.stage_index_to_group_rank == {0: 0, 1: 1, 2: 0, 3: 1} for s in st)


def test_replicas_give_pipeline_ranks(no_rank_env):
    """With replicas=[2, 1] world rank 1 is pipeline rank 0's second
    replica: the schedule's rank and pp_group_size are the pipeline's."""
    no_rank_env.setenv("DPL_RANK", "1")
    no_rank_env.setenv("DPL_WORLD_SIZE", "3")
    parts = mlp([4] * 5, 4)
    st = [PipelineStage(parts[s], s, 4) for s in (0, 2)]
    sched = dpl.torch.ScheduleInterleaved1F1B(st, 4, torch.nn.MSELoss(), replicas=[2, 1])
    assert (sched.rank, sched.pp_group_size) == (0, 2)
    assert sched.stage_index_to_group_rank == {0: 0, 1: 1, 2: 0, 3: 1}
    assert (st[0].group_rank, st[0].group_size) == (1, 3)   # the world's


@pytest.mark.parametrize("rvar,wvar", [("DPL_RANK", "DPL_WORLD_SIZE"), ("RANK", "WORLD_SIZE")])
def test_ranks_come_from_the_environment_without_joining(rvar, wvar, no_rank_env):
    no_rank_env.setenv(rvar, "2")
    no_rank_env.setenv(wvar, "3")
    before = dpl.world._process_world
    st = PipelineStage(torch.nn.Linear(2, 2), 2, 3)
    assert (st.group_rank, st.group_size) == (2, 3)
    assert st.stage_index_to_group_rank == {0: 0, 1: 1, 2: 2}
    assert dpl.world._process_world is before   # no world was joined


def test_dpl_variables_come_before_torchruns(no_rank_env):
    for k, v in (("DPL_RANK", "1"), ("DPL_WORLD_SIZE", "2"), ("RANK", "5"),
                 ("WORLD_SIZE", "8")):
        no_rank_env.setenv(k, v)
    st = PipelineStage(torch.nn.Linear(2, 2), 0, 2)
    assert (st.group_rank, st.group_size) == (1, 2)


def test_without_a_world_a_stage_is_rank_0_of_1(no_rank_env):
    st = PipelineStage(torch.nn.Linear(2, 2), 1, 3)
    assert (st.group_rank, st.group_size) == (0, 1)
    assert st.stage_index_to_group_rank == {0: 0, 1: 0, 2: 0}


def _thread_ranks():
    w = dpl.world.current()
    parts = mlp([4] * 5, 4)
    st = [PipelineStage(parts[s], s, 4) for s in (w.rank, w.rank + 2)]
    sched = dpl.torch.ScheduleInterleaved1F1B(st, 4, torch.nn.MSELoss())
    return st[0].group_rank, st[1].group_size, sched.rank, sched.pp_group_size


def test_thread_ranks_read_their_world(no_rank_env):
    got = dpl.run.threads(2, _thread_ranks, timeout=60)
    assert got == [(0, 2, 0, 2), (1, 2, 1, 2)]


def test_each_rank_variable_is_read_on_its_own(no_rank_env):
    # as the join reads them: DPL_RANK with torchrun's WORLD_SIZE is a pair
    no_rank_env.setenv("DPL_RANK", "1")
    no_rank_env.setenv("WORLD_SIZE", "3")
    st = PipelineStage(torch.nn.Linear(2, 2), 0, 3)
    assert (st.group_rank, st.group_size) == (1, 3)


def test_a_world_size_alone_is_no_world(no_rank_env):
    no_rank_env.setenv("WORLD_SIZE", "4")
    assert (PipelineStage(torch.nn.Linear(2, 2), 0, 2).group_size) == 1


MALFORMED = [
    ({"DPL_RANK": "x", "DPL_WORLD_SIZE": "2"}, "DPL_RANK='x' is not a rank"),
    ({"DPL_RANK": "+1", "DPL_WORLD_SIZE": "2"}, "DPL_RANK='+1' is not a rank"),
    ({"DPL_RANK": "-1", "DPL_WORLD_SIZE": "2"}, "DPL_RANK='-1' is not a rank"),
    ({"DPL_RANK": "0", "DPL_WORLD_SIZE": "two"},
     "DPL_WORLD_SIZE='two' is not a world size (1..65536)"),
    ({"RANK": "0", "WORLD_SIZE": "2_0"}, "WORLD_SIZE='2_0' is not a world size"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a world size"),
    ({"DPL_RANK": "2", "DPL_WORLD_SIZE": "2"}, "DPL_RANK=2 is not below DPL_WORLD_SIZE=2"),
    ({"DPL_RANK": "0"}, "DPL_RANK is set but neither DPL_WORLD_SIZE nor WORLD_SIZE is"),
]


@pytest.mark.parametrize("env,msg", MALFORMED)
def test_a_malformed_rank_variable_is_named(env, msg, no_rank_env):
    for k, v in env.items():
        no_rank_env.setenv(k, v)
    with pytest.raises(dpl.InvalidArgument, match=re.escape(msg)):
        PipelineStage(torch.nn.Linear(2, 2), 0, 2)


@pytest.mark.parametrize("env", [e for e, _ in MALFORMED])
def test_the_join_refuses_what_a_stage_refuses(env, no_rank_env):
    # the join's first check is the same C function: the same message
    for k, v in env.items():
        no_rank_env.setenv(k, v)
    no_rank_env.setenv("DPL_ROOT", "127.0.0.1:1")
    with pytest.raises(dpl.InvalidArgument) as stage:
        PipelineStage(torch.nn.Linear(2, 2), 0, 2)
    with pytest.raises(dpl.InvalidArgument) as join:
        dpl.world.BootstrapWorld.from_env(timeout=1)
    assert str(stage.value) == str(join.value)


# --- chunks and output_chunks after steps and passes ----------------------
WIDTHS = [4, 6, 6, 3]
B, M = 10, 4


def _outputs_rank(parts, x, y):
    w = dpl.world.current()
    st = PipelineStage(copy.deepcopy(parts[w.rank]), w.rank, 2)
    sched = dpl.torch.Schedule1F1B(st, M, torch.nn.MSELoss())
    seen = {"before": st.chunks}
    try:
        args = (x,) if w.rank == 0 else ()
        tgt = y if w.rank == 1 else None
        held = st.output_chunks
        out = sched.step(*args, target=tgt)
        seen["step"] = (st.chunks, list(st.output_chunks), out, st.output_chunks is held)
        sched.step(*args, target=tgt, return_outputs=False)
        seen["no_outputs"] = list(st.output_chunks)
        with torch.no_grad():
            out = sched.eval(*args)
        seen["eval"] = (list(st.output_chunks), out)
        st.clear_runtime_states()   # as PyTorch's, it empties the list
        seen["cleared"] = list(st.output_chunks)
    finally:
        sched.close()
    return seen


def test_output_chunks_hold_each_microbatchs_output(no_rank_env):
    parts = mlp(WIDTHS, 2)
    (x, y), = data(B, WIDTHS, 1)
    model = Chain(copy.deepcopy(parts))
    with torch.no_grad():   # the first step's outputs: the parameters before it
        want = [model(xs) for xs in x.tensor_split(M)]
    first, last = dpl.run.threads(2, _outputs_rank, parts, x, y, timeout=60)
    assert first["before"] is None and last["before"] is None
    assert first["step"][0] == last["step"][0] == M
    assert first["step"][1] == [] and first["step"][2] is None   # not the last stage
    chunks, outs, merged, same_list = last["step"]
    assert same_list   # emptied and refilled in place, as PyTorch clears its list
    assert len(outs) == M
    for o, w in zip(outs, want):
        assert o.shape == w.shape and torch.allclose(o, w, rtol=1e-6, atol=0)
        assert not o.requires_grad
    assert torch.equal(torch.cat(outs), merged)
    assert last["no_outputs"] == []
    evals, merged = last["eval"]
    assert len(evals) == M and torch.equal(torch.cat(evals), merged)
    assert [o.shape[0] for o in evals] == [t.shape[0] for t in x.tensor_split(M)]
    assert last["cleared"] == []
