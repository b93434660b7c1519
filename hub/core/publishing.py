"""The publish path: assign offsets, append to topic logs, fan out, acknowledge.

Everything here is synchronous: a PUBLISH frame is processed atomically, so a
batch's messages get consecutive offsets per topic, and no other frame can
interleave with it.  Live subscribers get the batch encoded once
(:class:`SharedBatch`); log followers and groups are only woken -- they read
what was appended.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from wire import HEADERS_CLIENT_VERSION, AckStatus, ErrorCode, Publish, publish_ack_frame
from wire.topics import InvalidTopicError, check_topic

from ..storage.batches import SharedBatch
from .clients import CloseReason
from .events import ev
from .key_filters import segments
from .memory_topics import MemoryTopic
from .topic_budget import TopicLimits, new_topics, topic_refusal

if TYPE_CHECKING:
    from ..storage.store import LogStore
    from ..storage.topic_log import TopicLog
    from .clients import ClientSession, Subscription
    from .clock import Clock
    from .mesh_link import MeshLink
    from .origin import OriginSequence
    from .routing import RoutingTable
    from .stats import HubStats

log = logging.getLogger("pub0sub.hub.publishing")

#: Validated topic names remembered; a publisher spraying unique names only costs re-validation.
MAX_VALID_TOPICS = 100_000


class Publisher:
    def __init__(
        self,
        *,
        store: LogStore | None,
        router: RoutingTable[Subscription],
        stats: HubStats,
        clock: Clock,
        origin: OriginSequence,
        mesh: MeshLink,
        limits: TopicLimits,
    ) -> None:
        self.store = store
        self.limits = limits
        self.router = router
        self.stats = stats
        self.clock = clock
        self.origin = origin
        self.mesh = mesh
        self.memory_topics: dict[str, MemoryTopic] = {}
        self._valid: set[str] = set()

    def topic(self, name: str, now: int) -> TopicLog | MemoryTopic:
        store = self.store
        if store is not None:
            return store.log_for(name, now)
        topic = self.memory_topics.get(name)
        if topic is None:
            topic = self.memory_topics[name] = MemoryTopic(name)
        return topic

    def existing(self, name: str) -> TopicLog | MemoryTopic | None:
        store = self.store
        if store is not None:
            return store.logs.get(name)
        return self.memory_topics.get(name)

    def _beside_compacted(self, topics: tuple[str, ...]) -> str | None:
        """A set that names a compacted topic and another: refused.  It is stored once per topic,
        and a subscription matching both reads each message from the first topic that matches;
        once compaction removed the compacted copy, that subscription would skip the message
        (docs/compaction.md).  Costs nothing for one-topic sets or a hub that compacts nothing."""
        compaction = self.store.compaction if self.store is not None else None
        if compaction is not None:
            for topic in topics:
                if compaction.applies(topic):
                    return f"{topic} is a compacted topic: a message set naming it names no other topic"
        return None

    def _invalid_topic(self, topics: tuple[str, ...]) -> str | None:
        valid = self._valid
        for topic in topics:
            if topic not in valid:
                try:
                    check_topic(topic)
                except InvalidTopicError as exc:
                    return str(exc)
                if len(valid) >= MAX_VALID_TOPICS:
                    valid.clear()
                valid.add(topic)
        return None

    def publish(self, session: ClientSession, frame: Publish) -> None:
        stats = self.stats
        stats.publish_frames += 1
        if frame.has_headers and session.version < HEADERS_CLIENT_VERSION:
            # To a version 1 or 2 connection the flag is a reserved bit, as it was before version 3.
            session.fail(ErrorCode.MALFORMED_FRAME,
                         f"PUBLISH flag HEADERS needs client protocol {HEADERS_CLIENT_VERSION}", ref=frame.sequence)
            return
        for mset in frame.sets:
            problem = self._invalid_topic(mset.topics)
            if problem is None and len(mset.topics) > 1:  # (most sets name one topic: no call)
                problem = self._beside_compacted(mset.topics)
            if problem is not None:
                session.fail(ErrorCode.INVALID_TOPIC, problem, ref=frame.sequence)
                return
        identity = session.identity
        if identity is not None:  # a hub with a users file: every topic of the frame granted, or nothing stored
            for mset in frame.sets:
                refusal = identity.permissions.publish_refusal(mset.topics)
                if refusal is not None:
                    identity.counters.publish_refused += 1
                    session.fail(ErrorCode.NOT_AUTHORIZED, refusal, ref=frame.sequence, why=CloseReason.NOT_AUTHORIZED)
                    return
        store = self.store
        if store is not None and store.storage_error is not None:
            session.fail(ErrorCode.STORAGE_ERROR, f"the hub cannot store: {store.storage_error}", ref=frame.sequence)
            return
        if not self._may_create_topics(session, frame):
            return
        producer = frame.producer_id
        seq = frame.sequence
        timestamp = self.clock.wall_us()
        ranges: dict[str, list[int]] = {}
        origin = self.origin
        stored_any = False
        # Idempotence is decided once per topic for the whole frame, before anything
        # is appended: a frame may hold several sets for one topic, and the first
        # append must not make the later ones look like a retry.  Per topic: a retry
        # after a crash between two topics' appends completes the missing ones.
        already: set[str] = set()
        if producer:
            for mset in frame.sets:
                for name in mset.topics:
                    topic = self.existing(name)
                    if topic is not None and topic.producers.get(producer, 0) >= seq:
                        already.add(name)
        try:
            for mset in frame.sets:
                origin_seq = origin.take(mset.count)
                stored = self.store_set(
                    mset.topics, mset.count, mset.records, timestamp=timestamp, origin=origin.hub_id,
                    origin_seq=origin_seq, producer=producer, producer_seq=seq, ranges=ranges, skip=already,
                    headers=mset.headers,
                )
                if stored:
                    stored_any = True
                    session.messages_in += mset.count
                    self.mesh.forward(origin_seq, timestamp, mset)
        except OSError as exc:
            log.critical("cannot append to the log: %s", exc, extra=ev("storage_failed", reason="append"))
            if store is not None:
                store.storage_error = exc
            session.fail(ErrorCode.STORAGE_ERROR, f"the hub cannot store: {exc}", ref=seq)
            return
        if not stored_any and producer:
            stats.duplicate_batches += 1
        if frame.wants_ack:
            if stored_any or not producer:
                offsets = [(t, r[0], r[1]) for t, r in ranges.items()]
                ack = publish_ack_frame(producer, seq, AckStatus.STORED, timestamp, offsets)
            else:
                ack = publish_ack_frame(producer, seq, AckStatus.DUPLICATE, timestamp)
            self._acknowledge(session, ack, seq)

    def _may_create_topics(self, session: ClientSession, frame: Publish) -> bool:
        """Check the topics ``frame`` would create against the limits; refuse it whole if one is passed."""
        new = new_topics(frame, self.existing)
        if not new:
            return True
        existing = len(self.store.logs) if self.store is not None else len(self.memory_topics)
        identity = session.identity
        counters = identity.counters if identity is not None else None
        user = (identity.label, counters.topics_created) if identity is not None and counters is not None else None
        refusal = topic_refusal(self.limits, new=len(new), created_by_connection=session.topics_created,
                                existing=existing, user=user)  # fmt: skip
        if refusal is not None:
            self.stats.topic_limit_refusals += 1
            if counters is not None:
                counters.topic_limit_refused += 1
            reason = f"{refusal} (topic {min(new)!r})"
            session.fail(ErrorCode.LIMIT_EXCEEDED, reason, ref=frame.sequence, why=CloseReason.LIMIT_EXCEEDED)
            return False
        session.topics_created += len(new)
        if counters is not None:
            counters.topics_created += len(new)
        self.stats.topics_created += len(new)
        return True

    def store_set(
        self,
        topics: tuple[str, ...],
        count: int,
        records: bytes,
        *,
        timestamp: int,
        origin: int,
        origin_seq: int,
        producer: int = 0,
        producer_seq: int = 0,
        ranges: dict[str, list[int]] | None = None,
        skip: set[str] | frozenset[str] = frozenset(),
        headers: bytes = b"",
    ) -> bool:
        """Append one message set to its topics and route it; False if every topic had it.

        Shared by local publishes and sets forwarded from other hubs: live
        subscribers get the batch (encoded once), followers and groups are woken.
        """
        stats = self.stats
        store = self.store
        match = self.router.match
        seen: set[Subscription] | None = set() if len(topics) > 1 else None
        stored = False
        for name in topics:
            if name in skip:
                continue
            topic = self.topic(name, timestamp)
            batch = SharedBatch(name, topic.next_offset, timestamp, origin, origin_seq, count, records, headers)
            segment = topic.append(batch, topics=topics, producer_id=producer, producer_seq=producer_seq,
                                   append_ts=self.clock.wall_us() if origin != self.origin.hub_id else timestamp)
            if segment is not None and store is not None:
                store.wrote(segment)
            stored = True
            if ranges is not None:
                entry = ranges.get(name)
                if entry is None:
                    ranges[name] = [batch.base_offset, count]
                else:
                    entry[1] += count
            stats.messages_in += count
            stats.bytes_in += len(records)
            for sub in match(name):
                if not sub.live:
                    sub.wake()
                    continue
                if sub.denied is not None and sub.denied(name):
                    continue  # a subscription narrowed by its user's deny rules (hub.core.acl)
                if seen is not None:
                    if sub in seen:
                        continue
                    seen.add(sub)
                if sub.query is not None and not sub.query(batch.headers):
                    continue  # headers its tag query refuses (wire.query)
                if sub.key_filter is not None:  # only the records of the keys it asked for (key_filters)
                    for run, _ in segments(sub.key_filter, batch):
                        if run is not None:
                            sub.session.deliver(sub, run)
                    continue
                sub.session.deliver(sub, batch)
        return stored

    def _acknowledge(self, session: ClientSession, ack: bytes, seq: int) -> None:
        store = self.store
        if store is None:
            session.send_control(ack)
            return

        def durable() -> None:
            if store.storage_error is not None:
                session.fail(ErrorCode.STORAGE_ERROR, f"the hub cannot store: {store.storage_error}", ref=seq)
            else:
                session.send_control(ack)

        store.when_durable(durable)
