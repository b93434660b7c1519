"""Which hubs to link to: a bounded degree, filled from the link-state database.

A hub dials until it holds ``degree`` links (inbound ones count), choosing at
random among the hubs it knows, and never holds more than ``max_peers``.  Random
choices make the overlay a random graph: connected with high probability, with a
diameter that grows with log N.  Two rules keep it whole:

* a hub the graph cannot reach is preferred when choosing, so a partition heals
  as soon as any hub on either side has room;
* when the graph is split and every hub is full, the two lowest hub ids of each
  side dial across anyway, and a full hub dialled by a hub it cannot reach takes the
  link by closing one it can spare (a neighbour still reachable without it), so even
  an overlay where ``degree`` equals ``max_peers`` heals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import wire

from .config import OverlayConfig
from .membership import Membership

#: A known hub the graph has not reached for this long is on the other side of a split (a hub
#: that joins is unreachable for the second or so its neighbours take to advertise it).
SPLIT_AFTER = 3.0
#: A dial not reported back within this many seconds counts as failed.
DIAL_TIMEOUT = 30.0
#: A hub short of links looks for hubs to dial at most this often: the search reads the whole
#: membership, and running it on every event was most of the simulator's time at 50 hubs.
DIAL_SCAN_INTERVAL = 0.2


@dataclass
class LinkPolicy:
    config: OverlayConfig
    membership: Membership
    rng: random.Random
    links: set[int] = field(default_factory=set)
    #: live shortcuts (shortcuts.py): the shell holds one session per hub, so none is dialled as a link
    shortcuts: set[int] = field(default_factory=set)
    #: hub -> when its dial started
    dialing: dict[int, float] = field(default_factory=dict)
    #: hub -> when it was last dialled (a failed or ended link is not redialled sooner)
    last_dial: dict[int, float] = field(default_factory=dict)
    _pruned_at: float = -1e18
    #: the earliest time of the next search for hubs to dial (DIAL_SCAN_INTERVAL)
    _next_scan: float = -1e18

    #: a link to close at once: this hub took one past ``max_peers`` to heal a split
    _evict: int | None = None

    def may_accept(self, hub: int, now: float) -> bool:
        """One link past ``degree`` is taken (a hub joining between two linked hubs needs it; the
        pair then drops their own link), more only from a hub the graph does not reach.
        Accepting any hub up to ``max_peers`` let every hub that advertised room be dialled by
        many joining hubs at once: 300 hubs formed at a mean degree of 11-12."""
        config = self.config
        held = len(self.links)
        if hub in self.links or held < min(config.max_peers, config.degree + 1):
            return True
        membership = self.membership
        if membership.is_reachable(hub):
            return False
        if held < config.max_peers:
            # Past degree + 1 only across a split; a hub that joins (unknown, or its links not
            # advertised yet) is unreachable too, for the second or so that takes.
            return membership.unreachable_for(hub, now) >= SPLIT_AFTER
        # Full (always so when degree == max_peers): a joining hub or the other side of a split
        # gets in, in place of a link this hub can spare.
        return self.spare_link() is not None

    def spare_link(self) -> int | None:
        """A neighbour the graph still reaches without its link to this hub (the best-linked one)."""
        membership = self.membership
        me = membership.self_id
        ranked = sorted(self.links, key=lambda h: -len(s.neighbors) if (s := membership.get(h)) else 0)
        for hub in ranked:
            if membership.reaches_without_link(hub, me):
                return hub
        return None

    def dials(self, now: float) -> list[wire.LinkState]:
        """Hubs to dial now (their advertisements say where)."""
        config = self.config
        for hub in [h for h, t in self.dialing.items() if now - t > DIAL_TIMEOUT]:
            del self.dialing[hub]  # the shell never said: count it as failed
        room = config.max_dialing - len(self.dialing)
        if room <= 0:
            return []
        if not self.wants_dials() or now < self._next_scan:
            return []
        held = len(self.links) + len(self.dialing)
        want = config.degree - held
        # Short of links: look again soon.  Enough links but a hub out of reach (a split, or a
        # crashed hub not forgotten yet): only a healing dial may follow, which can wait.
        self._next_scan = now + (DIAL_SCAN_INTERVAL if want > 0 else config.redial_interval)
        membership = self.membership
        me = membership.self_id

        def eligible(hub: int) -> bool:
            if hub == me or hub in self.links or hub in self.dialing or hub in self.shortcuts:
                return False
            state = membership.get(hub)
            if state is None or not state.addrs:
                return False
            return now - self.last_dial.get(hub, -1e18) >= config.redial_interval

        known = [h for h in membership.entries if eligible(h)]
        if not known:
            return []
        reachable = set(membership.reachable())
        unreachable = [h for h in known if h not in reachable]
        chosen: list[int] = []
        if want > 0:
            chosen = self._fill(known, unreachable, min(want, room))
        elif unreachable and self._heals(reachable) and (held < config.max_peers or self.spare_link() is not None):
            chosen = [self.rng.choice(unreachable)]
        for hub in chosen:
            self.dialing[hub] = now
            self.last_dial[hub] = now
        return [s for s in (membership.get(h) for h in chosen) if s is not None]

    def _fill(self, known: list[int], unreachable: list[int], count: int) -> list[int]:
        """``count`` hubs to dial for links this hub lacks.

        First hubs the graph does not reach (a split heals), then hubs short of links
        themselves, then both ends of links that exist: a hub that joins between two linked
        hubs lets them drop their own link afterwards (:meth:`surplus`), so every hub it joined
        keeps its degree (the edge splitting of Law and Siu's random expanders, and what
        HyParView's join does by random walk).  Dialling random full hubs instead raised the
        degree of each hub a newcomer chose, and 300 hubs formed at a mean degree of 11-12
        whose floods cost accordingly.  Random among equals: the overlay stays a random graph.
        """
        membership = self.membership
        degree = self.config.degree
        rng = self.rng
        candidates = set(known)
        chosen: list[int] = []

        def take(hub: int) -> None:
            chosen.append(hub)
            candidates.discard(hub)

        order = list(unreachable)
        rng.shuffle(order)
        for hub in order[:count]:
            take(hub)
        roomy = [h for h in known if h in candidates and len(self._neighbors(h)) < degree]
        rng.shuffle(roomy)
        for hub in roomy[: count - len(chosen)]:
            take(hub)
        # A neighbour holding more links than it keeps: join one of its links, so it can drop it.
        for hub in sorted(self.links):
            if len(chosen) >= count:
                break
            near = self._neighbors(hub)
            if len(near) > degree:
                ends = sorted(h for h in near if h in candidates and membership.linked(hub, h))
                if ends:
                    take(rng.choice(ends))
        pool = [h for h in known if h in candidates]
        rng.shuffle(pool)
        for hub in pool:
            if len(chosen) + 2 > count:
                break
            if hub not in candidates:
                continue
            ends = sorted(h for h in self._neighbors(hub) if h in candidates and membership.linked(hub, h))
            if ends:
                take(hub)
                take(rng.choice(ends))
        for hub in pool:
            if len(chosen) >= count:
                break
            if hub in candidates:
                take(hub)
        return chosen

    def _neighbors(self, hub: int) -> tuple[int, ...]:
        state = self.membership.get(hub)
        return () if state is None else state.neighbors

    def wants_dials(self) -> bool:
        """Short of links, or some known hub unreachable?  (Cheap: this runs on every event.)"""
        membership = self.membership
        if len(self.links) + len(self.dialing) < self.config.degree:
            return True
        return membership.reachable_count() < len(membership.entries) - 1

    def next_scan(self) -> float | None:
        """When :meth:`dials` should be asked again (None: nothing to look for)."""
        return self._next_scan if self.wants_dials() and len(self.dialing) < self.config.max_dialing else None

    def surplus(self, now: float) -> int | None:
        """A link to drop: both ends hold more than ``degree`` links (simultaneous dials overshoot).

        Dropping it leaves both with at least ``degree`` links, so the overlay stays as
        connected as a graph of that degree, and its floods stay as cheap as that degree makes
        them.  At most one link is dropped per ``redial_interval``.
        """
        if self._evict is not None:
            evict, self._evict = self._evict, None
            if evict in self.links:
                return evict
        degree = self.config.degree
        if len(self.links) <= degree or now - self._pruned_at < self.config.redial_interval:
            return None
        crowded = []
        me = self.membership.self_id
        for hub in self.links:
            state = self.membership.get(hub)
            if state is not None and len(state.neighbors) > degree and self.membership.linked(hub, me):
                # A link of a triangle first (a hub joined between us, see _fill): we stay two
                # hops apart through the hub that joined.
                shared = not self.links.isdisjoint(state.neighbors)
                crowded.append((shared, len(state.neighbors), hub))
        if not crowded:
            return None
        self._pruned_at = now
        return max(crowded)[2]

    def _heals(self, reachable: set[int]) -> bool:
        """Is this hub one of the two lowest ids of its side of a split?"""
        me = self.membership.self_id
        return sum(1 for h in reachable if h < me) < 2

    def dial_ended(self, hub: int) -> None:
        self.dialing.pop(hub, None)

    def link_up(self, hub: int) -> bool:
        """A link came up; True if it is new."""
        self.dialing.pop(hub, None)
        if hub in self.links:
            return False
        if len(self.links) >= self.config.max_peers:
            self._evict = self.spare_link()  # a link past the cap, taken to heal a split
        self.links.add(hub)
        return True

    def link_down(self, hub: int, now: float) -> bool:
        self.dialing.pop(hub, None)
        if hub not in self.links:
            return False
        self.links.discard(hub)
        self.last_dial[hub] = now
        return True
