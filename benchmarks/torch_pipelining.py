#!/usr/bin/env python3
"""dpl.torch against torch.distributed.pipelining on the same models.

Each case trains the same nn.Module, split into 4 stages (--ranks), once
per round on each side, the sides alternating (A B, then B A, ...):

- PyTorch: PipelineStage + Schedule1F1B / ScheduleGPipe over gloo on
  127.0.0.1, 4 rank processes started by torchrun (python -m
  torch.distributed.run, static rendezvous) or, with --torch-launcher
  spawn, by this script;
- dpl: dpl.torch's PipelineStage + Schedule1F1B / ScheduleGPipe over shm,
  4 rank processes started by python -m dpl.run -n 4.

Every rank runs torch.set_num_threads(1); with --bind core or fold every
rank of both sides pins itself to one CPU by the same rule (python -m
dpl.run --bind's). Cases: (a) MLP 16,64x7,4,
batch 64, M=32 (f32 1F1B, f32 GPipe, f64 1F1B); (b) MLP 16,1024x7,4,
batch 256, M=8, f32 1F1B; (c) 8 nn.TransformerEncoderLayer (d_model 256,
4 heads, feed-forward 1024, no dropout, batch_first, sequence 64), batch 16,
M=8, f32 1F1B. A step is the schedule's step, an SGD step and zero_grad.

Reported per side (worker.py says how each is taken):
- samples/s: batch x timed steps / the slowest rank's seconds for them,
  after the first step and --warmup more; median over rounds (range);
- peak RSS: ru_maxrss of each rank process, the largest over ranks (MiB);
- forward-only passes: after the timed steps, one untimed and then as
  many timed `eval()` calls under `torch.no_grad()` as timed steps;
  batch x passes / the slowest rank's seconds, median (range), and their
  ratio (a table of its own);
- start-up: from the launcher's time stamp just before it starts the
  launch command until the last rank is ready to step (process started,
  torch imported, process group or dpl world joined where the library does
  it up front, stage and schedule constructed); median over rounds;
- first step: the first step's seconds (lazy set-up: shape inference,
  buffers, connections), the slowest rank; launch to first step done:
  from the same launch stamp until the last rank has finished its first
  step (start-up plus the first step, whatever each library defers);
the involuntary context switches per step of all ranks (how often a rank
with work lost its core), and the ratios dpl / PyTorch. With --base
BUILD, a third side runs dpl's package against that build tree's
libraries (an A/B of two dpl revisions, alternating with the others in
every round) and a row dpl/base follows. Also per case (unless --no-serial), once a
round in this process: the case's torch work alone (every stage's
forward, backward and SGD step, one thread, no pipeline), its CPU per
step, and the ceiling it sets: batch x min(ranks, CPUs) / that CPU time,
the samples/s neither side can pass on this host; and each stage's work
in its own process, all --ranks of them at once (stage_work.py: the
same forward, backward and SGD step on inputs made up front, no
transfers, no waits, pinned as the ranks are), their CPU per step
together and batch x min(ranks, CPUs) / that: the ceiling once the
processes share the CPUs, which costs each of them cache and switches
even with no pipeline.

Callback cost: the same 1F1B schedule over --cb-stages ranks with stages
that multiply by one scalar parameter, one sample of two values per
micro-batch, run through dpl.torch (python -m dpl.run, shm) and through
dpl's C runner (dpl train --device synthetic --fwd-ms 0 --bwd-ms 0, shm,
--nprocs); per action = seconds per step / the actions on the busiest
rank's lowered list; reported: Python - C in microseconds (PyTorch's
per-action time on the same tiny model alongside, and the torch work of
both stages done in one thread with no pipeline: how much of the Python
path is torch's own forward and autograd).

Usage:
  python benchmarks/torch_pipelining.py [--cases a,b,c] [--rounds N]
      [--iters N] [--warmup N] [--sides torch,dpl] [--bind none|core|fold]
      [--base BUILD] [--json PATH] [--quick] [--no-serial]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch_pipelining"))

import launch  # noqa: E402
import models  # noqa: E402



def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _summary(runs: list[launch.RunResult], batch: int) -> dict:
    sps = [batch * r.iters / r.seconds for r in runs]
    ev = [batch * r.iters / r.extra["eval_s"] for r in runs if r.extra.get("eval_s")]
    return {"samples_s": sps, "samples_s_median": _med(sps),
            "eval_samples_s": ev, "eval_samples_s_median": _med(ev),
            "startup_s": [r.startup_s for r in runs],
            "startup_s_median": _med([r.startup_s for r in runs]),
            "to_first_step_s": [r.to_first_step_s for r in runs],
            "to_first_step_s_median": _med([r.to_first_step_s for r in runs]),
            "first_step_s": [r.first_step_s for r in runs],
            "first_step_s_median": _med([r.first_step_s for r in runs]),
            "cpu_s_per_step": _med([sum(r.extra["cpu_s"]) / r.iters
                                    for r in runs]),
            # [voluntary, involuntary] context switches per step, all ranks
            "switches_per_step": [_med([sum(x[k] for x in r.extra["switches"])
                                        / r.iters for r in runs]) for k in (0, 1)],
            "script_started_s_median": _med([r.extra["main_s"] for r in runs]),
            "imported_s_median": _med([r.extra["imported_s"] for r in runs]),
            "peak_rss_mib": max(max(r.maxrss_kib) for r in runs) / 1024.0,
            "rss_mib_per_rank": [[k / 1024.0 for k in r.maxrss_kib] for r in runs]}


# a ratio's name: the _summary() field it divides
_RATIO_OF = {"samples_s": "samples_s_median", "cpu": "cpu_s_per_step",
             "eval_samples_s": "eval_samples_s_median",
             "peak_rss": "peak_rss_mib", "startup": "startup_s_median",
             "first_step": "first_step_s_median",
             "to_first_step": "to_first_step_s_median"}


def _ratios(num: dict, den: dict, names) -> dict:
    """num / den of two sides' summaries for each ratio name."""
    return {k: num[_RATIO_OF[k]] / den[_RATIO_OF[k]] for k in names}


