"""A simulated cluster: hubs running the real overlay core over a simulated network.

Discrete events on one simulated clock.  Each hub is a :class:`~hub.core.overlay.core.Overlay`
with a :class:`SimStore` standing in for its data dir (it survives a crash, as the
logs do).  Links carry the very bytes the core writes, in order, after the pair's
latency (10-80 ms one way by default, fixed by the seed: latency.py); a link that
breaks or a hub that crashes loses what was in flight.  Dials take a round trip plus a
set-up time and fail when the far hub is down, full, or cut off from this one.  Everything
random comes from one seeded generator: the same seed gives the same run.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import wire
from wire.frames import FRAME_TYPES

from ...core.overlay.config import OverlayConfig
from ...core.overlay.core import Overlay
from .events import EventLoop, SimClock
from .latency import fraction
from .store import Delivery, SimStore

_U16 = struct.Struct(">H")


@dataclass
class SimHub:
    hub_id: int
    store: SimStore
    overlay: Overlay | None = None
    up: bool = False
    next_seq: int = 1
    patterns: set[str] = field(default_factory=set)
    tick_at: float | None = None
    boots: int = 0


class World:
    """Hubs, links and faults, driven by one event loop."""

    def __init__(
        self,
        *,
        hubs: int,
        seed: int,
        config: OverlayConfig,
        latency: tuple[float, float] = (0.010, 0.080),
        latency_model: str = "pairs",
        setup: float = 0.05,
        detect_crash: float = 0.5,
        detect_cut: float = 3.0,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = SimClock()
        self.loop = EventLoop(self.clock)
        self.config = config
        self.latency_range, self.latency_model = latency, latency_model
        self.setup = setup
        self.detect_crash = detect_crash
        self.detect_cut = detect_cut
        self.deliveries: list[Delivery] = []
        ids = self.rng.sample(range(1, 2**63), hubs)
        self.hubs: dict[int, SimHub] = {h: SimHub(h, SimStore(h, self.deliveries.append, self.clock)) for h in ids}
        self.order = ids
        #: (a, b) with a < b -> link epoch (a link that breaks loses its in-flight frames)
        self.links: dict[tuple[int, int], int] = {}
        self._epochs = itertools.count(1)
        #: (a, b) -> the time until which the pair cannot talk (a cut)
        self.cuts: dict[tuple[int, int], float] = {}
        self._arrival: dict[tuple[int, int], float] = {}
        self._latency: dict[tuple[int, int], float] = {}
        #: functions shown every frame that arrives (a measurement looking at some frames)
        self.taps: list[Callable[[bytes], None]] = []
        #: functions that drop the frames of a link while they say so (src, dst, epoch): holes.py
        self.drops: list[Callable[[int, int, int], bool]] = []
        #: (closer, other) -> epoch of a link being closed: frames the closer sent still arrive
        self._closing: dict[tuple[int, int], int] = {}
        self.payload_copies = 0
        self.frames_sent = 0
        #: links that came up, and that ended (closed, broken, or with a crashed hub)
        self.links_made = 0
        self.shortcuts_made = 0  # of which shortcuts (hub/core/overlay/shortcuts.py)
        self.links_ended = 0
        #: advertisement body -> decoded: the real hubs each decode every advertisement that is
        #: news to them; here they share one decode (LinkState is immutable), which at 300 hubs
        #: was a tenth of the simulator's time
        self._link_states: dict[bytes, wire.Frame] = {}
        #: counters of overlays that crashed (a restarted hub starts its own from zero)
        self.retired: Counter[str] = Counter()

    # -- helpers ---------------------------------------------------------------------------

    def latency(self, a: int, b: int) -> float:
        pair = self.pair(a, b)
        latency = self._latency.get(pair)
        if latency is None:
            lo, hi = self.latency_range
            latency = self._latency[pair] = lo + (hi - lo) * fraction(self.latency_model, self.seed, a, b)
        return latency

    @staticmethod
    def pair(a: int, b: int) -> tuple[int, int]:
        return (a, b) if a < b else (b, a)

    def cut_between(self, a: int, b: int) -> bool:
        return self.cuts.get(self.pair(a, b), -1.0) > self.clock.now

    # -- hubs --------------------------------------------------------------------------------

    def start(self, hub_id: int, bootstrap: list[int]) -> None:
        hub = self.hubs[hub_id]
        hub.overlay = Overlay(self.config, hub_id=hub_id, peer_key=f"sim-{hub_id:016x}", addrs=(f"sim://{hub_id:016x}",),
                              clock=self.clock, store=hub.store, since=hub.store.since, joins=hub.store.joins,
                              seed=self.seed ^ hub_id ^ hub.boots)  # fmt: skip
        hub.up = True
        hub.boots += 1
        hub.tick_at = None
        if hub.patterns:
            hub.overlay.set_interest(sorted(hub.patterns), ())
        self._seed(hub_id, hub.boots, tuple(bootstrap))
        self.pump(hub_id)

    def _seed(self, hub_id: int, boot: int, bootstrap: tuple[int, ...]) -> None:
        """While this hub has no link, dial the configured hubs every second (``seed_static``)."""
        hub = self.hubs[hub_id]
        if not bootstrap or not hub.up or hub.boots != boot or hub.overlay is None:
            return
        if not hub.overlay.policy.links:
            for other in bootstrap:
                self._dial(hub_id, other)
        self.loop.at(self.clock.now + 1.0, self._seed, hub_id, boot, bootstrap)

    def crash(self, hub_id: int) -> None:
        hub = self.hubs[hub_id]
        if not hub.up:
            return
        hub.up = False
        if hub.overlay is not None:
            self.retired.update(_counters_of(hub.overlay))
        hub.overlay = None
        for pair in [p for p in self.links if hub_id in p]:
            del self.links[pair]
            self.links_ended += 1
            other = pair[0] if pair[1] == hub_id else pair[1]
            self.loop.at(self.clock.now + self.detect_crash, self._link_lost, other, hub_id)

    def cut(self, a: int, b: int, duration: float) -> None:
        """The network between ``a`` and ``b`` fails: their link (if any) breaks, dials fail."""
        pair = self.pair(a, b)
        self.cuts[pair] = self.clock.now + duration
        if self.links.pop(pair, None) is not None:
            self.links_ended += 1
            self.loop.at(self.clock.now + self.detect_cut, self._link_lost, a, b)
            self.loop.at(self.clock.now + self.detect_cut, self._link_lost, b, a)

    def _link_lost(self, hub_id: int, other: int) -> None:
        hub = self.hubs[hub_id]
        if hub.up and hub.overlay is not None and self.pair(hub_id, other) not in self.links:
            hub.overlay.link_down(other)
            self.pump(hub_id)

    def subscribe(self, hub_id: int, pattern: str) -> None:
        hub = self.hubs[hub_id]
        hub.patterns.add(pattern)
        if hub.up and hub.overlay is not None:
            hub.overlay.set_interest([pattern], ())
            self.pump(hub_id)

    def unsubscribe(self, hub_id: int, pattern: str) -> None:
        hub = self.hubs[hub_id]
        hub.patterns.discard(pattern)
        if hub.up and hub.overlay is not None:
            hub.overlay.set_interest((), [pattern])
            self.pump(hub_id)

    def publish(self, hub_id: int, topic: str, payload: bytes) -> int | None:
        """A publish accepted at ``hub_id`` (None: the hub is down)."""
        hub = self.hubs[hub_id]
        if not hub.up or hub.overlay is None:
            return None
        seq = hub.next_seq
        hub.next_seq += 1
        messages = wire.MessageSet.build((topic,), [(b"", payload)])
        ts = self.clock.wall_us()
        hub.store.append_own(seq, ts, messages)
        hub.overlay.publish(seq, ts, messages)
        self.pump(hub_id)
        return seq

    # -- the network -----------------------------------------------------------------------

    def _dial(self, src: int, dst: int, shortcut: bool = False) -> None:
        rtt = 2 * self.latency(src, dst)
        self.loop.at(self.clock.now + rtt + self.setup, self._dial_done, src, dst, shortcut)

    def _dial_done(self, src: int, dst: int, shortcut: bool = False) -> None:
        a, b = self.hubs[src], self.hubs[dst]
        if not a.up or a.overlay is None:
            return
        ok = (
            b.up
            and b.overlay is not None
            and not self.cut_between(src, dst)
            and self.pair(src, dst) not in self.links
            and b.overlay.may_accept(src, shortcut=shortcut) and a.overlay.may_accept(dst, shortcut=shortcut)
        )
        if not ok:
            a.overlay.dial_ended(dst)
            if not shortcut and b.up and b.overlay is not None and not self.cut_between(src, dst):
                a.overlay.referral(b.overlay.membership.states())  # a full hub says who else there is
            self.pump(src)
            return
        assert b.overlay is not None
        epoch = self.links[self.pair(src, dst)] = next(self._epochs)
        self.links_made += 1
        a.overlay.link_up(dst, shortcut=shortcut)
        b.overlay.link_up(src, shortcut=shortcut, inbound=True)
        self.shortcuts_made += shortcut
        self.pump(src)
        self.pump(dst)
        if not shortcut:  # a shortcut has no cost: it is in nobody's map
            # The dialler's first PING is answered a round trip later: the link's cost (mesh v3.1).
            self.loop.at(self.clock.now + 2 * self.latency(src, dst), self._timed, src, dst, epoch)

    def _timed(self, src: int, dst: int, epoch: int) -> None:
        hub = self.hubs[src]
        if self.links.get(self.pair(src, dst)) == epoch and hub.up and hub.overlay is not None:
            hub.overlay.link_timed(dst, 2 * self.latency(src, dst))
            self.pump(src)

    def pump(self, hub_id: int) -> None:
        """After an event at a hub: send what it queued, dial what it wants, schedule its timer."""
        hub = self.hubs[hub_id]
        overlay = hub.overlay
        if not hub.up or overlay is None:
            return
        # Timers first: what they queue (rechecks, retries, repairs) leaves in this same pump.
        deadline = overlay.tick()
        for state in overlay.dials():
            self._dial(hub_id, state.hub_id)
        for state in overlay.shortcut_dials():
            self._dial(hub_id, state.hub_id, shortcut=True)
        surplus = overlay.surplus_link()
        if surplus is not None:
            self.close(hub_id, surplus)
            deadline = overlay.tick()  # the link's end changed the graph: its settle time counts
        for dst, frames in overlay.take_outbox().items():
            epoch = self.links.get(self.pair(hub_id, dst))
            if epoch is None:
                continue
            self.frames_sent += len(frames)
            key = (hub_id, dst)
            arrive = max(self.clock.now + self.latency(hub_id, dst), self._arrival.get(key, 0.0))
            self._arrival[key] = arrive
            self.loop.at(arrive, self._arrive, hub_id, dst, epoch, frames)
        if deadline is not None and (hub.tick_at is None or deadline < hub.tick_at or hub.tick_at <= self.clock.now):
            hub.tick_at = deadline
            self.loop.at(deadline, self._tick, hub_id, deadline)

    def _tick(self, hub_id: int, when: float) -> None:
        hub = self.hubs[hub_id]
        if hub.tick_at != when:
            return
        hub.tick_at = None
        self.pump(hub_id)

    def close(self, src: int, dst: int) -> None:
        """``src`` closes its link to ``dst`` (pruning): what it sent still arrives, then ``dst`` sees the end."""
        pair = self.pair(src, dst)
        epoch = self.links.pop(pair, None)
        if epoch is None:
            return
        self.links_ended += 1
        self._closing[(src, dst)] = epoch
        overlay = self.hubs[src].overlay
        assert overlay is not None
        overlay.link_down(dst, pruned=True)
        end = max(self.clock.now + self.latency(src, dst), self._arrival.get((src, dst), 0.0))
        self.loop.at(end, self._closed, src, dst, epoch)

    def _closed(self, src: int, dst: int, epoch: int) -> None:
        if self._closing.get((src, dst)) == epoch:
            del self._closing[(src, dst)]
        self._link_lost(dst, src)

    def _arrive(self, src: int, dst: int, epoch: int, frames: list[bytes]) -> None:
        if self.links.get(self.pair(src, dst)) != epoch and self._closing.get((src, dst)) != epoch:
            return  # the link broke while these were in flight
        if any(drop(src, dst, epoch) for drop in self.drops):
            return
        hub = self.hubs[dst]
        overlay = hub.overlay
        if overlay is None:
            return
        acted = False
        for frame in frames:
            for tap in self.taps:
                tap(frame)
            opcode, _ = wire.HEADER.unpack_from(frame, 0)
            body = frame[wire.HEADER_SIZE :]
            if opcode == wire.Opcode.LINK_STATE:
                # Most of a flood is repeats: they change nothing, and cost no pump.
                acted = overlay.receive_link_state(src, body, self._decode_link_state) or acted
                continue
            acted = True
            if opcode == wire.Opcode.ROUTED_SETS or opcode == wire.Opcode.ROUTED_SETS_HEADERS:
                (ndest,) = _U16.unpack_from(body, 1)
                (nsets,) = _U16.unpack_from(body, 3 + 8 * ndest + 8)
                self.payload_copies += nsets
                overlay.receive_routed_sets(src, body, kind=FRAME_TYPES[wire.Opcode(opcode)])  # type: ignore[arg-type]
            else:
                overlay.receive(src, FRAME_TYPES[wire.Opcode(opcode)].decode_body(body))
        if acted:
            self.pump(dst)

    def _decode_link_state(self, body: bytes) -> wire.Frame:
        state = self._link_states.get(body)
        if state is None:
            if len(self._link_states) >= 1 << 16:
                self._link_states.clear()  # old advertisements are not news to anyone any more
            state = self._link_states[body] = wire.LinkState.decode_body(body)
        return state

    # -- what it looks like ----------------------------------------------------------------

    def up_hubs(self) -> list[SimHub]:
        return [h for h in self.hubs.values() if h.up and h.overlay is not None]

    def counters(self) -> dict[str, float]:
        """Frames sent per kind, ``bytes:<kind>``, ``dropped:<why>``, payload copies, over every hub."""
        total: Counter[str] = Counter(self.retired)
        for hub in self.up_hubs():
            if hub.overlay is not None:
                total.update(_counters_of(hub.overlay))
        total["payload_copies"] = self.payload_copies
        total["frames_sent"] = self.frames_sent
        return dict(total)

    def degrees(self) -> list[int]:
        return [len(h.overlay.links) for h in self.up_hubs() if h.overlay is not None]


def _counters_of(overlay: Overlay) -> Counter[str]:
    outbox = overlay.outbox
    out: Counter[str] = Counter(outbox.sent_frames)
    out.update({f"bytes:{k}": v for k, v in outbox.sent_bytes.items()})
    out.update({f"dropped:{k}": v for k, v in outbox.dropped.items()})
    counters = overlay.streams.counters
    out.update({f"streams:{k}": v for k, v in dataclasses.asdict(counters).items()})
    return out
