"""Detours around a neighbour that stopped answering (hub/core/overlay/routes.py): routes move to a
node-protecting loop-free alternate where one exists, never to a neighbour whose own route comes
back through this hub or crosses the suspect; sets for the suspect itself go round the link to it
where a neighbour's own route to it does not come back; and the suspect stays reachable."""

from __future__ import annotations

import pytest

from hub.core.clock import ManualClock
from hub.core.overlay.config import OverlayConfig
from hub.core.overlay.outbox import Outbox
from hub.core.overlay.routes import DETOUR_TTL
from hub.core.overlay.shortcuts import Shortcuts
from hub.tools.sim.holes import BlackHoles
from hub.tools.sim.world import World
from wire.frames.mesh_v3 import routed_sets_frame

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
    # Frames passed on go round too, but never back to the neighbour they came from (were 2
    # paused, 3 would suspect it too and hand 2's frames back to 1: a loop).
    assert m.split_by_next_hop([2, 4]) == {3: [2, 4]}
    assert m.split_by_next_hop([2, 4], relayed_from=4) == {3: [2, 4]}
    assert m.split_by_next_hop([2, 4], relayed_from=3) == {2: [2], 3: [4]}
    assert m.detoured(2, 3) and not m.detoured(2, 2) and not m.detoured(4, 3)
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


def _black_holed_triangle(config: OverlayConfig) -> tuple[World, int, int]:
    """Three hubs of degree 2 (a triangle); a subscriber's hub has a set from the origin, then
    the link between the two drops everything both ways while both hubs run (the shell's probe
    would notice; the tests call ``suspect`` for it)."""
    world = World(hubs=3, seed=2, config=config)
    for index, hub in enumerate(world.order):
        world.loop.at(0.2 * index, world.start, hub, world.order[:1] if index else [])
    world.loop.run_until(10.0)
    subscriber, origin, _ = world.order
    overlay = world.hubs[subscriber].overlay
    assert overlay is not None and origin in overlay.links
    world.subscribe(subscriber, "orders")
    world.loop.run_until(12.0)
    world.publish(origin, "orders", b"first")
    world.loop.run_until(13.0)
    assert BlackHoles(world).open(subscriber, origin, duration=2.9, suspect_after=100.0)
    return world, subscriber, origin


def test_what_was_asked_through_a_neighbour_is_asked_again_round_it_once_it_is_suspected() -> None:
    """The origin suspects the subscriber's hub and sends round; the set after the hole opens a
    gap, whose REPAIR the subscriber's hub sends into the hole.  Once it suspects the origin in
    turn, it asks again round the link at once, not a ``repair_retry`` later.  (The origin's own
    resend of what the hole swallowed, next test, is off here.)"""
    world, subscriber, origin = _black_holed_triangle(OverlayConfig(degree=2, max_peers=4, repair_retry=5.0,
                                                                    resend_window=0))  # fmt: skip
    sub_overlay, origin_overlay = world.hubs[subscriber].overlay, world.hubs[origin].overlay
    assert sub_overlay is not None and origin_overlay is not None
    world.publish(origin, "orders", b"swallowed")
    world.loop.run_until(13.5)
    origin_overlay.suspect(subscriber, True)  # its probe went unanswered (the shell's call)
    world.pump(origin)
    world.publish(origin, "orders", b"round")
    world.loop.run_until(14.0)
    got = [d.origin_seq for d in world.deliveries if d.hub == subscriber]
    assert got == [1]  # the third waits behind the gap, whose REPAIR went into the hole
    assert sub_overlay.streams.open_gaps() == 1
    sub_overlay.suspect(origin, True)
    world.pump(subscriber)
    world.loop.run_until(14.5)  # well within the 5 s retry
    got = [d.origin_seq for d in world.deliveries if d.hub == subscriber]
    assert got == [1, 2, 3]
    assert sub_overlay.streams.open_gaps() == 0


def test_what_a_suspect_was_sent_lately_goes_again_round_it_with_no_repair() -> None:
    """What the hole swallowed before the suspicion goes round as soon as the origin suspects the
    subscriber's hub (outbox.py): delivered in order with no gap opened and no REPAIR, and the
    subscriber's hub never needs to suspect anything."""
    world, subscriber, origin = _black_holed_triangle(OverlayConfig(degree=2, max_peers=4, repair_retry=5.0))
    sub_overlay, origin_overlay = world.hubs[subscriber].overlay, world.hubs[origin].overlay
    assert sub_overlay is not None and origin_overlay is not None
    world.publish(origin, "orders", b"swallowed")
    world.publish(origin, "orders", b"swallowed too")
    world.loop.run_until(13.5)
    assert [d.origin_seq for d in world.deliveries if d.hub == subscriber] == [1]
    origin_overlay.suspect(subscriber, True)
    world.pump(origin)
    world.publish(origin, "orders", b"round")
    world.loop.run_until(14.0)
    assert [d.origin_seq for d in world.deliveries if d.hub == subscriber] == [1, 2, 3, 4]
    assert origin_overlay.outbox.resent["suspect"] >= 2
    counters = sub_overlay.streams.counters
    assert (counters.gaps_opened, counters.repairs_asked) == (0, 0)


