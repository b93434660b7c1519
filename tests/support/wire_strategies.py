"""Hypothesis strategies for every frame in :data:`wire.FRAME_TYPES`.

Each strategy builds a *valid* frame (one that encodes and decodes back to
itself).  Sizes are kept small so that property tests stay fast; limits such
as 255-byte topics and u64 extremes still turn up because the integer and
topic strategies reach for their bounds on purpose.

Other test modules import :func:`any_frame`, :data:`FRAME_STRATEGIES` and the
building blocks (:func:`topics`, :func:`message_sets`, :func:`record_batches`).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

import wire
from wire import (
    Ack,
    AckMode,
    AckRange,
    AckStatus,
    Credit,
    Deliver,
    Error,
    ErrorCode,
    Forward,
    ForwardAck,
    ForwardBatch,
    ForwardSet,
    Frame,
    Gap,
    Heartbeat,
    Hello,
    LogBatch,
    MeshHello,
    MessageSet,
    OffsetRange,
    Opcode,
    Publish,
    PublishAck,
    PublishFlags,
    RecordBatch,
    ResumePosition,
    SegmentHeader,
    SlowConsumerPolicy,
    StartPosition,
    Status,
    StatusReply,
    Sub,
    SubEnd,
    SubOk,
    Subscribe,
    SubscribeAck,
    SubUpdate,
    TopicOffset,
    Unsub,
    Unsubscribe,
    UnsubscribeAck,
    UpdateOp,
    Welcome,
    encode_records,
)
from wire.frames.base import SchemaFrame

# -- scalars -------------------------------------------------------------------


def _uint(bits: int) -> st.SearchStrategy[int]:
    # Mix in the extremes explicitly: off-by-one and sign bugs live at 0 and 2**n - 1.
    top = (1 << bits) - 1
    return st.one_of(st.sampled_from([0, 1, top - 1, top]), st.integers(0, top))


u8 = _uint(8)
u16 = _uint(16)
u32 = _uint(32)
u64 = _uint(64)
MAX_U64 = (1 << 64) - 1

#: Any Unicode scalar value Python can encode as UTF-8 (no lone surrogates).
_chars = st.characters(codec="utf-8")


def _fit_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut at a character boundary so that it encodes to <= ``max_bytes``."""
    while len(text.encode("utf-8")) > max_bytes:
        text = text[:-1]
    return text


def short_str(max_bytes: int = 255, *, min_size: int = 0) -> st.SearchStrategy[str]:
    """UTF-8 text of at most ``max_bytes`` *bytes* (multibyte chars count in bytes)."""
    return (
        st.text(_chars, min_size=min_size, max_size=min(max_bytes, 24))
        .map(lambda s: _fit_utf8(s, max_bytes))
        .filter(lambda s: len(s) >= min_size)
    )


def _long_topic() -> st.SearchStrategy[str]:
    # Near or at the 255-byte ceiling, mixing 1- to 4-byte characters so the
    # byte-vs-character distinction is exercised.
    return st.one_of(
        st.integers(1, 255).map(lambda n: "t" * n),
        st.text(_chars, min_size=64, max_size=255).map(lambda s: _fit_utf8(s, 255)),
    )


#: A valid topic: 1..255 bytes of UTF-8.
topic: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(["a", "topic_1", "a.b.c", "prices.eu.*", "orders.>", "é", "日本", "🙂"]),
    short_str(min_size=1),
    _long_topic(),
).filter(lambda s: 1 <= len(s.encode("utf-8")) <= 255)


def topics(min_size: int = 1, max_size: int = 4) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(topic, min_size=min_size, max_size=max_size).map(tuple)


#: One record's ``(key, data)``; keys are often empty, as in real traffic.
record = st.tuples(
    st.one_of(st.just(b""), st.binary(max_size=8)),
    st.binary(max_size=32),
)


