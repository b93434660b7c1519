"""The normative byte layouts of every frame body, written with construct.

This module is the specification: ``docs/protocol.md`` is its prose form.
Cold frames (hello, subscribe, errors...) are encoded and decoded with these
descriptions directly.  Hot frames (publish, deliver, forwards, log batches)
have hand-written ``struct`` fast paths in :mod:`wire.records` and
:mod:`wire.frames`; ``tests/test_wire_fastpath.py`` proves them
byte-identical to the descriptions here on generated inputs.

Conventions: integers are unsigned big-endian; a *topic* is ``[u8 len][UTF-8]``
with len >= 1; a length or count that can be computed from the data is a
``Rebuild`` field so that building never trusts a caller's number; every body
ends in ``Terminated`` so trailing bytes are an error.
"""

from __future__ import annotations

from typing import Any

from construct import (
    Array,
    Bytes,
    Check,
    Construct,
    ExprAdapter,
    ExprValidator,
    FixedSized,
    FocusedSeq,
    GreedyBytes,
    GreedyRange,
    If,
    IfThenElse,
    Int8ub,
    Int16ub,
    Int32ub,
    Int64ub,
    OneOf,
    Optional,
    PaddedString,
    PascalString,
    Prefixed,
    Rebuild,
    Struct,
    Switch,
    Terminated,
    len_,
    this,
)

from .limits import MAX_U64
from .opcodes import ROUTED_CONTROL_OPCODES, Opcode

#: ``[u8 len][UTF-8 bytes]``, 1..255 bytes.
Topic = ExprValidator(PascalString(Int8ub, "utf8"), lambda obj, ctx: len(obj) > 0)
#: A short name, may be empty.
Str8 = PascalString(Int8ub, "utf8")
#: A human-readable reason, may be empty.
Str16 = PascalString(Int16ub, "utf8")

#: One message inside a record region.
Record = Struct(
    "key_len" / Rebuild(Int16ub, len_(this.key)),
    "data_len" / Rebuild(Int32ub, len_(this.data)),
    "key" / Bytes(this.key_len),
    "data" / Bytes(this.data_len),
)


def _records_len(ctx: Any) -> int:
    return sum(6 + len(r["key"]) + len(r["data"]) for r in ctx["records"])


def _record_region() -> list[Construct]:
    """``record_count``, ``records_len`` then exactly that many record bytes."""
    return [
        "record_count" / Rebuild(Int32ub, len_(this.records)),
        Check(this.record_count >= 1),
        "records_len" / Rebuild(Int32ub, _records_len),
        "records"
        / FixedSized(
            this.records_len, FocusedSeq("items", "items" / GreedyRange(Record), Terminated)
        ),
        Check(lambda ctx: len(ctx.records) == ctx.record_count),
    ]


# -- mesh v2 sequence rules: origin ids and sequences are u64 and never wrap -------------


def _set_fits(ctx: Any) -> bool:
    """A forward set's records take ``origin_seq .. origin_seq + count - 1``: 1..2^64-1, no wrap."""
    return bool(ctx.origin_seq >= 1 and ctx.origin_seq + len(ctx.messages.records) - 1 <= MAX_U64)


def _sets_ascend(ctx: Any) -> bool:
    """The sets of a FORWARD_BATCH are in origin-sequence order and do not overlap."""
    last = 0
    for s in ctx.sets:
        if s.origin_seq <= last:
            return False
        last = s.origin_seq + len(s.messages.records) - 1
    return True


def _positions_distinct(ctx: Any) -> bool:
    """A MESH_HELLO names each origin (never 0: no hub has that id) at most once."""
    origins = [p.origin for p in ctx.positions]
    return 0 not in origins and len(set(origins)) == len(origins)


# -- mesh v3 rules ---------------------------------------------------------------------------


def _neighbors_valid(ctx: Any) -> bool:
    """A LINK_STATE's neighbors are hubs (never 0), distinct, and never the hub itself."""
    hubs = list(ctx.neighbors)
    return 0 not in hubs and ctx.hub_id not in hubs and len(set(hubs)) == len(hubs)


def _prevs_before(ctx: Any) -> bool:
    """Each prev names a set before this one (0: none)."""
    return all(p < ctx.origin_seq for p in ctx.prevs)


