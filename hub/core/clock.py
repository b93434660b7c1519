"""Time, as the core sees it: an object passed in, so tests and simulations set it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps: deadlines and heartbeats."""
        ...

    def wall_us(self) -> int:
        """Microseconds since the Unix epoch: message timestamps."""
        ...


class SystemClock:
    """The machine's clocks (the shell passes one whose monotonic side is its event loop's)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_us(self) -> int:
        return time.time_ns() // 1000


class ManualClock:
    """A clock a test moves by hand.

    >>> clock = ManualClock(); clock.advance(1.5); clock.monotonic()
    1.5
    """

    def __init__(self, monotonic: float = 0.0, wall_us: int = 1_700_000_000_000_000) -> None:
        self._monotonic = monotonic
        self._wall_us = wall_us

    def monotonic(self) -> float:
        return self._monotonic

    def wall_us(self) -> int:
        return self._wall_us

    def advance(self, seconds: float) -> None:
        self._monotonic += seconds
        self._wall_us += int(seconds * 1_000_000)
