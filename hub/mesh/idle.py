"""Closing the libp2p connections no mesh session uses any more (a hub on the overlay).

The overlay ends streams as part of its work -- a surplus link pruned, a full hub's referral, a
refused shortcut, a v2 link that moved, a trial link dropped, a seed dialled while the hub had no
link -- and the DHT's lookups while the overlay forms connect a hub to most others; libp2p keeps
each connection open: a Noise session, a yamux read task and its keep-alive pings, a descriptor
at both ends (12 idle hubs of 4 links each held 11 connections each: docs/scale.md).  A
connection that carried no stream and no mesh session of its peer for ``close_after`` seconds
(seen at two sweeps at least that far apart) is closed; a later dial opens a new one (a TCP and
Noise handshake, once).  libp2p itself dials nobody again (hub/mesh/host.py: no_auto_dials).

Only while the overlay has a link: a hub without one finds its way in through the DHT, whose
queries use these connections.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import trio
from libp2p.peer.id import ID

from ..core.events import ev

log = logging.getLogger("hub.mesh")


class IdleConnections:
    """Which peers' connections have been idle long enough to close (the decision, no I/O)."""

    def __init__(self, close_after: float) -> None:
        self.close_after = close_after
        #: peer -> when a sweep first saw its connections idle (the peers idle at the last sweep)
        self._idle_since: dict[ID, float] = {}
        #: Peers whose connections were closed for being idle (status).
        self.closed = 0

    def due(self, connections: Mapping[ID, Sequence[Any]], busy: Callable[[ID], bool], now: float) -> list[ID]:
        """The peers to close now: idle (no stream on any connection, not ``busy``) at every sweep
        since one at least ``close_after`` ago.  A peer seen busy starts over."""
        idle: dict[ID, float] = {}
        for peer, conns in connections.items():
            if busy(peer) or any(conn.get_streams() for conn in conns):
                continue
            idle[peer] = self._idle_since.get(peer, now)
        self._idle_since = idle
        return [peer for peer, since in idle.items() if now - since >= self.close_after]

    async def run(self, host: Any, busy: Callable[[ID], bool], active: Callable[[], bool]) -> None:
        """Every ``close_after / 2`` seconds while ``active()``: close the connections found due."""
        while True:
            await trio.sleep(self.close_after / 2)
            if not active():
                self._idle_since.clear()
                continue
            network = host.get_network()
            for peer in self.due(network.get_connections_map(), busy, trio.current_time()):
                await self._close(network, peer)

    async def _close(self, network: Any, peer: ID) -> None:
        self._idle_since.pop(peer, None)
        self.closed += 1
        log.debug("mesh: closing the idle connection to %s", peer, extra=ev("mesh_idle_closed", peer=str(peer)))
        with trio.move_on_after(5.0):
            try:
                await network.close_peer(peer)
            except Exception:  # already gone, or closing under us: nothing held any more either way
                log.debug("closing an idle connection failed", exc_info=True,
                          extra=ev("mesh_idle_close_failed", peer=str(peer)))
