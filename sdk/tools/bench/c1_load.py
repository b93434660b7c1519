"""C1's load generator: one process holding many idle subscriber connections (``c1-hold``).

A process may hold at most its descriptor limit of sockets (20,000 here), so C1 runs
several of these, each from its own source address (127.0.0.2, .3, ...: one address
has ~28k ephemeral ports toward one server).  Each connects its share round-robin over
the servers it is given, subscribes every connection to :data:`C1_TOPIC` -- handshakes
pipelined, a bounded number unconfirmed at a time, so a storm of SYNs never overflows
the server's accept backlog -- prints ``ready N``, and then answers heartbeats and
watches deliveries.  Each publish carries its number and its publisher's
``time.monotonic_ns()`` (CLOCK_MONOTONIC is system-wide); once every connection of
this process has it, the process prints ``{"i": n, "last_ns": ..., "stamp_ns": ...}``.
After ``publishes`` of them it waits for ``steady`` more (sent at a fixed rate, not one at a
time), prints ``{"steady_deliveries": n, "last_ns": ...}``, then ``{"done": true, "closed": ...}``
and exits.
"""

from __future__ import annotations

import json
import resource
import selectors
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import wire

from .wireproto import recv_until

#: Handshakes sent but not yet confirmed, at most (well under a listen backlog of 4096).
UNCONFIRMED_MAX = 1_000
#: Connections opened between two looks at what arrived (heartbeats are answered meanwhile).
PUMP_EVERY = 100
#: Linux's IP_BIND_ADDRESS_NO_PORT (not in Python's socket module): bind the source address
#: only and pick the port at connect(), by the whole 4-tuple.  A bind() to port 0 searches
#: for a port no other socket of that address holds, slower with every connection held.
IP_BIND_ADDRESS_NO_PORT = 24
#: The topic every held connection subscribes to: not the other scenarios' ``bench``, so that
#: the healthy L1 pair measured beside them (sdk.tools.bench.c1) does not fan out to them all.
C1_TOPIC = "c1"
#: The stamp at the front of each C1 payload: publisher's monotonic_ns, publish number.
STAMP = struct.Struct(">QI")
_HEADER = struct.Struct(">BI")
_COUNT = struct.Struct(">I")
_DELIVER = int(wire.Opcode.DELIVER)
_HEARTBEAT = int(wire.Opcode.HEARTBEAT)
_PING = wire.PING.encode()
_PONG = wire.PONG.encode()


def c1_payload(number: int, size: int) -> bytes:
    return STAMP.pack(time.monotonic_ns(), number).ljust(size, b"\0")


class _Pub0subConnections:
    """pub0sub framing: HELLO+SUB at once; SUB_OK confirms; DELIVER frames carry the payload last."""

    handshake = wire.Hello(client_name="c1").encode() + wire.Sub(sub_id=1, patterns=(C1_TOPIC,)).encode()

    def __init__(self, size: int) -> None:
        self.size = size

    def parse(self, buf: bytearray, sock: socket.socket, on_payload: Callable[[bytes], None]) -> tuple[int, bool]:
        """(bytes used, whether the subscription was confirmed in them)."""
        pos, n, confirmed = 0, len(buf), False
        while n - pos >= 5:
            opcode, length = _HEADER.unpack_from(buf, pos)
            end = pos + 5 + length
            if end > n:
                break
            if opcode == _DELIVER:
                topic_len = buf[pos + 9]
                count = _COUNT.unpack_from(buf, pos + 10 + topic_len + 32)[0]
                if count == 1:  # C1 publishes one message at a time: the payload is the frame's tail
                    on_payload(bytes(buf[end - self.size : end]))
            elif opcode == int(wire.Opcode.SUB_OK):
                confirmed = True
            elif opcode == _HEARTBEAT and buf[pos:end] == _PING:
                sock.send(_PONG)
            elif opcode == int(wire.Opcode.ERROR):
                raise ConnectionError(f"hub refused a connection: {bytes(buf[pos:end])!r}")
            pos = end
        return pos, confirmed


