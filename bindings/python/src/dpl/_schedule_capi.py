"""ctypes declarations of dpl's schedule, CSV, JSON and simulator C API.

Mirrors ``dpl/schedule.h``, ``dpl/csv.h``, ``dpl/json.h`` and
``dpl/sim.h`` field by field; the headers stay the truth. Every function
used by :mod:`dpl.schedule` and :mod:`dpl.sim` is declared here with its
argtypes and restype. The libraries are loaded on first use.

The C writers take a ``FILE *``. :func:`write_to_string` runs a writer
into an in-memory stream (POSIX ``open_memstream``, falling back to
``tmpfile`` where the C library has no memory streams) and returns the
text; :func:`write_to_fd` runs it into a file through ``fdopen``. The
last section converts Python values to C integers and arrays, raising
errors that name the bad value.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import math
import numbers
import operator
import threading
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_size_t,
                    c_uint32, c_uint64, c_void_p)
from typing import Any, Callable, Iterable

from . import _lib
from .errors import InvalidArgument, check, error_for

# enum dpl_action_kind
ACT_F, ACT_B, ACT_I, ACT_W = 0, 1, 2, 3
ACT_SEND_F, ACT_RECV_F, ACT_SEND_B, ACT_RECV_B = 4, 5, 6, 7
ACT_REDUCE_GRAD, ACT_STEP = 8, 9
ACT_UNSHARD, ACT_RESHARD, ACT_WAIT_REDUCE_GRAD = 10, 11, 12
ACT_WAIT_SEND_F, ACT_WAIT_SEND_B, ACT_OVERLAP_F_B, ACT_COUNT = 13, 14, 15, 16
NO_MICROBATCH = 0xFFFFFFFF
ACTION_TEXT_MAX = 32
U32_MAX = 0xFFFFFFFF

# enum dpl_policy
POLICY_CUSTOM = 6

# enum dpl_sim_event_kind
SIM_EVENT_KINDS = ("compute", "transfer", "reduce", "step")


class CAction(Structure):
    """struct dpl_action (12 bytes)."""
    _fields_ = [("kind", c_uint32), ("stage", c_uint32), ("microbatch", c_uint32)]


class CStageCost(Structure):
    """struct dpl_stage_cost."""
    _fields_ = [("f", c_double), ("b", c_double), ("i", c_double), ("w", c_double)]


class CScheduleParams(Structure):
    """struct dpl_schedule_params."""
    _fields_ = [
        ("stages", c_uint32),
        ("microbatches", c_uint32),
        ("policy", c_int),
        ("chunks", c_uint32),
        ("cap_mb", POINTER(c_uint32)),
        ("cap_all", c_uint32),
        ("cap_bytes", POINTER(c_uint64)),
        ("activation_bytes", POINTER(c_uint64)),
        ("costs", POINTER(CStageCost)),
        ("transfer", c_double),
    ]


class CScheduleIssue(Structure):
    """struct dpl_schedule_issue."""
    _fields_ = [
        ("code", c_int),
        ("rank", c_uint32),
        ("position", c_size_t),
        ("action", CAction),
        ("message", c_char * 256),
    ]


class CSimParams(Structure):
    """struct dpl_sim_params."""
    _fields_ = [
        ("costs", POINTER(CStageCost)),
        ("uniform", CStageCost),
        ("link_latency", c_double),
        ("link_bandwidth", c_double),
        ("activation_bytes", POINTER(c_uint64)),
        ("grad_bytes", POINTER(c_uint64)),
        ("replicas", POINTER(c_uint32)),
        ("param_bytes", POINTER(c_uint64)),
        ("ar_bandwidth", c_double),
        ("ar_latency", c_double),
        ("step_cost", c_double),
    ]


class CSimStageStats(Structure):
    """struct dpl_sim_stage_stats."""
    _fields_ = [
        ("rank", c_uint32),
        ("busy", c_double),
        ("finish", c_double),
        ("reduce_start", c_double),
        ("reduce_end", c_double),
        ("peak_inflight", c_uint32),
        ("peak_activation_bytes", c_uint64),
    ]


class CSimSummary(Structure):
    """struct dpl_sim_summary."""
    _fields_ = [
        ("makespan", c_double),
        ("bubble_fraction", c_double),
        ("total_busy", c_double),
        ("ranks", c_uint32),
        ("stages", c_uint32),
    ]


class CSimEvent(Structure):
    """struct dpl_sim_event."""
    _fields_ = [
        ("kind", c_uint32),
        ("rank", c_uint32),
        ("peer", c_uint32),
        ("action", CAction),
        ("start", c_double),
        ("end", c_double),
    ]


# Every struct this module mirrors, by its C name (the layout test uses it).
STRUCTS = {
    "struct dpl_action": CAction,
    "struct dpl_stage_cost": CStageCost,
    "struct dpl_schedule_params": CScheduleParams,
    "struct dpl_schedule_issue": CScheduleIssue,
    "struct dpl_sim_params": CSimParams,
    "struct dpl_sim_stage_stats": CSimStageStats,
    "struct dpl_sim_summary": CSimSummary,
    "struct dpl_sim_event": CSimEvent,
}

_vp = c_void_p
_pvp = POINTER(c_void_p)

_CORE = {
    "dpl_action_kind_name": (c_char_p, [c_uint32]),
    "dpl_action_is_compute": (c_int, [c_uint32]),
    "dpl_action_format": (c_int, [CAction, c_char_p, c_size_t]),
    "dpl_action_parse": (c_int, [c_char_p, c_size_t, POINTER(CAction)]),
    "dpl_policy_name": (c_char_p, [c_int]),
    "dpl_policy_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "dpl_stage_cost_resolve": (CStageCost, [CStageCost]),
    "dpl_schedule_build": (c_int, [POINTER(CScheduleParams), _pvp]),
    "dpl_schedule_create": (c_int, [c_uint32, c_uint32, c_uint32, _pvp]),
    "dpl_schedule_map_stage": (c_int, [_vp, c_uint32, c_uint32]),
    "dpl_schedule_append": (c_int, [_vp, c_uint32, CAction]),
    "dpl_schedule_destroy": (None, [_vp]),
    "dpl_schedule_set_policy": (c_int, [_vp, c_int]),
    "dpl_schedule_clone": (c_int, [_vp, _pvp]),
    "dpl_schedule_ranks": (c_uint32, [_vp]),
    "dpl_schedule_stages": (c_uint32, [_vp]),
    "dpl_schedule_microbatches": (c_uint32, [_vp]),
    "dpl_schedule_policy": (c_int, [_vp]),
    "dpl_schedule_stage_rank": (c_uint32, [_vp, c_uint32]),
    "dpl_schedule_is_lowered": (c_int, [_vp]),
    "dpl_schedule_actions": (POINTER(CAction), [_vp, c_uint32, POINTER(c_size_t)]),
    "dpl_schedule_action_count": (c_size_t, [_vp]),
    "dpl_schedule_bound": (c_uint32, [_vp, c_uint32]),
    "dpl_schedule_set_cap": (c_int, [_vp, c_uint32, c_uint32]),
    "dpl_schedule_cap": (c_uint32, [_vp, c_uint32]),
    "dpl_schedule_lower": (c_int, [_vp]),
    "dpl_schedule_validate": (c_int, [_vp, POINTER(CScheduleIssue)]),
}
_CSV = {
    "dpl_schedule_write_csv": (c_int, [_vp, _vp]),
    "dpl_schedule_write_csv_comms": (c_int, [_vp, _vp]),
    "dpl_schedule_read_csv": (c_int, [c_char_p, c_size_t, _pvp]),
    "dpl_schedule_read_csv_layout": (c_int, [c_char_p, c_size_t, _pvp, _pvp]),
    "dpl_schedule_write_csv_layout": (c_int, [_vp, _vp, _vp]),
    "dpl_csv_layout_destroy": (None, [_vp]),
}
_JSON = {
    "dpl_schedule_write_json": (c_int, [_vp, _vp]),
    "dpl_schedule_read_json": (c_int, [c_char_p, c_size_t, _pvp]),
}
_SIM = {
    "dpl_sim_run": (c_int, [_vp, POINTER(CSimParams), _pvp]),
    "dpl_sim_destroy": (None, [_vp]),
    "dpl_sim_summary": (None, [_vp, POINTER(CSimSummary)]),
    "dpl_sim_rank_busy": (c_double, [_vp, c_uint32]),
    "dpl_sim_stage": (c_int, [_vp, c_uint32, POINTER(CSimStageStats)]),
    "dpl_sim_events": (POINTER(CSimEvent), [_vp, POINTER(c_size_t)]),
    "dpl_sim_write_trace": (c_int, [_vp, _vp, c_double]),
    "dpl_sim_write_ascii": (c_int, [_vp, _vp, c_double, ctypes.c_uint]),
}
_LIBC = {
    "fclose": (c_int, [_vp]),
    "fdopen": (_vp, [c_int, c_char_p]),
    "free": (None, [_vp]),
}

_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}
_memstream: Callable | None = None


def _declare(lib: ctypes.CDLL, table: dict) -> ctypes.CDLL:
    for name, (restype, argtypes) in table.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _get(key: str, stem: str | None, table: dict) -> ctypes.CDLL:
    lib = _libs.get(key)
    if lib is None:
        with _lock:
            lib = _libs.get(key)
            if lib is None:
                if stem is None:
                    lib = _load_libc()
                else:
                    lib = _lib.load(stem)
                lib = _declare(lib, table)
                _libs[key] = lib
    return lib


def core() -> ctypes.CDLL:
    """libdpl with the schedule functions declared."""
    return _get("core", "dpl", _CORE)


def csv() -> ctypes.CDLL:
    """libdpl-csv with its functions declared."""
    return _get("csv", "dpl-csv", _CSV)


def json() -> ctypes.CDLL:
    """libdpl-json with the schedule functions declared."""
    return _get("json", "dpl-json", _JSON)


def sim() -> ctypes.CDLL:
    """libdpl-sim with its functions declared."""
    return _get("sim", "dpl-sim", _SIM)


def _load_libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else ctypes.CDLL(None)
    global _memstream
    try:
        fn = lib.open_memstream
        fn.restype = _vp
        fn.argtypes = [_pvp, POINTER(c_size_t)]
        _memstream = fn
    except AttributeError:
        _memstream = None
        for n, (restype, argtypes) in {
            "tmpfile": (_vp, []),
            "fseek": (c_int, [_vp, ctypes.c_long, c_int]),
            "ftell": (ctypes.c_long, [_vp]),
            "fread": (c_size_t, [_vp, c_size_t, c_size_t, _vp]),
        }.items():
            getattr(lib, n).restype = restype
            getattr(lib, n).argtypes = argtypes
    return lib


def libc() -> ctypes.CDLL:
    """The C library (fclose, fdopen, free, open_memstream or tmpfile)."""
    return _get("libc", None, _LIBC)


def write_to_string(writer: Callable[[int], int]) -> str:
    """Run ``writer(FILE *)`` into memory and return what it wrote.

    ``writer`` gets the stream as an int and returns a dpl code; a
    negative code raises its exception (nothing is returned then). The
    stream is always closed and its buffer freed.
    """
    c = libc()
    if _memstream is not None:
        buf, size = c_void_p(), c_size_t()
        f = _memstream(ctypes.byref(buf), ctypes.byref(size))
        if not f:
            raise MemoryError("dpl: open_memstream failed")
        try:
            rc = writer(f)
        finally:
            closed = c.fclose(f)
            text = ctypes.string_at(buf.value, size.value) if buf.value else b""
            c.free(buf)
        check(rc)
        if closed != 0:
            raise OSError("dpl: closing the in-memory stream failed")
        return text.decode("utf-8")
    f = c.tmpfile()
    if not f:
        raise OSError("dpl: tmpfile failed")
    try:
        check(writer(f))
        n = c.ftell(f)
        if n < 0 or c.fseek(f, 0, 0) != 0:
            raise OSError("dpl: rewinding the temporary stream failed")
        out = ctypes.create_string_buffer(n)
        if c.fread(out, 1, n, f) != n:
            raise OSError("dpl: reading the temporary stream failed")
        return out.raw.decode("utf-8")
    finally:
        c.fclose(f)


def write_to_fd(fd: int, writer: Callable[[int], int]) -> None:
    """Run ``writer(FILE *)`` into the open descriptor ``fd``, which this
    call takes over (it is closed on return, whatever happens). Raises the
    writer's exception, or OSError when closing (flushing) fails."""
    c = libc()
    f = c.fdopen(fd, b"w")
    if not f:
        import os
        os.close(fd)
        raise OSError(f"dpl: fdopen of descriptor {fd} failed")
    try:
        rc = writer(f)
    finally:
        closed = c.fclose(f)
    check(rc)
    if closed != 0:
        raise OSError("dpl: closing the output file failed (disk full?)")


