"""The hub over real sockets on 127.0.0.1, driven with raw wire frames."""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import wire
from hub.app import HubServer
from hub.config import HubConfig
from hub.core.clients import ClientSession, CloseReason
from hub.shell.connection import ClientConnection
from hub.shell.ports import PortInUseError
from tests.support.rawclient import RawClient
from tests.support.waiting import await_until

StartHub = Callable[..., Awaitable[HubServer]]


@pytest.fixture
def start_server(nursery: trio.Nursery) -> StartHub:
    async def start(**settings: Any) -> HubServer:
        server = HubServer(HubConfig(listen="127.0.0.1:0", **settings))
        await nursery.start(server.serve)
        return server

    return start


def publish(topics: tuple[str, ...] | str, datas: list[bytes], *, seq: int = 0, ack: bool = False,
            producer: int = 0, key: bytes = b"") -> wire.Publish:
    if isinstance(topics, str):
        topics = (topics,)
    mset = wire.MessageSet.build(topics, [(key, d) for d in datas])
    flags = wire.PublishFlags.ACK if ack else wire.PublishFlags.NONE
    return wire.Publish(producer_id=producer, sequence=seq, flags=flags, sets=(mset,))


# Each frame bounded by default: a silent hub fails the test in seconds, not at pytest's timeout.
async def collect(client: RawClient, count: int, *, timeout: float = 10.0) -> list[tuple[str, int, bytes]]:  # noqa: ASYNC109
    got: list[tuple[str, int, bytes]] = []
    while len(got) < count:
        frame = await client.expect(wire.Deliver, timeout)
        got.extend((frame.batch.topic, off, data) for off, _key, data in frame.batch.messages())
    return got


async def subscribe(client: RawClient, sub_id: int, *patterns: str, **options: Any) -> wire.SubOk:
    await client.send(wire.Sub(sub_id=sub_id, patterns=patterns, **options))
    return await client.expect(wire.SubOk)


async def test_hello_must_come_first(start_server: StartHub) -> None:
    server = await start_server()
    client = await RawClient.connect(server.address, hello=False)
    await client.send(wire.Sub(sub_id=1, patterns=("t",)))
    error = await client.expect(wire.Error)
    assert error.code is wire.ErrorCode.UNEXPECTED_FRAME
    assert await client.recv() is None


async def test_unsupported_version(start_server: StartHub) -> None:
    server = await start_server()
    client = await RawClient.connect(server.address, hello=False)
    await client.send(wire.Hello(version=99))
    error = await client.expect(wire.Error)
    assert error.code is wire.ErrorCode.UNSUPPORTED_VERSION


async def test_order_and_offsets(start_server: StartHub) -> None:
    server = await start_server()
    sub = await RawClient.connect(server.address)
    ok = await subscribe(sub, 7, "orders")
    assert ok.offsets == (wire.TopicOffset(topic="orders", offset=0),)
    pub = await RawClient.connect(server.address)
    for batch in range(20):
        await pub.send(publish("orders", [b"%d" % (batch * 50 + i) for i in range(50)]))
    got = await collect(sub, 1000)
    assert [off for _, off, _ in got] == list(range(1000))
    assert [data for _, _, data in got] == [b"%d" % i for i in range(1000)]


