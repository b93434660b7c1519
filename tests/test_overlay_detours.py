"""Detours around a neighbour that stopped answering (hub/core/overlay/routes.py): routes move to a
node-protecting loop-free alternate where one exists, never to a neighbour whose own route comes
back through this hub or crosses the suspect; sets for the suspect itself go round the link to it
where a neighbour's own route to it does not come back; and the suspect stays reachable."""

from __future__ import annotations

import pytest

from hub.core.overlay.config import OverlayConfig
from hub.tools.sim.world import World

from .test_overlay_costs import map_of, symmetric

#: 1 reaches 4 through 2 (faster) or 3.
DIAMOND = {(1, 2): 20, (2, 4): 20, (1, 3): 30, (3, 4): 30}


@pytest.mark.parametrize("by_hops", [False, True], ids=["by latency", "by hops (a 3.0 hub in the map)"])
def test_a_suspected_relay_is_routed_around_and_back_once_it_answers(by_hops: bool) -> None:
    m = map_of(symmetric(DIAMOND), 1, costless=frozenset({4}) if by_hops else frozenset())
    reachable = m.reachable()
    assert m.next_hop(4) == 2
    m.suspect(2, True)
    assert m.next_hop(4) == 3
    # Sets for the suspect itself: 3's way to 2 is no shorter round (3-4-2) than back through 1.
    assert m.next_hop(2) == 2
    assert m.reachable() == reachable  # nobody lost: no hub's view of the overlay changed
    m.suspect(2, False)
    assert m.next_hop(4) == 2


@pytest.mark.parametrize("by_hops", [False, True], ids=["by latency", "by hops (a 3.0 hub in the map)"])
def test_sets_for_a_suspect_go_round_the_link_to_it_through_a_neighbour_that_does_not_come_back(by_hops: bool) -> None:
    # The link 1-2 black-holed, 2 itself fine: 3 reaches 2 directly, so 1 hands 2's sets to 3.
    triangle = {(1, 2): 20, (1, 3): 20, (2, 3): 20, (3, 4): 20}
    m = map_of(symmetric(triangle), 1, costless=frozenset({4}) if by_hops else frozenset())
    assert m.next_hop(2) == 2
    m.suspect(2, True)
    assert m.next_hop(2) == 3 and m.next_hop(4) == 3
    # Sets passed on go to the suspect as they would have (were 2 paused, 3 would suspect it too
    # and hand 2's sets back to 1: a loop); control frames passed on go round, but never back to
    # the neighbour they came from.
    assert m.split_by_next_hop([2, 4]) == {3: [2, 4]}
    assert m.split_by_next_hop([2, 4], relayed_from=4) == {2: [2], 3: [4]}
    assert m.split_by_next_hop([2], relayed_from=4, relay_detours=True) == {3: [2]}
    assert m.split_by_next_hop([2], relayed_from=3, relay_detours=True) == {2: [2]}
    m.suspect(2, False)
    assert m.next_hop(2) == 2


def test_no_detour_through_a_neighbour_whose_route_crosses_the_suspect() -> None:
    # 4 hangs off 2 only: 3's way to 4 is through 2, so waiting on 2 is all there is.
    m = map_of(symmetric({(1, 2): 20, (1, 3): 20, (2, 3): 20, (2, 4): 20}), 1)
    m.suspect(2, True)
    assert m.next_hop(4) == 2


def test_no_detour_through_a_neighbour_whose_route_comes_back_through_this_hub() -> None:
    # 3's fastest way to 4 is back through 1 (3-1-2-4); its own long way (3-5-4) it would not take,
    # so a set handed to 3 would come straight back: a loop.
    far = {(1, 2): 20, (2, 4): 20, (1, 3): 20, (3, 5): 500, (5, 4): 500}
    m = map_of(symmetric(far), 1)
    m.suspect(2, True)
    assert m.next_hop(4) == 2
    # With 3-5-4 fast, 3's own route avoids both 1 and 2: a detour.
    near = {**far, (3, 5): 20, (5, 4): 20}
    m = map_of(symmetric(near), 1)
    m.suspect(2, True)
    assert m.next_hop(4) == 3 and m.next_hop(5) == 3


def test_a_suspect_that_is_not_a_neighbour_changes_nothing() -> None:
    m = map_of(symmetric(DIAMOND), 1)
    m.suspect(4, True)
    assert (m.next_hop(4), m.next_hop(2), m.next_hop(3)) == (2, 2, 3)


def test_a_link_that_goes_or_comes_anew_is_no_longer_suspected() -> None:
    """The core clears a suspicion with the link, however it ends (the shell's close, a surplus
    link the pump prunes) and when a new session of it comes up."""
    world = World(hubs=3, seed=2, config=OverlayConfig(degree=2, max_peers=4))
    for index, hub in enumerate(world.order):
        world.loop.at(0.2 * index, world.start, hub, world.order[:1] if index else [])
    world.loop.run_until(10.0)
    overlay = world.hubs[world.order[0]].overlay
    assert overlay is not None
    neighbour = sorted(overlay.links)[0]
    overlay.suspect(neighbour, True)
    assert overlay.membership.suspected == {neighbour}
    overlay.link_down(neighbour)
    assert overlay.membership.suspected == set()
    overlay.suspect(neighbour, True)
    overlay.link_up(neighbour)
    assert overlay.membership.suspected == set()
