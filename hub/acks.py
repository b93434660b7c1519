"""Acknowledgement bookkeeping: which offsets of a topic are acknowledged."""

from __future__ import annotations

import bisect


class AckTracker:
    """The acknowledged floor of one topic plus acknowledged ranges above it.

    ``floor`` is the first offset not yet acknowledged: everything below it is.
    Acks may arrive out of order (consumer groups); ranges above the floor are
    kept merged, so memory is proportional to the number of holes, not messages.

    >>> t = AckTracker(0)
    >>> t.ack(2, 3); t.floor
    0
    >>> t.ack(0, 1); t.floor
    4
    """

    __slots__ = ("_ranges", "floor")

    def __init__(self, floor: int) -> None:
        self.floor = floor
        #: disjoint, sorted, non-adjacent [first, last] ranges above the floor
        self._ranges: list[list[int]] = []

    def ack(self, first: int, last: int) -> None:
        if last < self.floor or last < first:
            return
        first = max(first, self.floor)
        ranges = self._ranges
        i = bisect.bisect_left(ranges, first, key=lambda r: r[1] + 1)
        j = i
        while j < len(ranges) and ranges[j][0] <= last + 1:
            first = min(first, ranges[j][0])
            last = max(last, ranges[j][1])
            j += 1
        ranges[i:j] = [[first, last]]
        if ranges[0][0] <= self.floor:
            self.floor = ranges[0][1] + 1
            del ranges[0]

    def unacked_runs(self, first: int, last: int) -> list[tuple[int, int]]:
        """The unacknowledged [first, last] runs inside ``first .. last``."""
        runs: list[tuple[int, int]] = []
        cursor = max(first, self.floor)
        for lo, hi in self._ranges:
            if hi < cursor:
                continue
            if lo > last:
                break
            if lo > cursor:
                runs.append((cursor, min(lo - 1, last)))
            cursor = hi + 1
        if cursor <= last:
            runs.append((cursor, last))
        return runs
