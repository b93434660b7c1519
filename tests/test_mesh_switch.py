"""A cluster that outgrows ``--mesh-overlay-from`` switches from the v2 full mesh to the overlay
while it carries traffic, with real hubs (hub/core/mesh/switch.py).

Real ``python -m hub`` subprocesses on 127.0.0.1 with libp2p and ``--no-discovery``: every hub
is bootstrapped to hub 0, so v2 links them in a star around it.  Hub 0 switches when the
cluster reaches the size, and its invites (v3-only dials) make the others switch; a hub
started with ``--mesh-overlay-from 0`` speaks only v2 and keeps its v2 link.  Every publish is
logged by an idempotent producer and the history checker reads the subscribers' logs: nothing
acknowledged lost across the switch, nothing twice, in order per publisher.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import HUB_POLL, Cluster, Hub
from tests.support.history import History
from tests.support.publisher import Publisher, wait_progress
from tests.support.syncclient import wait_log_holds
from tests.support.waiting import wait_until
from tests.test_mesh_overlay import assert_every_acked_publish_arrived, formed, standing_interest, wait_overlay_interest

pytestmark = pytest.mark.v2_only  # the hubs start on v2 and switch by themselves

V2 = "/pub0sub/mesh/2.1.0"
V3 = "/pub0sub/mesh/3.1.0"
AUTO = ["--no-discovery", "--mesh-overlay-from", "4"]


def protocols(hub: Hub) -> set[str]:
    return {p["protocol"] for p in hub.mesh()["peers"] if p["connected"]}


def where(hubs: list[Hub]) -> str:
    """Each hub's protocols and how many hubs its overlay reaches (for a failure's message)."""
    rows = []
    for hub in hubs:
        overlay = hub.mesh()["overlay"]
        rows.append(f"{hub.name}: {sorted(protocols(hub))} reaches {None if overlay is None else overlay['reachable']}")
    return "; ".join(rows)


def switched(hubs: list[Hub]) -> bool:
    """Each hub runs the overlay, reaches every other through it, and holds no v2 link to them."""
    for hub in hubs:
        mesh: dict[str, Any] = hub.mesh()
        overlay = mesh["overlay"]
        if overlay is None or overlay["reachable"] < len(hubs) - 1:
            return False
        for other in hubs:
            peer = hub.peer(other, mesh) if other is not hub else None
            if peer is not None and peer["connected"] and peer["protocol"] == V2:
                return False
    return True


@pytest.mark.slow
def test_a_growing_cluster_switches_to_the_overlay_and_loses_nothing(tmp_path: Path) -> None:
    """Three hubs stay on v2 (below the size); a fourth makes hub 0 switch and invite the others,
    while hub 0 publishes.  Then a subscriber's hub is killed and restarted: it starts on v2 and is
    invited again.  Every message hub 0 acknowledged reaches both subscriber hubs once, in order;
    a v2-only hub keeps its v2 link and gets them too; no v2 window is left behind."""
    with Cluster(tmp_path, extra=AUTO) as cl:
        hubs = cl.start(3)
        cl.wait_converged([hubs[0], hubs[1]])
        cl.wait_converged([hubs[0], hubs[2]])
        assert all(h.mesh()["overlay"] is None for h in hubs), "below the size: the v2 full mesh"
        assert protocols(hubs[0]) == {V2}
        topics = ["sw.a", "sw.b"]
        standing_interest(hubs[1], topics, "d1")
        standing_interest(hubs[2], topics, "d2")
        for topic in topics:
            cl.wait_interest(hubs[0], topic, hubs[1])
            cl.wait_interest(hubs[0], topic, hubs[2])
        history = History()
        # It lives as long as the waits below may take (a suite under load once spent its default
        # 60 s before the last of them); it is stopped at the end either way.
        pub = Publisher(history, lambda: hubs[0].address, topics, producer=0x51, per_batch=10, window=8,
                        max_seconds=240.0)  # fmt: skip
        pub.start()
        try:
            wait_progress(pub, 20)
            hubs.append(cl.add(hubs[0]))  # the fourth hub: hub 0 holds 3 links and switches
            wait_until(lambda: switched(hubs), timeout=60, what=lambda: f"every hub on the overlay: {where(hubs)}",
                       **HUB_POLL)  # fmt: skip
            wait_progress(pub, pub.acked_batches + 20, within=20)
            legacy = cl.add(hubs[0], args=["--mesh-overlay-from", "0"])
            standing_interest(legacy, topics, "d4")
            for topic in topics:
                cl.wait_interest(hubs[0], topic, legacy)
            mark = len(history.ops)
            wait_progress(pub, pub.acked_batches + 20, within=20)
            hubs[2].kill()
            wait_progress(pub, pub.acked_batches + 20, within=20)
            cl.restart(hubs[2])
            wait_until(lambda: switched(hubs), timeout=60,
                       what=lambda: f"the restarted hub on the overlay again: {where(hubs)}", **HUB_POLL)  # fmt: skip
            wait_progress(pub, pub.acked_batches + 20, within=20)
        finally:
            pub.stop()
        assert not pub.errors, pub.errors
        assert_every_acked_publish_arrived(history, [hubs[1], hubs[2]], topics, hubs)
        # The v2-only hub: still v2, and it holds what hub 0 acknowledged once its interest was
        # there, once each, in publish order.
        assert protocols(legacy) == {V2}
        assert V2 in protocols(hubs[0]) and legacy.mesh()["overlay"] is None
        later = {v for op in history.ops[mark:] if op.status == "ok" for v in op.values}
        held = wait_log_holds(legacy.address, topics, later, timeout=60)
        for topic, items in held.items():
            values = [v for _, v in items]
            assert len(values) == len(set(values)), f"{topic}: a message twice at the v2-only hub"
            rank = {v: i for (_, t), order in history.publish_order.items() if t == topic for i, v in enumerate(order)}
            published = [v for v in values if v in rank]
            assert published == sorted(published, key=rank.__getitem__), f"{topic}: out of order at the v2-only hub"
        # The windows of the v2 links the overlay took over were dropped, not left to grow.
        assert hubs[0].mesh()["backlog"] == 0


@pytest.mark.slow
def test_ten_hubs_found_through_the_dht_switch_together_at_the_default_size(tmp_path: Path) -> None:
    """Nine hubs that find each other through the DHT form the v2 full mesh; the tenth makes
    every hub reach the default size (10) at about the same time, so they switch together and
    invite each other from all sides, while two hubs publish.  Every acknowledged message
    reaches each subscriber hub once, in order; no v2 link is left between them."""
    with Cluster(tmp_path) as cl:
        hubs = cl.start(9)
        cl.wait_converged(timeout=60)
        assert all(h.mesh()["overlay"] is None for h in hubs)
        topics = ["ten.a", "ten.b"]
        subscribers = [hubs[3], hubs[6], hubs[8]]
        for index, hub in enumerate(subscribers):
            standing_interest(hub, topics, f"d{index}")
        for publisher in (hubs[1], hubs[5]):
            for hub in subscribers:
                for topic in topics:
                    cl.wait_interest(publisher, topic, hub, timeout=30)
        history = History()
        pubs = [Publisher(history, lambda h=h: h.address, topics, producer=0x60 + i, per_batch=10, window=8)
                for i, h in enumerate((hubs[1], hubs[5]))]  # fmt: skip
        for pub in pubs:
            pub.start()
        try:
            for pub in pubs:
                wait_progress(pub, 20)
            hubs.append(cl.add(hubs[0]))
            wait_until(lambda: switched(hubs), timeout=90, what=lambda: f"every hub on the overlay: {where(hubs)}",
                       **HUB_POLL)  # fmt: skip
            for pub in pubs:
                wait_progress(pub, pub.acked_batches + 20, within=30)
        finally:
            for pub in pubs:
                pub.stop()
        for pub in pubs:
            assert not pub.errors, pub.errors
        assert_every_acked_publish_arrived(history, subscribers, topics, hubs)
        # Linked on the overlay, a hub makes no DHT lookups (on v2 each did one every 2 s, backing
        # off to 30 s while it found the same hubs), though its discovery rounds go on every 2 s.
        before = [h.mesh()["discovery"] for h in hubs]
        time.sleep(5.0)
        after = [h.mesh()["discovery"] for h in hubs]
        assert [d["lookups"] for d in after] == [d["lookups"] for d in before]
        assert all(a["rounds"] > b["rounds"] for a, b in zip(after, before, strict=True)), (before, after)


@pytest.mark.slow
def test_ten_hubs_at_max_peers_3_switch_through_one_bootstrap_hub_and_deliver(tmp_path: Path) -> None:
    """Ten hubs that may hold 3 links each, all bootstrapped to hub 0 and no DHT: v2 links them
    to hub 0 only, which is full at 3 links and switches.  The others still reach it: a switched
    hub refuses a v2 stream past its bound but invites the hub it came from, and the overlay
    takes that link in place of one it can spare.  Every hub switches, none holds more than 3
    links and shortcuts once formed, and every message hub 1 acknowledged reaches the subscriber
    hubs once, in order."""
    with Cluster(tmp_path, extra=["--no-discovery", "--max-peers", "3"]) as cl:
        hubs = cl.start(10)
        wait_until(lambda: switched(hubs), timeout=90, what=lambda: f"every hub on the overlay: {where(hubs)}",
                   **HUB_POLL)  # fmt: skip
        wait_until(lambda: formed(hubs, 3), timeout=60, what="the overlay formed within 3 links", **HUB_POLL)
        topics = ["cap.a", "cap.b"]
        subscribers = [hubs[6], hubs[7], hubs[9]]
        for index, hub in enumerate(subscribers):
            standing_interest(hub, topics, f"d{index}")
        wait_overlay_interest(hubs[1], topics, subscribers)
        history = History()
        pub = Publisher(history, lambda: hubs[1].address, topics, producer=0x71, per_batch=10, window=8)
        pub.start()
        try:
            wait_progress(pub, 50, within=30)
        finally:
            pub.stop()
        assert not pub.errors, pub.errors
        assert_every_acked_publish_arrived(history, subscribers, topics, hubs)
