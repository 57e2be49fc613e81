"""dpl.torch trains exactly like single-process torch on layouts drawn at
random: pipeline depth 1-4, 1-3 replicas per pipeline rank (up to 6 ranks),
one or two stages per rank, every policy, M from 1 to 9 (M < S and M not
divisible by the replicas among them), batches not divisible by M, layer
widths and counts (a stage may hold only an activation), SGD with momentum
and Adam, the bounded policies' cap from 1 to 3.

The grids of test_torch_equality.py fix a few layouts and sweep policies;
this sweep draws the combinations those grids leave out. The draw is
seeded, so a failure names a case that reruns the same. Each case compares
every stage's parameters after two steps (f64, 1e-10 relative) and every
micro-batch loss (summed over the last stage's replicas, 1e-9) with the
reference trainer of torch_models.py, over threads (inproc transport)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

import dpl.run  # noqa: E402

from test_torch_equality import rank_fn  # noqa: E402
from torch_models import V_SHAPED, data, max_rel_diff, mlp, reference  # noqa: E402

ONE_STAGE = ["gpipe", "1f1b", "1f1b-comm", "bounded", "zb-h1", "zb-h2", "zb-auto"]
TWO_STAGES = ["interleaved", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"]
SEED = 20261207
COUNT = 120
ITERS = 2


def draw(rng: random.Random) -> dict:
    """One layout, policy, M, batch and model, as rank_fn takes them."""
    P = rng.randint(1, 4)
    reps = [rng.choice([1, 1, 2, 3]) for _ in range(P)]
    while sum(reps) > 6:
        reps[rng.randrange(P)] = 1
    V = rng.choice([1, 1, 2]) if P > 1 else 1
    policy = rng.choice(ONE_STAGE if V == 1 else TWO_STAGES)
    S = P * V
    M = rng.randint(1, 9)
    if policy == "dualpipev" and M <= 2 * P:   # its F/B pairs need M > 2P
        M = 2 * P + 1
    layers = rng.randint(max(2, (S + 1) // 2), 6)
    return {"reps": reps, "V": V, "policy": policy, "M": M,
            "batch": rng.randint(M, 16),
            "widths": [rng.randint(2, 9) for _ in range(layers + 1)],
            "opt": rng.choice(["sgd", "adam"]),
            "opts": {"cap": rng.randint(1, 3)} if policy in ("bounded", "zb-auto") else {}}


_rng = random.Random(SEED)
CASES = [draw(_rng) for _ in range(COUNT)]


def _id(c: dict) -> str:
    cap = f"-cap{c['opts']['cap']}" if c["opts"] else ""
    return (f"{c['policy']}{cap}-reps{'.'.join(map(str, c['reps']))}-V{c['V']}"
            f"-M{c['M']}-b{c['batch']}-L{len(c['widths']) - 1}-{c['opt']}")


def test_the_draw_reaches_what_the_grids_leave_out():
    """The sweep holds the combinations it exists for, not only easy ones."""
    assert {c["policy"] for c in CASES} == set(ONE_STAGE + TWO_STAGES)
    assert any(c["M"] < len(c["reps"]) * c["V"] for c in CASES)           # M < S
    assert any(any(c["M"] % r for r in c["reps"] if r > 1) for c in CASES)
    assert any(c["batch"] % c["M"] for c in CASES)
    assert any(len(set(c["reps"])) > 2 for c in CASES)                    # e.g. 3:1:2
    assert any(c["V"] == 2 and max(c["reps"]) > 1 for c in CASES)
    assert {c["opts"].get("cap") for c in CASES} >= {1, 2, 3}


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{_id(c)}" for i, c in enumerate(CASES)])
def test_random_layout_equals_one_process(case):
    reps, V, policy, M = case["reps"], case["V"], case["policy"], case["M"]
    S = len(reps) * V
    seed = CASES.index(case)
    parts = mlp(case["widths"], S, torch.float64, seed=seed)
    batches = data(case["batch"], case["widths"], ITERS, torch.float64, seed=seed + 1000)
    ref_parts, ref_losses = reference(parts, batches, M, case["opt"])
    results = dpl.run.threads(sum(reps), rank_fn, parts, batches, reps, V, policy, M,
                              case["opt"], case["opts"], timeout=60)
    seen = set()
    loss_sum = [[0.0] * M for _ in range(ITERS)]
    for params, losses in results:
        for s, ps in params.items():
            seen.add(s)
            worst = max_rel_diff(ps, list(ref_parts[s].parameters()))
            assert worst <= 1e-10, f"stage {s}: parameters differ by {worst:.3g} (relative)"
        for it, ls in enumerate(losses):
            for j, v in enumerate(ls):
                loss_sum[it][j] += float(v)
    assert seen == set(range(S))
    last_ranks = reps[0] if policy in V_SHAPED else reps[-1]
    reported = sum(len(ls) for _, L in results for ls in L)
    if M * last_ranks <= case["batch"]:   # else a replica with empty shares reports fewer
        assert reported == ITERS * M * last_ranks
    for it in range(ITERS):
        for j in range(M):
            assert loss_sum[it][j] == pytest.approx(float(ref_losses[it][j]), rel=1e-9), \
                f"step {it} micro-batch {j}"
