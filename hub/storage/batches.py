"""The batches every layer passes around: written to logs, read back, shared by deliveries.

Neutral ground beneath storage and delivery: a :class:`SharedBatch` is what a
publish appends and what every subscriber's queue holds (encoded once), a
:class:`StoredBatch` is one read back from a topic log with its set's topics,
and a :class:`Hole` is a stretch of offsets a log cannot serve.  Imports only
``wire``.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.records import record_batch_header, split_records


@dataclass(slots=True, eq=False)
class SharedBatch:
    """A record batch encoded once and shared by every subscriber it goes to."""

    topic: str
    base_offset: int
    timestamp: int
    origin: int
    origin_seq: int
    count: int
    records: bytes
    #: the set's headers block (wire.headers), ``b""`` for none: shared by every split of the batch
    headers: bytes = b""
    _header: bytes | None = None

    @property
    def header(self) -> bytes:
        """RecordBatch bytes before the records (topic .. region length)."""
        if self._header is None:
            self._header = record_batch_header(
                self.topic, self.base_offset, self.timestamp, self.origin, self.origin_seq, self.count,
                len(self.records),
            )
        return self._header

    def split(self, first: int) -> tuple[SharedBatch, SharedBatch]:
        """The first ``first`` records and the rest, as two batches."""
        head_records, tail_records = split_records(self.records, first)
        head = SharedBatch(self.topic, self.base_offset, self.timestamp, self.origin, self.origin_seq, first,
                           head_records, self.headers)
        tail = SharedBatch(self.topic, self.base_offset + first, self.timestamp, self.origin,
                           self.origin_seq + first, self.count - first, tail_records, self.headers)
        return head, tail


@dataclass(slots=True)
class StoredBatch:
    """A batch as readers see it: the shared delivery batch plus its set's topics."""

    batch: SharedBatch
    topics: tuple[str, ...]
    append_ts: int

    @property
    def base_offset(self) -> int:
        return self.batch.base_offset

    @property
    def next_offset(self) -> int:
        return self.batch.base_offset + self.batch.count


@dataclass(slots=True)
class Hole:
    """Offsets ``first .. first+count-1`` cannot be served (retention or corruption)."""

    first: int
    count: int
    reason: str
