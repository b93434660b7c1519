"""Executor side of a write: publish the rows of one task with an idempotent producer id.

Idempotence comes from the hub: per topic it keeps the highest batch sequence stored per
producer id and drops a PUBLISH whose sequence it already has (docs/durability.md).  A task
derives its producer id from ids that a retry of the same task shares (write id or query id,
batch id, partition id), and the client numbers its frames 1, 2, 3 ... with frame boundaries
set only by byte counts -- so the same rows in the same order give the same frames with the
same sequences, and a retried task stores only what the failed attempt did not.

The rows arrive as Arrow batches (``DataSourceArrowWriter``).  Each becomes one region of
wire records built by Arrow and numpy kernels (:func:`encode_rows`), and its runs of rows with
one topic and one headers map go to the client's batching path whole
(:meth:`~sdk.blocking.BlockingClient.publish_encoded`): the Python work is per batch, run and
frame, not per row.  The frames are byte for byte those of ``client.publish`` called per row,
the sink's earlier path (tests/test_spark_sink.py), so a task retried across that upgrade
still matches what its first attempt stored.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.limits import MAX_KEY_BYTES

from .hubs import abandon, connect_first
from .options import NO_ACCESS, HubAccess


def producer_id_for(*parts: object) -> int:
    """A stable non-zero 63-bit producer id from ``parts`` (the same in every process and run)."""
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 1) or 1


@dataclass(slots=True)
class PublishResult:
    """What one task published (a ``WriterCommitMessage`` carries it to the driver)."""

    partition: int = 0
    producer_id: int = 0
    rows: int = 0
    frames: int = 0
    #: the hub already held the task's last frame: this was a replay of a task that had finished
    replayed: bool = False
    per_topic: dict[str, int] = field(default_factory=dict)


#: A record's fixed bytes: ``[u16 key_len][u32 data_len]``.
_RECORD_HEAD = 6
_record_head = struct.Struct(">HI")
#: The headers of a run of rows, as the client takes them (None: no headers).
Headers = dict[str, bytes | str] | None


def _binary_column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """Column ``name`` as ``large_binary`` (STRING is its UTF-8 bytes); None when absent.

    64-bit offsets: the records of a batch, joined, may pass the 2 GiB of ``binary``.
    """
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column.cast(pa.large_binary())


def _topic_changes(batch: pa.RecordBatch) -> tuple[list[str], np.ndarray]:
    """The ``topic`` column as (topic of each run start, run starts), one run per change of topic."""
    index = batch.schema.get_field_index("topic")
    if index < 0:
        raise ValueError("pub0sub write: give option 'topic' or a 'topic' column")
    column = batch.column(index)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if column.null_count or pc.any(pc.equal(pc.binary_length(column), 0)).as_py():
        raise ValueError("pub0sub write: a row has a null or empty 'topic' (and there is no 'topic' option)")
    encoded = pc.dictionary_encode(column)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(codes[1:] != codes[:-1]) + 1))
    names = encoded.dictionary.to_pylist()
    return [names[c] for c in codes[starts].tolist()], starts


def _header_changes(batch: pa.RecordBatch) -> tuple[list[Headers], np.ndarray] | None:
    """The ``headers`` column as (headers of each run start, run starts); None when no row has any.

    A row's map becomes a Python list here (one per row), but the block is encoded once per run
    (the client's buffer remembers the last one).
    """
    index = batch.schema.get_field_index("headers")
    if index < 0 or batch.column(index).null_count == batch.num_rows:
        return None
    rows = batch.column(index).to_pylist()
    starts = [0] + [i for i in range(1, len(rows)) if rows[i] != rows[i - 1]]
    return [dict(rows[i]) if rows[i] else None for i in starts], np.array(starts, dtype=np.int64)


@dataclass(slots=True)
class EncodedRows:
    """One Arrow batch in the wire's record layout, cut into runs of rows that share topic and headers."""

    #: every row's record, back to back
    records: pa.Buffer
    #: row ``i`` is ``records[ends[i]:ends[i + 1]]``
    ends: list[int]
    #: ``(first row, end row, topic, headers)``, in row order
    runs: list[tuple[int, int, str, Headers]]

    @property
    def count(self) -> int:
        return len(self.ends) - 1

    def row(self, i: int) -> tuple[str, bytes, bytes | None, Headers]:
        """Row ``i`` as ``(topic, value, key, headers)`` (no key: None, as an empty key is on the wire)."""
        record = memoryview(self.records)[self.ends[i] : self.ends[i + 1]]
        key_len, _ = _record_head.unpack_from(record)
        key = bytes(record[_RECORD_HEAD : _RECORD_HEAD + key_len]) or None
        _, _, topic, headers = next(run for run in self.runs if run[0] <= i < run[1])
        return topic, bytes(record[_RECORD_HEAD + key_len :]), key, headers


def encode_rows(batch: pa.RecordBatch, topic_option: str | None) -> EncodedRows:
    """Every row's ``[u16 key_len][u32 data_len][key][value]`` from whole columns (Arrow and numpy
    kernels, no Python object per row), and the runs of rows per topic and headers.

    The ``topic`` option wins over a ``topic`` column (as in Kafka).
    """
    values = _binary_column(batch, "value")
    if values is None:
        raise ValueError("pub0sub write: the DataFrame needs a 'value' column (BINARY or STRING)")
    if values.null_count:
        raise ValueError("pub0sub write: a row has a null 'value'")
    n = batch.num_rows
    if n == 0:
        return EncodedRows(pa.py_buffer(b""), [0], [])
    head = np.zeros((n, _RECORD_HEAD), dtype=np.uint8)
    data_len = pc.binary_length(values).to_numpy(zero_copy_only=False)
    head[:, 2:] = data_len.astype(">u4").view(np.uint8).reshape(n, 4)
    parts = [values]
    keys = _binary_column(batch, "key")
    if keys is not None and keys.null_count < n:
        keys = keys.fill_null(pa.scalar(b"", pa.large_binary()))
        key_len = pc.binary_length(keys).to_numpy(zero_copy_only=False)
        longest = int(key_len.max(initial=0))
        if longest > MAX_KEY_BYTES:
            raise ValueError(f"pub0sub write: key of {longest} bytes exceeds {MAX_KEY_BYTES}")
        head[:, :2] = key_len.astype(">u2").view(np.uint8).reshape(n, 2)
        parts.insert(0, keys)
    head_offsets = np.arange(0, _RECORD_HEAD * (n + 1), _RECORD_HEAD, dtype=np.int64)
    heads = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(head_offsets), pa.py_buffer(head)])
    joined = pc.binary_join_element_wise(heads, *parts, pa.scalar(b"", pa.large_binary()))
    _, offsets, records = joined.buffers()
    ends = np.frombuffer(offsets, dtype=np.int64)[joined.offset : joined.offset + n + 1].tolist()

    if topic_option is not None:
        topics, topic_starts = [topic_option], np.zeros(1, dtype=np.int64)
    else:
        topics, topic_starts = _topic_changes(batch)
    header_runs = _header_changes(batch)
    if header_runs is None:
        header_runs = ([None], np.zeros(1, dtype=np.int64))
    # A run starts wherever the topic or the headers change.
    starts = np.union1d(topic_starts, header_runs[1])
    topic_of = np.searchsorted(topic_starts, starts, side="right") - 1
    headers_of = np.searchsorted(header_runs[1], starts, side="right") - 1
    bounds = [*starts.tolist(), n]
    runs = [
        (bounds[r], bounds[r + 1], topics[t], header_runs[0][h])
        for r, (t, h) in enumerate(zip(topic_of.tolist(), headers_of.tolist(), strict=True))
    ]
    return EncodedRows(records, ends, runs)


