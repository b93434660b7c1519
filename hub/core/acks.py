"""Acknowledgement bookkeeping: which offsets of a topic are acknowledged, and which may be.

An ACK is client input like any other: it may only settle offsets that were
delivered and are still pending (see :func:`ack_refusal`).  Anything else would
move a durable floor past messages nobody has seen -- they would then never be
delivered -- or past what a later SUB_OK can encode.
"""

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


def ack_refusal(topic: str, first: int, last: int, *, floor: int | None, delivered_end: int | None) -> str | None:
    """Why acknowledging ``first..last`` of ``topic`` must be refused, or None if it may be applied.

    ``floor`` is the first offset not yet acknowledged (None: no position is kept for
    the topic); ``delivered_end`` is the offset after the last one delivered (None:
    nothing of the topic was delivered).  Offsets below the floor are acknowledged
    already: acknowledging them again changes nothing, so a resent ACK is accepted.

    >>> ack_refusal("t", 0, 4, floor=0, delivered_end=5) is None
    True
    >>> ack_refusal("t", 0, 999, floor=0, delivered_end=5)
    "offsets 5..999 of 't' were never delivered to this subscription (delivered: up to 4)"
    """
    if first > last:
        return f"ack range {first}..{last} of {topic!r} is empty (first > last)"
    if floor is not None and last < floor:
        return None
    if delivered_end is None or last >= delivered_end:
        delivered = "nothing" if not delivered_end else f"up to {delivered_end - 1}"
        return (
            f"offsets {max(first, delivered_end or 0)}..{last} of {topic!r} were never delivered "
            f"to this subscription (delivered: {delivered})"
        )
    return None
