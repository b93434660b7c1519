"""Passing other hubs' advertisements on: paced, batched, and never back to a link that sent them.

A LINK_STATE that is news is not passed on at once but within FLOOD_PACE, with every other
piece of news of that moment: each neighbour then gets one batch of frames (one write) instead
of one write per advertisement, an advertisement replaced by a newer one of the same hub in the
meantime goes no further, and a neighbour that sent the same advertisement meanwhile does not get
it back.  In a storm (1000 hubs forming an overlay, a crash every hub hears of) this divides the
writes of a flood by the number of advertisements in a pace, and takes a few of its frames off;
in a quiet overlay it adds FLOOD_PACE per hop to a change's journey.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .outbox import Outbox

#: News waits at most this long before it is passed on (per hop).
FLOOD_PACE = 0.05


@dataclass(slots=True)
class _News:
    seq: int
    frame: bytes
    #: links this advertisement came in on (they hold it already)
    heard_from: set[int]


@dataclass
class Flooding:
    outbox: Outbox
    #: the live links (the link policy's set, shared)
    links: set[int]
    pending: dict[int, _News] = field(default_factory=dict)
    due: float | None = None

    def news(self, hub_id: int, seq: int, frame: bytes, peer: int, now: float) -> None:
        """A new advertisement of ``hub_id`` came in from ``peer``: pass it on at the next pace."""
        self.pending[hub_id] = _News(seq, frame, {peer})
        if self.due is None:
            self.due = now + FLOOD_PACE

    def repeat(self, hub_id: int, seq: int, peer: int) -> None:
        """``peer`` sent an advertisement already known: if it is still to be passed on, not to ``peer``."""
        news = self.pending.get(hub_id)
        if news is not None and news.seq == seq:
            news.heard_from.add(peer)

    def tick(self, now: float) -> float | None:
        """Pass on what is due; returns when to call again (None: nothing waits)."""
        if self.due is None:
            return None
        if now < self.due:
            return self.due
        send = self.outbox.send
        for news in self.pending.values():
            for link in self.links:
                if link not in news.heard_from:
                    send(link, "LINK_STATE", news.frame)
        self.pending.clear()
        self.due = None
        return None
