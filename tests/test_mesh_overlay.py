"""Mesh v3, the overlay (``--mesh-overlay``), with real hubs: bounded links that still deliver.

Real ``python -m hub`` subprocesses on 127.0.0.1 with libp2p; every publish is logged by an
idempotent producer (invoked, then ok / unknown) and the history checker reads the logs of
the interested hubs: nothing acknowledged lost, nothing twice, in order per publisher.
The routing core's own properties (any interleaving of faults) are
tests/test_overlay_properties.py; the simulator at small N is tests/test_overlay_sim.py.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import sdk
import wire
from tests.support.cluster import HUB_POLL, Cluster, Hub
from tests.support.history import History, check
from tests.support.publisher import Publisher, wait_progress
from tests.support.roguepeer import RoguePeer
from tests.support.syncclient import read_all, wait_log_holds
from tests.support.waiting import await_until, wait_until

OVERLAY = ["--mesh-overlay", "--no-discovery"]
HEARTBEAT = 0.5
MISSES = 3
DRAIN_SECONDS = 60.0
#: Messages that only show the interest arrived (wait_overlay_interest); not in any history.
WARM_UP = b"warm-up"


def overlay_of(hub: Hub) -> dict[str, Any]:
    overlay = hub.mesh()["overlay"]
    assert overlay is not None, f"{hub.name} runs no overlay"
    return overlay


def formed(hubs: list[Hub], max_peers: int) -> bool:
    """Every hub reaches every other through the overlay, none above ``max_peers`` links and shortcuts."""
    for hub in hubs:
        overlay = overlay_of(hub)
        held = len(overlay["links"]) + len(overlay["shortcuts"])
        assert held <= max_peers, f"{hub.name} holds {held} links and shortcuts"
        if overlay["reachable"] < len(hubs) - 1:
            return False
    return True


def standing_interest(hub: Hub, topics: list[str], name: str) -> None:
    """A durable subscription on ``hub``: its hub wants ``topics`` from now on."""
    with sdk.connect_blocking(hub.address) as client, client.subscribe(topics, durable=name, start="earliest"):
        pass


def wait_overlay_interest(publisher: Hub, topics: list[str], subscribers: list[Hub]) -> None:
    """Until each subscriber hub holds a message published on each topic at ``publisher``.

    A hub-level subscription reaches the rendezvous owners asynchronously (as a v2 SUBSCRIBE
    reaches peers): sets published before the publisher's hub hears of it are not for that
    hub.  The v2 tests wait for the interest to show in the publisher's peer table; the overlay
    keeps it at the owners, so this publishes until a message arrives everywhere.  It waits for
    the *last* warm-up: a hub named while the owners changed may be owed earlier ones too
    (hub/core/overlay/watching.py), which arrive in order, so once the last is there none of
    them can reach a subscriber the test starts afterwards."""
    deadline = time.monotonic() + 30.0
    with sdk.connect_blocking(publisher.address) as client:
        for attempt in range(1_000_000):
            last = b"warm-up %d" % attempt
            for topic in topics:
                client.publish_acked(topic, last)
            crossed = time.monotonic() + 2.0  # a set that leaves takes well under this to arrive
            while True:
                reads = [read_all(hub.address, topics)[0] for hub in subscribers]
                if all(any(v == last for _, v in r.get(t, [])) for r in reads for t in topics):
                    return
                if time.monotonic() >= crossed:
                    break
                time.sleep(0.2)
            assert time.monotonic() < deadline, "interest did not reach the publisher's hub in 30 s"


def assert_every_acked_publish_arrived(
    history: History, hubs: list[Hub], topics: list[str], cluster: list[Hub]
) -> None:
    acked = {v for op in history.ops if op.status == "ok" for v in op.values}
    assert acked
    for hub in hubs:
        log = wait_log_holds(hub.address, topics, acked, timeout=DRAIN_SECONDS)
        # The warm-ups come first in each log (published before the history began).
        warm = {t: sum(1 for _, v in items if v.startswith(WARM_UP)) for t, items in log.items()}
        reads = {t: [(o, v) for o, v in items if not v.startswith(WARM_UP)] for t, items in log.items()}
        result = check(history, reads, first_offsets=warm)
        assert result.valid, f"{hub.name}: {result.summary()}\n{lost_report(history, reads, cluster)}"


def lost_report(history: History, reads: dict[str, list[tuple[int, bytes]]], hubs: list[Hub]) -> str:
    """Which acknowledged publishes a hub lacks (as seconds into the history), and what each
    interested hub's overlay counted: enough to tell a lost tail from a lost middle, and where."""
    held = {v for items in reads.values() for _, v in items}
    start = history.ops[0].invoked_at if history.ops else 0.0
    lost = [op for op in history.ops if op.status == "ok" and not set(op.values) <= held]
    lines = []
    if lost:
        first, last, end = (op.invoked_at - start for op in (lost[0], lost[-1], history.ops[-1]))
        lines.append(f"{len(lost)} acknowledged publishes lacking, of {len(history.ops)}: first {lost[0].topic} "
                     f"at {first:.1f} s, last {lost[-1].topic} at {last:.1f} s; the history ends at {end:.1f} s")
    for hub in hubs:
        try:
            o = overlay_of(hub)
        except Exception as exc:  # a report must not hide the failure it reports
            lines.append(f"{hub.name}: no status ({exc})")
            continue
        lines.append(f"{hub.name}: counters={o['counters']} dropped={o['dropped']} open_gaps={o['open_gaps']} "
                     f"held={o['held_sets']} streams={o['streams']}")
    return "\n".join(lines)


