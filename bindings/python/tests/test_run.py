"""python -m dpl.run and dpl.run.launch: exit status and the line naming
the failing rank, the timeout after a failure, signals, usage errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import dpl
from dpl import run

# Every rank writes its pid, then does what argv[2] says for its rank:
# "ok", "exit:N", "kill:SIG", "hang", "hang-ignore-term".
SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    out, plan = sys.argv[1], sys.argv[2].split(",")
    r = int(os.environ["DPL_RANK"])
    with open(os.path.join(out, "pid-%d" % r), "w") as f:
        f.write(str(os.getpid()))
    what = plan[r] if r < len(plan) else "ok"
    if what.startswith("exit:"):
        time.sleep(0.1)
        sys.exit(int(what[5:]))
    if what.startswith("kill:"):
        os.kill(os.getpid(), int(what[5:]))
    if what.startswith("hang"):
        if what == "hang-ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
""")


def rank_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(dpl.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("DPL_TRANSPORT", None)
    return env


def launcher(tmp_path, *args, **kw):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    return [sys.executable, "-m", "dpl.run", *args, str(script), str(tmp_path)]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def pids(tmp_path, n, wait=10.0):
    end = time.monotonic() + wait
    while time.monotonic() < end:
        files = [tmp_path / f"pid-{r}" for r in range(n)]
        if all(f.exists() and f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.02)
    raise AssertionError(f"ranks did not all start within {wait} s")


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_failing_rank_exit_status_and_final_line(tmp_path):
    p = subprocess.run(launcher(tmp_path, "-n", "3", "--timeout", "5") + ["ok,ok,exit:3"],
                       env=rank_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert last_line(p.stderr) == "dpl.run: rank 2 failed (exit status 3)"


def test_rank_killed_by_signal_is_128_plus_signal(tmp_path):
    p = subprocess.run(launcher(tmp_path, "-n", "2") + ["ok,kill:9"],
                       env=rank_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 137, p.stderr
    assert last_line(p.stderr) == "dpl.run: rank 1 failed (killed by signal 9 (SIGKILL))"


def test_success_is_zero_and_quiet(tmp_path):
    p = subprocess.run(launcher(tmp_path, "-n2") + ["ok,ok"], env=rank_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == ""
    assert len(set(pids(tmp_path, 2))) == 2


def test_hung_rank_is_killed_after_the_timeout(tmp_path):
    t0 = time.monotonic()
    p = subprocess.run(launcher(tmp_path, "-n", "3", "--timeout", "1") + ["exit:1,hang,ok"],
                       env=rank_env(), capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stderr
    assert 1.0 <= took < 8, took
    hung = pids(tmp_path, 3)[1]
    assert f"rank 1 (pid {hung}) did not exit within 1 s after rank 0 failed and was killed" \
        in p.stderr
    assert last_line(p.stderr) == "dpl.run: rank 0 failed (exit status 1)"
    assert not alive(hung)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_launcher_ends_every_rank(tmp_path, sig, code):
    # rank 2 ignores SIGTERM: it is killed once --timeout passed.
    proc = subprocess.Popen(launcher(tmp_path, "-n", "3", "--timeout", "1")
                            + ["hang,hang,hang-ignore-term"], env=rank_env(),
                            stderr=subprocess.PIPE, text=True)
    try:
        ranks = pids(tmp_path, 3)
        time.sleep(0.2)  # rank 2 has set its handler
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert took < 8, took
    assert all(not alive(pid) for pid in ranks), ranks
    assert last_line(err) == (f"dpl.run: stopped by {signal.Signals(sig).name}; "
                              "SIGTERM passed on to every rank")
    assert f"rank 2 (pid {ranks[2]}) did not exit within 1 s" in err


def test_ranks_die_with_a_killed_launcher(tmp_path):
    proc = subprocess.Popen(launcher(tmp_path, "-n", "2") + ["hang,hang"], env=rank_env(),
                            stderr=subprocess.DEVNULL)
    ranks = pids(tmp_path, 2)
    proc.kill()
    proc.wait()
    end = time.monotonic() + 10
    while any(alive(p) for p in ranks) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(alive(p) for p in ranks)


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5", ""])
def test_bad_n_names_the_value(tmp_path, value):
    p = subprocess.run(launcher(tmp_path, "-n", value) + ["ok"], env=rank_env(),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert f"dpl.run: -n '{value}' is not a whole number >= 1" in p.stderr
    assert not (tmp_path / "pid-0").exists()


@pytest.mark.parametrize("args,msg", [
    ([], "-n N (the number of ranks) is missing"),
    (["-n", "2", "--bogus"], "unknown option '--bogus'"),
    (["-n", "2", "--timeout", "soon"], "--timeout 'soon' is not a number of seconds"),
    (["-n", "2"], "no script.py (or -m module) to run"),
    (["-n", "2", "--bind", "numa", "x.py"], "--bind 'numa' is not one of none, core, fold"),
])
def test_usage_errors(args, msg):
    p = subprocess.run([sys.executable, "-m", "dpl.run", *args], env=rank_env(),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and msg in p.stderr, p.stderr


def test_module_mode_passes_environment_and_arguments(tmp_path):
    (tmp_path / "rankmod.py").write_text(textwrap.dedent("""
        import os, sys
        r = os.environ["DPL_RANK"]
        keys = ("DPL_WORLD_SIZE", "DPL_ROOT", "DPL_TRANSPORT")
        own_group = str(os.getpgid(0) == os.getpid())  # a terminal's Ctrl-C skips the ranks
        with open("env-" + r, "w") as f:
            f.write(" ".join([os.environ[k] for k in keys] + [own_group] + sys.argv[1:]))
    """))
    p = subprocess.run([sys.executable, "-m", "dpl.run", "-n", "3", "--transport", "shm",
                        "-m", "rankmod", "a", "--b"], env=rank_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = [(tmp_path / f"env-{r}").read_text().split() for r in range(3)]
    assert all(g[0] == "3" and g[2] == "shm" and g[3] == "True" and g[4:] == ["a", "--b"]
               for g in got)
    assert got[0][1].startswith("127.0.0.1:") and len({g[1] for g in got}) == 1


def test_rank0_inherits_the_listening_root(tmp_path):
    """Rank 0 gets DPL_ROOT_FD: a socket already listening on DPL_ROOT's
    port (so no other process can take the port before rank 0 listens);
    the other ranks get neither the variable nor the socket."""
    (tmp_path / "rootfd.py").write_text(textwrap.dedent("""
        import os, socket
        r = os.environ["DPL_RANK"]
        v = os.environ.get("DPL_ROOT_FD")
        port = int(os.environ["DPL_ROOT"].rsplit(":", 1)[1])
        out = "none"
        if v is not None:
            s = socket.socket(fileno=int(v))
            listening = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            out = f"{s.getsockname()[1] == port} {listening} {s.type == socket.SOCK_STREAM}"
            s.detach()
        with open("fd-" + r, "w") as f:
            f.write(out)
    """))
    p = subprocess.run([sys.executable, "-m", "dpl.run", "-n", "3", "rootfd.py"],
                       env=dict(rank_env(), DPL_ROOT_FD="99"), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = [(tmp_path / f"fd-{r}").read_text() for r in range(3)]
    assert got[0] == "True 1 True", got
    assert got[1:] == ["none", "none"], got


def test_launch_function(tmp_path, capfd):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    argv = [sys.executable, str(script), str(tmp_path)]
    assert run.launch(2, argv + ["ok,ok"], env=rank_env(), timeout=5) == 0
    assert run.launch(2, argv + ["ok,exit:4"], env=rank_env(), timeout=5) == 4
    assert capfd.readouterr().err.strip().endswith("dpl.run: rank 1 failed (exit status 4)")
    with pytest.raises(dpl.InvalidArgument, match="n=0"):
        run.launch(0, argv)
    with pytest.raises(dpl.InvalidArgument, match="argv="):
        run.launch(1, "python")
    with pytest.raises(dpl.InvalidArgument, match="timeout="):
        run.launch(1, argv, timeout=0)
    with pytest.raises(OSError, match="cannot start rank 0"):
        run.launch(2, [str(tmp_path / "no-such-program")])


def test_bind_cpus_by_hand():
    # 4 ranks on CPUs 2 and 5: core = r mod 2; fold = min(r, 3 - r) mod 2
    assert run.bind_cpus(4, "core", [2, 5]) == [2, 5, 2, 5]
    assert run.bind_cpus(4, "fold", [2, 5]) == [2, 5, 5, 2]
    assert run.bind_cpus(5, "fold", [7]) == [7] * 5
    assert run.bind_cpus(3, "none") == [None] * 3
    with pytest.raises(dpl.InvalidArgument, match="bind 'x' is not one of none, core, fold"):
        run.bind_cpus(2, "x")


@pytest.mark.parametrize("bind", ["none", "core", "fold"])
def test_bind_places_every_rank(tmp_path, bind):
    (tmp_path / "aff.py").write_text(textwrap.dedent("""
        import os
        with open("aff-" + os.environ["DPL_RANK"], "w") as f:
            f.write(" ".join(map(str, sorted(os.sched_getaffinity(0)))))
    """))
    p = subprocess.run([sys.executable, "-m", "dpl.run", "-n", "4", "--bind", bind, "aff.py"],
                       env=rank_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = [[int(c) for c in (tmp_path / f"aff-{r}").read_text().split()] for r in range(4)]
    mine = sorted(os.sched_getaffinity(0))
    if bind == "none":
        assert all(g == mine for g in got)
        return
    assert all(len(g) == 1 for g in got)
    want = {"core": [0, 1, 2, 3], "fold": [0, 1, 1, 0]}[bind]
    assert [g[0] for g in got] == [mine[k % len(mine)] for k in want]
