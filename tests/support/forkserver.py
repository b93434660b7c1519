"""Hub processes forked from one that has imported the hub and py-libp2p already.

A ``python -m hub`` process with a mesh spends ~1.5 CPU-s before it serves, most of it
importing py-libp2p (its package ``__init__`` imports QUIC, relay, TLS/ACME and DNS modules
whatever the caller uses; docs/benchmarks.md).  The suite starts hundreds of hubs on a
CPU-bound machine, so each pytest worker starts one *fork server* (``python -m
tests.support.forkserver FD``) that imports all of it once; every hub is then a fork of it,
running the same ``hub/__main__.py`` with its own argv, environment, working directory,
descriptor limit and stdio.  A forked hub is a real hub process: its own PID (stopped by it,
SIGSTOPped and SIGKILLed by it), its own sockets and files.

:class:`ForkedProcess` answers what the tests ask of a :class:`subprocess.Popen`
(``pid``, ``stdout``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``,
``returncode``).  The hub is the fork server's child, not the test's: the server reaps it
and sends its exit status.  ``PUB0SUB_TEST_EXEC=1`` makes the suite exec every hub instead.

The protocol, one JSON message per SOCK_SEQPACKET datagram: the client sends
``{"id", "args", "env", "cwd", "nofile": [soft, hard]}`` with the hub's stdout and stderr descriptors
attached (SCM_RIGHTS); the server answers ``{"id", "pid"}`` (or ``{"id", "error"}``), and
``{"exited": pid, "code": c}`` whenever a hub ends (``c`` as Popen's ``returncode``:
negative for a signal).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from typing import IO, Any

#: Set to 1 to start every hub with ``python -m hub`` instead (what a fork changes, if anything).
EXEC_ENV = "PUB0SUB_TEST_EXEC"
#: The largest message: a hub's argv and environment.
MAX_MESSAGE = 1 << 20


def wanted() -> bool:
    return os.environ.get(EXEC_ENV) != "1"


# -- the client (in the test process) ------------------------------------------------------


class ForkServer:
    """One fork server per test process, started at its first use (:func:`server`)."""

    def __init__(self) -> None:
        from tests.support.hubprocess import ROOT

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=ROOT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        theirs.close()
        self.sock = ours
        self._send_lock = threading.Lock()
        self._changed = threading.Condition()
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.exits: dict[int, int] = {}
        self._closed = False
        threading.Thread(target=self._read, name="forkserver-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._closed = True
                    self._changed.notify_all()
                    return
                message = json.loads(data)
                if "exited" in message:
                    self.exits[message["exited"]] = message["code"]
                else:
                    self._replies[message["id"]] = message
                self._changed.notify_all()

    def spawn(
        self, args: list[str], *, env: dict[str, str], cwd: str, stdout: int, stderr: int, nofile: int | None
    ) -> int:
        """Fork a hub with ``args`` (after ``python -m hub``); its PID."""
        with self._send_lock:
            self._next_id += 1
            request_id = self._next_id
            # What an exec'd child would inherit from this process: its descriptor limits.
            limits = (nofile, nofile) if nofile is not None else resource.getrlimit(resource.RLIMIT_NOFILE)
            request = {"id": request_id, "args": args, "env": env, "cwd": cwd, "nofile": list(limits)}
            socket.send_fds(self.sock, [json.dumps(request).encode()], [stdout, stderr])
        with self._changed:
            if not self._changed.wait_for(lambda: request_id in self._replies or self._closed, timeout=60):
                raise RuntimeError("the fork server did not answer within 60 s")
            if self._closed and request_id not in self._replies:
                raise RuntimeError(f"the fork server ended (exit {self.proc.poll()})")
            reply = self._replies.pop(request_id)
        if "error" in reply:
            raise RuntimeError(f"the fork server could not fork a hub: {reply['error']}")
        return int(reply["pid"])

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self.exits or self._closed, timeout=timeout)
            return self.exits.get(pid)

    def close(self) -> None:
        """The server ends when its socket does; hubs still running go on, as Popen's would."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


_server: ForkServer | None = None
_server_lock = threading.Lock()


def server() -> ForkServer:
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            _server = ForkServer()
            atexit.register(_server.close)
        return _server


class ForkedProcess:
    """A forked hub, with the part of :class:`subprocess.Popen`'s interface the tests use."""

    def __init__(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        stderr: IO[Any] | int,
        nofile: int | None = None,
    ) -> None:
        self.args = [sys.executable, "-m", "hub", *args]
        self._server = server()
        read_end, write_end = os.pipe()
        err_fd = stderr if isinstance(stderr, int) else stderr.fileno()
        try:
            self.pid = self._server.spawn(args, env=env, cwd=cwd, stdout=write_end, stderr=err_fd, nofile=nofile)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self.stdout: IO[str] = open(read_end)  # noqa: SIM115 - closed by the owner
        self.returncode: int | None = None
        # A PID file descriptor: signals reach this process even after its PID is reused.
        self._pidfd: int | None = None
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(self.pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.wait_exit(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.wait_exit(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self._close_pidfd()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        self._close_pidfd()


# -- the server --------------------------------------------------------------------------


def _preload() -> None:
    """Everything a mesh hub imports before it serves (what each fork then skips)."""
    import hub.app
    import hub.cli
    import hub.mesh.host
    import hub.mesh.mesh  # noqa: F401


def serve(sock: socket.socket) -> None:
    _preload()
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        _reap(sock)
        readable, _, _ = select.select([sock], [], [], 0.05)
        if not readable:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 2)
        except ConnectionResetError:
            data, fds = b"", []
        if not data:
            return  # the test process is gone or done
        request = json.loads(data)
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"id": request["id"], "error": str(exc)}).encode())
            continue
        if pid == 0:
            _run_hub(request, fds, sock)  # never returns
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _run_hub(request: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    """In the forked child: become ``python -m hub ARGS`` and exit with its code."""
    code: Any = 1
    try:
        sock.close()
        out, err = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (devnull, out, err):
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        soft, hard = request["nofile"]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        # What a new interpreter would have: stdout to a pipe is block-buffered unless
        # PYTHONUNBUFFERED, stderr is line-buffered; and random generators of its own.
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        raw = open(1, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        sys.stdout = io.TextIOWrapper(raw, encoding="utf-8", write_through=unbuffered)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the server ignores it; a hub must not
        import random

        random.seed()
        import trio

        trio._core._run._r.seed()  # trio's scheduling randomness, seeded once at its import
        sys.argv = ["-m", *request["args"]]
        import runpy

        try:
            runpy.run_module("hub", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        if code is None:
            code = 0
        elif not isinstance(code, int):
            with contextlib.suppress(BaseException):
                print(code, file=sys.stderr, flush=True)
            code = 1
        os._exit(code)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the hubs and pytest, not the server
    serve(socket.socket(fileno=int(sys.argv[1])))
