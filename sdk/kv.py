"""A key-value view of a topic: ``client.kv(topic)`` (docs/compaction.md, "the KV view").

The view is a subscription from ``earliest`` that keeps the latest value of every key in
memory: a record sets its key, a tombstone (empty data in a set with header
``wire.TOMBSTONE_HEADER``) removes it.  On a compacted topic (hub ``--compact``) the log
holds little more than the current value of every key, so opening the view reads about one
record per key; on any other topic it reads the whole log.

*Caught up*: before subscribing, the view asks where the log ends (the SUB_OK of a
``latest`` subscription gives the topic's next offset, ``end``).  The view is caught up once
it has been delivered a record at or past ``end - 1`` -- that record exists, because the
hub never compacts the segment it appends to.  ``get`` and ``keys`` wait for that, then
answer from memory; ``put`` and ``delete`` return once the view holds their own write, so a
``get`` after them reads it back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

import wire

from .messages import Message

if TYPE_CHECKING:
    from .subscription import Subscription

# The clients are typed Any here: they import this module to offer ``kv()``, and an import
# back (even for type checking only) would make a circle of the three.
Client = Any
BlockingClient = Any

#: The headers a deletion is published with.
TOMBSTONE = {wire.TOMBSTONE_HEADER: "1"}


@dataclass(frozen=True, slots=True)
class KVEntry:
    """A key's value as of ``offset``; ``value`` is None when the change is a deletion."""

    key: bytes
    value: bytes | None
    offset: int
    timestamp: int

    @property
    def deleted(self) -> bool:
        return self.value is None


def as_key(key: bytes | str) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def entry_of(msg: Message) -> KVEntry:
    """The change a delivered message makes to its key."""
    key = msg.key or b""
    deleted = not msg.data and wire.TOMBSTONE_HEADER in msg.headers
    return KVEntry(key, None if deleted else msg.data, msg.offset, msg.timestamp)


class KVView:
    """The view's state, without I/O: what both the async and the blocking view keep."""

    def __init__(self, end: int) -> None:
        self.values: dict[bytes, KVEntry] = {}
        #: one past the last offset applied
        self.position = 0
        self.end = end

    @property
    def caught_up(self) -> bool:
        return self.position >= self.end

    def apply(self, messages: Iterable[Message]) -> None:
        values = self.values
        for msg in messages:
            entry = entry_of(msg)
            if entry.value is None:
                values.pop(entry.key, None)
            else:
                values[entry.key] = entry
            self.position = msg.offset + 1

    def get(self, key: bytes | str) -> bytes | None:
        entry = self.values.get(as_key(key))
        return None if entry is None else entry.value

    def keys(self, prefix: bytes | str = b"") -> list[bytes]:
        raw = as_key(prefix)
        return sorted(k for k in self.values if k.startswith(raw))


async def _end_offset(client: Client, topic: str) -> int:
    async with client.subscribe(topic, start="latest") as probe:
        return probe.start_offsets.get(topic, 0)


class KeyValue:
    """The async view: ``async with client.kv("config") as kv: await kv.get("mode")``."""

    def __init__(self, client: Client, topic: str, *, timeout: float = 30.0) -> None:
        self._client = client
        self.topic = topic
        self.timeout = timeout
        self._view = KVView(0)
        self._moved = anyio.Event()
        self._sub: Subscription | None = None
        self._tasks: Any = None

    async def __aenter__(self) -> KeyValue:
        self._view = KVView(await _end_offset(self._client, self.topic))
        self._sub = self._client.subscribe(self.topic, start="earliest")
        await self._sub.__aenter__()
        self._view.position = self._sub.start_offsets.get(self.topic, 0)
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._follow)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._sub is not None and self._tasks is not None
        await self._sub.close()
        self._tasks.cancel_scope.cancel()
        await self._tasks.__aexit__(None, None, None)

    async def _follow(self) -> None:
        assert self._sub is not None
        async for batch in self._sub.batches():
            self._view.apply(batch)
            moved, self._moved = self._moved, anyio.Event()
            moved.set()

    async def _reach(self, position: int) -> None:
        with anyio.fail_after(self.timeout):
            while self._view.position < position:
                await self._moved.wait()

    async def wait_caught_up(self) -> None:
        """Return once the view has read the log as far as it reached when the view was opened."""
        await self._reach(self._view.end)

    @property
    def caught_up(self) -> bool:
        return self._view.caught_up

    async def get(self, key: bytes | str) -> bytes | None:
        """The key's current value (None: no such key, or deleted)."""
        if not self._view.caught_up:
            await self.wait_caught_up()
        return self._view.get(key)

    async def entry(self, key: bytes | str) -> KVEntry | None:
        """The key's current value with its offset and timestamp."""
        if not self._view.caught_up:
            await self.wait_caught_up()
        return self._view.values.get(as_key(key))

    async def keys(self, prefix: bytes | str = b"") -> list[bytes]:
        """Every key with a value (starting with ``prefix``), sorted."""
        if not self._view.caught_up:
            await self.wait_caught_up()
        return self._view.keys(prefix)

    async def put(self, key: bytes | str, value: bytes) -> int:
        """Set ``key`` (published and stored by the hub); returns its offset once the view holds it."""
        if not value:
            raise ValueError("an empty value is how a deletion is written: use delete()")
        return await self._write(as_key(key), value, None)

    async def delete(self, key: bytes | str) -> int:
        """Publish a tombstone for ``key``; returns its offset once the view has applied it."""
        return await self._write(as_key(key), b"", TOMBSTONE)

    async def _write(self, key: bytes, value: bytes, headers: dict[str, str] | None) -> int:
        ack = await self._client.publish_acked(self.topic, value, key=key, headers=headers, timeout=self.timeout)
        offset = ack.offsets[self.topic]
        await self._reach(offset + 1)
        return offset

    async def watch(
        self, key: bytes | str | None = None, *, prefix: bytes | str | None = None, start: Any = "latest"
    ) -> AsyncIterator[KVEntry]:
        """Changes to ``key`` (or to keys starting with ``prefix``; neither: every key), as they are
        stored.  A subscription of its own, filtered by the hub (key filters); ``start="earliest"``
        replays what the log still holds first (on a compacted topic: about the current values)."""
        keys = None if key is None else [as_key(key)]
        prefixes = None if prefix is None else [as_key(prefix)]
        async with self._client.subscribe(self.topic, start=start, keys=keys, key_prefixes=prefixes) as sub:
            async for batch in sub.batches():
                for msg in batch:
                    yield entry_of(msg)


