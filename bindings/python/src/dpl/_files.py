"""Small file helpers shared by the package's writers."""

from __future__ import annotations


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
