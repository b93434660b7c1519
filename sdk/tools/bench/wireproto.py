"""What each peer's subscriber and publisher put on the socket, pre-framed.

Fixed-size payloads make every delivered message the same number of bytes,
so the fastest subscriber can count messages by counting bytes exactly.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

RELAY_HEADER = struct.Struct(">BI")
#: opcode byte on relay frames; the relay never looks at it
RELAY_OPCODE = 0x20
CHANNEL = "bench"


def recv_until(sock: socket.socket, marker: bytes, *, limit: int = 1 << 16) -> bytes:
    """Read until ``marker`` has arrived; the bytes up to and including it (nothing more is read
    than the peer sent before it waits for us, because every caller sends nothing further yet)."""
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"connection closed before {marker!r}")
        data += chunk
        if len(data) > limit:
            raise ConnectionError(f"no {marker!r} in the first {limit} bytes")
    return data


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


@dataclass(frozen=True)
class Framing:
    """The raw protocol of one peer: handshakes, one published frame, one delivered frame."""

    system: str
    channel: str = CHANNEL

    def subscribe(self, sock: socket.socket) -> bytes:
        """Subscribe on a connected socket; returns bytes read past the confirmation (none expected)."""
        ch = self.channel.encode()
        if self.system == "redis":
            sock.sendall(b"SUBSCRIBE %s\r\n" % ch)
            confirm = b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(ch), ch)
            got = recv_exactly(sock, len(confirm))
            if got != confirm:
                raise ConnectionError(f"unexpected SUBSCRIBE reply {got!r}")
            return b""
        if self.system == "nats":
            recv_until(sock, b"\r\n")  # INFO
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB %s 1\r\nPING\r\n' % ch)
            data = recv_until(sock, b"PONG\r\n")
            return data.split(b"PONG\r\n", 1)[1]
        if self.system == "relay":
            sock.sendall(b"S")
            if recv_exactly(sock, 1) != b"K":
                raise ConnectionError("relay did not confirm the subscription")
            return b""
        raise ValueError(f"no raw framing for {self.system!r}")

    def connect_publisher(self, sock: socket.socket) -> None:
        if self.system == "nats":
            recv_until(sock, b"\r\n")
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        elif self.system == "relay":
            sock.sendall(b"P")
        elif self.system != "redis":
            raise ValueError(f"no raw framing for {self.system!r}")

    def published(self, payload: bytes) -> bytes:
        """One message as the publisher writes it."""
        ch = self.channel.encode()
        if self.system == "redis":
            return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(ch), ch, len(payload), payload)
        if self.system == "nats":
            return b"PUB %s %d\r\n%s\r\n" % (ch, len(payload), payload)
        return RELAY_HEADER.pack(RELAY_OPCODE, len(payload)) + payload

    def delivered_size(self, size: int) -> int:
        """Bytes one ``size``-byte message occupies on a subscriber's socket."""
        ch = self.channel.encode()
        if self.system == "redis":
            return len(b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n\r\n" % (len(ch), ch, size)) + size
        if self.system == "nats":
            return len(b"MSG %s 1 %d\r\n\r\n" % (ch, size)) + size
        return RELAY_HEADER.size + size
