"""dpl.world.Transport: a transport context (``dpl_transport *``) opened
over a :class:`dpl.world.World`, and blocking, bounded helpers to move
application messages on it.

Part of :mod:`dpl.world` (import it from there); kept in a file of its own.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from ctypes import byref, c_void_p
from typing import Any

from . import _lib, errors
from . import _transport_capi as capi

_E = errors._CODES
_NAME = re.compile(r"[a-z0-9_]+\Z")
_ops_cache: dict[str, int] = {}
_load_lock = threading.Lock()


def _load(name: str) -> int:
    """The ops table of transport ``name`` (a module name or a path to a
    .so), loaded once. A module name is looked for as
    ``libdpl-transport-<name>.so`` along dpl's library path (DPL_LIBRARY_PATH,
    the package), then through the dynamic linker's search path."""
    from .world import _err

    with _load_lock:
        ops = _ops_cache.get(name)
        if ops is not None:
            return ops
        if "/" in name:
            target = name
        elif not _NAME.match(name):
            raise _err("EINVAL", f"transport name {name!r} is not lower-case letters, "
                       "digits and '_' (or a path to a .so)")
        else:
            try:
                target = str(_lib.find(f"dpl-transport-{name}"))
            except FileNotFoundError:
                target = name
            try:  # what every transport module links: loaded RTLD_GLOBAL first
                _lib.load("dpl-backend")
            except OSError:
                pass
        out = c_void_p()
        errors.check(capi.core().transport_load(target.encode(), byref(out)))
        _ops_cache[name] = out.value
        return out.value


def _agree(world: Any, exc: BaseException | None, what: str) -> None:
    """Tell every rank whether this one managed ``what``; raise this rank's
    own ``exc``, else a PeerError naming the lowest rank that failed."""
    from .world import _err

    if world.world_size == 1:
        if exc is not None:
            raise exc
        return
    blob = b"0" if exc is None else b"1" + str(exc).encode("utf-8", "replace")[:2000]
    try:
        parts = world.allgather(blob)
    except errors.Error as gather_exc:
        if exc is not None and exc.__cause__ is None:
            raise exc from gather_exc
        if exc is not None:
            raise exc  # keeps its own cause (an exchange's exception)
        raise
    if exc is not None:
        raise exc
    bad = [r for r, p in enumerate(parts) if p[:1] != b"0"]
    if bad:
        r = bad[0]
        raise _err("EPEER", f"rank {r} could not {what}: "
                   f"{parts[r][1:].decode('utf-8', 'replace')}", r)


