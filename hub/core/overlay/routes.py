"""Routes over the overlay's map: next hops toward every hub, and detours around a neighbour
that stopped answering.

Next hops come from the advertisements membership.py keeps (an edge counts only when both ends
advertise it).  While every hub advertises costs, routes are shortest by latency (Dijkstra; a
link costs the larger of its two ends' figures, plus ``HOP_COST`` per hop); while any hub is of
3.0 they are shortest by hops, breadth-first with ties to the lowest hub id, exactly as 3.0
hubs compute them, so that every hub of a mixed overlay makes the same choices.

Detours.  A hub that is paused (SIGSTOP, a long GC, a swapped-out process) keeps its TCP
connections: what its neighbours send it waits in the kernel, and the link ends only when the
heartbeat bound runs out (3 missed beats of 1 s by default).  Every set routed through it
meanwhile waits for that, then for the repair: 1-3.5 s in the 50-hub test bed (docs/scale.md),
the whole of its p99 above 100 ms.  So a hub that sends over a link and hears nothing back for
``suspect_after`` (a probe left unanswered: hub/core/mesh/overlay_peer.py) *suspects* that
neighbour and routes around it on its own, with nothing flooded: no other hub's routes change,
and no link ends.

Local route changes can loop: a neighbour whose own route goes back through this hub would hand
the set back.  So a destination is moved off the suspect only to a *node-protecting loop-free
alternate* (RFC 5286 section 4.2): a neighbour ``N`` with

    dist(N, D) < dist(N, S) + dist(S, D)      (N's own route to D does not cross S)
    dist(N, D) < dist(N, me) + dist(me, D)    (nor come back through this hub)

in the metric the routes use.  Where no neighbour qualifies the route stays on the suspect: it
waits there as before, and a set never circles.  Sets for the suspect itself cannot be kept off
it, only off the link to it, which is what fails when the link is black-holed and the hub is
fine (the test bed's link failures): they take a *link-protecting* loop-free alternate, the
second condition alone, where one exists, or on a tie (a way round as long as the link, common
where links cost alike) a neighbour whose own first hop toward the suspect is not this hub.  If
it was the hub that stopped, they wait at that neighbour instead of here, and whatever of them
also comes out of this hub's link later is a duplicate its destination drops.  Frames a relay
passes on go round too, sets and control frames alike, but never back to the neighbour they came
from, and with at most DETOUR_TTL hops left (outbox.py): two neighbours of a paused hub, each
the other's way round the link to it, would hand its frames back and forth, and three in a
circle until the hop limit.  (Until 2026-11-29 only the hub a set starts at took it round: a
relay whose link to a destination was cut held every set for it until the link ended, 3 s in the
test bed.) A shortcut to a suspect is not used while it is suspected (outbox.py): the suspect's
sets go by the map.

The frames sent into the suspect's link in the last ``resend_window`` go again round it
(outbox.py).  Older ones, and any a resend missed, are repaired as after any change of route: the
first set of a stream that comes round opens a gap at its destination, which asks the origin at
once (streams.py); a destination whose REPAIR would go through the suspect suspects it in turn
(routed control frames are probed too), and its REPAIR goes round.  The search runs only while
some neighbour is suspected: one shortest-path search from this hub, from each suspect and from
each neighbour, per change of the map.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from typing import Protocol

#: What each hop adds to a route (cost units: 10 ms).  A relay is taken only where it saves more
#: than this: a relay that does not want a set still carries a copy (redundancy), and a route of
#: fewer hops breaks less often.  300 simulated hubs, seed 12, no faults (docs/scale.md): hop cost
#: 1 ms: p99 1.94x a direct send, redundancy 0.227; 10 ms: 1.93x, 0.213; 20 ms: 2.10x, 0.194;
#: routes by hops (3.0): 3.15x, 0.168.
HOP_COST = 100
#: Hops a frame for a suspect has left once a relay sends it round the link to the suspect: its
#: way round is another neighbour of both, or one more hop, in all but sparse overlays; a frame
#: that runs out is repaired like any lost one, and one handed round in a circle stops here.
DETOUR_TTL = 4
#: The cost of a link neither end has measured yet (a link just up): 100 ms.
UNMEASURED_COST = 1000


class Advert(Protocol):
    """A hub's advertisement as the route search reads it: neighbour -> advertised cost (0: none)."""

    def costs(self) -> dict[int, int]: ...


class EdgeCost(Protocol):
    """What one link adds to a route, from its two ends' advertised costs (the routes' metric)."""

    def __call__(self, mine: int, theirs: int, /) -> int: ...


def edge_cost(mine: int, theirs: int) -> int:
    """A link's share of a route by latency: the larger of its ends' figures, plus a hop's cost."""
    return (max(mine, theirs) or UNMEASURED_COST) + HOP_COST


def one_hop(mine: int, theirs: int) -> int:
    return 1  # routes by hops


