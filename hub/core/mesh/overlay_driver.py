"""The hub's overlay (mesh v3) between its v3 links and the routing core, without I/O.

:class:`hub.core.overlay.core.Overlay` decides; this class drives it the way the simulator
does (``hub/tools/sim/world.py``), over real links: it tells it which neighbours came and
went (one :class:`~hub.core.mesh.overlay_peer.OverlayPeer` per v3 link), hands it their
frames, and after every event *pumps* it: timers first (what they queue leaves in the same
pump), then the hubs to dial and the surplus link to close, then each neighbour's frames
into that link's writer.  The shell dials (``on_dial``) and sleeps until :attr:`deadline`
(``on_deadline`` says it moved).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import wire

from ..events import ev
from ..overlay.core import Overlay
from .overlay_peer import OverlayPeer
from .status import CloseReason

log = logging.getLogger("hub.mesh")


def _nothing() -> None:
    pass


class OverlayDriver:
    def __init__(self, overlay: Overlay, *, on_dial: Callable[[wire.LinkState, bool], None]) -> None:
        """``on_dial(state, shortcut)``: open a link (or a shortcut) to the hub ``state`` advertises."""
        self.overlay = overlay
        self.hub_id = overlay.hub_id
        self.on_dial = on_dial
        self.on_deadline: Callable[[], None] = _nothing
        #: hub id -> the live v3 link to it
        self.peers: dict[int, OverlayPeer] = {}
        #: When :meth:`pump` must run again (None: only on the next event).
        self.deadline: float | None = None
        self.pruned = 0

    # -- the hub's side ------------------------------------------------------------------

    def set_interest(self, added: Iterable[str], removed: Iterable[str]) -> None:
        self.overlay.set_interest(added, removed)
        self.pump()

    def publish(self, origin_seq: int, timestamp: int, messages: wire.MessageSet) -> None:
        """A set of this hub's, stored.  Not pumped here: the shell pumps once per burst
        (``pump_soon``), so the sets of a burst leave as one ROUTED_SETS per next hop."""
        self.overlay.publish(origin_seq, timestamp, messages)

    # -- links ---------------------------------------------------------------------------

    def may_accept(self, hub: int, *, shortcut: bool = False) -> bool:
        return self.overlay.may_accept(hub, shortcut=shortcut)

    def link_up(self, peer: OverlayPeer) -> bool:
        """``peer`` greeted: the overlay has a neighbour (False: it has no room, the link closes)."""
        hub = peer.remote_hub_id
        assert hub is not None
        old = self.peers.get(hub)
        if old is not None and old is not peer:
            self.peers.pop(hub)
            old.close(CloseReason.REPLACED)
        shortcut = peer.version.shortcut
        known = hub in self.overlay.links or hub in self.overlay.shortcuts.live
        if not known and not self.overlay.may_accept(hub, shortcut=shortcut):
            log.info(
                "mesh peer %s: no room for another overlay link (max_peers); closing",
                peer.link.key,
                extra=ev("mesh_link_refused", peer=peer.link.key, reason="max_peers"),
            )
            peer.close(CloseReason.PRUNED)
            return False
        self.peers[hub] = peer
        self.overlay.link_up(hub, shortcut=shortcut, inbound=not peer.outbound)
        self.pump()
        return True

    def link_down(self, peer: OverlayPeer) -> None:
        hub = peer.remote_hub_id
        if hub is not None and self.peers.get(hub) is peer:
            del self.peers[hub]
            self.overlay.link_down(hub)
            self.pump()

    def dial_failed(self, hub: int) -> None:
        self.overlay.dial_ended(hub)
        self.pump()

    def referral(self, state: wire.LinkState) -> None:
        self.overlay.referral([state])

    def link_timed(self, hub: int, round_trip: float) -> None:
        self.overlay.link_timed(hub, round_trip)

    def link_suspected(self, hub: int, suspected: bool) -> None:
        """``hub`` left a probe unanswered (or answered again): routes go round it while it is."""
        self.overlay.suspect(hub, suspected)
        self.pump()

    def receive(self, hub: int, frame: wire.Frame) -> None:
        """A frame from neighbour ``hub`` (the peer pumps once per read)."""
        self.overlay.receive(hub, frame)

    # -- the pump ------------------------------------------------------------------------

    def pump(self) -> None:
        overlay = self.overlay
        deadline = overlay.tick()
        for state in overlay.dials():
            self.on_dial(state, False)
        for state in overlay.shortcut_dials():
            self.on_dial(state, True)
        surplus = overlay.surplus_link()
        if surplus is not None:
            peer = self.peers.pop(surplus, None)
            overlay.link_down(surplus, pruned=True)
            self.pruned += 1
            if peer is not None:
                log.info(
                    "mesh peer %s: overlay link pruned (a surplus link, or one a faster trial link replaced)",
                    peer.link.key,
                    extra=ev("mesh_link_pruned", peer=peer.link.key),
                )
                peer.close(CloseReason.PRUNED)
            deadline = overlay.tick()
        for hub, frames in overlay.take_outbox().items():
            peer = self.peers.get(hub)
            if peer is not None:
                peer.queue(frames)
        if deadline != self.deadline:
            self.deadline = deadline
            self.on_deadline()
