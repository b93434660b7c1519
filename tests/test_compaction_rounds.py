"""Compaction with a bounded offset map, over clean and dirty parts (docs/compaction.md, "a pass"):
for any history of puts, deletes, segment rolls and passes, and any map size -- down to one key,
so a pass cleans a few records and many passes are needed -- no pass ever loses a key's latest
value or brings a deleted one back, and enough passes leave exactly the latest record of every
live key at its original offset.  In process, on real segment files, through the loop's own
pass (``hub.shell.compactor.compact_topic``: the worker's file work, putting in place, the
checkpoint); the hub-level tests are in tests/test_compaction.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

import wire
from hub.shell.compactor import compact_topic
from hub.storage.batches import SharedBatch, StoredBatch
from hub.storage.compaction_checkpoint import load_checkpoint
from hub.storage.compaction_policy import CompactionPolicy, parse_compact
from hub.storage.offset_map import FULL, MIN_MAP_BYTES, NEW, SLOT_BYTES, OffsetMap
from hub.storage.segment import Segment
from hub.storage.store import LogStore
from hub.storage.topic_log import LogSettings, TopicLog
from wire.records import encode_records, iter_records

TOPIC = "kv.rounds"
TOMBSTONE = wire.encode_headers({wire.TOMBSTONE_HEADER: "1"})
#: every record appended at 1 s (µs since the epoch), passes run at a much later "now"
APPENDED_US = 1_000_000
NOW_US = 10**15

Record = tuple[bytes, bytes, bool]  # (key, data, tombstone)


class Log:
    """One topic log of a real store in a temporary directory, and everything appended to it."""

    def __init__(self, root: Path, policy: CompactionPolicy) -> None:
        self.store = LogStore(root, LogSettings(segment_bytes=1 << 30))
        self.store.open()
        self.store.compaction = policy
        self.policy = policy
        self.topic_log: TopicLog = self.store.log_for(TOPIC, APPENDED_US)
        self.history: list[Record] = []

    def append(self, records: list[tuple[bytes, bytes]], *, tombstone: bool = False, producer: int = 0) -> None:
        """One batch; ``producer``: an idempotent producer's next sequence (0: none)."""
        t = self.topic_log
        seq = t.producers.get(producer, 0) + 1 if producer else 0
        count, region = encode_records(records)
        batch = SharedBatch(TOPIC, t.next_offset, APPENDED_US, 1, t.next_offset + 1, count, region,
                            TOMBSTONE if tombstone else b"")  # fmt: skip
        t.append(batch, topics=(TOPIC,), producer_id=producer, producer_seq=seq, append_ts=APPENDED_US)
        self.history.extend((k, d, tombstone and not d) for k, d in records)

    def roll(self) -> None:
        """Close the active segment (as an append past ``--segment-bytes`` would)."""
        t = self.topic_log
        if t.segments[-1].batches:
            t.segments.append(Segment.create(t.directory, TOPIC, t.next_offset, APPENDED_US, self.store.files))

    def compact(self, now_us: int = NOW_US) -> None:
        trio.run(compact_topic, self.store, self.policy, self.topic_log, now_us)

    def passes_until_clean(self) -> int:
        passes = 0
        while self.policy.due(self.topic_log, NOW_US):
            assert passes <= len(self.history) + 3, "compaction does not converge"
            self.compact()
            self.check()
            passes += 1
        return passes

    def read(self) -> list[tuple[int, Record]]:
        out: list[tuple[int, Record]] = []
        offset = 0
        while offset < self.topic_log.next_offset:
            items = self.topic_log.read(offset, 1 << 20)
            if not items:
                break  # the rest was compacted away
            for item in items:
                assert isinstance(item, StoredBatch), item  # no hole: nothing was damaged
                b = item.batch
                tomb = wire.is_tombstone_block(b.headers)
                for i, (key, data) in enumerate(iter_records(b.records)):
                    out.append((b.base_offset + i, (key, data, tomb and not data)))
                offset = item.next_offset
        return out

    def latest(self) -> dict[bytes, tuple[int, Record]]:
        return {record[0]: (offset, record) for offset, record in enumerate(self.history)}

    def check(self) -> list[tuple[int, Record]]:
        """What must hold after any pass: stable offsets, each once; every latest value present;
        no value of a deleted key without its tombstone."""
        read = self.read()
        offsets = [o for o, _ in read]
        assert offsets == sorted(set(offsets)), "offsets repeated or out of order"
        for offset, record in read:
            assert record == self.history[offset], (offset, record)
        present = set(offsets)
        for key, (offset, (_, _, tomb)) in self.latest().items():
            if not tomb:
                assert offset in present, f"latest value of {key!r} (offset {offset}) lost"
            elif offset not in present:
                assert not [o for o, r in read if r[0] == key], f"deleted {key!r} came back"
        return read

    def close(self) -> None:
        self.store.close()