@st.composite
def _uniform_records(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    # Fixed-size messages (every record header identical) are the common case
    # and take their own decoding shortcut in wire.records: generate them on purpose.
    key_size = draw(st.integers(0, 4))
    data_size = draw(st.integers(0, 8))
    return draw(
        st.lists(
            st.tuples(
                st.binary(min_size=key_size, max_size=key_size), st.binary(min_size=data_size, max_size=data_size)
            ),
            min_size=1,
            max_size=6,
        )
    )


#: The ``(key, data)`` pairs of one record region: varied sizes or all one size.
records = st.one_of(st.lists(record, min_size=1, max_size=4), _uniform_records())


def _small_tuple_early(elements: st.SearchStrategy[bytes]) -> st.SearchStrategy[tuple[bytes, ...]]:
    return st.lists(elements, max_size=3).map(tuple)


#: A header name: short, sometimes not ASCII.
_header_name = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6).filter(
    lambda n: len(n.encode()) <= 255
)
#: A set's headers block: none, or a few text and bytes values (wire.headers).
header_blocks = st.dictionaries(
    _header_name, st.one_of(st.text(max_size=8), st.binary(max_size=8)), max_size=3
).map(wire.encode_headers)


def message_sets() -> st.SearchStrategy[MessageSet]:
    return st.builds(MessageSet.build, topics(), records)


#: A subscription's key filter: every key, or some keys and prefixes (the empty key included).
key_filters = st.builds(
    wire.KeyFilter,
    all=st.booleans(),
    keys=_small_tuple_early(st.binary(max_size=6)),
    prefixes=_small_tuple_early(st.binary(max_size=4)),
)


def headered_message_sets() -> st.SearchStrategy[MessageSet]:
    """Message sets with or without headers (what PUBLISH with flag HEADERS carries)."""
    return st.builds(MessageSet.build, topics(), records, headers=header_blocks)


@st.composite
def record_batches(draw: st.DrawFn, *, headered: bool = False) -> RecordBatch:
    count, region = encode_records(draw(records))
    headers = draw(header_blocks) if headered else b""
    return RecordBatch(
        topic=draw(topic),
        base_offset=draw(u64),
        timestamp=draw(u64),
        origin=draw(u64),
        origin_seq=draw(u64),
        count=count,
        records=region,
        headers=headers,
    )


def _small_tuple(elements: st.SearchStrategy[object], min_size: int = 0, max_size: int = 3) -> st.SearchStrategy:
    return st.lists(elements, min_size=min_size, max_size=max_size).map(tuple)


# -- one strategy per frame type -------------------------------------------------


@st.composite
def _log_batch(draw: st.DrawFn, *, headered: bool = False) -> LogBatch | wire.LogBatchHeaders:
    # LogBatch.create computes the CRC; a random crc would (rightly) not decode.
    batch = draw(record_batches())
    # The message's full topic list, the batch's own topic somewhere in it.
    others = draw(topics(min_size=0, max_size=3).map(lambda ts: tuple(t for t in ts if t != batch.topic)))
    at = draw(st.integers(0, len(others)))
    if headered:
        return wire.LogBatchHeaders.create(
            append_ts=draw(u64), producer_id=draw(u64), producer_seq=draw(u64), batch=batch,
            topics=(*others[:at], batch.topic, *others[at:]), headers=draw(header_blocks),
        )
    return LogBatch.create(
        append_ts=draw(u64),
        producer_id=draw(u64),
        producer_seq=draw(u64),
        batch=batch,
        topics=(*others[:at], batch.topic, *others[at:]),
    )


#: Hub (origin) ids: any u64 but 0, which no hub has (mesh v2 refuses it).
hub_ids = st.one_of(st.sampled_from([1, 2, MAX_U64 - 1, MAX_U64]), st.integers(1, MAX_U64))


@st.composite
def forward_sets(draw: st.DrawFn, *, headered: bool = False) -> tuple[ForwardSet, ...]:
    """1..3 sets in origin-sequence order, not overlapping, never wrapping past 2^64-1."""
    messages = draw(st.lists(headered_message_sets() if headered else message_sets(), min_size=1, max_size=3))
    total = sum(m.count for m in messages)
    seq = draw(st.one_of(st.just(1), st.just(MAX_U64 - total + 1), st.integers(1, MAX_U64 - total + 1)))
    out = []
    for m in messages:
        out.append(ForwardSet(origin_seq=seq, timestamp=draw(u64), messages=m))
        seq += m.count
        room = MAX_U64 - seq + 1 - sum(x.count for x in messages[len(out):])
        seq += draw(st.integers(0, min(room, 3)))  # lazy push: sequences may skip
    return tuple(out)


