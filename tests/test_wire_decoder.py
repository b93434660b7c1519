"""The incremental FrameDecoder: chunking, limits, error offsets, failure state.

Every input goes through :func:`decode_three_ways` (whole, byte by byte, at
random split points), like h11's test helper, so that a decoder which only
works when a frame arrives in one piece cannot pass.
"""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from tests.support.wire_strategies import any_frame, frame_streams, frames_of, minimal_frame, single_byte_edits
from wire import ErrorCode, Frame, FrameDecoder, Limits, Opcode, ProtocolError, RemoteProtocolError
from wire.decoder import BODY_BOUNDS

# -- the three-ways helper ---------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """Everything observable about decoding one input."""

    #: (frame_offset, frame_length, frame) for each frame returned
    frames: list[tuple[int, int, Frame]]
    #: (type, code, offset, reason) of the error that ended decoding, if any
    error: tuple[type, ErrorCode, int | None, str] | None


def run_decoder(chunks: Iterable[bytes], *, close: bool = True, **options: object) -> Outcome:
    decoder = FrameDecoder(**options)  # type: ignore[arg-type]
    frames: list[tuple[int, int, Frame]] = []
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while (frame := decoder.next_frame()) is not None:
                frames.append((decoder.frame_offset, decoder.frame_length, frame))
        if close:
            decoder.close()
    except ProtocolError as exc:
        return Outcome(frames, (type(exc), exc.code, exc.offset, exc.reason))
    return Outcome(frames, None)


def split_at(raw: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = [0, *sorted(min(max(c, 0), len(raw)) for c in cuts), len(raw)]
    # Repeated cut points give empty chunks: feeding b"" must be harmless too.
    return [raw[a:b] for a, b in itertools.pairwise(points)]


def decode_three_ways(raw: bytes, cuts: Sequence[int] = (), *, close: bool = True, **options: object) -> Outcome:
    """Decode ``raw`` whole, byte by byte and split at ``cuts``; all three must agree."""
    whole = run_decoder([raw], close=close, **options)
    bytewise = run_decoder([raw[i : i + 1] for i in range(len(raw))], close=close, **options)
    split = run_decoder(split_at(raw, cuts), close=close, **options)
    assert bytewise == whole
    assert split == whole
    return whole


def cuts_for(raw: bytes) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, len(raw)), max_size=8)


def encode_all(frames: Iterable[Frame]) -> bytes:
    return b"".join(f.encode() for f in frames)


def header(op: int, length: int) -> bytes:
    return bytes([op]) + length.to_bytes(4, "big")


# -- valid input ---------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(frame=any_frame(), data=st.data())
def test_one_frame_three_ways(frame: Frame, data: st.DataObject) -> None:
    raw = frame.encode()
    outcome = decode_three_ways(raw, data.draw(cuts_for(raw)), limits=Limits(max_body=1 << 24))
    assert outcome.error is None
    assert outcome.frames == [(0, len(raw) - 5, frame)]


@settings(max_examples=60, deadline=None)
@given(frames=frame_streams(max_size=10), start=st.integers(0, 1 << 40), data=st.data())
def test_stream_three_ways_with_absolute_offsets(frames: list[Frame], start: int, data: st.DataObject) -> None:
    raw = encode_all(frames)
    outcome = decode_three_ways(raw, data.draw(cuts_for(raw)), limits=Limits(max_body=1 << 24), start_offset=start)
    assert outcome.error is None
    assert [f for _, _, f in outcome.frames] == frames
    expected_offset = start
    for (offset, length, frame), original in zip(outcome.frames, frames, strict=True):
        assert offset == expected_offset
        assert length == len(original.encode_body())
        expected_offset += 5 + length
        assert type(frame) is type(original)


def test_long_stream_crossing_buffer_compaction() -> None:
    # Enough bytes that the decoder compacts its buffer (64 KiB) several times;
    # offsets must stay absolute across compactions.
    frames = [wire.Forward(topics=(f"t{i % 7}",), data=bytes([i % 251]) * (i % 300)) for i in range(2000)]
    raw = encode_all(frames)
    assert len(raw) > 4 * 65536
    chunked = run_decoder([raw[i : i + 4093] for i in range(0, len(raw), 4093)])
    assert chunked.error is None
    assert [f for _, _, f in chunked.frames] == frames
    offsets = [o for o, _, _ in chunked.frames]
    assert offsets[0] == 0
    assert offsets == list(itertools.accumulate((len(f.encode()) for f in frames[:-1]), initial=0))
    assert run_decoder([raw]) == chunked


