"""Frames waiting for each neighbour, and what was sent, by kind (the overlay's only way out).

It also keeps, per neighbour, the routed frames (sets and routed control frames) sent to it in
the last ``resend_window`` seconds, up to ``resend_max_bytes``: when the neighbour is suspected
(it left a probe unanswered, routes.py), they go again, each split by the routes as they are
now, round it.  A link black-holed while both ends run swallows what is sent into it from the
moment it fails until the suspicion, 0.5-1 s later; without this, a destination found out by the
first set that came round (a gap), asked the origin (REPAIR), and when that REPAIR crossed the
same hole, waited for its own end to suspect it too (docs/scale.md).  A frame that did arrive
arrives twice; its destinations drop the copy (streams.py).  A relay that crashed takes with it
what it had not passed on yet, which, before, waited for the origins' HEADS (a second after the
graph is quiet again, after_changes.py) and the REPAIRs that followed.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

import wire
from wire.frames.mesh_v3 import read_route_head, routed_sets_frame

from .config import OverlayConfig
from .membership import Membership
from .routes import DETOUR_TTL
from .shortcuts import Shortcuts

if TYPE_CHECKING:
    from ..clock import Clock

#: First bytes of the frames kept for a resend: every routed frame, sets and control alike.
ROUTED_OPCODES = frozenset({wire.Opcode.ROUTED_SETS, wire.Opcode.ROUTED_SETS_HEADERS, wire.Opcode.ROUTED})


class Outbox:
    def __init__(self, membership: Membership, links: set[int], shortcuts: Shortcuts, clock: Clock,
                 config: OverlayConfig) -> None:  # fmt: skip
        self.membership = membership
        self.clock = clock
        self.resend_window = config.resend_window
        self.resend_max_bytes = config.resend_max_bytes
        #: neighbour -> (sent at, the neighbour the frame came from or None, frame), oldest first
        self._sent: dict[int, deque[tuple[float, int | None, bytes]]] = {}
        self._sent_bytes: Counter[int] = Counter()
        #: the live links (the link policy's set, shared): nothing queues for a hub not linked
        self.links = links
        #: live shortcuts (shortcuts.py, shared): frames for those hubs go straight to them
        self.shortcuts = shortcuts.live
        #: shortcuts a frame was queued for (shared: how shortcuts.py tells the idle ones)
        self.touched = shortcuts.touched
        #: frames for more hubs than this ignore shortcuts: a hub of a wide topic's tree is often
        #: a relay to others in the same frame, and would get a second copy on the tree's path
        self.fanout = shortcuts.config.shortcut_fanout
        self._frames: dict[int, list[bytes]] = {}
        #: routed frames queued again round a neighbour (send_round), by why: "suspect", "link_down"
        self.resent: Counter[str] = Counter()
        self.sent_frames: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()

    def send(self, hub: int, kind: str, frame: bytes, came_from: int | None = None) -> None:
        if hub not in self.links:
            if hub not in self.shortcuts:
                self.dropped["no_link"] += 1
                return
            self.touched.add(hub)
        self._frames.setdefault(hub, []).append(frame)
        self.sent_frames[kind] += 1
        self.sent_bytes[kind] += len(frame)
        if frame[0] in ROUTED_OPCODES and self.resend_window:
            self._keep(hub, came_from, frame)

    def _keep(self, hub: int, came_from: int | None, frame: bytes) -> None:
        now = self.clock.monotonic()
        kept = self._sent.get(hub)
        if kept is None:
            kept = self._sent[hub] = deque()
        kept.append((now, came_from, frame))
        size = self._sent_bytes[hub] + len(frame)
        oldest = now - self.resend_window
        while kept and (kept[0][0] < oldest or size > self.resend_max_bytes):
            size -= len(kept.popleft()[2])
        self._sent_bytes[hub] = size

    def send_round(self, hub: int, me: int, why: str, *, queued_only: bool = False) -> int:
        """``hub`` was just suspected, or its link went (``why``): the routed frames sent to it in
        the last ``resend_window`` go again, split by the routes as they are now, to the hubs they
        now reach round it (a relayed one never back where it came from:
        Membership.split_by_next_hop).  ``queued_only``: only those still queued for it (a link
        this hub closed: what it sent before went first).  Returns how many were looked at."""
        kept = self._sent.pop(hub, None)
        self._sent_bytes.pop(hub, None)
        if not kept:
            return 0
        if queued_only:
            queued = sum(1 for frame in self._frames.get(hub, ()) if frame[0] in ROUTED_OPCODES)
            newest = list(kept)[max(0, len(kept) - queued) :] if queued else []  # kept in the order queued
            again = [(came_from, frame) for _, came_from, frame in newest]
        else:
            oldest = self.clock.monotonic() - self.resend_window
            again = [(came_from, frame) for at, came_from, frame in kept if at >= oldest]
        for came_from, frame in again:
            op = wire.Opcode(frame[0])
            ttl, dests, at = read_route_head(frame[wire.HEADER_SIZE:], minimum_rest=0)
            rest = frame[wire.HEADER_SIZE + at :]
            kind = wire.Opcode(rest[8]).name if op is wire.Opcode.ROUTED else op.name  # the inner frame's, after src
            self.resent[why] += self.relay(me, ttl + 1, dests, kind, partial(_framed, op, rest),
                                           came_from=came_from, not_to=hub)  # fmt: skip
        return len(again)

    def link_ended(self, hub: int, me: int, *, pruned: bool) -> None:
        """The link to ``hub`` ended (before this hub restates its links): what was sent into it
        goes round it as round a suspect, by loop-free alternates, since the other hubs' routes
        cross the link until this hub's advertisement reaches them (a route that left it at once
        would send frames to neighbours that hand them back until the hop limit); then what was
        queued or kept for it goes.  The parts for ``hub`` itself go round with DETOUR_TTL hops:
        after a cut they reach it; after a crash they end at the limit (``dropped.ttl``)."""
        if self._sent.get(hub):  # else no routes to compute twice
            with self.membership.routing_round(hub):
                self.send_round(hub, me, "link_down", queued_only=pruned)
        self.forget(hub)

    def by_next_hop(self, dests: Iterable[int], kind: str, *, relayed_from: int | None = None) -> dict[int, list[int]]:
        """``dests`` grouped by the neighbour each is reached through; the unreachable counted.
        ``relayed_from``: a frame passed on (see Membership.split_by_next_hop)."""
        dests = list(dests)
        shortcuts = self.shortcuts
        direct: list[int] = []
        if shortcuts and len(dests) <= self.fanout:
            # Not to a suspect (routes.py): what its shortcut swallows would wait for the heartbeat
            # bound.  Its sets go by the map, relayed ones too (without a detour: no loop).
            direct = [d for d in dests if d in shortcuts and d not in self.membership.suspected]
            if direct:
                dests = [d for d in dests if d not in direct]
        groups = self.membership.split_by_next_hop(dests, relayed_from=relayed_from)
        unroutable = len(dests) - sum(len(g) for g in groups.values())
        if unroutable:
            self.dropped["unroutable_" + kind] += unroutable
        for hub in direct:
            groups[hub] = [hub]  # a shortcut's far end is never a next hop of the map's (not linked)
        return groups

    def relay(
        self, me: int, ttl: int, dests: tuple[int, ...], kind: str, make: Callable[[int, list[int]], bytes], *,
        came_from: int | None, not_to: int | None = None,
    ) -> int:  # fmt: skip
        """A routed frame from neighbour ``came_from`` (None: one of this hub's own, sent again)
        passing through hub ``me``: ``make(ttl, dests)`` for each next hop of the others.  The
        part for a suspect that goes round the link to it has at most DETOUR_TTL hops left:
        neighbours of a paused hub all suspect it, and three of them could hand its part round
        in a circle (Membership.split_by_next_hop).  Nothing goes to ``not_to`` (a resend's
        suspect: what has no way round it is in its link already).  Returns the frames queued."""
        others = [d for d in dests if d != me]
        if not others:
            return 0
        if ttl == 0:
            self.dropped["ttl"] += 1
            return 0
        detoured = self.membership.detoured
        queued = 0
        for hop, group in self.by_next_hop(others, kind, relayed_from=came_from).items():
            if hop == not_to:
                continue
            round_ = [d for d in group if detoured(d, hop)] if ttl - 1 > DETOUR_TTL else []
            if round_:
                self.send(hop, kind, make(DETOUR_TTL, round_), came_from)
                group = [d for d in group if d not in round_]
                queued += 1
            if group:
                self.send(hop, kind, make(ttl - 1, group), came_from)
                queued += 1
        return queued

    def forget(self, hub: int) -> None:
        """The link to ``hub`` went: what was queued or kept for it goes too (send_round first)."""
        self._frames.pop(hub, None)
        self._sent.pop(hub, None)
        self._sent_bytes.pop(hub, None)

    def take(self) -> dict[int, list[bytes]]:
        out, self._frames = self._frames, {}
        return out


def _framed(op: wire.Opcode, rest: bytes, ttl: int, dests: list[int]) -> bytes:
    """A routed frame of ``op`` again, with a new route head before the same bytes."""
    return routed_sets_frame(ttl, dests, rest, op)