def bench_cases(args, sides: list[str]) -> list[dict]:
    """Run every case, sides alternating per round; returns one row each."""
    rows = []
    names = [n for g in args.cases for n in models.GROUPS[g]]
    for name in names:
        case = models.CASES[name]
        iters = args.iters or case.iters
        runs: dict[str, list[launch.RunResult]] = {s: [] for s in sides}
        errors: dict[str, str] = {}
        load, serial, shared = [], [], []
        for rnd in range(args.rounds):
            load.append(os.getloadavg()[0])
            if not args.no_serial:
                serial.append(models.serial_cpu_seconds(case, args.ranks, iters))
                try:
                    if "work" not in errors:
                        shared.append(launch.stage_work(
                            name, args.ranks, iters, args.timeout, args.bind))
                except launch.RunError as e:
                    errors["work"] = str(e)
                    print(f"# {name} stage work failed: {str(e)[:2000]}",
                          file=sys.stderr)
            order = sides if rnd % 2 == 0 else list(reversed(sides))
            for side in order:
                if side in errors:
                    continue
                try:
                    runs[side].append(launch.run(
                        "dpl" if side == "base" else side, name, args.ranks,
                        iters, args.warmup, args.timeout,
                        torch_launcher=args.torch_launcher,
                        build=args.base if side == "base" else args.build,
                        worker_args=("--bind", args.bind)))
                except launch.RunError as e:
                    errors[side] = str(e)
                    print(f"# {name} {side} failed: {str(e)[:2000]}",
                          file=sys.stderr)
            print(f"# {name} round {rnd + 1}/{args.rounds} done",
                  file=sys.stderr)
        row = {"case": name, "kind": case.kind, "schedule": case.schedule,
               "dtype": case.dtype, "batch": case.batch,
               "microbatches": case.microbatches, "iters": iters,
               "errors": errors, "loadavg_1min_per_round": load}
        if serial:
            cpus = min(args.ranks, len(os.sched_getaffinity(0)))
            row["serial_cpu_s_per_step"] = _med(serial)
            row["ceiling_samples_s"] = case.batch * cpus / _med(serial)
            row["ceiling_cpus"] = cpus
        if shared:  # only with serial: every stage's CPU per step, CPUs shared
            cpu = _med([sum(w["cpu_s"] for w in r) for r in shared])
            row["shared_cpu_s_per_step"] = cpu
            row["shared_procs"] = args.ranks
            row["shared_ceiling_samples_s"] = case.batch * cpus / cpu
        for side in sides:
            if runs[side]:
                row[side] = _summary(runs[side], case.batch)
        if all(s in row for s in ("torch", "dpl")):
            row["ratio"] = _ratios(row["dpl"], row["torch"], _RATIO_OF)
        if all(s in row for s in ("base", "dpl")):
            row["ratio_base"] = _ratios(row["dpl"], row["base"],
                                        ("samples_s", "cpu", "peak_rss"))
        rows.append(row)
    return rows


