"""Log segments on disk: the same 5-byte framing, so ``pub0sub decode`` reads a segment.

A segment file is one SEGMENT_HEADER frame, then LOG_BATCH frames back to back
(in a version 2 segment also LOG_BATCH_HEADERS, for sets that carried headers).
Every LOG_BATCH carries a CRC-32 that decoding verifies: corruption is detected,
never served.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from ..headers import EMPTY_BLOCK, headers_plain, read_headers
from ..opcodes import Opcode
from ..records import RecordBatch, check_topics, encode_topic, read_topic
from .base import U32, Frame, SchemaFrame, plain

SEGMENT_MAGIC = b"P0SL"
#: Version 2 segments may hold LOG_BATCH_HEADERS frames; version 1 hold only LOG_BATCH.
#: A hub writes version 2 and reads both.
SEGMENT_VERSION = 2
#: Every segment version this code reads.
SEGMENT_VERSIONS = frozenset({1, 2})


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
        crc, append_ts, producer_id, producer_seq, topics, _, batch = _decode_log_body(body, headered=False)
        return cls(
            crc=crc, append_ts=append_ts, producer_id=producer_id, producer_seq=producer_seq, topics=topics,
            batch=batch,
        )

    @property
    def headers(self) -> bytes:
        """A LOG_BATCH's set had no headers (LOG_BATCH_HEADERS carries them)."""
        return b""


@dataclass(frozen=True, kw_only=True, slots=True)
class LogBatchHeaders(Frame):
    """LOG_BATCH of a set that carried headers (segment version 2): the block before the batch.

    Fields and rules as :class:`LogBatch`, plus ``headers`` (:mod:`wire.headers`); the CRC
    covers the block too.  A batch without headers is always written as a plain LOG_BATCH.
    """

    OPCODE: ClassVar[Opcode] = Opcode.LOG_BATCH_HEADERS
    crc: int
    append_ts: int
    producer_id: int
    producer_seq: int
    topics: tuple[str, ...]
    headers: bytes
    batch: RecordBatch

    def __post_init__(self) -> None:
        check_topics(self.topics)
        if self.batch.topic not in self.topics:
            raise LocalProtocolError(f"batch topic {self.batch.topic!r} missing from the topic list")
        if self.batch.headers != self.headers:  # the batch carries its set's headers, as in DELIVER_HEADERS
            object.__setattr__(self, "batch", dataclasses.replace(self.batch, headers=self.headers))

    @classmethod
    def create(
        cls, *, append_ts: int, producer_id: int, producer_seq: int, batch: RecordBatch, topics: tuple[str, ...],
        headers: bytes,
    ) -> LogBatchHeaders:
        head = log_batch_head(append_ts, producer_id, producer_seq, topics) + (headers or EMPTY_BLOCK)
        crc = zlib.crc32(batch.encode(), zlib.crc32(head))
        return cls(crc=crc, append_ts=append_ts, producer_id=producer_id, producer_seq=producer_seq, topics=topics,
                   headers=headers, batch=batch)  # fmt: skip

    def encode_body(self) -> bytes:
        head = log_batch_head(self.append_ts, self.producer_id, self.producer_seq, self.topics)
        return U32.pack(self.crc) + head + (self.headers or EMPTY_BLOCK) + self.batch.encode()

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        crc, append_ts, producer_id, producer_seq, topics, headers, batch = _decode_log_body(body, headered=True)
        return cls(
            crc=crc, append_ts=append_ts, producer_id=producer_id, producer_seq=producer_seq, topics=topics,
            headers=headers, batch=batch,
        )

    def _plain(self) -> dict[str, Any]:
        return {
            "crc": self.crc, "append_ts": self.append_ts, "producer_id": self.producer_id,
            "producer_seq": self.producer_seq, "topics": list(self.topics), "headers": headers_plain(self.headers),
            "batch": plain(self.batch),
        }  # fmt: skip


def _decode_log_body(
    body: bytes, *, headered: bool
) -> tuple[int, int, int, int, tuple[str, ...], bytes, RecordBatch]:
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
    headers = b""
    if headered:
        headers, pos = read_headers(body, pos, end)
    batch, pos = RecordBatch.read(body, pos, end, headers=headers)
    if pos != end:
        raise RemoteProtocolError(f"{end - pos} trailing bytes after the record batch", offset=pos)
    if batch.topic not in topics:
        raise RemoteProtocolError(f"batch topic {batch.topic!r} missing from the topic list", offset=28)
    return crc, append_ts, producer_id, producer_seq, tuple(topics), headers, batch


def log_batch_head(append_ts: int, producer_id: int, producer_seq: int, topics: tuple[str, ...]) -> bytes:
    """LOG_BATCH body bytes between the CRC and the record batch (the CRC covers them)."""
    return b"".join(
        (_LOG_HEAD_NO_CRC.pack(append_ts, producer_id, producer_seq, len(topics)), *map(encode_topic, topics))
    )