def _entries_distinct(ctx: Any) -> bool:
    hubs = [e.hub for e in ctx.entries]
    return 0 not in hubs and len(set(hubs)) == len(hubs)


#: The hop budget and destinations that start every routed body (ROUTED_SETS, ROUTED).
_ROUTE = [
    "ttl" / Int8ub,
    "dest_count" / Rebuild(Int16ub, len_(this.dests)),
    Check(this.dest_count >= 1),
    "dests" / Array(this.dest_count, Int64ub),
    Check(lambda ctx: 0 not in ctx.dests),
]
PatternList = Struct(
    "pattern_count" / Rebuild(Int16ub, len_(this.patterns)),
    "patterns" / Array(this.pattern_count, Topic),
)


#: Messages that share one topic set (PUBLISH, FORWARD_BATCH).
MessageSet = Struct(
    "topic_count" / Rebuild(Int8ub, len_(this.topics)),
    Check(this.topic_count >= 1),
    "topics" / Array(this.topic_count, Topic),
    *_record_region(),
)

#: Stored messages of one topic with consecutive offsets (DELIVER, LOG_BATCH).
RecordBatch = Struct(
    "topic" / Topic,
    "base_offset" / Int64ub,
    "timestamp" / Int64ub,
    "origin" / Int64ub,
    "origin_seq" / Int64ub,
    *_record_region(),
)


def _header_names_distinct(entries: Any, ctx: Any) -> bool:
    names = [e["name"] for e in entries]
    return len(set(names)) == len(names)


def _text_is_utf8(value: Any, ctx: Any) -> bool:
    if ctx.kind != 0:
        return True
    try:
        bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: One header: a name (1..255 bytes of UTF-8), the value's kind (0 text, 1 bytes), the value.
HeaderEntry = Struct(
    "name" / Topic,
    "kind" / OneOf(Int8ub, [0, 1]),
    "value" / ExprValidator(Prefixed(Int16ub, GreedyBytes), _text_is_utf8),
)
#: A set's headers: ``[u16 block_len]`` then the entries, names distinct (wire/headers.py).
HeaderBlock = ExprValidator(
    Prefixed(Int16ub, FocusedSeq("items", "items" / GreedyRange(HeaderEntry), Terminated)), _header_names_distinct
)

#: A MessageSet preceded by its headers block (PUBLISH with flag HEADERS, FORWARD_BATCH_HEADERS).
HeaderedMessageSet = Struct("headers" / HeaderBlock, *MessageSet.subcons)

#: The keys a subscription delivers (SUB's optional tail, KEY_FILTER): wire.KeyFilter.
KeyFilter = Struct(
    "all" / OneOf(Int8ub, [0, 1]),
    "key_count" / Rebuild(Int16ub, len_(this.keys)),
    "keys" / Array(this.key_count, Prefixed(Int16ub, GreedyBytes)),
    "prefix_count" / Rebuild(Int16ub, len_(this.prefixes)),
    "prefixes" / Array(this.prefix_count, Prefixed(Int16ub, GreedyBytes)),
)


#: How FORWARD_BATCH and ROUTED_SETS bodies go on: the origin, then 1..65535 sets.
_ORIGIN_AND_SET_COUNT = [
    "origin" / Int64ub,
    Check(this.origin >= 1),
    "set_count" / Rebuild(Int16ub, len_(this.sets)),
    Check(this.set_count >= 1),
]


def _routed_sets(message_set: Construct) -> Construct:
    """ROUTED_SETS (``MessageSet``) and ROUTED_SETS_HEADERS (``HeaderedMessageSet``)."""
    return Struct(
        *_ROUTE,
        *_ORIGIN_AND_SET_COUNT,
        "sets"
        / Array(
            this.set_count,
            Struct(
                "origin_seq" / Int64ub,
                "timestamp" / Int64ub,
                "messages" / message_set,
                Check(_set_fits),
                "prevs" / Array(lambda ctx: len(ctx.messages.topics), Int64ub),
                Check(_prevs_before),
            ),
        ),
        Check(_sets_ascend),
        Terminated,
    )


