"""A paused relay is routed around before the heartbeats call it dead (real hubs, ``--mesh-overlay``;
hub/core/overlay/routes.py, detours).

Five hubs of degree 2 without shortcuts.  The publisher's hub P reaches the subscriber's hub D
through a relay R, and another way too.  R is paused (SIGSTOP) with a heartbeat bound of 30 s
while P publishes for 2 s: everything published must reach D, once and in order, while R's
link is still up at P -- only a detour can carry it (the sets sent into R before P suspected it
are repaired from P's log once later ones come round) -- and P's status counts R suspected.
Without detours (``--mesh-suspect-after 0``) D gets nothing until R resumes.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

import sdk
from tests.support.cluster import HUB_POLL, Cluster, Hub
from tests.support.syncclient import wait_log_holds
from tests.support.waiting import wait_until

from .test_mesh_overlay import OVERLAY, overlay_of, standing_interest, wait_overlay_interest
from .test_mesh_shortcuts import SETTLE_POLL, settled

pytestmark = pytest.mark.slow

RING = [*OVERLAY, "--mesh-degree", "2", "--max-peers", "4", "--mesh-shortcuts", "0", "--mesh-suspect-after", "0.5"]


def relay_pair(hubs: list[Hub]) -> tuple[Hub, Hub, Hub] | None:
    """(P, R, D), or None: D two hops from P with R the only hub between them (so P's route to D
    is through R), and a neighbour N of P whose own shortest way to D crosses neither P nor R
    (the loop-free alternate a detour needs).  A five-hub ring has them; some shapes of five
    hubs of degree 2 (two hubs each linked to the other three) have none."""
    ids = {overlay_of(h)["hub_id"]: h for h in hubs}
    links = {i: set(overlay_of(h)["links"]) for i, h in ids.items()}
    dist = {i: hops(links, i) for i in links}
    for p, mine in links.items():
        for d, apart in dist[p].items():
            between = [r for r in mine if dist[r].get(d) == 1]
            if apart != 2 or len(between) != 1:
                continue
            r = between[0]
            for n in sorted(mine - {r}):
                there = dist[n].get(d, 99)
                if there < dist[n][p] + dist[p][d] and there < dist[n].get(r, 99) + dist[r][d]:
                    return ids[p], ids[r], ids[d]
    return None


def hops(links: dict[str, set[str]], start: str, *, without: str | None = None) -> dict[str, int]:
    """Hops from ``start`` to every hub it reaches without crossing ``without``."""
    seen, todo = {start: 0}, [start]
    while todo:
        here = todo.pop(0)
        for there in sorted(links[here] - set(seen) - {without}):
            seen[there] = seen[here] + 1
            todo.append(there)
    return seen


def test_a_paused_relay_is_routed_around_while_its_link_is_still_up(tmp_path: Path) -> None:
    shapes = []
    for attempt in range(4):  # the overlay's links are random: a shape without a way round is formed again
        with Cluster(tmp_path / f"try{attempt}", heartbeat_interval=1.0, heartbeat_misses=30, extra=RING) as cl:
            hubs = cl.start(5)
            triple = relay_pair(settle(hubs))
            if triple is None:
                shapes.append({overlay_of(h)["hub_id"]: overlay_of(h)["links"] for h in hubs})
                continue
            pause_the_relay(*triple)
            return
    pytest.fail(f"four overlays of five hubs had no relay with a loop-free way round: {shapes}")


def settle(hubs: list[Hub]) -> list[Hub]:
    seen: list[dict[str, tuple[str, ...]]] = []
    wait_until(lambda: settled(hubs, seen, 4, 2), timeout=60, what="the overlay formed and settled", **SETTLE_POLL)
    return hubs


def pause_the_relay(p: Hub, r: Hub, d: Hub) -> None:
    r_key, r_id = r.peer_id, overlay_of(r)["hub_id"]
    standing_interest(d, ["dt.t"], "keeps-d-interested")
    wait_overlay_interest(p, ["dt.t"], [d])
    sent: list[bytes] = []
    with sdk.connect_blocking(p.address) as client:
        r.signal(signal.SIGSTOP)
        try:
            for i in range(80):  # 2 s: the first ones go into R's socket before P suspects it
                sent.append(b"m%03d" % i)
                client.publish_acked("dt.t", sent[-1])
                time.sleep(0.025)
            log = wait_log_holds(d.address, ["dt.t"], set(sent), timeout=15)
            got = [v for _, v in log["dt.t"] if not v.startswith(b"warm-up")]
            assert got == sent  # all of it while R is paused, once each and in order
            at_p = {peer["peer_id"]: peer for peer in p.mesh()["peers"]}[r_key]
            assert at_p["connected"], "R was declared dead: the heartbeat bound, not a detour, carried it"
            assert at_p["suspected"] >= 1 and overlay_of(p)["suspected"] == [r_id]
            assert overlay_of(p)["suspicions"] >= 1  # the hub's own count, kept when links end
        finally:
            r.signal(signal.SIGCONT)
    wait_until(lambda: not overlay_of(p)["suspected"], timeout=10, what="R answering again", **HUB_POLL)
