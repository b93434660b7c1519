"""RELIABILITY.md scenarios not covered elsewhere, on real ``python -m hub`` processes.

Where each scenario lives (docs/reliability.md has the whole table):
1, 2 -> tests/test_durability_faults.py; 3, 5 -> tests/test_mesh_faults.py, tests/test_cluster.py;
4, 6, 7, 8 -> here (and tests/test_hub_bounds.py, tests/test_resource_bounds.py, tests/test_fuzz.py);
9 -> tests/test_durability_faults.py.  The long runs with figures: ``python -m tests.support.reliability``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import wire
from tests.support.hubprocess import HubProcess, hub_status
from tests.support.scenarios import client_pause, survive_attack
from tests.support.syncclient import SyncClient, publish_frame
from tests.support.waiting import wait_until

StartHub = Callable[..., HubProcess]


@pytest.mark.slow
def test_a_paused_client_is_declared_dead_and_resumes_from_its_commit(start_hub: StartHub, tmp_path: Path) -> None:
    """Scenario 4 (client side): SIGSTOP a durable consumer's process past the heartbeat bound while
    messages keep coming; the hub declares it dead within the bound; after SIGCONT it reconnects
    and reads on from its committed position with nothing skipped."""
    figures = client_pause(start_hub, tmp_path / "data", heartbeat=0.5, messages=60)
    assert figures["declared_dead_after_s"] is not None, figures
    assert figures["declared_dead_after_s"] <= figures["heartbeat_bound_s"] + 1.0  # + one tick and a poll
    offsets = figures["offsets"]
    assert sorted(set(offsets)) == list(range(60)), offsets  # nothing skipped
    assert offsets == sorted(offsets), offsets  # and in order (redelivered offsets are dropped by the SDK)


@pytest.mark.slow
def test_a_live_hub_survives_malformed_connections_floods_drips_and_deaf_subscribers(
    start_hub: StartHub, tmp_path: Path
) -> None:
    """Scenarios 7 and 8 (the live part): a healthy publisher logs every publish while 2,000
    malformed connections, a flood past --max-connections, a slow drip and never-reading
    subscribers hit the hub (10,000 in the long command); nothing acknowledged is lost."""
    run = survive_attack(start_hub, tmp_path / "data", seconds=6, malformed=2000)
    figures = run.figures
    assert figures["hub_alive"], figures
    assert figures["malformed_connections"] >= 2000, figures
    assert figures["connections_refused"] > 0, figures  # the flood passed --max-connections
    assert figures["protocol_errors"] > 0, figures
    assert figures["heartbeat_timeouts"] > 0, figures  # the slow drip was closed at the deadline
    (pub,) = run.publishers
    assert not pub.errors, pub.errors
    assert run.verdict.acknowledged > 0
    assert run.verdict.valid and run.verdict.lost == 0, run.verdict.summary()
    assert run.history.counts()["fail"] == 0


def test_a_length_header_of_2_to_the_32_minus_1_allocates_nothing(hub: HubProcess) -> None:
    """Scenario 7: the bogus length is refused at the header, before any body byte is buffered."""
    with socket.create_connection((hub.host, hub.port), timeout=5) as sock:
        sock.sendall(wire.Hello(client_name="bogus").encode() + b"\x22\xff\xff\xff\xff")
        client = SyncClient(sock)
        client.expect(wire.Welcome)
        error = client.expect(wire.Error)
        assert error.code is wire.ErrorCode.FRAME_TOO_LARGE
    with SyncClient.connect(hub.address) as healthy:
        healthy.send(publish_frame("after.bogus", [b"ok"], seq=1))
        assert healthy.expect(wire.PublishAck).status is wire.AckStatus.STORED


def deaf_connection(hub: HubProcess) -> dict[str, Any]:
    return next(c for c in hub_status(hub.address)["connection_list"] if c["name"] == "deaf")


def test_a_deaf_subscribers_queue_stays_within_its_cap(start_hub: StartHub) -> None:
    """Scenario 6: a drop-oldest subscriber that never reads holds at most --max-pending-bytes
    (plus one batch) while a fast one gets everything; the slow one is told what it lost."""
    cap = 256 << 10
    hub = start_hub("--max-pending-bytes", str(cap))
    with socket.create_connection((hub.host, hub.port)) as deaf, SyncClient.connect(hub.address) as fast, \
            SyncClient.connect(hub.address) as pub:  # fmt: skip
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deaf.sendall(wire.Hello(client_name="deaf").encode() + wire.Sub(
            sub_id=1, patterns=("cap.t",), policy=wire.SlowConsumerPolicy.DROP_OLDEST).encode())  # fmt: skip
        fast.send(wire.Sub(sub_id=1, patterns=("cap.t",)))
        fast.expect(wire.SubOk)
        wait_until(lambda: hub_status(hub.address)["subscriptions"] == 2, timeout=5, what="both subscribed")
        got = 0
        peak = 0
        for i in range(200):
            pub.send(publish_frame("cap.t", [bytes(1000)] * 20, seq=i + 1))
            pub.expect(wire.PublishAck)
            while got < (i + 1) * 20:
                got += fast.expect(wire.Deliver).batch.count
            if i % 20 == 19:
                peak = max(peak, deaf_connection(hub)["pending_bytes"])
        assert got == 4000
        assert 0 < peak <= 1.5 * cap, peak
        assert deaf_connection(hub)["dropped_messages"] > 0
