"""Mesh v1 (``/pub0sub/mesh/1.0.0``): exactly the seed's opcodes 1-6 and their layouts.

HEARTBEAT is also the liveness check on client connections.  All six are hot frames
with ``struct`` code (``tests/test_wire_fastpath.py`` proves them equal to
:mod:`wire.schema`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from ..limits import MAX_TOPICS_PER_MESSAGE, MAX_U32
from ..opcodes import Opcode
from ..records import check_topics, encode_topic, read_topic
from .base import U8, U32, Frame


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
            # Refused here, as the peer's error: the frame's __post_init__ would
            # raise LocalProtocolError, the wrong side of the h11 split.
            raise RemoteProtocolError(
                f"more than {MAX_TOPICS_PER_MESSAGE} topics in one frame", code=ErrorCode.INVALID_TOPIC, offset=pos
            )
        topic, pos = read_topic(body, pos, end)
        topics.append(topic)
    return tuple(topics)


@dataclass(frozen=True, kw_only=True, slots=True)
class _TopicListBody(Frame):
    """The body SUBSCRIBE and UNSUBSCRIBE share: ``[u8 len][topic]`` until the body ends.

    A layout, not a meaning: the two frames subclass this, never each other, so
    ``isinstance(frame, Subscribe)`` is false for an UNSUBSCRIBE.
    """

    topics: tuple[str, ...]

    def __post_init__(self) -> None:
        check_topics(self.topics)

    def encode_body(self) -> bytes:
        return _encode_topic_list(self.topics)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        return cls(topics=_decode_topic_list(body))


@dataclass(frozen=True, kw_only=True, slots=True)
class Subscribe(_TopicListBody):
    """Mesh interest: forward me messages for these topics (or patterns)."""

    OPCODE: ClassVar[Opcode] = Opcode.SUBSCRIBE


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsubscribe(_TopicListBody):
    """Mesh interest withdrawn for these topics."""

    OPCODE: ClassVar[Opcode] = Opcode.UNSUBSCRIBE


@dataclass(frozen=True, kw_only=True, slots=True)
class _SuccessByteBody(Frame):
    """The body SUBSCRIBE_ACK and UNSUBSCRIBE_ACK share: one byte, 1 = success, 0 = failure.

    A layout, not a meaning (see :class:`_TopicListBody`).
    """

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
class SubscribeAck(_SuccessByteBody):
    """Answer to SUBSCRIBE: the interest was noted (or refused)."""

    OPCODE: ClassVar[Opcode] = Opcode.SUBSCRIBE_ACK


@dataclass(frozen=True, kw_only=True, slots=True)
class UnsubscribeAck(_SuccessByteBody):
    """Answer to UNSUBSCRIBE: the interest was removed (or not)."""

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
                U8.pack(len(self.topics)),
                _encode_topic_list(self.topics),
                U32.pack(len(self.data)),
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
        (length,) = U32.unpack_from(body, pos)
        stop = pos + 4 + length
        if stop != end:
            what = "runs past the end of the body" if stop > end else f"leaves {end - stop} trailing bytes"
            raise RemoteProtocolError(f"data of {length} bytes {what}", offset=pos)
        return cls(topics=tuple(topics), data=bytes(body[pos + 4 : stop]))
