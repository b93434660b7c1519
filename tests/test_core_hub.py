"""The hub's core without sockets: frames in, frames out, a clock moved by hand.

What these check used to need a live hub: routing with patterns, credit, the
slow-consumer policies, group assignment and redelivery, durable positions, and
the interest the core announces to the mesh as subscriptions come and go.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import wire
from tests.support.corehub import CoreHub


@pytest.fixture
def hub() -> Iterator[CoreHub]:
    h = CoreHub()
    yield h
    h.close()


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[CoreHub]:
    h = CoreHub(tmp_path / "data")
    yield h
    h.close()


def test_patterns_route_each_message_once_per_subscription(hub: CoreHub) -> None:
    alice, bob = hub.connect(), hub.connect()
    alice.send(
        wire.Sub(sub_id=1, patterns=("orders.*",)),
        wire.Sub(sub_id=2, patterns=("orders.>", "orders.eu")),  # two ways to one topic: delivered once
        wire.Sub(sub_id=3, patterns=("payments.*",)),
    )
    bob.send(wire.Sub(sub_id=7, patterns=("orders.*.late",)))
    assert [alice.expect(wire.SubOk).sub_id for _ in range(3)] == [1, 2, 3]
    bob.expect(wire.SubOk)
    hub.publish(("orders.eu", "orders.us"), b"both")  # one set, two topics: once per subscription
    hub.publish("orders.eu.late", b"deep")
    by_sub: dict[int, list[bytes]] = {}
    for frame in alice.frames + bob.frames:
        assert isinstance(frame, wire.Deliver)
        by_sub.setdefault(frame.sub_id, []).extend(d for _, _, d in frame.batch.messages())
    assert by_sub == {1: [b"both"], 2: [b"both", b"deep"], 7: [b"deep"]}


def test_credit_holds_deliveries_until_granted(hub: CoreHub) -> None:
    client = hub.connect()
    client.send(wire.Sub(sub_id=1, patterns=("t",), credit=2))
    client.expect(wire.SubOk)
    for i in range(5):
        hub.publish("t", b"%d" % i)
    assert [d for _, _, d in client.delivered()] == [b"0", b"1"]
    client.send(wire.Credit(sub_id=1, credit=2))
    assert [d for _, _, d in client.delivered()] == [b"2", b"3"]
    client.send(wire.Credit(sub_id=1, credit=10))
    assert [d for _, _, d in client.delivered()] == [b"4"]


def test_the_cancel_policy_ends_only_the_slow_subscription(hub: CoreHub) -> None:
    slow, fast = hub.connect(), hub.connect()
    slow.send(wire.Sub(sub_id=1, patterns=("t",), policy=wire.SlowConsumerPolicy.CANCEL))
    fast.send(wire.Sub(sub_id=1, patterns=("t",)))
    slow.expect(wire.SubOk)
    fast.expect(wire.SubOk)
    hub.core.sessions[slow.session.conn_id].out.cap = 2_000
    slow.stop_reading()
    for i in range(50):
        hub.publish("t", b"x" * 100 + b"%d" % i)
    slow.resume_reading()
    ends = [f for f in slow.frames if isinstance(f, wire.SubEnd)]
    assert [(e.sub_id, e.code) for e in ends] == [(1, wire.ErrorCode.OUT_OF_CAPACITY)]
    assert "max_pending_bytes=2000" in ends[0].reason
    assert len(fast.delivered()) == 50 and not fast.closed and not slow.closed
    assert hub.core.stats.cancelled_subscriptions == 1


def test_drop_oldest_says_exactly_what_it_dropped(hub: CoreHub) -> None:
    client = hub.connect()
    client.send(wire.Sub(sub_id=1, patterns=("t",), policy=wire.SlowConsumerPolicy.DROP_OLDEST))
    client.expect(wire.SubOk)
    client.session.out.cap = 1_500
    client.stop_reading()
    for i in range(40):
        hub.publish("t", b"y" * 100 + b"%d" % i)
    client.resume_reading()
    received = {
        off for frame in client.frames if isinstance(frame, wire.Deliver) for off, _, _ in frame.batch.messages()
    }
    gapped = {
        off
        for frame in client.frames
        if isinstance(frame, wire.Gap)
        for off in range(frame.first_offset, frame.first_offset + frame.dropped)
    }
    assert gapped and received and not gapped & received
    assert gapped | received == set(range(40)), "every offset is delivered or announced as dropped"
    newest_kept = min(o for o in received if o > min(gapped))
    assert 39 in received and max(gapped) < newest_kept, "the oldest go, the newest stay"
    assert hub.core.stats.dropped_messages == len(gapped)


def test_a_group_shares_the_work_and_redelivers_after_ack_wait(stored: CoreHub) -> None:
    members = [stored.connect() for _ in range(2)]
    for m in members:
        m.send(wire.Sub(sub_id=1, patterns=("jobs",), group="g", start=wire.StartPosition.EARLIEST, ack_wait_ms=30_000))
        m.expect(wire.SubOk)
    for i in range(6):
        stored.publish("jobs", b"%d" % i)
    stored.pump()
    first = [sorted(off for _, off, _ in m.delivered()) for m in members]
    assert first[0] and first[1] and sorted(first[0] + first[1]) == list(range(6)), first
    worker = members[1]
    acks = tuple(wire.AckRange(topic="jobs", first_offset=o, last_offset=o) for o in first[1])
    worker.send(wire.Ack(sub_id=1, ranges=acks))
    # Member 0 never acks: after ack_wait its messages go back to the group, to the other member.
    stored.clock.advance(29)
    stored.core.tick_groups()
    stored.pump()
    assert not any(m.delivered() for m in members), "not before ack_wait"
    stored.clock.advance(2)
    stored.core.tick_groups()
    stored.pump()
    assert sorted(off for _, off, _ in worker.delivered()) == first[0]
    assert stored.core.subscriptions.groups["g"].redelivered_messages == len(first[0])


def test_a_durable_position_follows_acks_and_a_reattach_resumes_there(stored: CoreHub) -> None:
    sub = wire.Sub(sub_id=4, patterns=("t",), durable="d", start=wire.StartPosition.EARLIEST,
                   ack_mode=wire.AckMode.EXPLICIT)  # fmt: skip
    client = stored.connect()
    client.send(sub)
    client.expect(wire.SubOk)
    for i in range(10):
        stored.publish("t", b"%d" % i)
    stored.pump()
    assert [off for _, off, _ in client.delivered()] == list(range(10))
    client.send(wire.Ack(sub_id=4, ranges=(wire.AckRange(topic="t", first_offset=0, last_offset=4),)))
    stored.core.session_ended(client.session)  # the connection went away
    again = stored.connect()
    again.send(sub)
    assert again.expect(wire.SubOk).offsets == (wire.TopicOffset(topic="t", offset=5),)
    stored.pump()
    assert [off for _, off, _ in again.delivered()] == list(range(5, 10))


class RecordingMesh:
    """A MeshPort that notes what the core asks of the mesh."""

    def __init__(self) -> None:
        self.wanted: set[str] = set()
        self.forwarded: list[tuple[int, tuple[str, ...], int]] = []

    def announce(self, topics: Iterable[str]) -> object:
        self.wanted |= set(topics)
        return None

    def withdraw(self, topics: Iterable[str]) -> object:
        self.wanted -= set(topics)
        return None

    def forward(self, origin_seq: int, timestamp: int, message_set: wire.MessageSet) -> int:
        self.forwarded.append((origin_seq, message_set.topics, message_set.count))
        return 1


def test_interest_is_announced_and_withdrawn_as_subscriptions_come_and_go(stored: CoreHub) -> None:
    mesh = RecordingMesh()
    stored.core.mesh.attach(mesh)
    live, durable = stored.connect(), stored.connect()
    live.send(wire.Sub(sub_id=1, patterns=("a.*", "b")))
    durable.send(wire.Sub(sub_id=1, patterns=("b", "c"), durable="keep", start=wire.StartPosition.EARLIEST))
    assert mesh.wanted == {"a.*", "b", "c"}
    live.send(wire.Unsub(sub_id=1))
    assert mesh.wanted == {"b", "c"}  # "b" is still the durable's
    stored.core.session_ended(durable.session)
    assert mesh.wanted == {"b", "c"}, "a durable name keeps its standing interest while nobody is attached"
    stored.publish(("c", "z"), b"out")
    assert mesh.forwarded == [(1, ("c", "z"), 1)], "every local publish goes to the mesh once, with its origin seq"


def test_forwarded_sets_are_stored_once_and_reach_subscribers(stored: CoreHub) -> None:
    client = stored.connect()
    client.send(wire.Sub(sub_id=1, patterns=("t",)))
    client.expect(wire.SubOk)
    link = stored.core.mesh
    sets = [wire.ForwardSet(origin_seq=s, timestamp=7, messages=wire.MessageSet.build(["t"], [(b"", b"%d" % s)]))
            for s in (1, 2)]  # fmt: skip
    assert link.on_forward(0xBEEF, sets, "peer") == 2
    delivered = client.take()
    assert [(f.batch.origin, f.batch.origin_seq) for f in delivered if isinstance(f, wire.Deliver)] == [
        (0xBEEF, 1), (0xBEEF, 2)
    ]
    assert link.positions() == {0xBEEF: 2}  # what its MESH_HELLO will say: resends are dropped there
