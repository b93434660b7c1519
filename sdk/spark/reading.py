"""Executor side of a read: exactly the offsets ``[start, end)`` of one topic, as Arrow batches.

Runs in Spark's Python workers.  Everything it needs arrives in the arguments (the
partition); it opens its own hub connection and closes it before returning.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa

from ..messages import Gap
from .hubs import connect_first
from .options import NO_ACCESS, DataLossError, HubAccess

#: The Arrow form of the source's Spark schema; read() output must match it exactly.
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("origin", pa.string()),
    ]
)
SPARK_DDL = "topic STRING, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, origin STRING"

#: Rows per Arrow batch handed to Spark: big enough to amortise the per-batch cost, small enough for memory.
ROWS_PER_BATCH = 65_536
#: How long one wait for data lasts before the reader looks at gap notices again.
_POLL_SECONDS = 0.25


def _loss_message(topic: str, first: int, last: int, why: str) -> str:
    return (
        f"pub0sub: offsets {first}..{last} of topic {topic!r} are missing ({why}); they were removed by "
        "retention or are in a corrupted batch. Set option failOnDataLoss=false to skip them."
    )


def _gap_end(gaps: Sequence[Gap], topic: str, at: int) -> tuple[int, str] | None:
    """The end of a noted gap of ``topic`` covering offset ``at``, and its reason."""
    for gap in gaps:
        if gap.topic == topic and gap.first_offset <= at < gap.first_offset + gap.dropped:
            return gap.first_offset + gap.dropped, gap.reason
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
) -> Iterator[pa.RecordBatch]:
    """Yield every message of ``topic`` with ``start <= offset < end``, in order, as Arrow batches.

    Every offset is accounted for: a message, or a gap notice from the hub (retention,
    corrupted batch) that fails with :class:`DataLossError` unless ``fail_on_data_loss``
    is false, in which case the missing offsets are skipped.  Works a delivered batch at a
    time (``next_batch``; offsets inside one batch are consecutive) rather than a message
    at a time: that halves the Python cost per row.
    """
    if start >= end:
        return
    offsets: list[int] = []
    stamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes] = []
    origin_hex: list[str] = []
    origins: dict[int, str] = {}

    def flush() -> pa.RecordBatch:
        n = len(offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([topic] * n, pa.string()),
                pa.array(offsets, pa.int64()),
                pa.array(stamps, pa.timestamp("us", tz="UTC")),
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array(origin_hex, pa.string()),
            ],
            schema=ARROW_SCHEMA,
        )
        for column in (offsets, stamps, keys, values, origin_hex):
            column.clear()
        return batch

    def skip_to(expected: int, first_present: int | None) -> int:
        """Offsets from ``expected`` are missing (before ``first_present``, or a noted gap): fail or skip."""
        noted = _gap_end(sub.gaps, topic, expected)
        if noted is None and first_present is None:
            return expected  # nothing known to be missing yet: keep waiting
        if noted is not None:
            gap_end = min(end, noted[0])
        else:
            assert first_present is not None  # both None returned above
            gap_end = min(end, first_present)
        why = f"gap notice, reason {noted[1]!r}" if noted else "not delivered"
        if fail_on_data_loss:
            raise DataLossError(_loss_message(topic, expected, gap_end - 1, why))
        return gap_end

    expected = start
    with (
        connect_first(hubs, connect_timeout=connect_timeout, access=access, name="spark-reader") as client,
        client.subscribe(topic, start={topic: start}, timeout=connect_timeout) as sub,
    ):
        quiet_since = time.monotonic()
        while expected < end:
            # A short wait, so a gap notice at the very end of the range (nothing follows it) is seen soon.
            msgs = sub.next_batch(timeout=_POLL_SECONDS)
            if not msgs:
                moved = skip_to(expected, None)
                if moved != expected:
                    expected = moved
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > read_timeout:
                    raise TimeoutError(
                        f"pub0sub: reading topic {topic!r} offsets [{start}, {end}) from {client.address}: "
                        f"nothing arrived for {read_timeout:g} s at offset {expected} (option readTimeout)"
                    )
                continue
            quiet_since = time.monotonic()
            first = msgs[0].offset
            if first > expected:
                expected = skip_to(expected, first)
            if first < expected:
                msgs = msgs[expected - first :]  # already had these (cannot happen on one follower; cheap)
                if not msgs:
                    continue
                first = msgs[0].offset
            if first + len(msgs) > end:
                msgs = msgs[: end - first]
            n = len(msgs)
            offsets.extend(range(first, first + n))
            stamps.extend([m.timestamp for m in msgs])
            keys.extend([m.key for m in msgs])
            values.extend([m.data for m in msgs])
            origin = msgs[0].origin
            if msgs[-1].origin == origin and all(m.origin == origin for m in msgs):
                text = origins.get(origin) or origins.setdefault(origin, f"{origin:016x}")
                origin_hex.extend([text] * n)
            else:
                origin_hex.extend([f"{m.origin:016x}" for m in msgs])
            expected = first + n
            if len(offsets) >= ROWS_PER_BATCH:
                yield flush()
    if offsets:
        yield flush()
