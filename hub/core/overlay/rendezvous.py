"""Interest through rendezvous: who wants what, told only to the hubs that publish it.

A hub's patterns are grouped by rendezvous key (``membership.rendezvous_key``:
the first token, or ``*`` for a pattern that starts with a wildcard).  Each key
has two owners on the hash ring of reachable hubs.  Three roles, one class each:

* :class:`Registrations` -- this hub as a subscriber: it tells a key's owners
  its patterns under the key (INTEREST), again whenever the owners change or
  one of them restarts.  A hub-level subscribe costs two routed frames, however
  many hubs there are.
* :class:`OwnedKeys` -- this hub as an owner: it keeps every hub's patterns under
  its keys and the hubs that watch them.  The primary owner tells the watchers
  each change (INTEREST_SET, one routed frame to all of them); both owners
  answer a WATCH with everything, and a hub that becomes primary tells every
  watcher everything.
* :class:`Watching` -- this hub as a publisher: it watches the keys of the
  topics it publishes (the topic's first token, and ``*``) and keeps what the
  owners told it, from which come the hubs each topic goes to.

Nothing here sends: each method returns what to send, as ``(dests, frame)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import wire

from ..mesh.interest import InterestTable
from .membership import Membership, keys_of_topic, rendezvous_key

#: (destination hubs, control frame) for the core to route.
Send = tuple[tuple[int, ...], wire.Frame]


def group_by_key(patterns: Iterable[str]) -> dict[str, set[str]]:
    grouped: dict[str, set[str]] = {}
    for pattern in patterns:
        grouped.setdefault(rendezvous_key(pattern), set()).add(pattern)
    return grouped


def _owners_changed(told: dict[int, int | None], owners: tuple[int, ...], membership: Membership) -> list[int]:
    """Owners not told yet, or restarted since they were told (their boot differs)."""
    return [o for o in owners if o not in told or told[o] != membership.boot_of(o)]


class Registrations:
    """This hub's own patterns, by key, and which owners hold them."""

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.patterns: dict[str, set[str]] = {}
        #: key -> owner -> the owner's boot when it was told
        self._told: dict[str, dict[int, int | None]] = {}

    def wants(self, topic: str, match: Callable[[str, str], bool]) -> bool:
        return any(match(p, topic) for key in keys_of_topic(topic) for p in self.patterns.get(key, ()))

    def change(self, added: Iterable[str], removed: Iterable[str]) -> list[Send]:
        """Local patterns added and removed: tell each changed key's owners."""
        touched: set[str] = set()
        for pattern in added:
            key = rendezvous_key(pattern)
            self.patterns.setdefault(key, set()).add(pattern)
            touched.add(key)
        for pattern in removed:
            key = rendezvous_key(pattern)
            have = self.patterns.get(key)
            if have is not None and pattern in have:
                have.discard(pattern)
                touched.add(key)
        sends = []
        for key in sorted(touched):
            sends.extend(self._tell(key, self.membership.owners(key)))
            if not self.patterns.get(key):
                self.patterns.pop(key, None)
                self._told.pop(key, None)
        return sends

    def refresh(self) -> list[Send]:
        """The graph changed: tell new or restarted owners of every key."""
        sends = []
        for key in self.patterns:
            owners = self.membership.owners(key)
            told = self._told.get(key, {})
            for owner in list(told):
                if owner not in owners:
                    del told[owner]
            fresh = _owners_changed(told, owners, self.membership)
            if fresh:
                sends.extend(self._tell(key, tuple(fresh)))
        return sends

    def recheck(self) -> list[Send]:
        """Frames may have been lost in a break: tell every owner again (it ignores a repeat)."""
        sends = []
        for key in self.patterns:
            sends.extend(self._tell(key, self.membership.owners(key)))
        return sends

    def _tell(self, key: str, owners: tuple[int, ...]) -> list[Send]:
        told = self._told.setdefault(key, {})
        for owner in owners:
            told[owner] = self.membership.boot_of(owner)
        frame = wire.Interest(key=key, patterns=tuple(sorted(self.patterns.get(key, ()))))
        return [(owners, frame)] if owners else []


def next_version(version: int) -> int:
    """The version after ``version``: 1..2^32-1, wrapping past 0 (0 means "none")."""
    return version % 0xFFFFFFFF + 1


@dataclass(slots=True)
class _Owned:
    version: int
    interest: dict[int, tuple[str, ...]] = field(default_factory=dict)
    watchers: set[int] = field(default_factory=set)
    primary: bool = False


