"""dpl.torch over processes and the shm transport (``python -m dpl.run``):
the same equality with single-process torch as the threads tests (and an
eval after training), and a
failing stage making every rank raise dpl.PeerError naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch_models import data, max_rel_diff, mlp, reference  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_rank_script.py")
WIDTHS = [6, 16, 16, 12, 16, 10, 3]
POLICIES = ["gpipe", "1f1b", "1f1b-comm", "bounded", "zb-h1", "zb-h2", "zb-auto"]


def launch(n, args, timeout=240, transport="shm"):
    env = dict(os.environ, DPL_TRANSPORT=transport)
    cmd = [sys.executable, "-m", "dpl.run", "-n", str(n), "--timeout", "30", SCRIPT, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("reps,chunks,M,policies", [
    ([1, 1, 1, 1], 1, 3, POLICIES),
    ([2, 2], 1, 3, POLICIES),
    ([3, 1], 1, 5, POLICIES),
    ([2], 1, 3, ["1f1b", "zb-h1"]),
    ([1, 1], 2, 3, ["interleaved", "looped-bfs", "interleaved-zb"]),
    ([2, 1], 2, 3, ["zbv"]),
])
def test_shm_equals_one_device(tmp_path, reps, chunks, M, policies):
    r = launch(sum(reps), ["--replicas", ",".join(map(str, reps)), "--chunks", str(chunks),
                           "--policies", ",".join(policies), "--microbatches", str(M),
                           "--out", str(tmp_path)])
    assert r.returncode == 0, r.stdout + r.stderr
    S = len(reps) * chunks
    parts = mlp(WIDTHS, S, torch.float64)
    batches = data(10, WIDTHS, 3, torch.float64)
    ref, ref_losses = reference(parts, batches, M, "sgd")
    # the trained model's micro-batch losses on the first batch: what each
    # policy's eval after training must give
    model = torch.nn.Sequential(*ref)
    with torch.no_grad():
        x0, y0 = batches[0]
        want_eval = [float(torch.nn.MSELoss()(model(a), b))
                     for a, b in zip(x0.tensor_split(M), y0.tensor_split(M))]
    for policy in policies:
        seen = set()
        loss_sum = [[0.0] * M for _ in batches]
        eval_sum = [0.0] * M
        for rank in range(sum(reps)):
            got = torch.load(tmp_path / f"rank{rank}-{policy}.pt")
            for s, ps in got["params"].items():
                seen.add(s)
                worst = max_rel_diff(ps, list(ref[s].parameters()))
                assert worst <= 1e-10, f"{policy} rank {rank} stage {s}: {worst:.3g}"
            for it, ls in enumerate(got["losses"]):
                for j, v in enumerate(ls):
                    loss_sum[it][j] += v
            for j, v in enumerate(got["eval_losses"]):
                eval_sum[j] += v
        assert seen == set(range(S))
        assert eval_sum == pytest.approx(want_eval, rel=1e-9), f"{policy}: eval"
        for it in range(len(batches)):
            assert loss_sum[it] == pytest.approx([float(v) for v in ref_losses[it]], rel=1e-9)


def results(folder):
    out = {}
    for p in folder.glob("result*.json"):
        d = json.loads(p.read_text())
        out[d["rank"]] = d
    return out


def test_stage_exception_makes_every_rank_raise_peer_error(tmp_path):
    r = launch(4, ["--replicas", "1,1,1,1", "--policies", "1f1b", "--microbatches", "4",
                   "--fail-rank", "2", "--out", str(tmp_path)], timeout=120)
    assert r.returncode != 0
    got = results(tmp_path)
    assert set(got) == {0, 1, 2, 3}, r.stdout + r.stderr
    assert got[2]["type"] == "RuntimeError" and "injected failure on rank 2" in got[2]["message"]
    for rank in (0, 1, 3):
        assert got[rank]["type"] == "PeerError", got[rank]
        assert "failed in 2F" in got[rank]["message"], got[rank]   # the runner named it
        assert got[rank]["peer"] == 2, got[rank]
        assert "rank 2" in got[rank]["message"], got[rank]
    last = r.stderr.strip().splitlines()[-1]
    assert "rank 2" in last, r.stderr


@pytest.mark.parametrize("transport", ["ucx", "ofi"])
def test_network_transports_equal_one_device(tmp_path, transport):
    import dpl._lib
    try:
        dpl._lib.find(f"dpl-transport-{transport}")
    except FileNotFoundError as e:
        pytest.skip(f"the {transport} transport is not built: {e}")
    r = launch(2, ["--replicas", "1,1", "--policies", "1f1b", "--microbatches", "4",
                   "--out", str(tmp_path)], transport=transport)
    assert r.returncode == 0, r.stdout + r.stderr
    parts = mlp(WIDTHS, 2, torch.float64)
    ref, _ = reference(parts, data(10, WIDTHS, 3, torch.float64), 4, "sgd")
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}-1f1b.pt")
        for s, ps in got["params"].items():
            assert max_rel_diff(ps, list(ref[s].parameters())) <= 1e-10
