"""The typed values the SDK hands to applications: messages, gap notices, acks, the reconnect policy."""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
#: ``Message.headers`` of a message published without headers (shared: it is read-only).
NO_HEADERS: Mapping[str, str | bytes] = MappingProxyType({})


class Message:
    """One delivered message.

    ``timestamp`` is the hub's append time in µs since the epoch (the same for
    every message of one publish batch); ``key`` is ``None`` when the publisher
    gave none; ``origin`` is the id of the hub the message was first published
    on; ``subscription`` is the subscription object it was delivered to;
    ``headers`` is a read-only mapping of header names to ``str`` or ``bytes``
    values (empty when the publisher gave none, or the hub could not keep them:
    docs/protocol.md §11).

    >>> m = Message("orders", 7, 1_700_000_000_000_000, None, b"hi", 1, None)
    >>> m.topic, m.offset, m.data, m.datetime.year
    ('orders', 7, b'hi', 2023)
    """

    # __slots__ and a plain __init__: creating the object is most of the per-message cost.
    __slots__ = ("data", "headers", "key", "offset", "origin", "subscription", "timestamp", "topic")

    def __init__(
        self,
        topic: str,
        offset: int,
        timestamp: int,
        key: bytes | None,
        data: bytes,
        origin: int,
        subscription: Any,
        headers: Mapping[str, str | bytes] = NO_HEADERS,
    ) -> None:
        self.topic = topic
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.data = data
        self.origin = origin
        self.subscription = subscription
        self.headers = headers

    def ack(self) -> Any:
        """Acknowledge this message on its subscription (``ack="manual"``).

        ``await msg.ack()`` with the async client, plain ``msg.ack()`` with the blocking one:
        the call is whatever the subscription's ``ack`` is.  Nothing is sent per message; the
        acknowledgement goes out, merged with others into ranges, with the next write.
        """
        sub = self.subscription
        if sub is None:
            raise RuntimeError("this message was not delivered by a subscription")
        return sub.ack(self)

    @property
    def datetime(self) -> _dt.datetime:
        """``timestamp`` as an aware UTC :class:`datetime.datetime`."""
        return _EPOCH + _dt.timedelta(microseconds=self.timestamp)

    def __repr__(self) -> str:
        data = self.data if len(self.data) <= 40 else self.data[:37] + b"..."
        return f"Message(topic={self.topic!r}, offset={self.offset}, key={self.key!r}, data={data!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.topic, self.offset, self.timestamp, self.key, self.data, self.origin, self.headers) == (
            other.topic,
            other.offset,
            other.timestamp,
            other.key,
            other.data,
            other.origin,
            other.headers,
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Gap:
    """Messages this subscription will never see.

    ``dropped`` messages of ``topic`` starting at ``first_offset``.  ``reason``
    says who dropped them:

    * ``"hub"``: the hub's ``drop-oldest`` policy (a GAP frame; exact count);
    * ``"client"``: the SDK's own buffer passed ``max_pending_bytes`` under
      ``drop-oldest`` (exact count);
    * ``"reconnect"``: a ``latest`` subscription was re-opened after a lost
      connection; messages published meanwhile were not delivered.  The count is
      an upper bound (offsets of other topics' messages may be included).
    """

    topic: str
    first_offset: int
    dropped: int
    reason: str = "hub"


@dataclass(frozen=True, slots=True)
class PublishAck:
    """The hub's acknowledgement of one acked publish.

    ``offsets`` maps each topic the message went to onto the offset it got
    there; ``timestamp`` is the hub's append time (µs since the epoch).
    ``duplicate`` is true when the hub had already stored this batch (a resend
    after a reconnect): nothing was stored twice, and ``offsets`` is then empty
    because the hub does not repeat them.
    """

    offsets: dict[str, int]
    timestamp: int
    sequence: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How to restore a lost connection: exponential backoff with jitter.

    ``max_attempts`` ``None`` retries forever.  After each failed attempt the
    delay is multiplied by ``multiplier`` up to ``max_delay``.

    >>> [round(d, 2) for d in Reconnect(4, 0.1, 0.3, 2.0, jitter=0).delays()]
    [0.1, 0.2, 0.3, 0.3]
    """

    max_attempts: int | None = 60
    initial_delay: float = 0.05
    max_delay: float = 2.0
    multiplier: float = 2.0
    #: fraction of each delay that is randomised, so many clients do not reconnect in lockstep
    jitter: float = field(default=0.1, kw_only=True)

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 0:
            raise ValueError("max_attempts must be >= 0 or None")
        if self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")

    def delays(self) -> Iterator[float]:
        """The wait before each attempt, one per attempt."""
        delay = self.initial_delay
        attempt = 0
        while self.max_attempts is None or attempt < self.max_attempts:
            attempt += 1
            spread = delay * self.jitter
            yield max(0.0, delay + random.uniform(-spread, spread)) if spread else delay
            delay = min(self.max_delay, delay * self.multiplier)
