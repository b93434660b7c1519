"""A minimal *blocking* raw-frame client: for threads and worker processes in fault tests.

No SDK, no trio: one TCP socket, the wire codec, explicit timeouts everywhere.
A timeout raises :class:`socket.timeout` (``TimeoutError``); the caller decides
what it means (for a publish: outcome *unknown*, never *failed*).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any, TypeVar

import wire
from tests.support.waiting import wait_until
from wire import HUB_TO_CLIENT_OPCODES, Frame, FrameDecoder, Limits

F = TypeVar("F", bound=Frame)


class ConnectionLost(Exception):
    """EOF, a reset, or an ERROR frame from the hub."""


class SyncClient:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder(limits=Limits(max_body=16 << 20), accept=HUB_TO_CLIENT_OPCODES)
        self.eof = False
        self.welcome: wire.Welcome | None = None

    @classmethod
    def connect(cls, address: str, *, timeout: float = 5.0, name: str = "sync") -> SyncClient:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = cls(sock)
        try:
            client.send(wire.Hello(client_name=name))
            client.welcome = client.expect(wire.Welcome, timeout)
        except BaseException:
            client.close()
            raise
        return client

    @classmethod
    def connect_retry(cls, address: str, *, within: float = 5.0, name: str = "sync") -> SyncClient:
        """Connect, retrying refused connections for at most ``within`` seconds."""
        return wait_until(
            lambda: cls.connect(address, timeout=within, name=name),
            timeout=within,
            what=f"a connection to {address}",
            retry_on=(OSError, ConnectionLost),
            interval=0.05,
        )

    def send(self, *frames: Frame | bytes) -> None:
        data = b"".join(f if isinstance(f, bytes) else f.encode() for f in frames)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionLost(str(exc)) from exc

    def recv(self, timeout: float = 5.0) -> Frame | None:
        """The next frame; None at EOF; ``TimeoutError`` when nothing came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            if self.eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no frame within {timeout}s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.eof = True
                self.decoder.close()
                continue
            self.decoder.feed(data)

    def expect(self, kind: type[F], timeout: float = 5.0, *, skip: tuple[type[Frame], ...] = (wire.Heartbeat,)) -> F:
        """The next frame of type ``kind``, skipping ``skip`` (heartbeats by default)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(max(0.0, deadline - time.monotonic()))
            if isinstance(frame, kind):
                return frame
            if isinstance(frame, wire.Heartbeat):
                if frame.word == "ping":
                    self.send(wire.PONG)
                if wire.Heartbeat in skip:
                    continue
            elif frame is not None and isinstance(frame, skip):
                continue
            if frame is None:
                raise ConnectionLost(f"EOF while waiting for {kind.__name__}")
            if isinstance(frame, wire.Error):
                raise ConnectionLost(f"ERROR {frame.code.name}: {frame.reason}")
            raise AssertionError(f"expected {kind.__name__}, got {frame!r}")

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        self.send(wire.Status())
        reply = self.expect(wire.StatusReply, timeout, skip=(wire.Heartbeat, wire.Deliver, wire.Gap, wire.PublishAck))
        return json.loads(reply.document)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def publish_frame(
    topics: tuple[str, ...] | str,
    messages: list[bytes],
    *,
    producer: int = 0,
    seq: int = 0,
    ack: bool = True,
    key: bytes = b"",
) -> wire.Publish:
    if isinstance(topics, str):
        topics = (topics,)
    mset = wire.MessageSet.build(topics, [(key, m) for m in messages])
    flags = wire.PublishFlags.ACK if ack else wire.PublishFlags.NONE
    return wire.Publish(producer_id=producer, sequence=seq, flags=flags, sets=(mset,))


def topic_ends(client: SyncClient) -> dict[str, int]:
    """``{topic: next_offset}`` from the hub's status document."""
    return {t["topic"]: t["next_offset"] for t in client.status()["topic_list"]}


def read_all(
    address: str,
    topics: list[str],
    *,
    timeout: float = 20.0,
    sub_id: int = 1,
    start: wire.StartPosition | None = None,
    offsets: dict[str, int] | None = None,
) -> tuple[dict[str, list[tuple[int, bytes]]], list[wire.Gap]]:
    """Read ``topics`` from ``earliest`` (or ``offsets``) up to their current ends.

    Returns ``({topic: [(offset, data), ...]}, [gap frames])`` in arrival order.
    """
    out: dict[str, list[tuple[int, bytes]]] = {t: [] for t in topics}
    gaps: list[wire.Gap] = []
    with SyncClient.connect(address, name="reader") as client:
        ends = topic_ends(client)
        want = {t: ends.get(t, 0) for t in topics}
        if offsets:
            start = wire.StartPosition.OFFSET
            tos = tuple(wire.TopicOffset(topic=t, offset=o) for t, o in offsets.items())
        else:
            start = start or wire.StartPosition.EARLIEST
            tos = ()
        client.send(wire.Sub(sub_id=sub_id, patterns=tuple(topics), start=start, offsets=tos))
        client.expect(wire.SubOk)
        reached = {t: (offsets or {}).get(t, 0) for t in topics}
        deadline = time.monotonic() + timeout
        while any(reached[t] < want[t] for t in topics):
            frame = client.recv(max(0.01, deadline - time.monotonic()))
            if frame is None:
                raise ConnectionLost("EOF while reading")
            if isinstance(frame, wire.Deliver):
                batch = frame.batch
                for offset, _key, data in batch.messages():
                    out[batch.topic].append((offset, data))
                reached[batch.topic] = max(reached[batch.topic], batch.base_offset + batch.count)
            elif isinstance(frame, wire.Gap):
                gaps.append(frame)
                reached[frame.topic] = max(reached[frame.topic], frame.first_offset + frame.dropped)
            elif isinstance(frame, wire.Heartbeat):
                if frame.word == "ping":
                    client.send(wire.PONG)
            elif isinstance(frame, (wire.SubEnd, wire.Error)):
                raise ConnectionLost(f"subscription ended: {frame!r}")
    return out, gaps


def wait_log_holds(
    address: str, topics: list[str], want: set[bytes], *, timeout: float = 60.0
) -> dict[str, list[tuple[int, bytes]]]:
    """Read ``topics`` from earliest until they hold every value of ``want`` or ``timeout`` passes
    (a mesh drains what faults held back); returns the last read.  GAPs fail the caller's test."""
    deadline = time.monotonic() + timeout
    while True:
        reads, gaps = read_all(address, topics)
        assert not gaps, gaps
        held = {v for items in reads.values() for _, v in items}
        if want <= held or time.monotonic() >= deadline:
            return reads
        time.sleep(0.5)
