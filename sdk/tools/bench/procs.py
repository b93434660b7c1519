"""Child processes for benchmarks: free ports, readiness deadlines, stop by PID.

Every server binds 127.0.0.1; every wait has a deadline; every process is
stopped through its own :class:`subprocess.Popen` (hence its PID), never by name.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from ..stopping import stop_deferred

HOST = "127.0.0.1"
#: Hub arguments: every bench client connects from loopback (C1: thousands of them at once), and
#: the servers a hub is compared with have no per-address connection rate limit: the hub's is lifted.
EXEMPT_LOOPBACK = ("--connect-rate-exempt", "127.0.0.0/8")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (for servers that cannot bind port 0):
    all are held while picked, so none repeats."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]


def free_port() -> int:
    """A port free on 127.0.0.1 right now."""
    return free_ports(1)[0]


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``check`` until it returns true; ``TimeoutError`` naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            if check():
                return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.1f}s")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, *, grace: float = 5.0) -> None:
    """SIGTERM the child by its PID, then SIGKILL after ``grace`` seconds; reaped either way."""
    if proc is None or _reaped(proc):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    if _reap(proc, timeout=grace):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    if not _reap(proc, timeout=grace):
        raise subprocess.TimeoutExpired(proc.args, grace)


def _reaped(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> bool:
    return _reap(proc, timeout=0.0)


def _reap(proc: subprocess.Popen[bytes] | subprocess.Popen[str], *, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the child to exit and reap it: true once it has.

    By its PID (``os.waitpid``), not with ``Popen.wait``/``poll``: a stop signal's
    ``KeyboardInterrupt`` that lands inside ``poll()`` just after it took ``Popen``'s internal
    wait lock leaves that lock held for good, and from then on ``poll()`` says "running" and
    ``wait()`` times out for a child long dead.  CI saw it: a Ctrl-C while a redis-server started
    made stopping it time out twice (10 s), and the bench's cleanup then failed on it again."""
    deadline = time.monotonic() + timeout
    while proc.returncode is None:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already, by a Popen.wait elsewhere
            return True
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


#: Every child :func:`spawn` started that was running when last looked at (see stop_spawned).
_spawned: list[subprocess.Popen[str]] = []


def stop_spawned(*, grace: float = 5.0) -> list[int]:
    """Stop every child :func:`spawn` started that still runs (:func:`stop_process`: SIGTERM by its
    PID, SIGKILL after ``grace`` seconds).  Returns their PIDs.

    The bench's last cleanup.  Each server and worker is stopped by the ``finally`` that started
    it, but a stop signal lands once, wherever the bench is: inside one of those blocks (while it
    waits for one worker to exit) it skips the rest of the block, and between a spawn and the
    ``try`` that would stop the child it leaves one that no block knows.  A suite run at load ~8
    saw one of its children outlive a SIGTERMed ``pub0sub bench``."""
    running = [proc for proc in _spawned if not _reaped(proc)]
    for proc in running:
        stop_process(proc, grace=grace)
    _spawned.clear()
    return [proc.pid for proc in running]


@contextlib.contextmanager
def children_stopped() -> Iterator[None]:
    """Stop (by PID) every child :func:`spawn` starts inside the block that still runs when the
    block exits, however it exits.

    Around a measurement, so its workers stop before the servers they use: a stop signal
    landing between a worker's spawn and the ``try`` that would stop it left that worker to
    :func:`stop_spawned`, which runs only after the servers were stopped, and the worker, still
    starting, met a closed port and printed a traceback into the bench's stderr (a suite run
    saw it: ``test_bench_prints_what_it_measured_and_stops_its_servers``)."""
    before = list(_spawned)
    try:
        yield
    finally:
        for proc in [p for p in _spawned if all(p is not q for q in before)]:
            stop_process(proc)


class LineReader:
    """Read a child's stdout lines on a thread so the parent can wait with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self, *, timeout: float, what: str) -> str:
        try:
            line = self._lines.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise TimeoutError(f"{what}: no output after {timeout:.1f}s") from None
        if line is None:
            raise RuntimeError(f"{what}: process exited before printing a line")
        return line


def python_module(module: str, *args: str) -> list[str]:
    """argv running ``module`` with this interpreter (the venv's)."""
    return [sys.executable, "-m", module, *args]


def spawn(argv: Sequence[str], *, capture: bool = True, cwd: str | None = None) -> subprocess.Popen[str]:
    """Start a child with line-buffered text stdout (or none) and inherited stderr.

    In its own session: a Ctrl-C in the terminal reaches only ``pub0sub bench``, which stops
    its children by PID on the way out, instead of every worker printing its own traceback.
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # A stop signal raises only once the child is recorded: one landing inside Popen (the child
    # forked, Popen not yet returned) left a child no cleanup knew (a suite run saw it).
    with stop_deferred():
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        _spawned[:] = [p for p in _spawned if p.returncode is None]  # those seen to end are done with
        _spawned.append(proc)
    return proc
