"""Build every example frame of docs/protocol.md from the wire encoders, verify, render.

Regenerate the spec after changing a frame:
    .venv/bin/python docs/tools/protocol_examples.py --render > docs/protocol.md
tests/test_protocol_doc.py then proves every example decodes and re-encodes exactly.
"""
from __future__ import annotations

import struct
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from wire import *
from wire.frames import SEGMENT_MAGIC
from wire.frames.mesh_v3 import routed_sets_frame

TS = 1_700_000_000_000_000          # 2023-11-14T22:13:20Z in µs
EXAMPLES: dict[str, tuple[str, str]] = {}   # key -> (frame name, markdown block)
INVALID: dict[str, str] = {}

def b8(v): return struct.pack(">B", v)
def b16(v): return struct.pack(">H", v)
def b32(v): return struct.pack(">I", v)
def b64(v): return struct.pack(">Q", v)

class S:
    """A segment: some byte groups and a comment."""
    def __init__(self, groups, comment):
        self.groups = [g for g in groups if g]
        self.comment = comment
    @property
    def raw(self): return b"".join(self.groups)

def hdr(op, n): return S([b8(op), b32(n)], f"header: opcode {op} = 0x{op:02x} ({Opcode(op).name}), body length {n}")
def u8(v, c): return S([b8(v)], c)
def u16(v, c): return S([b16(v)], c)
def u32(v, c): return S([b32(v)], c)
def u64(v, c): return S([b64(v)], c)
def topic(t, c="topic"):
    r = t.encode(); return S([b8(len(r)), r], f'{c} "{t}" (length {len(r)})')
def str8(t, c):
    r = t.encode()
    return S([b8(len(r)), r], f'{c} "{t}" (str8, length {len(r)})' if r else f"{c} (str8, length 0)")
def str16(t, c):
    r = t.encode(); return S([b16(len(r)), r], f'{c} "{t}" (str16, length {len(r)})')
def record(i, key, data):
    return S([b16(len(key)), b32(len(data)), key, data],
             f"record {i}: key_len {len(key)}, data_len {len(data)}" + (f", key {key!r}" if key else "") + f", data {data!r}")
def region(records, what="records"):
    body = b"".join(encode_record(k, d) for k, d in records)
    return [S([b32(len(records)), b32(len(body))], f"record region: record_count {len(records)}, records_len {len(body)}")] + \
        [record(i, k, d) for i, (k, d) in enumerate(records)]
def headers_block(entries, what="headers"):
    """A headers block from (name, value) pairs: str values are text (kind 0), bytes values bytes (kind 1)."""
    segs = []
    for name, value in entries:
        raw = value.encode() if isinstance(value, str) else value
        kind = 0 if isinstance(value, str) else 1
        shown = f'"{value}"' if kind == 0 else repr(value)
        n = name.encode()
        segs.append(S([b8(len(n)), n, b8(kind), b16(len(raw)), raw],
                      f'header "{name}": name_len {len(n)}, kind {kind} = {"text" if kind == 0 else "bytes"}, '
                      f"value_len {len(raw)}, value {shown}"))
    size = sum(len(x.raw) for x in segs)
    return [u16(size, f"{what}: block_len {size}" + (" (no headers)" if not size else ""))] + segs
def message_set(topics, records):
    return [u8(len(topics), f"MessageSet: topic_count {len(topics)}")] + [topic(t) for t in topics] + region(records)
def record_batch(rb_topic, base, ts, origin, oseq, records):
    return [topic(rb_topic, "RecordBatch: topic"), u64(base, f"base_offset {base}"), u64(ts, f"timestamp {ts} µs"),
            u64(origin, f"origin hub id {origin}"), u64(oseq, f"origin_seq {oseq}")] + region(records)

def render(segs, name, oneline=False):
    if oneline:
        return "```hex\n# " + name + "\n" + " ".join(" ".join(g.hex() for g in s.groups) for s in segs) + "\n```"
    lines = []
    for s in segs:
        # long groups are wrapped at 32 bytes
        parts = []
        for g in s.groups:
            h = g.hex()
            parts.extend(h[i:i+64] for i in range(0, len(h), 64)) if len(h) > 64 else parts.append(h)
        cur = []
        chunks = []
        for p in parts:
            if cur and len(" ".join(cur + [p])) > 64:
                chunks.append(" ".join(cur)); cur = []
            cur.append(p)
        if cur: chunks.append(" ".join(cur))
        for i, c in enumerate(chunks):
            lines.append((c, s.comment if i == 0 else "…"))
    w = max(len(c) for c, _ in lines)
    return "```hex\n# " + name + "\n" + "\n".join(f"{c:<{w}}  # {m}" for c, m in lines) + "\n```"

def check_decode(data: bytes, frame):
    for split in ("whole", "bytes"):
        d = FrameDecoder()
        if split == "whole": d.feed(data)
        else:
            for i in range(len(data)): d.feed(data[i:i+1])
        frames = list(d); d.close()
        assert frames == [frame], (frames, frame)
        assert frames[0].encode() == data

def ex(key, frame, segs, oneline=False, bodysegs=None):
    enc = frame.encode()
    mine = b"".join(s.raw for s in segs)
    assert mine == enc, f"{key}: my breakdown\n{mine.hex()}\n!= encoder\n{enc.hex()}"
    check_decode(enc, frame)
    EXAMPLES[key] = (frame.name, render(segs, frame.name, oneline), enc)
    return enc

