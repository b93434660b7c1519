"""Opening, changing and ending subscriptions; acks and credit.

Three kinds of subscription, chosen from the SUB options:

* live: ``start=LATEST``, no durable name, no group -- the router delivers
  each publish straight into the connection's queue (fastest path);
  a slow one meets its slow-consumer policy (:mod:`hub.core.slow_consumers`).
* follower: any other start position or a durable name -- reads the topic
  logs (:mod:`hub.core.follower`); a slow one lags, nothing is lost.
* group member: a group name -- the group hands each message to one member
  (:mod:`hub.core.groups`).

Replay, durable subscriptions and groups need a data directory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from wire import (
    Ack,
    AckMode,
    Credit,
    ErrorCode,
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

from .ack_checks import frame_ack_refusal
from .clients import ClientSession, Subscription
from .consumers import ConsumerRegistry, ConsumerState
from .events import ev
from .follower import LogFollower
from .grants import judge
from .groups import ConsumerGroup
from .key_commands import filter_refusal, set_selection
from .routing import RoutingTable

if TYPE_CHECKING:
    from ..storage.store import LogStore
    from .clock import Clock
    from .stats import HubStats
    from .work import WorkQueue

log = logging.getLogger("pub0sub.hub.subscribing")


class TopicEnd(Protocol):
    """What a SUB_OK needs of an existing topic: where its next message will go."""

    @property
    def next_offset(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class SubscriptionLimits:
    #: Open subscriptions per connection.
    max_subscriptions: int = 1024
    #: Topics and patterns across all subscriptions of one connection.
    max_topics_per_connection: int = 10_000
    #: A group's ack_wait when its first member gives none.
    ack_wait_seconds: float = 30.0


class Subscriptions:
    """Every client subscription: SUB, SUB_UPDATE, UNSUB, ACK and CREDIT, and the slow-consumer policies."""

    def __init__(
        self,
        *,
        router: RoutingTable[object],
        store: LogStore | None,
        consumers: ConsumerRegistry | None,
        stats: HubStats,
        work: WorkQueue,
        clock: Clock,
        limits: SubscriptionLimits,
        existing_topic: Callable[[str], TopicEnd | None],
        sessions: Callable[[], Iterable[ClientSession]],
    ) -> None:
        self.router = router
        self.store = store
        self.consumers = consumers
        self.stats = stats
        self.work = work
        self.clock = clock
        self.limits = limits
        self._existing_topic = existing_topic
        self._sessions = sessions
        self.groups: dict[str, ConsumerGroup] = {}

    # -- helpers ------------------------------------------------------------------------

    def refuse_subscription(self, session: ClientSession, sub_id: int, code: ErrorCode, reason: str) -> None:
        session.send_control(SubEnd(sub_id=sub_id, code=code, reason=reason[:1000]).encode())

    def _pattern_problem(self, session: ClientSession, patterns: tuple[str, ...]) -> tuple[ErrorCode, str] | None:
        """Why ``patterns`` cannot be added to ``session``'s subscriptions (the SUB_END to send), or None."""
        for pattern in patterns:
            try:
                check_topic(pattern, pattern=True)
            except InvalidTopicError as exc:
                return ErrorCode.INVALID_TOPIC, str(exc)
        limit = self.limits.max_topics_per_connection
        if session.topic_count + len(patterns) > limit:
            held = session.topic_count + len(patterns)
            return ErrorCode.LIMIT_EXCEEDED, (
                f"connection would hold {held} topics, limit max_topics_per_connection={limit}"
            )
        return None

    def _offsets(self, sub: Subscription, patterns: list[str] | tuple[str, ...]) -> tuple[TopicOffset, ...]:
        offsets = []
        for pattern in patterns:
            if is_pattern(pattern):
                continue
            if sub.follower is not None:
                offset = sub.follower.position_of(pattern)
            else:
                topic = self._existing_topic(pattern)
                offset = topic.next_offset if topic is not None else 0
            offsets.append(TopicOffset(topic=pattern, offset=offset))
        return tuple(offsets)

    # -- SUB -----------------------------------------------------------------------------

    def on_sub(self, session: ClientSession, frame: Sub) -> None:
        sub_id = frame.sub_id
        if sub_id in session.subs:
            session.fail(ErrorCode.DUPLICATE_SUBSCRIPTION, f"subscription id {sub_id} is already open", ref=sub_id)
            return
        if (refusal := filter_refusal(session, frame)) is not None:
            session.fail(ErrorCode.MALFORMED_FRAME, refusal, ref=sub_id)  # to a v1/v2 client: trailing bytes
            return
        if len(session.subs) >= self.limits.max_subscriptions:
            reason = f"limit max_subscriptions={self.limits.max_subscriptions} per connection"
            self.refuse_subscription(session, sub_id, ErrorCode.LIMIT_EXCEEDED, reason)
            return
        needs_log = frame.start is not StartPosition.LATEST or frame.durable or frame.group
        if needs_log and self.store is None:
            self.refuse_subscription(
                session, sub_id, ErrorCode.POSITION_UNAVAILABLE,
                "replay, durable subscriptions and groups need a hub started with --data-dir",
            )
            return
        patterns = tuple(dict.fromkeys(frame.patterns))
        problem = self._pattern_problem(session, patterns)
        if problem is not None:
            self.refuse_subscription(session, sub_id, *problem)
            return
        judged = judge(session, patterns, durable=frame.durable, group=frame.group)
        if judged.refusal is not None:
            self.refuse_subscription(session, sub_id, ErrorCode.NOT_AUTHORIZED, judged.refusal)
            return
        sub = Subscription(
            session=session,
            sub_id=sub_id,
            patterns=list(patterns),
            start=frame.start,
            policy=frame.policy,
            ack_mode=frame.ack_mode,
            credit=frame.credit or None,
            denied=judged.denied,
        )
        if (bad_query := set_selection(sub, frame)) is not None:
            self.refuse_subscription(session, sub_id, ErrorCode.INVALID_QUERY, bad_query)
            return
        if frame.group:
            if not self._join_group(session, sub, frame):
                return
        elif needs_log:
            self._start_follower(session, sub, frame)
        session.subs[sub_id] = sub
        session.topic_count += len(patterns)
        router_entry = sub.group if sub.group is not None else sub
        if sub.group is None:
            for pattern in patterns:
                self.router.add(pattern, router_entry)
        if not self._durable_state_saved(session, sub):
            return
        session.send_control(SubOk(sub_id=sub_id, offsets=self._offsets(sub, patterns)).encode())

    def _durable_state_saved(self, session: ClientSession, sub: Subscription) -> bool:
        """A new durable name or group (or new topics for one) is on disk before SUB_OK confirms it."""
        consumers = self.consumers
        if consumers is None:
            return True
        try:
            consumers.save_if_urgent()
        except OSError as exc:
            log.error("cannot save durable subscriptions: %s", exc, extra=ev("consumers_save_failed"))
            self.end(session, sub, ErrorCode.STORAGE_ERROR, f"cannot record the durable subscription: {exc}")
            return False
        return True

    def _start_follower(self, session: ClientSession, sub: Subscription, frame: Sub) -> None:
        store, consumers = self.store, self.consumers
        assert store is not None and consumers is not None
        consumer = None
        if frame.durable:
            consumer = consumers.get("durable", frame.durable)
            if consumer is None:
                consumer = ConsumerState("durable", frame.durable, list(sub.patterns), frame.ack_mode)
                consumers.add(consumer)
            else:
                self._take_over(consumer)
                if consumer.patterns != sub.patterns or consumer.ack_mode is not frame.ack_mode:
                    consumer.patterns = list(sub.patterns)
                    consumer.ack_mode = frame.ack_mode
                    consumers.patterns_changed(consumer)
            consumer.attached += 1
            sub.consumer = consumer
        follower = LogFollower(
            store=store,
            sub=sub,
            work=self.work,
            start=frame.start,
            start_value=frame.start_value,
            offsets={o.topic: o.offset for o in frame.offsets},
            consumer=consumer,
            positions_moved=consumers.touch,
            failed=self.fail_subscription,
        )
        sub.live = False
        sub.follower = follower
        follower.wake()

    def _take_over(self, consumer: ConsumerState) -> None:
        """A durable name reattached while its old connection lingers: the newest wins."""
        for session in list(self._sessions()):
            for sub in list(session.subs.values()):
                if sub.consumer is consumer:
                    reason = "durable subscription taken over by a newer connection"
                    self.end(session, sub, ErrorCode.UNSUBSCRIBED, reason)

    def _join_group(self, session: ClientSession, sub: Subscription, frame: Sub) -> bool:
        consumers, store = self.consumers, self.store
        assert consumers is not None and store is not None
        name = frame.group
        state = consumers.get("group", name)
        if state is None:
            state = ConsumerState("group", name, list(sub.patterns), AckMode.EXPLICIT)
            consumers.add(state)
        elif sorted(state.patterns) != sorted(sub.patterns):
            if state.attached:
                self.refuse_subscription(
                    session, sub.sub_id, ErrorCode.INVALID_TOPIC,
                    f"group {name!r} subscribes to {state.patterns}; members must use the same topics",
                )
                return False
            state.patterns = list(sub.patterns)
            state.positions = {}
            consumers.patterns_changed(state)
        group = self.groups.get(name)
        if group is None:
            ack_wait = (frame.ack_wait_ms / 1000) if frame.ack_wait_ms else self.limits.ack_wait_seconds
            group = self.groups[name] = ConsumerGroup(
                state, store=store, work=self.work, clock=self.clock, start=frame.start, ack_wait=ack_wait,
                positions_moved=consumers.touch,
            )
            for pattern in state.patterns:
                self.router.add(pattern, group)
        if group.members and (group.keys, group.query_text) != (sub.keys, sub.query_text):  # as its topics
            self.refuse_subscription(session, sub.sub_id, ErrorCode.UNEXPECTED_FRAME,
                         f"group {name!r} selects other keys; members must use the same key filter and query")
            return False
        group.select_as(sub)
        sub.live = False
        sub.group = group
        sub.ack_mode = AckMode.EXPLICIT
        group.add_member(sub)
        return True

    # -- changes and endings ------------------------------------------------------------

    def on_update(self, session: ClientSession, frame: SubUpdate) -> None:
        sub = session.subs.get(frame.sub_id)
        if sub is None:
            self.refuse_subscription(session, frame.sub_id, ErrorCode.UNKNOWN_SUBSCRIPTION, "no such subscription")
            return
        if sub.group is not None:  # refused: ends it, as every refused update does (protocol.md, SUB_UPDATE)
            self.end(session, sub, ErrorCode.UNEXPECTED_FRAME, "a group member cannot change its topics")
            return
        router = self.router
        if frame.op is UpdateOp.ADD:
            added = tuple(p for p in dict.fromkeys(frame.patterns) if p not in sub.patterns)
            # A refused update ends the subscription with one SUB_END saying why (protocol.md, SUB_UPDATE).
            problem = self._pattern_problem(session, added)
            if problem is not None:
                self.end(session, sub, *problem)
                return
            durable = sub.consumer.name if sub.consumer is not None else ""
            judged = judge(session, (*sub.patterns, *added), durable=durable)
            if judged.refusal is not None:
                self.end(session, sub, ErrorCode.NOT_AUTHORIZED, judged.refusal)
                return
            sub.denied = judged.denied
            for pattern in added:
                sub.patterns.append(pattern)
                router.add(pattern, sub)
            session.topic_count += len(added)
            if sub.follower is not None:
                sub.follower.patterns_changed()
            if self._durable_patterns_saved(session, sub):
                session.send_control(SubOk(sub_id=sub.sub_id, offsets=self._offsets(sub, added)).encode())
        else:
            for pattern in frame.patterns:
                if pattern in sub.patterns:
                    sub.patterns.remove(pattern)
                    router.remove(pattern, sub)
                    session.topic_count -= 1
            if sub.follower is not None:
                sub.follower.patterns_changed()
            if self._durable_patterns_saved(session, sub):
                session.send_control(SubOk(sub_id=sub.sub_id).encode())

    def _durable_patterns_saved(self, session: ClientSession, sub: Subscription) -> bool:
        """A durable subscription's new topics are on disk before SUB_OK confirms them."""
        if sub.consumer is not None and self.consumers is not None:
            sub.consumer.patterns = list(sub.patterns)
            self.consumers.patterns_changed(sub.consumer)
        return self._durable_state_saved(session, sub)

    def on_unsub(self, session: ClientSession, frame: Unsub) -> None:
        sub = session.subs.get(frame.sub_id)
        if sub is None:
            self.refuse_subscription(session, frame.sub_id, ErrorCode.UNKNOWN_SUBSCRIPTION, "no such subscription")
            return
        self.end(session, sub, ErrorCode.UNSUBSCRIBED, "unsubscribed")

    def end(self, session: ClientSession, sub: Subscription, code: ErrorCode, reason: str) -> None:
        discarded = self.remove(session, sub)
        if code is ErrorCode.OUT_OF_CAPACITY:
            self.stats.discarded_on_cancel += discarded
        session.send_control(SubEnd(sub_id=sub.sub_id, code=code, reason=reason[:1000]).encode())

    def fail_subscription(self, sub: Subscription, reason: str) -> None:
        """Something went wrong on the hub while serving ``sub``: end it, say so, keep serving."""
        self.end(sub.session, sub, ErrorCode.INTERNAL, reason)

    def remove(self, session: ClientSession, sub: Subscription) -> int:
        """Forget ``sub`` everywhere; returns messages that were queued for it."""
        if sub.closed:
            return 0
        sub.closed = True
        if sub.group is None:
            for pattern in sub.patterns:
                self.router.remove(pattern, sub)
        session.topic_count -= len(sub.patterns)
        session.subs.pop(sub.sub_id, None)
        if sub.follower is not None:
            sub.follower.stop()
        if sub.consumer is not None:
            sub.consumer.attached -= 1
            sub.consumer.last_active = time.time()
            if self.consumers is not None:
                self.consumers.touch()
        if sub.group is not None:
            group = self.groups[sub.group.name]
            group.remove_member(sub)
            if not group.members:
                group.close()
                for pattern in group.state.patterns:
                    self.router.remove(pattern, group)
                del self.groups[group.name]
        held = sum(b.count for b in sub.held_batches)
        sub.held_batches = []
        return session.out.discard(sub) + held

    # -- acks and credit ----------------------------------------------------------------

    def on_ack(self, session: ClientSession, frame: Ack) -> None:
        sub = session.subs.get(frame.sub_id)
        if sub is None:
            return  # a race with the subscription's end: nothing left to acknowledge
        # The whole frame is checked before any of it is applied: a refused ACK changes nothing.
        refusal = frame_ack_refusal(sub, frame)
        if refusal is not None:
            self.stats.acks_refused += 1
            session.fail(ErrorCode.INVALID_ACK, f"subscription {sub.sub_id}: {refusal}", ref=sub.sub_id)
            return
        if sub.group is not None:
            for r in frame.ranges:
                sub.group.ack(r.topic, r.first_offset, r.last_offset)
        elif sub.consumer is not None:
            for r in frame.ranges:
                tracker = sub.consumer.positions.get(r.topic)
                if tracker is not None:
                    tracker.ack(r.first_offset, r.last_offset)
            if self.consumers is not None:
                self.consumers.touch()

    def on_credit(self, session: ClientSession, frame: Credit) -> None:
        sub = session.subs.get(frame.sub_id)
        if sub is None or sub.credit is None:
            return  # a race with the subscription's end, or no credit limit: nothing to do
        sub.credit += frame.credit
        if sub.live:
            session.release_held(sub)
        elif sub.group is not None:
            sub.group.wake()
        else:
            sub.wake()
