"""When an origin tells its destinations where its topics end (HEADS) after routes moved.

A set is lost in flight only around a change of the graph: a link or hub that failed takes
what it carried, and while a change floods, hubs route on different maps for a moment (a set
can loop to the hop limit, or meet a relay with no route yet) -- a link that comes up moves
routes as much as one that goes.  A lost set with sets after it on its topic is found by
their chain (``streams.py``); one with nothing after it, a *tail*, only by HEADS.

So every change that can move routes opens a *round*: once the graph has been quiet
``delay`` seconds, HEADS go for every topic published from ``window`` seconds before the
round's first change, and once more ``again`` seconds later.  The second send is for what
the first cannot see: other hubs advertise and settle on their own pacing (a link change is
advertised up to ADVERTISE_MAX late, routes recomputed up to SETTLE_MAX late), so sets can
still be lost after this hub's graph looked quiet, and the publisher may go on publishing
meanwhile.  A change during a round starts it again from its first send.  While changes
keep coming (a large overlay forming, a storm of failures), the first send waits for a quiet
second at most ``again`` seconds: HEADS then go every few seconds until the graph settles.
With no change, no HEADS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import wire

from .membership import keys_of_topic
from .origin import heads_frames
from .rendezvous import Send


def heads_sends(
    heads: list[wire.Head], destinations: Callable[[str], frozenset[int]], told: Mapping[str, set[int]]
) -> list[Send]:
    """HEADS for ``heads``, one send per set of hubs: each topic's destinations, and every hub
    told JOINED under one of its keys (``told``, joins.py) -- all a restarted hub knows of its
    destinations until it watches the keys again (they keep the topics they want)."""
    by_dests: dict[frozenset[int], list[wire.Head]] = {}
    for head in heads:
        dests = destinations(head.topic).union(*(told.get(key, ()) for key in keys_of_topic(head.topic)))
        if dests:
            by_dests.setdefault(dests, []).append(head)
    return [(tuple(sorted(dests)), frame) for dests, group in by_dests.items() for frame in heads_frames(group)]


class HeadsRounds:
    def __init__(self, *, delay: float, window: float, again: float) -> None:
        self.delay = delay
        self.window = window
        self.again = again
        #: the last change of the round under way (None: no first send pending)
        self._changed_at: float | None = None
        #: the first change since HEADS last went (bounds how long a first send waits)
        self._pending_since = 0.0
        #: when the second send is due (None: none pending)
        self._again_at: float | None = None
        #: the round's first change: topics published from ``window`` before it are told
        self._first_change = 0.0

    def changed(self, now: float) -> None:
        """Routes may have moved (a link or hub came or went, costs changed)."""
        if self._changed_at is None and self._again_at is None:
            self._first_change = now
        if self._changed_at is None:
            self._pending_since = now
        self._changed_at = now
        self._again_at = None

    def poll(self, now: float) -> tuple[float | None, float | None]:
        """``(since, next)``: HEADS are due now for topics published at or after ``since`` (None:
        none due), and when to poll again (None: no round under way)."""
        if self._changed_at is not None:
            due = min(self._changed_at + self.delay, self._pending_since + self.again)
            if now < due:
                return None, due
            self._changed_at = None
            self._again_at = now + self.again
            return self._first_change - self.window, self._again_at
        if self._again_at is not None:
            if now < self._again_at:
                return None, self._again_at
            self._again_at = None
            return self._first_change - self.window, None
        return None, None
