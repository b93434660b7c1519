"""The ``pub0sub`` sink's vectorised path: Arrow batches -> record regions -> whole frames.

The reference is the sink's earlier path, which every frame a retried task sends must still
match: each row given to the client's ``publish`` in turn (``client.publish(topic, value,
key=key)``, the last row in an acknowledged frame).  First byte for byte on the client's real
batching code (no hub needed to compare bytes), then against a real hub: a task that the per-row
path began and that died is completed by the vectorised path under the same producer id, with
nothing lost or doubled.  (Headers written through Spark: tests/test_spark_source.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdk
from sdk.batching import PublishBuffer
from sdk.spark.hubs import abandon
from sdk.spark.writing import Headers, encode_rows, producer_id_for, publish_all_but_last, publish_batches
from tests.support.hubprocess import HubProcess
from tests.support.waiting import wait_until

Row = tuple[str, bytes, bytes | None, Headers]
HEADERS = pa.map_(pa.string(), pa.binary())


class FrameLog:
    """A client's real :class:`PublishBuffer`, keeping the frames it would send, in order."""

    def __init__(self, flush_bytes: int, max_body: int | None) -> None:
        self.frames: list[bytes] = []
        self.buffer = PublishBuffer(producer_id=42, flush_bytes=flush_bytes, emit=self.take)
        if max_body is not None:
            self.buffer.set_max_body(max_body)

    def take(self) -> None:
        frame, _ = self.buffer.take_frame()
        if frame:
            self.frames.append(frame)

    # What BlockingClient does with these calls, minus the socket.
    def publish(self, topics: str, data: bytes, *, key: bytes | None = None, headers: Headers = None) -> None:
        if self.buffer.add(topics, data, key, headers):
            self.take()

    def publish_encoded(self, topics: str, records: Any, ends: list[int], *, headers: Headers = None) -> int:
        return self.buffer.add_encoded(topics, records, ends, headers)

    def finish(self, last: Row | None) -> list[bytes]:
        if last is not None:
            self.buffer.add_acked(*last)
            self.take()
        return self.frames


def python_rows(batches: list[pa.RecordBatch], topic_option: str | None) -> list[Row]:
    """The rows as the earlier sink saw them: one Python tuple each."""
    rows: list[Row] = []
    for batch in batches:
        columns = batch.to_pydict()
        n = batch.num_rows
        for i in range(n):
            value, key = columns["value"][i], columns.get("key", [None] * n)[i]
            pairs = columns.get("headers", [None] * n)[i]
            rows.append((
                topic_option or columns["topic"][i],
                value.encode() if isinstance(value, str) else value,
                key.encode() if isinstance(key, str) else key,
                dict(pairs) if pairs else None,
            ))  # fmt: skip
    return rows


Outcome = tuple[list[bytes], str | None]


def per_row_frames(
    batches: list[pa.RecordBatch], topic_option: str | None, flush: int, max_body: int | None
) -> Outcome:
    """The frames, and the error that stopped the task (a message too big for a frame), if any."""
    log = FrameLog(flush, max_body)
    rows = python_rows(batches, topic_option)
    try:
        for topic, value, key, headers in rows[:-1]:
            log.publish(topic, value, key=key, headers=headers)
        return log.finish(rows[-1] if rows else None), None
    except ValueError as exc:
        return log.frames, str(exc)


def vectorised_frames(
    batches: list[pa.RecordBatch], topic_option: str | None, flush: int, max_body: int | None
) -> Outcome:
    log = FrameLog(flush, max_body)
    try:
        return log.finish(publish_all_but_last(log, batches, topic_option, {})), None
    except ValueError as exc:
        return log.frames, str(exc)


