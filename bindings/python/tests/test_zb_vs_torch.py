"""dpl's zero-bubble policies against the installed PyTorch's classes:
zbv vs ScheduleZBVZeroBubble, interleaved-zb vs
ScheduleInterleavedZeroBubble (2 chunks), and zb-h2 / zb-auto (one stage
per rank) vs ScheduleInterleavedZeroBubble with one stage per rank
(PyTorch's ZB1P, dpl's zb-h1).

Both orders are replayed by dpl's simulator under F=1, B=2 (I=W=1) per
action with free links; peak activations per rank are counted in list
order (a forward adds a micro-batch, its W or B removes it), over every
stage of the rank. Targets: dpl's makespan <= PyTorch's and dpl's peak
per rank <= PyTorch's, on S = 4, 8 and M = S, 2S, 4S -- except zb-h2,
which spends twice the memory by definition (its makespan is still
compared). Where PyTorch builds zbv and interleaved-zb, dpl's lists are
PyTorch's lists; interleaved-zb also runs the M PyTorch refuses.
zb-auto needs ``dpl.schedule(..., cap=)`` to accept policy zb-auto.

Run ``python test_zb_vs_torch.py`` to print the comparison table.
"""

from __future__ import annotations

import re
import types

import pytest

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")

from dpl.schedule import Schedule, schedule  # noqa: E402

COSTS = (1.0, 2.0, 1.0, 1.0)
SHAPES = [(r, m) for r in (4, 8) for m in (r, 2 * r, 4 * r)]
_COMPUTE = re.compile(r"\d+[FBIW]\d+")
ZB1P = "ScheduleInterleavedZeroBubble"


def _loss(out, target):
    return out.sum()


def _stand_in(stage: int, num_stages: int, ranks: int) -> types.SimpleNamespace:
    """What PyTorch's schedule constructors read from a stage."""
    return types.SimpleNamespace(stage_index=stage, num_stages=num_stages,
                                 group_size=ranks, group_rank=0,
                                 is_first=stage == 0, is_last=stage == num_stages - 1,
                                 submod=torch.nn.Identity())


def torch_order(policy: str, ranks: int, m: int):
    """(rows, stage_rank) of PyTorch's class for `policy`."""
    if policy in ("zbv", "dualpipev"):
        n = 2 * ranks
        stages = [_stand_in(0, n, ranks), _stand_in(n - 1, n, ranks)]
        cls = S.ScheduleZBVZeroBubble if policy == "zbv" else S.ScheduleDualPipeV
        sched = cls(stages, m, loss_fn=_loss)
        stage_rank = [s if s < ranks else n - 1 - s for s in range(n)]
    elif policy == "interleaved-zb":
        n = 2 * ranks
        stages = [_stand_in(c * ranks, n, ranks) for c in range(2)]
        sched = getattr(S, ZB1P)(stages, m, loss_fn=_loss)
        stage_rank = [s % ranks for s in range(n)]
    else:  # one stage per rank: PyTorch's ZB1P with one chunk
        n = ranks
        sched = getattr(S, ZB1P)([_stand_in(0, n, ranks)], m, loss_fn=_loss)
        stage_rank = list(range(n))
    order = sched.pipeline_order
    rows = [[str(a) for a in _flat(order[r]) if _COMPUTE.fullmatch(str(a))]
            for r in sorted(order)]
    return rows, stage_rank


def _flat(actions):
    """A rank's actions without bubbles, each OVERLAP_F_B as its
    sub-actions in order (what PyTorch's runtime runs for it by default)."""
    for a in actions:
        if a is None:
            continue
        if a.computation_type == S.OVERLAP_F_B:
            yield from a.sub_actions
        else:
            yield a


def dpl_rows(s: Schedule) -> list[list[str]]:
    """A rank's actions, each OVERLAP_F_B pair as its two parts (the
    marker left out), as _flat gives PyTorch's."""
    return [[str(a) for a in lst if a.kind != "OVERLAP_F_B"] for lst in s.lists()]


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


def torch_makespan(rows, stage_rank, m: int) -> float:
    s = Schedule.from_lists(len(rows), len(stage_rank), m, rows, stage_rank)
    s.validate()
    lowered = s.clone()
    lowered.lower()
    lowered.validate()
    return s.simulate(costs=COSTS).makespan


def ours(policy: str, ranks: int, m: int) -> Schedule:
    if policy == "interleaved-zb":
        return schedule(policy, ranks, m, chunks=2)
    if policy == "zb-auto":
        return schedule(policy, ranks, m, cap=ranks)  # 1F1B's peak
    return schedule(policy, ranks, m)


def compare(policy: str, ranks: int, m: int):
    """(dpl makespan, torch makespan, dpl peaks, torch peaks, same lists)."""
    s = ours(policy, ranks, m)
    s.validate()
    low = s.clone()
    low.lower()
    low.validate()
    mine = dpl_rows(s)
    theirs, stage_rank = torch_order(policy, ranks, m)
    return (s.simulate(costs=COSTS).makespan, torch_makespan(theirs, stage_rank, m),
            rank_peaks(mine), rank_peaks(theirs), theirs == mine)


