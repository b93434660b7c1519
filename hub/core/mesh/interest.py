"""Who wants what: the local hub's own interest and each peer's.  Pure data, no I/O.

Names are ``.``-separated tokens; in a pattern ``*`` matches one token and
``>`` the rest (the same matching as local subscriptions, via ``hub.core.routing``).
Peers are held to the seed's rule only -- a name is 1..255 bytes of UTF-8 --
so a minimal seed peer's names are accepted and match literally; the stricter
topic rule (``wire.topics``) is for what clients publish and subscribe.
An announcement is a *set* operation: announcing a pattern twice and
withdrawing it once leaves no interest -- that is what SUBSCRIBE/UNSUBSCRIBE
mean on the wire, unlike the counted local routing table.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from wire.limits import MAX_TOPIC_BYTES

from ..routing import RoutingTable

P = TypeVar("P", bound=Hashable)


def valid_pattern(pattern: str) -> bool:
    """May a hub announce ``pattern`` on the mesh?  The seed's rule: 1..255 bytes of UTF-8."""
    try:
        return 1 <= len(pattern.encode("utf-8")) <= MAX_TOPIC_BYTES
    except UnicodeEncodeError:
        return False


class InterestTable(Generic[P]):
    """Map peers to the topics/patterns they announced, and topics back to peers.

    >>> t: InterestTable[str] = InterestTable()
    >>> t.add("peer-a", ["orders.*"])
    ['orders.*']
    >>> sorted(t.peers_for(["orders.eu", "audit"]))
    ['peer-a']
    >>> t.peers_for(["audit"])
    set()
    """

    def __init__(self) -> None:
        self._by_peer: dict[P, set[str]] = {}
        self._routes: RoutingTable[P] = RoutingTable()

    def add(self, peer: P, patterns: Iterable[str]) -> list[str]:
        """Record ``patterns`` for ``peer``; return those that were new."""
        have = self._by_peer.setdefault(peer, set())
        added = []
        for pattern in patterns:
            if pattern in have:
                continue
            self._routes.add(pattern, peer)
            have.add(pattern)
            added.append(pattern)
        return added

    def remove(self, peer: P, patterns: Iterable[str]) -> list[str]:
        """Forget ``patterns`` for ``peer``; return those that were present."""
        have = self._by_peer.get(peer)
        if not have:
            return []
        removed = []
        for pattern in patterns:
            if pattern in have:
                have.discard(pattern)
                self._routes.remove(pattern, peer)
                removed.append(pattern)
        if not have:
            del self._by_peer[peer]
        return removed

    def drop_peer(self, peer: P) -> list[str]:
        """Forget everything ``peer`` announced (it died or left)."""
        return self.remove(peer, list(self._by_peer.get(peer, ())))

    def peers_for(self, topics: Iterable[str]) -> set[P]:
        """Every peer that wants at least one of ``topics``."""
        found: set[P] = set()
        for topic in topics:
            found.update(self._routes.match(topic))
        return found

    def wants(self, peer: P, topics: Iterable[str]) -> bool:
        return peer in self.peers_for(topics)

    def patterns_of(self, peer: P) -> frozenset[str]:
        return frozenset(self._by_peer.get(peer, ()))

    def peers(self) -> list[P]:
        return list(self._by_peer)

    def __len__(self) -> int:
        return len(self._by_peer)


class LocalInterest:
    """This hub's own announced patterns, with a fast "does anyone here want it?"."""

    _ME = 0

    def __init__(self) -> None:
        self._table: InterestTable[int] = InterestTable()

    def add(self, patterns: Iterable[str]) -> list[str]:
        return self._table.add(self._ME, patterns)

    def remove(self, patterns: Iterable[str]) -> list[str]:
        return self._table.remove(self._ME, patterns)

    def wants(self, topics: Iterable[str]) -> bool:
        return bool(self._table.peers_for(topics))

    @property
    def patterns(self) -> frozenset[str]:
        return self._table.patterns_of(self._ME)
