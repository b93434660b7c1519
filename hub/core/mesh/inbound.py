"""The receiving side of forwarding: interest check, dedup by (origin, seq), hand-off to the hub.

The hub's ``on_forward`` callback stores the sets and returns the last origin
sequence it holds; that becomes the cumulative FORWARD_ACK.  Sets at or below
the stored position are duplicates (a resend after a reconnect) and never
reach the hub, so at-least-once forwarding becomes exactly-once storage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import wire

from .interest import LocalInterest

#: v1 FORWARD frames carry no origin or sequence; they reach ``on_forward`` with
#: origin 0 and origin_seq 0 and must be stored without dedup (hub ids are never 0).
V1_ORIGIN = 0

#: ``on_forward(origin, sets, peer_id)`` -> last origin seq stored (None: all of them).
ForwardHandler = Callable[[int, list[wire.ForwardSet], Any], "int | None"]


@dataclass(slots=True)
class InboundResult:
    #: Cumulative position to acknowledge (None: nothing to acknowledge).
    ack_seq: int | None = None
    delivered: int = 0
    duplicates: int = 0
    dropped_no_interest: int = 0
    unwanted_topics: set[str] = field(default_factory=set)


def _last_seq(s: wire.ForwardSet) -> int:
    return s.origin_seq + s.messages.count - 1


def _trim(s: wire.ForwardSet, position: int) -> wire.ForwardSet:
    """The part of ``s`` after ``position`` (a set that straddles the stored position)."""
    skip = position - s.origin_seq + 1
    rest = list(s.messages.messages())[skip:]
    return wire.ForwardSet(
        origin_seq=position + 1,
        timestamp=s.timestamp,
        messages=wire.MessageSet.build(s.messages.topics, rest, headers=s.messages.headers),
    )


class InboundForwards:
    def __init__(self, on_forward: ForwardHandler, local: LocalInterest) -> None:
        self._on_forward = on_forward
        self._local = local
        self._positions: dict[int, int] = {}

    def merge_positions(self, positions: Mapping[int, int]) -> None:
        """Take the hub's stored positions (at start and before each MESH_HELLO)."""
        for origin, seq in positions.items():
            if seq > self._positions.get(origin, 0):
                self._positions[origin] = seq

    def positions(self) -> dict[int, int]:
        return dict(self._positions)

    def receive_batch(self, origin: int, sets: tuple[wire.ForwardSet, ...], peer: Any) -> InboundResult:
        out = InboundResult()
        pos = self._positions.get(origin, 0)
        wanted: list[wire.ForwardSet] = []
        for s in sets:
            last = _last_seq(s)
            if last <= pos:
                out.duplicates += s.messages.count
                continue
            if not self._local.wants(s.messages.topics):
                out.dropped_no_interest += s.messages.count
                out.unwanted_topics.update(s.messages.topics)
                continue
            if s.origin_seq <= pos:
                out.duplicates += pos - s.origin_seq + 1
                s = _trim(s, pos)
            wanted.append(s)
        batch_last = max(pos, _last_seq(sets[-1])) if sets else pos
        if wanted:
            target = _last_seq(wanted[-1])
            stored = self._on_forward(origin, wanted, peer)
            out.delivered = sum(s.messages.count for s in wanted)
            if stored is not None and stored < target:
                # The hub kept less than it was given: acknowledge only that much
                # so the sender resends the rest on the next session.
                batch_last = max(pos, stored)
        self._positions[origin] = batch_last
        out.ack_seq = batch_last
        return out

    def receive_v1(self, frames: list[wire.Forward], peer: Any) -> InboundResult:
        """Seed FORWARDs of one read chunk; runs of the same topics become one message set."""
        out = InboundResult()
        sets: list[wire.ForwardSet] = []
        run: list[tuple[bytes, bytes]] = []
        run_topics: tuple[str, ...] = ()
        now_us = time.time_ns() // 1000

        def close_run() -> None:
            if run:
                messages = wire.MessageSet.build(run_topics, run)
                sets.append(wire.ForwardSet(origin_seq=0, timestamp=now_us, messages=messages))

        for frame in frames:
            if not self._local.wants(frame.topics):
                out.dropped_no_interest += 1
                out.unwanted_topics.update(frame.topics)
                continue
            if frame.topics != run_topics:
                close_run()
                run = []
                run_topics = frame.topics
            run.append((b"", frame.data))
        close_run()
        if sets:
            self._on_forward(V1_ORIGIN, sets, peer)
            out.delivered = sum(s.messages.count for s in sets)
        return out
