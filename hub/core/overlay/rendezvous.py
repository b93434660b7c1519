"""Interest through rendezvous: who wants what, told only to the hubs that publish it.

A hub's patterns are grouped by rendezvous key (``membership.rendezvous_key``:
the first token, or ``*`` for a pattern that starts with a wildcard).  Each key
has two owners on the hash ring of reachable hubs.  Three roles, one class each:

* :class:`Registrations` -- this hub as a subscriber: it tells a key's owners
  its patterns under the key (INTEREST), again whenever the owners change or
  one of them restarts.  A hub-level subscribe costs two routed frames, however
  many hubs there are.
* :class:`OwnedKeys` -- this hub as an owner: it keeps every hub's patterns under
  its keys and the hubs that watch them.  Both owners answer a WATCH with
  everything and tell the watchers each change (INTEREST_SET, one routed frame
  to all of them): a publisher sends to every hub either owner names, so a hub
  that could tell only one of them (the two sides' maps differ for a while: a
  split healing, an allow-list not yet the same everywhere) is still reached.
  A hub that becomes primary tells every watcher everything.
* :class:`~hub.core.overlay.watching.Watching` (``watching.py``) -- this hub as a
  publisher: it watches the keys of the topics it publishes (the topic's first
  token, and ``*``) and keeps what the owners told it, from which come the hubs
  each topic goes to.

Nothing here sends: each method returns what to send, as ``(dests, frame)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import wire

from .membership import Membership, keys_of_topic, rendezvous_key

#: (destination hubs, control frame) for the core to route.
Send = tuple[tuple[int, ...], wire.Frame]


def group_by_key(patterns: Iterable[str]) -> dict[str, set[str]]:
    grouped: dict[str, set[str]] = {}
    for pattern in patterns:
        grouped.setdefault(rendezvous_key(pattern), set()).add(pattern)
    return grouped


def owners_changed(told: dict[int, int | None], owners: tuple[int, ...], membership: Membership) -> list[int]:
    """Owners not told yet, or restarted since they were told (their boot differs)."""
    return [o for o in owners if o not in told or told[o] != membership.boot_of(o)]


def interest_ack(key: str, hub: int, patterns: tuple[str, ...]) -> wire.InterestSet:
    """An owner's answer to INTEREST: version 0 (never a count of changes) says "I hold these for you"."""
    return wire.InterestSet(key=key, full=False, version=0, entries=(wire.InterestEntry(hub=hub, patterns=patterns),))


@dataclass(slots=True)
class _Unacked:
    sent_at: float
    tries: int = 1


class Registrations:
    """This hub's own patterns, by key, and which owners hold them.

    An INTEREST can be lost without a break its sender sees (a relay that has no route yet
    while the overlay forms): each owner acknowledges it (:func:`interest_ack`), and one not
    acknowledged is sent again, after ``retry``, doubling up to ``retry_max``.
    """

    def __init__(self, membership: Membership, clock: Callable[[], float] = lambda: 0.0) -> None:
        self.membership = membership
        self.clock = clock
        self.patterns: dict[str, set[str]] = {}
        #: key -> owner -> the owner's boot when it was told
        self._told: dict[str, dict[int, int | None]] = {}
        #: (key, owner) -> an INTEREST not acknowledged yet
        self.unacked: dict[tuple[str, int], _Unacked] = {}

    def acked(self, owner: int, frame: wire.InterestSet) -> None:
        """``owner`` holds what its acknowledgement says: done, if that is what this hub wants now."""
        mine = tuple(sorted(self.patterns.get(frame.key, ())))
        if all(e.hub == self.membership.self_id and e.patterns == mine for e in frame.entries):
            self.unacked.pop((frame.key, owner), None)

    def retry(self, now: float, after: float, at_most: float) -> list[Send]:
        """INTERESTs unacknowledged for their wait go again, to owners that still are."""
        sends: list[Send] = []
        for (key, owner), wait in list(self.unacked.items()):
            if wait.sent_at + min(after * 2 ** (wait.tries - 1), at_most) > now:
                continue
            if owner not in self.membership.owners(key):
                del self.unacked[(key, owner)]  # refresh() tells the new owners
                continue
            sends.extend(self._tell(key, (owner,)))
            self.unacked[(key, owner)].tries = wait.tries + 1
        return sends

    def next_retry(self, after: float, at_most: float) -> float | None:
        waits = [w.sent_at + min(after * 2 ** (w.tries - 1), at_most) for w in self.unacked.values()]
        return min(waits) if waits else None

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
            fresh = owners_changed(told, owners, self.membership)
            if fresh:
                sends.extend(self._tell(key, tuple(fresh)))
        return sends

    def status(self) -> dict[str, dict[str, list[str]]]:
        """Per key: this hub's patterns, and the owners that have not acknowledged them (``STATUS``)."""
        unacked: dict[str, list[str]] = {}
        for key, owner in sorted(self.unacked):
            unacked.setdefault(key, []).append(f"{owner:016x}")
        return {k: {"patterns": sorted(p), "unacked": unacked.get(k, [])} for k, p in sorted(self.patterns.items())}

    def _tell(self, key: str, owners: tuple[int, ...]) -> list[Send]:
        told = self._told.setdefault(key, {})
        now = self.clock()
        for owner in owners:
            told[owner] = self.membership.boot_of(owner)
            self.unacked[(key, owner)] = _Unacked(now)
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
        """``src``'s INTEREST: acknowledged (a repeat too), and a change told to the watchers."""
        ack: list[Send] = [((src,), interest_ack(key, src, patterns))]
        owned = self._key(key)
        if owned.interest.get(src, ()) == patterns:
            return ack
        if patterns:
            owned.interest[src] = patterns
        else:
            owned.interest.pop(src, None)
        return ack + self._tell_change(key, owned, [wire.InterestEntry(hub=src, patterns=patterns)])

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

    def status(self) -> dict[str, dict[str, object]]:
        """Per owned key: primary or not, every hub's patterns under it, how many watch it (``STATUS``)."""
        return {
            key: {
                "primary": owned.primary,
                "hubs": {f"{h:016x}": list(p) for h, p in sorted(owned.interest.items())},
                "watchers": len(owned.watchers),
            }
            for key, owned in sorted(self.keys.items())
        }

    def _tell_change(self, key: str, owned: _Owned, entries: list[wire.InterestEntry]) -> list[Send]:
        owned.version = next_version(owned.version)
        if not owned.watchers:
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
