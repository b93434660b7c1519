"""The blocking client's subscription: iterate it, or call ``next(timeout=...)``."""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import wire

from .batching import Ticket
from .errors import Pub0subError
from .messages import Gap, Message
from .protocol import ClientProtocol, State
from .subscriptions import SubscriptionView, SubState, checked_names, key_filter_of


class BlockingDriver(Protocol):
    """What a :class:`BlockingSubscription` uses of its :class:`sdk.BlockingClient`: the protocol
    core and the socket calls that send, receive and wait.

    Named here, not imported, because the client imports this module to open subscriptions.
    """

    @property
    def _proto(self) -> ClientProtocol: ...

    @property
    def _sock(self) -> socket.socket | None:
        """``None`` while disconnected."""

    def _send(self) -> None:
        """Send what the core queued (reconnecting per policy)."""

    def _service(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for input and process it."""

    def _await_ticket(self, ticket: Ticket, timeout: float | None, what: str) -> Any:
        """The ticket's outcome, servicing the socket meanwhile; ``TimeoutError`` naming ``what``."""


class BlockingSubscription(SubscriptionView):
    """A subscription of a :class:`BlockingClient`: iterate it, or call :meth:`next` with a timeout.

    Gaps are recorded in :attr:`gaps` (and logged) by ``next()`` and plain
    iteration; :meth:`events` yields them in place.  See :class:`sdk.Subscription`.

    Acknowledgements work as for the async client: ``ack="auto"`` acknowledges what
    the application has moved past (per batch, and everything taken on a clean
    close); with ``ack="manual"`` call ``msg.ack()`` or ``sub.ack(msgs)``.  Acks go out
    with the next call into the client (``next()``, ``flush()``, ``close()``, ...).
    """

    _client: BlockingDriver

    def __init__(self, client: BlockingDriver) -> None:
        self._client = client
        self._state: SubState | None = None
        self._init_batches()  # acks go out with the next call into the client

    def __enter__(self) -> BlockingSubscription:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self._close(clean=exc_type is None)

    @property
    def _s(self) -> SubState:
        assert self._state is not None
        return self._state

    def close(self) -> None:
        """Unsubscribe.  Idempotent.  With ``ack="auto"`` everything taken is acknowledged first."""
        self._close(clean=True)

    def _close(self, *, clean: bool) -> None:
        proto = self._client._proto
        if self._auto and not self._s.closed:
            self._settle(self._pos if clean else self._pos - self._held)
        proto.unsubscribe(self._s)
        if self._client._sock is not None and proto.state == State.READY:
            with contextlib.suppress(Pub0subError):
                self._client._send()

    def _item(self, timeout: float | None) -> wire.RecordBatch | Gap | None:
        """The next buffered item, servicing the socket up to ``timeout``; None on timeout or normal end."""
        state = self._s
        proto = self._client._proto
        if self._auto and self._pos:
            self._settle(self._pos)  # the application asks for more: it is done with what it took
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            item = proto.take(state)
            if item is not None:
                if proto.has_output:
                    self._client._send()  # credit grants, acks
                return item
            if state.closed:
                if state.error is not None:
                    raise state.error
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if proto.has_output:
                self._client._send()  # acks and credit before waiting, not after
            self._client._service(min(left, 1.0))

    def next_batch(self, timeout: float | None = None) -> list[Message] | None:
        """The remaining messages of the current batch or the next batch; None on timeout/end."""
        if self._pos < len(self._msgs):
            rest = self._msgs[self._pos :]
            self._pos = self._held = len(self._msgs)
            return rest
        while True:
            item = self._item(timeout)
            if item is None:
                return None
            if type(item) is not Gap:
                batch = self._msgs = self._s.messages(item)  # type: ignore[arg-type]
                self._pos = self._held = len(batch)
                return batch

    def next(self, timeout: float | None = None) -> Message | None:
        """The next message; ``None`` after ``timeout`` seconds or once the subscription was closed."""
        pos = self._pos
        if pos < len(self._msgs):
            self._pos = pos + 1
            return self._msgs[pos]
        batch = self.next_batch(timeout)
        if batch is None:
            return None
        self._pos = self._held = 1
        return batch[0]

    def __iter__(self) -> Iterator[Message]:
        while (msg := self.next()) is not None:
            yield msg

    def events(self, timeout: float | None = None) -> Iterator[Message | Gap]:
        """Messages and Gap notices in order; stops after ``timeout`` s without any."""
        while True:
            if self._pos < len(self._msgs):
                self._pos += 1
                yield self._msgs[self._pos - 1]
                continue
            item = self._item(timeout)
            if item is None:
                return
            if type(item) is Gap:
                yield item
            else:
                self._msgs = self._s.messages(item)  # type: ignore[arg-type]
                self._pos = 0
                self._held = 1

    def add(self, topics: str | Iterable[str], *, timeout: float | None = 30.0) -> dict[str, int]:
        """Add topics/patterns; returns the start offsets of the added exact topics."""
        ticket = self._client._proto.update(self._s, wire.UpdateOp.ADD, checked_names(topics))
        self._client._send()
        result: dict[str, int] = self._client._await_ticket(ticket, timeout, "SUB_OK")
        return result

    def remove(self, topics: str | Iterable[str], *, timeout: float | None = 30.0) -> None:
        """Remove topics/patterns."""
        ticket = self._client._proto.update(self._s, wire.UpdateOp.REMOVE, topics)
        self._client._send()
        self._client._await_ticket(ticket, timeout, "SUB_OK")

    @property
    def query(self) -> str | None:
        """As :attr:`sdk.Subscription.query`."""
        return self._s.query

    def add_keys(self, *keys: bytes | str, prefixes: Iterable[bytes | str] = (), every: bool = False) -> None:
        """As :meth:`sdk.Subscription.add_keys`."""
        self._keys(wire.KeyOp.ADD, key_filter_of(keys, prefixes, every=every))

    def remove_keys(self, *keys: bytes | str, prefixes: Iterable[bytes | str] = (), every: bool = False) -> None:
        """As :meth:`sdk.Subscription.remove_keys`."""
        self._keys(wire.KeyOp.REMOVE, key_filter_of(keys, prefixes, every=every))

    def set_keys(self, *keys: bytes | str, prefixes: Iterable[bytes | str] = (), every: bool = False) -> None:
        """As :meth:`sdk.Subscription.set_keys`."""
        self._keys(wire.KeyOp.SET, key_filter_of(keys, prefixes, every=every))

    def _keys(self, op: wire.KeyOp, change: wire.KeyFilter, timeout: float | None = 30.0) -> None:
        ticket = self._client._proto.update_keys(self._s, op, change)
        self._client._send()
        self._client._await_ticket(ticket, timeout, "SUB_OK")

    def commit(self, *, timeout: float | None = 30.0) -> dict[str, int]:
        """Send the acknowledgements made so far and wait until the hub has the position on disk.

        Returns ``{topic: first offset not acknowledged}``; see the async ``Subscription.commit``.
        """
        ticket = self._client._proto.commit(self._s)
        self._client._send()
        result: dict[str, int] = self._client._await_ticket(ticket, timeout, "COMMITTED")
        return result

    def ack(self, messages: Message | Iterable[Message]) -> None:
        """Acknowledge messages (``ack="manual"``); also ``msg.ack()``.

        Nothing is sent per call: the acks are merged into ranges and go out in one ACK frame
        with the next call into the client (``next()``, ``flush()``, ``close()``, ...).
        """
        state = self._s
        if isinstance(messages, Message):
            self._client._proto.ack_range(state, messages.topic, messages.offset, messages.offset)
        else:
            self._client._proto.ack(state, messages)
