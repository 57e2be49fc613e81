"""Small file helpers shared by the package's writers."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable


def _umask() -> int:
    """The process umask, read without changing it (Linux), else 022."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def replace_atomic(path: Any, write: Callable[[int], None]) -> None:
    """Make ``path`` through a temporary file in the same folder (mode
    0666 less the umask) and a rename, so readers see the old file or the
    whole new one: ``write(fd)`` writes the file and closes ``fd``. On any
    error the temporary file is removed and the error raised (OSError for
    the file system's)."""
    dest = os.fspath(path)
    if isinstance(dest, bytes):
        dest = os.fsdecode(dest)
    d, base = os.path.split(os.path.abspath(dest))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=d)
    try:
        try:
            os.fchmod(fd, 0o666 & ~_umask())   # mkstemp made it 0600
        except BaseException:
            os.close(fd)
            raise
        write(fd)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_atomic(path: Any, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` by :func:`replace_atomic`,
    synced to disk before the rename. Raises OSError."""
    def write(fd: int) -> None:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    replace_atomic(path, write)