def actions_per_rank(stages: int, microbatches: int) -> tuple[int, str]:
    """Actions on the busiest rank of lowered 1F1B, from dpl.schedule when
    it imports (else counted by hand: F, B and the transfers)."""
    try:
        sys.path.insert(0, os.path.join(launch.REPO, "bindings", "python",
                                        "src"))
        os.environ.update({k: v for k, v in
                           launch.dpl_env(os.path.join(launch.REPO, "build"))
                           .items() if k == "DPL_LIBRARY_PATH"})
        from dpl.schedule import schedule
        with schedule("1f1b", stages, microbatches) as s, s.lower() as low:
            return max(len(x) for x in low.lists()), "dpl.schedule"
    except Exception as e:  # noqa: BLE001 - the fallback says why
        per = 2 * microbatches * (3 if stages > 2 else 2)
        return per, f"counted by hand ({type(e).__name__})"


def c_runner(args, stages: int, microbatches: int, iters: int) -> float:
    """Seconds per step of dpl's C runner on the callback case."""
    exe = os.path.join(args.build, "bindings", "cli", "dpl")
    cmd = [exe, "train", "--stages", str(stages), "--microbatches",
           str(microbatches), "--policy", "1f1b", "--device", "synthetic",
           "--fwd-ms", "0", "--bwd-ms", "0", "--act-bytes", "8", "--batch",
           str(microbatches), "--iterations", str(iters), "--nprocs",
           str(stages), "--transport", "shm", "--timeout",
           str(int(args.timeout)), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       timeout=args.timeout + 10)
    if p.returncode != 0:
        raise launch.RunError(f"{' '.join(cmd)}: status {p.returncode}\n"
                              f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    out = json.loads(p.stdout)
    return out["seconds"] / out["iterations"]


def bench_callback(args, sides: list[str]) -> dict:
    """Per-action cost of dpl.torch's Python path over the C runner."""
    S, M, n = args.cb_stages, args.cb_microbatches, args.cb_iters
    per, how = actions_per_rank(S, M)
    res: dict = {"stages": S, "microbatches": M, "iters": n,
                 "actions_busiest_rank": per, "actions_from": how,
                 "step_s": {"c": [], "dpl": [], "torch": []}, "errors": {}}
    wargs = ("--tiny-microbatches", str(M))
    res["step_s"]["ops"] = []
    order = ["c", "ops"] + [s for s in ("dpl", "torch") if s in sides]
    for rnd in range(args.rounds):
        for who in (order if rnd % 2 == 0 else list(reversed(order))):
            if who in res["errors"]:
                continue
            try:
                if who == "c":
                    res["step_s"]["c"].append(c_runner(args, S, M, n))
                elif who == "ops":
                    res["step_s"]["ops"].append(
                        models.tiny_ops_seconds(S, M, n))
                else:
                    r = launch.run(who, "tiny", S, n, 5, args.timeout,
                                   torch_launcher=args.torch_launcher,
                                   build=args.build, worker_args=wargs)
                    res["step_s"][who].append(r.seconds / r.iters)
            except (launch.RunError, subprocess.TimeoutExpired, OSError,
                    KeyError, ValueError) as e:
                res["errors"][who] = str(e)[:4000]
                print(f"# callback {who} failed: {str(e)[:2000]}",
                      file=sys.stderr)
        print(f"# callback round {rnd + 1}/{args.rounds} done",
              file=sys.stderr)
    us = {k: _med(v) / per * 1e6 for k, v in res["step_s"].items() if v}
    res["us_per_action"] = us
    if "dpl" in us and "c" in us:
        res["python_minus_c_us"] = us["dpl"] - us["c"]
    return res


def _fmt(x: float, nd: int = 0) -> str:
    return "-" if x != x else f"{x:,.{nd}f}"


def print_tables(rows: list[dict], cb: dict | None, sides: list[str]) -> None:
    """Markdown tables of the cases and of the callback cost."""
    if rows:
        _print_cases(rows, sides)
    if cb:
        _print_callback(cb)


# how the tables name each side
_LABEL = {"torch": "PyTorch", "dpl": "dpl", "base": "dpl, --base build"}


def _print_cases(rows: list[dict], sides: list[str]) -> None:
    """The cases' table, one row per side and one of ratios."""
    print("| case | schedule | dtype | side | samples/s median (range) | "
          "CPU ms/step, all ranks | involuntary switches/step | peak RSS MiB "
          "| start-up s | first step s | launch to first step done s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for side in sides:
            s = r.get(side)
            label = _LABEL[side]
            if s is None:
                err = r["errors"].get(side, "not run")
                print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | "
                      f"{label} | failed: {err.splitlines()[0][:60]} | | | | | | |")
                continue
            sps = s["samples_s"]
            print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | {label} "
                  f"| {_fmt(s['samples_s_median'])} ({_fmt(min(sps))}-"
                  f"{_fmt(max(sps))}) | {_fmt(s['cpu_s_per_step'] * 1e3, 1)} | "
                  f"{_fmt(s['switches_per_step'][1])} | "
                  f"{_fmt(s['peak_rss_mib'])} | "
                  f"{_fmt(s['startup_s_median'], 2)} | "
                  f"{_fmt(s['first_step_s_median'], 3)} | "
                  f"{_fmt(s['to_first_step_s_median'], 2)} |")
        if "ceiling_samples_s" in r:
            print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | "
                  f"work alone on {r['ceiling_cpus']} CPUs (ceiling) | "
                  f"{_fmt(r['ceiling_samples_s'])} | "
                  f"{_fmt(r['serial_cpu_s_per_step'] * 1e3, 1)} | | | | | |")
        if "shared_ceiling_samples_s" in r:
            print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | "
                  f"stages' work, {r['shared_procs']} processes at once "
                  f"(ceiling, CPUs shared) | "
                  f"{_fmt(r['shared_ceiling_samples_s'])} | "
                  f"{_fmt(r['shared_cpu_s_per_step'] * 1e3, 1)} | | | | | |")
        if "ratio" in r:
            q = r["ratio"]
            print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | "
                  f"dpl/PyTorch | {q['samples_s']:.2f} | {q['cpu']:.2f} | | "
                  f"{q['peak_rss']:.2f} "
                  f"| {q['startup']:.2f} | {q['first_step']:.2f} | "
                  f"{q['to_first_step']:.2f} |")
        if "ratio_base" in r:
            q = r["ratio_base"]
            print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | "
                  f"dpl/base | {q['samples_s']:.2f} | {q['cpu']:.2f} | | "
                  f"{q['peak_rss']:.2f} | | | |")
    ev = [r for r in rows if any(r.get(side, {}).get("eval_samples_s")
                                 for side in sides)]
    if ev:
        print("\nForward-only passes (`eval()` under `torch.no_grad()`, after the "
              "timed steps), samples/s median (range):\n")
        print("| case | schedule | dtype | " + " | ".join(_LABEL[s] for s in sides)
              + (" | dpl/PyTorch |" if "ratio" in ev[0] else " |"))
        print("|---|---|---|" + "---|" * (len(sides) + ("ratio" in ev[0])))
        for r in ev:
            cells = []
            for side in sides:
                e = r.get(side, {}).get("eval_samples_s") or []
                cells.append(f"{_fmt(_med(e))} ({_fmt(min(e))}-{_fmt(max(e))})"
                             if e else "")
            q = f" | {r['ratio']['eval_samples_s']:.2f}" if "ratio" in r else ""
            print(f"| {r['case']} | {r['schedule']} | {r['dtype']} | "
                  + " | ".join(cells) + q + " |")
    loads = [x for r in rows for x in r.get("loadavg_1min_per_round", [])]
    if loads:
        print(f"\n1-minute load average at the rounds' starts: "
              f"{min(loads):.1f}-{max(loads):.1f} (on {os.cpu_count()} CPUs)")