def _log_batch(*before_batch: Construct) -> Construct:
    """LOG_BATCH's body, with ``before_batch`` between the topic list and the batch."""
    return Struct(
        "crc" / Int32ub,
        "append_ts" / Int64ub,
        "producer_id" / Int64ub,
        "producer_seq" / Int64ub,
        "topic_count" / Rebuild(Int8ub, len_(this.topics)),
        Check(this.topic_count >= 1),
        "topics" / Array(this.topic_count, Topic),
        *before_batch,
        "batch" / RecordBatch,
        # The stored batch's topic is one of the message's topics (LogBatch enforces it too).
        Check(lambda ctx: ctx.batch.topic in ctx.topics),
        Terminated,
    )


def _forward_batch(messages: Construct) -> Construct:
    """FORWARD_BATCH's body, its sets' messages laid out as ``messages``."""
    return Struct(
        *_ORIGIN_AND_SET_COUNT,
        "sets"
        / Array(
            this.set_count,
            Struct("origin_seq" / Int64ub, "timestamp" / Int64ub, "messages" / messages, Check(_set_fits)),
        ),
        Check(_sets_ascend),
        Terminated,
    )


TopicList = Struct(
    "topic_count" / Rebuild(Int16ub, len_(this.topics)),
    "topics" / Array(this.topic_count, Topic),
)
TopicOffset = Struct("topic" / Topic, "offset" / Int64ub)

