"""Start one benchmark run (all ranks of one side) and collect its results.

A run is one launch of N rank processes through the side's own launcher:
PyTorch through torchrun (python -m torch.distributed.run, static
rendezvous on 127.0.0.1) or a plain spawn of N processes, dpl through
python -m dpl.run -n N. Each launch gets a fresh directory for the ranks'
ready stamps, barriers and results; the launcher's own time.time() just
before starting the processes is the launch time.

Every launch is bounded: after `timeout` seconds the whole process group
gets SIGTERM, then SIGKILL 3 s later, and the run raises RunError with the
tail of its output.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")
STAGE_WORK = os.path.join(HERE, "stage_work.py")

# torchrun's master port comes from the tests' helper: drawn below the
# kernel's ephemeral range, so that no outgoing connection takes it before
# torch's store binds it (a port from bind(0) is taken from that range).
sys.path.insert(0, os.path.join(REPO, "bindings", "python", "tests"))
from loopback import free_port  # noqa: E402


class RunError(RuntimeError):
    """A launch failed or ran past its bound; the message has its output."""


@dataclass
class RunResult:
    """What one launch measured.

    seconds: wall seconds of the timed steps, the largest over ranks;
    first_step_s: the first step's seconds, largest over ranks; startup_s:
    launch until the last rank was ready to step; to_first_step_s: launch
    until the last rank had finished its first step; maxrss_kib: ru_maxrss per
    rank (KiB); wall_s: launch until every process had exited; extra:
    cpu_s (CPU seconds of the timed steps per rank), switches
    ([voluntary, involuntary] context switches of the timed steps per
    rank), main_s and imported_s
    (launch until the last rank's script started / finished importing).
    """

    seconds: float
    first_step_s: float
    startup_s: float
    to_first_step_s: float
    maxrss_kib: list[int]
    wall_s: float
    iters: int
    extra: dict = field(default_factory=dict)


def dpl_env(build: str) -> dict[str, str]:
    """The environment for importing dpl from this tree against `build`:
    PYTHONPATH gets bindings/python/src, DPL_LIBRARY_PATH the folders of
    the build's libdpl*.so (installed copies left out: install-test,
    installed, the pip test's pyvenv-pip); variables the
    caller already set win."""
    env = dict(os.environ)
    src = os.path.join(REPO, "bindings", "python", "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"]
                               if env.get("PYTHONPATH") else "")
    if "DPL_LIBRARY_PATH" not in env:
        dirs = set()
        for root, _dirs, files in os.walk(build):
            rel = os.path.relpath(root, build).split(os.sep)
            # installed copies (install tests, the pip test's venv) would
            # shadow the tree's own libraries
            if any(p.startswith(("install", "pyvenv")) for p in rel):
                continue
            if any(f.startswith("libdpl") and f.endswith(".so")
                   for f in files):
                dirs.add(root)
        env["DPL_LIBRARY_PATH"] = ":".join(sorted(dirs))
    return env


def _kill(procs: list[subprocess.Popen]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        for p in alive:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def _tail(rundir: str) -> str:
    out = []
    for name in sorted(os.listdir(rundir)):
        if name.endswith(".log"):
            with open(os.path.join(rundir, name), errors="replace") as f:
                text = f.read()[-3000:]
            out.append(f"--- {name}\n{text}")
    return "\n".join(out)


def _launch(cmds: list[tuple[list[str], dict[str, str]]], rundir: str,
            timeout: float) -> tuple[str | None, float]:
    """Start every command (output to rundir/launchI.log), wait for all,
    bounded by `timeout` seconds; kill what is left. Returns (what went
    wrong or None, wall seconds)."""
    procs: list[subprocess.Popen] = []
    logs = []
    failed: str | None = "the processes could not be started"
    wall = 0.0
    t0 = time.time()
    try:
        for i, (cmd, e) in enumerate(cmds):
            log = open(os.path.join(rundir, f"launch{i}.log"), "w")
            logs.append(log)
            procs.append(subprocess.Popen(cmd, env=e, stdout=log,
                                          stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout
        failed = None
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                failed = f"ran past {timeout} s"
                break
            bad = [p for p in procs if p.poll() not in (None, 0)]
            if bad:
                failed = f"a process exited with status {bad[0].returncode}"
                break
            time.sleep(0.01)
        wall = time.time() - t0
        if failed is None:
            bad = [p for p in procs if p.returncode != 0]
            if bad:
                failed = f"a process exited with status {bad[0].returncode}"
    finally:
        _kill(procs)
        for log in logs:
            log.close()
    return failed, wall


def stage_work(case: str, nprocs: int, iters: int, timeout: float,
               bind: str = "none") -> list[dict[str, float]]:
    """Every stage's torch work at once, one process per stage and no
    pipeline (stage_work.py), pinned by `bind` as the ranks are:
    [{"wall_s", "cpu_s"} per step] by stage.
    Raises RunError on failure or past `timeout` seconds."""
    rundir = tempfile.mkdtemp(prefix="dpl-bench-work-")
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        cmds = [([sys.executable, STAGE_WORK, "--case", case, "--stage",
                  str(k), "--stages", str(nprocs), "--rundir", rundir,
                  "--iters", str(iters), "--timeout",
                  str(max(10.0, timeout - 5.0)), "--bind", bind], env)
                for k in range(nprocs)]
        failed, _ = _launch(cmds, rundir, timeout)
        if failed:
            raise RunError(f"stage work {case}: {failed}\n{_tail(rundir)}")
        out = []
        for k in range(nprocs):
            with open(os.path.join(rundir, f"work.{k}")) as f:
                out.append(json.load(f))
        return out
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def run(side: str, case: str, nprocs: int, iters: int, warmup: int,
        timeout: float, torch_launcher: str = "torchrun",
        build: str = os.path.join(REPO, "build"),
        worker_args: tuple[str, ...] = ()) -> RunResult:
    """Launch all ranks of one side for one case and wait (bounded by
    `timeout` seconds for the whole launch); raises RunError on failure."""
    rundir = tempfile.mkdtemp(prefix=f"dpl-bench-{side}-")
    try:
        return _run(rundir, side, case, nprocs, iters, warmup, timeout,
                    torch_launcher, build, worker_args)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def _run(rundir, side, case, nprocs, iters, warmup, timeout,
         torch_launcher, build, worker_args) -> RunResult:
    py = sys.executable
    wargs = [WORKER, "--side", side, "--case", case, "--rundir", rundir,
             "--iters", str(iters), "--warmup", str(warmup),
             "--timeout", str(max(10.0, timeout - 5.0)), *worker_args]
    env = dict(os.environ) if side == "torch" else dpl_env(build)
    env["OMP_NUM_THREADS"] = "1"
    env["GLOO_SOCKET_IFNAME"] = "lo"
    cmds: list[tuple[list[str], dict[str, str]]] = []
    if side == "dpl":
        cmds.append(([py, "-m", "dpl.run", "-n", str(nprocs), *wargs], env))
    elif torch_launcher == "torchrun":
        cmds.append(([py, "-m", "torch.distributed.run", "--nnodes", "1",
                      "--nproc-per-node", str(nprocs), "--master-addr",
                      "127.0.0.1", "--master-port", str(free_port()),
                      *wargs], env))
    else:
        port = str(free_port())
        for r in range(nprocs):
            e = dict(env, RANK=str(r), WORLD_SIZE=str(nprocs),
                     LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=port)
            cmds.append(([py, *wargs], e))
    t0 = time.time()
    failed, wall = _launch(cmds, rundir, timeout)
    if failed:
        raise RunError(f"{side} {case}: {failed}\n{_tail(rundir)}")
    res = []
    for r in range(nprocs):
        path = os.path.join(rundir, f"result.{r}")
        if not os.path.exists(path):
            raise RunError(f"{side} {case}: rank {r} wrote no result\n"
                           f"{_tail(rundir)}")
        with open(path) as f:
            res.append(json.load(f))
    return RunResult(seconds=max(x["seconds"] for x in res),
                     first_step_s=max(x["first_step_s"] for x in res),
                     startup_s=max(x["ready"] for x in res) - t0,
                     to_first_step_s=max(x["first_end"] for x in res) - t0,
                     maxrss_kib=[x["maxrss_kib"] for x in res],
                     wall_s=wall, iters=iters,
                     extra={"cpu_s": [x["cpu_s"] for x in res],
                            "eval_s": (max(x["eval_seconds"] for x in res)
                                       if all(x.get("eval_seconds") for x in res)
                                       else None),
                            "switches": [x["switches"] for x in res],
                            "main_s": max(x["main"] for x in res) - t0,
                            "imported_s": max(x["imported"] for x in res) - t0,
                            "stamps": [{k: v - t0 for k, v in x["stamps"].items()}
                                       for x in res]})
