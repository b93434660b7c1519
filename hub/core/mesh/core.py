"""The mesh's decisions, without libp2p: who wants what, who gets each forward, who may link.

:class:`MeshCore` keeps this hub's interest and every peer's, the links and their
protocol state (``peer.py``), inbound dedup (``inbound.py``), the known-peers record
(``known_peers.py``) and the replay decisions (``replay.py``).  The shell's
``hub.mesh.Mesh`` owns the libp2p host: it dials, accepts and runs sessions, and
asks this object what to do (accept this stream? redial? give up?) and tells it
what happened (a session started or ended).  The hub reaches it through
``announce``/``withdraw``/``forward``; forwards arrive through ``on_forward``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import wire

from ..events import ev
from .admission import AdmissionPolicy
from .config import MeshConfig
from .hub_id import hub_id_for
from .inbound import ForwardHandler, InboundForwards
from .interest import InterestTable, LocalInterest, valid_pattern
from .known_peers import KnownPeers
from .link import LinkSession, PeerLink
from .protocols import encode_forward_set, encode_v1_forwards
from .replay import Replay, ReplaySource
from .status import CloseReason
from .window import WindowEntry

if TYPE_CHECKING:
    from ..clock import Clock

log = logging.getLogger("hub.mesh")


class MeshCore:
    def __init__(
        self,
        config: MeshConfig,
        *,
        hub_id: int,
        clock: Clock,
        on_forward: ForwardHandler,
        resume_positions: Callable[[], Mapping[int, int]] | None = None,
        replay: ReplaySource | None = None,
    ) -> None:
        if not 0 < hub_id < 1 << 64:
            raise ValueError("hub_id must be a non-zero u64")
        self.config = config
        self.hub_id = hub_id
        self.clock = clock
        self.local = LocalInterest()
        self.interest: InterestTable[str] = InterestTable()
        self.inbound = InboundForwards(on_forward, self.local)
        self._resume_positions = resume_positions or dict
        self.replay = replay
        #: Peers linked before, and where this hub's origin stood when they first linked.
        self.known_peers = KnownPeers(config.data_dir)
        #: peer key (the peer id's text form) -> link
        self.links: dict[str, PeerLink] = {}
        #: Who may link (allow-list, cluster secret, v1), and who was refused.
        self.admission = AdmissionPolicy(config.admission)
        #: Inbound links refused because this hub already had ``max_peers`` links.
        self.refused_inbound = 0

    def load_positions(self) -> None:
        """Take the hub's stored positions (at start): resends after a restart are deduplicated too."""
        self.inbound.merge_positions(self._resume_positions())

    # -- the hub's interface -----------------------------------------------------------

    def announce(self, topics: Iterable[str]) -> list[str]:
        """Ask every peer for ``topics`` (names or patterns); returns the ones that were new."""
        patterns = list(topics)
        bad = [p for p in patterns if not valid_pattern(p)]
        if bad:
            raise ValueError(f"invalid topic or pattern: {bad!r}")
        added = self.local.add(patterns)
        if added:
            for link in self.links.values():
                if link.live and link.protocol is not None:
                    link.protocol.announce(added)
        return added

    def withdraw(self, topics: Iterable[str]) -> list[str]:
        """Tell every peer this hub no longer wants ``topics``; returns the ones that were announced."""
        removed = self.local.remove(topics)
        if removed:
            for link in self.links.values():
                if link.live and link.protocol is not None:
                    link.protocol.withdraw(removed)
        return removed

    def forward(self, origin_seq: int, timestamp: int, message_set: wire.MessageSet) -> int:
        """Queue one publish batch of this hub for every peer that wants one of its topics.

        ``origin_seq`` is the sequence of the set's first message (this hub's
        origin numbering, 1, 2, 3, ...), ``timestamp`` the acceptance time in
        µs.  Never blocks: the writers coalesce.  Returns how many peers it was
        queued for.
        """
        targets = self.interest.peers_for(message_set.topics)
        count = message_set.count
        entry: WindowEntry | None = None  # encoded once, shared by every v2 peer's window
        encoded_v1: bytes | None = None
        queued = 0
        for key, link in self.links.items():
            if link.version is not None and link.version.overlay:
                continue  # an overlay link: the overlay routes this set (overlay_driver.py)
            if key not in targets:
                if link.version is not None:  # a peer not yet spoken to announced nothing to skip
                    link.counters.messages_skipped_no_interest += count
                continue
            protocol = link.protocol
            if link.version is not None and link.version.sequenced:
                if entry is None:
                    encoded = encode_forward_set(origin_seq, timestamp, message_set)
                    entry = WindowEntry(first_seq=origin_seq, last_seq=origin_seq + count - 1, count=count,
                                        encoded=encoded, headers=message_set.headers)  # fmt: skip
                link.window.push(entry)
                if protocol is not None:
                    protocol.forwards_queued()
                queued += 1
            elif protocol is not None and protocol.alive:
                if encoded_v1 is None:
                    encoded_v1, _ = encode_v1_forwards(message_set)
                if protocol.send_v1(encoded_v1, count):
                    queued += 1
        return queued

    def backlog(self) -> int:
        """Largest number of forward sets queued or unacknowledged for any one peer.

        ``forward()`` never blocks; a hub that wants publisher backpressure instead of
        window evictions waits while this is high.
        """
        return max((len(link.window) for link in self.links.values()), default=0)

    def peers_status(self) -> list[dict[str, Any]]:
        return [link.status(self.interest.patterns_of(key)) for key, link in self.links.items()]

    # -- links ---------------------------------------------------------------------------

    def link_for(self, key: str, peer_bytes: bytes, peer_id: Any = None) -> PeerLink:
        link = self.links.get(key)
        if link is None:
            link = self.links[key] = PeerLink(key, peer_bytes, self.config, peer_id=peer_id)
        return link

    def linked_count(self) -> int:
        """Links with a session up or starting, inbound and outbound."""
        return sum(1 for link in self.links.values() if link.live or link.starting)

    def may_dial_new(self) -> bool:
        """Another peer found by discovery may be linked (``--max-peers`` bounds every link)."""
        return len(self.links) < self.config.max_peers

    def may_accept(self, key: str) -> bool:
        """An inbound stream from ``key``: a new link only while under ``--max-peers``."""
        known = self.links.get(key)
        if (known is None or not known.live) and self.linked_count() >= self.config.max_peers:
            self.refused_inbound += 1
            log.info("mesh peer %s refused: this hub has max_peers=%d links", key, self.config.max_peers,
                     extra=ev("mesh_link_refused", peer=key, reason="max_peers"))
            return False
        return True

    def readmit(self) -> int:
        """The admission rules were reloaded (SIGHUP): close every live link whose peer they no
        longer admit (its redials are judged by them too); how many were closed."""
        closed = 0
        for link in self.links.values():
            protocol = link.protocol
            why = self.admission.no_longer_admitted(link.key)
            if protocol is None or not protocol.alive or why is None:
                continue
            log.warning("mesh peer %s unlinked: %s (admission rules reloaded)", link.key, why,
                        extra=ev("mesh_link_unadmitted", peer=link.key, reason="not_admitted", x_detail=why))
            protocol.close(CloseReason.NOT_ADMITTED)
            self.admission.unlinked_by_reload += 1
            closed += 1
        return closed

    def session_started(self, link: PeerLink, protocol: LinkSession) -> None:
        """A new stream with ``link``'s peer: it replaces any older one."""
        link.starting = False
        old = link.protocol
        link.protocol = protocol
        link.version = protocol.version
        link.down_since = None
        if old is not None and old.alive:
            old.close(CloseReason.REPLACED)

    def hand_over(self, link: PeerLink) -> int | None:
        """``link``'s v2 session gives way to the overlay (hub/core/mesh/switch.py): its window
        and v2 interest go.  Returns the origin sequence after which the peer may lack sets the
        window held (the overlay's starts for it go no later), None if it has them all."""
        after = link.window.owed_after()
        link.window.clear()
        self.interest.drop_peer(link.key)
        # Not lingering, not dialled again as a v2 peer: the overlay reaches it (and seeds from
        # the configured hubs itself, OverlayLinks.seed_static).
        link.down_since = None
        link.static_addrs = []
        return after

    def session_ended(self, link: PeerLink, protocol: LinkSession, reason: CloseReason) -> bool:
        """``protocol``'s stream ended; True if the link should be dialed again."""
        link.last_close = reason
        if link.protocol is not protocol:
            return False  # replaced by a newer stream: nothing changes
        link.protocol = None
        link.down_since = self.clock.monotonic()
        # v1 has no resume: its interest goes at once.  v2 keeps it while the link heals so
        # forwards published meanwhile wait in the window (bounded) and go out after MESH_HELLO.
        if link.version is None or not link.version.sequenced or self.config.resume_linger <= 0:
            self.interest.drop_peer(link.key)
        return bool(link.addrs) and not link.dialing

    def give_up(self, link: PeerLink) -> bool:
        """The peer stayed unreachable: withdraw its interest and forget it (False: it is back)."""
        if link.live:
            return False
        log.info("mesh peer %s is gone: unreachable at %s, its interest withdrawn", link.key,
                 ", ".join(map(str, link.addrs or link.static_addrs)) or "no known address",
                 extra=ev("mesh_peer_given_up", peer=link.key, reason="unreachable"))  # fmt: skip
        self.interest.drop_peer(link.key)
        if self.links.get(link.key) is link:
            del self.links[link.key]
        return True

    def lingered(self) -> tuple[list[PeerLink], list[PeerLink]]:
        """v2 links down past ``resume_linger``: (to forget, to dial again) -- their interest is withdrawn."""
        now = self.clock.monotonic()
        forget: list[PeerLink] = []
        redial: list[PeerLink] = []
        for link in list(self.links.values()):
            if link.down_since is not None and now - link.down_since >= self.config.resume_linger:
                if not link.dialing and not link.static_addrs:
                    forget.append(link)
                else:
                    self.interest.drop_peer(link.key)
                    if not link.dialing:
                        redial.append(link)
        return forget, redial

    # -- what a session asks (ProtocolOwner) --------------------------------------------

    def hello_positions(self) -> dict[int, int]:
        self.inbound.merge_positions(self._resume_positions())
        return self.inbound.positions()

    def hello_refusal(self, link: PeerLink, hub_id: int) -> str | None:
        """Why a peer's MESH_HELLO must be refused (None: it may speak for ``hub_id``).

        A hub id derived from the peer's own key (Noise authenticated it) is proof enough.
        An older, random one is trusted on first contact and pinned to the peer then: a
        peer claiming a hub id pinned to another is refused, and so is one claiming ours.
        """
        if hub_id == self.hub_id:
            return f"it claims this hub's own hub id {hub_id:016x}"
        if hub_id == hub_id_for(link.peer_bytes):
            return None
        owner = self.known_peers.peer_with_hub_id(hub_id)
        if owner is not None and owner != link.key:
            return f"hub id {hub_id:016x} belongs to peer {owner}"
        return None

    def replay_after(self, link: PeerLink, hub_id: int, position: int) -> int | None:
        """Where a replay from the log starts for a peer whose MESH_HELLO gave ``position``.

        None: no replay (no logs here, or the peer never linked before -- a new hub gets live
        forwards, not this hub's history; it is recorded now).  A known peer gets everything
        after ``max(position, since)``: position 0 is then a peer that was interested but
        stored nothing of ours yet (it was paused or cut off while its forwards were lost),
        and ``since`` keeps a low position from reaching history older than the peer's link.
        """
        source = self.replay
        known = self.known_peers.get(link.key)
        if known is None:
            since = source.next_origin_seq() - 1 if source is not None else 0
            self.known_peers.add(link.key, since=since, hub_id=hub_id)
            log.info("mesh peer %s is new to this hub: it gets forwards after origin sequence %d, no history",
                     link.key, since, extra=ev("mesh_peer_new", peer=link.key, x_since=since))  # fmt: skip
            return None
        if known.hub_id != hub_id:
            # Its hub-id file was lost and a new id chosen (hello_refusal allowed it): pin the new one.
            self.known_peers.add(link.key, since=known.since, hub_id=hub_id)
        if source is None:
            return None
        return max(position, known.since)

    def open_replay(self, link: PeerLink, after: int, before: int | None) -> Replay | None:
        """This hub's sets in ``(after, before)`` the peer wants, from the logs (None: nothing to send).

        ``before`` None is everything published so far.
        """
        source = self.replay
        if source is None:
            return None
        if before is None:
            before = source.next_origin_seq()
        if before <= after + 1:
            return None
        key = link.key
        interest = self.interest
        counters = link.counters

        def wants(topic: str) -> bool:
            return interest.wants(key, (topic,))

        def on_hole(reason: str) -> None:
            counters.replay_holes += 1
            log.warning("replay to %s: part of the log is gone (%s); those messages are not resent",
                        link.short_id, reason, extra=ev("mesh_replay_hole", peer=link.key, reason=reason))

        counters.replays += 1
        log.info("mesh peer %s: replaying this hub's sets %d..%d from the log", link.short_id, after + 1, before - 1,
                 extra=ev("mesh_replay", peer=link.key, x_first=after + 1, x_last=before - 1))
        return Replay(source.own_sets(wants, after, before, on_hole))

    def peer_subscribed(self, link: PeerLink, topics: list[str]) -> None:
        self.interest.add(link.key, topics)

    def peer_unsubscribed(self, link: PeerLink, topics: list[str]) -> None:
        self.interest.remove(link.key, topics)
