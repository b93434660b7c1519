"""Executor side of a read: exactly the offsets ``[start, end)`` of one topic, as Arrow batches.

Runs in Spark's Python workers.  Everything it needs arrives in the arguments (the
partition); it opens its own hub connection and closes it before returning.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from wire.records import split_records
from wire.topics import pattern_matches, pattern_tokens

from ..errors import Pub0subError
from ..messages import Gap
from .columns import HEADERS_TYPE, HeaderColumn, key_value_arrays, strings, u64_as_i64
from .hubs import connect_first
from .options import NO_ACCESS, SOURCE_COLUMNS, DataLossError, HubAccess

#: The Arrow form of the source's Spark schema; read() output must match it exactly.
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("origin", pa.string()),
        ("headers", HEADERS_TYPE),
    ]
)


def arrow_schema(columns: tuple[str, ...]) -> pa.Schema:
    """The Arrow schema of the source's ``columns`` (option ``columns``), in that order."""
    return ARROW_SCHEMA if columns == SOURCE_COLUMNS else pa.schema([ARROW_SCHEMA.field(c) for c in columns])


SPARK_DDL = (
    "topic STRING, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, origin STRING, "
    "headers MAP<STRING, BINARY>"
)

#: Rows per Arrow batch handed to Spark: big enough to amortise the per-batch cost, small enough for memory.
ROWS_PER_BATCH = 65_536
#: ... and bytes: Arrow binary columns address their data with 32-bit offsets.
BYTES_PER_BATCH = 64 << 20
#: How long one wait for data lasts before the reader looks at its read timeout again.
_POLL_SECONDS = 0.25


def _loss_message(topic: str, first: int, last: int, why: str) -> str:
    return (
        f"pub0sub: offsets {first}..{last} of topic {topic!r} are missing ({why}); they were removed by "
        "retention or are in a corrupted batch. Set option failOnDataLoss=false to skip them."
    )


