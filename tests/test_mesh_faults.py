"""Acknowledged messages reach every interested hub whatever the order of faults.

Real ``python -m hub`` subprocesses meshed on 127.0.0.1; faults are SIGSTOP /
SIGCONT (a paused hub), SIGKILL and a restart on the same data dir.  An
idempotent producer logs every publish (invoked, then ok / unknown) and the
history checker reads the interested hub's log and its durable subscribers.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

import sdk
from tests.support.cluster import Cluster, Hub
from tests.support.faultplan import HARNESS_ORDER, all_plans, run_plan
from tests.support.history import History, check
from tests.support.publisher import Publisher, wait_progress
from tests.support.syncclient import wait_log_holds

HEARTBEAT = 0.5
MISSES = 3
#: How long the drain may take once every hub runs again (a fresh dial, a replay from the log).
DRAIN_SECONDS = 60.0


def drain_durable(hub: Hub, topics: list[str], name: str, want: set[bytes]) -> dict[str, list[tuple[int, bytes]]]:
    """Attach durable ``name`` on ``hub`` and read until ``want`` arrived or the drain time is up."""
    got: dict[str, list[tuple[int, bytes]]] = {t: [] for t in topics}
    seen: set[bytes] = set()
    deadline = time.monotonic() + DRAIN_SECONDS
    with (
        sdk.connect_blocking(hub.address) as client,
        client.subscribe(topics, durable=name, start="earliest", ack="auto") as sub,
    ):
        while not want <= seen and time.monotonic() < deadline:
            msg = sub.next(timeout=1.0)
            if msg is not None:
                got[msg.topic].append((msg.offset, msg.data))
                seen.add(msg.data)
    return got


@pytest.mark.slow
def test_paused_subscriber_hub_gets_what_a_killed_publisher_hub_acknowledged(tmp_path: Path) -> None:
    """Hub 3 paused as traffic starts, hub 2 killed and restarted while hub 3 is still paused, then
    hub 3 resumed: every message hub 2 acknowledged reaches hub 3's log and its durable subscriber,
    once and in order.

    Hub 3 had stored nothing of hub 2's origin when it stopped, so its MESH_HELLO says position 0,
    which used to mean "a new hub: live traffic only"; what hub 2 published before hub 3 came back
    was never sent to it."""
    with Cluster(tmp_path, heartbeat_interval=HEARTBEAT, heartbeat_misses=MISSES) as cl:
        _h1, h2, h3 = cl.start(3)
        cl.wait_converged()
        topics = ["fault.a", "fault.b"]
        with sdk.connect_blocking(h3.address) as client, client.subscribe(topics, durable="d3", start="earliest"):
            pass  # a standing interest on hub 3 from here on
        for topic in topics:
            cl.wait_interest(h2, topic, h3)
        history = History()
        pub = Publisher(history, lambda: h2.address, topics, producer=0xB2, per_batch=10, window=8)
        h3.signal(signal.SIGSTOP)
        pub.start()
        try:
            wait_progress(pub, 20)
            time.sleep(cl.heartbeat_bound + 1.0)  # hub 2 declares hub 3 dead meanwhile
            wait_progress(pub, pub.acked_batches + 20)
            h2.kill()
            cl.restart(h2)
            wait_progress(pub, pub.acked_batches + 20, within=20)
        finally:
            pub.stop()
            h3.signal(signal.SIGCONT)
        assert not pub.errors, pub.errors
        acked = {v for op in history.ops if op.status == "ok" for v in op.values}
        log = wait_log_holds(h3.address, topics, acked, timeout=DRAIN_SECONDS)
        result = check(history, log)
        assert result.lost == 0 and result.duplicated == 0 and result.reordered == 0, result.summary()
        durable = drain_durable(h3, topics, "d3", acked)
        result = check(history, durable)
        assert result.lost == 0 and result.duplicated == 0 and result.reordered == 0, result.summary()


#: A fixed sample of tests/support/faultplan.py's search (the whole search is a command:
#: ``python -m tests.support.faultplan --all``): the order the independent harness found, and one
#: order for each other pairing of fault kinds.
SAMPLE = [
    HARNESS_ORDER,
    ("cut h2-h3", "kill h2", "restart h2", "heal h2-h3"),
    ("kill h3", "pause h1", "restart h3", "resume h1"),
    ("pause h1", "cut h1-h3", "resume h1", "heal h1-h3"),
]


def test_the_sample_comes_from_the_systematic_search() -> None:
    plans = set(all_plans())
    assert len(plans) == 225  # 9 faults alone, 36 pairs x 6 interleavings
    assert all(plan in plans for plan in SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("plan", SAMPLE, ids=[" | ".join(p) for p in SAMPLE])
def test_acknowledged_messages_survive_the_fault_plan(plan: tuple[str, ...], tmp_path: Path) -> None:
    result = run_plan(plan, tmp_path)
    assert result.acknowledged > 0
    assert result.ok, result.row()
