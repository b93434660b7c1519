"""Replay from the log: a peer that missed this hub's forwards gets them from the hub's own logs.

The window (``window.py``) holds forwards in memory and is bounded; it cannot
cover a peer that stayed down past ``resume_linger`` (its interest was
withdrawn, nothing was queued for it), a window that overflowed, or a hub that
restarted with forwards unacknowledged.  A hub with durable logs still has
every one of those messages, so a session sends them again from the logs:

* at the start of a v2 session, everything of this hub's origin after the
  peer's MESH_HELLO position, up to what the window will carry, for the topics
  the peer announces (``PeerSession._start_replay``);
* during a session, the range the window evicted before it was sent.

A replay is sent before any forward that follows it, in origin-sequence order,
so the receiver's (origin, seq) high-water mark keeps working: nothing it
stored is stored twice, and nothing after the replay overtakes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from .window import WindowEntry


class ReplaySource(Protocol):
    """What the mesh needs from the hub's storage to replay its own publishes."""

    def next_origin_seq(self) -> int:
        """The origin sequence the hub's next publish will take."""
        ...

    def own_sets(
        self, wants: Callable[[str], bool], after: int, before: int, on_hole: Callable[[str], None]
    ) -> Iterator[WindowEntry]:
        """This hub's own sets with a sequence in ``(after, before)`` in a topic ``wants``, in order.

        Each set comes once (a set with several topics sits in each topic's log).
        ``on_hole(reason)`` is called for a stretch of a log that cannot be
        read any more (retention, a checksum mismatch).
        """
        ...


class Replay:
    """A replay in progress: sets pulled from a :class:`ReplaySource` as the writer has room."""

    def __init__(self, sets: Iterator[WindowEntry]) -> None:
        self._sets = sets
        self._next: WindowEntry | None = None
        self.done = False

    def take(self, max_bytes: int, max_sets: int) -> list[WindowEntry]:
        """Up to ``max_bytes``/``max_sets`` of the next sets (at least one unless done)."""
        taken: list[WindowEntry] = []
        size = 0
        while len(taken) < max_sets:
            entry = self._next
            if entry is None:
                entry = next(self._sets, None)
                if entry is None:
                    self.done = True
                    break
            if taken and size + len(entry.encoded) > max_bytes:
                self._next = entry
                break
            self._next = None
            taken.append(entry)
            size += len(entry.encoded)
        return taken