def test_iteration_and_offsets_properties() -> None:
    decoder = FrameDecoder()
    raw = wire.PING.encode() + wire.Credit(sub_id=1, credit=2).encode()
    decoder.feed(raw[:11])  # the 9-byte PING and 2 bytes of the CREDIT header
    assert [*decoder] == [wire.PING]
    assert decoder.frame_offset == 0
    assert decoder.frame_length == 4
    assert decoder.offset == 9
    assert decoder.buffered == 2
    decoder.feed(raw[11:])
    assert [*decoder] == [wire.Credit(sub_id=1, credit=2)]
    assert decoder.frame_offset == 9
    assert decoder.offset == len(raw)
    assert decoder.buffered == 0
    decoder.close()


def test_empty_input_closes_cleanly() -> None:
    assert decode_three_ways(b"") == Outcome([], None)


# -- arbitrary and mutated input --------------------------------------------------


def _check_garbage_outcome(raw: bytes, outcome: Outcome) -> None:
    """Frames or one RemoteProtocolError, consistent with the input; nothing else."""
    previous_end = 0
    for offset, length, frame in outcome.frames:
        assert isinstance(frame, Frame)
        assert offset == previous_end
        # Whatever was accepted re-encodes to exactly the bytes it came from:
        # the decoder accepts only canonical encodings.
        assert raw[offset : offset + 5 + length] == frame.encode()
        previous_end = offset + 5 + length
    if outcome.error is not None:
        kind, code, error_offset, _ = outcome.error
        assert kind is RemoteProtocolError
        assert isinstance(code, ErrorCode)
        assert error_offset is not None
        assert previous_end <= error_offset <= len(raw)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64), data=st.data())
def test_arbitrary_bytes_give_frames_or_protocol_error(raw: bytes, data: st.DataObject) -> None:
    # decode_three_ways lets only ProtocolError through run_decoder; any other
    # exception type fails the test as an error.
    outcome = decode_three_ways(raw, data.draw(cuts_for(raw)))
    _check_garbage_outcome(raw, outcome)


@st.composite
def plausible_frames(draw: st.DrawFn) -> bytes:
    """A known opcode and an honest length around random body bytes: reaches the body parsers."""
    op = draw(st.sampled_from(list(Opcode)))
    low, high = BODY_BOUNDS[op]
    size = draw(st.integers(low, min(high if high is not None else low + 60, low + 60)))
    return header(op, size) + draw(st.binary(min_size=size, max_size=size))


@settings(max_examples=300, deadline=None)
@given(raw=plausible_frames(), data=st.data())
def test_random_bodies_give_frames_or_protocol_error(raw: bytes, data: st.DataObject) -> None:
    outcome = decode_three_ways(raw, data.draw(cuts_for(raw)))
    _check_garbage_outcome(raw, outcome)


