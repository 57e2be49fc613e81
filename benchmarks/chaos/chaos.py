#!/usr/bin/env python3
"""chaos.py - SIGKILL and SIGSTOP of a random rank of `dpl train --nprocs N`
at a random moment, per transport, and whether the job dealt with it.

Each trial starts `dpl train --nprocs N --transport T --timeout S
--pid-dir D --iterations K` (K calibrated per transport so that training
lasts about --steady-s seconds), picks a rank and a moment at random (from
--seed) in one of three phases taken in turn -- setup (between the launch
and the first iteration), steady state (the middle of training) and
teardown (the last 0.3 s of the calibrated run, or as soon as another
rank has exited) -- and sends the fault. Then it
checks:

  in time   every survivor exited by itself within S + 1 s of the fault
            (none of them was killed by the launcher);
  named     every survivor that failed names the faulty rank in its own
            message, and the launcher's last line names that rank;
  procs     no process of the job is alive after the launcher returned;
  shm       nothing of the job is left in /dev/shm (dpl's dpl-*-p<pid>
            segments, libfabric shm's <pid>:* files) or among the System V
            segments (UCX's mm transport; by creator pid), compared with a
            listing taken before the trial. New entries that carry none of
            the job's pids are listed apart (another program may have made
            them).

A trial whose victim had already exited when the fault was due is counted
as missed and in no check. Transports: shm, ucx, ofi-tcp (--transport ofi
with FI_PROVIDER="tcp;ofi_rxm"), ofi (--transport ofi with libfabric's
default choice, shm on one host), cudaipc (only where /dev/nvidia0
exists). A transport this dpl lacks is reported as skipped with the
launcher's message.

usage: chaos.py --dpl PATH [--transports LIST] [--faults kill,stop]
                [--phases setup,steady,teardown] [--trials N] [--timeout S] [--seed X] [--json OUT]
                [--nprocs N] [--steady-s S] [--nice N] [--strict]

Prints a table and the failed trials; writes everything to --json. Exits
2 on bad usage; with --strict, 1 when a trial failed a check; else 0.
"""

import argparse
import json
import os
import random
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time

# name: (--transport value, environment changes (None removes), needs)
TRANSPORTS = {
    "shm": ("shm", {}, None),
    "ucx": ("ucx", {}, None),
    "ofi-tcp": ("ofi", {"FI_PROVIDER": "tcp;ofi_rxm"}, None),
    "ofi": ("ofi", {"FI_PROVIDER": None}, None),
    "cudaipc": ("cudaipc", {}, "gpu"),
}
FAULTS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
PHASES = ("setup", "steady", "teardown")
HANG_S = 30.0  # past S + 1 s: the launcher itself is stuck


def proc_stat(pid):
    """(state, starttime) of a process, or None when there is none."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return rest[0], int(rest[19])


def alive(pid, start):
    st = proc_stat(pid)
    return st is not None and st[1] == start and st[0] not in "ZX"


def shm_snapshot():
    """Names in /dev/shm and System V segments as 'sysv:<id>:<cpid>'."""
    names = set()
    try:
        names.update(os.listdir("/dev/shm"))
    except OSError:
        pass
    try:
        with open("/proc/sysvipc/shm") as f:
            next(f)
            for line in f:
                v = line.split()
                names.add("sysv:%s:%s" % (v[1], v[4]))
    except (OSError, StopIteration, IndexError):
        pass
    return names


def owner_pid(name):
    """The pid an entry's name carries, or None."""
    m = (re.match(r"^sysv:\d+:(\d+)$", name) or
         re.match(r"^dpl-.*-p(\d+)$", name) or
         re.match(r"^(\d+):", name))
    return int(m.group(1)) if m else None


def run_env(changes):
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def read_pids(d, n):
    pids = {}
    for r in range(n):
        try:
            with open(os.path.join(d, "rank-%d.pid" % r)) as f:
                pids[r] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return pids


LAUNCHER = re.compile(r"^dpl train: rank (\d+) \(pid (\d+)\) (.*)$")
RANK = re.compile(r"^dpl train: rank (\d+)(?: \(stage rank [^)]*\))?: (.*)$")


def parse_stderr(text):
    """Launcher lines {rank: text}, rank lines {rank: [messages]}, last."""
    lines = [l for l in text.splitlines() if l.strip()]
    launcher, ranks = {}, {}
    for l in lines:
        m = LAUNCHER.match(l)
        if m:
            launcher[int(m.group(1))] = m.group(3)
            continue
        m = RANK.match(l)
        if m:
            ranks.setdefault(int(m.group(1)), []).append(m.group(2))
    return launcher, ranks, lines[-1] if lines else ""


