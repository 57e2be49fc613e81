"""dpl.schedule: building, inspecting, lowering, validating and saving
schedules through the C library, checked against properties of the
policies and against the `dpl` command line tool."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from dpl import InvalidArgument
from dpl import _schedule_capi as capi
from dpl.schedule import (KINDS, POLICIES, Action, Schedule, ScheduleError, StageCost,
                          schedule)

ROOT = Path(__file__).resolve().parents[3]
CLI = Path(os.environ.get("DPL_CLI", "/work/main/build/bindings/cli/dpl"))
EDEADLOCK, ESCHED = -4003, -4002

# (policy, stages, microbatches, keywords)
CASES = [
    ("gpipe", 4, 8, {}), ("gpipe", 1, 3, {}), ("1f1b", 4, 8, {}), ("1f1b", 5, 3, {}),
    ("1f1b-comm", 4, 8, {}), ("bounded", 4, 8, {"cap": 2}),
    ("bounded", 3, 6, {"cap": [1, 2, 3]}), ("interleaved", 4, 8, {"chunks": 2}),
    ("interleaved", 2, 6, {"chunks": 3}), ("zb-h1", 4, 8, {}), ("zb-h1", 3, 2, {}),
]


def build(case):
    pol, S, M, kw = case
    return schedule(pol, S, M, **kw)


def ids(case):
    return f"{case[0]}-S{case[1]}-M{case[2]}"


# -- C mirror ----------------------------------------------------------------

def test_struct_layout_matches_the_c_compiler(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc"))
    inc = [ROOT / "libsched" / m / "include" for m in ("core", "sim")]
    if cc is None or not all(d.is_dir() for d in inc):
        pytest.skip("no C compiler or no dpl headers")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <dpl/sim.h>",
             "int main(void) {"]
    for cname, cls in capi.STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for f, _ in cls._fields_:
            lines.append(f'printf("{cname}.{f} %zu,%zu\\n", offsetof({cname}, {f}), '
                         f'sizeof((({cname} *)0)->{f}));')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", *(f"-I{d}" for d in inc), str(src), "-o", str(exe)],
                   check=True, capture_output=True, timeout=60)
    got = dict(line.rsplit(" ", 1) for line in
               subprocess.run([str(exe)], check=True, capture_output=True,
                              text=True, timeout=10).stdout.splitlines())
    for cname, cls in capi.STRUCTS.items():
        assert int(got[cname]) == ctypes.sizeof(cls), cname
        for f, _ in cls._fields_:
            field = getattr(cls, f)
            assert got[f"{cname}.{f}"] == f"{field.offset},{field.size}", f"{cname}.{f}"


def test_kind_and_policy_names_match_the_library():
    assert capi.kind_names() == KINDS
    assert capi.policy_names() == POLICIES


# -- actions -----------------------------------------------------------------

def test_action_text_is_pytorch_notation():
    assert str(Action("F", 0, 3)) == "0F3"
    assert str(Action("SEND_B", 12, 7)) == "12SEND_B7"
    assert str(Action("REDUCE_GRAD", 2)) == "2REDUCE_GRAD"
    assert str(Action("STEP", 1)) == "1STEP"
    assert Action.parse("3RECV_F10") == Action("RECV_F", 3, 10)
    assert Action.parse("0STEP") == Action("STEP", 0, None)
    assert Action("W", 1, 2).is_compute and not Action("SEND_F", 1, 2).is_compute


def test_action_parse_inverts_format_on_every_kind():
    for k in KINDS:
        no_mb = ("REDUCE_GRAD", "STEP", "UNSHARD", "RESHARD", "WAIT_REDUCE_GRAD",
                 "OVERLAP_F_B")
        a = Action(k, 5, None if k in no_mb else 9)
        assert Action.parse(str(a)) == a


def test_bad_actions_raise_naming_the_value():
    with pytest.raises(InvalidArgument, match="'X'"):
        Action("X", 0, 0)
    with pytest.raises(InvalidArgument, match="needs a micro-batch"):
        Action("F", 0)
    with pytest.raises(InvalidArgument, match="carries no micro-batch"):
        Action("STEP", 0, 1)
    with pytest.raises(InvalidArgument, match="-1"):
        Action("F", -1, 0)
    with pytest.raises(TypeError):
        Action("F", "0", 0)
    with pytest.raises(InvalidArgument, match="0Q1"):
        Action.parse("0Q1")


# -- policies ----------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids)
def test_every_microbatch_runs_forward_and_backward_once(case):
    s = build(case)
    S, M = s.stages, s.microbatches
    assert s.ranks == case[1] and M == case[2]
    assert S == case[1] * case[3].get("chunks", 1)
    n = Counter()
    for r in range(s.ranks):
        for a in s.actions(r):
            assert a.is_compute
            assert s.stage_rank(a.stage) == r, f"{a} on rank {r}"
            n[(a.kind, a.stage, a.microbatch)] += 1
    split = case[0] == "zb-h1"
    for st in range(S):
        for j in range(M):
            assert n.pop(("F", st, j)) == 1
            if split:
                assert n.pop(("I", st, j)) == 1 and n.pop(("W", st, j)) == 1
            else:
                assert n.pop(("B", st, j)) == 1
    assert not n, f"unexpected actions {n}"
    assert s.action_count == S * M * (3 if split else 2)
    assert not s.lowered and s.policy == case[0]
    s.validate()


def warmup(lst):
    """Forwards before the first backward."""
    k = 0
    while k < len(lst) and lst[k].kind == "F":
        k += 1
    return k


@pytest.mark.parametrize("S,M", [(4, 8), (4, 2), (6, 6)])
def test_gpipe_1f1b_and_1f1b_comm_warmups(S, M):
    g, a, b = (schedule(p, S, M) for p in ("gpipe", "1f1b", "1f1b-comm"))
    for st in range(S):
        assert [x.kind for x in g.actions(st)] == ["F"] * M + ["B"] * M
        assert g.bound(st) == M
        assert warmup(a.actions(st)) == min(S - st, M)
        assert a.bound(st) == min(S - st, M)
        assert warmup(b.actions(st)) == min(2 * (S - st) - 1, M)
        # 1F1B: after the warm-up, backward and forward alternate.
        body = [x.kind for x in a.actions(st)][min(S - st, M):]
        k = M - min(S - st, M)
        assert body[:2 * k] == ["B", "F"] * k


def test_bounded_respects_its_cap_and_equals_1f1b_with_a_loose_cap():
    s = schedule("bounded", 4, 8, cap=2)
    assert [s.cap(st) for st in range(4)] == [2, 2, 2, 2]
    assert max(s.bound(st) for st in range(4)) <= 2
    loose = schedule("bounded", 4, 8, cap=[4, 3, 2, 1])
    assert loose.lists() == schedule("1f1b", 4, 8).lists()
    by_bytes = schedule("bounded", 4, 8, cap_bytes=300, activation_bytes=[100, 100, 100, 150])
    assert [by_bytes.cap(st) for st in range(4)] == [3, 3, 3, 2]
    assert max(by_bytes.bound(st) - by_bytes.cap(st) for st in range(4)) <= 0


def test_interleaved_maps_chunks_round_robin():
    s = schedule("interleaved", 4, 8, chunks=2)
    assert s.stage_ranks == [0, 1, 2, 3, 0, 1, 2, 3]


def test_costs_are_kept_for_simulation():
    s = schedule("zb-h1", 4, 8, costs=[(1, 2)] * 4)
    assert s.costs == (StageCost(1, 2),) * 4
    s2 = schedule("zb-h1", 4, 8, costs=StageCost(f=1, b=2, i=1, w=1))
    assert s2.costs == StageCost(1, 2, 1, 1)
    assert StageCost(2, 4).resolved() == StageCost(2, 4, 2, 2)


# -- bad input ---------------------------------------------------------------

@pytest.mark.parametrize("args,kw,exc,text", [
    (("nope", 4, 8), {}, InvalidArgument, "nope"),
    (("custom", 4, 8), {}, InvalidArgument, "custom"),
    (("1f1b", 0, 8), {}, InvalidArgument, r"got 0"),
    (("1f1b", -2, 8), {}, InvalidArgument, r"-2"),
    (("1f1b", 4, 0), {}, InvalidArgument, r"microbatches.*got 0"),
    (("1f1b", 4, 2**32), {}, InvalidArgument, str(2**32)),
    (("1f1b", "4", 8), {}, TypeError, "'4'"),
    (("1f1b", True, 8), {}, TypeError, "True"),
    (("1f1b", 4, 2.5), {}, TypeError, "2.5"),
    ((1, 4, 8), {}, TypeError, "1"),
    (("looped-bfs", 4, 6), {}, InvalidArgument, "looped-bfs: chunks must be >= 2"),
    (("1f1b", 4, 6), {"chunks": 2}, InvalidArgument, "only policies interleaved"),
    (("interleaved", 4, 8), {}, InvalidArgument, "chunks"),
    (("1f1b", 4, 8), {"chunks": 2}, InvalidArgument, "chunks 2"),
    (("bounded", 4, 8), {}, InvalidArgument, "cap"),
    (("bounded", 4, 8), {"cap": 0}, InvalidArgument, "got 0"),
    (("bounded", 4, 8), {"cap": [1, 2]}, InvalidArgument, "2 values for 4 stages"),
    (("bounded", 4, 8), {"cap_bytes": 50, "activation_bytes": 100}, InvalidArgument,
     "50 bytes"),
    (("1f1b", 4, 8), {"cap": 2}, InvalidArgument, "only policies bounded and zb-auto take a cap"),
    (("1f1b", 4, 8), {"costs": [(1, 2)] * 3}, InvalidArgument, "3 values for 4 stages"),
    (("1f1b", 4, 8), {"costs": (1, -2)}, InvalidArgument, "-2"),
    (("1f1b", 4, 8), {"costs": (1, 2, 3)}, TypeError, r"\(1, 2, 3\)"),
])
def test_bad_build_arguments_raise_naming_the_value(args, kw, exc, text):
    with pytest.raises(exc, match=text):
        schedule(*args, **kw)


def test_bad_indices_raise_naming_the_value():
    s = schedule("1f1b", 4, 8)
    for call in (lambda: s.actions(4), lambda: s.stage_rank(9), lambda: s.bound(-1)):
        with pytest.raises(InvalidArgument, match=r"4|9|-1"):
            call()
    with pytest.raises(InvalidArgument, match="line 1, field 2"):
        Schedule.from_csv("0F0,0Z0\n")
    with pytest.raises(InvalidArgument):
        Schedule.from_json("{")
    with pytest.raises(TypeError):
        Schedule.from_csv(3)


# -- files -------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids)
def test_csv_round_trip(case):
    s = build(case)
    text = s.to_csv()
    assert len(text.splitlines()) == s.ranks
    back = Schedule.from_csv(text)
    assert back.lists() == s.lists()
    assert back.stage_ranks == s.stage_ranks
    assert (back.stages, back.microbatches, back.policy) == (s.stages, s.microbatches, "custom")
    assert Schedule.from_csv(text, policy=case[0]).policy == case[0]
    low = s.lower()
    lowered = Schedule.from_csv(s.to_csv(comms=True))
    assert lowered.lowered and lowered.lists() == low.lists()
    assert low.to_csv() == text, "compute-only CSV of a lowered schedule"


def test_csv_layout_is_kept_by_from_csv():
    """A file's empty fields, line ends, byte order mark and tail come back
    from to_csv; layout=False, and every schedule derived from it, write
    dpl's plain form."""
    text = "\ufeff,0F0,0F1,,0B0,,0B1\r\n,,1F0,1B0,1F1,1B1,\n\n"
    s = Schedule.from_csv(text)
    assert s.to_csv() == text
    assert Schedule.from_csv(text.encode()).to_csv() == text
    plain = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"
    assert s.to_csv(layout=False) == plain
    assert s.clone().to_csv() == plain
    low = s.lower()
    assert Schedule.from_csv(low.to_csv(comms=True)).lists() == low.lists()
    assert s.to_csv(comms=True) == low.to_csv(comms=True)  # no layout there
    s.close()
    with pytest.raises(ValueError):
        s.to_csv()


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_json_round_trip_keeps_policy_caps_and_lowering(case):
    for s in (build(case), build(case).lower()):
        back = Schedule.from_json(s.to_json())
        assert back.lists() == s.lists()
        assert (back.policy, back.lowered, back.stage_ranks) == (s.policy, s.lowered,
                                                                  s.stage_ranks)
        assert [back.cap(k) for k in range(s.stages)] == [s.cap(k) for k in range(s.stages)]
        doc = json.loads(s.to_json())
        assert doc["actions"] == [[str(a) for a in l] for l in s.lists()]


