"""How the ranks of a job meet (:class:`World`) and the transport they open
over that meeting (:class:`Transport`).

A world gives every rank its ``rank`` and the ``world_size``, bounded
collectives (:meth:`World.allgather`, :meth:`World.barrier`) and, in
``World.oob``, the out-of-band exchange (``struct dpl_oob``) a
transport's init uses, as the host of a transport does in C
(``dpl/transport.h``). Kinds of world:

* :class:`ThreadWorld`: the ranks are threads of this process
  (``dpl.run.threads``); its transport is ``inproc``.
* :class:`BootstrapWorld`: dpl's TCP rendezvous (``dpl/bootstrap.h``),
  from ``DPL_RANK``/``DPL_WORLD_SIZE``/``DPL_ROOT`` (``python -m dpl.run``)
  or torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``.
* :class:`StoreWorld`: a ``torch.distributed`` store (or any object with
  its ``set``/``get``/``add``/``wait``/``check``).

:func:`current` picks the world of the calling code. Every wait is bounded
by the world's ``timeout``; a rank that did not take part is named in a
:class:`dpl.TimeoutError`, one known to have failed in a
:class:`dpl.PeerError`.
"""

from __future__ import annotations

import abc
import ctypes
import itertools
import math
import os
import struct
import sys
import threading
import time
import weakref
from ctypes import byref, c_uint32, c_void_p
from typing import Any

from . import errors
from . import _transport_capi as capi

__all__ = ["World", "ThreadWorld", "BootstrapWorld", "StoreWorld", "Transport",
           "current", "default_transport"]

_E = errors._CODES
_names = itertools.count(1)


def _err(kind: str, msg: str, rank: int | None = None) -> errors.Error:
    """The dpl exception of code DPL_<kind> with ``msg`` (no C call)."""
    code, name = _E[kind], "DPL_" + kind
    if kind == "ETIMEDOUT":
        return errors.TimeoutError(code, name, msg)
    if kind == "EPEER":
        return errors.PeerError(code, name, msg, rank)
    if kind in ("EINVAL", "ERANGE"):
        return errors.InvalidArgument(code, name, msg)
    return errors.Error(code, name, msg)


