"""The servers a scenario measures: redis-server, nats-server and the trio relay.

Each is a :class:`Server`: ``start()`` brings it up on a free 127.0.0.1 port
and returns once it answers (with a deadline), ``stop()`` ends it by its PID.
:class:`AnnouncedServer` runs any program that prints its bound
``host:port`` as its first stdout line -- the relay does, and so does
``python -m hub --listen 127.0.0.1:0``, so pub0sub's hub plugs in as
``AnnouncedServer("pub0sub", python_module("hub", "--listen", "127.0.0.1:0"))``.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from .procs import HOST, LineReader, free_port, python_module, spawn, stop_process, wait_until

READY_TIMEOUT = 15.0


class Server(Protocol):
    """A system under test: a process listening on ``address`` between start and stop."""

    name: str

    @property
    def address(self) -> tuple[str, int]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def _probe(address: tuple[str, int], send: bytes, expect: bytes) -> bool:
    """Connect, send ``send``, and check the reply starts with ``expect``."""
    with socket.create_connection(address, timeout=1.0) as s:
        if send:
            s.sendall(send)
        data = b""
        while len(data) < len(expect):
            chunk = s.recv(4096)
            if not chunk:
                return False
            data += chunk
        return data.startswith(expect)


class _ProcessServer:
    name = "server"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._address: tuple[str, int] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def address(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._address

    def _launch(self, argv: Sequence[str], port: int, hello: bytes, expect: bytes) -> None:
        """Start ``argv`` and wait until a probe (send ``hello``, read ``expect``) answers on ``port``."""
        self._proc = spawn(argv, capture=False)
        self._address = (HOST, port)
        try:
            wait_until(lambda: self._alive() and _probe((HOST, port), hello, expect),
                       timeout=READY_TIMEOUT, what=self.name)  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def _alive(self) -> bool:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited during start-up")
        return True

    def stop(self) -> None:
        try:
            stop_process(self._proc)
        finally:
            self._proc = None
            self._address = None
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    def __enter__(self) -> _ProcessServer:
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisServer(_ProcessServer):
    """redis-server without persistence; pub/sub output buffers unbounded so a slow
    Python subscriber is measured, not disconnected (Redis' default is 32 MB)."""

    name = "redis"
    binary = "redis-server"

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pub0sub-bench-redis-")
        port = free_port()
        argv = [
            self.binary, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no",
            "--dir", self._tmp.name, "--client-output-buffer-limit", "pubsub 0 0 0", "--logfile", "",
            "--loglevel", "warning", "--daemonize", "no",
        ]  # fmt: skip
        self._launch(argv, port, b"PING\r\n", b"+PONG")


class NatsServer(_ProcessServer):
    """nats-server with slow-consumer limits raised for the same reason as Redis'."""

    name = "nats"
    binary = "nats-server"

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pub0sub-bench-nats-")
        port = free_port()
        conf = Path(self._tmp.name) / "nats.conf"
        # ping_interval long: a server PING inside a run would perturb the byte counts.
        conf.write_text(
            f'host: "{HOST}"\nport: {port}\nmax_pending: 1073741824\nwrite_deadline: "60s"\n'
            f'ping_interval: "10m"\nmax_payload: 1048576\nlogfile: "{Path(self._tmp.name) / "nats.log"}"\n'
        )
        self._launch([self.binary, "-c", str(conf)], port, b"", b"INFO ")


class AnnouncedServer(_ProcessServer):
    """A program that prints its bound ``host:port`` as its first stdout line."""

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        super().__init__()
        self.name = name
        self.argv = list(argv)

    def start(self) -> None:
        self._proc = spawn(self.argv)
        try:
            line = LineReader(self._proc).next_line(timeout=READY_TIMEOUT, what=self.name)
            host, _, port = line.strip().rpartition(":")
            self._address = (host.strip("[]") or HOST, int(port))
        except BaseException:
            self.stop()
            raise


def relay_server() -> AnnouncedServer:
    """The raw trio relay: the ceiling for a Python hub."""
    return AnnouncedServer("relay", python_module("sdk.bench.relay", "--listen", f"{HOST}:0"))
