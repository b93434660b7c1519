"""Opening, changing and ending subscriptions; acks, credit, slow consumers.

Three kinds of subscription, chosen from the SUB options:

* live: ``start=LATEST``, no durable name, no group -- the router delivers
  each publish straight into the connection's queue (fastest path);
  a slow one is cancelled or drops oldest with GAP notices.
* follower: any other start position or a durable name -- reads the topic
  logs (:mod:`hub.follower`); a slow one lags, nothing is lost.
* group member: a group name -- the group hands each message to one member
  (:mod:`hub.groups`).

Replay, durable subscriptions and groups need a data directory.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from wire import (
    Ack,
    AckMode,
    Credit,
    ErrorCode,
    SlowConsumerPolicy,
    StartPosition,
    Sub,
    SubEnd,
    SubOk,
    SubUpdate,
    TopicOffset,
    Unsub,
    UpdateOp,
)
from wire.topics import InvalidTopicError, check_topic, is_pattern

from .consumers import ConsumerState
from .follower import LogFollower
from .groups import ConsumerGroup
from .subscription import Subscription

if TYPE_CHECKING:
    from .connection import ClientConnection
    from .server import HubServer
    from .storage.batches import SharedBatch

log = logging.getLogger("pub0sub.hub.subscribing")


class Subscriptions:
    def __init__(self, server: HubServer) -> None:
        self.server = server
        self.groups: dict[str, ConsumerGroup] = {}

    # -- helpers ------------------------------------------------------------------------

    def _refuse(self, conn: ClientConnection, sub_id: int, code: ErrorCode, reason: str) -> None:
        conn.send_control(SubEnd(sub_id=sub_id, code=code, reason=reason[:1000]).encode())

    def _check_patterns(self, conn: ClientConnection, sub_id: int, patterns: tuple[str, ...]) -> bool:
        for pattern in patterns:
            try:
                check_topic(pattern, pattern=True)
            except InvalidTopicError as exc:
                self._refuse(conn, sub_id, ErrorCode.INVALID_TOPIC, str(exc))
                return False
        limit = self.server.config.max_topics_per_connection
        if conn.topic_count + len(patterns) > limit:
            self._refuse(
                conn,
                sub_id,
                ErrorCode.LIMIT_EXCEEDED,
                f"connection would hold {conn.topic_count + len(patterns)} topics, "
                f"limit max_topics_per_connection={limit}",
            )
            return False
        return True

    def _offsets(self, sub: Subscription, patterns: list[str] | tuple[str, ...]) -> tuple[TopicOffset, ...]:
        offsets = []
        for pattern in patterns:
            if is_pattern(pattern):
                continue
            if sub.follower is not None:
                offset = sub.follower.position_of(pattern)
            else:
                topic = self.server.publisher.existing(pattern)
                offset = topic.next_offset if topic is not None else 0
            offsets.append(TopicOffset(topic=pattern, offset=offset))
        return tuple(offsets)

    # -- SUB -----------------------------------------------------------------------------

    def on_sub(self, conn: ClientConnection, frame: Sub) -> None:
        server = self.server
        sub_id = frame.sub_id
        if sub_id in conn.subs:
            conn.fail(ErrorCode.DUPLICATE_SUBSCRIPTION, f"subscription id {sub_id} is already open", ref=sub_id)
            return
        if len(conn.subs) >= server.config.max_subscriptions:
            limit = server.config.max_subscriptions
            self._refuse(conn, sub_id, ErrorCode.LIMIT_EXCEEDED, f"limit max_subscriptions={limit} per connection")
            return
        needs_log = frame.start is not StartPosition.LATEST or frame.durable or frame.group
        if needs_log and server.store is None:
            self._refuse(
                conn, sub_id, ErrorCode.POSITION_UNAVAILABLE,
                "replay, durable subscriptions and groups need a hub started with --data-dir",
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
        if frame.group:
            if not self._join_group(conn, sub, frame):
                return
        elif needs_log:
            self._start_follower(conn, sub, frame)
        conn.subs[sub_id] = sub
        conn.topic_count += len(patterns)
        router_entry = sub.group if sub.group is not None else sub
        if sub.group is None:
            for pattern in patterns:
                server.router.add(pattern, router_entry)
        if not self._durable_state_saved(conn, sub):
            return
        conn.send_control(SubOk(sub_id=sub_id, offsets=self._offsets(sub, patterns)).encode())

    def _durable_state_saved(self, conn: ClientConnection, sub: Subscription) -> bool:
        """A new durable name or group (or new topics for one) is on disk before SUB_OK confirms it."""
        consumers = self.server.consumers
        if consumers is None:
            return True
        try:
            consumers.save_if_urgent()
        except OSError as exc:
            log.error("cannot save durable subscriptions: %s", exc)
            self.end(conn, sub, ErrorCode.STORAGE_ERROR, f"cannot record the durable subscription: {exc}")
            return False
        return True

    def _start_follower(self, conn: ClientConnection, sub: Subscription, frame: Sub) -> None:
        server = self.server
        store = server.store
        assert store is not None and server.consumers is not None
        consumer = None
        if frame.durable:
            consumer = server.consumers.get("durable", frame.durable)
            if consumer is None:
                consumer = ConsumerState("durable", frame.durable, list(sub.patterns), frame.ack_mode)
                server.consumers.add(consumer)
            else:
                self._take_over(consumer)
                if consumer.patterns != sub.patterns or consumer.ack_mode is not frame.ack_mode:
                    consumer.patterns = list(sub.patterns)
                    consumer.ack_mode = frame.ack_mode
                    server.consumers.patterns_changed(consumer)
            consumer.attached += 1
            sub.consumer = consumer
        follower = LogFollower(
            store=store,
            conn=conn,
            sub=sub,
            start=frame.start,
            start_value=frame.start_value,
            offsets={o.topic: o.offset for o in frame.offsets},
            consumer=consumer,
        )
        sub.live = False
        sub.follower = follower
        conn.start_task(follower.run)

    def _take_over(self, consumer: ConsumerState) -> None:
        """A durable name reattached while its old connection lingers: the newest wins."""
        for conn in list(self.server.connections.values()):
            for sub in list(conn.subs.values()):
                if sub.consumer is consumer:
                    self.end(conn, sub, ErrorCode.UNSUBSCRIBED, "durable subscription taken over by a newer connection")

    def _join_group(self, conn: ClientConnection, sub: Subscription, frame: Sub) -> bool:
        server = self.server
        assert server.consumers is not None
        name = frame.group
        state = server.consumers.get("group", name)
        if state is None:
            state = ConsumerState("group", name, list(sub.patterns), AckMode.EXPLICIT)
            server.consumers.add(state)
        elif sorted(state.patterns) != sorted(sub.patterns):
            if state.attached:
                self._refuse(
                    conn, sub.sub_id, ErrorCode.INVALID_TOPIC,
                    f"group {name!r} subscribes to {state.patterns}; members must use the same topics",
                )
                return False
            state.patterns = list(sub.patterns)
            state.positions = {}
            server.consumers.patterns_changed(state)
        group = self.groups.get(name)
        if group is None:
            ack_wait = (frame.ack_wait_ms / 1000) if frame.ack_wait_ms else server.config.ack_wait_seconds
            group = self.groups[name] = ConsumerGroup(server, state, start=frame.start, ack_wait=ack_wait)
            for pattern in state.patterns:
                server.router.add(pattern, group)
            server.start_task(group.run)
        sub.live = False
        sub.group = group
        sub.ack_mode = AckMode.EXPLICIT
        group.add_member(sub)
        return True

    # -- changes and endings ------------------------------------------------------------

    def on_update(self, conn: ClientConnection, frame: SubUpdate) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None:
            self._refuse(conn, frame.sub_id, ErrorCode.UNKNOWN_SUBSCRIPTION, "no such subscription")
            return
        if sub.group is not None:
            self._refuse(conn, frame.sub_id, ErrorCode.UNEXPECTED_FRAME, "a group member cannot change its topics")
            return
        router = self.server.router
        if frame.op is UpdateOp.ADD:
            added = tuple(p for p in dict.fromkeys(frame.patterns) if p not in sub.patterns)
            if not self._check_patterns(conn, sub.sub_id, added):
                self.end(conn, sub, ErrorCode.INVALID_TOPIC, "update refused")
                return
            for pattern in added:
                sub.patterns.append(pattern)
                router.add(pattern, sub)
            conn.topic_count += len(added)
            if sub.follower is not None:
                sub.follower.patterns_changed()
            if self._durable_patterns_saved(conn, sub):
                conn.send_control(SubOk(sub_id=sub.sub_id, offsets=self._offsets(sub, added)).encode())
        else:
            for pattern in frame.patterns:
                if pattern in sub.patterns:
                    sub.patterns.remove(pattern)
                    router.remove(pattern, sub)
                    conn.topic_count -= 1
            if sub.follower is not None:
                sub.follower.patterns_changed()
            if self._durable_patterns_saved(conn, sub):
                conn.send_control(SubOk(sub_id=sub.sub_id).encode())

    def _durable_patterns_saved(self, conn: ClientConnection, sub: Subscription) -> bool:
        """A durable subscription's new topics are on disk before SUB_OK confirms them."""
        if sub.consumer is not None and self.server.consumers is not None:
            sub.consumer.patterns = list(sub.patterns)
            self.server.consumers.patterns_changed(sub.consumer)
        return self._durable_state_saved(conn, sub)

    def on_unsub(self, conn: ClientConnection, frame: Unsub) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None:
            self._refuse(conn, frame.sub_id, ErrorCode.UNKNOWN_SUBSCRIPTION, "no such subscription")
            return
        self.end(conn, sub, ErrorCode.UNSUBSCRIBED, "unsubscribed")

    def end(self, conn: ClientConnection, sub: Subscription, code: ErrorCode, reason: str) -> None:
        discarded = self.remove(conn, sub)
        if code is ErrorCode.OUT_OF_CAPACITY:
            self.server.stats.discarded_on_cancel += discarded
        conn.send_control(SubEnd(sub_id=sub.sub_id, code=code, reason=reason[:1000]).encode())

    def remove(self, conn: ClientConnection, sub: Subscription) -> int:
        """Forget ``sub`` everywhere; returns messages that were queued for it."""
        if sub.closed:
            return 0
        server = self.server
        sub.closed = True
        if sub.group is None:
            for pattern in sub.patterns:
                server.router.remove(pattern, sub)
        conn.topic_count -= len(sub.patterns)
        conn.subs.pop(sub.sub_id, None)
        server.stats.deliveries += sub.delivered_messages
        sub.delivered_messages = 0
        if sub.follower is not None:
            sub.follower.wake()
        if sub.consumer is not None:
            sub.consumer.attached -= 1
            sub.consumer.last_active = time.time()
            server.consumers_changed()
        group = sub.group
        if group is not None:
            group.remove_member(sub)
            if not group.members:
                group.close()
                for pattern in group.state.patterns:
                    server.router.remove(pattern, group)
                self.groups.pop(group.name, None)
        held = sum(b.count for b in sub.held_batches)
        sub.held_batches = []
        return conn.out.discard(sub) + held

    # -- acks and credit ----------------------------------------------------------------

    def on_ack(self, conn: ClientConnection, frame: Ack) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None:
            return  # a race with the subscription's end: nothing left to acknowledge
        # The whole frame is checked before any of it is applied: a refused ACK changes nothing.
        refusal = self._ack_refusal(sub, frame)
        if refusal is not None:
            self.server.stats.acks_refused += 1
            conn.fail(ErrorCode.INVALID_ACK, f"subscription {sub.sub_id}: {refusal}", ref=sub.sub_id)
            return
        if sub.group is not None:
            for r in frame.ranges:
                sub.group.ack(r.topic, r.first_offset, r.last_offset)
        elif sub.consumer is not None:
            for r in frame.ranges:
                tracker = sub.consumer.positions.get(r.topic)
                if tracker is not None:
                    tracker.ack(r.first_offset, r.last_offset)
            self.server.consumers_changed()

    @staticmethod
    def _ack_refusal(sub: Subscription, frame: Ack) -> str | None:
        """Why ``frame`` must be refused: an ACK settles only offsets delivered to ``sub`` and pending."""
        if sub.group is not None:
            check = sub.group.ack_refusal
        elif sub.consumer is not None and sub.follower is not None and sub.ack_mode is AckMode.EXPLICIT:
            check = sub.follower.ack_refusal
        else:
            return "it takes no acks (only durable subscriptions and groups with ack_mode EXPLICIT do)"
        for r in frame.ranges:
            refusal = check(r.topic, r.first_offset, r.last_offset)
            if refusal is not None:
                return refusal
        return None

    def on_credit(self, conn: ClientConnection, frame: Credit) -> None:
        sub = conn.subs.get(frame.sub_id)
        if sub is None or sub.credit is None:
            return  # a race with the subscription's end, or no credit limit: nothing to do
        sub.credit += frame.credit
        if sub.live:
            conn.release_held(sub)
        elif sub.group is not None:
            sub.group.wake()
        else:
            sub.wake()

    # -- slow consumers -----------------------------------------------------------------

    def make_room(self, conn: ClientConnection, sub: Subscription, batch: SharedBatch, nbytes: int) -> bool:
        """Apply ``sub``'s policy because ``batch`` does not fit; True if it may be queued now."""
        if sub.policy is SlowConsumerPolicy.CANCEL:
            self.cancel_slow(conn, sub)
            return False
        dropped = conn.out.drop_oldest(sub, nbytes)
        self.server.stats.dropped_messages += dropped
        if conn.out.fits(nbytes):
            return True
        conn.out.gap_instead(sub, batch)
        self.server.stats.dropped_messages += batch.count
        return False

    def held_overflow(self, conn: ClientConnection, sub: Subscription, batch: SharedBatch) -> None:
        """Batches waiting for credit exceed the cap."""
        if sub.policy is SlowConsumerPolicy.CANCEL:
            self.cancel_slow(conn, sub)
            return
        oldest = sub.held_batches.pop(0)
        sub.queued_messages -= oldest.count
        conn.out.gap_instead(sub, oldest)
        self.server.stats.dropped_messages += oldest.count
        sub.held_batches.append(batch)
        sub.queued_messages += batch.count

    def cancel_slow(self, conn: ClientConnection, sub: Subscription) -> None:
        self.server.stats.cancelled_subscriptions += 1
        reason = (
            f"subscription {sub.sub_id} cannot keep up: {conn.out.pending_bytes} bytes queued, "
            f"cap max_pending_bytes={conn.out.cap}"
        )
        log.info("connection %d (%s): %s", conn.conn_id, conn.peer, reason)
        self.end(conn, sub, ErrorCode.OUT_OF_CAPACITY, reason)
