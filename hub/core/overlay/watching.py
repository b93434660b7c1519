"""This hub as a publisher: the rendezvous keys it watches, and the hubs each of its topics goes to.

It watches the keys of the topics it publishes (the topic's first token, and
``*``): a WATCH to each key's owners, answered by INTEREST_SET (everything, then
each change after).  From the owners' answers (:func:`_in_use`) come the hubs a
topic goes to, and the hubs that just became destinations (JOINED, with where
their sets start).  The subscriber and owner sides are ``rendezvous.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import wire

from ..mesh.interest import InterestTable
from .membership import Membership, keys_of_topic
from .rendezvous import Send, next_version, owners_changed

#: After the ring of owners changed (a hub crashed, returned, joined), or an owner change cut an
#: ask short (``_Watch.cut_short``), hubs named for the first time start no later than this
#: hub stood then, for this long: their INTEREST may have been on its way to the new owners
#: (or with an owner that left) while this hub published.  Past the churn of a crash or a split
#: healing (routes settle within seconds), a hub named for the first time is taken to want
#: from then on.  The price: a hub that really subscribes within this time of a change gets
#: up to this much of what was published before.
CUT_SHORT_KEEP = 10.0
#: A ring change is seen when the graph settles, this long after it at most (SETTLE_MAX 1 s).
RING_SEEN_WITHIN = 2.0
#: A watch made while this hub's map held only itself (just started, or cut off) is not settled
#: until the map holds others: hubs named then start at the watch's start.  Unless the hub was
#: alone longer than this: then it was a cluster of its own, and what it published meanwhile is
#: owed to nobody (a standalone hub that joins a cluster later does not replay its history).
#: Counted from the watch (or from the restart that resumed it): a hub alone for long that
#: restarts and finds the others within this time still owes them the sets since its start.
ALONE_KEEP = 60.0


@dataclass(slots=True)
class _Watch:
    #: owner -> its boot when the WATCH went out
    told: dict[int, int | None] = field(default_factory=dict)
    #: owner -> what it told us (hub -> patterns), and the version of that
    snapshots: dict[int, dict[int, tuple[str, ...]]] = field(default_factory=dict)
    versions: dict[int, int] = field(default_factory=dict)
    #: owner -> when this hub last asked it for everything (a WATCH it has not answered yet)
    asked: dict[int, float] = field(default_factory=dict)
    #: owner -> this hub's last sequence sent when it asked (hubs its answer adds start after it)
    asked_seq: dict[int, int] = field(default_factory=dict)
    #: (the earliest such sequence, when) of an ask that an owner change cut short (its owner
    #: left the key before answering): the hubs it would have named may be named by another
    #: owner later, asked later; they still start there, for CUT_SHORT_KEEP seconds.
    cut_short: tuple[int, float] | None = None
    #: The hubs this key's sets go to, from the owners' answers (:func:`_in_use`).
    table: InterestTable[int] = field(default_factory=InterestTable)
    hubs: frozenset[int] = frozenset()
    #: This hub's last sequence when the watch started: hubs in the first answer get sets after it.
    started_after: int = 0
    answered: bool = False
    #: when the watch started (the time of its first publish, or of a resume after a restart)
    started_at: float = 0.0
    #: every owner has answered once, the ring quiet (until then the start outlives a crash: joins.py)
    settled: bool = False
    #: when the watch was made, if this hub's map held only itself then (see ALONE_KEEP)
    alone_since: float | None = None
    last_used: float = 0.0


@dataclass(frozen=True, slots=True)
class JoinNotice:
    """A hub became a destination of this hub's sets under ``key`` after sequence ``since``."""

    hub: int
    key: str
    since: int


@dataclass(slots=True)
class Answer:
    #: Hubs that became destinations under the key.
    joined: list[JoinNotice] = field(default_factory=list)
    #: Hubs whose patterns under the key went, by their own word (not a switch of owner).
    left: list[int] = field(default_factory=list)
    #: WATCHes to send (a change was missed).
    sends: list[Send] = field(default_factory=list)


