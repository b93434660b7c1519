"""Named consumer state that outlives connections: durable subscriptions and groups.

Kept in ``<data-dir>/consumers.json``, rewritten atomically (write, fsync,
rename) at most every ``SAVE_INTERVAL`` seconds when positions moved.  A
hub crash can therefore lose up to that much acknowledgement progress: those
messages are delivered again (at-least-once); the SDK drops offsets it has
already delivered, so an application sees no duplicate within a process.

A client that must not see them again waits for its COMMIT to be answered
(:meth:`ConsumerRegistry.when_saved`): the answer comes once a save that holds
its acknowledgements is on disk.  Saves run in a worker thread (the shell's
``run_position_saver``), and every COMMIT that arrives meanwhile waits for the
next one: one fsync serves many (group commit).

A new durable name or group, or new topics for one, is different: it is on
disk before the hub confirms it (:meth:`ConsumerRegistry.save_if_urgent`, before
SUB_OK).  Forgetting it in a crash would forget its standing interest, and in a
mesh nothing published meanwhile would be forwarded here at all.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire import AckMode

from ..storage.statefile import VersionedStateFile
from .acks import AckTracker
from .events import ev

log = logging.getLogger("pub0sub.hub.consumers")

SAVE_INTERVAL = 0.2
#: How often the tick runs while no position moves: expiry counts in minutes, not in 0.2 s.
IDLE_TICK = 1.0
FILE_NAME = "consumers.json"


@dataclass(eq=False)
class ConsumerState:
    """Positions of one durable subscription or one consumer group."""

    kind: str  # "durable" or "group"
    name: str
    patterns: list[str]
    ack_mode: AckMode
    #: per topic: everything below ``floor`` is acknowledged
    positions: dict[str, AckTracker] = field(default_factory=dict)
    last_active: float = field(default_factory=time.time)
    attached: int = 0

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "patterns": self.patterns,
            "ack_mode": int(self.ack_mode),
            "positions": {t: tr.floor for t, tr in self.positions.items()},
            "last_active": self.last_active,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConsumerState:
        return cls(
            kind=data["kind"],
            name=data["name"],
            patterns=list(data["patterns"]),
            ack_mode=AckMode(data["ack_mode"]),
            positions={t: AckTracker(int(f)) for t, f in data["positions"].items()},
            last_active=float(data["last_active"]),
        )


class StandingInterest:
    """Keeps the topics of a durable subscription or group wanted while nobody is attached.

    Registered in the routing table like a subscription that is never live: messages
    for those topics are still stored here -- and, in a mesh, still forwarded here --
    so a consumer that comes back finds everything published while it was away.
    """

    live = False

    def __init__(self, state: ConsumerState) -> None:
        self.state = state
        self.patterns: list[str] = []

    def wake(self) -> None:
        """Nothing to wake: the consumer's follower or group reads the log when it returns."""


