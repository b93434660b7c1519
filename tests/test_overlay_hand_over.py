"""The switch from the v2 full mesh to the overlay, without I/O (hub/core/mesh/switch.py).

When a hub switches, its v2 links give way to overlay links.  What a v2 window held
unacknowledged would never be resent (the v2 resume needs a v2 session), so the window's
position is handed over to the overlay, which tells the peer starts no later and the peer
repairs the rest from the origin's log.  These tests pin each part: when a hub switches, which
v2 links it invites and retires, what a window says it owed, how long a hand-over lowers
starts, and (in the simulator) that the sets a v2 link owed do reach the subscriber's hub.
"""

from __future__ import annotations

import pytest

import wire
from hub.core.mesh.switch import OverlaySwitch
from hub.core.mesh.window import ForwardWindow, WindowEntry
from hub.core.overlay.config import OverlayConfig
from hub.core.overlay.joins import HAND_OVER_KEEP, HANDED_OVER, Joins
from hub.core.overlay.streams import Streams
from hub.tools.sim.world import World

TOPIC = "orders.eu"
ORIGIN = 0x0A


def test_a_hub_switches_at_its_size_or_at_its_link_bound_and_never_with_0() -> None:
    switch = OverlaySwitch(from_hubs=10, max_peers=64)
    assert not switch.due(8)  # 9 hubs known
    assert switch.due(9)
    assert OverlaySwitch(from_hubs=10, max_peers=3).due(3)  # a v2 hub never holds more than max_peers
    assert not OverlaySwitch(from_hubs=0, max_peers=3).due(50)
    assert OverlaySwitch(from_hubs=1, max_peers=64).due(0)
    switch.switched = True
    assert not switch.due(20)  # once


def test_a_switched_hub_invites_each_v2_peer_once_per_session_and_retires_those_the_overlay_reaches() -> None:
    switch = OverlaySwitch(from_hubs=4, max_peers=64)
    assert switch.to_invite(["a", "b"]) == []  # not switched: no v3 dials
    switch.switched = True
    assert switch.to_invite(["a", "b"]) == ["a", "b"]
    assert switch.to_invite(["a", "b", "c"]) == ["c"]
    reachable = {1}.__contains__
    assert switch.to_retire({"a": 1, "b": 2}, reachable) == ["a"]
    assert switch.to_retire({"d": 1}, reachable) == []  # never invited: invited first
    switch.v2_session_ended("a")
    assert switch.to_invite(["a"]) == ["a"]  # a new v2 session is invited again


def _entry(first: int, count: int = 10) -> WindowEntry:
    return WindowEntry(first_seq=first, last_seq=first + count - 1, count=count, encoded=b"x" * 100, headers=b"")


def test_a_window_owes_from_its_first_unacknowledged_set_or_its_first_evicted_one() -> None:
    window = ForwardWindow(max_sets=3, max_bytes=1 << 20)
    assert window.owed_after() is None
    for first in (1, 11, 21):
        window.push(_entry(first))
    window.take_unsent(1 << 20, 2)  # 1 and 11 sent, 21 not yet
    assert window.owed_after() == 0
    window.ack(10)
    assert window.owed_after() == 10
    window.push(_entry(31))
    window.push(_entry(41))  # evicts 11 (sent, unacknowledged): still owed
    assert window.owed_after() == 10
    window.ack(40)
    assert window.owed_after() == 40  # acknowledged past the evicted set
    window.ack(50)
    assert window.owed_after() is None


def test_a_hand_over_lowers_starts_for_a_while_and_names_those_told_already() -> None:
    saved: list[dict] = []
    joins = Joins(lambda starts: saved.append(dict(starts)))
    assert joins.tell(7, "orders", 100, now=0.0) == 100
    assert joins.handed_over(7, 40, now=1.0) == [("orders", 40)]  # told 100 already: tell again
    assert joins.tell(7, "orders", 100, now=2.0) == 40
    assert joins.tell(7, "audit", 120, now=2.0) == 40  # a key it joins meanwhile starts there too
    assert joins.tell(8, "audit", 120, now=2.0) == 120  # other hubs: unchanged
    late = 1.0 + HAND_OVER_KEEP + 1.0
    assert joins.tell(7, "metrics", 130, now=late) == 130  # later joins ask for no history
    assert saved[-1][(7, "audit")] == 40


def test_a_hand_over_outlives_a_restart_of_the_hub_that_owes() -> None:
    """The floor is saved with the starts: a hub that crashed within HAND_OVER_KEEP of a hand-over
    and is then asked for a key the owed hub joins still starts it at what the v2 link owed."""
    saved: list[dict] = [{}]
    joins = Joins(lambda starts: saved.append(dict(starts)))
    joins.handed_over(7, 40, now=1.0)
    assert saved[-1] == {(7, HANDED_OVER): 40}
    restarted = Joins(lambda starts: saved.append(dict(starts)), saved[-1], now=500.0)
    assert restarted.hubs() == set() and restarted.of_hub(7) == []  # a floor is no start told
    assert restarted.tell(7, "orders", 130, now=501.0) == 40
    assert restarted.tell(7, "audit", 130, now=500.0 + HAND_OVER_KEEP + 1.0) == 130
    assert saved[-1] == {(7, "orders"): 40, (7, "audit"): 130}  # the floor expired: gone from the file
    again = Joins(lambda starts: saved.append(dict(starts)), {(7, HANDED_OVER): 40, (8, HANDED_OVER): 9})
    again.forget_hubs([8])
    assert saved[-1] == {(7, HANDED_OVER): 40}


