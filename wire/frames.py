"""Typed frames: frozen, keyword-only dataclasses validated when constructed.

``frame.encode()`` returns the whole frame (5-byte header + body).
``Frame.decode_body(body)`` parses one complete body slice; the incremental
:class:`~wire.decoder.FrameDecoder` calls it once the header is checked and
the body has fully arrived.

Cold frames are encoded and decoded by their construct description in
:mod:`wire.schema` (see :class:`_SchemaFrame`).  Hot frames override
``encode_body``/``decode_body`` with ``struct`` code that the test suite proves
byte-identical to the description.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
import zlib
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from functools import cache
from typing import Any, ClassVar

from construct import ConstructError

from .errors import ErrorCode, LocalProtocolError, ProtocolError, RemoteProtocolError
from .limits import MAX_TOPICS_PER_MESSAGE, MAX_U32, MAX_U64
from .opcodes import Opcode
from .records import (
    MessageSet,
    RecordBatch,
    check_topics,
    encode_topic,
    read_topic,
)
from .schema import BODIES

HEADER = struct.Struct(">BI")
HEADER_SIZE = 5
_u8 = struct.Struct(">B")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_u64x2 = struct.Struct(">QQ")

CLIENT_PROTOCOL_VERSION = 1
SEGMENT_MAGIC = b"P0SL"
SEGMENT_VERSION = 1


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


class PublishFlags(IntFlag):
    NONE = 0
    #: The hub must answer with PUBLISH_ACK once the batch is stored.
    ACK = 1


#: Every flags byte's PublishFlags, made once: calling the enum per decoded PUBLISH is slow.
_PUBLISH_FLAGS = tuple(PublishFlags(i) for i in range(256))


class AckStatus(IntEnum):
    #: Stored now; ``ranges`` give the offsets assigned.
    STORED = 0
    #: This (producer, sequence) was stored before; nothing stored twice.
    DUPLICATE = 1


class UpdateOp(IntEnum):
    ADD = 1
    REMOVE = 2


# -- generic helpers -----------------------------------------------------------


def plain(value: Any) -> Any:
    """A frame (or part) as plain Python data: dicts, lists, str, int, bytes."""
    custom = getattr(value, "_plain", None)
    if custom is not None:
        return custom()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, IntEnum | IntFlag):
        return int(value)
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _from_container(cls: type, container: Any) -> Any:
    """Build dataclass ``cls`` from a construct container (derived fields dropped)."""
    hints = _hints(cls)
    kwargs = {f.name: _convert(hints[f.name], container[f.name]) for f in dataclasses.fields(cls) if f.init}
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        return tuple(_convert(item, v) for v in value)
    if dataclasses.is_dataclass(hint):
        return _from_container(hint, value)  # type: ignore[arg-type]
    if hint is bool:
        return bool(value)
    if isinstance(hint, type) and issubclass(hint, IntEnum | IntFlag):
        return hint(value)
    if hint is bytes:
        return bytes(value)
    return value


def _check_uint(name: str, value: int, maximum: int, *, minimum: int = 0) -> None:
    if not isinstance(value, int) or not minimum <= value <= maximum:
        raise LocalProtocolError(f"{name} must be an integer in {minimum}..{maximum}, got {value!r}")


def forward_set_problem(origin_seq: int, count: int, previous_last: int) -> str | None:
    """Why a forward set breaks the sequence rules (None: it does not).

    Its records take ``origin_seq .. origin_seq + count - 1``, inside 1..2^64-1 (sequence
    arithmetic never wraps), after the previous set's last sequence (``previous_last``; 0 for
    the first set): sets come in origin-sequence order and never overlap.
    """
    if origin_seq == 0:
        return "forward set with origin_seq 0 (sequences start at 1)"
    if origin_seq + count - 1 > MAX_U64:
        return f"forward set of {count} records from origin_seq {origin_seq} wraps past 2^64-1"
    if origin_seq <= previous_last:
        return f"forward set at origin_seq {origin_seq} does not follow the previous set (last {previous_last})"
    return None


# -- the base classes ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Frame:
    """Base of every frame; subclasses set ``OPCODE``."""

    OPCODE: ClassVar[Opcode]

    def encode_body(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        raise NotImplementedError

    def encode(self) -> bytes:
        try:
            body = self.encode_body()
        except struct.error as exc:
            # Hot frames do not range-check every integer when constructed; a
            # value that does not fit its field is still the caller's error.
            raise LocalProtocolError(f"cannot encode {self.OPCODE.name}: {exc}") from None
        if len(body) > MAX_U32:
            raise LocalProtocolError(f"body of {len(body)} bytes does not fit a 32-bit length")
        return HEADER.pack(self.OPCODE, len(body)) + body

    @property
    def name(self) -> str:
        return self.OPCODE.name


@dataclass(frozen=True, kw_only=True, slots=True)
class _SchemaFrame(Frame):
    """A frame encoded and decoded by its construct description alone."""

    def encode_body(self) -> bytes:
        try:
            body: bytes = BODIES[self.OPCODE].build(plain(self))
            return body
        except ConstructError as exc:
            raise LocalProtocolError(f"cannot encode {self.OPCODE.name}: {exc}") from None

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        try:
            container = BODIES[cls.OPCODE].parse(body)
            return typing.cast(Frame, _from_container(cls, container))
        except ProtocolError as exc:
            raise RemoteProtocolError(exc.reason, code=exc.code) from None
        except (ConstructError, UnicodeError, ValueError) as exc:
            raise RemoteProtocolError(f"malformed {cls.OPCODE.name} body: {_brief(exc)}") from None


def _brief(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


# -- mesh v1: the seed's frames ----------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat(Frame):
    OPCODE: ClassVar[Opcode] = Opcode.HEARTBEAT
    word: str = "ping"

    def __post_init__(self) -> None:
        if self.word not in ("ping", "pong"):
            raise LocalProtocolError(f"heartbeat body is 'ping' or 'pong', got {self.word!r}")

    def encode_body(self) -> bytes:
        return self.word.encode("ascii")

    @classmethod
    def decode_body(cls, body: bytes) -> Heartbeat:
        if body == b"ping":
            return PING
        if body == b"pong":
            return PONG
        raise RemoteProtocolError(f"heartbeat body must be b'ping' or b'pong', got {bytes(body[:8])!r}")


PING = Heartbeat(word="ping")
PONG = Heartbeat(word="pong")


def _encode_topic_list(topics: tuple[str, ...]) -> bytes:
    return b"".join(encode_topic(t) for t in topics)


def _decode_topic_list(body: bytes) -> tuple[str, ...]:
    end = len(body)
    if end == 0:
        raise RemoteProtocolError("empty topic list", code=ErrorCode.INVALID_TOPIC, offset=0)
    topics: list[str] = []
    pos = 0
    while pos < end:
        if len(topics) == MAX_TOPICS_PER_MESSAGE:
            # Refused here, as the peer's error: Subscribe.__post_init__ would
            # raise LocalProtocolError, the wrong side of the h11 split.
            raise RemoteProtocolError(
                f"more than {MAX_TOPICS_PER_MESSAGE} topics in one frame", code=ErrorCode.INVALID_TOPIC, offset=pos
            )
        topic, pos = read_topic(body, pos, end)
        topics.append(topic)
    return tuple(topics)


@dataclass(frozen=True, kw_only=True, slots=True)
class Subscribe(Frame):
    """Mesh interest: forward me messages for these topics (or patterns)."""

    OPCODE: ClassVar[Opcode] = Opcode.SUBSCRIBE
    topics: tuple[str, ...]

    def __post_init__(self) -> None:
        check_topics(self.topics)

    def encode_body(self) -> bytes:
        return _encode_topic_list(self.topics)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        return cls(topics=_decode_topic_list(body))


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsubscribe(Subscribe):
    """Mesh interest withdrawn for these topics."""

    OPCODE: ClassVar[Opcode] = Opcode.UNSUBSCRIBE


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeAck(Frame):
    OPCODE: ClassVar[Opcode] = Opcode.SUBSCRIBE_ACK
    success: bool = True

    def encode_body(self) -> bytes:
        return b"\x01" if self.success else b"\x00"

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        if body == b"\x01":
            return cls(success=True)
        if body == b"\x00":
            return cls(success=False)
        raise RemoteProtocolError(f"ack body must be 0x00 or 0x01, got {bytes(body[:4]).hex()}")


@dataclass(frozen=True, kw_only=True, slots=True)
class UnsubscribeAck(SubscribeAck):
    OPCODE: ClassVar[Opcode] = Opcode.UNSUBSCRIBE_ACK


@dataclass(frozen=True, kw_only=True, slots=True)
class Forward(Frame):
    """Mesh v1 forward of one message: ``[u8 n][topics][u32 len][data]``."""

    OPCODE: ClassVar[Opcode] = Opcode.FORWARD
    topics: tuple[str, ...]
    data: bytes

    def __post_init__(self) -> None:
        check_topics(self.topics)
        if len(self.data) > MAX_U32:
            raise LocalProtocolError("data exceeds 4 GiB")

    def encode_body(self) -> bytes:
        return b"".join(
            (
                _u8.pack(len(self.topics)),
                _encode_topic_list(self.topics),
                _u32.pack(len(self.data)),
                self.data,
            )
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end == 0:
            raise RemoteProtocolError("topic count byte missing", offset=0)
        n = body[0]
        if n == 0:
            raise RemoteProtocolError("topic count of 0", code=ErrorCode.INVALID_TOPIC, offset=0)
        pos = 1
        topics = []
        for _ in range(n):
            topic, pos = read_topic(body, pos, end)
            topics.append(topic)
        if end - pos < 4:
            raise RemoteProtocolError("data length field missing", offset=pos)
        (length,) = _u32.unpack_from(body, pos)
        stop = pos + 4 + length
        if stop != end:
            what = "runs past the end of the body" if stop > end else f"leaves {end - stop} trailing bytes"
            raise RemoteProtocolError(f"data of {length} bytes {what}", offset=pos)
        return cls(topics=tuple(topics), data=bytes(body[pos + 4 : stop]))


# -- mesh v2 ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumePosition:
    origin: int
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class MeshHello(_SchemaFrame):
    """First v2 frame each way: my hub id and, per origin, the last sequence I stored."""

    OPCODE: ClassVar[Opcode] = Opcode.MESH_HELLO
    hub_id: int
    positions: tuple[ResumePosition, ...] = ()

    def __post_init__(self) -> None:
        _check_uint("hub_id", self.hub_id, MAX_U64, minimum=1)
        origins = [p.origin for p in self.positions]
        if 0 in origins or len(set(origins)) != len(origins):
            raise LocalProtocolError("MESH_HELLO positions name each origin (never 0) at most once")


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardSet:
    """One origin publish batch's messages for some topics."""

    origin_seq: int
    timestamp: int
    messages: MessageSet


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardBatch(Frame):
    """Mesh v2 batched forward from one origin hub."""

    OPCODE: ClassVar[Opcode] = Opcode.FORWARD_BATCH
    origin: int
    sets: tuple[ForwardSet, ...]

    def __post_init__(self) -> None:
        _check_uint("origin", self.origin, MAX_U64, minimum=1)
        if not 1 <= len(self.sets) <= 0xFFFF:
            raise LocalProtocolError(f"a forward batch holds 1..65535 sets, got {len(self.sets)}")
        last = 0
        for s in self.sets:
            problem = forward_set_problem(s.origin_seq, s.messages.count, last)
            if problem is not None:
                raise LocalProtocolError(problem)
            last = s.origin_seq + s.messages.count - 1

    def encode_body(self) -> bytes:
        parts = [struct.pack(">QH", self.origin, len(self.sets))]
        for s in self.sets:
            parts.append(_u64x2.pack(s.origin_seq, s.timestamp))
            parts.append(s.messages.encode())
        return b"".join(parts)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 10:
            raise RemoteProtocolError("forward batch header needs 10 bytes", offset=0)
        origin, n = struct.unpack_from(">QH", body, 0)
        if origin == 0:
            raise RemoteProtocolError("forward batch from origin 0 (no hub has that id)", offset=0)
        if n == 0:
            raise RemoteProtocolError("forward batch with 0 sets", offset=8)
        pos = 10
        sets = []
        last = 0
        for _ in range(n):
            if end - pos < 16:
                raise RemoteProtocolError("forward set header needs 16 bytes", offset=pos)
            at = pos
            origin_seq, timestamp = _u64x2.unpack_from(body, pos)
            messages, pos = MessageSet.read(body, pos + 16, end)
            problem = forward_set_problem(origin_seq, messages.count, last)
            if problem is not None:
                raise RemoteProtocolError(problem, offset=at)
            last = origin_seq + messages.count - 1
            sets.append(ForwardSet(origin_seq=origin_seq, timestamp=timestamp, messages=messages))
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the last set", offset=pos)
        return cls(origin=origin, sets=tuple(sets))


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardAck(Frame):
    """Cumulative: every message from ``origin`` up to ``seq`` is stored here."""

    OPCODE: ClassVar[Opcode] = Opcode.FORWARD_ACK
    origin: int
    seq: int

    def __post_init__(self) -> None:
        _check_uint("origin", self.origin, MAX_U64, minimum=1)

    def encode_body(self) -> bytes:
        return _u64x2.pack(self.origin, self.seq)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        if len(body) != 16:
            raise RemoteProtocolError(f"forward ack body is 16 bytes, got {len(body)}", offset=0)
        origin, seq = _u64x2.unpack(body)
        if origin == 0:
            raise RemoteProtocolError("forward ack for origin 0 (no hub has that id)", offset=0)
        return cls(origin=origin, seq=seq)


