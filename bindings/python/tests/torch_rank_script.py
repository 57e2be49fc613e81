"""One rank of a dpl.torch training run, launched by ``python -m dpl.run``:
trains each policy given on argv with ScheduleDAPPLE and saves this rank's
parameters and losses to OUT/rank<R>-<policy>.pt."""

from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import dpl.world  # noqa: E402
from dpl.torch import PipelineStage, ScheduleDAPPLE, stage_of  # noqa: E402
from torch_models import data, make_opt, mlp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", required=True)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--policies", required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--opt", default="sgd")
    ap.add_argument("--widths", default="6,16,16,12,16,10,3")
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    reps = [int(x) for x in a.replicas.split(",")]
    widths = [int(x) for x in a.widths.split(",")]
    dtype = getattr(torch, a.dtype)
    V, P = a.chunks, len(reps)
    S = P * V
    parts = mlp(widths, S, dtype)
    batches = data(a.batch, widths, a.iters, dtype)
    w = dpl.world.current()
    p, _ = stage_of(w.rank, reps)
    mine = [p + k * P for k in range(V)]
    if a.policies == "zbv":
        mine = [p, 2 * P - 1 - p]
    for policy in a.policies.split(","):
        mods = [copy.deepcopy(parts[s]) for s in mine]
        if w.rank == a.fail_rank:
            def boom(_mod, inputs, _out):
                if inputs[0].device.type != "meta":   # not in shape inference
                    raise RuntimeError(f"injected failure on rank {w.rank}")
            mods[0].register_forward_hook(boom)
        stages = [PipelineStage(m, s, S) for m, s in zip(mods, mine)]
        opts = {"cap": 1} if policy in ("bounded", "zb-auto") else {}
        sched = ScheduleDAPPLE(stages if V > 1 else stages[0], a.microbatches,
                               torch.nn.MSELoss(), replicas=reps, policy=policy, **opts)
        opt = make_opt(a.opt, [q for m in mods for q in m.parameters()])
        all_losses = []
        for x, y in batches:
            opt.zero_grad()
            losses = []
            sched.step(*((x,) if 0 in mine else ()), target=y if S - 1 in mine else None,
                       losses=losses)
            opt.step()
            all_losses.append([float(v) for v in losses])
        # a forward-only pass of the trained model on the first batch
        x, y = batches[0]
        eval_losses: list = []
        with torch.no_grad():
            sched.eval(*((x,) if 0 in mine else ()), target=y if S - 1 in mine else None,
                       losses=eval_losses)
        sched.close()
        torch.save({"params": {s: [q.detach() for q in m.parameters()] for s, m in zip(mine, mods)},
                    "losses": all_losses, "eval_losses": [float(v) for v in eval_losses]},
                   os.path.join(a.out, f"rank{w.rank}-{policy}.pt"))


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report what this rank saw, then fail
        import json
        rank = int(os.environ.get("DPL_RANK", -1))
        out = sys.argv[sys.argv.index("--out") + 1]
        with open(os.path.join(out, f"result{rank}.json"), "w") as f:
            json.dump({"rank": rank, "type": type(e).__name__, "message": str(e),
                       "peer": getattr(e, "rank", None)}, f)
        sys.exit(1)
