"""The async subscription: an ``async with`` / ``async for`` view of one :class:`SubState`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

import wire

from .messages import Gap, Message
from .subscriptions import SubState

if TYPE_CHECKING:
    from .client import Client

_EMPTY: Iterator[Message] = iter(())


class Subscription:
    """A live subscription; create it with :meth:`Client.subscribe` and use it as ``async with``.

    Three ways to read, pick one per subscription:

    * ``async for msg in sub`` yields :class:`Message` objects.
    * ``async for batch in sub.batches()`` yields lists of messages as they
      arrived (one DELIVER each): the fast path for high rates.
    * ``async for item in sub.events()`` yields messages *and* :class:`Gap`
      notices, in order.

    Gaps (messages dropped under ``policy="drop-oldest"``, or missed by a
    ``latest`` subscription while reconnecting) are never silent: the first two
    iterators skip them but record each one in :attr:`gaps` and log a warning;
    ``events()`` yields them in place.

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

    def __init__(self, client: Client, topics: str | Sequence[str], **options: Any) -> None:
        self._client = client
        self._topics = topics
        self._options = options
        self._state: SubState | None = None
        self._it: Iterator[Message] = _EMPTY
        #: start offsets the hub reported in SUB_OK, per exact topic
        self.start_offsets: dict[str, int] = {}

    async def __aenter__(self) -> Subscription:
        client = self._client
        client._check()
        state, ticket = client._proto.subscribe(self._topics, owner=self, **self._options)
        self._state = state
        await client._write()
        try:
            self.start_offsets = await client._wait(ticket, None)
        except BaseException:
            client._proto.unsubscribe(state)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Unsubscribe (UNSUB); iteration then ends.  Idempotent."""
        state = self._state
        if state is None:
            return
        self._client._proto.unsubscribe(state)
        with anyio.CancelScope(shield=True):
            await self._client._write()

    @property
    def _s(self) -> SubState:
        if self._state is None:
            raise RuntimeError("use the subscription with 'async with client.subscribe(...) as sub'")
        return self._state

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
    def pending_bytes(self) -> int:
        """Bytes received for this subscription but not yet taken by the application."""
        return self._s.pending_bytes

    # -- reading ----------------------------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        for msg in self._it:
            return msg
        while True:
            item = await self._next_item()
            if type(item) is not Gap:
                it = iter(self._s.messages(item))  # type: ignore[arg-type]
                self._it = it
                return next(it)

    async def batches(self) -> AsyncIterator[list[Message]]:
        """Lists of messages, one per delivered batch (gaps recorded in :attr:`gaps`)."""
        rest = list(self._it)
        self._it = _EMPTY
        if rest:
            yield rest
        while True:
            try:
                item = await self._next_item()
            except StopAsyncIteration:
                return
            if type(item) is not Gap:
                yield self._s.messages(item)  # type: ignore[arg-type]

    async def events(self) -> AsyncIterator[Message | Gap]:
        """Messages and :class:`Gap` notices, in the order they arrived."""
        for msg in self._it:
            yield msg
        self._it = _EMPTY
        while True:
            try:
                item = await self._next_item()
            except StopAsyncIteration:
                return
            if type(item) is Gap:
                yield item
            else:
                for msg in self._s.messages(item):  # type: ignore[arg-type]
                    yield msg

    async def next(self, *, timeout: float | None = None) -> Message | None:
        """The next message, or ``None`` after ``timeout`` seconds (or when the subscription ended)."""
        try:
            if timeout is None:
                return await self.__anext__()
            with anyio.move_on_after(timeout):
                return await self.__anext__()
        except StopAsyncIteration:
            return None
        return None

    async def _next_item(self) -> wire.RecordBatch | Gap:
        state = self._s
        proto = self._client._proto
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
        return await self._update(wire.UpdateOp.ADD, topics)

    async def remove(self, topics: str | Iterable[str]) -> None:
        """Remove topics/patterns (SUB_UPDATE).  Removing all leaves the subscription open and silent."""
        await self._update(wire.UpdateOp.REMOVE, topics)

    async def _update(self, op: wire.UpdateOp, topics: str | Iterable[str]) -> dict[str, int]:
        client = self._client
        ticket = client._proto.update(self._s, op, topics)
        await client._write()
        result: dict[str, int] = await client._wait(ticket, None)
        return result

    async def ack(self, messages: Message | Iterable[Message]) -> None:
        """Acknowledge messages (subscriptions opened with ``ack="explicit"``)."""
        msgs = [messages] if isinstance(messages, Message) else list(messages)
        if msgs:
            self._client._proto.ack(self._s, msgs)
            await self._client._write()
