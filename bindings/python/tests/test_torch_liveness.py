"""dpl.torch's analyze_pipeline_activation_liveness and
pipeline_order_with_comms, against the installed torch's: the slots PyTorch
assigns for its own schedule of the same class, and the lifetimes it finds
in dpl's lists once its runtime loads them from dpl's CSV."""

import os
import sys

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")
if not hasattr(S, "analyze_pipeline_activation_liveness"):
    pytest.skip("the installed torch has no analyze_pipeline_activation_liveness",
                allow_module_level=True)

sys.path.insert(0, os.path.dirname(__file__))

import dpl  # noqa: E402
import dpl.torch  # noqa: E402
from dpl.torch import analyze_pipeline_activation_liveness  # noqa: E402
from test_torch_csv import (CLASSES, SINGLE, VSHAPE, _torch_reader,  # noqa: E402
                            dpl_torch_schedule, torch_rows, torch_schedule)

GRANULARITIES = ["microbatch", "stage_microbatch"]


def _stages_of(name: str, rank: int, ranks: int) -> list[int]:
    if name in SINGLE:
        return [rank]
    if name in VSHAPE:
        return [rank, 2 * ranks - 1 - rank]
    return [rank, rank + ranks]


def _max_overlap(spans) -> int:
    """The most inclusive spans that share one position (the fewest slots
    any assignment can use), by a sweep over the positions."""
    top = max(e for _, e in spans)
    return max(sum(1 for b, e in spans if b <= p <= e) for p in range(top + 1))


# PyTorch's interleaved classes take M a multiple of the ranks only
ROUNDS = {"ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"}
SHAPES = [(name, ranks, m) for name in CLASSES
          for ranks, m in [(2, 4), (3, 6), (4, 8), (2, 5), (4, 9), (4, 12)]
          if name not in ROUNDS or m % ranks == 0]


@pytest.mark.parametrize("name,ranks,m", SHAPES)
def test_slots_equal_pytorchs_for_its_own_schedule(name, ranks, m):
    theirs = torch_schedule(name, ranks, m)
    ours = dpl_torch_schedule(name, ranks, m)
    for rank in range(ranks):
        stages = _stages_of(name, rank, ranks)
        for g in GRANULARITIES:
            got = analyze_pipeline_activation_liveness(ours, pp_rank=rank,
                                                       stage_indices=stages, granularity=g)
            if name == "Schedule1F1B" and rank == ranks - 1:
                # PyTorch's 1F1B lists run F1..FM on the last rank: its
                # own analysis refuses them; dpl's lists are F0..F(M-1)
                with pytest.raises(ValueError, match=f"microbatch outside \\[0, {m}\\)"):
                    S.analyze_pipeline_activation_liveness(
                        theirs, pp_rank=rank, stage_indices=stages, granularity=g)
            else:
                want = S.analyze_pipeline_activation_liveness(
                    theirs, pp_rank=rank, stage_indices=stages, granularity=g)
                assert dict(got.slot_by_stage_and_microbatch) == \
                    dict(want.slot_by_stage_and_microbatch)
                assert got.num_slots == want.num_slots
            assert (got.pp_rank, got.granularity, got.stage_indices, got.num_microbatches) == \
                (rank, g, tuple(stages), m)
            spans = {k: got.get_activation_lifetime(*k) for k in got.slot_by_stage_and_microbatch}
            assert sorted(spans) == sorted((s, j) for s in stages for j in range(m))
            # no two overlapping lifetimes share a slot, and no slot is wasted
            for a, sa in spans.items():
                for b, sb in spans.items():
                    if a < b and got.slot_for(*a) == got.slot_for(*b):
                        assert sa[1] < sb[0] or sb[1] < sa[0] or sa == sb
            assert got.num_slots == _max_overlap(set(spans.values()) if g == "microbatch"
                                                 else list(spans.values()))


