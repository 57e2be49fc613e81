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

from test_torch_equality import CHUNKED, POLICIES, train_and_compare  # noqa: E402
from torch_models import data, mlp  # noqa: E402

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
    policy = rng.choice(POLICIES if V == 1 else CHUNKED)
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
    assert {c["policy"] for c in CASES} == set(POLICIES + CHUNKED)
    assert any(c["M"] < len(c["reps"]) * c["V"] for c in CASES)           # M < S
    assert any(any(c["M"] % r for r in c["reps"] if r > 1) for c in CASES)
    assert any(c["batch"] % c["M"] for c in CASES)
    assert any(len(set(c["reps"])) > 2 for c in CASES)                    # e.g. 3:1:2
    assert any(c["V"] == 2 and max(c["reps"]) > 1 for c in CASES)
    assert {c["opts"].get("cap") for c in CASES} >= {1, 2, 3}


@pytest.mark.parametrize("seed,case", list(enumerate(CASES)),
                         ids=[f"{i}-{_id(c)}" for i, c in enumerate(CASES)])
def test_random_layout_equals_one_process(seed, case):
    reps, V, M = case["reps"], case["V"], case["M"]
    worst, seen = train_and_compare(
        mlp(case["widths"], len(reps) * V, torch.float64, seed=seed),
        data(case["batch"], case["widths"], ITERS, torch.float64, seed=seed + 1000),
        reps, V, case["policy"], M, case["opt"], case["opts"], 1e-9)
    assert seen == set(range(len(reps) * V))
    assert worst <= 1e-10, f"parameters differ by {worst:.3g} (relative)"
