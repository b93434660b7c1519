"""Compacted topics (issue 21, item 4) on real ``python -m hub`` processes and real segment files:
the latest record per key at its original offset, tombstones kept for their retention, an
``earliest`` read as a key-value snapshot then live, durable and group positions across
compaction, and the decoder reading a compacted segment (docs/compaction.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sdk
import wire
from hub.storage.compaction_checkpoint import load_checkpoint
from hub.storage.offset_map import OffsetMap
from tests.support.compacting import (
    SEGMENT_BYTES,
    TOPIC,
    History,
    StartHub,
    active_base,
    check_read,
    compacting_hub,
    compaction_status,
    read_all,
    topic_dir,
    wait_compacted,
)
from tests.support.hubprocess import ROOT
from tests.support.scrape import scrape, value
from tests.support.syncclient import SyncClient, publish_frame

pytestmark = pytest.mark.slow


def offsets_of(sub: sdk.BlockingSubscription, count: int) -> list[int]:
    """The offsets of the next ``count`` messages; then one more wait, which settles the last
    batch taken (``ack="auto"`` acknowledges a batch once the next is asked for)."""
    got: list[int] = []
    while len(got) < count and (batch := sub.next_batch(timeout=5)) is not None:
        got.extend(m.offset for m in batch)
    assert sub.next(timeout=0.3) is None
    return got


def test_keeps_the_latest_value_per_key_at_its_offset(start_hub: StartHub, tmp_path: Path) -> None:
    hub = compacting_hub(start_hub, tmp_path / "data")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=30, keys=20)
    status = wait_compacted(hub.address)
    assert status["records_removed"] > 0
    messages = read_all(hub.address)
    check_read(messages, history)
    # Below the active segment every key appears once: what a pass leaves.
    active = active_base(tmp_path / "data")
    closed = [m.key for m in messages if m.offset < active]
    assert len(closed) == len(set(closed))
    assert len(messages) < len(history.records) / 5
    # Fewer, smaller files than the log had: consecutive compacted segments were merged.
    files = list(topic_dir(tmp_path / "data").glob("*.log"))
    assert sum(f.stat().st_size for f in files) < len(history.records) * 20
    leftovers = [p for p in topic_dir(tmp_path / "data").iterdir() if p.suffix in (".swap", ".compacting")]
    assert not leftovers


def test_a_map_far_smaller_than_the_keys_cleans_in_rounds(start_hub: StartHub, tmp_path: Path) -> None:
    """A hub whose offset map holds 8 keys, a topic of 40: passes clean the dirty part a map-full
    at a time, each going on from the checkpoint the last one wrote, until the log is clean;
    status and metrics say where the clean part ends and how full the map was."""
    data = tmp_path / "data"
    map_bytes = OffsetMap.bytes_for(8)
    hub = compacting_hub(start_hub, data, "--compaction-map-bytes", str(map_bytes), "--metrics-listen",
                         "127.0.0.1:0", "--compact-check-seconds", "0.05")  # fmt: skip
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=10, keys=40)
        history.delete(client, b"k003")
        history.publish_rounds(client, rounds=2, keys=3, tag="tail")
    status = wait_compacted(hub.address, within=120)
    capacity = OffsetMap(map_bytes).capacity
    assert status["passes"] >= 40 // capacity, status  # rounds: one map-full of keys each
    assert status["map_bytes"] == map_bytes and 0 < status["last_map_capacity"] <= capacity
    active = active_base(data)
    assert status["topics"][TOPIC]["clean_end"] == active == status["topics"][TOPIC]["active_base"]
    assert load_checkpoint(topic_dir(data)).clean_end == active
    messages = read_all(hub.address)
    check_read(messages, history)
    closed = [m.key for m in messages if m.offset < active]
    assert len(closed) == len(set(closed)), "below the checkpoint every key once"
    m = scrape(hub.metrics_address)
    assert value(m, "pub0sub_compaction_clean_end_offset", topic=TOPIC) == active
    assert value(m, "pub0sub_compaction_passes_total") == compaction_status(hub.address)["passes"]
    assert 0 < value(m, "pub0sub_compaction_map_capacity") <= capacity
    assert value(m, "pub0sub_compaction_bytes_read_total") > 0


def test_per_topic_tombstone_retention_from_the_compact_entry(start_hub: StartHub, tmp_path: Path) -> None:
    """``--compact "kv.> tombstone-seconds=0"`` on a hub whose default keeps tombstones a day:
    the entry decides, so the tombstone goes once it is in the clean part."""
    data = tmp_path / "data"
    hub = compacting_hub(start_hub, data, "--compact", "kv.> tombstone-seconds=0", "--compact-tombstone-seconds",
                         "86400")  # fmt: skip
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=5, keys=10)
        history.delete(client, b"k004")
        history.publish_rounds(client, rounds=10, keys=3, tag="b")
    status = wait_compacted(hub.address)
    assert status["rules"] == [{"pattern": "kv.>", "tombstone_seconds": 86400.0},
                               {"pattern": "kv.>", "tombstone_seconds": 0.0}]  # fmt: skip
    messages = read_all(hub.address)
    check_read(messages, history)
    assert status["passes"] >= 2 and [m for m in messages if m.key == b"k004"] == []


def test_a_producer_retry_is_a_duplicate_after_compaction_and_a_restart(start_hub: StartHub, tmp_path: Path) -> None:
    """An idempotent producer's last batch, overwritten by others and compacted away, would leave
    the producer table rebuilt on a restart without its sequence: a retry of that batch (its ack
    lost) would be stored again.  The pass keeps the last record of each producer's newest batch
    for the tombstone retention (docs/compaction.md)."""
    data = tmp_path / "data"
    hub = compacting_hub(start_hub, data)
    producer = 0xC0FFEE
    batch = publish_frame(TOPIC, [b"from the producer"], producer=producer, seq=7, key=b"k000")
    with SyncClient.connect(hub.address) as raw:
        raw.send(batch)
        assert raw.expect(wire.PublishAck).status is wire.AckStatus.STORED
    history = History()
    history.records.append((b"k000", b"from the producer", False))
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=20, keys=5)  # k000 overwritten; segments roll past offset 0
    assert active_base(data) > 0
    wait_compacted(hub.address)
    hub.stop()
    hub = compacting_hub(start_hub, data)
    with SyncClient.connect(hub.address) as raw:
        raw.send(batch)
        assert raw.expect(wire.PublishAck).status is wire.AckStatus.DUPLICATE
    messages = read_all(hub.address)
    assert [m.offset for m in messages if m.data == b"from the producer"] == [0]
    closed = [m.key for m in messages if 0 < m.offset < active_base(data)]
    assert closed and len(closed) == len(set(closed))  # the rest compacted as before: a key once


def test_a_set_naming_a_compacted_topic_and_another_is_refused(start_hub: StartHub, tmp_path: Path) -> None:
    """Stored once per topic, such a message could be skipped by a subscription matching both
    once compaction removed the compacted copy: the hub refuses it whole instead."""
    hub = compacting_hub(start_hub, tmp_path / "data")
    with SyncClient.connect(hub.address) as raw:
        raw.send(publish_frame(("plain.cfg", TOPIC), [b"both"], key=b"k"))
        error = raw.expect(wire.Error)
    assert error.code is wire.ErrorCode.INVALID_TOPIC and f"{TOPIC} is a compacted topic" in error.reason
    with sdk.connect_blocking(hub.address) as client:
        client.publish_acked(("plain.cfg", "plain.other"), b"two plain topics are fine")
        client.publish_acked(TOPIC, b"alone", key=b"k")
    assert [m.data for m in read_all(hub.address, TOPIC, quiet=0.5)] == [b"alone"]
    assert [m.data for m in read_all(hub.address, "plain.cfg", quiet=0.5)] == [b"two plain topics are fine"]


def test_a_topic_not_named_is_not_compacted(start_hub: StartHub, tmp_path: Path) -> None:
    hub = compacting_hub(start_hub, tmp_path / "data")
    with sdk.connect_blocking(hub.address) as client:
        for r in range(30):
            for k in range(20):
                client.publish("plain.cfg", b"r%d" % r, key=b"k%d" % k)
            client.flush()
        client.publish_acked("plain.cfg", b"end")
    assert len(read_all(hub.address, "plain.cfg", quiet=0.5)) == 601
    assert wait_compacted(hub.address, at_least=0)["passes"] == 0


def test_tombstones_stay_for_their_retention_then_go(start_hub: StartHub, tmp_path: Path) -> None:
    data = tmp_path / "data"
    hub = compacting_hub(start_hub, data, "--compact-tombstone-seconds", "3600")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=5, keys=20)
        deleted = history.delete(client, b"k007")
        history.publish_rounds(client, rounds=10, keys=5, tag="b")  # closes the tombstone's segment
    wait_compacted(hub.address)
    assert deleted < active_base(data)
    messages = read_all(hub.address)
    check_read(messages, history)
    about = [m for m in messages if m.key == b"k007"]
    assert [(m.offset, m.data) for m in about] == [(deleted, b"")], "older values go, the tombstone stays"
    assert wire.TOMBSTONE_HEADER in about[0].headers
    hub.stop()
    # The same log on a hub that keeps tombstones 0 s: the next pass removes it.
    hub = compacting_hub(start_hub, data, "--compact-tombstone-seconds", "0")
    wait_compacted(hub.address)
    messages = read_all(hub.address)
    check_read(messages, history)
    assert [m.offset for m in messages if m.key == b"k007"] == []


def test_earliest_is_the_current_value_of_every_key_then_live(start_hub: StartHub, tmp_path: Path) -> None:
    hub = compacting_hub(start_hub, tmp_path / "data")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=20, keys=30)
        history.delete(client, b"k002")
        history.publish_rounds(client, rounds=3, keys=2, tag="tail")
        wait_compacted(hub.address)
        with client.subscribe(TOPIC, start="earliest") as sub:
            view: dict[bytes, bytes] = {}
            while (batch := sub.next_batch(timeout=1.0)) is not None:
                for m in batch:
                    if wire.TOMBSTONE_HEADER in m.headers:
                        view.pop(m.key or b"", None)
                    else:
                        view[m.key or b""] = m.data
            expected = {k: d for k, (_, d, tomb) in history.latest().items() if not tomb}
            assert view == expected
            ack = client.publish_acked(TOPIC, b"new", key=b"k001")
            live = sub.next(timeout=10)
            assert live is not None and (live.offset, live.key, live.data) == (ack.offsets[TOPIC], b"k001", b"new")


def test_durable_position_survives_compaction(start_hub: StartHub, tmp_path: Path) -> None:
    hub = compacting_hub(start_hub, tmp_path / "data")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=4, keys=20)
        with client.subscribe(TOPIC, start="earliest", durable="d") as sub:
            taken = [sub.next(timeout=10) for _ in range(30)]
            assert [m.offset for m in taken if m is not None] == list(range(30))
        # Every key set again, many times: the offsets after the durable position are compacted away.
        history.publish_rounds(client, rounds=20, keys=20, tag="later")
        wait_compacted(hub.address)
        survivors = [m.offset for m in read_all(hub.address)]
        assert 30 not in survivors
        expected = [o for o in survivors if o >= 30]
        with client.subscribe(TOPIC, durable="d") as sub:
            assert offsets_of(sub, len(expected)) == expected  # resumed at the next survivor, nothing twice
            positions = sub.commit()
        # The durable position passed the removed offsets: it is at the end of the log.
        assert positions[TOPIC] == len(history.records)


def test_group_settles_offsets_compaction_removed(start_hub: StartHub, tmp_path: Path) -> None:
    hub = compacting_hub(start_hub, tmp_path / "data")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=25, keys=20)
        wait_compacted(hub.address)
        survivors = [m.offset for m in read_all(hub.address)]
        with client.subscribe(TOPIC, start="earliest", group="g") as sub:
            assert offsets_of(sub, len(survivors)) == survivors
            sub.commit()
            group = next(g for g in client.status()["groups"] if g["group"] == "g")
        assert group["acked_floor"][TOPIC] == len(history.records)


def test_the_decoder_reads_a_compacted_segment(start_hub: StartHub, tmp_path: Path) -> None:
    hub = compacting_hub(start_hub, tmp_path / "data")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=30, keys=20)
    wait_compacted(hub.address)
    hub.stop()
    first = min(topic_dir(tmp_path / "data").glob("*.log"))
    done = subprocess.run([sys.executable, "-m", "wire", "--json", str(first)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "LOG_BATCH" in done.stdout and "SEGMENT_HEADER" in done.stdout
    assert first.stat().st_size < SEGMENT_BYTES * 4


def test_the_spark_reader_counts_removed_offsets_as_no_loss(start_hub: StartHub, tmp_path: Path) -> None:
    """A Spark partition's range over a compacted topic: every survivor, no DataLossError
    (fail_on_data_loss=True), whatever its bounds fall on."""
    from sdk.spark.reading import read_range

    hub = compacting_hub(start_hub, tmp_path / "data")
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=30, keys=20)
    wait_compacted(hub.address)
    survivors = [m.offset for m in read_all(hub.address)]
    end = len(history.records)
    for start, stop in [(0, end), (31, 400), (survivors[1] + 1, end)]:
        batches = list(read_range([hub.address], TOPIC, start, stop, fail_on_data_loss=True))
        offsets = [o for b in batches for o in b.column("offset").to_pylist()]
        assert offsets == [o for o in survivors if start <= o < stop]


def test_compaction_settings_from_file_and_their_refusals(tmp_path: Path) -> None:
    from hub.config import load_config

    toml = tmp_path / "hub.toml"
    toml.write_text(f'[hub]\ndata-dir = "{tmp_path}"\ncompact = ["kv.>", "config"]\ncompact-tombstone-seconds = 60\n')
    config = load_config(file=toml, env={})
    assert (config.compact, config.compact_tombstone_seconds) == (("kv.>", "config"), 60.0)
    with pytest.raises(ValueError, match="data directory"):
        load_config(env={}, overrides={"compact": ("kv.>",)})
    with pytest.raises(ValueError, match="pattern"):
        load_config(env={}, overrides={"data_dir": tmp_path, "compact": ("kv..x",)})
    with pytest.raises(ValueError, match="compact_check_seconds"):
        load_config(env={}, overrides={"data_dir": tmp_path, "compact": ("kv",), "compact_check_seconds": 0})


def test_the_spark_reader_asks_which_topics_the_hub_compacts() -> None:
    from sdk.spark.reading import hub_compacts

    status = {"storage": {"compaction": {"patterns": ["kv.>", "config"]}}}
    assert hub_compacts(status, "kv.a") and hub_compacts(status, "kv.a.b") and hub_compacts(status, "config")
    assert not hub_compacts(status, "kv") and not hub_compacts(status, "configs")
    assert not hub_compacts({"storage": {}}, "kv.a") and not hub_compacts({}, "kv.a")  # a jump there is loss
