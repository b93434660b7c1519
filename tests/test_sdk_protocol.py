"""The SDK's sans-IO protocol core against hand-built wire frames (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wire
from sdk import ConnectionLostError, Gap, HubError, ProtocolError, SlowConsumerError, SubscriptionClosedError
from sdk.messages import PublishAck, Reconnect
from sdk.protocol import ClientProtocol, State
from tests.support.client_protocol import FakeClock, batch, deliver, frames_of, ready, welcome
from wire import ErrorCode, StartPosition

# -- handshake ---------------------------------------------------------------------


def test_handshake_holds_everything_until_welcome() -> None:
    proto = ClientProtocol(name="n", producer_id=1, clock=FakeClock())
    proto.connection_made()
    proto.publish("a", b"x")
    _state, ticket = proto.subscribe("a")
    assert [f.OPCODE for f in frames_of(proto.data_to_send())] == [wire.Opcode.HELLO]
    assert proto.data_to_send() == b""  # nothing but HELLO before WELCOME
    proto.receive_data(welcome(max_body=4096))
    assert proto.welcome is not None and proto.welcome.hub_id == 42
    assert proto.buffer.max_body == 4096
    sub = frames_of(proto.data_to_send())
    assert [f.OPCODE for f in sub] == [wire.Opcode.SUB]
    assert not ticket.done


def test_frames_before_welcome_are_protocol_errors() -> None:
    proto = ClientProtocol(clock=FakeClock())
    proto.connection_made()
    proto.data_to_send()
    with pytest.raises(ProtocolError) as info:
        proto.receive_data(wire.SubOk(sub_id=1).encode())
    assert info.value.code == ErrorCode.UNEXPECTED_FRAME


def test_error_during_handshake_is_a_hub_error() -> None:
    proto = ClientProtocol(clock=FakeClock())
    proto.connection_made()
    with pytest.raises(HubError) as info:
        proto.receive_data(wire.Error(code=ErrorCode.UNSUPPORTED_VERSION, reason="v9").encode())
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert isinstance(info.value, ConnectionError)


def test_bytes_split_anywhere_give_the_same_result() -> None:
    data = welcome() + wire.StatusReply(document=b'{"a": 1}').encode()
    proto = ClientProtocol(clock=FakeClock())
    proto.connection_made()
    proto.data_to_send()
    ticket = None
    for i in range(len(data)):
        proto.receive_data(data[i : i + 1])
        if proto.state == State.READY and ticket is None:
            ticket = proto.status()
    assert ticket is not None and ticket.done and ticket.result == {"a": 1}


# -- publishing ------------------------------------------------------------------------


def test_consecutive_publishes_to_the_same_topics_make_one_message_set() -> None:
    proto = ready()
    for i in range(3):
        proto.publish("a", b"m%d" % i)
    proto.publish(("a", "b"), b"both", key=b"k")
    proto.publish(["a", "b"], b"both2")
    proto.publish("a", b"again")
    proto.flush()
    (frame,) = frames_of(proto.data_to_send())
    assert isinstance(frame, wire.Publish)
    assert frame.producer_id == 9 and frame.sequence == 1 and not frame.wants_ack
    assert [s.topics for s in frame.sets] == [("a",), ("a", "b"), ("a",)]
    assert [list(s.messages()) for s in frame.sets] == [
        [(b"", b"m0"), (b"", b"m1"), (b"", b"m2")],
        [(b"k", b"both"), (b"", b"both2")],
        [(b"", b"again")],
    ]
    proto.publish("a", b"next")
    proto.flush()
    (frame2,) = frames_of(proto.data_to_send())
    assert isinstance(frame2, wire.Publish) and frame2.sequence == 2  # producers number batches 1, 2, 3


def test_publish_reports_when_the_buffer_passes_flush_bytes() -> None:
    proto = ready(flush_bytes=1000)
    results = [proto.publish("t", b"x" * 94) for _ in range(10)]
    assert results.index(True) == 9  # 10 records of 100 bytes + set header pass 1000
    assert proto.data_to_send() == b""  # buffered, not framed: the driver flushes


def test_frames_never_exceed_the_hubs_max_body() -> None:
    proto = ClientProtocol(producer_id=1, clock=FakeClock())
    proto.connection_made()
    proto.data_to_send()
    proto.receive_data(welcome(max_body=1000))
    for i in range(30):
        proto.publish("t", bytes([i]) * 90)
    proto.flush()
    frames = frames_of(proto.data_to_send())
    assert len(frames) > 1
    assert all(len(f.encode_body()) <= 1000 for f in frames)
    assert [d for f in frames for s in f.sets for _, d in s.messages()] == [bytes([i]) * 90 for i in range(30)]
    with pytest.raises(ValueError, match="does not fit"):
        proto.publish("t", b"x" * 2000)


def test_publish_validates_topics_and_data() -> None:
    proto = ready()
    with pytest.raises(ValueError, match="pattern"):
        proto.publish("a.*", b"x")
    with pytest.raises(ValueError):
        proto.publish("", b"x")
    with pytest.raises(TypeError):
        proto.publish("a", 123)
    proto.publish("a", "text is UTF-8")
    proto.flush()
    (frame,) = frames_of(proto.data_to_send())
    assert list(frame.sets[0].messages()) == [(b"", b"text is UTF-8")]


def test_acks_are_matched_in_order_and_give_each_message_its_offsets() -> None:
    proto = ready()
    proto.publish("a", b"plain")
    t1 = proto.publish_acked(("a", "b"), b"x")
    t2 = proto.publish_acked("b", b"y")
    proto.flush()
    t3 = proto.publish_acked("a", b"z")
    proto.flush()
    f1, f2 = frames_of(proto.data_to_send())
    assert isinstance(f1, wire.Publish) and f1.wants_ack and f1.sequence == 1
    assert isinstance(f2, wire.Publish) and f2.wants_ack and f2.sequence == 2
    ranges = (
        wire.OffsetRange(topic="a", first_offset=10, num=2),
        wire.OffsetRange(topic="b", first_offset=3, num=2),
    )
    proto.receive_data(wire.PublishAck(producer_id=9, sequence=1, timestamp=77, ranges=ranges).encode())
    assert t1.result == PublishAck({"a": 11, "b": 3}, 77, 1)
    assert t2.result == PublishAck({"b": 4}, 77, 1)
    assert not t3.done
    ack2 = wire.PublishAck(
        producer_id=9, sequence=2, timestamp=78, ranges=(wire.OffsetRange(topic="a", first_offset=12, num=1),)
    )
    proto.receive_data(ack2.encode())
    assert t3.result.offsets == {"a": 12}
    with pytest.raises(ProtocolError):
        proto.receive_data(ack2.encode())  # no acked publish pending any more


def test_out_of_order_ack_is_a_protocol_error() -> None:
    proto = ready()
    proto.publish_acked("a", b"1")
    proto.flush()
    proto.publish_acked("a", b"2")
    proto.flush()
    proto.data_to_send()
    with pytest.raises(ProtocolError, match="expected 1"):
        proto.receive_data(wire.PublishAck(producer_id=9, sequence=2).encode())


# -- subscriptions -----------------------------------------------------------------------


def test_subscribe_deliver_and_message_fields() -> None:
    proto = ready()
    state, ticket = proto.subscribe(["a", "b.*"], start="earliest", policy="drop-oldest", credit=0)
    (sub,) = frames_of(proto.data_to_send())
    assert sub == wire.Sub(
        sub_id=state.sub_id,
        patterns=("a", "b.*"),
        start=StartPosition.EARLIEST,
        policy=wire.SlowConsumerPolicy.DROP_OLDEST,
    )
    proto.receive_data(wire.SubOk(sub_id=state.sub_id, offsets=(wire.TopicOffset(topic="a", offset=0),)).encode())
    assert ticket.result == {"a": 0}
    proto.receive_data(deliver(state.sub_id, batch("b.x", 7, b"p", b"q", ts=1_000_000)))
    item = proto.take(state)
    assert isinstance(item, wire.RecordBatch)
    msgs = state.messages(item)
    assert [(m.topic, m.offset, m.key, m.data, m.origin, m.timestamp) for m in msgs] == [
        ("b.x", 7, None, b"p", 42, 1_000_000),
        ("b.x", 8, None, b"q", 42, 1_000_000),
    ]
    assert msgs[0].datetime.year == 1970
    assert state.next_offsets == {"a": 0, "b.x": 9}
    assert proto.take(state) is None


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=40)), min_size=1, max_size=80)
    | st.tuples(st.binary(max_size=6), st.binary(max_size=40), st.integers(1, 80)).map(lambda t: [t[:2]] * t[2]),
    base=st.integers(0, 2**63),
)
def test_messages_are_the_records_in_order_with_an_empty_key_as_none(
    records: list[tuple[bytes, bytes]], base: int
) -> None:
    """Small batches take the loop, larger ones ``wire.iter_records`` (C for records of one size, a generator for
    mixed sizes): the same Messages either way."""
    proto = ready()
    state, _ = proto.subscribe("a")
    count, region = wire.encode_records(records)
    item = wire.RecordBatch(topic="a", base_offset=base, timestamp=5, origin=3, origin_seq=1, count=count,
                            records=region)  # fmt: skip
    msgs = state.messages(item)
    assert [(m.offset, m.key, m.data, m.topic, m.origin) for m in msgs] == [
        (base + i, key or None, data, "a", 3) for i, (key, data) in enumerate(records)
    ]


def test_gap_is_queued_in_order_and_recorded() -> None:
    proto = ready()
    state, _ = proto.subscribe("a", policy="drop-oldest")
    proto.receive_data(wire.SubOk(sub_id=state.sub_id).encode())
    proto.receive_data(
        deliver(state.sub_id, batch("a", 0, b"1"))
        + wire.Gap(sub_id=state.sub_id, topic="a", first_offset=1, dropped=5).encode()
        + deliver(state.sub_id, batch("a", 6, b"7"))
    )
    items = [proto.take(state) for _ in range(3)]
    assert isinstance(items[0], wire.RecordBatch) and isinstance(items[2], wire.RecordBatch)
    assert items[1] == Gap("a", 1, 5, "hub")
    assert state.gaps == [Gap("a", 1, 5, "hub")]


def test_sub_end_out_of_capacity_raises_slow_consumer_after_the_data() -> None:
    proto = ready()
    state, _ = proto.subscribe("a")
    proto.receive_data(wire.SubOk(sub_id=state.sub_id).encode())
    proto.receive_data(
        deliver(state.sub_id, batch("a", 0, b"1"))
        + wire.SubEnd(sub_id=state.sub_id, code=ErrorCode.OUT_OF_CAPACITY, reason="too slow").encode()
        + deliver(state.sub_id, batch("a", 1, b"late"))  # after SUB_END: ignored
    )
    assert isinstance(proto.take(state), wire.RecordBatch)
    assert proto.take(state) is None and state.closed
    assert isinstance(state.error, SlowConsumerError)
    assert state.error.code == ErrorCode.OUT_OF_CAPACITY and state.error.sub_id == state.sub_id
    assert state.error.topics == ("a",) and not state.error.client_side


def test_sub_end_refusal_fails_the_subscribe_ticket() -> None:
    proto = ready()
    state, ticket = proto.subscribe("a.b")
    proto.receive_data(wire.SubEnd(sub_id=state.sub_id, code=ErrorCode.LIMIT_EXCEEDED, reason="full").encode())
    assert ticket.done and isinstance(ticket.error, SubscriptionClosedError)
    assert ticket.error.code == ErrorCode.LIMIT_EXCEEDED
    assert state.sub_id not in proto.subs


def test_unsubscribe_ignores_late_delivers_and_ends_quietly() -> None:
    proto = ready()
    state, _ = proto.subscribe("a")
    proto.receive_data(wire.SubOk(sub_id=state.sub_id).encode())
    proto.data_to_send()
    proto.unsubscribe(state)
    assert [f.OPCODE for f in frames_of(proto.data_to_send())] == [wire.Opcode.UNSUB]
    proto.receive_data(deliver(state.sub_id, batch("a", 0, b"late")))
    proto.receive_data(wire.SubEnd(sub_id=state.sub_id, code=ErrorCode.UNSUBSCRIBED).encode())
    assert proto.take(state) is None and state.closed and state.error is None
    assert not proto.subs


def test_sub_update_add_and_remove() -> None:
    proto = ready()
    state, _ = proto.subscribe("a")
    proto.receive_data(wire.SubOk(sub_id=state.sub_id).encode())
    proto.data_to_send()
    t_add = proto.update(state, wire.UpdateOp.ADD, ["b", "c.*"])
    t_rm = proto.update(state, wire.UpdateOp.REMOVE, "a")
    f1, f2 = frames_of(proto.data_to_send())
    assert f1 == wire.SubUpdate(sub_id=state.sub_id, op=wire.UpdateOp.ADD, patterns=("b", "c.*"))
    assert f2 == wire.SubUpdate(sub_id=state.sub_id, op=wire.UpdateOp.REMOVE, patterns=("a",))
    proto.receive_data(wire.SubOk(sub_id=state.sub_id, offsets=(wire.TopicOffset(topic="b", offset=4),)).encode())
    proto.receive_data(wire.SubOk(sub_id=state.sub_id).encode())
    assert t_add.result == {"b": 4} and t_rm.result == {}
    assert state.topics == ("b", "c.*")


def test_credit_is_granted_as_the_application_consumes() -> None:
    proto = ready()
    state, _ = proto.subscribe("a", credit=4)
    assert frames_of(proto.data_to_send())[0].credit == 4
    proto.receive_data(wire.SubOk(sub_id=state.sub_id).encode())
    proto.receive_data(deliver(state.sub_id, batch("a", 0, b"1")) + deliver(state.sub_id, batch("a", 1, b"2", b"3")))
    proto.take(state)
    assert proto.data_to_send() == b""  # 1 of 4: not yet half the window
    proto.take(state)
    assert frames_of(proto.data_to_send()) == [wire.Credit(sub_id=state.sub_id, credit=3)]


def test_client_side_limit_cancel_and_drop_oldest() -> None:
    proto = ready(max_pending_bytes=20)
    cancel, _ = proto.subscribe("a")
    drop, _ = proto.subscribe("b", policy="drop-oldest")
    proto.receive_data(wire.SubOk(sub_id=cancel.sub_id).encode() + wire.SubOk(sub_id=drop.sub_id).encode())
    proto.data_to_send()
    for i in range(4):
        proto.receive_data(
            deliver(cancel.sub_id, batch("a", i, b"x" * 4)) + deliver(drop.sub_id, batch("b", i, b"y" * 4))
        )
    assert isinstance(cancel.error, SlowConsumerError) and cancel.error.client_side
    assert [f.OPCODE for f in frames_of(proto.data_to_send())] == [wire.Opcode.UNSUB]
    items = list(drop.items)
    # each overflow drops the oldest batch and says so, in place and in ``gaps``
    assert items[:2] == [Gap("b", 0, 1, "client"), Gap("b", 1, 1, "client")] == drop.gaps
    assert [i.base_offset for i in items[2:]] == [2, 3]  # type: ignore[union-attr]


# -- errors, status, heartbeats ---------------------------------------------------------


def test_error_frame_is_fatal_with_code_and_ref() -> None:
    proto = ready()
    with pytest.raises(HubError) as info:
        proto.receive_data(wire.Error(code=ErrorCode.INVALID_TOPIC, reason="no", ref=3).encode())
    assert info.value.code == ErrorCode.INVALID_TOPIC and info.value.ref == 3


def test_garbage_from_the_hub_is_a_protocol_error_with_offset() -> None:
    proto = ready()
    with pytest.raises(ProtocolError) as info:
        proto.receive_data(b"\x99\x00\x00\x00\x00")
    assert info.value.code == ErrorCode.UNKNOWN_OPCODE
    assert info.value.offset == len(welcome())


def test_status_reply_completes_the_ticket() -> None:
    proto = ready()
    ticket = proto.status()
    assert frames_of(proto.data_to_send()) == [wire.Status()]
    proto.receive_data(wire.StatusReply(document=b'{"connections": 3}').encode())
    assert ticket.result == {"connections": 3}


def test_heartbeats_with_an_injected_clock() -> None:
    clock = FakeClock()
    proto = ready(clock)
    assert proto.heartbeat == 1.0
    assert proto.poll() == pytest.approx(1.0)
    clock.now += 1.0
    proto.poll()
    assert frames_of(proto.data_to_send()) == [wire.PING]
    # a ping from the hub is answered with a pong
    proto.receive_data(wire.PING.encode())
    assert frames_of(proto.data_to_send()) == [wire.PONG]
    clock.now += 2.9
    proto.poll()  # 2.9 s silent: still alive
    clock.now += 0.2
    with pytest.raises(ConnectionLostError, match="nothing received"):
        proto.poll()


def test_heartbeat_override_and_zero_disables() -> None:
    clock = FakeClock()
    proto = ClientProtocol(heartbeat=0, clock=clock)
    proto.connection_made()
    proto.data_to_send()
    proto.receive_data(welcome(heartbeat_ms=10))
    clock.now += 100
    proto.poll()
    assert proto.data_to_send() == b""


# -- reconnect ----------------------------------------------------------------------------


def test_reconnect_resubscribes_from_the_last_offset_and_resends_unacked() -> None:
    proto = ready()
    durable, _ = proto.subscribe("a", start="earliest")
    live, _ = proto.subscribe(["b", "c"])
    proto.receive_data(
        wire.SubOk(sub_id=durable.sub_id, offsets=(wire.TopicOffset(topic="a", offset=0),)).encode()
        + wire.SubOk(
            sub_id=live.sub_id,
            offsets=(wire.TopicOffset(topic="b", offset=10), wire.TopicOffset(topic="c", offset=0)),
        ).encode()
    )
    proto.receive_data(deliver(durable.sub_id, batch("a", 0, b"1", b"2")) + deliver(live.sub_id, batch("b", 10, b"x")))
    acked = proto.publish_acked("a", b"must arrive")
    proto.flush()
    proto.data_to_send()
    proto.publish("a", b"buffered while down")

    proto.connection_lost(ConnectionLostError("boom"))
    assert proto.state == State.DISCONNECTED and not acked.done
    proto.connection_made()
    proto.data_to_send()  # HELLO
    proto.receive_data(welcome())
    proto.flush()
    frames = frames_of(proto.data_to_send())
    subs = [f for f in frames if isinstance(f, wire.Sub)]
    assert subs[0].start == StartPosition.OFFSET and subs[0].offsets == (wire.TopicOffset(topic="a", offset=2),)
    assert subs[1].start == StartPosition.LATEST and subs[1].offsets == ()
    pubs = [f for f in frames if isinstance(f, wire.Publish)]
    assert [(p.sequence, p.wants_ack) for p in pubs] == [(1, True), (2, False)]
    # the latest subscription learns what it missed while disconnected
    proto.receive_data(
        wire.SubOk(sub_id=durable.sub_id).encode()
        + wire.SubOk(sub_id=live.sub_id, offsets=(wire.TopicOffset(topic="b", offset=15),)).encode()
    )
    assert live.gaps == [Gap("b", 11, 4, "reconnect")]
    proto.receive_data(wire.PublishAck(producer_id=9, sequence=1, status=wire.AckStatus.DUPLICATE).encode())
    assert acked.result.duplicate


def test_fail_ends_everything() -> None:
    proto = ready()
    state, _ = proto.subscribe("a")
    ticket = proto.publish_acked("a", b"x")
    proto.fail(ConnectionLostError("gone"))
    assert isinstance(ticket.error, ConnectionLostError)
    assert isinstance(state.error, ConnectionLostError)
    with pytest.raises(ConnectionLostError):
        proto.publish("a", b"y")


def test_reconnect_policy_delays() -> None:
    assert list(Reconnect(5, 0.1, 0.5, 2.0, jitter=0).delays()) == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert list(Reconnect(0).delays()) == []
    forever = Reconnect(None, 0.01, 0.01, jitter=0).delays()
    assert [next(forever) for _ in range(100)] == [0.01] * 100


def test_default_producer_ids_do_not_follow_a_seeded_random() -> None:
    """Two processes that seed ``random`` alike must not share a producer id: the hub would take
    the second one's frames for resends of the first one's and store none of them."""
    import random

    ids = []
    for _ in range(2):
        random.seed(7)
        ids.append(ClientProtocol().buffer.producer_id)
    assert ids[0] != ids[1] and all(0 < i < 1 << 63 for i in ids)
