"""A connection's bounded outbound queue and its slow-consumer policies.

The router only ever appends here (never awaits), so a publisher is never
blocked by a slow subscriber.  When a delivery would push the queue past
``cap`` bytes, the subscription's policy decides: CANCEL ends it, DROP_OLDEST
replaces its oldest queued batches by GAP notices that say exactly what was
dropped.  Nothing is dropped silently: every drop is counted.

Control frames (pongs, acks, SUB_OK, errors, status) count against the same cap
(:attr:`OutboundQueue.control_bytes`, see ``ClientSession.send_control``), and
consecutive ones share one buffer: a client that sends millions of pings and
never reads costs its queued bytes, not a queue item per pong.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from wire import Gap, deliver_prefix

if TYPE_CHECKING:
    from ..storage.batches import SharedBatch
    from .stats import HubStats


class Subscriber(Protocol):
    """The counters a queue keeps for each subscription it holds output of."""

    sub_id: int
    queued_messages: int
    delivered_messages: int
    dropped_messages: int
    gap_notices: int


@dataclass(slots=True, eq=False)
class Outgoing:
    """One queued piece of output: a DELIVER, a GAP or a control frame."""

    pieces: tuple[bytes | bytearray, ...]
    nbytes: int
    sub: Subscriber | None = None
    batch: SharedBatch | None = None
    gap_topic: str = ""
    gap_first: int = 0
    gap_count: int = 0
    #: a buffer of control frames that later control frames may join (``pieces[0]`` is a bytearray)
    control: bool = False


#: Control frames share one queue item up to this size (one send takes at least one item whole).
CONTROL_BUFFER_BYTES = 64 << 10


#: What an empty queue holds instead of a deque of its own: an empty deque is ~600 bytes,
#: and most of a hub's connections are idle subscribers with nothing queued (C1 in
#: docs/benchmarks.md).  A tuple, so an append that bypasses :meth:`OutboundQueue._append`
#: fails loudly instead of going nowhere.
_NOTHING = cast("deque[Outgoing]", ())


class OutboundQueue:
    """FIFO of encoded frames with a byte cap enforced per subscription policy."""

    __slots__ = ("cap", "control_bytes", "dropped_messages", "headers", "items", "pending_bytes", "stats")

    def __init__(self, cap: int, stats: HubStats) -> None:
        self.cap = cap
        #: The hub's counters: every delivery written is counted there as it leaves, so the hub's
        #: total is one number to read, not a sum over every connection (C1: 19,000 of them).
        self.stats = stats
        self.items: deque[Outgoing] = _NOTHING
        self.pending_bytes = 0
        #: the part of ``pending_bytes`` that is control frames
        self.control_bytes = 0
        self.dropped_messages = 0
        #: the client reads DELIVER_HEADERS (protocol 3); older ones get headered batches without them
        self.headers = False

    def _append(self, item: Outgoing) -> None:
        if self.items is _NOTHING:
            self.items = deque()
        self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)

    def push_control(self, frame: bytes) -> None:
        """Acks, pongs, SUB_OK/SUB_END, errors: never subject to a subscription's policy
        (``ClientSession.send_control`` bounds them); joined to the control buffer queued last."""
        items = self.items
        n = len(frame)
        last = items[-1] if items else None
        if last is not None and last.control and last.nbytes + n <= CONTROL_BUFFER_BYTES:
            buffer = last.pieces[0]
            assert isinstance(buffer, bytearray)
            buffer += frame
            last.nbytes += n
        else:
            self._append(Outgoing((bytearray(frame),), n, control=True))
        self.pending_bytes += n
        self.control_bytes += n

    def fits(self, nbytes: int) -> bool:
        # An empty queue always takes one item, so a single big batch cannot
        # cancel a consumer that is keeping up.
        return self.pending_bytes == 0 or self.pending_bytes + nbytes <= self.cap

    def push_deliver(self, sub: Subscriber, batch: SharedBatch) -> None:
        header = batch.header
        body_len = len(header) + len(batch.records)
        headers = batch.headers
        if headers and self.headers:
            body_len += len(headers)
            pieces: tuple[bytes, ...] = (deliver_prefix(sub.sub_id, body_len, headers=True), headers, header,
                                         batch.records)  # fmt: skip
        else:
            pieces = (deliver_prefix(sub.sub_id, body_len), header, batch.records)
        nbytes = 9 + body_len
        self._append(Outgoing(pieces, nbytes, sub, batch))
        self.pending_bytes += nbytes
        sub.queued_messages += batch.count

    def drop_oldest(self, sub: Subscriber, need: int) -> int:
        """Replace ``sub``'s oldest queued batches by GAP notices until ``need`` fits.

        Returns the number of messages dropped.
        """
        dropped = 0
        items = self.items
        i = 0
        while i < len(items) and not self.fits(need):
            item = items[i]
            if item.sub is sub and item.batch is not None:
                batch = item.batch
                gap = self._gap_item(sub, batch.topic, batch.base_offset, batch.count)
                prev = items[i - 1] if i > 0 else None
                if (
                    prev is not None
                    and prev.sub is sub
                    and prev.batch is None
                    and prev.gap_topic == batch.topic
                    and prev.gap_first + prev.gap_count == batch.base_offset
                ):
                    # Extend the notice just before instead of queueing a second one.
                    merged = self._gap_item(sub, batch.topic, prev.gap_first, prev.gap_count + batch.count)
                    self.pending_bytes += merged.nbytes - prev.nbytes - item.nbytes
                    items[i - 1] = merged
                    del items[i]
                    sub.gap_notices -= 1
                else:
                    self.pending_bytes += gap.nbytes - item.nbytes
                    items[i] = gap
                    i += 1
                sub.gap_notices += 1
                sub.queued_messages -= batch.count
                dropped += batch.count
            else:
                i += 1
        sub.dropped_messages += dropped
        self.dropped_messages += dropped
        return dropped

    def gap_instead(self, sub: Subscriber, batch: SharedBatch) -> None:
        """Queue a GAP in place of ``batch`` (no room even after dropping)."""
        gap = self._gap_item(sub, batch.topic, batch.base_offset, batch.count)
        self._append(gap)
        self.pending_bytes += gap.nbytes
        sub.gap_notices += 1
        sub.dropped_messages += batch.count
        self.dropped_messages += batch.count

    def push_gap(self, sub: Subscriber, topic: str, first: int, count: int) -> None:
        gap = self._gap_item(sub, topic, first, count)
        self._append(gap)
        self.pending_bytes += gap.nbytes
        sub.gap_notices += 1

    def discard(self, sub: Subscriber) -> int:
        """Remove everything queued for ``sub``; returns messages discarded."""
        kept: deque[Outgoing] = deque()
        gone = 0
        for item in self.items:
            if item.sub is sub:
                self.pending_bytes -= item.nbytes
                if item.batch is not None:
                    gone += item.batch.count
            else:
                kept.append(item)
        self.items = kept if kept else _NOTHING
        sub.queued_messages = 0
        return gone

    def clear(self) -> int:
        """Drop everything (the connection is closing); returns messages discarded."""
        gone = sum(item.batch.count for item in self.items if item.batch is not None)
        self.items = _NOTHING
        self.pending_bytes = self.control_bytes = 0
        return gone

    def take(self, limit: int) -> tuple[bytes, int]:
        """Pop items worth up to ``limit`` bytes (at least one): their bytes for one socket
        send, and their queued size."""
        pieces: list[bytes | bytearray] = []
        size = delivered = 0
        items = self.items
        while items and size < limit:
            item = items.popleft()
            pieces.extend(item.pieces)
            size += item.nbytes
            if item.control:
                self.control_bytes -= item.nbytes
            elif item.sub is not None and item.batch is not None:
                sub = item.sub
                sub.queued_messages -= item.batch.count
                sub.delivered_messages += item.batch.count
                delivered += item.batch.count
        self.pending_bytes -= size
        self.stats.deliveries += delivered
        if not items:
            self.items = _NOTHING
        return b"".join(pieces), size

    @staticmethod
    def _gap_item(sub: Subscriber, topic: str, first: int, count: int) -> Outgoing:
        frame = Gap(sub_id=sub.sub_id, topic=topic, first_offset=first, dropped=count).encode()
        return Outgoing((frame,), len(frame), sub, None, topic, first, count)
