"""Trial links (hub/core/overlay/links.py): a hub tries one more link now and then and keeps it
in place of its costliest one when that is much slower -- driven through the simulator."""

from __future__ import annotations

import pytest

from hub.core.overlay import links
from hub.core.overlay.config import OverlayConfig
from hub.core.overlay.links import TRIAL_MARGIN
from hub.tools.sim import churn
from hub.tools.sim.latency import fraction, pair_seed, plane_distance
from hub.tools.sim.scenario import SimSettings, execute
from hub.tools.sim.world import World

#: 6 hubs of degree 4: each hub is linked to 4 of the 5 others, so it has one hub to try.
CONFIG = OverlayConfig(degree=4, max_peers=6, link_trials=1.0)


def formed(latency: tuple[float, float], config: OverlayConfig = CONFIG, seed: int = 3) -> World:
    world = World(hubs=6, seed=seed, config=config, latency=latency)
    for i, hub in enumerate(world.order):
        world.loop.at(0.3 * i, world.start, hub, world.order[:i][-2:])
    world.loop.run_until(20.0)
    assert all(len(h.overlay.links) == config.degree for h in world.up_hubs() if h.overlay)
    return world


def links_of(world: World) -> dict[int, set[int]]:
    return {h.hub_id: set(h.overlay.links) for h in world.up_hubs() if h.overlay is not None}


def trials(world: World, kind: str) -> int:
    return sum(getattr(h.overlay.policy, f"trials_{kind}") for h in world.up_hubs() if h.overlay is not None)


def advertised_degrees(world: World) -> list[int]:
    """Each hub's links as its own advertisement says (what every map holds of it)."""
    return [len(h.overlay.membership.get(h.hub_id).neighbors) for h in world.up_hubs() if h.overlay is not None]


def test_a_much_faster_link_replaces_the_slowest_one() -> None:
    world = formed((0.050, 0.050))
    x = world.order[0]
    [y] = [h for h in world.order if h != x and h not in links_of(world)[x]]
    world._latency[world.pair(x, y)] = 0.005  # x and y turn out to be close: 10x faster than the rest
    world.loop.run_until(world.clock.now + 120.0)
    assert y in links_of(world)[x]
    assert trials(world, "kept") >= 1
    overlay = world.hubs[x].overlay
    assert overlay is not None
    assert y in overlay.membership.get(x).neighbors  # advertised once kept: routes use it
    assert overlay.membership.next_hop(y) == y
    # Every hub ends at its degree again (the hub whose link went dialled another).
    assert sorted(len(links) for links in links_of(world).values()) == [4] * 6


def test_a_trial_no_faster_is_closed_and_costs_no_advertisement() -> None:
    world = formed((0.050, 0.050))
    before = links_of(world)
    seqs = {h.hub_id: h.overlay.membership.get(h.hub_id).seq for h in world.up_hubs() if h.overlay}
    for _ in range(300):  # 30 s in steps: neither end ever advertises a trial link
        world.loop.run_until(world.clock.now + 0.1)
        assert advertised_degrees(world) == [CONFIG.degree] * 6
    assert trials(world, "closed") >= 6 and trials(world, "kept") == 0
    assert links_of(world) == before
    # Nor did any hub advertise anything anew: a closed trial floods nothing.
    assert {h.hub_id: h.overlay.membership.get(h.hub_id).seq for h in world.up_hubs() if h.overlay} == seqs


def test_rejected_trials_back_off() -> None:
    world = formed((0.050, 0.050))
    world.loop.run_until(world.clock.now + 60.0)
    first_minute = trials(world, "closed")
    world.loop.run_until(world.clock.now + 60.0)
    # 1 s doubling to 32 s (times 0.5-1.5 at random): once past 5 rejections a hub waits at
    # least 16 s, so at most 4 trials each in the second minute, fewer than in the first.
    second_minute = trials(world, "closed") - first_minute
    assert second_minute <= 4 * 6 and second_minute < first_minute