@pytest.mark.parametrize("name", ["ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                                  "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble"])
def test_lifetimes_index_the_lists_pytorchs_runtime_loads_from_dpl(name, tmp_path):
    ranks, m = 3, 6
    ours = dpl_torch_schedule(name, ranks, m)
    path = tmp_path / "order.csv"
    ours._dump_csv(str(path))   # compute_comms, what dpl runs
    rt = _torch_reader(ranks, 2 * ranks, m)
    rt._load_csv(str(path), format="compute_comms")
    rows = [[str(a) for a in ours.pipeline_order_with_comms[r]] for r in range(ranks)]
    assert rows == torch_rows(rt.pipeline_order_with_comms)
    for rank in range(ranks):
        stages = _stages_of(name, rank, ranks)
        got = analyze_pipeline_activation_liveness(ours, pp_rank=rank, stage_indices=stages,
                                                   granularity="stage_microbatch")
        want = S.analyze_pipeline_activation_liveness(rt, pp_rank=rank, stage_indices=stages,
                                                      granularity="stage_microbatch")
        for k in want.slot_by_stage_and_microbatch:
            assert got.get_activation_lifetime(*k) == want.get_activation_lifetime(*k)


@pytest.mark.parametrize("name", ["ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
                                  "ScheduleZBVZeroBubble"])
def test_pytorchs_lowered_file_loads_as_pytorch_lists_it(name, tmp_path):
    ranks, m = 2, 4
    theirs = torch_schedule(name, ranks, m)
    path = tmp_path / "torch.csv"
    theirs._dump_csv(str(path), format="compute_comms")
    ours = dpl_torch_schedule(name, ranks, m)
    ours._load_csv(str(path), format="compute_comms")
    rows = [[str(a) for a in ours.pipeline_order_with_comms[r]] for r in range(ranks)]
    assert rows == torch_rows(theirs.pipeline_order_with_comms)
    for rank in range(ranks):   # then every position is PyTorch's too
        stages = _stages_of(name, rank, ranks)
        got = analyze_pipeline_activation_liveness(ours, pp_rank=rank, stage_indices=stages,
                                                   granularity="stage_microbatch")
        want = S.analyze_pipeline_activation_liveness(theirs, pp_rank=rank,
                                                      stage_indices=stages,
                                                      granularity="stage_microbatch")
        assert dict(got._lifetimes) == dict(want._activation_lifetime_by_stage_and_microbatch)
        assert dict(got.slot_by_stage_and_microbatch) == \
            dict(want.slot_by_stage_and_microbatch)


def test_an_overlapped_pair_shares_its_markers_position():
    ranks, m = 2, 4
    ours = dpl_torch_schedule("ScheduleDualPipeV", ranks, m)
    order = ours.pipeline_order_with_comms
    for rank in range(ranks):
        stages = _stages_of("ScheduleDualPipeV", rank, ranks)
        got = analyze_pipeline_activation_liveness(ours, pp_rank=rank, stage_indices=stages,
                                                   granularity="stage_microbatch")
        lst = order[rank]
        pairs = 0
        for (s, j) in got.slot_by_stage_and_microbatch:
            f, r = got.get_activation_lifetime(s, j)
            for pos, kinds in ((f, ("F",)), (r, ("B", "W"))):
                a = lst[pos]
                if a.kind == "OVERLAP_F_B":   # the pair's parts follow it
                    pairs += 1
                    assert any(p.kind in kinds and (p.stage, p.microbatch) == (s, j)
                               for p in lst[pos + 1:pos + 3])
                else:
                    assert a.kind in kinds and (a.stage, a.microbatch) == (s, j)
        assert pairs > 0


def test_microbatch_granularity_gives_a_microbatchs_stages_one_slot_and_span():
    ours = dpl_torch_schedule("ScheduleInterleaved1F1B", 2, 4)
    got = analyze_pipeline_activation_liveness(ours, pp_rank=0, stage_indices=[0, 2],
                                               granularity="microbatch")
    fine = analyze_pipeline_activation_liveness(ours, pp_rank=0, stage_indices=[0, 2],
                                                granularity="stage_microbatch")
    for j in range(4):
        assert got.slot_for(0, j) == got.slot_for(2, j)
        a, b = fine.get_activation_lifetime(0, j), fine.get_activation_lifetime(2, j)
        assert got.get_activation_lifetime(0, j) == (min(a[0], b[0]), max(a[1], b[1]))


def test_the_result_is_read_only_and_unhashable():
    got = analyze_pipeline_activation_liveness(dpl_torch_schedule("Schedule1F1B", 2, 4), pp_rank=0,
                                               stage_indices=[0], granularity="microbatch")
    with pytest.raises(TypeError):
        got.slot_by_stage_and_microbatch[(0, 0)] = 7
    with pytest.raises(TypeError):
        hash(got)
    with pytest.raises(AttributeError):
        got.num_slots = 1
    again = analyze_pipeline_activation_liveness(dpl_torch_schedule("Schedule1F1B", 2, 4), pp_rank=0,
                                                 stage_indices=[0], granularity="microbatch")
    assert got == again


def test_bad_arguments_are_refused_by_name():
    ours = dpl_torch_schedule("ScheduleInterleaved1F1B", 2, 4)

    def run(**kw):
        args = dict(pp_rank=0, stage_indices=[0, 2], granularity="microbatch")
        args.update(kw)
        return analyze_pipeline_activation_liveness(ours, **args)

    cases = [
        (dict(granularity="stage"), "granularity must be 'microbatch' or "
                                    "'stage_microbatch' \\(got 'stage'\\)"),
        (dict(stage_indices=[]), "stage_indices must name at least one stage"),
        (dict(stage_indices=[0, 0]), "stage_indices must be unique \\(got \\[0, 0\\]\\)"),
        (dict(stage_indices=5), "stage_indices must be a sequence .*got 5"),
        (dict(pp_rank=2), "pp_rank 2 is not a rank of the schedule \\(ranks 0..1\\)"),
        (dict(stage_indices=[0, 1]), "rank 0 has no forward for \\(stage, microbatch\\) "
                                     "\\[\\(1, 0\\), \\(1, 1\\), \\(1, 2\\), \\(1, 3\\)\\]"),
    ]
    for kw, msg in cases:
        with pytest.raises(dpl.InvalidArgument, match=msg) as e:
            run(**kw)
        assert isinstance(e.value, ValueError)   # what PyTorch raises
    got = run()
    with pytest.raises(ValueError, match="no activation slot for stage 1, microbatch 0"):
        got.slot_for(1, 0)
    with pytest.raises(ValueError, match="no activation lifetime for stage 0, microbatch 4"):
        got.get_activation_lifetime(0, 4)


def test_the_names_are_where_pytorch_has_them():
    import torch.distributed.pipelining as P
    for name in ("analyze_pipeline_activation_liveness", "PipelineActivationLiveness"):
        assert name in P.__all__ and name in S.__all__
        assert getattr(dpl.torch, name) is getattr(dpl.torch.schedules, name)
