"""Log segments on disk: the same 5-byte framing, so ``pub0sub decode`` reads a segment.

A segment file is one SEGMENT_HEADER frame, then LOG_BATCH frames back to back.
Every LOG_BATCH carries a CRC-32 that decoding verifies: corruption is detected,
never served.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from ..opcodes import Opcode
from ..records import RecordBatch, check_topics, encode_topic, read_topic
from .base import U32, Frame, SchemaFrame

SEGMENT_MAGIC = b"P0SL"
SEGMENT_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class SegmentHeader(SchemaFrame):
    """First frame of every segment file."""

    OPCODE: ClassVar[Opcode] = Opcode.SEGMENT_HEADER
    topic: str
    base_offset: int
    created: int
    magic: bytes = SEGMENT_MAGIC
    version: int = SEGMENT_VERSION


_LOG_HEAD = struct.Struct(">IQQQ")
_LOG_HEAD_NO_CRC = struct.Struct(">QQQB")


@dataclass(frozen=True, kw_only=True, slots=True)
class LogBatch(Frame):
    """A stored record batch; ``crc`` is CRC-32 of the body bytes after it.

    ``topics`` is the full topic list of the message set the batch came from
    (``batch.topic`` among them): a reader replaying several topics uses it to
    deliver a multi-topic message once per subscription, as the live path does.

    Build with :meth:`create` (computes the CRC).  Decoding verifies it: a
    batch that fails is a CHECKSUM_MISMATCH error and is never served.
    """

    OPCODE: ClassVar[Opcode] = Opcode.LOG_BATCH
    crc: int
    append_ts: int
    producer_id: int
    producer_seq: int
    topics: tuple[str, ...] = ()
    batch: RecordBatch

    def __post_init__(self) -> None:
        if not self.topics:
            object.__setattr__(self, "topics", (self.batch.topic,))
        check_topics(self.topics)
        if self.batch.topic not in self.topics:
            raise LocalProtocolError(f"batch topic {self.batch.topic!r} missing from the topic list")

    @classmethod
    def create(
        cls,
        *,
        append_ts: int,
        producer_id: int,
        producer_seq: int,
        batch: RecordBatch,
        topics: tuple[str, ...] = (),
    ) -> LogBatch:
        topics = topics or (batch.topic,)
        head = log_batch_head(append_ts, producer_id, producer_seq, topics)
        crc = zlib.crc32(batch.encode(), zlib.crc32(head))
        return cls(
            crc=crc,
            append_ts=append_ts,
            producer_id=producer_id,
            producer_seq=producer_seq,
            topics=topics,
            batch=batch,
        )

    def encode_body(self) -> bytes:
        head = log_batch_head(self.append_ts, self.producer_id, self.producer_seq, self.topics)
        return U32.pack(self.crc) + head + self.batch.encode()

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 29:
            raise RemoteProtocolError("log batch header needs 29 bytes", offset=0)
        crc, append_ts, producer_id, producer_seq = _LOG_HEAD.unpack_from(body, 0)
        actual = zlib.crc32(memoryview(body)[4:])
        if actual != crc:
            raise RemoteProtocolError(
                f"log batch checksum mismatch (stored {crc:08x}, computed {actual:08x})",
                code=ErrorCode.CHECKSUM_MISMATCH,
                offset=0,
            )
        n = body[28]
        if n == 0:
            raise RemoteProtocolError("topic count of 0", code=ErrorCode.INVALID_TOPIC, offset=28)
        pos = 29
        topics = []
        for _ in range(n):
            topic, pos = read_topic(body, pos, end)
            topics.append(topic)
        batch, pos = RecordBatch.read(body, pos, end)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the record batch", offset=pos)
        if batch.topic not in topics:
            raise RemoteProtocolError(f"batch topic {batch.topic!r} missing from the topic list", offset=28)
        return cls(
            crc=crc,
            append_ts=append_ts,
            producer_id=producer_id,
            producer_seq=producer_seq,
            topics=tuple(topics),
            batch=batch,
        )


def log_batch_head(append_ts: int, producer_id: int, producer_seq: int, topics: tuple[str, ...]) -> bytes:
    """LOG_BATCH body bytes between the CRC and the record batch (the CRC covers them)."""
    return b"".join(
        (_LOG_HEAD_NO_CRC.pack(append_ts, producer_id, producer_seq, len(topics)), *map(encode_topic, topics))
    )