@st.composite
def arrow_batches(draw: st.DrawFn) -> list[pa.RecordBatch]:
    string_values = draw(st.booleans())
    batches = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(0, 40))
        # Few topics and header maps: runs of equal ones, as real data has, and changes between them.
        topics = draw(st.lists(st.sampled_from(["a", "b", "orders.eu"]), min_size=n, max_size=n))
        sizes = st.sampled_from([0, 1, 7, 64, 300, 1500])
        values = [draw(st.binary(min_size=s, max_size=s)) for s in draw(st.lists(sizes, min_size=n, max_size=n))]
        keys = draw(st.lists(st.one_of(st.none(), st.sampled_from([b"", b"k1", b"key-22", b"x" * 200])),
                             min_size=n, max_size=n))  # fmt: skip
        maps = st.sampled_from([None, None, [], [("trace", b"4bf9")], [("raw", b"\x00\xff"), ("tenant", b"eu")]])
        headers = draw(st.lists(maps, min_size=n, max_size=n))
        columns: dict[str, pa.Array] = {
            "topic": pa.array(topics, pa.string()),
            "value": pa.array([v.hex() for v in values]) if string_values else pa.array(values, pa.binary()),
            "key": pa.array(keys, pa.binary()),
        }
        if draw(st.booleans()):
            columns["headers"] = pa.array(headers, HEADERS)
        batches.append(pa.RecordBatch.from_pydict(columns))
    return batches


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=arrow_batches(),
    topic_option=st.sampled_from([None, "out"]),
    flush=st.sampled_from([1, 100, 700, 4096, 65536]),
    # A small hub body limit makes the "next record would not fit" boundary come before flush_bytes.
    max_body=st.sampled_from([None, 2000, 5000]),
)
def test_vectorised_frames_are_the_per_row_frames(
    batches: list[pa.RecordBatch], topic_option: str | None, flush: int, max_body: int | None
) -> None:
    expected = per_row_frames(batches, topic_option, flush, max_body)
    assert vectorised_frames(batches, topic_option, flush, max_body) == expected
    frames, error = expected
    if any(b.num_rows for b in batches) and error is None:
        assert frames  # the comparison is not between two empty lists


def test_encoded_rows_cut_runs_and_refuse_bad_rows() -> None:
    batch = pa.RecordBatch.from_pydict({
        "topic": ["a", "a", "b", "a"], "value": [b"1", b"22", b"", b"4"], "key": [b"k", None, b"", b"kk"],
        "headers": pa.array([None, None, [("t", b"x")], [("t", b"x")]], HEADERS),
    })  # fmt: skip
    rows = encode_rows(batch, None)
    assert [(first, end, topic, headers) for first, end, topic, headers in rows.runs] == [
        (0, 2, "a", None), (2, 3, "b", {"t": b"x"}), (3, 4, "a", {"t": b"x"}),
    ]  # fmt: skip
    records = [
        b"\x00\x01\x00\x00\x00\x01k1",
        b"\x00\x00\x00\x00\x00\x0222",
        b"\x00" * 6,
        b"\x00\x02\x00\x00\x00\x01kk4",
    ]
    assert bytes(memoryview(rows.records)[rows.ends[0] : rows.ends[4]]) == b"".join(records)
    assert [rows.row(i) for i in (1, 3)] == [("a", b"22", None, None), ("a", b"4", b"kk", {"t": b"x"})]
    assert encode_rows(batch, "opt").runs == [(0, 2, "opt", None), (2, 4, "opt", {"t": b"x"})]
    with pytest.raises(ValueError, match="a row has a null 'value'"):
        encode_rows(pa.RecordBatch.from_pydict({"value": [b"1", None]}), "t")
    with pytest.raises(ValueError, match="null or empty 'topic'"):
        encode_rows(pa.RecordBatch.from_pydict({"value": [b"1", b"2"], "topic": ["a", ""]}), None)
    with pytest.raises(ValueError, match="give option 'topic' or a 'topic' column"):
        encode_rows(pa.RecordBatch.from_pydict({"value": [b"1"]}), None)
    with pytest.raises(ValueError, match="key of 70000 bytes exceeds"):
        encode_rows(pa.RecordBatch.from_pydict({"value": [b"1"], "key": [b"k" * 70000]}), "t")


def test_add_encoded_refuses_what_add_refuses() -> None:
    """A record too big for any frame, and a topic the topic rule refuses: the same errors as ``add``."""
    rows = encode_rows(pa.RecordBatch.from_pydict({"value": [b"small", b"x" * 3000]}), "t")
    buffer = PublishBuffer(producer_id=1, flush_bytes=1 << 16)
    buffer.set_max_body(2000)
    with pytest.raises(ValueError, match="message of 3000 bytes does not fit in one frame") as encoded:
        buffer.add_encoded("t", rows.records, rows.ends)
    with pytest.raises(ValueError) as one_by_one:
        _add_all(2000, [b"small", b"x" * 3000])
    assert str(encoded.value) == str(one_by_one.value)
    with pytest.raises(sdk.InvalidTopicError):
        PublishBuffer(producer_id=1).add_encoded("bad topic.*", rows.records, rows.ends)