class OwnedKeys:
    """The keys this hub owns: every hub's patterns under them, and who watches them."""

    def __init__(self, membership: Membership, version_base: int) -> None:
        self.membership = membership
        self.self_id = membership.self_id
        self.keys: dict[str, _Owned] = {}
        #: Versions of a key start here, different for each boot of this hub, so a watcher's
        #: version from before a restart does not pass for the new state's.
        self.version_base = next_version(version_base)

    def _key(self, key: str) -> _Owned:
        owned = self.keys.get(key)
        if owned is None:
            primary = self.membership.owners(key)[:1] == (self.self_id,)
            owned = self.keys[key] = _Owned(version=self.version_base, primary=primary)
        return owned

    def interest(self, src: int, key: str, patterns: tuple[str, ...]) -> list[Send]:
        owned = self._key(key)
        if owned.interest.get(src, ()) == patterns:
            return []
        if patterns:
            owned.interest[src] = patterns
        else:
            owned.interest.pop(src, None)
        return self._tell_change(key, owned, [wire.InterestEntry(hub=src, patterns=patterns)])

    def watch(self, src: int, key: str, on: bool, version: int = 0) -> list[Send]:
        """A WATCH: everything to ``src``, unless it already holds this version."""
        owned = self._key(key)
        if not on:
            owned.watchers.discard(src)
            self._drop_if_empty(key, owned)
            return []
        owned.watchers.add(src)
        if version == owned.version:
            return []
        return [((src,), self._snapshot(key, owned))]

    def forget(self, hubs: Iterable[int]) -> list[Send]:
        """Hubs gone for good: their interest and watches go."""
        gone = set(hubs)
        sends = []
        for key, owned in list(self.keys.items()):
            owned.watchers -= gone
            dropped = [h for h in owned.interest if h in gone]
            for hub in dropped:
                del owned.interest[hub]
            if dropped:
                sends.extend(self._tell_change(key, owned, [wire.InterestEntry(hub=h, patterns=()) for h in dropped]))
            self._drop_if_empty(key, owned)
        return sends

    def refresh(self) -> list[Send]:
        """The graph changed: a key this hub became primary for gets every watcher told everything."""
        sends: list[Send] = []
        for key, owned in self.keys.items():
            primary = self.membership.owners(key)[:1] == (self.self_id,)
            if primary and not owned.primary and owned.watchers:
                sends.append((tuple(sorted(owned.watchers)), self._snapshot(key, owned)))
            owned.primary = primary
        return sends

    def _tell_change(self, key: str, owned: _Owned, entries: list[wire.InterestEntry]) -> list[Send]:
        owned.version = next_version(owned.version)
        if not owned.primary or not owned.watchers:
            return []
        frame = wire.InterestSet(key=key, full=False, version=owned.version, entries=tuple(entries))
        return [(tuple(sorted(owned.watchers)), frame)]

    @staticmethod
    def _snapshot(key: str, owned: _Owned) -> wire.InterestSet:
        entries = tuple(wire.InterestEntry(hub=h, patterns=p) for h, p in sorted(owned.interest.items()))
        return wire.InterestSet(key=key, full=True, version=owned.version, entries=entries)

    def _drop_if_empty(self, key: str, owned: _Owned) -> None:
        if not owned.interest and not owned.watchers:
            self.keys.pop(key, None)


