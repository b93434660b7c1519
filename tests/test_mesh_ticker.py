"""The one timer that ticks every mesh session of a hub (hub/mesh/session.py: SessionTicker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from hub.core.mesh.status import CloseReason
from hub.mesh.session import SessionTicker


class Timed:
    """A session's protocol as the ticker sees it: how often it wants a tick, and the ticks."""

    def __init__(self, interval: float, *, fails: bool = False) -> None:
        self.interval = interval
        self.fails = fails
        self.ticks: list[float] = []
        self.alive = True
        self.closed: CloseReason | None = None
        self.link = SimpleNamespace(key="12D3KooWtest")

    def tick_interval(self) -> float:
        return self.interval

    def tick(self) -> None:
        self.ticks.append(trio.current_time())
        if self.fails:
            raise RuntimeError("a bug in this session's timers")

    def close(self, reason: CloseReason) -> None:
        self.alive = False
        self.closed = reason


def ticker_with(*protocols: Timed) -> SessionTicker:
    ticker = SessionTicker()
    for protocol in protocols:
        ticker.add(protocol)  # type: ignore[arg-type]
    return ticker


async def test_sessions_tick_together_and_a_shorter_interval_cuts_the_sleep_short(autojump_clock: Any) -> None:
    slow = Timed(0.5)
    ticker = ticker_with(slow)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        await trio.sleep(1.01)
        assert len(slow.ticks) == 2
        fast = Timed(0.05)  # added 0.01 s into a 0.5 s sleep: ticked at its own pace from now
        start = trio.current_time()
        ticker.add(fast)  # type: ignore[arg-type]
        await trio.sleep(0.52)
        assert fast.ticks[0] - start <= 0.05 + 1e-9
        assert len(fast.ticks) == 10
        assert slow.ticks[-1] == fast.ticks[-1]  # one wake-up serves both
        ticker.discard(fast)  # type: ignore[arg-type]
        ticks = len(fast.ticks)
        await trio.sleep(2)
        assert len(fast.ticks) == ticks
        nursery.cancel_scope.cancel()


async def test_a_failing_tick_ends_its_session_and_the_others_keep_ticking(autojump_clock: Any) -> None:
    broken, healthy = Timed(0.5, fails=True), Timed(0.5)
    ticker = ticker_with(broken, healthy)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        await trio.sleep(2.01)
        assert broken.closed is CloseReason.INTERNAL_ERROR and len(broken.ticks) == 1
        assert len(healthy.ticks) == 4
        nursery.cancel_scope.cancel()
