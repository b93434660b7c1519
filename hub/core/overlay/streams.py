"""The delivering side: each origin's sets on each topic exactly once and in order.

Sets reach a hub over whatever path the graph gives at the time, and a path
change, a relay's crash or a repair can reorder or lose them.  So each set names,
per topic, the origin's previous set on that topic (its ``prev``), and this hub
keeps, per (origin, topic) stream, the last sequence it delivered (its *chain*):

* a set whose ``prev`` is the chain (or older) is delivered, and sets held back
  behind it follow;
* a set already delivered (its last sequence at or below the chain) is a duplicate;
* a set whose ``prev`` is beyond the chain waits here (hold-back) while the gap is
  asked of the origin (REPAIR), which answers from its log and then says REPAIRED;
  what it could not resend is given up and counted (and nothing it still has: see repaired()).

Where a stream starts: a hub learns from each origin where its sets for a key start
(JOINED ``since``); a set whose ``prev`` is at or below that started there.  A set that
arrives before its origin's JOINED (a lost or overtaken one) waits while the origin is
asked again (SYNC, whose answer repeats the JOINED).  A tail lost in flight with nothing
after it is found by the origin's HEADS.  State is per active stream, never per message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import wire

from .membership import keys_of_topic
from .stream_state import Gap, Held, RepairAsk, Stream, StreamCounters

#: Seconds sets wait for their origin to say where their stream starts before the first of
#: them is taken as the start; the origin is asked again every START_RETRY meanwhile (a SYNC
#: that found no route, or its answer, is lost like any frame around a change of routes).
START_WAIT = 10.0
START_RETRY = 1.0
#: REPAIRED answers that left the gap open with resent sets unseen before it is given up,
#: counted (an origin whose log lost a tail to a power cut would be asked for it for good).
SHORT_ANSWERS_MAX = 3


class Streams:
    """Chains, hold-back and gaps of every (origin, topic) this hub delivers."""

    def __init__(
        self,
        *,
        stored_position: Callable[[int, str], int],
        save_since: Callable[[Mapping[tuple[int, str], int]], None],
        since: Mapping[tuple[int, str], int] | None = None,
        hold_max_bytes: int,
        floors: Mapping[tuple[int, str], int] | None = None,
        save_floors: Callable[[Mapping[tuple[int, str], int]], None] = lambda floors: None,
    ) -> None:
        self._stored_position = stored_position
        self._save_since = save_since
        self._save_floors = save_floors
        #: (origin, topic) -> where this hub's store of the stream stopped when a gap opened, or its
        #: sets waited for their start: past it the topic holds only what came in order.  Kept
        #: across restarts, because the stored positions alone hide such a gap once another topic
        #: of the origin is stored further: v2 resumes an origin no later than these (MeshLink).
        self.floors: dict[tuple[int, str], int] = dict(floors or {})
        #: (origin, key) -> the origin's sequence after which its sets under the key are for us
        self.since: dict[tuple[int, str], int] = dict(since or {})
        self.streams: dict[tuple[int, str], Stream] = {}
        self.hold_max_bytes = hold_max_bytes
        self.held_bytes = 0
        self.counters = StreamCounters()
        #: sets ready to store, in order: (origin, set with the topics to store)
        self.ready: list[tuple[int, wire.ForwardSet]] = []
        self.asks: list[RepairAsk] = []
        #: (origin, topic) of streams whose start this hub must ask its origin for (SYNC)
        self.starts: list[tuple[int, str]] = []

    # -- where streams start ---------------------------------------------------------------

    def joined(self, origin: int, key: str, since: int, now: float) -> None:
        """JOINED from ``origin``: keep the earliest start (a restart of either side re-sends it)."""
        have = self.since.get((origin, key))
        if have is None or since < have:
            self.since[(origin, key)] = since
            self._save_since(self.since)
        for (o, topic), stream in list(self.streams.items()):
            if o == origin and stream.asked_start is not None and key in keys_of_topic(topic):
                self._start(origin, topic, stream, now)

    def forget_key(self, key: str) -> None:
        """This hub no longer wants anything under ``key``: its starts go (a later join starts anew)."""
        gone = [k for k in self.since if k[1] == key]
        for k in gone:
            del self.since[k]
        if gone:
            self._save_since(self.since)

    def forget_topics(self, wanted: Callable[[str], bool]) -> None:
        """Drop the state of streams whose topic is no longer wanted here."""
        for k in [k for k in self.streams if not wanted(k[1])]:
            self.held_bytes -= sum(h.size for h in self.streams.pop(k).held.values())
        unwanted = [k for k in self.floors if not wanted(k[1])]  # nothing of them is stored from now on
        for k in unwanted:
            del self.floors[k]
        if unwanted:
            self._save_floors(self.floors)

    def origins(self) -> set[int]:
        """Origins this hub keeps streams or starts with."""
        return {o for o, _ in self.since} | {o for o, _ in self.streams}

    def _floor(self, origin: int, topic: str) -> int | None:
        """The origin's start for ``topic`` here (the earliest of its keys), None if unknown."""
        found = [self.since[(origin, k)] for k in keys_of_topic(topic) if (origin, k) in self.since]
        return min(found) if found else None

    def _stream(self, origin: int, topic: str) -> Stream:
        stream = self.streams.get((origin, topic))
        if stream is None:
            stored = self._stored_position(origin, topic)
            stream = self.streams[(origin, topic)] = Stream(chain=stored or None)
        return stream

    def _effective(self, origin: int, topic: str, stream: Stream) -> int | None:
        floor = self._floor(origin, topic)
        if stream.chain is None:
            return floor
        return stream.chain if floor is None else max(stream.chain, floor)

    # -- sets ------------------------------------------------------------------------------

    def receive(self, origin: int, sets: tuple[wire.RoutedSet, ...], wants: Callable[[str], bool], now: float) -> None:
        """Sets for this hub: ready ones go to :attr:`ready`, others wait, gaps go to :attr:`asks`."""
        for s in sets:
            ready: list[str] = []
            for index, topic in enumerate(s.messages.topics):
                if not wants(topic):
                    continue
                if self._place(origin, topic, s, index, now):
                    ready.append(topic)
            if not any(wants(t) for t in s.messages.topics):
                self.counters.unwanted_sets += 1
            if ready:
                self._emit(origin, s, ready)
                for topic in ready:
                    self._release(origin, topic)

    def _place(self, origin: int, topic: str, s: wire.RoutedSet, index: int, now: float) -> bool:
        """True: deliver ``s`` on ``topic`` now.  False: a duplicate, or held behind a gap."""
        stream = self._stream(origin, topic)
        prev = s.prevs[index]
        at = self._effective(origin, topic, stream)
        if stream.chain is not None and s.last_seq <= stream.chain:
            self.counters.duplicate_sets += 1
            return False
        if at is None and prev != 0:
            # Its origin has not said (or its word was lost) where this hub's stream starts:
            # hold the set and ask, rather than take it as the start and lose what came before.
            self._hold(stream, s, index)
            if stream.asked_start is None:
                stream.asked_start = stream.start_asked = now
                self.starts.append((origin, topic))
                self._keep_floor(origin, topic, self._stored_position(origin, topic))
            return False
        if at is None or prev <= at:
            if at is not None and s.last_seq <= at:
                return False  # before this hub's start on the topic: not for it
            stream.chain = s.last_seq
            return True
        # prev is beyond what this hub has: hold it, and ask for the gap.
        self._hold(stream, s, index)
        self._open_gap(origin, topic, stream, at, prev, now)
        return False

    def _hold(self, stream: Stream, s: wire.RoutedSet, index: int) -> None:
        prev = s.prevs[index]
        if prev in stream.held:
            return
        size = len(s.messages.records)
        if self.held_bytes + size > self.hold_max_bytes:
            self.counters.held_dropped += 1  # it comes back by repair once the gap closes
        else:
            stream.held.add(prev, Held(s, index, size))
            self.held_bytes += size
            self.counters.held_sets += 1

    def _start(self, origin: int, topic: str, stream: Stream, now: float) -> None:
        """A stream whose start is now known (or assumed): its held sets go, or wait for a repair."""
        stream.asked_start = None
        stored = self._stored_position(origin, topic)
        if stored and (stream.chain is None or stored > stream.chain):
            # Stored by a v2 link since the stream began (the switch to the overlay): had already.
            stream.chain = stored
        at = self._effective(origin, topic, stream)
        if at is None:
            # Never said: the earliest held set starts the stream (or, with none, the head).
            self.counters.starts_assumed += 1
            if stream.held:
                h = stream.held.pop_first()
                self.held_bytes -= h.size
                stream.chain = h.s.last_seq
                self._emit(origin, h.s, [topic])
            else:
                stream.chain = stream.head or None
        elif stream.chain is None:
            stream.chain = at
        self._release(origin, topic)
        self._next_gap(origin, topic, stream, now)

    def _next_gap(self, origin: int, topic: str, stream: Stream, now: float) -> None:
        """With no gap open: one up to the first set held back, else up to the origin's head."""
        at = self._effective(origin, topic, stream)
        if at is None or stream.gap is not None:
            return
        first = stream.held.first()
        upto = stream.head if first is None else first
        if upto > at:
            self._open_gap(origin, topic, stream, at, upto, now)

    def _open_gap(self, origin: int, topic: str, stream: Stream, after: int, upto: int, now: float) -> None:
        gap = stream.gap
        if gap is not None and gap.after == after:
            # A later set came behind the gap: the ask under way covers its start, and its answer
            # (repaired() asks on) or the retry (tick()) covers the rest.  Asking again for every
            # set that arrived behind a gap had the origin read and resend the same range once per
            # set: a publisher's live sets behind a hand-over's gap held its hub for seconds.
            gap.upto = max(gap.upto, upto)
            return
        self.counters.gaps_opened += 1
        stream.gap = Gap(after=after, upto=upto, opened=now, asked=now, retry=0.0)
        self._keep_floor(origin, topic, after)
        self._ask(origin, topic, stream, now)

    def _ask(self, origin: int, topic: str, stream: Stream, now: float) -> None:
        gap = stream.gap
        assert gap is not None
        gap.asked, gap.asked_after = now, gap.after
        self.counters.repairs_asked += 1
        # A range whose missing messages were counted up to counted_upto is asked again up to
        # there first (its REPAIRED is not counted again), and the rest once that part came
        # (repaired() asks on): one ask over both would count the first part's holes twice.
        upto = stream.counted_upto if gap.after < stream.counted_upto < gap.upto else gap.upto
        self.asks.append(RepairAsk(origin, topic, gap.after, upto))

    def _emit(self, origin: int, s: wire.RoutedSet, topics: list[str]) -> None:
        self.counters.delivered_sets += 1
        messages = s.messages
        if len(topics) != len(messages.topics):
            messages = replace(messages, topics=tuple(topics))  # every other field kept (headers too)
        self.ready.append((origin, wire.ForwardSet(origin_seq=s.origin_seq, timestamp=s.timestamp, messages=messages)))

    def _release(self, origin: int, topic: str) -> None:
        """Deliver what waited behind the chain's new end, as far as it goes."""
        stream = self.streams[(origin, topic)]
        held = stream.held
        while stream.chain is not None and (first := held.first()) is not None and first <= stream.chain:
            h = held.pop_first()
            self.held_bytes -= h.size
            if h.s.last_seq > stream.chain:  # else delivered meanwhile (a repair)
                stream.chain = h.s.last_seq
                self._emit(origin, h.s, [topic])
        gap = stream.gap
        if gap is not None and stream.chain is not None and stream.chain >= gap.upto:
            stream.gap = None
            self.counters.gaps_repaired += 1
            # Something further on still waits, or the origin said its topic goes further: a new gap.
            self._next_gap(origin, topic, stream, gap.asked)
        elif gap is not None and stream.chain is not None and stream.chain > gap.after:
            gap.after, gap.short_answers = stream.chain, 0  # part of it came: the rest is asked from now on

    def _keep_floor(self, origin: int, topic: str, position: int) -> None:
        key = (origin, topic)
        if position < self.floors.get(key, position + 1):
            self.floors[key] = position
            self._save_floors(self.floors)

    def _settle_floors(self) -> None:
        """Floors of streams stored past them in order since (no gap, nothing held) go."""
        if not self.floors:  # the usual case, on every tick
            return
        settled = [k for k, floor in self.floors.items() if self._stored_position(*k) > floor and (
            (s := self.streams.get(k)) is None or (s.gap is None and not s.held and s.asked_start is None))]
        for k in settled:
            del self.floors[k]
        if settled:
            self._save_floors(self.floors)

    def stored_less(self, origin: int, topics: tuple[str, ...], position: int) -> None:
        """The hub stored less than it was given (a storage error): chains go back to what it holds."""
        for topic in topics:
            stream = self.streams.get((origin, topic))
            if stream is not None and stream.chain is not None and stream.chain > position:
                stream.chain = position

    # -- what origins say --------------------------------------------------------------

    def heads(self, origin: int, heads: tuple[wire.Head, ...], wants: Callable[[str], bool], now: float) -> None:
        """An origin's last sequence per topic: a tail this hub lacks is asked for."""
        for head in heads:
            if not wants(head.topic):
                continue
            stream = self._stream(origin, head.topic)
            stream.head = max(stream.head, head.last)
            if self._effective(origin, head.topic, stream) is None:
                # Where this hub's stream starts is not known: ask before judging the tail.
                if stream.asked_start is None:
                    stream.asked_start = stream.start_asked = now
                    self.starts.append((origin, head.topic))
                continue
            self._next_gap(origin, head.topic, stream, now)

    def repaired(self, origin: int, topic: str, upto: int, missing: int, now: float) -> None:
        """The origin resent what it had up to ``upto``, ahead of this answer, but ``missing``
        messages: counted lost once, for a range past the last one counted (see _ask), even if
        its resent sets (chained across what it lacks) closed the gap.  An answer in parts
        (``upto`` short of the gap's end, bounded by the origin, or by _ask) whose sets all came
        is asked on from at once.  A gap still open when the origin had some of the range to
        resend (``missing`` short of it) waits for sets lost or overtaken on the way, or the
        origin lacks its end: delivering the held sets could lose sets, so it is asked again,
        given up after SHORT_ANSWERS_MAX such answers.  Else the held sets up to ``upto`` go."""
        stream = self.streams.get((origin, topic))
        if stream is None:
            return
        if missing and upto > stream.counted_upto:
            stream.counted_upto = upto
            self.counters.messages_lost += missing
        gap = stream.gap
        if gap is None:
            return
        if gap.after >= upto or (stream.chain or 0) >= upto:
            if gap.asked_after < upto < gap.upto:  # this answer's part, not an older one's
                gap.retry = 0.0
                self._ask(origin, topic, stream, now)
            return
        if missing < upto - gap.asked_after:  # not all of it missing: it may have resent some
            self.counters.repairs_short += 1
            gap.short_answers += 1
            if gap.short_answers < SHORT_ANSWERS_MAX:
                return  # tick() asks again when the retry is due
        self.counters.gaps_lost += 1
        while (first := stream.held.first()) is not None and first <= upto:
            h = stream.held.pop_first()
            self.held_bytes -= h.size
            if stream.chain is None or h.s.last_seq > stream.chain:
                stream.chain = h.s.last_seq
                self._emit(origin, h.s, [topic])
        self._skip(origin, topic, stream, upto, now)

    def _skip(self, origin: int, topic: str, stream: Stream, upto: int, now: float) -> None:
        stream.chain = max(stream.chain or 0, upto)
        stream.gap = None
        self._release(origin, topic)
        self._next_gap(origin, topic, stream, now)

    # -- time ------------------------------------------------------------------------------

    def tick(self, now: float, reachable: Callable[[int], bool], retry: float, retry_max: float,
             give_up: float) -> float | None:  # fmt: skip
        """Ask again for gaps not filled; give up on origins gone too long.  Returns the next deadline."""
        self._settle_floors()
        deadline: float | None = None
        for (origin, topic), stream in list(self.streams.items()):
            if stream.asked_start is not None:
                if now >= stream.asked_start + START_WAIT:
                    self._start(origin, topic, stream, now)
                else:
                    if now >= stream.start_asked + START_RETRY:
                        stream.start_asked = now
                        self.starts.append((origin, topic))
                    due = min(stream.asked_start + START_WAIT, stream.start_asked + START_RETRY)
                    deadline = due if deadline is None else min(deadline, due)
            gap = stream.gap
            if gap is None:
                continue
            if not reachable(origin):
                if gap.asked + give_up <= now:  # the deadline's own sum (see SetSender.unpark)
                    self.counters.gaps_lost += 1
                    self._skip(origin, topic, stream, gap.upto, now)
                    continue
                due = gap.asked + give_up
            else:
                wait = min(retry_max, max(retry, gap.retry * 2 if gap.retry else retry))
                due = gap.asked + wait
                if now >= due:
                    gap.retry = wait
                    self._ask(origin, topic, stream, now)
                    due = now + min(retry_max, wait * 2)
            deadline = due if deadline is None else min(deadline, due)
        return deadline

    def ask_again(self, through: Callable[[int], bool], now: float) -> None:
        """Ask again at once what is asked of origins ``through`` says the last asks went by (a
        neighbour on their way was just suspected): a REPAIR or SYNC it swallowed would otherwise
        wait for its retry (``repair_retry``, START_RETRY), and the new asks take the detour."""
        for (origin, topic), stream in self.streams.items():
            if (stream.gap is None and stream.asked_start is None) or not through(origin):
                continue
            if stream.gap is not None:
                stream.gap.retry = 0.0
                self._ask(origin, topic, stream, now)
            if stream.asked_start is not None:
                stream.start_asked = now
                self.starts.append((origin, topic))

    def take_ready(self) -> list[tuple[int, wire.ForwardSet]]:
        ready, self.ready = self.ready, []
        return ready

    def take_asks(self) -> list[RepairAsk]:
        asks, self.asks = self.asks, []
        return asks

    def take_starts(self) -> list[tuple[int, str]]:
        starts, self.starts = self.starts, []
        return starts

    def open_gaps(self) -> int:
        return sum(1 for s in self.streams.values() if s.gap is not None)

    def state_size(self) -> tuple[int, int]:
        """(streams, held sets): what this hub keeps, by active stream, never by message."""
        return len(self.streams), sum(len(s.held) for s in self.streams.values())
