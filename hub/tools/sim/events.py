"""The simulation's clock and its event loop: one simulated time, events in time order."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

#: Wall clock of the simulation's time 0 (µs), so timestamps look like real ones.
EPOCH_US = 1_800_000_000_000_000


class SimClock:
    """The simulation's time: the core's ``monotonic`` and ``wall_us`` both read it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall_us(self) -> int:
        return EPOCH_US + int(self.now * 1_000_000)


class EventLoop:
    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self.events = 0

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._queue, (max(when, self.clock.now), next(self._seq), fn, args))

    def run_until(self, end: float) -> None:
        queue = self._queue
        clock = self.clock
        while queue and queue[0][0] <= end:
            when, _, fn, args = heapq.heappop(queue)
            clock.now = when
            self.events += 1
            fn(*args)
        clock.now = max(clock.now, end)
