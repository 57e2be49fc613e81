"""CSV interchange with the installed torch.distributed.pipelining, both ways.

PyTorch's schedule classes build their ``pipeline_order`` (one action list
per rank) in their constructors; they only read a few attributes of their
stages, so stand-ins without a process group are enough. PyTorch's own
writer (``_dump_csv``) and reader (``_PipelineScheduleRuntime._load_csv``)
move the lists through a file; dpl reads and writes the same text with
``Schedule.from_csv`` / ``to_csv``.

What the installed PyTorch (2.x) writes and how dpl takes it:

- Every class's compute-only file loads as it is -- ScheduleGPipe's and
  Schedule1F1B's lists end with ``REDUCE_GRAD`` and ``WAIT_REDUCE_GRAD``,
  ScheduleDualPipeV's hold ``(a;b)OVERLAP_F_B`` fields -- and is written
  back byte for byte, bubbles (empty fields) and CRLF line ends included
  (``from_csv`` keeps the file's layout); ``to_csv(layout=False)`` writes
  the same actions without them. Every multi-stage class's compute_comms
  file (``UNSHARD``, ``RESHARD``, ``WAIT_SEND_F``/``_B`` too) loads,
  validates and is written back byte for byte.
- Schedule1F1B's last rank: PyTorch numbers its forwards 1..M instead of
  0..M-1 (a bug in ``Schedule1F1B._get_pipeline_order``; its runtime does
  not use these lists, so training is unaffected). dpl loads such a file
  with M+1 micro-batches and its validator refuses it ("1B0 ... before its
  forward"); with the numbers shifted back it equals dpl's 1f1b. The test
  detects whether the installed version still has the bug.
- The compute actions of GPipe and 1F1B equal dpl's gpipe and 1f1b,
  Interleaved1F1B's dpl's ``interleaved``; all lists validate.
- dpl -> PyTorch: compute-only CSV of gpipe, 1f1b, zb-h1 and interleaved
  loads with PyTorch's ``_load_csv`` (which lowers it) and keeps dpl's
  lists. dpl's own lowered CSV (``to_csv(comms=True)``) ends with
  ``STEP``, which PyTorch's reader refuses; ``to_csv(comms="pytorch")``
  loads with ``format="compute_comms"`` as it is (test_torch_comms_csv.py
  trains with it).
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


def stage_indices(name: str, rank: int, ranks: int) -> list[int]:
    """The stages rank `rank` of `ranks` holds under PyTorch's class
    `name`: its own for the single-stage classes, else two, r and 2P-1-r
    for the V-shaped classes, r and r+P for the others."""
    if name in SINGLE:
        return [rank]
    return [rank, 2 * ranks - 1 - rank] if name in VSHAPE else [rank, rank + ranks]


def torch_schedule(name: str, ranks: int, m: int):
    """PyTorch's schedule `name` for `ranks` ranks and `m` micro-batches,
    built for rank 0 (every rank builds the lists of all ranks)."""
    cls = getattr(S, name)
    if name in SINGLE:
        return cls(_stand_in(0, ranks, ranks), m, loss_fn=_loss)
    return cls([_stand_in(s, 2 * ranks, ranks) for s in stage_indices(name, 0, ranks)], m,
               loss_fn=_loss)


def dpl_torch_schedule(name: str, ranks: int, m: int):
    """dpl.torch's class `name` on real stages with the indices
    :func:`torch_schedule` gives PyTorch's (rank 0's)."""
    import dpl.torch
    from torch_models import mlp
    cls = getattr(dpl.torch, name)
    if name in SINGLE:
        return cls(dpl.torch.PipelineStage(mlp([4, 4], 1)[0], 0, ranks), m, torch.nn.MSELoss())
    n = 2 * ranks
    parts = mlp([4] * (n + 1), n)
    return cls([dpl.torch.PipelineStage(parts[s], s, n) for s in stage_indices(name, 0, ranks)],
               m, torch.nn.MSELoss())


def torch_csv(sched, tmp_path) -> str:
    """The schedule written by PyTorch's own CSV writer, every byte as it
    is (CRLF line ends kept)."""
    path = tmp_path / "torch.csv"
    if isinstance(sched, S._PipelineScheduleRuntime):
        sched._dump_csv(str(path), format="compute_only")
    else:  # single-stage classes have no writer: the multi-stage one reads
        S.PipelineScheduleMulti._dump_csv(sched, str(path))  # only pipeline_order
    return path.read_bytes().decode()


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

    # Every field loads as it is, and the file comes back as it was, in
    # every byte: bubbles (empty fields) and CRLF line ends included.
    assert "\r\n" in text
    if any(a is None for r in sched.pipeline_order.values() for a in r):
        assert "" in [f for line in text.split("\r\n")[:-1] for f in line.split(",")]
    got = Schedule.from_csv(text)
    assert got.to_csv(comms=got.lowered) == text
    assert Schedule.from_csv(text.encode()).to_csv(comms=got.lowered) == text
    # Without the layout: the same actions, no empty fields, LF line ends.
    back = got.to_csv(comms=got.lowered, layout=False)
    assert back == csv_of([[f for f in line.split(",") if f]
                           for line in text.replace("\r\n", "\n").splitlines()])
    assert [line.split(",") for line in back.splitlines()] == rows
    if name == "ScheduleDualPipeV":
        assert any(a.endswith(")OVERLAP_F_B") for r in rows for a in r)
        assert any(a.kind == "OVERLAP_F_B" for lst in got.lists() for a in lst)

    if name in SINGLE:
        assert "0WAIT_REDUCE_GRAD" in rows[0]
        assert got.lowered  # REDUCE_GRAD is a lowered kind
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

    assert got.ranks == ranks
    assert got.stages == 2 * ranks
    assert got.microbatches == m
    got.validate()
    if name in VSHAPE:
        assert got.stage_rank(2 * ranks - 1) == 0  # the V folds back to rank 0
    if name == "ScheduleInterleaved1F1B":
        assert dpl_rows(got) == dpl_rows(schedule("interleaved", ranks, m, chunks=2))


@pytest.mark.parametrize("ranks,m", SHAPES)
@pytest.mark.parametrize("name", [c for c in CLASSES if c not in SINGLE])
def test_torch_comms_csv_loads_in_dpl(name, ranks, m, tmp_path):
    """PyTorch's lowered files (UNSHARD, RESHARD, WAIT_SEND_*, WAIT_REDUCE_GRAD,
    OVERLAP_F_B) load, validate, and are written back byte for byte, by
    both of dpl's writers."""
    sched = torch_schedule(name, ranks, m)
    path = tmp_path / "comms.csv"
    sched._dump_csv(str(path), format="compute_comms")
    raw = path.read_bytes().decode()
    assert Schedule.from_csv(raw).to_csv(comms=True) == raw  # with its layout
    text = raw.replace("\r\n", "\n")
    got = Schedule.from_csv(text)
    assert got.lowered
    got.validate()
    kinds = {a.kind for lst in got.lists() for a in lst}
    assert {"UNSHARD", "RESHARD", "WAIT_REDUCE_GRAD", "WAIT_SEND_F",
            "WAIT_SEND_B"} <= kinds
    assert "STEP" not in kinds
    assert got.to_csv(comms=True) == text
    assert got.to_csv(comms="pytorch") == text


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
def test_dpl_lowered_csv_refused_by_torch_unless_written_for_it(policy, tmp_path):
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
    # Written for PyTorch's runtime, the same lists load as they are.
    pt = ours.to_csv(comms="pytorch")
    path.write_text(pt)
    rt = _torch_reader(2, ours.stages, 4)
    rt._load_csv(str(path), format="compute_comms")
    assert torch_rows(rt.pipeline_order_with_comms) == \
        [line.split(",") for line in pt.splitlines()]
    assert all(not a.endswith("STEP") for r in dpl_rows(Schedule.from_csv(pt)) for a in r)


def test_to_csv_refuses_an_unknown_comms_value():
    with pytest.raises(InvalidArgument, match="'torch'"):
        _dpl_schedule("1f1b", 2, 4).to_csv(comms="torch")
