"""dpl's error codes as Python exceptions.

Every C call that returns a ``DPL_E*`` code goes through :func:`check`,
which raises the exception of that code with the message of
``dpl_last_error()`` (the calling thread's detailed message).
"""

from __future__ import annotations

import builtins
import ctypes
import errno as _errno

from . import _lib


class Error(Exception):
    """A dpl call failed.

    Attributes:
        code: the negative ``DPL_E*`` value (e.g. ``-22``).
        name: its symbolic name (``"DPL_EINVAL"``).
        message: dpl's detailed message (``dpl_last_error()``).
    """

    def __init__(self, code: int, name: str, message: str):
        super().__init__(f"{name}: {message}" if message else name)
        self.code = code
        self.name = name
        self.message = message


class InvalidArgument(Error, ValueError):
    """DPL_EINVAL, DPL_ERANGE, DPL_EPARSE, DPL_ESCHED, DPL_EDEADLOCK: the
    caller passed something dpl refuses (the message names the value)."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """DPL_ETIMEDOUT: a bounded wait ran out (the message names the peer)."""


class PeerError(Error):
    """DPL_EPEER: another rank failed or was lost.

    Attributes:
        rank: the world rank named as the cause, or None when unknown.
    """

    def __init__(self, code: int, name: str, message: str, rank: int | None = None):
        super().__init__(code, name, message)
        self.rank = rank


class CallbackError(Error):
    """DPL_ECALLBACK: a stage callback failed (its exception is chained)."""


_CODES = {
    "EINVAL": -_errno.EINVAL, "ENOMEM": -_errno.ENOMEM, "ERANGE": -_errno.ERANGE,
    "EIO": -_errno.EIO, "ENOENT": -_errno.ENOENT, "EAGAIN": -_errno.EAGAIN,
    "ETIMEDOUT": -_errno.ETIMEDOUT, "ECANCELED": -_errno.ECANCELED,
    "ENOTSUP": -_errno.ENOTSUP, "EBUSY": -_errno.EBUSY, "EPARSE": -4001,
    "ESCHED": -4002, "EDEADLOCK": -4003, "ETRUNC": -4004, "EPEER": -4005,
    "ECALLBACK": -4006, "ENOFIT": -4007, "EABI": -4008, "EUNKNOWN": -4999,
}
globals().update({k: v for k, v in _CODES.items()})

_CLASS = {
    _CODES["EINVAL"]: InvalidArgument, _CODES["ERANGE"]: InvalidArgument,
    _CODES["EPARSE"]: InvalidArgument, _CODES["ESCHED"]: InvalidArgument,
    _CODES["EDEADLOCK"]: InvalidArgument, _CODES["ETIMEDOUT"]: TimeoutError,
    _CODES["EPEER"]: PeerError, _CODES["ECALLBACK"]: CallbackError,
}

_core = None


def _c():
    global _core
    if _core is None:
        lib = _lib.load("dpl")
        for f in ("dpl_err_name", "dpl_strerror", "dpl_last_error"):
            getattr(lib, f).restype = ctypes.c_char_p
        lib.dpl_err_name.argtypes = [ctypes.c_int]
        lib.dpl_strerror.argtypes = [ctypes.c_int]
        lib.dpl_last_error.argtypes = []
        _core = lib
    return _core


def last_error() -> str:
    """The calling thread's ``dpl_last_error()``."""
    return _c().dpl_last_error().decode("utf-8", "replace")


def error_for(code: int, message: str | None = None) -> Error:
    """The exception for ``code`` with ``message`` (default: this thread's
    ``dpl_last_error()``, or the code's generic text when that is empty)."""
    lib = _c()
    name = lib.dpl_err_name(code).decode()
    if message is None:
        message = last_error() or lib.dpl_strerror(code).decode()
    cls = _CLASS.get(code, Error)
    if cls is PeerError:
        return PeerError(code, name, message, _rank_in(message))
    return cls(code, name, message)


def check(code: int) -> int:
    """Return ``code`` when it is >= 0; raise its exception otherwise."""
    if code < 0:
        raise error_for(code)
    return code


def _rank_in(message: str) -> int | None:
    """The rank a DPL_EPEER message names as the cause: the lost one of
    "rank A lost rank B", else the failing one of "rank A failed in" or
    "... with rank A: ...", else the last rank named."""
    import re
    for pat in (r"lost rank (\d+)", r"rank (\d+) failed", r"with rank (\d+)",
                r"rank (\d+) (?:died|was lost|left|is gone|stopped answering)"):
        m = re.search(pat, message)
        if m:
            return int(m.group(1))
    found = re.findall(r"\brank (\d+)", message)
    return int(found[-1]) if found else None
