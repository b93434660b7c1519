"""What every frame shares: the 5-byte header, the ``Frame`` base and the schema codec.

``frame.encode()`` returns the whole frame (5-byte header + body).
``Frame.decode_body(body)`` parses one complete body slice; the incremental
:class:`~wire.decoder.FrameDecoder` calls it once the header is checked and
the body has fully arrived.

Cold frames are encoded and decoded by their construct description in
:mod:`wire.schema` (they subclass :class:`SchemaFrame`).  Hot frames override
``encode_body``/``decode_body`` with ``struct`` code that the test suite proves
byte-identical to the description.

The frames themselves live in one module per protocol (``mesh_v1``, ``mesh_v2``,
``client_*``, ``log_segment``).  No frame type subclasses another: a shared body
layout is shared through a private base that no frame is an instance of by meaning,
so ``isinstance`` never confuses two opcodes.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from functools import cache
from typing import Any, ClassVar

from construct import ConstructError

from ..errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ..limits import MAX_U32
from ..opcodes import Opcode
from ..schema import BODIES

HEADER = struct.Struct(">BI")
HEADER_SIZE = 5
U8 = struct.Struct(">B")
U32 = struct.Struct(">I")
U64X2 = struct.Struct(">QQ")


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


def check_uint(name: str, value: int, maximum: int, *, minimum: int = 0) -> None:
    """Refuse (as the caller's error) an integer field outside ``minimum..maximum``."""
    if not isinstance(value, int) or not minimum <= value <= maximum:
        raise LocalProtocolError(f"{name} must be an integer in {minimum}..{maximum}, got {value!r}")


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
class SchemaFrame(Frame):
    """A frame encoded and decoded by its construct description alone (a codec, not a meaning)."""

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
    if origin is typing.Union or origin is types.UnionType:  # ``X | None``: an optional part of a body
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner, value)
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


def _brief(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]
