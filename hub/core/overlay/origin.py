"""The origin's side: chaining this hub's sets per topic, answering REPAIR and SYNC, pushing HEADS.

Every set this hub publishes carries, per topic, the last sequence of its previous
set on that topic (``prev``), so whoever delivers it can tell whether it missed
one.  Missed sets are asked for (REPAIR) and resent from a bounded memory of recent
sets, else from the topic's log; a hub without logs can only resend what it still
remembers, and says what it could not (REPAIRED).  After routes moved
(``after_changes.py``), the hubs a recently published topic goes to are told where it
ends (HEADS): a tail lost in flight is found even when nothing follows it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import wire
from wire.frames.mesh_v3 import encode_routed_set

#: A set as the sender queues it: its bytes in a ROUTED_SETS(_HEADERS) frame, and whether they
#: carry a headers block (such sets go in ROUTED_SETS_HEADERS frames, mesh 3.1).
EncodedSet = tuple[bytes, bool]


def encode_set(origin_seq: int, timestamp: int, messages: wire.MessageSet, prevs: tuple[int, ...]) -> EncodedSet:
    """A set's bytes: with its headers block when it has headers, in the 3.0 layout when not."""
    headered = bool(messages.headers)
    body = messages.encode_headered() if headered else messages.encode()
    return encode_routed_set(origin_seq, timestamp, body, prevs), headered


def heads_frames(heads: list[wire.Head]) -> list[wire.Heads]:
    """HEADS frames for ``heads``, at most 65,535 per frame (its count is a u16)."""
    return [wire.Heads(heads=tuple(heads[i : i + 0xFFFF])) for i in range(0, len(heads), 0xFFFF)]


class OwnLog(Protocol):
    """What the origin side needs from the hub's storage."""

    #: Whether this hub keeps topic logs (a data dir).  Without them the origin side answers
    #: REPAIR from its memory of recent sets alone, and :meth:`own_batches` is never asked.
    keeps_logs: bool

    def own_last(self, topic: str) -> int:
        """The last sequence of this hub's own sets on ``topic`` (0: none)."""
        ...

    def own_topics(self) -> Iterable[str]:
        """Topics this hub has published on."""
        ...

    def own_batches(self, topic: str, after: int, upto: int, on_hole: Callable[[int], None]) -> Iterator[
            tuple[int, int, int, bytes, bytes]]:  # fmt: skip
        """This hub's sets on ``topic`` with ``after < origin_seq <= upto``, in order, as
        ``(origin_seq, timestamp, count, records, headers block)``; ``on_hole(messages)`` for a
        stretch gone."""
        ...


@dataclass(frozen=True, slots=True)
class RepairAnswer:
    """What a REPAIR gets: sets resent, then REPAIRED(upto, missing)."""

    sets: list[EncodedSet]
    missing: int  # messages of ``(after, upto]`` the origin no longer has
    upto: int  # the end of the part answered: the REPAIR's, or its last set's when bounded


@dataclass(frozen=True, slots=True)
class _Recent:
    origin_seq: int
    timestamp: int
    messages: wire.MessageSet
    prevs: tuple[int, ...]


