"""CSV interchange with the installed torch.distributed.pipelining, both ways.

PyTorch's schedule classes build their ``pipeline_order`` (one action list
per rank) in their constructors; they only read a few attributes of their
stages, so stand-ins without a process group are enough. PyTorch's own
writer (``_dump_csv``) and reader (``_PipelineScheduleRuntime._load_csv``)
move the lists through a file; dpl reads and writes the same text with
``Schedule.from_csv`` / ``to_csv``.

What the installed PyTorch (2.x) writes and how dpl takes it:

- ScheduleGPipe, Schedule1F1B: their lists end with ``REDUCE_GRAD`` and
  ``WAIT_REDUCE_GRAD``; dpl has no WAIT_REDUCE_GRAD (its reductions are
  synchronous) and refuses the file naming the field. Their compute
  actions alone load and equal dpl's own gpipe and 1f1b lists.
- Schedule1F1B's last rank: PyTorch numbers its forwards 1..M instead of
  0..M-1 (a bug in ``Schedule1F1B._get_pipeline_order``; its runtime does
  not use these lists, so training is unaffected). dpl loads such a file
  with M+1 micro-batches and its validator refuses it ("1B0 ... before its
  forward"); with the numbers shifted back it equals dpl's 1f1b. The test
  detects whether the installed version still has the bug.
- ScheduleInterleaved1F1B, ScheduleLoopedBFS, ScheduleInterleavedZeroBubble,
  ScheduleZBVZeroBubble: load as they are, validate, and keep every rank's
  order; Interleaved1F1B's lists equal dpl's ``interleaved`` policy.
- ScheduleDualPipeV: its ``(a;b)OVERLAP_F_B`` fields are refused (dpl runs
  one action at a time); with each overlap written as its two actions the
  lists load and validate.
- dpl -> PyTorch: compute-only CSV of gpipe, 1f1b, zb-h1 and interleaved
  loads with PyTorch's ``_load_csv`` (which lowers it) and keeps dpl's
  lists. dpl's lowered CSV (``to_csv(comms=True)``) ends with ``STEP``,
  which PyTorch's reader refuses.
"""

from __future__ import annotations

import re
import types

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")

from dpl.errors import InvalidArgument  # noqa: E402
from dpl.schedule import Schedule, schedule  # noqa: E402

CLASSES = [n for n in ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B",
                       "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble",
                       "ScheduleZBVZeroBubble", "ScheduleDualPipeV") if hasattr(S, n)]
SINGLE = {"ScheduleGPipe", "Schedule1F1B"}
VSHAPE = {"ScheduleZBVZeroBubble", "ScheduleDualPipeV"}
SHAPES = [(2, 4), (3, 6), (4, 8)]  # DualPipeV needs M >= 2 * ranks


def _loss(out, target):
    return out.sum()


def _stand_in(stage: int, num_stages: int, ranks: int) -> types.SimpleNamespace:
    """What PyTorch's schedule constructors read from a stage."""
    return types.SimpleNamespace(stage_index=stage, num_stages=num_stages,
                                 group_size=ranks, group_rank=0,
                                 is_first=stage == 0, is_last=stage == num_stages - 1,
                                 submod=torch.nn.Identity())


def torch_schedule(name: str, ranks: int, m: int):
    """PyTorch's schedule `name` for `ranks` ranks and `m` micro-batches,
    built for rank 0 (every rank builds the lists of all ranks)."""
    cls = getattr(S, name)
    if name in SINGLE:
        return cls(_stand_in(0, ranks, ranks), m, loss_fn=_loss)
    n = 2 * ranks
    mine = [0, n - 1] if name in VSHAPE else [0, ranks]
    return cls([_stand_in(s, n, ranks) for s in mine], m, loss_fn=_loss)


def torch_csv(sched, tmp_path) -> str:
    """The schedule written by PyTorch's own CSV writer."""
    path = tmp_path / "torch.csv"
    if isinstance(sched, S._PipelineScheduleRuntime):
        sched._dump_csv(str(path), format="compute_only")
    else:  # single-stage classes have no writer: the multi-stage one reads
        S.PipelineScheduleMulti._dump_csv(sched, str(path))  # only pipeline_order
    return path.read_text()


def torch_rows(order) -> list[list[str]]:
    """PyTorch's pipeline_order as text per rank, bubbles (None) left out."""
    return [[str(a) for a in order[r] if a is not None] for r in sorted(order)]


def dpl_rows(s: Schedule) -> list[list[str]]:
    return [[str(a) for a in lst] for lst in s.lists()]


def compute_only(rows: list[list[str]]) -> list[list[str]]:
    """Rows without PyTorch's gradient-reduction actions."""
    return [[a for a in r if not a.endswith("REDUCE_GRAD")] for r in rows]


def csv_of(rows: list[list[str]]) -> str:
    return "".join(",".join(r) + "\n" for r in rows)


def has_1f1b_last_rank_bug(rows: list[list[str]], m: int) -> bool:
    last = len(rows) - 1
    fwd = [int(a[len(str(last)) + 1:]) for a in rows[last]
           if re.fullmatch(rf"{last}F\d+", a)]
    return fwd == list(range(1, m + 1))


# --------------------------------------------------------------------------
# PyTorch -> dpl