class Transport:
    """An open transport context of one rank (``dpl_transport *``).

    Make one with :meth:`open` (collective over the world). ``_ptr`` is the
    ``dpl_transport *`` as a ``ctypes.c_void_p`` for the C runner
    (``struct dpl_runner_params.transport``); it is valid until
    :meth:`close`. Attributes: ``rank``, ``world_size``, ``name`` (the
    table's), ``caps`` (``DPL_TRANSPORT_CAP_*`` bits), ``peer_failure``
    (the transport detects every peer death).

    Threads: one thread at a time (a second thread's call raises
    :class:`dpl.Error` DPL_EBUSY instead of racing); the C runner that
    uses ``_ptr`` must not step while :meth:`send`/:meth:`recv` run.
    """

    _ptr: c_void_p | None

    def __init__(self, *_a: Any, **_k: Any):
        raise TypeError("use Transport.open(world, name=None, options=None, timeout=60.0)")

    @classmethod
    def open(cls, world: Any, name: str | None = None, options: str | None = None,
             timeout: float = 60.0) -> "Transport":
        """Open transport ``name`` as ``world.rank`` of ``world.world_size``
        ranks, with the world's out-of-band exchange (``world.oob``).

        ``name``: a module name ("inproc", "shm", "ucx", "ofi") or a path to
        a transport .so; None picks :func:`dpl.world.default_transport`
        (env ``DPL_TRANSPORT``, else "inproc" for a ThreadWorld or a world
        of one rank, else "shm"). ``options``: the backend's
        "key=value,..." string (its README lists the keys, e.g. shm's
        ``ring``, ``eager``, ``spin_us``); None takes env
        ``DPL_TRANSPORT_OPTIONS`` when set and non-empty (how a script
        that opens its transport through dpl.torch is tuned from outside,
        as UCX's and NCCL's variables do), else the backend's defaults.
        ``timeout``: params.timeout_ms (how long
        init waits for peers, and the liveness timeout).

        Collective: every rank of the world calls it, in the same order
        as the world's other collectives; it blocks until every rank
        opened (or failed to) and raises on every rank when one failed:
        this rank's own error, or :class:`dpl.PeerError` naming the
        lowest rank that failed and why. Other errors:
        :class:`dpl.InvalidArgument` (bad name, options, timeout;
        "inproc" over processes), :class:`dpl.Error` (DPL_ENOENT: module
        not found, DPL_EABI, DPL_EBUSY), :class:`dpl.TimeoutError`.
        """
        from .world import ThreadWorld, World, _err, _ms, _seconds, default_transport

        if not isinstance(world, World):
            raise _err("EINVAL", f"world={world!r} is not a dpl.world.World")
        world._check_open()
        if name is None:
            name = default_transport(world)
        if not isinstance(name, str) or not name:
            raise _err("EINVAL", f"transport name {name!r} is not a non-empty string")
        if options is None:
            options = os.environ.get("DPL_TRANSPORT_OPTIONS") or None
        if options is not None and not isinstance(options, str):
            raise _err("EINVAL", f"options={options!r} is not a 'key=value,...' string")
        t = _seconds(timeout, "timeout")
        n, me = world.world_size, world.rank
        if name == "inproc" and n > 1 and not isinstance(world, ThreadWorld):
            raise _err("EINVAL", f"transport 'inproc' joins threads of one process, but "
                       f"{world!r} spans processes: use 'shm' (one host), 'ucx' or 'ofi'")
        ops, exc = None, None
        try:
            ops = _load(name)
        except errors.Error as e:
            exc = e
        _agree(world, exc, "load the transport")

        k = getattr(world, "_opened", 0)
        world._opened = k + 1
        if isinstance(world, ThreadWorld):
            wname = world.name if k == 0 else f"{world.name}#{k}"
        else:
            from .world import _fresh_name
            wname = _fresh_name()
        self = object.__new__(cls)
        self._ptr = None
        self._busy = threading.Lock()
        self._orphans: list = []
        self._keep = (wname.encode(), options.encode() if options is not None else None,
                      world.oob)
        p = capi.TransportParams(me, n, ctypes.pointer(self._keep[2]), self._keep[0],
                                 self._keep[1], _ms(t), 0)
        out = c_void_p()
        world._oob_error = None
        rc = capi.core().transport_open(ops, byref(p), byref(out))
        exc = None
        if rc < 0:
            exc = errors.error_for(rc)
            cause, world._oob_error = world._oob_error, None
            if cause is not None and not isinstance(cause, Exception):
                raise cause  # KeyboardInterrupt or SystemExit inside the exchange
            exc.__cause__ = cause
        else:
            self._ptr = out
        try:
            _agree(world, exc, "open the transport")
        except BaseException:
            self.close()
            raise
        head = ctypes.cast(ops, ctypes.POINTER(capi.TransportOpsHead)).contents
        self.name = (head.name or b"").decode()
        self.caps = int(head.caps)
        self.peer_failure = bool(self.caps & capi.DPL_TRANSPORT_CAP_PEER_FAILURE)
        self.rank, self.world_size = me, n
        self.req_size = int(capi.core().transport_req_size(self._ptr))
        self.timeout = t
        world._transports.add(self)
        return self

    # -- helpers --
    def _enter(self) -> None:
        from .world import _err

        if not self._ptr:
            raise _err("EINVAL", f"transport '{getattr(self, 'name', '?')}' of rank "
                       f"{getattr(self, 'rank', '?')} is closed")
        if not self._busy.acquire(blocking=False):
            raise _err("EBUSY", f"transport '{self.name}' of rank {self.rank} is in use "
                       "by another thread (one thread at a time)")

    def _check_peer_tag(self, peer: Any, tag: Any) -> int:
        from .world import _err, _index

        _index(peer, "peer", 0, self.world_size)
        if peer == self.rank:
            raise _err("EINVAL", f"peer={peer} is this rank")
        if isinstance(tag, bool) or not isinstance(tag, int) or not (
                0 <= tag <= capi.DPL_RUNNER_APP_TAG_MAX):
            raise _err("EINVAL", f"tag={tag!r} is not an int in [0, 2**57)")
        return capi.runner_app_tag(tag)

    def _run(self, send: bool, peer: int, tag: int, ptr: int | None, n: int,
             timeout: float | None, keep: Any) -> None:
        """Post one request and wait for it, at most ``timeout`` seconds."""
        from .world import _err, _seconds

        t = self.timeout if timeout is None else _seconds(timeout, "timeout")
        what = (f"rank {self.rank}: {'send to' if send else 'receive from'} rank {peer} "
                f"(tag {tag}, {n} bytes)")
        c = capi.core()
        raw = ctypes.create_string_buffer(self.req_size + 64)
        req = (ctypes.addressof(raw) + 63) & ~63  # aligned for any type
        post = c.transport_isend if send else c.transport_irecv
        deadline = time.monotonic() + t
        wire = capi.runner_app_tag(tag)
        before = capi.last_error()
        while True:
            rc = post(self._ptr, req, peer, wire, ptr, n, capi.DPL_MEM_HOST)
            if rc != _E["EAGAIN"]:
                break
            if time.monotonic() > deadline:
                raise _err("ETIMEDOUT", f"{what}: could not post within {t:g} s")
            c.transport_progress(self._ptr)
            c.transport_wait(self._ptr, 1_000_000)
        if rc < 0:
            raise self._error(rc, what, before, peer)
        while True:
            c.transport_progress(self._ptr)
            rc = c.transport_test(self._ptr, req)
            if rc != _E["EAGAIN"]:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                rc = self._abandon(req, raw, keep)
                if rc == 0:
                    return
                if rc == _E["ECANCELED"] or rc == _E["EAGAIN"]:
                    raise _err("ETIMEDOUT", f"{what} did not complete within {t:g} s", peer)
                break
            c.transport_wait(self._ptr, int(min(left, 0.01) * 1e9) + 1)
        if rc != 0:
            raise self._error(rc, what, before, peer)

    @staticmethod
    def _error(rc: int, what: str, before: str, peer: int) -> errors.Error:
        """The exception of code ``rc`` for ``what``, with dpl_last_error()
        when the failing call set one (else the code's text)."""
        now = capi.last_error()
        detail = now if now and now != before else capi.core().strerror(rc).decode()
        exc = errors.error_for(rc, f"{what}: {detail}")
        if isinstance(exc, errors.PeerError):
            exc.rank = peer
        return exc

    def _abandon(self, req: int, raw: Any, keep: Any) -> int:
        """Cancel a request past its deadline; its completion code, or
        DPL_EAGAIN when it did not complete within a second (its storage
        and buffer are then kept until close)."""
        c = capi.core()
        c.transport_cancel(self._ptr, req)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            c.transport_progress(self._ptr)
            rc = c.transport_test(self._ptr, req)
            if rc != _E["EAGAIN"]:
                return rc
            c.transport_wait(self._ptr, 1_000_000)
        self._orphans.append((raw, keep))
        return _E["EAGAIN"]

    # -- the interface --
    def send(self, peer: int, tag: int, data: Any, timeout: float | None = None) -> None:
        """Send ``data`` (bytes or any C-contiguous buffer) to rank ``peer``
        on the application tag ``DPL_RUNNER_APP_TAG(tag)`` (``0 <= tag <
        2**57``, never used by the runner); the peer receives it with
        :meth:`recv` of the same tag and exactly ``len(data)`` bytes.

        Blocks until the send completed (it may wait for the matching
        receive), at most ``timeout`` seconds (default: the open's).
        Raises :class:`dpl.TimeoutError` naming the peer,
        :class:`dpl.PeerError` when the peer failed, :class:`dpl.Error`
        DPL_ETRUNC when the receiver expected another length,
        :class:`dpl.InvalidArgument` for a bad peer or tag. ``data`` is
        only read; it is not kept after the call returns.
        """
        self._check_peer_tag(peer, tag)
        if isinstance(data, bytes):
            keep, n = data, len(data)
            ptr = ctypes.cast(ctypes.c_char_p(data), c_void_p).value if n else None
        else:
            mv = memoryview(data).cast("B")
            n = mv.nbytes
            if mv.readonly:
                keep = mv.tobytes()
                ptr = ctypes.cast(ctypes.c_char_p(keep), c_void_p).value if n else None
            else:
                keep = (ctypes.c_char * n).from_buffer(mv) if n else None
                ptr = ctypes.addressof(keep) if n else None
        self._enter()
        try:
            self._run(True, peer, tag, ptr, n, timeout, keep)
        finally:
            self._busy.release()

    def recv(self, peer: int, tag: int, nbytes: int, timeout: float | None = None) -> bytes:
        """Receive exactly ``nbytes`` bytes from rank ``peer`` on the
        application tag ``tag`` (see :meth:`send`) and return them.

        Blocks at most ``timeout`` seconds (default: the open's). A message
        of another length raises :class:`dpl.Error` DPL_ETRUNC; other
        errors as :meth:`send`.
        """
        from .world import _index

        self._check_peer_tag(peer, tag)
        _index(nbytes, "nbytes", 0)
        buf = ctypes.create_string_buffer(max(1, nbytes))
        self._enter()
        try:
            self._run(False, peer, tag, ctypes.addressof(buf) if nbytes else None,
                      nbytes, timeout, buf)
        finally:
            self._busy.release()
        return buf.raw[:nbytes]

    def recv_into(self, peer: int, tag: int, out: Any, timeout: float | None = None) -> None:
        """Like :meth:`recv`, into the writable C-contiguous buffer ``out``
        (a message of exactly its size, in bytes)."""
        self._check_peer_tag(peer, tag)
        mv = memoryview(out).cast("B")
        if mv.readonly:
            from .world import _err
            raise _err("EINVAL", f"out={type(out).__name__} is a read-only buffer")
        n = mv.nbytes
        keep = (ctypes.c_char * n).from_buffer(mv) if n else None
        self._enter()
        try:
            self._run(False, peer, tag, ctypes.addressof(keep) if n else None, n,
                      timeout, keep)
        finally:
            self._busy.release()

    def progress(self) -> int:
        """One non-blocking dpl_transport_progress(): the number of requests
        that completed; raises when the context is broken."""
        self._enter()
        try:
            return errors.check(capi.core().transport_progress(self._ptr))
        finally:
            self._busy.release()

    def attach(self, user: Any) -> None:
        """Register ``user`` (an object with ``close()``, e.g. a dpl.Runner)
        to be closed before this transport closes. Held strongly until
        :meth:`detach`: a weak reference would be cleared before the
        finalisers of a garbage cycle run, and the runner would then be
        destroyed after its transport."""
        if getattr(self, "_users", None) is None:
            self._users = []
        if not any(u is user for u in self._users):
            self._users.append(user)

    def detach(self, user: Any) -> None:
        """Undo :meth:`attach` (no-op when not attached)."""
        users = getattr(self, "_users", None)
        if users is not None:
            self._users = [u for u in users if u is not user]

    @property
    def closed(self) -> bool:
        """True once closed."""
        return not self._ptr

    def close(self) -> None:
        """dpl_transport_close(): leave the job (peers see this rank as
        failed from now on); outstanding requests are cancelled. Does not
        block on peers. Idempotent."""
        for user in list(getattr(self, "_users", ())):
            user.close()    # runners over this transport go first
        ptr, self._ptr = self._ptr, None
        if ptr:
            capi.core().transport_close(ptr)
        self._orphans = []

    def __enter__(self) -> "Transport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_ptr", None):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"rank {self.rank} of {self.world_size}"
        return f"Transport({getattr(self, 'name', '?')!r}, {state})"
