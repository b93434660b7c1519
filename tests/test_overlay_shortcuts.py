"""Shortcuts (hub/core/overlay/shortcuts.py): a hub that sends sets of a topic few hubs want to a
hub the overlay reaches only through relays opens a direct link to it, advertised to nobody.

The routing core in the simulator: eight hubs of degree 2 form a sparse graph, so some pairs
are several hops apart; the figures are the world's own counts (payload copies
that crossed any link, what each hub stored).
"""

from __future__ import annotations

import itertools

import pytest

from hub.core.overlay.config import OverlayConfig
from hub.tools.sim.report import connections
from hub.tools.sim.world import World

#: degree 2 and room for one shortcut
CONFIG = OverlayConfig(degree=2, max_peers=5, shortcuts=1, shortcut_idle=5.0)


def sparse(hubs: int = 8, config: OverlayConfig = CONFIG, seed: int = 5) -> World:
    world = World(hubs=hubs, seed=seed, config=config)
    for i, hub in enumerate(world.order):
        world.loop.at(0.3 * i, world.start, hub, world.order[:i][-1:])
    world.loop.run_until(0.3 * hubs + 15.0)
    return world


def far_pair(world: World) -> tuple[int, int]:
    """Two hubs at least two hops apart (the first such pair, in start order)."""
    for a, b in itertools.permutations(world.order, 2):
        overlay = world.hubs[a].overlay
        assert overlay is not None
        hop = overlay.membership.split_by_next_hop([b])
        if b not in hop and hop:
            return a, b
    raise AssertionError("the overlay formed a full mesh: no pair is two hops apart")


def publish(world: World, hub: int, topic: str, count: int, gap: float = 0.1) -> list[int]:
    start = world.clock.now
    seqs: list[int] = []
    for n in range(count):
        world.loop.at(start + gap * n, lambda: seqs.append(world.publish(hub, topic, b"m") or 0))
    world.loop.run_until(start + gap * count + 0.01)
    return seqs


def stored(world: World, hub: int, origin: int, topic: str) -> list[int]:
    return [d.origin_seq for d in world.deliveries if d.hub == hub and d.origin == origin and d.topic == topic]


def shortcuts_of(world: World, hub: int) -> set[int]:
    overlay = world.hubs[hub].overlay
    assert overlay is not None
    return overlay.shortcuts.live


def shortcut_in_use() -> tuple[World, int, int, list[int]]:
    """A sparse world where hub x publishes to hub y, two or more hops away, until a shortcut
    between them is up: the world, x, y and the sequences published so far."""
    world = sparse()
    x, y = far_pair(world)
    world.subscribe(y, "pair.t")
    world.loop.run_until(world.clock.now + 5.0)
    first = publish(world, x, "pair.t", 30)
    world.loop.run_until(world.clock.now + 3.0)
    assert y in shortcuts_of(world, x) and x in shortcuts_of(world, y)
    return world, x, y, first


def test_a_hub_sending_to_a_far_hub_opens_a_shortcut_and_later_sets_cross_no_relay() -> None:
    world, x, y, first = shortcut_in_use()
    copies = world.payload_copies
    later = publish(world, x, "pair.t", 30)
    world.loop.run_until(world.clock.now + 3.0)
    assert world.payload_copies - copies == 30  # one copy per set: no relay on the way
    assert stored(world, y, x, "pair.t") == first + later  # every set once, in order
    # Advertised to nobody: no hub's map has the edge, so no other hub's routes changed.
    for hub in world.up_hubs():
        assert hub.overlay is not None
        state = hub.overlay.membership.get(x)
        assert state is None or y not in state.neighbors


def test_sets_for_a_suspected_hub_leave_its_shortcut_for_the_map_until_it_answers() -> None:
    # A black-holed shortcut swallows what is sent into it until the heartbeat bound ends it:
    # while its far end answers no probe, its sets go by the overlay's routes instead.
    world, x, y, first = shortcut_in_use()
    overlay = world.hubs[x].overlay
    assert overlay is not None
    overlay.suspect(y, True)
    copies = world.payload_copies
    around = publish(world, x, "pair.t", 10)
    world.loop.run_until(world.clock.now + 3.0)
    assert world.payload_copies - copies >= 20  # two hops or more each: relays carried them
    assert y in shortcuts_of(world, x)  # the shortcut stays up, unused
    overlay.suspect(y, False)
    copies = world.payload_copies
    back = publish(world, x, "pair.t", 10)
    world.loop.run_until(world.clock.now + 3.0)
    assert world.payload_copies - copies == 10
    assert stored(world, y, x, "pair.t") == first + around + back  # every set once, in order


def test_an_idle_shortcut_closes_and_the_overlay_carries_sets_again() -> None:
    world, x, y, first = shortcut_in_use()
    world.loop.run_until(world.clock.now + CONFIG.shortcut_idle + 5.0)
    assert not shortcuts_of(world, x) and not shortcuts_of(world, y)
    overlay = world.hubs[x].overlay
    assert overlay is not None and overlay.shortcuts.idle_closed == 1
    later = publish(world, x, "pair.t", 3)
    world.loop.run_until(world.clock.now + 3.0)
    assert stored(world, y, x, "pair.t") == first + later