def _print_callback(cb: dict) -> None:
    """The callback-cost table."""
    print()
    print(f"Callback cost: 1F1B, S={cb['stages']}, M={cb['microbatches']}"
          f", {cb['actions_busiest_rank']} actions on the busiest rank "
          f"({cb['actions_from']}), {cb['iters']} steps per run")
    print()
    print("| path | us/step median | us/action |")
    print("|---|---|---|")
    names = {"c": "dpl C runner (dpl train, synthetic)",
             "dpl": "dpl.torch (Python callbacks)",
             "torch": "torch.distributed.pipelining",
             "ops": "torch ops alone (both stages, one thread)"}
    for k in ("c", "dpl", "torch", "ops"):
        v = cb["step_s"].get(k)
        if v:
            print(f"| {names[k]} | {_fmt(_med(v) * 1e6, 1)} | "
                  f"{cb['us_per_action'][k]:.2f} |")
        elif k in cb["errors"]:
            print(f"| {names[k]} | failed | |")
    if "python_minus_c_us" in cb:
        print(f"\nPython - C per action: {cb['python_minus_c_us']:.2f} us")


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the cases and the callback cost, print, write JSON."""
    p = argparse.ArgumentParser(
        description="dpl.torch against torch.distributed.pipelining",
        epilog="Cases: a (MLP 16,64x7,4; f32 1F1B, f32 GPipe, f64 1F1B), "
               "b (MLP 16,1024x7,4), c (8 TransformerEncoderLayers).")
    p.add_argument("--cases", default="a,b,c",
                   help="comma-separated groups among a, b, c; 'none' to "
                        "run only the callback cost")
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating rounds per case (default 5)")
    p.add_argument("--iters", type=int, default=0,
                   help="timed steps per run (default: per case, 20/5/3)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed steps after the first (default 2)")
    p.add_argument("--ranks", type=int, default=4,
                   help="stages = rank processes per case (default 4; the "
                        "models have 8 layers: 1, 2, 4 or 8)")
    p.add_argument("--sides", default="torch,dpl",
                   help="which libraries to run (default torch,dpl)")
    p.add_argument("--torch-launcher", choices=("torchrun", "spawn"),
                   default="torchrun")
    p.add_argument("--bind", choices=("none", "core", "fold"), default="none",
                   help="pin every rank of both sides to one CPU: core = rank mod "
                        "CPUs, fold = ranks r and N-1-r together (default none)")
    p.add_argument("--no-serial", action="store_true",
                   help="skip each case's torch work alone, in this process "
                        "and in one process per stage (the ceiling rows)")
    p.add_argument("--no-callback", action="store_true",
                   help="skip the callback-cost measurement")
    p.add_argument("--cb-stages", type=int, default=2)
    p.add_argument("--cb-microbatches", type=int, default=32)
    p.add_argument("--cb-iters", type=int, default=200)
    p.add_argument("--timeout", type=float, default=300.0,
                   help="bound on one launch, seconds (default 300)")
    p.add_argument("--build", default=os.path.join(launch.REPO, "build"),
                   help="dpl build tree (default <repo>/build)")
    p.add_argument("--base", metavar="BUILD",
                   help="another dpl build tree to run as side 'base' beside "
                        "--build's (same Python package, its libraries), "
                        "alternating with the other sides, with a dpl/base row")
    p.add_argument("--json", metavar="PATH", help="write the results here")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 round, 2 timed steps, 1 warm-up, "
                        "20 callback steps")
    a = p.parse_args(argv)
    if a.quick:
        a.rounds, a.iters, a.warmup, a.cb_iters = 1, 2, 1, 20
    a.cases = [] if a.cases == "none" else a.cases.split(",")
    for c in a.cases:
        if c not in models.GROUPS:
            p.error(f"unknown case {c!r} (choose among a, b, c)")
    sides = a.sides.split(",")
    for s in sides:
        if s not in ("torch", "dpl", "base"):
            p.error(f"unknown side {s!r} (torch, dpl, base)")
    if a.base is not None:
        if not os.path.isdir(a.base):
            p.error(f"--base {a.base!r}: no such build tree")
        if "base" not in sides:
            sides.append("base")
    elif "base" in sides:
        p.error("side 'base' needs --base BUILD")
    if a.ranks not in (1, 2, 4, 8):
        p.error(f"--ranks must be 1, 2, 4 or 8 (got {a.ranks})")
    if a.rounds < 1:
        p.error(f"--rounds must be >= 1 (got {a.rounds})")
    import torch
    t0 = time.time()
    rows = bench_cases(a, sides)
    cb = None if a.no_callback else bench_callback(a, sides)
    print_tables(rows, cb, sides)
    if a.json:
        doc = {"command": " ".join([os.path.basename(sys.executable)]
                                   + sys.argv),
               "bind": a.bind, "base": a.base,
               "machine": {"platform": platform.platform(),
                           "cpus": os.cpu_count(),
                           "python": platform.python_version(),
                           "torch": torch.__version__},
               "ranks": a.ranks, "rounds": a.rounds, "warmup": a.warmup,
               "torch_launcher": a.torch_launcher,
               "seconds": time.time() - t0, "cases": rows, "callback": cb}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    failed = any(r["errors"] for r in rows) or (cb and cb["errors"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