def test_a_relay_sends_a_suspects_part_round_the_cut_link_with_few_hops_left_and_the_rest_as_it_was() -> None:
    """A relay (1) whose link to a destination (2) was cut: 2's part goes round through 3 with
    DETOUR_TTL hops left (three neighbours of a paused hub could hand it round in a circle);
    4's part, in the same frame to the same next hop, keeps its own budget.  Until 2026-11-29 a
    relay sent 2's part into the cut link, where it waited for the link's end."""
    triangle = {(1, 2): 20, (1, 3): 20, (2, 3): 20, (3, 4): 20, (1, 5): 20}
    m = map_of(symmetric(triangle), 1)
    links = {2, 3, 5}
    config = OverlayConfig(shortcuts=0)
    outbox = Outbox(m, links, Shortcuts(config, m, links), ManualClock(), config)
    m.suspect(2, True)
    outbox.relay(1, 20, (2, 4), "ROUTED_SETS", lambda ttl, dests: bytes([ttl, *dests]), came_from=5)
    assert outbox.take() == {3: [bytes([DETOUR_TTL, 2]), bytes([19, 4])]}
    # From 3 itself: not back where it came from, so into the link, to wait there.
    outbox.relay(1, 20, (2, 4), "ROUTED_SETS", lambda ttl, dests: bytes([ttl, *dests]), came_from=3)
    assert outbox.take() == {2: [bytes([19, 2])], 3: [bytes([19, 4])]}


def test_frames_sent_to_a_neighbour_go_again_round_it_once_it_is_suspected_within_the_window() -> None:
    """Only routed frames of the last ``resend_window`` seconds, a relayed one never back where it
    came from, each with the hops it had left; a link that ends takes what was kept with it."""
    triangle = {(1, 2): 20, (1, 3): 20, (2, 3): 20, (3, 4): 20, (1, 5): 20, (2, 6): 20}
    m = map_of(symmetric(triangle), 1)
    links = {2, 3, 5}
    clock = ManualClock()
    config = OverlayConfig(shortcuts=0, resend_window=2.0)
    outbox = Outbox(m, links, Shortcuts(config, m, links), clock, config)
    payload = b"\x00" * 8 + b"sets"
    outbox.send(2, "ROUTED_SETS", routed_sets_frame(30, [2], b"old"))
    clock.advance(1.5)
    outbox.send(2, "ROUTED_SETS", routed_sets_frame(30, [2, 6], payload))  # this hub's own
    outbox.relay(1, 20, (2,), "ROUTED_SETS", lambda t, d: routed_sets_frame(t, d, b"from 3"), came_from=3)
    outbox.send(2, "LINK_STATE", b"\x11not routed")
    outbox.take()
    clock.advance(1.0)  # the first is now 2.5 s old
    m.suspect(2, True)
    assert outbox.send_round(2, 1, "suspect") == 2 and outbox.resent == {"suspect": 1}  # two looked at, one frame sent
    # 2 itself round through 3, DETOUR_TTL left; nothing into the suspect's link again: not 6's
    # part (6 hangs off 2 alone: no way round), nor the relayed frame (not back to 3 it came from).
    assert outbox.take() == {3: [routed_sets_frame(DETOUR_TTL, [2], payload)]}
    assert outbox.send_round(2, 1, "suspect") == 0  # sent round once
    outbox.send(2, "ROUTED_SETS", routed_sets_frame(30, [2], b"again"))
    outbox.forget(2)
    assert outbox.send_round(2, 1, "suspect") == 0


def test_a_link_pruned_here_sends_round_only_what_was_still_queued_for_it() -> None:
    """What went into a link before this hub closed it arrives before the close; what was queued
    and not taken by the shell never goes, so that alone goes round (link state is not routed)."""
    triangle = {(1, 2): 20, (1, 3): 20, (2, 3): 20, (3, 4): 20}
    m = map_of(symmetric(triangle), 1)
    links = {2, 3}
    config = OverlayConfig(shortcuts=0)
    outbox = Outbox(m, links, Shortcuts(config, m, links), ManualClock(), config)
    outbox.send(2, "ROUTED_SETS", routed_sets_frame(30, [2, 4], b"\x00" * 8 + b"taken"))
    outbox.take()
    outbox.send(2, "LINK_STATE", b"\x11not routed")
    outbox.send(2, "ROUTED_SETS", routed_sets_frame(30, [2, 4], b"\x00" * 8 + b"queued"))
    links.discard(2)
    outbox.link_ended(2, 1, pruned=True)  # the map still has the link: round it as round a suspect
    assert outbox.take() == {3: [routed_sets_frame(DETOUR_TTL, [2], b"\x00" * 8 + b"queued"),
                                 routed_sets_frame(30, [4], b"\x00" * 8 + b"queued")]}  # fmt: skip
    assert m.suspected == set() and m.suspicions == 0
    assert outbox.resent == {"link_down": 2}


