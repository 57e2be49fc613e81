"""dpl.world: ThreadWorld and BootstrapWorld collectives, the struct
mirrors, Transport over inproc (threads) and shm (threads and processes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from loopback import free_port

import dpl
from dpl import _transport_capi as capi
from dpl import run, world
from dpl.world import BootstrapWorld, ThreadWorld, Transport

ROOT = Path(__file__).resolve().parents[3]
HEADERS = [ROOT / "libsched/core/include", ROOT / "libsched/bootstrap/include"]


def rank_env() -> dict[str, str]:
    """This environment, with dpl importable in child processes."""
    env = dict(os.environ)
    src = str(Path(dpl.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    for k in ("DPL_TRANSPORT", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    return env


def free_root() -> str:
    return f"127.0.0.1:{free_port()}"


# ------------------------------------------------------------- layouts

def test_mirrors_match_expected_layout():
    for cname, cls in capi.MIRRORS.items():
        assert capi.layout(cls) == capi.EXPECTED_LAYOUT[cname], cname


@pytest.mark.skipif(shutil.which("cc") is None or not HEADERS[0].is_dir(),
                    reason="needs a C compiler and dpl's headers")
def test_mirrors_match_c_compiler(tmp_path):
    lines = []
    for cname, (_, fields) in capi.EXPECTED_LAYOUT.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof(struct {cname}));')
        for f in fields:
            lines.append(f'printf("{cname}.{f} %zu\\n", offsetof(struct {cname}, {f}));')
    src = tmp_path / "l.c"
    src.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <dpl/bootstrap.h>\n"
                   "int main(void){" + "".join(lines) + "return 0;}\n")
    exe = tmp_path / "l"
    subprocess.run(["cc", "-std=c11", *[f"-I{h}" for h in HEADERS], str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    got = dict(line.split() for line in subprocess.check_output([str(exe)], text=True).split("\n")
               if line)
    for cname, cls in capi.MIRRORS.items():
        size, offs = capi.layout(cls)
        assert int(got[cname]) == size, cname
        for f, o in offs.items():
            assert int(got[f"{cname}.{f}"]) == o, f"{cname}.{f}"
    assert capi.runner_app_tag(5) == (7 << 57) | 5
    assert capi.runner_app_tag(5) <= capi.DPL_TAG_MAX


# --------------------------------------------------------- ThreadWorld

def test_thread_world_allgather_and_barrier():
    arrived = []

    def fn(scale):
        w = world.current()
        assert isinstance(w, ThreadWorld) and (run.rank(), run.world_size()) == (w.rank, 4)
        got = w.allgather(bytes([w.rank]) * (w.rank * scale))  # lengths differ
        arrived.append(w.rank)
        w.barrier()
        seen = len(arrived)  # every rank appended before anyone left the barrier
        again = w.allgather(bytearray(b"%d" % w.rank))
        return got, seen, again

    out = run.threads(4, fn, 3, timeout=20)
    for r, (got, seen, again) in enumerate(out):
        assert got == [bytes([q]) * (q * 3) for q in range(4)]
        assert seen == 4
        assert again == [b"0", b"1", b"2", b"3"]


def test_thread_world_timeout_names_missing_rank():
    name = world._fresh_name()
    res = {}

    def rank(r):
        with ThreadWorld(name, r, 2, timeout=0.3) as w:
            if r == 1:
                time.sleep(0.8)  # never takes part in rank 0's collective in time
                return
            t0 = time.monotonic()
            try:
                w.allgather(b"x")
            except dpl.TimeoutError as exc:
                res[r] = (time.monotonic() - t0, str(exc))

    ths = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    [t.start() for t in ths]
    [t.join(10) for t in ths]
    took, msg = res[0]
    assert 0.25 < took < 3, took
    assert name in msg and "rank 1 did not arrive" in msg


def test_thread_world_failed_rank_is_peer_error_and_root_cause_raised():
    seen = {}

    def fn():
        w = world.current()
        if w.rank == 2:
            raise ValueError("rank two broke")
        try:
            w.barrier()
        except dpl.PeerError as exc:
            seen[w.rank] = exc.rank
            raise

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="rank two broke") as ei:
        run.threads(3, fn, timeout=20)
    assert time.monotonic() - t0 < 5  # PeerError at once, not at the timeout
    assert seen == {0: 2, 1: 2}
    notes = getattr(ei.value, "__notes__", [])
    assert any(n.startswith("rank 0 also failed: PeerError") for n in notes) or sys.version_info < (3, 11)


def test_threads_results_and_hung_rank_times_out():
    assert run.threads(3, lambda a, b=0: (world.current().rank, a, b), 7, b=9) == [
        (0, 7, 9), (1, 7, 9), (2, 7, 9)]
    release = threading.Event()

    def fn():
        if world.current().rank == 1:
            release.wait(10)

    t0 = time.monotonic()
    with pytest.raises(dpl.TimeoutError, match=r"rank 1 still running after 0.5 s"):
        run.threads(2, fn, timeout=0.5)
    assert time.monotonic() - t0 < 3
    release.set()


def test_thread_world_bad_arguments():
    name = world._fresh_name()
    with ThreadWorld(name, 0, 2, timeout=1) as w:
        with pytest.raises(dpl.Error, match="rank 0 of thread world .* is taken"):
            ThreadWorld(name, 0, 2)
        with pytest.raises(dpl.InvalidArgument, match="has 2 ranks, world_size=3"):
            ThreadWorld(name, 1, 3)
        assert repr(w).startswith("ThreadWorld(")
    with pytest.raises(dpl.InvalidArgument, match=r"rank=2 is not an int in \[0, 2\)"):
        ThreadWorld(name, 2, 2)
    with pytest.raises(dpl.InvalidArgument, match="timeout=-1"):
        ThreadWorld(name, 0, 1, timeout=-1)
    with pytest.raises(dpl.InvalidArgument, match="thread world name"):
        ThreadWorld("", 0, 1)
    with pytest.raises(dpl.InvalidArgument, match="is closed"):
        w.barrier()
    with pytest.raises(dpl.InvalidArgument, match="n=0"):
        run.threads(0, print)


def test_current_outside_threads_is_world_of_one(no_rank_env):
    if world._torch_dist() is not None:
        pytest.skip("torch.distributed is initialised in this process")
    w = world.current()
    try:
        assert (w.rank, w.world_size) == (0, 1) and world.current() is w
        assert w.allgather(b"solo") == [b"solo"]
        assert world.default_transport(w) == "inproc"
        with Transport.open(w) as t:
            assert (t.name, t.rank, t.world_size) == ("inproc", 0, 1)
            assert t._ptr is not None and t._ptr.value
    finally:
        w.close()
    no_rank_env.setenv("DPL_RANK", "x")
    with pytest.raises(dpl.InvalidArgument, match="DPL_RANK='x'"):
        run.rank()


@pytest.mark.parametrize("env,want", [
    ({"DPL_RANK": "1", "WORLD_SIZE": "3"}, (1, 3)),        # each on its own
    ({"DPL_RANK": "1", "DPL_WORLD_SIZE": "2", "RANK": "5", "WORLD_SIZE": "8"}, (1, 2)),
    ({"WORLD_SIZE": "4"}, (0, 1)),                         # current(): a world of one
    ({}, (0, 1)),
])
def test_rank_helpers_read_what_the_join_reads(env, want, no_rank_env):
    for k, v in env.items():
        no_rank_env.setenv(k, v)
    if world._torch_dist() is not None:
        pytest.skip("torch.distributed is initialised in this process")
    assert (run.rank(), run.world_size()) == run.peek() == want
    assert run.env_rank() == (want if env.get("DPL_RANK", env.get("RANK")) else None)


@pytest.mark.parametrize("env", [{"DPL_RANK": " 1", "DPL_WORLD_SIZE": "2"},
                                 {"RANK": "0"}, {"RANK": "2", "WORLD_SIZE": "2"}])
def test_rank_helpers_refuse_what_the_join_refuses(env, no_rank_env):
    for k, v in env.items():
        no_rank_env.setenv(k, v)
    no_rank_env.setenv("DPL_ROOT", "127.0.0.1:1")
    if world._torch_dist() is not None:
        pytest.skip("torch.distributed is initialised in this process")
    with pytest.raises(dpl.InvalidArgument) as join:
        world.BootstrapWorld.from_env(timeout=1)
    for helper in (run.rank, run.world_size, run.peek, lambda: world.current(timeout=1)):
        with pytest.raises(dpl.InvalidArgument) as got:
            helper()
        assert str(got.value) == str(join.value)
    assert world._process_world is None   # current() kept nothing


# ----------------------------------------------------------- Transport

def _ring(t, w, n):
    """Every rank sends n bytes to the next and receives from the previous."""
    nxt, prv = (w.rank + 1) % w.world_size, (w.rank - 1) % w.world_size
    msg = bytes((w.rank * 7 + i) % 251 for i in range(n))
    if w.rank % 2 == 0:
        t.send(nxt, 11, msg)
        got = t.recv(prv, 11, n)
    else:
        got = t.recv(prv, 11, n)
        t.send(nxt, 11, memoryview(msg))
    return got == bytes((prv * 7 + i) % 251 for i in range(n))


def test_inproc_in_threads_send_recv():
    def fn():
        w = world.current()
        t = Transport.open(w, timeout=10)
        assert t.name == "inproc" and t.peer_failure
        ok = [_ring(t, w, n) for n in (0, 5, 100, 70000)]
        if w.rank == 0:
            t.send(1, 2**57 - 1, bytearray(b"abc"))
            buf = bytearray(4)
            t.recv_into(1, 3, buf)
            ok.append(buf == b"wxyz")
        elif w.rank == 1:
            ok.append(t.recv(0, 2**57 - 1, 3) == b"abc")
            t.send(0, 3, b"wxyz")
        t.close()
        return ok

    for ok in run.threads(4, fn, timeout=30):
        assert all(ok), ok


def test_transport_errors_in_threads():
    def fn():
        w = world.current()
        t = Transport.open(w, "inproc", timeout=10)
        if w.rank == 0:
            with pytest.raises(dpl.InvalidArgument, match="peer=0 is this rank"):
                t.send(0, 1, b"x")
            with pytest.raises(dpl.InvalidArgument, match=r"tag=-1"):
                t.send(1, -1, b"x")
            with pytest.raises(dpl.InvalidArgument, match=r"peer=5"):
                t.recv(5, 1, 1)
            t0 = time.monotonic()
            with pytest.raises(dpl.TimeoutError, match=r"receive from rank 1 \(tag 9, 4 bytes\)"):
                t.recv(1, 9, 4, timeout=0.2)
            assert time.monotonic() - t0 < 2
            w.barrier()
            with pytest.raises(dpl.Error) as ei:
                t.recv(1, 4, 8)  # rank 1 sent 3 bytes
            assert ei.value.name == "DPL_ETRUNC"
            w.barrier()  # rank 1 closes its transport after this
            with pytest.raises(dpl.PeerError) as ei:
                t.recv(1, 5, 1, timeout=5)
            assert ei.value.rank == 1
        else:
            w.barrier()
            t.send(0, 4, b"abc")
            w.barrier()
            t.close()
        t.close()
        with pytest.raises(dpl.InvalidArgument, match="is closed"):
            t.send(1 - w.rank, 1, b"")

    run.threads(2, fn, timeout=30)


def test_open_fails_on_one_rank_names_it():
    def fn():
        w = world.current()
        name = "nosuchtransport" if w.rank == 1 else "inproc"
        Transport.open(w, name, timeout=5)

    got = {}

    def wrapped():
        try:
            fn()
        except dpl.Error as exc:
            got[world.current().rank] = exc
            raise

    with pytest.raises(dpl.Error):
        run.threads(3, wrapped, timeout=20)
    assert isinstance(got[0], dpl.PeerError) and got[0].rank == 1
    assert "rank 1 could not load the transport" in str(got[0])
    assert "'nosuchtransport'" in str(got[0])
    assert got[1].name == "DPL_ENOENT"
    with pytest.raises(dpl.InvalidArgument, match="transport name 'No Such'"):
        Transport.open(ThreadWorld(world._fresh_name(), 0, 1), "No Such")


def test_shm_in_threads_uses_python_oob():
    def fn():
        w = world.current()
        with Transport.open(w, "shm", options="ring=64k", timeout=10) as t:
            assert t.name == "shm"
            return [_ring(t, w, n) for n in (1, 20000, 300000)]

    for ok in run.threads(3, fn, timeout=60):
        assert all(ok)


def test_transport_options_from_the_environment(monkeypatch):
    """DPL_TRANSPORT_OPTIONS reaches the backend when options is None;
    options given override it."""
    monkeypatch.setenv("DPL_TRANSPORT_OPTIONS", "ring=3k")

    def from_env():
        Transport.open(world.current(), "shm", timeout=10)

    with pytest.raises(dpl.InvalidArgument, match="ring"):
        run.threads(2, from_env, timeout=30)

    def given():
        w = world.current()
        with Transport.open(w, "shm", options="ring=64k", timeout=10) as t:
            return _ring(t, w, 20000)

    assert all(run.threads(2, given, timeout=30))
    monkeypatch.setenv("DPL_TRANSPORT_OPTIONS", "ring=64k,spin_us=0")

    def from_env_ok():
        w = world.current()
        with Transport.open(w, "shm", timeout=10) as t:
            return _ring(t, w, 300000)

    assert all(run.threads(2, from_env_ok, timeout=30))


def test_shm_open_when_peer_failed_is_peer_error():
    got = {}

    def fn():
        w = world.current()
        if w.rank == 1:
            raise RuntimeError("rank 1 fails before its open")
        t0 = time.monotonic()
        try:
            Transport.open(w, "shm", timeout=10)
        except dpl.PeerError as exc:
            got[w.rank] = (exc.rank, time.monotonic() - t0)
            raise

    with pytest.raises(RuntimeError, match="fails before its open"):
        run.threads(2, fn, timeout=30)
    assert got[0][0] == 1 and got[0][1] < 5, got


# ------------------------------------------------------- BootstrapWorld

def test_bootstrap_world_in_threads_explicit_root():
    root = free_root()

    def fn():
        r = world.current().rank
        with BootstrapWorld(root, r, 3, timeout=10) as b:
            assert (b.rank, b.world_size) == (r, 3)
            big = b.allgather(bytes([r]) * (5000 + r))  # > one 4096-byte blob, lengths differ
            b.barrier()
            empty = b.allgather(b"")
            o = b.oob
            assert o.allgather and o.barrier
            return big == [bytes([q]) * (5000 + q) for q in range(3)], empty == [b""] * 3, b.root

    out = run.threads(3, fn, timeout=30)
    assert all(a and e for a, e, _ in out)
    assert out[0][2] == root


def test_bootstrap_world_peer_that_left_is_named():
    root = free_root()

    def fn():
        r = world.current().rank
        b = BootstrapWorld(root, r, 3, timeout=5)
        b.barrier()
        if r == 1:
            b.close()
            return None
        time.sleep(0.3)
        if r == 0:  # rank 0 sees every rank's connection
            with pytest.raises(dpl.PeerError) as ei:
                b.check()
            assert ei.value.rank == 1
        t0 = time.monotonic()
        with pytest.raises(dpl.PeerError, match="rank 1") as ei:
            b.barrier()
        b.close()
        return ei.value.rank, time.monotonic() - t0

    out = run.threads(3, fn, timeout=30)
    assert out[0][0] == 1 and out[2][0] == 1
    assert out[0][1] < 3 and out[2][1] < 3


def test_default_transport(monkeypatch):
    monkeypatch.delenv("DPL_TRANSPORT", raising=False)
    with ThreadWorld(world._fresh_name(), 0, 2) as w:
        assert world.default_transport(w) == "inproc"
        monkeypatch.setenv("DPL_TRANSPORT", "shm")
        assert world.default_transport(w) == "shm"


def test_bootstrap_world_timeout_and_bad_env(monkeypatch):
    t0 = time.monotonic()
    with pytest.raises(dpl.TimeoutError, match="rank 1 never arrived"):
        BootstrapWorld(free_root(), 0, 2, timeout=0.5)
    assert time.monotonic() - t0 < 5
    with pytest.raises(dpl.InvalidArgument):
        BootstrapWorld("nohostport", 0, 2, timeout=0.5)
    monkeypatch.setenv("DPL_RANK", "zero")
    monkeypatch.setenv("DPL_WORLD_SIZE", "2")
    monkeypatch.setenv("DPL_ROOT", free_root())
    with pytest.raises(dpl.InvalidArgument, match="DPL_RANK"):
        BootstrapWorld.from_env(timeout=0.5)


RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from dpl import world, run
    out = sys.argv[1]
    w = world.current(timeout=20)
    r, n = w.rank, w.world_size
    res = {"rank": r, "n": n, "kind": type(w).__name__, "helpers": [run.rank(), run.world_size()]}
    res["gather"] = [x.hex() for x in w.allgather(bytes([r]) * (r + 1))]
    res["big"] = all(x == bytes([q]) * 9000 for q, x in enumerate(w.allgather(bytes([r]) * 9000)))
    w.barrier()
    t = world.Transport.open(w, timeout=20)
    res["transport"] = t.name
    nxt, prv = (r + 1) % n, (r - 1) % n
    msg = lambda q: (b"from %d " % q) * (2000 + q)
    if r % 2 == 0:
        t.send(nxt, 1, msg(r)); got = t.recv(prv, 1, len(msg(prv)))
    else:
        got = t.recv(prv, 1, len(msg(prv))); t.send(nxt, 1, msg(r))
    res["ring"] = got == msg(prv)
    w.barrier()
    try:
        world.Transport.open(w, "inproc")
    except Exception as exc:
        res["inproc"] = type(exc).__name__ + ": " + str(exc)
    t.close()
    w.close()
    with open(os.path.join(out, "rank-%d.json" % r), "w") as f:
        json.dump(res, f)
""")


@pytest.mark.parametrize("n", [2, 4])
def test_bootstrap_world_and_shm_across_processes(tmp_path, n):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    p = subprocess.run([sys.executable, "-m", "dpl.run", "-n", str(n), "--timeout", "10",
                        str(script), str(tmp_path)], env=rank_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for r in range(n):
        res = json.loads((tmp_path / f"rank-{r}.json").read_text())
        assert res["rank"] == r and res["n"] == n and res["helpers"] == [r, n]
        assert res["kind"] == "BootstrapWorld"
        assert res["gather"] == [(bytes([q]) * (q + 1)).hex() for q in range(n)]
        assert res["big"] and res["ring"] and res["transport"] == "shm"
        assert res["inproc"].startswith("InvalidArgument") and "spans processes" in res["inproc"]