def test_a_shortcut_that_breaks_mid_stream_loses_nothing() -> None:
    world, x, y, seqs = shortcut_in_use()
    # The network between the two fails while sets cross: what was in flight on it is lost.
    world.loop.at(world.clock.now + 0.35, world.cut, x, y, 8.0)
    seqs += publish(world, x, "pair.t", 60)
    world.loop.run_until(world.clock.now + 20.0)
    assert stored(world, y, x, "pair.t") == seqs


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(OverlayConfig(degree=2, max_peers=3), id="no slot above degree + 1"),
        pytest.param(OverlayConfig(degree=2, max_peers=5, shortcuts=0), id="shortcuts 0"),
        pytest.param(OverlayConfig(degree=2, max_peers=5, shortcut_fanout=1), id="topic wanted by 2 > fanout"),
    ],
)
def test_no_shortcut_without_a_slot_or_for_a_topic_many_hubs_want(config: OverlayConfig) -> None:
    world = sparse(config=config)
    x, y = far_pair(world)
    other = next(h for h in world.order if h not in (x, y))
    world.subscribe(y, "pair.t")
    world.subscribe(other, "pair.t")
    world.loop.run_until(world.clock.now + 5.0)
    seqs = publish(world, x, "pair.t", 30)
    world.loop.run_until(world.clock.now + 3.0)
    assert world.shortcuts_made == 0
    assert stored(world, y, x, "pair.t") == seqs


def test_a_hub_at_its_degree_fills_every_slot_but_one_with_shortcuts() -> None:
    """A hub holding ``degree`` links that sends to more far hubs than it has slots opens
    ``max_peers - degree - 1`` shortcuts: one slot stays free, for a joining hub's link."""
    config = OverlayConfig(degree=3, max_peers=7, shortcut_idle=60.0)
    world = sparse(hubs=14, config=config, seed=3)
    x = next(h for h in world.order if len(world.hubs[h].overlay.links) == config.degree)  # type: ignore[union-attr]
    links = world.hubs[x].overlay.links  # type: ignore[union-attr]
    far = [h for h in world.order if h != x and h not in links][:6]
    for hub in far:
        world.subscribe(hub, "team.t")
    world.loop.run_until(world.clock.now + 5.0)
    publish(world, x, "team.t", 40)
    world.loop.run_until(world.clock.now + 3.0)
    assert len(links) == config.degree
    assert len(shortcuts_of(world, x)) == config.max_peers - config.degree - 1 == 3
    assert len(links) + len(shortcuts_of(world, x)) == config.max_peers - 1


def test_a_hub_with_one_slot_opens_it_to_the_farther_of_two_hubs_it_sends_as_much() -> None:
    """The same sets go to a hub two hops away and to one further: the one slot goes where it
    saves more relays (sets times the route's length), not to the lower hub id."""
    world = sparse()

    def distance(a: int, b: int) -> int:
        overlay = world.hubs[a].overlay
        assert overlay is not None
        return overlay.membership.distance(b)

    x, near, far = next(
        (x, y, z) for x, y, z in itertools.permutations(world.order, 3)
        if y < z and y not in shortcuts_of(world, x) and 0 < distance(x, y) < distance(x, z)
        and y not in world.hubs[x].overlay.links  # type: ignore[union-attr]
    )  # fmt: skip
    for hub in (near, far):
        world.subscribe(hub, "two.t")
    world.loop.run_until(world.clock.now + 5.0)
    publish(world, x, "two.t", 30)
    world.loop.run_until(world.clock.now + 3.0)
    assert shortcuts_of(world, x) == {far}


def test_links_and_shortcuts_together_never_pass_max_peers() -> None:
    """Thirty hubs, each publishing to two others chosen at random: every hub wants more
    shortcuts than it has slots, and hubs keep joining while they open."""
    config = OverlayConfig(degree=3, max_peers=7, shortcut_idle=5.0)
    world = World(hubs=30, seed=11, config=config)
    rng = world.rng
    for i, hub in enumerate(world.order):
        world.loop.at(0.2 * i, world.start, hub, world.order[:i][-2:])
    topics = []
    for i, hub in enumerate(world.order):
        topic = f"pair{i}"
        for sub in rng.sample([h for h in world.order if h != hub], 2):
            world.loop.at(0.2 * i + 0.1, world.subscribe, sub, topic)
        topics.append((hub, topic))
    world.loop.run_until(15.0)

    def publish_one(hub: int, topic: str) -> None:
        world.publish(hub, topic, b"m")

    peaks: list[int] = []
    for step in range(400):
        at = 15.0 + 0.1 * step
        for hub, topic in topics[step % 30 :: 30]:
            world.loop.at(at, publish_one, hub, topic)
        world.loop.run_until(at + 0.05)
        peaks.append(max(connections(world), default=0))
    world.loop.run_until(world.clock.now + 20.0)
    assert world.shortcuts_made > 10  # they were wanted and made
    assert max(peaks) <= config.max_peers
    expected = sum(2 for _ in range(400))  # each publish goes to its two subscribers
    assert len(world.deliveries) == expected
