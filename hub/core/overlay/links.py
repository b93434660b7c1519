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

A link that breaks keeps its place for a while (kept_places.py).

Random links are as slow as the average pair of hubs.  So a hub whose links are all up
and whose graph is whole now and then *tries* one more link, to a random full hub (X-BOT's
optimisation, without its four-hub swap).  Neither end advertises the trial -- a hub
advertises a link dialled to it past its degree only once the dialler advertises it --
so no route uses it, no hub counts it, and a trial that is closed cost no advertisement.
Once the dialler has timed it, it replaces the costliest link if that costs
``TRIAL_MARGIN`` times more and the graph reaches its far end without it, and is closed
otherwise.  Each rejected trial doubles the wait before the next, so a settled overlay
stops trying; hubs whose links all cost less than ``TRIAL_MIN_COST`` (one site) never try.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import wire

from .config import OverlayConfig
from .kept_places import KeptPlaces
from .membership import Membership
from .routes import reaches_without_link

#: A known hub the graph has not reached for this long is on the other side of a split (a hub
#: that joins is unreachable for the second or so its neighbours take to advertise it).
SPLIT_AFTER = 3.0
#: A dial not reported back within this many seconds counts as failed.
DIAL_TIMEOUT = 30.0
#: A hub short of links looks for hubs to dial at most this often: the search reads the whole
#: membership, and running it on every event was most of the simulator's time at 50 hubs.
DIAL_SCAN_INTERVAL = 0.2
#: Trial links (see the module docstring): none while the costliest link costs less than this
#: (cost units of 100 µs: 5 ms, so hubs of one site, or one loaded machine, never try), and a
#: trial replaces a link only if that link costs this many times more (jitter in the two
#: figures must not swap links back and forth).
TRIAL_MIN_COST = 50
TRIAL_MARGIN = 1.5
#: Hubs of fewer links never try: the hub whose link a trial replaces is left one short until it
#: dials again, and with a handful of links two such losses at once could cut it off.
TRIAL_MIN_DEGREE = 4
#: A trial link not timed within this many seconds is closed.
TRIAL_WAIT = 10.0
#: Rejected trials in a row double the wait (``link_trials`` seconds) up to this many times.
TRIAL_BACKOFF_MAX = 5
#: A kept trial changes 3-4 hubs' links, each change flooding every hub, so past TRIAL_HUBS hubs
#: waits grow with the map (x hubs / TRIAL_HUBS): the cluster tries no more links a second than
#: TRIAL_HUBS hubs do, each hub hears no more of it, and links improve more slowly (scale.md).
TRIAL_HUBS = 100


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
    #: this hub's own figures for the links it dialled (costs.py): how a trial is judged
    measured: Callable[[int], int] = lambda hub: 0
    #: the hub of the trial link being dialled or timed (see the module docstring), and since when
    trial: int | None = None
    _trial_at: float = 0.0
    #: when the wait for the next trial began, and its length in ``link_trials`` x hubs / TRIAL_HUBS
    _trial_since: float | None = None
    _trial_factor: float = 1.0
    _trials_rejected: int = 0
    trials_kept: int = 0
    trials_closed: int = 0
    #: links dialled to this hub past its degree that the dialler does not advertise yet
    unconfirmed: set[int] = field(default_factory=set)
    #: places of broken links kept for their hubs (kept_places.py)
    places: KeptPlaces = field(init=False)

    def __post_init__(self) -> None:
        self.places = KeptPlaces(self.config, self.membership)

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
            if reaches_without_link(membership.entries, hub, me):
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
        if not self.wants_dials():
            return self._trial_dial(now)
        if now < self._next_scan:
            return []
        held = len(self.links) + len(self.dialing)
        kept = self.places.kept(now, held, self.links)
        want = config.degree - held - len(kept)
        # Short of links: look again soon.  Enough links but a hub out of reach (a split, or a
        # crashed hub not forgotten yet): only a healing dial may follow, which can wait.
        # Places kept for broken links: look again when the first is given up.
        self._next_scan = now + (DIAL_SCAN_INTERVAL if want > 0 else config.redial_interval)
        if kept:
            self._next_scan = min(self._next_scan, min(kept) + config.refill_after)
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
        """When :meth:`dials` (or :meth:`surplus`, for a trial) should be asked again (None: never)."""
        if self.trial is not None:
            return self._trial_at + TRIAL_WAIT
        if len(self.dialing) >= self.config.max_dialing:
            return None
        return self._next_scan if self.wants_dials() else self._trial_due()

    # -- trial links ---------------------------------------------------------------------

    def advertised(self) -> set[int]:
        """The links this hub advertises: all but its trial not judged yet, and another hub's
        link past this hub's degree (maybe that hub's trial) until that hub advertises it."""
        if self.trial is None and not self.unconfirmed:
            return self.links
        return self.links - self.unconfirmed - {self.trial}

    def advertises(self, hub: int) -> bool:
        """Does this hub's last advertisement name its link to ``hub``?"""
        own = self.membership.get(self.membership.self_id)
        return own is not None and hub in own.neighbors

    def confirmed(self, state: wire.LinkState) -> bool:
        """A hub's new advertisement: True if it names a link this hub was waiting to advertise."""
        if state.hub_id in self.unconfirmed and self.membership.self_id in state.neighbors:
            self.unconfirmed.discard(state.hub_id)
            return True
        return False

    def link_cost(self, hub: int) -> int:
        """A link's cost as routes see it: the larger of both ends' figures (0: not timed)."""
        far = self.membership.entries.get(hub)
        theirs = 0 if far is None else far.costs().get(self.membership.self_id, 0)
        return max(self.measured(hub), theirs)

    def _trial_dial(self, now: float) -> list[wire.LinkState]:
        config = self.config
        if config.link_trials <= 0 or config.degree < TRIAL_MIN_DEGREE or self.trial is not None or self.dialing or \
                len(self.links) != config.degree:  # fmt: skip
            return []
        if self._trial_since is None:  # whole and full just now: the first trial waits a while too
            self._trial_since, self._trial_factor = now, self.rng.uniform(0.5, 1.5)
        if (due := self._trial_due()) is not None and now < due:
            return []
        doubling = 2 ** min(self._trials_rejected, TRIAL_BACKOFF_MAX)
        self._trial_since, self._trial_factor = now, doubling * self.rng.uniform(0.5, 1.5)
        if max(map(self.link_cost, self.links), default=0) < TRIAL_MIN_COST:
            self._trials_rejected += 1  # nothing to gain (one site): look less and less often
            return []
        membership = self.membership
        me = membership.self_id
        candidates = [
            hub for hub, entry in membership.entries.items()
            if hub != me and hub not in self.links and hub not in self.shortcuts and entry.state.addrs
            # Full, so it takes the link as its degree + 1 (may_accept) and loses nothing when the
            # trial is closed; a hub short of links is for those short of links to dial.
            and len(entry.state.neighbors) == config.degree
            and now - self.last_dial.get(hub, -1e18) >= config.redial_interval
        ]  # fmt: skip
        if not candidates:
            self._trials_rejected += 1
            return []
        hub = self.rng.choice(sorted(candidates))
        self.trial, self._trial_at = hub, now
        self.dialing[hub] = self.last_dial[hub] = now
        state = membership.get(hub)
        return [] if state is None else [state]

    def _trial_due(self) -> float | None:
        """When the next trial is due, by the map's size now (it may have grown meanwhile)."""
        if self._trial_since is None:
            return None
        spacing = self.config.link_trials * max(1.0, len(self.membership.entries) / TRIAL_HUBS)
        return self._trial_since + spacing * self._trial_factor

    def _judge_trial(self, now: float) -> int | None:
        """The link to close for the trial (the trial's or the one it replaces), once it is timed."""
        trial = self.trial
        assert trial is not None
        if trial not in self.links:
            if trial in self.dialing and now - self._trial_at < TRIAL_WAIT:
                return None  # still dialling
            self.trial = None  # the dial failed or the far end closed it: a rejected trial
            self._trials_rejected += 1
            return None
        cost = self.measured(trial)
        if not cost and now - self._trial_at < TRIAL_WAIT:
            return None
        self.trial = None
        me = self.membership.self_id
        # Only a link whose far end has all its links: it is left one short, not two.
        timed = [(self.link_cost(h), h) for h in self.links
                 if h != trial and self.link_cost(h) and len(self._neighbors(h)) >= self.config.degree]
        worst_cost, worst = max(timed, default=(0, None))
        # (A link that went meanwhile is refilled the usual way: the trial was judged against it.)
        if cost and worst is not None and worst_cost > TRIAL_MARGIN * cost and len(self.links) > self.config.degree \
                and reaches_without_link(self.membership.entries, worst, me):  # fmt: skip
            self.trials_kept += 1
            self._trials_rejected = 0
            return worst
        self.trials_closed += 1
        self._trials_rejected += 1
        return trial

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
        if self.trial is not None:
            return self._judge_trial(now)  # nothing else is pruned meanwhile: the trial is the surplus
        degree = self.config.degree
        if len(self.links) <= degree or now - self._pruned_at < self.config.redial_interval:
            return None
        me = self.membership.self_id
        # Only links both ends advertise count: another hub's trial link to this one is not one.
        edges = [hub for hub in self.links if self.membership.linked(hub, me)]
        if len(edges) <= degree:
            return None
        crowded = []
        for hub in edges:
            state = self.membership.get(hub)
            if state is not None and len(state.neighbors) > degree:
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

    def link_up(self, hub: int, *, inbound: bool = False) -> bool:
        """A link came up; True if it is new."""
        self.dialing.pop(hub, None)
        if hub in self.links:
            return False
        state = self.membership.get(hub)
        if inbound and len(self.links) >= self.config.degree and (state is None or self.membership.self_id not in
                                                                   state.neighbors):  # fmt: skip
            self.unconfirmed.add(hub)  # advertised once its dialler does (advertised())
        if len(self.links) >= self.config.max_peers:
            self._evict = self.spare_link()  # a link past the cap, taken to heal a split
        self.links.add(hub)
        return True

    def link_down(self, hub: int, now: float, *, broke: bool = False) -> bool:
        """``broke``: it ended without this hub closing it (its place is kept: module docstring)."""
        self.dialing.pop(hub, None)
        unconfirmed = hub in self.unconfirmed
        self.unconfirmed.discard(hub)
        if hub not in self.links:
            return False
        self.links.discard(hub)
        self.last_dial[hub] = now
        if broke and hub != self.trial and not unconfirmed:
            self.places.broke(hub, now)
        return True