def _add_all(max_body: int, values: list[bytes]) -> None:
    buffer = PublishBuffer(producer_id=1, flush_bytes=1 << 16)
    buffer.set_max_body(max_body)
    for value in values:
        buffer.add("t", value)


# -- against a real hub ---------------------------------------------------------------------------


def stored_values(address: str, topic: str, count: int) -> list[bytes]:
    values: list[bytes] = []
    with sdk.connect_blocking(address) as client, client.subscribe(topic, start="earliest") as sub:
        while len(values) < count:
            batch = sub.next_batch(timeout=10)
            assert batch, f"only {len(values)} of {count} messages of {topic!r} arrived"
            values += [m.data for m in batch]
    return values


def stored(address: str, topic: str) -> int:
    with sdk.connect_blocking(address) as client:
        return next((t["next_offset"] for t in client.status()["topic_list"] if t["topic"] == topic), 0)


def duplicate_frames(address: str) -> int:
    with sdk.connect_blocking(address) as client:
        return int(client.status()["counters"].get("duplicate_batches", 0))


def test_vectorised_sink_completes_a_task_the_per_row_sink_began(start_hub: Callable[..., HubProcess],
                                                                 tmp_path: Path) -> None:  # fmt: skip
    """A task retried across the upgrade: its first attempt published row by row (the earlier
    sink) and died mid-way; the retry, vectorised, has the same producer id and must send the
    same frames, or the hub would keep a mix of both (rows lost or doubled)."""
    hub = start_hub("--data-dir", str(tmp_path / "hub"))
    values = [b"row-%05d-" % i + b"v" * (i % 50) for i in range(6000)]
    keys = [None if i % 3 == 0 else b"key-%d" % (i % 7) for i in range(6000)]
    batches = [
        pa.RecordBatch.from_pydict({"value": values[i : i + 1000], "key": keys[i : i + 1000]})
        for i in range(0, 6000, 1000)
    ]
    pid = producer_id_for("stream", "query-1", 7, 0)

    first = sdk.connect_blocking(hub.address, producer_id=pid, flush_bytes=4096, reconnect=None)
    for value, key in zip(values[:3500], keys[:3500], strict=True):
        first.publish("upgrade", value, key=key)  # sends each frame as it fills
    # The executor dies: its full frames were sent, its half-filled one never is (the sink's abandon()).
    unsent = first._proto.buffer.unframed
    abandon(first)
    assert 0 < unsent < 3500
    wait_until(lambda: stored(hub.address, "upgrade") == 3500 - unsent, timeout=20, what="the full frames stored")
    assert stored_values(hub.address, "upgrade", 3500 - unsent) == values[: 3500 - unsent]

    before = duplicate_frames(hub.address)
    result = publish_batches(iter(batches), topic_option="upgrade", hubs=(hub.address,), producer_id=pid,
                             partition=0, connect_timeout=5.0, flush_bytes=4096)  # fmt: skip
    assert result.rows == 6000 and not result.replayed
    assert stored_values(hub.address, "upgrade", 6000) == values
    assert stored(hub.address, "upgrade") == 6000
    # The frames the first attempt stored were dropped whole as duplicates, not stored again.
    assert duplicate_frames(hub.address) - before > 0


def test_task_fails_mid_way_then_retry_is_exactly_once(start_hub: Callable[..., HubProcess], tmp_path: Path) -> None:
    """The vectorised path's own retry: the first attempt dies between two Arrow batches."""
    hub = start_hub("--data-dir", str(tmp_path / "hub"))
    values = [b"row-%05d" % i for i in range(5000)]
    batches = [pa.RecordBatch.from_pydict({"value": values[i : i + 700]}) for i in range(0, 5000, 700)]
    pid = producer_id_for("batch", "job-1", 0)
    kw: dict[str, Any] = {"topic_option": "retry", "hubs": (hub.address,), "producer_id": pid, "partition": 0,
                          "connect_timeout": 5.0, "flush_bytes": 4096}  # fmt: skip

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches[:5]
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        publish_batches(failing(), **kw)
    partial = stored(hub.address, "retry")
    assert 0 < partial < 3500  # whole frames only
    result = publish_batches(iter(batches), **kw)
    assert result.rows == 5000 and not result.replayed
    assert stored_values(hub.address, "retry", 5000) == values
    again = publish_batches(iter(batches), **kw)  # a replay of a task that had finished
    assert again.replayed and again.rows == 5000
    assert stored(hub.address, "retry") == 5000