@st.composite
def mutated_streams(draw: st.DrawFn) -> bytes:
    raw = bytearray(encode_all(draw(frame_streams(max_size=3))))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        if kind == "insert":
            at = draw(st.integers(0, len(raw)))
            raw[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif raw and kind == "flip":
            at = draw(st.integers(0, len(raw) - 1))
            raw[at] ^= draw(st.integers(1, 255))
        elif raw:
            at = draw(st.integers(0, len(raw) - 1))
            del raw[at : at + draw(st.integers(1, 3))]
    return bytes(raw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=mutated_streams(), data=st.data())
def test_mutated_frames_give_frames_or_protocol_error(raw: bytes, data: st.DataObject) -> None:
    outcome = decode_three_ways(raw, data.draw(cuts_for(raw)))
    _check_garbage_outcome(raw, outcome)


@pytest.mark.parametrize("op", list(Opcode), ids=lambda op: op.name)
def test_every_single_byte_edit_of_a_small_frame(op: Opcode) -> None:
    # Exhaustive rather than random: every overwrite, deletion and insertion of
    # one byte, header included, on the smallest frame of each opcode.  This
    # reaches the construct-decoded (cold) frames' error handling too.
    raw = minimal_frame(op).encode()
    for edited in single_byte_edits(raw):
        outcome = run_decoder([edited])
        _check_garbage_outcome(edited, outcome)


# -- the failed state ------------------------------------------------------------------


def test_decoder_stays_failed_after_an_error() -> None:
    decoder = FrameDecoder()
    decoder.feed(wire.PING.encode() + header(0x7F, 0))
    assert decoder.next_frame() == wire.PING
    with pytest.raises(RemoteProtocolError) as first:
        decoder.next_frame()
    assert decoder.error is first.value
    # Every verb re-raises the same error; nothing is decoded past it.
    with pytest.raises(RemoteProtocolError) as again:
        decoder.next_frame()
    assert again.value is first.value
    with pytest.raises(RemoteProtocolError) as fed:
        decoder.feed(wire.PONG.encode())
    assert fed.value is first.value
    with pytest.raises(RemoteProtocolError):
        decoder.close()
    with pytest.raises(RemoteProtocolError):
        list(decoder)


def test_decoder_stays_failed_after_a_body_error() -> None:
    decoder = FrameDecoder()
    decoder.feed(header(Opcode.SUBSCRIBE_ACK, 1) + b"\x07" + wire.PING.encode())
    with pytest.raises(RemoteProtocolError) as first:
        decoder.next_frame()
    assert first.value.offset == 5
    # The valid PING behind the bad frame is never returned.
    with pytest.raises(RemoteProtocolError) as again:
        decoder.next_frame()
    assert again.value is first.value


# -- header checks before the body is buffered --------------------------------------------


@pytest.mark.parametrize("prefix_frames", [0, 3])
@pytest.mark.parametrize("op", [Opcode.SUBSCRIBE, Opcode.HEARTBEAT, Opcode.PUBLISH, Opcode.STATUS_REPLY])
def test_bogus_length_refused_at_the_header(op: Opcode, prefix_frames: int) -> None:
    prefix = encode_all([wire.PING] * prefix_frames)
    decoder = FrameDecoder()
    decoder.feed(prefix)
    assert len([*decoder]) == prefix_frames
    bogus = header(op, 0xFFFFFFFF)
    tracemalloc.start()
    try:
        for byte in bogus[:4]:
            decoder.feed(bytes([byte]))
            assert decoder.next_frame() is None
        decoder.feed(bogus[4:])
        with pytest.raises(RemoteProtocolError) as info:
            decoder.next_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = info.value
    assert err.code is ErrorCode.FRAME_TOO_LARGE
    # The offset points into the header of the bogus frame, in stream terms.
    assert err.offset is not None
    assert len(prefix) <= err.offset < len(prefix) + 5
    # Nothing was allocated for the announced body: only the fed bytes are held.
    assert decoder.buffered == 5
    assert len(decoder._buf) <= len(prefix) + 5
    assert peak < 1 << 20


def test_allowed_large_length_does_not_preallocate() -> None:
    decoder = FrameDecoder(limits=Limits(max_body=1 << 30))
    tracemalloc.start()
    try:
        decoder.feed(header(Opcode.STATUS_REPLY, 1 << 30))
        assert decoder.next_frame() is None
        decoder.feed(b"\x00" * 100)
        assert decoder.next_frame() is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    with pytest.raises(RemoteProtocolError) as info:
        decoder.close()
    assert info.value.code is ErrorCode.TRUNCATED


def test_max_body_is_inclusive() -> None:
    limit = 64
    at_limit = wire.StatusReply(document=b"x" * (limit - 4))
    over = wire.StatusReply(document=b"x" * (limit - 3))
    ok = decode_three_ways(at_limit.encode(), limits=Limits(max_body=limit))
    assert ok.error is None and [f for _, _, f in ok.frames] == [at_limit]
    refused = decode_three_ways(over.encode(), limits=Limits(max_body=limit))
    assert refused.frames == []
    assert refused.error is not None
    assert refused.error[1] is ErrorCode.FRAME_TOO_LARGE
    assert refused.error[2] == 1


def test_default_limit_is_one_mebibyte() -> None:
    assert FrameDecoder().limits.max_body == 1 << 20


def _bound_violations() -> list[tuple[Opcode, int]]:
    cases = []
    for op, (low, high) in BODY_BOUNDS.items():
        if low > 0:
            cases.append((op, low - 1))
        if high is not None:
            cases.append((op, high + 1))
    return cases


@pytest.mark.parametrize(("op", "length"), _bound_violations(), ids=lambda v: getattr(v, "name", str(v)))
def test_per_opcode_size_bounds_refused_at_the_header(op: Opcode, length: int) -> None:
    # Only the header is fed: the refusal cannot depend on body bytes.
    decoder = FrameDecoder(limits=Limits(max_body=1 << 20))
    decoder.feed(wire.PONG.encode() + header(op, length))
    assert decoder.next_frame() == wire.PONG
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_frame()
    assert info.value.code is ErrorCode.MALFORMED_FRAME
    assert info.value.offset == 9 + 1


def test_heartbeat_with_length_5_refused_at_the_header() -> None:
    outcome = decode_three_ways(header(Opcode.HEARTBEAT, 5), close=False)
    assert outcome.frames == []
    assert outcome.error is not None
    assert outcome.error[:3] == (RemoteProtocolError, ErrorCode.MALFORMED_FRAME, 1)


@pytest.mark.parametrize("value", sorted(set(range(256)) - {int(op) for op in Opcode}))
def test_every_unknown_opcode_is_refused(value: int) -> None:
    outcome = decode_three_ways(header(value, 4) + b"ping", close=False)
    assert outcome.error is not None
    assert outcome.error[:3] == (RemoteProtocolError, ErrorCode.UNKNOWN_OPCODE, 0)


@settings(max_examples=40, deadline=None)
@given(
    frames=frame_streams(max_size=6),
    value=st.sampled_from(sorted(set(range(256)) - {int(op) for op in Opcode})),
    data=st.data(),
)
def test_unknown_opcode_as_nth_frame_at_absolute_offset(frames: list[Frame], value: int, data: st.DataObject) -> None:
    prefix = encode_all(frames)
    raw = prefix + header(value, 4) + b"ping" + wire.PING.encode()
    outcome = decode_three_ways(raw, data.draw(cuts_for(raw)), limits=Limits(max_body=1 << 24))
    assert [f for _, _, f in outcome.frames] == frames
    assert outcome.error is not None
    assert outcome.error[:3] == (RemoteProtocolError, ErrorCode.UNKNOWN_OPCODE, len(prefix))


def test_accept_restricts_opcodes() -> None:
    hello = wire.Hello(client_name="c").encode()
    mesh = wire.Subscribe(topics=("a",)).encode()
    # A mesh v1 link accepts mesh frames ...
    ok = decode_three_ways(mesh, accept=wire.MESH_V1_OPCODES)
    assert ok.error is None and len(ok.frames) == 1
    # ... and refuses a client HELLO at its header, at its stream offset.
    refused = decode_three_ways(mesh + hello, accept=wire.MESH_V1_OPCODES)
    assert len(refused.frames) == 1
    assert refused.error is not None
    assert refused.error[:3] == (RemoteProtocolError, ErrorCode.UNEXPECTED_FRAME, len(mesh))
    # The same bytes pass where HELLO belongs.
    assert decode_three_ways(hello, accept=wire.CLIENT_TO_HUB_OPCODES).error is None
    # A hub-to-client frame is unexpected from a client.
    deliverish = wire.SubOk(sub_id=1).encode()
    wrong_way = decode_three_ways(deliverish, accept=wire.CLIENT_TO_HUB_OPCODES)
    assert wrong_way.error is not None and wrong_way.error[1] is ErrorCode.UNEXPECTED_FRAME


def test_accept_is_checked_before_the_body_arrives() -> None:
    decoder = FrameDecoder(accept=wire.LOG_OPCODES)
    decoder.feed(wire.PING.encode()[:5])
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_frame()
    assert info.value.code is ErrorCode.UNEXPECTED_FRAME


# -- truncation -------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(frames=frame_streams(max_size=4), data=st.data())
def test_close_inside_a_frame_is_truncated(frames: list[Frame], data: st.DataObject) -> None:
    raw = encode_all(frames)
    last_start = len(raw) - len(frames[-1].encode())
    cut = data.draw(st.integers(last_start + 1, len(raw) - 1)) if len(raw) - last_start > 1 else None
    if cut is None:
        return
    outcome = decode_three_ways(raw[:cut], data.draw(cuts_for(raw[:cut])), limits=Limits(max_body=1 << 24))
    assert [f for _, _, f in outcome.frames] == frames[:-1]
    assert outcome.error is not None
    # The offset names where the unfinished frame starts.
    assert outcome.error[:3] == (RemoteProtocolError, ErrorCode.TRUNCATED, last_start)


@pytest.mark.parametrize("cut", [1, 4, 5, 8])
def test_close_reports_header_or_body_truncation(cut: int) -> None:
    raw = wire.Forward(topics=("a",), data=b"xyz").encode()[:cut]
    decoder = FrameDecoder()
    decoder.feed(raw)
    assert decoder.next_frame() is None
    with pytest.raises(RemoteProtocolError, match="header" if cut < 5 else "body") as info:
        decoder.close()
    assert info.value.code is ErrorCode.TRUNCATED
    assert info.value.offset == 0
    with pytest.raises(RemoteProtocolError):
        decoder.next_frame()


def test_close_without_truncation_keeps_decoder_usable_for_more_close() -> None:
    decoder = FrameDecoder()
    decoder.feed(wire.PING.encode())
    assert decoder.next_frame() == wire.PING
    decoder.close()
    assert decoder.error is None


# -- errors deep in a stream ----------------------------------------------------------------


def test_bad_body_in_third_frame_has_absolute_offset() -> None:
    first = wire.Subscribe(topics=("topic_1", "topic_2")).encode()
    second = wire.Credit(sub_id=9, credit=100).encode()
    # A FORWARD whose second topic has length 0: byte 3 of its body.
    bad_body = b"\x02\x01a\x00" + b"\x00\x00\x00\x00"
    third = header(Opcode.FORWARD, len(bad_body)) + bad_body
    raw = first + second + third + wire.PING.encode()
    outcome = decode_three_ways(raw, [3, 30, 31, 40])
    assert [f for _, _, f in outcome.frames] == [
        wire.Subscribe(topics=("topic_1", "topic_2")),
        wire.Credit(sub_id=9, credit=100),
    ]
    assert outcome.error is not None
    assert outcome.error[:3] == (RemoteProtocolError, ErrorCode.INVALID_TOPIC, len(first) + len(second) + 5 + 3)
    # With a start offset (e.g. a log segment read from its middle) the offset shifts too.
    shifted = decode_three_ways(raw, start_offset=1000)
    assert shifted.error is not None
    assert shifted.error[2] == 1000 + len(first) + len(second) + 5 + 3


def test_schema_frame_error_offset_is_at_least_the_body_start() -> None:
    # Cold frames lose the position inside the body (construct does not report it);
    # the offset must still land on this frame's body, not on 0 or the header.
    prefix = wire.PING.encode()
    bad = header(Opcode.SUB_UPDATE, 9) + b"\x00\x00\x00\x01" + b"\x07" + b"\x00\x01" + b"\x01a"
    outcome = decode_three_ways(prefix + bad)
    assert outcome.error is not None
    assert outcome.error[1] is ErrorCode.MALFORMED_FRAME
    assert outcome.error[2] is not None and outcome.error[2] >= len(prefix) + 5


# -- log batches ------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(frame=frames_of(Opcode.LOG_BATCH), data=st.data())
def test_log_batch_with_a_corrupted_byte_fails_checksum(frame: Frame, data: st.DataObject) -> None:
    raw = bytearray(frame.encode())
    # Any byte of the body, the stored CRC included; the header is left intact
    # so the decoder reaches the checksum.
    at = data.draw(st.integers(5, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    outcome = decode_three_ways(bytes(raw), data.draw(cuts_for(bytes(raw))))
    assert outcome.frames == []
    assert outcome.error is not None
    assert outcome.error[:3] == (RemoteProtocolError, ErrorCode.CHECKSUM_MISMATCH, 5)


def test_log_batch_good_crc_is_verified_not_ignored() -> None:
    batch = wire.RecordBatch(
        topic="t", base_offset=7, timestamp=1, origin=2, origin_seq=3, count=1, records=wire.encode_record(b"k", b"v")
    )
    good = wire.LogBatch.create(append_ts=5, producer_id=6, producer_seq=7, batch=batch)
    assert decode_three_ways(good.encode()).frames[0][2] == good
    wrong_crc = wire.LogBatch(crc=good.crc ^ 1, append_ts=5, producer_id=6, producer_seq=7, batch=batch)
    outcome = decode_three_ways(wrong_crc.encode())
    assert outcome.error is not None and outcome.error[1] is ErrorCode.CHECKSUM_MISMATCH


def test_segment_reads_like_a_capture() -> None:
    batch = wire.RecordBatch(
        topic="t",
        base_offset=0,
        timestamp=1,
        origin=2,
        origin_seq=3,
        count=2,
        records=wire.encode_record(b"", b"a") + wire.encode_record(b"", b"b"),
    )
    frames: list[Frame] = [
        wire.SegmentHeader(topic="t", base_offset=0, created=1),
        wire.LogBatch.create(append_ts=1, producer_id=0, producer_seq=0, batch=batch),
    ]
    outcome = decode_three_ways(encode_all(frames), [1, 2, 40], accept=wire.LOG_OPCODES)
    assert outcome.error is None
    assert [f for _, _, f in outcome.frames] == frames


def test_take_buffered_hands_over_what_follows_a_handshake() -> None:
    welcome = wire.Welcome(version=1, hub_id=7, max_body=1024, heartbeat_ms=5000).encode()
    following = wire.PING.encode() + b"\x28\x00"  # a whole frame and the start of another
    decoder = wire.FrameDecoder(accept=wire.HUB_TO_CLIENT_OPCODES)
    decoder.feed(welcome + following)
    assert isinstance(decoder.next_frame(), wire.Welcome)
    assert decoder.take_buffered() == following
    assert decoder.buffered == 0 and decoder.offset == len(welcome) + len(following)
    decoder.feed(wire.PONG.encode())
    assert decoder.next_frame() == wire.PONG