@pytest.mark.slow
def test_ten_hubs_at_max_peers_3_deliver_through_a_relay_crash_a_pause_and_a_publisher_crash(tmp_path: Path) -> None:
    """Ten hubs that may hold 3 links each, so sets cross relays.  While hub 1 publishes: a relay
    is killed and restarted, another is paused past the heartbeat bound and resumed, then the
    publisher's own hub is killed and restarted.  Every message hub 1 acknowledged reaches each
    interested hub (one of them by a pattern) once, in order, and no hub ever holds more than 3
    links."""
    settings = dict(heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES, extra=[*OVERLAY, "--max-peers", "3"])
    with Cluster(tmp_path, **settings) as cl:
        hubs = cl.start(10)
        wait_until(lambda: formed(hubs, 3), timeout=60, what="the overlay formed", **HUB_POLL)
        topics = ["ov.a", "ov.b"]
        subscribers = [hubs[6], hubs[7], hubs[9]]
        standing_interest(hubs[6], topics, "d6")
        standing_interest(hubs[7], ["ov.*"], "d7")
        standing_interest(hubs[9], topics, "d9")
        wait_overlay_interest(hubs[1], topics, subscribers)
        history = History()
        pub = Publisher(history, lambda: hubs[1].address, topics, producer=0x31, per_batch=10, window=8)
        pub.start()
        try:
            wait_progress(pub, 20)
            hubs[3].kill()
            wait_progress(pub, pub.acked_batches + 20, within=20)
            cl.restart(hubs[3])
            hubs[4].signal(signal.SIGSTOP)
            time.sleep(cl.heartbeat_bound + 1.0)  # its neighbours declare it dead meanwhile
            wait_progress(pub, pub.acked_batches + 20, within=20)
            hubs[4].signal(signal.SIGCONT)
            wait_progress(pub, pub.acked_batches + 20, within=20)
            hubs[1].kill()
            cl.restart(hubs[1])
            wait_progress(pub, pub.acked_batches + 20, within=30)
        finally:
            pub.stop()
            hubs[4].signal(signal.SIGCONT)
        assert not pub.errors, pub.errors
        assert pub.reconnects >= 1, "the publisher's hub was killed: its producer must have reconnected"
        assert_every_acked_publish_arrived(history, subscribers, topics, hubs)
        # Three links at most is not a full mesh: some hub's sets went through a relay.
        relayed = sum(overlay_of(h)["sent_frames"].get("ROUTED_SETS", 0) for h in hubs if h is not hubs[1])
        assert relayed > 0
        # The v2 forward path leaves overlay links alone (it counted every set as "no interest").
        v3 = [p for p in hubs[1].mesh()["peers"] if p["protocol"] == "/pub0sub/mesh/3.1.0"]
        assert v3 and all(p["messages_skipped_no_interest"] == 0 for p in v3)
        assert wait_until(lambda: formed(hubs, 3), timeout=60, what="the overlay whole again", **HUB_POLL)


@pytest.mark.v2_only  # one of its two hubs has no overlay
def test_an_overlay_hub_links_with_a_v2_hub(tmp_path: Path) -> None:
    """A hub started with --mesh-overlay and a v2-only one: they speak v2.1, and deliver both ways
    (the overlay hub's invite, a v3-only dial, fails on the v2-only hub and changes nothing)."""
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        [a] = cl.start(1, args=[*OVERLAY])
        b = cl.add(a, args=["--no-discovery", "--mesh-overlay-from", "0"])
        cl.wait_converged()
        assert {p["protocol"] for p in a.mesh()["peers"] if p["connected"]} == {"/pub0sub/mesh/2.1.0"}
        with (
            sdk.connect_blocking(a.address) as ca,
            sdk.connect_blocking(b.address) as cb,
            ca.subscribe("mixed.to_a") as sub_a,
            cb.subscribe("mixed.to_b") as sub_b,
        ):
            cl.wait_interest(b, "mixed.to_a", a)
            cl.wait_interest(a, "mixed.to_b", b)
            cb.publish_acked("mixed.to_a", b"from b")
            ca.publish_acked("mixed.to_b", b"from a")
            got_a = sub_a.next(timeout=10)
            got_b = sub_b.next(timeout=10)
            assert got_a is not None and got_a.data == b"from b"
            assert got_b is not None and got_b.data == b"from a"


