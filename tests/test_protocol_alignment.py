"""Where the hub and docs/protocol.md disagreed (issue 17, "Also"), one test per frame for the
side chosen: a per-subscription limit is a SUB_END, a refused SUB_UPDATE ends its subscription
with one SUB_END, a request that expects an answer about an unknown subscription gets one while
ACK and CREDIT for it are dropped, and reserved PUBLISH flag bits are refused."""

from __future__ import annotations

import wire
from hub.core.subscribing import SubscriptionLimits
from tests.support.corehub import CoreHub


def test_a_per_subscription_limit_is_a_sub_end_and_the_connection_carries_on() -> None:
    core = CoreHub(subscriptions=SubscriptionLimits(max_subscriptions=1, max_topics_per_connection=3))
    client = core.connect()
    client.send(wire.Sub(sub_id=1, patterns=("a",)), wire.Sub(sub_id=2, patterns=("b",)))
    client.expect(wire.SubOk)
    end = client.expect(wire.SubEnd)
    assert (end.sub_id, end.code) == (2, wire.ErrorCode.LIMIT_EXCEEDED) and "max_subscriptions=1" in end.reason
    client.send(wire.SubUpdate(sub_id=1, op=wire.UpdateOp.ADD, patterns=("b", "c", "d")))
    end = client.expect(wire.SubEnd)
    assert (end.sub_id, end.code) == (1, wire.ErrorCode.LIMIT_EXCEEDED) and "max_topics_per_connection" in end.reason
    assert not client.closed and core.publish("a", b"still served").status is wire.AckStatus.STORED


def test_a_refused_sub_update_sends_one_sub_end_and_ends_the_subscription() -> None:
    core = CoreHub()
    client = core.connect()
    client.send(wire.Sub(sub_id=1, patterns=("a",)))
    client.expect(wire.SubOk)
    client.send(wire.SubUpdate(sub_id=1, op=wire.UpdateOp.ADD, patterns=("b..c",)))
    frames = client.take()
    assert len(frames) == 1 and isinstance(frames[0], wire.SubEnd), frames
    assert frames[0].code is wire.ErrorCode.INVALID_TOPIC and "'b..c'" in frames[0].reason
    core.publish("a", b"x")
    assert client.take() == []  # ended: nothing more for it
    client.send(wire.Unsub(sub_id=1))
    assert client.expect(wire.SubEnd).code is wire.ErrorCode.UNKNOWN_SUBSCRIPTION


def test_requests_about_an_unknown_subscription_are_answered_and_one_way_frames_dropped() -> None:
    core = CoreHub()
    client = core.connect()
    client.send(wire.Credit(sub_id=9, credit=5),
                wire.Ack(sub_id=9, ranges=(wire.AckRange(topic="t", first_offset=0, last_offset=0),)))  # fmt: skip
    assert client.take() == [] and not client.closed  # they may cross the subscription's SUB_END
    client.send(wire.Unsub(sub_id=9), wire.SubUpdate(sub_id=9, op=wire.UpdateOp.ADD, patterns=("t",)))
    ends = [client.expect(wire.SubEnd), client.expect(wire.SubEnd)]
    assert [(e.sub_id, e.code) for e in ends] == [(9, wire.ErrorCode.UNKNOWN_SUBSCRIPTION)] * 2


def test_reserved_publish_flag_bits_are_refused() -> None:
    core = CoreHub()
    client = core.connect()
    frame = bytearray(wire.Publish(sequence=4, flags=wire.PublishFlags.ACK,
                                   sets=(wire.MessageSet.build(("t",), [(b"", b"x")]),)).encode())  # fmt: skip
    frame[5 + 16] = 0x05  # ACK and reserved bit 2
    core.core.receive_data(client.session, bytes(frame))
    error = client.expect(wire.Error)
    hello = len(wire.Hello(client_name="test").encode())  # the stream's offsets count the HELLO before it
    assert error.code is wire.ErrorCode.MALFORMED_FRAME and f"at byte {hello + 21}" in error.reason
    assert "reserved" in error.reason
    assert client.closed and core.core.publisher.memory_topics == {}
