"""Topic bookkeeping for a hub without a data directory (live delivery only)."""

from __future__ import annotations

from ..storage.batches import SharedBatch


class MemoryTopic:
    """Offsets and counters of one topic; nothing is stored.

    Same surface as :class:`hub.storage.topic_log.TopicLog` where the
    publishing path touches it, so that path has one shape with or without disk.
    """

    __slots__ = ("bytes_appended", "last_timestamp", "messages_appended", "next_offset", "producers", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.next_offset = 0
        self.messages_appended = 0
        self.bytes_appended = 0
        self.last_timestamp = 0
        self.producers: dict[int, int] = {}

    @property
    def first_offset(self) -> int:
        return self.next_offset

    def append(
        self, batch: SharedBatch, *, topics: tuple[str, ...], producer_id: int, producer_seq: int, append_ts: int
    ) -> None:
        self.next_offset = batch.base_offset + batch.count
        if producer_id:
            self.producers[producer_id] = max(self.producers.get(producer_id, 0), producer_seq)
        self.messages_appended += batch.count
        self.bytes_appended += len(batch.records)
        self.last_timestamp = append_ts