def linked_neighbours(entries: Mapping[int, Advert], hub: int) -> list[int]:
    """``hub``'s neighbours, by hub id, whose own advertisement names it too (an edge counts only
    when both ends advertise it)."""
    entry = entries.get(hub)
    if entry is None:
        return []
    return [other for other in sorted(entry.costs()) if (far := entries.get(other)) is not None and hub in far.costs()]


def hop_routes(entries: Mapping[int, Advert], me: int) -> dict[int, int]:
    """Next hops of the routes shortest by hops (breadth-first, neighbours by hub id: as 3.0 does)."""
    next_hop: dict[int, int] = {}
    distance = {me: 0}
    queue: deque[int] = deque([me])
    while queue:
        hub = queue.popleft()
        for other in linked_neighbours(entries, hub):
            if other not in distance:
                distance[other] = distance[hub] + 1
                next_hop[other] = other if hub == me else next_hop[hub]
                queue.append(other)
    return next_hop


def reaches_without_link(entries: Mapping[int, Advert], a: int, b: int) -> bool:
    """Would ``a`` still reach ``b`` if the link between them went?  (A search: rare calls only.)"""
    seen = {a}
    queue: deque[int] = deque([a])
    while queue:
        hub = queue.popleft()
        for other in linked_neighbours(entries, hub):
            if other in seen or {hub, other} == {a, b}:
                continue
            if other == b:
                return True
            seen.add(other)
            queue.append(other)
    return False


def shortest(entries: Mapping[int, Advert], source: int, edge: EdgeCost) -> tuple[dict[int, int], dict[int, int]]:
    """Distances and next hops of the shortest routes from ``source`` (Dijkstra; ties go to the
    lower (cost, hub id) settled first, so two hubs with the same map choose alike)."""
    next_hop: dict[int, int] = {}
    best = {source: 0}
    done: set[int] = set()
    heap = [(0, source)]
    pop, push, get = heapq.heappop, heapq.heappush, entries.get
    # edge_cost written out below: a search visits every link twice, and at 1000 hubs the
    # call was a quarter of the search's time (7.8 -> 5.7 ms a search, docs/scale.md).
    by_latency = edge is edge_cost
    while heap:
        cost, hub = pop(heap)
        if hub in done:
            continue
        done.add(hub)
        entry = get(hub)
        if entry is None:
            continue
        via = next_hop.get(hub)
        for other, mine in entry.costs().items():
            if other in done:
                continue
            far = get(other)
            theirs = None if far is None else far.costs().get(hub)
            if theirs is None:  # an edge counts only when both ends advertise it
                continue
            if by_latency:
                total = cost + ((mine if mine > theirs else theirs) or UNMEASURED_COST) + HOP_COST
            else:
                total = cost + edge(mine, theirs)
            if total < best.get(other, total + 1):
                best[other] = total
                next_hop[other] = other if via is None else via
                push(heap, (total, other))
    return best, next_hop


def detour(
    entries: Mapping[int, Advert], me: int, next_hop: dict[int, int], suspected: set[int], edge: EdgeCost
) -> dict[int, int]:
    """``next_hop`` with every destination routed through a suspected neighbour moved to a
    node-protecting loop-free alternate where one exists, and the suspects themselves to a
    link-protecting one (the others left as they were)."""
    own = entries.get(me)
    if own is None:  # no advertisement of its own yet: no links to choose among
        return next_hop
    mine = own.costs()

    def linked(n: int) -> int | None:  # the link's cost, if both ends advertise it
        entry = entries.get(n)
        theirs = None if entry is None else entry.costs().get(me)
        return None if theirs is None else edge(mine[n], theirs)

    suspects = {s for s in suspected if s in mine and linked(s) is not None}
    through = {d: s for d, s in next_hop.items() if s in suspects}
    if not through:
        return next_hop
    neighbours = {n: cost for n in mine if n not in suspects and (cost := linked(n)) is not None}
    if not neighbours:
        return next_hop
    trees = {hub: shortest(entries, hub, edge) for hub in (me, *suspects, *neighbours)}
    from_me = trees[me][0]
    detoured = dict(next_hop)
    for dest, suspect in through.items():
        from_suspect = trees[suspect][0]
        best: tuple[int, int] | None = None
        for n, cost in neighbours.items():
            from_n, hops_n = trees[n]
            there = from_n.get(dest)
            if there is None:
                continue
            never = there + 1  # a hub a search does not reach is no shorter way round
            # The suspect itself: only the link to it can be kept off (the loop-free test alone).
            protects = dest == suspect or there < from_n.get(suspect, never) + from_suspect.get(dest, never)
            loop_free = there < from_n.get(me, never) + from_me.get(dest, never)
            if dest == suspect and not loop_free:
                # A tie (a way round as long as through here: two hops on a loopback cluster,
                # where links cost alike): N's own route, with the ties broken as N breaks
                # them, may still not come back here.  If its first hop is not this hub, take it
                # (a relay that meets it again sends it on with DETOUR_TTL hops left: outbox.py).
                loop_free = hops_n.get(dest) not in (me, None)
            if protects and loop_free and (best is None or (cost + there, n) < best):
                best = (cost + there, n)
        if best is not None:
            detoured[dest] = best[1]
    return detoured
