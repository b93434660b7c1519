"""Consumer groups: each message goes to one member.

A group follows the topic logs like a durable subscription, but hands each
batch to one member (round robin among members with room and credit) and
records it in that member's pending list.  An acknowledgement removes it; a
pending range not acknowledged within ``ack_wait`` -- or whose member leaves
-- goes back to the group and is delivered again, preferably to another
member.  The group's acknowledged floor per topic is durable (see
:mod:`hub.core.consumers`), so after a hub restart every unacknowledged message is
delivered again: at-least-once.

A group is a job of the hub's :class:`~hub.core.work.WorkQueue`: woken by a
publish, an ack, credit, a member joining or leaving, room on a member's
connection, or (from the hub's tick) an ack deadline that passed.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wire import KeyFilter, StartPosition

from ..storage.batches import Hole, SharedBatch
from .acks import AckTracker, ack_refusal
from .events import ev
from .follower import READ_BYTES, TopicSelection, first_matching
from .key_filters import KeyMatcher, first_selected

if TYPE_CHECKING:
    from ..storage.store import LogStore
    from .clients import Subscription
    from .clock import Clock
    from .consumers import ConsumerState
    from .work import WorkQueue

log = logging.getLogger("pub0sub.hub.groups")

#: How often the hub's tick looks for ack deadlines that passed.
POLL_SECONDS = 0.05


@dataclass(slots=True, eq=False)
class PendingRange:
    member: Subscription
    topic: str
    first: int
    last: int
    deadline: float
    deliveries: int


class ConsumerGroup:
    #: Router entries with ``live`` False are woken, not delivered to directly.
    live = False

    def __init__(
        self,
        state: ConsumerState,
        *,
        store: LogStore,
        work: WorkQueue,
        clock: Clock,
        start: StartPosition,
        ack_wait: float,
        positions_moved: Callable[[], None],
    ) -> None:
        self.store = store
        self.state = state
        self.start = start
        self.ack_wait = ack_wait
        self.members: list[Subscription] = []
        self.pending: list[PendingRange] = []
        self.redeliver: deque[tuple[str, int, int, int, Subscription | None]] = deque()
        #: next offset to hand out, per topic
        self.cursor: dict[str, int] = {}
        self.redelivered_messages = 0
        self._rr = 0
        self._work = work
        self._clock = clock
        self._positions_moved = positions_moved
        self._selection = TopicSelection(store, state.patterns)
        self._latest_at = {t: lg.next_offset for t, lg in store.logs.items()}
        self._closed = False
        #: The keys the group delivers, given by the member that created it (hub.core.key_commands).
        self.keys: KeyFilter | None = None
        self.key_filter: KeyMatcher | None = None
        self.query: Callable[[bytes], bool] | None = None
        self.query_text: str | None = None

    @property
    def name(self) -> str:
        return self.state.name

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.name!r})"

    def wake(self) -> None:
        if not self._closed:
            self._work.wake(self)

    def failed(self, exc: Exception) -> None:
        log.error("group %r stopped dispatching after an internal error; its members stay attached", self.name,
                  extra=ev("group_failed", x_group=self.name))

    def due(self, now: float) -> bool:
        """An ack deadline passed (the hub's tick wakes the group then)."""
        return any(p.deadline <= now for p in self.pending)

    def select_as(self, sub: Subscription) -> None:
        """The group delivers what ``sub`` (the member that created it) selects: keys and query."""
        self.keys, self.key_filter, self.query, self.query_text = sub.keys, sub.key_filter, sub.query, sub.query_text

    # -- membership --------------------------------------------------------------------

    def add_member(self, sub: Subscription) -> None:
        self.members.append(sub)
        self.state.attached += 1
        self.wake()

    def remove_member(self, sub: Subscription) -> None:
        if sub in self.members:
            self.members.remove(sub)
            self.state.attached -= 1
        mine = [p for p in self.pending if p.member is sub]
        self.pending = [p for p in self.pending if p.member is not sub]
        for p in mine:
            self._requeue(p, avoid=None)
        self.wake()

    def _requeue(self, p: PendingRange, *, avoid: Subscription | None) -> None:
        tracker = self.state.positions.get(p.topic)
        runs = tracker.unacked_runs(p.first, p.last) if tracker else [(p.first, p.last)]
        for first, last in runs:
            self.redeliver.append((p.topic, first, last, p.deliveries, avoid))

    # -- acknowledgements --------------------------------------------------------------

    def ack_refusal(self, topic: str, first: int, last: int) -> str | None:
        """Why a member may not acknowledge ``first..last`` of ``topic`` (None: it may).

        Everything the group handed out lies below its cursor, and what is not
        acknowledged there is pending: with a member, or waiting to be delivered again.
        A member may settle any of it -- also a range its old connection received before
        it came back (the SDK acks those after a reconnect), as Redis's XACK and NATS
        JetStream allow -- but nothing the group never delivered.
        """
        tracker = self.state.positions.get(topic)
        return ack_refusal(
            topic, first, last,
            floor=None if tracker is None else tracker.floor,
            delivered_end=self.cursor.get(topic),
        )

    def ack(self, topic: str, first: int, last: int) -> None:
        """Settle ``first..last`` of ``topic`` (checked with :meth:`ack_refusal` first)."""
        tracker = self.state.positions.get(topic)
        if tracker is None:
            return
        tracker.ack(first, last)
        self._positions_moved()
        if self.pending:
            self.pending = [p for p in self.pending if p.topic != topic or tracker.unacked_runs(p.first, p.last)]

    def pending_count(self, member: Subscription | None = None) -> int:
        total = 0
        for p in self.pending:
            if member is not None and p.member is not member:
                continue
            tracker = self.state.positions.get(p.topic)
            runs = tracker.unacked_runs(p.first, p.last) if tracker else [(p.first, p.last)]
            total += sum(b - a + 1 for a, b in runs)
        return total

    # -- dispatch ----------------------------------------------------------------------

    def step(self) -> bool:
        """Redeliver what is owed (ack deadlines that passed first), then hand out what is new."""
        if self._closed:
            return False
        self._expire(self._clock.monotonic())
        return self._dispatch()

    def close(self) -> None:
        self._closed = True
        self._work.discard(self)

    def _expire(self, now: float) -> None:
        if not self.pending:
            return
        keep = []
        for p in self.pending:
            if p.deadline <= now:
                self._requeue(p, avoid=p.member)
            else:
                keep.append(p)
        self.pending = keep

    def _pick(self, avoid: Subscription | None = None) -> Subscription | None:
        members = self.members
        if not members:
            return None
        ready = [m for m in members if m.session.has_room() and (m.credit is None or m.credit > 0)]
        if not ready:
            for m in members:
                if not m.session.has_room():
                    m.session.wait_for_room(self)  # woken as its queue drains
            return None
        if avoid is not None and len(ready) > 1:
            ready = [m for m in ready if m is not avoid] or ready
        self._rr = (self._rr + 1) % len(ready)
        return ready[self._rr]

    def _position(self, topic: str) -> int:
        if topic not in self.cursor:
            tracker = self.state.positions.get(topic)
            if tracker is not None:
                start = tracker.floor
            else:
                topic_log = self.store.logs[topic]
                if self.start is StartPosition.EARLIEST:
                    start = topic_log.first_offset
                else:
                    start = self._latest_at.get(topic, 0)
                self.state.positions[topic] = AckTracker(start)
                self._positions_moved()
            self.cursor[topic] = start
        return self.cursor[topic]

    def _dispatch(self) -> bool:
        moved = False
        store = self.store
        # Redeliveries first: they are the oldest messages the group owes.
        while self.redeliver:
            topic, first, last, deliveries, avoid = self.redeliver[0]
            member = self._pick(avoid)
            if member is None:
                return moved
            self.redeliver.popleft()
            topic_log = store.logs.get(topic)
            if topic_log is None:
                continue
            # A late ack (the member acknowledged after its ack_wait) may have settled part
            # of the range since it was queued again: send only what is still owed.
            runs = self.state.positions[topic].unacked_runs(first, last)
            if not runs:
                continue
            if runs[0] != (first, last):
                for run in reversed(runs):
                    self.redeliver.appendleft((topic, run[0], run[1], deliveries, avoid))
                continue
            for item in topic_log.read(first, READ_BYTES):
                if isinstance(item, Hole):
                    # Offsets that cannot be served (corruption, retention) count as
                    # done; the rest of the range is still owed.
                    hole_end = min(item.first + item.count - 1, last)
                    self.state.positions[topic].ack(item.first, hole_end)
                    if hole_end < last:
                        self.redeliver.appendleft((topic, hole_end + 1, last, deliveries, avoid))
                    break
                if item.base_offset > first:  # offsets a compaction removed: settled
                    self.state.positions[topic].ack(first, min(item.base_offset, last + 1) - 1)
                    if item.base_offset <= last:
                        self.redeliver.appendleft((topic, item.base_offset, last, deliveries, avoid))
                    break
                batch = item.batch
                if batch.base_offset + batch.count - 1 > last:
                    batch, _ = batch.split(last - batch.base_offset + 1)
                end = batch.base_offset + batch.count
                self._send(member, topic, batch, deliveries + 1)
                self.redelivered_messages += batch.count
                if end <= last:
                    self.redeliver.appendleft((topic, end, last, deliveries, avoid))
                break
            moved = True
        for topic in self._selection.topics():
            topic_log = store.logs[topic]
            position = self._position(topic)
            if position >= topic_log.next_offset:
                continue
            member = self._pick()
            if member is None:
                return moved
            items = topic_log.read(position, READ_BYTES // 4)
            tracker = self.state.positions[topic]
            for item in items:
                if isinstance(item, Hole):
                    tracker.ack(item.first, item.first + item.count - 1)
                    self.cursor[topic] = item.first + item.count
                    continue
                batch = item.batch
                end = batch.base_offset + batch.count
                if batch.base_offset > self.cursor[topic]:  # offsets a compaction removed: settled
                    tracker.ack(self.cursor[topic], batch.base_offset - 1)
                    self.cursor[topic] = batch.base_offset
                if len(item.topics) > 1 and first_matching(item.topics, self._selection.matches) != topic:
                    tracker.ack(batch.base_offset, end - 1)
                    self.cursor[topic] = end
                    continue
                if self.query is not None and not self.query(batch.headers):  # skipped: counts as done
                    tracker.ack(batch.base_offset, end - 1)
                    self.cursor[topic] = end
                    continue
                if self.key_filter is not None:
                    selected = first_selected(self.key_filter, batch, tracker.ack)  # skipped records count as done
                    if selected is None:
                        self.cursor[topic] = end
                        continue
                    batch = selected
                    end = batch.base_offset + batch.count
                credit = member.credit
                if credit is not None and batch.count > credit:
                    batch, _ = batch.split(credit)
                    end = batch.base_offset + batch.count
                self._send(member, topic, batch, 1)
                self.cursor[topic] = end
                break  # one batch per member per turn spreads the load
            moved = True
        return moved

    def _send(self, member: Subscription, topic: str, batch: SharedBatch, deliveries: int) -> None:
        if member.credit is not None:
            member.credit -= batch.count
        member.session.push_batch(member, batch)
        if not self.pending:
            self._work.on_acks_awaited()
        self.pending.append(
            PendingRange(
                member, topic, batch.base_offset, batch.base_offset + batch.count - 1,
                self._clock.monotonic() + self.ack_wait, deliveries,
            )
        )

    def status(self) -> dict[str, object]:
        return {
            "group": self.name,
            "patterns": self.state.patterns,
            "members": [m.sub_id for m in self.members],
            "pending": {f"{m.session.conn_id}/{m.sub_id}": self.pending_count(m) for m in self.members},
            "pending_total": self.pending_count(),
            "redelivered_messages": self.redelivered_messages,
            "acked_floor": {t: tr.floor for t, tr in self.state.positions.items()},
        }
