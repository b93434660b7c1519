"""The operators' port of real hubs: /metrics checked against the traffic sent, and the probes.

One hub with a data dir and ``--durability fsync`` gets a known load (live, durable and
group subscribers, a client that breaks the protocol); a real 3-hub cluster gets
publishes that cross the mesh.  Every figure asserted is one the test caused.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sdk
import wire
from tests.support.cluster import Cluster, Hub, converged_cluster
from tests.support.hubprocess import HubProcess
from tests.support.scrape import get, scrape, value
from tests.support.waiting import wait_until

SIZE = 10  # bytes per message
RECORD = SIZE + 6  # a stored record: u16 key length, u32 data length, no key, the data
ORDERS = 30
JOBS = 8
ACKED = 10


@pytest.fixture
def metrics_hub(start_hub: Callable[..., HubProcess], tmp_path: Path) -> HubProcess:
    return start_hub("--data-dir", str(tmp_path / "d"), "--durability", "fsync", "--name", "m1",
                     "--metrics-listen", "127.0.0.1:0")  # fmt: skip


def test_probes_answer(metrics_hub: HubProcess) -> None:
    assert get(metrics_hub.metrics_address, "/healthz")[::2] == (200, b"ok\n")
    status, kind, body = get(metrics_hub.metrics_address, "/readyz")
    assert (status, kind) == (200, "application/json")
    assert b'"checks": {"storage": true, "listening": true, "mesh": null}' in body
    assert get(metrics_hub.metrics_address, "/nothing-here")[0] == 404


def test_metrics_count_the_traffic_sent(metrics_hub: HubProcess) -> None:
    address = metrics_hub.address
    payload = b"x" * SIZE
    with sdk.connect_blocking(address) as client:
        live = client.subscribe("orders.eu")
        durable = client.subscribe("orders.>", durable="arch", ack="manual", start="earliest")
        worker = client.subscribe("jobs", group="workers", ack="manual")
        for _ in range(ORDERS):
            client.publish("orders.eu", payload)
        for _ in range(JOBS - 1):
            client.publish("jobs", payload)
        client.publish_acked("jobs", payload)  # waits for an fsync: a group commit runs
        got_live = [live.next(timeout=10) for _ in range(ORDERS)]
        got_durable = [durable.next(timeout=10) for _ in range(ORDERS)]
        got_jobs = [worker.next(timeout=10) for _ in range(JOBS)]
        assert None not in got_live + got_durable + got_jobs
        durable.ack([m for m in got_durable[:ACKED] if m is not None])
        client.flush()
        bad_client_breaks_the_protocol(address)

        m = wait_until(lambda: settled(metrics_hub.metrics_address), timeout=10, what="the durable's acks to count")
        assert value(m, "pub0sub_consumer_lag_messages", kind="durable", name="arch") == ORDERS - ACKED
        # Nothing acknowledged by the group: all of its messages are pending and behind.
        assert value(m, "pub0sub_consumer_lag_messages", kind="group", name="workers") == JOBS
        assert value(m, "pub0sub_group_pending_messages", group="workers") == JOBS
        assert value(m, "pub0sub_group_members", group="workers") == 1
        assert value(m, "pub0sub_messages_in_total") == ORDERS + JOBS
        assert value(m, "pub0sub_message_bytes_in_total") == (ORDERS + JOBS) * RECORD
        assert value(m, "pub0sub_topic_messages_total", topic="orders.eu") == ORDERS
        assert value(m, "pub0sub_topic_message_bytes_total", topic="jobs") == JOBS * RECORD
        assert value(m, "pub0sub_topic_subscribers", topic="orders.eu") == 2  # live + durable
        assert value(m, "pub0sub_deliveries_total") == 2 * ORDERS + JOBS
        for kind in ("live", "durable", "group"):
            assert value(m, "pub0sub_subscriptions", kind=kind) == 1
        assert value(m, "pub0sub_connections") == 1
        # The bad client: one ERROR frame with its code, one connection closed for it.
        assert value(m, "pub0sub_errors_sent_total", code="UNKNOWN_OPCODE") == 1
        assert value(m, "pub0sub_connections_closed_total", reason="protocol_error") == 1
        assert value(m, "pub0sub_connections_opened_total") == 2
        assert value(m, "pub0sub_dropped_messages_total", reason="drop_oldest") == 0
        # fsync mode: every group commit timed, and the logs on disk add up.
        commits = value(m, "pub0sub_fsyncs_total")
        assert commits >= 1
        assert value(m, "pub0sub_fsync_duration_seconds_count") == commits
        assert value(m, "pub0sub_fsync_duration_seconds_bucket", le="+Inf") == commits
        assert value(m, "pub0sub_log_segments") == 2
        assert value(m, "pub0sub_log_bytes") == sum(
            value(m, "pub0sub_topic_log_bytes", topic=t) for t in ("orders.eu", "jobs")
        )
        assert value(m, "pub0sub_storage_healthy") == 1
        assert value(m, "pub0sub_hub_info", name="m1") == 1
    m = scrape(metrics_hub.metrics_address)
    assert value(m, "pub0sub_connections") == 0
    assert value(m, "pub0sub_connections_closed_total", reason="client_closed") == 1


def settled(address: str) -> dict | None:
    m = scrape(address)
    done = value(m, "pub0sub_consumer_lag_messages", kind="durable", name="arch") == ORDERS - ACKED
    return m if done else None


def bad_client_breaks_the_protocol(address: str) -> None:
    """HELLO, then a frame with an opcode nobody defined: the hub answers ERROR and hangs up."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(wire.Hello(client_name="bad").encode() + bytes([0x7F, 0, 0, 0, 0]))
        decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES)
        while chunk := s.recv(65536):
            decoder.feed(chunk)
        frames = list(decoder)
    assert isinstance(frames[-1], wire.Error) and frames[-1].code is wire.ErrorCode.UNKNOWN_OPCODE


