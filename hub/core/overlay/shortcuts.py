"""Shortcuts: direct links to the hubs this hub sends to that the overlay reaches only through relays.

A topic few hubs want goes to each of them along a shortest path of the overlay, a random graph
whose paths grow with log N (4-5 hops at 1000 hubs): every relay on the way gets a copy it does
not want (redundancy) and adds its link's latency.  So a hub that sends sets of such topics to a
hub that is not its neighbour opens a *shortcut* to it, in the link slots ``max_peers`` leaves
above ``degree`` -- the direct one-hop send of the issue's design, with the overlay's routes as
the fallback.  A shortcut is a link like any other to the two hubs at its ends (frames for the
far end go over it, both ways, control frames too), but it is advertised to nobody: it changes
no other hub's routes, floods nothing and starts no HEADS round anywhere.

The choice is made every REVIEW seconds from what the last interval sent: the hubs with the
most sets of topics wanted by at most ``shortcut_fanout`` hubs, each count weighed by the length
of the route the shortcut would replace (a farther hub's copies cross more relays), while slots
are free.  The hub that opened a shortcut closes it once nothing crossed it either way for
``shortcut_idle`` seconds; an overlay link that needs a slot takes the least recently used
shortcut's.

Order needs nothing new: sets that take the shortcut may overtake sets still on the longer path,
and the receiver's hold-back puts them back in order (streams.py), as after any change of route.
A shortcut that breaks loses what was in flight on it, found as after any break (HEADS).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import wire

from .config import OverlayConfig
from .membership import Membership

#: Seconds between two choices of shortcuts (and of the idle ones to close).
REVIEW = 2.0
#: A hub that refused a shortcut (full) or could not be reached is not dialled again sooner.
RETRY_AFTER = 30.0
#: A dial not reported back within this many seconds counts as failed.
DIAL_TIMEOUT = 30.0


@dataclass
class Shortcuts:
    config: OverlayConfig
    membership: Membership
    #: the overlay's links (the link policy's set): a neighbour needs no shortcut
    links: set[int]
    #: live shortcuts (shared with the outbox, which sends over them)
    live: set[int] = field(default_factory=set)
    #: the ones this hub opened (it closes them when idle)
    opened: set[int] = field(default_factory=set)
    #: shortcuts a frame crossed since the last review (the outbox and the core add to it)
    touched: set[int] = field(default_factory=set)
    #: hub -> when a frame last crossed its shortcut (or when it came up)
    used: dict[int, float] = field(default_factory=dict)
    #: hub -> sets sent to it since the last review, of topics few hubs want, not over a link
    sent: Counter[int] = field(default_factory=Counter)
    dialing: dict[int, float] = field(default_factory=dict)
    last_dial: dict[int, float] = field(default_factory=dict)
    #: shortcuts to close, first first (idle ones, or room for an overlay link)
    closing: list[int] = field(default_factory=list)
    _closed_here: set[int] = field(default_factory=set)
    _to_dial: list[int] = field(default_factory=list)
    _review_at: float | None = None
    #: shortcuts opened (either end) and closed for idleness, for status
    made: int = 0
    idle_closed: int = 0

    @property
    def slots(self) -> int:
        # A hub at its degree keeps one connection free, for a joining hub's link (degree + 1);
        # a link past that (a split healing) takes a shortcut's place (make_room).
        config = self.config
        return max(0, min(config.shortcuts, config.max_peers - config.degree - 1))

    # -- what the sender tells --------------------------------------------------------------

    def count(self, dests: frozenset[int], now: float) -> None:
        """A set of this hub's went to ``dests``: the hubs among them not linked are candidates."""
        if len(dests) > self.config.shortcut_fanout or not self.slots:
            return
        links = self.links
        sent = self.sent
        for hub in dests:
            if hub not in links:
                sent[hub] += 1
        if self._review_at is None:
            self._review_at = now + REVIEW

    # -- the policy -------------------------------------------------------------------------

    def review(self, now: float) -> float | None:
        """Choose shortcuts to open and idle ones to close, when due; returns the next review."""
        if self._review_at is None or now < self._review_at:
            return self._review_at
        for hub in self.touched:
            if hub in self.live:
                self.used[hub] = now
        self.touched.clear()
        idle = self.config.shortcut_idle
        for hub in sorted(self.opened):
            if now - self.used.get(hub, now) >= idle and hub not in self.closing:
                self.closing.append(hub)
                self.idle_closed += 1
        for hub in [h for h, t in self.dialing.items() if now - t > DIAL_TIMEOUT]:
            del self.dialing[hub]
        room = min(
            self.slots - len(self.live) - len(self.dialing),
            # links past degree + 1 (a split healing) leave no room: one slot stays free
            self.config.max_peers - 1 - len(self.links) - len(self.live) - len(self.dialing),
        )
        if room > 0 and self.sent:
            membership = self.membership
            # Where a shortcut saves the most: sets sent times the length of the route it replaces
            # (a far hub's copies cross more relays, and wait longer).
            distance = membership.distance
            for hub, _ in sorted(self.sent.items(), key=lambda item: (-item[1] * max(1, distance(item[0])), item[0])):
                if room <= 0:
                    break
                if hub in self.links or hub in self.live or hub in self.dialing:
                    continue
                if now - self.last_dial.get(hub, -1e18) < RETRY_AFTER or not membership.is_reachable(hub):
                    continue
                state = membership.get(hub)
                if state is None or not state.addrs:
                    continue
                self._to_dial.append(hub)
                self.dialing[hub] = self.last_dial[hub] = now
                room -= 1
        self.sent.clear()
        busy = self.live or self.dialing
        self._review_at = now + REVIEW if busy else None
        return self._review_at

    def dials(self) -> list[wire.LinkState]:
        """Hubs to open a shortcut to now (their advertisements say where)."""
        chosen, self._to_dial = self._to_dial, []
        return [s for s in (self.membership.get(h) for h in chosen) if s is not None]

    def may_accept(self, hub: int) -> bool:
        """A shortcut from ``hub``: taken while this hub has a slot and one stays free for a link."""
        if hub in self.links or hub in self.live:
            return False
        held = len(self.live) + len(self.dialing) - (hub in self.dialing)
        return held < self.slots and len(self.links) + held < self.config.max_peers - 1

    def make_room(self) -> None:
        """An overlay link came up: if links and shortcuts together pass ``max_peers``, the least
        recently used shortcuts close (overlay links keep the cluster whole; shortcuts are only
        faster)."""
        keep = self.live - set(self.closing) - self._closed_here
        over = len(self.links) + len(keep) - self.config.max_peers
        if over > 0:
            self.closing.extend(sorted(keep, key=lambda h: (self.used.get(h, 0.0), h))[:over])

    def to_close(self) -> int | None:
        """A shortcut this hub closes now (the shell closes it and reports it down)."""
        while self.closing:
            hub = self.closing.pop(0)
            if hub in self.live:
                self._closed_here.add(hub)
                return hub
        return None

    # -- what the shell reports -------------------------------------------------------------

    def up(self, hub: int, now: float) -> None:
        if self.dialing.pop(hub, None) is not None:
            self.opened.add(hub)  # this hub dialled it: it closes it when idle
        self.live.add(hub)
        self.used[hub] = now
        self.made += 1
        if self._review_at is None:
            self._review_at = now + REVIEW

    def down(self, hub: int) -> bool:
        """The shortcut to ``hub`` ended; True if this hub did not close it (frames may be lost)."""
        self.live.discard(hub)
        self.opened.discard(hub)
        self.used.pop(hub, None)
        self.touched.discard(hub)
        if hub in self._closed_here:
            self._closed_here.discard(hub)
            return False
        return True

    def dial_ended(self, hub: int) -> None:
        self.dialing.pop(hub, None)

    def status(self) -> dict[str, object]:
        return {
            "live": len(self.live),
            "opened_here": len(self.opened),
            "dialing": len(self.dialing),
            "slots": self.slots,
            "made": self.made,
            "idle_closed": self.idle_closed,
        }
