"""One rank of benchmarks/python_callback.py: dpl.Runner with Python stage
callbacks that do nothing, on lowered 1F1B over the job's transport;
writes this rank's seconds per step to OUT/rank<R>.json."""

from __future__ import annotations

import json
import sys
import time

import dpl
import dpl.world
from dpl.runner import Runner


class Noop:
    def forward(self, a):
        pass

    def backward(self, a):
        pass

    def grads(self, stage):
        return []

    def step(self, stage, iteration):
        pass


def main() -> None:
    M, iters, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    w = dpl.world.current()
    sched = dpl.schedule("1f1b", w.world_size, M).lower()
    with dpl.world.Transport.open(w) as t:
        r = Runner(sched, Noop(), batch=M, activation_bytes=[8] * w.world_size,
                   rank=w.rank, transport=t)
        for _ in range(5):
            r.step()
        w.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            r.step()
        dt = (time.perf_counter() - t0) / iters
        n = len(sched.lists()[w.rank])
        r.close()
    with open(f"{out}/rank{w.rank}.json", "w") as f:
        json.dump({"rank": w.rank, "step_s": dt, "actions": n}, f)


if __name__ == "__main__":
    main()
