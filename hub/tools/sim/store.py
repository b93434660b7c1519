"""A simulated hub's data dir: what it stored and delivered, its own sets, its stream starts."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import wire

from .events import SimClock


@dataclass
class Delivery:
    hub: int
    origin: int
    topic: str
    origin_seq: int
    published_us: int
    at: float


class SimStore:
    """A hub's data dir: what it stored, its own sets, its stream starts.  Survives crashes."""

    def __init__(self, hub: int, record: Callable[[Delivery], None], clock: SimClock) -> None:
        self.hub = hub
        self.record = record
        self.clock = clock
        self.positions: dict[tuple[int, str], int] = {}
        self.own: dict[str, list[tuple[int, int, int, bytes, bytes]]] = {}
        self.since: dict[tuple[int, str], int] = {}
        self.joins: dict[tuple[int, str], int] = {}
        self.keeps_logs = True

    # OverlayStore
    def deliver(self, origin: int, sets: list[wire.ForwardSet]) -> int | None:
        now = self.clock.now
        for s in sets:
            last = s.origin_seq + s.messages.count - 1
            for topic in s.messages.topics:
                self.positions[(origin, topic)] = last
                self.record(Delivery(self.hub, origin, topic, s.origin_seq, s.timestamp, now))
        return None

    def stored_position(self, origin: int, topic: str) -> int:
        return self.positions.get((origin, topic), 0)

    def save_since(self, since: Mapping[tuple[int, str], int]) -> None:
        self.since = dict(since)

    def save_joins(self, joins: Mapping[tuple[int, str], int]) -> None:
        self.joins = dict(joins)

    floors: Mapping[tuple[int, str], int] = {}  # they bound where v2 resumes: no v2 here, none kept

    def save_floors(self, floors: Mapping[tuple[int, str], int]) -> None:
        pass

    def own_last(self, topic: str) -> int:
        sets = self.own.get(topic)
        return sets[-1][0] + sets[-1][2] - 1 if sets else 0

    def own_topics(self) -> list[str]:
        return list(self.own)

    def own_batches(self, topic: str, after: int, upto: int, on_hole: Callable[[int], None]) -> Iterator[
            tuple[int, int, int, bytes, bytes]]:  # fmt: skip
        for entry in self.own.get(topic, ()):
            if after < entry[0] <= upto:
                yield entry

    def append_own(self, origin_seq: int, timestamp: int, messages: wire.MessageSet) -> None:
        for topic in messages.topics:
            self.own.setdefault(topic, []).append(
                (origin_seq, timestamp, messages.count, messages.records, messages.headers)
            )
