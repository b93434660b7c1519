"""Record regions, message sets and record batches: the hot-path formats.

A *record* is one message: ``[u16 key_len][u32 data_len][key][data]``.
A *record region* is ``[u32 count][u32 region_len]`` then exactly
``region_len`` bytes holding ``count`` records back to back.

* :class:`MessageSet` = topic list + region: what a publisher sends (PUBLISH)
  and what hubs forward to each other (FORWARD_BATCH).  A hub routes it by its
  topic list alone: the region's bytes are copied, never re-encoded.
* :class:`RecordBatch` = one topic, base offset, timestamp, origin + region:
  what subscribers receive (DELIVER) and what the log stores (LOG_BATCH).
  Record ``i`` has offset ``base_offset + i`` and origin sequence
  ``origin_seq + i``.  One encoded batch is shared by every subscriber it goes to.

Everything here is ``struct`` code; :mod:`wire.schema` holds the construct
description these functions are proven identical to.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import ErrorCode, LocalProtocolError, RemoteProtocolError
from .headers import EMPTY_BLOCK, headers_plain, read_headers
from .limits import MAX_KEY_BYTES, MAX_TOPIC_BYTES, MAX_TOPICS_PER_MESSAGE, MAX_U32

RECORD_HEADER = struct.Struct(">HI")
REGION_HEADER = struct.Struct(">II")
BATCH_FIELDS = struct.Struct(">QQQQ")


@lru_cache(maxsize=4096)
def encode_topic(topic: str) -> bytes:
    """``[u8 len][UTF-8]`` for ``topic``; cached because topics repeat endlessly."""
    if not isinstance(topic, str):
        raise LocalProtocolError(f"topic must be str, got {type(topic).__name__}", code=ErrorCode.INVALID_TOPIC)
    raw = topic.encode("utf-8")
    if not 1 <= len(raw) <= MAX_TOPIC_BYTES:
        raise LocalProtocolError(
            f"topic must be 1..{MAX_TOPIC_BYTES} bytes of UTF-8, got {len(raw)}",
            code=ErrorCode.INVALID_TOPIC,
        )
    return bytes((len(raw),)) + raw


def encode_topic_list(topics: Iterable[str]) -> bytes:
    """``[u8 count][topic]...``: a message set's topic list as PUBLISH and FORWARD_BATCH carry it."""
    encoded = [encode_topic(t) for t in topics]
    return bytes((len(encoded),)) + b"".join(encoded)


def check_topics(topics: tuple[str, ...]) -> None:
    """Raise :class:`LocalProtocolError` unless ``topics`` is a valid topic list."""
    if not isinstance(topics, tuple):
        raise LocalProtocolError("topics must be a tuple", code=ErrorCode.INVALID_TOPIC)
    if not 1 <= len(topics) <= MAX_TOPICS_PER_MESSAGE:
        raise LocalProtocolError(
            f"a message goes to 1..{MAX_TOPICS_PER_MESSAGE} topics, got {len(topics)}",
            code=ErrorCode.INVALID_TOPIC,
        )
    for topic in topics:
        encode_topic(topic)


