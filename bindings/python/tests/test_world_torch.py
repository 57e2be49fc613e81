"""dpl.world.StoreWorld over torch.distributed stores, and current() under
an initialised torch.distributed (torch only)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from loopback import free_port

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch without distributed", allow_module_level=True)

import dpl  # noqa: E402
from dpl import _transport_capi as capi  # noqa: E402
from dpl import run, world  # noqa: E402
from dpl.world import StoreWorld, Transport  # noqa: E402


def test_store_world_over_hash_store():
    store = dist.HashStore()

    def fn():
        r = world.current().rank
        with StoreWorld(store, r, 4, prefix="pfx", timeout=10) as w:
            got = w.allgather(bytes([r]) * (r * 1000))
            w.barrier()
            again = w.allgather(b"%d" % r)
            return got, again

    for got, again in run.threads(4, fn, timeout=30):
        assert got == [bytes([q]) * (q * 1000) for q in range(4)]
        assert again == [b"0", b"1", b"2", b"3"]
    # every round's keys went once all ranks read them
    assert not store.check(["pfx/1/0/0"]) and not store.check(["pfx/1/2/3"])


def test_store_world_over_tcp_store_opens_shm():
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, 3, True, timedelta(seconds=10),
                           wait_for_workers=False)

    def fn():
        r = world.current().rank
        store = dist.TCPStore("127.0.0.1", port, 3, False, timedelta(seconds=10))
        with StoreWorld(store, r, 3, timeout=10) as w:
            with Transport.open(w, "shm", timeout=10) as t:  # init runs the Python oob
                nxt, prv = (r + 1) % 3, (r - 1) % 3
                if r == 0:
                    t.send(nxt, 1, b"tok" * 1000)
                    got = t.recv(prv, 1, 3000)
                else:
                    got = t.recv(prv, 1, 3000)
                    t.send(nxt, 1, got)
                return got == b"tok" * 1000

    assert run.threads(3, fn, timeout=60) == [True, True, True]
    del master


def test_store_world_timeout_names_the_missing_rank():
    store = dist.HashStore()
    w = StoreWorld(store, 0, 2, prefix="lonely", timeout=0.4)
    t0 = time.monotonic()
    with pytest.raises(dpl.TimeoutError, match="rank 1 did not arrive"):
        w.barrier()
    assert time.monotonic() - t0 < 5
    # the same through the oob a transport's init calls: a code, not an exception
    out = ctypes.create_string_buffer(8)
    rc = w.oob.allgather(None, ctypes.c_char_p(b"abcd"), 4, out)
    assert rc == dpl.errors.ETIMEDOUT
    assert "oob allgather: TimeoutError" in capi.last_error()
    assert "rank 1 did not arrive" in capi.last_error()
    assert isinstance(w._oob_error, dpl.TimeoutError)
    w.close()
    with pytest.raises(dpl.InvalidArgument, match="is closed"):
        w.oob
    with pytest.raises(dpl.InvalidArgument, match="not a torch.distributed Store"):
        StoreWorld(object(), 0, 1)


SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch.distributed as dist
    from dpl import world, run
    r, n = int(os.environ["DPL_RANK"]), int(os.environ["DPL_WORLD_SIZE"])
    port = int(os.environ["DPL_ROOT"].rsplit(":", 1)[1]) + 1
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=r,
                            world_size=n)
    w = world.current(timeout=20)
    res = {"kind": type(w).__name__, "rank": w.rank, "n": w.world_size,
           "helpers": [run.rank(), run.world_size()],
           "gather": [x.decode() for x in w.allgather(b"r%d" % r)]}
    with world.Transport.open(w, timeout=20) as t:
        res["transport"] = t.name
        if r == 0:
            t.send(1, 7, b"ping"); res["got"] = t.recv(1, 7, 4).decode()
        else:
            res["got"] = t.recv(0, 7, 4).decode(); t.send(0, 7, b"pong")
    w.close()
    dist.destroy_process_group()
    with open(os.path.join(sys.argv[1], "rank-%d.json" % r), "w") as f:
        json.dump(res, f)
    os._exit(0)  # skip torch's slow interpreter teardown
""")


def test_current_under_torch_distributed(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    src = str(Path(dpl.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("DPL_TRANSPORT", None)
    p = subprocess.run([sys.executable, "-m", "dpl.run", "-n", "2", "--timeout", "10",
                        str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    for r in range(2):
        res = json.loads((tmp_path / f"rank-{r}.json").read_text())
        assert res["kind"] == "StoreWorld" and (res["rank"], res["n"]) == (r, 2)
        assert res["helpers"] == [r, 2] and res["gather"] == ["r0", "r1"]
        assert res["transport"] == "shm" and res["got"] == ("pong" if r == 0 else "ping")
