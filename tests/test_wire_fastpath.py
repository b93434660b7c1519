"""The struct fast paths are the construct specification, only faster.

``wire/schema.py`` is normative.  Hot frames encode and decode with
hand-written ``struct`` code; these tests prove, on generated frames and on
generated garbage, that the fast paths build the same bytes, parse the same
fields, and accept exactly the bodies the specification accepts -- except
where the fast path is documented to be stricter (see :func:`spec_accepts`).
"""

from __future__ import annotations

import dataclasses
import zlib
from enum import IntEnum
from typing import Any

import pytest
from construct import ConstructError, Container, ListContainer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from tests.support.wire_strategies import FRAME_STRATEGIES, HOT_OPCODES, minimal_frame, single_byte_edits
from wire import AckStatus, Frame, Opcode, RemoteProtocolError
from wire.limits import MAX_TOPICS_PER_MESSAGE
from wire.schema import BODIES

#: The hot frames named in the design; HOT_OPCODES is derived from the code, so
#: comparing the two catches a frame silently moving between the two kinds.
EXPECTED_HOT = {
    Opcode.HEARTBEAT,
    Opcode.SUBSCRIBE,
    Opcode.UNSUBSCRIBE,
    Opcode.SUBSCRIBE_ACK,
    Opcode.UNSUBSCRIBE_ACK,
    Opcode.FORWARD,
    Opcode.FORWARD_BATCH,
    Opcode.FORWARD_BATCH_HEADERS,
    Opcode.FORWARD_ACK,
    Opcode.LINK_STATE,
    Opcode.ROUTED_SETS,
    Opcode.ROUTED_SETS_HEADERS,
    Opcode.ROUTED,
    Opcode.PUBLISH,
    Opcode.PUBLISH_ACK,
    Opcode.DELIVER,
    Opcode.DELIVER_HEADERS,
    Opcode.ACK,
    Opcode.CREDIT,
    Opcode.LOG_BATCH,
    Opcode.LOG_BATCH_HEADERS,
}
HOT = sorted(HOT_OPCODES, key=int)


def normalize(value: Any) -> Any:
    """A parsed construct value as plain data, without derived or private fields."""
    if isinstance(value, Container | dict):
        return {
            k: normalize(v)
            for k, v in value.items()
            if isinstance(k, str) and not k.startswith("_") and not k.endswith(("_len", "_count"))
        }
    if isinstance(value, ListContainer | list):
        return [normalize(v) for v in value]
    return value


def test_hot_frames_are_the_documented_ones() -> None:
    assert set(HOT_OPCODES) == EXPECTED_HOT


def test_normalize_drops_only_derived_fields() -> None:
    parsed = BODIES[Opcode.FORWARD].parse(wire.Forward(topics=("a",), data=b"x").encode_body())
    assert "_io" in parsed  # construct adds it; normalize must strip it
    assert normalize(parsed) == {"topics": ["a"], "data": b"x"}


# -- generated valid frames -----------------------------------------------------------


