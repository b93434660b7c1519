"""Read-side backpressure (hub/core/read_pause.py): a client that leaves its replies unread
is not read from, costs the hub a bounded number of answers, is closed at the slow-consumer
deadline, and the hub serves everyone else meanwhile with nothing acknowledged lost."""

from __future__ import annotations

from pathlib import Path

import trio

import wire
from hub.core.hub import HubCore
from hub.core.read_pause import READ_PAUSE_REPLY_BYTES, ReplyBacklog, pause_threshold
from tests.support.corehub import CoreHub
from tests.support.inprocess import StartHub, collect, publish, start_server
from tests.support.rawclient import RawClient

__all__ = ["start_server"]  # the fixture

PINGS = wire.PING.encode() * 7000  # 63,000 bytes: one read's worth
CAP = 1 << 20


async def ping_until_not_read(stream: trio.SocketStream, *, limit: int = 64 << 20) -> tuple[int, bytes]:
    """Send chunks of pings (each behind an acked publish) without reading, until the socket
    has taken nothing for 1 s (nobody reads them any more) or ``limit`` bytes went: the
    publishes begun, and the bytes not sent (whole frames follow them)."""
    sock = stream.socket
    sent = published = 0
    pending = b""
    while pending or sent < limit:
        if not pending:
            pending = publish("pinger", [b"%d" % published], seq=published + 1, ack=True).encode() + PINGS
            published += 1
        with trio.move_on_after(1.0) as waited:
            n = await sock.send(pending)  # nothing is sent if it is cancelled
        if waited.cancelled_caught:
            return published, pending
        pending = pending[n:]
        sent += n
    return published, b""


def pinger_session(core: HubCore) -> object | None:
    return next((s for s in core.sessions.values() if s.client_name == "pinger"), None)


async def test_a_client_that_never_reads_its_pongs_stops_being_read(start_server: StartHub) -> None:
    server = await start_server(max_pending_bytes=CAP, slow_consumer_deadline=1.0)
    core = server.core
    sub = await RawClient.connect(server.address, name="sub")
    await sub.send(wire.Sub(sub_id=1, patterns=("healthy", "pinger")))
    await sub.expect(wire.SubOk)
    healthy = await RawClient.connect(server.address, name="healthy")
    pinger = await RawClient.connect(server.address, name="pinger")

    published, _ = await ping_until_not_read(pinger.stream)
    session = pinger_session(core)
    # Today's hub answered until the replies passed the cap and closed it: ~5 MiB of pongs.
    assert session is not None and session in core.read_pauses, "the pinger is still read from"
    answered = session.bytes_out + session.out.pending_bytes  # type: ignore[attr-defined]
    threshold = pause_threshold(CAP)
    # The threshold, one turn of 256 pongs and what the pinger's own receive buffer holds.
    assert answered <= threshold + (256 << 10), (answered, threshold)
    assert core.stats.read_pauses >= 1

    # Everyone else is served meanwhile, and what they publish arrives.
    for n in range(50):
        await healthy.send(publish("healthy", [b"h%d" % n], seq=n + 1, ack=True))
        await healthy.expect(wire.PublishAck, skip=(wire.Heartbeat,))

    # Closed at the deadline (the heartbeat tick looks every 2.5 s), counted.  Not by reading
    # from it, which would let the hub read it again: by watching the hub's counter.
    with trio.fail_after(10):
        while core.stats.read_pause_closes == 0:  # noqa: ASYNC110 - a counter, nothing to wait on
            await trio.sleep(0.05)
    # What it finds when it reads at last: its answers, then the reason.
    acked: list[int] = []
    last = None
    while (frame := await pinger.recv()) is not None:
        if isinstance(frame, wire.PublishAck):
            acked.append(frame.sequence)
        elif not isinstance(frame, wire.Heartbeat):
            last = frame
    assert isinstance(last, wire.Error) and last.code is wire.ErrorCode.LIMIT_EXCEEDED, last
    assert "slow_consumer_deadline=1s" in last.reason, last.reason
    assert core.stats.connections_closed.get("not_reading") == 1
    # Nothing acknowledged is lost: each acked publish is stored and delivered, in order.
    assert acked == list(range(1, len(acked) + 1)) and len(acked) <= published
    got: list[tuple[str, int, bytes]] = []
    while sum(t == "healthy" for t, _o, _d in got) < 50:
        got += await collect(sub, 1)
    assert [d for t, _o, d in got if t == "healthy"] == [b"h%d" % n for n in range(50)]
    assert [d for t, _o, d in got if t == "pinger"][: len(acked)] == [b"%d" % n for n in range(len(acked))]


