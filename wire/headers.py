"""Message headers: a small map of names to text or bytes, carried once per message set.

A headers *block* is ``[u16 block_len]`` then ``block_len`` bytes of entries, each
``[u8 name_len][name UTF-8][u8 kind][u16 value_len][value]`` with ``kind`` 0 = text
(UTF-8) or 1 = bytes.  Names are 1..255 bytes and unique within a block.  The block
``0000`` means "no headers"; everywhere else in ``wire`` and the hub a set without
headers holds ``b""``, so a headerless batch costs nothing (docs/protocol.md §4).

The hub never looks inside a block on the hot path: it validates it once where it
enters (a decoded frame) and then copies its bytes, as it does a record region.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import LocalProtocolError, RemoteProtocolError

#: The block length travels in 16 bits.
MAX_HEADERS_BYTES = 0xFFFF
#: A name's length travels in one byte.
MAX_HEADER_NAME_BYTES = 255
#: ``kind`` of a value.
TEXT = 0
BYTES = 1

#: What a set without headers carries where a block is due.
EMPTY_BLOCK = b"\x00\x00"

#: A set carrying this header (any value) marks its records with empty data as deletions of
#: their keys: on a compacted topic a tombstone removes every earlier value of its key and is
#: itself removed after the hub's ``--compact-tombstone-seconds`` (docs/compaction.md).
TOMBSTONE_HEADER = "pub0sub.tombstone"

_u16 = struct.Struct(">H")

HeaderValue = str | bytes


def encode_headers(headers: Mapping[str, HeaderValue] | None) -> bytes:
    """The block for ``headers``: ``b""`` for none (or an empty map), else ``[u16 len][entries]``."""
    if not headers:
        return b""
    parts: list[bytes] = []
    for name, value in headers.items():
        if not isinstance(name, str):
            raise LocalProtocolError(f"header name must be str, got {type(name).__name__}")
        raw_name = name.encode("utf-8")
        if not 1 <= len(raw_name) <= MAX_HEADER_NAME_BYTES:
            raise LocalProtocolError(f"header name {name!r} must be 1..{MAX_HEADER_NAME_BYTES} bytes of UTF-8")
        if isinstance(value, str):
            kind, raw = TEXT, value.encode("utf-8")
        elif isinstance(value, bytes | bytearray | memoryview):
            kind, raw = BYTES, bytes(value)
        else:
            raise LocalProtocolError(f"header {name!r}: value must be str or bytes, got {type(value).__name__}")
        if len(raw) > 0xFFFF:
            raise LocalProtocolError(f"header {name!r}: value of {len(raw)} bytes exceeds 65535")
        parts += (bytes((len(raw_name),)), raw_name, bytes((kind,)), _u16.pack(len(raw)), raw)
    entries = b"".join(parts)
    if len(entries) > MAX_HEADERS_BYTES:
        raise LocalProtocolError(f"headers of {len(entries)} bytes exceed {MAX_HEADERS_BYTES}")
    return _u16.pack(len(entries)) + entries


def read_headers(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """Validate the block at ``pos``: ``(block, new_pos)``, the block ``b""`` when it is empty.

    Offsets in errors are relative to ``buf``.
    """
    if end - pos < 2:
        raise RemoteProtocolError("headers block length needs 2 bytes", offset=pos)
    (length,) = _u16.unpack_from(buf, pos)
    stop = pos + 2 + length
    if stop > end:
        raise RemoteProtocolError(f"headers block of {length} bytes runs past the end of the body", offset=pos)
    if length == 0:
        return b"", stop
    block = bytes(buf[pos:stop])
    for _ in _entries(block, base=pos):
        pass
    return block, stop


def _entries(block: bytes, *, base: int = 0) -> Iterator[tuple[str, int, bytes]]:
    """``(name, kind, value)`` of each entry of a whole block, checking every rule as it goes."""
    end = len(block)
    pos = 2
    seen: set[str] = set()
    while pos < end:
        n = block[pos]
        if n == 0:
            raise RemoteProtocolError("header name of length 0", offset=base + pos)
        name_end = pos + 1 + n
        if name_end + 3 > end:
            raise RemoteProtocolError("header entry runs past its block", offset=base + pos)
        try:
            name = block[pos + 1 : name_end].decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError("header name is not valid UTF-8", offset=base + pos) from None
        if name in seen:
            raise RemoteProtocolError(f"header {name!r} appears twice", offset=base + pos)
        seen.add(name)
        kind = block[name_end]
        if kind not in (TEXT, BYTES):
            raise RemoteProtocolError(f"header {name!r}: unknown value kind {kind}", offset=base + name_end)
        (size,) = _u16.unpack_from(block, name_end + 1)
        value_at = name_end + 3
        if value_at + size > end:
            raise RemoteProtocolError(f"header {name!r}: value runs past its block", offset=base + name_end + 1)
        value = block[value_at : value_at + size]
        if kind == TEXT:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise RemoteProtocolError(f"header {name!r}: text value is not UTF-8", offset=base + value_at) from None
        yield name, kind, value
        pos = value_at + size


def decode_headers(block: bytes) -> dict[str, HeaderValue]:
    """The map a validated block holds (``{}`` for ``b""``), text values as ``str``, bytes as ``bytes``."""
    if not block:
        return {}
    return {name: value.decode("utf-8") if kind == TEXT else value for name, kind, value in _entries(block)}


def is_tombstone_block(block: bytes) -> bool:
    """Does a validated block carry :data:`TOMBSTONE_HEADER`?"""
    return bool(block) and any(name == TOMBSTONE_HEADER for name, _, _ in _entries(block))


def headers_plain(block: bytes) -> list[dict[str, Any]]:
    """The entries as plain data (``wire.plain``, the decoder's ``--json``)."""
    return [{"name": n, "kind": k, "value": v} for n, k, v in _entries(block)] if block else []