def ex_frame(key, frame, body):
    """segs = header + body segments (length computed)."""
    n = sum(len(s.raw) for s in body)
    return ex(key, frame, [hdr(frame.OPCODE, n)] + body)

def invalid(key, data: bytes, note: str):
    d = FrameDecoder()
    try:
        d.feed(data); list(d); d.close()
    except RemoteProtocolError as e:
        shown = bytes.fromhex("".join(l.split("#")[0] for l in note.splitlines()).replace(" ", ""))
        assert shown == data, (key, shown.hex(), data.hex())
        INVALID[key] = (e, f"```hex\n# invalid: {e.code.name} at byte {e.offset}\n{note}\n```", data)
        return e
    raise AssertionError(f"{key} decoded fine")

# ---------------- mesh v1 ----------------
ex_frame("ping", PING, [S([b"ping"], 'body: ASCII "ping"')])
ex_frame("pong", PONG, [S([b"pong"], 'body: ASCII "pong"')])
g1 = ex("golden_sub", Subscribe(topics=("topic_1", "topic_2")),
        [hdr(2, 16), topic("topic_1"), topic("topic_2")], oneline=True)
assert g1.hex(" ") and g1 == bytes.fromhex("02 00000010 07 746f7069635f31 07 746f7069635f32".replace(" ", ""))
ex_frame("suback", SubscribeAck(success=True), [u8(1, "success: 1 = noted")])
ex_frame("suback0", SubscribeAck(success=False), [u8(0, "success: 0 = refused")])
ex_frame("unsub_mesh", Unsubscribe(topics=("topic_1",)), [topic("topic_1")])
ex_frame("unsuback", UnsubscribeAck(success=True), [u8(1, "success: 1 = removed")])
g2 = ex("golden_fwd", Forward(topics=("topic_1", "topic_2"), data=b"hello"),
        [hdr(6, 26), u8(2, "topic count"), topic("topic_1"), topic("topic_2"), u32(5, "data length"), S([b"hello"], "data")],
        oneline=True)
assert g2 == bytes.fromhex("06 0000001a 02 07 746f7069635f31 07 746f7069635f32 00000005 68656c6c6f".replace(" ", ""))
ex_frame("sub_pattern_mesh", Subscribe(topics=("orders.*", "audit.>")), [topic("orders.*", "pattern"), topic("audit.>", "pattern")])

# ---------------- mesh v2 ----------------
ex_frame("mesh_hello", MeshHello(hub_id=7, positions=(ResumePosition(origin=3, seq=41), ResumePosition(origin=9, seq=1200))),
         [u64(7, "hub_id 7 (the sender)"), u16(2, "position_count 2"),
          u64(3, "position 0: origin 3"), u64(41, "           last stored seq 41 -> send from 42"),
          u64(9, "position 1: origin 9"), u64(1200, "           last stored seq 1200")])
ex_frame("mesh_hello_empty", MeshHello(hub_id=9), [u64(9, "hub_id 9"), u16(0, "position_count 0: nothing stored yet")])
fb = ForwardBatch(origin=3, sets=(
    ForwardSet(origin_seq=42, timestamp=TS, messages=MessageSet.build(["orders.eu"], [(b"k1", b"a"), (b"", b"b")])),
    ForwardSet(origin_seq=44, timestamp=TS + 250, messages=MessageSet.build(["orders.eu", "audit"], [(b"", b"c")])),
))
ex_frame("fwd_batch", fb,
         [u64(3, "origin hub id 3"), u16(2, "set_count 2"),
          u64(42, "set 0: origin_seq 42 (records get 42, 43)"), u64(TS, f"set 0: timestamp {TS} µs")]
         + message_set(["orders.eu"], [(b"k1", b"a"), (b"", b"b")])
         + [u64(44, "set 1: origin_seq 44"), u64(TS + 250, f"set 1: timestamp {TS + 250} µs")]
         + message_set(["orders.eu", "audit"], [(b"", b"c")]))
TRACE_HEADERS = (("trace", "4bf92f35"), ("sig", b"\x01\x02"))
TRACE_BLOCK = encode_headers(dict(TRACE_HEADERS))
fbh = ForwardBatchHeaders(origin=3, sets=(
    ForwardSet(origin_seq=45, timestamp=TS + 500,
               messages=MessageSet.build(["orders.eu"], [(b"", b"d")], headers=TRACE_BLOCK)),
    ForwardSet(origin_seq=46, timestamp=TS + 600, messages=MessageSet.build(["orders.eu"], [(b"", b"e")])),
))
ex_frame("fwd_batch_headers", fbh,
         [u64(3, "origin hub id 3"), u16(2, "set_count 2"),
          u64(45, "set 0: origin_seq 45"), u64(TS + 500, f"set 0: timestamp {TS + 500} µs")]
         + headers_block(TRACE_HEADERS, "set 0 headers") + message_set(["orders.eu"], [(b"", b"d")])
         + [u64(46, "set 1: origin_seq 46"), u64(TS + 600, f"set 1: timestamp {TS + 600} µs")]
         + headers_block((), "set 1 headers") + message_set(["orders.eu"], [(b"", b"e")]))
