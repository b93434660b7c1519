"""Client protocol, the connection itself: greeting, errors and the status document.

These are cold frames: :mod:`wire.schema` encodes and decodes them directly, except that an
ERROR is also encoded by hand: a hub under a connection storm refuses thousands a second,
each with an ERROR, and the schema's build took two thirds of a refusal's time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ErrorCode, LocalProtocolError
from ..opcodes import Opcode
from .base import SchemaFrame

_ERROR_HEAD = struct.Struct(">HQH")  # code, ref, the reason's length (wire.schema's ERROR body)

CLIENT_PROTOCOL_VERSION = 3
#: The client protocol version that added headers (PUBLISH flag HEADERS, DELIVER_HEADERS).
HEADERS_CLIENT_VERSION = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class Hello(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.HELLO
    version: int = CLIENT_PROTOCOL_VERSION
    client_name: str = ""
    token: bytes = b""


@dataclass(frozen=True, kw_only=True, slots=True)
class Welcome(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.WELCOME
    version: int
    hub_id: int
    max_body: int
    heartbeat_ms: int
    hub_name: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Error(SchemaFrame):
    """An error; ``ref`` names the publish sequence or subscription it concerns (0: none)."""

    OPCODE: ClassVar[Opcode] = Opcode.ERROR
    code: ErrorCode
    reason: str = ""
    ref: int = 0

    def encode_body(self) -> bytes:
        """The schema's bytes (tests/test_wire_frames.py holds the two alike), built directly."""
        reason = self.reason.encode()
        if len(reason) > 0xFFFF:
            raise LocalProtocolError(f"cannot encode ERROR: a reason of {len(reason)} bytes does not fit 65535")
        return _ERROR_HEAD.pack(self.code, self.ref, len(reason)) + reason


@dataclass(frozen=True, kw_only=True, slots=True)
class Status(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.STATUS


@dataclass(frozen=True, kw_only=True, slots=True)
class StatusReply(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.STATUS_REPLY
    document: bytes