class Watching:
    """The keys this hub publishes under, and the hubs each of its topics goes to."""

    def __init__(
        self,
        membership: Membership,
        sent_upto: Callable[[], int] = lambda: 0,
        on_watch: Callable[[str, int | None], None] = lambda key, since: None,
    ) -> None:
        self.membership = membership
        self.self_id = membership.self_id
        #: This hub's last sequence sent so far (the sender's ``join_since``).
        self.sent_upto = sent_upto
        #: told when a watch starts (key, its start) and once every owner has answered (key, None):
        #: joins.py keeps the starts of watches not settled yet across restarts
        self.on_watch = on_watch
        self.keys: dict[str, _Watch] = {}
        self._dests: dict[str, frozenset[int]] = {}
        #: the ring's change count last seen, and (where this hub stood, when) at its last change
        self._ring_seen = 0
        self._ring_moved: tuple[int, float] | None = None
        #: (where this hub stood, when) at the last refresh: a change is seen only when the graph
        #: settles, up to a second or so after it, and this hub may have published meanwhile
        self._refreshed: tuple[int, float] = (0, -1e18)
        #: hub -> where this hub stood when the graph stopped reaching it (kept CUT_SHORT_KEEP
        #: after it is back); and when it came back
        self._away: dict[int, int] = {}
        self._back: dict[int, float] = {}

    def reachability(self, lost: Iterable[int], found: Iterable[int], now: float) -> None:
        """Hubs the graph stopped reaching, and hubs back in reach (see :meth:`_use`)."""
        for hub in lost:
            self._away.setdefault(hub, self.sent_upto())
            self._back.pop(hub, None)
        for hub in found:
            self._back[hub] = now
        for hub in [h for h, at in self._back.items() if now - at >= CUT_SHORT_KEEP]:
            del self._back[hub]
            self._away.pop(hub, None)
        for hub in [h for h in self._away if self.membership.get(h) is None]:
            del self._away[hub]  # forgotten (gone for good): nothing owed to it any more

    def destinations(self, topic: str) -> frozenset[int]:
        """Hubs (never this one) with a pattern that matches ``topic``."""
        dests = self._dests.get(topic)
        if dests is None:
            found: set[int] = set()
            for key in keys_of_topic(topic):
                watch = self.keys.get(key)
                if watch is not None:
                    found.update(watch.table.peers_for((topic,)))
            found.discard(self.self_id)
            dests = self._dests[topic] = frozenset(found)
            if len(self._dests) > 65536:
                self._dests.clear()
        return dests

    def ensure(self, topic: str, last_seq: int, now: float) -> list[Send]:
        """This hub publishes ``topic``: watch its keys (WATCH to their owners) if not yet."""
        sends = []
        for key in keys_of_topic(topic):
            watch = self.keys.get(key)
            if watch is None:
                watch = self.keys[key] = _Watch(started_after=last_seq, started_at=now, alone_since=self._alone(now))
                self.on_watch(key, last_seq)
                sends.extend(self._tell(key, watch, self.membership.owners(key), now, last_seq))
            watch.last_used = now
        return sends

    def resume(self, unsettled: list[tuple[str, int]], now: float) -> None:
        """Watches some owner had not answered before this hub restarted (key, start): watched
        again from their starts, so the hubs such an owner names still get the sets sent
        meanwhile (the owners are told once the map knows them: :meth:`refresh`)."""
        for key, since in unsettled:
            if key not in self.keys:
                alone = self._alone(now)
                self.keys[key] = _Watch(started_after=since, last_used=now, started_at=now, alone_since=alone)

    def _alone(self, now: float) -> float | None:
        return now if self.membership.reachable_count() == 0 else None

    def idle(self, now: float, idle_for: float) -> list[Send]:
        """Stop watching keys not published under for ``idle_for`` seconds."""
        sends: list[Send] = []
        for key, watch in list(self.keys.items()):
            if watch.last_used + idle_for <= now:  # the deadline's own sum (see SetSender.unpark)
                owners = tuple(watch.told)
                if owners:
                    sends.append((owners, wire.Watch(key=key, on=False)))
                if not watch.settled:
                    self.on_watch(key, None)
                del self.keys[key]
                self._dests.clear()
        return sends

    def refresh(self, now: float) -> list[Send]:
        """The graph changed: watch with new or restarted owners; drop what old owners said."""
        changes = self.membership.ring_changes()
        stood = self.sent_upto()
        if changes != self._ring_seen:
            self._ring_seen = changes
            before, at = self._refreshed
            self._ring_moved = (before if now - at <= RING_SEEN_WITHIN else stood, now)
        self._refreshed = (stood, now)
        sends = []
        joined = self.membership.reachable_count() > 0
        for key, watch in self.keys.items():
            if joined and watch.alone_since is not None:
                if now - watch.alone_since > ALONE_KEEP:
                    watch.started_after = stood
                    self.on_watch(key, None)  # the start kept across restarts moves too (joins.py)
                    self.on_watch(key, stood)
                watch.alone_since = None
            owners = self.membership.owners(key)
            for owner in list(watch.told):
                if owner not in owners:
                    del watch.told[owner]
                    self._drop(watch, owner, now)
            fresh = owners_changed(watch.told, owners, self.membership)
            for owner in fresh:
                self._drop(watch, owner, now)
            if fresh:
                sends.extend(self._tell(key, watch, tuple(fresh), now))
        return sends

    def recheck(self, now: float) -> list[Send]:
        """Frames may have been lost in a break: each owner whose answer is in use says whether
        this hub holds its latest version (it answers only if not); owners never heard from are
        asked again."""
        sends: list[Send] = []
        for key, watch in self.keys.items():
            owners = self.membership.owners(key)
            for owner in owners:
                if owner in watch.snapshots:
                    sends.append(((owner,), wire.Watch(key=key, version=watch.versions[owner])))
            silent = tuple(o for o in owners if o not in watch.snapshots)
            sends.extend(self._tell(key, watch, silent, now))
            self._settled(key, watch, owners, now)
        return sends

    def _settled(self, key: str, watch: _Watch, owners: tuple[int, ...], now: float) -> None:
        """Every owner has answered, and the ring has not changed for CUT_SHORT_KEEP: the watch's
        start need not outlive a crash any more (joins.py).  (A hub just started, its map still
        filling, is its keys' only owner for a moment: its own answer is not enough -- nor is
        any answer before it has seen its ring at all, as when it publishes at once.)"""
        moved = self._ring_moved
        if watch.settled or watch.alone_since is not None or moved is None or now - moved[1] < CUT_SHORT_KEEP:
            return
        if all(o in watch.snapshots for o in owners):
            watch.settled = True
            self.on_watch(key, None)

    def retry(self, now: float, after: float) -> list[Send]:
        """WATCHes unanswered for ``after`` seconds go again."""
        sends: list[Send] = []
        for key, watch in self.keys.items():
            late = tuple(o for o, at in watch.asked.items() if at + after <= now)  # the deadline's sum
            sends.extend(self._tell(key, watch, late, now))
        return sends

    def next_retry(self, after: float) -> float | None:
        times = [at for watch in self.keys.values() for at in watch.asked.values()]
        return min(times) + after if times else None

    def _tell(
        self, key: str, watch: _Watch, owners: tuple[int, ...], now: float, sent: int | None = None
    ) -> list[Send]:
        sent = self.sent_upto() if sent is None else sent
        for owner in owners:
            watch.told[owner] = self.membership.boot_of(owner)
            watch.asked[owner] = now
            watch.asked_seq.setdefault(owner, sent)  # the first ask counts: the answer covers from there
        return [(owners, wire.Watch(key=key))] if owners else []

    @staticmethod
    def _drop(watch: _Watch, owner: int, now: float) -> None:
        watch.snapshots.pop(owner, None)
        watch.versions.pop(owner, None)
        watch.asked.pop(owner, None)
        seq = watch.asked_seq.pop(owner, None)
        if seq is not None and (watch.cut_short is None or seq <= watch.cut_short[0]):
            watch.cut_short = (seq, now)

    def answer(self, src: int, frame: wire.InterestSet, last_seq: int, now: float) -> Answer:
        """An owner's INTEREST_SET: the hubs that became destinations under the key, those that
        said they want nothing under it any more, and, if a change was missed (its version is
        not the next one), a WATCH asking for everything."""
        watch = self.keys.get(frame.key)
        if watch is None or src not in watch.told:
            return Answer()  # not (or no longer) watching there
        asked_at: int | None = None
        if frame.full:
            snapshot: dict[int, tuple[str, ...]] = {}
            watch.snapshots[src] = snapshot
            if watch.asked.pop(src, None) is not None:
                asked_at = watch.asked_seq.pop(src, None)
        else:
            held = watch.snapshots.get(src)
            if held is None or frame.version != next_version(watch.versions[src]):
                if src in watch.asked:
                    return Answer()  # everything is on its way
                return Answer(sends=self._tell(frame.key, watch, (src,), now))
            snapshot = held
        watch.versions[src] = frame.version
        left = []
        for entry in frame.entries:
            if entry.patterns:
                snapshot[entry.hub] = entry.patterns
            else:
                snapshot.pop(entry.hub, None)
                if not frame.full:
                    left.append(entry.hub)
        joined = self._use(frame.key, watch, last_seq, now, asked_at)
        # Gone by its own word only once no owner's answer names it (the other owner's change
        # may not have come yet: a hub that subscribes again meanwhile never stopped being one).
        return Answer(joined=joined, left=[h for h in left if h not in watch.hubs])

    def _use(self, key: str, watch: _Watch, last_seq: int, now: float, asked_at: int | None = None) -> list[JoinNotice]:
        owners = self.membership.owners(key)
        if not any(o in watch.snapshots for o in owners):
            return []
        chosen = _in_use(watch, owners)
        # Until the watch is settled (every owner answered, the ring quiet CUT_SHORT_KEEP), the
        # answers in use may not have heard of every hub yet: hubs added meanwhile start where
        # the watch did.  (Every owner's answer is not enough: a hub cut off after a restart is
        # its keys' only owner, and its own answer names nobody -- world 150.)
        since = last_seq if watch.settled else watch.started_after
        if asked_at is not None:
            # The answer to a WATCH: hubs it adds may have been wanting since before it was
            # asked (an owner that answered first may not have known them yet), so they start
            # where this hub stood when it asked.
            since = min(since, asked_at)
        if watch.cut_short is not None:
            if now - watch.cut_short[1] < CUT_SHORT_KEEP:
                since = min(since, watch.cut_short[0])
            else:
                watch.cut_short = None
        moved = self._ring_moved
        if moved is not None and now - moved[1] < CUT_SHORT_KEEP:
            # A watch started about when the ring changed: its first sets may have been asked of
            # owners that had not heard yet of hubs whose INTEREST was on its way to them.
            fresh = watch.started_at >= moved[1] - RING_SEEN_WITHIN
            since = min(since, watch.started_after if fresh else max(moved[0], watch.started_after))
        watch.answered = True
        self._settled(key, watch, owners, now)
        table: InterestTable[int] = InterestTable()
        for hub, patterns in chosen.items():
            table.add(hub, patterns)
        before = watch.hubs
        watch.table = table
        watch.hubs = frozenset(chosen) - {self.self_id}
        self._dests.clear()
        # A hub across a split (or back from one for CUT_SHORT_KEEP) was in no answer while away,
        # however long it had wanted the key: the sets sent since it went are owed to it too (a
        # watch that began while 6 hubs stood split in two lost them for good).
        away, back = self._away, self._back
        owed = {h: away[h] for h in watch.hubs - before if h in away and now - back.get(h, now) < CUT_SHORT_KEEP}
        return [JoinNotice(hub=h, key=key, since=min(since, max(watch.started_after, owed[h])) if h in owed else since)
                for h in sorted(watch.hubs - before)]  # fmt: skip

    def answered(self, topics: tuple[str, ...]) -> bool:
        """Has every key these topics are watched under been answered once?"""
        keys = self.keys
        for topic in topics:
            for key in keys_of_topic(topic):
                watch = keys.get(key)
                if watch is None or not watch.answered:
                    return False
        return True

    def patterns_of(self, key: str, hub: int) -> tuple[str, ...]:
        """``hub``'s patterns under ``key``, as this hub knows them."""
        watch = self.keys.get(key)
        if watch is None:
            return ()
        return _in_use(watch, self.membership.owners(key)).get(hub, ())

    def hubs_of(self, key: str) -> frozenset[int]:
        watch = self.keys.get(key)
        return frozenset() if watch is None else watch.hubs

    def status(self) -> dict[str, dict[str, object]]:
        """Per watched key: answered yet, and the hubs (with their patterns) the owners' answers
        name: where a set published under it now goes, but for hubs the graph does not reach now
        (``STATUS``)."""
        out: dict[str, dict[str, object]] = {}
        for key, watch in sorted(self.keys.items()):
            chosen = _in_use(watch, self.membership.owners(key))
            hubs = {f"{h:016x}": list(p) for h, p in sorted(chosen.items()) if h != self.self_id}
            out[key] = {"answered": watch.answered, "hubs": hubs}
        return out


def _in_use(watch: _Watch, owners: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    """Where sets under a key go: every hub an owner's answer names, with the patterns of the
    first owner that names it.  While every hub counts the same owners, both answers agree;
    when maps differ for a while (a split healing, an allow-list not yet the same everywhere)
    a hub may have told only the owner its own map gives, and sets still reach it."""
    merged: dict[int, tuple[str, ...]] = {}
    for owner in owners:
        for hub, patterns in watch.snapshots.get(owner, {}).items():
            merged.setdefault(hub, patterns)
    return merged