@st.composite
def routed_sets(draw: st.DrawFn, *, headered: bool = False) -> tuple[wire.RoutedSet, ...]:
    """Sets as :func:`forward_sets` makes them, each with one prev per topic before it."""
    out = []
    for s in draw(forward_sets(headered=headered)):
        prevs = tuple(draw(st.integers(0, s.origin_seq - 1)) for _ in s.messages.topics)
        out.append(wire.RoutedSet(origin_seq=s.origin_seq, timestamp=s.timestamp, messages=s.messages, prevs=prevs))
    return tuple(out)


dest_lists = st.lists(hub_ids, min_size=1, max_size=4).map(tuple)
pattern_lists = _small_tuple(topic)

ROUTED_CONTROL_STRATEGIES: dict[Opcode, st.SearchStrategy[Frame]] = {
    Opcode.INTEREST: st.builds(wire.Interest, key=topic, patterns=pattern_lists),
    Opcode.WATCH: st.builds(wire.Watch, key=topic, on=st.booleans(), version=u32),
    Opcode.INTEREST_SET: st.builds(
        wire.InterestSet,
        key=topic,
        full=st.booleans(),
        version=u32,
        entries=st.lists(
            st.builds(wire.InterestEntry, hub=hub_ids, patterns=pattern_lists), max_size=3, unique_by=lambda e: e.hub
        ).map(tuple),
    ),
    Opcode.JOINED: st.builds(wire.Joined, key=topic, since=u64),
    Opcode.HEADS: st.builds(
        wire.Heads, heads=_small_tuple(st.builds(wire.Head, topic=topic, last=st.integers(1, MAX_U64)), min_size=1)
    ),
    Opcode.SYNC: st.builds(wire.Sync, key=topic, patterns=_small_tuple(topic, min_size=1)),
    Opcode.REPAIR: st.tuples(u64, st.integers(1, 1 << 20), topic).filter(lambda t: t[0] + t[1] <= MAX_U64).map(
        lambda t: wire.Repair(topic=t[2], after=t[0], upto=t[0] + t[1])
    ),
    Opcode.REPAIRED: st.builds(wire.Repaired, topic=topic, upto=st.integers(1, MAX_U64), missing=u64),
}


@st.composite
def _link_state(draw: st.DrawFn) -> wire.LinkState:
    hub = draw(hub_ids)
    neighbors = draw(st.lists(hub_ids.filter(lambda h: h != hub), max_size=4, unique=True))
    costed = draw(st.booleans())  # mesh 3.1 or 3.0
    costs = tuple(draw(st.integers(0, 0xFFFF)) for _ in neighbors) if costed else ()
    return wire.LinkState(
        hub_id=hub,
        boot=draw(u64),
        seq=draw(u64),
        peer_key=draw(topic),
        addrs=draw(_small_tuple(short_str())),
        neighbors=tuple(neighbors),
        costs=costs,
    )