def read_topic(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    """Decode one topic at ``pos``; offsets in errors are relative to ``buf``."""
    if pos >= end:
        raise RemoteProtocolError("topic length byte missing", offset=pos)
    n = buf[pos]
    if n == 0:
        raise RemoteProtocolError("zero-length topic", code=ErrorCode.INVALID_TOPIC, offset=pos)
    stop = pos + 1 + n
    if stop > end:
        raise RemoteProtocolError(
            f"topic of {n} bytes runs past the end of the body ({end - pos - 1} left)", offset=pos
        )
    try:
        return buf[pos + 1 : stop].decode("utf-8"), stop
    except UnicodeDecodeError:
        raise RemoteProtocolError("topic is not valid UTF-8", code=ErrorCode.INVALID_TOPIC, offset=pos) from None


def encode_record(key: bytes, data: bytes) -> bytes:
    """One record: ``[u16 key_len][u32 data_len][key][data]``."""
    if len(key) > MAX_KEY_BYTES:
        raise LocalProtocolError(f"key of {len(key)} bytes exceeds {MAX_KEY_BYTES}")
    if len(data) > MAX_U32:
        raise LocalProtocolError(f"data of {len(data)} bytes exceeds {MAX_U32}")
    return RECORD_HEADER.pack(len(key), len(data)) + key + data


def encode_records(messages: Iterable[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """``(count, region bytes)`` for ``(key, data)`` pairs."""
    # One flat list of parts and a single join: no per-record concatenation.
    # struct refuses a key or data too long for its field; encode_record then
    # raises the same LocalProtocolError the plain path would.
    pack = RECORD_HEADER.pack
    parts: list[bytes] = []
    append = parts.append
    for key, data in messages:
        try:
            append(pack(len(key), len(data)))
        except struct.error:
            encode_record(key, data)
            raise
        append(key)
        append(data)
    return len(parts) // 3, b"".join(parts)


def _uniform_size(buf: bytes, pos: int, end: int) -> int:
    """Record size if ``buf[pos:end]`` is records with one identical header, else 0.

    Fixed-size messages are the common case.  Comparing each of the six header
    byte columns (a strided slice) against the first header proves, in C, that
    every record boundary holds the same header, hence that the records tile
    the region exactly -- the same verdict the per-record loop reaches.
    """
    span = end - pos
    if span < 6:
        return 0
    key_len, data_len = RECORD_HEADER.unpack_from(buf, pos)
    size = 6 + key_len + data_len
    if span % size:
        return 0
    count = span // size
    if count > 1:
        for i in range(6):
            column = buf[pos + i : end : size]
            if column != bytes((buf[pos + i],)) * count:
                return 0
    return size


def uniform_record_size(records: bytes) -> int:
    """The size of every record of a validated region whose records all share one header, else 0."""
    return _uniform_size(records, 0, len(records))


def scan_records(buf: bytes, pos: int, end: int) -> int:
    """Count the records in ``buf[pos:end]``, proving they tile it exactly."""
    size = _uniform_size(buf, pos, end)
    if size:
        return (end - pos) // size
    unpack = RECORD_HEADER.unpack_from
    count = 0
    # The bounds are checked once after the loop, not per record: a header
    # read past ``end`` is harmless because the overrun is then reported.
    start = pos
    try:
        while pos < end:
            start = pos
            key_len, data_len = unpack(buf, pos)
            pos += 6 + key_len + data_len
            count += 1
    except struct.error:
        pos = end + 1
    if pos > end:
        if end - start < 6:
            raise RemoteProtocolError(f"record header needs 6 bytes, {end - start} left", offset=start)
        key_len, data_len = unpack(buf, start)
        raise RemoteProtocolError(f"record of {key_len}+{data_len} bytes runs past its region", offset=start)
    return count


def iter_records(records: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(key, data)`` for each record of a region already validated."""
    end = len(records)
    size = _uniform_size(records, 0, end)
    if size:
        key_len = RECORD_HEADER.unpack_from(records, 0)[0]
        if type(records) is bytes:
            # One C iterator yields the (key, data) pairs: no Python work per record.
            return _uniform_layout(key_len, size - 6 - key_len).iter_unpack(records)
        # Other buffers must yield slices of their own type, as slicing does.
        skip = 6 + key_len
        keys = [records[p + 6 : p + skip] for p in range(0, end, size)]
        data = [records[p + skip : p + size] for p in range(0, end, size)]
        return zip(keys, data, strict=True)
    return _iter_records_varied(records, end)


@lru_cache(maxsize=256)
def _uniform_layout(key_len: int, data_len: int) -> struct.Struct:
    """A record of fixed sizes as one struct: header skipped, key and data as bytes."""
    return struct.Struct(f">6x{key_len}s{data_len}s")


def _iter_records_varied(records: bytes, end: int) -> Iterator[tuple[bytes, bytes]]:
    unpack = RECORD_HEADER.unpack_from
    pos = 0
    while pos < end:
        key_len, data_len = unpack(records, pos)
        k = pos + 6
        d = k + key_len
        pos = d + data_len
        yield records[k:d], records[d:pos]


def read_region(buf: bytes, pos: int, end: int) -> tuple[int, bytes, int]:
    """Decode ``[u32 count][u32 len][records]``: ``(count, records, new_pos)``."""
    if end - pos < 8:
        raise RemoteProtocolError("record region header needs 8 bytes", offset=pos)
    count, length = REGION_HEADER.unpack_from(buf, pos)
    if count == 0:
        raise RemoteProtocolError("record count of 0", offset=pos)
    start = pos + 8
    stop = start + length
    if stop > end:
        raise RemoteProtocolError(
            f"record region of {length} bytes runs past the end of the body ({end - start} left)",
            offset=pos + 4,
        )
    found = scan_records(buf, start, stop)
    if found != count:
        raise RemoteProtocolError(f"record count says {count} but the region holds {found}", offset=pos)
    return count, bytes(buf[start:stop]), stop


def record_batch_header(
    topic: str, base_offset: int, timestamp: int, origin: int, origin_seq: int, count: int, records_len: int
) -> bytes:
    """The RecordBatch bytes before its records: what a hub encodes once and shares."""
    return b"".join(
        (
            encode_topic(topic),
            BATCH_FIELDS.pack(base_offset, timestamp, origin, origin_seq),
            REGION_HEADER.pack(count, records_len),
        )
    )


def split_records(records: bytes, first: int) -> tuple[bytes, bytes]:
    """The first ``first`` records of a validated region, and the rest."""
    unpack = RECORD_HEADER.unpack_from
    pos = 0
    for _ in range(first):
        key_len, data_len = unpack(records, pos)
        pos += 6 + key_len + data_len
    return records[:pos], records[pos:]


def _records_plain(records: bytes) -> list[dict[str, bytes]]:
    return [{"key": k, "data": d} for k, d in iter_records(records)]


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageSet:
    """Messages that all go to the same topics.

    Build one with :meth:`build`; ``records`` must hold exactly ``count``
    records (decoding proves it; :meth:`build` guarantees it).  ``headers`` is
    the set's headers block (:mod:`wire.headers`), ``b""`` for none: every message
    of the set carries it.  :meth:`encode` never writes it (the layout of PUBLISH
    without flag HEADERS and of FORWARD_BATCH); :meth:`encode_headered` does.
    """

    topics: tuple[str, ...]
    count: int
    records: bytes
    headers: bytes = b""

    def __post_init__(self) -> None:
        check_topics(self.topics)
        if not 1 <= self.count <= MAX_U32:
            raise LocalProtocolError(f"a message set holds 1..{MAX_U32} records, got {self.count}")
        if len(self.records) > MAX_U32:
            raise LocalProtocolError("record region exceeds 4 GiB")

    @classmethod
    def build(
        cls, topics: Iterable[str], messages: Iterable[tuple[bytes, bytes]], *, headers: bytes = b""
    ) -> MessageSet:
        count, records = encode_records(messages)
        return cls(topics=tuple(topics), count=count, records=records, headers=headers)

    def encode(self) -> bytes:
        region = REGION_HEADER.pack(self.count, len(self.records))
        return b"".join((encode_topic_list(self.topics), region, self.records))

    def encode_headered(self) -> bytes:
        """``[headers block][MessageSet]``: a set in a frame whose sets all carry a block."""
        return (self.headers or EMPTY_BLOCK) + self.encode()

    @classmethod
    def read_headered(cls, buf: bytes, pos: int, end: int) -> tuple[MessageSet, int]:
        """Decode what :meth:`encode_headered` writes."""
        headers, pos = read_headers(buf, pos, end)
        mset, pos = cls.read(buf, pos, end)
        if headers:
            mset = cls(topics=mset.topics, count=mset.count, records=mset.records, headers=headers)
        return mset, pos

    @classmethod
    def read(cls, buf: bytes, pos: int, end: int) -> tuple[MessageSet, int]:
        if pos >= end:
            raise RemoteProtocolError("topic count byte missing", offset=pos)
        n = buf[pos]
        if n == 0:
            raise RemoteProtocolError("topic count of 0", code=ErrorCode.INVALID_TOPIC, offset=pos)
        pos += 1
        topics = []
        for _ in range(n):
            topic, pos = read_topic(buf, pos, end)
            topics.append(topic)
        count, records, pos = read_region(buf, pos, end)
        return cls(topics=tuple(topics), count=count, records=records), pos

    def messages(self) -> Iterator[tuple[bytes, bytes]]:
        """``(key, data)`` of every message, in order."""
        return iter_records(self.records)

    def _plain(self) -> dict[str, Any]:
        return {"topics": list(self.topics), "records": _records_plain(self.records)}

    def plain_headered(self) -> dict[str, Any]:
        """:meth:`_plain` with the headers entries, as a set of a headered frame reads."""
        return {"headers": headers_plain(self.headers), **self._plain()}


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordBatch:
    """Consecutive stored messages of one topic, as delivered and logged.

    ``headers`` is the headers block of the set the messages came from (``b""``: none).
    :meth:`encode` never writes it: DELIVER_HEADERS and LOG_BATCH_HEADERS carry it before the batch.
    """

    topic: str
    base_offset: int
    timestamp: int
    origin: int
    origin_seq: int
    count: int
    records: bytes
    headers: bytes = b""

    def __post_init__(self) -> None:
        encode_topic(self.topic)
        if not 1 <= self.count <= MAX_U32:
            raise LocalProtocolError(f"a record batch holds 1..{MAX_U32} records, got {self.count}")

    def encode(self) -> bytes:
        header = record_batch_header(
            self.topic, self.base_offset, self.timestamp, self.origin, self.origin_seq, self.count, len(self.records)
        )
        return header + self.records

    @classmethod
    def read(cls, buf: bytes, pos: int, end: int, *, headers: bytes = b"") -> tuple[RecordBatch, int]:
        """Decode a batch at ``pos``; ``headers``: the block read before it (DELIVER_HEADERS)."""
        topic, pos = read_topic(buf, pos, end)
        if end - pos < 32:
            raise RemoteProtocolError("record batch header needs 32 more bytes", offset=pos)
        base_offset, timestamp, origin, origin_seq = BATCH_FIELDS.unpack_from(buf, pos)
        count, records, pos = read_region(buf, pos + 32, end)
        return (
            cls(
                topic=topic,
                base_offset=base_offset,
                timestamp=timestamp,
                origin=origin,
                origin_seq=origin_seq,
                count=count,
                records=records,
                headers=headers,
            ),
            pos,
        )

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1

    def messages(self) -> Iterator[tuple[int, bytes, bytes]]:
        """``(offset, key, data)`` of every message, in order."""
        offset = self.base_offset
        for key, data in iter_records(self.records):
            yield offset, key, data
            offset += 1

    def _plain(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "base_offset": self.base_offset,
            "timestamp": self.timestamp,
            "origin": self.origin,
            "origin_seq": self.origin_seq,
            "records": _records_plain(self.records),
        }
