"""Resource bounds that hold against one client (issue 17, item 10).

Each test reproduces what an independent harness did to a hub built from main,
on a real ``python -m hub`` subprocess: one limit, reported with an ERROR code,
while a healthy client keeps being served.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import wire
from hub.storage.batches import SharedBatch
from hub.storage.store import LogStore
from hub.storage.topic_log import LogSettings
from tests.support.hubprocess import ROOT, HubProcess
from tests.support.syncclient import SyncClient, publish_frame

StartHub = Callable[..., HubProcess]


def publish_to_many_topics(client: SyncClient, names: list[str], *, per_set: int = 255, seq: int = 1) -> int:
    """One acked PUBLISH per ``per_set`` topics (one message set each); returns the next sequence."""
    for i in range(0, len(names), per_set):
        client.send(publish_frame(tuple(names[i : i + per_set]), [b"x"], seq=seq))
        ack = client.expect(wire.PublishAck, 30)
        assert ack.status is wire.AckStatus.STORED
        seq += 1
    return seq


def test_many_topics_never_exhaust_the_descriptor_limit(start_hub: StartHub, tmp_path: Path) -> None:
    """The harness: ~20,000 topics against ``ulimit -n`` 20,000 made every later publish, from
    anyone, fail with STORAGE_ERROR 'Too many open files', and recovery hit the same wall.
    Here the same at a tenth of the scale: 2,000 topics, a limit of 1,024 descriptors (512 of them
    kept back from clients, a 256-file cache)."""
    args = ["--data-dir", str(tmp_path / "data"), "--durability", "fsync"]
    hub = start_hub(*args, nofile=1024)
    names = [f"many.t{i}" for i in range(2000)]
    with SyncClient.connect(hub.address) as sprayer:
        publish_to_many_topics(sprayer, names)
    with SyncClient.connect(hub.address, name="healthy") as healthy:
        healthy.send(publish_frame("healthy.topic", [b"still served"], seq=1))
        assert healthy.expect(wire.PublishAck).status is wire.AckStatus.STORED
        files = healthy.status()["storage"]["open_files"]
        assert files["open"] <= files["capacity"] <= 256
    hub.stop()
    again = start_hub(*args, nofile=1024)  # recovery opens every segment
    with SyncClient.connect(again.address) as client:
        # A message stored in several topics reaches a subscription once: one subscription per topic.
        some = [*names[::97], "healthy.topic"]
        client.send(*(wire.Sub(sub_id=i, patterns=(name,), start=wire.StartPosition.EARLIEST)
                      for i, name in enumerate(some, 1)))  # fmt: skip
        got = set()
        while len(got) < len(some):
            batch = client.expect(wire.Deliver, 10, skip=(wire.Heartbeat, wire.SubOk)).batch
            got.update((batch.topic, offset, data) for offset, _key, data in batch.messages())
        assert got == {(name, 0, b"x") for name in names[::97]} | {("healthy.topic", 0, b"still served")}
        client.send(publish_frame(names[1], [b"y"], seq=1))
        assert client.expect(wire.PublishAck).ranges == (wire.OffsetRange(topic=names[1], first_offset=1, num=1),)


def test_segments_beyond_the_cache_are_reopened_on_demand(tmp_path: Path) -> None:
    """Appends and reads through a cache of 3 descriptors for 10 topics: the same bytes, never more open."""
    store = LogStore(tmp_path, LogSettings(segment_bytes=200), durability="fsync", max_open_files=3)
    store.open()
    try:
        for round_ in range(5):
            for t in range(10):
                topic_log = store.log_for(f"t{t}", now=1)
                batch = SharedBatch(f"t{t}", topic_log.next_offset, 1, 7, round_ * 10 + t + 1, 1,
                                    b"\x00\x00\x00\x00\x00\x02%02d" % round_)  # fmt: skip
                store.wrote(topic_log.append(batch, topics=(f"t{t}",), producer_id=0, producer_seq=0, append_ts=1))
                assert len(store.files) <= 3
        commit = store.begin_commit()
        store.finish_commit(commit, commit.sync())
        for t in range(10):
            items = store.logs[f"t{t}"].read(0, 1 << 20)
            assert [(s.base_offset, s.batch.records[-2:]) for s in items] == [(r, b"%02d" % r) for r in range(5)]
        assert store.files.evictions > 0
        assert all(s.synced == s.size for lg in store.logs.values() for s in lg.segments)
    finally:
        store.close()
    reopened = LogStore(tmp_path, LogSettings(segment_bytes=200), max_open_files=3)
    reopened.open()
    try:
        assert len(reopened.files) <= 3
        assert sorted(reopened.logs) == [f"t{t}" for t in range(10)]
        assert all(lg.next_offset == 5 for lg in reopened.logs.values())
    finally:
        reopened.close()


BLOCKING_CLIENT_WITH_MANY_FILES = """
import os, sys
import sdk
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the client's socket gets fd >= 1100
with sdk.connect_blocking(sys.argv[1]) as client, client.subscribe("fds.t") as sub:
    client.publish_acked("fds.t", b"beyond 1023")
    message = sub.next(timeout=10)
    print(message.data.decode() if message else "nothing", max(held))
"""


def test_the_blocking_client_works_beside_more_than_1023_open_files(hub: HubProcess) -> None:
    """The harness: ``ValueError: filedescriptor out of range in select()`` (select() stops at 1023)."""
    done = subprocess.run([sys.executable, "-c", BLOCKING_CLIENT_WITH_MANY_FILES, hub.address],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    data, highest = done.stdout.rsplit(" ", 1)
    assert data == "beyond 1023" and int(highest) >= 1100