class ConsumerRegistry:
    def __init__(self, root: Path, *, expiry_seconds: float) -> None:
        self.path = root / FILE_NAME
        self.file = VersionedStateFile(self.path)
        self.expiry_seconds = expiry_seconds
        self.states: dict[str, ConsumerState] = {}
        self._dirty = False
        #: bumped by every change; a save holds the version it was taken at
        self.version = 0
        self.saved_version = 0
        #: (version needed, callback(error)) of COMMITs waiting for a save
        self._waiting: list[tuple[int, Callable[[OSError | None], None]]] = []
        #: Told when a save is wanted (the shell's position saver wakes up); None: save at once.
        self.on_save_wanted: Callable[[], None] | None = None
        #: Told by the next change (the shell's tick, slow while nothing changes, hurries up).
        self.on_touched: Callable[[], None] | None = None
        #: a name was created or its topics changed: saved before the hub confirms it
        self._urgent = False
        self.saves = 0
        #: called when a consumer's topics are set or changed, and when it is forgotten
        self.on_patterns: Callable[[ConsumerState], None] | None = None
        self.on_forget: Callable[[ConsumerState], None] | None = None

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            # Losing positions means redelivery, never loss: say so, start fresh.
            log.error("%s unreadable (%s): durable positions restart from their start options", self.path, exc,
                      extra=ev("consumers_unreadable"))
            return
        for item in data.get("consumers", []):
            state = ConsumerState.from_json(item)
            self.states[state.key] = state

    def get(self, kind: str, name: str) -> ConsumerState | None:
        return self.states.get(f"{kind}:{name}")

    def add(self, state: ConsumerState) -> None:
        self.states[state.key] = state
        self.patterns_changed(state)

    def patterns_changed(self, state: ConsumerState) -> None:
        if self.on_patterns is not None:
            self.on_patterns(state)
        self._urgent = True
        self.touch()

    def save_if_urgent(self) -> None:
        """Save now if a name was created or its topics changed (raises OSError)."""
        if self._urgent:
            self.save()

    def touch(self) -> None:
        self._dirty = True
        self.version += 1
        if self.on_touched is not None:
            self.on_touched()

    def snapshot(self) -> tuple[int, bytes]:
        """The state to save now: its version and the file's bytes (taken in the loop)."""
        document = {"consumers": [s.to_json() for s in self.states.values()]}
        return self.version, json.dumps(document, separators=(",", ":")).encode()

    def save(self) -> None:
        """Save now, from the calling thread (raises OSError)."""
        version, data = self.snapshot()
        self.file.write(data, version)
        self.saved(version, None)

    def saved(self, version: int, error: OSError | None) -> None:
        """A save of state ``version`` finished (``error``: it failed); answer who waited for it."""
        if error is None:
            self.saves += 1
            self.saved_version = max(self.saved_version, version)
            if self.saved_version >= self.version:
                self._dirty = self._urgent = False
        waiting, self._waiting = self._waiting, []
        for needed, callback in waiting:
            if error is not None:
                callback(error)
            elif needed <= self.saved_version:
                callback(None)
            else:
                self._waiting.append((needed, callback))
        if self._waiting:
            self._want_save()

    def when_saved(self, callback: Callable[[OSError | None], None]) -> None:
        """Call ``callback(None)`` once everything changed so far is on disk, or ``callback(error)``."""
        if self.saved_version >= self.version:
            callback(None)
            return
        self._waiting.append((self.version, callback))
        self._want_save()

    def _want_save(self) -> None:
        if self.on_save_wanted is not None:
            self.on_save_wanted()
            return
        try:
            self.save()
        except OSError as exc:
            log.error("cannot save %s: %s", self.path, exc, extra=ev("consumers_save_failed"))
            self.saved(self.version, exc)

    @property
    def save_wanted(self) -> bool:
        return self._dirty or bool(self._waiting)

    def expire(self, now: float) -> list[ConsumerState]:
        """Forget consumers nobody attached to for ``expiry_seconds``."""
        gone = [s for s in self.states.values() if not s.attached and now - s.last_active > self.expiry_seconds]
        for state in gone:
            del self.states[state.key]
            if self.on_forget is not None:
                self.on_forget(state)
            log.info("%s %r expired after %.0fs idle", state.kind, state.name, now - state.last_active,
                     extra=ev("consumer_expired", x_consumer=state.name, x_kind=state.kind))
        if gone:
            self.touch()
        return gone

    def keep_from(self, topic: str) -> int | None:
        """Lowest unacknowledged offset of ``topic`` over all consumers (retention bound)."""
        floors = [s.positions[topic].floor for s in self.states.values() if topic in s.positions]
        return min(floors) if floors else None

    def tick(self, now: float) -> None:
        """``SAVE_INTERVAL`` after a change, else every ``IDLE_TICK`` seconds (the shell's timer):
        expire idle names, save moved positions.

        ``now`` is wall-clock seconds: expiry outlives restarts, so it is measured on the wall clock.
        """
        for state in self.states.values():
            if state.attached:
                state.last_active = now
        self.expire(now)
        if self._dirty:
            self._want_save()
