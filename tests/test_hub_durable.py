"""Topic logs, followers, durable subscriptions and groups: in-process hubs on a temp data dir."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import wire
from hub.app import HubServer
from hub.config import HubConfig
from tests.support.inprocess import StartHub, WallClockAt, collect, fill, publish, quiet, start_server
from tests.support.rawclient import RawClient
from tests.support.waiting import await_until

__all__ = ["start_server"]  # the fixture, imported for pytest


async def test_start_positions(start_server: StartHub) -> None:
    server = await start_server()
    await fill(server, "t", 5, 10)
    cases = [
        (dict(start=wire.StartPosition.EARLIEST), 0),
        (dict(start=wire.StartPosition.OFFSET, offsets=(wire.TopicOffset(topic="t", offset=37),)), 37),
        (dict(start=wire.StartPosition.LATEST, durable="fresh"), 50),
    ]
    for i, (options, first) in enumerate(cases):
        client = await RawClient.connect(server.address)
        await client.send(wire.Sub(sub_id=i, patterns=("t",), **options))
        ok = await client.expect(wire.SubOk)
        assert ok.offsets == (wire.TopicOffset(topic="t", offset=first),)
        if first < 50:
            got = await collect(client, 50 - first)
            assert [o for _, o, _ in got] == list(range(first, 50))
        await quiet(client)


async def test_a_replay_lets_the_rest_of_the_hub_run(start_server: StartHub) -> None:
    """A follower reads one step at a time: a replay from earliest with room to spare in the
    queue must not read the whole log before anything else (here its own writer) runs."""
    server = await start_server(max_pending_bytes=1 << 30)
    pub = await RawClient.connect(server.address)
    for b in range(100):  # 10 MB: about 40 follower steps of 256 KiB
        await pub.send(publish("t", [bytes(1000)] * 100, seq=b + 1, ack=True))
    for _ in range(100):
        await pub.expect(wire.PublishAck)
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("t",), start=wire.StartPosition.EARLIEST))
    await client.expect(wire.SubOk)
    first = await client.expect(wire.Deliver)
    conn = next(c for c in server.core.sessions.values() if 1 in c.subs)
    follower = conn.subs[1].follower
    assert follower is not None
    # The first batch is out while the follower is still early in the log.
    assert follower.positions["t"] < 5_000, follower.positions
    rest = await collect(client, 10_000 - first.batch.count)
    assert [off for off, _, _ in first.batch.messages()] + [off for _, off, _ in rest] == list(range(10_000))


async def test_start_at_a_timestamp(start_server: StartHub) -> None:
    clock = WallClockAt(1_000_000)
    server = await start_server(clock=clock)
    pub = await RawClient.connect(server.address)
    for i in range(6):
        clock.us = 1_000_000 + i * 1000
        await pub.send(publish("t", [b"%d" % i], seq=i, ack=True))
        await pub.expect(wire.PublishAck)
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("t",), start=wire.StartPosition.TIMESTAMP, start_value=1_002_500))
    await client.expect(wire.SubOk)
    assert [o for _, o, _ in await collect(client, 3)] == [3, 4, 5]


async def test_replay_of_several_topics_delivers_a_message_once(start_server: StartHub) -> None:
    server = await start_server()
    pub = await RawClient.connect(server.address)
    await pub.send(publish(("a", "b"), [b"both"], ack=True), publish("b", [b"only-b"], ack=True))
    await pub.expect(wire.PublishAck)
    await pub.expect(wire.PublishAck)
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("b", "a"), start=wire.StartPosition.EARLIEST))
    await client.expect(wire.SubOk)
    got = sorted(await collect(client, 2))
    assert got == [("a", 0, b"both"), ("b", 1, b"only-b")]
    await quiet(client)


async def test_follower_picks_up_topics_created_later(start_server: StartHub) -> None:
    server = await start_server()
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("x.>",), start=wire.StartPosition.EARLIEST))
    await client.expect(wire.SubOk)
    pub = await RawClient.connect(server.address)
    await pub.send(publish("x.new", [b"1", b"2"]), publish("y", [b"no"]), publish("x.other.deep", [b"3"]))
    assert sorted(await collect(client, 3)) == [("x.new", 0, b"1"), ("x.new", 1, b"2"), ("x.other.deep", 0, b"3")]


async def test_follower_respects_credit(start_server: StartHub) -> None:
    server = await start_server()
    await fill(server, "t", 1, 20)
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("t",), start=wire.StartPosition.EARLIEST, credit=7))
    await client.expect(wire.SubOk)
    assert [o for _, o, _ in await collect(client, 7)] == list(range(7))
    await quiet(client)
    await client.send(wire.Credit(sub_id=1, credit=20))
    assert [o for _, o, _ in await collect(client, 13)] == list(range(7, 20))


async def test_fsync_durability_group_commits(start_server: StartHub) -> None:
    server = await start_server(durability="fsync")
    pub = await RawClient.connect(server.address)
    frames = [publish("t", [b"x"] * 10, seq=i, ack=True) for i in range(200)]
    await pub.send(*frames)
    acks = [await pub.expect(wire.PublishAck) for _ in frames]
    assert [a.sequence for a in acks] == list(range(200))
    assert [a.ranges[0].first_offset for a in acks] == list(range(0, 2000, 10))
    assert server.store is not None
    # One fsync served many publishes: far fewer fsyncs than acknowledged batches.
    assert 1 <= server.store.fsyncs < 200
    segment = server.store.logs["t"].segments[-1]
    assert segment.synced == segment.size


async def test_retention_keeps_what_a_durable_needs_and_gaps_the_rest(start_server: StartHub) -> None:
    server = await start_server(segment_bytes=2000, retention_bytes=4000, retention_check_seconds=0.05)
    durable = await RawClient.connect(server.address)
    await durable.send(wire.Sub(sub_id=1, patterns=("t",), durable="keeper", start=wire.StartPosition.EARLIEST,
                                ack_mode=wire.AckMode.EXPLICIT))
    await durable.expect(wire.SubOk)
    await fill(server, "t", 40, 5)
    got = await collect(durable, 200)
    assert server.store is not None
    topic_log = server.store.logs["t"]
    await trio.sleep(0.3)
    assert topic_log.first_offset == 0, "nothing acknowledged yet: every segment is still needed"
    await durable.send(wire.Ack(sub_id=1, ranges=(wire.AckRange(topic="t", first_offset=0, last_offset=149),)))
    await await_until(lambda: topic_log.first_offset > 0, timeout=5, what="retention to drop acknowledged segments",
                      interval=0.05)  # fmt: skip
    assert 0 < topic_log.first_offset <= 150
    assert topic_log.size_bytes <= 4000 + 2000 * 2
    first = topic_log.first_offset
    earliest = await RawClient.connect(server.address)
    await earliest.send(wire.Sub(sub_id=8, patterns=("t",), start=wire.StartPosition.EARLIEST))
    await earliest.expect(wire.SubOk)
    # "earliest" is the oldest message still retained: no gap to report.
    assert [o for _, o, _ in await collect(earliest, 200 - first)] == list(range(first, 200))
    reader = await RawClient.connect(server.address)
    await reader.send(wire.Sub(sub_id=9, patterns=("t",), start=wire.StartPosition.OFFSET,
                               offsets=(wire.TopicOffset(topic="t", offset=0),)))
    await reader.expect(wire.SubOk)
    # Asking for removed offsets gets an explicit GAP for exactly them.
    gap = await reader.expect(wire.Gap)
    assert (gap.first_offset, gap.dropped) == (0, topic_log.first_offset)
    rest = await collect(reader, 200 - topic_log.first_offset)
    assert [o for _, o, _ in rest] == list(range(topic_log.first_offset, 200))
    assert len(got) == 200


async def test_durable_resumes_after_a_restart(start_server: StartHub, nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await start_server()
    await fill(server, "t", 4, 25)
    client = await RawClient.connect(server.address)
    sub = wire.Sub(sub_id=3, patterns=("t",), durable="d1", start=wire.StartPosition.EARLIEST,
                   ack_mode=wire.AckMode.EXPLICIT)
    await client.send(sub)
    await client.expect(wire.SubOk)
    await collect(client, 100)
    await client.send(wire.Ack(sub_id=3, ranges=(wire.AckRange(topic="t", first_offset=0, last_offset=59),
                                                  wire.AckRange(topic="t", first_offset=70, last_offset=79))))
    await trio.sleep(0.5)  # consumers.json is saved every 0.2 s
    await server.aclose()
    again = await start_server()
    assert again.hub_id == server.hub_id
    client = await RawClient.connect(again.address)
    await client.send(sub)
    ok = await client.expect(wire.SubOk)
    assert ok.offsets == (wire.TopicOffset(topic="t", offset=60),)
    assert [o for _, o, _ in await collect(client, 40)] == list(range(60, 100))
    status = again.status()
    assert status["durables"][0]["name"] == "d1"


async def test_group_shares_and_redelivers(start_server: StartHub) -> None:
    server = await start_server()
    members = [await RawClient.connect(server.address) for _ in range(2)]
    for m in members:
        await m.send(wire.Sub(sub_id=1, patterns=("jobs",), group="workers", start=wire.StartPosition.EARLIEST,
                              ack_wait_ms=300))
        await m.expect(wire.SubOk)
    await fill(server, "jobs", 10, 10)
    # Member 0 takes what it gets and never acks; member 1 acks everything it sees.
    taken: list[int] = []
    acked: list[int] = []

    async def hoard() -> None:
        while True:
            frame = await members[0].recv(timeout=10)
            if isinstance(frame, wire.Deliver):
                taken.extend(o for o, _, _ in frame.batch.messages())

    async def work() -> None:
        while len(set(acked)) < 100:
            frame = await members[1].expect(wire.Deliver, 10, skip=(wire.Heartbeat,))
            acked.extend(o for o, _, _ in frame.batch.messages())
            await members[1].send(wire.Ack(sub_id=1, ranges=(
                wire.AckRange(topic="jobs", first_offset=frame.batch.base_offset,
                              last_offset=frame.batch.last_offset),)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hoard)
        with trio.fail_after(15):
            await work()
        nursery.cancel_scope.cancel()
    assert taken, "round robin gave member 0 some messages"
    assert sorted(set(acked)) == list(range(100)), "member 1 got member 0's unacked messages after ack_wait"
    group = server.core.subscriptions.groups["workers"]
    assert group.redelivered_messages >= len(set(taken) - set(acked[: len(acked) - len(taken)]))
    assert group.pending_count() == 0 or group.pending_count(group.members[0]) > 0
    doc = json.loads(json.dumps(server.status()))
    assert doc["groups"][0]["group"] == "workers"


async def test_member_leaving_gives_its_pending_back(start_server: StartHub) -> None:
    server = await start_server()
    leaver = await RawClient.connect(server.address)
    stayer = await RawClient.connect(server.address)
    for m in (leaver, stayer):
        await m.send(wire.Sub(sub_id=1, patterns=("jobs",), group="g", start=wire.StartPosition.EARLIEST))
        await m.expect(wire.SubOk)
    await fill(server, "jobs", 6, 5)
    first = await leaver.expect(wire.Deliver)
    await leaver.aclose()
    seen: set[int] = set()
    with trio.fail_after(10):
        while len(seen) < 30:
            frame = await stayer.expect(wire.Deliver, skip=(wire.Heartbeat,))
            seen.update(o for o, _, _ in frame.batch.messages())
            await stayer.send(wire.Ack(sub_id=1, ranges=(wire.AckRange(
                topic="jobs", first_offset=frame.batch.base_offset, last_offset=frame.batch.last_offset),)))
    assert set(range(first.batch.base_offset, first.batch.last_offset + 1)) <= seen


async def test_groups_and_replay_need_a_data_dir(nursery: trio.Nursery) -> None:
    server = HubServer(HubConfig(listen="127.0.0.1:0"))
    await nursery.start(server.serve)
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("t",), group="g"))
    end = await client.expect(wire.SubEnd)
    assert end.code is wire.ErrorCode.POSITION_UNAVAILABLE and "--data-dir" in end.reason


async def test_decode_reads_a_segment(start_server: StartHub, tmp_path: Path) -> None:
    server = await start_server()
    await fill(server, "orders.eu", 3, 4)
    assert server.store is not None
    segment = server.store.logs["orders.eu"].segments[0].path
    decoder = wire.FrameDecoder(accept=wire.LOG_OPCODES)
    decoder.feed(segment.read_bytes())
    frames = list(decoder)
    decoder.close()
    assert [f.name for f in frames] == ["SEGMENT_HEADER"] + ["LOG_BATCH"] * 3
    assert frames[3].batch.base_offset == 8
