"""Two mesh cores joined by a pipe instead of libp2p: the very code the hub runs, driven by hand.

>>> a, b = MeshNode("a", 1), MeshNode("b", 2)      # doctest: +SKIP
>>> pipe = Pipe(a, b)                               # a link each way, v2 by default
>>> b.core.announce(["orders.*"]); pipe.run()
>>> a.core.forward(1, 7, message_set); pipe.run()
"""

from __future__ import annotations

from typing import Any

import wire
from hub.core.clock import ManualClock
from hub.core.mesh.config import MeshConfig
from hub.core.mesh.core import MeshCore
from hub.core.mesh.peer import PeerProtocol
from hub.core.mesh.protocols import MeshVersion, make_decoder
from hub.core.mesh.replay import ReplaySource


class Stored:
    """What a hub's ``on_forward`` would store: every set, per origin."""

    def __init__(self) -> None:
        self.sets: list[tuple[int, wire.ForwardSet]] = []

    def on_forward(self, origin: int, sets: list[wire.ForwardSet], peer: Any) -> int | None:
        self.sets.extend((origin, s) for s in sets)
        return None

    def seqs(self, origin: int) -> list[int]:
        return [s.origin_seq + i for o, s in self.sets if o == origin for i in range(s.messages.count)]

    def positions(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for origin, s in self.sets:
            out[origin] = max(out.get(origin, 0), s.origin_seq + s.messages.count - 1)
        return out


class MeshNode:
    """One hub's mesh core, with a store for what it receives and a clock the test moves."""

    def __init__(self, name: str, hub_id: int, *, clock: ManualClock | None = None,
                 replay: ReplaySource | None = None, **config: Any) -> None:  # fmt: skip
        self.name = name
        self.clock = clock or ManualClock()
        self.stored = Stored()
        self.core = MeshCore(MeshConfig(discovery=False, **config), hub_id=hub_id, clock=self.clock,
                             on_forward=self.stored.on_forward, resume_positions=self.stored.positions,
                             replay=replay)  # fmt: skip
        # A peer key and its binary form; any bytes do (hub ids are then pinned on first contact).
        self.key = f"12D3KooW{name}"
        self.peer_bytes = name.encode()


class Pipe:
    """A link between ``a`` and ``b``: one protocol object at each end, bytes carried by :meth:`run`."""

    def __init__(self, a: MeshNode, b: MeshNode, *, version: MeshVersion = MeshVersion.V2) -> None:
        self.a, self.b = a, b
        self.a_side = self._open(a, b, version, outbound=True)
        self.b_side = self._open(b, a, version, outbound=False)
        self._decoders = {id(self.a_side): make_decoder(version), id(self.b_side): make_decoder(version)}
        self.bytes_carried = 0

    @staticmethod
    def _open(node: MeshNode, other: MeshNode, version: MeshVersion, *, outbound: bool) -> PeerProtocol:
        link = node.core.link_for(other.key, other.peer_bytes)
        protocol = PeerProtocol(node.core, link, version, outbound=outbound, clock=node.clock)
        node.core.session_started(link, protocol)
        protocol.start()
        return protocol

    def run(self, max_rounds: int = 1000) -> None:
        """Carry bytes both ways (and flush acks) until neither side has anything to say."""
        for _ in range(max_rounds):
            moved = self._carry(self.a_side, self.b_side) | self._carry(self.b_side, self.a_side)
            for side in (self.a_side, self.b_side):
                if side._pending_acks:
                    side.take_acks()
                    moved = True
            if not moved:
                return
        raise AssertionError("the pipe did not go quiet")

    def _carry(self, sender: PeerProtocol, receiver: PeerProtocol) -> bool:
        if not sender.alive or not receiver.alive:
            return False
        chunk = sender.take_chunk()
        if chunk is None:
            return False
        self.bytes_carried += len(chunk)
        decoder = self._decoders[id(receiver)]
        decoder.feed(chunk)
        receiver.receive(list(decoder))
        return True

    def send_raw(self, to_b: bool, frame: bytes) -> None:
        """Bytes a misbehaving peer sends, decoded by the receiving side as if they came off the stream."""
        receiver = self.b_side if to_b else self.a_side
        decoder = self._decoders[id(receiver)]
        decoder.feed(frame)
        receiver.receive(list(decoder))
