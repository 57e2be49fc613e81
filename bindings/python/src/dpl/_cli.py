"""The ``dpl`` console script: runs the ``dpl`` command installed in the
package (``dpl/bin/dpl``) with the same arguments."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PACKAGE_BIN = Path(__file__).resolve().parent / "bin" / "dpl"


def executable() -> Path:
    """The path of the ``dpl`` command: ``$DPL_CLI`` when set (a build
    tree's binary), else the one installed in the package.

    Raises ``FileNotFoundError`` naming the path looked at.
    """
    env = os.environ.get("DPL_CLI")
    path = Path(env) if env else _PACKAGE_BIN
    if not path.is_file():
        raise FileNotFoundError(
            f"dpl: the dpl command is not at {path} "
            "(set DPL_CLI to a built dpl binary, or pip install the package)")
    return path


def main(argv: list[str] | None = None) -> int:
    """Replace this process with the ``dpl`` command given ``argv`` (default:
    ``sys.argv[1:]``). Returns only when the command cannot be started:
    2 after printing why."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path = executable()
        os.execv(path, [str(path), *args])
    except OSError as e:
        print(f"dpl: {e}", file=sys.stderr)
        return 2
    return 2  # not reached: execv returns only by raising


if __name__ == "__main__":
    sys.exit(main())
