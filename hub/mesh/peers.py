"""Per-peer state that outlives one stream: counters, the v2 window, the current session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from libp2p.peer.id import ID
from multiaddr import Multiaddr

from ..core.mesh.config import MeshConfig
from ..core.mesh.inbound import InboundForwards
from ..core.mesh.interest import LocalInterest
from ..core.mesh.protocols import MeshVersion
from ..core.mesh.replay import Replay, ReplaySource
from ..core.mesh.status import CloseReason, PeerCounters
from ..core.mesh.window import ForwardWindow

if TYPE_CHECKING:
    from .session import PeerSession


class SessionOwner(Protocol):
    """What a :class:`~hub.mesh.session.PeerSession` needs from its mesh."""

    hub_id: int
    config: MeshConfig
    local: LocalInterest
    inbound: InboundForwards
    replay: ReplaySource | None

    def hello_positions(self) -> dict[int, int]: ...

    def hello_refusal(self, link: PeerLink, hub_id: int) -> str | None: ...

    def replay_after(self, link: PeerLink, hub_id: int, position: int) -> int | None: ...

    def open_replay(self, link: PeerLink, after: int, before: int | None) -> Replay | None: ...

    def peer_subscribed(self, link: PeerLink, topics: list[str]) -> None: ...

    def peer_unsubscribed(self, link: PeerLink, topics: list[str]) -> None: ...


class PeerLink:
    """One remote hub as this hub knows it, across reconnects."""

    def __init__(self, peer_id: ID, config: MeshConfig) -> None:
        self.peer_id = peer_id
        self.short_id = str(peer_id)[-8:]
        self.addrs: list[Multiaddr] = []
        self.counters = PeerCounters()
        self.window = ForwardWindow(max_sets=config.window_max_sets, max_bytes=config.window_max_bytes)
        self.session: PeerSession | None = None
        self.version: MeshVersion | None = None
        self.remote_hub_id: int | None = None
        self.last_close: CloseReason | None = None
        #: trio time the last session ended; None while a session is up.
        self.down_since: float | None = None
        self.dialing = False
        #: an accepted stream whose session has not started yet (counts toward max_peers)
        self.starting = False
        #: configured with --bootstrap while discovery is off: dialed only at these
        #: addresses (e.g. through a fixed proxy) and never given up on
        self.static_addrs: list[Any] = []

    @property
    def live(self) -> bool:
        return self.session is not None and self.session.alive

    def status(self, interest: frozenset[str]) -> dict[str, Any]:
        addr = None
        if self.addrs:
            addr = f"{self.addrs[0]}/p2p/{self.peer_id}" if "/p2p/" not in str(self.addrs[0]) else str(self.addrs[0])
        return {
            "peer_id": str(self.peer_id),
            "multiaddr": addr,
            "hub_id": None if self.remote_hub_id is None else f"{self.remote_hub_id:016x}",
            "protocol": self.version.protocol_id if self.version else None,
            "connected": self.live,
            "direction": None if self.session is None else ("outbound" if self.session.outbound else "inbound"),
            "last_close": None if self.last_close is None else self.last_close.value,
            "interest": sorted(interest),
            "window_sets": len(self.window),
            "window_unacked": self.window.unacked,
            "window_bytes": self.window.bytes,
            "acked_seq": self.window.acked_seq,
            "window_evicted_unacked_sets": self.window.evicted.unacked_sets,
            "window_evicted_unsent_messages": self.window.evicted.unsent_messages,
            **self.counters.as_dict(),
        }
