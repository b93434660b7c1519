"""The incremental frame decoder: ``feed(bytes)`` then take whole frames.

Shaped like h11's ``Connection``: no I/O, just bytes in and events out.

Order of work for each frame: wait for the 5 header bytes -> check the opcode
(``Opcode(value)``) and the body length against the configured limit and the
opcode's own size bounds -> only then wait for the body -> parse exactly that
slice.  A bogus length such as 0xFFFFFFFF is refused at the header, before a
single body byte is buffered.  After an error the decoder stays failed.
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import ErrorCode, ProtocolError, RemoteProtocolError
from .frames import FRAME_TYPES, HEADER, HEADER_SIZE, Frame
from .limits import Limits
from .opcodes import ALL_OPCODES, Opcode

#: (minimum, maximum or None) body length of each opcode, from its layout.
BODY_BOUNDS: dict[Opcode, tuple[int, int | None]] = {
    Opcode.HEARTBEAT: (4, 4),
    Opcode.SUBSCRIBE: (2, None),
    Opcode.SUBSCRIBE_ACK: (1, 1),
    Opcode.UNSUBSCRIBE: (2, None),
    Opcode.UNSUBSCRIBE_ACK: (1, 1),
    Opcode.FORWARD: (7, None),
    Opcode.FORWARD_BATCH_HEADERS: (45, None),
    Opcode.MESH_HELLO: (10, None),
    Opcode.FORWARD_BATCH: (43, None),
    Opcode.FORWARD_ACK: (16, 16),
    Opcode.LINK_STATE: (29, None),
    Opcode.ROUTED_SETS: (62, None),
    Opcode.ROUTED_SETS_HEADERS: (64, None),
    Opcode.ROUTED: (3 + 8 + 8 + 5 + 4, None),  # the smallest inner frame: INTEREST with nothing
    Opcode.INTEREST: (4, None),
    Opcode.WATCH: (7, 7 + 254),
    Opcode.INTEREST_SET: (9, None),
    Opcode.JOINED: (10, 10 + 254),
    Opcode.HEADS: (12, None),
    Opcode.SYNC: (6, None),
    Opcode.REPAIR: (18, 18 + 254),
    Opcode.REPAIRED: (18, 18 + 254),
    Opcode.HELLO: (5, 2 + 256 + 2 + 0xFFFF),
    Opcode.WELCOME: (19, 19 + 255),
    Opcode.PUBLISH: (36, None),
    Opcode.PUBLISH_ACK: (27, None),
    Opcode.SUB: (31, None),
    Opcode.SUB_OK: (6, None),
    Opcode.UNSUB: (4, 4),
    Opcode.SUB_UPDATE: (9, None),
    Opcode.DELIVER: (52, None),
    Opcode.ACK: (24, None),
    Opcode.CREDIT: (8, 8),
    Opcode.GAP: (22, 22 + 254),
    Opcode.SUB_END: (8, 8 + 0xFFFF),
    Opcode.ERROR: (12, 12 + 0xFFFF),
    Opcode.STATUS: (0, 0),
    Opcode.STATUS_REPLY: (4, None),
    Opcode.COMMIT: (8, 8),
    Opcode.COMMITTED: (10, None),
    Opcode.DELIVER_HEADERS: (54, None),
    Opcode.KEY_FILTER: (10, None),
    Opcode.SEGMENT_HEADER: (24, 24 + 254),
    Opcode.LOG_BATCH: (79, None),
    Opcode.LOG_BATCH_HEADERS: (81, None),
}
assert set(BODY_BOUNDS) == set(Opcode)

_VALUES = {int(op): op for op in Opcode}
_COMPACT_AT = 1 << 16


def check_header(
    opcode_value: int, length: int, *, limits: Limits, accept: frozenset[Opcode] = ALL_OPCODES
) -> Opcode:
    """Validate a frame header; offsets in errors are relative to the header."""
    op = _VALUES.get(opcode_value)
    if op is None:
        raise RemoteProtocolError(
            f"unknown opcode {opcode_value} (0x{opcode_value:02x})", code=ErrorCode.UNKNOWN_OPCODE, offset=0
        )
    if op not in accept:
        raise RemoteProtocolError(
            f"{op.name} (opcode {opcode_value}) is not allowed here", code=ErrorCode.UNEXPECTED_FRAME, offset=0
        )
    if length > limits.max_body:
        raise RemoteProtocolError(
            f"{op.name} body length {length} exceeds the limit of {limits.max_body} bytes",
            code=ErrorCode.FRAME_TOO_LARGE,
            offset=1,
        )
    low, high = BODY_BOUNDS[op]
    if length < low or (high is not None and length > high):
        span = f"{low}" if high == low else f"{low}..{high if high is not None else 'limit'}"
        raise RemoteProtocolError(f"{op.name} body length {length} is outside {span} bytes", offset=1)
    return op


class FrameDecoder:
    """Turn a byte stream into frames, incrementally.

    >>> d = FrameDecoder()
    >>> d.feed(bytes.fromhex("0200000010 07746f7069635f31 07746f7069635f32".replace(" ", "")))
    >>> d.next_frame()
    Subscribe(topics=('topic_1', 'topic_2'))
    """

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        accept: frozenset[Opcode] = ALL_OPCODES,
        start_offset: int = 0,
    ) -> None:
        self.limits = limits or Limits()
        self.accept = accept
        self._buf = bytearray()
        self._pos = 0
        #: absolute stream offset of ``self._buf[0]``
        self._base = start_offset
        self._pending: tuple[Opcode, int] | None = None
        self.error: ProtocolError | None = None
        #: stream offset and body length of the frame last returned
        self.frame_offset = start_offset
        self.frame_length = 0

    @property
    def offset(self) -> int:
        """Absolute stream offset of the first byte not yet consumed."""
        return self._base + self._pos

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error
        self._buf += data

    def next_frame(self) -> Frame | None:
        """The next whole frame, or ``None`` until more bytes arrive."""
        if self.error is not None:
            raise self.error
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if self._pending is None:
            if avail < HEADER_SIZE:
                return None
            value, length = HEADER.unpack_from(buf, pos)
            try:
                op = check_header(value, length, limits=self.limits, accept=self.accept)
            except ProtocolError as exc:
                raise self._fail(exc.at(self.offset)) from None
            self._pending = (op, length)
        op, length = self._pending
        if avail < HEADER_SIZE + length:
            return None
        start = pos + HEADER_SIZE
        body = bytes(buf[start : start + length])
        try:
            frame = FRAME_TYPES[op].decode_body(body)
        except ProtocolError as exc:
            raise self._fail(exc.at(self.offset + HEADER_SIZE)) from None
        self.frame_offset = self.offset
        self.frame_length = length
        self._pending = None
        self._pos = start + length
        if self._pos >= _COMPACT_AT and self._pos * 2 >= len(buf):
            del buf[: self._pos]
            self._base += self._pos
            self._pos = 0
        return frame

    def __iter__(self) -> Iterator[Frame]:
        while (frame := self.next_frame()) is not None:
            yield frame

    def take_buffered(self) -> bytes:
        """Hand over the bytes received but not yet decoded, and forget them.

        For a reader that switches to its own parsing after a handshake: bytes
        that arrived in the same read as the last handshake frame are not lost.
        """
        if self._pending is not None:
            raise RuntimeError("a frame header was already consumed; its body cannot be handed over")
        rest = bytes(self._buf[self._pos :])
        self._base += len(self._buf)
        self._buf.clear()
        self._pos = 0
        return rest

    def close(self) -> None:
        """Declare end of input: a partial frame left over is an error."""
        if self.error is not None:
            raise self.error
        left = self.buffered
        if left:
            if self._pending is not None:
                op, length = self._pending
                reason = f"input ends inside a {op.name} frame: {left - HEADER_SIZE} of {length} body bytes present"
            else:
                reason = f"input ends inside a frame header: {left} of 5 bytes present"
            raise self._fail(RemoteProtocolError(reason, code=ErrorCode.TRUNCATED, offset=self.offset))

    def _fail(self, exc: ProtocolError) -> ProtocolError:
        error = RemoteProtocolError(exc.reason, code=exc.code, offset=exc.offset)
        self.error = error
        return error
