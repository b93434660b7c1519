"""Client protocol, publishing: PUBLISH batches and the hub's PUBLISH_ACK.

Both are hot frames with ``struct`` code (proven equal to :mod:`wire.schema`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any, ClassVar

from ..errors import LocalProtocolError, RemoteProtocolError
from ..headers import EMPTY_BLOCK
from ..limits import MAX_U64
from ..opcodes import Opcode
from ..records import REGION_HEADER as _REGION
from ..records import MessageSet, encode_topic, encode_topic_list, read_topic
from .base import HEADER, Frame, check_uint, plain


class PublishFlags(IntFlag):
    NONE = 0
    #: The hub must answer with PUBLISH_ACK once the batch is stored.
    ACK = 1
    #: Every set is preceded by a headers block (client protocol 3, wire.headers).
    HEADERS = 2


#: Every defined flags byte's PublishFlags, made once: calling the enum per decoded PUBLISH is slow.
#: Bits 2-7 are reserved: a PUBLISH with any of them set is refused (a new flag is a new version).
_PUBLISH_FLAGS = tuple(PublishFlags(i) for i in range(int(PublishFlags.ACK | PublishFlags.HEADERS) + 1))
#: The HEADERS bit as a plain int: ``int & IntFlag`` runs IntFlag's own ``__rand__`` (the enum
#: machinery), ~3.6% of a hub taking one-message PUBLISH frames.
_HEADERS_BIT = int(PublishFlags.HEADERS)


class AckStatus(IntEnum):
    #: Stored now; ``ranges`` give the offsets assigned.
    STORED = 0
    #: This (producer, sequence) was stored before; nothing stored twice.
    DUPLICATE = 1


_PUBLISH_HEAD = struct.Struct(">QQBH")
#: A set as the PUBLISH encoders take it: (encoded topic list, record count, records, headers block).
SetParts = tuple[bytes, int, bytes, bytes]
#: Fields of a frozen frame set without its __init__ (a decoded frame, checked as it was read).
_set = object.__setattr__


@dataclass(frozen=True, kw_only=True, slots=True)
class Publish(Frame):
    """A batch of message sets from one producer.

    ``producer_id`` 0 means "not idempotent": ``sequence`` then only matches
    the PUBLISH_ACK to its batch.  With a producer id, a batch whose
    ``sequence`` the hub has already stored for that producer is not stored again.
    """

    OPCODE: ClassVar[Opcode] = Opcode.PUBLISH
    producer_id: int = 0
    sequence: int = 0
    flags: PublishFlags = PublishFlags.NONE
    sets: tuple[MessageSet, ...]

    def __post_init__(self) -> None:
        check_uint("producer_id", self.producer_id, MAX_U64)
        check_uint("sequence", self.sequence, MAX_U64)
        if not 0 <= int(self.flags) < len(_PUBLISH_FLAGS):
            raise LocalProtocolError(
                f"PUBLISH flags 0x{int(self.flags):02x}: only bits 0 (ACK) and 1 (HEADERS) are defined"
            )
        if not 1 <= len(self.sets) <= 0xFFFF:
            raise LocalProtocolError(f"a publish holds 1..65535 message sets, got {len(self.sets)}")
        if not self.has_headers and any(s.headers for s in self.sets):
            raise LocalProtocolError("a message set with headers needs PUBLISH flag HEADERS")

    def encode_body(self) -> bytes:
        sets = [(encode_topic_list(s.topics), s.count, s.records, s.headers) for s in self.sets]
        return _publish_body(self.producer_id, self.sequence, int(self.flags), sets)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 19:
            raise RemoteProtocolError("publish header needs 19 bytes", offset=0)
        producer_id, sequence, flags, n = _PUBLISH_HEAD.unpack_from(body, 0)
        if flags >= len(_PUBLISH_FLAGS):
            raise RemoteProtocolError(f"PUBLISH flags 0x{flags:02x}: bits 2-7 are reserved and must be 0", offset=16)
        if n == 0:
            raise RemoteProtocolError("publish with 0 message sets", offset=17)
        pos = 19
        sets = []
        read = MessageSet.read_headered if flags & _HEADERS_BIT else MessageSet.read
        for _ in range(n):
            s, pos = read(body, pos, end)
            sets.append(s)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the last set", offset=pos)
        # Every field was checked above as it was read (struct's widths, the flags, 1..65535 sets,
        # headers only with HEADERS), so the checks of __post_init__, there for frames built by
        # callers, are not run again: they were ~4% of a hub taking one-message PUBLISH frames.
        frame = object.__new__(cls)
        _set(frame, "producer_id", producer_id)
        _set(frame, "sequence", sequence)
        _set(frame, "flags", _PUBLISH_FLAGS[flags])
        _set(frame, "sets", tuple(sets))
        return frame

    @property
    def wants_ack(self) -> bool:
        # int's own & : IntFlag's goes through the enum machinery (~2% of a hub's publish path).
        return bool(int.__and__(self.flags, PublishFlags.ACK))

    @property
    def has_headers(self) -> bool:
        """Flag HEADERS: every set is preceded by its headers block."""
        return bool(int.__and__(self.flags, PublishFlags.HEADERS))

    @property
    def message_count(self) -> int:
        return sum(s.count for s in self.sets)


    def _plain(self) -> dict[str, Any]:
        sets = [s.plain_headered() if self.has_headers else plain(s) for s in self.sets]
        return {"producer_id": self.producer_id, "sequence": self.sequence, "flags": int(self.flags), "sets": sets}


@dataclass(frozen=True, kw_only=True, slots=True)
class OffsetRange:
    """``num`` consecutive offsets of ``topic`` starting at ``first_offset``."""

    topic: str
    first_offset: int
    num: int


_ACK_HEAD = struct.Struct(">QQBQH")
_RANGE_TAIL = struct.Struct(">QI")


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishAck(Frame):
    OPCODE: ClassVar[Opcode] = Opcode.PUBLISH_ACK
    producer_id: int
    sequence: int
    status: AckStatus = AckStatus.STORED
    timestamp: int = 0
    ranges: tuple[OffsetRange, ...] = ()

    def encode_body(self) -> bytes:
        return _ack_body(self.producer_id, self.sequence, self.status, self.timestamp,
                         [(r.topic, r.first_offset, r.num) for r in self.ranges])  # fmt: skip

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 27:
            raise RemoteProtocolError("publish ack header needs 27 bytes", offset=0)
        producer_id, sequence, status, timestamp, n = _ACK_HEAD.unpack_from(body, 0)
        try:
            status = AckStatus(status)
        except ValueError:
            raise RemoteProtocolError(f"unknown publish ack status {status}", offset=16) from None
        pos = 27
        ranges = []
        for _ in range(n):
            topic, pos = read_topic(body, pos, end)
            if end - pos < 12:
                raise RemoteProtocolError("offset range needs 12 bytes", offset=pos)
            first, num = _RANGE_TAIL.unpack_from(body, pos)
            pos += 12
            ranges.append(OffsetRange(topic=topic, first_offset=first, num=num))
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the last range", offset=pos)
        return cls(producer_id=producer_id, sequence=sequence, status=status, timestamp=timestamp, ranges=tuple(ranges))


def _ack_body(producer_id: int, sequence: int, status: int, timestamp: int,
              ranges: Sequence[tuple[str, int, int]]) -> bytes:  # fmt: skip
    parts = [_ACK_HEAD.pack(producer_id, sequence, status, timestamp, len(ranges))]
    for topic, first_offset, num in ranges:
        parts.append(encode_topic(topic))
        parts.append(_RANGE_TAIL.pack(first_offset, num))
    return b"".join(parts)


def publish_frame(producer_id: int, sequence: int, flags: int, sets: Sequence[SetParts]) -> bytes:
    """The whole PUBLISH frame :class:`Publish` encodes, from parts a publisher already holds checked.

    Each set is ``(topic list, count, records, headers block)``: the topic list encoded as
    :class:`MessageSet` writes it (``[u8 n][topic]...``), ``count`` records in ``records``,
    the block ``b""`` for none.  Nothing is validated here: the caller checked the topics
    and headers when it made the parts and counted the records it joined; a client publishing
    at a low rate paid ~10 us a frame for the dataclasses' checks and encoding (hot), twice
    that with cold caches, on every message's way to the socket.
    """
    body = _publish_body(producer_id, sequence, flags, sets)
    return HEADER.pack(Opcode.PUBLISH, len(body)) + body


def _publish_body(producer_id: int, sequence: int, flags: int, sets: Sequence[SetParts]) -> bytes:
    """A PUBLISH body from its sets as :func:`publish_frame` takes them (what :class:`Publish` encodes too)."""
    parts = [_PUBLISH_HEAD.pack(producer_id, sequence, flags, len(sets))]
    append = parts.append
    headered = flags & _HEADERS_BIT
    for topics, count, records, headers in sets:
        if headered:
            append(headers or EMPTY_BLOCK)
        append(topics)
        append(_REGION.pack(count, len(records)))
        append(records)
    return b"".join(parts)


def publish_ack_frame(producer_id: int, sequence: int, status: AckStatus, timestamp: int,
                      ranges: Sequence[tuple[str, int, int]] = ()) -> bytes:  # fmt: skip
    """The whole PUBLISH_ACK frame :class:`PublishAck` encodes, from plain values (topic, first
    offset, count per range), without building the frame: a hub answers every acknowledged
    PUBLISH, and the dataclasses were ~4% of a hub taking one-message publishes."""
    body = _ack_body(producer_id, sequence, status, timestamp, ranges)
    return HEADER.pack(Opcode.PUBLISH_ACK, len(body)) + body

