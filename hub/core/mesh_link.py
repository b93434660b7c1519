"""The hub's side of the mesh, both ways, in one place.

* Out: the routing table tells :meth:`interest_changed` when a topic or pattern
  gets its first local subscriber (live, follower, group, or a durable's standing
  interest) and when it loses its last; every publish the hub stored goes
  through :meth:`forward` with its origin sequence and timestamp.  Both reach
  the mesh (a :class:`MeshPort`) once one is attached; before that there is
  nothing to tell, and :meth:`attach` announces what is wanted by then.
* In: :meth:`on_forward` stores the sets a peer forwarded (already deduplicated
  by origin and sequence) through the same store-and-route path as a local
  publish, keeping origin, sequence and timestamp, so every hub's log holds each
  message once; forwarded messages are never forwarded again (every hub hears
  from the origin itself).
* Replay: with durable logs, :meth:`own_sets` reads this hub's own publishes
  back for a peer the mesh's memory could not cover (``hub/core/mesh/replay.py``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import wire

from ..storage.batches import Hole, StoredBatch
from ..storage.topic_log import TopicLog
from .events import ev
from .flushing import OutputBatch
from .mesh.protocols import encode_stored_set
from .mesh.window import WindowEntry
from .origin import OriginSequence

if TYPE_CHECKING:
    from ..storage.store import LogStore
    from .routing import RoutingTable

log = logging.getLogger("pub0sub.hub.meshlink")

#: Bytes asked of a topic log per read while replaying.
REPLAY_READ_BYTES = 256 << 10


class MeshPort(Protocol):
    """What the hub asks of the mesh (``hub.mesh.Mesh``)."""

    def announce(self, topics: Iterable[str]) -> object: ...

    def withdraw(self, topics: Iterable[str]) -> object: ...

    def forward(self, origin_seq: int, timestamp: int, message_set: wire.MessageSet) -> int: ...


class SetStore(Protocol):
    """Where forwarded sets are stored and routed: the publish path (``hub.core.publishing``)."""

    def store_set(
        self, topics: tuple[str, ...], count: int, records: bytes, *, timestamp: int, origin: int, origin_seq: int,
        headers: bytes = b"",
    ) -> bool: ...


class MeshLink:
    def __init__(
        self,
        *,
        origin: OriginSequence,
        store: LogStore | None,
        router: RoutingTable[Any],
        output: OutputBatch,
    ) -> None:
        self.origin = origin
        self.store = store
        self.router = router
        self.output = output
        #: Set once the hub is assembled (the publisher stores forwarded sets).
        self.publisher: SetStore | None = None
        self.mesh: MeshPort | None = None
        self.forwarded_messages_in = 0
        #: (origin, topic) -> a position the overlay's store of that stream stopped at, past which
        #: it may lack sets (Streams.floors; set by the overlay's store): v2 resumes no later.
        self.resume_floors: Mapping[tuple[int, str], int] = {}

    def attach(self, mesh: MeshPort) -> None:
        """The mesh is up: from now on interest and publishes reach it; what is wanted already is announced."""
        self.mesh = mesh
        existing = self.router.patterns()
        if existing:
            mesh.announce(existing)

    # -- out --------------------------------------------------------------------------

    def interest_changed(self, pattern: str, present: bool) -> None:
        mesh = self.mesh
        if mesh is None:
            return
        if present:
            mesh.announce([pattern])
        else:
            mesh.withdraw([pattern])

    def forward(self, origin_seq: int, timestamp: int, message_set: wire.MessageSet) -> None:
        mesh = self.mesh
        if mesh is not None:
            mesh.forward(origin_seq, timestamp, message_set)

    # -- in ---------------------------------------------------------------------------

    def positions(self) -> dict[int, int]:
        """Last stored origin sequence per origin, from the topic logs (resume after a restart).

        A maximum over topics, so no later than an overlay stream's floor: on the overlay one
        topic's stream can stand behind a gap while another's is stored further on."""
        store = self.store
        if store is None:
            return {}
        positions: dict[int, int] = {}
        for topic_log in store.logs.values():
            for origin, seq in topic_log.origins.items():
                if seq > positions.get(origin, 0):
                    positions[origin] = seq
        for (origin, _topic), floor in self.resume_floors.items():
            positions[origin] = min(positions.get(origin, floor), floor)
        return positions

    def on_forward(self, origin: int, sets: list[wire.ForwardSet], peer: Any) -> int | None:
        """Store forwarded sets; the last origin sequence stored is acknowledged to the sender."""
        with self.output:
            return self._store(origin, sets)

    def _store(self, origin: int, sets: list[wire.ForwardSet]) -> int | None:
        publisher = self.publisher
        assert publisher is not None, "the hub attaches its publisher before the mesh runs"
        match = self.router.match
        last: int | None = None
        logs = self.store.logs if self.store is not None else {}
        for fset in sets:
            mset = fset.messages
            # Only topics someone here wants are stored (the set may name others), and not again
            # where it is (v2 resumed at an overlay floor: other topics were stored further on).
            seq = fset.origin_seq
            topics = tuple(t for t in mset.topics if match(t) and not (
                (lg := logs.get(t)) is not None and lg.origins.get(origin, 0) >= seq))
            if topics:
                try:
                    publisher.store_set(
                        topics, mset.count, mset.records, timestamp=fset.timestamp, origin=origin,
                        origin_seq=fset.origin_seq, headers=mset.headers,
                    )
                except OSError as exc:
                    log.critical("cannot store forwarded messages: %s", exc,
                                 extra=ev("storage_failed", reason="forwarded"))
                    if self.store is not None:
                        self.store.storage_error = exc
                    return last  # the sender keeps the rest and resends it
                self.forwarded_messages_in += mset.count
            last = fset.origin_seq + mset.count - 1
        return last

    # -- replay (ReplaySource) -------------------------------------------------------

    def next_origin_seq(self) -> int:
        return self.origin.upcoming

    def own_sets(
        self, wants: Callable[[str], bool], after: int, before: int, on_hole: Callable[[str], None]
    ) -> Iterator[WindowEntry]:
        """This hub's sets in ``(after, before)`` from the logs of the topics ``wants``, each once, in order."""
        store = self.store
        if store is None:
            return
        origin = self.origin.hub_id
        logs = [lg for topic, lg in list(store.logs.items()) if wants(topic)]
        streams = [_own_sets_in(lg, origin, after, before, on_hole) for lg in logs]
        # A set with several topics is in each of their logs under the same sequence: it goes
        # once, naming the topics it was found in.  That is not always its whole topic list: a
        # hub that crashed between a set's appends stored it in some topics only, and the
        # producer's retry stored the rest under a new sequence.
        for seq, copies in itertools.groupby(heapq.merge(*streams, key=_origin_seq), key=_origin_seq):
            group = list(copies)
            first = group[0]
            found = {c.batch.topic for c in group}
            topics = first.topics if len(found) == len(first.topics) else tuple(t for t in first.topics if t in found)
            b = first.batch
            encoded = encode_stored_set(seq, b.timestamp, topics, b.count, b.records)
            yield WindowEntry(first_seq=seq, last_seq=seq + b.count - 1, count=b.count, encoded=encoded,
                              headers=b.headers)  # fmt: skip


