"""Output made while handling one input chunk leaves from the task that made it.

Without this, a delivery made by a connection's reader (or a mesh session's)
only wakes the subscriber's writer task, and the bytes reach the socket one
run-loop pass later.  On a busy hub, one pass is the hub's whole batch of
runnable tasks plus an ``epoll`` round, and under CPU contention it is where
the latency tail grows (``docs/benchmarks.md``, "Where the latency goes").

So the synchronous part of handling a chunk runs inside ``with server.output:``.
Connections given output meanwhile are remembered, once each, and flushed when
the outermost block ends: the whole chunk's output for a subscriber in one
non-blocking send, before the producing task yields.  A connection whose writer
task is busy, or whose socket takes only part, leaves the rest to its writer,
in order.  Outside a block (log followers, groups, timers) output wakes the
writer as before.  A block must never contain an ``await``: the flush is what
ends it, and another task's output must not wait behind a suspended one.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol


class Flushable(Protocol):
    def flush_now(self) -> None: ...

    def wake_writer(self) -> None: ...


class OutputBatch:
    """``with batch:`` around synchronous handling; ``batch.ready(conn)`` when output is queued."""

    __slots__ = ("_depth", "_ready")

    def __init__(self) -> None:
        self._depth = 0
        # A dict keeps first-come order and each connection once.
        self._ready: dict[Flushable, None] = {}

    def __enter__(self) -> None:
        self._depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if self._depth == 0 and self._ready:
            ready, self._ready = self._ready, {}
            for conn in ready:
                conn.flush_now()

    def ready(self, conn: Flushable) -> None:
        """``conn`` has queued output: flush it at the end of the block, or wake its writer now."""
        if self._depth:
            self._ready[conn] = None
        else:
            conn.wake_writer()