class _NatsConnections:
    """NATS framing: INFO is read first (blocking, it is already there), then CONNECT+SUB+PING; PONG confirms."""

    handshake = b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB %s 1\r\nPING\r\n' % C1_TOPIC.encode()

    def __init__(self, size: int) -> None:
        self.size = size

    def parse(self, buf: bytearray, sock: socket.socket, on_payload: Callable[[bytes], None]) -> tuple[int, bool]:
        pos, confirmed = 0, False
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                end = eol + 2 + size + 2
                if end > len(buf):
                    break
                on_payload(bytes(buf[eol + 2 : eol + 2 + size]))
                pos = end
                continue
            if line == b"PONG":
                confirmed = True
            elif line == b"PING":
                sock.send(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise ConnectionError(f"nats-server refused a connection: {line!r}")
            pos = eol + 2
        return pos, confirmed


def c1_hold(*, system: str, addresses: list[list[Any]], connections: int, source: str, publishes: int,
            size: int, steady: int = 0, timeout: float = 120.0) -> None:  # fmt: skip
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    proto = _Pub0subConnections(size) if system == "pub0sub" else _NatsConnections(size)
    sel = selectors.DefaultSelector()
    socks: dict[int, socket.socket] = {}
    bufs: dict[int, bytearray] = {}
    unconfirmed: set[int] = set()
    closed = 0
    got: dict[int, int] = {}
    last: dict[int, int] = {}
    stamps: dict[int, int] = {}
    reported = 0
    now = time.monotonic_ns()

    def on_payload(payload: bytes) -> None:
        stamp, number = STAMP.unpack_from(payload)
        got[number] = got.get(number, 0) + 1
        last[number] = now
        stamps[number] = stamp

    def pump(wait: float) -> None:
        nonlocal closed, now
        for key, _ in sel.select(timeout=wait):
            fd = key.fd
            sock = socks[fd]
            try:
                chunk = sock.recv(1 << 16)
            except (ConnectionError, BlockingIOError):
                chunk = b""
            now = time.monotonic_ns()
            if not chunk:
                sel.unregister(sock)
                unconfirmed.discard(fd)
                closed += 1
                continue
            buf = bufs[fd]
            buf += chunk
            used, confirmed = proto.parse(buf, sock, on_payload)
            del buf[:used]
            if confirmed:
                unconfirmed.discard(fd)

    deadline = time.monotonic() + timeout
    for i in range(connections):
        host, port = addresses[i % len(addresses)]
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.connect((host, port))
        if system == "nats":
            recv_until(sock, b"\r\n")  # INFO
        sock.sendall(proto.handshake)
        sock.setblocking(False)
        fd = sock.fileno()
        socks[fd], bufs[fd] = sock, bytearray()
        unconfirmed.add(fd)
        sel.register(sock, selectors.EVENT_READ)
        if i % PUMP_EVERY == 0:
            pump(0)
        while len(unconfirmed) >= UNCONFIRMED_MAX and time.monotonic() < deadline:
            pump(0.5)
    while unconfirmed and time.monotonic() < deadline:
        pump(0.5)
    if unconfirmed or closed:
        raise ConnectionError(f"{len(unconfirmed)} subscriptions unconfirmed, {closed} connections closed")
    print(f"ready {connections}", flush=True)
    deadline = time.monotonic() + timeout
    while reported < publishes and time.monotonic() < deadline:
        pump(0.5)
        while reported in got and got[reported] >= connections - closed:
            print(json.dumps({"i": reported, "last_ns": last[reported], "stamp_ns": stamps[reported],
                              "connections": got[reported]}), flush=True)  # fmt: skip
            reported += 1
    # The steady phase: ``steady`` more publishes sent at a fixed rate, not one at a time.
    steady_range = range(publishes, publishes + steady)
    deadline = time.monotonic() + timeout
    while steady and time.monotonic() < deadline and any(got.get(n, 0) < connections - closed for n in steady_range):
        pump(0.5)
    if steady:
        last_ns = max((last[n] for n in steady_range if n in last), default=0)
        print(json.dumps({"steady_deliveries": sum(got.get(n, 0) for n in steady_range), "last_ns": last_ns}),
              flush=True)  # fmt: skip
    print(json.dumps({"done": reported >= publishes, "closed": closed}), flush=True)
    for sock in socks.values():
        sock.close()


ROLES = {"c1-hold": c1_hold}