POLICIES = ["zbv", "interleaved-zb", "zb-h2", "zb-auto", "dualpipev"]
# PyTorch's DualPipeV takes M >= 2S only
CASES = [(p, r, m) for p in POLICIES for r, m in SHAPES if p != "dualpipev" or m >= 2 * r]


@pytest.mark.parametrize("policy,ranks,m", CASES)
def test_not_worse_than_torch(policy, ranks, m):
    mk, t_mk, pk, t_pk, same = compare(policy, ranks, m)
    assert mk <= t_mk + 1e-9, f"{policy} S={ranks} M={m}: {mk} > {t_mk}"
    if policy != "zb-h2":
        assert all(a <= b for a, b in zip(pk, t_pk)), \
            f"{policy} S={ranks} M={m}: {pk} > {t_pk}"
    else:  # twice zb-h1's memory at most
        assert all(a <= 2 * b for a, b in zip(pk, t_pk))
    if policy in ("zbv", "interleaved-zb", "dualpipev"):
        assert same, f"{policy} S={ranks} M={m}: lists differ from PyTorch's"


@pytest.mark.parametrize("ranks,m", [(4, 1), (4, 3), (4, 5), (2, 2), (8, 5)])
def test_zbv_small_m_like_torch(ranks, m):
    """Below 2S-1 micro-batches PyTorch pads; dpl leaves the padding out
    the same way and keeps PyTorch's lists."""
    mk, t_mk, pk, t_pk, same = compare("zbv", ranks, m)
    assert same and mk <= t_mk + 1e-9 and pk <= t_pk


def test_interleaved_zb_runs_what_torch_refuses():
    """M = 9 on 4 ranks: PyTorch needs M divisible by its 2 rounds; dpl
    runs rounds of 5 and 4, valid, with the bubble of M = 8 (S-1 units)."""
    with pytest.raises(ValueError):
        torch_order("interleaved-zb", 4, 9)
    s = schedule("interleaved-zb", 4, 9, chunks=2)
    s.validate()
    low = s.clone()
    low.lower()
    low.validate()
    assert s.simulate(costs=COSTS).makespan == pytest.approx(6 * 9 + 3)
    assert max(rank_peaks(dpl_rows(s))) <= 5 + 4


def test_zb_auto_halves_the_bubble_with_twice_the_memory():
    """F=1, I=2, W=1: at a cap of 2S zb-auto idles half as long as zb-h1
    (it reaches the lower bound (S-1) F + M (F+I+W))."""
    c = (1.0, 3.0, 2.0, 1.0)
    for ranks, m in [(4, 8), (4, 16), (8, 16), (8, 32)]:
        h1 = schedule("zb-h1", ranks, m).simulate(costs=c).makespan
        a = schedule("zb-auto", ranks, m, cap=2 * ranks, costs=c).simulate(costs=c).makespan
        work = 4.0 * m
        assert a - work <= (h1 - work) / 2 + 1e-9
        assert a == pytest.approx(work + ranks - 1)


def table() -> str:
    lines = ["| policy | S | M | dpl makespan | torch makespan | dpl bubble | torch bubble "
             "| dpl peak/rank | torch peak/rank |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for policy, ranks, m in CASES:
        mk, t_mk, pk, t_pk, _ = compare(policy, ranks, m)
        chunks = 2 if policy in ("zbv", "interleaved-zb", "dualpipev") else 1
        work = 3.0 * m * chunks  # F + I + W per micro-batch and chunk
        lines.append(f"| {policy} | {ranks} | {m} | {mk:g} | {t_mk:g} "
                     f"| {1 - work / mk:.1%} | {1 - work / t_mk:.1%} "
                     f"| {','.join(map(str, pk))} | {','.join(map(str, t_pk))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())


@pytest.mark.parametrize("ranks,m", [(2, 4), (3, 6), (3, 11), (4, 9), (8, 23), (1, 2)])
def test_dualpipev_lists_are_torchs(ranks, m):
    s = schedule("dualpipev", ranks, m)
    theirs, stage_rank = torch_order("dualpipev", ranks, m)
    assert dpl_rows(s) == theirs
    assert [s.stage_rank(st) for st in range(2 * ranks)] == stage_rank
    # The pairs are PyTorch's compound actions, field for field.
    n = 2 * ranks
    sched = S.ScheduleDualPipeV([_stand_in(0, n, ranks), _stand_in(n - 1, n, ranks)], m,
                                loss_fn=_loss)
    torch_fields = [[str(a) for a in sched.pipeline_order[r] if a is not None]
                    for r in sorted(sched.pipeline_order)]
    assert [line.split(",") for line in s.to_csv().splitlines()] == torch_fields
    assert any(")OVERLAP_F_B" in f for row in torch_fields for f in row)


@pytest.mark.parametrize("ranks,m", [(4, 1), (4, 7), (2, 3)])
def test_dualpipev_runs_what_torch_refuses(ranks, m):
    with pytest.raises(ValueError, match="at least as many microbatches as stages"):
        torch_order("dualpipev", ranks, m)
    s = schedule("dualpipev", ranks, m)
    s.validate()
    low = s.clone()
    low.lower()
    low.validate()
    assert sum(len(r) for r in dpl_rows(s)) >= 2 * 2 * ranks * m   # F and B (or I, W)
