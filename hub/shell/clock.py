"""The core's clock, as the shell provides it."""

from __future__ import annotations

import time

import trio


class TrioClock:
    """The core's clock in the shell: monotonic time is the event loop's, so the core's
    deadlines and the shell's sleeps agree (also under trio's test clocks)."""

    def monotonic(self) -> float:
        return trio.current_time()

    def wall_us(self) -> int:
        return time.time_ns() // 1000
