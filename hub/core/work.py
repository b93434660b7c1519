"""Work the core has for the pump: log followers and consumer groups with something to do.

A follower or group is *woken* when it may be able to move (a publish to a topic
it follows, room on its connection, credit, an ack, a member joining); the shell's
pump task then runs :meth:`WorkQueue.run_one` until nothing is left, yielding to
the event loop between steps, so a replay from ``earliest`` never starves the
rest of the hub.  A step that moved nothing drops the item until it is woken again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from .events import ev

log = logging.getLogger("pub0sub.hub.work")


class Job(Protocol):
    def step(self) -> bool:
        """Do one bounded piece of work; True if anything moved (run again soon)."""
        ...

    def failed(self, exc: Exception) -> None:
        """``step`` raised: end whatever this job serves, tell its client; the hub goes on."""
        ...


class WorkQueue:
    def __init__(self) -> None:
        self._ready: dict[Job, None] = {}
        #: Told when the queue goes from empty to not empty (the shell's pump wakes).
        self.on_work: Callable[[], None] = lambda: None
        #: Told when a consumer group starts waiting for acks (the shell's deadline timer, idle
        #: while no group waits, wakes: an idle hub has no timer firing 20 times a second).
        self.on_acks_awaited: Callable[[], None] = lambda: None

    def wake(self, job: Job) -> None:
        if not self._ready:
            self._ready[job] = None
            self.on_work()
        else:
            self._ready[job] = None

    def discard(self, job: Job) -> None:
        self._ready.pop(job, None)

    def __bool__(self) -> bool:
        return bool(self._ready)

    def __len__(self) -> int:
        return len(self._ready)

    def run_one(self) -> None:
        """One step of the oldest ready job; it goes to the back if it moved."""
        job = next(iter(self._ready))
        del self._ready[job]
        try:
            moved = job.step()
        except Exception as exc:  # a bug in one follower or group must not take the hub down
            log.exception("%r failed", job, extra=ev("job_failed"))
            job.failed(exc)
            return
        if moved:
            self._ready[job] = None
