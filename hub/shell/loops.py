"""The hub's own tasks: the pump that runs log followers and groups, and the timers.

Each calls into the core and nothing else: the core decides, these only say when.
"""

from __future__ import annotations

import time

import trio

from ..core.consumers import IDLE_TICK, SAVE_INTERVAL, ConsumerRegistry
from ..core.hub import GROUP_TICK_SECONDS, HubCore
from ..storage.store import LogStore


async def run_pump(core: HubCore) -> None:
    """Run the core's ready followers and groups, one step at a time, yielding between steps.

    A step reads one bounded piece of log per topic; yielding after each keeps a replay
    from ``earliest`` from holding up every other connection of the hub.
    """
    work = core.work
    wake = trio.Event()

    def on_work() -> None:
        wake.set()

    work.on_work = on_work
    while True:
        if not work:
            await wake.wait()
            wake = trio.Event()
            continue
        with core.output:  # deliveries of this step leave at its end
            work.run_one()
        await trio.lowlevel.checkpoint()


async def run_heartbeats(core: HubCore) -> None:
    while True:
        await trio.sleep(core.settings.heartbeat_interval / 2)
        core.tick_heartbeats()


async def run_group_deadlines(core: HubCore) -> None:
    """Look for passed ack deadlines every GROUP_TICK_SECONDS while a group awaits acks;
    while none does, sleep until one starts to (an idle hub then has no timer to serve)."""
    awaiting = core.tick_groups()
    while True:
        if awaiting:
            await trio.sleep(GROUP_TICK_SECONDS)
        else:
            started = trio.Event()
            core.work.on_acks_awaited = started.set
            await started.wait()
        awaiting = core.tick_groups()


async def run_rates(core: HubCore) -> None:
    while True:
        await trio.sleep(1.0)
        core.tick_rates()


async def run_retention(core: HubCore, store: LogStore, every: float) -> None:
    while True:
        await trio.sleep(every)
        store.enforce_retention(core.clock.wall_us(), core.keep_from)


async def run_consumer_saves(consumers: ConsumerRegistry) -> None:
    """Positions moved are saved ``SAVE_INTERVAL`` after the change (one save for all the changes
    meanwhile); with no change, the tick (expiry) runs every ``IDLE_TICK``."""
    while True:
        touched = trio.Event()
        consumers.on_touched = touched.set
        with trio.move_on_after(IDLE_TICK):
            await touched.wait()
        consumers.on_touched = None
        if touched.is_set():
            await trio.sleep(SAVE_INTERVAL)
        consumers.tick(time.time())
