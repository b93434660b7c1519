"""The golden vectors and seed rules of PROTOCOL.md, byte for byte.

These are the bytes old peers put on the wire: if one of these tests fails,
interoperability with the seed design is broken, whatever the other tests say.
"""

from __future__ import annotations

import pytest

import wire
from wire import ErrorCode, FrameDecoder, Opcode, RemoteProtocolError
from wire.schema import BODIES

SUBSCRIBE_HEX = "02 00000010 07 746f7069635f31 07 746f7069635f32"
FORWARD_HEX = "06 0000001a 02 07 746f7069635f31 07 746f7069635f32 00000005 68656c6c6f"

GOLDEN = [
    pytest.param(SUBSCRIBE_HEX, 21, wire.Subscribe(topics=("topic_1", "topic_2")), id="subscribe"),
    pytest.param(FORWARD_HEX, 31, wire.Forward(topics=("topic_1", "topic_2"), data=b"hello"), id="forward"),
]


def _decode_all(raw: bytes) -> list[wire.Frame]:
    decoder = FrameDecoder()
    decoder.feed(raw)
    frames = list(decoder)
    decoder.close()
    return frames


@pytest.mark.parametrize(("hex_text", "size", "expected"), GOLDEN)
def test_golden_vector_decodes_to_exact_fields(hex_text: str, size: int, expected: wire.Frame) -> None:
    raw = bytes.fromhex(hex_text)
    assert len(raw) == size
    frames = _decode_all(raw)
    assert frames == [expected]
    # Equality of dataclasses would accept a subclass mix-up only if __eq__ were loose: pin the type.
    assert type(frames[0]) is type(expected)


@pytest.mark.parametrize(("hex_text", "size", "expected"), GOLDEN)
def test_golden_vector_encodes_to_exact_bytes(hex_text: str, size: int, expected: wire.Frame) -> None:
    raw = bytes.fromhex(hex_text)
    assert expected.encode() == raw
    assert expected.encode_body() == raw[5:]
    assert type(expected).decode_body(raw[5:]) == expected


@pytest.mark.parametrize(("hex_text", "size", "expected"), GOLDEN)
def test_golden_vector_matches_construct_spec(hex_text: str, size: int, expected: wire.Frame) -> None:
    raw = bytes.fromhex(hex_text)
    op = Opcode(raw[0])
    assert op is expected.OPCODE
    assert int.from_bytes(raw[1:5], "big") == size - 5
    spec = BODIES[op]
    parsed = spec.parse(raw[5:])
    assert list(parsed.topics) == ["topic_1", "topic_2"]
    if op is Opcode.FORWARD:
        assert parsed.topic_count == 2
        assert parsed.data == b"hello"
    assert spec.build(wire.plain(expected)) == raw[5:]


def test_golden_forward_fields_by_hand() -> None:
    # Independent of every codec in wire/: spell the seed layout out.
    raw = bytes.fromhex(FORWARD_HEX)
    body = raw[5:]
    assert body[0] == 2
    assert body[1] == 7 and body[2:9] == b"topic_1"
    assert body[9] == 7 and body[10:17] == b"topic_2"
    assert body[17:21] == (5).to_bytes(4, "big")
    assert body[21:] == b"hello"


def test_golden_vectors_back_to_back() -> None:
    raw = bytes.fromhex(SUBSCRIBE_HEX + FORWARD_HEX)
    decoder = FrameDecoder()
    decoder.feed(raw)
    first = decoder.next_frame()
    assert decoder.frame_offset == 0
    second = decoder.next_frame()
    assert decoder.frame_offset == 21
    assert decoder.next_frame() is None
    assert [first, second] == [p.values[2] for p in GOLDEN]


# -- the seed's error rules ---------------------------------------------------------


def _frame(op: int, body: bytes) -> bytes:
    return bytes([op]) + len(body).to_bytes(4, "big") + body


def _t(name: bytes) -> bytes:
    return bytes([len(name)]) + name


