"""dpl's looped-bfs and interleaved against the installed PyTorch's
ScheduleLoopedBFS and ScheduleInterleaved1F1B.

Both orders are replayed by dpl's simulator under F=1, B=2 (I=W=1) with
free links; peak activations per rank are counted in list order (a
forward adds a micro-batch, its backward removes it), over every stage of
the rank. Targets: dpl's makespan <= PyTorch's and dpl's peak per rank <=
PyTorch's, on S = 4, 8 and M = S, 2S, 4S, plus M = 6 and M = 2 on 4 ranks
(PyTorch's own examples) and M that PyTorch refuses (dpl runs them).
Where PyTorch accepts M, dpl's lists are PyTorch's lists.

Run ``python test_policies_vs_torch.py`` to print the comparison table.
"""

from __future__ import annotations

import re
import types

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")

from dpl.schedule import Schedule, schedule  # noqa: E402

COSTS = (1.0, 2.0, 1.0, 1.0)
PAIRS = {"looped-bfs": "ScheduleLoopedBFS", "interleaved": "ScheduleInterleaved1F1B"}
SHAPES = [(r, m) for r in (4, 8) for m in (r, 2 * r, 4 * r)] + [(4, 6), (4, 2)]
_COMPUTE = re.compile(r"\d+[FBIW]\d+")


def _loss(out, target):
    return out.sum()


def _stand_in(stage: int, num_stages: int, ranks: int) -> types.SimpleNamespace:
    """What PyTorch's schedule constructors read from a stage."""
    return types.SimpleNamespace(stage_index=stage, num_stages=num_stages,
                                 group_size=ranks, group_rank=0,
                                 is_first=stage == 0, is_last=stage == num_stages - 1,
                                 submod=torch.nn.Identity())


def torch_rows(cls_name: str, ranks: int, m: int, chunks: int) -> list[list[str]]:
    """PyTorch's compute actions per rank (rank 0 builds every rank's)."""
    n = ranks * chunks
    stages = [_stand_in(c * ranks, n, ranks) for c in range(chunks)]
    sched = getattr(S, cls_name)(stages, m, loss_fn=_loss)
    order = sched.pipeline_order
    return [[str(a) for a in order[r] if a is not None and _COMPUTE.fullmatch(str(a))]
            for r in sorted(order)]


def dpl_rows(s: Schedule) -> list[list[str]]:
    return [[str(a) for a in lst] for lst in s.lists()]


def csv_of(rows: list[list[str]]) -> str:
    return "".join(",".join(r) + "\n" for r in rows)


def rank_peaks(rows: list[list[str]]) -> list[int]:
    """Micro-batches alive at once on each rank, in list order."""
    out = []
    for row in rows:
        live = peak = 0
        for a in row:
            kind = re.sub(r"\d", "", a)
            if kind == "F":
                live += 1
                peak = max(peak, live)
            elif kind in ("B", "W"):
                live -= 1
        out.append(peak)
    return out


def makespan(rows: list[list[str]]) -> float:
    s = Schedule.from_csv(csv_of(rows))
    s.validate()
    return s.simulate(costs=COSTS).makespan


def compare(policy: str, ranks: int, m: int, chunks: int = 2):
    """(dpl makespan, torch makespan, dpl peaks, torch peaks, same lists);
    torch's entries are None where PyTorch refuses M."""
    ours = schedule(policy, ranks, m, chunks=chunks)
    ours.validate()
    mine = dpl_rows(ours)
    t_mk = t_pk = None
    try:
        theirs = torch_rows(PAIRS[policy], ranks, m, chunks)
    except ValueError:
        theirs = None
    if theirs is not None:
        t_mk, t_pk = makespan(theirs), rank_peaks(theirs)
    return (ours.simulate(costs=COSTS).makespan, t_mk, rank_peaks(mine), t_pk,
            theirs == mine)


@pytest.mark.parametrize("ranks,m", SHAPES)
@pytest.mark.parametrize("policy", sorted(PAIRS))
def test_not_worse_than_torch(policy, ranks, m):
    mk, t_mk, pk, t_pk, same = compare(policy, ranks, m)
    assert t_mk is not None, f"PyTorch refused {policy} S={ranks} M={m}"
    assert mk <= t_mk + 1e-9, f"{policy} S={ranks} M={m}: {mk} > {t_mk}"
    assert all(a <= b for a, b in zip(pk, t_pk)), f"{policy} S={ranks} M={m}: {pk} > {t_pk}"
    # Both classes' orders are dpl's orders wherever PyTorch builds them.
    assert same, f"{policy} S={ranks} M={m}: lists differ from PyTorch's"


@pytest.mark.parametrize("ranks,m,chunks", [(4, 5, 2), (4, 12, 3), (3, 7, 3), (8, 20, 2)])
@pytest.mark.parametrize("policy", sorted(PAIRS))
def test_other_shapes(policy, ranks, m, chunks):
    mk, t_mk, pk, t_pk, same = compare(policy, ranks, m, chunks)
    if t_mk is None:  # PyTorch refuses this M; dpl runs it
        assert policy == "interleaved"
        return
    assert mk <= t_mk + 1e-9
    assert all(a <= b for a, b in zip(pk, t_pk))
    assert same


def test_interleaved_runs_what_torch_refuses():
    """M = 9 on 4 ranks: PyTorch needs M divisible by its 2 rounds; dpl
    runs groups of 5 and 4, valid and within its stated bound."""
    with pytest.raises(ValueError):
        torch_rows("ScheduleInterleaved1F1B", 4, 9, 2)
    s = schedule("interleaved", 4, 9, chunks=2)
    s.validate()
    lowered = s.clone()
    lowered.lower()
    lowered.validate()
    assert rank_peaks(dpl_rows(s)) <= [min(18, 5 + 2 * (3 - r) + 1) for r in range(4)]


def table() -> str:
    lines = ["| policy | S | M | dpl makespan | torch makespan | dpl bubble | torch bubble "
             "| dpl peak/rank | torch peak/rank |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for policy in sorted(PAIRS):
        for ranks, m in SHAPES:
            mk, t_mk, pk, t_pk, _ = compare(policy, ranks, m)
            work = 3.0 * m * 2  # F + B per micro-batch and chunk, per rank
            lines.append(f"| {policy} | {ranks} | {m} | {mk:g} | {t_mk:g} "
                         f"| {1 - work / mk:.1%} | {1 - work / t_mk:.1%} "
                         f"| {','.join(map(str, pk))} | {','.join(map(str, t_pk))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
