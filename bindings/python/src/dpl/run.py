"""Run the ranks of a dpl job: as threads of this process
(:func:`threads`) or as local processes (:func:`launch`, and the command
``python -m dpl.run``).

Command line::

    python -m dpl.run -n N [--transport NAME] [--timeout S] [--bind B] script.py [args...]
    python -m dpl.run -n N [--transport NAME] [--timeout S] [--bind B] -m module [args...]

starts N processes of ``sys.executable script.py args`` (or ``-m module``)
with ``DPL_RANK``, ``DPL_WORLD_SIZE``, ``DPL_ROOT=127.0.0.1:<port>`` (rank 0
also ``DPL_ROOT_FD``, the socket already listening there),
``DPL_JOB_SECRET`` (64 fresh random hex digits per job, which every rank
proves to rank 0 at the rendezvous, see ``dpl/bootstrap.h``) and, with
``--transport``, ``DPL_TRANSPORT`` in their environment (so
``dpl.world.current()`` meets over dpl's bootstrap and
``Transport.open`` picks that transport), and waits for them. Once a rank
fails the others get ``--timeout`` seconds (default 30) to exit, then are
killed. The exit status is the first failing rank's (its exit code, or
128 + the signal that ended it); the last line on stderr names it
("dpl.run: rank 2 failed (exit status 1)"). SIGINT, SIGTERM and SIGHUP to
the launcher send SIGTERM to every rank (each runs in a process group of
its own, so a terminal's Ctrl-C reaches the ranks once, through the
launcher), wait up to the timeout, kill what is left and exit 130, 143 or
129. Usage errors exit 2.

``--bind`` places each rank on one CPU of those the launcher may run on
(C of them, in order): ``core`` puts rank r on CPU r mod C; ``fold`` puts
ranks r and N-1-r together, on CPU min(r, N-1-r) mod C -- the pipeline
folded in a V, as the V schedules place their stages: with more ranks than
CPUs, a first stage busy filling or draining the pipeline shares its CPU
with the last, which is idle then, and each rank keeps its caches;
``none`` (the default) leaves placement to the kernel.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Sequence

from . import _transport_capi as _capi, errors as _errors
from . import world as _world

__all__ = ["threads", "rank", "world_size", "launch", "main"]

PROG = "dpl.run"


# ---------------------------------------------------------------- threads

def threads(n: int, fn: Callable[..., Any], *args: Any, timeout: float = 120.0,
            **kw: Any) -> list:
    """Run ``fn(*args, **kw)`` in ``n`` threads, rank ``r`` in thread ``r``,
    each with its own :class:`dpl.world.ThreadWorld` of one fresh world name
    (what :func:`dpl.world.current` returns there; its collectives wait at
    most ``timeout`` seconds). Returns the results by rank.

    Blocks until every thread ended, at most ``timeout`` seconds in all.
    When ``fn`` raises in a rank, that rank is marked failed (the others'
    collectives that need it raise :class:`dpl.PeerError` at once) and the
    transports opened over its world are closed (peers see it as gone);
    once every thread ended, the exception of the lowest rank that failed
    on its own is raised (ranks whose exception is a :class:`dpl.PeerError`
    only echo another's failure and come after; when every failure is one,
    the lowest rank's). A thread still running at the deadline raises
    :class:`dpl.TimeoutError` naming its rank (the thread is a daemon and
    is left running). ``timeout`` is not passed to ``fn``.
    """
    _world._index(n, "n", 1)
    if not callable(fn):
        raise _world._err("EINVAL", f"fn={fn!r} is not callable")
    t = _world._seconds(timeout, "timeout")
    name = _world._fresh_name()
    group = _world._hold(name, n)
    results: list = [None] * n
    excs: list[BaseException | None] = [None] * n

    def body(r: int) -> None:
        w = None
        try:
            w = _world.ThreadWorld(name, r, n, timeout=t)
            _world._set_current(w)
            results[r] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - reported by rank below
            excs[r] = exc
            if w is not None:
                w._fail(f"failed ({type(exc).__name__}: {exc})")
        finally:
            _world._set_current(None)
            if w is not None:
                w._close_transports()
                w.close()

    ths = [threading.Thread(target=body, args=(r,), name=f"dpl-rank-{r}", daemon=True)
           for r in range(n)]
    try:
        for th in ths:
            th.start()
        deadline = time.monotonic() + t
        for th in ths:
            th.join(max(0.0, deadline - time.monotonic()))
        alive = [r for r, th in enumerate(ths) if th.is_alive()]
        for r in alive:
            with group.cond:
                group.gone.setdefault(r, f"did not finish within {t:g} s")
                group.cond.notify_all()
    finally:
        _world._release(group)
    failed = [r for r in range(n) if excs[r] is not None]
    own = [r for r in failed if not isinstance(excs[r], _world.errors.PeerError)]
    first = (own or failed or [None])[0]
    if alive:
        msg = f"{PROG}.threads: {_world._ranks(alive)} still running after {t:g} s"
        if first is not None:
            msg += f" (rank {first} failed: {type(excs[first]).__name__}: {excs[first]})"
        raise _world._err("ETIMEDOUT", msg) from excs[first] if first is not None else None
    if first is None:
        return results
    exc = excs[first]
    assert exc is not None
    if hasattr(exc, "add_note"):
        for r in failed:
            if r != first:
                exc.add_note(f"rank {r} also failed: {type(excs[r]).__name__}: {excs[r]}")
    raise exc


def env_rank() -> tuple[int, int] | None:
    """(rank, world size) as :meth:`dpl.world.BootstrapWorld.from_env`
    would join with them, read by the C library without joining
    (``dpl_bootstrap_env_rank``: ``DPL_RANK`` else ``RANK``, and
    ``DPL_WORLD_SIZE`` else ``WORLD_SIZE``, each on its own; plain
    decimal digits); None when neither ``DPL_RANK`` nor ``RANK`` is set.
    :class:`dpl.InvalidArgument` names a variable that is missing or
    malformed, with the message the join gives."""
    r, n = ctypes.c_uint32(), ctypes.c_uint32()
    rc = _capi.boot().bootstrap_env_rank(ctypes.byref(r), ctypes.byref(n))
    if rc == _errors.ENOENT:
        return None
    _errors.check(rc)
    return r.value, n.value


def peek(world: "_world.World | None" = None) -> tuple[int, int]:
    """(rank, world size) of the world :func:`dpl.world.current` gives (or
    of ``world`` when given), without making one: the thread's world
    (:func:`threads`), the process's world once made, torch.distributed's
    default group when initialised, :func:`env_rank`, else (0, 1). Never
    blocks. Errors: as :func:`env_rank`."""
    if world is not None:
        return world.rank, world.world_size
    w = _world._thread_world() or _world._process_world
    if w is not None and not w.closed:
        return w.rank, w.world_size
    dist = _world._torch_dist()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    return env_rank() or (0, 1)


def rank() -> int:
    """The rank of :func:`peek`: what :func:`dpl.world.current` gives,
    without making a world."""
    return peek()[0]


def world_size() -> int:
    """The world size of :func:`peek`."""
    return peek()[1]


# -------------------------------------------------------------- processes

def _root_listener(n: int) -> socket.socket:
    """A TCP socket on 127.0.0.1 (port chosen by the kernel), listening
    with room for ``n`` ranks: rank 0 inherits it (``DPL_ROOT_FD``), so
    the port is held from before any rank starts until rank 0 listens."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(min(n, 1024))
    except OSError:
        s.close()
        raise
    return s


def _child_setup_fn() -> Callable[[], None]:
    """What each rank runs between fork and exec: a process group of its
    own, and death with the launcher (PR_SET_PDEATHSIG)."""
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                          ctypes.c_ulong]
        prctl.restype = ctypes.c_int
    except (OSError, AttributeError):
        prctl = None

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:
                os._exit(1)
    return setup