class _Columns:
    """Delivered batches of one topic, kept as per-batch facts and per-batch key/value arrays
    until :meth:`take` expands them into one Arrow batch of the source's schema."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._origins: dict[int, int] = {}
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.bytes = 0
        self.counts: list[int] = []
        self.base: list[int] = []
        self.stamps: list[int] = []
        self.origin: list[int] = []
        self.keys: list[pa.Array] = []
        self.values: list[pa.Array] = []
        self.headers = HeaderColumn()

    def add(self, base_offset: int, timestamp: int, origin: int, records: bytes, count: int,
            headers: bytes = b"") -> None:  # fmt: skip
        keys, values = key_value_arrays(records, count)
        self.counts.append(count)
        self.base.append(base_offset)
        self.stamps.append(timestamp)
        self.origin.append(self._origins.setdefault(origin, len(self._origins)))
        self.keys.append(keys)
        self.values.append(values)
        self.headers.add(headers)
        self.rows += count
        self.bytes += len(records)

    def take(self, columns: tuple[str, ...] = SOURCE_COLUMNS) -> pa.RecordBatch:
        """One Arrow batch of ``columns`` (option ``columns``): only those are built."""
        counts = np.array(self.counts, dtype=np.int64)
        total = int(counts.sum())

        def offsets() -> pa.Array:
            starts = np.cumsum(counts) - counts
            within = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
            return pa.array(np.repeat(np.array(self.base, dtype=np.int64), counts) + within)

        def origins() -> pa.Array:
            names = [f"{o:016x}" for o in self._origins]
            return strings(names, np.repeat(np.array(self.origin, dtype=np.int32), counts))

        build = {
            "topic": lambda: pa.repeat(pa.scalar(self.topic, pa.string()), total),
            "offset": offsets,
            "timestamp": lambda: pa.array(np.repeat(u64_as_i64(self.stamps), counts)).cast(
                ARROW_SCHEMA.field("timestamp").type
            ),
            "key": lambda: pa.concat_arrays(self.keys),
            "value": lambda: pa.concat_arrays(self.values),
            "origin": origins,
            "headers": lambda: self.headers.take(counts, total),
        }
        batch = pa.RecordBatch.from_arrays([build[c]() for c in columns], schema=arrow_schema(columns))
        self._reset()
        return batch


def hub_compacts(status: dict[str, Any], topic: str) -> bool:
    """Does the hub whose STATUS document this is compact ``topic`` (its ``--compact`` list)?"""
    patterns = status.get("storage", {}).get("compaction", {}).get("patterns", [])
    tokens = topic.split(".")
    for name in patterns:
        wild = pattern_tokens(name)
        if name == topic or (wild is not None and pattern_matches(wild, tokens)):
            return True
    return False


def _compacts(client: Any, topic: str) -> bool | None:
    """:func:`hub_compacts` for the hub ``client`` is connected to; None (ask again at the next
    skip) when it does not answer: the skip then counts as loss, as on a topic not compacted."""
    try:
        return hub_compacts(client.status(timeout=5.0), topic)
    except (Pub0subError, OSError):  # TimeoutError is an OSError
        return None


def read_range(
    hubs: Sequence[str],
    topic: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
    read_timeout: float = 60.0,
    connect_timeout: float = 10.0,
    access: HubAccess = NO_ACCESS,
    columns: tuple[str, ...] = SOURCE_COLUMNS,
) -> Iterator[pa.RecordBatch]:
    """Yield every message of ``topic`` with ``start <= offset < end``, in order, as Arrow batches.

    Every offset is accounted for: a message, a jump between two batches of a topic the hub
    compacts (offsets a pass removed; the hub's status says which topics it compacts), or a gap
    notice from the hub (retention, corrupted batch) or a jump on any other topic, which fail
    with :class:`DataLossError` unless ``fail_on_data_loss``
    is false, in which case the missing offsets are skipped.  Works on the delivered record
    batches themselves (offsets inside one are consecutive): their regions become Arrow
    columns with numpy (:mod:`sdk.spark.columns`), never a Python object per message.
    """
    if start >= end:
        return
    cols = _Columns(topic)

    def skip(expected: int, to: int, why: str) -> int:
        """Offsets ``expected .. to-1`` are missing: fail, or go on at ``min(to, end)``."""
        to = min(to, end)
        if fail_on_data_loss:
            raise DataLossError(_loss_message(topic, expected, to - 1, why))
        return to

    expected = start
    compacted: bool | None = None  # asked of the hub at the first skip
    with (
        connect_first(
            hubs, connect_timeout=connect_timeout, retry_for=connect_timeout, access=access, name="spark-reader"
        ) as client,
        client.subscribe(topic, start={topic: start}, timeout=connect_timeout) as sub,
    ):
        quiet_since = time.monotonic()
        while expected < end:
            # Record batches and gap notices in the order the hub sent them.  ``_item`` is the
            # subscription's own buffer: the public iterators would make a Message per record.
            item = sub._item(_POLL_SECONDS)
            if item is None:
                if time.monotonic() - quiet_since > read_timeout:
                    raise TimeoutError(
                        f"pub0sub: reading topic {topic!r} offsets [{start}, {end}) from {client.address}: "
                        f"nothing arrived for {read_timeout:g} s at offset {expected} (option readTimeout)"
                    )
                continue
            quiet_since = time.monotonic()
            if isinstance(item, Gap):
                if item.topic == topic and item.first_offset <= expected < item.first_offset + item.dropped:
                    expected = skip(expected, item.first_offset + item.dropped, f"gap notice, reason {item.reason!r}")
                continue
            first, count, records = item.base_offset, item.count, item.records
            if first > expected:
                # On a compacted topic (docs/compaction.md) offsets a pass removed are skipped
                # without a gap notice: no loss.  Anywhere else a skip is unexplained: loss.
                if compacted is None:
                    compacted = _compacts(client, topic)
                expected = min(first, end) if compacted else skip(expected, first, "not delivered")
            if first < expected:  # already had these (cannot happen on one follower; cheap)
                if first + count <= expected:
                    continue
                _, records = split_records(records, expected - first)
                count -= expected - first
                first = expected
            if first + count > end:
                records, _ = split_records(records, end - first)
                count = end - first
            if count <= 0:
                continue
            cols.add(first, item.timestamp, item.origin, records, count, item.headers)
            expected = first + count
            if cols.rows >= ROWS_PER_BATCH or cols.bytes >= BYTES_PER_BATCH:
                yield cols.take(columns)
    if cols.rows:
        yield cols.take(columns)