ex_frame("fwd_ack", ForwardAck(origin=3, seq=44), [u64(3, "origin 3"), u64(44, "seq 44: everything from origin 3 up to 44 is stored")])

# ---------------- mesh v3 ----------------
def route(ttl, dests):
    return [u8(ttl, f"ttl {ttl}: hops it may take after the receiver"), u16(len(dests), f"dest_count {len(dests)}")] + \
        [u64(d, f"dests[{i}]: hub {d}") for i, d in enumerate(dests)]
def pattern_list(patterns, what="pattern"):
    return [u16(len(patterns), f"pattern_count {len(patterns)}")] + [topic(p, what) for p in patterns]
ex_frame("link_state", LinkState(hub_id=7, boot=TS, seq=3, peer_key="12D3KooWExamplePeerOfHub7",
                                 addrs=("/ip4/10.0.0.7/tcp/4001",), neighbors=(3, 9)),
         [u64(7, "hub_id 7 (whose advertisement this is)"), u64(TS, f"boot {TS} µs: when hub 7 started"),
          u64(3, "seq 3: hub 7's third advertisement"), str8("12D3KooWExamplePeerOfHub7", "peer_key (made up)"),
          u8(1, "addr_count 1"), str8("/ip4/10.0.0.7/tcp/4001", "addrs[0]"),
          u16(2, "neighbor_count 2"), u64(3, "neighbors[0]: hub 3"), u64(9, "neighbors[1]: hub 9")])
ex_frame("link_state_costs", LinkState(hub_id=7, boot=TS, seq=3, peer_key="12D3KooWExamplePeerOfHub7",
                                       addrs=("/ip4/10.0.0.7/tcp/4001",), neighbors=(3, 9), costs=(8, 0)),
         [u64(7, "hub_id 7 (whose advertisement this is)"), u64(TS, f"boot {TS} µs: when hub 7 started"),
          u64(3, "seq 3: hub 7's third advertisement"), str8("12D3KooWExamplePeerOfHub7", "peer_key (made up)"),
          u8(1, "addr_count 1"), str8("/ip4/10.0.0.7/tcp/4001", "addrs[0]"),
          u16(2, "neighbor_count 2"), u64(3, "neighbors[0]: hub 3"), u64(9, "neighbors[1]: hub 9"),
          u16(8, "costs[0]: 8 x 100 µs = 0.8 ms to hub 3"), u16(0, "costs[1]: 0, not timed by hub 7")])
rs = RoutedSets(ttl=32, dests=(9, 12), origin=3, sets=(
    RoutedSet(origin_seq=42, timestamp=TS, messages=MessageSet.build(["orders.eu"], [(b"k1", b"a"), (b"", b"b")]), prevs=(40,)),
    RoutedSet(origin_seq=44, timestamp=TS + 250, messages=MessageSet.build(["orders.eu", "audit"], [(b"", b"c")]), prevs=(43, 0)),
))
ex_frame("routed_sets", rs,
         route(32, (9, 12)) + [u64(3, "origin hub id 3"), u16(2, "set_count 2"),
          u64(42, "set 0: origin_seq 42 (records get 42, 43)"), u64(TS, f"set 0: timestamp {TS} µs")]
         + message_set(["orders.eu"], [(b"k1", b"a"), (b"", b"b")])
         + [u64(40, "set 0: prevs[orders.eu] 40: origin 3's previous set on orders.eu ended at 40"),
            u64(44, "set 1: origin_seq 44"), u64(TS + 250, f"set 1: timestamp {TS + 250} µs")]
         + message_set(["orders.eu", "audit"], [(b"", b"c")])
         + [u64(43, "set 1: prevs[orders.eu] 43 (set 0 ended there)"), u64(0, "set 1: prevs[audit] 0: origin 3's first set on audit")])
assert routed_sets_frame(32, (9, 12), rs.payload()) == rs.encode()
rsh = RoutedSetsHeaders(ttl=32, dests=(9,), origin=3, sets=(
    RoutedSet(origin_seq=45, timestamp=TS + 500, messages=MessageSet.build(["orders.eu"], [(b"", b"d")], headers=TRACE_BLOCK),
              prevs=(44,)),
    RoutedSet(origin_seq=46, timestamp=TS + 600, messages=MessageSet.build(["orders.eu"], [(b"", b"e")]), prevs=(45,)),
))
ex_frame("routed_sets_headers", rsh,
         route(32, (9,)) + [u64(3, "origin hub id 3"), u16(2, "set_count 2"),
          u64(45, "set 0: origin_seq 45"), u64(TS + 500, f"set 0: timestamp {TS + 500} µs")]
         + headers_block(TRACE_HEADERS, "set 0 headers") + message_set(["orders.eu"], [(b"", b"d")])
         + [u64(44, "set 0: prevs[orders.eu] 44"),
            u64(46, "set 1: origin_seq 46"), u64(TS + 600, f"set 1: timestamp {TS + 600} µs")]
         + headers_block((), "set 1 headers") + message_set(["orders.eu"], [(b"", b"e")])
         + [u64(45, "set 1: prevs[orders.eu] 45")])
