"""The blocking client's subscription: iterate it, or call ``next(timeout=...)``."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import wire

from .errors import Pub0subError
from .messages import Gap, Message
from .protocol import State
from .subscriptions import SubState

if TYPE_CHECKING:
    from .blocking import BlockingClient


class BlockingSubscription:
    """A subscription of a :class:`BlockingClient`: iterate it, or call :meth:`next` with a timeout.

    Gaps are recorded in :attr:`gaps` (and logged) by ``next()`` and plain
    iteration; :meth:`events` yields them in place.  See :class:`sdk.Subscription`.
    """

    def __init__(self, client: BlockingClient) -> None:
        self._client = client
        self._state: SubState | None = None
        self._msgs: list[Message] = []
        self._pos = 0
        self.start_offsets: dict[str, int] = {}

    def __enter__(self) -> BlockingSubscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def _s(self) -> SubState:
        assert self._state is not None
        return self._state

    @property
    def id(self) -> int:
        return self._s.sub_id

    @property
    def topics(self) -> tuple[str, ...]:
        return self._s.topics

    @property
    def gaps(self) -> list[Gap]:
        return self._s.gaps

    @property
    def positions(self) -> dict[str, int]:
        return dict(self._s.next_offsets)

    def close(self) -> None:
        """Unsubscribe.  Idempotent."""
        proto = self._client._proto
        proto.unsubscribe(self._s)
        if self._client._sock is not None and proto.state == State.READY:
            with contextlib.suppress(Pub0subError):
                self._client._send()

    def _item(self, timeout: float | None) -> wire.RecordBatch | Gap | None:
        """The next buffered item, servicing the socket up to ``timeout``; None on timeout or normal end."""
        state = self._s
        proto = self._client._proto
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            item = proto.take(state)
            if item is not None:
                if proto.has_output:
                    self._client._send()  # credit grants
                return item
            if state.closed:
                if state.error is not None:
                    raise state.error
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._client._service(min(left, 1.0))

    def next_batch(self, timeout: float | None = None) -> list[Message] | None:
        """The remaining messages of the current batch or the next batch; None on timeout/end."""
        if self._pos < len(self._msgs):
            rest = self._msgs[self._pos :]
            self._msgs, self._pos = [], 0
            return rest
        while True:
            item = self._item(timeout)
            if item is None:
                return None
            if type(item) is not Gap:
                return self._s.messages(item)  # type: ignore[arg-type]

    def next(self, timeout: float | None = None) -> Message | None:
        """The next message; ``None`` after ``timeout`` seconds or once the subscription was closed."""
        if self._pos < len(self._msgs):
            msg = self._msgs[self._pos]
            self._pos += 1
            return msg
        batch = self.next_batch(timeout)
        if batch is None:
            return None
        self._msgs, self._pos = batch, 1
        return batch[0]

    def __iter__(self) -> Iterator[Message]:
        while (msg := self.next()) is not None:
            yield msg

    def events(self, timeout: float | None = None) -> Iterator[Message | Gap]:
        """Messages and Gap notices in order; stops after ``timeout`` s without any."""
        while self._pos < len(self._msgs):
            self._pos += 1
            yield self._msgs[self._pos - 1]
        while (item := self._item(timeout)) is not None:
            if type(item) is Gap:
                yield item
            else:
                yield from self._s.messages(item)  # type: ignore[arg-type]

    def add(self, topics: str | Iterable[str], *, timeout: float | None = 30.0) -> dict[str, int]:
        """Add topics/patterns; returns the start offsets of the added exact topics."""
        ticket = self._client._proto.update(self._s, wire.UpdateOp.ADD, topics)
        self._client._send()
        result: dict[str, int] = self._client._await_ticket(ticket, timeout, "SUB_OK")
        return result

    def remove(self, topics: str | Iterable[str], *, timeout: float | None = 30.0) -> None:
        """Remove topics/patterns."""
        ticket = self._client._proto.update(self._s, wire.UpdateOp.REMOVE, topics)
        self._client._send()
        self._client._await_ticket(ticket, timeout, "SUB_OK")

    def ack(self, messages: Message | Iterable[Message]) -> None:
        """Acknowledge messages (``ack="explicit"`` subscriptions)."""
        msgs = [messages] if isinstance(messages, Message) else list(messages)
        if msgs:
            self._client._proto.ack(self._s, msgs)
            self._client._send()
