"""ctypes mirror of <dpl/transport.h>, <dpl/transport_load.h> and
<dpl/bootstrap.h>: struct dpl_oob, struct dpl_transport_params, the head of
struct dpl_transport_ops, struct dpl_bootstrap_params, and the prototypes
of the functions dpl.world calls.

Field order and types follow the headers exactly; the tests compare
``ctypes.sizeof`` and the offsets with what the C compiler gives.

Every function is declared on a function object of its own
(``lib["name"]``), so these prototypes never clash with another module's
declaration of the same symbol on the shared ``CDLL``.
"""

from __future__ import annotations

import builtins
import ctypes
import threading
import weakref
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_size_t,
                    c_uint32, c_uint64, c_void_p)
from types import SimpleNamespace
from typing import Any

from . import _lib

DPL_TRANSPORT_ABI_VERSION = 2
DPL_TAG_BITS = 60
DPL_TAG_MAX = (1 << DPL_TAG_BITS) - 1
DPL_OOB_BLOB_MAX = 4096
DPL_BOOTSTRAP_BLOB_MAX = 4096
DPL_BOOTSTRAP_NO_RANK = 0xFFFFFFFF
DPL_TRANSPORT_CAP_PEER_FAILURE = 1 << 0
DPL_TRANSPORT_CAP_MEM_CUDA = 1 << 1
DPL_TRANSPORT_CAP_IN_PROCESS = 1 << 4
DPL_MEM_HOST = 0
DPL_MEM_CUDA = 1

# <dpl/runner.h>: tags an application may use on a runner's transport.
DPL_RUNNER_APP_TAG_MAX = (1 << 57) - 1


def runner_app_tag(x: int) -> int:
    """DPL_RUNNER_APP_TAG(x): ``(7 << 57) | (x & DPL_RUNNER_APP_TAG_MAX)``."""
    return (7 << 57) | (x & DPL_RUNNER_APP_TAG_MAX)


# struct dpl_oob
OOB_ALLGATHER_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p)
OOB_BARRIER_FN = CFUNCTYPE(c_int, c_void_p)


class Oob(Structure):
    """struct dpl_oob: allgather(user, mine, len, all), barrier(user), user."""

    _fields_ = [("allgather", OOB_ALLGATHER_FN), ("barrier", OOB_BARRIER_FN),
                ("user", c_void_p)]


class TransportParams(Structure):
    """struct dpl_transport_params."""

    _fields_ = [
        ("rank", c_uint32), ("world_size", c_uint32), ("oob", POINTER(Oob)),
        ("world", c_char_p), ("options", c_char_p), ("timeout_ms", c_uint32),
        ("reserved0", c_uint32),
    ]


class TransportOpsHead(Structure):
    """The leading members of struct dpl_transport_ops (those before the
    function pointers), to read a loaded table's name and capabilities."""

    _fields_ = [
        ("abi_version", c_uint32), ("size", c_uint32), ("name", c_char_p),
        ("caps", c_uint64), ("ctx_size", c_size_t), ("req_size", c_size_t),
    ]


class BootstrapParams(Structure):
    """struct dpl_bootstrap_params."""

    _fields_ = [("rank", c_uint32), ("world_size", c_uint32),
                ("root", c_char_p), ("timeout_ms", c_uint32)]


# The C layouts these mirror, on an LP64 platform: {name: (size, offsets)}.
EXPECTED_LAYOUT = {
    "dpl_oob": (24, {"allgather": 0, "barrier": 8, "user": 16}),
    "dpl_transport_params": (40, {"rank": 0, "world_size": 4, "oob": 8,
                                  "world": 16, "options": 24,
                                  "timeout_ms": 32, "reserved0": 36}),
    "dpl_bootstrap_params": (24, {"rank": 0, "world_size": 4, "root": 8,
                                  "timeout_ms": 16}),
}
MIRRORS = {"dpl_oob": Oob, "dpl_transport_params": TransportParams,
           "dpl_bootstrap_params": BootstrapParams}


def layout(cls: type[Structure]) -> tuple[int, dict[str, int]]:
    """(sizeof, {field: offset}) of a ctypes mirror."""
    return ctypes.sizeof(cls), {f[0]: getattr(cls, f[0]).offset for f in cls._fields_}


_CORE_PROTOS = {
    "dpl_transport_load": (c_int, [c_char_p, POINTER(c_void_p)]),
    "dpl_transport_open": (c_int, [c_void_p, POINTER(TransportParams), POINTER(c_void_p)]),
    "dpl_transport_close": (None, [c_void_p]),
    "dpl_transport_ops": (c_void_p, [c_void_p]),
    "dpl_transport_rank": (c_uint32, [c_void_p]),
    "dpl_transport_world_size": (c_uint32, [c_void_p]),
    "dpl_transport_isend": (c_int, [c_void_p, c_void_p, c_uint32, c_uint64,
                                    c_void_p, c_size_t, c_uint32]),
    "dpl_transport_irecv": (c_int, [c_void_p, c_void_p, c_uint32, c_uint64,
                                    c_void_p, c_size_t, c_uint32]),
    "dpl_transport_test": (c_int, [c_void_p, c_void_p]),
    "dpl_transport_progress": (c_int, [c_void_p]),
    "dpl_transport_cancel": (c_int, [c_void_p, c_void_p]),
    "dpl_transport_wait": (c_int, [c_void_p, c_uint64]),
    "dpl_transport_req_size": (c_size_t, [c_void_p]),
    "dpl_set_error": (c_int, [c_int, c_char_p, c_char_p]),
    "dpl_last_error": (c_char_p, []),
    "dpl_strerror": (c_char_p, [c_int]),
}

