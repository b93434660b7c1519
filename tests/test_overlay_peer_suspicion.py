"""A v3 link's probe (hub/core/mesh/overlay_peer.py): sets or routed control frames sent to a
neighbour quiet for ``suspect_after`` carry a ping; a ping left unanswered for ``suspect_after``
makes the neighbour suspected, so the overlay routes around it (routes.py) until any frame of
it arrives.  Advertisements (LINK_STATE) ask for nothing.  Sans-IO: a hand-moved clock and a
recording overlay."""

from __future__ import annotations

import wire
from hub.core.clock import ManualClock
from hub.core.mesh.config import MeshConfig
from hub.core.mesh.hub_id import hub_id_for
from hub.core.mesh.link import PeerLink
from hub.core.mesh.overlay_peer import PING_FRAME, OverlayPeer
from hub.core.mesh.protocols import MeshVersion

PEER = b"\x00\x24peer-key-bytes-of-the-neighbour"
#: An advertisement (it asks for no answer), a frame of sets (it does), and a control frame.
LINK_STATE = wire.LinkState(hub_id=5, boot=1, seq=1, peer_key="k5", neighbors=()).encode()
HEADS = wire.Heads(heads=(wire.Head(topic="t", last=1),))
ONE_SET = wire.RoutedSet(origin_seq=1, timestamp=1, messages=wire.MessageSet.build(("t",), [(b"", b"v")]), prevs=(0,))
SETS = wire.RoutedSets(ttl=8, dests=(5,), origin=3, sets=(ONE_SET,)).encode()


class Recorder:
    """The overlay as the link sees it: it takes the link and records what it is told."""

    hub_id = 1

    def __init__(self) -> None:
        self.suspicions: list[tuple[int, bool]] = []
        self.timed: list[int] = []

    def link_up(self, peer: OverlayPeer) -> bool:
        return True

    def link_down(self, peer: OverlayPeer) -> None: ...

    def referral(self, state: wire.LinkState) -> None: ...

    def link_timed(self, hub: int, round_trip: float) -> None:
        self.timed.append(hub)

    def link_suspected(self, hub: int, suspected: bool) -> None:
        self.suspicions.append((hub, suspected))

    def receive(self, hub: int, frame: wire.Frame) -> None: ...

    def pump(self) -> None: ...


def linked_peer(
    suspect_after: float = 0.5, *, outbound: bool = False
) -> tuple[OverlayPeer, Recorder, ManualClock, int]:
    clock, overlay = ManualClock(100.0), Recorder()
    config = MeshConfig(suspect_after=suspect_after, heartbeat_interval=1.0, heartbeat_misses=3)
    link = PeerLink("the-neighbour", PEER, config)
    peer = OverlayPeer(overlay, link, MeshVersion.V3_1, outbound=outbound, clock=clock, config=config)
    peer.start()
    hub = hub_id_for(PEER)
    peer.receive([wire.MeshHello(hub_id=hub)])
    assert peer.linked
    peer.take_chunk()
    return peer, overlay, clock, hub


def pings(peer: OverlayPeer) -> int:
    chunk = peer.take_chunk() or b""
    return chunk.count(PING_FRAME)


def test_a_neighbour_that_answers_no_probe_is_suspected_until_it_answers() -> None:
    peer, overlay, clock, hub = linked_peer()
    peer.queue([SETS])
    assert pings(peer) == 0  # heard from it just now: no probe
    clock.advance(0.5)
    peer.queue([LINK_STATE])
    assert pings(peer) == 0  # advertisements ask for nothing
    peer.queue([SETS])
    assert pings(peer) == 1  # quiet for suspect_after while sent sets: asked
    clock.advance(0.3)
    peer.queue([SETS])
    assert overlay.suspicions == [] and pings(peer) == 0  # 0.3 s into the probe: not yet
    clock.advance(0.25)
    peer.queue([SETS])
    assert overlay.suspicions == [(hub, True)] and peer.counters.suspected == 1
    peer.queue([SETS])
    assert overlay.suspicions == [(hub, True)]  # told once
    peer.receive([wire.PONG])
    assert overlay.suspicions == [(hub, True), (hub, False)]
    # The accepting side's probes time nothing: only the dialling side's figures are advertised
    # (costs.py), or every link would be re-advertised from both ends.
    assert overlay.timed == []


def test_the_dialling_side_times_its_link_with_its_probes_too() -> None:
    peer, overlay, clock, hub = linked_peer(outbound=True)
    peer.take_chunk()  # its first ping, sent on greeting
    peer.receive([wire.PONG])
    clock.advance(0.5)
    peer.queue([SETS])
    assert pings(peer) == 1
    clock.advance(0.01)
    peer.receive([wire.PONG])
    assert overlay.timed == [hub, hub]


def test_the_tick_suspects_a_silent_neighbour_when_nothing_more_is_sent() -> None:
    peer, overlay, clock, hub = linked_peer()
    clock.advance(0.5)
    peer.queue([SETS])
    clock.advance(0.6)
    peer.tick()
    assert overlay.suspicions == [(hub, True)]
    peer.receive([HEADS])  # any frame answers
    assert overlay.suspicions[-1] == (hub, False)


def test_a_neighbour_that_answers_in_time_is_never_suspected_and_zero_turns_probes_off() -> None:
    peer, overlay, clock, _ = linked_peer()
    for _ in range(20):
        clock.advance(0.6)
        peer.queue([SETS])
        clock.advance(0.01)
        peer.receive([wire.PONG])
        peer.tick()
    assert overlay.suspicions == []
    peer, overlay, clock, _ = linked_peer(suspect_after=0.0)
    clock.advance(2.0)
    peer.queue([SETS])
    clock.advance(2.0)
    peer.queue([SETS])
    assert pings(peer) == 0 and overlay.suspicions == []
