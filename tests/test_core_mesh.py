"""The mesh's core without libp2p: interest, forwards, acks, dedup, refusals, replay, heartbeats.

Two :class:`MeshCore` objects talk through :class:`tests.support.coremesh.Pipe`,
which carries the bytes each :class:`PeerProtocol` writes to the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import wire
from hub.core.mesh.protocols import encode_forward_set
from hub.core.mesh.status import CloseReason
from hub.core.mesh.window import WindowEntry
from tests.support.coremesh import MeshNode, Pipe


def one(topic: str, data: bytes = b"m") -> wire.MessageSet:
    return wire.MessageSet.build([topic], [(b"", data)])


def test_interest_crosses_the_link_and_only_wanted_forwards_follow() -> None:
    a, b = MeshNode("a", 1), MeshNode("b", 2)
    pipe = Pipe(a, b)
    b.core.announce(["orders.*"])
    pipe.run()
    assert a.core.interest.patterns_of(b.key) == {"orders.*"}
    assert a.core.forward(1, 7, one("orders.eu")) == 1
    assert a.core.forward(2, 7, one("audit")) == 0  # nobody wants it: lazy push
    assert a.core.forward(3, 7, one("orders.us")) == 1
    pipe.run()
    assert b.stored.seqs(1) == [1, 3]
    link = a.core.links[b.key]
    assert link.window.acked_seq == 3 and len(link.window) == 0, "cumulative acks trim the window"
    b.core.withdraw(["orders.*"])
    pipe.run()
    assert not a.core.interest.patterns_of(b.key)


def test_a_resent_forward_is_dropped_as_a_duplicate() -> None:
    a, b = MeshNode("a", 1), MeshNode("b", 2)
    pipe = Pipe(a, b)
    b.core.announce(["t"])
    pipe.run()
    for seq in (1, 2, 3):
        a.core.forward(seq, 7, one("t"))
    pipe.run()
    resend = wire.ForwardBatch(origin=1, sets=(wire.ForwardSet(origin_seq=2, timestamp=7, messages=one("t")),))
    pipe.send_raw(True, resend.encode())
    assert b.stored.seqs(1) == [1, 2, 3]
    assert b.core.links[a.key].counters.duplicates_dropped == 1


def test_a_peer_cannot_claim_another_hub_or_forge_its_origin() -> None:
    a, b = MeshNode("a", 1), MeshNode("b", 2)
    pipe = Pipe(a, b)
    pipe.run()
    forged = wire.ForwardBatch(origin=99, sets=(wire.ForwardSet(origin_seq=1 << 62, timestamp=7, messages=one("t")),))
    b.core.announce(["t"])
    pipe.run()
    pipe.send_raw(True, forged.encode())
    assert pipe.b_side.reason is CloseReason.FORGED_ORIGIN
    assert b.stored.seqs(99) == [] and 99 not in b.core.inbound.positions()
    # A hello claiming a hub id that is already pinned to another peer is refused before anything else.
    c = MeshNode("c", 1)  # claims a's hub id
    other = Pipe(c, b)
    other.run()
    assert other.b_side.reason is CloseReason.REFUSED
    assert b.core.links[c.key].counters.refused == 1


class OwnSets:
    """A hub's own publishes, for replay: ``(seq, message set)`` in order."""

    def __init__(self, sets: list[tuple[int, wire.MessageSet]]) -> None:
        self.sets = sets

    def next_origin_seq(self) -> int:
        return self.sets[-1][0] + self.sets[-1][1].count if self.sets else 1

    def own_sets(
        self, wants: Callable[[str], bool], after: int, before: int, on_hole: Callable[[str], None]
    ) -> Iterator[WindowEntry]:
        for seq, mset in self.sets:
            if after < seq < before and any(wants(t) for t in mset.topics):
                yield WindowEntry(first_seq=seq, last_seq=seq, count=1, encoded=encode_forward_set(seq, 7, mset))


def test_a_known_peer_that_stored_nothing_is_replayed_everything_since_it_first_linked() -> None:
    history = OwnSets([(1, one("t"))])
    a = MeshNode("a", 1, replay=history)
    b = MeshNode("b", 2)
    first = Pipe(a, b)
    b.core.announce(["t"])
    first.run()  # b linked while a's origin stood at 1: recorded, live forwards only
    assert b.stored.seqs(1) == []
    first.a_side.close(CloseReason.PEER_CLOSED)
    first.b_side.close(CloseReason.PEER_CLOSED)
    history.sets += [(2, one("t")), (3, one("x")), (4, one("t"))]  # published while b was away
    again = Pipe(a, b)  # b stored nothing of a: its MESH_HELLO says position 0
    again.run()
    assert b.stored.seqs(1) == [2, 4], "everything b wants since it first linked, none of the history before"


def test_heartbeats_ping_an_idle_link_and_a_silent_one_dies() -> None:
    clock_a = MeshNode("a", 1).clock
    a, b = MeshNode("a", 1, clock=clock_a, heartbeat_interval=1.0, heartbeat_misses=3), MeshNode("b", 2)
    pipe = Pipe(a, b)
    pipe.run()
    clock_a.advance(1.1)
    pipe.a_side.tick()
    assert pipe.a_side.take_chunk() == wire.PING.encode()
    clock_a.advance(2.0)  # 3.1 s of silence from b: past 3 missed beats
    pipe.a_side.tick()
    assert pipe.a_side.reason is CloseReason.HEARTBEAT_TIMEOUT
