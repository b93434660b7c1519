"""The attackers of ``python -m hub.tools.bounds_bench attack`` and of the reliability suite's
hub-under-attack scenario: malformed connections, a flood past ``--max-connections``, a slow
drip, and subscribers that ping and never read.  Each runs in a process of its own."""

from __future__ import annotations

import ipaddress
import multiprocessing
import socket
import time
from collections.abc import Callable
from typing import Any

import wire

#: The attackers of ``attack`` by name, and what each one counts.
ATTACKERS = {"malformed": "malformed_connections", "flood": "flood_connections", "drip": "drip_bytes",
             "never_read": "unread_pings"}  # fmt: skip


class Attack:
    """The attackers of ``attack``, each in a process of its own, until :meth:`stop`.

    Processes, not threads: threads of this process would share its interpreter lock with
    the healthy client, so the figure would measure the benchmark's own contention rather
    than the hub's.  They still share the machine's cores with the hub and the healthy
    client, as an attacker on the same machine would.
    """

    def __init__(
        self,
        address: str,
        *,
        attackers: tuple[str, ...] = tuple(ATTACKERS),
        malformed: int = 10_000,
        source: str | None = None,
    ) -> None:
        """``source``: the attackers connect from this address and the ones after it, one each in
        :data:`ATTACKERS` order (``127.0.0.2``: malformed from .2, flood from .3, ...; all of
        127.0.0.0/8 is loopback on Linux), so a per-address limit tells them from a healthy
        client on 127.0.0.1.  None: from whatever address the system picks (127.0.0.1)."""
        context = multiprocessing.get_context("spawn")
        self.stopping = context.Event()
        self._malformed = malformed
        self._counts = {ATTACKERS[name]: context.Value("q", 0, lock=False) for name in attackers}
        targets: dict[str, tuple[Callable[..., None], tuple[int, ...]]] = {
            "malformed": (_malformed, (malformed,)), "flood": (_flood, ()), "drip": (_drip, ()),
            "never_read": (_never_read, ()),
        }  # fmt: skip
        self._processes = []
        for name in attackers:
            target, extra = targets[name]
            own = None if source is None else str(ipaddress.ip_address(source) + list(ATTACKERS).index(name))
            args = ((address, own), self.stopping, self._counts[ATTACKERS[name]], *extra)
            self._processes.append(context.Process(target=target, args=args, daemon=True))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    @property
    def counts(self) -> dict[str, int]:
        return {name: int(value.value) for name, value in self._counts.items()}

    def done_malformed(self) -> bool:
        """The malformed connections asked for were all made (true if there is no such attacker)."""
        made = self._counts.get(ATTACKERS["malformed"])
        return made is None or made.value >= self._malformed

    def start(self) -> None:
        for process in self._processes:
            process.start()

    def wait_under_way(self, timeout: float = 30.0) -> bool:
        """Wait until every attacker has done something (a spawned process on a loaded machine
        takes seconds to import before it attacks); False if one had not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while any(value.value == 0 for value in self._counts.values()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        self.stopping.set()
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.kill()  # this process's own child, by its handle
                process.join(10)


#: Where an attacker connects to, and from (None: the system's choice).
Target = tuple[str, str | None]


#: Linux's IP_BIND_ADDRESS_NO_PORT (Python names it from 3.12 on).
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)


def connect_from(host: str, port: int, source: str | None, timeout: float) -> socket.socket:
    """A TCP connection to ``host:port``, from the local address ``source`` when given.  The port
    is chosen at connect, not at bind (IP_BIND_ADDRESS_NO_PORT): a port bound to an address first
    must be free of every socket on it, TIME_WAIT ones included, and the malformed attacker closes
    first, so its source address fills with TIME_WAIT; bound first, its connections slowed to a
    crawl after ~28,000 (32,000 in a row: 65.8 s bound first, 15.3 s chosen at connect), most of
    all in a run right after another."""
    if source is None:
        return socket.create_connection((host, port), timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _connect(target: Target) -> socket.socket:
    address, source = target
    host, port = address.rsplit(":", 1)
    return connect_from(host, int(port), source, timeout=5)


def _malformed(target: Target, stopping: Any, count: Any, limit: int) -> None:
    """Connections that send garbage (a bad opcode, a huge length, a truncated HELLO, a lone
    byte), hang up their sending side and read what the hub says."""
    junk = [b"\xff\x00\x00\x00\x01x", b"\x22\xff\xff\xff\xff", wire.Hello(client_name="x").encode()[:7], b"\x00"]
    n = 0
    while not stopping.is_set() and count.value < limit:
        try:
            with _connect(target) as sock:
                sock.sendall(junk[n % len(junk)])
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(1024):
                    pass
        except OSError:
            pass
        n += 1
        count.value += 1


def _flood(target: Target, stopping: Any, count: Any) -> None:
    """Connections opened and held past --max-connections, 300 at a time, renewed at
    ~200 a second (a flood, not a CPU race with the healthy client)."""
    held: list[socket.socket] = []
    while not stopping.wait(0.005):
        if len(held) >= 300:
            held.pop(0).close()
        try:
            held.append(_connect(target))
            count.value += 1
        except OSError:
            pass
    for sock in held:
        sock.close()


def _drip(target: Target, stopping: Any, count: Any) -> None:
    """One byte a second of a frame that never completes, on a fresh connection when closed."""
    frame = wire.Publish(sequence=1, sets=(wire.MessageSet.build(("drip",), [(b"", bytes(1000))]),)).encode()
    while not stopping.is_set():
        try:
            with _connect(target) as sock:
                sock.sendall(wire.Hello(client_name="drip").encode())
                for byte in frame:
                    if stopping.wait(1.0):
                        return
                    sock.sendall(bytes([byte]))
                    count.value += 1
        except OSError:
            continue


def _never_read(target: Target, stopping: Any, count: Any) -> None:
    """Four connections that subscribe to the healthy client's topics and ping, never reading a
    byte back; one the hub closes is replaced at once, as a real attacker would.  Sent without
    blocking: a hub that stops reading them costs this attacker nothing."""
    greeting = wire.Hello(client_name="deaf").encode() + wire.Sub(sub_id=1, patterns=("bench.>",)).encode()
    pings = wire.PING.encode() * 1000
    socks: list[socket.socket | None] = [None] * 4
    rest = [b""] * 4
    try:
        while not stopping.is_set():
            for n, sock in enumerate(socks):
                try:
                    if sock is None:
                        sock = socks[n] = _connect(target)
                        sock.sendall(greeting)
                        sock.setblocking(False)
                        rest[n] = b""
                    data = rest[n] or pings
                    rest[n] = data[sock.send(data) :]
                    if not rest[n]:
                        count.value += 1000
                except BlockingIOError:
                    pass
                except OSError:  # closed by the hub (or refused at --max-connections): a new one
                    if sock is not None:
                        sock.close()
                    socks[n] = None
            time.sleep(0.01)
    finally:
        for sock in socks:
            if sock is not None:
                sock.close()
