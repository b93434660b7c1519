"""The overlay's links over libp2p (mesh v3, ``--mesh-overlay``): dials, accepts, referrals, timer.

The decisions are the overlay's (``hub/core/overlay/``, driven by
``hub/core/mesh/overlay_driver.py``): which hubs to link to, which link to drop,
where each frame goes.  This class does what it says with the hub's libp2p host,
through the :class:`hub.mesh.mesh.Mesh` it belongs to (the same admission, stream
opening and sessions as v1/v2 links):

* it dials the hubs the overlay asks for, once each (the overlay retries by its own
  policy), and tells it when a dial failed;
* an inbound v3 stream becomes a link if the overlay has room; a full hub answers
  with its LINK_STATE database and closes the stream (a referral: the dialler tries
  the hubs named there instead);
* ``--bootstrap`` hubs and DHT finds are only seeds, dialled while this hub has no
  overlay link at all;
* one task pumps the overlay when its deadline comes, and at once when publishes wait
  (one pump per burst, so the sets of a turn leave as one ROUTED_SETS per next hop).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

import multiaddr
import trio
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

import wire

from ..core.clock import Clock
from ..core.events import ev
from ..core.mesh.config import MeshConfig
from ..core.mesh.core import MeshCore
from ..core.mesh.hub_id import hub_id_for
from ..core.mesh.link import PeerLink
from ..core.mesh.overlay_driver import OverlayDriver
from ..core.mesh.overlay_peer import OverlayPeer
from ..core.mesh.overlay_store import OverlayLogStore
from ..core.mesh.protocols import MeshVersion
from ..core.mesh.status import CloseReason
from ..core.mesh.switch import OverlaySwitch
from ..core.overlay.config import OverlayConfig
from ..core.overlay.core import Overlay
from .idle import IdleConnections

log = logging.getLogger("hub.mesh")

#: A dial (connect + stream negotiation) that takes longer is abandoned (the overlay tries again).
DIAL_TIMEOUT = 10.0
#: Seconds between looks at the v2 links of a switched hub (invite, retire: hub/core/mesh/switch.py).
TEND_INTERVAL = 1.0


class MeshShell(Protocol):
    """What the overlay's links use of the hub's mesh (``hub.mesh.mesh.Mesh``)."""

    core: MeshCore
    config: MeshConfig
    clock: Clock
    hub_id: int
    switch: OverlaySwitch
    _closing: bool
    _nursery: trio.Nursery | None

    @property
    def host(self) -> Any: ...

    @property
    def peer_id(self) -> ID: ...

    @property
    def listen_addrs(self) -> list[str]: ...

    def _link_for(self, peer_id: ID) -> PeerLink: ...

    async def _open_stream(self, link: PeerLink, *, shortcut: bool = False, invite: bool = False) -> tuple[
            Any, MeshVersion]: ...  # fmt: skip

    async def _admitted(self, stream: Any, version: MeshVersion, peer_id: ID, *, outbound: bool) -> bool: ...

    def _we_dial_first(self, peer_id: ID) -> bool: ...

    async def _run_session(self, link: PeerLink, stream: Any, version: MeshVersion, outbound: bool) -> None: ...


class OverlayLinks:
    def __init__(self, mesh: MeshShell, config: OverlayConfig, store: OverlayLogStore) -> None:
        self.mesh = mesh
        self.config = config
        self.store = store
        self.driver: OverlayDriver | None = None
        self._wake = trio.Event()
        self._sleeps_until = math.inf
        #: Publishes wait for a pump (see _timer).
        self._due = False
        #: Patterns wanted before the overlay runs (the hub attaches the mesh first).
        self._early_interest: set[str] = set()
        #: hub id -> its link, for the hubs that had a v2 session (see _v2_gives_way)
        self._v2_links: dict[int, PeerLink] = {}
        #: Connections no session uses are closed (hub/mesh/idle.py); None: --mesh-idle-close 0.
        self.idle = IdleConnections(mesh.config.idle_close) if mesh.config.idle_close > 0 else None

    # -- the hub's side ------------------------------------------------------------------

    def set_interest(self, added: list[str], removed: list[str]) -> None:
        if self.driver is None:
            self._early_interest.update(added)
            self._early_interest.difference_update(removed)
        else:
            self.driver.set_interest(added, removed)

    def publish(self, origin_seq: int, timestamp: int, message_set: wire.MessageSet) -> None:
        if self.driver is not None:
            self.driver.publish(origin_seq, timestamp, message_set)
            self._due = True
            self._wake.set()

    def status(self) -> dict[str, Any] | None:
        if self.driver is None:
            return None
        idle_closed = None if self.idle is None else self.idle.closed
        return {**self.driver.overlay.status(), "pruned_links": self.driver.pruned,
                "connections": self.mesh.host.get_network().get_total_connections(), "idle_closed": idle_closed}

    @property
    def peers(self) -> dict[int, OverlayPeer]:
        return {} if self.driver is None else self.driver.peers

    def running(self) -> Overlay | None:
        """The overlay's core once it runs (the metrics read its counters)."""
        return None if self.driver is None else self.driver.overlay

    # -- running -------------------------------------------------------------------------

    def switch(self) -> None:
        """Leave the v2 full mesh (hub/core/mesh/switch.py): start the overlay, dial v3 first from
        now on, seed it from the configured hubs, and tend the v2 links (invite, retire)."""
        mesh = self.mesh
        nursery = mesh._nursery
        if self.driver is not None or nursery is None or mesh._closing:
            return
        mesh.switch.switched = True
        self.start(nursery)
        v2 = [link for link in mesh.core.links.values() if link.live]
        log.info("mesh: this hub runs the overlay (mesh v3) from now on; %d v2 links%s", len(v2),
                 "" if mesh.switch.from_hubs == 1 else f" (switching at {mesh.switch.from_hubs} hubs)",
                 extra=ev("overlay_switched", x_v2_links=len(v2)))  # fmt: skip
        nursery.start_soon(self.seed_static)  # the v2 peers are invited (tend_v2)
        nursery.start_soon(self._tend_v2)

    async def _tend_v2(self) -> None:
        while True:
            self.tend_v2()
            await trio.sleep(TEND_INTERVAL)

    def tend_v2(self) -> None:
        """Invite each live v2 peer once per session (a v3-only dial), and close the v2 links of
        peers the overlay reaches (hub/core/mesh/switch.py)."""
        mesh, driver = self.mesh, self.driver
        if driver is None or mesh._closing or mesh._nursery is None:
            return
        live = {key: link for key, link in mesh.core.links.items() if link.live and link.on_v2}
        for key in mesh.switch.to_invite(live):
            link = live[key]
            if not link.dialing:
                mesh._nursery.start_soon(self._dial_once, link, hub_id_for(link.peer_bytes), False, True)
        hubs = {key: hub_id_for(link.peer_bytes) for key, link in live.items()}
        for key in mesh.switch.to_retire(hubs, driver.overlay.membership.is_reachable):
            protocol = live[key].protocol
            if protocol is not None:
                log.info("mesh peer %s: the overlay reaches it, its v2 link closes", key,
                         extra=ev("overlay_v2_retired", peer=key))
                protocol.close(CloseReason.MOVED)

    def session_started(self, link: PeerLink, *, was_v2: bool) -> None:
        """A session began: a v2 one may make this hub switch (or is invited); a v3 one that takes
        a v2 link's place takes over what that link still owed."""
        mesh = self.mesh
        if link.version is None or link.on_v2:
            self._v2_links[hub_id_for(link.peer_bytes)] = link
            v2_links = sum(1 for lk in mesh.core.links.values() if lk.live and lk.on_v2)
            if mesh.switch.due(v2_links):
                self.switch()
            else:
                self.tend_v2()
        elif was_v2:
            self.hand_over(link)

    def _v2_gives_way(self, hub: int) -> int | None:
        """The overlay carries sets between this hub and ``hub`` from now on: a live v2 link to it
        closes (not dialled again) and what its window owed is the overlay's (None: nothing)."""
        link = self._v2_links.get(hub)  # called per ROUTED_SETS frame: one lookup
        if link is None or not (link.live and link.on_v2):
            return None
        after = self.mesh.core.hand_over(link)
        log.info("mesh peer %s: the overlay carries its sets now, its v2 link closes (owing sets after %s)",
                 link.key, after, extra=ev("overlay_v2_moved", peer=link.key, x_after=after))  # fmt: skip
        assert link.protocol is not None  # live
        link.protocol.close(CloseReason.MOVED)
        return after

    def hand_over(self, link: PeerLink) -> None:
        """``link``'s v2 window and interest go; the overlay owes the peer what the window did."""
        after = self.mesh.core.hand_over(link)
        if after is not None and self.driver is not None:
            log.info("mesh peer %s: its v2 link owed sets after origin sequence %d: the overlay takes them over",
                     link.key, after, extra=ev("overlay_hand_over", peer=link.key, x_after=after))  # fmt: skip
            self.driver.overlay.hand_over(hub_id_for(link.peer_bytes), after)
            self.driver.pump()

    def start(self, nursery: trio.Nursery) -> None:
        """The host is listening: build the overlay and pump it from now on."""
        mesh = self.mesh
        own = hub_id_for(mesh.peer_id.to_bytes())
        if own != mesh.hub_id:
            raise ValueError(
                f"the overlay routes by the hub id a hub's key gives ({own:016x}); this hub has "
                f"{mesh.hub_id:016x} from an older data dir: start it without --mesh-overlay"
            )
        admission = mesh.core.admission
        overlay = Overlay(
            self.config, hub_id=mesh.hub_id, peer_key=str(mesh.peer_id), addrs=mesh.listen_addrs, clock=mesh.clock,
            store=self.store, since=self.store.load_since(), joins=self.store.load_joins(),
            # With --mesh-allow, hubs it does not name stay out of the map even when a third hub
            # that admits them carries their advertisements and frames (docs/security.md).
            admits=admission.may_dial if admission.rules.allowed_peers is not None else None,
        )  # fmt: skip
        overlay.v2_gives_way = self._v2_gives_way
        driver = self.driver = OverlayDriver(overlay, on_dial=self._dial)
        driver.on_deadline = self._deadline_moved
        patterns = sorted(mesh.core.local.patterns | self._early_interest)
        if patterns:
            driver.set_interest(patterns, ())
        nursery.start_soon(self._timer)
        if self.idle is not None:
            nursery.start_soon(self.idle.run, mesh.host, self._in_use, lambda: bool(driver.peers))

    def _in_use(self, peer: ID) -> bool:
        """A session with ``peer`` is live, being dialled or starting: its connection stays."""
        link = self.mesh.core.links.get(str(peer))
        return link is not None and (link.live or link.dialing or link.starting)

    def readmit(self) -> None:
        """The admission rules were reloaded (SIGHUP): hubs no longer allowed leave the map."""
        if self.driver is not None:
            self.driver.overlay.readmit()
            self.driver.pump()

    def _deadline_moved(self) -> None:
        driver = self.driver
        if driver is not None and driver.deadline is not None and driver.deadline < self._sleeps_until:
            self._wake.set()

    async def _timer(self) -> None:
        driver = self.driver
        assert driver is not None
        while True:
            # Publishes made while this task was pumping or yielding set _due: they must not
            # wait for the next deadline (a fresh Event would not remember their wake-up).
            if not self._due:
                self._wake = trio.Event()
                self._sleeps_until = math.inf if driver.deadline is None else driver.deadline
                with trio.move_on_at(self._sleeps_until):
                    await self._wake.wait()
            self._due = False
            self._sleeps_until = -math.inf  # awake: nothing needs to wake it
            driver.pump()
            await trio.lowlevel.checkpoint()

    # -- links ---------------------------------------------------------------------------

    def peer(self, link: PeerLink, version: MeshVersion, *, outbound: bool) -> OverlayPeer:
        assert self.driver is not None
        mesh = self.mesh
        return OverlayPeer(self.driver, link, version, outbound=outbound, clock=mesh.clock, config=mesh.config)

    def session_ended(self, protocol: object, link: PeerLink, *, outbound: bool, reason: CloseReason) -> bool:
        """A session ended; True if a v2 one may be dialled again (the overlay redials its own)."""
        driver = self.driver
        if isinstance(protocol, OverlayPeer):
            if outbound and not protocol.linked and driver is not None:
                driver.dial_failed(hub_id_for(link.peer_bytes))  # refused, referred, or cut short
            return False
        self.mesh.switch.v2_session_ended(link.key)
        if driver is None or link.live:
            return True  # not switched, or replaced (by an invite's v3 session: taken over at its start)
        if reason is CloseReason.MOVED or driver.overlay.membership.is_reachable(hub_id_for(link.peer_bytes)):
            self.hand_over(link)  # either end retired it: the overlay reaches the peer
            return False
        return True

    def invite_refused(self, peer_id: ID) -> None:
        """A v2 stream from ``peer_id`` was refused at ``--max-peers``.  If this hub switched and its
        overlay does not reach that hub (joining, or restarted into a switched cluster, still on
        v2: this hub may be its only way in), it is invited over the connection it came by: it
        switches, and the overlay takes its link in place of one it can spare (LinkPolicy.link_up).
        A v2-only hub fails the invite and stays out: the bound holds for it."""
        driver, mesh = self.driver, self.mesh
        hub = hub_id_for(peer_id.to_bytes())
        if driver is None or mesh._closing or mesh._nursery is None or driver.overlay.membership.is_reachable(hub):
            return
        link = mesh._link_for(peer_id)
        if not link.dialing and not link.live:
            mesh._nursery.start_soon(self._dial_once, link, hub, False, True)

    def room_for(self, peer_id: ID, *, shortcut: bool = False) -> bool:
        """May a v3 stream from ``peer_id`` become a link (or a shortcut)?  The overlay's bound
        decides: it may take one link past it to heal a split, and then closes one it can spare."""
        driver = self.driver
        if driver is None or self.mesh._closing or self.mesh._nursery is None:
            return False
        known = self.mesh.core.links.get(str(peer_id))
        if known is not None and known.live:
            return not shortcut  # one session per hub: a live one is replaced by a link only
        return driver.may_accept(hub_id_for(peer_id.to_bytes()), shortcut=shortcut)

    async def refuse(self, stream: Any, *, shortcut: bool) -> None:
        """No room: a link's stream is referred (:meth:`refer`), a shortcut's is just reset (the
        dialling hub keeps its routes through the overlay)."""
        if not shortcut:
            await self.refer(stream)
            return
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await stream.reset()

    async def refer(self, stream: Any) -> None:
        """A full hub answers a v3 stream with what it knows of the cluster, then closes it."""
        driver = self.driver
        self.mesh.core.refused_inbound += 1
        if driver is not None and not self.mesh._closing:
            frames = driver.overlay.membership.frames()
            with trio.move_on_after(self.mesh.config.hello_timeout):
                try:
                    await stream.write(b"".join(frames))
                    await stream.close()
                    return
                except Exception:  # the dialler went: nothing to refer it to
                    log.debug("referral write failed", exc_info=True, extra=ev("overlay_referral_failed"))
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await stream.reset()

    def _dial(self, state: wire.LinkState, shortcut: bool) -> None:
        """The overlay wants a link (or a shortcut) to the hub ``state`` advertises."""
        mesh = self.mesh
        if mesh._closing or mesh._nursery is None:
            return
        try:
            peer_id = ID.from_base58(state.peer_key)
            addrs = [info_from_p2p_addr(multiaddr.Multiaddr(a)).addrs[0] for a in state.addrs]
        except Exception as exc:  # an advertisement we cannot dial: tell the overlay at once
            log.debug("overlay dial to %016x: bad advertisement: %r", state.hub_id, exc,
                      extra=ev("overlay_bad_advertisement", reason=repr(exc)))
            if self.driver is not None:
                self.driver.dial_failed(state.hub_id)
            return
        link = mesh._link_for(peer_id)
        link.addrs = addrs
        if not link.live and not link.dialing:
            mesh._nursery.start_soon(self._dial_once, link, state.hub_id, shortcut)
        elif shortcut and self.driver is not None:
            self.driver.overlay.dial_ended(state.hub_id)  # a session to it exists or is on its way

    async def _dial_once(self, link: PeerLink, hub: int, shortcut: bool = False, invite: bool = False) -> None:
        """One dial of a v3 link (or shortcut); an invite is a v3-only dial of a live v2 peer."""
        mesh = self.mesh
        link.dialing = True
        try:
            with trio.fail_after(DIAL_TIMEOUT):
                stream, version = await mesh._open_stream(link, shortcut=shortcut, invite=invite)
            if not await mesh._admitted(stream, version, link.peer_id, outbound=True):
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await stream.reset()
                raise ConnectionRefusedError("not admitted")
        except Exception as exc:  # unreachable, refused, not admitted...
            log.debug("overlay dial %s failed: %r", link.short_id, exc,
                      extra=ev("mesh_dial_failed", peer=link.key, reason=repr(exc)))  # fmt: skip
            if self.driver is not None:
                self.driver.dial_failed(hub)
            return
        finally:
            link.dialing = False
        if link.live and link.version is not None and link.version.overlay and not mesh._we_dial_first(link.peer_id):
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await stream.reset()
            return
        assert mesh._nursery is not None
        mesh._nursery.start_soon(mesh._run_session, link, stream, version, True)

    def seed(self, info: PeerInfo) -> None:
        """A hub found by discovery or configured: a way in while this hub has no overlay link;
        after that the overlay finds the others from link state."""
        mesh = self.mesh
        if self.driver is None or self.driver.peers or mesh._closing or mesh._nursery is None:
            return
        if info.peer_id == mesh.peer_id or not mesh.core.admission.may_dial(str(info.peer_id)):
            return
        link = mesh._link_for(info.peer_id)
        if info.addrs:
            link.addrs = list(info.addrs)
        if not link.live and not link.dialing:
            mesh._nursery.start_soon(self._dial_once, link, hub_id_for(info.peer_id.to_bytes()))

    async def seed_static(self) -> None:
        """``--bootstrap`` hubs are tried while this hub has no overlay link (at start, after a split)."""
        infos = [info_from_p2p_addr(multiaddr.Multiaddr(a)) for a in self.mesh.config.bootstrap]
        while True:
            for info in infos:
                self.seed(info)
            await trio.sleep(max(self.mesh.config.reconnect_max, 1.0))
