"""A fixed-bucket histogram of durations: a few integer bumps per observation, read by metrics.

Used where an observation is rare next to the traffic (one group commit's fsyncs,
one mesh heartbeat's round trip), never per message.  The buckets are cumulative
only when read (:meth:`Histogram.cumulative`), as Prometheus wants them.
"""

from __future__ import annotations

from bisect import bisect_left

#: Seconds, from 50 µs to 10 s: fsyncs on fast disks up to round trips over a congested link.
LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class Histogram:
    __slots__ = ("bounds", "count", "counts", "last", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        #: counts[i]: observations in (bounds[i-1], bounds[i]]; the last slot is above every bound.
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0
        #: The latest observation (None before the first): what a status page shows.
        self.last: float | None = None

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        self.last = value

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= it)`` for every bound, then ``(inf, count)``."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((bound, running))
        out.append((float("inf"), self.count))
        return out
