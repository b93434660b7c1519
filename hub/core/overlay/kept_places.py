"""The places of broken links, kept for their hubs for a while (links.py dials round them).

A link that breaks (not one this hub closed) keeps its place for ``refill_after`` while the hub
holds at least half its degree: its far end most often crashed or stalled and comes back within
seconds, and hubs with room are dialled before full ones (LinkPolicy._fill).  Refilled at once,
the neighbours of a crashed hub linked among themselves, and when it came back it joined between
linked hubs, which dropped a link each: advertisements flooded at every change, which on one
machine of 50 hubs came with the seconds of slow deliveries after every crash and stall
(docs/scale.md).  (A restarted hub, whose map is unreachable until its first link is advertised,
dials unreachable hubs first, at random: dialling those with room first brought it back to its
old neighbours, but made the simulator's paths slower; docs/scale.md.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import OverlayConfig
from .membership import Membership


@dataclass
class KeptPlaces:
    config: OverlayConfig
    membership: Membership
    #: hub -> when its link broke
    broken: dict[int, float] = field(default_factory=dict)

    def broke(self, hub: int, now: float) -> None:
        if self.config.refill_after:
            self.broken[hub] = now

    def kept(self, now: float, held: int, links: set[int]) -> list[float]:
        """When the links still keeping their places broke, if the hub holds at least half its
        degree (``held``) without them.  A place goes at ``refill_after``, when its hub is linked
        again (``links``), or sooner once its hub advertises ``degree`` links without this one:
        it is full, so it closed the link itself (a prune, a trial), which the far end cannot tell
        from a crash when the link ends, or it came back and linked elsewhere.  A hub back from a
        stall or a restart advertises fewer."""
        config, me = self.config, self.membership.self_id

        def given_up(hub: int, at: float) -> bool:
            state = self.membership.get(hub)
            full = state is not None and me not in state.neighbors and len(state.neighbors) >= config.degree
            return full or now - at >= config.refill_after or hub in links

        for hub in [h for h, at in self.broken.items() if given_up(h, at)]:
            del self.broken[hub]
        return list(self.broken.values()) if 2 * held >= config.degree else []
