"""Client protocol, subscriptions: open, update and close them; deliveries, acks, credit, notices.

DELIVER, DELIVER_HEADERS, ACK and CREDIT are hot frames with ``struct`` code (proven equal to
:mod:`wire.schema`); the others are encoded by the schema directly.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

from ..errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from ..headers import EMPTY_BLOCK, headers_plain, read_headers
from ..opcodes import Opcode
from ..records import RecordBatch, encode_topic, read_topic
from .base import U32, U64X2, Frame, SchemaFrame, plain


class StartPosition(IntEnum):
    #: Only messages published after the subscription (live, at-most-once).
    LATEST = 0
    #: From the oldest message still in the log.
    EARLIEST = 1
    #: From the per-topic offsets in ``offsets``.
    OFFSET = 2
    #: From the first message appended at or after ``start_value`` (µs since the epoch).
    TIMESTAMP = 3


class AckMode(IntEnum):
    #: The hub does not track acknowledgements.
    NONE = 0
    #: The hub expects ACK frames and keeps unacknowledged messages pending.
    EXPLICIT = 1


class SlowConsumerPolicy(IntEnum):
    #: End the subscription with OUT_OF_CAPACITY (the Tendermint ADR 033 choice).
    CANCEL = 0
    #: Drop the oldest queued batches and send a GAP notice with the count.
    DROP_OLDEST = 1


class UpdateOp(IntEnum):
    ADD = 1
    REMOVE = 2


class KeyOp(IntEnum):
    """What a KEY_FILTER does to a subscription's key filter (each entry: the last command wins)."""

    #: These keys, prefixes (and with ``all``, every key) are delivered too.
    ADD = 1
    #: These are no longer delivered.
    REMOVE = 2
    #: The filter becomes exactly this one.
    SET = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyFilter:
    """The record keys a subscription delivers: ``all``, or a key in ``keys``, or one starting with
    a ``prefixes`` entry.  The empty key ``b""`` selects the records published without a key."""

    all: bool = False
    keys: tuple[bytes, ...] = ()
    prefixes: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if len(self.keys) > 0xFFFF or len(self.prefixes) > 0xFFFF:
            raise LocalProtocolError("a key filter holds 0..65535 keys and 0..65535 prefixes")
        for value in (*self.keys, *self.prefixes):
            if not isinstance(value, bytes) or len(value) > 0xFFFF:
                raise LocalProtocolError("keys and prefixes are bytes of 0..65535 bytes")

    def apply(self, op: KeyOp, change: KeyFilter) -> KeyFilter:
        """This filter after a KEY_FILTER ``op`` with ``change``: each entry as the last command says."""
        if op is KeyOp.SET:
            return change
        if op is KeyOp.ADD:
            keys = tuple(dict.fromkeys((*self.keys, *change.keys)))
            prefixes = tuple(dict.fromkeys((*self.prefixes, *change.prefixes)))
            return KeyFilter(all=self.all or change.all, keys=keys, prefixes=prefixes)
        keys = tuple(k for k in self.keys if k not in change.keys)
        prefixes = tuple(p for p in self.prefixes if p not in change.prefixes)
        return KeyFilter(all=self.all and not change.all, keys=keys, prefixes=prefixes)


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicOffset:
    topic: str
    offset: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Sub(SchemaFrame):
    """Open subscription ``sub_id`` (chosen by the client, unique per connection)."""

    OPCODE: ClassVar[Opcode] = Opcode.SUB
    sub_id: int
    patterns: tuple[str, ...]
    start: StartPosition = StartPosition.LATEST
    start_value: int = 0
    ack_mode: AckMode = AckMode.NONE
    policy: SlowConsumerPolicy = SlowConsumerPolicy.CANCEL
    credit: int = 0
    ack_wait_ms: int = 0
    durable: str = ""
    group: str = ""
    offsets: tuple[TopicOffset, ...] = ()
    #: Client protocol 3: only records whose key this filter selects are delivered (None: every key).
    key_filter: KeyFilter | None = None
    #: Client protocol 3: only batches whose headers this tag query accepts (wire.query; None: all).
    query: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.patterns) <= 0xFFFF:
            raise LocalProtocolError("a subscription needs 1..65535 topics or patterns")
        for p in self.patterns:
            encode_topic(p)

    def _plain(self) -> dict[str, Any]:
        fields = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        # The optional tail's ``parts`` byte: absent (a SUB as before version 3), or what follows.
        parts = (self.key_filter is not None) | (self.query is not None) << 1
        return {**fields, "parts": parts or None}


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyFilterUpdate(SchemaFrame):
    """KEY_FILTER: change the keys subscription ``sub_id`` delivers; the hub answers SUB_OK."""

    OPCODE: ClassVar[Opcode] = Opcode.KEY_FILTER
    sub_id: int
    op: KeyOp
    filter: KeyFilter