class Publisher(Protocol):
    """What :func:`publish_all_but_last` needs of a client (:class:`~sdk.blocking.BlockingClient`)."""

    def publish(self, topics: str, data: bytes, *, key: bytes | None = None, headers: Headers = None) -> None: ...

    def publish_encoded(self, topics: str, records: Any, ends: list[int], *, headers: Headers = None) -> int: ...


def publish_all_but_last(
    client: Publisher, batches: Iterable[pa.RecordBatch], topic_option: str | None, per_topic: dict[str, int]
) -> tuple[str, bytes, bytes | None, Headers] | None:
    """Publish the rows of ``batches``, counting them per topic, except the last row, which is
    returned as ``(topic, value, key, headers)`` (None: no rows) for the acknowledged frame.

    Per Arrow batch: :func:`encode_rows`, then one ``publish_encoded`` per run of one topic and
    headers, which sends the frames that filled in one socket write.
    """
    last: tuple[str, bytes, bytes | None, Headers] | None = None
    for batch in batches:
        rows = encode_rows(batch, topic_option)
        if not rows.count:
            continue
        if last is not None:
            client.publish(last[0], last[1], key=last[2], headers=last[3])
        for first, end, topic, headers in rows.runs:
            stop = min(end, rows.count - 1)
            if stop > first:
                client.publish_encoded(topic, rows.records, rows.ends[first : stop + 1], headers=headers)
            per_topic[topic] = per_topic.get(topic, 0) + end - first
        last = rows.row(rows.count - 1)
    return last


def publish_batches(
    batches: Iterable[pa.RecordBatch],
    *,
    topic_option: str | None,
    hubs: tuple[str, ...],
    producer_id: int | None,
    partition: int,
    connect_timeout: float,
    flush_bytes: int | None = None,
    ack_timeout: float = 120.0,
    access: HubAccess = NO_ACCESS,
) -> PublishResult:
    """Publish every row of ``batches``; return once the hub acknowledged the last frame (so all before it).

    The frames are those ``client.publish`` row by row would make (same bytes, same sequences):
    a task retried after an upgrade from that per-row sink still matches what its first attempt stored.
    Frames go out plain (no per-message ticket); the last row goes in an acknowledged frame,
    and the hub handles one connection's frames in order, so its ack covers every frame.
    No reconnect: a frame lost with a broken connection must not be followed by later
    sequences on a new one (the hub would then drop the lost one on retry as "older");
    the task fails instead and Spark's retry replays it idempotently.
    """
    kwargs: dict[str, Any] = {"reconnect": None, "name": f"spark-writer-{partition}"}
    if producer_id is not None:
        kwargs["producer_id"] = producer_id
    if flush_bytes is not None:
        kwargs["flush_bytes"] = flush_bytes
    client = connect_first(hubs, connect_timeout=connect_timeout, retry_for=connect_timeout, access=access, **kwargs)
    result = PublishResult(partition=partition, producer_id=client.protocol.buffer.producer_id)
    per_topic = result.per_topic
    try:
        last = publish_all_but_last(client, batches, topic_option, per_topic)
        if last is not None:
            ack = client.publish_acked(last[0], last[1], key=last[2], headers=last[3], timeout=ack_timeout)
            result.replayed = ack.duplicate
        result.frames = client.protocol.buffer.sequence
        result.rows = sum(per_topic.values())
    except BaseException:
        abandon(client)
        raise
    client.close()
    return result