op = st.one_of(
    st.tuples(st.just("put"), st.lists(st.integers(0, 11), min_size=1, max_size=4), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(0, 11), st.none()),
    st.tuples(st.just("roll"), st.none(), st.none()),
    st.tuples(st.just("pass"), st.none(), st.none()),
)


@settings(max_examples=150, deadline=None)
# A producer's last batch overwritten, kept as its mark (held), later expired: it must go then.
@example(ops=[("put", [0], 1), ("put", [0], 0), ("roll", None, None), ("pass", None, None)], map_bytes=480)
@given(ops=st.lists(op, max_size=40), map_bytes=st.integers(MIN_MAP_BYTES, 40 * SLOT_BYTES))
def test_any_history_and_map_size_ends_with_the_latest_record_per_live_key(
    ops: list[tuple[str, object, object]], map_bytes: int
) -> None:
    """Passes in the history run 1 s after the appends: tombstones and the last batch of each
    producer (puts by producers 1 and 2) are within their retention (10 s on this topic, by
    its --compact entry) and kept.  The passes at the end run long after: everything expired."""
    policy = CompactionPolicy(("kv.> tombstone-seconds=10",), tombstone_seconds=0, map_bytes=map_bytes)
    with tempfile.TemporaryDirectory(prefix="pub0sub-rounds-") as tmp:
        log = Log(Path(tmp), policy)
        try:
            for i, (kind, arg, producer) in enumerate(ops):
                if kind == "put":
                    assert isinstance(arg, list) and isinstance(producer, int)
                    log.append([(b"k%02d" % k, b"v%d.%d" % (i, j)) for j, k in enumerate(arg)], producer=producer)
                elif kind == "delete":
                    assert isinstance(arg, int)
                    log.append([(b"k%02d" % arg, b"")], tombstone=True)
                elif kind == "roll":
                    log.roll()
                elif len(log.topic_log.segments) > 1:
                    log.compact(APPENDED_US + 1_000_000)
                    log.check()
            log.append([(b"end", b"end")])
            log.roll()  # everything closed: a pass may clean all of it
            log.passes_until_clean()
            read = log.check()
            # Exactly the latest record of every live key (the tombstones expired and went).
            live = {o for o, (_, _, tomb) in log.latest().values() if not tomb}
            assert [o for o, _ in read] == sorted(live)
            view: dict[bytes, bytes] = {}
            for _, (key, data, tomb) in read:  # an ``earliest`` reader applying what it reads
                if tomb:
                    view.pop(key, None)
                else:
                    view[key] = data
            assert view == {k: d for _, (k, d, tomb) in log.latest().values() if not tomb}
            assert load_checkpoint(log.topic_log.directory).clean_end == log.topic_log.segments[-1].base_offset
        finally:
            log.close()


