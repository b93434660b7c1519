"""Acknowledgements cannot lose or poison data: an ACK settles only offsets delivered and pending.

The attacks come from an independent harness: an ACK covering offsets never
delivered moved a durable floor past messages published later (never
delivered), an ACK of 0..2^64-1 made every later SUB_OK unencodable, and a
group member acking past what it received made the group skip what came next.
"""

from __future__ import annotations

import json

import hypothesis.strategies as st
import trio
from hypothesis import given, settings

import wire
from hub.core.acks import AckTracker, ack_refusal
from tests.support.inprocess import StartHub, collect, fill, quiet, start_server
from tests.support.rawclient import RawClient
from tests.support.waiting import await_until

__all__ = ["start_server"]  # the fixture, imported for pytest

U64_MAX = (1 << 64) - 1


def ack(sub_id: int, topic: str, first: int, last: int) -> wire.Ack:
    return wire.Ack(sub_id=sub_id, ranges=(wire.AckRange(topic=topic, first_offset=first, last_offset=last),))


def durable_sub(sub_id: int = 1, name: str = "d") -> wire.Sub:
    return wire.Sub(sub_id=sub_id, patterns=("t",), durable=name, start=wire.StartPosition.EARLIEST,
                    ack_mode=wire.AckMode.EXPLICIT)


async def refused(client: RawClient, sub_id: int) -> wire.Error:
    error = await client.expect(wire.Error, skip=(wire.Heartbeat, wire.Deliver))
    assert error.code is wire.ErrorCode.INVALID_ACK
    assert error.ref == sub_id
    assert await client.recv() is None, "an ERROR closes the connection"
    return error


async def test_an_ack_past_what_was_delivered_is_refused_and_changes_nothing(start_server: StartHub) -> None:
    server = await start_server()
    await fill(server, "t", 1, 5)
    client = await RawClient.connect(server.address)
    await client.send(durable_sub())
    await client.expect(wire.SubOk)
    assert [o for _, o, _ in await collect(client, 5)] == [0, 1, 2, 3, 4]
    await client.send(ack(1, "t", 0, 999))
    error = await refused(client, 1)
    assert "5..999" in error.reason and "'t'" in error.reason and "up to 4" in error.reason
    # Nothing was settled: the durable name resumes at 0, and what is published next arrives.
    again = await RawClient.connect(server.address)
    await again.send(durable_sub())
    ok = await again.expect(wire.SubOk)
    assert ok.offsets == (wire.TopicOffset(topic="t", offset=0),)
    await fill(server, "t", 1, 5)
    assert [o for _, o, _ in await collect(again, 10)] == list(range(10))
    assert server.core.stats.acks_refused == 1


async def test_an_ack_of_every_u64_offset_cannot_poison_the_durable_name(start_server: StartHub) -> None:
    server = await start_server()
    await fill(server, "t", 1, 5)
    client = await RawClient.connect(server.address)
    await client.send(durable_sub())
    await client.expect(wire.SubOk)
    await collect(client, 5)
    await client.send(ack(1, "t", 0, U64_MAX))
    await refused(client, 1)
    for _ in range(2):  # every later attach still gets an encodable SUB_OK
        again = await RawClient.connect(server.address)
        await again.send(durable_sub())
        ok = await again.expect(wire.SubOk)
        assert ok.offsets == (wire.TopicOffset(topic="t", offset=0),)
        await again.aclose()


async def test_acks_within_what_was_delivered_settle_and_repeat_harmlessly(start_server: StartHub) -> None:
    server = await start_server()
    await fill(server, "t", 1, 10)
    client = await RawClient.connect(server.address)
    await client.send(durable_sub())
    await client.expect(wire.SubOk)
    await collect(client, 10)
    await client.send(ack(1, "t", 0, 3), ack(1, "t", 6, 9), ack(1, "t", 0, 3))  # a resent ACK is no error
    await quiet(client, 0.3)
    consumer = server.consumers.get("durable", "d") if server.consumers else None
    assert consumer is not None
    assert consumer.positions["t"].floor == 4
    assert consumer.positions["t"].unacked_runs(0, 9) == [(4, 5)]


