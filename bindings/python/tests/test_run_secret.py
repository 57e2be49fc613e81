"""dpl.run.launch gives every job a fresh secret (DPL_JOB_SECRET) that its
ranks share and prove at the rendezvous; a rank with another secret is
refused and says why; the rendezvous port cannot be taken by another
process before rank 0 listens on it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import textwrap
from pathlib import Path

import dpl
from dpl import run

# Every rank writes its DPL_JOB_SECRET to out/secret-<rank>; with "meet",
# the ranks then meet over dpl's bootstrap and gather their ranks, rank 1
# optionally with a secret of its own ("meet-wrong").
SCRIPT = textwrap.dedent("""
    import os, sys
    out, what = sys.argv[1], sys.argv[2]
    r = int(os.environ["DPL_RANK"])
    with open(os.path.join(out, "secret-%d" % r), "w") as f:
        f.write(os.environ.get("DPL_JOB_SECRET", ""))
    if what.startswith("meet"):
        import dpl
        from dpl import world
        if what == "meet-wrong" and r == 1:
            os.environ["DPL_JOB_SECRET"] = "x" * 64
        try:
            w = world.current(timeout=3.0)
            got = w.allgather(bytes([r]))
            w.close()
        except dpl.Error as exc:
            with open(os.path.join(out, "error-%d" % r), "w") as f:
                f.write(str(exc))
            sys.exit(1)
        with open(os.path.join(out, "met-%d" % r), "w") as f:
            f.write(",".join(str(b[0]) for b in got))
""")


def rank_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(dpl.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("DPL_TRANSPORT", None)
    return env


def job(tmp_path: Path, n: int, what: str, env: dict[str, str] | None = None,
        name: str = "job") -> tuple[int, Path]:
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    rc = run.launch(n, [sys.executable, str(script), str(out), what],
                    env=env or rank_env(), timeout=10.0)
    return rc, out


def secrets_of(out: Path, n: int) -> list[str]:
    return [(out / f"secret-{r}").read_text() for r in range(n)]


def test_every_job_gets_a_fresh_shared_secret(tmp_path):
    env = dict(rank_env(), DPL_JOB_SECRET="inherited-secret-0123456789")
    rc1, out1 = job(tmp_path, 3, "env", env=env, name="a")
    rc2, out2 = job(tmp_path, 3, "env", env=env, name="b")
    assert (rc1, rc2) == (0, 0)
    s1, s2 = secrets_of(out1, 3), secrets_of(out2, 3)
    assert len(set(s1)) == 1 and len(set(s2)) == 1, (s1, s2)
    assert re.fullmatch(r"[0-9a-f]{64}", s1[0]), s1[0]
    assert s1[0] != s2[0], "two jobs share a secret"
    assert s1[0] != env["DPL_JOB_SECRET"], "the inherited secret was kept"


def test_ranks_meet_with_the_job_secret(tmp_path):
    rc, out = job(tmp_path, 3, "meet")
    errors = {p.name: p.read_text() for p in out.glob("error-*")}
    assert rc == 0, errors
    for r in range(3):
        assert (out / f"met-{r}").read_text() == "0,1,2"


def test_rank_with_another_secret_is_refused_with_the_cause(tmp_path):
    rc, out = job(tmp_path, 2, "meet-wrong")
    assert rc != 0
    assert not (out / "met-1").exists() and not (out / "met-0").exists()
    msg1 = (out / "error-1").read_text()
    assert "did not prove the job secret to rank 1" in msg1, msg1
    assert "DPL_JOB_SECRET is not rank 0's" in msg1, msg1
    msg0 = (out / "error-0").read_text()
    assert "rank 1 never arrived" in msg0, msg0


# Takes ports the way every other program on the host does (bind port 0,
# listen), holding up to 8,000 of them and replacing the oldest without
# pause, for at most 300 s.
CHURN = textwrap.dedent("""
    import collections, resource, socket, time
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    cap = max(64, min(8000, hard - 64))
    pool = collections.deque()
    end = time.time() + 300
    while time.time() < end:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
        except OSError:
            s.close()
            continue
        pool.append(s)
        if len(pool) > cap:
            pool.popleft().close()
""")


def test_ranks_meet_while_other_processes_take_ports(tmp_path):
    """The launcher holds the rendezvous port from before it starts the
    ranks (rank 0 inherits the listening socket), so a port released a
    moment before rank 0 binds it cannot be lost to another process."""
    churn = subprocess.Popen([sys.executable, "-c", CHURN])
    try:
        time.sleep(0.5)
        for k in range(4):
            rc, out = job(tmp_path, 2, "meet", name=f"churn{k}")
            errors = {p.name: p.read_text() for p in out.glob("error-*")}
            assert rc == 0, (k, errors)
            assert (out / "met-0").read_text() == "0,1", k
    finally:
        churn.kill()
        churn.wait()