def test_a_map_smaller_than_the_keys_cleans_in_rounds_and_the_checkpoint_says_where(tmp_path: Path) -> None:
    """300 keys, a map of 10: each pass cleans about 10 keys' worth of the dirty part, the next
    goes on from its checkpoint; the clean part is read once per pass, not twice."""
    map_bytes = OffsetMap.bytes_for(10)
    log = Log(tmp_path, CompactionPolicy(("kv.>",), map_bytes=map_bytes))
    try:
        for r in range(3):
            log.append([(b"k%03d" % k, b"r%d" % r) for k in range(300)])
            log.roll()
        capacity = OffsetMap(map_bytes).capacity
        assert 10 <= capacity < 300
        passes = log.passes_until_clean()
        assert passes >= 900 // capacity  # a round per map-full of dirty records
        assert log.policy.last_map_capacity <= capacity
        assert load_checkpoint(log.topic_log.directory).clean_end == 900
        assert len(log.check()) == 300
        # A new dirty part: one pass, reading it twice and the clean part once.
        log.append([(b"k000", b"new")])
        log.roll()
        clean_bytes = sum(s.size for s in log.topic_log.segments[:-2])
        dirty_bytes = log.topic_log.segments[-2].size
        assert log.passes_until_clean() == 1
        assert log.policy.last_bytes_read <= clean_bytes + 2 * dirty_bytes
        assert log.policy.status(log.store.logs, NOW_US)["topics"][TOPIC]["clean_end"] == 901
    finally:
        log.close()


def test_a_tombstone_survives_one_pass_in_the_clean_part(tmp_path: Path) -> None:
    """Kafka's rule: a tombstone goes only once it is in the clean part and past its retention,
    so a reader of the dirty part (a pass behind) still meets it."""
    log = Log(tmp_path, CompactionPolicy(("kv.> tombstone-seconds=0",)))
    try:
        log.append([(b"a", b"1"), (b"b", b"1")])
        log.append([(b"a", b"")], tombstone=True)
        log.roll()
        log.compact()  # the tombstone was dirty: it stays, the value it deleted goes
        assert [r for _, r in log.check()] == [(b"b", b"1", False), (b"a", b"", True)]
        assert log.policy.due(log.topic_log, NOW_US)  # its retention is over: due again
        log.compact()
        assert [r for _, r in log.check()] == [(b"b", b"1", False)]
    finally:
        log.close()


def test_compact_entries_and_their_refusals() -> None:
    assert parse_compact("kv.>") == parse_compact(" kv.>  ")
    assert parse_compact("audit.*  tombstone-seconds=600").tombstone_seconds == 600
    policy = CompactionPolicy(("audit.> tombstone-seconds=5", "kv.>", "audit.x"), tombstone_seconds=60)
    assert policy.patterns == ("audit.>", "kv.>", "audit.x")
    assert (policy.tombstone_seconds_for("audit.x"), policy.tombstone_seconds_for("kv.a")) == (5, 60)
    assert not policy.applies("other")
    # The first matching entry that gives a retention, whatever comes before it without one.
    later = CompactionPolicy(("kv.>", "kv.x tombstone-seconds=1"), tombstone_seconds=60)
    assert (later.tombstone_seconds_for("kv.x"), later.tombstone_seconds_for("kv.y")) == (1, 60)
    for bad, words in [("kv.> tombstone=5", "unknown option"), ("kv.> tombstone-seconds=-1", ">= 0"),
                       ("kv.> tombstone-seconds=soon", ">= 0"), ("kv..x", "pattern"), ("", "empty")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            parse_compact(bad)
    with pytest.raises(ValueError, match="compaction_map_bytes"):
        CompactionPolicy(("kv",), map_bytes=MIN_MAP_BYTES - 1)


def test_the_offset_map_holds_its_capacity_and_refuses_a_new_key_beyond() -> None:
    offsets = OffsetMap(OffsetMap.bytes_for(1000))
    assert offsets.capacity >= 1000 and offsets.nbytes == OffsetMap.bytes_for(1000)
    for i in range(offsets.capacity):
        assert offsets.put(b"key-%d" % i, i) == NEW
    assert offsets.put(b"one more", 5) == FULL and offsets.get(b"one more") == -1
    assert offsets.put(b"key-7", 10**12) == 7  # a key it holds: updated, the offset it replaced returned
    assert [offsets.get(b"key-%d" % i) for i in (0, 7, 999)] == [0, 10**12, 999]
    assert [offsets.get(b"absent-%d" % i) for i in range(10_000)] == [-1] * 10_000
    assert offsets.entries == offsets.capacity