interest = Interest(key="orders", patterns=("orders.*", "orders.eu"))
ex_frame("routed", Routed(ttl=32, dests=(5, 9), src=12, inner=interest),
         route(32, (5, 9)) + [u64(12, "src: hub 12 (the subscriber hub)"),
                              hdr(Opcode.INTEREST, len(interest.encode()) - 5), topic("orders", "key")]
         + pattern_list(["orders.*", "orders.eu"]))
ex_frame("interest", Interest(key="audit"), [topic("audit", "key"), u16(0, "pattern_count 0: nothing under audit any more")])
ex_frame("watch", Watch(key="orders", on=True, version=0),
         [topic("orders", "key"), u8(1, "on 1: watch (0 = stop watching)"), u32(0, "version 0: I hold none, send everything")])
ex_frame("interest_set", InterestSet(key="orders", full=True, version=1000, entries=(
    InterestEntry(hub=12, patterns=("orders.*", "orders.eu")), InterestEntry(hub=15, patterns=("orders.>",)))),
         [topic("orders", "key"), u8(1, "full 1: every hub's patterns under the key"), u32(1000, "version 1000"),
          u16(2, "entry_count 2"), u64(12, "entries[0].hub 12")] + pattern_list(["orders.*", "orders.eu"])
         + [u64(15, "entries[1].hub 15")] + pattern_list(["orders.>"]))
ex_frame("interest_set_change", InterestSet(key="orders", full=False, version=1001, entries=(InterestEntry(hub=15, patterns=()),)),
         [topic("orders", "key"), u8(0, "full 0: changes only"), u32(1001, "version 1001: the next after 1000"),
          u16(1, "entry_count 1"), u64(15, "entries[0].hub 15"), u16(0, "pattern_count 0: hub 15 wants nothing under orders now")])
ex_frame("joined", Joined(key="orders", since=43),
         [topic("orders", "key"), u64(43, "since 43: your sets under orders start after my sequence 43")])
ex_frame("heads", Heads(heads=(Head(topic="orders.eu", last=44), Head(topic="audit", last=44))),
         [u16(2, "head_count 2"), topic("orders.eu", "heads[0].topic"), u64(44, "heads[0].last 44"),
          topic("audit", "heads[1].topic"), u64(44, "heads[1].last 44")])
ex_frame("sync", Sync(key="orders", patterns=("orders.*",)), [topic("orders", "key")] + pattern_list(["orders.*"]))
ex_frame("repair", Repair(topic="orders.eu", after=40, upto=43),
         [topic("orders.eu"), u64(40, "after 40: I hold your orders.eu chain up to 40"), u64(43, "upto 43: resend through 43")])
ex_frame("repaired", Repaired(topic="orders.eu", upto=43, missing=2),
         [topic("orders.eu"), u64(43, "upto 43: everything I still have up to 43 was resent"),
          u64(2, "missing 2: two messages of the range are gone here")])

# ---------------- client ----------------
ex_frame("hello", Hello(version=1, client_name="demo", token=b"alice:s3cret"),
         [u16(1, "version 1"), str8("demo", "client_name"),
          S([b16(12), b"alice:s3cret"], 'token (u16 length 12) b"alice:s3cret": user alice, secret s3cret')])
ex_frame("hello_anon", Hello(), [u16(3, "version 3"), str8("", "client_name"), S([b16(0)], "token: length 0 (none)")])
ex_frame("welcome", Welcome(version=1, hub_id=7, max_body=1 << 20, heartbeat_ms=5000, hub_name="hub-a"),
         [u16(1, "version 1"), u64(7, "hub_id 7"), u32(1 << 20, "max_body 1048576 (1 MiB)"),
          u32(5000, "heartbeat_ms 5000"), str8("hub-a", "hub_name")])
pub = Publish(producer_id=77, sequence=1, flags=PublishFlags.ACK, sets=(
    MessageSet.build(["orders.eu"], [(b"o-1", b"hello"), (b"", b"world")]),
    MessageSet.build(["orders.eu", "audit"], [(b"", b"x")]),
))
ex_frame("publish", pub,
         [u64(77, "producer_id 77"), u64(1, "sequence 1"), u8(1, "flags: ACK (bit 0)"), u16(2, "set_count 2")]
         + message_set(["orders.eu"], [(b"o-1", b"hello"), (b"", b"world")])
         + message_set(["orders.eu", "audit"], [(b"", b"x")]))
pub_min = Publish(sets=(MessageSet.build(["t"], [(b"", b"")]),))
ex_frame("publish_min", pub_min,
         [u64(0, "producer_id 0 (anonymous)"), u64(0, "sequence 0"), u8(0, "flags: none"), u16(1, "set_count 1")]
         + message_set(["t"], [(b"", b"")]))
pub_h = Publish(producer_id=77, sequence=2, flags=PublishFlags.ACK | PublishFlags.HEADERS, sets=(
    MessageSet.build(["orders.eu"], [(b"o-2", b"paid")], headers=TRACE_BLOCK),
    MessageSet.build(["audit"], [(b"", b"y")]),
))
ex_frame("publish_headers", pub_h,
         [u64(77, "producer_id 77"), u64(2, "sequence 2"), u8(3, "flags: ACK (bit 0) | HEADERS (bit 1)"),
          u16(2, "set_count 2")]
         + headers_block(TRACE_HEADERS, "set 0 headers") + message_set(["orders.eu"], [(b"o-2", b"paid")])
         + headers_block((), "set 1 headers") + message_set(["audit"], [(b"", b"y")]))
