"""One mesh v3 stream (``/pub0sub/mesh/3.1.0`` or ``3.0.0``), without I/O: greeting, heartbeats, and the
overlay's frames handed to the hub's overlay (``overlay_driver.py``).

A v3 link carries no interest and no per-link delivery state: interest, routes, dedup and
repair are the overlay's, end to end between hubs (``hub/core/overlay/``).  This class only
checks that the peer speaks for itself (its MESH_HELLO hub id is the one its peer id gives),
keeps the link alive, and moves frames: what arrives goes to the driver, what the overlay
queues for this neighbour leaves in chunks of ``write_chunk`` bytes.  It has the shape the
shell's :class:`hub.mesh.session.PeerSession` runs (the same readers and writers as v2).

A hub that is full (``--max-peers``) does not run this at all: it answers a v3 stream with its
LINK_STATE database and closes it (a referral, docs/protocol.md §7); the dialling side reads
those LINK_STATEs before any MESH_HELLO and hands them to the overlay as hubs to try instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import wire
from wire.frames.mesh_v3 import link_state_for_v30, routed_sets_for_v30

from ..events import ev
from .hub_id import hub_id_for
from .link import PeerLink, silence_reason
from .protocols import MeshVersion
from .status import CloseReason

if TYPE_CHECKING:
    from ..clock import Clock
    from .config import MeshConfig

log = logging.getLogger("hub.mesh")

PING_FRAME = wire.PING.encode()
PONG_FRAME = wire.PONG.encode()
#: Frames whose delay someone waits on: sets, and routed control frames (a REPAIR stuck in a
#: paused relay holds back every set after a gap).  Only these ask a quiet neighbour for a sign
#: of life (a probe).  Not LINK_STATE: probing with its floods doubled an idle 50-hub cluster's
#: frames and its CPU (0.89% -> 2.17% of a core per hub); a late advertisement delays nobody.
PROBED_OPCODES = frozenset({wire.Opcode.ROUTED_SETS, wire.Opcode.ROUTED_SETS_HEADERS, wire.Opcode.ROUTED})


def _nothing() -> None:
    pass


def _for_v30(frame: bytes) -> bytes:
    """``frame`` as a 3.0 peer reads it (most frames are the same in 3.0 and 3.1)."""
    if frame[0] == wire.Opcode.LINK_STATE:
        return link_state_for_v30(frame)
    if frame[0] == wire.Opcode.ROUTED_SETS_HEADERS:
        return routed_sets_for_v30(frame)
    return frame


class Neighbourhood(Protocol):
    """What a v3 link tells the hub's overlay (``overlay_driver.OverlayDriver``)."""

    hub_id: int

    def link_up(self, peer: OverlayPeer) -> bool: ...

    def link_down(self, peer: OverlayPeer) -> None: ...

    def referral(self, state: wire.LinkState) -> None: ...

    def link_timed(self, hub: int, round_trip: float) -> None: ...

    def link_suspected(self, hub: int, suspected: bool) -> None: ...

    def receive(self, hub: int, frame: wire.Frame) -> None: ...

    def pump(self) -> None: ...


