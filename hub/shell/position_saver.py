"""Saving consumer positions off the event loop: one write and fsync in a worker thread for many COMMITs.

The core keeps the bookkeeping (``ConsumerRegistry``: what changed, who waits for a
save); this task only waits until a save is wanted, takes the snapshot in the loop,
writes it in a worker thread so the hub keeps serving, and hands the result back.
COMMITs and position changes that arrive while one save runs are covered by the next.
"""

from __future__ import annotations

import logging

import trio

from ..core.consumers import ConsumerRegistry
from ..core.events import ev

log = logging.getLogger("pub0sub.hub.consumers")


async def run_position_saver(consumers: ConsumerRegistry) -> None:
    wanted = trio.Event()

    def want() -> None:
        wanted.set()

    consumers.on_save_wanted = want
    if consumers.save_wanted:
        want()
    try:
        while True:
            await wanted.wait()
            wanted = trio.Event()
            version, data = consumers.snapshot()
            try:
                await trio.to_thread.run_sync(consumers.file.write, data, version)
            except OSError as exc:
                log.error("cannot save %s: %s", consumers.path, exc, extra=ev("consumers_save_failed"))
                consumers.saved(version, exc)
            else:
                consumers.saved(version, None)
    finally:
        consumers.on_save_wanted = None  # the hub is stopping: later saves run where they are asked for
