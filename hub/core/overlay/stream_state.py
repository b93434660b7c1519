"""What the delivering side (streams.py) keeps per (origin, topic) stream, and counts."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

import wire


@dataclass(slots=True)
class Gap:
    after: int
    upto: int
    opened: float
    asked: float
    retry: float
    short_answers: int = 0  # answers that left it open with resent sets unseen (repaired())
    asked_after: int = -1  # where it started when last asked


@dataclass(slots=True)
class Held:
    s: wire.RoutedSet
    index: int  # the topic's position in the set
    size: int


class HeldSets:
    """Sets waiting behind a gap, by the sequence each follows (its prev), the lowest at hand.

    Releasing them takes the lowest prev again and again; a scan for it per set made releasing
    n held sets cost n*n steps (20,000 held behind a gap took 45 s to release here).  A heap of
    prevs beside the dict; a prev taken out of the dict by other means stays in the heap until
    it comes to the top, where it is dropped.
    """

    __slots__ = ("_by_prev", "_prevs")

    def __init__(self) -> None:
        self._by_prev: dict[int, Held] = {}
        self._prevs: list[int] = []

    def __len__(self) -> int:
        return len(self._by_prev)

    def __contains__(self, prev: int) -> bool:
        return prev in self._by_prev

    def values(self) -> Iterator[Held]:
        return iter(self._by_prev.values())

    def add(self, prev: int, held: Held) -> None:
        self._by_prev[prev] = held
        heapq.heappush(self._prevs, prev)

    def first(self) -> int | None:
        """The lowest prev held (None: none)."""
        prevs, by_prev = self._prevs, self._by_prev
        while prevs and prevs[0] not in by_prev:
            heapq.heappop(prevs)
        return prevs[0] if prevs else None

    def pop_first(self) -> Held:
        """Take the set with the lowest prev (there must be one: see :meth:`first`)."""
        prev = self.first()
        assert prev is not None
        heapq.heappop(self._prevs)
        return self._by_prev.pop(prev)


@dataclass(slots=True)
class Stream:
    chain: int | None
    held: HeldSets = field(default_factory=HeldSets)  # prev -> set waiting for it
    gap: Gap | None = None
    #: when sets started waiting for the origin to say where the stream starts (JOINED), and
    #: when it was last asked (SYNC)
    asked_start: float | None = None
    start_asked: float = 0.0
    #: the origin's last sequence on the topic, as its latest HEADS said: a tail beyond the
    #: chain is asked for once nothing else is (a HEADS may come while a gap is being repaired)
    head: int = 0
    counted_upto: int = 0  # the last range end whose REPAIRED's missing messages were counted


@dataclass(slots=True)
class StreamCounters:
    delivered_sets: int = 0
    duplicate_sets: int = 0
    held_sets: int = 0
    held_dropped: int = 0
    gaps_opened: int = 0
    gaps_repaired: int = 0
    #: gaps given up: the origin could not resend them, or stayed away past the give-up time
    gaps_lost: int = 0
    messages_lost: int = 0
    repairs_asked: int = 0
    #: REPAIRED with its gap still open and resent sets unseen: asked again, not skipped
    repairs_short: int = 0
    unwanted_sets: int = 0
    #: streams whose start the origin never said: taken from the first set held (see START_WAIT)
    starts_assumed: int = 0


@dataclass(frozen=True, slots=True)
class RepairAsk:
    origin: int
    topic: str
    after: int
    upto: int
