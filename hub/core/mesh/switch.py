"""When a hub leaves the v2 full mesh for the overlay, and what becomes of its v2 links.

A cluster starts small, as the v2 full mesh (every send one hop, the fastest data path).  A
hub started with ``--mesh-overlay-from N`` (the default, N = 10) *switches* to the overlay
(mesh v3, ``hub/core/overlay/``) once it holds links to N - 1 hubs (or as many as
``--max-peers`` lets it), or as soon as a v3 stream reaches it: a hub that switched already,
so the cluster is past N.  ``--mesh-overlay`` is N = 1 (the overlay from the start); N = 0
never switches.  Before switching a hub offers only v2 (and v1) when it dials, but takes v3
streams: that is how a switched hub *invites* it.

After the switch, each v2 link is one of three things:

* **invited**: once per v2 session the hub dials its peer v3-only.  A peer that runs the
  overlay too (or switches on the spot) takes the stream, which replaces the v2 session; a
  v2-only hub fails the negotiation and keeps its v2 link (mixed mode: its sets and ours
  go one hop over it, as before);
* **retired**: a peer the overlay's map reaches needs no v2 link: it is closed
  (:attr:`CloseReason.MOVED`) and not dialled again;
* **kept**: anything else (a v2-only peer, a peer the map does not reach yet).

One path per pair of hubs, and no set between the two: a v2 link also gives way the moment
the overlay carries sets between its ends either way (``Overlay._v2_hand_over``: a JOINED told
or received, a ROUTED_SETS delivered here), or else a set could cross both and be stored twice.
The sets its window held unacknowledged would never be resent (the v2 resume needs a v2
session), so the window is dropped and the overlay is told where the peer may lack sets
(:meth:`MeshCore.hand_over`): every start (JOINED) this hub tells that hub for a while is at
most that, and the hub repairs what it lacks from this hub's log; what it has is dropped as a
duplicate (its streams start from its stored positions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class OverlaySwitch:
    #: ``--mesh-overlay-from``: hubs known (this one included) that make the overlay worth it.
    from_hubs: int
    #: ``--max-peers``: a v2 hub never holds more links, so it switches at that many too.
    max_peers: int
    switched: bool = False
    #: Peers (keys) dialled v3-only during their current v2 session.
    invited: set[str] = field(default_factory=set)

    @property
    def enabled(self) -> bool:
        return self.from_hubs > 0

    def due(self, v2_links: int) -> bool:
        """Should a hub holding ``v2_links`` live v2 links switch now?"""
        if self.switched or not self.enabled:
            return False
        return v2_links + 1 >= min(self.from_hubs, self.max_peers + 1)

    def to_invite(self, live_v2: Iterable[str]) -> list[str]:
        """Peers to dial v3-only now: each live v2 peer once per session (after the switch)."""
        if not self.switched:
            return []
        fresh = [key for key in live_v2 if key not in self.invited]
        self.invited.update(fresh)
        return fresh

    def to_retire(self, live_v2: Mapping[str, int], reachable: Callable[[int], bool]) -> list[str]:
        """Live v2 peers (key -> hub id) the overlay reaches: their v2 links are closed."""
        if not self.switched:
            return []
        return [key for key, hub in live_v2.items() if key in self.invited and reachable(hub)]

    def v2_session_ended(self, key: str) -> None:
        """A v2 session with ``key`` ended: its next one is invited again."""
        self.invited.discard(key)