async def test_a_bare_control_frame_on_a_v3_link_ends_that_link_only(tmp_path: Path) -> None:
    """Control frames travel only inside ROUTED: a peer sending one bare is cut off, the hub serves on."""
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES, extra=OVERLAY) as cl:
        [hub] = await trio.to_thread.run_sync(lambda: cl.start(1))
        async with RoguePeer.dial(hub.multiaddr, protocol="/pub0sub/mesh/3.0.0") as rogue:
            await rogue.send(wire.MeshHello(hub_id=rogue.hub_id))
            assert await rogue.wait_for(wire.MeshHello, 5) is not None  # admitted: a v3 session
            await rogue.send(wire.Interest(key="secret", patterns=("secret.>",)))
            assert await rogue.wait_closed(5), "the hub kept a link that sent a bare INTEREST"
        overlay = await trio.to_thread.run_sync(lambda: overlay_of(hub))
        assert overlay["keys_owned"] == 0, "the bare INTEREST was acted on"
        await await_until(lambda: overlay_of(hub)["links"] == [], timeout=5, what="the link gone", in_thread=True,
                          **HUB_POLL)  # fmt: skip
        with sdk.connect_blocking(hub.address) as client:
            client.publish_acked("still.serving", b"yes")


async def test_link_costs_are_timed_and_a_v3_0_peer_gets_advertisements_without_them(tmp_path: Path) -> None:
    """Mesh 3.1: the hub that dialled a link times it and advertises its cost; a 3.0 peer, which
    cannot read costs, is sent every LINK_STATE in the 3.0 layout, and a 3.1 peer with them."""
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES, extra=OVERLAY) as cl:
        a, b = await trio.to_thread.run_sync(lambda: cl.start(2))

        def timed() -> Hub | None:
            for hub in (a, b):
                if overlay_of(hub)["link_latency_ms"]:
                    return hub
            return None

        await await_until(lambda: timed() is not None, timeout=20, what="a link timed", in_thread=True, **HUB_POLL)
        timer = await trio.to_thread.run_sync(timed)
        assert timer is not None
        [(other, latency_ms)] = overlay_of(timer)["link_latency_ms"].items()
        assert 0 < latency_ms < 1000
        timer_id = int(overlay_of(timer)["hub_id"], 16)
        for protocol, costed in (("/pub0sub/mesh/3.0.0", False), ("/pub0sub/mesh/3.1.0", True)):
            async with RoguePeer.dial(timer.multiaddr, protocol=protocol) as rogue:
                await rogue.send(wire.MeshHello(hub_id=rogue.hub_id))
                assert await rogue.wait_for(wire.MeshHello, 5) is not None

                def own() -> list[wire.LinkState]:
                    return [s for s in rogue.received(wire.LinkState) if s.hub_id == timer_id]  # type: ignore[attr-defined]

                await await_until(lambda: bool(own()), timeout=10, what="its own LINK_STATE")
                states: list[wire.LinkState] = rogue.received(wire.LinkState)  # type: ignore[assignment]
                if not costed:
                    assert all(s.costs == () for s in states), "a 3.0 peer was sent costs it cannot read"
                    assert any(s.neighbors for s in states)
                else:
                    state = own()[0]
                    costs = dict(zip(state.neighbors, state.costs, strict=True))
                    assert costs[int(other, 16)] > 0, "the timed link went out without its cost"


def test_headers_cross_overlay_links(tmp_path: Path) -> None:
    """Mesh 3.1: a set with headers travels in ROUTED_SETS_HEADERS; the far hub's live
    subscriber and its log both get the headers, and headerless sets still go as ROUTED_SETS."""
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES, extra=OVERLAY) as cl:
        a, b = cl.start(2)
        standing_interest(b, ["hdr.t"], "keeps-b-interested")
        wait_overlay_interest(a, ["hdr.t"], [b])
        with sdk.connect_blocking(b.address) as cb, cb.subscribe("hdr.t") as sub, sdk.connect_blocking(a.address) as ca:
            ca.publish_acked("hdr.t", b"plain")
            ca.publish_acked("hdr.t", b"tagged", headers={"trace": "4bf9", "blob": b"\x00\xff"})
            got = [sub.next(timeout=10) for _ in range(2)]
        assert [m.data if m else None for m in got] == [b"plain", b"tagged"]
        assert got[0] is not None and not got[0].headers
        assert got[1] is not None and got[1].headers == {"trace": "4bf9", "blob": b"\x00\xff"}
        with sdk.connect_blocking(b.address) as cb, cb.subscribe("hdr.t", start="earliest") as replay:
            stored = {m.data: m.headers for m in iter(lambda: replay.next(timeout=5), None)}
        assert stored[b"tagged"] == {"trace": "4bf9", "blob": b"\x00\xff"}
        sent = overlay_of(a)["sent_frames"]
        assert sent.get("ROUTED_SETS_HEADERS", 0) >= 1 and sent.get("ROUTED_SETS", 0) >= 1
