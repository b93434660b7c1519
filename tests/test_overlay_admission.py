"""``--mesh-allow`` on the overlay: a hub the allow-list does not name stays out, even through a
third hub that admits it.

On the v2 full mesh a refused peer has no link, so nothing of it arrives.  On the overlay,
frames are relayed: hub A, refused by X but admitted by B, would otherwise reach X through B --
its advertisements in X's map (routes through it, A a rendezvous owner for X), its sets stored
at X, its interest served.  That is what a rolling revocation looks like (A taken off X's list
first) and what two teams' differing lists look like.  So a hub leaves out of its map every
hub its allow-list does not name, and drops whatever such a hub originates (counted).

First the routing core in the simulator (a network cut keeps A and X from linking directly,
as X's admission would), then real hubs.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

import sdk
from hub.core.overlay.config import OverlayConfig
from hub.tools.sim.world import World
from tests.support.cluster import HUB_POLL, Cluster, expect_nothing, next_data, publish_until_linked
from tests.support.waiting import await_until

from .test_mesh_admission_hubs import identities

CONFIG = OverlayConfig(degree=2, max_peers=2)
HEARTBEAT = 0.5


def three_hubs(*, refuse_at_start: bool) -> tuple[World, int, int, int]:
    """X and A each linked to B only; X refuses A from the start, or admits everyone."""
    world = World(hubs=3, seed=7, config=CONFIG)
    x, b, a = world.order
    world.cut(x, a, 1e9)  # never a direct link: X's admission would refuse it

    def start_x() -> None:
        world.start(x, [b])
        if refuse_at_start:
            world.hubs[x].overlay.membership.admits = lambda key: key != world.hubs[a].overlay.peer_key

    world.loop.at(0.0, world.start, b, [])
    world.loop.at(0.2, start_x)
    world.loop.at(0.4, world.start, a, [b])
    for hub in (x, b):
        world.subscribe(hub, "t")
    world.subscribe(a, "u")
    world.loop.run_until(15.0)
    return world, x, b, a


def delivered(world: World, hub: int, origin: int, topic: str) -> int:
    return sum(1 for d in world.deliveries if d.hub == hub and d.origin == origin and d.topic == topic)


def publish(world: World, hub: int, topic: str, count: int) -> None:
    for n in range(count):
        world.loop.at(world.clock.now + 0.05 * n, world.publish, hub, topic, b"m")
    world.loop.run_until(world.clock.now + 20.0)


def test_a_hub_off_the_allow_list_stays_out_even_through_a_third_hub() -> None:
    world, x, b, a = three_hubs(refuse_at_start=True)
    overlay_x = world.hubs[x].overlay
    assert a not in overlay_x.membership.entries
    assert overlay_x.membership.refused_adverts >= 1
    publish(world, a, "t", 10)
    assert delivered(world, b, a, "t") == 10  # B admits A: its sets arrive there
    assert delivered(world, x, a, "t") == 0  # X does not, though B could relay them
    publish(world, x, "u", 5)
    assert delivered(world, a, x, "u") == 0  # and X's sets never go to A
    publish(world, b, "t", 5)
    assert delivered(world, x, b, "t") == 5  # X and B serve each other as before


def test_a_reloaded_allow_list_takes_a_hub_out_of_the_map() -> None:
    world, x, b, a = three_hubs(refuse_at_start=False)
    publish(world, a, "t", 5)
    assert delivered(world, x, a, "t") == 5  # admitted: through B
    overlay_x = world.hubs[x].overlay
    overlay_x.membership.admits = lambda key: key != world.hubs[a].overlay.peer_key
    overlay_x.readmit()
    world.pump(x)
    publish(world, a, "t", 5)
    assert a not in overlay_x.membership.entries
    assert delivered(world, x, a, "t") == 5  # nothing after the reload
    assert delivered(world, b, a, "t") == 10


@pytest.mark.slow
async def test_real_hubs_a_hub_off_one_allow_list_reaches_it_through_no_other(tmp_path: Path) -> None:
    """X names B; B and A name all three (X took A off its list first: a rolling revocation).
    A's publishes reach B, never X, though B could relay them; after X's list names A again
    (SIGHUP) they reach X too, those refused meanwhile first; taken off again, they stop."""
    ids = identities(tmp_path, ["hub0", "hub1", "hub2"])  # B, X, A in start order
    b_id, x_id, a_id = ids

    def allow(name: str, peers: list[str]) -> Path:
        path = tmp_path / f"allow-{name}"
        path.write_text("\n".join(peers) + "\n")
        return path

    x_list = allow("x", [b_id, x_id])
    overlay = ["--mesh-overlay", "--no-discovery"]
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT) as cl:
        [b] = await trio.to_thread.run_sync(lambda: cl.start(1, args=[*overlay, "--mesh-allow", str(allow("b", ids))]))
        x = await trio.to_thread.run_sync(lambda: cl.add(b, args=[*overlay, "--mesh-allow", str(x_list)]))
        a = await trio.to_thread.run_sync(lambda: cl.add(b, args=[*overlay, "--mesh-allow", str(allow("a", ids))]))
        assert (b.peer_id, x.peer_id, a.peer_id) == (b_id, x_id, a_id)

        def overlay_of(hub):  # type: ignore[no-untyped-def]
            return hub.mesh()["overlay"]

        await await_until(lambda: overlay_of(b)["reachable"] == 2 and overlay_of(x)["refused_adverts"] >= 1,
                          timeout=60, what="B to reach both, X to refuse A's advertisements", in_thread=True,
                          **HUB_POLL)  # fmt: skip
        assert overlay_of(x)["members"] == 2  # itself and B: A is not in its map
        async with sdk.connect(x.address) as cx, cx.subscribe("t") as at_x, sdk.connect(b.address) as cb, \
                cb.subscribe("t") as at_b, sdk.connect(a.address) as ca:  # fmt: skip
            await publish_until_linked(ca, at_b, "t")  # B's interest is known at A
            for n in range(20):
                await ca.publish_acked("t", b"from a %d" % n)
            assert await next_data(at_b) == b"from a 0"
            await expect_nothing(at_x, 3.0)
            # X names A now: A's advertisements enter its map and its sets arrive.
            x_list.write_text(f"{b_id}\n{x_id}\n{a_id}\n")
            x.signal(signal.SIGHUP)
            await await_until(lambda: overlay_of(x)["members"] == 3, timeout=60, what="A in X's map",
                              in_thread=True, **HUB_POLL)  # fmt: skip
            # Its sets arrive, and those X refused meanwhile come first, in order: X's stream from A
            # had a gap, repaired from A's log as after any partition.
            seen: list[bytes] = []
            for n in range(60):
                await ca.publish_acked("t", b"welcome %d" % n)
                with trio.move_on_after(1.0):
                    while not (seen and seen[-1].startswith(b"welcome")):
                        seen.append(await next_data(at_x))
                if seen and seen[-1].startswith(b"welcome"):
                    break
            assert seen and seen[-1].startswith(b"welcome"), seen
            refused = [m for m in seen if m.startswith(b"from a")]
            assert refused == [b"from a %d" % n for n in range(20)], seen
            # And out again: the map forgets A, its sets stop.
            x_list.write_text(f"{b_id}\n{x_id}\n")
            x.signal(signal.SIGHUP)
            await await_until(lambda: overlay_of(x)["members"] == 2, timeout=30, what="A out of X's map",
                              in_thread=True, **HUB_POLL)  # fmt: skip
            while True:  # what was on its way before the reload may still land
                with trio.move_on_after(2.0) as quiet:
                    await next_data(at_x)
                if quiet.cancelled_caught:
                    break
            for n in range(20):
                await ca.publish_acked("t", b"gone %d" % n)
            await expect_nothing(at_x, 3.0)
            assert overlay_of(x)["dropped"].get("not_admitted", 0) + overlay_of(x)["refused_adverts"] >= 1