class Job:
    def __init__(self, cfg, name, iterations, errpath):
        transport, changes, _ = TRANSPORTS[name]
        self.dir = tempfile.mkdtemp(prefix="dpl-chaos-")
        self.errpath = errpath
        argv = [cfg.dpl, "train", "--nprocs", str(cfg.nprocs),
                "--transport", transport, "--iterations", str(iterations),
                "--timeout", str(cfg.timeout), "--pid-dir", self.dir]
        nice = cfg.nice
        self.t0 = time.monotonic()
        with open(errpath, "wb") as err:
            self.p = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=err,
                env=run_env(changes),
                preexec_fn=(lambda: os.nice(nice)) if nice else None)

    def wait(self, limit_s):
        """The exit code, or None after killing a launcher past limit_s."""
        try:
            return self.p.wait(timeout=max(0.0, limit_s))
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None

    def stderr(self):
        with open(self.errpath, errors="replace") as f:
            return f.read()

    def done(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def calibrate(cfg, name, errpath):
    """Setup + teardown time (1 iteration), then K so that training lasts
    about cfg.steady_s; None and a reason when the transport cannot run."""
    def timed(k):
        j = Job(cfg, name, k, errpath)
        rc = j.wait(120)
        wall = time.monotonic() - j.t0
        err = j.stderr()
        j.done()
        return rc, wall, err

    rc, base, err = timed(1)
    if rc != 0:
        last = [l for l in err.splitlines() if l.strip()]
        return None, "exit %s: %s" % (rc, last[-1] if last else "no message")
    k = 2000
    for _ in range(3):
        rc, wall, err = timed(k)
        if rc != 0:
            return None, "exit %s with %d iterations" % (rc, k)
        per = max(wall - base, 1e-3) / k
        want = max(100, min(1000000, int(cfg.steady_s / per)))
        if abs(want - k) < 0.25 * k:
            break
        k = want
    # The shortest of three runs: a moment drawn inside it falls inside
    # most runs, which vary with the load.
    walls = [wall]
    for _ in range(2):
        rc, w, err = timed(k)
        if rc != 0:
            return None, "exit %s with %d iterations" % (rc, k)
        walls.append(w)
    return {"setup_s": base, "iterations": k, "wall_s": min(walls),
            "walls_s": [round(w, 3) for w in walls]}, None


def moment(rng, phase, cal):
    """Seconds after the launch at which to send the fault."""
    base, wall = cal["setup_s"], cal["wall_s"]
    if phase == "setup":
        return rng.uniform(0.0, 0.6 * base)
    if phase == "steady":
        return base + rng.uniform(0.25, 0.75) * (wall - base)
    return wall - rng.uniform(0.0, min(0.3, 0.3 * base))


def trial(cfg, name, cal, kind, phase, rng, errpath):
    victim = rng.randrange(cfg.nprocs)
    at = moment(rng, phase, cal)
    rec = {"transport": name, "fault": kind, "phase": phase,
           "victim": victim, "at_s": round(at, 3)}
    before = shm_snapshot()
    job = Job(cfg, name, cal["iterations"], errpath)
    pids, end = {}, job.t0 + 20
    while len(pids) < cfg.nprocs and time.monotonic() < end and \
            job.p.poll() is None:
        time.sleep(0.005)
        pids = read_pids(job.dir, cfg.nprocs)
    starts = {}
    for r, pid in pids.items():
        st = proc_stat(pid)
        starts[r] = st[1] if st else -1
    rec["pids"] = pids
    if len(pids) < cfg.nprocs:
        rc = job.wait(HANG_S)
        rec.update(missed=True, why="the ranks did not start (exit %s)" % rc)
        job.done()
        return rec
    vpid = pids[victim]
    if phase == "teardown":
        # The drawn moment, or sooner: once another rank has finished,
        # the job is tearing down.
        while time.monotonic() < job.t0 + at and \
                alive(vpid, starts[victim]) and \
                all(alive(pids[r], starts[r]) for r in pids):
            time.sleep(0.002)
    else:
        delay = job.t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    if job.p.poll() is not None or not alive(vpid, starts[victim]):
        rc = job.wait(HANG_S)
        rec.update(missed=True, why="rank %d had already exited (job exit "
                   "%s)" % (victim, rc))
        job.done()
        return rec
    os.kill(vpid, FAULTS[kind])
    tf = time.monotonic()
    rec["missed"] = False
    rec["fault_after_launch_s"] = round(tf - job.t0, 3)
    # Watch the survivors go, until the launcher returns.
    gone = {r: None for r in pids if r != victim}
    limit = tf + cfg.timeout + 1 + HANG_S
    while job.p.poll() is None and time.monotonic() < limit:
        now = time.monotonic()
        for r in gone:
            if gone[r] is None and not alive(pids[r], starts[r]):
                gone[r] = now - tf
        time.sleep(0.01)
    rc = job.wait(limit - time.monotonic())
    if rc == 0:
        # Every rank, the victim included, exited 0: the signal landed
        # on a process already inside exit(), where it has no effect.
        rec.update(missed=True, why="rank %d was already exiting (the job "
                   "succeeded)" % victim)
        job.done()
        return rec
    rec["launcher_hung"] = rc is None
    rec["exit"] = rc
    now = time.monotonic()
    for r in gone:
        if gone[r] is None:
            gone[r] = now - tf if not alive(pids[r], starts[r]) else None
    rec["survivor_exit_s"] = {str(r): (None if v is None else round(v, 3))
                              for r, v in gone.items()}
    err = job.stderr()
    launcher, ranks, last = parse_stderr(err)
    rec["stderr"] = err.splitlines()[-4 * cfg.nprocs:]
    # in time: by itself within S + 1 s of the fault
    late = [r for r, v in gone.items()
            if v is None or v > cfg.timeout + 1.0 or
            "did not exit in time" in launcher.get(r, "")]
    rec["late"] = late
    # named: every failed survivor and the launcher's last line
    word = re.compile(r"\brank %d\b" % victim)
    unnamed = []
    for r in gone:
        failed = r in launcher or r in ranks
        if failed and not any(word.search(m) for m in ranks.get(r, [])):
            unnamed.append(r)
    launcher_named = re.match(r"^dpl train: rank %d \(pid " % victim,
                              last) is not None
    rec["unnamed"] = unnamed
    rec["launcher_names_victim"] = launcher_named
    rec["last_line"] = last
    # procs: none of the job's processes is alive
    left = [r for r, pid in pids.items() if alive(pid, starts[r])]
    for r in left:
        try:
            os.kill(pids[r], signal.SIGKILL)
        except OSError:
            pass
    rec["procs_left"] = left
    # shm: what the job left, and what appeared without a job pid
    time.sleep(0.05)
    new = shm_snapshot() - before
    mine = set(pids.values())
    rec["shm_left"] = sorted(n for n in new if owner_pid(n) in mine)
    rec["shm_new_other"] = sorted(n for n in new if owner_pid(n) is None)
    rec["checks"] = {
        "in_time": not late and not rec["launcher_hung"],
        "named": not unnamed and launcher_named,
        "procs": not left,
        "shm": not rec["shm_left"],
    }
    job.done()
    return rec


def has_gpu():
    return os.path.exists("/dev/nvidia0")


def summarize(trials):
    rows = {}
    for t in trials:
        key = (t["transport"], t["fault"])
        row = rows.setdefault(key, {"transport": t["transport"],
                                    "fault": t["fault"], "trials": 0,
                                    "missed": 0, "in_time": 0, "named": 0,
                                    "procs_clean": 0, "shm_clean": 0,
                                    "procs_left": 0, "shm_left": 0})
        if t.get("missed"):
            row["missed"] += 1
            continue
        row["trials"] += 1
        for k, col in (("in_time", "in_time"), ("named", "named"),
                       ("procs", "procs_clean"), ("shm", "shm_clean")):
            row[col] += 1 if t["checks"][k] else 0
        row["procs_left"] += len(t["procs_left"])
        row["shm_left"] += len(t["shm_left"])
    return list(rows.values())


def print_table(rows, skipped, cfg):
    print("chaos: dpl train --nprocs %d, --timeout %g, seed %d"
          % (cfg.nprocs, cfg.timeout, cfg.seed))
    hdr = ("transport", "fault", "trials", "missed", "in time",
           "named", "no procs", "no shm", "procs left", "shm left")
    fmt = "%-9s %-5s %6s %6s %8s %8s %9s %8s %10s %9s"
    print(fmt % hdr)
    for r in rows:
        n = r["trials"]
        print(fmt % (r["transport"], r["fault"], n, r["missed"],
                     "%d/%d" % (r["in_time"], n), "%d/%d" % (r["named"], n),
                     "%d/%d" % (r["procs_clean"], n),
                     "%d/%d" % (r["shm_clean"], n), r["procs_left"],
                     r["shm_left"]))
    for name, why in skipped.items():
        print("%-9s skipped: %s" % (name, why))


def print_failures(trials):
    bad = [t for t in trials if not t.get("missed") and
           not all(t["checks"].values())]
    for t in bad:
        failed = [k for k, v in t["checks"].items() if not v]
        print("\nFAILED %s %s %s rank %d at %.2f s: %s" % (
            t["transport"], t["fault"], t["phase"], t["victim"],
            t["fault_after_launch_s"], ", ".join(failed)))
        if t["late"]:
            print("  late or killed: ranks %s (exit after fault: %s)" % (
                t["late"], t["survivor_exit_s"]))
        if t["unnamed"]:
            print("  do not name rank %d: ranks %s" % (t["victim"],
                                                       t["unnamed"]))
        if not t["launcher_names_victim"]:
            print("  launcher's last line: %s" % t["last_line"])
        if t["procs_left"]:
            print("  processes left: ranks %s" % t["procs_left"])
        if t["shm_left"]:
            print("  shm left: %s" % t["shm_left"])
        for l in t["stderr"]:
            print("  | " + l)
    return len(bad)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dpl", required=True, help="the dpl binary")
    ap.add_argument("--transports", default="shm,ucx,ofi-tcp,ofi,cudaipc")
    ap.add_argument("--faults", default="kill,stop")
    ap.add_argument("--phases", default="setup,steady,teardown")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--steady-s", type=float, default=2.0)
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--strict", action="store_true")
    cfg = ap.parse_args(argv)
    for name in cfg.transports.split(","):
        if name not in TRANSPORTS:
            ap.error("--transports: unknown transport '%s' (known: %s)"
                     % (name, ", ".join(TRANSPORTS)))
    for kind in cfg.faults.split(","):
        if kind not in FAULTS:
            ap.error("--faults: unknown fault '%s' (known: kill, stop)"
                     % kind)
    for ph in cfg.phases.split(","):
        if ph not in PHASES:
            ap.error("--phases: unknown phase '%s' (known: %s)"
                     % (ph, ", ".join(PHASES)))
    if cfg.trials < 1:
        ap.error("--trials: must be >= 1 (got %d)" % cfg.trials)
    if not 0 < cfg.timeout <= 600:
        ap.error("--timeout: must be in (0, 600] (got %g)" % cfg.timeout)
    if not 2 <= cfg.nprocs <= 64:
        ap.error("--nprocs: must be in [2, 64] (got %d)" % cfg.nprocs)
    if not 0.2 <= cfg.steady_s <= 60:
        ap.error("--steady-s: must be in [0.2, 60] (got %g)" % cfg.steady_s)
    if not os.access(cfg.dpl, os.X_OK):
        ap.error("--dpl: %s is not an executable file" % cfg.dpl)
    return cfg


def main(argv):
    cfg = parse_args(argv)
    rng = random.Random(cfg.seed)
    trials, skipped, cals = [], {}, {}
    work = tempfile.mkdtemp(prefix="dpl-chaos-err-")
    errpath = os.path.join(work, "stderr")
    try:
        for name in cfg.transports.split(","):
            if TRANSPORTS[name][2] == "gpu" and not has_gpu():
                skipped[name] = "no GPU on this host (/dev/nvidia0)"
                continue
            cal, why = calibrate(cfg, name, errpath)
            if cal is None:
                skipped[name] = why
                continue
            cals[name] = cal
            print("%s: %d iterations, setup+teardown %.2f s, run %.2f s"
                  % (name, cal["iterations"], cal["setup_s"],
                     cal["wall_s"]), file=sys.stderr)
            phases = cfg.phases.split(",")
            for kind in cfg.faults.split(","):
                for i in range(cfg.trials):
                    t = trial(cfg, name, cal, kind,
                              phases[i % len(phases)], rng, errpath)
                    trials.append(t)
                    print("  %s %s %-8s rank %d: %s" % (
                        name, kind, t["phase"], t["victim"],
                        "missed (%s)" % t["why"] if t["missed"] else
                        " ".join(k for k, v in t["checks"].items() if not v)
                        or "ok"), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = summarize(trials)
    print_table(rows, skipped, cfg)
    nbad = print_failures(trials)
    if cfg.json:
        with open(cfg.json, "w") as f:
            json.dump({"config": {k: getattr(cfg, k) for k in
                                  ("nprocs", "timeout", "seed", "trials",
                                   "transports", "faults", "phases",
                                   "steady_s")},
                       "calibration": cals, "skipped": skipped,
                       "summary": rows, "trials": trials}, f, indent=1)
    return 1 if cfg.strict and nbad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
