"""Frames waiting for each neighbour, and what was sent, by kind (the overlay's only way out)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .membership import Membership


class Outbox:
    def __init__(self, membership: Membership, links: set[int]) -> None:
        self.membership = membership
        #: the live links (the link policy's set, shared): nothing queues for a hub not linked
        self.links = links
        self._frames: dict[int, list[bytes]] = {}
        self.sent_frames: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    def send(self, hub: int, kind: str, frame: bytes) -> None:
        if hub not in self.links:
            self.dropped["no_link"] += 1
            return
        self._frames.setdefault(hub, []).append(frame)
        self.sent_frames[kind] += 1
        self.sent_bytes[kind] += len(frame)

    def by_next_hop(self, dests: Iterable[int], kind: str) -> dict[int, list[int]]:
        """``dests`` grouped by the neighbour each is reached through; the unreachable counted."""
        dests = list(dests)
        groups = self.membership.split_by_next_hop(dests)
        unroutable = len(dests) - sum(len(g) for g in groups.values())
        if unroutable:
            self.dropped["unroutable_" + kind] += unroutable
        return groups

    def forget(self, hub: int) -> None:
        """The link to ``hub`` went: what was queued for it goes too."""
        self._frames.pop(hub, None)

    def take(self) -> dict[int, list[bytes]]:
        out, self._frames = self._frames, {}
        return out
