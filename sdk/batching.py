"""Publish batching, sans-IO: consecutive publishes become one PUBLISH frame.

Consecutive publishes to the same topics share one :class:`wire.MessageSet`;
a change of topics starts a new set in the same frame.  Headers belong to a set
(docs/protocol.md §4): a publish with headers joins the set before it only when
that set has the same topics and the same headers, else it starts one.  The per-message path
is one ``struct.pack``, one concatenation and one ``list.append``: no frame,
no object and no dataclass per message.  Frames are built with the ``wire``
types, so the byte layout lives in one place.

Acked publishes get a :class:`AckTicket` recording where the message sits in
its frame; the PUBLISH_ACK's per-topic ranges then give each message's offsets.

Records already in the wire layout (the Spark sink builds them per Arrow batch) go in
through :meth:`PublishBuffer.add_encoded`: a slice of records per frame, with the frame
boundaries :meth:`PublishBuffer.add` would have chosen for them one by one.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import wire
from wire.limits import DEFAULT_MAX_CLIENT_BODY, MAX_KEY_BYTES

from .errors import InvalidTopicError, Pub0subError
from .messages import PublishAck

_pack_record_header = struct.Struct(">HI").pack
#: PUBLISH body bytes before the first set: producer id, sequence, flags, set count.
_PUBLISH_HEAD_BYTES = 19
#: A set's fixed bytes besides its topics: topic count, record count, region length.
_SET_FIXED_BYTES = 9
#: Most sets one PUBLISH frame can carry (u16 count).
_MAX_SETS = 0xFFFF
#: Where a PUBLISH frame's flags byte sits: after the 5-byte frame header, the producer id and the sequence.
_FLAGS_AT = 5 + 16
_ACK_BIT = int(wire.PublishFlags.ACK)
_HEADERS_BIT = int(wire.PublishFlags.HEADERS)
#: Flush when this much is buffered: big enough to amortise the per-frame cost,
#: small enough to keep latency and hub-side buffering low (BENCHMARKS.md: ~64 KiB batches).
DEFAULT_FLUSH_BYTES = 64 * 1024


class Ticket:
    """A reply the caller is waiting for; the I/O driver sets ``waiter`` (anything with ``set()``)."""

    __slots__ = ("done", "error", "result", "waiter")

    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.waiter: Any = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.result = result
        self.error = error
        if self.waiter is not None:
            self.waiter.set()

    def outcome(self) -> Any:
        """The result, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.result


class AckTicket(Ticket):
    """Where one acked message sits in its PUBLISH frame."""

    __slots__ = ("record_index", "sequence", "set_index", "topics")

    def __init__(self, set_index: int, record_index: int, topics: tuple[str, ...]) -> None:
        super().__init__()
        self.set_index = set_index
        self.record_index = record_index
        self.topics = topics
        self.sequence = 0


class PendingBatch:
    """A PUBLISH frame sent with the ACK flag, kept until its PUBLISH_ACK (and resent after a reconnect)."""

    __slots__ = ("frame", "sent", "sequence", "sets", "tickets")

    def __init__(self, sequence: int, frame: bytes, sets: list[tuple[tuple[str, ...], int]], tickets: list[AckTicket]):
        self.sequence = sequence
        self.frame = frame
        self.sets = sets
        self.tickets = tickets
        #: handed to the socket at least once (only those are resent after a reconnect)
        self.sent = False

    def resolve(self, ack: wire.PublishAck) -> None:
        """Give every ticket its offsets from the ack's per-topic ranges."""
        firsts = {r.topic: r.first_offset for r in ack.ranges}
        duplicate = ack.status == wire.AckStatus.DUPLICATE
        for ticket in self.tickets:
            offsets: dict[str, int] = {}
            for topic in ticket.topics:
                first = firsts.get(topic)
                if first is None:
                    continue
                # Earlier sets of this frame that also went to `topic` took the offsets before ours.
                before = sum(count for topics, count in self.sets[: ticket.set_index] if topic in topics)
                offsets[topic] = first + before + ticket.record_index
            ticket.finish(PublishAck(offsets, ack.timestamp, ack.sequence, duplicate))