class OriginSide:
    def __init__(self, log: OwnLog, *, recent_max_bytes: int) -> None:
        self.log = log if log.keeps_logs else None
        # Read once, before this hub publishes anything: afterwards the logs already hold the
        # set being chained when it is chained.
        self._prev: dict[str, int] = {t: log.own_last(t) for t in log.own_topics()} if self.log else {}
        self._recent: deque[_Recent] = deque()
        self._recent_bytes = 0
        self.recent_max_bytes = recent_max_bytes
        #: topic -> time of its last publish (kept while recent: see :meth:`published_since`)
        self._published: dict[str, float] = {}
        self.repairs_served = 0
        self.sets_resent = 0

    def prev_of(self, topic: str) -> int:
        return self._prev.get(topic, 0)

    def stamp(self, origin_seq: int, timestamp: int, messages: wire.MessageSet, now: float) -> tuple[int, ...]:
        """A new set of this hub's: its prevs (and the chain moves on)."""
        last = origin_seq + messages.count - 1
        prevs = tuple(self.prev_of(t) for t in messages.topics)
        for topic in messages.topics:
            self._prev[topic] = last
            self._published[topic] = now
        self._remember(_Recent(origin_seq, timestamp, messages, prevs))
        return prevs

    def _remember(self, entry: _Recent) -> None:
        self._recent.append(entry)
        self._recent_bytes += len(entry.messages.records)
        while self._recent_bytes > self.recent_max_bytes and len(self._recent) > 1:
            self._recent_bytes -= len(self._recent.popleft().messages.records)

    # -- repair ------------------------------------------------------------------------

    def repair(self, topic: str, after: int, upto: int, max_bytes: int) -> RepairAnswer:
        """Sets on ``topic`` in ``(after, upto]`` (chained from ``after``), read up to ``max_bytes``
        of records (at least one set): an answer that stops there ends at its last set, and the
        asker asks on from it.  Counts the messages of the part answered that are gone."""
        self.repairs_served += 1
        recent = self._recent
        covered = bool(recent) and recent[0].origin_seq <= after + 1
        found: Iterator[tuple[int, int, int, bytes, bytes]]
        missing = 0
        if covered or self.log is None:
            if not covered:
                # No log to read the rest from: what came before the memory is gone, counted as
                # the range's sequences that precede it (at most that many messages on ``topic``).
                first = recent[0].origin_seq if recent else upto + 1
                missing = min(upto, first - 1) - after
            found = self._remembered(topic, after, upto)
        else:

            def on_hole(messages: int) -> None:
                nonlocal missing
                missing += messages

            found = self.log.own_batches(topic, after, upto, on_hole)  # lazy: read as far as sent
        encoded: list[EncodedSet] = []
        prev, size = after, 0
        for origin_seq, timestamp, count, records, headers in found:
            message_set = wire.MessageSet(topics=(topic,), count=count, records=records, headers=headers)
            encoded.append(encode_set(origin_seq, timestamp, message_set, (prev,)))
            prev = origin_seq + count - 1
            size += len(records) + len(headers)
            if size >= max_bytes and prev < upto:
                upto = prev
                break
        self.sets_resent += len(encoded)
        return RepairAnswer(encoded, missing, upto)

    def _remembered(self, topic: str, after: int, upto: int) -> Iterator[tuple[int, int, int, bytes, bytes]]:
        for entry in self._recent:
            if entry.origin_seq > upto:
                return
            if entry.origin_seq > after and topic in entry.messages.topics:
                m = entry.messages
                yield entry.origin_seq, entry.timestamp, m.count, m.records, m.headers

    # -- heads ---------------------------------------------------------------------------

    def published_since(self, since: float) -> list[wire.Head]:
        """Where each topic published on at or after ``since`` ends; older topics are let go."""
        heads = []
        for topic, at in list(self._published.items()):
            if at >= since:
                heads.append(wire.Head(topic=topic, last=self._prev[topic]))
            else:
                del self._published[topic]
        return heads

    def heads_matching(self, matches: Callable[[str], bool], now: float) -> list[wire.Head]:
        """This hub's last sequence on each of its topics ``matches`` (a SYNC's answer, a JOINED's
        HEADS).  They count as published ``now`` for :meth:`published_since`: a HEADS lost in a
        change of routes goes again with the HEADS after it -- a restarted hub has no publish
        of its own yet to put a topic there, and its greetings cross a map that is still filling."""
        heads = []
        published = self._published
        for topic in sorted(self._prev):
            if matches(topic):
                last = self.prev_of(topic)
                if last:
                    heads.append(wire.Head(topic=topic, last=last))
                    published[topic] = max(published.get(topic, now), now)
        return heads

    def state_size(self) -> int:
        return len(self._prev)