FRAME_STRATEGIES: dict[Opcode, st.SearchStrategy[Frame]] = {
    Opcode.HEARTBEAT: st.builds(Heartbeat, word=st.sampled_from(["ping", "pong"])),
    Opcode.SUBSCRIBE: st.builds(Subscribe, topics=topics()),
    Opcode.SUBSCRIBE_ACK: st.builds(SubscribeAck, success=st.booleans()),
    Opcode.UNSUBSCRIBE: st.builds(Unsubscribe, topics=topics()),
    Opcode.UNSUBSCRIBE_ACK: st.builds(UnsubscribeAck, success=st.booleans()),
    Opcode.FORWARD: st.builds(Forward, topics=topics(), data=st.binary(max_size=48)),
    Opcode.MESH_HELLO: st.builds(
        MeshHello,
        hub_id=hub_ids,
        positions=st.lists(st.builds(ResumePosition, origin=hub_ids, seq=u64), max_size=3, unique_by=lambda p: p.origin)
        .map(tuple),
    ),
    Opcode.FORWARD_BATCH: st.builds(ForwardBatch, origin=hub_ids, sets=forward_sets()),
    Opcode.FORWARD_BATCH_HEADERS: st.builds(wire.ForwardBatchHeaders, origin=hub_ids, sets=forward_sets(headered=True)),
    Opcode.FORWARD_ACK: st.builds(ForwardAck, origin=hub_ids, seq=u64),
    Opcode.LINK_STATE: _link_state(),
    Opcode.ROUTED_SETS: st.builds(wire.RoutedSets, ttl=u8, dests=dest_lists, origin=hub_ids, sets=routed_sets()),
    Opcode.ROUTED_SETS_HEADERS: st.builds(
        wire.RoutedSetsHeaders, ttl=u8, dests=dest_lists, origin=hub_ids, sets=routed_sets(headered=True)
    ),
    Opcode.ROUTED: st.builds(
        wire.Routed, ttl=u8, dests=dest_lists, src=hub_ids, inner=st.one_of(*ROUTED_CONTROL_STRATEGIES.values())
    ),
    **ROUTED_CONTROL_STRATEGIES,
    Opcode.HELLO: st.builds(Hello, version=u16, client_name=short_str(), token=st.binary(max_size=24)),
    Opcode.WELCOME: st.builds(Welcome, version=u16, hub_id=u64, max_body=u32, heartbeat_ms=u32, hub_name=short_str()),
    Opcode.PUBLISH: st.builds(
        Publish,
        producer_id=u64,
        sequence=u64,
        flags=st.sampled_from([PublishFlags.NONE, PublishFlags.ACK]),  # bits 2-7 are reserved: refused
        sets=_small_tuple(message_sets(), min_size=1),
    )
    | st.builds(
        Publish,
        producer_id=u64,
        sequence=u64,
        flags=st.sampled_from([PublishFlags.HEADERS, PublishFlags.ACK | PublishFlags.HEADERS]),
        sets=_small_tuple(headered_message_sets(), min_size=1),
    ),
    Opcode.PUBLISH_ACK: st.builds(
        PublishAck,
        producer_id=u64,
        sequence=u64,
        status=st.sampled_from(AckStatus),
        timestamp=u64,
        ranges=_small_tuple(st.builds(OffsetRange, topic=topic, first_offset=u64, num=u32)),
    ),
    Opcode.SUB: st.builds(
        Sub,
        sub_id=u32,
        patterns=topics(),
        start=st.sampled_from(StartPosition),
        start_value=u64,
        ack_mode=st.sampled_from(AckMode),
        policy=st.sampled_from(SlowConsumerPolicy),
        credit=u32,
        ack_wait_ms=u32,
        durable=short_str(),
        group=short_str(),
        offsets=_small_tuple(st.builds(TopicOffset, topic=topic, offset=u64)),
        key_filter=st.none() | key_filters,
        query=st.none() | st.sampled_from(["a = 'x'", "n > 5 AND (t EXISTS OR s CONTAINS 'é')"]),
    ),
    Opcode.KEY_FILTER: st.builds(wire.KeyFilterUpdate, sub_id=u32, op=st.sampled_from(wire.KeyOp), filter=key_filters),
    Opcode.SUB_OK: st.builds(SubOk, sub_id=u32, offsets=_small_tuple(st.builds(TopicOffset, topic=topic, offset=u64))),
    Opcode.UNSUB: st.builds(Unsub, sub_id=u32),
    Opcode.SUB_UPDATE: st.builds(SubUpdate, sub_id=u32, op=st.sampled_from(UpdateOp), patterns=topics()),
    Opcode.DELIVER: st.builds(Deliver, sub_id=u32, batch=record_batches()),
    Opcode.DELIVER_HEADERS: st.builds(wire.DeliverHeaders, sub_id=u32, batch=record_batches(headered=True)),
    Opcode.ACK: st.builds(
        Ack,
        sub_id=u32,
        ranges=_small_tuple(st.builds(AckRange, topic=topic, first_offset=u64, last_offset=u64), min_size=1),
    ),
    Opcode.CREDIT: st.builds(Credit, sub_id=u32, credit=u32),
    Opcode.GAP: st.builds(Gap, sub_id=u32, topic=topic, first_offset=u64, dropped=u64),
    Opcode.SUB_END: st.builds(SubEnd, sub_id=u32, code=st.sampled_from(ErrorCode), reason=short_str(64)),
    Opcode.ERROR: st.builds(Error, code=st.sampled_from(ErrorCode), reason=short_str(64), ref=u64),
    Opcode.STATUS: st.just(Status()),
    Opcode.STATUS_REPLY: st.builds(StatusReply, document=st.binary(max_size=48)),
    Opcode.COMMIT: st.builds(wire.Commit, sub_id=u32, ref=u32),
    Opcode.COMMITTED: st.builds(
        wire.Committed, sub_id=u32, ref=u32, positions=_small_tuple(st.builds(TopicOffset, topic=topic, offset=u64))
    ),
    Opcode.SEGMENT_HEADER: st.builds(SegmentHeader, topic=topic, base_offset=u64, created=u64, version=u16),
    Opcode.LOG_BATCH: _log_batch(),
    Opcode.LOG_BATCH_HEADERS: _log_batch(headered=True),
}