@dataclass(frozen=True, kw_only=True, slots=True)
class SubOk(SchemaFrame):
    """The subscription is open; ``offsets`` is where it starts on each known topic."""

    OPCODE: ClassVar[Opcode] = Opcode.SUB_OK
    sub_id: int
    offsets: tuple[TopicOffset, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsub(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.UNSUB
    sub_id: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SubUpdate(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.SUB_UPDATE
    sub_id: int
    op: UpdateOp
    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.patterns) <= 0xFFFF:
            raise LocalProtocolError("an update needs 1..65535 topics or patterns")
        for p in self.patterns:
            encode_topic(p)


@dataclass(frozen=True, kw_only=True, slots=True)
class Deliver(Frame):
    """One record batch for subscription ``sub_id``.

    A hub encodes the batch once and prefixes it per subscriber with
    :func:`deliver_prefix`, so fan-out costs one header per subscriber.
    """

    OPCODE: ClassVar[Opcode] = Opcode.DELIVER
    sub_id: int
    batch: RecordBatch

    def encode_body(self) -> bytes:
        return U32.pack(self.sub_id) + self.batch.encode()

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 4:
            raise RemoteProtocolError("subscription id missing", offset=0)
        (sub_id,) = U32.unpack_from(body, 0)
        batch, pos = RecordBatch.read(body, 4, end)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the record batch", offset=pos)
        return cls(sub_id=sub_id, batch=batch)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliverHeaders(Frame):
    """DELIVER for a batch whose set carried headers (client protocol 3): the block, then the batch.

    The hub sends it only on a version 3 connection; an older client gets the same batch as a
    plain DELIVER, without its headers (docs/protocol.md §11).
    """

    OPCODE: ClassVar[Opcode] = Opcode.DELIVER_HEADERS
    sub_id: int
    #: its ``headers`` are the frame's headers block
    batch: RecordBatch

    def encode_body(self) -> bytes:
        return U32.pack(self.sub_id) + (self.batch.headers or EMPTY_BLOCK) + self.batch.encode()

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 4:
            raise RemoteProtocolError("subscription id missing", offset=0)
        (sub_id,) = U32.unpack_from(body, 0)
        headers, pos = read_headers(body, 4, end)
        batch, pos = RecordBatch.read(body, pos, end, headers=headers)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the record batch", offset=pos)
        return cls(sub_id=sub_id, batch=batch)

    def _plain(self) -> dict[str, Any]:
        return {"sub_id": self.sub_id, "headers": headers_plain(self.batch.headers), "batch": plain(self.batch)}


_DELIVER_PREFIX = struct.Struct(">BII")


def deliver_prefix(sub_id: int, encoded_batch_len: int, *, headers: bool = False) -> bytes:
    """Header + subscription id of a DELIVER whose batch is already encoded.

    ``headers``: a DELIVER_HEADERS, whose ``encoded_batch_len`` counts the headers block too.
    """
    return _DELIVER_PREFIX.pack(Opcode.DELIVER_HEADERS if headers else Opcode.DELIVER, 4 + encoded_batch_len, sub_id)


@dataclass(frozen=True, kw_only=True, slots=True)
class AckRange:
    topic: str
    first_offset: int
    last_offset: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Ack(Frame):
    """Consumer acknowledgement of inclusive offset ranges."""

    OPCODE: ClassVar[Opcode] = Opcode.ACK
    sub_id: int
    ranges: tuple[AckRange, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.ranges) <= 0xFFFF:
            raise LocalProtocolError("an ack carries 1..65535 ranges")

    def encode_body(self) -> bytes:
        parts = [struct.pack(">IH", self.sub_id, len(self.ranges))]
        for r in self.ranges:
            parts.append(encode_topic(r.topic))
            parts.append(U64X2.pack(r.first_offset, r.last_offset))
        return b"".join(parts)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 6:
            raise RemoteProtocolError("ack header needs 6 bytes", offset=0)
        sub_id, n = struct.unpack_from(">IH", body, 0)
        if n == 0:
            raise RemoteProtocolError("ack with 0 ranges", offset=4)
        pos = 6
        ranges = []
        for _ in range(n):
            topic, pos = read_topic(body, pos, end)
            if end - pos < 16:
                raise RemoteProtocolError("ack range needs 16 bytes", offset=pos)
            first, last = U64X2.unpack_from(body, pos)
            pos += 16
            ranges.append(AckRange(topic=topic, first_offset=first, last_offset=last))
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the last range", offset=pos)
        return cls(sub_id=sub_id, ranges=tuple(ranges))


@dataclass(frozen=True, kw_only=True, slots=True)
class Credit(Frame):
    """The subscriber grants ``credit`` more messages to subscription ``sub_id``."""

    OPCODE: ClassVar[Opcode] = Opcode.CREDIT
    sub_id: int
    credit: int

    def encode_body(self) -> bytes:
        return struct.pack(">II", self.sub_id, self.credit)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        if len(body) != 8:
            raise RemoteProtocolError(f"credit body is 8 bytes, got {len(body)}", offset=0)
        sub_id, credit = struct.unpack(">II", body)
        return cls(sub_id=sub_id, credit=credit)


@dataclass(frozen=True, kw_only=True, slots=True)
class Gap(SchemaFrame):
    """``dropped`` messages of ``topic`` from ``first_offset`` on were dropped (drop-oldest)."""

    OPCODE: ClassVar[Opcode] = Opcode.GAP
    sub_id: int
    topic: str
    first_offset: int
    dropped: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SubEnd(SchemaFrame):
    """The hub ended subscription ``sub_id``."""

    OPCODE: ClassVar[Opcode] = Opcode.SUB_END
    sub_id: int
    code: ErrorCode
    reason: str = ""