def normalize_topics(topics: str | Any) -> tuple[str, ...]:
    """``"a"`` -> ``("a",)``; any sequence of str -> tuple."""
    if isinstance(topics, str):
        return (topics,)
    result = tuple(topics)
    if not result:
        raise ValueError("publish needs at least one topic")
    return result


def check_publish_topics(topics: tuple[str, ...]) -> bytes:
    """Validate a publish topic list; return its encoded form (topic count + topics).

    Raises :class:`InvalidTopicError` for a name the topic rule refuses (``wire.topics``).
    """
    for topic in topics:
        if not isinstance(topic, str):
            raise TypeError(f"topics must be str, got {type(topic).__name__}")
        InvalidTopicError.check(topic)
    try:
        wire.records.check_topics(topics)
    except wire.ProtocolError as exc:
        raise ValueError(f"invalid topics {list(topics)!r}: {exc.reason}") from None
    return wire.encode_topic_list(topics)


def as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or str, got {type(value).__name__}")


class PublishBuffer:
    """Messages published but not yet framed, and acked frames awaiting their PUBLISH_ACK."""

    def __init__(
        self, *, producer_id: int, flush_bytes: int = DEFAULT_FLUSH_BYTES, emit: Callable[[], None] | None = None
    ) -> None:
        self.producer_id = producer_id
        #: called when the current frame is full mid-``add``: the owner takes the frame (``take_frame``)
        self.emit: Callable[[], None] = emit or self.take_frame  # type: ignore[assignment]
        self.flush_bytes = flush_bytes
        self.max_body = DEFAULT_MAX_CLIENT_BODY
        #: last sequence given to a frame; producers number their batches 1, 2, 3, ...
        self.sequence = 0
        #: acked frames in publish order, matched FIFO against PUBLISH_ACKs
        self.pending: deque[PendingBatch] = deque()
        #: set by the owner when publishing must fail (the connection is gone for good)
        self.failed: BaseException | None = None
        #: the frame being filled: per set, its topics, record parts, headers block and encoded
        #: topic list (checked once, when the set was started)
        self._sets: list[tuple[tuple[str, ...], list[bytes | memoryview], bytes, bytes]] = []
        #: per set: records beyond one per part (add_encoded appends many records as one part)
        self._extra: list[int] = []
        self._tickets: list[AckTicket] = []
        self._topic_cache: dict[tuple[str, ...], bytes] = {}
        # The hot path compares the caller's topics object by identity (str and tuple only: immutable).
        self._last_key: object = None
        self._topics: tuple[str, ...] = ()
        self._parts: list[bytes | memoryview] = []
        #: the current set's headers block (``b""``: none)
        self._headers = b""
        #: the last headers mapping encoded (a copy) and its block: a publisher repeating its
        #: headers pays one dict comparison per message, not an encoding
        self._last_headers: dict[str, Any] = {}
        self._last_block = b""
        self.buffered = 0
        self._budget = self.max_body - _PUBLISH_HEAD_BYTES
        #: set while the connection speaks a client protocol without headers: makes the error a
        #: publish with headers raises (sdk.versions); see refuse_headers()
        self.headers_refusal: Callable[[], BaseException] | None = None

    def refuse_headers(self, refusal: Callable[[], BaseException] | None) -> None:
        """Refuse publishes with headers with ``refusal()`` from now on (None: accept them again).

        Checked where a headers block is encoded, so a publisher repeating its headers pays
        nothing per message; the last block is forgotten so that the next publish encodes again.
        """
        self.headers_refusal = refusal
        self._last_headers, self._last_block = {}, b""

    def set_max_body(self, max_body: int) -> None:
        self.max_body = max_body
        self._budget = max_body - _PUBLISH_HEAD_BYTES

    def add(self, topics: Any, data: Any, key: Any = None, headers: Any = None) -> bool:
        """Buffer one message; true when the buffer should be flushed now.

        ``headers``: a mapping of names to ``str`` or ``bytes`` values, carried by the message's set.
        """
        if headers:
            block = self._block_for(headers)
            if topics is not self._last_key or block is not self._headers:
                self._select(topics, block)
        elif topics is not self._last_key or self._headers:
            self._select(topics)
        if type(data) is not bytes:
            data = as_bytes(data, "data")
        if key is None:
            record = _pack_record_header(0, len(data)) + data
        else:
            if type(key) is not bytes:
                key = as_bytes(key, "key")
            if len(key) > MAX_KEY_BYTES:
                raise ValueError(f"key of {len(key)} bytes exceeds {MAX_KEY_BYTES}")
            record = _pack_record_header(len(key), len(data)) + key + data
        total = self.buffered + len(record)
        if total > self._budget:
            total = self._make_room(topics, len(record))
        self._parts.append(record)
        self.buffered = total
        return total >= self.flush_bytes

    def add_acked(self, topics: Any, data: Any, key: Any = None, headers: Any = None) -> AckTicket:
        self.add(topics, data, key, headers)
        ticket = AckTicket(len(self._sets) - 1, len(self._parts) - 1 + self._extra[-1], self._topics)
        self._tickets.append(ticket)
        return ticket

    def add_encoded(self, topics: Any, records: Any, ends: Sequence[int], headers: Any = None) -> int:
        """Buffer ``len(ends) - 1`` records already in the wire layout; return how many.

        Record ``i`` is ``records[ends[i]:ends[i + 1]]``, ``[u16 key_len][u32 data_len][key][data]``
        (``records``: bytes or anything with the buffer protocol; ``ends``: ints, ascending).
        All go to ``topics`` with ``headers``.  The caller encoded them and checked their keys
        (:data:`wire.limits.MAX_KEY_BYTES`); the hub checks every region it receives anyway.

        Each frame ends exactly where :meth:`add` would have ended it had it been given the
        records one by one (``flush_bytes``, the body budget, the set limit): the same records give
        the same frames with the same sequences either way, which an idempotent producer's
        retry relies on.  A frame that fills is handed to ``emit``; Python work is per frame, not
        per record (two bisections of ``ends``, one slice).
        """
        count = len(ends) - 1
        if count <= 0:
            return 0
        block = self._block_for(headers) if headers else b""
        view = memoryview(records).cast("B")
        lo = 0
        while lo < count:
            self._select(topics, block)
            # The buffered total once records lo..i-1 are in: base + ends[i].
            base = self.buffered - ends[lo]
            # add() ends a frame after the record that takes it to flush_bytes ...
            full = bisect_left(ends, self.flush_bytes - base, lo + 1, count + 1)
            # ... and before a record that would take it past the body budget.
            over = bisect_right(ends, self._budget - base, lo + 1, count + 1)
            stop = min(full, over - 1, count)
            if stop > lo:
                self._parts.append(view[ends[lo] : ends[stop]])
                self._extra[-1] += stop - lo - 1
                self.buffered = base + ends[stop]
            if over <= full and over <= count:
                self._make_room(topics, ends[stop + 1] - ends[stop])  # emits this frame, or raises
            elif stop == full:
                self.emit()
            lo = stop
        return count

    def _select(self, topics: Any, headers: bytes = b"") -> None:
        if self.failed is not None:
            raise self.failed
        normal = normalize_topics(topics)
        if normal != self._topics or not self._sets or headers != self._headers:
            header = self._topic_cache.get(normal)
            if header is None:
                header = check_publish_topics(normal)
                if len(self._topic_cache) < 4096:
                    self._topic_cache[normal] = header
            if len(self._sets) >= _MAX_SETS:
                self.emit()
            self._parts = []
            self._sets.append((normal, self._parts, headers, header))
            self._extra.append(0)
            self._topics = normal
            self._headers = headers
            self.buffered += len(header) + _SET_FIXED_BYTES + len(headers)
        self._last_key = topics if type(topics) is str or type(topics) is tuple else None

    def _block_for(self, headers: Any) -> bytes:
        """The headers block of ``headers``; the same object as last time when they are equal."""
        if headers == self._last_headers:
            return self._last_block
        if self.headers_refusal is not None:  # here, not per message: refuse_headers() empties the cache
            raise self.headers_refusal()
        try:
            block = wire.encode_headers(headers)
        except wire.ProtocolError as exc:
            raise ValueError(f"invalid headers: {exc.reason}") from None
        self._last_headers, self._last_block = dict(headers), block
        return block

    def _make_room(self, topics: Any, size: int) -> int:
        """Emit the full frame and start a new one for this message; the new buffered total."""
        header = len(self._topic_cache.get(self._topics) or check_publish_topics(self._topics)) + _SET_FIXED_BYTES
        headers = self._headers
        if size + header + len(headers) > self._budget:
            raise ValueError(
                f"message of {size - 6} bytes does not fit in one frame (the hub accepts {self.max_body} bytes)"
            )
        self.emit()
        self._select(topics, headers)
        return self.buffered + size

    @property
    def empty(self) -> bool:
        return not self._sets

    @property
    def unframed(self) -> int:
        """Messages buffered but not yet in a frame (what the next take_frame carries)."""
        return sum(len(parts) + extra for (_, parts, _, _), extra in zip(self._sets, self._extra, strict=True))

    def holds_headers(self) -> bool:
        """Whether a message buffered or awaiting its PUBLISH_ACK carries headers."""
        return any(headers for _, _, headers, _ in self._sets) or any(has_headers(b.frame) for b in self.pending)

    def take_frame(self) -> tuple[bytes, PendingBatch | None]:
        """The buffered messages as one PUBLISH frame, and its pending entry if it wants an ack."""
        sets = [
            (topics, encoded, b"".join(parts), headers, len(parts) + extra)
            for (topics, parts, headers, encoded), extra in zip(self._sets, self._extra, strict=True)
            if parts
        ]
        tickets = self._tickets
        self._sets = []
        self._extra = []
        self._tickets = []
        self._parts = []
        self._topics = ()
        self._headers = b""
        self._last_key = None
        self.buffered = 0
        if not sets:
            return b"", None
        self.sequence += 1
        flags = _ACK_BIT if tickets else 0
        if any(headers for _, _, _, headers, _ in sets):
            flags |= _HEADERS_BIT
        # The parts were checked as they came (topics when each set started, headers by
        # encode_headers, record sizes by add()), so the frame is joined as is, not rebuilt
        # through Publish and MessageSet: tests/test_wire_fastpath.py holds the bytes equal.
        frame = wire.publish_frame(
            self.producer_id,
            self.sequence,
            flags,
            [(encoded, count, records, headers) for _, encoded, records, headers, count in sets],
        )
        if not tickets:
            return frame, None
        for ticket in tickets:
            ticket.sequence = self.sequence
        batch = PendingBatch(self.sequence, frame, [(t, count) for t, _, _, _, count in sets], tickets)
        self.pending.append(batch)
        return frame, batch

    def on_ack(self, ack: wire.PublishAck) -> None:
        if not self.pending:
            raise _UnexpectedAck(f"PUBLISH_ACK for sequence {ack.sequence} but no acked publish is pending")
        head = self.pending[0]
        if head.sequence != ack.sequence:
            raise _UnexpectedAck(
                f"PUBLISH_ACK for sequence {ack.sequence}, expected {head.sequence} (acks come in order)"
            )
        self.pending.popleft()
        head.resolve(ack)

    def fail(self, error: BaseException) -> None:
        """Publishing is over: fail every waiting ticket and refuse new messages."""
        self.failed = error
        self._last_key = None
        for batch in self.pending:
            for ticket in batch.tickets:
                ticket.finish(error=error)
        self.pending.clear()
        for ticket in self._tickets:
            ticket.finish(error=error)
        self._tickets = []
        self._sets = []
        self._extra = []
        self._parts = []
        self._topics = ()
        self._headers = b""
        self.buffered = 0


def has_headers(frame: bytes) -> bool:
    """Whether a PUBLISH frame has flag HEADERS (its sets carry headers blocks)."""
    return bool(frame[_FLAGS_AT] & wire.PublishFlags.HEADERS)


class _UnexpectedAck(Pub0subError):
    """Internal: a PUBLISH_ACK that matches no pending batch."""
