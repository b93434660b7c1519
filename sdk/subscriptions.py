"""Client-side subscription state, sans-IO: buffered batches, resume positions, credit.

One :class:`SubState` per open subscription.  The protocol core appends what
the hub delivers; the I/O driver takes items out for the application.  Nothing
here does I/O: waking a waiting consumer is ``state.waiter.set()``, whatever
object the driver put there.
"""

from __future__ import annotations

import datetime as _dt
import logging
import struct
from collections import deque
from typing import Any

import wire
from wire import SlowConsumerPolicy, StartPosition

from .batching import Ticket
from .messages import Gap, Message

log = logging.getLogger("pub0sub.sdk")

_unpack_record_header = struct.Struct(">HI").unpack_from

POLICIES = {"cancel": SlowConsumerPolicy.CANCEL, "drop-oldest": SlowConsumerPolicy.DROP_OLDEST}
ACK_MODES = {"none": wire.AckMode.NONE, "explicit": wire.AckMode.EXPLICIT}


def parse_start(start: Any) -> tuple[StartPosition, int, dict[str, int]]:
    """``start`` as (position, start_value, offsets).

    ``"latest"``, ``"earliest"``, a ``{topic: offset}`` dict (topics not listed
    start at latest), an aware :class:`datetime.datetime`, or an int offset
    (applied to every exact topic of the subscription by the caller).
    """
    if isinstance(start, StartPosition):
        return start, 0, {}
    if start == "latest":
        return StartPosition.LATEST, 0, {}
    if start == "earliest":
        return StartPosition.EARLIEST, 0, {}
    if isinstance(start, dict):
        return StartPosition.OFFSET, 0, {str(t): int(o) for t, o in start.items()}
    if isinstance(start, _dt.datetime):
        if start.tzinfo is None:
            raise ValueError("a start datetime must be timezone-aware")
        micros = (start - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)) // _dt.timedelta(microseconds=1)
        return StartPosition.TIMESTAMP, micros, {}
    if isinstance(start, int) and not isinstance(start, bool) and start >= 0:
        return StartPosition.OFFSET, start, {}
    raise ValueError(
        f"start must be 'latest', 'earliest', an offset, a {{topic: offset}} dict or a datetime: {start!r}"
    )


def is_pattern(topic: str) -> bool:
    return any(token in ("*", ">") for token in topic.split("."))


class _Op:
    """A SUB or SUB_UPDATE waiting for its SUB_OK."""

    __slots__ = ("kind", "tickets")

    def __init__(self, kind: str, tickets: list[Ticket]) -> None:
        self.kind = kind  # "sub", "resume" or "update"
        self.tickets = tickets


