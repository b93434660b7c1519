"""A stranger on the mesh: a libp2p host with a fresh key speaking ``/pub0sub/mesh/2.0.0`` by hand.

It dials a hub's mesh address, opens a v2 stream and sends whatever bytes a test
gives it -- valid frames or not -- and records every frame the hub sends back
and whether the hub closed the stream.  This is what the independent harness
did to find that one malformed FORWARD_BATCH could end a hub.

>>> async with RoguePeer.dial(hub.multiaddr) as rogue:          # doctest: +SKIP
...     await rogue.send(wire.MeshHello(hub_id=rogue.hub_id).encode())
...     assert await rogue.wait_closed(5)
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

import wire
from hub.mesh.host import make_host, quiet_libp2p_logs
from hub.mesh.identity import hub_id_for, peer_id_of

V2 = TProtocol("/pub0sub/mesh/2.0.0")
LISTEN = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")


class RoguePeer:
    def __init__(
        self, host: Any, stream: Any, key_pair: Any, accept: frozenset[wire.Opcode] = wire.MESH_V2_OPCODES
    ) -> None:
        self.host = host
        #: What the hub may send on this stream (a v3 hub sends LINK_STATEs once linked: read as
        #: a bad frame, they would end the reader and make every stream look closed by the hub).
        self.accept = accept
        self.stream = stream
        self.peer_id = peer_id_of(key_pair)
        #: The hub id this peer's key gives it (what a well-behaved hub would announce).
        self.hub_id = hub_id_for(self.peer_id)
        self.frames: list[wire.Frame] = []
        self.closed = trio.Event()
        self._arrived = trio.Event()

    @classmethod
    @contextlib.asynccontextmanager
    async def dial(cls, address: str, protocol: str = V2, key_pair: Any = None) -> AsyncIterator[RoguePeer]:
        """Connect to the hub at ``address`` (``.../p2p/<id>``) and open a mesh stream (v2 unless told),
        with a fresh key unless one is given (to know the peer id even if the dial is refused)."""
        quiet_libp2p_logs()
        key_pair = key_pair or create_new_key_pair()
        host = make_host(key_pair)
        try:
            async with host.run(listen_addrs=[LISTEN]), trio.open_nursery() as nursery:
                info = info_from_p2p_addr(multiaddr.Multiaddr(address))
                with trio.fail_after(15):
                    await host.connect(info)
                    stream = await host.new_stream(info.peer_id, [TProtocol(protocol)])
                accept = wire.MESH_V3_OPCODES if protocol.startswith("/pub0sub/mesh/3.") else wire.MESH_V2_OPCODES
                rogue = cls(host, stream, key_pair, accept)
                nursery.start_soon(rogue._read)
                yield rogue
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await host.close()

    async def _read(self) -> None:
        decoder = wire.FrameDecoder(accept=self.accept, limits=wire.Limits(max_body=64 << 20))
        try:
            while True:
                data = await self.stream.read(1 << 20)
                if not data:
                    break
                decoder.feed(data)
                self.frames.extend(decoder)
                self._arrived.set()
                self._arrived = trio.Event()
        except Exception:  # a reset or EOF from the hub: that is what the tests look for
            pass
        finally:
            self.closed.set()

    async def send(self, *chunks: bytes | wire.Frame) -> None:
        await self.stream.write(b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks))

    # The answer is whether it closed by the deadline, a bool the test asserts on.
    async def wait_closed(self, timeout: float) -> bool:  # noqa: ASYNC109
        """True if the hub closed (or reset) the stream within ``timeout`` seconds."""
        with trio.move_on_after(timeout):
            await self.closed.wait()
        return self.closed.is_set()

    # As wait_closed; None (nothing of that kind came) is an answer tests assert on.
    async def wait_for(self, kind: type[wire.Frame], timeout: float) -> wire.Frame | None:  # noqa: ASYNC109
        """The first frame of ``kind`` received (waiting up to ``timeout``), or None."""
        with trio.move_on_after(timeout):
            while True:
                for frame in self.frames:
                    if isinstance(frame, kind):
                        return frame
                if self.closed.is_set():
                    return None
                await self._arrived.wait()
        return None

    def received(self, kind: type[wire.Frame]) -> list[wire.Frame]:
        return [f for f in self.frames if isinstance(f, kind)]


def raw_forward_batch(origin: int, first_seq: int, topic: str, datas: list[bytes]) -> bytes:
    """A FORWARD_BATCH of one set, assembled byte by byte (the wire refuses to build bad ones)."""
    messages = wire.MessageSet.build([topic], [(b"", d) for d in datas]).encode()
    body = struct.pack(">QH", origin, 1) + struct.pack(">QQ", first_seq, 0) + messages
    return struct.pack(">BI", wire.Opcode.FORWARD_BATCH, len(body)) + body