def kind_names() -> tuple[str, ...]:
    """The action kind names in enum order ("F", "B", ..., "STEP")."""
    lib = core()
    return tuple(lib.dpl_action_kind_name(k).decode() for k in range(ACT_COUNT))


def policy_names() -> tuple[str, ...]:
    """The policy names in enum order ("gpipe", ..., "custom", ...), as far
    as dpl_policy_name() knows them (it returns NULL past the last)."""
    lib = core()
    names = []
    while len(names) < 256:
        n = lib.dpl_policy_name(len(names))
        if not n:
            break
        names.append(n.decode())
    return tuple(names)


# -- checked conversions of Python values (messages name the value) ---------

def bad(message: str) -> InvalidArgument:
    """An InvalidArgument (DPL_EINVAL) carrying ``message``."""
    return error_for(-_errno.EINVAL, message)  # type: ignore[return-value]


def to_int(name: str, value: Any, lo: int = 0, hi: int = U32_MAX) -> int:
    """``value`` as an int in [lo, hi]; TypeError for a non-integer (bool
    included), InvalidArgument naming the value when out of range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {value!r}: {type(value).__name__})")
    v = operator.index(value)
    if v < lo:
        raise bad(f"{name} must be >= {lo} (got {v})")
    if v > hi:
        raise bad(f"{name} must be <= {hi} (got {v})")
    return v


def to_num(name: str, value: Any) -> float:
    """``value`` as a finite float >= 0 (TypeError / InvalidArgument)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number (got {value!r}: {type(value).__name__})")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise bad(f"{name} must be finite and >= 0 (got {value!r})")
    return v


def u64_array(name: str, v: Any, n: int, lo: int = 0) -> ctypes.Array:
    """An int (every stage) or n ints as a uint64_t[n]."""
    vals = [v] * n if isinstance(v, numbers.Integral) else int_seq(name, v, n)
    return (ctypes.c_uint64 * n)(*(to_int(f"{name}[{k}]", x, lo, 2**64 - 1)
                                   for k, x in enumerate(vals)))


def int_seq(name: str, v: Any, n: int) -> list:
    """``v`` as a list of n values (TypeError for a non-sequence,
    InvalidArgument naming a wrong length)."""
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be an int or a sequence of ints (got {v!r})")
    vals = list(v)
    if len(vals) != n:
        raise bad(f"{name}: {len(vals)} values for {n} stages")
    return vals
