"""The mesh over libp2p: a hub's host, its dials and accepts, its sessions.

The decisions are :class:`hub.core.mesh.core.MeshCore`'s (who wants what, who gets each forward,
whether a stream may become a link, when to give up on a peer); this class owns the libp2p host and
does what they say: it dials, accepts, runs a :class:`~hub.mesh.session.PeerSession` per link, and
runs the DHT discovery, all in one trio nursery owned by :meth:`Mesh.run`.  The hub drives it
through ``announce``/``withdraw``/``forward``; v3 links are the overlay's (``overlay_links.py``).
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

from ..core.clock import Clock
from ..core.events import ev
from ..core.mesh.config import MeshConfig
from ..core.mesh.core import MeshCore
from ..core.mesh.inbound import ForwardHandler
from ..core.mesh.interest import InterestTable, LocalInterest
from ..core.mesh.link import PeerLink
from ..core.mesh.overlay_peer import OverlayPeer
from ..core.mesh.overlay_store import OverlayLogStore
from ..core.mesh.peer import PeerProtocol
from ..core.mesh.protocols import MeshVersion
from ..core.mesh.replay import ReplaySource
from ..core.mesh.status import CloseReason
from ..core.mesh.switch import OverlaySwitch
from ..core.overlay.config import OverlayConfig
from ..shell.clock import TrioClock
from .admit import admit
from .discovery import Discovery
from .dump import open_dump
from .host import make_host, open_stream_to, quiet_libp2p_logs
from .identity import load_or_create_identity
from .overlay_links import OverlayLinks
from .session import PeerSession, SessionTicker, remote_address

log = logging.getLogger("hub.mesh")

#: A dial (connect + stream negotiation) that takes longer is abandoned and retried.
DIAL_TIMEOUT = 10.0


class Mesh:
    """A hub's place in the mesh.

    ``hub_id`` is this hub's origin id (u64, never 0) -- the one in WELCOME and MESH_HELLO.
    ``on_forward(origin, sets, peer_id)`` stores forwarded sets and returns the last origin seq
    the hub holds (``None``: everything given).  ``resume_positions()`` gives the last stored seq
    per origin at start-up (from the hub's logs), so resends after a restart are deduplicated
    too.  ``replay`` reads this hub's own publishes back from its logs for a peer the window could
    not cover (``hub/core/mesh/replay.py``); without it such forwards are counted as evicted, not
    resent.  Run it with ``await nursery.start(mesh.run)``.
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
        clock: Clock | None = None,
        overlay: OverlayConfig | None = None,
        overlay_store: OverlayLogStore | None = None,
    ) -> None:
        self.clock = clock or TrioClock()
        self.core = MeshCore(config, hub_id=hub_id, clock=self.clock, on_forward=on_forward,
                             resume_positions=resume_positions, replay=replay)  # fmt: skip
        self.config = config
        self.hub_id = hub_id
        self._key_pair = key_pair
        self.discovery: Discovery | None = None
        self._host: IHost | None = None
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._changed = trio.Event()
        self._ticker = SessionTicker()
        #: Mesh v3: the overlay and its links (hub/mesh/overlay_links.py), once switched to.
        self.overlay: OverlayLinks | None = None
        self.switch = OverlaySwitch(from_hubs=config.overlay_from if overlay else 0, max_peers=config.max_peers)
        if overlay is not None:
            assert overlay_store is not None, "the overlay needs a store"
            self.overlay = OverlayLinks(self, overlay, overlay_store)

    # -- what the hub (and status, and tests) see ------------------------------------------

    @property
    def local(self) -> LocalInterest:
        return self.core.local

    @property
    def interest(self) -> InterestTable[str]:
        """Each peer's interest, by peer key (the peer id's text form)."""
        return self.core.interest

    @property
    def links(self) -> dict[str, PeerLink]:
        return self.core.links

    def announce(self, topics: Iterable[str]) -> list[str]:
        added = self.core.announce(topics)
        if added and self.overlay is not None:
            self.overlay.set_interest(added, [])
        return added

    def withdraw(self, topics: Iterable[str]) -> list[str]:
        removed = self.core.withdraw(topics)
        if removed and self.overlay is not None:
            self.overlay.set_interest([], removed)
        return removed

    def forward(self, origin_seq: int, timestamp: int, message_set: wire.MessageSet) -> int:
        queued = self.core.forward(origin_seq, timestamp, message_set)
        if self.overlay is not None:
            self.overlay.publish(origin_seq, timestamp, message_set)
        return queued

    def backlog(self) -> int:
        return self.core.backlog()

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
        """What other hubs dial (``--bootstrap`` takes it): ``--mesh-announce``'s, else :attr:`bound_addrs`."""
        return [str(a) for a in self.host.get_addrs()]

    @property
    def bound_addrs(self) -> list[str]:
        """The addresses this hub listens on, with its ``/p2p/<peer id>``."""
        return [f"{a}/p2p/{self.peer_id}" for a in self.host.get_transport_addrs()]

    def peers_status(self) -> list[dict[str, Any]]:
        """One dict per known peer: ids, address, protocol, interest, window and counters."""
        for link in self.core.links.values():
            if not link.addrs and self._host is not None:
                # Inbound peers: identify has filled the peerstore with their listen addresses.
                try:
                    link.addrs = list(self._host.get_peerstore().addrs(link.peer_id))
                except Exception:  # unknown to the peerstore (yet): no address to show
                    link.addrs = []
        return self.core.peers_status()

    def status(self) -> dict[str, Any]:
        """The ``mesh`` part of the hub's status document."""
        try:
            addrs, peer_id = self.listen_addrs, str(self.peer_id)
        except Exception:  # the host is not up yet
            addrs, peer_id = [], ""
        return {
            "peer_id": peer_id, "listen_addrs": addrs,
            "overlay": None if self.overlay is None else self.overlay.status(),
            "overlay_from": self.switch.from_hubs, "cluster": self.config.cluster,
            "discovery": None if self.discovery is None else self.discovery.status(),
            "local_interest": sorted(self.core.local.patterns),
            "backlog": self.core.backlog(),
            "max_peers": self.config.max_peers, "refused_inbound": self.core.refused_inbound,
            "admission": self.core.admission.status(),
            "peers": self.peers_status(),
        }

    def connected_peers(self) -> list[str]:
        return [key for key, link in self.core.links.items() if link.live]

    async def wait_changed(self) -> None:
        """Return at the next session start/end (for tests and status watchers)."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- running -------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, discover and link until cancelled; ``task_status.started(self)`` once listening."""
        quiet_libp2p_logs()
        key_pair = self._key_pair or load_or_create_identity(self.config.data_dir)
        host = make_host(key_pair, self.config.listen, announce=self.config.announce)
        self._host = host
        self.core.load_positions()
        try:
            async with host.run(listen_addrs=[multiaddr.Multiaddr(self.config.listen)]), trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._ticker.run)
                # Every version gets a handler, v1 too when it is not allowed: a refused peer is
                # counted and logged, not left to a silent protocol negotiation failure.
                for version in self.config.versions:
                    host.set_stream_handler(TProtocol(version.protocol_id), self._accept)
                if self.overlay is not None and self.switch.from_hubs == 1:
                    self.overlay.switch()  # --mesh-overlay: the overlay from the start
                if self.config.discovery:
                    self.discovery = Discovery(
                        host, cluster=self.config.cluster, bootstrap=self.config.bootstrap, on_found=self._found,
                        interval=self.config.discovery_interval, max_interval=self.config.discovery_interval_max,
                        # On the overlay, hubs are found from link state: the DHT is only a way in.
                        linked=lambda: self.overlay is not None and bool(self.overlay.peers),
                    )
                    await nursery.start(self.discovery.run)
                if not self.switch.switched and not self.config.discovery:
                    # No DHT: the configured hubs are the whole cluster; link to them and keep at it.
                    for address in self.config.bootstrap:
                        info = info_from_p2p_addr(multiaddr.Multiaddr(address))
                        self._link_for(info.peer_id).static_addrs = list(info.addrs)
                        self.add_peer(info)
                nursery.start_soon(self._reap_lingering)
                log.info("mesh %s listening on %s, dialled at %s; admission: %s", self.peer_id,
                         ", ".join(self.bound_addrs), ", ".join(self.listen_addrs), self.config.admission.describe(),
                         extra=ev("mesh_listening", x_peer_id=str(self.peer_id), x_addresses=self.listen_addrs,
                                  x_admission=self.config.admission.describe()))  # fmt: skip
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._closing = True
            for link in self.core.links.values():
                if link.protocol is not None:
                    link.protocol.close(CloseReason.SHUTDOWN)
            # Leaving host.run() does not close the listener: close the host explicitly.
            with trio.CancelScope(shield=True), trio.move_on_after(5.0):
                await host.close()

    # -- peers -------------------------------------------------------------------------

    def _link_for(self, peer_id: ID) -> PeerLink:
        return self.core.link_for(str(peer_id), peer_id.to_bytes(), peer_id)

    def _found(self, info: PeerInfo) -> None:
        """A hub found by discovery: a v2 link, or a seed of the overlay once switched to it."""
        (self.overlay.seed if self.overlay is not None and self.switch.switched else self.add_peer)(info)

    def add_peer(self, info: PeerInfo) -> None:
        """A hub found by discovery (or configured): link to it unless already linked."""
        if self._closing or self._nursery is None or info.peer_id == self.peer_id:
            return
        if not self.core.admission.may_dial(str(info.peer_id)):
            log.debug("mesh peer %s found but not on --mesh-allow: not dialed", info.peer_id,
                      extra=ev("mesh_peer_not_allowed", peer=str(info.peer_id)))
            return
        link = self.core.links.get(str(info.peer_id))
        if link is None:
            if not self.core.may_dial_new():
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
        link = self.core.links[str(info.peer_id)]
        while not link.live:
            await self.wait_changed()

    def _we_dial_first(self, peer_id: ID) -> bool:
        """Tie-break when both hubs dial at once: the stream opened by the lower peer id wins."""
        return self.peer_id.to_bytes() < peer_id.to_bytes()

    async def _accept(self, stream: Any) -> None:
        """libp2p stream handler for every mesh protocol id this hub speaks."""
        peer_id = stream.muxed_conn.peer_id
        version = MeshVersion.from_protocol(stream.get_protocol())
        # Admission first: a refused peer takes no link, no max_peers slot, and no frame of it is read.
        if self._closing or not await self._admitted(stream, version, peer_id, outbound=False):
            await stream.reset()
            return
        if version.overlay:
            assert self.overlay is not None  # v3 is registered only with the overlay (hub/app.py)
            if not self.switch.switched:
                self.overlay.switch()  # a switched hub invites this one: the cluster is past its size
            if not self.overlay.room_for(peer_id, shortcut=version.shortcut):
                await self.overlay.refuse(stream, shortcut=version.shortcut)
                return
        elif self._closing or self._nursery is None or not self.core.may_accept(str(peer_id)):
            if self.overlay is not None:
                self.overlay.invite_refused(peer_id)  # a hub still on v2 may have no other way in
            await stream.reset()
            return
        link = self._link_for(peer_id)
        protocol = link.protocol
        if link.live and protocol is not None and protocol.outbound and self._we_dial_first(peer_id) \
                and protocol.version.overlay == version.overlay:  # a v3 stream replaces a v2 one (an invite)
            # Our own stream to this peer is the canonical one; the peer will adopt it.
            await stream.reset()
            return
        link.starting = True
        assert self._nursery is not None  # checked above (room_for for v3)
        self._nursery.start_soon(self._run_session, link, stream, version, False)

    async def _dial(self, link: PeerLink) -> None:
        link.dialing = True
        try:
            delay = self.config.reconnect_min
            give_up = trio.current_time() + max(self.config.resume_linger, self.config.reconnect_max)
            # A random pause makes two hubs that found each other at once rarely dial at once.
            await trio.sleep(random.uniform(0, self.config.reconnect_min))
            while not self._closing and not link.live and self.core.admission.may_dial(link.key):
                try:
                    with trio.fail_after(DIAL_TIMEOUT):
                        stream, version = await self._open_stream(link)
                    if not await self._admitted(stream, version, link.peer_id, outbound=True):
                        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                            await stream.reset()
                        # As a failed dial: retried with backoff (the secret may be fixed meanwhile).
                        raise ConnectionRefusedError("not admitted")  # counted and logged already
                except Exception as exc:  # unreachable, refused, negotiation failed, not admitted...
                    log.debug("dial %s failed: %r", link.short_id, exc,
                              extra=ev("mesh_dial_failed", peer=link.key, reason=repr(exc)))
                    if trio.current_time() >= give_up and not link.static_addrs:
                        if self.core.give_up(link):
                            self._notify()
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

    async def _open_stream(self, link: PeerLink, *, shortcut: bool = False, invite: bool = False) -> tuple[
            Any, MeshVersion]:  # fmt: skip
        """A stream to ``link``'s peer: the newest version both speak (no v3 before the switch, only v3 to invite)."""
        offered = [TProtocol(v.protocol_id) for v in self.core.admission.versions_to_offer(
            v for v in self.config.versions
            if v.shortcut == shortcut and (v.overlay or not invite) and (self.switch.switched or not v.overlay))]
        stream = await open_stream_to(self.host, link.peer_id, link.static_addrs or link.addrs,
                                      static=bool(link.static_addrs), protocols=offered)
        return stream, MeshVersion.from_protocol(str(stream.get_protocol()))

    async def _admitted(self, stream: Any, version: MeshVersion, peer_id: ID, *, outbound: bool) -> bool:
        """Run admission on a new stream (hub/core/mesh/admission.py); a refusal is counted and logged."""
        policy = self.core.admission
        refusal = await admit(policy, stream, version, outbound=outbound, own_id=self.peer_id, peer_id=peer_id,
                              timeout=self.config.hello_timeout)  # fmt: skip
        if refusal is None:
            return True
        policy.refuse(str(peer_id), remote_address(stream), refusal, outbound=outbound)
        return False

    async def _run_session(self, link: PeerLink, stream: Any, version: MeshVersion, outbound: bool) -> None:
        protocol: PeerProtocol | OverlayPeer
        if version.overlay:
            assert self.overlay is not None
            protocol = self.overlay.peer(link, version, outbound=outbound)
        else:
            protocol = PeerProtocol(self.core, link, version, outbound=outbound, clock=self.clock)
        dump = None if self.config.dump_dir is None else open_dump(self.config.dump_dir, link.key, link.short_id)
        session = PeerSession(protocol, stream, self._ticker, dump=dump)
        was_v2 = link.on_v2
        self.core.session_started(link, protocol)
        if self.overlay is not None:
            self.overlay.session_started(link, was_v2=was_v2)
        # INFO with the full peer id and the address: what tells an operator that --bootstrap or
        # discovery worked, and which hub went away.
        where = f"{'outbound link to' if outbound else 'inbound link from'} {remote_address(stream)}"
        log.info("mesh peer %s linked: %s, protocol %s", link.key, where, version.label,
                 extra=ev("mesh_link_up", peer=link.key, x_address=remote_address(stream), x_outbound=outbound))
        self._notify()
        try:
            reason = await session.run()
        finally:
            if dump is not None:
                dump.close()
        # Every link's end, with its reason (replaced: a newer link to the peer said "linked").
        log.info("mesh peer %s left: %s ended (%s)", link.key, where, reason.value,
                 extra=ev("mesh_link_down", peer=link.key, reason=reason.value))
        redial = self.core.session_ended(link, protocol, reason)
        if self.overlay is not None:
            # The overlay redials its links (or not) by its own policy, and v2 links it took over never.
            redial = self.overlay.session_ended(protocol, link, outbound=outbound, reason=reason) and redial
        if redial and not self._closing and self._nursery is not None:
            self._nursery.start_soon(self._dial, link)
        if self.discovery is not None:
            self.discovery.hurry()  # a hub that went may come back at another address: look again soon
        self._notify()

    async def _reap_lingering(self) -> None:
        """Withdraw the interest of v2 peers that stayed down past ``resume_linger``."""
        while True:
            await trio.sleep(max(0.05, min(1.0, self.config.resume_linger / 4)))
            forget, redial = self.core.lingered()
            for link in forget:
                if self.core.give_up(link):
                    self._notify()
            for link in redial:
                if self._nursery is not None and not self._closing:
                    self._nursery.start_soon(self._dial, link)