def _seconds(x: Any, what: str) -> float:
    """``x`` as a positive, finite number of seconds (<= 49 days)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(x, bool) or not (0 < v <= 4.2e6):
        raise _err("EINVAL", f"{what}={x!r} is not a number of seconds in (0, 4.2e6]")
    return v


def _ms(seconds: float) -> int:
    return max(1, min(int(round(seconds * 1000)), 0xFFFFFFFF))


def _index(x: Any, what: str, lo: int, hi: int | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < lo or (hi is not None and x >= hi):
        want = f"in [{lo}, {hi})" if hi is not None else f">= {lo}"
        raise _err("EINVAL", f"{what}={x!r} is not an int {want}")
    return x


def _fresh_name() -> str:
    return f"dpl-py-{os.getpid()}-{next(_names)}"


class World(abc.ABC):
    """The ranks of one job and a bounded out-of-band exchange among them.

    Attributes:
        rank: this rank, in ``[0, world_size)``.
        world_size: ranks in the job (>= 1).
        timeout: seconds every collective may wait for the other ranks.

    Collectives are called by every rank, the same number of times, in the
    same order. One thread at a time per World object. Use as a context
    manager, or call :meth:`close`.
    """

    rank: int
    world_size: int
    timeout: float

    def __init__(self, rank: int, world_size: int, timeout: float):
        self.world_size = _index(world_size, "world_size", 1)
        self.rank = _index(rank, "rank", 0, self.world_size)
        self.timeout = _seconds(timeout, "timeout")
        self._closed = False
        self._oob_error: BaseException | None = None
        self._transports: weakref.WeakSet = weakref.WeakSet()

    # -- what each kind provides --
    @abc.abstractmethod
    def _allgather(self, data: bytes) -> list[bytes]:
        """Every rank's ``data``, by rank (bounded, collective)."""

    def _barrier(self) -> None:
        self._allgather(b"")

    def _make_oob(self) -> capi.Oob:
        return capi.python_oob(self)

    def _close(self) -> None:
        pass

    # -- the interface --
    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise _err("EINVAL", f"{self!r} is closed")

    def allgather(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Every rank contributes ``data`` (any length; lengths may differ);
        returns the contributions of ranks ``0..world_size-1`` on every rank.

        Blocks until every rank contributed, at most ``timeout`` seconds.
        Raises :class:`dpl.TimeoutError` naming the ranks that did not take
        part, :class:`dpl.PeerError` naming a rank that failed or left,
        :class:`dpl.Error` on I/O errors, ``TypeError`` for data that is not
        a bytes-like object.
        """
        self._check_open()
        return self._allgather(bytes(memoryview(data).cast("B")))

    def barrier(self) -> None:
        """Return once every rank entered the barrier; bounded and failing
        as :meth:`allgather`."""
        self._check_open()
        self._barrier()

    @property
    def oob(self) -> capi.Oob:
        """This world as a ``struct dpl_oob`` (a ctypes ``capi.Oob``) for a
        transport's init: pass ``ctypes.pointer(world.oob)`` in
        ``struct dpl_transport_params.oob``. The struct and its callbacks
        stay valid while the World is open. Its callbacks block as
        :meth:`allgather` does and return a ``DPL_E*`` code with the reason
        in dpl_last_error(); they must be called from the thread that uses
        the World."""
        self._check_open()
        if getattr(self, "_oob_struct", None) is None:
            self._oob_struct = self._make_oob()
        return self._oob_struct

    def close(self) -> None:
        """Leave the world (idempotent). Peers still waiting on this rank
        see it as gone. Does not close the transports opened over it."""
        if not self._closed:
            self._closed = True
            self._close()
            self._oob_struct = None

    def _close_transports(self) -> None:
        for t in list(self._transports):
            t.close()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size})"


# ---------------------------------------------------------------- threads

class _Round:
    __slots__ = ("parts", "count", "readers")

    def __init__(self, n: int):
        self.parts: list[bytes | None] = [None] * n
        self.count = 0
        self.readers = 0


class _Group:
    """The shared state of one ThreadWorld name."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self.cond = threading.Condition()
        self.rounds: dict[int, _Round] = {}
        self.joined = [False] * size
        self.gone: dict[int, str] = {}  # rank -> "failed (...)" / "closed its world"
        self.refs = 0


_groups: dict[str, _Group] = {}
_groups_lock = threading.Lock()


def _hold(name: str, size: int) -> _Group:
    """Take a reference on the group ``name`` of ``size`` ranks (made if new)."""
    with _groups_lock:
        g = _groups.get(name)
        if g is None:
            g = _groups[name] = _Group(name, size)
        elif g.size != size:
            raise _err("EINVAL", f"thread world '{name}' has {g.size} ranks, "
                       f"world_size={size} was asked for")
        g.refs += 1
        return g


def _release(g: _Group) -> None:
    with _groups_lock:
        g.refs -= 1
        if g.refs == 0 and _groups.get(g.name) is g:
            del _groups[g.name]


class ThreadWorld(World):
    """A world whose ranks are threads of this process, meeting under
    ``name`` (every rank passes the same name and world_size).

    Collectives use threading primitives and wait at most ``timeout``
    seconds. A rank that closed its world (or was marked failed by
    ``dpl.run.threads``) makes the collectives that still need it raise
    :class:`dpl.PeerError` naming it at once. Its transport is ``inproc``
    with ``world=name``. Raises :class:`dpl.InvalidArgument` for a world
    size other than the name's, :class:`dpl.Error` (DPL_EBUSY) when the
    rank is already taken.
    """

    def __init__(self, name: str, rank: int, world_size: int, timeout: float = 60.0):
        if not isinstance(name, str) or not name or len(name.encode()) > 100:
            raise _err("EINVAL", f"thread world name {name!r} is not a string of 1..100 bytes")
        super().__init__(rank, world_size, timeout)
        self.name = name
        self._seq = 0
        g = _hold(name, world_size)
        with g.cond:
            if g.joined[rank]:
                busy = True
            else:
                busy = False
                g.joined[rank] = True
                g.gone.pop(rank, None)
        if busy:
            _release(g)
            raise _err("EBUSY", f"rank {rank} of thread world '{name}' is taken")
        self._g = g

    def _allgather(self, data: bytes) -> list[bytes]:
        g, me = self._g, self.rank
        seq, self._seq = self._seq, self._seq + 1
        deadline = time.monotonic() + self.timeout
        with g.cond:
            rd = g.rounds.get(seq)
            if rd is None:
                rd = g.rounds[seq] = _Round(g.size)
            rd.parts[me] = data
            rd.count += 1
            if rd.count == g.size:
                g.cond.notify_all()
            while rd.count < g.size:
                missing = [r for r, p in enumerate(rd.parts) if p is None]
                gone = [r for r in missing if r in g.gone]
                if gone:
                    raise _err("EPEER", f"thread world '{g.name}': rank {gone[0]} "
                               f"{g.gone[gone[0]]} (rank {me} waited in collective {seq})",
                               gone[0])
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _err("ETIMEDOUT", f"thread world '{g.name}': rank {me} waited "
                               f"{self.timeout:g} s in collective {seq}; "
                               f"{_ranks(missing)} did not arrive")
                g.cond.wait(left)
            parts = [p for p in rd.parts if p is not None]
            rd.readers += 1
            if rd.readers == g.size:
                del g.rounds[seq]
            return parts

    def _fail(self, reason: str) -> None:
        """Mark this rank failed: peers waiting on it raise PeerError."""
        with self._g.cond:
            self._g.gone.setdefault(self.rank, reason)
            self._g.cond.notify_all()

    def _close(self) -> None:
        g = self._g
        with g.cond:
            g.gone.setdefault(self.rank, "closed its world")
            g.joined[self.rank] = False
            g.cond.notify_all()
        _release(g)

    def __repr__(self) -> str:
        return f"ThreadWorld({self.name!r}, rank={self.rank}, world_size={self.world_size})"


def _ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


# -------------------------------------------------------------- bootstrap

class BootstrapWorld(World):
    """dpl's TCP rendezvous (``dpl/bootstrap.h``): rank 0 listens on ``root``
    ("host:port"; None: from the environment, see :meth:`from_env`), the
    other ranks connect to it.

    Opening blocks until every rank arrived, at most ``timeout`` seconds,
    which also bounds every collective. Errors: :class:`dpl.InvalidArgument`
    (rank, world size or root malformed), :class:`dpl.TimeoutError` naming
    the ranks that never arrived, :class:`dpl.PeerError` naming a rank that
    died, :class:`dpl.Error` (DPL_EBUSY, DPL_EIO). Its ``oob`` is
    ``dpl_bootstrap_oob()``'s (C callbacks, no Python on the way).
    """

    def __init__(self, root: str | None, rank: int, world_size: int, timeout: float = 60.0):
        super().__init__(rank, world_size, timeout)
        if root is not None and not isinstance(root, str):
            raise _err("EINVAL", f"root={root!r} is not a 'host:port' string")
        self._root_arg = root.encode() if root is not None else None
        p = capi.BootstrapParams(rank, world_size, self._root_arg, _ms(self.timeout))
        h = c_void_p()
        errors.check(capi.boot().bootstrap_open(byref(p), byref(h)))
        self._h = h

    @classmethod
    def from_env(cls, timeout: float = 60.0) -> "BootstrapWorld":
        """Meet with rank, world size and root from the environment:
        ``DPL_RANK``, ``DPL_WORLD_SIZE``, ``DPL_ROOT``; else torchrun's
        ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (dpl then
        listens on MASTER_PORT + 1). Blocks and fails as the constructor;
        :class:`dpl.InvalidArgument` names a missing or malformed variable."""
        t = _seconds(timeout, "timeout")
        h = c_void_p()
        b = capi.boot()
        errors.check(b.bootstrap_open_env(_ms(t), byref(h)))
        self = cls.__new__(cls)
        World.__init__(self, int(b.bootstrap_rank(h)), int(b.bootstrap_world_size(h)), t)
        self._root_arg = None
        self._h = h
        return self

    @property
    def root(self) -> str:
        """The root address in use ("127.0.0.1:4711")."""
        self._check_open()
        buf = ctypes.create_string_buffer(512)
        n = errors.check(capi.boot().bootstrap_root(self._h, buf, len(buf)))
        return buf.raw[:n].decode()

    def _fixed(self, data: bytes) -> list[bytes]:
        n = len(data)
        out = ctypes.create_string_buffer(max(1, n * self.world_size))
        errors.check(capi.boot().bootstrap_allgather(self._h, data, n, out))
        raw = out.raw
        return [raw[r * n:(r + 1) * n] for r in range(self.world_size)]

    def _allgather(self, data: bytes) -> list[bytes]:
        lens = [struct.unpack("<Q", x)[0] for x in self._fixed(struct.pack("<Q", len(data)))]
        m = max(lens)
        if m == 0:
            return [b""] * self.world_size
        padded = data.ljust(m, b"\0")
        step = capi.DPL_BOOTSTRAP_BLOB_MAX
        chunks = [self._fixed(padded[o:o + step]) for o in range(0, m, step)]
        return [b"".join(c[r] for c in chunks)[:lens[r]] for r in range(self.world_size)]

    def _barrier(self) -> None:
        errors.check(capi.boot().bootstrap_barrier(self._h))

    def _make_oob(self) -> capi.Oob:
        o = capi.Oob()
        capi.boot().bootstrap_oob(self._h, byref(o))
        return o

    def check(self) -> None:
        """Non-blocking liveness check: raises :class:`dpl.PeerError` naming
        a rank that is gone (rank 0 sees every rank, the others rank 0)."""
        self._check_open()
        dead = c_uint32(capi.DPL_BOOTSTRAP_NO_RANK)
        rc = capi.boot().bootstrap_check(self._h, byref(dead))
        if rc < 0:
            exc = errors.error_for(rc)
            if isinstance(exc, errors.PeerError) and dead.value != capi.DPL_BOOTSTRAP_NO_RANK:
                exc.rank = dead.value
            raise exc

    def _close(self) -> None:
        capi.boot().bootstrap_close(self._h)
        self._h = None

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


# ------------------------------------------------------------------ store

class StoreWorld(World):
    """A world over a ``torch.distributed`` Store (TCPStore, FileStore,
    HashStore, PrefixStore ...; any object with ``set``, ``get``, ``add``,
    ``wait(keys, timedelta)``, ``check(keys)`` and, optionally,
    ``delete_key``). Every rank passes the same ``prefix``; keys are
    ``<prefix>/<world>/<round>/<rank>`` and are deleted once every rank
    read them. Construction does not block (it counts this rank's worlds
    with ``add``, so ranks create their StoreWorlds in the same order).

    Collectives wait at most ``timeout`` seconds (default 60) and raise
    :class:`dpl.TimeoutError` naming the ranks whose keys never came;
    store errors become :class:`dpl.Error` (DPL_EIO) with the cause
    chained. The ``oob`` callbacks run Python. Does not import torch.
    """

    def __init__(self, store: Any, rank: int, world_size: int, prefix: str = "dpl",
                 timeout: float = 60.0):
        super().__init__(rank, world_size, timeout)
        for m in ("set", "get", "add", "wait"):
            if not callable(getattr(store, m, None)):
                raise _err("EINVAL", f"store {store!r} has no {m}() (not a torch.distributed Store)")
        if not isinstance(prefix, str) or not prefix:
            raise _err("EINVAL", f"prefix={prefix!r} is not a non-empty string")
        self._store = store
        try:
            gen = int(store.add(f"{prefix}/worlds/{world_size}/{rank}", 1))
        except Exception as exc:
            raise _err("EIO", f"StoreWorld {prefix!r}: store.add failed: {exc}") from exc
        self._prefix = f"{prefix}/{gen}"
        self._seq = 0

    def _allgather(self, data: bytes) -> list[bytes]:
        import datetime

        s, n = self._store, self.world_size
        seq, self._seq = self._seq, self._seq + 1
        base = f"{self._prefix}/{seq}"
        keys = [f"{base}/{r}" for r in range(n)]
        where = f"StoreWorld {self._prefix!r}: rank {self.rank}, collective {seq}"
        try:
            s.set(keys[self.rank], data)
        except Exception as exc:
            raise _err("EIO", f"{where}: store.set failed: {exc}") from exc
        try:
            s.wait(keys, datetime.timedelta(seconds=self.timeout))
        except Exception as exc:
            missing = self._missing(keys)
            if missing is None:
                raise _err("ETIMEDOUT", f"{where}: store.wait failed ({exc}); "
                           "the store cannot tell which ranks are missing") from exc
            if missing:
                raise _err("ETIMEDOUT", f"{where}: waited {self.timeout:g} s; "
                           f"{_ranks(missing)} did not arrive") from exc
            raise _err("EIO", f"{where}: store.wait failed: {exc}") from exc
        try:
            parts = [bytes(s.get(k)) for k in keys]
            if int(s.add(f"{base}/read", 1)) == n:
                self._delete(keys + [f"{base}/read"])
        except Exception as exc:
            raise _err("EIO", f"{where}: store failed: {exc}") from exc
        return parts

    def _missing(self, keys: list[str]) -> list[int] | None:
        try:
            return [r for r, k in enumerate(keys) if not self._store.check([k])]
        except Exception:  # noqa: BLE001 - a store without check
            return None

    def _delete(self, keys: list[str]) -> None:
        d = getattr(self._store, "delete_key", None)
        if d is None:
            return
        for k in keys:
            try:
                d(k)
            except Exception:  # noqa: BLE001 - a store that cannot delete keeps them
                return

    def _close(self) -> None:
        self._store = None

    def __repr__(self) -> str:
        return f"StoreWorld({self._prefix!r}, rank={self.rank}, world_size={self.world_size})"


# ---------------------------------------------------------------- current

_local = threading.local()
_process_world: World | None = None
_process_lock = threading.Lock()


def _set_current(world: World | None) -> None:
    """Make ``world`` the calling thread's world (None: unset)."""
    _local.world = world


def _thread_world() -> World | None:
    w = getattr(_local, "world", None)
    return w if w is not None and not w.closed else None


def _torch_dist() -> Any:
    """torch.distributed when torch is already imported and its default
    group is initialised, else None (never imports torch)."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:  # noqa: BLE001 - a torch without distributed
        return None


def current(timeout: float = 60.0) -> World:
    """The world of the calling code, in this order:

    1. the calling thread's :class:`ThreadWorld`, set by ``dpl.run.threads``;
    2. torch.distributed's default group, when torch is already imported and
       ``dist.is_initialized()``: a :class:`StoreWorld` over its default
       store with ``dist.get_rank()`` and ``dist.get_world_size()``;
    3. :meth:`BootstrapWorld.from_env` when ``DPL_RANK`` or ``RANK`` is in
       the environment (``python -m dpl.run``, torchrun), checked by
       :func:`dpl.run.env_rank` (the C library's reading, as the join's);
    4. otherwise a world of one rank (a :class:`ThreadWorld` of size 1).

    Cases 2-4 are made once per process and returned again until closed;
    making them is collective (case 3 blocks up to ``timeout`` until every
    rank arrived). Thread-safe. Errors: those of the world made.
    """
    w = _thread_world()
    if w is not None:
        return w
    global _process_world
    with _process_lock:
        if _process_world is not None and not _process_world.closed:
            return _process_world
        t = _seconds(timeout, "timeout")
        dist = _torch_dist()
        if dist is not None:
            store = dist.distributed_c10d._get_default_store()
            w = StoreWorld(store, dist.get_rank(), dist.get_world_size(), timeout=t)
        else:
            from .run import env_rank   # (dpl.run imports this module)
            w = BootstrapWorld.from_env(t) if env_rank() is not None else \
                ThreadWorld(_fresh_name(), 0, 1, timeout=t)
        _process_world = w
        return w


def default_transport(world: World) -> str:
    """The transport :meth:`Transport.open` picks for ``world``: env
    ``DPL_TRANSPORT`` when set, else ``inproc`` for a ThreadWorld or a world
    of one rank, else ``shm``."""
    env = os.environ.get("DPL_TRANSPORT")
    if env:
        return env
    return "inproc" if isinstance(world, ThreadWorld) or world.world_size == 1 else "shm"


from ._transport import Transport  # noqa: E402  (defined there, part of dpl.world)

Transport.__module__ = __name__