async def test_a_client_that_reads_again_is_read_again(start_server: StartHub) -> None:
    server = await start_server(max_pending_bytes=CAP)
    pinger = await RawClient.connect(server.address, name="pinger")
    published, rest = await ping_until_not_read(pinger.stream)
    session = pinger_session(server.core)
    assert session in server.core.read_pauses
    # It reads its answers (and sends the rest meanwhile): the hub reads its pings again and
    # answers every one.
    frames: list[wire.Frame] = []

    async def read_until_status() -> None:
        while not frames or not isinstance(frames[-1], wire.StatusReply):
            frame = await pinger.recv(20)
            assert frame is not None
            frames.append(frame)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_until_status)
        await pinger.send(rest, wire.Status())
    acks = [f.sequence for f in frames if isinstance(f, wire.PublishAck)]
    assert acks == list(range(1, published + 1))
    pongs = sum(isinstance(f, wire.Heartbeat) and f.word == "pong" for f in frames)
    assert pongs == published * 7000
    assert session not in server.core.read_pauses and session.closing is None  # type: ignore[attr-defined]


def test_a_paused_connection_is_closed_at_the_deadline_and_spared_the_heartbeat(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path, slow_consumer_deadline=10.0, heartbeat_interval=2.0)
    quiet, paused = hub.connect(), hub.connect()
    core = hub.core
    core.read_pauses.paused(paused.session, hub.clock.monotonic(), 300_000)
    hub.clock.advance(7.0)  # past 3 heartbeat intervals: the quiet one is dead, the paused one is ours
    core.tick_heartbeats()
    assert quiet.session.closing is not None and paused.session.closing is None
    hub.clock.advance(3.5)
    core.tick_heartbeats()
    assert paused.session.closing is not None
    error = paused.take()[-1]
    assert isinstance(error, wire.Error) and error.code is wire.ErrorCode.LIMIT_EXCEEDED
    assert "300000 bytes of replies unread" in error.reason and "slow_consumer_deadline=10s" in error.reason
    assert core.stats.read_pause_closes == 1 and core.stats.heartbeat_timeouts == 1
    hub.close()


def test_resuming_counts_as_a_sign_of_life(tmp_path: Path) -> None:
    hub = CoreHub(tmp_path, slow_consumer_deadline=30.0, heartbeat_interval=2.0)
    client = hub.connect()
    hub.core.read_pauses.paused(client.session, hub.clock.monotonic(), 1)
    hub.clock.advance(8.0)
    hub.core.read_pauses.resumed(client.session, hub.clock.monotonic())
    hub.core.tick_heartbeats()
    assert client.session.closing is None
    hub.close()


def test_reply_backlog_counts_replies_until_the_peer_has_them() -> None:
    backlog = ReplyBacklog()
    backlog.taken(1000, 0)  # deliveries only
    backlog.written(1000)
    assert backlog.unread(0, kernel_unsent=1000) == 0  # unread deliveries are not replies
    backlog.taken(500, 200)  # a chunk with 200 bytes of replies, stream bytes 1000..1500
    backlog.written(300)  # the socket took part
    assert backlog.at_most(50) == 250
    assert backlog.unread(50, kernel_unsent=0) == 250  # 200 taken but not all written, 50 queued
    backlog.written(200)
    assert backlog.unread(0, kernel_unsent=1) == 200  # one byte of it still in the kernel
    assert backlog.unread(0, kernel_unsent=0) == 0  # the peer has the whole stream
    assert backlog.at_most(0) == 0


def test_old_marks_merge_and_err_on_the_unread_side() -> None:
    backlog = ReplyBacklog()
    for _ in range(1000):
        backlog.taken(10, 10)
        backlog.written(10)
    assert backlog.unread(0, kernel_unsent=5000) <= 10_000
    assert backlog.unread(0, kernel_unsent=5000) >= 5000  # never less than the truth
    assert backlog.unread(0, kernel_unsent=0) == 0


def test_the_threshold_stays_below_half_the_cap() -> None:
    assert pause_threshold(8 << 20) == READ_PAUSE_REPLY_BYTES
    assert pause_threshold(64 << 10) == 32 << 10


class _ReadLoopSteps(trio.abc.Instrument):
    """Counts the steps of connections' read-loop tasks (a paused one wakes only to poll)."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("ClientConnection.run"):
            self.steps += 1


async def test_a_connection_that_stays_paused_is_polled_less_and_less(start_server: StartHub) -> None:
    # A paused connection's read loop looks every 10 ms whether its replies drained, then twice
    # as long each time: four attackers that never read cost the hub a hundred wake-ups a second
    # each at a fixed 10 ms (the attack benchmark), a few now.
    server = await start_server(max_pending_bytes=CAP)
    pinger = await RawClient.connect(server.address, name="pinger")
    await ping_until_not_read(pinger.stream)
    assert pinger_session(server.core) in server.core.read_pauses
    counter = _ReadLoopSteps()
    trio.lowlevel.add_instrument(counter)
    try:
        await trio.sleep(1.0)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert counter.steps <= 6, counter.steps  # 10 ms polls: ~100
