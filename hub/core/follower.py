"""Delivering a subscription from the topic logs: replay, then follow the tail.

Every subscription that is not "live from now, ephemeral" (a start position,
a durable name) is a follower: it keeps a next offset per topic, reads
batches from the log, and delivers them when its connection has room.  There
is no separate bootstrap and incremental phase to stitch together, so there
is no seam where a message could be lost or doubled: catching up and
following the tail are the same step.  A slow follower lags on the log
instead of losing messages; it never grows hub memory past the connection cap.

A follower is a job of the hub's :class:`~hub.core.work.WorkQueue`: woken by a
publish to a topic it follows, by room on its connection or by credit, it
reads one bounded piece per topic each step, and is left alone while it has
nothing to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from wire import AckMode, StartPosition
from wire.topics import pattern_matches

from ..storage.batches import Hole, SharedBatch, StoredBatch
from ..storage.topic_log import TopicLog
from .acks import AckTracker, ack_refusal
from .key_filters import segments

if TYPE_CHECKING:
    from ..storage.store import LogStore
    from .clients import ClientSession, Subscription
    from .consumers import ConsumerState
    from .work import WorkQueue

log = logging.getLogger("pub0sub.hub.follower")

#: Bytes read from a log per step: large enough to batch, small enough to interleave topics.
READ_BYTES = 256 << 10


def matcher(patterns: list[str]) -> Callable[[str], bool]:
    """A cached "does any pattern match this topic" function."""
    compiled = [tuple(p.split(".")) for p in patterns]
    cache: dict[str, bool] = {}

    def matches(topic: str) -> bool:
        hit = cache.get(topic)
        if hit is None:
            tokens = topic.split(".")
            hit = cache[topic] = any(pattern_matches(c, tokens) for c in compiled)
        return hit

    return matches


class TopicSelection:
    """The existing topics that ``patterns`` select.

    Followers and groups ask on every wake-up (every publish to a topic they follow);
    the list is recomputed only when the store has created a topic log since, not by
    scanning every log each time.
    """

    def __init__(self, store: LogStore, patterns: list[str], denied: Callable[[str], bool] | None = None) -> None:
        self._store = store
        matches = matcher(patterns)
        # A subscription narrowed by its user's deny rules never selects a denied topic (hub.core.acl).
        self.matches = matches if denied is None else lambda topic: matches(topic) and not denied(topic)
        self._generation = -1
        self._topics: list[str] = []

    def topics(self) -> list[str]:
        if self._generation != self._store.generation:
            self._topics = [t for t in self._store.logs if self.matches(t)]
            self._generation = self._store.generation
        return self._topics


def first_matching(topics: tuple[str, ...], matches: Callable[[str], bool]) -> str | None:
    for topic in topics:
        if matches(topic):
            return topic
    return None


class LogFollower:
    def __init__(
        self,
        *,
        store: LogStore,
        sub: Subscription,
        work: WorkQueue,
        start: StartPosition,
        start_value: int,
        offsets: dict[str, int],
        consumer: ConsumerState | None,
        positions_moved: Callable[[], None],
        failed: Callable[[Subscription, str], None],
    ) -> None:
        self.store = store
        self.sub = sub
        self.session: ClientSession = sub.session
        self.start = start
        self.start_value = start_value
        self.offsets = dict(offsets)
        self.consumer = consumer
        #: next offset to deliver, per topic
        self.positions: dict[str, int] = {}
        self._work = work
        self._positions_moved = positions_moved
        self._failed = failed
        self._selection = TopicSelection(store, sub.patterns, sub.denied)
        # Topics that exist now start "latest" at their current end; topics
        # created later start at 0 -- every message in them is newer.
        self._latest_at = {t: lg.next_offset for t, lg in store.logs.items()}

    def __repr__(self) -> str:
        return f"LogFollower(connection {self.session.conn_id}, subscription {self.sub.sub_id})"

    def wake(self) -> None:
        if not self.sub.closed:
            self._work.wake(self)

    def stop(self) -> None:
        """The subscription ended: nothing more to do."""
        self._work.discard(self)

    def failed(self, exc: Exception) -> None:
        self._failed(self.sub, "internal error while reading the log")

    def patterns_changed(self) -> None:
        self._selection = TopicSelection(self.store, self.sub.patterns, self.sub.denied)
        self.wake()

    def ack_refusal(self, topic: str, first: int, last: int) -> str | None:
        """Why the subscriber may not acknowledge ``first..last`` of ``topic`` (None: it may).

        This attachment delivered, per topic, everything from the durable floor it started
        at up to its position: only those offsets can be pending.
        """
        consumer = self.consumer
        tracker = None if consumer is None else consumer.positions.get(topic)
        return ack_refusal(
            topic, first, last,
            floor=None if tracker is None else tracker.floor,
            delivered_end=self.positions.get(topic),
        )

    def _initial_position(self, topic: str, topic_log: TopicLog) -> int:
        if self.consumer is not None and topic in self.consumer.positions:
            return self.consumer.positions[topic].floor
        if topic in self.offsets:
            return self.offsets[topic]
        if self.start is StartPosition.EARLIEST:
            return topic_log.first_offset
        if self.start is StartPosition.TIMESTAMP:
            return topic_log.offset_for_timestamp(self.start_value)
        return self._latest_at.get(topic, 0)

    def position_of(self, topic: str) -> int:
        topic_log = self.store.logs.get(topic)
        if topic_log is None:
            return self._latest_at.get(topic, 0)
        if topic not in self.positions:
            self.positions[topic] = self._initial_position(topic, topic_log)
        return self.positions[topic]

    def step(self) -> bool:
        """One pass over the topics, one bounded read each; True if anything moved.

        Stops early, waiting to be woken, when the connection's queue is over half full
        (the session wakes it as it drains) or the subscription's credit is spent.
        """
        sub = self.sub
        session = self.session
        moved = False
        logs = self.store.logs
        for topic in self._selection.topics():
            if sub.closed or session.closing is not None:
                return False
            topic_log = logs[topic]
            position = self.position_of(topic)
            if position >= topic_log.next_offset:
                continue
            if not session.has_room():
                session.wait_for_room(self)
                return moved
            if sub.credit is not None and sub.credit <= 0:
                return moved  # CREDIT wakes it (hub.core.subscribing.on_credit)
            for item in topic_log.read(position, READ_BYTES):
                if isinstance(item, Hole):
                    session.queue_gap(sub, topic, item.first, item.count)
                    self._advance(topic, item.first + item.count, acked=True)
                    continue
                if not self._deliver(topic, item):
                    break
            moved = True
        return moved

    def _deliver(self, topic: str, stored: StoredBatch) -> bool:
        """Deliver (or skip) one stored batch; False when credit ran out mid-way."""
        batch = stored.batch
        end = batch.base_offset + batch.count
        if batch.base_offset > self.positions.get(topic, batch.base_offset):
            # Offsets a compaction removed (docs/compaction.md): nothing to deliver, settled.
            self._advance(topic, batch.base_offset, acked=True)
        if len(stored.topics) > 1 and first_matching(stored.topics, self._selection.matches) != topic:
            # This message reaches the subscription through an earlier topic's log.
            self._advance(topic, end, acked=True)
            return True
        query = self.sub.query
        if query is not None and not query(batch.headers):  # not for this subscription: counts as done
            self._advance(topic, end, acked=True)
            return True
        key_filter = self.sub.key_filter
        if key_filter is None:
            return self._push(topic, batch)
        # A filtered subscription: the runs the filter selects, the rest skipped (and settled).
        for run, end in segments(key_filter, batch):
            if run is None:
                self._advance(topic, end, acked=True)
            elif not self._push(topic, run):
                return False
        return True

    def _push(self, topic: str, batch: SharedBatch) -> bool:
        """Deliver ``batch`` as far as credit allows; False when credit ran out."""
        credit = self.sub.credit
        if credit is not None:
            if credit <= 0:
                return False
            if batch.count > credit:
                batch, _ = batch.split(credit)
            self.sub.credit = credit - batch.count
        self.session.push_batch(self.sub, batch)
        self._advance(topic, batch.base_offset + batch.count, acked=self.sub.ack_mode is AckMode.NONE)
        return self.sub.credit is None or self.sub.credit > 0

    def _advance(self, topic: str, end: int, *, acked: bool) -> None:
        start = self.positions.get(topic, end)
        self.positions[topic] = end
        consumer = self.consumer
        if consumer is None:
            return
        tracker = consumer.positions.get(topic)
        if tracker is None:
            tracker = consumer.positions[topic] = AckTracker(start)
        if acked and end > start:
            tracker.ack(start, end - 1)
            self._positions_moved()
