"""Tell ``python -m dpl.run`` why this rank is failing.

The launcher sets ``DPL_RUN_DIR`` to a folder of its own; a rank whose
dpl call fails writes ``rank<R>.json`` there once: the rank it names as
the cause (itself for its own error, the failed peer for a PeerError or a
timeout naming one) and a one-line reason. The launcher's last line then
names the rank that failed first, not the survivor that exited first.
"""

from __future__ import annotations

import json
import os
import threading

_lock = threading.Lock()
_done = False


def report_failure(exc: BaseException) -> None:
    """Record ``exc`` as this rank's failure for the launcher (first call
    only; a no-op outside ``dpl.run`` or ranks as threads). Never raises."""
    global _done
    folder, rank = os.environ.get("DPL_RUN_DIR"), os.environ.get("DPL_RANK")
    if not folder or rank is None or threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        if _done:
            return
        _done = True
    try:
        from . import errors
        me = int(rank)
        cause = me
        if isinstance(exc, (errors.PeerError, errors.TimeoutError)):
            named = getattr(exc, "rank", None)
            if named is None:
                named = errors._rank_in(str(exc))
            cause = named if named is not None else me
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        tmp = os.path.join(folder, f".rank{me}.json")
        with open(tmp, "w") as f:
            json.dump({"rank": me, "cause": cause, "reason": reason}, f)
        os.replace(tmp, os.path.join(folder, f"rank{me}.json"))
    except Exception:  # noqa: BLE001 - reporting must never mask the error
        pass