# (opcode, body, error code, offset of the problem *inside the body*)
SEED_ERRORS = [
    # A zero-length topic: the length byte itself is the problem.
    pytest.param(Opcode.SUBSCRIBE, _t(b"a") + b"\x00", ErrorCode.INVALID_TOPIC, 2, id="subscribe-zero-length-topic"),
    pytest.param(Opcode.SUBSCRIBE, b"\x00\x00", ErrorCode.INVALID_TOPIC, 0, id="subscribe-zero-length-first"),
    pytest.param(Opcode.UNSUBSCRIBE, b"\x00\x00", ErrorCode.INVALID_TOPIC, 0, id="unsubscribe-zero-length"),
    pytest.param(
        Opcode.FORWARD,
        b"\x02" + _t(b"a") + b"\x00" + b"\x00\x00\x00\x00",
        ErrorCode.INVALID_TOPIC,
        3,
        id="forward-zero-length-topic",
    ),
    # A topic count of 0.
    pytest.param(Opcode.FORWARD, b"\x00" + b"\x00\x00\x00\x02hi", ErrorCode.INVALID_TOPIC, 0, id="forward-count-0"),
    # An inner length that runs past the body.
    pytest.param(Opcode.SUBSCRIBE, _t(b"a") + b"\x09abc", ErrorCode.MALFORMED_FRAME, 2, id="subscribe-topic-past-end"),
    pytest.param(
        Opcode.FORWARD,
        b"\x01" + _t(b"a") + b"\x00\x00\x00\x06hello",
        ErrorCode.MALFORMED_FRAME,
        3,
        id="forward-data-past-end",
    ),
    # The count says 4 topics, the body holds 3: the 4th length byte would be past the end.
    pytest.param(
        Opcode.FORWARD,
        b"\x04" + _t(b"a") + _t(b"b") + _t(b"c"),
        ErrorCode.MALFORMED_FRAME,
        7,
        id="forward-count-past-end",
    ),
    # Bytes left over after the last field.
    pytest.param(
        Opcode.FORWARD,
        b"\x01" + _t(b"a") + b"\x00\x00\x00\x02hi!",
        ErrorCode.MALFORMED_FRAME,
        3,
        id="forward-trailing-byte",
    ),
    pytest.param(Opcode.SUBSCRIBE_ACK, b"\x01\x00", ErrorCode.MALFORMED_FRAME, None, id="ack-trailing-byte"),
    pytest.param(Opcode.HEARTBEAT, b"ping", None, None, id="control-valid-heartbeat"),
]


@pytest.mark.parametrize(("op", "body", "code", "body_offset"), SEED_ERRORS)
def test_seed_rules_are_protocol_errors(
    op: Opcode, body: bytes, code: ErrorCode | None, body_offset: int | None
) -> None:
    raw = _frame(op, body)
    if code is None:
        # The control case proves _frame builds frames the decoder accepts.
        assert len(_decode_all(raw)) == 1
        return
    decoder = FrameDecoder()
    decoder.feed(raw)
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_frame()
    err = info.value
    assert err.code is code
    assert err.offset is not None
    if body_offset is None:
        # The bounds check refuses this at the header: the offset points into it.
        assert 0 <= err.offset < 5
    else:
        assert err.offset == 5 + body_offset
    # The construct spec rejects the same body: the rule is in the spec, not only the fast path.
    with pytest.raises(Exception):  # noqa: B017 - any construct error type is a rejection
        BODIES[op].parse(body)


def test_trailing_bytes_after_subscribe_topics_are_a_topic_error() -> None:
    # A topic list runs to the end of the body, so a stray byte is read as a topic
    # length that runs past the body.
    raw = _frame(Opcode.SUBSCRIBE, _t(b"topic_1") + b"\x05")
    decoder = FrameDecoder()
    decoder.feed(raw)
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_frame()
    assert info.value.offset == 5 + 8


def test_error_message_names_the_offset() -> None:
    decoder = FrameDecoder()
    decoder.feed(_frame(Opcode.FORWARD, b"\x00" + bytes(6)))
    with pytest.raises(RemoteProtocolError, match=r"at byte 5: .*INVALID_TOPIC"):
        decoder.next_frame()


def test_encoding_refuses_seed_violations() -> None:
    # The same rules hold when we are the sender: LocalProtocolError, not bytes.
    with pytest.raises(wire.LocalProtocolError):
        wire.Subscribe(topics=("",))
    with pytest.raises(wire.LocalProtocolError):
        wire.Subscribe(topics=())
    with pytest.raises(wire.LocalProtocolError):
        wire.Forward(topics=(), data=b"x")
    with pytest.raises(wire.LocalProtocolError):
        wire.Forward(topics=("é" * 128,), data=b"")  # 256 bytes although 128 characters
    with pytest.raises(wire.LocalProtocolError):
        wire.Forward(topics=("t",) * 256, data=b"")
    assert wire.Forward(topics=("é" * 127 + "x",), data=b"").encode()[5:8] == b"\x01\xff\xc3"