def test_a_larger_map_tries_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past TRIAL_HUBS hubs a hub waits hubs / TRIAL_HUBS times longer between trials (each
    kept one floods every hub).  Trials every 100 s: the first comes 50-150 s after a hub is
    whole, and with a TRIAL_HUBS of 1, six times later (its map holds the 6 hubs by then)."""
    config = OverlayConfig(degree=4, max_peers=6, link_trials=100.0)

    def tried_by(*moments: float) -> list[int]:
        world = formed((0.050, 0.050), config)
        counts = []
        for moment in moments:
            world.loop.run_until(moment)
            counts.append(trials(world, "closed") + trials(world, "kept"))
        return counts

    assert tried_by(160.0)[0] >= 1
    monkeypatch.setattr(links, "TRIAL_HUBS", 1)
    early, late = tried_by(290.0, 1000.0)
    assert early == 0 and late >= 1


def test_hubs_on_one_machine_never_try() -> None:
    world = formed((0.0002, 0.0045))  # one site: every link under TRIAL_MIN_COST (5 ms)
    world.loop.run_until(world.clock.now + 30.0)
    assert trials(world, "closed") == trials(world, "kept") == 0


def test_a_small_degree_never_tries() -> None:
    config = OverlayConfig(degree=2, max_peers=4, link_trials=1.0)
    world = formed((0.010, 0.080), config)
    world.loop.run_until(world.clock.now + 30.0)
    assert trials(world, "closed") == trials(world, "kept") == 0


def test_the_margin_keeps_near_equal_links() -> None:
    """A trial only a little faster than the slowest link is closed: jitter must not swap links."""
    world = formed((0.050, 0.050))
    x = world.order[0]
    [y] = [h for h in world.order if h != x and h not in links_of(world)[x]]
    world._latency[world.pair(x, y)] = 0.050 / TRIAL_MARGIN * 1.05  # faster, but not by the margin
    world.loop.run_until(world.clock.now + 60.0)
    assert trials(world, "kept") == 0 and y not in links_of(world)[x]


def test_plane_latencies_keep_the_triangle_inequality() -> None:
    hubs = list(range(1, 40))
    lat = {(a, b): plane_distance(7, a, b) for a in hubs for b in hubs}
    assert all(lat[a, c] <= lat[a, b] + lat[b, c] + 1e-12 for a in hubs[:12] for b in hubs for c in hubs[:12])
    assert all(0.0 <= v <= 1.0 and v == lat[b, a] for (a, b), v in lat.items())
    assert fraction("pairs", 7, 3, 9) == pair_seed(7, 9, 3) != fraction("plane", 7, 3, 9)


def test_trials_through_crashes_and_cuts_lose_nothing() -> None:
    """Links replaced by faster ones while hubs crash and links break, on a plane of sites."""
    settings = SimSettings(hubs=16, seed=6, degree=4, max_peers=8, link_trials=2.0, latency_model="plane", form=15,
                           warm=20, steady=10, faults=30, drain=40, joins=3, few_topics=6, pair_topics=20, wildcards=2,
                           crash_per_minute=0.3, link_fail_per_minute=0.1)  # fmt: skip
    f = execute(settings).figures
    delivery = f["delivery"]
    assert delivery["expected"] > 500
    assert delivery["delivered"] == delivery["expected"]
    assert delivery["duplicates"] == 0 and delivery["fifo_violations"] == 0
    assert f["link_trials"]["kept"] > 0
    assert f["degree_max"] <= 8


def test_the_churn_command_prints_a_row_per_window(capsys) -> None:
    assert churn.main(["--hubs", "12", "--seconds", "40", "--window", "20"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["until_s", "trials_kept", "link_state_frames", "mean_link_ms"]
    assert [row.split()[0] for row in rows] == ["20", "40"]
    assert all(float(row.split()[3]) > 10 for row in rows)  # links of 10-80 ms
