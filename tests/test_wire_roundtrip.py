"""Encode/decode round trips for every frame type, on generated frames."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wire
from tests.support.wire_strategies import FRAME_STRATEGIES, any_frame, minimal_frame
from wire import BODY_BOUNDS, FrameDecoder, Limits, Opcode

OPCODES = sorted(FRAME_STRATEGIES, key=int)
# Generated frames are small; the limit only has to let them through.
ROOMY = Limits(max_body=1 << 24)


@pytest.mark.parametrize("op", OPCODES, ids=lambda op: op.name)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_decode_of_encode_is_identity(op: Opcode, data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[op])
    raw = frame.encode()

    # Header: opcode byte and a big-endian length that matches the body.
    assert raw[0] == op
    assert int.from_bytes(raw[1:5], "big") == len(raw) - 5

    # Through the body codec and through the incremental decoder.
    assert type(frame).decode_body(raw[5:]) == frame
    decoder = FrameDecoder(limits=ROOMY)
    decoder.feed(raw)
    decoded = decoder.next_frame()
    assert decoded == frame
    assert type(decoded) is type(frame)
    assert decoder.next_frame() is None
    decoder.close()


@pytest.mark.parametrize("op", OPCODES, ids=lambda op: op.name)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_encoding_is_deterministic_and_canonical(op: Opcode, data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[op])
    raw = frame.encode()
    assert frame.encode() == raw
    # A decoded frame re-encodes to the very same bytes: there is one encoding per frame.
    decoded = type(frame).decode_body(raw[5:])
    assert decoded.encode() == raw
    # An equal frame built anew encodes identically (no identity-dependent state, e.g. caches).
    assert dataclasses.replace(frame).encode() == raw


@settings(max_examples=300, deadline=None)
@given(frame=any_frame())
def test_body_length_within_header_bounds(frame: wire.Frame) -> None:
    # BODY_BOUNDS is checked before the body is buffered: a bound tighter than
    # the layout would refuse valid frames, so every valid body must fit.
    low, high = BODY_BOUNDS[frame.OPCODE]
    size = len(frame.encode_body())
    assert size >= low
    assert high is None or size <= high


@settings(max_examples=100, deadline=None)
@given(frame=any_frame())
def test_plain_is_plain(frame: wire.Frame) -> None:
    # plain() feeds the CLI's --json and the construct spec: only builtin types may come out.
    # None is one of them: an absent optional part (SUB's key filter, query and their
    # ``parts`` byte) is None, which construct's Optional builds as nothing and JSON prints as null.
    def check(value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                assert type(k) is str
                check(v)
        elif isinstance(value, list):
            for v in value:
                check(v)
        else:
            assert value is None or type(value) in (str, int, bytes, bool), type(value)

    check(wire.plain(frame))


@pytest.mark.parametrize("op", OPCODES, ids=lambda op: op.name)
def test_lower_bound_is_the_smallest_frame(op: Opcode) -> None:
    # The lower bound is tight: the smallest valid body has exactly that length,
    # so one byte less can be refused at the header without losing a valid frame.
    frame = minimal_frame(op)
    assert len(frame.encode_body()) == BODY_BOUNDS[op][0]
    assert type(frame).decode_body(frame.encode_body()) == frame


_LONGEST_TOPIC = "t" * 255
_LONGEST_STR8 = "n" * 255
_LONGEST_STR16 = "r" * 0xFFFF


@pytest.mark.parametrize(
    "frame",
    [
        wire.Heartbeat(word="pong"),
        wire.Hello(client_name=_LONGEST_STR8, token=b"k" * 0xFFFF),
        wire.Welcome(version=1, hub_id=0, max_body=0, heartbeat_ms=0, hub_name=_LONGEST_STR8),
        wire.Gap(sub_id=0, topic=_LONGEST_TOPIC, first_offset=0, dropped=0),
        wire.SubEnd(sub_id=0, code=wire.ErrorCode.INTERNAL, reason=_LONGEST_STR16),
        wire.Error(code=wire.ErrorCode.INTERNAL, reason=_LONGEST_STR16),
        wire.SegmentHeader(topic=_LONGEST_TOPIC, base_offset=0, created=0),
        wire.Watch(key=_LONGEST_TOPIC),
        wire.Joined(key=_LONGEST_TOPIC, since=0),
        wire.Repair(topic=_LONGEST_TOPIC, after=0, upto=1),
        wire.Repaired(topic=_LONGEST_TOPIC, upto=1),
    ],
    ids=lambda f: f.name,
)
def test_upper_bound_is_the_largest_frame(frame: wire.Frame) -> None:
    # Opcodes with a bounded body: the largest valid body is exactly at the bound.
    high = BODY_BOUNDS[frame.OPCODE][1]
    assert len(frame.encode_body()) == high
    decoder = FrameDecoder(limits=ROOMY)
    decoder.feed(frame.encode())
    assert decoder.next_frame() == frame


def test_every_bounded_opcode_has_an_upper_bound_case() -> None:
    # Keeps the parametrised list above in step with BODY_BOUNDS.
    fixed = {op for op, (low, high) in BODY_BOUNDS.items() if high is not None and high != low}
    covered = {Opcode.HELLO, Opcode.WELCOME, Opcode.GAP, Opcode.SUB_END, Opcode.ERROR, Opcode.SEGMENT_HEADER,
               Opcode.WATCH, Opcode.JOINED, Opcode.REPAIR, Opcode.REPAIRED}  # fmt: skip
    assert fixed == covered


_U64_OVER = 1 << 64
_batch = wire.RecordBatch(
    topic="a", base_offset=0, timestamp=0, origin=0, origin_seq=0, count=1, records=wire.encode_record(b"", b"")
)
BAD_VALUES: list[Callable[[], wire.Frame]] = [
    lambda: wire.ForwardAck(origin=-1, seq=0),
    lambda: wire.ForwardAck(origin=0, seq=_U64_OVER),
    lambda: wire.Credit(sub_id=1 << 32, credit=0),
    lambda: wire.PublishAck(producer_id=0, sequence=0, timestamp=-1),
    lambda: wire.PublishAck(
        producer_id=0, sequence=0, ranges=(wire.OffsetRange(topic="a", first_offset=0, num=1 << 32),)
    ),
    lambda: wire.Deliver(sub_id=-1, batch=_batch),
    lambda: wire.Ack(sub_id=0, ranges=(wire.AckRange(topic="a", first_offset=_U64_OVER, last_offset=0),)),
    lambda: wire.LogBatch(crc=1 << 32, append_ts=0, producer_id=0, producer_seq=0, batch=_batch),
    lambda: wire.Publish(producer_id=-1, sets=(wire.MessageSet.build(["a"], [(b"", b"")]),)),
    lambda: wire.ForwardBatch(
        origin=0,
        sets=(wire.ForwardSet(origin_seq=-1, timestamp=0, messages=wire.MessageSet.build(["a"], [(b"", b"")])),),
    ),
    lambda: wire.Welcome(version=1 << 16, hub_id=0, max_body=0, heartbeat_ms=0),
    lambda: wire.MeshHello(hub_id=-1),
    lambda: wire.Gap(sub_id=0, topic="", first_offset=0, dropped=0),
    lambda: wire.Hello(client_name="x" * 256),
    lambda: wire.Error(code=wire.ErrorCode.INTERNAL, reason="é" * 40000),
    lambda: wire.PublishAck(producer_id=0, sequence=0, ranges=(wire.OffsetRange(topic="", first_offset=0, num=0),)),
    lambda: wire.SegmentHeader(topic="a", base_offset=0, created=0, magic=b"XXXX"),
    lambda: wire.Subscribe(topics=("x" * 256,)),
]


@pytest.mark.parametrize("make", BAD_VALUES)
def test_unencodable_values_raise_local_protocol_error(make: Callable[[], wire.Frame]) -> None:
    # "We were asked to send garbage" is LocalProtocolError, at construction or at
    # encode time -- never struct.error or a construct exception leaking out.
    with pytest.raises(wire.LocalProtocolError):
        make().encode()


def test_no_frame_type_is_another_frame_type() -> None:
    # Frames that share a body layout (SUBSCRIBE/UNSUBSCRIBE, their acks) share it through a
    # private base: were one to subclass the other, isinstance(frame, Subscribe) would also be
    # true of an UNSUBSCRIBE and every dispatch would have to test the subclass first.
    types = list(wire.FRAME_TYPES.values())
    assert [(a.__name__, b.__name__) for a in types for b in types if a is not b and issubclass(a, b)] == []
    assert not isinstance(wire.Unsubscribe(topics=("t",)), wire.Subscribe)
    assert not isinstance(wire.UnsubscribeAck(success=True), wire.SubscribeAck)