def test_a_links_end_routes_round_its_hub_only_meanwhile_and_counts_no_suspicion() -> None:
    m = map_of(symmetric({(1, 2): 20, (1, 3): 20, (2, 3): 20, (3, 4): 20}), 1)
    with m.routing_round(2):
        assert m.suspected == {2} and m.next_hop(2) == 3
    assert (m.suspected, m.suspicions, m.next_hop(2)) == (set(), 0, 2)
    m.suspect(2, True)  # suspected before its link ended: it stays so
    with m.routing_round(2):
        pass
    assert (m.suspected, m.suspicions) == ({2}, 1)


def test_a_pruned_link_whose_queue_outgrew_what_was_kept_sends_round_what_was_kept() -> None:
    triangle = {(1, 2): 20, (1, 3): 20, (2, 3): 20, (3, 4): 20}
    m = map_of(symmetric(triangle), 1)
    links = {2, 3}
    frame = routed_sets_frame(30, [4], b"\x00" * 8 + b"queued")
    config = OverlayConfig(shortcuts=0, resend_max_bytes=len(frame) * 2)  # keeps two frames
    outbox = Outbox(m, links, Shortcuts(config, m, links), ManualClock(), config)
    for _ in range(3):
        outbox.send(2, "ROUTED_SETS", frame)
    links.discard(2)
    outbox.link_ended(2, 1, pruned=True)
    assert outbox.take() == {3: [frame, frame]}


def _relay_between(world: World) -> tuple[int, int, int]:
    """An origin, a subscriber's hub that is not its neighbour, and the relay between them."""
    for origin in world.order:
        overlay = world.hubs[origin].overlay
        assert overlay is not None
        for subscriber in world.order:
            relay = overlay.membership.next_hop(subscriber)
            if subscriber != origin and relay is not None and relay != subscriber:
                return origin, subscriber, relay
    raise AssertionError("every hub is a neighbour of every other")


@pytest.mark.parametrize("resend_window", [2.0, 0.0], ids=["sent round at the link's end", "window off: HEADS"])
def test_a_set_lost_in_a_crashed_relay_goes_round_it_when_its_link_ends(resend_window: float) -> None:
    """The relay crashes while a set is on its way to it: the origin sends it again round the
    relay as soon as the link ends, with no gap seen and no REPAIR at the subscriber's hub.
    With no window (as the core was before 2026-11-29, for links) it waits for the origin's
    HEADS, a second after the graph is quiet again, and the REPAIR that follows: here 4 s."""
    config = OverlayConfig(degree=3, max_peers=5, resend_window=resend_window)
    world = World(hubs=8, seed=3, config=config, detect_crash=0.05)
    for index, hub in enumerate(world.order):
        world.loop.at(0.2 * index, world.start, hub, world.order[:1] if index else [])
    world.loop.run_until(20.0)
    origin, subscriber, relay = _relay_between(world)
    world.subscribe(subscriber, "orders")
    world.loop.run_until(22.0)
    world.publish(origin, "orders", b"first")
    world.loop.run_until(23.0)
    world.publish(origin, "orders", b"lost with the relay")
    world.crash(relay)  # before the set arrives: it goes with the link
    world.loop.run_until(23.3)
    got = [d.origin_seq for d in world.deliveries if d.hub == subscriber]
    counters = world.hubs[subscriber].overlay.streams.counters  # type: ignore[union-attr]
    if resend_window:
        assert got == [1, 2]
        assert (counters.gaps_opened, counters.repairs_asked) == (0, 0)
        assert world.hubs[origin].overlay.outbox.resent["link_down"] >= 1  # type: ignore[union-attr]
    else:
        assert got == [1]
        world.loop.run_until(27.5)
        assert [d.origin_seq for d in world.deliveries if d.hub == subscriber] == [1, 2]
        assert (counters.gaps_opened, counters.repairs_asked) == (1, 1)


def test_sets_for_a_suspect_go_round_a_way_as_long_as_through_here_if_that_way_does_not_come_back() -> None:
    """5's only neighbour besides the suspect, 3, reaches 2 in two hops, as long as 3-5-2: not a
    loop-free alternate by the strict test, but 3 breaks the tie by 1 (the lower id), not by 5,
    so 2's sets go round by 3 (before: into the black-holed link until it ended).  With 3's tie
    going to 5 instead, they stay."""
    m = map_of(symmetric({(5, 2): 20, (5, 3): 20, (3, 1): 20, (1, 2): 20}), 5)
    m.suspect(2, True)
    assert m.next_hop(2) == 3
    m = map_of(symmetric({(1, 2): 20, (1, 3): 20, (3, 5): 20, (5, 2): 20}), 1)
    m.suspect(2, True)
    assert m.next_hop(2) == 2  # 3's own way to 2 is back through 1 (1 < 5)
