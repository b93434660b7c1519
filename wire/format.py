r"""Format decoded frames for people and machines, like :func:`pickletools.dis`.

Three shapes, one per ``pub0sub decode`` mode:

* :func:`frame_line` -- one line per frame: offset, opcode, name, body length
  and a summary of the fields (record batches as count + offset range + a
  preview of the first record's data).
* :func:`frame_verbose` -- the same header, then every field and every record,
  one per line, indented under it.
* :func:`frame_json` -- a JSON-able dict: ``offset``, ``opcode``, ``name``,
  ``length`` and the fields under their dataclass names.  An enum field gives
  its int plus ``<field>_name``; a record region (``records``) becomes a list
  of ``{"key", "data"}`` objects (with ``offset`` inside a record batch).

Hub ids (``origin``, ``hub_id``) are 16 hex digits in all three, as everywhere
else in pub0sub (:func:`hub_id_text`).

Binary values (data, keys, tokens, magic, status documents) are shown in one
of three :data:`BytesStyle` s.  The default, ``"text"``, is Python's bytes
repr without the ``b''``: printable ASCII as is, ``\\`` for a backslash and
``\xNN`` for every other byte, so ``b"hello"`` shows as ``hello`` and the
text is always plain ASCII.  ``"hex"`` and ``"base64"`` are the usual encodings.

>>> from wire import Forward
>>> frame = Forward(topics=("topic_1",), data=b"hi\n")
>>> frame_line(frame, offset=0, length=16)
'       0  0x06 FORWARD         len=16      topics=["topic_1"] data="hi\\x0a"'
>>> frame_json(frame, offset=0, length=16)["data"]
'hi\\x0a'
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from enum import IntEnum, IntFlag
from typing import Any, Literal

from .frames import Frame
from .headers import decode_headers
from .records import MessageSet, RecordBatch, iter_records

BytesStyle = Literal["text", "hex", "base64"]
BYTES_STYLES: tuple[BytesStyle, ...] = ("text", "hex", "base64")

#: Bytes of data shown in a one-line summary; ``-v`` and ``--json`` show all.
PREVIEW_BYTES = 32
#: Items of a list shown in a one-line summary before "+N more".
PREVIEW_ITEMS = 3
#: Indent of one nesting level in verbose output.
INDENT = "  "
#: Fields holding a hub id: shown as 16 hex digits, as the hub's start-up line, ``pub0sub status``
#: and ``pub0sub sub --json`` show them, so an id can be searched for across all of them.
HUB_ID_FIELDS = frozenset({"origin", "hub_id"})

# One table per quoting context, built once: ``str.translate`` on the latin-1
# view of the bytes is far faster than a Python loop over megabyte records.
_TEXT_TABLE = {b: chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in range(256)}
_TEXT_TABLE[0x5C] = "\\\\"
# Inside the double quotes of the human formats a quote must not end the value.
_QUOTED_TABLE = {**_TEXT_TABLE, 0x22: '\\"'}


def render_bytes(data: bytes, style: BytesStyle = "text") -> str:
    r"""``data`` as text in ``style``; see the module docstring for ``"text"``.

    >>> render_bytes(b'a\\b\x00')
    'a\\\\b\\x00'
    >>> render_bytes(b"hello", "hex"), render_bytes(b"hello", "base64")
    ('68656c6c6f', 'aGVsbG8=')
    """
    if style == "hex":
        return data.hex()
    if style == "base64":
        return base64.b64encode(data).decode("ascii")
    return data.decode("latin-1").translate(_TEXT_TABLE)


def hub_id_text(hub_id: int) -> str:
    """A hub id (u64) the one way pub0sub shows it: 16 lowercase hex digits.

    >>> hub_id_text(0xF00DCAFE00000001), hub_id_text(1)
    ('f00dcafe00000001', '0000000000000001')
    """
    return f"{hub_id:016x}"


def _quote_bytes(data: bytes, style: BytesStyle) -> str:
    inner = data.decode("latin-1").translate(_QUOTED_TABLE) if style == "text" else render_bytes(data, style)
    return f'"{inner}"'


def _quote_str(text: str) -> str:
    # JSON string syntax: unambiguous for topics with spaces, quotes or control characters.
    return json.dumps(text, ensure_ascii=False)


def _enum_name(value: IntEnum | IntFlag) -> str:
    # An IntFlag with unknown bits has no name; its number is the honest answer.
    return value.name or str(int(value))


def _fields(obj: Any) -> Iterator[tuple[str, Any]]:
    fields = dataclasses.fields(obj)
    own_headers = any(f.name == "headers" for f in fields)
    for field in fields:
        value = getattr(obj, field.name)
        if field.name in ("key_filter", "query") and value is None:
            continue  # a SUB without a key filter or query reads as it did before either existed
        if field.name == "headers":
            if isinstance(obj, RecordBatch) or (not value and isinstance(obj, MessageSet)):
                continue  # a batch's headers show where the frame has them; a set without reads as before
            value = Headers(decode_headers(value))
        elif field.name == "batch" and not own_headers and isinstance(value, RecordBatch) and value.headers:
            yield "headers", Headers(decode_headers(value.headers))  # DELIVER_HEADERS: the block precedes the batch
        yield field.name, value


class Headers(dict[str, str | bytes]):
    """A headers block decoded for display (a distinct type so each format can spot it)."""


def _headers_summary(headers: Headers, style: BytesStyle) -> str:
    return "{" + ", ".join(f"{_quote_str(k)}: {_header_value(v, style)}" for k, v in headers.items()) + "}"


def _header_value(value: str | bytes, style: BytesStyle) -> str:
    # Text values as JSON strings; bytes as everywhere else, marked so the two never look alike.
    return _quote_str(value) if isinstance(value, str) else f"bytes {_quote_bytes(value, style)}"


def frame_header(frame: Frame, *, offset: int, length: int) -> str:
    """``offset  0xNN NAME  len=N``: the start of every human frame line."""
    return f"{offset:>8}  0x{int(frame.OPCODE):02x} {frame.name:<15} len={length:<7}"


# -- one line per frame ------------------------------------------------------------


def frame_line(frame: Frame, *, offset: int, length: int, style: BytesStyle = "text") -> str:
    """One line: header and a summary of every field (long values shortened)."""
    summary = " ".join(f"{name}={_summary(name, value, style)}" for name, value in _fields(frame))
    return f"{frame_header(frame, offset=offset, length=length)} {summary}".rstrip()


def _summary(name: str, value: Any, style: BytesStyle) -> str:
    if isinstance(value, Headers):
        return _headers_summary(value, style)
    if isinstance(value, MessageSet):
        return _message_set_summary(value, style)
    if isinstance(value, RecordBatch):
        return _record_batch_summary(value, style)
    if isinstance(value, tuple):
        return _list_summary(name, value, style)
    if dataclasses.is_dataclass(value):
        return "{" + " ".join(f"{k}={_summary(k, v, style)}" for k, v in _fields(value)) + "}"
    if isinstance(value, bytes):
        return _bytes_preview(value, style)
    return _scalar(name, value)


def _scalar(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, IntEnum | IntFlag):
        return _enum_name(value)
    if isinstance(value, str):
        return _quote_str(value)
    if name == "crc":
        return f"0x{value:08x}"
    if name in HUB_ID_FIELDS:
        return hub_id_text(value)
    return str(value)


def _list_summary(name: str, items: tuple[Any, ...], style: BytesStyle) -> str:
    # Topic lists are short and are what one greps for: show them all.
    limit = len(items) if all(isinstance(i, str) for i in items) else PREVIEW_ITEMS
    shown = [_summary(name, item, style) for item in items[:limit]]
    if len(items) > limit:
        shown.append(f"+{len(items) - limit} more")
    return "[" + ", ".join(shown) + "]"


def _bytes_preview(data: bytes, style: BytesStyle) -> str:
    if len(data) <= PREVIEW_BYTES:
        return _quote_bytes(data, style)
    return f"{_quote_bytes(data[:PREVIEW_BYTES], style)}...({len(data)} bytes)"


def _first_record(records: bytes, style: BytesStyle) -> str:
    key, data = next(iter_records(records))
    first = f"first={_bytes_preview(data, style)}"
    return f"first_key={_bytes_preview(key, style)} {first}" if key else first


def _message_set_summary(s: MessageSet, style: BytesStyle) -> str:
    topics = _list_summary("topics", s.topics, style)
    return f"{{topics={topics} count={s.count}{_headers_part(s.headers, style)} {_first_record(s.records, style)}}}"


def _headers_part(block: bytes, style: BytesStyle) -> str:
    """`` headers={...}`` for a set or batch that has headers, nothing for one without."""
    return f" headers={_headers_summary(Headers(decode_headers(block)), style)}" if block else ""


def _record_batch_summary(b: RecordBatch, style: BytesStyle) -> str:
    return (
        f"{{topic={_quote_str(b.topic)} offsets={b.base_offset}..{b.last_offset} count={b.count}"
        f" timestamp={b.timestamp} origin={hub_id_text(b.origin)} origin_seq={b.origin_seq}"
        f" {_first_record(b.records, style)}}}"
    )


# -- verbose: every field, every record ----------------------------------------------


def frame_verbose(frame: Frame, *, offset: int, length: int, style: BytesStyle = "text") -> list[str]:
    """The frame header, then one indented line per field and per record."""
    lines = [frame_header(frame, offset=offset, length=length).rstrip()]
    for name, value in _fields(frame):
        lines.extend(_verbose_field(name, value, style, depth=1))
    return lines


def _verbose_field(name: str, value: Any, style: BytesStyle, depth: int) -> Iterator[str]:
    pad = INDENT * depth
    if isinstance(value, Headers):
        yield f"{pad}{name}: {_headers_summary(value, style)}"
    elif isinstance(value, MessageSet | RecordBatch) or _is_nested(value):
        yield f"{pad}{name}:"
        yield from _verbose_struct(value, style, depth + 1)
    elif isinstance(value, tuple) and value and not all(isinstance(v, str) for v in value):
        yield f"{pad}{name}: {len(value)} item{'' if len(value) == 1 else 's'}"
        for i, item in enumerate(value):
            if _is_nested(item):
                yield f"{pad}{INDENT}[{i}]"
                yield from _verbose_struct(item, style, depth + 2)
            else:
                yield f"{pad}{INDENT}[{i}] {_inline_struct(item, style)}"
    elif isinstance(value, tuple):
        yield f"{pad}{name}: [" + ", ".join(_quote_str(v) for v in value) + "]"
    elif isinstance(value, bytes):
        yield f"{pad}{name}: {_quote_bytes(value, style)} ({len(value)} bytes)"
    elif isinstance(value, IntEnum | IntFlag):
        yield f"{pad}{name}: {_enum_name(value)} ({int(value)})"
    else:
        yield f"{pad}{name}: {_scalar(name, value)}"


def _is_nested(value: Any) -> bool:
    """A dataclass holding more than scalars gets a block, not a line."""
    if isinstance(value, MessageSet | RecordBatch):
        return True
    if not dataclasses.is_dataclass(value):
        return False
    return any(
        isinstance(v, tuple | MessageSet | RecordBatch) or dataclasses.is_dataclass(v) for _, v in _fields(value)
    )


def _inline_struct(value: Any, style: BytesStyle) -> str:
    if not dataclasses.is_dataclass(value):
        return _summary("", value, style)
    return " ".join(f"{k}={_summary(k, v, style)}" for k, v in _fields(value))


def _verbose_struct(value: Any, style: BytesStyle, depth: int) -> Iterator[str]:
    for name, field in _fields(value):
        if name == "records" and isinstance(value, MessageSet | RecordBatch):
            yield from _verbose_records(value, style, depth)
        else:
            yield from _verbose_field(name, field, style, depth)


def _verbose_records(value: MessageSet | RecordBatch, style: BytesStyle, depth: int) -> Iterator[str]:
    pad = INDENT * depth
    yield f"{pad}records:"
    # Stored records are named by their offset; a publish's records only by position.
    first = value.base_offset if isinstance(value, RecordBatch) else 0
    label = "offset" if isinstance(value, RecordBatch) else "record"
    for i, (key, data) in enumerate(iter_records(value.records), start=first):
        yield (
            f"{pad}{INDENT}{label} {i}: key={_quote_bytes(key, style)} "
            f"data={_quote_bytes(data, style)} ({len(data)} bytes)"
        )


# -- JSON ------------------------------------------------------------------------------


def frame_json(frame: Frame, *, offset: int, length: int, style: BytesStyle = "text") -> dict[str, Any]:
    """A JSON-able dict of the frame: header keys first, then every field.

    >>> from wire import SubscribeAck
    >>> frame_json(SubscribeAck(success=True), offset=5, length=1)
    {'offset': 5, 'opcode': 3, 'name': 'SUBSCRIBE_ACK', 'length': 1, 'success': True}
    """
    head: dict[str, Any] = {"offset": offset, "opcode": int(frame.OPCODE), "name": frame.name, "length": length}
    return head | _json_struct(frame, style)


def _json_struct(obj: Any, style: BytesStyle) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in _fields(obj):
        if name == "records" and isinstance(obj, MessageSet | RecordBatch):
            out[name] = _json_records(obj, style)
            continue
        out[name] = hub_id_text(value) if name in HUB_ID_FIELDS else _json_value(value, style)
        if isinstance(value, IntEnum | IntFlag):
            out[f"{name}_name"] = _enum_name(value)
    return out


def _json_value(value: Any, style: BytesStyle) -> Any:
    if isinstance(value, Headers):
        # A text value is a JSON string; a bytes value {"bytes": ...} in the chosen style.
        return {k: v if isinstance(v, str) else {"bytes": render_bytes(v, style)} for k, v in value.items()}
    if isinstance(value, bool | str):
        return value
    if isinstance(value, IntEnum | IntFlag):
        return int(value)
    if isinstance(value, bytes):
        return render_bytes(value, style)
    if isinstance(value, tuple):
        return [_json_value(v, style) for v in value]
    if dataclasses.is_dataclass(value):
        return _json_struct(value, style)
    return value


def _json_records(value: MessageSet | RecordBatch, style: BytesStyle) -> list[dict[str, Any]]:
    if isinstance(value, RecordBatch):
        return [
            {"offset": offset, "key": render_bytes(key, style), "data": render_bytes(data, style)}
            for offset, key, data in value.messages()
        ]
    return [{"key": render_bytes(k, style), "data": render_bytes(d, style)} for k, d in value.messages()]
