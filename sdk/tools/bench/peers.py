"""The servers a scenario measures: redis-server, nats-server (alone, or two joined by a
route) and the trio relay.

Each is a :class:`Server`: ``start()`` brings it up on a free 127.0.0.1 port
and returns once it answers (with a deadline), ``stop()`` ends it by its PID.
:class:`AnnouncedServer` runs any program that prints its bound
``host:port`` as its first stdout line -- the relay does, and so does
``python -m hub --listen 127.0.0.1:0``, so pub0sub's hub plugs in as
``AnnouncedServer("pub0sub", python_module("hub", "--listen", "127.0.0.1:0"))``.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .procs import HOST, LineReader, free_port, free_ports, python_module, spawn, stop_process, wait_until
from .wireproto import CHANNEL

READY_TIMEOUT = 15.0


class Server(Protocol):
    """A system under test: a process listening on ``address`` between start and stop."""

    name: str

    @property
    def address(self) -> tuple[str, int]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Cluster(Server, Protocol):
    """Linked servers, ``addresses`` in start order (``address`` is the first's).

    ``wait_interest(at, of)`` blocks until server ``at`` knows that server ``of`` has a
    subscriber: a publisher started earlier would lose its first messages.
    """

    @property
    def addresses(self) -> list[tuple[str, int]]: ...

    def wait_interest(self, at: int, of: int, topic: str = CHANNEL) -> None: ...


class FirstAddress:
    """A :class:`Cluster`'s ``address``: its first server's, once started."""

    name: str

    @property
    def addresses(self) -> list[tuple[str, int]]:
        raise NotImplementedError

    @property
    def address(self) -> tuple[str, int]:
        addresses = self.addresses
        if not addresses:
            raise RuntimeError(f"{self.name} is not started")
        return addresses[0]


def missing(*binaries: str) -> Callable[[], str | None]:
    """A :class:`~sdk.tools.bench.registry.Method`'s ``unavailable``: the binaries not on PATH, if any."""

    def check() -> str | None:
        gone = [b for b in binaries if shutil.which(b) is None]
        return f"{', '.join(gone)} not installed" if gone else None

    return check


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
    """nats-server with slow-consumer limits raised for the same reason as Redis'.

    ``extra`` is appended to the config file and ``port`` fixes the client port:
    :class:`NatsCluster` adds its monitoring and cluster blocks that way.
    """

    name = "nats"
    binary = "nats-server"

    def __init__(self, extra: str = "", port: int | None = None) -> None:
        super().__init__()
        self.extra = extra
        self.port = port

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pub0sub-bench-nats-")
        port = self.port or free_port()
        conf = Path(self._tmp.name) / "nats.conf"
        # ping_interval long: a server PING inside a run would perturb the byte counts.
        conf.write_text(
            f'host: "{HOST}"\nport: {port}\nmax_pending: 1073741824\nwrite_deadline: "60s"\n'
            f'ping_interval: "10m"\nmax_payload: 1048576\nlogfile: "{Path(self._tmp.name) / "nats.log"}"\n'
            + self.extra
        )
        self._launch([self.binary, "-c", str(conf)], port, b"", b"INFO ")


class NatsCluster(FirstAddress):
    """``count`` nats-servers (2 by default) joined by routes: NATS' analogue of pub0sub's mesh link.

    Each node routes to every other (nats-server drops the duplicate route), serves
    ``/routez`` on a monitoring port, and otherwise is configured as :class:`NatsServer`.
    ``start()`` returns once every node has a route to every other one.
    """

    name = "nats-cluster"

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.nodes: list[NatsServer] = []
        self._monitors: list[int] = []
        self._ids: list[str] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [n.address for n in self.nodes]

    def start(self) -> None:
        ports = free_ports(3 * self.count)
        clients, routes, self._monitors = (ports[k * self.count : (k + 1) * self.count] for k in range(3))
        try:
            for i in range(self.count):
                others = ", ".join(f'"nats-route://{HOST}:{p}"' for j, p in enumerate(routes) if j != i)
                extra = (f'http: "{HOST}:{self._monitors[i]}"\ncluster {{\n  name: "pub0sub-bench"\n'
                         f'  listen: "{HOST}:{routes[i]}"\n  routes: [{others}]\n}}\n')  # fmt: skip
                node = NatsServer(extra, port=clients[i])
                node.name = f"{self.name}[{i}]"
                self.nodes.append(node)
                node.start()
            wait_until(self._routed, timeout=READY_TIMEOUT, what=f"{self.name} routes")
        except BaseException:
            self.stop()
            raise

    def _monitor(self, node: int, path: str) -> dict[str, Any]:
        """One GET of node ``node``'s monitoring endpoint ``path`` (``routez?subs=1``...)."""
        with urllib.request.urlopen(f"http://{HOST}:{self._monitors[node]}/{path}", timeout=1.0) as reply:
            return dict(json.load(reply))

    def _routes(self, node: int, path: str = "routez") -> dict[str, dict[str, Any]]:
        """Node ``node``'s routes by the remote server's id."""
        return {r["remote_id"]: r for r in self._monitor(node, path)["routes"] or []}

    def _routed(self) -> bool:
        """Every node has a route to every other; the servers' ids are read first, within the same deadline."""
        self._ids = self._ids or [self._monitor(i, "varz")["server_id"] for i in range(self.count)]
        return all(set(self._ids) - {self._ids[i]} <= set(self._routes(i)) for i in range(self.count))

    def wait_interest(self, at: int, of: int, topic: str = CHANNEL, timeout: float = READY_TIMEOUT) -> None:
        """Block until node ``at``'s route from node ``of`` lists a subscription to ``topic``."""

        def known() -> bool:
            route = self._routes(at, "routez?subs=1").get(self._ids[of], {})
            return topic in (route.get("subscriptions_list") or [])

        wait_until(known, timeout=timeout, what=f"{self.name}[{at}]: [{of}]'s interest in {topic!r}",
                   interval=0.01)  # fmt: skip

    def stop(self) -> None:
        """Every node by its PID, the last started first, even when one of them fails to stop."""
        nodes, self.nodes, self._ids = self.nodes, [], []
        errors = []
        for node in reversed(nodes):
            try:
                node.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


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
    return AnnouncedServer("relay", python_module("sdk.tools.bench.relay", "--listen", f"{HOST}:0"))
