"""The planner's inputs: layer profiles and cluster descriptions.

:class:`Layer` and :class:`Profile` wrap ``dpl_profile`` (PipeDream's
graph text format or dpl's JSON profile form); :class:`Cluster` mirrors
``struct dpl_cluster``. Re-exported by :mod:`dpl.plan`; see there for
units and threads.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, Union

from ._files import write_atomic
from . import _plan_capi as C
from . import errors as _errors
from .errors import Error, InvalidArgument, check

PathLike = Union[str, "os.PathLike[str]"]

#: Point-to-point bandwidth Cluster.host() assumes between two ranks of one
#: machine, bytes/s: the shm transport's streaming figure for 16 MiB
#: messages (docs/benchmarks.md: 8.5 GB/s; 13 GB/s at 1 MiB).
HOST_BANDWIDTH = 8e9
#: Per-message latency Cluster.host() assumes, seconds (an assumption
#: covering the per-message work of a Python stage; shm itself is ~0.5 us).
HOST_LATENCY = 20e-6


def _fail(message: str) -> InvalidArgument:
    return InvalidArgument(_errors.EINVAL, "DPL_EINVAL", message)


def _int(what: str, v, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(f"{what}: {v!r} is not an integer")
    if not lo <= v <= hi:
        raise _fail(f"{what}: {v} is out of range [{lo}, {hi}]")
    return v


def _num(what: str, v, lo: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(f"{what}: {v!r} is not a number")
    v = float(v)
    if not math.isfinite(v) or v < lo:
        raise _fail(f"{what}: {v!r} is not a finite number >= {lo:g}")
    return v


def _read(path: PathLike, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"dpl: {what} file {os.fspath(path)} not found") from None
    except OSError as e:
        raise OSError(f"dpl: cannot read {what} file {os.fspath(path)}: {e.strerror}") from e


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 2.0 ** 53:
        return str(int(v))
    return repr(v)


# --------------------------------------------------------------------------
# Profiles


@dataclass(frozen=True)
class Layer:
    """One layer of a profile, measured at the profile batch size.

    ``forward_ms``/``backward_ms`` are milliseconds for the whole profile
    batch, ``activation_bytes`` the layer's output for that batch,
    ``parameter_bytes`` its weights. ``id`` is the node id ("node7");
    None lets the profile number the layer. Raises InvalidArgument naming
    a negative, non-finite or non-numeric value.
    """
    name: str
    forward_ms: float
    backward_ms: float
    activation_bytes: float
    parameter_bytes: float
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise _fail(f"Layer name {self.name!r} is not a string")
        for k in ("forward_ms", "backward_ms", "activation_bytes", "parameter_bytes"):
            object.__setattr__(self, k, _num(f"Layer {self.name!r} {k}", getattr(self, k)))
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise _fail(f"Layer {self.name!r} id {self.id!r} is not a non-empty string")


class Profile:
    """A model's layers (in a topological order) and the edges between them.

    Build one with :meth:`load`, :meth:`parse` or :meth:`from_layers`.
    ``name`` names the profile in messages; ``batch`` is the profile batch
    size when known (from a ``-pbs-N`` file name, the ``batch`` argument or
    :func:`dpl.torch.profile`), the default ``pbs`` of :func:`plan`. The
    C profile is owned by this object and freed with it. Immutable and
    thread-safe.
    """

    def __init__(self, handle: ctypes.c_void_p, name: str, batch: int | None = None):
        """Internal: take ownership of a ``dpl_profile *``."""
        self._h = handle
        self.name = name
        self.batch = None if batch is None else _int("batch", batch, 1, 1 << 30)
        lib = C.plan()
        n = lib.dpl_profile_layers(handle)
        layers = []
        for i in range(n):
            c = lib.dpl_profile_layer(handle, i).contents
            layers.append(Layer(c.name.decode(), c.forward_ms, c.backward_ms,
                                c.activation_bytes, c.parameter_bytes, c.id.decode()))
        a, b = ctypes.c_uint32(), ctypes.c_uint32()
        edges = []
        for k in range(lib.dpl_profile_edges(handle)):
            check(lib.dpl_profile_edge(handle, k, ctypes.byref(a), ctypes.byref(b)))
            edges.append((a.value, b.value))
        self._layers = tuple(layers)
        self._edges = tuple(edges)

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h:
            try:
                C.plan().dpl_profile_destroy(h)
            except Exception:  # interpreter shutdown: the library may be gone
                pass

    @classmethod
    def parse(cls, text: str | bytes, source: str | None = None, *,
              batch: int | None = None) -> "Profile":
        """A profile from PipeDream's graph text or dpl's JSON profile form
        (a text starting with ``{``). ``source`` names the text in messages.
        Raises InvalidArgument with "SOURCE:LINE: reason" (or the JSON path)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        h = ctypes.c_void_p()
        src = source or "profile"
        if data.lstrip()[:1] == b"{":
            try:
                check(C.json().dpl_profile_read_json(data, len(data), ctypes.byref(h)))
            except Error as e:
                raise type(e)(e.code, e.name, f"{src}: {e.message}") from None
        else:
            check(C.plan().dpl_profile_parse(data, len(data), src.encode(), ctypes.byref(h)))
        return cls(h, src, batch)

    @classmethod
    def load(cls, path: PathLike, *, batch: int | None = None) -> "Profile":
        """Read a profile file (text or JSON). A bare name without a folder
        that is not a file ("vgg-19-pbs-32") is looked up, with and without
        ".txt", in ``$DPL_PROFILES``. ``batch`` defaults to N of a
        "-pbs-N" in the file name. Raises FileNotFoundError naming the path
        (and the folder searched), InvalidArgument for a malformed file.
        Blocks on the file system."""
        p = Path(path)
        if not p.exists() and os.sep not in os.fspath(path) and os.environ.get("DPL_PROFILES"):
            d = Path(os.environ["DPL_PROFILES"])
            for cand in (d / p.name, d / (p.name + ".txt")):
                if cand.exists():
                    p = cand
                    break
            else:
                raise FileNotFoundError(f"dpl: profile file {os.fspath(path)} not found "
                                        f"(nor in DPL_PROFILES={d})")
        text = _read(p, "profile")
        if batch is None:
            m = re.search(r"-pbs-(\d+)", p.name)
            batch = int(m.group(1)) if m and int(m.group(1)) >= 1 else None
        return cls.parse(text, os.fspath(p), batch=batch)

    @classmethod
    def from_layers(cls, layers: Iterable[Layer], edges: Sequence[tuple[int, int]] | None = None,
                    *, name: str = "profile", batch: int | None = None) -> "Profile":
        """A profile from :class:`Layer` objects and edges given as index
        pairs (from, to) into ``layers``; None or empty makes a chain in the
        given order. Layers are copied and put in a topological order that
        keeps the given order wherever the edges allow. Raises
        InvalidArgument naming a bad edge or layer value, or the cycle."""
        layers = list(layers)
        if not layers:
            raise _fail("from_layers: no layers")
        for i, L in enumerate(layers):
            if not isinstance(L, Layer):
                raise _fail(f"from_layers: layers[{i}] is {type(L).__name__}, not dpl.Layer")
        arr = (C.CLayer * len(layers))()
        keep = []
        for i, L in enumerate(layers):
            nm, ident = L.name.encode(), None if L.id is None else L.id.encode()
            keep += [nm, ident]
            arr[i] = C.CLayer(ident, nm, L.forward_ms, L.backward_ms,
                              L.activation_bytes, L.parameter_bytes)
        flat = []
        for k, e in enumerate(edges or ()):
            if len(e) != 2:
                raise _fail(f"from_layers: edges[{k}] {e!r} is not a (from, to) pair")
            for v in e:
                flat.append(_int(f"from_layers: edges[{k}]", v, 0, len(layers) - 1))
        ev = (ctypes.c_uint32 * max(1, len(flat)))(*flat)
        h = ctypes.c_void_p()
        check(C.plan().dpl_profile_create(arr, len(layers), ev, len(flat) // 2, ctypes.byref(h)))
        return cls(h, name, batch)

    @property
    def layers(self) -> list[Layer]:
        """The layers in the profile's topological order (a new list)."""
        return list(self._layers)

    @property
    def edges(self) -> list[tuple[int, int]]:
        """The distinct edges as (from, to) layer indices, from < to."""
        return list(self._edges)

    def __len__(self) -> int:
        return len(self._layers)

    def cut_bytes(self, cut: int) -> float:
        """Bytes crossing the cut before layer ``cut`` at the profile batch
        (0 for cut 0 or past the end)."""
        return C.plan().dpl_profile_cut_bytes(self._h, _int("cut", cut, 0, 1 << 31))

    def to_text(self) -> str:
        """The profile in PipeDream's graph text format (what
        :meth:`parse` and ``dpl plan --profile`` read). Raises
        InvalidArgument for a layer name the format cannot hold (a line
        break or leading/trailing blanks)."""
        out = []
        for i, L in enumerate(self._layers):
            if "\n" in L.name or "\r" in L.name or L.name != L.name.strip(" \t"):
                raise _fail(f"to_text: layer {i} name {L.name!r} cannot be written "
                            "(line break or leading/trailing blanks)")
            out.append(f"{L.id} -- {L.name} -- forward_compute_time={_fmt(L.forward_ms)}, "
                       f"backward_compute_time={_fmt(L.backward_ms)}, "
                       f"activation_size={_fmt(L.activation_bytes)}, "
                       f"parameter_size={_fmt(L.parameter_bytes)}")
        for a, b in self._edges:
            out.append(f"\t{self._layers[a].id} -- {self._layers[b].id}")
        return "\n".join(out) + "\n"

    def to_json(self) -> str:
        """The profile as dpl's version 1 JSON profile."""
        return C.write_to_string(lambda f: C.json().dpl_profile_write_json(self._h, f))

    def save(self, path: PathLike) -> None:
        """Write the profile to ``path`` (JSON when it ends in ".json",
        else the text format) through a temporary file and a rename."""
        write_atomic(path, self.to_json() if os.fspath(path).endswith(".json") else self.to_text())

    def __repr__(self) -> str:
        return (f"<dpl.Profile {self.name!r}: {len(self)} layers, {len(self._edges)} edges"
                f"{'' if self.batch is None else f', pbs {self.batch}'}>")


# --------------------------------------------------------------------------
# Clusters


@dataclass(frozen=True)
class Cluster:
    """Identical machines of identical devices (mirrors struct dpl_cluster).

    Device d lives on machine d // devices_per_machine; at most 64 devices.
    ``device_memory`` in bytes; bandwidths in bytes/s (``intra_*`` between
    devices of a machine, ``inter_*`` a machine's network link), latencies
    in seconds. The allreduce bandwidths default to the point-to-point
    ones; ``ar_intra_pairs`` makes the in-machine allreduce bandwidth grow
    with floor(R/2) (NVLink). Raises InvalidArgument naming the first bad
    field (dpl_cluster_check()).
    """
    machines: int
    devices_per_machine: int
    device_memory: float
    intra_bandwidth: float = 0.0
    inter_bandwidth: float = 0.0
    intra_latency: float = 0.0
    inter_latency: float = 0.0
    ar_intra_bandwidth: float | None = None
    ar_intra_pairs: bool = False
    ar_inter_bandwidth: float | None = None
    name: str = field(default="")

    def __post_init__(self) -> None:
        _int("Cluster machines", self.machines, 1, C.MAX_DEVICES)
        _int("Cluster devices_per_machine", self.devices_per_machine, 1, C.MAX_DEVICES)
        for k in ("device_memory", "intra_bandwidth", "inter_bandwidth", "intra_latency",
                  "inter_latency"):
            object.__setattr__(self, k, _num(f"Cluster {k}", getattr(self, k)))
        for k, base in (("ar_intra_bandwidth", self.intra_bandwidth),
                        ("ar_inter_bandwidth", self.inter_bandwidth)):
            v = getattr(self, k)
            object.__setattr__(self, k, base if v is None else _num(f"Cluster {k}", v))
        object.__setattr__(self, "ar_intra_pairs", bool(self.ar_intra_pairs))
        if not isinstance(self.name, str) or len(self.name.encode()) >= C.CLUSTER_NAME_MAX:
            raise _fail(f"Cluster name {self.name!r} is not a string of at most "
                        f"{C.CLUSTER_NAME_MAX - 1} bytes")
        c = self._c()
        check(C.plan().dpl_cluster_check(ctypes.byref(c)))

    def _c(self) -> C.CCluster:
        return C.CCluster(self.name.encode(), self.machines, self.devices_per_machine,
                          self.device_memory, self.intra_bandwidth, self.intra_latency,
                          self.inter_bandwidth, self.inter_latency, self.ar_intra_bandwidth,
                          int(self.ar_intra_pairs), self.ar_inter_bandwidth)

    @classmethod
    def _from_c(cls, c: C.CCluster) -> "Cluster":
        return cls(c.machines, c.devices_per_machine, c.device_memory, c.intra_bandwidth,
                   c.inter_bandwidth, c.intra_latency, c.inter_latency, c.ar_intra_bandwidth,
                   bool(c.ar_intra_pairs), c.ar_inter_bandwidth, c.name.decode())

    @property
    def devices(self) -> int:
        """machines * devices_per_machine."""
        return self.machines * self.devices_per_machine

    @classmethod
    def preset(cls, name: str) -> "Cluster":
        """The paper's hardware: "paper-a" (2 x 8 V100, NVLink, 25 Gbit/s),
        "paper-b" (16 x 1, 25 Gbit/s), "paper-c" (16 x 1, 10 Gbit/s); see
        dpl_cluster_preset(). Raises InvalidArgument naming an unknown
        preset and listing the known ones."""
        if not isinstance(name, str):
            raise _fail(f"Cluster.preset: {name!r} is not a preset name")
        c = C.CCluster()
        check(C.plan().dpl_cluster_preset(name.encode(), ctypes.byref(c)))
        return cls._from_c(c)

    @classmethod
    def parse(cls, text: str, source: str = "cluster") -> "Cluster":
        """A cluster from dpl's version 1 JSON cluster form. Raises
        InvalidArgument naming the key and the fault."""
        data = text.encode()
        c = C.CCluster()
        try:
            check(C.json().dpl_cluster_read_json(data, len(data), ctypes.byref(c)))
        except Error as e:
            raise type(e)(e.code, e.name, f"{source}: {e.message}") from None
        if not c.name:
            c.name = Path(source).name.encode()[:C.CLUSTER_NAME_MAX - 1]
        return cls._from_c(c)

    @classmethod
    def load(cls, path: PathLike) -> "Cluster":
        """Read a JSON cluster file (unnamed clusters take the file's name).
        Raises FileNotFoundError naming the path. Blocks on the file system."""
        return cls.parse(_read(path, "cluster"), os.fspath(path))

    @classmethod
    def host(cls, ranks: int, *, device_memory: float | None = None,
             bandwidth: float | None = None, latency: float = HOST_LATENCY,
             measure: bool = False) -> "Cluster":
        """This machine as a cluster of one machine with ``ranks`` devices
        (one per rank, as under ``dpl.run`` with the shm transport).

        ``device_memory`` defaults to the physical memory (os.sysconf) over
        ``ranks``. ``bandwidth`` defaults to :data:`HOST_BANDWIDTH`, or,
        with ``measure=True``, to half this machine's memory copy bandwidth
        (a transfer through shared memory copies twice), measured with 32
        MiB copies (about 0.1 s). Raises InvalidArgument for a bad value."""
        _int("Cluster.host ranks", ranks, 1, C.MAX_DEVICES)
        if device_memory is None:
            try:
                total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            except (ValueError, OSError, AttributeError):
                total = 8 << 30
            device_memory = total / ranks
        if bandwidth is None:
            bandwidth = _copy_bandwidth() / 2 if measure else HOST_BANDWIDTH
        return cls(1, ranks, device_memory, intra_bandwidth=bandwidth, intra_latency=latency,
                   name=f"host-{ranks}")

    def to_json(self) -> str:
        """The cluster as dpl's version 1 JSON cluster form."""
        c = self._c()
        return C.write_to_string(lambda f: C.json().dpl_cluster_write_json(ctypes.byref(c), f))


def _copy_bandwidth(nbytes: int = 32 << 20, reps: int = 3) -> float:
    src, dst = ctypes.create_string_buffer(nbytes), ctypes.create_string_buffer(nbytes)
    ctypes.memmove(dst, src, nbytes)
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        ctypes.memmove(dst, src, nbytes)
        best = min(best, time.perf_counter() - t)
    return nbytes / max(best, 1e-9)