@pytest.mark.parametrize("ranks,m", SHAPES)
@pytest.mark.parametrize("name", CLASSES)
def test_torch_csv_loads_in_dpl(name, ranks, m, tmp_path):
    sched = torch_schedule(name, ranks, m)
    text = torch_csv(sched, tmp_path)
    rows = torch_rows(sched.pipeline_order)
    assert text.count("\n") == ranks

    if name in SINGLE:
        # WAIT_REDUCE_GRAD is refused, naming line 1 and its field.
        field = rows[0].index("0WAIT_REDUCE_GRAD") + 1
        with pytest.raises(InvalidArgument) as ei:
            Schedule.from_csv(text)
        msg = str(ei.value)
        assert "DPL_EPARSE" in msg
        assert f"line 1, field {field}: '0WAIT_REDUCE_GRAD' is not an action" in msg
        rows = compute_only(rows)
        policy = "gpipe" if name == "ScheduleGPipe" else "1f1b"
        if name == "Schedule1F1B" and has_1f1b_last_rank_bug(rows, m):
            bad = Schedule.from_csv(csv_of(rows))
            assert bad.microbatches == m + 1  # the stray F{m}
            with pytest.raises(InvalidArgument) as ei:
                bad.validate()
            assert f"rank {ranks - 1}, position 1 ({ranks - 1}B0): before its forward" \
                in str(ei.value)
            last = ranks - 1
            rows[last] = [re.sub(rf"^{last}F(\d+)$", lambda g: f"{last}F{int(g[1]) - 1}", a)
                          for a in rows[last]]
        got = Schedule.from_csv(csv_of(rows))
        got.validate()
        assert dpl_rows(got) == rows
        assert dpl_rows(got) == dpl_rows(schedule(policy, ranks, m))
        return

    if name == "ScheduleDualPipeV":
        first = next(a for r in rows for a in r if a.endswith("OVERLAP_F_B"))
        line = next(i for i, r in enumerate(rows) if first in r)
        field = text.splitlines()[line].split(",").index(first) + 1
        with pytest.raises(InvalidArgument) as ei:
            Schedule.from_csv(text)
        assert f"line {line + 1}, field {field}: '{first}' is not an action" \
            in str(ei.value)
        rows = [[x for a in r for x in
                 (a[1:a.index(")")].split(";") if a.endswith("OVERLAP_F_B") else [a])]
                for r in rows]
        text = csv_of(rows)

    got = Schedule.from_csv(text)
    assert got.ranks == ranks
    assert got.stages == 2 * ranks
    assert got.microbatches == m
    got.validate()
    assert dpl_rows(got) == rows
    if name in VSHAPE:
        assert got.stage_rank(2 * ranks - 1) == 0  # the V folds back to rank 0
    if name == "ScheduleInterleaved1F1B":
        assert dpl_rows(got) == dpl_rows(schedule("interleaved", ranks, m, chunks=2))


# --------------------------------------------------------------------------
# dpl -> PyTorch

def _dpl_schedule(policy: str, ranks: int, m: int) -> Schedule:
    if policy == "interleaved":
        return schedule(policy, ranks, m, chunks=2)
    return schedule(policy, ranks, m)


def _torch_reader(ranks: int, stages: int, m: int):
    return S._PipelineScheduleRuntime([_stand_in(0, stages, ranks)], m, loss_fn=_loss)


@pytest.mark.parametrize("ranks,m", SHAPES)
@pytest.mark.parametrize("policy", ["gpipe", "1f1b", "zb-h1", "interleaved"])
def test_dpl_csv_loads_in_torch(policy, ranks, m, tmp_path):
    ours = _dpl_schedule(policy, ranks, m)
    path = tmp_path / "dpl.csv"
    path.write_text(ours.to_csv())
    rt = _torch_reader(ranks, ours.stages, m)
    rt._load_csv(str(path))
    assert torch_rows(rt.pipeline_order) == dpl_rows(ours)
    # PyTorch lowered it: every compute action is still there, in order,
    # and transfers were added between the ranks.
    with_comms = torch_rows(rt.pipeline_order_with_comms)
    for r, lst in enumerate(dpl_rows(ours)):
        assert [a for a in with_comms[r] if a in set(lst)] == lst
    assert any("SEND_F" in a for a in with_comms[0])
    # The same text reads back into dpl unchanged.
    assert dpl_rows(Schedule.from_csv(path.read_text())) == dpl_rows(ours)


@pytest.mark.parametrize("policy", ["1f1b", "zb-h1"])
def test_dpl_lowered_csv_refused_by_torch(policy, tmp_path):
    ours = _dpl_schedule(policy, 2, 4)
    text = ours.to_csv(comms=True)
    assert text.splitlines()[0].endswith(",0REDUCE_GRAD,0STEP")
    path = tmp_path / "dpl-comms.csv"
    path.write_text(text)
    rt = _torch_reader(2, ours.stages, 4)
    with pytest.raises(RuntimeError, match=r"Invalid action string: 0STEP"):
        rt._load_csv(str(path), format="compute_comms")
    # dpl itself reads its lowered file back as lowered, unchanged.
    back = Schedule.from_csv(text)
    assert back.lowered
    assert dpl_rows(back) == dpl_rows(ours.lower())
