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
from collections.abc import Iterable
from itertools import count
from types import MappingProxyType
from typing import Any

import wire
from wire import SlowConsumerPolicy, StartPosition

from .batching import Ticket
from .errors import InvalidTopicError
from .messages import NO_HEADERS, Gap, Message

log = logging.getLogger("pub0sub.sdk")

_unpack_record_header = struct.Struct(">HI").unpack_from
#: Batches of at least this many records are split by ``wire.iter_records`` (SubState.messages).
_SPLIT_IN_C_FROM = 32

POLICIES = {"cancel": SlowConsumerPolicy.CANCEL, "drop-oldest": SlowConsumerPolicy.DROP_OLDEST}
#: The application-facing ack modes and what each puts on the wire.  "auto" and "manual" are both
#: EXPLICIT for the hub; they differ only in who calls ack (the SDK or the application).
#: "explicit" is the older name of "manual", kept as an alias.
ACK_MODES = {
    "none": wire.AckMode.NONE,
    "auto": wire.AckMode.EXPLICIT,
    "manual": wire.AckMode.EXPLICIT,
    "explicit": wire.AckMode.EXPLICIT,
}
#: Most acknowledged ranges remembered per topic for resending after a reconnect (see SubState.acks_sent).
MAX_SENT_RANGES = 256


def resolve_ack(ack: str | None, *, durable: str, group: str) -> str:
    """The effective ack mode: ``None`` means "auto" for durable subscriptions and groups, else "none"."""
    if ack is None:
        return "auto" if durable or group else "none"
    if ack not in ACK_MODES:
        raise ValueError(f"ack must be one of {sorted(ACK_MODES)}, got {ack!r}")
    if ack == "explicit":
        return "manual"
    if ack == "none" and group:
        # The hub tracks every group delivery in a pending list: without acks everything would be
        # redelivered after ack_wait, forever.
        raise ValueError("a consumer group needs ack='auto' or ack='manual'")
    return ack


def add_range(ranges: list[list[int]], first: int, last: int) -> None:
    """Merge the inclusive range ``first..last`` into sorted, disjoint, non-adjacent ``ranges``.

    Acks mostly arrive in order, so the common case (extend the last range) costs O(1).
    """
    if ranges:
        tail = ranges[-1]
        if tail[0] <= first <= tail[1] + 1:
            if last > tail[1]:
                tail[1] = last
            return
        if first > tail[1] + 1:
            ranges.append([first, last])
            return
    merged: list[list[int]] = []
    placed = False
    for r in ranges:
        if r[1] + 1 < first:
            merged.append(r)
        elif last + 1 < r[0]:
            if not placed:
                merged.append([first, last])
                placed = True
            merged.append(r)
        else:
            first, last = min(first, r[0]), max(last, r[1])
    if not placed:
        merged.append([first, last])
    ranges[:] = merged


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


def check_patterns(names: Iterable[str]) -> None:
    """Refuse (:class:`InvalidTopicError`) any name the topic rule does not allow in a subscription."""
    for name in names:
        InvalidTopicError.check(name, pattern=True)


