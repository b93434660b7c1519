"""The hub's side of the mesh: interest from local subscriptions, forwarding, storing forwards.

* Interest: the routing table reports when a topic or pattern gets its first
  local subscriber (live, follower or group) and when it loses its last; the
  mesh announces and withdraws it to every peer (lazy push).
* Outbound: every local publish batch the hub stored is handed to
  :meth:`Mesh.forward` with its origin sequence and timestamp; the mesh sends
  it only to peers that announced matching interest.  Forwarded messages are
  never forwarded again: the mesh is full, every hub hears from the origin.
* Inbound: forwarded sets (already deduplicated by (origin, seq)) go through the
  same store-and-route path as a local publish, keeping origin, origin
  sequence and timestamp, so every hub's log holds each message once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import wire

from .mesh.config import MeshConfig
from .mesh.mesh import Mesh

if TYPE_CHECKING:
    from .server import HubServer

log = logging.getLogger("pub0sub.hub.meshlink")


class MeshBridge:
    def __init__(self, server: HubServer, config: MeshConfig) -> None:
        self.server = server
        self.mesh = Mesh(config, hub_id=server.hub_id, on_forward=self.on_forward, resume_positions=self.positions)
        self.forwarded_messages_in = 0
        server.router.on_change = self._interest_changed
        # Subscriptions that exist before the mesh starts are announced as it starts.
        existing = server.router.patterns()
        if existing:
            self.mesh.announce(existing)

    def _interest_changed(self, pattern: str, present: bool) -> None:
        if present:
            self.mesh.announce([pattern])
        else:
            self.mesh.withdraw([pattern])

    def positions(self) -> dict[int, int]:
        """Last stored origin sequence per origin, from the topic logs (resume after a restart)."""
        store = self.server.store
        if store is None:
            return {}
        positions: dict[int, int] = {}
        for topic_log in store.logs.values():
            for origin, seq in topic_log.origins.items():
                if seq > positions.get(origin, 0):
                    positions[origin] = seq
        return positions

    def on_forward(self, origin: int, sets: list[wire.ForwardSet], peer: Any) -> int | None:
        """Store forwarded sets; the last origin sequence stored is acknowledged to the sender."""
        server = self.server
        match = server.router.match
        last: int | None = None
        for fset in sets:
            mset = fset.messages
            # Only topics someone here wants are stored (the set may name others).
            topics = tuple(t for t in mset.topics if match(t))
            if topics:
                try:
                    server.publisher.store_set(
                        topics, mset.count, mset.records, timestamp=fset.timestamp, origin=origin,
                        origin_seq=fset.origin_seq,
                    )
                except OSError as exc:
                    log.critical("cannot store forwarded messages: %s", exc)
                    if server.store is not None:
                        server.store.storage_error = exc
                    return last  # the sender keeps the rest and resends it
                self.forwarded_messages_in += mset.count
            last = fset.origin_seq + mset.count - 1
        return last

    def status(self) -> dict[str, Any]:
        mesh = self.mesh
        try:
            addrs = mesh.listen_addrs
            peer_id = str(mesh.peer_id)
        except Exception:  # the host is not up yet
            addrs, peer_id = [], ""
        return {
            "peer_id": peer_id,
            "listen_addrs": addrs,
            "cluster": mesh.config.cluster,
            "local_interest": sorted(mesh.local.patterns),
            "forwarded_messages_in": self.forwarded_messages_in,
            "backlog": mesh.backlog(),
            "peers": mesh.peers_status(),
        }
