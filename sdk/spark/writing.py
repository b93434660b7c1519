"""Executor side of a write: publish the rows of one task with an idempotent producer id.

Idempotence comes from the hub: per topic it keeps the highest batch sequence stored per
producer id and drops a PUBLISH whose sequence it already has (docs/durability.md).  A task
derives its producer id from ids that a retry of the same task shares (write id or query id,
batch id, partition id), and the client numbers its frames 1, 2, 3 ... with frame boundaries
set only by byte counts -- so the same rows in the same order give the same frames with the
same sequences, and a retried task stores only what the failed attempt did not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

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


def _as_bytes_column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    values = column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [v.encode() if v is not None else None for v in values]
    return values


def rows_of(batches: Iterable[pa.RecordBatch], topic_option: str | None) -> Iterator[tuple[str, bytes, bytes | None]]:
    """``(topic, value, key)`` per row; the ``topic`` option wins over a ``topic`` column (as in Kafka)."""
    for batch in batches:
        values = _as_bytes_column(batch, "value")
        if values is None:
            raise ValueError("pub0sub write: the DataFrame needs a 'value' column (BINARY or STRING)")
        keys = _as_bytes_column(batch, "key") or [None] * len(values)
        if topic_option is not None:
            topics: list[Any] = [topic_option] * len(values)
        else:
            index = batch.schema.get_field_index("topic")
            if index < 0:
                raise ValueError("pub0sub write: give option 'topic' or a 'topic' column")
            topics = batch.column(index).to_pylist()
        for topic, value, key in zip(topics, values, keys, strict=True):
            if value is None:
                raise ValueError("pub0sub write: a row has a null 'value'")
            if not topic:
                raise ValueError("pub0sub write: a row has a null or empty 'topic' (and there is no 'topic' option)")
            yield topic, value, key


def publish_rows(
    rows: Iterable[tuple[str, bytes, bytes | None]],
    *,
    hubs: tuple[str, ...],
    producer_id: int | None,
    partition: int,
    connect_timeout: float,
    flush_bytes: int | None = None,
    ack_timeout: float = 120.0,
    access: HubAccess = NO_ACCESS,
) -> PublishResult:
    """Publish every row; return once the hub acknowledged the last frame (so all before it).

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
        last: tuple[str, bytes, bytes | None] | None = None
        publish = client.publish
        for row in rows:
            if last is not None:
                publish(last[0], last[1], key=last[2])
            last = row
            per_topic[row[0]] = per_topic.get(row[0], 0) + 1
        if last is not None:
            ack = client.publish_acked(last[0], last[1], key=last[2], timeout=ack_timeout)
            result.replayed = ack.duplicate
        result.frames = client.protocol.buffer.sequence
        result.rows = sum(per_topic.values())
    except BaseException:
        abandon(client)
        raise
    client.close()
    return result