# -- lowering and validation -------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids)
def test_lower_adds_matched_communication_and_leaves_self_alone(case):
    s = build(case)
    before = s.lists()
    low = s.lower()
    assert not s.lowered and s.lists() == before
    assert low.lowered and low.policy == s.policy
    low.validate()
    sends, recvs = Counter(), Counter()
    for r, l in enumerate(low.lists()):
        compute = [a for a in l if a.is_compute]
        assert compute == before[r]
        for a in l:
            if a.kind == "SEND_F":
                sends[(low.stage_rank(a.stage + 1), a.stage + 1, "F", a.microbatch)] += 1
            elif a.kind == "SEND_B":
                sends[(low.stage_rank(a.stage - 1), a.stage - 1, "B", a.microbatch)] += 1
            elif a.kind in ("RECV_F", "RECV_B"):
                recvs[(r, a.stage, a.kind[-1], a.microbatch)] += 1
        kinds = Counter(a.kind for a in l)
        mine = sum(1 for st in range(low.stages) if low.stage_rank(st) == r)
        assert kinds["REDUCE_GRAD"] == kinds["STEP"] == mine
    assert sends == recvs and all(v == 1 for v in sends.values())
    with pytest.raises(InvalidArgument, match="lowered"):
        low.lower()


def test_from_lists_builds_a_valid_hand_written_schedule():
    lists = [["0F0", "0F1", Action("B", 0, 0), "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    s = Schedule.from_lists(2, 2, 2, lists)
    assert s.policy == "custom" and s.lists()[0][2] == Action("B", 0, 0)
    s.validate()
    s.lower().validate()
    v = Schedule.from_lists(2, 4, 1, [["0F0", "3F0", "3B0", "0B0"], ["1F0", "2F0", "2B0", "1B0"]],
                            stage_rank=[0, 1, 1, 0])
    assert v.stage_ranks == [0, 1, 1, 0]
    v.validate()


def test_deadlocking_lists_raise_with_the_issue():
    # Rank 1 waits for 0F1, which rank 0 runs after 0B0, which needs 1B0.
    s = Schedule.from_lists(2, 2, 2, [["0F0", "0B0", "0F1", "0B1"],
                                      ["1F1", "1F0", "1B0", "1B1"]])
    with pytest.raises(ScheduleError) as e:
        s.validate()
    assert e.value.code == EDEADLOCK and len(e.value.issues) == 1
    issue = e.value.issues[0]
    assert (issue.code, issue.rank, issue.position, issue.action) == (
        EDEADLOCK, 0, 1, Action("B", 0, 0))
    assert issue.message in str(e.value) and "0B0" in issue.message
    with pytest.raises(ScheduleError):
        s.lower()
    with pytest.raises(ScheduleError) as e2:
        s.simulate()
    assert e2.value.issues[0].code == EDEADLOCK


def test_missing_backward_and_cap_are_schedule_errors():
    s = Schedule.from_lists(1, 1, 2, [["0F0", "0F1", "0B0"]])
    with pytest.raises(ScheduleError) as e:
        s.validate()
    issue = e.value.issues[0]
    assert (issue.code, issue.rank, issue.action) == (ESCHED, 0, Action("B", 0, 1))
    assert "0B1" in str(e.value) and "never runs" in str(e.value)
    capped = Schedule.from_lists(1, 1, 2, [["0F0", "0F1", "0B0", "0B1"]], caps=1)
    with pytest.raises(ScheduleError, match="cap"):
        capped.validate()


def test_from_lists_rejects_misplaced_actions():
    with pytest.raises(InvalidArgument, match="lives on rank 1"):
        Schedule.from_lists(2, 2, 1, [["0F0", "1F0"], []])
    with pytest.raises(InvalidArgument, match="3 lists for 2 ranks"):
        Schedule.from_lists(2, 2, 1, [[], [], []])
    with pytest.raises(InvalidArgument, match="micro-batch 5"):
        Schedule.from_lists(1, 1, 2, [["0F5"]])


def test_close_and_clone():
    s = schedule("1f1b", 2, 2)
    c = s.clone()
    assert isinstance(s._ptr, ctypes.c_void_p) and s._ptr.value != c._ptr.value
    with s:
        pass
    with pytest.raises(ValueError, match="closed"):
        s.actions(0)
    s.close()
    assert c.lists()[1][0] == Action("F", 1, 0)


# -- against the command line tool -------------------------------------------

def cli(*calls: list[str]) -> list[str]:
    """Run `dpl schedule` once per argument list, concurrently (the tool's
    start-up dominates), and return each standard output."""
    if not CLI.exists():
        pytest.skip(f"no dpl CLI at {CLI} (set DPL_CLI)")
    procs = [subprocess.Popen([str(CLI), "schedule", *a], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for a in calls]
    outs = []
    for p, a in zip(procs, calls):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, f"dpl schedule {' '.join(a)}: {err}"
        outs.append(out)
    return outs


@pytest.mark.parametrize("case", [c for c in CASES if c[1:3] == (4, 8)], ids=ids)
def test_matches_the_cli(case):
    pol, S, M, kw = case
    flags = ["--stages", str(S), "--microbatches", str(M), "--policy", pol]
    if "chunks" in kw:
        flags += ["--chunks", str(kw["chunks"])]
    if "cap" in kw:
        flags += ["--cap", str(kw["cap"])]
    s = build(case)
    csv, lowered, js, text = cli(flags + ["--format", "csv"],
                                 flags + ["--lower", "--format", "csv"],
                                 flags + ["--format", "json"], flags + ["--format", "text"])
    assert s.to_csv() == csv
    assert s.to_csv(comms=True) == lowered
    assert s.to_json() == js
    assert s.timeline() == text


def test_zb_auto_transfer_time_plans_around_latency():
    # Planned with T, simulated with links of latency T: never slower than
    # the order planned for free communication, and faster here.
    c = (1, 3, 2, 1)
    free = schedule("zb-auto", 4, 8, cap=4, costs=c)
    aware = schedule("zb-auto", 4, 8, cap=4, costs=c, transfer=2.0)
    t_free = free.simulate(latency=2.0).makespan
    t_aware = aware.simulate(latency=2.0).makespan
    assert t_aware < t_free
    assert aware.simulate().makespan >= 8 * (1 + 2 + 1)   # M (F + I + W) per stage


@pytest.mark.parametrize("kw,exc,needle", [
    (dict(transfer=-0.5), InvalidArgument, "transfer must be a finite time >= 0 (got -0.5)"),
    (dict(transfer=float("inf")), InvalidArgument, "got inf"),
    (dict(transfer="1"), TypeError, "transfer must be a number"),
])
def test_zb_auto_bad_transfer(kw, exc, needle):
    with pytest.raises(exc) as e:
        schedule("zb-auto", 4, 8, cap=4, **kw)
    assert needle in str(e.value)


def test_transfer_only_for_zb_auto():
    with pytest.raises(InvalidArgument, match="only policy zb-auto takes a transfer time"):
        schedule("1f1b", 4, 8, transfer=1.0)
