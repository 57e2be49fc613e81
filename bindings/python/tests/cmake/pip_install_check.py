"""Check an installed dpl package (run by python_pip_install with the
venv's python, from outside the source tree, with ``python -I``).

The package must import without torch, load every library it ships from
its own ``dpl/lib`` inside this venv's site-packages, load the shm and
inproc transports (and ucx/ofi when shipped) through the core's
``dpl_transport_load()``, and its ``dpl`` console script must run the
shipped command. Exits non-zero with a message on the first failure.
"""

from __future__ import annotations

import sys

sys.modules["torch"] = None  # any `import torch` now raises ImportError

import ctypes  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sysconfig  # noqa: E402
from pathlib import Path  # noqa: E402

REQUIRED = {"dpl", "dpl-sim", "dpl-plan", "dpl-csv", "dpl-json", "dpl-bootstrap",
            "dpl-backend", "dpl-transport-inproc", "dpl-transport-shm"}


def fail(msg: str) -> None:
    print(f"pip_install_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    if os.environ.get("DPL_LIBRARY_PATH"):
        fail("DPL_LIBRARY_PATH is set; the check must use the installed libraries only")
    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    import dpl
    import dpl._lib as lib
    import dpl.errors as errors
    pkg = Path(dpl.__file__).resolve().parent
    if pkg.parent != site:
        fail(f"dpl imported from {pkg}, not from this venv's site-packages {site}")
    libdir = pkg / "lib"
    files = sorted(libdir.glob("libdpl*.so*"))
    links = [p.name for p in files if p.is_symlink()]
    if links:
        fail(f"symbolic links in {libdir}: {links}")
    stems = {p.name[3:-3] for p in files if p.name.endswith(".so")}
    if REQUIRED - stems:
        fail(f"missing from {libdir}: {sorted(REQUIRED - stems)} (found {sorted(stems)})")
    for extra in ("include", "lib/cmake", "lib/pkgconfig"):
        if (pkg / extra).exists():
            fail(f"{pkg / extra} is in the package (the wheel excludes it)")

    for stem in sorted(stems):
        handle = lib.load(stem)
        where = Path(handle._name).resolve()
        if where.parent != libdir:
            fail(f"lib{stem}.so loaded from {where}, not from {libdir}")

    core = lib.load("dpl")
    core.dpl_transport_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    core.dpl_transport_load.restype = ctypes.c_int
    names = ["shm", "inproc"] + [n for n in ("ucx", "ofi") if f"dpl-transport-{n}" in stems]
    for name in names:
        table = ctypes.c_void_p()
        rc = core.dpl_transport_load(name.encode(), ctypes.byref(table))
        if rc != 0 or not table.value:
            fail(f"dpl_transport_load({name!r}) = {rc}: {errors.last_error()}")

    # Every dpl library in this process is the package's own.
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith("libdpl") and Path(path).resolve().parent != libdir:
            fail(f"mapped from outside the package: {path}")

    try:
        errors.check(-22)
    except dpl.InvalidArgument as e:
        if e.code != -22 or e.name != "DPL_EINVAL":
            fail(f"check(-22) raised code={e.code} name={e.name}")
    else:
        fail("errors.check(-22) did not raise")

    script = Path(sys.executable).parent / "dpl"
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                         timeout=60, check=False)
    if out.returncode != 0 or out.stdout.strip() != f"dpl {dpl.__version__}":
        fail(f"{script} --version: rc={out.returncode} out={out.stdout!r} err={out.stderr!r}")

    print(f"pip_install_check: ok: dpl {dpl.__version__} from {pkg}; "
          f"{len(stems)} libraries; transports {', '.join(names)}; {script} runs")


if __name__ == "__main__":
    main()