def _owed_world(config: OverlayConfig, stored: list[bytes]) -> tuple[World, int, int]:
    """Four simulated hubs at 15 s: the publisher's hub stored ``stored`` (sequences 1..n) before
    its overlay started, and the subscriber's hub stored its sets up to 2 (through a v2 link)."""
    world = World(hubs=4, seed=1, config=config)
    subscriber, publisher = world.order[1], world.order[2]
    own = world.hubs[publisher]
    for seq, data in enumerate(stored, 1):
        own.store.append_own(seq, 1_000 * seq, wire.MessageSet.build((TOPIC,), [(b"", data)]))
    own.next_seq = len(stored) + 1
    world.hubs[subscriber].store.positions[(publisher, TOPIC)] = 2
    for index, hub in enumerate(world.order):
        world.loop.at(0.2 * index, world.start, hub, world.order[:1] if index else [])
    world.loop.run_until(15.0)
    return world, subscriber, publisher


@pytest.mark.parametrize("how", ["at a v3 session's start", "at its first JOINED", "never"])
def test_the_sets_a_v2_link_owed_reach_the_subscriber_through_the_overlay(how: str) -> None:
    """The publisher's hub stored sets 1-5 before its overlay started, and its v2 link delivered
    1-2 to the subscriber's hub (3-5 unacknowledged).  The overlay sends set 6 before the
    subscriber's hub runs it (v2 carried 6 too, also unacknowledged), so when that hub joins, its
    start is 6.  Handed over (when a v3 session replaced the v2 link, or when the overlay first
    tells the subscriber's hub its start and closes the v2 link), the start told is 2 and the hub
    repairs 3-6 from the publisher's log, then gets the overlay's own sets, once each and in
    order.  Without the hand-over, 3-6 never arrive: what the hand-over is for."""
    stored = [b"v2 %d" % n for n in range(1, 6)]
    world, subscriber, publisher = _owed_world(OverlayConfig(degree=2, max_peers=4), stored)
    overlay = world.hubs[publisher].overlay
    assert overlay is not None
    assert world.publish(publisher, TOPIC, b"overlay, nobody's yet") == 6
    world.loop.run_until(18.0)
    v2_links = {subscriber: 2}  # the v2 link to the subscriber's hub: live, owing sets after 2
    if how == "at a v3 session's start":
        overlay.hand_over(subscriber, v2_links.pop(subscriber))
    elif how == "at its first JOINED":
        overlay.v2_gives_way = lambda hub: v2_links.pop(hub, None)
    world.subscribe(subscriber, TOPIC)
    world.loop.run_until(21.0)
    seqs = [world.publish(publisher, TOPIC, b"overlay") for _ in range(3)]
    world.loop.run_until(60.0)
    got = [d.origin_seq for d in world.deliveries if d.hub == subscriber and d.topic == TOPIC]
    owed = [] if how == "never" else [3, 4, 5, 6]
    assert got == [*owed, *seqs]
    assert not v2_links or how == "never"  # the link gave way (once)


def test_a_stream_starts_past_what_a_v2_link_stored_while_it_waited_for_its_start() -> None:
    """A set reaches the subscriber's hub through the overlay before the origin's JOINED, which
    holds nothing of the origin yet: the set waits for its stream's start.  Meanwhile the v2 link
    (until the hand-over closes it) stores 1-6.  When the JOINED says start 0, the stream starts
    at 6: nothing the v2 link stored is asked for or delivered again, and the set 7 goes."""
    stored: dict[tuple[int, str], int] = {}
    s = Streams(stored_position=lambda origin, topic: stored.get((origin, topic), 0), save_since=lambda since: None,
                hold_max_bytes=1 << 20)  # fmt: skip
    messages = wire.MessageSet.build([TOPIC], [(b"", b"m7")])
    s.receive(ORIGIN, (wire.RoutedSet(origin_seq=7, timestamp=0, messages=messages, prevs=(6,)),), TOPIC.__eq__, 1.0)
    assert s.take_ready() == [] and s.take_starts() == [(ORIGIN, TOPIC)]
    stored[(ORIGIN, TOPIC)] = 6  # what the v2 link stored
    s.joined(ORIGIN, "orders", 0, now=2.0)
    assert [f.origin_seq for _, f in s.take_ready()] == [7]
    assert s.take_asks() == [] and s.open_gaps() == 0


def test_a_long_owed_range_is_repaired_from_the_log_in_parts_one_after_another() -> None:
    """The same hand-over with 3-61 owed and answers bounded to about four sets: the subscriber's
    hub gets the range in parts, asking on as each arrives, so all of it is there within a few
    seconds (waiting for the next retry each time, which doubles up to 8 s, would take more than
    a minute), once each and in order."""
    payload = b"x" * 100
    per_set = len(wire.MessageSet.build((TOPIC,), [(b"", payload)]).records)
    config = OverlayConfig(degree=2, max_peers=4, repair_answer_max_bytes=4 * per_set)
    world, subscriber, publisher = _owed_world(config, [payload] * 60)
    overlay = world.hubs[publisher].overlay
    assert overlay is not None
    assert world.publish(publisher, TOPIC, payload) == 61
    world.loop.run_until(18.0)
    overlay.hand_over(subscriber, 2)
    world.subscribe(subscriber, TOPIC)
    world.loop.run_until(60.0)
    got = [(d.origin_seq, d.at) for d in world.deliveries if d.hub == subscriber and d.topic == TOPIC]
    assert [seq for seq, _ in got] == list(range(3, 62))
    assert overlay.origin.repairs_served >= 59 // 4  # in parts
    assert max(at for _, at in got) < 18.0 + 5.0
