"""Where this hub's sets for each destination start: the JOINED it told, kept across restarts.

When a hub becomes a destination of this hub's sets under a key, this hub tells it where
they start (JOINED ``since``); the destination repairs anything after that start it did not
get.  A destination that was one before keeps its *first* start: it may have been dropped
while an owner changed, or have been down, and what was sent meanwhile is still owed to it.

That memory must survive this hub's restart, and so must the floors a switch from the v2 full
mesh leaves for a while (:meth:`Joins.handed_over`).  A destination that was paused when it was first
told (or lost the JOINED on the way) holds no start of its own; a restarted origin that had
forgotten its promise would tell it the origin's position at the restart, and the destination,
having nothing earlier, would take it: every set between the first start and the restart lost,
silently (found by the mesh fault plan "pause h3 | kill h2 | restart h2 | resume h3" run on the
overlay).  So every change is saved (``save``: the hub's ``DATA/overlay-joins.json``, the
simulator's store), and a restarted hub begins from what was saved.

The same goes for a key whose watch not every owner has answered yet: the hubs a late answer
names get this hub's sets under the key from the watch's start on (sets sent meanwhile went
only where the first answer said, or wait parked).  A hub that crashes before the last answer
came has stored those sets, but the hubs only that answer would name are owed them and nobody
knows it; restarted, this hub would watch the key again only when it next publishes under it,
from then on (found by tests/test_overlay_properties.py: a subscriber hub down while the only
other owner of its key was the publisher's own hub).  So the watch's start is saved too (as hub
0, which no hub is: :data:`UNSETTLED`), and a restarted hub watches those keys again from there
at once.

Starts restored from the file are not dropped until the destination leaves (an answer that no
longer names it) or is forgotten by the membership.  Checking them against the first answer
after a restart is not safe: a restarted hub's map is partial for a moment, and a hub it takes
for the key's owner then answers that nobody wants the key (seen in the simulator).  The price:
a destination that left while this hub was down, and joins again later, is told its first start
and repairs the sets between its leaving and its return (more than it asked for, never less).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

Key = tuple[int, str]
#: The "hub" under which a watched key that not every owner has answered yet keeps its start.
UNSETTLED = 0
#: The "key" under which a hand-over's floor is saved: no topic's first token is empty.
HANDED_OVER = ""
#: Seconds after a v2 link gave way to the overlay during which starts told its peer go no later
#: than what that link still owed (:meth:`Joins.handed_over`): the peer's interest reaches this
#: hub's watches through the rendezvous within seconds; past this, a start lowered for it would
#: only hand a new subscription history it did not ask for.
HAND_OVER_KEEP = 120.0


class Joins:
    def __init__(
        self, save: Callable[[Mapping[Key, int]], None], restored: Mapping[Key, int] | None = None, *, now: float = 0.0
    ) -> None:
        self._save = save
        restored = dict(restored or {})
        #: hub -> (the sequence its v2 link owed sets after, until when starts told it go no later);
        #: restored ones keep a whole HAND_OVER_KEEP from the restart (longer, never shorter)
        self.floors: dict[int, tuple[int, float]] = {
            hub: (after, now + HAND_OVER_KEEP) for (hub, key), after in restored.items() if key == HANDED_OVER
        }
        #: (hub, key) -> the since told in JOINED
        self.starts: dict[Key, int] = {k: s for k, s in restored.items() if k[1] != HANDED_OVER}

    def tell(self, hub: int, key: str, since: int, now: float) -> int:
        """``hub`` is a destination under ``key`` from ``since`` on: the start to tell it (the first)."""
        changed = False
        floor = self.floors.get(hub)
        if floor is not None:
            if now <= floor[1]:
                since = min(since, floor[0])
            else:
                del self.floors[hub]
                changed = True
        before = self.starts.get((hub, key))
        start = since if before is None else min(before, since)
        if start != before:
            self.starts[(hub, key)] = start
            changed = True
        if changed:
            self._persist()
        return start

    def handed_over(self, hub: int, after: int, now: float) -> list[tuple[str, int]]:
        """``hub``'s v2 link gave way to the overlay owing it this hub's sets after ``after``
        (hub/core/mesh/switch.py): starts told it for a while go no later.  Returns the
        ``(key, start)`` told it already that must be told again, lowered.

        Saved with the starts: a hub that crashed within the while and told such a hub a start
        past ``after`` would leave the sets its v2 link owed owed for good.
        """
        held = self.floors.get(hub)
        self.floors[hub] = (after if held is None else min(after, held[0]), now + HAND_OVER_KEEP)
        if held is None or after < held[0]:
            self._persist()
        return [(key, after) for key, since in self.of_hub(hub) if since > after]

    def get(self, hub: int, key: str) -> int | None:
        return self.starts.get((hub, key))

    def left(self, hub: int, key: str) -> None:
        """``hub`` is no longer a destination under ``key`` (by its own word)."""
        if self.starts.pop((hub, key), None) is not None:
            self._persist()

    def forget_hubs(self, gone: Iterable[int]) -> None:
        """Hubs forgotten by the membership (unreachable for long): their starts go."""
        gone = set(gone)
        stale = [k for k in self.starts if k[0] in gone]
        for k in stale:
            del self.starts[k]
        floors = [hub for hub in gone if self.floors.pop(hub, None) is not None]
        if stale or floors:
            self._persist()

    def watching(self, key: str, since: int | None) -> None:
        """A watch of ``key`` started after this hub's sequence ``since``, or (None) every owner answered."""
        if since is None:
            self.left(UNSETTLED, key)
        elif self.starts.setdefault((UNSETTLED, key), since) == since:
            self._persist()

    def unsettled(self) -> list[tuple[str, int]]:
        """``(key, since)`` of watches not settled (some owner had not answered) before a restart."""
        return self.of_hub(UNSETTLED)

    def hubs_by_key(self) -> dict[str, set[int]]:
        """The hubs told JOINED under each key."""
        by_key: dict[str, set[int]] = {}
        for hub, key in self.starts:
            if hub != UNSETTLED:
                by_key.setdefault(key, set()).add(hub)
        return by_key

    def hubs(self) -> set[int]:
        return {hub for hub, _ in self.starts if hub != UNSETTLED}

    def of_hub(self, hub: int) -> list[tuple[str, int]]:
        """``(key, since)`` told to ``hub`` (a list: the caller tells them again, which may change them)."""
        return [(k, s) for (h, k), s in self.starts.items() if h == hub]

    def _persist(self) -> None:
        """Save the starts, and the hand-over floors as ``(hub, HANDED_OVER)`` rows beside them."""
        self._save({**self.starts, **{(hub, HANDED_OVER): after for hub, (after, _) in self.floors.items()}})
