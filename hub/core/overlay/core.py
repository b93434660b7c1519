"""The overlay's routing core (mesh v3), without I/O: events in, frames for neighbours out.

Events: a link came up or went down (:meth:`link_up`, :meth:`link_down`), a frame
arrived from a neighbour (:meth:`receive`), this hub's interest changed
(:meth:`set_interest`), it stored a publish of its own (:meth:`publish`), time
passed (:meth:`tick`).  Out: frames per neighbour (:meth:`take_outbox`), hubs to
dial (:meth:`dials`), the next deadline (:meth:`tick`'s answer), and sets to store,
handed to the store's ``deliver``.  The hub's mesh sessions drive it over libp2p;
``hub/tools/mesh_sim.py`` drives the same code over a simulated network.

How a set travels: its origin looks up the hubs that want its topics (from the
rendezvous, ``rendezvous.py``), groups them by next hop (``membership.py``) and
sends one ROUTED_SETS per next hop naming the hubs it is for.  Each hop delivers
what is for itself (``streams.py``: in order per origin and topic, once) and
passes the same bytes on, split again by next hop.  Every interested hub gets one
copy over a shortest path; no hub keeps a seen-cache.

Why this file is long (~620 lines): it is where the overlay's parts meet; each handler hands an
event to the parts it concerns in the order that keeps the promises (sets before the frame that
announces them, JOINED before the sets it starts).  The parts with state of their own are apart.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, cast

import wire
from wire.frames.mesh_v3 import ROUTED_SETS_TYPES, link_state_head, read_route_head, route_head, routed_sets_frame

from ..mesh.interest import LocalInterest
from .after_changes import HeadsRounds, heads_sends
from .config import OverlayConfig
from .costs import LinkCosts
from .delivering import hand_over
from .flooding import Flooding
from .joins import Joins
from .links import LinkPolicy
from .membership import Membership, key_patterns, keys_of_topic, rendezvous_key
from .origin import OriginSide, heads_frames
from .outbox import Outbox
from .pacing import ADVERTISE_INTERVAL, ADVERTISE_MAX, SETTLE, SETTLE_MAX, Backoff
from .rendezvous import OwnedKeys, Registrations, Send
from .sending import SetSender
from .shortcuts import Shortcuts
from .status import overlay_status
from .store import OverlayStore
from .streams import Streams
from .watching import JoinNotice, Watching

if TYPE_CHECKING:
    from ..clock import Clock

log = logging.getLogger("hub.overlay")
RoutedData = wire.RoutedSets | wire.RoutedSetsHeaders


class Overlay:
    def __init__(
        self,
        config: OverlayConfig,
        *,
        hub_id: int,
        peer_key: str,
        addrs: Iterable[str],
        clock: Clock,
        store: OverlayStore,
        since: Mapping[tuple[int, str], int] | None = None,
        joins: Mapping[tuple[int, str], int] | None = None,
        seed: int | None = None,
        admits: Callable[[str], bool] | None = None,
    ) -> None:
        """``admits``: the allow-list, by peer key (see Membership.admits); None: every hub."""
        self.config = config
        self.hub_id = hub_id
        self.peer_key = peer_key
        self.addrs = tuple(addrs)
        self.clock = clock
        self.store = store
        self.boot = clock.wall_us()
        self._ls_seq = 0
        self.membership = Membership(hub_id, admits=admits)
        self.policy = LinkPolicy(config, self.membership, random.Random(hub_id if seed is None else seed))
        self.costs = LinkCosts()
        self.policy.measured = self.costs.figure
        self.local = LocalInterest()
        self.registrations = Registrations(self.membership, clock.monotonic)
        self.owned = OwnedKeys(self.membership, version_base=self.boot & 0xFFFFFFFF)
        self.watching = Watching(self.membership, lambda: self.sender.join_since(), lambda *w: self.joins.watching(*w))
        self.streams = Streams(stored_position=store.stored_position, save_since=store.save_since, since=since,
                               hold_max_bytes=config.hold_max_bytes, floors=store.floors, save_floors=store.save_floors)
        self.origin = OriginSide(store, recent_max_bytes=config.recent_max_bytes)
        #: where this hub's sets for each destination start (told again when the hub returns)
        self.joins = Joins(store.save_joins, joins, now=clock.monotonic())
        self.watching.resume(self.joins.unsettled(), clock.monotonic())  # watches a crash cut short
        self.shortcuts = Shortcuts(config, self.membership, self.policy.links)
        self.policy.shortcuts = self.shortcuts.live
        self.outbox = Outbox(self.membership, self.policy.links, self.shortcuts, clock, config)
        self.flooding = Flooding(self.outbox, self.policy.links)
        self.sender = SetSender(config, hub_id, self.watching, self.origin, self.outbox, self._route_control,
                                self.shortcuts.count)  # fmt: skip
        self._settle_at: float | None = None
        self._settles = Backoff(SETTLE, SETTLE_MAX, quiet=SETTLE_MAX)
        self._advertise_due = self._advertise_urgent = False
        self._adverts = Backoff(ADVERTISE_INTERVAL, ADVERTISE_MAX, quiet=2 * ADVERTISE_MAX)
        self._restate()
        #: hubs to greet once reachable (_returned); at start, those of kept starts and JOINED (never "found")
        self._greet: set[int] = {origin for origin, _ in (since or {})} | self.joins.hubs()
        #: HEADS after routes moved (see after_changes.py)
        self._heads = HeadsRounds(delay=config.heads_delay, window=config.heads_window, again=config.heads_again)
        self._recheck_at: float | None = None  # when to tell owners again what a break may have lost
        #: the next recheck whatever happened (config.recheck_interval), spread by hub id
        self._periodic_at = clock.monotonic() + config.recheck_interval * (1 + (hub_id % 1000) / 1000)
        #: origins asked for SYNC that have not answered yet (asked again after a break)
        self._syncing: set[int] = set()
        #: The hub's: closes a live v2 link to a hub, returns what it still owed (hub/core/mesh/switch.py).
        self.v2_gives_way: Callable[[int], int | None] = lambda hub: None

    # -- links -------------------------------------------------------------------------

    def may_accept(self, hub: int, *, shortcut: bool = False) -> bool:
        """May a link (or a shortcut) from ``hub`` be accepted (``max_peers`` bounds inbound links too)?"""
        if shortcut:
            return hub != self.hub_id and self.shortcuts.may_accept(hub)
        return hub != self.hub_id and self.policy.may_accept(hub, self.clock.monotonic())

    def link_up(self, hub: int, *, shortcut: bool = False, inbound: bool = False) -> None:
        self.membership.suspect(hub, False)  # a new session: what the old one suspected goes
        if shortcut:
            self.shortcuts.up(hub, self.clock.monotonic())
            return
        self.shortcuts.down(hub)  # if it was a shortcut, the shell replaced its session by this link
        new = self.policy.link_up(hub, inbound=inbound)
        # All this hub knows goes to it (it floods what is news), a replacing session's far end too (restarted?).
        for frame in self.membership.frames():
            self.outbox.send(hub, "LINK_STATE", frame)
        advertised = hub in self.policy.advertised()  # not a trial, nor one past degree (links.py)
        if new:
            self.shortcuts.make_room()
            self._changed(advertise=advertised)
        if advertised or not new:
            self._moved()  # routes change; and frames in flight on a replaced session are lost

    def link_down(self, hub: int, *, pruned: bool = False) -> None:
        """The link (or shortcut) to ``hub`` ended: what was sent into a link lately goes again round
        it (outbox.py), or if this hub ``pruned`` it, only what was still queued for it."""
        self.membership.suspect(hub, False)
        if hub in self.shortcuts.live:
            self.outbox.forget(hub)
            if self.shortcuts.down(hub):
                self._moved()  # it broke, or the other end closed it: what was in flight is lost
            return
        if self.policy.link_down(hub, self.clock.monotonic(), broke=not pruned):
            self.costs.forget(hub)
            self.outbox.link_ended(hub, self.hub_id, pruned=pruned)
            if self.policy.advertises(hub):  # a link never advertised (a trial) was in no route
                self._advertise_urgent = True
                self._changed(advertise=True)  # restated: routes leave the link at once
                self._moved()

    def readmit(self) -> None:
        """The allow-list was reloaded: hubs it no longer names leave the map, as if gone."""
        if self.membership.drop_unadmitted():
            self._changed()  # the next settle forgets them (their keys, starts told)
            self._moved()

    def link_timed(self, hub: int, round_trip: float) -> None:
        """A heartbeat round trip timed on the link to ``hub``: its advertised cost may change."""
        policy = self.policy  # a trial's figure is kept, not advertised (links.py)
        if hub in policy.links and self.costs.observe(hub, round_trip, self.clock.monotonic()) and hub != policy.trial:
            self._changed(advertise=True)
            self._moved()  # this hub's routes move too (see _link_state)

    def suspect(self, hub: int, suspected: bool) -> None:
        """A neighbour answers nothing (routes go round it: routes.py; HEADS follow, what was sent
        to it lately goes again round it, what was asked through it is asked again), or again."""
        if not suspected or hub in self.membership.suspected:
            return self.membership.suspect(hub, suspected)
        self.streams.ask_again(lambda origin: self.membership.next_hop(origin) == hub, self.clock.monotonic())
        self.membership.suspect(hub, True)
        self.outbox.send_round(hub, self.hub_id, "suspect")  # by the routes as they are now: round it
        self._moved()

    def referral(self, states: Iterable[wire.LinkState]) -> None:
        """Advertisements from a hub that refused our link (it was full): hubs to dial instead."""
        for state in states:
            if state.hub_id != self.hub_id and self.membership.offer(state):
                self._changed()

    def dial_ended(self, hub: int) -> None:
        """A dial (a link's or a shortcut's) to ``hub`` failed (or it came up: :meth:`link_up` says so too)."""
        self.policy.dial_ended(hub)
        self.shortcuts.dial_ended(hub)

    def dials(self) -> list[wire.LinkState]:
        return self.policy.dials(self.clock.monotonic())

    def shortcut_dials(self) -> list[wire.LinkState]:
        """Hubs to open a shortcut to (shortcuts.py): dialled as shortcuts, not as links."""
        return self.shortcuts.dials()

    def surplus_link(self) -> int | None:
        """A link the shell should close: both ends hold more than ``degree``, a trial link or the
        slower link it replaces, one this hub took past ``max_peers`` to heal a split and can
        spare, or a shortcut idle or in the way."""
        surplus = self.policy.surplus(self.clock.monotonic())
        return self.shortcuts.to_close() if surplus is None else surplus

    @property
    def links(self) -> set[int]:
        return self.policy.links

    def _restate(self) -> None:
        """This hub's own advertisement, as its links are now: used for routing at once."""
        self._ls_seq = max(self._ls_seq + 1, self.clock.wall_us())
        links = tuple(sorted(self.policy.advertised()))
        own = wire.LinkState(hub_id=self.hub_id, boot=self.boot, seq=self._ls_seq, peer_key=self.peer_key,
                             addrs=self.addrs, neighbors=links, costs=self.costs.of(links))  # fmt: skip
        self.membership.offer(own)

    def _advertise(self) -> None:
        """Flood this hub's newest advertisement to its neighbours."""
        self._adverts.fired(self.clock.monotonic())
        encoded = self.membership.frame_of(self.hub_id)
        for hub in self.policy.links:
            self.outbox.send(hub, "LINK_STATE", encoded)

    def _changed(self, *, advertise: bool = False) -> None:
        """The graph may have changed: settle it soon (changes come in bursts)."""
        if advertise:
            self._restate()
            self._advertise_due = True
        now = self.clock.monotonic()
        delay = SETTLE if advertise else self._settles.wait(now)
        if self._settle_at is None or now + delay < self._settle_at:
            self._settle_at = now + delay

    def _settle(self) -> None:
        self._settle_at = None
        now = self.clock.monotonic()
        self._settles.fired(now)
        self.membership.settle()
        if self._advertise_due:
            # Own advertisements flood every hub: one per ADVERTISE_INTERVAL at most, or a longer gap
            # while links keep changing (links coming up one by one flood a few times, not once each).
            adverts = self._adverts
            next_at = adverts.last + (ADVERTISE_INTERVAL if self._advertise_urgent else adverts.wait(now))
            if now >= next_at:
                self._advertise_due = self._advertise_urgent = False
                self._advertise()
            else:
                self._settle_at = next_at
        lost, found, gone = self.membership.note_reachability(now)
        if lost or found:
            self._moved()  # sets for a hub unreachable meanwhile were dropped where it had no route
            self.watching.reachability(lost, found, now)
        sends: list[Send] = []
        sends += self.registrations.refresh()
        sends += self.owned.refresh()
        sends += self.watching.refresh(now)
        if gone:
            sends += self.owned.forget(gone)
            self.joins.forget_hubs(gone)
        for send in sends:
            self._route_control(*send)
        self._returned(found)
        greet = [h for h in self._greet if self.membership.is_reachable(h)]
        for hub in greet:
            self._greet.discard(hub)
            for joined_key, since in self.joins.of_hub(hub):
                for send in self._joined(JoinNotice(hub=hub, key=joined_key, since=since)):
                    self._route_control(*send)
            if hub in self.streams.origins():
                self._sync(hub)

    def _returned(self, hubs: Iterable[int]) -> None:
        """Hubs back in reach, or restarted: sets may have been lost on the way to or from them.
        Each is greeted once it is reachable: told again where this hub's sets for it start
        (JOINED), and, if it is an origin this hub delivers, asked where its topics stand (SYNC)."""
        origins = self.streams.origins()
        joined = self.joins.hubs()
        for hub in hubs:
            if hub in origins or hub in joined:
                self._greet.add(hub)
                self._changed()

    def _sync(self, origin: int) -> None:
        self._syncing.add(origin)
        for key, patterns in self.registrations.patterns.items():
            if patterns:
                self._route_control((origin,), wire.Sync(key=key, patterns=tuple(sorted(patterns))))

    # -- frames in -----------------------------------------------------------------------

    def receive(self, peer: int, frame: wire.Frame) -> None:
        """A frame from neighbour ``peer`` (already decoded and checked by the wire)."""
        if isinstance(frame, wire.LinkState):
            self._link_state(peer, frame)
        elif isinstance(frame, wire.Routed):
            self._routed(peer, frame)
        elif isinstance(frame, ROUTED_SETS_TYPES):
            self.receive_routed_sets(peer, frame.encode_body(), frame)

    def receive_link_state(
        self, peer: int, body: bytes, decode: Callable[[bytes], wire.Frame] = wire.LinkState.decode_body
    ) -> bool:
        """LINK_STATE from ``peer`` as its body: a repeat (most of a flood) is dropped undecoded.

        Returns False for a repeat: nothing changed, the shell need not pump.  (``decode``: the
        simulator, which runs every hub in one process, decodes each advertisement once for all.)
        """
        hub_id, seq = link_state_head(body)
        if hub_id != self.hub_id and not self.membership.is_news(hub_id, seq):
            self.flooding.repeat(hub_id, seq, peer)
            return False
        state = decode(body)
        assert isinstance(state, wire.LinkState)
        self._link_state(peer, state, wire.HEADER.pack(wire.Opcode.LINK_STATE, len(body)) + body)
        return True

    def _link_state(self, peer: int, state: wire.LinkState, encoded: bytes | None = None) -> None:
        if state.hub_id == self.hub_id:
            if state.seq > self._ls_seq:
                # An advertisement of ours from before a restart: outbid it.
                self._ls_seq = state.seq
                self._changed(advertise=True)
            return
        known = self.membership.get(state.hub_id)
        if not self.membership.offer(state, encoded):
            self.flooding.repeat(state.hub_id, state.seq, peer)
            return
        # Links or costs changed: routes move as this floods (sets may loop to the hop limit).
        if known is None or set(known.neighbors) != set(state.neighbors) or known.costs != state.costs:
            self._moved()
        now = self.clock.monotonic()
        self.flooding.news(state.hub_id, state.seq, self.membership.frame_of(state.hub_id), peer, now)
        self._changed(advertise=self.policy.confirmed(state))
        if known is not None and known.boot != state.boot:
            self._returned([state.hub_id])

    def receive_routed_sets(self, peer: int, body: bytes, frame: RoutedData | None = None,
                            kind: type[RoutedData] = wire.RoutedSets) -> None:  # fmt: skip
        """ROUTED_SETS(_HEADERS) from ``peer``: relay the same bytes on, deliver what is for this hub."""
        frame = frame or cast(RoutedData, kind.decode_body(body))
        if peer in self.shortcuts.live:
            self.shortcuts.touched.add(peer)
        if self._refused(frame.origin):
            return
        _, _, at = read_route_head(body, minimum_rest=10)
        op, rest = frame.OPCODE, body[at:]
        self.outbox.relay(self.hub_id, frame.ttl, frame.dests, op.name, lambda t, d: routed_sets_frame(t, d, rest, op),
                          came_from=peer)  # fmt: skip
        if self.hub_id in frame.dests:
            self._v2_hand_over(frame.origin)  # its sets come here through the overlay from now on
            self.streams.receive(frame.origin, frame.sets, self._wants, self.clock.monotonic())
            self._deliver_ready()
            self._ask_repairs()

    def _refused(self, src: int) -> bool:
        """A frame from a hub the allow-list leaves out: neither relayed nor acted on."""
        if self.membership.knows(src):
            return False
        self.outbox.dropped["not_admitted"] += 1
        return True

    def _routed(self, peer: int, frame: wire.Routed) -> None:
        inner = frame.inner
        kind = inner.OPCODE.name

        def envelope(ttl: int, dests: list[int]) -> bytes:
            return wire.Routed(ttl=ttl, dests=tuple(dests), src=frame.src, inner=inner).encode()

        if self._refused(frame.src):
            return
        self.outbox.relay(self.hub_id, frame.ttl, frame.dests, kind, envelope, came_from=peer)
        if self.hub_id in frame.dests:
            self._control(frame.src, inner)

    def _control(self, src: int, inner: wire.Frame) -> None:
        now = self.clock.monotonic()
        sends: list[Send] = []
        if isinstance(inner, wire.Interest):
            sends = self.owned.interest(src, inner.key, inner.patterns)
        elif isinstance(inner, wire.Watch):
            sends = self.owned.watch(src, inner.key, inner.on, inner.version)
        elif isinstance(inner, wire.InterestSet) and inner.version == 0:
            self.registrations.acked(src, inner)  # an owner's acknowledgement of our INTEREST
        elif isinstance(inner, wire.InterestSet):
            answer = self.watching.answer(src, inner, self.sender.join_since(), now)
            sends = answer.sends
            for hub in answer.left:
                self.joins.left(hub, inner.key)
            for notice in answer.joined:
                sends.extend(self._joined(notice))
            if self.sender.parked:
                for send in sends:
                    self._route_control(*send)  # JOINED before the parked sets it announces
                sends = []
                self.sender.unpark(now)
        elif isinstance(inner, wire.Joined):
            self._syncing.discard(src)
            self._v2_hand_over(src)  # its sets come here through the overlay from now on
            if inner.key in self.registrations.patterns:
                self.streams.joined(src, inner.key, inner.since, now)
                self._deliver_ready()
                self._ask_repairs()
        elif isinstance(inner, wire.Heads):
            self._syncing.discard(src)
            self.streams.heads(src, inner.heads, self._wants, now)
            self._ask_repairs()
        elif isinstance(inner, wire.Sync):
            self._answer_sync(src, inner)
        elif isinstance(inner, wire.Repair):
            self._answer_repair(src, inner)
        elif isinstance(inner, wire.Repaired):
            self.streams.repaired(src, inner.topic, inner.upto, inner.missing, now)
            self._deliver_ready()
            self._ask_repairs()
        for send in sends:
            self._route_control(*send)

    def _joined(self, notice: JoinNotice) -> list[Send]:
        """A hub became (or is again) a destination under a key: where its sets start and end.

        JOINED says where they start; a hub that was one before keeps its first start (it may
        have been dropped while an owner changed, or been down).  HEADS then say where the
        key's topics it wants end, so it repairs whatever it did not get in between: sets sent
        while it was down or not yet known, including a last set with nothing after it.
        """
        self._v2_hand_over(notice.hub)  # this hub's sets go there through the overlay from now on
        since = self.joins.tell(notice.hub, notice.key, notice.since, self.clock.monotonic())
        if not self.membership.is_reachable(notice.hub):
            self._greet.add(notice.hub)  # these find no route: told again once it is reachable
        sends: list[Send] = [((notice.hub,), wire.Joined(key=notice.key, since=since))]
        # Not parked topics (they go once unparked); a hub restarted since knows no patterns: all under the key.
        wanted = self._heads_for(self.watching.patterns_of(notice.key, notice.hub) or key_patterns(notice.key))
        heads = [h for h in wanted if h.last > since and h.topic not in self.sender.parked_topics]
        sends.extend(((notice.hub,), frame) for frame in heads_frames(heads))
        return sends

    def hand_over(self, hub: int, after: int) -> None:
        """``hub``'s v2 link gave way owing it this hub's sets after ``after`` (mesh/switch.py)."""
        for key, since in self.joins.handed_over(hub, after, self.clock.monotonic()):
            for send in self._joined(JoinNotice(hub=hub, key=key, since=since)):
                self._route_control(*send)

    def _v2_hand_over(self, hub: int) -> None:
        """One path per pair of hubs: sets that cross the overlay must not cross a v2 link too."""
        if (owed := self.v2_gives_way(hub)) is not None:
            self.hand_over(hub, owed)

    def _answer_sync(self, src: int, sync: wire.Sync) -> None:
        """Where ``src``'s stream starts (JOINED, if it is a destination under the key) and ends (HEADS)."""
        since = self.joins.get(src, sync.key)
        if since is not None:
            self._route_control((src,), wire.Joined(key=sync.key, since=since))
        for frame in heads_frames(self._heads_for(sync.patterns)):
            self._route_control((src,), frame)

    def _heads_for(self, patterns: Iterable[str]) -> list[wire.Head]:
        """Where this hub's topics that ``patterns`` match end (told again after changes: origin.py)."""
        table = LocalInterest()
        table.add(patterns)
        return self.origin.heads_matching(lambda topic: table.wants((topic,)), self.clock.monotonic())

    def _answer_repair(self, src: int, repair: wire.Repair) -> None:
        answer = self.origin.repair(repair.topic, repair.after, repair.upto, self.config.repair_answer_max_bytes)
        self.sender.send_now(frozenset((src,)), answer.sets)
        self._route_control((src,), wire.Repaired(topic=repair.topic, upto=answer.upto, missing=answer.missing))

    # -- delivery --------------------------------------------------------------------------

    def _wants(self, topic: str) -> bool:
        return self.local.wants((topic,))

    def _deliver_ready(self) -> None:
        hand_over(self.streams, self.store.deliver)

    def _ask_repairs(self) -> None:
        for ask in self.streams.take_asks():
            self._route_control((ask.origin,), wire.Repair(topic=ask.topic, after=ask.after, upto=ask.upto))
        asked: set[tuple[int, str]] = set()
        for origin, topic in self.streams.take_starts():
            for key in keys_of_topic(topic):
                patterns = self.registrations.patterns.get(key)
                if patterns and (origin, key) not in asked:
                    asked.add((origin, key))
                    self._route_control((origin,), wire.Sync(key=key, patterns=tuple(sorted(patterns))))

    # -- this hub's interest and publishes ---------------------------------------------------

    def set_interest(self, added: Iterable[str], removed: Iterable[str]) -> None:
        added = self.local.add(added)
        removed = self.local.remove(removed)
        for send in self.registrations.change(added, removed):
            self._route_control(*send)
        if removed:
            for key in {rendezvous_key(p) for p in removed}:
                if key not in self.registrations.patterns:
                    self.streams.forget_key(key)
            self.streams.forget_topics(self._wants)

    def publish(self, origin_seq: int, timestamp: int, messages: wire.MessageSet) -> int:
        """A set of this hub's, stored: route it to every hub that wants one of its topics.

        Returns how many hubs it goes to (0 while it waits for its topics' interest).  Sets
        queue until :meth:`take_outbox`, so a burst of publishes leaves as one frame per next hop.
        """
        return self.sender.publish(origin_seq, timestamp, messages, self.clock.monotonic())

    @property
    def last_seq(self) -> int:
        return self.sender.last_seq

    # -- frames out ----------------------------------------------------------------------

    def _route_control(self, dests: tuple[int, ...], inner: wire.Frame) -> None:
        """A control frame for ``dests``: handled here if this hub is one, routed to the others."""
        if self.sender.pending:
            self.sender.flush()  # sets published before this frame leave before it
        others = tuple(d for d in dests if d != self.hub_id)
        if others:
            encoded_inner = inner.encode()
            kind = inner.OPCODE.name
            src = self.hub_id.to_bytes(8, "big")
            for hop, group in self.outbox.by_next_hop(others, kind).items():
                body = route_head(self.config.ttl, group) + src + encoded_inner
                self.outbox.send(hop, kind, wire.HEADER.pack(wire.Opcode.ROUTED, len(body)) + body)
        if self.hub_id in dests:
            self._control(self.hub_id, inner)

    def take_outbox(self) -> dict[int, list[bytes]]:
        """Frames to write, per neighbour, in order (sets queued by :meth:`publish` included)."""
        if self.sender.pending:
            self.sender.flush()
        return self.outbox.take()

    # -- time ------------------------------------------------------------------------------

    def tick(self) -> float | None:
        """Do what is due; returns when to call again (None: nothing pending)."""
        now = self.clock.monotonic()
        config = self.config
        if self._settle_at is not None and now >= self._settle_at:
            self._settle()
        flood_due = self.flooding.tick(now)
        repair_due = self.streams.tick(now, self.membership.is_reachable, config.repair_retry,
                                       config.repair_retry_max, config.give_up_after)  # fmt: skip
        self._deliver_ready()
        self._ask_repairs()
        heads_due = self._heads_after_changes(now)
        shortcuts_due = self.shortcuts.review(now)
        recheck_due = self._recheck(now)
        retry, retry_max = config.watch_retry, config.recheck_interval
        for send in self.watching.retry(now, retry) + self.registrations.retry(now, retry, retry_max):
            self._route_control(*send)
        if self.sender.parked:
            self.sender.unpark(now)
        for send in self.watching.idle(now, config.watch_idle):
            self._route_control(*send)
        scan = self.policy.next_scan()
        deadlines = [d for d in (
            self._settle_at, flood_due, repair_due, heads_due, recheck_due, shortcuts_due,
            self.watching.next_retry(retry), self.registrations.next_retry(retry, retry_max),
            self.sender.parked[0][0] + config.park_max if self.sender.parked else None,
            min(w.last_used for w in self.watching.keys.values()) + config.watch_idle if self.watching.keys else None,
            scan if scan is not None and scan > now else None,  # the shell asks dials() after every tick
        ) if d is not None]  # fmt: skip
        return min(deadlines) if deadlines else None

    def _moved(self) -> None:
        """A link or hub came or went, or costs changed: frames in flight may be lost, so HEADS
        follow (after_changes.py) and, once the graph is quiet, lost control frames are found."""
        now = self.clock.monotonic()
        self._heads.changed(now)
        self._recheck_at = now + self.config.heads_delay

    def _recheck(self, now: float) -> float | None:
        """Once the graph is quiet after a change, and every ``recheck_interval`` anyway, control
        frames lost on the way are sent again (WATCH version checks, SYNC not answered yet).

        INTEREST is not: each one is acknowledged and sent again until it is, and a new or restarted
        owner is told (Registrations.refresh); an owner forgets a hub's patterns only once it has not
        reached it for FORGET_AFTER, and that hub, not reaching the owner either, has stopped counting
        it as an owner meanwhile (it tells it again once it is one).  Re-telling every owner every
        interval was most of a formed overlay's interest traffic (30 hubs: 156 interest frames of
        every key in a join's 2 s, 12 of them the join's own)."""
        periodic = self._periodic_at <= now
        if periodic:
            self._periodic_at = now + self.config.recheck_interval
            if self._recheck_at is None or self._recheck_at > now:
                self._recheck_at = now
        if self._recheck_at is None:
            return self._periodic_at
        if now < self._recheck_at:
            return min(self._recheck_at, self._periodic_at)
        self._recheck_at = None
        for send in self.watching.recheck(now):
            self._route_control(*send)
        for origin in sorted(self._syncing):
            if self.membership.is_reachable(origin):
                self._sync(origin)
        return self._periodic_at

    def _heads_after_changes(self, now: float) -> float | None:
        """HEADS for the topics published around a change of routes, when due (after_changes.py)."""
        since, next_at = self._heads.poll(now)
        if since is not None:
            told = self.joins.hubs_by_key()  # a restarted hub watches nothing yet: its JOINED say where
            for send in heads_sends(self.origin.published_since(since), self.watching.destinations, told):
                self._route_control(*send)
        return next_at

    # -- what it holds ---------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        return overlay_status(self)
