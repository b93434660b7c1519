"""This hub's own sets on their way out: parked until their topics' interest is known, then
queued and sent as one ROUTED_SETS per run of sets with the same destinations, per next hop
(ROUTED_SETS_HEADERS for a run of sets with headers)."""

from __future__ import annotations

from collections.abc import Callable

import wire
from wire.frames.mesh_v3 import routed_set_first, routed_sets_frame, routed_sets_payload

from .config import OverlayConfig
from .origin import EncodedSet, OriginSide, encode_set
from .outbox import Outbox
from .rendezvous import Send
from .watching import Watching

#: A ROUTED_SETS frame carries sets up to about this many bytes (the writer coalesces frames).
FRAME_BYTES = 256 << 10


class SetSender:
    def __init__(
        self,
        config: OverlayConfig,
        hub_id: int,
        watching: Watching,
        origin: OriginSide,
        outbox: Outbox,
        route_control: Callable[[tuple[int, ...], wire.Frame], None],
        sent_to: Callable[[frozenset[int], float], None],
    ) -> None:
        """``sent_to(dests, now)``: told where each live set goes (shortcuts.py counts it)."""
        self.config = config
        self.hub_id = hub_id
        self.watching = watching
        self.origin = origin
        self.outbox = outbox
        self.route_control = route_control
        self.sent_to = sent_to
        #: the last sequence this hub published
        self.last_seq = 0
        #: (destinations, encoded set), in publish order, until the next flush
        self.pending: list[tuple[frozenset[int], EncodedSet]] = []
        #: (time parked, topics, encoded set, its sequence) of publishes waiting for their watch's first answer
        self.parked: list[tuple[float, tuple[str, ...], EncodedSet, int]] = []
        self._parked_topics: set[str] = set()

    def publish(self, origin_seq: int, timestamp: int, messages: wire.MessageSet, now: float) -> int:
        """A set of this hub's, stored: queue it for every hub that wants one of its topics."""
        watching = self.watching
        for topic in messages.topics:
            sends: list[Send] = watching.ensure(topic, self.last_seq, now)
            for send in sends:
                self.route_control(*send)
        prevs = self.origin.stamp(origin_seq, timestamp, messages, now)
        self.last_seq = origin_seq + messages.count - 1
        topics = messages.topics
        encoded = encode_set(origin_seq, timestamp, messages, prevs)
        if not self._parked_topics.isdisjoint(topics) or not watching.answered(topics):
            # Nobody has said yet who wants these topics: wait for the answer (a round trip to
            # the rendezvous) rather than send to nobody and have every hub repair it later.
            self.parked.append((now, topics, encoded, origin_seq))
            self._parked_topics.update(topics)
            return 0
        dests = self.destinations(topics)
        if dests:
            self.pending.append((dests, encoded))
            self.sent_to(dests, now)
        return len(dests)

    @property
    def parked_topics(self) -> set[str]:
        return self._parked_topics

    def destinations(self, topics: tuple[str, ...]) -> frozenset[int]:
        watching = self.watching
        dests = watching.destinations(topics[0])
        for topic in topics[1:]:
            dests = dests | watching.destinations(topic)
        return dests

    def join_since(self) -> int:
        """Where a hub that joins now starts: after the last set sent (parked sets are not)."""
        if self.parked:
            return min(self.last_seq, self.parked[0][3] - 1)
        return self.last_seq

    def unpark(self, now: float) -> None:
        """Parked publishes whose watches are answered (or that waited long enough) go, in order."""
        parked, self.parked = self.parked, []
        self._parked_topics = set()
        park_max = self.config.park_max
        for item in parked:
            at, topics, encoded, _ = item
            # ``at + park_max``, the deadline tick() hands out, not ``now - at``: in floats the
            # two can disagree at the deadline itself, and the timer would fire forever.
            if self._parked_topics.isdisjoint(topics) and (at + park_max <= now or self.watching.answered(topics)):
                dests = self.destinations(topics)
                if dests:
                    self.pending.append((dests, encoded))
                    self.sent_to(dests, now)
            else:
                self.parked.append(item)
                self._parked_topics.update(topics)

    def send_now(self, dests: frozenset[int], encoded: list[EncodedSet]) -> None:
        """Sets (a repair's) for ``dests``, after whatever is queued."""
        self.pending.extend((dests, e) for e in encoded)
        self.flush()

    def flush(self) -> None:
        """Queued sets, one ROUTED_SETS per run of sets with the same hubs, per next hop, in order."""
        pending, self.pending = self.pending, []
        i = 0
        while i < len(pending):
            dests, (_, headered) = pending[i]
            run: list[bytes] = []
            size = 0
            previous = -1
            # A frame's sets follow each other by origin sequence (a receiver refuses the whole
            # frame otherwise, and with it the link): a repair's sets sent after newer live ones,
            # or a set unparked after a later one, start a frame of their own.  Sets never
            # overlap (each sequence belongs to one set), so comparing first sequences is enough.
            # Sets with headers and sets without go in frames of their own kinds.
            while i < len(pending) and pending[i][0] == dests and len(run) < 0xFFFF and size < FRAME_BYTES:
                encoded, its_headers = pending[i][1]
                first = routed_set_first(encoded)
                if first <= previous or its_headers != headered:
                    break
                previous = first
                run.append(encoded)
                size += len(encoded)
                i += 1
            payload = routed_sets_payload(self.hub_id, run)
            opcode = wire.Opcode.ROUTED_SETS_HEADERS if headered else wire.Opcode.ROUTED_SETS
            for hop, group in self.outbox.by_next_hop(dests, opcode.name).items():
                self.outbox.send(hop, opcode.name, routed_sets_frame(self.config.ttl, group, payload, opcode))
