"""The ProtocolError family.

Like h11: one base class carrying an error code and a byte offset, split into
"the peer sent garbage" (:class:`RemoteProtocolError`) and "we were asked to
send garbage" (:class:`LocalProtocolError`).  The same :class:`ErrorCode`
values travel in ERROR and SUB_END frames, so a code in a log line, an ERROR
frame and an SDK exception always mean the same thing.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    #: A frame body does not match its layout.
    MALFORMED_FRAME = 1
    #: The opcode byte names no known frame.
    UNKNOWN_OPCODE = 2
    #: The body length in the header is over the configured limit.
    FRAME_TOO_LARGE = 3
    #: A valid frame that is not allowed here (wrong direction or state).
    UNEXPECTED_FRAME = 4
    #: A named limit (topics, subscriptions, connections, pending bytes) was hit.
    LIMIT_EXCEEDED = 5
    #: A topic or pattern that is empty, too long, not UTF-8 or badly formed.
    INVALID_TOPIC = 6
    #: The subscription id is not open on this connection.
    UNKNOWN_SUBSCRIPTION = 7
    #: Authentication failed or the operation is not granted.
    NOT_AUTHORIZED = 8
    #: A live subscription could not keep up and was cancelled.
    OUT_OF_CAPACITY = 9
    #: The subscription ended because the client asked for it.
    UNSUBSCRIBED = 10
    #: The peer stayed silent for longer than the heartbeat bound.
    HEARTBEAT_TIMEOUT = 11
    #: The hub is shutting down.
    SHUTTING_DOWN = 12
    #: A stored record failed its checksum.
    CHECKSUM_MISMATCH = 13
    #: The input ended in the middle of a frame.
    TRUNCATED = 14
    #: The subscription id is already in use on this connection.
    DUPLICATE_SUBSCRIPTION = 15
    #: The requested start position is not available (no log, or retention removed it).
    POSITION_UNAVAILABLE = 16
    #: The hub could not store the batch (disk error).
    STORAGE_ERROR = 17
    #: An unexpected hub-side failure; the hub logs the details.
    INTERNAL = 18
    #: The client speaks a protocol version the hub does not.
    UNSUPPORTED_VERSION = 19
    #: An ACK names offsets that were not delivered to that subscription (or it takes no acks).
    INVALID_ACK = 20
    #: A SUB's tag query does not parse (client protocol 3; the reason names the position).
    INVALID_QUERY = 21


class ProtocolError(Exception):
    """A frame could not be encoded or decoded.

    ``offset`` is the absolute byte offset in the input stream where the
    problem was found (``None`` when encoding).
    """

    def __init__(
        self, reason: str, *, code: ErrorCode = ErrorCode.MALFORMED_FRAME, offset: int | None = None
    ) -> None:
        self.reason = reason
        self.code = code
        self.offset = offset
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"at byte {self.offset}: " if self.offset is not None else ""
        return f"{where}{self.reason} ({self.code.name})"

    def at(self, offset: int) -> ProtocolError:
        """The same error with its offset shifted by ``offset`` (body -> stream)."""
        shifted = type(self)(self.reason, code=self.code, offset=offset + (self.offset or 0))
        return shifted


class RemoteProtocolError(ProtocolError):
    """The peer (or the file) sent bytes that are not a valid frame."""


class LocalProtocolError(ProtocolError):
    """We were asked to build a frame that cannot be valid."""
