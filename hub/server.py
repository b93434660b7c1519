"""The hub: client listener, topics, routing of publishes, heartbeats, status."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import trio

from wire import (
    CLIENT_PROTOCOL_VERSION,
    PONG,
    Ack,
    AckStatus,
    Credit,
    Error,
    ErrorCode,
    Frame,
    Heartbeat,
    Hello,
    OffsetRange,
    Publish,
    PublishAck,
    StartPosition,
    Status,
    StatusReply,
    Sub,
    SubEnd,
    SubOk,
    SubUpdate,
    TopicOffset,
    Unsub,
    UpdateOp,
    Welcome,
)
from wire.frames import SlowConsumerPolicy

from .config import HubConfig
from .connection import ClientConnection, CloseReason
from .outbound import SharedBatch
from .routing import InvalidTopicError, RoutingTable, check_pattern, check_publish_topic, is_pattern
from .subscription import Subscription

log = logging.getLogger("pub0sub.hub")

PONG_FRAME = PONG.encode()


def wall_clock_us() -> int:
    return time.time_ns() // 1000


@dataclass
class HubStats:
    publish_frames: int = 0
    messages_in: int = 0
    bytes_in: int = 0
    deliveries: int = 0
    dropped_messages: int = 0
    cancelled_subscriptions: int = 0
    discarded_on_cancel: int = 0
    discarded_on_close: int = 0
    duplicate_batches: int = 0
    protocol_errors: int = 0
    connections_total: int = 0
    connections_refused: int = 0
    heartbeat_timeouts: int = 0


class TopicState:
    __slots__ = ("bytes", "last_timestamp", "messages", "name", "next_offset")

    def __init__(self, name: str) -> None:
        self.name = name
        self.next_offset = 0
        self.messages = 0
        self.bytes = 0
        self.last_timestamp = 0


class HubServer:
    """Serve clients on ``config.listen``.

    >>> async def main():                                       # doctest: +SKIP
    ...     async with trio.open_nursery() as nursery:
    ...         address = await nursery.start(HubServer(HubConfig(listen="127.0.0.1:0")).serve)
    """

    def __init__(
        self, config: HubConfig, *, clock: Callable[[], int] = wall_clock_us, hub_id: int | None = None
    ) -> None:
        self.config = config
        self.clock = clock
        self.hub_id = hub_id if hub_id is not None else int.from_bytes(secrets.token_bytes(8), "big")
        self.router: RoutingTable[Subscription] = RoutingTable()
        self.topics: dict[str, TopicState] = {}
        self.connections: dict[int, ClientConnection] = {}
        self.producers: dict[int, int] = {}
        self.stats = HubStats()
        self.origin_seq = 1
        self.address = ""
        self.started = time.monotonic()
        self._next_conn_id = 1
        self._valid_topics: set[str] = set()
        self._rates: dict[str, float] = {"messages_in_per_s": 0.0, "deliveries_per_s": 0.0}
        self._cancel: trio.CancelScope | None = None
        self._handlers: dict[type[Frame], Callable[[ClientConnection, Any], None]] = {
            Publish: self._on_publish,
            Heartbeat: self._on_heartbeat,
            Sub: self._on_sub,
            SubUpdate: self._on_sub_update,
            Unsub: self._on_unsub,
            Credit: self._on_credit,
            Ack: self._on_ack,
            Status: self._on_status,
            Error: self._on_client_error,
            Hello: self._on_hello,
        }

    # -- lifecycle -------------------------------------------------------------------

    # Typed Any: libp2p pulls in trio-typing, whose stale trio-stubs hide trio.TaskStatus from mypy.
    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        host, port = self.config.host_port
        listeners = await trio.open_tcp_listeners(port, host=host)
        sockname = listeners[0].socket.getsockname()
        self.address = f"{sockname[0]}:{sockname[1]}"
        async with trio.open_nursery() as nursery:
            self._cancel = nursery.cancel_scope
            nursery.start_soon(self._heartbeat_loop)
            nursery.start_soon(self._rates_loop)
            await nursery.start(trio.serve_listeners, self._handle_stream, listeners)
            log.info("hub %016x listening on %s", self.hub_id, self.address)
            task_status.started(self.address)

    async def aclose(self) -> None:
        """Tell every client we are going, give them a moment, then stop."""
        for conn in list(self.connections.values()):
            conn.close(CloseReason.SHUTDOWN, Error(code=ErrorCode.SHUTTING_DOWN, reason="hub shutting down"))
        with trio.move_on_after(1.0):
            while self.connections:
                await trio.sleep(0.01)
        if self._cancel is not None:
            self._cancel.cancel()

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        try:
            peer = "{}:{}".format(*stream.socket.getpeername()[:2])
        except OSError:
            peer = "?"
        if len(self.connections) >= self.config.max_connections:
            self.stats.connections_refused += 1
            limit = self.config.max_connections
            refusal = Error(code=ErrorCode.LIMIT_EXCEEDED, reason=f"hub is at max_connections={limit}")
            with trio.move_on_after(1.0):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    await stream.send_all(refusal.encode())
            await trio.aclose_forcefully(stream)
            return
        conn = ClientConnection(self, stream, self._next_conn_id, peer)
        self._next_conn_id += 1
        self.connections[conn.conn_id] = conn
        self.stats.connections_total += 1
        await conn.run()

    def forget(self, conn: ClientConnection) -> None:
        """The connection ended: its ephemeral subscriptions go with it."""
        for sub in list(conn.subs.values()):
            self._remove_subscription(conn, sub)
        self.connections.pop(conn.conn_id, None)

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval
        dead_after = interval * self.config.heartbeat_misses
        while True:
            await trio.sleep(interval / 2)
            now = trio.current_time()
            for conn in list(self.connections.values()):
                if conn.closing is not None:
                    continue
                if now - conn.last_received > dead_after:
                    self.stats.heartbeat_timeouts += 1
                    conn.fail(
                        ErrorCode.HEARTBEAT_TIMEOUT,
                        f"nothing received for {now - conn.last_received:.1f}s (limit {dead_after:.1f}s)",
                        why=CloseReason.HEARTBEAT_TIMEOUT,
                    )
                elif now - conn.last_sent >= interval and not conn.out.items:
                    conn.send_control(_PING_FRAME)

    async def _rates_loop(self) -> None:
        last = (time.monotonic(), self.stats.messages_in, self._deliveries())
        while True:
            await trio.sleep(1.0)
            now = (time.monotonic(), self.stats.messages_in, self._deliveries())
            span = max(now[0] - last[0], 1e-9)
            self._rates = {
                "messages_in_per_s": round((now[1] - last[1]) / span, 1),
                "deliveries_per_s": round((now[2] - last[2]) / span, 1),
            }
            last = now

    def _deliveries(self) -> int:
        live = sum(s.delivered_messages for c in self.connections.values() for s in c.subs.values())
        return self.stats.deliveries + live

    # -- frames ------------------------------------------------------------------------

    def handle_frame(self, conn: ClientConnection, frame: Frame) -> None:
        if not conn.greeted and not isinstance(frame, Hello):
            conn.fail(ErrorCode.UNEXPECTED_FRAME, f"expected HELLO first, got {frame.name}")
            return
        self._handlers[type(frame)](conn, frame)

    def _on_hello(self, conn: ClientConnection, frame: Hello) -> None:
        if conn.greeted:
            conn.fail(ErrorCode.UNEXPECTED_FRAME, "HELLO sent twice")
            return
        if frame.version != CLIENT_PROTOCOL_VERSION:
            conn.fail(
                ErrorCode.UNSUPPORTED_VERSION,
                f"client protocol version {frame.version} not supported (hub speaks {CLIENT_PROTOCOL_VERSION})",
            )
            return
        conn.greeted = True
        conn.client_name = frame.client_name
        welcome = Welcome(
            version=CLIENT_PROTOCOL_VERSION,
            hub_id=self.hub_id,
            max_body=self.config.max_body,
            heartbeat_ms=int(self.config.heartbeat_interval * 1000),
            hub_name=self.config.name[:255],
        )
        conn.send_control(welcome.encode())

    def _on_heartbeat(self, conn: ClientConnection, frame: Heartbeat) -> None:
        if frame.word == "ping":
            conn.send_control(PONG_FRAME)

    def _on_client_error(self, conn: ClientConnection, frame: Error) -> None:
        log.info("connection %d (%s) sent ERROR %s: %s", conn.conn_id, conn.peer, frame.code.name, frame.reason)
        conn.close(CloseReason.CLIENT_ERROR)

    def _on_status(self, conn: ClientConnection, frame: Status) -> None:
        document = json.dumps(self.status(), separators=(",", ":")).encode()
        conn.send_control(StatusReply(document=document).encode())

    # -- publishing --------------------------------------------------------------------

    def _check_topics(self, topics: tuple[str, ...]) -> str | None:
        """The first invalid topic's problem, else None (valid topics are cached)."""
        valid = self._valid_topics
        for topic in topics:
            if topic not in valid:
                try:
                    check_publish_topic(topic)
                except InvalidTopicError as exc:
                    return str(exc)
                if len(valid) > 100_000:
                    valid.clear()
                valid.add(topic)
        return None

    def _on_publish(self, conn: ClientConnection, frame: Publish) -> None:
        stats = self.stats
        stats.publish_frames += 1
        producer = frame.producer_id
        if producer:
            last = self.producers.get(producer, 0)
            if frame.sequence <= last:
                stats.duplicate_batches += 1
                if frame.wants_ack:
                    conn.send_control(
                        PublishAck(producer_id=producer, sequence=frame.sequence, status=AckStatus.DUPLICATE).encode()
                    )
                return
        for mset in frame.sets:
            problem = self._check_topics(mset.topics)
            if problem is not None:
                conn.fail(ErrorCode.INVALID_TOPIC, problem, ref=frame.sequence)
                return
        timestamp = self.clock()
        ranges: dict[str, list[int]] = {}
        topics_state = self.topics
        match = self.router.match
        origin = self.hub_id
        for mset in frame.sets:
            count = mset.count
            records = mset.records
            seq = self.origin_seq
            self.origin_seq += count
            stats.messages_in += count
            stats.bytes_in += len(records)
            conn.messages_in += count
            topics = mset.topics
            seen: set[Subscription] | None = set() if len(topics) > 1 else None
            for topic in topics:
                state = topics_state.get(topic)
                if state is None:
                    state = topics_state[topic] = TopicState(topic)
                base = state.next_offset
                state.next_offset = base + count
                state.messages += count
                state.bytes += len(records)
                state.last_timestamp = timestamp
                entry = ranges.get(topic)
                if entry is None:
                    ranges[topic] = [base, count]
                else:
                    entry[1] += count
                subs = match(topic)
                if not subs:
                    continue
                batch = SharedBatch(topic, base, timestamp, origin, seq, count, records)
                for sub in subs:
                    if seen is not None:
                        if sub in seen:
                            continue
                        seen.add(sub)
                    sub.conn.deliver(sub, batch)
        if producer:
            self.producers[producer] = frame.sequence
        if frame.wants_ack:
            ack = PublishAck(
                producer_id=producer,
                sequence=frame.sequence,
                status=AckStatus.STORED,
                timestamp=timestamp,
                ranges=tuple(OffsetRange(topic=t, first_offset=r[0], num=r[1]) for t, r in ranges.items()),
            )
            conn.send_control(ack.encode())

    # -- slow consumers ----------------------------------------------------------------

    def make_room(self, conn: ClientConnection, sub: Subscription, batch: SharedBatch, nbytes: int) -> bool:
        """Apply ``sub``'s policy because ``batch`` does not fit; True if it may be queued now."""
        if sub.policy is SlowConsumerPolicy.CANCEL:
            self._cancel_slow(conn, sub)
            return False
        dropped = conn.out.drop_oldest(sub, nbytes)
        self.stats.dropped_messages += dropped
        if conn.out.fits(nbytes):
            return True
        conn.out.gap_instead(sub, batch)
        self.stats.dropped_messages += batch.count
        return False

    def on_held_overflow(self, conn: ClientConnection, sub: Subscription, batch: SharedBatch) -> None:
        """Batches waiting for credit exceed the cap."""
        if sub.policy is SlowConsumerPolicy.CANCEL:
            self._cancel_slow(conn, sub)
            return
        oldest = sub.held_batches.pop(0)
        sub.queued_messages -= oldest.count
        conn.out.gap_instead(sub, oldest)
        self.stats.dropped_messages += oldest.count
        sub.held_batches.append(batch)
        sub.queued_messages += batch.count

    def _cancel_slow(self, conn: ClientConnection, sub: Subscription) -> None:
        self.stats.cancelled_subscriptions += 1
        reason = (
            f"subscription {sub.sub_id} cannot keep up: {conn.out.pending_bytes} bytes queued, "
            f"cap max_pending_bytes={conn.out.cap}"
        )
        log.info("connection %d (%s): %s", conn.conn_id, conn.peer, reason)
        self.end_subscription(conn, sub, ErrorCode.OUT_OF_CAPACITY, reason)

    def end_subscription(self, conn: ClientConnection, sub: Subscription, code: ErrorCode, reason: str) -> None:
        discarded = self._remove_subscription(conn, sub)
        if code is ErrorCode.OUT_OF_CAPACITY:
            self.stats.discarded_on_cancel += discarded
        conn.send_control(SubEnd(sub_id=sub.sub_id, code=code, reason=reason[:1000]).encode())

    def _remove_subscription(self, conn: ClientConnection, sub: Subscription) -> int:
        sub.closed = True
        for pattern in sub.patterns:
            self.router.remove(pattern, sub)
        conn.topic_count -= len(sub.patterns)
        conn.subs.pop(sub.sub_id, None)
        self.stats.deliveries += sub.delivered_messages
        sub.delivered_messages = 0
        held = sum(b.count for b in sub.held_batches)
        sub.held_batches = []
        return conn.out.discard(sub) + held

    # -- subscriptions -----------------------------------------------------------------

    def _check_patterns(self, conn: ClientConnection, sub_id: int, patterns: tuple[str, ...]) -> bool:
        for pattern in patterns:
            try:
                check_pattern(pattern)
            except InvalidTopicError as exc:
                conn.send_control(SubEnd(sub_id=sub_id, code=ErrorCode.INVALID_TOPIC, reason=str(exc)).encode())
                return False
        limit = self.config.max_topics_per_connection
        if conn.topic_count + len(patterns) > limit:
            conn.send_control(
                SubEnd(
                    sub_id=sub_id,
                    code=ErrorCode.LIMIT_EXCEEDED,
                    reason=f"connection would hold {conn.topic_count + len(patterns)} topics, "
                    f"limit max_topics_per_connection={limit}",
                ).encode()
            )
            return False
        return True

    def _start_offsets(self, patterns: tuple[str, ...]) -> tuple[TopicOffset, ...]:
        offsets = []
        for pattern in patterns:
            if not is_pattern(pattern):
                state = self.topics.get(pattern)
                offsets.append(TopicOffset(topic=pattern, offset=state.next_offset if state else 0))
        return tuple(offsets)

    def _on_sub(self, conn: ClientConnection, frame: Sub) -> None:
        sub_id = frame.sub_id
        if sub_id in conn.subs:
            conn.fail(ErrorCode.DUPLICATE_SUBSCRIPTION, f"subscription id {sub_id} is already open", ref=sub_id)
            return
        if len(conn.subs) >= self.config.max_subscriptions:
            conn.send_control(
                SubEnd(
                    sub_id=sub_id,
                    code=ErrorCode.LIMIT_EXCEEDED,
                    reason=f"limit max_subscriptions={self.config.max_subscriptions} per connection",
                ).encode()
            )
            return
        if frame.start is not StartPosition.LATEST or frame.durable or frame.group:
            conn.send_control(
                SubEnd(
                    sub_id=sub_id,
                    code=ErrorCode.POSITION_UNAVAILABLE,
                    reason="replay, durable subscriptions and groups need a hub started with --data-dir",
                ).encode()
            )
            return
        patterns = tuple(dict.fromkeys(frame.patterns))
        if not self._check_patterns(conn, sub_id, patterns):
            return
        sub = Subscription(
            conn=conn,
            sub_id=sub_id,
            patterns=list(patterns),
            start=frame.start,
            policy=frame.policy,
            ack_mode=frame.ack_mode,
            credit=frame.credit or None,
        )
        conn.subs[sub_id] = sub
        conn.topic_count += len(patterns)
        for pattern in patterns:
            self.router.add(pattern, sub)
        conn.send_control(SubOk(sub_id=sub_id, offsets=self._start_offsets(patterns)).encode())

    def _on_sub_update(self, conn: ClientConnection, frame: SubUpdate) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None:
            conn.send_control(
                SubEnd(sub_id=frame.sub_id, code=ErrorCode.UNKNOWN_SUBSCRIPTION, reason="no such subscription").encode()
            )
            return
        if frame.op is UpdateOp.ADD:
            added = tuple(p for p in dict.fromkeys(frame.patterns) if p not in sub.patterns)
            if not self._check_patterns(conn, sub.sub_id, added):
                self.end_subscription(conn, sub, ErrorCode.INVALID_TOPIC, "update refused")
                return
            for pattern in added:
                sub.patterns.append(pattern)
                self.router.add(pattern, sub)
            conn.topic_count += len(added)
            conn.send_control(SubOk(sub_id=sub.sub_id, offsets=self._start_offsets(added)).encode())
        else:
            for pattern in frame.patterns:
                if pattern in sub.patterns:
                    sub.patterns.remove(pattern)
                    self.router.remove(pattern, sub)
                    conn.topic_count -= 1
            conn.send_control(SubOk(sub_id=sub.sub_id).encode())

    def _on_unsub(self, conn: ClientConnection, frame: Unsub) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None:
            conn.send_control(
                SubEnd(sub_id=frame.sub_id, code=ErrorCode.UNKNOWN_SUBSCRIPTION, reason="no such subscription").encode()
            )
            return
        self.end_subscription(conn, sub, ErrorCode.UNSUBSCRIBED, "unsubscribed")

    def _on_credit(self, conn: ClientConnection, frame: Credit) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None or sub.credit is None:
            return  # a race with the subscription's end, or no credit limit: nothing to do
        sub.credit += frame.credit
        conn.release_held(sub)

    def _on_ack(self, conn: ClientConnection, frame: Ack) -> None:
        # Live subscriptions keep no pending list; durable ones (issue 4) will.
        return

    # -- status ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        subs = [s for c in self.connections.values() for s in c.subs.values()]
        live_dropped = sum(c.out.dropped_messages for c in self.connections.values())
        return {
            "hub_id": f"{self.hub_id:016x}",
            "name": self.config.name,
            "pid": os.getpid(),
            "listen": self.address,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "connections": len(self.connections),
            "subscriptions": len(subs),
            "topics": len(self.topics),
            "rates": dict(self._rates),
            "counters": {**asdict(self.stats), "deliveries": self._deliveries(), "dropped_messages_live": live_dropped},
            "topic_list": [
                {"topic": t.name, "next_offset": t.next_offset, "messages": t.messages, "bytes": t.bytes}
                for t in list(self.topics.values())[:1000]
            ],
            "connection_list": [
                {**c.status(), "subs": [s.status() for s in c.subs.values()]}
                for c in list(self.connections.values())[:1000]
            ],
        }


_PING_FRAME = Heartbeat(word="ping").encode()
