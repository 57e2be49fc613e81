"""DAPPLE's whole loop on one machine: profile, plan, train.

A model of 24 ``nn.TransformerEncoderLayer`` (with an input projection and
a classification head: 26 layers) is profiled layer by layer on rank 0
(``dpl.torch.profile``), planned for this machine (``dpl.plan`` on
``dpl.Cluster.host(ranks)``), and the plan is sent to every rank; each
rank builds its stage with ``dpl.torch.from_plan`` and trains a few
iterations. Rank 0 prints the plan, then the measured iteration time (the
slowest rank's) beside the plan's prediction.

Run as processes (shm transport) or as threads of one process (inproc)::

    python -m dpl.run -n 4 examples/dapple_loop.py
    python examples/dapple_loop.py --ranks 4

On a CPU host with cheap allreduce the planner picks data parallelism (one
stage on every rank); ``--device-memory 8`` (MB per rank) leaves too
little memory for the whole model on one rank and makes it pipeline.
The planner scales a profile linearly in the batch, which small
micro-batches break (fixed per-call costs), so rank 0 profiles again at
the per-replica micro-batch share the plan chose and plans again, until
the two agree (``--fixed-profile`` keeps the first plan).
The prediction assumes one core per rank: with fewer cores than ranks the
measured time is larger by about that factor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import torch

import dpl
import dpl.run
import dpl.torch
import dpl.world

_build_lock = threading.Lock()


class Head(torch.nn.Module):
    """Mean over the sequence, then a linear classifier."""

    def __init__(self, d_model: int, classes: int):
        super().__init__()
        self.fc = torch.nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=1))


def build_layers(a: argparse.Namespace) -> list[torch.nn.Module]:
    """The model as a list of layers; the same weights on every rank (the
    seed is reset under a lock, since threads share torch's generator)."""
    with _build_lock:
        torch.manual_seed(0)
        return ([torch.nn.Linear(a.features, a.d_model)]
                + [torch.nn.TransformerEncoderLayer(a.d_model, a.heads, 4 * a.d_model,
                                                    dropout=0.0, batch_first=True)
                   for _ in range(a.layers)]
                + [Head(a.d_model, a.classes)])


def data(a: argparse.Namespace, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable synthetic task: the class is the feature with the
    largest mean over the sequence."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, a.seq, a.features, generator=g)
    return x, x[:, :, :a.classes].mean(dim=1).argmax(dim=-1)


def share(plan: dpl.Plan) -> int:
    """Samples one replica computes per micro-batch (the smallest share
    over the stages, rounded up): the batch the profile should be at."""
    return max(1, min(-(-plan.microbatch_size // r) for r in plan.replicas))


def plan_at_share(a: argparse.Namespace, layers: list, cluster: dpl.Cluster, say) -> dpl.Plan:
    """Profile at --pbs, plan; then, while the plan's per-replica share of a
    micro-batch differs from the batch profiled at, profile again at that
    share and plan again (at most 3 rounds). A layer's time is not linear
    in its batch (fixed per-call costs dominate small batches: 1.8 ms for
    one sample against 0.53 ms per sample at 8 for one of these layers
    here), and the planner scales the profile linearly, so its prediction
    only holds at the batch it profiled. Returns the last plan."""
    pbs, seen = a.pbs, set()
    for rnd in range(3):
        x, _ = data(a, pbs)
        t = time.perf_counter()
        prof = dpl.torch.profile(layers, x, iterations=a.profile_iterations,
                                 path=a.profile_out, name="transformer")
        say(f"profiled {len(prof)} layers at batch {pbs} in {time.perf_counter() - t:.1f} s")
        plan = dpl.plan(prof, cluster, pbs=pbs, gbs=a.gbs, optimizer_factor=2, divisible=True)
        seen.add(pbs)
        if a.fixed_profile or share(plan) == pbs:
            return plan
        if share(plan) in seen:
            say(f"plan rounds cycle: the plan made at batch {pbs} has shares of "
                f"{share(plan)}, profiled before; keeping it")
            return plan
        say(f"plan round {rnd + 1}: micro-batches of {plan.microbatch_size} make shares of "
            f"{share(plan)} samples per replica; profiling again at that batch")
        pbs = share(plan)
    return plan


def rank_main(a: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    w = dpl.world.current(timeout=a.timeout)
    layers = build_layers(a)
    say = print if w.rank == 0 else (lambda *x, **k: None)

    # 1-2. profile and plan on rank 0; every rank gets the plan file's text
    text = b""
    if w.rank == 0:
        mem = a.device_memory * 1e6 if a.device_memory else None
        cluster = dpl.Cluster.host(w.world_size, device_memory=mem)
        plan = plan_at_share(a, layers, cluster, say)
        if a.plan_out:
            plan.save(a.plan_out)
        text = plan.to_json().encode()
    plan = dpl.Plan.parse(w.allgather(text)[0].decode(), "rank 0's plan")
    say(plan, "\n")
    if sum(plan.replicas) != w.world_size:
        say(f"the plan uses {sum(plan.replicas)} of {w.world_size} ranks; run with "
            f"-n {sum(plan.replicas)}")
        return

    # 3. this rank's stage, trained
    loss_fn = torch.nn.CrossEntropyLoss()
    stage, sched = dpl.torch.from_plan(plan, layers, loss_fn, world=w)
    opt = torch.optim.Adam(stage.submod.parameters(), lr=a.lr)
    x, y = data(a, a.gbs)
    rows = []
    for it in range(a.iterations):
        losses: list = []
        w.barrier()
        t = time.perf_counter()
        opt.zero_grad()
        sched.step(*((x,) if stage.is_first else ()),
                   target=y if stage.is_last else None,
                   losses=losses if stage.is_last else None)
        opt.step()
        rows.append((time.perf_counter() - t, float(sum(float(v) for v in losses))))
    sched.close()

    # 4. predicted vs measured: the slowest rank per iteration
    every = [json.loads(b) for b in w.allgather(json.dumps(rows).encode())]
    say(f"{'iteration':>9} {'measured ms':>12} {'predicted ms':>13} {'ratio':>6} {'loss':>8}")
    measured = []
    for it in range(a.iterations):
        ms = max(r[it][0] for r in every) * 1e3
        loss = sum(r[it][1] for r in every) / plan.microbatches
        measured.append(ms)
        note = "  (includes setup)" if it == 0 else ""
        say(f"{it:>9} {ms:>12.1f} {plan.predicted_ms:>13.1f} {ms / plan.predicted_ms:>6.2f} "
            f"{loss:>8.4f}{note}")
    if a.iterations > 1:
        med = statistics.median(measured[1:])
        say(f"\nmedian of iterations 1..{a.iterations - 1}: measured {med:.1f} ms, "
            f"predicted {plan.predicted_ms:.1f} ms ({med / plan.predicted_ms:.2f}x)")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores and cores < w.world_size:
        say(f"note: {w.world_size} ranks share {cores} cores here; the plan assumes one "
            "device per rank")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=0,
                    help="run N ranks as threads of this process (inproc); default: this "
                         "process is one rank of a job started by python -m dpl.run")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--gbs", type=int, default=64, help="global batch (samples per iteration)")
    ap.add_argument("--pbs", type=int, default=8, help="batch to profile at first")
    ap.add_argument("--fixed-profile", action="store_true",
                    help="plan from the --pbs profile only (no re-profiling at the planned "
                         "per-replica micro-batch share)")
    ap.add_argument("--layers", type=int, default=24, help="transformer layers")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--device-memory", type=float, default=0,
                    help="MB per rank for the planner (default: physical memory / ranks)")
    ap.add_argument("--profile-iterations", type=int, default=10)
    ap.add_argument("--profile-out", default=None, help="also write the profile here")
    ap.add_argument("--plan-out", default=None, help="also write the plan file here")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds any rank waits for the others")
    a = ap.parse_args()
    if a.ranks:
        dpl.run.threads(a.ranks, rank_main, a, timeout=a.timeout + 60)
    else:
        rank_main(a)


if __name__ == "__main__":
    main()