ex_frame("publish_ack", PublishAck(producer_id=77, sequence=1, status=AckStatus.STORED, timestamp=TS,
                                   ranges=(OffsetRange(topic="orders.eu", first_offset=100, num=3),
                                           OffsetRange(topic="audit", first_offset=7, num=1))),
         [u64(77, "producer_id 77"), u64(1, "sequence 1"), u8(0, "status 0 = STORED"), u64(TS, f"timestamp {TS} µs"),
          u16(2, "range_count 2"),
          topic("orders.eu", "range 0: topic"), u64(100, "range 0: first_offset 100"), u32(3, "range 0: num 3 (offsets 100..102)"),
          topic("audit", "range 1: topic"), u64(7, "range 1: first_offset 7"), u32(1, "range 1: num 1")])
ex_frame("publish_ack_dup", PublishAck(producer_id=77, sequence=1, status=AckStatus.DUPLICATE, timestamp=TS),
         [u64(77, "producer_id 77"), u64(1, "sequence 1"), u8(1, "status 1 = DUPLICATE"), u64(TS, f"timestamp {TS} µs"),
          u16(0, "range_count 0")])
ex_frame("sub_min", Sub(sub_id=1, patterns=("orders.*",)),
         [u32(1, "sub_id 1"), u8(0, "start 0 = LATEST"), u64(0, "start_value 0 (unused)"), u8(0, "ack_mode 0 = NONE"),
          u8(0, "policy 0 = CANCEL"), u32(0, "credit 0 = no credit limit"), u32(0, "ack_wait_ms 0 = hub default"),
          str8("", "durable: empty = not durable"), str8("", "group: empty = no group"),
          u16(1, "pattern_count 1"), topic("orders.*", "pattern"), u16(0, "offset_count 0")])
ex_frame("sub_durable", Sub(sub_id=2, patterns=("orders.eu", "orders.us"), start=StartPosition.OFFSET, ack_mode=AckMode.EXPLICIT,
                            policy=SlowConsumerPolicy.CANCEL, credit=100, ack_wait_ms=30000, durable="billing",
                            offsets=(TopicOffset(topic="orders.eu", offset=100),)),
         [u32(2, "sub_id 2"), u8(2, "start 2 = OFFSET"), u64(0, "start_value 0 (unused for OFFSET)"), u8(1, "ack_mode 1 = EXPLICIT"),
          u8(0, "policy 0 = CANCEL"), u32(100, "credit 100"), u32(30000, "ack_wait_ms 30000"),
          str8("billing", "durable name"), str8("", "group: none"),
          u16(2, "pattern_count 2"), topic("orders.eu", "pattern"), topic("orders.us", "pattern"),
          u16(1, "offset_count 1"), topic("orders.eu", "offset 0: topic"), u64(100, "offset 0: start at 100")])
ex_frame("sub_ts", Sub(sub_id=3, patterns=("metrics.>",), start=StartPosition.TIMESTAMP, start_value=TS,
                       policy=SlowConsumerPolicy.DROP_OLDEST, group="dash"),
         [u32(3, "sub_id 3"), u8(3, "start 3 = TIMESTAMP"), u64(TS, f"start_value {TS} µs"), u8(0, "ack_mode 0 = NONE"),
          u8(1, "policy 1 = DROP_OLDEST"), u32(0, "credit 0"), u32(0, "ack_wait_ms 0"),
          str8("", "durable: none"), str8("dash", "group"),
          u16(1, "pattern_count 1"), topic("metrics.>", "pattern"), u16(0, "offset_count 0")])
def key_filter_segs(f, what="key filter"):
    segs = [u8(int(f.all), f"{what}: all {int(f.all)}" + (" (every key)" if f.all else "")), u16(len(f.keys), f"key_count {len(f.keys)}")]
    segs += [S([b16(len(k)), k], f"key {k!r} (length {len(k)})" + (": records without a key" if not k else "")) for k in f.keys]
    segs += [u16(len(f.prefixes), f"prefix_count {len(f.prefixes)}")]
    segs += [S([b16(len(p)), p], f"prefix {p!r} (length {len(p)})") for p in f.prefixes]
    return segs
ray = KeyFilter(keys=(b"actor-7", b"actor-9"), prefixes=(b"job-",))
ex_frame("sub_keys", Sub(sub_id=4, patterns=("ray.actors",), key_filter=ray),
         [u32(4, "sub_id 4"), u8(0, "start 0 = LATEST"), u64(0, "start_value 0 (unused)"), u8(0, "ack_mode 0 = NONE"),
          u8(0, "policy 0 = CANCEL"), u32(0, "credit 0 = no credit limit"), u32(0, "ack_wait_ms 0 = hub default"),
          str8("", "durable: empty = not durable"), str8("", "group: empty = no group"),
          u16(1, "pattern_count 1"), topic("ray.actors", "pattern"), u16(0, "offset_count 0"),
          u8(1, "parts 1 (version 3): a key filter follows")]
         + key_filter_segs(ray, "key filter"))
