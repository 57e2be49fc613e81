"""Free TCP ports on 127.0.0.1 for tests whose ranks (or torch's store)
bind them later.

A port found by binding port 0 comes from the kernel's ephemeral range,
the range every outgoing connection also takes its local port from: with
many tests connecting at once, another process may hold it by the time it
is bound again. So ports are drawn at random from the 8,000 below that
range, where the kernel places nothing by itself, and checked free by
binding them (with SO_REUSEADDR, as dpl's rendezvous and torch's store
bind); only when none is found there is port 0's answer used.
"""
from __future__ import annotations

import random
import socket


def _try(port: int) -> int | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return None
        return s.getsockname()[1]


def free_port(n: int = 1) -> int:
    """The first of ``n`` consecutive ports on 127.0.0.1 that are all free
    now. Raises OSError when none is found."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo = max(1024, low - 8000)
    draw = random.Random()
    for _ in range(200):
        p = draw.randrange(lo, low - n)
        if all(_try(p + k) == p + k for k in range(n)):
            return p
    for _ in range(50):
        p = _try(0)
        if p is not None and p + n <= 65536 and all(_try(p + k) == p + k for k in range(1, n)):
            return p
    raise OSError(f"no {n} free consecutive ports on 127.0.0.1")