@pytest.mark.parametrize("op", HOT, ids=lambda op: op.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fast_encode_equals_spec_build(op: Opcode, data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[op])
    assert frame.encode_body() == BODIES[op].build(wire.plain(frame))


@pytest.mark.parametrize("op", HOT, ids=lambda op: op.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fast_decode_equals_spec_parse(op: Opcode, data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[op])
    body = frame.encode_body()
    fast = wire.FRAME_TYPES[op].decode_body(body)
    assert wire.plain(fast) == normalize(BODIES[op].parse(body))
    assert fast == frame


# -- acceptance: the same bodies pass both ------------------------------------------------


def _fast(op: Opcode, body: bytes) -> Frame | RemoteProtocolError:
    # Anything other than a frame or RemoteProtocolError escapes and fails the test.
    try:
        return wire.FRAME_TYPES[op].decode_body(body)
    except RemoteProtocolError as exc:
        return exc


#: Integer fields that the frame types hold as enums: a value outside the enum is
#: refused by every frame decoder (cold frames convert through the same enums),
#: while the construct layout only says "u8".  The fast path being stricter here
#: is by design.
_ENUM_FIELDS: dict[Opcode, dict[str, type[IntEnum]]] = {Opcode.PUBLISH_ACK: {"status": AckStatus}}


def spec_accepts(op: Opcode, body: bytes) -> tuple[bool, Any]:
    """Whether the specification accepts ``body``, plus the parsed plain fields.

    Rules the fast path adds on top of the construct layout, each documented in
    the frame modules under wire/frames/:

    * LOG_BATCH: ``crc`` must be the CRC-32 of the body after it (the layout
      carries it as a plain u32; decoding verifies it, so corruption is never served).
    * enum-typed fields must hold a member of their enum (``_ENUM_FIELDS``).
    * SUBSCRIBE/UNSUBSCRIBE carry at most 255 topics (docs/protocol.md: the
      layout has no count field, the frame class caps it like every topic list).
    """
    try:
        parsed = BODIES[op].parse(body)
    except (ConstructError, UnicodeError):
        return False, None
    fields = normalize(parsed)
    if op in (Opcode.LOG_BATCH, Opcode.LOG_BATCH_HEADERS) and fields["crc"] != zlib.crc32(body[4:]):
        return False, None
    if op in (Opcode.SUBSCRIBE, Opcode.UNSUBSCRIBE) and len(fields["topics"]) > MAX_TOPICS_PER_MESSAGE:
        return False, None
    for name, enum in _ENUM_FIELDS.get(op, {}).items():
        if fields[name] not in set(enum):
            return False, None
    return True, fields


def assert_same_verdict(op: Opcode, body: bytes) -> None:
    fast = _fast(op, body)
    ok, fields = spec_accepts(op, body)
    if isinstance(fast, RemoteProtocolError):
        assert not ok, f"fast path refused a body the spec accepts: {fast} -- {fields!r}"
        # A body-relative offset, when the fast path gives one, lies within the body.
        assert fast.offset is None or 0 <= fast.offset <= len(body)
    else:
        assert ok, f"fast path accepted a body the spec refuses: {fast!r}"
        assert wire.plain(fast) == fields
        # What the fast path accepts it would also have written, byte for byte.
        assert fast.encode_body() == body


@st.composite
def mutated_bodies(draw: st.DrawFn, op: Opcode) -> bytes:
    body = bytearray(draw(FRAME_STRATEGIES[op]).encode_body())
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        if kind == "insert" or not body:
            at = draw(st.integers(0, len(body)))
            body[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif kind == "flip":
            at = draw(st.integers(0, len(body) - 1))
            body[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            # Small values hit the interesting cases: 0 counts and lengths, bad enums.
            at = draw(st.integers(0, len(body) - 1))
            body[at] = draw(st.sampled_from([0, 1, 2, 3, 0x7F, 0x80, 0xFF]))
        elif kind == "delete":
            at = draw(st.integers(0, len(body) - 1))
            del body[at : at + draw(st.integers(1, 3))]
        else:
            del body[draw(st.integers(0, len(body) - 1)) :]
    if op in (Opcode.LOG_BATCH, Opcode.LOG_BATCH_HEADERS) and len(body) >= 4 and draw(st.booleans()):
        # Re-seal the CRC so the mutation reaches the record-batch parser
        # instead of always stopping at the checksum.
        body[:4] = zlib.crc32(body[4:]).to_bytes(4, "big")
    return bytes(body)


@pytest.mark.parametrize("op", HOT, ids=lambda op: op.name)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_bodies_same_verdict(op: Opcode, data: st.DataObject) -> None:
    assert_same_verdict(op, data.draw(mutated_bodies(op)))


@pytest.mark.parametrize("op", HOT, ids=lambda op: op.name)
@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=48))
def test_arbitrary_bodies_same_verdict(op: Opcode, body: bytes) -> None:
    assert_same_verdict(op, body)


@pytest.mark.parametrize("op", HOT, ids=lambda op: op.name)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_prefix_and_extension_same_verdict(op: Opcode, data: st.DataObject) -> None:
    # Truncation at every position and one stray trailing byte: the two classic
    # length-handling bugs.
    body = data.draw(FRAME_STRATEGIES[op]).encode_body()
    # Every cut near both ends (where headers and the last field live), a sample between.
    middle = range(16, max(16, len(body) - 16))
    cuts = {*range(min(16, len(body))), *range(max(0, len(body) - 16), len(body))}
    cuts |= set(data.draw(st.lists(st.sampled_from(middle), max_size=16))) if middle else set()
    for cut in sorted(cuts):
        assert_same_verdict(op, body[:cut])
    assert_same_verdict(op, body + data.draw(st.binary(min_size=1, max_size=2)))


def _rich_examples() -> dict[Opcode, wire.Frame]:
    """One frame per hot opcode with several topics, records, sets or ranges."""
    # Varied record sizes and uniform ones (identical headers: the shortcut in
    # wire.records.scan_records) both appear.
    two_sets = (
        wire.MessageSet.build(["a"], [(b"k", b"ab"), (b"q", b"cd"), (b"z", b"ef")]),
        wire.MessageSet.build(["bc", "d"], [(b"k", b""), (b"", b"yz")]),
    )
    batch = wire.RecordBatch(
        topic="t",
        base_offset=5,
        timestamp=6,
        origin=7,
        origin_seq=8,
        count=2,
        records=wire.encode_record(b"k", b"v") + wire.encode_record(b"", b"w"),
    )
    headers = wire.encode_headers({"tr": "x1", "b": b"\x00"})
    headered_sets = (wire.MessageSet.build(["a"], [(b"k", b"ab")], headers=headers), two_sets[1])

    def routed(sets: tuple[wire.MessageSet, ...]) -> tuple[wire.RoutedSet, ...]:
        return tuple(
            wire.RoutedSet(origin_seq=5 + 10 * i, timestamp=9, messages=m, prevs=tuple(range(len(m.topics))))
            for i, m in enumerate(sets)
        )
    uniform_batch = wire.RecordBatch(
        topic="t",
        base_offset=5,
        timestamp=6,
        origin=7,
        origin_seq=8,
        count=3,
        records=wire.encode_record(b"", b"v") * 3,
    )
    return {
        Opcode.HEARTBEAT: wire.PONG,
        Opcode.SUBSCRIBE: wire.Subscribe(topics=("a", "bc", "é")),
        Opcode.UNSUBSCRIBE: wire.Unsubscribe(topics=("a", "bc")),
        Opcode.SUBSCRIBE_ACK: wire.SubscribeAck(success=False),
        Opcode.UNSUBSCRIBE_ACK: wire.UnsubscribeAck(success=True),
        Opcode.FORWARD: wire.Forward(topics=("a", "bc"), data=b"hi"),
        Opcode.FORWARD_BATCH: wire.ForwardBatch(
            origin=1,
            sets=tuple(wire.ForwardSet(origin_seq=1 + 10 * i, timestamp=9, messages=m) for i, m in enumerate(two_sets)),
        ),
        Opcode.FORWARD_BATCH_HEADERS: wire.ForwardBatchHeaders(
            origin=1,
            sets=tuple(
                wire.ForwardSet(origin_seq=1 + 10 * i, timestamp=9, messages=m) for i, m in enumerate(headered_sets)
            ),
        ),
        Opcode.FORWARD_ACK: wire.ForwardAck(origin=1, seq=2),
        Opcode.LINK_STATE: wire.LinkState(
            hub_id=9, boot=8, seq=7, peer_key="12D3KooW", addrs=("/ip4/127.0.0.1/tcp/1", ""), neighbors=(1, 2),
            costs=(5, 0),
        ),
        Opcode.ROUTED_SETS: wire.RoutedSets(ttl=7, dests=(3, 4), origin=1, sets=routed(two_sets)),
        Opcode.ROUTED_SETS_HEADERS: wire.RoutedSetsHeaders(ttl=7, dests=(3, 4), origin=1, sets=routed(headered_sets)),
        Opcode.ROUTED: wire.Routed(
            ttl=3,
            dests=(5, 6),
            src=2,
            inner=wire.InterestSet(
                key="a", full=True, version=3, entries=(wire.InterestEntry(hub=7, patterns=("a.*", "a.b")),)
            ),
        ),
        Opcode.PUBLISH: wire.Publish(producer_id=1, sequence=2, flags=wire.PublishFlags.ACK, sets=two_sets),
        Opcode.PUBLISH_ACK: wire.PublishAck(
            producer_id=1,
            sequence=2,
            status=AckStatus.DUPLICATE,
            timestamp=3,
            ranges=(
                wire.OffsetRange(topic="a", first_offset=4, num=1),
                wire.OffsetRange(topic="b", first_offset=5, num=2),
            ),
        ),
        Opcode.DELIVER: wire.Deliver(sub_id=3, batch=batch),
        Opcode.DELIVER_HEADERS: wire.DeliverHeaders(sub_id=3, batch=dataclasses.replace(batch, headers=headers)),
        Opcode.ACK: wire.Ack(
            sub_id=3,
            ranges=(
                wire.AckRange(topic="a", first_offset=1, last_offset=2),
                wire.AckRange(topic="b", first_offset=3, last_offset=3),
            ),
        ),
        Opcode.CREDIT: wire.Credit(sub_id=3, credit=10),
        Opcode.LOG_BATCH: wire.LogBatch.create(
            append_ts=1, producer_id=2, producer_seq=3, batch=uniform_batch, topics=("x", "t")
        ),
        Opcode.LOG_BATCH_HEADERS: wire.LogBatchHeaders.create(
            append_ts=1, producer_id=2, producer_seq=3, batch=uniform_batch, topics=("x", "t"), headers=headers
        ),
    }


@pytest.mark.parametrize("op", HOT, ids=lambda op: op.name)
def test_exhaustive_single_byte_edits_same_verdict(op: Opcode) -> None:
    # Random mutation rarely lands on the one byte that matters (a count's low
    # byte set to 0, a length off by one); small bodies can be edited exhaustively.
    for frame in (minimal_frame(op), _rich_examples()[op]):
        for body in single_byte_edits(frame.encode_body()):
            assert_same_verdict(op, body)
            if op in (Opcode.LOG_BATCH, Opcode.LOG_BATCH_HEADERS) and len(body) >= 4:
                # Re-sealed, so the edit reaches the batch parser past the checksum.
                assert_same_verdict(op, zlib.crc32(body[4:]).to_bytes(4, "big") + body[4:])


# -- the documented differences really exist (so the allowances above are not blanket) ---------


def test_log_batch_crc_is_the_only_crc_rule() -> None:
    batch = wire.RecordBatch(
        topic="t", base_offset=1, timestamp=2, origin=3, origin_seq=4, count=1, records=wire.encode_record(b"k", b"v")
    )
    good = wire.LogBatch.create(append_ts=5, producer_id=6, producer_seq=7, batch=batch).encode_body()
    bad = (int.from_bytes(good[:4], "big") ^ 1).to_bytes(4, "big") + good[4:]
    # The layout alone accepts the wrong CRC ...
    BODIES[Opcode.LOG_BATCH].parse(bad)
    # ... the fast path refuses it with the dedicated code ...
    refused = _fast(Opcode.LOG_BATCH, bad)
    assert isinstance(refused, RemoteProtocolError)
    assert refused.code is wire.ErrorCode.CHECKSUM_MISMATCH
    # ... and spec_accepts applies the CRC rule.
    assert spec_accepts(Opcode.LOG_BATCH, bad)[0] is False
    assert spec_accepts(Opcode.LOG_BATCH, good)[0] is True


def test_publish_ack_unknown_status_is_refused() -> None:
    body = bytearray(wire.PublishAck(producer_id=1, sequence=2).encode_body())
    body[16] = 7  # status byte
    BODIES[Opcode.PUBLISH_ACK].parse(bytes(body))
    assert isinstance(_fast(Opcode.PUBLISH_ACK, bytes(body)), RemoteProtocolError)


@pytest.mark.parametrize("op", [Opcode.SUBSCRIBE, Opcode.UNSUBSCRIBE], ids=lambda op: op.name)
def test_topic_list_cap_is_a_remote_error(op: Opcode) -> None:
    # The layout has no count field, so only the frame class caps it; a peer
    # exceeding the cap is the *peer's* error (RemoteProtocolError), pointing at
    # the first topic too many.
    one = wire.encode_topic("t")
    at_cap = one * MAX_TOPICS_PER_MESSAGE
    assert len(BODIES[op].parse(at_cap + one).topics) == MAX_TOPICS_PER_MESSAGE + 1
    assert_same_verdict(op, at_cap)
    assert_same_verdict(op, at_cap + one)
    refused = _fast(op, at_cap + one)
    assert isinstance(refused, RemoteProtocolError)
    assert refused.code is wire.ErrorCode.INVALID_TOPIC
    assert refused.offset == len(at_cap)


# -- ERROR: a schema frame, encoded by hand (a hub refusing a connection storm sends thousands) --


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_error_encode_equals_spec_build(data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[Opcode.ERROR])
    assert frame.encode_body() == BODIES[Opcode.ERROR].build(wire.plain(frame))
    assert wire.Error.decode_body(frame.encode_body()) == frame


@pytest.mark.parametrize(
    "fields",
    [{"reason": "é" * 40_000}, {"ref": 1 << 64}, {"ref": -1}],
    ids=["reason-past-65535-bytes", "ref-past-u64", "negative-ref"],
)
def test_an_error_that_does_not_fit_is_the_callers_error(fields: dict[str, Any]) -> None:
    frame = wire.Error(code=wire.ErrorCode.LIMIT_EXCEEDED, **fields)
    with pytest.raises(wire.LocalProtocolError, match="cannot encode ERROR"):
        frame.encode()
    with pytest.raises(ConstructError):  # the schema refuses it too
        BODIES[Opcode.ERROR].build(wire.plain(frame))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_publish_ack_frame_is_what_publish_ack_encodes(data: st.DataObject) -> None:
    """The hub acknowledges with ``publish_ack_frame`` (no frame object built): the same bytes."""
    ack = data.draw(FRAME_STRATEGIES[Opcode.PUBLISH_ACK])
    ranges = [(r.topic, r.first_offset, r.num) for r in ack.ranges]
    assert wire.publish_ack_frame(ack.producer_id, ack.sequence, ack.status, ack.timestamp, ranges) == ack.encode()


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_publish_frame_is_what_publish_encodes(data: st.DataObject) -> None:
    """The SDK frames its buffered publishes with ``publish_frame`` (no frame object built): the same bytes,
    and the schema's."""
    frame = data.draw(FRAME_STRATEGIES[Opcode.PUBLISH])
    sets = [
        (wire.encode_topic_list(s.topics), s.count, s.records, s.headers) for s in frame.sets
    ]
    framed = wire.publish_frame(frame.producer_id, frame.sequence, int(frame.flags), sets)
    assert framed == frame.encode()
    # Both share one body builder; the spec holds that builder to the schema on its own.
    assert framed[wire.HEADER_SIZE :] == BODIES[Opcode.PUBLISH].build(wire.plain(frame))
