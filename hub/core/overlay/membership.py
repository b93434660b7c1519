"""Who is in the overlay and how they are linked: link state, shortest paths, rendezvous owners.

Every hub floods a small advertisement (``wire.LinkState``): its hub id, when it
booted, a sequence that only grows, where to dial it, and the hub ids of its live
overlay links.  Each hub keeps the newest advertisement of every hub, and from
them the graph: an edge counts only when both ends list each other, so a crashed
hub drops out as soon as its neighbours re-advertise without it, with no timeout
and no refresh traffic while nothing changes.  From the graph come the next hop
toward every hub (routes.py: by measured latency, which mesh v3.1 advertisements carry
per link, or by hops beside a 3.0 hub) and the owners of a rendezvous key: its
successors on a hash ring over the reachable hubs.  Two hubs with the same
advertisements make the same choices.

An advertisement of a hub that stayed unreachable for ``FORGET_AFTER`` seconds is
dropped; until then its addresses still serve to dial it (a partition heals by
dialling across it).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import wire

from .routes import detour, edge_cost, hop_routes, one_hop, shortest

#: Seconds an unreachable hub's advertisement is kept (to dial it, to recognise its return).
FORGET_AFTER = 300.0
#: Hubs that own a rendezvous key: the first is its primary, the next keeps a copy so the
#: key's interest survives the primary's crash.
RENDEZVOUS_OWNERS = 2


def ring_position(value: bytes) -> int:
    return int.from_bytes(hashlib.sha256(value).digest()[:8], "big")


@functools.lru_cache(maxsize=1 << 16)
def hub_ring_position(hub_id: int) -> int:
    # Cached: the ring is rebuilt whenever the graph changes, from every reachable hub.
    return ring_position(b"hub\0" + hub_id.to_bytes(8, "big"))


def key_ring_position(key: str) -> int:
    return ring_position(b"key\0" + key.encode())


@dataclass(slots=True)
class _Entry:
    state: wire.LinkState
    #: When the graph last reached this hub (monotonic seconds); None while it does.
    unreachable_since: float | None = None
    #: The advertisement as a frame, made once: every new link is sent the whole map.
    frame: bytes | None = None
    #: neighbour -> advertised cost (0: not measured), made once, for the route search
    cost_of: dict[int, int] | None = None

    def costs(self) -> dict[int, int]:
        if self.cost_of is None:
            state = self.state
            self.cost_of = dict(zip(state.neighbors, state.costs or (0,) * len(state.neighbors), strict=True))
        return self.cost_of

    def encoded(self) -> bytes:
        if self.frame is None:
            self.frame = self.state.encode()
        return self.frame


@dataclass
class Membership:
    """The newest advertisement of every hub, and what follows from them."""

    self_id: int
    entries: dict[int, _Entry] = field(default_factory=dict)
    #: Bumped whenever the graph may have changed; cached routes compare it.
    generation: int = 0
    #: True while the only changes since the routes were computed came from other hubs'
    #: advertisements: the routes are then recomputed by :meth:`settle`, not by the next lookup
    #: (OSPF's SPF hold-down: a flood of advertisements costs one search, not one per frame).
    #: A change of this hub's own links is used at once.
    deferred: bool = False
    _routes_at: int = -1
    _next_hop: dict[int, int] = field(default_factory=dict)
    #: each hub's distance by the routes' metric (cost units; empty while routes go by hops)
    _distance: dict[int, int] = field(default_factory=dict)
    #: the next hops to suspects before any detour: what frames relayed to a suspect take
    _suspect_hop: dict[int, int] = field(default_factory=dict)
    _ring_at: int = -1
    _ring: list[tuple[int, int]] = field(default_factory=list)
    #: times the ring's members changed (a hub joined or left the reachable set)
    _ring_changes: int = 0
    #: Whose advertisements this hub takes, by peer key (``--mesh-allow``; None: anyone's).  A
    #: hub it would not link to stays out of its map: never routed to or through, never an
    #: owner, and what it originates is dropped (:meth:`knows`).
    admits: Callable[[str], bool] | None = None
    refused_adverts: int = 0
    #: hubs a reloaded allow-list took out of the map, reported gone by the next settle
    _unadmitted: list[int] = field(default_factory=list)
    #: neighbours that stopped answering (:meth:`suspect`), and how many times one did
    suspected: set[int] = field(default_factory=set)
    suspicions: int = 0

    # -- advertisements -------------------------------------------------------------

    def offer(self, state: wire.LinkState, frame: bytes | None = None) -> bool:
        """An advertisement received (or our own; ``frame``: it encoded, if at hand); True if it
        is news (keep it, flood it on)."""
        known = self.entries.get(state.hub_id)
        if known is not None and not _newer(state, known.state):
            return False
        if self.admits is not None and state.hub_id != self.self_id and not self.admits(state.peer_key):
            self.refused_adverts += 1
            return False
        self.entries[state.hub_id] = _Entry(state, known.unreachable_since if known else None, frame)
        if known is None or known.state.neighbors != state.neighbors or known.state.costs != state.costs:
            if self._routes_at == self.generation or self.deferred:
                self.deferred = state.hub_id != self.self_id
            self.generation += 1
        return True

    def knows(self, hub_id: int) -> bool:
        """May a frame ``hub_id`` originated be acted on?  With an allow-list, only a hub whose
        advertisement was taken (a relay may carry a hub this one refuses); without, any."""
        return self.admits is None or hub_id in self.entries

    def drop_unadmitted(self) -> bool:
        """The allow-list was reloaded: hubs it no longer admits leave the map (and are reported
        gone by the next :meth:`note_reachability`).  True if any did."""
        admits = self.admits
        if admits is None:
            return False
        gone = [h for h, e in self.entries.items() if h != self.self_id and not admits(e.state.peer_key)]
        for hub in gone:
            del self.entries[hub]
        self._unadmitted += gone
        if gone:
            self.generation += 1
        return bool(gone)

    def is_news(self, hub_id: int, seq: int) -> bool:
        """Could an advertisement of ``hub_id`` numbered ``seq`` be news?  (Read before decoding it.)"""
        known = self.entries.get(hub_id)
        return known is None or known.state.seq < seq or (known.state.seq == seq and _strippable(known.state))

    def settle(self) -> None:
        """Use every advertisement received so far for routing (the hold-down is over)."""
        self.deferred = False
        self._routes()

    def get(self, hub_id: int) -> wire.LinkState | None:
        entry = self.entries.get(hub_id)
        return None if entry is None else entry.state

    def states(self) -> list[wire.LinkState]:
        return [e.state for e in self.entries.values()]

    def frames(self) -> list[bytes]:
        """Every advertisement, as frames (the map a new neighbour or a refused dialler gets)."""
        return [e.encoded() for e in self.entries.values()]

    def frame_of(self, hub_id: int) -> bytes:
        return self.entries[hub_id].encoded()

    def boot_of(self, hub_id: int) -> int | None:
        entry = self.entries.get(hub_id)
        return None if entry is None else entry.state.boot

    def unreachable_for(self, hub_id: int, now: float) -> float:
        """Seconds the graph has not reached a known hub (0 while it does, or for an unknown hub)."""
        entry = self.entries.get(hub_id)
        if entry is None or self.is_reachable(hub_id):
            return 0.0
        since = entry.unreachable_since
        return 0.0 if since is None else now - since

    def note_reachability(self, now: float) -> tuple[list[int], list[int], list[int]]:
        """Stamp hubs the graph stopped reaching; forget long-gone ones.  Returns (lost, found, gone)."""
        self._routes()
        reach = self._next_hop
        lost: list[int] = []
        found: list[int] = []
        gone: list[int] = []
        for hub, entry in self.entries.items():
            if hub == self.self_id:
                continue
            if hub in reach:
                if entry.unreachable_since is not None:
                    entry.unreachable_since = None
                    found.append(hub)
            elif entry.unreachable_since is None:
                entry.unreachable_since = now
                lost.append(hub)
            elif now - entry.unreachable_since > FORGET_AFTER:
                gone.append(hub)
        for hub in gone:
            del self.entries[hub]
        if gone:
            self.generation += 1
        gone += self._unadmitted
        self._unadmitted = []
        return lost, found, gone

    # -- the graph ----------------------------------------------------------------------

    def linked(self, a: int, b: int) -> bool:
        """An edge counts only when both ends advertise it."""
        ea, eb = self.entries.get(a), self.entries.get(b)
        return ea is not None and eb is not None and b in ea.state.neighbors and a in eb.state.neighbors

    def _routes(self) -> None:
        if self._routes_at == self.generation or self.deferred:
            return
        self._routes_at = self.generation
        by_cost = all(e.state.costs or not e.state.neighbors for e in self.entries.values())
        entries, me = self.entries, self.self_id
        if by_cost:
            self._distance, next_hop = shortest(entries, me, edge_cost)
        else:
            self._distance, next_hop = {}, hop_routes(entries, me)
        self._suspect_hop = {s: next_hop[s] for s in self.suspected if s in next_hop}
        if self.suspected:  # around neighbours that stopped answering, where that cannot loop
            next_hop = detour(entries, me, next_hop, self.suspected, edge_cost if by_cost else one_hop)
        self._next_hop = next_hop

    def suspect(self, hub: int, suspected: bool) -> None:
        """A neighbour stopped answering (or answered again): routes go around it while they can
        (detours.py); nothing is advertised."""
        if self._mark(hub, suspected) and suspected:
            self.suspicions += 1

    @contextlib.contextmanager
    def routing_round(self, hub: int) -> Iterator[None]:
        """Routes as round a suspect ``hub`` for the frames sent meanwhile, not counted as a
        suspicion (a link's end: outbox.py).  A hub suspected already stays so."""
        if not self._mark(hub, True):
            yield
            return
        try:
            yield
        finally:
            self._mark(hub, False)

    def _mark(self, hub: int, suspected: bool) -> bool:
        """Route round ``hub`` (or not) from now on; True if that changed anything."""
        if suspected == (hub in self.suspected):
            return False
        self.suspected.symmetric_difference_update((hub,))
        self.generation += 1
        self.deferred = False  # this hub's own view: used at once
        return True

    def _missing(self, hub_id: int) -> bool:
        """Not routed to: if routes are held down, settle them and look again (a hub that just
        joined must be reachable at once, or the frames for it would be dropped)."""
        if hub_id in self._next_hop:
            return False
        if self.deferred:
            self.settle()
        return hub_id not in self._next_hop

    def next_hop(self, hub_id: int) -> int | None:
        """The neighbour to send to for ``hub_id`` (None: unreachable, or ourselves)."""
        self._routes()
        return None if self._missing(hub_id) else self._next_hop[hub_id]

    def distance(self, hub_id: int) -> int:
        """How far the routes take a frame for ``hub_id`` (cost units), 0 if not known."""
        self._routes()
        return self._distance.get(hub_id, 0)

    def reachable(self) -> list[int]:
        """Hubs the graph reaches from here (ourselves excluded)."""
        self._routes()
        return sorted(self._next_hop)

    def unreachable(self) -> list[int]:
        """Hubs in the map that the graph does not reach now."""
        self._routes()
        return sorted(h for h in self.entries if h != self.self_id and h not in self._next_hop)

    def reachable_count(self) -> int:
        self._routes()
        return len(self._next_hop)

    def is_reachable(self, hub_id: int) -> bool:
        self._routes()
        return not self._missing(hub_id)

    def split_by_next_hop(self, destinations: Iterable[int], *,
                          relayed_from: int | None = None) -> dict[int, list[int]]:  # fmt: skip
        """``destinations`` grouped by the neighbour each is reached through; unreachable ones left out.

        ``relayed_from``: a frame this hub passes on, from that neighbour.  To a suspect it takes
        the detour round the link (routes.py) unless that leads back where it came from: two
        neighbours of a paused hub, each the other's way round, would hand it back and forth
        (what a detour still meets is bounded by DETOUR_TTL, see :meth:`detoured`)."""
        self._routes()
        hops = self._next_hop
        groups: dict[int, list[int]] = {}
        for dest in destinations:
            hop = hops.get(dest)
            if hop is None:
                if self._missing(dest):
                    continue
                hops = self._next_hop  # settled anew by _missing
                hop = hops[dest]
            if relayed_from is not None and dest in self._suspect_hop and hop == relayed_from:
                hop = self._suspect_hop[dest]
            groups.setdefault(hop, []).append(dest)
        return groups

    def detoured(self, dest: int, hop: int) -> bool:
        """Does a frame for ``dest`` sent to ``hop`` go round the link to a suspect (``dest`` itself)?"""
        return dest in self._suspect_hop and hop != self._suspect_hop[dest]

    # -- rendezvous -------------------------------------------------------------------

    def owners(self, key: str) -> tuple[int, ...]:
        """The hubs that own ``key``: its successors on the ring of reachable hubs (us included)."""
        ring = self._current_ring()
        start = bisect.bisect_left(ring, (key_ring_position(key), 0))
        count = min(RENDEZVOUS_OWNERS, len(ring))
        return tuple(ring[(start + i) % len(ring)][1] for i in range(count))

    def _current_ring(self) -> list[tuple[int, int]]:
        self._routes()
        if self._ring_at != self._routes_at:  # the ring follows the routes (held down with them)
            self._ring_at = self._routes_at
            members = [self.self_id, *self.reachable()]
            ring = sorted((hub_ring_position(h), h) for h in members)
            if ring != self._ring:
                self._ring_changes += 1
            self._ring = ring
        return self._ring

    def ring_changes(self) -> int:
        """How many times the ring's members changed (so, possibly, any key's owners)."""
        self._current_ring()
        return self._ring_changes


def _strippable(state: wire.LinkState) -> bool:
    """A 3.1 advertisement that may have lost its costs crossing a 3.0 hub (which cannot read them)."""
    return not state.costs and bool(state.neighbors)


def _newer(state: wire.LinkState, known: wire.LinkState) -> bool:
    """News: a later advertisement, or the same one with the costs a 3.0 relay had left out."""
    return state.seq > known.seq or (state.seq == known.seq and bool(state.costs) and _strippable(known))


def rendezvous_key(pattern: str) -> str:
    """The rendezvous key of a topic or pattern: its first token, or ``*`` when that is a wildcard.

    Every topic a pattern matches shares the pattern's first token, so the publisher of a
    topic finds every pattern that could match it under two keys: the topic's first token
    and ``*``.
    """
    first = pattern.split(".", 1)[0]
    return "*" if first in ("*", ">") else first


def key_patterns(key: str) -> tuple[str, ...]:
    """Patterns that match every topic a publisher watches ``key`` for (:func:`keys_of_topic`)."""
    return (">",) if key == "*" else (key, key + ".>")


def keys_of_topic(topic: str) -> tuple[str, str]:
    """The two keys a publisher of ``topic`` watches."""
    return (rendezvous_key(topic), "*")
