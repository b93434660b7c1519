"""Frames waiting for each neighbour, and what was sent, by kind (the overlay's only way out)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from .membership import Membership
from .shortcuts import Shortcuts


class Outbox:
    def __init__(self, membership: Membership, links: set[int], shortcuts: Shortcuts) -> None:
        self.membership = membership
        #: the live links (the link policy's set, shared): nothing queues for a hub not linked
        self.links = links
        #: live shortcuts (shortcuts.py, shared): frames for those hubs go straight to them
        self.shortcuts = shortcuts.live
        #: shortcuts a frame was queued for (shared: how shortcuts.py tells the idle ones)
        self.touched = shortcuts.touched
        #: frames for more hubs than this ignore shortcuts: a hub of a wide topic's tree is often
        #: a relay to others in the same frame, and would get a second copy on the tree's path
        self.fanout = shortcuts.config.shortcut_fanout
        self._frames: dict[int, list[bytes]] = {}
        self.sent_frames: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    def send(self, hub: int, kind: str, frame: bytes) -> None:
        if hub not in self.links:
            if hub not in self.shortcuts:
                self.dropped["no_link"] += 1
                return
            self.touched.add(hub)
        self._frames.setdefault(hub, []).append(frame)
        self.sent_frames[kind] += 1
        self.sent_bytes[kind] += len(frame)

    def by_next_hop(self, dests: Iterable[int], kind: str, *, relayed_from: int | None = None,
                    relay_detours: bool = False) -> dict[int, list[int]]:  # fmt: skip
        """``dests`` grouped by the neighbour each is reached through; the unreachable counted.
        ``relayed_from``, ``relay_detours``: a frame passed on (see Membership.split_by_next_hop)."""
        dests = list(dests)
        shortcuts = self.shortcuts
        direct: list[int] = []
        if shortcuts and len(dests) <= self.fanout:
            # Not to a suspect (routes.py): what its shortcut swallows would wait for the heartbeat
            # bound.  Its sets go by the map, relayed ones too (without a detour: no loop).
            direct = [d for d in dests if d in shortcuts and d not in self.membership.suspected]
            if direct:
                dests = [d for d in dests if d not in direct]
        groups = self.membership.split_by_next_hop(dests, relayed_from=relayed_from, relay_detours=relay_detours)
        unroutable = len(dests) - sum(len(g) for g in groups.values())
        if unroutable:
            self.dropped["unroutable_" + kind] += unroutable
        for hub in direct:
            groups[hub] = [hub]  # a shortcut's far end is never a next hop of the map's (not linked)
        return groups

    def relay(
        self, me: int, ttl: int, dests: tuple[int, ...], kind: str, make: Callable[[int, list[int]], bytes], *,
        came_from: int, detours: bool = False,
    ) -> None:  # fmt: skip
        """A routed frame from neighbour ``came_from`` passing through hub ``me``: ``make(ttl, dests)``
        for each next hop of the others (``detours``: round a suspect too, see Membership.split_by_next_hop)."""
        others = [d for d in dests if d != me]
        if not others:
            return
        if ttl == 0:
            self.dropped["ttl"] += 1
            return
        for hop, group in self.by_next_hop(others, kind, relayed_from=came_from, relay_detours=detours).items():
            self.send(hop, kind, make(ttl - 1, group))

    def forget(self, hub: int) -> None:
        """The link to ``hub`` went: what was queued for it goes too."""
        self._frames.pop(hub, None)

    def take(self) -> dict[int, list[bytes]]:
        out, self._frames = self._frames, {}
        return out
