"""ctypes declarations of dpl's planner C API.

Mirrors ``dpl/plan.h`` (libdpl-plan) and the planner forms of
``dpl/json.h`` (libdpl-json) field by field; the headers stay the truth.
Every function :mod:`dpl.plan` calls is declared here with its argtypes
and restype; the libraries are loaded on first use. The structs' sizes
are checked against the C compiler's by the tests.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_size_t,
                    c_uint32, c_uint64, c_void_p)

from . import _lib

MAX_DEVICES = 64   # DPL_PLAN_MAX_DEVICES
MAX_STAGES = 64    # DPL_PLAN_MAX_STAGES
CLUSTER_NAME_MAX = 32

# enum dpl_plan_rank
RANK_SIM, RANK_PIVOT = 0, 1
# enum dpl_plan_baseline
BASELINES = ("data_parallel", "pipedream", "gpipe")
# enum dpl_policy (the plan policies)
POLICY_GPIPE, POLICY_1F1B, POLICY_1F1B_COMM = 0, 1, 2
PLAN_POLICIES = {"gpipe": POLICY_GPIPE, "1f1b": POLICY_1F1B, "1f1b-comm": POLICY_1F1B_COMM}


class CLayer(Structure):
    """struct dpl_layer (48 bytes)."""
    _fields_ = [
        ("id", c_char_p),
        ("name", c_char_p),
        ("forward_ms", c_double),
        ("backward_ms", c_double),
        ("activation_bytes", c_double),
        ("parameter_bytes", c_double),
    ]


class CCluster(Structure):
    """struct dpl_cluster (104 bytes)."""
    _fields_ = [
        ("name", c_char * CLUSTER_NAME_MAX),
        ("machines", c_uint32),
        ("devices_per_machine", c_uint32),
        ("device_memory", c_double),
        ("intra_bandwidth", c_double),
        ("intra_latency", c_double),
        ("inter_bandwidth", c_double),
        ("inter_latency", c_double),
        ("ar_intra_bandwidth", c_double),
        ("ar_intra_pairs", c_int),
        ("ar_inter_bandwidth", c_double),
    ]


class CPlanStage(Structure):
    """struct dpl_plan_stage (88 bytes)."""
    _fields_ = [
        ("first_layer", c_uint32),
        ("last_layer", c_uint32),
        ("devices", c_uint64),
        ("replicas", c_uint32),
        ("forward_ms", c_double),
        ("backward_ms", c_double),
        ("send_ms", c_double),
        ("allreduce_ms", c_double),
        ("inflight", c_uint32),
        ("memory_bytes", c_uint64),
        ("parameter_bytes", c_double),
        ("activation_bytes", c_uint64),
    ]


class CPlan(Structure):
    """struct dpl_plan."""
    _fields_ = [
        ("stages", c_uint32),
        ("stage", CPlanStage * MAX_STAGES),
        ("microbatch_size", c_uint32),
        ("microbatches", c_uint32),
        ("policy", c_int),
        ("predicted_ms", c_double),
        ("pivot_ms", c_double),
        ("pivot_stage", c_uint32),
        ("pivot_is_transfer", c_int),
        ("peak_memory_bytes", c_uint64),
        ("fits", c_int),
        ("worst_stage", c_uint32),
        ("devices_used", c_uint32),
    ]


class CPlanParams(Structure):
    """struct dpl_plan_params."""
    _fields_ = [
        ("profile_batch", c_uint32),
        ("global_batch", c_uint32),
        ("optimizer_factor", c_double),
        ("max_stages", c_uint32),
        ("microbatch_size", c_uint32),
        ("rank", c_uint32),
        ("front_cap", c_uint32),
        ("candidates", c_uint32),
    ]


class CPlanReport(Structure):
    """struct dpl_plan_report."""
    _fields_ = [
        ("best", CPlan),
        ("single_device_ms", c_double),
        ("baseline", CPlan * len(BASELINES)),
        ("baseline_found", c_int * len(BASELINES)),
        ("exact", c_int),
        ("dp_runs", c_uint32),
        ("dp_states", c_uint64),
        ("simulated", c_uint32),
        ("from_baseline", c_int),
    ]


_vp = c_void_p
_pvp = POINTER(c_void_p)
_PLAN = {
    "dpl_profile_parse": (c_int, [c_char_p, c_size_t, c_char_p, _pvp]),
    "dpl_profile_load": (c_int, [c_char_p, _pvp]),
    "dpl_profile_create": (c_int, [POINTER(CLayer), c_uint32, POINTER(c_uint32), c_size_t,
                                   _pvp]),
    "dpl_profile_destroy": (None, [_vp]),
    "dpl_profile_layers": (c_uint32, [_vp]),
    "dpl_profile_layer": (POINTER(CLayer), [_vp, c_uint32]),
    "dpl_profile_source_line": (c_uint32, [_vp, c_uint32]),
    "dpl_profile_edges": (c_size_t, [_vp]),
    "dpl_profile_edge": (c_int, [_vp, c_size_t, POINTER(c_uint32), POINTER(c_uint32)]),
    "dpl_profile_cut_bytes": (c_double, [_vp, c_uint32]),
    "dpl_cluster_preset": (c_int, [c_char_p, POINTER(CCluster)]),
    "dpl_cluster_check": (c_int, [POINTER(CCluster)]),
    "dpl_cluster_devices": (c_uint32, [POINTER(CCluster)]),
    "dpl_plan_evaluate": (c_int, [_vp, POINTER(CCluster), POINTER(CPlanParams),
                                  POINTER(CPlan)]),
    "dpl_plan_search": (c_int, [_vp, POINTER(CCluster), POINTER(CPlanParams),
                                POINTER(CPlanReport)]),
    "dpl_plan_baseline_name": (c_char_p, [c_int]),
}
_JSON = {
    "dpl_profile_read_json": (c_int, [c_char_p, c_size_t, _pvp]),
    "dpl_profile_write_json": (c_int, [_vp, _vp]),
    "dpl_cluster_read_json": (c_int, [c_char_p, c_size_t, POINTER(CCluster)]),
    "dpl_cluster_write_json": (c_int, [POINTER(CCluster), _vp]),
    "dpl_plan_write_json": (c_int, [POINTER(CPlanReport), _vp, POINTER(CCluster),
                                    POINTER(CPlanParams), _vp]),
    "dpl_plan_read_json": (c_int, [c_char_p, c_size_t, POINTER(CPlan)]),
}
_CORE = {
    "dpl_policy_name": (c_char_p, [c_int]),
}

_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}


def _get(stem: str, table: dict) -> ctypes.CDLL:
    lib = _libs.get(stem)
    if lib is None:
        with _lock:
            lib = _libs.get(stem)
            if lib is None:
                lib = _lib.load(stem)
                for name, (restype, argtypes) in table.items():
                    fn = getattr(lib, name)
                    fn.restype = restype
                    fn.argtypes = argtypes
                _libs[stem] = lib
    return lib


def plan() -> ctypes.CDLL:
    """libdpl-plan with the planner functions declared. Thread-safe."""
    return _get("dpl-plan", _PLAN)


def json() -> ctypes.CDLL:
    """libdpl-json with the planner forms declared. Thread-safe."""
    return _get("dpl-json", _JSON)


def core() -> ctypes.CDLL:
    """libdpl with dpl_policy_name declared. Thread-safe."""
    return _get("dpl", _CORE)


def policy_name(policy: int) -> str:
    """The name of an enum dpl_policy value ("1f1b"); "policy N" if unknown."""
    name = core().dpl_policy_name(policy)
    return name.decode() if name else f"policy {policy}"


def write_to_string(writer) -> str:
    """Run ``writer(FILE *)`` into memory and return its text (see
    :func:`dpl._schedule_capi.write_to_string`)."""
    from ._schedule_capi import write_to_string as w
    return w(writer)
