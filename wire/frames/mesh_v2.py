"""Mesh v2 (``/pub0sub/mesh/2.0.0``): the seed's frames plus batched, sequenced forwards.

``/pub0sub/mesh/2.1.0`` is v2 plus FORWARD_BATCH_HEADERS, for sets that carry headers.

MESH_HELLO says where the sender should resume; FORWARD_BATCH carries origin hub id,
origin sequence and timestamp per message set; FORWARD_ACK is cumulative.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import LocalProtocolError, RemoteProtocolError
from ..limits import MAX_U64
from ..opcodes import Opcode
from ..records import MessageSet
from .base import U64X2, Frame, SchemaFrame, check_uint


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


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumePosition:
    origin: int
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class MeshHello(SchemaFrame):
    """First v2 frame each way: my hub id and, per origin, the last sequence I stored."""

    OPCODE: ClassVar[Opcode] = Opcode.MESH_HELLO
    hub_id: int
    positions: tuple[ResumePosition, ...] = ()

    def __post_init__(self) -> None:
        check_uint("hub_id", self.hub_id, MAX_U64, minimum=1)
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
        _check_forward_sets(self.origin, self.sets)
        if any(s.messages.headers for s in self.sets):
            raise LocalProtocolError("a set with headers travels in FORWARD_BATCH_HEADERS, not FORWARD_BATCH")

    def encode_body(self) -> bytes:
        return _encode_forward_sets(self.origin, self.sets, headered=False)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        origin, sets = _decode_forward_sets(body, headered=False)
        return cls(origin=origin, sets=sets)


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardBatchHeaders(Frame):
    """FORWARD_BATCH whose sets each carry a headers block (``/pub0sub/mesh/2.1.0`` only).

    The same fields and rules as :class:`ForwardBatch`; every set's layout is
    ``origin_seq, timestamp, headers block, MessageSet``.  A hub sends it only when a set
    of the frame has headers, so a headerless stream looks exactly as on a 2.0.0 link.
    """

    OPCODE: ClassVar[Opcode] = Opcode.FORWARD_BATCH_HEADERS
    origin: int
    sets: tuple[ForwardSet, ...]

    def __post_init__(self) -> None:
        _check_forward_sets(self.origin, self.sets)

    def encode_body(self) -> bytes:
        return _encode_forward_sets(self.origin, self.sets, headered=True)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        origin, sets = _decode_forward_sets(body, headered=True)
        return cls(origin=origin, sets=sets)

    def _plain(self) -> dict[str, Any]:
        sets = [
            {"origin_seq": s.origin_seq, "timestamp": s.timestamp, "messages": s.messages.plain_headered()}
            for s in self.sets
        ]
        return {"origin": self.origin, "sets": sets}


def _check_forward_sets(origin: int, sets: tuple[ForwardSet, ...]) -> None:
    check_uint("origin", origin, MAX_U64, minimum=1)
    if not 1 <= len(sets) <= 0xFFFF:
        raise LocalProtocolError(f"a forward batch holds 1..65535 sets, got {len(sets)}")
    last = 0
    for s in sets:
        problem = forward_set_problem(s.origin_seq, s.messages.count, last)
        if problem is not None:
            raise LocalProtocolError(problem)
        last = s.origin_seq + s.messages.count - 1


def _encode_forward_sets(origin: int, sets: tuple[ForwardSet, ...], *, headered: bool) -> bytes:
    parts = [struct.pack(">QH", origin, len(sets))]
    for s in sets:
        parts.append(U64X2.pack(s.origin_seq, s.timestamp))
        parts.append(s.messages.encode_headered() if headered else s.messages.encode())
    return b"".join(parts)


def _decode_forward_sets(body: bytes, *, headered: bool) -> tuple[int, tuple[ForwardSet, ...]]:
    end = len(body)
    if end < 10:
        raise RemoteProtocolError("forward batch header needs 10 bytes", offset=0)
    origin, n = struct.unpack_from(">QH", body, 0)
    if origin == 0:
        raise RemoteProtocolError("forward batch from origin 0 (no hub has that id)", offset=0)
    if n == 0:
        raise RemoteProtocolError("forward batch with 0 sets", offset=8)
    read = MessageSet.read_headered if headered else MessageSet.read
    pos = 10
    sets = []
    last = 0
    for _ in range(n):
        if end - pos < 16:
            raise RemoteProtocolError("forward set header needs 16 bytes", offset=pos)
        at = pos
        origin_seq, timestamp = U64X2.unpack_from(body, pos)
        messages, pos = read(body, pos + 16, end)
        problem = forward_set_problem(origin_seq, messages.count, last)
        if problem is not None:
            raise RemoteProtocolError(problem, offset=at)
        last = origin_seq + messages.count - 1
        sets.append(ForwardSet(origin_seq=origin_seq, timestamp=timestamp, messages=messages))
    if pos != end:
        raise RemoteProtocolError(f"{end - pos} trailing bytes after the last set", offset=pos)
    return origin, tuple(sets)


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardAck(Frame):
    """Cumulative: every message from ``origin`` up to ``seq`` is stored here."""

    OPCODE: ClassVar[Opcode] = Opcode.FORWARD_ACK
    origin: int
    seq: int

    def __post_init__(self) -> None:
        check_uint("origin", self.origin, MAX_U64, minimum=1)

    def encode_body(self) -> bytes:
        return U64X2.pack(self.origin, self.seq)

    @classmethod
    def decode_body(cls, body: bytes) -> Frame:
        if len(body) != 16:
            raise RemoteProtocolError(f"forward ack body is 16 bytes, got {len(body)}", offset=0)
        origin, seq = U64X2.unpack(body)
        if origin == 0:
            raise RemoteProtocolError("forward ack for origin 0 (no hub has that id)", offset=0)
        return cls(origin=origin, seq=seq)
