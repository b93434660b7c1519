"""One peer hub as this hub knows it, across reconnects: counters, forward window, hub id."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ..events import ev
from ..histogram import Histogram
from .config import MeshConfig
from .protocols import MeshVersion
from .status import CloseReason, PeerCounters
from .window import ForwardWindow

log = logging.getLogger("hub.mesh.session")


def silence_reason(
    config: MeshConfig, now: float, *, last_received: float, started_at: float, greeted: bool
) -> CloseReason | None:
    """Why a session (v1, v2 or v3) must end for what it has not heard: nothing at all for
    ``heartbeat_misses`` intervals, or no MESH_HELLO within ``hello_timeout``."""
    if now - last_received > config.heartbeat_interval * config.heartbeat_misses:
        return CloseReason.HEARTBEAT_TIMEOUT
    if not greeted and now - started_at > config.hello_timeout:
        return CloseReason.HELLO_TIMEOUT
    return None


class LinkSession(Protocol):
    """What the mesh asks of a link's current stream (``hub.core.mesh.peer.PeerProtocol``)."""

    @property
    def alive(self) -> bool: ...

    @property
    def outbound(self) -> bool: ...

    @property
    def version(self) -> MeshVersion: ...

    def close(self, reason: CloseReason) -> None: ...

    def announce(self, patterns: list[str]) -> None: ...

    def withdraw(self, patterns: list[str]) -> None: ...

    def send_v1(self, frames: bytes, count: int) -> bool: ...

    def forwards_queued(self) -> None: ...


class PeerLink:
    """One remote hub as this hub knows it, across reconnects.

    ``key`` is the peer id's text form (the shell's libp2p id is ``peer_id``, opaque here);
    ``peer_bytes`` its binary form, from which its hub id is derived.
    """

    def __init__(self, key: str, peer_bytes: bytes, config: MeshConfig, *, peer_id: Any = None) -> None:
        self.key = key
        self.peer_bytes = peer_bytes
        self.peer_id: Any = peer_id if peer_id is not None else key
        self.short_id = key[-8:]
        #: Where to dial it (opaque to the core: the shell's multiaddrs).
        self.addrs: list[Any] = []
        #: configured with --bootstrap while discovery is off: dialed only at these
        #: addresses (e.g. through a fixed proxy) and never given up on
        self.static_addrs: list[Any] = []
        self.counters = PeerCounters()
        #: Heartbeat round trips (PING sent to PONG received), and sessions ended per close reason.
        self.rtt = Histogram()
        self.closes: dict[str, int] = {}
        self._ping_out: float | None = None
        self.window = ForwardWindow(max_sets=config.window_max_sets, max_bytes=config.window_max_bytes)
        self.protocol: LinkSession | None = None
        self.version: MeshVersion | None = None
        self.remote_hub_id: int | None = None
        self.last_close: CloseReason | None = None
        #: monotonic time the last session ended; None while a session is up.
        self.down_since: float | None = None
        self.dialing = False
        #: an accepted stream whose session has not started yet (counts toward max_peers)
        self.starting = False

    def session_closed(self, reason: CloseReason) -> None:
        """Counted per reason and logged; a PING of the ended session is never answered on the next."""
        self.closes[reason.value] = self.closes.get(reason.value, 0) + 1
        log.info("mesh session with %s ended: %s", self.short_id, reason.value,
                 extra=ev("mesh_session_ended", peer=self.key, reason=reason.value))
        self._ping_out = None

    def misbehaved(self, reason: CloseReason, what: str, *args: object) -> None:
        """Log what the peer did that ends its session with ``reason`` (the close is logged apart)."""
        log.warning("mesh peer %s " + what, self.short_id, *args,
                    extra=ev("mesh_peer_misbehaved", peer=self.key, reason=reason.value))  # fmt: skip

    def ping_sent(self, now: float) -> None:
        """A heartbeat PING left (a PING still unanswered keeps its time: the round trip grows)."""
        if self._ping_out is None:
            self._ping_out = now

    def pong_received(self, now: float) -> float | None:
        """The round trip of the PING this PONG answers (None: no PING of this session was out)."""
        if self._ping_out is None:
            return None
        round_trip = now - self._ping_out
        self.rtt.observe(round_trip)
        self._ping_out = None
        return round_trip

    @property
    def live(self) -> bool:
        return self.protocol is not None and self.protocol.alive

    @property
    def on_v2(self) -> bool:
        """Its last session spoke v2 or v1, not the overlay (hub/core/mesh/switch.py)."""
        return self.version is not None and not self.version.overlay

    def status(self, interest: frozenset[str]) -> dict[str, Any]:
        addr = None
        if self.addrs:
            addr = f"{self.addrs[0]}/p2p/{self.key}" if "/p2p/" not in str(self.addrs[0]) else str(self.addrs[0])
        protocol = self.protocol
        return {
            "peer_id": self.key,
            "multiaddr": addr,
            "hub_id": None if self.remote_hub_id is None else f"{self.remote_hub_id:016x}",
            "protocol": self.version.protocol_id if self.version else None,
            "connected": self.live,
            "direction": None if protocol is None else ("outbound" if protocol.outbound else "inbound"),
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
