"""Keep Python's cyclic collector off the objects of long-lived connections (C1 in docs/benchmarks.md).

Each idle connection is about 50 objects the collector tracks (its session, subscription,
socket, task, coroutine frames, cancel scopes).  At 19,000 connections that is a million
objects, and a full collection walks all of them: measured with gc.callbacks during C1,
1.2-1.4 s each, three of them in 20 publishes, each one a publish's time.  A full collection
comes once objects promoted since the last one exceed a quarter of those it kept, and every
publish to 19,000 connections promotes a few thousand (output queued while a young
collection runs), so they kept coming.

So the hub moves what has been alive for a while out of the collector's reach
(``gc.freeze``): :func:`run_gc_freezer` looks every :data:`CHECK_SECONDS`, and once
:data:`FREEZE_AFTER_SESSIONS` connections opened since the last freeze, it collects the young
generations (their garbage is not frozen) and freezes the rest.  Frozen objects are still freed
by their reference counts when a connection ends (a session keeps no reference cycle:
``ClientConnection.run`` breaks the one with its transport), but cyclic garbage among them would
stay.  That is bounded: once as many connections ended since the last freeze as half those open
at it (and at least :data:`FREEZE_AFTER_SESSIONS`), everything is unfrozen, collected once in
full, and frozen again -- one full pass per half of the connections renewed, where the collector
on its own would make one per few publishes.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass

import trio

from ..core.events import ev
from ..core.stats import HubStats

log = logging.getLogger("pub0sub.hub")

CHECK_SECONDS = 1.0
#: Connections opened since the last freeze that make the next one: about 50,000 objects.
FREEZE_AFTER_SESSIONS = 1_000


@dataclass
class FreezePolicy:
    """When to freeze and when to thaw, from the connections opened and ended (no I/O, no gc)."""

    freeze_after: int = FREEZE_AFTER_SESSIONS
    opened_at_freeze: int = 0
    ended_at_freeze: int = 0

    def decide(self, opened: int, ended: int) -> str | None:
        """``"thaw"``: unfreeze, collect in full, freeze; ``"freeze"``: collect the young, freeze; or None."""
        open_at_freeze = self.opened_at_freeze - self.ended_at_freeze
        action = None
        if ended - self.ended_at_freeze >= max(self.freeze_after, open_at_freeze // 2):
            action = "thaw"
        elif opened - self.opened_at_freeze >= self.freeze_after:
            action = "freeze"
        if action is not None:
            self.opened_at_freeze, self.ended_at_freeze = opened, ended
        return action


def apply(action: str) -> None:
    if action == "thaw":
        gc.unfreeze()
        gc.collect()
    else:
        gc.collect(1)
    gc.freeze()


async def run_gc_freezer(stats: HubStats, policy: FreezePolicy | None = None) -> None:
    policy = policy or FreezePolicy()
    while True:
        await trio.sleep(CHECK_SECONDS)
        action = policy.decide(stats.connections_total, sum(stats.connections_closed.values()))
        if action is not None:
            apply(action)
            log.debug("gc %s: %d objects frozen", action, gc.get_freeze_count(),
                      extra=ev("gc_frozen", x_action=action, x_frozen=gc.get_freeze_count()))  # fmt: skip
