"""The cost of dpl's Python callback path: the same lowered 1F1B schedule
(S ranks as processes over shm, M micro-batches, stages that do nothing)
run by dpl's C runner (`dpl train --device synthetic` at 0 ms) and by
dpl.Runner with Python callbacks that do nothing, in alternating rounds.
Prints a table of the medians and writes JSON (--json).

    python benchmarks/python_callback.py [--build build] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "torch_pipelining"))
import launch  # noqa: E402  (dpl_env: the environment that imports dpl from this tree)


def c_step(build: str, S: int, M: int, iters: int) -> float:
    cmd = [os.path.join(build, "bindings", "cli", "dpl"), "train", "--stages", str(S),
           "--microbatches", str(M), "--policy", "1f1b", "--device", "synthetic",
           "--fwd-ms", "0", "--bwd-ms", "0", "--act-bytes", "8", "--batch", str(M),
           "--iterations", str(iters), "--nprocs", str(S), "--transport", "shm", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(p.stdout)
    return out["seconds"] / out["iterations"]


def py_step(build: str, S: int, M: int, iters: int) -> tuple[float, int]:
    env = launch.dpl_env(build)
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "dpl.run", "-n", str(S), "--transport", "shm",
               os.path.join(HERE, "python_callback_rank.py"), str(M), str(iters), out]
        subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=True)
        rows = []
        for r in range(S):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                rows.append(json.load(f))
    return max(r["step_s"] for r in rows), max(r["actions"] for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=32)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    c, py, actions = [], [], 0
    for rnd in range(a.rounds):
        order = ("c", "py") if rnd % 2 == 0 else ("py", "c")
        for who in order:
            if who == "c":
                c.append(c_step(a.build, a.stages, a.microbatches, a.iters))
            else:
                s, actions = py_step(a.build, a.stages, a.microbatches, a.iters)
                py.append(s)
    cm, pm = statistics.median(c), statistics.median(py)
    res = {"stages": a.stages, "microbatches": a.microbatches, "iters": a.iters,
           "rounds": a.rounds, "actions_per_rank": actions,
           "c_step_s": c, "python_step_s": py,
           "c_us_per_action": cm / actions * 1e6, "python_us_per_action": pm / actions * 1e6,
           "python_minus_c_us_per_action": (pm - cm) / actions * 1e6}
    print("| runner | us/step (median) | us/action |")
    print("|---|---|---|")
    print(f"| C (dpl train, synthetic, 0 ms) | {cm * 1e6:.1f} | {res['c_us_per_action']:.2f} |")
    print(f"| dpl.Runner, Python callbacks | {pm * 1e6:.1f} | {res['python_us_per_action']:.2f} |")
    print(f"\nPython - C: {res['python_minus_c_us_per_action']:.2f} us per action "
          f"({actions} actions per rank, S={a.stages}, M={a.microbatches})")
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