# Fail at import, not silently, when a frame type is added without a strategy.
assert set(FRAME_STRATEGIES) == set(wire.FRAME_TYPES), set(wire.FRAME_TYPES) ^ set(FRAME_STRATEGIES)


def frames_of(op: Opcode) -> st.SearchStrategy[Frame]:
    """Valid frames with opcode ``op``."""
    return FRAME_STRATEGIES[op]


def any_frame() -> st.SearchStrategy[Frame]:
    """A valid frame of any type."""
    return st.one_of(*FRAME_STRATEGIES.values())


def frame_streams(max_size: int = 8) -> st.SearchStrategy[list[Frame]]:
    """Several frames, as they would follow each other on a connection."""
    return st.lists(any_frame(), min_size=1, max_size=max_size)


def minimal_frame(op: Opcode) -> Frame:
    """The frame with the smallest body ``op`` can have, built by hand (no hypothesis)."""
    one_record = wire.MessageSet.build(["a"], [(b"", b"")])
    batch = wire.RecordBatch(
        topic="a", base_offset=0, timestamp=0, origin=0, origin_seq=0, count=1, records=wire.encode_record(b"", b"")
    )
    frames: dict[Opcode, Callable[[], Frame]] = {
        Opcode.HEARTBEAT: lambda: wire.PING,
        Opcode.SUBSCRIBE: lambda: wire.Subscribe(topics=("a",)),
        Opcode.SUBSCRIBE_ACK: lambda: wire.SubscribeAck(success=True),
        Opcode.UNSUBSCRIBE: lambda: wire.Unsubscribe(topics=("a",)),
        Opcode.UNSUBSCRIBE_ACK: lambda: wire.UnsubscribeAck(success=False),
        Opcode.FORWARD: lambda: wire.Forward(topics=("a",), data=b""),
        Opcode.MESH_HELLO: lambda: wire.MeshHello(hub_id=1),
        Opcode.FORWARD_BATCH: lambda: wire.ForwardBatch(
            origin=1, sets=(wire.ForwardSet(origin_seq=1, timestamp=0, messages=one_record),)
        ),
        Opcode.FORWARD_BATCH_HEADERS: lambda: wire.ForwardBatchHeaders(
            origin=1, sets=(wire.ForwardSet(origin_seq=1, timestamp=0, messages=one_record),)
        ),
        Opcode.FORWARD_ACK: lambda: wire.ForwardAck(origin=1, seq=0),
        Opcode.LINK_STATE: lambda: wire.LinkState(hub_id=1, boot=0, seq=0, peer_key="k"),
        Opcode.ROUTED_SETS: lambda: wire.RoutedSets(
            ttl=0,
            dests=(1,),
            origin=1,
            sets=(wire.RoutedSet(origin_seq=1, timestamp=0, messages=one_record, prevs=(0,)),),
        ),
        Opcode.ROUTED_SETS_HEADERS: lambda: wire.RoutedSetsHeaders(
            ttl=0,
            dests=(1,),
            origin=1,
            sets=(wire.RoutedSet(origin_seq=1, timestamp=0, messages=one_record, prevs=(0,)),),
        ),
        Opcode.ROUTED: lambda: wire.Routed(ttl=0, dests=(1,), src=1, inner=wire.Interest(key="a")),
        Opcode.INTEREST: lambda: wire.Interest(key="a"),
        Opcode.WATCH: lambda: wire.Watch(key="a"),
        Opcode.INTEREST_SET: lambda: wire.InterestSet(key="a", full=False, version=0),
        Opcode.JOINED: lambda: wire.Joined(key="a", since=0),
        Opcode.HEADS: lambda: wire.Heads(heads=(wire.Head(topic="a", last=1),)),
        Opcode.SYNC: lambda: wire.Sync(key="a", patterns=("a",)),
        Opcode.REPAIR: lambda: wire.Repair(topic="a", after=0, upto=1),
        Opcode.REPAIRED: lambda: wire.Repaired(topic="a", upto=1),
        Opcode.HELLO: lambda: wire.Hello(),
        Opcode.WELCOME: lambda: wire.Welcome(version=1, hub_id=0, max_body=0, heartbeat_ms=0),
        Opcode.PUBLISH: lambda: wire.Publish(sets=(one_record,)),
        Opcode.PUBLISH_ACK: lambda: wire.PublishAck(producer_id=0, sequence=0),
        Opcode.SUB: lambda: wire.Sub(sub_id=0, patterns=("a",)),
        Opcode.SUB_OK: lambda: wire.SubOk(sub_id=0),
        Opcode.UNSUB: lambda: wire.Unsub(sub_id=0),
        Opcode.SUB_UPDATE: lambda: wire.SubUpdate(sub_id=0, op=wire.UpdateOp.ADD, patterns=("a",)),
        Opcode.DELIVER: lambda: wire.Deliver(sub_id=0, batch=batch),
        Opcode.DELIVER_HEADERS: lambda: wire.DeliverHeaders(sub_id=0, batch=batch),
        Opcode.ACK: lambda: wire.Ack(sub_id=0, ranges=(wire.AckRange(topic="a", first_offset=0, last_offset=0),)),
        Opcode.CREDIT: lambda: wire.Credit(sub_id=0, credit=0),
        Opcode.KEY_FILTER: lambda: wire.KeyFilterUpdate(sub_id=0, op=wire.KeyOp.SET, filter=wire.KeyFilter()),
        Opcode.GAP: lambda: wire.Gap(sub_id=0, topic="a", first_offset=0, dropped=0),
        Opcode.SUB_END: lambda: wire.SubEnd(sub_id=0, code=wire.ErrorCode.UNSUBSCRIBED),
        Opcode.ERROR: lambda: wire.Error(code=wire.ErrorCode.INTERNAL),
        Opcode.STATUS: lambda: wire.Status(),
        Opcode.STATUS_REPLY: lambda: wire.StatusReply(document=b""),
        Opcode.COMMIT: lambda: wire.Commit(sub_id=0, ref=0),
        Opcode.COMMITTED: lambda: wire.Committed(sub_id=0, ref=0),
        Opcode.SEGMENT_HEADER: lambda: wire.SegmentHeader(topic="a", base_offset=0, created=0),
        Opcode.LOG_BATCH: lambda: wire.LogBatch.create(append_ts=0, producer_id=0, producer_seq=0, batch=batch),
        Opcode.LOG_BATCH_HEADERS: lambda: wire.LogBatchHeaders.create(
            append_ts=0, producer_id=0, producer_seq=0, batch=batch, topics=("a",), headers=b""
        ),
    }
    return frames[op]()


