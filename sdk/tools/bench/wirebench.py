"""The ``wire`` scenario: pub0sub's real codecs against a bare ``struct`` loop, in process.

Encode builds PUBLISH frames of :data:`BATCH` records through the public API
(``MessageSet.build`` + ``Publish(...).encode()``); decode feeds a
:class:`wire.FrameDecoder` 64 KiB chunks of a DELIVER stream and walks every
record's ``(offset, key, data)`` with ``RecordBatch.messages()``.  The bare
loop produces / consumes the very same bytes with ``struct.pack`` /
``unpack_from`` and nothing else: the ratio is the price of the codec.
``decode-mixed`` uses records of varying key and data sizes (average 64 B),
where no fixed-size shortcut applies.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable

from wire import Deliver, FrameDecoder, Limits, MessageSet, Opcode, Publish, RecordBatch
from wire.limits import DEFAULT_MAX_PEER_BODY

from .peers import Server
from .registry import Params
from .results import Measurement

BATCH = 1000
TOPIC = "bench"
CHUNK = 1 << 16

_FRAME = struct.Struct(">BI")
_PUBLISH_HEAD = struct.Struct(">QQBH")
_REGION = struct.Struct(">II")
_RECORD = struct.Struct(">HI")
_U32 = struct.Struct(">I")
_BATCH_FIELDS = struct.Struct(">QQQQ")

Messages = list[tuple[bytes, bytes]]


def fixed_messages(size: int) -> Messages:
    rng = random.Random(7)
    return [(b"", rng.randbytes(size)) for _ in range(BATCH)]


def mixed_messages(size: int) -> Messages:
    rng = random.Random(11)
    return [(rng.randbytes(rng.randrange(0, 9)), rng.randbytes(rng.randrange(size // 2, size * 3 // 2 + 1)))
            for _ in range(BATCH)]  # fmt: skip


def _batches(p: Params) -> int:
    return max(1, (p.messages or BATCH) // BATCH)


def _rate(records: int, seconds: float, figure: str, **details: object) -> Measurement:
    return Measurement(figures={figure: records / seconds}, details={"records": records, "seconds": seconds, **details})


# -- encode ------------------------------------------------------------------------


def wire_publish(messages: Messages) -> bytes:
    return Publish(sets=(MessageSet.build((TOPIC,), messages),)).encode()


def bare_publish(messages: Messages) -> bytes:
    pack = _RECORD.pack
    parts: list[bytes] = []
    append = parts.append
    for key, data in messages:
        append(pack(len(key), len(data)))
        append(key)
        append(data)
    region = b"".join(parts)
    topic = TOPIC.encode()
    body = b"".join((_PUBLISH_HEAD.pack(0, 0, 0, 1), bytes((1, len(topic))), topic,
                     _REGION.pack(len(messages), len(region)), region))  # fmt: skip
    return _FRAME.pack(Opcode.PUBLISH, len(body)) + body


def _encode(build: Callable[[Messages], bytes], server: Server | None, p: Params) -> Measurement:
    messages = fixed_messages(p.size)
    if build(messages) != wire_publish(messages):
        raise AssertionError("the bare loop and pub0sub produced different PUBLISH bytes")
    n = _batches(p)
    start = time.perf_counter()
    for _ in range(n):
        build(messages)
    return _rate(n * BATCH, time.perf_counter() - start, "encode")


def encode_wire(server: Server | None, p: Params) -> Measurement:
    """MessageSet.build + Publish(...).encode(), 1000 records per frame"""
    return _encode(wire_publish, server, p)


def encode_bare(server: Server | None, p: Params) -> Measurement:
    """hand loop of struct.pack over the records, one b''.join"""
    return _encode(bare_publish, server, p)


# -- decode ------------------------------------------------------------------------


def deliver_stream(messages: Messages, batches: int) -> bytes:
    frames = []
    for i in range(batches):
        batch = RecordBatch(topic=TOPIC, base_offset=i * len(messages), timestamp=i, origin=1, origin_seq=i,
                            count=len(messages), records=b"".join(
                                _RECORD.pack(len(k), len(d)) + k + d for k, d in messages))  # fmt: skip
        frames.append(Deliver(sub_id=1, batch=batch).encode())
    return b"".join(frames)


def decode_wire_stream(stream: bytes) -> int:
    decoder = FrameDecoder(limits=Limits(max_body=DEFAULT_MAX_PEER_BODY))
    view = memoryview(stream)
    n = 0
    for start in range(0, len(stream), CHUNK):
        decoder.feed(view[start : start + CHUNK])  # type: ignore[arg-type]  # any buffer works
        for frame in decoder:
            for _offset, _key, _data in frame.batch.messages():  # type: ignore[attr-defined]
                n += 1
    decoder.close()
    return n


def decode_bare_stream(stream: bytes) -> int:
    frame_head = _FRAME.unpack_from
    record = _RECORD.unpack_from
    n = 0
    pos = 0
    end = len(stream)
    while pos < end:
        _, length = frame_head(stream, pos)
        stop = pos + 5 + length
        topic_len = stream[pos + 9]
        at = pos + 10 + topic_len
        offset = _BATCH_FIELDS.unpack_from(stream, at)[0]
        at += 32 + _REGION.size
        while at < stop:
            key_len, data_len = record(stream, at)
            k = at + 6
            d = k + key_len
            at = d + data_len
            _key, _data = stream[k:d], stream[d:at]
            offset += 1
            n += 1
        pos = stop
    return n


def _decode(decode: Callable[[bytes], int], figure: str, mixed: bool, p: Params) -> Measurement:
    messages = mixed_messages(p.size) if mixed else fixed_messages(p.size)
    n = _batches(p)
    stream = deliver_stream(messages, n)
    start = time.perf_counter()
    got = decode(stream)
    seconds = time.perf_counter() - start
    if got != n * BATCH:
        raise AssertionError(f"decoded {got} records, expected {n * BATCH}")
    return _rate(got, seconds, figure, bytes=len(stream))


def decode_wire(server: Server | None, p: Params) -> Measurement:
    """FrameDecoder fed 64 KiB chunks of DELIVER frames; every (offset, key, data) via RecordBatch.messages()"""
    return _decode(decode_wire_stream, "decode", False, p)


def decode_bare(server: Server | None, p: Params) -> Measurement:
    """hand loop of struct.unpack_from over the whole stream, slicing key and data"""
    return _decode(decode_bare_stream, "decode", False, p)


def decode_mixed_wire(server: Server | None, p: Params) -> Measurement:
    """as decode, records with 0-8 B keys and 32-96 B data"""
    return _decode(decode_wire_stream, "decode-mixed", True, p)


def decode_mixed_bare(server: Server | None, p: Params) -> Measurement:
    """as decode, records with 0-8 B keys and 32-96 B data"""
    return _decode(decode_bare_stream, "decode-mixed", True, p)


Measure = Callable[[Server | None, Params], Measurement]

#: figure -> (pub0sub's codec, the bare struct loop)
MEASURES: dict[str, tuple[Measure, Measure]] = {
    "encode": (encode_wire, encode_bare),
    "decode": (decode_wire, decode_bare),
    "decode-mixed": (decode_mixed_wire, decode_mixed_bare),
}