def test_per_topic_series_are_bounded(start_hub: Callable[..., HubProcess]) -> None:
    hub = start_hub("--metrics-listen", "127.0.0.1:0", "--metrics-topics", "2")
    with sdk.connect_blocking(hub.address) as client:
        for i, topic in enumerate(["a", "b", "c", "d"]):
            for _ in range(i + 1):
                client.publish(topic, b"m")
        client.publish_acked("d", b"m")
    m = scrape(hub.metrics_address)
    shown = {dict(labels)["topic"] for (name, labels) in m if name == "pub0sub_topic_messages_total"}
    assert shown == {"c", "d"}  # the two busiest
    assert value(m, "pub0sub_topics") == 4


# -- a real 3-hub cluster --------------------------------------------------------------------


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[Cluster]:
    with converged_cluster(tmp_path, extra=["--metrics-listen", "127.0.0.1:0"]) as cluster:
        yield cluster


@contextlib.contextmanager
def delivered_across(cluster: Cluster, pub: Hub, sub: Hub, topic: str, sent: int, *, set_each: bool = False
                     ) -> Iterator[None]:  # fmt: skip
    """``sent`` messages published at hub ``pub`` on ``topic`` (each flushed alone, a set each, with
    ``set_each``) and received by a subscriber at hub ``sub``, which stays subscribed in the block."""
    with sdk.connect_blocking(sub.address) as sub_client, sdk.connect_blocking(pub.address) as pub_client:
        subscription = sub_client.subscribe(topic)
        cluster.wait_interest(pub, topic, sub)
        for i in range(sent):
            pub_client.publish(topic, b"%03d" % i)
            if set_each:
                pub_client.flush()
        pub_client.flush()
        assert all(subscription.next(timeout=10) is not None for _ in range(sent))
        yield


@pytest.mark.slow
def test_cluster_metrics_follow_forwards_across_the_mesh(cluster3: Cluster) -> None:
    a, b, c = cluster3.hubs
    sent = 25
    with delivered_across(cluster3, a, c, "metrics.t", sent):

        def acked() -> dict | None:
            m = scrape(a.metrics_address)
            done = value(m, "pub0sub_mesh_peer_acked_sequence", peer=c.peer_id) >= sent
            return m if done else None

        ma = wait_until(acked, timeout=10, what="hub c to acknowledge every forward")
        mc = scrape(c.metrics_address)
    assert value(ma, "pub0sub_mesh_peer_forwarded_messages_total", peer=c.peer_id, hub_id=c.hub_id) == sent
    assert value(ma, "pub0sub_mesh_peer_forwarded_messages_total", peer=b.peer_id) == 0  # b wants nothing
    assert value(mc, "pub0sub_mesh_peer_received_messages_total", peer=a.peer_id, hub_id=a.hub_id) == sent
    assert value(mc, "pub0sub_mesh_messages_in_total") == sent
    assert value(mc, "pub0sub_deliveries_total") == sent
    for m, me in ((ma, a), (mc, c)):
        assert value(m, "pub0sub_mesh_peers", state="linked") == 2
        for other in (h for h in (a, b, c) if h is not me):
            assert value(m, "pub0sub_mesh_peer_up", peer=other.peer_id) == 1
    for me in (a, b, c):
        for other in (h for h in (a, b, c) if h is not me):
            # Heartbeats every 0.5 s: each link times their round trips.
            wait_until(lambda me=me, other=other: value(scrape(me.metrics_address),
                       "pub0sub_mesh_heartbeat_rtt_seconds_count", peer=other.peer_id) >= 2,
                       timeout=10, what=f"{me.name} to time heartbeats to {other.name}")  # fmt: skip
    for hub in (a, b, c):
        status, _kind, body = get(hub.metrics_address, "/readyz")
        assert status == 200 and b'"mesh": true' in body, body
    assert not any(name.startswith("pub0sub_overlay_") for name, _ in mc)  # a full mesh (v2): no overlay


@pytest.mark.slow
def test_overlay_metrics_count_what_its_streams_delivered(tmp_path: Path) -> None:
    """On the overlay (mesh v3) the delivering side's counters are series too: the sets an origin's
    stream delivered in order, its gaps and what was lost (nothing, here)."""
    extra = ["--metrics-listen", "127.0.0.1:0", "--mesh-overlay", "--no-discovery"]
    with converged_cluster(tmp_path, extra=extra) as cluster:
        a, _b, c = cluster.hubs
        sent = 25
        with delivered_across(cluster, a, c, "metrics.o", sent, set_each=True):
            mc, ma = scrape(c.metrics_address), scrape(a.metrics_address)  # while c still wants the topic
    assert value(mc, "pub0sub_overlay_sets_total", kind="delivered") == sent
    assert value(mc, "pub0sub_overlay_sets_total", kind="duplicate") == 0
    assert value(mc, "pub0sub_overlay_streams") == 1  # hub a's on metrics.o
    assert value(mc, "pub0sub_overlay_messages_lost_total") == 0
    assert value(mc, "pub0sub_overlay_gaps_total", outcome="lost") == 0
    assert value(mc, "pub0sub_overlay_open_gaps") == 0
    assert value(ma, "pub0sub_overlay_sets_total", kind="delivered") == 0  # a published, c delivered
