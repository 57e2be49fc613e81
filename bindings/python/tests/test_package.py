"""The package itself: importing without torch, the error mapping, finding
libraries, the versions agreeing, and the ``dpl`` console script."""

from __future__ import annotations

import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dpl
import dpl._cli as cli
import dpl._lib as lib
import dpl.errors as errors

PY_ROOT = Path(__file__).resolve().parents[1]      # bindings/python
REPO_ROOT = PY_ROOT.parents[1]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)


def test_import_without_torch():
    out = run_python("import sys; sys.modules['torch'] = None\n"
                     "import dpl, dpl.errors, dpl._lib\n"
                     "dpl._lib.load('dpl')\n"
                     "print(dpl.__version__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == dpl.__version__


def test_modules_outside_dpl_torch_import_without_torch():
    names = sorted(m.name for m in pkgutil.iter_modules(dpl.__path__) if m.name != "torch")
    assert "errors" in names and "_lib" in names
    out = run_python("import importlib, sys; sys.modules['torch'] = None\n"
                     f"bad = []\nfor n in {names!r}:\n"
                     "    try: importlib.import_module('dpl.' + n)\n"
                     "    except Exception as e: bad.append(f'dpl.{n}: {e!r}')\n"
                     "print('\\n'.join(bad))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"modules that need torch or fail:\n{out.stdout}"


def test_check_maps_einval_to_invalid_argument():
    assert errors.check(0) == 0
    assert errors.check(7) == 7
    with pytest.raises(dpl.InvalidArgument) as e:
        errors.check(-22)
    assert e.value.code == -22
    assert e.value.name == "DPL_EINVAL"
    assert isinstance(e.value, ValueError)
    with pytest.raises(dpl.TimeoutError) as t:
        errors.check(errors.ETIMEDOUT)
    assert t.value.name == "DPL_ETIMEDOUT"


def test_unknown_library_names_the_folders_searched(monkeypatch, tmp_path):
    before = os.environ.get("DPL_LIBRARY_PATH", "")
    monkeypatch.setenv("DPL_LIBRARY_PATH", os.pathsep.join(p for p in (before, str(tmp_path)) if p))
    with pytest.raises(FileNotFoundError) as e:
        lib.load("dpl-no-such-library")
    msg = str(e.value)
    assert "libdpl-no-such-library.so" in msg
    for d in lib.search_path():
        assert str(d) in msg
    assert str(tmp_path) in msg


def test_versions_agree():
    pyproject = (PY_ROOT / "pyproject.toml").read_text()
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    py = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    c = re.search(r"project\(dpl VERSION ([0-9.]+)", cmake)
    assert py and c
    assert py.group(1) == c.group(1) == dpl.__version__


def test_cli_script_runs_the_command():
    if not os.environ.get("DPL_CLI"):
        pytest.skip("DPL_CLI (the built dpl binary) is not set")
    out = run_python("import dpl._cli, sys; sys.exit(dpl._cli.main(['--version']))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"dpl {dpl.__version__}"


def test_cli_script_names_a_missing_command(monkeypatch, tmp_path, capsys):
    missing = tmp_path / "no-dpl"
    monkeypatch.setenv("DPL_CLI", str(missing))
    assert cli.main(["--version"]) == 2
    assert str(missing) in capsys.readouterr().err