class SubState:
    """Everything the client knows about one subscription."""

    def __init__(
        self,
        sub_id: int,
        patterns: list[str],
        *,
        start: StartPosition,
        start_value: int,
        offsets: dict[str, int],
        policy: SlowConsumerPolicy,
        credit: int,
        ack_mode: wire.AckMode,
        durable: str,
        group: str,
        max_pending_bytes: int,
    ) -> None:
        self.sub_id = sub_id
        self.patterns = patterns
        self.start = start
        self.start_value = start_value
        self.offsets = offsets
        self.policy = policy
        self.credit = credit
        self.ack_mode = ack_mode
        self.durable = durable
        self.group = group
        self.max_pending_bytes = max_pending_bytes
        #: items not yet taken by the application: RecordBatch or Gap
        self.items: deque[wire.RecordBatch | Gap] = deque()
        self.pending_bytes = 0
        #: per topic, the offset after the last message received: where a resumed subscription starts
        self.next_offsets: dict[str, int] = {}
        #: every gap this subscription has seen, in order (also yielded by ``events()``)
        self.gaps: list[Gap] = []
        self.ops: deque[_Op] = deque()
        #: SUB_OK received on the current connection
        self.open = False
        #: SUB_OK received at least once (a re-subscription then resumes where delivery stopped)
        self.confirmed = False
        #: no more items will be added (ended by the hub, unsubscribed, or failed)
        self.closed = False
        #: raised to the consumer once ``items`` is drained; None = ended normally
        self.error: BaseException | None = None
        self.unsubscribing = False
        self.since_grant = 0
        #: driver hooks: something with ``set()`` to wake a consumer, and the object Messages point to
        self.waiter: Any = None
        self.owner: Any = None

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self.patterns)

    def sub_frame(self, *, resume: bool) -> wire.Sub:
        """The SUB that opens (or, after a reconnect, re-opens) this subscription."""
        start, value, offsets = self.start, self.start_value, self.offsets
        if start == StartPosition.OFFSET and not offsets:
            offsets = {p: value for p in self.patterns if not is_pattern(p)}
        if resume and not (self.durable or self.group):
            if start == StartPosition.LATEST:
                offsets = {}
            else:
                # Continue right after the last message received: no gap, no duplicate.
                # Topics never seen keep their original start offset when one was given.
                start = StartPosition.OFFSET
                offsets = (
                    {**offsets, **self.next_offsets} if self.start == StartPosition.OFFSET else dict(self.next_offsets)
                )
        if start != StartPosition.TIMESTAMP:
            value = 0
        return wire.Sub(
            sub_id=self.sub_id,
            patterns=tuple(self.patterns),
            start=start,
            start_value=value,
            ack_mode=self.ack_mode,
            policy=self.policy,
            credit=self.credit,
            durable=self.durable,
            group=self.group,
            offsets=tuple(wire.TopicOffset(topic=t, offset=o) for t, o in offsets.items()),
        )

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            waiter.set()

    def deliver(self, batch: wire.RecordBatch) -> bool:
        """Buffer a delivered batch; false when the client-side limit forces the cancel policy."""
        self.next_offsets[batch.topic] = batch.base_offset + batch.count
        self.items.append(batch)
        self.pending_bytes += len(batch.records)
        waiter = self.waiter
        if waiter is not None:
            waiter.set()
        if self.pending_bytes > self.max_pending_bytes:
            return self._over_limit()
        return True

    def _over_limit(self) -> bool:
        if self.policy == SlowConsumerPolicy.CANCEL:
            return False
        front: list[Gap] = []  # what the dropped span becomes, in order
        fresh: set[int] = set()  # indexes in ``front`` of gaps made now (older ones were noted already)
        while self.pending_bytes > self.max_pending_bytes and len(self.items) > 1:
            item = self.items.popleft()
            if isinstance(item, Gap):
                front.append(item)
                continue
            self.pending_bytes -= len(item.records)
            last = front[-1] if front else None
            if (
                last is not None
                and len(front) - 1 in fresh
                and last.topic == item.topic
                and last.first_offset + last.dropped == item.base_offset
            ):
                front[-1] = Gap(item.topic, last.first_offset, last.dropped + item.count, "client")
            else:
                fresh.add(len(front))
                front.append(Gap(item.topic, item.base_offset, item.count, "client"))
        self.items.extendleft(reversed(front))
        for i in sorted(fresh):
            self.note_gap(front[i])
        return True

    def note_gap(self, gap: Gap) -> None:
        self.gaps.append(gap)
        log.warning(
            "subscription %d: %d messages of %r from offset %d were dropped (%s)",
            self.sub_id,
            gap.dropped,
            gap.topic,
            gap.first_offset,
            gap.reason,
        )

    def add_gap(self, gap: Gap) -> None:
        self.note_gap(gap)
        self.items.append(gap)
        self.wake()

    def end(self, error: BaseException | None) -> None:
        """No more items will come; the consumer gets ``error`` (or StopIteration) after draining."""
        if not self.closed:
            self.closed = True
            self.error = error
        for op in self.ops:
            for ticket in op.tickets:
                ticket.finish(error=error or _closed_error(self))
        self.ops.clear()
        self.wake()

    def messages(self, batch: wire.RecordBatch) -> list[Message]:
        """The Message objects of one batch (the receive side's per-message cost is here)."""
        topic = batch.topic
        timestamp = batch.timestamp
        origin = batch.origin
        owner = self.owner
        records = batch.records
        offset = batch.base_offset
        out: list[Message] = []
        append = out.append
        pos = 0
        end = len(records)
        while pos < end:
            key_len, data_len = _unpack_record_header(records, pos)
            k = pos + 6
            d = k + key_len
            pos = d + data_len
            append(Message(topic, offset, timestamp, records[k:d] if key_len else None, records[d:pos], origin, owner))
            offset += 1
        return out


def _closed_error(state: SubState) -> BaseException:
    from .errors import SubscriptionClosedError

    return SubscriptionClosedError(
        state.sub_id, wire.ErrorCode.UNSUBSCRIBED, "subscription closed", topics=state.topics
    )
