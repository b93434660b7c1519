"""A watchdog on the hub's event loop: when no task has run for a while, say where it is stuck.

Everything a hub does runs in one trio loop.  A step that never yields -- a loop over a
large backlog, a call that blocks -- stops every connection, heartbeat, acknowledgement and
log line at once, and from outside such a hub looks like one that is merely quiet: a suite
run once saw a publishing hub write nothing for 51 s while its publisher got no answer
(docs/scale.md), and nothing was left to say why.

So a task refreshes a timestamp every :data:`BEAT_SECONDS`, and a thread (it runs while the
loop does not: the GIL is handed over every few milliseconds even to a loop that never yields)
looks at it as often.  Once it is older than :data:`STALL_SECONDS` (3 s), the thread logs a WARNING
with the stack of the loop's thread as it is then, and when the loop runs again, another with
how long it was stopped.  An idle loop is never reported (it still runs the beat); a stack that
ends in trio's wait in the kernel (``get_events``) means the step ended just as it was taken, or
the process got no CPU.  The cost is one wake-up of the loop and one of the thread per second.

The process stopped whole (SIGSTOP, a suspended VM) stops the thread too: it finds on waking that
it overslept, and says so (``process_paused``) instead of blaming the loop.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

import trio

from ..core.events import ev
from ..core.stats import HubStats

log = logging.getLogger("pub0sub.hub")

#: The events it logs (``event=`` in each line).
STALLED, STALL_ENDED, PAUSED = "loop_stalled", "loop_stall_ended", "process_paused"

BEAT_SECONDS = 1.0
#: How long the loop may go without running the beat before the thread reports it: with a beat
#: a second, a step that held the loop for 2-3 s or more (nats-server warns of a read loop that
#: took 2 s; a hub's clients see such a step as their latency).
STALL_SECONDS = 3.0


class LoopWatchdog:
    """The loop's beat, and the thread that reports when it stops (:func:`run_loop_watchdog`)."""

    def __init__(self, stats: HubStats, *, stall_seconds: float = STALL_SECONDS, beat_seconds: float = BEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.stats = stats
        self.stall_seconds = stall_seconds
        self.beat_seconds = beat_seconds
        self._clock = clock
        self._beat = clock()
        self._looked = self._beat  # when the thread last looked
        self._stalled_since: float | None = None  # the last beat before the stall being reported
        self.loop_thread = threading.get_ident()  # set again by run_loop_watchdog, from the loop
        self._stopped = threading.Event()

    def beat(self) -> None:
        self._beat = self._clock()

    def watch(self) -> None:
        """The thread's body: a look every beat until :meth:`stop`."""
        while not self._stopped.wait(self.beat_seconds):
            self.look()

    def look(self) -> None:
        """Report a stall once when the beat grows old, and its end when the loop beats again."""
        now = self._clock()
        looked, self._looked = self._looked, now
        beat, since = self._beat, self._stalled_since
        if since is not None and beat != since:
            self._ended(beat - since)
            self._stalled_since = since = None
        if now - looked > self.stall_seconds:
            # This thread did not run either: the whole process was stopped (SIGSTOP, a paused VM)
            # or got no CPU.  Not the loop's doing, and its stack would only show it waiting.
            log.warning("the hub's process did not run for %.1f s (stopped, or given no CPU)", now - looked,
                        extra=ev(PAUSED, x_seconds=round(now - looked, 3)))  # fmt: skip
            return  # the loop's beat is as old as the pause: it gets a beat's time to run first
        if since is None and now - beat > self.stall_seconds:
            self._stalled_since = beat
            self._started(now - beat)

    def stop(self) -> None:
        self._stopped.set()

    def _started(self, seconds: float) -> None:
        self.stats.loop_stalls += 1
        frame = sys._current_frames().get(self.loop_thread)
        where = "".join(traceback.format_stack(frame)) if frame is not None else "(the loop's thread is gone)\n"
        log.warning("the event loop has not run for %.1f s; it is at:\n%s", seconds, where.rstrip(),
                    extra=ev(STALLED, x_seconds=round(seconds, 3)))  # fmt: skip

    def _ended(self, seconds: float) -> None:
        self.stats.loop_stall_seconds += seconds
        log.warning("the event loop runs again after %.1f s", seconds,
                    extra=ev(STALL_ENDED, x_seconds=round(seconds, 3)))  # fmt: skip


async def run_loop_watchdog(watchdog: LoopWatchdog) -> None:
    """Beat every ``watchdog.beat_seconds`` from the loop, with the watching thread beside it."""
    thread = threading.Thread(target=watchdog.watch, name="pub0sub-loop-watchdog", daemon=True)
    watchdog.loop_thread = threading.get_ident()
    watchdog.beat()
    thread.start()
    try:
        while True:
            watchdog.beat()
            await trio.sleep(watchdog.beat_seconds)
    finally:
        watchdog.stop()