# -- client protocol ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Hello(_SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.HELLO
    version: int = CLIENT_PROTOCOL_VERSION
    client_name: str = ""
    token: bytes = b""


@dataclass(frozen=True, kw_only=True, slots=True)
class Welcome(_SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.WELCOME
    version: int
    hub_id: int
    max_body: int
    heartbeat_ms: int
    hub_name: str = ""


_PUBLISH_HEAD = struct.Struct(">QQBH")


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
        _check_uint("producer_id", self.producer_id, MAX_U64)
        _check_uint("sequence", self.sequence, MAX_U64)
        _check_uint("flags", int(self.flags), 0xFF)
        if not 1 <= len(self.sets) <= 0xFFFF:
            raise LocalProtocolError(f"a publish holds 1..65535 message sets, got {len(self.sets)}")

    def encode_body(self) -> bytes:
        head = _PUBLISH_HEAD.pack(self.producer_id, self.sequence, self.flags, len(self.sets))
        return head + b"".join(s.encode() for s in self.sets)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 19:
            raise RemoteProtocolError("publish header needs 19 bytes", offset=0)
        producer_id, sequence, flags, n = _PUBLISH_HEAD.unpack_from(body, 0)
        if n == 0:
            raise RemoteProtocolError("publish with 0 message sets", offset=17)
        pos = 19
        sets = []
        for _ in range(n):
            s, pos = MessageSet.read(body, pos, end)
            sets.append(s)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the last set", offset=pos)
        return cls(producer_id=producer_id, sequence=sequence, flags=_PUBLISH_FLAGS[flags], sets=tuple(sets))

    @property
    def wants_ack(self) -> bool:
        # int's own & : IntFlag's goes through the enum machinery (~2% of a hub's publish path).
        return bool(int.__and__(self.flags, PublishFlags.ACK))

    @property
    def message_count(self) -> int:
        return sum(s.count for s in self.sets)


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
        parts = [_ACK_HEAD.pack(self.producer_id, self.sequence, self.status, self.timestamp, len(self.ranges))]
        for r in self.ranges:
            parts.append(encode_topic(r.topic))
            parts.append(_RANGE_TAIL.pack(r.first_offset, r.num))
        return b"".join(parts)

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


@dataclass(frozen=True, kw_only=True, slots=True)
class TopicOffset:
    topic: str
    offset: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Sub(_SchemaFrame):
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

    def __post_init__(self) -> None:
        if not 1 <= len(self.patterns) <= 0xFFFF:
            raise LocalProtocolError("a subscription needs 1..65535 topics or patterns")
        for p in self.patterns:
            encode_topic(p)


@dataclass(frozen=True, kw_only=True, slots=True)
class SubOk(_SchemaFrame):
    """The subscription is open; ``offsets`` is where it starts on each known topic."""

    OPCODE: ClassVar[Opcode] = Opcode.SUB_OK
    sub_id: int
    offsets: tuple[TopicOffset, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsub(_SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.UNSUB
    sub_id: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SubUpdate(_SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.SUB_UPDATE
    sub_id: int
    op: UpdateOp
    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.patterns) <= 0xFFFF:
            raise LocalProtocolError("an update needs 1..65535 topics or patterns")
        for p in self.patterns:
            encode_topic(p)


_u32_struct = _u32


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
        return _u32.pack(self.sub_id) + self.batch.encode()

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        end = len(body)
        if end < 4:
            raise RemoteProtocolError("subscription id missing", offset=0)
        (sub_id,) = _u32.unpack_from(body, 0)
        batch, pos = RecordBatch.read(body, 4, end)
        if pos != end:
            raise RemoteProtocolError(f"{end - pos} trailing bytes after the record batch", offset=pos)
        return cls(sub_id=sub_id, batch=batch)


_DELIVER_PREFIX = struct.Struct(">BII")


def deliver_prefix(sub_id: int, encoded_batch_len: int) -> bytes:
    """Header + subscription id of a DELIVER whose batch is already encoded."""
    return _DELIVER_PREFIX.pack(Opcode.DELIVER, 4 + encoded_batch_len, sub_id)


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
            parts.append(_u64x2.pack(r.first_offset, r.last_offset))
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
            first, last = _u64x2.unpack_from(body, pos)
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
class Gap(_SchemaFrame):
    """``dropped`` messages of ``topic`` from ``first_offset`` on were dropped (drop-oldest)."""

    OPCODE: ClassVar[Opcode] = Opcode.GAP
    sub_id: int
    topic: str
    first_offset: int
    dropped: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SubEnd(_SchemaFrame):
    """The hub ended subscription ``sub_id``."""

    OPCODE: ClassVar[Opcode] = Opcode.SUB_END
    sub_id: int
    code: ErrorCode
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Error(_SchemaFrame):
    """An error; ``ref`` names the publish sequence or subscription it concerns (0: none)."""

    OPCODE: ClassVar[Opcode] = Opcode.ERROR
    code: ErrorCode
    reason: str = ""
    ref: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Status(_SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.STATUS


@dataclass(frozen=True, kw_only=True, slots=True)
class StatusReply(_SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.STATUS_REPLY
    document: bytes


# -- log segments -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SegmentHeader(_SchemaFrame):
    """First frame of every segment file."""

    OPCODE: ClassVar[Opcode] = Opcode.SEGMENT_HEADER
    topic: str
    base_offset: int
    created: int
    magic: bytes = SEGMENT_MAGIC
    version: int = SEGMENT_VERSION


_LOG_HEAD = struct.Struct(">IQQQ")


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
        return _u32.pack(self.crc) + head + self.batch.encode()

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


_LOG_HEAD_NO_CRC = struct.Struct(">QQQB")


FRAME_TYPES: dict[Opcode, type[Frame]] = {
    cls.OPCODE: cls
    for cls in (
        Heartbeat,
        Subscribe,
        SubscribeAck,
        Unsubscribe,
        UnsubscribeAck,
        Forward,
        MeshHello,
        ForwardBatch,
        ForwardAck,
        Hello,
        Welcome,
        Publish,
        PublishAck,
        Sub,
        SubOk,
        Unsub,
        SubUpdate,
        Deliver,
        Ack,
        Credit,
        Gap,
        SubEnd,
        Error,
        Status,
        StatusReply,
        SegmentHeader,
        LogBatch,
    )
}
assert set(FRAME_TYPES) == set(Opcode), "every opcode needs a frame type"
