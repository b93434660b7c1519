"""The hub's side of the mesh: interest from local subscriptions, forwarding, storing forwards.

* Interest: the routing table reports when a topic or pattern gets its first
  local subscriber (live, follower or group) and when it loses its last; the
  mesh announces and withdraws it to every peer (lazy push).
* Outbound: every local publish batch the hub stored is handed to
  :meth:`Mesh.forward` with its origin sequence and timestamp; the mesh sends
  it only to peers that announced matching interest.  Forwarded messages are
  never forwarded again: the mesh is full, every hub hears from the origin.
* Inbound: forwarded sets (already deduplicated by (origin, seq)) go through the
  same store-and-route path as a local publish, keeping origin, origin
  sequence and timestamp, so every hub's log holds each message once.
* Replay: with durable logs the mesh can read this hub's own publishes back
  (:meth:`MeshBridge.own_sets`) for a peer its in-memory window could not
  cover (``hub/mesh/replay.py``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import wire

from .mesh.config import MeshConfig
from .mesh.mesh import Mesh
from .mesh.protocols import encode_stored_set
from .mesh.window import WindowEntry
from .storage.batches import Hole, StoredBatch
from .storage.topic_log import TopicLog

if TYPE_CHECKING:
    from .server import HubServer

log = logging.getLogger("pub0sub.hub.meshlink")

#: Bytes asked of a topic log per read while replaying.
REPLAY_READ_BYTES = 256 << 10


class MeshBridge:
    def __init__(self, server: HubServer, config: MeshConfig, *, key_pair: Any = None) -> None:
        self.server = server
        self.mesh = Mesh(
            config,
            hub_id=server.hub_id,
            on_forward=self.on_forward,
            resume_positions=self.positions,
            replay=self if server.store is not None else None,
            key_pair=key_pair,
        )
        self.forwarded_messages_in = 0
        server.router.on_change = self._interest_changed
        # Subscriptions that exist before the mesh starts are announced as it starts.
        existing = server.router.patterns()
        if existing:
            self.mesh.announce(existing)

    def _interest_changed(self, pattern: str, present: bool) -> None:
        if present:
            self.mesh.announce([pattern])
        else:
            self.mesh.withdraw([pattern])

    def positions(self) -> dict[int, int]:
        """Last stored origin sequence per origin, from the topic logs (resume after a restart)."""
        store = self.server.store
        if store is None:
            return {}
        positions: dict[int, int] = {}
        for topic_log in store.logs.values():
            for origin, seq in topic_log.origins.items():
                if seq > positions.get(origin, 0):
                    positions[origin] = seq
        return positions

    # -- ReplaySource --------------------------------------------------------------

    def next_origin_seq(self) -> int:
        return self.server.upcoming_origin_seq

    def own_sets(
        self, wants: Callable[[str], bool], after: int, before: int, on_hole: Callable[[str], None]
    ) -> Iterator[WindowEntry]:
        """This hub's sets in ``(after, before)`` from the logs of the topics ``wants``, each once, in order."""
        store = self.server.store
        if store is None:
            return
        origin = self.server.hub_id
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
            yield WindowEntry(first_seq=seq, last_seq=seq + b.count - 1, count=b.count, encoded=encoded)

    def on_forward(self, origin: int, sets: list[wire.ForwardSet], peer: Any) -> int | None:
        """Store forwarded sets; the last origin sequence stored is acknowledged to the sender."""
        server = self.server
        with server.output:
            return self._store(server, origin, sets)

    def _store(self, server: HubServer, origin: int, sets: list[wire.ForwardSet]) -> int | None:
        match = server.router.match
        last: int | None = None
        for fset in sets:
            mset = fset.messages
            # Only topics someone here wants are stored (the set may name others).
            topics = tuple(t for t in mset.topics if match(t))
            if topics:
                try:
                    server.publisher.store_set(
                        topics, mset.count, mset.records, timestamp=fset.timestamp, origin=origin,
                        origin_seq=fset.origin_seq,
                    )
                except OSError as exc:
                    log.critical("cannot store forwarded messages: %s", exc)
                    if server.store is not None:
                        server.store.storage_error = exc
                    return last  # the sender keeps the rest and resends it
                self.forwarded_messages_in += mset.count
            last = fset.origin_seq + mset.count - 1
        return last

    def status(self) -> dict[str, Any]:
        mesh = self.mesh
        try:
            addrs = mesh.listen_addrs
            peer_id = str(mesh.peer_id)
        except Exception:  # the host is not up yet
            addrs, peer_id = [], ""
        return {
            "peer_id": peer_id,
            "listen_addrs": addrs,
            "cluster": mesh.config.cluster,
            "local_interest": sorted(mesh.local.patterns),
            "forwarded_messages_in": self.forwarded_messages_in,
            "backlog": mesh.backlog(),
            "max_peers": mesh.config.max_peers,
            "refused_inbound": mesh.refused_inbound,
            "peers": mesh.peers_status(),
        }


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