_INTERESTING = (0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0xFE, 0xFF)


def single_byte_edits(body: bytes) -> list[bytes]:
    """Every single-byte overwrite (interesting values), deletion and insertion of ``body``."""
    out = []
    for at in range(len(body)):
        for value in {*_INTERESTING, (body[at] + 1) & 0xFF, (body[at] - 1) & 0xFF} - {body[at]}:
            out.append(body[:at] + bytes([value]) + body[at + 1 :])
        out.append(body[:at] + body[at + 1 :])
    for at in range(len(body) + 1):
        for value in (0x00, 0x01, 0xFF):
            out.append(body[:at] + bytes([value]) + body[at:])
    return out


#: Opcodes whose frames have hand-written struct fast paths (not ``SchemaFrame``).
HOT_OPCODES: tuple[Opcode, ...] = tuple(op for op, cls in wire.FRAME_TYPES.items() if not issubclass(cls, SchemaFrame))

__all__: list[str] = [
    "FRAME_STRATEGIES",
    "HOT_OPCODES",
    "any_frame",
    "frame_streams",
    "frames_of",
    "message_sets",
    "minimal_frame",
    "record",
    "record_batches",
    "records",
    "short_str",
    "single_byte_edits",
    "topic",
    "topics",
    "u8",
    "u16",
    "u32",
    "u64",
]