class WriterSteps(trio.abc.Instrument):
    """Counts the steps a connection's writer loop takes (in whichever task runs it)."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        awaited: Any = task.coro
        while awaited is not None:
            if getattr(awaited, "cr_code", None) is ClientConnection._write_loop.__code__:
                self.steps += 1
                return
            awaited = getattr(awaited, "cr_await", None)


async def test_deliveries_leave_with_the_publish_that_made_them(start_server: StartHub) -> None:
    """A delivery made while a publish is handled is sent by the publisher's reader before it
    yields (hub/core/flushing.py): no writer task has to wake up for it."""
    server = await start_server()
    sub = await RawClient.connect(server.address)
    await subscribe(sub, 1, "t")
    pub = await RawClient.connect(server.address)
    steps = WriterSteps()
    trio.lowlevel.add_instrument(steps)
    try:
        for i in range(200):  # one at a time: each delivery is its own flush
            await pub.send(publish("t", [b"%d" % i]))
            assert await collect(sub, 1) == [("t", i, b"%d" % i)]
    finally:
        trio.lowlevel.remove_instrument(steps)
    # Woken once per delivery (200+) when the writer sends them; a few here (none, normally).
    assert steps.steps < 20, steps.steps


async def test_a_subscriber_that_reads_late_gets_every_byte_in_order(start_server: StartHub) -> None:
    """Direct flushes that the socket takes only part of hand the rest to the writer, ahead of
    everything queued after it."""
    server = await start_server(max_pending_bytes=64 << 20)
    sub = await RawClient.connect(server.address)
    await subscribe(sub, 1, "t")
    pub = await RawClient.connect(server.address)
    total = 100 * 100
    for batch in range(100):  # 10 MB: more than the kernel buffers hold, so sends go partial
        await pub.send(publish("t", [b"%05d" % (batch * 100 + i) + bytes(995) for i in range(100)]))
    marker = await RawClient.connect(server.address)
    await subscribe(marker, 1, "t")
    await pub.send(publish("t", [b"last"]))
    await collect(marker, 1)
    got = await collect(sub, total + 1, timeout=30)
    assert [off for _, off, _ in got] == list(range(total + 1))
    assert [data[:5] for _, _, data in got[:total]] == [b"%05d" % i for i in range(total)]
    assert got[-1][2] == b"last" and server.core.stats.dropped_messages == 0


async def test_a_failed_send_costs_only_that_connection(start_server: StartHub) -> None:
    """A send to one subscriber fails while its output is flushed from the publisher's reader
    (here: its socket cannot send any more): that connection closes, the publisher and the
    other subscriber go on."""
    server = await start_server()
    doomed = await RawClient.connect(server.address)
    await subscribe(doomed, 1, "t")
    keeper = await RawClient.connect(server.address)
    await subscribe(keeper, 1, "t")
    pub = await RawClient.connect(server.address)
    await pub.send(publish("t", [b"before"]))
    assert await collect(doomed, 1) == [("t", 0, b"before")]
    assert await collect(keeper, 1) == [("t", 0, b"before")]
    conn = _conn_of(server, doomed)
    # Its next send fails with EPIPE; its reader sees nothing wrong, so only the send can tell.
    conn.stream.socket.shutdown(socket.SHUT_WR)
    await pub.send(publish("t", [b"after"]))
    assert await collect(keeper, 1) == [("t", 1, b"after")]
    assert conn.session.closing is CloseReason.WRITE_FAILED
    await await_until(lambda: conn.session.conn_id not in server.core.sessions, timeout=5,
                      what="the failed connection removed")  # fmt: skip
    await pub.send(publish("t", [b"later"]))
    assert await collect(keeper, 1) == [("t", 2, b"later")]


def _conn_of(server: HubServer, client: RawClient) -> ClientConnection:
    """The hub's side of ``client``'s connection (matched by the client's local port)."""
    port = client.stream.socket.getsockname()[1]
    session: ClientSession = next(c for c in server.core.sessions.values() if c.peer.endswith(f":{port}"))
    assert isinstance(session.transport, ClientConnection)
    return session.transport


async def test_message_reaches_a_subscription_once(start_server: StartHub) -> None:
    server = await start_server()
    both = await RawClient.connect(server.address)
    await subscribe(both, 1, "b", "a", "c.*")
    only_b = await RawClient.connect(server.address)
    await subscribe(only_b, 2, "b")
    pub = await RawClient.connect(server.address)
    await pub.send(publish(("a", "b", "c.x"), [b"one"]), publish("b", [b"two"]))
    # The batch names the first of the message's topics the subscription matches.
    assert await collect(both, 2) == [("a", 0, b"one"), ("b", 1, b"two")]
    assert await collect(only_b, 2) == [("b", 0, b"one"), ("b", 1, b"two")]


async def test_patterns(start_server: StartHub) -> None:
    server = await start_server()
    star = await RawClient.connect(server.address)
    await subscribe(star, 1, "sensors.*.temp")
    rest = await RawClient.connect(server.address)
    await subscribe(rest, 1, "sensors.>")
    pub = await RawClient.connect(server.address)
    for topic in ("sensors.a.temp", "sensors.a.hum", "sensors.b.temp", "sensors", "other.a.temp"):
        await pub.send(publish(topic, [topic.encode()]))
    assert [d for _, _, d in await collect(star, 2)] == [b"sensors.a.temp", b"sensors.b.temp"]
    assert [d for _, _, d in await collect(rest, 3)] == [b"sensors.a.temp", b"sensors.a.hum", b"sensors.b.temp"]


async def test_add_and_remove_topics_on_a_live_subscription(start_server: StartHub) -> None:
    server = await start_server()
    sub = await RawClient.connect(server.address)
    await subscribe(sub, 1, "x")
    pub = await RawClient.connect(server.address)
    await pub.send(publish("y", [b"y0"]))
    await sub.send(wire.SubUpdate(sub_id=1, op=wire.UpdateOp.ADD, patterns=("y",)))
    ok = await sub.expect(wire.SubOk)
    assert ok.offsets == (wire.TopicOffset(topic="y", offset=1),)
    await pub.send(publish("y", [b"y1"]), publish("x", [b"x0"]))
    assert await collect(sub, 2) == [("y", 1, b"y1"), ("x", 0, b"x0")]
    await sub.send(wire.SubUpdate(sub_id=1, op=wire.UpdateOp.REMOVE, patterns=("x",)))
    await sub.expect(wire.SubOk)
    await pub.send(publish("x", [b"x1"]), publish("y", [b"y2"]))
    assert await collect(sub, 1) == [("y", 2, b"y2")]


async def test_acked_publish_reports_offsets(start_server: StartHub) -> None:
    server = await start_server()
    pub = await RawClient.connect(server.address)
    await pub.send(publish(("a", "b"), [b"1", b"2"], seq=1, ack=True))
    await pub.send(publish("a", [b"3"], seq=2, ack=True))
    first = await pub.expect(wire.PublishAck)
    second = await pub.expect(wire.PublishAck)
    assert first.sequence == 1 and first.status is wire.AckStatus.STORED
    assert first.ranges == (wire.OffsetRange(topic="a", first_offset=0, num=2),
                            wire.OffsetRange(topic="b", first_offset=0, num=2))
    assert second.ranges == (wire.OffsetRange(topic="a", first_offset=2, num=1),)
    assert second.timestamp >= first.timestamp > 0


async def test_idempotent_producer_stores_a_retried_batch_once(start_server: StartHub) -> None:
    server = await start_server()
    sub = await RawClient.connect(server.address)
    await subscribe(sub, 1, "t")
    pub = await RawClient.connect(server.address)
    frame = publish("t", [b"once"], seq=1, ack=True, producer=42)
    await pub.send(frame)
    assert (await pub.expect(wire.PublishAck)).status is wire.AckStatus.STORED
    await pub.aclose()
    retry = await RawClient.connect(server.address)  # a reconnect, same producer id
    await retry.send(frame, publish("t", [b"next"], seq=2, ack=True, producer=42))
    assert (await retry.expect(wire.PublishAck)).status is wire.AckStatus.DUPLICATE
    assert (await retry.expect(wire.PublishAck)).status is wire.AckStatus.STORED
    assert await collect(sub, 2) == [("t", 0, b"once"), ("t", 1, b"next")]


async def test_wildcard_in_published_topic_is_refused(start_server: StartHub) -> None:
    server = await start_server()
    pub = await RawClient.connect(server.address)
    await pub.send(publish("a.*", [b"x"], seq=9))
    error = await pub.expect(wire.Error)
    assert error.code is wire.ErrorCode.INVALID_TOPIC and error.ref == 9
    assert await pub.recv() is None


async def test_bad_input_gets_error_and_others_keep_working(start_server: StartHub) -> None:
    server = await start_server()
    sub = await RawClient.connect(server.address)
    await subscribe(sub, 1, "t")
    pub = await RawClient.connect(server.address)
    cases = [
        (b"\xff\x00\x00\x00\x00", wire.ErrorCode.UNKNOWN_OPCODE),
        (b"\x22\xff\xff\xff\xff", wire.ErrorCode.FRAME_TOO_LARGE),
        (b"\x28\x00\x00\x00\x40" + bytes(64), wire.ErrorCode.UNEXPECTED_FRAME),  # DELIVER is hub -> client only
        (wire.Heartbeat().encode()[:5] + b"pang", wire.ErrorCode.MALFORMED_FRAME),
        (b"\x22\x00\x00\x00\x30" + bytes(48), wire.ErrorCode.MALFORMED_FRAME),
    ]
    for raw, code in cases:
        bad = await RawClient.connect(server.address)
        await bad.send(raw)
        error = await bad.expect(wire.Error)
        assert error.code is code, (raw, error)
        assert await bad.recv() is None
        await pub.send(publish("t", [raw[:1]]))
    got = await collect(sub, len(cases))
    assert [d for _, _, d in got] == [raw[:1] for raw, _ in cases]
    assert server.core.stats.protocol_errors == len(cases)


async def test_frame_too_large_is_refused_before_the_body(start_server: StartHub) -> None:
    server = await start_server(max_body=1024)
    client = await RawClient.connect(server.address)
    # Only the header is sent: the hub must answer without waiting for 2000 body bytes.
    await client.send(b"\x22\x00\x00\x07\xd0")
    error = await client.expect(wire.Error, timeout=2)
    assert error.code is wire.ErrorCode.FRAME_TOO_LARGE
    assert "1024" in error.reason


async def test_silent_client_is_detected(start_server: StartHub) -> None:
    server = await start_server(heartbeat_interval=0.2, heartbeat_misses=2)
    client = await RawClient.connect(server.address)
    await subscribe(client, 1, "t")
    assert server.core.router.match("t")
    ping = await client.expect(wire.Heartbeat, timeout=2)
    assert ping.word == "ping"
    error = await client.expect(wire.Error, timeout=3, skip=(wire.Heartbeat,))
    assert error.code is wire.ErrorCode.HEARTBEAT_TIMEOUT
    await await_until(lambda: not server.core.sessions, timeout=2, what="the timed-out connection removed")
    assert server.core.router.match("t") == ()
    assert server.core.stats.heartbeat_timeouts == 1


async def test_answering_pings_keeps_a_client_alive(start_server: StartHub) -> None:
    server = await start_server(heartbeat_interval=0.1, heartbeat_misses=2)
    client = await RawClient.connect(server.address)
    with trio.move_on_after(0.8):
        while True:
            frame = await client.recv()
            assert isinstance(frame, wire.Heartbeat), frame
            await client.send(wire.PONG)
    assert len(server.core.sessions) == 1
    await client.send(wire.PING)
    assert (await client.expect(wire.Heartbeat)).word in ("ping", "pong")


async def _flood(pub: RawClient, batches: int, per_batch: int = 100, size: int = 1000) -> None:
    payload = [bytes(size)] * per_batch
    for _ in range(batches):
        await pub.send(publish("t", payload))


async def test_slow_consumer_cancel(start_server: StartHub) -> None:
    server = await start_server(max_pending_bytes=256 << 10)
    slow = await RawClient.connect(server.address)
    await subscribe(slow, 1, "t")
    fast = await RawClient.connect(server.address)
    await subscribe(fast, 1, "t")
    pub = await RawClient.connect(server.address)
    total = 400 * 100  # 40 MB: far more than the kernel buffers of the slow socket
    got = []
    for _ in range(400):
        # Closed loop: the fast subscriber drains each batch before the next is
        # published, so only the one that never reads can fall behind the cap.
        await _flood(pub, 1)
        got += await collect(fast, 100, timeout=30)
    assert len(got) == total
    # The slow subscriber reads only now: some deliveries, then SUB_END OUT_OF_CAPACITY.
    end = await slow.expect(wire.SubEnd, timeout=10, skip=(wire.Deliver,))
    assert end.code is wire.ErrorCode.OUT_OF_CAPACITY and end.sub_id == 1
    assert server.core.stats.cancelled_subscriptions == 1
    status = server.status()
    assert status["counters"]["cancelled_subscriptions"] == 1


async def test_slow_consumer_drop_oldest_says_what_was_dropped(start_server: StartHub) -> None:
    cap = 256 << 10
    server = await start_server(max_pending_bytes=cap)
    slow = await RawClient.connect(server.address)
    await subscribe(slow, 1, "t", policy=wire.SlowConsumerPolicy.DROP_OLDEST)
    pub = await RawClient.connect(server.address)
    await _flood(pub, 400)
    marker = await RawClient.connect(server.address)
    await subscribe(marker, 1, "t")
    await pub.send(publish("t", [b"last"]))
    await collect(marker, 1)
    conn = next(c for c in server.core.sessions.values() if 1 in c.subs and c.subs[1].policy.name == "DROP_OLDEST")
    # Memory stays bounded by the cap (+ one write chunk in flight).
    assert conn.out.pending_bytes <= cap + server.config.write_chunk
    seen: list[int] = []
    dropped = 0
    total = 400 * 100 + 1
    while len(seen) + dropped < total:
        frame = await slow.recv(timeout=10)
        if isinstance(frame, wire.Deliver):
            seen.extend(off for off, _, _ in frame.batch.messages())
        elif isinstance(frame, wire.Gap):
            # A gap names exactly the offsets missing at that point of the stream.
            assert frame.first_offset == (seen[-1] + 1 if seen else 0) or dropped
            dropped += frame.dropped
        else:
            raise AssertionError(frame)
    assert dropped > 0
    assert seen == sorted(seen) and seen[-1] == total - 1
    assert len(seen) + dropped == total
    assert server.core.stats.dropped_messages == dropped


async def test_credit_limits_messages_in_flight(start_server: StartHub) -> None:
    server = await start_server()
    sub = await RawClient.connect(server.address)
    await subscribe(sub, 3, "t", credit=5)
    pub = await RawClient.connect(server.address)
    await pub.send(publish("t", [b"%d" % i for i in range(12)]))
    assert [o for _, o, _ in await collect(sub, 5)] == [0, 1, 2, 3, 4]
    with trio.move_on_after(0.2):
        frame = await sub.recv()
        raise AssertionError(f"no credit left, yet got {frame}")
    await sub.send(wire.Credit(sub_id=3, credit=4))
    assert [o for _, o, _ in await collect(sub, 4)] == [5, 6, 7, 8]
    await sub.send(wire.Credit(sub_id=3, credit=100))
    assert [o for _, o, _ in await collect(sub, 3)] == [9, 10, 11]


async def test_unsubscribe_and_unknown_ids(start_server: StartHub) -> None:
    server = await start_server()
    client = await RawClient.connect(server.address)
    await subscribe(client, 1, "t")
    await client.send(wire.Unsub(sub_id=1))
    end = await client.expect(wire.SubEnd)
    assert end.code is wire.ErrorCode.UNSUBSCRIBED
    await client.send(wire.Unsub(sub_id=1))
    assert (await client.expect(wire.SubEnd)).code is wire.ErrorCode.UNKNOWN_SUBSCRIPTION
    assert server.core.router.match("t") == ()
    await subscribe(client, 1, "t")  # the id is free again
    await client.send(wire.Sub(sub_id=1, patterns=("u",)))
    error = await client.expect(wire.Error)
    assert error.code is wire.ErrorCode.DUPLICATE_SUBSCRIPTION and error.ref == 1


async def test_subscription_level_refusals_keep_the_connection(start_server: StartHub) -> None:
    server = await start_server(max_topics_per_connection=3, max_subscriptions=2)
    client = await RawClient.connect(server.address)
    await client.send(wire.Sub(sub_id=1, patterns=("a..b",)))
    assert (await client.expect(wire.SubEnd)).code is wire.ErrorCode.INVALID_TOPIC
    await client.send(wire.Sub(sub_id=2, patterns=("a", "b", "c", "d")))
    assert (await client.expect(wire.SubEnd)).code is wire.ErrorCode.LIMIT_EXCEEDED
    await client.send(wire.Sub(sub_id=3, patterns=("t",), start=wire.StartPosition.EARLIEST))
    assert (await client.expect(wire.SubEnd)).code is wire.ErrorCode.POSITION_UNAVAILABLE
    await subscribe(client, 4, "a")
    await subscribe(client, 5, "b")
    await client.send(wire.Sub(sub_id=6, patterns=("c",)))
    assert (await client.expect(wire.SubEnd)).code is wire.ErrorCode.LIMIT_EXCEEDED
    await client.send(wire.PING)
    assert (await client.expect(wire.Heartbeat)).word == "pong"


async def test_connection_limit(start_server: StartHub) -> None:
    server = await start_server(max_connections=2)
    first = await RawClient.connect(server.address)
    second = await RawClient.connect(server.address)  # keep a reference: a collected client disconnects
    refused = await RawClient.connect(server.address, hello=False)
    error = await refused.expect(wire.Error)
    assert error.code is wire.ErrorCode.LIMIT_EXCEEDED
    await first.send(wire.PING)
    assert (await first.expect(wire.Heartbeat)).word == "pong"
    assert server.core.stats.connections_refused == 1
    await second.aclose()


async def test_status_document(start_server: StartHub) -> None:
    server = await start_server(name="alpha")
    client = await RawClient.connect(server.address, name="tester")
    await subscribe(client, 1, "t", "u.*")
    await client.send(publish("t", [b"x"] * 3))
    await collect(client, 3)
    await client.send(wire.Status())
    reply = await client.expect(wire.StatusReply)
    doc = json.loads(reply.document)
    assert doc["name"] == "alpha"
    assert doc["connections"] == 1 and doc["subscriptions"] == 1 and doc["topics"] == 1
    assert doc["counters"]["messages_in"] == 3
    assert doc["connection_list"][0]["name"] == "tester"
    assert doc["connection_list"][0]["subs"][0]["patterns"] == ["t", "u.*"]


async def test_serve_on_a_port_in_use_raises_and_frees_the_data_dir(tmp_path: Path) -> None:
    # The CLI checks the ports first; this is the check at bind time, for a port taken in between.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        address = f"127.0.0.1:{squatter.getsockname()[1]}"
        server = HubServer(HubConfig(listen=address, data_dir=tmp_path / "data"))
        with pytest.raises(PortInUseError, match=f"^address {address} is in use$"):
            await server.serve()
    # serve() closed the storage on its way out, lock included: the directory can be opened again.
    again = HubServer(HubConfig(listen="127.0.0.1:0", data_dir=tmp_path / "data"))
    assert again.store is not None
    again.store.close()
