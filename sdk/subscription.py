"""The async subscription: an ``async with`` / ``async for`` view of one :class:`SubState`."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol

import anyio

import wire

from .batching import Ticket
from .messages import Gap, Message
from .protocol import ClientProtocol
from .subscriptions import SubscriptionView, SubState, checked_names, key_filter_of

log = logging.getLogger("pub0sub.sdk")


class AsyncDriver(Protocol):
    """What a :class:`Subscription` uses of the client that opened it (:class:`sdk.Client`): the
    protocol core, and the I/O that sends what the core queued and waits for the hub's answers.

    Named here, not imported, because the client imports this module to open subscriptions.
    """

    @property
    def _proto(self) -> ClientProtocol: ...

    def _check(self) -> None:
        """Raise the error the connection failed with, if it did."""

    async def _write(self) -> None:
        """Send what the core queued."""

    async def _wait(self, ticket: Ticket, timeout: float | None) -> Any:  # noqa: ASYNC109 - mirrors Client._wait (the public timeout= arguments)
        """The ticket's outcome once the hub answered."""

    def _kick(self) -> None:
        """Have what the core queued (credit, acks) sent soon, without waiting for it."""


class Subscription(SubscriptionView):
    """A live subscription; create it with :meth:`Client.subscribe` and use it as ``async with``.

    Three ways to read, pick one per subscription:

    * ``async for msg in sub`` yields :class:`Message` objects.
    * ``async for batch in sub.batches()`` yields lists of messages as they
      arrived (one DELIVER each): the fast path for high rates.
    * ``async for item in sub.events()`` yields messages *and* :class:`Gap`
      notices, in order.
    * ``on_batch=handle`` (:meth:`Client.subscribe`) calls ``handle(batch)`` with each
      list of messages the moment it is decoded, in the client's reader task, with
      no hand-over to another task: the lowest latency, for a handler that does
      not block (it is a plain function, not awaited).  Wait with
      ``await sub.wait()``; an exception from the handler ends the subscription and
      is raised there (or, if nobody waited, at the end of the ``async with``).

    Gaps (messages dropped under ``policy="drop-oldest"``, or missed by a
    ``latest`` subscription while reconnecting) are never silent: the first two
    iterators skip them but record each one in :attr:`gaps` and log a warning;
    ``events()`` yields them in place.

    Acknowledgements (``ack=``, see :meth:`Client.subscribe`): with ``"auto"``
    a message is acknowledged once the application asks for what comes after
    it -- in practice per delivered batch, when its last message is passed --
    and everything taken is acknowledged when the ``async with`` block exits
    without an exception (with one, the message or batch in hand is not).
    With ``"manual"`` call ``await msg.ack()`` or ``await sub.ack(msgs)``.
    Acks are merged into ranges and sent with the next write.

    Iteration ends normally after the subscription is closed by the
    application.  When the hub ends it, the messages received before that are
    yielded first, then :class:`SlowConsumerError` (OUT_OF_CAPACITY) or
    :class:`SubscriptionClosedError` is raised; a lost connection (without a
    reconnect policy, or after it gave up) raises :class:`ConnectionLostError`.

    >>> async with client.subscribe("sensors.>", policy="drop-oldest") as sub:  # doctest: +SKIP
    ...     async for batch in sub.batches():
    ...         total += sum(len(m.data) for m in batch)
    ...     print(sub.gaps)
    """

    _client: AsyncDriver

    def __init__(
        self,
        client: AsyncDriver,
        topics: str | Sequence[str],
        *,
        on_batch: Callable[[list[Message]], object] | None = None,
        **options: Any,
    ) -> None:
        if on_batch is not None and (not callable(on_batch) or inspect.iscoroutinefunction(on_batch)):
            raise TypeError(
                "on_batch must be a plain function of one list of messages: it runs in the client's "
                "reader task and is not awaited (iterate the subscription to await things per batch)"
            )
        self._client = client
        self._topics = topics
        self._options = options
        self._state: SubState | None = None
        self._init_batches()
        self._handler = on_batch
        self._handling = False
        #: the exception the handler raised (it ended the subscription), until raised to the application
        self._handler_error: BaseException | None = None
        self._ended: anyio.Event | None = None

    async def __aenter__(self) -> Subscription:
        client = self._client
        client._check()
        state, ticket = client._proto.subscribe(self._topics, owner=self, **self._options)
        self._state = state
        self._auto = state.ack == "auto" and state.sends_acks
        if self._handler is not None:
            # Set before the SUB is written: every batch, even one that comes with the SUB_OK, goes
            # to the handler.
            self._ended = anyio.Event()
            state.waiter = _Dispatch(self._dispatch)
        await client._write()
        try:
            self.start_offsets = await client._wait(ticket, None)
        except BaseException:
            client._proto.unsubscribe(state)
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        await self._close(clean=exc_type is None)
        if exc_type is None and self._handler is not None:
            # A callback subscription that ended with an error nobody has seen (wait() raises it)
            # does not end quietly: the block raises it.
            self._raise_end(unseen_only=True)

    async def close(self) -> None:
        """Unsubscribe (UNSUB); iteration then ends.  Idempotent.

        With ``ack="auto"`` every message taken so far is acknowledged first (in the same write).
        """
        await self._close(clean=True)

    async def _close(self, *, clean: bool) -> None:
        state = self._state
        if state is None:
            return
        if self._auto and not state.closed:
            self._settle(self._pos if clean else self._pos - self._held)
        self._client._proto.unsubscribe(state)
        with anyio.CancelScope(shield=True):
            await self._client._write()

    @property
    def _s(self) -> SubState:
        if self._state is None:
            raise RuntimeError("use the subscription with 'async with client.subscribe(...) as sub'")
        return self._state

    @property
    def pending_bytes(self) -> int:
        """Bytes received for this subscription but not yet taken by the application."""
        return self._s.pending_bytes

    # -- reading ----------------------------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        pos = self._pos
        msgs = self._msgs
        if pos < len(msgs):
            self._pos = pos + 1
            return msgs[pos]
        while True:
            item = await self._next_item()
            if type(item) is not Gap:
                self._msgs = self._s.messages(item)  # type: ignore[arg-type]
                self._pos = self._held = 1
                return self._msgs[0]

    async def batches(self) -> AsyncIterator[list[Message]]:
        """Lists of messages, one per delivered batch (gaps recorded in :attr:`gaps`)."""
        if self._pos < len(self._msgs):
            rest = self._msgs[self._pos :]
            self._pos = self._held = len(self._msgs)
            yield rest
        while True:
            try:
                item = await self._next_item()
            except StopAsyncIteration:
                return
            if type(item) is not Gap:
                batch = self._msgs = self._s.messages(item)  # type: ignore[arg-type]
                self._pos = self._held = len(batch)
                yield batch

    async def events(self) -> AsyncIterator[Message | Gap]:
        """Messages and :class:`Gap` notices, in the order they arrived."""
        while True:
            if self._pos < len(self._msgs):
                self._pos += 1
                yield self._msgs[self._pos - 1]
                continue
            try:
                item = await self._next_item()
            except StopAsyncIteration:
                return
            if type(item) is Gap:
                yield item
            else:
                self._msgs = self._s.messages(item)  # type: ignore[arg-type]
                self._pos = 0
                self._held = 1

    # timeout= as documented: None when nothing came, where a cancel scope would raise.
    async def next(self, *, timeout: float | None = None) -> Message | None:  # noqa: ASYNC109
        """The next message, or ``None`` after ``timeout`` seconds (or when the subscription ended)."""
        try:
            if timeout is None:
                return await self.__anext__()
            with anyio.move_on_after(timeout):
                return await self.__anext__()
        except StopAsyncIteration:
            return None
        return None

    def _ack_queued(self) -> None:
        self._client._kick()  # sent when this task next yields, with whatever else is queued

    # -- on_batch: batches handed over in the reader task ----------------------------------

    async def wait(self) -> None:
        """For a subscription opened with ``on_batch``: wait until it ends.

        Returns once the application closed it (:meth:`close`, from another task); raises what
        ended it otherwise: the exception ``on_batch`` raised, :class:`SlowConsumerError`,
        :class:`SubscriptionClosedError`, or :class:`ConnectionLostError`.
        """
        if self._ended is None:
            raise RuntimeError("wait() is for a subscription opened with on_batch, inside its 'async with'")
        await self._ended.wait()
        self._raise_end(unseen_only=False)

    def _raise_end(self, *, unseen_only: bool) -> None:
        error = self._handler_error
        if error is not None:
            self._handler_error = None  # raised once, by wait() or by the end of the block
            raise error
        state = self._s
        if not unseen_only and state.closed and state.error is not None:
            raise state.error

    def _dispatch(self) -> None:
        """The protocol core has items for this subscription: hand each batch to the handler now.

        Runs where the core was fed (the client's reader task), so a batch reaches the
        application with no task switch.  Gaps were recorded in :attr:`gaps` (and logged) as
        they came.  Re-entered when the subscription ends under its own handler: nothing to do.
        """
        if self._handling:
            return
        state = self._s
        proto = self._client._proto
        handler = self._handler
        assert handler is not None and self._ended is not None
        self._handling = True
        try:
            while self._handler_error is None and (item := proto.take(state)) is not None:
                if type(item) is Gap:
                    continue
                batch = state.messages(item)  # type: ignore[arg-type]
                try:
                    handler(batch)
                except Exception as exc:
                    self._handler_failed(exc)
                    break
                if self._auto:  # handled: acknowledged (one topic, consecutive offsets)
                    proto.ack_range(state, batch[0].topic, batch[0].offset, batch[-1].offset)
            # No kick for the credit, acks or UNSUB this queued: a dispatch runs in the reader task,
            # whose write right after this read sends them, or as the subscription ends in the
            # application's task, which writes its UNSUB next (a lost connection sends nothing).
        finally:
            self._handling = False
        if state.closed:
            self._ended.set()

    def _handler_failed(self, error: Exception) -> None:
        """on_batch raised: the subscription ends (UNSUB), its batch unacknowledged; the error waits for the app."""
        state = self._s
        log.error("subscription %d: on_batch raised %r; the subscription is closed", state.sub_id, error)
        self._handler_error = error
        self._client._proto.unsubscribe(state)

    async def _next_item(self) -> wire.RecordBatch | Gap:
        state = self._s
        if self._handler is not None:
            raise RuntimeError("this subscription hands its batches to on_batch; use 'await sub.wait()', not iteration")
        proto = self._client._proto
        if self._auto and self._pos:
            # The application asks for more: it is done with everything it took.
            self._settle(self._pos)
        while True:
            item = proto.take(state)
            if item is not None:
                if state.credit:
                    self._client._kick()
                return item
            if state.closed:
                if state.error is not None:
                    raise state.error
                raise StopAsyncIteration
            event = anyio.Event()
            state.waiter = event
            try:
                await event.wait()
            finally:
                state.waiter = None

    # -- changing it ------------------------------------------------------------------

    async def add(self, topics: str | Iterable[str]) -> dict[str, int]:
        """Add topics/patterns (SUB_UPDATE); returns the start offsets of the added exact topics."""
        return await self._update(wire.UpdateOp.ADD, checked_names(topics))

    async def remove(self, topics: str | Iterable[str]) -> None:
        """Remove topics/patterns (SUB_UPDATE).  Removing all leaves the subscription open and silent."""
        await self._update(wire.UpdateOp.REMOVE, topics)

    async def _update(self, op: wire.UpdateOp, topics: str | Iterable[str]) -> dict[str, int]:
        client = self._client
        ticket = client._proto.update(self._s, op, topics)
        await client._write()
        result: dict[str, int] = await client._wait(ticket, None)
        return result

    @property
    def query(self) -> str | None:
        """The tag query this subscription was opened with (None: every message of its topics)."""
        return self._s.query

    async def add_keys(self, *keys: bytes | str, prefixes: Iterable[bytes | str] = (), every: bool = False) -> None:
        """Deliver these keys (and keys starting with ``prefixes``) too; ``every=True``: every key.

        The hub filters (a record of another key never reaches this client); each key, prefix
        and ``every`` stays as the last add or remove about it left it.
        """
        await self._keys(wire.KeyOp.ADD, key_filter_of(keys, prefixes, every=every))

    async def remove_keys(self, *keys: bytes | str, prefixes: Iterable[bytes | str] = (), every: bool = False) -> None:
        """Stop delivering these keys (prefixes; ``every=True``: drop "every key", keep the rest)."""
        await self._keys(wire.KeyOp.REMOVE, key_filter_of(keys, prefixes, every=every))

    async def set_keys(self, *keys: bytes | str, prefixes: Iterable[bytes | str] = (), every: bool = False) -> None:
        """Deliver exactly these keys and prefixes from now on (``every=True``: every key again)."""
        await self._keys(wire.KeyOp.SET, key_filter_of(keys, prefixes, every=every))

    async def _keys(self, op: wire.KeyOp, change: wire.KeyFilter) -> None:
        client = self._client
        ticket = client._proto.update_keys(self._s, op, change)
        await client._write()
        await client._wait(ticket, None)

    async def commit(self, *, timeout: float | None = 30.0) -> dict[str, int]:  # noqa: ASYNC109
        """Send the acknowledgements made so far and wait until the hub has the position on disk.

        Returns ``{topic: first offset not acknowledged}``.  After it returns, a hub crash or a
        power loss cannot deliver those acknowledged messages again (docs/durability.md).  Raises
        ``ConnectionLostError`` if the connection drops first: commit again after the reconnect.
        """
        client = self._client
        ticket = client._proto.commit(self._s)
        await client._write()
        result: dict[str, int] = await client._wait(ticket, timeout)
        return result

    async def ack(self, messages: Message | Iterable[Message]) -> None:
        """Acknowledge messages (``ack="manual"``); also ``await msg.ack()``.

        Does not wait for the network: the acks are merged into ranges per topic and go out in
        one ACK frame with the next write (the client's flusher runs when this task yields).
        Acknowledging twice is harmless; on a subscription the hub keeps no position for
        (no ``durable`` name, no ``group``) it does nothing.
        """
        state = self._s
        if isinstance(messages, Message):
            self._client._proto.ack_range(state, messages.topic, messages.offset, messages.offset)
        else:
            self._client._proto.ack(state, messages)
        if state.ack_dirty:
            self._client._kick()


class _Dispatch:
    """A callback subscription's ``SubState.waiter``: where the core would wake a waiting
    consumer (``set()``), it runs the subscription's dispatch instead."""

    __slots__ = ("set",)

    def __init__(self, dispatch: Callable[[], None]) -> None:
        self.set = dispatch