TM_QUERY = "tm.event = 'Tx' AND tx.height > 5"
ex_frame("sub_query", Sub(sub_id=5, patterns=("chain.events",), query=TM_QUERY),
         [u32(5, "sub_id 5"), u8(0, "start 0 = LATEST"), u64(0, "start_value 0 (unused)"), u8(0, "ack_mode 0 = NONE"),
          u8(0, "policy 0 = CANCEL"), u32(0, "credit 0 = no credit limit"), u32(0, "ack_wait_ms 0 = hub default"),
          str8("", "durable: empty = not durable"), str8("", "group: empty = no group"),
          u16(1, "pattern_count 1"), topic("chain.events", "pattern"), u16(0, "offset_count 0"),
          u8(2, "parts 2 (version 3): a tag query follows"), str16(TM_QUERY, "query")])
ex_frame("key_filter_add", KeyFilterUpdate(sub_id=4, op=KeyOp.ADD, filter=KeyFilter(keys=(b"actor-12",))),
         [u32(4, "sub_id 4"), u8(1, "op 1 = ADD")] + key_filter_segs(KeyFilter(keys=(b"actor-12",)), "change"))
ex_frame("key_filter_all", KeyFilterUpdate(sub_id=4, op=KeyOp.ADD, filter=KeyFilter(all=True)),
         [u32(4, "sub_id 4"), u8(1, "op 1 = ADD")] + key_filter_segs(KeyFilter(all=True), "change"))
ex_frame("sub_ok", SubOk(sub_id=2, offsets=(TopicOffset(topic="orders.eu", offset=100), TopicOffset(topic="orders.us", offset=0))),
         [u32(2, "sub_id 2"), u16(2, "offset_count 2"),
          topic("orders.eu", "offset 0: topic"), u64(100, "offset 0: next offset 100"),
          topic("orders.us", "offset 1: topic"), u64(0, "offset 1: next offset 0")])
ex_frame("unsub", Unsub(sub_id=2), [u32(2, "sub_id 2")])
ex_frame("sub_update", SubUpdate(sub_id=1, op=UpdateOp.ADD, patterns=("audit",)),
         [u32(1, "sub_id 1"), u8(1, "op 1 = ADD"), u16(1, "pattern_count 1"), topic("audit", "pattern")])
rb = RecordBatch(topic="orders.eu", base_offset=100, timestamp=TS, origin=7, origin_seq=42, count=2,
                 records=encode_record(b"o-1", b"hello") + encode_record(b"", b"world"))
deliver_bytes = ex_frame("deliver", Deliver(sub_id=1, batch=rb),
         [u32(1, "sub_id 1")] + record_batch("orders.eu", 100, TS, 7, 42, [(b"o-1", b"hello"), (b"", b"world")]))
enc_batch = rb.encode()
assert deliver_prefix(1, len(enc_batch)) + enc_batch == deliver_bytes
assert deliver_prefix(9, len(enc_batch)) + enc_batch == Deliver(sub_id=9, batch=rb).encode()
rb_h = RecordBatch(topic="orders.eu", base_offset=102, timestamp=TS + 10, origin=7, origin_seq=44, count=1,
                   records=encode_record(b"o-2", b"paid"), headers=TRACE_BLOCK)
deliver_h_bytes = ex_frame("deliver_headers", DeliverHeaders(sub_id=1, batch=rb_h),
         [u32(1, "sub_id 1")] + headers_block(TRACE_HEADERS)
         + record_batch("orders.eu", 102, TS + 10, 7, 44, [(b"o-2", b"paid")]))
assert deliver_prefix(1, len(TRACE_BLOCK) + len(rb_h.encode()), headers=True) + TRACE_BLOCK + rb_h.encode() == deliver_h_bytes
ex_frame("ack", Ack(sub_id=2, ranges=(AckRange(topic="orders.eu", first_offset=100, last_offset=101),)),
         [u32(2, "sub_id 2"), u16(1, "range_count 1"), topic("orders.eu", "range 0: topic"),
          u64(100, "range 0: first_offset 100"), u64(101, "range 0: last_offset 101 (inclusive)")])
ex_frame("credit", Credit(sub_id=2, credit=100), [u32(2, "sub_id 2"), u32(100, "credit: 100 more messages")])
ex_frame("gap", Gap(sub_id=3, topic="metrics.cpu", first_offset=5000, dropped=250),
         [u32(3, "sub_id 3"), topic("metrics.cpu"), u64(5000, "first_offset 5000"), u64(250, "dropped 250 (offsets 5000..5249)")])
ex_frame("sub_end", SubEnd(sub_id=3, code=ErrorCode.OUT_OF_CAPACITY, reason="too slow"),
         [u32(3, "sub_id 3"), u16(9, "code 9 = OUT_OF_CAPACITY"), str16("too slow", "reason")])
ex_frame("sub_end_unsub", SubEnd(sub_id=2, code=ErrorCode.UNSUBSCRIBED),
         [u32(2, "sub_id 2"), u16(10, "code 10 = UNSUBSCRIBED"), str16("", "reason")])
ex_frame("error", Error(code=ErrorCode.INVALID_TOPIC, ref=5, reason="wildcard in topic"),
         [u16(6, "code 6 = INVALID_TOPIC"), u64(5, "ref 5 (the PUBLISH sequence)"), str16("wildcard in topic", "reason")])