@dataclass(slots=True)
class _Watch:
    #: owner -> its boot when the WATCH went out
    told: dict[int, int | None] = field(default_factory=dict)
    #: owner -> what it told us (hub -> patterns), and the version of that
    snapshots: dict[int, dict[int, tuple[str, ...]]] = field(default_factory=dict)
    versions: dict[int, int] = field(default_factory=dict)
    #: owner -> when this hub last asked it for everything (a WATCH it has not answered yet)
    asked: dict[int, float] = field(default_factory=dict)
    #: The hubs this key's sets go to, from the snapshot in use.
    table: InterestTable[int] = field(default_factory=InterestTable)
    hubs: frozenset[int] = frozenset()
    #: This hub's last sequence when the watch started: hubs in the first answer get sets after it.
    started_after: int = 0
    answered: bool = False
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

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.self_id = membership.self_id
        self.keys: dict[str, _Watch] = {}
        self._dests: dict[str, frozenset[int]] = {}

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
                watch = self.keys[key] = _Watch(started_after=last_seq)
                sends.extend(self._tell(key, watch, self.membership.owners(key), now))
            watch.last_used = now
        return sends

    def idle(self, now: float, idle_for: float) -> list[Send]:
        """Stop watching keys not published under for ``idle_for`` seconds."""
        sends: list[Send] = []
        for key, watch in list(self.keys.items()):
            if now - watch.last_used >= idle_for:
                owners = tuple(watch.told)
                if owners:
                    sends.append((owners, wire.Watch(key=key, on=False)))
                del self.keys[key]
                self._dests.clear()
        return sends

    def refresh(self, now: float) -> list[Send]:
        """The graph changed: watch with new or restarted owners; drop what old owners said."""
        sends = []
        for key, watch in self.keys.items():
            owners = self.membership.owners(key)
            for owner in list(watch.told):
                if owner not in owners:
                    del watch.told[owner]
                    self._drop(watch, owner)
            fresh = _owners_changed(watch.told, owners, self.membership)
            for owner in fresh:
                self._drop(watch, owner)
            if fresh:
                sends.extend(self._tell(key, watch, tuple(fresh), now))
        return sends

    def recheck(self, now: float) -> list[Send]:
        """Frames may have been lost in a break: each key's owner in use says whether this hub
        holds its latest version (it answers only if not); owners never heard from are asked again."""
        sends: list[Send] = []
        for key, watch in self.keys.items():
            owners = self.membership.owners(key)
            in_use = next((o for o in owners if o in watch.snapshots), None)
            if in_use is not None:
                sends.append(((in_use,), wire.Watch(key=key, version=watch.versions[in_use])))
            silent = tuple(o for o in owners if o not in watch.snapshots)
            sends.extend(self._tell(key, watch, silent, now))
        return sends

    def retry(self, now: float, after: float) -> list[Send]:
        """WATCHes unanswered for ``after`` seconds go again."""
        sends: list[Send] = []
        for key, watch in self.keys.items():
            late = tuple(o for o, at in watch.asked.items() if now - at >= after)
            sends.extend(self._tell(key, watch, late, now))
        return sends

    def next_retry(self, after: float) -> float | None:
        times = [at for watch in self.keys.values() for at in watch.asked.values()]
        return min(times) + after if times else None

    def _tell(self, key: str, watch: _Watch, owners: tuple[int, ...], now: float) -> list[Send]:
        for owner in owners:
            watch.told[owner] = self.membership.boot_of(owner)
            watch.asked[owner] = now
        return [(owners, wire.Watch(key=key))] if owners else []

    @staticmethod
    def _drop(watch: _Watch, owner: int) -> None:
        watch.snapshots.pop(owner, None)
        watch.versions.pop(owner, None)
        watch.asked.pop(owner, None)

    def answer(self, src: int, frame: wire.InterestSet, last_seq: int, now: float) -> Answer:
        """An owner's INTEREST_SET: the hubs that became destinations under the key, those that
        said they want nothing under it any more, and, if a change was missed (its version is
        not the next one), a WATCH asking for everything."""
        watch = self.keys.get(frame.key)
        if watch is None or src not in watch.told:
            return Answer()  # not (or no longer) watching there
        if frame.full:
            snapshot: dict[int, tuple[str, ...]] = {}
            watch.snapshots[src] = snapshot
            watch.asked.pop(src, None)
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
        return Answer(joined=self._use(frame.key, watch, last_seq), left=left)

    def _use(self, key: str, watch: _Watch, last_seq: int) -> list[JoinNotice]:
        owners = self.membership.owners(key)
        chosen = next((watch.snapshots[o] for o in owners if o in watch.snapshots), None)
        if chosen is None:
            return []
        # Until every owner has answered, the answer in use may be one that had not heard of
        # every hub yet: hubs added meanwhile start where the first answer's did.
        settled = watch.answered and all(o in watch.snapshots for o in owners)
        since = last_seq if settled else watch.started_after
        watch.answered = True
        table: InterestTable[int] = InterestTable()
        for hub, patterns in chosen.items():
            table.add(hub, patterns)
        before = watch.hubs
        watch.table = table
        watch.hubs = frozenset(chosen) - {self.self_id}
        self._dests.clear()
        return [JoinNotice(hub=h, key=key, since=since) for h in sorted(watch.hubs - before)]

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
        owners = self.membership.owners(key)
        chosen = next((watch.snapshots[o] for o in owners if o in watch.snapshots), {})
        return chosen.get(hub, ())

    def hubs_of(self, key: str) -> frozenset[int]:
        watch = self.keys.get(key)
        return frozenset() if watch is None else watch.hubs
