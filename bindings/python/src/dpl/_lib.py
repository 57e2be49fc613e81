"""Locate and load dpl's C libraries (ctypes).

The C libraries are the single source of truth; this package calls them
through ctypes. They are found, in order:

* in the directories of ``DPL_LIBRARY_PATH`` (``os.pathsep``-separated),
  which lets the tests run against a CMake build tree;
* in ``dpl/lib`` inside the installed package (what ``pip install`` puts
  there).

``load("dpl-sim")`` returns the ``ctypes.CDLL`` of ``libdpl-sim.so``; each
library is loaded once per process.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

_PACKAGE_LIB = Path(__file__).resolve().parent / "lib"
_loaded: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def search_path() -> list[Path]:
    """The directories searched for dpl's libraries, in order."""
    dirs = [Path(d) for d in os.environ.get("DPL_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs.append(_PACKAGE_LIB)
    return dirs


def find(stem: str) -> Path:
    """The path of ``lib<stem>.so`` (e.g. ``stem="dpl-plan"``).

    Raises ``FileNotFoundError`` naming every directory searched.
    """
    names = [f"lib{stem}.so", f"lib{stem}.so.0"]
    dirs = search_path()
    for d in dirs:
        for n in names:
            p = d / n
            if p.exists():
                return p
    raise FileNotFoundError(
        f"dpl: lib{stem}.so not found in {', '.join(str(d) for d in dirs)} "
        "(set DPL_LIBRARY_PATH to the folders of a dpl build, or pip install the package)")


def load(stem: str) -> ctypes.CDLL:
    """Load ``lib<stem>.so`` once (RTLD_GLOBAL, so transports dlopen()ed by
    the core resolve the core's symbols) and return it. Thread-safe."""
    with _lock:
        lib = _loaded.get(stem)
        if lib is None:
            if stem != "dpl":
                load_unlocked("dpl")
            lib = load_unlocked(stem)
        return lib


def load_unlocked(stem: str) -> ctypes.CDLL:
    lib = _loaded.get(stem)
    if lib is None:
        lib = ctypes.CDLL(str(find(stem)), mode=ctypes.RTLD_GLOBAL)
        _loaded[stem] = lib
    return lib