ex_frame("commit", Commit(sub_id=2, ref=7), [u32(2, "sub_id 2"), u32(7, "ref 7")])
ex_frame("committed", Committed(sub_id=2, ref=7, positions=(TopicOffset(topic="orders.eu", offset=102),)),
         [u32(2, "sub_id 2"), u32(7, "ref 7"), u16(1, "position_count 1"),
          topic("orders.eu", "position 0: topic"), u64(102, "position 0: offsets below 102 acknowledged, on disk")])
ex_frame("status", Status(), [])
doc = b'{"hub":"hub-a","uptime_s":12}'
ex_frame("status_reply", StatusReply(document=doc), [S([b32(len(doc))], f"document length {len(doc)}"), S([doc], f"document {doc.decode()}")])

# ---------------- log ----------------
ex_frame("segment_header", SegmentHeader(topic="orders.eu", base_offset=100, created=TS),
         [S([SEGMENT_MAGIC], 'magic "P0SL"'), u16(2, "version 2: may hold LOG_BATCH_HEADERS"), u64(100, "base_offset 100"),
          u64(TS, f"created {TS} µs"), topic("orders.eu")])
lb = LogBatch.create(append_ts=TS + 1, producer_id=77, producer_seq=1, batch=rb, topics=("orders.eu", "audit"))
lb_bytes = ex_frame("log_batch", lb,
         [u32(lb.crc, f"crc 0x{lb.crc:08x} = zlib.crc32(body[4:])"), u64(TS + 1, f"append_ts {TS + 1} µs"),
          u64(77, "producer_id 77"), u64(1, "producer_seq 1"), u8(2, "topic_count 2: the message set went to"),
          topic("orders.eu"), topic("audit")]
         + record_batch("orders.eu", 100, TS, 7, 42, [(b"o-1", b"hello"), (b"", b"world")]))
import zlib

assert lb.crc == zlib.crc32(lb_bytes[9:])
lbh = LogBatchHeaders.create(append_ts=TS + 11, producer_id=77, producer_seq=2, batch=rb_h, topics=("orders.eu",),
                             headers=TRACE_BLOCK)
lbh_bytes = ex_frame("log_batch_headers", lbh,
         [u32(lbh.crc, f"crc 0x{lbh.crc:08x} = zlib.crc32(body[4:])"), u64(TS + 11, f"append_ts {TS + 11} µs"),
          u64(77, "producer_id 77"), u64(2, "producer_seq 2"), u8(1, "topic_count 1"), topic("orders.eu")]
         + headers_block(TRACE_HEADERS)
         + record_batch("orders.eu", 102, TS + 10, 7, 44, [(b"o-2", b"paid")]))
assert lbh.crc == zlib.crc32(lbh_bytes[9:])

# ---------------- invalid inputs ----------------
def align(rows):
    w = max(len(h) for h, _ in rows)
    return "\n".join(f"{h:<{w}}  # {c}" for h, c in rows)
bad = bytearray(lb_bytes); bad[-1] ^= 0x01   # 'world' -> 'worle'
rest = bad[9:].hex()
invalid("crc", bytes(bad), align([("41 " + bad[1:5].hex(), f"header: LOG_BATCH, body length {len(lb_bytes) - 5}"), (bad[5:9].hex(), "crc as stored"),
         (rest[:64], "rest of the body, as in the LOG_BATCH example except the last byte:"),
         *[(rest[i:min(i + 64, len(rest) - 6)], "…") for i in range(64, len(rest) - 6, 64)],
         (rest[-6:], "'worle': the last byte of 'world' flipped (64 -> 65)")]))
torn = lb_bytes[:40]
invalid("torn", torn, align([("41 " + torn[1:5].hex(), "header: LOG_BATCH, body length " + str(len(lb_bytes) - 5)),
                             (torn[5:].hex(), "only " + str(len(torn) - 5) + " body bytes reached the disk")]))
_wrap_set = MessageSet.build(["t"], [(b"", b"x"), (b"", b"y")]).encode()
_wrap_body = bytes.fromhex("0000000000000007" "0001" "ffffffffffffffff" "0000000000000000") + _wrap_set
invalid("fwd_wrap", bytes([0x11]) + len(_wrap_body).to_bytes(4, "big") + _wrap_body,
        align([("11 " + len(_wrap_body).to_bytes(4, "big").hex(), "header: FORWARD_BATCH"),
               ("0000000000000007", "origin 7"), ("0001", "set_count 1"),
               ("ffffffffffffffff", "set 0: origin_seq 2^64-1 ..."),
               ("0000000000000000", "set 0: timestamp"),
               (_wrap_set.hex(), "... and 2 records: sequence 2^64 does not exist")]))
_not_control = bytes.fromhex("20" "0001" "0000000000000009" "000000000000000c") + ForwardAck(origin=3, seq=44).encode()
invalid("routed_not_control", bytes([Opcode.ROUTED]) + len(_not_control).to_bytes(4, "big") + _not_control,
        align([("15 " + len(_not_control).to_bytes(4, "big").hex(), f"header: ROUTED, body length {len(_not_control)}"),
               ("20", "ttl 32"), ("0001", "dest_count 1"), ("0000000000000009", "dests[0]: hub 9"),
               ("000000000000000c", "src: hub 12"),
               ("12 00000010", "inner header: FORWARD_ACK, body length 16: not a routed control frame"),
               (_not_control[-16:].hex(), "(never parsed)")]))
