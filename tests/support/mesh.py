"""In-process meshes on 127.0.0.1 for the mesh tests, and a seed-only v1 peer built from raw bytes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import trio
from libp2p.crypto.keys import KeyPair

import wire
from hub.core.mesh.protocols import encode_forward_set
from hub.core.mesh.window import WindowEntry
from hub.mesh import Mesh, MeshConfig

#: Short timers so failure detection and rediscovery fit a fast test run.
FAST = MeshConfig(
    discovery=False,
    heartbeat_interval=0.2,
    heartbeat_misses=3,
    subscribe_ack_timeout=0.2,
    subscribe_resends=2,
    discovery_interval=0.3,
    reconnect_min=0.05,
    reconnect_max=0.5,
    resume_linger=5.0,
)

_next_hub_id = 100


class Store:
    """A hub stand-in for ``on_forward``: keeps every set, dedups nothing (the mesh must)."""

    def __init__(self) -> None:
        self.sets: list[tuple[int, wire.ForwardSet]] = []
        self.positions: dict[int, int] = {}
        self.messages = 0
        self.arrived = trio.Event()

    def on_forward(self, origin: int, sets: list[wire.ForwardSet], peer: Any) -> int | None:
        for s in sets:
            self.sets.append((origin, s))
            self.messages += s.messages.count
            if origin:
                self.positions[origin] = max(self.positions.get(origin, 0), s.origin_seq + s.messages.count - 1)
        self.arrived.set()
        self.arrived = trio.Event()
        return self.positions.get(origin) if origin else None

    def seqs(self, origin: int) -> list[int]:
        return [s.origin_seq + i for o, s in self.sets if o == origin for i in range(s.messages.count)]


class OwnLog:
    """A hub's own publishes kept in a list: the mesh's ``replay`` source without a hub.

    The hub's implementation over its topic logs is ``MeshBridge.own_sets``
    (tested on real logs in tests/test_mesh_replay.py); this one lets the
    session's replay logic be driven step by step.
    """

    def __init__(self) -> None:
        self.sets: list[tuple[int, wire.MessageSet]] = []
        self.next_seq = 1

    def publish(self, mesh: Mesh, messages: wire.MessageSet) -> int:
        seq = self.next_seq
        self.next_seq += messages.count
        self.sets.append((seq, messages))
        mesh.forward(seq, seq, messages)
        return seq

    def next_origin_seq(self) -> int:
        return self.next_seq

    def own_sets(
        self, wants: Callable[[str], bool], after: int, before: int, on_hole: Callable[[str], None]
    ) -> Iterator[WindowEntry]:
        for seq, messages in self.sets:
            last = seq + messages.count - 1
            if after < last and seq < before and any(map(wants, messages.topics)):
                encoded = encode_forward_set(seq, seq, messages)
                yield WindowEntry(first_seq=seq, last_seq=last, count=messages.count, encoded=encoded)


def new_hub_id() -> int:
    global _next_hub_id
    _next_hub_id += 1
    return _next_hub_id


async def start_mesh(
    nursery: trio.Nursery,
    store: Store | None = None,
    *,
    hub_id: int | None = None,
    replay: OwnLog | None = None,
    key_pair: KeyPair | None = None,
    **overrides: Any,
) -> Mesh:
    """A mesh on a fresh identity, or on ``key_pair`` (a restarted hub keeps its peer id)."""
    store = store or Store()
    mesh = Mesh(
        replace(FAST, **overrides),
        hub_id=hub_id or new_hub_id(),
        on_forward=store.on_forward,
        resume_positions=lambda: dict(store.positions),
        replay=replay,
        key_pair=key_pair,
    )
    mesh.store = store  # type: ignore[attr-defined]
    await nursery.start(mesh.run)
    return mesh


def status_of(mesh: Mesh, other: Mesh) -> dict[str, Any]:
    for entry in mesh.peers_status():
        if entry["peer_id"] == str(other.peer_id):
            return entry
    raise AssertionError(f"{other.peer_id} unknown to {mesh.peer_id}")


def interest_of(mesh: Mesh, other: Mesh) -> set[str]:
    return set(mesh.interest.patterns_of(str(other.peer_id)))


# -- a seed-only peer: hand-rolled bytes from the seed document, no wire/ ---------------------

SEED_PROTOCOL = "/pub0sub/mesh/1.0.0"


def seed_frame(opcode: int, body: bytes) -> bytes:
    """Seed layout: 1-byte opcode, 4-byte big-endian body length, body."""
    return bytes([opcode]) + len(body).to_bytes(4, "big") + body


def seed_topics(*topics: str) -> bytes:
    """Seed SUBSCRIBE/UNSUBSCRIBE body: repeated [u8 len][name]."""
    return b"".join(bytes([len(t)]) + t.encode() for t in topics)


def parse_seed_topics(body: bytes) -> list[str]:
    out, pos = [], 0
    while pos < len(body):
        n = body[pos]
        out.append(body[pos + 1 : pos + 1 + n].decode())
        pos += 1 + n
    return out


class SeedPeer:
    """A minimal v1 peer built from the seed alone: a raw stream handler on ``/pub0sub/mesh/1.0.0``."""

    def __init__(self, *, ack_subscribe: bool = True, answer_ping: bool = True, subscribe: tuple[str, ...] = ()):
        self.ack_subscribe = ack_subscribe
        self.answer_ping = answer_ping
        self.subscribe = subscribe
        #: Per accepted stream: the raw bytes and the (opcode, body) frames received.
        self.raw: list[bytearray] = []
        self.frames: list[list[tuple[int, bytes]]] = []
        self.streams: list[Any] = []
        self.closed: list[float] = []
        #: monotonic time of the last frame this peer wrote
        self.last_sent = 0.0
        self.host: Any = None

    @property
    def address(self) -> str:
        return str(self.host.get_addrs()[0])

    def received(self, opcode: int, stream: int = 0) -> list[bytes]:
        return [body for op, body in self.frames[stream] if op == opcode] if len(self.frames) > stream else []

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        import multiaddr
        from libp2p.crypto.ed25519 import create_new_key_pair
        from libp2p.custom_types import TProtocol

        from hub.mesh.host import make_host

        self.host = make_host(create_new_key_pair())
        try:
            async with self.host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                self.host.set_stream_handler(TProtocol(SEED_PROTOCOL), self._handle)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self.host.close()

    async def send(self, data: bytes, stream: int = -1) -> None:
        await self.streams[stream].write(data)

    async def _handle(self, stream: Any) -> None:
        index = len(self.streams)
        self.streams.append(stream)
        raw = bytearray()
        frames: list[tuple[int, bytes]] = []
        self.raw.append(raw)
        self.frames.append(frames)
        if self.subscribe and index == 0:
            await stream.write(seed_frame(2, seed_topics(*self.subscribe)))
            self.last_sent = time.monotonic()
        buf = b""
        try:
            while True:
                data = await stream.read(65536)
                if not data:
                    break
                raw += data
                buf += data
                while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "big"):
                    n = int.from_bytes(buf[1:5], "big")
                    opcode, body, buf = buf[0], buf[5 : 5 + n], buf[5 + n :]
                    frames.append((opcode, body))
                    reply = None
                    if opcode == 1 and body == b"ping" and self.answer_ping:
                        reply = seed_frame(1, b"pong")
                    elif opcode == 2 and self.ack_subscribe:
                        reply = seed_frame(3, b"\x01")
                    elif opcode == 4 and self.answer_ping:
                        reply = seed_frame(5, b"\x01")
                    if reply is not None:
                        await stream.write(reply)
                        self.last_sent = time.monotonic()
        except Exception:  # EOF or reset: the hub closed the stream
            pass
        self.closed.append(time.monotonic())


def status_of_peer(mesh: Mesh, peer_id: Any) -> dict[str, Any]:
    for entry in mesh.peers_status():
        if entry["peer_id"] == str(peer_id):
            return entry
    raise AssertionError(f"{peer_id} unknown to {mesh.peer_id}")
