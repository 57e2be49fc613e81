"""dpl.torch trains exactly like single-process torch: every policy on
pipelines, data parallelism, both together and uneven replication, with
micro-batch counts below the stage count and not divisible by the
replicas; SGD and Adam; f64 to 1e-10 and f32 to 1e-5 (relative)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, ScheduleDAPPLE  # noqa: E402

from torch_models import (V_SHAPED, data, make_opt, max_rel_diff, mlp,  # noqa: E402
                          reference, stages_of_rank)

WIDTHS = [6, 16, 16, 12, 16, 10, 3]
ITERS = 3
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

# (name, replicas per pipeline rank, stages per rank)
LAYOUTS = {
    "pipeline": ([1, 1, 1, 1], 1),
    "data": ([2], 1),
    "pipeline-x-data": ([2, 2], 1),
    "uneven-3-1": ([3, 1], 1),
}
POLICIES = ["gpipe", "1f1b", "1f1b-comm", "bounded", "zb-h1", "zb-h2", "zb-auto"]


def policy_options(policy):
    return {"cap": 1} if policy in ("bounded", "zb-auto") else {}


def rank_fn(parts, batches, reps, V, policy, M, opt_name, opts):
    mine = stages_of_rank(policy, reps, V, dpl.world.current().rank)
    mods = [copy.deepcopy(parts[s]) for s in mine]
    stages = [PipelineStage(m, s, len(parts)) for m, s in zip(mods, mine)]
    sched = ScheduleDAPPLE(stages if V > 1 else stages[0], M, torch.nn.MSELoss(),
                           replicas=reps, policy=policy, **opts)
    params = [q for m in mods for q in m.parameters()]
    opt = make_opt(opt_name, params) if params else None   # a stage may hold only a Tanh
    got_losses = []
    try:
        for x, y in batches:
            if opt is not None:
                opt.zero_grad()
            losses = []
            args = (x,) if 0 in mine else ()
            target = y if len(parts) - 1 in mine else None
            out = sched.step(*args, target=target, losses=losses)
            if out is not None:   # None on a replica whose shares are all empty
                assert target is not None and out.shape[1] == y.shape[1]
            if opt is not None:
                opt.step()
            got_losses.append(losses)
    finally:
        sched.close()
    return {s: list(m.parameters()) for s, m in zip(mine, mods)}, got_losses


def train_and_compare(parts, batches, reps, V, policy, M, opt_name, opts, loss_rel):
    """Train ``parts`` on ``batches`` through dpl.torch over threads
    (:func:`rank_fn`) and in one process (``reference``). Asserts that the
    micro-batch losses, summed over the last stage's replicas, match to
    ``loss_rel`` and that every replica with a share reported its losses.
    Returns the largest relative difference of any stage's parameters
    and the set of stages the ranks returned."""
    iters, batch = len(batches), batches[0][0].shape[0]
    ref_parts, ref_losses = reference(parts, batches, M, opt_name)
    results = dpl.run.threads(sum(reps), rank_fn, parts, batches, reps, V, policy, M,
                              opt_name, opts, timeout=120)
    worst, seen = 0.0, set()
    loss_sum = [[0.0] * M for _ in range(iters)]
    for params, losses in results:
        for s, ps in params.items():
            seen.add(s)
            worst = max(worst, max_rel_diff(ps, list(ref_parts[s].parameters())))
        for it, ls in enumerate(losses):
            for j, v in enumerate(ls):
                loss_sum[it][j] += float(v)
    last_ranks = reps[0] if policy in V_SHAPED else reps[-1]   # V: rank 0 holds the last stage
    assert sum(len(ls) for _, L in results for ls in L) == iters * M * last_ranks or \
        M * last_ranks > batch  # a replica with empty shares reports fewer
    for it in range(iters):
        for j in range(M):
            assert loss_sum[it][j] == pytest.approx(float(ref_losses[it][j]), rel=loss_rel), \
                f"step {it} micro-batch {j}"
    return worst, seen


def run_threads(layout, policy, M, dtype, opt_name, batch=10):
    reps, V = LAYOUTS[layout]
    S = len(reps) * V
    worst, _ = train_and_compare(mlp(WIDTHS, S, dtype), data(batch, WIDTHS, ITERS, dtype),
                                 reps, V, policy, M, opt_name, policy_options(policy),
                                 TOL[dtype] * 10)
    return worst


CASES = []
for layout, (reps, V) in LAYOUTS.items():
    S = len(reps) * V
    R = max(reps)
    # M < S where the layout has S > 1, and M not divisible by the replicas
    ms = sorted({m for m in (S - 1 if S > 2 else 2, 3 if R == 2 else 5) if m >= 1})
    for policy in POLICIES:
        for M in ms:
            CASES.append((layout, policy, M))


@pytest.mark.parametrize("layout,policy,M", CASES)
def test_threads_f64_equals_one_device(layout, policy, M):
    for opt_name in ("sgd", "adam"):
        worst = run_threads(layout, policy, M, torch.float64, opt_name)
        assert worst <= 1e-10, f"{layout} {policy} M={M} {opt_name}: max rel diff {worst:.3g}"


@pytest.mark.parametrize("policy", POLICIES)
def test_threads_f32_equals_one_device(policy):
    worst = run_threads("uneven-3-1", policy, 5, torch.float32, "adam")
    assert worst <= 1e-5, f"{policy}: max rel diff {worst:.3g}"


# two stages per rank on the same replica layouts, with M below the stage
# count and M not divisible by the replicas
CHUNKED = ["interleaved", "looped-bfs", "interleaved-zb", "zbv", "dualpipev"]
CHUNKED_CASES = [(layout, policy, M) for layout, (reps, _) in LAYOUTS.items()
                 for policy in CHUNKED
                 for M in sorted({max(1, 2 * len(reps) - 1), 3 if max(reps) == 2 else 5}
                                 # dualpipev's steady state (F/B pairs) needs M > 2P
                                 | ({2 * len(reps) + 1} if policy == "dualpipev" else set()))]


@pytest.mark.parametrize("layout,policy,M", CHUNKED_CASES)
def test_two_stages_per_rank_equal_one_device(layout, policy, M):
    reps, _ = LAYOUTS[layout]
    LAYOUTS["_v2"] = (reps, 2)
    try:
        for opt_name in ("sgd", "adam"):
            worst = run_threads("_v2", policy, M, torch.float64, opt_name)
            assert worst <= 1e-10, f"{layout} {policy} M={M} {opt_name}: {worst:.3g}"
    finally:
        del LAYOUTS["_v2"]


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 3e-2), (torch.float16, 4e-3)])
def test_half_precision_replicas_reduce_through_dpl(dtype, tol):
    """bf16/f16 parameters on replicated stages: dpl sums their gradients
    (every replica ends with the same bits) and training follows the f32
    reference within the format's precision."""
    reps = [2, 1]
    parts32 = mlp(WIDTHS, 2, torch.float32)
    batches32 = data(8, WIDTHS, 2, torch.float32)
    parts = [copy.deepcopy(p).to(dtype) for p in parts32]
    batches = [(x.to(dtype), y.to(dtype)) for x, y in batches32]
    ref_parts, _ = reference(parts32, batches32, 4, "sgd")
    results = dpl.run.threads(3, rank_fn, parts, batches, reps, 1, "1f1b", 4, "sgd", {},
                              timeout=120)
    a, b = results[0][0][0], results[1][0][0]
    for p, q in zip(a, b):
        assert torch.equal(p, q)
    for params, _ in results:
        for s, ps in params.items():
            worst = max_rel_diff([p.float() for p in ps], list(ref_parts[s].parameters()))
            assert worst <= tol, f"stage {s}: {worst:.3g}"
            assert all(p.dtype == dtype for p in ps)