_rs_bad = RoutedSets(ttl=1, dests=(9,), origin=3, sets=(
    RoutedSet(origin_seq=42, timestamp=TS, messages=MessageSet.build(["t"], [(b"", b"a")]), prevs=(41,)),)).encode()
_rs_bad = _rs_bad[:-8] + b64(42)
invalid("routed_sets_prev", _rs_bad,
        align([("14 " + _rs_bad[1:5].hex(), f"header: ROUTED_SETS, body length {len(_rs_bad) - 5}"),
               ("01", "ttl 1"), ("0001", "dest_count 1"), ("0000000000000009", "dests[0]: hub 9"),
               ("0000000000000003", "origin 3"), ("0001", "set_count 1"),
               ("000000000000002a", "set 0 (at byte 26): origin_seq 42"), (b64(TS).hex(), "set 0: timestamp"),
               (_rs_bad[42:-8].hex(), 'set 0: MessageSet, topic "t", one record "a"'),
               ("000000000000002a", "set 0: prevs[t] 42: not before the set's own origin_seq 42")]))
_reserved = bytearray(Publish(sequence=2, sets=(MessageSet.build(["t"], [(b"", b"")]),)).encode())
_reserved[21] = 0x04
invalid("publish_reserved_flag", bytes(_reserved), align([
    ("22 " + _reserved[1:5].hex(), "header: PUBLISH, body length 36"),
    (_reserved[5:13].hex(), "producer_id 0"), (_reserved[13:21].hex(), "sequence 2"),
    ("04", "flags: bit 2 is reserved: refused here"),
    (_reserved[22:].hex(), "(the rest of the smallest PUBLISH, never read)")]))
invalid("too_large", bytes.fromhex("02ffffffff"), align([("02 ffffffff", "SUBSCRIBE, body length 4294967295: refused at the header")]))
invalid("unknown", bytes.fromhex("0700000000"), align([("07 00000000", "opcode 7 is not assigned")]))
invalid("zero_topic", bytes.fromhex("02000000020000"), align([("02 00000002", "SUBSCRIBE, body length 2"), ("00 00", "a topic of length 0 (twice)")]))
invalid("hb_bounds", bytes.fromhex("0100000005") + b"pingx", align([("01 00000005", "HEARTBEAT with a 5-byte body: refused at the header"), ("70696e6778", "(never buffered)")]))
_dup = bytearray(DeliverHeaders(sub_id=1, batch=RecordBatch(
    topic="t", base_offset=0, timestamp=0, origin=7, origin_seq=1, count=1, records=encode_record(b"", b"x"),
    headers=encode_headers({"a": "1", "b": "2"}))).encode())
_dup[18] = ord("a")  # the second name made equal to the first
invalid("headers_duplicate", bytes(_dup), align([
    ("32 " + _dup[1:5].hex(), f"header: DELIVER_HEADERS, body length {len(_dup) - 5}"),
    (_dup[5:9].hex(), "sub_id 1"), (_dup[9:11].hex(), "headers: block_len 12"),
    (_dup[11:17].hex(), 'header "a" = "1"'),
    (_dup[17:23].hex(), 'header "a" again: refused at its first byte'),
    (_dup[23:47].hex(), "(the record batch, never read) ..."), (_dup[47:].hex(), "...")]))
invalid("trailing", bytes.fromhex("060000000f0107746f7069635f3100000001") + b"hi",
        align([("06 0000000f", "FORWARD, body length 15"), ("01", "topic count 1"), ("07 746f7069635f31", 'topic "topic_1"'),
               ("00000001", "data length 1 ..."), ("6869", "... but 2 bytes follow")]))

if __name__ == "__main__" and "--render" not in sys.argv:
    for k, (n, md, _) in EXAMPLES.items():
        print(k, n); print(md)
    for k, (e, md, _) in INVALID.items():
        print(k, e); print(md)
    print(len(EXAMPLES), "examples,", len(INVALID), "invalid;", "opcodes covered:", {EXAMPLES[k][0] for k in EXAMPLES} >= {o.name for o in Opcode})

# a whole segment file = SEGMENT_HEADER + LOG_BATCH frames
seg_file = EXAMPLES["segment_header"][2] + EXAMPLES["log_batch"][2]
_d = FrameDecoder(); _d.feed(seg_file); _fr = list(_d); _d.close()
assert [f.name for f in _fr] == ["SEGMENT_HEADER", "LOG_BATCH"]

def fill(template: str) -> str:
    import re
    used = set()
    def sub(m):
        key = m.group(1)
        used.add(key)
        if key.startswith("!"):
            return INVALID[key[1:]][1]
        return EXAMPLES[key][1]
    out = re.sub(r"^@@(!?\w+)@@$", sub, template, flags=re.M)
    missing = (set(EXAMPLES) | {"!" + k for k in INVALID}) - used
    assert not missing, f"examples not placed: {missing}"
    assert "@@" not in out
    return out


if __name__ == "__main__" and "--render" in sys.argv:
    from pathlib import Path

    sys.stdout.write(fill((Path(__file__).parent / "protocol.md.tmpl").read_text()))