def checked_names(topics: str | Iterable[str]) -> list[str]:
    """``topics`` (one name or several) as a list, each checked by :func:`check_patterns`."""
    names = [topics] if isinstance(topics, str) else list(topics)
    check_patterns(names)
    return names


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
        ack: str,
        durable: str,
        group: str,
        ack_wait: float | None,
        max_pending_bytes: int,
        key_filter: wire.KeyFilter | None = None,
        query: str | None = None,
    ) -> None:
        self.sub_id = sub_id
        #: the tag query the hub applies (wire.query), as given
        self.query = query
        #: the keys the hub delivers (None: every key); a resubscription carries it as it is now
        self.key_filter = key_filter
        self.patterns = patterns
        self.start = start
        self.start_value = start_value
        self.offsets = offsets
        self.policy = policy
        self.credit = credit
        #: "none", "auto" or "manual" (see resolve_ack)
        self.ack = ack
        self.ack_mode = ACK_MODES[ack]
        self.durable = durable
        self.group = group
        self.ack_wait_ms = 0 if ack_wait is None else max(1, round(ack_wait * 1000))
        #: acks only mean something to the hub for a durable subscription or a group member
        self.sends_acks = self.ack_mode == wire.AckMode.EXPLICIT and bool(durable or group)
        #: Drop redelivered offsets already received in this process.  Not for groups: a group
        #: redelivers on purpose (ack_wait, a member left) and may hand the same offset back to us.
        self.dedup = not group and (start != StartPosition.LATEST or bool(durable))
        #: messages dropped as duplicates of offsets already received (after a reconnect)
        self.duplicates = 0
        #: per topic, acknowledged ranges not yet written
        self.acks: dict[str, list[list[int]]] = {}
        #: per topic, ranges already written, resent after a reconnect: an ACK in flight when the
        #: connection died may never have reached the hub, and the redelivered offsets are dropped
        #: here as duplicates, so the application would never ack them again (a hole under the
        #: durable floor).  Acking twice is harmless.  Bounded by MAX_SENT_RANGES per topic.
        self.acks_sent: dict[str, list[list[int]]] = {}
        #: queued in the protocol's list of subscriptions with unwritten acks
        self.ack_dirty = False
        #: per topic, the offset after the last message the hub delivered on the current
        #: connection (duplicates dropped here included).  The hub refuses an ACK for offsets
        #: it has not delivered on that connection (ERROR INVALID_ACK), so acks at or past it --
        #: made for messages received before a reconnect -- wait in ``acks`` until the
        #: redelivery passes them.  Reset by every new connection.
        self.delivered_end: dict[str, int] = {}
        #: ``acks`` holds ranges waiting for ``delivered_end`` to pass them
        self.acks_waiting = False
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
        check_patterns(self.patterns)
        start, value, offsets = self.start, self.start_value, self.offsets
        if start == StartPosition.OFFSET and not offsets:
            offsets = {p: value for p in self.patterns if not wire.is_pattern(p)}
        # A durable name makes the hub start at its acknowledged floor where it has one (the SDK
        # drops what it already received).  For topics without one (nothing delivered before the
        # loss) a durable "latest" must not become "latest at the reconnect": it resumes at the
        # offsets received like a replay; "earliest" and a timestamp are still right as they are.
        durable_as_is = bool(self.durable) and start in (StartPosition.EARLIEST, StartPosition.TIMESTAMP)
        if resume and not self.group and not durable_as_is:
            if start == StartPosition.LATEST and not self.durable:
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
            ack_wait_ms=self.ack_wait_ms,
            durable=self.durable,
            group=self.group,
            offsets=tuple(wire.TopicOffset(topic=t, offset=o) for t, o in offsets.items()),
            key_filter=self.key_filter,
            query=self.query,
        )

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            waiter.set()

    def deliver(self, batch: wire.RecordBatch) -> bool:
        """Buffer a delivered batch; false when the client-side limit forces the cancel policy."""
        topic = batch.topic
        end = batch.base_offset + batch.count
        if end > self.delivered_end.get(topic, -1):
            self.delivered_end[topic] = end
        if self.dedup:
            seen = self.next_offsets.get(topic)
            if seen is not None and batch.base_offset < seen:
                # Redelivered after a reconnect (a durable subscription restarts at its acknowledged
                # floor): these offsets were already received, keep only the new tail.
                skip = seen - batch.base_offset
                if skip >= batch.count:
                    self.duplicates += batch.count
                    return True
                self.duplicates += skip
                batch = _drop_head(batch, skip)
        self.next_offsets[topic] = batch.base_offset + batch.count
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
        # One read-only map per batch, shared by its messages: headers belong to the set.
        headers = MappingProxyType(wire.decode_headers(batch.headers)) if batch.headers else NO_HEADERS
        if batch.count >= _SPLIT_IN_C_FROM:
            # wire.iter_records splits records of one size (the usual case) in C, one iter_unpack:
            # 27% less per message at 1,000 a batch.  Its set-up (proving the sizes uniform) costs
            # more than it saves on a few records, so small batches take the loop below.
            return [
                Message(topic, o, timestamp, key or None, data, origin, owner, headers)
                for o, (key, data) in zip(count(offset), wire.iter_records(records))
            ]
        out: list[Message] = []
        append = out.append
        pos = 0
        end = len(records)
        while pos < end:
            key_len, data_len = _unpack_record_header(records, pos)
            k = pos + 6
            d = k + key_len
            pos = d + data_len
            append(Message(topic, offset, timestamp, records[k:d] if key_len else None, records[d:pos], origin, owner,
                           headers))  # fmt: skip
            offset += 1
        return out