def _origin_seq(stored: StoredBatch) -> int:
    return stored.batch.origin_seq


def _own_sets_in(
    topic_log: TopicLog, origin: int, after: int, before: int, on_hole: Callable[[str], None]
) -> Iterator[StoredBatch]:
    """``origin``'s sets with a sequence in ``(after, before)`` in one topic log, in order."""
    offset = topic_log.offset_for_origin_seq(origin, after + 1)
    if offset is None:
        return
    # Appended from here on is at or after ``before`` (the replay's upper bound was read first).
    end = topic_log.next_offset
    check_cut = topic_log.origin_seq_maybe_removed(origin, after + 1)
    while offset < end:
        items = topic_log.read(offset, REPLAY_READ_BYTES)
        if not items:
            return
        for item in items:
            if isinstance(item, Hole):
                on_hole(f"{topic_log.topic} offsets {item.first}..{item.first + item.count - 1}: {item.reason}")
                offset = item.first + item.count
                continue
            b = item.batch
            offset = b.base_offset + b.count
            if b.origin != origin:
                continue
            last = b.origin_seq + b.count - 1
            if last <= after:
                continue
            if check_cut:
                check_cut = False
                if b.origin_seq > after + 1:
                    on_hole(f"{topic_log.topic}: retention removed batches; this hub's sets "
                            f"{after + 1}..{b.origin_seq - 1} may have been among them")
            if b.origin_seq >= before:
                return
            yield item