def _pinned(setup: Callable[[], None], cpu: int | None) -> Callable[[], None]:
    """``setup``, then (between fork and exec) the CPU ``cpu`` if any."""
    if cpu is None:
        return setup

    def run() -> None:
        setup()
        os.sched_setaffinity(0, {cpu})
    return run


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _sweep_shm(pid: int) -> None:
    """Remove what a rank killed by a signal left in /dev/shm: dpl's
    segments (dpl-*-p<pid>) and libfabric shm's "<pid>:..." files."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for f in names:
        if f.startswith(f"{pid}:") or (f.startswith("dpl-") and f.endswith(f"-p{pid}")):
            try:
                os.unlink(os.path.join("/dev/shm", f))
            except OSError:
                pass


_EXIT_BY_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


BINDS = ("none", "core", "fold")


def bind_cpus(n: int, bind: str, cpus: Sequence[int] | None = None) -> list[int | None]:
    """The CPU each of ``n`` ranks runs on under ``bind`` (see the module's
    text), from ``cpus`` (default: this process's affinity, sorted); None
    for every rank with "none". Raises InvalidArgument for another value."""
    if bind not in BINDS:
        raise _world._err("EINVAL", f"bind {bind!r} is not one of {', '.join(BINDS)}")
    if bind == "none":
        return [None] * n
    c = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    return [c[(r if bind == "core" else min(r, n - 1 - r)) % len(c)] for r in range(n)]


def launch(n: int, argv: Sequence[str], env: dict[str, str] | None = None,
           timeout: float = 30.0, transport: str | None = None,
           bind: str = "none") -> int:
    """Run ``n`` processes of ``argv`` (the full command line; ``argv[0]``
    is the program) as the ranks of one job and return the job's exit
    status (see the module's text: 0, the first failing rank's status, or
    130/143/129 after SIGINT/SIGTERM/SIGHUP).

    Rank ``r`` gets ``env`` (default: this process's environment) plus
    ``DPL_RANK=r``, ``DPL_WORLD_SIZE=n``, ``DPL_ROOT=127.0.0.1:<port>``
    (rank 0 also ``DPL_ROOT_FD``: a socket listening on that port, bound
    here before any rank starts, so no other process can take the port
    in between), ``DPL_JOB_SECRET`` (``secrets.token_hex(32)``, fresh for each call and
    replacing one in ``env``: only this job's ranks join its rendezvous),
    ``DPL_TRANSPORT=transport`` when given, and ``UCX_NET_DEVICES=lo``,
    ``FI_TCP_IFACE=lo``, ``UCX_LOG_FILE=stderr`` unless set. Each rank runs
    in its own process group and dies with the launcher; with ``bind``
    "core" or "fold" it runs on the one CPU :func:`bind_cpus` gives it
    (set before it starts).

    Blocks while the ranks run; once one failed (non-zero exit or a signal),
    at most ``timeout`` seconds more before the rest are killed (SIGKILL to
    their process groups). On the main thread, SIGINT/SIGTERM/SIGHUP are
    caught meanwhile and passed on as SIGTERM (handlers restored on
    return). Writes which ranks failed to stderr, the first last. Raises
    :class:`dpl.InvalidArgument` for a bad ``n``, ``argv``, ``timeout`` or ``bind``,
    ``OSError`` when a rank cannot be started (those started are killed).
    """
    _world._index(n, "n", 1)
    t = _world._seconds(timeout, "timeout")
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise _world._err("EINVAL", f"argv={argv!r} is not a non-empty list of strings")
    cpus = bind_cpus(n, bind)
    base = dict(os.environ if env is None else env)
    for k, v in (("UCX_NET_DEVICES", "lo"), ("FI_TCP_IFACE", "lo"), ("UCX_LOG_FILE", "stderr")):
        base.setdefault(k, v)
    if transport:
        base["DPL_TRANSPORT"] = transport
    base.pop("DPL_ROOT_FD", None)
    listener = _root_listener(n)
    base.update(DPL_WORLD_SIZE=str(n), DPL_ROOT=f"127.0.0.1:{listener.getsockname()[1]}",
                DPL_JOB_SECRET=secrets.token_hex(32))
    run_dir = tempfile.mkdtemp(prefix="dpl-run-")
    base["DPL_RUN_DIR"] = run_dir
    caught: list[int] = []
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for s in _EXIT_BY_SIGNAL:
            old[s] = signal.signal(s, lambda sig, _frame: caught.append(sig))
    procs: list[subprocess.Popen] = []
    try:
        setup = _child_setup_fn()
        sys.stdout.flush()
        sys.stderr.flush()
        for r in range(n):
            own = {"DPL_ROOT_FD": str(listener.fileno())} if r == 0 else {}
            try:
                procs.append(subprocess.Popen(list(argv), env=dict(base, DPL_RANK=str(r), **own),
                                              preexec_fn=_pinned(setup, cpus[r]),
                                              pass_fds=(listener.fileno(),) if r == 0 else ()))
            except OSError as exc:
                for p in procs:
                    _signal_group(p, signal.SIGKILL)
                    p.wait()
                raise OSError(exc.errno, f"{PROG}: cannot start rank {r} "
                              f"({argv[0]}): {exc.strerror}") from exc
        # Rank 0 holds it now: once it closes it, a late rank is refused,
        # not queued here.
        listener.close()
        return _wait(procs, t, caught, run_dir)
    finally:
        listener.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        for p in procs:
            if p.poll() is None:  # an exception above: no rank outlives us
                _signal_group(p, signal.SIGKILL)
                p.wait()
        for s, h in old.items():
            signal.signal(s, h)


def _causes(run_dir: str | None, n: int) -> dict[int, dict]:
    """What the ranks reported through DPL_RUN_DIR (see dpl._report)."""
    out: dict[int, dict] = {}
    for r in range(n):
        try:
            with open(os.path.join(run_dir or "", f"rank{r}.json")) as f:
                d = json.load(f)
            if isinstance(d.get("cause"), int) and 0 <= d["cause"] < n:
                out[r] = d
        except (OSError, ValueError):
            pass
    return out


def _culprit(causes: dict[int, dict], status: list[int | None]) -> int | None:
    """The rank the job failed because of: one that reported its own
    error, else the rank most reports name (ties: the lowest)."""
    own = [r for r, d in causes.items() if d["cause"] == r]
    if own:
        return min(own)
    named = [d["cause"] for d in causes.values()]
    if not named:
        return None
    return min(set(named), key=lambda c: (-named.count(c), c))


def _wait(procs: list[subprocess.Popen], t: float, caught: list[int],
          run_dir: str | None = None) -> int:
    n = len(procs)
    status: list[int | None] = [None] * n
    killed = [False] * n
    first = None
    stop = None
    deadline = None
    while any(s is None for s in status):
        now = time.monotonic()
        if caught and stop is None:
            stop = caught[0]
            for r, p in enumerate(procs):
                if status[r] is None:
                    _signal_group(p, signal.SIGTERM)
            deadline = min(deadline or now + t, now + t)
        moved = False
        for r, p in enumerate(procs):
            if status[r] is None and (rc := p.poll()) is not None:
                status[r], moved = rc, True
                if rc != 0 and first is None and stop is None:
                    first = r
                    deadline = deadline or now + t
        if deadline is not None and time.monotonic() > deadline:
            for r, p in enumerate(procs):
                if status[r] is None:
                    _signal_group(p, signal.SIGKILL)
                    status[r] = p.wait()
                    killed[r] = True
        elif not moved:
            time.sleep(0.005)
    for r, p in enumerate(procs):
        if (status[r] or 0) < 0:
            _sweep_shm(p.pid)
    lines = []
    for r, p in enumerate(procs):
        if killed[r]:
            why = "ranks stopped" if stop is not None else f"rank {first} failed"
            lines.append(f"{PROG}: rank {r} (pid {p.pid}) did not exit within {t:g} s "
                         f"after {why} and was killed")
        elif status[r] != 0 and r != first:
            lines.append(f"{PROG}: rank {r} (pid {p.pid}) failed ({_describe(status[r] or 0)})")
    if stop is not None:
        lines.append(f"{PROG}: stopped by {signal.Signals(stop).name}; SIGTERM passed on "
                     "to every rank")
        code = _EXIT_BY_SIGNAL.get(stop, 128 + int(stop))
    elif first is not None:
        causes = _causes(run_dir, n)
        culprit = _culprit(causes, status)
        if culprit is not None and culprit != first:
            rc = status[culprit] or status[first] or 0
            why = causes[culprit]["reason"] if culprit in causes else _describe(status[culprit] or 0)
            others = sorted(r for r in causes if r != culprit)
            lines.append(f"{PROG}: rank {culprit} failed first ({why}); "
                         + (f"rank{'s' if len(others) > 1 else ''} "
                            f"{', '.join(map(str, others))} stopped because of it"
                            if others else f"rank {first} exited first"))
        else:
            rc = status[first] or 0
            lines.append(f"{PROG}: rank {first} failed ({_describe(rc)})")
        code = rc if rc > 0 else 128 - rc
    else:
        code = 0
    if lines:
        sys.stderr.write("".join(line + "\n" for line in lines))
        sys.stderr.flush()
    return code


# ------------------------------------------------------------ command line

USAGE = (f"usage: python -m {PROG} -n N [--transport NAME] [--timeout S] "
         "[--bind none|core|fold] (script.py | -m module) [args...]")


class _Usage(Exception):
    pass


def _parse(argv: list[str]) -> tuple[int, str | None, float, list[str], str]:
    n, transport, timeout, module, bind = None, None, 30.0, None, "none"
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(USAGE + "\n\n" + (__doc__ or "").split("Command line::")[0].strip())
            raise SystemExit(0)
        if a == "--":
            i += 1
            break
        opt, val = a, None
        for long in ("--nprocs", "--transport", "--timeout", "--bind"):
            if a.startswith(long + "="):
                opt, val = long, a[len(long) + 1:]
        if val is None and a[:2] in ("-n", "-m") and len(a) > 2 and not a.startswith("--"):
            opt, val = a[:2], a[2:]
        if opt not in ("-n", "--nprocs", "--transport", "--timeout", "--bind", "-m"):
            if a.startswith("-") and a != "-":
                raise _Usage(f"unknown option {a!r}")
            break
        if val is None:
            if i + 1 >= len(argv):
                raise _Usage(f"{opt} needs a value")
            val, i = argv[i + 1], i + 2
        else:
            i += 1
        if opt in ("-n", "--nprocs"):
            if not re.fullmatch(r"[0-9]+", val) or int(val) < 1:
                raise _Usage(f"-n {val!r} is not a whole number >= 1")
            n = int(val)
        elif opt == "--bind":
            if val not in BINDS:
                raise _Usage(f"--bind {val!r} is not one of {', '.join(BINDS)}")
            bind = val
        elif opt == "--transport":
            if not val:
                raise _Usage("--transport '' is empty")
            transport = val
        elif opt == "--timeout":
            try:
                timeout = _world._seconds(val, "--timeout")
            except ValueError:
                raise _Usage(f"--timeout {val!r} is not a number of seconds > 0") from None
        else:
            module = val
            break
    rest = argv[i:]
    if n is None:
        raise _Usage("-n N (the number of ranks) is missing")
    if module is not None:
        cmd = [sys.executable, "-m", module, *rest]
    elif rest:
        cmd = [sys.executable, *rest]
    else:
        raise _Usage("no script.py (or -m module) to run")
    return n, transport, timeout, cmd, bind


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dpl.run``: parse ``argv`` (default ``sys.argv[1:]``), run
    :func:`launch` and return its exit status (2 for usage errors, 1 when
    a rank cannot be started)."""
    try:
        n, transport, timeout, cmd, bind = _parse(list(sys.argv[1:] if argv is None else argv))
    except _Usage as exc:
        sys.stderr.write(f"{PROG}: {exc}\n{USAGE}\n")
        return 2
    try:
        return launch(n, cmd, timeout=timeout, transport=transport, bind=bind)
    except OSError as exc:
        sys.stderr.write(f"{exc.strerror or exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
