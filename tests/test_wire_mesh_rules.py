"""Mesh v2 range rules: origin ids are never 0, sequences never wrap, sets come in order.

An independent harness made a hub exit with one FORWARD_BATCH whose set started at
origin sequence 2^64-1 and held two records.  Such frames are now malformed on the
wire itself, for the hand-written fast path and the construct specification alike.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest
from construct import ConstructError

import wire
from wire import ErrorCode, LocalProtocolError, Opcode, RemoteProtocolError
from wire.schema import BODIES

U64_MAX = (1 << 64) - 1
TWO = wire.MessageSet.build(["t"], [(b"", b"a"), (b"", b"b")])
ONE = wire.MessageSet.build(["t"], [(b"", b"c")])


def batch_body(origin: int, *sets: tuple[int, wire.MessageSet]) -> bytes:
    """A FORWARD_BATCH body built by hand: the frame class refuses to build these."""
    parts = [struct.pack(">QH", origin, len(sets))]
    for seq, messages in sets:
        parts.append(struct.pack(">QQ", seq, 0) + messages.encode())
    return b"".join(parts)


def refused_by_both(op: Opcode, body: bytes) -> RemoteProtocolError:
    """The hub's decoder refuses ``body`` as MALFORMED_FRAME, and so does the specification."""
    decoder = wire.FrameDecoder(accept=wire.MESH_V2_OPCODES)
    decoder.feed(struct.pack(">BI", op, len(body)) + body)
    with pytest.raises(RemoteProtocolError) as fast:
        list(decoder)
    assert fast.value.code is ErrorCode.MALFORMED_FRAME
    with pytest.raises(ConstructError):
        BODIES[op].parse(body)
    return fast.value


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (batch_body(7, (U64_MAX, TWO)), "wraps past 2^64-1"),
        (batch_body(7, (0, ONE)), "origin_seq 0"),
        (batch_body(0, (1, ONE)), "origin 0"),
        (batch_body(7, (5, TWO), (6, ONE)), "does not follow"),  # overlaps 5..6
        (batch_body(7, (9, ONE), (3, ONE)), "does not follow"),  # out of order
    ],
    ids=["wrapping", "seq-0", "origin-0", "overlapping", "descending"],
)
def test_forward_batches_that_break_sequence_rules_are_malformed(body: bytes, words: str) -> None:
    error = refused_by_both(Opcode.FORWARD_BATCH, body)
    assert words in error.reason


def test_the_last_sequence_and_skips_are_fine() -> None:
    body = batch_body(7, (3, ONE), (10, TWO), (U64_MAX, ONE))  # lazy push may skip; 2^64-1 itself is a sequence
    frame = wire.ForwardBatch.decode_body(body)
    assert isinstance(frame, wire.ForwardBatch) and frame.encode_body() == body
    assert BODIES[Opcode.FORWARD_BATCH].build(BODIES[Opcode.FORWARD_BATCH].parse(body)) == body


def test_hello_and_ack_name_real_hubs() -> None:
    refused_by_both(Opcode.MESH_HELLO, struct.pack(">QH", 0, 0))
    refused_by_both(Opcode.MESH_HELLO, struct.pack(">QHQQQQ", 5, 2, 3, 1, 3, 9))  # origin 3 twice
    refused_by_both(Opcode.MESH_HELLO, struct.pack(">QHQQ", 5, 1, 0, 1))  # origin 0
    refused_by_both(Opcode.FORWARD_ACK, struct.pack(">QQ", 0, 1))


def test_we_cannot_be_asked_to_send_them_either() -> None:
    with pytest.raises(LocalProtocolError):
        wire.ForwardBatch(origin=7, sets=(wire.ForwardSet(origin_seq=U64_MAX, timestamp=0, messages=TWO),))
    with pytest.raises(LocalProtocolError):
        wire.ForwardBatch(origin=0, sets=(wire.ForwardSet(origin_seq=1, timestamp=0, messages=ONE),))
    with pytest.raises(LocalProtocolError):
        wire.MeshHello(hub_id=0)
    with pytest.raises(LocalProtocolError):
        wire.MeshHello(hub_id=1, positions=(wire.ResumePosition(origin=2, seq=1),) * 2)
    with pytest.raises(LocalProtocolError):
        wire.ForwardAck(origin=0, seq=1)


def test_a_3_0_peer_gets_3_1_frames_in_the_3_0_layout() -> None:
    """Mesh 3.1 frames a 3.0 hub cannot read: LINK_STATE with costs, ROUTED_SETS_HEADERS."""
    from wire.frames.mesh_v3 import link_state_for_v30, routed_sets_for_v30

    tagged = wire.MessageSet.build(["a"], [(b"k", b"x")], headers=wire.encode_headers({"trace": "1"}))
    plain = wire.MessageSet.build(["a", "b"], [(b"", b"y")])
    sets = (
        wire.RoutedSet(origin_seq=1, timestamp=5, messages=tagged, prevs=(0,)),
        wire.RoutedSet(origin_seq=2, timestamp=6, messages=plain, prevs=(1, 0)),
    )
    v31 = wire.RoutedSetsHeaders(ttl=9, dests=(4, 5), origin=3, sets=sets).encode()
    state = wire.LinkState(hub_id=7, boot=1, seq=2, peer_key="k", neighbors=(3, 9), costs=(8, 0))
    decoder = wire.FrameDecoder(accept=wire.MESH_V3_OPCODES)
    decoder.feed(v31)
    with pytest.raises(wire.RemoteProtocolError):
        list(decoder)  # a 3.0 link refuses ROUTED_SETS_HEADERS at its opcode
    decoder = wire.FrameDecoder(accept=wire.MESH_V3_OPCODES)
    decoder.feed(routed_sets_for_v30(v31) + link_state_for_v30(state.encode()))
    routed, link_state = list(decoder)
    assert routed == wire.RoutedSets(ttl=9, dests=(4, 5), origin=3, sets=(
        dataclasses.replace(sets[0], messages=dataclasses.replace(tagged, headers=b"")), sets[1]))  # fmt: skip
    assert link_state == dataclasses.replace(state, costs=())
    assert len(link_state.encode()) == len(state.encode()) - 4  # without its two u16 costs