class BlockingKeyValue:
    """The blocking client's view (``client.kv(topic)``): the socket is read on each call, so
    ``get`` answers with everything delivered up to that call."""

    def __init__(self, client: BlockingClient, topic: str, *, timeout: float = 30.0) -> None:
        self._client = client
        self.topic = topic
        self.timeout = timeout
        with client.subscribe(topic, start="latest", timeout=timeout) as probe:
            end = probe.start_offsets.get(topic, 0)
        self._view = KVView(end)
        self._sub = client.subscribe(topic, start="earliest", timeout=timeout)
        self._view.position = self._sub.start_offsets.get(topic, 0)

    def __enter__(self) -> BlockingKeyValue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._sub.close()

    def _drain(self, until: int | None = None) -> None:
        """Apply what has arrived; with ``until``, wait (up to the timeout) for the view to reach it."""
        self._client._service(0.0)
        deadline = time.monotonic() + self.timeout
        while True:
            batch = self._sub.next_batch(timeout=0.0)
            if batch:
                self._view.apply(batch)
                continue
            if until is None or self._view.position >= until:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"kv {self.topic!r}: the view did not reach offset {until - 1} in {self.timeout:g} s"
                )
            batch = self._sub.next_batch(timeout=min(left, 1.0))
            if batch:
                self._view.apply(batch)

    @property
    def caught_up(self) -> bool:
        return self._view.caught_up

    def get(self, key: bytes | str) -> bytes | None:
        self._drain(self._view.end)
        return self._view.get(key)

    def entry(self, key: bytes | str) -> KVEntry | None:
        self._drain(self._view.end)
        return self._view.values.get(as_key(key))

    def keys(self, prefix: bytes | str = b"") -> list[bytes]:
        self._drain(self._view.end)
        return self._view.keys(prefix)

    def put(self, key: bytes | str, value: bytes) -> int:
        if not value:
            raise ValueError("an empty value is how a deletion is written: use delete()")
        return self._write(as_key(key), value, None)

    def delete(self, key: bytes | str) -> int:
        return self._write(as_key(key), b"", TOMBSTONE)

    def _write(self, key: bytes, value: bytes, headers: dict[str, str] | None) -> int:
        ack = self._client.publish_acked(self.topic, value, key=key, headers=headers, timeout=self.timeout)
        offset: int = ack.offsets[self.topic]
        self._drain(offset + 1)
        return offset

    def watch(
        self,
        key: bytes | str | None = None,
        *,
        prefix: bytes | str | None = None,
        start: Any = "latest",
        timeout: float | None = None,
    ) -> Iterator[KVEntry]:
        """As :meth:`KeyValue.watch`; ends when nothing arrives for ``timeout`` seconds (None: never)."""
        keys = None if key is None else [as_key(key)]
        prefixes = None if prefix is None else [as_key(prefix)]
        with self._client.subscribe(self.topic, start=start, keys=keys, key_prefixes=prefixes) as sub:
            while True:
                batch = sub.next_batch(timeout=timeout)
                if not batch:
                    return
                for msg in batch:
                    yield entry_of(msg)