_BOOT_PROTOS = {
    "dpl_bootstrap_open": (c_int, [POINTER(BootstrapParams), POINTER(c_void_p)]),
    "dpl_bootstrap_open_env": (c_int, [c_uint32, POINTER(c_void_p)]),
    "dpl_bootstrap_env_rank": (c_int, [POINTER(c_uint32), POINTER(c_uint32)]),
    "dpl_bootstrap_rank": (c_uint32, [c_void_p]),
    "dpl_bootstrap_world_size": (c_uint32, [c_void_p]),
    "dpl_bootstrap_root": (c_int, [c_void_p, c_char_p, c_size_t]),
    "dpl_bootstrap_allgather": (c_int, [c_void_p, c_void_p, c_size_t, c_void_p]),
    "dpl_bootstrap_barrier": (c_int, [c_void_p]),
    "dpl_bootstrap_check": (c_int, [c_void_p, POINTER(c_uint32)]),
    "dpl_bootstrap_oob": (None, [c_void_p, POINTER(Oob)]),
    "dpl_bootstrap_close": (None, [c_void_p]),
}

_lock = threading.Lock()
_core: SimpleNamespace | None = None
_boot: SimpleNamespace | None = None


def _declare(lib: ctypes.CDLL, protos: dict) -> SimpleNamespace:
    ns = {}
    for name, (res, args) in protos.items():
        f = lib[name]  # a function object of its own, not the shared attribute
        f.restype = res
        f.argtypes = args
        ns[name[len("dpl_"):]] = f
    return SimpleNamespace(**ns)


def core() -> SimpleNamespace:
    """The transport layer's functions of libdpl, declared once; attribute
    names drop the ``dpl_`` prefix (``core().transport_open``)."""
    global _core
    with _lock:
        if _core is None:
            _core = _declare(_lib.load("dpl"), _CORE_PROTOS)
        return _core


def boot() -> SimpleNamespace:
    """libdpl-bootstrap's functions, declared once (``boot().bootstrap_open``)."""
    global _boot
    with _lock:
        if _boot is None:
            _boot = _declare(_lib.load("dpl-bootstrap"), _BOOT_PROTOS)
        return _boot


def set_error(code: int, message: str) -> int:
    """Record ``message`` as the calling thread's dpl_last_error() and return
    ``code`` (dpl_set_error(code, "%s", message))."""
    return core().set_error(code, b"%s", message.encode("utf-8", "replace"))


def last_error() -> str:
    """The calling thread's dpl_last_error()."""
    return (core().last_error() or b"").decode("utf-8", "replace")


def python_oob(world: Any) -> Oob:
    """A struct dpl_oob whose callbacks run ``world._allgather(bytes) ->
    list[bytes]`` and ``world._barrier()`` (Python) for a transport's init.

    A callback never lets an exception into C: it stores it in
    ``world._oob_error``, records the message with dpl_set_error() and
    returns its code (a dpl.Error's own, DPL_ETIMEDOUT for a TimeoutError,
    DPL_EIO otherwise). The callbacks hold ``world`` weakly; the struct
    must be kept alive by its owner while a transport's init runs.
    """
    from . import errors

    codes = errors._CODES
    ref = weakref.ref(world)

    def fail(what: str, exc: BaseException) -> int:
        w = ref()
        if isinstance(exc, errors.Error):
            code = exc.code
        elif isinstance(exc, builtins.TimeoutError):
            code = codes["ETIMEDOUT"]
        else:
            code = codes["EIO"]
        if w is not None:
            w._oob_error = exc
        return set_error(code, f"{w!r} oob {what}: {type(exc).__name__}: {exc}")

    def allgather(_user: Any, mine: int, n: int, out: int) -> int:
        try:
            w = ref()
            if w is None or w.closed:
                return set_error(codes["EIO"], "oob allgather: the world is closed")
            parts = w._allgather(ctypes.string_at(mine, n) if n else b"")
            for r, p in enumerate(parts):
                if len(p) != n:
                    return set_error(
                        codes["EINVAL"], f"{w!r} oob allgather: rank {r} gave {len(p)} "
                        f"bytes, rank {w.rank} {n} (every rank must pass the same len)")
            if n:
                ctypes.memmove(out, b"".join(parts), n * len(parts))
            return 0
        except BaseException as exc:  # noqa: BLE001 - nothing may cross into C
            return fail("allgather", exc)

    def barrier(_user: Any) -> int:
        try:
            w = ref()
            if w is None or w.closed:
                return set_error(codes["EIO"], "oob barrier: the world is closed")
            w._barrier()
            return 0
        except BaseException as exc:  # noqa: BLE001 - nothing may cross into C
            return fail("barrier", exc)

    return Oob(OOB_ALLGATHER_FN(allgather), OOB_BARRIER_FN(barrier), None)