BODIES: dict[Opcode, Construct] = {
    # -- mesh v1: exactly the seed layouts ------------------------------------
    Opcode.HEARTBEAT: Struct("word" / OneOf(PaddedString(4, "ascii"), ["ping", "pong"]), Terminated),
    Opcode.SUBSCRIBE: Struct("topics" / GreedyRange(Topic), Check(len_(this.topics) >= 1), Terminated),
    Opcode.SUBSCRIBE_ACK: Struct("success" / OneOf(Int8ub, [0, 1]), Terminated),
    Opcode.UNSUBSCRIBE: Struct("topics" / GreedyRange(Topic), Check(len_(this.topics) >= 1), Terminated),
    Opcode.UNSUBSCRIBE_ACK: Struct("success" / OneOf(Int8ub, [0, 1]), Terminated),
    Opcode.FORWARD: Struct(
        "topic_count" / Rebuild(Int8ub, len_(this.topics)),
        Check(this.topic_count >= 1),
        "topics" / Array(this.topic_count, Topic),
        "data" / Prefixed(Int32ub, GreedyBytes),
        Terminated,
    ),
    # -- mesh v2 ---------------------------------------------------------------
    Opcode.MESH_HELLO: Struct(
        "hub_id" / Int64ub,
        Check(this.hub_id >= 1),
        "position_count" / Rebuild(Int16ub, len_(this.positions)),
        "positions" / Array(this.position_count, Struct("origin" / Int64ub, "seq" / Int64ub)),
        Check(_positions_distinct),
        Terminated,
    ),
    Opcode.FORWARD_BATCH: _forward_batch(MessageSet),
    # mesh v2.1: the same, every set's MessageSet preceded by its headers block
    Opcode.FORWARD_BATCH_HEADERS: _forward_batch(HeaderedMessageSet),
    Opcode.FORWARD_ACK: Struct("origin" / Int64ub, Check(this.origin >= 1), "seq" / Int64ub, Terminated),
    # -- mesh v3 ---------------------------------------------------------------
    Opcode.LINK_STATE: Struct(
        "hub_id" / Int64ub,
        Check(this.hub_id >= 1),
        "boot" / Int64ub,
        "seq" / Int64ub,
        "peer_key" / Topic,
        "addr_count" / Rebuild(Int8ub, len_(this.addrs)),
        "addrs" / Array(this.addr_count, Str8),
        "neighbor_count" / Rebuild(Int16ub, len_(this.neighbors)),
        "neighbors" / Array(this.neighbor_count, Int64ub),
        Check(_neighbors_valid),
        # Mesh 3.1: one u16 cost per neighbour (100 µs units), or nothing (3.0).
        "costs"
        / ExprAdapter(
            Optional(Array(this.neighbor_count, Int16ub)),
            decoder=lambda obj, ctx: list(obj or ()),
            encoder=lambda obj, ctx: obj or None,
        ),
        Terminated,
    ),
    Opcode.ROUTED_SETS: _routed_sets(MessageSet),
    # mesh v3.1: the same, every set's MessageSet preceded by its headers block
    Opcode.ROUTED_SETS_HEADERS: _routed_sets(HeaderedMessageSet),
    Opcode.INTEREST: Struct("key" / Topic, *PatternList.subcons, Terminated),
    Opcode.WATCH: Struct("key" / Topic, "on" / OneOf(Int8ub, [0, 1]), "version" / Int32ub, Terminated),
    Opcode.INTEREST_SET: Struct(
        "key" / Topic,
        "full" / OneOf(Int8ub, [0, 1]),
        "version" / Int32ub,
        "entry_count" / Rebuild(Int16ub, len_(this.entries)),
        "entries" / Array(this.entry_count, Struct("hub" / Int64ub, *PatternList.subcons)),
        Check(_entries_distinct),
        Terminated,
    ),
    Opcode.JOINED: Struct("key" / Topic, "since" / Int64ub, Terminated),
    Opcode.HEADS: Struct(
        "head_count" / Rebuild(Int16ub, len_(this.heads)),
        Check(this.head_count >= 1),
        "heads" / Array(this.head_count, Struct("topic" / Topic, "last" / Int64ub, Check(this.last >= 1))),
        Terminated,
    ),
    Opcode.SYNC: Struct("key" / Topic, *PatternList.subcons, Check(this.pattern_count >= 1), Terminated),
    Opcode.REPAIR: Struct(
        "topic" / Topic, "after" / Int64ub, "upto" / Int64ub, Check(this.upto > this.after), Terminated
    ),
    Opcode.REPAIRED: Struct(
        "topic" / Topic, "upto" / Int64ub, Check(this.upto >= 1), "missing" / Int64ub, Terminated
    ),
    # -- client protocol -------------------------------------------------------
    Opcode.HELLO: Struct(
        "version" / Int16ub,
        "client_name" / Str8,
        "token" / Prefixed(Int16ub, GreedyBytes),
        Terminated,
    ),
    Opcode.WELCOME: Struct(
        "version" / Int16ub,
        "hub_id" / Int64ub,
        "max_body" / Int32ub,
        "heartbeat_ms" / Int32ub,
        "hub_name" / Str8,
        Terminated,
    ),
    Opcode.PUBLISH: Struct(
        "producer_id" / Int64ub,
        "sequence" / Int64ub,
        "flags" / Int8ub,
        Check(this.flags <= 3),  # bit 0 ACK, bit 1 HEADERS; bits 2-7 reserved, must be 0
        "set_count" / Rebuild(Int16ub, len_(this.sets)),
        Check(this.set_count >= 1),
        "sets" / Array(this.set_count, IfThenElse(this.flags & 2, HeaderedMessageSet, MessageSet)),
        Terminated,
    ),
    Opcode.PUBLISH_ACK: Struct(
        "producer_id" / Int64ub,
        "sequence" / Int64ub,
        "status" / Int8ub,
        "timestamp" / Int64ub,
        "range_count" / Rebuild(Int16ub, len_(this.ranges)),
        "ranges"
        / Array(
            this.range_count,
            Struct("topic" / Topic, "first_offset" / Int64ub, "num" / Int32ub),
        ),
        Terminated,
    ),
    Opcode.SUB: Struct(
        "sub_id" / Int32ub,
        "start" / Int8ub,
        "start_value" / Int64ub,
        "ack_mode" / Int8ub,
        "policy" / Int8ub,
        "credit" / Int32ub,
        "ack_wait_ms" / Int32ub,
        "durable" / Str8,
        "group" / Str8,
        "pattern_count" / Rebuild(Int16ub, len_(this.patterns)),
        Check(this.pattern_count >= 1),
        "patterns" / Array(this.pattern_count, Topic),
        "offset_count" / Rebuild(Int16ub, len_(this.offsets)),
        "offsets" / Array(this.offset_count, TopicOffset),
        # Client protocol 3: a SUB may end here, or say what follows: ``parts`` bit 0 a key
        # filter, bit 1 a tag query (wire.query); then 1..3.
        "parts" / Optional(Int8ub),
        Check(lambda ctx: ctx.parts is None or 1 <= ctx.parts <= 3),
        "key_filter" / If(lambda ctx: (ctx.parts or 0) & 1, KeyFilter),
        "query" / If(lambda ctx: (ctx.parts or 0) & 2, Str16),
        Terminated,
    ),
    Opcode.KEY_FILTER: Struct("sub_id" / Int32ub, "op" / OneOf(Int8ub, [1, 2, 3]), "filter" / KeyFilter, Terminated),
    Opcode.SUB_OK: Struct(
        "sub_id" / Int32ub,
        "offset_count" / Rebuild(Int16ub, len_(this.offsets)),
        "offsets" / Array(this.offset_count, TopicOffset),
        Terminated,
    ),
    Opcode.UNSUB: Struct("sub_id" / Int32ub, Terminated),
    Opcode.SUB_UPDATE: Struct(
        "sub_id" / Int32ub,
        "op" / OneOf(Int8ub, [1, 2]),
        "pattern_count" / Rebuild(Int16ub, len_(this.patterns)),
        Check(this.pattern_count >= 1),
        "patterns" / Array(this.pattern_count, Topic),
        Terminated,
    ),
    Opcode.DELIVER: Struct("sub_id" / Int32ub, "batch" / RecordBatch, Terminated),
    Opcode.DELIVER_HEADERS: Struct("sub_id" / Int32ub, "headers" / HeaderBlock, "batch" / RecordBatch, Terminated),
    Opcode.ACK: Struct(
        "sub_id" / Int32ub,
        "range_count" / Rebuild(Int16ub, len_(this.ranges)),
        Check(this.range_count >= 1),
        "ranges"
        / Array(
            this.range_count,
            Struct("topic" / Topic, "first_offset" / Int64ub, "last_offset" / Int64ub),
        ),
        Terminated,
    ),
    Opcode.CREDIT: Struct("sub_id" / Int32ub, "credit" / Int32ub, Terminated),
    Opcode.GAP: Struct(
        "sub_id" / Int32ub,
        "topic" / Topic,
        "first_offset" / Int64ub,
        "dropped" / Int64ub,
        Terminated,
    ),
    Opcode.SUB_END: Struct("sub_id" / Int32ub, "code" / Int16ub, "reason" / Str16, Terminated),
    Opcode.ERROR: Struct("code" / Int16ub, "ref" / Int64ub, "reason" / Str16, Terminated),
    Opcode.STATUS: Struct(Terminated),
    Opcode.STATUS_REPLY: Struct("document" / Prefixed(Int32ub, GreedyBytes), Terminated),
    Opcode.COMMIT: Struct("sub_id" / Int32ub, "ref" / Int32ub, Terminated),
    Opcode.COMMITTED: Struct(
        "sub_id" / Int32ub,
        "ref" / Int32ub,
        "position_count" / Rebuild(Int16ub, len_(this.positions)),
        "positions" / Array(this.position_count, TopicOffset),
        Terminated,
    ),
    # -- log segments ----------------------------------------------------------
    Opcode.SEGMENT_HEADER: Struct(
        "magic" / OneOf(Bytes(4), [b"P0SL"]),
        "version" / Int16ub,
        "base_offset" / Int64ub,
        "created" / Int64ub,
        "topic" / Topic,
        Terminated,
    ),
    Opcode.LOG_BATCH: _log_batch(),
    # segment version 2: the same, with the set's headers block before the batch
    Opcode.LOG_BATCH_HEADERS: _log_batch("headers" / HeaderBlock),
}

#: ROUTED carries one whole control frame (its 5-byte header, then the body), so it is
#: described after the table it refers to.
BODIES[Opcode.ROUTED] = Struct(
    *_ROUTE,
    "src" / Int64ub,
    Check(this.src >= 1),
    "frame"
    / Struct(
        "opcode" / OneOf(Int8ub, sorted(int(op) for op in ROUTED_CONTROL_OPCODES)),
        "body" / Prefixed(Int32ub, Switch(this.opcode, {int(op): BODIES[op] for op in ROUTED_CONTROL_OPCODES})),
    ),
    Terminated,
)
