"""Limits one client meets on an in-process hub (issue 17, item 10): each reported with an
ERROR code, nothing of a refused frame stored, and a healthy client served throughout."""

from __future__ import annotations

from pathlib import Path

import trio

import wire
from hub.core.hub import FRAMES_PER_TURN
from tests.support.corehub import CoreHub
from tests.support.inprocess import StartHub, publish, start_server
from tests.support.rawclient import RawClient
from tests.support.scrape import scrape, value
from tests.support.security import user_entry, write_users

__all__ = ["start_server"]  # the fixture


def spray(first: int, count: int, seq: int) -> wire.Publish:
    """One acked publish of one message to ``count`` new topics ``spray.<n>``."""
    return publish(tuple(f"spray.{n}" for n in range(first, first + count)), [b"x"], seq=seq, ack=True)


async def expect_limit(client: RawClient, seq: int, limit: str) -> None:
    error = await client.expect(wire.Error)
    assert error.code is wire.ErrorCode.LIMIT_EXCEEDED
    assert error.ref == seq
    assert f"limit {limit}=" in error.reason, error.reason
    assert await client.recv() is None  # and the connection ends


async def test_topics_created_per_frame_per_connection_and_in_all_are_limited(start_server: StartHub) -> None:
    server = await start_server(max_new_topics_per_frame=100, max_new_topics_per_connection=250, max_topics=350)
    healthy = await RawClient.connect(server.address, name="healthy")
    await healthy.send(publish("healthy", [b"0"], seq=1, ack=True))
    await healthy.expect(wire.PublishAck)

    one = await RawClient.connect(server.address)
    await one.send(spray(0, 101, seq=7))
    await expect_limit(one, 7, "max_new_topics_per_frame")
    assert len(server.store.logs) == 1  # refused whole: nothing of it stored

    two = await RawClient.connect(server.address)
    for seq, first in enumerate((0, 100), 1):
        await two.send(spray(first, 100, seq=seq))
        await two.expect(wire.PublishAck)
    await two.send(spray(0, 50, seq=3))  # existing topics cost nothing
    await two.expect(wire.PublishAck)
    await two.send(spray(200, 51, seq=4))
    await expect_limit(two, 4, "max_new_topics_per_connection")

    three = await RawClient.connect(server.address)
    await three.send(spray(2000, 99, seq=1))
    await three.expect(wire.PublishAck)
    await three.send(spray(3000, 51, seq=2))
    await expect_limit(three, 2, "max_topics")
    assert len(server.store.logs) == 1 + 200 + 99
    assert server.core.stats.topic_limit_refusals == 3

    await healthy.send(publish("healthy", [b"1"], seq=2, ack=True))
    ack = await healthy.expect(wire.PublishAck)
    assert ack.ranges == (wire.OffsetRange(topic="healthy", first_offset=1, num=1),)


def test_a_chunk_creating_many_topics_yields_before_its_next_frame(tmp_path: Path) -> None:
    """The shell lets other connections run between such frames (hub/shell/connection.py)."""
    hub = CoreHub(tmp_path, max_body=1 << 20)
    client = hub.connect()
    frames = b"".join(spray(n * 200, 200, seq=n + 1).encode() for n in range(3))
    more = hub.core.receive_data(client.session, frames)
    assert more and len(hub.store.logs) == 400  # two frames handled: 400 >= 256 new topics
    assert not hub.core.receive_data(client.session, b"")
    assert len(hub.store.logs) == 600
    assert [type(f) for f in client.take()] == [wire.PublishAck] * 3
    hub.close()


