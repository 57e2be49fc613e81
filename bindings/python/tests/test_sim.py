"""dpl.sim: the simulator through Python, checked against closed forms of
the policies and against `dpl simulate --json`."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from dpl import InvalidArgument
from dpl.schedule import Schedule, ScheduleError, StageCost, schedule
from dpl.sim import SimResult, simulate

CLI = Path(os.environ.get("DPL_CLI", "/work/main/build/bindings/cli/dpl"))


@pytest.mark.parametrize("S,M", [(4, 8), (2, 5), (6, 3), (1, 4)])
def test_1f1b_and_gpipe_makespan_closed_form(S, M):
    # Latency 0, infinite bandwidth: the critical path is (M + S - 1) (F + B).
    for pol in ("1f1b", "gpipe"):
        r = schedule(pol, S, M).simulate(costs=(1, 2), latency=0.0)
        assert r.makespan == pytest.approx((M + S - 1) * 3)
        assert r.total_busy == pytest.approx(S * M * 3)
        assert sum(r.rank_busy) == pytest.approx(r.total_busy)
    assert schedule("1f1b", S, M).simulate().makespan == pytest.approx((M + S - 1) * 3)


@pytest.mark.parametrize("S,M", [(4, 8), (3, 12), (8, 2)])
def test_gpipe_bubble_fraction(S, M):
    r = schedule("gpipe", S, M).simulate(costs=StageCost(f=1.5, b=2.5))
    assert r.bubble_fraction == pytest.approx((S - 1) / (M + S - 1))
    assert r.rank_bubble == pytest.approx([(S - 1) / (M + S - 1)] * S)


def test_latency_adds_two_hops_per_stage_boundary_to_gpipe():
    S, M, L = 4, 8, 0.5
    r = schedule("gpipe", S, M).simulate(latency=L)
    assert r.makespan == pytest.approx((M + S - 1) * 3 + 2 * (S - 1) * L)


def test_zb_h1_bubble_is_a_third_of_1f1b():
    c = (1, 2, 1, 1)  # F = I = W
    a = schedule("1f1b", 4, 8).simulate(costs=c)
    z = schedule("zb-h1", 4, 8).simulate(costs=c)
    idle_a = [a.makespan - b for b in a.rank_busy]
    idle_z = [z.makespan - b for b in z.rank_busy]
    assert idle_z == pytest.approx([x / 3 for x in idle_a])
    assert z.makespan < a.makespan


def test_peak_inflight_matches_the_policy_bound():
    S, M = 4, 8
    for pol, expect in (("1f1b", [min(S - s, M) for s in range(S)]), ("gpipe", [M] * S)):
        s = schedule(pol, S, M)
        r = s.simulate(activation_bytes=100)
        assert list(r.peak_inflight) == expect == [s.bound(k) for k in range(S)]
        assert list(r.peak_activation_bytes) == [100 * k for k in expect]
    b = schedule("bounded", S, M, cap=2).simulate()
    assert max(b.peak_inflight) <= 2


def test_allreduce_follows_the_ring_model():
    n, param, bw, lat = 4, 1000, 100.0, 0.25
    r = schedule("1f1b", 4, 8).simulate(replicas=n, param_bytes=param, ar_bandwidth=bw,
                                        ar_latency=lat)
    ring = 2 * (n - 1) / n * param / bw + 2 * (n - 1) * lat
    for st in r.stages:
        assert st.reduce_end - st.reduce_start == pytest.approx(ring)
    assert r.makespan == pytest.approx(max(st.reduce_end for st in r.stages))


def test_lowered_and_compute_only_simulate_the_same():
    kw = dict(latency=0.3, activation_bytes=50, bandwidth=100.0)
    s = schedule("1f1b", 4, 8)
    assert s.lower().simulate(**kw).to_dict() == s.simulate(**kw).to_dict()
    # Interleaved: a stage's STEP sits at the end of its rank's list, so
    # only its `finish` moves.
    s = schedule("interleaved", 4, 8, chunks=2)
    low, c = s.lower().simulate(**kw), s.simulate(**kw)
    assert (low.makespan, low.rank_busy, low.peak_inflight) == (c.makespan, c.rank_busy,
                                                                c.peak_inflight)
    for a, b in zip(low.stages, c.stages):
        assert (a.reduce_start, a.reduce_end, a.busy) == (b.reduce_start, b.reduce_end, b.busy)
        assert b.finish <= a.finish <= low.makespan


def test_events_are_consistent_with_the_costs():
    s = schedule("1f1b", 3, 4)
    r = s.simulate(costs=(1, 2), events=True)
    compute = [e for e in r.events if e.kind == "compute"]
    assert len(compute) == s.action_count
    for e in compute:
        assert e.end - e.start == pytest.approx(1 if e.action.kind == "F" else 2)
        assert s.stage_rank(e.action.stage) == e.rank
    for rank in range(3):
        mine = sorted((e.start, e.end) for e in compute if e.rank == rank)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(mine, mine[1:]))
    assert {e.kind for e in r.events} >= {"compute", "transfer"}
    assert s.simulate().events == ()


def test_schedule_costs_are_the_default():
    s = schedule("1f1b", 4, 8, costs=(2, 4))
    assert s.simulate().makespan == pytest.approx(11 * 6)
    assert s.simulate(costs=(1, 2)).makespan == pytest.approx(33)
    per = schedule("1f1b", 2, 2).simulate(costs=[(1, 2), (3, 3)])
    assert per.stages[1].busy == pytest.approx(2 * 6) and per.stages[0].busy == 6


@pytest.mark.parametrize("kw,exc,text", [
    ({"latency": -1.0}, InvalidArgument, r"latency.*-1"),
    ({"bandwidth": float("nan")}, InvalidArgument, "bandwidth.*nan"),
    ({"latency": "1"}, TypeError, "'1'"),
    ({"costs": [(1, 2)] * 3}, InvalidArgument, "3 values for 4 stages"),
    ({"costs": (1, float("inf"))}, InvalidArgument, "inf"),
    ({"replicas": 0}, InvalidArgument, r"replicas\[0\].*got 0"),
    ({"activation_bytes": [1, 2]}, InvalidArgument, "2 values for 4 stages"),
    ({"param_bytes": -5}, InvalidArgument, "-5"),
    ({"step_cost": -0.5}, InvalidArgument, "-0.5"),
])
def test_bad_parameters_raise_naming_the_value(kw, exc, text):
    with pytest.raises(exc, match=text):
        schedule("1f1b", 4, 8).simulate(**kw)


def test_timeline_rows_and_options():
    s = schedule("1f1b", 4, 8)
    rows = s.timeline().splitlines()
    assert [r.split("|")[0].strip() for r in rows[1:]] == [f"rank {k}" for k in range(4)]
    assert rows[1].split("|")[1].startswith("F0 F1 F2 F3")
    wrapped = s.timeline(width=10)
    assert len(wrapped.splitlines()) > len(rows)
    with pytest.raises(InvalidArgument, match="unit"):
        s.timeline(unit=float("inf"))


def test_trace_is_chrome_json_and_written_atomically(tmp_path):
    s = schedule("1f1b", 4, 8)
    out = tmp_path / "t.json"
    s.trace(out, latency=0.1)
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    complete = [e for e in evs if e.get("ph") == "X"]
    assert len(complete) >= s.action_count
    assert {e["ph"] for e in evs} >= {"X", "s", "f"}
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(
        s.simulate(latency=0.1).makespan * 1000)
    # A failing trace leaves the old file and no temporary behind.
    bad = Schedule.from_lists(2, 2, 1, [["0B0", "0F0"], ["1F0", "1B0"]])
    out.write_text("old")
    with pytest.raises(ScheduleError):
        bad.trace(out)
    with pytest.raises(InvalidArgument):
        s.trace(out, us_per_unit=float("nan"))
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]
    with pytest.raises(FileNotFoundError):
        s.trace(tmp_path / "missing" / "t.json")


def test_result_mirrors_dpl_simulate_json():
    if not CLI.exists():
        pytest.skip(f"no dpl CLI at {CLI} (set DPL_CLI)")
    flags = ["--stages", "4", "--microbatches", "8", "--policy", "zb-h1", "--costs",
             "1,2,1,1", "--latency", "0.25", "--bandwidth", "1000", "--activation-bytes",
             "300", "--replicas", "2", "--param-bytes", "5000", "--ar-bandwidth", "2000"]
    cli = json.loads(subprocess.run([str(CLI), "simulate", "--json", *flags], check=True,
                                    capture_output=True, text=True, timeout=60).stdout)
    r = schedule("zb-h1", 4, 8).simulate(costs=(1, 2, 1, 1), latency=0.25, bandwidth=1000,
                                        activation_bytes=300, replicas=2, param_bytes=5000,
                                        ar_bandwidth=2000)
    assert isinstance(r, SimResult)
    mine = r.to_dict()
    assert mine.keys() == cli.keys()

    def same(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
        return a == b
    assert same(mine, cli), (mine, cli)
    assert simulate(schedule("zb-h1", 4, 8), costs=(1, 2, 1, 1), latency=0.25).makespan > 0
