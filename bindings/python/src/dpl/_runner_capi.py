"""ctypes mirror of <dpl/runner.h> (struct dpl_stage_args, dpl_stage_ops,
dpl_runner_params, the statistics and the runner's functions).

Field order and types follow the header exactly; ``check_layout()`` is run
by the tests against sizes the C compiler gives.
"""

from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_size_t,
                    c_uint32, c_uint64, c_void_p)

from . import _lib

DPL_STAGE_ABI_VERSION = 1
DPL_ACT_COUNT = 16
ACTION_KINDS = ("F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B",
                "REDUCE_GRAD", "STEP", "UNSHARD", "RESHARD", "WAIT_REDUCE_GRAD",
                "WAIT_SEND_F", "WAIT_SEND_B", "OVERLAP_F_B")

DTYPE_F32, DTYPE_F64, DTYPE_BF16, DTYPE_F16 = 0, 1, 2, 3
MEM_HOST, MEM_CUDA = 0, 1


class StageArgs(Structure):
    _fields_ = [
        ("stage", c_uint32), ("microbatch", c_uint32), ("slot", c_uint32),
        ("replica", c_uint32), ("iteration", c_uint64), ("begin", c_uint64),
        ("end", c_uint64), ("batch", c_uint64),
        ("input", c_void_p), ("input_bytes", c_size_t),
        ("output", c_void_p), ("output_bytes", c_size_t),
        ("grad_output", c_void_p), ("grad_output_bytes", c_size_t),
        ("grad_input", c_void_p), ("grad_input_bytes", c_size_t),
    ]


class Buffer(Structure):
    _fields_ = [("ptr", c_void_p), ("count", c_size_t), ("dtype", c_uint32),
                ("mem", c_uint32)]


STAGE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)
GRADS_FN = CFUNCTYPE(c_int, c_void_p, c_uint32, POINTER(POINTER(Buffer)),
                     POINTER(c_size_t))
STEP_FN = CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint64)


class StageOps(Structure):
    _fields_ = [
        ("abi_version", c_uint32), ("size", c_uint32), ("name", c_char_p),
        ("forward", STAGE_FN), ("backward", STAGE_FN),
        ("backward_input", STAGE_FN), ("backward_weight", STAGE_FN),
        ("grads", GRADS_FN), ("step", STEP_FN),
    ]


class Action(Structure):
    _fields_ = [("kind", c_uint32), ("stage", c_uint32),
                ("microbatch", c_uint32)]


class RunnerParams(Structure):
    _fields_ = [
        ("schedule", c_void_p), ("replicas", POINTER(c_uint32)),
        ("rank", c_uint32), ("timeout_ms", c_uint32), ("batch", c_uint64),
        ("activation_bytes", POINTER(c_uint64)),
        ("stage_ops", POINTER(StageOps)), ("stage_user", c_void_p),
        ("transport", c_void_p), ("device", c_void_p),
        ("trace_capacity", c_size_t),
        # Per-stage byte caps (S values, 0 = none); None (NULL): no caps.
        ("cap_bytes", POINTER(c_uint64)),
    ]


class RunnerStats(Structure):
    _fields_ = [
        ("iterations", c_uint64), ("actions", c_uint64),
        ("count", c_uint64 * DPL_ACT_COUNT), ("ns", c_uint64 * DPL_ACT_COUNT),
        ("wait_ns", c_uint64), ("step_ns", c_uint64),
        ("bytes_sent", c_uint64), ("bytes_received", c_uint64),
        ("bytes_reduced", c_uint64), ("buffer_bytes", c_uint64),
        ("trace_dropped", c_uint64),
    ]


class StageStats(Structure):
    _fields_ = [
        ("stage", c_uint32), ("slots", c_uint32), ("peak_inflight", c_uint32),
        ("reserved0", c_uint32), ("slot_bytes", c_uint64),
        ("peak_buffer_bytes", c_uint64),
    ]


class Event(Structure):
    _fields_ = [("action", Action), ("start_ns", c_uint64),
                ("end_ns", c_uint64)]


_core = None


def core() -> ctypes.CDLL:
    """libdpl with the runner's prototypes declared (once)."""
    global _core
    if _core is not None:
        return _core
    lib = _lib.load("dpl")
    protos = {
        "dpl_runner_create": (c_int, [POINTER(RunnerParams), POINTER(c_void_p)]),
        "dpl_runner_step": (c_int, [c_void_p]),
        "dpl_runner_forward": (c_int, [c_void_p]),
        "dpl_runner_destroy": (None, [c_void_p]),
        "dpl_runner_last_error": (c_char_p, [c_void_p]),
        "dpl_runner_cause": (c_uint32, [c_void_p]),
        "dpl_runner_stats": (None, [c_void_p, POINTER(RunnerStats)]),
        "dpl_runner_stage_stats": (c_int, [c_void_p, c_uint32, POINTER(StageStats)]),
        "dpl_runner_events": (POINTER(Event), [c_void_p, POINTER(c_size_t)]),
        "dpl_runner_world_size": (c_int, [c_void_p, POINTER(c_uint32), POINTER(c_uint32)]),
        "dpl_runner_position": (c_int, [c_void_p, POINTER(c_uint32), c_uint32,
                                        POINTER(c_uint32), POINTER(c_uint32)]),
        "dpl_split": (c_int, [c_uint64, c_uint64, c_uint64, POINTER(c_uint64),
                              POINTER(c_uint64)]),
        "dpl_schedule_ranks": (c_uint32, [c_void_p]),
        "dpl_schedule_stages": (c_uint32, [c_void_p]),
        "dpl_schedule_microbatches": (c_uint32, [c_void_p]),
        "dpl_schedule_stage_rank": (c_uint32, [c_void_p, c_uint32]),
        "dpl_schedule_is_lowered": (c_int, [c_void_p]),
        "dpl_schedule_bound": (c_uint32, [c_void_p, c_uint32]),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _core = lib
    return lib