def test_a_chunk_of_many_small_frames_yields_every_frames_per_turn(tmp_path: Path) -> None:
    """A client that sends 64 KiB of pings at once must not hold the loop for 13,000 frames:
    after FRAMES_PER_TURN the shell lets other connections run, and the rest follows."""
    hub = CoreHub(tmp_path)
    pinger, healthy = hub.connect(), hub.connect()
    assert hub.core.receive_data(pinger.session, wire.PING.encode() * 1000)
    assert [f.word for f in pinger.take()] == ["pong"] * FRAMES_PER_TURN  # type: ignore[attr-defined]
    healthy.send(publish("healthy", [b"between two turns"], seq=1, ack=True))
    assert healthy.expect(wire.PublishAck).ranges == (wire.OffsetRange(topic="healthy", first_offset=0, num=1),)
    turns = 1
    while True:
        turns += 1
        if not hub.core.receive_data(pinger.session, b""):
            break
    assert turns == -(-1000 // FRAMES_PER_TURN)  # 256 + 256 + 256 + 232
    assert [f.word for f in pinger.take()] == ["pong"] * (1000 - FRAMES_PER_TURN)  # type: ignore[attr-defined]
    hub.close()


async def test_a_slow_drip_sender_is_closed_at_the_frame_deadline(start_server: StartHub) -> None:
    """Bytes are no sign of life: one byte every 50 ms of a frame that never completes still
    leaves the connection silent, and it is closed at the heartbeat deadline (0.2 s x 3)."""
    server = await start_server(heartbeat_interval=0.2, heartbeat_misses=3)
    healthy = await RawClient.connect(server.address, name="healthy")
    drip = await RawClient.connect(server.address, name="drip")
    frame = publish("drip", [bytes(400)], seq=1).encode()
    error: wire.Frame | None = None
    for i in range(len(frame) - 1):  # 20 s of dripping if nothing stops it
        await drip.send(frame[i : i + 1])
        with trio.move_on_after(0.05):
            error = await drip.recv()
        if error is not None and not isinstance(error, wire.Heartbeat):  # the hub's pings go unanswered
            break
        await healthy.send(wire.PING)
        assert (await healthy.expect(wire.Heartbeat)).word in ("ping", "pong")
    assert isinstance(error, wire.Error), error
    assert error.code is wire.ErrorCode.HEARTBEAT_TIMEOUT
    assert server.core.stats.heartbeat_timeouts == 1


def test_replies_a_client_never_reads_count_against_its_pending_cap(tmp_path: Path) -> None:
    """The harness: four clients sent 2M pings each and never read; the pongs were not
    counted against ``--max-pending-bytes`` and the hub grew by ~1.1 GB.  Here: pongs past
    the cap end the connection with LIMIT_EXCEEDED, and they never cost a queue item each."""
    hub = CoreHub(tmp_path, max_pending_bytes=64 << 10)
    client = hub.connect()
    client.stop_reading()
    pings = wire.PING.encode() * 1000
    sent = 0
    while not client.closed and sent < 100:  # 100,000 pings: 900 KB of pongs if nothing stops them
        client.send_bytes(pings)
        sent += 1
        assert len(client.session.out.items) <= 2
    assert client.closed
    pong = len(wire.PONG.encode())
    assert (64 << 10) <= sent * 1000 * pong < (64 << 10) + 1000 * pong  # closed once the pongs passed the cap
    client.resume_reading()
    error = client.take()[-1]
    assert isinstance(error, wire.Error) and error.code is wire.ErrorCode.LIMIT_EXCEEDED
    assert "limit max_pending_bytes=65536" in error.reason
    hub.close()


def test_control_replies_share_queue_items_and_keep_their_order(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path)
    sub = hub.connect()
    sub.send(wire.Sub(sub_id=1, patterns=("t",)))
    sub.expect(wire.SubOk)
    sub.stop_reading()
    sub.send(wire.PING, wire.PING)
    hub.publish("t", b"one")
    sub.send(wire.PING)
    assert len(sub.session.out.items) == 3  # pongs | deliver | pong
    sub.resume_reading()
    kinds = [type(f).__name__ + (f":{f.word}" if isinstance(f, wire.Heartbeat) else "") for f in sub.take()]
    assert kinds == ["Heartbeat:pong", "Heartbeat:pong", "Deliver", "Heartbeat:pong"]
    assert sub.session.out.pending_bytes == sub.session.out.control_bytes == 0
    hub.close()


async def test_topics_created_per_user_are_limited_across_reconnects(start_server: StartHub, tmp_path: Path) -> None:
    users = write_users(tmp_path / "users.toml", user_entry("alice", "alice-pw", publish=[">"]),
                        user_entry("bob", "bob-pw", publish=[">"]))  # fmt: skip
    server = await start_server(auth_file=users, max_new_topics_per_user=5, max_new_topics_per_connection=4,
                                metrics_listen="127.0.0.1:0")  # fmt: skip

    async def as_user(name: str) -> RawClient:
        return await RawClient.connect(server.address, token=f"{name}:{name}-pw".encode())

    async def creates(client: RawClient, seq: int, *topics: str) -> None:
        await client.send(publish(topics, [b"x"], seq=seq, ack=True))
        await client.expect(wire.PublishAck)

    alice = await as_user("alice")
    await creates(alice, 1, "a.0", "a.1", "a.2")
    await alice.aclose()
    alice = await as_user("alice")  # a new connection, the same user: the budget goes on
    await creates(alice, 1, "a.3", "a.4")
    await creates(alice, 2, "a.0")  # an existing topic costs nothing
    await alice.send(publish(("a.0", "a.5"), [b"y"], seq=3, ack=True))
    error = await alice.expect(wire.Error)
    assert (error.code, error.ref) == (wire.ErrorCode.LIMIT_EXCEEDED, 3)
    assert error.reason == "user 'alice' would have created 6 topics, limit max_new_topics_per_user=5 (topic 'a.5')"
    assert await alice.recv() is None
    assert "a.5" not in server.store.logs and server.store.logs["a.0"].next_offset == 2  # refused whole

    bob = await as_user("bob")  # another user's budget is his own
    await creates(bob, 1, "b.0", "b.1", "b.2")
    alice = await as_user("alice")  # and alice's is still spent
    await alice.send(publish("a.6", [b"z"], seq=1, ack=True))
    assert "max_new_topics_per_user=5" in (await alice.expect(wire.Error)).reason

    per_user = server.status()["auth"]["per_user"]
    assert (per_user["alice"]["topics_created"], per_user["alice"]["topic_limit_refused"]) == (5, 2)
    assert (per_user["bob"]["topics_created"], per_user["bob"]["topic_limit_refused"]) == (3, 0)
    assert server.ops is not None
    samples = await trio.to_thread.run_sync(scrape, server.ops.address)
    assert value(samples, "pub0sub_user_topic_limit_refused_total", user="alice") == 2
    assert value(samples, "pub0sub_user_topics_created_total", user="bob") == 3
