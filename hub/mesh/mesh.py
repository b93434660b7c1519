"""The mesh: a hub's libp2p host, its peer links and lazy push.

The hub drives it through a narrow interface (see :class:`Mesh`): it announces
and withdraws interest as local subscriptions come and go, hands every
accepted publish to :meth:`Mesh.forward`, and stores what ``on_forward``
delivers.  Everything here runs in one trio nursery owned by :meth:`Mesh.run`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

import wire

from ..core.mesh.config import MeshConfig
from ..core.mesh.inbound import ForwardHandler, InboundForwards
from ..core.mesh.interest import InterestTable, LocalInterest, valid_pattern
from ..core.mesh.known_peers import KnownPeers
from ..core.mesh.protocols import MeshVersion, encode_forward_set, encode_v1_forwards
from ..core.mesh.replay import Replay, ReplaySource
from ..core.mesh.status import CloseReason
from ..core.mesh.window import WindowEntry
from .discovery import Discovery
from .host import make_host, quiet_libp2p_logs
from .identity import hub_id_for, load_or_create_identity
from .peers import PeerLink
from .session import PeerSession

log = logging.getLogger("hub.mesh")

#: A dial (connect + stream negotiation) that takes longer is abandoned and retried.
DIAL_TIMEOUT = 10.0


class Mesh:
    """A hub's place in the mesh.

    ``hub_id`` is this hub's origin id (u64, never 0) -- the one in WELCOME and
    MESH_HELLO.  ``on_forward(origin, sets, peer_id)`` stores forwarded sets and
    returns the last origin seq the hub holds (``None``: everything given); it
    may be a coroutine function.  ``resume_positions()`` gives the last stored
    seq per origin at start-up (from the hub's logs), so resends after a
    restart are deduplicated too.  ``replay`` reads this hub's own publishes
    back from its logs for a peer the window could not cover (``replay.py``);
    without it such forwards are counted as evicted, not resent.

    >>> async def main():                                        # doctest: +SKIP
    ...     mesh = Mesh(MeshConfig(), hub_id=7, on_forward=store)
    ...     async with trio.open_nursery() as nursery:
    ...         await nursery.start(mesh.run)
    ...         mesh.announce(["orders.*"])
    ...         mesh.forward(1, now_us, wire.MessageSet.build(["orders.eu"], [(b"", b"hi")]))
    """

    def __init__(
        self,
        config: MeshConfig,
        *,
        hub_id: int,
        on_forward: ForwardHandler,
        resume_positions: Callable[[], Mapping[int, int]] | None = None,
        replay: ReplaySource | None = None,
        key_pair: KeyPair | None = None,
    ) -> None:
        if not 0 < hub_id < 1 << 64:
            raise ValueError("hub_id must be a non-zero u64")
        self.config = config
        self.hub_id = hub_id
        self.local = LocalInterest()
        self.interest: InterestTable[ID] = InterestTable()
        self.inbound = InboundForwards(on_forward, self.local)
        self._resume_positions = resume_positions or dict
        self.replay = replay
        #: Peers linked before, and where this hub's origin stood when they first linked.
        self.known_peers = KnownPeers(config.data_dir)
        self._key_pair = key_pair
        self.links: dict[ID, PeerLink] = {}
        self.discovery: Discovery | None = None
        self._host: IHost | None = None
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._changed = trio.Event()
        #: Inbound links refused because this hub already had ``max_peers`` links.
        self.refused_inbound = 0

    # -- running -------------------------------------------------------------------

    @property
    def host(self) -> IHost:
        if self._host is None:
            raise RuntimeError("the mesh is not running")
        return self._host

    @property
    def peer_id(self) -> ID:
        return self.host.get_id()

    @property
    def listen_addrs(self) -> list[str]:
        """Full multiaddrs, ``/ip4/.../tcp/PORT/p2p/<peer id>``: what ``--bootstrap`` takes."""
        return [str(a) for a in self.host.get_addrs()]

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, discover and link until cancelled; ``task_status.started(self)`` once listening."""
        quiet_libp2p_logs()
        key_pair = self._key_pair or load_or_create_identity(self.config.data_dir)
        host = make_host(key_pair, self.config.listen)
        self._host = host
        self.inbound.merge_positions(self._resume_positions())
        try:
            async with host.run(listen_addrs=[multiaddr.Multiaddr(self.config.listen)]), trio.open_nursery() as nursery:
                self._nursery = nursery
                for version in self.config.versions:
                    host.set_stream_handler(TProtocol(version.protocol_id), self._accept)
                if self.config.discovery:
                    self.discovery = Discovery(
                        host,
                        cluster=self.config.cluster,
                        bootstrap=self.config.bootstrap,
                        interval=self.config.discovery_interval,
                        on_found=self.add_peer,
                    )
                    await nursery.start(self.discovery.run)
                if not self.config.discovery:
                    # No DHT: the configured hubs are the whole cluster; link to them and keep at it.
                    for address in self.config.bootstrap:
                        info = info_from_p2p_addr(multiaddr.Multiaddr(address))
                        self._link_for(info.peer_id).static_addrs = list(info.addrs)
                        self.add_peer(info)
                nursery.start_soon(self._reap_lingering)
                log.info("mesh %s listening on %s", self.peer_id, ", ".join(self.listen_addrs))
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._closing = True
            for link in self.links.values():
                if link.session is not None:
                    link.session.close(CloseReason.SHUTDOWN)
            # Leaving host.run() does not close the listener: close the host explicitly.
            with trio.CancelScope(shield=True), trio.move_on_after(5.0):
                await host.close()

    # -- the hub's interface ---------------------------------------------------------

    def announce(self, topics: Iterable[str]) -> list[str]:
        """Ask every peer for ``topics`` (names or patterns); returns the ones that were new."""
        patterns = list(topics)
        bad = [p for p in patterns if not valid_pattern(p)]
        if bad:
            raise ValueError(f"invalid topic or pattern: {bad!r}")
        added = self.local.add(patterns)
        if added:
            for link in self.links.values():
                if link.live and link.session is not None:
                    link.session.announce(added)
        return added

    def withdraw(self, topics: Iterable[str]) -> list[str]:
        """Tell every peer this hub no longer wants ``topics``; returns the ones that were announced."""
        removed = self.local.remove(topics)
        if removed:
            for link in self.links.values():
                if link.live and link.session is not None:
                    link.session.withdraw(removed)
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
        encoded_v2: bytes | None = None
        encoded_v1: bytes | None = None
        queued = 0
        for peer_id, link in self.links.items():
            if peer_id not in targets:
                link.counters.messages_skipped_no_interest += count
                continue
            session = link.session
            if link.version is MeshVersion.V2:
                if encoded_v2 is None:
                    encoded_v2 = encode_forward_set(origin_seq, timestamp, message_set)
                last = origin_seq + count - 1
                link.window.push(WindowEntry(first_seq=origin_seq, last_seq=last, count=count, encoded=encoded_v2))
                if session is not None:
                    session.wake()
                queued += 1
            elif session is not None and session.alive:
                if encoded_v1 is None:
                    encoded_v1, _ = encode_v1_forwards(message_set)
                if session.send_v1(encoded_v1, count):
                    queued += 1
        return queued

    def peers_status(self) -> list[dict[str, Any]]:
        """One dict per known peer: ids, address, protocol, interest, window and counters."""
        out = []
        for pid, link in self.links.items():
            if not link.addrs and self._host is not None:
                # Inbound peers: identify has filled the peerstore with their listen addresses.
                try:
                    link.addrs = list(self._host.get_peerstore().addrs(pid))
                except Exception:  # unknown to the peerstore (yet): no address to show
                    link.addrs = []
            out.append(link.status(self.interest.patterns_of(pid)))
        return out

    def status(self) -> dict[str, Any]:
        """The ``mesh`` part of the hub's status document."""
        try:
            addrs = self.listen_addrs
            peer_id = str(self.peer_id)
        except Exception:  # the host is not up yet
            addrs, peer_id = [], ""
        return {
            "peer_id": peer_id,
            "listen_addrs": addrs,
            "cluster": self.config.cluster,
            "local_interest": sorted(self.local.patterns),
            "backlog": self.backlog(),
            "max_peers": self.config.max_peers,
            "refused_inbound": self.refused_inbound,
            "peers": self.peers_status(),
        }

    def backlog(self) -> int:
        """Largest number of forward sets queued or unacknowledged for any one peer.

        ``forward()`` never blocks; a hub that wants publisher backpressure instead of
        window evictions waits while this is high.
        """
        return max((len(link.window) for link in self.links.values()), default=0)

    def connected_peers(self) -> list[ID]:
        return [pid for pid, link in self.links.items() if link.live]

    async def wait_changed(self) -> None:
        """Return at the next session start/end (for tests and status watchers)."""
        await self._changed.wait()

    # -- peers -------------------------------------------------------------------------

    def add_peer(self, info: PeerInfo) -> None:
        """A hub found by discovery (or configured): link to it unless already linked."""
        if self._closing or self._nursery is None or info.peer_id == self.peer_id:
            return
        link = self.links.get(info.peer_id)
        if link is None:
            if len(self.links) >= self.config.max_peers:
                return
            link = self._link_for(info.peer_id)
        if info.addrs:
            link.addrs = list(info.addrs)
        if not link.live and not link.dialing:
            self._nursery.start_soon(self._dial, link)

    async def connect(self, address: str) -> None:
        """Link to the hub at ``address`` (a full multiaddr with ``/p2p/<id>``) and wait for the session."""
        info = info_from_p2p_addr(multiaddr.Multiaddr(address))
        self.add_peer(info)
        link = self.links[info.peer_id]
        while not link.live:
            await self.wait_changed()

    def _linked_count(self) -> int:
        """Links with a session up or starting, inbound and outbound."""
        return sum(1 for link in self.links.values() if link.live or link.starting)

    def _link_for(self, peer_id: ID) -> PeerLink:
        link = self.links.get(peer_id)
        if link is None:
            link = PeerLink(peer_id, self.config)
            self.links[peer_id] = link
        return link

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _we_dial_first(self, peer_id: ID) -> bool:
        """Tie-break when both hubs dial at once: the stream opened by the lower peer id wins."""
        return self.peer_id.to_bytes() < peer_id.to_bytes()

    async def _accept(self, stream: Any) -> None:
        """libp2p stream handler for every mesh protocol id this hub speaks."""
        peer_id = stream.muxed_conn.peer_id
        if self._closing or self._nursery is None:
            await stream.reset()
            return
        known = self.links.get(peer_id)
        if (known is None or not known.live) and self._linked_count() >= self.config.max_peers:
            # --max-peers bounds every link, inbound ones too: a hub at its bound takes no more.
            self.refused_inbound += 1
            log.info("mesh peer %s refused: this hub has max_peers=%d links", peer_id, self.config.max_peers)
            await stream.reset()
            return
        link = self._link_for(peer_id)
        if link.live and link.session is not None and link.session.outbound and self._we_dial_first(peer_id):
            # Our own stream to this peer is the canonical one; the peer will adopt it.
            await stream.reset()
            return
        version = MeshVersion.from_protocol(stream.get_protocol())
        link.starting = True
        self._nursery.start_soon(self._run_session, link, stream, version, False)

    async def _dial(self, link: PeerLink) -> None:
        link.dialing = True
        try:
            delay = self.config.reconnect_min
            give_up = trio.current_time() + max(self.config.resume_linger, self.config.reconnect_max)
            # A random pause makes two hubs that found each other at once rarely dial at once.
            await trio.sleep(random.uniform(0, self.config.reconnect_min))
            while not self._closing and not link.live:
                try:
                    with trio.fail_after(DIAL_TIMEOUT):
                        stream, version = await self._open_stream(link)
                except Exception as exc:  # unreachable, refused, negotiation failed...
                    log.debug("dial %s failed: %r", link.short_id, exc)
                    if trio.current_time() >= give_up and not link.static_addrs:
                        self._give_up(link)
                        return
                    await trio.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, self.config.reconnect_max)
                    continue
                if link.live and not self._we_dial_first(link.peer_id):
                    # The peer's stream arrived meanwhile and wins the tie-break.
                    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                        await stream.reset()
                    return
                assert self._nursery is not None
                self._nursery.start_soon(self._run_session, link, stream, version, True)
                return
        finally:
            link.dialing = False

    async def _open_stream(self, link: PeerLink) -> tuple[Any, MeshVersion]:
        host = self.host
        # A failed dial blocks the peer for 60 s in py-libp2p's negative cache; a restarted
        # hub must be reachable again at once.
        unblock = getattr(host.get_network(), "unblock_peer", None)
        if unblock is not None:
            unblock(link.peer_id)
        if link.static_addrs:
            # Only the configured addresses: identify may have taught the peerstore others
            # (the peer's direct address), which would bypass a proxy in between.
            host.get_peerstore().clear_addrs(link.peer_id)
            await host.connect(PeerInfo(link.peer_id, link.static_addrs))
        else:
            await host.connect(PeerInfo(link.peer_id, link.addrs))
        stream = await host.new_stream(link.peer_id, [TProtocol(v.protocol_id) for v in self.config.versions])
        return stream, MeshVersion.from_protocol(str(stream.get_protocol()))

    async def _run_session(self, link: PeerLink, stream: Any, version: MeshVersion, outbound: bool) -> None:
        session = PeerSession(self, link, stream, version, outbound=outbound)
        link.starting = False
        old = link.session
        link.session = session
        link.version = version
        link.down_since = None
        if old is not None and old.alive:
            old.close(CloseReason.REPLACED)
        # INFO with the full peer id and the address: what tells an operator that --bootstrap or
        # discovery worked, and which hub went away.
        where = f"{'outbound link to' if outbound else 'inbound link from'} {_remote_address(stream)}"
        log.info("mesh peer %s linked: %s, protocol %s", link.peer_id, where, version.label)
        self._notify()
        reason = await session.run()
        if not self._closing and reason is not CloseReason.REPLACED:  # replaced: a newer link said "linked"
            log.info("mesh peer %s left: %s ended (%s)", link.peer_id, where, reason.value)
        link.last_close = reason
        if link.session is session:
            link.session = None
            link.down_since = trio.current_time()
            self._session_down(link, reason)
        self._notify()

    def _session_down(self, link: PeerLink, reason: CloseReason) -> None:
        if self._closing:
            return
        # v1 has no resume: its interest goes at once.  v2 keeps it while the link heals so
        # forwards published meanwhile wait in the window (bounded) and go out after MESH_HELLO.
        if link.version is not MeshVersion.V2 or self.config.resume_linger <= 0:
            self.interest.drop_peer(link.peer_id)
        if link.addrs and not link.dialing and self._nursery is not None:
            self._nursery.start_soon(self._dial, link)

    def _give_up(self, link: PeerLink) -> None:
        """The peer stayed unreachable: withdraw its interest and forget it."""
        if link.live:
            return
        log.info("mesh peer %s is gone: unreachable at %s, its interest withdrawn", link.peer_id,
                 ", ".join(map(str, link.addrs or link.static_addrs)) or "no known address")  # fmt: skip
        self.interest.drop_peer(link.peer_id)
        if self.links.get(link.peer_id) is link:
            del self.links[link.peer_id]
        self._notify()

    async def _reap_lingering(self) -> None:
        """Withdraw the interest of v2 peers that stayed down past ``resume_linger``."""
        while True:
            await trio.sleep(max(0.05, min(1.0, self.config.resume_linger / 4)))
            now = trio.current_time()
            for link in list(self.links.values()):
                if link.down_since is not None and now - link.down_since >= self.config.resume_linger:
                    if not link.dialing and not link.static_addrs:
                        self._give_up(link)
                    else:
                        self.interest.drop_peer(link.peer_id)
                        if not link.dialing and self._nursery is not None:
                            self._nursery.start_soon(self._dial, link)

    # -- SessionOwner --------------------------------------------------------------------

    def hello_positions(self) -> dict[int, int]:
        self.inbound.merge_positions(self._resume_positions())
        return self.inbound.positions()

    def hello_refusal(self, link: PeerLink, hub_id: int) -> str | None:
        """Why a peer's MESH_HELLO must be refused (None: it may speak for ``hub_id``).

        A hub id derived from the peer's own key (Noise authenticated it) is proof enough.
        An older, random one is trusted on first contact and pinned to the peer then: a
        peer claiming a hub id pinned to another is refused, and so is one claiming ours.
        """
        peer_key = str(link.peer_id)
        if hub_id == self.hub_id:
            return f"it claims this hub's own hub id {hub_id:016x}"
        if hub_id == hub_id_for(link.peer_id):
            return None
        owner = self.known_peers.peer_with_hub_id(hub_id)
        if owner is not None and owner != peer_key:
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
        peer_key = str(link.peer_id)
        known = self.known_peers.get(peer_key)
        if known is None:
            since = source.next_origin_seq() - 1 if source is not None else 0
            self.known_peers.add(peer_key, since=since, hub_id=hub_id)
            log.info("mesh peer %s is new to this hub: it gets forwards after origin sequence %d, no history",
                     link.peer_id, since)
            return None
        if known.hub_id != hub_id:
            # Its hub-id file was lost and a new id chosen (hello_refusal allowed it): pin the new one.
            self.known_peers.add(peer_key, since=known.since, hub_id=hub_id)
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
        peer = link.peer_id
        interest = self.interest
        counters = link.counters

        def wants(topic: str) -> bool:
            return interest.wants(peer, (topic,))

        def on_hole(reason: str) -> None:
            counters.replay_holes += 1
            log.warning("replay to %s: part of the log is gone (%s); those messages are not resent",
                        link.short_id, reason)

        counters.replays += 1
        log.info("mesh peer %s: replaying this hub's sets %d..%d from the log", link.short_id, after + 1, before - 1)
        return Replay(source.own_sets(wants, after, before, on_hole))

    def peer_subscribed(self, link: PeerLink, topics: list[str]) -> None:
        self.interest.add(link.peer_id, topics)

    def peer_unsubscribed(self, link: PeerLink, topics: list[str]) -> None:
        self.interest.remove(link.peer_id, topics)


def _remote_address(stream: Any) -> str:
    """``host:port`` at the other end of a libp2p stream (for logs), or ``?`` if libp2p cannot say."""
    try:
        remote = stream.get_remote_address()
    except Exception:  # a transport without the method: logging must not break a session
        remote = None
    return f"{remote[0]}:{remote[1]}" if remote else "?"