async def test_an_empty_range_and_an_ack_without_acks_are_refused(start_server: StartHub) -> None:
    server = await start_server()
    await fill(server, "t", 1, 5)
    client = await RawClient.connect(server.address)
    await client.send(durable_sub())
    await client.expect(wire.SubOk)
    await collect(client, 5)
    await client.send(ack(1, "t", 3, 1))
    assert "empty" in (await refused(client, 1)).reason
    plain = await RawClient.connect(server.address)
    await plain.send(wire.Sub(sub_id=4, patterns=("t",), start=wire.StartPosition.EARLIEST))
    await plain.expect(wire.SubOk)
    await collect(plain, 5)
    await plain.send(ack(4, "t", 0, 4))
    assert "takes no acks" in (await refused(plain, 4)).reason


async def test_a_group_member_cannot_settle_what_the_group_never_delivered(start_server: StartHub) -> None:
    server = await start_server()
    member = await RawClient.connect(server.address)
    group_sub = wire.Sub(sub_id=1, patterns=("t",), group="g", start=wire.StartPosition.EARLIEST)
    await member.send(group_sub)
    await member.expect(wire.SubOk)
    await fill(server, "t", 1, 3)
    assert [o for _, o, _ in await collect(member, 3)] == [0, 1, 2]
    await member.send(ack(1, "t", 0, 500))
    error = await refused(member, 1)
    assert "3..500" in error.reason
    # The group skipped nothing: its pending 0..2 come back, and what is published next arrives.
    again = await RawClient.connect(server.address)
    await again.send(group_sub)
    await again.expect(wire.SubOk)
    await fill(server, "t", 1, 3)
    got = sorted(o for _, o, _ in await collect(again, 6))
    assert got == list(range(6))
    state = json.loads(json.dumps(server.status()))["groups"][0]
    assert state["acked_floor"] == {"t": 0}


async def test_a_late_ack_from_a_member_settles_what_it_was_given(start_server: StartHub) -> None:
    server = await start_server()
    member = await RawClient.connect(server.address)
    await member.send(wire.Sub(sub_id=1, patterns=("t",), group="g", start=wire.StartPosition.EARLIEST,
                               ack_wait_ms=100))
    await member.expect(wire.SubOk)
    await fill(server, "t", 1, 2)
    first = await member.expect(wire.Deliver)
    again = await member.expect(wire.Deliver, skip=(wire.Heartbeat,))  # after ack_wait: owed again
    assert (again.batch.base_offset, again.batch.count) == (first.batch.base_offset, first.batch.count)
    # Acked only now, for the first delivery: still pending, so settled, and no ERROR.
    await member.send(ack(1, "t", first.batch.base_offset, first.batch.last_offset))
    group = server.core.subscriptions.groups["g"]
    await await_until(lambda: group.state.positions["t"].floor == 2, timeout=5, what="the group's floor to reach 2")
    with trio.move_on_after(0.4):
        while True:  # redeliveries already on their way may arrive; an ERROR or EOF must not
            frame = await member.recv()
            assert isinstance(frame, (wire.Deliver, wire.Heartbeat)), frame


# -- the acked floor against a reference model -----------------------------------------------

ranges = st.lists(
    st.tuples(st.integers(0, 40) | st.sampled_from([U64_MAX, U64_MAX - 1, 1 << 63]), st.integers(0, 40)
              | st.sampled_from([U64_MAX, 1 << 63])),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(start=st.integers(0, 10), delivered=st.integers(0, 30), acks=ranges)
def test_the_floor_follows_a_model_and_never_passes_what_was_delivered(
    start: int, delivered: int, acks: list[tuple[int, int]]
) -> None:
    """Arbitrary ACK ranges, checked then applied as the hub does, against a set of acked offsets."""
    delivered_end = start + delivered
    tracker = AckTracker(start)
    acked: set[int] = set()
    for first, last in acks:
        refusal = ack_refusal("t", first, last, floor=tracker.floor, delivered_end=delivered_end)
        model_ok = first <= last and (last < tracker.floor or last < delivered_end)
        assert (refusal is None) == model_ok, (first, last, refusal)
        if refusal is None:
            tracker.ack(first, last)
            acked.update(range(max(first, start), last + 1))
        model_floor = start
        while model_floor in acked:
            model_floor += 1
        assert tracker.floor == model_floor
        assert tracker.floor <= delivered_end
        model_runs: list[tuple[int, int]] = []
        for offset in range(start, delivered_end):
            if offset in acked:
                continue
            if model_runs and model_runs[-1][1] == offset - 1:
                model_runs[-1] = (model_runs[-1][0], offset)
            else:
                model_runs.append((offset, offset))
        assert tracker.unacked_runs(start, delivered_end - 1) == model_runs
