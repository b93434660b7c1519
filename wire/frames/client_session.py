"""Client protocol, the connection itself: greeting, errors and the status document.

These are cold frames: :mod:`wire.schema` encodes and decodes them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ErrorCode
from ..opcodes import Opcode
from .base import SchemaFrame

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


@dataclass(frozen=True, kw_only=True, slots=True)
class Status(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.STATUS


@dataclass(frozen=True, kw_only=True, slots=True)
class StatusReply(SchemaFrame):
    OPCODE: ClassVar[Opcode] = Opcode.STATUS_REPLY
    document: bytes
