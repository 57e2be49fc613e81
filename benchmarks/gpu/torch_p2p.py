#!/usr/bin/env python3
"""PyTorch's reference for cudaipc: torch.distributed NCCL send/recv
between two processes on GPU 0 (the same GPU, as check.sh runs cudaipc),
1 MiB to 256 MiB one way, and the 8-byte ping-pong latency.

    python3 torch_p2p.py [--json FILE] [--reps N]

Prints a table and writes JSON. Where it cannot run (no torch, no GPU,
NCCL refusing two ranks on one GPU) it prints the reason, writes it to
the JSON as "skipped" and exits 77.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, port: int, reps: int, q) -> None:
    import torch
    import torch.distributed as dist

    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=2,
                                device_id=torch.device("cuda", 0))
        peer = 1 - rank
        out = {"bandwidth": []}
        buf = torch.empty(SIZES[-1], dtype=torch.uint8, device="cuda")
        for size in SIZES:
            t = buf[:size]
            rounds = []
            for r in range(reps + 1):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(8):
                    if rank == 0:
                        dist.send(t, peer)
                    else:
                        dist.recv(t, peer)
                torch.cuda.synchronize()
                if r:
                    rounds.append(8 * size / (time.perf_counter() - t0))
            out["bandwidth"].append({"bytes": size,
                                     "GBps": statistics.median(rounds) / 1e9})
        small = buf[:8]
        lat = []
        for k in range(1100):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(small, peer)
                dist.recv(small, peer)
            else:
                dist.recv(small, peer)
                dist.send(small, peer)
            torch.cuda.synchronize()
            if k >= 100:
                lat.append((time.perf_counter() - t0) / 2 * 1e6)
        out["latency_8B_us"] = statistics.median(lat)
        dist.destroy_process_group()
        if rank == 0:
            q.put(out)
    except Exception as e:  # reported by the parent as the skip reason
        q.put({"skipped": f"rank {rank}: {type(e).__name__}: {e}"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()
    res = {"bench": "torch_nccl_p2p", "reps": a.reps}
    try:
        import torch
        import torch.multiprocessing as mp
        if not torch.cuda.is_available():
            res["skipped"] = "torch sees no GPU"
        elif not torch.distributed.is_nccl_available():
            res["skipped"] = "torch was built without NCCL"
    except ImportError as e:
        res["skipped"] = f"no torch: {e}"
    if "skipped" not in res:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, port, a.reps, q))
                 for r in range(2)]
        for p in procs:
            p.start()
        try:
            got = q.get(timeout=a.timeout)
        except Exception:
            got = {"skipped": f"no result within {a.timeout:.0f} s"}
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        res.update(got)
    if "skipped" in res:
        print(f"torch NCCL send/recv: skipped: {res['skipped']}")
    else:
        print("torch.distributed NCCL send/recv, two processes, GPU 0")
        print(f"{'bytes':>12} {'GB/s':>10}")
        for b in res["bandwidth"]:
            print(f"{b['bytes']:>12} {b['GBps']:>10.1f}")
        print(f"8-byte ping-pong, one way: {res['latency_8B_us']:.2f} us")
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.json)
    return 77 if "skipped" in res else 0


if __name__ == "__main__":
    sys.exit(main())