class OverlayPeer:
    def __init__(
        self, driver: Neighbourhood, link: PeerLink, version: MeshVersion, *, outbound: bool, clock: Clock,
        config: MeshConfig,
    ) -> None:  # fmt: skip
        #: 3.0 or 3.1: a 3.0 peer cannot read LINK_STATE costs (see queue)
        self.version = version
        self.driver = driver
        self.link = link
        self.outbound = outbound
        self.clock = clock
        self.config = config
        self.counters = link.counters
        self.reason: CloseReason | None = None
        now = clock.monotonic()
        self.started_at = now
        self.last_received = now
        self._last_ping = now
        #: When a probe went to a peer that had been quiet while frames went to it (None: none out).
        self._probe_at: float | None = None
        #: The peer left a probe unanswered for ``suspect_after``: routed around until it answers.
        self.suspected = False
        self._hello_done = False
        #: The overlay knows this link (MESH_HELLO checked, ``driver.link_up`` called).
        self.linked = False
        self.remote_hub_id: int | None = None
        self._out: list[bytes] = []
        self.on_urgent: Callable[[], None] = _nothing
        self.on_forwards: Callable[[], None] = _nothing
        self.on_acks: Callable[[], None] = _nothing
        self.on_close: Callable[[], None] = _nothing
        #: Where the peer's connection comes from, for logs (set by the shell).
        self.remote_address = "address unknown"

    # -- lifecycle ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.reason is None

    def start(self) -> None:
        self.counters.sessions += 1
        self.queue([wire.MeshHello(hub_id=self.driver.hub_id).encode()])

    def close(self, reason: CloseReason) -> None:
        if self.reason is None:
            self.reason = reason
            self.link.last_close = reason
            self.link.session_closed(reason)
            self.driver.link_down(self)
        self.on_close()

    def refuse(self, reason: CloseReason, why: str) -> None:
        self.counters.refused += 1
        log.warning(
            "mesh peer %s (%s) refused: %s",
            self.link.key,
            self.remote_address,
            why,
            extra=ev("mesh_peer_refused", peer=self.link.key, reason=reason.value),
        )
        self.close(reason)

    # -- what the v1/v2 mesh asks of every link: nothing here (interest and data are the overlay's)

    def announce(self, patterns: list[str]) -> None:
        pass

    def withdraw(self, patterns: list[str]) -> None:
        pass

    def send_v1(self, frames: bytes, count: int) -> bool:
        return False

    def forwards_queued(self) -> None:
        pass

    # -- bytes out ---------------------------------------------------------------

    def queue(self, frames: list[bytes]) -> None:
        """The overlay's frames for this neighbour (and the greeting)."""
        self._send(frames)
        if any(frame[0] in PROBED_OPCODES for frame in frames):
            self._expect_answer()

    def _send(self, frames: list[bytes]) -> None:
        if self.version is MeshVersion.V3:  # a 3.0 peer reads no costs and no ROUTED_SETS_HEADERS
            frames = [_for_v30(f) for f in frames]
        if self.reason is None:
            self._out.extend(frames)
            self.counters.frames_sent += len(frames)
            self.on_urgent()

    def _expect_answer(self) -> None:
        """Sets or routed control frames went to the peer: if it has been quiet for
        ``suspect_after``, a ping asks it to answer; if a probe is out longer than that, the peer
        is suspected (a stalled hub keeps its connection, so only its silence tells, and
        heartbeats take seconds to call it dead).  A paused neighbour is suspected between
        ``suspect_after`` and twice that after it stopped; a link that carries sets one way is
        probed about once per ``suspect_after``."""
        after = self.config.suspect_after
        if not after or not self.linked or self.reason is not None:
            return
        now = self.clock.monotonic()
        if self._probe_at is not None:
            if not self.suspected and now - self._probe_at >= after:
                self._suspect(True)
        elif now - self.last_received >= after:
            self._probe_at = now
            self._ping()

    def _suspect(self, suspected: bool) -> None:
        self.suspected = suspected
        hub = self.remote_hub_id
        assert hub is not None
        if suspected:
            self.counters.suspected += 1
            log.info("mesh peer %s (%016x) answered nothing for %.2f s: routing around it while it can",
                     self.link.key, hub, self.config.suspect_after,
                     extra=ev("mesh_peer_suspected", peer=self.link.key))  # fmt: skip
        else:
            log.info("mesh peer %s (%016x) answered again", self.link.key, hub,
                     extra=ev("mesh_peer_answered", peer=self.link.key))  # fmt: skip
        self.driver.link_suspected(hub, suspected)

    def take_chunk(self) -> bytes | None:
        out = self._out
        if not out:
            return None
        limit = self.config.write_chunk
        size = 0
        n = 0
        for frame in out:
            if n and size + len(frame) > limit:
                break
            size += len(frame)
            n += 1
        chunk = b"".join(out[:n])
        del out[:n]
        return chunk

    def take_acks(self) -> None:
        pass

    # -- bytes in ----------------------------------------------------------------

    def receive(self, frames: list[wire.Frame]) -> None:
        self.last_received = self.clock.monotonic()
        self._probe_at = None  # any frame answers a probe
        if self.suspected:
            self._suspect(False)
        driver = self.driver
        for frame in frames:
            if not self.alive:
                return
            self.counters.frames_received += 1
            kind = type(frame)
            if not self._hello_done:
                if kind is wire.LinkState and self.outbound:
                    driver.referral(frame)  # type: ignore[arg-type]  # a full hub's answer
                    continue
                if kind is not wire.MeshHello:
                    self.link.misbehaved(CloseReason.PROTOCOL_ERROR, "sent %s first, not MESH_HELLO", frame.name)
                    self.close(CloseReason.PROTOCOL_ERROR)
                    return
                self._on_hello(frame)  # type: ignore[arg-type]
            elif kind is wire.Heartbeat:
                if frame.word == "ping":  # type: ignore[attr-defined]
                    self._send([PONG_FRAME])
                elif (round_trip := self.link.pong_received(self.clock.monotonic())) is not None and self.outbound:
                    # Only the dialling side times the link (costs.py); the other pings only to probe.
                    driver.link_timed(self.remote_hub_id, round_trip)  # type: ignore[arg-type]
            elif kind is wire.MeshHello:
                self.link.misbehaved(CloseReason.PROTOCOL_ERROR, "sent a second MESH_HELLO")
                self.close(CloseReason.PROTOCOL_ERROR)
                return
            else:
                assert self.remote_hub_id is not None
                driver.receive(self.remote_hub_id, frame)
        driver.pump()

    def _on_hello(self, frame: wire.MeshHello) -> None:
        # v3 routes by hub id across hops: only the id the peer's own key gives is accepted
        # (no pinning of older random ids as v2 does), so no hub can speak for another's origin.
        expected = hub_id_for(self.link.peer_bytes)
        if frame.hub_id != expected:
            why = f"its MESH_HELLO hub id {frame.hub_id:016x} is not its key's {expected:016x}"
            self.refuse(CloseReason.REFUSED, why)
            return
        self._hello_done = True
        self.remote_hub_id = frame.hub_id
        self.link.remote_hub_id = frame.hub_id
        self.linked = self.driver.link_up(self)
        if self.outbound and self.linked:
            self._ping()  # the link's cost at once (mesh v3.1), not a heartbeat interval later

    # -- time --------------------------------------------------------------------

    def tick(self) -> None:
        cfg = self.config
        now = self.clock.monotonic()
        silent = silence_reason(cfg, now, last_received=self.last_received, started_at=self.started_at,
                                greeted=self._hello_done)  # fmt: skip
        if silent is not None:
            self.close(silent)
            return
        probe, after = self._probe_at, cfg.suspect_after
        if probe is not None and not self.suspected and now - probe >= after:
            self._suspect(True)  # nothing sent since the probe: the tick tells
        # Only the dialling side pings: its pings keep the other side's view alive and the pongs
        # its own, at half the frames of both sides pinging (an idle hub's main cost is these).
        if self.outbound and now - self._last_ping >= cfg.heartbeat_interval:
            self._ping()

    def _ping(self) -> None:
        now = self._last_ping = self.clock.monotonic()
        self.link.ping_sent(now)
        self._send([PING_FRAME])

    def tick_interval(self) -> float:
        return max(0.01, self.config.heartbeat_interval / 2)
