"""Mesh 3.1 link costs: how a hub times and advertises its links (``costs.py``) and how routes
follow the costs (``membership.py``): fastest routes while every hub advertises costs, hop
routes (as a 3.0 hub computes them) while any does not."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import wire
from hub.core.overlay.costs import READVERTISE_EVERY, WINDOW, LinkCosts, cost_units
from hub.core.overlay.membership import Membership
from hub.core.overlay.routes import edge_cost, shortest


def state(hub: int, links: dict[int, int], *, seq: int = 1, costed: bool = True) -> wire.LinkState:
    neighbors = tuple(sorted(links))
    costs = tuple(links[n] for n in neighbors) if costed and neighbors else ()
    return wire.LinkState(hub_id=hub, boot=1, seq=seq, peer_key=f"k{hub}", neighbors=neighbors, costs=costs)


def map_of(graph: dict[int, dict[int, int]], me: int, *, costless: frozenset[int] = frozenset()) -> Membership:
    m = Membership(me)
    for hub, links in graph.items():
        m.offer(state(hub, links, costed=hub not in costless))
    return m


def symmetric(edges: dict[tuple[int, int], int]) -> dict[int, dict[int, int]]:
    graph: dict[int, dict[int, int]] = {}
    for (a, b), cost in edges.items():
        graph.setdefault(a, {})[b] = cost
        graph.setdefault(b, {})[a] = cost
    return graph


def test_routes_take_the_fastest_path_not_the_fewest_hops() -> None:
    # 1-3 direct at 30 ms; 1-2-3 at 2 + 2 ms: the relay is faster, even at 10 ms per hop.
    graph = symmetric({(1, 3): 300, (1, 2): 20, (2, 3): 20, (1, 4): 100, (4, 3): 100})
    assert map_of(graph, 1).next_hop(3) == 2
    graph = symmetric({(1, 3): 30, (1, 2): 20, (2, 3): 20})
    assert map_of(graph, 1).next_hop(3) == 3  # 3 + 10 ms direct beats 4 + 20 ms relayed


def test_a_link_costs_the_larger_of_its_ends_figures_and_unmeasured_links_are_avoided() -> None:
    graph = symmetric({(1, 3): 20, (1, 2): 20, (2, 3): 20})
    graph[3][1] = 500  # 3 timed the link 1-3 at 50 ms; 1 says 2 ms: 50 ms it is
    assert map_of(graph, 1).next_hop(3) == 2
    graph = symmetric({(1, 3): 0, (1, 2): 20, (2, 3): 20})  # 1-3 not timed by either end yet
    assert map_of(graph, 1).next_hop(3) == 2
    graph = symmetric({(1, 3): 0})
    assert map_of(graph, 1).next_hop(3) == 3  # but it still reaches what only it reaches


def test_a_map_with_a_3_0_hub_routes_by_hops_as_3_0_hubs_do() -> None:
    graph = symmetric({(1, 3): 300, (1, 2): 20, (2, 3): 20, (3, 5): 20})
    assert map_of(graph, 1).next_hop(3) == 2
    assert map_of(graph, 1, costless=frozenset({5})).next_hop(3) == 3


def test_the_same_advertisement_with_costs_is_news_after_a_3_0_relay_dropped_them() -> None:
    m = Membership(1)
    assert m.offer(state(2, {3: 20}, seq=5, costed=False))
    assert m.is_news(2, 5)
    assert m.offer(state(2, {3: 20}, seq=5))
    assert not m.is_news(2, 5)
    assert not m.offer(state(2, {3: 20}, seq=5, costed=False))
    assert m.get(2).costs == (20,)  # type: ignore[union-attr]


def test_link_costs_advertise_the_first_figure_and_only_lasting_large_changes() -> None:
    costs = LinkCosts()
    assert costs.observe(7, 0.020, now=0.0)  # 10 ms one way
    assert costs.of((7, 8)) == (cost_units(0.010), 0)
    assert not costs.observe(7, 0.024, now=1.0)  # jitter
    for t in range(2, 40):
        changed = costs.observe(7, 0.100, now=float(t))  # the link got slow
        if changed:
            break
    assert changed and t >= READVERTISE_EVERY, "a change went out before the hold-down"
    assert costs.of((7,))[0] > cost_units(0.030)
    costs.forget(7)
    assert costs.of((7,)) == (0,)


def test_a_link_costs_its_fastest_recent_round_trip_not_the_queueing_around_it() -> None:
    """A loaded machine: round trips of a 1 ms link (0.5 ms one way) come back at 1-80 ms while
    the two hubs' loops are busy.  The figure stays the link's own; a lasting change shows once
    the window has passed."""
    costs = LinkCosts()
    assert costs.observe(7, 0.001, now=0.0)
    noisy = [0.040, 0.080, 0.001, 0.025, 0.060, 0.002, 0.035]
    assert not any(costs.observe(7, rtt, now=1.0 + i) for i, rtt in enumerate(noisy * 5))
    assert costs.of((7,)) == (cost_units(0.0005),)
    assert costs.status() == {f"{7:016x}": 0.5}
    assert not costs.observe(7, 0.001, now=50.0)
    changed = [costs.observe(7, 0.040, now=100.0 + i) for i in range(WINDOW)]
    assert changed == [False] * (WINDOW - 1) + [True]  # 20 ms one way, once no faster sample is left


def test_a_young_link_advertises_its_falling_figure_at_once() -> None:
    """Links made while a cluster starts meet busy hubs: their first round trips are slow.  While
    a link's window fills, a lower figure goes out without the hold-down (it only converges);
    a rise, or any change once the window is full, waits for it."""
    costs = LinkCosts()
    assert costs.observe(7, 0.030, now=0.0)  # 15 ms: the start was busy
    assert costs.observe(8, 0.020, now=0.5)  # another link's first figure
    assert costs.observe(7, 0.002, now=1.0)  # 1 ms: out at once, though a cost just went out
    assert costs.of((7, 8)) == (cost_units(0.001), cost_units(0.010))
    full = LinkCosts()
    assert full.observe(9, 0.040, now=0.0)
    assert not any(full.observe(9, 0.040, now=float(t)) for t in range(1, WINDOW))  # the window fills
    assert not full.observe(9, 0.002, now=17.0)  # a full window's fall waits for the hold-down
    assert full.observe(9, 0.002, now=31.0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hubs=st.integers(3, 30), costs=st.sampled_from(["random", "equal", "few"]))
def test_hubs_with_the_same_map_route_without_loops(seed: int, hubs: int, costs: str) -> None:
    """Every hub follows its own next hop toward a destination; with one map, each route ends there."""
    rng = random.Random(seed)
    edges: dict[tuple[int, int], int] = {}
    for hub in range(2, hubs + 1):  # a random tree, so all are reachable, plus random extra links
        edges[(rng.randrange(1, hub), hub)] = 0
    for _ in range(hubs):
        a, b = rng.sample(range(1, hubs + 1), 2)
        edges[(min(a, b), max(a, b))] = 0
    pick = {"random": lambda: rng.randrange(0, 800), "equal": lambda: 5, "few": lambda: rng.choice([0, 10, 11])}[costs]
    graph: dict[int, dict[int, int]] = {}
    for a, b in edges:
        graph.setdefault(a, {})[b] = pick()
        graph.setdefault(b, {})[a] = pick()  # the two ends' figures differ
    maps = {hub: map_of(graph, hub) for hub in graph}
    for src in graph:
        for dst in graph:
            at, seen = src, {src}
            while at != dst:
                nxt = maps[at].next_hop(dst)
                assert nxt is not None and nxt in graph[at], f"{at} has no link toward {dst}"
                assert nxt not in seen, f"a loop from {src} to {dst}"
                seen.add(nxt)
                at = nxt


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hubs=st.integers(2, 40))
def test_the_route_search_by_latency_is_the_search_with_the_cost_as_a_function(seed: int, hubs: int) -> None:
    """``shortest`` writes ``edge_cost`` out for speed: the same distances and next hops as the
    search that calls it, on maps with one-sided, unmeasured and missing advertisements."""
    rng = random.Random(seed)
    graph: dict[int, dict[int, int]] = {hub: {} for hub in range(1, hubs + 1)}
    for _ in range(3 * hubs):
        a, b = rng.sample(range(1, hubs + 1), 2)
        graph[a][b] = rng.choice([0, 0, 1, 50, 400, rng.randrange(0, 0xFFFF)])
        if rng.random() < 0.8:  # else one-sided: the edge does not count
            graph[b][a] = rng.choice([0, 50, rng.randrange(0, 0xFFFF)])
    entries = map_of({h: links for h, links in graph.items() if rng.random() < 0.95}, 1).entries
    for source in range(1, hubs + 1):
        assert shortest(entries, source, edge_cost) == shortest(entries, source, lambda a, b: edge_cost(a, b))