def key_filter_of(
    keys: Iterable[bytes | str] = (), prefixes: Iterable[bytes | str] = (), *, every: bool = False
) -> wire.KeyFilter:
    """A :class:`wire.KeyFilter` from what the application gives (``str`` as UTF-8)."""

    def raw(values: Iterable[bytes | str], what: str) -> tuple[bytes, ...]:
        if isinstance(values, bytes | str):
            raise TypeError(f"{what} must be a list of keys, not one {type(values).__name__}")
        return tuple(dict.fromkeys(v.encode() if isinstance(v, str) else bytes(v) for v in values))

    return wire.KeyFilter(all=every, keys=raw(keys, "keys"), prefixes=raw(prefixes, "prefixes"))


def _drop_head(batch: wire.RecordBatch, n: int) -> wire.RecordBatch:
    """``batch`` without its first ``n`` records (0 < n < count)."""
    records = batch.records
    pos = 0
    for _ in range(n):
        key_len, data_len = _unpack_record_header(records, pos)
        pos += 6 + key_len + data_len
    return wire.RecordBatch(
        topic=batch.topic,
        base_offset=batch.base_offset + n,
        timestamp=batch.timestamp,
        origin=batch.origin,
        origin_seq=batch.origin_seq,
        count=batch.count - n,
        records=records[pos:],
        headers=batch.headers,
    )


def _closed_error(state: SubState) -> BaseException:
    from .errors import SubscriptionClosedError

    return SubscriptionClosedError(
        state.sub_id, wire.ErrorCode.UNSUBSCRIBED, "subscription closed", topics=state.topics
    )


class SubscriptionView:
    """What the async and blocking subscription objects share: the view of their
    :class:`SubState` and the per-batch bookkeeping behind ``ack="auto"``."""

    _client: Any

    def _init_batches(self) -> None:
        # The batch being handed out and how many of it the application has taken; auto-ack
        # acknowledges from these at batch boundaries, so nothing is done per message.
        self._msgs: list[Message] = []
        self._pos = 0
        #: how many of the taken messages are still "in the application's hands" (1 when read one
        #: by one, the whole batch with batches()): not acknowledged by a close after an exception
        self._held = 0
        self._auto = False
        #: start offsets the hub reported in SUB_OK, per exact topic
        self.start_offsets: dict[str, int] = {}

    def _settle(self, n: int) -> None:
        """Auto-ack: the first ``n`` messages of the current batch are done (one topic, consecutive offsets)."""
        msgs = self._msgs
        if n > 0 and msgs:
            first = msgs[0]
            self._client._proto.ack_range(self._s, first.topic, first.offset, first.offset + n - 1)
            self._ack_queued()
        self._msgs = msgs[n:]
        self._pos -= n
        self._held = min(self._held, self._pos)

    def _ack_queued(self) -> None:
        """An ack waits in the protocol core; a driver that sends on its own schedule is told here."""

    @property
    def _s(self) -> SubState:
        raise NotImplementedError

    @property
    def id(self) -> int:
        """The subscription id on the wire (unique per client)."""
        return self._s.sub_id

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics and patterns currently subscribed."""
        return self._s.topics

    @property
    def gaps(self) -> list[Gap]:
        """Every gap seen so far, in order."""
        return self._s.gaps

    @property
    def positions(self) -> dict[str, int]:
        """Per topic, the offset after the last message received (where a resume starts)."""
        return dict(self._s.next_offsets)

    @property
    def duplicates(self) -> int:
        """Redelivered messages dropped because this subscription had already received them (after a reconnect)."""
        return self._s.duplicates
